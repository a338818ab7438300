"""Cluster mode's failure detection: how long after `kill -9` of a node the others list it gone,
and how long after a partition a node reports itself fenced (and the others list it gone).

    KILN_BIN=target/debug/kiln .venv/bin/python bench/cluster/detect.py [--runs 5] [--ttl 5]

Starts the test cluster (tests/cluster_harness.py: 3 etcd members, 3 kiln nodes, each in a
network namespace), then for each run kills n3 and starts it again, and partitions n2 and heals
it. Prints a markdown table (median, min, max over the runs). Times include polling `kiln cluster
status` every 100 ms.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from cluster_harness import Cluster  # noqa: E402


def wait_gone(cluster, victim, observers, start, timeout):
    seen = {}
    while len(seen) < len(observers) and time.time() - start < timeout:
        for node in observers:
            if node not in seen and cluster.states(node).get(victim) == "gone":
                seen[node] = time.time() - start
        time.sleep(0.1)
    if len(seen) < len(observers):
        raise RuntimeError(f"{victim} not seen gone by {set(observers) - set(seen)}")
    return max(seen.values())


def wait_all_up(cluster, nodes, timeout=30):
    cluster.wait_for(lambda: all(cluster.states(n) == {m: "up" for m in nodes} for n in nodes),
                     timeout, what="every node up")


def summary(values):
    return f"{statistics.median(values):.2f} s | {min(values):.2f} s | {max(values):.2f} s"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ttl", type=int, default=5)
    args = parser.parse_args()
    nodes = ("n1", "n2", "n3")
    killed, fenced, partitioned_gone = [], [], []
    with Cluster(nodes=3, lease_ttl=args.ttl) as cluster:
        wait_all_up(cluster, nodes)
        for _ in range(args.runs):
            # Kills land at a random point of the keep-alive period.
            time.sleep(args.ttl / 3 * (len(killed) % 3) / 3)
            cluster.kill9("n3")
            start = time.time()
            killed.append(wait_gone(cluster, "n3", ("n1", "n2"), start, 4 * args.ttl))
            cluster.start_node("n3")
            wait_all_up(cluster, nodes)

            cluster.partition("n2")
            start = time.time()
            _, took = cluster.wait_for(lambda: cluster.status("n2", via="n2")["fenced"], 4 * args.ttl,
                                       what="n2 fenced")
            fenced.append(took)
            partitioned_gone.append(wait_gone(cluster, "n2", ("n1", "n3"), start, 4 * args.ttl))
            cluster.heal("n2")
            wait_all_up(cluster, nodes)
    print(f"TTL {args.ttl} s, {args.runs} runs\n")
    print("| event | median | min | max |")
    print("|---|---|---|---|")
    print(f"| kill -9 of a node → both others list it gone | {summary(killed)} |")
    print(f"| partition of a node → it reports itself fenced | {summary(fenced)} |")
    print(f"| partition of a node → both others list it gone | {summary(partitioned_gone)} |")


if __name__ == "__main__":
    main()
