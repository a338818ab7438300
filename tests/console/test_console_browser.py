"""The console in a real browser (headless Chromium): signing in and out, the pages, invoking a
function from its test tab, and user-controlled text that must stay text."""

import re

import pytest
import requests
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from console_pages import go, page_errors, shot, sign_in_with, signed_in, wait
from console_support import XSS, function_key
from kiln_harness import PYTHON_RUNTIME, zip_files


def test_sign_in_refusals_then_sign_in_and_out(kiln, driver, request):
    driver.delete_all_cookies()
    driver.get(kiln.console + "/ui/")
    wait(driver).until(EC.url_to_be(kiln.console + "/ui/sign-in"))
    shot(driver, request, "sign-in")

    sign_in_with(driver, kiln.console, kiln.access_key, "not-the-secret")
    error = wait(driver).until(EC.visibility_of_element_located((By.ID, "sign-in-error")))
    wait(driver).until(lambda d: "wrong" in error.text)
    # The form never keeps the secret once sent.
    assert driver.find_element(By.ID, "secret").get_attribute("value") == ""
    assert driver.find_element(By.ID, "secret").get_attribute("type") == "password"
    shot(driver, request, "wrong-secret")

    key, secret = function_key(kiln)
    sign_in_with(driver, kiln.console, key, secret)
    wait(driver).until(lambda d: "Function keys cannot sign in" in d.find_element(By.ID, "sign-in-error").text)
    assert driver.get_cookie("kiln_console") is None

    signed_in(driver, kiln)
    cookie = driver.get_cookie("kiln_console")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and "expiry" in cookie
    # Scripts cannot read it.
    assert "kiln_console" not in driver.execute_script("return document.cookie")
    assert kiln.access_key in driver.find_element(By.ID, "who").text
    shot(driver, request, "overview")

    driver.find_element(By.ID, "sign-out").click()
    wait(driver).until(EC.url_to_be(kiln.console + "/ui/sign-in"))
    assert driver.get_cookie("kiln_console") is None
    # The old cookie no longer works anywhere.
    replay = requests.Session()
    replay.cookies.set("kiln_console", cookie["value"])
    assert replay.get(kiln.console + "/kiln/v1/status", timeout=10).status_code == 401
    assert page_errors(driver) == []


