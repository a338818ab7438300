#!/usr/bin/env bash
# Burst offloading (BeeHive, ASPLOS '23 §5.2, Fig. 7) in one command. See bench/beehive/README.md.
#
#   bench/beehive/run.sh          180 s per configuration, the burst at 60 s (~18 min);
#                                 writes bench/results/beehive.md and beehive-series.csv
#   bench/beehive/run.sh --quick  40 s per configuration, the burst at 15 s (~5 min);
#                                 results in bench/work/beehive/results-quick/
#   BEEHIVE_CPU=0.25 bench/beehive/run.sh ...     the monolith's CPU quota in cores (default 0.5)
#   BEEHIVE_CLIENTS=1 …  closed-loop clients before the burst, doubled at the onset (default: the
#                        quota rounded up: one request in flight already takes all of ½ core)
#   BEEHIVE_WARMUP=health …  the function's warm-up event: `route` (default, a small POST
#                        /thumbnail: the zygote has Pillow's decoders loaded) or `health` (GET /health)
#   BEEHIVE_CONFIGS="direct spill-warm" …  a subset of: direct gateway-off spill-cold spill-warm ratio-0.5
#   BEEHIVE_APP=express …  the workload: `thumb` (default, the Flask thumbnail app), `express` (the
#                        Express 5 + pg comments app, app/express, node with 2 cluster workers, on a
#                        private PostgreSQL; results in bench/results/beehive-express/) or `mezzanine`
#                        (the Mezzanine blog, app/mezzanine, gunicorn with 2 workers on a private
#                        PostgreSQL: blog archive reads and comments; bench/results/beehive-mezzanine/)
#   BEEHIVE_DURATION / BEEHIVE_ONSET / BEEHIVE_PEAK_S   seconds; BEEHIVE_KILN_ARGS: extra `kiln up` flags;
#   BEEHIVE_OUT: where the report goes; BEEHIVE_OFF=ratio0: offload off as `--policy ratio
#   --ratio 0` (the route eligible: buffered, 1 in 100 shadowed) instead of `--pin` (default)
#
# Installs what it needs (a venv in bench/work/beehive/venv with bench/beehive/requirements.txt,
# the function's package with the same libraries), builds kiln and loadgen (release) only if
# target/release/{kiln,loadgen} are missing, starts its own kiln (data dir bench/work/beehive/kiln)
# and the monolith (gunicorn, 2 sync workers, in a CPU cgroup with a quota), and stops every
# process it started, and removes the cgroup, on any exit (trap). Must run as root.
set -euo pipefail

SELF=$(realpath "$0")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/beehive
QUICK=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        -h | --help) sed -n '2,25p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    OUT=$WORK/results-quick
    DURATION=${BEEHIVE_DURATION:-40}
    ONSET=${BEEHIVE_ONSET:-15}
    PEAK_S=${BEEHIVE_PEAK_S:-10}
else
    OUT=$ROOT/bench/results
    DURATION=${BEEHIVE_DURATION:-180}
    ONSET=${BEEHIVE_ONSET:-60}
    PEAK_S=${BEEHIVE_PEAK_S:-30}
fi
APP_KIND=${BEEHIVE_APP:-thumb}
case $APP_KIND in
    thumb) ;;
    express) OUT=$OUT/beehive-express ;;
    mezzanine) OUT=$OUT/beehive-mezzanine ;;
    *) echo "run.sh: BEEHIVE_APP is thumb, express or mezzanine" >&2; exit 2 ;;
esac
OUT=${BEEHIVE_OUT:-$OUT}
CPU=${BEEHIVE_CPU:-0.5}
WORKERS=2
# The quota, not the workers, bounds the monolith: a request alone uses up to one core, so
# ceil(quota) requests in flight are its peak throughput with no queue.
CLIENTS=${BEEHIVE_CLIENTS:-$(python3 -c "import math; print(max(1, math.ceil($CPU)))")}
WARMUP=${BEEHIVE_WARMUP:-route}
OFF=${BEEHIVE_OFF:-pin}
case $OFF in pin | ratio0) ;; *) echo "run.sh: BEEHIVE_OFF is pin or ratio0" >&2; exit 2 ;; esac
CONFIGS=${BEEHIVE_CONFIGS:-direct gateway-off spill-cold spill-warm ratio-0.5}
PERIOD_US=20000
COMMAND="$({ env | grep '^BEEHIVE_' || true; } | sort | sed "s|=$ROOT/|=|" | tr '\n' ' ')bench/beehive/run.sh${*:+ $*}"
say() { echo "[beehive/run.sh $(date +%H:%M:%S)] $*"; }
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (kiln up creates sandboxes; the cgroup)" >&2; exit 1; }

