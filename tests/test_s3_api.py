"""kiln's object store through boto3: every S3 call the SDKs and the AWS CLI use, their error
codes, checksums, ranges, conditional requests, multipart uploads, presigned URLs,
virtual-host addressing and who may sign."""

import base64
import hashlib
import http.client
import io
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zlib

import boto3
import botocore.config
import botocore.exceptions
import pytest
import requests
from boto3.s3.transfer import TransferConfig

from s3_harness import function_credentials, s3_client, s3_endpoint, start_partial_upload

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def s3(kiln):
    return s3_client(kiln)


@pytest.fixture
def bucket(s3):
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def status(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def keys_of(s3, bucket, **kwargs):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, **kwargs).get("Contents", [])]


# --- buckets -------------------------------------------------------------------------------


def test_bucket_lifecycle(s3):
    name = f"t-{uuid.uuid4().hex[:12]}"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    s3.create_bucket(Bucket=name)
    s3.head_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert error_code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_objects_v2(Bucket=name)


@pytest.mark.parametrize("name", ["ab", "Upper-Case", "under_score", "a" * 64, "-dash", "192.168.1.1"])
def test_invalid_bucket_names_are_refused(s3, name):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert error_code(e) == "InvalidBucketName"
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_missing_bucket_errors(s3):
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.put_object(Bucket="no-such-bucket-here", Key="k", Body=b"x")
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.get_object(Bucket="no-such-bucket-here", Key="k")
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.create_multipart_upload(Bucket="no-such-bucket-here", Key="k")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket="no-such-bucket-here")
    assert error_code(e) == "NoSuchBucket"


def test_errors_are_s3_xml(kiln, bucket):
    """An unsigned request gets S3's XML error body, not JSON."""
    url = f"{s3_endpoint(kiln)}/{bucket}/k"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url)
    body = e.value.read().decode()
    assert e.value.code == 403
    assert body.startswith("<?xml") and "<Code>AccessDenied</Code>" in body


# --- objects -------------------------------------------------------------------------------


def test_put_get_head_delete(s3, bucket):
    body = b"hello kiln"
    put = s3.put_object(Bucket=bucket, Key="dir/hello.txt", Body=body, ContentType="text/plain",
                        Metadata={"owner": "kiln", "n": "1"}, CacheControl="max-age=60")
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/hello.txt")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/plain"
    assert got["ContentLength"] == len(body)
    assert got["Metadata"] == {"owner": "kiln", "n": "1"}
    assert got["CacheControl"] == "max-age=60"
    assert got["ETag"] == put["ETag"]
    head = s3.head_object(Bucket=bucket, Key="dir/hello.txt")
    assert head["ContentLength"] == len(body) and head["ETag"] == put["ETag"]
    assert head["LastModified"] == got["LastModified"]
    s3.delete_object(Bucket=bucket, Key="dir/hello.txt")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="dir/hello.txt")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="dir/hello.txt")
    assert status(e) == 404
    # Deleting what is not there succeeds, as on S3.
    s3.delete_object(Bucket=bucket, Key="dir/hello.txt")


