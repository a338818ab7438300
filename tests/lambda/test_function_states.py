"""A function is `Pending` from CreateFunction until its package is extracted and its start
paths are built, and an update is `InProgress` until the new version's are, as on Lambda: the
waiters of boto3 and the AWS CLI (`function_active_v2`, `function_updated_v2`) wait for them.
An invocation that arrives meanwhile waits too, so it starts on the hot path rather than the
coldest. (What a package that cannot be extracted leaves: test_package_extraction.py.)"""

import json
import uuid

from kiln_harness import PYTHON_RUNTIME, start_path, zip_files
from test_auth import aws

# Slow enough to build that CreateFunction answers well before the snapshot is ready.
SLOW_INIT = """
import time
time.sleep(1.5)

def handler(event, context):
    return {"ok": True, "stage": __import__("os").environ.get("STAGE")}
"""


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(kiln, name, code=SLOW_INIT, **config):
    return kiln.client().create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role="arn:aws:iam::000000000000:role/test",
        Handler="app.handler", Code={"ZipFile": zip_files({"app.py": code})}, Timeout=30, **config)


def state(kiln, name):
    config = kiln.client().get_function_configuration(FunctionName=name)
    return config["State"], config.get("LastUpdateStatus")


def test_a_new_function_is_pending_until_its_snapshot_is_built(kiln):
    name = unique("pending")
    created = create(kiln, name)
    assert (created["State"], created["StateReasonCode"]) == ("Pending", "Creating")
    assert "LastUpdateStatus" not in created
    assert state(kiln, name)[0] == "Pending"
    kiln.client().get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    assert state(kiln, name) == ("Active", "Successful")
    config = kiln.client().get_function(FunctionName=name)["Configuration"]
    assert "StateReason" not in config and "StateReasonCode" not in config


def test_an_invocation_while_pending_waits_and_starts_hot(kiln):
    name = unique("early")
    assert create(kiln, name)["State"] == "Pending"
    payload, response = kiln.invoke(name, {}, LogType="Tail")
    assert payload == {"ok": True, "stage": None}, payload
    # It waited for the fork server rather than starting (and sleeping) on the coldest path.
    assert start_path(kiln.log_tail(response)) == "hot", kiln.log_tail(response)
    assert state(kiln, name) == ("Active", "Successful")


def test_an_update_is_in_progress_until_the_new_version_is_prepared(kiln):
    name = unique("update")
    create(kiln, name)
    lam = kiln.client()
    lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    updated = lam.update_function_configuration(FunctionName=name, Environment={"Variables": {"STAGE": "two"}})
    assert (updated["State"], updated["LastUpdateStatus"]) == ("Active", "InProgress")
    assert updated["LastUpdateStatusReasonCode"] == "Creating"
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    assert state(kiln, name) == ("Active", "Successful")
    payload, _ = kiln.invoke(name, {})
    assert payload == {"ok": True, "stage": "two"}


def test_a_function_with_nothing_to_build_is_active_once_its_package_is_extracted(kiln):
    name = unique("nothing")
    created = create(kiln, name, code="def handler(e, c):\n    return 1\n", Tags={"kiln:prebake": "off"})
    # As on Lambda, CreateFunction answers before the package is extracted.
    assert (created["State"], created["StateReasonCode"]) == ("Pending", "Creating")
    kiln.client().get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})
    assert state(kiln, name) == ("Active", "Successful")
    assert kiln.invoke(name, {})[0] == 1


def test_the_aws_clis_waiters(kiln, tmp_path):
    name = unique("cliwait")
    create(kiln, name)
    aws(kiln, "lambda", "wait", "function-active-v2", "--function-name", name)
    assert state(kiln, name) == ("Active", "Successful")
    aws(kiln, "lambda", "update-function-configuration", "--function-name", name, "--timeout", "20")
    aws(kiln, "lambda", "wait", "function-updated-v2", "--function-name", name)
    config = json.loads(aws(kiln, "lambda", "get-function-configuration", "--function-name", name).stdout)
    assert (config["State"], config["LastUpdateStatus"], config["Timeout"]) == ("Active", "Successful", 20)
