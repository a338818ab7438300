"""What S3 does with a request before and around the operation it asks for: every answer names
its request (`x-amz-request-id`, `x-amz-id-2`, repeated in error XML), browser uploads signed
with a POST policy, the week-long limit of presigned URLs, an empty Content-MD5, and
`aws-chunked` left out of the stored Content-Encoding."""

import base64
import json
import re
import zlib

import botocore.exceptions
import pytest
import requests

from s3_harness import aws_chunked_put, bucket, s3, s3_client, s3_endpoint, signed_request


@pytest.fixture(scope="module")
def s3v4(kiln):
    return s3_client(kiln, signature_version="s3v4")


def test_every_answer_names_its_request(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["ResponseMetadata"]
    assert re.fullmatch(r"[0-9A-F]{16}", put["RequestId"])
    assert put["HostId"]
    head = s3.head_object(Bucket=bucket, Key="k")["ResponseMetadata"]
    assert head["RequestId"] != put["RequestId"] and head["HostId"] == put["HostId"]

    with pytest.raises(botocore.exceptions.ClientError) as missing:
        s3.get_object(Bucket=bucket, Key="missing")
    error = missing.value.response
    assert error["Error"]["Code"] == "NoSuchKey"
    assert re.fullmatch(r"[0-9A-F]{16}", error["ResponseMetadata"]["RequestId"])
    assert error["ResponseMetadata"]["HostId"] == put["HostId"]


def test_error_bodies_repeat_the_request_ids(kiln, bucket):
    response = requests.get(s3_endpoint(kiln) + f"/{bucket}/k")  # unsigned: refused
    assert response.status_code == 403
    request_id = response.headers["x-amz-request-id"]
    assert f"<RequestId>{request_id}</RequestId>" in response.text
    assert f"<HostId>{response.headers['x-amz-id-2']}</HostId>" in response.text
    assert "<Message>" in response.text


def post_upload(post, body, filename="a.txt", allow_redirects=True, **extra_fields):
    return requests.post(post["url"], data={**post["fields"], **extra_fields}, files={"file": (filename, body)},
                         allow_redirects=allow_redirects)


def sign_policy(client, credential, policy):
    """A POST policy's SigV4 signature, as S3 checks it: the policy signed with the key derived
    for the credential's scope."""
    import hashlib
    import hmac
    secret = client._request_signer._credentials.secret_key
    _, date, region, service, _ = credential.split("/")
    key = ("AWS4" + secret).encode()
    for part in [date, region, service, "aws4_request"]:
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, policy.encode(), hashlib.sha256).hexdigest()