def test_overwrite_and_default_content_type(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    s3.put_object(Bucket=bucket, Key="k", Body=b"two!")
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b"two!"
    assert got["ContentType"] == "binary/octet-stream"


def test_empty_and_unusual_keys(s3, bucket):
    keys = ["empty", "sp ace/and+plus", "percent%2F", "unicodé/ключ/鍵", "trailing/", "a//b", "../up"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode() if key != "empty" else b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    for key in keys[1:]:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()
    # botocore asks for URL-encoded keys in listings and decodes them.
    assert sorted(keys_of(s3, bucket)) == sorted(keys)


def test_key_too_long(s3, bucket):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert error_code(e) == "KeyTooLongError"
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"x")


def test_large_object_streams(s3, bucket):
    data = bytes(range(256)) * (12 * MiB // 256)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data


# --- ranges and conditional requests -------------------------------------------------------


def test_ranges(s3, bucket):
    data = bytes(range(256)) * 4096  # 1 MiB, more than kiln reads in one step
    s3.put_object(Bucket=bucket, Key="r", Body=data)
    for header, expected, content_range in [
        ("bytes=0-9", data[:10], f"bytes 0-9/{len(data)}"),
        ("bytes=1000-", data[1000:], f"bytes 1000-{len(data) - 1}/{len(data)}"),
        ("bytes=-5", data[-5:], f"bytes {len(data) - 5}-{len(data) - 1}/{len(data)}"),
        ("bytes=300000-700000", data[300000:700001], f"bytes 300000-700000/{len(data)}"),
        (f"bytes=10-{len(data) + 100}", data[10:], f"bytes 10-{len(data) - 1}/{len(data)}"),
    ]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == content_range
        assert got["Body"].read() == expected
    head = s3.head_object(Bucket=bucket, Key="r", Range="bytes=0-99")
    assert head["ContentLength"] == 100
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(data)}-")
    assert error_code(e) == "InvalidRange" and status(e) == 416


def test_conditional_reads(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="c", Body=b"v1")
    etag = put["ETag"]
    modified = s3.head_object(Bucket=bucket, Key="c")["LastModified"]
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"v1"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0123"')
    assert status(e) == 412 and error_code(e) == "PreconditionFailed"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert status(e) == 304
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert status(e) == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfNoneMatch='"0123"')["Body"].read() == b"v1"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=modified)
    assert status(e) == 304
    import datetime
    earlier = modified - datetime.timedelta(days=1)
    later = modified + datetime.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=earlier)["Body"].read() == b"v1"
    assert s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=later)["Body"].read() == b"v1"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=earlier)
    assert status(e) == 412


def test_conditional_writes(s3, bucket):
    first = s3.put_object(Bucket=bucket, Key="w", Body=b"1", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"2", IfNoneMatch="*")
    assert status(e) == 412
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"2", IfMatch='"0123"')
    assert status(e) == 412
    s3.put_object(Bucket=bucket, Key="w", Body=b"3", IfMatch=first["ETag"])
    assert s3.get_object(Bucket=bucket, Key="w")["Body"].read() == b"3"


# --- checksums and integrity ---------------------------------------------------------------


def reflected_crc(data, poly, width):
    """The CRCs S3 uses that Python lacks (CRC32C, CRC64NVME): reflected, all-ones in and out."""
    mask = (1 << width) - 1
    crc = mask
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (poly if crc & 1 else 0)
    return (crc ^ mask).to_bytes(width // 8, "big")


DIGESTS = {
    "CRC32": lambda d: zlib.crc32(d).to_bytes(4, "big"),
    "CRC32C": lambda d: reflected_crc(d, 0x82F63B78, 32),
    "CRC64NVME": lambda d: reflected_crc(d, 0x9A6C9329AC4BC9B5, 64),
    "SHA1": lambda d: hashlib.sha1(d).digest(),
    "SHA256": lambda d: hashlib.sha256(d).digest(),
}


def test_reference_crcs():
    assert DIGESTS["CRC32C"](b"123456789").hex() == "e3069283"
    assert DIGESTS["CRC64NVME"](b"123456789").hex() == "ae8b14860a799888"


@pytest.mark.parametrize("algorithm", list(DIGESTS))
def test_flexible_checksums_round_trip(s3, bucket, algorithm):
    body = b"checksummed " * 100
    value = base64.b64encode(DIGESTS[algorithm](body)).decode()
    put = s3.put_object(Bucket=bucket, Key=algorithm, Body=body, **{f"Checksum{algorithm}": value})
    assert put[f"Checksum{algorithm}"] == value
    head = s3.head_object(Bucket=bucket, Key=algorithm, ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == value
    assert s3.get_object(Bucket=bucket, Key=algorithm)["Body"].read() == body
    wrong = base64.b64encode(DIGESTS[algorithm](b"something else")).decode()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key=algorithm, Body=b"new", **{f"Checksum{algorithm}": wrong})
    assert error_code(e) == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key=algorithm)["Body"].read() == body


