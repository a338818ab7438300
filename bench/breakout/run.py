#!/usr/bin/env python3
"""BREAKOUT's Fig. 10a and Fig. 15 (App. D) on kiln: each benchmark deployed twice, ordinary
and with `KilnBreakout` `auto`; the second traced on a training set until it is
`decontainerized`; then both driven by the same closed loop (bench/loadgen, 10 streams, SigV4
per request), in alternating rounds, and the speed-up is ordinary ÷ decontainerized mean
latency, with a 95% bootstrap interval over the rounds.

`--figs 10bc`: Figs. 10b and 10c, authorize's CPU and memory under an open loop (loadgen
`open`, Poisson arrivals) at a series of rates, ordinary and decontainerized; CPU is kiln's own
(/proc/PID/stat) plus its sandboxes' (the cpuacct cgroup run.sh put kiln in, less kiln's own
time; cgroup v2: cpu.stat of kiln's parent cgroup), memory kiln's PSS plus its instances'
cgroups. `--figs idle --idle-part ordinary|fast|report`: §5's idle footprint of 100 copies of
authorize, each part on a kiln of its own (run.sh starts them), the report from both parts.

Started by run.sh, which builds kiln and loadgen (release), starts kiln and stops it. Before the
loop, every event of a benchmark is sent to both copies with boto3 and the answers must be
equal, and the decontainerized copy's REPORT must say it ran fast: a benchmark that misses is
reported as such, not timed as if it were fast.
"""

import argparse
import base64
import collections
import datetime
import io
import json
import math
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from bench import Kiln, cpu_account, interference, loadavg, loadgen, log, machine_info  # noqa: E402

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"

USERS = [{"username": f"user{i}", "password": f"secret-{i * 7}"} for i in range(1000)]
REPO, SHAS = "kiln-bench", [f"{i:07x}abc" for i in range(20)]


def status_event(sha, state="success", context="ci"):
    return {"repo": REPO, "sha": sha, "state": state, "target_url": "https://ci.example/x", "context": context}


# name: (package, the timed event, the training set); the I/O benchmarks' store is made by `stock`.
BENCHMARKS = {
    "authorize": (FIXTURES / "authorize", {"username": "user500", "password": "secret-3500"},
                  [{"username": "user3", "password": "secret-21"}, {"username": "user4", "password": "x"},
                   {"username": "nobody", "password": "pw"}, {"username": 3}, {}]),
    "upload": (FIXTURES / "upload", {"name": "bench.txt", "body": "a small file of forty characters, or so\n"},
               [{"name": "train-a.txt", "body": "hello"}, {"body": "no name"}, {"name": "train-b"}, {}]),
    "status": (FIXTURES / "status", status_event(SHAS[4]),
               [status_event(SHAS[1]), status_event(SHAS[0], "failure", "lint"), status_event(SHAS[2], "odd"),
                status_event("zz"), {"repo": 1}]),
    # `{client}`: each closed-loop stream deposits to an account (a session) of its own.
    "banking": (FIXTURES / "banking", {"account": "acct-{client}", "op": "deposit", "amount": 1},
                [{"account": "t", "op": "deposit", "amount": 500}, {"account": "t", "op": "withdraw", "amount": 200},
                 {"account": "t", "op": "withdraw", "amount": 9000}, {"account": "t", "op": "balance"},
                 {"account": "t", "op": "steal", "amount": 1}, {"account": "t", "op": "deposit", "amount": -1},
                 {"account": "t", "op": "deposit", "amount": 0.5}]),
    "autocomplete": (FIXTURES / "autocomplete", {"prefix": "ab"},
                     [{"prefix": p} for p in ["ab", "a", "acc", "zz", "ad", "", "ac", "abs"]]),
    "maze": (FIXTURES / "maze", {"x1": 0, "y1": 0, "x2": 29, "y2": 29},
             [{"x1": 0, "y1": 0, "x2": 29, "y2": 29}, {"x1": 2, "y1": 5, "x2": 20, "y2": 9},
              {"x1": 3, "y1": 0, "x2": 5, "y2": 5}, {"x1": -1, "y1": 0, "x2": 5, "y2": 5},
              {"x1": 0, "y1": 0, "x2": 0, "y2": 0}, {"x1": 10, "y1": 12, "x2": 1, "y2": 28}]),
}
REQUEST_ID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SHIFT_NS = [0, 10, 100, 1000, 10000, 100000]
# The paper's speed-ups (Fig. 10a: only the range is in the text) and App. D's expectation.
PAPER = {"io_low": 2.06, "io_high": 3.28, "maze": 0.26}


def zip_dir(path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(Path(path).rglob("*")):
            if f.is_file():
                info = zipfile.ZipInfo(str(f.relative_to(path)))
                info.external_attr = 0o644 << 16
                zf.writestr(info, f.read_bytes())
    return buf.getvalue()


def handler_of(package):
    return "index.handler"


def s3_client(kiln):
    import boto3
    import botocore.config
    endpoint = (kiln.data_dir / "s3-endpoint").read_text().strip()
    return boto3.client("s3", endpoint_url=endpoint, region_name=kiln.creds["region"],
                        aws_access_key_id=kiln.creds["accessKeyId"],
                        aws_secret_access_key=kiln.creds["secretAccessKey"],
                        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}))


def stock(kiln, bench):
    """Puts what an I/O benchmark reads in kiln's object store; the environment it is given."""
    s3 = s3_client(kiln)

    def bucket(name):
        try:
            s3.create_bucket(Bucket=name)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
    if bench == "authorize":
        bucket("bench-users")
        s3.put_object(Bucket="bench-users", Key="users.json", Body=json.dumps(USERS).encode())
        return {"USERS_BUCKET": "bench-users"}
    if bench == "upload":
        bucket("uploads")
    if bench == "status":
        bucket("commits")
        for i, sha in enumerate(SHAS):
            record = {"message": f"change {i}", "author": {"login": f"dev{i}"}} if i % 3 else {}
            s3.put_object(Bucket="commits", Key=f"{REPO}/{sha}.json", Body=json.dumps(record).encode())
    return {}


