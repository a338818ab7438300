"""Session semantics of tests/sessions/test_sessions.py: what one process saw of each session, kept in its memory."""
import json
import os
import time
import uuid

COUNTS = {}  # session -> requests this process served for it
_instance = (None, None)  # (pid, id): a fork of a zygote inherits it with another pid


def instance_id():
    """An id of this process that no other instance shares: pids repeat across sandboxes."""
    global _instance
    if _instance[0] != os.getpid():
        _instance = (os.getpid(), uuid.uuid4().hex)
    return _instance[1]


def session_of(event):
    if "session" in event:
        return str(event["session"])
    # A function URL event: the test names the session in the body, as the client sent it.
    body = event.get("body")
    if body:
        try:
            return str(json.loads(body).get("session", "-"))
        except ValueError:
            pass
    return "-"


def handler(event, context):
    action = event.get("action")
    if action == "sleep":
        time.sleep(event["seconds"])
    elif action == "crash":
        os._exit(3)
    key = session_of(event)
    COUNTS[key] = COUNTS.get(key, 0) + 1
    return {"instance": instance_id(), "count": COUNTS[key], "sessions_seen": len(COUNTS)}
