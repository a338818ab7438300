"""Schedules (EventBridge Scheduler's API, the subset that invokes Lambda functions), with boto3's
and the AWS CLI's `scheduler` clients pointed at kiln, unmodified: a one-time schedule invokes its
function with its input and deletes itself, the API's answers and errors are Scheduler's, and
schedules outlive a restart."""

import datetime
import json
import time
import uuid

import botocore.exceptions
import pytest

from kiln_harness import PYTHON_RUNTIME, zip_files
from s3_harness import s3_client
from test_auth import aws

ROLE = "arn:aws:iam::000000000000:role/scheduler"

# Keeps each event it gets in $BUCKET under the event's "marker".
RECORDER = """
import json, os
import boto3

def handler(event, context):
    boto3.client("s3").put_object(Bucket=os.environ["BUCKET"], Key=event["marker"], Body=json.dumps(event))
"""


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def function_arn(kiln, name):
    return f"arn:aws:lambda:{kiln.region}:000000000000:function:{name}"


def schedule_input(kiln, function, expression, **extra):
    return dict(ScheduleExpression=expression, FlexibleTimeWindow={"Mode": "OFF"},
                Target={"Arn": function_arn(kiln, function), "RoleArn": ROLE, "Input": json.dumps({"marker": "m"})},
                **extra)


def deploy_recorder(kiln, bucket_prefix, function_prefix, code):
    """A new bucket, and a function running `code` that writes to it: their names."""
    bucket, function = unique(bucket_prefix), unique(function_prefix)
    s3_client(kiln).create_bucket(Bucket=bucket)
    kiln.client().create_function(FunctionName=function, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                                  Code={"ZipFile": zip_files({"app.py": code})}, Timeout=30,
                                  Environment={"Variables": {"BUCKET": bucket}})
    kiln.client().get_waiter("function_active_v2").wait(FunctionName=function, WaiterConfig={"Delay": 1})
    return bucket, function


def code_of(error):
    return error.value.response["Error"]["Code"]


def test_a_one_time_schedule_invokes_its_function_with_its_input_and_deletes_itself(kiln):
    bucket, function = deploy_recorder(kiln, "scheduled", "recorder", RECORDER)
    s3 = s3_client(kiln)
    scheduler = kiln.client("scheduler")
    at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S")
    name = unique("once")
    created = scheduler.create_schedule(
        Name=name, ScheduleExpression=f"at({at})", FlexibleTimeWindow={"Mode": "OFF"},
        ActionAfterCompletion="DELETE",
        Target={"Arn": function_arn(kiln, function), "RoleArn": ROLE,
                "Input": json.dumps({"marker": "fired", "n": 7})})
    assert created["ScheduleArn"] == f"arn:aws:scheduler:{kiln.region}:000000000000:schedule/default/{name}"
    deadline = time.time() + 60
    while time.time() < deadline:
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        if listed:
            break
        time.sleep(0.5)
    assert [o["Key"] for o in listed] == ["fired"], listed
    event = json.loads(s3.get_object(Bucket=bucket, Key="fired")["Body"].read())
    assert event == {"marker": "fired", "n": 7}
    with pytest.raises(botocore.exceptions.ClientError) as gone:
        scheduler.get_schedule(Name=name)
    assert code_of(gone) == "ResourceNotFoundException"


