"""Function errors on the fast path on a real kiln: an error the JavaScript runtime raises in the
handler (a property of `undefined` or `null` read or set), and an async handler's rejection (a
throw of an `Error`, a string, a number), answered fast as Node's runtime answers them: the same
`errorType` and `errorMessage`, the same `Invoke Error` line but for its stack. What the fast path
cannot word as V8 does (a call of a value that is not a function, whose message quotes the source;
a `ReferenceError`; `Promise.reject`; a rejection with `undefined`; any such error where a `try`
or a destructuring is traced) misses and Node answers. Each case is compared with a plain copy of
the function."""

import base64
import json
import re

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import wait_for

NODE = "nodejs20.x"

# No `try` and no destructuring: an error the runtime raises here is the function's error.
HANDLER = r"""
const table = { up: (s) => s.toUpperCase() };
exports.handler = async (event) => {
  console.log("case", event.case);
  switch (event.case) {
    case "read": { const o = event.obj; return { x: o.x }; }
    case "read-key": { const o = event.obj; return { v: o[event.key] }; }
    case "read-deep": { const o = event.obj; return { deep: o.inner.leaf }; }
    case "method": { const o = event.obj; return { s: o.label.trim() }; }
    case "set": { const o = event.obj; o.count = 1; return { set: true }; }
    case "call": { const f = table[event.op]; return { s: f(event.s) }; }
    case "reference": { if (event.defined) return { ok: 1 }; return { r: notDefinedAnywhere + 1 }; }
    case "throw-error": { if (event.ok) return { ok: 1 }; throw new TypeError("bad input: " + event.why); }
    case "throw-string": { if (event.ok) return { ok: 1 }; throw "plain " + event.why; }
    case "throw-number": { if (event.ok) return { ok: 1 }; throw event.n; }
    case "throw-undefined": { if (event.ok) return { ok: 1 }; throw event.missing; }
    case "reject": { if (event.ok) return { ok: 1 }; await Promise.reject(new Error("rejected " + event.why)); return {}; }
    default: return { unknown: event.case };
  }
};
"""

# The same reads, in a function that also has a `try` (which could catch them) and a destructuring
# (which V8 words otherwise): the runtime's errors miss.
GUARDED = r"""
exports.handler = async (event) => {
  const { obj } = event;
  if (event.case === "caught") {
    try { return { x: obj.x }; } catch (e) { return { caught: e.message }; }
  }
  const o = event.obj;
  return { x: o.x };
};
"""

TRAINING = [
    {"case": "read", "obj": {"x": 1}},
    {"case": "read-key", "obj": {"a b": 2}, "key": "a b"},
    {"case": "read-deep", "obj": {"inner": {"leaf": 3}}},
    {"case": "method", "obj": {"label": " l "}},
    {"case": "set", "obj": {}},
    {"case": "call", "op": "up", "s": "x"},
    {"case": "reference", "defined": True},
    {"case": "reference"},
    {"case": "throw-error", "ok": True},
    {"case": "throw-error", "why": "w"},
    {"case": "throw-string", "ok": True},
    {"case": "throw-string", "why": "w"},
    {"case": "throw-number", "ok": True},
    {"case": "throw-number", "n": 7},
    {"case": "throw-undefined", "ok": True},
    {"case": "throw-undefined"},
    {"case": "reject", "ok": True},
    {"case": "reject", "why": "w"},
]

# (event, whether the fast path answers it).
CASES = [
    ({"case": "read"}, True),
    ({"case": "read", "obj": None}, True),
    ({"case": "read-key", "key": "it's"}, True),
    ({"case": "read-key", "obj": None, "key": 1.5}, True),
    ({"case": "read-deep", "obj": {}}, True),
    ({"case": "read-deep", "obj": {"inner": None}}, True),
    ({"case": "method", "obj": {}}, True),
    ({"case": "set", "obj": None}, True),
    ({"case": "set"}, True),
    ({"case": "call", "op": "down", "s": "x"}, False),
    ({"case": "reference"}, False),
    ({"case": "throw-error", "why": "again"}, True),
    ({"case": "throw-string", "why": "again"}, True),
    ({"case": "throw-number", "n": 42}, True),
    ({"case": "throw-undefined"}, False),
    ({"case": "reject", "why": "again"}, False),
]

LOG_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")
STACK = re.compile(r'"stack":\[.*?\]')


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-err")


