"""The S3 intrinsics on a real kiln: a Node function using `@aws-sdk/client-s3` (GetObject,
HeadObject, PutObject, DeleteObject, ListObjectsV2) against kiln's own store runs fast, reaching the
store directly with its own scope, and answers as the same code in Node does. Writes are staged:
reads in the request see them, and they reach the store only once the fast run has answered. A
request that misses after staging a write commits nothing, and its Node run sees none of it: the
write happens once."""

import json
import shutil
import uuid

import pytest

from breakout_support import delete_functions, status, unique
from kiln_harness import node_status, wait_for
from s3_harness import JS_DIR, s3_client

NODE = "nodejs20.x"

COUNTER = r"""
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
const s3 = new S3Client({});
exports.handler = async (event) => {
  const Bucket = event.bucket;
  const got = await s3.send(new GetObjectCommand({ Bucket, Key: "counter.json" }));
  const was = JSON.parse(await got.Body.transformToString()).n;
  const put = await s3.send(new PutObjectCommand({
    Bucket, Key: "counter.json", Body: JSON.stringify({ n: was + 1 }), ContentType: "application/json",
    Metadata: { writer: "counter" },
  }));
  // The request's own write, staged: a read sees it.
  const again = await s3.send(new GetObjectCommand({ Bucket, Key: "counter.json" }));
  const now = JSON.parse(await again.Body.transformToString()).n;
  // A number in every traced request: a fast run given text here fails its type guard after
  // staging its write.
  let step = 0;
  step = event.step;
  // Never traced: a fast run that gets here has staged its write, then misses.
  if (event.late) console.log("late", now);
  return { was, now, step, etag: put.ETag, type: again.ContentType, meta: again.Metadata };
};
"""

PUT = r"""
const { S3Client, PutObjectCommand } = require("@aws-sdk/client-s3");
const s3 = new S3Client({});
exports.handler = async (event) => {
  try {
    const put = await s3.send(new PutObjectCommand({ Bucket: event.bucket, Key: event.key, Body: "v" }));
    return { etag: put.ETag };
  } catch (e) {
    return { error: e.name };
  }
};
"""

# Two writes a request: the counter, and a receipt in another bucket.
RECEIPT = r"""
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
const s3 = new S3Client({});
exports.handler = async (event) => {
  const got = await s3.send(new GetObjectCommand({ Bucket: event.bucket, Key: "counter.json" }));
  const was = JSON.parse(await got.Body.transformToString()).n;
  await s3.send(new PutObjectCommand({ Bucket: event.bucket, Key: "counter.json", Body: JSON.stringify({ n: was + 1 }) }));
  await s3.send(new PutObjectCommand({ Bucket: event.receipts, Key: "r" + was, Body: "receipt " + was }));
  if (event.late) console.log("late", was);
  return { was };
};
"""

# Writes, logs, then spins for as long as it is asked: a fast run killed while it spins has
# staged its write and held its log line.
SPIN = r"""
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
const s3 = new S3Client({});
exports.handler = async (event) => {
  const got = await s3.send(new GetObjectCommand({ Bucket: event.bucket, Key: "counter.json" }));
  const was = JSON.parse(await got.Body.transformToString()).n;
  await s3.send(new PutObjectCommand({ Bucket: event.bucket, Key: "counter.json", Body: JSON.stringify({ n: was + 1 }) }));
  console.log("written " + (was + 1));
  let i = 0;
  while (i < event.spin) { i += 1; }
  return { was, i };
};
"""

READER = r"""
const { S3Client, HeadObjectCommand, DeleteObjectCommand, ListObjectsV2Command } = require("@aws-sdk/client-s3");
const s3 = new S3Client({});
exports.handler = async (event) => {
  const Bucket = event.bucket;
  if (event.op === "list") {
    const out = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: event.prefix }));
    const keys = (out.Contents || []).map((o) => o.Key + " " + o.Size + " " + o.ETag + " " + (o.LastModified.getTime() > 0));
    return { keys, count: out.KeyCount, truncated: out.IsTruncated };
  }
  if (event.op === "head") {
    const head = await s3.send(new HeadObjectCommand({ Bucket, Key: event.key }));
    return { length: head.ContentLength, etag: head.ETag, type: head.ContentType, meta: head.Metadata };
  }
  await s3.send(new DeleteObjectCommand({ Bucket, Key: event.key }));
  return { deleted: event.key };
};
"""


