"""Session state (tests/sessions/test_session_state.py): each action uses context.session's API and says what it saw."""
import base64
import os


def handler(event, context):
    session = context.session
    action = event.get("action", "get")
    if session is None:
        return {"session": None}
    key = event.get("key", "k")
    if action == "put":
        value = base64.b64decode(event["bytes"]) if "bytes" in event else event.get("value")
        session.put(key, value)
        # A request reads its own writes.
        return {"read_back": _show(session.get(key))}
    if action == "get":
        return {"value": _show(session.get(key, event.get("default")))}
    if action == "delete":
        session.delete(key)
        return {"present": key in session}
    if action == "keys":
        return {"keys": session.keys(), "id": session.id}
    if action == "incr":
        value = session.get("n", 0) + 1
        session.put("n", value)
        return {"n": value}
    if action == "incr_tx":
        return {"n": session.transact(_increment)}
    if action == "tx_then_fail":
        def fail(tx):
            tx.put("n", -1000)
            tx.put("other", "x")
            assert tx.get("n") == -1000  # the transaction reads its own writes
            raise ValueError("changed my mind")
        try:
            session.transact(fail)
        except ValueError:
            pass
        return {"n": session.get("n"), "other": session.get("other")}
    if action == "put_then_raise":
        session.put(key, event.get("value"))
        raise RuntimeError("after the put")
    if action == "put_then_crash":
        session.put(key, event.get("value"))
        os._exit(3)
    if action == "big":
        session.put(key, b"x" * event["size"])
        return {"stored": len(session.get(key))}
    if action == "bad_key":
        session.put(event["bad"], 1)
    return {"error": "unknown action"}


def _increment(tx):
    value = tx.get("n", 0) + 1
    tx.put("n", value)
    return value


def _show(value):
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    return value
