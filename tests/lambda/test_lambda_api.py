"""The Lambda control and invoke API, driven with real boto3 against a real kiln.

Every test names its functions uniquely: the session's kiln is shared.
"""

import base64
import hashlib
import io
import json
import re
import time
import uuid
import zipfile

import boto3
import botocore.auth
import botocore.config
import botocore.awsrequest
import botocore.credentials
import botocore.exceptions
import pytest
import requests

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME, zip_files

ROLE = "arn:aws:iam::000000000000:role/test"

ECHO_PY = """
import json, os

def handler(event, context):
    print("echo-log", json.dumps(event))
    return {
        "event": event,
        "env": {k: v for k, v in os.environ.items() if k.startswith("USER_")},
        "memory": context.memory_limit_in_mb,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "function_name": context.function_name,
        "version": "v1",
    }
"""

ECHO_NODE = """
exports.handler = async (event, context) => {
  console.log("node-log", JSON.stringify(event));
  return { event, runtime: "node", function_name: context.functionName,
           memory: context.memoryLimitInMB, user: process.env.USER_K || null };
};
"""


def unvalidated_client(kiln):
    """A boto3 client that sends what it is given, so kiln's own validation is what answers."""
    return boto3.client(
        "lambda", endpoint_url=kiln.endpoint, region_name=kiln.region,
        aws_access_key_id=kiln.access_key, aws_secret_access_key=kiln.secret_key,
        config=botocore.config.Config(retries={"max_attempts": 0, "mode": "standard"},
                                      parameter_validation=False, read_timeout=60),
    )


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(kiln, name, files=None, runtime=PYTHON_RUNTIME, handler="app.handler", zip_bytes=None, **extra):
    lam = kiln.client()
    if zip_bytes is None:
        zip_bytes = zip_files(files if files is not None else {"app.py": ECHO_PY})
    return lam.create_function(
        FunctionName=name, Runtime=runtime, Role=ROLE, Handler=handler, Code={"ZipFile": zip_bytes}, **extra
    )


