"""OFC's macro benchmark (Figure 9 and Table 2) on kiln: a FAASLOAD-like load injector.

Run by `bench/ofc/run.sh --macro`. Tenants each own one image function (an operation in Python or Node.js) and
invoke it with exponentially distributed inter-arrival times on inputs of varied sizes, for a fixed window, 8 and
then 24 tenants. Each tenant books memory by a profile: naive (the maximum, 2048 MB), advanced (its observed
maximum, from the dataset bench/ofc/run.sh records) or normal (1.7 times advanced). Each run is kiln as OFC
(object cache lent by sized instances, memory prediction on) or the baseline (no cache, no prediction), in front of
the same backing store 5 ms away. Per run and function: total execution time, invocations sized below their booked
memory (scale-downs) and raised back (scale-ups), bad predictions (raised or retried), failed invocations, the
cache's hit ratio, and the cache's capacity and contents over time. Writes faasload.md, faasload.json and
faasload.png.
"""

import argparse
import base64
import datetime
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from kiln_harness import Kiln, detach_mounts  # noqa: E402
from ofc import BUCKET, DATASET_SIZES, OPS, log, png  # noqa: E402
from s3_harness import StoreOnlyKiln, WanLink, s3_client  # noqa: E402

LANGUAGES = {"python": ("python3.11", "app.handler"), "node": ("nodejs20.x", "index.handler")}
# The inputs tenants draw from: the dataset's sizes up to 640x480 (2 cores serve 24 tenants).
INPUTS = DATASET_SIZES[:8]
NAIVE_MB = 2048
PROFILES = ["naive", "advanced", "normal"]


