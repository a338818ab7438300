"""Functions written for Lambda + S3 use kiln's object store unmodified: boto3 and
@aws-sdk/client-s3 inside real sandboxes, configured only through the standard environment
that kiln injects (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION),
with the function's own scoped credentials, which the Lambda control API refuses.

In the default isolated network the store is served inside the sandbox at 127.0.0.1:9000 and
accepts only that function's key; with host networking the function reaches kiln's own store
endpoint. The full SDK suites run with host networking so that they can also probe the control
API with the function's key."""

import json
import shutil
import uuid

import pytest

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME
from s3_harness import JS_DIR, function_credentials, s3_client, s3_endpoint, vendored_boto3

PYTHON_APP = r'''
import hashlib
import io
import os
import urllib.request


def handler(event, context):
    for key, value in event.get("env", {}).items():
        os.environ.setdefault(key, value)
    import boto3
    import botocore.config
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3")  # everything from the environment
    bucket = event["bucket"]
    out = {"endpoint": s3.meta.endpoint_url, "region": s3.meta.region_name}
    s3.put_object(Bucket=bucket, Key="py/hello.txt", Body=b"hello from a sandbox", Metadata={"who": "python"})
    got = s3.get_object(Bucket=bucket, Key="py/hello.txt")
    out["get"] = got["Body"].read().decode()
    out["metadata"] = got["Metadata"]
    out["range"] = s3.get_object(Bucket=bucket, Key="py/hello.txt", Range="bytes=0-4")["Body"].read().decode()
    try:
        s3.get_object(Bucket=bucket, Key="py/hello.txt", IfNoneMatch=got["ETag"])
        out["conditional"] = "200"
    except ClientError as e:
        out["conditional"] = e.response["ResponseMetadata"]["HTTPStatusCode"]
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256)
    config = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    s3.upload_fileobj(io.BytesIO(data), bucket, "py/multipart", Config=config)
    back = io.BytesIO()
    s3.download_fileobj(bucket, "py/multipart", back, Config=config)
    out["multipart_etag"] = s3.head_object(Bucket=bucket, Key="py/multipart")["ETag"]
    out["multipart_ok"] = hashlib.sha256(back.getvalue()).hexdigest() == hashlib.sha256(data).hexdigest()
    out["keys"] = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="py/")["Contents"])
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "py/hello.txt"})
    out["presigned"] = urllib.request.urlopen(url).read().decode()
    s3.delete_object(Bucket=bucket, Key="py/multipart")
    # The same credentials against the Lambda control API.
    lam = boto3.client("lambda", endpoint_url=event["lambda_endpoint"],
                       config=botocore.config.Config(retries={"max_attempts": 0}))
    try:
        lam.list_functions()
        out["lambda"] = "allowed"
    except ClientError as e:
        out["lambda"] = e.response["Error"]["Code"]
    return out
'''

NODE_APP = r'''
import { S3Client } from "@aws-sdk/client-s3";
import { LambdaClientProbe } from "./probe.mjs";
import { runChecks } from "./s3_checks.mjs";

export const handler = async (event) => {
  for (const [key, value] of Object.entries(event.env ?? {})) process.env[key] ??= value;
  const client = new S3Client({}); // everything from the environment
  const result = await runChecks(client, { bucket: event.bucket });
  result.lambda = await LambdaClientProbe(event.lambda_endpoint);
  // The probe signs correctly: with the admin key (a test-only control) the same call works.
  result.lambda_control = await LambdaClientProbe(event.lambda_endpoint, event.control);
  result.endpoint = (await client.config.endpoint()).hostname;
  return result;
};
'''

# The JS SDK's Lambda client is not installed; signing a Lambda call with the S3 client's
# signer shows the same thing: the control API does not know the function's key.
NODE_PROBE = r'''
import { createHash, createHmac } from "node:crypto";
import { SignatureV4 } from "@smithy/signature-v4";

class Sha256 {
  constructor(secret) { this.hash = secret ? createHmac("sha256", secret) : createHash("sha256"); }
  update(data) { this.hash.update(data); }
  async digest() { return new Uint8Array(this.hash.digest()); }
}

/** The status of ListFunctions signed with `credentials` (default: the function's own). */
export async function LambdaClientProbe(endpoint, credentials) {
  const url = new URL("/2015-03-31/functions/", endpoint);
  const signer = new SignatureV4({
    credentials: credentials ?? { accessKeyId: process.env.AWS_ACCESS_KEY_ID, secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY },
    region: process.env.AWS_REGION, service: "lambda", sha256: Sha256,
  });
  const signed = await signer.sign({
    method: "GET", protocol: url.protocol, hostname: url.hostname, port: Number(url.port), path: url.pathname,
    query: {}, headers: { host: url.host },
  });
  const response = await fetch(url, { headers: signed.headers });
  return response.status;
}
'''


def invoke(kiln, name, event):
    response = kiln.client(read_timeout=300).invoke(FunctionName=name, Payload=json.dumps(event))
    payload = json.loads(response["Payload"].read())
    assert "FunctionError" not in response, payload
    return payload