@pytest.fixture(autouse=True)
def cleanup(kiln):
    yield
    delete_functions(kiln, "bo-s3")


def package(tmp_path, source):
    if not (JS_DIR / "node_modules" / "@aws-sdk" / "client-s3").is_dir():
        pytest.fail("tests/js has no node_modules: run scripts/setup-test-env.sh (npm ci)")
    code = tmp_path / "code"
    shutil.copytree(JS_DIR / "node_modules", code / "node_modules", symlinks=False)
    (code / "index.js").write_text(source)
    return code


def deploy(kiln, name, code, trace_requests=None):
    args = ["deploy", name, "--runtime", NODE, "--handler", "index.handler", "--code", str(code),
            "--memory", "256", "--timeout", "30"]
    if trace_requests:
        args += ["--breakout", "auto", "--trace-requests", str(trace_requests)]
    kiln.cli(*args, timeout=180)


def counter(s3, bucket):
    return json.loads(s3.get_object(Bucket=bucket, Key="counter.json")["Body"].read())["n"]


def test_writes_are_staged_committed_after_the_answer_and_never_twice(kiln, tmp_path):
    s3 = s3_client(kiln)
    bucket = f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="counter.json", Body=b'{"n": 0}')
    name = unique("bo-s3-counter")
    deploy(kiln, name, package(tmp_path, COUNTER), trace_requests=3)
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    for _ in range(3):
        kiln.invoke(name, {"bucket": bucket, "step": 1})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    assert counter(s3, bucket) == 3

    # On the fast path: the answer is Node's (the same fields, the store's ETag), and the write
    # is in the store once the answer is.
    fast = 0
    for i in range(3, 8):
        got, response = kiln.invoke(name, {"bucket": bucket, "step": 1}, LogType="Tail")
        assert "FunctionError" not in response, got
        body = json.dumps({"n": i + 1}, separators=(",", ":")).encode()
        stored = s3.get_object(Bucket=bucket, Key="counter.json")
        assert got == {"was": i, "now": i + 1, "step": 1, "etag": stored["ETag"], "type": "application/json",
                       "meta": {"writer": "counter"}}
        assert stored["Body"].read() == body
        assert stored["ContentType"] == "application/json"
        assert stored["Metadata"] == {"writer": "counter"}
        fast += "Mode: decontainerized" in kiln.log_tail(response)
    assert fast >= 4, f"only {fast} of 5 requests ran fast"

    # A miss after the write was staged: the staged write is dropped, Node runs the request from
    # the start, reads the counter as it was, and writes once.
    before = counter(s3, bucket)
    got, response = kiln.invoke(name, {"bucket": bucket, "step": 1, "late": True}, LogType="Tail")
    tail = kiln.log_tail(response)
    assert "Fast Path: miss (a path not traced" in tail and "Mode: decontainerized" not in tail, tail
    assert got["was"] == before and got["now"] == before + 1, got
    assert counter(s3, bucket) == before + 1

    # A type guard failing after the write was staged: the same.
    got, response = kiln.invoke(name, {"bucket": bucket, "step": "x"}, LogType="Tail")
    tail = kiln.log_tail(response)
    assert "Fast Path: miss (a guard: step held" in tail, tail
    assert got["was"] == before + 1 and got["step"] == "x", got
    assert counter(s3, bucket) == before + 2
    metrics = kiln.signed_request("GET", "/metrics").text
    assert f'kiln_breakout_requests_total{{function="{name}",outcome="fast"}}' in metrics


