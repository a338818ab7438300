"""The `kiln` command line against a real server."""

import json
import os
import subprocess
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from kiln_harness import GATED_INIT, KILN_BIN, NODE_RUNTIME, PYTHON_RUNTIME, Gate

DEADLINE = 120

APP = """
import json, os, time

def handler(event, context):
    print("cli-log", json.dumps(event, sort_keys=True))
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("fail"):
        raise ValueError("asked to fail")
    return {"event": event, "k": os.environ.get("K"), "memory": context.memory_limit_in_mb,
            "version": VERSION}

VERSION = "v1"
"""


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def code_dir(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.txt").write_text("data")
    return tmp_path


def deploy(kiln, name, code_dir, *extra):
    return kiln.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
                    "--code", str(code_dir), *extra)


def cli_json(kiln, *args):
    result = kiln.cli("--json", *args)
    return json.loads(result.stdout)


def env_for(kiln):
    env = dict(os.environ, KILN_ENDPOINT=kiln.endpoint, KILN_DATA_DIR=str(kiln.data_dir))
    env.pop("AWS_ACCESS_KEY_ID", None)
    env.pop("AWS_SECRET_ACCESS_KEY", None)
    return env


def wait_for(predicate, what, deadline=DEADLINE, interval=0.2):
    end = time.time() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


# --- deploy / get / ls ------------------------------------------------------------------------


def test_deploy_then_get(kiln, code_dir):
    name = unique("clideploy")
    result = deploy(kiln, name, code_dir, "--memory", "256", "--timeout", "5", "--env", "K=V", "--env", "X=a=b")
    assert name in result.stdout and "deployed" in result.stdout
    config = kiln.client().get_function_configuration(FunctionName=name)
    assert config["Runtime"] == PYTHON_RUNTIME and config["Handler"] == "app.handler"
    assert config["MemorySize"] == 256 and config["Timeout"] == 5
    assert config["Environment"]["Variables"] == {"K": "V", "X": "a=b"}
    human = kiln.cli("get", name).stdout
    assert name in human and "256" in human and "python3.11" in human and "K=V" in human
    got = cli_json(kiln, "get", name)
    assert got["Configuration"]["FunctionName"] == name
    assert got["Configuration"]["MemorySize"] == 256
    # The directory was zipped with its subdirectories.
    import io
    import requests
    zipped = requests.get(got["Code"]["Location"], timeout=30).content
    names = zipfile.ZipFile(io.BytesIO(zipped)).namelist()
    assert "app.py" in names and "lib/helper.txt" in names


def test_deploy_json_output(kiln, code_dir):
    name = unique("clideployjson")
    out = cli_json(kiln, "deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
                   "--code", str(code_dir))
    assert out["FunctionName"] == name
    assert out["MemorySize"] == 128


def test_deploy_zip_file(kiln, code_dir, tmp_path_factory):
    name = unique("clizip")
    archive = tmp_path_factory.mktemp("zip") / "code.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(code_dir / "app.py", "app.py")
    deploy(kiln, name, archive)
    assert cli_json(kiln, "invoke", name)["Payload"]["version"] == "v1"


