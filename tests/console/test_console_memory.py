"""A function's cold starts by path and its memory over the last hour, by the minute: what the
history keeps (`/kiln/v1/functions/{name}/history`) against what the invocations' REPORT lines
and `/metrics` say, and the metrics tab's charts of them."""

import re

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from kiln_harness import PYTHON_RUNTIME, wait_for


def report_of(server, response):
    return [line for line in server.log_tail(response).splitlines() if line.startswith("REPORT")][-1]


def invoke_hog(server, name, mb):
    """Invokes the memory hog for `mb` MB; its Max Memory Used and the predicted limit it ran
    at (None: MemorySize), from its REPORT line."""
    result, response = server.invoke(name, {"mb": mb}, LogType="Tail")
    assert result == {"allocated_mb": mb}, result
    report = report_of(server, response)
    used = int(re.search(r"Max Memory Used: (\d+) MB", report).group(1))
    limit = re.search(r"Memory Limit: (\d+) MB", report)
    return used, int(limit.group(1)) if limit else None


def starts_in_metrics(server, name):
    metrics = server.signed_request("GET", "/metrics").text
    found = re.findall(rf'kiln_cold_starts_total{{function="{name}",path="(\w+)"}} (\d+)', metrics)
    return {path: int(n) for path, n in found}


def hour_of(server, name, invocations):
    def counted():
        hour = server.signed_request("GET", f"/kiln/v1/functions/{name}/history").json()
        return hour if hour["Invocations"] >= invocations else None
    return wait_for(counted, timeout=30, what=f"the history to count {invocations} invocations")


def test_the_history_keeps_cold_starts_by_path_and_the_highest_memory_of_each_minute(fresh_kiln, driver, request):
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20"])
    name = "console-memory-sized"
    server.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=512, Timeout=30)
    # As tests/cache/test_memory_prediction.py matures a model: 45 invocations of three sizes.
    ran = [invoke_hog(server, name, (16, 48, 96)[i % 3]) for i in range(45)]
    hour = hour_of(server, name, 45)
    minutes = [m for m in hour["Samples"] if m["Invocations"]]
    # Max Memory Used: each minute's highest is one of its REPORT lines', and the hour's is the
    # highest of them all (at least the 96 MB the hog held).
    used = {u for u, _ in ran}
    assert all(m["MaxMemoryUsed"] in used for m in minutes), (minutes, used)
    assert max(m["MaxMemoryUsed"] for m in minutes) == max(used) >= 96
    assert all(m["MaxMemoryUsed"] is None for m in hour["Samples"] if not m["Invocations"])
    # The model matured: the later ones ran at predicted limits, below
    # MemorySize, and the history has the highest of them.
    limits = [limit for _, limit in ran if limit is not None]
    assert limits and max(limits) < 512, ran
    assert max(m["PredictedLimit"] or 0 for m in minutes) == max(limits)
    # The model's accuracy by the minute: as `kiln status` has it once its invocations are
    # read (the history reads the model with the counters, so a reading can see the last
    # invocation counted before the model has learnt from it: within one prediction).
    model = next(m for m in server.signed_request("GET", "/kiln/v1/status").json()["memoryModels"]
                 if m["function"] == name)
    assert model["mature"] and model["exactOrOver"] is not None
    last = minutes[-1]
    assert last["ModelSizing"] is True
    assert abs(last["ModelAccuracy"] - model["exactOrOver"]) <= 1 / 20 + 0.001, (last, model)
    assert all(m["ModelAccuracy"] is None for m in hour["Samples"] if not m["Invocations"])
    # Cold starts by path: the same as /metrics counts (a fresh kiln: all in this hour).
    starts = starts_in_metrics(server, name)
    assert sum(starts.values()) >= 1
    for path, key in (("coldest", "Coldest"), ("warm", "Warm"), ("hot", "Hot")):
        assert sum(m[key] for m in minutes) == starts.get(path, 0), (path, starts, minutes)

    # The pages: the metrics tab says the model sizes the instances, and the models table
    # has its share of exact-or-over predictions.
    signed_in(driver, server)
    go(driver, server, f"functions/{name}/metrics", "fn-model-note")
    note = driver.find_element(By.ID, "fn-model-note").text
    assert re.search(r"\d+ % of its recent predictions exact or over, sizing instances", note), note
    assert driver.find_elements(By.CSS_SELECTOR, "#fn-chart-accuracy .line-hot")
    go(driver, server, "cache", "models-table")
    row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#models-table tr") if name in r.text)
    assert f"{100 * model['exactOrOver']:.1f} %" in row.text and "mature" in row.text, row.text
    shot(driver, request, "models")
    assert page_errors(driver) == []


def test_a_function_at_memory_size_has_no_predicted_limit_and_the_tab_draws_both_charts(kiln, driver, request):
    name = "console-memory-tab"
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=256, Timeout=30)
    used = max(invoke_hog(kiln, name, 48)[0] for _ in range(3))
    hour = hour_of(kiln, name, 3)
    minutes = [m for m in hour["Samples"] if m["Invocations"]]
    assert max(m["MaxMemoryUsed"] for m in minutes) == used >= 48
    assert all(m["PredictedLimit"] is None for m in minutes), minutes
    assert sum(m["Coldest"] + m["Warm"] + m["Hot"] for m in minutes) >= 1, "its first invocation started it"

    signed_in(driver, kiln)
    go(driver, kiln, f"functions/{name}/metrics", "fn-chart-memory")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "fn-invocations"), "3"))
    memory = driver.find_element(By.CSS_SELECTOR, "figure:has(#fn-chart-memory)")
    wait(driver).until(lambda d: f"up to {used} MB" in memory.text)
    assert "MemorySize: 256 MB" in memory.text and "predicted limit: –" in memory.text
    assert driver.find_elements(By.CSS_SELECTOR, "#fn-chart-memory .line-memory")
    starts = driver.find_element(By.CSS_SELECTOR, "figure:has(#fn-chart-starts)")
    assert re.search(r"(coldest|warm|hot): 1", starts.text), starts.text
    # Its model has seen three invocations: learning, its accuracy drawn as such.
    assert minutes[-1]["ModelSizing"] is False and 0 <= minutes[-1]["ModelAccuracy"] <= 1, minutes
    note = driver.find_element(By.ID, "fn-model-note").text
    assert re.search(r"\d+ % of its recent predictions exact or over, still learning", note), note
    assert driver.find_elements(By.CSS_SELECTOR, "#fn-chart-accuracy .line-warm")
    shot(driver, request, "metrics-memory")
    assert page_errors(driver) == []
