"""kiln runtime shim for CPython 3.11 -- run as `python3 -u /opt/kiln/shim.py` with cwd /var/task.

Loads the function named by _HANDLER the way AWS Lambda's python3.11 runtime (awslambdaric) does and serves
invocations, either over kiln's framed protocol on the fd named by KILN_SHIM_FD or, when only
AWS_LAMBDA_RUNTIME_API is set, over the Lambda Runtime API (see docs/shim-protocol.md). Standard library only,
so the shim works in any image with a python3.
"""

import decimal
import fcntl
import gc
import importlib
import importlib.util
import json
import logging
import os
import random
import select
import signal
import socket
import struct
import sys
import time
import traceback

SHIM_FILE = os.path.abspath(__file__)
RUNTIME_LIB = "/var/runtime"  # the runtime's AWS SDK, mounted by kiln
LAYERS_PYTHON = "/opt/python"  # the python/ directory of the function's layers
_PREFIX = struct.Struct(">II")  # header length, body length

# The current request id: read by the logging filter, like awslambdaric's _GLOBAL_AWS_REQUEST_ID.
_request_id = None


class FaultException(Exception):
    """A failure the runtime itself diagnoses, reported under a Runtime.* error type."""

    def __init__(self, error_type, msg, trace=None):
        super().__init__(msg)
        self.error_type, self.msg, self.trace = error_type, msg, trace


# ------------------------------------------------------------------------------------------------- logging
class _RequestIdFilter(logging.Filter):
    def filter(self, record):
        record.aws_request_id = _request_id or ""
        return True


class _StdoutHandler(logging.Handler):
    # Lambda's handler writes the formatted record (which ends in "\n" itself) straight to stdout. Looking
    # sys.stdout up on each call keeps working if the function swaps it out.
    def emit(self, record):
        try:
            sys.stdout.write(self.format(record))
        except Exception:
            self.handleError(record)


def setup_logging():
    # Lambda installs its handler on the root logger and leaves the level at WARNING (unless
    # AWS_LAMBDA_LOG_LEVEL says otherwise), which also makes a later logging.basicConfig() a no-op.
    logging.Formatter.converter = time.gmtime
    handler = _StdoutHandler()
    handler.setFormatter(logging.Formatter(
        "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n", "%Y-%m-%dT%H:%M:%S"))
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    level = os.environ.get("AWS_LAMBDA_LOG_LEVEL", "").upper()
    if level in logging._nameToLevel:
        root.setLevel(level)
    root.addHandler(handler)


def log_error(error):
    # Lambda's text format for an error: "[ERROR] Type: message", then the traceback. Lines are joined with
    # "\r" and leading spaces become NO-BREAK SPACEs so the whole error stays one record on a line-oriented pipe.
    head = "[ERROR]"
    if error["errorType"]:
        head += " " + error["errorType"] + (":" if error["errorMessage"] else "")
    if error["errorMessage"]:
        head += " " + error["errorMessage"]
    lines = [head, "Traceback (most recent call last):"]
    for element in error["stackTrace"]:
        for line in element.splitlines() or [""]:
            stripped = line.lstrip(" ")
            lines.append("\u00a0" * (len(line) - len(stripped)) + stripped)
    sys.stdout.write("\r".join(lines) + "\n")


def flush_stdio():
    # The agent reads stdout/stderr from a pipe and must have the invocation's whole log before the answer.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# ------------------------------------------------------------------------------------------------- errors
def make_error(message, error_type, stack_trace, request_id=None):
    return {
        "errorMessage": message or "",
        "errorType": error_type or "",
        "requestId": request_id if request_id is not None else "",
        "stackTrace": stack_trace or [],
    }


def fault_result(exc, request_id=None):
    """Error body for an arbitrary exception: class name, str(), and the traceback minus our own frames."""
    frames = [(f.filename, f.lineno, f.name, f.line) for f in traceback.extract_tb(exc.__traceback__)]
    while frames and frames[0][0] == SHIM_FILE:
        frames.pop(0)
    return make_error(str(exc), type(exc).__name__, traceback.format_list(frames), request_id)


