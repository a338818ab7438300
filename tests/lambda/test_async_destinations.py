"""Asynchronous invocation configuration, as boto3 and the AWS CLI set it: retries, the event
age limit, and destinations: a function that gets Lambda's invocation record of each event
that succeeded or was given up on, delivered through the durable queue."""

import json
import time
import uuid

import botocore.exceptions
import pytest

from kiln_harness import PYTHON_RUNTIME, zip_files
from s3_harness import s3_client
from test_auth import aws
from test_lambda_api import unvalidated_client

ROLE = "arn:aws:iam::000000000000:role/test"

# Keeps every record it gets in the bucket named by $BUCKET, by request id and condition.
RECORDER = """
import json, os
import boto3

def handler(event, context):
    key = event["requestContext"]["requestId"] + "/" + event["requestContext"]["condition"]
    boto3.client("s3").put_object(Bucket=os.environ["BUCKET"], Key=key, Body=json.dumps(event))
"""

SOURCE = """
def handler(event, context):
    if event.get("fail"):
        raise ValueError("failed on purpose")
    return {"doubled": event["n"] * 2}
"""


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def deploy(kiln, name, code, **config):
    kiln.client().create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                                  Code={"ZipFile": zip_files({"app.py": code})}, Timeout=30, **config)
    kiln.client().get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    return f"arn:aws:lambda:{kiln.region}:000000000000:function:{name}"


@pytest.fixture
def recorder(kiln):
    bucket = unique("records")
    s3_client(kiln).create_bucket(Bucket=bucket)
    arn = deploy(kiln, unique("recorder"), RECORDER, Environment={"Variables": {"BUCKET": bucket}})
    return arn, bucket


def record_of(kiln, bucket, request_id, timeout=60):
    s3 = s3_client(kiln)
    deadline = time.time() + timeout
    while time.time() < deadline:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{request_id}/").get("Contents", [])
        if listed:
            assert len(listed) == 1, listed
            body = s3.get_object(Bucket=bucket, Key=listed[0]["Key"])["Body"].read()
            return json.loads(body)
        time.sleep(0.2)
    raise AssertionError(f"no record of {request_id} within {timeout} s")


def invoke_event(kiln, name, payload):
    response = kiln.client().invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps(payload))
    assert response["StatusCode"] == 202
    return response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]


