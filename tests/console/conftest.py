"""The console's browser: a headless Chromium through chromedriver, one per test module."""

import os

import pytest

from console_support import CHROMEDRIVER, CHROMIUM


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    """Where the module's browser saves what it downloads."""
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    """Headless Chromium through chromedriver, with the page's console log kept and downloads
    saved to `downloads` without asking."""
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
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    os.environ.setdefault("SE_OFFLINE", "true")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver
    driver.quit()


@pytest.fixture
def driver(browser):
    """The module's browser, signed out, with an empty console log."""
    browser.delete_all_cookies()
    browser.get_log("browser")
    return browser
