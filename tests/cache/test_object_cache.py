"""The object cache (OFC §6) in front of a remote store: a `--store-only` kiln in its own network
namespace, 5 ms away each way, as OFC's remote storage.

Through the cache, every reader sees the latest acknowledged write; the remote sees it once it
has been written back. These tests look at both sides, and at kiln's /metrics for what the cache
did (a hit never reaches the remote)."""

import base64
import json
import hashlib
import os
import re
import struct
import threading
import time
import uuid
import zlib

import botocore.exceptions
import pytest

from kiln_harness import PYTHON_RUNTIME, Kiln, node_status, wait_ready
from test_memory_prediction import invoke as invoke_hog
from s3_harness import StoreOnlyKiln, WanLink, s3_client, wait_until

KiB = 1024


class Remote:
    def __init__(self, link):
        self.link = link
        self.store = StoreOnlyKiln(listen=f"{link.ns_ip}:9001", netns=link.name).start()
        self.endpoint = f"http://{link.expose(9001)}"

    def client(self):
        return s3_client(endpoint=self.endpoint, access_key=self.store.access_key,
                         secret_key=self.store.secret_key, region="us-east-1")

    def args(self):
        return ["--s3-backend", self.endpoint, "--s3-backend-access-key", self.store.access_key,
                "--s3-backend-secret-key", self.store.secret_key]


@pytest.fixture(scope="module")
def remote():
    with WanLink(f"koc-{os.getpid() % 100000}", subnet_octet=(os.getpid() + 7) % 250 + 1, delay_ms=5) as link:
        remote = Remote(link)
        try:
            yield remote
        finally:
            remote.store.cleanup()


def start_front(remote, *extra, data_dir=None, sizing="fixed"):
    """A kiln over the remote. No functions run in most of these tests, so nothing would lend
    the cache memory: its capacity is fixed unless `sizing` says otherwise."""
    return Kiln(data_dir=data_dir,
                extra_args=[*remote.args(), "--object-cache-sizing", sizing, *extra]).start()


@pytest.fixture(scope="module")
def front(remote):
    server = start_front(remote)
    yield server
    server.cleanup()


@pytest.fixture
def bucket(front):
    name = f"c-{uuid.uuid4().hex[:12]}"
    s3_client(front).create_bucket(Bucket=name)
    return name


def metric(server, name):
    text = server.signed_request("GET", "/metrics", "", {}).text
    found = re.search(rf"^kiln_object_cache_{name}(?:_total)? (\d+)", text, re.M)
    assert found, f"kiln_object_cache_{name} is not in /metrics"
    return int(found.group(1))


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def in_remote(remote, bucket, key):
    try:
        return remote.client().get_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise


def wait_for_remote(remote, bucket, key, body, timeout=30):
    def landed():
        got = in_remote(remote, bucket, key)
        return got is not None and got["Body"].read() == body
    wait_until(landed, timeout, f"{key} written back to the remote")


def test_the_cache_is_announced_and_on_by_default_over_a_remote(front, remote):
    assert any(f"fronting {remote.endpoint}; object cache of 512 MiB" in line for line in front.output)
    assert metric(front, "capacity_bytes") == 512 * 1024 * KiB


def start_lending(remote, name):
    """A kiln whose cache is sized by what instances lend (50 MB of slack), and a 512 MB memory hog `name` whose
    model has matured: its one idle instance lends 512 MB less its predicted limit to the cache."""
    front = start_front(remote, "--prediction-min-samples", "20", "--object-cache-slack-mb", "50",
                        sizing="lent")
    try:
        assert metric(front, "capacity_bytes") == 0, "no instance lends anything yet"
        # No snapshot: its spare fork would be a second instance, and a fresh one's first
        # invocation is not sized.
        front.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=512, Timeout=30,
                     Tags={"kiln:prebake": "off"})
        limit = None
        for _ in range(30):
            (limit, _), _ = invoke_hog(front, name, 16)
        assert limit is not None and limit < 512, "the model matured and sized the invocations"
        lent = (512 - limit - 50) * 1024 * KiB
        wait_until(lambda: metric(front, "capacity_bytes") == lent, 10, "the cache to grow")
        return front
    except BaseException:
        front.cleanup()
        raise


def test_capacity_follows_the_memory_that_sized_instances_lend(remote):
    front = start_lending(remote, "oc-hog")
    try:
        assert any("object cache of up to 512 MiB, lent by instances" in line for line in front.output)
        assert metric(front, "resize_seconds_count") >= 1
    finally:
        front.cleanup()


def put_objects(front, count, size):
    """A new bucket through `front` with `count` random objects of `size` bytes (k0, k1, …); returns the client,
    the bucket and the bodies by key."""
    s3 = s3_client(front)
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    bodies = {f"k{i}": os.urandom(size) for i in range(count)}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return s3, bucket, bodies


def test_a_raised_limit_takes_its_memory_back_from_the_cache_first(remote):
    name = "oc-raise"
    front = start_lending(remote, name)
    try:
        # Objects in the cache, written back (so evictable): the memory the instance lent holds data.
        s3, bucket, bodies = put_objects(front, 8, 512 * KiB)
        wait_until(lambda: metric(front, "dirty_bytes") == 0, 30, "the objects written back")
        assert metric(front, "bytes") >= 4 * 1024 * KiB
        reclaims, evictions = metric(front, "reclaim_seconds_count"), metric(front, "evictions")
        # An invocation that grows slowly past its predicted limit: the monitor raises it to the
        # booking, and the cache gives the memory back on the spot, not at the next sizing tick.
        (limit_now, raised), used = invoke_hog(front, name, 96, pace_s=0.5)
        assert raised, (limit_now, used)
        assert used >= 96
        assert metric(front, "reclaim_seconds_count") > reclaims
        # The one instance now reserves its booking: nothing is left to lend, and nothing is cached.
        assert metric(front, "capacity_bytes") == 0
        assert metric(front, "bytes") == 0
        assert metric(front, "evictions") == evictions + len(bodies)
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    finally:
        front.cleanup()