def invoke(kiln, name, event=None, **kwargs):
    lam = kiln.client()
    response = lam.invoke(FunctionName=name, Payload=json.dumps(event if event is not None else {}), **kwargs)
    body = response["Payload"].read()
    return (json.loads(body) if body else None), response


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def http_status(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def signed_request(kiln, method, path, body=b"", headers=None, service="lambda", secret=None, access_key=None):
    """Send a SigV4-signed request with `requests`, to see what boto3 hides."""
    url = kiln.endpoint + path
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    creds = botocore.credentials.Credentials(access_key or kiln.access_key, secret or kiln.secret_key)
    botocore.auth.SigV4Auth(creds, service, kiln.region).add_auth(request)
    return requests.request(method, url, data=body, headers=dict(request.headers.items()), timeout=60)


def assert_lambda_error(response, status, code):
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers.get("x-amzn-ErrorType", "").split(":")[0] == code, dict(response.headers)
    body = response.json()
    assert isinstance(body, dict)
    assert body.get("message") or body.get("Message"), body


# --- CreateFunction / GetFunction / GetFunctionConfiguration ----------------------------------


def test_create_and_get_function_shape(kiln):
    name = unique("shape")
    zip_bytes = zip_files({"app.py": ECHO_PY})
    created = create(kiln, name, zip_bytes=zip_bytes, Description="the shape test", MemorySize=256, Timeout=7)
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 201
    arn = f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    sha = base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()
    # Pending while its snapshot is built, as a new Lambda function is; then Active.
    assert created["State"] == "Pending" and created["StateReasonCode"] == "Creating", created
    assert created["StateReason"] == "The function is being created."
    kiln.client().get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    for config in (kiln.client().get_function(FunctionName=name)["Configuration"],
                   kiln.client().get_function_configuration(FunctionName=name)):
        assert config["FunctionName"] == name
        assert config["FunctionArn"] == arn
        assert config["Runtime"] == PYTHON_RUNTIME
        assert config["Handler"] == "app.handler"
        assert config["Role"] == ROLE
        assert config["Description"] == "the shape test"
        assert config["MemorySize"] == 256
        assert config["Timeout"] == 7
        assert config["CodeSize"] == len(zip_bytes)
        assert config["CodeSha256"] == sha
        assert config["State"] == "Active"
        assert config["LastUpdateStatus"] == "Successful"
        assert config["PackageType"] == "Zip"
        assert config["Version"] == "$LATEST"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+0000", config["LastModified"]), config["LastModified"]
    got = kiln.client().get_function(FunctionName=name)
    assert got["Code"]["RepositoryType"] == "S3"
    download = requests.get(got["Code"]["Location"], timeout=30)
    assert download.status_code == 200
    assert download.content == zip_bytes


def test_get_function_by_arn_and_qualifier(kiln):
    name = unique("byarn")
    create(kiln, name)
    arn = f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    lam = kiln.client()
    assert lam.get_function(FunctionName=arn)["Configuration"]["FunctionName"] == name
    assert lam.get_function_configuration(FunctionName=name, Qualifier="$LATEST")["FunctionName"] == name
    payload, response = invoke(kiln, arn, {"via": "arn"})
    assert payload["event"] == {"via": "arn"}


def code_url(kiln, location, expires):
    """A Code.Location for another expiry, signed the way kiln signs them (the test knows the secret)."""
    import hmac
    sha = re.search(r"/kiln/v1/code/([0-9a-f]{64})\.zip", location).group(1)
    token = hmac.new(kiln.secret_key.encode(), f"kiln-code:{sha}:{expires}".encode(), hashlib.sha256).hexdigest()
    return location.split("?")[0] + f"?expires={expires}&token={token}"


def test_code_location_is_presigned_and_expires(kiln):
    name = unique("codetoken")
    zip_bytes = zip_files({"app.py": ECHO_PY})
    create(kiln, name, zip_bytes=zip_bytes)
    location = kiln.client().get_function(FunctionName=name)["Code"]["Location"]
    expires = int(re.search(r"expires=(\d+)", location).group(1))
    assert 0 < expires - time.time() <= 600
    assert requests.get(location, timeout=30).content == zip_bytes
    # Re-signed the same way, a later expiry works and a past one does not.
    assert requests.get(code_url(kiln, location, int(time.time()) + 60), timeout=30).content == zip_bytes
    expired = requests.get(code_url(kiln, location, int(time.time()) - 1), timeout=30)
    assert_lambda_error(expired, 403, "AccessDeniedException")
    assert "expired" in expired.json()["message"]
    # Tampering with the expiry or the token is refused.
    tampered = re.sub(r"expires=\d+", f"expires={expires + 3600}", location)
    assert_lambda_error(requests.get(tampered, timeout=30), 403, "AccessDeniedException")
    tampered = re.sub(r"token=[0-9a-f]+", "token=" + "0" * 64, location)
    assert_lambda_error(requests.get(tampered, timeout=30), 403, "AccessDeniedException")
    assert_lambda_error(requests.get(location.split("?")[0], timeout=30), 403, "AccessDeniedException")


def test_nodejs_function(kiln):
    name = unique("node")
    create(kiln, name, files={"index.js": ECHO_NODE}, runtime=NODE_RUNTIME, handler="index.handler",
           Environment={"Variables": {"USER_K": "nv"}}, MemorySize=192)
    payload, response = invoke(kiln, name, {"n": 1}, LogType="Tail")
    assert response["StatusCode"] == 200
    assert payload == {"event": {"n": 1}, "runtime": "node", "function_name": name, "memory": "192", "user": "nv"} or \
        payload == {"event": {"n": 1}, "runtime": "node", "function_name": name, "memory": 192, "user": "nv"}
    tail = base64.b64decode(response["LogResult"]).decode()
    assert "node-log" in tail and "START RequestId" in tail and "REPORT RequestId" in tail


# --- ListFunctions ----------------------------------------------------------------------------


def test_list_functions_paginates(kiln):
    prefix = unique("list")
    names = sorted(f"{prefix}-{i}" for i in range(5))
    for n in names:
        create(kiln, n)
    lam = kiln.client()
    seen = []
    marker = None
    pages = 0
    while True:
        kwargs = {"MaxItems": 2}
        if marker:
            kwargs["Marker"] = marker
        page = lam.list_functions(**kwargs)
        pages += 1
        assert len(page["Functions"]) <= 2
        seen.extend(f["FunctionName"] for f in page["Functions"])
        marker = page.get("NextMarker")
        if not marker:
            break
        assert pages < 1000
    assert len(seen) == len(set(seen)), "a function was listed twice"
    ours = [n for n in seen if n.startswith(prefix)]
    assert ours == names
    assert pages >= 3
    # boto3's paginator, with a page size, sees the same set.
    paginator = lam.get_paginator("list_functions")
    listed = []
    for page in paginator.paginate(PaginationConfig={"PageSize": 2}):
        assert len(page["Functions"]) <= 2
        listed.extend(f["FunctionName"] for f in page["Functions"])
    assert len(listed) == len(set(listed))
    assert [n for n in listed if n.startswith(prefix)] == names
    # MaxItems on the paginator caps the total and hands back a resume token.
    first = paginator.paginate(PaginationConfig={"MaxItems": 3, "PageSize": 2}).build_full_result()
    assert len(first["Functions"]) == 3
    assert first.get("NextToken")
    full = lam.list_functions()
    assert {f["FunctionName"] for f in full["Functions"]} >= set(names) or full.get("NextMarker")


def test_list_functions_entries_have_configuration_shape(kiln):
    name = unique("listshape")
    create(kiln, name)
    for page in kiln.client().get_paginator("list_functions").paginate():
        for f in page["Functions"]:
            if f["FunctionName"] == name:
                assert f["FunctionArn"].endswith(f":function:{name}")
                assert f["Runtime"] == PYTHON_RUNTIME
                assert "CodeSha256" in f and "LastModified" in f
                return
    pytest.fail("function not listed")


def test_list_functions_bad_max_items(kiln):
    lam = unvalidated_client(kiln)
    for bad in (0, -1, 10001):
        with pytest.raises(lam.exceptions.InvalidParameterValueException):
            lam.list_functions(MaxItems=bad)


# --- UpdateFunctionCode / UpdateFunctionConfiguration -----------------------------------------


def test_update_function_code_runs_new_code(kiln):
    name = unique("updcode")
    create(kiln, name)
    payload, _ = invoke(kiln, name)
    assert payload["version"] == "v1"
    new_zip = zip_files({"app.py": ECHO_PY.replace('"v1"', '"v2"')})
    lam = kiln.client()
    updated = lam.update_function_code(FunctionName=name, ZipFile=new_zip)
    assert updated["CodeSha256"] == base64.b64encode(hashlib.sha256(new_zip).digest()).decode()
    assert updated["CodeSize"] == len(new_zip)
    # Until the update is done, the previous code answers (as on Lambda).
    kiln.settled(name)
    payload, _ = invoke(kiln, name)
    assert payload["version"] == "v2"
    location = lam.get_function(FunctionName=name)["Code"]["Location"]
    assert requests.get(location, timeout=30).content == new_zip


def test_update_function_configuration_is_visible_to_function(kiln):
    name = unique("updcfg")
    create(kiln, name, Environment={"Variables": {"USER_A": "1"}})
    payload, _ = invoke(kiln, name)
    assert payload["env"] == {"USER_A": "1"}
    assert payload["memory"] == "128" or payload["memory"] == 128
    lam = kiln.client()
    before = lam.get_function_configuration(FunctionName=name)
    updated = lam.update_function_configuration(
        FunctionName=name, MemorySize=512, Timeout=30, Description="changed",
        Environment={"Variables": {"USER_B": "two", "USER_C": "x=y"}},
    )
    assert updated["MemorySize"] == 512 and updated["Timeout"] == 30
    assert updated["Environment"]["Variables"] == {"USER_B": "two", "USER_C": "x=y"}
    assert updated["RevisionId"] != before["RevisionId"]
    assert updated["CodeSha256"] == before["CodeSha256"]
    payload, _ = invoke(kiln, name)
    assert payload["env"] == {"USER_B": "two", "USER_C": "x=y"}
    assert int(payload["memory"]) == 512
    assert 3000 < payload["remaining_ms"] <= 30000
    # Only what was given changes.
    lam.update_function_configuration(FunctionName=name, Timeout=10)
    config = lam.get_function_configuration(FunctionName=name)
    assert config["MemorySize"] == 512 and config["Timeout"] == 10 and config["Description"] == "changed"
    kiln.settled(name)
    # An empty Variables map clears the environment.
    lam.update_function_configuration(FunctionName=name, Environment={"Variables": {}})
    payload, _ = invoke(kiln, name)
    assert payload["env"] == {}


def test_update_configuration_handler(kiln):
    name = unique("updhandler")
    create(kiln, name, files={"app.py": "def a(e, c):\n    return 'a'\n\ndef b(e, c):\n    return 'b'\n"}, handler="app.a")
    assert invoke(kiln, name)[0] == "a"
    kiln.client().update_function_configuration(FunctionName=name, Handler="app.b")
    assert invoke(kiln, name)[0] == "b"


def test_update_configuration_validates(kiln):
    name = unique("updval")
    create(kiln, name)
    lam = unvalidated_client(kiln)
    for bad in ({"MemorySize": 64}, {"Timeout": 0}, {"Runtime": "cobol85"}):
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            lam.update_function_configuration(FunctionName=name, **bad)
        assert error_code(excinfo) == "ValidationException"
    for bad in ({"MemorySize": 20000}, {"Runtime": "ruby3.3"}, {"Environment": {"Variables": {"AWS_REGION": "x"}}}):
        with pytest.raises(lam.exceptions.InvalidParameterValueException):
            lam.update_function_configuration(FunctionName=name, **bad)
    assert lam.get_function_configuration(FunctionName=name)["MemorySize"] == 128
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.update_function_configuration(FunctionName=unique("nope"), Timeout=5)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.update_function_code(FunctionName=unique("nope"), ZipFile=zip_files({"app.py": ECHO_PY}))
    # A package is looked at only once the function is settled (a change before is refused with 409).
    kiln.settled(name)
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.update_function_code(FunctionName=name, ZipFile=b"not a zip")


# --- DeleteFunction ---------------------------------------------------------------------------


def test_delete_function(kiln):
    name = unique("delete")
    create(kiln, name)
    invoke(kiln, name)
    lam = kiln.client()
    response = lam.delete_function(FunctionName=name)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        invoke(kiln, name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function(FunctionName=name)
    # The name can be used again.
    create(kiln, name, files={"app.py": "def handler(e, c):\n    return 'again'\n"})
    assert invoke(kiln, name)[0] == "again"


def test_delete_function_with_a_qualifier_leaves_the_function(kiln):
    """As on Lambda: a qualifier names one version, never the whole function."""
    name = unique("delq")
    create(kiln, name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        lam.delete_function(FunctionName=name, Qualifier="$LATEST")
    assert "$LATEST version cannot be deleted without deleting the function" in str(excinfo.value)
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        lam.delete_function(FunctionName=f"{name}:$LATEST")
    assert http_status(excinfo) == 400
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.delete_function(FunctionName=name, Qualifier="prod")
    # A version that does not exist: nothing to delete, and nothing deleted.
    assert lam.delete_function(FunctionName=name, Qualifier="7")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert lam.delete_function(FunctionName=f"{name}:3")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert invoke(kiln, name, {"still": "here"})[0]["event"] == {"still": "here"}
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function(FunctionName=unique("nothere"), Qualifier="1")


def test_operations_infrastructure_tools_read_on_every_refresh(kiln):
    """ListVersionsByFunction and GetFunctionCodeSigningConfig, which a Terraform refresh calls."""
    name = unique("refresh")
    create(kiln, name)
    lam = kiln.client()
    versions = lam.list_versions_by_function(FunctionName=name)
    assert [v["Version"] for v in versions["Versions"]] == ["$LATEST"]
    assert versions["Versions"][0]["FunctionArn"] == f"arn:aws:lambda:us-east-1:000000000000:function:{name}:$LATEST"
    assert "NextMarker" not in versions
    paged = lam.get_paginator("list_versions_by_function").paginate(FunctionName=name, PaginationConfig={"PageSize": 1})
    assert [v["Version"] for page in paged for v in page["Versions"]] == ["$LATEST"]
    signing = lam.get_function_code_signing_config(FunctionName=name)
    assert "CodeSigningConfigArn" not in signing
    for call in (lambda: lam.list_versions_by_function(FunctionName=unique("nothere")),
                 lambda: lam.get_function_code_signing_config(FunctionName=unique("nothere"))):
        with pytest.raises(lam.exceptions.ResourceNotFoundException):
            call()


def test_account_settings_are_the_nodes_limits_and_its_functions_use(kiln):
    lam = kiln.client()
    before = lam.get_account_settings()
    limit = before["AccountLimit"]
    assert limit["CodeSizeZipped"] == 50 * 1024 * 1024 and limit["CodeSizeUnzipped"] == 262_144_000
    assert limit["TotalCodeSize"] == 80_530_636_800
    assert limit["ConcurrentExecutions"] >= limit["UnreservedConcurrentExecutions"] > 5
    name = unique("account")
    created = create(kiln, name)
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=5)
    after = lam.get_account_settings()
    assert after["AccountUsage"]["FunctionCount"] == before["AccountUsage"]["FunctionCount"] + 1
    assert after["AccountUsage"]["TotalCodeSize"] == before["AccountUsage"]["TotalCodeSize"] + created["CodeSize"]
    assert after["AccountLimit"]["UnreservedConcurrentExecutions"] == limit["UnreservedConcurrentExecutions"] - 5
    # A published version's code counts again, as on Lambda.
    lam.get_waiter("function_updated_v2").wait(FunctionName=name)
    lam.publish_version(FunctionName=name)
    published = lam.get_account_settings()["AccountUsage"]["TotalCodeSize"]
    assert published == after["AccountUsage"]["TotalCodeSize"] + created["CodeSize"]
    lam.delete_function(FunctionName=name)
    gone = lam.get_account_settings()
    assert (gone["AccountLimit"], gone["AccountUsage"]) == (before["AccountLimit"], before["AccountUsage"])


def test_architectures_are_the_hosts_or_refused(kiln):
    import platform
    host = "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    other = "x86_64" if host == "arm64" else "arm64"
    lam = unvalidated_client(kiln)
    name = unique("arch")
    created = create(kiln, name, Architectures=[host])
    assert created["Architectures"] == [host]
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        create(kiln, unique("arch"), Architectures=[other])
    assert host in str(excinfo.value) and other in str(excinfo.value)
    for wrong in ([host, other], ["sparc"], []):
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            lam.create_function(FunctionName=unique("arch"), Runtime=PYTHON_RUNTIME, Role=ROLE,
                                Handler="app.handler", Code={"ZipFile": zip_files({"app.py": ECHO_PY})},
                                Architectures=wrong)
        assert error_code(excinfo) == "ValidationException", wrong
        assert http_status(excinfo) == 400
        constraint = {1: "Member must satisfy constraint: [Member must satisfy enum value set: [x86_64, arm64]]",
                      2: "Member must have length less than or equal to 1",
                      0: "Member must have length greater than or equal to 1"}[len(wrong)]
        assert excinfo.value.response["Error"]["Message"] == (
            f"1 validation error detected: Value '[{', '.join(wrong)}]' at 'architectures' failed to satisfy "
            f"constraint: {constraint}")
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.update_function_code(FunctionName=name, ZipFile=zip_files({"app.py": ECHO_PY}), Architectures=[other])
    assert lam.get_function(FunctionName=name)["Configuration"]["Architectures"] == [host]


FOREIGN_ARNS = [
    "arn:aws:lambda:eu-west-1:000000000000:function:{}",
    "arn:aws:lambda:us-east-1:123456789012:function:{}",
    "123456789012:function:{}",
]


@pytest.mark.parametrize("arn", FOREIGN_ARNS, ids=["other-region", "other-account", "partial-other-account"])
def test_an_arn_of_another_region_or_account_names_no_local_function(kiln, arn):
    name = unique("foreign")
    create(kiln, name)
    lam = kiln.client()
    foreign = arn.format(name)
    for call in (lambda: lam.get_function(FunctionName=foreign),
                 lambda: lam.get_function_configuration(FunctionName=foreign),
                 lambda: lam.invoke(FunctionName=foreign, Payload=b"{}"),
                 lambda: lam.update_function_configuration(FunctionName=foreign, Timeout=9),
                 lambda: lam.delete_function(FunctionName=foreign)):
        with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
            call()
        assert http_status(excinfo) == 404
    # Untouched, and reachable by its own ARN in either form.
    assert lam.get_function(FunctionName=f"arn:aws:lambda:us-east-1:000000000000:function:{name}")
    assert lam.get_function(FunctionName=f"000000000000:function:{name}")["Configuration"]["Timeout"] == 3


def test_settings_kiln_does_not_act_on_are_kept_and_returned(fresh_kiln):
    """Tracing, logging, VPC, dead-letter and KMS settings, and an empty Environment, come back
    from every call in AWS's shape, across a restart, so that infrastructure tools see no drift."""
    server = fresh_kiln()
    lam = server.client()
    name = unique("settings")
    created = create(
        server, name,
        TracingConfig={"Mode": "Active"},
        LoggingConfig={"LogFormat": "JSON", "ApplicationLogLevel": "DEBUG", "LogGroup": "/custom/group"},
        VpcConfig={"SubnetIds": ["subnet-1", "subnet-2"], "SecurityGroupIds": ["sg-1"]},
        DeadLetterConfig={"TargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq"},
        KMSKeyArn="arn:aws:kms:us-east-1:000000000000:key/k",
        Environment={"Variables": {}},
    )
    expected = {
        "TracingConfig": {"Mode": "Active"},
        "LoggingConfig": {"LogFormat": "JSON", "ApplicationLogLevel": "DEBUG", "SystemLogLevel": "INFO",
                          "LogGroup": "/custom/group"},
        "VpcConfig": {"SubnetIds": ["subnet-1", "subnet-2"], "SecurityGroupIds": ["sg-1"], "VpcId": "",
                      "Ipv6AllowedForDualStack": False},
        "DeadLetterConfig": {"TargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq"},
        "KMSKeyArn": "arn:aws:kms:us-east-1:000000000000:key/k",
        "Environment": {"Variables": {}},
    }

    def check(config):
        for key, value in expected.items():
            assert config.get(key) == value, (key, config.get(key))
        assert re.fullmatch(r"arn:aws:lambda:us-east-1::runtime:[0-9a-f]{64}",
                            config["RuntimeVersionConfig"]["RuntimeVersionArn"])

    check(created)
    check(lam.get_function(FunctionName=name)["Configuration"])
    check(lam.get_function_configuration(FunctionName=name))
    check(next(f for f in lam.list_functions()["Functions"] if f["FunctionName"] == name))
    server.restart()
    lam = server.client()
    check(lam.get_function_configuration(FunctionName=name))
    assert invoke(server, name, {"a": 1})[0]["event"] == {"a": 1}

    updated = lam.update_function_configuration(
        FunctionName=name, TracingConfig={"Mode": "PassThrough"}, LoggingConfig={"LogFormat": "Text"},
        DeadLetterConfig={"TargetArn": ""}, KMSKeyArn="", Environment={"Variables": {"K": "V"}})
    assert updated["TracingConfig"] == {"Mode": "PassThrough"}
    assert updated["LoggingConfig"] == {"LogFormat": "Text", "LogGroup": "/custom/group"}
    assert "DeadLetterConfig" not in updated and "KMSKeyArn" not in updated
    assert updated["VpcConfig"] == expected["VpcConfig"]
    assert updated["Environment"] == {"Variables": {"K": "V"}}
    server.settled(name)
    assert lam.update_function_configuration(FunctionName=name, Environment={})["Environment"] == {"Variables": {}}

    plain_name = unique("plain")
    plain = create(server, plain_name)
    assert plain["TracingConfig"] == {"Mode": "PassThrough"}
    assert plain["LoggingConfig"] == {"LogFormat": "Text", "LogGroup": f"/aws/lambda/{plain_name}"}
    for absent in ("Environment", "VpcConfig", "DeadLetterConfig", "KMSKeyArn"):
        assert absent not in plain, absent


@pytest.mark.parametrize("override,field", [
    ({"TracingConfig": {"Mode": "Sometimes"}}, "tracingConfig.mode"),
    ({"LoggingConfig": {"LogFormat": "XML"}}, "loggingConfig.logFormat"),
    ({"LoggingConfig": {"LogFormat": "JSON", "SystemLogLevel": "TRACE"}}, "loggingConfig.systemLogLevel"),
    ({"KMSKeyArn": "my-key"}, "kMSKeyArn"),
    ({"DeadLetterConfig": {"TargetArn": "queue"}}, "deadLetterConfig.targetArn"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_settings_outside_lambdas_model_are_validation_errors(kiln, override, field):
    lam = unvalidated_client(kiln)
    name = unique("badsetting")
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.create_function(
            FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
            Code={"ZipFile": zip_files({"app.py": ECHO_PY})}, **override)
    assert error_code(excinfo) == "ValidationException"
    assert f"at '{field}' failed to satisfy constraint" in excinfo.value.response["Error"]["Message"]
    create(kiln, name)
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.update_function_configuration(FunctionName=name, **override)
    assert error_code(excinfo) == "ValidationException"


# --- Tags -------------------------------------------------------------------------------------


def test_tags_by_function_arn(kiln):
    lam = kiln.client()
    name = unique("tags")
    arn = create(kiln, name, Tags={"team": "a", "env": "dev"})["FunctionArn"]
    assert lam.list_tags(Resource=arn)["Tags"] == {"team": "a", "env": "dev"}
    got = lam.get_function(FunctionName=name)
    assert got["Tags"] == {"team": "a", "env": "dev"}
    revision = got["Configuration"]["RevisionId"]
    assert lam.tag_resource(Resource=arn, Tags={"team": "b", "cost": "1"})["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert lam.list_tags(Resource=arn)["Tags"] == {"team": "b", "env": "dev", "cost": "1"}
    lam.untag_resource(Resource=arn, TagKeys=["env", "not-there"])
    assert lam.list_tags(Resource=arn)["Tags"] == {"team": "b", "cost": "1"}
    # Plain tags change nothing else: no new revision.
    assert lam.get_function(FunctionName=name)["Configuration"]["RevisionId"] == revision
    assert create(kiln, unique("untagged"))  # and a function without tags has none
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.list_tags(Resource=arn.replace(name, unique("nothere")))
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.list_tags(Resource=name)
    assert error_code(excinfo) == "ValidationException"
    assert "at 'resource' failed to satisfy constraint" in str(excinfo.value)
    for bad in ({"aws:reserved": "x"}, {"k": "v" * 257}, {f"t{i}": "v" for i in range(49)}):
        with pytest.raises(lam.exceptions.InvalidParameterValueException):
            lam.tag_resource(Resource=arn, Tags=bad)
    assert lam.list_tags(Resource=arn)["Tags"] == {"team": "b", "cost": "1"}


def test_kiln_tags_set_kilns_extension_settings(kiln):
    """boto3's model refuses KilnPrebake and its siblings; `kiln:` tags set the same settings,
    through the same checks."""
    lam = kiln.client()
    name = unique("kilntags")
    arn = create(kiln, name, Tags={"kiln:prebake": "off", "kiln:warmup": "0",
                                   "kiln:session-hint": "header:x-session-id"})["FunctionArn"]

    def configuration():
        # boto3 drops what its model does not know: kiln's extensions are read raw.
        return kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()

    created = configuration()
    assert created["KilnPrebake"] == {"Mode": "off", "WarmupInvocations": 0}
    assert created["KilnSessions"]["Hint"] == "header:x-session-id"
    revision = created["RevisionId"]
    lam.tag_resource(Resource=arn, Tags={"kiln:memory-sizing": "booked", "kiln:session-placement": "spread"})
    config = configuration()
    assert config["KilnMemorySizing"] == "booked"
    assert config["KilnSessions"]["Placement"] == "spread"
    assert config["RevisionId"] != revision
    lam.untag_resource(Resource=arn, TagKeys=["kiln:session-hint", "kiln:prebake"])
    config = configuration()
    assert "KilnSessions" not in config
    assert config["KilnPrebake"] == {"Mode": "deploy", "WarmupInvocations": 0}
    assert invoke(kiln, name, {"tagged": True})[0]["event"] == {"tagged": True}

    # The same errors as the extension parameters.
    over = signed_request(kiln, "PUT", f"/2015-03-31/functions/{name}/configuration",
                          json.dumps({"KilnPrebake": {"WarmupInvocations": 101}}).encode())
    assert_lambda_error(over, 400, "InvalidParameterValueException")
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        lam.tag_resource(Resource=arn, Tags={"kiln:warmup": "101"})
    assert excinfo.value.response["Error"]["Message"] == over.json()["message"]
    for bad, needle in (({"kiln:session-hint": "body"}, "kilnSessions.hint"),
                        ({"kiln:prebake": "sometimes"}, "unknown variant"),
                        ({"kiln:session-ttl": "60"}, "kiln:session-hint"),
                        ({"kiln:no-such-setting": "1"}, "kiln:prebake")):
        with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
            lam.tag_resource(Resource=arn, Tags=bad)
        assert needle in excinfo.value.response["Error"]["Message"], bad
        with pytest.raises(lam.exceptions.InvalidParameterValueException):
            create(kiln, unique("kilntags"), Tags=bad)
    assert lam.list_tags(Resource=arn)["Tags"] == {"kiln:warmup": "0", "kiln:memory-sizing": "booked",
                                                   "kiln:session-placement": "spread"}


# --- Invoke -----------------------------------------------------------------------------------


def test_invoke_request_response(kiln):
    name = unique("rr")
    create(kiln, name)
    payload, response = invoke(kiln, name, {"k": [1, 2, {"x": None}]})
    assert response["StatusCode"] == 200
    assert "FunctionError" not in response
    assert response["ExecutedVersion"] == "$LATEST"
    assert payload["event"] == {"k": [1, 2, {"x": None}]}
    assert payload["function_name"] == name
    assert "LogResult" not in response


def test_invoke_empty_payload_is_empty_object(kiln):
    name = unique("emptypayload")
    create(kiln, name)
    response = kiln.client().invoke(FunctionName=name)
    assert json.loads(response["Payload"].read())["event"] == {}


def test_invoke_scalar_payloads(kiln):
    name = unique("scalar")
    create(kiln, name, files={"app.py": "def handler(e, c):\n    return e\n"})
    for value in ("a string", 42, [1, "2"], None, True):
        payload, response = invoke(kiln, name, value)
        assert payload == value if value is not None else payload in (None, {})


def test_invoke_event_returns_202(kiln):
    name = unique("event")
    create(kiln, name)
    response = kiln.client().invoke(FunctionName=name, InvocationType="Event", Payload=b'{"a": 1}')
    assert response["StatusCode"] == 202
    assert response["Payload"].read() == b""
    assert response["ResponseMetadata"]["RequestId"]


def test_invoke_dry_run_returns_204(kiln):
    name = unique("dryrun")
    create(kiln, name)
    response = kiln.client().invoke(FunctionName=name, InvocationType="DryRun")
    assert response["StatusCode"] == 204
    with pytest.raises(kiln.client().exceptions.ResourceNotFoundException):
        kiln.client().invoke(FunctionName=unique("nope"), InvocationType="DryRun")


def test_invoke_log_tail(kiln):
    name = unique("tail")
    create(kiln, name)
    payload, response = invoke(kiln, name, {"marker": "tail-marker-123"}, LogType="Tail")
    assert response["StatusCode"] == 200
    tail = base64.b64decode(response["LogResult"]).decode()
    lines = tail.splitlines()
    request_id = response["ResponseMetadata"]["RequestId"]
    assert any(line.startswith("START RequestId:") for line in lines), tail
    assert any(line.startswith("END RequestId:") for line in lines), tail
    assert any(line.startswith("REPORT RequestId:") for line in lines), tail
    assert "tail-marker-123" in tail
    assert request_id in tail


def test_invoke_log_tail_is_capped_at_4kb(kiln):
    name = unique("bigtail")
    create(kiln, name, files={"app.py": "def handler(e, c):\n    for i in range(2000):\n        print('line', i, 'x' * 20)\n    return 1\n"})
    _, response = invoke(kiln, name, LogType="Tail")
    tail = base64.b64decode(response["LogResult"])
    assert len(tail) <= 4096
    assert b"REPORT RequestId" in tail


def test_invoke_context_and_request_id(kiln):
    name = unique("ctx")
    create(kiln, name, files={"app.py": (
        "def handler(e, c):\n"
        "    return {'rid': c.aws_request_id, 'arn': c.invoked_function_arn, 'ver': c.function_version,\n"
        "            'group': c.log_group_name}\n")})
    payload, response = invoke(kiln, name)
    assert payload["rid"] == response["ResponseMetadata"]["RequestId"]
    assert payload["arn"] == f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    assert payload["ver"] == "$LATEST"
    assert payload["group"] == f"/aws/lambda/{name}"


# --- Concurrency ------------------------------------------------------------------------------


def test_function_concurrency_calls(kiln):
    name = unique("conc")
    create(kiln, name)
    lam = kiln.client()
    assert "ReservedConcurrentExecutions" not in lam.get_function_concurrency(FunctionName=name)
    put = lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=3)
    assert put["ReservedConcurrentExecutions"] == 3
    assert lam.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 3
    assert lam.get_function(FunctionName=name)["Concurrency"]["ReservedConcurrentExecutions"] == 3
    invoke(kiln, name)
    response = lam.delete_function_concurrency(FunctionName=name)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert "ReservedConcurrentExecutions" not in lam.get_function_concurrency(FunctionName=name)
    assert "Concurrency" not in lam.get_function(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.put_function_concurrency(FunctionName=unique("nope"), ReservedConcurrentExecutions=1)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_concurrency(FunctionName=unique("nope"))
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function_concurrency(FunctionName=unique("nope"))


def test_zero_reserved_concurrency_throttles_every_invoke(kiln):
    name = unique("zero")
    create(kiln, name)
    lam = kiln.client()
    invoke(kiln, name)
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    for _ in range(3):
        with pytest.raises(lam.exceptions.TooManyRequestsException) as excinfo:
            invoke(kiln, name)
        assert http_status(excinfo) == 429
        assert excinfo.value.response.get("Reason") == "ReservedFunctionConcurrentInvocationLimitExceeded"
    raw = signed_request(kiln, "POST", f"/2015-03-31/functions/{name}/invocations", b"{}")
    assert_lambda_error(raw, 429, "TooManyRequestsException")
    lam.delete_function_concurrency(FunctionName=name)
    assert invoke(kiln, name)[1]["StatusCode"] == 200


def test_reserved_concurrency_survives_configuration_update(kiln):
    name = unique("concupd")
    create(kiln, name)
    kiln.settled(name)
    lam = kiln.client()
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    lam.update_function_configuration(FunctionName=name, Timeout=9)
    kiln.settled(name)
    lam.update_function_code(FunctionName=name, ZipFile=zip_files({"app.py": ECHO_PY + "\n"}))
    assert lam.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 0
    with pytest.raises(lam.exceptions.TooManyRequestsException):
        invoke(kiln, name)


def test_put_concurrency_invalid(kiln):
    name = unique("concbad")
    create(kiln, name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=1_000_000)


# --- Function URL configuration ---------------------------------------------------------------


def test_function_url_config_lifecycle(kiln):
    name = unique("urlcfg")
    create(kiln, name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name)
    created = lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert created["AuthType"] == "NONE"
    assert created["FunctionArn"] == f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    assert created["FunctionUrl"].endswith("/")
    assert created["CreationTime"]
    got = lam.get_function_url_config(FunctionName=name)
    assert got["FunctionUrl"] == created["FunctionUrl"]
    assert got["AuthType"] == "NONE"
    assert got["CreationTime"] == created["CreationTime"]
    with pytest.raises(lam.exceptions.ResourceConflictException):
        lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    updated = lam.update_function_url_config(FunctionName=name, AuthType="AWS_IAM")
    assert updated["AuthType"] == "AWS_IAM"
    assert updated["FunctionUrl"] == created["FunctionUrl"]
    assert lam.get_function_url_config(FunctionName=name)["AuthType"] == "AWS_IAM"
    response = lam.delete_function_url_config(FunctionName=name)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function_url_config(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.update_function_url_config(FunctionName=name, AuthType="NONE")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.create_function_url_config(FunctionName=unique("nope"), AuthType="NONE")


def test_function_url_creation_time_is_stable(kiln):
    name = unique("urltime")
    create(kiln, name)
    lam = kiln.client()
    created = lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    kiln.settled(name)
    lam.update_function_configuration(FunctionName=name, Timeout=11)
    time.sleep(0.01)
    updated = lam.update_function_url_config(FunctionName=name, AuthType="AWS_IAM")
    assert updated["CreationTime"] == created["CreationTime"]
    assert lam.get_function_url_config(FunctionName=name)["CreationTime"] == created["CreationTime"]


def test_function_url_config_has_invoke_mode(kiln):
    name = unique("urlmode")
    create(kiln, name)
    lam = kiln.client()
    created = lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    assert created.get("InvokeMode") == "BUFFERED"
    assert lam.get_function_url_config(FunctionName=name).get("InvokeMode") == "BUFFERED"


def test_function_url_config_bad_auth_type(kiln):
    name = unique("urlbad")
    create(kiln, name)
    raw = signed_request(kiln, "POST", f"/2021-10-31/functions/{name}/url", json.dumps({"AuthType": "SOMETIMES"}).encode())
    assert raw.status_code == 400
    assert raw.headers.get("x-amzn-ErrorType")
    assert raw.json()


def test_function_url_config_qualifier_is_an_alias_or_nothing(kiln):
    """A function URL belongs to the function or to an alias. AWS's pattern for the qualifier
    refuses `$LATEST` and version numbers (ValidationException); a qualifier naming no alias
    of the function names nothing (404), and no URL appears on the plain function meanwhile
    (alias URLs: test_urls_qualified.py)."""
    name = unique("urlqual")
    create(kiln, name)
    lam = kiln.client()

    def calls(**target):
        return [
            lambda: lam.create_function_url_config(AuthType="NONE", **target),
            lambda: lam.get_function_url_config(**target),
            lambda: lam.update_function_url_config(AuthType="AWS_IAM", **target),
            lambda: lam.delete_function_url_config(**target),
        ]

    for qualifier in ("$LATEST", "1", "42"):
        # As the Qualifier parameter, and in the name (whose pattern, FunctionUrlFunctionName,
        # refuses the same).
        for target, value, field, pattern in (
                ({"FunctionName": name, "Qualifier": qualifier}, qualifier, "qualifier",
                 "((?!^\\d+$)^[0-9a-zA-Z-_]+$)"),
                ({"FunctionName": f"{name}:{qualifier}"}, f"{name}:{qualifier}", "functionName", URL_NAME_PATTERN)):
            for call in calls(**target):
                with pytest.raises(botocore.exceptions.ClientError) as excinfo:
                    call()
                assert error_code(excinfo) == "ValidationException", (qualifier, target)
                assert http_status(excinfo) == 400
                assert excinfo.value.response["Error"]["Message"] == (
                    f"1 validation error detected: Value '{value}' at '{field}' failed to satisfy "
                    f"constraint: Member must satisfy regular expression pattern: {pattern}"
                )
    for target in ({"FunctionName": name, "Qualifier": "prod"}, {"FunctionName": f"{name}:prod"}):
        for call in calls(**target):
            with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
                call()
            assert http_status(excinfo) == 404
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.create_function_url_config(FunctionName=unique("nope"), Qualifier="prod", AuthType="NONE")
    # The plain function's URL is unaffected by the refused calls.
    lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function_url_config(FunctionName=name, Qualifier="prod")
    assert lam.get_function_url_config(FunctionName=name)["AuthType"] == "NONE"


def test_deleting_a_function_deletes_its_url(kiln):
    name = unique("urldel")
    create(kiln, name)
    lam = kiln.client()
    lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    lam.delete_function(FunctionName=name)
    create(kiln, name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name)


# --- Errors -----------------------------------------------------------------------------------


def test_missing_function_is_404(kiln):
    lam = kiln.client()
    name = unique("missing")
    for call in (lambda: lam.get_function(FunctionName=name),
                 lambda: lam.get_function_configuration(FunctionName=name),
                 lambda: lam.invoke(FunctionName=name, Payload=b"{}"),
                 lambda: lam.invoke(FunctionName=name, InvocationType="Event", Payload=b"{}"),
                 lambda: lam.delete_function(FunctionName=name)):
        with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
            call()
        assert http_status(excinfo) == 404
        assert name in str(excinfo.value)


def test_unknown_qualifier_is_404(kiln):
    name = unique("qual")
    create(kiln, name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.invoke(FunctionName=name, Qualifier="prod", Payload=b"{}")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name, Qualifier="7")


def test_create_twice_is_409(kiln):
    name = unique("twice")
    create(kiln, name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.ResourceConflictException) as excinfo:
        create(kiln, name)
    assert http_status(excinfo) == 409


VALIDATION = "ValidationException"
INVALID = "InvalidParameterValueException"


@pytest.mark.parametrize("override,code,message", [
    # Outside Lambda's API model: its ValidationException, with the model's constraint.
    ({"MemorySize": 64}, VALIDATION,
     "1 validation error detected: Value '64' at 'memorySize' failed to satisfy constraint: "
     "Member must have value greater than or equal to 128"),
    ({"Timeout": 0}, VALIDATION,
     "1 validation error detected: Value '0' at 'timeout' failed to satisfy constraint: "
     "Member must have value greater than or equal to 1"),
    ({"EphemeralStorage": {"Size": 100}}, VALIDATION,
     "1 validation error detected: Value '100' at 'ephemeralStorage.size' failed to satisfy constraint: "
     "Member must have value greater than or equal to 512"),
    ({"Handler": ""}, VALIDATION,
     "1 validation error detected: Value '' at 'handler' failed to satisfy constraint: "
     "Member must satisfy regular expression pattern: [^\\s]+"),
    ({"Handler": "has space"}, VALIDATION, None),
    ({"Handler": "h" * 129}, VALIDATION, None),
    ({"Description": "d" * 257}, VALIDATION, None),
    # Within the model, beyond what Lambda runs (or what kiln has): InvalidParameterValueException.
    ({"MemorySize": 20000}, INVALID, None),
    ({"Timeout": 901}, INVALID, None),
    ({"EphemeralStorage": {"Size": 20000}}, INVALID, None),
    ({"Runtime": "python2.0"}, VALIDATION,
     "1 validation error detected: Value 'python2.0' at 'runtime' failed to satisfy constraint: "
     "Member must satisfy enum value set: [nodejs, nodejs4.3, "),
    ({"Runtime": ""}, VALIDATION, None),
    ({"Runtime": "ruby3.3"}, INVALID, None),
    ({"Environment": {"Variables": {"AWS_REGION": "eu-west-1"}}}, INVALID, None),
    ({"Environment": {"Variables": {"AWS_LAMBDA_FUNCTION_NAME": "x"}}}, INVALID, None),
    ({"Environment": {"Variables": {"1BAD": "x"}}}, INVALID, None),
    ({"Environment": {"Variables": {"BIG": "x" * 5000}}}, INVALID, None),
], ids=lambda o: (next(iter(o)) + "=" + str(next(iter(o.values())))[:20]) if isinstance(o, dict) else None)
def test_invalid_create_parameters_are_400(kiln, override, code, message):
    lam = unvalidated_client(kiln)
    params = dict(FunctionName=unique("invalid"), Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                  Code={"ZipFile": zip_files({"app.py": ECHO_PY})})
    params.update(override)
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.create_function(**params)
    assert error_code(excinfo) == code
    assert http_status(excinfo) == 400
    assert excinfo.value.response["Error"]["Message"].startswith(message) if message else excinfo.value.response["Error"]["Message"]
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=params["FunctionName"])


def test_every_violation_of_the_model_is_reported_at_once(kiln):
    lam = unvalidated_client(kiln)
    name = unique("violations")
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role="my-role", Handler="",
                            MemorySize=64, Timeout=0, Code={"ZipFile": zip_files({"app.py": ECHO_PY})})
    assert error_code(excinfo) == VALIDATION and http_status(excinfo) == 400
    message = excinfo.value.response["Error"]["Message"]
    assert message.startswith("4 validation errors detected: Value 'my-role' at 'role' failed to satisfy constraint: ")
    for field in ("role", "handler", "memorySize", "timeout"):
        assert f"at '{field}' failed to satisfy constraint" in message, message
    assert message.count("; Value '") == 3, message
    # An update is checked the same way, as the function it would make.
    create(kiln, name)
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.update_function_configuration(FunctionName=name, MemorySize=64, Timeout=0)
    assert excinfo.value.response["Error"]["Message"].startswith("2 validation errors detected: Value '64' at 'memorySize'")


# botocore's model of the Lambda API (the service's own): each operation's pattern.
REGION_ACCOUNT = r"(arn:(aws[a-zA-Z-]*)?:lambda:)?((eusc-)?[a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\d{1}:)?(\d{12}:)?(function:)?"
NAME_PATTERN = REGION_ACCOUNT + r"([a-zA-Z0-9-_]+)(:(\$LATEST|[a-zA-Z0-9-_]+))?"
NAMESPACED_PATTERN = REGION_ACCOUNT + r"([a-zA-Z0-9-_\.]+)(:(\$LATEST(\.PUBLISHED)?|[a-zA-Z0-9-_]+))?"
URL_NAME_PATTERN = REGION_ACCOUNT + r"([a-zA-Z0-9-_]{1,64})(:((?!\d+$)[0-9a-zA-Z-_]+))?"


def name_calls(lam, name):
    """Each operation taking a FunctionName, with the pattern its model checks it against."""
    code = {"ZipFile": zip_files({"app.py": ECHO_PY})}
    return {
        "create": (NAME_PATTERN, lambda: lam.create_function(
            FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler", Code=code)),
        "update-configuration": (NAME_PATTERN, lambda: lam.update_function_configuration(FunctionName=name, Timeout=5)),
        "update-code": (NAME_PATTERN, lambda: lam.update_function_code(FunctionName=name, ZipFile=code["ZipFile"])),
        "concurrency": (NAME_PATTERN, lambda: lam.put_function_concurrency(
            FunctionName=name, ReservedConcurrentExecutions=1)),
        "get-concurrency": (NAME_PATTERN, lambda: lam.get_function_concurrency(FunctionName=name)),
        "get": (NAMESPACED_PATTERN, lambda: lam.get_function(FunctionName=name)),
        "get-configuration": (NAMESPACED_PATTERN, lambda: lam.get_function_configuration(FunctionName=name)),
        "invoke": (NAMESPACED_PATTERN, lambda: lam.invoke(FunctionName=name, Payload=b"{}")),
        "delete": (NAMESPACED_PATTERN, lambda: lam.delete_function(FunctionName=name)),
        "url-config": (URL_NAME_PATTERN, lambda: lam.get_function_url_config(FunctionName=name)),
    }


@pytest.mark.parametrize("name", ["bad name!", "a:b:c:d:e", "f:", "x" * 65],
                         ids=["space", "too-many-parts", "empty-qualifier", "65-chars"])
def test_malformed_function_names_are_validation_errors(kiln, name):
    """AWS checks a FunctionName against its input model first: 400 ValidationException with
    the operation's pattern, never InvalidParameterValueException and never 404."""
    lam = unvalidated_client(kiln)
    for call_name, (pattern, call) in name_calls(lam, name).items():
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            call()
        assert error_code(excinfo) == "ValidationException", call_name
        assert http_status(excinfo) == 400, call_name
        too_long = len(name) > 64 and call_name != "url-config"
        constraint = ("Member must have length less than or equal to 64" if too_long
                      else "Member must satisfy regular expression pattern: " + pattern)
        assert excinfo.value.response["Error"]["Message"] == (
            f"1 validation error detected: Value '{name}' at 'functionName' failed to satisfy constraint: {constraint}"
        ), call_name


def test_a_dotted_name_is_malformed_only_where_the_model_says_so(kiln):
    """GetFunction, Invoke and DeleteFunction take a `NamespacedFunctionName`, which allows dots:
    there a dotted name is a function that does not exist."""
    lam = unvalidated_client(kiln)
    name = "arn:aws:lambda:us-east-1:000000000000:function:bad.name"
    for call_name, (pattern, call) in name_calls(lam, name).items():
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            call()
        if pattern == NAMESPACED_PATTERN:
            assert error_code(excinfo) == "ResourceNotFoundException", call_name
            assert http_status(excinfo) == 404
        else:
            assert error_code(excinfo) == "ValidationException", call_name
            assert excinfo.value.response["Error"]["Message"].endswith(pattern), call_name


@pytest.mark.parametrize("form", [
    "arn:aws:lambda:us-east-1:000000000000:function:{}",
    "000000000000:function:{}",
], ids=["full-arn", "partial-arn"])
def test_create_function_takes_a_full_or_partial_arn(kiln, form):
    name = unique("byarn")
    created = create(kiln, form.format(name))
    assert created["FunctionName"] == name
    assert created["FunctionArn"] == f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    assert kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionName"] == name
    with pytest.raises(kiln.client().exceptions.ResourceConflictException):
        create(kiln, name)


ROLE_PATTERN = "arn:(aws[a-zA-Z-]*)?:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+"


def test_role_must_be_an_iam_role_arn(kiln):
    lam = unvalidated_client(kiln)
    for role in ("my-role", "arn:aws:iam::000000000000:user/someone", "arn:aws:iam::123:role/r"):
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            lam.create_function(FunctionName=unique("role"), Runtime=PYTHON_RUNTIME, Role=role,
                                Handler="app.handler", Code={"ZipFile": zip_files({"app.py": ECHO_PY})})
        assert error_code(excinfo) == "ValidationException", role
        assert http_status(excinfo) == 400
        assert excinfo.value.response["Error"]["Message"] == (
            f"1 validation error detected: Value '{role}' at 'role' failed to satisfy constraint: "
            f"Member must satisfy regular expression pattern: {ROLE_PATTERN}")
    name = unique("role")
    create(kiln, name)
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.update_function_configuration(FunctionName=name, Role="my-role")
    assert error_code(excinfo) == "ValidationException"
    other = "arn:aws:iam::000000000000:role/service-role/other"
    kiln.settled(name)
    assert lam.update_function_configuration(FunctionName=name, Role=other)["Role"] == other


def test_environment_limit_is_4kb_of_the_variables_json(kiln):
    """Lambda measures the JSON of the Variables map (`{"K":"V"}`), not the keys and values alone."""
    lam = unvalidated_client(kiln)

    def measured(variables):
        return len(json.dumps(variables, separators=(",", ":")))

    exactly = {"K": "v" * (4096 - len('{"K":""}'))}
    assert measured(exactly) == 4096
    name = unique("env4k")
    assert create(kiln, name, Environment={"Variables": exactly})["Environment"]["Variables"] == exactly
    one_over = {"K": exactly["K"] + "v"}
    # Keys and values alone are 2520 bytes; their JSON is over 4 KB.
    many = {f"V{i:03}": "ab" for i in range(420)}
    assert sum(len(k) + len(v) for k, v in many.items()) < 4096 < measured(many)
    for variables in (one_over, many):
        with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
            lam.update_function_configuration(FunctionName=name, Environment={"Variables": variables})
        message = excinfo.value.response["Error"]["Message"]
        assert "exceeded the 4KB limit" in message
        assert message.endswith("String measured: " + json.dumps(variables, separators=(",", ":")))
    assert lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"] == exactly


def zip_of_size(unzipped_bytes):
    """A zip of app.py and zeros, unzipping to exactly `unzipped_bytes`."""
    app = ECHO_PY.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("app.py", app)
        with zf.open("zeros.bin", "w", force_zip64=True) as out:
            left = unzipped_bytes - len(app)
            chunk = bytes(1024 * 1024)
            while left:
                n = min(left, len(chunk))
                out.write(chunk[:n])
                left -= n
    return buf.getvalue()


def test_unzipped_size_must_be_smaller_than_262144000_bytes(kiln):
    lam = kiln.client()
    limit = 262_144_000
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        create(kiln, unique("unzipped"), zip_bytes=zip_of_size(limit))
    assert excinfo.value.response["Error"]["Message"] == "Unzipped size must be smaller than 262144000 bytes"
    name = unique("unzipped")
    create(kiln, name, zip_bytes=zip_of_size(limit - 1))
    # Extracting 250 MB may take longer than an invocation waits for a Pending function.
    lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 300})
    assert invoke(kiln, name, {"k": 1})[0]["event"] == {"k": 1}
    lam.delete_function(FunctionName=name)


def test_function_name_of_64_chars_is_fine(kiln):
    name = ("ok64-" + uuid.uuid4().hex + "x" * 64)[:64]
    create(kiln, name)
    assert kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionName"] == name


def zip_with_entries(entries):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for entry_name, data in entries:
            zf.writestr(entry_name, data)
    return buf.getvalue()


@pytest.mark.parametrize("zip_bytes", [
    b"this is not a zip file",
    b"",
    zip_with_entries([]),
    zip_with_entries([("../evil", "x"), ("app.py", ECHO_PY)]),
    zip_with_entries([("/etc/evil", "x")]),
    zip_with_entries([("app.py", ECHO_PY)])[:-30],
], ids=["garbage", "zero-bytes", "no-entries", "dotdot-entry", "absolute-entry", "truncated"])
def test_bad_zip_is_400(kiln, zip_bytes):
    lam = unvalidated_client(kiln)
    name = unique("badzip")
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        create(kiln, name, zip_bytes=zip_bytes)
    assert http_status(excinfo) == 400
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name)


def test_missing_code_is_400(kiln):
    lam = kiln.client()
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.create_function(FunctionName=unique("nocode"), Runtime=PYTHON_RUNTIME, Role=ROLE,
                            Handler="app.handler", Code={})


def test_sync_payload_over_6mb_is_413(kiln):
    name = unique("big")
    create(kiln, name)
    lam = kiln.client()
    big = json.dumps({"data": "x" * (7 * 1024 * 1024)})
    with pytest.raises(lam.exceptions.RequestTooLargeException) as excinfo:
        lam.invoke(FunctionName=name, Payload=big)
    assert http_status(excinfo) == 413


def test_event_payload_over_256kb_is_413(kiln):
    name = unique("bigevent")
    create(kiln, name)
    lam = kiln.client()
    big = json.dumps({"data": "x" * (300 * 1024)})
    with pytest.raises(lam.exceptions.RequestTooLargeException) as excinfo:
        lam.invoke(FunctionName=name, InvocationType="Event", Payload=big)
    assert http_status(excinfo) == 413
    # The same payload is fine synchronously.
    payload, response = invoke(kiln, name, {"data": "x" * (300 * 1024)})
    assert response["StatusCode"] == 200


def test_non_json_payload_is_400(kiln):
    name = unique("nonjson")
    create(kiln, name)
    lam = kiln.client()
    for bad in (b"not json", b"{unterminated", b"\xff\xfe"):
        with pytest.raises(lam.exceptions.InvalidRequestContentException) as excinfo:
            lam.invoke(FunctionName=name, Payload=bad)
        assert http_status(excinfo) == 400
    with pytest.raises(lam.exceptions.InvalidRequestContentException):
        lam.invoke(FunctionName=name, InvocationType="Event", Payload=b"nope")


def test_function_error_is_200_unhandled(kiln):
    name = unique("raises")
    create(kiln, name, files={"app.py": (
        "class CustomError(Exception):\n    pass\n\n"
        "def handler(e, c):\n    print('about to fail')\n    raise CustomError('it broke: ' + e['why'])\n")})
    payload, response = invoke(kiln, name, {"why": "on purpose"}, LogType="Tail")
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorMessage"] == "it broke: on purpose"
    assert payload["errorType"] == "CustomError"
    assert isinstance(payload["stackTrace"], list) and payload["stackTrace"]
    tail = base64.b64decode(response["LogResult"]).decode()
    assert "about to fail" in tail
    assert "REPORT RequestId" in tail
    # The instance is still usable afterwards.
    payload, response = invoke(kiln, name, {"why": "again"})
    assert payload["errorMessage"] == "it broke: again"


def test_node_function_error(kiln):
    name = unique("noderaises")
    create(kiln, name, runtime=NODE_RUNTIME, handler="index.handler", files={
        "index.js": "exports.handler = async () => { throw new TypeError('bad type'); };\n"})
    payload, response = invoke(kiln, name)
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "TypeError"
    assert payload["errorMessage"] == "bad type"
    # As Lambda's Node runtime: `trace`, where its Python runtime says `stackTrace`.
    assert isinstance(payload["trace"], list) and payload["trace"][0] == "TypeError: bad type"
    assert "stackTrace" not in payload


def test_handler_not_found(kiln):
    name = unique("nohandler")
    create(kiln, name, handler="app.nope")
    payload, response = invoke(kiln, name)
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "Runtime.HandlerNotFound"
    assert "nope" in payload["errorMessage"]


def test_node_handler_not_found(kiln):
    name = unique("nodenohandler")
    create(kiln, name, files={"index.js": ECHO_NODE}, runtime=NODE_RUNTIME, handler="index.nope")
    payload, response = invoke(kiln, name)
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "Runtime.HandlerNotFound"


def test_import_module_error(kiln):
    name = unique("importerr")
    create(kiln, name, files={"app.py": "import no_such_module_kiln\n\ndef handler(e, c):\n    return 1\n"})
    payload, response = invoke(kiln, name)
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "Runtime.ImportModuleError"
    assert "no_such_module_kiln" in payload["errorMessage"]
    name2 = unique("nomodule")
    create(kiln, name2, handler="missing.handler")
    payload, response = invoke(kiln, name2)
    assert payload["errorType"] == "Runtime.ImportModuleError"


def test_function_timeout(kiln):
    name = unique("timeout")
    create(kiln, name, Timeout=1, files={"app.py": "import time\n\ndef handler(e, c):\n    time.sleep(30)\n"})
    payload, response = invoke(kiln, name)
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert "timed out" in payload["errorMessage"].lower()


def test_unserializable_result_is_a_function_error(kiln):
    name = unique("unserializable")
    create(kiln, name, files={"app.py": "def handler(e, c):\n    return {1, 2}\n"})
    payload, response = invoke(kiln, name)
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"]


def test_invalid_invocation_and_log_types_are_400(kiln):
    name = unique("badtype")
    create(kiln, name)
    raw = signed_request(kiln, "POST", f"/2015-03-31/functions/{name}/invocations", b"{}",
                         headers={"X-Amz-Invocation-Type": "Sometimes"})
    assert_lambda_error(raw, 400, "InvalidParameterValueException")
    raw = signed_request(kiln, "POST", f"/2015-03-31/functions/{name}/invocations", b"{}",
                         headers={"X-Amz-Log-Type": "Everything"})
    assert_lambda_error(raw, 400, "InvalidParameterValueException")


# --- Raw error shape --------------------------------------------------------------------------


def test_every_error_has_json_body_and_error_type_header(kiln):
    name = unique("raw")
    create(kiln, name)
    cases = [
        ("GET", f"/2015-03-31/functions/{unique('nope')}", b"", {}, 404, "ResourceNotFoundException"),
        ("DELETE", f"/2015-03-31/functions/{unique('nope')}", b"", {}, 404, "ResourceNotFoundException"),
        ("POST", f"/2015-03-31/functions/{unique('nope')}/invocations", b"{}", {}, 404, "ResourceNotFoundException"),
        ("POST", "/2015-03-31/functions", json.dumps({
            "FunctionName": name, "Runtime": PYTHON_RUNTIME, "Role": ROLE, "Handler": "app.handler",
            "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": ECHO_PY})).decode()}}).encode(),
         {}, 409, "ResourceConflictException"),
        ("POST", "/2015-03-31/functions", json.dumps({
            "FunctionName": unique("raw"), "Runtime": PYTHON_RUNTIME, "Role": ROLE, "Handler": "app.handler",
            "MemorySize": 64, "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": ECHO_PY})).decode()}}).encode(),
         {}, 400, "ValidationException"),
        ("POST", "/2015-03-31/functions", json.dumps({
            "FunctionName": unique("raw"), "Runtime": PYTHON_RUNTIME, "Role": ROLE, "Handler": "app.handler",
            "MemorySize": 20000, "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": ECHO_PY})).decode()}}).encode(),
         {}, 400, "InvalidParameterValueException"),
        ("POST", "/2015-03-31/functions", b"{not json", {}, 400, "InvalidRequestContentException"),
        ("POST", "/2015-03-31/functions", b'{"FunctionName": 5}', {}, 400, "InvalidRequestContentException"),
        ("POST", f"/2015-03-31/functions/{name}/invocations", b"nope", {}, 400, "InvalidRequestContentException"),
        ("POST", f"/2015-03-31/functions/{name}/invocations", b'"' + b"x" * (300 * 1024) + b'"',
         {"X-Amz-Invocation-Type": "Event"}, 413, "RequestTooLargeException"),
        ("PUT", f"/2017-10-31/functions/{name}/concurrency", b'{"ReservedConcurrentExecutions": -1}', {},
         400, "InvalidParameterValueException"),
        ("GET", "/2015-03-31/no-such-operation", b"", {}, 404, "UnknownOperationException"),
    ]
    for method, path, body, headers, status, code in cases:
        response = signed_request(kiln, method, path, body, headers=headers)
        assert response.headers.get("content-type", "").startswith("application/json"), (path, response.headers)
        assert_lambda_error(response, status, code)


