"""Function URL configs of aliases, next to the unqualified function's: each alias has its own URL,
which runs the alias; and event invoke configs of versions and aliases, each applied to the events
sent to its qualifier. With boto3 and the AWS CLI, against a real kiln."""

import json

import botocore.exceptions
import pytest
import requests

from test_async_destinations import SOURCE, deploy, invoke_event, record_of, recorder, unique  # noqa: F401
from test_auth import aws
from test_lambda_api import error_code
from test_versions import two_versions


def fetch(url):
    response = requests.get(url, timeout=60)
    return response.status_code, response.text


def ran(url):
    status, text = fetch(url)
    assert status == 200, text
    return json.loads(text)["code"]


def alias_and_unqualified_urls(kiln, prefix):
    """A function with versions "one" and "two", alias `live` on version 1, and a URL for each."""
    name = two_versions(kiln, prefix)
    lam = kiln.client()
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    plain = lam.create_function_url_config(FunctionName=name, AuthType="NONE")
    live = lam.create_function_url_config(FunctionName=name, Qualifier="live", AuthType="NONE")
    return name, plain, live


def test_an_alias_url_runs_the_alias_and_the_unqualified_url_runs_latest(kiln):
    name, plain, live = alias_and_unqualified_urls(kiln, "aliasurl")
    assert live["FunctionArn"].endswith(f":function:{name}:live")
    assert plain["FunctionArn"].endswith(f":function:{name}")
    assert live["FunctionUrl"] != plain["FunctionUrl"]
    assert ran(live["FunctionUrl"]) == "one"
    assert ran(plain["FunctionUrl"]) == "two"

    lam = kiln.client()
    got = lam.get_function_url_config(FunctionName=name, Qualifier="live")
    assert got["FunctionUrl"] == live["FunctionUrl"]
    assert got["FunctionArn"] == live["FunctionArn"]
    assert lam.get_function_url_config(FunctionName=f"{name}:live")["FunctionUrl"] == live["FunctionUrl"]
    listed = lam.list_function_url_configs(FunctionName=name)["FunctionUrlConfigs"]
    assert sorted(c["FunctionArn"] for c in listed) == sorted([plain["FunctionArn"], live["FunctionArn"]])

    # A second config for the same alias conflicts; another alias has none yet.
    with pytest.raises(lam.exceptions.ResourceConflictException):
        lam.create_function_url_config(FunctionName=name, Qualifier="live", AuthType="NONE")
    lam.create_alias(FunctionName=name, Name="next", FunctionVersion="2")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name, Qualifier="next")


def test_an_alias_url_follows_the_alias(kiln):
    name, _, live = alias_and_unqualified_urls(kiln, "aliasmove")
    assert ran(live["FunctionUrl"]) == "one"
    lam = kiln.client()
    lam.update_alias(FunctionName=name, Name="live", FunctionVersion="2")
    assert ran(live["FunctionUrl"]) == "two"
    # Updating the alias keeps its URL config.
    assert lam.get_function_url_config(FunctionName=name, Qualifier="live")["FunctionUrl"] == live["FunctionUrl"]


def test_an_alias_url_follows_the_alias_routing_weights(kiln):
    name, _, live = alias_and_unqualified_urls(kiln, "aliasweights")
    lam = kiln.client()
    # All of the alias's invocations go to the additional version.
    lam.update_alias(FunctionName=name, Name="live", RoutingConfig={"AdditionalVersionWeights": {"2": 1.0}})
    assert {ran(live["FunctionUrl"]) for _ in range(3)} == {"two"}


def test_versions_and_latest_are_refused_as_url_qualifiers(kiln):
    name = two_versions(kiln, "urlver")
    lam = kiln.client()
    for qualifier in ("1", "$LATEST"):
        with pytest.raises(botocore.exceptions.ClientError) as excinfo:
            lam.create_function_url_config(FunctionName=name, Qualifier=qualifier, AuthType="NONE")
        assert error_code(excinfo) == "ValidationException"
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.create_function_url_config(FunctionName=name, Qualifier="nothere", AuthType="NONE")
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.create_function_url_config(FunctionName=f"{name}:live", Qualifier="other", AuthType="NONE")
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.put_function_event_invoke_config(FunctionName=f"{name}:1", Qualifier="2", MaximumRetryAttempts=0)
    assert lam.list_function_url_configs(FunctionName=name)["FunctionUrlConfigs"] == []


