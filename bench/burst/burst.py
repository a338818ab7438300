#!/usr/bin/env python3
"""Driver of bench/burst/run.sh: how kiln serves a burst of N concurrent first requests.

The goal it checks: in a burst of N concurrent first requests to a freshly deployed function,
every start is hot. Per runtime (NoOp function) and burst size N:

  1. UpdateFunctionConfiguration with a new environment variable: a new revision, so kiln
     retires the old instances and builds the new revision's snapshot; the driver waits (kiln's
     status) until that snapshot is ready with every instance its demand asks kiln to make
     ahead (spare forks, standbys), no instance of the function is left, and the runtime's
     generic standby is back.
  2. The first burst: N threads, each with its own connection (opened and used once before)
     and its own Invoke (LogType=Tail), signed beforehand, released together by a barrier.
  3. The second burst, 1 s after the first one ended: the same N, now onto its instances.

That is one round. Each runtime and N gets a new function (no demand history) and 3 rounds
(--rounds; --quick 2): round 1's first burst meets a function with no history, the later ones a
function whose recent peak is N. A second new function, deployed with a fixed floor of N standbys
(KilnPrebake.Standbys), gets one round. The report pools the requests of a row's rounds.

Per request: client latency (send to last byte), and from the REPORT line Duration, Init
Duration (present: the request started an instance; absent: it was served by an instance that
already existed, idle or busy) and Start Path. run.sh owns every process; this script only talks
to the kiln it is handed.
"""

import argparse
import base64
import datetime
import io
import json
import os
import subprocess
import sys
import threading
import time
import types
import uuid
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "startpaths"))
import bench as core  # noqa: E402  (machine facts, CPU accounting, quiet wait)
import startpaths as sp  # noqa: E402  (the signing client, REPORT parsing, kiln's status)

NOOP = BENCH / "startpaths" / "functions"
# runtime key: (kiln runtime, handler, the runtime-generic standby that serves its warm path)
RUNTIMES = {
    "python": ("python3.11", "app.handler", "python3.11"),
    "node": ("nodejs20.x", "index.handler", "nodejs20.x"),
    "provided": ("provided.al2023", "bootstrap", None),
    "wasm": ("wasm", "function.wasm", None),
}
SIZES = [4, 16, 64]
QUICK_SIZES = [4, 16]
SECOND_BURST_GAP_S = 1.0
TARGET_OVERHEAD_P99_MS = 10.0
TARGET_HOT_SHARE_64 = 0.90
TARGETS_TEXT = ("every start hot in a burst of 16; p99 ≤ 10 ms end to end beyond the function's "
                "own duration for NoOp; a burst of 64 at least 90% hot")


