"""A function is `Pending` from CreateFunction until its package is extracted and its start
paths are built, and an update is `InProgress` until the new version's are, as on Lambda: the
waiters of boto3 and the AWS CLI (`function_active_v2`, `function_updated_v2`) wait for them.
An invocation that arrives meanwhile waits too, so it starts on the hot path rather than the
coldest. A change meanwhile (UpdateFunctionCode, UpdateFunctionConfiguration, PublishVersion, a
`kiln:` tag that changes the configuration) is refused with 409 ResourceConflictException, as on
Lambda. (What a package that cannot be
extracted leaves: test_package_extraction.py.)"""

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from kiln_harness import GATED_INIT, PYTHON_RUNTIME, Gate, start_path, zip_files
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


HANDLER = """
def handler(event, context):
    return {"code": CODE, "stage": os.environ.get("STAGE")}

CODE = "one"
"""
NOT_NOW = "The operation cannot be performed at this time."
FAST = {"Delay": 1, "MaxAttempts": 120}


def gated(kiln, name, gate):
    """A function whose init waits on `gate`: `Pending` until the gate opens."""
    return create(kiln, name, code=GATED_INIT + HANDLER, Tags={"kiln:network": "host"},
                  Environment={"Variables": {"GATE": str(gate.port)}})


def refused(change):
    """The message of the 409 ResourceConflictException `change` is refused with."""
    with pytest.raises(ClientError) as excinfo:
        change()
    error = excinfo.value.response
    assert error["Error"]["Code"] == "ResourceConflictException", error
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 409, error
    return error["Error"]["Message"]


def test_a_change_while_pending_is_refused_until_the_function_is_active(kiln):
    name = unique("pendingchange")
    lam = kiln.client()
    with Gate() as gate:
        assert gated(kiln, name, gate)["State"] == "Pending"
        two = zip_files({"app.py": GATED_INIT + HANDLER.replace('CODE = "one"', 'CODE = "two"')})
        pending = f"{NOT_NOW} The function is currently in the following state: Pending"
        assert refused(lambda: lam.update_function_code(FunctionName=name, ZipFile=two)) == pending
        assert refused(lambda: lam.update_function_configuration(FunctionName=name, Timeout=20)) == pending
        assert refused(lambda: lam.publish_version(FunctionName=name)) == pending
        # Nothing of the refused changes was kept.
        config = lam.get_function_configuration(FunctionName=name)
        assert (config["State"], config["Timeout"]) == ("Pending", 30)
        assert lam.list_versions_by_function(FunctionName=name)["Versions"][1:] == []
        gate.open()
        lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig=FAST)
        # Once active, the same change is accepted.
        assert lam.update_function_code(FunctionName=name, ZipFile=two)["LastUpdateStatus"] == "InProgress"
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        assert kiln.invoke(name, {})[0]["code"] == "two"


def test_a_change_while_an_update_is_in_progress_is_refused_until_it_is_done(kiln):
    name = unique("updatechange")
    lam = kiln.client()
    with Gate() as first, Gate() as second:
        gated(kiln, name, first)
        first.open()
        lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig=FAST)
        # The new code's init waits on the second gate: the update stays in progress until it opens.
        two = zip_files({"app.py": second.init() + HANDLER.replace('CODE = "one"', 'CODE = "two"')})
        updated = lam.update_function_code(FunctionName=name, ZipFile=two)
        assert (updated["State"], updated["LastUpdateStatus"]) == ("Active", "InProgress")
        in_progress = f"{NOT_NOW} An update is in progress for resource: {updated['FunctionArn']}"

        def configure():
            return lam.update_function_configuration(
                FunctionName=name, Environment={"Variables": {"GATE": str(first.port), "STAGE": "two"}})
        assert refused(configure) == in_progress
        assert refused(lambda: lam.update_function_code(FunctionName=name, ZipFile=two)) == in_progress
        assert refused(lambda: lam.publish_version(FunctionName=name)) == in_progress
        config = lam.get_function_configuration(FunctionName=name)
        assert (config["LastUpdateStatus"], config["RevisionId"]) == ("InProgress", updated["RevisionId"])
        assert "STAGE" not in config["Environment"]["Variables"]
        second.open()
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        # After the waiter, each change is accepted in turn.
        assert configure()["LastUpdateStatus"] == "InProgress"
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        published = lam.publish_version(FunctionName=name)
        assert published["Version"] == "1"
        payload, _ = kiln.invoke(name, {})
        assert (payload["code"], payload["stage"]) == ("two", "two")
        assert kiln.invoke(name, {}, Qualifier="1")[0] == payload