def test_wrong_method_is_a_lambda_error(kiln):
    name = unique("method")
    create(kiln, name)
    for method, path in (("PATCH", f"/2015-03-31/functions/{name}"),
                         ("GET", f"/2015-03-31/functions/{name}/invocations"),
                         ("DELETE", "/2015-03-31/functions")):
        response = signed_request(kiln, method, path)
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
        assert response.headers.get("x-amzn-ErrorType"), (method, path, dict(response.headers))
        assert response.json()


def test_bad_path_encoding_is_a_lambda_error(kiln):
    response = signed_request(kiln, "GET", "/2015-03-31/functions/%ff%fe")
    assert 400 <= response.status_code < 500
    assert response.headers.get("x-amzn-ErrorType"), dict(response.headers)
    assert response.json()


def test_oversized_body_is_a_lambda_error(kiln):
    name = unique("hugebody")
    create(kiln, name)
    body = b'"' + b"x" * (71 * 1024 * 1024) + b'"'
    response = signed_request(kiln, "POST", f"/2015-03-31/functions/{name}/invocations", body)
    assert_lambda_error(response, 413, "RequestTooLargeException")


def test_throttle_has_retry_after(kiln):
    name = unique("retryafter")
    create(kiln, name)
    kiln.client().put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    response = signed_request(kiln, "POST", f"/2015-03-31/functions/{name}/invocations", b"{}")
    assert_lambda_error(response, 429, "TooManyRequestsException")
    assert response.json()["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
    assert response.headers.get("Retry-After")


def test_update_function_url_config_without_auth_type_keeps_it(kiln):
    name = unique("urlkeep")
    create(kiln, name)
    lam = kiln.client()
    lam.create_function_url_config(FunctionName=name, AuthType="AWS_IAM")
    updated = lam.update_function_url_config(FunctionName=name, Cors={"AllowOrigins": ["*"]})
    assert updated["AuthType"] == "AWS_IAM"


def test_every_response_has_a_request_id(kiln):
    name = unique("reqid")
    create(kiln, name)
    lam = kiln.client()
    for response in (lam.get_function(FunctionName=name), lam.list_functions(MaxItems=1),
                     lam.invoke(FunctionName=name, Payload=b"{}"),
                     lam.invoke(FunctionName=name, InvocationType="DryRun")):
        assert response["ResponseMetadata"].get("RequestId"), response["ResponseMetadata"]
    with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
        lam.get_function(FunctionName=unique("nope"))
    assert excinfo.value.response["ResponseMetadata"].get("RequestId")


# --- Durability of the control plane ----------------------------------------------------------


def test_everything_acknowledged_survives_kill_9(fresh_kiln):
    server = fresh_kiln()
    lam = server.client()
    name = unique("durable")
    zip_bytes = zip_files({"app.py": ECHO_PY})
    create(server, name, zip_bytes=zip_bytes, MemorySize=256, Environment={"Variables": {"USER_X": "1"}})
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)
    url = lam.create_function_url_config(FunctionName=name, AuthType="AWS_IAM")
    new_zip = zip_files({"app.py": ECHO_PY.replace('"v1"', '"v2"')})
    server.settled(name)
    lam.update_function_code(FunctionName=name, ZipFile=new_zip)
    gone = unique("gone")
    create(server, gone)
    lam.delete_function(FunctionName=gone)
    before = lam.get_function(FunctionName=name)
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    lam = restarted.client()
    after = lam.get_function(FunctionName=name)
    for key in ("CodeSha256", "CodeSize", "MemorySize", "Environment", "LastModified", "RevisionId", "Timeout"):
        assert after["Configuration"][key] == before["Configuration"][key], key
    assert after["Concurrency"] == {"ReservedConcurrentExecutions": 2}
    assert requests.get(after["Code"]["Location"], timeout=30).content == new_zip
    url_after = lam.get_function_url_config(FunctionName=name)
    assert url_after["AuthType"] == "AWS_IAM"
    assert url_after["CreationTime"] == url["CreationTime"]
    payload, _ = invoke(restarted, name)
    assert payload["version"] == "v2" and payload["env"] == {"USER_X": "1"}
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=gone)