def test_updating_an_alias_url_changes_only_that_url(kiln):
    name, plain, live = alias_and_unqualified_urls(kiln, "urlauth")
    lam = kiln.client()
    updated = lam.update_function_url_config(FunctionName=name, Qualifier="live", AuthType="AWS_IAM",
                                             Cors={"AllowOrigins": ["https://example.com"]})
    assert updated["AuthType"] == "AWS_IAM"
    assert updated["CreationTime"] == live["CreationTime"]
    assert lam.get_function_url_config(FunctionName=name, Qualifier="live")["AuthType"] == "AWS_IAM"
    unqualified = lam.get_function_url_config(FunctionName=name)
    assert unqualified["AuthType"] == "NONE"
    assert "Cors" not in unqualified
    assert fetch(live["FunctionUrl"])[0] == 403
    assert ran(plain["FunctionUrl"]) == "two"


def test_deleting_an_alias_deletes_its_url(kiln):
    name, plain, live = alias_and_unqualified_urls(kiln, "urlgone")
    lam = kiln.client()
    lam.delete_alias(FunctionName=name, Name="live")
    assert fetch(live["FunctionUrl"])[0] == 404
    assert ran(plain["FunctionUrl"]) == "two"
    listed = lam.list_function_url_configs(FunctionName=name)["FunctionUrlConfigs"]
    assert [c["FunctionArn"] for c in listed] == [plain["FunctionArn"]]
    # An alias made again under the same name has no URL config.
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_url_config(FunctionName=name, Qualifier="live")


def test_deleting_an_alias_url_config_keeps_the_alias_and_the_other_url(kiln):
    name, plain, live = alias_and_unqualified_urls(kiln, "urldel")
    lam = kiln.client()
    lam.delete_function_url_config(FunctionName=name, Qualifier="live")
    assert fetch(live["FunctionUrl"])[0] == 404
    assert ran(plain["FunctionUrl"]) == "two"
    assert lam.get_alias(FunctionName=name, Name="live")["FunctionVersion"] == "1"
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function_url_config(FunctionName=name, Qualifier="live")


def test_alias_urls_survive_a_restart(fresh_kiln):
    server = fresh_kiln()
    name, plain, live = alias_and_unqualified_urls(server, "urlkept")
    server.restart()
    lam = server.client()
    got = lam.get_function_url_config(FunctionName=name, Qualifier="live")
    assert got["FunctionArn"] == live["FunctionArn"]
    assert got["CreationTime"] == live["CreationTime"]
    assert len(lam.list_function_url_configs(FunctionName=name)["FunctionUrlConfigs"]) == 2
    assert ran(got["FunctionUrl"]) == "one"
    assert ran(lam.get_function_url_config(FunctionName=name)["FunctionUrl"]) == "two"


def test_aws_cli_creates_an_alias_url(kiln):
    name = two_versions(kiln, "urlcli")
    kiln.client().create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    created = json.loads(aws(kiln, "lambda", "create-function-url-config", "--function-name", name,
                             "--qualifier", "live", "--auth-type", "NONE").stdout)
    assert created["FunctionArn"].endswith(f":{name}:live")
    assert ran(created["FunctionUrl"]) == "one"
    got = json.loads(aws(kiln, "lambda", "get-function-url-config", "--function-name", name,
                         "--qualifier", "live").stdout)
    assert got["FunctionUrl"] == created["FunctionUrl"]
    refused = aws(kiln, "lambda", "create-function-url-config", "--function-name", name,
                  "--qualifier", "1", "--auth-type", "NONE", check=False)
    assert refused.returncode != 0
    assert "ValidationException" in refused.stderr


