#!/usr/bin/env bash
# kiln's start-path benchmark in one command. See bench/README.md, "Start paths".
#
#   bench/startpaths/run.sh          n = 100 cold starts per case; writes bench/results/startpaths.*
#   bench/startpaths/run.sh --quick  n = 10, k = 5 (results in bench/work/startpaths/results-quick/)
#   bench/startpaths/run.sh --n=40   n = 40 cold starts per case (results in bench/results/)
#   bench/startpaths/run.sh --k=20   k = 20 idle instances per case in the memory phase (default 100)
#
# Installs what it needs (the repo venv, bench/startpaths/requirements.txt, the functions'
# packages under bench/work/startpaths/fn), builds kiln (release), waits for a quiet machine
# (1-minute load average below 0.5, up to STARTPATHS_QUIET_WAIT_S = 2400 s), then starts its own
# kiln three times: with --idle-ttl 0 for the latency phase (every measured invocation is a cold
# start), once without runtime standbys (coldest, hot) and once with them (warm), and with a long
# TTL for the memory phase (instances held idle). Stops everything it started on any exit
# (trap). Must run as root, as `kiln up` does.
set -euo pipefail

SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/startpaths
N=100
K=100
QUICK=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 N=10 K=5 ;;
        --n=*) N=${arg#--n=} ;;
        --k=*) K=${arg#--k=} ;;
        -h | --help) sed -n '2,15p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then OUT=$WORK/results-quick; else OUT=$ROOT/bench/results; fi
COMMAND="bench/startpaths/run.sh${*:+ $*}"
QUIET_WAIT_S=${STARTPATHS_QUIET_WAIT_S:-2400}
say() { echo "[startpaths/run.sh $(date +%H:%M:%S)] $*"; }
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
flock -n 9 || { echo "run.sh: another bench/startpaths/run.sh is running" >&2; exit 1; }

# ------------------------------------------------------------------ dependencies and build
say "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for tool in node npm python3 cargo; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not on PATH" >&2; exit 1; }
done
scripts/setup-test-env.sh
if ! .venv/bin/python -c "import numpy, scipy, matplotlib, boto3" 2>/dev/null; then
    say "installing bench/startpaths/requirements.txt into .venv"
    .venv/bin/pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
fi
say "generating the function packages"
.venv/bin/python "$HERE/generate.py" "$WORK/fn"
say "building kiln (release)"
./scripts/setup-build-env.sh
cargo build --release --quiet -p kiln
KILN_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln
# The tree as it was built: the report states it, whatever changes while the benchmark runs.
mkdir -p "$WORK/raw"
.venv/bin/python - "$WORK/raw/build.json" <<'PY'
import json, subprocess, sys
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout
status = [l for l in git("status", "--porcelain").splitlines() if l]
json.dump({"git_commit": git("rev-parse", "HEAD").strip(),
           "git_modified": [l[3:] for l in status if not l.startswith("??")],
           "git_untracked": [l[3:] for l in status if l.startswith("??")]}, open(sys.argv[1], "w"))
PY

# ------------------------------------------------------------------ quiet machine
WAITED=0
while awk -v max=0.5 '{ exit !($1 >= max) }' /proc/loadavg; do
    if [ "$WAITED" -ge "$QUIET_WAIT_S" ]; then
        say "still busy after ${WAITED} s (load $(cut -d' ' -f1-3 /proc/loadavg)); measuring anyway"
        break
    fi
    [ $((WAITED % 60)) = 0 ] && say "load average $(cut -d' ' -f1 /proc/loadavg) >= 0.5; waiting for a quiet machine (up to ${QUIET_WAIT_S} s)"
    sleep 10
    WAITED=$((WAITED + 10))
done
QUIET_INFO="{\"waited_s\": $WAITED, \"loadavg_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"limit\": 0.5}"
say "load average $(cut -d' ' -f1-3 /proc/loadavg) after waiting ${WAITED} s"
echo "$QUIET_INFO" >"$WORK/raw/quiet.json"

# ------------------------------------------------------------------ kiln
KILN_URL=
# start_kiln TTL STANDBYS [BUDGET_MB]: starts kiln on the data dir with that idle TTL, that many
# runtime standbys per runtime and that memory budget (booked, not used: 22000 MB by default),
# and waits for its "listening on" line.
start_kiln() {
    local log=$WORK/kiln-ttl$1-standbys$2.log
    "$KILN_BIN" up --listen 127.0.0.1:0 --data-dir "$KILN_DATA" --no-aws-profile \
        --idle-ttl "$1" --warm-standbys "$2" --memory-budget-mb "${3:-22000}" --snapshot-memory-mb 4096 \
        --shutdown-grace 5 >"$log" 2>&1 &
    KILN_PID=$!
    KILN_URL=
    for _ in $(seq 600); do
        KILN_URL=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n1 | cut -d' ' -f3 || true)
        [ -n "$KILN_URL" ] && break
        kill -0 "$KILN_PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$KILN_URL" ] || { echo "run.sh: kiln did not start:" >&2; cat "$log" >&2; exit 1; }
    say "kiln --idle-ttl $1 --warm-standbys $2: $KILN_URL (pid $KILN_PID)"
}
# driver PHASE ARGS...: runs one phase in the background and waits, so that a SIGTERM runs the
# trap at once (bash defers traps during a foreground command).
driver() {
    .venv/bin/python "$HERE/startpaths.py" "$@" --work "$WORK/raw" --kiln "$KILN_URL" \
        --data-dir "$KILN_DATA" --kiln-bin "$KILN_BIN" --packages "$WORK/fn" &
    DRIVER=$!
    wait "$DRIVER"
    DRIVER=
}

# A kiln killed in an earlier run leaves its code-slot mount behind; detach it before removing.
awk -v dir="$(realpath -m "$KILN_DATA")/" 'index($2 "/", dir) == 1 { print $2 }' /proc/self/mounts |
    sort -r | xargs -r -n1 umount -l
rm -rf "$KILN_DATA" "$WORK/raw"/latency*.json "$WORK/raw/memory.json"
start_kiln 0 0
driver deploy
driver latency --n "$N" --paths coldest,hot
stop_kiln
start_kiln 0 1
driver latency --n "$N" --paths warm --tag warm
stop_kiln
# A warm instance is a whole runtime process, as a coldest one is; the memory phase holds
# coldest and hot instances.
# K instances book K × MemorySize (100 × 1024 MB for Big), far more than they use (≤ 130 MB
# each): the budget is raised so that kiln does not refuse them.
start_kiln 3600 0 $((K * 1100 + 8000))
driver memory --k "$K" --paths coldest,hot
stop_kiln
driver report --out "$OUT" --command "$COMMAND" --quiet-info "$QUIET_INFO"
say "results in ${OUT#"$ROOT"/}/"
