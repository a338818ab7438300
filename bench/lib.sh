# Shared by the benchmarks' run.sh scripts (sourced): start and stop one kiln of their own.
#
#   KILN_BIN KILN_DATA   set by the caller; start_kiln LOG [FLAGS...] sets KILN_URL and KILN_PID;
#   stop_kiln            SIGTERM, then SIGKILL of kiln and of what is left in its cgroups.

KILN_PID=
KILN_URL=

stop_kiln() {
    [ -n "$KILN_PID" ] || return 0
    kill -TERM "$KILN_PID" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$KILN_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$KILN_PID" 2>/dev/null; then
        echo "kiln (pid $KILN_PID) ignored SIGTERM, killing it and what is left in its cgroups" >&2
        kill -KILL "$KILN_PID" 2>/dev/null || true
        local hash procs pid
        hash=$(printf '%s' "$(realpath "$KILN_DATA")" | sha256sum | cut -c1-12)
        for procs in /sys/fs/cgroup/pids/kiln-"$hash"/*/cgroup.procs /sys/fs/cgroup/kiln-"$hash"/*/cgroup.procs; do
            [ -f "$procs" ] || continue
            for pid in $(cat "$procs"); do kill -KILL "$pid" 2>/dev/null || true; done
        done
    fi
    wait "$KILN_PID" 2>/dev/null || true
    KILN_PID=
}

start_kiln() {
    local log=$1
    shift
    # A previous run's sandboxes may have left mounts under the data dir.
    awk -v dir="$(realpath -m "$KILN_DATA")/" 'index($2 "/", dir) == 1 { print $2 }' /proc/self/mounts |
        sort -r | xargs -r -n1 umount -l
    rm -rf "$KILN_DATA"
    "$KILN_BIN" up --listen 127.0.0.1:0 --data-dir "$KILN_DATA" --no-aws-profile "$@" >"$log" 2>&1 &
    KILN_PID=$!
    KILN_URL=
    for _ in $(seq 600); do
        KILN_URL=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n1 | cut -d' ' -f3 || true)
        [ -n "$KILN_URL" ] && return 0
        kill -0 "$KILN_PID" 2>/dev/null || { cat "$log" >&2; return 1; }
        sleep 0.1
    done
    echo "kiln did not start:" >&2
    cat "$log" >&2
    return 1
}
