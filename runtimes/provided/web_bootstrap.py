"""kiln's bootstrap for a `provided` web function (KilnWeb Command and Port, docs/web-adapter.md).

Starts the app's server with `/bin/sh -c COMMAND` in /var/task, waits until it is ready, then serves invocations
over the Lambda Runtime API: each function URL event (payload format 2.0) becomes a real HTTP request to the app on
127.0.0.1:PORT, and its response the payload 2.0 answer. Honours the Lambda Web Adapter's variables
AWS_LWA_PORT and AWS_LWA_READINESS_CHECK_PATH / _PROTOCOL / _HEALTHY_STATUS. Standard library only; the request
and response mapping is the Python adapter's (/opt/kiln/kiln_web.py).
"""

import http.client
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
READY_TIMEOUT_S = 10.0  # Lambda's init phase
READY_POLL_S = 0.01
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer",
              "proxy-authenticate", "proxy-authorization"}


def load_adapter():
    spec = importlib.util.spec_from_file_location("_kiln_web", os.path.join(HERE, "kiln_web.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def healthy_statuses(text):
    """`200-399,404` as a predicate; LWA's default is 100-499."""
    ranges = []
    for part in (text or "100-499").split(","):
        low, _, high = part.strip().partition("-")
        ranges.append((int(low), int(high or low)))
    return lambda status: any(low <= status <= high for low, high in ranges)


class RuntimeApi:
    def __init__(self, address):
        host, _, port = address.rpartition(":")
        self.conn = http.client.HTTPConnection(host, int(port))

    def call(self, method, path, body=None, headers=None):
        self.conn.request(method, "/2018-06-01/runtime" + path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        return response, response.read()

    def post(self, path, payload, error_type=None):
        headers = {"Content-Type": "application/json"}
        if error_type:
            headers["Lambda-Runtime-Function-Error-Type"] = error_type
        self.call("POST", path, json.dumps(payload).encode(), headers)


def error(kind, message):
    return {"errorType": kind, "errorMessage": message, "stackTrace": []}


def ready(port, protocol, path, healthy):
    """One readiness check: a TCP connect by default (none of the app's code runs), or an HTTP GET of `path`."""
    if protocol == "tcp":
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
        return healthy(status)
    except (OSError, http.client.HTTPException):
        return False


def forward(adapter, port, event):
    request = adapter.Request(event)
    headers = [(k, v) for k, v in request.headers if k not in HOP_BY_HOP and k != "content-length"]
    if not any(k == "host" for k, _ in headers):
        headers.append(("host", "127.0.0.1:%d" % port))
    if request.body or request.method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        headers.append(("content-length", str(len(request.body))))
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.putrequest(request.method, request.raw_path + ("?" + request.query if request.query else ""),
                    skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        conn.putheader(name, value.encode("utf-8"))
    conn.endheaders(request.body or None)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    # http.client reads header bytes as latin-1; the event carries text, so UTF-8 becomes its characters again.
    pairs = [(k, v.encode("latin-1").decode("utf-8", "replace")) for k, v in response.getheaders()
             if k.lower() not in HOP_BY_HOP]
    return adapter.respond(request.method, response.status, pairs, body)


def main():
    api = RuntimeApi(os.environ["AWS_LAMBDA_RUNTIME_API"])
    adapter = load_adapter()
    port = int(os.environ.get("AWS_LWA_PORT") or os.environ["KILN_WEB_PORT"])
    path = os.environ.get("AWS_LWA_READINESS_CHECK_PATH")
    protocol = (os.environ.get("AWS_LWA_READINESS_CHECK_PROTOCOL") or ("http" if path else "tcp")).lower()
    healthy = healthy_statuses(os.environ.get("AWS_LWA_READINESS_CHECK_HEALTHY_STATUS"))
    env = dict(os.environ)
    env.setdefault("PORT", str(port))
    for name in ("KILN_WEB_COMMAND", "KILN_WEB_PORT", "AWS_LAMBDA_RUNTIME_API"):
        env.pop(name, None)
    app = subprocess.Popen(["/bin/sh", "-c", os.environ["KILN_WEB_COMMAND"]], cwd=os.environ.get(
        "LAMBDA_TASK_ROOT", "/var/task"), env=env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready(port, protocol, path or "/", healthy):
        if app.poll() is not None:
            api.post("/init/error", error("Runtime.ExitError",
                                          "the app's command exited with status %d before it was ready" % app.returncode),
                     "Runtime.ExitError")
            sys.exit(1)
        if time.monotonic() > deadline:
            api.post("/init/error", error("Runtime.WebAppNotReady", "the app was not ready on port %d within %d s "
                                          "(%s readiness check)" % (port, READY_TIMEOUT_S, protocol)),
                     "Runtime.WebAppNotReady")
            app.kill()
            sys.exit(1)
        time.sleep(READY_POLL_S)
    while True:
        response, body = api.call("GET", "/invocation/next")
        request_id = response.getheader("Lambda-Runtime-Aws-Request-Id")
        try:
            event = json.loads(body)
            answer = forward(adapter, port, event) if adapter.is_http_event(event) else adapter.not_http(event)
        except (OSError, http.client.HTTPException) as e:
            api.post("/invocation/%s/error" % request_id,
                     error("Runtime.WebAppError", "the app's server failed the request: %s" % e), "Runtime.WebAppError")
            if app.poll() is not None:
                sys.exit(1)  # the app is gone: so is this instance
            continue
        api.post("/invocation/%s/response" % request_id, answer)


if __name__ == "__main__":
    main()