def test_writes_are_transparent_and_reach_the_remote(front, remote, bucket):
    s3 = s3_client(front)
    body = os.urandom(200 * KiB)
    put = s3.put_object(Bucket=bucket, Key="out/a.bin", Body=body, ContentType="image/png",
                        Metadata={"tenant": "t1"}, ChecksumAlgorithm="CRC32")
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert put["ChecksumCRC32"] == crc32_b64(body)
    hits = metric(front, "hits")
    # Read your write, before and after the remote has it: same bytes, ETag, type, metadata and
    # checksum, and the reserved version key is not shown.
    for _ in range(2):
        got = s3.get_object(Bucket=bucket, Key="out/a.bin", ChecksumMode="ENABLED")
        assert got["Body"].read() == body
        assert got["ETag"] == put["ETag"] and got["ContentType"] == "image/png"
        assert got["Metadata"] == {"tenant": "t1"}
        assert got["ChecksumCRC32"] == crc32_b64(body)
        head = s3.head_object(Bucket=bucket, Key="out/a.bin")
        assert head["ContentLength"] == len(body) and head["ETag"] == put["ETag"]
        wait_for_remote(remote, bucket, "out/a.bin", body)
    assert metric(front, "hits") >= hits + 4
    outside = remote.client().get_object(Bucket=bucket, Key="out/a.bin")
    assert outside["ETag"] == put["ETag"] and outside["ContentType"] == "image/png"
    assert outside["Metadata"]["tenant"] == "t1"
    assert int(outside["Metadata"]["kiln-version"]) > 0
    # Ranges and preconditions are answered from memory like the store answers them.
    ranged = s3.get_object(Bucket=bucket, Key="out/a.bin", Range="bytes=100-199")
    assert ranged["Body"].read() == body[100:200] and ranged["ContentRange"] == f"bytes 100-199/{len(body)}"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="out/a.bin", IfNoneMatch=put["ETag"])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="out/a.bin", IfMatch='"0123"')
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    # A wrong Content-MD5 is refused, and nothing changed.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="out/a.bin", Body=b"other",
                      ContentMD5=base64.b64encode(hashlib.md5(b"else").digest()).decode())
    assert e.value.response["Error"]["Code"] == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key="out/a.bin")["Body"].read() == body


