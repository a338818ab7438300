"""Start real kiln servers for tests and talk to them with boto3."""

import base64
import glob
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import boto3
import botocore.config

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = Path(__file__).resolve().parent / "functions"
KILN_BIN = Path(os.environ.get("KILN_BIN", ROOT / "target" / "debug" / "kiln"))
PYTHON_RUNTIME = "python3.11"
NODE_RUNTIME = "nodejs20.x"


def zip_dir(path: Path) -> bytes:
    """Zip a fixture directory, keeping executable bits (bootstrap files need them)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(Path(path).rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                info = zipfile.ZipInfo(str(file.relative_to(path)))
                info.external_attr = (file.stat().st_mode & 0o777) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, file.read_bytes())
    return buf.getvalue()


def zip_files(files: dict) -> bytes:
    """Zip {name: text or bytes}; names ending in 'bootstrap' are executable."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            info = zipfile.ZipInfo(name)
            mode = 0o755 if name.endswith("bootstrap") else 0o644
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, content)
    return buf.getvalue()


def detach_mounts(directory):
    """Detaches what a kiln that was killed left mounted under its data dir (its code-slot mount):
    a graceful stop detaches it, a kill -9 cannot. A restart on the same data dir would too."""
    prefix = os.path.realpath(directory).rstrip("/") + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    for point in reversed(points):
        if (point + "/").startswith(prefix):
            subprocess.run(["umount", "-l", point], check=False, stderr=subprocess.DEVNULL)