# --- Event invoke configs of a qualifier -------------------------------------------------------


def test_an_alias_event_uses_the_alias_config_and_an_unqualified_one_the_functions(kiln, recorder):
    destination, bucket = recorder
    name = unique("qualevents")
    arn = deploy(kiln, name, SOURCE)
    lam = kiln.client()
    lam.publish_version(FunctionName=name)
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    on_failure = {"OnFailure": {"Destination": destination}}
    lam.put_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=1, DestinationConfig=on_failure)
    put = lam.put_function_event_invoke_config(FunctionName=name, Qualifier="live", MaximumRetryAttempts=0,
                                               DestinationConfig=on_failure)
    assert put["FunctionArn"] == f"{arn}:live"

    alias_event = invoke_event(kiln, f"{name}:live", {"fail": True, "n": 1})
    record = record_of(kiln, bucket, alias_event)
    assert record["requestContext"]["approximateInvokeCount"] == 1
    assert record["requestContext"]["functionArn"] == f"{arn}:live"
    assert record["responseContext"]["executedVersion"] == "1"
    unqualified_event = invoke_event(kiln, name, {"fail": True, "n": 2})
    record = record_of(kiln, bucket, unqualified_event)
    assert record["requestContext"]["approximateInvokeCount"] == 2
    assert record["requestContext"]["functionArn"] == f"{arn}:$LATEST"
    assert record["responseContext"]["executedVersion"] == "$LATEST"

    # An alias without a config of its own has Lambda's defaults, not the unqualified function's
    # destination: its failed event reaches no destination.
    lam.create_alias(FunctionName=name, Name="bare", FunctionVersion="1")
    bare_event = invoke_event(kiln, f"{name}:bare", {"fail": True, "n": 3})
    with pytest.raises(AssertionError):
        record_of(kiln, bucket, bare_event, timeout=5)


def test_event_invoke_configs_are_kept_per_qualifier(kiln):
    name = unique("qualconfigs")
    arn = deploy(kiln, name, SOURCE)
    lam = kiln.client()
    lam.publish_version(FunctionName=name)
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    lam.put_function_event_invoke_config(FunctionName=name, Qualifier="live", MaximumRetryAttempts=0)
    lam.put_function_event_invoke_config(FunctionName=name, Qualifier="1", MaximumEventAgeInSeconds=300)

    assert lam.get_function_event_invoke_config(FunctionName=name, Qualifier="live")["MaximumRetryAttempts"] == 0
    got = lam.get_function_event_invoke_config(FunctionName=f"{name}:1")
    assert got["FunctionArn"] == f"{arn}:1"
    assert got["MaximumEventAgeInSeconds"] == 300
    assert "MaximumRetryAttempts" not in got
    # The unqualified function has none of its own.
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_event_invoke_config(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_event_invoke_config(FunctionName=name, Qualifier="$LATEST")
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.put_function_event_invoke_config(FunctionName=name, Qualifier="nothere", MaximumRetryAttempts=0)

    updated = lam.update_function_event_invoke_config(FunctionName=name, Qualifier="live", MaximumEventAgeInSeconds=90)
    assert (updated["MaximumRetryAttempts"], updated["MaximumEventAgeInSeconds"]) == (0, 90)
    lam.put_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=2)
    listed = lam.list_function_event_invoke_configs(FunctionName=name)["FunctionEventInvokeConfigs"]
    assert sorted(c["FunctionArn"] for c in listed) == sorted([f"{arn}:$LATEST", f"{arn}:1", f"{arn}:live"])

    lam.delete_function_event_invoke_config(FunctionName=name, Qualifier="1")
    lam.delete_alias(FunctionName=name, Name="live")
    listed = lam.list_function_event_invoke_configs(FunctionName=name)["FunctionEventInvokeConfigs"]
    assert [c["FunctionArn"] for c in listed] == [f"{arn}:$LATEST"]
    assert lam.get_function_event_invoke_config(FunctionName=name)["MaximumRetryAttempts"] == 2
