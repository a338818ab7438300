#!/usr/bin/env python3
"""bench/beehive's helper and analysis (standard library only). run.sh owns every process.

  beehive.py image --out FILE          the request's image: a 1024×768 JPEG, deterministic
  beehive.py warmup-event --out FILE   kiln's warm-up event for the function: a payload 2.0
                                       POST /thumbnail of a small JPEG (the route changes nothing)
  beehive.py instances --function F    (kiln --json status on stdin) F's instances ready to serve
  beehive.py comment-form --url URL --archive PATH --mix FILE --form FILE --cookie FILE
                                       the Mezzanine load: a post's comment form as a browser posts
                                       it (hidden fields, CSRF cookie), N distinct comments, 3 GETs
                                       of the archive for each (loadgen --mix); the first comment's
                                       body and the cookie header for curl
  beehive.py zip --dir DIR --out FILE  DIR zipped without __pycache__ (the function's package)
  beehive.py poll --metrics URL --app NAME --out FILE   kiln's kiln_app_* gauges, every 100 ms
  beehive.py report --run DIR --out DIR …   reads run.sh's records, writes beehive.md and
                                       beehive-series.csv (per-second p99 of every configuration)

Definitions: DEFINITIONS below (also written into the report).
"""

import argparse
import csv
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

DEFINITIONS = """\
Issue 21 §9, scaled for quick runs where said. Percentiles are nearest-rank, as loadgen's.
- before: arrivals in [skip, onset), skip = min(5 s, onset/3); after: arrivals in [onset, end).
  Throughput is requests per second by arrival (a closed loop: as many complete as arrive).
- reference p99: the p99 of the arrivals of the run's last R seconds (R = 60 s in the full run,
  (duration − onset)/2 in a quick one).
- stable at t: every 250 ms window of arrivals from t on (a grid from the onset) has a p99 at most
  1.25 × the reference p99; time to stable is t − onset (0: never unstable). Windows with no
  arrival are skipped (their requests' latency counts in the window they arrived in). Also given
  with 1 s windows, which a handful of requests per 250 ms makes less noisy.
- max latency in the burst's first second: the largest latency of the arrivals in [onset, onset + 1 s).
- (windows over): the share of the 250 ms windows after the onset over the bound. *Settled* (ours,
  not the issue's): the first window from which 1 s of windows are all within the bound: the
  onset's transient, blind to a late outlier that moves time to stable to the end of the run.
"""

# The paper's numbers (BeeHive §5.2, §5.3), as quoted in issue 21.
PAPER = {
    "stable_warm_ms": 632.78,  # OpenWhisk; 668.56 on Lambda
    "stable_cold_s": 9.33,  # OpenWhisk; 16.33 on Lambda
    "p99_vs_server": 0.150,  # +15.0% (OpenWhisk), +31.0% (Lambda)
    "peak_loss": -0.0714,  # pybbs on the same server; about none for thumbnail
}
# List prices for the cost model (Table 3, Fig. 9): us-east-1, Linux, on demand.
PRICES = {
    "source": "AWS's published us-east-1 list prices: Lambda x86, EC2 on-demand Linux, Fargate Linux/x86",
    "gb_s": 0.0000166667,
    "request": 0.20e-6,
    "replica": "t3.small (2 vCPU burstable, 2 GiB)",
    "replica_h": 0.0208,
    "fargate_vcpu_h": 0.04048,
    "fargate_gb_h": 0.004445,
}
FUNCTION_GB = 0.5  # the function is deployed with --memory 512
FARGATE_VCPU, FARGATE_GB = 0.5, 1.0  # a Fargate task the size of the monolith's quota
TARGETS = {
    "stable_warm_ms": 300.0,
    "stable_cold_s": 1.0,
    "p99_vs_server": 0.10,
    "peak_vs_direct": 0.97,
    "first_second_vs_p99": 2.0,
}
WARMUPS = {
    "route": "a `POST /thumbnail` of a 256×192 JPEG (the route changes nothing), so forks start with "
             "Pillow's decoders and encoders loaded",
    "health": "a `GET /health` (Flask imported, Pillow's plugins not loaded until a fork's first request)",
}
LABELS = {
    "direct": "monolith alone (direct, no gateway)",
    "gateway-off": "gateway, offload off (ratio 0)",
    "spill-cold": "kiln spill, cold (no --min-warm)",
    "spill-warm": "kiln spill, warm (--min-warm 4)",
    "ratio-0.5": "kiln ratio 0.5",
}


# ------------------------------------------------------------------------------------ helpers
def pct(values, q):
    if not values:
        return None
    s = sorted(values)
    rank = math.ceil(q / 100 * len(s))
    return s[min(max(rank, 1), len(s)) - 1]


def ms(ns):
    return None if ns is None else ns / 1e6


def fmt(v, digits=1, unit=""):
    if v is None:
        return "–"
    return f"{v:.{digits}f}{unit}"


