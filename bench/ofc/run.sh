#!/usr/bin/env bash
# kiln's object cache against OFC's evaluation in one command: six image functions in Python (Pillow) and
# Node.js (sharp) and two pipelines, with no cache over a backing store 5 ms away, with Redis, and with kiln's
# object cache (hit and miss), side by side. See bench/README.md, "Object cache".
#
#   bench/ofc/run.sh          n = 20; writes bench/results/ofc.{md,json,png}, ofc-dataset.jsonl and ofc-ml.md
#   bench/ofc/run.sh --quick  n = 3 (bench/work/ofc/results-quick/)
#   bench/ofc/run.sh --macro  the FAASLOAD-like macro benchmark instead (8 and 24 tenants, ~20 min); writes
#                             bench/results/faasload.{md,json,png} (with --quick: 4 tenants, 20 s)
#
# Installs what it needs (redis-server, Pillow, sharp, the functions' clients), builds kiln (release), waits for
# a quiet machine, and stops everything it started on exit. Must run as root, as `kiln up` does.
set -euo pipefail
SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/ofc
QUICK=()
MACRO=
OUT=$ROOT/bench/results
for arg in "$@"; do
    case $arg in
        --quick) QUICK=(--quick) OUT=$WORK/results-quick ;;
        --macro) MACRO=1 ;;
        -h | --help) sed -n '2,12p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
say() { echo "[ofc/run.sh $(date +%H:%M:%S)] $*"; }
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock -n 9 || { echo "run.sh: another bench/ofc/run.sh is running" >&2; exit 1; }

scripts/setup-test-env.sh
if ! command -v redis-server >/dev/null; then
    say "installing redis-server"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if ! .venv/bin/python -c "import numpy, matplotlib, PIL, redis" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi

# The functions' packages: the code plus Pillow or sharp and each language's usual clients, installed once per
# requirements change.
FN=$WORK/fn
mkdir -p "$FN/python" "$FN/node"
cp "$HERE/functions/python/app.py" "$FN/python/"
cp "$HERE/functions/node/index.js" "$HERE/functions/node/package.json" "$FN/node/"
if ! cmp -s "$HERE/functions/python/requirements.txt" "$FN/python/.requirements"; then
    say "installing the Python function's libraries"
    find "$FN/python" -mindepth 1 -maxdepth 1 ! -name app.py -exec rm -rf {} +
    .venv/bin/pip install --quiet --disable-pip-version-check --target "$FN/python" \
        -r "$HERE/functions/python/requirements.txt"
    cp "$HERE/functions/python/requirements.txt" "$FN/python/.requirements"
fi
if ! cmp -s "$HERE/functions/node/package.json" "$FN/node/.package.json"; then
    say "installing the Node function's libraries"
    (cd "$FN/node" && npm install --silent --no-audit --no-fund --omit=dev >/dev/null)
    cp "$HERE/functions/node/package.json" "$FN/node/.package.json"
fi

say "building kiln (release)"
./scripts/setup-build-env.sh
cargo build --release --quiet -p kiln
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release

WAITED=0
while awk '{ exit !($1 >= 0.5) }' /proc/loadavg && [ "$WAITED" -lt 1200 ]; do
    [ $((WAITED % 60)) = 0 ] && say "load average $(cut -d' ' -f1 /proc/loadavg) >= 0.5; waiting for a quiet machine"
    sleep 10
    WAITED=$((WAITED + 10))
done
say "load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "$MACRO" ]; then
    KILN_BIN=$TARGET/kiln exec .venv/bin/python "$HERE/faasload.py" --functions "$FN" --work "$WORK" --out "$OUT" \
        --dataset "$ROOT/bench/results/ofc-dataset.jsonl" --command "bench/ofc/run.sh${*:+ $*}" "${QUICK[@]}"
fi
KILN_BIN=$TARGET/kiln .venv/bin/python "$HERE/ofc.py" --functions "$FN" --work "$WORK" --out "$OUT" \
    --command "bench/ofc/run.sh${*:+ $*}" "${QUICK[@]}"

say "the memory models' accuracy (OFC Table 1) on the invocations just recorded"
cargo run --release --quiet -p kiln --example predict_accuracy -- "${OUT#"$ROOT"/}/ofc-dataset.jsonl" \
    "$OUT/ofc-ml.md" >/dev/null
say "results in $OUT (ofc.md, ofc-ml.md)"
