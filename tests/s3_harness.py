"""Helpers for the object store tests: S3 clients for a kiln, a store-only kiln in its own
network namespace behind emulated WAN latency, and a third-party S3 server (moto)."""

import base64
import http.client
import json
import os
import re
import shutil
import sys
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
import zlib
from pathlib import Path

import boto3
import botocore.config
import pytest

from kiln_harness import KILN_BIN, ROOT, Kiln, launch

VENV_BIN = Path(sys.executable).parent
JS_DIR = Path(__file__).resolve().parent / "js"


def s3_endpoint(server):
    """The object store endpoint of a started kiln (it writes it next to `endpoint`)."""
    return (Path(server.data_dir) / "s3-endpoint").read_text().strip()


def s3_client(server=None, endpoint=None, access_key=None, secret_key=None, region=None, **config):
    """A boto3 S3 client signed with the kiln's admin key unless told otherwise."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint or s3_endpoint(server),
        region_name=region or (server.region if server else "us-east-1"),
        aws_access_key_id=access_key or server.access_key,
        aws_secret_access_key=secret_key or server.secret_key,
        config=botocore.config.Config(
            retries={"max_attempts": 0, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            **config,
        ),
    )


def function_credentials(server, function):
    """The key pair kiln gives a function's sandboxes, from `kiln s3 credentials`."""
    out = json.loads(server.cli("s3", "credentials", function, "--json").stdout)
    return out["accessKeyId"], out["secretAccessKey"]


def vendored_boto3(target):
    """boto3 and its dependencies, with botocore's models cut down to s3 and lambda."""
    site = Path(boto3.__file__).resolve().parent.parent
    for name in ["boto3", "s3transfer", "jmespath", "dateutil", "urllib3"]:
        shutil.copytree(site / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(site / "six.py", target / "six.py")
    data = site / "botocore" / "data"
    shutil.copytree(site / "botocore", target / "botocore",
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or (
                        Path(d) == data and (data / n).is_dir() and n not in ("s3", "lambda"))])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(host, port, timeout=30, netns=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if netns:
            ok = subprocess.run(
                ["ip", "netns", "exec", netns, "python3", "-c",
                 f"import socket; socket.create_connection(('{host}', {port}), 1)"],
                capture_output=True).returncode == 0
        else:
            try:
                socket.create_connection((host, port), 1).close()
                ok = True
            except OSError:
                ok = False
        if ok:
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port}")


class StoreOnlyKiln:
    """`kiln up --store-only`, optionally inside a network namespace."""

    def __init__(self, listen="127.0.0.1:0", netns=None, extra_args=()):
        self.data_dir = Path(tempfile.mkdtemp(prefix="kiln-store-"))
        self.listen = listen
        self.netns = netns
        self.extra_args = list(extra_args)
        self.proc = None
        self.output = []

    def start(self, timeout=30):
        args = [str(KILN_BIN), "up", "--store-only", "--s3-listen", self.listen,
                "--data-dir", str(self.data_dir), "--shutdown-grace", "5", *self.extra_args]
        if self.netns:
            args = ["ip", "netns", "exec", self.netns, *args]
        self.proc, self.endpoint = launch(args, r"object store on (http://\S+)", self.output, timeout)
        creds = json.loads((self.data_dir / "credentials.json").read_text())
        self.access_key = creds["accessKeyId"]
        self.secret_key = creds["secretAccessKey"]
        self.region = creds["region"]
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class WanLink:
    """A network namespace joined to this one by a veth pair, with `delay_ms` of latency each way:
    netem on both ends of the veth where the kernel has it, else a delay relay (delay_relay.py)
    inside the namespace in front of each exposed port."""

    def __init__(self, name, subnet_octet, delay_ms=5):
        self.name = name
        self.host_if, self.ns_if = f"{name}-h", f"{name}-n"
        self.host_ip, self.ns_ip = f"10.231.{subnet_octet}.1", f"10.231.{subnet_octet}.2"
        self.delay_ms = delay_ms
        self.netem = False
        self.relays = []

    def _run(self, *cmd, check=True):
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def __enter__(self):
        self._teardown()
        try:
            self._run("ip", "netns", "add", self.name)
            self._run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self._run("ip", "link", "set", self.ns_if, "netns", self.name)
            self._run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            self._run("ip", "link", "set", self.host_if, "up")
            inside = ("ip", "netns", "exec", self.name)
            self._run(*inside, "ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            self._run(*inside, "ip", "link", "set", self.ns_if, "up")
            self._run(*inside, "ip", "link", "set", "lo", "up")
            delay = ("root", "netem", "delay", f"{self.delay_ms}ms")
            host = self._run("tc", "qdisc", "add", "dev", self.host_if, *delay, check=False)
            if host.returncode == 0:
                self._run(*inside, "tc", "qdisc", "add", "dev", self.ns_if, *delay)
                self.netem = True
            elif "unknown" not in host.stderr:
                raise RuntimeError(f"tc netem failed: {host.stderr}")
        except Exception:
            self._teardown()
            raise
        return self

    def expose(self, port):
        """The address at which the host reaches `ns_ip:port` across the delayed link."""
        if self.netem:
            return f"{self.ns_ip}:{port}"
        relay_port = port + 1
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.name, sys.executable, str(Path(__file__).parent / "delay_relay.py"),
             f"{self.ns_ip}:{relay_port}", f"{self.ns_ip}:{port}", str(self.delay_ms)],
            stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()
        self.relays.append(proc)
        return f"{self.ns_ip}:{relay_port}"

    def describe(self):
        how = "netem on both veth ends" if self.netem else "a delay relay in the namespace (no sch_netem)"
        return f"{self.delay_ms} ms each way, {how}"

    def _teardown(self):
        for proc in self.relays:
            proc.terminate()
            proc.wait(timeout=10)
        self.relays = []
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __exit__(self, *exc):
        self._teardown()


