"""The benchmarks that use the object store, on the fast path of a real kiln: each is deployed
twice over the same store, ordinary and with `KilnBreakout` `auto` traced on a fixed training
set until `decontainerized`, and both are driven with the same seeded random inputs, some off
the traced paths. For every input the answer bytes (or the function error's type and message,
on the fast path too once its path is traced; its stack is the fast path's own),
the function's log lines and the objects written must be identical, and at least 90% of the
on-trace inputs must run fast.

- authorize loads its own module (`require('./lib/users')`) and reads its bucket's name from
  `process.env`;
- status validates its input with `typeof`, `includes` and a regular expression, throwing a
  class that extends `Error` (answered as the function's error), and writes GitHub's status
  JSON beside the commit record it reads;
- upload is an ES module (`"type": "module"`) importing the S3 client and exporting its
  handler;
- banking keeps each account's balance in the request's session (`KilnSessions` hint
  `json:$.account`) through `context.session.transact`: its fast requests commit to the
  session's log, and the requests Node serves (the tracing instance, a primary) see those
  writes, as the fast path sees theirs."""

import base64
import json
import random
import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import ROOT, wait_for
from s3_harness import s3_client

FIXTURES = ROOT / "crates" / "kiln-breakout" / "tests" / "fixtures"
NODE = "nodejs20.x"
INPUTS = 300

LOG_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")


STACK = re.compile(r'"stack":\[.*?\]')


def function_lines(tail):
    """The function's own log lines, ids, times and an error's stack masked (a miss may run in
    the tracing instance, whose stack points into the instrumented copy)."""
    return [STACK.sub('"stack":*', LOG_NOISE.sub("*", line)) for line in tail.splitlines()
            if line and not line.startswith(("START ", "END ", "REPORT ", "INIT_START"))]


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-bench")


