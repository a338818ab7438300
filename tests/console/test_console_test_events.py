"""Shareable test events (`/kiln/v1/functions/NAME/test-events`): saved from the test tab for
every viewer of a function, as the Lambda console's shareable events are, beside the private
ones each browser keeps; checked, limited, deleted with their function."""

import json

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from console_pages import go, page_errors, shot, signed_in, wait
from console_support import XSS, sign_in
from kiln_harness import PYTHON_RUNTIME


def deploy(kiln, name):
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": (
        "def handler(event, context):\n"
        "    return event\n")})


def events_path(name, event=None):
    return f"/kiln/v1/functions/{name}/test-events" + (f"/{event}" if event else "")


def listed(kiln, name):
    response = kiln.signed_request("GET", events_path(name))
    assert response.status_code == 200, response.text
    return {e["Name"]: e["Event"] for e in response.json()["TestEvents"]}


def test_shareable_events_are_checked_limited_and_go_with_their_function(kiln):
    name = "console-shared-api"
    deploy(kiln, name)
    assert listed(kiln, name) == {}
    event = json.dumps({"order": 7, "note": XSS})
    saved = kiln.signed_request("PUT", events_path(name, "order-7"), body=event.encode())
    assert saved.status_code == 200, saved.text
    assert saved.json()["Name"] == "order-7" and saved.json()["Event"] == event
    assert saved.json()["LastModified"].endswith("Z") or "+00:00" in saved.json()["LastModified"]
    assert listed(kiln, name) == {"order-7": event}
    # Saved again under its name: replaced.
    assert kiln.signed_request("PUT", events_path(name, "order-7"), body=b"[1, 2]").status_code == 200
    assert listed(kiln, name) == {"order-7": "[1, 2]"}

    refusals = [
        ("not JSON", events_path(name, "bad"), b"{not json", 400, "JSON document"),
        ("a name with a dot", events_path(name, "a.json"), b"{}", 400, "1 to 25 letters"),
        ("a name too long", events_path(name, "x" * 26), b"{}", 400, "1 to 25 letters"),
        ("too large", events_path(name, "big"), json.dumps({"x": "y" * (256 * 1024)}).encode(), 413, "at most"),
        ("no such function", events_path("console-no-such-fn", "e"), b"{}", 404, "console-no-such-fn"),
    ]
    for what, path, body, status, says in refusals:
        refused = kiln.signed_request("PUT", path, body=body)
        assert refused.status_code == status, (what, refused.status_code, refused.text)
        assert says in refused.json()["message"], (what, refused.text)
    assert listed(kiln, name) == {"order-7": "[1, 2]"}, "a refusal saves nothing"

    # Ten a function, as the Lambda console keeps; the eleventh is refused, a replacement is not.
    for i in range(9):
        assert kiln.signed_request("PUT", events_path(name, f"e{i}"), body=b"{}").status_code == 200
    eleventh = kiln.signed_request("PUT", events_path(name, "e9"), body=b"{}")
    assert eleventh.status_code == 400 and "delete one first" in eleventh.json()["message"]
    assert kiln.signed_request("PUT", events_path(name, "e0"), body=b'{"again": 1}').status_code == 200
    assert len(listed(kiln, name)) == 10

    assert kiln.signed_request("DELETE", events_path(name, "e0")).status_code == 204
    gone = kiln.signed_request("DELETE", events_path(name, "e0"))
    assert gone.status_code == 404 and "e0" in gone.json()["message"]
    assert "e0" not in listed(kiln, name)

    # Unsigned, nothing is read or written.
    import requests
    assert requests.get(kiln.endpoint + events_path(name), timeout=10).status_code in (401, 403)
    assert requests.put(kiln.endpoint + events_path(name, "x"), data=b"{}", timeout=10).status_code in (401, 403)

    # A function deleted takes its events along: one made again under its name has none.
    kiln.client().delete_function(FunctionName=name)
    assert kiln.signed_request("GET", events_path(name)).status_code == 404
    deploy(kiln, name)
    assert listed(kiln, name) == {}


def test_the_console_needs_its_csrf_token_to_save_one(kiln):
    name = "console-shared-csrf"
    deploy(kiln, name)
    http, response = sign_in(kiln)
    csrf = response.json()["csrfToken"]
    url = kiln.console + events_path(name, "e")
    refused = http.put(url, data=b"{}", timeout=10)
    assert refused.status_code == 403 and "CSRF" in refused.json()["message"]
    assert listed(kiln, name) == {}
    assert http.put(url, data=b"{}", headers={"X-Kiln-Csrf": csrf}, timeout=10).status_code == 200
    assert listed(kiln, name) == {"e": "{}"}


def test_a_shareable_event_saved_in_one_browser_is_there_for_another(kiln, driver, request):
    name = "console-shared-tab"
    deploy(kiln, name)
    signed_in(driver, kiln)
    go(driver, kiln, f"functions/{name}/test", "invoke-payload")
    payload = driver.find_element(By.ID, "invoke-payload")
    payload.clear()
    payload.send_keys('{"shared": true}')
    driver.find_element(By.ID, "event-name").send_keys("for-everyone")
    driver.find_element(By.ID, "event-shareable").click()
    driver.find_element(By.ID, "save-event").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "event-status"), "saved for every viewer"))
    assert listed(kiln, name) == {"for-everyone": '{"shared": true}'}
    # A private one beside it, in this browser only.
    payload.clear()
    payload.send_keys('{"mine": 1}')
    driver.find_element(By.ID, "event-shareable").click()
    driver.find_element(By.ID, "event-name").clear()
    driver.find_element(By.ID, "event-name").send_keys("mine")
    driver.find_element(By.ID, "save-event").click()
    assert "mine" not in listed(kiln, name)
    shot(driver, request, "test-events")

    # Another viewer: this browser's storage gone, signed in again.
    driver.execute_script("localStorage.clear();")
    signed_in(driver, kiln)
    go(driver, kiln, f"functions/{name}/test", "invoke-payload")
    wait(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#shared-events option"))
    assert [o.text for o in driver.find_elements(By.CSS_SELECTOR, "#shared-events option")] == ["for-everyone"]
    assert driver.find_elements(By.CSS_SELECTOR, "#private-events option") == []
    Select(driver.find_element(By.ID, "saved-events")).select_by_visible_text("for-everyone")
    assert driver.find_element(By.ID, "invoke-payload").get_attribute("value") == '{"shared": true}'
    driver.find_element(By.ID, "invoke-button").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "invoke-result"), '"shared": true'))

    # Deleted from the page: gone for everyone.
    driver.find_element(By.ID, "delete-event").click()
    wait(driver).until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#shared-events option"))
    assert listed(kiln, name) == {}
    assert page_errors(driver) == []
