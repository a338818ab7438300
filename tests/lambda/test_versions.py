"""Versions and aliases: PublishVersion, ListVersionsByFunction, qualified Get/Invoke/Delete,
CreateAlias/GetAlias/UpdateAlias/DeleteAlias/ListAliases with weighted routing; with boto3 and
the AWS CLI, against a real kiln."""

import base64
import hashlib
import json
import time

import pytest

from kiln_harness import PYTHON_RUNTIME, zip_files
from test_auth import aws
from test_lambda_api import ROLE, create, error_code, http_status, unique

CODE = """
import os

def handler(event, context):
    return {{"code": "{tag}", "version": context.function_version, "name": context.function_name,
            "env_version": os.environ["AWS_LAMBDA_FUNCTION_VERSION"],
            "arn": context.invoked_function_arn, "memory": context.memory_limit_in_mb}}
"""


def code(tag):
    return zip_files({"app.py": CODE.format(tag=tag)})


def sha(zip_bytes):
    return base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()


def update(kiln, name, zip_bytes, **extra):
    lam = kiln.client()
    out = lam.update_function_code(FunctionName=name, ZipFile=zip_bytes, **extra)
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    return out


def call(kiln, name, **kwargs):
    response = kiln.client().invoke(FunctionName=name, Payload=b"{}", **kwargs)
    assert "FunctionError" not in response, response["Payload"].read()
    return json.loads(response["Payload"].read()), response


def two_versions(kiln, prefix):
    """A function with version 1 ("one") and 2 ("two"); `$LATEST` runs "two"."""
    name = unique(prefix)
    create(kiln, name, zip_bytes=code("one"))
    kiln.settled(name)
    lam = kiln.client()
    assert lam.publish_version(FunctionName=name)["Version"] == "1"
    update(kiln, name, code("two"))
    assert lam.publish_version(FunctionName=name)["Version"] == "2"
    return name


def test_publish_list_get_and_invoke_versions(kiln):
    name = unique("ver")
    one = code("one")
    create(kiln, name, zip_bytes=one, Description="first")
    kiln.settled(name)
    lam = kiln.client()
    arn = f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    published = lam.publish_version(FunctionName=name)
    assert published["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert published["Version"] == "1"
    assert published["FunctionArn"] == f"{arn}:1"
    assert published["CodeSha256"] == sha(one)
    assert published["Description"] == "first"
    # Nothing changed since: the latest version is returned, not a new one.
    again = lam.publish_version(FunctionName=name)
    assert again["Version"] == "1" and again["RevisionId"] == published["RevisionId"]
    update(kiln, name, code("two"))
    assert lam.publish_version(FunctionName=name, Description="second")["Version"] == "2"
    lam.update_function_configuration(FunctionName=name, MemorySize=256)
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    # A configuration change alone is a new version too.
    assert lam.publish_version(FunctionName=name)["Version"] == "3"

    listed = lam.list_versions_by_function(FunctionName=name)["Versions"]
    assert [v["Version"] for v in listed] == ["$LATEST", "1", "2", "3"]
    assert [v["FunctionArn"] for v in listed] == [f"{arn}:$LATEST", f"{arn}:1", f"{arn}:2", f"{arn}:3"]
    assert [v["Description"] for v in listed] == ["first", "first", "second", "first"]
    assert [v["MemorySize"] for v in listed] == [256, 128, 128, 256]
    paged = lam.get_paginator("list_versions_by_function").paginate(
        FunctionName=name, PaginationConfig={"PageSize": 1})
    assert [v["Version"] for page in paged for v in page["Versions"]] == ["$LATEST", "1", "2", "3"]

    # Get with a qualifier: that version's code and configuration, under its ARN.
    for got in (lam.get_function(FunctionName=name, Qualifier="1")["Configuration"],
                lam.get_function_configuration(FunctionName=f"{name}:1"),
                lam.get_function_configuration(FunctionName=f"{arn}:1")):
        assert got["Version"] == "1" and got["FunctionArn"] == f"{arn}:1"
        assert got["CodeSha256"] == sha(one) and got["MemorySize"] == 128
        assert got["State"] == "Active"
    assert lam.get_function(FunctionName=name)["Configuration"]["Version"] == "$LATEST"

    # Invoke: each version runs its own code and configuration, and says which it is.
    for target, kwargs, want, version, memory in (
            (name, {"Qualifier": "1"}, "one", "1", "128"),
            (f"{name}:2", {}, "two", "2", "128"),
            (f"{arn}:3", {}, "two", "3", "256"),
            (name, {}, "two", "$LATEST", "256")):
        body, response = call(kiln, target, LogType="Tail", **kwargs)
        assert body["code"] == want, (target, body)
        assert body["version"] == body["env_version"] == version
        assert body["name"] == name and body["memory"] == memory
        assert response["ExecutedVersion"] == version
        log = base64.b64decode(response["LogResult"]).decode()
        assert f"Version: {version}" in log, log
    # The node lists a version's instances under the version.
    status = json.loads(kiln.cli("--json", "status").stdout)["node"]
    assert any(i["function"] == f"{name}:1" for i in status["instances"]), status["instances"]


def test_publish_preconditions_and_publish_on_create_and_update(kiln):
    name = unique("verpre")
    one = code("one")
    created = create(kiln, name, zip_bytes=one, Publish=True)
    assert created["Version"] == "1"
    assert created["FunctionArn"].endswith(f":{name}:1")
    kiln.settled(name)
    lam = kiln.client()
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as excinfo:
        lam.publish_version(FunctionName=name, CodeSha256="bm90IHRoZSBoYXNo")
    assert "CodeSHA256" in str(excinfo.value)
    with pytest.raises(lam.exceptions.PreconditionFailedException) as excinfo:
        lam.publish_version(FunctionName=name, RevisionId="00000000-0000-0000-0000-000000000000")
    assert http_status(excinfo) == 412
    latest = lam.get_function_configuration(FunctionName=name)
    assert lam.publish_version(FunctionName=name, CodeSha256=sha(one),
                               RevisionId=latest["RevisionId"])["Version"] == "1"
    # Asynchronous invocation settings are the function's, not a version's: no new version.
    lam.put_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=0)
    assert lam.publish_version(FunctionName=name)["Version"] == "1"
    updated = lam.update_function_code(FunctionName=name, ZipFile=code("two"), Publish=True)
    assert updated["Version"] == "2"
    lam.get_waiter("function_active_v2").wait(FunctionName=name, Qualifier="2", WaiterConfig={"Delay": 1})
    assert call(kiln, name, Qualifier="2")[0]["code"] == "two"
    assert call(kiln, name, Qualifier="1")[0]["code"] == "one"