def function_event(kiln, name, bucket):
    # Nothing but the bucket and where the control API is: kiln injects the store's environment.
    return {"bucket": bucket, "lambda_endpoint": kiln.endpoint}


def test_boto3_inside_a_function(kiln, tmp_path):
    name = f"s3-py-{uuid.uuid4().hex[:8]}"
    bucket = f"fn-{uuid.uuid4().hex[:12]}"
    s3_client(kiln).create_bucket(Bucket=bucket)
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(PYTHON_APP)
    vendored_boto3(code)
    kiln.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", str(code),
             "--memory", "512", "--timeout", "120", "--network", "host", timeout=180)
    out = invoke(kiln, name, function_event(kiln, name, bucket))
    assert out["endpoint"] == s3_endpoint(kiln) and out["region"] == kiln.region
    assert out["get"] == "hello from a sandbox" and out["metadata"] == {"who": "python"}
    assert out["range"] == "hello"
    assert out["conditional"] == 304
    assert out["multipart_ok"] and out["multipart_etag"].endswith('-3"')
    assert out["keys"] == ["py/hello.txt", "py/multipart"]
    assert out["presigned"] == "hello from a sandbox"
    assert out["lambda"] == "UnrecognizedClientException"
    # What the function wrote is in the store, for everyone with access.
    got = s3_client(kiln).get_object(Bucket=bucket, Key="py/hello.txt")
    assert got["Body"].read() == b"hello from a sandbox"


def test_js_sdk_inside_a_function(kiln, tmp_path):
    if not (JS_DIR / "node_modules" / "@aws-sdk" / "client-s3").is_dir():
        pytest.fail("tests/js has no node_modules: run scripts/setup-test-env.sh (npm ci)")
    name = f"s3-js-{uuid.uuid4().hex[:8]}"
    bucket = f"fn-{uuid.uuid4().hex[:12]}"
    code = tmp_path / "code"
    shutil.copytree(JS_DIR / "node_modules", code / "node_modules", symlinks=False)
    shutil.copy(JS_DIR / "s3_checks.mjs", code / "s3_checks.mjs")
    (code / "index.mjs").write_text(NODE_APP)
    (code / "probe.mjs").write_text(NODE_PROBE)
    kiln.cli("deploy", name, "--runtime", NODE_RUNTIME, "--handler", "index.handler", "--code", str(code),
             "--memory", "512", "--timeout", "120", "--network", "host", timeout=180)
    event = function_event(kiln, name, bucket)
    event["control"] = {"accessKeyId": kiln.access_key, "secretAccessKey": kiln.secret_key}
    out = invoke(kiln, name, event)
    assert out["failed"] == [], out["failed"]
    assert out["lambda_control"] == 200
    assert len(out["passed"]) == 12
    assert out["endpoint"] == "127.0.0.1"
    assert out["lambda"] == 403
    assert s3_client(kiln).head_object(Bucket=bucket, Key="multipart")["ETag"].endswith('-3"')


ISOLATED_APP = r'''
import os
import socket

import boto3
from botocore.exceptions import ClientError


def handler(event, context):
    s3 = boto3.client("s3")
    s3.put_object(Bucket=event["bucket"], Key="isolated.txt", Body=b"from an isolated sandbox")
    body = s3.get_object(Bucket=event["bucket"], Key="isolated.txt")["Body"].read().decode()
    other = boto3.client("s3", aws_access_key_id=event["other_key"], aws_secret_access_key=event["other_secret"])
    try:
        other.list_objects_v2(Bucket=event["bucket"])
        other_key = "accepted"
    except ClientError as e:
        other_key = e.response["Error"]["Code"]
    host, port = event["control"].rsplit(":", 1)
    try:
        socket.create_connection((host.split("//")[-1], int(port)), timeout=2).close()
        control = "reachable"
    except OSError:
        control = "unreachable"
    return {"endpoint": os.environ["AWS_ENDPOINT_URL_S3"], "key": os.environ["AWS_ACCESS_KEY_ID"],
            "body": body, "other_key": other_key, "control": control}
'''


def test_isolated_sandbox_gets_its_own_store_endpoint(kiln, tmp_path):
    name = f"s3-iso-{uuid.uuid4().hex[:8]}"
    bucket = f"fn-{uuid.uuid4().hex[:12]}"
    s3_client(kiln).create_bucket(Bucket=bucket)
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(ISOLATED_APP)
    vendored_boto3(code)
    kiln.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", str(code),
             "--memory", "256", "--timeout", "60", timeout=180)
    other_key, other_secret = function_credentials(kiln, "some-other-function")
    out = invoke(kiln, name, {"bucket": bucket, "other_key": other_key, "other_secret": other_secret,
                              "control": kiln.endpoint})
    access_key, _ = function_credentials(kiln, name)
    assert out["endpoint"] == "http://127.0.0.1:9000"
    assert out["key"] == access_key
    assert out["body"] == "from an isolated sandbox"
    # The listener in this sandbox accepts this function's key only.
    assert out["other_key"] in ("InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch")
    assert out["control"] == "unreachable"
    got = s3_client(kiln).get_object(Bucket=bucket, Key="isolated.txt")["Body"].read()
    assert got == b"from an isolated sandbox"
