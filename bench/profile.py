#!/usr/bin/env python3
"""Where kiln's CPU goes per warm invocation: `bench/run.sh --perf` runs this instead of bench.py.

For each NoOp function: sequential signed invokes with loadgen while `perf record` samples the
kiln process (cpu-clock, DWARF call graphs), then the samples are attributed to parts of the
hot path by their call stacks; and `strace -c` counts kiln's system calls per invocation.
Writes bench/work/profile/report.md (git-ignored) and prints it. Attribution is by the first
matching rule over a sample's whole stack, in the order below, so e.g. a `read` under
`Cgroup::oom_kills` counts as cgroup, not as I/O.
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bench  # noqa: E402 - same directory

# (label, patterns): a sample goes to the first label any of whose patterns occurs in a frame's
# own name (generic arguments stripped), or, for "ANY:", anywhere in a frame.
RULES = [
    ("log hand-off and log writer thread (kiln::logs)", ["kiln::logs::"]),
    ("cgroup files per invocation (oom_kills, reset_peak, memory_peak)",
     ["kiln_sandbox::cgroup::Cgroup::oom_kills", "kiln_sandbox::cgroup::Cgroup::reset_peak",
      "kiln_sandbox::cgroup::Cgroup::memory_peak"]),
    ("SigV4 verification", ["kiln::auth::sigv4::Verifier::verify"]),
    ("agent: Instance::invoke/step, shim frames, output pipe, REPORT line",
     ["kiln::agent::instance::", "kiln::agent::frame::", "kiln::agent::Inner::",
      "kiln::agent::report", "<kiln::agent::LocalAgent as kiln::agent::NodeAgent>::invoke"]),
    ("controller: lookup, payload check, uuids, trace id, metrics",
     ["kiln::controller::", "kiln::function::", "kiln::metrics", "prometheus_client", "uuid::"]),
    ("api: invoke handler, respond(), response middleware", ["kiln::api::"]),
    ("HTTP connection task: hyper parse/encode, socket I/O, axum routing/extractors",
     "ANY:hyper::proto|axum::serve"),
]
REST = "tokio runtime outside any task above: park/unpark (epoll_wait, futex), timers, wake-ups"


def own_name(frame):
    if frame.startswith("<"):
        end = frame.find(">::")
        return frame[: end + 3 + 60] if end > 0 else frame[:160]
    i = frame.find("<")
    return frame if i < 0 else frame[:i]


def classify(script_text):
    counts, syscalls, n = collections.Counter(), collections.Counter(), 0
    leaves, innermost = collections.Counter(), collections.Counter()

    def flush(frames):
        nonlocal n
        if not frames:
            return
        n += 1
        for label, pats in RULES:
            if isinstance(pats, str):
                hit = any(p in f for f in frames for p in pats[4:].split("|"))
            else:
                hit = any(own_name(f).startswith(p) or (f.startswith("<") and p in own_name(f))
                          for f in frames for p in pats)
            if hit:
                counts[label] += 1
                break
        else:
            counts[REST] += 1
        leaves[own_name(frames[0])[:100]] += 1
        inner = next((own_name(f) for f in frames if f.startswith(("kiln", "<kiln"))), "(no kiln frame)")
        innermost[inner[:100]] += 1
        for f in frames:
            if "__x64_sys_" in f:
                syscalls[f.split("__x64_sys_")[1].split()[0]] += 1
                break

    frames = []
    for line in script_text.splitlines():
        if line and not line[0].isspace():
            flush(frames)
            frames = []
        else:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                frames.append(parts[1])
    flush(frames)
    return n, counts, syscalls, leaves, innermost


def thread_switches(pid):
    """Per thread id: (name, voluntary, involuntary) context switches so far."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue  # the thread ended
        out[task.name] = (fields["Name"].strip(), int(fields["voluntary_ctxt_switches"]),
                          int(fields["nonvoluntary_ctxt_switches"]))
    return out