def test_code_shared_by_two_functions_survives_deleting_one(kiln):
    zip_bytes = zip_files({"app.py": ECHO_PY.replace('"v1"', '"shared"')})
    first, second = unique("sharedcode"), unique("sharedcode")
    create(kiln, first, zip_bytes=zip_bytes)
    create(kiln, second, zip_bytes=zip_bytes)
    kiln.client().delete_function(FunctionName=first)
    payload, _ = invoke(kiln, second)
    assert payload["version"] == "shared"
    location = kiln.client().get_function(FunctionName=second)["Code"]["Location"]
    assert requests.get(location, timeout=30).content == zip_bytes


def test_concurrent_control_plane_calls_lose_no_update(kiln):
    """Concurrent changes of one function: each is either acknowledged and lands, or refused with
    409 because another one is in progress (as on Lambda); none is acknowledged and lost."""
    import concurrent.futures
    name = unique("concurrentupd")
    create(kiln, name)
    clients = [kiln.client() for _ in range(4)]
    expected = {"timeout": 3, "description": "", "code": zip_files({"app.py": ECHO_PY})}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for round_ in range(8):
            kiln.settled(name)
            changes = {
                "timeout": (10 + round_, lambda v: clients[0].update_function_configuration(FunctionName=name, Timeout=v)),
                "description": (f"round {round_}",
                                lambda v: clients[2].update_function_configuration(FunctionName=name, Description=v)),
                "code": (zip_files({"app.py": ECHO_PY + f"\n# round {round_}\n"}),
                         lambda v: clients[3].update_function_code(FunctionName=name, ZipFile=v)),
            }
            futures = {key: pool.submit(change, value) for key, (value, change) in changes.items()}
            concurrency = pool.submit(lambda: clients[1].put_function_concurrency(
                FunctionName=name, ReservedConcurrentExecutions=1 + round_))
            landed = []
            for key, future in futures.items():
                try:
                    future.result()
                    expected[key] = changes[key][0]
                    landed.append(key)
                except botocore.exceptions.ClientError as e:
                    assert e.response["Error"]["Code"] == "ResourceConflictException", e.response
            # The function was settled: the first change to arrive is accepted.
            assert landed
            concurrency.result()
            got = kiln.client().get_function(FunctionName=name)
            config = got["Configuration"]
            assert config["Timeout"] == expected["timeout"]
            assert config.get("Description", "") == expected["description"]
            assert got["Concurrency"]["ReservedConcurrentExecutions"] == 1 + round_
            assert config["CodeSha256"] == base64.b64encode(hashlib.sha256(expected["code"]).digest()).decode()


