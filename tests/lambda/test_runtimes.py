"""Real functions on every runtime kiln offers, deployed and invoked with boto3 as a Lambda user would.

Each fixture function lives in tests/functions/<name>/. Behaviour is compared with AWS Lambda's: the
context object, the reserved environment variables, error shapes, init failures and the log tail.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kiln_harness import FUNCTIONS, NODE_RUNTIME, PYTHON_RUNTIME


def request_id_of(response):
    """The invocation's request id, from the START line of its log (LogType=Tail is needed)."""
    tail = base64.b64decode(response["LogResult"]).decode()
    return re.match(r"START RequestId: (\S+) ", tail).group(1)


def assert_unhandled(result, response, error_type):
    assert response["StatusCode"] == 200, response
    assert response.get("FunctionError") == "Unhandled", (result, response)
    assert isinstance(result, dict), result
    assert result["errorType"] == error_type, result
    return result


def test_sync_invoke_response_carries_request_id(kiln):
    kiln.deploy("rt-reqid", PYTHON_RUNTIME, "app.echo", code="python_basic")
    _, response = kiln.invoke("rt-reqid", LogType="Tail")
    assert response["ResponseMetadata"]["HTTPHeaders"].get("x-amzn-requestid") == request_id_of(response)


# ------------------------------------------------------------------------------------------------- Node.js
@pytest.fixture(scope="module")
def node_fn(kiln):
    created = kiln.deploy("rt-node", NODE_RUNTIME, "index.asyncHandler", code="node_cjs", MemorySize=256, Timeout=7)
    return created


def node_with_handler(kiln, handler, name=None, **config):
    name = name or "rt-node-" + handler.replace(".", "-").replace("/", "-").lower()
    kiln.deploy(name, NODE_RUNTIME, handler, code="node_cjs", **config)
    return name


def test_node_async_handler(kiln, node_fn):
    result, response = kiln.invoke("rt-node", {"n": 1})
    assert response["StatusCode"] == 200
    assert "FunctionError" not in response
    assert result == {"kind": "async", "event": {"n": 1}}


def test_node_callback_handler(kiln):
    name = node_with_handler(kiln, "index.callbackHandler")
    result, response = kiln.invoke(name, {"n": 2})
    assert "FunctionError" not in response
    assert result == {"kind": "callback", "event": {"n": 2}}


def test_node_esm_mjs(kiln):
    kiln.deploy("rt-node-mjs", NODE_RUNTIME, "app.handler", code="node_esm_mjs")
    result, response = kiln.invoke("rt-node-mjs", {"x": "y"})
    assert "FunctionError" not in response, result
    assert result == {"module": "esm-mjs", "file": "app.mjs", "event": {"x": "y"}}


def test_node_esm_js_with_package_type_module(kiln):
    kiln.deploy("rt-node-esm-pkg", NODE_RUNTIME, "app.handler", code="node_esm_pkg")
    result, response = kiln.invoke("rt-node-esm-pkg", {"n": 21})
    assert "FunctionError" not in response, result
    assert result == {"module": "esm-pkg", "value": 42, "isEsm": True}


def test_node_context_fields(kiln, node_fn):
    name = node_with_handler(kiln, "index.context", name="rt-node-ctx", MemorySize=256, Timeout=7)
    arn = kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    result, response = kiln.invoke(name, LogType="Tail")
    assert "FunctionError" not in response, result
    assert result["awsRequestId"] == request_id_of(response)
    assert result["functionName"] == name
    assert result["invokedFunctionArn"] == arn
    assert str(result["memoryLimitInMB"]) == "256"
    assert 0 < result["remaining"] <= 7000
    assert result["cwd"] == "/var/task"


def test_node_lambda_environment(kiln):
    name = node_with_handler(kiln, "index.context", name="rt-node-env", MemorySize=256)
    result, _ = kiln.invoke(name)
    env = result["env"]
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == name
    assert env["_HANDLER"] == "index.context"
    assert env["LAMBDA_TASK_ROOT"] == "/var/task"
    assert env["AWS_REGION"] == kiln.region
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert env["AWS_LAMBDA_FUNCTION_VERSION"] == "$LATEST"
    assert env["AWS_EXECUTION_ENV"] == "AWS_Lambda_" + NODE_RUNTIME
    assert env["KILN_SHIM_FD"] is None, "the agent's socket must not leak into the function's environment"