def png(width, height, comment=b""):
    """A real PNG (one grey row repeated), made with zlib alone; `comment` in a tEXt chunk makes it larger."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    text = chunk(b"tEXt", b"Comment\0" + comment) if comment else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + text + chunk(b"IEND", b""))


def test_image_metadata_is_extracted_and_stored_with_the_object(front, remote, bucket):
    image = png(64, 48)
    s3 = s3_client(front)
    s3.put_object(Bucket=bucket, Key="img.png", Body=image)
    wait_for_remote(remote, bucket, "img.png", image)
    assert in_remote(remote, bucket, "img.png")["Metadata"]["kiln-media"] == "png 64x48"
    assert s3.head_object(Bucket=bucket, Key="img.png")["Metadata"] == {}
    s3.put_object(Bucket=bucket, Key="text", Body=b"not an image")
    wait_for_remote(remote, bucket, "text", b"not an image")
    assert "kiln-media" not in in_remote(remote, bucket, "text")["Metadata"]


def test_a_shadow_bucket_shows_outside_readers_a_new_version_at_once(remote):
    """OFC's synchronous shadow placeholder, as a bucket setting: before a cached write is acknowledged, the
    backing store gets an empty object carrying the new version and the `kiln-shadow` mark. An outside reader
    right after the PUT sees the placeholder or the payload, never the version it replaced; kiln's readers see
    the payload."""
    shadowed = f"s-{uuid.uuid4().hex[:12]}"
    front = start_front(remote, "--object-cache-shadow", shadowed)
    try:
        s3 = s3_client(front)
        s3.create_bucket(Bucket=shadowed)
        outside = remote.client()
        old = outside.put_object(Bucket=shadowed, Key="k", Body=b"old version")
        for i in range(5):
            body = f"new version {i}".encode() * 100
            put = s3.put_object(Bucket=shadowed, Key="k", Body=body)
            seen = outside.head_object(Bucket=shadowed, Key="k")
            assert seen["ETag"] != old["ETag"]
            if seen["ContentLength"] == 0:
                assert seen["Metadata"]["kiln-shadow"] == "pending"
            else:
                assert seen["ETag"] == put["ETag"]
            assert s3.get_object(Bucket=shadowed, Key="k")["Body"].read() == body
            assert "kiln-shadow" not in s3.head_object(Bucket=shadowed, Key="k")["Metadata"]
            wait_for_remote(remote, shadowed, "k", body)
            old = outside.head_object(Bucket=shadowed, Key="k")
            assert "kiln-shadow" not in old["Metadata"]
        assert metric(front, "shadows") == 5 and metric(front, "shadow_errors") == 0
    finally:
        front.cleanup()


def test_a_miss_reads_the_remote_once_then_hits(front, remote, bucket):
    body = os.urandom(64 * KiB)
    put = remote.client().put_object(Bucket=bucket, Key="in/x", Body=body, ContentType="text/csv")
    s3 = s3_client(front)
    misses, hits = metric(front, "misses"), metric(front, "hits")
    for _ in range(3):
        got = s3.get_object(Bucket=bucket, Key="in/x")
        assert got["Body"].read() == body
        assert got["ETag"] == put["ETag"] and got["ContentType"] == "text/csv"
    assert metric(front, "misses") == misses + 1
    assert metric(front, "hits") == hits + 2
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="in/absent")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=f"absent-{uuid.uuid4().hex[:8]}", Key="k", Body=b"x")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


def test_overwrites_reach_the_remote_in_order_latest_last(front, remote, bucket):
    s3 = s3_client(front)
    versions = [f"version {i}".encode() * 100 for i in range(30)]
    for body in versions:
        s3.put_object(Bucket=bucket, Key="hot", Body=body)
        assert s3.get_object(Bucket=bucket, Key="hot")["Body"].read() == body
    wait_for_remote(remote, bucket, "hot", versions[-1])
    # It stays at the latest: no older version lands after it.
    time.sleep(0.5)
    assert in_remote(remote, bucket, "hot")["Body"].read() == versions[-1]


def test_a_newer_version_in_the_remote_is_not_overwritten(front, remote, bucket):
    """The version check: the remote holds a version above the one being written back (as
    another kiln's cache would leave it), so the write-back skips it."""
    s3 = s3_client(front)
    newer = b"written by a later writer"
    remote.client().put_object(Bucket=bucket, Key="v", Body=newer, Metadata={"kiln-version": str(2 ** 62)})
    superseded = metric(front, "superseded")
    s3.put_object(Bucket=bucket, Key="v", Body=b"older")
    wait_until(lambda: metric(front, "superseded") == superseded + 1, 30, "the write-back to be skipped")
    assert in_remote(remote, bucket, "v")["Body"].read() == newer


def test_listings_deletes_and_copies_see_acknowledged_writes(front, remote, bucket):
    s3 = s3_client(front)
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"l/{i}", Body=b"x" * i)
    # A listing right after the writes has them all (it waits for their write-back).
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="l/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [(f"l/{i}", i) for i in range(5)]
    s3.put_object(Bucket=bucket, Key="l/0", Body=b"rewritten")
    s3.copy_object(Bucket=bucket, Key="l/copy", CopySource={"Bucket": bucket, "Key": "l/0"})
    assert s3.get_object(Bucket=bucket, Key="l/copy")["Body"].read() == b"rewritten"
    s3.put_object(Bucket=bucket, Key="l/1", Body=b"short-lived")
    s3.delete_object(Bucket=bucket, Key="l/1")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="l/1")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "l/2"}, {"Key": "l/3"}]})
    time.sleep(0.5)
    remote_keys = [o["Key"] for o in remote.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert remote_keys == ["l/0", "l/4", "l/copy"]


def test_unsigned_requests_go_to_the_remote_whose_acls_decide(front, remote, bucket):
    """The cache answers an unsigned request from nothing it holds: it is re-issued unsigned to
    the remote, whose ACLs decide, and a write made so replaces what the cache held."""
    import boto3
    import botocore.config
    from s3_harness import s3_endpoint
    s3 = s3_client(front)
    s3.put_object(Bucket=bucket, Key="public", Body=b"for all", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private", Body=b"mine")
    s3.get_object(Bucket=bucket, Key="private")["Body"].read()  # now in the cache
    unsigned = boto3.client("s3", endpoint_url=s3_endpoint(front), region_name="us-east-1",
                            config=botocore.config.Config(signature_version=botocore.UNSIGNED,
                                                          retries={"max_attempts": 0}))
    assert unsigned.get_object(Bucket=bucket, Key="public")["Body"].read() == b"for all"
    for call in [lambda: unsigned.get_object(Bucket=bucket, Key="private"),
                 lambda: unsigned.list_objects_v2(Bucket=bucket)]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.put_object(Bucket=bucket, Key="private", Body=b"overwritten")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    assert len(unsigned.list_objects_v2(Bucket=bucket)["Contents"]) == 2
    unsigned.put_object(Bucket=bucket, Key="private", Body=b"overwritten")
    assert s3.get_object(Bucket=bucket, Key="private")["Body"].read() == b"overwritten"
    assert in_remote(remote, bucket, "private")["Body"].read() == b"overwritten"
    unsigned.delete_object(Bucket=bucket, Key="private")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["public"]


def test_large_objects_and_conditional_writes_go_to_the_remote(remote):
    front = start_front(remote, "--object-cache-max-object-kb", "64")
    try:
        s3 = s3_client(front)
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        big = os.urandom(100 * KiB)
        bypassed = metric(front, "bypassed")
        s3.put_object(Bucket=bucket, Key="big", Body=big)
        # Written through: the remote has it when the PUT returns.
        assert in_remote(remote, bucket, "big")["Body"].read() == big
        assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
        assert metric(front, "bytes") == 0
        s3.put_object(Bucket=bucket, Key="small", Body=b"s")
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket=bucket, Key="small", Body=b"t", IfNoneMatch="*")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == b"s"
        # The large PUT and the conditional one (the large GET is a miss that was not admitted).
        assert metric(front, "bypassed") >= bypassed + 2
    finally:
        front.cleanup()


def test_the_sweep_evicts_rarely_read_objects(remote):
    front = start_front(remote, "--object-cache-sweep-secs", "1", "--object-cache-min-reads", "3")
    try:
        s3 = s3_client(front)
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        for key in ("busy", "rare"):
            remote.client().put_object(Bucket=bucket, Key=key, Body=key.encode() * 1000)
        for _ in range(4):
            s3.get_object(Bucket=bucket, Key="busy")["Body"].read()
        s3.get_object(Bucket=bucket, Key="rare")["Body"].read()
        wait_until(lambda: metric(front, "evictions") >= 1, 10, "the sweep")
        misses = metric(front, "misses")
        assert s3.get_object(Bucket=bucket, Key="busy")["Body"].read() == b"busy" * 1000
        assert metric(front, "misses") == misses
        assert s3.get_object(Bucket=bucket, Key="rare")["Body"].read() == b"rare" * 1000
        assert metric(front, "misses") == misses + 1
    finally:
        front.cleanup()


def test_capacity_evicts_least_recently_used_and_never_dirty_data(remote):
    front = start_front(remote, "--object-cache-mb", "1")
    try:
        s3, bucket, bodies = put_objects(front, 6, 300 * KiB)
        assert metric(front, "bytes") <= 1024 * KiB
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            wait_for_remote(remote, bucket, key, body)
    finally:
        front.cleanup()


@pytest.mark.parametrize("restart_cache", ["on", "off"])
def test_acknowledged_writes_survive_kill_9_while_the_remote_is_down(remote, restart_cache):
    """Restarted with the cache on, or off: a kiln whose cache's journal still holds writes drains it either way."""
    front = start_front(remote)
    data_dir = front.data_dir
    try:
        s3 = s3_client(front)
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="before", Body=b"b")
        wait_for_remote(remote, bucket, "before", b"b")
        remote.store.stop()
        bodies = {f"k{i}": os.urandom(50 * KiB) for i in range(20)}
        for key, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        # Acknowledged and readable, though the remote has none of them.
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
        wait_until(lambda: metric(front, "writeback_errors") > 0, 30, "failing write-backs")
        assert metric(front, "dirty_bytes") == 20 * 50 * KiB
        front.kill9()
        front = start_front(remote, "--object-cache", restart_cache, data_dir=data_dir)
        # Restarted with the remote still down: the journal's versions are served from memory.
        assert any("20 acknowledged writes to write back from the journal" in line for line in front.output)
        if restart_cache == "off":
            assert any("object cache off, draining its journal" in line for line in front.output)
        s3 = s3_client(front)
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
        remote.store.start()
        for key, body in bodies.items():
            wait_for_remote(remote, bucket, key, body, timeout=90)
        wait_until(lambda: metric(front, "dirty_bytes") == 0, 30, "the journal to drain")
    finally:
        if remote.store.proc is None or remote.store.proc.poll() is not None:
            remote.store.start()
        front.cleanup()


