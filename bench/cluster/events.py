"""Cluster mode's async queue: Events per second end to end on the 3-node test cluster.

    KILN_BIN=target/debug/kiln .venv/bin/python bench/cluster/events.py [--events 1000] [--threads 12]

Starts the test cluster (tests/cluster_harness.py), a function that reports each event's token
to a server in the client's namespace, and from the client sends `--events` Event invocations
from `--threads` threads, spread over the three nodes. Each is written to etcd before its 202;
the elected scheduler claims, runs and completes it. Prints the time from the first send until
the last token was reported, and the rate, after a warm-up of 50 events.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from cluster_harness import MARKING_FUNCTION, Cluster  # noqa: E402

NODES = ("n1", "n2", "n3")


def send_and_wait(cluster, name, tokens, threads):
    endpoints = [cluster.endpoint(n) for n in NODES]
    started = time.time()
    sent = cluster.lambda_op("send_events_parallel", endpoints=endpoints, name=name, tokens=tokens,
                             extra={"url": cluster.marks_url}, threads=threads, timeout=1200)
    if sent["failures"]:
        raise SystemExit(f"{len(sent['failures'])} sends failed: {sent['failures'][:3]}")
    cluster.wait_for(lambda: set(tokens) <= set(cluster.marks()), 600, interval=0.05,
                     what="every event delivered")
    return sent["seconds"], time.time() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=12)
    args = parser.parse_args()
    with Cluster(nodes=3) as cluster:
        cluster.start_marks_server()
        name = "events"
        created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n1"), name=name,
                                    source=MARKING_FUNCTION, host_network=True)
        if "error" in created:
            raise SystemExit(f"create failed: {created}")
        for node in NODES:
            cluster.wait_for(lambda: "error" not in cluster.lambda_op("get", endpoint=cluster.endpoint(node),
                                                                       name=name), 30, what=f"{name} on {node}")
        send_and_wait(cluster, name, [f"w{i}" for i in range(50)], args.threads)
        sending, total = send_and_wait(cluster, name, [f"e{i}" for i in range(args.events)], args.threads)
        duplicates = sum(n - 1 for n in cluster.marks().values())
    print("| events | threads | sending | all delivered | events/s end to end | duplicates |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.events} | {args.threads} | {sending:.2f} s | {total:.2f} s | {args.events / total:.0f} "
          f"| {duplicates} |")


if __name__ == "__main__":
    main()
