"""Exercises runtimes/nodejs/shim.js and runtimes/python/shim.py without kiln.

Each test plays the node agent: it spawns a shim with one end of a socketpair as fd 3 and speaks the framed
protocol of docs/shim-protocol.md, or runs a small in-process Runtime API server for the HTTP mode.

Run: python3 -m pytest -q runtimes/test_shims.py
"""

import json
import os
import queue
import re
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
COMMANDS = {
    "node": ["node", str(HERE / "nodejs" / "shim.js")],
    "python": [sys.executable, "-u", str(HERE / "python" / "shim.py")],
}
TIMEOUT = 15

# The child's socket is dup2'ed onto fd 3 in preexec_fn. Keeping fd 3 busy in this process guarantees that no
# pipe subprocess creates for itself (stdout, its exec-error pipe) is fd 3 and gets clobbered by that dup2.
try:
    os.fstat(3)
except OSError:
    _FD3_PLACEHOLDER = os.open(os.devnull, os.O_RDONLY)

NODE_FILES = {
    "index.js": """
        exports.echo = async (event) => event;
        exports.context = async (event, context) => ({
          awsRequestId: context.awsRequestId, functionName: context.functionName,
          functionVersion: context.functionVersion, invokedFunctionArn: context.invokedFunctionArn,
          memoryLimitInMB: context.memoryLimitInMB, logGroupName: context.logGroupName,
          logStreamName: context.logStreamName, remaining: context.getRemainingTimeInMillis(),
          waits: context.callbackWaitsForEmptyEventLoop, clientContext: context.clientContext,
          identity: context.identity, traceId: process.env._X_AMZN_TRACE_ID,
          shimFd: process.env.KILN_SHIM_FD === undefined ? null : process.env.KILN_SHIM_FD,
        });
        exports.syncReturn = () => 42; // Lambda ignores what a non-async handler returns
        exports.syncCallback = (event, context, callback) => callback(null, { sync: event.n });
        exports.laterCallback = (event, context, callback) => setTimeout(() => callback(null, { later: event.n }), 20);
        exports.waits = (event, context, callback) => {
          setTimeout(() => console.log('timer fired'), 300);
          callback(null, 'early');
        };
        exports.noWait = (event, context, callback) => {
          context.callbackWaitsForEmptyEventLoop = false;
          setTimeout(() => console.log('timer fired'), 5000);
          callback(null, 'early');
        };
        exports.succeed = (event, context) => context.succeed({ via: 'succeed' });
        exports.fail = (event, context) => context.fail(new Error('failed via context'));
        exports.callbackError = (event, context, callback) => callback(new RangeError('callback error'));
        exports.throwsAsync = async () => { throw new TypeError('bad thing'); };
        exports.throwsSync = () => { throw new Error('sync bad'); };
        exports.throwsString = async () => { throw 'just a string'; };
        exports.circular = async () => { const a = {}; a.self = a; return a; };
        exports.logs = async () => {
          console.log('hello %s', 'world');
          console.error('two\\nlines');
          console.warn('careful');
          process.stdout.write('raw stdout\\n');
          process.stderr.write('raw stderr\\n');
          return 'logged';
        };
        exports.unhandledRejection = async () => {
          Promise.reject(new Error('nobody catches me'));
          await new Promise((resolve) => setTimeout(resolve, 200));
          return 'unreachable';
        };
        exports.uncaught = () => { setTimeout(() => { throw new Error('kaboom'); }, 10); };
        exports.flood = async () => {
          const line = 'y'.repeat(1000);
          for (let i = 0; i < 300; i++) console.log(line); // far more than a pipe buffer holds
          process.stdout.write('flood done\\n');
          return 'flooded';
        };
        exports.neverSettles = async () => new Promise(() => {});
        exports.nested = { deeper: { fn: async () => 'nested' } };
        exports.notAFunction = 5;
    """,
    "esm.mjs": "export const handler = async (event) => ({ esm: true, event });",
    "typemod/package.json": '{"type": "module"}',
    "typemod/app.js": "export const handler = async () => ({ esmJs: import.meta.url.endsWith('/typemod/app.js') });",
    "dir/file.js": "exports.nested = { fn: async () => 'dir nested' };",
    "legacy.cjs": "exports.handler = async () => 'cjs';",
    "syntax.js": "exports.handler = async () => {;\n",
    "initthrow.js": "throw new TypeError('init failed');\n",
    "missingdep.js": "require('no-such-package');\nexports.handler = async () => 1;\n",
}

