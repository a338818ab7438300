#!/usr/bin/env python3
"""The warm invoke's guard: kiln's CPU per warm invoke as a ratio to a bare server's CPU per
request, both measured in the same run. `bench/run.sh --guard` runs this instead of bench.py.

These machines differ in speed from run to run and from minute to minute, so absolute
microseconds do not compare across runs; a ratio against a floor measured in the same rounds
does. Setups are interleaved: each round runs every setup once (rotated), and the figure is the
median over rounds of (kiln's CPU per invoke ÷ the floor's CPU per request in that round).
CPU is schedstat's run time of the server's threads (ns resolution), not utime ticks.

Setups (all sequential, one keep-alive connection, signed requests):
- floor-node, floor-py-asyncio: the bare servers of bench/floors/;
- floor-node-relay: bench/floors/node_relay.js, the bare Node server relaying each request to a
  second Node process over a Unix socket: the least any design with the function in another
  process pays (its CPU is the relay's only, as kiln's is kiln's only);
- floor-rust-relay: the same relay on kiln's own stack (bench/loadgen/src/bin/relay.rs: tokio,
  hyper, kiln's worker count) to the same Node process: kiln's work minus everything but the hops;
- kiln-node, kiln-python: NoOp functions as deployed by default;
- kiln-node-booked: `--memory-sizing booked` (no predicted limit, so no resize monitor);
- kiln-node-session: sessions on (hint `json:$.session`), every request naming one session.
Run it with BENCH_KILN_ARGS="--object-cache on" for the same setups with the object cache on.

Writes bench/work/guard/guard.{md,json}; compares with bench/results/guard/baseline.json;
`--baseline` writes that file instead (commit it with the change that moved it).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench  # noqa: E402 - same directory

SETUPS = [
    # (name, server key, function)
    ("floor-node", "floor-node", None),
    ("floor-py-asyncio", "floor-py-asyncio", None),
    ("floor-node-relay", "floor-node-relay", None),
    ("floor-rust-relay", "floor-rust-relay", None),
    ("kiln-node", "kiln", "noop-node"),
    ("kiln-python", "kiln", "noop-python"),
    ("kiln-node-booked", "kiln", "noop-node-booked"),
    ("kiln-node-session", "kiln", "noop-node-session"),
]
# (ratio name, numerator setup, denominator setup)
RATIOS = [
    ("node ÷ floor-node", "kiln-node", "floor-node"),
    ("node ÷ floor-node-relay", "kiln-node", "floor-node-relay"),
    ("node ÷ floor-rust-relay", "kiln-node", "floor-rust-relay"),
    ("floor-node-relay ÷ floor-node", "floor-node-relay", "floor-node"),
    ("floor-rust-relay ÷ floor-node", "floor-rust-relay", "floor-node"),
    ("python ÷ floor-node", "kiln-python", "floor-node"),
    ("python ÷ floor-py-asyncio", "kiln-python", "floor-py-asyncio"),
    ("node booked ÷ floor-node", "kiln-node-booked", "floor-node"),
    ("node session ÷ floor-node", "kiln-node-session", "floor-node"),
]
BODIES = {"noop-node-session": '{"session":"guard-1"}'}
BASELINE = bench.BENCH / "results" / "guard" / "baseline.json"


def deploy_extra(kiln, kiln_bin):
    """The two setups' functions that boto3 cannot configure: deployed with the kiln CLI."""
    source = bench.BENCH / "functions" / "node"
    env = dict(os.environ, KILN_ENDPOINT=kiln.url, KILN_DATA_DIR=str(kiln.data_dir))
    for name, flags in (("noop-node-booked", ["--memory-sizing", "booked"]),
                        ("noop-node-session", ["--session-hint", "json:$.session"])):
        subprocess.run([kiln_bin, "deploy", name, "--runtime", "nodejs20.x", "--handler", "index.handler",
                        "--code", str(source), "--memory", "128", *flags],
                       check=True, capture_output=True, env=env, timeout=120)
        r = kiln.client().invoke(FunctionName=name, Payload=BODIES.get(name, "{}").encode())
        if r["StatusCode"] != 200 or r.get("FunctionError"):
            raise RuntimeError(f"{name} does not answer: {r['StatusCode']} {r['Payload'].read()!r}")
        bench.log(f"deployed {name} (nodejs20.x, {' '.join(flags)})")


