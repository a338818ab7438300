"""Cluster mode's scale-out: warm NoOp throughput on 1, 2 and 3 nodes, each node (kiln and its
instances) held to the same CPU quota with --cgroup-parent, so that the machine's cores are not
what the nodes share.

    KILN_BIN=target/release/kiln .venv/bin/python bench/cluster/scale.py [--quota 0.4] [--clients 8] [--duration 10]

For each node count N it starts the test cluster (tests/cluster_harness.py: 3 etcd members, N
kiln nodes, a store-only kiln, each in a network namespace), each node under
`kiln-bench-<pid>/nN` with `cpu.cfs_quota_us` (v1) or `cpu.max` (v2) set to QUOTA of one CPU,
deploys a Python and a Node NoOp, warms them on every node, and runs closed loops of signed
invokes with bench/loadgen (release: `cargo build --release -p loadgen`) from the client's
namespace, two ways: (i) the clients spread evenly over the nodes, one loadgen per node;
(ii) every client entering n1 (which forwards what its own instances cannot take). Prints a
markdown table of throughput, p50 and p99 per runtime, N and way, and the speedup of 3 nodes
over one (the target for (i): ≥ 2.4×). The load generator and etcd are outside every quota.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from cluster_harness import API_PORT, Cluster  # noqa: E402

CGROUP = Path("/sys/fs/cgroup")
FUNCTIONS = {
    "noop-python": ("python3.11", "app.handler", "app.py", "def handler(event, context):\n    return {}\n"),
    "noop-node": ("nodejs20.x", "index.handler", "index.js", "exports.handler = async () => ({});\n"),
}


def set_quota(parent, share):
    """Creates cgroup `parent` with a CPU quota of `share` of one CPU (period 100 ms)."""
    quota = int(share * 100_000)
    if (CGROUP / "cgroup.controllers").exists():
        levels = parent.split("/")
        for i in range(len(levels)):
            d = CGROUP.joinpath(*levels[: i + 1])
            d.mkdir(exist_ok=True)
            (d.parent / "cgroup.subtree_control").write_text("+cpu")
        (CGROUP / parent / "cpu.max").write_text(f"{quota} 100000")
    else:
        d = CGROUP / "cpu" / parent
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.cfs_period_us").write_text("100000")
        (d / "cpu.cfs_quota_us").write_text(str(quota))


def remove_tree(top):
    for base in [CGROUP] if (CGROUP / "cgroup.controllers").exists() else [CGROUP / c for c in ("memory", "pids", "cpu")]:
        root = base / top
        if not root.is_dir():
            continue
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
            try:
                d.rmdir()
            except OSError:
                pass


def deploy(cluster, name):
    runtime, handler, filename, source = FUNCTIONS[name]
    created = cluster.lambda_op("create_file", endpoint=cluster.endpoint("n1"), name=name, runtime=runtime,
                                handler=handler, filename=filename, source=source)
    assert "error" not in created, created
    for i in range(1, cluster.node_count + 1):
        cluster.wait_for(lambda: "error" not in cluster.lambda_op(
            "invoke_payload", endpoint=cluster.endpoint(f"n{i}"), name=name, payload={}), 90,
            what=f"{name} on n{i}")


def loadgen(cluster, binary, creds, node, name, clients, duration):
    out = subprocess.run(cluster.enter("client") + [
        str(binary), "throughput", "--url", f"http://{cluster.ip(node)}:{API_PORT}",
        "--path", f"/2015-03-31/functions/{name}/invocations", "--creds", str(creds),
        "--concurrency", str(clients), "--duration", str(duration), "--warmup", "2"],
        capture_output=True, text=True, timeout=duration + 120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def run_way(cluster, binary, creds, name, nodes, clients, duration):
    """Throughput and latency with `clients` spread over `nodes` (each a loadgen of its own)."""
    share = [clients // len(nodes) + (1 if i < clients % len(nodes) else 0) for i in range(len(nodes))]
    results = [None] * len(nodes)

    def one(i):
        results[i] = loadgen(cluster, binary, creds, nodes[i], name, share[i], duration)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(nodes)) if share[i]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in results if r]
    errors = sum(r["errors"] for r in done)
    return {"rps": sum(r["rps"] for r in done), "errors": errors,
            "p50_ms": max(r["latency_ns"]["p50"] for r in done) / 1e6,
            "p99_ms": max(r["latency_ns"]["p99"] for r in done) / 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quota", type=float, default=0.4)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--loadgen", default=str(ROOT / "target" / "release" / "loadgen"))
    args = ap.parse_args()
    top = f"kiln-bench-{os.getpid()}"
    rows = []
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            for i in range(1, n + 1):
                set_quota(f"{top}/n{i}", args.quota)
            with Cluster(nodes=n, node_args=lambda name: ["--cgroup-parent", f"{top}/{name}"]) as cluster:
                creds = cluster.dir / "bench-creds.json"
                key, secret = cluster.credentials()
                creds.write_text(json.dumps({"accessKeyId": key, "secretAccessKey": secret, "region": "us-east-1"}))
                nodes = [f"n{i}" for i in range(1, n + 1)]
                for name in FUNCTIONS:
                    deploy(cluster, name)
                    spread = run_way(cluster, args.loadgen, creds, name, nodes, args.clients, args.duration)
                    one = run_way(cluster, args.loadgen, creds, name, ["n1"], args.clients, args.duration)
                    rows.append((name, n, spread, one))
    finally:
        remove_tree(top)
    print(f"`bench/cluster/scale.py --quota {args.quota} --clients {args.clients} --duration {args.duration}` "
          f"(kiln {os.environ.get('KILN_BIN', 'target/debug/kiln')}), load average "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}\n")
    print("| function | nodes | (i) spread: invokes/s | p50 ms | p99 ms | (ii) into n1: invokes/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, spread, one in rows:
        print(f"| {name} | {n} | {spread['rps']:.0f} | {spread['p50_ms']:.2f} | {spread['p99_ms']:.2f} "
              f"| {one['rps']:.0f} | {one['p50_ms']:.2f} | {one['p99_ms']:.2f} | {spread['errors'] + one['errors']} |")
    for name in FUNCTIONS:
        by_n = {n: (s["rps"], o["rps"]) for f, n, s, o in rows if f == name}
        if 1 in by_n and 3 in by_n:
            print(f"\n{name}: 3 nodes ÷ 1 node, (i) spread {by_n[3][0] / by_n[1][0]:.2f}×, "
                  f"(ii) into n1 {by_n[3][1] / by_n[1][1]:.2f}× (target for (i): ≥ 2.4×)")


if __name__ == "__main__":
    main()
