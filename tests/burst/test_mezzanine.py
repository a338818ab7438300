"""The BeeHive benchmark's Mezzanine app (bench/beehive/app/mezzanine, Django 4.2): the monolith is
gunicorn with two workers on PostgreSQL directly, the function the same directory as a Python web
function (`--web-app blogsite.wsgi:application`) on kiln's proxy at the same address. The gateway
reads Mezzanine's routes from Django's resolver; the blog archive served by the function is the
monolith's page; a comment posted as a browser does (the post's page, its CSRF token and the
comment form's security hash) and served by the function writes one row; shadow runs write none.

A shadow run repeats a request the monolith already served: a comment's finds the monolith's
(Mezzanine's duplicate check) and writes nothing of itself, so the shadow runs' containment is
shown on the post's rating form too, whose every POST inserts a rating and updates the post."""

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from kiln_harness import wait_for, zip_dir
from pg_harness import Postgres, unavailable_reason
from test_gateway import app_routes, app_status, delete_app, free_port, unique

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

APP = Path(__file__).resolve().parents[2] / "bench" / "beehive" / "app" / "mezzanine"
SITE_PACKAGES = APP / "site-packages"
COMMENT = "* /comment/"  # Django declares no methods: any method
RATING = "* /rating/"
ARCHIVE = "* /blog/archive/{year:\\d{4}}/{month:\\d{1,2}}/"
POSTS, MONTHS, COMMENTS = 24, 6, 2  # the seed: four posts a month from January 2024, two comments each


@pytest.fixture(scope="module")
def pg():
    if not (SITE_PACKAGES / "mezzanine").is_dir():
        pytest.fail("the site's packages are not installed: run scripts/setup-test-env.sh "
                    "(pip install --target bench/beehive/app/mezzanine/site-packages)")
    server = Postgres().start()
    seeded = subprocess.run([sys.executable, "seed.py", "--posts", str(POSTS), "--months", str(MONTHS),
                             "--comments", str(COMMENTS)], cwd=APP, env=dict(os.environ, DATABASE_URL=server.url()),
                            capture_output=True, text=True, timeout=120)
    assert seeded.returncode == 0, seeded.stderr
    server.seed = json.loads(seeded.stdout.splitlines()[-1])
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def monolith(pg):
    """gunicorn, two sync workers, on PostgreSQL directly."""
    port = free_port()
    env = dict(os.environ, DATABASE_URL=pg.url(), PYTHONPATH=str(SITE_PACKAGES))
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}",
                             "--no-control-socket", "blogsite.wsgi:application"], cwd=APP, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, proc.stdout.read()
        try:
            return requests.get(url + "/blog/", timeout=10).status_code == 200
        except requests.ConnectionError:
            return False
    wait_for(up, timeout=60, interval=0.2, what="the gunicorn monolith")
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def function(kiln, pg, tmp_path_factory):
    """The same directory, its vendored packages included (about 30 MB zipped). The app is created at
    once: the function stays Pending while its package is extracted, and the gateway reads its
    route table again until it can."""
    package = tmp_path_factory.mktemp("mezzanine") / "site.zip"
    package.write_bytes(zip_dir(APP))
    name = unique("mezzanine")
    kiln.cli("deploy", name, "--runtime", "python3.11", "--code", str(package), "--web-app",
             "blogsite.wsgi:application", "--memory", "512", "--timeout", "30", "--env", f"DATABASE_URL={pg.url()}",
             timeout=300)
    return name


