"""Provisioned concurrency (Put/Get/Delete/ListProvisionedConcurrencyConfigs) with boto3 against
a real kiln: a version's or an alias's config keeps that many of its instances initialised
ahead of demand, reported as Lambda reports them, and goes with its version or alias."""

import base64
import concurrent.futures
import json

import pytest

from kiln_harness import snapshot_of, wait_for
from test_lambda_api import create, signed_request, unique


def ready(lam, name, qualifier, timeout=120):
    def done():
        config = lam.get_provisioned_concurrency_config(FunctionName=name, Qualifier=qualifier)
        return config if config["Status"] == "READY" else None
    return wait_for(done, timeout=timeout, interval=0.5, what=f"{name}:{qualifier} provisioned")


def test_a_versions_provisioned_instances_are_initialised_and_serve_a_burst(kiln):
    lam = kiln.client(read_timeout=120)
    name = unique("prov")
    create(kiln, name)
    kiln.settled(name)
    assert lam.publish_version(FunctionName=name)["Version"] == "1"
    put = lam.put_provisioned_concurrency_config(
        FunctionName=name, Qualifier="1", ProvisionedConcurrentExecutions=3)
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert put["RequestedProvisionedConcurrentExecutions"] == 3
    assert put["Status"] in ("IN_PROGRESS", "READY")
    config = ready(lam, name, "1")
    assert config["AllocatedProvisionedConcurrentExecutions"] == 3
    assert config["AvailableProvisionedConcurrentExecutions"] == 3
    # The node holds them made ahead of demand, whatever the version's own demand is.
    made = snapshot_of(kiln, f"{name}:1")
    assert made["standbys_target"] >= 3 and made["standbys_ready"] >= 2, made

    # A burst of three starts on them: none of its starts runs the function's init.
    def first(i):
        response = lam.invoke(FunctionName=name, Qualifier="1", Payload=json.dumps({"i": i}), LogType="Tail")
        assert "FunctionError" not in response
        return response
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(first, range(3)))
    # Each took a provisioned instance (hot), or one a request before it had just freed.
    reports = [base64.b64decode(a["LogResult"]).decode().splitlines()[-1] for a in answers]
    assert all("Start Path" not in r or r.endswith("Start Path: hot") for r in reports), reports
    # Taken or not, they stay allocated.
    assert lam.get_provisioned_concurrency_config(
        FunctionName=name, Qualifier="1")["AllocatedProvisionedConcurrentExecutions"] == 3

    listed = lam.list_provisioned_concurrency_configs(FunctionName=name)["ProvisionedConcurrencyConfigs"]
    assert [c["FunctionArn"].rsplit(":", 1)[1] for c in listed] == ["1"]
    assert listed[0]["RequestedProvisionedConcurrentExecutions"] == 3

    lam.delete_provisioned_concurrency_config(FunctionName=name, Qualifier="1")
    with pytest.raises(lam.exceptions.ProvisionedConcurrencyConfigNotFoundException):
        lam.get_provisioned_concurrency_config(FunctionName=name, Qualifier="1")
    assert lam.list_provisioned_concurrency_configs(FunctionName=name)["ProvisionedConcurrencyConfigs"] == []
    # Deleting it again is no error, as on Lambda.
    lam.delete_provisioned_concurrency_config(FunctionName=name, Qualifier="1")
    lam.delete_function(FunctionName=name)


def test_an_alias_config_goes_with_the_alias(kiln):
    lam = kiln.client()
    name = unique("provalias")
    create(kiln, name)
    kiln.settled(name)
    lam.publish_version(FunctionName=name)
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    lam.put_provisioned_concurrency_config(FunctionName=name, Qualifier="live", ProvisionedConcurrentExecutions=1)
    assert ready(lam, name, "live")["AllocatedProvisionedConcurrentExecutions"] == 1
    listed = lam.list_provisioned_concurrency_configs(FunctionName=name)["ProvisionedConcurrencyConfigs"]
    assert [c["FunctionArn"] for c in listed] == [f"arn:aws:lambda:us-east-1:000000000000:function:{name}:live"]
    lam.delete_alias(FunctionName=name, Name="live")
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion="1")
    with pytest.raises(lam.exceptions.ProvisionedConcurrencyConfigNotFoundException):
        lam.get_provisioned_concurrency_config(FunctionName=name, Qualifier="live")
    lam.delete_function(FunctionName=name)


def test_configs_lambda_refuses_are_refused(kiln):
    lam = kiln.client()
    name = unique("provbad")
    create(kiln, name)
    kiln.settled(name)
    lam.publish_version(FunctionName=name)
    lam.create_alias(FunctionName=name, Name="head", FunctionVersion="$LATEST")
    for qualifier in ("$LATEST", "head"):
        with pytest.raises(lam.exceptions.InvalidParameterValueException) as refused:
            lam.put_provisioned_concurrency_config(
                FunctionName=name, Qualifier=qualifier, ProvisionedConcurrentExecutions=1)
        assert "unpublished function versions" in str(refused.value)
    for qualifier in ("7", "nosuch"):
        with pytest.raises(lam.exceptions.ResourceNotFoundException):
            lam.put_provisioned_concurrency_config(
                FunctionName=name, Qualifier=qualifier, ProvisionedConcurrentExecutions=1)
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_provisioned_concurrency_config(FunctionName=unique("nosuchfn"), Qualifier="1")
    with pytest.raises(lam.exceptions.ProvisionedConcurrencyConfigNotFoundException):
        lam.get_provisioned_concurrency_config(FunctionName=name, Qualifier="1")
    # An ARN of another account names no function of this kiln.
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.get_provisioned_concurrency_config(
            FunctionName=f"arn:aws:lambda:us-east-1:111111111111:function:{name}", Qualifier="1")
    # More than the function's reserved concurrency.
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)
    with pytest.raises(lam.exceptions.InvalidParameterValueException) as refused:
        lam.put_provisioned_concurrency_config(FunctionName=name, Qualifier="1", ProvisionedConcurrentExecutions=3)
    assert "reservedConcurrentExecution" in str(refused.value)
    # Zero, below the model's minimum (sent raw: boto3 checks it before sending).
    response = signed_request(
        kiln, "PUT", f"/2019-09-30/functions/{name}/provisioned-concurrency?Qualifier=1",
        body=json.dumps({"ProvisionedConcurrentExecutions": 0}).encode())
    assert response.status_code == 400
    assert response.headers["x-amzn-ErrorType"].startswith("ValidationException")
    # A deleted version takes its config with it.
    lam.put_provisioned_concurrency_config(FunctionName=name, Qualifier="1", ProvisionedConcurrentExecutions=1)
    lam.delete_function(FunctionName=name, Qualifier="1")
    assert lam.list_provisioned_concurrency_configs(FunctionName=name)["ProvisionedConcurrencyConfigs"] == []
    lam.delete_function(FunctionName=name)