def test_a_commit_that_fails_writes_nothing_and_node_answers(kiln, tmp_path):
    s3 = s3_client(kiln)
    bucket = f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    name = unique("bo-s3-put")
    deploy(kiln, name, package(tmp_path, PUT), trace_requests=2)
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    for i in range(2):
        kiln.invoke(name, {"bucket": bucket, "key": f"k{i}"})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    got, response = kiln.invoke(name, {"bucket": bucket, "key": "k2"}, LogType="Tail")
    assert "Mode: decontainerized" in kiln.log_tail(response)
    assert got == {"etag": s3.head_object(Bucket=bucket, Key="k2")["ETag"]}

    # The bucket is gone: the fast run stages its write and answers, the commit fails, and the
    # request runs in Node, whose write fails too: no object, and Node's answer.
    missing = f"bo-gone-{uuid.uuid4().hex[:8]}"
    got, response = kiln.invoke(name, {"bucket": missing, "key": "k3"}, LogType="Tail")
    tail = kiln.log_tail(response)
    assert "Fast Path: miss (the commit failed" in tail, tail
    assert got == {"error": "NoSuchBucket"}
    assert [b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"] == missing] == []


def test_several_writes_are_committed_together_or_not_at_all(kiln, tmp_path):
    s3 = s3_client(kiln)
    bucket, receipts = f"bo-{uuid.uuid4().hex[:12]}", f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=receipts)
    s3.put_object(Bucket=bucket, Key="counter.json", Body=b'{"n": 0}')
    name = unique("bo-s3-receipt")
    deploy(kiln, name, package(tmp_path, RECEIPT), trace_requests=2)
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    for _ in range(2):
        kiln.invoke(name, {"bucket": bucket, "receipts": receipts})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")

    def receipts_written():
        return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=receipts).get("Contents", []))

    # Fast: both writes are in the store once the answer is.
    got, response = kiln.invoke(name, {"bucket": bucket, "receipts": receipts}, LogType="Tail")
    assert "Mode: decontainerized" in kiln.log_tail(response)
    assert got == {"was": 2} and counter(s3, bucket) == 3
    assert receipts_written() == ["r0", "r1", "r2"]
    assert s3.get_object(Bucket=receipts, Key="r2")["Body"].read() == b"receipt 2"

    # A miss after both were staged: neither is committed; Node's run writes each once.
    got, response = kiln.invoke(name, {"bucket": bucket, "receipts": receipts, "late": True}, LogType="Tail")
    assert "Fast Path: miss (a path not traced" in kiln.log_tail(response)
    assert got == {"was": 3} and counter(s3, bucket) == 4
    assert receipts_written() == ["r0", "r1", "r2", "r3"]

    # The receipts' bucket is gone: the commit fails as a whole (the counter is not written
    # either), and Node's run, which writes one object at a time, increments the counter once
    # before its second write fails.
    missing = f"bo-gone-{uuid.uuid4().hex[:8]}"
    got, response = kiln.invoke(name, {"bucket": bucket, "receipts": missing}, LogType="Tail")
    assert "Fast Path: miss (the commit failed" in kiln.log_tail(response)
    assert response.get("FunctionError") == "Unhandled" and got["errorType"] == "NoSuchBucket", got
    assert counter(s3, bucket) == 5


def test_reads_lists_and_deletes_answer_as_node_does(kiln, tmp_path):
    s3 = s3_client(kiln)
    bucket = f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for key, body in [("a.txt", b"alpha"), ("b.txt", b"bravo!"), ("dir/c.txt", b"charlie"),
                      ("dir/d.txt", b"delta delta")]:
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/plain",
                      Metadata={"source": key})
    code = package(tmp_path, READER)
    name = unique("bo-s3-reader")
    plain = unique("bo-s3-plain")
    deploy(kiln, name, code, trace_requests=5)
    deploy(kiln, plain, code)
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    s3.put_object(Bucket=bucket, Key="gone-0", Body=b"x")
    for event in [{"op": "list", "prefix": ""}, {"op": "list", "prefix": "dir/"},
                  {"op": "head", "key": "a.txt"}, {"op": "head", "key": "dir/c.txt"},
                  {"op": "delete", "key": "gone-0"}]:
        kiln.invoke(name, dict(event, bucket=bucket))
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")

    fast = 0
    events = [{"op": "list", "prefix": ""}, {"op": "list", "prefix": "dir/"}, {"op": "list", "prefix": "zz"},
              {"op": "head", "key": "b.txt"}, {"op": "head", "key": "dir/d.txt"}]
    for event in events:
        got, response = kiln.invoke(name, dict(event, bucket=bucket), LogType="Tail")
        want, _ = kiln.invoke(plain, dict(event, bucket=bucket))
        assert got == want, event
        fast += "Mode: decontainerized" in kiln.log_tail(response)
    assert fast >= 4, f"only {fast} of {len(events)} requests ran fast"

    # A delete is committed with the answer.
    s3.put_object(Bucket=bucket, Key="gone-1", Body=b"y")
    got, response = kiln.invoke(name, {"op": "delete", "key": "gone-1", "bucket": bucket}, LogType="Tail")
    assert got == {"deleted": "gone-1"}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert "gone-1" not in keys

    # A head of a key that is not there misses: Node answers with the SDK's error.
    got, response = kiln.invoke(name, {"op": "head", "key": "missing", "bucket": bucket}, LogType="Tail")
    want, plain_response = kiln.invoke(plain, {"op": "head", "key": "missing", "bucket": bucket})
    assert response.get("FunctionError") == plain_response.get("FunctionError") == "Unhandled"
    assert got["errorType"] == want["errorType"]
    assert "Fast Path: miss (" in kiln.log_tail(response)


