"""Cluster mode's cross-node overhead: a warm invoke served by another node's idle instance
(entering n1, forwarded over the peer port to n2) against the same invoke entering n2 itself.

    KILN_BIN=target/release/kiln .venv/bin/python bench/cluster/forward.py [--rounds 5] [--n 2000]

Starts the test cluster (tests/cluster_harness.py: 3 etcd members, 2 kiln nodes, a store-only
kiln, each in a network namespace), deploys a Python NoOp through n2 and warms one instance
there, waits until n1 routes to it, then runs interleaved rounds of sequential signed invokes
with bench/loadgen (release build: `cargo build --release -p loadgen`) from the client's
namespace: one round through n2 (local), one through n1 (forwarded). Every request through n1
must have been forwarded (n1's `kiln_cluster_routed_total{target="peer"}` is checked), or the
run is refused. Prints a markdown table: per path, the median over rounds of p50 and p99, and
the p50 difference per round (the issue's target: ≤ 75 µs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from cluster_harness import API_PORT, Cluster  # noqa: E402

NOOP = "def handler(event, context):\n    return {}\n"


def routed_to_peers(cluster, node):
    total = 0.0
    for line in cluster.cli_metrics(node).splitlines():
        if line.startswith("kiln_cluster_routed_total") and 'target="peer"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def known_pools(cluster, node):
    for line in cluster.cli_metrics(node).splitlines():
        if line.startswith("kiln_cluster_route_pools "):
            return float(line.split()[1])
    return 0.0


def latency(cluster, loadgen, creds, node, n):
    url = f"http://{cluster.ip(node)}:{API_PORT}"
    out = subprocess.run(cluster.enter("client") + [
        str(loadgen), "latency", "--url", url, "--path", "/2015-03-31/functions/noop/invocations",
        "--creds", str(creds), "--n", str(n), "--warmup", "200"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    result = json.loads(out.stdout)
    if result["errors"]:
        raise RuntimeError(f"{result['errors']} errors: {result['first_error']}")
    ns = sorted(result["latency_ns"])
    pick = lambda q: ns[min(len(ns) - 1, int(q * (len(ns) - 1)))] / 1000  # noqa: E731
    return pick(0.5), pick(0.99)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--loadgen", default=str(ROOT / "target" / "release" / "loadgen"))
    args = ap.parse_args()
    with Cluster(nodes=2) as cluster:
        created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n2"), name="noop", source=NOOP)
        assert "error" not in created, created
        cluster.wait_for(lambda: "error" not in cluster.lambda_op(
            "invoke_payload", endpoint=cluster.endpoint("n2"), name="noop", payload={}), 60, what="noop on n2")
        cluster.wait_for(lambda: known_pools(cluster, "n1") >= 1, 30, what="n1 to know n2's pool")
        creds = cluster.dir / "bench-creds.json"
        key, secret = cluster.credentials()
        creds.write_text(json.dumps({"accessKeyId": key, "secretAccessKey": secret, "region": "us-east-1"}))
        rows = {"n2 (local)": [], "n1 → n2 (forwarded)": []}
        for _ in range(args.rounds):
            rows["n2 (local)"].append(latency(cluster, args.loadgen, creds, "n2", args.n))
            before = routed_to_peers(cluster, "n1")
            rows["n1 → n2 (forwarded)"].append(latency(cluster, args.loadgen, creds, "n1", args.n))
            forwarded = routed_to_peers(cluster, "n1") - before
            if forwarded < args.n + 200:
                raise RuntimeError(f"only {forwarded:.0f} of {args.n + 200} requests through n1 were forwarded")
    print(f"`bench/cluster/forward.py --rounds {args.rounds} --n {args.n}` (kiln {os.environ.get('KILN_BIN', 'target/debug/kiln')}), "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}\n")
    print("| path | p50 µs (median of rounds) | p99 µs (median of rounds) |\n|---|---|---|")
    for label, values in rows.items():
        print(f"| {label} | {statistics.median(v[0] for v in values):.0f} | {statistics.median(v[1] for v in values):.0f} |")
    diffs = [f[0] - l[0] for l, f in zip(rows["n2 (local)"], rows["n1 → n2 (forwarded)"])]
    print(f"\nThe forward's cost, p50 forwarded − p50 local, per round: {', '.join(f'{d:.0f}' for d in diffs)} µs "
          f"(median {statistics.median(diffs):.0f} µs).")


if __name__ == "__main__":
    main()
