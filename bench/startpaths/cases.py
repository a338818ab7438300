"""The cases of bench/startpaths: runtimes, start paths and functions, the case table they
make, and the targets and anchors the report holds them to. startpaths.py (the driver) and
report.py both read them from here.
"""

# A runtime: how kiln runs it. A path: the KilnPrebake configuration that selects it (`warm` and
# `coldest` share one: `off`; the kiln they run on has runtime standbys or not). New start paths
# or runtimes are one entry in RUNTIMES and/or PATHS.
RUNTIMES = {
    "python": {"runtime": "python3.11", "handler": "app.handler"},
    "node": {"runtime": "nodejs20.x", "handler": "index.handler"},
    "wasm": {"runtime": "wasm", "handler": "function.wasm"},
}
WARMUP_INVOCATIONS = 10
PATHS = {
    ("python", "coldest"): {"Mode": "off"},
    ("python", "warm"): {"Mode": "off"},
    ("python", "hot"): {"Mode": "deploy", "WarmupInvocations": WARMUP_INVOCATIONS, "WarmupEvent": {}},
    ("node", "coldest"): {"Mode": "off"},
    ("node", "warm"): {"Mode": "off"},
    ("node", "hot"): {"Mode": "deploy", "WarmupInvocations": WARMUP_INVOCATIONS, "WarmupEvent": {}},
    # wasm: every request is a fresh instance; `off` runs the plain module, `deploy` the module
    # pre-initialised by its `kiln_init` export.
    ("wasm", "coldest"): {"Mode": "off"},
    ("wasm", "hot"): {"Mode": "deploy"},
}
# Runtimes without a function: wasm has NoOp and Markdown (as the brief asks), no Big.
SKIP = {("wasm", "big")}
FUNCTIONS = {
    # name: MemorySize (MB), Timeout (s). Big's timeout also bounds its init (kiln: max(10 s,
    # Timeout)), which 20 concurrent Big cold starts on two cores need.
    "noop": (256, 30),
    "markdown": (256, 30),
    "big": (1024, 120),
}
FUNCTION_ORDER = ["noop", "markdown", "big"]
WARM_AFTER_COLD = 5
# Before each warm (steady) invocation the driver pauses this long and wakes kiln, as before the
# cold one: long enough for the machine's idle penalty (which saturates by 10 ms, see
# idle_probe), short enough that the reaper (every 0.5 s) rarely takes the instance in between.
STEADY_GAP_S = 0.02
# Targets and anchors from the brief and the thesis (ms).
TARGETS = {"python_hot_e2e_p50_ms": 5.0, "big_hot_speedup": 10.0, "first_within_pct": 10.0,
           "wasm_hot_e2e_p50_ms": 0.5, "node_best_e2e_p50_ms": 10.0}
ANCHORS = {
    "Prebaking (CRIU restore), NoOp startup": "8 ms",
    "SEUSS, NoOp startup": "12–14 ms",
    "SEUSS, Markdown startup": "12–13 ms",
    "Prebaking, Markdown first-request service time": "34% below later requests",
    "SEUSS, Markdown first-request service time": "≈68 ms vs ≈62 ms later (+9.6%)",
    "thesis' Big (Node 4.3, cold, no snapshot)": "5.6 s",
}


def cases(paths=None):
    return [(rt, fn, path) for fn in FUNCTION_ORDER for (rt, path) in PATHS
            if (rt, fn) not in SKIP and (paths is None or path in paths)]


def fname(rt, fn, path):
    return f"sp-{rt}-{fn}-{path}"
