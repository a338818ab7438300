"""Remote mode: a kiln that fronts another S3-compatible store (`--s3-backend`).

Two remotes: a second kiln started with `--store-only` in its own network namespace, reached
over a veth pair with 5 ms of netem delay each way (a WAN, as in OFC's remote storage); and
moto's S3 server (PyPI `moto[s3]`), a third-party implementation."""

import base64
import hashlib
import io
import os
import subprocess
import urllib.request
import uuid
import zlib
from dataclasses import dataclass

import boto3
import botocore
import botocore.config
import botocore.exceptions
import pytest
import requests
from boto3.s3.transfer import TransferConfig

from kiln_harness import Kiln
from s3_harness import (MotoServer, StoreOnlyKiln, WanLink, aws_chunked_put, function_credentials, s3_client,
                        s3_endpoint, signed_request)

from test_s3_js import run_checks

MiB = 1024 * 1024

# What moto 5.2.5 does differently from S3, found by these tests: its ListParts answer has a
# <ListPartsResponse> root where S3 has <ListPartsResult>, and GetBucketVersioning's a
# <GetBucketVersioningResponse> root where S3 has <VersioningConfiguration> (boto3 does not mind,
# aws-sdk-rust, which kiln uses to reach remotes, refuses them); and it neither checks nor stores flexible
# checksums, which the JS checks read back; a GET of a multipart object by part number answers
# the whole object, and GetObjectAttributes leaves a multipart object's ObjectParts out.
MOTO_QUIRKS = "moto's ListParts root element and missing checksum storage (see MOTO_QUIRKS)"


@dataclass
class Remote:
    kind: str
    endpoint: str
    access_key: str
    secret_key: str

    def client(self):
        return s3_client(endpoint=self.endpoint, access_key=self.access_key, secret_key=self.secret_key,
                         region="us-east-1")


@pytest.fixture(scope="module", params=["kiln-over-wan", "moto"])
def remote(request):
    if request.param == "moto":
        if not MotoServer.available():
            pytest.fail("moto_server is not installed: run scripts/setup-test-env.sh")
        moto = MotoServer().start()
        yield Remote("moto", moto.endpoint, moto.access_key, moto.secret_key)
        moto.stop()
        return
    with WanLink(f"ks3-{os.getpid() % 100000}", subnet_octet=os.getpid() % 250 + 1, delay_ms=5) as link:
        if link.netem:
            qdisc = subprocess.run(["tc", "qdisc", "show", "dev", link.host_if], capture_output=True,
                                   text=True).stdout
            assert "delay 5ms" in qdisc, qdisc
        store = StoreOnlyKiln(listen=f"{link.ns_ip}:9001", netns=link.name).start()
        try:
            assert store.endpoint == f"http://{link.ns_ip}:9001"
            endpoint = f"http://{link.expose(9001)}"
            yield Remote("kiln", endpoint, store.access_key, store.secret_key)
        finally:
            store.cleanup()


@pytest.fixture(scope="module")
def front(remote):
    # The remote as it is, without the object cache (tests/cache/test_object_cache.py has it).
    server = Kiln(extra_args=["--object-cache", "off", "--s3-backend", remote.endpoint,
                              "--s3-backend-access-key", remote.access_key,
                              "--s3-backend-secret-key", remote.secret_key]).start()
    yield server
    server.cleanup()


@pytest.fixture
def bucket(front):
    name = f"r-{uuid.uuid4().hex[:12]}"
    s3_client(front).create_bucket(Bucket=name)
    return name


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def keys(client, bucket, **kwargs):
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, **kwargs).get("Contents", [])]


def test_front_reports_its_backend(front, remote):
    assert any(f"fronting {remote.endpoint}" in line for line in front.output)


def test_objects_land_in_the_remote(front, remote, bucket):
    s3 = s3_client(front)
    body = b"through the front " * 100
    put = s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=body, ContentType="text/plain", Metadata={"m": "1"})
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    backend = remote.client()
    assert backend.get_object(Bucket=bucket, Key="dir/a.txt")["Body"].read() == body
    got = s3.get_object(Bucket=bucket, Key="dir/a.txt")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"m": "1"}
    ranged = s3.get_object(Bucket=bucket, Key="dir/a.txt", Range="bytes=8-10")
    assert ranged["Body"].read() == body[8:11] and ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.head_object(Bucket=bucket, Key="dir/a.txt")["ContentLength"] == len(body)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="dir/a.txt", IfNoneMatch=put["ETag"])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    # With the validators S3 sends on a 304.
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == put["ETag"]
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="dir/a.txt", IfMatch='"0123"')
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    s3.delete_object(Bucket=bucket, Key="dir/a.txt")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="dir/a.txt")
    assert keys(backend, bucket) == []


