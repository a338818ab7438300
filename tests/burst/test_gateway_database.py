"""An app with a PostgreSQL database: the same WSGI app as the monolith (in this process, talking
to PostgreSQL directly) and as a KilnWeb function (talking to kiln's proxy at the same address
inside its sandboxes). Shadow runs roll back, each real request writes once, failures that wrote
nothing go back to the monolith, and the function's instances share a few backends."""

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from kiln_harness import wait_for
from monolith import WsgiMonolith
from pg_harness import Postgres, unavailable_reason
from test_gateway import app_routes, app_status, delete_app, deploy_web, free_port, unique

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

# Inserts a comment per POST; in the function (not the monolith), "crash-before" raises before
# its transaction commits and "crash-after" after.
APP = """
import json, os, time
import psycopg

IN_FUNCTION = "AWS_LAMBDA_FUNCTION_NAME" in os.environ
POOLED = None  # /pooled/ keeps one connection per process, as an app's pool does

def application(environ, start_response):
    global POOLED
    url = os.environ["DATABASE_URL"]
    if environ["PATH_INFO"] == "/pooled/":
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)).decode()
        if POOLED is None or POOLED.closed:
            POOLED = psycopg.connect(url)
        POOLED.execute("INSERT INTO comments (body, served) VALUES (%s, %s)",
                       (body, "function" if IN_FUNCTION else "monolith"))
        POOLED.commit()
        start_response("201 Created", [("content-type", "application/json")])
        return [b"{}"]
    if environ["REQUEST_METHOD"] == "POST":
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)).decode()
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO comments (body, served) VALUES (%s, %s)",
                         (body, "function" if IN_FUNCTION else "monolith"))
            if IN_FUNCTION and body.startswith("crash-before"):
                raise RuntimeError("crashed before the commit")
            if IN_FUNCTION and body.startswith("slow-before"):
                time.sleep(10)  # past the function's timeout, inside the transaction
        if IN_FUNCTION and body.startswith("crash-after"):
            raise RuntimeError("crashed after the commit")
        if IN_FUNCTION and body.startswith("slow-after"):
            time.sleep(10)
        start_response("201 Created", [("content-type", "application/json")])
        return [json.dumps({"ok": True}).encode()]
    with psycopg.connect(url) as conn:
        n = conn.execute("SELECT count(*) FROM comments").fetchone()[0]
    start_response("200 OK", [("content-type", "application/json")])
    return [json.dumps({"comments": n}).encode()]
"""


@pytest.fixture(scope="module")
def pg():
    server = Postgres().start()
    server.psql("CREATE TABLE comments (id serial PRIMARY KEY, body text NOT NULL, served text NOT NULL)",
                user=server.user)
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def monolith(pg, tmp_path_factory):
    """The app itself, two requests at a time, on PostgreSQL directly."""
    code = tmp_path_factory.mktemp("monolith")
    (code / "app.py").write_text(APP)
    os.environ["DATABASE_URL"] = pg.url()
    server = WsgiMonolith(code / "app.py", "application")
    yield server.url
    server.close()