def test_update_function_code_dry_run_changes_nothing(kiln):
    name = unique("codedryrun")
    create(kiln, name)
    lam = kiln.client()
    before = lam.get_function_configuration(FunctionName=name)
    new_zip = zip_files({"app.py": ECHO_PY.replace('"v1"', '"v2"')})
    lam.update_function_code(FunctionName=name, ZipFile=new_zip, DryRun=True)
    after = lam.get_function_configuration(FunctionName=name)
    assert after["CodeSha256"] == before["CodeSha256"]
    assert after["RevisionId"] == before["RevisionId"]
    assert invoke(kiln, name)[0]["version"] == "v1"
    # A dry run still validates.
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.update_function_code(FunctionName=name, ZipFile=zip_with_entries([("../x", "y")]), DryRun=True)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.update_function_code(FunctionName=unique("nope"), ZipFile=new_zip, DryRun=True)


def test_revision_id_guards_updates(kiln):
    name = unique("revid")
    create(kiln, name)
    lam = kiln.client()
    first = lam.get_function_configuration(FunctionName=name)["RevisionId"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", first)
    # Reading does not change it; concurrency and URL configs are not part of it.
    assert lam.get_function(FunctionName=name)["Configuration"]["RevisionId"] == first
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)
    lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    assert lam.get_function_configuration(FunctionName=name)["RevisionId"] == first
    kiln.settled(name)
    second = lam.update_function_configuration(FunctionName=name, Timeout=8, RevisionId=first)["RevisionId"]
    assert second != first
    with pytest.raises(lam.exceptions.PreconditionFailedException) as excinfo:
        lam.update_function_configuration(FunctionName=name, Timeout=9, RevisionId=first)
    assert http_status(excinfo) == 412
    with pytest.raises(lam.exceptions.PreconditionFailedException):
        lam.update_function_code(FunctionName=name, ZipFile=zip_files({"app.py": ECHO_PY + "\n"}), RevisionId=first)
    config = lam.get_function_configuration(FunctionName=name)
    assert config["Timeout"] == 8 and config["RevisionId"] == second
    kiln.settled(name)
    third = lam.update_function_code(FunctionName=name, ZipFile=zip_files({"app.py": ECHO_PY + "\n"}),
                                     RevisionId=second)["RevisionId"]
    assert third not in (first, second)


