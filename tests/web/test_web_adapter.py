"""KilnWeb: unmodified web apps served as functions, through function URLs and plain Invoke with a payload 2.0
event (docs/web-adapter.md). Real frameworks: Flask (bundled from the test venv into the function's package), a
raw ASGI app, and Express 5 (tests/web/express, its own package-lock).

What is checked is what users report broken in other adapters: binary bodies both ways, multipart uploads, several
Set-Cookie, repeated headers and query keys, non-ASCII paths, HEAD, redirects with the original Host, the 6 MB
limits, an app that fails, and a web function served by forks of its zygote.
"""

import base64
import hashlib
import http.client
import importlib.util
import json
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from kiln_harness import FUNCTIONS, NODE_RUNTIME, PYTHON_RUNTIME, start_path, wait_spare

FLASK_PACKAGES = ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker")
MB = 1024 * 1024


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def flask_code(tmp_path_factory):
    """The Flask fixture with Flask and its dependencies copied in from the test venv (setup-test-env.sh installs
    flask==3.1.3), as `pip install --target` would vendor them."""
    code = tmp_path_factory.mktemp("web_flask")
    shutil.copytree(FUNCTIONS / "web_flask", code, dirs_exist_ok=True)
    for name in FLASK_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec and spec.origin, f"{name} is not installed in the test venv: run scripts/setup-test-env.sh"
        source = Path(spec.origin).parent
        shutil.copytree(source, code / name, ignore=shutil.ignore_patterns("__pycache__"))
    return code


def deploy_web(kiln, name, code, *flags, runtime=PYTHON_RUNTIME):
    """`kiln deploy NAME --web-… --url public`; returns the function URL."""
    out = kiln.cli("--json", "deploy", name, "--runtime", runtime, "--code", str(code), "--timeout", "20",
                   "--memory", "256", "--url", "public", *flags)
    return json.loads(out.stdout)["FunctionUrl"]


@pytest.fixture(scope="module")
def flask_url(kiln, tmp_path_factory):
    name = unique("flask")
    url = deploy_web(kiln, name, flask_code(tmp_path_factory), "--web-app", "webapp:app")
    return name, url


