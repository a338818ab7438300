"""The console's tests: a shared kiln, signed-in HTTP sessions, and a headless Chromium."""

import os
from pathlib import Path

import pytest
import requests

from kiln_harness import ROOT, PYTHON_RUNTIME

# Where each browser test saves a screenshot of every page it visits.
SCREENSHOTS = Path(os.environ.get("KILN_CONSOLE_SCREENSHOTS", ROOT / "target" / "console-screenshots"))
CHROMIUM = os.environ.get("KILN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KILN_CHROMEDRIVER", "/usr/bin/chromedriver")
XSS = "<img src=x onerror=alert(1)>"


def sign_in(server, access_key=None, secret=None):
    """A requests session signed in to `server`'s console, and the sign-in response."""
    http = requests.Session()
    response = http.post(
        server.endpoint + "/ui/api/session",
        json={"accessKeyId": access_key or server.access_key, "secretAccessKey": secret or server.secret_key},
        timeout=10,
    )
    return http, response


def refused_sign_in(server, access_key, secret):
    """Tries a sign-in that must fail and returns its response; then signs in rightly, so that the
    client address's failures never add up to the rate limit on the shared server."""
    _, refused = sign_in(server, access_key, secret)
    _, accepted = sign_in(server)
    assert accepted.status_code == 200, accepted.text
    return refused


def function_key(server, name="console-keyprobe"):
    """A function's object-store key pair, as its sandbox gets it."""
    server.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": (
        "import os\n"
        "def handler(event, context):\n"
        "    return {'key': os.environ['AWS_ACCESS_KEY_ID'], 'secret': os.environ['AWS_SECRET_ACCESS_KEY']}\n"
    )})
    payload, _ = server.invoke(name)
    return payload["key"], payload["secret"]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through chromedriver, with the page's console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} is missing: run scripts/setup-test-env.sh (it installs chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
