"""The object cache over time (`/kiln/v1/history`'s `Cache`, a second at a time) and the
object store's traffic in each second, against what the cache's and the store's `/metrics`
counters say, and the pages that draw them: the cache page's cards and charts, the
overview's object-store charts."""

import re

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from kiln_harness import wait_for
from s3_harness import s3_client


def metric(server, name):
    text = server.signed_request("GET", "/metrics").text
    found = re.search(rf"^kiln_{name}(?:_total)? (\d+)", text, re.M)
    assert found, f"kiln_{name} is not in /metrics"
    return int(found.group(1))


def test_the_cache_and_the_stores_traffic_are_kept_a_second_at_a_time(fresh_kiln, driver, request):
    server = fresh_kiln(extra_args=["--object-cache", "on", "--object-cache-sizing", "fixed"])
    s3 = s3_client(server)
    s3.create_bucket(Bucket="console-cache")
    body = b"x" * 4096
    s3.put_object(Bucket="console-cache", Key="k", Body=body)
    for _ in range(3):
        assert s3.get_object(Bucket="console-cache", Key="k")["Body"].read() == body
    missing = s3.list_objects_v2(Bucket="console-cache", Prefix="none")["KeyCount"]
    assert missing == 0

    def settled():
        node = server.signed_request("GET", "/kiln/v1/history?seconds=600").json()
        cache = node["Cache"]
        if not cache or sum(s["Hits"] for s in cache) < 3 or sum(s["WrittenBack"] for s in cache) < 1:
            return None
        if sum(s["ObjectRequests"] for s in node["Samples"]) < 6:
            return None
        return node
    node = wait_for(settled, timeout=30, what="the history to count the cache's hits and write-back")
    cache, samples = node["Cache"], node["Samples"]
    # The samples' differences add up to the counters /metrics exports (a fresh kiln: all of
    # them within the window).
    assert sum(s["Hits"] for s in cache) == metric(server, "object_cache_hits")
    assert sum(s["Admitted"] for s in cache) == (
        metric(server, "object_cache_admitted") + metric(server, "object_cache_writes")) >= 1
    assert sum(s["WrittenBack"] for s in cache) == metric(server, "object_cache_written_back")
    last = cache[-1]
    assert last["CapacityBytes"] > 0 and last["UsedBytes"] >= len(body)
    assert last["DirtyBytes"] == 0 and last["LagMs"] == 0, "written back: nothing waits"
    assert last["Lent"] is False and last["JournalBytes"] >= 0
    assert [s["Time"] for s in cache] == sorted(s["Time"] for s in cache)
    # The store's traffic: every request above (create, put, three gets, a list), and the
    # bytes of the put and the gets, within the seconds the history kept.
    assert sum(s["ObjectRequests"] for s in samples) == metric(server, "object_store_requests") >= 6
    assert sum(s["ObjectBytesIn"] for s in samples) >= len(body)
    assert sum(s["ObjectBytesOut"] for s in samples) >= 3 * len(body)
    assert metric(server, "object_store_sent_bytes") >= 3 * len(body)

    signed_in(driver, server)
    go(driver, server, "cache", "cache-history")
    wait(driver).until(lambda d: "%" in d.find_element(By.ID, "cache-hit-ratio").text)
    ratio = driver.find_element(By.ID, "cache-hit-ratio").text
    assert re.search(r"\d+(\.\d)? % of \d+", ratio), ratio
    for chart in ("cache-chart-memory", "cache-chart-hits", "cache-chart-admissions", "cache-chart-lag", "cache-chart-journal"):
        assert driver.find_elements(By.ID, chart), chart
    assert driver.find_elements(By.CSS_SELECTOR, "#cache-chart-hits polyline, #cache-chart-hits circle")
    assert driver.find_element(By.ID, "cache-lag").text.startswith("0.00 ms")
    shot(driver, request, "cache")
    driver.find_element(By.ID, "cache-window-60").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "cache-window"), "The last hour"))
    assert driver.current_url.endswith("#/cache?minutes=60")

    go(driver, server, "overview", "chart-objects")
    objects = driver.find_element(By.CSS_SELECTOR, "figure:has(#chart-objects)")
    wait(driver).until(lambda d: re.search(r"requests: [1-9]", objects.text))
    traffic = driver.find_element(By.CSS_SELECTOR, "figure:has(#chart-object-bytes)")
    assert "received:" in traffic.text and "sent:" in traffic.text
    assert page_errors(driver) == []


def test_without_a_cache_the_history_has_none_and_the_page_says_so(kiln, driver, request):
    node = kiln.signed_request("GET", "/kiln/v1/history?seconds=10").json()
    assert node["Cache"] is None
    signed_in(driver, kiln)
    go(driver, kiln, "cache", "cache-off")
    assert not driver.find_elements(By.ID, "cache-history")
    assert page_errors(driver) == []
