"""Session state (XFaaS): get / put / delete / keys / transact on context.session, in Python and Node.js.

The state lives in the session's primary instance; each invocation's writes are in the session's log on the
data dir before its answer is returned. The tests check the API, its limits, linearizability under 30
concurrent clients, and that no acknowledged write is lost when the primary dies, across a graceful restart
and across a kill -9 of kiln.
"""

import base64
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from kiln_harness import FUNCTIONS, NODE_RUNTIME, PYTHON_RUNTIME, kill_instance

RUNTIMES = {
    "python": (PYTHON_RUNTIME, "app.handler", "python_session_state"),
    "node": (NODE_RUNTIME, "index.handler", "node_session_state"),
}


def deploy(server, name, language, *flags):
    runtime, handler, code = RUNTIMES[language]
    server.cli("deploy", name, "--runtime", runtime, "--handler", handler, "--code", str(FUNCTIONS / code),
               "--timeout", "30", "--session-hint", "json:$.session", *flags)


def call(server, name, session, action, **fields):
    result, response = server.invoke(name, {"session": session, "action": action, **fields})
    return result, response.get("FunctionError")


def ok(server, name, session, action, **fields):
    result, error = call(server, name, session, action, **fields)
    assert error is None, result
    return result


def sessions(server, name):
    return {s["session"]: s for s in json.loads(server.cli("--json", "sessions", name).stdout)["Sessions"]}


@pytest.mark.parametrize("language", RUNTIMES)
def test_get_put_delete_keys_with_json_and_bytes(kiln, language):
    name = f"st-api-{language}"
    deploy(kiln, name, language)
    assert ok(kiln, name, "a", "get") == {"value": None}
    value = {"list": [1, 2.5, "três"], "nested": {"ok": True}}
    assert ok(kiln, name, "a", "put", key="doc", value=value) == {"read_back": value}
    raw = base64.b64encode(bytes(range(256))).decode()
    assert ok(kiln, name, "a", "put", key="raw", bytes=raw) == {"read_back": {"bytes": raw}}
    assert ok(kiln, name, "a", "get", key="doc") == {"value": value}
    assert ok(kiln, name, "a", "get", key="raw") == {"value": {"bytes": raw}}
    assert ok(kiln, name, "a", "keys") == {"keys": ["doc", "raw"], "id": "a"}
    assert ok(kiln, name, "a", "delete", key="doc") == {"present": False}
    assert ok(kiln, name, "a", "keys")["keys"] == ["raw"]
    # Another session of the same function has a state of its own.
    assert ok(kiln, name, "b", "keys")["keys"] == []
    assert ok(kiln, name, "b", "get", key="raw") == {"value": None}
    # A sessionless request has no session.
    result, _ = kiln.invoke(name, {"action": "get"})
    assert result == {"session": None}
    listed = sessions(kiln, name)
    assert listed["a"]["keys"] == 1 and listed["a"]["bytes"] == len("raw") + 256, listed
    assert listed["a"]["log_bytes"] > 0


@pytest.mark.parametrize("language", RUNTIMES)
def test_transact_applies_all_or_nothing(kiln, language):
    name = f"st-tx-{language}"
    deploy(kiln, name, language)
    assert [ok(kiln, name, "t", "incr_tx")["n"] for _ in range(3)] == [1, 2, 3]
    assert ok(kiln, name, "t", "tx_then_fail") == {"n": 3, "other": None}


@pytest.mark.parametrize("language", RUNTIMES)
def test_limits_are_clear_errors_and_keep_the_state(kiln, language):
    name = f"st-limits-{language}"
    deploy(kiln, name, language, "--session-max-value", "1024", "--session-max-bytes", "4096")
    assert ok(kiln, name, "l", "big", key="a", size=1000) == {"stored": 1000}
    result, error = call(kiln, name, "l", "big", key="b", size=1025)
    assert error and result["errorType"] == "SessionLimitError" and "1024" in result["errorMessage"], result
    for key in "bcd":
        ok(kiln, name, "l", "big", key=key, size=1000)
    result, error = call(kiln, name, "l", "big", key="e", size=1000)
    assert error and result["errorType"] == "SessionLimitError" and "4096" in result["errorMessage"], result
    result, error = call(kiln, name, "l", "bad_key", bad="")
    assert error and result["errorType"] == "SessionError", result
    result, error = call(kiln, name, "l", "bad_key", bad="k" * 1025)
    assert error and result["errorType"] == "SessionError", result
    assert ok(kiln, name, "l", "keys")["keys"] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("language", RUNTIMES)
def test_concurrent_read_modify_writes_lose_no_update(kiln, language):
    name = f"st-linear-{language}"
    deploy(kiln, name, language)
    clients, each = 30, 5

    def client(i):
        action = "incr_tx" if i % 2 else "incr"
        return [ok(kiln, name, "counter", action)["n"] for _ in range(each)]

    with ThreadPoolExecutor(clients) as pool:
        seen = [n for answers in pool.map(client, range(clients)) for n in answers]
    # Every increment saw a different value, and together they counted to N: none was lost.
    assert sorted(seen) == list(range(1, clients * each + 1))
    assert ok(kiln, name, "counter", "get", key="n") == {"value": clients * each}