def call(kiln, name, event):
    r = kiln.client().invoke(FunctionName=name, Payload=json.dumps(event).encode(), LogType="Tail")
    tail = base64.b64decode(r.get("LogResult", "")).decode()
    return r["Payload"].read(), r.get("FunctionError"), tail


def function_lines(tail):
    """The function's own lines and the runtime's, ids, times and an error's stack masked."""
    return [STACK.sub('"stack":*', LOG_NOISE.sub("*", line)) for line in tail.splitlines()
            if line and not line.startswith(("START ", "END ", "REPORT ", "INIT_START"))]


def deploy_pair(kiln, tmp_path, prefix, source, training):
    fast, plain = unique(f"bo-err-{prefix}-fast"), unique(f"bo-err-{prefix}")
    (tmp_path / "index.js").write_text(source)
    kiln.cli("deploy", fast, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", str(len(training)))
    kiln.cli("deploy", plain, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path))
    wait_for(lambda: status(kiln, fast)["Mode"] == "tracing", timeout=60, what="instrumented")
    for event in training:
        kiln.invoke(fast, event)
    wait_for(lambda: status(kiln, fast)["Mode"] == "decontainerized", timeout=60, what="compiled")
    return fast, plain


def compare(kiln, fast, plain, event):
    """Invokes both copies with `event`: the same answer or error (type, message, the fields the
    runtime sends) and the same log lines; whether the fast path answered."""
    want = call(kiln, plain, event)
    got = call(kiln, fast, event)
    assert got[1] == want[1], (event, got, want)
    if want[1]:
        body = lambda raw: {k: v for k, v in json.loads(raw).items() if k != "trace"}  # noqa: E731
        assert body(got[0]) == body(want[0]), (event, got[0], want[0])
        assert sorted(json.loads(got[0])) == sorted(json.loads(want[0])), (event, got[0], want[0])
    else:
        assert got[0] == want[0], (event, got, want)
    assert function_lines(got[2]) == function_lines(want[2]), (event, got[2], want[2])
    return "Mode: decontainerized" in got[2], want


def test_runtime_errors_and_rejections_answer_as_node(kiln, tmp_path):
    fast, plain = deploy_pair(kiln, tmp_path, "h", HANDLER, TRAINING)
    for event, answered_fast in CASES:
        was_fast, want = compare(kiln, fast, plain, event)
        assert want[1], (event, want)
        assert was_fast == answered_fast, (event, was_fast, want)
    # A few of Node's answers, as the runtime words them.
    expected = {
        json.dumps({"case": "read"}): ("TypeError", "Cannot read properties of undefined (reading 'x')"),
        json.dumps({"case": "read-key", "obj": None, "key": 1.5}):
            ("TypeError", "Cannot read properties of null (reading '1.5')"),
        json.dumps({"case": "set", "obj": None}): ("TypeError", "Cannot set properties of null (setting 'count')"),
        json.dumps({"case": "call", "op": "down", "s": "x"}): ("TypeError", "f is not a function"),
        json.dumps({"case": "reference"}): ("ReferenceError", "notDefinedAnywhere is not defined"),
        json.dumps({"case": "throw-string", "why": "again"}): ("string", "plain again"),
        json.dumps({"case": "throw-undefined"}): ("string", "handled"),
    }
    for raw, (error_type, message) in expected.items():
        body = json.loads(call(kiln, plain, json.loads(raw))[0])
        assert (body["errorType"], body["errorMessage"]) == (error_type, message), (raw, body)
    # On-trace answers are still fast.
    was_fast, _ = compare(kiln, fast, plain, {"case": "read", "obj": {"x": 9}})
    assert was_fast


def test_a_try_or_a_destructuring_in_the_trace_makes_the_runtimes_errors_miss(kiln, tmp_path):
    training = [{"case": "caught", "obj": {"x": 1}}, {"case": "read", "obj": {"x": 2}}]
    fast, plain = deploy_pair(kiln, tmp_path, "g", GUARDED, training)
    for event in [{"case": "read"}, {"case": "read", "obj": None}]:
        was_fast, want = compare(kiln, fast, plain, event)
        assert want[1], (event, want)
        assert not was_fast, event
    was_fast, _ = compare(kiln, fast, plain, {"case": "read", "obj": {"x": 3}})
    assert was_fast