def signed(kiln, method, path, body):
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import requests
    url = kiln.url + path
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body)
    creds = botocore.credentials.Credentials(kiln.creds["accessKeyId"], kiln.creds["secretAccessKey"])
    botocore.auth.SigV4Auth(creds, "lambda", kiln.creds["region"]).add_auth(request)
    return requests.request(method, url, data=body, headers=dict(request.headers.items()), timeout=60)


def deploy(kiln, name, package, breakout, trace_requests, env, memory_mb=256):
    lam = kiln.client()
    try:
        lam.delete_function(FunctionName=name)
    except lam.exceptions.ResourceNotFoundException:
        pass
    body = {
        "FunctionName": name, "Runtime": "nodejs20.x", "Handler": handler_of(package),
        "Role": "arn:aws:iam::000000000000:role/bench", "MemorySize": memory_mb, "Timeout": 30,
        "Code": {"ZipFile": base64.b64encode(zip_dir(package)).decode()},
        "Environment": {"Variables": env},
    }
    if package.name == "banking":
        # Each account is a session: its requests take turns on either path.
        body["KilnSessions"] = {"Hint": "json:$.account"}
    if breakout:
        body["KilnBreakout"] = {"Mode": "auto", "TraceRequests": trace_requests}
    r = signed(kiln, "POST", "/2015-03-31/functions", json.dumps(body))
    if r.status_code != 201:
        raise RuntimeError(f"CreateFunction {name}: {r.status_code} {r.text}")


def breakout_status(kiln, name):
    return signed(kiln, "GET", f"/2015-03-31/functions/{name}/configuration", "").json().get(
        "KilnBreakoutStatus", {})


def invoke(kiln, name, event):
    r = kiln.client().invoke(FunctionName=name, Payload=json.dumps(event).encode(), LogType="Tail")
    tail = base64.b64decode(r.get("LogResult", "")).decode()
    return r["Payload"].read(), tail


def train(kiln, name, training):
    """Waits for a fast copy to be instrumented, runs its training set and waits for it to
    compile; its Breakout status (`Mode` `decontainerized`, or `ordinary` and why)."""
    deadline = time.time() + 120
    while breakout_status(kiln, name).get("Mode") != "tracing":
        if time.time() > deadline:
            raise RuntimeError(f"{name} was not instrumented: {breakout_status(kiln, name)}")
        time.sleep(0.2)
    for event in training:
        invoke(kiln, name, event)
    while breakout_status(kiln, name).get("Mode") not in ("decontainerized", "ordinary"):
        if time.time() > deadline:
            raise RuntimeError(f"{name} did not compile: {breakout_status(kiln, name)}")
        time.sleep(0.2)
    return breakout_status(kiln, name)


def prepare(kiln, bench, package, training, timed_events):
    """Deploys both copies, trains the fast one, checks answers; the fast copy's status."""
    ordinary, fast = f"{bench}-ordinary", f"{bench}-fast"
    env = stock(kiln, bench)
    deploy(kiln, ordinary, package, False, 0, env)
    deploy(kiln, fast, package, True, len(training), env)
    status = train(kiln, fast, training)
    checks = []
    for event in timed_events:
        want, _ = invoke(kiln, ordinary, event)
        got, tail = invoke(kiln, fast, event)
        # A request's own id (status answers it) is masked.
        if REQUEST_ID.sub(b"*", got) != REQUEST_ID.sub(b"*", want):
            raise RuntimeError(f"{bench}: {event} answers {got!r} fast, {want!r} ordinary")
        checks.append("Mode: decontainerized" in tail)
    log(f"{bench}: {status.get('Mode')} ({status.get('Reason', 'compiled')}), "
        f"{sum(checks)}/{len(checks)} timed events fast")
    return ordinary, fast, status, all(checks)


def closed_loop(args, kiln, name, event):
    out = loadgen(args, "throughput", "--url", kiln.url,
                  "--path", f"/2015-03-31/functions/{name}/invocations",
                  "--creds", kiln.creds_path, "--server-pid", kiln.pid, "--threads", 2,
                  "--body", json.dumps(event), "--concurrency", args.streams,
                  "--duration", args.round_s, "--warmup", args.warmup_s)
    if out["errors"]:
        raise RuntimeError(f"{name}: {out['errors']} errors, first {out['first_error']}")
    return out


def rounds(args, kiln, ordinary, fast, event):
    """Alternating rounds of both copies; each round's mean latency (µs) and rate."""
    res = {"ordinary": [], "fast": [], "ordinary_rps": [], "fast_rps": []}
    for i in range(args.rounds):
        for mode, name in (("ordinary", ordinary), ("fast", fast)) if i % 2 == 0 else \
                (("fast", fast), ("ordinary", ordinary)):
            out = closed_loop(args, kiln, name, event)
            res[mode].append(out["latency_ns"]["mean"] / 1000)
            res[mode + "_rps"].append(out["rps"])
    return res


def speedup(res, reps=10000, seed=1):
    o, f = np.asarray(res["ordinary"]), np.asarray(res["fast"])
    rng = np.random.default_rng(seed)
    boots = [o[rng.integers(0, len(o), len(o))].mean() / f[rng.integers(0, len(f), len(f))].mean()
             for _ in range(reps)]
    return float(o.mean() / f.mean()), [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]


# ------------------------------------------------------------------ Figs. 10b–c and idle footprint

CLK_TCK = os.sysconf("SC_CLK_TCK")
# The paper's §5 figures: CPU and memory ratios (geometric means over the rates, Figs. 10b–c),
# 100 idle Node containers against a binary of 100 traces.
LOAD_TARGETS = {"cpu_ratio": 0.20, "memory_ratio": 0.81}
IDLE_PAPER = {"ordinary_mb": 1600, "fast_mb": 10}


