"""Multipart uploads: boto3's transfer manager, parts by hand with composite and full-object
checksums, the errors of CompleteMultipartUpload, aborts, and multipart copies."""

import base64
import hashlib
import io

import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from s3_harness import bucket, crc32_b64, error_code, keys_of, s3

MiB = 1024 * 1024


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


def test_a_copy_source_range_must_lie_within_the_source(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"0123456789")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    part = {"Bucket": bucket, "Key": "dst", "UploadId": upload, "PartNumber": 1,
            "CopySource": {"Bucket": bucket, "Key": "src"}}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part_copy(**part, CopySourceRange="bytes=5-10")
    assert error_code(e) == "InvalidRange"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    for malformed in ["bytes=-3", "bytes=4-"]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.upload_part_copy(**part, CopySourceRange=malformed)
        assert error_code(e) == "InvalidArgument", malformed
    etag = s3.upload_part_copy(**part, CopySourceRange="bytes=2-9")["CopyPartResult"]["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"23456789"


def test_a_repeated_complete_answers_the_objects_etag_again(s3, bucket):
    """A client whose first CompleteMultipartUpload answer was lost retries it: S3 answers 200
    with the object's ETag, and refuses a different list of parts."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="r", ChecksumAlgorithm="CRC32")["UploadId"]
    parts = []
    for n, data in enumerate([b"a" * (5 * MiB), b"tail"], start=1):
        out = s3.upload_part(Bucket=bucket, Key="r", UploadId=upload_id, PartNumber=n, Body=data,
                             ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": n, "ETag": out["ETag"], "ChecksumCRC32": out["ChecksumCRC32"]})
    complete = dict(Bucket=bucket, Key="r", UploadId=upload_id)
    first = s3.complete_multipart_upload(**complete, MultipartUpload={"Parts": parts})
    again = s3.complete_multipart_upload(**complete, MultipartUpload={"Parts": parts})
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert again["ETag"] == first["ETag"] and again["ETag"].endswith('-2"')
    assert again["ChecksumCRC32"] == first["ChecksumCRC32"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(**complete, MultipartUpload={"Parts": parts[:1]})
    assert error_code(e) == "InvalidPart"
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.complete_multipart_upload(Bucket=bucket, Key="other", UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})
    aborted = s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.complete_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket=bucket, Key="r")["ETag"] == first["ETag"]