def test_pages_render_and_invoke_from_the_test_tab(kiln, driver, request):
    kiln.deploy("console-hello", PYTHON_RUNTIME, "app.handler", Description="says hello",
                Environment={"Variables": {"GREETING": "hello-secret-value"}},
                files={"app.py": (
                    "def handler(event, context):\n"
                    "    print('console-hello ran with', event.get('name'))\n"
                    "    return {'message': 'Hello, ' + event.get('name', 'world')}\n")})
    signed_in(driver, kiln)

    go(driver, kiln, "functions", "functions-table")
    link = wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "console-hello")))
    shot(driver, request, "functions")
    link.click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-title"), "console-hello"))
    config = driver.find_element(By.ID, "fn-config").text
    assert PYTHON_RUNTIME in config and "128 MB" in config
    # Environment values are masked until asked for.
    env = driver.find_element(By.ID, "fn-env")
    assert "hello-secret-value" not in env.text and "GREETING" in env.text
    env.find_element(By.TAG_NAME, "button").click()
    assert "hello-secret-value" in env.text
    shot(driver, request, "function")

    # Its code, read-only.
    driver.find_element(By.ID, "tab-code").click()
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "app.py"))).click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "code-text"), "def handler(event, context):"))
    shot(driver, request, "code")

    driver.find_element(By.ID, "tab-test").click()
    payload = wait(driver).until(EC.presence_of_element_located((By.ID, "invoke-payload")))
    payload.clear()
    payload.send_keys('{"name": "console"}')
    driver.find_element(By.ID, "invoke-button").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "invoke-log"), "REPORT RequestId"))
    assert '"message": "Hello, console"' in driver.find_element(By.ID, "invoke-result").text
    assert "Succeeded" in driver.find_element(By.ID, "invoke-status").text
    log = driver.find_element(By.ID, "invoke-log").text
    assert "console-hello ran with console" in log and re.search(r"Max Memory Used: \d+ MB", log)
    shot(driver, request, "test-tab")

    # Saved events come back after a reload (kept in this browser).
    driver.find_element(By.ID, "event-name").send_keys("named")
    driver.find_element(By.ID, "save-event").click()
    driver.refresh()
    payload = wait(driver).until(EC.presence_of_element_located((By.ID, "invoke-payload")))
    assert payload.get_attribute("value") == "{}"
    Select(driver.find_element(By.ID, "saved-events")).select_by_visible_text("named")
    assert payload.get_attribute("value") == '{"name": "console"}'

    driver.find_element(By.ID, "tab-instances").click()
    table = wait(driver).until(EC.presence_of_element_located((By.ID, "instances-table")))
    wait(driver).until(lambda d: re.search(r"console-hello (starting|idle|busy) (coldest|warm|hot)",
                                           d.find_element(By.ID, "instances-table").text))
    shot(driver, request, "function-instances")

    driver.find_element(By.ID, "tab-logs").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "logs-text"), "console-hello ran with console"))
    shot(driver, request, "logs")

    # The functions table says what runs: its instance, its snapshot, its memory model.
    go(driver, kiln, "functions", "functions-table")
    wait(driver).until(lambda d: re.search(r"console-hello python3\.11 128 MB 3 s \S* .+? 0\.0 % of [1-9]\d* [\d.]+ ms / [\d.]+ ms 1 0 fork-server \((ready|building)\) [1-9]\d* invocations, learning",
                                           d.find_element(By.ID, "functions-table").text))
    # The overview's charts count what was just done.
    go(driver, kiln, "overview", "chart-invocations")
    wait(driver).until(lambda d: re.search(r"invocations: [1-9]", d.find_element(By.ID, "overview").text))
    points = driver.find_element(By.CSS_SELECTOR, "#chart-invocations polyline").get_attribute("points")
    assert len(points.split()) >= 2
    shot(driver, request, "overview")

    go(driver, kiln, "instances", "instances-table")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "instances-table"), "console-hello"))
    shot(driver, request, "instances")
    go(driver, kiln, "cache", "models-table")
    shot(driver, request, "cache")
    # A function that is not there says so, rather than showing an empty page.
    driver.get(f"{kiln.console}/ui/#/functions/no-such-function")
    wait(driver).until(lambda d: "no-such-function" in d.find_element(By.ID, "error").text)
    # The only error logged is that 404.
    errors = page_errors(driver)
    assert all("no-such-function" in e["message"] and "404" in e["message"] for e in errors), errors


