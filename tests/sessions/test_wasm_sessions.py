"""Session state for the `wasm` runtime: host calls in the `kiln` import module, through kiln's Go SDK.

Each request of a session runs in a fresh wasm instance; the state lives in the node agent, and the requests of
one session take turns. The fixture (tests/functions/wasm_go_session) uses runtimes/wasm/go/session. The REPORT
line says how the request's instance and session came to be (XFaaS's Fork, CopySession, ColdSession).
"""

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from kiln_harness import FUNCTIONS

FIXTURE = FUNCTIONS / "wasm_go_session"


@pytest.fixture(scope="session")
def package(tmp_path_factory):
    """A directory holding the fixture compiled to a WASI module, as `function.wasm`."""
    if shutil.which("go") is None:
        pytest.fail("Go is needed to build the wasm test function (GOOS=wasip1)")
    out = tmp_path_factory.mktemp("wasm-session")
    subprocess.run(["go", "build", "-trimpath", "-o", str(out / "function.wasm"), "."], cwd=FIXTURE, check=True,
                   env={**os.environ, "GOOS": "wasip1", "GOARCH": "wasm", "CGO_ENABLED": "0",
                        "GOFLAGS": "-mod=mod"})
    return out


def deploy(server, name, package, *flags):
    server.cli("deploy", name, "--runtime", "wasm", "--handler", "function.wasm", "--code", str(package),
               "--timeout", "5", "--session-hint", "json:$.session", *flags)


