#!/usr/bin/env bash
# BREAKOUT's Figs. 10a, 10b–c, 15 and §5's idle footprint on kiln (see bench/breakout/run.py).
#
#   bench/breakout/run.sh          Figs. 10a and 15: 6 alternating rounds of 20 s per copy, 10
#                                  streams (~15 min); writes bench/results/breakout.{md,json}
#   bench/breakout/run.sh --fig 10bc   Figs. 10b–c: authorize under an open loop at 50–500
#                                  requests/s, ordinary and decontainerized, 30 s measured per
#                                  rate (~10 min); bench/results/breakout-load.{md,json}
#   bench/breakout/run.sh --fig idle   100 idle copies of authorize, ordinary and
#                                  decontainerized, on a kiln each (~6 min);
#                                  bench/results/breakout-idle.{md,json}
#   --fig 10a,15,10bc,idle (or BREAKOUT_FIGS=...)   several; the default is 10a,15
#   bench/breakout/run.sh --quick  2 rounds of 5 s, 2 rates of 8 s, 10 idle copies; results
#                                  in bench/work/breakout/results-quick/
#   BREAKOUT_BENCHMARKS=maze,shift ...   a subset (authorize, upload, status, banking,
#                                  autocomplete, maze, shift)
#   BREAKOUT_ROUNDS=4 BREAKOUT_ROUND_S=10 ...   rounds per copy and their seconds
#   BREAKOUT_RATES=50,500 BREAKOUT_LOAD_S=60 BREAKOUT_IDLE_COPIES=50 ...   Figs. 10b–c's rates
#                                  and measured seconds per rate, the idle copies
#   KILN_BIN=/path/to/kiln ...     a kiln binary other than target/release/kiln
#
# Builds kiln and loadgen (release) if target/release/{kiln,loadgen} are missing, starts its own
# kiln (data dir bench/work/breakout/kiln; one per part) and stops it, and what it started, on
# any exit. Must run as root.
set -euo pipefail

SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/breakout
COMMAND="$({ env | grep '^BREAKOUT_\|^KILN_BIN=' || true; } | sort | tr '\n' ' ')bench/breakout/run.sh${*:+ $*}"
QUICK=0
FIGS=${BREAKOUT_FIGS:-}
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1 ;;
        --fig) FIGS=${FIGS:+$FIGS,}${2:?--fig needs 10a, 15, 10bc or idle}; shift ;;
        --fig=*) FIGS=${FIGS:+$FIGS,}${1#--fig=} ;;
        -h | --help) sed -n '2,24p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
FIGS=${FIGS:-10a,15}
has_fig() { case ",$FIGS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for fig in ${FIGS//,/ }; do
    case $fig in 10a | 15 | 10bc | idle) ;; *) echo "run.sh: unknown figure $fig (10a, 15, 10bc, idle)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }
if [ "$QUICK" = 1 ]; then
    OUT=$WORK/results-quick
    ROUNDS=(--rounds 2 --round-s 5 --warmup-s 2)
    LOAD=(--rates "${BREAKOUT_RATES:-50,200}" --load-s "${BREAKOUT_LOAD_S:-8}" --load-warmup-s 2)
    IDLE_COPIES=${BREAKOUT_IDLE_COPIES:-10}
else
    OUT=$ROOT/bench/results
    ROUNDS=(--rounds "${BREAKOUT_ROUNDS:-6}" --round-s "${BREAKOUT_ROUND_S:-20}" --warmup-s 5)
    LOAD=(--rates "${BREAKOUT_RATES:-50,100,200,300,400,500}" --load-s "${BREAKOUT_LOAD_S:-30}" --load-warmup-s 5)
    IDLE_COPIES=${BREAKOUT_IDLE_COPIES:-100}
fi
# Figs. 10b–c: each copy on a kiln of its own, whose short idle TTL lets the tracing instance go.
LOAD_TTL=20
# The idle footprint: the ordinary copies' instances must outlive the run, the fast copies'
# tracing instances must not.
IDLE_TTL_ORDINARY=3600
IDLE_TTL_FAST=10
say() { echo "[breakout/run.sh $(date +%H:%M:%S)] $*"; }

