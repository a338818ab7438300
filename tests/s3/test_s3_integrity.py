"""Nothing is stored unless it arrived whole and as declared: flexible checksums (headers and
aws-chunked trailers), Content-MD5, the signed payload hash, body lengths and size limits, each
refused with S3's error code."""

import base64
import hashlib
import socket
import urllib.parse
import zlib

import botocore.exceptions
import pytest

from s3_harness import (aws_chunked_put, bucket, crc32_b64, error_code, keys_of, s3, s3_client, send,
                        signed_request, start_partial_upload)

MiB = 1024 * 1024


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


def test_payload_hash_mismatch_is_refused(kiln, s3, bucket):
    prepared = signed_request(kiln, "PUT", f"/{bucket}/tampered", body=b"signed body")
    code, body = send(prepared, body=b"other body!")
    assert code == 400 and "XAmzContentSHA256Mismatch" in body
    assert keys_of(s3, bucket) == []


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


def exchange(sock, prepared, body=b"", extra_headers=()):
    """Sends one request on an open socket and returns the raw response (b"" if the server has
    closed the connection)."""
    url = urllib.parse.urlsplit(prepared.url)
    path = url.path + (f"?{url.query}" if url.query else "")
    headers = [("Host", url.netloc), *prepared.headers.items(), *extra_headers]
    head = f"{prepared.method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    try:
        sock.sendall(head.encode() + b"\r\n" + body)
        return sock.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        return b""


def test_regression_refused_upload_does_not_corrupt_the_connection(kiln, bucket):
    """A PUT refused before its body was read (here: NoSuchBucket) once left kiln reading the
    next request as that body, when the client had held the body back for `100 Continue`; and
    a connection closed after such a refusal must be announced (boto3 reused it otherwise)."""
    from s3_harness import signed_request

    listing = signed_request(kiln, "GET", f"/{bucket}?list-type=2")
    url = urllib.parse.urlsplit(listing.url)
    data = b"x" * 100_000
    # Body sent at once: kiln reads and discards it, and the connection stays usable.
    put = signed_request(kiln, "PUT", "/no-such-bucket-here/k", body=data)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        assert exchange(sock, put, body=data).startswith(b"HTTP/1.1 404")
        assert exchange(sock, listing).startswith(b"HTTP/1.1 200")
    # Body held back for 100 Continue: kiln answers without it and closes the connection.
    put = signed_request(kiln, "PUT", "/no-such-bucket-here/k", body=b"x")
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        refused = exchange(sock, put, extra_headers=[("Expect", "100-continue")])
        # … and says so, or a client would send its next request on the closing connection.
        assert refused.startswith(b"HTTP/1.1 404") and b"connection: close" in refused.lower()
        after = exchange(sock, listing)
        assert after == b"" or after.startswith(b"HTTP/1.1 200"), after[:200]


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