def test_boto3_waiters(kiln):
    name = unique("waiters")
    lam = kiln.client()
    create(kiln, name)
    fast = {"Delay": 1, "MaxAttempts": 60}
    lam.get_waiter("function_exists").wait(FunctionName=name, WaiterConfig=fast)
    lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig=fast)
    lam.get_waiter("function_active").wait(FunctionName=name, WaiterConfig=fast)
    lam.update_function_configuration(FunctionName=name, Timeout=4)
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=fast)
    lam.get_waiter("function_updated").wait(FunctionName=name, WaiterConfig=fast)


def test_payload_limits_are_exact(kiln):
    name = unique("limits")
    create(kiln, name, files={"app.py": "def handler(e, c):\n    return len(e)\n"})
    lam = kiln.client()

    def string_payload(size):
        return b'"' + b"x" * (size - 2) + b'"'

    assert lam.invoke(FunctionName=name, InvocationType="Event", Payload=string_payload(256 * 1024))["StatusCode"] == 202
    with pytest.raises(lam.exceptions.RequestTooLargeException):
        lam.invoke(FunctionName=name, InvocationType="Event", Payload=string_payload(256 * 1024 + 1))
    response = lam.invoke(FunctionName=name, Payload=string_payload(6 * 1024 * 1024))
    assert json.loads(response["Payload"].read()) == 6 * 1024 * 1024 - 2
    with pytest.raises(lam.exceptions.RequestTooLargeException):
        lam.invoke(FunctionName=name, Payload=string_payload(6 * 1024 * 1024 + 1))


