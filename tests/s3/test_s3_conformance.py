"""S3 operations beyond reading and writing objects: ListObjectVersions on unversioned
buckets, GetObjectAttributes, reads by part number, ListMultipartUploads, storage classes and
canned ACLs, as boto3 calls them."""

import base64
import urllib.error
import urllib.request
import uuid
import zlib

import boto3
import botocore
import botocore.config
import botocore.exceptions
import pytest
import requests

from s3_harness import bucket, error_code, s3, s3_endpoint

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


# --- GetObjectAttributes -------------------------------------------------------------------

ALL_ATTRIBUTES = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def multipart_object(s3, bucket, key, sizes, **create):
    """Completes an upload of parts of these sizes; returns their bytes and the answer."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    algorithm = {"ChecksumAlgorithm": create["ChecksumAlgorithm"]} if "ChecksumAlgorithm" in create else {}
    datas, parts = [], []
    for n, size in enumerate(sizes, start=1):
        data = bytes([n]) * size
        out = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data, **algorithm)
        part = {"PartNumber": n, "ETag": out["ETag"]}
        part.update({k: v for k, v in out.items() if k.startswith("Checksum")})
        datas.append(data)
        parts.append(part)
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})
    return datas, done


def test_attributes_of_a_single_part_object(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="one", Body=b"hello", ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=ALL_ATTRIBUTES)
    # S3 answers this ETag without quotes.
    assert got["ETag"] == put["ETag"].strip('"')
    assert got["Checksum"] == {"ChecksumSHA256": put["ChecksumSHA256"], "ChecksumType": "FULL_OBJECT"}
    assert got["StorageClass"] == "STANDARD" and got["ObjectSize"] == 5
    assert "ObjectParts" not in got and got["LastModified"]
    only = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 5 and "ETag" not in only and "StorageClass" not in only
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    plain = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=ALL_ATTRIBUTES)
    # boto3 sends a CRC32 with every upload by default; without one there is no Checksum.
    assert plain["Checksum"].get("ChecksumCRC32") and plain["ObjectSize"] == 1
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["Colour"])
    assert error_code(e) == "InvalidArgument"


def test_attributes_of_a_multipart_object_list_its_parts(s3, bucket):
    sizes = [5 * MiB, 5 * MiB, 3]
    datas, done = multipart_object(s3, bucket, "mp", sizes, ChecksumAlgorithm="CRC32")
    got = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL_ATTRIBUTES)
    assert got["ETag"] == done["ETag"].strip('"') and got["ObjectSize"] == sum(sizes)
    assert got["Checksum"]["ChecksumType"] == "COMPOSITE"
    parts = got["ObjectParts"]
    assert parts["TotalPartsCount"] == 3 and parts["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, 5 * MiB), (2, 5 * MiB), (3, 3)]
    assert all(p["ChecksumCRC32"] for p in parts["Parts"])
    first = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2)
    assert first["ObjectParts"]["IsTruncated"] is True and first["ObjectParts"]["NextPartNumberMarker"] == 2
    rest = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"],
                                    PartNumberMarker=2)
    assert [p["PartNumber"] for p in rest["ObjectParts"]["Parts"]] == [3]


# --- reads by part number ------------------------------------------------------------------


def test_reads_by_part_number(s3, bucket):
    sizes = [5 * MiB, 5 * MiB + 7, 11]
    datas, done = multipart_object(s3, bucket, "mp", sizes)
    total = sum(sizes)
    start = 0
    for n, data in enumerate(datas, start=1):
        got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=n)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == f"bytes {start}-{start + len(data) - 1}/{total}"
        assert got["PartsCount"] == 3 and got["ContentLength"] == len(data)
        assert got["ETag"] == done["ETag"]
        assert got["Body"].read() == data
        head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=n)
        assert head["PartsCount"] == 3 and head["ContentLength"] == len(data)
        assert head["ContentRange"] == got["ContentRange"]
        start += len(data)
    assert "PartsCount" not in s3.head_object(Bucket=bucket, Key="mp")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=4)
    assert error_code(e) == "InvalidPartNumber"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=1, Range="bytes=0-1")
    assert error_code(e) == "InvalidRequest"


def test_a_part_read_answers_that_parts_checksum(s3, bucket):
    datas, done = multipart_object(s3, bucket, "sums", [5 * MiB, 17], ChecksumAlgorithm="CRC32")
    assert done["ChecksumType"] == "COMPOSITE"
    for n, data in enumerate(datas, start=1):
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        for read in (s3.get_object, s3.head_object):
            got = read(Bucket=bucket, Key="sums", PartNumber=n, ChecksumMode="ENABLED")
            assert (got["ChecksumCRC32"], got["ChecksumType"]) == (crc, "COMPOSITE"), (read, n)
    # Without checksum mode, no checksum (boto3 asks for it on GetObject by itself).
    assert "ChecksumCRC32" not in s3.head_object(Bucket=bucket, Key="sums", PartNumber=1)
    whole = s3.head_object(Bucket=bucket, Key="sums", ChecksumMode="ENABLED")
    assert whole["ChecksumCRC32"] == done["ChecksumCRC32"]


def test_part_one_of_a_single_part_object_is_the_whole_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789")
    got = s3.get_object(Bucket=bucket, Key="one", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == "bytes 0-9/10" and "PartsCount" not in got
    assert got["Body"].read() == b"0123456789"
    assert s3.head_object(Bucket=bucket, Key="one", PartNumber=1)["ContentLength"] == 10
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="one", PartNumber=2)
    assert error_code(e) == "InvalidPartNumber"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="one", PartNumber=2)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="missing", PartNumber=1)


# --- ListMultipartUploads ------------------------------------------------------------------


def test_list_multipart_uploads(s3, bucket):
    began = {}
    for key in ["a", "a", "b/1", "b/2", "c"]:
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")
        began.setdefault(key, []).append(upload["UploadId"])
    listed = s3.list_multipart_uploads(Bucket=bucket)
    uploads = listed["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [(k, u) for k, ids in began.items() for u in ids]
    assert all(u["StorageClass"] == "STANDARD" and u["Initiated"] and u["Owner"]["ID"] and u["Initiator"]["ID"]
               for u in uploads)
    assert uploads[0]["ChecksumAlgorithm"] == "SHA256"
    assert listed["IsTruncated"] is False

    rolled = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [u["Key"] for u in rolled["Uploads"]] == ["a", "a", "c"]
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["b/"]
    under = s3.list_multipart_uploads(Bucket=bucket, Prefix="b/")
    assert [u["Key"] for u in under["Uploads"]] == ["b/1", "b/2"]

    seen, markers = [], {}
    while True:
        page = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=2, **markers)
        seen += [u["UploadId"] for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
    assert seen == [u for ids in began.values() for u in ids]
    pages = s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, PaginationConfig={"PageSize": 3})
    assert [u["UploadId"] for p in pages for u in p.get("Uploads", [])] == seen
    after = s3.list_multipart_uploads(Bucket=bucket, KeyMarker="a")
    assert [u["Key"] for u in after["Uploads"]] == ["b/1", "b/2", "c"]

    # Completed and aborted uploads leave the list.
    s3.abort_multipart_upload(Bucket=bucket, Key="c", UploadId=began["c"][0])
    data = b"x"
    part = s3.upload_part(Bucket=bucket, Key="b/1", UploadId=began["b/1"][0], PartNumber=1, Body=data,
                          ChecksumAlgorithm="SHA256")
    s3.complete_multipart_upload(Bucket=bucket, Key="b/1", UploadId=began["b/1"][0], MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": part["ETag"], "ChecksumSHA256": part["ChecksumSHA256"]}]})
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == ["a", "a", "b/2"]
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_multipart_uploads(Bucket=bucket + "-missing")


# --- storage classes -----------------------------------------------------------------------


def test_storage_classes_are_stored_and_answered(s3, bucket):
    s3.put_object(Bucket=bucket, Key="std", Body=b"x")
    s3.put_object(Bucket=bucket, Key="explicit", Body=b"x", StorageClass="STANDARD")
    s3.put_object(Bucket=bucket, Key="ia", Body=b"x", StorageClass="STANDARD_IA")
    # S3 leaves STANDARD out of HEAD and GET.
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="std")
    assert "StorageClass" not in s3.get_object(Bucket=bucket, Key="explicit")
    assert s3.head_object(Bucket=bucket, Key="ia")["StorageClass"] == "STANDARD_IA"
    assert s3.get_object(Bucket=bucket, Key="ia")["StorageClass"] == "STANDARD_IA"
    classes = {o["Key"]: o["StorageClass"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert classes == {"std": "STANDARD", "explicit": "STANDARD", "ia": "STANDARD_IA"}
    assert {o["Key"]: o["StorageClass"] for o in s3.list_objects(Bucket=bucket)["Contents"]} == classes
    versions = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert {v["Key"]: v["StorageClass"] for v in versions} == classes
    attributes = s3.get_object_attributes(Bucket=bucket, Key="ia", ObjectAttributes=["StorageClass"])
    assert attributes["StorageClass"] == "STANDARD_IA"
    for valid in ["REDUCED_REDUNDANCY", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER", "DEEP_ARCHIVE",
                  "GLACIER_IR", "OUTPOSTS", "EXPRESS_ONEZONE"]:
        s3.put_object(Bucket=bucket, Key=f"c-{valid}", Body=b"x", StorageClass=valid)
        assert s3.head_object(Bucket=bucket, Key=f"c-{valid}")["StorageClass"] == valid
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"x", StorageClass="COLD")
    assert error_code(e) == "InvalidStorageClass"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="bad", CopySource={"Bucket": bucket, "Key": "std"}, StorageClass="COLD")
    assert error_code(e) == "InvalidStorageClass"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key="bad", StorageClass="COLD")
    assert error_code(e) == "InvalidStorageClass"


def test_multipart_uploads_keep_their_storage_class(s3, bucket):
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp", StorageClass="GLACIER_IR")["UploadId"]
    listed = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["UploadId"], u["StorageClass"]) for u in listed] == [(upload_id, "GLACIER_IR")]
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"x")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.head_object(Bucket=bucket, Key="mp")["StorageClass"] == "GLACIER_IR"


def test_copies_take_the_requests_storage_class(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"data", Metadata={"a": "1"}, ContentType="text/x")
    source = {"Bucket": bucket, "Key": "k"}
    # A copy onto itself must change something.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="k", CopySource=source)
    assert error_code(e) == "InvalidRequest"
    s3.copy_object(Bucket=bucket, Key="k", CopySource=source, StorageClass="ONEZONE_IA")
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["StorageClass"] == "ONEZONE_IA"
    assert head["Metadata"] == {"a": "1"} and head["ContentType"] == "text/x"
    # Another copy without one is STANDARD again, as on S3.
    s3.copy_object(Bucket=bucket, Key="other", CopySource=source)
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="other")
    s3.copy_object(Bucket=bucket, Key="k", CopySource=source, MetadataDirective="REPLACE", Metadata={"b": "2"})
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["Metadata"] == {"b": "2"} and "StorageClass" not in head
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"



# --- canned ACLs ---------------------------------------------------------------------------

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@pytest.fixture
def unsigned(kiln):
    """boto3 without credentials: S3's anonymous requests."""
    return boto3.client("s3", endpoint_url=s3_endpoint(kiln), region_name="us-east-1",
                        config=botocore.config.Config(signature_version=botocore.UNSIGNED,
                                                      retries={"max_attempts": 0}))