def test_user_controlled_text_is_shown_as_text_and_never_run(kiln, driver, request):
    kiln.deploy("console-xss", PYTHON_RUNTIME, "app.handler", Description=XSS,
                Environment={"Variables": {"MARKUP": XSS}},
                files={"app.py": (
                    "def handler(event, context):\n"
                    f"    print({XSS!r})\n"
                    f"    return {{'echo': {XSS!r}, 'event': event}}\n")})
    kiln.invoke("console-xss", {"who": XSS})
    signed_in(driver, kiln)
    # Any alert() the page ran would be recorded here (the hook survives fragment changes).
    driver.execute_script("window.__alerts = []; window.alert = (m) => window.__alerts.push(String(m));")

    def no_markup_ran(page):
        assert driver.find_elements(By.CSS_SELECTOR, "#view img, #error img") == [], page
        assert driver.execute_script("return window.__alerts") == [], page
        try:
            driver.switch_to.alert
            pytest.fail(f"an alert opened on {page}")
        except NoAlertPresentException:
            pass
        shot(driver, request, page)

    driver.execute_script("window.location.hash = '#/functions'")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "functions-table"), XSS))
    no_markup_ran("functions")

    driver.execute_script("window.location.hash = '#/functions/console-xss/configuration'")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-description"), XSS))
    env = driver.find_element(By.ID, "fn-env")
    env.find_element(By.TAG_NAME, "button").click()
    assert XSS in env.text
    no_markup_ran("configuration")

    driver.execute_script("window.location.hash = '#/functions/console-xss/logs'")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "logs-text"), XSS))
    no_markup_ran("logs")

    driver.execute_script("window.location.hash = '#/functions/console-xss/test'")
    payload = wait(driver).until(EC.presence_of_element_located((By.ID, "invoke-payload")))
    payload.clear()
    payload.send_keys('{"who": "%s"}' % XSS)
    driver.find_element(By.ID, "invoke-button").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "invoke-log"), "REPORT RequestId"))
    assert XSS in driver.find_element(By.ID, "invoke-result").text
    assert XSS in driver.find_element(By.ID, "invoke-log").text
    no_markup_ran("test")
    # Nothing tried to load `x` or broke the policy.
    assert page_errors(driver) == []


def test_a_session_ended_elsewhere_sends_the_page_to_sign_in(kiln, driver):
    signed_in(driver, kiln)
    token = driver.get_cookie("kiln_console")["value"]
    # Sign the browser's session out from outside, with its own token and CSRF token.
    http = requests.Session()
    http.cookies.set("kiln_console", token)
    csrf = http.get(kiln.console + "/ui/api/session", timeout=10).json()["csrfToken"]
    assert http.delete(kiln.console + "/ui/api/session", headers={"X-Kiln-Csrf": csrf}, timeout=10).status_code == 204
    driver.execute_script("window.location.hash = '#/instances'")
    wait(driver).until(EC.url_to_be(kiln.console + "/ui/sign-in"))


def test_create_from_a_zip_edit_upload_and_watch_the_log_live(kiln, driver, request, tmp_path):
    from kiln_harness import zip_files

    def code(version):
        path = tmp_path / f"v{version}.zip"
        path.write_bytes(zip_files({"app.py": (
            "def handler(event, context):\n"
            f"    print('upload-v{version} saw', event.get('mark'))\n"
            f"    return {{'version': {version}}}\n")}))
        return str(path)

    signed_in(driver, kiln)
    go(driver, kiln, "functions", "create")
    driver.find_element(By.CSS_SELECTOR, "#create summary").click()
    driver.find_element(By.ID, "create-name").send_keys("console-upload")
    Select(driver.find_element(By.ID, "create-runtime")).select_by_value(PYTHON_RUNTIME)
    driver.find_element(By.ID, "create-zip").send_keys(code(1))
    shot(driver, request, "create")
    driver.find_element(By.ID, "create-button").click()
    wait(driver).until(EC.presence_of_element_located((By.ID, "invoke-button"))).click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "invoke-log"), "REPORT RequestId"))
    assert '"version": 1' in driver.find_element(By.ID, "invoke-result").text

    # Edit its memory: the page and the API agree.
    driver.find_element(By.ID, "tab-configuration").click()
    memory = wait(driver).until(EC.presence_of_element_located((By.ID, "edit-memory")))
    memory.clear()
    memory.send_keys("256")
    driver.find_element(By.ID, "edit-save").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-config"), "256 MB"))
    assert kiln.client().get_function_configuration(FunctionName="console-upload")["MemorySize"] == 256
    # A value the API refuses is shown, not swallowed.
    memory = driver.find_element(By.ID, "edit-memory")
    driver.execute_script("arguments[0].removeAttribute('min')", memory)
    memory.clear()
    memory.send_keys("64")
    driver.find_element(By.ID, "edit-save").click()
    wait(driver).until(lambda d: "memorySize" in d.find_element(By.ID, "edit-status").text
                       or "MemorySize" in d.find_element(By.ID, "edit-status").text)
    shot(driver, request, "edit")

    # The environment, edited as KEY=VALUE lines; a line that is not one is refused on the page.
    driver.find_element(By.ID, "env-edit").click()
    text = wait(driver).until(EC.presence_of_element_located((By.ID, "env-text")))
    text.send_keys("STAGE=dev\nnot a variable")
    driver.find_element(By.ID, "env-save").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "env-status"), "not KEY=VALUE"))
    text.clear()
    text.send_keys("STAGE=dev\nURL=https://example.test/?a=b")
    driver.find_element(By.ID, "env-save").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-env"), "STAGE"))
    env = kiln.client().get_function_configuration(FunctionName="console-upload")["Environment"]["Variables"]
    assert env == {"STAGE": "dev", "URL": "https://example.test/?a=b"}
    assert "https://example.test" not in driver.find_element(By.ID, "fn-env").text  # masked again

    # New code, uploaded from the page.
    before = kiln.client().get_function_configuration(FunctionName="console-upload")["CodeSha256"]
    driver.find_element(By.ID, "code-file").send_keys(code(2))
    driver.find_element(By.CSS_SELECTOR, "#code-form button").click()
    wait(driver).until(lambda d: before not in d.find_element(By.ID, "fn-config").text)
    assert kiln.invoke("console-upload")[0] == {"version": 2}

    # The log streams: a line written after the tab opened arrives without a reload.
    driver.find_element(By.ID, "tab-logs").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "logs-state"), "live"))
    kiln.invoke("console-upload", {"mark": "arrived-live-7f3a"})
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "logs-text"), "upload-v2 saw arrived-live-7f3a"))
    shot(driver, request, "logs-live")
    # The only errors logged are the refused edit's answer.
    errors = page_errors(driver)
    assert all("/configuration" in e["message"] and "400" in e["message"] for e in errors), errors


