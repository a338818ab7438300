#!/bin/bash
# Same shim and handler, two transports: kiln's framed protocol (nodejs20.x / python3.11) and the
# Lambda Runtime API (provided + bootstrap that starts the same shim in Runtime API mode).
# usage: bench/transport.sh   (release build of kiln and loadgen first: cargo build --release -p kiln -p loadgen)
set -e
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
D="$(cd "$(dirname "$0")" && pwd)/work/transport"; rm -rf $D; mkdir -p $D
"$ROOT"/target/release/kiln up --listen 127.0.0.1:9310 --data-dir $D/data --no-aws-profile --memory-budget-mb 4096 > $D/out.log 2>&1 &
KP=$!
sleep 1.5
# provided functions whose bootstrap starts kiln's own shim, which then speaks the Runtime API
mkdir -p $D/api-node $D/api-py
cp "$ROOT"/bench/functions/node/index.js $D/api-node/
cp "$ROOT"/bench/functions/python/app.py $D/api-py/
printf '#!/bin/sh\nexec %s /opt/kiln/shim.js\n' "$(readlink -f "$(command -v node)")" > $D/api-node/bootstrap
printf '#!/bin/sh\nexec %s /opt/kiln/shim.py\n' "$(python3 -c 'import os,sys;print(os.path.realpath(sys.executable))')" > $D/api-py/bootstrap
chmod +x $D/api-node/bootstrap $D/api-py/bootstrap
K=""$ROOT"/target/release/kiln --endpoint http://127.0.0.1:9310 --data-dir $D/data"
$K deploy shim-node --runtime nodejs20.x --handler index.handler --code "$ROOT"/bench/functions/node >/dev/null
$K deploy api-node --runtime provided --handler index.handler --code $D/api-node >/dev/null
$K deploy shim-py --runtime python3.11 --handler app.handler --code "$ROOT"/bench/functions/python >/dev/null
$K deploy api-py --runtime provided --handler app.handler --code $D/api-py >/dev/null
for f in shim-node api-node shim-py api-py; do $K invoke $f > /dev/null; done
for round in 1 2 3; do
for f in shim-node api-node shim-py api-py; do
  "$ROOT"/target/release/loadgen latency --url http://127.0.0.1:9310 --path /2015-03-31/functions/$f/invocations --creds $D/data/credentials.json --n 10000 --warmup 1000 --server-pid $KP > $D/$f.$round.json 2>/dev/null
done
done
kill $KP; wait $KP 2>/dev/null || true
D="$D" python3 - <<'PY'
import json, glob, os
rows = {}
for f in ["shim-node", "api-node", "shim-py", "api-py"]:
    lat, cpu, n = [], 0, 0
    for p in sorted(glob.glob(os.environ["D"] + f"/{f}.*.json")):
        d = json.load(open(p))
        lat += d["latency_ns"]; cpu += d["server_cpu"][0]["sched_ns"]; n += d["n"]
    lat.sort()
    rows[f] = (len(lat), lat[len(lat)//2]/1000, lat[int(len(lat)*.99)]/1000, cpu/n/1000)
print("| function | transport | n | p50 µs | p99 µs | kiln CPU µs/invoke |")
print("|---|---|---|---|---|---|")
for f, (n, p50, p99, cpu) in rows.items():
    print(f"| {f.split('-')[1]} | {'framed socket' if f.startswith('shim') else 'Runtime API (HTTP)'} | {n} | {p50:.1f} | {p99:.1f} | {cpu:.1f} |")
PY