# ------------------------------------------------------------------ cleanup, on every exit
KILN_PID=
MONO_PID=
CGROUP=
PG_DIR=
KILN_DATA=$WORK/kiln
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"  # stop_kiln
stop_monolith() {
    if [ -n "$MONO_PID" ]; then
        kill -TERM "$MONO_PID" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$MONO_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$MONO_PID" 2>/dev/null || true
        wait "$MONO_PID" 2>/dev/null || true
        MONO_PID=
    fi
    if [ -n "$CGROUP" ] && [ -d "$CGROUP" ]; then
        # Workers the master left behind are the cgroup's only members.
        for pid in $(cat "$CGROUP/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        for _ in $(seq 50); do rmdir "$CGROUP" 2>/dev/null && break; sleep 0.1; done
    fi
}
stop_postgres() {
    if [ -n "$PG_DIR" ] && [ -d "$PG_DIR" ]; then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
        PG_DIR=
    fi
}
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop_monolith
    stop_kiln
    stop_postgres
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK" "$OUT"
exec 9>"$WORK/.lock"
flock -n 9 || { echo "run.sh: another bench/beehive/run.sh is running" >&2; exit 1; }

# ------------------------------------------------------------------ dependencies and build
say "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
command -v python3 >/dev/null || { echo "run.sh: python3 is not on PATH (kiln's python3.11 runtime)" >&2; exit 1; }
VENV=$WORK/venv
if ! cmp -s "$HERE/requirements.txt" "$VENV/.requirements"; then
    say "installing bench/beehive/requirements.txt into ${VENV#"$ROOT"/}"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
    cp "$HERE/requirements.txt" "$VENV/.requirements"
fi
PY=$VENV/bin/python
# The function's package: the app's module and the same libraries, for kiln's python3.11 (which
# is this machine's python3, as is the venv's).
FN=$WORK/fn
if ! cmp -s "$HERE/requirements.txt" "$FN/.requirements"; then
    say "installing the function's libraries into ${FN#"$ROOT"/}"
    rm -rf "$FN"
    mkdir -p "$FN"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-compile --target "$FN" \
        -r <(grep -vi '^gunicorn' "$HERE/requirements.txt")
    cp "$HERE/requirements.txt" "$FN/.requirements"
fi
cp "$HERE/app/thumb.py" "$FN/thumb.py"
EXPRESS=$HERE/app/express
if [ "$APP_KIND" = express ]; then
    command -v node >/dev/null || { echo "run.sh: node is not on PATH (the monolith; kiln's nodejs20.x)" >&2; exit 1; }
    if [ ! -d "$EXPRESS/node_modules/pg" ]; then
        say "installing app/express's package-lock into app/express/node_modules"
        (cd "$EXPRESS" && npm ci --no-audit --no-fund --loglevel=error)
    fi
fi
# The Mezzanine site's packages, vendored beside it (git-ignored): the monolith and the function
# (the same directory, zipped without __pycache__) import them from there.
MEZZ=$HERE/app/mezzanine
if [ "$APP_KIND" = mezzanine ] && ! cmp -s "$MEZZ/requirements.txt" "$MEZZ/site-packages/.requirements"; then
    say "installing app/mezzanine's requirements into app/mezzanine/site-packages"
    rm -rf "$MEZZ/site-packages"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-compile --target "$MEZZ/site-packages" \
        -r "$MEZZ/requirements.txt"
    cp "$MEZZ/requirements.txt" "$MEZZ/site-packages/.requirements"
fi
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
if [ ! -x "$BIN/kiln" ] || [ ! -x "$BIN/loadgen" ]; then
    say "building kiln and loadgen (release)"
    ./scripts/setup-build-env.sh
    cargo build --release --quiet -p kiln -p loadgen
fi
"$BIN/loadgen" schedule --help >/dev/null 2>&1 ||
    { echo "run.sh: $BIN/loadgen has no schedule mode: cargo build --release -p loadgen" >&2; exit 1; }
KILN_BIN=$BIN/kiln
LOADGEN=$BIN/loadgen
# The request: a 1024×768 JPEG (~120 KB), made once, deterministic.
IMAGE=$WORK/input.jpg
[ -s "$IMAGE" ] || "$PY" "$HERE/beehive.py" image --out "$IMAGE"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ------------------------------------------------------------------ express, mezzanine: a private PostgreSQL
# Debian's newest PostgreSQL, run as the postgres user in a directory of its own, on a free port of
# 127.0.0.1 (SCRAM for TCP, trust on its Unix socket); the app's schema and seed from schema.sql
# (express) or seed.py (mezzanine: Django's migrations, 60 posts over 6 months, 4 comments each).
if [ "$APP_KIND" != thumb ]; then
    PG_BIN=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n1)
    [ -n "$PG_BIN" ] || { echo "run.sh: no PostgreSQL server in /usr/lib/postgresql" >&2; exit 1; }
    PG_DIR=$(mktemp -d /tmp/beehive-pg.XXXXXX)
    chown postgres: "$PG_DIR"
    chmod 700 "$PG_DIR"
    PG_PORT=$(free_port)
    export PGPASSWORD=beehive-bench  # for kiln app create --database, which reads it
    runuser -u postgres -- "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth-local=trust \
        --auth-host=scram-sha-256 >"$WORK/postgres-initdb.log" 2>&1 ||
        { cat "$WORK/postgres-initdb.log" >&2; exit 1; }
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w \
        -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null ||
        { cat "$PG_DIR/postgres.log" >&2; exit 1; }
    pg_sql() { runuser -u postgres -- "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" "$@"; }
    pg_sql -U postgres -d postgres -c "CREATE ROLE beehive LOGIN PASSWORD '$PGPASSWORD'" \
        -c "CREATE DATABASE beehive OWNER beehive"
    DATABASE=postgresql://beehive@127.0.0.1:$PG_PORT/beehive
    DATABASE_URL=postgresql://beehive:$PGPASSWORD@127.0.0.1:$PG_PORT/beehive
    if [ "$APP_KIND" = express ]; then
        pg_sql -U beehive -d beehive -f - <"$EXPRESS/schema.sql"
    else
        DATABASE_URL=$DATABASE_URL "$PY" "$MEZZ/seed.py" --posts 60 --months 6 --comments 4 >"$WORK/seed.json"
    fi
    say "PostgreSQL $("$PG_BIN/postgres" --version | awk '{ print $3 }') on 127.0.0.1:$PG_PORT ($PG_DIR)"
