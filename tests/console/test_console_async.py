"""The async queue's failures: listed by /kiln/v1/async, retried and deleted, over the API, with
`kiln async` and from the console's Async page."""

import json

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import page_errors, shot, signed_in, wait
from kiln_harness import PYTHON_RUNTIME, wait_for

FAILING = (
    "import os\n"
    "def handler(event, context):\n"
    "    if os.environ.get('FAIL') == '1':\n"
    "        raise RuntimeError('failing on purpose')\n"
    "    print('async-ok', event.get('n'))\n"
    "    return 'ok'\n"
)


def failures(kiln):
    response = kiln.signed_request("GET", "/kiln/v1/async")
    assert response.status_code == 200, response.text
    return response.json()


def failed_event(kiln, name, n):
    """Sends an Event invocation that fails every attempt; returns its request id once kiln
    keeps it as a failure."""
    response = kiln.client().invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"n": n}))
    request_id = response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    wait_for(lambda: any(f["RequestId"] == request_id for f in failures(kiln)["Failures"]),
             timeout=60, what=f"event {request_id} to fail every attempt")
    return request_id


def deploy_failing(kiln, name):
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": FAILING},
                Environment={"Variables": {"FAIL": "1"}})


def test_failures_are_listed_retried_and_deleted_over_the_api(kiln):
    deploy_failing(kiln, "async-api")
    retried = failed_event(kiln, "async-api", 1)
    dropped = failed_event(kiln, "async-api", 2)
    listed = {f["RequestId"]: f for f in failures(kiln)["Failures"]}
    assert json.loads(listed[retried]["Payload"]) == {"n": 1}
    assert "failing on purpose" in listed[retried]["Error"]
    assert listed[retried]["Function"] == "async-api"

    kiln.client().update_function_configuration(FunctionName="async-api", Environment={"Variables": {"FAIL": "0"}})
    assert kiln.signed_request("POST", f"/kiln/v1/async/failures/{retried}/retry").status_code == 202
    assert kiln.signed_request("POST", f"/kiln/v1/async/failures/{retried}/retry").status_code == 404
    wait_for(lambda: "async-ok 1" in kiln.cli("logs", "async-api").stdout, timeout=60, what="the retried event to run")
    assert retried not in {f["RequestId"] for f in failures(kiln)["Failures"]}

    # The CLI reads and changes the same: `kiln async`.
    listed = json.loads(kiln.cli("--json", "async").stdout)
    assert dropped in {f["RequestId"] for f in listed["Failures"]}
    assert dropped in kiln.cli("async").stdout
    assert "deleted" in kiln.cli("async", "rm", dropped).stdout
    missing = kiln.signed_request("DELETE", f"/kiln/v1/async/failures/{dropped}")
    assert missing.status_code == 404 and dropped in missing.json()["message"]
    again = kiln.cli("async", "rm", dropped, check=False)
    assert again.returncode != 0 and dropped in again.stderr
    assert dropped not in {f["RequestId"] for f in failures(kiln)["Failures"]}
    for bad in ["0", "x", "100000"]:
        assert kiln.signed_request("GET", f"/kiln/v1/async?limit={bad}").status_code == 400


def click(driver, row_text, label):
    """Clicks `label` in the failures table's row holding `row_text` (the table redraws itself)."""
    def found(d):
        for tr in d.find_elements(By.CSS_SELECTOR, "#async-failures tbody tr"):
            if row_text in tr.text:
                tr.find_element(By.XPATH, f".//button[text()='{label}']").click()
                return True
        return False
    wait(driver).until(found)


def test_the_async_page_retries_and_deletes_failures(kiln, driver, request):
    deploy_failing(kiln, "async-page")
    retried = failed_event(kiln, "async-page", 3)
    dropped = failed_event(kiln, "async-page", 4)
    signed_in(driver, kiln)
    driver.get(f"{kiln.console}/ui/#/async")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "async-failures"), dropped))
    table = driver.find_element(By.ID, "async-failures").text
    assert retried in table and "failing on purpose" in table and '{"n": 4}' in table
    shot(driver, request, "async")

    kiln.client().update_function_configuration(FunctionName="async-page", Environment={"Variables": {"FAIL": "0"}})
    click(driver, retried, "Retry")
    wait_for(lambda: "async-ok 3" in kiln.cli("logs", "async-page").stdout, timeout=60, what="the retried event to run")
    click(driver, dropped, "Delete")
    wait(driver).until(lambda d: dropped not in d.find_element(By.ID, "async-failures").text
                       and retried not in d.find_element(By.ID, "async-failures").text)
    assert not {retried, dropped} & {f["RequestId"] for f in failures(kiln)["Failures"]}
    assert page_errors(driver) == []