def raw_request(method, url, headers, body=None):
    """A request with headers repeated as given (requests merges them); returns (status, headers, body)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.putrequest(method, parts.path + ("?" + parts.query if parts.query else ""),
                    skip_host=any(name.lower() == "host" for name, _ in headers))
    for name, value in headers:
        conn.putheader(name, value)
    conn.endheaders(body)
    response = conn.getresponse()
    out = (response.status, response.getheaders(), response.read())
    conn.close()
    return out


def png(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3) % 256 for x in range(width * 3)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# ------------------------------------------------------------------------------------------------ configuration
def test_kiln_web_is_stored_echoed_and_checked(kiln, tmp_path):
    name = unique("webcfg")
    (tmp_path / "app.py").write_text("def app(environ, start_response):\n    start_response('204 No Content', [])\n"
                                     "    return []\n")
    kiln.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--code", str(tmp_path), "--web-app", "app:app")
    config = kiln.client().get_function_configuration(FunctionName=name)
    raw = kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()
    assert raw["KilnWeb"] == {"App": "app:app"}
    assert config["Handler"] == "kiln.web", "a web function needs no handler; the placeholder is not used"

    def refused(body):
        r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration", json.dumps(body))
        assert r.status_code == 400, r.text
        assert r.json()["__type"].endswith("ValidationException"), r.text
        return r.json()["message"]

    assert "MODULE:CALLABLE" in refused({"KilnWeb": {"App": "app"}})
    assert "MODULE:CALLABLE" in refused({"KilnWeb": {"App": "my-app:app"}})
    assert "App alone" in refused({"KilnWeb": {"Start": "server.js", "Port": 3000}})
    assert "between 1 and 65535" in refused({"Runtime": NODE_RUNTIME, "KilnWeb": {"Start": "s.js", "Port": 70000}})
    assert "kiln's own services" in refused({"Runtime": NODE_RUNTIME, "KilnWeb": {"Start": "s.js", "Port": 9000}})
    assert "isolated network" in refused({"Runtime": NODE_RUNTIME, "KilnNetwork": "host",
                                          "KilnWeb": {"Start": "s.js", "Port": 3000}})
    assert "not available for the wasm runtime" in refused({"Runtime": "wasm", "KilnWeb": {"App": "a:b"}})
    assert "wasm" in refused({"Runtime": "wasm"}), "changing the runtime is checked against the stored KilnWeb"
    # The CLI's own checks.
    r = kiln.cli("deploy", name, "--runtime", NODE_RUNTIME, "--code", str(tmp_path), "--web-start", "s.js",
                 check=False)
    assert r.returncode != 0 and "--web-port" in r.stderr
    # Tags set it too (boto3 cannot send KilnWeb), and null turns it off.
    arn = config["FunctionArn"]
    kiln.settled(name)
    kiln.client().tag_resource(Resource=arn, Tags={"kiln:web-app": "app:application"})
    assert kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()["KilnWeb"] == \
        {"App": "app:application"}
    kiln.settled(name)
    r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                            json.dumps({"KilnWeb": None, "Handler": "app.app"}))
    assert r.status_code == 200 and "KilnWeb" not in r.json(), r.text


# ------------------------------------------------------------------------------------------------ Flask
def test_flask_request_mapping(kiln, flask_url):
    _, url = flask_url
    status, _, body = raw_request("GET", url + "echo?q=1&q=2&z=%20&empty=",
                                  [("X-Multi", "a"), ("X-Multi", "b"), ("Cookie", "s=v; t=w")])
    assert status == 200, body
    echo = json.loads(body)
    assert echo["method"] == "GET" and echo["path"] == "/echo"
    assert echo["args"] == {"q": ["1", "2"], "z": [" "], "empty": [""]}
    assert echo["multi"] in (["a,b"], ["a", "b"]), "a repeated header reaches the app whole"
    assert echo["cookies"] == {"s": "v", "t": "w"}
    assert echo["scheme"] == "http" and echo["remote_addr"] == "127.0.0.1"
    forwarded = requests.get(url + "echo", headers={"Host": "blog.example:8080", "X-Forwarded-Proto": "https"},
                             timeout=60).json()
    assert forwarded["host"] == "blog.example:8080" and forwarded["scheme"] == "https"
    assert forwarded["url"] == "https://blog.example:8080/echo"


def test_flask_non_ascii_paths(kiln, flask_url):
    _, url = flask_url
    r = requests.get(url + "h%C3%A9llo/w%C3%B6rld%20x", timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/héllo/wörld x", "name": "wörld x"}


def test_binary_bodies_both_ways_byte_exact(kiln, flask_url):
    _, url = flask_url
    image = requests.get(url + "image.png", timeout=60)
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert image.content == png(64, 48)
    data = png(200, 100) + bytes(range(256)) * 64
    back = requests.post(url + "image.png", data=data, headers={"Content-Type": "image/png"}, timeout=60)
    assert back.status_code == 200 and back.content == data
    # A body that is not UTF-8, sent as text: still byte-exact.
    raw = b"\xff\xfe\x00text\x80"
    echo = requests.post(url + "echo", data=raw, headers={"Content-Type": "text/plain"}, timeout=60).json()
    assert echo["sha256"] == hashlib.sha256(raw).hexdigest() and echo["length"] == len(raw)


def test_multipart_upload(kiln, flask_url):
    _, url = flask_url
    image = png(30, 30)
    blob = bytes(range(256)) * 40
    r = requests.post(url + "upload", files={"image": ("cat.png", image, "image/png"),
                                             "blob": ("b.bin", blob, "application/octet-stream")},
                      data={"title": ["café", "two"]}, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["files"]["image"] == {"filename": "cat.png", "type": "image/png",
                                     "sha256": hashlib.sha256(image).hexdigest()}
    assert out["files"]["blob"]["sha256"] == hashlib.sha256(blob).hexdigest()
    assert out["form"] == {"title": ["café", "two"]}


def test_several_set_cookies_and_repeated_response_headers(kiln, flask_url):
    _, url = flask_url
    r = requests.get(url + "cookies", timeout=60)
    cookies = r.raw.headers.getlist("Set-Cookie")
    assert len(cookies) == 3, cookies
    assert cookies[0].startswith("a=1;") and "HttpOnly" in cookies[1] and "Path=/echo" in cookies[2]
    assert r.headers["X-Repeated"] == "one, two"


def test_head_answers_headers_without_a_body(kiln, flask_url):
    _, url = flask_url
    r = requests.head(url + "image.png", timeout=60)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-type"] == "image/png"
    assert int(r.headers["content-length"]) == len(png(64, 48))


def test_redirects_keep_the_original_host(kiln, flask_url):
    _, url = flask_url
    r = requests.get(url + "go", headers={"Host": "shop.example"}, allow_redirects=False, timeout=60)
    assert r.status_code == 302
    assert r.headers["Location"] == "http://shop.example/echo?q=1"


def test_six_mb_limits_are_clear_errors(kiln, flask_url):
    name, url = flask_url
    ok = requests.get(url + "bytes?n=%d" % (4 * MB), timeout=60)
    assert ok.status_code == 200 and len(ok.content) == 4 * MB
    over = requests.get(url + "bytes?n=%d" % (5 * MB), timeout=60)  # 6.7 MB once base64-encoded
    assert over.status_code == 502
    assert "6291456" in over.text or "too large" in over.text.lower(), over.text
    big = requests.post(url + "echo", data=b"x" * (7 * MB), headers={"Content-Type": "application/octet-stream"},
                        timeout=60)
    assert big.status_code == 413, big.text
    assert "6291456" in big.text or "too large" in big.text.lower(), big.text


def test_an_app_error_is_the_apps_500(kiln, flask_url):
    _, url = flask_url
    r = requests.get(url + "boom", timeout=60)
    assert r.status_code == 500 and "Internal Server Error" in r.text
    assert "x-amzn-requestid" in r.headers


def test_plain_invoke_with_a_payload_2_event(kiln, flask_url):
    name, url = flask_url
    event = {
        "version": "2.0", "routeKey": "$default", "rawPath": "/echo", "rawQueryString": "a=1&a=2",
        "headers": {"host": "api.example", "content-type": "application/octet-stream", "x-multi": "x"},
        "cookies": ["k=v"],
        "requestContext": {"http": {"method": "PUT", "path": "/echo", "protocol": "HTTP/1.1",
                                    "sourceIp": "10.1.2.3"}},
        "body": base64.b64encode(b"\x00\x01\x02").decode(), "isBase64Encoded": True,
    }
    result, response = kiln.invoke(name, event)
    assert "FunctionError" not in response, result
    assert result["statusCode"] == 200 and result["isBase64Encoded"] is False
    echo = json.loads(result["body"])
    assert echo["method"] == "PUT" and echo["args"] == {"a": ["1", "2"]} and echo["cookies"] == {"k": "v"}
    assert echo["host"] == "api.example" and echo["remote_addr"] == "10.1.2.3"
    assert echo["sha256"] == hashlib.sha256(b"\x00\x01\x02").hexdigest()
    # Not an HTTP event (a warm-up's `{}`): answered without calling the app.
    result, response = kiln.invoke(name, {})
    assert "FunctionError" not in response and result["statusCode"] == 400


def test_forks_of_the_zygote_serve_the_app(kiln, tmp_path_factory):
    name = unique("flaskhot")
    deploy_web(kiln, name, flask_code(tmp_path_factory), "--web-app", "webapp:app")
    wait_spare(kiln, name)
    event = {"version": "2.0", "rawPath": "/echo", "rawQueryString": "", "headers": {"host": "h"},
             "requestContext": {"http": {"method": "GET", "path": "/echo", "sourceIp": "1.2.3.4"}},
             "isBase64Encoded": False}
    result, response = kiln.invoke(name, event, LogType="Tail")
    report = [line for line in kiln.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    assert start_path(report) == "hot", report
    echo = json.loads(result["body"])
    assert echo["pid"] != echo["started_in"], "the app was imported in the zygote, and this fork inherited it"


# ------------------------------------------------------------------------------------------------ WSGI and ASGI
RAW_WSGI = """
def app(environ, start_response):
    raise ValueError("no server would catch this for me")
