"""The registry in etcd and code by digest, against a real 3-member etcd, real kiln nodes and a
store-only kiln as the shared store (tests/cluster_harness.py): a function deployed through one
node runs on every node, updates and deletes reach every node, RevisionId and name races
between nodes have exactly one winner, and a node that starts later loads the registry and
fetches the packages it lacks.

Changes reach other nodes through a watch, so each check waits (within a bound) for the node to
see them; none asserts how long that took (bench/cluster/deploy.py measures it)."""

import base64
import hashlib

import pytest

from cluster_harness import Cluster
import lambda_ops

NODES = ("n1", "n2", "n3")
# Seconds a change may take to reach a node: the watch, the package's download, a cold start.
BOUND = 30


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as c:
        yield c



def store_op(cluster, op, **args):
    """An S3 call on the shared store's package bucket, with the store's own credentials."""
    key, secret = cluster.store_keys
    return cluster.lambda_op(op, endpoint=cluster.store_endpoint, access_key=key, secret_key=secret,
                             bucket="kiln-system", **args)


def test_a_function_deployed_on_one_node_runs_updated_and_goes_everywhere(cluster):
    name = "everywhere"
    created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="v1")
    assert "error" not in created, created
    for node in ("n2", "n3"):
        cluster.wait_for(lambda: cluster.answer(node, name) == "v1", BOUND, what=f"{name} v1 on {node}")
        seen = cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name)
        assert (seen["CodeSha256"], seen["RevisionId"]) == (created["CodeSha256"], created["RevisionId"])

    updated = cluster.lambda_op("update_code", endpoint=cluster.endpoint("n2"), name=name, marker="v2")
    assert "error" not in updated and updated["CodeSha256"] != created["CodeSha256"], updated
    for node in NODES:
        cluster.wait_for(lambda: cluster.answer(node, name) == "v2", BOUND, what=f"{name} v2 on {node}")

    # The package is in the shared store under its digest, and the registry under the prefix.
    digest = base64.b64decode(updated["CodeSha256"]).hex()
    stored = store_op(cluster, "get_object", key=f"sha256/{digest}.zip")
    assert hashlib.sha256(bytes.fromhex(stored["hex"])).hexdigest() == digest
    # n1 fetched v2's package: one fetch (at least) in its metrics.
    fetches = [line for line in cluster.cli_metrics("n1").splitlines()
               if line.startswith("kiln_cluster_code_fetch_seconds_count")]
    assert fetches and float(fetches[0].split()[-1]) >= 1, fetches
    listed = cluster.etcdctl("get", "--prefix", "--keys-only", "/kiln/functions/").stdout
    assert f"/kiln/functions/{name}" in listed

    deleted = cluster.lambda_op("delete", endpoint=cluster.endpoint("n3"), name=name)
    assert deleted == {"deleted": name}, deleted
    for node in NODES:
        cluster.wait_for(
            lambda: cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name).get("error")
            == "ResourceNotFoundException", BOUND, what=f"{name} gone on {node}")
    assert f"/kiln/functions/{name}" not in cluster.etcdctl("get", "--prefix", "--keys-only", "/kiln/").stdout


def test_versions_and_aliases_reach_every_node(cluster):
    name = "versioned"
    assert "error" not in cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="v1")
    assert "error" not in cluster.lambda_op("settled", endpoint=cluster.endpoint("n1"), name=name)
    assert cluster.lambda_op("publish", endpoint=cluster.endpoint("n1"), name=name) == {"Version": "1"}
    assert "error" not in cluster.lambda_op("update_code", endpoint=cluster.endpoint("n1"), name=name, marker="v2")
    cluster.wait_for(lambda: cluster.answer("n2", f"{name}:1") == "v1", BOUND, what=f"{name}:1 on n2")
    created = cluster.lambda_op("create_alias", endpoint=cluster.endpoint("n2"), name=name, alias="live", version="1")
    assert created == {"FunctionVersion": "1"}, created
    # The alias runs version 1's code and $LATEST its own, on a node that made neither.
    cluster.wait_for(lambda: cluster.answer("n3", f"{name}:live") == "v1", BOUND, what=f"{name}:live on n3")
    cluster.wait_for(lambda: cluster.answer("n3", name) == "v2", BOUND, what=f"{name} v2 on n3")


def test_a_revision_id_race_between_two_nodes_has_one_winner(cluster):
    name = "raced"
    created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="r")
    assert "error" not in created, created
    for node in ("n2", "n3"):
        cluster.wait_for(lambda: "error" not in cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name),
                         BOUND, what=f"{name} on {node}")
    for round_number in range(5):
        revision = cluster.lambda_op("get", endpoint=cluster.endpoint("n1"), name=name)["RevisionId"]
        # Both nodes must know this revision, or one refuses from its own stale copy and the
        # race would not be one.
        for node in ("n2", "n3"):
            cluster.wait_for(
                lambda: cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name)["RevisionId"] == revision,
                BOUND, what=f"{node} at the revision of round {round_number}")
            # Nor may either refuse it as a change while the last one is in progress (409).
            assert "error" not in cluster.lambda_op("settled", endpoint=cluster.endpoint(node), name=name)
        results = cluster.lambda_op("race_config", endpoints=[cluster.endpoint("n2"), cluster.endpoint("n3")],
                                    name=name, revision_id=revision)
        winners = [r for r in results if "error" not in r]
        losers = [r for r in results if "error" in r]
        assert len(winners) == 1, results
        assert losers[0]["error"] == "PreconditionFailedException", results
        # Every node ends up with the winner's write.
        for node in NODES:
            cluster.wait_for(
                lambda: cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name)["RevisionId"]
                == winners[0]["RevisionId"], BOUND, what=f"{node} to hold the winner's revision")
        assert winners[0]["Description"].startswith("written through")
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name=name)