def test_aliases_name_versions(kiln):
    name = two_versions(kiln, "alias")
    lam = kiln.client()
    arn = f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    created = lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1", Description="prod")
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 201
    assert created["AliasArn"] == f"{arn}:live"
    assert (created["Name"], created["FunctionVersion"], created["Description"]) == ("live", "1", "prod")
    assert "RoutingConfig" not in created
    got = lam.get_alias(FunctionName=name, Name="live")
    assert got["RevisionId"] == created["RevisionId"] and got["FunctionVersion"] == "1"
    body, response = call(kiln, name, Qualifier="live")
    assert body["code"] == "one" and response["ExecutedVersion"] == "1"
    assert body["arn"] == f"{arn}:1"
    config = lam.get_function_configuration(FunctionName=name, Qualifier="live")
    assert config["FunctionArn"] == f"{arn}:live" and config["Version"] == "1"

    lam.create_alias(FunctionName=name, Name="edge", FunctionVersion="$LATEST")
    assert call(kiln, f"{name}:edge")[1]["ExecutedVersion"] == "$LATEST"
    updated = lam.update_alias(FunctionName=name, Name="live", FunctionVersion="2",
                               RevisionId=created["RevisionId"])
    assert updated["FunctionVersion"] == "2" and updated["Description"] == "prod"
    assert updated["RevisionId"] != created["RevisionId"]
    body, response = call(kiln, f"{arn}:live")
    assert body["code"] == "two" and response["ExecutedVersion"] == "2"

    listed = lam.list_aliases(FunctionName=name)["Aliases"]
    assert [(a["Name"], a["FunctionVersion"]) for a in listed] == [("edge", "$LATEST"), ("live", "2")]
    assert [a["Name"] for a in lam.list_aliases(FunctionName=name, FunctionVersion="2")["Aliases"]] == ["live"]
    paged = lam.get_paginator("list_aliases").paginate(FunctionName=name, PaginationConfig={"PageSize": 1})
    assert [a["Name"] for page in paged for a in page["Aliases"]] == ["edge", "live"]

    # Errors, with Lambda's exceptions.
    with pytest.raises(lam.exceptions.ResourceConflictException) as excinfo:
        lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    assert http_status(excinfo) == 409
    with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
        lam.create_alias(FunctionName=name, Name="later", FunctionVersion="9")
    assert http_status(excinfo) == 404
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_alias(FunctionName=name, Name="nothere")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.update_alias(FunctionName=name, Name="nothere", FunctionVersion="1")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_alias(FunctionName=unique("nofunction"), Name="live")
    with pytest.raises(lam.exceptions.PreconditionFailedException):
        lam.update_alias(FunctionName=name, Name="live", FunctionVersion="1", RevisionId=created["RevisionId"])
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.invoke(FunctionName=name, Qualifier="nothere", Payload=b"{}")
    # A name of digits only would be a version's.
    with pytest.raises(lam.exceptions.ClientError) as excinfo:
        lam.create_alias(FunctionName=name, Name="12", FunctionVersion="1")
    assert error_code(excinfo) == "ValidationException" and http_status(excinfo) == 400
    with pytest.raises(lam.exceptions.ClientError) as excinfo:
        lam.create_alias(FunctionName=name, Name="other", FunctionVersion="live")
    assert error_code(excinfo) == "ValidationException"

    # An alias has a function URL of its own.
    url = lam.create_function_url_config(FunctionName=name, Qualifier="live", AuthType="NONE")
    assert url["FunctionArn"].endswith(f":{name}:live")

    lam.delete_alias(FunctionName=name, Name="edge")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_alias(FunctionName=name, Name="edge")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.invoke(FunctionName=name, Qualifier="edge", Payload=b"{}")


