"""`kiln up` as an operator sees it: start, restart, kill -9, root check, metrics."""

import os
import re
import subprocess

import requests

from kiln_harness import KILN_BIN, PYTHON_RUNTIME, Kiln


def test_refuses_to_run_without_root(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(tmp_path, 0o777)
    os.chmod(data, 0o777)
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(KILN_BIN), "up",
         "--listen", "127.0.0.1:0", "--data-dir", str(data), "--no-aws-profile"],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode != 0
    assert "must run as root" in result.stderr
    assert "never runs a function unsandboxed" in result.stderr


def test_credentials_are_printed_once_and_kept(fresh_kiln):
    server = fresh_kiln()
    first_output = "".join(server.output)
    assert server.access_key in first_output
    assert oct(os.stat(server.data_dir / "credentials.json").st_mode & 0o777) == "0o600"
    key = server.access_key
    server.restart()
    assert server.access_key == key
    assert "".join(server.output).count(key) == 1


def test_functions_and_configuration_survive_restart_and_kill9(fresh_kiln):
    server = fresh_kiln()
    server.deploy("persist", PYTHON_RUNTIME, "app.handler", files={
        "app.py": "import os\ndef handler(e, c):\n    return os.environ['COLOR']\n",
    }, MemorySize=256, Timeout=7, Environment={"Variables": {"COLOR": "teal"}})
    server.client().put_function_concurrency(FunctionName="persist", ReservedConcurrentExecutions=2)

    server.kill9()
    server.start()
    lam = server.client()
    config = lam.get_function(FunctionName="persist")
    assert config["Configuration"]["MemorySize"] == 256
    assert config["Configuration"]["Timeout"] == 7
    assert config["Concurrency"]["ReservedConcurrentExecutions"] == 2
    result, _ = server.invoke("persist")
    assert result == "teal"

    assert server.stop() == 0
    server.start()
    result, _ = server.invoke("persist")
    assert result == "teal"


def test_metrics_expose_invocations_and_instances(kiln):
    kiln.deploy("metered", PYTHON_RUNTIME, "app.handler", files={
        "app.py": "def handler(e, c):\n    if e.get('fail'):\n        raise ValueError('no')\n    return 1\n",
    })
    kiln.invoke("metered")
    kiln.invoke("metered", {"fail": True})
    text = requests.get(kiln.endpoint + "/metrics", timeout=10).text
    def value(pattern):
        match = re.search(pattern + r" (\d+)", text)
        assert match, f"{pattern} missing from /metrics"
        return int(match.group(1))
    assert value(r'kiln_invocations_total\{function="metered"\}') >= 2
    assert value(r'kiln_errors_total\{function="metered"\}') >= 1
    # Whichever path the first start took (hot once the snapshot was ready in time).
    assert value(r'kiln_cold_starts_total\{function="metered",path="(?:coldest|warm|hot)"\}') >= 1
    assert value(r'kiln_instances\{function="metered",state="idle"\}') >= 1
    assert 'kiln_invocation_duration_seconds_bucket{' in text
    assert 'kiln_memory_bytes{kind="budget"}' in text


def test_health_and_unknown_routes(kiln):
    assert requests.get(kiln.endpoint + "/health", timeout=10).text == "ok\n"
    response = requests.get(kiln.endpoint + "/nope", timeout=10)
    assert response.status_code == 404
    assert response.headers["x-amzn-errortype"] == "UnknownOperationException"
    assert "nope" in response.json()["message"]


def test_demo_function_is_deployed_with_a_public_url(tmp_path):
    server = Kiln(data_dir=tmp_path / "data", extra_args=["--demo"]).start()
    try:
        result, _ = server.invoke("hello", {"name": "kiln"})
        assert result["message"] == "Hello, kiln!"
        response = requests.get(server.endpoint + "/fn/hello/?name=web", timeout=30)
        assert response.status_code == 200
        assert response.json()["message"] == "Hello, web!"
    finally:
        server.cleanup()