PY_FILES = {
    "app.py": """
        import logging, os, sys
        from decimal import Decimal

        logger = logging.getLogger()

        def echo(event, context):
            return event

        def context_fields(event, context):
            cc = context.client_context
            return {
                "aws_request_id": context.aws_request_id, "function_name": context.function_name,
                "function_version": context.function_version,
                "invoked_function_arn": context.invoked_function_arn,
                "memory_limit_in_mb": context.memory_limit_in_mb, "log_group_name": context.log_group_name,
                "log_stream_name": context.log_stream_name, "remaining": context.get_remaining_time_in_millis(),
                "client_custom": cc and cc.custom, "client_app_title": cc and cc.client.app_title,
                "identity_id": context.identity.cognito_identity_id,
                "trace_id": os.environ.get("_X_AMZN_TRACE_ID"), "shim_fd": os.environ.get("KILN_SHIM_FD"),
                "path0": sys.path[0],
            }

        def boom(event, context):
            raise ValueError("bad value")

        def unserializable(event, context):
            return {1, 2}

        def decimals(event, context):
            return {"int": Decimal("5"), "frac": Decimal("1.5")}

        def flood(event, context):
            for _ in range(300):
                print("y" * 1000)
            print("flood done")
            return "flooded"

        def logs(event, context):
            print("printed line")
            logger.warning("warned %s", "here")
            logger.info("dropped: the root logger stays at WARNING")
            sys.stderr.write("raw stderr\\n")
            return "logged"
    """,
    "pkg/sub/mod.py": "def handler(event, context):\n    return 'pkg handler'\n",
    "syntax_err.py": "def handler(event, context)\n    return 1\n",
    "init_raise.py": "import os\nTABLE = os.environ['NO_SUCH_VARIABLE']\n",
    "missingdep.py": "import no_such_package\n",
}


def write_tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    roots = {}
    for lang, files in (("node", NODE_FILES), ("python", PY_FILES)):
        root = tmp_path_factory.mktemp(lang + "-task")
        write_tree(root, files)
        roots[lang] = root
    return roots


def base_env(task, handler):
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "_HANDLER": handler,
        "LAMBDA_TASK_ROOT": str(task),
        "AWS_LAMBDA_FUNCTION_NAME": "kiln-test",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/kiln-test",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2024/01/01/[$LATEST]0123456789",
    }


