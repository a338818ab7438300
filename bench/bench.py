#!/usr/bin/env python3
"""Driver of bench/run.sh: measures kiln's Invoke path against bare-server floors.

run.sh builds everything, starts kiln and the floor servers and hands them over in a JSON file
(--servers); this script deploys the NoOp functions, runs every measurement with the Rust client
(bench/loadgen) and boto3, and writes bench/results/core-invoke.{md,json,png}. It never starts
or stops a server itself: run.sh owns their lifetime (and its trap their cleanup).
"""

import argparse
import datetime
import glob
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
FUNCTIONS = {
    # name: (runtime, handler, file in the zip, source)
    "noop-node": ("nodejs20.x", "index.handler", "index.js", BENCH / "functions/node/index.js"),
    "noop-python": ("python3.11", "app.handler", "app.py", BENCH / "functions/python/app.py"),
}
# Setups of the warm-latency and throughput phases: (name, server key in servers.json, function)
KILN_SETUPS = [("kiln-node", "kiln", "noop-node"), ("kiln-python", "kiln", "noop-python")]
FLOOR_SETUPS = [
    ("floor-node", "floor-node", None),
    ("floor-py-httpserver", "floor-py-httpserver", None),
    ("floor-py-asyncio", "floor-py-asyncio", None),
]
TARGETS = {"p50_over_floor_us": 150.0, "p99_us": 1000.0, "cpu_per_invoke_us": 50.0}
SCALE = {"Nightcore external call": 285.0, "OpenFaaS": 1090.0, "AWS Lambda (approx.)": 10000.0}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------- statistics

def pct(a, q):
    """Nearest-rank percentile (the same definition loadgen uses)."""
    return float(np.percentile(np.asarray(a), q, method="inverted_cdf"))


