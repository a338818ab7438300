"""Lambda layers: PublishLayerVersion, GetLayerVersion(ByArn), ListLayers, ListLayerVersions,
DeleteLayerVersion, and functions that run with their layers at /opt; with boto3 and the AWS
CLI, against a real kiln."""

import base64
import hashlib
import io
import json
import zipfile

import botocore.exceptions
import pytest
import requests

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME, start_path, wait_ready, wait_standby
from test_auth import aws
from test_lambda_api import ROLE, create, error_code, http_status, invoke, unique


def layer_zip(files):
    """Zip {name: text}; names under bin/ are executable."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name.startswith("bin/") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, content)
    return buf.getvalue()


def publish(kiln, name, files, **extra):
    return kiln.client().publish_layer_version(LayerName=name, Content={"ZipFile": layer_zip(files)}, **extra)


def run(kiln, name, event=None):
    result, response = invoke(kiln, name, event)
    assert "FunctionError" not in response, result
    return result


def wait_updated(kiln, name):
    kiln.client().get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig={"Delay": 1})


PY_READER = """
import importlib, sys

def handler(event, context):
    out = {"path": sys.path[:4]}
    for name in event.get("modules", []):
        module = importlib.import_module(name)
        out[name] = module.VALUE
    return out
"""


def python_function(kiln, layers, prefix="layerpy"):
    name = unique(prefix)
    create(kiln, name, files={"app.py": PY_READER}, Layers=layers)
    return name


def test_a_python_function_imports_its_layers_modules(kiln):
    layer = publish(kiln, unique("pylib"), {
        "python/layermod.py": "VALUE = 'from python/'\n",
        f"python/lib/{PYTHON_RUNTIME}/site-packages/sitemod.py": "VALUE = 'from site-packages'\n",
    }, CompatibleRuntimes=[PYTHON_RUNTIME])
    name = python_function(kiln, [layer["LayerVersionArn"]])
    out = run(kiln, name, {"modules": ["layermod", "sitemod"]})
    assert out["layermod"] == "from python/"
    assert out["sitemod"] == "from site-packages"
    # Lambda's order: the function's own code, then its layers.
    assert out["path"][:3] == ["/var/task", f"/opt/python/lib/{PYTHON_RUNTIME}/site-packages", "/opt/python"]


def test_a_later_layer_overrides_an_earlier_ones_files(kiln):
    first = publish(kiln, unique("first"), {
        "python/shared.py": "VALUE = 'first'\n",
        "python/only_first.py": "VALUE = 'only first'\n",
    })
    second = publish(kiln, unique("second"), {"python/shared.py": "VALUE = 'second'\n"})
    name = python_function(kiln, [first["LayerVersionArn"], second["LayerVersionArn"]])
    out = run(kiln, name, {"modules": ["shared", "only_first"]})
    assert out["shared"] == "second"
    assert out["only_first"] == "only first"
    # A new order is a new revision: new instances see the other file on top.
    lam = kiln.client()
    before = lam.get_function_configuration(FunctionName=name)["RevisionId"]
    updated = lam.update_function_configuration(
        FunctionName=name, Layers=[second["LayerVersionArn"], first["LayerVersionArn"]])
    assert updated["RevisionId"] != before
    assert [layer["Arn"] for layer in updated["Layers"]] == [second["LayerVersionArn"], first["LayerVersionArn"]]
    wait_updated(kiln, name)
    assert run(kiln, name, {"modules": ["shared"]})["shared"] == "first"
    # And an empty list takes them all away.
    updated = lam.update_function_configuration(FunctionName=name, Layers=[])
    assert "Layers" not in updated
    wait_updated(kiln, name)
    result, response = invoke(kiln, name, {"modules": ["shared"]})
    assert response.get("FunctionError") == "Unhandled"
    assert result["errorType"] == "ModuleNotFoundError", result


NODE_READER = """
exports.handler = async () => {
  const lib = require('layerlib');
  return { value: lib.value, resolved: require.resolve('layerlib') };
};
"""


def test_a_node_function_requires_a_module_of_its_layer(kiln):
    layer = publish(kiln, unique("nodelib"), {
        "nodejs/node_modules/layerlib/index.js": "exports.value = 'node layer';\n",
    }, CompatibleRuntimes=[NODE_RUNTIME])
    name = unique("layernode")
    create(kiln, name, files={"index.js": NODE_READER}, runtime=NODE_RUNTIME, handler="index.handler",
           Layers=[layer["LayerVersionArn"]])
    out = run(kiln, name)
    assert out == {"value": "node layer", "resolved": "/opt/nodejs/node_modules/layerlib/index.js"}
    # The directory of the function's Node version comes first, as on Lambda.
    major = NODE_RUNTIME.removeprefix("nodejs").removesuffix(".x")
    versioned = publish(kiln, unique("nodever"), {
        f"nodejs/node{major}/node_modules/layerlib/index.js": "exports.value = 'versioned';\n",
    })
    kiln.client().update_function_configuration(
        FunctionName=name, Layers=[layer["LayerVersionArn"], versioned["LayerVersionArn"]])
    wait_updated(kiln, name)
    assert run(kiln, name)["value"] == "versioned"


PROVIDED_BOOTSTRAP = """#!/usr/bin/python3
import json, os, subprocess, urllib.request

