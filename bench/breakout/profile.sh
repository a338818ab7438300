#!/usr/bin/env bash
# Profiles authorize's fast path in kiln: a release kiln of its own, one decontainerized copy of
# authorize (users.json of 1 000 users in the object store), a 5 s closed loop of 4 streams, then
# a 12 s loop under `perf record -g` of kiln. Prints requests/s and kiln's CPU per request of
# each loop; the profile is left in bench/work/breakout-profile/perf.data.
#
#   bench/breakout/profile.sh          (then: perf report -i bench/work/breakout-profile/perf.data)
#   KILN_BIN=/path/to/kiln bench/breakout/profile.sh
set -euo pipefail
cd "$(dirname "$(realpath "$0")")/../.."
ROOT=$PWD
WORK=$ROOT/bench/work/breakout-profile
KILN_BIN=${KILN_BIN:-$ROOT/target/release/kiln}
KILN_DATA=$WORK/kiln
[ "$(id -u)" = 0 ] || { echo "profile.sh: must run as root (kiln up creates sandboxes)" >&2; exit 1; }
command -v perf >/dev/null || { echo "profile.sh: perf is not on PATH" >&2; exit 1; }
[ -x "$KILN_BIN" ] && [ -x "$ROOT/target/release/loadgen" ] || cargo build --release -p kiln -p loadgen
if ! .venv/bin/python -c "import numpy, boto3" 2>/dev/null; then
    ./scripts/setup-test-env.sh
    .venv/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
fi
mkdir -p "$WORK"
# shellcheck source=bench/lib.sh
. bench/lib.sh
trap 'stop_kiln' EXIT
start_kiln "$WORK/kiln.log" --memory-budget-mb 8192 --shutdown-grace 5 --idle-ttl 20
printf '{"kiln": {"url": "%s", "pid": %s, "data_dir": "%s", "cpuacct": ""}}\n' \
    "$KILN_URL" "$KILN_PID" "$KILN_DATA" >"$WORK/servers.json"
.venv/bin/python - "$WORK" "$ROOT/target/release/loadgen" <<'PY'
import json, subprocess, sys, time
sys.path[:0] = ["bench/breakout", "bench"]
import run as R
from bench import Kiln

work, loadgen = sys.argv[1], sys.argv[2]
kiln = Kiln(json.load(open(f"{work}/servers.json"))["kiln"])
package, event, training = R.BENCHMARKS["authorize"]
R.deploy(kiln, "authorize-fast", package, True, len(training), R.stock(kiln, "authorize"))
print("status:", R.train(kiln, "authorize-fast", training))
time.sleep(25)  # the tracing instance goes (--idle-ttl 20)
got, tail = R.invoke(kiln, "authorize-fast", event)
assert "Mode: decontainerized" in tail, tail


def loop(seconds):
    out = json.loads(subprocess.run(
        [loadgen, "throughput", "--url", kiln.url,
         "--path", "/2015-03-31/functions/authorize-fast/invocations",
         "--creds", str(kiln.creds_path), "--server-pid", str(kiln.pid), "--threads", "2",
         "--body", json.dumps(event), "--concurrency", "4", "--duration", str(seconds),
         "--warmup", "2"], capture_output=True, text=True, check=True).stdout)
    cpu_s = out["server_cpu"][0]["sched_ns"] / 1e9
    window = out["cpu_window_ns"] / 1e9
    return out["rps"], cpu_s / (out["rps"] * window) * 1e6


rps, us = loop(5)
print(f"closed loop, 4 streams: {rps:.0f} requests/s, kiln {us:.0f} µs CPU per request")
perf = subprocess.Popen(["perf", "record", "-g", "-F", "999", "-p", str(kiln.pid),
                         "-o", f"{work}/perf.data", "--", "sleep", "12"])
rps, us = loop(12)
perf.wait()
print(f"under perf: {rps:.0f} requests/s, kiln {us:.0f} µs CPU per request")
PY