def test_a_failing_write_back_is_surfaced_and_bounds_what_waits_for_it(remote):
    """The backing store refuses every write-back (it is down): the write stays acknowledged
    and readable, kiln status and /metrics name it, and a listing, a delete or a copy that must
    wait for it answers ServiceUnavailable within the bound instead of hanging."""
    front = start_front(remote, "--object-cache-writeback-wait-secs", "2")
    try:
        s3 = s3_client(front)
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        remote.store.stop()
        s3.put_object(Bucket=bucket, Key="stuck", Body=b"kept")
        wait_until(lambda: metric(front, "writebacks_failing") == 1, 30, "the failing write-back")
        status = json.loads(front.cli("--json", "status").stdout)["objectCache"]
        [failing] = status["failing"]
        assert (failing["bucket"], failing["key"]) == (bucket, "stuck")
        assert failing["attempts"] >= 1 and failing["error"]
        assert status["dirty_bytes"] == 4
        assert f"{bucket}/\"stuck\"" in front.cli("status").stdout
        waits = {
            "list": lambda: s3.list_objects_v2(Bucket=bucket),
            "delete": lambda: s3.delete_object(Bucket=bucket, Key="stuck"),
            "copy": lambda: s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "stuck"}),
        }
        # Each answers once its wait is over (the client would time out on a hang, after 60 s).
        for what, call in waits.items():
            with pytest.raises(botocore.exceptions.ClientError) as raised:
                call()
            error = raised.value.response["Error"]
            assert error["Code"] == "ServiceUnavailable", (what, error)
            assert '"stuck"' in error["Message"] and bucket in error["Message"], (what, error)
            assert "within 2s" in error["Message"], (what, error)
            assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        # Kept: readable through kiln, and written back once the store is back.
        assert s3.get_object(Bucket=bucket, Key="stuck")["Body"].read() == b"kept"
        remote.store.start()
        wait_for_remote(remote, bucket, "stuck", b"kept", timeout=90)
        wait_until(lambda: metric(front, "writebacks_failing") == 0, 30, "the write-back to recover")
        assert json.loads(front.cli("--json", "status").stdout)["objectCache"]["failing"] == []
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["stuck"]
        s3.delete_object(Bucket=bucket, Key="stuck")
    finally:
        if remote.store.proc is None or remote.store.proc.poll() is not None:
            remote.store.start()
        front.cleanup()


READER = """
import time
import boto3

s3 = boto3.client("s3")


def handler(event, context):
    time.sleep(event.get("delay_ms", 0) / 1000)
    for _ in range(event.get("reads", 1)):
        body = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    end = time.perf_counter() + event["spin_ms"] / 1000
    while time.perf_counter() < end:
        pass
    time.sleep(event.get("after_ms", 0) / 1000)
    return {"bytes": len(body)}
"""


def deploy_readers(front, remote, tmp_path, names, *flags):
    """Deploys READER as each of `names` and puts 30 objects of 8 KiB (o/00 … o/29) into a new bucket in the
    remote; returns invoke(name, **event), which invokes with that bucket and returns the result."""
    from s3_harness import vendored_boto3
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(READER)
    vendored_boto3(code)
    for name in names:
        front.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", str(code),
                  "--memory", "256", "--timeout", "60", *flags, timeout=180)
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3_client(front).create_bucket(Bucket=bucket)
    outside = remote.client()
    for i in range(30):
        outside.put_object(Bucket=bucket, Key=f"o/{i:02d}", Body=os.urandom(8 * KiB))
    lam = front.client(read_timeout=120)

    def invoke(name, **event):
        response = lam.invoke(FunctionName=name, Payload=json.dumps({"bucket": bucket, **event}))
        assert "FunctionError" not in response
        return json.loads(response["Payload"].read())
    invoke.bucket = bucket
    return invoke


def test_objects_passed_through_still_inform_the_models(remote, tmp_path):
    """An object the cache does not hold (here: larger than it caches) is still known to the models once it passed
    through: its size from the backing store's answer, and its media metadata as kiln writes it back, or else from
    the image header in its first bytes as they streamed past. The next invocation that names it is predicted with
    them."""
    front = start_front(remote, "--object-cache-max-object-kb", "4")
    try:
        invoke = deploy_readers(front, remote, tmp_path, ["oc-through", "oc-photo"])
        outside = remote.client()
        # As kiln's write-back leaves an image: its format and size in the reserved metadata.
        outside.put_object(Bucket=invoke.bucket, Key="img", Body=os.urandom(8 * KiB),
                           Metadata={"kiln-media": "png 640x480"})
        # An image someone else wrote: nothing but its bytes.
        photo = png(320, 200, comment=b"x" * (8 * KiB))
        outside.put_object(Bucket=invoke.bucket, Key="photo.png", Body=photo)

        def features(name):
            models = front.signed_request("GET", "/kiln/v1/status", "", {}).json()["memoryModels"]
            return next(m["features"] for m in models if m["function"] == name)

        hits = metric(front, "hits")
        media = {"object.size", "object.width", "object.height", "object.format"}
        for name, key, size in [("oc-through", "img", 8 * KiB), ("oc-photo", "photo.png", len(photo))]:
            assert invoke(name, key=key, spin_ms=0) == {"bytes": size}
            assert not any(f.startswith("object.") for f in features(name)), "the first invocation knew nothing"
            invoke(name, key=key, spin_ms=0)
            assert media <= set(features(name)), (name, features(name))
        assert metric(front, "hits") == hits, "too large to cache: every read passed through"
    finally:
        front.cleanup()


