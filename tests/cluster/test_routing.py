"""Routing across nodes (cluster/router.rs, cluster/peer.rs), against a real 3-member etcd and two
real kiln nodes: an invocation entering a node with no idle instance goes to the node whose
instance is idle; a busy instance elsewhere is never waited for (the request runs here at once);
and a peer that died before it accepted costs nothing but the try (the request runs here).

Which instance answered is told by the function itself: an id drawn once per process."""

import json

import pytest

from cluster_harness import Cluster

# Seconds a change may take to reach a node (a watch, a package's download, a cold start).
BOUND = 30

SOURCE = """
import os, time, uuid
PID, ID = None, None

def handler(event, context):
    global PID, ID
    if PID != os.getpid():   # a fork of the function's snapshot is a process of its own
        PID, ID = os.getpid(), uuid.uuid4().hex
    time.sleep(event.get("sleep", 0))
    return {"instance": ID}
"""


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=2) as c:
        yield c


def metric(cluster, node, name, **labels):
    """The sum of a metric's samples on `node` whose labels include `labels`."""
    total = 0.0
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in cluster.cli_metrics(node).splitlines():
        if line.startswith(name) and line[len(name)] in " {" and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


def invoke(cluster, node, name, **payload):
    answer = cluster.lambda_op("invoke_payload", endpoint=cluster.endpoint(node), name=name, payload=payload)
    assert "error" not in answer and not answer["functionError"], answer
    return answer


def test_an_invocation_goes_to_the_node_with_an_idle_instance_and_never_waits_for_a_busy_one(cluster):
    name = "where"
    created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n2"), name=name, source=SOURCE)
    assert "error" not in created, created
    # Its first invocation, through n2, starts an instance on n2 (neither node has more free
    # memory than the other, so a cold start stays where it entered).
    cluster.wait_for(lambda: "error" not in cluster.lambda_op(
        "invoke_payload", endpoint=cluster.endpoint("n2"), name=name, payload={}), BOUND, what=f"{name} on n2")
    on_n2 = invoke(cluster, "n2", name)["payload"]["instance"]
    # n1 learns of n2's pool through its watch of pools/.
    cluster.wait_for(lambda: metric(cluster, "n1", "kiln_cluster_route_pools") >= 1, BOUND,
                     what="n1 to know n2's pool")
    before = metric(cluster, "n1", "kiln_cluster_routed_total", target="peer", reason="warm")
    served = [invoke(cluster, "n1", name)["payload"]["instance"] for _ in range(3)]
    assert served == [on_n2] * 3, (on_n2, served)
    assert metric(cluster, "n1", "kiln_cluster_routed_total", target="peer", reason="warm") == before + 3

    # n2's one instance busy for 4 s: n1 does not queue behind it but starts one of its own.
    both = cluster.lambda_op("invoke_beside", endpoint=cluster.endpoint("n1"),
                             busy_endpoint=cluster.endpoint("n2"), name=name, busy_seconds=4)
    assert both["busy"]["payload"]["instance"] == on_n2, both
    beside = both["beside"]
    assert "error" not in beside and beside["payload"]["instance"] != on_n2, both
    assert beside["seconds"] < 3.5, f"the request waited for the busy instance: {both}"


def test_a_draining_node_sends_new_starts_to_its_peers(cluster):
    name = "drained-start"
    created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n1"), name=name, source=SOURCE)
    assert "error" not in created, created
    cluster.cli("cluster", "drain", "n1", on="n2")
    try:
        cluster.wait_for(lambda: cluster.states("n1")["n1"] == "draining", BOUND, what="n1 draining")
        before = metric(cluster, "n1", "kiln_cluster_routed_total", target="peer", reason="cold")
        # n1 learns of its own drain from its record, twice a second.
        cluster.wait_for(lambda: "error" not in cluster.lambda_op(
            "invoke_payload", endpoint=cluster.endpoint("n1"), name=name, payload={}), BOUND, what=f"{name}")
        assert metric(cluster, "n1", "kiln_cluster_routed_total", target="peer", reason="cold") >= before + 1
        assert not any(i["function"] == name for i in node_instances(cluster, "n1")), "n1 started one"
    finally:
        cluster.cli("cluster", "undrain", "n1", on="n2")
        cluster.wait_for(lambda: cluster.states("n1")["n1"] == "up", BOUND, what="n1 up again")


def node_instances(cluster, node):
    return json.loads(cluster.cli("--json", "status", on=node).stdout)["node"]["instances"]


def test_a_peer_that_died_before_accepting_costs_only_the_try(cluster):
    name = "where-after"
    known = {n: metric(cluster, n, "kiln_cluster_route_pools") for n in ("n1", "n2")}
    created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n2"), name=name, source=SOURCE)
    assert "error" not in created, created
    cluster.wait_for(lambda: "error" not in cluster.lambda_op(
        "invoke_payload", endpoint=cluster.endpoint("n2"), name=name, payload={}), BOUND, what=f"{name} on n2")
    # Its one instance is where the cold start went: n2, or n1 if n1 had more free memory
    # (the earlier tests' instances are on n2).
    holder = next(n for n in ("n1", "n2") if any(i["function"] == name for i in node_instances(cluster, n)))
    other = "n1" if holder == "n2" else "n2"
    assert not any(i["function"] == name for i in node_instances(cluster, other))
    cluster.wait_for(lambda: metric(cluster, other, "kiln_cluster_route_pools") >= known[other] + 1, BOUND,
                     what=f"{other} to know {holder}'s pool")
    # The holder dies; the other still lists it (its lease has seconds to run) and its pool with it.
    cluster.kill9(holder)
    before = metric(cluster, other, "kiln_cluster_forward_errors_total", phase="before-accepted")
    answer = invoke(cluster, other, name)
    assert answer["payload"]["instance"], answer
    assert metric(cluster, other, "kiln_cluster_forward_errors_total", phase="before-accepted") >= before + 1
    assert metric(cluster, other, "kiln_cluster_forward_errors_total", phase="after-accepted") == 0
