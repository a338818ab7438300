#!/usr/bin/env bash
# kiln's burst benchmark in one command. See bench/burst/README.md.
#
#   bench/burst/run.sh          bursts of 4, 16 and 64, and of 16 after 620 s idle
#                               (BURST_IDLE_S); writes bench/results/burst/burst.{md,json}
#   bench/burst/run.sh --quick  bursts of 4 and 16 (results in bench/work/burst/)
#   bench/burst/run.sh --runtimes node,provided   those runtimes only, bursts of 4, 16 and 64,
#                               no idle phase; writes bench/results/burst/node-provided/
#   BURST_KILN_ARGS="--warm-standbys 0" bench/burst/run.sh ...   extra `kiln up` flags
#
# Installs what it needs (the repo venv plus bench/requirements.txt), builds kiln (release) only
# if target/release/kiln is missing, starts its own kiln (data dir bench/work/burst/kiln), runs
# bench/burst/burst.py against it, and stops every process it started on any exit (trap).
# Must run as root, as `kiln up` does. Needs node and python3 on PATH (kiln's runtimes) and
# clang with wasi-libc for the wasm function (skipped, with a note, without them).
set -euo pipefail

SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/burst
QUICK=()
RUNTIMES=()
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=(--quick) ;;
        --runtimes) RUNTIMES=(--runtimes "${2:?--runtimes needs a list}"); shift ;;
        -h | --help) sed -n '2,14p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ ${#QUICK[@]} -eq 0 ] && [ ${#RUNTIMES[@]} -gt 0 ]; then
    OUT=$ROOT/bench/results/burst/${RUNTIMES[1]//,/-}
    IDLE=()
elif [ ${#QUICK[@]} -eq 0 ]; then
    OUT=$ROOT/bench/results/burst
    # The idle phase: a burst of 16 again after this long without requests (past the idle TTL).
    IDLE=(--idle "${BURST_IDLE_S:-620}")
else
    OUT=$WORK
    IDLE=()
fi
COMMAND="bench/burst/run.sh${QUICK[*]:+ ${QUICK[*]}}${RUNTIMES[*]:+ ${RUNTIMES[*]}}"
say() { echo "[burst/run.sh $(date +%H:%M:%S)] $*"; }
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }

# ------------------------------------------------------------------ cleanup, on every exit
KILN_PID=
DRIVER=
KILN_DATA=$WORK/kiln
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"  # stop_kiln
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ -n "$DRIVER" ] && kill -0 "$DRIVER" 2>/dev/null; then
        kill -TERM "$DRIVER" 2>/dev/null || true
        wait "$DRIVER" 2>/dev/null || true
    fi
    stop_kiln
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock -n 9 || { echo "run.sh: another bench/burst/run.sh is running" >&2; exit 1; }

# ------------------------------------------------------------------ dependencies and build
say "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for tool in node python3; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not on PATH" >&2; exit 1; }
done
scripts/setup-test-env.sh
if ! .venv/bin/python -c "import numpy, boto3" 2>/dev/null; then
    say "installing bench/requirements.txt into .venv"
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
if [ ! -x "$BIN/kiln" ]; then
    say "building kiln (release)"
    ./scripts/setup-build-env.sh
    cargo build --release --quiet -p kiln -p loadgen
fi
KILN_BIN=$BIN/kiln

# ------------------------------------------------------------------ kiln
# A long idle TTL, so the second burst finds the first one's instances; a budget that books 64
# instances of each function with room to spare; kiln's defaults otherwise (one runtime standby
# per runtime, spare forks, prebake at deploy).
KILN_ARGS="--idle-ttl 600 --memory-budget-mb 16384 --snapshot-memory-mb 8192 --shutdown-grace 5 ${BURST_KILN_ARGS:-}"
# A kiln killed in an earlier run leaves its code-slot mount behind; detach it before removing.
LOG=$WORK/kiln.log
# shellcheck disable=SC2086 # KILN_ARGS is a list of flags
start_kiln "$LOG" $KILN_ARGS || exit 1
say "kiln: $KILN_URL (pid $KILN_PID)"

# ------------------------------------------------------------------ measure
# In the background and waited for, so that a SIGTERM runs the trap at once (bash defers traps
# during a foreground command); the trap stops the driver first.
.venv/bin/python "$HERE/burst.py" --kiln "$KILN_URL" --pid "$KILN_PID" --data-dir "$KILN_DATA" \
    --kiln-args "kiln up $KILN_ARGS" --work "$WORK" --out "$OUT" --command "$COMMAND" "${QUICK[@]}" "${RUNTIMES[@]}" "${IDLE[@]}" &
DRIVER=$!
wait "$DRIVER"
DRIVER=
say "results in ${OUT#"$ROOT"/}/"
