"""kiln's web adapter for Python (docs/web-adapter.md): serves an unmodified WSGI or ASGI app as a function.

The shim imports the app at init (so a zygote holds it, imported and warmed, and every fork inherits it) and hands
each invocation's function URL event (payload format 2.0) to `WebAdapter.handle`, which calls the app in this
process as a server would and returns the payload 2.0 response. Standard library only.
"""

import asyncio
import base64
import gc
import inspect
import io
import os
import re
import sys
from urllib.parse import unquote_to_bytes

# Content types whose bodies go out as text when they are UTF-8; anything else is base64 (isBase64Encoded).
_TEXT_TYPES = ("text/", "application/json", "application/javascript", "application/ecmascript",
               "application/xml", "application/x-www-form-urlencoded", "image/svg+xml")
_TEXT_SUFFIXES = ("+json", "+xml")


def is_asgi(app):
    """ASGI apps are coroutine functions of (scope, receive, send), or objects whose __call__ is one; WSGI apps
    are plain callables of (environ, start_response)."""
    if inspect.iscoroutinefunction(app) or inspect.iscoroutinefunction(getattr(app, "__call__", None)):
        return True
    try:
        params = [p for p in inspect.signature(app).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) == 3


def is_http_event(event):
    return isinstance(event, dict) and isinstance((event.get("requestContext") or {}).get("http"), dict)


def _textual(content_type):
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind.startswith(_TEXT_TYPES) or kind.endswith(_TEXT_SUFFIXES)


class Request:
    """The parts of a payload 2.0 event a server would have read off the wire."""

    __slots__ = ("method", "raw_path", "query", "headers", "body", "scheme", "host", "port", "client")

    def __init__(self, event):
        http = event["requestContext"]["http"]
        self.method = (http.get("method") or "GET").upper()
        self.raw_path = event.get("rawPath") or http.get("path") or "/"
        self.query = event.get("rawQueryString") or ""
        # Lower-case names; a header sent several times arrives joined with commas, as a proxy joins them.
        self.headers = [(k.lower(), v) for k, v in (event.get("headers") or {}).items()]
        cookies = event.get("cookies")
        if cookies:
            self.headers = [h for h in self.headers if h[0] != "cookie"]
            self.headers.append(("cookie", "; ".join(cookies)))
        body = event.get("body") or ""
        if event.get("isBase64Encoded"):
            self.body = base64.b64decode(body)
        else:
            self.body = body.encode() if isinstance(body, str) else bytes(body)
        headers = dict(self.headers)
        self.scheme = headers.get("x-forwarded-proto", "http").split(",")[0].strip() or "http"
        host = headers.get("host") or (event.get("requestContext") or {}).get("domainName") or "localhost"
        if host.startswith("["):  # an IPv6 literal, [::1]:8080
            end = host.find("]") + 1
            name, port = host[:end], host[end + 1:] if host[end:end + 1] == ":" else ""
        else:
            name, _, port = host.partition(":")
        self.host = name
        self.port = int(port) if port.isdigit() else 443 if self.scheme == "https" else 80
        self.client = http.get("sourceIp") or "127.0.0.1"


def respond(method, status, headers, body):
    """A payload 2.0 response from what the app answered: headers by lower-case name (repeated ones joined with
    ", "), each Set-Cookie in `cookies`, and the body as text only when its type is textual and it is UTF-8."""
    out, cookies = {}, []
    for name, value in headers:
        name = name.lower()
        if name == "set-cookie":
            cookies.append(value)
        elif name in out:
            out[name] += ", " + value
        else:
            out[name] = value
    response = {"statusCode": status, "headers": out, "isBase64Encoded": False}
    if cookies:
        response["cookies"] = cookies
    if method == "HEAD" or not body:
        response["body"] = ""
        return response
    if _textual(out.get("content-type", "")):
        try:
            response["body"] = body.decode("utf-8")
            return response
        except UnicodeDecodeError:
            pass
    response["body"] = base64.b64encode(body).decode()
    response["isBase64Encoded"] = True
    return response


