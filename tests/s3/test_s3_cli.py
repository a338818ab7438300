"""The object store from the command line: `kiln s3 …`, and the AWS CLI (`aws s3 …`,
`aws s3api …`) with nothing but the `kiln` profile that `kiln up` writes."""

import hashlib
import json
import os
import re
import subprocess
import urllib.request
import uuid

import pytest

from kiln_harness import KILN_BIN
from s3_harness import VENV_BIN, ProfileKiln, s3_client

MiB = 1024 * 1024


def kiln_s3(server, *args, stdin=None, check=True):
    env = dict(os.environ, KILN_ENDPOINT=server.endpoint, KILN_DATA_DIR=str(server.data_dir))
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "KILN_S3_ENDPOINT"]:
        env.pop(name, None)
    done = subprocess.run([str(KILN_BIN), "s3", *args], input=stdin, capture_output=True, env=env, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"kiln s3 {' '.join(args)}: {done.stdout.decode()}\n{done.stderr.decode()}")
    return done


def test_kiln_s3_commands(kiln, tmp_path):
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    assert kiln_s3(kiln, "mb", f"s3://{bucket}").stdout.decode().strip() == f"make_bucket: {bucket}"
    listed = json.loads(kiln_s3(kiln, "--json", "ls").stdout)
    assert bucket in [b["name"] for b in listed["buckets"]]

    local = tmp_path / "report.txt"
    local.write_bytes(b"quarterly numbers\n")
    kiln_s3(kiln, "cp", str(local), f"s3://{bucket}/docs/")
    kiln_s3(kiln, "cp", "-", f"s3://{bucket}/stdin.txt", "--content-type", "text/plain", stdin=b"from stdin")
    top = json.loads(kiln_s3(kiln, "--json", "ls", f"s3://{bucket}/").stdout)
    assert top["prefixes"] == ["docs/"]
    assert [o["key"] for o in top["objects"]] == ["stdin.txt"]
    everything = json.loads(kiln_s3(kiln, "--json", "ls", "--recursive", f"s3://{bucket}").stdout)
    assert [(o["key"], o["size"]) for o in everything["objects"]] == [("docs/report.txt", 18), ("stdin.txt", 10)]
    text = kiln_s3(kiln, "ls", f"s3://{bucket}").stdout.decode()
    assert "PRE docs/" in " ".join(text.split()) and "stdin.txt" in text

    assert kiln_s3(kiln, "cp", f"s3://{bucket}/stdin.txt", "-").stdout == b"from stdin"
    down = tmp_path / "down"
    down.mkdir()
    kiln_s3(kiln, "cp", f"s3://{bucket}/docs/report.txt", str(down))
    assert (down / "report.txt").read_bytes() == b"quarterly numbers\n"
    assert list(down.iterdir()) == [down / "report.txt"]  # no temporary file left behind

    kiln_s3(kiln, "cp", f"s3://{bucket}/docs/report.txt", f"s3://{bucket}/copy.txt")
    url = kiln_s3(kiln, "presign", f"s3://{bucket}/copy.txt", "--expires-in", "300").stdout.decode().strip()
    assert urllib.request.urlopen(url).read() == b"quarterly numbers\n"

    refused = kiln_s3(kiln, "rb", f"s3://{bucket}", check=False)
    assert refused.returncode != 0 and b"BucketNotEmpty" in refused.stderr
    missing = kiln_s3(kiln, "cp", f"s3://{bucket}/nope", str(tmp_path / "nope"), check=False)
    assert missing.returncode != 0 and b"NoSuchKey" in missing.stderr
    assert not (tmp_path / "nope").exists()
    for key in ["docs/report.txt", "stdin.txt", "copy.txt"]:
        kiln_s3(kiln, "rm", f"s3://{bucket}/{key}")
    kiln_s3(kiln, "rb", f"s3://{bucket}")
    assert bucket not in [b["name"] for b in json.loads(kiln_s3(kiln, "--json", "ls").stdout)["buckets"]]