fi

# ------------------------------------------------------------------ the workload
# The routes offloaded, the load's requests, one request of each route (profiling), and the
# function's deployment.
if [ "$APP_KIND" = thumb ]; then
    ROUTES=('POST /thumbnail')
    HEALTH=/health
    LOAD_REQUESTS=(--request "POST /thumbnail @$IMAGE" --header 'content-type: image/jpeg')
    one_round() { curl -fsS -o /dev/null --data-binary @"$IMAGE" -H 'content-type: image/jpeg' "$1/thumbnail"; }
elif [ "$APP_KIND" = mezzanine ]; then
    # Mezzanine's own routes as its resolver declares them, named by --offload: the blog archive
    # (SpringBlog's archive) and the comment form's POST (pybbs's comment).
    ROUTES=('POST /comment/' 'GET /blog/archive/{year:\d{4}}/{month}/')
    HEALTH=/
    ARCHIVE=/blog/archive/2024/1/
    LOAD_REQUESTS=(--mix "$WORK/mezzanine-mix.json")
    one_round() {
        curl -fsS -o /dev/null -H 'content-type: application/x-www-form-urlencoded' -H "@$WORK/comment.cookie" \
            --data-binary @"$WORK/comment.form" -w '%{http_code}' "$1/comment/" | grep -qx 302 &&
            curl -fsS -o /dev/null "$1$ARCHIVE"
    }
