"""Asynchronous (Event) invocations: delivery, retries, metrics, and durability across restarts
and `kill -9`."""

import base64
import http.server
import json
import re
import threading
import time
import uuid

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest
import requests

from kiln_harness import PYTHON_RUNTIME, zip_files

ROLE = "arn:aws:iam::000000000000:role/test"
DEADLINE = 120


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def signed_request(kiln, method, path, body=b"", headers=None):
    return kiln.signed_request(method, path, body, headers)


def create(kiln, name, code, host_network=False, **extra):
    """CreateFunction; `host_network` uses kiln's KilnNetwork extension, which boto3 cannot send."""
    body = {
        "FunctionName": name, "Runtime": PYTHON_RUNTIME, "Role": ROLE, "Handler": "app.handler",
        "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": code})).decode()},
        **extra,
    }
    if host_network:
        body["KilnNetwork"] = "host"
    response = signed_request(kiln, "POST", "/2015-03-31/functions", json.dumps(body).encode())
    assert response.status_code == 201, response.text


def send_event(kiln, name, event):
    response = kiln.client().invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps(event))
    assert response["StatusCode"] == 202
    return response["ResponseMetadata"]["RequestId"]


def logs(kiln, name):
    response = signed_request(kiln, "GET", f"/kiln/v1/functions/{name}/logs")
    assert response.status_code == 200, response.text
    return response.text


def wait_for(predicate, what, deadline=DEADLINE, interval=0.2):
    end = time.time() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def metric(kiln, name, labels):
    """The value of one sample in /metrics (0 when absent)."""
    text = requests.get(kiln.endpoint + "/metrics", timeout=30).text
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(label_text)}\}} (\S+)", text, re.M)
    return float(match.group(1)) if match else 0.0


def queue_depth(kiln):
    return signed_request(kiln, "GET", "/kiln/v1/status").json()["asyncQueueDepth"]


class MarkerServer:
    """An HTTP server on the host that functions (with host networking) report to."""

    def __init__(self):
        self.marks = []
        self.lock = threading.Lock()
        marks, lock = self.marks, self.lock

        self.released = threading.Event()
        released = self.released

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                # Long poll: a function waits here until the test releases it.
                released.wait(timeout=600)
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def do_POST(self):
                mark = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with lock:
                    seen = sum(1 for m in marks if m == mark)
                    marks.append(mark)
                reply = json.dumps({"seen": seen}).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def tokens(self, kind):
        with self.lock:
            return [m["token"] for m in self.marks if m["kind"] == kind]

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def marker_server():
    server = MarkerServer()
    yield server
    server.close()


REPORTING = """
import json, time, urllib.request

def mark(url, kind, token):
    request = urllib.request.Request(url, data=json.dumps({"kind": kind, "token": token}).encode())
    urllib.request.urlopen(request, timeout=30).read()

def handler(event, context):
    mark(event["url"], "start", event["token"])
    time.sleep(event.get("sleep", 0))
    mark(event["url"], "done", event["token"])
    return "ok"
"""


# --- Delivery ---------------------------------------------------------------------------------


def test_event_invocation_runs(kiln):
    name = unique("asyncrun")
    create(kiln, name, "def handler(event, context):\n    print('async-token', event['token'])\n    return 1\n")
    token = uuid.uuid4().hex
    send_event(kiln, name, {"token": token})
    wait_for(lambda: f"async-token {token}" in logs(kiln, name), "the event to run")
    # The CLI sees the same log.
    assert f"async-token {token}" in kiln.cli("logs", name).stdout


def test_event_invocation_gets_its_request_id_and_payload(kiln):
    name = unique("asyncpayload")
    create(kiln, name, "import json\n\ndef handler(event, context):\n"
                       "    print('payload', json.dumps(event, sort_keys=True), 'rid', context.aws_request_id)\n")
    event = {"token": uuid.uuid4().hex, "nested": {"list": [1, 2, 3]}, "text": "héllo"}
    request_id = send_event(kiln, name, event)
    expected = f"payload {json.dumps(event, sort_keys=True)} rid {request_id}"
    wait_for(lambda: expected in logs(kiln, name), "the event with its payload and request id")


def test_many_events_all_run(kiln):
    name = unique("asyncmany")
    create(kiln, name, "def handler(event, context):\n    print('tok', event['token'])\n")
    tokens = [uuid.uuid4().hex for _ in range(20)]
    for token in tokens:
        send_event(kiln, name, {"token": token})
    wait_for(lambda: all(f"tok {t}" in logs(kiln, name) for t in tokens), "all 20 events to run")
    text = logs(kiln, name)
    for token in tokens:
        assert text.count(f"tok {token}") == 1, token


