"""CORS, as S3 does it: a bucket's rules (Put/Get/DeleteBucketCors, validated as S3 validates
them), preflight `OPTIONS` requests answered from the first rule that allows them, and the
`Access-Control-*` headers on actual requests from an allowed origin. Rules are kept across a
restart."""

import botocore.exceptions
import pytest
import requests

from s3_harness import bucket, s3, s3_client, s3_endpoint

RULES = [
    {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["https://*.example.com"],
     "AllowedHeaders": ["x-amz-*", "content-type"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600,
     "ID": "reads"},
    {"AllowedMethods": ["PUT"], "AllowedOrigins": ["*"]},
]


def error_code(call, **params):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call(**params)
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def preflight(kiln, path, origin=None, method=None, headers=None):
    sent = {}
    if origin:
        sent["Origin"] = origin
    if method:
        sent["Access-Control-Request-Method"] = method
    if headers:
        sent["Access-Control-Request-Headers"] = headers
    return requests.options(s3_endpoint(kiln) + path, headers=sent)


def test_rules_are_set_read_and_deleted(s3, bucket):
    assert error_code(s3.get_bucket_cors, Bucket=bucket) == ("NoSuchCORSConfiguration", 404)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES
    s3.delete_bucket_cors(Bucket=bucket)
    assert error_code(s3.get_bucket_cors, Bucket=bucket) == ("NoSuchCORSConfiguration", 404)
    assert error_code(s3.get_bucket_cors, Bucket="no-such-bucket-here")[0] == "NoSuchBucket"


@pytest.mark.parametrize("rule, code", [
    ({"AllowedMethods": ["get"], "AllowedOrigins": ["*"]}, "InvalidRequest"),
    ({"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}, "InvalidRequest"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["https://*.*.com"]}, "InvalidRequest"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "AllowedHeaders": ["x-*-*"]}, "InvalidRequest"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "ExposeHeaders": ["x-*"]}, "InvalidRequest"),
])
def test_invalid_rules_are_refused_and_change_nothing(s3, bucket, rule, code):
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    assert error_code(s3.put_bucket_cors, Bucket=bucket, CORSConfiguration={"CORSRules": [rule]})[0] == code
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES


def test_preflights_are_answered_from_the_first_rule_that_allows_them(kiln, s3, bucket):
    path = f"/{bucket}/photo.jpg"
    # No rules yet: refused.
    assert preflight(kiln, path, "https://app.example.com", "GET").status_code == 403
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})

    allowed = preflight(kiln, path, "https://app.example.com", "GET", "X-Amz-Date, Content-Type")
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert allowed.headers["Access-Control-Allow-Methods"] == "GET, HEAD"
    assert allowed.headers["Access-Control-Allow-Headers"] == "x-amz-date, content-type"
    assert allowed.headers["Access-Control-Expose-Headers"] == "ETag"
    assert allowed.headers["Access-Control-Max-Age"] == "600"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    assert "x-amz-request-id" in allowed.headers

    # The second rule allows PUT from anywhere.
    anywhere = preflight(kiln, path, "https://elsewhere.test", "PUT")
    assert anywhere.status_code == 200
    assert anywhere.headers["Access-Control-Allow-Origin"] == "*"
    assert anywhere.headers["Access-Control-Allow-Methods"] == "PUT"

    # An origin, method or header no rule allows.
    for refused in [preflight(kiln, path, "https://example.com", "GET"),
                    preflight(kiln, path, "https://app.example.com", "DELETE"),
                    preflight(kiln, path, "https://app.example.com", "GET", "authorization")]:
        assert refused.status_code == 403
        assert "<Code>AccessForbidden</Code>" in refused.text
        assert "Access-Control-Allow-Origin" not in refused.headers
    # Without an origin or a method the request is malformed.
    assert preflight(kiln, path).status_code == 400
    assert preflight(kiln, path, "https://app.example.com").status_code == 400
    # A bucket that does not exist.
    assert preflight(kiln, "/no-such-bucket-here/k", "https://app.example.com", "GET").status_code == 404

    s3.delete_bucket_cors(Bucket=bucket)
    assert preflight(kiln, path, "https://app.example.com", "GET").status_code == 403


def test_actual_requests_from_an_allowed_origin_carry_the_headers(kiln, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"shared")
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    got = requests.get(url, headers={"Origin": "https://app.example.com"})
    assert got.status_code == 200 and got.content == b"shared"
    assert got.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert got.headers["Access-Control-Expose-Headers"] == "ETag"
    # An error answer carries them too (a browser could not read it otherwise).
    missing = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "missing"})
    answer = requests.get(missing, headers={"Origin": "https://app.example.com"})
    assert answer.status_code == 404
    assert answer.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    # An origin no rule allows for GET, and no origin at all: no headers.
    for headers in [{"Origin": "https://example.org"}, {}]:
        plain = requests.get(url, headers=headers)
        assert plain.status_code == 200
        assert "Access-Control-Allow-Origin" not in plain.headers


def test_rules_are_kept_across_a_restart(fresh_kiln):
    server = fresh_kiln()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="cors-kept")
    s3.put_bucket_cors(Bucket="cors-kept", CORSConfiguration={"CORSRules": RULES})
    server.restart()
    s3 = s3_client(server)
    assert s3.get_bucket_cors(Bucket="cors-kept")["CORSRules"] == RULES
    assert preflight(server, "/cors-kept/k", "https://a.example.com", "HEAD").status_code == 200