def measure(args, servers, kiln, setup, n, warmup):
    name, _, function = setup
    extra = ["--body", BODIES[function]] if function in BODIES else []
    out = bench.loadgen(args, "latency", *bench.target_args(setup, servers, kiln), *extra,
                        "--n", n, "--warmup", warmup)
    if out["errors"]:
        raise RuntimeError(f"{name}: {out['errors']} errors, first: {out['first_error']}")
    lat = sorted(x / 1e3 for x in out["latency_ns"])
    return {"cpu_us": out["server_cpu"][0]["sched_ns"] / 1e3 / out["n"],
            "p50_us": bench.pct(lat, 50), "p99_us": bench.pct(lat, 99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--kiln-bin", required=True)
    ap.add_argument("--out", default=str(bench.BENCH / "work" / "guard"))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--baseline", action="store_true", help=f"write {BASELINE} instead of comparing with it")
    ap.add_argument("--command", default="bench/run.sh --guard")
    args = ap.parse_args()
    servers = json.loads(Path(args.servers).read_text())
    kiln = bench.Kiln(servers["kiln"])
    started = time.time()
    bench.deploy(kiln)
    deploy_extra(kiln, args.kiln_bin)
    rounds = {s[0]: [] for s in SETUPS}
    for setup in SETUPS:  # warm every instance (and the memory model) before the first round
        measure(args, servers, kiln, setup, 500, 500)
    before = bench.cpu_account()
    for r in range(args.rounds):
        order = SETUPS[r % len(SETUPS):] + SETUPS[:r % len(SETUPS)]
        for setup in order:
            rounds[setup[0]].append(measure(args, servers, kiln, setup, args.n, args.n // 10))
        bench.log(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name} {v[-1]['cpu_us']:.1f} µs" for name, v in rounds.items()))
    share = bench.interference(before, bench.cpu_account())
    ratios = {}
    for label, num, den in RATIOS:
        per_round = [a["cpu_us"] / b["cpu_us"] for a, b in zip(rounds[num], rounds[den])]
        q = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else per_round * 3
        ratios[label] = {"median": statistics.median(per_round), "q1": q[0], "q3": q[-1],
                         "rounds": per_round}
    setups = {name: {key: statistics.median(x[key] for x in v) for key in ("cpu_us", "p50_us", "p99_us")}
              for name, v in rounds.items()}
    result = {
        "command": args.command, "kiln_args": os.environ.get("BENCH_KILN_ARGS", ""),
        "started": datetime.datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(time.time() - started, 1), "rounds": args.rounds, "n": args.n,
        "kiln_bin_sha256": bench.hashlib.sha256(Path(args.kiln_bin).read_bytes()).hexdigest()[:16],
        "load_end": bench.loadavg(), "others_pct": round(share["others_pct"], 1), "git": git_describe(), "ratios": ratios, "setups": setups,
    }
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() and not args.baseline else None
    text = render(result, baseline)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "guard.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "guard.md").write_text(text)
    if args.baseline:
        BASELINE.parent.mkdir(parents=True, exist_ok=True)
        BASELINE.write_text(json.dumps(result, indent=1) + "\n")
        bench.log(f"wrote the baseline {BASELINE}")
    print(text)


def git_describe():
    try:
        return subprocess.run(["git", "-C", str(bench.BENCH), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def verdict(run, base):
    """Whether a change is beyond this run's own spread. One run's median moves by ±15% with
    nothing changed (two runs of one binary read 1.67 and 1.84), so a change counts only when
    the baseline's median lies outside this run's quartiles; rerun before believing it."""
    if run["q1"] <= base["median"] <= run["q3"]:
        return "within noise"
    return "slower" if base["median"] < run["q1"] else "faster"


def render(result, baseline):
    lines = ["# The warm invoke's guard: kiln's CPU per invoke ÷ a bare server's CPU per request\n",
             f"`{result['command']}`" + (f" with `BENCH_KILN_ARGS={result['kiln_args']}`" if result["kiln_args"] else "")
             + f" at {result['git']} (kiln binary sha256 {result['kiln_bin_sha256']}…), {result['started']}: {result['rounds']} interleaved rounds of "
             f"{result['n']:,} sequential invokes per setup, {result['elapsed_s']:.0f} s; load average at end "
             f"{' '.join(result['load_end'])}; other processes took {result['others_pct']:.0f}% of the "
             "machine while it measured" + (" (over 10%: do not compare this run)" if result["others_pct"] > 10 else "")
             + ".\n"]
    head = "| ratio (median over rounds) | this run | quartiles |"
    rule = "|---|---|---|"
    if baseline:
        head += f" baseline ({baseline['git']}) | change | verdict |"
        rule += "---|---|---|"
    lines += [head, rule]
    for label, r in result["ratios"].items():
        row = f"| {label} | **{r['median']:.2f}** | {r['q1']:.2f}–{r['q3']:.2f} |"
        if baseline:
            b = baseline["ratios"].get(label)
            row += (f" {b['median']:.2f} | {100 * (r['median'] / b['median'] - 1):+.0f}% | {verdict(r, b)} |"
                    if b else " – | – | – |")
        lines.append(row)
    lines += ["", "| setup | server CPU µs / request | p50 µs | p99 µs |", "|---|---|---|---|"]
    for name, s in result["setups"].items():
        lines.append(f"| {name} | {s['cpu_us']:.1f} | {s['p50_us']:.0f} | {s['p99_us']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
