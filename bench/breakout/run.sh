#!/usr/bin/env bash
# BREAKOUT's Fig. 10a and Fig. 15 on kiln, in one command (see bench/breakout/run.py).
#
#   bench/breakout/run.sh          6 alternating rounds of 20 s per copy, 10 streams
#                                  (~15 min); writes bench/results/breakout.{md,json}
#   bench/breakout/run.sh --quick  2 rounds of 5 s; results in bench/work/breakout/
#   BREAKOUT_BENCHMARKS=maze,shift ...   a subset (authorize, upload, status, banking,
#                                  autocomplete, maze, shift)
#   BREAKOUT_ROUNDS=4 BREAKOUT_ROUND_S=10 ...   rounds per copy and their seconds
#
# Builds kiln and loadgen (release) if target/release/{kiln,loadgen} are missing, starts its own
# kiln (data dir bench/work/breakout/kiln) and stops it, and what it started, on any exit.
# Must run as root.
set -euo pipefail

SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/breakout
QUICK=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        -h | --help) sed -n '2,13p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }
if [ "$QUICK" = 1 ]; then
    OUT=$WORK/results-quick
    ROUNDS=(--rounds 2 --round-s 5 --warmup-s 2)
else
    OUT=$ROOT/bench/results
    ROUNDS=(--rounds "${BREAKOUT_ROUNDS:-6}" --round-s "${BREAKOUT_ROUND_S:-20}" --warmup-s 5)
fi
COMMAND="$({ env | grep '^BREAKOUT_' || true; } | sort | tr '\n' ' ')bench/breakout/run.sh${*:+ $*}"
say() { echo "[breakout/run.sh $(date +%H:%M:%S)] $*"; }

KILN_BIN=$ROOT/target/release/kiln
LOADGEN=$ROOT/target/release/loadgen
KILN_DATA=$WORK/kiln
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap 'status=$?; trap - EXIT INT TERM; stop_kiln; exit $status' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK" "$OUT"
exec 9>"$WORK/.lock"
flock -n 9 || { echo "run.sh: another bench/breakout/run.sh is running" >&2; exit 1; }
if [ ! -x "$KILN_BIN" ] || [ ! -x "$LOADGEN" ]; then
    say "building kiln and loadgen (release)"
    ./scripts/setup-build-env.sh
    cargo build --release -p kiln -p loadgen
fi
VENV=$ROOT/.venv
[ -x "$VENV/bin/python" ] || ./scripts/setup-test-env.sh

start_kiln "$WORK/kiln.log" --memory-budget-mb 8192 --shutdown-grace 5
say "kiln: $KILN_URL (pid $KILN_PID)"
printf '{"kiln": {"url": "%s", "pid": %s, "data_dir": "%s"}}\n' "$KILN_URL" "$KILN_PID" "$KILN_DATA" >"$WORK/servers.json"
"$VENV/bin/python" "$HERE/run.py" --servers "$WORK/servers.json" --loadgen "$LOADGEN" --out "$OUT" \
    --benchmarks "${BREAKOUT_BENCHMARKS:-authorize,upload,status,banking,autocomplete,maze,shift}" --command "$COMMAND" "${ROUNDS[@]}"