def test_sdk_computed_checksum(s3, bucket):
    body = b"sdk checksum " * 1000
    put = s3.put_object(Bucket=bucket, Key="sha", Body=body, ChecksumAlgorithm="SHA256")
    assert put["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
    got = s3.get_object(Bucket=bucket, Key="sha", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == put["ChecksumSHA256"] and got["Body"].read() == body


def test_default_sdk_checksum_is_crc32(s3, bucket):
    """Today's botocore sends x-amz-checksum-crc32 on every upload; kiln checks and keeps it."""
    body = b"default checksum"
    s3.put_object(Bucket=bucket, Key="d", Body=body)
    got = s3.head_object(Bucket=bucket, Key="d", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == crc32_b64(body)


def test_wrong_checksum_is_bad_digest_and_writes_nothing(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep", Body=b"original")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="keep", Body=b"replacement", ChecksumCRC32=crc32_b64(b"other"))
    assert error_code(e) == "BadDigest"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="new", Body=b"data", ChecksumSHA256=base64.b64encode(b"\0" * 32).decode())
    assert error_code(e) == "BadDigest"
    bad_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="new", Body=b"data", ContentMD5=bad_md5)
    assert error_code(e) == "BadDigest"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="new", Body=b"data", ContentMD5="not-an-md5")
    assert error_code(e) == "InvalidDigest"
    assert s3.get_object(Bucket=bucket, Key="keep")["Body"].read() == b"original"
    assert keys_of(s3, bucket) == ["keep"]


def raw_request(kiln, method, path, body=b"", headers=None):
    """A request signed by botocore but sent by hand, to tamper with it after signing."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    endpoint = s3_endpoint(kiln)
    request = AWSRequest(method=method, url=endpoint + path, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(kiln.access_key, kiln.secret_key), "s3", kiln.region).add_auth(request)
    return request.prepare()


def send(prepared, body=None):
    url = urllib.parse.urlsplit(prepared.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request(prepared.method, url.path + (f"?{url.query}" if url.query else ""),
                 body=prepared.body if body is None else body, headers=dict(prepared.headers))
    response = conn.getresponse()
    return response.status, response.read().decode(errors="replace")


def test_payload_hash_mismatch_is_refused(kiln, s3, bucket):
    prepared = raw_request(kiln, "PUT", f"/{bucket}/tampered", body=b"signed body")
    code, body = send(prepared, body=b"other body!")
    assert code == 400 and "XAmzContentSHA256Mismatch" in body
    assert keys_of(s3, bucket) == []


def aws_chunked_put(kiln, path, data, trailer_value):
    """A PUT the way the JS SDK streams one: aws-chunked, unsigned payload, CRC32 in a trailer."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class TrailerAuth(S3SigV4Auth):
        def payload(self, request):
            return "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

    half = len(data) // 2
    body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in (data[:half], data[half:]))
    body += b"0\r\n" + f"x-amz-checksum-crc32:{trailer_value}\r\n\r\n".encode()
    request = AWSRequest(method="PUT", url=s3_endpoint(kiln) + path, data=body, headers={
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32", "x-amz-sdk-checksum-algorithm": "CRC32"})
    TrailerAuth(Credentials(kiln.access_key, kiln.secret_key), "s3", kiln.region).add_auth(request)
    return send(request.prepare())


def test_trailing_checksums(kiln, s3, bucket):
    data = b"streamed with a trailer " * 1000
    code, body = aws_chunked_put(kiln, f"/{bucket}/good", data, crc32_b64(data))
    assert code == 200, body
    got = s3.get_object(Bucket=bucket, Key="good", ChecksumMode="ENABLED")
    assert got["Body"].read() == data and got["ChecksumCRC32"] == crc32_b64(data)
    code, body = aws_chunked_put(kiln, f"/{bucket}/bad", data, crc32_b64(b"not the data"))
    assert code == 400 and "<Code>BadDigest</Code>" in body
    assert keys_of(s3, bucket) == ["good"]


def test_short_body_is_refused(kiln, s3, bucket):
    sock = start_partial_upload(kiln, "put_object", {"Bucket": bucket, "Key": "short"}, total=10, sent=5)
    sock.shutdown(socket.SHUT_WR)
    response = sock.recv(65536).decode(errors="replace")
    sock.close()
    assert response.startswith("HTTP/1.1 400") and "IncompleteBody" in response
    assert keys_of(s3, bucket) == []


def test_oversized_bodies_get_entity_too_large(fresh_kiln):
    server = fresh_kiln(extra_args=["--s3-max-object-mb", "1"])
    s3 = s3_client(server)
    s3.create_bucket(Bucket="limits")
    s3.put_object(Bucket="limits", Key="fits", Body=b"x" * MiB)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="limits", Key="too-big", Body=b"x" * (MiB + 1))
    assert error_code(e) == "EntityTooLarge"
    assert keys_of(s3, "limits") == ["fits"]
    upload = s3.create_multipart_upload(Bucket="limits", Key="mp")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket="limits", Key="mp", UploadId=upload, PartNumber=1, Body=b"x" * (2 * MiB))
    assert error_code(e) == "EntityTooLarge"
    assert s3.list_parts(Bucket="limits", Key="mp", UploadId=upload).get("Parts", []) == []


