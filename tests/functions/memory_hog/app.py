"""Allocates (and touches) memory until it has event["mb"] MB or dies trying."""
CHUNK_MB = 16


def handler(event, context):
    held = []
    for _ in range(event["mb"] // CHUNK_MB):
        held.append(bytearray(b"\x5a" * (CHUNK_MB << 20)))
    return {"allocated_mb": len(held) * CHUNK_MB}