else
    # A comment written to post 1000 for every three reads of post 3's (the seed's five comments,
    # so a read's cost does not grow with the run); the body's request id is the same every time.
    ROUTES=('POST /comment/' 'GET /comments/{post}')
    HEALTH=/
    COMMENT=$WORK/comment.json
    printf '{"request_id": "beehive-bench", "post": 1000, "author": "loadgen", "body": "%s"}' \
        "A comment of a few words, as readers write them under a post." >"$COMMENT"
    LOAD_REQUESTS=(--request "POST /comment/ @$COMMENT" --request "3*GET /comments/3"
        --header 'content-type: application/json')
    one_round() {
        curl -fsS -o /dev/null --data-binary @"$COMMENT" -H 'content-type: application/json' "$1/comment/" &&
            curl -fsS -o /dev/null "$1/comments/3"
    }
fi
OFFLOAD_FLAGS=()
PIN_FLAGS=()
for r in "${ROUTES[@]}"; do
    OFFLOAD_FLAGS+=(--offload "$r")
    PIN_FLAGS+=(--pin "$r")
done

# ------------------------------------------------------------------ the monolith, in a CPU cgroup
MONO_PORT=$(free_port)
MONO_URL=http://127.0.0.1:$MONO_PORT
QUOTA_US=$("$PY" -c "print(int(round($CPU * $PERIOD_US)))")
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    # cgroup v2: cpu.max "QUOTA PERIOD"; the cpu controller must be on for the root's children.
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    CGROUP=/sys/fs/cgroup/beehive-monolith-$$
    mkdir "$CGROUP"
    echo "$QUOTA_US $PERIOD_US" >"$CGROUP/cpu.max"
    CGROUP_KIND="v2 cpu.max = $QUOTA_US $PERIOD_US"
else
    CGROUP=/sys/fs/cgroup/cpu/beehive-monolith-$$
    mkdir "$CGROUP"
    echo "$PERIOD_US" >"$CGROUP/cpu.cfs_period_us"
    echo "$QUOTA_US" >"$CGROUP/cpu.cfs_quota_us"
    CGROUP_KIND="v1 cpu.cfs_quota_us = $QUOTA_US, cpu.cfs_period_us = $PERIOD_US"
fi
# The shell moves itself into the cgroup, then becomes the server: its workers are in it too.
if [ "$APP_KIND" = thumb ]; then
    say "monolith: gunicorn, $WORKERS sync workers, $CPU cores ($CGROUP_KIND) on $MONO_URL"
    sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$CGROUP" \
        "$VENV/bin/gunicorn" --workers "$WORKERS" --bind "127.0.0.1:$MONO_PORT" --chdir "$HERE/app" \
        --timeout 120 --backlog 2048 --log-level warning thumb:app >"$WORK/monolith.log" 2>&1 &
elif [ "$APP_KIND" = mezzanine ]; then
    say "monolith: gunicorn app/mezzanine, $WORKERS sync workers, $CPU cores ($CGROUP_KIND) on $MONO_URL"
    sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$CGROUP" \
        env DATABASE_URL="$DATABASE_URL" PYTHONPATH="$MEZZ/site-packages" "$PY" -m gunicorn --workers "$WORKERS" \
        --bind "127.0.0.1:$MONO_PORT" --chdir "$MEZZ" --timeout 120 --backlog 2048 --log-level warning \
        --no-control-socket blogsite.wsgi:application >"$WORK/monolith.log" 2>&1 &
else
    say "monolith: node app/express/server.js, $WORKERS cluster workers, $CPU cores ($CGROUP_KIND) on $MONO_URL"
    sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$CGROUP" \
        env PORT="$MONO_PORT" WORKERS="$WORKERS" DATABASE_URL="$DATABASE_URL" node "$EXPRESS/server.js" \
        >"$WORK/monolith.log" 2>&1 &
fi
MONO_PID=$!
for _ in $(seq 300); do
    curl -fsS -o /dev/null "$MONO_URL$HEALTH" 2>/dev/null && break
    kill -0 "$MONO_PID" 2>/dev/null || { cat "$WORK/monolith.log" >&2; exit 1; }
    sleep 0.1