def test_admission_follows_each_functions_cache_benefit(remote, tmp_path):
    """OFC's cache-benefit model: a function that spends most of its time on the object store gets its objects
    cached; one that spends it computing does not, once its model has learnt that (from kiln's own timing of its
    object-store calls, priced at what the backing store takes)."""
    front = start_front(remote)
    try:
        invoke = deploy_readers(front, remote, tmp_path, ["oc-io", "oc-cpu"])

        def read(name, key, spin_ms):
            return invoke(name, key=key, spin_ms=spin_ms)

        # Each invocation reads an object it has not read before (a miss at the backing store, 5 ms away). The
        # names are of one length, so the requests differ in nothing a model could split on.
        for i in range(12):
            read("oc-io", f"o/{i:02d}", 0)
            read("oc-cpu", f"o/{i + 12}", 300)
        models = {m["function"]: m for m in
                  front.signed_request("GET", "/kiln/v1/status", "", {}).json()["memoryModels"]}
        benefit = {name: m.get("cacheBenefit") for name, m in models.items()}
        assert benefit["oc-io"] >= 0.8 and benefit["oc-cpu"] <= 0.2, benefit
        # The first invocation in each new instance also paid for its SDK client's first call: not a sample.
        text = front.signed_request("GET", "/metrics", "", {}).text
        for name in ("oc-io", "oc-cpu"):
            pattern = rf'^kiln_cold_starts_total{{function="{name}",[^}}]*}} (\d+)'
            colds = sum(int(n) for n in re.findall(pattern, text, re.M))
            assert colds >= 1 and models[name]["cacheBenefitSamples"] == 12 - colds, (name, colds, models[name])

        # Learnt: what the I/O-bound function reads is cached (its second read hits) ...
        hits, misses = metric(front, "hits"), metric(front, "misses")
        read("oc-io", "o/24", 0)
        read("oc-io", "o/24", 0)
        assert (metric(front, "hits"), metric(front, "misses")) == (hits + 1, misses + 1)
        # ... and what the compute-bound one reads is not: both of its reads go to the backing store.
        bypassed = metric(front, "bypassed")
        read("oc-cpu", "o/25", 300)
        read("oc-cpu", "o/25", 300)
        assert metric(front, "hits") == hits + 1
        assert metric(front, "bypassed") == bypassed + 2
        # The models see an input object's size once kiln has seen the object (the second read of o/24 knew
        # it), and never its name.
        features = {m["function"]: m["features"] for m in
                    front.signed_request("GET", "/kiln/v1/status", "", {}).json()["memoryModels"]}
        assert "object.size" in features["oc-io"] and "arg.key" not in features["oc-io"], features
    finally:
        front.cleanup()


@pytest.mark.parametrize("prebake", ["off", "deploy"])
def test_admission_is_decided_per_invocation(remote, tmp_path, prebake):
    """One function whose invocations differ: each invocation's objects follow its own benefit prediction, even while
    another invocation of the function, predicted otherwise, runs beside it: in a sandbox of its own (no snapshot),
    or as another fork of the same zygote, behind the same listener (told apart by the process that holds the
    connection)."""
    front = start_front(remote)
    try:
        invoke = deploy_readers(front, remote, tmp_path, ["oc-mixed"], "--prebake", prebake)
        if prebake == "deploy":
            wait_ready(front, "oc-mixed")

        def read(key, spin_ms, **more):
            return invoke("oc-mixed", **{"key": key, "spin_ms": spin_ms, "delay_ms": 0, "reads": 1, **more})

        # The model learns that invocations that read and return benefit, and those that compute do not.
        for i in range(12):
            read(f"o/{i:02d}", 0)
            read(f"o/{i + 12}", 300)
        bypassed, misses = metric(front, "bypassed"), metric(front, "misses")
        # A computing invocation waits, then reads its object twice; meanwhile a reading one runs in another instance:
        # it reads at once and stays in flight while the first one reads, and it is the function's latest decision.
        slow = threading.Thread(target=read, args=("o/26", 300), kwargs={"delay_ms": 1200, "reads": 2})
        slow.start()
        time.sleep(0.3)
        read("o/27", 0, after_ms=2500)
        slow.join(timeout=60)
        # Two instances served them: forks of one zygote behind one listener, or sandboxes of their own.
        paths = [i["start_path"] for i in node_status(front)["instances"] if i["function"] == "oc-mixed"]
        assert len(paths) >= 2 and (set(paths) == {"hot"}) == (prebake == "deploy"), paths
        assert metric(front, "misses") == misses + 1, "the reading invocation's object is admitted"
        assert metric(front, "bypassed") == bypassed + 2, "the computing invocation's reads are not"
    finally:
        front.cleanup()


STAGES = """
import time

import boto3

s3 = boto3.client("s3")


def halve(event, context):
    data = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    if event.get("fail"):
        raise ValueError("stage one failed")
    time.sleep(event.get("hold_s", 0))
    key = f"tmp/{event['id']}"
    s3.put_object(Bucket=event["bucket"], Key=key, Body=data[: len(data) // 2])
    return {"bucket": event["bucket"], "key": key, "id": event["id"]}


def finish(event, context):
    data = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    out = f"out/{event['id']}"
    s3.put_object(Bucket=event["bucket"], Key=out, Body=data.upper())
    return {"out": out, "intermediate": event["key"], "bytes": len(data)}
"""


def deploy_stages(front, tmp_path, source=STAGES, handlers=(("seq-halve", "app.halve"), ("seq-finish", "app.finish"))):
    from s3_harness import vendored_boto3
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(source)
    vendored_boto3(code)
    for name, handler in handlers:
        front.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", handler, "--code", str(code),
                  "--memory", "256", "--timeout", "60", timeout=180)


