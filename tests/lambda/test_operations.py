"""Every operation of the Lambda API model that boto3 ships, sent to a real kiln: the README's
table of operations ("Lambda API") says which kiln serves, and kiln answers the others, and only
those, with `UnknownOperationException`. A new operation in the model, or one served or
dropped, fails this until the README says so."""

import gzip
import json
import re
import urllib.parse
from pathlib import Path

import botocore

from kiln_harness import PYTHON_RUNTIME, ROOT

MODEL = Path(botocore.__file__).parent / "data" / "lambda" / "2015-03-31" / "service-2.json.gz"
README = ROOT / "README.md"


def operations():
    """Each operation of the model: its method and request URI (query included)."""
    model = json.loads(gzip.decompress(MODEL.read_bytes()))
    return {name: (op["http"]["method"], op["http"]["requestUri"]) for name, op in model["operations"].items()}


def names(cell):
    """The operation names a cell lists: its words in CamelCase, what it says in parentheses
    and code spans aside."""
    cell = re.sub(r"\([^)]*\)|`[^`]*`", "", cell)
    return set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][A-Za-z]*)+\b|\bInvoke\b", cell))


def readme_table():
    """The operations the README's table puts in its served and its not-served columns."""
    text = README.read_text()
    start = text.index("<!-- lambda-operations -->")
    end = text.index("<!-- /lambda-operations -->")
    served, not_served = set(), set()
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or set(cells[0]) <= {"-", " "} or cells[0] == "area":
            continue
        served |= names(cells[1])
        not_served |= names(cells[2])
    return served, not_served


def test_the_readme_table_says_which_operations_kiln_serves(kiln):
    name = "ops-probe"
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": "def handler(e, c):\n    return e\n"})
    arn = kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    values = {
        "FunctionName": name,
        "Name": "probe-alias",
        "UUID": "probe-uuid",
        "LayerName": "probe-layer",
        "VersionNumber": "1",
        "Resource": urllib.parse.quote(arn, safe=""),
        "ResourceArn": urllib.parse.quote(arn, safe=""),
        "StatementId": "probe",
        "CodeSigningConfigArn": urllib.parse.quote(
            "arn:aws:lambda:us-east-1:000000000000:code-signing-config:csc-0123456789abcdef0", safe=""),
        "CapacityProviderName": "probe",
        "DurableExecutionArn": "probe",
        "CallbackId": "probe",
    }
    answered = {}
    for op, (method, uri) in operations().items():
        path = re.sub(r"\{(\w+)\+?\}", lambda m: values[m.group(1)], uri)
        # Invoking runs the function; every other call is refused or answered without a change
        # that matters here (the probe function is the test's own).
        response = kiln.signed_request(method, path, body=b"{}", headers={"Content-Type": "application/json"})
        kind = response.headers.get("x-amzn-ErrorType", "")
        try:
            kind = kind or response.json().get("__type", "")
        except ValueError:
            pass
        answered[op] = "UnknownOperationException" not in kind
    served, not_served = readme_table()
    model = set(answered)
    assert served & not_served == set(), "both served and not served"
    assert served | not_served == model, (
        f"the README's table misses {sorted(model - served - not_served)} "
        f"and names {sorted((served | not_served) - model)}, which the model does not have")
    assert {op for op in model if answered[op]} == served, (
        f"served but in the not-served column: {sorted(op for op in not_served if answered[op])}; "
        f"in the served column but unknown to kiln: {sorted(op for op in served if not answered[op])}")
