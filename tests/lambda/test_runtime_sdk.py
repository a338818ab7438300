"""The runtimes provide the AWS SDK as Lambda's do: `import boto3` in python and
`@aws-sdk/client-s3` in nodejs (required or imported as an ES module) work without bundling
them, at the versions pinned in runtimes/sdk/, reaching kiln's object store with nothing but the
environment kiln injects; a function that bundles its own copy gets its own."""

import json
import os
import uuid
from pathlib import Path

import pytest

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME, ROOT
from s3_harness import s3_client

PINS = ROOT / "runtimes" / "sdk"
SDK_DIR = Path(os.environ.get("KILN_RUNTIME_SDK", "/usr/local/lib/kiln/runtime-sdk"))


def pinned_python(package):
    for line in (PINS / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{package}=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"{package} is not pinned")


def pinned_node(package):
    return json.loads((PINS / "package.json").read_text())["dependencies"][package]


@pytest.fixture
def bucket(kiln):
    name = f"sdk-{uuid.uuid4().hex[:12]}"
    s3_client(kiln).create_bucket(Bucket=name)
    return name


def invoke(kiln, name, event):
    payload, response = kiln.invoke(name, event)
    assert "FunctionError" not in response, payload
    return payload


PYTHON_APP = '''
import boto3, botocore

def handler(event, context):
    s3 = boto3.client("s3")
    s3.put_object(Bucket=event["bucket"], Key="from-python", Body=b"boto3 from the runtime")
    body = s3.get_object(Bucket=event["bucket"], Key="from-python")["Body"].read().decode()
    return {"boto3": boto3.__version__, "botocore": botocore.__version__, "file": boto3.__file__, "body": body}
'''


def test_python_functions_import_the_runtimes_boto3(kiln, bucket):
    name = f"sdk-py-{uuid.uuid4().hex[:8]}"
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": PYTHON_APP}, MemorySize=256, Timeout=60)
    out = invoke(kiln, name, {"bucket": bucket})
    assert out["boto3"] == pinned_python("boto3")
    assert out["botocore"] == pinned_python("botocore")
    assert out["file"].startswith("/var/runtime/")
    assert out["body"] == "boto3 from the runtime"


def test_a_bundled_boto3_wins_over_the_runtimes(kiln):
    name = f"sdk-py-own-{uuid.uuid4().hex[:8]}"
    files = {
        "app.py": "import boto3\ndef handler(event, context):\n    return {'boto3': boto3.__version__, 'file': boto3.__file__}\n",
        "boto3/__init__.py": "__version__ = 'bundled'\n",
    }
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files=files)
    assert invoke(kiln, name, {}) == {"boto3": "bundled", "file": "/var/task/boto3/__init__.py"}


NODE_CJS = '''
const { S3Client, PutObjectCommand, GetObjectCommand } = require("@aws-sdk/client-s3");
const { LambdaClient } = require("@aws-sdk/client-lambda");

exports.handler = async (event) => {
  const s3 = new S3Client({});
  await s3.send(new PutObjectCommand({ Bucket: event.bucket, Key: "from-node-cjs", Body: "sdk v3 from the runtime" }));
  const got = await s3.send(new GetObjectCommand({ Bucket: event.bucket, Key: "from-node-cjs" }));
  return {
    body: await got.Body.transformToString(),
    resolved: require.resolve("@aws-sdk/client-s3"),
    lambda: typeof LambdaClient,
  };
};
'''

NODE_ESM = '''
import { S3Client, PutObjectCommand, GetObjectCommand } from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";

export const handler = async (event) => {
  const s3 = new S3Client({});
  await new Upload({ client: s3, params: { Bucket: event.bucket, Key: "from-node-esm", Body: "imported" } }).done();
  const got = await s3.send(new GetObjectCommand({ Bucket: event.bucket, Key: "from-node-esm" }));
  return { body: await got.Body.transformToString(), resolved: import.meta.resolve("@aws-sdk/client-s3") };
};
'''


def test_node_functions_require_the_runtimes_sdk(kiln, bucket):
    name = f"sdk-cjs-{uuid.uuid4().hex[:8]}"
    kiln.deploy(name, NODE_RUNTIME, "index.handler", files={"index.js": NODE_CJS}, MemorySize=256, Timeout=60)
    out = invoke(kiln, name, {"bucket": bucket})
    assert out["body"] == "sdk v3 from the runtime"
    assert out["resolved"].startswith("/var/runtime/node_modules/@aws-sdk/client-s3/")
    assert out["lambda"] == "function"


def test_node_es_modules_import_the_runtimes_sdk(kiln, bucket):
    name = f"sdk-esm-{uuid.uuid4().hex[:8]}"
    kiln.deploy(name, NODE_RUNTIME, "index.handler", files={"index.mjs": NODE_ESM}, MemorySize=256, Timeout=60)
    out = invoke(kiln, name, {"bucket": bucket})
    assert out["body"] == "imported"
    assert "/node_modules/@aws-sdk/client-s3/" in out["resolved"]
    installed = json.loads(
        (SDK_DIR / "nodejs/node_modules/@aws-sdk/client-s3/package.json").read_text())
    assert installed["version"] == pinned_node("@aws-sdk/client-s3")


def test_a_bundled_node_sdk_wins_over_the_runtimes(kiln):
    name = f"sdk-node-own-{uuid.uuid4().hex[:8]}"
    files = {
        "index.js": "exports.handler = async () => require('@aws-sdk/client-s3').marker;\n",
        "node_modules/@aws-sdk/client-s3/package.json": '{"name": "@aws-sdk/client-s3", "main": "main.js"}',
        "node_modules/@aws-sdk/client-s3/main.js": "exports.marker = 'bundled';\n",
    }
    kiln.deploy(name, NODE_RUNTIME, "index.handler", files=files)
    assert invoke(kiln, name, {}) == "bundled"


def test_the_runtimes_sdk_is_read_only(kiln):
    name = f"sdk-ro-{uuid.uuid4().hex[:8]}"
    code = (
        "import os\n"
        "def handler(event, context):\n"
        "    try:\n"
        "        open('/var/runtime/boto3/__init__.py', 'a').close()\n"
        "        return 'written'\n"
        "    except OSError as e:\n"
        "        return e.strerror\n"
    )
    kiln.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": code})
    # Functions run as an unprivileged user on a read-only mount: either refusal will do.
    assert invoke(kiln, name, {}) in ("Read-only file system", "Permission denied")
