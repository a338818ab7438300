"""kiln's object store through boto3: buckets, objects, ranges, conditional requests,
copies, listings and virtual-host addressing."""

import hashlib
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid

import botocore.exceptions
import pytest

from s3_harness import bucket, error_code, keys_of, s3, s3_client, s3_endpoint, send, status

MiB = 1024 * 1024


# --- buckets -------------------------------------------------------------------------------


def test_bucket_lifecycle(s3):
    name = f"t-{uuid.uuid4().hex[:12]}"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    s3.create_bucket(Bucket=name)
    s3.head_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert error_code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_objects_v2(Bucket=name)


def test_creating_ones_own_bucket_again_answers_as_s3_in_us_east_1(s3):
    # S3's legacy behaviour in us-east-1 (kiln's default region): 200, and the bucket's ACL
    # reset to the one asked for; elsewhere BucketAlreadyOwnedByYou.
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ACL="public-read")
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    assert s3.meta.region_name == "us-east-1"
    s3.create_bucket(Bucket=name)
    grants = s3.get_bucket_acl(Bucket=name)["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]
    assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"x"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)


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


def test_every_error_carries_s3s_message(s3, bucket):
    """S3 sends a Message with every error code; clients print it."""
    calls = {
        "NoSuchKey": lambda: s3.get_object(Bucket=bucket, Key="absent"),
        "NoSuchBucket": lambda: s3.list_objects_v2(Bucket="no-such-bucket-here"),
        "NoSuchUpload": lambda: s3.list_parts(Bucket=bucket, Key="k", UploadId="nope"),
    }
    for code, call in calls.items():
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == code
        assert e.value.response["Error"]["Message"], (code, e.value.response["Error"])


def test_listings_read_requests_as_s3_does(s3, bucket):
    for key in ["a b/1", "a b/2", "c"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    # An empty continuation token or delimiter is absent; the token is echoed back, not the
    # delimiter.
    empty = s3.list_objects_v2(Bucket=bucket, ContinuationToken="", Delimiter="")
    assert [o["Key"] for o in empty["Contents"]] == ["a b/1", "a b/2", "c"]
    assert "Delimiter" not in empty and "CommonPrefixes" not in empty
    assert empty["ContinuationToken"] == "" and empty["IsTruncated"] is False
    # V2 names owners only when asked; v1 always does.
    assert all("Owner" not in o for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert all(o["Owner"]["ID"] for o in s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"])
    assert all(o["Owner"]["ID"] for o in s3.list_objects(Bucket=bucket)["Contents"])
    # boto3 asks for encoding-type=url and decodes what S3 encodes: v1 leaves its own Prefix as
    # sent (boto3 decodes it in v2 only).
    v1 = s3.list_objects(Bucket=bucket, Prefix="a b/")
    assert v1["Prefix"] == "a b/"
    assert [o["Key"] for o in v1["Contents"]] == ["a b/1", "a b/2"]
    assert s3.list_objects_v2(Bucket=bucket, Prefix="a b/")["Prefix"] == "a b/"
    raw = s3.list_objects(Bucket=bucket, Prefix="a b/", EncodingType="url")
    assert raw["Prefix"] == "a b/" and raw["Contents"][0]["Key"] == "a%20b/1"


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
    # If-None-Match with an ETag: refused while the object has it, done once it has another.
    third = s3.head_object(Bucket=bucket, Key="w")["ETag"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"4", IfNoneMatch=third)
    assert status(e) == 412 and error_code(e) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="w", Body=b"4", IfNoneMatch=first["ETag"])
    assert s3.get_object(Bucket=bucket, Key="w")["Body"].read() == b"4"
    # If-Match on a key with no object: 404, as S3 answers.
    s3.delete_object(Bucket=bucket, Key="w")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"5", IfMatch="*")
    assert status(e) == 404 and error_code(e) == "NoSuchKey"
    s3.put_object(Bucket=bucket, Key="w", Body=b"5", IfNoneMatch=third)


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
    assert not rest.get("CommonPrefixes"), "past the marker's common prefix"
    # Paged by NextMarker one entry at a time: each key and common prefix once, and an end.
    seen, marker = [], ""
    for _ in range(10):
        page = s3.list_objects(Bucket=bucket, Delimiter="/", Marker=marker, MaxKeys=1)
        seen += [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextMarker"]
    assert seen == ["a", "b/", "c"]


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
