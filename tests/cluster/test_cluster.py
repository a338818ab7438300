"""Cluster mode's membership against a real 3-member etcd and real kiln nodes, each in a network
namespace of its own (tests/cluster_harness.py): join, one set of credentials, drain, death by
kill -9, fencing under a partition, and an etcd leader's death.

The tests share one cluster; each leaves it as it found it (3 nodes up), the etcd leader's kill
last."""

import json
import subprocess
import time

import pytest

from cluster_harness import Cluster

# The default lease: an etcd election (≈1.6 s here) must fit inside its fencing margin.
TTL = 5
NODES = ("n1", "n2", "n3")


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, lease_ttl=TTL) as c:
        yield c


def all_up(cluster, on):
    return cluster.states(on) == {n: "up" for n in NODES}


def test_nodes_see_each_other_from_any_node(cluster):
    for node in NODES:
        cluster.wait_for(lambda: all_up(cluster, node), 10, what=f"every node up as {node} sees it")
    status = cluster.status("n2")
    assert status["nodeId"] == "n2" and not status["fenced"]
    assert [n["id"] for n in status["nodes"] if n["thisNode"]] == ["n2"]
    n3 = next(n for n in status["nodes"] if n["id"] == "n3")
    assert n3["api"] == f"{cluster.ip('n3')}:9000" and n3["peer"] == f"{cluster.ip('n3')}:9100"
    assert all(e["healthy"] for e in status["etcd"]) and len(status["etcd"]) == 3
    text = cluster.cli("cluster", "status", on="n3").stdout
    assert "this node: n3 " in text
    for node in NODES:
        assert any(line.split()[:2] in ([node, "up"], [node + "*", "up"]) for line in text.splitlines()), text
    # The record in etcd, as the docs describe it, on a lease.
    record = cluster.etcdctl("get", "/kiln/nodes/n1", "-w", "json").stdout
    kv = json.loads(record)["kvs"][0]
    assert kv["lease"] != 0


def test_the_clusters_credentials_work_on_every_node_and_stay_out_of_etcd(cluster):
    key, secret = cluster.credentials()
    for node in NODES:
        assert cluster.cli("ls", on=node).returncode == 0
        stored = json.loads((cluster.dir / node / "credentials.json").read_text())
        assert (stored["accessKeyId"], stored["secretAccessKey"]) == (key, secret)
        refused = cluster.cli("ls", on=node, check=False, credentials=(key, "x" * 40))
        assert refused.returncode != 0 and "signature" in (refused.stderr + refused.stdout).lower()
    everything = cluster.etcdctl("get", "--prefix", "/kiln").stdout
    assert key in everything and secret not in everything


def test_a_node_given_other_credentials_is_refused(cluster, tmp_path):
    other = tmp_path / "credentials.json"
    other.write_text(json.dumps({"accessKeyId": "AKIAOTHEROTHEROTHER1", "secretAccessKey": "s" * 40,
                                 "region": "us-east-1"}))
    args = cluster.node_args("n1")
    args[args.index("--credentials-file") + 1] = str(other)
    args[args.index("--node-id") + 1] = "intruder"
    args[args.index("--data-dir") + 1] = str(tmp_path / "data")
    env = {"KILN_S3_BACKEND_ACCESS_KEY": cluster.store_keys[0], "KILN_S3_BACKEND_SECRET_KEY": cluster.store_keys[1]}
    result = subprocess.run(cluster.enter("n1") + args, capture_output=True, text=True, timeout=30,
                            env={**__import__("os").environ, **env})
    assert result.returncode != 0
    assert "not this cluster's" in result.stderr, result.stderr


def test_cluster_mode_without_a_shared_store_is_refused(cluster):
    args = cluster.node_args("n1")
    cut = args.index("--s3-backend")
    del args[cut:cut + 2]
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--cluster needs --s3-backend" in result.stderr


def test_drain_and_undrain_are_seen_by_every_node(cluster):
    cluster.cli("cluster", "drain", "n2", on="n1")
    for node in NODES:
        cluster.wait_for(lambda: cluster.states(node)["n2"] == "draining", 5, what=f"{node} to see n2 draining")
    cluster.cli("cluster", "undrain", "n2", on="n3")
    for node in NODES:
        cluster.wait_for(lambda: all_up(cluster, node), 5, what=f"{node} to see n2 up again")
    missing = cluster.cli("cluster", "drain", "nobody", on="n1", check=False)
    assert missing.returncode != 0 and "no node `nobody`" in missing.stderr


