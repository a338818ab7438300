#!/usr/bin/env python3
"""Driver of bench/startpaths/run.sh: kiln's start paths, measured as the Prebaking/SEUSS thesis
measured its snapshot methods (NoOp, Markdown and Big; startup time and first-request service
time; medians with bootstrap 95% CIs; Mann-Whitney U between paths).

run.sh owns every process; this script only talks to the kiln it is handed (--kiln URL, data
dir). Phases, each one call:

  deploy   create the functions of every case (one per runtime × function × path)
  latency  n cold starts per case (kiln started with --idle-ttl 0), each followed by 5 warm
           invocations on the same instance; plus the client's floor (warm NoOp invokes).
           --paths picks the paths one kiln measures: run.sh runs the warm cases on a kiln with
           runtime standbys and the others on one without, so that `coldest` stays coldest
  memory   K concurrent instances per case held idle (kiln with a long idle TTL); USS/PSS
  report   statistics, bench/results/startpaths.{md,json,png}
"""

import argparse
import base64
import concurrent.futures
import datetime
import hashlib
import http.client
import io
import json
import os
import re
import socket
import sys
import time
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import bench as core  # noqa: E402  (bench/bench.py: cpu accounting, machine facts)
from cases import (  # noqa: E402  (the case table, shared with report.py)
    FUNCTIONS, PATHS, RUNTIMES, STEADY_GAP_S, WARM_AFTER_COLD, cases, fname,
)


def log(msg):
    print(f"[startpaths {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------ the client
class Client:
    """A SigV4-signing client on one persistent HTTP/1.1 connection (TCP_NODELAY).

    botocore signs (the same signer boto3 uses); http.client sends. That keeps boto3's request
    building and response parsing (~1 ms per call) out of the end-to-end numbers, and lets the
    driver send kiln's extension fields, which boto3's parameter validation would refuse.
    """

    def __init__(self, url, data_dir):
        from botocore.auth import SigV4Auth
        from botocore.credentials import Credentials
        creds = json.loads((Path(data_dir) / "credentials.json").read_text())
        self.url = url.rstrip("/")
        u = urlparse(self.url)
        self.host, self.port = u.hostname, u.port
        self.auth = SigV4Auth(Credentials(creds["accessKeyId"], creds["secretAccessKey"]),
                              "lambda", creds["region"])
        self.conn = None

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method, path, body=b"", headers=None):
        from botocore.awsrequest import AWSRequest
        req = AWSRequest(method=method, url=self.url + path, data=body, headers=headers or {})
        self.auth.add_auth(req)
        if self.conn is None:
            self._connect()
        try:
            self.conn.request(method, path, body=body, headers=dict(req.headers.items()))
            resp = self.conn.getresponse()
            data = resp.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = None
            raise
        return resp.status, resp, data

    def json(self, method, path, doc=None):
        body = json.dumps(doc).encode() if doc is not None else b""
        status, _, data = self.request(method, path, body,
                                       {"Content-Type": "application/json"} if doc is not None else {})
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data else None

    def invoke(self, name, event):
        """One Invoke with LogType=Tail, timed from before signing to the last byte read."""
        body = json.dumps(event).encode()
        t0 = time.perf_counter_ns()
        status, resp, data = self.request("POST", f"/2015-03-31/functions/{name}/invocations", body,
                                          {"X-Amz-Log-Type": "Tail"})
        t1 = time.perf_counter_ns()
        if status != 200 or resp.getheader("X-Amz-Function-Error"):
            raise RuntimeError(f"invoke {name}: {status} {data[:300]!r}")
        tail = base64.b64decode(resp.getheader("X-Amz-Log-Result") or "").decode(errors="replace")
        return (t1 - t0) / 1e6, parse_report(tail)

    def wake(self, name):
        """A GetFunctionConfiguration of `name`: it runs kiln's HTTP, SigV4 and registry code, so
        that the Invoke right after it does not pay for a machine that has been idle."""
        status, _, data = self.request("GET", f"/2015-03-31/functions/{name}/configuration")
        if status != 200:
            raise RuntimeError(f"wake {name}: {status} {data[:300]!r}")

    def sign_only(self, n):
        """The client's SigV4 signing cost alone (ms per request), part of every end-to-end."""
        from botocore.awsrequest import AWSRequest
        out = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            req = AWSRequest(method="POST", url=self.url + "/2015-03-31/functions/x/invocations",
                             data=b"{}", headers={"X-Amz-Log-Type": "Tail"})
            self.auth.add_auth(req)
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    def status(self):
        return self.json("GET", "/kiln/v1/status")