def grants_of(answer):
    return sorted((g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in answer["Grants"])


def test_object_acls_answer_the_owner_and_public_readers(s3, bucket):
    s3.put_object(Bucket=bucket, Key="private", Body=b"x")
    acl = s3.get_object_acl(Bucket=bucket, Key="private")
    owner = acl["Owner"]["ID"]
    assert grants_of(acl) == [(owner, "FULL_CONTROL")]
    s3.put_object(Bucket=bucket, Key="public", Body=b"x", ACL="public-read")
    assert grants_of(s3.get_object_acl(Bucket=bucket, Key="public")) == sorted(
        [(owner, "FULL_CONTROL"), (ALL_USERS, "READ")])
    s3.put_object_acl(Bucket=bucket, Key="public", ACL="private")
    assert grants_of(s3.get_object_acl(Bucket=bucket, Key="public")) == [(owner, "FULL_CONTROL")]
    # The policy GetObjectAcl answered, with AllUsers READ added, is one kiln takes back.
    policy = s3.get_object_acl(Bucket=bucket, Key="private")
    policy["Grants"].append({"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"})
    s3.put_object_acl(Bucket=bucket, Key="private",
                      AccessControlPolicy={"Grants": policy["Grants"], "Owner": policy["Owner"]})
    assert (ALL_USERS, "READ") in grants_of(s3.get_object_acl(Bucket=bucket, Key="private"))
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object_acl(Bucket=bucket, Key="missing")
    # Grants kiln cannot enforce are refused, not stored.
    for refused in [dict(ACL="aws-exec-read"), dict(GrantRead='id="someone-else"')]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket=bucket, Key="refused", Body=b"x", **refused)
        assert error_code(e) == "NotImplemented", refused
        assert e.value.response["Error"]["Message"]
    # An object's public-read-write is recorded (S3 lists its WRITE grant) and opens reads.
    s3.put_object_acl(Bucket=bucket, Key="public", ACL="public-read-write")
    assert grants_of(s3.get_object_acl(Bucket=bucket, Key="public")) == sorted(
        [(owner, "FULL_CONTROL"), (ALL_USERS, "READ"), (ALL_USERS, "WRITE")])
    # The bucket-owner ACLs are the owner alone: the bucket's owner owns every object.
    for canned in ["bucket-owner-read", "bucket-owner-full-control"]:
        s3.put_object(Bucket=bucket, Key=canned, Body=b"x", ACL=canned)
        assert grants_of(s3.get_object_acl(Bucket=bucket, Key=canned)) == [(owner, "FULL_CONTROL")]
    # A grant to an account kiln does not have is refused as S3 refuses it, not stored.
    policy = s3.get_object_acl(Bucket=bucket, Key="private")
    before = grants_of(policy)
    for grantee, code in [({"Type": "CanonicalUser", "ID": "someone-else"}, "InvalidArgument"),
                          ({"Type": "AmazonCustomerByEmail", "EmailAddress": "a@example.com"},
                           "UnresolvableGrantByEmailAddress")]:
        grants = policy["Grants"] + [{"Grantee": grantee, "Permission": "READ"}]
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object_acl(Bucket=bucket, Key="private",
                              AccessControlPolicy={"Grants": grants, "Owner": policy["Owner"]})
        assert error_code(e) == code and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert grants_of(s3.get_object_acl(Bucket=bucket, Key="private")) == before
    # Copies take the request's ACL, as on S3.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "private"})
    assert grants_of(s3.get_object_acl(Bucket=bucket, Key="copy")) == [(owner, "FULL_CONTROL")]


