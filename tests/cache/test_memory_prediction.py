"""Per-invocation memory prediction (OFC §5): once a function's memory model is mature, each invocation runs under
the limit the model predicts (the interval above its class), and one that needs more still succeeds: the monitor
raises its limit, or kiln runs it again at once at MemorySize. The fixture allocates event["mb"] MB.
"""

import re
import threading

from kiln_harness import FUNCTIONS, PYTHON_RUNTIME, node_status, wait_for, zip_dir


def limit_of(report):
    found = re.search(r"Memory Limit: (\d+) MB( \(raised\))?", report)
    return (int(found.group(1)), bool(found.group(2))) if found else (None, False)


def invoke(server, name, mb, **event):
    result, response = server.invoke(name, {"mb": mb, **event}, LogType="Tail")
    report = [line for line in server.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    assert "FunctionError" not in response, (result, report)
    assert result == {"allocated_mb": mb}
    used = int(re.search(r"Max Memory Used: (\d+) MB", report).group(1))
    return limit_of(report), used


def models(server):
    status = server.signed_request("GET", "/kiln/v1/status", "", {}).json()
    return {m["function"]: m for m in status["memoryModels"]}


def retries(server, name):
    metrics = server.signed_request("GET", "/metrics", "", {}).text
    found = re.search(rf'kiln_prediction_retries_total{{function="{name}"}} (\d+)', metrics)
    return int(found.group(1)) if found else 0


def test_a_mature_model_sizes_invocations_and_an_under_prediction_never_fails(fresh_kiln):
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20"])
    name = "mp-hog"
    server.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=512, Timeout=30)
    sizes = [16, 48, 96]
    for i in range(45):
        (limit, _), _ = invoke(server, name, sizes[i % 3])
    model = models(server)[name]
    assert model["mature"], model
    # Sized: below the booked 512 MB, above what the invocation uses.
    for mb in sizes:
        (limit, raised), used = invoke(server, name, mb)
        assert limit is not None and not raised, (mb, limit)
        assert used < limit < 512, (mb, used, limit)
    # Far more than any invocation so far: the prediction is too low, and the caller still gets the answer.
    before = retries(server, name)
    (limit, raised), used = invoke(server, name, 320)
    assert used >= 320
    assert raised or limit is None, (limit, raised)
    assert raised or retries(server, name) == before + 1
    # The model learnt it: the same request is never sized below what it uses again (it may run at MemorySize
    # while the retraining that the under-prediction started is still on the blocking pool).
    def sized_right():
        (limit, raised), used = invoke(server, name, 320)
        return limit is None or (limit > used and not raised)
    wait_for(sized_right, timeout=60, what="the retrained model to size the request above its use")


def test_models_survive_a_restart_and_new_code_starts_afresh(fresh_kiln):
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20"])
    name = "mp-restart"
    server.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=512, Timeout=30)
    for i in range(40):
        invoke(server, name, 16 if i % 2 else 64)
    assert models(server)[name]["mature"]
    server.restart()
    (limit, _), _ = invoke(server, name, 64)
    assert limit is not None, "the model was read back from the data dir"
    assert models(server)[name]["mature"]
    # New code: the model starts again, and nothing is sized until it matures.
    lam = server.client()
    lam.update_function_code(FunctionName=name, ZipFile=zip_dir(FUNCTIONS / "python_basic"))
    lam.get_waiter("function_updated_v2").wait(FunctionName=name)
    lam.update_function_configuration(FunctionName=name, Handler="app.echo")
    result, response = server.invoke(name, {"mb": 64})
    assert "FunctionError" not in response, result
    assert not models(server)[name]["mature"]
    assert models(server)[name]["invocations"] == 1


