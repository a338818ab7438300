"""CreateFunction and UpdateFunctionCode answer before the package is unzipped, as on Lambda:
the call checks the zip from its central directory (a readable archive, safe paths, an unzipped
size under 250 MB) and answers `Pending` (or `LastUpdateStatus: InProgress`); the package is
extracted in the background. An entry that does not inflate makes the function `Failed` (or
its update), with Lambda's reason code, and an invocation gets Lambda's answer for that state.
A restart in the middle of an extraction extracts the package again; after a failed update, the
code from before it still runs, restart or not."""

import io
import json
import os
import uuid
import zipfile

import botocore.exceptions
import pytest

from kiln_harness import PYTHON_RUNTIME

HANDLER = "def handler(event, context):\n    return {'version': %d, 'event': event}\n"
# Each random byte becomes one of three letters: about 1.6 bits a byte, so a package deflates to
# under a third of its size and takes a while to inflate.
LETTERS = bytes(b"ACG"[i % 3] for i in range(256))


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def package(mebibytes, version=1):
    """A zip of app.py and `mebibytes` 1 MiB files of random text."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("app.py", HANDLER % version)
        for i in range(mebibytes):
            z.writestr(f"data/part-{i:03d}.txt", os.urandom(1024 * 1024).translate(LETTERS))
    return out.getvalue()


def corrupt_package(version=1):
    """A zip whose central directory is sound but one of whose entries does not match its CRC."""
    out = io.BytesIO()
    data = os.urandom(256 * 1024)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("app.py", HANDLER % version)
        z.writestr("data.bin", data)
    raw = bytearray(out.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        info = z.getinfo("data.bin")
    # The local header is 30 bytes, then the name and the extra field, then the stored bytes.
    name_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    for i in range(start + 1000, start + 1100):
        raw[i] ^= 0xFF
    zipfile.ZipFile(io.BytesIO(bytes(raw))).namelist()  # still a readable archive
    return bytes(raw)


def create(lam, name, zipped):
    return lam.create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role="arn:aws:iam::000000000000:role/test",
        Handler="app.handler", Code={"ZipFile": zipped}, Timeout=30)


def wait_active(lam, name):
    lam.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})


def invoke(lam, name, event):
    response = lam.invoke(FunctionName=name, Payload=json.dumps(event))
    return json.loads(response["Payload"].read())


def assert_update_failed(lam, name):
    """The function's last update failed on its corrupt package, and the function stays Active."""
    with pytest.raises(botocore.exceptions.WaiterError):
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    config = lam.get_function_configuration(FunctionName=name)
    assert (config["State"], config["LastUpdateStatus"]) == ("Active", "Failed")
    assert config["LastUpdateStatusReasonCode"] == "InvalidZipFileException"
    assert config["LastUpdateStatusReason"].startswith("Could not unzip uploaded file")