def test_bucket_acls(s3):
    import uuid
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ACL="public-read")
    acl = s3.get_bucket_acl(Bucket=name)
    assert grants_of(acl) == sorted([(acl["Owner"]["ID"], "FULL_CONTROL"), (ALL_USERS, "READ")])
    s3.put_bucket_acl(Bucket=name, ACL="private")
    assert grants_of(s3.get_bucket_acl(Bucket=name)) == [(acl["Owner"]["ID"], "FULL_CONTROL")]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_acl(Bucket=name, ACL="log-delivery-write")
    assert error_code(e) == "NotImplemented"
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.get_bucket_acl(Bucket=name + "-missing")


def test_unsigned_requests_read_public_objects_only(s3, bucket, unsigned, kiln):
    s3.put_object(Bucket=bucket, Key="public", Body=b"for all", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private", Body=b"mine")
    assert unsigned.get_object(Bucket=bucket, Key="public")["Body"].read() == b"for all"
    assert unsigned.head_object(Bucket=bucket, Key="public")["ContentLength"] == 7
    url = f"{s3_endpoint(kiln)}/{bucket}/public"
    with urllib.request.urlopen(url) as answer:  # a browser's GET
        assert answer.read() == b"for all"
    for key in ["private", "missing"]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            unsigned.get_object(Bucket=bucket, Key=key)
        assert error_code(e) == "AccessDenied", key
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.head_object(Bucket=bucket, Key="private")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # Anything but reads is refused, public or not.
    for call in [lambda: unsigned.put_object(Bucket=bucket, Key="public", Body=b"overwritten"),
                 lambda: unsigned.delete_object(Bucket=bucket, Key="public"),
                 lambda: unsigned.get_object_acl(Bucket=bucket, Key="public"),
                 lambda: unsigned.list_objects_v2(Bucket=bucket)]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "AccessDenied"
    assert s3.get_object(Bucket=bucket, Key="public")["Body"].read() == b"for all"
    # A public-read bucket lists to anyone; its objects stay as private as their own ACLs.
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    assert [o["Key"] for o in unsigned.list_objects_v2(Bucket=bucket)["Contents"]] == ["private", "public"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.get_object(Bucket=bucket, Key="private")
    assert error_code(e) == "AccessDenied"
    # Anyone may list it, so anyone may learn that a key is not there (S3's 404, not 403).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.get_object(Bucket=bucket, Key="missing")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.head_object(Bucket=bucket, Key="missing")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    s3.put_object_acl(Bucket=bucket, Key="public", ACL="private")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.get_object(Bucket=bucket, Key="public")
    assert error_code(e) == "AccessDenied"
    # That a bucket does not exist is told to anyone, as S3 does.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.get_object(Bucket=bucket + "-gone", Key="public")
    assert error_code(e) == "NoSuchBucket"


def test_a_public_read_write_bucket_takes_unsigned_writes(s3, unsigned, kiln):
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ACL="public-read-write")
    owner = s3.get_bucket_acl(Bucket=name)["Owner"]["ID"]
    assert grants_of(s3.get_bucket_acl(Bucket=name)) == sorted(
        [(owner, "FULL_CONTROL"), (ALL_USERS, "READ"), (ALL_USERS, "WRITE")])
    # Anyone may write, overwrite, list, read what is public and delete.
    unsigned.put_object(Bucket=name, Key="drop", Body=b"from anyone", ACL="public-read")
    assert s3.get_object(Bucket=name, Key="drop")["Body"].read() == b"from anyone"
    assert unsigned.get_object(Bucket=name, Key="drop")["Body"].read() == b"from anyone"
    assert [o["Key"] for o in unsigned.list_objects_v2(Bucket=name)["Contents"]] == ["drop"]
    upload = unsigned.create_multipart_upload(Bucket=name, Key="big")["UploadId"]
    part = unsigned.upload_part(Bucket=name, Key="big", UploadId=upload, PartNumber=1, Body=b"parts")
    unsigned.complete_multipart_upload(Bucket=name, Key="big", UploadId=upload,
                                       MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object(Bucket=name, Key="big")["Body"].read() == b"parts"
    # An unsigned write's own object is private unless it says otherwise.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.get_object(Bucket=name, Key="big")
    assert error_code(e) == "AccessDenied"
    unsigned.delete_object(Bucket=name, Key="drop")
    unsigned.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "big"}]})
    assert "Contents" not in s3.list_objects_v2(Bucket=name)
    # A browser upload without a policy is an unsigned write too.
    form = requests.post(f"{s3_endpoint(kiln)}/{name}", data={"key": "form.txt"}, files={"file": ("f", b"posted")})
    assert form.status_code == 204, form.text
    assert s3.get_object(Bucket=name, Key="form.txt")["Body"].read() == b"posted"
    # What the bucket's ACL opens closes with it; the owner's configuration stays the owner's.
    s3.put_bucket_acl(Bucket=name, ACL="public-read")
    for call in [lambda: unsigned.put_object(Bucket=name, Key="late", Body=b"x"),
                 lambda: unsigned.delete_object(Bucket=name, Key="form.txt"),
                 lambda: unsigned.create_multipart_upload(Bucket=name, Key="late"),
                 lambda: unsigned.put_bucket_acl(Bucket=name, ACL="public-read-write")]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "AccessDenied"
    closed = requests.post(f"{s3_endpoint(kiln)}/{name}", data={"key": "late"}, files={"file": ("f", b"x")})
    assert closed.status_code == 403, closed.text
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == ["form.txt"]
    # That a bucket does not exist is told to an unsigned write too (S3's 404).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unsigned.delete_object(Bucket=name + "-gone", Key="k")
    assert error_code(e) == "NoSuchBucket"