def test_weighted_alias_sends_a_share_to_the_additional_version(kiln):
    name = two_versions(kiln, "canary")
    lam = kiln.client()
    created = lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1",
                               RoutingConfig={"AdditionalVersionWeights": {"2": 0.3}})
    assert created["RoutingConfig"] == {"AdditionalVersionWeights": {"2": 0.3}}
    executed = {"1": 0, "2": 0}
    for _ in range(100):
        body, response = call(kiln, name, Qualifier="live")
        version = response["ExecutedVersion"]
        assert body["code"] == {"1": "one", "2": "two"}[version]
        executed[version] += 1
    # Binomial(100, 0.3): a mean of 30 and a deviation of 4.6; the bound is five of them.
    assert 7 <= executed["2"] <= 53, executed
    # Routing is refused where Lambda refuses it.
    for routing, exception in (({"1": 0.5}, "InvalidParameterValueException"),
                               ({"9": 0.5}, "ResourceNotFoundException"),
                               ({"2": 1.5}, "ValidationException")):
        with pytest.raises(lam.exceptions.ClientError) as excinfo:
            lam.update_alias(FunctionName=name, Name="live", RoutingConfig={"AdditionalVersionWeights": routing})
        assert error_code(excinfo) == exception, routing
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.create_alias(FunctionName=name, Name="edge", FunctionVersion="$LATEST",
                         RoutingConfig={"AdditionalVersionWeights": {"1": 0.5}})
    # An empty RoutingConfig takes the routing off.
    plain = lam.update_alias(FunctionName=name, Name="live", RoutingConfig={})
    assert "RoutingConfig" not in plain
    assert all(call(kiln, name, Qualifier="live")[1]["ExecutedVersion"] == "1" for _ in range(5))


def test_deleting_a_version(kiln):
    name = two_versions(kiln, "verdel")
    lam = kiln.client()
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="2",
                     RoutingConfig={"AdditionalVersionWeights": {"1": 0.1}})
    for version in ("1", "2"):
        with pytest.raises(lam.exceptions.ResourceConflictException) as excinfo:
            lam.delete_function(FunctionName=name, Qualifier=version)
        assert http_status(excinfo) == 409
        assert "Unable to delete version because the following aliases reference it: [live]" in str(excinfo.value)
    lam.update_alias(FunctionName=name, Name="live", RoutingConfig={})
    assert lam.delete_function(FunctionName=name, Qualifier="1")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert [v["Version"] for v in lam.list_versions_by_function(FunctionName=name)["Versions"]] == ["$LATEST", "2"]
    for call_ in (lambda: lam.invoke(FunctionName=name, Qualifier="1", Payload=b"{}"),
                  lambda: lam.get_function(FunctionName=name, Qualifier="1")):
        with pytest.raises(lam.exceptions.ResourceNotFoundException) as excinfo:
            call_()
        assert http_status(excinfo) == 404
    # The rest is untouched, and a number is never given twice.
    assert call(kiln, name, Qualifier="live")[0]["code"] == "two"
    update(kiln, name, code("three"))
    assert lam.publish_version(FunctionName=name)["Version"] == "3"
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.delete_function(FunctionName=name, Qualifier="$LATEST")
    # Deleting the function takes its versions and aliases with it.
    lam.delete_function(FunctionName=name)
    create(kiln, name, zip_bytes=code("again"))
    kiln.settled(name)
    assert [v["Version"] for v in lam.list_versions_by_function(FunctionName=name)["Versions"]] == ["$LATEST"]
    assert lam.list_aliases(FunctionName=name)["Aliases"] == []
    assert lam.publish_version(FunctionName=name)["Version"] == "1"