def test_end_a_session_from_the_sessions_tab(kiln, driver, request):
    import json

    from kiln_harness import FUNCTIONS

    kiln.cli("deploy", "console-sessions", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
             "--code", str(FUNCTIONS / "python_sessions"), "--session-hint", "json:$.session")
    session = "cart-" + XSS
    kiln.invoke("console-sessions", {"session": session})
    kiln.invoke("console-sessions", {"session": "other"})
    signed_in(driver, kiln)
    driver.execute_script("window.alert = () => { throw new Error('alert ran'); }")
    driver.execute_script("window.location.hash = '#/functions/console-sessions/sessions'")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "sessions-table"), session))
    assert driver.find_elements(By.CSS_SELECTOR, "#view img") == []
    shot(driver, request, "sessions")

    def end(d):
        for tr in d.find_elements(By.CSS_SELECTOR, "#sessions-table tbody tr"):
            if session in tr.text:
                tr.find_element(By.TAG_NAME, "button").click()
                return True
        return False
    wait(driver).until(end)
    wait(driver).until(lambda d: session not in d.find_element(By.ID, "sessions-table").text)
    left = json.loads(kiln.cli("--json", "sessions", "console-sessions").stdout)["Sessions"]
    assert [s["session"] for s in left] == ["other"]
    assert page_errors(driver) == []


def test_a_functions_layers_are_shown_with_its_configuration(kiln, driver):
    layer = kiln.client().publish_layer_version(
        LayerName="console-layer", Content={"ZipFile": zip_files({"python/shown.py": "VALUE = 1\n"})})
    kiln.deploy("console-layered", PYTHON_RUNTIME, "app.handler",
                files={"app.py": "def handler(event, context):\n    return 1\n"}, Layers=[layer["LayerVersionArn"]])
    signed_in(driver, kiln)
    go(driver, kiln, "functions", "functions-table")
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "console-layered"))).click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-config"), layer["LayerVersionArn"]))
    assert page_errors(driver) == []
