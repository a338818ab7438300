"""What the BREAKOUT tests on a real kiln share: names, the function's fast-path status, and
deleting the test's functions (a tracing instance books memory on the shared kiln)."""

import uuid


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status(kiln, name):
    """The function's `KilnBreakoutStatus`, as GetFunctionConfiguration answers it."""
    raw = kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()
    return raw.get("KilnBreakoutStatus")


def delete_functions(kiln, prefix):
    lam = kiln.client()
    for page in lam.get_paginator("list_functions").paginate():
        for f in page["Functions"]:
            if f["FunctionName"].startswith(prefix):
                lam.delete_function(FunctionName=f["FunctionName"])