def test_response_over_6mb_is_a_function_error(kiln):
    name = unique("bigresponse")
    create(kiln, name, files={"app.py": "def handler(e, c):\n    return 'x' * (7 * 1024 * 1024)\n"})
    payload, response = invoke(kiln, name)
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "Function.ResponseSizeTooLarge"


def test_node_callback_handlers(kiln):
    name = unique("nodecb")
    create(kiln, name, runtime=NODE_RUNTIME, handler="index.handler", files={"index.js": (
        "exports.handler = (event, context, callback) => {\n"
        "  if (event.fail) return callback(new Error('cb failed'));\n"
        "  callback(null, { rid: context.awsRequestId, left: context.getRemainingTimeInMillis() });\n"
        "};\n")})
    payload, response = invoke(kiln, name)
    assert payload["rid"] == response["ResponseMetadata"]["RequestId"]
    assert 0 < payload["left"] <= 3000
    payload, response = invoke(kiln, name, {"fail": True})
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorMessage"] == "cb failed"




# Counts its invocations in the process and writes one object per invocation.
WRITES_EACH_TIME = """
import os
import boto3

count = 0

def handler(event, context):
    global count
    count += 1
    boto3.client("s3").put_object(Bucket=os.environ["BUCKET"], Key=context.aws_request_id, Body=str(count))
    return {"count": count}
"""


