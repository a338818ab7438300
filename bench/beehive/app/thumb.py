"""The benchmark's monolith: a Flask thumbnail service (BeeHive's CPU-bound *thumbnail* app).

`POST /thumbnail` takes an image (any format Pillow reads) as the request body and answers a PNG
thumbnail of it, at most `?size=` pixels on a side (default 160). `GET /` and `GET /health`
answer at once. No state, no database, no files: the same module runs under gunicorn (the
monolith) and as a kiln `KilnWeb` function (`--web-app thumb:app`), unchanged.
"""

import io

from flask import Flask, Response, request
from PIL import Image, ImageFilter

app = Flask(__name__)


@app.get("/")
@app.get("/health")
def health():
    return {"ok": True}


@app.post("/thumbnail")
def thumbnail():
    data = request.get_data()
    if not data:
        return {"error": "POST an image as the body"}, 400
    try:
        size = max(16, min(1024, int(request.args.get("size", 160))))
    except ValueError:
        return {"error": "size must be an integer"}, 400
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as e:  # not an image
        return {"error": f"not an image: {e}"}, 400
    image = image.convert("RGB")
    # A high-quality resize: the box-filtered reduce, then Lanczos, then a light sharpen.
    image.thumbnail((size, size), Image.Resampling.LANCZOS, reducing_gap=None)
    image = image.filter(ImageFilter.UnsharpMask(radius=1, percent=60, threshold=2))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return Response(out.getvalue(), mimetype="image/png")