# --- copy and batch delete -----------------------------------------------------------------


def test_copy_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"source", ContentType="text/x-src", Metadata={"a": "1"},
                  ChecksumAlgorithm="SHA256")
    etag = s3.head_object(Bucket=bucket, Key="src")["ETag"]
    out = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "src"})
    assert out["CopyObjectResult"]["ETag"] == etag
    copy = s3.get_object(Bucket=bucket, Key="copy", ChecksumMode="ENABLED")
    assert copy["Body"].read() == b"source"
    assert copy["ContentType"] == "text/x-src" and copy["Metadata"] == {"a": "1"}
    assert copy["ChecksumSHA256"]
    s3.copy_object(Bucket=bucket, Key="replaced", CopySource=f"{bucket}/src", MetadataDirective="REPLACE",
                   ContentType="text/y", Metadata={"b": "2"})
    replaced = s3.head_object(Bucket=bucket, Key="replaced")
    assert replaced["ContentType"] == "text/y" and replaced["Metadata"] == {"b": "2"}
    # A copy is independent of its source.
    s3.delete_object(Bucket=bucket, Key="src")
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"source"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="copy", CopySource=f"{bucket}/copy")
    assert error_code(e) == "InvalidRequest"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource=f"{bucket}/copy", CopySourceIfMatch='"0123"')
    assert status(e) == 412
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.copy_object(Bucket=bucket, Key="x", CopySource=f"{bucket}/missing")
    # Metadata of an object changed in place, the AWS CLI's way.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource=f"{bucket}/copy", MetadataDirective="REPLACE",
                   Metadata={"c": "3"})
    assert s3.head_object(Bucket=bucket, Key="copy")["Metadata"] == {"c": "3"}


def test_delete_objects(s3, bucket):
    for key in ["a", "b", "c"]:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}, {"Key": "zz"}]})
    assert sorted(d["Key"] for d in out["Deleted"]) == ["a", "b", "zz"]
    assert keys_of(s3, bucket) == ["c"]
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "c"}], "Quiet": True})
    assert not out.get("Deleted") and not out.get("Errors")
    assert keys_of(s3, bucket) == []


# --- listings ------------------------------------------------------------------------------