def not_http(event):
    """The answer to an event that is no HTTP request, e.g. a warm-up invocation with `{}`: the app is not called
    (a warm-up or readiness check must not run a route with side effects)."""
    return {"statusCode": 400, "headers": {"content-type": "text/plain; charset=utf-8"}, "isBase64Encoded": False,
            "body": "kiln web adapter: the event is not an HTTP request (function URL payload format 2.0)\n"}


# ------------------------------------------------------------------------------------------------- WSGI
def wsgi_environ(request, context):
    path = unquote_to_bytes(request.raw_path).decode("latin-1")  # PEP 3333: bytes as latin-1
    environ = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": request.query,
        "RAW_URI": request.raw_path + ("?" + request.query if request.query else ""),
        "REQUEST_URI": request.raw_path + ("?" + request.query if request.query else ""),
        "SERVER_NAME": request.host,
        "SERVER_PORT": str(request.port),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": request.client,
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": request.scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
        "kiln.context": context,
    }
    for name, value in request.headers:
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name == "content-length":
            continue  # the body's real length, set above
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
            # Latin-1 as on the wire, the way WSGI servers hand header values to apps.
            value = value.encode("utf-8").decode("latin-1")
            environ[key] = environ[key] + "," + value if key in environ else value
    return environ


def call_wsgi(app, request, context):
    answer = {}
    chunks = []

    def start_response(status, headers, exc_info=None):
        if exc_info and answer:
            raise exc_info[1].with_traceback(exc_info[2])
        answer["status"], answer["headers"] = status, headers
        return chunks.append  # the legacy write() callable

    result = app(wsgi_environ(request, context), start_response)
    try:
        for chunk in result:
            if chunk:
                chunks.append(chunk)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if "status" not in answer:
        raise RuntimeError("the WSGI app returned without calling start_response")
    headers = [(k, v.encode("latin-1").decode("utf-8", "replace")) for k, v in answer["headers"]]
    return respond(request.method, int(answer["status"].split(" ", 1)[0]), headers, b"".join(chunks))


# ------------------------------------------------------------------------------------------------- ASGI
class Asgi:
    """Runs an ASGI 3 app on an event loop of this process. A fork of a zygote makes its own loop (a loop's selector
    would otherwise be shared with the zygote) and runs the app's lifespan startup again, as each worker of a
    server does."""

    def __init__(self, app):
        self.app = app
        self.loop = None
        self.pid = None
        self.state = {}

    def _ready_loop(self):
        if self.pid != os.getpid():
            self.loop = asyncio.new_event_loop()
            self.pid = os.getpid()
            self.state = {}
            self.loop.run_until_complete(self._startup())
        return self.loop

    async def _startup(self):
        # Lifespan "auto": an app that does not speak it (raises, or returns) is served without it.
        queue = asyncio.Queue()
        started = self.loop.create_future()
        await queue.put({"type": "lifespan.startup"})

        async def send(message):
            if started.done():
                return
            if message["type"] == "lifespan.startup.complete":
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed":
                started.set_exception(RuntimeError("ASGI lifespan startup failed: " + message.get("message", "")))

        async def run():
            try:
                await self.app({"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.3"},
                                "state": self.state}, queue.get, send)
            except BaseException:
                pass
            if not started.done():
                started.set_result(None)

        self._lifespan = self.loop.create_task(run())
        await started

    def __call__(self, request, context):
        return self._ready_loop().run_until_complete(self._call(request))

    async def _call(self, request):
        path = unquote_to_bytes(request.raw_path).decode("utf-8", "replace")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.scheme,
            "path": path,
            "raw_path": request.raw_path.encode("latin-1", "replace"),
            "query_string": request.query.encode("latin-1", "replace"),
            "root_path": "",
            "headers": [(k.encode("latin-1", "replace"), v.encode("utf-8")) for k, v in request.headers],
            "client": (request.client, 0),
            "server": (request.host, request.port),
            "state": dict(self.state),
        }
        answer = {"status": None, "headers": [], "done": False}
        chunks = []
        finished = asyncio.Event()
        body_sent = False

        async def receive():
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await finished.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            kind = message["type"]
            if kind == "http.response.start":
                answer["status"] = message["status"]
                answer["headers"] = [(bytes(k).decode("latin-1"), bytes(v).decode("utf-8", "replace"))
                                     for k, v in message.get("headers", [])]
            elif kind == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                if not message.get("more_body"):
                    answer["done"] = True
                    finished.set()

        try:
            await self.app(scope, receive, send)
        except Exception:
            if answer["status"] is None:
                raise  # nothing was answered: the invocation fails, with the app's exception
            sys.stderr.write("kiln web adapter: the ASGI app raised after its response started\n")
        finally:
            finished.set()
        if answer["status"] is None:
            raise RuntimeError("the ASGI app returned without starting a response")
        return respond(request.method, answer["status"], answer["headers"], b"".join(chunks))


