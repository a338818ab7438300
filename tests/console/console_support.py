"""What the console's tests share: where screenshots go, signing in over HTTP, a function's key."""

import os
from pathlib import Path

import requests

from kiln_harness import PYTHON_RUNTIME, ROOT

# Where each browser test saves a screenshot of every page it visits.
SCREENSHOTS = Path(os.environ.get("KILN_CONSOLE_SCREENSHOTS", ROOT / "target" / "console-screenshots"))
CHROMIUM = os.environ.get("KILN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KILN_CHROMEDRIVER", "/usr/bin/chromedriver")
XSS = "<img src=x onerror=alert(1)>"


def sign_in(server, access_key=None, secret=None):
    """A requests session signed in to `server`'s console, and the sign-in response."""
    http = requests.Session()
    response = http.post(
        server.console + "/ui/api/session",
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
