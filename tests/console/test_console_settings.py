"""A function's kiln settings and URL edited from the console, the memory picture (OFC's
division of the budget), and the theme switch."""

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from console_pages import go, page_errors, shot, signed_in, wait
from console_support import sign_in
from kiln_harness import PYTHON_RUNTIME


def configuration(kiln, name):
    return kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()


def deploy_echo(kiln, name):
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": (
        "def handler(event, context):\n"
        "    return {'statusCode': 200, 'body': 'from ' + context.function_name}\n")})


def test_a_function_url_read_on_the_console_listener_points_at_the_api(kiln):
    deploy_echo(kiln, "console-url-origin")
    lam = kiln.client()
    assert lam.list_function_url_configs(FunctionName="console-url-origin")["FunctionUrlConfigs"] == []
    lam.create_function_url_config(FunctionName="console-url-origin", AuthType="NONE")
    listed = lam.list_function_url_configs(FunctionName="console-url-origin")["FunctionUrlConfigs"]
    assert [c["AuthType"] for c in listed] == ["NONE"]
    http, _ = sign_in(kiln)
    seen = http.get(kiln.console + "/2021-10-31/functions/console-url-origin/url", timeout=10).json()
    # Function URLs are served on the API's listener only, never on the console's.
    assert seen["FunctionUrl"] == kiln.endpoint + "/fn/console-url-origin/"
    assert requests.get(seen["FunctionUrl"], timeout=30).text == "from console-url-origin"
    listed = http.get(kiln.console + "/2021-10-31/functions/console-url-origin/urls", timeout=10).json()
    assert [c["FunctionUrl"] for c in listed["FunctionUrlConfigs"]] == [seen["FunctionUrl"]]
    missing = kiln.signed_request("GET", "/2021-10-31/functions/no-such-function/urls")
    assert missing.status_code == 404


def test_the_url_is_given_changed_and_taken_away_on_the_page(kiln, driver, request):
    deploy_echo(kiln, "console-url-page")
    signed_in(driver, kiln)
    go(driver, kiln, "functions/console-url-page/configuration", "fn-url")
    wait(driver).until(EC.presence_of_element_located((By.ID, "url-none")))
    Select(driver.find_element(By.ID, "url-auth")).select_by_value("NONE")
    driver.find_element(By.ID, "url-create").click()
    link = wait(driver).until(EC.presence_of_element_located((By.ID, "url-link")))
    url = link.get_attribute("href")
    assert url == kiln.endpoint + "/fn/console-url-page/"
    assert requests.get(url, timeout=30).text == "from console-url-page"
    shot(driver, request, "url")

    Select(driver.find_element(By.ID, "url-auth")).select_by_value("AWS_IAM")
    driver.find_element(By.ID, "url-update").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-url"), "signed requests only"))
    assert requests.get(url, timeout=30).status_code == 403

    # Its CORS, edited on the page: the URL's config has it, and a preflight is answered by it.
    wait(driver).until(EC.presence_of_element_located((By.ID, "cors-origins")))
    driver.find_element(By.ID, "cors-origins").send_keys("https://app.example, https://admin.example")
    driver.find_element(By.ID, "cors-methods").send_keys("GET, POST")
    driver.find_element(By.ID, "cors-max-age").send_keys("600")
    driver.find_element(By.ID, "cors-credentials").click()
    driver.find_element(By.ID, "cors-save").click()
    lam = kiln.client()

    def cors():
        got = lam.get_function_url_config(FunctionName="console-url-page").get("Cors") or {}
        return got if got.get("AllowOrigins") else None
    got = wait(driver).until(lambda d: cors())
    assert got == {"AllowOrigins": ["https://app.example", "https://admin.example"],
                   "AllowMethods": ["GET", "POST"], "MaxAge": 600, "AllowCredentials": True}, got
    preflight = requests.options(url, timeout=30, headers={
        "Origin": "https://admin.example", "Access-Control-Request-Method": "POST"})
    assert preflight.headers.get("Access-Control-Allow-Origin") == "https://admin.example", preflight.headers
    # Drawn again from the config, the form shows what is saved; cleared, CORS goes.
    wait(driver).until(lambda d: d.find_element(By.ID, "cors-origins").get_attribute("value")
                       == "https://app.example, https://admin.example")
    assert driver.find_element(By.ID, "url-auth").get_attribute("value") == "AWS_IAM", "the auth is kept"
    driver.find_element(By.ID, "cors-origins").clear()
    driver.find_element(By.ID, "cors-methods").clear()
    driver.find_element(By.ID, "cors-max-age").clear()
    driver.find_element(By.ID, "cors-credentials").click()
    driver.find_element(By.ID, "cors-save").click()
    wait(driver).until(lambda d: not (lam.get_function_url_config(FunctionName="console-url-page").get("Cors") or {}))
    shot(driver, request, "url-cors")
    driver.find_element(By.ID, "url-delete").click()
    wait(driver).until(EC.presence_of_element_located((By.ID, "url-none")))
    assert kiln.client().list_function_url_configs(FunctionName="console-url-page")["FunctionUrlConfigs"] == []
    assert page_errors(driver) == []