def test_drain_self_drains_the_node_the_cli_talks_to(cluster):
    # As a Kubernetes preStop hook runs it: beside the node, knowing its address but not its id.
    drained = cluster.cli("cluster", "drain", "--self", on="n3", via="n3")
    assert "node n3 takes no new placements" in drained.stdout
    for node in NODES:
        cluster.wait_for(lambda: cluster.states(node) == {"n1": "up", "n2": "up", "n3": "draining"}, 5,
                         what=f"{node} to see n3, and only n3, draining")
    undrained = cluster.cli("--json", "cluster", "undrain", "--self", on="n3", via="n3")
    assert json.loads(undrained.stdout) == {"node": "n3", "draining": False}
    for node in NODES:
        cluster.wait_for(lambda: all_up(cluster, node), 5, what=f"{node} to see n3 up again")
    both = cluster.cli("cluster", "drain", "n2", "--self", on="n1", check=False)
    assert both.returncode != 0 and "cannot be used with" in both.stderr
    assert all_up(cluster, "n1")


def test_a_killed_node_is_seen_gone_within_its_lease(cluster):
    cluster.kill9("n3")
    # Not declared dead at once: its lease (renewed every second at TTL 5) still holds for most of a TTL.
    assert cluster.states("n1")["n3"] == "up"
    # Gone once the lease expires (the wait's bound: a TTL and etcd's expiry checks).
    for node in ("n1", "n2"):
        cluster.wait_for(lambda: cluster.states(node)["n3"] == "gone", TTL + 3, what=f"{node} to see n3 gone")
    cluster.start_node("n3")
    for node in NODES:
        cluster.wait_for(lambda: all_up(cluster, node), 10, what=f"{node} to see n3 back")


def test_a_partitioned_node_fences_itself_and_rejoins_with_a_new_lease(cluster):
    before = cluster.status("n2", via="n2")["lease"]
    cluster.partition("n2")
    try:
        # The node's own view, from inside its namespace (its link is down, its address is not).
        cluster.wait_for(lambda: cluster.status("n2", via="n2")["fenced"], TTL + 2,
                         what="n2 to report itself fenced")
        assert cluster.states("n2", via="n2")["n2"] == "fenced"
        metrics = cluster.cli_metrics("n2", via="n2")
        assert "kiln_cluster_fenced 1" in metrics
        cluster.wait_for(lambda: cluster.states("n1")["n2"] == "gone", TTL + 4, what="n1 to see n2 gone")
    finally:
        cluster.heal("n2")
    status, _ = cluster.wait_for(
        lambda: (lambda s: s if not s["fenced"] else None)(cluster.status("n2", via="n2")), 10,
        what="n2 to take a new lease")
    assert status["lease"] != before
    cluster.wait_for(lambda: all_up(cluster, "n1"), 10, what="n1 to see n2 back")
    n2 = next(n for n in cluster.status("n1")["nodes"] if n["id"] == "n2")
    assert n2["lease"] == status["lease"]
    assert "kiln_cluster_fenced 0" in cluster.cli_metrics("n2", via="n2")


def test_membership_survives_the_etcd_leaders_death(cluster):
    leader = cluster.etcd_leader()
    leases = {n["id"]: n["lease"] for n in cluster.status("n1")["nodes"]}
    cluster.kill9(leader)
    try:
        # A lease period and more: every node stays up, with the same lease, as every node
        # sees it, and status answers throughout.
        deadline = time.time() + TTL + 2
        while time.time() < deadline:
            for node in NODES:
                status = cluster.status(node)
                assert {n["id"]: n["state"] for n in status["nodes"]} == {n: "up" for n in NODES}, status
                assert not status["fenced"], status
            time.sleep(0.2)
        assert {n["id"]: n["lease"] for n in cluster.status("n1")["nodes"]} == leases
        assert cluster.etcd_leader() != leader
    finally:
        cluster._start_etcd(leader)
    cluster.wait_etcd()


def test_a_single_node_says_it_is_not_in_cluster_mode(fresh_kiln):
    server = fresh_kiln()
    result = server.cli("cluster", "status", check=False)
    assert result.returncode != 0
    assert "not in cluster mode" in result.stderr
    assert "kiln_cluster_" not in server.signed_request("GET", "/metrics").text