done
if [ "$APP_KIND" = mezzanine ]; then
    # The comment form as a browser posts it: its CSRF cookie and token, and the security hash of
    # the form, valid for two hours (django_comments), fetched once from the monolith; the load's
    # comments go to the last month's first post, 20,000 distinct ones (Mezzanine writes nothing for
    # a repeated one), with 3 archive reads for each in the mix.
    "$PY" "$HERE/beehive.py" comment-form --url "$MONO_URL/blog/post-5/" --archive "$ARCHIVE" \
        --mix "$WORK/mezzanine-mix.json" --form "$WORK/comment.form" --cookie "$WORK/comment.cookie"
fi
one_round "$MONO_URL" ||
    { echo "run.sh: the monolith does not serve ${ROUTES[*]}" >&2; cat "$WORK/monolith.log" >&2; exit 1; }

# ------------------------------------------------------------------ kiln
KILN_ARGS="--memory-budget-mb 8192 --snapshot-memory-mb 4096 --shutdown-grace 5 ${BEEHIVE_KILN_ARGS:-}"
LOG=$WORK/kiln.log
# shellcheck disable=SC2086 # KILN_ARGS is a list of flags
start_kiln "$LOG" $KILN_ARGS || exit 1
say "kiln: $KILN_URL (pid $KILN_PID)"
kiln() { KILN_ENDPOINT=$KILN_URL KILN_DATA_DIR=$KILN_DATA "$KILN_BIN" "$@"; }

