"""A function's object-store key, shown on request: `POST /kiln/v1/functions/NAME/key` gives the
key pair the function's sandbox is given, to a signed caller or a console session with its CSRF
token, never cached; the console's configuration tab has it behind a button, not in the page."""

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from console_support import function_key, sign_in


def test_the_key_endpoint_gives_the_sandboxes_key_to_the_admin_only(kiln):
    name = "console-key-api"
    key, secret = function_key(kiln, name)
    signed = kiln.signed_request("POST", f"/kiln/v1/functions/{name}/key")
    assert signed.status_code == 200, signed.text
    assert signed.json() == {"FunctionName": name, "AccessKeyId": key, "SecretAccessKey": secret}
    assert signed.headers["Cache-Control"] == "no-store"
    assert kiln.signed_request("POST", "/kiln/v1/functions/no-such-function/key").status_code == 404
    # Unsigned: refused.
    assert requests.post(f"{kiln.endpoint}/kiln/v1/functions/{name}/key", timeout=10).status_code == 403
    # The console's session: only with its CSRF token.
    http, response = sign_in(kiln)
    csrf = response.json()["csrfToken"]
    url = f"{kiln.console}/kiln/v1/functions/{name}/key"
    assert http.post(url, timeout=10).status_code == 403
    shown = http.post(url, headers={"X-Kiln-Csrf": csrf}, timeout=10)
    assert shown.status_code == 200 and shown.json()["SecretAccessKey"] == secret


def test_the_configuration_tab_shows_the_key_only_when_asked(kiln, driver, request):
    name = "console-key-tab"
    key, secret = function_key(kiln, name)
    signed_in(driver, kiln)
    go(driver, kiln, f"functions/{name}/configuration", "fn-key-toggle")
    assert secret not in driver.page_source and key not in driver.page_source
    driver.find_element(By.ID, "fn-key-toggle").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-key-secret"), secret))
    assert driver.find_element(By.ID, "fn-key-id").text == key
    shot(driver, request, "function-key")
    driver.find_element(By.ID, "fn-key-toggle").click()
    wait(driver).until(lambda d: secret not in d.page_source)
    assert page_errors(driver) == []
