"""Durability of the object store: an acknowledged upload survives `kill -9`, an upload cut
short is never visible, and what a crash leaves behind is deleted at the next start."""

import hashlib
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import botocore.exceptions
import pytest

from s3_harness import object_files, s3_client, start_partial_upload, wait_until

MiB = 1024 * 1024


def all_keys(s3, bucket):
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_acknowledged_puts_survive_kill9(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="durable")
    rng = random.Random(7)
    expected = {}
    for i in range(40):
        body = rng.randbytes(rng.choice([0, 1, 1000, 200_000, 700_000]))
        s3.put_object(Bucket="durable", Key=f"k{i:03}", Body=body, Metadata={"i": str(i)})
        expected[f"k{i:03}"] = body
    s3.put_object(Bucket="durable", Key="k000", Body=b"overwritten")
    expected["k000"] = b"overwritten"
    s3.delete_object(Bucket="durable", Key="k001")
    del expected["k001"]
    parts = [rng.randbytes(5 * MiB), b"end"]
    upload = s3.create_multipart_upload(Bucket="durable", Key="multi")["UploadId"]
    etags = [s3.upload_part(Bucket="durable", Key="multi", UploadId=upload, PartNumber=n, Body=p)["ETag"]
             for n, p in enumerate(parts, start=1)]
    s3.complete_multipart_upload(Bucket="durable", Key="multi", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    expected["multi"] = b"".join(parts)

    server.kill9()
    server.start()
    s3 = s3_client(server)
    assert all_keys(s3, "durable") == sorted(expected)
    for key, body in expected.items():
        got = s3.get_object(Bucket="durable", Key=key)
        assert got["Body"].read() == body, key
    assert s3.head_object(Bucket="durable", Key="k005")["Metadata"] == {"i": "5"}
    tmp, data = object_files(server)
    assert tmp == [] and len(data) == len(expected)


def test_what_kiln_records_of_objects_survives_kill9(fresh_kiln):
    """A completed upload (for a repeated CompleteMultipartUpload), an object's parts, storage
    class and ACL, and a bucket's ACL are committed with the object."""
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="recorded", ACL="public-read")
    upload = s3.create_multipart_upload(Bucket="recorded", Key="multi", StorageClass="STANDARD_IA",
                                        ACL="public-read")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket="recorded", Key="multi", UploadId=upload,
                                                      PartNumber=n, Body=body)["ETag"]}
             for n, body in enumerate([b"a" * (5 * MiB), b"end"], start=1)]
    done = s3.complete_multipart_upload(Bucket="recorded", Key="multi", UploadId=upload,
                                        MultipartUpload={"Parts": parts})

    server.kill9()
    server.start()
    s3 = s3_client(server)
    again = s3.complete_multipart_upload(Bucket="recorded", Key="multi", UploadId=upload,
                                         MultipartUpload={"Parts": parts})
    assert again["ETag"] == done["ETag"]
    part = s3.get_object(Bucket="recorded", Key="multi", PartNumber=2)
    assert part["Body"].read() == b"end" and part["PartsCount"] == 2
    assert part["StorageClass"] == "STANDARD_IA"
    public = "http://acs.amazonaws.com/groups/global/AllUsers"
    for acl in [s3.get_object_acl(Bucket="recorded", Key="multi"), s3.get_bucket_acl(Bucket="recorded")]:
        assert public in [g["Grantee"].get("URI") for g in acl["Grants"]]


def test_kill9_during_concurrent_puts_loses_only_unacknowledged_ones(fresh_kiln):
    """Whenever the kill lands: every acknowledged PUT is there, whole; every other key is
    either absent or whole (never torn)."""
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="racing")
    bodies = {f"r{i:03}": hashlib.sha256(str(i).encode()).digest() * (1000 * (i % 7 + 1)) for i in range(200)}
    acked = set()
    enough = threading.Event()

    def put(key):
        try:
            s3_client(server).put_object(Bucket="racing", Key=key, Body=bodies[key])
        except Exception:
            return
        acked.add(key)
        if len(acked) >= 30:
            enough.set()

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(put, key) for key in bodies]
        assert enough.wait(120), "no PUT was acknowledged"
        server.kill9()
        for f in futures:
            f.result()
    acknowledged = set(acked)

    server.start()
    s3 = s3_client(server)
    present = set(all_keys(s3, "racing"))
    assert acknowledged <= present
    for key in present:
        assert s3.get_object(Bucket="racing", Key=key)["Body"].read() == bodies[key], key
    tmp, data = object_files(server)
    assert tmp == [] and len(data) == len(present)


def test_torn_upload_is_never_visible(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="torn")
    s3.put_object(Bucket="torn", Key="existing", Body=b"version one")
    sockets = [
        start_partial_upload(server, "put_object", {"Bucket": "torn", "Key": "new"}, total=4 * MiB, sent=MiB),
        start_partial_upload(server, "put_object", {"Bucket": "torn", "Key": "existing"}, total=2 * MiB,
                             sent=MiB // 2),
    ]
    # Both uploads are on disk, in progress, when kiln dies.
    wait_until(lambda: len(object_files(server)[0]) == 2, what="two uploads in progress")
    server.kill9()
    for sock in sockets:
        sock.close()

    server.start()
    s3 = s3_client(server)
    assert all_keys(s3, "torn") == ["existing"]
    assert s3.get_object(Bucket="torn", Key="existing")["Body"].read() == b"version one"
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="torn", Key="new")
    tmp, data = object_files(server)
    assert tmp == [] and len(data) == 1


def test_kill9_during_multipart_upload(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="parts")
    upload = s3.create_multipart_upload(Bucket="parts", Key="big")["UploadId"]
    first = os.urandom(5 * MiB)
    etag1 = s3.upload_part(Bucket="parts", Key="big", UploadId=upload, PartNumber=1, Body=first)["ETag"]
    sock = start_partial_upload(server, "upload_part", {"Bucket": "parts", "Key": "big", "UploadId": upload,
                                                        "PartNumber": 2}, total=3 * MiB, sent=MiB)
    wait_until(lambda: len(object_files(server)[0]) == 1, what="the part upload in progress")
    server.kill9()
    sock.close()

    server.start()
    s3 = s3_client(server)
    parts = s3.list_parts(Bucket="parts", Key="big", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [(1, etag1, 5 * MiB)]
    second = os.urandom(3 * MiB)
    etag2 = s3.upload_part(Bucket="parts", Key="big", UploadId=upload, PartNumber=2, Body=second)["ETag"]
    s3.complete_multipart_upload(Bucket="parts", Key="big", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag1}, {"PartNumber": 2, "ETag": etag2}]})
    assert s3.get_object(Bucket="parts", Key="big")["Body"].read() == first + second
    tmp, data = object_files(server)
    assert tmp == [] and len(data) == 1


def test_orphans_are_collected_at_start(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="orphans")
    s3.put_object(Bucket="orphans", Key="kept", Body=b"kept")
    server.kill9()
    root = Path(server.data_dir) / "objects"
    # What a crash between fsync and rename, or between rename and commit, leaves behind.
    (root / "tmp" / "0123456789abcdef0123456789abcdef").write_bytes(b"half an upload")
    (root / "data" / "ab" / "ab23456789abcdef0123456789abcdef").write_bytes(b"never committed")
    server.start()
    s3 = s3_client(server)
    assert s3.get_object(Bucket="orphans", Key="kept")["Body"].read() == b"kept"
    tmp, data = object_files(server)
    assert tmp == [] and len(data) == 1
    assert any("removed files of uploads that never completed" in line for line in server.output)