def test_a_sequence_keeps_its_intermediate_objects_in_memory_only(remote, tmp_path):
    """OpenWhisk-style sequences, with OFC's handling of their objects: what the intermediate stage writes is
    read by the next stage from memory, never written back, and gone when the run ends; the final output is
    written back, then dropped from the cache."""
    front = start_front(remote)
    try:
        deploy_stages(front, tmp_path)
        shown = front.cli("sequence", "pipe", "seq-halve", "seq-finish").stdout
        assert "pipe: seq-halve → seq-finish" in shown
        assert "pipe" in front.cli("sequence").stdout
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3 = s3_client(front)
        s3.create_bucket(Bucket=bucket)
        remote.client().put_object(Bucket=bucket, Key="in/a", Body=b"abcdefgh" * 512)
        lam = front.client(read_timeout=120)
        ephemeral, misses = metric(front, "ephemeral_writes"), metric(front, "misses")
        written = metric(front, "written_back")

        response = lam.invoke(FunctionName="pipe", Payload=json.dumps({"bucket": bucket, "key": "in/a", "id": "r1"}))
        assert "FunctionError" not in response
        assert json.loads(response["Payload"].read()) == {"out": "out/r1", "intermediate": "tmp/r1",
                                                          "bytes": 2048}
        assert metric(front, "ephemeral_writes") == ephemeral + 1
        # The intermediate object is gone with the run, and the backing store never had it.
        with pytest.raises(s3.exceptions.NoSuchKey):
            s3.get_object(Bucket=bucket, Key="tmp/r1")
        assert in_remote(remote, bucket, "tmp/r1") is None
        # The final output reached the backing store and left the cache: reading it is a miss.
        wait_for_remote(remote, bucket, "out/r1", b"ABCDEFGH" * 256)
        # The remote has it a moment before kiln hears so and drops its copy.
        wait_until(lambda: metric(front, "written_back") > written, what="the write-back to be recorded")
        misses_before = metric(front, "misses")
        assert s3.get_object(Bucket=bucket, Key="out/r1")["Body"].read() == b"ABCDEFGH" * 256
        assert metric(front, "misses") == misses_before + 1 > misses

        # A stage's error ends the run: the caller gets it, nothing of the run stays.
        response = lam.invoke(FunctionName="pipe", Payload=json.dumps(
            {"bucket": bucket, "key": "in/a", "id": "r2", "fail": True}))
        assert response["FunctionError"] == "Unhandled"
        assert json.loads(response["Payload"].read())["errorMessage"] == "stage one failed"
        # Names are shared with functions.
        taken = front.cli("sequence", "seq-halve", "seq-finish", check=False)
        assert taken.returncode != 0 and "seq-halve" in taken.stderr
        front.cli("sequence", "pipe", "--rm")
        with pytest.raises(lam.exceptions.ResourceNotFoundException):
            lam.invoke(FunctionName="pipe", Payload=b"{}")
    finally:
        front.cleanup()


SCATTER_GATHER = """
import boto3

s3 = boto3.client("s3")


def scatter(event, context):
    parts = event["prefix"]
    # A listing that begins before the parts exist and goes on after.
    opening = s3.list_objects_v2(Bucket=event["bucket"], Prefix=parts, MaxKeys=1)
    for name in event["names"]:
        s3.put_object(Bucket=event["bucket"], Key=parts + name, Body=name.encode() * 100)
    first = parts + event["names"][0]
    s3.copy_object(Bucket=event["bucket"], Key=parts + "z-copy", CopySource={"Bucket": event["bucket"], "Key": first},
                   MetadataDirective="REPLACE", ContentType="text/x-copied")
    rest = s3.list_objects_v2(Bucket=event["bucket"], Prefix=parts, ContinuationToken=opening["NextContinuationToken"])
    return {**event, "first": [o["Key"] for o in opening["Contents"]], "rest": [o["Key"] for o in rest["Contents"]]}


def gather(event, context):
    bucket, parts = event["bucket"], event["prefix"]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=parts, PaginationConfig={"PageSize": 2})
    listed = [o for page in pages for o in page.get("Contents", [])]
    v1 = []
    marker = ""
    while True:
        page = s3.list_objects(Bucket=bucket, Prefix=parts, Marker=marker, MaxKeys=2)
        v1 += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        marker = v1[-1]
    top = s3.list_objects_v2(Bucket=bucket, Prefix=parts, Delimiter="/")
    by_marker, marker = [], ""
    while True:
        page = s3.list_objects(Bucket=bucket, Prefix=parts, Delimiter="/", Marker=marker, MaxKeys=1)
        by_marker += [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextMarker"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key=event["out"] + "-part")
    part = s3.upload_part_copy(Bucket=bucket, Key=event["out"] + "-part", UploadId=upload["UploadId"], PartNumber=1,
                               CopySource={"Bucket": bucket, "Key": parts + "z-copy"}, CopySourceRange="bytes=0-49")
    s3.complete_multipart_upload(Bucket=bucket, Key=event["out"] + "-part", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1,
                                                             "ETag": part["CopyPartResult"]["ETag"]}]})
    copied = s3.head_object(Bucket=bucket, Key=parts + "z-copy")["ContentType"]
    out = s3.copy_object(Bucket=bucket, Key=event["out"], CopySource={"Bucket": bucket, "Key": parts + "z-copy"})
    read = {}
    for o in listed:
        got = s3.get_object(Bucket=bucket, Key=o["Key"])
        assert got["ETag"] == o["ETag"] and got["ContentLength"] == o["Size"], (o, got)
        read[o["Key"]] = len(got["Body"].read())
    return {"v2": [o["Key"] for o in listed], "v1": v1, "read": read, "copied": copied, "by_marker": by_marker,
            "first": event["first"], "rest": event["rest"],
            "out": out["CopyObjectResult"]["ETag"],
            "top": [o["Key"] for o in top.get("Contents", [])],
            "dirs": [p["Prefix"] for p in top.get("CommonPrefixes", [])]}
"""


