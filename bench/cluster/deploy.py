"""Cluster mode's deploy: how long after CreateFunction answered on one node the other nodes
serve the new function (GetFunctionConfiguration reports its RevisionId: the registry's watch
has delivered it and the node has fetched the package from the shared store by digest), and
the same for UpdateFunctionConfiguration (no package to fetch: the registry alone).

    KILN_BIN=target/debug/kiln .venv/bin/python bench/cluster/deploy.py [--runs 100]

Starts the test cluster (tests/cluster_harness.py: 3 etcd members, 3 kiln nodes, a store-only
kiln, each in a network namespace), then from the client's namespace creates a function
through n1, n2, n3 in turn, polls the two other nodes until both serve it, and deletes it;
then updates one function's configuration through each node in turn, polling likewise.
Prints a markdown table: per run, the time until the slower of the two nodes serves it
("invocable on every node"), and per node, measured two ways: by the client's polls (each time
includes a poll's round trip, a few milliseconds of a debug build on a busy machine), and by
the node's own log line when the change entered its in-memory table (its clock is the
client's: one host), which is when an invoke through it would find the function.
"""

import argparse
import datetime
import os
import re
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


APPLIED = re.compile(r"^(\S+) .*registry: function \S+ applied at version \d+, RevisionId (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def applied_times(logs):
    """Each node's log lines of applied changes: {node: [(wall-clock seconds, RevisionId)]}."""
    times = {}
    for node, text in logs.items():
        for line in text.splitlines():
            match = APPLIED.search(ANSI.sub("", line))
            if match:
                stamp = datetime.datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
                times.setdefault(node, []).append((stamp.timestamp(), match.group(2)))
    return times


def from_logs(results, applied, endpoint_node):
    """For each run, each other node's delay from the API's answer to its applying the change."""
    delays = []
    for r in results:
        per_node = {}
        for watcher in r["seconds"]:
            node = endpoint_node[watcher]
            # The node may apply the change before the client has read the answer: a delay can
            # be slightly negative.
            at = [t for t, revision in applied.get(node, []) if revision == r["revision_id"]]
            per_node[node] = min(at) - r["answered_at"] if at else None
        delays.append(per_node)
    return delays


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    measured = {}
    # The line each node writes when a change from another node enters its table.
    os.environ["KILN_LOG"] = "kiln=info,kiln::controller::replica=debug"
    with Cluster(nodes=3) as cluster:
        endpoints = [cluster.endpoint(n) for n in ("n1", "n2", "n3")]
        # A first deploy outside the count: connections, the bucket, the watch streams.
        cluster.lambda_op("visible_after_deploy", endpoints=endpoints, runs=1, poll_timeout=30)
        for change in ("create", "config"):
            measured[change] = cluster.lambda_op(
                "visible_after_deploy", endpoints=endpoints, runs=args.runs, change=change,
                poll_timeout=10, timeout=30 * args.runs + 60)
        applied = applied_times(cluster.logs())
        endpoint_node = {cluster.endpoint(n): n for n in ("n1", "n2", "n3")}
    print("| from the API's answer until | runs | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    for change, label in (("create", "CreateFunction (new package)"),
                          ("config", "UpdateFunctionConfiguration")):
        results = measured[change]
        if "error" in results:
            raise SystemExit(f"a deploy failed: {results}")
        missing = [r for r in results if None in r["seconds"].values()]
        if missing:
            raise SystemExit(f"{len(missing)} changes not seen everywhere within 10 s: {missing[:3]}")
        everywhere = [max(r["seconds"].values()) for r in results]
        each = [s for r in results for s in r["seconds"].values()]
        print(row(f"{label}: both other nodes answer it (polled)", everywhere))
        print(row(f"{label}: one other node answers it (polled)", each))
        logged = from_logs(results, applied, endpoint_node)
        if any(None in d.values() for d in logged):
            raise SystemExit(f"a node logged no applied change for a run: {logged[:3]}")
        print(row(f"{label}: both other nodes hold it (node's log)", [max(d.values()) for d in logged]))
        print(row(f"{label}: one other node holds it (node's log)", [v for d in logged for v in d.values()]))


if __name__ == "__main__":
    main()