def test_node_thrown_error(kiln):
    name = node_with_handler(kiln, "index.fails")
    result, response = kiln.invoke(name, LogType="Tail")
    assert_unhandled(result, response, "TypeError")
    assert result["errorMessage"] == "kaboom from node"
    assert isinstance(result["trace"], list) and result["trace"]
    assert any("index.js" in line for line in result["trace"]), result["trace"]
    assert "stackTrace" not in result
    tail = kiln.log_tail(response)
    assert "Invoke Error" in tail and "kaboom from node" in tail


def test_node_console_output_in_log_tail(kiln):
    name = node_with_handler(kiln, "index.logs")
    result, response = kiln.invoke(name, {"tag": "t-node-1"}, LogType="Tail")
    assert result == "logged"
    request_id = request_id_of(response)
    tail = kiln.log_tail(response)
    lines = tail.splitlines()
    info = [line for line in lines if "node log line one t-node-1" in line]
    assert info and request_id in info[0] and "\tINFO\t" in info[0], tail
    assert any("node error line two t-node-1" in line and "\tERROR\t" in line for line in lines), tail
    assert "raw stdout t-node-1" in tail
    # The function's output sits between START and END of its own request.
    assert lines[0].startswith("START RequestId: " + request_id)
    end = next(i for i, line in enumerate(lines) if line.startswith("END RequestId: "))
    assert all(i < end for i, line in enumerate(lines) if "t-node-1" in line)
    assert lines[-1].startswith("REPORT RequestId: " + request_id)


def test_node_uncaught_exception_answers_then_replaces_the_instance(kiln):
    name = node_with_handler(kiln, "index.asyncThrow")
    for _ in range(4):  # the answer must win over the exit that follows it, every time
        result, response = kiln.invoke(name, LogType="Tail")
        assert_unhandled(result, response, "RangeError")
        assert result["errorMessage"] == "async boom"
        tail = kiln.log_tail(response)
        assert "Uncaught Exception" in tail and "Init Duration" in tail


@pytest.mark.parametrize("runtime,code,handler", [
    (NODE_RUNTIME, "node_cjs", "index.chatty"), (PYTHON_RUNTIME, "python_basic", "app.chatty")])
def test_large_output_is_complete_before_the_answer(kiln, runtime, code, handler):
    name = "rt-chatty-" + runtime.split(".")[0]
    kiln.deploy(name, runtime, handler, code=code)
    for lines in (20000, 3):
        result, response = kiln.invoke(name, {"lines": lines}, LogType="Tail")
        assert result == {"lines": lines}
        tail = kiln.log_tail(response).splitlines()
        end = next(i for i, line in enumerate(tail) if line.startswith("END RequestId: "))
        assert "chatty line %06d " % (lines - 1) in tail[end - 1], tail[end - 3:end + 1]


@pytest.mark.parametrize("runtime,code,handler", [
    (NODE_RUNTIME, "node_cjs", "index.spawns"), (PYTHON_RUNTIME, "python_basic", "app.spawns")])
def test_threads_and_child_processes_work_in_the_sandbox(kiln, runtime, code, handler):
    name = "rt-spawns-" + runtime.split(".")[0]
    kiln.deploy(name, runtime, handler, code=code)
    result, response = kiln.invoke(name)
    assert "FunctionError" not in response, result
    if runtime == NODE_RUNTIME:
        assert result == {"child": True, "fromWorker": 42, "readAsync": True}
    else:
        assert result == {"child": True, "thread": [45], "pool": [0, 1, 4, 9, 16]}


