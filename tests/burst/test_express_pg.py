"""The BeeHive benchmark's Express 5 + pg app (bench/beehive/app/express): the monolith is node with
two cluster workers on PostgreSQL directly, the function the same code as a Node web function
(`--web-app app.js#app`) on kiln's proxy at the same address. A pinned route stays on the monolith,
an offloaded comment writes once, the named prepared statement of node-postgres is bound on
whichever backend the proxy gives, shadow runs leave the table as it was, and the function's
instances share the proxy's backends."""

import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from kiln_harness import NODE_RUNTIME, wait_for
from pg_harness import Postgres, unavailable_reason
from test_gateway import app_routes, app_status, delete_app, free_port, unique

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

APP = Path(__file__).resolve().parents[2] / "bench" / "beehive" / "app" / "express"
POOL = 16  # the backends kiln's proxy shares among an app's function instances
MONOLITH_POOL = 2  # pg.Pool's size in each of the monolith's two workers


@pytest.fixture(scope="module")
def pg():
    server = Postgres().start()
    server.psql((APP / "schema.sql").read_text(), user=server.user)
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def monolith(pg):
    """`node server.js`: two cluster workers, each with its own pg.Pool, on PostgreSQL directly."""
    if not (APP / "node_modules" / "pg").is_dir():
        pytest.fail("the app is not installed: run scripts/setup-test-env.sh "
                    "(npm ci in bench/beehive/app/express)")
    port = free_port()
    env = dict(os.environ, PORT=str(port), WORKERS="2", DATABASE_URL=pg.url(), PG_POOL_MAX=str(MONOLITH_POOL),
               PGAPPNAME="monolith")
    proc = subprocess.Popen(["node", "server.js"], cwd=APP, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, proc.stdout.read()
        try:
            return requests.get(url + "/", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False
    wait_for(up, timeout=30, interval=0.1, what="the node monolith")
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="module", params=["app", "start"])
def function(request, kiln, pg):
    """The same directory: its exported app (`--web-app app.js#app`), or its own entry script, whose
    cluster primary forks two workers in each instance (`--web-start server.js`)."""
    flags = ("--web-app", "app.js#app") if request.param == "app" \
        else ("--web-start", "server.js", "--web-port", "3000")
    name = unique("expresspg-" + request.param)
    kiln.cli("deploy", name, "--runtime", NODE_RUNTIME, "--code", str(APP), *flags,
             "--memory", "256", "--timeout", "10", "--env", f"DATABASE_URL={pg.url()}", timeout=180)
    return name


def rows(pg, where="true"):
    return int(pg.psql(f"SELECT count(*) FROM comments WHERE {where}"))


def comment(url, request_id, post, body="a comment", form=False):
    fields = {"request_id": request_id, "post": post, "author": "reader", "body": body}
    if form:
        return requests.post(url + "/comment/", data=fields, timeout=60)
    return requests.post(url + "/comment/", json=fields, timeout=60)


def metric(kiln, series):
    text = requests.get(kiln.endpoint + "/metrics", timeout=10).text
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(series + " ")]
    return float(values[0]) if values else None