def test_list_prefix_delimiter_and_pages(s3, bucket):
    keys = ["a.txt", "photos/2023/x.jpg", "photos/2024/y.jpg", "photos/2024/z.jpg", "photos/top.jpg", "zeta"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b".")
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["a.txt", "zeta"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["photos/"]
    assert top["KeyCount"] == 3
    photos = s3.list_objects_v2(Bucket=bucket, Prefix="photos/", Delimiter="/")
    assert [o["Key"] for o in photos["Contents"]] == ["photos/top.jpg"]
    assert [p["Prefix"] for p in photos["CommonPrefixes"]] == ["photos/2023/", "photos/2024/"]
    assert keys_of(s3, bucket, Prefix="photos/2024/") == ["photos/2024/y.jpg", "photos/2024/z.jpg"]
    assert keys_of(s3, bucket, StartAfter="photos/2024/y.jpg") == ["photos/2024/z.jpg", "photos/top.jpg", "zeta"]
    first = s3.list_objects_v2(Bucket=bucket, MaxKeys=2)
    assert first["IsTruncated"] and len(first["Contents"]) == 2
    second = s3.list_objects_v2(Bucket=bucket, MaxKeys=2, ContinuationToken=first["NextContinuationToken"])
    assert [o["Key"] for o in second["Contents"]] == keys[2:4]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 1})
    assert [o["Key"] for page in pages for o in page.get("Contents", [])] == keys
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_objects_v2(Bucket=bucket, ContinuationToken="garbage!")
    assert error_code(e) == "InvalidArgument"
    entry = s3.list_objects_v2(Bucket=bucket, Prefix="zeta")["Contents"][0]
    assert entry["Size"] == 1 and entry["ETag"] == f'"{hashlib.md5(b".").hexdigest()}"'


def test_list_objects_v1(s3, bucket):
    for key in ["a", "b/1", "b/2", "c"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b".")
    pages = s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 1})
    assert [o["Key"] for page in pages for o in page.get("Contents", [])] == ["a", "b/1", "b/2", "c"]
    grouped = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert [o["Key"] for o in grouped["Contents"]] == ["a"]
    assert grouped["IsTruncated"] and grouped["NextMarker"] == "b/"
    rest = s3.list_objects(Bucket=bucket, Delimiter="/", Marker=grouped["NextMarker"])
    assert [o["Key"] for o in rest["Contents"]] == ["c"]


# --- multipart uploads ---------------------------------------------------------------------


def test_streamed_multipart_upload_with_transfer_manager(s3, bucket):
    data = (b"0123456789abcdef" * (1 << 16)) * 13  # 13 MiB: three 5 MiB parts
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    s3.upload_fileobj(io.BytesIO(data), bucket, "mp", Config=config)
    head = s3.head_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"')
    out = io.BytesIO()
    s3.download_fileobj(bucket, "mp", out, Config=config)
    assert out.getvalue() == data


