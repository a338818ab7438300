"""GET and PUT latency and throughput of kiln's object store, side by side with the same
operations on a file on the local disk. Run by bench/objects/run.sh, which starts the servers.

Setups, measured in one interleaved run (round-robin per iteration, so load spikes hit all alike):
  file    PUT: write a temporary file, fsync, rename, fsync the directory (the durability kiln
          gives an acknowledged PUT); GET: open and read the file.
  local   kiln's embedded store (files + SQLite in the data dir), HTTP on 127.0.0.1.
  remote  a kiln fronting a second kiln (--store-only) in another network namespace, 5 ms away
          each way (netem, or the delay relay where the kernel has no netem).

The client is Python's http.client on a keep-alive connection with presigned SigV4 URLs made
before timing, so the client does no signing or XML work per request.
"""

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import boto3
import botocore.config

SIZES = [("1 KB", 1024), ("128 KB", 128 * 1024), ("1 MB", 1024 * 1024), ("10 MB", 10 * 1024 * 1024)]


def iterations(size, quick):
    n = 300 if size <= 128 * 1024 else 120 if size <= 1024 * 1024 else 30
    return max(5, n // 10) if quick else n


class FileTarget:
    name = "file"

    def __init__(self, root):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def prepare(self, key, data):
        self.put(key, data)

    def put(self, key, data):
        tmp = self.root / f".{key}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.root / key)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def get(self, key):
        with open(self.root / key, "rb") as f:
            return f.read()


class S3Target:
    """An S3 endpoint driven with presigned URLs over one keep-alive connection."""

    def __init__(self, name, endpoint, access_key, secret_key, bucket):
        self.name = name
        self.bucket = bucket
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                               aws_secret_access_key=secret_key,
                               config=botocore.config.Config(signature_version="s3v4", retries={"max_attempts": 0}))
        self.s3.create_bucket(Bucket=bucket)
        url = urllib.parse.urlsplit(endpoint)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        self.urls = {}

    def url(self, method, key):
        if (method, key) not in self.urls:
            operation = "put_object" if method == "PUT" else "get_object"
            signed = self.s3.generate_presigned_url(operation, Params={"Bucket": self.bucket, "Key": key},
                                                    ExpiresIn=6 * 3600)
            parts = urllib.parse.urlsplit(signed)
            self.urls[(method, key)] = f"{parts.path}?{parts.query}"
        return self.urls[(method, key)]

    def request(self, method, key, body=None):
        self.conn.request(method, self.url(method, key), body=body,
                          headers={"Content-Length": str(len(body))} if body is not None else {})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{self.name} {method} {key}: {response.status} {data[:300]!r}")
        return data

    def prepare(self, key, data):
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        self.url("GET", key)

    def put(self, key, data):
        self.request("PUT", key, data)

    def get(self, key):
        return self.request("GET", key)


def percentile(samples, p):
    ordered = sorted(samples)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def measure(targets, quick):
    results = []
    for label, size in SIZES:
        data = os.urandom(size)
        n = iterations(size, quick)
        keys = [f"put-{size}-{i}" for i in range(8)]
        for t in targets:
            t.prepare(f"get-{size}", data)
            for key in keys:
                t.put(key, data)  # warm-up: connections open, URLs signed, files exist
        for op in ("PUT", "GET"):
            samples = {t.name: [] for t in targets}
            for i in range(n):
                for t in targets:
                    start = time.perf_counter()
                    if op == "PUT":
                        t.put(keys[i % len(keys)], data)
                    else:
                        got = t.get(f"get-{size}")
                    elapsed = time.perf_counter() - start
                    if op == "GET" and len(got) != size:
                        raise RuntimeError(f"{t.name} returned {len(got)} bytes instead of {size}")
                    samples[t.name].append(elapsed * 1e6)
            for name, s in samples.items():
                p50 = percentile(s, 50)
                results.append({"op": op, "size": label, "bytes": size, "setup": name, "n": len(s),
                                "p50_us": p50, "p99_us": percentile(s, 99), "mean_us": statistics.fmean(s),
                                "mb_per_s_at_p50": size / (p50 / 1e6) / 1e6, "samples_us": s})
            print(f"{op} {label}: " + ", ".join(
                f"{r['setup']} p50 {r['p50_us'] / 1000:.2f} ms" for r in results[-len(targets):]), flush=True)
    return results


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release(), "load_average": os.getloadavg()}


def filesystem(path):
    out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True).stdout.splitlines()
    return out[-1].split()[1] if len(out) > 1 else "?"


