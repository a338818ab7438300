"""OFC's single-stage image functions and pipeline stages (Pillow), reading their input from and writing
their output to the object store (boto3, kiln's S3 endpoint from the sandbox's environment) or Redis.

Event: {"op": blur|resize|rotate|sepia|edge|denoise|wc_map|wc_reduce, "store": "s3"|"redis",
"bucket": ..., "key": ... (or "keys" for wc_reduce), "out": ...}. The answer carries the Extract, Transform
and Load times the function measured (ms), as OFC's Figure 7 breaks execution time down. As a stage of a kiln
sequence, an event with "next" is answered with the next stage's event (what this stage wrote as its "key", and
the timings so far as "acc")."""

import io
import json
import os
import time
from collections import Counter

_clients = {}


def _s3():
    if "s3" not in _clients:
        import boto3
        _clients["s3"] = boto3.client("s3", region_name="us-east-1")
    return _clients["s3"]


def _redis():
    if "redis" not in _clients:
        import redis
        _clients["redis"] = redis.Redis(host="127.0.0.1", port=int(os.environ["REDIS_PORT"]))
    return _clients["redis"]


def get(event, key):
    if event["store"] == "redis":
        return _redis().get(f"{event['bucket']}/{key}")
    return _s3().get_object(Bucket=event["bucket"], Key=key)["Body"].read()


def put(event, key, data):
    if event["store"] == "redis":
        _redis().set(f"{event['bucket']}/{key}", data)
    else:
        _s3().put_object(Bucket=event["bucket"], Key=key, Body=data)


def sepia(img):
    from PIL import ImageOps
    grey = ImageOps.grayscale(img)
    return ImageOps.colorize(grey, "#2e1b0f", "#f2e6c9")


def transform(op, data):
    from PIL import Image, ImageFilter
    img = Image.open(io.BytesIO(data))
    img.load()
    fmt = img.format or "PNG"
    img = img.convert("RGB")
    if op == "blur":
        img = img.filter(ImageFilter.GaussianBlur(2))
    elif op == "resize" or op == "thumb_half":
        img = img.resize((max(1, img.width // 2), max(1, img.height // 2)))
    elif op == "thumb":
        img.thumbnail((64, 64))
    elif op == "rotate":
        img = img.rotate(90, expand=True)
    elif op == "sepia":
        img = sepia(img)
    elif op == "edge":
        img = img.filter(ImageFilter.FIND_EDGES)
    elif op == "denoise":
        img = img.filter(ImageFilter.MedianFilter(3))
    else:
        raise ValueError(f"unknown op {op}")
    out = io.BytesIO()
    img.save(out, format="JPEG" if fmt == "JPEG" else "PNG")
    return out.getvalue()


def handler(event, context):
    op = event["op"]
    t0 = time.perf_counter()
    if op == "wc_reduce":
        parts = [get(event, k) for k in event["keys"]]
    else:
        data = get(event, event["key"])
    t1 = time.perf_counter()
    if op == "wc_map":
        result = json.dumps(Counter(data.decode().split())).encode()
    elif op == "wc_reduce":
        total = Counter()
        for part in parts:
            total.update(json.loads(part))
        result = json.dumps(dict(total.most_common(100))).encode()
    else:
        result = transform(op, data)
    t2 = time.perf_counter()
    put(event, event["out"], result)
    t3 = time.perf_counter()
    timings = {"e_ms": (t1 - t0) * 1e3, "t_ms": (t2 - t1) * 1e3, "l_ms": (t3 - t2) * 1e3}
    # In a sequence, the stages before this one passed their timings on.
    for name, value in event.get("acc", {}).items():
        timings[name] += value
    if "next" in event:
        # Not the last stage: the answer is the next stage's event.
        return {**event["next"], "key": event["out"], "acc": timings}
    return {**timings, "out_bytes": len(result)}
