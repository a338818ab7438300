"""What the browser tests do to the console's pages: sign in, go to a view, wait, take screenshots."""

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from console_support import SCREENSHOTS

# An upper bound for the page to reach a state, not a measured time.
WAIT = 30


def wait(driver):
    # Views redraw themselves: an element found a moment ago may have been replaced.
    return WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException])


def shot(driver, request, page):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{request.node.name}-{page}.png"))


def page_errors(driver):
    """Entries of the page's console log at SEVERE: script errors, CSP violations, failed loads.
    Refused sign-ins (401/403/429 answers to the form) are the page doing its job."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return [e for e in errors if "/ui/api/session" not in e["message"]]


def sign_in_with(driver, endpoint, key, secret):
    driver.get(endpoint + "/ui/sign-in")
    wait(driver).until(EC.visibility_of_element_located((By.ID, "sign-in-form")))
    driver.find_element(By.ID, "access-key").send_keys(key)
    driver.find_element(By.ID, "secret").send_keys(secret)
    driver.find_element(By.ID, "sign-in-button").click()


def signed_in(driver, kiln):
    driver.delete_all_cookies()
    sign_in_with(driver, kiln.console, kiln.access_key, kiln.secret_key)
    wait(driver).until(EC.visibility_of_element_located((By.ID, "sign-out")))
    wait(driver).until(EC.presence_of_element_located((By.ID, "card-functions")))


def go(driver, kiln, fragment, ready_id):
    driver.get(f"{kiln.console}/ui/#/{fragment}")
    return wait(driver).until(EC.presence_of_element_located((By.ID, ready_id)))