def read_records(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


# ------------------------------------------------------------------------------------ image
def make_image(w, h):
    import random

    from PIL import Image, ImageDraw

    rnd = random.Random(21)
    im = Image.merge("RGB", (Image.linear_gradient("L").resize((w, h)),
                             Image.radial_gradient("L").resize((w, h)),
                             Image.effect_noise((w, h), 64)))
    draw = ImageDraw.Draw(im)
    for _ in range(200):
        x, y = rnd.randrange(w), rnd.randrange(h)
        draw.ellipse((x, y, x + rnd.randrange(10, 200), y + rnd.randrange(10, 200)),
                     fill=(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def cmd_image(args):
    Path(args.out).write_bytes(make_image(1024, 768))


def cmd_warmup_event(args):
    import base64

    event = {
        "version": "2.0", "rawPath": "/thumbnail", "rawQueryString": "",
        "headers": {"content-type": "image/jpeg", "host": "localhost"},
        "requestContext": {"http": {"method": "POST", "path": "/thumbnail"}},
        "body": base64.b64encode(make_image(256, 192)).decode(), "isBase64Encoded": True,
    }
    Path(args.out).write_text(json.dumps(event))


def proc_table():
    """pid → (ppid, start time, own utime + stime in ticks) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12]))
    return table


def cmd_others(args):
    """CPU ticks of every process outside run.sh's tree (kiln's sandboxes are inside it) and
    other than init: their own time only, so children born and gone between two reads are
    missed (a lower bound)."""
    table = proc_table()
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    ours, stack = set(), [args.root]
    while stack:
        pid = stack.pop()
        if pid not in ours:
            ours.add(pid)
            stack.extend(children.get(pid, []))
    others = {str(pid): [start, ticks] for pid, (_, start, ticks) in table.items()
              if pid not in ours and pid != 1}
    print(json.dumps({"t": time.time(), "others": others}))


def others_share(before, after, clk_tck):
    """The share of the machine (all CPUs) other processes took between two `others` reads."""
    if not before or not after:
        return None
    ticks = 0
    for pid, (start, t1) in after["others"].items():
        b = before["others"].get(pid)
        ticks += t1 - b[1] if b and b[0] == start else t1
    wall = after["t"] - before["t"]
    return ticks / (clk_tck * wall * os.cpu_count()) if wall > 0 else None


def cmd_poll(args):
    """kiln_app_* of one app from /metrics (no authentication), every --interval s, until killed."""
    import urllib.request

    want = f'app="{args.app}"'
    fn = f'function="{args.function}"' if args.function else None
    with open(args.out, "w") as out:
        while True:
            t = time.time()
            try:
                text = urllib.request.urlopen(args.metrics, timeout=2).read().decode()
            except OSError:
                text = ""
            row = {"t": t}
            for line in text.splitlines():
                if fn and fn in line and line.startswith("kiln_invocation_duration_seconds_"):
                    name, value = line.rsplit(" ", 1)
                    if name.startswith("kiln_invocation_duration_seconds_sum"):
                        row["fn_s"] = float(value)
                    elif name.startswith("kiln_invocation_duration_seconds_count"):
                        row["fn_n"] = float(value)
                    continue
                if want not in line or line.startswith("#"):
                    continue
                name, value = line.rsplit(" ", 1)
                if name.startswith("kiln_app_inflight_limit"):
                    row["limit"] = float(value)
                elif name.startswith("kiln_app_in_burst"):
                    row["in_burst"] = float(value)
                elif name.startswith("kiln_app_upstream_in_flight"):
                    row["inflight"] = float(value)
                elif name.startswith("kiln_app_requests_total"):
                    row[name.split('served_by="')[1].split('"')[0]] = float(value)
            out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(max(0.0, args.interval - (time.time() - t)))


# ------------------------------------------------------------------------------------ instances
def instance_view(status, function):
    """F's instances in a `kiln --json status`: idle and busy ones, and those made ahead."""
    node = status.get("node", status)
    ahead_ids, ahead_ready = set(), 0
    for s in node.get("snapshots", []):
        if s.get("function") == function:
            ahead_ids.update(s.get("standby_ids", []))
            ahead_ready += s.get("standbys_ready", 0)
    states = {}
    for i in node.get("instances", []):
        if i.get("function") == function and i.get("id") not in ahead_ids:
            states[i.get("state")] = states.get(i.get("state"), 0) + 1
    return {"states": states, "ahead_ready": ahead_ready}


def cmd_comment_form(args):
    """GET the post's page once, as a browser: its CSRF cookie, and its comment form's hidden fields
    (the CSRF token, django_comments' timestamp and security hash), plus a comment."""
    import urllib.request
    from html.parser import HTMLParser
    from http.cookiejar import CookieJar
    from urllib.parse import urlencode

    class Form(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inside, self.fields = False, {}

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "form" and attrs.get("id") == "comment":
                self.inside = True
            elif tag == "input" and self.inside and attrs.get("type") == "hidden":
                self.fields[attrs["name"]] = attrs.get("value") or ""

        def handle_endtag(self, tag):
            if tag == "form":
                self.inside = False

    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = Form()
    form.feed(opener.open(args.url, timeout=60).read().decode())
    csrf = [c.value for c in jar if c.name == "csrftoken"]
    if not csrf or "security_hash" not in form.fields:
        sys.exit(f"beehive.py: no comment form with a CSRF cookie at {args.url}")
    # Mezzanine finds a comment identical to one of the same day and writes nothing: N distinct
    # comments, drawn at random, keep nearly every comment an INSERT while N is well above the
    # run's number of comments.
    bodies = [urlencode(dict(form.fields, name="loadgen", email="loadgen@example.com", url="", honeypot="",
                             comment=f"Comment {i}: a few words, as readers write them under a post."))
              for i in range(args.comments)]
    headers = {"content-type": "application/x-www-form-urlencoded", "cookie": f"csrftoken={csrf[0]}"}
    mix = [{"method": "POST", "path": "/comment/", "body": body, "headers": headers, "weight": 1} for body in bodies]
    mix.append({"method": "GET", "path": args.archive, "weight": 3 * len(bodies)})
    Path(args.mix).write_text(json.dumps(mix, indent=1))
    Path(args.form).write_text(bodies[0])
    Path(args.cookie).write_text(f"cookie: csrftoken={csrf[0]}\n")


def cmd_zip(args):
    import zipfile

    root = Path(args.dir)
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(root.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                info = zipfile.ZipInfo(str(file.relative_to(root)))
                info.external_attr = (file.stat().st_mode & 0o777) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, file.read_bytes())


def cmd_instances(args):
    view = instance_view(json.load(sys.stdin), args.function)
    print(view["states"].get("idle", 0) + view["ahead_ready"])


# ------------------------------------------------------------------------------------ analysis
def analyze(records, onset, duration, ref_s, skip):
    def lat_ms(rs):
        return [r["lat"] / 1e6 for r in rs]

    t = lambda r: r["t"] / 1e9  # noqa: E731
    before = [r for r in records if skip <= t(r) < onset]
    after = [r for r in records if onset <= t(r) < duration]
    ref = [r for r in records if duration - ref_s <= t(r) < duration]
    ref_p99 = pct(lat_ms(ref), 99)

    def windows(width):
        """Per window of the grid from the onset: True (p99 within 1.25 × reference), False, or
        None (no arrival)."""
        n = int((duration - onset) / width + 1e-9)
        out = []
        for k in range(n):
            lo, hi = onset + k * width, onset + (k + 1) * width
            window = [r["lat"] / 1e6 for r in after if lo <= t(r) < hi]
            out.append(None if not window else pct(window, 99) <= 1.25 * ref_p99)
        return out

    def stable(width):
        if ref_p99 is None:
            return None, None
        marks = windows(width)
        bad = [k for k, ok in enumerate(marks) if ok is False]
        return (bad[-1] + 1) * width if bad else 0.0, len(bad) / max(1, sum(m is not None for m in marks))

    def settled(width, span=1.0):
        """Ours, not the issue's: the first window from which `span` seconds of windows are all
        within bound (the onset's transient, blind to a late outlier)."""
        if ref_p99 is None:
            return None
        marks = windows(width)
        need = int(round(span / width))
        for k in range(len(marks) - need + 1):
            if all(m is not False for m in marks[k:k + need]) and any(m for m in marks[k:k + need]):
                return k * width
        return None

    stable_250, bad_share_250 = stable(0.25)
    stable_1s, _ = stable(1.0)
    settled_250 = settled(0.25)
    first = [r["lat"] / 1e6 for r in after if t(r) < onset + 1.0]
    by = {}
    for r in after:
        key = r.get("by") or "monolith"
        if r["status"] == 0:
            key = "error"
        by[key] = by.get(key, 0) + 1
    errors = sum(1 for r in records if r["status"] == 0 or r["status"] >= 500)
    # Requests the monolith served that were in flight at once (client-side intervals, so an
    # upper bound on what the gateway had in flight there), after the onset.
    edges = []
    for r in after:
        if (r.get("by") or "monolith") == "monolith" and r["status"]:
            edges += [(r["t"], 1), (r["t"] + r["lat"], -1)]
    edges.sort(key=lambda e: (e[0], e[1]))
    level = peak_monolith = 0
    for _, d in edges:
        level += d
        peak_monolith = max(peak_monolith, level)
    bad_status = sum(1 for r in records if r["status"] not in (0, 200) and r["status"] < 500)
    return {
        "n": len(records),
        "rps_before": len(before) / (onset - skip) if onset > skip else None,
        "rps_after": len(after) / (duration - onset),
        "rps_ref": len(ref) / ref_s,
        "p50_before": pct(lat_ms(before), 50),
        "p99_before": pct(lat_ms(before), 99),
        "p50_after": pct(lat_ms(after), 50),
        "p99_after": pct(lat_ms(after), 99),
        "p99_ref": ref_p99,
        "stable_250ms_s": stable_250,
        "stable_1s_s": stable_1s,
        "bad_windows_250ms": bad_share_250,
        "settled_250ms_s": settled_250,
        "max_first_second": max(first) if first else None,
        "n_first_second": len(first),
        "served_after": by,
        "function_share": by.get("function", 0) / len(after) if after else None,
        "errors": errors,
        "other_status": bad_status,
        "retried": sum(1 for r in records if r.get("retried")),
        "peak_at_monolith": peak_monolith,
    }


def series(records, duration):
    rows = []
    for s in range(int(math.ceil(duration))):
        window = [r for r in records if s <= r["t"] / 1e9 < s + 1]
        lats = [r["lat"] / 1e6 for r in window]
        fn = sum(1 for r in window if r.get("by") == "function")
        rows.append({"s": s, "n": len(window), "p50": pct(lats, 50), "p99": pct(lats, 99),
                     "max": max(lats) if lats else None,
                     "function_share": fn / len(window) if window else None})
    return rows


def machine_share(meta):
    """The whole machine's busy share during a run, and the monolith's CPU in cores."""
    try:
        b0, t0 = map(int, meta["busy_before"].split())
        b1, t1 = map(int, meta["busy_after"].split())
    except (KeyError, ValueError):
        return None, None
    busy = (b1 - b0) / (t1 - t0) if t1 > t0 else None
    # total ticks count every CPU; ticks per second of wall = ncpu × CLK_TCK
    wall = (t1 - t0) / (os.cpu_count() * meta.get("clk_tck", 100))
    mono = meta.get("mono_ticks", 0) / meta.get("clk_tck", 100) / wall if wall > 0 else None
    return busy, mono


def others_of(run, label, meta):
    try:
        before = json.loads((run / f"{label}.others-before.json").read_text())
        after = json.loads((run / f"{label}.others-after.json").read_text())
    except (OSError, ValueError):
        return None
    return others_share(before, after, meta.get("clk_tck", 100))


def git_commit(root):
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (work tree modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def cmd_report(args):
    run = Path(args.run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = args.configs.split()
    labels = dict(LABELS)
    if args.off == "pin":
        labels["gateway-off"] = "gateway, offload off (route pinned)"
    onset, duration = args.onset, args.duration
    ref_s = 60.0 if not args.quick else (duration - onset) / 2
    ref_s = min(ref_s, duration - onset)
    skip = min(5.0, onset / 3)
    root = Path(__file__).resolve().parents[2]

    results, all_series, machine, kiln_view = {}, {}, {}, {}
    for c in configs:
        path = run / f"{c}.jsonl"
        if not path.exists():
            continue
        records = read_records(path)
        results[c] = analyze(records, onset, duration, ref_s, skip)
        all_series[c] = series(records, duration)
        meta = json.loads((run / f"{c}.machine.json").read_text())
        machine[c] = (meta, *machine_share(meta), others_of(run, c, meta))
        view = {}
        fn_file = run / f"{c}.function"
        if fn_file.exists():
            function = fn_file.read_text().strip()
            for when in ("onset", "end"):
                f = run / f"{c}.status-{when}.json"
                if f.exists() and f.stat().st_size:
                    view[when] = instance_view(json.loads(f.read_text()), function)
            f = run / f"{c}.app-status.json"
            if f.exists():
                view["app"] = json.loads(f.read_text())
        mfile, sfile = run / f"{c}.metrics.jsonl", run / f"{c}.start"
        if mfile.exists() and sfile.exists():
            t0 = float(sfile.read_text())
            rows = [json.loads(x) for x in mfile.read_text().splitlines() if x.strip()]
            rows = [dict(r, s=r["t"] - t0) for r in rows if "limit" in r]
            view["limits"] = rows
            first_fn = next((r["t"] / 1e9 for r in records if r["t"] / 1e9 >= onset and r.get("by") == "function"), None)
            view["first_function_after_onset"] = None if first_fn is None else first_fn - onset

            def at(sec):
                before = [r for r in rows if r["s"] <= sec]
                return before[-1] if before else None

            view["limit_at"] = {k: at(onset + k) for k in (-0.2, 0.5, 1.0, 2.0, duration - onset - 0.5)}
            view["burst_at_start"] = bool(rows and rows[0].get("in_burst"))
            burst_on = next((b["s"] for a, b in zip(rows, rows[1:])
                             if not a.get("in_burst") and b.get("in_burst")), None)
            view["burst_from"] = None if burst_on is None else burst_on - onset
            # The function's run time and invocations from the onset to the end.
            timed = [r for r in rows if "fn_s" in r]
            after = [r for r in timed if r["s"] >= onset]
            if after:
                view["function_after_onset"] = {"seconds": timed[-1]["fn_s"] - after[0]["fn_s"],
                                                "invocations": timed[-1]["fn_n"] - after[0]["fn_n"],
                                                "span_s": timed[-1]["s"] - after[0]["s"]}
        kiln_view[c] = view

    peak = {}
    for label in ("peak-direct", "peak-gateway"):
        path = run / f"{label}.jsonl"
        if path.exists():
            records = read_records(path)
            settled = [r for r in records if r["t"] / 1e9 >= min(2.0, args.peak_s / 5)]
            span = args.peak_s - min(2.0, args.peak_s / 5)
            lats = [r["lat"] / 1e6 for r in settled]
            meta = json.loads((run / f"{label}.machine.json").read_text())
            peak[label] = {"rps": len(settled) / span, "p50": pct(lats, 50), "p99": pct(lats, 99),
                           "errors": sum(1 for r in records if r["status"] == 0 or r["status"] >= 500),
                           "machine": (*machine_share(meta), others_of(run, label, meta)), "by": {}}
            for r in settled:
                k = r.get("by") or "monolith"
                peak[label]["by"][k] = peak[label]["by"].get(k, 0) + 1

    # ---- CSV: per-second p99 (and rps, function share) of every configuration
    with open(out / "beehive-series.csv", "w", newline="") as f:
        w = csv.writer(f)
        header = ["second"]
        for c in all_series:
            header += [f"{c}_p99_ms", f"{c}_rps", f"{c}_function_share", f"{c}_limit_min"]
        w.writerow(header)
        for s in range(int(math.ceil(duration))):
            row = [s]
            for c, rows in all_series.items():
                r = rows[s]
                limits = [x["limit"] for x in kiln_view.get(c, {}).get("limits", []) if s <= x["s"] < s + 1]
                row += [fmt(r["p99"], 1) if r["p99"] is not None else "", r["n"],
                        fmt(r["function_share"], 2) if r["function_share"] is not None else "",
                        fmt(min(limits), 1) if limits else ""]
            w.writerow(row)

    # ---- Markdown
    L = []
    express = args.app == "express"
    mezzanine = args.app == "mezzanine"
    with_database = express or mezzanine
    title = ("Burst offloading (BeeHive): the "
             + {"express": "Express 5 + pg comments", "mezzanine": "Mezzanine blog"}.get(args.app, "thumbnail")
             + " app under a doubling burst")
    L.append(f"# {title}{' — QUICK RUN' if args.quick else ''}\n")
    if args.quick:
        L.append(f"**A quick run** ({duration:.0f} s per configuration, the burst at {onset:.0f} s; the reference "
                 f"p99 is that of the last {ref_s:.1f} s instead of 60 s). The full run, {args.full_command}, "
                 "uses 180 s with the burst at 60 s and the paper's 60 s reference.\n")
    L.append(f"Command: `{args.command}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"commit {git_commit(root)}.\n")
    L.append("## Setup\n")
    L.append(f"- Machine: {cpu_model()}, {os.cpu_count()} CPUs, kernel {platform.release()}; load average "
             f"{args.load_start} at the start of the measurements, {args.load_end} at the end.")
    if mezzanine:
        L.append(f"- Monolith: `bench/beehive/app/mezzanine` (Mezzanine 6.1.1 on Django 4.2, psycopg2: "
                 f"`GET /blog/archive/2024/1/` lists a month's posts, `POST /comment/` is the comment form), "
                 f"gunicorn 27 with {args.workers} sync workers on a private PostgreSQL (60 posts over 6 months, "
                 f"4 comments each), in a cgroup with a CPU quota of **{args.cpu} core** ({args.cgroup}).")
        L.append(f"- Function: the same directory, its packages vendored, deployed as a `KilnWeb` function "
                 f"(`kiln deploy … --runtime python3.11 --web-app blogsite.wsgi:application --memory 512`), a new "
                 f"function per configuration (no history), each app with `--database` (kiln's PostgreSQL proxy "
                 f"in every sandbox). Its warm-up event is "
                 f"{'`GET /blog/archive/2024/1/`' if args.warmup == 'route' else '`GET /`'}. `{args.kiln_args}`.")
        L.append(f"- Load: `loadgen schedule`, a closed loop of {args.clients} keep-alive client(s), doubled to "
                 f"{2 * args.clients} at {onset:.0f} s until {duration:.0f} s; one `POST /comment/` (the form "
                 f"with its CSRF token and security hash, fetched once; one of 20,000 distinct comments, as "
                 f"Mezzanine writes nothing for a repeated one) for every three "
                 f"`GET /blog/archive/2024/1/`. "
                 f"Before: arrivals in [{skip:.0f} s, {onset:.0f} s); after: [{onset:.0f} s, {duration:.0f} s).")
    elif express:
        L.append(f"- Monolith: `bench/beehive/app/express` (Express 5, node-postgres: `POST /comment/` inserts a "
                 f"row, `GET /comments/:post` reads a post's through the named prepared statement "
                 f"`comments-by-post`), `node server.js` with {args.workers} cluster workers, each with a pg pool, "
                 f"on a private PostgreSQL, in a cgroup with a CPU quota of **{args.cpu} core** ({args.cgroup}).")
        L.append(f"- Function: the same directory deployed as a `KilnWeb` function (`kiln deploy … --runtime "
                 f"nodejs20.x --web-app app.js#app --memory 256`), a new function per configuration (no history), "
                 f"each app with `--database` (kiln's PostgreSQL proxy in every sandbox). Its warm-up event is "
                 f"{'`GET /comments/3`' if args.warmup == 'route' else '`GET /`'}. `{args.kiln_args}`.")
        L.append(f"- Load: `loadgen schedule`, a closed loop of {args.clients} keep-alive client(s), doubled to "
                 f"{2 * args.clients} at {onset:.0f} s until {duration:.0f} s; one `POST /comment/` (JSON) for "
                 f"every three `GET /comments/3`. "
                 f"Before: arrivals in [{skip:.0f} s, {onset:.0f} s); after: [{onset:.0f} s, {duration:.0f} s).")
    else:
        L.append(f"- Monolith: `bench/beehive/app/thumb.py` (Flask 3.1, Pillow 11.3: `POST /thumbnail`, a JPEG "
                 f"in, a ≤160 px PNG out; resize, unsharp mask, optimised PNG), gunicorn 27 with {args.workers} "
                 f"sync workers, in a cgroup with a CPU quota of **{args.cpu} core** ({args.cgroup}).")
        L.append(f"- Function: the same module deployed as a `KilnWeb` function (`kiln deploy … --runtime "
                 f"python3.11 --web-app thumb:app --memory 512`, Flask and Pillow vendored with `pip install "
                 f"--target`), a new function per configuration (no history). Its warm-up event "
                 f"(`--warmup-event`, run in the zygote before its snapshot) is "
                 f"{WARMUPS.get(args.warmup, args.warmup)}. `{args.kiln_args}`.")
        L.append(f"- Load: `loadgen schedule`, a closed loop of {args.clients} keep-alive client(s) (the quota "
                 f"rounded up: one request in flight alone takes up to a core, so this is the monolith's peak "
                 f"throughput with no queue), doubled to {2 * args.clients} at "
                 f"{onset:.0f} s until {duration:.0f} s; every request the same 1024×768 JPEG (~120 KB). "
                 f"Before: arrivals in [{skip:.0f} s, {onset:.0f} s); after: [{onset:.0f} s, {duration:.0f} s).")
    routes = {"express": "`--offload 'POST /comment/' --offload 'GET /comments/{post}'`",
              "mezzanine": "`--offload 'POST /comment/' --offload 'GET /blog/archive/{year:\\d{4}}/{month}/'`"
              }.get(args.app, "`--offload 'POST /thumbnail'`")
    L.append(f"- Each offloading app is created with {routes} and driven one request at a "
             + ("time until `kiln app routes` shows the routes eligible (their shadow runs passed); offload off is "
                if with_database else
                "time until `kiln app routes` shows the route eligible (its shadow runs passed); offload off is ")
             + ("the route pinned (`--pin`, no `--offload`)" if args.off == "pin" else
                "`--policy ratio --ratio 0`, the route eligible")
             + ". The configurations run one after another in one kiln, each through its own app and function.\n")

    L.append("## Results per configuration\n")
    L.append("| configuration | rps before | rps after | p50 / p99 before (ms) | p50 / p99 after (ms) | "
             "reference p99 (ms) | p99 after ÷ before | time to stable, 250 ms windows (windows over) | same, 1 s windows | "
             "settled: first 1 s of 250 ms windows all in bound | "
             "max latency, burst's first second (ms) | served by function after onset | errors |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, r in results.items():
        L.append(
            f"| {labels.get(c, c)} | {fmt(r['rps_before'])} | {fmt(r['rps_after'])} | "
            f"{fmt(r['p50_before'], 0)} / {fmt(r['p99_before'], 0)} | {fmt(r['p50_after'], 0)} / "
            f"{fmt(r['p99_after'], 0)} | {fmt(r['p99_ref'], 0)} | {fmt(ratio(r['p99_ref'], r['p99_before']), 2, '×')} | "
            f"{fmt(None if r['stable_250ms_s'] is None else r['stable_250ms_s'] * 1e3, 0, ' ms')} "
            f"({fmt(None if r['bad_windows_250ms'] is None else 100 * r['bad_windows_250ms'], 0, '%')}) | "
            f"{fmt(None if r['stable_1s_s'] is None else r['stable_1s_s'] * 1e3, 0, ' ms')} | "
            f"{fmt(None if r['settled_250ms_s'] is None else r['settled_250ms_s'] * 1e3, 0, ' ms')} | "
            f"{fmt(r['max_first_second'], 0)} (n={r['n_first_second']}) | "
            f"{fmt(None if r['function_share'] is None else 100 * r['function_share'], 0, '%')} | "
            f"{r['errors']} |")
    L.append("")
    L.append("*p99 after ÷ before* uses the reference p99 (the run's end, the burst's steady state). "
             "Served by (after onset): " + "; ".join(
                 f"{c}: " + ", ".join(f"{k} {v}" for k, v in sorted(r["served_after"].items()))
                 for c, r in results.items()) + ".\n")

    L.append("What the machine did meanwhile (whole-machine busy share over the run; the share other "
             "tenants' processes took, outside run.sh's tree, a lower bound; the monolith's CPU in cores, "
             "against its quota) and what kiln saw:\n")
    L.append("| configuration | machine busy | other tenants | monolith CPU (cores) | load average start → end | "
             "instances at onset (idle/busy; made ahead) | at the end | gateway: bursts, limit, offload ratio, served |")
    L.append("|---|---:|---:|---:|---|---|---|---|")
    for c in results:
        meta, busy, mono, others = machine[c]
        v = kiln_view.get(c, {})

        def inst(x):
            if not x:
                return "–"
            st = x["states"]
            return f"{st.get('idle', 0)}/{st.get('busy', 0)}; {x['ahead_ready']}"

        app = v.get("app")
        if app:
            ctl = app.get("Control", {})
            served = app.get("Served", {})
            gw = (f"{ctl.get('Bursts')}, L={ctl.get('Limit')}, {fmt(ctl.get('OffloadRatio'), 2)}, "
                  f"m {served.get('Monolith')} / f {served.get('Function')} / fb {served.get('Fallback')} / "
                  f"gw {served.get('Gateway')}")
        else:
            gw = "–"
        L.append(f"| {c} | {fmt(None if busy is None else 100 * busy, 0, '%')} | "
                 f"{fmt(None if others is None else 100 * others, 0, '%')} | {fmt(mono, 2)} | "
                 f"{meta.get('loadavg_start')} → {meta.get('loadavg_end')} | {inst(v.get('onset'))} | "
                 f"{inst(v.get('end'))} | {gw} |")
    L.append("")
    lines = []
    for c in results:
        v = kiln_view.get(c, {})
        if not v.get("limits"):
            continue
        la = v["limit_at"]
        parts = []
        for k, label in ((-0.2, "just before the onset"), (0.5, "+0.5 s"), (1.0, "+1 s"), (2.0, "+2 s")):
            r = la.get(k)
            parts.append(f"{label} {fmt(r and r.get('limit'), 1)} ({fmt(r and r.get('inflight'), 0)} in flight)")
        r = list(la.values())[-1]
        parts.append(f"at the end {fmt(r and r.get('limit'), 1)}")
        ff = v.get("first_function_after_onset")
        bf = v.get("burst_from")
        if v.get("burst_at_start"):
            burst = "in a burst already when the load started (`kiln_app_in_burst`)"
        elif bf is None:
            burst = "never in a burst"
        else:
            burst = f"in a burst from {bf * 1e3:+.0f} ms of the onset (`kiln_app_in_burst`, polled every 100 ms)"
        lines.append(f"- {c}: L {'; '.join(parts)}; {burst}; first request the function served "
                     f"after the onset arrived at +{fmt(None if ff is None else ff * 1e3, 0, ' ms')}; at most "
                     f"{results[c]['peak_at_monolith']} requests served by the monolith were in flight at once "
                     f"after the onset (client's view).")
    if lines:
        L.append("The gateway's learned in-flight limit L (`kiln_app_inflight_limit` from `/metrics`, polled every "
                 "100 ms; times from the loadgen start, ±20 ms):\n")
        L += lines
        L.append("")

    if peak:
        L.append(f"## Peak throughput: the gateway in the path, offload off\n")
        L.append(f"{args.peak_clients} closed-loop clients for {args.peak_s:.0f} s (the first "
                 f"{min(2.0, args.peak_s / 5):.0f} s not counted), straight to "
                 f"{'node' if express else 'gunicorn'} and through an app with "
                 + (("the routes pinned (`--pin`: " if with_database else "the route pinned (`--pin 'POST /thumbnail'`: ")
                    + "passed through, streamed, never shadowed).\n"
                    if args.off == "pin" else
                    "`--policy ratio --ratio 0` (the route eligible: buffered, 1 in 100 shadowed, nothing "
                    "offloaded).\n"))
        L.append("| path | rps | p50 (ms) | p99 (ms) | errors | machine busy | other tenants | monolith CPU (cores) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, p in peak.items():
            busy, mono, others = p["machine"]
            L.append(f"| {label} | {fmt(p['rps'])} | {fmt(p['p50'], 0)} | {fmt(p['p99'], 0)} | {p['errors']} | "
                     f"{fmt(None if busy is None else 100 * busy, 0, '%')} | "
                     f"{fmt(None if others is None else 100 * others, 0, '%')} | {fmt(mono, 2)} |")
        L.append("")

    # ---- against the paper and the targets
    L.append("## Against the paper (issue 21 §9)\n")
    L.append("| measure | kiln, this run | target | paper | kiln ÷ paper |")
    L.append("|---|---:|---:|---:|---:|")
    w = results.get("spill-warm")
    if w and w["stable_250ms_s"] is not None:
        v = w["stable_250ms_s"] * 1e3
        L.append(f"| time to stable p99, warm (spill, --min-warm 4) | {v:.0f} ms | ≤ 300 ms | 632.78 ms | "
                 f"{v / PAPER['stable_warm_ms']:.2f} |")
    c = results.get("spill-cold")
    if c and c["stable_250ms_s"] is not None:
        v = c["stable_250ms_s"]
        L.append(f"| time to stable p99, cold (spill, no --min-warm) | {v * 1e3:.0f} ms | ≤ 1 s | 9.33 s | "
                 f"{v / PAPER['stable_cold_s']:.3f} |")
    r5 = results.get("ratio-0.5")
    if r5 and r5["stable_250ms_s"] is not None:
        v = r5["stable_250ms_s"] * 1e3
        L.append(f"| time to stable p99, ratio 0.5 (no --min-warm) | {v:.0f} ms | – | "
                 f"632.78 ms (warm) | {v / PAPER['stable_warm_ms']:.2f} |")
    d = results.get("direct")
    base = d["p99_before"] if d and d["p99_before"] else None
    for k in ("spill-warm", "spill-cold", "ratio-0.5"):
        r = results.get(k)
        if r and r["p99_ref"] and base:
            x = r["p99_ref"] / base - 1
            L.append(f"| p99 offloaded (steady, 2× load) vs the monolith alone at 1× load (direct, before), {k} | "
                     f"{100 * x:+.1f}% | ≤ +10% | +15.0% | {fmt(ratio(x, PAPER['p99_vs_server']), 2)} |")
    if d and d["p99_ref"] and d["p99_before"]:
        L.append(f"| for scale: the monolith alone at 2× load vs 1× | "
                 f"{100 * (d['p99_ref'] / d['p99_before'] - 1):+.1f}% | – | – | – |")
    if "peak-direct" in peak and "peak-gateway" in peak:
        pr = peak["peak-gateway"]["rps"] / peak["peak-direct"]["rps"]
        L.append(f"| peak throughput, gateway in path, offload off, vs direct | {100 * pr:.1f}% | ≥ 97% | "
                 f"92.86% (pybbs −7.14%); ≈100% (thumbnail) | {pr / (1 + PAPER['peak_loss']):.3f} (vs pybbs) |")
    for k in ("spill-warm", "spill-cold", "ratio-0.5"):
        r = results.get(k)
        if r and r["max_first_second"] and r["p99_ref"]:
            L.append(f"| max latency in the burst's first second ÷ stable p99, {k} | "
                     f"{r['max_first_second'] / r['p99_ref']:.2f}× | ≤ 2× | (6.45× lower worst case with shadows) | – |")
    L.append("")
    L.append("The paper's time to stable is measured on OpenWhisk (632.78 ms warm, 9.33 s cold; Lambda 668.56 ms / "
             "16.33 s) with a 4-vCPU server and instances on other machines; here the monolith, kiln, every "
             "instance and the client share 2 cores, so offloaded work competes with the client and gateway for "
             "the same CPUs.\n")

    # ---- cost (Table 3, Fig. 9)
    costed = {c: kiln_view[c]["function_after_onset"] for c in ("spill-warm", "spill-cold", "ratio-0.5")
              if kiln_view.get(c, {}).get("function_after_onset", {}).get("span_s")}
    if costed:
        L.append("## Cost (Table 3, Fig. 9)\n")
        L.append(f"Prices ({PRICES['source']}): Lambda ${PRICES['gb_s']} per GB-second and ${PRICES['request'] * 1e6:.2f} "
                 f"per million requests (x86); an always-on replica of the monolith as a {PRICES['replica']} at "
                 f"${PRICES['replica_h']}/hour; Fargate ${PRICES['fargate_vcpu_h']} per vCPU-hour and "
                 f"${PRICES['fargate_gb_h']} per GB-hour, {FARGATE_VCPU} vCPU and {FARGATE_GB} GB started at each "
                 f"burst. The function's run time is kiln's own (`kiln_invocation_duration_seconds_sum` of the "
                 f"function from the onset to the end, shadow runs included), billed at its {FUNCTION_GB} GB.\n")
        L.append("| configuration | function-seconds per second of burst | invocations per second | "
                 "$ per hour of burst (Lambda prices) | $ per 1000 offloaded requests | "
                 "per hour at a 10% burst ratio: replica ÷ kiln | paper (10%, Lambda) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        paper10 = {"thumb": "2.89× (thumbnail)", "mezzanine": "4.33× (blog)", "express": "2.89–4.33×"}[args.app]
        hourly = {}
        for c, f in costed.items():
            per_s = (f["seconds"] * FUNCTION_GB * PRICES["gb_s"] + f["invocations"] * PRICES["request"]) / f["span_s"]
            hourly[c] = per_s * 3600
            served = results[c]["served_after"].get("function", 0) if results.get(c) else 0
            per_k = per_s * f["span_s"] / served * 1000 if served else None
            L.append(f"| {c} | {f['seconds'] / f['span_s']:.2f} | {f['invocations'] / f['span_s']:.1f} | "
                     f"{hourly[c]:.4f} | {fmt(per_k, 4)} | {PRICES['replica_h'] / (0.1 * hourly[c]):.2f}× | {paper10} |")
        L.append("")
        L.append("Per hour against the share of the hour spent in bursts like this one (Fig. 9; $):\n")
        ratios = (0.05, 0.1, 0.2, 0.3, 0.5, 0.67, 1.0)
        L.append("| burst ratio | " + " | ".join(f"{100 * x:.0f}%" for x in ratios) + " |")
        L.append("|---|" + "---:|" * len(ratios))
        L.append(f"| always-on replica ({PRICES['replica']}) | " + " | ".join(f"{PRICES['replica_h']:.4f}" for _ in ratios) + " |")
        L.append(f"| on-demand replica, started at each burst | "
                 + " | ".join(f"{x * PRICES['replica_h']:.4f}" for x in ratios) + " |")
        fargate_h = FARGATE_VCPU * PRICES["fargate_vcpu_h"] + FARGATE_GB * PRICES["fargate_gb_h"]
        L.append("| Fargate, started at each burst | " + " | ".join(f"{x * fargate_h:.4f}" for x in ratios) + " |")
        for c, h in hourly.items():
            L.append(f"| kiln {c} | " + " | ".join(f"{x * h:.4f}" for x in ratios) + " |")
        L.append("")
        L.append("The on-demand and Fargate rows assume a replica that serves from the burst's first second; the "
                 "paper's boot times (tens of seconds to minutes) are what offloading saves. kiln's own cost on "
                 "a self-hosted machine is the CPU and memory its instances take meanwhile (the machine table "
                 "above), not a price.\n")

    # ---- per-second p99 around the onset
    L.append("## Per-second p99 (ms) around the onset\n")
    lo = max(0, int(onset) - (5 if not args.quick else 3))
    hi = min(int(duration), int(onset) + (20 if not args.quick else 10))
    L.append("Second (by arrival) → p99 of the requests that arrived in it; the whole series, with rps and the "
             "function's share per second, is in `beehive-series.csv`.\n")
    L.append("| second | " + " | ".join(all_series) + " |")
    L.append("|---:|" + "---:|" * len(all_series))
    for s in range(lo, hi):
        cells = []
        for c, rows in all_series.items():
            r = rows[s]
            share = r["function_share"]
            cells.append(fmt(r["p99"], 0) + (f" ({100 * share:.0f}% f)" if share else ""))
        L.append(f"| {s}{' ← onset' if s == int(onset) else ''} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("(x% f: the share of that second's requests the function served.)\n")

    L.append("## Definitions\n")
    L.append(DEFINITIONS.strip())
    L.append("")
    (out / "beehive.md").write_text("\n".join(L) + "\n")
    (out / "beehive.json").write_text(json.dumps({
        "configs": results, "peak": {k: {kk: vv for kk, vv in v.items() if kk != "machine"} for k, v in peak.items()},
        "onset": onset, "duration": duration, "ref_s": ref_s, "skip": skip, "quick": args.quick,
        "clients": args.clients, "cpu": args.cpu,
    }, indent=1, default=str) + "\n")
    print((out / "beehive.md").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("image")
    p.add_argument("--out", required=True)
    p = sub.add_parser("warmup-event")
    p.add_argument("--out", required=True)
    p = sub.add_parser("poll")
    p.add_argument("--metrics", required=True)
    p.add_argument("--app", required=True)
    p.add_argument("--function", help="also its invocations' run time (kiln_invocation_duration_seconds)")
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=0.1)
    p = sub.add_parser("others")
    p.add_argument("--root", type=int, required=True)
    p = sub.add_parser("instances")
    p.add_argument("--function", required=True)
    p = sub.add_parser("comment-form")
    p.add_argument("--url", required=True)
    p.add_argument("--archive", required=True)
    p.add_argument("--comments", type=int, default=20000)
    p.add_argument("--mix", required=True)
    p.add_argument("--form", required=True)
    p.add_argument("--cookie", required=True)
    p = sub.add_parser("zip")
    p.add_argument("--dir", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--command", default="bench/beehive/run.sh")
    p.add_argument("--full-command", default="`bench/beehive/run.sh`")
    p.add_argument("--configs", required=True)
    p.add_argument("--onset", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpu", default="0.5")
    p.add_argument("--cgroup", default="")
    p.add_argument("--peak-clients", type=int, default=0)
    p.add_argument("--peak-s", type=float, default=0)
    p.add_argument("--load-start", default="")
    p.add_argument("--load-end", default="")
    p.add_argument("--kiln-args", default="")
    p.add_argument("--warmup", default="route")
    p.add_argument("--app", default="thumb", choices=["thumb", "express", "mezzanine"])
    p.add_argument("--off", default="ratio0")
    p.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    {"image": cmd_image, "warmup-event": cmd_warmup_event, "poll": cmd_poll, "others": cmd_others,
     "instances": cmd_instances, "comment-form": cmd_comment_form, "zip": cmd_zip,
     "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