class HiddenFields(HTMLParser):
    """The hidden inputs of the first form whose attribute `key` is `value`, as a browser would post them."""

    def __init__(self, key, value):
        super().__init__()
        self.key, self.value, self.inside, self.done, self.fields = key, value, False, False, {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and attrs.get(self.key) == self.value and not self.done:
            self.inside = True
        elif tag == "input" and self.inside and attrs.get("type") == "hidden":
            self.fields[attrs["name"]] = attrs.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form" and self.inside:
            self.inside, self.done = False, True


def post_comment(url, slug, name, text):
    """As a browser: the post's page (a session cookie, the CSRF cookie), then its comment form."""
    browser = requests.Session()
    page = browser.get(f"{url}/blog/{slug}/", timeout=60)
    assert page.status_code == 200, page.text[:2000]
    form = HiddenFields("id", "comment")
    form.feed(page.text)
    assert {"csrfmiddlewaretoken", "content_type", "object_pk", "timestamp", "security_hash"} <= set(form.fields)
    data = dict(form.fields, name=name, email="reader@example.com", url="", comment=text, honeypot="")
    return browser.post(url + "/comment/", data=data, allow_redirects=False, timeout=60)


def post_rating(url, slug, value):
    """As a new browser: the post's page, then its rating form (the first on the page)."""
    browser = requests.Session()
    page = browser.get(f"{url}/blog/{slug}/", timeout=60)
    assert page.status_code == 200, page.text[:2000]
    form = HiddenFields("action", "/rating/")
    form.feed(page.text)
    assert {"csrfmiddlewaretoken", "content_type", "object_pk"} <= set(form.fields), form.fields
    return browser.post(url + "/rating/", data=dict(form.fields, value=str(value)), allow_redirects=False,
                        timeout=60)


def comments(pg, where="true"):
    return int(pg.psql(f"SELECT count(*) FROM django_comments WHERE {where}"))


def masked(page):
    """A page without what differs per response: CSRF tokens and the comment forms' timestamps and hashes."""
    return re.sub(r'(name="(?:csrfmiddlewaretoken|timestamp|security_hash)" value=)"[^"]*"', r'\1""', page)


def test_mezzanine_through_kiln(kiln, pg, monolith, function):
    name = unique("mezzapp")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    run = uuid.uuid4().hex[:8]
    months = sorted(pg.seed["posts"])
    assert len(months) == MONTHS and pg.seed["comments"] == POSTS * COMMENTS
    archive = "/blog/archive/{}/".format(months[0])  # 2024/1
    first_post = pg.seed["posts"][months[0]][0]
    r = kiln.signed_request("PUT", f"/kiln/v1/apps/{name}", json.dumps({
        "Listen": f"127.0.0.1:{port}", "Upstreams": [monolith], "Function": function,
        "Database": f"postgresql://{pg.user}@127.0.0.1:{pg.port}/{pg.database}",
        "DatabasePassword": pg.password, "Policy": "ratio", "Ratio": 1.0, "MaxInflight": 1, "Cover": 1.0,
        "CooldownSeconds": 600,
    }).encode(), {"content-type": "application/json"})
    assert r.status_code == 200, r.text
    try:
        # (a) The candidates are the routes Django's resolver declares, translated.
        declared = wait_for(lambda: (d := app_status(kiln, name)["Declared"]) and d["Routes"] and d,
                            timeout=180, what="the declared routes")
        assert declared["Framework"] == "django", declared
        routes = app_routes(kiln, name)
        assert {COMMENT, ARCHIVE, RATING} <= set(routes), sorted(routes)
        assert routes[COMMENT]["Source"] == routes[ARCHIVE]["Source"] == routes[RATING]["Source"] == "declared"

        # (c) Profile and shadow the archive, the comment form and the rating form: the monolith
        # serves, the function repeats requests in shadow runs whose transactions are rolled back, so
        # the tables hold the monolith's rows and nothing else.
        sent = []
        rated = pg.seed["posts"][months[1]][0]

        def eligible():
            routes = app_routes(kiln, name)
            if all(routes[r]["Eligible"] for r in (COMMENT, ARCHIVE, RATING)):
                return True
            r = requests.get(url + archive, timeout=60)
            assert r.status_code == 200, r.text[:2000]
            text = f"profile-{run}-{len(sent)}"
            r = post_comment(url, first_post, "profiler", text)
            assert r.status_code == 302, r.text[:2000]
            r = post_rating(url, rated, 1 + len(sent) % 5)
            assert r.status_code == 302 and r.headers["location"].startswith(f"/blog/{rated}/"), r.headers
            sent.append(text)
            return False
        wait_for(eligible, timeout=90, interval=0.05, what="the archive, comment and rating routes eligible")
        routes = app_routes(kiln, name)
        assert all(routes[r]["ShadowMatched"] >= 3 for r in (COMMENT, ARCHIVE, RATING)), routes
        assert comments(pg, f"comment LIKE 'profile-{run}-%'") == len(sent), "no shadow run wrote"
        assert comments(pg) == POSTS * COMMENTS + len(sent)
        # Each rating inserted once and counted once on the post, though each was run again in a shadow.
        assert int(pg.psql("SELECT count(*) FROM generic_rating")) == len(sent)
        assert pg.psql(f"SELECT rating_count FROM blog_blogpost WHERE slug = '{rated}'") == str(len(sent))
        metrics = requests.get(kiln.endpoint + "/metrics", timeout=10).text
        rollbacks = [line for line in metrics.splitlines()
                     if line.startswith(f'kiln_dbproxy_shadow_rollbacks_total{{app="{name}"}} ')]
        assert rollbacks and float(rollbacks[0].split()[-1]) >= 3, rollbacks

        # (b) A burst (more than one request in flight at the monolith); from then on, with the
        # ratio at 1, every request of the eligible routes is the function's.
        with ThreadPoolExecutor(6) as pool:
            burst = list(pool.map(lambda i: requests.get(url + "/blog/archive/{}/".format(months[i % MONTHS]),
                                                         timeout=60), range(24)))
        assert all(r.status_code == 200 for r in burst), [r.status_code for r in burst]
        assert app_status(kiln, name)["Control"]["InBurst"]

        # The archive from the function is the monolith's page.
        for month in months[:3]:
            path = f"/blog/archive/{month}/"
            offloaded = requests.get(url + path, timeout=60)
            assert offloaded.status_code == 200 and offloaded.headers["x-kiln-served-by"] == "function", \
                offloaded.headers
            direct = requests.get(monolith + path, timeout=60)
            assert direct.status_code == 200
            assert masked(offloaded.text) == masked(direct.text)
            for slug in pg.seed["posts"][month]:
                assert f'href="/blog/{slug}/"' in offloaded.text

        # One comment served by the function: exactly one row, where the redirect says.
        text = f"offloaded-{run}"
        r = post_comment(url, first_post, "burst reader", text)
        assert r.status_code == 302, r.text[:2000]
        assert r.headers["x-kiln-served-by"] == "function", r.headers
        assert comments(pg, f"comment = '{text}'") == 1
        row = pg.psql(f"SELECT id, object_pk, user_name FROM django_comments WHERE comment = '{text}'")
        comment_id, object_pk, user_name = row.split("|")
        assert user_name == "burst reader"
        assert r.headers["location"] == f"/blog/{first_post}/#comment-{comment_id}", r.headers
        post_id = pg.psql(f"SELECT id FROM blog_blogpost WHERE slug = '{first_post}'")
        assert object_pk == post_id
        # The post's page, from the function too, shows it.
        page = requests.get(f"{url}/blog/{first_post}/", timeout=60)
        assert page.status_code == 200 and text in page.text
        assert comments(pg) == POSTS * COMMENTS + len(sent) + 1
        assert comments(pg, f"comment LIKE 'profile-{run}-%'") == len(sent)
    finally:
        delete_app(kiln, name)
