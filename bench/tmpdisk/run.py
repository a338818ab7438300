#!/usr/bin/env python3
"""What a disk-backed /tmp adds to a sandbox's start, side by side with a tmpfs /tmp.

    KILN_BIN=target/debug/kiln .venv/bin/python bench/tmpdisk/run.py [--n 20] [--pause 1.0]

Starts two kilns (`--tmp-disks on` and `off`, no runtime standbys) and alternates between them,
one start at a time with a pause (`--pause`, 1 s) after each, so that both see the same machine
and a start does not overlap the background work of the one before (the replaced instance's
teardown, the pool's refill):

- coldest: a Python NoOp with `KilnPrebake` off, one new revision (and so one coldest start) per
  round; its `Init Duration` from the REPORT line. The `on` kiln takes a disk from its pool.
- coldest, pool miss: the same with an `EphemeralStorage` size no function asked for before, so
  that the start makes its own disk (`mkfs.ext4`, loop device, mount) on the request's path.
- zygote build: a Python NoOp prebaked at deploy; the snapshot's `build_ms` after each update.

Prints a markdown table of medians and 90th percentiles (ms) and the number of runs.
"""

import argparse
import base64
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from kiln_harness import PYTHON_RUNTIME, Kiln, node_status, wait_for, zip_files  # noqa: E402

NOOP = "def handler(event, context):\n    return 1\n"


def create(server, name, prebake, **extra):
    body = {
        "FunctionName": name, "Runtime": PYTHON_RUNTIME, "Handler": "app.handler",
        "Role": "arn:aws:iam::000000000000:role/bench", "MemorySize": 256, "Timeout": 30,
        "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": NOOP})).decode()},
        "KilnPrebake": {"Mode": prebake}, **extra,
    }
    response = server.signed_request("POST", "/2015-03-31/functions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    assert response.status_code < 300, response.text


def init_ms(server, name):
    _, response = server.invoke(name, {}, LogType="Tail")
    tail = server.log_tail(response)
    match = re.search(r"Init Duration: ([\d.]+) ms", tail)
    assert match and "Start Path: coldest" in tail, tail
    return float(match.group(1))


def coldest(server, name, round):
    server.client().update_function_configuration(FunctionName=name, Environment={"Variables": {"R": str(round)}})
    return init_ms(server, name)


def pool_miss(server, round):
    name = f"miss-{round}"
    create(server, name, "off", EphemeralStorage={"Size": 600 + round})
    try:
        return init_ms(server, name)
    finally:
        server.client().delete_function(FunctionName=name)


def zygote(server, name, round):
    def snapshot():
        return next((s for s in node_status(server)["snapshots"] if s["function"] == name), None)
    old = snapshot()["revision"]
    server.client().update_function_configuration(FunctionName=name, Environment={"Variables": {"R": str(round)}})

    def built():
        s = snapshot()
        return s if s and s["state"] == "ready" and s["revision"] != old else None
    return wait_for(built, timeout=60, interval=0.05, what="the zygote")["build_ms"]


def summary(values):
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
    return f"{statistics.median(values):.1f} / {p90:.1f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--pause", type=float, default=1.0)
    args = parser.parse_args()
    servers = {mode: Kiln(extra_args=["--tmp-disks", mode, "--warm-standbys", "0"]).start() for mode in ("on", "off")}
    results = {case: {mode: [] for mode in servers} for case in ("coldest", "zygote build", "coldest, pool miss")}
    try:
        for server in servers.values():
            create(server, "cold", "off")
            create(server, "zyg", "deploy")
            wait_for(lambda s=server: any(x["function"] == "zyg" and x["state"] == "ready"
                                          for x in node_status(s)["snapshots"]), timeout=60, what="first zygote")
        time.sleep(2)  # the pool fills after start
        # One case at a time, the two kilns alternating, with a pause after each start for what
        # follows it in the background (the replaced instance's teardown, the pool's refill).
        for case, run in (("coldest", lambda s, r: coldest(s, "cold", r)),
                          ("zygote build", lambda s, r: zygote(s, "zyg", r)),
                          ("coldest, pool miss", pool_miss)):
            for round in range(args.n):
                for mode, server in servers.items():
                    results[case][mode].append(run(server, round))
                    time.sleep(args.pause)
    finally:
        for server in servers.values():
            server.cleanup()
    print(f"| start (Python NoOp, 256 MB) | /tmp disk: median / p90 (ms) | /tmp tmpfs: median / p90 (ms) | runs |")
    print("|---|---|---|---|")
    for case, by_mode in results.items():
        print(f"| {case} | {summary(by_mode['on'])} | {summary(by_mode['off'])} | {args.n} |")


if __name__ == "__main__":
    main()
