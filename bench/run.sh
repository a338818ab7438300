#!/usr/bin/env bash
# kiln's core-invoke benchmark in one command. See bench/README.md.
#
#   bench/run.sh            release build; writes bench/results/core-invoke.{md,json,png}
#   bench/run.sh --quick    small n, for working on the harness (results in bench/work/)
#   bench/run.sh --debug    debug build of kiln and loadgen (results in bench/work/)
#   bench/run.sh --perf     instead of the benchmark: where kiln's CPU goes per invocation
#                           (perf + strace; report in bench/work/profile/report.md)
#   bench/run.sh --guard    instead of the benchmark, in about a minute: kiln's CPU per warm
#                           invoke as a ratio to the bare servers' in the same run, against the
#                           committed bench/results/guard/baseline.json (--guard --baseline
#                           writes it); report in bench/work/guard/guard.md
#   BENCH_KILN_ARGS="--object-cache on" bench/run.sh ...   extra `kiln up` flags for any mode
#   BENCH_KILN_BIN=/path/to/kiln bench/run.sh ...           another kiln binary (A/B runs)
#   BENCH_CONSOLE=1 bench/run.sh ...     with a console open on kiln throughout: the overview's
#                           requests every 2 s and every function's log streamed
#                           (bench/console_viewer.py)
#
# It installs what it needs (the repo venv plus bench/requirements.txt), builds kiln and
# bench/loadgen, starts its own kiln (data dir bench/work/kiln) and the three floor servers, runs
# bench/bench.py against them, and stops every process it started on any exit (trap).
# Must run as root, as `kiln up` does. Needs node and python3 on PATH (kiln's runtimes).
set -euo pipefail

SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
BENCH=$ROOT/bench
WORK=$BENCH/work
PROFILE=release
QUICK=()
PERF=0
GUARD=()
BASELINE=()
for arg in "$@"; do
    case $arg in
        --quick) QUICK=(--quick) ;;
        --debug) PROFILE=debug ;;
        --perf) PERF=1 ;;
        --guard) GUARD=(--command "${BENCH_CONSOLE:+BENCH_CONSOLE=1 }bench/run.sh $*") ;;
        --baseline) BASELINE=(--baseline) ;;
        -h | --help) sed -n '2,19p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$PROFILE" = release ] && [ ${#QUICK[@]} -eq 0 ]; then
    OUT=${BENCH_OUT:-$BENCH/results}
else
    OUT=${BENCH_OUT:-$WORK/results-$PROFILE${QUICK:+-quick}}
fi
COMMAND="${BENCH_CONSOLE:+BENCH_CONSOLE=1 }bench/run.sh${*:+ $*}"
say() { echo "[run.sh $(date +%H:%M:%S)] $*"; }