def test_the_api_answers_as_scheduler_does(kiln):
    scheduler = kiln.client("scheduler")
    name = unique("hourly")
    scheduler.create_schedule(Name=name, Description="every hour",
                              **schedule_input(kiln, "f", "cron(0 * * * ? *)", ScheduleExpressionTimezone="Europe/Paris"))
    got = scheduler.get_schedule(Name=name)
    assert got["Name"] == name and got["GroupName"] == "default" and got["State"] == "ENABLED"
    assert got["ScheduleExpression"] == "cron(0 * * * ? *)" and got["ScheduleExpressionTimezone"] == "Europe/Paris"
    assert got["Target"]["Arn"] == function_arn(kiln, "f") and got["Description"] == "every hour"
    assert isinstance(got["CreationDate"], datetime.datetime)

    scheduler.update_schedule(Name=name, State="DISABLED", **schedule_input(kiln, "f", "rate(2 hours)"))
    updated = scheduler.get_schedule(Name=name)
    assert updated["State"] == "DISABLED" and updated["ScheduleExpression"] == "rate(2 hours)"
    assert "Description" not in updated  # an update replaces every setting
    assert updated["CreationDate"] == got["CreationDate"]

    listed = scheduler.list_schedules(NamePrefix=name)["Schedules"]
    assert [(s["Name"], s["State"], s["Target"]["Arn"]) for s in listed] == [(name, "DISABLED", function_arn(kiln, "f"))]
    assert scheduler.list_schedules(NamePrefix=name, State="ENABLED")["Schedules"] == []

    for call, expected in [
        (lambda: scheduler.create_schedule(Name=name, **schedule_input(kiln, "f", "rate(1 hour)")), "ConflictException"),
        (lambda: scheduler.create_schedule(Name=unique("x"), **schedule_input(kiln, "f", "rate(1 hours)")),
         "ValidationException"),
        (lambda: scheduler.create_schedule(
            Name=unique("x"), ScheduleExpression="rate(1 hour)", FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": "arn:aws:sqs:us-east-1:000000000000:queue", "RoleArn": ROLE}), "ValidationException"),
        (lambda: scheduler.get_schedule(Name=unique("missing")), "ResourceNotFoundException"),
        (lambda: scheduler.update_schedule(Name=unique("missing"), **schedule_input(kiln, "f", "rate(1 hour)")),
         "ResourceNotFoundException"),
    ]:
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            call()
        assert code_of(refused) == expected

    out = json.loads(aws(kiln, "scheduler", "list-schedules", "--name-prefix", name).stdout)
    assert [s["Name"] for s in out["Schedules"]] == [name]
    scheduler.delete_schedule(Name=name)
    assert scheduler.list_schedules(NamePrefix=name)["Schedules"] == []


def test_schedules_are_paged_and_outlive_a_restart(fresh_kiln):
    kiln = fresh_kiln()
    scheduler = kiln.client("scheduler")
    for i in range(5):
        scheduler.create_schedule(Name=f"s{i}", **schedule_input(kiln, "f", "rate(1 day)"))
    first = scheduler.list_schedules(MaxResults=2)
    assert [s["Name"] for s in first["Schedules"]] == ["s0", "s1"] and first["NextToken"]
    names = [s["Name"] for page in scheduler.get_paginator("list_schedules").paginate(PaginationConfig={"PageSize": 2})
             for s in page["Schedules"]]
    assert names == [f"s{i}" for i in range(5)]
    kiln.restart()
    scheduler = kiln.client("scheduler")
    assert [s["Name"] for s in scheduler.list_schedules()["Schedules"]] == [f"s{i}" for i in range(5)]
    assert scheduler.get_schedule(Name="s3")["ScheduleExpression"] == "rate(1 day)"


def test_the_kiln_cli_makes_lists_changes_and_deletes_schedules(kiln, tmp_path):
    bucket, function = deploy_recorder(kiln, "cli-scheduled", "cli-recorder", RECORDER)
    s3 = s3_client(kiln)
    name = unique("cli")
    created = json.loads(kiln.cli("--json", "schedule", "create", name, "--expression", "rate(1 hour)",
                                  "--function", function, "--input", '{"marker": "never"}',
                                  "--description", "from the CLI").stdout)
    assert created["done"] == "created" and created["scheduleArn"].endswith(f"schedule/default/{name}")
    got = kiln.client("scheduler").get_schedule(Name=name)
    assert got["ScheduleExpression"] == "rate(1 hour)" and got["State"] == "ENABLED"
    assert got["Target"]["Arn"] == function_arn(kiln, function)
    assert json.loads(got["Target"]["Input"]) == {"marker": "never"} and got["Description"] == "from the CLI"
    assert name in kiln.cli("schedule", "ls").stdout
    assert any(s["Name"] == name for s in json.loads(kiln.cli("--json", "schedule", "ls").stdout))
    shown = kiln.cli("schedule", "get", name).stdout
    assert "rate(1 hour)" in shown and "ENABLED" in shown

    # Updated to fire once, in a few seconds, with an input from a file: it fires and goes.
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"marker": "from-cli", "n": 3}))
    at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S")
    kiln.cli("schedule", "update", name, "--expression", f"at({at})", "--function", function,
             "--input", f"@{event}", "--delete-after-completion")
    deadline = time.time() + 60
    while time.time() < deadline and not s3.list_objects_v2(Bucket=bucket).get("Contents"):
        time.sleep(0.5)
    assert json.loads(s3.get_object(Bucket=bucket, Key="from-cli")["Body"].read()) == {"marker": "from-cli", "n": 3}
    gone = kiln.cli("schedule", "get", name, check=False)
    assert gone.returncode != 0 and "ResourceNotFound" in gone.stderr + gone.stdout

    # Refusals carry the API's message; a disabled schedule is kept; rm deletes it.
    bad = kiln.cli("schedule", "create", unique("bad"), "--expression", "every hour", "--function", function,
                   check=False)
    assert bad.returncode != 0 and "every hour" in bad.stderr
    not_json = kiln.cli("schedule", "create", unique("bad"), "--expression", "rate(1 hour)", "--function", function,
                        "--input", "{nope", check=False)
    assert not_json.returncode != 0 and "not JSON" in not_json.stderr
    off = unique("off")
    kiln.cli("schedule", "create", off, "--expression", "rate(5 minutes)", "--function", function, "--disabled")
    assert kiln.client("scheduler").get_schedule(Name=off)["State"] == "DISABLED"
    assert kiln.cli("schedule", "rm", off).stdout.strip() == f"{off}: deleted"
    assert off not in kiln.cli("schedule", "ls").stdout


