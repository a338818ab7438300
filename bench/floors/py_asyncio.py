"""The Python floor, minimal flavour: the NoOp function behind a raw asyncio Protocol.

A hand-rolled HTTP/1.1 keep-alive server (Content-Length bodies only, which is all the
benchmark client sends) with asyncio's default TCP_NODELAY, one write per response. It does the
same per-request work as the stdlib floor: json.loads the body, call the handler, json.dumps.
Usage: python3 py_asyncio.py [port]  — prints "listening on http://127.0.0.1:PORT".
"""

import asyncio
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions" / "python"))
from app import handler  # noqa: E402

CONTEXT = None
HEAD = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            total = end + 4 + length
            if len(self.buf) < total:
                return
            raw, self.buf = self.buf[end + 4:total], self.buf[total:]
            try:
                event = json.loads(raw) if raw.strip() else {}
                out, status, reason = json.dumps(handler(event, CONTEXT)).encode(), 200, b"OK"
            except Exception as e:  # noqa: BLE001 - a floor answers every failure with 500
                out, status, reason = json.dumps({"errorMessage": str(e)}).encode(), 500, b"Error"
            self.transport.write(HEAD % (status, reason, len(out)) + out)


async def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http, "127.0.0.1", port)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set_result, None)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await stop


if __name__ == "__main__":
    asyncio.run(main())