def log(msg):
    print(f"[burst {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------ packages
def zip_files(files):
    """files: {name in the zip: (path, mode)}."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (path, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, Path(path).read_bytes())
    return buf.getvalue()


def package(rt, work):
    """The NoOp package of a runtime as zip bytes, or (None, why) if it cannot be built here."""
    if rt == "python":
        return zip_files({"app.py": (NOOP / "python/noop/app.py", 0o644)}), None
    if rt == "node":
        return zip_files({"index.js": (NOOP / "node/noop/index.js", 0o644)}), None
    if rt == "provided":
        return zip_files({"bootstrap": (HERE / "functions/provided/bootstrap", 0o755)}), None
    # wasm: the start-path benchmark's NoOp in C (its `kiln_init` export makes the hot path).
    out = work / "fn" / "wasm-noop.wasm"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["clang", "--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-o", str(out),
           str(NOOP / "wasm/noop/function.c")]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        detail = getattr(e, "stderr", "") or str(e)
        return None, f"clang for wasm32-wasi failed ({detail.strip()[:200]})"
    return zip_files({"function.wasm": (out, 0o644)}), None


# ------------------------------------------------------------------------------------ other tenants
def others_cpu():
    """utime + stime of every process outside this benchmark's tree (run.sh and its
    descendants, kiln's sandboxes included) and other than the host's init. Only the processes'
    own time: the time of children they reap (cutime, cstime) would charge a whole compiler run
    to the second in which its `make` or `cargo` reaped it; children born and gone between two
    reads are missed instead, so this is a lower bound."""
    ours = set(core.cpu_account()["ours"])
    ticks = {pid: (p["start"], p["own_ticks"]) for pid, p in core.proc_stats().items()
             if pid not in ours and pid != 1}
    return {"t": time.time(), "ticks": ticks}


def wait_round_quiet(window_s=1.0, max_pct=10.0, give_up_s=5.0):
    """Waits (up to give_up_s) for a window in which other processes took at most max_pct of
    the machine, so that a round does not start into someone else's compile; returns the share
    of the last window."""
    started = time.time()
    while True:
        before = others_cpu()
        time.sleep(window_s)
        share = sp.others_share(before, others_cpu())
        if share <= max_pct or time.time() - started >= give_up_s:
            return share


# ------------------------------------------------------------------------------------ kiln state
def function_state(client, name):
    st = sp.node_status(client)
    snap = next((s for s in st.get("snapshots", []) if s["function"] == name), None)
    insts = [i for i in st.get("instances", []) if i["function"] == name]
    return st, snap, insts


def wait_fresh(client, name, standby_runtime, after_revision, timeout_s=300):
    """Waits until the function's snapshot of a revision newer than `after_revision` is ready
    with every instance its demand asks to make ahead (spare forks, standbys) ready, no instance
    of an older revision is left, and the runtime-generic standby (if the runtime has one) is
    ready. Returns the snapshot."""
    deadline = time.time() + timeout_s
    while True:
        st, snap, insts = function_state(client, name)
        made_ahead = snap is not None and (snap["kind"].startswith("wasm") or (
            snap.get("standbys_making", 0) == 0
            and snap.get("standbys_ready", 0) >= max(1, snap.get("standbys_target", 0))))
        snap_ok = (snap is not None and snap["state"] == "ready" and snap["revision"] > after_revision
                   and made_ahead)
        if snap is not None and snap["state"] == "failed":
            raise RuntimeError(f"{name}: snapshot build failed: {snap.get('error')}")
        old = [i for i in insts if i["revision"] <= after_revision]
        standby_ok = standby_runtime is None or any(
            s["function"] == standby_runtime and s["kind"] == "runtime-standby" and s["state"] == "ready"
            for s in st.get("snapshots", []))
        if snap_ok and not old and standby_ok:
            return snap, insts
        if time.time() > deadline:
            raise RuntimeError(f"{name}: not fresh after {timeout_s} s: snapshot {snap}, "
                               f"{len(old)} old instances, standby ready {standby_ok}")
        time.sleep(0.05)


def new_revision(lam, client, name, standby_runtime):
    """A new revision of the function (new env value): kiln retires its instances and rebuilds
    the snapshot. Returns the ready snapshot and the new revision's instances (a spare fork)."""
    _, snap, _ = function_state(client, name)
    before = snap["revision"] if snap else 0
    lam.update_function_configuration(FunctionName=name,
                                      Environment={"Variables": {"BURST_ROUND": uuid.uuid4().hex}})
    snap, insts = wait_fresh(client, name, standby_runtime, before)
    time.sleep(0.3)  # the retired sandboxes' teardown, off the burst
    return snap, insts


# ------------------------------------------------------------------------------------ the burst
def burst(args, n, name):
    """n concurrent Invokes, released together. Each thread has its own connection, opened and
    used once before, and its request signed before the barrier, so that neither TCP set-up nor
    the client's signing (botocore, ~0.2 ms each and serialised by the GIL) is in the timing."""
    from botocore.awsrequest import AWSRequest
    clients = [sp.Client(args.kiln, args.data_dir) for _ in range(n)]
    for c in clients:
        c.wake(name)  # connects; a GetFunctionConfiguration, not an Invoke
    path = f"/2015-03-31/functions/{name}/invocations"
    signed = []
    for c in clients:
        req = AWSRequest(method="POST", url=c.url + path, data=b"{}",
                         headers={"X-Amz-Log-Type": "Tail"})
        c.auth.add_auth(req)
        signed.append(dict(req.headers.items()))
    barrier = threading.Barrier(n)
    results = [None] * n

    def one(i):
        c = clients[i]
        barrier.wait()
        t0 = time.perf_counter_ns()
        rec = {"t_send_ns": t0}
        try:
            c.conn.request("POST", path, body=b"{}", headers=signed[i])
            resp = c.conn.getresponse()
            data = resp.read()
            t1 = time.perf_counter_ns()
            rec.update(e2e_ms=(t1 - t0) / 1e6, t_done_ns=t1, status=resp.status)
            if resp.status != 200 or resp.getheader("X-Amz-Function-Error"):
                rec["error"] = f"{resp.status} {data[:200]!r}"
            tail = base64.b64decode(resp.getheader("X-Amz-Log-Result") or "").decode(errors="replace")
            rec.update(sp.parse_report(tail))
        except Exception as e:  # noqa: BLE001 - recorded and reported per request
            rec["error"] = repr(e)
        results[i] = rec

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        if c.conn:
            c.conn.close()
    t_first = min(r["t_send_ns"] for r in results)
    for r in results:
        r["send_offset_ms"] = (r.pop("t_send_ns") - t_first) / 1e6
        if "t_done_ns" in r:
            r["done_ms"] = (r.pop("t_done_ns") - t_first) / 1e6
    return results


def sequential(args, name, n=20):
    """n sequential Invokes on one connection: the single-request reference (after the bursts,
    so onto a warm instance)."""
    c = sp.Client(args.kiln, args.data_dir)
    out = []
    for _ in range(n):
        e2e, rep = c.invoke(name, {})
        out.append({"e2e_ms": e2e, **rep})
    return out


def deploy(lam, client, rt, name, code, standbys=0):
    """A new function `name` (none of that name before it, so no demand history), with a fixed
    floor of `standbys` (the `kiln:standbys` tag sets `KilnPrebake.Standbys`)."""
    runtime, handler, _ = RUNTIMES[rt]
    remove(lam, client, name)
    lam.create_function(FunctionName=name, Runtime=runtime, Handler=handler, MemorySize=128,
                        Timeout=30, Role="arn:aws:iam::000000000000:role/bench",
                        Code={"ZipFile": code},
                        Tags={"kiln:standbys": str(standbys)} if standbys else {})


def remove(lam, client, name):
    """Deletes the function and waits for its instances to go."""
    try:
        lam.delete_function(FunctionName=name)
    except lam.exceptions.ResourceNotFoundException:
        return
    deadline = time.time() + 60
    while function_state(client, name)[2] and time.time() < deadline:
        time.sleep(0.1)


def run_case(args, lam, client, rt, name, n, code, standbys=0):
    """A new function, then `args.rounds` rounds (one with a fixed floor of standbys) of: a new
    revision, the first burst, 1 s, the second burst. The first round's first burst meets a
    function with no history; the later rounds' first bursts meet one whose peak is known."""
    standby = RUNTIMES[rt][2]
    case = {"runtime": rt, "n": n, "standbys": standbys, "rounds": []}
    deploy(lam, client, rt, name, code, standbys)
    for round_no in range(1 if standbys else args.rounds):
        snap, spare = new_revision(lam, client, name, standby)
        quiet_pct = wait_round_quiet()
        _, snap, _ = function_state(client, name)
        rnd = {"snapshot": snap, "instances_before": len(spare), "others_before_pct": quiet_pct,
               "standby_memory_mb": (snap.get("memory_bytes", 0) + snap.get("standbys_memory_bytes", 0))
               / 2**20 if snap and not snap["kind"].startswith("wasm") else 0.0,
               "standbys_ready": snap.get("standbys_ready", 0) if snap else 0,
               "bursts": {}}
        for which in ("first", "second"):
            if which == "second":
                time.sleep(SECOND_BURST_GAP_S)
            load = core.loadavg()
            before = others_cpu()
            reqs = burst(args, n, name)
            others = sp.others_share(before, others_cpu())
            _, _, insts = function_state(client, name)
            rnd["bursts"][which] = {"requests": reqs, "loadavg": load, "others_pct": others,
                                    "instances_after": len(insts), "summary": summarize(reqs)}
            s = rnd["bursts"][which]["summary"]
            log(f"{rt:8} N={n:<3} round {round_no + 1} {which:6}: {rnd['standbys_ready']} made ahead; starts hot {s['hot']} warm {s['warm']} coldest {s['coldest']}, "
                f"reused {s['reused']}, errors {s['errors']}; e2e p50 {s['e2e_p50']:.1f} p99 {s['e2e_p99']:.1f} "
                f"ms; beyond Duration p99 {s['over_p99']:.1f} ms; Init p50 {s['init_p50']:.1f} "
                f"max {s['init_max']:.1f} ms; {len(insts)} instances after; others {others:.0f}%")
        case["rounds"].append(rnd)
    # Pooled over the rounds: the rows of the report.
    rounds = case["rounds"]
    rows = ([(f"first, new function, Standbys {standbys}", rounds, "first")] if standbys else
            [("first, new function", rounds[:1], "first"),
             ("first, after a burst", rounds[1:], "first")])
    rows.append(("second", rounds, "second"))
    case["bursts"] = []
    for label, chosen, which in rows:
        if not chosen:
            continue
        bursts = [r["bursts"][which] for r in chosen]
        reqs = [q for b in bursts for q in b["requests"]]
        case["bursts"].append({"burst": label, "summary": summarize(reqs), "bursts": len(bursts),
                               "made_ahead": max(r["standbys_ready"] for r in chosen),
                               "standby_memory_mb": max(r["standby_memory_mb"] for r in chosen),
                               "others_pct": max(b["others_pct"] for b in bursts)})
    return case


def idle_phase(args, lam, client, ready, n=16):
    """Per runtime a new function and a burst of n onto it (its peak), then `args.idle` seconds
    with no request to any of them (past kiln's idle TTL: their instances are reaped), then the
    same burst again onto each, once what its demand asks is made ahead again."""
    names = {}
    for rt, (name, code) in ready.items():
        iname = f"{name}-idle"
        deploy(lam, client, rt, iname, code)
        new_revision(lam, client, iname, RUNTIMES[rt][2])
        burst(args, n, iname)
        names[rt] = iname
    log(f"idle for {args.idle:.0f} s")
    time.sleep(args.idle)
    rows = []
    for rt, iname in names.items():
        _, snap, insts = function_state(client, iname)
        instances_left = len(insts)
        snap, _ = wait_fresh(client, iname, RUNTIMES[rt][2], snap["revision"] - 1)
        quiet_pct = wait_round_quiet()
        before = others_cpu()
        reqs = burst(args, n, iname)
        others = sp.others_share(before, others_cpu())
        s = summarize(reqs)
        made = snap.get("standbys_ready", 0) if not snap["kind"].startswith("wasm") else 0
        mem = (snap.get("memory_bytes", 0) + snap.get("standbys_memory_bytes", 0)) / 2**20 \
            if not snap["kind"].startswith("wasm") else 0.0
        log(f"{rt:8} N={n:<3} after {args.idle:.0f} s idle: {instances_left} instances left, {made} made ahead; "
            f"starts hot {s['hot']} warm {s['warm']} coldest {s['coldest']}, reused {s['reused']}; "
            f"e2e p50 {s['e2e_p50']:.1f} p99 {s['e2e_p99']:.1f} ms")
        rows.append({"runtime": rt, "n": n, "instances_left": instances_left, "made_ahead": made,
                     "standby_memory_mb": mem, "summary": s, "requests": reqs,
                     "others_pct": max(others, quiet_pct)})
        remove(lam, client, iname)
    return rows


# ------------------------------------------------------------------------------------ statistics
def pct(values, q):
    return float(np.percentile(values, q, method="inverted_cdf")) if len(values) else float("nan")


def summarize(reqs):
    ok = [r for r in reqs if "error" not in r]
    starts = [r for r in ok if "init_ms" in r]
    paths = [r.get("start_path", "?") for r in starts]
    e2e = [r["e2e_ms"] for r in ok]
    over = [r["e2e_ms"] - r["duration_ms"] for r in ok if "duration_ms" in r]
    init = [r["init_ms"] for r in starts]
    return {
        "requests": len(reqs), "errors": len(reqs) - len(ok), "starts": len(starts),
        "hot": paths.count("hot"), "warm": paths.count("warm"), "coldest": paths.count("coldest"),
        "other_paths": len(paths) - paths.count("hot") - paths.count("warm") - paths.count("coldest"),
        "reused": len(ok) - len(starts),
        "e2e_p50": pct(e2e, 50), "e2e_p99": pct(e2e, 99), "e2e_max": max(e2e, default=float("nan")),
        "over_p50": pct(over, 50), "over_p99": pct(over, 99), "over_max": max(over, default=float("nan")),
        "init_p50": pct(init, 50), "init_max": max(init, default=float("nan")),
        "send_spread_ms": max((r["send_offset_ms"] for r in reqs), default=0.0),
        "first_error": next((r["error"] for r in reqs if "error" in r), None),
    }


def targets(n, s):
    """The targets that apply to one row, each with whether it was met."""
    checks = []
    share = s["hot"] / s["starts"] if s["starts"] else 1.0
    if n <= 16:
        checks.append(("every start hot", s["starts"] == s["hot"] and s["errors"] == 0))
    else:
        checks.append((f"≥ {TARGET_HOT_SHARE_64:.0%} of starts hot ({share:.0%})",
                       share >= TARGET_HOT_SHARE_64 and s["errors"] == 0))
    checks.append((f"p99 beyond Duration ≤ {TARGET_OVERHEAD_P99_MS:.0f} ms",
                   s["over_p99"] <= TARGET_OVERHEAD_P99_MS))
    return checks


# ------------------------------------------------------------------------------------ report
def fmt(v, digits=1):
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


def write_report(out, meta, cases, skipped, sequential_ref, idle_rows):
    out.mkdir(parents=True, exist_ok=True)
    (out / "burst.json").write_text(json.dumps({"meta": meta, "cases": cases, "skipped": skipped,
                                                "sequential": sequential_ref, "idle": idle_rows},
                                               indent=1))
    m, rounds = meta["machine"], meta["rounds"]
    lines = [
        "# Bursts of concurrent first requests",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}  ",
        f"Commit: `{m['git_commit']}`" + (f" (the working tree also had changes to: {', '.join(m['git_modified'])})"
                                          if m["git_modified"] else "") + "  ",
        f"Machine: {m['cpu_model']}, {m['cpus']} CPUs ({m['hypervisor']} hypervisor), "
        f"{m['memory_gib']} GiB, Linux {m['kernel']}; Node {m['node']}, {m['python']}  ",
        f"Load average: {' '.join(meta['loadavg_start'])} at start, {' '.join(meta['loadavg_end'])} at end; "
        f"other tenants took {meta['quiet']['others_pct']:.0f}% of the machine in the 5 s before "
        f"measuring{'' if meta['quiet']['quiet'] else ' (not quiet: measured anyway)'}  ",
        f"kiln: `{meta['kiln_args']}` (otherwise its defaults: one runtime standby per runtime, "
        "`KilnPrebake` mode `deploy`, instances made ahead sized by demand, `--standby-window 600`, "
        "`--max-standbys 64`)",
        "",
        f"Each (runtime, N) deploys a new function and makes {rounds} rounds. A round is a new "
        "revision (UpdateFunctionConfiguration with a new environment value; no instance of the "
        "function is left), a wait until its snapshot and every instance its demand asks kiln to "
        "make ahead (spare forks, standbys) are ready, then the *first* burst of N Invokes of a "
        "NoOp function (`LogType=Tail`) and, 1 s after it ended, the *second*. *first, new "
        "function*: round 1, a function with no history (kiln makes one instance ahead); *first, "
        "after a burst*: the later rounds, where the function's recent peak (N) sizes what is made "
        "ahead; *Standbys N*: a new function deployed with a fixed floor of N "
        "(`KilnPrebake.Standbys`, here by the `kiln:standbys` tag), one round. A row pools its "
        "bursts (their number in parentheses): counts over all their requests, nearest-rank "
        "percentiles over them too. *Made ahead*: instances ready before the burst (the most of "
        "the row's rounds), with the memory they held with the snapshot. Each burst is "
        "sent from N threads (own connections, opened before, requests signed before) released by a "
        "barrier. *Starts* are requests whose "
        "REPORT has an `Init Duration`, by its `Start Path`; *reused* requests had none (served by an "
        "instance that existed, after waiting for it if it was busy). *Beyond Duration* is the "
        "client's latency minus the REPORT's `Duration`. Times in ms. *Others*: the largest share of "
        "the machine that processes outside the benchmark took (their own CPU time) during one of "
        "the row's bursts; each round starts after a 1 s window in which they took at most 10% "
        "(or after waiting 5 s for one).",
        "",
        f"Targets: {TARGETS_TEXT}. *Every start hot* is checked for N ≤ 16, the 90% for N = 64; "
        "a request that failed fails the start target.",
        "",
        "| runtime | N | burst (bursts pooled) | made ahead (MB) | starts hot / warm / coldest | reused | errors | e2e p50 / p99 / max "
        "| beyond Duration p50 / p99 / max | Init p50 / max | others % | targets: met? |",
        "|---|---:|---|---|---|---:|---:|---|---|---|---:|---|",
    ]
    for case in cases:
        for b in case["bursts"]:
            s = b["summary"]
            verdicts = "; ".join(f"{what}: {'yes' if ok else '**no**'}" for what, ok in targets(case["n"], s))
            lines.append(
                f"| {case['runtime']} | {case['n']} | {b['burst']} ({b['bursts']}) "
                f"| {b['made_ahead']} ({b['standby_memory_mb']:.0f}) | {s['hot']} / {s['warm']} / {s['coldest']}"
                + (f" (+{s['other_paths']} other)" if s["other_paths"] else "")
                + f" | {s['reused']} | {s['errors']} | {fmt(s['e2e_p50'])} / {fmt(s['e2e_p99'])} / "
                f"{fmt(s['e2e_max'])} | {fmt(s['over_p50'])} / {fmt(s['over_p99'])} / {fmt(s['over_max'])} "
                f"| {fmt(s['init_p50'])} / {fmt(s['init_max'])} | {b['others_pct']:.0f} | {verdicts} |")
    spread = max((r["bursts"][w]["summary"]["send_spread_ms"] for c in cases for r in c["rounds"]
                  for w in r["bursts"]), default=0.0)
    lines += ["", f"The N sends of a burst left the client within {spread:.1f} ms of each other "
              "(the largest spread of any burst).", ""]
    if idle_rows:
        lines += [f"After {meta['idle_s']:.0f} s idle (a burst of N onto a new function, then no "
                  "request for that long, past the idle TTL, then the same burst again, once what "
                  "the function's demand asks is made ahead again):", "",
                  "| runtime | N | instances left | made ahead (MB) | starts hot / warm / coldest | reused "
                  "| errors | e2e p50 / p99 / max | beyond Duration p50 / p99 / max | Init p50 / max | others % "
                  "| targets: met? |",
                  "|---|---:|---:|---|---|---:|---:|---|---|---|---:|---|"]
        for r in idle_rows:
            s = r["summary"]
            verdicts = "; ".join(f"{what}: {'yes' if ok else '**no**'}" for what, ok in targets(r["n"], s))
            lines.append(
                f"| {r['runtime']} | {r['n']} | {r['instances_left']} | {r['made_ahead']} "
                f"({r['standby_memory_mb']:.0f}) | {s['hot']} / {s['warm']} / {s['coldest']} | {s['reused']} "
                f"| {s['errors']} | {fmt(s['e2e_p50'])} / {fmt(s['e2e_p99'])} / {fmt(s['e2e_max'])} "
                f"| {fmt(s['over_p50'])} / {fmt(s['over_p99'])} / {fmt(s['over_max'])} "
                f"| {fmt(s['init_p50'])} / {fmt(s['init_max'])} | {r['others_pct']:.0f} | {verdicts} |")
        lines.append("")
    lines += ["Single requests for scale (20 sequential Invokes on one connection onto a warm "
              "instance, after the bursts):", "", "| runtime | e2e p50 | Duration p50 |", "|---|---:|---:|"]
    for rt, reqs in sequential_ref.items():
        lines.append(f"| {rt} | {fmt(pct([r['e2e_ms'] for r in reqs], 50), 2)} | "
                     f"{fmt(pct([r.get('duration_ms', float('nan')) for r in reqs], 50), 2)} |")
    errors = [(c["runtime"], c["n"], b["burst"], b["summary"]["first_error"])
              for c in cases for b in c["bursts"] if b["summary"]["first_error"]]
    if errors:
        lines += ["", "Errors (the first of each row):", ""]
        lines += [f"- {rt} N={n} {which}: `{err}`" for rt, n, which, err in errors]
    if skipped:
        lines += ["", "Not measured:", ""] + [f"- {rt}: {why}" for rt, why in skipped.items()]
    lines += ["", "Every request (latency, send offset, REPORT fields) of every round is in `burst.json`.", ""]
    (out / "burst.md").write_text("\n".join(lines))


