"""Big: imports about 41 MB of generated dependencies (package `bigdeps`) at init."""

import time

import bigdeps


def handler(event, context):
    if isinstance(event, dict) and event.get("hold_ms"):
        time.sleep(event["hold_ms"] / 1000)
    return {"modules": bigdeps.MODULES}
