#!/usr/bin/env python3
"""A console left open on kiln while a benchmark runs (`BENCH_CONSOLE=1 bench/run.sh ...`):
signed in on the console's listener, it asks what the overview asks every 2 s (the node's
status and the last 10 minutes of history) and streams the log of every function it finds,
as the logs tab does. What the console costs kiln then shows in the benchmark's figures.

It runs until it is stopped; bench/run.sh stops it with the servers."""

import argparse
import json
import re
import threading
import time
from pathlib import Path

import requests

# The overview redraws itself this often (REFRESH_MS in the console's dom.js).
REFRESH_S = 2.0


def console_url(log: Path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists():
            found = re.search(r"console on (http://\S+)/ui/", log.read_text(errors="replace"))
            if found:
                return found.group(1)
        time.sleep(0.2)
    raise SystemExit(f"console_viewer: no console URL in {log}")


def follow(cookies, base, name):
    """Streams the function's log for as long as kiln serves it (a session of its own: a
    requests.Session is not shared between threads)."""
    http = requests.Session()
    http.cookies.update(cookies)
    while True:
        try:
            with http.get(f"{base}/kiln/v1/functions/{name}/logs?follow=true&bytes=65536",
                          stream=True, timeout=(5, None)) as response:
                for _ in response.iter_content(chunk_size=None):
                    pass
        except requests.RequestException:
            pass
        time.sleep(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True, help="kiln's output, where it prints the console's URL")
    args = parser.parse_args()
    base = console_url(args.log)
    creds = json.loads((args.data_dir / "credentials.json").read_text())
    http = requests.Session()
    signed = http.post(base + "/ui/api/session", timeout=10,
                       json={"accessKeyId": creds["accessKeyId"], "secretAccessKey": creds["secretAccessKey"]})
    signed.raise_for_status()
    following = set()
    while True:
        started = time.time()
        status = http.get(base + "/kiln/v1/status", timeout=10).json()
        http.get(base + "/kiln/v1/history?seconds=600", timeout=10)
        for name in status.get("functions", []):
            if name not in following:
                following.add(name)
                threading.Thread(target=follow, args=(http.cookies, base, name), daemon=True).start()
        time.sleep(max(0.0, REFRESH_S - (time.time() - started)))


if __name__ == "__main__":
    main()