class Resources:
    """kiln's own CPU time and PSS, and those of its sandboxes (cgroups)."""

    def __init__(self, kiln, cpuacct):
        self.pid = kiln.pid
        self.v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        base = Path("/sys/fs/cgroup") if self.v2 else Path("/sys/fs/cgroup/memory")
        self.memory = base / kiln.cgroup
        # v1: kiln and everything it starts are in the cpuacct cgroup run.sh made; v2: the
        # sandboxes are under kiln's parent cgroup, kiln itself is not.
        self.cpuacct = Path(cpuacct) if cpuacct else None

    def kiln_cpu_ns(self):
        rest = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) * 1e9 / CLK_TCK

    def sandboxes_cpu_ns(self, kiln_ns):
        if self.v2:
            for line in (self.memory / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) * 1000.0
            return 0.0
        return int((self.cpuacct / "cpuacct.usage").read_text()) - kiln_ns

    def cpu(self):
        kiln_ns = self.kiln_cpu_ns()
        return {"t": time.monotonic(), "kiln_ns": kiln_ns, "sandboxes_ns": self.sandboxes_cpu_ns(kiln_ns)}

    def pss(self):
        for line in Path(f"/proc/{self.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
        return 0

    def instances(self):
        return sorted(d.name for d in self.memory.glob("i*") if d.is_dir())

    def sandboxes_memory(self):
        """Bytes charged to kiln's sandbox cgroups (all of them, hierarchically), and of those
        anonymous memory and page cache."""
        if not self.memory.exists():
            return {"bytes": 0, "anon": 0, "file": 0}
        if self.v2:
            stat = dict(l.split() for l in (self.memory / "memory.stat").read_text().splitlines())
            return {"bytes": int((self.memory / "memory.current").read_text()),
                    "anon": int(stat.get("anon", 0)), "file": int(stat.get("file", 0))}
        stat = dict(l.split() for l in (self.memory / "memory.stat").read_text().splitlines())
        return {"bytes": int((self.memory / "memory.usage_in_bytes").read_text()),
                "anon": int(stat.get("total_rss", 0)), "file": int(stat.get("total_cache", 0))}

    def pss_by_mapping(self):
        """kiln's PSS by kind of mapping (/proc/PID/smaps): its heap and other anonymous memory,
        and each file it maps (by name), in bytes, largest first."""
        kinds, current = {}, None
        for line in Path(f"/proc/{self.pid}/smaps").read_text().splitlines():
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                name = head[5] if len(head) > 5 else "[anon]"
                current = name if name.startswith("[") else Path(name).name
            elif head and head[0] == "Pss:" and current:
                kinds[current] = kinds.get(current, 0) + int(head[1]) * 1024
        return dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:12])

    def cgroups(self):
        """Each sandbox cgroup's memory and what runs in it (its processes' command lines)."""
        out = []
        for name in self.instances():
            d = self.memory / name
            try:
                usage = int((d / ("memory.current" if self.v2 else "memory.usage_in_bytes")).read_text())
                pids = (d / "cgroup.procs").read_text().split()
                cmds = sorted({Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()[:80]
                               for p in pids[:4] if Path(f"/proc/{p}").exists()})
            except OSError:
                continue
            out.append({"cgroup": name, "bytes": usage, "procs": len(pids), "cmdlines": cmds})
        return out

    def memory_sample(self):
        m = self.sandboxes_memory()
        return {"t": time.monotonic(), "kiln_pss": self.pss(), "sandboxes": m["bytes"],
                "sandboxes_anon": m["anon"], "sandboxes_file": m["file"], "instances": len(self.instances())}


def wait_settled(res, ttl, limit_s):
    """Waits out the idle TTL (and the reaper's tick), then until the number of kiln's sandbox
    cgroups has not changed for 5 s: the instances that were idle are gone; what is left is
    kept by kiln (the function's snapshot, standbys, spares). How long it took."""
    started = time.time()
    time.sleep(ttl + 2)
    count, since = len(res.instances()), time.time()
    while time.time() - since < 5 and time.time() - started < limit_s:
        time.sleep(1)
        if len(res.instances()) != count:
            count, since = len(res.instances()), time.time()
    return time.time() - started