@pytest.mark.parametrize("handler,error_type,message", [
    ("nohandler.handler", "Runtime.HandlerNotFound", "nohandler.handler is undefined or not exported"),
    ("imports.handler", "Runtime.ImportModuleError", "a-module-that-does-not-exist"),
    ("missingfile.handler", "Runtime.ImportModuleError", "missingfile"),
    ("syntax.handler", "Runtime.UserCodeSyntaxError", "SyntaxError"),
    ("throws.handler", "InitFailure", "init went wrong in node"),
])
def test_node_init_failures(kiln, handler, error_type, message):
    name = "rt-node-init-" + handler.split(".")[0]
    kiln.deploy(name, NODE_RUNTIME, handler, code="node_init_errors")
    for _ in range(2):  # a failed init is not cached: every invoke tries again and fails the same way
        result, response = kiln.invoke(name, LogType="Tail")
        assert_unhandled(result, response, error_type)
        assert message in result["errorMessage"], result
        assert "Init Duration" in kiln.log_tail(response)
    assert not [i for i in status_instances(kiln) if i["function"] == name]


# ------------------------------------------------------------------------------------------------- Python
@pytest.fixture(scope="module")
def python_fn(kiln):
    return kiln.deploy("rt-py", PYTHON_RUNTIME, "app.echo", code="python_basic", MemorySize=256, Timeout=7)


def py_with_handler(kiln, handler, name=None, **config):
    name = name or "rt-py-" + handler.replace(".", "-").replace("_", "-").lower()
    kiln.deploy(name, PYTHON_RUNTIME, handler, code="python_basic", **config)
    return name


def test_python_handler(kiln, python_fn):
    result, response = kiln.invoke("rt-py", {"a": [1, 2]})
    assert "FunctionError" not in response, result
    assert result == {"kind": "python", "event": {"a": [1, 2]}}


def test_python_context_fields(kiln):
    name = py_with_handler(kiln, "app.context_info", MemorySize=256, Timeout=7)
    arn = kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    result, response = kiln.invoke(name, LogType="Tail")
    assert "FunctionError" not in response, result
    assert result["awsRequestId"] == request_id_of(response)
    assert result["functionName"] == name
    assert result["invokedFunctionArn"] == arn
    assert str(result["memoryLimitInMB"]) == "256"
    assert 0 < result["remaining"] <= 7000
    assert result["cwd"] == "/var/task"
    env = result["env"]
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == name
    assert env["_HANDLER"] == "app.context_info"
    assert env["LAMBDA_TASK_ROOT"] == "/var/task"
    assert env["AWS_REGION"] == kiln.region
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert env["AWS_EXECUTION_ENV"] == "AWS_Lambda_" + PYTHON_RUNTIME
    assert env["KILN_SHIM_FD"] is None


def test_python_vendored_dependency(kiln):
    name = py_with_handler(kiln, "app.uses_dependency")
    result, response = kiln.invoke(name, {"text": "Hello, Vendored World!"})
    assert "FunctionError" not in response, result
    assert result == {"slug": "hello-vendored-world", "version": "1.2.3", "from": "/var/task/tinylib/__init__.py"}


def test_python_thrown_error(kiln):
    name = py_with_handler(kiln, "app.fails")
    result, response = kiln.invoke(name, LogType="Tail")
    assert_unhandled(result, response, "CustomFailure")
    assert result["errorMessage"] == "kaboom from python"
    assert result["requestId"] == request_id_of(response)
    assert result["stackTrace"] and any("app.py" in frame for frame in result["stackTrace"]), result
    assert "shim.py" not in json.dumps(result["stackTrace"]), "kiln's own frames must not show"
    assert "[ERROR] CustomFailure: kaboom from python" in kiln.log_tail(response)


def test_python_output_and_logging_in_log_tail(kiln):
    name = py_with_handler(kiln, "app.logs")
    result, response = kiln.invoke(name, {"tag": "t-py-1"}, LogType="Tail")
    assert result == "logged"
    request_id = request_id_of(response)
    tail = kiln.log_tail(response)
    assert "python print line t-py-1" in tail
    assert "python stderr line t-py-1" in tail
    logged = [line for line in tail.splitlines() if "python logging line t-py-1" in line]
    assert logged, tail
    assert logged[0].startswith("[INFO]\t") and f"\t{request_id}\t" in logged[0], logged[0]
    assert tail.splitlines()[-1].startswith("REPORT RequestId: " + request_id)


