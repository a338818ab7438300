"""Layers in cluster mode: not served yet (they are kept in a single node's database), so every
layer call and a function with Layers are refused with a clear error, and functions without
layers are unaffected."""

import pytest

from cluster_harness import Cluster


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=1) as c:
        yield c


def refused(result):
    return result.get("error") == "InvalidParameterValueException" and "cluster mode" in result["message"]


def test_layers_are_refused_in_cluster_mode(cluster):
    endpoint = cluster.endpoint("n1")
    published = cluster.lambda_op("publish_layer", endpoint=endpoint, name="shared")
    assert refused(published), published
    listed = cluster.lambda_op("list_layers", endpoint=endpoint)
    assert refused(listed), listed
    arn = "arn:aws:lambda:us-east-1:000000000000:layer:shared:1"
    created = cluster.lambda_op("create_with_layers", endpoint=endpoint, name="layered", layers=[arn])
    assert refused(created), created
    plain = cluster.lambda_op("create_with_layers", endpoint=endpoint, name="plain", layers=[])
    assert "error" not in plain, plain
