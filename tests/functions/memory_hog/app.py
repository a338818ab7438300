"""Allocates (and touches) memory until it has event["mb"] MB or dies trying, event["pace_s"]
seconds apart per 16 MB (0 by default), then holds it for event["hold_s"] seconds (0 by
default)."""
import time

CHUNK_MB = 16


def handler(event, context):
    held = []
    for _ in range(event["mb"] // CHUNK_MB):
        held.append(bytearray(b"\x5a" * (CHUNK_MB << 20)))
        time.sleep(event.get("pace_s", 0))
    time.sleep(event.get("hold_s", 0))
    return {"allocated_mb": len(held) * CHUNK_MB}