REPORT_FIELDS = {"Duration": "duration_ms", "Init Duration": "init_ms"}


def parse_report(tail):
    line = next((l for l in tail.splitlines() if l.startswith("REPORT")), "")
    out = {}
    for key, value in re.findall(r"\t([A-Za-z ]+): ([^\t]+)", line):
        if key in REPORT_FIELDS:
            out[REPORT_FIELDS[key]] = float(value.split()[0])
        elif key == "Start Path":
            out["start_path"] = value.strip()
    return out


def node_status(client):
    doc = client.status()
    return doc.get("node", doc)


# ------------------------------------------------------------------------------------ deploy
def zip_dir(path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for p in sorted(Path(path).rglob("*")):
            if p.is_file() and p.name != ".inputs":
                z.write(p, p.relative_to(path))
    return buf.getvalue()


def deploy(args, client):
    packages = json.loads((Path(args.packages) / "packages.json").read_text())
    existing = {f["FunctionName"] for f in client.json("GET", "/2015-03-31/functions/")["Functions"]}
    for rt, fn, path in cases():
        name = fname(rt, fn, path)
        if name in existing:
            client.json("DELETE", f"/2015-03-31/functions/{name}")
        memory, timeout = FUNCTIONS[fn]
        code = zip_dir(packages[f"{rt}-{fn}"]["dir"])
        client.json("POST", "/2015-03-31/functions", {
            "FunctionName": name, "Runtime": RUNTIMES[rt]["runtime"], "Handler": RUNTIMES[rt]["handler"],
            "Role": "arn:aws:iam::000000000000:role/kiln-function", "MemorySize": memory,
            "Timeout": timeout, "Code": {"ZipFile": base64.b64encode(code).decode()},
            "KilnPrebake": PATHS[(rt, path)],
        })
        log(f"deployed {name} ({len(code) / 1e6:.1f} MB zip, KilnPrebake {PATHS[(rt, path)]})")
    wait_snapshots(client)


def wait_snapshots(client, timeout_s=600):
    """Waits until every prebaked function's snapshot is ready (they build at deploy or start)."""
    wanted = {fname(rt, fn, p) for rt, fn, p in cases() if PATHS[(rt, p)].get("Mode") == "deploy"}
    deadline = time.time() + timeout_s
    while True:
        snaps = {s["function"]: s for s in node_status(client).get("snapshots", [])}
        failed = [f"{n}: {snaps[n].get('error')}" for n in wanted
                  if n in snaps and snaps[n]["state"] == "failed"]
        if failed:
            raise RuntimeError("snapshot build failed: " + "; ".join(failed))
        if all(n in snaps and snaps[n]["state"] == "ready" for n in wanted):
            return {n: snaps[n] for n in wanted}
        if time.time() > deadline:
            raise RuntimeError(f"snapshots not ready after {timeout_s} s: {snaps}")
        time.sleep(0.2)


def wait_standby(client, runtime, timeout_s=120):
    """Waits for a runtime-generic standby of `runtime` (the warm path) to be ready."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if any(s["function"] == runtime and s["kind"] == "runtime-standby" and s["state"] == "ready"
               for s in node_status(client).get("snapshots", [])):
            return
        time.sleep(0.02)
    raise RuntimeError(f"no standby of {runtime} was ready after {timeout_s} s")


def wait_snapshot(client, name, timeout_s=120):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        snap = next((s for s in node_status(client).get("snapshots", []) if s["function"] == name), None)
        # A fork server is whole with its spare fork, made ahead of demand after each cold start.
        if snap and snap["state"] == "ready" and (snap["kind"] != "fork-server" or snap.get("spare_ready")):
            return snap
        time.sleep(0.02)
    raise RuntimeError(f"{name}: the snapshot was not ready again after {timeout_s} s")


# ------------------------------------------------------------------------------------ latency
def wait_no_instances(client, name, timeout_s=10):
    """With --idle-ttl 0 kiln reaps an idle instance at its next reaper tick (every 0.5 s)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not any(i["function"] == name for i in node_status(client)["instances"]):
            return True
        time.sleep(0.05)
    return False


def others_cpu():
    """CPU ticks of every process outside this benchmark's tree (run.sh and its descendants,
    kiln's sandboxes included) and other than the host's init, which inherits the killed
    sandboxes' orphans. core.interference() counts busy minus ours, which here would count the
    sandboxes' CPU as other tenants': a killed sandbox's processes are never reaped inside our
    tree, so their time never reaches it."""
    ours = set(core.cpu_account()["ours"])
    ticks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours or entry == "1":
            continue
        try:
            text = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        rest = text[text.rfind(")") + 2:].split()
        ticks[int(entry)] = (int(rest[19]), sum(int(x) for x in rest[11:15]))  # starttime, ticks
    return {"t": time.time(), "ticks": ticks}


def others_share(before, after):
    """Share of the machine (all CPUs) that processes outside the benchmark took in between."""
    total = 0
    for pid, (start, t) in after["ticks"].items():
        prev = before["ticks"].get(pid)
        total += t - prev[1] if prev and prev[0] == start else t
    capacity = (after["t"] - before["t"]) * core.CLK_TCK * os.cpu_count()
    return 100 * max(0, total) / capacity


def latency(args, client):
    out = {"cases": {}, "floor": {}, "paths": args.paths}
    for rt, fn, path in cases(args.paths):
        out["cases"][f"{rt}/{fn}/{path}"] = {"runtime": rt, "function": fn, "path": path,
                                              "function_name": fname(rt, fn, path), "samples": []}
    snaps = wait_snapshots(client)
    out["snapshots"] = snaps
    # The client's floor: warm NoOp invokes, after a warm-up, on one instance.
    for rt in RUNTIMES:
        name = fname(rt, "noop", "coldest")
        for _ in range(50):
            client.invoke(name, {})
        out["floor"][rt] = [client.invoke(name, {})[0] for _ in range(args.floor_n)]
        log(f"floor {rt}: warm NoOp end-to-end p50 {np.median(out['floor'][rt]):.3f} ms")
    out["sign_ms"] = client.sign_only(args.floor_n)
    out["idle_probe"] = idle_probe(client, fname("wasm", "noop", "hot"), args.floor_n, args.settle_ms)
    order = cases(args.paths)
    before = core.cpu_account()
    others_before = others_cpu()
    load_start = core.loadavg()
    for i in range(args.n):
        # Rotate the order per round so drift and other tenants hit every case alike.
        rotated = order[i % len(order):] + order[:i % len(order)]
        for rt, fn, path in rotated:
            name = fname(rt, fn, path)
            if not wait_no_instances(client, name):
                raise RuntimeError(f"{name}: an idle instance was not reaped (is --idle-ttl 0?)")
            if path == "hot":
                # A standby instance (Node) or a spare fork (Python) is taken by the cold start
                # and made again behind it.
                wait_snapshot(client, name)
            elif path == "warm":
                # So is a runtime standby.
                wait_standby(client, RUNTIMES[rt]["runtime"])
            time.sleep(args.settle_ms / 1000)  # the reaped sandbox's teardown
            client.wake(name)
            e2e, rep = client.invoke(name, {})
            sample = {"e2e_ms": e2e, **rep, "warm": []}
            for _ in range(WARM_AFTER_COLD):
                time.sleep(STEADY_GAP_S)
                client.wake(name)
                w_e2e, w_rep = client.invoke(name, {})
                if "init_ms" in w_rep:  # reaped in between: not the same instance any more
                    break
                sample["warm"].append({"e2e_ms": w_e2e, "duration_ms": w_rep["duration_ms"]})
            out["cases"][f"{rt}/{fn}/{path}"]["samples"].append(sample)
        if (i + 1) % max(1, args.n // 10) == 0:
            log(f"round {i + 1}/{args.n}")
    out["interference"] = core.interference(before, core.cpu_account())
    out["interference"]["others_direct_pct"] = others_share(others_before, others_cpu())
    out["loadavg"] = {"start": load_start, "end": core.loadavg()}
    try:
        out["cgroup_migration_ms"] = cgroup_migration_probe()
    except OSError as e:  # not fatal: the probe only explains the hot path's Init Duration
        log(f"cgroup migration probe failed: {e}")
    return out


# ------------------------------------------------------------------------------------ probe
def idle_probe(client, wasm_name, n, idle_ms):
    """The machine's idle penalty: a request that follows idle time runs slower, everywhere.

    Every wasm request is a fresh instance of the pre-initialised module (a cold start on the
    hot path), so the same Invoke is timed back to back, after `idle_ms` of idle time, and after
    idle time and a wake request. A TCP echo between two processes on loopback (no kiln) is
    timed back to back and after the same idle time: the penalty of the machine alone.
    """
    out = {"idle_ms": idle_ms, "wasm": {"back_to_back": [], "after_idle": [], "after_idle_wake": []},
           "echo_us": {"back_to_back": [], "after_idle": []}}
    for _ in range(50):
        client.invoke(wasm_name, {})
    wasm = out["wasm"]
    for _ in range(n):
        wasm["back_to_back"].append(client.invoke(wasm_name, {})[0])
    for _ in range(n // 3):
        time.sleep(idle_ms / 1000)
        wasm["after_idle"].append(client.invoke(wasm_name, {})[0])
        time.sleep(idle_ms / 1000)
        client.wake(wasm_name)
        wasm["after_idle_wake"].append(client.invoke(wasm_name, {})[0])
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    address = srv.getsockname()
    pid = os.fork()
    if pid == 0:  # the echo server: a process of its own, as kiln is
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(4096):
            conn.sendall(data)
        os._exit(0)
    srv.close()
    try:
        with socket.create_connection(address) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for gap, series in ((0, "back_to_back"), (idle_ms / 1000, "after_idle")):
                for i in range(n if gap == 0 else n // 3):
                    if gap:
                        time.sleep(gap)
                    t0 = time.perf_counter_ns()
                    conn.sendall(b"x" * 512)
                    conn.recv(4096)
                    if i or gap:  # the first round trip sets the connection up
                        out["echo_us"][series].append((time.perf_counter_ns() - t0) / 1e3)
    finally:
        os.waitpid(pid, 0)
    return out


def cgroup_migration_probe(reps=30):
    """What moving a process into fresh cgroups costs on this host, per controller, in the order
    kiln writes them (memory, pids, cpu on v1). The hot path moves each fork into its own cgroup
    (Cgroup::adopt) before it reports ready, so this is part of its Init Duration."""
    import subprocess
    v1 = os.path.isdir("/sys/fs/cgroup/memory")
    controllers = ["memory", "pids", "cpu"] if v1 else [""]
    out = {c or "unified": [] for c in controllers}
    for i in range(reps):
        proc = subprocess.Popen(["sleep", "30"])
        dirs = [f"/sys/fs/cgroup/{c}/kiln-startpaths-probe-{os.getpid()}-{i}".replace("//", "/")
                for c in controllers]
        try:
            for d in dirs:
                os.mkdir(d)
            for c, d in zip(controllers, dirs):
                t0 = time.perf_counter_ns()
                Path(d, "cgroup.procs").write_text(str(proc.pid))
                out[c or "unified"].append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            proc.kill()
            proc.wait()
            for d in dirs:
                for _ in range(100):
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.01)
        time.sleep(0.1)  # apart, as forks on the hot path are
    return out


# ------------------------------------------------------------------------------------ memory
def cgroup_root(data_dir):
    h = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]
    for base in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        if os.path.isdir(f"{base}/kiln-{h}"):
            return f"{base}/kiln-{h}"
    return None


def smaps(pid):
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    f = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            f[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"rss_bytes": f.get("Rss", 0), "pss_bytes": f.get("Pss", 0),
            "uss_bytes": f.get("Private_Clean", 0) + f.get("Private_Dirty", 0)}


def runtime_pids(cgroup_dir, kiln_bin):
    """The runtime processes of an instance's cgroup: all but kiln's own helpers (the sandbox
    helper and PID 1 are the kiln binary re-executed)."""
    try:
        pids = Path(cgroup_dir, "cgroup.procs").read_text().split()
    except OSError:
        return [], []
    runtime, helpers = [], []
    for pid in pids:
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            continue
        (helpers if exe == os.path.realpath(kiln_bin) else runtime).append(int(pid))
    return runtime, helpers


def memory(args, client):
    root = cgroup_root(args.data_dir)
    snaps = wait_snapshots(client)
    out = {"k": args.k, "cgroup_root": root, "cases": {}}
    for rt, fn, path in cases(args.paths):
        name = fname(rt, fn, path)
        if rt == "wasm":
            continue  # nothing stays resident between wasm requests: no idle instance to measure
        def hold(c):
            try:
                return c.invoke(name, {"hold_ms": 3000})
            except RuntimeError as e:  # recorded and reported; the other instances still count
                return None, {"error": str(e)}

        with concurrent.futures.ThreadPoolExecutor(args.k) as pool:
            clients = [Client(args.kiln, args.data_dir) for _ in range(args.k)]
            results = list(pool.map(hold, clients))
        paths = [r[1].get("start_path") for r in results if "error" not in r[1]]
        errors = [r[1]["error"] for r in results if "error" in r[1]]
        if errors:
            log(f"memory {name}: {len(errors)} of {args.k} invocations failed, e.g. {errors[0]}")
        time.sleep(1.0)  # let the instances settle idle
        st = node_status(client)
        rows = []
        for inst in st["instances"]:
            if inst["function"] != name or inst["state"] != "idle":
                continue
            row = {"id": inst["id"], "start_path": inst["start_path"], "status_sharing": inst.get("sharing")}
            runtime, helpers = runtime_pids(f"{root}/i{inst['id']}", args.kiln_bin) if root else ([], [])
            procs = [m for m in (smaps(p) for p in runtime) if m]
            row["runtime_pids"] = runtime
            row["runtime"] = {k: sum(m[k] for m in procs) for k in ("rss_bytes", "pss_bytes", "uss_bytes")}
            hp = [m for m in (smaps(p) for p in helpers) if m]
            row["helpers"] = {k: sum(m[k] for m in hp) for k in ("rss_bytes", "pss_bytes", "uss_bytes")}
            rows.append(row)
        snap = next((s for s in st.get("snapshots", []) if s["function"] == name), None)
        out["cases"][f"{rt}/{fn}/{path}"] = {"instances": rows, "start_paths": paths, "snapshot": snap,
                                             "errors": errors}
        med = lambda k: np.median([r["runtime"][k] for r in rows]) / 2**20 if rows else float("nan")  # noqa: E731
        log(f"memory {name}: {len(rows)} idle instances, USS p50 {med('uss_bytes'):.1f} MiB, "
            f"PSS p50 {med('pss_bytes'):.1f} MiB")
        # Free the instances (and their booked memory) before the next case: a config update
        # retires them; the hot path's snapshot is rebuilt for the new revision.
        client.json("PUT", f"/2015-03-31/functions/{name}/configuration",
                    {"Description": f"memory phase done {time.time()}"})
        wait_snapshots(client)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["deploy", "latency", "memory", "report"])
    ap.add_argument("--kiln", help="kiln's URL")
    ap.add_argument("--data-dir")
    ap.add_argument("--kiln-bin")
    ap.add_argument("--packages", help="generate.py's output dir")
    ap.add_argument("--work", required=True, help="where phases leave their raw results")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--k", type=int, default=20, help="idle instances per case (memory phase)")
    ap.add_argument("--floor-n", type=int, default=300)
    ap.add_argument("--settle-ms", type=int, default=150)
    ap.add_argument("--out")
    ap.add_argument("--command", default="bench/startpaths/run.sh")
    ap.add_argument("--quiet-info", default="{}")
    ap.add_argument("--paths", type=lambda s: s.split(","), default=None,
                    help="comma-separated paths to measure (latency, memory); default all")
    ap.add_argument("--tag", default="", help="suffix of the raw result file (latency-TAG.json)")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.phase == "report":
        import report
        report.write(args, work)
        return
    client = Client(args.kiln, args.data_dir)
    if args.phase == "deploy":
        deploy(args, client)
    elif args.phase == "latency":
        res = latency(args, client)
        res["n"] = args.n
        (work / f"latency{'-' + args.tag if args.tag else ''}.json").write_text(json.dumps(res))
    elif args.phase == "memory":
        (work / "memory.json").write_text(json.dumps(memory(args, client)))


if __name__ == "__main__":
    main()