def switches_per_call(before, after, calls):
    """Context switches per call between two `thread_switches` readings, summed by thread name,
    busiest first; threads that ended in between are left out, new ones count from zero."""
    by_name = collections.defaultdict(lambda: [0, 0])
    for tid, (name, vol, invol) in after.items():
        _, vol0, invol0 = before.get(tid, (name, 0, 0))
        by_name[name][0] += vol - vol0
        by_name[name][1] += invol - invol0
    rows = [(name, (v / calls, i / calls)) for name, (v, i) in by_name.items() if v or i]
    return sorted(rows, key=lambda r: -(r[1][0] + r[1][1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--out", default=str(bench.BENCH / "work" / "profile"))
    ap.add_argument("--n", type=int, default=30_000)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = json.loads(Path(args.servers).read_text())
    kiln = bench.Kiln(servers["kiln"])
    bench.deploy(kiln)
    kiln_bin = Path(f"/proc/{kiln.pid}/exe").resolve()
    sha = bench.hashlib.sha256(kiln_bin.read_bytes()).hexdigest()[:16]
    report = ["# Where kiln's CPU goes per warm invocation\n",
              f"kiln binary: {kiln_bin} (sha256 {sha}…); load average at start: {' '.join(bench.loadavg())}\n"]
    for function in bench.FUNCTIONS:
        target = ["--url", kiln.url, "--path", f"/2015-03-31/functions/{function}/invocations",
                  "--creds", str(kiln.creds_path), "--server-pid", str(kiln.pid)]
        bench.loadgen(args, "latency", *target, "--n", 2000, "--warmup", 1000)
        # Unprofiled reference first: perf's own interrupts inflate the CPU figure a little.
        switches_before = thread_switches(kiln.pid)
        ref = bench.loadgen(args, "latency", *target, "--n", 10_000, "--warmup", 0)
        switches = switches_per_call(switches_before, thread_switches(kiln.pid), ref["n"])
        c = ref["server_cpu"][0]
        ref_us = (c["utime_ticks"] + c["stime_ticks"]) * 1e6 / bench.CLK_TCK / ref["n"]
        ref_sys = c["stime_ticks"] / max(1, c["utime_ticks"] + c["stime_ticks"])
        report.append(f"## {function}\n")
        report.append(f"kiln CPU per warm invocation without profiler: **{ref_us:.1f} µs** "
                      f"(n {ref['n']:,}, {100 * ref_sys:.0f}% of it in the kernel)\n")
        report.append("Context switches of kiln's threads per invocation, by thread name (voluntary: "
                      "the thread blocked; each one is a wake-up later):\n")
        report += ["| thread | voluntary | involuntary |", "|---|---|---|"]
        report += [f"| {name} | {v:.2f} | {i:.2f} |" for name, (v, i) in switches]
        report.append("")
        if shutil.which("perf"):
            load = subprocess.Popen([args.loadgen, "latency", *target, "--n", str(args.n), "--warmup", "0"],
                                    stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)
            data = out / f"perf-{function}.data"
            subprocess.run(["perf", "record", "-q", "-F", "2999", "-g", "--call-graph", "dwarf,16384",
                            "-p", str(kiln.pid), "-o", str(data), "--", "sleep", "3"],
                           capture_output=True, check=True)
            load.communicate()
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,tid,period,ip,sym",
                                     "--no-inline"], capture_output=True, text=True).stdout
            if not os.environ.get("BENCH_KEEP_PERF"):  # set it to look further with `perf report`
                data.unlink()
            n, counts, syscalls, leaves, innermost = classify(script)
            report.append(f"perf samples: {n:,} (cpu-clock, 2999 Hz, DWARF stacks). Share of kiln's "
                          f"CPU and, scaled to the unprofiled figure, µs per invocation:\n")
            report.append("| part of the hot path | share | ≈ µs / invocation |\n|---|---|---|")
            for label, k in counts.most_common():
                report.append(f"| {label} | {100 * k / n:.1f}% | {ref_us * k / n:.1f} |")
            report.append("\nSamples inside a system call, by call (share of all samples): "
                          + ", ".join(f"{name} {100 * k / n:.1f}%" for name, k in syscalls.most_common(10)) + "\n")
            for title, counter in (("symbol the sample was taken in (self time)", leaves),
                                   ("innermost kiln function on the sample's stack", innermost)):
                report.append(f"Top 20 by {title}:\n\n| symbol | share | ≈ µs |\n|---|---|---|")
                for name, k in counter.most_common(20):
                    report.append(f"| `{name}` | {100 * k / n:.1f}% | {ref_us * k / n:.1f} |")
                report.append("")
        if shutil.which("strace"):
            calls = 2000
            trace = out / f"strace-{function}.txt"
            st = subprocess.Popen(["strace", "-c", "-f", "-p", str(kiln.pid), "-o", str(trace)],
                                  stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            bench.loadgen(args, "latency", *target, "--n", calls, "--warmup", 0)
            time.sleep(0.5)
            st.terminate()
            st.wait(timeout=10)
            rows = []
            for line in trace.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                    errors = int(parts[4]) if len(parts) == 6 else 0
                    rows.append((parts[-1], int(parts[3]), errors))
            total = sum(r[1] for r in rows)
            report.append(f"System calls of the kiln process per invocation (strace -c -f over {calls:,} "
                          f"sequential invocations; the kiln process only, not the function's): "
                          f"**{total / calls:.1f}**\n")
            report.append("| syscall | per invocation | of which failed |\n|---|---|---|")
            for name, count, errors in sorted(rows, key=lambda r: -r[1]):
                if count / calls >= 0.05:
                    report.append(f"| {name} | {count / calls:.2f} | {errors / calls:.2f} |")
            report.append("")
    text = "\n".join(report) + "\n"
    (out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