def test_express_pg_app_through_kiln(kiln, pg, monolith, function):
    name = unique("expressapp")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    run = uuid.uuid4().hex[:8]
    post = 1000 + int(run, 16) % 100000  # this run's own post
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{port}", "Upstreams": [monolith], "Function": function,
        "Database": f"postgresql://{pg.user}@127.0.0.1:{pg.port}/{pg.database}",
        "DatabasePassword": pg.password, "Offload": ["POST /comment/", "GET /comments/{post}"], "Pin": ["GET /"],
        "Policy": "ratio", "Ratio": 1.0, "MaxInflight": 1, "Cover": 1.0,
    }).encode(), {"content-type": "application/json"})
    assert r.status_code == 200, r.text
    try:
        # (a) The monolith serves what is not offloaded: the pinned root, from its workers.
        for _ in range(6):
            r = requests.get(url + "/", timeout=30)
            assert r.status_code == 200 and r.headers["x-kiln-served-by"] == "monolith", r.headers
        r = requests.get(url + "/comments/3", timeout=30)
        assert r.status_code == 200 and r.headers["x-kiln-served-by"] == "monolith"
        assert len(r.json()["comments"]) == 5  # the seed's

        # (c) Profile and shadow both routes: every shadow run of POST /comment/ is rolled back,
        # so the table holds the monolith's rows and nothing else.
        seed = pg.dump_data()
        sent = []

        def eligible():
            routes = app_routes(kiln, name)
            if routes["POST /comment/"]["Eligible"] and routes["GET /comments/{post}"]["Eligible"]:
                return True
            request_id = f"profile-{run}-{len(sent)}"
            r = comment(url, request_id, 7, form=len(sent) % 2 == 1)
            assert r.status_code == 201, r.text
            # Until it is eligible, the route is the monolith's (then, in this burst, the function's).
            assert r.headers["x-kiln-served-by"] == "monolith" or \
                app_routes(kiln, name)["POST /comment/"]["Eligible"], r.headers
            assert r.json()["request_id"] == request_id
            sent.append(request_id)
            assert requests.get(url + "/comments/7", timeout=60).status_code == 200
            return False
        wait_for(eligible, timeout=40, interval=0.05, what="both routes eligible")
        routes = app_routes(kiln, name)
        assert routes["POST /comment/"]["ShadowMatched"] >= 3, routes
        assert routes["GET /comments/{post}"]["ShadowMatched"] >= 3, routes
        assert metric(kiln, f'kiln_dbproxy_shadow_rollbacks_total{{app="{name}"}}') >= 3
        assert rows(pg, f"request_id LIKE 'profile-{run}-%'") == len(sent)
        assert int(pg.psql(f"SELECT count(DISTINCT request_id) FROM comments "
                           f"WHERE request_id LIKE 'profile-{run}-%'")) == len(sent)
        # The dump differs from the seed's by the monolith's own rows only.
        after = pg.dump_data()
        theirs = [line for line in after.splitlines() if line not in seed.splitlines()]
        assert len(theirs) == len(sent), theirs
        assert all(re.search(rf"\tprofile-{run}-\d+\t7\treader\t", line) for line in theirs), theirs

        # (b) A burst (more than one request in flight at the monolith), then every request of the
        # offloaded routes goes to the function; sample PostgreSQL's backends throughout.
        peak = [pg.backends()]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak.append(pg.backends())
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                burst = list(pool.map(lambda i: comment(url, f"burst-{run}-{i}", 11 + i % 3, form=i % 2 == 1),
                                      range(32)))
                reads = list(pool.map(lambda i: requests.get(url + f"/comments/{11 + i % 3}", timeout=60),
                                      range(48)))
            assert all(r.status_code == 201 for r in burst), [r.text for r in burst if r.status_code != 201]
            by = [r.headers["x-kiln-served-by"] for r in burst]
            assert "function" in by, by
            assert app_status(kiln, name)["Control"]["InBurst"]

            # One comment served by the function: exactly one row, read back through the named
            # prepared statement, bound again and again on the proxy's backends.
            request_id = f"one-{run}"
            r = comment(url, request_id, post, body="served by the function")
            assert r.status_code == 201, r.text
            assert r.headers["x-kiln-served-by"] == "function", r.headers
            row = r.json()
            assert row["request_id"] == request_id and row["post"] == post
            assert rows(pg, f"request_id = '{request_id}'") == 1
            with ThreadPoolExecutor(6) as pool:
                got = list(pool.map(lambda i: requests.get(url + f"/comments/{post}", timeout=60), range(24)))
            for r in got:
                assert r.status_code == 200, r.text
                assert [c["request_id"] for c in r.json()["comments"]] == [request_id], r.text
            assert [r.headers["x-kiln-served-by"] for r in got].count("function") >= 20
            # The backends that prepared it go away (the monolith's stay): the instances' pg
            # clients, still connected to the proxy, only bind the statement, which the proxy
            # prepares again on the backends that replace them.
            gone = pg.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           f"WHERE usename = '{pg.user}' AND application_name <> 'monolith'")
            assert int(gone) >= 1
            wait_for(lambda: pg.backends() <= 2 * MONOLITH_POOL, timeout=10, interval=0.05, what="backends gone")
            for _ in range(8):
                r = requests.get(url + f"/comments/{post}", timeout=60)
                assert r.status_code == 200, r.text
                assert r.headers["x-kiln-served-by"] == "function", r.headers
                assert [c["request_id"] for c in r.json()["comments"]] == [request_id], r.text
        finally:
            done.set()
            sampler.join()

        # Each burst request wrote once, whoever served it; the reads saw them.
        for i in range(32):
            assert rows(pg, f"request_id = 'burst-{run}-{i}'") == 1
        assert all(r.status_code == 200 for r in reads), [r.text for r in reads if r.status_code != 200]
        assert "function" in [r.headers["x-kiln-served-by"] for r in reads]
        assert rows(pg, f"request_id LIKE 'profile-{run}-%'") == len(sent), "no shadow run wrote"

        # (d) The function's instances shared at most the proxy's pool: PostgreSQL saw at most
        # the proxy's backends and the monolith's own pools.
        backends = metric(kiln, f'kiln_dbproxy_backends{{app="{name}"}}')
        assert backends is not None and 1 <= backends <= POOL, backends
        assert max(peak) <= POOL + 2 * MONOLITH_POOL, peak
        assert metric(kiln, f'kiln_dbproxy_checkouts_total{{app="{name}"}}') >= 24
        assert metric(kiln, f'kiln_dbproxy_queue_timeouts_total{{app="{name}"}}') in (None, 0)
    finally:
        delete_app(kiln, name)
