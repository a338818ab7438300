"""The benchmarks that use the object store, on the fast path of a real kiln: each is deployed
twice over the same store, ordinary and with `KilnBreakout` `auto` traced on a fixed training
set until `decontainerized`, and both are driven with the same seeded random inputs, some off
the traced paths. For every input the answer bytes (or the function error's type and message),
the function's log lines and the objects written must be identical, and at least 90% of the
on-trace inputs must run fast.

- authorize loads its own module (`require('./lib/users')`) and reads its bucket's name from
  `process.env`."""

import base64
import json
import random
import re
import uuid

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import ROOT, wait_for
from s3_harness import s3_client

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"
NODE = "nodejs20.x"
INPUTS = 300

LOG_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")


def function_lines(tail):
    return [LOG_NOISE.sub("*", line) for line in tail.splitlines()
            if line and not line.startswith(("START ", "END ", "REPORT ", "INIT_START"))]


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-bench")


class Pair:
    """A benchmark deployed ordinary and fast, with the same environment."""

    def __init__(self, kiln, bench, training, env):
        self.kiln = kiln
        self.ordinary, self.fast = unique(f"bo-bench-{bench}"), unique(f"bo-bench-{bench}-fast")
        code = str(FIXTURES / bench)
        handler = "index.handler"
        args = ["--runtime", NODE, "--handler", handler, "--code", code, "--memory", "256",
                "--timeout", "30"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        kiln.cli("deploy", self.ordinary, *args, timeout=180)
        kiln.cli("deploy", self.fast, *args, "--breakout", "auto", "--trace-requests", str(len(training)),
                 timeout=180)
        wait_for(lambda: (status(kiln, self.fast) or {}).get("Mode") == "tracing", timeout=120,
                 what="instrumented")
        for event in training:
            kiln.invoke(self.fast, event)
        wait_for(lambda: status(kiln, self.fast).get("Mode") in ("decontainerized", "ordinary"),
                 timeout=120, what="compiled")
        assert status(kiln, self.fast)["Mode"] == "decontainerized", status(kiln, self.fast)
        self.on_trace = self.on_trace_fast = self.off_trace = 0

    def call(self, name, event):
        r = self.kiln.client().invoke(FunctionName=name, Payload=json.dumps(event).encode(), LogType="Tail")
        tail = base64.b64decode(r.get("LogResult", "")).decode()
        return r["Payload"].read(), r.get("FunctionError"), tail

    def compare(self, event, on_trace):
        want = self.call(self.ordinary, event)
        got = self.call(self.fast, event)
        assert got[1] == want[1], (event, got, want)
        if want[1]:
            error = lambda body: {k: json.loads(body).get(k) for k in ("errorType", "errorMessage")}  # noqa: E731
            assert error(got[0]) == error(want[0]), (event, got[0], want[0])
        else:
            assert got[0] == want[0], (event, got[0], want[0])
        assert function_lines(got[2]) == function_lines(want[2]), (event, got[2], want[2])
        if on_trace:
            self.on_trace += 1
            self.on_trace_fast += "Mode: decontainerized" in got[2]
        else:
            self.off_trace += 1
        return got

    def check_coverage(self):
        total = self.on_trace + self.off_trace
        assert self.off_trace >= total // 10, f"only {self.off_trace} of {total} inputs off the traces"
        assert self.on_trace_fast >= 0.9 * self.on_trace, \
            f"{self.on_trace_fast} of {self.on_trace} on-trace inputs served fast: {status(self.kiln, self.fast)}"


def test_authorize_runs_fast_and_answers_as_node(kiln):
    s3 = s3_client(kiln)
    bucket = f"bo-users-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    users = [{"username": f"user{i}", "password": f"secret-{i * 7}"} for i in range(1000)]
    s3.put_object(Bucket=bucket, Key="users.json", Body=json.dumps(users).encode())
    training = [{"username": "user3", "password": "secret-21"}, {"username": "user4", "password": "x"},
                {"username": "nobody", "password": "pw"}, {"username": 3}, {}]
    pair = Pair(kiln, "authorize", training, {"USERS_BUCKET": bucket})
    rng = random.Random(20)
    for _ in range(INPUTS):
        i = rng.randrange(1100)
        roll = rng.randrange(10)
        if roll == 0:
            # Off the traces: types the training never gave.
            event = rng.choice([{"username": [i]}, {"username": f"user{i}", "password": None},
                                {"password": "x"}, {"username": True, "password": 1}])
            pair.compare(event, on_trace=False)
        else:
            password = f"secret-{i * 7}" if roll < 6 else "wrong"
            pair.compare({"username": f"user{i}", "password": password}, on_trace=True)
    pair.check_coverage()