def test_warm_up_invocations_leave_no_object_behind(kiln):
    """A deploy runs the handler in warm-up invocations before anyone invokes it (the hot
    path's first request is fast because of them). They run contained: the objects they write
    are acknowledged and dropped, so after the deploy the bucket is empty and each real
    invocation leaves exactly its own object."""
    from s3_harness import s3_client
    bucket, name = unique("warmup-writes"), unique("warmup-writer")
    s3 = s3_client(kiln)
    s3.create_bucket(Bucket=bucket)
    lam = kiln.client()
    lam.create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                        Code={"ZipFile": zip_files({"app.py": WRITES_EACH_TIME})}, Timeout=30,
                        Environment={"Variables": {"BUCKET": bucket}})
    lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    assert lam.get_function(FunctionName=name)["Configuration"]["State"] == "Active"
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0, "the warm-ups' writes were dropped"
    answers = []
    for _ in range(2):
        response = lam.invoke(FunctionName=name, Payload=b"{}")
        assert "FunctionError" not in response
        answers.append((json.loads(response["Payload"].read())["count"],
                        response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert keys == sorted(request_id for _, request_id in answers), keys
    # The process the warm-ups ran in is the one that answers (its state survives): counts go on.
    assert answers[0][0] >= 1 and answers[1][0] == answers[0][0] + 1