def test_a_later_stage_lists_what_an_earlier_one_wrote(remote, tmp_path):
    """A MapReduce-style sequence: the first stage writes its parts, the next lists the prefix and reads what it
    finds. The intermediate parts are only in memory, yet listings through kiln show them beside the backing
    store's objects, in order, page by page (v2 with tokens, v1 with markers, with a delimiter, URL-encoded as
    boto3 asks), with the ETags and sizes a GET answers; once the run is over they are in no listing. A copy of
    one is another intermediate in the first stage, and the final output, written back, in the last; a part copied
    from one goes into the backing store's multipart upload."""
    front = start_front(remote)
    try:
        deploy_stages(front, tmp_path, SCATTER_GATHER, (("seq-scatter", "app.scatter"), ("seq-gather", "app.gather")))
        front.cli("sequence", "mapreduce", "seq-scatter", "seq-gather")
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3_client(front).create_bucket(Bucket=bucket)
        stored = ["parts/r1/b", "parts/r1/b+%", "parts/r1/d/9", "parts/r1/f"]
        for key in stored:
            remote.client().put_object(Bucket=bucket, Key=key, Body=b"stored")
        names = ["a", "c", "d/1", "e+1 x", "g", "h/2"]
        lam = front.client(read_timeout=120)
        ephemeral = metric(front, "ephemeral_writes")

        response = lam.invoke(FunctionName="mapreduce", Payload=json.dumps(
            {"bucket": bucket, "prefix": "parts/r1/", "names": names, "out": "out/r1"}))
        got = json.loads(response["Payload"].read())
        assert "FunctionError" not in response, got
        names.append("z-copy")
        everything = sorted(stored + ["parts/r1/" + n for n in names])
        assert got["v2"] == everything, got
        assert got["v1"] == everything, got
        sizes = {k: 6 if k in stored else len(k.rsplit("/r1/", 1)[1]) * 100 for k in everything}
        assert got["read"] == {**sizes, "parts/r1/z-copy": 100}
        top = ["parts/r1/a", "parts/r1/b", "parts/r1/b+%", "parts/r1/c", "parts/r1/e+1 x", "parts/r1/f",
               "parts/r1/g", "parts/r1/z-copy"]
        assert got["top"] == top, got
        assert got["dirs"] == ["parts/r1/d/", "parts/r1/h/"], got
        # Page by page with v1's NextMarker, one key or common prefix at a time.
        assert got["by_marker"] == sorted(top + ["parts/r1/d/", "parts/r1/h/"]), got
        # The listing that began before the parts were written went on from where it was, with them.
        assert got["first"] == ["parts/r1/b"] and got["rest"] == [k for k in everything if k > "parts/r1/b"], got
        assert got["copied"] == "text/x-copied"
        assert got["out"] == '"%s"' % hashlib.md5(b"a" * 100).hexdigest()
        assert metric(front, "ephemeral_writes") == ephemeral + len(names)
        wait_for_remote(remote, bucket, "out/r1", b"a" * 100)
        assert in_remote(remote, bucket, "out/r1-part")["Body"].read() == b"a" * 50
        assert in_remote(remote, bucket, "out/r1")["ContentType"] == "text/x-copied"

        # The run is over: its parts are in no listing, through kiln or of the backing store.
        outside = s3_client(front).list_objects_v2(Bucket=bucket, Prefix="parts/")
        assert [o["Key"] for o in outside["Contents"]] == stored
        everything_stored = [o["Key"] for o in remote.client().list_objects_v2(Bucket=bucket)["Contents"]]
        assert everything_stored == ["out/r1", "out/r1-part", *stored]
    finally:
        front.cleanup()


RESUMED = """
import json
import uuid

import boto3

s3 = boto3.client("s3")


def mark(event, context):
    key = f"tmp/{event['id']}"
    nonce = uuid.uuid4().hex
    s3.put_object(Bucket=event["bucket"], Key=key, Body=nonce.encode() * 10 + b"." * event.get("pad", 0))
    return {**event, "key": key, "nonce": nonce}


def flaky(event, context):
    data = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read().decode()
    flag = f"flags/{event['id']}"
    try:
        first = s3.get_object(Bucket=event["bucket"], Key=flag)["Body"].read().decode()
    except s3.exceptions.NoSuchKey:
        s3.put_object(Bucket=event["bucket"], Key=flag, Body=event["nonce"].encode())
        raise RuntimeError("the first attempt fails")
    out = {"same_input": first == event["nonce"], "read": data.startswith(event["nonce"] * 10)}
    s3.put_object(Bucket=event["bucket"], Key=f"out/{event['id']}", Body=json.dumps(out).encode())
    return out
"""


def wait_queue_drained(front):
    """Waits until the async queue is empty: its last run ended (and dropped its intermediates)."""
    wait_until(lambda: front.signed_request("GET", "/kiln/v1/status", "", {}).json()["asyncQueueDepth"] == 0,
               what="the queued run to end")


def run_resumed(front, remote, tmp_path, run_id, **event):
    """Deploys RESUMED as sequence `resumed`, queues one run of it in a new bucket, and waits for the output of its
    retry; returns the bucket, that output, and how many intermediate writes the run made."""
    deploy_stages(front, tmp_path, RESUMED, (("seq-mark", "app.mark"), ("seq-flaky", "app.flaky")))
    front.cli("sequence", "resumed", "seq-mark", "seq-flaky")
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3_client(front).create_bucket(Bucket=bucket)
    ephemeral = metric(front, "ephemeral_writes")
    response = front.client(read_timeout=120).invoke(
        FunctionName="resumed", InvocationType="Event", Payload=json.dumps({"bucket": bucket, "id": run_id, **event}))
    assert response["StatusCode"] == 202
    out = f"out/{run_id}"
    wait_until(lambda: in_remote(remote, bucket, out) is not None, 60, "the retried run's output")
    wait_queue_drained(front)
    return bucket, json.loads(in_remote(remote, bucket, out)["Body"].read()), metric(front, "ephemeral_writes") - ephemeral