# ------------------------------------------------------------------------------------------------- loading
def get_handler(spec):
    try:
        modname, fname = spec.rsplit(".", 1)
    except ValueError as e:
        raise FaultException("Runtime.MalformedHandlerName", "Bad handler '{}': {}".format(spec, e))
    module = import_module(modname)
    try:
        return getattr(module, fname)
    except AttributeError:
        raise FaultException("Runtime.HandlerNotFound", "Handler '{}' missing on module '{}'".format(fname, modname))


# The web adapter (KilnWeb, docs/web-adapter.md) when the function is a web app: its `after_fork` and
# `before_snapshot` run around the fork server's snapshot.
_web = None


def get_web_app(spec):
    """A web function's handler: its WSGI or ASGI app (`MODULE:CALLABLE`, or `MODULE:FACTORY()` called once),
    imported now so that a zygote holds it, behind kiln's adapter."""
    global _web
    modname, _, attr = spec.partition(":")
    factory = attr.endswith("()")
    app = import_module(modname)
    for part in (attr[:-2] if factory else attr).split("."):
        try:
            app = getattr(app, part)
        except AttributeError:
            raise FaultException("Runtime.HandlerNotFound", "Web app '{}' missing on module '{}'".format(attr, modname))
    if factory:
        app = app()
    if not callable(app):
        raise FaultException("Runtime.HandlerNotFound", "Web app '{}' of module '{}' is not callable: {!r}".format(
            attr, modname, type(app).__name__))
    loader = importlib.util.spec_from_file_location("_kiln_web", os.path.join(os.path.dirname(SHIM_FILE), "kiln_web.py"))
    adapter = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(adapter)
    _web = adapter.WebAdapter(app)
    return _web.handle


def import_module(modname):
    try:
        if modname.split(".")[0] in sys.builtin_module_names:
            raise FaultException("Runtime.BuiltInModuleConflict",
                                 "Cannot use built-in module {} as a handler module".format(modname))
        module = importlib.import_module(modname.replace("/", "."))
    except ImportError as e:
        raise FaultException("Runtime.ImportModuleError", "Unable to import module '{}': {}".format(modname, e))
    except SyntaxError as e:
        trace = ['  File "%s" Line %s\n    %s' % (e.filename, e.lineno, e.text)]
        raise FaultException("Runtime.UserCodeSyntaxError",
                             "Syntax error in module '{}': {}".format(modname, e), trace)
    # Any other exception raised while importing propagates and is reported under its own class name.
    return module


# ------------------------------------------------------------------------------------------------- context
class CognitoIdentity:
    __slots__ = ["cognito_identity_id", "cognito_identity_pool_id"]


class Client:
    __slots__ = ["installation_id", "app_title", "app_version_name", "app_version_code", "app_package_name"]


class ClientContext:
    __slots__ = ["custom", "env", "client"]


def _from_dict(cls, d):
    if d is None:
        return None
    obj = cls()
    for field in cls.__slots__:
        setattr(obj, field, d.get(field))
    return obj


