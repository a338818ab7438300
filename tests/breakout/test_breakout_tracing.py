"""KilnBreakout on a real kiln: the opt-in is stored, echoed and checked; a Node function with
`Mode` `auto` is instrumented at deploy time and traced by one tracing instance whose answers are
the real ones; after `TraceRequests` requests kiln pulls the trace tree over the shim, validates
it and compiles it; the trace holds code and types, never a value of an event."""

import json
import uuid

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import node_status, wait_for

NODE = "nodejs20.x"

# A handler with a branch and a loop, written as Lambda Node handlers are.
HANDLER = """
const WORDS = ["abandon", "ability", "able", "about", "above", "absent", "access", "act"];
exports.handler = async (event) => {
  const prefix = String(event.prefix || "");
  const out = [];
  let i = 0;
  while (i < WORDS.length) {
    if (WORDS[i].startsWith(prefix)) out.push(WORDS[i]);
    i += 1;
  }
  return { prefix, matches: out, count: out.length };
};
"""


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-")


def create(kiln, name, body):
    base = {
        "FunctionName": name,
        "Runtime": NODE,
        "Role": "arn:aws:iam::000000000000:role/test",
        "Handler": "index.handler",
        "Code": {"ZipFile": zip_b64({"index.js": HANDLER})},
    }
    base.update(body)
    return kiln.signed_request("POST", "/2015-03-31/functions", json.dumps(base))


def zip_b64(files):
    import base64

    from kiln_harness import zip_files

    return base64.b64encode(zip_files(files)).decode()


def test_the_opt_in_is_stored_echoed_and_checked(kiln):
    name = unique("bo-config")

    def refused(body):
        r = create(kiln, name, body)
        assert r.status_code == 400, r.text
        assert r.json()["__type"].endswith(("ValidationException", "InvalidRequestContentException")), r.text
        return r.json()["message"]

    assert "python3.11" in refused({"Runtime": "python3.11", "Handler": "app.handler",
                                    "KilnBreakout": {"Mode": "auto"}})
    assert "kilnBreakout.fastPathMemoryMb" in refused({"MemorySize": 128,
                                                       "KilnBreakout": {"Mode": "auto", "FastPathMemoryMb": 256}})
    assert "kilnBreakout.traceRequests" in refused({"KilnBreakout": {"Mode": "auto", "TraceRequests": 0}})
    assert "`on`" in refused({"KilnBreakout": {"Mode": "on"}})
    assert "Bogus" in refused({"KilnBreakout": {"Mode": "auto", "Bogus": 1}})

    r = create(kiln, name, {"KilnBreakout": {"Mode": "auto"}})
    assert r.status_code == 201, r.text
    assert r.json()["KilnBreakout"] == {"Mode": "auto", "TraceRequests": 100, "MaxRetraces": 3,
                                        "FastPathTimeoutMs": 1000, "FastPathMemoryMb": 32}
    # Changing the runtime is checked against the stored opt-in.
    r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                            json.dumps({"Runtime": "python3.11"}))
    assert r.status_code == 400 and "nodejs" in r.json()["message"], r.text
    # `null` turns it off; a function without it shows neither block.
    kiln.settled(name)
    r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                            json.dumps({"KilnBreakout": None}))
    assert r.status_code == 200, r.text
    assert "KilnBreakout" not in r.json() and "KilnBreakoutStatus" not in r.json()


def test_a_function_is_traced_with_real_answers_then_its_trace_is_pulled_and_checked(kiln, tmp_path):
    name = unique("bo-trace")
    plain = unique("bo-plain")
    (tmp_path / "index.js").write_text(HANDLER)
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "4")
    kiln.cli("deploy", plain, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path))
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    assert status(kiln, name)["UnsupportedSites"] == 0
    shown = kiln.cli("get", name).stdout
    assert "Breakout" in shown and "tracing" in shown, shown

    secret = "sekret-" + uuid.uuid4().hex
    events = [{"prefix": "ab"}, {"prefix": secret}, {"prefix": "a"}, {}, {"prefix": "ac"}]
    modes = []
    for event in events:
        got, response = kiln.invoke(name, event, LogType="Tail")
        want, _ = kiln.invoke(plain, event)
        assert got == want, "a traced request answers as the plain function does"
        tail = kiln.log_tail(response)
        modes.append("Mode: tracing" in tail)
    # The first four ran on the (only, idle) tracing instance; after them the trace was taken.
    assert modes[:4] == [True] * 4, modes

    def settled():
        s = status(kiln, name)
        return s["Mode"] in ("decontainerized", "ordinary")
    wait_for(settled, timeout=60, what="the trace compiled")
    s = status(kiln, name)
    assert s["Traced"] == 4 and s["TraceNodes"] > 0, s

    # The trace kept on disk holds code and types: never a value an event carried.
    kept = list(kiln.data_dir.rglob("breakout/*.trace.json"))
    assert kept, "the accepted trace is kept beside the instrumented code"
    text = "".join(p.read_text() for p in kept)
    assert json.loads(kept[0].read_text())["version"] == 1
    assert secret not in text

    # An update starts again from tracing: a new revision, nothing traced yet.
    r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                            json.dumps({"Description": "again"}))
    assert r.status_code == 200, r.text
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="tracing again")
    assert status(kiln, name)["Traced"] == 0


