"""A plain Flask app, as it would run under gunicorn (`site:app`); kiln serves it as a web function."""

import hashlib
import os
import struct
import zlib

from flask import Flask, Response, jsonify, redirect, request, url_for

app = Flask(__name__)
STARTED_IN = os.getpid()  # the process that imported the app (a zygote's forks inherit it)


def png(width, height):
    """A valid RGB PNG with a gradient: binary, with bytes of every value."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3) % 256 for x in range(width * 3)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@app.route("/echo", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"])
def echo():
    body = request.get_data()
    return jsonify(
        method=request.method,
        path=request.path,
        full_path=request.full_path,
        args=request.args.to_dict(flat=False),
        multi=request.headers.getlist("X-Multi"),
        cookies=request.cookies,
        host=request.host,
        scheme=request.scheme,
        url=request.url,
        remote_addr=request.remote_addr,
        length=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        pid=os.getpid(),
        started_in=STARTED_IN,
    )


@app.route("/héllo/<name>")
def hello(name):
    return jsonify(path=request.path, name=name)


@app.route("/image.png", methods=["GET", "HEAD", "POST"])
def image():
    data = request.get_data() if request.method == "POST" else png(64, 48)
    return Response(data, mimetype="image/png")


@app.route("/upload", methods=["POST"])
def upload():
    files = {name: {"filename": f.filename, "type": f.mimetype, "sha256": hashlib.sha256(f.read()).hexdigest()}
             for name, f in request.files.items()}
    return jsonify(files=files, form=request.form.to_dict(flat=False))


@app.route("/cookies")
def cookies():
    response = jsonify(ok=True)
    response.set_cookie("a", "1")
    response.set_cookie("b", "2", httponly=True)
    response.set_cookie("c", "3; x", path="/echo")
    response.headers.add("X-Repeated", "one")
    response.headers.add("X-Repeated", "two")
    return response


@app.route("/go")
def go():
    return redirect(url_for("echo", _external=True, q="1"))


@app.route("/bytes")
def many_bytes():
    n = int(request.args["n"])
    return Response(b"x" * n, mimetype="application/octet-stream")


@app.route("/boom")
def boom():
    raise ValueError("the app failed")