class MotoServer:
    """moto's S3-compatible server (PyPI `moto[server]`), the third-party store of the tests."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = "moto-access-key"
        self.secret_key = "moto-secret-key"
        self.proc = None

    @staticmethod
    def available():
        return (VENV_BIN / "moto_server").exists()

    def start(self):
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port("127.0.0.1", self.port)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


class ProfileKiln(Kiln):
    """A kiln that writes the `kiln` AWS profile, into private AWS config files."""

    def __init__(self, aws_dir, **kwargs):
        super().__init__(**kwargs)
        self.aws_dir = Path(aws_dir)
        self.aws_env = {
            "AWS_CONFIG_FILE": str(self.aws_dir / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.aws_dir / "credentials"),
        }

    def start(self, timeout=30):
        # Kiln.start passes --no-aws-profile; this one must not, so it launches kiln itself.
        args = [str(KILN_BIN), "up", "--listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
                "--memory-budget-mb", "2048", "--shutdown-grace", "10", *self.extra_args]
        env = dict(os.environ, **self.aws_env)
        self.proc, self.endpoint = launch(args, r"listening on (http://\S+)", self.output, timeout, env=env)
        creds = json.loads((self.data_dir / "credentials.json").read_text())
        self.access_key = creds["accessKeyId"]
        self.secret_key = creds["secretAccessKey"]
        self.region = creds["region"]
        return self


def signed_request(server, method, path, body=b"", headers=None):
    """A request signed with the admin key by botocore, to be sent (or tampered with) by hand.
    Returns botocore's prepared request: .url, .method, .headers, .body."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=s3_endpoint(server) + path, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", server.region).add_auth(request)
    return request.prepare()


def start_partial_upload(server, operation, params, total, sent):
    """Starts a PUT (`put_object` or `upload_part`) of `total` bytes through a presigned URL (so the
    payload is unsigned) and sends only `sent` of them; returns the open socket: the upload stays
    in progress until it is closed."""
    import urllib.parse

    url = s3_client(server, signature_version="s3v4").generate_presigned_url(operation, Params=params)
    url = urllib.parse.urlsplit(url)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    head = (f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Content-Length: {total}\r\n\r\n")
    sock.sendall(head.encode() + os.urandom(sent))
    return sock


def object_files(server):
    """Content files in the store (tmp/ holds uploads in progress, data/ published ones)."""
    root = Path(server.data_dir) / "objects"
    tmp = [p for p in (root / "tmp").iterdir()]
    data = [p for shard in (root / "data").iterdir() for p in shard.iterdir()]
    return tmp, data


def wait_until(predicate, timeout=30, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- shared by the test_s3_* files --------------------------------------------------------


@pytest.fixture(scope="module")
def s3(kiln):
    """boto3's S3 client for the session's kiln, with its admin key."""
    return s3_client(kiln)


@pytest.fixture
def bucket(s3):
    """A new bucket of the test's own."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def status(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def keys_of(s3, bucket, **kwargs):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, **kwargs).get("Contents", [])]


def send(prepared, body=None):
    """Sends a prepared request (possibly with another body than the one signed)."""
    url = urllib.parse.urlsplit(prepared.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request(prepared.method, url.path + (f"?{url.query}" if url.query else ""),
                 body=prepared.body if body is None else body, headers=dict(prepared.headers))
    response = conn.getresponse()
    return response.status, response.read().decode(errors="replace")


def aws_chunked_put(server, path, data, trailer_value, encoding="aws-chunked"):
    """A PUT the way the JS SDK streams one: aws-chunked, unsigned payload, CRC32 in a trailer."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class TrailerAuth(S3SigV4Auth):
        def payload(self, request):
            return "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

    half = len(data) // 2
    body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in (data[:half], data[half:]))
    body += b"0\r\n" + f"x-amz-checksum-crc32:{trailer_value}\r\n\r\n".encode()
    request = AWSRequest(method="PUT", url=s3_endpoint(server) + path, data=body, headers={
        "Content-Encoding": encoding, "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32", "x-amz-sdk-checksum-algorithm": "CRC32"})
    TrailerAuth(Credentials(server.access_key, server.secret_key), "s3", server.region).add_auth(request)
    return send(request.prepare())
