"""Statistics and the report of the start-path benchmark: startpaths.{md,json,png}."""

import argparse
import datetime
import hashlib
import json
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

import bench as core
from cases import ANCHORS, FUNCTION_ORDER, PATHS, TARGETS, WARMUP_INVOCATIONS, cases

BOOT = 10_000
SHORT = {"python": "py"}  # plot labels


def seed_of(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def median_ci(a, name):
    a = np.asarray(a, dtype=float)
    if len(a) == 0:
        return {"n": 0, "median": float("nan"), "ci95": [float("nan")] * 2}
    dist = core.boot(a, 50, BOOT, seed_of(name))
    return {"n": int(len(a)), "median": float(np.median(a)), "ci95": core.ci(dist), "_boot": dist,
            "p90": core.pct(a, 90), "min": float(a.min()), "max": float(a.max())}


def ratio_ci(x, y):
    """Median(x)/median(y) with a 95% CI from independent bootstraps of both."""
    if x["n"] == 0 or y["n"] == 0:
        return {"ratio": float("nan"), "ci95": [float("nan")] * 2}
    r = x["_boot"] / y["_boot"]
    return {"ratio": x["median"] / y["median"], "ci95": core.ci(r)}


def public(d):
    if isinstance(d, dict):
        return {k: public(v) for k, v in d.items() if not k.startswith("_")}
    return d


def fmt(s, unit="ms", digits=None):
    if s["n"] == 0:
        return "–"
    m, (lo, hi) = s["median"], s["ci95"]
    d = digits if digits is not None else (2 if m < 10 else 1 if m < 100 else 0)
    return f"{m:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"


def analyse(lat):
    out = {}
    for key, case in lat["cases"].items():
        samples = case["samples"]
        expected = case["path"]
        ok = [s for s in samples if "init_ms" in s and s.get("start_path") == expected]
        first = [s["duration_ms"] for s in ok]
        steady = [w["duration_ms"] for s in ok for w in s["warm"]]
        a = {
            "runtime": case["runtime"], "function": case["function"], "path": expected,
            "samples": len(samples), "cold_on_expected_path": len(ok),
            "other_paths": sorted({s.get("start_path", "none") for s in samples} - {expected}),
            "e2e": median_ci([s["e2e_ms"] for s in ok], key + "e2e"),
            "init": median_ci([s["init_ms"] for s in ok], key + "init"),
            "first": median_ci(first, key + "first"),
            "steady": median_ci(steady, key + "steady"),
            "warm_e2e": median_ci([w["e2e_ms"] for s in ok for w in s["warm"]], key + "warm"),
            # What is neither init nor the handler: kiln's sandbox work, the client, the wire.
            "outside": median_ci([s["e2e_ms"] - s["init_ms"] - s["duration_ms"] for s in ok],
                                 key + "outside"),
        }
        a["first_vs_steady"] = ratio_ci(a["first"], a["steady"])
        if first and steady:
            a["first_vs_steady_p"] = float(mannwhitneyu(first, steady).pvalue)
        out[key] = a
    return out


def compare_paths(an):
    """Per runtime and function: every path against the runtime's coldest path."""
    rows = []
    for (rt, path) in PATHS:
        if path == "coldest":
            continue
        for fn in FUNCTION_ORDER:
            cold, hot = an.get(f"{rt}/{fn}/coldest"), an.get(f"{rt}/{fn}/{path}")
            if not cold or not hot or not cold["e2e"]["n"] or not hot["e2e"]["n"]:
                continue
            row = {"runtime": rt, "function": fn, "path": path}
            for m in ("e2e", "init"):
                row[m] = ratio_ci(cold[m], hot[m])
                row[m + "_p"] = float(mannwhitneyu(_raw(cold, m), _raw(hot, m)).pvalue)
            rows.append(row)
    return rows


_RAW = {}


def _raw(a, m):
    return _RAW[(a["runtime"], a["function"], a["path"], m)]


def memory_rows(mem):
    rows = []
    for key, case in mem["cases"].items():
        rt, fn, path = key.split("/")
        inst = case["instances"]
        get = lambda k: [i["runtime"][k] / 2**20 for i in inst if i["runtime"]]  # noqa: E731
        status_uss = [i["status_sharing"]["uss_bytes"] / 2**20 for i in inst if i.get("status_sharing")]
        snap = case.get("snapshot") or {}
        rows.append({
            "runtime": rt, "function": fn, "path": path, "instances": len(inst),
            "start_paths": sorted(set(case["start_paths"])),
            "errors": case.get("errors", []),
            "uss_mib": float(np.median(get("uss_bytes"))) if inst else float("nan"),
            "pss_mib": float(np.median(get("pss_bytes"))) if inst else float("nan"),
            "rss_mib": float(np.median(get("rss_bytes"))) if inst else float("nan"),
            "helpers_pss_mib": float(np.median([i["helpers"]["pss_bytes"] / 2**20 for i in inst]))
            if inst else float("nan"),
            "status_uss_mib": float(np.median(status_uss)) if status_uss else None,
            "snapshot_mib": snap.get("memory_bytes", 0) / 2**20 if snap else None,
        })
    return rows


def plot(an, lat, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(FUNCTION_ORDER), figsize=(5 * len(FUNCTION_ORDER), 8.5))
    for col, fn in enumerate(FUNCTION_ORDER):
        keys = [k for k in an if an[k]["function"] == fn]
        labels = [f"{an[k]['runtime']}\n{an[k]['path']}" for k in keys]
        ax = axes[0][col]
        data = [_RAW[(an[k]["runtime"], fn, an[k]["path"], "init")] for k in keys]
        _box(ax, data, labels, [an[k]["init"] for k in keys])
        ax.set_title(f"{fn}: startup time (Init Duration)")
        ax.set_ylabel("ms (log)")
        ax.set_yscale("log")
        ax = axes[1][col]
        data, lbl, st = [], [], []
        for k in keys:
            a = an[k]
            for which in ("first", "steady"):
                data.append(_RAW[(a["runtime"], fn, a["path"], which)])
                lbl.append(f"{SHORT.get(a['runtime'], a['runtime'])} {a['path']}\n"
                           f"{'1st' if which == 'first' else 'next 5'}")
                st.append(a[which])
        _box(ax, data, lbl, st)
        ax.set_title(f"{fn}: service time (REPORT Duration)")
        ax.set_ylabel("ms")
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("kiln start paths: startup (cf. thesis Fig. 3) and first vs later service time "
                 "(Fig. 4); black bars: median with bootstrap 95% CI", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _box(ax, data, labels, stats):
    pos = np.arange(1, len(data) + 1)
    ax.boxplot([d if len(d) else [np.nan] for d in data], positions=pos, widths=0.5,
               showfliers=False, medianprops={"color": "tab:orange"})
    rng = np.random.default_rng(1)
    for p, d in zip(pos, data):
        ax.scatter(p + rng.uniform(-0.18, 0.18, len(d)), d, s=6, alpha=0.35, color="tab:blue")
    for p, s in zip(pos, stats):
        if s["n"]:
            ax.errorbar(p + 0.32, s["median"], yerr=[[s["median"] - s["ci95"][0]], [s["ci95"][1] - s["median"]]],
                        fmt="o", color="black", ms=3, capsize=3)
    ax.set_xticks(pos)
    ax.set_xticklabels(labels, fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def load_latency(work):
    """latency.json, with the cases of every latency-TAG.json (other kiln configurations) added."""
    lat = json.loads((work / "latency.json").read_text())
    for extra in sorted(work.glob("latency-*.json")):
        more = json.loads(extra.read_text())
        lat["cases"].update(more["cases"])
        lat.setdefault("runs", {})[extra.stem] = {k: more.get(k) for k in ("interference", "loadavg", "paths")}
    # One order for every table: function, then runtime, then path as PATHS lists them.
    order = {f"{rt}/{fn}/{p}": i for i, (rt, fn, p) in enumerate(cases())}
    lat["cases"] = dict(sorted(lat["cases"].items(), key=lambda kv: order.get(kv[0], len(order))))
    return lat


def write(args, work):
    lat = load_latency(work)
    mem = json.loads((work / "memory.json").read_text()) if (work / "memory.json").exists() else None
    an = analyse(lat)
    for key, case in lat["cases"].items():
        rt, fn, path = key.split("/")
        ok = [s for s in case["samples"] if "init_ms" in s and s.get("start_path") == path]
        _RAW[(rt, fn, path, "e2e")] = [s["e2e_ms"] for s in ok]
        _RAW[(rt, fn, path, "init")] = [s["init_ms"] for s in ok]
        _RAW[(rt, fn, path, "first")] = [s["duration_ms"] for s in ok]
        _RAW[(rt, fn, path, "steady")] = [w["duration_ms"] for s in ok for w in s["warm"]]
    comp = compare_paths(an)
    floor = {rt: median_ci(v, "floor" + rt) for rt, v in lat["floor"].items()}
    mrows = memory_rows(mem) if mem else []
    machine = core.machine_info(argparse.Namespace(profile="release"))
    if (work / "build.json").exists():  # the tree as it was built, rather than as it is now
        machine.update(json.loads((work / "build.json").read_text()))
    quiet = json.loads(args.quiet_info)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": args.command, "machine": machine, "quiet": quiet,
        "n": lat["n"], "warm_after_cold": 5, "warmup_invocations": WARMUP_INVOCATIONS,
        "paths": {f"{rt}/{p}": cfg for (rt, p), cfg in PATHS.items()},
        "analysis": public(an), "comparison": public(comp), "floor": public(floor),
        "memory": mrows, "interference": lat.get("interference"), "loadavg": lat.get("loadavg"),
        "snapshots": lat.get("snapshots"),
        "raw": {"latency": lat, "memory": mem},
    }
    (out / "startpaths.json").write_text(json.dumps(summary, indent=1))
    plot(an, lat, out / "startpaths.png")
    (out / "startpaths.md").write_text(markdown(summary, an, comp, floor, mrows, lat, mem))


def verdict(ok):
    return "met" if ok else "**missed**"


def markdown(s, an, comp, floor, mrows, lat, mem):
    m, q = s["machine"], s["quiet"]
    inter = s.get("interference") or {}
    L = []
    L.append("# kiln start paths: coldest, warm and hot (Prebaking-style) vs the thesis' snapshot methods\n")
    L.append(f"Generated {s['generated']} by `{s['command']}` at commit `{m['git_commit'][:12]}`.\n")
    # Other tenants' share: counted directly (processes outside the benchmark), where recorded.
    others = inter.get("others_direct_pct", inter.get("others_pct", 0))
    inter = dict(inter, others_pct=others)
    busy = float(q.get("loadavg_before", "0 0 0").split()[0]) >= 0.5
    if busy or others > 5:
        L.append(f"> **The machine was not quiet.** 1-minute load average {q.get('loadavg_before')} "
                 f"when measuring began (after waiting {q.get('waited_s')} s for < 0.5); other "
                 f"tenants took {inter.get('others_pct', float('nan')):.0f}% of the machine during "
                 "the latency phase. Read the absolute numbers with that in mind; the ratios "
                 "between paths, measured interleaved, are more robust.\n")
    else:
        L.append(f"Quiet machine: 1-minute load average {q.get('loadavg_before')} when measuring "
                 f"began (waited {q.get('waited_s')} s); other tenants took "
                 f"{inter.get('others_pct', float('nan')):.1f}% of the machine during the latency phase.\n")
    L.append("Every figure: median [bootstrap 95% CI of the median, 10,000 resamples], in ms. "
             f"n = cold starts on the expected path (of {s['n']} per case). Cases run interleaved, "
             "in an order rotated each round.\n")

    # ------------------------------------------------------------------ targets
    L.append("## Targets\n")
    L.append("| target | measured | verdict |\n|---|---|---|")
    for fn in FUNCTION_ORDER:
        a = an.get(f"python/{fn}/hot")
        if a and a["e2e"]["n"]:
            L.append(f"| Python hot path, {fn}: end-to-end cold p50 ≤ {TARGETS['python_hot_e2e_p50_ms']:.0f} ms "
                     f"| {fmt(a['e2e'])} | {verdict(a['e2e']['median'] <= TARGETS['python_hot_e2e_p50_ms'])} |")
    for fn in FUNCTION_ORDER:
        a = an.get(f"wasm/{fn}/hot")
        if a and a["e2e"]["n"]:
            L.append(f"| wasm hot path, {fn}: end-to-end cold p50 ≤ {TARGETS['wasm_hot_e2e_p50_ms']} ms "
                     f"| {fmt(a['e2e'], digits=3)} | {verdict(a['e2e']['median'] <= TARGETS['wasm_hot_e2e_p50_ms'])} |")
    probe = lat.get("idle_probe")
    if probe:
        b2b = median_ci(probe["wasm"]["back_to_back"], "probe-b2b")
        L.append(f"| wasm hot path, noop, requests back to back (each a fresh instance, so each a cold "
                 f"start): end-to-end p50 ≤ {TARGETS['wasm_hot_e2e_p50_ms']} ms | {fmt(b2b, digits=3)} "
                 f"| {verdict(b2b['median'] <= TARGETS['wasm_hot_e2e_p50_ms'])} |")
    for fn in ("noop", "markdown"):
        best = min((a for a in an.values() if a["runtime"] == "node" and a["function"] == fn and a["e2e"]["n"]),
                   key=lambda a: a["e2e"]["median"], default=None)
        if best:
            L.append(f"| Node {fn}, best path ({best['path']}): end-to-end cold p50 ≤ "
                     f"{TARGETS['node_best_e2e_p50_ms']:.0f} ms | {fmt(best['e2e'])} "
                     f"| {verdict(best['e2e']['median'] <= TARGETS['node_best_e2e_p50_ms'])} |")
    for row in comp:
        if row["function"] == "big" and row["path"] == "hot":
            r = row["e2e"]
            L.append(f"| Big, {row['runtime']}: {row['path']} ≥ {TARGETS['big_hot_speedup']:.0f}× faster than "
                     f"coldest (end-to-end) | {r['ratio']:.1f}× [{r['ci95'][0]:.1f}, {r['ci95'][1]:.1f}] "
                     f"| {verdict(r['ratio'] >= TARGETS['big_hot_speedup'])} |")
    for key, a in an.items():
        if a["path"] != "coldest" and a["first"]["n"] and a["steady"]["n"]:
            r = a["first_vs_steady"]
            within = abs(r["ratio"] - 1) * 100 <= TARGETS["first_within_pct"]
            L.append(f"| {a['runtime']} {a['function']} {a['path']}: first-request service time within "
                     f"{TARGETS['first_within_pct']:.0f}% of steady | first/steady = {r['ratio']:.2f} "
                     f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] ({fmt(a['first'], digits=3)} vs "
                     f"{fmt(a['steady'], digits=3)} ms; difference "
                     f"{a['first']['median'] - a['steady']['median']:+.3f} ms) | {verdict(within)} |")
    L.append("")

    # ------------------------------------------------------------------ cold starts
    L.append("## Cold starts\n")
    L.append("End-to-end: client clock, from before signing the Invoke to its last byte, on a "
             "persistent connection. Init: the REPORT line's `Init Duration` (for `hot`: from the "
             "fork request to the fork's `ready`). Outside: end-to-end − Init − Duration, i.e. "
             "the sandbox, kiln's routing, the client and the wire.\n")
    L.append("| runtime | function | path | n | end-to-end cold | Init Duration | outside init+handler | warm end-to-end (next 5) |")
    L.append("|---|---|---|---:|---:|---:|---:|---:|")
    for key, a in an.items():
        note = f" (other paths seen: {', '.join(a['other_paths'])})" if a["other_paths"] else ""
        L.append(f"| {a['runtime']} | {a['function']} | {a['path']}{note} | {a['e2e']['n']} | "
                 f"{fmt(a['e2e'])} | {fmt(a['init'])} | {fmt(a['outside'])} | {fmt(a['warm_e2e'], digits=3)} |")
    L.append("")
    L.append("Floor (the client's own cost): a warm NoOp Invoke, end-to-end, "
             + ", ".join(f"{rt} {fmt(f, digits=3)} ms (n = {f['n']})" for rt, f in floor.items())
             + (f"; of which SigV4 signing alone {fmt(median_ci(lat['sign_ms'], 'sign'), digits=3)} ms"
                if lat.get("sign_ms") else "") + ".\n")
    if probe:
        idle = probe["idle_ms"]
        w, e = probe["wasm"], probe["echo_us"]
        cells = {k: median_ci(v, "probe-w" + k) for k, v in w.items()}
        echo = {k: median_ci(v, "probe-e" + k) for k, v in e.items()}
        L.append("### The machine's idle penalty\n")
        slow_wasm = cells['after_idle']['median'] / cells['back_to_back']['median']
        slow_echo = echo['after_idle']['median'] / echo['back_to_back']['median']
        L.append(f"On this machine (a KVM guest on a shared host) a request that follows {idle} ms of "
                 f"idle time runs several times slower than one that follows another ({slow_wasm:.1f}× "
                 f"for kiln's wasm Invoke below, {slow_echo:.1f}× for a bare TCP echo), whatever "
                 "serves it: caches and the host's scheduling, not kiln. Every cold sample above "
                 "follows a reap and a pause, so the driver sends a wake request (a "
                 "GetFunctionConfiguration) right before each Invoke it times, cold and steady "
                 "alike. The same wasm NoOp Invoke (each request is a fresh instance of the "
                 "pre-initialised module: a cold start on the hot path), and a 512-byte TCP echo "
                 "between two processes on loopback, timed three ways:\n")
        L.append("| | back to back | after idle | after idle and a wake request | after idle / back to back |")
        L.append("|---|---:|---:|---:|---:|")
        L.append(f"| wasm NoOp Invoke, ms | {fmt(cells['back_to_back'], digits=3)} | "
                 f"{fmt(cells['after_idle'], digits=3)} | {fmt(cells['after_idle_wake'], digits=3)} | "
                 f"{cells['after_idle']['median'] / cells['back_to_back']['median']:.1f}× |")
        L.append(f"| TCP echo (no kiln), µs | {fmt(echo['back_to_back'], digits=1)} | "
                 f"{fmt(echo['after_idle'], digits=1)} | – | "
                 f"{echo['after_idle']['median'] / echo['back_to_back']['median']:.1f}× |")
        L.append("")
    if comp:
        L.append("### Coldest vs the other paths (ratio of medians coldest/path, bootstrap 95% CI; Mann-Whitney U two-sided p)\n")
        L.append("| runtime | function | path | end-to-end ratio | p | Init Duration ratio | p |")
        L.append("|---|---|---|---:|---:|---:|---:|")
        for r in comp:
            L.append(f"| {r['runtime']} | {r['function']} | {r['path']} | {r['e2e']['ratio']:.1f}× [{r['e2e']['ci95'][0]:.1f}, "
                     f"{r['e2e']['ci95'][1]:.1f}] | {r['e2e_p']:.1e} | {r['init']['ratio']:.1f}× "
                     f"[{r['init']['ci95'][0]:.1f}, {r['init']['ci95'][1]:.1f}] | {r['init_p']:.1e} |")
        L.append("")

    # ------------------------------------------------------------------ XFaaS Table 2
    cell = lambda k: (f"{fmt(an[k]['e2e'])} (Init {fmt(an[k]['init'])})"  # noqa: E731
                      if k in an and an[k]["e2e"]["n"] else "–")
    L.append("### XFaaS Table 2, side by side (NoOp; end-to-end cold, with Init Duration, ms)\n")
    L.append("XFaaS measured a new instance by forking a ready wasm instance inside a session container "
             "(Fork), by a new container for an existing session namespace (CopySession), by a new "
             "namespace (ColdSession) and by a plain container cold start. kiln's counterparts: a fresh "
             "instance of a pre-initialised module (wasm `hot`) or a fork of a zygote (Python `hot`); "
             "a runtime container booted ahead and given the function (`warm`); a new sandbox "
             "(`coldest`). kiln has no session containers yet: CopySession and ColdSession proper come "
             "with them.\n")
    L.append("| method | XFaaS | kiln wasm | kiln Python | kiln Node |\n|---|---:|---:|---:|---:|")
    L.append(f"| fork of a ready instance | 1.98 | {cell('wasm/noop/hot')} | {cell('python/noop/hot')} | "
             f"{cell('node/noop/hot')} (a function standby) |")
    L.append(f"| copy of a ready container | 263 | – | {cell('python/noop/warm')} | {cell('node/noop/warm')} |")
    L.append(f"| cold container | 262 | {cell('wasm/noop/coldest')} | {cell('python/noop/coldest')} | "
             f"{cell('node/noop/coldest')} |")
    L.append("")

    # ------------------------------------------------------------------ where the hot path's time goes
    mig = lat.get("cgroup_migration_ms")
    hot = [a for a in an.values() if a["path"] == "hot" and a["init"]["n"]]
    if mig and hot:
        first = next(iter(mig))
        mstats = {c: median_ci(v, "mig" + c) for c, v in mig.items()}
        L.append("### Where the hot path's time goes\n")
        L.append("On `hot`, Init Duration runs from the fork request to the fork's `ready`: a cgroup "
                 "for the fork, the request to the zygote, `fork()`, the child taking over its "
                 "sockets, and `Cgroup::adopt` moving the fork into its cgroup (one `cgroup.procs` "
                 "write per controller). The last is the expensive step on this host. Measured on "
                 "its own right after the latency phase (a `sleep` process moved into fresh cgroups, "
                 f"in kiln's order, n = {mstats[first]['n']}): "
                 + ", ".join(f"{c} {fmt(st, digits=3)} ms" for c, st in mstats.items())
                 + ". The first write pays for the kernel's cgroup_threadgroup_rwsem (a per-CPU rwsem) "
                 "leaving its reader fast path, which waits for an RCU grace period; it does so "
                 "whichever controller comes first (checked by reordering), and the writes right "
                 "after it are cheap. Hot Init Duration medians: "
                 + ", ".join(f"{a['function']} {fmt(a['init'])} ms" for a in hot)
                 + ". Ways out, not tried here: the `favordynmods` cgroup mount option (Linux 6.x) "
                 "keeps that rwsem on its slow path, so a migration no longer waits for a grace "
                 "period; on cgroup v2, `clone3` with `CLONE_INTO_CGROUP` creates a process in its "
                 "cgroup without a migration; or forks made ahead of demand.\n")

    # ------------------------------------------------------------------ service time
    L.append("## First-request vs steady service time (REPORT `Duration`)\n")
    L.append("First: the cold invocation. Steady: the next 5 invocations on the same instance "
             f"(up to 5 per cold start). The hot path's zygote ran init plus {WARMUP_INVOCATIONS} "
             "warm-up invocations with `{}` before it was forked, and each spare fork one more "
             "(Python: the fork's first request would otherwise copy from the zygote every page "
             "it writes). Every request, first or steady, follows a pause and a wake request.\n")
    L.append("| runtime | function | path | first | steady | first/steady | Mann-Whitney p |")
    L.append("|---|---|---|---:|---:|---:|---:|")
    for key, a in an.items():
        r = a["first_vs_steady"]
        p = a.get("first_vs_steady_p")
        L.append(f"| {a['runtime']} | {a['function']} | {a['path']} | {fmt(a['first'], digits=3)} | "
                 f"{fmt(a['steady'], digits=3)} | {r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | "
                 f"{'–' if p is None else f'{p:.1e}'} |")
    L.append("")

    # ------------------------------------------------------------------ memory
    if mrows:
        L.append("## Memory of idle instances\n")
        L.append(f"{mem['k']} instances per case started concurrently (each held busy 3 s so that "
                 "none is reused), then read while idle. Runtime: the `smaps_rollup` of the "
                 "runtime process(es) in the instance's cgroup (forks: the fork; the zygote is "
                 "counted separately). USS = private pages; PSS = private + a share of pages "
                 "shared with the zygote, the other forks and other processes (libraries). "
                 "Helpers: kiln's sandbox helper and PID 1 of a coldest sandbox (forks share the "
                 "zygote's). Medians over the instances, MiB.\n")
        L.append("| runtime | function | path | instances | start paths | USS | PSS | RSS | helpers PSS | zygote (once per function) |")
        L.append("|---|---|---|---:|---|---:|---:|---:|---:|---:|")
        for r in mrows:
            snap = "–" if r["snapshot_mib"] is None else f"{r['snapshot_mib']:.1f}"
            L.append(f"| {r['runtime']} | {r['function']} | {r['path']} | {r['instances']} | "
                     f"{', '.join(p or '–' for p in r['start_paths'])} | "
                     f"{r['uss_mib']:.1f} | {r['pss_mib']:.1f} | {r['rss_mib']:.1f} | "
                     f"{r['helpers_pss_mib']:.1f} | {snap} |")
        L.append("")
        failed = [r for r in mrows if r["errors"]]
        for r in failed:
            L.append(f"**{r['runtime']} {r['function']} {r['path']}: {len(r['errors'])} of {mem['k']} "
                     f"invocations failed** (first: `{r['errors'][0][:200]}`); the row counts the "
                     "instances that were idle afterwards.\n")

    # ------------------------------------------------------------------ anchors
    L.append("## Against the thesis\n")
    L.append("The thesis (Silva & Pereira 2021, UFCG) compared Prebaking (a CRIU snapshot taken "
             "after the function's init and a warm-up) with SEUSS (unikernel snapshots cached "
             "on demand) on Node 4.3, n = 100, on an 8-core i7-8550U. kiln's `hot` path is "
             "Prebaking's idea without a restore from disk: a fork of a live zygote that ran init "
             "and the warm-up; `lazy` (SEUSS-like, built after the first start) is not measured "
             "here.\n")
    L.append("| thesis | value | kiln, same function |\n|---|---|---|")
    look = lambda k, m: fmt(an[k][m]) + " ms" if k in an and an[k][m]["n"] else "–"  # noqa: E731
    L.append(f"| Prebaking (CRIU restore), NoOp startup | {ANCHORS['Prebaking (CRIU restore), NoOp startup']} "
             f"| Python hot Init {look('python/noop/hot', 'init')}; end-to-end {look('python/noop/hot', 'e2e')} |")
    L.append(f"| SEUSS, NoOp startup | {ANCHORS['SEUSS, NoOp startup']} | Node coldest Init "
             f"{look('node/noop/coldest', 'init')}; Python coldest Init {look('python/noop/coldest', 'init')} |")
    L.append(f"| SEUSS, Markdown startup | {ANCHORS['SEUSS, Markdown startup']} | Python hot Init "
             f"{look('python/markdown/hot', 'init')}; Node coldest Init {look('node/markdown/coldest', 'init')} |")
    fvs = lambda k: (f"first/steady {an[k]['first_vs_steady']['ratio']:.2f}" if k in an and an[k]["first"]["n"] else "–")  # noqa: E731
    L.append(f"| Prebaking, Markdown first request | {ANCHORS['Prebaking, Markdown first-request service time']} "
             f"| Python hot {fvs('python/markdown/hot')} |")
    L.append(f"| SEUSS, Markdown first request | {ANCHORS['SEUSS, Markdown first-request service time']} "
             f"| Python coldest {fvs('python/markdown/coldest')}; Node coldest {fvs('node/markdown/coldest')} |")
    big_anchor = ANCHORS["thesis' Big (Node 4.3, cold, no snapshot)"]
    L.append(f"| Big, cold | {big_anchor} "
             f"| Node coldest end-to-end {look('node/big/coldest', 'e2e')}; Python coldest "
             f"{look('python/big/coldest', 'e2e')}; Python hot {look('python/big/hot', 'e2e')} |")
    L.append("")

    # ------------------------------------------------------------------ method
    L.append("## Method\n")
    L.append("- **Functions** (bench/startpaths/functions, packages generated by "
             "bench/startpaths/generate.py, deterministic): NoOp; Markdown (Node: showdown 2.1.0, "
             "the thesis' library; Python: Python-Markdown 3.11.3, chosen over mistune because, like "
             "showdown, it is a pure-language, regex-driven converter whose first call compiles "
             "and caches its patterns, so it shows the same first-request effect the thesis "
             "studies) rendering a seeded ~28 KB document read from the package on every "
             "invocation; Big: 41 generated modules of ~1 MB (constant tables and functions, 41 MB "
             "of source) imported at init; Python's copy ships unchecked-hash bytecode, as an "
             "installed package would (the sandbox's /var/task is read-only, so without it every "
             "cold start would compile 41 MB of source).")
    L.append("- **Paths**: " + "; ".join(f"`{rt}/{p}` = KilnPrebake `{json.dumps(c)}`" for (rt, p), c in PATHS.items())
             + ". Memory 256 MB (Big: 1024 MB).")
    L.append("- **Cold starts**: kiln runs with `--idle-ttl 0`, so an idle instance is reaped at the "
             "agent's next reaper tick (≤ 0.5 s). Before each sample the driver waits until "
             "status shows no instance of the function, then 150 ms for its teardown, then sends "
             "a wake request (untimed, see \"The machine's idle penalty\") and one Invoke "
             "(`X-Amz-Log-Type: Tail`), then 5 more, each after a 20 ms pause and a wake request, "
             "so that first and steady requests follow the same idle time (same instance: "
             "warm-first routing; a sample whose warm invocation reports an Init Duration is cut "
             "there). "
             "A cold sample counts if its REPORT has an Init Duration and the expected Start Path.")
    L.append("- **Client**: Python `http.client`, one keep-alive connection, TCP_NODELAY, each "
             "request signed with botocore's SigV4 inside the timed region.")
    L.append("- **Statistics**: medians with percentile-bootstrap 95% CIs (numpy, 10,000 resamples; "
             "ratios from independent resamples of both sides); two-sided Mann-Whitney U "
             "(scipy.stats.mannwhitneyu).")
    L.append("")
    L.append("## Machine\n")
    L.append(f"{m['cpu_model']}, {m['cpus']} CPUs ({m['hypervisor']} guest), {m['memory_gib']} GiB, "
             f"kernel {m['kernel']}; {m['node']}, {m['python']}; kiln release build. Load average "
             f"at the latency phase's start/end: {' '.join((s.get('loadavg') or {}).get('start', []))} / "
             f"{' '.join((s.get('loadavg') or {}).get('end', []))}; CPU of other tenants during it "
             f"{inter.get('others_pct', float('nan')):.1f}% of the machine.\n")
    if m.get("git_modified"):
        L.append(f"Built from HEAD plus working-tree changes: {', '.join(m['git_modified'])}.\n")
    L.append("Plots: `startpaths.png`. Raw samples: `startpaths.json` (`raw`).\n")
    return "\n".join(L)
