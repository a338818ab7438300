"""Bucket versioning, as S3 does it: `null` versions for objects written before versioning or
while it is Suspended, a version id on each PUT, copy and multipart completion once it is
Enabled, reads and deletes by `versionId`, delete markers, and ListObjectVersions with its
paging. Also run through the object cache, which passes every request on a versioned bucket
to the store."""

import botocore.exceptions
import pytest
import requests

from s3_harness import bucket, s3, s3_client

MiB = 1024 * 1024


def failure(call, **params):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call(**params)
    response = e.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"], \
        response["ResponseMetadata"]["HTTPHeaders"]


def versions(s3, bucket, **params):
    """Every version, then every delete marker (each in the listing's order: keys in order,
    a key's newest first), paged by the listing's own markers."""
    listed, markers = [], []
    while True:
        page = s3.list_object_versions(Bucket=bucket, **params)
        listed += [(v["Key"], v["VersionId"], v["IsLatest"], "version") for v in page.get("Versions", [])]
        markers += [(m["Key"], m["VersionId"], m["IsLatest"], "marker") for m in page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            return listed + markers
        params["KeyMarker"] = page["NextKeyMarker"]
        if page.get("NextVersionIdMarker"):
            params["VersionIdMarker"] = page["NextVersionIdMarker"]
        else:
            params.pop("VersionIdMarker", None)


def enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == status


def test_versions_reads_and_delete_markers(s3, bucket):
    s3.put_object(Bucket=bucket, Key="doc", Body=b"before")
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="doc", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="doc", Body=b"two")["VersionId"]
    assert len({v1, v2, "null"}) == 3

    got = s3.get_object(Bucket=bucket, Key="doc")
    assert got["Body"].read() == b"two" and got["VersionId"] == v2
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId=v1)["Body"].read() == b"one"
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId="null")["Body"].read() == b"before"
    assert s3.head_object(Bucket=bucket, Key="doc", VersionId=v1)["ContentLength"] == 3
    assert versions(s3, bucket) == [("doc", v2, True, "version"), ("doc", v1, False, "version"),
                                    ("doc", "null", False, "version")]

    # A plain DELETE adds a delete marker: the key reads as missing, its versions stay.
    deleted = s3.delete_object(Bucket=bucket, Key="doc")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    code, status, headers = failure(s3.get_object, Bucket=bucket, Key="doc")
    assert (code, status) == ("NoSuchKey", 404)
    assert headers["x-amz-delete-marker"] == "true" and headers["x-amz-version-id"] == marker
    assert failure(s3.head_object, Bucket=bucket, Key="doc")[1] == 404
    assert failure(s3.get_object, Bucket=bucket, Key="doc", VersionId=marker)[:2] == ("MethodNotAllowed", 405)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    assert s3.get_object(Bucket=bucket, Key="doc", VersionId=v2)["Body"].read() == b"two"
    assert versions(s3, bucket)[-1] == ("doc", marker, True, "marker")

    # Deleting the marker brings the newest version back; deleting a version removes it.
    removed = s3.delete_object(Bucket=bucket, Key="doc", VersionId=marker)
    assert removed["DeleteMarker"] is True and removed["VersionId"] == marker
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"two"
    s3.delete_object(Bucket=bucket, Key="doc", VersionId=v2)
    assert s3.get_object(Bucket=bucket, Key="doc")["Body"].read() == b"one"
    assert failure(s3.get_object, Bucket=bucket, Key="doc", VersionId=v2)[:2] == ("NoSuchVersion", 404)
    assert failure(s3.get_object, Bucket=bucket, Key="doc", VersionId="not-an-id")[:2] == ("InvalidArgument", 400)

    # A bucket holding versions is not empty.
    s3.delete_object(Bucket=bucket, Key="doc")
    assert failure(s3.delete_bucket, Bucket=bucket)[0] == "BucketNotEmpty"
    for key, version, _, _ in versions(s3, bucket):
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
    assert versions(s3, bucket) == []
    s3.delete_bucket(Bucket=bucket)


