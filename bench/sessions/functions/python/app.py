"""The XFaaS workloads (RO, RMW, RMW_Linear) over three state backends: kiln sessions, Redis, the object store.

The event names the backend, the workload, the value size and the client. The function times its own state
accesses (time.perf_counter_ns) and returns them, so that the benchmark sees the state access alone beside the
end-to-end latency. Clients are created lazily: warm-up invocations (an empty event) open no connection that a
snapshot's forks would share.
"""
import os
import time

BUCKET = "xfaas"
_clients = {}


def _redis():
    if "redis" not in _clients:
        import redis  # redis-py, the usual Python client
        _clients["redis"] = redis.Redis(host="127.0.0.1", port=int(os.environ["REDIS_PORT"]))
    return _clients["redis"]


def _s3():
    if "s3" not in _clients:
        import boto3  # endpoint and keys from the sandbox's environment (AWS_ENDPOINT_URL_S3, ...)
        _clients["s3"] = boto3.client("s3", region_name="us-east-1")
    return _clients["s3"]


def value_of(count, size):
    return count.to_bytes(8, "little") + b"v" * (size - 8)


def count_of(value):
    return int.from_bytes(value[:8], "little") if value else 0


class SessionBackend:
    def __init__(self, session):
        self.session = session

    def get(self, key):
        return self.session.get(key)

    def put(self, key, value):
        self.session.put(key, value)

    def rmw_linear(self, key, size):
        def increment(tx):
            count = count_of(tx.get(key)) + 1
            tx.put(key, value_of(count, size))
            return count
        return self.session.transact(increment), 0


class RedisBackend:
    def get(self, key):
        return _redis().get(key)

    def put(self, key, value):
        _redis().set(key, value)

    def rmw_linear(self, key, size):
        import redis
        retries = 0
        with _redis().pipeline() as pipe:  # WATCH / MULTI / EXEC: optimistic, linearizable
            while True:
                try:
                    pipe.watch(key)
                    count = count_of(pipe.get(key)) + 1
                    pipe.multi()
                    pipe.set(key, value_of(count, size))
                    pipe.execute()
                    return count, retries
                except redis.WatchError:
                    retries += 1


class S3Backend:
    def get(self, key):
        try:
            return _s3().get_object(Bucket=BUCKET, Key=key)["Body"].read()
        except _s3().exceptions.NoSuchKey:
            return None

    def put(self, key, value):
        _s3().put_object(Bucket=BUCKET, Key=key, Body=value)

    def rmw_linear(self, key, size):
        import botocore.exceptions
        retries = 0
        while True:  # a conditional write on the ETag read: linearizable
            try:
                got = _s3().get_object(Bucket=BUCKET, Key=key)
                value, condition = got["Body"].read(), {"IfMatch": got["ETag"]}
            except _s3().exceptions.NoSuchKey:
                value, condition = None, {"IfNoneMatch": "*"}
            count = count_of(value) + 1
            try:
                _s3().put_object(Bucket=BUCKET, Key=key, Body=value_of(count, size), **condition)
                return count, retries
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise
                retries += 1


def handler(event, context):
    backend = event.get("backend")
    if backend is None:
        return {}
    store = {"session": lambda: SessionBackend(context.session), "redis": RedisBackend,
             "s3": S3Backend}[backend]()
    workload, size = event["workload"], int(event["size"])
    key = f"{workload}-{size}-" + ("shared" if workload == "rmw_linear" else str(event["client"]))
    clock = time.perf_counter_ns
    if workload == "ro":
        t0 = clock()
        value = store.get(key)
        t1 = clock()
        if value is None:  # the first request of a client seeds its key
            store.put(key, value_of(0, size))
        return {"get_ns": t1 - t0}
    if workload == "rmw":
        t0 = clock()
        value = store.get(key)
        t1 = clock()
        value = value_of(count_of(value) + 1, size)  # the function's own work, not timed
        t2 = clock()
        store.put(key, value)
        t3 = clock()
        return {"get_ns": t1 - t0, "put_ns": t3 - t2, "op_ns": t1 - t0 + t3 - t2}
    if workload == "rmw_linear":
        t0 = clock()
        count, retries = store.rmw_linear(key, size)
        return {"op_ns": clock() - t0, "retries": retries, "count": count}
    raise ValueError(f"unknown workload {workload}")