def test_a_retried_event_resumes_its_sequence_at_the_stage_that_failed(remote, tmp_path):
    """A queued sequence whose second stage fails once: the retry runs that stage again, with the input it had,
    and the intermediate object the first stage wrote is still there for it (the first stage does not run again,
    so its random output is the same); then the run ends and its intermediates go."""
    front = start_front(remote)
    try:
        bucket, out, intermediate_writes = run_resumed(front, remote, tmp_path, "q1")
        assert out == {"same_input": True, "read": True}
        assert intermediate_writes == 1, "the first stage ran once"
        s3 = s3_client(front)
        with pytest.raises(s3.exceptions.NoSuchKey):
            s3.get_object(Bucket=bucket, Key="tmp/q1")
        assert in_remote(remote, bucket, "tmp/q1") is None
        text = front.signed_request("GET", "/metrics", "", {}).text
        assert re.search(r'^kiln_async_events_total\{outcome="retried"\} 1$', text, re.M), text
    finally:
        front.cleanup()


def test_a_run_too_large_to_keep_for_its_retry_starts_over(remote, tmp_path):
    """Kept runs' intermediates take at most a quarter of the cache: a run whose intermediate is larger is not
    kept for its retry, which runs the whole sequence again (the first stage's output differs), and nothing of
    either run stays in memory."""
    front = start_front(remote, "--object-cache-mb", "1")
    try:
        _, out, intermediate_writes = run_resumed(front, remote, tmp_path, "big", pad=300 * KiB)
        assert out == {"same_input": False, "read": True}
        assert intermediate_writes == 2, "the first stage ran again"
        wait_until(lambda: metric(front, "bytes") < 300 * KiB, what="both runs' intermediates to go")
    finally:
        front.cleanup()


def test_sequences_run_as_events_and_nest(remote, tmp_path):
    """A sequence invoked as an Event is queued durably and runs like a synchronous one, intermediates in memory
    only; a sequence may name other sequences, which run in its place, and none may lead back to itself."""
    front = start_front(remote)
    try:
        deploy_stages(front, tmp_path)
        front.cli("sequence", "halves", "seq-halve")
        shown = front.cli("sequence", "nested", "halves", "seq-finish").stdout
        assert "nested: halves → seq-finish" in shown
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3 = s3_client(front)
        s3.create_bucket(Bucket=bucket)
        remote.client().put_object(Bucket=bucket, Key="in/a", Body=b"abcdefgh" * 512)
        lam = front.client(read_timeout=120)
        ephemeral = metric(front, "ephemeral_writes")

        response = lam.invoke(FunctionName="nested", Payload=json.dumps({"bucket": bucket, "key": "in/a", "id": "n1"}))
        assert json.loads(response["Payload"].read()) == {"out": "out/n1", "intermediate": "tmp/n1", "bytes": 2048}

        response = lam.invoke(FunctionName="nested", InvocationType="Event",
                              Payload=json.dumps({"bucket": bucket, "key": "in/a", "id": "e1"}))
        assert response["StatusCode"] == 202
        wait_for_remote(remote, bucket, "out/e1", b"ABCDEFGH" * 256, timeout=60)
        # The run ends (and drops its intermediate) after its last stage wrote, and then leaves the queue.
        wait_queue_drained(front)
        assert metric(front, "ephemeral_writes") == ephemeral + 2
        for run in ("n1", "e1"):
            assert in_remote(remote, bucket, f"tmp/{run}") is None
            with pytest.raises(s3.exceptions.NoSuchKey):
                s3.get_object(Bucket=bucket, Key=f"tmp/{run}")

        # A cycle is refused, directly or through another sequence.
        for stages in (["nested"], ["halves"]):
            refused = front.cli("sequence", "halves", *stages, check=False)
            assert refused.returncode != 0 and "leads back to itself" in refused.stderr, refused.stderr
        # A nested sequence deleted later: the outer one answers that it is gone.
        front.cli("sequence", "halves", "--rm")
        with pytest.raises(lam.exceptions.ResourceNotFoundException) as e:
            lam.invoke(FunctionName="nested", Payload=b"{}")
        assert "halves" in str(e.value)
    finally:
        front.cleanup()


def test_concurrent_runs_keep_their_own_intermediates(remote, tmp_path):
    """Two runs of one sequence at once: their first stages are two forks of one zygote, behind one listener, and
    each one's intermediate object is still its own run's, in memory only."""
    front = start_front(remote)
    try:
        deploy_stages(front, tmp_path)
        front.cli("sequence", "pipe", "seq-halve", "seq-finish")
        bucket = f"c-{uuid.uuid4().hex[:12]}"
        s3_client(front).create_bucket(Bucket=bucket)
        remote.client().put_object(Bucket=bucket, Key="in/a", Body=b"abcdefgh" * 512)
        lam = front.client(read_timeout=120)
        wait_ready(front, "seq-halve")
        lam.invoke(FunctionName="pipe", Payload=json.dumps({"bucket": bucket, "key": "in/a", "id": "warm"}))
        ephemeral, writes = metric(front, "ephemeral_writes"), metric(front, "writes")
        answers = {}

        def run(run_id):
            response = lam.invoke(FunctionName="pipe", Payload=json.dumps(
                {"bucket": bucket, "key": "in/a", "id": run_id, "hold_s": 1.5}))
            answers[run_id] = json.loads(response["Payload"].read())

        threads = [threading.Thread(target=run, args=(r,)) for r in ("c1", "c2")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert answers == {r: {"out": f"out/{r}", "intermediate": f"tmp/{r}", "bytes": 2048} for r in ("c1", "c2")}
        halves = [i for i in node_status(front)["instances"] if i["function"] == "seq-halve"]
        assert len(halves) == 2 and all(i["start_path"] == "hot" for i in halves), halves
        assert metric(front, "ephemeral_writes") == ephemeral + 2
        assert metric(front, "writes") == writes + 2, "only the final outputs are written back"
        for r in ("c1", "c2"):
            wait_for_remote(remote, bucket, f"out/{r}", b"ABCDEFGH" * 256)
            assert in_remote(remote, bucket, f"tmp/{r}") is None
    finally:
        front.cleanup()
