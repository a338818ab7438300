"""Sessions (XFaaS): a session hint names where a request's session id comes from; every request of a session
goes to the instance that holds it (its primary), concurrent requests of a session queue on it, and new sessions
are placed by bin-packing or spreading.

The fixture (tests/functions/python_sessions) counts, in its process's memory, the requests it served per session:
a session that always lands on its primary sees 1, 2, 3... in order.
"""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from kiln_harness import FUNCTIONS, PYTHON_RUNTIME, node_status, wait_for


def deploy(server, name, *flags):
    server.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
               "--code", str(FUNCTIONS / "python_sessions"), "--timeout", "30", *flags)


def instances(server, name):
    return [i for i in node_status(server)["instances"] if i["function"] == name]


def sessions(server, name):
    return json.loads(server.cli("--json", "sessions", name).stdout)["Sessions"]


def test_every_request_of_a_session_goes_to_its_primary(kiln):
    deploy(kiln, "ss-sticky", "--session-hint", "json:$.session", "--sessions-per-instance", "4")
    names = [f"s{i}" for i in range(16)]

    def run_session(session):
        return [kiln.invoke("ss-sticky", {"session": session})[0] for _ in range(4)]

    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(names, pool.map(run_session, names)))
    for session, answers in results.items():
        assert len({a["instance"] for a in answers}) == 1, (session, answers)
        assert [a["count"] for a in answers] == [1, 2, 3, 4], (session, answers)
    held = {i["id"]: i["sessions"] for i in instances(kiln, "ss-sticky")}
    assert sum(held.values()) == 16 and max(held.values()) <= 4, held
    listed = sessions(kiln, "ss-sticky")
    assert sorted(s["session"] for s in listed) == sorted(names)
    assert all(s["requests"] == 4 and s["instance"] in held for s in listed), listed


def test_concurrent_requests_of_a_session_queue_on_its_primary(kiln):
    deploy(kiln, "ss-queue", "--session-hint", "json:$.session")
    kiln.invoke("ss-queue", {"session": "q"})
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: kiln.invoke("ss-queue", {"session": "q", "action": "sleep",
                                                                   "seconds": 0.5})[0], range(4)))
    # All on the one primary, which serves one invocation at a time: they queued, and none was lost.
    assert len({a["instance"] for a in answers}) == 1, answers
    assert sorted(a["count"] for a in answers) == [2, 3, 4, 5]
    # Sessionless requests of the same function run side by side on several instances.
    with ThreadPoolExecutor(4) as pool:
        free = list(pool.map(lambda _: kiln.invoke("ss-queue", {"action": "sleep", "seconds": 0.5})[0], range(4)))
    assert len({a["instance"] for a in free}) > 1, free


def test_binpack_fills_instances_and_spread_spreads(kiln):
    deploy(kiln, "ss-binpack", "--session-hint", "json:$.session", "--sessions-per-instance", "3")
    for i in range(6):
        kiln.invoke("ss-binpack", {"session": f"b{i}"})
    assert sorted(i["sessions"] for i in instances(kiln, "ss-binpack")) == [3, 3]

    deploy(kiln, "ss-spread", "--session-hint", "json:$.session", "--session-placement", "spread")
    spread = {kiln.invoke("ss-spread", {"session": f"p{i}"})[0]["instance"] for i in range(4)}
    assert len(spread) == 4
    assert sorted(i["sessions"] for i in instances(kiln, "ss-spread")) == [1, 1, 1, 1]


def test_function_urls_take_the_session_from_a_header_a_cookie_or_the_query(kiln):
    cases = [("ss-url-header", "header:x-session-id", lambda s: {"headers": {"X-Session-Id": s}}),
             ("ss-url-cookie", "cookie:sid", lambda s: {"cookies": {"sid": s}}),
             ("ss-url-query", "query:session", lambda s: {"params": {"session": s}})]
    for name, hint, where in cases:
        deploy(kiln, name, "--session-hint", hint, "--url", "public", "--sessions-per-instance", "1")
        url = f"{kiln.endpoint}/fn/{name}/"
        seen = {}
        for _ in range(3):
            for session in ("u1", "u2"):
                response = requests.post(url, json={"session": session}, timeout=60, **where(session))
                assert response.status_code == 200, response.text
                body = response.json()
                seen.setdefault(session, []).append((body["instance"], body["count"]))
        for session, answers in seen.items():
            assert [c for _, c in answers] == [1, 2, 3] and len({p for p, _ in answers}) == 1, (name, seen)
        assert seen["u1"][0][0] != seen["u2"][0][0], "one session per instance: two instances"
    # A hint that is there but unusable is the client's error.
    response = requests.post(f"{kiln.endpoint}/fn/ss-url-header/", json={}, headers={"X-Session-Id": ""},
                             timeout=60)
    assert response.status_code == 400 and "session" in response.text.lower(), response.text


def test_an_unusable_session_id_is_a_400_and_an_absent_one_runs_sessionless(kiln):
    deploy(kiln, "ss-bad", "--session-hint", "json:$.user.id")
    lam = kiln.client()
    for event in ({"user": {"id": {"nested": True}}}, {"user": {"id": ""}}, {"user": {"id": "x" * 300}}):
        try:
            lam.invoke(FunctionName="ss-bad", Payload=json.dumps(event))
        except lam.exceptions.InvalidParameterValueException as e:
            assert "Invalid session id" in str(e), e
        else:
            raise AssertionError(f"{event} was accepted")
    result, response = kiln.invoke("ss-bad", {"user": {"name": "no id"}})
    assert "FunctionError" not in response and result["count"] >= 1
    assert sessions(kiln, "ss-bad") == []
    # Numbers are ids too.
    kiln.invoke("ss-bad", {"user": {"id": 7}})
    assert [s["session"] for s in sessions(kiln, "ss-bad")] == ["7"]


