"""The console over plain HTTP: its headers, signing in and out, sessions, CSRF and the rate limit."""

import json
import re
import subprocess

import pytest
import requests

from console_support import function_key, refused_sign_in, sign_in
from kiln_harness import KILN_BIN, PYTHON_RUNTIME

PAGES = ["/ui/", "/ui/sign-in", "/ui/assets/app.js", "/ui/assets/style.css", "/ui/assets/kiln.svg",
         "/ui/api/session", "/ui/no-such-page"]


def csp_directives(response):
    policy = response.headers.get("Content-Security-Policy", "")
    return {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}


@pytest.mark.parametrize("signed_in", [False, True])
def test_every_console_response_carries_the_security_headers(kiln, signed_in):
    http, _ = sign_in(kiln) if signed_in else (requests.Session(), None)
    for path in PAGES:
        response = http.get(kiln.console + path, allow_redirects=False, timeout=10)
        csp = csp_directives(response)
        assert csp.get("script-src") == ["'self'"], (path, response.headers)
        assert csp.get("default-src") == ["'none'"], path
        assert csp.get("frame-ancestors") == ["'none'"], path
        assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
        assert "'unsafe-eval'" not in response.headers["Content-Security-Policy"]
        assert response.headers.get("X-Content-Type-Options") == "nosniff", path
        assert response.headers.get("Referrer-Policy") == "no-referrer", path