def test_with_the_object_cache_one_write_runs_fast_and_a_second_misses(fresh_kiln, tmp_path):
    """With the object cache in front of the store, the fast path goes through the cache, and a
    request that writes twice runs in Node (the cache commits one write at a time)."""
    kiln = fresh_kiln(extra_args=["--object-cache", "on"])
    s3 = s3_client(kiln)
    bucket, receipts = f"bo-{uuid.uuid4().hex[:12]}", f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=receipts)
    s3.put_object(Bucket=bucket, Key="counter.json", Body=b'{"n": 0}')
    one, two = unique("bo-s3-cached"), unique("bo-s3-cached2")
    deploy(kiln, one, package(tmp_path / "one", COUNTER), trace_requests=2)
    deploy(kiln, two, package(tmp_path / "two", RECEIPT), trace_requests=2)
    for name in (one, two):
        wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    for _ in range(2):
        kiln.invoke(one, {"bucket": bucket, "step": 1})
        kiln.invoke(two, {"bucket": bucket, "receipts": receipts})
    for name in (one, two):
        wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    assert counter(s3, bucket) == 4

    got, response = kiln.invoke(one, {"bucket": bucket, "step": 1}, LogType="Tail")
    assert "Mode: decontainerized" in kiln.log_tail(response)
    assert got["was"] == 4 and got["now"] == 5 and counter(s3, bucket) == 5

    got, response = kiln.invoke(two, {"bucket": bucket, "receipts": receipts}, LogType="Tail")
    assert "Fast Path: miss (intrinsic S3: a second object write" in kiln.log_tail(response)
    assert got == {"was": 5} and counter(s3, bucket) == 6


def test_kill_9_during_a_fast_run_leaves_no_write_and_no_log_line(fresh_kiln, tmp_path):
    import threading

    kiln = fresh_kiln()
    s3 = s3_client(kiln)
    bucket = f"bo-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="counter.json", Body=b'{"n": 0}')
    name = unique("bo-s3-spin")
    deploy(kiln, name, package(tmp_path, SPIN))
    kiln.settled(name)
    r = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration", json.dumps(
        {"Timeout": 30, "KilnBreakout": {"Mode": "auto", "TraceRequests": 2, "FastPathTimeoutMs": 60000}}))
    assert r.status_code == 200, r.text
    wait_for(lambda: status(kiln, name)["Mode"] == "tracing", timeout=120, what="instrumented")
    for _ in range(2):
        kiln.invoke(name, {"bucket": bucket, "spin": 10})
    wait_for(lambda: status(kiln, name)["Mode"] == "decontainerized", timeout=60, what="compiled")
    assert counter(s3, bucket) == 2
    # The sandboxed runs' log lines are on disk (logs are written a few times a second), so that
    # what the restarted kiln shows is the fast run's doing alone.
    wait_for(lambda: "written 2" in kiln.cli("logs", name).stdout, timeout=30, what="the runs' logs")

    # The fast run books its arena while it runs: once the booking shows, it is under way (its
    # write staged, its log line held, then spinning until its 60 s budget).
    before = node_status(kiln)["memory_reserved_mb"]
    threading.Thread(target=lambda: _invoke_quietly(kiln, name, {"bucket": bucket, "spin": 1e15}),
                     daemon=True).start()
    wait_for(lambda: node_status(kiln)["memory_reserved_mb"] >= before + 32, timeout=30,
             what="the fast run to start")
    kiln.kill9()

    restarted = fresh_kiln(data_dir=kiln.data_dir)
    assert counter(s3_client(restarted), bucket) == 2
    logs = restarted.cli("logs", name).stdout
    assert "written 2" in logs and "written 3" not in logs, logs


def _invoke_quietly(kiln, name, event):
    try:
        kiln.invoke(name, event)
    except Exception:  # kiln is killed under it
        pass