def test_manual_multipart_with_composite_checksum(s3, bucket):
    parts_data = [b"a" * (5 * MiB), b"b" * (5 * MiB), b"tail"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="m", ContentType="text/m", Metadata={"x": "y"},
                                        ChecksumAlgorithm="CRC32")
    upload_id = upload["UploadId"]
    assert upload["ChecksumAlgorithm"] == "CRC32"
    parts = []
    for n, data in enumerate(parts_data, start=1):
        out = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload_id, PartNumber=n, Body=data,
                             ChecksumAlgorithm="CRC32")
        assert out["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert out["ChecksumCRC32"] == crc32_b64(data)
        parts.append({"PartNumber": n, "ETag": out["ETag"], "ChecksumCRC32": out["ChecksumCRC32"]})
    listed = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2] and listed["IsTruncated"]
    rest = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload_id, PartNumberMarker=listed["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in rest["Parts"]] == [3]
    assert rest["Parts"][0]["Size"] == 4
    # Objects appear only when completed.
    assert keys_of(s3, bucket) == []
    done = s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=upload_id, MultipartUpload={"Parts": parts})
    md5s = b"".join(hashlib.md5(d).digest() for d in parts_data)
    assert done["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"'
    crcs = b"".join(base64.b64decode(crc32_b64(d)) for d in parts_data)
    assert done["ChecksumCRC32"] == f"{crc32_b64(crcs)}-3"
    got = s3.get_object(Bucket=bucket, Key="m", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"".join(parts_data)
    assert got["ContentType"] == "text/m" and got["Metadata"] == {"x": "y"}
    assert got["ChecksumType"] == "COMPOSITE"
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.list_parts(Bucket=bucket, Key="m", UploadId=upload_id)


def test_full_object_crc_multipart(s3, bucket):
    parts_data = [b"x" * (5 * MiB), b"yz"]
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="f", ChecksumAlgorithm="CRC32",
                                           ChecksumType="FULL_OBJECT")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="f", UploadId=upload_id, PartNumber=n,
                                                      Body=d)["ETag"]}
             for n, d in enumerate(parts_data, start=1)]
    whole = b"".join(parts_data)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="f", UploadId=upload_id, MultipartUpload={"Parts": parts},
                                     ChecksumCRC32=crc32_b64(b"wrong"), ChecksumType="FULL_OBJECT")
    assert error_code(e) == "BadDigest"
    done = s3.complete_multipart_upload(Bucket=bucket, Key="f", UploadId=upload_id, MultipartUpload={"Parts": parts},
                                        ChecksumCRC32=crc32_b64(whole), ChecksumType="FULL_OBJECT")
    assert done["ChecksumCRC32"] == crc32_b64(whole)
    assert s3.get_object(Bucket=bucket, Key="f", ChecksumMode="ENABLED")["Body"].read() == whole


def test_multipart_errors_and_abort(s3, bucket):
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="e")["UploadId"]
    small = s3.upload_part(Bucket=bucket, Key="e", UploadId=upload_id, PartNumber=1, Body=b"small")
    last = s3.upload_part(Bucket=bucket, Key="e", UploadId=upload_id, PartNumber=2, Body=b"last")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=upload_id, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": small["ETag"]}, {"PartNumber": 2, "ETag": last["ETag"]}]})
    assert error_code(e) == "EntityTooSmall"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=upload_id, MultipartUpload={"Parts": [
            {"PartNumber": 2, "ETag": last["ETag"]}, {"PartNumber": 1, "ETag": small["ETag"]}]})
    assert error_code(e) == "InvalidPartOrder"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=upload_id, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]})
    assert error_code(e) == "InvalidPart"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="e", UploadId=upload_id, PartNumber=10001, Body=b"x")
    assert error_code(e) == "InvalidArgument"
    # A single small part is a valid upload.
    s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=upload_id, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": small["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="e")["Body"].read() == b"small"

    aborted = s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="gone", UploadId=aborted, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.upload_part(Bucket=bucket, Key="gone", UploadId=aborted, PartNumber=2, Body=b"x")
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    assert keys_of(s3, bucket) == ["e"]


def test_multipart_copy(s3, bucket):
    data = bytes(range(256)) * (6 * MiB // 256)
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.copy({"Bucket": bucket, "Key": "src"}, bucket, "dst", Config=config)
    head = s3.head_object(Bucket=bucket, Key="dst")
    assert head["ETag"].endswith('-2"')
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == data


# --- presigned URLs ------------------------------------------------------------------------


@pytest.mark.parametrize("signature_version", ["s3v4", None])
def test_presigned_urls(kiln, bucket, signature_version):
    """SigV4 URLs, and the SigV2 URLs boto3 still makes by default for us-east-1."""
    extra = {"signature_version": signature_version} if signature_version else {}
    s3 = s3_client(kiln, **extra)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=300)
    # requests sends no Content-Type for bytes (SigV2 signs it; urllib would add one).
    assert requests.put(put_url, data=b"presigned body", timeout=30).status_code == 200
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=300)
    assert urllib.request.urlopen(get_url).read() == b"presigned body"
    # Tampering with the URL breaks it.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(get_url.replace("/p?", "/q?"))
    assert e.value.code == 403