def test_sized_instances_reserve_their_predicted_limits_of_the_node_budget(fresh_kiln):
    # A node budget of 1536 MB holds one instance booked at 1024 MB, or many sized ones.
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20", "--memory-budget-mb", "1536"])
    name = "mp-budget"
    server.deploy(name, PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=1024, Timeout=30)
    event = {"mb": 16, "hold_s": 0}
    for _ in range(25):
        result, response = server.invoke(name, event)
        assert "FunctionError" not in response, result
    assert models(server)[name]["mature"]
    answers = []
    held = dict(event, hold_s=3)
    threads = [threading.Thread(target=lambda: answers.append(server.invoke(name, held))) for _ in range(3)]
    for t in threads:
        t.start()
    def all_busy():
        status = node_status(server)
        busy = [i for i in status["instances"] if i["function"] == name and i["state"] == "busy"]
        return status if len(busy) == 3 else None

    try:
        # All three run at once, each in an instance of its own, and the node counts their limits.
        status = wait_for(all_busy, timeout=20, interval=0.05, what="three busy instances")
        assert status["memory_reserved_mb"] < 1024, status["memory_reserved_mb"]
    finally:
        for t in threads:
            t.join(timeout=60)
    assert [r for r, _ in answers] == [{"allocated_mb": 16}] * 3
    # Idle again: the reservation is what the instances' limits are now, below any one booking.
    assert node_status(server)["memory_reserved_mb"] < 1024


IMAGE_HOG = '''
import struct

import boto3

s3 = boto3.client("s3")


def handler(event, context):
    head = s3.get_object(Bucket=event["bucket"], Key=event["key"], Range="bytes=0-63")["Body"].read()
    width, height = struct.unpack(">II", head[16:24])
    pixels = b"\\x5a" * (width * height * 8)  # a decoded image, 8 bytes a pixel
    return {"pixels": len(pixels) // 8}
'''


def test_an_input_image_in_the_local_store_sizes_its_invocation(fresh_kiln, tmp_path):
    """The models' object features come from the local store too: an object's size, and an image's format and
    dimensions, extracted in the background after it was written. So a function whose memory follows the
    image it reads is sized by the image an event names, without the cache and without reading it."""
    from test_object_cache import png
    from s3_harness import s3_client, vendored_boto3
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20"])
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(IMAGE_HOG)
    vendored_boto3(code)
    name = "mp-image"
    server.deploy(name, PYTHON_RUNTIME, "app.handler", code=str(code), MemorySize=512, Timeout=60)
    s3 = s3_client(server)
    s3.create_bucket(Bucket="images")
    small, large = png(32, 32), png(2048, 2048)
    for i in range(40):
        s3.put_object(Bucket="images", Key=f"small/{i}.png", Body=small)
        s3.put_object(Bucket="images", Key=f"large/{i}.png", Body=large)

    def run(key):
        result, response = server.invoke(name, {"bucket": "images", "key": key}, LogType="Tail")
        assert "FunctionError" not in response, result
        report = [line for line in server.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
        return limit_of(report), int(re.search(r"Max Memory Used: (\d+) MB", report).group(1))

    for i in range(39):
        run(f"small/{i}.png")
        run(f"large/{i}.png")
        model = models(server)[name]
        if i >= 12 and model["mature"]:
            break
    assert model["mature"], model
    assert {"object.size", "object.width", "object.height", "object.format"} <= set(model["features"]), model
    assert not any(f.startswith("arg.key") for f in model["features"]), model
    # Objects the functions never read before: their stored features size each invocation.
    (small_limit, small_raised), small_used = run("small/39.png")
    (large_limit, large_raised), large_used = run("large/39.png")
    assert not small_raised and not large_raised
    assert small_used < small_limit < large_limit < 512, (small_used, small_limit, large_limit)
    assert large_used < large_limit


def test_booked_sizing_keeps_every_invocation_at_memory_size(fresh_kiln):
    """`KilnMemorySizing: booked` (`--memory-sizing booked`): the model learns, nothing is sized, so no handler
    ever runs twice after an under-prediction; switching to `predicted` uses what it learnt."""
    server = fresh_kiln(extra_args=["--prediction-min-samples", "20"])
    name = "mp-booked"
    code = str(FUNCTIONS / "memory_hog")
    deploy = ["deploy", name, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", code,
              "--memory", "512", "--timeout", "30"]
    server.cli(*deploy, "--memory-sizing", "booked")
    config = server.signed_request("GET", f"/2015-03-31/functions/{name}/configuration", "", {}).json()
    assert config["KilnMemorySizing"] == "booked"
    for _ in range(25):
        (limit, _), _ = invoke(server, name, 16)
        assert limit is None
    assert models(server)[name]["mature"]
    (limit, _), _ = invoke(server, name, 320)
    assert limit is None and retries(server, name) == 0
    server.cli(*deploy, "--memory-sizing", "predicted")
    (limit, _), _ = invoke(server, name, 16)
    assert limit is not None and limit < 512