def open_loop(args, kiln, res, name, event, rate):
    """One open-loop run at `rate`; CPU over the measured window and memory sampled in it."""
    cmd = [args.loadgen, "open", "--url", kiln.url, "--path", f"/2015-03-31/functions/{name}/invocations",
           "--creds", str(kiln.creds_path), "--body", json.dumps(event), "--rate", str(rate),
           "--duration", str(args.load_s), "--warmup", str(args.load_warmup_s), "--seed", str(rate),
           "--timeout", "30", "--drain", "30"]
    before_all = cpu_account()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    window = (t0 + args.load_warmup_s, t0 + args.load_warmup_s + args.load_s)
    time.sleep(max(0.0, window[0] - time.monotonic()))
    cpu0, samples = res.cpu(), []
    while time.monotonic() < window[1]:
        samples.append(res.memory_sample())
        time.sleep(min(0.5, max(0.0, window[1] - time.monotonic())))
    cpu1 = res.cpu()
    out, err = proc.communicate(timeout=120)
    share = interference(before_all, cpu_account())
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err}")
    lg = json.loads(out)
    wall = cpu1["t"] - cpu0["t"]
    kiln_s = (cpu1["kiln_ns"] - cpu0["kiln_ns"]) / 1e9
    sandboxes_s = (cpu1["sandboxes_ns"] - cpu0["sandboxes_ns"]) / 1e9
    served = max(lg["completed"], 1)
    mem = {k: [s[k] for s in samples] for k in samples[0]} if samples else {}
    total = [a + b for a, b in zip(mem.get("kiln_pss", []), mem.get("sandboxes", []))]
    entry = {
        "rate": rate, "achieved_rps": lg["achieved_rps"], "offered_rps": lg["offered_rps"],
        "sent": lg["sent"], "measured": lg["measured"], "completed": lg["completed"], "errors": lg["errors"],
        "unfinished": lg["unfinished"], "first_error": lg["first_error"],
        "p50_ms": lg["latency_ns"]["p50"] / 1e6, "p99_ms": lg["latency_ns"]["p99"] / 1e6,
        "mean_ms": lg["latency_ns"]["mean"] / 1e6, "max_in_flight": lg["max_in_flight"],
        "connections": lg["connections_opened"], "client_late_p99_ms": lg["late_ns"]["p99"] / 1e6,
        "wall_s": wall, "kiln_cpu_s": kiln_s, "sandboxes_cpu_s": sandboxes_s,
        "cores": (kiln_s + sandboxes_s) / wall, "kiln_cores": kiln_s / wall, "sandboxes_cores": sandboxes_s / wall,
        "cpu_us_per_request": (kiln_s + sandboxes_s) * 1e6 / served,
        "memory_mean_mb": float(np.mean(total)) / 2**20 if total else 0.0,
        "memory_max_mb": float(np.max(total)) / 2**20 if total else 0.0,
        "kiln_pss_mean_mb": float(np.mean(mem["kiln_pss"])) / 2**20 if total else 0.0,
        "sandboxes_mean_mb": float(np.mean(mem["sandboxes"])) / 2**20 if total else 0.0,
        "sandboxes_anon_mean_mb": float(np.mean(mem["sandboxes_anon"])) / 2**20 if total else 0.0,
        "instances_mean": float(np.mean(mem["instances"])) if total else 0.0,
        "instances_max": int(np.max(mem["instances"])) if total else 0,
        "memory_samples": len(samples), "loadavg": loadavg(), "interference": share,
    }
    log(f"  {name} at {rate}/s: {entry['achieved_rps']:.0f}/s achieved, {entry['errors']} errors, "
        f"p50 {entry['p50_ms']:.1f} ms p99 {entry['p99_ms']:.1f} ms; {entry['cores']:.3f} cores "
        f"(kiln {entry['kiln_cores']:.3f}), {entry['cpu_us_per_request']:.0f} µs/request; "
        f"{entry['memory_mean_mb']:.0f} MB mean (kiln {entry['kiln_pss_mean_mb']:.0f}, "
        f"{entry['instances_mean']:.1f} instances); others {share['others_pct']:.0f}%")
    return entry


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def fig10bc_part(args, kiln, res, answer):
    """One copy of authorize, alone on its kiln: deployed (and, fast, traced until
    `decontainerized`), warmed by a short closed loop, then driven at each rate."""
    package, event, training = BENCHMARKS["authorize"]
    fast = args.load_part == "fast"
    name = f"authorize-{args.load_part}"
    env = stock(kiln, "authorize")
    deploy(kiln, name, package, fast, len(training), env)
    out = {"part": args.load_part, "event": event}
    if fast:
        out["status"] = train(kiln, name, training)
    got, tail = invoke(kiln, name, event)
    out["answer"] = got.decode()
    out["timed_event_fast"] = "Mode: decontainerized" in tail
    if answer is not None and got.decode() != answer:
        raise RuntimeError(f"{name} answers {got!r}, the ordinary copy {answer!r}")
    if fast and not out["timed_event_fast"]:
        log(f"{name}: the timed event did not run fast ({out['status']}): not measured")
        out["rates"] = []
        return out
    if fast:
        # The tracing instance goes (kiln's short idle TTL); what kiln keeps stays.
        out["settle_s"] = wait_settled(res, args.idle_ttl, args.idle_ttl + 60)
    out["idle_before"] = res.memory_sample()
    out["idle_instances"] = res.instances()
    # Warm instances first (both copies alike): a cold start per arrival of the first second
    # would otherwise be the lowest rate's whole story.
    out["prewarm"] = loadgen(args, "throughput", "--url", kiln.url,
                             "--path", f"/2015-03-31/functions/{name}/invocations",
                             "--creds", kiln.creds_path, "--body", json.dumps(event), "--concurrency", 4,
                             "--duration", args.load_warmup_s, "--warmup", 1)["rps"]
    out["rates"] = [open_loop(args, kiln, res, name, event, rate) for rate in args.rates]
    return out


def fig10bc_report(parts):
    o, f = parts["ordinary"], parts["fast"]
    for x in o["rates"] + f["rates"]:
        # Per request answered (a 429 costs next to nothing and is not an answer).
        x["cpu_us_per_request"] = (x["kiln_cpu_s"] + x["sandboxes_cpu_s"]) * 1e6 / max(x["completed"], 1)
    ratios = []
    for a, b in zip(o["rates"], f["rates"]):
        ratios.append({"rate": a["rate"], "cpu": b["cores"] / a["cores"] if a["cores"] else None,
                       "cpu_per_request": b["cpu_us_per_request"] / a["cpu_us_per_request"],
                       "memory": b["memory_mean_mb"] / a["memory_mean_mb"] if a["memory_mean_mb"] else None,
                       "memory_max": b["memory_max_mb"] / a["memory_max_mb"] if a["memory_max_mb"] else None})
    # A copy kept up at a rate when it answered ≥ 95% of the offered rate with < 1% errors.
    for r, a, b in zip(ratios, o["rates"], f["rates"]):
        r["kept_up"] = {m: x["achieved_rps"] >= 0.95 * x["offered_rps"]
                        and x["errors"] + x["unfinished"] < 0.01 * max(x["measured"], 1)
                        for m, x in (("ordinary", a), ("fast", b))}
    keys = ("cpu", "cpu_per_request", "memory", "memory_max")
    g = {k: geomean([r[k] for r in ratios]) for k in keys}
    both = [r for r in ratios if all(r["kept_up"].values())]
    g_both = {k: geomean([r[k] for r in both]) for k in keys}
    if ratios:
        log(f"authorize fast ÷ ordinary, geometric means: CPU {g['cpu']:.3f} (target ≤ "
            f"{LOAD_TARGETS['cpu_ratio']}), memory {g['memory']:.3f} (target ≤ {LOAD_TARGETS['memory_ratio']})")
    return {"ratios": ratios, "geomean": g, "geomean_kept_up": g_both,
            "kept_up_rates": [r["rate"] for r in both]}


