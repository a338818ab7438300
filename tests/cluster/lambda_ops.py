"""Lambda API calls against cluster nodes, run inside the client's namespace (the nodes' addresses
are reachable only there): `python lambda_ops.py OP JSON-ARGS` prints the result as JSON.

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; each call names its node's
endpoint. An API error is printed as {"error": CODE, "message": ...}, never raised."""

import io
import json
import sys
import threading
import time
import zipfile

import boto3
import botocore.config
import botocore.exceptions

PYTHON_RUNTIME = "python3.11"
ROLE = "arn:aws:iam::000000000000:role/kiln-function"


def client(endpoint):
    return boto3.client(
        "lambda", endpoint_url=endpoint, region_name="us-east-1",
        config=botocore.config.Config(retries={"max_attempts": 0}, read_timeout=60, connect_timeout=5))


def package(marker):
    """A function that answers {"marker": marker}."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("app.py", f"def handler(event, context):\n    return {{'marker': {marker!r}}}\n")
    return buffer.getvalue()


def fixed_package(marker):
    """package(marker) with a fixed timestamp: the same marker gives the same bytes (digest)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(zipfile.ZipInfo("app.py", date_time=(2020, 1, 1, 0, 0, 0)),
                   f"def handler(event, context):\n    return {{'marker': {marker!r}}}\n")
    return buffer.getvalue()


def call(fn):
    try:
        return fn()
    except botocore.exceptions.ClientError as e:
        return {"error": e.response["Error"]["Code"], "message": e.response["Error"].get("Message", "")}


def create(endpoint, name, marker):
    return call(lambda: pick(client(endpoint).create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
        Code={"ZipFile": package(marker)})))


def update_code(endpoint, name, marker):
    return call(lambda: pick(client(endpoint).update_function_code(FunctionName=name, ZipFile=package(marker))))


def create_fixed(endpoint, name, marker):
    return call(lambda: pick(client(endpoint).create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
        Code={"ZipFile": fixed_package(marker)})))


def update_fixed(endpoint, name, marker):
    return call(lambda: pick(client(endpoint).update_function_code(FunctionName=name, ZipFile=fixed_package(marker))))


def get(endpoint, name):
    return call(lambda: pick(client(endpoint).get_function_configuration(FunctionName=name)))


def invoke(endpoint, name):
    def run():
        answer = client(endpoint).invoke(FunctionName=name, Payload=b"{}")
        return {"payload": json.loads(answer["Payload"].read()), "functionError": answer.get("FunctionError")}
    return call(run)


def publish(endpoint, name):
    return call(lambda: {"Version": client(endpoint).publish_version(FunctionName=name)["Version"]})


def create_alias(endpoint, name, alias, version):
    return call(lambda: {"FunctionVersion": client(endpoint).create_alias(
        FunctionName=name, Name=alias, FunctionVersion=version)["FunctionVersion"]})


def delete(endpoint, name):
    return call(lambda: client(endpoint).delete_function(FunctionName=name) and {"deleted": name})


def publish_layer(endpoint, name):
    return call(lambda: {"LayerVersionArn": client(endpoint).publish_layer_version(
        LayerName=name, Content={"ZipFile": package("layer")})["LayerVersionArn"]})


def list_layers(endpoint):
    return call(lambda: {"Layers": client(endpoint).list_layers()["Layers"]})


def create_with_layers(endpoint, name, layers):
    return call(lambda: pick(client(endpoint).create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
        Code={"ZipFile": package("layered")}, Layers=layers)))


def pick(configuration):
    return {k: configuration.get(k) for k in ("FunctionName", "RevisionId", "CodeSha256", "Description")}