def test_copies_and_multipart_completions_get_version_ids(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="src", Body=b"first")["VersionId"]
    s3.put_object(Bucket=bucket, Key="src", Body=b"second")
    copied = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "src", "VersionId": v1})
    assert copied["CopySourceVersionId"] == v1 and copied["VersionId"]
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"first"

    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    parts = [b"a" * 5 * MiB, b"tail"]
    etags = [s3.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=n, Body=p)["ETag"]
             for n, p in enumerate(parts, start=1)]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    assert done["VersionId"]
    assert s3.head_object(Bucket=bucket, Key="big", VersionId=done["VersionId"])["ContentLength"] == 5 * MiB + 4


def test_suspended_writes_replace_the_null_version(s3, bucket):
    enable(s3, bucket)
    kept = s3.put_object(Bucket=bucket, Key="k", Body=b"kept")["VersionId"]
    enable(s3, bucket, "Suspended")
    s3.put_object(Bucket=bucket, Key="k", Body=b"null one")
    s3.put_object(Bucket=bucket, Key="k", Body=b"null two")
    assert versions(s3, bucket) == [("k", "null", True, "version"), ("k", kept, False, "version")]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"null two"
    # A delete while Suspended: the `null` delete marker replaces the `null` version.
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"] is True and deleted["VersionId"] == "null"
    assert versions(s3, bucket) == [("k", kept, False, "version"), ("k", "null", True, "marker")]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=kept)["Body"].read() == b"kept"


def test_listing_pages_by_key_and_version_markers(s3, bucket):
    enable(s3, bucket)
    expected = []
    for key in ["a", "b/1", "b/2", "c"]:
        ids = [s3.put_object(Bucket=bucket, Key=key, Body=str(i).encode())["VersionId"] for i in range(3)]
        expected += [(key, v, i == 0, "version") for i, v in enumerate(reversed(ids))]
    s3.delete_object(Bucket=bucket, Key="c")
    marker = versions(s3, bucket)[-1]
    assert marker[0] == "c" and marker[3] == "marker" and marker[2] is True
    expected = [e if e[0] != "c" else (e[0], e[1], False, e[3]) for e in expected]
    whole = versions(s3, bucket)
    assert whole == expected + [marker]
    # One entry a page, two a page: the same listing, in the same order.
    assert versions(s3, bucket, MaxKeys=1) == whole
    assert versions(s3, bucket, MaxKeys=2) == whole
    # A delimiter rolls `b/` up into one common prefix.
    page = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["b/"]
    assert {v["Key"] for v in page["Versions"]} == {"a", "c"}
    assert failure(s3.list_object_versions, Bucket=bucket, VersionIdMarker=whole[0][1])[0] == "InvalidArgument"


def test_delete_objects_by_version(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="x", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="x", Body=b"2")["VersionId"]
    s3.put_object(Bucket=bucket, Key="y", Body=b"y")
    answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "x", "VersionId": v1}, {"Key": "y"}]})
    deleted = {d["Key"]: d for d in answer["Deleted"]}
    assert deleted["x"]["VersionId"] == v1 and "DeleteMarker" not in deleted["x"]
    assert deleted["y"]["DeleteMarker"] is True and deleted["y"]["DeleteMarkerVersionId"]
    assert [(k, v) for k, v, _, _ in versions(s3, bucket, Prefix="x")] == [("x", v2)]


def test_versions_survive_a_restart(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="kept-versions")
    enable(s3, "kept-versions")
    v1 = s3.put_object(Bucket="kept-versions", Key="k", Body=b"old")["VersionId"]
    s3.put_object(Bucket="kept-versions", Key="k", Body=b"new")
    server.restart()
    s3 = s3_client(server)
    # The older version's file was not taken for an orphan at start.
    assert s3.get_object(Bucket="kept-versions", Key="k", VersionId=v1)["Body"].read() == b"old"
    assert s3.get_object(Bucket="kept-versions", Key="k")["Body"].read() == b"new"
    assert s3.get_bucket_versioning(Bucket="kept-versions")["Status"] == "Enabled"
