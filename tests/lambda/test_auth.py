"""Authentication: SigV4 on the Lambda API, the AWS CLI, and the `kiln` profile `kiln up` writes."""

import datetime
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions
import pytest
import requests

from kiln_harness import KILN_BIN, PYTHON_RUNTIME, ROOT, launch, zip_files

ROLE = "arn:aws:iam::000000000000:role/test"
AWS_CLI = ROOT / ".venv" / "bin" / "aws"


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def client_with(kiln, access_key=None, secret_key=None, region=None):
    return boto3.client(
        "lambda", endpoint_url=kiln.endpoint, region_name=region or kiln.region,
        aws_access_key_id=access_key or kiln.access_key,
        aws_secret_access_key=secret_key or kiln.secret_key,
        config=botocore.config.Config(retries={"max_attempts": 0, "mode": "standard"}, read_timeout=60),
    )


def signed_headers(kiln, method, url, body=b"", secret=None, access_key=None, service="lambda", region=None):
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body)
    creds = botocore.credentials.Credentials(access_key or kiln.access_key, secret or kiln.secret_key)
    botocore.auth.SigV4Auth(creds, service, region or kiln.region).add_auth(request)
    return dict(request.headers.items())


def assert_auth_error(response, code):
    assert response.status_code == 403, (response.status_code, response.text)
    assert response.headers.get("x-amzn-ErrorType", "").split(":")[0] == code, dict(response.headers)
    body = response.json()
    assert body.get("message") or body.get("Message"), body


def error_of(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def shifted_clock(monkeypatch, delta):
    real = botocore.auth.get_current_datetime
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: real(*a, **k) + delta)


# --- The Lambda API refuses what is not signed with kiln's key --------------------------------


def test_unsigned_request_is_403_with_lambda_body(kiln):
    for method, path in (("GET", "/2015-03-31/functions/"), ("GET", "/2015-03-31/functions/x"),
                         ("POST", "/2015-03-31/functions/x/invocations"), ("GET", "/kiln/v1/status"),
                         ("GET", "/kiln/v1/functions/x/logs")):
        response = requests.request(method, kiln.endpoint + path, timeout=30)
        assert_auth_error(response, "MissingAuthenticationTokenException")
        assert response.json()["message"] == "Missing Authentication Token"


def test_unsigned_request_never_reaches_the_function(kiln):
    name = unique("authnoreach")
    kiln.client().create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                                  Code={"ZipFile": zip_files({"app.py": "def handler(e, c):\n    print('REACHED')\n"})})
    response = requests.post(f"{kiln.endpoint}/2015-03-31/functions/{name}/invocations", data=b"{}", timeout=30)
    assert response.status_code == 403
    response = requests.delete(f"{kiln.endpoint}/2015-03-31/functions/{name}", timeout=30)
    assert response.status_code == 403
    assert kiln.client().get_function(FunctionName=name)["Configuration"]["FunctionName"] == name
    logs = kiln.cli("logs", name).stdout
    assert "REACHED" not in logs


def test_wrong_secret_is_403_invalid_signature(kiln):
    lam = client_with(kiln, secret_key="x" * 40)
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.list_functions()
    assert error_of(excinfo) == ("InvalidSignatureException", 403)
    assert "signature" in excinfo.value.response["Error"]["Message"].lower()
    response = requests.get(kiln.endpoint + "/2015-03-31/functions/", timeout=30,
                            headers=signed_headers(kiln, "GET", kiln.endpoint + "/2015-03-31/functions/", secret="y" * 40))
    assert_auth_error(response, "InvalidSignatureException")


def test_unknown_access_key_is_403(kiln):
    lam = client_with(kiln, access_key="AKIANOTAKILNKEY00000")
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        lam.list_functions()
    code, status = error_of(excinfo)
    assert status == 403
    assert code == "UnrecognizedClientException"
    url = kiln.endpoint + "/2015-03-31/functions/"
    response = requests.get(url, headers=signed_headers(kiln, "GET", url, access_key="AKIAUNKNOWN000000000"), timeout=30)
    assert_auth_error(response, "UnrecognizedClientException")


