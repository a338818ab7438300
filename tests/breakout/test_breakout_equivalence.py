"""BREAKOUT's equivalence test (docs/breakout.md) for the benchmarks that need no intrinsics:
each is deployed twice on a real kiln, ordinary and with `KilnBreakout` `auto` traced on a fixed
training set until `decontainerized`, and both are driven with the same seeded random inputs
(hypothesis). Some inputs are off the traced paths (wrong types, walls, out-of-range
coordinates, which throw or take untraced branches). For every input the answer bytes, the
function error (its type and message) and the function's log lines (request ids and timestamps masked) must be
identical, and at least 90% of the on-trace inputs must have been served fast, so the test
cannot pass by missing everything."""

import base64
import json
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln_harness import ROOT, wait_for

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"
NODE = "nodejs20.x"
# Inputs per benchmark in CI; the benchmark run (bench/breakout) takes more.
EXAMPLES = 1000


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status(kiln, name):
    return kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json().get(
        "KilnBreakoutStatus", {})


LOG_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")


STACK = re.compile(r'"stack":\[.*?\]')


def function_lines(tail):
    """The function's own log lines: without START/END/REPORT, ids, times and an error's stack
    masked (the tracing instance's stack points into the instrumented copy)."""
    return [STACK.sub('"stack":*', LOG_NOISE.sub("*", line)) for line in tail.splitlines()
            if line and not line.startswith(("START ", "END ", "REPORT ", "INIT_START"))]


class Pair:
    """A benchmark deployed ordinary and fast, and what the comparison saw."""

    def __init__(self, kiln, bench, training):
        self.kiln = kiln
        self.ordinary, self.fast = unique(f"eq-{bench}"), unique(f"eq-{bench}-fast")
        code = str(FIXTURES / bench)
        kiln.cli("deploy", self.ordinary, "--runtime", NODE, "--handler", "index.handler", "--code", code)
        kiln.cli("deploy", self.fast, "--runtime", NODE, "--handler", "index.handler", "--code", code,
                 "--breakout", "auto", "--trace-requests", str(len(training)))
        wait_for(lambda: status(kiln, self.fast).get("Mode") == "tracing", timeout=60, what="instrumented")
        for event in training:
            kiln.invoke(self.fast, event)
        wait_for(lambda: status(kiln, self.fast).get("Mode") in ("decontainerized", "ordinary"),
                 timeout=60, what="compiled")
        assert status(kiln, self.fast)["Mode"] == "decontainerized", status(kiln, self.fast)
        self.on_trace = self.on_trace_fast = self.off_trace = 0

    def call(self, name, event):
        r = self.kiln.client().invoke(FunctionName=name, Payload=json.dumps(event).encode(), LogType="Tail")
        tail = base64.b64decode(r.get("LogResult", "")).decode()
        return r["Payload"].read(), r.get("FunctionError"), tail

    def compare(self, event, on_trace):
        want = self.call(self.ordinary, event)
        got = self.call(self.fast, event)
        assert got[1] == want[1], (event, got[1], want[1])
        if want[1]:
            # A function error: its type and message (a stack trace from the tracing instance
            # points into the instrumented copy).
            error = lambda body: {k: json.loads(body).get(k) for k in ("errorType", "errorMessage")}  # noqa: E731
            assert error(got[0]) == error(want[0]), (event, got[0], want[0])
        else:
            assert got[0] == want[0], (event, got[0], want[0])
        assert function_lines(got[2]) == function_lines(want[2]), event
        fast = "Mode: decontainerized" in got[2]
        if on_trace:
            self.on_trace += 1
            self.on_trace_fast += fast
        else:
            self.off_trace += 1

    def check_coverage(self):
        total = self.on_trace + self.off_trace
        assert self.off_trace >= total // 10, f"only {self.off_trace} of {total} inputs off the traces"
        assert self.on_trace_fast >= 0.9 * self.on_trace, \
            f"{self.on_trace_fast} of {self.on_trace} on-trace inputs served fast: {status(self.kiln, self.fast)}"


@pytest.fixture(scope="module")
def pairs(kiln):
    made = {}

    def get(bench, training):
        if bench not in made:
            made[bench] = Pair(kiln, bench, training)
        return made[bench]
    yield get
    # A tracing instance books memory on the shared kiln.
    lam = kiln.client()
    for pair in made.values():
        for name in (pair.ordinary, pair.fast):
            lam.delete_function(FunctionName=name)


AUTOCOMPLETE = [{"prefix": p} for p in ["ab", "a", "acc", "zz", "ad", "", "ac", "abs", "x"]]
MAZE = [{"x1": 0, "y1": 0, "x2": 29, "y2": 29}, {"x1": 2, "y1": 5, "x2": 20, "y2": 9},
        {"x1": 3, "y1": 0, "x2": 5, "y2": 5}, {"x1": -1, "y1": 0, "x2": 5, "y2": 5},
        {"x1": 0, "y1": 0, "x2": 0, "y2": 0}, {"x1": 10, "y1": 12, "x2": 1, "y2": 28},
        {"x1": 0, "y1": 0, "x2": 2, "y2": 29}]
SHIFT = [{"n": n} for n in (0, 1, 10, 500, 100000)]

PREFIX = st.text(alphabet="abcdefghilmnorstuvz", max_size=4)
ODD = st.one_of(st.integers(-5, 5), st.none(), st.booleans(), st.lists(st.integers(), max_size=2))

EQ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@EQ
@given(data=st.data())
def test_autocomplete(pairs, data):
    pair = pairs("autocomplete", AUTOCOMPLETE)
    if data.draw(st.integers(0, 4)) == 0:
        event = {"prefix": data.draw(ODD)}
        pair.compare(event, on_trace=False)
    else:
        pair.compare({"prefix": data.draw(PREFIX)}, on_trace=True)


@EQ
@given(data=st.data())
def test_maze(pairs, data):
    pair = pairs("maze", MAZE)
    if data.draw(st.integers(0, 4)) == 0:
        # Off the traces: not numbers, missing fields.
        event = {k: data.draw(ODD) for k in ("x1", "y1", "x2", "y2") if data.draw(st.booleans())}
        pair.compare(event, on_trace=False)
    else:
        # Walls and out-of-range cells included: the training set took those branches.
        event = {k: data.draw(st.integers(-1, 30)) for k in ("x1", "y1", "x2", "y2")}
        pair.compare(event, on_trace=True)


@settings(max_examples=EXAMPLES // 10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_shift(pairs, data):
    pair = pairs("shift", SHIFT)
    if data.draw(st.integers(0, 4)) == 0:
        pair.compare({"n": data.draw(st.one_of(st.text(max_size=3), st.floats(-3, 3)))}, on_trace=False)
    else:
        pair.compare({"n": data.draw(st.integers(0, 3000))}, on_trace=True)


@pytest.mark.parametrize("bench,training", [("autocomplete", AUTOCOMPLETE), ("maze", MAZE), ("shift", SHIFT)])
def test_inputs_were_off_the_traces_and_on_trace_ones_ran_fast(pairs, bench, training):
    """After the runs above: enough inputs were off the traces, and the on-trace ones ran fast."""
    pairs(bench, training).check_coverage()