KILN_BIN=${KILN_BIN:-$ROOT/target/release/kiln}
LOADGEN=$ROOT/target/release/loadgen
KILN_DATA=$WORK/kiln
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
CPUACCT=
# cgroup v1 keeps cpuacct apart from the cpu hierarchy kiln uses: kiln (and what it has started)
# goes into a cpuacct cgroup of its own, so everything it starts later is counted there.
account_kiln() {
    CPUACCT=
    [ -d /sys/fs/cgroup/cpuacct ] || return 0
    CPUACCT=/sys/fs/cgroup/cpuacct/kiln-bench-$KILN_PID
    mkdir -p "$CPUACCT"
    local pids=("$KILN_PID") i=0 child
    while [ $i -lt ${#pids[@]} ]; do
        for child in $(cat /proc/"${pids[$i]}"/task/*/children 2>/dev/null); do pids+=("$child"); done
        i=$((i + 1))
    done
    for pid in "${pids[@]}"; do echo "$pid" >"$CPUACCT/cgroup.procs" 2>/dev/null || true; done
}
stop_all() {
    stop_kiln
    if [ -n "$CPUACCT" ]; then
        rmdir "$CPUACCT" 2>/dev/null || true
        CPUACCT=
    fi
}
trap 'status=$?; trap - EXIT INT TERM; stop_all; exit $status' EXIT
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
if ! "$VENV/bin/python" -c "import numpy, boto3" 2>/dev/null; then
    say "installing bench/requirements.txt into .venv"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r bench/requirements.txt
fi

# One kiln per part: start_part LOG-NAME FLAGS...; servers.json for run.py.
start_part() {
    local name=$1
    shift
    start_kiln "$WORK/$name.log" "$@"
    account_kiln
    say "kiln for $name: $KILN_URL (pid $KILN_PID)"
    printf '{"kiln": {"url": "%s", "pid": %s, "data_dir": "%s", "cpuacct": "%s"}}\n' \
        "$KILN_URL" "$KILN_PID" "$KILN_DATA" "$CPUACCT" >"$WORK/servers.json"
}
RUN=("$VENV/bin/python" "$HERE/run.py" --servers "$WORK/servers.json" --loadgen "$LOADGEN" --out "$OUT" --command "$COMMAND")

if has_fig 10a || has_fig 15; then
    BENCHMARKS=${BREAKOUT_BENCHMARKS:-authorize,upload,status,banking,autocomplete,maze,shift}
    has_fig 10a || BENCHMARKS=shift
    has_fig 15 || BENCHMARKS=${BENCHMARKS//,shift/}
    start_part kiln --memory-budget-mb 8192 --shutdown-grace 5
    "${RUN[@]}" --figs 10a,15 --benchmarks "$BENCHMARKS" "${ROUNDS[@]}"
    stop_all
fi
if has_fig 10bc; then
    for part in ordinary fast; do
        start_part kiln-load-$part --memory-budget-mb 8192 --shutdown-grace 5 --idle-ttl $LOAD_TTL
        "${RUN[@]}" --figs 10bc --load-part $part --idle-ttl $LOAD_TTL "${LOAD[@]}" --parts-dir "$WORK/load"
        stop_all
    done
    "${RUN[@]}" --figs 10bc --load-part report --idle-ttl $LOAD_TTL "${LOAD[@]}" --parts-dir "$WORK/load"
fi
if has_fig idle; then
    start_part kiln-idle-ordinary --memory-budget-mb 16384 --shutdown-grace 5 --idle-ttl $IDLE_TTL_ORDINARY
    "${RUN[@]}" --figs idle --idle-part ordinary --idle-ttl $IDLE_TTL_ORDINARY --idle-copies "$IDLE_COPIES" --parts-dir "$WORK/idle"
    stop_all
    start_part kiln-idle-fast --memory-budget-mb 16384 --shutdown-grace 5 --idle-ttl $IDLE_TTL_FAST
    "${RUN[@]}" --figs idle --idle-part fast --idle-ttl $IDLE_TTL_FAST --idle-copies "$IDLE_COPIES" --parts-dir "$WORK/idle"
    stop_all
    "${RUN[@]}" --figs idle --idle-part report --parts-dir "$WORK/idle"
fi