def settle_memory(res, seconds=5.0):
    """Memory samples over a few seconds, and their means."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(res.memory_sample())
        time.sleep(0.5)
    return {k: float(np.mean([s[k] for s in samples])) for k in samples[0] if k != "t"}


def idle_part(args, kiln, res):
    """One side of the idle footprint on a kiln of its own: `args.idle_copies` copies of
    authorize, each invoked once, after which nothing runs."""
    package, event, training = BENCHMARKS["authorize"]
    training = training[:2]
    env = stock(kiln, "authorize")
    fast = args.idle_part == "fast"
    time.sleep(2)
    out = {"part": args.idle_part, "copies": args.idle_copies, "idle_ttl_s": args.idle_ttl,
           "trace_requests": len(training) if fast else 0, "before": settle_memory(res),
           "kiln_pss_by_mapping_before": res.pss_by_mapping()}
    names = [f"authorize-{args.idle_part}-{i:03d}" for i in range(args.idle_copies)]
    started = time.time()
    for name in names:
        deploy(kiln, name, package, fast, len(training), env, memory_mb=128)
    if fast:
        deadline = time.time() + 120 + 5 * len(names)
        for name in names:
            while breakout_status(kiln, name).get("Mode") != "tracing":
                if time.time() > deadline:
                    raise RuntimeError(f"{name} was not instrumented: {breakout_status(kiln, name)}")
                time.sleep(0.2)
            for e in training:
                invoke(kiln, name, e)
        modes = {}
        for name in names:
            while (mode := breakout_status(kiln, name).get("Mode")) not in ("decontainerized", "ordinary"):
                if time.time() > deadline:
                    raise RuntimeError(f"{name} did not compile: {breakout_status(kiln, name)}")
                time.sleep(0.2)
            modes[mode] = modes.get(mode, 0) + 1
        out["modes"] = modes
        log(f"idle fast: {len(names)} copies traced and compiled in {time.time() - started:.0f} s: {modes}")
        out["reap_wait_s"] = wait_settled(res, args.idle_ttl, args.idle_ttl + 120)
        out["after_reaping"] = settle_memory(res)
        out["kiln_pss_by_mapping_after_reaping"] = res.pss_by_mapping()
    fast_answers, want = 0, None
    for name in names:
        got, tail = invoke(kiln, name, event)
        want = want or got
        if got != want:
            raise RuntimeError(f"{name} answered {got!r}, the first copy {want!r}")
        fast_answers += "Mode: decontainerized" in tail
    out["answer"] = want.decode()
    out["invoked_fast"] = fast_answers
    out["deploy_and_invoke_s"] = time.time() - started
    time.sleep(3)
    out["after"] = settle_memory(res)
    out["instances_left"] = res.instances()
    out["cgroups_after"] = res.cgroups()
    out["kiln_pss_by_mapping_after"] = res.pss_by_mapping()
    if fast:
        # Idle for the TTL: the reaper lets the fast paths' idle wasm instances go too.
        time.sleep(args.idle_ttl + 2)
        out["after_idle"] = settle_memory(res)
        out["kiln_pss_by_mapping_after_idle"] = res.pss_by_mapping()
    a, b = out["after"], out["before"]
    log(f"idle {args.idle_part}: {len(names)} copies ({fast_answers} answered fast); kiln PSS "
        f"{b['kiln_pss'] / 2**20:.1f} → {a['kiln_pss'] / 2**20:.1f} MB, sandboxes "
        f"{a['sandboxes'] / 2**20:.1f} MB in {a['instances']:.0f} instances")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--servers", help="JSON from run.sh: kiln's url, pid, data_dir, cpuacct cgroup")
    p.add_argument("--loadgen", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--figs", default="10a,15", help="10a, 15, 10bc, idle (comma-separated)")
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--round-s", type=float, default=20)
    p.add_argument("--warmup-s", type=float, default=5)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--benchmarks", default="authorize,upload,status,banking,autocomplete,maze,shift")
    p.add_argument("--rates", default="50,100,200,300,400,500", help="Figs. 10b–c: requests/s")
    p.add_argument("--load-s", type=float, default=30, help="Figs. 10b–c: measured seconds per rate")
    p.add_argument("--load-warmup-s", type=float, default=5)
    p.add_argument("--idle-ttl", type=float, default=600, help="kiln's --idle-ttl (run.sh's)")
    p.add_argument("--idle-copies", type=int, default=100)
    p.add_argument("--idle-part", choices=["ordinary", "fast", "report"])
    p.add_argument("--load-part", choices=["ordinary", "fast", "report"])
    p.add_argument("--parts-dir", help="where the parts' JSON is kept between kilns")
    p.add_argument("--command", default="bench/breakout/run.sh")
    p.add_argument("--profile", default="release")
    args = p.parse_args()
    args.rates = [int(r) for r in args.rates.split(",")]
    figs = set(args.figs.split(","))
    servers = json.loads(Path(args.servers).read_text())["kiln"] if args.servers else None
    kiln = Kiln(servers) if servers else None
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if figs & {"10a", "15"}:
        fig10a_15(args, kiln)
    if "10bc" in figs:
        load_dir = Path(args.parts_dir)
        load_dir.mkdir(parents=True, exist_ok=True)
        if args.load_part in ("ordinary", "fast"):
            res = Resources(kiln, servers.get("cpuacct"))
            answer = None
            if args.load_part == "fast":
                answer = json.loads((load_dir / "load-ordinary.json").read_text())["answer"]
            part = {"meta": machine_info(args), "date": now(), "load_start": loadavg(),
                    "cgroup": "v2" if res.v2 else "v1"}
            part.update(fig10bc_part(args, kiln, res, answer))
            part["load_end"] = loadavg()
            (load_dir / f"load-{args.load_part}.json").write_text(json.dumps(part, indent=1))
        else:
            parts = {m: json.loads((load_dir / f"load-{m}.json").read_text()) for m in ("ordinary", "fast")}
            results = {"meta": parts["fast"]["meta"], "command": args.command, "date": now(),
                       "setup": {"rates": args.rates, "load_s": args.load_s, "load_warmup_s": args.load_warmup_s,
                                 "idle_ttl_s": args.idle_ttl, "cgroup": parts["fast"]["cgroup"],
                                 "memory_size_mb": 256},
                       "targets": LOAD_TARGETS, **parts, **fig10bc_report(parts)}
            (Path(args.out) / "breakout-load.json").write_text(json.dumps(results, indent=1))
            write_load_markdown(Path(args.out) / "breakout-load.md", results)
            log(f"wrote {args.out}/breakout-load.md")
    if "idle" in figs:
        idle_dir = Path(args.parts_dir)
        idle_dir.mkdir(parents=True, exist_ok=True)
        if args.idle_part in ("ordinary", "fast"):
            res = Resources(kiln, servers.get("cpuacct"))
            part = {"meta": machine_info(args), "date": now(), "load_start": loadavg()}
            part.update(idle_part(args, kiln, res))
            part["load_end"] = loadavg()
            (idle_dir / f"idle-{args.idle_part}.json").write_text(json.dumps(part, indent=1))
        else:
            results = {"command": args.command, "date": now(), "paper": IDLE_PAPER,
                       "ordinary": json.loads((idle_dir / "idle-ordinary.json").read_text()),
                       "fast": json.loads((idle_dir / "idle-fast.json").read_text())}
            results["meta"] = results["fast"]["meta"]
            (Path(args.out) / "breakout-idle.json").write_text(json.dumps(results, indent=1))
            write_idle_markdown(Path(args.out) / "breakout-idle.md", results)
            log(f"wrote {args.out}/breakout-idle.md")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def fig10a_15(args, kiln):
    chosen = args.benchmarks.split(",")
    results = {"meta": machine_info(args), "command": args.command, "date": now(),
               "setup": {"streams": args.streams, "round_s": args.round_s, "warmup_s": args.warmup_s,
                         "rounds": args.rounds},
               "fig10a": {}, "fig15": {}}
    for bench in [b for b in chosen if b in BENCHMARKS]:
        package, event, training = BENCHMARKS[bench]
        ordinary, fast, status, all_fast = prepare(kiln, bench, package, training, [event])
        entry = {"status": status, "event": event, "timed_event_fast": all_fast}
        if all_fast:
            res = rounds(args, kiln, ordinary, fast, event)
            entry.update(res)
            entry["speedup"], entry["speedup_ci95"] = speedup(res)
            log(f"{bench}: ordinary {np.mean(res['ordinary']):.0f} µs, fast {np.mean(res['fast']):.0f} µs, "
                f"speed-up {entry['speedup']:.2f} {entry['speedup_ci95']}")
        results["fig10a"][bench] = entry
    if "shift" in chosen:
        package = FIXTURES / "shift"
        training = [{"n": n} for n in SHIFT_NS]
        events = [{"n": n} for n in SHIFT_NS]
        ordinary, fast, status, all_fast = prepare(kiln, "shift", package, training, events)
        results["fig15"]["status"] = status
        for n in SHIFT_NS:
            event = {"n": n}
            entry = {}
            _, tail = invoke(kiln, fast, event)
            entry["fast_path"] = "Mode: decontainerized" in tail
            if entry["fast_path"]:
                shift_args = argparse.Namespace(**{**vars(args), "streams": 1,
                                                   "rounds": max(2, args.rounds // 2)})
                res = rounds(shift_args, kiln, ordinary, fast, event)
                entry.update(res)
                entry["speedup"], entry["speedup_ci95"] = speedup(res)
                log(f"shift n={n}: ordinary {np.mean(res['ordinary']):.0f} µs, fast "
                    f"{np.mean(res['fast']):.0f} µs, speed-up {entry['speedup']:.2f}")
            results["fig15"][str(n)] = entry
    (Path(args.out) / "breakout.json").write_text(json.dumps(results, indent=1))
    write_markdown(Path(args.out) / "breakout.md", results)
    log(f"wrote {args.out}/breakout.md")


def write_markdown(path, r):
    s = r["setup"]
    lines = [
        "# BREAKOUT on kiln: trace-compiled fast paths against ordinary instances",
        "",
        f"Command: `{r['command']}` ({r['date']}, commit {r['meta']['git_commit'][:12]}, "
        f"{r['meta']['cpus']} CPUs, {r['meta']['cpu_model']}).",
        "",
        f"Each benchmark is deployed twice (`nodejs20.x`, 256 MB): ordinary, and with `KilnBreakout` "
        f"`auto` traced on a training set until `decontainerized`. Both are driven by "
        f"{s['streams']} closed-loop streams (bench/loadgen, SigV4 signed per request, one connection "
        f"each) in {s['rounds']} alternating rounds of {s['round_s']:.0f} s after {s['warmup_s']:.0f} s "
        "of warm-up; a round's figure is its mean latency. The speed-up is ordinary ÷ decontainerized "
        "mean latency, with a 95% bootstrap interval over the rounds. Client, kiln and the instances "
        "share the machine's cores.",
        "",
        "## Fig. 10a: steady-state speed-up",
        "",
        "| benchmark | mode reached | ordinary mean (µs) | decontainerized mean (µs) | speed-up [95% CI] | paper |",
        "|---|---|---:|---:|---|---|",
    ]
    for bench, e in r["fig10a"].items():
        mode = e["status"].get("Mode", "?")
        reason = e["status"].get("Reason")
        paper = "0.26" if bench == "maze" else "2.06–3.28"
        if "speedup" in e:
            lines.append(f"| {bench} | {mode} | {np.mean(e['ordinary']):.0f} | {np.mean(e['fast']):.0f} | "
                         f"{e['speedup']:.2f} [{e['speedup_ci95'][0]:.2f}, {e['speedup_ci95'][1]:.2f}] | {paper} |")
        else:
            why = reason or "the timed event missed"
            lines.append(f"| {bench} | {mode} | – | – | not measured: {why} | {paper} |")
    lines += ["", "authorize reads users.json (1 000 users) from kiln's object store, upload writes "
              "`uploads/bench.txt` on every request, status reads a commit record and writes its status "
              "JSON; each through `@aws-sdk/client-s3` in Node, and through the fast path's S3 intrinsics "
              "(kiln's store, no HTTP, no SigV4) when decontainerized. banking deposits through "
              "`context.session.transact`, each stream to an account of its own, a session "
              "(`KilnSessions` hint `json:$.account`) whose requests take turns on either path.", ""]
    if r["fig15"]:
        lines += ["## Fig. 15 / App. D: `shift`, 100 000 pushes then n shifts (one stream)", "",
                  "| n | ordinary mean (µs) | decontainerized mean (µs) | speed-up [95% CI] |",
                  "|---:|---:|---:|---|"]
        for n in SHIFT_NS:
            e = r["fig15"].get(str(n), {})
            if "speedup" in e:
                lines.append(f"| {n} | {np.mean(e['ordinary']):.0f} | {np.mean(e['fast']):.0f} | "
                             f"{e['speedup']:.2f} [{e['speedup_ci95'][0]:.2f}, {e['speedup_ci95'][1]:.2f}] |")
            else:
                lines.append(f"| {n} | – | – | not fast: {r['fig15'].get('status', {}).get('Reason', 'missed')} |")
        lines.append("")
    path.write_text("\n".join(lines))


def fmt_ratio(v):
    return "–" if v is None else f"{v:.3f}"


def write_load_markdown(path, r):
    s, o, f, m = r["setup"], r["ordinary"], r["fast"], r["meta"]
    mb = lambda v: v / 2**20  # noqa: E731
    lines = [
        "# BREAKOUT on kiln: Figs. 10b–c, authorize's CPU and memory under an open loop",
        "",
        f"Command: `{r['command']}` ({r['date']}, commit {m['git_commit'][:12]}, {m['cpus']} CPUs, "
        f"{m['cpu_model']}, cgroup {s['cgroup']}). Load average (1, 5, 15 min): ordinary part "
        f"{' '.join(o['load_start'])} → {' '.join(o['load_end'])}, decontainerized part "
        f"{' '.join(f['load_start'])} → {' '.join(f['load_end'])}.",
        "",
        "authorize (`nodejs20.x`, 256 MB) runs on two fresh kilns, one copy each: ordinary, and with "
        f"`KilnBreakout` `auto` traced until `decontainerized` (mode reached: "
        f"{f.get('status', {}).get('Mode', '?')}; the timed event ran fast: {f['timed_event_fast']}; both "
        "copies give the same answer). On its kiln (`--idle-ttl "
        f"{s['idle_ttl_s']:.0f}`), the decontainerized copy's tracing instance is waited out first; then each "
        "copy is warmed by a closed loop of 4 streams, and driven by an open loop (`loadgen open`: Poisson "
        "arrivals, seed = the rate, each request signed with SigV4 and sent at its arrival whether or not the "
        "earlier ones were answered, on a connection pool that grows as needed) at each rate in turn for "
        f"{s['load_warmup_s']:.0f} s of warm-up and {s['load_s']:.0f} s measured; latency counts from the "
        "scheduled arrival.",
        "",
        "CPU over the measured window is kiln's own (utime + stime of all its threads, /proc/PID/stat) plus its "
        "sandboxes' (cgroup v1: a cpuacct cgroup run.sh put kiln in before anything was deployed, so it "
        "holds kiln and everything it starts, less kiln's own time; v2: `cpu.stat` `usage_usec` of kiln's "
        "parent cgroup), as cores (CPU-seconds per second) and µs per answered request. Memory is kiln's PSS "
        "(/proc/PID/smaps_rollup) plus the memory charged to its sandbox cgroups (`memory.usage_in_bytes` of "
        "their parent, hierarchical, page cache included; v2 `memory.current`), sampled every 0.5 s in the "
        "window. The client (loadgen) is outside both. 'others' is the share of the machine's CPU taken by "
        "processes not of this run during the rate's run.",
        "",
        "Before the load, with nothing running: ordinary kiln "
        f"{mb(o['idle_before']['kiln_pss']):.0f} MB PSS + {mb(o['idle_before']['sandboxes']):.0f} MB in "
        f"{o['idle_before']['instances']} sandbox cgroups; decontainerized kiln "
        f"{mb(f['idle_before']['kiln_pss']):.0f} MB PSS + {mb(f['idle_before']['sandboxes']):.0f} MB in "
        f"{f['idle_before']['instances']} sandbox cgroups (what kiln keeps: the runtime's warm standby, "
        "the function's snapshot and spares).",
        "",
        "| rate (/s) | copy | achieved (/s) | errors | p50 (ms) | p99 (ms) | cores (kiln + sandboxes) | "
        "µs CPU / request | memory mean (MB) | memory max (MB) | kiln PSS (MB) | sandbox cgroups | others |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(o["rates"], f["rates"]):
        for name, x in (("ordinary", a), ("decontainerized", b)):
            lines.append(
                f"| {x['rate']} | {name} | {x['achieved_rps']:.0f} | {x['errors'] + x['unfinished']} | "
                f"{x['p50_ms']:.1f} | {x['p99_ms']:.1f} | {x['cores']:.3f} ({x['kiln_cores']:.3f} + "
                f"{x['sandboxes_cores']:.3f}) | {x['cpu_us_per_request']:.0f} | {x['memory_mean_mb']:.0f} | "
                f"{x['memory_max_mb']:.0f} | {x['kiln_pss_mean_mb']:.0f} | {x['instances_mean']:.1f} | "
                f"{x['interference']['others_pct']:.0f}% |")
    errs = {}
    for mode, part in (("ordinary", o), ("decontainerized", f)):
        for x in part["rates"]:
            if x["first_error"]:
                errs.setdefault(x["first_error"], []).append(f"{mode} {x['rate']}/s")
    for err, where in errs.items():
        lines += ["", f"First error ({', '.join(where)}): `{err}`"]
    lines += ["", "## Decontainerized ÷ ordinary", "",
              "| rate (/s) | CPU (cores) | CPU per request | memory (mean) | memory (max) | kept up "
              "(ordinary, decontainerized) |",
              "|---:|---:|---:|---:|---:|---|"]
    yes = lambda v: "yes" if v else "no"  # noqa: E731
    for x in r["ratios"]:
        lines.append(f"| {x['rate']} | {fmt_ratio(x['cpu'])} | {fmt_ratio(x['cpu_per_request'])} | "
                     f"{fmt_ratio(x['memory'])} | {fmt_ratio(x['memory_max'])} | "
                     f"{yes(x['kept_up']['ordinary'])}, {yes(x['kept_up']['fast'])} |")
    for label, g in (("geometric mean, all rates", r["geomean"]),
                     (f"geometric mean, rates both kept up at ({', '.join(map(str, r['kept_up_rates'])) or 'none'})",
                      r["geomean_kept_up"])):
        lines.append(f"| {label} | {fmt_ratio(g.get('cpu'))} | {fmt_ratio(g.get('cpu_per_request'))} | "
                     f"{fmt_ratio(g.get('memory'))} | {fmt_ratio(g.get('memory_max'))} | |")
    lines += ["", "A copy kept up at a rate when it answered at least 95% of the offered rate with fewer than "
              "1% errors; where it did not, its CPU is what the machine had left and its memory that of "
              "every instance kiln could start, so the ratio there compares a saturated copy with one that "
              "is not."]
    lines += ["", f"Targets (the paper's Figs. 10b–c, geometric means over 50–500 requests/s): CPU ≤ "
              f"{r['targets']['cpu_ratio']:.2f}, memory ≤ {r['targets']['memory_ratio']:.2f}.", "",
              "## What the numbers say", "", "(written by hand after the run)", ""]
    path.write_text("\n".join(lines))


def write_idle_markdown(path, r):
    o, f, m = r["ordinary"], r["fast"], r["meta"]
    mb = lambda v: v / 2**20  # noqa: E731
    og = mb(o["after"]["kiln_pss"] - o["before"]["kiln_pss"])
    fg = mb(f["after"]["kiln_pss"] - f["before"]["kiln_pss"])
    fr = mb(f["after_reaping"]["kiln_pss"] - f["before"]["kiln_pss"])
    # kiln's PSS by mapping: anonymous memory, and the pages of its binary (shared with the
    # `__sandbox` helpers, so its share of them falls as sandboxes come).
    anon = lambda part, when: mb(sum(v for k, v in part.get(f"kiln_pss_by_mapping_{when}", {}).items()  # noqa: E731
                                      if k in ("[anon]", "[heap]")))
    binary = lambda part, when: mb(part.get(f"kiln_pss_by_mapping_{when}", {}).get("kiln", 0))  # noqa: E731
    kinds = lambda part: ", ".join(f"{n} {c}" for c, n in sorted(  # noqa: E731
        collections.Counter(x["cmdlines"][-1].split()[-1] if x["cmdlines"] else "?"
                            for x in part.get("cgroups_after", [])).items()))
    lines = [
        "# BREAKOUT on kiln: the idle footprint of 100 copies of authorize (§5)",
        "",
        f"Command: `{r['command']}` ({r['date']}, commit {m['git_commit'][:12]}, {m['cpus']} CPUs, "
        f"{m['cpu_model']}). Load average (1, 5, 15 min): ordinary part {' '.join(o['load_start'])} → "
        f"{' '.join(o['load_end'])}, fast part {' '.join(f['load_start'])} → {' '.join(f['load_end'])}.",
        "",
        f"Each part runs on a fresh kiln of its own. Ordinary: {o['copies']} copies of authorize "
        f"(`nodejs20.x`, 128 MB, `--idle-ttl {o['idle_ttl_s']:.0f}` so none is reaped), each invoked once, so "
        f"each has one idle warm Node instance. Fast: {f['copies']} copies with `KilnBreakout` `auto`, "
        f"`TraceRequests` {f['trace_requests']}, each traced on {f['trace_requests']} events and compiled "
        f"(modes reached: {f.get('modes')}); kiln runs with `--idle-ttl {f['idle_ttl_s']:.0f}` and the "
        f"tracing instances are waited out ({f.get('reap_wait_s', 0):.0f} s), then each copy is invoked once "
        f"({f['invoked_fast']} of {f['copies']} answered `Mode: decontainerized`). Memory is the mean of "
        "samples over 5 s: kiln's PSS (/proc/PID/smaps_rollup) and the memory charged to its sandbox "
        "cgroups (their parent's `memory.usage_in_bytes`, hierarchical), before the copies were "
        "deployed and after the last invoke.",
        "",
        "| | ordinary | decontainerized |",
        "|---|---:|---:|",
        f"| sandbox cgroups left (instances, snapshots, standbys) | {o['after']['instances']:.0f} | {f['after']['instances']:.0f} |",
        f"| what runs in them (the runtime's shim) | {kinds(o)} | {kinds(f)} |",
        f"| sandbox cgroups' memory (MB) | {mb(o['after']['sandboxes']):.0f} | {mb(f['after']['sandboxes']):.1f} |",
        f"| of which anonymous (MB) | {mb(o['after']['sandboxes_anon']):.0f} | "
        f"{mb(f['after']['sandboxes_anon']):.1f} |",
        f"| kiln's PSS before the copies (MB) | {mb(o['before']['kiln_pss']):.1f} | "
        f"{mb(f['before']['kiln_pss']):.1f} |",
        f"| kiln's PSS after (MB) | {mb(o['after']['kiln_pss']):.1f} | {mb(f['after']['kiln_pss']):.1f} |",
        f"| kiln's PSS growth (MB) | {og:.1f} | {fg:.1f} |",
        f"| of kiln's growth, anonymous memory (MB) | {anon(o, 'after') - anon(o, 'before'):.1f} | "
        f"{anon(f, 'after') - anon(f, 'before'):.1f} |",
        f"| of kiln's growth, its binary's pages (MB) | {binary(o, 'after') - binary(o, 'before'):.1f} | "
        f"{binary(f, 'after') - binary(f, 'before'):.1f} |",
        f"| total: sandboxes + kiln's growth (MB) | {mb(o['after']['sandboxes']) + og:.0f} | "
        f"{mb(f['after']['sandboxes']) + fg:.1f} |",
        f"| paper (MB) | {r['paper']['ordinary_mb']} (100 containers) | {r['paper']['fast_mb']} "
        "(a binary of 100 traces) |",
        "",
        f"kiln's PSS growth in the fast part after tracing, compiling and reaping but before the {f['copies']} "
        f"fast invokes: {fr:.1f} MB (the invokes then add {fg - fr:.1f} MB).",
        "",
    ]
    if "after_idle" in f:
        fi = mb(f["after_idle"]["kiln_pss"] - f["before"]["kiln_pss"])
        lines += [
            f"After the copies idled for the TTL ({f['idle_ttl_s']:.0f} s; their idle wasm instances go): "
            f"kiln's PSS growth {fi:.1f} MB ({anon(f, 'after_idle') - anon(f, 'before'):.1f} MB of it "
            f"anonymous), sandbox cgroups {f['after_idle']['instances']:.0f} holding "
            f"{mb(f['after_idle']['sandboxes']):.1f} MB; total {mb(f['after_idle']['sandboxes']) + fi:.1f} MB.",
            "",
        ]
    lines += [
        "Target: the decontainerized copies' growth ≤ 10 MB.",
        "",
        "## What the numbers say",
        "",
        "(written by hand after the run)",
        "",
    ]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
