"""kiln's object store through the AWS SDK for JavaScript v3 (@aws-sdk/client-s3, lib-storage,
s3-request-presigner), path-style against the IP endpoint and virtual-host style against
`localhost`, the JS SDK's default for a host name."""

import json
import os
import subprocess
import urllib.parse
import uuid

import pytest

from s3_harness import JS_DIR, s3_endpoint


def run_checks(kiln, endpoint, virtual):
    if not (JS_DIR / "node_modules" / "@aws-sdk" / "client-s3").is_dir():
        pytest.fail("tests/js has no node_modules: run scripts/setup-test-env.sh (npm ci)")
    env = dict(
        os.environ,
        S3_ENDPOINT=endpoint,
        S3_BUCKET=f"js-{uuid.uuid4().hex[:12]}",
        S3_VIRTUAL="1" if virtual else "0",
        AWS_ACCESS_KEY_ID=kiln.access_key,
        AWS_SECRET_ACCESS_KEY=kiln.secret_key,
        AWS_REGION=kiln.region,
    )
    env.pop("AWS_PROFILE", None)
    done = subprocess.run(["node", "s3_test.mjs"], cwd=JS_DIR, env=env, capture_output=True, text=True,
                          timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from node:\n{done.stdout}\n{done.stderr}"
    result = json.loads(lines[-1])
    assert result["failed"] == [], result["failed"]
    assert done.returncode == 0, done.stderr
    return result


def test_js_sdk_path_style(kiln):
    result = run_checks(kiln, s3_endpoint(kiln), virtual=False)
    assert "presigned PUT and GET" in result["passed"]
    assert "streamed upload (aws-chunked with a trailing checksum)" in result["passed"]
    assert "versions, delete markers and CORS rules" in result["passed"]
    assert len(result["passed"]) == 13


def test_js_sdk_virtual_host_style(kiln):
    port = urllib.parse.urlsplit(s3_endpoint(kiln)).port
    result = run_checks(kiln, f"http://localhost:{port}", virtual=True)
    assert "addressing style" in result["passed"]
    assert len(result["passed"]) == 12
