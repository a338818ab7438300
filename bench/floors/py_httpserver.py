"""The Python floor, stdlib flavour: the NoOp function behind `http.server`.

ThreadingHTTPServer with HTTP/1.1 (keep-alive) and TCP_NODELAY (the stdlib's own
`disable_nagle_algorithm` switch: without it the separate header and body writes meet the
client's delayed ACK and cost ~40 ms). Each request reads the body, json.loads it, calls the
handler and json.dumps the result, the per-request work a runtime must do.
Usage: python3 py_httpserver.py [port]  — prints "listening on http://127.0.0.1:PORT".
"""

import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions" / "python"))
from app import handler  # noqa: E402

CONTEXT = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            event = json.loads(raw) if raw.strip() else {}
            out, status = json.dumps(handler(event, CONTEXT)).encode(), 200
        except Exception as e:  # noqa: BLE001 - a floor answers every failure with 500
            out, status = json.dumps({"errorMessage": str(e)}).encode(), 500
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