def test_a_function_whose_instrumented_init_fails_stays_ordinary_and_answers(kiln, tmp_path):
    name = unique("bo-init")
    # Module init throws only when instrumented code cannot load: simulate a package whose
    # handler module is missing, so the tracing instance cannot start, and the ordinary path
    # answers with Lambda's own error.
    (tmp_path / "other.js").write_text("exports.x = 1;\n")
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "2")
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    got, response = kiln.invoke(name, {})
    assert response.get("FunctionError") == "Unhandled"
    assert got["errorType"] == "Runtime.ImportModuleError", got
    s = status(kiln, name)
    assert s["Mode"] == "ordinary" and "failed to start" in s["Reason"], s


def test_a_forged_trace_is_refused_and_the_function_keeps_serving(kiln, tmp_path):
    name = unique("bo-forged")
    # Code inside the sandbox can replace what the tracing runtime sends: kiln must not trust it.
    (tmp_path / "index.js").write_text(
        "exports.handler = async (event) => {\n"
        "  if (event.forge) globalThis.__kilnBreakout.dump = () => ({ version: 1, handlers: [{ id: 7 }] });\n"
        "  return { ok: true, n: event.n };\n"
        "};\n")
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "2")
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    assert kiln.invoke(name, {"forge": True, "n": 1})[0] == {"ok": True, "n": 1}
    assert kiln.invoke(name, {"n": 2})[0] == {"ok": True, "n": 2}
    s = status(kiln, name)
    assert s["Mode"] == "ordinary" and "trace refused" in s["Reason"], s
    for n in range(3, 6):
        got, response = kiln.invoke(name, {"n": n}, LogType="Tail")
        assert got == {"ok": True, "n": n}
        assert "Mode: ordinary" in kiln.log_tail(response)


# A handler with a branch training never takes (`upper`) and one that throws (`fail`).
FAST = """
const WORDS = ["abandon", "ability", "able", "about", "above", "absent", "access", "act", "actor"];
function score(word, prefix) {
  let s = 0;
  let i = 0;
  while (i < word.length && i < prefix.length) {
    if (word[i] === prefix[i]) s += 1;
    i += 1;
  }
  return s;
}
exports.handler = async (event) => {
  if (event.fail) throw new Error("refused: " + event.fail);
  const prefix = String(event.prefix || "");
  const out = [];
  let i = 0;
  while (i < WORDS.length) {
    const word = WORDS[i];
    if (word.startsWith(prefix)) out.push({ word, score: score(word, prefix) * 1.5 });
    i += 1;
  }
  if (event.upper) return { upper: prefix.toUpperCase(), n: out.length };
  return { prefix, matches: out, count: out.length, ratio: out.length / WORDS.length };
};
"""


def test_traced_paths_run_fast_and_answer_exactly_as_node(kiln, tmp_path):
    import random

    name = unique("bo-fast")
    plain = unique("bo-fast-plain")
    (tmp_path / "index.js").write_text(FAST)
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "5")
    kiln.cli("deploy", plain, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path))
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")

    def made_ahead(function):
        return [s["state"] for s in node_status(kiln)["snapshots"] if s["function"] == function]
    # Deployed with prebaking on: its snapshot is built, as any function's.
    wait_for(lambda: "ready" in made_ahead(name), timeout=60, what="the snapshot built at deploy")
    for event in [{"prefix": "ab"}, {"prefix": "a"}, {}, {"prefix": "zz"}, {"prefix": "ac"}]:
        kiln.invoke(name, event)
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    s = status(kiln, name)
    assert s["ModuleBytes"] > 0 and s["CompileSeconds"] > 0, s
    # Its requests run in kiln: its snapshot goes and nothing is made ahead of demand for it.
    wait_for(lambda: not made_ahead(name), timeout=30, what="the fast function's snapshot let go")

    rng = random.Random(7)
    letters = "abcdeilnorstuvz"
    fast = 0
    for _ in range(150):
        event = {"prefix": "".join(rng.choice(letters) for _ in range(rng.randint(0, 4)))}
        got, response = kiln.invoke(name, event, LogType="Tail")
        want, _ = kiln.invoke(plain, event)
        assert got == want, event
        fast += "Mode: decontainerized" in kiln.log_tail(response)
    assert fast >= 140, f"only {fast} of 150 on-trace requests ran fast"

    # An untraced branch misses: the request runs in Node from the start, once, with the same answer.
    got, response = kiln.invoke(name, {"prefix": "ab", "upper": True}, LogType="Tail")
    assert got == {"upper": "AB", "n": 6}
    tail = kiln.log_tail(response)
    assert "Fast Path: miss (" in tail and "Mode: decontainerized" not in tail, tail

    # A throw on a path training never took misses: Node answers the function error.
    got, response = kiln.invoke(name, {"fail": "x"}, LogType="Tail")
    want, plain_response = kiln.invoke(plain, {"fail": "x"})
    assert response.get("FunctionError") == plain_response.get("FunctionError") == "Unhandled"
    assert (got["errorType"], got["errorMessage"]) == (want["errorType"], want["errorMessage"])
    assert "Fast Path: miss (" in kiln.log_tail(response)

    # The misses ran on the idle tracing instance, so their paths were traced; after a recompile
    # (at most once a second) the new path runs fast too.
    def upper_is_fast():
        got, response = kiln.invoke(name, {"prefix": "ac", "upper": True}, LogType="Tail")
        assert got == {"upper": "AC", "n": 3}
        return "Mode: decontainerized" in kiln.log_tail(response)
    wait_for(upper_is_fast, timeout=30, interval=1.1, what="the retraced path compiled")
    assert status(kiln, name)["Retraces"] >= 1

    assert not made_ahead(name)

    metrics = kiln.signed_request("GET", "/metrics").text
    assert f'kiln_breakout_requests_total{{function="{name}",outcome="fast"}}' in metrics
    assert f'kiln_breakout_misses_total{{function="{name}",' in metrics