@pytest.fixture(scope="module")
def function(kiln, pg, tmp_path_factory):
    code = tmp_path_factory.mktemp("function")
    (code / "app.py").write_text(APP)
    site = Path(__import__("psycopg").__file__).resolve().parent.parent
    for name in ["psycopg", "psycopg_binary", "psycopg_binary.libs"]:
        shutil.copytree(site / name, code / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(site / "typing_extensions.py", code / "typing_extensions.py")
    name = unique("dbweb")
    deploy_web(kiln, name, None, code, "--memory", "256", "--timeout", "3", "--env", f"DATABASE_URL={pg.url()}")
    return name


def rows(pg, where="true"):
    return int(pg.psql(f"SELECT count(*) FROM comments WHERE {where}"))


def test_an_apps_database_through_kiln(kiln, pg, monolith, function):
    name = unique("dbapp")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{port}", "Upstreams": [monolith], "Function": function,
        "Database": f"postgresql://{pg.user}@127.0.0.1:{pg.port}/{pg.database}",
        "DatabasePassword": pg.password, "Offload": ["POST /comment/", "POST /pooled/"], "MaxInflight": 1,
        "Cover": 1.0,
    }).encode())
    assert r.status_code == 200, r.text
    assert "DatabasePassword" not in r.json() and pg.password not in r.text
    try:
        # Profile and shadow: only the monolith's own inserts stay.
        def eligible():
            if app_routes(kiln, name)["POST /comment/"]["Eligible"]:
                return True
            assert requests.post(url + "/comment/", data="profile", timeout=60).status_code == 201
            return False
        wait_for(eligible, timeout=60, interval=0.05, what="the route eligible")
        route = app_routes(kiln, name)["POST /comment/"]
        assert route["ShadowMatched"] >= 3
        assert rows(pg, "served = 'function'") == 0, "every shadow run was rolled back"
        assert rows(pg) == rows(pg, "body = 'profile'")

        # A burst: each request writes once, whoever serves it.
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: requests.post(url + "/comment/", data=f"real-{i}", timeout=60),
                                    range(32)))
        assert all(r.status_code == 201 for r in results), [r.text for r in results if r.status_code != 201]
        by = [r.headers["x-kiln-served-by"] for r in results]
        assert "function" in by, by
        assert rows(pg, "body LIKE 'real-%'") == 32
        assert int(pg.psql("SELECT count(DISTINCT body) FROM comments WHERE body LIKE 'real-%'")) == 32
        assert rows(pg, "body LIKE 'real-%' AND served = 'function'") == by.count("function")

        # Failures: one that wrote nothing goes back to the monolith, once; one that committed
        # is answered 502 and never run again.
        with ThreadPoolExecutor(8) as pool:
            before = list(pool.map(lambda i: requests.post(url + "/comment/", data=f"crash-before-{i}", timeout=60),
                                   range(16)))
            after = list(pool.map(lambda i: requests.post(url + "/comment/", data=f"crash-after-{i}", timeout=60),
                                  range(16)))
        for i, r in enumerate(before):
            assert r.status_code == 201, r.text
            assert rows(pg, f"body = 'crash-before-{i}'") == 1
        assert any(r.headers["x-kiln-served-by"] == "fallback" for r in before)
        for i, r in enumerate(after):
            assert rows(pg, f"body = 'crash-after-{i}'") == 1
            if r.headers["x-kiln-served-by"] != "monolith":
                assert r.status_code == 502 and "not run again" in r.json()["Message"], r.text
                assert rows(pg, f"body = 'crash-after-{i}' AND served = 'function'") == 1
        # Timed out (the instance is killed): inside the transaction, nothing was written and
        # the monolith serves it; after its commit, 504/502 and never again.
        with ThreadPoolExecutor(4) as pool:
            slow_before = list(pool.map(
                lambda i: requests.post(url + "/comment/", data=f"slow-before-{i}", timeout=60), range(4)))
            slow_after = list(pool.map(
                lambda i: requests.post(url + "/comment/", data=f"slow-after-{i}", timeout=60), range(4)))
        for i, r in enumerate(slow_before):
            assert r.status_code == 201, r.text
            assert rows(pg, f"body = 'slow-before-{i}'") == 1
        assert any(r.headers["x-kiln-served-by"] == "fallback" for r in slow_before)
        for i, r in enumerate(slow_after):
            assert rows(pg, f"body = 'slow-after-{i}'") == 1
            if r.headers["x-kiln-served-by"] != "monolith":
                assert r.status_code == 502, r.text
        assert any(r.status_code == 502 for r in slow_after)
        # The function's instances shared at most the pool's backends.
        metrics = requests.get(kiln.endpoint + "/metrics", timeout=10).text
        assert f'kiln_dbproxy_checkouts_total{{app="{name}"}}' in metrics
        assert f'kiln_dbproxy_shadow_rollbacks_total{{app="{name}"}}' in metrics
        backends = [line for line in metrics.splitlines() if line.startswith(f'kiln_dbproxy_backends{{app="{name}"}}')]
        assert int(backends[0].split()[-1]) <= 16

        # A connection kept open across requests: each transaction is the invocation's in
        # flight when it begins, shadow or real.
        def pooled_eligible():
            if app_routes(kiln, name)["POST /pooled/"]["Eligible"]:
                return True
            assert requests.post(url + "/pooled/", data="pooled-profile", timeout=60).status_code == 201
            return False
        wait_for(pooled_eligible, timeout=60, interval=0.05, what="/pooled/ eligible")
        assert rows(pg, "body = 'pooled-profile' AND served = 'function'") == 0
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: requests.post(url + "/pooled/", data=f"pooled-{i}", timeout=60),
                                    range(24)))
        assert all(r.status_code == 201 for r in results)
        by = [r.headers["x-kiln-served-by"] for r in results]
        assert rows(pg, "body LIKE 'pooled-%' AND body <> 'pooled-profile'") == 24
        assert rows(pg, "body LIKE 'pooled-%' AND body <> 'pooled-profile' AND served = 'function'") == \
            by.count("function")
        assert rows(pg, "body = 'pooled-profile' AND served = 'function'") == 0
    finally:
        delete_app(kiln, name)
