#!/usr/bin/env bash
# kiln's session benchmark in one command: the XFaaS evaluation (RO, RMW, RMW_Linear with 1 KB and
# 16 KB values) with the state in kiln sessions, in a real redis-server and in the object store,
# side by side, for Python and Node.js functions, and kiln sessions for a wasm function; then the start-up of a
# session's wasm request (Fork, CopySession, ColdSession, a plain cold start). See bench/README.md, "Sessions".
#
#   bench/sessions/run.sh          1, 5, 10, 20, 30 clients; writes bench/results/sessions.{md,json,png}
#   bench/sessions/run.sh --quick  1 and 5 clients, 1 KB, short windows (bench/work/sessions/results-quick/)
#
# Installs what it needs (redis-server, the functions' client libraries), builds kiln and loadgen
# (release), waits for a quiet machine, starts redis-server and kiln, and stops both on exit.
# Must run as root, as `kiln up` does.
set -euo pipefail
SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/sessions
QUICK=()
OUT=$ROOT/bench/results
for arg in "$@"; do
    case $arg in
        --quick) QUICK=(--quick) OUT=$WORK/results-quick ;;
        -h | --help) sed -n '2,11p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
say() { echo "[sessions/run.sh $(date +%H:%M:%S)] $*"; }
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock -n 9 || { echo "run.sh: another bench/sessions/run.sh is running" >&2; exit 1; }

scripts/setup-test-env.sh
if ! command -v redis-server >/dev/null; then
    say "installing redis-server"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if ! .venv/bin/python -c "import numpy, matplotlib" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi

# The functions' packages: the code plus each language's usual clients (redis-py and boto3;
# ioredis and the AWS SDK for JavaScript v3), installed once per requirements change.
FN=$WORK/fn
mkdir -p "$FN/python" "$FN/node"
cp "$HERE/functions/python/app.py" "$FN/python/"
cp "$HERE/functions/node/index.js" "$HERE/functions/node/package.json" "$FN/node/"
if ! cmp -s "$HERE/functions/python/requirements.txt" "$FN/python/.requirements"; then
    say "installing the Python function's clients"
    rm -rf "$FN/python/lib"
    .venv/bin/pip install --quiet --disable-pip-version-check --target "$FN/python" \
        -r "$HERE/functions/python/requirements.txt"
    cp "$HERE/functions/python/requirements.txt" "$FN/python/.requirements"
fi
if ! cmp -s "$HERE/functions/node/package.json" "$FN/node/.package.json"; then
    say "installing the Node function's clients"
    (cd "$FN/node" && npm install --silent --no-audit --no-fund --omit=dev >/dev/null)
    cp "$HERE/functions/node/package.json" "$FN/node/.package.json"
fi

# The wasm function: C against kiln's session header (clang and wasi-libc come with the test environment).
mkdir -p "$FN/wasm"
clang --target=wasm32-wasi --sysroot=/usr -O2 -I "$ROOT/runtimes/wasm/c" -o "$FN/wasm/function.wasm" \
    "$HERE/functions/wasm/xfaas.c"

say "building kiln and loadgen (release)"
./scripts/setup-build-env.sh
cargo build --release --quiet -p kiln -p loadgen
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release

WAITED=0
while awk '{ exit !($1 >= 0.5) }' /proc/loadavg && [ "$WAITED" -lt 1200 ]; do
    [ $((WAITED % 60)) = 0 ] && say "load average $(cut -d' ' -f1 /proc/loadavg) >= 0.5; waiting for a quiet machine"
    sleep 10
    WAITED=$((WAITED + 10))
done
say "load average $(cut -d' ' -f1-3 /proc/loadavg)"

KILN_BIN=$TARGET/kiln exec .venv/bin/python "$HERE/xfaas.py" --loadgen "$TARGET/loadgen" \
    --functions "$FN" --work "$WORK" --out "$OUT" --command "bench/sessions/run.sh${*:+ $*}" "${QUICK[@]}"