"""

RAW_ASGI = """
import hashlib, json

started = []

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                started.append(True)
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/binary":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        await send({"type": "http.response.body", "body": body[:3], "more_body": True})
        await send({"type": "http.response.body", "body": body[3:]})
        return
    if scope["path"] == "/fail":
        raise RuntimeError("the ASGI app failed")
    out = {"method": scope["method"], "path": scope["path"], "raw_path": scope["raw_path"].decode("latin-1"),
           "query": scope["query_string"].decode(), "scheme": scope["scheme"], "server": list(scope["server"]),
           "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]], "started": started,
           "sha256": hashlib.sha256(body).hexdigest()}
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"set-cookie", b"x=1"),
                            (b"set-cookie", b"y=2")]})
    await send({"type": "http.response.body", "body": json.dumps(out).encode()})
"""


def test_a_raw_asgi_app(kiln, tmp_path):
    (tmp_path / "asgiapp.py").write_text(RAW_ASGI)
    url = deploy_web(kiln, unique("asgi"), tmp_path, "--web-app", "asgiapp:app")
    r = requests.post(url + "caf%C3%A9/x?a=1&a=2", data=b"hello", headers={"Host": "asgi.example:81"}, timeout=60)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["path"] == "/café/x" and out["raw_path"] == "/caf%C3%A9/x" and out["query"] == "a=1&a=2"
    assert out["server"] == ["asgi.example", 81] and out["scheme"] == "http"
    assert ["host", "asgi.example:81"] in out["headers"]
    assert out["started"] == [True], "the lifespan startup ran once in this process"
    assert out["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert r.raw.headers.getlist("Set-Cookie") == ["x=1", "y=2"]
    data = bytes(range(256)) * 100
    r = requests.post(url + "binary", data=data, timeout=60)
    assert r.status_code == 200 and r.content == data
    r = requests.get(url + "fail", timeout=60)
    assert r.status_code == 502, "an app that answers nothing is a function error"


def test_an_exception_out_of_a_wsgi_app_is_a_function_error(kiln, tmp_path):
    (tmp_path / "raw.py").write_text(RAW_WSGI)
    name = unique("rawwsgi")
    url = deploy_web(kiln, name, tmp_path, "--web-app", "raw:app")
    assert requests.get(url, timeout=60).status_code == 502
    event = {"version": "2.0", "rawPath": "/", "headers": {}, "requestContext": {"http": {"method": "GET"}}}
    result, response = kiln.invoke(name, event)
    assert response["FunctionError"] == "Unhandled"
    assert result["errorType"] == "ValueError" and "no server" in result["errorMessage"]


def test_a_missing_app_is_an_init_error(kiln, tmp_path):
    (tmp_path / "app.py").write_text("application = None\n")
    name = unique("noapp")
    deploy_web(kiln, name, tmp_path, "--web-app", "app:app")
    result, response = kiln.invoke(name, {"version": "2.0", "rawPath": "/", "requestContext": {"http": {}}})
    assert response.get("FunctionError") == "Unhandled"
    assert result["errorType"] == "Runtime.HandlerNotFound" and "app" in result["errorMessage"]


# ------------------------------------------------------------------------------------------------ Express 5
EXPRESS = Path(__file__).resolve().parent / "express"


@pytest.fixture(scope="module", params=["start", "app"])
def express_url(request, kiln):
    if not (EXPRESS / "node_modules" / "express").is_dir():
        pytest.fail("Express is not installed: run scripts/setup-test-env.sh (npm ci in tests/web/express)")
    flags = ("--web-start", "server.js", "--web-port", "3000") if request.param == "start" \
        else ("--web-app", "app.js#app")
    name = unique("express-" + request.param)
    return name, deploy_web(kiln, name, EXPRESS, *flags, runtime=NODE_RUNTIME)


def test_express_request_mapping(kiln, express_url):
    _, url = express_url
    status, _, body = raw_request("GET", url + "echo?q=1&q=2&z=%20",
                                  [("X-Multi", "a"), ("X-Multi", "b"), ("Cookie", "s=v; t=w"), ("Host", "web.example"),
                                   ("X-Name", "café".encode())])
    assert status == 200, body
    echo = json.loads(body)
    assert echo["method"] == "GET" and echo["path"] == "/echo" and echo["url"] == "/echo?q=1&q=2&z=%20"
    assert echo["query"] == {"q": ["1", "2"], "z": " "}
    assert echo["multi"] in (["a,b"], ["a", "b"])
    assert echo["cookie"] == "s=v; t=w" and echo["host"] == "web.example"
    assert echo["name"] == "café".encode().decode("latin-1"), "the header's bytes, as a Node server reads them"
    _, headers, _ = raw_request("GET", url + "utf8-header", [])
    assert {k.lower(): v for k, v in headers}["x-name"].encode("latin-1") == "café".encode(), "the app's header bytes reach the client"
    r = requests.get(url + "h%C3%A9llo/w%C3%B6rld", timeout=60)
    assert r.status_code == 200 and r.json() == {"path": "/héllo/wörld", "name": "wörld"}


def test_express_binary_multipart_and_head(kiln, express_url):
    _, url = express_url
    image = requests.get(url + "image.png", timeout=60)
    assert image.status_code == 200 and image.content == png(64, 48)
    data = png(200, 100) + bytes(range(256)) * 64
    back = requests.post(url + "image.png", data=data, headers={"Content-Type": "image/png"}, timeout=60)
    assert back.status_code == 200 and back.content == data
    upload = requests.Request("POST", url + "upload", files={"f": ("cat.png", data, "image/png")},
                              data={"title": "café"}).prepare()
    r = requests.Session().send(upload, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"type": upload.headers["Content-Type"], "sha256": hashlib.sha256(upload.body).hexdigest()}
    head = requests.head(url + "image.png", timeout=60)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(png(64, 48))


def test_express_cookies_redirects_errors_and_limits(kiln, express_url):
    name, url = express_url
    r = requests.get(url + "cookies", timeout=60)
    cookies = r.raw.headers.getlist("Set-Cookie")
    assert [c.split(";")[0] for c in cookies] == ["a=1", "b=2", "c=3"] and "HttpOnly" in cookies[1]
    assert r.headers["X-Repeated"] == "one, two"
    assert "keep-alive" not in {k.lower() for k in r.headers}, "hop-by-hop headers stay inside the sandbox"
    r = requests.get(url + "go", headers={"Host": "shop.example"}, allow_redirects=False, timeout=60)
    assert r.status_code == 302 and r.headers["Location"] == "http://shop.example/echo?q=1"
    r = requests.get(url + "boom", timeout=60)
    assert r.status_code == 500 and "the app failed" in r.text, "Express's own error page"

    over = requests.get(url + "bytes?n=%d" % (5 * MB), timeout=60)
    assert over.status_code == 502 and "too large" in over.text
    event = {"version": "2.0", "rawPath": "/echo", "rawQueryString": "a=1", "headers": {},
             "cookies": ["k=v"], "requestContext": {"domainName": "api.example",
                                                    "http": {"method": "DELETE", "path": "/echo"}},
             "body": base64.b64encode(b"\xff\x00").decode(), "isBase64Encoded": True}
    result, response = kiln.invoke(name, event)
    assert "FunctionError" not in response, result
    echo = json.loads(result["body"])
    assert echo["method"] == "DELETE" and echo["cookie"] == "k=v" and echo["host"] == "api.example"
    assert echo["sha256"] == hashlib.sha256(b"\xff\x00").hexdigest()
    result, response = kiln.invoke(name, {})
    assert "FunctionError" not in response and result["statusCode"] == 400


def test_a_node_server_that_never_listens_is_an_init_error(kiln, tmp_path):
    (tmp_path / "server.js").write_text("require('http').createServer(() => {}).listen(4000);\n")
    name = unique("nolisten")
    deploy_web(kiln, name, tmp_path, "--web-start", "server.js", "--web-port", "3000", runtime=NODE_RUNTIME)
    result, response = kiln.invoke(name, {"version": "2.0", "rawPath": "/", "requestContext": {"http": {}}})
    assert response.get("FunctionError") == "Unhandled"
    assert "did not listen on port 3000" in result["errorMessage"]


def test_a_node_entry_script_with_cluster_workers(kiln, tmp_path):
    """An entry script whose primary forks workers (node's cluster module) as under `node server.js`: the
    workers run the entry script and serve, sharing the primary's port."""
    (tmp_path / "server.js").write_text(
        "const cluster = require('cluster');\n"
        "if (cluster.isPrimary) { cluster.fork(); cluster.fork(); } else {\n"
        "  require('http').createServer((req, res) => res.end(JSON.stringify({\n"
        "    worker: cluster.worker.id, pid: process.pid, ppid: process.ppid, script: process.argv[1],\n"
        "  }))).listen(Number(process.env.PORT));\n"
        "}\n")
    name = unique("cluster")
    url = deploy_web(kiln, name, tmp_path, "--web-start", "server.js", "--web-port", "3000", runtime=NODE_RUNTIME)
    seen = []
    for _ in range(4):
        r = requests.get(url + "worker", timeout=60)
        assert r.status_code == 200, r.text
        seen.append(r.json())
    assert all(s["script"].endswith("/server.js") and s["worker"] in (1, 2) and s["ppid"] != s["pid"]
               for s in seen), seen


# ------------------------------------------------------------------------------------------------ provided
PORT_SERVER = """
import hashlib, json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

hits = []

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body, ctype="application/json", cookies=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        hits.append(self.path)
        if self.path == "/health":
            return self.answer(204, b"")
        if self.path == "/binary":
            return self.answer(200, bytes(range(256)) * 10, "application/octet-stream")
        self.reply(b"")

    def do_POST(self):
        hits.append(self.path)
        self.reply(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def reply(self, body):
        out = {"path": self.path, "host": self.headers["Host"], "hits": hits, "port": self.server.server_port,
               "sha256": hashlib.sha256(body).hexdigest(), "cookie": self.headers.get("Cookie")}
        self.answer(200, json.dumps(out).encode(), cookies=("a=1", "b=2"))

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def test_provided_port_mode_with_a_tcp_readiness_check(kiln, tmp_path):
    (tmp_path / "server.py").write_text(PORT_SERVER)
    url = deploy_web(kiln, unique("portmode"), tmp_path, "--web-command", "exec python3 server.py",
                     "--web-port", "8080", runtime="provided.al2023")
    r = requests.post(url + "caf%C3%A9?x=1", data=b"\x00\xff", headers={"Host": "port.example"},
                      cookies={"s": "1"}, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["hits"] == ["/caf%C3%A9?x=1"], "the readiness check ran none of the app's code"
    assert out["host"] == "port.example" and out["port"] == 8080 and out["cookie"] == "s=1"
    assert out["sha256"] == hashlib.sha256(b"\x00\xff").hexdigest()
    assert r.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]
    binary = requests.get(url + "binary", timeout=60)
    assert binary.content == bytes(range(256)) * 10


def test_provided_port_mode_honours_lambda_web_adapters_variables(kiln, tmp_path):
    (tmp_path / "server.py").write_text(PORT_SERVER)
    url = deploy_web(kiln, unique("lwa"), tmp_path, "--web-command", "exec python3 server.py", "--web-port", "8080",
                     "--env", "AWS_LWA_PORT=8081", "--env", "AWS_LWA_READINESS_CHECK_PATH=/health",
                     "--env", "AWS_LWA_READINESS_CHECK_HEALTHY_STATUS=204", runtime="provided")
    out = requests.get(url + "x", timeout=60).json()
    assert out["port"] == 8081
    assert out["hits"][-1] == "/x" and set(out["hits"][:-1]) == {"/health"}


# ------------------------------------------------------------------------------------------------ zygote and connections
# Stand-ins for Django's and SQLAlchemy's connection handling, recording what the adapter does to them and in which
# process: the zygote closes what is open before it forks, and each fork drops what it holds without closing it.
FAKE_DB = {
    "calls.py": "CALLS = []\n",
    "django/__init__.py": "",
    "django/db.py": "import os, calls\n\nclass Connections:\n    def close_all(self):\n"
                    "        calls.CALLS.append(['django.close_all', os.getpid()])\n\nconnections = Connections()\n",
    "sqlalchemy/__init__.py": "",
    "sqlalchemy/engine.py": "import os, calls\n\nclass Engine:\n    def dispose(self, close=True):\n"
                            "        calls.CALLS.append(['engine.dispose', close, os.getpid()])\n",
    "dbapp.py": "import json, os, calls, django.db, sqlalchemy.engine\n\nengine = sqlalchemy.engine.Engine()\n"
                "IMPORTED_IN = os.getpid()\n\n"
                "def app(environ, start_response):\n"
                "    start_response('200 OK', [('Content-Type', 'application/json')])\n"
                "    return [json.dumps({'calls': calls.CALLS, 'pid': os.getpid(), 'imported_in': IMPORTED_IN}).encode()]\n",
}


def test_a_fork_of_the_zygote_starts_without_the_zygotes_connections(kiln, tmp_path):
    for path, text in FAKE_DB.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    name = unique("dbfork")
    deploy_web(kiln, name, tmp_path, "--web-app", "dbapp:app")
    wait_spare(kiln, name)
    event = {"version": "2.0", "rawPath": "/", "headers": {}, "requestContext": {"http": {"method": "GET"}}}
    result, response = kiln.invoke(name, event, LogType="Tail")
    report = [line for line in kiln.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    assert start_path(report) == "hot", report
    out = json.loads(result["body"])
    zygote, fork = out["imported_in"], out["pid"]
    assert zygote != fork
    assert out["calls"] == [["django.close_all", zygote], ["engine.dispose", True, zygote],
                            ["django.close_all", fork], ["engine.dispose", False, fork]]


def test_a_web_function_on_the_warm_path(kiln, tmp_path):
    (tmp_path / "asgiapp.py").write_text(RAW_ASGI)
    name = unique("asgiwarm")
    url = deploy_web(kiln, name, tmp_path, "--web-app", "asgiapp:app", "--prebake", "off")
    event = {"version": "2.0", "rawPath": "/x", "rawQueryString": "", "headers": {"host": "w"},
             "requestContext": {"http": {"method": "GET"}}}
    result, response = kiln.invoke(name, event, LogType="Tail")
    report = [line for line in kiln.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    assert start_path(report) in ("warm", "coldest"), report
    assert result["statusCode"] == 201 and json.loads(result["body"])["path"] == "/x"
    assert requests.get(url + "y", timeout=60).json()["path"] == "/y"


# ------------------------------------------------------------------------------------------------ the mapping, in process
from hypothesis import given, settings, strategies as st  # noqa: E402

_spec = importlib.util.spec_from_file_location("kiln_web", Path(__file__).resolve().parents[2] / "runtimes" /
                                               "python" / "kiln_web.py")
kiln_web = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kiln_web)

header_names = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1,
                       max_size=12)


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(["GET", "HEAD", "POST", "put"]), path=st.text(max_size=30),
       query=st.text(max_size=30), headers=st.dictionaries(header_names, st.text(max_size=20), max_size=6),
       cookies=st.lists(st.text(max_size=10), max_size=3), body=st.binary(max_size=64), b64=st.booleans())
def test_any_event_maps_to_a_wsgi_environ_with_the_exact_body(method, path, query, headers, cookies, body, b64):
    event = {"rawPath": "/" + path, "rawQueryString": query, "headers": headers, "cookies": cookies,
             "requestContext": {"http": {"method": method}}, "isBase64Encoded": b64,
             "body": base64.b64encode(body).decode() if b64 else body.decode("latin-1")}
    request = kiln_web.Request(event)
    environ = kiln_web.wsgi_environ(request, None)
    sent = body if b64 else body.decode("latin-1").encode()
    assert environ["wsgi.input"].read() == sent and environ["CONTENT_LENGTH"] == str(len(sent))
    assert environ["REQUEST_METHOD"] == method.upper() and environ["QUERY_STRING"] == query
    assert all(isinstance(v, str) for k, v in environ.items() if k.isupper())


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=64), ctype=st.sampled_from(["text/html; charset=utf-8", "application/json",
                                                           "image/png", "application/octet-stream", ""]),
       cookies=st.lists(st.text(max_size=8), max_size=3))
def test_any_answer_maps_to_a_payload_2_response_with_the_exact_body(body, ctype, cookies):
    headers = [("Content-Type", ctype)] + [("Set-Cookie", c) for c in cookies] + [("X-A", "1"), ("x-a", "2")]
    out = kiln_web.respond("GET", 200, headers, body)
    got = base64.b64decode(out["body"]) if out["isBase64Encoded"] else out["body"].encode()
    assert got == body
    assert out.get("cookies", []) == cookies and out["headers"]["x-a"] == "1, 2"
    assert kiln_web.respond("HEAD", 200, headers, body)["body"] == ""


def test_ipv6_and_forwarded_hosts():
    def request(host, proto=None):
        headers = {"host": host}
        if proto:
            headers["x-forwarded-proto"] = proto
        return kiln_web.Request({"headers": headers, "requestContext": {"http": {"method": "GET"}}})
    assert (request("[::1]:8080").host, request("[::1]:8080").port) == ("[::1]", 8080)
    assert (request("[::1]").host, request("[::1]").port) == ("[::1]", 80)
    assert (request("a.example", "https").port, request("a.example", "https").scheme) == (443, "https")


# ------------------------------------------------------------------------------------------------ Django
DJANGO_PACKAGES = ("django", "asgiref", "sqlparse")


def test_django_forks_open_their_own_connections(kiln, tmp_path):
    code = tmp_path / "web_django"
    shutil.copytree(FUNCTIONS / "web_django", code)
    for name in DJANGO_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec and spec.origin, f"{name} is not installed in the test venv: run scripts/setup-test-env.sh"
        # Translations and admin assets are not needed, and would triple the package.
        shutil.copytree(Path(spec.origin).parent, code / name,
                        ignore=shutil.ignore_patterns("__pycache__", "LC_MESSAGES", "static"))
    name = unique("django")
    # The warm-up requests are real ones (a read-only route), so the zygote opens a connection before it forks.
    warmup = {"version": "2.0", "rawPath": "/whoami/", "rawQueryString": "", "headers": {"host": "warm.example"},
              "requestContext": {"http": {"method": "GET", "path": "/whoami/"}}, "isBase64Encoded": False}
    url = deploy_web(kiln, name, code, "--web-app", "mysite.wsgi:application", "--warmup-event", json.dumps(warmup))
    wait_spare(kiln, name)
    event = dict(warmup, rawQueryString="a=1&a=2", headers={"host": "blog.example", "x-forwarded-proto": "https"})
    result, response = kiln.invoke(name, event, LogType="Tail")
    report = [line for line in kiln.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    assert start_path(report) == "hot", report
    out = json.loads(result["body"])
    zygote = out["opened_by"][0]
    assert zygote != out["pid"] and out["opened_by"][-1] == out["pid"], \
        "the zygote's connection was closed before the fork; the fork opened its own"
    assert out["host"] == "blog.example" and out["get"] == {"a": ["1", "2"]}
    assert out["absolute"] == "https://blog.example/x/" and out["secure"], \
        "wsgi.url_scheme follows X-Forwarded-Proto, as behind gunicorn with the proxy trusted"
    r = requests.get(url + "archive/2024/n%C3%B6v/", timeout=60)
    assert r.status_code == 200 and r.json() == {"year": 2024, "month": "növ", "path": "/archive/2024/növ/"}
    r = requests.get(url + "go/", headers={"Host": "blog.example"}, allow_redirects=False, timeout=60)
    assert r.status_code == 302 and r.headers["Location"] == "http://blog.example/whoami/?from=go"
    assert requests.get(url + "missing/", timeout=60).status_code == 404


# ------------------------------------------------------------------------------------------------ other forms of app
def test_a_python_app_factory(kiln, tmp_path):
    (tmp_path / "factory.py").write_text(
        "import os\n\ncalls = []\n\ndef create_app():\n    calls.append(os.getpid())\n"
        "    def app(environ, start_response):\n"
        "        start_response('200 OK', [('Content-Type', 'text/plain')])\n"
        "        return [('made %d time(s)' % len(calls)).encode()]\n    return app\n")
    url = deploy_web(kiln, unique("factory"), tmp_path, "--web-app", "factory:create_app()")
    assert requests.get(url, timeout=60).text == "made 1 time(s)"


def test_node_web_app_forms(kiln, tmp_path):
    (tmp_path / "handler.mjs").write_text(
        "export default (req, res) => { res.setHeader('content-type', 'text/plain'); res.end('esm ' + req.url); };\n")
    (tmp_path / "koaish.js").write_text(
        "module.exports.server = { callback: () => (req, res) => res.end('callback ' + req.method) };\n")
    url = deploy_web(kiln, unique("esm"), tmp_path, "--web-app", "handler.mjs", runtime=NODE_RUNTIME)
    assert requests.get(url + "a?b=1", timeout=60).text == "esm /a?b=1"
    url = deploy_web(kiln, unique("koa"), tmp_path, "--web-app", "koaish.js#server", runtime=NODE_RUNTIME)
    assert requests.put(url, timeout=60).text == "callback PUT"


def test_a_node_app_that_closes_its_server_ends_its_instance(kiln, tmp_path):
    (tmp_path / "server.js").write_text(
        "const id = String(Math.random());\n"
        "const server = require('http').createServer((req, res) => {\n"
        "  if (req.url === '/close') { res.setHeader('connection', 'close'); server.close(); }\n"
        "  res.end(id);\n"
        "}).listen(3000);\n")
    url = deploy_web(kiln, unique("closes"), tmp_path, "--web-start", "server.js", "--web-port", "3000",
                     runtime=NODE_RUNTIME)
    first = requests.get(url + "close", timeout=60).text
    assert requests.get(url, timeout=60).status_code == 502, "the instance whose app is gone fails, then ends"
    again = requests.get(url, timeout=60)
    assert again.status_code == 200 and again.text != first, "a new instance serves"