class Pair:
    """A benchmark deployed ordinary and fast, with the same environment."""

    def __init__(self, kiln, bench, training, env, extra=()):
        self.kiln = kiln
        self.ordinary, self.fast = unique(f"bo-bench-{bench}"), unique(f"bo-bench-{bench}-fast")
        code = str(FIXTURES / bench)
        handler = "index.handler"
        args = ["--runtime", NODE, "--handler", handler, "--code", code, "--memory", "256",
                "--timeout", "30"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        args += list(extra)
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
        self.on_trace = self.on_trace_fast = self.off_trace = self.errors_fast = 0

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
            # A request's own id (status answers it) is masked.
            assert LOG_NOISE.sub("*", got[0].decode()) == LOG_NOISE.sub("*", want[0].decode()), (event, got, want)
        assert function_lines(got[2]) == function_lines(want[2]), (event, got[2], want[2])
        self.errors_fast += bool(want[1]) and "Mode: decontainerized" in got[2]
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


def test_status_runs_fast_and_answers_and_writes_as_node(kiln):
    s3 = s3_client(kiln)
    try:
        s3.create_bucket(Bucket="commits")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    repo = f"r{uuid.uuid4().hex[:8]}"
    shas = [f"{i:07x}abc" for i in range(20)]
    for i, sha in enumerate(shas):
        record = {"message": f"change {i}", "author": {"login": f"dev{i}"}} if i % 3 else {}
        s3.put_object(Bucket="commits", Key=f"{repo}/{sha}.json", Body=json.dumps(record).encode())

    def event(sha, state="success", context="ci"):
        return {"repo": repo, "sha": sha, "state": state, "target_url": "https://ci/x", "context": context}

    training = [event(shas[1]), event(shas[0], "failure", "lint"), event(shas[2], "odd"), event("zz"),
                {"repo": 1}]
    pair = Pair(kiln, "status", training, {})
    rng = random.Random(21)
    for _ in range(INPUTS):
        sha = rng.choice(shas)
        state = rng.choice(["error", "failure", "pending", "success"])
        context = rng.choice(["ci", "lint", "build"])
        if rng.randrange(8) == 0:
            # Off the traces: each throws an InputError.
            bad = rng.choice([event(sha, "odd"), event("xyz" + sha[3:]), event(sha[:5]), {"repo": repo},
                              {**event(sha), "context": 5}])
            pair.compare(bad, on_trace=False)
            continue
        got = pair.compare(event(sha, state, context), on_trace=True)
        # The write the fast copy made is the answer it gave (the ordinary copy wrote the same
        # key just before, with its own request id).
        stored = s3.get_object(Bucket="commits", Key=f"statuses/{repo}/{sha}/{context}.json")
        assert stored["Body"].read() == json.dumps(json.loads(got[0]), separators=(",", ":")).encode()
        assert stored["ContentType"] == "application/json"
    pair.check_coverage()
    # Its InputErrors, once their path is traced, are answered on the fast path as Node does.
    assert pair.errors_fast > 0


def test_upload_runs_fast_as_an_es_module_and_writes_as_node(kiln):
    s3 = s3_client(kiln)
    try:
        s3.create_bucket(Bucket="uploads")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    prefix = uuid.uuid4().hex[:8]
    training = [{"name": f"{prefix}-a.txt", "body": "hello"}, {"body": "no name"}, {"name": f"{prefix}-b"}, {}]
    pair = Pair(kiln, "upload", training, {})
    rng = random.Random(22)
    for i in range(INPUTS):
        name = f"{prefix}-{rng.randrange(50)}.txt"
        if rng.randrange(8) == 0:
            # Off the traces: no body, which throws "No file to upload.", or a body that is not a string.
            bad = rng.choice([{"name": name}, {"name": name, "body": None}, {"name": name, "body": i}])
            pair.compare(bad, on_trace=False)
            continue
        body = "".join(rng.choice("abc ☃\n") for _ in range(rng.randrange(40)))
        got = pair.compare({"name": name, "body": body}, on_trace=True)
        stored = s3.get_object(Bucket="uploads", Key=f"uploads/{name}")
        assert stored["Body"].read() == body.encode()
        assert json.loads(got[0]) == {"key": f"uploads/{name}", "etag": stored["ETag"]}
    pair.check_coverage()
    assert pair.errors_fast > 0


def test_banking_runs_fast_on_its_session_and_answers_as_node(kiln):
    # `balance` is not in the training: it misses at first and runs in Node (the tracing
    # instance, or the account's primary), which must see what the fast path committed.
    training = [{"account": "t", "op": "deposit", "amount": 500}, {"account": "t", "op": "withdraw", "amount": 200},
                {"account": "t", "op": "withdraw", "amount": 9000}, {"account": "t", "op": "steal", "amount": 1},
                {"account": "t", "op": "deposit", "amount": -1}, {"account": "t", "op": "deposit", "amount": 0.5}]
    pair = Pair(kiln, "banking", training, {}, extra=["--session-hint", "json:$.account"])
    accounts = [f"acct-{i}" for i in range(4)]
    rng = random.Random(23)
    for _ in range(INPUTS):
        account = rng.choice(accounts)
        roll = rng.randrange(10)
        if roll == 0:
            pair.compare({"account": account, "op": "balance"}, on_trace=False)
        elif roll == 1:
            pair.compare({"account": account, "op": rng.choice(["deposit", "withdraw"]), "amount": 1.5},
                         on_trace=True)
        else:
            op = rng.choice(["deposit", "withdraw", "audit"])
            pair.compare({"account": account, "op": op, "amount": rng.randrange(400)}, on_trace=True)
    pair.check_coverage()
    # Every account's balance, read through Node and through the fast path, is the ordinary
    # copy's.
    for account in accounts:
        want = pair.call(pair.ordinary, {"account": account, "op": "balance"})
        got = pair.call(pair.fast, {"account": account, "op": "balance"})
        assert got[0] == want[0], (account, got, want)
    sessions = json.loads(kiln.cli("--json", "sessions", pair.fast).stdout)["Sessions"]
    assert sorted(s["session"] for s in sessions) == sorted(accounts + ["t"])
    # Concurrent deposits to one account, on whichever path takes each, lose none: the
    # session's requests take turns across the paths.
    before = json.loads(pair.call(pair.fast, {"account": "shared", "op": "balance"})[0])["balance"]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: pair.call(pair.fast, {"account": "shared", "op": "deposit", "amount": 1}),
                                range(160)))
    assert all(json.loads(a[0])["ok"] for a in answers), answers[:3]
    assert sum("Mode: decontainerized" in a[2] for a in answers) > 0
    after = json.loads(pair.call(pair.fast, {"account": "shared", "op": "balance"})[0])["balance"]
    assert after == before + 160