def report(results, info, out, command, wan):
    by = {(r["op"], r["size"], r["setup"]): r for r in results}
    setups = [s for s in ("file", "local", "remote") if any(r["setup"] == s for r in results)]
    lines = [
        "# kiln object store: GET and PUT latency and throughput",
        "",
        f"Command: `{command}` (git {info['git']}), {info['date']}.",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, Linux {info['kernel']}; "
        f"data on {info['fs']}; load average at start {info['load_start'][0]:.2f}, "
        f"at end {info['load_end'][0]:.2f}. The machine is shared: compare the columns of one run, not runs.",
        "",
        "Setups, interleaved in one run: **file** = write temp file + fsync + rename + fsync dir / "
        "open + read, in the same filesystem as kiln's data; **local** = kiln's embedded store over HTTP on "
        f"127.0.0.1; **remote** = kiln fronting a `--store-only` kiln in another network namespace, {wan}. "
        "Client: Python http.client, keep-alive, presigned SigV4 URLs made before timing. kiln built with "
        "`--release`.",
        "",
        "| op | size | setup | n | p50 (ms) | p99 (ms) | MB/s at p50 | p50 vs file |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op in ("PUT", "GET"):
        for label, _ in SIZES:
            base = by.get((op, label, "file"))
            for setup in setups:
                r = by.get((op, label, setup))
                if not r:
                    continue
                ratio = f"{r['p50_us'] / base['p50_us']:.1f}×" if base else ""
                lines.append(f"| {op} | {label} | {setup} | {r['n']} | {r['p50_us'] / 1000:.3f} | "
                             f"{r['p99_us'] / 1000:.3f} | {r['mb_per_s_at_p50']:.1f} | {ratio} |")
    lines += ["", "Raw samples (µs) are in `objects.json`; `objects.png` plots p50 and p99.", ""]
    (out / "objects.md").write_text("\n".join(lines))
    (out / "objects.json").write_text(json.dumps({"machine": info, "command": command, "wan": wan,
                                                  "results": results}, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, op in zip(axes, ("PUT", "GET")):
        width = 0.8 / len(setups)
        for i, setup in enumerate(setups):
            p50 = [by[(op, label, setup)]["p50_us"] / 1000 for label, _ in SIZES]
            p99 = [by[(op, label, setup)]["p99_us"] / 1000 for label, _ in SIZES]
            xs = [j + i * width for j in range(len(SIZES))]
            ax.bar(xs, p50, width, label=f"{setup} p50")
            ax.scatter(xs, p99, marker="_", s=200, color="black")
        ax.set_xticks([j + width * (len(setups) - 1) / 2 for j in range(len(SIZES))], [label for label, _ in SIZES])
        ax.set_yscale("log")
        ax.set_ylabel("ms (bar p50, tick p99)")
        ax.set_title(op)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "objects.png", dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True, help="scratch dir (data dirs, files)")
    parser.add_argument("--out", required=True, help="where objects.{md,json,png} go")
    parser.add_argument("--command", default="bench/objects/run.sh")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-remote", action="store_true")
    args = parser.parse_args()
    work = Path(args.work)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # The test harness starts kilns, the store-only kiln and the WAN namespace.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from kiln_harness import Kiln
    from s3_harness import StoreOnlyKiln, WanLink, s3_endpoint

    stack = []
    try:
        local = Kiln(data_dir=work / "local").start()
        stack.append(local.cleanup)
        targets = [FileTarget(work / "files"),
                   S3Target("local", s3_endpoint(local), local.access_key, local.secret_key, "bench-local")]
        wan = ""
        if not args.no_remote:
            link = WanLink(f"kbo-{os.getpid() % 100000}", subnet_octet=(os.getpid() + 7) % 250 + 1, delay_ms=5)
            link.__enter__()
            stack.append(lambda: link.__exit__(None, None, None))
            store = StoreOnlyKiln(listen=f"{link.ns_ip}:9001", netns=link.name).start()
            stack.append(store.cleanup)
            backend = f"http://{link.expose(9001)}"
            front = Kiln(data_dir=work / "front", extra_args=[
                "--s3-backend", backend, "--s3-backend-access-key", store.access_key,
                "--s3-backend-secret-key", store.secret_key]).start()
            stack.append(front.cleanup)
            targets.append(S3Target("remote", s3_endpoint(front), front.access_key, front.secret_key,
                                    "bench-remote"))
            wan = link.describe()
        info = machine()
        info["load_start"] = info.pop("load_average")
        info["fs"] = filesystem(work)
        info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        info["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=Path(__file__).parent).stdout.strip() or "?"
        results = measure(targets, args.quick)
        info["load_end"] = os.getloadavg()
        report(results, info, out, args.command, wan)
        print(f"wrote {out / 'objects.md'}")
    finally:
        for undo in reversed(stack):
            undo()


if __name__ == "__main__":
    sys.exit(main())