API = "http://" + os.environ["AWS_LAMBDA_RUNTIME_API"] + "/2018-06-01/runtime/invocation/"

def write_opt():
    try:
        with open("/opt/bin/planted", "w") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return e.strerror

while True:
    with urllib.request.urlopen(API + "next") as r:
        request_id = r.headers["Lambda-Runtime-Aws-Request-Id"]
    tool = subprocess.run(["layer-tool"], capture_output=True, text=True)
    answer = {
        "tool": tool.stdout.strip(),
        "library": open("/opt/lib/libdata.txt").read().strip(),
        "ld_library_path": os.environ["LD_LIBRARY_PATH"].split(":"),
        "write": write_opt(),
    }
    urllib.request.urlopen(urllib.request.Request(API + request_id + "/response", data=json.dumps(answer).encode()))
"""


def test_a_provided_function_finds_its_layers_binary_on_path_and_cannot_write_opt(kiln):
    layer = publish(kiln, unique("tools"), {
        "bin/layer-tool": "#!/bin/sh\necho tool from layer\n",
        "lib/libdata.txt": "library from layer\n",
    })
    name = unique("layerprov")
    create(kiln, name, files={"bootstrap": PROVIDED_BOOTSTRAP}, runtime="provided.al2023",
           handler="ignored.handler", Layers=[layer["LayerVersionArn"]])
    out = run(kiln, name)
    assert out["tool"] == "tool from layer"
    assert out["library"] == "library from layer"
    assert "/opt/lib" in out["ld_library_path"]
    assert out["write"] == "Read-only file system"


def tailed(kiln, name, event):
    """Invokes `name`; its answer and the start path of its REPORT line."""
    result, response = kiln.invoke(name, event, LogType="Tail")
    assert "FunctionError" not in response, result
    report = [line for line in kiln.log_tail(response).splitlines() if line.startswith("REPORT")][-1]
    return result, start_path(report)


def test_hot_starts_have_the_layers(kiln):
    layer = publish(kiln, unique("hotpy"), {"python/hotmod.py": "VALUE = 'hot'\n"})
    name = python_function(kiln, [layer["LayerVersionArn"]], prefix="layerhot")
    # The fork server is built from an instance with the layers at /opt; its forks have them.
    assert wait_ready(kiln, name)["kind"] == "fork-server"
    result, path = tailed(kiln, name, {"modules": ["hotmod"]})
    assert (result["hotmod"], path) == ("hot", "hot")

    node_layer = publish(kiln, unique("hotnode"), {"nodejs/node_modules/layerlib/index.js": "exports.value = 'hot';\n"})
    node = unique("layerhotnode")
    create(kiln, node, files={"index.js": NODE_READER}, runtime=NODE_RUNTIME, handler="index.handler",
           Layers=[node_layer["LayerVersionArn"]])
    assert wait_ready(kiln, node)["kind"] == "standby"
    result, path = tailed(kiln, node, {})
    assert (result["value"], path) == ("hot", "hot")


def test_a_function_with_layers_does_not_take_a_runtime_standby(kiln):
    layer = publish(kiln, unique("warm"), {"python/warmmod.py": "VALUE = 'coldest'\n"})
    name = unique("layerwarm")
    create(kiln, name, files={"app.py": PY_READER}, Layers=[layer["LayerVersionArn"]])
    kiln.settled(name)
    response = kiln.signed_request("PUT", f"/2015-03-31/functions/{name}/configuration",
                                   json.dumps({"KilnPrebake": {"Mode": "off"}}), {"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    wait_updated(kiln, name)
    # A standby's /opt was mounted before any function was known: the function boots its own.
    wait_standby(kiln, PYTHON_RUNTIME)
    result, path = tailed(kiln, name, {"modules": ["warmmod"]})
    assert (result["warmmod"], path) == ("coldest", "coldest")


PY_WRITER = """
import os