def test_an_expected_bucket_owner_other_than_kiln_is_refused(s3, bucket, unsigned):
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ExpectedBucketOwner=owner)
    for client in [s3, unsigned]:
        for call in [lambda: client.list_objects(Bucket=bucket, ExpectedBucketOwner=owner + "foo"),
                     lambda: client.put_object(Bucket=bucket, Key="k2", Body=b"y", ExpectedBucketOwner="123456789012")]:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                call()
            assert error_code(e) == "AccessDenied"
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="k3", CopySource={"Bucket": bucket, "Key": "k"},
                       ExpectedSourceBucketOwner="123456789012")
    assert error_code(e) == "AccessDenied"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]


# --- bucket versioning ---------------------------------------------------------------------


def test_buckets_are_unversioned_until_told_and_may_be_suspended(s3, bucket):
    got = s3.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in got and "MFADelete" not in got
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled", "MFADelete": "Enabled"})
    assert error_code(e) == "NotImplemented" and e.value.response["Error"]["Message"]
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]] == ["null"]
    # The one version is `null`; no other exists.
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"x"
    assert s3.head_object(Bucket=bucket, Key="k", VersionId="null")["ContentLength"] == 1
    for call in [lambda: s3.get_object(Bucket=bucket, Key="k", VersionId="3HL4kqtJlcpXroDTDmJ"),
                 lambda: s3.list_object_versions(Bucket=bucket, VersionIdMarker="null")]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "InvalidArgument"
    s3.delete_object(Bucket=bucket, Key="k", VersionId="null")
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.get_bucket_versioning(Bucket=bucket + "-missing")


def test_list_buckets_pages_by_max_buckets_and_prefix(s3):
    """ListBuckets with `max-buckets` answers a page and a continuation token while more follow; `prefix` keeps
    the names that start with it, and comes back in the answer."""
    prefix = f"lbp-{uuid.uuid4().hex[:8]}-"
    names = [f"{prefix}{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    try:
        seen, token, pages = [], None, 0
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = s3.list_buckets(MaxBuckets=2, Prefix=prefix, **extra)
            assert page["Prefix"] == prefix
            assert len(page["Buckets"]) <= 2
            seen += [b["Name"] for b in page["Buckets"]]
            pages += 1
            token = page.get("ContinuationToken")
            if not token:
                break
        assert seen == names and pages == 3
        everything = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert set(names) <= set(everything)
        assert "ContinuationToken" not in s3.list_buckets(Prefix=prefix)
    finally:
        for name in names:
            s3.delete_bucket(Bucket=name)