def test_errors_name_the_fronts_request(front, bucket):
    """An error the remote answered carries the front's request id in its XML and headers alike
    (as the request's client saw it), not the remote's."""
    request = signed_request(front, "GET", f"/{bucket}/missing")
    response = requests.get(request.url, headers=dict(request.headers), timeout=30)
    assert response.status_code == 404 and "<Code>NoSuchKey</Code>" in response.text
    request_id = response.headers["x-amz-request-id"]
    assert response.text.count("<RequestId>") == 1, response.text
    assert f"<RequestId>{request_id}</RequestId>" in response.text, response.text


def test_listings_and_batch_delete(front, bucket):
    s3 = s3_client(front)
    for key in ["a", "p/1", "p/2", "p/q/3", "z"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b".")
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["a", "z"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["p/"]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    assert [o["Key"] for page in pages for o in page.get("Contents", [])] == ["a", "p/1", "p/2", "p/q/3", "z"]
    s3.copy_object(Bucket=bucket, Key="copy", CopySource=f"{bucket}/a")
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"."
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in ["a", "p/1", "copy"]]})
    assert sorted(d["Key"] for d in out["Deleted"]) == ["a", "copy", "p/1"]
    assert keys(s3, bucket) == ["p/2", "p/q/3", "z"]


def test_versions_listing_through_the_front(front, remote, bucket):
    s3 = s3_client(front)
    for key in ["a", "p/1", "p/2", "z"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b".")
    listed = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed["Versions"]] == [
        ("a", "null", True), ("z", "null", True)]
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["p/"]
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == ["a", "p/1", "p/2", "z"]
    if remote.kind != "moto":  # see MOTO_QUIRKS
        assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)


def test_versioning_and_cors_through_the_front(front, remote, bucket):
    s3 = s3_client(front)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    second = s3.put_object(Bucket=bucket, Key="k", Body=b"two")["VersionId"]
    assert first != second
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=first)["Body"].read() == b"one"
    assert s3.head_object(Bucket=bucket, Key="k", VersionId=second)["VersionId"] == second
    marker = s3.delete_object(Bucket=bucket, Key="k")
    assert marker["DeleteMarker"] is True
    with pytest.raises(botocore.exceptions.ClientError) as gone:
        s3.get_object(Bucket=bucket, Key="k")
    assert gone.value.response["Error"]["Code"] == "NoSuchKey"
    assert gone.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    listed = s3.list_object_versions(Bucket=bucket)
    assert [v["VersionId"] for v in listed["Versions"]] == [second, first]
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker["VersionId"]]
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker["VersionId"])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
    copied = s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "k", "VersionId": first})
    assert copied["VersionId"] and s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"one"

    # CORS rules live in the remote; the front answers preflights from them.
    rules = [{"AllowedMethods": ["GET"], "AllowedOrigins": ["https://app.example"]}]
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    assert remote.client().get_bucket_cors(Bucket=bucket)["CORSRules"] == rules
    asked = {"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}
    preflight = requests.options(s3_endpoint(front) + f"/{bucket}/k", headers=asked)
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://app.example"
    refused = requests.options(s3_endpoint(front) + f"/{bucket}/k", headers={**asked, "Origin": "https://x"})
    assert refused.status_code == 403


def test_attributes_parts_and_uploads_through_the_front(front, remote, bucket):
    s3 = s3_client(front)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [upload_id]
    datas = [b"a" * (5 * MiB), b"tail"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=n,
                                                      Body=d)["ETag"]} for n, d in enumerate(datas, start=1)]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)
    attributes = s3.get_object_attributes(Bucket=bucket, Key="mp",
                                          ObjectAttributes=["ETag", "ObjectSize", "ObjectParts"])
    assert attributes["ObjectSize"] == 5 * MiB + 4 and attributes["ETag"] == done["ETag"].strip('"')
    if remote.kind != "moto":  # see MOTO_QUIRKS
        assert attributes["ObjectParts"]["TotalPartsCount"] == 2
        got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
        assert got["Body"].read() == b"tail" and got["PartsCount"] == 2


