#!/usr/bin/env bash
# kiln's object store benchmark in one command: GET and PUT latency and throughput for 1 KB,
# 128 KB, 1 MB and 10 MB objects through kiln's embedded store and in remote mode (a kiln
# fronting a --store-only kiln 5 ms away each way), beside the same operations on a local file.
#
#   bench/objects/run.sh            release build; writes bench/results/objects.{md,json,png}
#   bench/objects/run.sh --quick    n/10, debug build; results in bench/work/objects/results
#
# Needs root (kiln up, network namespaces). Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$(realpath "$0")")/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/objects
PROFILE=release
OUT=$ROOT/bench/results
EXTRA=()
for arg in "$@"; do
    case $arg in
        --quick) PROFILE=debug; OUT=$WORK/results; EXTRA+=(--quick) ;;
        -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/objects/run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
./scripts/setup-test-env.sh
if ! .venv/bin/python -c "import matplotlib" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi
./scripts/setup-build-env.sh
if [ "$PROFILE" = release ]; then cargo build --release --bin kiln; else cargo build --bin kiln; fi
rm -rf "$WORK"
mkdir -p "$WORK"
KILN_BIN=$ROOT/target/$PROFILE/kiln exec "$ROOT/.venv/bin/python" bench/objects/bench.py \
    --work "$WORK" --out "$OUT" --command "bench/objects/run.sh${*:+ $*}" "${EXTRA[@]}"