def test_versions_with_the_aws_cli(kiln, tmp_path):
    name = unique("vercli")
    create(kiln, name, zip_bytes=code("one"))
    aws(kiln, "lambda", "wait", "function-active-v2", "--function-name", name)
    published = json.loads(aws(kiln, "lambda", "publish-version", "--function-name", name,
                               "--description", "from the cli").stdout)
    assert published["Version"] == "1" and published["Description"] == "from the cli"
    listed = json.loads(aws(kiln, "lambda", "list-versions-by-function", "--function-name", name).stdout)
    assert [v["Version"] for v in listed["Versions"]] == ["$LATEST", "1"]
    alias = json.loads(aws(kiln, "lambda", "create-alias", "--function-name", name, "--name", "live",
                           "--function-version", "1").stdout)
    assert alias["FunctionVersion"] == "1"
    out = tmp_path / "out.json"
    invoked = json.loads(aws(kiln, "lambda", "invoke", "--function-name", name, "--qualifier", "live",
                             "--payload", "{}", str(out)).stdout)
    assert invoked["ExecutedVersion"] == "1"
    assert json.loads(out.read_text())["code"] == "one"
    aliases = json.loads(aws(kiln, "lambda", "list-aliases", "--function-name", name).stdout)
    assert [a["Name"] for a in aliases["Aliases"]] == ["live"]
    refused = aws(kiln, "lambda", "delete-function", "--function-name", name, "--qualifier", "1", check=False)
    assert refused.returncode != 0 and "ResourceConflictException" in refused.stderr
    aws(kiln, "lambda", "delete-alias", "--function-name", name, "--name", "live")
    aws(kiln, "lambda", "delete-function", "--function-name", name, "--qualifier", "1")
    missing = aws(kiln, "lambda", "get-function", "--function-name", name, "--qualifier", "1", check=False)
    assert missing.returncode != 0 and "ResourceNotFoundException" in missing.stderr


def test_versions_and_aliases_survive_a_restart(fresh_kiln):
    server = fresh_kiln()
    name = two_versions(server, "verkeep")
    lam = server.client()
    lam.update_function_configuration(FunctionName=name, Description="third")
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    assert lam.publish_version(FunctionName=name)["Version"] == "3"
    # Version 2 is neither the newest nor routed to: after the restart it is prepared only
    # once it runs.
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1",
                     RoutingConfig={"AdditionalVersionWeights": {"3": 0.25}})
    before = lam.list_versions_by_function(FunctionName=name)["Versions"]
    assert server.stop() == 0
    restarted = fresh_kiln(data_dir=server.data_dir)
    lam = restarted.client()
    after = lam.list_versions_by_function(FunctionName=name)["Versions"]
    keys = ("Version", "FunctionArn", "CodeSha256", "RevisionId", "Description")
    assert [{k: v[k] for k in keys} for v in after] == [{k: v[k] for k in keys} for v in before]
    alias = lam.get_alias(FunctionName=name, Name="live")
    assert alias["RoutingConfig"] == {"AdditionalVersionWeights": {"3": 0.25}}
    assert call(restarted, name, Qualifier="1")[0]["code"] == "one"
    assert call(restarted, name, Qualifier="2")[0]["code"] == "two"
    assert call(restarted, name, Qualifier="2")[0]["code"] == "two"
    body, response = call(restarted, name, Qualifier="live")
    assert body["code"] == {"1": "one", "3": "two"}[response["ExecutedVersion"]]
    assert lam.publish_version(FunctionName=name)["Version"] == "3", "unchanged since version 3"


def test_a_versions_idle_instances_are_reaped_and_events_run_the_version(fresh_kiln):
    server = fresh_kiln(extra_args=["--idle-ttl", "1"])
    name = two_versions(server, "verreap")
    lam = server.client()
    assert call(server, name, Qualifier="1")[0]["code"] == "one"

    def instances():
        node = json.loads(server.cli("--json", "status").stdout)["node"]
        return [i for i in node["instances"] if i["function"] == f"{name}:1"]

    deadline = time.monotonic() + 60
    while instances():
        assert time.monotonic() < deadline, instances()
        time.sleep(0.5)
    # An Event of a version is accepted and runs that version (its log says so).
    ran = server.cli("logs", name).stdout.count("Version: 1")
    assert lam.invoke(FunctionName=name, Qualifier="1", InvocationType="Event",
                      Payload=b"{}")["StatusCode"] == 202
    assert lam.invoke(FunctionName=name, Qualifier="2", InvocationType="DryRun")["StatusCode"] == 204
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.invoke(FunctionName=name, Qualifier="9", InvocationType="Event", Payload=b"{}")
    while server.cli("logs", name).stdout.count("Version: 1") == ran:
        assert time.monotonic() < deadline + 60, "the Event of version 1 to run"
        time.sleep(0.5)
