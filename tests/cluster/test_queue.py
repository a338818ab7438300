"""The async queue in etcd: Events accepted through any node are delivered, spread over the nodes
(each delivers those it owns by rendezvous hashing), a payload too large for etcd travels
through the shared store, and when the elected scheduler is killed (`kill -9`) every
acknowledged Event is still delivered (the others own its events once it is gone, and the next
scheduler takes what waits too long).

Delivery is at least once: each check is that every acknowledged Event ran, within a bound."""

import pytest

from cluster_harness import MARKING_FUNCTION, Cluster

NODES = ("n1", "n2", "n3")
BOUND = 60
# Reports its token to the marks server in the client's namespace once it has run.
SOURCE = MARKING_FUNCTION


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as c:
        c.start_marks_server()
        yield c


def scheduler(cluster):
    """The node that leads the election (the oldest campaign key)."""
    out = cluster.etcdctl("get", "--prefix", "/kiln/scheduler", "--sort-by=CREATE", "--order=ASCEND",
                          "--print-value-only").stdout.split()
    return out[0] if out else None


def delivered(cluster):
    """Each token the functions reported, with how many times."""
    return cluster.marks()


def create(cluster, name):
    created = cluster.lambda_op("create_source", endpoint=cluster.endpoint("n1"), name=name, source=SOURCE,
                                host_network=True)
    assert "error" not in created, created
    for node in NODES:
        cluster.wait_for(lambda: "error" not in cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name),
                         BOUND, what=f"{name} on {node}")


def send(cluster, nodes, name, tokens, **args):
    extra = {"url": cluster.marks_url, **args.pop("extra", {})}
    statuses = cluster.lambda_op("send_events", endpoints=[cluster.endpoint(n) for n in nodes], name=name,
                                 tokens=tokens, extra=extra, **args)
    assert statuses == [202] * len(tokens), statuses


def test_events_accepted_on_every_node_are_delivered(cluster):
    name = "queued"
    create(cluster, name)
    cluster.wait_for(lambda: scheduler(cluster), BOUND, what="a scheduler")
    tokens = [f"t{i}" for i in range(30)]
    send(cluster, NODES, name, tokens)
    # Larger than etcd keeps inline: through the shared store.
    send(cluster, ["n2"], name, ["big"], padding=20_000)
    cluster.wait_for(lambda: set(tokens + ["big"]) <= set(delivered(cluster)), BOUND,
                     what="every event delivered")
    cluster.wait_for(lambda: cluster.etcdctl("get", "--prefix", "--keys-only", "/kiln/queue/").stdout.strip() == "",
                     BOUND, what="the queue to be empty")
    assert cluster.etcdctl("get", "--prefix", "--keys-only", "/kiln/claims/").stdout.strip() == ""
    # Spread over the nodes: 31 events owned by rendezvous hashing, none of three nodes left out
    # (the chance that one owns none is about 3 × (2/3)^31, 1e-5).
    delivering = [node for node in NODES if "Duration" in cluster.cli("logs", name, on=node).stdout]
    assert len(delivering) == len(NODES), delivering
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name=name)


def test_the_schedulers_death_loses_no_acknowledged_event(cluster):
    name = "survives"
    create(cluster, name)
    leader, _ = cluster.wait_for(lambda: scheduler(cluster), BOUND, what="a scheduler")
    others = [n for n in NODES if n != leader]
    tokens = [f"s{i}" for i in range(60)]
    # Each takes a while, so that the scheduler dies with deliveries in flight and events queued.
    send(cluster, others, name, tokens, extra={"sleep": 0.5})
    cluster.wait_for(lambda: any(t in delivered(cluster) for t in tokens), BOUND, what="the first deliveries")
    cluster.kill9(leader)
    try:
        assert not set(tokens) <= set(delivered(cluster)), "the test needs events left when the scheduler dies"
        cluster.wait_for(lambda: scheduler(cluster) in others, BOUND, what="another scheduler")
        cluster.wait_for(lambda: set(tokens) <= set(delivered(cluster)), BOUND,
                         what="every acknowledged event delivered")
    finally:
        cluster.start_node(leader)
    cluster.lambda_op("delete", endpoint=cluster.endpoint(others[0]), name=name)
