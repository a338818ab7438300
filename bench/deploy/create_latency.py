#!/usr/bin/env python3
"""How long CreateFunction and UpdateFunctionCode take to answer for a large package, and how
long until the function is Active (or its update Successful) and a first invocation answers.

    KILN_BIN=target/debug/kiln .venv/bin/python bench/deploy/create_latency.py [--mb 149] [--n 3]

The package is `--mb` MiB unzipped in 1 MiB files of random text over a three-letter alphabet
(about 1.6 bits of entropy a byte: it deflates to about 29 %, so a 149 MiB package stays under
Lambda's 50 MiB limit on a zip uploaded directly) and a Python handler. Each round creates a
function from a package of its own (fresh bytes: the code store keeps a package once), waits
for `function_active_v2`, invokes it, then updates its code with another package the same
way. One kiln of its own is started (data dir in /tmp) and stopped.

Prints a markdown table of each round's times (s) and their medians.
"""

import argparse
import io
import os
import statistics
import sys
import time
import uuid
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from kiln_harness import PYTHON_RUNTIME, Kiln  # noqa: E402

HANDLER = b"def handler(event, context):\n    return {'ok': True}\n"


# Each random byte becomes one of three letters.
LETTERS = bytes(b"ACG"[i % 3] for i in range(256))


def package(mebibytes: int) -> bytes:
    """A zip of app.py and `mebibytes` 1 MiB files of random text."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("app.py", HANDLER)
        for i in range(mebibytes):
            z.writestr(f"data/part-{i:04d}.txt", os.urandom(1024 * 1024).translate(LETTERS))
    return out.getvalue()


def wait(lam, waiter, name):
    lam.get_waiter(waiter).wait(FunctionName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 1500})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=149)
    parser.add_argument("--n", type=int, default=3)
    args = parser.parse_args()
    server = Kiln().start()
    rows = []
    try:
        lam = server.client(read_timeout=300)
        for _ in range(args.n):
            first, second = package(args.mb), package(args.mb)
            name = f"big-{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            created = lam.create_function(
                FunctionName=name, Runtime=PYTHON_RUNTIME, Role="arn:aws:iam::000000000000:role/bench",
                Handler="app.handler", Code={"ZipFile": first}, Timeout=30)
            answered = time.monotonic() - started
            wait(lam, "function_active_v2", name)
            active = time.monotonic() - started
            lam.invoke(FunctionName=name, Payload=b"{}")
            invoked = time.monotonic() - started
            started = time.monotonic()
            updated = lam.update_function_code(FunctionName=name, ZipFile=second)
            update_answered = time.monotonic() - started
            wait(lam, "function_updated_v2", name)
            successful = time.monotonic() - started
            rows.append((len(first) / 1e6, created["State"], answered, active, invoked,
                         updated.get("LastUpdateStatus"), update_answered, successful))
            lam.delete_function(FunctionName=name)
    finally:
        server.stop()
        server.cleanup()
    print(f"{args.mb} MB unzipped, kiln {os.environ.get('KILN_BIN', 'target/debug/kiln')}\n")
    print("| zip MB | CreateFunction answered | state | Active | first invoke answered "
          "| UpdateFunctionCode answered | status | Successful |")
    print("|---|---|---|---|---|---|---|---|")
    for zip_mb, state, answered, active, invoked, status, update_answered, successful in rows:
        print(f"| {zip_mb:.1f} | {answered:.2f} | {state} | {active:.2f} | {invoked:.2f} "
              f"| {update_answered:.2f} | {status} | {successful:.2f} |")
    median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"| median | {median(2):.2f} | | {median(3):.2f} | {median(4):.2f} | {median(6):.2f} | "
          f"| {median(7):.2f} |")


if __name__ == "__main__":
    main()
