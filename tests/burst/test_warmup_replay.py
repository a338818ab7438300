"""Warm-up by replaying recent requests (BeeHive §3.4): the gateway keeps a recent request of each
hot route the monolith answered, hands them to the function, and its snapshot is built again
with them replayed (as shadow runs) in its warm-up, so a fork starts warm for the requests it
will get: here, with the route's code already run in the process it was forked from."""

import json

from kiln_harness import node_status, snapshot_of, wait_for
from monolith import WsgiMonolith
from test_gateway import delete_app, deploy_web, free_port, profile, unique

APP = """
import json, os, time

SEEN = []   # the processes that ran /heavy/: a fork inherits its parent's list

def application(environ, start_response):
    if environ.get("PATH_INFO", "").startswith("/heavy/"):
        SEEN.append(os.getpid())
        time.sleep(0.02)
        body = {"warmed_before": any(pid != os.getpid() for pid in SEEN[:-1]), "pid": os.getpid()}
    else:
        body = {"ok": True}
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]
"""


def test_a_snapshot_is_built_again_with_the_hot_routes_recent_requests(kiln, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(APP)
    function = unique("replay")
    deploy_web(kiln, function, code=code)
    wait_for(lambda: (snapshot_of(kiln, function) or {}).get("state") == "ready", timeout=60,
             what="the first snapshot")
    first = snapshot_of(kiln, function)
    assert first["replayed"] == 0, first

    monolith = WsgiMonolith(code / "app.py", "application")
    name, port = unique("app"), free_port()
    url = f"http://127.0.0.1:{port}"
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{port}", "Upstreams": [monolith.url], "Function": function,
        "Offload": ["GET /heavy/{n}"]}).encode())
    assert r.status_code == 200, r.text
    try:
        # Requests the monolith serves: the route is profiled, sampled and handed over, and the
        # snapshot built again with the request replayed, in place of the first one.
        def rebuilt():
            profile(url, "/heavy/1", n=3)
            s = snapshot_of(kiln, function) or {}
            return s.get("replayed", 0) >= 1 and s.get("id") != first["id"] and s
        snapshot = wait_for(rebuilt, timeout=60, interval=0.2, what="the snapshot rebuilt with replays")
        assert snapshot["state"] == "ready", snapshot

        # A new revision's snapshot replays them too; its first fork has the route warm.
        kiln.client().update_function_configuration(FunctionName=function,
                                                   Environment={"Variables": {"REVISION": "2"}})
        wait_for(lambda: (s := snapshot_of(kiln, function) or {}).get("revision") != snapshot["revision"]
                 and s.get("state") == "ready" and s, timeout=60, what="the new revision's snapshot")
        assert snapshot_of(kiln, function)["replayed"] >= 1
        event = {"version": "2.0", "rawPath": "/heavy/2", "rawQueryString": "", "headers": {},
                 "requestContext": {"http": {"method": "GET", "path": "/heavy/2", "sourceIp": "127.0.0.1"}},
                 "isBase64Encoded": False}
        answer, _ = kiln.invoke(function, event)
        body = json.loads(answer["body"])
        assert body["warmed_before"] is True, body
        forked = [i for i in node_status(kiln)["instances"] if i["function"] == function]
        assert forked and all(i["start_path"] == "hot" for i in forked), forked
    finally:
        delete_app(kiln, name)
        monolith.close()
