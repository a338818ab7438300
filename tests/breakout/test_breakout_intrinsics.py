"""The fast path's intrinsics on a real kiln: `console` (every level), `Date` and `Math.random`
run in kiln with the same observable output as the sandboxed run. A decontainerized request's log
lines reach the function's log exactly as a Node instance writes them (timestamp, request id,
level, message), between START and END; a request that misses writes only Node's lines, once."""

import json
import re

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import wait_for

NODE = "nodejs20.x"

HANDLER = r"""
exports.handler = async (event) => {
  const who = String(event.who || "nobody");
  console.log("hello", who, { n: who.length, tags: ["a", "b"], nested: { deep: { deeper: { x: 1 } } } });
  console.info("%s has %d letters (%j) at 100%%", who, who.length, { who });
  console.warn("multi\nline", -0, null, undefined, true);
  console.error({ long: "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", other: "zzzzzzzzzzzzzzzz" });
  const started = Date.now();
  const when = new Date(started);
  const random = Math.random();
  if (event.upper) return { upper: who.toUpperCase() };
  return { who, fresh: when.getTime() >= 1700000000000, iso: when.toISOString().length,
           json: JSON.stringify({ when }).length, random: random >= 0 && random < 1 };
};
"""

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-in")


def function_lines(tail, request_id):
    """The function's own lines between START and END, each split into its tab-separated fields,
    the timestamp checked and dropped and the request id checked to be the request's."""
    lines = tail.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("START RequestId: "))
    end = next(i for i, l in enumerate(lines) if l.startswith("END RequestId: "))
    out = []
    for line in lines[start + 1:end]:
        stamp, rid, level, message = line.split("\t", 3)
        assert STAMP.match(stamp), line
        assert rid == request_id, line
        out.append((level, message))
    return out


def test_console_date_and_random_run_fast_with_nodes_output(kiln, tmp_path):
    name = unique("bo-in-fast")
    plain = unique("bo-in-plain")
    (tmp_path / "index.js").write_text(HANDLER)
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "3")
    kiln.cli("deploy", plain, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path))
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    for who in ["ann", "bob", "cy"]:
        kiln.invoke(name, {"who": who})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")

    fast = 0
    for who in ["dee", "eve", "flo", "gus", "hal"]:
        got, response = kiln.invoke(name, {"who": who}, LogType="Tail")
        want, plain_response = kiln.invoke(plain, {"who": who}, LogType="Tail")
        assert got == want
        tail = kiln.log_tail(response)
        if "Mode: decontainerized" not in tail:
            continue
        fast += 1
        rid = response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
        plain_rid = plain_response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
        mine = function_lines(tail, rid)
        theirs = function_lines(kiln.log_tail(plain_response), plain_rid)
        assert mine == theirs, (mine, theirs)
        assert [level for level, _ in mine] == ["INFO", "INFO", "WARN", "ERROR"]
        assert mine[2][1] == "multi\rline -0 null undefined true"
    assert fast >= 4, f"only {fast} of 5 on-trace requests ran fast"


def test_a_miss_writes_only_nodes_log_lines(kiln, tmp_path):
    name = unique("bo-in-miss")
    (tmp_path / "index.js").write_text(HANDLER)
    kiln.cli("deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
             "--breakout", "auto", "--trace-requests", "2")
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    for who in ["ann", "bob"]:
        kiln.invoke(name, {"who": who})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    # `upper` was never traced: the fast run logs four lines, then misses; they are dropped and
    # Node's run writes its own, once.
    got, response = kiln.invoke(name, {"who": "ivy", "upper": True}, LogType="Tail")
    assert got == {"upper": "IVY"}
    tail = kiln.log_tail(response)
    assert "Fast Path: miss (" in tail and "Mode: decontainerized" not in tail, tail
    rid = response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    lines = function_lines(tail, rid)
    assert [level for level, _ in lines] == ["INFO", "INFO", "WARN", "ERROR"], lines
    assert sum("hello ivy" in message for _, message in lines) == 1


CONTEXT_HANDLER = r"""
exports.handler = async (event, context) => {
  const left = context.getRemainingTimeInMillis();
  return { id: context.awsRequestId, name: context.functionName, version: context.functionVersion,
           memory: context.memoryLimitInMB, arn: context.invokedFunctionArn, group: context.logGroupName,
           waits: context.callbackWaitsForEmptyEventLoop, left: left > 0 && left <= 7000, n: event.n };
};
"""


def test_the_context_reads_as_in_node(kiln, tmp_path):
    name = unique("bo-in-context")
    plain = unique("bo-in-context-plain")
    (tmp_path / "index.js").write_text(CONTEXT_HANDLER)
    for fn, extra in [(name, ["--breakout", "auto", "--trace-requests", "2"]), (plain, [])]:
        kiln.cli("deploy", fn, "--runtime", NODE, "--handler", "index.handler", "--code", str(tmp_path),
                 "--memory", "128", "--timeout", "7", *extra)
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=60, what="instrumented")
    for n in range(2):
        kiln.invoke(name, {"n": n})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")

    def expected(fn, response, n):
        config = kiln.client().get_function_configuration(FunctionName=fn)
        return {"id": response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"], "name": fn,
                "version": "$LATEST", "memory": "128", "arn": config["FunctionArn"],
                "group": f"/aws/lambda/{fn}", "waits": True, "left": True, "n": n}

    got, response = kiln.invoke(name, {"n": 5}, LogType="Tail")
    assert "Mode: decontainerized" in kiln.log_tail(response)
    assert got == expected(name, response, 5)
    want, plain_response = kiln.invoke(plain, {"n": 5})
    assert want == expected(plain, plain_response, 5)