def race_config(endpoints, name, revision_id):
    """UpdateFunctionConfiguration with the same RevisionId on each endpoint at once."""
    clients = [client(e) for e in endpoints]
    barrier = threading.Barrier(len(clients))
    results = [None] * len(clients)

    def one(i):
        barrier.wait()
        results[i] = call(lambda: pick(clients[i].update_function_configuration(
            FunctionName=name, Description=f"written through {endpoints[i]}", RevisionId=revision_id)))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def race_create(endpoints, name):
    """CreateFunction of one name on each endpoint at once, each with its own code."""
    barrier = threading.Barrier(len(endpoints))
    results = [None] * len(endpoints)

    def one(i):
        c = client(endpoints[i])
        zip_bytes = package(f"from {endpoints[i]}")
        barrier.wait()
        results[i] = call(lambda: pick(c.create_function(
            FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
            Code={"ZipFile": zip_bytes})))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(endpoints))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def visible_after_deploy(endpoints, runs, poll_timeout=10, change="create"):
    """Changes a function `runs` times, through each endpoint in turn, and after each polls
    GetFunctionConfiguration on every other endpoint until it reports the change: for each run,
    the seconds from the API's answer until each other endpoint's (None if not within
    `poll_timeout`). `change` is `create` (a new function with a new package, deleted before
    the next run) or `config` (UpdateFunctionConfiguration of one function: no package to
    fetch)."""
    polls = {e: client(e) for e in endpoints}
    for c in polls.values():
        call(lambda: c.get_function_configuration(FunctionName="warm-up-connection"))
    if change == "config":
        create(endpoints[0], "deploy-config", "config")
        time.sleep(1)
    results = []
    for run in range(runs):
        deployer = endpoints[run % len(endpoints)]
        watchers = [e for e in endpoints if e != deployer]
        if change == "config":
            name = "deploy-config"
            # Lambda refuses a change while the last one is in progress (409).
            settled(deployer, name)
            written = call(lambda: pick(polls[deployer].update_function_configuration(
                FunctionName=name, Description=f"run {run}")))
        else:
            name = f"deploy-{run}"
            written = create(deployer, name, f"run {run}")
        answered = time.perf_counter()
        answered_at = time.time()
        if "error" in written:
            return {"error": written}
        seen = {}

        def poll(w):
            while time.perf_counter() - answered < poll_timeout:
                try:
                    got = polls[w].get_function_configuration(FunctionName=name)
                except botocore.exceptions.ClientError:
                    continue
                if got["RevisionId"] == written["RevisionId"]:
                    seen[w] = time.perf_counter() - answered
                    return
        threads = [threading.Thread(target=poll, args=(w,)) for w in watchers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.append({"deployer": deployer, "name": name, "revision_id": written["RevisionId"],
                        "answered_at": answered_at,
                        "seconds": {w: seen.get(w) for w in watchers}})
        if change == "create":
            delete(deployer, name)
    return results


def settled(endpoint, name, timeout=120):
    """Waits until `name` is neither being created nor updated on `endpoint`'s node, as boto3's
    `function_updated_v2` waiter does: Lambda refuses a change meanwhile with 409."""
    lam = client(endpoint)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = lam.get_function_configuration(FunctionName=name)
        except lam.exceptions.ResourceNotFoundException:
            # Not on this node yet: the change that made it is still on its way from etcd.
            time.sleep(0.1)
            continue
        if c.get("State") != "Pending" and c.get("LastUpdateStatus") != "InProgress":
            return {"State": c.get("State"), "LastUpdateStatus": c.get("LastUpdateStatus")}
        time.sleep(0.1)
    return {"error": "Timeout", "message": f"{name} still changing after {timeout} s"}


def update_description(endpoint, name, description):
    return call(lambda: pick(client(endpoint).update_function_configuration(
        FunctionName=name, Description=description)))


def s3(endpoint, access_key, secret_key):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key)


def get_object(endpoint, access_key, secret_key, bucket, key):
    """An object's bytes, in hex."""
    return call(lambda: {"hex": s3(endpoint, access_key, secret_key).get_object(
        Bucket=bucket, Key=key)["Body"].read().hex()})