def test_old_signature_is_403(kiln, monkeypatch):
    shifted_clock(monkeypatch, -datetime.timedelta(minutes=16))
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        kiln.client().list_functions()
    code, status = error_of(excinfo)
    assert status == 403 and code == "InvalidSignatureException"
    assert "expired" in excinfo.value.response["Error"]["Message"].lower()


def test_future_signature_is_403(kiln, monkeypatch):
    shifted_clock(monkeypatch, datetime.timedelta(minutes=16))
    with pytest.raises(botocore.exceptions.ClientError) as excinfo:
        kiln.client().list_functions()
    assert error_of(excinfo) == ("InvalidSignatureException", 403)


def test_slightly_skewed_clock_is_accepted(kiln, monkeypatch):
    shifted_clock(monkeypatch, -datetime.timedelta(minutes=10))
    assert "Functions" in kiln.client().list_functions()


def test_tampered_body_is_403(kiln):
    name = unique("authtamper")
    kiln.client().create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                                  Code={"ZipFile": zip_files({"app.py": "def handler(e, c):\n    return e\n"})})
    url = f"{kiln.endpoint}/2015-03-31/functions/{name}/invocations"
    headers = signed_headers(kiln, "POST", url, b'{"amount": 1}')
    response = requests.post(url, data=b'{"amount": 1000}', headers=headers, timeout=30)
    assert_auth_error(response, "InvalidSignatureException")
    response = requests.post(url, data=b'{"amount": 1}', headers=headers, timeout=30)
    assert response.status_code == 200 and response.json() == {"amount": 1}


def test_signature_for_another_path_is_403(kiln):
    url = kiln.endpoint + "/2015-03-31/functions/"
    headers = signed_headers(kiln, "GET", kiln.endpoint + "/2015-03-31/functions/other")
    assert_auth_error(requests.get(url, headers=headers, timeout=30), "InvalidSignatureException")


def test_signature_for_another_service_is_403(kiln):
    url = kiln.endpoint + "/2015-03-31/functions/"
    headers = signed_headers(kiln, "GET", url, service="s3")
    response = requests.get(url, headers=headers, timeout=30)
    assert response.status_code == 403
    assert response.json()


def test_malformed_authorization_is_403(kiln):
    url = kiln.endpoint + "/2015-03-31/functions/"
    for value in ("AWS4-HMAC-SHA256 garbage", "Bearer abc", "AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request"):
        response = requests.get(url, headers={"Authorization": value, "X-Amz-Date": "20240101T000000Z"}, timeout=30)
        assert response.status_code == 403, value
        assert response.headers.get("x-amzn-ErrorType")
        assert response.json()


def test_presigned_url_works(kiln):
    url = kiln.endpoint + "/2015-03-31/functions/"
    request = botocore.awsrequest.AWSRequest(method="GET", url=url)
    creds = botocore.credentials.Credentials(kiln.access_key, kiln.secret_key)
    botocore.auth.SigV4QueryAuth(creds, "lambda", kiln.region, expires=300).add_auth(request)
    response = requests.get(request.url, timeout=30)
    assert response.status_code == 200, response.text
    assert "Functions" in response.json()


def test_open_endpoints(kiln):
    assert requests.get(kiln.endpoint + "/health", timeout=30).status_code == 200
    metrics = requests.get(kiln.endpoint + "/metrics", timeout=30)
    assert metrics.status_code == 200 and "kiln_" in metrics.text


# --- The AWS CLI ------------------------------------------------------------------------------


def aws_env(kiln, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=kiln.access_key, AWS_SECRET_ACCESS_KEY=kiln.secret_key,
               AWS_DEFAULT_REGION=kiln.region, AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_MAX_ATTEMPTS="1")
    env.update(extra)
    return env