def test_a_kiln_tag_that_changes_the_configuration_is_refused_while_a_change_is_in_progress(kiln):
    """`kiln:` tags set kiln's configuration: a TagResource or UntagResource that changes it is
    refused while the function is `Pending` or an update is in progress, as
    UpdateFunctionConfiguration is. Other tags change nothing but tags and are accepted, as on
    Lambda, and so is a `kiln:` tag that leaves the configuration as it is."""
    name = unique("tagchange")
    lam = kiln.client()
    with Gate() as first, Gate() as second:
        arn = gated(kiln, name, first)["FunctionArn"]
        pending = f"{NOT_NOW} The function is currently in the following state: Pending"
        sizing = {"kiln:memory-sizing": "booked"}
        assert refused(lambda: lam.tag_resource(Resource=arn, Tags=sizing)) == pending
        lam.tag_resource(Resource=arn, Tags={"team": "a"})
        assert state(kiln, name)[0] == "Pending"
        first.open()
        lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig=FAST)
        two = zip_files({"app.py": second.init() + HANDLER.replace('CODE = "one"', 'CODE = "two"')})
        updated = lam.update_function_code(FunctionName=name, ZipFile=two)
        assert updated["LastUpdateStatus"] == "InProgress"
        in_progress = f"{NOT_NOW} An update is in progress for resource: {arn}"
        assert refused(lambda: lam.tag_resource(Resource=arn, Tags=sizing)) == in_progress
        assert refused(lambda: lam.untag_resource(Resource=arn, TagKeys=["kiln:network"])) == in_progress
        lam.tag_resource(Resource=arn, Tags={"team": "b", "kiln:network": "host"})
        lam.untag_resource(Resource=arn, TagKeys=["team"])
        assert lam.list_tags(Resource=arn)["Tags"] == {"kiln:network": "host"}
        config = lam.get_function_configuration(FunctionName=name)
        assert (config["LastUpdateStatus"], config["RevisionId"]) == ("InProgress", updated["RevisionId"])
        second.open()
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        # Once the update is done, the same tag is accepted, and is an update of its own.
        lam.tag_resource(Resource=arn, Tags=sizing)
        assert lam.get_function_configuration(FunctionName=name)["RevisionId"] != updated["RevisionId"]
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        assert lam.list_tags(Resource=arn)["Tags"] == {"kiln:network": "host", **sizing}
        raw = kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()
        assert raw["KilnMemorySizing"] == "booked"
        assert kiln.invoke(name, {})[0]["code"] == "two"


def test_reserved_concurrency_is_no_update(kiln):
    """PutFunctionConcurrency changes neither code nor configuration: as on Lambda, the function
    stays `Successful` and the next change is accepted at once."""
    name = unique("concurrencychange")
    lam = kiln.client()
    with Gate() as gate:
        gated(kiln, name, gate)
        gate.open()
        lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig=FAST)
        # kiln builds the new revision's start paths anew: its init waits on the gate meanwhile.
        gate.hold()
        lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)
        assert state(kiln, name) == ("Active", "Successful")
        updated = lam.update_function_configuration(
            FunctionName=name, Environment={"Variables": {"GATE": str(gate.port), "STAGE": "two"}})
        assert updated["LastUpdateStatus"] == "InProgress"
        gate.open()
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=FAST)
        assert kiln.invoke(name, {})[0]["stage"] == "two"
        assert lam.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 2