# ------------------------------------------------------------------ helpers
# Raw records of this run (kept; git-ignored); bench/work/beehive/run is the latest.
RUN=$WORK/run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
[ -L "$WORK/run" ] || rm -rf "$WORK/run"
ln -sfn "$(basename "$RUN")" "$WORK/run"
case $WARMUP/$APP_KIND in
    route/thumb) "$PY" "$HERE/beehive.py" warmup-event --out "$WORK/warmup-event.json"; WARMUP_EVENT=@$WORK/warmup-event.json ;;
    # A read: the warm-up's transactions roll back anyway, and the pg pool and the statement are warm.
    route/express) WARMUP_EVENT='{"version": "2.0", "rawPath": "/comments/3", "requestContext": {"http": {"method": "GET"}}}' ;;
    # The archive: templates, the resolver and the ORM's queries warm, nothing written.
    route/mezzanine) WARMUP_EVENT='{"version": "2.0", "rawPath": "'"$ARCHIVE"'", "requestContext": {"http": {"method": "GET"}}}' ;;
    health/*) WARMUP_EVENT='{"version": "2.0", "rawPath": "'"$HEALTH"'", "requestContext": {"http": {"method": "GET"}}}' ;;
    *) echo "run.sh: BEEHIVE_WARMUP is route or health" >&2; exit 2 ;;
esac

# The Mezzanine function's package: the site and its vendored packages, without the monolith's
# __pycache__, zipped once per run.
[ "$APP_KIND" != mezzanine ] || "$PY" "$HERE/beehive.py" zip --dir "$MEZZ" --out "$WORK/mezzanine.zip"
deploy() { # NAME: a new function, no history
    if [ "$APP_KIND" = thumb ]; then
        kiln deploy "$1" --runtime python3.11 --code "$FN" --web-app thumb:app --memory 512 \
            --timeout 60 --warmup-event "$WARMUP_EVENT" >"$RUN/deploy-$1.log" 2>&1
    elif [ "$APP_KIND" = mezzanine ]; then
        kiln deploy "$1" --runtime python3.11 --code "$WORK/mezzanine.zip" --web-app blogsite.wsgi:application \
            --memory 512 --timeout 60 --env "DATABASE_URL=$DATABASE_URL" --warmup-event "$WARMUP_EVENT" \
            >"$RUN/deploy-$1.log" 2>&1
    else
        kiln deploy "$1" --runtime nodejs20.x --code "$EXPRESS" --web-app app.js#app --memory 256 \
            --timeout 60 --env "DATABASE_URL=$DATABASE_URL" --warmup-event "$WARMUP_EVENT" >"$RUN/deploy-$1.log" 2>&1
    fi || { cat "$RUN/deploy-$1.log" >&2; exit 1; }
}
# NAME FUNCTION [kiln app create flags...]: creates the app; its URL in APP_URL.
create_app() {
    local name=$1 function=$2 port
    shift 2
    port=$(free_port)
    [ "$APP_KIND" = thumb ] || set -- --database "$DATABASE" "$@"
    kiln app create "$name" --listen "127.0.0.1:$port" --upstream "$MONO_URL" --function "$function" \
        "$@" >"$RUN/app-$name.json" 2>&1 || { cat "$RUN/app-$name.json" >&2; exit 1; }
    APP_URL=http://127.0.0.1:$port
}
# NAME FUNCTION: an app with offload off (BEEHIVE_OFF), ready for the load.
create_off_app() {
    if [ "$OFF" = pin ]; then
        create_app "$1" "$2" "${PIN_FLAGS[@]}"
        for _ in 1 2 3 4 5; do one_round "$APP_URL"; done
    else
        create_app "$1" "$2" "${OFFLOAD_FLAGS[@]}" --policy ratio --ratio 0
        profile_until_eligible "$1" "$APP_URL"
    fi
}
eligible() { kiln --json app routes "$1" | "$PY" -c '
import json, sys
routes = {r["Route"]: r for r in json.load(sys.stdin)["Routes"]}
sys.exit(0 if all(routes[r]["Eligible"] for r in sys.argv[1:]) else 1)' "${ROUTES[@]}"; }
# NAME URL: requests through the gateway, one at a time, until the routes passed their shadow runs.
profile_until_eligible() {
    local name=$1 url=$2 started=$SECONDS n=0
    until eligible "$name"; do
        [ $((SECONDS - started)) -lt 180 ] ||
            { echo "run.sh: ${ROUTES[*]} of $name not eligible after 180 s:" >&2; kiln app routes "$name" >&2; exit 1; }
        one_round "$url"
        n=$((n + 1))
    done
    say "$name: ${ROUTES[*]} eligible after $n rounds, $((SECONDS - started)) s"
    kiln app routes "$name" >"$RUN/routes-$name-before.txt"
}
instances() { # FUNCTION: its instances in kiln's status
    kiln --json status | "$PY" "$HERE/beehive.py" instances --function "$1"
}
wait_instances() { # FUNCTION N
    local started=$SECONDS
    until [ "$(instances "$1")" -ge "$2" ]; do
        [ $((SECONDS - started)) -lt 120 ] || { say "$1: fewer than $2 instances after 120 s; going on"; return 0; }
        sleep 0.5
    done
}
mono_cpu_ticks() { # utime+stime of the monolith's processes (master and workers)
    local total=0 pid
    for pid in $(cat "$CGROUP/cgroup.procs"); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 " " $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
# LABEL URL CLIENTS [loadgen flags...]: one schedule run, with what the machine did meanwhile.
load() {
    local label=$1 url=$2 clients=$3
    shift 3
    local before_busy before_mono load_start
    before_busy=$(busy_ticks)
    before_mono=$(mono_cpu_ticks)
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    "$PY" "$HERE/beehive.py" others --root $$ >"$RUN/$label.others-before.json"
    "$LOADGEN" schedule --url "$url" --clients "$clients" "${LOAD_REQUESTS[@]}" \
        --out "$RUN/$label.jsonl" --timeout 60 "$@" \
        >"$RUN/$label.summary.json"
    "$PY" "$HERE/beehive.py" others --root $$ >"$RUN/$label.others-after.json"
    printf '{"label": "%s", "busy_before": "%s", "busy_after": "%s", "mono_ticks": %d, "loadavg_start": "%s", "loadavg_end": "%s", "clk_tck": %d}\n' \
        "$label" "$before_busy" "$(busy_ticks)" $(($(mono_cpu_ticks) - before_mono)) "$load_start" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" "$(getconf CLK_TCK)" >"$RUN/$label.machine.json"
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("  {0}: {requests} requests, {rps:.1f}/s, errors {errors}, served by {served_by}".format(sys.argv[2], **d))' \
        "$RUN/$label.summary.json" "$label"
}
# LABEL APP: the burst schedule through an app's gateway, with kiln's view at the onset and end.
burst() {
    local label=$1 app=$2 url=$3 function=$4
    "$PY" "$HERE/beehive.py" poll --metrics "$KILN_URL/metrics" --app "$app" --function "$function" --out "$RUN/$label.metrics.jsonl" &
    local poller=$!
    date +%s.%N >"$RUN/$label.start"
    (sleep "$(awk -v o="$ONSET" 'BEGIN { print o - 0.5 }')"; kiln --json status >"$RUN/$label.status-onset.json" 2>/dev/null || true) &
    local snap=$!
    load "$label" "$url" "$CLIENTS" --double-at "$ONSET" --duration "$DURATION"
    wait "$snap" || true
    kill "$poller" 2>/dev/null || true
    wait "$poller" 2>/dev/null || true
    kiln --json app status "$app" >"$RUN/$label.app-status.json"
    kiln app routes "$app" >"$RUN/routes-$app-after.txt"
    kiln --json status >"$RUN/$label.status-end.json"
    echo "$function" >"$RUN/$label.function"
}

# ------------------------------------------------------------------ measure
say "deploying the function (one per configuration, each with no history)"
for c in $CONFIGS; do
    [ "$c" = direct ] || deploy "$APP_KIND-${c//./}"
done
START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# Peak throughput: direct and through a gateway with offload off, 4× the clients (saturated).
PEAK_CLIENTS=$((CLIENTS * 4))
say "peak throughput, $PEAK_CLIENTS clients, $PEAK_S s each"
load peak-direct "$MONO_URL" "$PEAK_CLIENTS" --duration "$PEAK_S"
PEAK_FN=$APP_KIND-gateway-off
[[ " $CONFIGS " == *" gateway-off "* ]] || { PEAK_FN=$APP_KIND-peak; deploy "$PEAK_FN"; }
create_off_app peak "$PEAK_FN"
load peak-gateway "$APP_URL" "$PEAK_CLIENTS" --duration "$PEAK_S"
kiln app rm peak >/dev/null

for c in $CONFIGS; do
    fn=$APP_KIND-${c//./}
    app=${c//./}
    say "$c: $CLIENTS clients, doubled at $ONSET s, $DURATION s"
    case $c in
        direct)
            load direct "$MONO_URL" "$CLIENTS" --double-at "$ONSET" --duration "$DURATION"
            continue ;;
        gateway-off) create_off_app "$app" "$fn" ;;
        spill-cold) create_app "$app" "$fn" "${OFFLOAD_FLAGS[@]}" --policy spill ;;
        spill-warm) create_app "$app" "$fn" "${OFFLOAD_FLAGS[@]}" --policy spill --min-warm 4 ;;
        ratio-0.5) create_app "$app" "$fn" "${OFFLOAD_FLAGS[@]}" --policy ratio --ratio 0.5 ;;
        *) echo "run.sh: unknown configuration $c" >&2; exit 2 ;;
    esac
    [ "$c" = gateway-off ] || profile_until_eligible "$app" "$APP_URL"
    [ "$c" != spill-warm ] || wait_instances "$fn" 4
    say "  $fn: $(instances "$fn") instances ready before the run"
    burst "$c" "$app" "$APP_URL" "$fn"
    kiln app rm "$app" >/dev/null
done
END_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------ report
"$PY" "$HERE/beehive.py" report --run "$RUN" --out "$OUT" --command "$COMMAND" \
    --configs "$CONFIGS" --onset "$ONSET" --duration "$DURATION" --clients "$CLIENTS" \
    --cpu "$CPU" --cgroup "$CGROUP_KIND" --workers "$WORKERS" --peak-clients "$PEAK_CLIENTS" \
    --peak-s "$PEAK_S" --app "$APP_KIND" --warmup "$WARMUP" --off "$OFF" --load-start "$START_LOAD" --load-end "$END_LOAD" --kiln-args "kiln up $KILN_ARGS" \
    $([ "$QUICK" = 1 ] && echo --quick)
say "results in ${OUT#"$ROOT"/}/beehive.md"
