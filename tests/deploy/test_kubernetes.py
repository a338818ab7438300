"""The Kubernetes deployment (deploy/kubernetes, deploy/helm/kiln): `helm lint` and `helm template`
on the chart, then the rendered documents and the plain manifests parsed and checked for what
kiln's cluster mode needs (docs/cluster.md, "Kubernetes"). No Kubernetes cluster runs here: these
tests check what the manifests say, and that every kiln flag they use is one `kiln up` takes.

helm comes from scripts/setup-test-env.sh (in $KILN_TOOLS_DIR, by default ~/.cache/kiln-tools);
without it the chart's tests skip, except under CI=true, where they fail."""

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kiln_harness import KILN_BIN, ROOT, launch

PLAIN = ROOT / "deploy" / "kubernetes"
CHART = ROOT / "deploy" / "helm" / "kiln"
NAMESPACE = "kiln"


def tools_dir():
    """Where scripts/setup-test-env.sh installs helm."""
    if os.environ.get("KILN_TOOLS_DIR"):
        return Path(os.environ["KILN_TOOLS_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kiln-tools"


def helm_binary():
    for candidate in (os.environ.get("HELM"), tools_dir() / "bin" / "helm", shutil.which("helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    if os.environ.get("CI") == "true":
        pytest.fail(f"helm is missing: scripts/setup-test-env.sh installs it in {tools_dir() / 'bin'}")
    pytest.skip(f"helm is not installed (scripts/setup-test-env.sh installs it in {tools_dir() / 'bin'})")


def helm(*args, check=True):
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def render(*sets):
    args = ["template", "kiln", str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def plain_documents():
    docs = []
    for path in sorted(PLAIN.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture(scope="module", params=["plain", "chart"])
def docs(request):
    return plain_documents() if request.param == "plain" else render()


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def named(docs, kind, name):
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def kiln_daemonset(docs):
    (daemonset,) = of_kind(docs, "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return daemonset, container


def flags(args):
    """`--flag=value` and `--flag value` arguments as a dict (a flag without a value: True)."""
    out, i = {}, 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if "=" in arg:
                name, value = arg.split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                name, value = arg, args[i + 1]
                i += 1
            else:
                name, value = arg, True
            out[name] = value
        i += 1
    return out


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def kiln_containers(docs):
    """Every container that runs `kiln up`, with its parsed flags."""
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        for container in (spec or {}).get("containers", []):
            if container.get("command") == ["kiln"] and container["args"][0] == "up":
                yield doc, container, flags(container["args"][1:])


def host_path_mounts(pod_spec, container):
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
            for m in container["volumeMounts"] if "hostPath" in volumes[m["name"]]}


# -- the chart, through helm

def test_the_chart_passes_helm_lint():
    result = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_the_chart_sizes_etcd_and_needs_endpoints_of_what_it_does_not_run():
    five = render("etcd.replicas=5")
    etcd = next(s for s in of_kind(five, "StatefulSet") if s["metadata"]["name"].endswith("-etcd"))
    assert etcd["spec"]["replicas"] == 5
    cluster = next(f for _, _, f in kiln_containers(five) if "--cluster" in f)["--cluster"]
    assert len(cluster.split(",")) == 5
    assert named(five, "PodDisruptionBudget", "kiln-etcd")["spec"]["minAvailable"] == 3
    # Without its own etcd and store, the chart needs theirs.
    failed = helm("template", "kiln", str(CHART), "--set", "etcd.enabled=false", check=False)
    assert failed.returncode != 0 and "etcd.endpoints is needed" in failed.stderr
    outside = render("etcd.enabled=false", "etcd.endpoints={http://10.0.0.11:2379,http://10.0.0.12:2379}",
                     "store.enabled=false", "store.endpoint=http://s3.example:9000",
                     "store.existingSecret=store-keys")
    assert not [s for s in of_kind(outside, "StatefulSet")]
    (node,) = [f for _, _, f in kiln_containers(outside)]
    assert node["--cluster"] == "http://10.0.0.11:2379,http://10.0.0.12:2379"
    assert node["--s3-backend"] == "http://s3.example:9000"


def test_the_chart_reaches_an_etcd_of_your_own_over_tls_with_a_user():
    outside = ["etcd.enabled=false", "etcd.endpoints={https://10.0.0.11:2379,https://10.0.0.12:2379}"]
    docs = render(*outside, "etcd.tls.existingSecret=etcd-client-tls", "etcd.auth.user=kiln",
                  "etcd.auth.existingSecret=etcd-kiln")
    daemonset, container = kiln_daemonset(docs)
    node = flags(container["args"][1:])
    assert node["--cluster-ca"] == "/etc/kiln/etcd-tls/ca.crt"
    assert (node["--cluster-cert"], node["--cluster-key"]) == ("/etc/kiln/etcd-tls/tls.crt", "/etc/kiln/etcd-tls/tls.key")
    assert node["--cluster-user"] == "kiln"
    password = env_of(container)["KILN_CLUSTER_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "etcd-kiln", "key": "password"}
    pod = daemonset["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "etcd-tls"]
    assert volume["secret"]["secretName"] == "etcd-client-tls"
    assert {"name": "etcd-tls", "mountPath": "/etc/kiln/etcd-tls", "readOnly": True} in container["volumeMounts"]
    test_secrets_come_from_secrets_and_nothing_secret_is_in_plain_text(docs)
    test_every_kiln_flag_the_manifests_use_is_one_kiln_takes(docs)
    # Only the CA: no client certificate flags.
    ca_only = flags(kiln_daemonset(render(*outside, "etcd.tls.existingSecret=etcd-ca",
                                          "etcd.tls.clientCertificate=false"))[1]["args"][1:])
    assert "--cluster-ca" in ca_only and "--cluster-cert" not in ca_only and "--cluster-user" not in ca_only
    # The chart's own etcd serves http://, and a user needs its password's Secret.
    failed = helm("template", "kiln", str(CHART), "--set", "etcd.tls.existingSecret=etcd-ca", check=False)
    assert failed.returncode != 0 and "etcd of your own" in failed.stderr
    failed = helm("template", "kiln", str(CHART), "--set", "etcd.auth.user=kiln", check=False)
    assert failed.returncode != 0 and "etcd.auth.existingSecret" in failed.stderr


def test_the_charts_secrets_are_credentials_kiln_reads_and_appear_nowhere_else():
    docs = render()
    secrets = {s["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
               for s in of_kind(docs, "Secret")}
    admin = json.loads(secrets["kiln-credentials"]["credentials.json"])
    assert set(admin) == {"accessKeyId", "secretAccessKey", "region"}
    assert admin["accessKeyId"].startswith("AKIA") and len(admin["secretAccessKey"]) == 40
    store = secrets["kiln-store-credentials"]
    assert json.loads(store["credentials.json"])["accessKeyId"] == store["access-key"]
    assert json.loads(store["credentials.json"])["secretAccessKey"] == store["secret-key"]
    # Generated secrets differ from one installation to the next.
    again = {s["metadata"]["name"]: s["data"] for s in of_kind(render(), "Secret")}
    assert again["kiln-credentials"] != {k: base64.b64encode(v.encode()).decode()
                                         for k, v in secrets["kiln-credentials"].items()}
    others = yaml.safe_dump_all([d for d in docs if d["kind"] != "Secret"])
    for value in (admin["secretAccessKey"], store["secret-key"]):
        assert value not in others


def test_a_store_only_kiln_serves_with_the_charts_store_credentials(tmp_path):
    """The Secret's credentials.json, where the store's pod mounts it, is what a real
    `kiln up --store-only` signs with, and the nodes' access-key/secret-key are accepted by it."""
    import boto3
    from botocore.config import Config

    secret = next(s for s in of_kind(render(), "Secret") if s["metadata"]["name"] == "kiln-store-credentials")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    (tmp_path / "credentials.json").write_text(data["credentials.json"])
    proc, endpoint = launch([str(KILN_BIN), "up", "--store-only", "--data-dir", str(tmp_path),
                             "--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--no-aws-profile"],
                            r"object store on (http://\S+)", [])
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=data["access-key"], aws_secret_access_key=data["secret-key"],
                          config=Config(s3={"addressing_style": "path"}))
        s3.create_bucket(Bucket="kiln-system")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["kiln-system"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- the plain manifests and the chart's rendering alike

def test_kiln_runs_privileged_on_every_machine_with_its_data_dir_and_cgroups_from_the_host(docs):
    daemonset, container = kiln_daemonset(docs)
    pod = daemonset["spec"]["template"]["spec"]
    assert container["securityContext"]["privileged"] is True
    mounts = host_path_mounts(pod, container)
    data_dir = flags(container["args"][1:])["--data-dir"]
    assert mounts[data_dir] == data_dir
    assert mounts["/sys/fs/cgroup"] == "/sys/fs/cgroup"
    assert env_of(container)["KILN_DATA_DIR"]["value"] == data_dir


def test_a_node_advertises_its_pod_ip_and_is_named_after_its_machine(docs):
    _, container = kiln_daemonset(docs)
    env = env_of(container)
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    node = flags(container["args"][1:])
    assert node["--advertise"] == "$(POD_IP):9000"
    assert node["--peer-listen"].startswith("$(POD_IP):")
    assert node["--node-id"] == "$(NODE_NAME)"
    assert node["--listen"].endswith(":9000")
    ports = {p["containerPort"] for p in container["ports"]}
    assert {9000, int(node["--peer-listen"].rsplit(":", 1)[1])} <= ports


def test_a_stopping_node_is_drained_first_and_undrained_when_it_is_back(docs):
    daemonset, container = kiln_daemonset(docs)
    hooks = container["lifecycle"]
    assert hooks["preStop"]["exec"]["command"] == ["kiln", "cluster", "drain", "--self"]
    assert "kiln cluster undrain --self" in " ".join(hooks["postStart"]["exec"]["command"])
    # The hook reaches the node beside it, signed with the credentials in its data dir.
    assert env_of(container)["KILN_ENDPOINT"]["value"] == "http://127.0.0.1:9000"
    grace = int(flags(container["args"][1:])["--shutdown-grace"])
    assert daemonset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace


def test_etcd_is_three_members_behind_a_headless_service_with_pre_vote(docs):
    etcd = next(s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "kiln-etcd")
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["podManagementPolicy"] == "Parallel"
    peers = named(docs, "Service", etcd["spec"]["serviceName"])
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"] is True
    client = named(docs, "Service", "kiln-etcd")
    assert client["spec"].get("clusterIP") != "None"
    assert [p["port"] for p in client["spec"]["ports"]] == [2379]
    (container,) = etcd["spec"]["template"]["spec"]["containers"]
    args = flags(container["args"])
    assert args["--pre-vote"] == "true"
    assert re.search(r":v?3\.(5|[6-9])", container["image"]), container["image"]
    members = dict(m.split("=", 1) for m in args["--initial-cluster"].split(","))
    expected_host = rf"^http://kiln-etcd-\d\.{peers['metadata']['name']}\.[^.]+\.svc:2380$"
    assert sorted(members) == ["kiln-etcd-0", "kiln-etcd-1", "kiln-etcd-2"]
    assert all(re.match(expected_host, url) for url in members.values()), members
    assert etcd["spec"]["volumeClaimTemplates"]
    # kiln is given every member, by its stable name through the headless Service.
    _, kiln = kiln_daemonset(docs)
    endpoints = flags(kiln["args"][1:])["--cluster"].split(",")
    assert [e.replace(":2379", ":2380") for e in endpoints] == list(members.values())


def test_the_shared_store_is_a_store_only_kiln_with_a_volume_that_nodes_reach(docs):
    stores = [(d, c, f) for d, c, f in kiln_containers(docs) if f.get("--store-only")]
    assert len(stores) == 1
    store, container, store_flags = stores[0]
    assert store["kind"] == "StatefulSet" and store["spec"]["volumeClaimTemplates"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert store_flags["--data-dir"] in mounts
    assert f"{store_flags['--data-dir']}/credentials.json" in mounts
    port = int(store_flags["--s3-listen"].rsplit(":", 1)[1])
    service = named(docs, "Service", store["spec"]["serviceName"])
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    _, node = kiln_daemonset(docs)
    backend = flags(node["args"][1:])["--s3-backend"]
    assert re.match(rf"^http://{service['metadata']['name']}\.[^:]+:{port}$", backend), backend


def test_secrets_come_from_secrets_and_nothing_secret_is_in_plain_text(docs):
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        for container in (pod or {}).get("containers", []):
            for name, var in env_of(container).items():
                if re.search(r"SECRET|ACCESS_KEY|PASSWORD|TOKEN", name):
                    assert "secretKeyRef" in var.get("valueFrom", {}), f"{name} is not from a Secret"
            assert not any(re.search(r"secret|access-key|password", a, re.I) for a in container.get("args", []))
    for config_map in of_kind(docs, "ConfigMap"):
        text = json.dumps(config_map.get("data", {}))
        assert not re.search(r"AKIA[A-Z0-9]{16}|secretAccessKey|secret-key|password", text, re.I)
    # Every Secret a pod names, the deployment has (the chart) or the docs say how to make (plain).
    referenced = set()
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        for volume in (pod or {}).get("volumes", []):
            if "secret" in volume:
                referenced.add(volume["secret"]["secretName"])
        for container in (pod or {}).get("containers", []):
            for var in container.get("env", []):
                if "secretKeyRef" in var.get("valueFrom", {}):
                    referenced.add(var["valueFrom"]["secretKeyRef"]["name"])
    present = {s["metadata"]["name"] for s in of_kind(docs, "Secret")}
    docs_text = (ROOT / "docs" / "cluster.md").read_text()
    for name in referenced:
        assert name in present or f"create secret generic {name}" in docs_text, name


def test_every_kiln_flag_the_manifests_use_is_one_kiln_takes(docs):
    up_help = subprocess.run([str(KILN_BIN), "up", "--help"], capture_output=True, text=True, check=True).stdout
    known = set(re.findall(r"--[a-z0-9][a-z0-9-]*", up_help))
    used = set()
    for _, _, container_flags in kiln_containers(docs):
        used |= set(container_flags)
    assert used and used <= known, f"not flags of `kiln up`: {sorted(used - known)}"
    _, container = kiln_daemonset(docs)
    hooks = container["lifecycle"]
    for verb in ("drain", "undrain"):
        verb_help = subprocess.run([str(KILN_BIN), "cluster", verb, "--help"], capture_output=True, text=True,
                                   check=True).stdout
        assert "--self" in verb_help
    assert hooks["preStop"]["exec"]["command"][:3] == ["kiln", "cluster", "drain"]