# ------------------------------------------------------------------------------------------------- adapter
class WebAdapter:
    def __init__(self, app):
        self.app = app
        self.asgi = Asgi(app) if is_asgi(app) else None
        self.engines = []

    def handle(self, event, context):
        if not is_http_event(event):
            if isinstance(event, dict) and event.get("kiln") == ROUTES_EVENT:
                return declared_routes(self.app)
            return not_http(event)
        request = Request(event)
        if self.asgi is not None:
            return self.asgi(request, context)
        return call_wsgi(self.app, request, context)

    # Connections opened before the snapshot would be shared by every fork (one socket, several processes). The
    # zygote closes the frameworks' own before it forks (the shim then ends any TCP connection left), and each fork
    # drops what it may still hold without touching the socket.
    def before_snapshot(self):
        _close_django()
        sqlalchemy = sys.modules.get("sqlalchemy.engine")
        if sqlalchemy is not None:
            # Found now: after gc.freeze() the engines are no longer among gc.get_objects().
            engine_type = getattr(sqlalchemy, "Engine", None)
            if engine_type is not None:
                self.engines = [o for o in gc.get_objects() if isinstance(o, engine_type)]
                for engine in self.engines:
                    _dispose(engine, close=True)

    def after_fork(self):
        _close_django()
        for engine in self.engines:
            _dispose(engine, close=False)


def _close_django():
    db = sys.modules.get("django.db")
    if db is not None:
        try:
            db.connections.close_all()
        except Exception as e:
            sys.stderr.write("kiln web adapter: closing Django's connections failed: %r\n" % (e,))


def _dispose(engine, close):
    try:
        engine.dispose(close=close)
    except TypeError:  # SQLAlchemy before 1.4.33 has no `close`
        if close:
            engine.dispose()
    except Exception as e:
        sys.stderr.write("kiln web adapter: disposing of an SQLAlchemy engine failed: %r\n" % (e,))


# ------------------------------------------------------------------------------------------------- route table
# What the framework declares, in kiln's route patterns (docs/burst.md): `METHOD /path/{name}/{name:REGEX}`. An app's
# gateway asks for it with the event {"kiln": "web-routes"}; the answer is {"framework", "routes", "skipped"}.
ROUTES_EVENT = "web-routes"


def declared_routes(app):
    for name, finder in (("flask", _flask_routes), ("django", _django_routes)):
        try:
            found = finder(app)
        except Exception as e:  # a framework's internals differ across versions: say so, route nothing
            return {"framework": name, "routes": [], "skipped": ["reading the route table failed: %r" % (e,)]}
        if found is not None:
            routes, skipped = found
            return {"framework": name, "routes": routes, "skipped": skipped}
    return {"framework": None, "routes": [], "skipped": []}


_LITERAL = re.compile(r"[^{}]*")


def _literal(text):
    """A path's literal part as kiln's pattern writes it, or None if it cannot be (braces)."""
    return text if _LITERAL.fullmatch(text) else None


# Flask / Werkzeug: `<converter(args):name>` in each rule.
_FLASK_VAR = re.compile(r"<(?:(?P<conv>[a-zA-Z_][a-zA-Z0-9_]*)(?:\((?P<args>[^)]*)\))?:)?(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)>")
_FLASK_CONVERTERS = {"default": None, "string": None, "int": r"\d+", "float": r"\d+\.\d+", "path": r".+",
                     "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"}