def test_failing_event_is_attempted_three_times(kiln):
    name = unique("asyncfail")
    create(kiln, name, "def handler(event, context):\n    print('attempt', event['token'])\n"
                       "    raise RuntimeError('always fails')\n")
    failed_before = metric(kiln, "kiln_async_events_total", {"outcome": "failed"})
    retried_before = metric(kiln, "kiln_async_events_total", {"outcome": "retried"})
    token = uuid.uuid4().hex
    send_event(kiln, name, {"token": token})
    wait_for(lambda: metric(kiln, "kiln_async_events_total", {"outcome": "failed"}) >= failed_before + 1,
             "the event to be marked failed")
    wait_for(lambda: logs(kiln, name).count(f"attempt {token}") >= 3, "three attempts in the log")
    assert logs(kiln, name).count(f"attempt {token}") == 3
    assert metric(kiln, "kiln_async_events_total", {"outcome": "retried"}) >= retried_before + 2
    # Once failed, it is gone from the queue and never attempted again: a later event of the
    # same function runs (and fails) without a fourth attempt of the first one.
    later = uuid.uuid4().hex
    send_event(kiln, name, {"token": later})
    wait_for(lambda: logs(kiln, name).count(f"attempt {later}") >= 3, "the later event's attempts")
    assert logs(kiln, name).count(f"attempt {token}") == 3


FLAKY = """
import json, urllib.request

def mark(url, kind, token):
    request = urllib.request.Request(url, data=json.dumps({"kind": kind, "token": token}).encode())
    return json.loads(urllib.request.urlopen(request, timeout=30).read())["seen"]

def handler(event, context):
    if mark(event["url"], "start", event["token"]) == 0:
        raise RuntimeError("the first attempt fails")
    mark(event["url"], "done", event["token"])
"""


def test_event_that_fails_once_then_succeeds_is_retried(kiln, marker_server):
    name = unique("asyncflaky")
    create(kiln, name, FLAKY, host_network=True)
    succeeded_before = metric(kiln, "kiln_async_events_total", {"outcome": "succeeded"})
    token = uuid.uuid4().hex
    send_event(kiln, name, {"url": marker_server.url, "token": token})
    wait_for(lambda: token in marker_server.tokens("done"), "the retry to succeed")
    assert marker_server.tokens("start").count(token) == 2
    wait_for(lambda: metric(kiln, "kiln_async_events_total", {"outcome": "succeeded"}) >= succeeded_before + 1,
             "the success to be counted")
    assert marker_server.tokens("done").count(token) == 1


def test_throttled_event_waits_for_concurrency(kiln):
    name = unique("asyncthrottle")
    create(kiln, name, "def handler(event, context):\n    print('ran', event['token'])\n")
    lam = kiln.client()
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    token = uuid.uuid4().hex
    send_event(kiln, name, {"token": token})
    # Throttled deliveries are retried without using up attempts.
    throttled_before = metric(kiln, "kiln_async_events_total", {"outcome": "throttled"})
    wait_for(lambda: metric(kiln, "kiln_async_events_total", {"outcome": "throttled"}) >= throttled_before + 2,
             "several throttled deliveries")
    assert f"ran {token}" not in logs(kiln, name)
    lam.delete_function_concurrency(FunctionName=name)
    wait_for(lambda: f"ran {token}" in logs(kiln, name), "the event to run once concurrency is back")
    assert logs(kiln, name).count(f"ran {token}") == 1


def test_deleting_a_function_drops_its_queued_events(kiln):
    name = unique("asyncdrop")
    code = "def handler(event, context):\n    print('ran', event['token'])\n"
    create(kiln, name, code)
    lam = kiln.client()
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    stale = uuid.uuid4().hex
    send_event(kiln, name, {"token": stale})
    lam.delete_function(FunctionName=name)
    create(kiln, name, code)
    fresh = uuid.uuid4().hex
    send_event(kiln, name, {"token": fresh})
    wait_for(lambda: f"ran {fresh}" in logs(kiln, name), "the new function's event")
    # One more round through the queue, so a surviving stale event would have had its turn.
    last = uuid.uuid4().hex
    send_event(kiln, name, {"token": last})
    wait_for(lambda: f"ran {last}" in logs(kiln, name), "another event")
    assert f"ran {stale}" not in logs(kiln, name)


