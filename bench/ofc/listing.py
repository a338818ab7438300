"""What the object cache adds to a ListObjectsV2, side by side in one run.

Through the cache, a listing's pages carry the cache's own continuation tokens (so that a listing
that began before a sequence's intermediate outputs were written picks them up from where it is),
and every page after the first is merged: the backing store is asked from `start-after`, and its
page is merged with the intermediates under the prefix (none here). This measures, from one
Python client on loopback, against the same local store without the cache:

- the first page of 1000 keys (passed through, its token rewritten);
- a later page of 1000 keys (the merged path);
- a whole listing of 5000 keys in pages of 1000;

as medians, with kiln's own CPU time per listing (from /proc).

Run as root: `.venv/bin/python bench/ofc/listing.py` (after `cargo build --release -p kiln`).
Writes bench/results/ofc-listing.md.
"""

import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("KILN_BIN", str(ROOT / "target" / "release" / "kiln"))
from kiln_harness import Kiln  # noqa: E402
from s3_harness import s3_client, wait_until  # noqa: E402

KEYS = 5000
PAGE = 1000
REPS = 100
BUCKET = "listing"


def cpu_s(pid):
    """kiln's on-CPU time, summed over its threads (schedstat: nanoseconds, not clock ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except OSError:
            pass
    return total / 1e9


def dirty_bytes(server):
    text = server.signed_request("GET", "/metrics", "", {}).text
    for line in text.splitlines():
        if line.startswith("kiln_object_cache_dirty_bytes "):
            return int(line.split()[1])
    return 0


def prepare(server, cached):
    s3 = s3_client(server)
    s3.create_bucket(Bucket=BUCKET)
    for i in range(KEYS):
        s3.put_object(Bucket=BUCKET, Key=f"data/{i:06d}", Body=b"x")
    if cached:
        wait_until(lambda: dirty_bytes(server) == 0, 120, "the keys written back")
    token = s3.list_objects_v2(Bucket=BUCKET, MaxKeys=PAGE)["NextContinuationToken"]

    def page_one():
        return s3.list_objects_v2(Bucket=BUCKET, MaxKeys=PAGE)

    def page_two():
        return s3.list_objects_v2(Bucket=BUCKET, MaxKeys=PAGE, ContinuationToken=token)

    def everything():
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, PaginationConfig={"PageSize": PAGE})
        n = sum(len(p.get("Contents", [])) for p in pages)
        assert n == KEYS, n

    return {"page 1 (1000 keys)": page_one, "page 2 (1000 keys)": page_two,
            f"all {KEYS} keys, pages of {PAGE}": everything}


def measure(servers, listings):
    """Each listing on each server in turn, repetition by repetition, so that drift hits all alike."""
    out = {}
    for name in listings[0]:
        times = [[] for _ in servers]
        cpu = [[] for _ in servers]
        for _ in range(5):
            for fns in listings:
                fns[name]()
        for _ in range(REPS):
            for i, (server, fns) in enumerate(zip(servers, listings)):
                before = cpu_s(server.proc.pid)
                t = time.perf_counter_ns()
                fns[name]()
                times[i].append((time.perf_counter_ns() - t) / 1e6)
                cpu[i].append((cpu_s(server.proc.pid) - before) * 1000)
        out[name] = [(statistics.median(t), statistics.median(c), statistics.quantiles(c, n=4))
                     for t, c in zip(times, cpu)]
    return out


def setups(cache):
    """The store alone; the cache holding nothing (no object is small enough); the cache holding every key."""
    return (("no-cache", ["--object-cache", "off"]),
            ("cache-empty", [*cache, "--object-cache-max-object-kb", "0"]),
            ("cache", cache))


def main():
    work = Path(tempfile.mkdtemp(prefix="kiln-listing-"))
    servers = []
    try:
        cache = ["--object-cache", "on", "--object-cache-admission", "all", "--object-cache-sizing", "fixed"]
        for label, args in setups(cache):
            servers.append(Kiln(data_dir=work / label, extra_args=args).start())
        listings = [prepare(server, cached) for server, cached in zip(servers, (False, True, True))]
        results = measure(servers, listings)
    finally:
        for server in servers:
            server.cleanup()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    lines = [
        "# ListObjectsV2 through the object cache",
        "",
        f"`.venv/bin/python bench/ofc/listing.py` (git {commit}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC), release build, one boto3 client on "
        f"loopback, the local store on the data dir; {KEYS} keys; the three kilns take turns, {REPS} times each. "
        "Client time: median. kiln's CPU per listing: median [quartiles], from its threads' schedstat (ns). "
        "Through the cache, a page after the first takes the merged path (asked from `start-after`, merged with "
        "the intermediates under the prefix: none here); the first page passes through with the cache's token. "
        "The middle setup is the cache holding no entries (`--object-cache-max-object-kb 0`), the last one holding "
        f"all {KEYS} keys.",
        "",
        "| listing | store alone | cache, empty | cache, holding the keys |",
        "|---|---|---|---|",
    ]
    for name, row in results.items():
        cells = [f"{t:.2f} ms; CPU {c:.2f} [{q[0]:.2f}–{q[2]:.2f}] ms" for t, c, q in row]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The client's time is mostly boto3 parsing the entries; kiln's CPU is the column to compare. The merged "
        "path copies nothing when there is nothing to merge (it only leaves out what lies before the cursor).",
    ]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "ofc-listing.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