def test_the_configuration_is_put_read_updated_listed_and_deleted(kiln, recorder):
    lam = kiln.client()
    name = unique("cfg")
    arn = deploy(kiln, name, SOURCE)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function_event_invoke_config(FunctionName=name)
    assert lam.list_function_event_invoke_configs(FunctionName=name)["FunctionEventInvokeConfigs"] == []
    put = lam.put_function_event_invoke_config(
        FunctionName=name, MaximumRetryAttempts=1, MaximumEventAgeInSeconds=120,
        DestinationConfig={"OnFailure": {"Destination": recorder[0]}})
    assert put["FunctionArn"] == f"{arn}:$LATEST"
    assert (put["MaximumRetryAttempts"], put["MaximumEventAgeInSeconds"]) == (1, 120)
    assert put["DestinationConfig"] == {"OnSuccess": {}, "OnFailure": {"Destination": recorder[0]}}
    assert put["LastModified"].year >= 2024
    # An update changes what it names and keeps the rest; a put replaces everything.
    updated = lam.update_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=0)
    assert (updated["MaximumRetryAttempts"], updated["MaximumEventAgeInSeconds"]) == (0, 120)
    assert updated["DestinationConfig"]["OnFailure"] == {"Destination": recorder[0]}
    got = lam.get_function_event_invoke_config(FunctionName=name, Qualifier="$LATEST")
    assert got["MaximumRetryAttempts"] == 0
    assert [c["FunctionArn"] for c in lam.list_function_event_invoke_configs(FunctionName=name)
            ["FunctionEventInvokeConfigs"]] == [f"{arn}:$LATEST"]
    replaced = lam.put_function_event_invoke_config(FunctionName=name, MaximumEventAgeInSeconds=60)
    assert "MaximumRetryAttempts" not in replaced and replaced["DestinationConfig"] == {"OnSuccess": {}, "OnFailure": {}}
    lam.delete_function_event_invoke_config(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.delete_function_event_invoke_config(FunctionName=name)
    # The function itself is unchanged by all this: still Active, same code.
    assert lam.get_function_configuration(FunctionName=name)["LastUpdateStatus"] == "Successful"


def test_out_of_range_values_and_foreign_destinations_are_refused(kiln):
    lam = unvalidated_client(kiln)
    name = unique("bad")
    deploy(kiln, name, SOURCE)
    for params, code in [
        ({"MaximumRetryAttempts": 3}, "ValidationException"),
        ({"MaximumEventAgeInSeconds": 59}, "ValidationException"),
        ({"MaximumEventAgeInSeconds": 21601}, "ValidationException"),
        ({"DestinationConfig": {"OnFailure": {"Destination": "arn:aws:sqs:us-east-1:000000000000:q"}}},
         "InvalidParameterValueException"),
        ({"DestinationConfig": {"OnSuccess": {"Destination": "arn:aws:lambda:eu-west-1:000000000000:function:x"}}},
         "ResourceNotFoundException"),
    ]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            lam.put_function_event_invoke_config(FunctionName=name, **params)
        assert e.value.response["Error"]["Code"] == code, (params, e.value.response["Error"])
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.put_function_event_invoke_config(FunctionName=name, Qualifier="1", MaximumRetryAttempts=0)


def test_a_failed_event_goes_to_its_on_failure_destination_once_retries_are_exhausted(kiln, recorder):
    destination, bucket = recorder
    name = unique("fails")
    arn = deploy(kiln, name, SOURCE)
    kiln.client().put_function_event_invoke_config(
        FunctionName=name, MaximumRetryAttempts=0, DestinationConfig={"OnFailure": {"Destination": destination}})
    request_id = invoke_event(kiln, name, {"fail": True, "n": 1})
    record = record_of(kiln, bucket, request_id)
    assert record["version"] == "1.0"
    assert record["requestContext"] == {"requestId": request_id, "functionArn": f"{arn}:$LATEST",
                                        "condition": "RetriesExhausted", "approximateInvokeCount": 1}
    assert record["requestPayload"] == {"fail": True, "n": 1}
    assert record["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST",
                                         "functionError": "Unhandled"}
    assert record["responsePayload"]["errorType"] == "ValueError"
    assert record["responsePayload"]["errorMessage"] == "failed on purpose"


def test_a_successful_event_goes_to_its_on_success_destination(kiln, recorder):
    destination, bucket = recorder
    name = unique("succeeds")
    deploy(kiln, name, SOURCE)
    # Set with the AWS CLI, as a user would.
    aws(kiln, "lambda", "put-function-event-invoke-config", "--function-name", name,
        "--destination-config", json.dumps({"OnSuccess": {"Destination": destination}}))
    request_id = invoke_event(kiln, name, {"n": 21})
    record = record_of(kiln, bucket, request_id)
    assert record["requestContext"]["condition"] == "Success"
    assert record["requestPayload"] == {"n": 21} and record["responsePayload"] == {"doubled": 42}
    assert "functionError" not in record["responseContext"]


SLOW_SOURCE = """
import time

def handler(event, context):
    time.sleep(event["sleep"])
    return {"doubled": event["n"] * 2}
"""


def test_records_are_not_lost_across_kill_9(fresh_kiln):
    """An event acknowledged, kiln killed while the function runs it, kiln started again: the
    event runs again (at least once) and its success record reaches the destination; a record
    queued before the kill is delivered after it."""
    kiln = fresh_kiln()
    bucket = unique("records")
    s3_client(kiln).create_bucket(Bucket=bucket)
    recorder_arn = deploy(kiln, unique("recorder"), RECORDER, Environment={"Variables": {"BUCKET": bucket}})
    name = unique("slow")
    deploy(kiln, name, SLOW_SOURCE)
    kiln.client().put_function_event_invoke_config(
        FunctionName=name, DestinationConfig={"OnSuccess": {"Destination": recorder_arn}})
    running = invoke_event(kiln, name, {"n": 4, "sleep": 3})
    # Killed while the event runs: nothing recorded yet.
    time.sleep(1.5)
    kiln.kill9()
    kiln.start()
    record = record_of(kiln, bucket, running, timeout=90)
    assert record["requestContext"]["condition"] == "Success"
    assert record["responsePayload"] == {"doubled": 8}
    # A quick one whose record is queued when kiln is killed at once.
    quick = invoke_event(kiln, name, {"n": 5, "sleep": 0})
    deadline = time.time() + 30
    while time.time() < deadline:
        depth = kiln.signed_request("GET", "/kiln/v1/async").json()["Depth"]
        if depth == 0:
            break
        time.sleep(0.05)
    kiln.kill9()
    kiln.start()
    assert record_of(kiln, bucket, quick, timeout=90)["responsePayload"] == {"doubled": 10}
