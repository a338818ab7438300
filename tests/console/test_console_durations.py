"""Duration percentiles from the in-process history: the node's (each second's and the
window's), a function's hour by the minute with its histogram, and the console's pages that
show them (the overview, the functions table, a function's metrics tab)."""

import re

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from kiln_harness import PYTHON_RUNTIME, wait_for

# A handler that sleeps this long runs at least this long: its durations fall in the bucket
# (30.5 ms, 76.3 ms] or a later one, so every percentile is above the bucket's lower bound.
SLEEP_S = 0.05
LOWER_BOUND_MS = 30.517578125


def deploy_sleeper(kiln, name):
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": (
        "import time\n"
        "def handler(event, context):\n"
        f"    time.sleep({SLEEP_S})\n"
        "    return event\n")})


def test_the_node_and_a_function_have_their_percentiles(kiln):
    deploy_sleeper(kiln, "console-durations")
    for _ in range(5):
        kiln.invoke("console-durations", {})

    def function_hour():
        hour = kiln.signed_request("GET", "/kiln/v1/functions/console-durations/history").json()
        return hour if hour["Invocations"] >= 5 else None
    hour = wait_for(function_hour, timeout=30, what="the history to count the invocations")
    assert hour["IntervalSeconds"] == 60 and len(hour["Samples"]) == 60
    ran = [m for m in hour["Samples"] if m["Invocations"]]
    assert ran and all(m["P50"] >= LOWER_BOUND_MS and m["P99"] >= m["P50"] for m in ran)
    assert all(m["P50"] is None for m in hour["Samples"] if not m["Invocations"])
    assert hour["Duration"]["Count"] == 5 == sum(b["Count"] for b in hour["Buckets"])
    assert LOWER_BOUND_MS <= hour["Duration"]["P50"] <= hour["Duration"]["P99"]
    assert hour["Buckets"][-1]["Le"] is None and hour["Buckets"][0]["Le"] == 0.05
    assert hour["ErrorRate"] == 0 and hour["LastInvocation"].endswith("Z")

    node = kiln.signed_request("GET", "/kiln/v1/history?seconds=600").json()
    assert node["Duration"]["Count"] >= 5
    seconds = [s for s in node["Samples"] if s["Invocations"]]
    assert all(s["P50"] is not None and s["P99"] >= s["P50"] for s in seconds)
    assert all(s["P50"] is None for s in node["Samples"] if not s["Invocations"])

    # The table has the hour's percentiles of each function.
    table = kiln.signed_request("GET", "/kiln/v1/functions?search=console-durations").json()
    row = table["Functions"][0]
    assert row["Duration"]["Count"] == 5 and row["Duration"]["P50"] >= LOWER_BOUND_MS
    # /metrics exports the same buckets.
    metrics = kiln.signed_request("GET", "/metrics").text
    assert 'kiln_invocation_duration_seconds_count{function="console-durations"} 5' in metrics
    assert 'kiln_invocation_duration_seconds_bucket{le="+Inf",function="console-durations"} 5' in metrics
    missing = kiln.signed_request("GET", "/kiln/v1/functions/no-such-function/history")
    assert missing.status_code == 404


def test_the_pages_show_the_percentiles(kiln, driver, request):
    deploy_sleeper(kiln, "console-metrics-tab")
    for _ in range(3):
        kiln.invoke("console-metrics-tab", {})
    signed_in(driver, kiln)

    go(driver, kiln, "overview", "card-duration")
    wait(driver).until(lambda d: re.search(r"\d+(\.\d+)? ms / \d+(\.\d+)? ms", d.find_element(By.ID, "card-duration").text))
    assert driver.find_elements(By.CSS_SELECTOR, "#chart-duration polyline, #chart-duration circle")
    shot(driver, request, "overview")
    # The whole hour, at a click; the fragment keeps it.
    driver.find_element(By.ID, "window-60").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "card-duration"), "last hour"))
    assert driver.current_url.endswith("#/overview?minutes=60")
    assert "The last hour, per second" in driver.find_element(By.ID, "overview").text

    go(driver, kiln, "functions/console-metrics-tab/metrics", "fn-p50")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-invocations"), "3"))
    p50 = float(re.search(r"([\d.]+) ms", driver.find_element(By.ID, "fn-p50").text).group(1))
    assert p50 >= LOWER_BOUND_MS
    bars = driver.find_elements(By.CSS_SELECTOR, "#fn-histogram .bucket")
    assert bars and sum(int(b.find_element(By.CLASS_NAME, "count").text) for b in bars) == 3
    assert driver.find_elements(By.CSS_SELECTOR, "#fn-chart-duration polyline")
    shot(driver, request, "metrics-tab")

    go(driver, kiln, "functions?search=console-metrics-tab", "functions-table")
    wait(driver).until(lambda d: re.search(r"\d+(\.\d+)? ms / \d+(\.\d+)? ms", d.find_element(By.ID, "functions-table").text))
    assert page_errors(driver) == []