def test_one_name_created_on_two_nodes_at_once_is_created_once(cluster):
    name = "twice"
    results = cluster.lambda_op("race_create", endpoints=[cluster.endpoint("n1"), cluster.endpoint("n2")], name=name)
    winners = [r for r in results if "error" not in r]
    assert len(winners) == 1, results
    assert [r["error"] for r in results if "error" in r] == ["ResourceConflictException"], results
    # Every node, the loser's included, runs the winner's code.
    for node in NODES:
        cluster.wait_for(
            lambda: cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name).get("CodeSha256")
            == winners[0]["CodeSha256"], BOUND, what=f"{node} to hold the winner's function")
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n2"), name=name)


def test_a_node_started_later_loads_the_registry_and_fetches_the_code(cluster):
    name = "while-away"
    cluster.stop("n3")
    try:
        created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="later")
        assert "error" not in created, created
    finally:
        cluster.start_node("n3")
    # Loaded at start, not through the watch: GetFunction answers at once.
    seen = cluster.lambda_op("get", endpoint=cluster.endpoint("n3"), name=name)
    assert seen.get("CodeSha256") == created["CodeSha256"], seen
    cluster.wait_for(lambda: cluster.answer("n3", name) == "later", BOUND, what=f"{name} on n3")
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name=name)


def test_a_package_that_does_not_match_its_digest_is_refused(cluster):
    name = "tampered"
    cluster.stop("n3")
    try:
        created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="real")
        assert "error" not in created, created
        key = f"sha256/{base64.b64decode(created['CodeSha256']).hex()}.zip"
        real = store_op(cluster, "get_object", key=key)["hex"]
        # Another valid package under this one's name: only the digest tells them apart.
        other = lambda_ops.package("not the real one").hex()
        assert store_op(cluster, "put_object", key=key, body_hex=other) == {"put": key}
    finally:
        cluster.start_node("n3")
    # n3 loaded the function, fetched something else under its digest and refused it.
    assert cluster.lambda_op("get", endpoint=cluster.endpoint("n3"), name=name).get("error") == \
        "ResourceNotFoundException"
    assert "has SHA-256" in cluster.logs()["n3"]
    # The real package back: n3, trying again by itself, fetches it and serves the function.
    store_op(cluster, "put_object", key=key, body_hex=real)
    cluster.wait_for(lambda: cluster.answer("n3", name) == "real", BOUND, what=f"{name} on n3")
    seen = cluster.lambda_op("get", endpoint=cluster.endpoint("n3"), name=name)
    assert seen["RevisionId"] == created["RevisionId"]
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name=name)


def test_without_an_etcd_quorum_changes_are_refused_and_invokes_go_on(cluster):
    name = "quorum"
    created = cluster.lambda_op("create", endpoint=cluster.endpoint("n1"), name=name, marker="q")
    assert "error" not in created, created
    cluster.wait_for(lambda: cluster.answer("n2", name) == "q", BOUND, what=f"{name} on n2")
    down = [m for m in ("e1", "e2", "e3") if m != cluster.etcd_leader()]
    for member in down:
        cluster.kill9(member)
    try:
        refused = cluster.lambda_op("update_description", endpoint=cluster.endpoint("n2"), name=name,
                                    description="without a quorum")
        assert refused.get("error") == "ServiceException", refused
        assert "the change was not made" in refused["message"], refused
        # Reads and invocations come from the node's own copy.
        assert cluster.answer("n2", name) == "q"
        assert cluster.answer("n3", name) == "q"
        assert cluster.lambda_op("get", endpoint=cluster.endpoint("n1"), name=name)["RevisionId"] == \
            created["RevisionId"]
    finally:
        for member in down:
            cluster._start_etcd(member)
        cluster.wait_etcd()
    # The quorum is back: changes are accepted again and reach every node.
    changed, _ = cluster.wait_for(
        lambda: (lambda r: r if "error" not in r else None)(
            cluster.lambda_op("update_description", endpoint=cluster.endpoint("n2"), name=name,
                              description="with a quorum")), BOUND, what="a change to be accepted again")
    for node in NODES:
        cluster.wait_for(
            lambda: cluster.lambda_op("get", endpoint=cluster.endpoint(node), name=name)["RevisionId"]
            == changed["RevisionId"], BOUND, what=f"{node} to see the change after the quorum returned")
    cluster.lambda_op("delete", endpoint=cluster.endpoint("n1"), name=name)