def call(server, name, session, action, **fields):
    event = {"action": action, **fields}
    if session is not None:
        event["session"] = session
    result, response = server.invoke(name, event, LogType="Tail")
    report = [line for line in server.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    return result, response.get("FunctionError"), report


def ok(server, name, session, action, **fields):
    result, error, _ = call(server, name, session, action, **fields)
    assert error is None, result
    return result


def session_start(report):
    found = re.search(r"Session Start: (\w+)", report)
    return found.group(1) if found else None


def test_get_put_delete_keys_and_the_session_id(kiln, package):
    name = "wst-api"
    deploy(kiln, name, package)
    assert ok(kiln, name, "a", "get", key="doc") == {"value": "", "found": False, "error": ""}
    assert ok(kiln, name, "a", "put", key="doc", value={"list": [1, "três"]}) == {"error": ""}
    assert ok(kiln, name, "a", "putbytes", key="raw", size=5000) == {"error": ""}
    assert ok(kiln, name, "a", "get", key="doc") == {"value": '{"list":[1,"três"]}', "found": True, "error": ""}
    # Larger than the SDK's first buffer: read in a second call.
    assert ok(kiln, name, "a", "get", key="raw")["value"] == "b" * 5000
    assert ok(kiln, name, "a", "keys") == {"keys": ["doc", "raw"], "error": ""}
    assert ok(kiln, name, "a", "id") == {"id": "a", "error": ""}
    assert ok(kiln, name, "a", "delete", key="doc") == {"error": ""}
    assert ok(kiln, name, "a", "keys")["keys"] == ["raw"]
    # Another session has a state of its own; a sessionless request has none.
    assert ok(kiln, name, "b", "keys")["keys"] == []
    assert ok(kiln, name, None, "keys") == {"keys": None, "error": "NoSession"}
    sessions = {s["session"]: s for s in json.loads(kiln.cli("--json", "sessions", name).stdout)["Sessions"]}
    assert sessions["a"]["keys"] == 1 and sessions["a"]["bytes"] == len("raw") + 5000, sessions


def test_transact_applies_all_or_nothing(kiln, package):
    name = "wst-tx"
    deploy(kiln, name, package)
    assert ok(kiln, name, "t", "transact", value="ok") == {"error": ""}
    assert ok(kiln, name, "t", "transact", value="fail") == {"error": "changed my mind"}
    assert ok(kiln, name, "t", "get", key="a")["value"] == '"ok"'
    assert ok(kiln, name, "t", "get", key="b")["value"] == '"ok"'


def test_limits_and_bad_keys_are_clear_errors_and_change_nothing(kiln, package):
    name = "wst-limits"
    deploy(kiln, name, package, "--session-max-value", "1024", "--session-max-bytes", "4096")
    assert ok(kiln, name, "l", "putbytes", key="a", size=1000) == {"error": ""}
    assert ok(kiln, name, "l", "putbytes", key="b", size=1025) == {"error": "LimitExceeded"}
    for key in "bcd":
        assert ok(kiln, name, "l", "putbytes", key=key, size=1000) == {"error": ""}
    assert ok(kiln, name, "l", "putbytes", key="e", size=1000) == {"error": "LimitExceeded"}
    assert ok(kiln, name, "l", "putbytes", key="", size=1) == {"error": "Invalid"}
    assert ok(kiln, name, "l", "putbytes", key="k" * 1025, size=1) == {"error": "Invalid"}
    assert ok(kiln, name, "l", "keys")["keys"] == ["a", "b", "c", "d"]


def test_concurrent_read_modify_writes_lose_no_update(kiln, package):
    name = "wst-linear"
    deploy(kiln, name, package)
    clients, each = 30, 5

    def client(_):
        return [ok(kiln, name, "counter", "incr")["n"] for _ in range(each)]

    with ThreadPoolExecutor(clients) as pool:
        seen = [n for answers in pool.map(client, range(clients)) for n in answers]
    # Every increment saw a different value, and together they counted to N: none was lost.
    assert sorted(seen) == list(range(1, clients * each + 1))
    assert ok(kiln, name, "counter", "get", key="n")["value"] == str(clients * each)


def test_a_reported_error_keeps_its_writes_and_a_crash_or_timeout_loses_them(kiln, package):
    name = "wst-failures"
    deploy(kiln, name, package)
    result, error, _ = call(kiln, name, "f", "put-then-error", key="kept", value=1)
    assert error and result["errorType"] == "OrderError", result
    result, error, _ = call(kiln, name, "f", "put-then-trap", key="crashed", value=1)
    assert error and result["errorType"] == "Runtime.ExitError", result
    result, error, _ = call(kiln, name, "f", "put-then-loop", key="timed-out", value=1)
    assert error and result["errorType"] == "Sandbox.Timedout", result
    assert ok(kiln, name, "f", "keys")["keys"] == ["kept"]


def test_the_report_says_how_the_session_started(fresh_kiln, package):
    server = fresh_kiln()
    name = "wst-starts"
    deploy(server, name, package, "--prebake", "lazy")
    _, _, report = call(server, name, "s", "incr")
    assert session_start(report) == "ColdSession", report
    _, _, report = call(server, name, "s", "incr")
    assert session_start(report) == "Fork", report
    # The function's module is new (an update), the session's state is in memory.
    server.cli("deploy", name, "--runtime", "wasm", "--handler", "function.wasm", "--code", str(package),
               "--timeout", "6", "--session-hint", "json:$.session", "--prebake", "lazy")
    result, _, report = call(server, name, "s", "incr")
    assert result == {"n": 3} and session_start(report) == "CopySession", report
    # A sessionless request has no session start.
    _, _, report = call(server, name, None, "keys")
    assert session_start(report) is None, report


def test_acknowledged_writes_survive_a_kill_9_and_other_functions_see_nothing(fresh_kiln, package):
    server = fresh_kiln()
    deploy(server, "wst-durable", package)
    deploy(server, "wst-other", package)
    for _ in range(20):
        ok(server, "wst-durable", "d", "incr")
    ok(server, "wst-durable", "d", "putbytes", key="blob", size=16384)
    assert ok(server, "wst-other", "d", "keys")["keys"] == []
    server.kill9()
    server.start()
    result, _, report = call(server, "wst-durable", "d", "incr")
    assert result == {"n": 21} and session_start(report) == "ColdSession", report
    assert ok(server, "wst-durable", "d", "get", key="blob")["value"] == "b" * 16384
    server.restart()
    assert ok(server, "wst-durable", "d", "incr") == {"n": 22}