def launch(args, ready, output, timeout=30, env=None):
    """Start `args`, wait for a line matching the regex `ready`, keep draining its output into
    `output`; returns the process and the regex's first group (the endpoint)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{args[0]} exited during start:\n" + "".join(output))
        output.append(line)
        match = re.search(ready, line)
        if match:
            threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
            return proc, match.group(1)
    raise RuntimeError(f"{args[0]} did not start:\n" + "".join(output))


class Kiln:
    """A real `kiln up` process on a free port with its own data dir."""

    def __init__(self, data_dir=None, extra_args=(), env=None):
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kiln-test-"))
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.endpoint = None
        self.console = None
        self.output = []

    def start(self, timeout=30):
        args = [
            str(KILN_BIN), "up",
            "--listen", "127.0.0.1:0",
            "--data-dir", str(self.data_dir),
            "--no-aws-profile",
            "--async-retry-delay-ms", "300",
            "--shutdown-grace", "10",
            *self.extra_args,
        ]
        if "--memory-budget-mb" not in self.extra_args:
            args += ["--memory-budget-mb", "8192"]
        self.proc, self.endpoint = launch(args, r"listening on (http://\S+)", self.output, timeout, env=self.env)
        # The console's own listener (an origin apart from the API's), unless --ui off.
        consoles = [m.group(1) for line in self.output if (m := re.search(r"console on (http://\S+)/ui/", line))]
        self.console = consoles[-1] if consoles else None
        creds = json.loads((self.data_dir / "credentials.json").read_text())
        self.access_key = creds["accessKeyId"]
        self.secret_key = creds["secretAccessKey"]
        self.region = creds["region"]
        return self

    def stop(self, timeout=30):
        """Graceful shutdown (SIGTERM); returns the exit code."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        return self.proc.returncode if self.proc else None

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self):
        self.stop()
        return self.start()

    def cleanup(self):
        self.stop()
        detach_mounts(self.data_dir)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def client(self, service="lambda", retries=0, read_timeout=60):
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=botocore.config.Config(
                retries={"max_attempts": retries, "mode": "standard"},
                read_timeout=read_timeout,
                connect_timeout=5,
            ),
        )

    def signed_request(self, method, path, body=b"", headers=None):
        """A raw request signed with kiln's credentials (for kiln's extensions, which boto3 cannot send)."""
        import botocore.auth
        import botocore.awsrequest
        import botocore.credentials
        import requests
        url = self.endpoint + path
        request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        creds = botocore.credentials.Credentials(self.access_key, self.secret_key)
        botocore.auth.SigV4Auth(creds, "lambda", self.region).add_auth(request)
        return requests.request(method, url, data=body, headers=dict(request.headers.items()), timeout=60)

    def cli(self, *args, check=True, timeout=60):
        """Run the kiln CLI against this server."""
        env = dict(os.environ, KILN_ENDPOINT=self.endpoint, KILN_DATA_DIR=str(self.data_dir))
        env.pop("AWS_ACCESS_KEY_ID", None)
        env.pop("AWS_SECRET_ACCESS_KEY", None)
        result = subprocess.run([str(KILN_BIN), *args], capture_output=True, text=True, env=env, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kiln {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def deploy(self, name, runtime, handler, code=None, files=None, **config):
        """Create (or replace) a function from a fixture directory name, a path, or a dict of files."""
        if files is not None:
            zipped = zip_files(files)
        else:
            path = Path(code)
            if not path.is_absolute():
                path = FUNCTIONS / code
            zipped = zip_dir(path)
        lam = self.client()
        try:
            lam.delete_function(FunctionName=name)
        except lam.exceptions.ResourceNotFoundException:
            pass
        params = dict(
            FunctionName=name,
            Runtime=runtime,
            Role="arn:aws:iam::000000000000:role/test",
            Handler=handler,
            Code={"ZipFile": zipped},
        )
        params.update(config)
        return lam.create_function(**params)

    def invoke(self, name, event=None, **kwargs):
        """Invoke synchronously; returns (parsed payload, raw response)."""
        lam = self.client()
        payload = json.dumps(event if event is not None else {})
        response = lam.invoke(FunctionName=name, Payload=payload, **kwargs)
        body = response["Payload"].read()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body
        return parsed, response

    def settled(self, name, timeout=120):
        """Waits until `name` is neither being created nor updated, as boto3's `function_updated_v2`
        waiter does (polling faster): its invocations run its latest code, and the next change is
        accepted (Lambda refuses a change meanwhile with 409)."""
        lam = self.client()

        def done():
            c = lam.get_function_configuration(FunctionName=name)
            return c.get("State") != "Pending" and c.get("LastUpdateStatus") != "InProgress"
        wait_for(done, timeout=timeout, interval=0.05, what=f"{name}'s last change to settle")

    def log_tail(self, response):
        return base64.b64decode(response.get("LogResult", "")).decode()


def node_status(server):
    """The node's part of `kiln status --json`: instances, snapshots, budget."""
    return json.loads(server.cli("--json", "status").stdout)["node"]


def cgroup_parent(server):
    """The per-data-dir cgroup parent kiln creates (server.rs: kiln-<sha256(data dir)[:12]>)."""
    digest = hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()
    return "kiln-" + digest[:12]


def kill_instance(server, instance_id):
    """SIGKILLs every process of one instance, through its cgroup (any hierarchy), unseen by kiln, and returns
    once they have exited: a signal is delivered asynchronously, and a request sent at once could otherwise still
    reach the dying runtime's socket."""
    pattern = f"/sys/fs/cgroup/**/{cgroup_parent(server)}/i{instance_id}/cgroup.procs"
    pids = {int(pid) for procs in glob.glob(pattern, recursive=True) for pid in open(procs).read().split()}
    assert pids, f"no processes in the cgroup of instance {instance_id}"
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def exited(pid):
        # A zombie has already closed its files; only its parent's wait is missing.
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return True

    wait_for(lambda: all(exited(pid) for pid in pids), timeout=10, what=f"the processes of instance {instance_id} to exit")


def owned_cgroups(node, instances=True):
    """The instance cgroups (`i<id>`) a node's status accounts for: its instances (unless not asked
    for), its snapshots (fork servers, standbys, runtime standbys) and their spare forks."""
    snapshots = node.get("snapshots", [])
    owned = {f"i{s['id']}" for s in snapshots if s.get("id")} | {f"i{s['spare']}" for s in snapshots if s.get("spare")}
    owned |= {f"i{i}" for s in snapshots for i in s.get("standby_ids", [])}
    if instances:
        owned |= {f"i{i['id']}" for i in node["instances"]}
    return owned


def snapshot_of(server, function):
    return next((s for s in node_status(server).get("snapshots", []) if s["function"] == function), None)


def wait_for(predicate, timeout=30, interval=0.1, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_ready(server, function, revision=None, timeout=60):
    """Waits for the function's snapshot (fork server, standby, wasm module) to be ready."""
    def ready():
        s = snapshot_of(server, function)
        return s if s and s["state"] == "ready" and (revision is None or s["revision"] == revision) else None
    return wait_for(ready, timeout=timeout, what=f"the snapshot of {function} to be ready")


def wait_spare(server, function, timeout=60):
    """Waits for the function's fork server to have its spare fork (made ahead of demand) ready."""
    def ready():
        s = snapshot_of(server, function)
        return s if s and s["state"] == "ready" and s.get("spare_ready") else None
    return wait_for(ready, timeout=timeout, what=f"the spare fork of {function} to be ready")


def wait_standby(server, runtime, timeout=60):
    """Waits for a runtime-generic standby of `runtime` (the warm path) to be ready."""
    def ready():
        return next((s for s in node_status(server).get("snapshots", [])
                     if s["function"] == runtime and s["kind"] == "runtime-standby" and s["state"] == "ready"),
                    None)
    return wait_for(ready, timeout=timeout, what=f"a standby of {runtime} to be ready")


def start_path(report):
    """The `Start Path` of a REPORT log line."""
    match = re.search(r"Start Path: (\w+)", report)
    return match.group(1) if match else None


class Gate:
    """A TCP listener on the host that a function's init (with the host's network: tag
    kiln:network=host) connects to and waits on until the test opens it: the function then stays
    `Pending` or `InProgress` for as long as the test needs, whatever the machine's speed. An open
    gate lets every later connection through at once."""

    def __init__(self):
        self.opened = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def init(self):
        """Python source of an init that waits on this gate."""
        return GATED_INIT.replace('int(os.environ["GATE"])', str(self.port))

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._release, args=(conn,), daemon=True).start()

    def _release(self, conn):
        with conn:
            self.opened.wait()
            conn.sendall(b"go")

    def open(self):
        self.opened.set()

    def hold(self):
        """Closes the gate again: inits that arrive from now on wait until it opens."""
        self.opened.clear()

    def close(self):
        self.opened.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# An init that waits on the Gate whose port is the GATE environment variable.
GATED_INIT = """
import os, socket

with socket.create_connection(("127.0.0.1", int(os.environ["GATE"]))) as gate:
    gate.recv(2)
"""