def test_invalid_session_settings_are_refused(kiln):
    kiln.deploy("ss-invalid", PYTHON_RUNTIME, "app.handler", code="python_sessions")
    path = "/2015-03-31/functions/ss-invalid/configuration"
    for body, message in [({"KilnSessions": {"Hint": "nowhere"}}, "kilnSessions.hint"),
                          ({"KilnSessions": {"Hint": "header:x", "MaxSessionsPerInstance": 0}},
                           "maxSessionsPerInstance"),
                          ({"KilnSessions": {"Hint": "header:x", "Placement": "random"}}, "random"),
                          ({"KilnSessions": {"Hint": "header:x", "MaxSessionBytes": 64 << 20}}, "maxSessionBytes"),
                          ({"KilnSessions": {"Hint": "header:x", "MaxValueBytes": 2048, "MaxSessionBytes": 1024}},
                           "maxValueBytes")]:
        response = kiln.signed_request("PUT", path, json.dumps(body), {"Content-Type": "application/json"})
        assert response.status_code == 400, response.text
        assert message in response.text, response.text
    # Set, shown, and turned off again: each change once the one before it is done.
    kiln.settled("ss-invalid")
    response = kiln.signed_request("PUT", path, json.dumps({"KilnSessions": {"Hint": "cookie:sid"}}),
                                   {"Content-Type": "application/json"})
    assert response.json()["KilnSessions"] == {"Hint": "cookie:sid", "Placement": "binpack",
                                               "MaxSessionsPerInstance": 16, "IdleTtlSeconds": 900,
                                               "MaxValueBytes": 1048576, "MaxSessionBytes": 8388608}
    kiln.settled("ss-invalid")
    response = kiln.signed_request("PUT", path, json.dumps({"KilnSessions": None}),
                                   {"Content-Type": "application/json"})
    assert "KilnSessions" not in response.json()


def test_sessions_end_by_api_and_after_their_ttl(kiln):
    deploy(kiln, "ss-end", "--session-hint", "json:$.session", "--session-ttl", "3")
    kiln.invoke("ss-end", {"session": "e1"})
    assert [s["session"] for s in sessions(kiln, "ss-end")] == ["e1"]
    wait_for(lambda: sessions(kiln, "ss-end") == [], timeout=10, what="the idle session to end")

    deploy(kiln, "ss-end", "--session-hint", "json:$.session")
    kiln.invoke("ss-end", {"session": "e2"})
    kiln.cli("sessions", "ss-end", "--end", "e2")
    assert sessions(kiln, "ss-end") == []
    result = kiln.cli("sessions", "ss-end", "--end", "e2", check=False)
    assert result.returncode != 0 and "no session" in (result.stdout + result.stderr)
    assert all(i["sessions"] == 0 for i in instances(kiln, "ss-end"))


def test_a_session_id_never_reaches_another_functions_session(kiln):
    for name in ("ss-iso-a", "ss-iso-b"):
        deploy(kiln, name, "--session-hint", "json:$.session")
    a = [kiln.invoke("ss-iso-a", {"session": "shared"})[0] for _ in range(3)]
    b = kiln.invoke("ss-iso-b", {"session": "shared"})[0]
    assert [x["count"] for x in a] == [1, 2, 3]
    assert b["count"] == 1 and b["instance"] != a[0]["instance"]
    assert [s["requests"] for s in sessions(kiln, "ss-iso-b")] == [1]


def test_a_session_whose_primary_died_is_placed_anew(kiln):
    deploy(kiln, "ss-crash", "--session-hint", "json:$.session")
    first = kiln.invoke("ss-crash", {"session": "c"})[0]
    _, response = kiln.invoke("ss-crash", {"session": "c", "action": "crash"})
    assert response.get("FunctionError") == "Unhandled"
    again = kiln.invoke("ss-crash", {"session": "c"})[0]
    assert again["instance"] != first["instance"] and again["count"] == 1
    assert [s["instance"] is not None for s in sessions(kiln, "ss-crash")] == [True]


def test_a_busy_primary_keeps_its_session_while_other_sessions_go_elsewhere(kiln):
    # No warm-up: its session ("-") would be in every fork's memory, and counted as seen.
    deploy(kiln, "ss-busy", "--session-hint", "json:$.session", "--sessions-per-instance", "1", "--warmup", "0")
    holder = kiln.invoke("ss-busy", {"session": "h"})[0]
    thread = threading.Thread(target=kiln.invoke, args=("ss-busy", {"session": "h", "action": "sleep",
                                                                     "seconds": 1.5}))
    thread.start()
    wait_for(lambda: [i for i in instances(kiln, "ss-busy") if i["state"] == "busy"], what="the primary to be busy")
    other = kiln.invoke("ss-busy", {"session": "o"})[0]
    thread.join(timeout=30)
    assert other["instance"] != holder["instance"]
    assert kiln.invoke("ss-busy", {"session": "h"})[0] == {"instance": holder["instance"], "count": 3, "sessions_seen": 1}