# Keeps each event under its marker and the invocation's request id: a second delivery of one
# firing, or a second firing, is a second object.
COUNTER = """
import json, os
import boto3

def handler(event, context):
    key = event["marker"] + "/" + context.aws_request_id
    boto3.client("s3").put_object(Bucket=os.environ["BUCKET"], Key=key, Body=json.dumps(event))
"""


def test_a_firing_is_neither_lost_nor_doubled_across_kill_9(fresh_kiln):
    kiln = fresh_kiln()
    bucket, function = deploy_recorder(kiln, "kill9-scheduled", "counter", COUNTER)

    def fired(marker):
        # A new client each time: the endpoint is the kiln started last.
        return [o["Key"] for o in s3_client(kiln).list_objects_v2(Bucket=bucket, Prefix=marker + "/").get("Contents", [])]

    def at(seconds):
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
        return when, f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})"

    def create(name, expression):
        kiln.client("scheduler").create_schedule(
            Name=name, ScheduleExpression=expression, FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": function_arn(kiln, function), "RoleArn": ROLE, "Input": json.dumps({"marker": name})})

    # One fires while kiln runs; then kiln is killed before another's time and started after it.
    create("fired", at(2)[1])
    deadline = time.time() + 60
    while time.time() < deadline and not fired("fired"):
        time.sleep(0.5)
    assert len(fired("fired")) == 1
    when, expression = at(4)
    create("missed", expression)
    kiln.kill9()
    time.sleep(max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 1.5)
    kiln.start()
    # The missed time fires once at the start; the one that fired before the kill does not again.
    deadline = time.time() + 60
    while time.time() < deadline and not fired("missed"):
        time.sleep(0.5)
    time.sleep(3)
    assert len(fired("missed")) == 1, fired("missed")
    assert len(fired("fired")) == 1, fired("fired")
    # Killed again after both fired: neither fires again.
    kiln.kill9()
    kiln.start()
    time.sleep(3)
    assert (len(fired("missed")), len(fired("fired"))) == (1, 1)