def handler(event, context):
    results = {}
    for path in ("/opt/python/new.py", "/opt/python/layermod.py", "/opt/new-file"):
        try:
            with open(path, "w") as f:
                f.write("x")
            results[path] = "written"
        except OSError as e:
            results[path] = e.strerror
    # kiln's own runtime files are still where the runtime finds them.
    results["kiln"] = sorted(os.listdir("/opt/kiln"))
    return results
"""


def test_a_function_cannot_write_to_opt(kiln):
    layer = publish(kiln, unique("ro"), {"python/layermod.py": "VALUE = 1\n"})
    name = unique("layerwrite")
    create(kiln, name, files={"app.py": PY_WRITER}, Layers=[layer["LayerVersionArn"]])
    out = run(kiln, name)
    for path in ("/opt/python/new.py", "/opt/python/layermod.py", "/opt/new-file"):
        assert out[path] == "Read-only file system", out
    assert "shim.py" in out["kiln"]


def test_get_function_shows_layers(kiln):
    files = {"python/layermod.py": "VALUE = 'x'\n"}
    layer = publish(kiln, unique("shown"), files)
    name = python_function(kiln, [layer["LayerVersionArn"]])
    lam = kiln.client()
    expected = [{"Arn": layer["LayerVersionArn"], "CodeSize": len(layer_zip(files))}]
    assert layer["Content"]["CodeSize"] == expected[0]["CodeSize"]
    assert lam.get_function(FunctionName=name)["Configuration"]["Layers"] == expected
    assert lam.get_function_configuration(FunctionName=name)["Layers"] == expected
    # Every page: the suite's other tests leave many functions in this kiln.
    functions = [f for page in lam.get_paginator("list_functions").paginate() for f in page["Functions"]]
    listed = next(f for f in functions if f["FunctionName"] == name)
    assert listed["Layers"] == expected
    # A version keeps the layers of its configuration.
    kiln.settled(name)
    version = lam.publish_version(FunctionName=name)
    assert version["Layers"] == expected
    plain = unique("nolayers")
    create(kiln, plain)
    assert "Layers" not in lam.get_function_configuration(FunctionName=plain)


def test_layer_version_api_answers(kiln):
    lam = kiln.client()
    name = unique("api")
    files = {"python/apimod.py": "VALUE = 1\n"}
    zipped = layer_zip(files)
    published = lam.publish_layer_version(
        LayerName=name, Content={"ZipFile": zipped}, Description="shared code", LicenseInfo="MIT",
        CompatibleRuntimes=[PYTHON_RUNTIME, "python3.12"], CompatibleArchitectures=["x86_64"])
    assert published["ResponseMetadata"]["HTTPStatusCode"] == 201
    region, account = kiln.region, published["LayerArn"].split(":")[4]
    assert published["LayerArn"] == f"arn:aws:lambda:{region}:{account}:layer:{name}"
    assert published["LayerVersionArn"] == f"{published['LayerArn']}:1"
    assert published["Version"] == 1
    assert published["Description"] == "shared code"
    assert published["LicenseInfo"] == "MIT"
    assert published["CompatibleRuntimes"] == [PYTHON_RUNTIME, "python3.12"]
    assert published["CompatibleArchitectures"] == ["x86_64"]
    assert published["Content"]["CodeSha256"] == base64.b64encode(hashlib.sha256(zipped).digest()).decode()
    assert published["Content"]["CodeSize"] == len(zipped)
    assert requests.get(published["Content"]["Location"], timeout=30).content == zipped
    second = lam.publish_layer_version(LayerName=name, Content={"ZipFile": zipped},
                                       CompatibleRuntimes=[NODE_RUNTIME])
    assert second["Version"] == 2

    got = lam.get_layer_version(LayerName=name, VersionNumber=1)
    by_arn = lam.get_layer_version_by_arn(Arn=published["LayerVersionArn"])
    for answer in (got, by_arn):
        for key in ("LayerArn", "LayerVersionArn", "Version", "Description", "LicenseInfo", "CompatibleRuntimes",
                    "CompatibleArchitectures", "CreatedDate"):
            assert answer[key] == published[key], key
        assert answer["Content"]["CodeSha256"] == published["Content"]["CodeSha256"]
    # A LayerName may be the layer's ARN.
    assert lam.get_layer_version(LayerName=published["LayerArn"], VersionNumber=2)["Version"] == 2

    versions = lam.list_layer_versions(LayerName=name)["LayerVersions"]
    assert [v["Version"] for v in versions] == [2, 1]
    assert versions[1]["LayerVersionArn"] == published["LayerVersionArn"]
    assert versions[1]["LicenseInfo"] == "MIT" and "LicenseInfo" not in versions[0]
    matching = lam.list_layer_versions(LayerName=name, CompatibleRuntime=PYTHON_RUNTIME)["LayerVersions"]
    assert [v["Version"] for v in matching] == [1]
    page = lam.list_layer_versions(LayerName=name, MaxItems=1)
    assert [v["Version"] for v in page["LayerVersions"]] == [2]
    rest = lam.list_layer_versions(LayerName=name, MaxItems=1, Marker=page["NextMarker"])
    assert [v["Version"] for v in rest["LayerVersions"]] == [1] and "NextMarker" not in rest
    assert lam.list_layer_versions(LayerName=unique("none"))["LayerVersions"] == []

    layers = {item["LayerName"]: item for item in all_layers(lam)}
    assert layers[name]["LayerArn"] == published["LayerArn"]
    assert layers[name]["LatestMatchingVersion"]["Version"] == 2
    python_layers = {item["LayerName"]: item for item in all_layers(lam, CompatibleRuntime=PYTHON_RUNTIME)}
    assert python_layers[name]["LatestMatchingVersion"]["Version"] == 1
    assert name not in {item["LayerName"] for item in all_layers(lam, CompatibleRuntime="ruby3.3")}
    x86 = {item["LayerName"]: item for item in all_layers(lam, CompatibleArchitecture="x86_64")}
    assert x86[name]["LatestMatchingVersion"]["Version"] == 1
    assert name not in {item["LayerName"] for item in all_layers(lam, CompatibleArchitecture="arm64")}
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.publish_layer_version(LayerName=name, Content={"ZipFile": zipped}, CompatibleRuntimes=["cobol85"])
    assert error_code(excinfo) == "ValidationException" and http_status(excinfo) == 400

    deleted = lam.delete_layer_version(LayerName=name, VersionNumber=1)
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.get_layer_version(LayerName=name, VersionNumber=1)
    assert error_code(excinfo) == "ResourceNotFoundException" and http_status(excinfo) == 404
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.get_layer_version_by_arn(Arn=published["LayerVersionArn"])
    assert error_code(excinfo) == "ResourceNotFoundException"
    # Deleting what is gone succeeds, as on Lambda.
    assert lam.delete_layer_version(LayerName=name, VersionNumber=1)["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert [v["Version"] for v in lam.list_layer_versions(LayerName=name)["LayerVersions"]] == [2]
    lam.delete_layer_version(LayerName=name, VersionNumber=2)
    assert name not in {item["LayerName"] for item in all_layers(lam)}


def all_layers(lam, **filters):
    out, marker = [], None
    while True:
        page = lam.list_layers(**filters, **({"Marker": marker} if marker else {}), MaxItems=2)
        out.extend(page["Layers"])
        marker = page.get("NextMarker")
        if not marker:
            return out


def test_version_numbers_are_not_reused_after_a_delete(kiln):
    lam = kiln.client()
    name = unique("numbers")
    assert publish(kiln, name, {"a.txt": "1"})["Version"] == 1
    assert publish(kiln, name, {"a.txt": "2"})["Version"] == 2
    lam.delete_layer_version(LayerName=name, VersionNumber=2)
    lam.delete_layer_version(LayerName=name, VersionNumber=1)
    assert publish(kiln, name, {"a.txt": "3"})["Version"] == 3


def test_function_layer_errors(kiln):
    lam = kiln.client()
    layer = publish(kiln, unique("errs"), {"python/errmod.py": "VALUE = 1\n"})
    arn = layer["LayerVersionArn"]
    missing = arn.rsplit(":", 1)[0] + ":99"

    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(kiln, [missing])
    assert error_code(excinfo) == "InvalidParameterValueException" and http_status(excinfo) == 400
    assert excinfo.value.response["Error"]["Message"] == f"Layer version {missing} does not exist."

    others = [publish(kiln, unique("many"), {"x.txt": str(i)})["LayerVersionArn"] for i in range(5)]
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(kiln, [arn, *others])
    assert error_code(excinfo) == "InvalidParameterValueException" and http_status(excinfo) == 400
    assert "more than 5 layers" in excinfo.value.response["Error"]["Message"]
    # Five is allowed.
    python_function(kiln, others)

    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(kiln, ["not-a-layer-arn"])
    assert error_code(excinfo) == "ValidationException" and http_status(excinfo) == 400

    second = publish(kiln, arn.split(":")[6], {"python/errmod.py": "VALUE = 2\n"})["LayerVersionArn"]
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(kiln, [arn, second])
    assert error_code(excinfo) == "InvalidParameterValueException"

    name = python_function(kiln, [arn])
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.update_function_configuration(FunctionName=name, Layers=[missing])
    assert error_code(excinfo) == "InvalidParameterValueException"
    assert lam.get_function_configuration(FunctionName=name)["Layers"][0]["Arn"] == arn

    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.publish_layer_version(LayerName=unique("bad"), Content={"ZipFile": b"not a zip"})
    assert error_code(excinfo) == "InvalidParameterValueException" and http_status(excinfo) == 400
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.get_layer_version(LayerName=unique("absent"), VersionNumber=1)
    assert error_code(excinfo) == "ResourceNotFoundException" and http_status(excinfo) == 404


def test_a_layer_too_large_for_its_function_is_refused(kiln):
    # Zeros compress well: a small zip that unzips to more than Lambda's 250 MB with the function.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big/a", b"\0" * (130 * 1024 * 1024))
    layer_a = kiln.client().publish_layer_version(LayerName=unique("big"), Content={"ZipFile": buf.getvalue()})
    layer_b = kiln.client().publish_layer_version(LayerName=unique("big"), Content={"ZipFile": buf.getvalue()})
    python_function(kiln, [layer_a["LayerVersionArn"]])
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(kiln, [layer_a["LayerVersionArn"], layer_b["LayerVersionArn"]])
    assert error_code(excinfo) == "InvalidParameterValueException"
    assert "exceeds the maximum allowed size of 262144000 bytes" in excinfo.value.response["Error"]["Message"]


def test_a_deleted_layer_version_keeps_serving_its_functions_across_a_restart(fresh_kiln):
    server = fresh_kiln()
    lam = server.client()
    layer_name = unique("kept")
    layer = publish(server, layer_name, {"python/keptmod.py": "VALUE = 'kept'\n"})
    name = python_function(server, [layer["LayerVersionArn"]])
    other = publish(server, unique("listed"), {"python/other.py": "VALUE = 1\n"})
    assert run(server, name, {"modules": ["keptmod"]})["keptmod"] == "kept"
    lam.delete_layer_version(LayerName=layer_name, VersionNumber=1)
    # A new configuration of the function that keeps the deleted version is allowed.
    lam.update_function_configuration(FunctionName=name, Layers=[layer["LayerVersionArn"]], Timeout=5)
    wait_updated(server, name)
    assert run(server, name, {"modules": ["keptmod"]})["keptmod"] == "kept"
    # Another function may not take it any more.
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        python_function(server, [layer["LayerVersionArn"]])
    assert error_code(excinfo) == "InvalidParameterValueException"

    server.restart()
    lam = server.client()
    assert lam.get_layer_version(LayerName=other["LayerArn"].split(":")[-1], VersionNumber=1)["Content"][
        "CodeSha256"] == other["Content"]["CodeSha256"]
    assert other["LayerArn"] in {item["LayerArn"] for item in lam.list_layers()["Layers"]}
    assert lam.get_function(FunctionName=name)["Configuration"]["Layers"][0]["Arn"] == layer["LayerVersionArn"]
    assert run(server, name, {"modules": ["keptmod"]})["keptmod"] == "kept"
    # Numbers stay taken across the restart too.
    assert publish(server, layer_name, {"python/keptmod.py": "VALUE = 'new'\n"})["Version"] == 2


def test_aws_cli_publish_layer_version_and_list_layers(kiln, tmp_path):
    name = unique("cli")
    zip_path = tmp_path / "layer.zip"
    zip_path.write_bytes(layer_zip({"python/climod.py": "VALUE = 'cli'\n"}))
    published = json.loads(aws(kiln, "lambda", "publish-layer-version", "--layer-name", name,
                               "--zip-file", f"fileb://{zip_path}", "--compatible-runtimes", PYTHON_RUNTIME,
                               "--description", "from the CLI").stdout)
    assert published["Version"] == 1 and published["Description"] == "from the CLI"
    listed = json.loads(aws(kiln, "lambda", "list-layers", "--compatible-runtime", PYTHON_RUNTIME).stdout)
    assert published["LayerVersionArn"] in {item["LatestMatchingVersion"]["LayerVersionArn"] for item in listed["Layers"]}
    versions = json.loads(aws(kiln, "lambda", "list-layer-versions", "--layer-name", name).stdout)
    assert [v["Version"] for v in versions["LayerVersions"]] == [1]
    fn = unique("clifn")
    code = tmp_path / "code.zip"
    code.write_bytes(layer_zip({"app.py": PY_READER}))
    created = json.loads(aws(kiln, "lambda", "create-function", "--function-name", fn, "--runtime", PYTHON_RUNTIME,
                             "--role", ROLE, "--handler", "app.handler", "--zip-file", f"fileb://{code}",
                             "--layers", published["LayerVersionArn"]).stdout)
    assert created["Layers"][0]["Arn"] == published["LayerVersionArn"]
    assert run(kiln, fn, {"modules": ["climod"]})["climod"] == "cli"
    aws(kiln, "lambda", "delete-layer-version", "--layer-name", name, "--version-number", "1")
    gone = aws(kiln, "lambda", "get-layer-version", "--layer-name", name, "--version-number", "1", check=False)
    assert gone.returncode != 0 and "ResourceNotFoundException" in gone.stderr


def test_kiln_cli_publishes_lists_uses_and_deletes_layers(kiln, tmp_path):
    name = unique("kcli")
    layer_dir = tmp_path / "layer"
    (layer_dir / "python").mkdir(parents=True)
    (layer_dir / "python" / "kclimod.py").write_text("VALUE = 'kiln cli'\n")
    published = json.loads(kiln.cli("--json", "layer", "publish", name, "--zip", str(layer_dir),
                                    "--runtimes", PYTHON_RUNTIME, "python3.12").stdout)
    assert published["Version"] == 1
    assert published["CompatibleRuntimes"] == [PYTHON_RUNTIME, "python3.12"]
    assert name in kiln.cli("layer", "ls").stdout
    listed = json.loads(kiln.cli("--json", "layer", "ls").stdout)
    assert published["LayerVersionArn"] in {item["LatestMatchingVersion"]["LayerVersionArn"] for item in listed}
    versions = json.loads(kiln.cli("--json", "layer", "ls", name).stdout)
    assert [v["Version"] for v in versions] == [1]
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(PY_READER)
    fn = unique("kclifn")
    kiln.cli("deploy", fn, "--runtime", PYTHON_RUNTIME, "--handler", "app.handler", "--code", str(code),
             "--layer", published["LayerVersionArn"])
    assert run(kiln, fn, {"modules": ["kclimod"]})["kclimod"] == "kiln cli"
    assert f"Layer          {published['LayerVersionArn']}" in kiln.cli("get", fn).stdout
    kiln.cli("layer", "rm", name, "1")
    assert json.loads(kiln.cli("--json", "layer", "ls", name).stdout) == []
    # The function keeps the deleted version.
    assert kiln.client().get_function_configuration(FunctionName=fn)["Layers"][0]["Arn"] == published["LayerVersionArn"]
