#!/usr/bin/env python3
"""BREAKOUT's Fig. 10a and Fig. 15 (App. D) on kiln: each benchmark deployed twice, ordinary
and with `KilnBreakout` `auto`; the second traced on a training set until it is
`decontainerized`; then both driven by the same closed loop (bench/loadgen, 10 streams, SigV4
per request), in alternating rounds, and the speed-up is ordinary ÷ decontainerized mean
latency, with a 95% bootstrap interval over the rounds.

Started by run.sh, which builds kiln and loadgen (release), starts kiln and stops it. Before the
loop, every event of a benchmark is sent to both copies with boto3 and the answers must be
equal, and the decontainerized copy's REPORT must say it ran fast: a benchmark that misses is
reported as such, not timed as if it were fast.
"""

import argparse
import base64
import datetime
import io
import json
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
from bench import Kiln, loadgen, log, machine_info  # noqa: E402

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


def deploy(kiln, name, package, breakout, trace_requests, env):
    lam = kiln.client()
    try:
        lam.delete_function(FunctionName=name)
    except lam.exceptions.ResourceNotFoundException:
        pass
    body = {
        "FunctionName": name, "Runtime": "nodejs20.x", "Handler": handler_of(package),
        "Role": "arn:aws:iam::000000000000:role/bench", "MemorySize": 256, "Timeout": 30,
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


def prepare(kiln, bench, package, training, timed_events):
    """Deploys both copies, trains the fast one, checks answers; the fast copy's status."""
    ordinary, fast = f"{bench}-ordinary", f"{bench}-fast"
    env = stock(kiln, bench)
    deploy(kiln, ordinary, package, False, 0, env)
    deploy(kiln, fast, package, True, len(training), env)
    deadline = time.time() + 120
    while breakout_status(kiln, fast).get("Mode") != "tracing":
        if time.time() > deadline:
            raise RuntimeError(f"{fast} was not instrumented: {breakout_status(kiln, fast)}")
        time.sleep(0.2)
    for event in training:
        invoke(kiln, fast, event)
    while breakout_status(kiln, fast).get("Mode") not in ("decontainerized", "ordinary"):
        if time.time() > deadline:
            raise RuntimeError(f"{fast} did not compile: {breakout_status(kiln, fast)}")
        time.sleep(0.2)
    status = breakout_status(kiln, fast)
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--servers", required=True, help="JSON from run.sh: kiln's url, pid, data_dir")
    p.add_argument("--loadgen", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--round-s", type=float, default=20)
    p.add_argument("--warmup-s", type=float, default=5)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--benchmarks", default="authorize,upload,status,banking,autocomplete,maze,shift")
    p.add_argument("--command", default="bench/breakout/run.sh")
    p.add_argument("--profile", default="release")
    args = p.parse_args()
    kiln = Kiln(json.loads(Path(args.servers).read_text())["kiln"])
    chosen = args.benchmarks.split(",")
    results = {"meta": machine_info(args), "command": args.command,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
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
    Path(args.out).mkdir(parents=True, exist_ok=True)
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


if __name__ == "__main__":
    main()