@pytest.mark.parametrize("handler,error_type,message", [
    ("nohandler.handler", "Runtime.HandlerNotFound", "Handler 'handler' missing on module 'nohandler'"),
    ("imports.handler", "Runtime.ImportModuleError", "No module named 'a_module_that_does_not_exist'"),
    ("missingfile.handler", "Runtime.ImportModuleError", "Unable to import module 'missingfile'"),
    ("syntax_error.handler", "Runtime.UserCodeSyntaxError", "Syntax error in module 'syntax_error'"),
    ("throws.handler", "InitFailure", "init went wrong in python"),
])
def test_python_init_failures(kiln, handler, error_type, message):
    name = "rt-py-init-" + handler.split(".")[0].replace("_", "-")
    kiln.deploy(name, PYTHON_RUNTIME, handler, code="python_init_errors")
    for _ in range(2):
        result, response = kiln.invoke(name, LogType="Tail")
        assert_unhandled(result, response, error_type)
        assert message in result["errorMessage"], result
        tail = kiln.log_tail(response)
        assert "Init Duration" in tail
        assert f"[ERROR] {error_type}" in tail, tail
    assert not [i for i in status_instances(kiln) if i["function"] == name]


# ------------------------------------------------------------------------------------------------- provided
def status_instances(kiln):
    return json.loads(kiln.cli("--json", "status").stdout)["node"]["instances"]