def test_a_large_package_answers_pending_then_becomes_active(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("large")
    created = create(lam, name, package(64))
    assert (created["State"], created["StateReasonCode"]) == ("Pending", "Creating")
    assert created["CodeSize"] > 10 * 1024 * 1024
    wait_active(lam, name)
    config = lam.get_function_configuration(FunctionName=name)
    assert (config["State"], config["LastUpdateStatus"]) == ("Active", "Successful")
    assert invoke(lam, name, {"k": 1}) == {"version": 1, "event": {"k": 1}}
    lam.delete_function(FunctionName=name)


def test_an_invocation_sent_while_pending_succeeds(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("early")
    assert create(lam, name, package(8))["State"] == "Pending"
    # Sent at once: it waits for the package and the start paths.
    assert invoke(lam, name, {"k": 2}) == {"version": 1, "event": {"k": 2}}
    assert lam.get_function_configuration(FunctionName=name)["State"] == "Active"


def test_a_corrupt_entry_makes_the_function_failed(kiln):
    lam = kiln.client()
    name = unique("corrupt")
    created = create(lam, name, corrupt_package())
    assert created["State"] == "Pending"
    with pytest.raises(botocore.exceptions.WaiterError) as waited:
        wait_active(lam, name)
    assert "Failed" in str(waited.value)
    config = lam.get_function_configuration(FunctionName=name)
    assert config["State"] == "Failed"
    assert config["StateReasonCode"] == "InvalidZipFileException"
    assert config["StateReason"].startswith("Could not unzip uploaded file")
    with pytest.raises(lam.exceptions.ResourceConflictException) as refused:
        invoke(lam, name, {})
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert "The function is currently in the following state: Failed" in refused.value.response["Error"]["Message"]
    # As on Lambda, a failed function is deleted (and created again).
    lam.delete_function(FunctionName=name)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name)


def test_update_function_code_is_in_progress_then_successful(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("update")
    create(lam, name, package(1, version=1))
    wait_active(lam, name)
    updated = lam.update_function_code(FunctionName=name, ZipFile=package(16, version=2))
    assert (updated["State"], updated["LastUpdateStatus"]) == ("Active", "InProgress")
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    config = lam.get_function_configuration(FunctionName=name)
    assert (config["State"], config["LastUpdateStatus"]) == ("Active", "Successful")
    assert invoke(lam, name, {})["version"] == 2


def test_the_previous_code_runs_while_an_update_is_in_progress(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("inprogress")
    create(lam, name, package(1, version=1))
    wait_active(lam, name)
    assert invoke(lam, name, {})["version"] == 1
    assert lam.update_function_code(FunctionName=name, ZipFile=package(96, version=2))["LastUpdateStatus"] == "InProgress"
    answered = invoke(lam, name, {"k": 5})
    status = lam.get_function_configuration(FunctionName=name)["LastUpdateStatus"]
    # Still being extracted after the answer: the answer came from the code before the update,
    # with no wait for the new package.
    if status == "InProgress":
        assert answered == {"version": 1, "event": {"k": 5}}
    else:
        assert answered["version"] in (1, 2)
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    assert invoke(lam, name, {})["version"] == 2


def test_an_update_with_a_corrupt_entry_fails_and_a_good_one_recovers(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("badupdate")
    create(lam, name, package(1, version=1))
    wait_active(lam, name)
    updated = lam.update_function_code(FunctionName=name, ZipFile=corrupt_package(version=2))
    assert updated["LastUpdateStatus"] == "InProgress"
    assert_update_failed(lam, name)
    # As on Lambda, the function keeps running the code it ran before the failed update.
    assert invoke(lam, name, {"k": 4}) == {"version": 1, "event": {"k": 4}}
    lam.update_function_code(FunctionName=name, ZipFile=package(1, version=3))
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    assert invoke(lam, name, {})["version"] == 3


def zeros_package(unzipped_bytes):
    """app.py and zeros: a small zip that declares `unzipped_bytes`."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("app.py", HANDLER % 1)
        with z.open("zeros.bin", "w", force_zip64=True) as entry:
            chunk = bytes(1024 * 1024)
            for _ in range(unzipped_bytes // len(chunk)):
                entry.write(chunk)
    return out.getvalue()


def test_an_unzipped_size_over_the_limit_is_refused_before_answering(kiln):
    lam = kiln.client()
    name = unique("toolarge")
    big = zeros_package(251 * 1024 * 1024)
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as refused:
        create(lam, name, big)
    assert refused.value.response["Error"]["Message"] == "Unzipped size must be smaller than 262144000 bytes"
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_function(FunctionName=name)
    create(lam, name, package(1))
    wait_active(lam, name)
    with pytest.raises(lam.exceptions.InvalidParameterValueException):
        lam.update_function_code(FunctionName=name, ZipFile=big)
    assert invoke(lam, name, {})["version"] == 1


def test_a_restart_during_the_extraction_extracts_again(fresh_kiln):
    server = fresh_kiln()
    lam = server.client(read_timeout=120)
    good, bad = unique("restart"), unique("restartbad")
    assert create(lam, good, package(48))["State"] == "Pending"
    assert create(lam, bad, corrupt_package())["State"] == "Pending"
    # Killed at once: whatever was acknowledged is on disk, the extraction maybe not.
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    lam = restarted.client(read_timeout=120)
    wait_active(lam, good)
    assert invoke(lam, good, {"k": 3}) == {"version": 1, "event": {"k": 3}}
    with pytest.raises(botocore.exceptions.WaiterError):
        wait_active(lam, bad)
    assert lam.get_function_configuration(FunctionName=bad)["StateReasonCode"] == "InvalidZipFileException"


def test_a_failed_update_keeps_the_previous_code_across_a_restart(fresh_kiln):
    server = fresh_kiln()
    lam = server.client(read_timeout=120)
    name = unique("failedrestart")
    create(lam, name, package(1, version=1))
    wait_active(lam, name)
    lam.update_function_code(FunctionName=name, ZipFile=corrupt_package(version=2))
    with pytest.raises(botocore.exceptions.WaiterError):
        lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    # Killed: what the update acknowledged, the code from before it included, is on disk.
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    lam = restarted.client(read_timeout=120)
    # The update's package is extracted again at the start, and fails again.
    assert_update_failed(lam, name)
    assert invoke(lam, name, {"k": 6}) == {"version": 1, "event": {"k": 6}}
    # A sound package replaces both.
    lam.update_function_code(FunctionName=name, ZipFile=package(1, version=3))
    lam.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    assert invoke(lam, name, {})["version"] == 3
    restarted.restart()
    lam = restarted.client(read_timeout=120)
    wait_active(lam, name)
    assert invoke(lam, name, {})["version"] == 3