def test_prebake_and_sessions_are_edited_on_the_page(kiln, driver, request):
    deploy_echo(kiln, "console-kiln-settings")
    signed_in(driver, kiln)
    go(driver, kiln, "functions/console-kiln-settings/configuration", "kiln-form")
    assert not driver.find_element(By.ID, "edit-session-hint").is_enabled()
    Select(driver.find_element(By.ID, "edit-prebake")).select_by_value("off")
    warmups = driver.find_element(By.ID, "edit-warmups")
    warmups.clear()
    warmups.send_keys("0")
    driver.find_element(By.ID, "edit-sessions").click()
    driver.find_element(By.ID, "edit-session-hint").send_keys("header:X-Cart")
    Select(driver.find_element(By.ID, "edit-placement")).select_by_value("spread")
    driver.find_element(By.ID, "kiln-save").click()
    wait(driver).until(lambda d: configuration(kiln, "console-kiln-settings").get("KilnSessions"))
    config = configuration(kiln, "console-kiln-settings")
    assert config["KilnPrebake"]["Mode"] == "off" and config["KilnPrebake"]["WarmupInvocations"] == 0
    # Header names are kept as kiln reads them: in lower case.
    assert config["KilnSessions"]["Hint"] == "header:x-cart" and config["KilnSessions"]["Placement"] == "spread"
    # The page shows what was saved.
    wait(driver).until(lambda d: d.find_element(By.ID, "edit-session-hint").get_attribute("value") == "header:x-cart")
    shot(driver, request, "kiln-settings")

    # A hint kiln cannot read is refused, and said so.
    hint = driver.find_element(By.ID, "edit-session-hint")
    hint.clear()
    hint.send_keys("somewhere:else")
    driver.find_element(By.ID, "kiln-save").click()
    wait(driver).until(lambda d: d.find_element(By.ID, "kiln-status").get_attribute("class") == "error")
    assert configuration(kiln, "console-kiln-settings")["KilnSessions"]["Hint"] == "header:x-cart"

    # Sessions off again.
    driver.refresh()
    wait(driver).until(EC.element_to_be_clickable((By.ID, "edit-sessions"))).click()
    driver.find_element(By.ID, "kiln-save").click()
    wait(driver).until(lambda d: not configuration(kiln, "console-kiln-settings").get("KilnSessions"))
    errors = page_errors(driver)
    assert all("/configuration" in e["message"] and "400" in e["message"] for e in errors), errors


def test_the_memory_picture_divides_the_budget(fresh_kiln, driver, request):
    kiln = fresh_kiln(extra_args=["--object-cache", "on", "--object-cache-sizing", "lent"])
    deploy_echo(kiln, "console-memory")
    kiln.invoke("console-memory", {})
    status = kiln.signed_request("GET", "/kiln/v1/status").json()
    assert status["objectCacheMemory"]["lent"] is True
    signed_in(driver, kiln)
    go(driver, kiln, "overview", "memory-legend")
    legend = wait(driver).until(EC.presence_of_element_located((By.ID, "memory-legend")))
    for part in ["used by instances", "predicted limits, not used", "lent to the object cache", "slack",
                 "booked beyond the limits", "free", "of a budget of 8192 MB"]:
        assert part in legend.text, (part, legend.text)
    widths = driver.execute_script(
        "return [...document.querySelectorAll('#memory-bar span')].map((s) => parseFloat(s.style.width));")
    assert widths and sum(widths) <= 100.001
    shot(driver, request, "memory")
    assert page_errors(driver) == []


def test_the_theme_switch_overrides_the_system_and_is_kept(kiln, driver, request):
    signed_in(driver, kiln)
    go(driver, kiln, "overview", "card-functions")
    background = "return getComputedStyle(document.body).backgroundColor"
    light = driver.execute_script(background)
    Select(driver.find_element(By.ID, "theme")).select_by_value("dark")
    assert driver.execute_script("return document.documentElement.dataset.theme") == "dark"
    dark = driver.execute_script(background)
    assert dark != light and dark == "rgb(28, 25, 23)"
    shot(driver, request, "dark")
    driver.refresh()
    wait(driver).until(EC.presence_of_element_located((By.ID, "card-functions")))
    assert driver.execute_script(background) == dark
    assert Select(driver.find_element(By.ID, "theme")).first_selected_option.get_attribute("value") == "dark"
    # Back to the system's (headless Chromium's is light).
    Select(driver.find_element(By.ID, "theme")).select_by_value("")
    assert driver.execute_script("return document.documentElement.dataset.theme") is None
    assert driver.execute_script(background) == light
    assert page_errors(driver) == []