# ------------------------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="kiln's URL")
    ap.add_argument("--pid", type=int, required=True, help="kiln's pid")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--kiln-args", default="")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bench/burst/run.sh")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, help="rounds per runtime and N (default 3; --quick 2)")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds of idleness before the idle phase's second burst (0: no idle phase)")
    args = ap.parse_args()
    work, out = Path(args.work), Path(args.out)
    sizes = QUICK_SIZES if args.quick else SIZES
    args.rounds = args.rounds or (2 if args.quick else 3)
    kiln = core.Kiln({"url": args.kiln, "pid": args.pid, "data_dir": args.data_dir})
    lam = kiln.client()
    client = sp.Client(args.kiln, args.data_dir)

    meta = {"command": args.command, "kiln_args": args.kiln_args.strip(), "sizes": sizes,
            "rounds": args.rounds,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": core.machine_info(types.SimpleNamespace(profile="release")),
            "loadavg_start": core.loadavg()}
    skipped, ready = {}, {}
    for rt in args.runtimes.split(","):
        code, why = package(rt, work)
        if code is None:
            skipped[rt] = why
            log(f"skipping {rt}: {why}")
            continue
        runtime, handler, _ = RUNTIMES[rt]
        name = f"burst-{rt}"
        try:
            lam.delete_function(FunctionName=name)
        except lam.exceptions.ResourceNotFoundException:
            pass
        lam.create_function(FunctionName=name, Runtime=runtime, Handler=handler, MemorySize=128,
                            Timeout=30, Role="arn:aws:iam::000000000000:role/bench",
                            Code={"ZipFile": code})
        r = lam.invoke(FunctionName=name, Payload=b"{}")
        body = r["Payload"].read()
        if r["StatusCode"] != 200 or r.get("FunctionError"):
            skipped[rt] = f"its NoOp does not answer: {r['StatusCode']} {body[:200]!r}"
            log(f"skipping {rt}: {skipped[rt]}")
            lam.delete_function(FunctionName=name)
            continue
        ready[rt] = (name, code)
        log(f"deployed {name} ({runtime})")

    cfg = {"quiet_wait_s": float(os.environ.get("BENCH_QUIET_WAIT_S", "10" if args.quick else "30")),
           "max_others_pct": 10.0}
    meta["quiet"] = core.wait_for_quiet(cfg)
    cases, seq = [], {}
    for rt, (name, code) in ready.items():
        for n in sizes:
            cases.append(run_case(args, lam, client, rt, name, n, code))
            if rt != "wasm":
                cases.append(run_case(args, lam, client, rt, name, n, code, standbys=n))
        seq[rt] = sequential(args, name)
        # Retire this function's instances before the next runtime's bursts.
        remove(lam, client, name)
    idle_rows = []
    if args.idle > 0:
        meta["idle_s"] = args.idle
        idle_rows = idle_phase(args, lam, client, ready)
    meta["loadavg_end"] = core.loadavg()
    write_report(out, meta, cases, skipped, seq, idle_rows)
    log(f"wrote {out / 'burst.md'}")


if __name__ == "__main__":
    main()