def test_redeploy_updates_code_and_configuration(kiln, code_dir):
    name = unique("cliredeploy")
    deploy(kiln, name, code_dir, "--memory", "256", "--env", "K=one")
    assert cli_json(kiln, "invoke", name)["Payload"]["k"] == "one"
    (code_dir / "app.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
    result = deploy(kiln, name, code_dir, "--memory", "512", "--env", "K=two")
    assert "updated" in result.stdout
    out = cli_json(kiln, "invoke", name)
    assert out["Payload"]["version"] == "v2"
    assert out["Payload"]["k"] == "two"
    assert int(out["Payload"]["memory"]) == 512
    # Still one function of that name.
    assert [f["FunctionName"] for f in cli_json(kiln, "ls")].count(name) == 1


def test_ls_human_and_json(kiln, code_dir):
    names = [unique("clils") for _ in range(3)]
    for name in names:
        deploy(kiln, name, code_dir)
    human = kiln.cli("ls").stdout
    lines = human.splitlines()
    assert "NAME" in lines[0] and "RUNTIME" in lines[0]
    for name in names:
        assert any(line.split()[0] == name and PYTHON_RUNTIME in line for line in lines[1:]), name
    listed = cli_json(kiln, "ls")
    assert isinstance(listed, list)
    assert {f["FunctionName"] for f in listed} >= set(names)


def test_ls_lists_more_than_a_page(kiln, code_dir):
    """ListFunctions pages hold 50; `kiln ls` follows NextMarker."""
    existing = len(cli_json(kiln, "ls"))
    prefix = unique("clipage")
    needed = max(0, 52 - existing)
    lam = kiln.client()
    from kiln_harness import zip_files
    zipped = zip_files({"app.py": APP})
    for i in range(needed):
        lam.create_function(FunctionName=f"{prefix}-{i:03}", Runtime=PYTHON_RUNTIME, Role="arn:aws:iam::000000000000:role/x",
                            Handler="app.handler", Code={"ZipFile": zipped})
    listed = [f["FunctionName"] for f in cli_json(kiln, "ls")]
    assert len(listed) == len(set(listed)) >= 52
    for i in range(needed):
        assert f"{prefix}-{i:03}" in listed


# --- invoke -----------------------------------------------------------------------------------


def test_invoke_inline_payload(kiln, code_dir):
    name = unique("cliinvoke")
    deploy(kiln, name, code_dir, "--env", "K=V")
    result = kiln.cli("invoke", name, "--payload", '{"a": 1}')
    payload = json.loads(result.stdout)
    assert payload["event"] == {"a": 1} and payload["k"] == "V"
    out = cli_json(kiln, "invoke", name, "--payload", '{"b": 2}')
    assert out["StatusCode"] == 200
    assert out["Payload"]["event"] == {"b": 2}
    assert out["FunctionError"] is None


def test_invoke_payload_from_file(kiln, code_dir, tmp_path_factory):
    name = unique("clifile")
    deploy(kiln, name, code_dir)
    event_file = tmp_path_factory.mktemp("event") / "event.json"
    event_file.write_text(json.dumps({"from": "file", "n": [1, 2, 3]}))
    result = kiln.cli("invoke", name, "--payload", f"@{event_file}")
    assert json.loads(result.stdout)["event"] == {"from": "file", "n": [1, 2, 3]}


def test_invoke_missing_payload_file_is_an_error(kiln, code_dir):
    name = unique("clinofile")
    deploy(kiln, name, code_dir)
    result = kiln.cli("invoke", name, "--payload", "@/no/such/file.json", check=False)
    assert result.returncode != 0
    assert "/no/such/file.json" in result.stderr


def test_invoke_async(kiln, code_dir):
    name = unique("cliasync")
    deploy(kiln, name, code_dir)
    token = uuid.uuid4().hex
    result = kiln.cli("invoke", name, "--async", "--payload", json.dumps({"token": token}))
    assert "queued" in result.stdout
    out = cli_json(kiln, "invoke", name, "--async", "--payload", json.dumps({"token": token + "-json"}))
    assert out["StatusCode"] == 202 and out["RequestId"]
    wait_for(lambda: token in kiln.cli("logs", name).stdout and token + "-json" in kiln.cli("logs", name).stdout,
             "both async invocations to run")


def test_invoke_tail(kiln, code_dir):
    name = unique("clitail")
    deploy(kiln, name, code_dir)
    result = kiln.cli("invoke", name, "--tail", "--payload", '{"tail": "me"}')
    assert "START RequestId" in result.stderr and "REPORT RequestId" in result.stderr
    assert 'cli-log {"tail": "me"}' in result.stderr
    assert json.loads(result.stdout)["event"] == {"tail": "me"}
    out = cli_json(kiln, "invoke", name, "--tail")
    assert "REPORT RequestId" in out["LogResult"]


def test_invoke_function_error_exits_non_zero(kiln, code_dir):
    name = unique("clifail")
    deploy(kiln, name, code_dir)
    result = kiln.cli("invoke", name, "--payload", '{"fail": true}', check=False)
    assert result.returncode != 0
    assert "asked to fail" in result.stdout + result.stderr
    result = kiln.cli("--json", "invoke", name, "--payload", '{"fail": true}', check=False)
    assert result.returncode != 0
    out = json.loads(result.stdout)
    assert out["FunctionError"] == "Unhandled"
    assert out["Payload"]["errorType"] == "ValueError"


def test_invoke_node_function(kiln, tmp_path):
    (tmp_path / "index.js").write_text("exports.handler = async (event) => ({ node: true, event });\n")
    name = unique("clinode")
    kiln.cli("deploy", name, "--runtime", NODE_RUNTIME, "--handler", "index.handler", "--code", str(tmp_path))
    assert cli_json(kiln, "invoke", name, "--payload", '{"x": 1}')["Payload"] == {"node": True, "event": {"x": 1}}


# --- logs -------------------------------------------------------------------------------------


def test_logs(kiln, code_dir):
    name = unique("clilogs")
    deploy(kiln, name, code_dir)
    kiln.cli("invoke", name, "--payload", '{"log": "line-one"}')
    kiln.cli("invoke", name, "--payload", '{"log": "line-two"}')
    text = kiln.cli("logs", name).stdout
    assert 'cli-log {"log": "line-one"}' in text
    assert 'cli-log {"log": "line-two"}' in text
    assert text.index("line-one") < text.index("line-two")
    assert "REPORT RequestId" in text
    out = cli_json(kiln, "logs", name)
    assert any("line-two" in line for line in out["lines"])


def test_logs_follow(kiln, code_dir):
    name = unique("clifollow")
    deploy(kiln, name, code_dir)
    proc = subprocess.Popen([str(KILN_BIN), "logs", "-f", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for(kiln))
    try:
        token = uuid.uuid4().hex
        lines = []

        def reader():
            for line in proc.stdout:
                lines.append(line)

        threading.Thread(target=reader, daemon=True).start()
        # Invoke until the follower shows it (the follower may subscribe after the first invoke,
        # in which case that invoke is in the initial tail instead: either way it shows).
        kiln.cli("invoke", name, "--payload", json.dumps({"follow": token}))
        wait_for(lambda: any(token in line for line in lines), "the followed log line")
        second = uuid.uuid4().hex
        kiln.cli("invoke", name, "--payload", json.dumps({"follow": second}))
        wait_for(lambda: any(second in line for line in lines), "a second followed log line")
        assert proc.poll() is None, "kiln logs -f exited"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_logs_follow_json(kiln, code_dir):
    name = unique("clifollowjson")
    deploy(kiln, name, code_dir)
    proc = subprocess.Popen([str(KILN_BIN), "--json", "logs", "-f", name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for(kiln))
    try:
        lines = []
        threading.Thread(target=lambda: [lines.append(line) for line in proc.stdout], daemon=True).start()
        token = uuid.uuid4().hex
        kiln.cli("invoke", name, "--payload", json.dumps({"follow": token}))
        wait_for(lambda: any(token in line for line in lines), "the followed log line")
        for line in list(lines):
            json.loads(line)
    finally:
        proc.kill()
        proc.wait(timeout=10)


# --- status / rm ------------------------------------------------------------------------------


def instance_states(kiln, name):
    status = json.loads(kiln.cli("--json", "status").stdout)
    return [i["state"] for i in status["node"]["instances"] if i["function"] == name]


def test_status_shows_idle_instance(kiln, code_dir):
    name = unique("clistatus")
    deploy(kiln, name, code_dir)
    kiln.cli("invoke", name)
    wait_for(lambda: "idle" in instance_states(kiln, name), "an idle instance")
    human = kiln.cli("status").stdout
    assert "FUNCTION" in human and "STATE" in human
    assert any(name in line and "idle" in line for line in human.splitlines()), human


def test_status_shows_busy_instance(kiln, code_dir):
    """The handler sleeps long enough that polling sees it busy; then it is idle again."""
    name = unique("clibusy")
    deploy(kiln, name, code_dir, "--timeout", "120")
    results = []
    thread = threading.Thread(target=lambda: results.append(
        kiln.cli("invoke", name, "--payload", json.dumps({"sleep": 20}), timeout=180)))
    thread.start()
    try:
        assert wait_for(lambda: "busy" in instance_states(kiln, name) or results, "the instance to show as busy",
                        deadline=150)
        human = kiln.cli("status").stdout
        assert not results, "the invocation finished before the instance was ever seen busy"
        assert any(line.split()[:1] == [name] and "busy" in line.split() for line in human.splitlines()) or results, human
    finally:
        thread.join(timeout=180)
    assert results and results[0].returncode == 0
    wait_for(lambda: "idle" in instance_states(kiln, name), "the instance to be idle again")


def test_rm(kiln, code_dir):
    name = unique("clirm")
    deploy(kiln, name, code_dir)
    result = kiln.cli("rm", name)
    assert name in result.stdout
    with pytest.raises(kiln.client().exceptions.ResourceNotFoundException):
        kiln.client().get_function(FunctionName=name)
    result = kiln.cli("rm", name, check=False)
    assert result.returncode != 0
    assert "not found" in result.stderr.lower()
    name2 = unique("clirmjson")
    deploy(kiln, name2, code_dir)
    assert cli_json(kiln, "rm", name2) == {"deleted": name2}


def test_deploy_with_url(kiln, code_dir):
    import requests
    name = unique("cliurl")
    result = deploy(kiln, name, code_dir, "--url", "public")
    url = next(line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("url: "))
    response = requests.get(url, timeout=60)
    assert response.status_code == 200
    assert response.json()["event"]["rawPath"] == "/"
    # Redeploying with a URL keeps it working and can switch it to IAM.
    out = cli_json(kiln, "deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
                   "--code", str(code_dir), "--url", "iam")
    assert out["FunctionUrl"] == url
    assert requests.get(url, timeout=60).status_code == 403


# --- JSON everywhere, errors ------------------------------------------------------------------


def test_every_command_has_json_output(kiln, code_dir):
    name = unique("clijson")
    outputs = [
        kiln.cli("--json", "deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
                 "--code", str(code_dir)),
        kiln.cli("--json", "get", name),
        kiln.cli("--json", "ls"),
        kiln.cli("--json", "invoke", name),
        kiln.cli("--json", "invoke", name, "--async"),
        kiln.cli("--json", "invoke", name, "--tail"),
        kiln.cli("--json", "logs", name),
        kiln.cli("--json", "status"),
        kiln.cli("--json", "rm", name),
    ]
    for result in outputs:
        json.loads(result.stdout)
    # `--json` may also come after the subcommand.
    json.loads(kiln.cli("ls", "--json").stdout)


@pytest.mark.parametrize("args, needle", [
    (["get", "no-such-fn-cli"], "not found"),
    (["invoke", "no-such-fn-cli"], "not found"),
    (["logs", "no-such-fn-cli"], "not found"),
    (["rm", "no-such-fn-cli"], "not found"),
    (["deploy", "bad name!", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", "{code}"], "functionName"),
    (["deploy", "cli-badmem", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", "{code}",
      "--memory", "64"], "memorySize"),
    (["deploy", "cli-badrt", "--runtime", "cobol", "--handler", "app.handler", "--code", "{code}"], "runtime"),
    (["deploy", "cli-badcode", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code",
      "/no/such/dir"], "/no/such/dir"),
    (["deploy", "cli-badenv", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", "{code}",
      "--env", "NOEQUALS"], "KEY=VALUE"),
    (["invoke", "no-such-fn-cli", "--payload", "{not json"], ""),
])
def test_errors_are_readable(kiln, code_dir, args, needle):
    args = [a.replace("{code}", str(code_dir)) for a in args]
    for prefix in ([], ["--json"]):
        result = kiln.cli(*prefix, *args, check=False)
        assert result.returncode != 0
        message = result.stderr.strip()
        assert message, "no error message"
        assert "panicked" not in message
        assert needle.lower() in message.lower(), message
        assert len(message.splitlines()) <= 5, message
        assert "__type" not in message, "raw error JSON instead of a message: " + message


def test_deploy_with_bad_url_kind_creates_nothing(kiln, code_dir):
    name = unique("clibadurl")
    result = kiln.cli("deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
                        "--code", str(code_dir), "--url", "sometimes", check=False)
    assert result.returncode != 0
    assert "--url" in result.stderr
    with pytest.raises(kiln.client().exceptions.ResourceNotFoundException):
        kiln.client().get_function(FunctionName=name)


def test_refused_redeploy_leaves_the_function_as_it_was(kiln, code_dir):
    name = unique("clirefused")
    deploy(kiln, name, code_dir, "--memory", "256")
    (code_dir / "app.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
    result = kiln.cli(
        "deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", str(code_dir),
        "--memory", "64", check=False)
    assert result.returncode != 0
    assert "memorySize" in result.stderr
    out = cli_json(kiln, "invoke", name)
    assert out["Payload"]["version"] == "v1"
    assert int(out["Payload"]["memory"]) == 256


def test_redeploy_waits_for_each_change_before_the_next(kiln, code_dir):
    """A redeploy changes the configuration, then the code; Lambda refuses a change while the one
    before it is in progress, so each waits: here for the function to be created, then for its new
    configuration (whose init waits on a second gate)."""
    name = unique("cliwaits")

    def config():
        return kiln.client().get_function_configuration(FunctionName=name)

    with Gate() as created, Gate() as configured:
        (code_dir / "app.py").write_text(GATED_INIT + APP)
        deploy(kiln, name, code_dir, "--network", "host", "--env", f"GATE={created.port}")
        assert config()["State"] == "Pending"
        (code_dir / "app.py").write_text(GATED_INIT + APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
        redeploy = subprocess.Popen(
            [str(KILN_BIN), "deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
             "--code", str(code_dir), "--network", "host", "--env", f"GATE={configured.port}", "--env", "K=two"],
            env=env_for(kiln), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Time to have made a change too early (a 409 would end it); it waits instead.
        time.sleep(1)
        assert redeploy.poll() is None and config()["State"] == "Pending"
        created.open()
        wait_for(lambda: config()["Environment"]["Variables"].get("K") == "two", "the new configuration")
        time.sleep(1)
        assert redeploy.poll() is None and config()["LastUpdateStatus"] == "InProgress"
        configured.open()
        out, err = redeploy.communicate(timeout=DEADLINE)
        assert redeploy.returncode == 0, err
        assert "updated" in out
        payload = cli_json(kiln, "invoke", name)["Payload"]
        assert (payload["version"], payload["k"]) == ("v2", "two")


def test_invalid_payload_is_readable(kiln, code_dir):
    name = unique("clibadpayload")
    deploy(kiln, name, code_dir)
    result = kiln.cli("invoke", name, "--payload", "{not json", check=False)
    assert result.returncode != 0
    assert "InvalidRequestContentException" in result.stderr


def test_unreachable_server_is_readable(kiln):
    result = subprocess.run([str(KILN_BIN), "ls"], capture_output=True, text=True, timeout=60,
                            env=dict(env_for(kiln), KILN_ENDPOINT="http://127.0.0.1:1"))
    assert result.returncode != 0
    assert "cannot reach kiln" in result.stderr


def test_missing_credentials_are_readable(kiln, tmp_path):
    result = subprocess.run([str(KILN_BIN), "ls"], capture_output=True, text=True, timeout=60,
                            env=dict(env_for(kiln), KILN_DATA_DIR=str(tmp_path)))
    assert result.returncode != 0
    assert "credentials" in result.stderr


def test_wrong_credentials_are_readable(kiln):
    env = dict(env_for(kiln), AWS_ACCESS_KEY_ID=kiln.access_key, AWS_SECRET_ACCESS_KEY="wrong" * 8)
    result = subprocess.run([str(KILN_BIN), "ls"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode != 0
    assert "signature" in result.stderr.lower()


def test_cli_uses_aws_env_credentials(kiln, code_dir):
    env = dict(env_for(kiln), AWS_ACCESS_KEY_ID=kiln.access_key, AWS_SECRET_ACCESS_KEY=kiln.secret_key,
               KILN_DATA_DIR="/nonexistent")
    result = subprocess.run([str(KILN_BIN), "--json", "ls"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)