# ------------------------------------------------------------------ cleanup, on every exit
PIDS=()
DRIVER=
KILN_DATA=$WORK/kiln
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    if [ -n "$DRIVER" ] && kill -0 "$DRIVER" 2>/dev/null; then
        kill -TERM "$DRIVER" 2>/dev/null || true
        wait "$DRIVER" 2>/dev/null || true
    fi
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    # kiln stops its instances on SIGTERM; give everything up to 20 s.
    local hard=0
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "pid $pid ignored SIGTERM, killing it"
            kill -KILL "$pid" 2>/dev/null || true
            hard=1
        fi
    done
    if [ "$hard" = 1 ] && [ -d "$KILN_DATA" ]; then
        # A hard-killed kiln leaves its sandboxes behind: kill what is left in its own cgroups
        # (named after its data dir, as in crates/kiln/src/server.rs).
        local hash procs
        hash=$(printf '%s' "$(realpath "$KILN_DATA")" | sha256sum | cut -c1-12)
        for procs in /sys/fs/cgroup/pids/kiln-"$hash"/*/cgroup.procs /sys/fs/cgroup/kiln-"$hash"/*/cgroup.procs; do
            [ -f "$procs" ] || continue
            for pid in $(cat "$procs"); do kill -KILL "$pid" 2>/dev/null || true; done
        done
    fi
    [ ${#PIDS[@]} -eq 0 ] || say "stopped ${#PIDS[@]} servers"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# One run at a time: a second one would wipe this one's kiln data dir (and share its cgroups).
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
if ! flock -n 9; then
    say "another bench/run.sh is running; waiting for it (up to 15 min)"
    flock -w 900 9 || { echo "bench/run.sh: gave up waiting for the other run" >&2; exit 1; }
fi

# ------------------------------------------------------------------ dependencies and builds
say "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
scripts/setup-test-env.sh
if ! .venv/bin/python -c "import numpy, matplotlib, boto3" 2>/dev/null; then
    say "installing bench/requirements.txt into .venv"
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi
for tool in node python3 cargo; do
    command -v "$tool" >/dev/null || { echo "bench/run.sh: $tool is not on PATH" >&2; exit 1; }
done
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# An A/B run with BENCH_KILN_BIN builds only the load generator and the relay.
PACKAGES=(-p loadgen)
[ -n "${BENCH_KILN_BIN:-}" ] || PACKAGES+=(-p kiln)
if [ "$PROFILE" = release ]; then
    say "building ${PACKAGES[*]} (release)"
    ./scripts/setup-build-env.sh
    cargo build --release --quiet "${PACKAGES[@]}"
    BIN=$TARGET_DIR/release
else
    say "building ${PACKAGES[*]} (debug)"
    ./scripts/setup-build-env.sh
    cargo build --quiet "${PACKAGES[@]}"
    BIN=$TARGET_DIR/debug
fi

# ------------------------------------------------------------------ servers
rm -rf "$KILN_DATA" "$WORK"/*.log "$WORK/servers.json"
mkdir -p "$WORK"
SERVER_URL=
SERVER_PID=
# start NAME CMD...: runs CMD in the background (log in bench/work/NAME.log) and waits for
# its "listening on http://HOST:PORT" line.
start() {
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    SERVER_URL=
    for _ in $(seq 600); do
        SERVER_URL=$(grep -o 'listening on http://[0-9.:]*' "$WORK/$name.log" | head -n1 | cut -d' ' -f3 || true)
        [ -n "$SERVER_URL" ] && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "bench/run.sh: $name exited during start:" >&2
            cat "$WORK/$name.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    if [ -z "$SERVER_URL" ]; then
        echo "bench/run.sh: $name did not start within 60 s:" >&2
        cat "$WORK/$name.log" >&2
        exit 1
    fi
    say "$name: $SERVER_URL (pid $SERVER_PID)"
}

KILN=${BENCH_KILN_BIN:-$BIN/kiln}
start kiln "$KILN" up --listen 127.0.0.1:0 --data-dir "$KILN_DATA" --no-aws-profile \
    --idle-ttl 3600 --memory-budget-mb 8192 --shutdown-grace 5 ${BENCH_KILN_ARGS:-}
KILN_URL=$SERVER_URL KILN_PID=$SERVER_PID
start floor-node node "$BENCH/floors/node_http.js"
NODE_URL=$SERVER_URL NODE_PID=$SERVER_PID
start floor-node-relay node "$BENCH/floors/node_relay.js"
RELAY_URL=$SERVER_URL RELAY_PID=$SERVER_PID
start floor-rust-relay "$BIN/relay" "$BENCH/floors/node_relay.js"
RSRELAY_URL=$SERVER_URL RSRELAY_PID=$SERVER_PID
start floor-py-httpserver python3 "$BENCH/floors/py_httpserver.py"
PYH_URL=$SERVER_URL PYH_PID=$SERVER_PID
start floor-py-asyncio python3 "$BENCH/floors/py_asyncio.py"
PYA_URL=$SERVER_URL PYA_PID=$SERVER_PID

cat >"$WORK/servers.json" <<EOF
{
  "kiln": {"url": "$KILN_URL", "pid": $KILN_PID, "data_dir": "$KILN_DATA"},
  "floor-node": {"url": "$NODE_URL", "pid": $NODE_PID},
  "floor-node-relay": {"url": "$RELAY_URL", "pid": $RELAY_PID},
  "floor-rust-relay": {"url": "$RSRELAY_URL", "pid": $RSRELAY_PID},
  "floor-py-httpserver": {"url": "$PYH_URL", "pid": $PYH_PID},
  "floor-py-asyncio": {"url": "$PYA_URL", "pid": $PYA_PID}
}
EOF

if [ -n "${BENCH_CONSOLE:-}" ]; then
    .venv/bin/python "$BENCH/console_viewer.py" --data-dir "$KILN_DATA" --log "$WORK/kiln.log" \
        >"$WORK/console_viewer.log" 2>&1 &
    PIDS+=("$!")
    say "a console is open on kiln (bench/console_viewer.py, pid $!)"
fi

# ------------------------------------------------------------------ measure
# In the background and waited for, so that a SIGTERM to this script runs the trap at once
# (bash defers traps while a foreground command runs); the trap stops the driver first.
if [ ${#GUARD[@]} -gt 0 ]; then
    .venv/bin/python "$BENCH/guard.py" --servers "$WORK/servers.json" --loadgen "$BIN/loadgen" \
        --kiln-bin "$KILN" "${GUARD[@]}" "${BASELINE[@]}" &
elif [ "$PERF" = 1 ]; then
    .venv/bin/python "$BENCH/profile.py" --servers "$WORK/servers.json" --loadgen "$BIN/loadgen" \
        --out "$WORK/profile" &
else
    .venv/bin/python "$BENCH/bench.py" --servers "$WORK/servers.json" --loadgen "$BIN/loadgen" \
        --kiln-bin "$KILN" --profile "$PROFILE" --out "$OUT" --command "$COMMAND" "${QUICK[@]}" &
fi
DRIVER=$!
wait "$DRIVER"
DRIVER=
[ "$PERF" = 1 ] && OUT=$WORK/profile
[ ${#GUARD[@]} -gt 0 ] && OUT=$WORK/guard
say "results in ${OUT#"$ROOT"/}/"
