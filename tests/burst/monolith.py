"""A monolith for the gateway's tests: a WSGI app from a file, served in this process two requests at a
time (as a server with two workers would), the rest waiting."""

import importlib.util
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _ThreadedWSGI(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class WsgiMonolith:
    def __init__(self, path, callable_name, workers=2):
        spec = importlib.util.spec_from_file_location(f"monolith_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        app = getattr(module, callable_name)
        slots = threading.Semaphore(workers)

        def limited(environ, start_response):
            with slots:
                return app(environ, start_response)

        self.server = make_server("127.0.0.1", 0, limited, server_class=_ThreadedWSGI, handler_class=_Quiet)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