def test_browser_uploads_with_a_post_policy(s3, s3v4, bucket):
    post = s3v4.generate_presigned_post(
        bucket, "uploads/photo.jpg",
        Fields={"Content-Type": "image/jpeg", "x-amz-meta-owner": "ana"},
        Conditions=[["content-length-range", 1, 1024], {"Content-Type": "image/jpeg"}, {"x-amz-meta-owner": "ana"}],
        ExpiresIn=300,
    )
    assert post["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    response = post_upload(post, b"jpeg bytes")
    assert response.status_code == 204, response.text
    got = s3.get_object(Bucket=bucket, Key="uploads/photo.jpg")
    assert got["Body"].read() == b"jpeg bytes"
    assert got["ContentType"] == "image/jpeg" and got["Metadata"] == {"owner": "ana"}

    # success_action_status 201 answers S3's PostResponse document.
    post = s3v4.generate_presigned_post(bucket, "uploads/second", Fields={"success_action_status": "201"},
                                        Conditions=[{"success_action_status": "201"}])
    response = post_upload(post, b"two")
    assert response.status_code == 201, response.text
    assert "<Key>uploads/second</Key>" in response.text and f"<Bucket>{bucket}</Bucket>" in response.text


def test_a_browser_upload_key_takes_the_uploaded_files_name(s3, s3v4, bucket):
    # As on S3, `${filename}` is replaced before the policy's conditions are checked: the
    # policy allows keys under `uploads/`, and the 201 answer names the stored key.
    post = s3v4.generate_presigned_post(
        bucket, "uploads/${filename}", Fields={"success_action_status": "201"},
        Conditions=[["starts-with", "$key", "uploads/"], {"success_action_status": "201"}])
    response = post_upload(post, b"report bytes", filename="report 2026.pdf")
    assert response.status_code == 201, response.text
    assert "<Key>uploads/report 2026.pdf</Key>" in response.text
    assert s3.get_object(Bucket=bucket, Key="uploads/report 2026.pdf")["Body"].read() == b"report bytes"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["uploads/report 2026.pdf"]

    # The replaced key must still meet the policy.
    post = s3v4.generate_presigned_post(bucket, "${filename}", Conditions=[["starts-with", "$key", "safe-"]])
    refused = post_upload(post, b"x", filename="other.txt")
    assert refused.status_code == 403, refused.text
    allowed = post_upload(post, b"y", filename="safe-one.txt")
    assert allowed.status_code == 204, allowed.text
    assert s3.get_object(Bucket=bucket, Key="safe-one.txt")["Body"].read() == b"y"


def test_post_policies_are_enforced(s3, s3v4, bucket):
    post = s3v4.generate_presigned_post(bucket, "limited", Conditions=[["content-length-range", 1, 10]])
    too_big = post_upload(post, b"x" * 11)
    assert too_big.status_code == 400 and "<Code>EntityTooLarge</Code>" in too_big.text

    # A field the policy does not allow, a forged signature, a key the policy does not name.
    post = s3v4.generate_presigned_post(bucket, "named", Conditions=[{"Content-Type": "text/plain"}],
                                        Fields={"Content-Type": "text/plain"})
    changed = post_upload(post, b"x", **{"Content-Type": "text/html"})
    assert changed.status_code == 403, changed.text
    forged = post_upload(post, b"x", **{"x-amz-signature": "0" * 64})
    assert forged.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in forged.text
    elsewhere = post_upload(post, b"x", key="other")
    assert elsewhere.status_code == 403, elsewhere.text

    expired = s3v4.generate_presigned_post(bucket, "late", ExpiresIn=-60)
    late = post_upload(expired, b"x")
    assert late.status_code == 403, late.text
    for key in ["limited", "named", "other", "late"]:
        with pytest.raises(botocore.exceptions.ClientError) as missing:
            s3.head_object(Bucket=bucket, Key=key)
        assert missing.value.response["Error"]["Code"] == "404"


def test_a_form_is_refused_as_s3_refuses_its_policy(s3, s3v4, bucket):
    import uuid
    post = s3v4.generate_presigned_post(bucket, "k")
    policy = json.loads(base64.b64decode(post["fields"]["policy"]))

    def signed(document):
        # The form's own signature over a policy changed here: SigV4, as boto3 signs it.
        fields = dict(post["fields"])
        fields["policy"] = base64.b64encode(json.dumps(document).encode()).decode()
        fields["x-amz-signature"] = sign_policy(s3v4, fields["x-amz-credential"], fields["policy"])
        return {"url": post["url"], "fields": fields}

    # An expiration that is not ISO 8601 is a policy S3 cannot read (400).
    unreadable = signed({**policy, "expiration": "2030-01-01 00:00:00+00:00"})
    answer = post_upload(unreadable, b"x")
    assert answer.status_code == 400 and "<Code>InvalidPolicyDocument</Code>" in answer.text, answer.text
    # A policy with its signature left out is a malformed form (400), not a forged one (403).
    unsigned = {"url": post["url"], "fields": {k: v for k, v in post["fields"].items() if k != "x-amz-signature"}}
    answer = post_upload(unsigned, b"x")
    assert answer.status_code == 400 and "<Code>InvalidArgument</Code>" in answer.text, answer.text
    # A policy for one bucket does not open another (403), even with the form's bucket field.
    other = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=other)
    elsewhere = {"url": post["url"].replace(bucket, other), "fields": {**post["fields"], "bucket": bucket}}
    answer = post_upload(elsewhere, b"x")
    assert answer.status_code == 403 and "<Code>AccessDenied</Code>" in answer.text, answer.text
    assert "Contents" not in s3.list_objects_v2(Bucket=other)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    # The same policy, as signed, is taken.
    assert post_upload(post, b"x").status_code == 204


def test_a_browser_uploads_redirect_names_the_etag_with_its_quotes(s3, s3v4, bucket):
    target = "http://127.0.0.1:9/done"
    post = s3v4.generate_presigned_post(bucket, "r", Fields={"success_action_redirect": target},
                                        Conditions=[{"success_action_redirect": target}])
    answer = post_upload(post, b"redirected", allow_redirects=False)
    assert answer.status_code == 303, answer.text
    etag = s3.head_object(Bucket=bucket, Key="r")["ETag"].strip('"')
    assert answer.headers["Location"] == f"{target}?bucket={bucket}&key=r&etag=%22{etag}%22"


def test_presigned_urls_are_valid_for_a_week_at_most(s3, s3v4, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"week")
    week = s3v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=7 * 86400)
    assert requests.get(week).content == b"week"
    longer = s3v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"},
                                         ExpiresIn=7 * 86400 + 1)
    refused = requests.get(longer)
    assert refused.status_code == 400
    assert "<Code>AuthorizationQueryParametersError</Code>" in refused.text
    assert "604800" in refused.text


def test_an_empty_content_md5_is_invalid(kiln, s3, bucket):
    request = signed_request(kiln, "PUT", f"/{bucket}/k", body=b"data", headers={"Content-MD5": ""})
    response = requests.put(request.url, data=request.body, headers=dict(request.headers))
    assert response.status_code == 400 and "<Code>InvalidDigest</Code>" in response.text
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        s3.head_object(Bucket=bucket, Key="k")
    assert missing.value.response["Error"]["Code"] == "404"


def test_aws_chunked_is_not_kept_as_the_objects_content_encoding(kiln, s3, bucket):
    for key, encoding, stored in [("gz", "aws-chunked,gzip", "gzip"), ("plain", "aws-chunked", None)]:
        data = b"some bytes"
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        status, text = aws_chunked_put(kiln, f"/{bucket}/{key}", data, crc, encoding=encoding)
        assert status == 200, text
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == b"some bytes"
        assert got.get("ContentEncoding") == stored
