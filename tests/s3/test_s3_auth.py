"""Who may use the object store: SigV4 with kiln's admin key or a function's key (which the
Lambda control API refuses), presigned URLs, and what is refused."""

import hashlib
import time
import urllib.error
import urllib.request

import boto3
import botocore.config
import botocore.exceptions
import pytest
import requests

from s3_harness import bucket, error_code, function_credentials, s3, s3_client, s3_endpoint, send

MiB = 1024 * 1024


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


# --- who may sign --------------------------------------------------------------------------


def test_wrong_keys_are_refused(kiln, bucket):
    wrong_secret = s3_client(kiln, secret_key="x" * 40)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        wrong_secret.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "SignatureDoesNotMatch"


def test_a_functions_key_may_not_configure_what_invokes_functions(kiln, bucket):
    # A bucket's notifications invoke functions: only kiln's admin key sets or reads them.
    access_key, secret_key = function_credentials(kiln, "s3-notify-probe")
    fn_s3 = s3_client(kiln, access_key=access_key, secret_key=secret_key)
    config = {"LambdaFunctionConfigurations": [{
        "LambdaFunctionArn": f"arn:aws:lambda:{kiln.region}:000000000000:function:anything",
        "Events": ["s3:ObjectCreated:*"]}]}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        fn_s3.put_bucket_notification_configuration(
            Bucket=bucket, NotificationConfiguration=config, SkipDestinationValidation=True)
    assert error_code(e) == "AccessDenied", e.value.response
    with pytest.raises(botocore.exceptions.ClientError) as e:
        fn_s3.get_bucket_notification_configuration(Bucket=bucket)
    assert error_code(e) == "AccessDenied", e.value.response
    # The admin key reads it: nothing was set.
    admin = s3_client(kiln)
    assert "LambdaFunctionConfigurations" not in admin.get_bucket_notification_configuration(Bucket=bucket)
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
