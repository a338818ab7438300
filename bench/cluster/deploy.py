"""Cluster mode's deploy: how long after CreateFunction answered on one node the other nodes
serve the new function (GetFunctionConfiguration reports its package: the registry's watch has
delivered it and the node has fetched the package from the shared store by digest).

    KILN_BIN=target/debug/kiln .venv/bin/python bench/cluster/deploy.py [--runs 100]

Starts the test cluster (tests/cluster_harness.py: 3 etcd members, 3 kiln nodes, a store-only
kiln, each in a network namespace), then from the client's namespace creates a function
through n1, n2, n3 in turn, polls the two other nodes until both serve it, and deletes it.
Prints a markdown table: per run, the time until the slower of the two nodes serves it
("invocable on every node"), and per node. Each time includes the poll's own round trip.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from cluster_harness import Cluster  # noqa: E402


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def row(label, values):
    ms = [v * 1000 for v in values]
    return (f"| {label} | {len(ms)} | {statistics.median(ms):.1f} ms | {percentile(ms, 99):.1f} ms "
            f"| {max(ms):.1f} ms |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with Cluster(nodes=3) as cluster:
        endpoints = [cluster.endpoint(n) for n in ("n1", "n2", "n3")]
        # A first deploy outside the count: connections, the bucket, the watch streams.
        cluster.lambda_op("visible_after_deploy", endpoints=endpoints, runs=1, poll_timeout=30)
        results = cluster.lambda_op("visible_after_deploy", endpoints=endpoints, runs=args.runs,
                                    poll_timeout=10, timeout=30 * args.runs + 60)
    if "error" in results:
        raise SystemExit(f"a deploy failed: {results}")
    missing = [r for r in results if None in r["seconds"].values()]
    if missing:
        raise SystemExit(f"{len(missing)} deploys not seen everywhere within 10 s: {missing[:3]}")
    everywhere = [max(r["seconds"].values()) for r in results]
    each = [s for r in results for s in r["seconds"].values()]
    print("| from the API's answer until | runs | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    print(row("both other nodes serve the function", everywhere))
    print(row("one other node serves it", each))


if __name__ == "__main__":
    main()