def test_acls_through_the_front(front, remote, bucket):
    """ACLs are the remote's: an unsigned request is re-issued unsigned, and the remote decides."""
    s3 = s3_client(front)
    s3.put_object(Bucket=bucket, Key="public", Body=b"x", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private", Body=b"y")
    uris = [g["Grantee"].get("URI") for g in s3.get_object_acl(Bucket=bucket, Key="public")["Grants"]]
    assert "http://acs.amazonaws.com/groups/global/AllUsers" in uris
    unsigned = boto3.client("s3", endpoint_url=s3_endpoint(front), region_name="us-east-1",
                            config=botocore.config.Config(signature_version=botocore.UNSIGNED,
                                                          retries={"max_attempts": 0}))
    assert unsigned.get_object(Bucket=bucket, Key="public")["Body"].read() == b"x"
    if remote.kind == "moto":
        return  # moto lets unsigned requests do anything: it enforces no ACL
    for call in [lambda: unsigned.get_object(Bucket=bucket, Key="private"),
                 lambda: unsigned.put_object(Bucket=bucket, Key="new", Body=b"z"),
                 lambda: unsigned.list_objects_v2(Bucket=bucket)]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "AccessDenied"
    # What the remote's ACL opens, it opens through the front too.
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    unsigned.put_object(Bucket=bucket, Key="new", Body=b"z")
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"z"
    assert sorted(o["Key"] for o in unsigned.list_objects_v2(Bucket=bucket)["Contents"]) == [
        "new", "private", "public"]
    unsigned.delete_object(Bucket=bucket, Key="new")
    assert keys(s3, bucket) == ["private", "public"]


def test_multipart_through_the_front(front, remote, bucket):
    s3 = s3_client(front)
    data = os.urandom(11 * MiB)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=3)
    s3.upload_fileobj(io.BytesIO(data), bucket, "mp", Config=config)
    assert s3.head_object(Bucket=bucket, Key="mp")["ETag"].endswith('-3"')
    assert remote.client().get_object(Bucket=bucket, Key="mp")["Body"].read() == data
    upload = s3.create_multipart_upload(Bucket=bucket, Key="manual")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="manual", UploadId=upload, PartNumber=1, Body=b"only part")
    if remote.kind != "moto":  # moto answers ListParts with a <ListPartsResponse> root: see MOTO_QUIRKS
        listed = s3.list_parts(Bucket=bucket, Key="manual", UploadId=upload)["Parts"]
        assert [(p["PartNumber"], p["ETag"]) for p in listed] == [(1, part["ETag"])]
    s3.complete_multipart_upload(Bucket=bucket, Key="manual", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="manual")["Body"].read() == b"only part"
    aborted = s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="gone", UploadId=aborted)
    assert e.value.response["Error"]["Code"] == "NoSuchUpload"


def test_errors_and_checksums_pass_through(front, remote, bucket):
    s3 = s3_client(front)
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="missing")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="no-such-bucket-here", Key="k")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"
    # kiln checks declared digests itself: whether the remote does or not, nothing is stored.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"data", ChecksumCRC32=crc32_b64(b"other"))
    assert e.value.response["Error"]["Code"] == "BadDigest"
    bad_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"data", ContentMD5=bad_md5)
    assert e.value.response["Error"]["Code"] == "BadDigest"
    # A checksum in an aws-chunked trailer never reaches the remote: the front checks it.
    data = b"trailer through the front " * 500
    code, body = aws_chunked_put(front, f"/{bucket}/trailed", data, crc32_b64(data))
    assert code == 200, body
    assert remote.client().get_object(Bucket=bucket, Key="trailed")["Body"].read() == data
    code, body = aws_chunked_put(front, f"/{bucket}/bad-trailer", data, crc32_b64(b"other"))
    assert code == 400 and "<Code>BadDigest</Code>" in body
    assert keys(remote.client(), bucket) == ["trailed"]


def test_presigned_urls_through_the_front(front, bucket):
    s3 = s3_client(front, signature_version="s3v4")
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=300)
    assert requests.put(put_url, data=b"presigned", timeout=30).status_code == 200
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=300)
    assert urllib.request.urlopen(get_url).read() == b"presigned"


def test_the_front_takes_its_own_keys_only(front, remote, bucket):
    access_key, secret_key = function_credentials(front, "remote-user")
    s3_client(front, access_key=access_key, secret_key=secret_key).put_object(Bucket=bucket, Key="fn", Body=b"x")
    backend_keys = s3_client(endpoint=s3_endpoint(front), access_key=remote.access_key,
                             secret_key=remote.secret_key)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        backend_keys.list_objects_v2(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_js_sdk_through_the_front(front, remote):
    if remote.kind == "moto":
        pytest.skip(MOTO_QUIRKS)
    result = run_checks(front, s3_endpoint(front), virtual=False)
    assert len(result["passed"]) == 13