def aws(kiln, *args, env=None, check=True):
    result = subprocess.run([str(AWS_CLI), "--endpoint-url", kiln.endpoint, "--output", "json", *args],
                            capture_output=True, text=True, timeout=120, env=env or aws_env(kiln))
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_aws_cli_list_functions(kiln):
    out = json.loads(aws(kiln, "lambda", "list-functions").stdout)
    assert "Functions" in out


def test_aws_cli_create_invoke_delete(kiln, tmp_path):
    name = unique("awscli")
    zip_path = tmp_path / "code.zip"
    zip_path.write_bytes(zip_files({"app.py": "def handler(e, c):\n    return {'cli': e}\n"}))
    created = json.loads(aws(kiln, "lambda", "create-function", "--function-name", name, "--runtime", PYTHON_RUNTIME,
                             "--role", ROLE, "--handler", "app.handler", "--zip-file", f"fileb://{zip_path}").stdout)
    assert created["FunctionName"] == name
    out_file = tmp_path / "out.json"
    invoked = json.loads(aws(kiln, "lambda", "invoke", "--function-name", name, "--payload", '{"x": 1}',
                             str(out_file)).stdout)
    assert invoked["StatusCode"] == 200
    assert json.loads(out_file.read_text()) == {"cli": {"x": 1}}
    names = [f["FunctionName"] for f in json.loads(aws(kiln, "lambda", "list-functions").stdout)["Functions"]]
    assert name in names
    aws(kiln, "lambda", "delete-function", "--function-name", name)
    result = aws(kiln, "lambda", "get-function", "--function-name", name, check=False)
    assert result.returncode != 0
    assert "ResourceNotFoundException" in result.stderr


def test_aws_cli_with_wrong_secret_fails(kiln):
    result = aws(kiln, "lambda", "list-functions", env=aws_env(kiln, AWS_SECRET_ACCESS_KEY="z" * 40), check=False)
    assert result.returncode != 0
    assert "InvalidSignatureException" in result.stderr


# --- The `kiln` profile -----------------------------------------------------------------------