def booked_sizes(dataset_path):
    """Each (language, op)'s observed maximum over the inputs used here, rounded up to 64 MB: the advanced
    tenant's booking."""
    peaks = {}
    names = {f"{w}x{h}" for w, h in INPUTS}
    for line in dataset_path.read_text().splitlines():
        row = json.loads(line)
        size = row["event"]["key"].split("/")[1].split(".")[0]
        if size not in names:
            continue
        language = "python" if "python" in row["function"] else "node"
        key = (language, row["event"]["op"])
        peaks[key] = max(peaks.get(key, 0), row["peak_mb"])
    # Lambda's smallest size is 128 MB.
    return {k: max(128, -(-v // 64) * 64) for k, v in peaks.items()}


def tenants(n, seed):
    rng = random.Random(seed)
    combos = [(language, op) for language in LANGUAGES for op in OPS]
    rng.shuffle(combos)
    return [(f"t{i:02d}-{language}-{op}", language, op) for i, (language, op) in
            enumerate((combos * 3)[:n])]


def memory_of(profile, advanced):
    return {"naive": NAIVE_MB, "advanced": advanced, "normal": int(advanced * 1.7)}[profile]


def sample_metrics(server, stop, series):
    while not stop.is_set():
        text = server.signed_request("GET", "/metrics", "", {}).text
        point = {"t": time.time()}
        for name in ("capacity_bytes", "bytes", "lendable_bytes", "slack_bytes"):
            found = re.search(rf"^kiln_object_cache_{name} (\d+)", text, re.M)
            point[name] = int(found.group(1)) if found else 0
        series.append(point)
        stop.wait(1.0)


def cache_counts(server):
    text = server.signed_request("GET", "/metrics", "", {}).text
    out = {}
    for name in ("hits", "misses", "bypassed"):
        found = re.search(rf"^kiln_object_cache_{name}_total (\d+)", text, re.M)
        out[name] = int(found.group(1)) if found else 0
    retries = sum(int(v) for v in re.findall(r"^kiln_prediction_retries_total\{[^}]*\} (\d+)", text, re.M))
    out["retries"] = retries
    for decision in ("admit", "bypass", "learning"):
        out[f"admission_{decision}"] = sum(int(v) for v in re.findall(
            rf'^kiln_object_cache_admissions_total\{{[^}}]*decision="{decision}"[^}}]*\}} (\d+)', text, re.M))
    out["cold_starts"] = sum(int(v) for v in re.findall(r"^kiln_cold_starts_total\{[^}]*\} (\d+)", text, re.M))
    return out


def invoke(client, name, key):
    event = {"op": name.split("-")[2], "store": "s3", "bucket": BUCKET, "key": key,
             "out": f"out/{uuid.uuid4().hex}"}
    started = time.perf_counter()
    try:
        response = client.invoke(FunctionName=name, Payload=json.dumps(event), LogType="Tail")
    except Exception as e:  # a throttle or a failure to reach kiln: counted, never hidden
        return {"failed": True, "error": type(e).__name__, "total_ms": (time.perf_counter() - started) * 1e3}
    body = json.loads(response["Payload"].read())
    tail = base64.b64decode(response.get("LogResult", "")).decode(errors="replace")
    report = next((line for line in tail.splitlines() if line.startswith("REPORT")), "")
    duration = re.search(r"Duration: ([\d.]+) ms", report)
    limit = re.search(r"Memory Limit: (\d+) MB( \(raised\))?", report)
    return {
        "failed": "FunctionError" in response,
        "error": body.get("errorType") if "FunctionError" in response else None,
        "total_ms": (time.perf_counter() - started) * 1e3,
        "duration_ms": float(duration.group(1)) if duration else None,
        "exec_ms": sum(body.get(k, 0) for k in ("e_ms", "t_ms", "l_ms")) if "FunctionError" not in response else None,
        "limit_mb": int(limit.group(1)) if limit else None,
        "raised": bool(limit and limit.group(2)),
        "cold": "Init Duration" in report,
    }


def run(args, remote_args, functions, setup, profile, n_tenants, booked):
    ofc = setup == "ofc"
    flags = ["--idle-ttl", "600"]
    if ofc:
        flags += ["--object-cache", "on", "--object-cache-sizing", "lent", "--object-cache-mb", "4096",
                  "--memory-prediction", "on", "--prediction-min-samples", str(args.min_samples)]
    else:
        flags += ["--object-cache", "off", "--memory-prediction", "off"]
    server = Kiln(extra_args=[*remote_args, *flags]).start()
    try:
        who = tenants(n_tenants, seed=n_tenants)
        for name, language, op in who:
            runtime, handler = LANGUAGES[language]
            server.cli("deploy", name, "--runtime", runtime, "--handler", handler, "--code",
                       str(functions / language), "--memory", str(memory_of(profile, booked[(language, op)])),
                       "--timeout", "120", timeout=600)
        rng = random.Random(7)
        keys = [f"ds/{w}x{h}.png" for w, h in INPUTS]
        # Warm-up (not measured): each tenant's model sees invocations, as a deployed function's has.
        client = server.client(read_timeout=300)
        for _ in range(args.warmup):
            for name, _, _ in who:
                invoke(client, name, rng.choice(keys))
        before = cache_counts(server)
        stop = threading.Event()
        series = []
        sampler = threading.Thread(target=sample_metrics, args=(server, stop, series), daemon=True)
        sampler.start()
        records = []
        lock = threading.Lock()
        deadline = time.time() + args.window

        def tenant(name, seed):
            own = random.Random(seed)
            c = server.client(read_timeout=300)
            while True:
                time.sleep(own.expovariate(1.0 / args.mean_interval))
                if time.time() >= deadline:
                    return
                r = invoke(c, name, own.choice(keys))
                r.update({"tenant": name, "at": time.time()})
                with lock:
                    records.append(r)

        threads = [threading.Thread(target=tenant, args=(name, i)) for i, (name, _, _) in enumerate(who)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        sampler.join()
        after = cache_counts(server)
        counts = {k: after[k] - before[k] for k in after}
        return {"setup": setup, "profile": profile, "tenants": n_tenants, "records": records, "series": series,
                "counts": counts,
                "booked": {name: memory_of(profile, booked[(lang, op)]) for name, lang, op in who}}
    finally:
        server.cleanup()
        detach_mounts(server.data_dir)


def summarise(result):
    recs = result["records"]
    per = {}
    for r in recs:
        per.setdefault(r["tenant"], []).append(r)
    functions = []
    for name, rs in sorted(per.items()):
        ok = [r for r in rs if not r["failed"]]
        sized = [r for r in ok if r.get("limit_mb")]
        functions.append({
            "function": name, "booked_mb": result["booked"][name], "invocations": len(rs),
            "failed": len(rs) - len(ok),
            "exec_ms_total": sum(r["exec_ms"] or 0 for r in ok),
            "exec_ms_p50": float(np.median([r["exec_ms"] for r in ok])) if ok else None,
            "scale_downs": len(sized), "scale_ups": sum(r["raised"] for r in sized),
            "mean_limit_mb": float(np.mean([r["limit_mb"] for r in sized])) if sized else None,
        })
    c = result["counts"]
    reads = c["hits"] + c["misses"]
    return {"functions": functions, "invocations": len(recs), "failed": sum(f["failed"] for f in functions),
            "exec_ms_total": sum(f["exec_ms_total"] for f in functions),
            "hit_ratio": c["hits"] / reads if reads else None, "retries": c["retries"],
            "scale_ups": sum(f["scale_ups"] for f in functions),
            "scale_downs": sum(f["scale_downs"] for f in functions),
            "cache_peak_mb": max((p["capacity_bytes"] for p in result["series"]), default=0) / 2 ** 20,
            "cached_peak_mb": max((p["bytes"] for p in result["series"]), default=0) / 2 ** 20}


def report(args, meta, results, out):
    lines = ["# kiln as OFC under a FAASLOAD-like load (OFC Figure 9 / Table 2)", "",
             f"Command: `{args.command}` (git {meta['git']}), {meta['date']}.", "",
             f"Machine: {meta['machine']}. Backing store: a `--store-only` kiln in its own network namespace, "
             f"{meta['link']}.",
             "",
             f"Each tenant owns one function (an image operation in Python or Node.js) and invokes it with "
             f"exponential inter-arrival times (mean {args.mean_interval} s) for {args.window} s, on PNG inputs of "
             f"{INPUTS[0][0]}x{INPUTS[0][1]} to {INPUTS[-1][0]}x{INPUTS[-1][1]}, after {args.warmup} unmeasured "
             f"invocations per tenant. *kiln (OFC)*: object cache lent by sized instances (`--object-cache-sizing "
             f"lent`, at most 4096 MiB), memory prediction on (`--prediction-min-samples {args.min_samples}`), "
             "admission by each function's benefit model. *baseline*: no cache, no prediction. Booked memory: naive "
             f"{NAIVE_MB} MB; advanced, the function's observed maximum (rounded up to 64 MB, at least Lambda's 128 MB); normal, 1.7 × "
             "advanced.", "",
             "| tenants | profile | setup | invocations | failed | total execution (s) | vs baseline | hit ratio | "
             "scale-downs | scale-ups | bad predictions (raised + retried) | cache capacity peak (MiB) | cached peak (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        base = next((b for b in results if b["setup"] == "baseline" and b["tenants"] == r["tenants"]), None)
        vs = ""
        if base and r["setup"] != "baseline":
            # Per invocation, since the runs' counts differ a little.
            mine = s["exec_ms_total"] / max(1, s["invocations"] - s["failed"])
            theirs = base["summary"]["exec_ms_total"] / max(1, base["summary"]["invocations"] - base["summary"]["failed"])
            change = (1 - mine / theirs) * 100
            vs = f"{change:.0f}% less per invocation" if change >= 0 else f"{-change:.0f}% more per invocation"
        hit = f"{s['hit_ratio'] * 100:.0f}%" if s["hit_ratio"] is not None else "–"
        lines.append(f"| {r['tenants']} | {r['profile']} | {r['setup']} | {s['invocations']} | {s['failed']} | "
                     f"{s['exec_ms_total'] / 1e3:.1f} | {vs} | {hit} | {s['scale_downs']} | {s['scale_ups']} | "
                     f"{s['scale_ups'] + s['retries']} | {s['cache_peak_mb']:.0f} | {s['cached_peak_mb']:.0f} |")
    lines += ["", "## Per function (kiln as OFC, normal profile)", ""]
    for r in results:
        if r["setup"] != "ofc" or r["profile"] != "normal":
            continue
        lines += [f"### {r['tenants']} tenants", "",
                  "| function | booked MB | invocations | failed | execution p50 (ms) | total (s) | sized | mean limit (MB) | "
                  "raised |", "|---|---|---|---|---|---|---|---|---|"]
        for f in r["summary"]["functions"]:
            p50 = f"{f['exec_ms_p50']:.1f}" if f["exec_ms_p50"] is not None else "–"
            limit = f"{f['mean_limit_mb']:.0f}" if f["mean_limit_mb"] is not None else "–"
            lines.append(f"| {f['function']} | {f['booked_mb']} | {f['invocations']} | {f['failed']} | {p50} | "
                         f"{f['exec_ms_total'] / 1e3:.1f} | {f['scale_downs']} | {limit} | {f['scale_ups']} |")
        lines.append("")
    lines += ["Failed invocations are counted as they happen (a throttle, 429, included). kiln's node budget "
              "(here 8192 MB) counts each instance's current limit: the limit predicted for its invocation once "
              "the function's model is mature, its booked MemorySize before that (the baseline always books "
              "MemorySize). Until the models mature, the naive profile's 2048 MB per instance fits four "
              "instances at a time, so its tenants evict one another (cold starts). The cache has the memory "
              "that sized instances leave unused, as far as the budget their limits leave free allows.", "",
              "`faasload.png` plots the cache's capacity and contents over time for each run of kiln as OFC; raw "
              "records are in `faasload.json`."]
    (out / "faasload.md").write_text("\n".join(lines) + "\n")


def plot(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [r for r in results if r["setup"] == "ofc"]
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), squeeze=False)
    for ax, r in zip(axes[:, 0], runs):
        series = r["series"]
        if not series:
            continue
        t0 = series[0]["t"]
        ts = [p["t"] - t0 for p in series]
        ax.plot(ts, [p["capacity_bytes"] / 2 ** 20 for p in series], label="capacity (lent − slack)")
        ax.plot(ts, [p["bytes"] / 2 ** 20 for p in series], label="cached")
        ax.set_title(f"{r['tenants']} tenants, {r['profile']}")
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left")
    axes[-1, 0].set_xlabel("s")
    fig.tight_layout()
    fig.savefig(out / "faasload.png", dpi=100)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--functions", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--command", default="bench/ofc/run.sh --macro")
    parser.add_argument("--window", type=int, default=120)
    parser.add_argument("--mean-interval", type=float, default=3.0)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--min-samples", type=int, default=20)
    parser.add_argument("--tenants", default="8,24")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", default="baseline:normal,ofc:naive,ofc:advanced,ofc:normal",
                        help="setup:profile pairs to run for each number of tenants")
    args = parser.parse_args()
    if args.quick:
        args.window, args.warmup, args.tenants = 20, 3, "4"
    args.out.mkdir(parents=True, exist_ok=True)
    booked = booked_sizes(args.dataset)
    results = []
    with WanLink(f"kfl-{os.getpid() % 10000}", subnet_octet=(os.getpid() + 11) % 250 + 1, delay_ms=5) as link:
        store = StoreOnlyKiln(listen=f"{link.ns_ip}:9001", netns=link.name).start()
        try:
            endpoint = f"http://{link.expose(9001)}"
            remote_args = ["--s3-backend", endpoint, "--s3-backend-access-key", store.access_key,
                           "--s3-backend-secret-key", store.secret_key]
            remote = s3_client(endpoint=endpoint, access_key=store.access_key, secret_key=store.secret_key,
                               region="us-east-1")
            remote.create_bucket(Bucket=BUCKET)
            for index, (w, h) in enumerate(INPUTS):
                remote.put_object(Bucket=BUCKET, Key=f"ds/{w}x{h}.png", Body=png(w, h, seed=100 + index))
            for n in [int(x) for x in args.tenants.split(",")]:
                for setup, profile in [pair.split(":") for pair in args.runs.split(",")]:
                    log(f"{n} tenants, {setup}, {profile}")
                    result = run(args, remote_args, args.functions, setup, profile, n, booked)
                    result["summary"] = summarise(result)
                    s = result["summary"]
                    log(f"  {s['invocations']} invocations, {s['failed']} failed, "
                        f"{s['exec_ms_total'] / 1e3:.1f} s of execution, hit ratio {s['hit_ratio']}")
                    results.append(result)
            meta_link = link.describe()
        finally:
            store.cleanup()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "")
    meta = {"git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                  cwd=ROOT).stdout.strip(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu}, {os.cpu_count()} cores", "link": meta_link}
    (args.out / "faasload.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    report(args, meta, results, args.out)
    plot(results, args.out)
    log(f"results in {args.out}")


if __name__ == "__main__":
    main()
