"""The shared store's sweep (docs/cluster.md, "Removing unused objects"): packages no function
uses any more (replaced by UpdateFunctionCode, or their function deleted) go from the shared
store, a package another function still uses stays and still runs, the payload of a deleted
function's queued Event goes with it, and the payload of an Event queued for a live function
outlives sweeps until its Event has run.

The nodes sweep every second with a grace of 2 s (`--gc-interval 1 --gc-grace 2`); a failed
Event is retried after 6 s, so a payload waits in the queue through several sweeps."""

import base64
import hashlib
import json
import threading
import time

import pytest

from cluster_harness import Cluster
import lambda_ops

NODES = ("n1", "n2")
BOUND = 40
GC_ARGS = ["--gc-interval", "1", "--gc-grace", "2", "--async-retry-delay-ms", "6000"]
# Fails until `until` (seconds since the epoch), then reports its token to the marks server.
LATE_FUNCTION = """import time, urllib.request
def handler(event, context):
    if time.time() < event["until"]:
        raise Exception("not yet")
    urllib.request.urlopen(urllib.request.Request(event["url"], data=event["token"].encode()), timeout=30).read()
    return {}
"""


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=len(NODES), node_args=lambda name: GC_ARGS) as c:
        c.start_marks_server()
        yield c


def objects(cluster, prefix):
    key, secret = cluster.store_keys
    listed = cluster.lambda_op("list_objects", endpoint=cluster.store_endpoint, access_key=key, secret_key=secret,
                               bucket="kiln-system", prefix=prefix)
    assert "error" not in listed, listed
    return listed


def digest(configuration):
    return base64.b64decode(configuration["CodeSha256"]).hex()


def package_key(configuration):
    return f"sha256/{digest(configuration)}.zip"


def ok(result):
    assert "error" not in result, result
    return result



def etcd_keys(cluster, prefix):
    return cluster.etcdctl("get", "--prefix", "--keys-only", prefix).stdout.split()


def removed(cluster, kind):
    """kiln_cluster_gc_removed_objects_total{kind} summed over the nodes."""
    total = 0.0
    for node in NODES:
        for line in cluster.cli_metrics(node).splitlines():
            if line.startswith(f'kiln_cluster_gc_removed_objects_total{{kind="{kind}"}}'):
                total += float(line.split()[-1])
    return total