class Shim:
    """A shim process driven through the framed protocol, as the node agent would."""

    def __init__(self, lang, task, handler):
        self.sock, child = socket.socketpair()
        env = base_env(task, handler)
        env["KILN_SHIM_FD"] = "3"
        child_fd = child.fileno()

        def to_fd3():
            os.dup2(child_fd, 3)
            os.close(child_fd)

        self.proc = subprocess.Popen(
            COMMANDS[lang], cwd=task, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, pass_fds=(child_fd, 3), preexec_fn=to_fd3)
        child.close()
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.log = b""
        self.lock = threading.Lock()

    def read_output_continuously(self):
        """Drain stdout in the background, as the agent does, so the shim can write more than a pipe holds."""
        def run():
            while not self.proc.stdout.closed:
                self.output()
                time.sleep(0.002)
        threading.Thread(target=run, daemon=True).start()

    def send(self, header, body=b""):
        h = json.dumps(header).encode()
        self.sock.sendall(struct.pack(">II", len(h), len(body)) + h + body)

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def recv(self, timeout=TIMEOUT):
        """The next frame as (header, body bytes), or None at EOF."""
        self.sock.settimeout(timeout)
        prefix = self._exact(8)
        if prefix is None:
            return None
        hlen, blen = struct.unpack(">II", prefix)
        data = self._exact(hlen + blen)
        assert data is not None, "frame cut short"
        return json.loads(data[:hlen]), data[hlen:]

    def invoke(self, event, request_id="req-1", **extra):
        header = {"type": "invoke", "requestId": request_id, "deadlineMs": int(time.time() * 1000) + 30000,
                  "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:kiln-test",
                  "traceId": None, "clientContext": None, "cognitoIdentity": None}
        header.update(extra)
        self.send(header, json.dumps(event).encode())
        frame = self.recv()
        assert frame is not None, "shim closed the socket instead of answering: " + self.output()
        return frame[0]["type"], json.loads(frame[1])

    def output(self):
        """Everything the shim has written to stdout/stderr so far (without waiting for more)."""
        with self.lock:
            while not self.proc.stdout.closed:
                try:
                    chunk = os.read(self.proc.stdout.fileno(), 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                self.log += chunk
            return self.log.decode("utf-8", "replace")

    def close(self):
        """Close the agent end, as kiln does to stop a runtime, and return the exit status."""
        self.sock.close()
        return self.wait()

    def wait(self):
        code = self.proc.wait(TIMEOUT)
        self.output()
        with self.lock:
            self.proc.stdout.close()
        return code


@pytest.fixture
def spawn(tasks):
    started = []

    def start(lang, handler, expect_ready=True):
        shim = Shim(lang, tasks[lang], handler)
        started.append(shim)
        if expect_ready:
            frame = shim.recv()
            assert frame is not None, "no ready frame: " + shim.output()
            assert frame == ({"type": "ready"}, b"")
        return shim

    yield start
    for shim in started:
        if shim.proc.poll() is None:
            shim.proc.kill()
            shim.proc.wait()
        shim.sock.close()


def init_error(spawn, lang, handler):
    shim = spawn(lang, handler, expect_ready=False)
    frame = shim.recv()
    assert frame is not None, "no init_error frame: " + shim.output()
    assert frame[0] == {"type": "init_error"}
    assert shim.wait() == 1
    return json.loads(frame[1]), shim.output()


ECHO = {"node": "index.echo", "python": "app.echo"}
EVENT = {"s": "héllo ✓", "n": [1, 2.5, None, True], "nested": {"k": "v" * 5000}}


# --------------------------------------------------------------------------------------------- both runtimes
@pytest.mark.parametrize("lang", ["node", "python"])
def test_ready_echo_and_clean_exit(spawn, lang):
    shim = spawn(lang, ECHO[lang])
    for i in range(3):  # one process serves invocations one after another
        assert shim.invoke(dict(EVENT, i=i), request_id="req-%d" % i) == ("response", dict(EVENT, i=i))
    assert shim.invoke(None) == ("response", None)
    assert shim.close() == 0


@pytest.mark.parametrize("lang", ["node", "python"])
def test_large_event(spawn, lang):
    shim = spawn(lang, ECHO[lang])
    big = {"blob": "x" * (3 << 20)}  # arrives in many socket reads
    assert shim.invoke(big) == ("response", big)
    assert shim.close() == 0


@pytest.mark.parametrize("lang", ["node", "python"])
def test_exit_on_close_while_idle_before_any_invoke(spawn, lang):
    shim = spawn(lang, ECHO[lang])
    assert shim.close() == 0


@pytest.mark.parametrize("lang,handler,error_type,message", [
    ("node", "nosuchmodule.handler", "Runtime.ImportModuleError", "Error: Cannot find module 'nosuchmodule'"),
    ("node", "missingdep.handler", "Runtime.ImportModuleError", "Error: Cannot find module 'no-such-package'"),
    ("node", "index.nope", "Runtime.HandlerNotFound", "index.nope is undefined or not exported"),
    ("node", "index.notAFunction", "Runtime.HandlerNotFound", "index.notAFunction is not a function"),
    ("node", "syntax.handler", "Runtime.UserCodeSyntaxError", "SyntaxError: "),
    ("node", "initthrow.handler", "TypeError", "init failed"),
    ("node", "nodot", "Runtime.MalformedHandlerName", "Bad handler"),
    ("python", "nosuchmodule.handler", "Runtime.ImportModuleError",
     "Unable to import module 'nosuchmodule': No module named 'nosuchmodule'"),
    ("python", "missingdep.handler", "Runtime.ImportModuleError",
     "Unable to import module 'missingdep': No module named 'no_such_package'"),
    ("python", "app.nope", "Runtime.HandlerNotFound", "Handler 'nope' missing on module 'app'"),
    ("python", "syntax_err.handler", "Runtime.UserCodeSyntaxError", "Syntax error in module 'syntax_err': "),
    ("python", "init_raise.handler", "KeyError", "'NO_SUCH_VARIABLE'"),
    ("python", "nodot", "Runtime.MalformedHandlerName", "Bad handler 'nodot': "),
])
def test_init_errors(spawn, lang, handler, error_type, message):
    body, log = init_error(spawn, lang, handler)
    assert body["errorType"] == error_type
    assert body["errorMessage"].startswith(message), body
    # Lambda's runtimes disagree on the name of the stack lines: Node's `trace`, Python's `stackTrace`.
    assert isinstance(body["trace" if lang == "node" else "stackTrace"], list)
    assert ("stackTrace" if lang == "node" else "trace") not in body
    assert error_type in log  # the init failure is logged too, as on Lambda


def test_python_init_exception_traceback_points_at_user_code(spawn):
    body, _ = init_error(spawn, "python", "init_raise.handler")
    assert any("init_raise.py" in frame and "line 2" in frame for frame in body["stackTrace"]), body
    assert not any("shim.py" in frame for frame in body["stackTrace"])


@pytest.mark.parametrize("lang,handler", [("node", "index.flood"), ("python", "app.flood")])
def test_answer_waits_for_a_full_log_pipe(spawn, lang, handler):
    shim = spawn(lang, handler)
    shim.read_output_continuously()
    assert shim.invoke({}) == ("response", "flooded")
    assert shim.output().endswith("flood done\n")
    assert shim.close() == 0


@pytest.mark.parametrize("lang,handler", [("node", "index.circular"), ("python", "app.unserializable")])
def test_marshal_error(spawn, lang, handler):
    shim = spawn(lang, handler)
    kind, body = shim.invoke({})
    assert kind == "error"
    assert body["errorType"] == "Runtime.MarshalError"
    prefix = "Unable to stringify response body" if lang == "node" else \
        "Unable to marshal response: Object of type set is not JSON serializable"
    assert body["errorMessage"].startswith(prefix)
    assert shim.invoke({}, request_id="again")[0] == "error"  # the process keeps serving
    assert shim.close() == 0


# --------------------------------------------------------------------------------------------- Node.js
def test_node_context(spawn):
    shim = spawn("node", "index.context")
    kind, body = shim.invoke({}, request_id="abc-123", traceId="Root=1-abc;Parent=def;Sampled=1",
                             clientContext=json.dumps({"custom": {"a": 1}}),
                             cognitoIdentity=json.dumps({"cognitoIdentityId": "id-1"}))
    assert kind == "response"
    remaining = body.pop("remaining")
    assert 25000 < remaining <= 30000
    assert body == {
        "awsRequestId": "abc-123", "functionName": "kiln-test", "functionVersion": "$LATEST",
        "invokedFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:kiln-test",
        "memoryLimitInMB": "256", "logGroupName": "/aws/lambda/kiln-test",
        "logStreamName": "2024/01/01/[$LATEST]0123456789", "waits": True, "clientContext": {"custom": {"a": 1}},
        "identity": {"cognitoIdentityId": "id-1"}, "traceId": "Root=1-abc;Parent=def;Sampled=1", "shimFd": None,
    }
    kind, body = shim.invoke({}, request_id="abc-124")  # absent client context / identity / trace id
    assert "clientContext" not in body and "identity" not in body and "traceId" not in body


@pytest.mark.parametrize("handler,expected", [
    ("index.syncReturn", None),
    ("index.syncCallback", {"sync": 7}),
    ("index.laterCallback", {"later": 7}),
    ("index.succeed", {"via": "succeed"}),
    ("index.nested.deeper.fn", "nested"),
    ("esm.handler", {"esm": True, "event": {"n": 7}}),
    ("typemod/app.handler", {"esmJs": True}),
    ("dir/file.nested.fn", "dir nested"),
    ("legacy.handler", "cjs"),
])
def test_node_handler_styles(spawn, handler, expected):
    shim = spawn("node", handler)
    assert shim.invoke({"n": 7}) == ("response", expected)
    assert shim.invoke({"n": 7}, request_id="req-2") == ("response", expected)
    assert shim.close() == 0


def test_node_callback_waits_for_empty_event_loop(spawn):
    shim = spawn("node", "index.waits")
    assert shim.invoke({}) == ("response", "early")
    assert "timer fired" in shim.output()  # the answer waited for the timer


def test_node_callback_without_waiting(spawn):
    shim = spawn("node", "index.noWait")
    assert shim.invoke({}) == ("response", "early")
    assert "timer fired" not in shim.output()  # answered at once; the timer is still pending


@pytest.mark.parametrize("handler,error_type,message,has_stack", [
    ("index.throwsAsync", "TypeError", "bad thing", True),
    ("index.throwsSync", "Error", "sync bad", True),
    ("index.callbackError", "RangeError", "callback error", True),
    ("index.fail", "Error", "failed via context", True),
    ("index.throwsString", "string", "just a string", False),
])
def test_node_handler_errors(spawn, handler, error_type, message, has_stack):
    shim = spawn("node", handler)
    kind, body = shim.invoke({})
    assert kind == "error"
    assert (body["errorType"], body["errorMessage"]) == (error_type, message)
    # Lambda's Node runtime names the stack lines `trace`, not `stackTrace`.
    assert "stackTrace" not in body
    if has_stack:
        assert body["trace"][0] == "%s: %s" % (error_type, message)
        assert any("index.js" in line for line in body["trace"])
    else:
        assert body["trace"] == []
    assert re.search(r"\treq-1\tERROR\tInvoke Error \t\{", shim.output())
    assert shim.close() == 0


def test_node_logs(spawn):
    shim = spawn("node", "index.logs")
    assert shim.invoke({}, request_id="log-req") == ("response", "logged")
    log = shim.output()  # read right after the answer: everything must already be there
    ts = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.search(ts + r"\tlog-req\tINFO\thello world\n", log), log
    assert re.search(ts + r"\tlog-req\tERROR\ttwo\rlines\n", log), log  # one record per message
    assert re.search(ts + r"\tlog-req\tWARN\tcareful\n", log), log
    assert "raw stdout\n" in log and "raw stderr\n" in log


@pytest.mark.parametrize("handler,error_type,message", [
    ("index.unhandledRejection", "Runtime.UnhandledPromiseRejection", "Error: nobody catches me"),
    ("index.uncaught", "Error", "kaboom"),
])
def test_node_crash_reports_then_exits(spawn, handler, error_type, message):
    shim = spawn("node", handler)
    header = {"type": "invoke", "requestId": "req-1", "deadlineMs": int(time.time() * 1000) + 30000,
              "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:kiln-test",
              "traceId": None, "clientContext": None, "cognitoIdentity": None}
    shim.send(header, b"{}")
    frame = shim.recv()
    assert frame is not None, shim.output()
    # The error is marked fatal: the agent must not hand this process another invocation.
    assert frame[0] == {"type": "error", "fatal": True}
    body = json.loads(frame[1])
    assert (body["errorType"], body["errorMessage"]) == (error_type, message)
    assert shim.wait() == 1


def test_node_promise_never_settles(spawn):
    shim = spawn("node", "index.neverSettles")
    kind, body = shim.invoke({})
    assert kind == "error" and body["errorType"] == "Runtime.NodeJsExit"
    assert shim.invoke({}, request_id="req-2")[1]["errorType"] == "Runtime.NodeJsExit"  # still serving


def test_node_init_logs_and_syntax_error_location(spawn):
    body, log = init_error(spawn, "node", "syntax.handler")
    assert any("syntax.js" in line for line in body["trace"]), body
    assert re.search(r"\tundefined\tERROR\tUncaught Exception \t\{\"errorType\":\"Runtime.UserCodeSyntaxError\"",
                     log), log


# --------------------------------------------------------------------------------------------- Python
def test_python_context(spawn):
    shim = spawn("python", "app.context_fields")
    client_context = {"custom": {"a": 1}, "env": {}, "client": {"app_title": "kiln app"}}
    kind, body = shim.invoke({}, request_id="abc-123", traceId="Root=1-abc",
                             clientContext=json.dumps(client_context),
                             cognitoIdentity=json.dumps({"cognitoIdentityId": "id-1"}))
    assert kind == "response"
    assert 25000 < body.pop("remaining") <= 30000
    body.pop("path0")  # see test_python_sys_path_starts_with_task_root
    assert body == {
        "aws_request_id": "abc-123", "function_name": "kiln-test", "function_version": "$LATEST",
        "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:kiln-test",
        "memory_limit_in_mb": "256", "log_group_name": "/aws/lambda/kiln-test",
        "log_stream_name": "2024/01/01/[$LATEST]0123456789", "client_custom": {"a": 1},
        "client_app_title": "kiln app", "identity_id": "id-1", "trace_id": "Root=1-abc", "shim_fd": None,
    }
    kind, body = shim.invoke({}, request_id="abc-124")
    assert body["client_custom"] is None and body["identity_id"] is None and body["trace_id"] is None


def test_python_sys_path_starts_with_task_root(spawn, tasks):
    shim = spawn("python", "app.context_fields")
    assert shim.invoke({})[1]["path0"] == str(tasks["python"])


def test_python_package_handler_and_decimal(spawn):
    shim = spawn("python", "pkg/sub/mod.handler")
    assert shim.invoke({}) == ("response", "pkg handler")
    shim = spawn("python", "app.decimals")
    assert shim.invoke({}) == ("response", {"int": 5, "frac": 1.5})


def test_python_handler_error(spawn):
    shim = spawn("python", "app.boom")
    kind, body = shim.invoke({}, request_id="err-req")
    assert kind == "error"
    assert body["errorType"] == "ValueError" and body["errorMessage"] == "bad value"
    assert body["requestId"] == "err-req"
    assert len(body["stackTrace"]) == 1  # the shim's own frames are dropped
    assert re.fullmatch(r'  File ".*/app\.py", line \d+, in boom\n    raise ValueError\("bad value"\)\n',
                        body["stackTrace"][0]), body
    log = shim.output()
    assert "[ERROR] ValueError: bad value\rTraceback (most recent call last):\r\u00a0\u00a0File" in log, log
    assert shim.close() == 0


def test_python_logs(spawn):
    shim = spawn("python", "app.logs")
    assert shim.invoke({}, request_id="log-req") == ("response", "logged")
    log = shim.output()
    assert "printed line\n" in log and "raw stderr\n" in log
    assert re.search(r"\[WARNING\]\t\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\tlog-req\twarned here\n", log), log
    assert "dropped" not in log


# --------------------------------------------------------------------------------------------- Runtime API mode
class FakeRuntimeAPI:
    """Just enough of the Lambda Runtime API: next / response / error / init error."""

    def __init__(self):
        self.events = queue.Queue()
        self.posts = queue.Queue()
        self.clients = set()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def log_message(self, *args):
                pass

            def do_GET(self):
                api.clients.add(self.client_address)
                assert self.path == "/2018-06-01/runtime/invocation/next"
                request_id, event, extra = api.events.get()
                body = json.dumps(event).encode()
                self.send_response(200)
                self.send_header("Lambda-Runtime-Aws-Request-Id", request_id)
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:::function:kiln-test")
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                api.clients.add(self.client_address)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                api.posts.put((self.path, self.headers.get("Lambda-Runtime-Function-Error-Type"), body))
                self.send_response(202)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.address = "127.0.0.1:%d" % self.server.server_address[1]

    def invoke(self, request_id, event, **extra):
        self.events.put((request_id, event, extra))
        return self.result()

    def result(self):
        path, error_type, body = self.posts.get(timeout=TIMEOUT)
        return path, error_type, json.loads(body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def runtime_api(tasks):
    api = FakeRuntimeAPI()
    procs = []

    def start(lang, handler):
        env = base_env(tasks[lang], handler)
        env["AWS_LAMBDA_RUNTIME_API"] = api.address
        proc = subprocess.Popen(COMMANDS[lang], cwd=tasks[lang], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield api, start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    api.close()


@pytest.mark.parametrize("lang", ["node", "python"])
def test_runtime_api_mode(runtime_api, lang):
    api, start = runtime_api
    start(lang, ECHO[lang])
    for i in range(3):
        assert api.invoke("rid-%d" % i, {"i": i}) == \
            ("/2018-06-01/runtime/invocation/rid-%d/response" % i, None, {"i": i})
    assert len(api.clients) == 1  # every request went over one keep-alive connection


@pytest.mark.parametrize("lang,handler,error_type", [
    ("node", "index.throwsAsync", "TypeError"), ("python", "app.boom", "ValueError")])
def test_runtime_api_mode_error(runtime_api, lang, handler, error_type):
    api, start = runtime_api
    start(lang, handler)
    path, header, body = api.invoke("rid-e", {})
    assert path == "/2018-06-01/runtime/invocation/rid-e/error"
    assert header == body["errorType"] == error_type


@pytest.mark.parametrize("lang,handler", [("node", "index.context"), ("python", "app.context_fields")])
def test_runtime_api_mode_context(runtime_api, lang, handler):
    api, start = runtime_api
    start(lang, handler)
    _, _, body = api.invoke("rid-c", {}, **{"Lambda-Runtime-Trace-Id": "Root=1-xyz",
                                            "Lambda-Runtime-Cognito-Identity": '{"cognitoIdentityId": "id-9"}'})
    if lang == "node":
        assert (body["awsRequestId"], body["traceId"], body["identity"]) == \
            ("rid-c", "Root=1-xyz", {"cognitoIdentityId": "id-9"})
    else:
        assert (body["aws_request_id"], body["trace_id"], body["identity_id"]) == ("rid-c", "Root=1-xyz", "id-9")


@pytest.mark.parametrize("lang,handler,error_type", [
    ("node", "index.nope", "Runtime.HandlerNotFound"), ("python", "nosuchmodule.handler", "Runtime.ImportModuleError")])
def test_runtime_api_mode_init_error(runtime_api, lang, handler, error_type):
    api, start = runtime_api
    proc = start(lang, handler)
    path, header, body = api.result()
    assert path == "/2018-06-01/runtime/init/error"
    assert header == body["errorType"] == error_type
    assert proc.wait(TIMEOUT) == 1
