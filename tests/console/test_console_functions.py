"""The functions table, searched, sorted and paged by kiln (`/kiln/v1/functions`): over HTTP
(signed on the API's listener, as the CLI would ask) and in headless Chromium, with more
functions than a page holds."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from kiln_harness import PYTHON_RUNTIME, zip_files

# More than two pages of 50. CreateFunction without a snapshot to build is the cheap way to
# register many: the package is stored once (by digest), each function is a registry row.
COUNT = 130
PREFIX = "tbl-"


def name(i):
    return f"{PREFIX}{i:03}"


@pytest.fixture(scope="module")
def table(kiln):
    """COUNT functions (memory 128, 192, 256, 320 MB in turn); tbl-007 failed one of its three
    invocations, tbl-011 ran once after it. They are deleted afterwards: the server is the
    session's."""
    code = zip_files({"app.py": (
        "def handler(event, context):\n"
        "    if event.get('fail'):\n"
        "        raise ValueError('asked to fail')\n"
        "    return event\n")})
    lam = kiln.client()

    def create(i):
        try:
            lam.delete_function(FunctionName=name(i))
        except lam.exceptions.ResourceNotFoundException:
            pass
        lam.create_function(FunctionName=name(i), Runtime=PYTHON_RUNTIME, Handler="app.handler",
                            Role="arn:aws:iam::000000000000:role/test", Code={"ZipFile": code},
                            MemorySize=128 + (i % 4) * 64, Tags={"kiln:prebake": "off"})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(COUNT)))
    kiln.invoke(name(7), {})
    kiln.invoke(name(7), {"fail": True})
    kiln.invoke(name(7), {})
    # The history reads the counters once a second: the later one falls in a later second.
    time.sleep(1.2)
    kiln.invoke(name(11), {})
    time.sleep(1.2)
    yield kiln
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: lam.delete_function(FunctionName=name(i)), range(COUNT)))


def page(kiln, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    response = kiln.signed_request("GET", f"/kiln/v1/functions?{query}")
    assert response.status_code == 200, response.text
    return response.json()


def names(listing):
    return [f["Configuration"]["FunctionName"] for f in listing["Functions"]]


def test_pages_follow_their_token_over_the_signed_api(table):
    seen, token = [], None
    while True:
        listing = page(table, search=PREFIX, limit=50, **({"token": token} if token else {}))
        assert listing["Total"] == COUNT
        seen += names(listing)
        token = listing["NextToken"]
        if not token:
            break
    assert seen == [name(i) for i in range(COUNT)]


def test_sorts_by_memory_error_rate_and_last_invocation(table):
    by_memory = page(table, search=PREFIX, sort="memory", order="desc", limit=5)
    assert names(by_memory) == [name(i) for i in (3, 7, 11, 15, 19)]
    assert {f["Configuration"]["MemorySize"] for f in by_memory["Functions"]} == {320}

    by_rate = page(table, search=PREFIX, sort="errorRate", order="desc", limit=3)
    assert names(by_rate) == [name(7), name(11), name(0)]
    failing = by_rate["Functions"][0]
    assert (failing["Invocations"], failing["Errors"]) == (3, 1)
    assert failing["ErrorRate"] == pytest.approx(1 / 3)
    never = by_rate["Functions"][2]
    assert never["ErrorRate"] is None and never["LastInvocation"] is None

    recent = page(table, search=PREFIX, sort="lastInvocation", order="desc", limit=2)
    assert names(recent) == [name(11), name(7)]
    assert recent["Functions"][0]["LastInvocation"] > recent["Functions"][1]["LastInvocation"]
    assert recent["Functions"][0]["Instances"] == 1 and recent["HistoryKept"] is True


def test_search_and_bad_parameters(table):
    listing = page(table, search="TBL-12", limit=50)
    assert names(listing) == [name(i) for i in range(120, 130)] and listing["NextToken"] is None
    token = page(table, search=PREFIX, sort="memory", limit=10)["NextToken"]
    for query, wanted in [("sort=size", "sort must be one of"), ("order=up", "order must be asc or desc"),
                          ("limit=0", "limit must be"), ("limit=1001", "limit must be"),
                          ("token=not-a-token", "not one a page"),
                          (f"sort=name&search={PREFIX}&token={token}", "another search or sort")]:
        response = table.signed_request("GET", f"/kiln/v1/functions?{query}")
        assert response.status_code == 400, query
        assert wanted in response.json()["message"], (query, response.text)


def rows(driver):
    return [tr.find_elements(By.TAG_NAME, "td")[0].text
            for tr in driver.find_elements(By.CSS_SELECTOR, "#functions-table tbody tr")]


def test_the_table_searches_sorts_and_pages_in_the_browser(table, driver, request):
    signed_in(driver, table)
    go(driver, table, f"functions?search={PREFIX}", "functions-table")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "functions-count"), f"50 shown of {COUNT}"))
    assert rows(driver) == [name(i) for i in range(50)]
    shot(driver, request, "first-page")
    driver.find_element(By.ID, "next-page").click()
    wait(driver).until(lambda d: rows(d)[:1] == [name(50)])

    # Sorted by kiln, not within the page: the highest error rate of all functions first.
    driver.find_element(By.ID, "sort-errorRate").click()
    wait(driver).until(lambda d: rows(d)[:2] == [name(11), name(7)])
    driver.find_element(By.ID, "sort-errorRate").click()
    wait(driver).until(lambda d: rows(d)[:2] == [name(7), name(11)])
    assert "33.3 % of 3" in driver.find_element(By.ID, "functions-table").text
    shot(driver, request, "by-error-rate")
    driver.find_element(By.ID, "sort-lastInvocation").click()
    wait(driver).until(lambda d: rows(d)[:2] == [name(7), name(11)])
    driver.find_element(By.ID, "sort-lastInvocation").click()
    wait(driver).until(lambda d: rows(d)[:2] == [name(11), name(7)])
    assert "▼" in driver.find_element(By.ID, "sort-lastInvocation").text
    shot(driver, request, "by-last-invocation")
    # The back button goes back through the sorts.
    driver.back()
    wait(driver).until(lambda d: rows(d)[:2] == [name(7), name(11)])

    # Typing searches (the whole table, on the server) and keeps the box's focus.
    box = driver.find_element(By.ID, "function-search")
    box.clear()
    box.send_keys("tbl-12")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "functions-count"), "10 shown of 10"))
    assert sorted(rows(driver)) == [name(i) for i in range(120, 130)]
    assert driver.switch_to.active_element.get_attribute("id") == "function-search"
    shot(driver, request, "searched")
    assert page_errors(driver) == []


def test_the_cli_asks_for_the_same_pages(table):
    import json

    listed = json.loads(table.cli("--json", "ls", "--search", "TBL-00", "--sort", "memory", "--desc",
                                  "--limit", "3").stdout)
    assert names({"Functions": listed}) == [name(3), name(7), name(2)]
    human = table.cli("ls", "--search", PREFIX, "--sort", "errorRate", "--desc", "--limit", "1").stdout
    assert name(7) in human and "33.3 %" in human and name(11) not in human
    refused = table.cli("ls", "--sort", "size", check=False)
    assert refused.returncode != 0 and "sort must be one of" in refused.stderr