def test_kiln_s3_takes_blank_keys(kiln):
    """Keys of whitespace only are S3 keys like any other (the SDK underneath refuses them)."""
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    kiln_s3(kiln, "mb", f"s3://{bucket}")
    for key in [" ", "\t", "  "]:
        kiln_s3(kiln, "cp", "-", f"s3://{bucket}/{key}", stdin=key.encode() * 3)
        assert kiln_s3(kiln, "cp", f"s3://{bucket}/{key}", "-").stdout == key.encode() * 3
        assert s3_client(kiln).get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode() * 3
        url = kiln_s3(kiln, "presign", f"s3://{bucket}/{key}").stdout.decode().strip()
        assert urllib.request.urlopen(url).read() == key.encode() * 3
        kiln_s3(kiln, "rm", f"s3://{bucket}/{key}")
    assert json.loads(kiln_s3(kiln, "--json", "ls", f"s3://{bucket}").stdout)["objects"] == []
    kiln_s3(kiln, "rb", f"s3://{bucket}")


def test_kiln_s3_errors_say_what_is_wrong(kiln, tmp_path):
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    kiln_s3(kiln, "mb", f"s3://{bucket}")
    # A bucket you own already is there, as asked.
    again = kiln_s3(kiln, "mb", f"s3://{bucket}")
    assert again.stdout.decode().strip() == f"make_bucket: {bucket} (you own it already)"
    assert json.loads(kiln_s3(kiln, "--json", "mb", f"s3://{bucket}").stdout) == {"bucket": bucket, "alreadyOwned": True}
    missing = kiln_s3(kiln, "cp", f"s3://{bucket}/nope", str(tmp_path / "nope"), check=False)
    assert missing.returncode != 0
    assert b"NoSuchKey: The specified key does not exist." in missing.stderr, missing.stderr
    gone = kiln_s3(kiln, "ls", f"s3://{bucket}-gone", check=False)
    assert gone.returncode != 0 and b"NoSuchBucket: The specified bucket does not exist" in gone.stderr, gone.stderr
    kiln_s3(kiln, "rb", f"s3://{bucket}")


def test_kiln_s3_ls_lines_up_its_columns(kiln):
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    kiln_s3(kiln, "mb", f"s3://{bucket}")
    for key, size in [("a", 1), ("dir/b", 12345), ("c", 1234567)]:
        kiln_s3(kiln, "cp", "-", f"s3://{bucket}/{key}", stdin=b"x" * size)
    lines = kiln_s3(kiln, "ls", f"s3://{bucket}").stdout.decode().splitlines()
    assert len(lines) == 3, lines
    # PRE, and every object's name, start in the same column; times are YYYY-MM-DD HH:MM:SS.
    assert len({line.rindex(" ") for line in lines}) == 1, lines
    for line in lines:
        if "PRE" not in line:
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d+ +\S+", line), line
    for key in ["a", "dir/b", "c"]:
        kiln_s3(kiln, "rm", f"s3://{bucket}/{key}")
    kiln_s3(kiln, "rb", f"s3://{bucket}")


