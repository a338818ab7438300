"""Slow module initialisation (event-independent), and a handler that is quick."""
import os
import time

STARTED = time.time()
time.sleep(float(os.environ.get("INIT_SLEEP", "2")))
if os.environ.get("INIT_HOG_MB"):
    HELD = bytearray(b"\x5a" * (int(os.environ["INIT_HOG_MB"]) << 20))


def handler(event, context):
    return {"init_seconds": round(time.time() - STARTED, 3), "remaining": context.get_remaining_time_in_millis()}