def test_unauthenticated_pages_redirect_to_sign_in(kiln):
    response = requests.get(kiln.console + "/ui/", allow_redirects=False, timeout=10)
    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/sign-in"
    bare = requests.get(kiln.console + "/ui", allow_redirects=False, timeout=10)
    assert bare.status_code in (301, 308) and bare.headers["Location"] == "/ui/"
    page = requests.get(kiln.console + "/ui/sign-in", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    # The page holds no data: the session endpoint and the API refuse without a session.
    assert requests.get(kiln.console + "/ui/api/session", timeout=10).status_code == 401
    assert requests.get(kiln.console + "/kiln/v1/status", timeout=10).status_code == 403


def test_assets_are_embedded_and_served_with_their_types(kiln):
    for name, kind in [("app.js", "text/javascript"), ("style.css", "text/css"), ("kiln.svg", "image/svg+xml")]:
        response = requests.get(f"{kiln.console}/ui/assets/{name}", timeout=10)
        assert response.status_code == 200 and response.headers["Content-Type"].startswith(kind)
    for missing in ["nope.js", "..%2Fmod.rs", "%2e%2e"]:
        response = requests.get(f"{kiln.console}/ui/assets/{missing}", timeout=10)
        assert response.status_code == 404, missing
        assert "message" in response.json()
    # The page loads its script and style only from kiln itself, nothing inline.
    page = requests.get(kiln.console + "/ui/sign-in", timeout=10).text
    assert re.findall(r'<script[^>]*src="([^"]+)"', page) == ["/ui/assets/app.js"]
    assert "<script>" not in page and "<style" not in page and "http://" not in page and "https://" not in page


def test_sign_in_sets_an_httponly_strict_expiring_cookie(kiln):
    http, response = sign_in(kiln)
    assert response.status_code == 200, response.text
    cookie = response.headers["Set-Cookie"]
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert attributes[0].startswith("kiln_console=") and len(attributes[0]) > len("kiln_console=") + 30
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "path=/" in attributes
    assert "max-age=43200" in attributes  # the default --ui-session-ttl, 12 h
    body = response.json()
    assert body["accessKeyId"] == kiln.access_key
    assert len(body["csrfToken"]) >= 32
    assert kiln.secret_key not in response.text
    # The cookie alone reads the API.
    status = http.get(kiln.console + "/kiln/v1/status", timeout=10)
    assert status.status_code == 200 and "node" in status.json()
    assert http.get(kiln.console + "/ui/", allow_redirects=False, timeout=10).status_code == 200


def test_wrong_secret_and_unknown_keys_are_refused(kiln):
    wrong = refused_sign_in(kiln, kiln.access_key, kiln.secret_key + "x")
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    assert "wrong" in wrong.json()["message"]
    unknown = refused_sign_in(kiln, "AKIANOTKILNSKEY00000", kiln.secret_key)
    assert unknown.status_code == 401
    # Only JSON signs in: another site's form cannot post one.
    form = requests.post(kiln.console + "/ui/api/session",
                         data={"accessKeyId": kiln.access_key, "secretAccessKey": kiln.secret_key}, timeout=10)
    assert form.status_code == 415
    for body in [b"{", b"[]", json.dumps({"accessKeyId": kiln.access_key}).encode()]:
        bad = requests.post(kiln.console + "/ui/api/session", data=body,
                            headers={"Content-Type": "application/json"}, timeout=10)
        assert bad.status_code == 400 and bad.json()["message"], body


def test_a_function_key_cannot_sign_in(kiln):
    key, secret = function_key(kiln)
    assert key != kiln.access_key
    refused = refused_sign_in(kiln, key, secret)
    assert refused.status_code == 403
    assert "Function keys cannot sign in" in refused.json()["message"]


def test_changes_need_the_csrf_token(kiln):
    kiln.deploy("console-csrf", PYTHON_RUNTIME, "app.handler",
                files={"app.py": "def handler(event, context):\n    return {'got': event}\n"})
    http, response = sign_in(kiln)
    csrf = response.json()["csrfToken"]
    invoke = kiln.console + "/2015-03-31/functions/console-csrf/invocations"
    for headers in [{}, {"X-Kiln-Csrf": ""}, {"X-Kiln-Csrf": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")}]:
        refused = http.post(invoke, data=b'{"n": 1}', headers=headers, timeout=30)
        assert refused.status_code == 403, headers
        assert "CSRF" in refused.json()["message"]
    # Signing out is a change too: without the token the session survives.
    assert http.delete(kiln.console + "/ui/api/session", timeout=10).status_code == 403
    assert http.get(kiln.console + "/ui/api/session", timeout=10).status_code == 200
    done = http.post(invoke, data=b'{"n": 1}', headers={"X-Kiln-Csrf": csrf, "X-Amz-Log-Type": "Tail"}, timeout=60)
    assert done.status_code == 200, done.text
    assert done.json() == {"got": {"n": 1}}
    # Another session's token is not this one's.
    _, other = sign_in(kiln)
    assert http.post(invoke, data=b"{}", headers={"X-Kiln-Csrf": other.json()["csrfToken"]},
                     timeout=30).status_code == 403


def test_sign_out_ends_the_session_on_the_server(kiln):
    http, response = sign_in(kiln)
    csrf = response.json()["csrfToken"]
    token = http.cookies["kiln_console"]
    out = http.delete(kiln.console + "/ui/api/session", headers={"X-Kiln-Csrf": csrf}, timeout=10)
    assert out.status_code == 204
    assert "max-age=0" in out.headers["Set-Cookie"].lower()
    # Replaying the old cookie does not work: the session is gone, not just the cookie.
    replay = requests.Session()
    replay.cookies.set("kiln_console", token)
    assert replay.get(kiln.console + "/ui/api/session", timeout=10).status_code == 401
    assert replay.get(kiln.console + "/kiln/v1/status", timeout=10).status_code == 401
    assert replay.get(kiln.console + "/ui/", allow_redirects=False, timeout=10).status_code == 303


def test_function_urls_and_the_console_are_origins_apart(kiln):
    """A function URL's page (HTML and script a function writes) is served on the API's
    listener; the console and its cookie-authenticated API on a listener of their own, so no
    function's script runs on the origin that honours a signed-in viewer's cookie."""
    kiln.deploy("console-iam-url", PYTHON_RUNTIME, "app.handler",
                files={"app.py": "def handler(event, context):\n    return 'reached'\n"})
    kiln.client().create_function_url_config(FunctionName="console-iam-url", AuthType="AWS_IAM")
    http, response = sign_in(kiln)
    csrf = response.json()["csrfToken"]
    assert kiln.console.rsplit(":", 1)[1] != kiln.endpoint.rsplit(":", 1)[1]
    # No function URL on the console's origin ...
    assert http.get(kiln.console + "/fn/console-iam-url/", timeout=30).status_code == 404
    # ... and on the API's, the cookie (and its CSRF token) count for nothing.
    assert http.get(kiln.endpoint + "/fn/console-iam-url/", timeout=30).status_code == 403
    assert http.get(kiln.endpoint + "/kiln/v1/status", timeout=10).status_code == 403
    deleted = http.delete(kiln.endpoint + "/2015-03-31/functions/console-iam-url",
                          headers={"X-Kiln-Csrf": csrf}, timeout=10)
    assert deleted.status_code == 403
    assert kiln.client().get_function(FunctionName="console-iam-url")["Configuration"]["State"]
    assert requests.get(kiln.endpoint + "/ui/", timeout=10).status_code == 404
    # The same cookie on the console's origin does read the API.
    assert http.get(kiln.console + "/kiln/v1/status", timeout=10).status_code == 200


def test_failed_sign_ins_are_rate_limited_per_address_and_logged(fresh_kiln):
    server = fresh_kiln()
    statuses = [sign_in(server, secret="wrong-secret")[1].status_code for _ in range(5)]
    assert statuses == [401] * 5
    limited = sign_in(server)[1]  # even the right secret, now
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) > 0
    assert "Too many failed sign-ins" in limited.json()["message"]
    assert "Set-Cookie" not in limited.headers
    log = re.sub(r"\x1b\[[0-9;]*m", "", "".join(server.output))
    assert log.count("console: failed sign-in") == 5, log
    assert "client=127.0.0.1 failures=5" in log, log
    # A signed request is not a sign-in: the API still answers the same address.
    assert server.signed_request("GET", "/kiln/v1/status").status_code == 200


def test_session_ttl_flag_and_console_url_are_printed(fresh_kiln):
    server = fresh_kiln(extra_args=["--ui-session-ttl", "90m"])
    assert f"console on {server.console}/ui/" in "".join(server.output)
    _, response = sign_in(server)
    assert "max-age=5400" in response.headers["Set-Cookie"].lower()


def test_ui_off_serves_no_console_and_takes_no_cookie(fresh_kiln):
    server = fresh_kiln(extra_args=["--ui", "off"])
    assert "console on" not in "".join(server.output) and server.console is None
    assert requests.get(server.endpoint + "/ui/", timeout=10).status_code == 404
    assert requests.post(server.endpoint + "/ui/api/session", json={}, timeout=10).status_code == 404
    assert server.signed_request("GET", "/kiln/v1/history").status_code == 404


def test_bad_ttl_is_refused_with_a_message(tmp_path):
    result = subprocess.run([str(KILN_BIN), "up", "--data-dir", str(tmp_path), "--ui-session-ttl", "soon"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "not a duration" in result.stderr


def test_rotated_credentials_end_sessions(fresh_kiln):
    server = fresh_kiln()
    http, response = sign_in(server)
    assert response.status_code == 200
    server.stop()
    path = server.data_dir / "credentials.json"
    credentials = json.loads(path.read_text())
    credentials["secretAccessKey"] = "R" * 40
    path.write_text(json.dumps(credentials))
    server.start()
    assert server.secret_key == "R" * 40
    assert http.get(server.console + "/ui/api/session", timeout=10).status_code == 401
    assert sign_in(server)[1].status_code == 200


def history_totals(server):
    response = server.signed_request("GET", "/kiln/v1/history?seconds=3600")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["IntervalSeconds"] == 1
    samples = body["Samples"]
    assert [s["Time"] for s in samples] == sorted(s["Time"] for s in samples)
    keys = ["Invocations", "Errors", "Throttles", "Coldest", "Warm", "Hot"]
    return {k: sum(s[k] for s in samples) for k in keys}


def test_history_counts_invocations_errors_and_cold_starts(kiln):
    from kiln_harness import wait_for
    before = history_totals(kiln)
    kiln.deploy("console-history", PYTHON_RUNTIME, "app.handler", files={"app.py": (
        "def handler(event, context):\n"
        "    if event.get('fail'):\n"
        "        raise ValueError('asked to')\n"
        "    return 1\n")})
    for event in [{}, {}, {"fail": True}]:
        kiln.invoke("console-history", event)

    def counted():
        now = history_totals(kiln)
        grew = {k: now[k] - before[k] for k in now}
        starts = grew["Coldest"] + grew["Warm"] + grew["Hot"]
        return grew["Invocations"] >= 3 and grew["Errors"] >= 1 and starts >= 1
    wait_for(counted, timeout=30, what="the history to count the invocations")
    for bad in ["0", "3601", "x"]:
        assert kiln.signed_request("GET", f"/kiln/v1/history?seconds={bad}").status_code == 400
    assert requests.get(kiln.console + "/kiln/v1/history", timeout=10).status_code == 403


def test_code_files_are_listed_and_shown_as_text_only(kiln):
    files = {
        "app.py": "def handler(event, context):\n    return 'code'\n",
        "lib/blob.bin": bytes([0, 1, 2, 255]),
        "docs/read me.txt": "spaced name\n",
    }
    kiln.deploy("console-code", PYTHON_RUNTIME, "app.handler", files=files)
    listed = kiln.signed_request("GET", "/kiln/v1/functions/console-code/files")
    assert listed.status_code == 200
    assert {f["Path"]: f["Size"] for f in listed.json()["Files"]} == {name: len(body) for name, body in files.items()}
    text = kiln.signed_request("GET", "/kiln/v1/functions/console-code/files/app.py")
    assert text.status_code == 200 and text.text.startswith("def handler")
    assert text.headers["Content-Type"].startswith("text/plain")
    spaced = kiln.signed_request("GET", "/kiln/v1/functions/console-code/files/docs/read%20me.txt")
    assert spaced.status_code == 200 and spaced.text == "spaced name\n"
    binary = kiln.signed_request("GET", "/kiln/v1/functions/console-code/files/lib/blob.bin")
    assert binary.status_code == 415 and "not a text file" in binary.json()["message"]
    for missing in ["nope.py", "lib", "..%2Fcredentials.json", "%2Fetc%2Fpasswd"]:
        response = kiln.signed_request("GET", f"/kiln/v1/functions/console-code/files/{missing}")
        assert response.status_code == 404, (missing, response.text)
    assert kiln.signed_request("GET", "/kiln/v1/functions/no-such/files").status_code == 404