@pytest.mark.parametrize("language", RUNTIMES)
def test_writes_survive_their_primary_and_a_crash_loses_only_its_own(kiln, language):
    name = f"st-primary-{language}"
    deploy(kiln, name, language)
    for _ in range(3):
        ok(kiln, name, "p", "incr")
    # A handler that raises after a write: the write is kept (as the instance's memory holds it).
    result, error = call(kiln, name, "p", "put_then_raise", key="r", value="kept")
    assert error, result
    assert ok(kiln, name, "p", "get", key="r") == {"value": "kept"}
    # The primary is killed from outside: the next request is placed anew, and its state is loaded.
    primary = sessions(kiln, name)["p"]["instance"]
    kill_instance(kiln, primary)
    assert ok(kiln, name, "p", "get", key="n") == {"value": 3}
    assert sessions(kiln, name)["p"]["instance"] != primary
    # A runtime that dies mid-invocation never acknowledged its write: it is gone with the instance.
    result, error = call(kiln, name, "p", "put_then_crash", key="c", value="lost")
    assert error and "exited" in result["errorMessage"], result
    assert ok(kiln, name, "p", "get", key="c") == {"value": None}
    assert ok(kiln, name, "p", "incr") == {"n": 4}


def test_ending_a_session_deletes_its_state(kiln):
    name = "st-end"
    deploy(kiln, name, "python")
    ok(kiln, name, "e", "incr")
    kiln.cli("sessions", name, "--end", "e")
    assert ok(kiln, name, "e", "get", key="n") == {"value": None}


def test_another_functions_session_of_the_same_id_sees_nothing(kiln):
    deploy(kiln, "st-iso-a", "python")
    deploy(kiln, "st-iso-b", "node")
    ok(kiln, "st-iso-a", "shared", "put", key="secret", value="a's")
    assert ok(kiln, "st-iso-b", "shared", "get", key="secret") == {"value": None}
    assert ok(kiln, "st-iso-b", "shared", "keys")["keys"] == []


def test_acknowledged_writes_survive_a_graceful_restart_and_a_kill_9(fresh_kiln):
    server = fresh_kiln()
    for language in RUNTIMES:
        deploy(server, f"st-durable-{language}", language)
    # With Fsync each record is also synced to disk before the answer (power-loss durability).
    deploy(server, "st-durable-fsync", "python", "--session-fsync")
    config = server.signed_request("GET", "/2015-03-31/functions/st-durable-fsync/configuration", "", {}).json()
    assert config["KilnSessions"]["Fsync"] is True, config
    acknowledged = {}
    for name in [*(f"st-durable-{language}" for language in RUNTIMES), "st-durable-fsync"]:
        for session in ("d1", "d2"):
            for _ in range(20):
                acknowledged[(name, session)] = ok(server, name, session, "incr")["n"]
            ok(server, name, session, "put", key="blob", bytes=base64.b64encode(os.urandom(16384)).decode())
    blobs = {k: ok(server, k[0], k[1], "get", key="blob")["value"] for k in acknowledged}

    def check():
        for (name, session), n in acknowledged.items():
            assert ok(server, name, session, "get", key="n") == {"value": n}, (name, session)
            assert ok(server, name, session, "get", key="blob")["value"] == blobs[(name, session)]

    server.restart()
    check()
    for key in acknowledged:
        acknowledged[key] = ok(server, key[0], key[1], "incr")["n"]
    server.kill9()
    server.start()
    check()
    # The sessions were found again on disk and go on counting.
    assert ok(server, "st-durable-node", "d1", "incr") == {"n": acknowledged[("st-durable-node", "d1")] + 1}


def test_provided_runtimes_keep_state_through_the_runtime_api(fresh_kiln):
    server = fresh_kiln()
    name = "st-provided"
    server.cli("deploy", name, "--runtime", "provided.al2023", "--handler", "unused", "--code",
               str(FUNCTIONS / "provided_sessions"), "--timeout", "30", "--session-hint", "json:$.session",
               "--session-max-value", "1024")
    assert [ok(server, name, "p", "incr")["n"] for _ in range(3)] == [1, 2, 3]
    ops = [{"op": "put", "key": "doc", "value": {"a": [1, 2]}},
           {"op": "put", "key": "raw", "bytes": base64.b64encode(b"bytes!").decode()},
           {"op": "delete", "key": "n"}]
    assert ok(server, name, "p", "batch", ops=ops)["status"] == 204
    assert ok(server, name, "p", "keys") == {"keys": ["doc", "raw"]}
    assert ok(server, name, "p", "get", key="doc") == {"kind": "application/json", "value": {"a": [1, 2]}}
    assert ok(server, name, "p", "get", key="raw") == {"kind": "application/octet-stream", "value": "bytes!"}
    assert ok(server, name, "p", "get", key="n") == {"status": 404}
    # Over a limit: refused, and the batch changes nothing.
    assert ok(server, name, "p", "big", size=2048) == {"status": 413, "error": "SessionLimitExceeded"}
    bad = [{"op": "put", "key": "x", "value": 1}, {"op": "put", "key": "y", "bytes": "!!"}]
    assert ok(server, name, "p", "batch", ops=bad)["status"] == 400
    assert ok(server, name, "p", "keys") == {"keys": ["doc", "raw"]}
    # Another session sees none of it, and the state is in the log across a kill -9.
    assert ok(server, name, "q", "keys") == {"keys": []}
    server.kill9()
    server.start()
    assert ok(server, name, "p", "get", key="doc")["value"] == {"a": [1, 2]}