@pytest.fixture(scope="module")
def manual_fn(kiln):
    function = kiln.deploy("rt-manual", "provided.al2023", "ignored.handler", code="provided_manual", Timeout=9)
    kiln.settled("rt-manual")
    # No warm-up invocations before the standby instance (the hot path) is kept, so that the bootstrap's
    # invocation `count` says whether an invocation ran on a new process, whichever path started it.
    response = kiln.signed_request("PUT", "/2015-03-31/functions/rt-manual/configuration",
                                   json.dumps({"KilnPrebake": {"WarmupInvocations": 0}}),
                                   {"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    return {**function, "FunctionArn": response.json()["FunctionArn"]}


def test_provided_manual_runtime_api_headers(kiln, manual_fn):
    before = time.time() * 1000
    result, response = kiln.invoke("rt-manual", {"mode": "echo", "v": 1}, LogType="Tail")
    assert "FunctionError" not in response, result
    assert result["requestId"] == request_id_of(response)
    assert result["functionArn"] == manual_fn["FunctionArn"]
    deadline = int(result["deadlineMs"])
    assert before < deadline <= time.time() * 1000 + 9000
    assert result["traceId"].startswith("Root=1-"), result["traceId"]
    assert result["event"] == {"mode": "echo", "v": 1}
    assert result["uid"] != 0
    assert result["handler"] == "ignored.handler"
    assert result["taskRoot"] == "/var/task" and result["cwd"] == "/var/task"
    assert "manual bootstrap got " + request_id_of(response) in kiln.log_tail(response)


def test_provided_manual_reuses_its_process(kiln, manual_fn):
    first, _ = kiln.invoke("rt-manual", {"mode": "echo"})
    second, response = kiln.invoke("rt-manual", {"mode": "echo"}, LogType="Tail")
    assert second["count"] == first["count"] + 1
    assert "Init Duration" not in kiln.log_tail(response)


def test_provided_manual_error_post(kiln, manual_fn):
    result, response = kiln.invoke("rt-manual", {"mode": "error"})
    assert_unhandled(result, response, "Custom.Handled")
    assert result["errorMessage"].startswith("handled failure")
    # An error answer leaves the runtime healthy.
    ok, response = kiln.invoke("rt-manual", {"mode": "echo"})
    assert "FunctionError" not in response and ok["event"] == {"mode": "echo"}


def test_provided_manual_chunked_response(kiln, manual_fn):
    result, response = kiln.invoke("rt-manual", {"mode": "chunked", "parts": 40})
    assert "FunctionError" not in response, result
    assert result == [{"chunked": True, "part": i} for i in range(40)]


def test_provided_streamed_error_uses_the_error_body_trailer(kiln, manual_fn):
    """A runtime that fails midway through a streamed response (aws-lambda-go) sends the error's type and its
    JSON, base64-encoded, as trailers: the error is that JSON, not the partial response."""
    result, response = kiln.invoke("rt-manual", {"mode": "streamed_error"})
    assert_unhandled(result, response, "Custom.Streamed")
    assert result["errorMessage"] == "failed while streaming", result
    ok, response = kiln.invoke("rt-manual", {"mode": "echo"})
    assert "FunctionError" not in response and ok["event"] == {"mode": "echo"}


def test_provided_answer_then_exit(kiln, manual_fn):
    for _ in range(4):  # the posted answer wins over the exit that follows it, every time
        result, response = kiln.invoke("rt-manual", {"mode": "error_exit"})
        assert_unhandled(result, response, "Custom.Exited")
        assert result["errorMessage"] == "answered then exited"
    ok, response = kiln.invoke("rt-manual", {"mode": "echo"})
    assert "FunctionError" not in response and ok["count"] == 1


def test_provided_only_the_first_answer_counts(kiln, manual_fn):
    result, response = kiln.invoke("rt-manual", {"mode": "double"})
    assert result == "first"
    # The extra answers are refused, and are not taken for the next invocation's.
    after, response = kiln.invoke("rt-manual", {"mode": "echo", "after": True}, LogType="Tail")
    assert "FunctionError" not in response and after["event"] == {"mode": "echo", "after": True}, after
    # (the statuses were printed after the first answer, so they show in the next invocation's log)
    assert "double answer statuses 202 400 400" in kiln.log_tail(response)


def test_provided_init_error(kiln):
    kiln.deploy("rt-manual-initfail", "provided", "x.y", code="provided_manual",
                Environment={"Variables": {"BOOTSTRAP_INIT_FAIL": "1"}})
    result, response = kiln.invoke("rt-manual-initfail", LogType="Tail")
    assert_unhandled(result, response, "Custom.InitBroken")
    assert result["errorMessage"] == "bootstrap refused to start"
    assert "manual bootstrap starting" in kiln.log_tail(response)


def test_provided_missing_bootstrap(kiln):
    kiln.deploy("rt-no-bootstrap", "provided", "x.y", files={"README": "no bootstrap here"})
    result, response = kiln.invoke("rt-no-bootstrap")
    assert_unhandled(result, response, "Runtime.InvalidEntrypoint")


def test_provided_bootstrap_that_exits(kiln):
    kiln.deploy("rt-bootstrap-exits", "provided", "x.y", files={"bootstrap": "#!/bin/sh\necho bye\nexit 7\n"})
    result, response = kiln.invoke("rt-bootstrap-exits", LogType="Tail")
    assert_unhandled(result, response, "Runtime.ExitError")
    assert "exit status 7" in result["errorMessage"]
    assert "bye" in kiln.log_tail(response)


def vendor_awslambdaric(dest: Path):
    """Copies awslambdaric and its dependencies from this venv's site-packages (same interpreter)."""
    import awslambdaric
    import simplejson
    site = Path(awslambdaric.__file__).resolve().parent.parent
    shutil.copytree(site / "awslambdaric", dest / "awslambdaric", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(simplejson.__file__).parent, dest / "simplejson", ignore=shutil.ignore_patterns("__pycache__"))
    for pattern in ("runtime_client*.so", "snapshot_restore_py.py"):
        for file in site.glob(pattern):
            shutil.copy2(file, dest / file.name)


def test_provided_official_runtime_interface_client(kiln, tmp_path):
    code = tmp_path / "ric"
    shutil.copytree(FUNCTIONS / "provided_ric", code)
    vendor_awslambdaric(code)
    assert (code / "bootstrap").read_text() == "#!/bin/sh\nexec python3 -m awslambdaric app.handler\n"
    kiln.deploy("rt-ric", "provided.al2023", "app.handler", code=str(code), Timeout=10)
    result, response = kiln.invoke("rt-ric", {"hello": "ric"}, LogType="Tail")
    assert "FunctionError" not in response, (result, kiln.log_tail(response))
    assert result["ric"] == "/var/task/awslambdaric"
    assert result["requestId"] == request_id_of(response)
    assert result["functionName"] == "rt-ric"
    assert 0 < result["remaining"] <= 10000
    assert result["event"] == {"hello": "ric"}
    assert "hello from awslambdaric " + request_id_of(response) in kiln.log_tail(response)
    # A second invoke on the same client, then its error path.
    again, response = kiln.invoke("rt-ric", {"n": 2})
    assert again["event"] == {"n": 2}
    failure, response = kiln.invoke("rt-ric", {"fail": True})
    assert_unhandled(failure, response, "ValueError")
    assert failure["errorMessage"] == "ric failure"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_provided_c_bootstrap(kiln, tmp_path):
    code = tmp_path / "c"
    code.mkdir()
    subprocess.run(["gcc", "-O1", "-o", str(code / "bootstrap"), str(FUNCTIONS / "c_bootstrap" / "main.c")],
                   check=True, timeout=120)
    kiln.deploy("rt-c", "provided", "x.y", code=str(code))
    for n in range(2):
        result, response = kiln.invoke("rt-c", {"n": n}, LogType="Tail")
        assert "FunctionError" not in response, (result, kiln.log_tail(response))
        assert result == {"lang": "c", "requestId": request_id_of(response), "event": {"n": n}}


LAMBDA_PATH = "/usr/local/bin:/usr/bin/:/bin:/opt/bin"
ENV_PY = """
import os

def handler(event, context):
    return {name: os.environ.get(name) for name in ("PATH", "LANG", "TZ", "LD_LIBRARY_PATH")}
"""
ENV_NODE = """
exports.handler = async () => Object.fromEntries(
  ["PATH", "LANG", "TZ", "LD_LIBRARY_PATH"].map((name) => [name, process.env[name] ?? null]));
"""


def test_every_runtime_sees_lambdas_environment_not_the_shell_that_started_kiln(fresh_kiln):
    shell = dict(os.environ, PATH="/shell/bin:" + os.environ["PATH"], LANG="C", TZ="America/New_York",
                 LD_LIBRARY_PATH="/shell/lib")
    server = fresh_kiln(env=shell)
    functions = {
        "env-provided": ("provided.al2023", "ignored.handler", {"code": "provided_manual"}),
        "env-python": (PYTHON_RUNTIME, "app.handler", {"files": {"app.py": ENV_PY}}),
        "env-node": (NODE_RUNTIME, "index.handler", {"files": {"index.js": ENV_NODE}}),
    }
    for name, (runtime, handler, code) in functions.items():
        server.deploy(name, runtime, handler, **code)
        result, response = server.invoke(name, {"mode": "echo"})
        assert "FunctionError" not in response, result
        env = result.get("env", result)
        assert env["PATH"] == LAMBDA_PATH, (name, env)
        assert env["LANG"] == "en_US.UTF-8", (name, env)
        assert env["TZ"] == ":UTC", (name, env)
        assert "/opt/lib" in env["LD_LIBRARY_PATH"].split(":") and "/shell/lib" not in env["LD_LIBRARY_PATH"], env
    # PATH and LANG are a function's to set, as on Lambda.
    server.client().update_function_configuration(
        FunctionName="env-python", Environment={"Variables": {"PATH": "/var/task/bin:/usr/bin", "LANG": "C.UTF-8"}})
    server.client().get_waiter("function_updated_v2").wait(FunctionName="env-python")
    result, _ = server.invoke("env-python")
    assert (result["PATH"], result["LANG"], result["TZ"]) == ("/var/task/bin:/usr/bin", "C.UTF-8", ":UTC")