def boot(a, q, reps, seed):
    """Bootstrap distribution (reps values) of the q-th percentile of sample a."""
    a = np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    out = np.empty(reps)
    chunk = max(1, 2_000_000 // len(a))
    for start in range(0, reps, chunk):
        k = min(chunk, reps - start)
        idx = rng.integers(0, len(a), size=(k, len(a)))
        out[start:start + k] = np.percentile(a[idx], q, axis=1, method="inverted_cdf")
    return out


def ci(dist):
    return [float(np.percentile(dist, 2.5)), float(np.percentile(dist, 97.5))]


def summarize(samples_us, boot_reps, name=""):
    a = np.asarray(samples_us, dtype=np.float64)
    s = {
        "n": int(len(a)),
        "mean": float(a.mean()),
        "p50": pct(a, 50), "p90": pct(a, 90), "p99": pct(a, 99), "p999": pct(a, 99.9),
        "min": float(a.min()), "max": float(a.max()),
    }
    if boot_reps:
        # A seed per setup: the bootstraps of two setups must not share resampling indices.
        seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        s["_boot_p50"] = boot(a, 50, boot_reps, seed)
        s["_boot_p99"] = boot(a, 99, boot_reps, seed + 1)
        s["p50_ci95"] = ci(s["_boot_p50"])
        s["p99_ci95"] = ci(s["_boot_p99"])
    return s


def public(summary):
    return {k: v for k, v in summary.items() if not k.startswith("_")}


# ----------------------------------------------------------------------------------- helpers

def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001 - machine facts are best effort
        return f"unavailable ({e})"


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def proc_stats():
    """Every process's parent, start time, and CPU ticks (its own utime+stime, and those of the
    children it reaped), from /proc/PID/stat."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        rest = text[text.rfind(")") + 2:].split()
        stats[int(entry)] = {"ppid": int(rest[1]), "start": int(rest[19]),
                             "own_ticks": int(rest[11]) + int(rest[12]),
                             "children_ticks": int(rest[13]) + int(rest[14])}
    return stats


def cpu_account():
    """CPU ticks so far: the whole machine's busy time and steal, and our own process tree's.

    Ours is run.sh (this script's parent) and all its descendants: kiln and its sandboxes, the
    floors, this driver and loadgen, each with its reaped children's time (cutime+cstime), so a
    process that ended between two reads still counts. Busy minus ours is what other tenants
    (and kernel work charged to no process) took from the machine meanwhile.
    """
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    procs, children = {}, {}
    for pid, p in proc_stats().items():
        procs[pid] = p["own_ticks"] + p["children_ticks"]
        children.setdefault(p["ppid"], []).append(pid)
    ours, stack = {}, [os.getppid()]
    while stack:
        pid = stack.pop()
        if pid in procs:
            ours[pid] = procs[pid]
        stack.extend(children.get(pid, []))
    return {"t": time.time(), "busy": user + nice + system + irq + softirq, "steal": steal, "ours": ours}


def interference(before, after):
    """Shares of the machine's capacity (all CPUs) between two cpu_account() reads."""
    capacity = (after["t"] - before["t"]) * CLK_TCK * os.cpu_count()
    busy = after["busy"] - before["busy"]
    # Per process, so that one that vanished unreaped (a killed sandbox) cannot make this negative.
    ours = sum(max(0, t - before["ours"].get(pid, 0)) for pid, t in after["ours"].items())
    return {
        "wall_s": after["t"] - before["t"],
        "machine_busy_pct": 100 * busy / capacity,
        "ours_pct": 100 * ours / capacity,
        "others_pct": 100 * max(0, busy - ours) / capacity,
        "steal_pct": 100 * (after["steal"] - before["steal"]) / capacity,
    }


def measured(cfg, what, run):
    """Runs `run()` (one loadgen call) and re-runs it, up to cfg["attempts"] times in all, while
    other tenants took more than cfg["max_others_pct"] of the machine during it. Selection is on
    that outside load only, never on the result; every attempt's interference is kept."""
    attempts = []
    for attempt in range(cfg["attempts"]):
        before = cpu_account()
        out = run()
        share = interference(before, cpu_account())
        attempts.append(share)
        if share["others_pct"] <= cfg["max_others_pct"]:
            break
        log(f"  {what}: other tenants took {share['others_pct']:.0f}% of the machine, "
            + ("re-running" if attempt + 1 < cfg["attempts"] else "keeping it anyway"))
    return out, attempts


def wait_for_quiet(cfg):
    """Waits (up to cfg["quiet_wait_s"]) for a 5 s window in which other tenants took at most
    cfg["max_others_pct"] of the machine; returns what it saw. Builds and tests of other people
    on a shared box come and go, and a run that starts into one is a wasted run."""
    started = time.time()
    while True:
        before = cpu_account()
        time.sleep(5)
        share = interference(before, cpu_account())
        waited = time.time() - started
        if share["others_pct"] <= cfg["max_others_pct"] or waited >= cfg["quiet_wait_s"]:
            quiet = share["others_pct"] <= cfg["max_others_pct"]
            log(f"other tenants: {share['others_pct']:.0f}% of the machine"
                + ("" if quiet else f"; still busy after {waited:.0f} s, measuring anyway"))
            return {"waited_s": waited, "others_pct": share["others_pct"], "quiet": quiet}
        log(f"other tenants take {share['others_pct']:.0f}% of the machine; waiting for quiet "
            f"(up to {cfg['quiet_wait_s']:.0f} s, BENCH_QUIET_WAIT_S)")


def machine_info(args):
    lscpu = sh("lscpu")
    field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()  # noqa: E731
                               if l.startswith(name + ":")), "?")
    mem_kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
    porcelain = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                               capture_output=True, text=True).stdout  # not stripped: "XY path"
    status = [l for l in porcelain.splitlines() if l]
    return {
        "cpu_model": field("Model name"),
        "cpus": field("CPU(s)"),
        "threads_per_core": field("Thread(s) per core"),
        "hypervisor": field("Hypervisor vendor"),
        "kernel": platform.release(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "git_commit": sh("git", "-C", str(ROOT), "rev-parse", "HEAD"),
        # What was built is HEAD plus these working-tree changes (other engineers' work in progress).
        "git_modified": [l[3:] for l in status if not l.startswith("??")],
        "git_untracked": [l[3:] for l in status if l.startswith("??")],
        "rustc": sh("rustc", "--version"),
        "node": sh("node", "--version"),
        "python": sh("python3", "--version"),
        "boto3": __import__("boto3").__version__,
        "kiln_profile": args.profile,
        "clk_tck": CLK_TCK,
    }


def loadgen(args, mode, *extra):
    cmd = [args.loadgen, mode, *map(str, extra)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


class Kiln:
    """What the driver needs of the kiln run.sh started: URL, pid, credentials, cgroups."""

    def __init__(self, info):
        self.url, self.pid = info["url"], info["pid"]
        self.data_dir = Path(info["data_dir"]).resolve()
        self.creds_path = self.data_dir / "credentials.json"
        self.creds = json.loads(self.creds_path.read_text())
        # kiln's cgroup parent per data dir (server.rs: cgroup_parent).
        self.cgroup = "kiln-" + hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]

    def client(self):
        import boto3
        import botocore.config
        return boto3.client(
            "lambda", endpoint_url=self.url, region_name=self.creds["region"],
            aws_access_key_id=self.creds["accessKeyId"],
            aws_secret_access_key=self.creds["secretAccessKey"],
            config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                          read_timeout=60, connect_timeout=5),
        )

    def runtime_pids(self, function):
        """Pids of the sandbox processes (helpers and runtime) of `function`'s instances."""
        marker = "shim.js" if function == "noop-node" else "shim.py"
        pids = []
        for procs in glob.glob(f"/sys/fs/cgroup/pids/{self.cgroup}/i*/cgroup.procs") + \
                glob.glob(f"/sys/fs/cgroup/{self.cgroup}/i*/cgroup.procs"):
            try:
                members = [int(p) for p in open(procs).read().split()]
                cmdlines = [open(f"/proc/{p}/cmdline", "rb").read() for p in members]
            except OSError:
                continue
            if any(marker.encode() in c for c in cmdlines):
                pids.extend(members)
        return sorted(set(pids))


