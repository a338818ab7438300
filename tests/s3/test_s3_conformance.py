"""S3 operations beyond reading and writing objects: ListObjectVersions on unversioned
buckets, GetObjectAttributes, reads by part number, ListMultipartUploads and storage classes,
as boto3 and the AWS CLI call them."""

import botocore.exceptions
import pytest

from s3_harness import bucket, error_code, s3

MiB = 1024 * 1024


# --- ListObjectVersions --------------------------------------------------------------------


def test_versions_of_an_unversioned_bucket_are_its_objects(s3, bucket):
    for key in ["a", "b/1", "b/2", "c", "d/x/1"]:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    listed = s3.list_object_versions(Bucket=bucket)
    versions = listed["Versions"]
    assert [v["Key"] for v in versions] == ["a", "b/1", "b/2", "c", "d/x/1"]
    for v in versions:
        assert v["VersionId"] == "null" and v["IsLatest"] is True
        assert v["StorageClass"] == "STANDARD" and v["Size"] == len(v["Key"])
        assert v["ETag"].startswith('"') and v["Owner"]["ID"]
    assert listed["IsTruncated"] is False and "NextKeyMarker" not in listed
    assert "DeleteMarkers" not in listed

    rolled = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [v["Key"] for v in rolled["Versions"]] == ["a", "c"]
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["b/", "d/"]
    under = s3.list_object_versions(Bucket=bucket, Prefix="d/", Delimiter="/")
    assert "Versions" not in under and [p["Prefix"] for p in under["CommonPrefixes"]] == ["d/x/"]

    seen, marker = [], {}
    while True:
        page = s3.list_object_versions(Bucket=bucket, MaxKeys=2, **marker)
        seen += [v["Key"] for v in page.get("Versions", [])]
        if not page["IsTruncated"]:
            break
        assert page["NextVersionIdMarker"] == "null"
        marker = {"KeyMarker": page["NextKeyMarker"], "VersionIdMarker": page["NextVersionIdMarker"]}
    assert seen == ["a", "b/1", "b/2", "c", "d/x/1"]

    after = s3.list_object_versions(Bucket=bucket, KeyMarker="b/2")
    assert [v["Key"] for v in after["Versions"]] == ["c", "d/x/1"] and after["KeyMarker"] == "b/2"
    page = s3.list_object_versions(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert page["IsTruncated"] and page["NextKeyMarker"] == "b/"
    rest = s3.list_object_versions(Bucket=bucket, Delimiter="/", KeyMarker=page["NextKeyMarker"])
    assert [v["Key"] for v in rest["Versions"]] == ["c"] and [p["Prefix"] for p in rest["CommonPrefixes"]] == ["d/"]


def test_versions_listing_through_the_paginator_and_errors(s3, bucket):
    for n in range(7):
        s3.put_object(Bucket=bucket, Key=f"k{n}", Body=b"x")
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 3})
    assert [v["Key"] for p in pages for v in p["Versions"]] == [f"k{n}" for n in range(7)]
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_object_versions(Bucket=bucket + "-missing")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_object_versions(Bucket=bucket, MaxKeys=-1)
    assert error_code(e) == "InvalidArgument"
    odd = s3.list_object_versions(Bucket=bucket, Prefix="k1", EncodingType="url")
    assert [v["Key"] for v in odd["Versions"]] == ["k1"]