class LambdaContext:
    # Environment-derived fields are read once per instance (again in each fork of a zygote).
    @staticmethod
    def _read_env():
        return {k: os.environ.get(v) for k, v in (
            ("function_name", "AWS_LAMBDA_FUNCTION_NAME"), ("function_version", "AWS_LAMBDA_FUNCTION_VERSION"),
            ("memory_limit_in_mb", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"),
            ("log_group_name", "AWS_LAMBDA_LOG_GROUP_NAME"), ("log_stream_name", "AWS_LAMBDA_LOG_STREAM_NAME"))}

    _env = _read_env.__func__()

    def __init__(self, request_id, deadline_ms, function_arn, client_context, cognito_identity):
        self.__dict__.update(self._env)
        self.aws_request_id = request_id
        self.invoked_function_arn = function_arn
        self._deadline_ms = deadline_ms
        self.client_context = _from_dict(ClientContext, client_context)
        if self.client_context is not None:
            self.client_context.client = _from_dict(Client, self.client_context.client)
        self.identity = _from_dict(CognitoIdentity, {})  # always present, fields None without Cognito
        if cognito_identity is not None:
            self.identity.cognito_identity_id = cognito_identity.get("cognitoIdentityId")
            self.identity.cognito_identity_pool_id = cognito_identity.get("cognitoIdentityPoolId")

    def get_remaining_time_in_millis(self):
        return max(self._deadline_ms - int(time.time() * 1000), 0)

    def log(self, msg):
        sys.stdout.write(str(msg))


def _parse_header_json(value, name):
    if not value:
        return None
    try:
        return json.loads(value)
    except Exception as e:
        raise FaultException("Runtime.LambdaContextUnmarshalError", "Unable to parse {} JSON: {}".format(name, e))


def _json_default(obj):
    # Lambda serialises Decimal as a JSON number (DynamoDB hands them out); everything else is an error.
    if isinstance(obj, decimal.Decimal):
        return int(obj) if obj.is_finite() and obj == obj.to_integral_value() else float(obj)
    raise TypeError("Object of type {} is not JSON serializable".format(type(obj).__name__))


def handle(transport, handler, inv, body):
    global _request_id
    _request_id = request_id = inv.get("requestId")
    trace_id = inv.get("traceId")
    if trace_id:
        os.environ["_X_AMZN_TRACE_ID"] = trace_id
    else:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
    error = None
    session = _sessions.get(inv.get("sessionId")) if inv.get("sessionId") else None
    try:
        context = LambdaContext(request_id, int(inv.get("deadlineMs") or 0), inv.get("functionArn"),
                                _parse_header_json(inv.get("clientContext"), "Client Context"),
                                _parse_header_json(inv.get("cognitoIdentity"), "Cognito Identity"))
        context.session = session
        try:
            event = json.loads(body)
        except Exception as e:
            raise FaultException("Runtime.UnmarshalError", "Unable to unmarshal input: {}".format(e))
        result = handler(event, context)
        if not isinstance(result, bytes):  # bytes go out untouched, as on Lambda
            try:
                result = json.dumps(result, default=_json_default).encode()
            except Exception as e:
                raise FaultException("Runtime.MarshalError", "Unable to marshal response: {}".format(e))
    except FaultException as e:
        error = make_error(e.msg, e.error_type, e.trace, request_id)
    except Exception as e:
        error = fault_result(e, request_id)
    if session is not None and session._writes:
        # What the handler wrote, whether it returned or raised, as the session in memory now holds it.
        transport.commit(session._take_writes())
    if error is None:
        flush_stdio()
        transport.respond(request_id, result)
    else:
        log_error(error)
        flush_stdio()
        transport.error(request_id, json.dumps(error).encode(), error["errorType"])


# ------------------------------------------------------------------------------------------------- sessions
# A session's state (docs/sessions.md): held here, in the session's primary instance, and read and written at
# memory speed. The agent loads it before the session's first request on this instance (`session_load`), and
# each invocation's writes go to the agent as one `session_commit` frame before its answer, which the agent
# makes durable in the session's log before the answer leaves kiln. Requests of one session never run
# concurrently, so a read-modify-write in one invocation is linearizable; `transact` also makes it atomic.
_sessions = {}
_KEY_LEN = struct.Struct("<H")
_VALUE_LEN = struct.Struct("<I")
_MAX_KEY_BYTES = 1024
_DELETED = object()


class SessionError(Exception):
    """A session operation that cannot be done: a bad key, a value that is neither bytes nor JSON."""


class SessionLimitError(SessionError):
    """A value, or the whole session's state, over the function's configured limit."""


def _key_bytes(key):
    if not isinstance(key, str):
        raise SessionError("a session key must be a str, not {}".format(type(key).__name__))
    size = len(key) if key.isascii() else len(key.encode())
    if not 0 < size <= _MAX_KEY_BYTES:
        raise SessionError("a session key must be 1 to {} bytes of UTF-8, not {}".format(_MAX_KEY_BYTES, size))
    return size


def _encode_value(key, value, limit):
    if isinstance(value, (bytes, bytearray, memoryview)):
        item = (0, bytes(value))
    else:
        try:
            item = (1, json.dumps(value, separators=(",", ":"), default=_json_default).encode())
        except (TypeError, ValueError) as e:
            raise SessionError("the value for {!r} is neither bytes nor JSON: {}".format(key, e)) from None
    if len(item[1]) > limit:
        raise SessionLimitError("the value for {!r} is {} bytes, over the limit of {} bytes".format(
            key, len(item[1]), limit))
    return item


def _decode_value(item):
    return item[1] if item[0] == 0 else json.loads(item[1])


class _Transaction:
    """The view `Session.transact` hands its function: reads see the transaction's own writes, which reach
    the session only if the function returns."""

    __slots__ = ("_session", "_writes")

    def __init__(self, session):
        self._session = session
        self._writes = {}

    def get(self, key, default=None):
        item = self._writes.get(key)
        if item is None:
            return self._session.get(key, default)
        return default if item is _DELETED else _decode_value(item)

    def put(self, key, value):
        _key_bytes(key)
        self._writes[key] = _encode_value(key, value, self._session._max_value)

    def delete(self, key):
        _key_bytes(key)
        self._writes[key] = _DELETED

    def keys(self):
        keys = set(self._session._data)
        for key, item in self._writes.items():
            (keys.discard if item is _DELETED else keys.add)(key)
        return sorted(keys)


class Session:
    """One session's state: get, put, delete, keys and transact. Values are bytes (handed back as bytes) or
    anything JSON can encode (handed back decoded)."""

    __slots__ = ("id", "_data", "_bytes", "_writes", "_max_value", "_max_bytes")

    def __init__(self, session_id, max_value, max_bytes):
        self.id = session_id
        self._data = {}  # key -> (kind, encoded value)
        self._bytes = 0  # keys and values, as the session limit counts them
        self._writes = {}  # what this invocation wrote: key -> (kind, value) or _DELETED
        self._max_value = max_value
        self._max_bytes = max_bytes

    def __repr__(self):
        return "Session({!r}, {} keys)".format(self.id, len(self._data))

    def __contains__(self, key):
        return key in self._data

    def __len__(self):
        return len(self._data)

    def get(self, key, default=None):
        item = self._data.get(key)
        return default if item is None else _decode_value(item)

    def keys(self):
        return sorted(self._data)

    def put(self, key, value):
        self._apply({key: _encode_value(key, value, self._max_value)})

    def delete(self, key):
        _key_bytes(key)
        self._apply({key: _DELETED})

    def transact(self, fn):
        """Runs fn(tx) and applies its writes all together, or none of them if it raises; returns its result."""
        tx = _Transaction(self)
        result = fn(tx)
        self._apply(tx._writes)
        return result

    def _apply(self, writes):
        data = self._data
        size = self._bytes
        for key, item in writes.items():
            key_size = _key_bytes(key)
            old = data.get(key)
            if old is not None:
                size -= key_size + len(old[1])
            if item is not _DELETED:
                size += key_size + len(item[1])
        if size > self._max_bytes:
            raise SessionLimitError("the session's state would be {} bytes, over the limit of {} bytes".format(
                size, self._max_bytes))
        for key, item in writes.items():
            if item is _DELETED:
                data.pop(key, None)
            else:
                data[key] = item
            self._writes[key] = item
        self._bytes = size

    def _take_writes(self):
        """This invocation's writes, encoded as session-log entries (docs/sessions.md)."""
        out = bytearray()
        for key, item in self._writes.items():
            raw = key.encode()
            if item is _DELETED:
                out += b"\x02" + _KEY_LEN.pack(len(raw)) + raw
            else:
                out += b"\x01" + _KEY_LEN.pack(len(raw)) + raw + (b"\x01" if item[0] else b"\x00")
                out += _VALUE_LEN.pack(len(item[1])) + item[1]
        self._writes = {}
        return bytes(out)


def _load_session(header, body):
    session = Session(header["sessionId"], int(header["maxValueBytes"]), int(header["maxSessionBytes"]))
    view, at, data, size = memoryview(body), 0, session._data, 0
    while at < len(body):
        op = body[at]
        (key_len,) = _KEY_LEN.unpack_from(body, at + 1)
        key = str(view[at + 3:at + 3 + key_len], "utf-8")
        at += 3 + key_len
        if op == 1:
            kind = body[at]
            (value_len,) = _VALUE_LEN.unpack_from(body, at + 1)
            data[key] = (kind, bytes(view[at + 5:at + 5 + value_len]))
            size += key_len + value_len
            at += 5 + value_len
        else:
            if key in data:
                size -= key_len + len(data.pop(key)[1])
    session._bytes = size
    _sessions[session.id] = session


# ------------------------------------------------------------------------------------------------- transports
class FrameTransport:
    """kiln's framed protocol over a Unix stream socket (docs/shim-protocol.md)."""

    READY, RESPONSE, ERROR, INIT_ERROR, COMMIT = (b'{"type":"%s"}' % t for t in (
        b"ready", b"response", b"error", b"init_error", b"session_commit"))

    def __init__(self, fd):
        os.set_inheritable(fd, False)  # keep the agent's socket out of processes the function spawns
        self.sock_fd = fd
        self.sock = socket.socket(fileno=fd)
        # A buffered reader does the short-read bookkeeping in C: read(n) returns n bytes or hits EOF.
        self.reader = self.sock.makefile("rb", buffering=65536)

    def _send(self, header, body):
        parts = [_PREFIX.pack(len(header), len(body)), header, body]
        sent = self.sock.sendmsg(parts)  # one syscall, no concatenation copy of the body
        total = 8 + len(header) + len(body)
        if sent < total:
            self.sock.sendall(b"".join(parts)[sent:])

    def ready(self):
        self._send(self.READY, b"")

    def next(self):
        """The next invoke frame as (header, body), or None once the agent has closed the socket."""
        while True:
            prefix = self.reader.read(8)
            if len(prefix) < 8:
                return None
            header_len, body_len = _PREFIX.unpack(prefix)
            header = self.reader.read(header_len)
            body = self.reader.read(body_len)
            if len(header) < header_len or len(body) < body_len:
                return None
            header = json.loads(header)
            kind = header.get("type")
            if kind in ("invoke", "zygote", "load"):  # unknown frame types are ignored
                return header, body
            if kind == "session_load":
                _load_session(header, body)
            elif kind == "session_drop":
                _sessions.pop(header.get("sessionId"), None)

    def respond(self, request_id, body):
        self._send(self.RESPONSE, body)

    def error(self, request_id, body, error_type):
        self._send(self.ERROR, body)

    def init_error(self, body, error_type):
        self._send(self.INIT_ERROR, body)

    def commit(self, body):
        self._send(self.COMMIT, body)

    def send_json(self, header):
        self._send(json.dumps(header).encode(), b"")


class RuntimeApiTransport:
    """The AWS Lambda Runtime API over one HTTP/1.1 keep-alive connection."""

    def __init__(self, address):
        import http.client  # only paid for in this mode
        host, _, port = address.rpartition(":")
        self.conn = http.client.HTTPConnection(host, int(port))

    def _request(self, method, path, body=None, headers=None):
        self.conn.request(method, "/2018-06-01/runtime" + path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        return response, response.read()  # reading the whole body frees the connection for the next request

    def _post(self, path, body, error_type=None):
        headers = {"Content-Type": "application/json"}
        if error_type:
            headers["Lambda-Runtime-Function-Error-Type"] = error_type
        self._request("POST", path, body, headers)

    def ready(self):
        pass  # asking for the first invocation is how a Runtime API client says it is ready

    def next(self):
        response, body = self._request("GET", "/invocation/next")
        h = response.headers
        return {
            "requestId": h.get("Lambda-Runtime-Aws-Request-Id"),
            "deadlineMs": h.get("Lambda-Runtime-Deadline-Ms"),
            "functionArn": h.get("Lambda-Runtime-Invoked-Function-Arn"),
            "traceId": h.get("Lambda-Runtime-Trace-Id"),
            "clientContext": h.get("Lambda-Runtime-Client-Context"),
            "cognitoIdentity": h.get("Lambda-Runtime-Cognito-Identity"),
        }, body

    def respond(self, request_id, body):
        self._post("/invocation/%s/response" % request_id, body)

    def error(self, request_id, body, error_type):
        self._post("/invocation/%s/error" % request_id, body, error_type)

    def init_error(self, body, error_type):
        self._post("/init/error", body, error_type)


def main():
    fd = os.environ.pop("KILN_SHIM_FD", None)  # the agent's socket is none of the function's business
    if fd:
        transport = FrameTransport(int(fd))
    elif os.environ.get("AWS_LAMBDA_RUNTIME_API"):
        transport = RuntimeApiTransport(os.environ["AWS_LAMBDA_RUNTIME_API"])
    else:
        sys.stderr.write("kiln shim: neither KILN_SHIM_FD nor AWS_LAMBDA_RUNTIME_API is set\n")
        sys.exit(2)

    # The function's modules come first on sys.path; the shim's own directory should not be on it at all.
    task_root = os.environ.get("LAMBDA_TASK_ROOT", "/var/task")
    if sys.path and sys.path[0] == os.path.dirname(SHIM_FILE):
        del sys.path[0]
    sys.path.insert(0, task_root)
    # The function's layers, extracted to /opt, right after its own code, as on Lambda.
    version = "python%d.%d" % sys.version_info[:2]
    sys.path[1:1] = [os.path.join(LAYERS_PYTHON, "lib", version, "site-packages"), LAYERS_PYTHON]
    # The runtime's AWS SDK (boto3) right after them, before whatever the host's Python has
    # installed, as on Lambda: a function that bundles its own boto3 (or has it in a layer) gets its own.
    if os.path.isdir(RUNTIME_LIB):
        sys.path.insert(3, RUNTIME_LIB)
    # kiln's runtime library (snapshot_restore_py) comes last.
    sys.path.append(os.path.join(os.path.dirname(SHIM_FILE), "python"))

    if os.environ.get("KILN_STANDBY") == "1" and isinstance(transport, FrameTransport):
        standby(transport, task_root)

    setup_logging()
    error = None
    try:
        web_app = os.environ.get("KILN_WEB_APP")
        handler = get_web_app(web_app) if web_app else get_handler(os.environ.get("_HANDLER", ""))
    except FaultException as e:
        error = make_error(e.msg, e.error_type, e.trace)
    except Exception as e:
        error = fault_result(e)
    if error is not None:
        log_error(error)
        flush_stdio()
        transport.init_error(json.dumps(error).encode(), error["errorType"])
        sys.exit(1)

    transport.ready()
    serve(transport, handler)


# ------------------------------------------------------------------------------------------------- standby
# The warm start path (docs/shim-protocol.md, "Standby"): the runtime boots before any function is assigned,
# with an empty task root. It imports what functions commonly import, says `ready`, and waits for a `load` frame,
# which comes once the agent has made the function's code appear at the task root.
PREWARM_MODULES = (
    "base64", "collections", "contextlib", "copy", "dataclasses", "datetime", "email.utils", "functools",
    "hashlib", "hmac", "http.client", "io", "itertools", "math", "pathlib", "re", "string", "tempfile",
    "threading", "typing", "urllib.parse", "urllib.request", "uuid", "zlib",
)


def standby(transport, task_root):
    for name in PREWARM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    transport.ready()
    frame = transport.next()
    if frame is None:  # the agent let the standby go without using it
        sys.exit(0)
    header, _ = frame
    if header.get("type") != "load":
        sys.stderr.write("kiln shim: a standby expected a load frame, got %r\n" % header.get("type"))
        sys.exit(1)
    os.environ.clear()
    os.environ.update(header.get("env") or {})
    os.environ.pop("KILN_SHIM_FD", None)
    # The working directory was opened before the code appeared on top of it: enter the task root anew,
    # and forget what the import system cached about the (then empty) directory.
    os.chdir(task_root)
    sys.path_importer_cache.pop(task_root, None)
    importlib.invalidate_caches()
    LambdaContext._env = LambdaContext._read_env()


def serve(transport, handler):
    """Answers invocations until the agent closes the socket, or turns into a fork server when asked."""
    try:
        while True:
            invocation = transport.next()
            if invocation is None:  # the agent closed the socket: a normal shutdown
                break
            if invocation[0].get("type") == "zygote":
                zygote(transport, handler)  # never returns in the zygote; returns in each fork
                return serve(_fork_transport, handler)
            handle(transport, handler, *invocation)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the agent went away mid-answer; it already knows, so this is a shutdown too
    flush_stdio()
    sys.exit(0)


# ------------------------------------------------------------------------------------------------- fork server
# The hot start path (docs/shim-protocol.md, "Fork server"): after init and the warm-up invocations, the agent
# turns this process into a zygote. Each `fork` frame carries two descriptors, the new instance's agent socket
# and the write end of its output pipe; the fork takes them over and serves invocations like any instance.
_fork_transport = None


def zygote(transport, handler):
    global _fork_transport
    sock = transport.sock
    # Objects that exist now are never collected in the forks, so the GC does not write to (and so copy) the
    # pages they share with the zygote.
    _run_hooks("get_before_snapshot")
    if _web is not None:
        _web.before_snapshot()
    _drop_connections()
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD reaches the wake-up fd
    transport.send_json({"type": "zygote_ready", "pid": os.getpid()})
    pending = b""
    fds = []
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            _reap(transport)
        if sock not in readable:
            continue
        try:
            data, ancdata, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        except InterruptedError:
            continue
        if not data:
            sys.exit(0)  # the agent is gone; the kernel ends the forks with the sandbox
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack("%di" % (len(payload) // 4), payload[:len(payload) - len(payload) % 4]))
        pending += data
        while len(pending) >= 8:
            header_len, body_len = _PREFIX.unpack(pending[:8])
            if len(pending) < 8 + header_len + body_len:
                break
            header = json.loads(pending[8:8 + header_len])
            pending = pending[8 + header_len + body_len:]
            if header.get("type") != "fork":
                continue
            control, output, fds = fds[0], fds[1], fds[2:]
            flush_stdio()
            pid = os.fork()
            if pid == 0:
                # The fork: drop the zygote's descriptors and take over the instance's.
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                sock.detach()
                os.close(transport.sock_fd)
                for key, value in (header.get("env") or {}).items():
                    os.environ[key] = value
                LambdaContext._env = LambdaContext._read_env()
                random.seed()
                if _web is not None:
                    _web.after_fork()  # before any request, the spare fork's warm-up included
                _fork_transport = FrameTransport(control)
                if header.get("warmup"):
                    _warm_up(_fork_transport, handler)
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.close(output)
                try:
                    _run_hooks("get_after_restore")
                except Exception as e:
                    error = fault_result(e)
                    log_error(error)
                    flush_stdio()
                    _fork_transport.init_error(json.dumps(error).encode(), error["errorType"])
                    os._exit(1)
                _fork_transport.ready()
                return
            os.close(control)
            os.close(output)
            transport.send_json({"type": "forked", "pid": pid})


def _drop_connections():
    """Ends the TCP connections this process holds (an SDK client's pool, filled by init or a warm-up): every fork
    would inherit the same socket, and requests of several forks would interleave on one connection. Each one's
    descriptor is replaced by an unconnected socket, so that the objects holding it see a dropped connection (urllib3,
    and so boto3 and requests, opens a new one; a client that does not check fails on its next send) and the
    descriptor number is never reused by an unrelated file."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                continue
            copy = os.dup(fd)
        except OSError:
            continue  # the descriptor listdir itself used, gone by now
        try:
            probe = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            continue
        with probe:
            if probe.family not in (socket.AF_INET, socket.AF_INET6) or probe.type != socket.SOCK_STREAM:
                continue
            try:
                probe.getpeername()
            except OSError:
                continue  # not connected: a listener, or never connected
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            with socket.socket(probe.family, socket.SOCK_STREAM) as dead:
                os.dup2(dead.fileno(), fd, inheritable=os.get_inheritable(fd))
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)


class _DropAnswers:
    """A transport for a warm-up invocation: its answer goes nowhere."""

    def respond(self, request_id, body):
        pass

    def error(self, request_id, body, error_type):
        pass

    def commit(self, body):
        pass


def _warm_up(transport, handler):
    """A spare fork's warm-up (docs/shim-protocol.md, "Fork server"): the agent sends one invocation once the fork
    is in its own cgroup; it runs with its answer and output dropped, so that the pages a request writes are copied
    from the zygote now rather than during the first real request. The after-restore hooks run after it."""
    invocation = transport.next()
    if invocation is None:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    handle(_DropAnswers(), handler, *invocation)
    flush_stdio()


def _run_hooks(getter):
    """Runs the function's snapshot hooks (snapshot_restore_py), if it registered any."""
    hooks = sys.modules.get("snapshot_restore_py")
    for func, args, kwargs in (getattr(hooks, getter)() if hooks else []):
        func(*args, **kwargs)


def _reap(transport):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        transport.send_json({"type": "exited", "pid": pid, "status": code if code >= 0 else 128 - code})


if __name__ == "__main__":
    main()