def put_object(endpoint, access_key, secret_key, bucket, key, body_hex):
    return call(lambda: s3(endpoint, access_key, secret_key).put_object(
        Bucket=bucket, Key=key, Body=bytes.fromhex(body_hex)) and {"put": key})


def list_objects(endpoint, access_key, secret_key, bucket, prefix=""):
    """Every object under `prefix`: {key: size}."""
    def run():
        pages = s3(endpoint, access_key, secret_key).get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}
    return call(run)


def create_source(endpoint, name, source, timeout=30, host_network=False):
    """A function whose app.py is `source` (with `host_network`, in its node's network namespace)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("app.py", source)
    tags = {"kiln:network": "host"} if host_network else {}
    return call(lambda: pick(client(endpoint).create_function(
        FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler", Timeout=timeout,
        Code={"ZipFile": buffer.getvalue()}, Tags=tags)))


def create_file(endpoint, name, runtime, handler, filename, source):
    """A function of any runtime whose package is one file."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(filename, source)
    return call(lambda: pick(client(endpoint).create_function(
        FunctionName=name, Runtime=runtime, Role=ROLE, Handler=handler, Code={"ZipFile": buffer.getvalue()})))


def send_events(endpoints, name, tokens, padding=0, extra=None):
    """One Event invocation per token (its payload `{"token", "padding", **extra}`), through the
    endpoints in turn: each one's HTTP status."""
    clients = [client(e) for e in endpoints]
    statuses = []
    for i, token in enumerate(tokens):
        payload = json.dumps({"token": token, "padding": "x" * padding, **(extra or {})}).encode()
        answer = call(lambda: clients[i % len(clients)].invoke(
            FunctionName=name, InvocationType="Event", Payload=payload))
        statuses.append(answer.get("StatusCode") if "error" not in answer else answer)
    return statuses


def send_events_parallel(endpoints, name, tokens, extra=None, threads=12):
    """send_events from `threads` threads, each through the endpoints in turn: the statuses that
    were not 202, and the seconds the sending took."""
    failures = []
    chunks = [tokens[i::threads] for i in range(threads)]
    started = time.perf_counter()

    def one(chunk):
        for status in send_events(endpoints, name, chunk, extra=extra):
            if status != 202:
                failures.append(status)
    workers = [threading.Thread(target=one, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {"failures": failures, "seconds": time.perf_counter() - started}


def invoke_payload(endpoint, name, payload):
    """Invoke with `payload` (JSON): the answer, the function error and the seconds it took."""
    def run():
        started = time.perf_counter()
        answer = client(endpoint).invoke(FunctionName=name, Payload=json.dumps(payload).encode())
        return {"payload": json.loads(answer["Payload"].read()), "functionError": answer.get("FunctionError"),
                "seconds": time.perf_counter() - started}
    return call(run)


def invoke_beside(busy_endpoint, endpoint, name, busy_seconds):
    """Keeps an instance busy with a `busy_seconds` invocation through `busy_endpoint`, and
    meanwhile invokes through `endpoint`: both answers."""
    results = {}
    slow = threading.Thread(target=lambda: results.setdefault(
        "busy", invoke_payload(busy_endpoint, name, {"sleep": busy_seconds})))
    slow.start()
    time.sleep(min(1.0, busy_seconds / 3))
    results["beside"] = invoke_payload(endpoint, name, {})
    slow.join()
    return results


OPS = {f.__name__: f for f in (create_fixed, update_fixed, list_objects, create_file, invoke_payload, invoke_beside, create_source, send_events, send_events_parallel, create, update_code, update_description, settled, get, invoke, delete, race_config,
                               race_create, visible_after_deploy, get_object, put_object, publish, create_alias,
                               publish_layer, list_layers, create_with_layers)}

if __name__ == "__main__":
    print(json.dumps(OPS[sys.argv[1]](**json.loads(sys.argv[2]))))
