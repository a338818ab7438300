"""NoOp: no dependencies, no work; the baseline of every start path."""

import time


def handler(event, context):
    # {"hold_ms": N} keeps the instance busy, so that concurrent requests need distinct
    # instances (the memory phase); the measured invocations send {}.
    if isinstance(event, dict) and event.get("hold_ms"):
        time.sleep(event["hold_ms"] / 1000)
    return {}
