#!/usr/bin/env python3
"""How long CreateFunction and UpdateFunctionCode take to answer for a large package, and how
long until the function is Active (or its update Successful) and a first invocation answers.

    .venv/bin/python bench/deploy/create_latency.py [--mb 149] [--n 3] [--kiln BIN]...

The package is `--mb` MiB unzipped in 1 MiB files of random text over a three-letter alphabet
(about 1.6 bits of entropy a byte: it deflates to about 29 %, so a 149 MiB package stays under
Lambda's 50 MiB limit on a zip uploaded directly) and a Python handler. Each round creates a
function from a package of its own (fresh bytes: the code store keeps a package once), waits
for `function_active_v2`, invokes it, then updates its code with another package the same
way. Each `--kiln` binary (default `$KILN_BIN`, else target/debug/kiln) gets a kiln of its own
(data dir in /tmp), started before the first round and stopped after the last; the rounds
alternate between them, so that a comparison sees the same machine.

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

import kiln_harness  # noqa: E402
from kiln_harness import PYTHON_RUNTIME  # noqa: E402

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


def deploy_round(lam, first, second):
    """Creates a function from `first`, waits until it is Active, invokes it, updates its code to
    `second` and waits until the update is Successful; the times (s) and states seen."""
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
    lam.delete_function(FunctionName=name)
    return (len(first) / 1e6, created["State"], answered, active, invoked,
            updated.get("LastUpdateStatus"), update_answered, successful)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=149)
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--kiln", action="append",
                        help="a kiln binary to measure (repeat to compare; rounds alternate between them); "
                             "default $KILN_BIN or target/debug/kiln")
    args = parser.parse_args()
    binaries = args.kiln or [str(kiln_harness.KILN_BIN)]
    servers = []
    rows = {binary: [] for binary in binaries}
    try:
        for binary in binaries:
            kiln_harness.KILN_BIN = Path(binary)
            servers.append(kiln_harness.Kiln().start())
        clients = [server.client(read_timeout=300) for server in servers]
        for _ in range(args.n):
            # The same bytes for every kiln of a round, new ones each round.
            first, second = package(args.mb), package(args.mb)
            for binary, lam in zip(binaries, clients):
                rows[binary].append(deploy_round(lam, first, second))
    finally:
        for server in servers:
            server.stop()
            server.cleanup()
    print(f"{args.mb} MiB unzipped, {args.n} rounds, load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| kiln | zip MB | CreateFunction answered | state | Active | first invoke answered "
          "| UpdateFunctionCode answered | status | Successful |")
    print("|---|---|---|---|---|---|---|---|---|")
    for binary in binaries:
        for zip_mb, state, answered, active, invoked, status, update_answered, successful in rows[binary]:
            print(f"| {binary} | {zip_mb:.1f} | {answered:.2f} | {state} | {active:.2f} | {invoked:.2f} "
                  f"| {update_answered:.2f} | {status} | {successful:.2f} |")
        median = lambda i: statistics.median(r[i] for r in rows[binary])  # noqa: E731
        print(f"| {binary} | median | {median(2):.2f} | | {median(3):.2f} | {median(4):.2f} | {median(6):.2f} | "
              f"| {median(7):.2f} |")


if __name__ == "__main__":
    main()
