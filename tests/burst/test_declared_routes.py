"""The routes a framework declares are the gateway's candidates: a Flask app, unmodified, as the
monolith (in this process) and as a KilnWeb function, with no `--offload` at all."""

import importlib.util
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from kiln_harness import wait_for
from monolith import WsgiMonolith
from test_gateway import app_routes, app_status, delete_app, deploy_web, free_port, unique

FLASK_PACKAGES = ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker")

APP = """
import time
from flask import Flask, request

app = Flask(__name__)

@app.post("/comment/")
def comment():
    time.sleep(0.02)
    return {"ok": True, "body": request.get_data(as_text=True)}

@app.get("/posts/<int:pk>")
def post(pk):
    time.sleep(0.02)
    return {"post": pk}

@app.get("/fast")
def fast():
    return "fast"
"""


def flask_blog(tmp_path):
    """The blog app with Flask vendored beside it, as a web function's package."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "blog.py").write_text(APP)
    for name in FLASK_PACKAGES:
        source = Path(importlib.util.find_spec(name).origin).parent
        shutil.copytree(source, code / name, ignore=shutil.ignore_patterns("__pycache__"))
    return code


def test_the_frameworks_routes_are_candidates(kiln, tmp_path):
    code = flask_blog(tmp_path)
    function = unique("flask")
    kiln.cli("deploy", function, "--runtime", "python3.11", "--code", str(code), "--web-app", "blog:app",
             timeout=180)

    # The monolith: the same app, two requests at a time.
    server = WsgiMonolith(code / "blog.py", "app")
    monolith = server.url

    name = unique("blog")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{port}", "Upstreams": [monolith], "Function": function, "MaxInflight": 1,
    }).encode())
    assert r.status_code == 200, r.text
    try:
        declared = wait_for(lambda: (d := app_status(kiln, name)["Declared"]) and d["Routes"] and d,
                            timeout=60, what="the declared routes")
        assert declared["Framework"] == "flask"
        routes = app_routes(kiln, name)
        assert {"POST /comment/", "GET /posts/{pk:\\d+}", "GET /fast"} <= set(routes)
        assert all(routes[r]["Source"] == "declared" for r in ["POST /comment/", "GET /fast"])

        def eligible():
            if app_routes(kiln, name)["GET /posts/{pk:\\d+}"]["Eligible"]:
                return True
            requests.get(url + "/posts/7", timeout=30)
            requests.get(url + "/fast", timeout=30)
            return False
        wait_for(eligible, timeout=60, interval=0.05, what="a declared route eligible")
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: requests.get(url + f"/posts/{i}", timeout=60), range(24)))
        assert all(r.status_code == 200 and r.json() == {"post": i} for i, r in enumerate(results))
        assert "function" in [r.headers["x-kiln-served-by"] for r in results]
        assert not app_routes(kiln, name)["GET /fast"]["Eligible"]
    finally:
        delete_app(kiln, name)
        server.close()



def test_a_route_table_that_could_not_be_read_is_read_again(kiln, tmp_path):
    """Regression: the gateway read the function's route table once, when the app started; an app
    created while its function could not be invoked (Pending while a large package, such as
    Mezzanine's, was being extracted; here: throttled) never knew its declared routes."""
    code = flask_blog(tmp_path)
    function = unique("throttled")
    kiln.cli("deploy", function, "--runtime", "python3.11", "--code", str(code), "--web-app", "blog:app",
             timeout=180)
    lam = kiln.client()
    lam.put_function_concurrency(FunctionName=function, ReservedConcurrentExecutions=0)

    name = unique("early")
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{free_port()}", "Upstreams": ["http://127.0.0.1:9"], "Function": function,
    }).encode())
    assert r.status_code == 200, r.text
    try:
        failed = wait_for(lambda: (d := app_status(kiln, name)["Declared"]).get("Error") and d,
                          timeout=30, what="the route table's first read to fail")
        assert failed["Routes"] == 0, failed
        # Concurrency is not configuration the gateway watches: only reading again finds the routes.
        lam.delete_function_concurrency(FunctionName=function)
        declared = wait_for(lambda: (d := app_status(kiln, name)["Declared"]) and d["Routes"] and d,
                            timeout=60, what="the declared routes, read again")
        assert declared["Framework"] == "flask" and not declared.get("Error"), declared
        assert {"POST /comment/", "GET /posts/{pk:\\d+}", "GET /fast"} <= set(app_routes(kiln, name))
    finally:
        delete_app(kiln, name)