def test_kiln_s3_uploads_large_files_in_parts(kiln, tmp_path):
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    kiln_s3(kiln, "mb", f"s3://{bucket}")
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for i in range(70):
            f.write(hashlib.sha256(str(i).encode()).digest() * (MiB // 32))
    kiln_s3(kiln, "cp", str(big), f"s3://{bucket}/big.bin")
    head = s3_client(kiln).head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == 70 * MiB and head["ETag"].endswith('-5"')
    kiln_s3(kiln, "cp", f"s3://{bucket}/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == big.read_bytes()


def test_kiln_s3_credentials_are_the_functions(kiln):
    out = json.loads(kiln_s3(kiln, "--json", "credentials", "thumbs").stdout)
    assert out["accessKeyId"] == "KILNFN-thumbs" and len(out["secretAccessKey"]) == 40


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    server = ProfileKiln(tmp_path_factory.mktemp("aws")).start()
    yield server
    server.cleanup()


def aws(server, *args, check=True):
    env = dict(os.environ, **server.aws_env, AWS_PROFILE="kiln")
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_REGION", "AWS_DEFAULT_REGION"]:
        env.pop(name, None)
    done = subprocess.run([str(VENV_BIN / "aws"), *args], capture_output=True, text=True, env=env, timeout=180)
    if check and done.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)}: {done.stdout}\n{done.stderr}")
    return done


def test_profile_points_s3_at_the_store(profiled):
    config = (profiled.aws_dir / "config").read_text()
    s3 = (profiled.data_dir / "s3-endpoint").read_text().strip()
    assert "[profile kiln]" in config and "services = kiln" in config
    assert f"[services kiln]\ns3 =\n  endpoint_url = {s3}" in config
    # One profile, two services: Lambda still goes to the control API.
    assert json.loads(aws(profiled, "lambda", "list-functions").stdout)["Functions"] == []


def test_aws_cli_s3(profiled, tmp_path):
    bucket = f"awscli-{uuid.uuid4().hex[:12]}"
    aws(profiled, "s3", "mb", f"s3://{bucket}")
    tree = tmp_path / "site"
    (tree / "css").mkdir(parents=True)
    (tree / "index.html").write_text("<h1>kiln</h1>")
    (tree / "css" / "main.css").write_text("h1 { color: red }")
    (tree / "large.bin").write_bytes(os.urandom(20 * MiB))  # above the CLI's 8 MiB multipart threshold
    aws(profiled, "s3", "sync", str(tree), f"s3://{bucket}/site/")
    listing = aws(profiled, "s3", "ls", "--recursive", f"s3://{bucket}/").stdout
    assert sorted(line.split()[-1] for line in listing.splitlines()) == [
        "site/css/main.css", "site/index.html", "site/large.bin"]
    top = aws(profiled, "s3", "ls", f"s3://{bucket}/site/").stdout
    assert "PRE css/" in top and "index.html" in top
    head = json.loads(aws(profiled, "s3api", "head-object", "--bucket", bucket, "--key", "site/large.bin").stdout)
    assert head["ContentLength"] == 20 * MiB and head["ETag"].endswith('-3"')

    back = tmp_path / "back"
    aws(profiled, "s3", "cp", "--recursive", f"s3://{bucket}/site/", str(back))
    for path in ["index.html", "css/main.css", "large.bin"]:
        assert (back / path).read_bytes() == (tree / path).read_bytes()
    aws(profiled, "s3", "cp", f"s3://{bucket}/site/large.bin", f"s3://{bucket}/copy.bin")
    url = aws(profiled, "s3", "presign", f"s3://{bucket}/site/index.html").stdout.strip()
    assert urllib.request.urlopen(url).read() == b"<h1>kiln</h1>"
    aws(profiled, "s3", "mv", f"s3://{bucket}/copy.bin", f"s3://{bucket}/moved.bin")
    assert "moved.bin" in aws(profiled, "s3", "ls", f"s3://{bucket}/").stdout
    failed = aws(profiled, "s3", "rb", f"s3://{bucket}", check=False)
    assert failed.returncode != 0 and "BucketNotEmpty" in failed.stderr
    aws(profiled, "s3", "rm", "--recursive", f"s3://{bucket}/")
    aws(profiled, "s3", "rb", f"s3://{bucket}")
    assert bucket not in aws(profiled, "s3", "ls").stdout


def test_aws_cli_storage_classes_versions_attributes_and_uploads(profiled, tmp_path):
    bucket = f"awscli-{uuid.uuid4().hex[:12]}"
    aws(profiled, "s3", "mb", f"s3://{bucket}")
    local = tmp_path / "f.txt"
    local.write_text("kiln")
    aws(profiled, "s3", "cp", str(local), f"s3://{bucket}/ia.txt", "--storage-class", "STANDARD_IA")
    aws(profiled, "s3", "cp", str(local), f"s3://{bucket}/std.txt")
    head = json.loads(aws(profiled, "s3api", "head-object", "--bucket", bucket, "--key", "ia.txt").stdout)
    assert head["StorageClass"] == "STANDARD_IA"
    # `aws s3 cp` checks its --storage-class itself; s3api leaves it to the store.
    refused = aws(profiled, "s3api", "put-object", "--bucket", bucket, "--key", "x", "--body", str(local),
                  "--storage-class", "COLD", check=False)
    assert refused.returncode != 0 and "InvalidStorageClass" in refused.stderr
    versions = json.loads(aws(profiled, "s3api", "list-object-versions", "--bucket", bucket).stdout)["Versions"]
    assert [(v["Key"], v["VersionId"], v["StorageClass"]) for v in versions] == [
        ("ia.txt", "null", "STANDARD_IA"), ("std.txt", "null", "STANDARD")]
    attributes = json.loads(aws(profiled, "s3api", "get-object-attributes", "--bucket", bucket, "--key", "ia.txt",
                                "--object-attributes", "ObjectSize", "StorageClass").stdout)
    assert attributes["ObjectSize"] == 4 and attributes["StorageClass"] == "STANDARD_IA"
    upload = json.loads(aws(profiled, "s3api", "create-multipart-upload", "--bucket", bucket, "--key", "mp").stdout)
    uploads = json.loads(aws(profiled, "s3api", "list-multipart-uploads", "--bucket", bucket).stdout)["Uploads"]
    assert [u["UploadId"] for u in uploads] == [upload["UploadId"]]
    aws(profiled, "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", "mp", "--upload-id",
        upload["UploadId"])
    aws(profiled, "s3", "rm", "--recursive", f"s3://{bucket}/")
    aws(profiled, "s3", "rb", f"s3://{bucket}")


def test_aws_cli_versions_and_cors(profiled, tmp_path):
    bucket = f"awscli-{uuid.uuid4().hex[:12]}"
    aws(profiled, "s3", "mb", f"s3://{bucket}")
    aws(profiled, "s3api", "put-bucket-versioning", "--bucket", bucket,
        "--versioning-configuration", "Status=Enabled")
    local = tmp_path / "f.txt"
    ids = []
    for text in ["one", "two"]:
        local.write_text(text)
        put = json.loads(aws(profiled, "s3api", "put-object", "--bucket", bucket, "--key", "k",
                             "--body", str(local)).stdout)
        ids.append(put["VersionId"])
    out = tmp_path / "out.txt"
    aws(profiled, "s3api", "get-object", "--bucket", bucket, "--key", "k", "--version-id", ids[0], str(out))
    assert out.read_text() == "one"
    marker = json.loads(aws(profiled, "s3api", "delete-object", "--bucket", bucket, "--key", "k").stdout)
    assert marker["DeleteMarker"] is True
    listed = json.loads(aws(profiled, "s3api", "list-object-versions", "--bucket", bucket).stdout)
    assert [v["VersionId"] for v in listed["Versions"]] == ids[::-1]
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker["VersionId"]]

    rules = tmp_path / "cors.json"
    rules.write_text(json.dumps({"CORSRules": [{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]}))
    aws(profiled, "s3api", "put-bucket-cors", "--bucket", bucket, "--cors-configuration", f"file://{rules}")
    got = json.loads(aws(profiled, "s3api", "get-bucket-cors", "--bucket", bucket).stdout)
    assert got["CORSRules"] == [{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]
    aws(profiled, "s3api", "delete-bucket-cors", "--bucket", bucket)
    missing = aws(profiled, "s3api", "get-bucket-cors", "--bucket", bucket, check=False)
    assert missing.returncode != 0 and "NoSuchCORSConfiguration" in missing.stderr
    for version in [*ids, marker["VersionId"]]:
        aws(profiled, "s3api", "delete-object", "--bucket", bucket, "--key", "k", "--version-id", version)
    aws(profiled, "s3", "rb", f"s3://{bucket}")