def test_metrics_count_queued_events(kiln):
    name = unique("asyncmetrics")
    create(kiln, name, "def handler(event, context):\n    print('ran', event['token'])\n")
    queued_before = metric(kiln, "kiln_async_events_total", {"outcome": "queued"})
    token = uuid.uuid4().hex
    send_event(kiln, name, {"token": token})
    assert metric(kiln, "kiln_async_events_total", {"outcome": "queued"}) >= queued_before + 1
    wait_for(lambda: f"ran {token}" in logs(kiln, name), "the event to run")


# --- Durability -------------------------------------------------------------------------------


def queue_slow_events(server, marker_server, count):
    name = unique("durable")
    create(server, name, REPORTING, host_network=True)
    server.client().put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=1)
    tokens = [uuid.uuid4().hex for _ in range(count)]
    for token in tokens:
        send_event(server, name, {"url": marker_server.url, "token": token, "sleep": 2})
    return name, tokens


def test_queued_events_survive_graceful_restart(fresh_kiln, marker_server):
    server = fresh_kiln()
    name, tokens = queue_slow_events(server, marker_server, 5)
    # Wait until one is running, so that the restart interrupts real work.
    wait_for(lambda: marker_server.tokens("start"), "the first event to start")
    assert queue_depth(server) >= 2
    assert server.stop() == 0
    restarted = fresh_kiln(data_dir=server.data_dir)
    wait_for(lambda: set(marker_server.tokens("done")) >= set(tokens), "every queued event to run after the restart")
    wait_for(lambda: queue_depth(restarted) == 0, "the queue to drain")
    assert set(marker_server.tokens("done")) == set(tokens)


def test_queued_events_survive_kill_9(fresh_kiln, marker_server):
    server = fresh_kiln()
    name, tokens = queue_slow_events(server, marker_server, 6)
    wait_for(lambda: marker_server.tokens("start"), "the first event to start")
    assert queue_depth(server) >= 2
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    # At least once: every acknowledged event runs to completion (some maybe twice).
    wait_for(lambda: set(marker_server.tokens("done")) >= set(tokens), "every acknowledged event to run after kill -9")
    wait_for(lambda: queue_depth(restarted) == 0, "the queue to drain")
    assert set(marker_server.tokens("done")) == set(tokens)
    # The function and its reservation survived too.
    config = restarted.client().get_function(FunctionName=name)
    assert config["Concurrency"]["ReservedConcurrentExecutions"] == 1


def test_events_acknowledged_right_before_kill_9_survive(fresh_kiln, marker_server):
    """Acknowledgement means durable: events sent in a burst and then a kill -9 all run."""
    server = fresh_kiln()
    name = unique("burst")
    create(server, name, REPORTING, host_network=True)
    server.client().put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    tokens = [uuid.uuid4().hex for _ in range(30)]
    for token in tokens:
        send_event(server, name, {"url": marker_server.url, "token": token})
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    assert queue_depth(restarted) == len(tokens)
    restarted.client().delete_function_concurrency(FunctionName=name)
    wait_for(lambda: set(marker_server.tokens("done")) >= set(tokens), "every acknowledged event to run")


BLOCKING = """
import json, urllib.request

def mark(url, kind, token):
    request = urllib.request.Request(url, data=json.dumps({"kind": kind, "token": token}).encode())
    urllib.request.urlopen(request, timeout=30).read()

def handler(event, context):
    mark(event["url"], "start", event["token"])
    if event.get("block"):
        urllib.request.urlopen(event["url"] + "wait", timeout=600).read()
    mark(event["url"], "done", event["token"])
"""


def test_a_backlogged_function_does_not_hold_up_other_functions_events(fresh_kiln, marker_server):
    """One function's queue of events, stuck behind its concurrency, must not starve the others."""
    server = fresh_kiln()
    slow, fast = unique("backlog"), unique("bystander")
    create(server, slow, BLOCKING, host_network=True, Timeout=600)
    create(server, fast, BLOCKING, host_network=True)
    server.client().put_function_concurrency(FunctionName=slow, ReservedConcurrentExecutions=1)
    slow_tokens = [uuid.uuid4().hex for _ in range(40)]
    for token in slow_tokens:
        send_event(server, slow, {"url": marker_server.url, "token": token, "block": True})
    wait_for(lambda: marker_server.tokens("start"), "the backlogged function to start")
    token = uuid.uuid4().hex
    send_event(server, fast, {"url": marker_server.url, "token": token})
    wait_for(lambda: token in marker_server.tokens("done"), "the other function's event to run")
    assert not marker_server.tokens("done") or set(marker_server.tokens("done")) == {token}
    marker_server.released.set()
    wait_for(lambda: set(marker_server.tokens("done")) >= set(slow_tokens), "the backlog to drain")