def zip_one(name, path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(name)
        info.external_attr = 0o644 << 16
        zf.writestr(info, Path(path).read_bytes())
    return buf.getvalue()


def deploy(kiln):
    lam = kiln.client()
    for name, (runtime, handler, file, source) in FUNCTIONS.items():
        try:
            lam.delete_function(FunctionName=name)
        except lam.exceptions.ResourceNotFoundException:
            pass
        lam.create_function(FunctionName=name, Runtime=runtime, Handler=handler,
                            Role="arn:aws:iam::000000000000:role/bench", MemorySize=128,
                            Code={"ZipFile": zip_one(file, source)})
        r = lam.invoke(FunctionName=name, Payload=b"{}")
        body = r["Payload"].read()
        if r["StatusCode"] != 200 or r.get("FunctionError") or json.loads(body) != {}:
            raise RuntimeError(f"{name} does not answer {{}}: {r['StatusCode']} {body!r}")
        log(f"deployed {name} ({runtime})")


def target_args(setup, servers, kiln, extra_pids=()):
    name, key, function = setup
    if key == "kiln":
        pids = [kiln.pid, *extra_pids]
        return ["--url", kiln.url, "--path", f"/2015-03-31/functions/{function}/invocations",
                "--creds", str(kiln.creds_path), "--server-pid", ",".join(map(str, pids))]
    return ["--url", servers[key]["url"], "--path", "/", "--server-pid", str(servers[key]["pid"])]


def cpu_us(delta):
    """utime+stime (ticks) and schedstat (ns) of one /proc delta, in µs."""
    if not delta:
        return None, None
    return ((delta["utime_ticks"] + delta["stime_ticks"]) * 1e6 / CLK_TCK, delta["sched_ns"] / 1e3)


# ----------------------------------------------------------------------------------- phases

def warm_latency(args, cfg, servers, kiln):
    setups = KILN_SETUPS + FLOOR_SETUPS
    raw = {s[0]: {"latency_us": [], "sign_us": [], "rounds": []} for s in setups}
    for r in range(cfg["rounds"]):
        order = setups[r % len(setups):] + setups[:r % len(setups)]  # rotate: no fixed position
        for setup in order:
            name, _, function = setup
            runtime_pids = kiln.runtime_pids(function) if function else []
            out, attempts = measured(cfg, f"warm round {r + 1} {name}", lambda: loadgen(
                args, "latency", *target_args(setup, servers, kiln, runtime_pids),
                "--n", cfg["lat_n"], "--warmup", cfg["lat_warmup"] if r == 0 else cfg["lat_warmup"] // 5))
            share = attempts[-1]
            if out["errors"]:
                raise RuntimeError(f"{name}: {out['errors']} errors, first: {out['first_error']}")
            lat = [x / 1e3 for x in out["latency_ns"]]
            d = raw[name]
            d["latency_us"].extend(lat)
            if out["sign_ns"]:
                d["sign_us"].extend(x / 1e3 for x in out["sign_ns"])
            server = out["server_cpu"][0]
            runtime = [c for c in out["server_cpu"][1:] if c]
            d["rounds"].append({
                "n": out["n"], "p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                "wall_s": out["wall_ns"] / 1e9, "server_cpu": server, "runtime_cpu": runtime,
                "runtime_pids": len(runtime_pids), "client_cpu": out["client_cpu"],
                "loadavg": loadavg(), "interference": share, "attempts": attempts,
            })
            log(f"warm round {r + 1}/{cfg['rounds']} {name}: p50 {pct(lat, 50):.0f} µs, p99 {pct(lat, 99):.0f} µs"
                f" (others {share['others_pct']:.0f}% of the machine)")
    results = {}
    for name, d in raw.items():
        n = sum(x["n"] for x in d["rounds"])
        ticks = lambda key, who: sum(  # noqa: E731
            sum(c[key] for c in (x[who] if isinstance(x[who], list) else [x[who]])) for x in d["rounds"])
        cpu = {}
        for who in ("server_cpu", "runtime_cpu", "client_cpu"):
            if who == "runtime_cpu" and not d["rounds"][0]["runtime_pids"]:
                continue
            cpu[who] = {
                "ticks_us_per_req": (ticks("utime_ticks", who) + ticks("stime_ticks", who)) * 1e6 / CLK_TCK / n,
                "sched_us_per_req": ticks("sched_ns", who) / 1e3 / n,
                # ±1 tick per read pair: the resolution of the ticks figure.
                "ticks_resolution_us": len(d["rounds"]) * 1e6 / CLK_TCK / n,
            }
        results[name] = {
            "latency": summarize(d["latency_us"], cfg["boot_warm"], name),
            "sign": summarize(d["sign_us"], 0) if d["sign_us"] else None,
            "round_p50_us": [x["p50_us"] for x in d["rounds"]],
            "round_p99_us": [x["p99_us"] for x in d["rounds"]],
            "round_others_pct": [x["interference"]["others_pct"] for x in d["rounds"]],
            "rerun_rounds": sum(len(x["attempts"]) - 1 for x in d["rounds"]),
            "cpu": cpu,
            "rounds": d["rounds"],
            "_samples": d["latency_us"],
        }
    return results


def boto3_latency(cfg, servers, kiln):
    """Warm Invoke through boto3 (botocore signs, urllib3 keeps the connection alive)."""
    import boto3
    import botocore.config
    kiln_client = kiln.client()

    def floor_client(url):
        return boto3.client(
            "lambda", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="AKIDFLOOR", aws_secret_access_key="floor",
            config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}))

    setups = [
        ("boto3 → kiln-node", kiln_client, "noop-node"),
        ("boto3 → kiln-python", kiln_client, "noop-python"),
        # The floors answer any POST with {}: the same boto3 call minus kiln = boto3's own cost.
        ("boto3 → floor-node", floor_client(servers["floor-node"]["url"]), "noop-node"),
        ("boto3 → floor-py-asyncio", floor_client(servers["floor-py-asyncio"]["url"]), "noop-python"),
    ]
    raw = {name: [] for name, _, _ in setups}
    for r in range(cfg["boto_rounds"]):
        for name, client, function in setups[r % len(setups):] + setups[:r % len(setups)]:
            for i in range(cfg["boto_warmup"] + cfg["boto_n"]):
                t0 = time.perf_counter_ns()
                resp = client.invoke(FunctionName=function, Payload=b"{}")
                body = resp["Payload"].read()
                t1 = time.perf_counter_ns()
                if resp["StatusCode"] != 200 or resp.get("FunctionError") or body != b"{}":
                    raise RuntimeError(f"{name}: {resp['StatusCode']} {body!r}")
                if i >= cfg["boto_warmup"]:
                    raw[name].append((t1 - t0) / 1e3)
            log(f"boto3 round {r + 1}/{cfg['boto_rounds']} {name}: p50 {pct(raw[name][-cfg['boto_n']:], 50):.0f} µs")
    return {name: {"latency": summarize(v, cfg["boot_warm"], name), "_samples": v} for name, v in raw.items()}


def cold_starts(args, cfg, kiln):
    results = {}
    for function in FUNCTIONS:
        out = loadgen(args, "cold", "--url", kiln.url, "--creds", str(kiln.creds_path),
                      "--function", function, "--n", cfg["cold_n"], "--warmup", 1, "--settle-ms", 300)
        samples = out["samples"]
        lat = [s["latency_ns"] / 1e6 for s in samples]
        init = [s["init_ms"] for s in samples if s["init_ms"] is not None]
        summary = {
            "n": len(lat), "cold_confirmed": sum(1 for s in samples if s["cold"]),
            "latency_ms": public(summarize(lat, 0)),
            "latency_p50_ci95_ms": ci(boot(lat, 50, 10_000, 7)),
            "init_ms": public(summarize(init, 0)) if init else None,
            "init_p50_ci95_ms": ci(boot(init, 50, 10_000, 8)) if init else None,
            "samples": samples,
        }
        results[function] = summary
        log(f"cold {function}: p50 {summary['latency_ms']['p50']:.1f} ms, "
            f"init p50 {summary['init_ms']['p50'] if init else float('nan'):.1f} ms "
            f"({summary['cold_confirmed']}/{len(lat)} confirmed cold)")
    return results


def throughput(args, cfg, servers, kiln):
    setups = KILN_SETUPS + FLOOR_SETUPS
    top = max(cfg["concurrency"])
    for setup in setups:  # unrecorded: kiln starts its instances here, JITs warm up
        loadgen(args, "throughput", *target_args(setup, servers, kiln),
                "--concurrency", top, "--duration", cfg["tp_prewarm"], "--warmup", 0)
    results = {s[0]: {} for s in setups}
    for i, c in enumerate(cfg["concurrency"]):
        for setup in setups[i % len(setups):] + setups[:i % len(setups)]:
            name, _, function = setup
            runtime_pids = kiln.runtime_pids(function) if function else []
            out, attempts = measured(cfg, f"throughput {name} c={c}", lambda: loadgen(
                args, "throughput", *target_args(setup, servers, kiln, runtime_pids),
                "--concurrency", c, "--duration", cfg["tp_duration"], "--warmup", cfg["tp_warmup"]))
            if out["errors"]:
                raise RuntimeError(f"{name} c={c}: {out['errors']} errors, first: {out['first_error']}")
            n = out["completed"]
            server = cpu_us(out["server_cpu"][0])
            runtime = [cpu_us(x) for x in out["server_cpu"][1:] if x]
            results[name][c] = {
                "concurrency": c, "completed": n, "rps": out["rps"],
                "latency_us": {k: v / 1e3 for k, v in out["latency_ns"].items()},
                "latency_n": out["latency_n"],
                "server_cpu_us_per_req": {"ticks": server[0] / n, "sched": server[1] / n} if n else None,
                "runtime_cpu_us_per_req": {"ticks": sum(x[0] for x in runtime) / n,
                                           "sched": sum(x[1] for x in runtime) / n} if runtime else None,
                "runtime_processes": len(runtime_pids),
                "client_cpu_us_per_req": cpu_us(out["client_cpu"])[1] / n if n else None,
                "sign_us_mean": out["sign_ns_mean"] / 1e3,
                "loadavg": loadavg(), "interference": attempts[-1], "attempts": attempts,
            }
            log(f"throughput {name} c={c}: {out['rps']:.0f} req/s, p50 {out['latency_ns']['p50'] / 1e3:.0f} µs")
    return results


# ----------------------------------------------------------------------------------- report

def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def verdict(ok):
    return "**PASS**" if ok else "**FAIL**"


def floors_for(warm):
    """The floor each kiln setup is compared with: Node's, and the faster of the Python two."""
    py = min(("floor-py-httpserver", "floor-py-asyncio"), key=lambda k: warm[k]["latency"]["p50"])
    return {"kiln-node": "floor-node", "kiln-python": py}


def diff_ci(a, b, key):
    return ci(a["latency"][key] - b["latency"][key])


def analyze(warm, tp):
    floors = floors_for(warm)
    out = {"floors": floors, "setups": {}}
    for k, f in floors.items():
        kl, fl = warm[k]["latency"], warm[f]["latency"]
        cpu = warm[k]["cpu"]["server_cpu"]
        top = max(tp[k]) if tp else None
        out["setups"][k] = {
            "floor": f,
            "p50_over_floor_us": kl["p50"] - fl["p50"],
            "p50_over_floor_ci95_us": ci(kl["_boot_p50"] - fl["_boot_p50"]),
            "p99_over_floor_us": kl["p99"] - fl["p99"],
            "p99_over_floor_ci95_us": ci(kl["_boot_p99"] - fl["_boot_p99"]),
            "p50_ratio": kl["p50"] / fl["p50"], "p99_ratio": kl["p99"] / fl["p99"],
            "p99_us": kl["p99"],
            "cpu_seq_us": cpu["ticks_us_per_req"], "cpu_seq_sched_us": cpu["sched_us_per_req"],
            "cpu_16_us": tp[k][top]["server_cpu_us_per_req"]["ticks"] if tp else None,
            "cpu_16_sched_us": tp[k][top]["server_cpu_us_per_req"]["sched"] if tp else None,
        }
    return out


def write_markdown(path, meta, warm, boto, cold, tp, analysis):
    L = []
    w = L.append
    m = meta["machine"]
    w("# kiln core-invoke benchmark\n")
    w(f"Generated by `bench/run.sh` on {meta['finished']} ({meta['elapsed_s']:.0f} s). "
      "Numbers from this run only; see bench/README.md for the method.\n")
    w("| | |\n|---|---|")
    w(f"| command | `{meta['command']}` |")
    w(f"| kiln build | `{m['kiln_profile']}` ({meta['kiln_bin']}, sha256 {meta['kiln_bin_sha256']}…) |")
    dirty = ""
    if m["git_modified"]:
        dirty = (f" + uncommitted changes to {len(m['git_modified'])} tracked files, built as found: "
                 + ", ".join(f"`{p}`" for p in m["git_modified"]))
    w(f"| git commit | `{m['git_commit']}`{dirty} |")
    w(f"| CPU | {m['cpu_model']} ({m['hypervisor'] or 'bare metal'} guest), {m['cpus']} CPUs, {m['threads_per_core']} thread/core |")
    w(f"| kernel | {m['kernel']} |")
    w(f"| memory | {m['memory_gib']} GiB |")
    q = meta["quiet_check"]
    w(f"| load average (1/5/15 min) | at start {' / '.join(meta['load_start'])}; at end {' / '.join(meta['load_end'])} |")
    w(f"| quiet check before measuring | other tenants {q['others_pct']:.1f}% of the machine over 5 s "
      f"after waiting {q['waited_s']:.0f} s{'' if q['quiet'] else ' (never quiet: measured anyway)'} |")
    w(f"| toolchain | {m['rustc']}; node {m['node']}; {m['python']}; boto3 {m['boto3']} |")
    for name, p in meta["interference"].items():
        w(f"| CPU during '{name}' ({p['wall_s']:.0f} s) | machine {p['machine_busy_pct']:.0f}% busy: this benchmark "
          f"{p['ours_pct']:.0f}%, everything else {p['others_pct']:.1f}%, hypervisor steal {p['steal_pct']:.1f}% "
          f"(% of {os.cpu_count()} CPUs) |")
    w("")

    w("## Against the targets\n")
    w("| target | setup | measured | 95% CI | ÷ target | verdict |\n|---|---|---|---|---|---|")
    p50_t, p99_t, cpu_t = TARGETS["p50_over_floor_us"], TARGETS["p99_us"], TARGETS["cpu_per_invoke_us"]
    for k, a in analysis["setups"].items():
        w(f"| warm p50 ≤ {p50_t:.0f} µs over the floor | {k} vs {a['floor']} (n {warm[k]['latency']['n']:,} each) | "
          f"{a['p50_over_floor_us']:+.1f} µs (kiln ×{a['p50_ratio']:.2f} the floor) | {a['p50_over_floor_ci95_us'][0]:+.1f} … {a['p50_over_floor_ci95_us'][1]:+.1f} | "
          f"{a['p50_over_floor_us'] / p50_t:.2f} | {verdict(a['p50_over_floor_us'] <= p50_t)} |")
    for k, a in analysis["setups"].items():
        lat = warm[k]["latency"]
        w(f"| warm p99 ≤ {p99_t:.0f} µs (absolute, Rust client) | {k} (n {lat['n']:,}) | {lat['p99']:.1f} µs "
          f"({a['p99_over_floor_us']:+.1f} µs over the floor) | {lat['p99_ci95'][0]:.1f} … {lat['p99_ci95'][1]:.1f} | "
          f"{lat['p99'] / p99_t:.2f} | {verdict(lat['p99'] <= p99_t)} |")
    for k, a in analysis["setups"].items():
        res = warm[k]["cpu"]["server_cpu"]["ticks_resolution_us"]
        w(f"| kiln CPU ≤ {cpu_t:.0f} µs / warm invoke (sequential) | {k} (n {warm[k]['latency']['n']:,}) | "
          f"{a['cpu_seq_us']:.1f} µs (schedstat {a['cpu_seq_sched_us']:.1f}) | ±{res:.1f} (tick resolution) | "
          f"{a['cpu_seq_us'] / cpu_t:.2f} | {verdict(a['cpu_seq_us'] <= cpu_t)} |")
        if a["cpu_16_us"] is not None:
            top = max(tp[k])
            w(f"| kiln CPU ≤ {cpu_t:.0f} µs / warm invoke ({top} clients) | {k} (n {tp[k][top]['completed']:,}) | "
              f"{a['cpu_16_us']:.1f} µs (schedstat {a['cpu_16_sched_us']:.1f}) | – | "
              f"{a['cpu_16_us'] / cpu_t:.2f} | {verdict(a['cpu_16_us'] <= cpu_t)} |")
    w("")
    w("For scale (external call, published): " + ", ".join(f"{k} {fmt(v)} µs" for k, v in SCALE.items())
      + ". kiln-node p50 here: " + f"{warm['kiln-node']['latency']['p50']:.0f} µs, kiln-python p50: "
      + f"{warm['kiln-python']['latency']['p50']:.0f} µs.\n")

    w("## Warm invoke latency (sequential, one keep-alive connection)\n")
    w("Rust client (`bench/loadgen`, hyper 1, TCP_NODELAY): each request timed from before it is "
      "signed until its whole response body is read. kiln requests are SigV4-signed per request "
      "inside the timed region; floor requests are unsigned. Latencies in µs; CIs are bootstrap 95% "
      f"({fmt(meta['config']['boot_warm'])} resamples); 'rounds' is the range of per-round p50s over "
      f"{meta['config']['rounds']} interleaved rounds.\n")
    w("| setup | n | p50 [95% CI] | p90 | p99 [95% CI] | p99.9 | max | rounds p50 | p50 − floor | p50 ÷ floor | p99 ÷ floor |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    floors = analysis["floors"]
    for name, r in warm.items():
        lat = r["latency"]
        f = floors.get(name)
        rel = ("–", "–", "–")
        if f:
            fl = warm[f]["latency"]
            rel = (f"{lat['p50'] - fl['p50']:+.1f}", f"×{lat['p50'] / fl['p50']:.2f}", f"×{lat['p99'] / fl['p99']:.2f}")
        elif name.startswith("floor-py") and name != floors["kiln-python"]:
            rel = ("(slower floor)", "", "")
        w(f"| {name} | {lat['n']:,} | {lat['p50']:.1f} [{lat['p50_ci95'][0]:.1f}, {lat['p50_ci95'][1]:.1f}] | "
          f"{lat['p90']:.1f} | {lat['p99']:.1f} [{lat['p99_ci95'][0]:.1f}, {lat['p99_ci95'][1]:.1f}] | "
          f"{lat['p999']:.1f} | {lat['max']:.0f} | {min(r['round_p50_us']):.1f}–{max(r['round_p50_us']):.1f} "
          f"(others ≤ {max(r['round_others_pct']):.0f}%{', ' + str(r['rerun_rounds']) + ' re-run' if r['rerun_rounds'] else ''}) | "
          f"{rel[0]} | {rel[1]} | {rel[2]} |")
    for name, r in warm.items():
        if r["sign"]:
            s = r["sign"]
            w(f"\nSigning (`kiln::auth::sigv4::sign`, inside the timed region) for {name}: "
              f"p50 {s['p50']:.1f} µs, p99 {s['p99']:.1f} µs, mean {s['mean']:.1f} µs (n {s['n']:,}), "
              f"{100 * s['mean'] / r['latency']['mean']:.1f}% of the mean latency.")
    w("")
    w("### boto3 (warm, keep-alive, same machine)\n")
    w("boto3 → floor: the floors answer any POST with `{}`, so the same `invoke()` call against a "
      "floor measures boto3's own cost; the difference to boto3 → kiln is kiln's.\n")
    w("| setup | n | p50 [95% CI] | p90 | p99 [95% CI] | max | p50 − boto3→floor |")
    w("|---|---|---|---|---|---|---|")
    bfloor = {"boto3 → kiln-node": "boto3 → floor-node", "boto3 → kiln-python": "boto3 → floor-py-asyncio"}
    for name, r in boto.items():
        lat = r["latency"]
        d = "–"
        if name in bfloor:
            d = f"{lat['p50'] - boto[bfloor[name]]['latency']['p50']:+.1f}"
        w(f"| {name} | {lat['n']:,} | {lat['p50']:.1f} [{lat['p50_ci95'][0]:.1f}, {lat['p50_ci95'][1]:.1f}] | "
          f"{lat['p90']:.1f} | {lat['p99']:.1f} [{lat['p99_ci95'][0]:.1f}, {lat['p99_ci95'][1]:.1f}] | {lat['max']:.0f} | {d} |")
    w("")

    w("## CPU time per warm invocation (sequential run)\n")
    w("utime+stime from `/proc/PID/stat` (fields 14/15, all threads, "
      f"{CLK_TCK} ticks/s) read just before the first and after the last measured request of each round, "
      "summed over rounds, divided by n. `schedstat` is the sum of the live threads' "
      "`/proc/PID/task/*/schedstat` run time (ns resolution; a thread that exits mid-run is missed). "
      "'runtime' is every process in the instance's cgroup (sandbox helpers + the Node/Python shim). "
      "µs per request.\n")
    w("| setup | n | server (ticks) | server (schedstat) | tick resolution ± | function runtime (ticks) | runtime (schedstat) | server + runtime | client (loadgen) |")
    w("|---|---|---|---|---|---|---|---|---|")
    for name, r in warm.items():
        c = r["cpu"]
        rt = c.get("runtime_cpu")
        total = c["server_cpu"]["ticks_us_per_req"] + (rt["ticks_us_per_req"] if rt else 0)
        w(f"| {name} | {r['latency']['n']:,} | {c['server_cpu']['ticks_us_per_req']:.1f} | "
          f"{c['server_cpu']['sched_us_per_req']:.1f} | {c['server_cpu']['ticks_resolution_us']:.1f} | "
          f"{fmt(rt and rt['ticks_us_per_req'], 1)} | {fmt(rt and rt['sched_us_per_req'], 1)} | {total:.1f} | "
          f"{c['client_cpu']['sched_us_per_req']:.1f} |")
    w("")

    w("## Cold starts\n")
    w(f"Each: UpdateFunctionConfiguration with a new environment value (new revision; kiln retires "
      f"the old instances), {meta['config']['cold_settle_ms']} ms pause, then one Invoke with "
      "`X-Amz-Log-Type: Tail` timed by the Rust client (signing included). 'confirmed' counts "
      "REPORT lines with an Init Duration. CIs: bootstrap 95% of the median (10,000 resamples).\n")
    w("| function | n | confirmed cold | invoke p50 [95% CI] ms | p90 | max | Init Duration p50 [95% CI] ms | Init p90 |")
    w("|---|---|---|---|---|---|---|---|")
    for name, r in cold.items():
        lat, init = r["latency_ms"], r["init_ms"] or {}
        w(f"| {name} | {r['n']} | {r['cold_confirmed']} | {lat['p50']:.1f} [{r['latency_p50_ci95_ms'][0]:.1f}, "
          f"{r['latency_p50_ci95_ms'][1]:.1f}] | {lat['p90']:.1f} | {lat['max']:.1f} | "
          f"{fmt(init.get('p50'), 1)} [{fmt((r['init_p50_ci95_ms'] or [None])[0], 1)}, "
          f"{fmt((r['init_p50_ci95_ms'] or [None, None])[1], 1)}] | {fmt(init.get('p90'), 1)} |")
    w("")

    w("## Throughput (closed loop)\n")
    w(f"C clients, one keep-alive connection each, each sending its next request when the last "
      f"is answered; {meta['config']['tp_warmup']} s warm-up then {meta['config']['tp_duration']} s "
      "measured; requests/s = completions in the window ÷ its length. One client thread; the "
      "client, the server and (for kiln) the function instances share the machine's "
      f"{m['cpus']} CPUs, so this is the platform's throughput *on this box*, not the server's alone. "
      "Unrecorded pre-warm at the top concurrency first, so kiln's instances exist.\n")
    concs = meta["config"]["concurrency"]
    w("| setup | " + " | ".join(f"c={c} req/s" for c in concs) + " | " +
      " | ".join(f"c={c} ÷ floor" for c in concs) + " |")
    w("|---|" + "---|" * (2 * len(concs)))
    for name, per in tp.items():
        f = floors.get(name)
        ratios = [f"×{per[c]['rps'] / tp[f][c]['rps']:.2f}" if f else "–" for c in concs]
        w(f"| {name} | " + " | ".join(f"{per[c]['rps']:,.0f}" for c in concs) + " | " + " | ".join(ratios) + " |")
    w("")
    w("| setup | c | n (window) | p50 µs | p99 µs | p99.9 µs | server CPU µs/req (ticks / schedstat) | runtime CPU µs/req | instances' processes | client CPU µs/req | others' share of the machine |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, per in tp.items():
        for c in concs:
            r = per[c]
            s, rt = r["server_cpu_us_per_req"], r["runtime_cpu_us_per_req"]
            w(f"| {name} | {c} | {r['completed']:,} | {r['latency_us']['p50']:.0f} | {r['latency_us']['p99']:.0f} | "
              f"{r['latency_us']['p999']:.0f} | {s['ticks']:.1f} / {s['sched']:.1f} | "
              f"{fmt(rt and rt['ticks'], 1)} | {r['runtime_processes'] or '–'} | {fmt(r['client_cpu_us_per_req'], 1)} | "
              f"{r['interference']['others_pct']:.0f}%{' (' + str(len(r['attempts'])) + ' attempts)' if len(r['attempts']) > 1 else ''} |")
    w("")
    w("## Notes\n")
    w("- Percentiles are nearest-rank. Bootstrap CIs treat the samples as independent; consecutive "
      "requests are not quite (GC, scheduler, other tenants), so the 'rounds' ranges are the better "
      "guide to run-to-run noise.")
    w("- The machine is shared. 'Everything else' above is the machine's busy time (/proc/stat) minus the CPU "
      "time of this benchmark's own process tree (run.sh and all descendants: kiln, sandboxes, floors, "
      "clients): other tenants, plus kernel work charged to no process. The load average counts this "
      "benchmark's own processes too, so the 'at end' figure mostly reflects the 16-client runs. Per-round "
      "figures are in the JSON (`rounds[].interference`).")
    w(f"- A warm round or throughput run during which other tenants took more than {meta['config']['max_others_pct']:.0f}% "
      f"of the machine was run again, up to {meta['config']['attempts']} attempts in all (the last one is kept either way); "
      "the tables say where. The choice depends only on the outside load, never on the result.")
    w("- Cold-start phase: CPU of retired sandboxes that the kernel reaps outside kiln's process tree is "
      "counted as 'everything else', so that phase's figure overstates other tenants.")
    w("- Raw numbers: `core-invoke.json` (every warm latency sample, every cold start). Plot: `core-invoke.png`.")
    Path(path).write_text("\n".join(L) + "\n")


def plot(path, warm, boto, cold, tp, concs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    ax = axes[0][0]
    for name, r in warm.items():
        a = np.sort(np.asarray(r["_samples"]))
        ax.plot(a, np.arange(1, len(a) + 1) / len(a), label=name, lw=1.4,
                ls="-" if name.startswith("kiln") else "--")
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log)")
    ax.set_ylabel("fraction of requests ≤ x")
    ax.set_title("Warm invoke latency CDF (Rust keep-alive client, sequential)")
    ax.axhline(0.99, color="grey", lw=0.6, ls=":")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)

    ax = axes[0][1]
    names = list(warm) + list(boto)
    p50 = [warm[n]["latency"]["p50"] if n in warm else boto[n]["latency"]["p50"] for n in names]
    p99 = [warm[n]["latency"]["p99"] if n in warm else boto[n]["latency"]["p99"] for n in names]
    x = np.arange(len(names))
    ax.bar(x - 0.2, p50, 0.4, label="p50")
    ax.bar(x + 0.2, p99, 0.4, label="p99")
    ax.axvline(len(warm) - 0.5, color="grey", lw=0.8)
    ax.text(len(warm) - 0.45, max(p99), "boto3 →", fontsize=8, va="top")
    ax.set_yscale("log")
    ax.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("µs (log)")
    ax.set_title("Warm p50 / p99 per setup")
    ax.axhline(TARGETS["p99_us"], color="red", lw=0.8, ls=":", label="p99 target (1 ms)")
    ax.grid(alpha=0.3, axis="y", which="both")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    for name, per in tp.items():
        ax.plot(concs, [per[c]["rps"] for c in concs], marker="o", label=name,
                ls="-" if name.startswith("kiln") else "--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.set_xlabel("concurrent closed-loop clients")
    ax.set_ylabel("requests / s (log)")
    ax.set_title("Throughput vs concurrency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)

    ax = axes[1][1]
    data = [[s["latency_ns"] / 1e6 for s in r["samples"]] for r in cold.values()]
    inits = [[s["init_ms"] for s in r["samples"] if s["init_ms"] is not None] for r in cold.values()]
    pos = np.arange(len(cold))
    ax.boxplot(data, positions=pos - 0.18, widths=0.3, showfliers=True, medianprops={"color": "black"})
    ax.boxplot(inits, positions=pos + 0.18, widths=0.3, showfliers=True,
               boxprops={"color": "tab:orange"}, medianprops={"color": "tab:orange"})
    ax.set_xticks(pos, [f"{n}\n(invoke | Init Duration)" for n in cold], fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title(f"Cold start (n={len(data[0])} each): invoke latency (black), Init Duration (orange)")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def strip(obj):
    """Drops private keys (bootstrap distributions) before writing JSON."""
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if not (isinstance(k, str) and k.startswith("_boot"))}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", required=True, help="JSON written by run.sh")
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--kiln-bin", required=True)
    ap.add_argument("--profile", default="release")
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--quick", action="store_true", help="small n, for developing the harness")
    args = ap.parse_args()

    cfg = dict(rounds=10, lat_n=2000, lat_warmup=1000, boot_warm=1000,
               boto_rounds=3, boto_n=1000, boto_warmup=100,
               cold_n=30, cold_settle_ms=300,
               max_others_pct=float(os.environ.get("BENCH_MAX_OTHERS_PCT", 10)), attempts=3,
               quiet_wait_s=float(os.environ.get("BENCH_QUIET_WAIT_S", 300)),
               concurrency=[1, 2, 4, 16], tp_duration=5.0, tp_warmup=1.0, tp_prewarm=2.0)
    if args.quick:
        cfg.update(rounds=2, lat_n=500, lat_warmup=200, boot_warm=200, boto_rounds=1, boto_n=100, quiet_wait_s=0,
                   boto_warmup=20, cold_n=4, tp_duration=1.0, tp_warmup=0.3, tp_prewarm=0.5)
    servers = json.loads(Path(args.servers).read_text())
    kiln = Kiln(servers["kiln"])
    started = time.time()
    kiln_sha = hashlib.sha256(Path(args.kiln_bin).read_bytes()).hexdigest()[:16]
    meta = {"command": args.command, "kiln_bin": args.kiln_bin, "kiln_bin_sha256": kiln_sha,
            "config": cfg, "quick": args.quick,
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "load_start": loadavg(), "machine": machine_info(args)}
    log(f"load average at start: {' '.join(meta['load_start'])}")
    meta["quiet_check"] = wait_for_quiet(cfg)

    deploy(kiln)
    phases = {}

    def phase(name, fn, *a):
        log(f"phase {len(phases) + 1}/4: {name}")
        before = cpu_account()
        result = fn(*a)
        phases[name] = interference(before, cpu_account())
        p = phases[name]
        log(f"  {p['wall_s']:.0f} s; machine busy {p['machine_busy_pct']:.0f}%: ours {p['ours_pct']:.0f}%, "
            f"others {p['others_pct']:.0f}%, steal {p['steal_pct']:.1f}%")
        return result

    warm = phase("warm latency, Rust client", warm_latency, args, cfg, servers, kiln)
    boto = phase("warm latency, boto3", boto3_latency, cfg, servers, kiln)
    cold = phase("cold starts", cold_starts, args, cfg, kiln)
    tp = phase("throughput", throughput, args, cfg, servers, kiln)
    meta["interference"] = phases

    meta["load_end"] = loadavg()
    meta["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    meta["elapsed_s"] = time.time() - started
    analysis = analyze(warm, tp)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_markdown(out / "core-invoke.md", meta, warm, boto, cold, tp, analysis)
    plot(out / "core-invoke.png", warm, boto, cold, tp, cfg["concurrency"])
    raw = {
        "meta": meta, "targets": TARGETS, "scale_us": SCALE, "analysis": analysis,
        "warm_rust": {k: {**{kk: vv for kk, vv in v.items() if kk != "_samples"},
                          "latency_us_samples": [round(x, 2) for x in v["_samples"]]} for k, v in warm.items()},
        "warm_boto3": {k: {"latency": v["latency"], "latency_us_samples": [round(x, 1) for x in v["_samples"]]}
                       for k, v in boto.items()},
        "cold": cold, "throughput": {k: {str(c): r for c, r in v.items()} for k, v in tp.items()},
    }
    (out / "core-invoke.json").write_text(json.dumps(strip(raw), indent=1) + "\n")
    log(f"wrote {out}/core-invoke.md, .json, .png in {meta['elapsed_s']:.0f} s "
        f"(load average at end: {' '.join(meta['load_end'])})")
    print((out / "core-invoke.md").read_text())


if __name__ == "__main__":
    sys.exit(main())
