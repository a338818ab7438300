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
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    """Each listing on each server in turn, repetition by repetition, so that drift hits both alike."""
    out = {}
    for name in listings[0]:
        times = [[] for _ in servers]
        cpu = [0.0 for _ in servers]
        for _ in range(5):
            for fns in listings:
                fns[name]()
        for _ in range(REPS):
            for i, (server, fns) in enumerate(zip(servers, listings)):
                before = cpu_s(server.proc.pid)
                t = time.perf_counter_ns()
                fns[name]()
                times[i].append((time.perf_counter_ns() - t) / 1e6)
                cpu[i] += cpu_s(server.proc.pid) - before
        out[name] = [(statistics.median(t), c / REPS * 1000) for t, c in zip(times, cpu)]
    return out


def main():
    work = Path(tempfile.mkdtemp(prefix="kiln-listing-"))
    servers = []
    try:
        for label, args in (("no-cache", ["--object-cache", "off"]),
                            ("cache", ["--object-cache", "on", "--object-cache-admission", "all",
                                       "--object-cache-sizing", "fixed"])):
            servers.append(Kiln(data_dir=work / label, extra_args=args).start())
        listings = [prepare(server, cached) for server, cached in zip(servers, (False, True))]
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
        f"loopback, the local store on the data dir; {KEYS} keys; medians of {REPS}, the two kilns taking turns; "
        "kiln's CPU from /proc in clock ticks (10 ms), averaged. Through the cache, a page "
        "after the first takes the merged path (asked from `start-after`, merged with the intermediates under the "
        "prefix: none here); the first page passes through with the cache's token.",
        "",
        "| listing | no cache (ms) | cache (ms) | ratio | kiln CPU, no cache (ms) | kiln CPU, cache (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for name, ((plain, plain_cpu), (cached, cached_cpu)) in results.items():
        lines.append(f"| {name} | {plain:.2f} | {cached:.2f} | {cached / plain:.2f} | {plain_cpu:.2f} | "
                     f"{cached_cpu:.2f} |")
    lines += [
        "",
        "The client's time is mostly boto3 parsing 1000 entries; kiln's CPU is the column to compare. The merged "
        "path copies nothing when there is nothing to merge (it only leaves out what lies before the cursor).",
    ]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "ofc-listing.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