def test_unused_packages_and_dropped_payloads_go_live_ones_stay(cluster):
    # A package replaced twice, then its function deleted; the last one shared by a live function.
    first = ok(cluster.lambda_op("create_fixed", endpoint=cluster.endpoint("n1"), name="gc-a", marker="v1"))
    # Each change waits for the one before it, as Lambda asks (a 409 otherwise).
    ok(cluster.lambda_op("settled", endpoint=cluster.endpoint("n2"), name="gc-a"))
    second = ok(cluster.lambda_op("update_fixed", endpoint=cluster.endpoint("n2"), name="gc-a", marker="v2"))
    ok(cluster.lambda_op("settled", endpoint=cluster.endpoint("n1"), name="gc-a"))
    shared = ok(cluster.lambda_op("update_fixed", endpoint=cluster.endpoint("n1"), name="gc-a", marker="shared"))
    kept = ok(cluster.lambda_op("create_fixed", endpoint=cluster.endpoint("n2"), name="gc-b", marker="shared"))
    assert digest(kept) == digest(shared)
    assert len({digest(first), digest(second), digest(shared)}) == 3

    # Events with payloads too large for etcd (through the shared store): one for a function that
    # is deleted while its Event waits for a retry, one for a live function that fails once.
    for name in ("gc-doomed", "gc-late"):
        # Packages are kept by digest: the two must differ, or the live one's is the doomed
        # one's (zips made within one 2-second zip timestamp are byte for byte the same).
        source = LATE_FUNCTION + f"\n# {name}\n"
        ok(cluster.lambda_op("create_source", endpoint=cluster.endpoint("n1"), name=name, source=source,
                             host_network=True))
        for node in NODES:
            cluster.wait_for(lambda: "error" not in cluster.lambda_op("get", endpoint=cluster.endpoint(node),
                                                                      name=name), BOUND, what=f"{name} on {node}")
    doomed_code = package_key(cluster.lambda_op("get", endpoint=cluster.endpoint("n1"), name="gc-doomed"))
    late_code = package_key(cluster.lambda_op("get", endpoint=cluster.endpoint("n1"), name="gc-late"))
    extra = {"url": cluster.marks_url, "until": time.time() + 3600}
    assert cluster.lambda_op("send_events", endpoints=[cluster.endpoint("n1")], name="gc-doomed",
                             tokens=["doomed"], padding=20_000, extra=extra) == [202]
    extra = {"url": cluster.marks_url, "until": time.time() + 3}
    assert cluster.lambda_op("send_events", endpoints=[cluster.endpoint("n2")], name="gc-late",
                             tokens=["late"], padding=20_000, extra=extra) == [202]
    payloads = objects(cluster, "events/")
    assert len(payloads) == 2, payloads
    # Both failed their first attempt and wait in the queue for their retry.
    cluster.wait_for(lambda: all(b'"attempts":1' in cluster.etcdctl("get", "--prefix", f"/kiln/queue/{n}/")
                                 .stdout.encode() for n in ("gc-doomed", "gc-late")),
                     BOUND, what="both Events to wait for a retry")
    queued = cluster.etcdctl("get", "--prefix", "--print-value-only", "/kiln/queue/gc-late/").stdout
    late_payload = [json.loads(line)["payloadObject"] for line in queued.splitlines() if line.strip()]
    assert len(late_payload) == 1 and late_payload[0] in payloads, (queued, payloads)

    for name in ("gc-a", "gc-doomed"):
        assert ok(cluster.lambda_op("delete", endpoint=cluster.endpoint("n2"), name=name)) == {"deleted": name}

    live = {package_key(shared), late_code}
    gone = {package_key(first), package_key(second), doomed_code}
    assert not gone & live
    cluster.wait_for(lambda: set(objects(cluster, "sha256/")) == live, BOUND,
                     what="the unused packages to go from the shared store")
    # The deleted function's payload went with it; the live function's Event kept its own, and
    # ran once it could, after sweeps that found its payload older than the grace.
    cluster.wait_for(lambda: set(objects(cluster, "events/")) <= set(late_payload), BOUND,
                     what="the deleted function's payload to go")
    cluster.wait_for(lambda: "late" in cluster.marks(), BOUND, what="the live function's Event to run")
    assert "doomed" not in cluster.marks()
    cluster.wait_for(lambda: objects(cluster, "events/") == {}, BOUND, what="the delivered Event's payload to go")

    # The package gc-b shares with the deleted gc-a still runs, on every node.
    for node in NODES:
        cluster.wait_for(lambda: cluster.answer(node, "gc-b") == "shared", BOUND, what=f"gc-b on {node}")
    assert removed(cluster, "package") >= 3
    assert "removed from the shared store" in "".join(cluster.logs().values())
    # No upload record or sweep mark is left behind.
    assert etcd_keys(cluster, "/kiln/uploads/") == []
    assert etcd_keys(cluster, "/kiln/gc/") == []


def test_an_upload_record_keeps_its_package_and_a_sweep_mark_holds_an_upload(cluster):
    # A package no function uses stays while an upload of it is recorded.
    pinned = ok(cluster.lambda_op("create_fixed", endpoint=cluster.endpoint("n1"), name="gc-pinned", marker="pinned"))
    record = f"/kiln/uploads/{digest(pinned)}/elsewhere-1"
    cluster.etcdctl("put", record, "")
    ok(cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name="gc-pinned"))
    time.sleep(5)
    assert package_key(pinned) in objects(cluster, "sha256/")
    cluster.etcdctl("del", record)
    cluster.wait_for(lambda: package_key(pinned) not in objects(cluster, "sha256/"), BOUND,
                     what="the package to go once its upload record is gone")

    # While the sweep's mark of a package is there, a deployment of that package waits for it.
    marked = hashlib.sha256(lambda_ops.fixed_package("marked")).hexdigest()
    cluster.etcdctl("put", f"/kiln/gc/{marked}", "")
    created = {}
    deploy = threading.Thread(target=lambda: created.update(cluster.lambda_op(
        "create_fixed", endpoint=cluster.endpoint("n2"), name="gc-marked", marker="marked")))
    deploy.start()
    time.sleep(3)
    assert deploy.is_alive() and f"sha256/{marked}.zip" not in objects(cluster, "sha256/")
    cluster.etcdctl("del", f"/kiln/gc/{marked}")
    deploy.join(timeout=BOUND)
    assert digest(ok(created)) == marked
    assert f"sha256/{marked}.zip" in objects(cluster, "sha256/")
    for node in NODES:
        cluster.wait_for(lambda: cluster.answer(node, "gc-marked") == "marked", BOUND, what=f"gc-marked on {node}")
    assert f"sha256/{marked}.zip" in objects(cluster, "sha256/")