class OwnKiln:
    """`kiln up` started by the test itself, so that it writes the AWS profile."""

    def __init__(self, env, data_dir):
        self.data_dir = data_dir
        self.env = env
        self.proc = None
        self.endpoint = None
        self.output = []

    def start(self, timeout=60):
        args = [str(KILN_BIN), "up", "--listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
                "--async-retry-delay-ms", "300", "--memory-budget-mb", "8192", "--shutdown-grace", "10"]
        self.proc, self.endpoint = launch(args, r"listening on (http://\S+)", self.output, timeout, env=self.env)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def profile_files(tmp_path):
    credentials = tmp_path / "aws" / "credentials"
    config = tmp_path / "aws" / "config"
    credentials.parent.mkdir()
    credentials.write_text("[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = DEFAULTSECRET\n")
    config.write_text("[default]\nregion = eu-west-3\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(credentials), AWS_CONFIG_FILE=str(config))
    servers = []
    data_dir = Path(tempfile.mkdtemp(prefix="kiln-auth-"))

    def start():
        server = OwnKiln(env, data_dir).start()
        servers.append(server)
        return server

    yield credentials, config, env, start
    for server in servers:
        server.stop()
    import shutil
    shutil.rmtree(data_dir, ignore_errors=True)


def test_kiln_up_writes_the_kiln_profile(profile_files, monkeypatch):
    credentials, config, env, start = profile_files
    server = start()
    creds = json.loads((server.data_dir / "credentials.json").read_text())
    cred_text = credentials.read_text()
    config_text = config.read_text()
    assert "[kiln]" in cred_text and creds["accessKeyId"] in cred_text and creds["secretAccessKey"] in cred_text
    assert "[profile kiln]" in config_text and server.endpoint in config_text
    # Other profiles are kept.
    assert "DEFAULTKEY" in cred_text and "eu-west-3" in config_text
    assert os.stat(credentials).st_mode & 0o077 == 0, "the credentials file must not be readable by others"
    for key, value in env.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    session = boto3.Session(profile_name="kiln")
    lam = session.client("lambda", config=botocore.config.Config(retries={"max_attempts": 0, "mode": "standard"}))
    assert lam.meta.endpoint_url.rstrip("/") == server.endpoint
    name = unique("profile")
    lam.create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                        Code={"ZipFile": zip_files({"app.py": "def handler(e, c):\n    return 'via profile'\n"})})
    assert json.loads(lam.invoke(FunctionName=name)["Payload"].read()) == "via profile"
    # The AWS CLI finds it too.
    result = subprocess.run([str(AWS_CLI), "--profile", "kiln", "--output", "json", "lambda", "list-functions"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert name in [f["FunctionName"] for f in json.loads(result.stdout)["Functions"]]


def test_restarting_replaces_the_profile_instead_of_duplicating_it(profile_files, monkeypatch):
    credentials, config, env, start = profile_files
    first = start()
    first_endpoint = first.endpoint
    first.stop()
    second = start()
    cred_text = credentials.read_text()
    config_text = config.read_text()
    assert cred_text.count("[kiln]") == 1
    assert config_text.count("[profile kiln]") == 1
    assert cred_text.count("[default]") == 1 and config_text.count("[default]") == 1
    # The same data dir keeps its key; the endpoint is the new one.
    assert second.endpoint in config_text
    if first_endpoint != second.endpoint:
        assert first_endpoint not in config_text
    for key, value in env.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    lam = boto3.Session(profile_name="kiln").client("lambda")
    assert "Functions" in lam.list_functions()


def test_harness_flag_leaves_profiles_alone(fresh_kiln, tmp_path, monkeypatch):
    credentials = tmp_path / "credentials"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    fresh_kiln()
    assert not credentials.exists()


def test_profile_in_symlinked_files_keeps_the_symlinks(profile_files, tmp_path):
    credentials, config, env, start = profile_files
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    for path in (credentials, config):
        target = dotfiles / path.name
        target.write_text(path.read_text())
        path.unlink()
        path.symlink_to(target)
    start()
    for path in (credentials, config):
        assert path.is_symlink()
        text = (dotfiles / path.name).read_text()
        assert "kiln]" in text and "[default]" in text


def test_aws_cli_tags_set_kiln_settings(kiln, tmp_path):
    name = unique("awstags")
    zip_path = tmp_path / "code.zip"
    zip_path.write_bytes(zip_files({"app.py": "def handler(e, c):\n    return {'cli': e}\n"}))
    created = json.loads(aws(kiln, "lambda", "create-function", "--function-name", name, "--runtime", PYTHON_RUNTIME,
                             "--role", ROLE, "--handler", "app.handler", "--zip-file", f"fileb://{zip_path}",
                             "--tags", "kiln:prebake=lazy,team=a").stdout)
    arn = created["FunctionArn"]

    def configuration():
        # The CLI drops what its model does not know: kiln's extensions are read raw.
        return kiln.signed_request("GET", f"/2015-03-31/functions/{name}/configuration").json()

    assert configuration()["KilnPrebake"]["Mode"] == "lazy"
    aws(kiln, "lambda", "tag-resource", "--resource", arn, "--tags", "kiln:warmup=0")
    assert json.loads(aws(kiln, "lambda", "list-tags", "--resource", arn).stdout)["Tags"] == {
        "kiln:prebake": "lazy", "kiln:warmup": "0", "team": "a"}
    aws(kiln, "lambda", "untag-resource", "--resource", arn, "--tag-keys", "kiln:prebake", "team")
    got = json.loads(aws(kiln, "lambda", "get-function", "--function-name", name).stdout)
    assert got["Tags"] == {"kiln:warmup": "0"}
    assert configuration()["KilnPrebake"] == {"Mode": "deploy", "WarmupInvocations": 0}
    result = aws(kiln, "lambda", "tag-resource", "--resource", arn, "--tags", "kiln:network=everywhere", check=False)
    assert result.returncode != 0 and "InvalidParameterValueException" in result.stderr