def test_expired_presigned_url(kiln, bucket):
    s3 = s3_client(kiln, signature_version="s3v4")
    s3.put_object(Bucket=bucket, Key="old", Body=b"x")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "old"}, ExpiresIn=1)
    time.sleep(2.5)  # not a timing assertion: the URL's validity ends after one second
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url)
    assert e.value.code == 403 and b"AccessDenied" in e.value.read()


# --- addressing ----------------------------------------------------------------------------


def test_virtual_host_style(kiln, bucket, monkeypatch):
    """BUCKET.localhost:PORT names the bucket; *.localhost resolves to loopback (RFC 6761), which
    this test does in-process because the machine's resolver may not."""
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    port = urllib.parse.urlsplit(s3_endpoint(kiln)).port
    s3 = s3_client(kiln, endpoint=f"http://localhost:{port}", s3={"addressing_style": "virtual"})
    seen = []
    s3.meta.events.register("before-send.s3", lambda request, **kw: seen.append(request.url))
    s3.put_object(Bucket=bucket, Key="vhost.txt", Body=b"virtual")
    assert seen[-1].startswith(f"http://{bucket}.localhost:{port}/")
    assert s3.get_object(Bucket=bucket, Key="vhost.txt")["Body"].read() == b"virtual"
    assert "vhost.txt" in keys_of(s3, bucket)
    path_style = s3_client(kiln, endpoint=f"http://localhost:{port}", s3={"addressing_style": "path"})
    assert path_style.get_object(Bucket=bucket, Key="vhost.txt")["Body"].read() == b"virtual"


# --- who may sign --------------------------------------------------------------------------


def test_wrong_keys_are_refused(kiln, bucket):
    wrong_secret = s3_client(kiln, secret_key="x" * 40)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        wrong_secret.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "SignatureDoesNotMatch"
    unknown = s3_client(kiln, access_key="AKIAUNKNOWNKEY000000")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unknown.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "InvalidAccessKeyId"
    anonymous = boto3.client("s3", endpoint_url=s3_endpoint(kiln), region_name="us-east-1",
                             config=botocore.config.Config(signature_version=botocore.UNSIGNED))
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anonymous.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "AccessDenied"


def test_lambda_scoped_signature_is_refused(kiln, bucket):
    """A signature made for another service (here: lambda) does not open the store."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url=f"{s3_endpoint(kiln)}/{bucket}?list-type=2",
                         headers={"x-amz-content-sha256": hashlib.sha256(b"").hexdigest()})
    SigV4Auth(Credentials(kiln.access_key, kiln.secret_key), "lambda", kiln.region).add_auth(request)
    code, body = send(request.prepare())
    assert code in (403, 501) and "<Error>" in body


def test_function_credentials_open_the_store_and_nothing_else(kiln, bucket):
    access_key, secret_key = function_credentials(kiln, "s3-scope-probe")
    fn_s3 = s3_client(kiln, access_key=access_key, secret_key=secret_key)
    fn_s3.put_object(Bucket=bucket, Key="from-function", Body=b"ok")
    assert fn_s3.get_object(Bucket=bucket, Key="from-function")["Body"].read() == b"ok"
    lam = boto3.client("lambda", endpoint_url=kiln.endpoint, region_name=kiln.region,
                       aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                       config=botocore.config.Config(retries={"max_attempts": 0}))
    with pytest.raises(botocore.exceptions.ClientError) as e:
        lam.list_functions()
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError):
        lam.invoke(FunctionName="anything", Payload=b"{}")
    # Another function's name with this secret does not verify.
    other_key, _ = function_credentials(kiln, "someone-else")
    impostor = s3_client(kiln, access_key=other_key, secret_key=secret_key)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        impostor.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "SignatureDoesNotMatch"