def _flask_routes(app):
    url_map = getattr(app, "url_map", None)
    if url_map is None or not hasattr(url_map, "iter_rules"):
        return None
    routes, skipped = [], []
    for rule in url_map.iter_rules():
        path, pos, ok = "", 0, True
        for m in _FLASK_VAR.finditer(rule.rule):
            literal = _literal(rule.rule[pos:m.start()])
            conv = m.group("conv") or "default"
            if literal is None:
                ok = False
                break
            path += literal
            if conv == "any":
                choices = [re.escape(c.strip().strip("'\"")) for c in (m.group("args") or "").split(",") if c.strip()]
                path += "{%s:%s}" % (m.group("name"), "|".join(choices))
            elif conv in _FLASK_CONVERTERS:
                regex = _FLASK_CONVERTERS[conv]
                path += "{%s}" % m.group("name") if regex is None else "{%s:%s}" % (m.group("name"), regex)
            else:
                regex = getattr(url_map.converters.get(conv), "regex", None)
                if not regex:
                    ok = False
                    break
                path += "{%s:%s}" % (m.group("name"), regex)
            pos = m.end()
        tail = _literal(rule.rule[pos:])
        if not ok or tail is None:
            skipped.append(rule.rule)
            continue
        path += tail
        methods = sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}) or ["*"]
        routes.extend("%s %s" % (m, path) for m in methods)
    return routes, skipped


def _django_routes(app):
    handler = sys.modules.get("django.core.handlers.base")
    if handler is None or not isinstance(app, getattr(handler, "BaseHandler", ())):
        return None
    from django.urls import get_resolver
    routes, skipped = [], []
    _django_walk(get_resolver().url_patterns, "/", routes, skipped)
    return routes, skipped


def _django_walk(patterns, prefix, routes, skipped):
    for entry in patterns:
        piece = _django_piece(entry.pattern)
        if piece is None:
            skipped.append(prefix + str(entry.pattern))
            continue
        if hasattr(entry, "url_patterns"):  # an include()
            _django_walk(entry.url_patterns, prefix + piece, routes, skipped)
        else:
            routes.append("* " + prefix + piece)


def _django_piece(pattern):
    """A URL pattern's part of the path in kiln's notation, or None if it cannot be written so."""
    route = getattr(pattern, "_route", None)
    if route is not None:  # path(): `<converter:name>`
        out, pos = "", 0
        for m in re.finditer(r"<(?:(?P<conv>[^>:]+):)?(?P<name>[^>]+)>", route):
            literal = _literal(route[pos:m.start()])
            if literal is None:
                return None
            converter = pattern.converters.get(m.group("name"))
            regex = getattr(converter, "regex", "[^/]+")
            out += literal + ("{%s}" % m.group("name") if regex == "[^/]+" else "{%s:%s}" % (m.group("name"), regex))
            pos = m.end()
        tail = _literal(route[pos:])
        return None if tail is None else out + tail
    regex = getattr(pattern, "_regex", None)
    if regex is None:
        return None  # i18n prefixes and the like
    return _regex_piece(regex)


def _regex_piece(regex):
    r"""re_path(): `^archive/(?P<year>\d{4})/$` as `archive/{year:\d{4}}/`; None when anything but literal text and
    named groups is left."""
    if regex.startswith("^"):
        regex = regex[1:]
    if regex.endswith("$") and not regex.endswith("\\$"):
        regex = regex[:-1]
    out, i = "", 0
    while i < len(regex):
        if regex.startswith("(?P<", i):
            end_name = regex.index(">", i)
            name = regex[i + 4:end_name]
            depth, j = 1, end_name + 1
            while j < len(regex) and depth:
                if regex[j] == "\\":
                    j += 2
                    continue
                depth += {"(": 1, ")": -1}.get(regex[j], 0)
                j += 1
            if depth:
                return None
            out += "{%s:%s}" % (name, regex[end_name + 1:j - 1])
            i = j
        elif regex[i] == "\\" and i + 1 < len(regex) and not regex[i + 1].isalnum():
            out += regex[i + 1]
            i += 2
        elif regex[i] in ".^$*+?{}[]|()\\":
            return None
        else:
            out += regex[i]
            i += 1
    return out
