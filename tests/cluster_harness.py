"""A kiln cluster on one host: 3 etcd members, kiln nodes, a shared store and a client, each in a
network namespace of its own, joined by a bridge in a switch namespace.

    switch namespace (bridge br0)
      ├─ e1, e2, e3   etcd 3.4 members      10.242.0.11-13
      ├─ n1, n2, n3   kiln nodes            10.242.0.21-23
      ├─ store        kiln up --store-only  10.242.0.30
      └─ client       the CLI and requests  10.242.0.40

Processes are started with `nsenter --net=/run/netns/NAME` (not `ip netns exec`, which remounts
/sys: kiln would find no cgroup hierarchy). A partition is `ip link set PORT down` in the switch
namespace (no netem on this kernel); a kill is `kill -9` of the process. Teardown stops only what
the harness started and deletes only the namespaces it made.

`Cluster(tls=True)` serves etcd's clients over TLS with client certificates (a CA, a server and a
client certificate made with openssl); `auth=True` turns on etcd's auth with a `root` user and a
`kiln` user whose role reads and writes `/kiln/`; `etcd_args` go to every member.
"""

import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln_harness import KILN_BIN, detach_mounts, launch

# A function that reports the token of its event to the marks server (run with host networking),
# once it has run: `{"token", "url", "sleep"}`.
MARKING_FUNCTION = """import time, urllib.request
def handler(event, context):
    time.sleep(event.get("sleep", 0))
    urllib.request.urlopen(urllib.request.Request(event["url"], data=event["token"].encode()), timeout=30).read()
    return {}
"""
# Appends each token POSTed to it to a file, one a line, flushed at once.
MARKS_SERVER = """import http.server, sys
out = open(sys.argv[3], "a", buffering=1)
class Marks(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        out.write(self.rfile.read(int(self.headers["content-length"])).decode() + "\\n")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Marks).serve_forever()
"""
MARKS_PORT = 8765

SUBNET = "10.242.0"
ETCD_PORT = 2379
API_PORT = 9000


def require(*commands):
    """Fails (never skips) when a tool the cluster tests need is missing: CI must install it."""
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        raise RuntimeError(
            f"the cluster tests need {', '.join(missing)}: run scripts/setup-test-env.sh "
            "(Debian etcd-server, etcd-client)")


def run(*args, check=True, **kwargs):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kwargs)


_CLUSTERS = itertools.count()

ROOT_PASSWORD = "root-Pa55"
KILN_USER = "kiln"
KILN_PASSWORD = "kiln-Pa55-do-not-show"


def make_certificates(directory, server_ips):
    """A CA, a server certificate for `server_ips` and 127.0.0.1, and a client certificate (whose
    CN is no etcd user: a request is authorised by its password, not its certificate), as PEM
    files in `directory`: {"ca", "server", "server_key", "client", "client_key"}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"ca": directory / "ca.pem"}
    ca_key = directory / "ca.key"
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(ca_key), "-out", str(files["ca"]), "-days", "2", "-subj", "/CN=kiln test etcd CA")
    sans = ",".join(f"IP:{ip}" for ip in [*server_ips, "127.0.0.1"])
    for name, cn, extensions in (
            ("server", "etcd", [f"subjectAltName={sans}", "extendedKeyUsage=serverAuth,clientAuth"]),
            ("client", "kiln-node", ["extendedKeyUsage=clientAuth"])):
        key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}")
        ext = directory / f"{name}.ext"
        ext.write_text("\n".join(extensions) + "\n")
        run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(files["ca"]), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))
        files[name], files[f"{name}_key"] = cert, key
    return files


class Cluster:
    """A switch, namespaces and the processes in them; use as a context manager."""

    def __init__(self, nodes=2, lease_ttl=5, node_args=None, tls=False, auth=False, etcd_args=()):
        require("etcd", "etcdctl", "nsenter", "ip", *(["openssl"] if tls else []))
        # Unique on the host: per process, and per cluster within it (two may run at once).
        self.tag = f"kc{os.getpid() % 100000}{chr(ord('a') + next(_CLUSTERS) % 26)}"
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-cluster-"))
        self.lease_ttl = lease_ttl
        self.namespaces = []
        self.procs = {}
        self.outputs = {}
        self.node_count = nodes
        # More `kiln up` flags per node (a function of the node's name), e.g. --cgroup-parent.
        self.extra_node_args = node_args or (lambda name: [])
        self.credentials_file = self.dir / "credentials.json"
        self.tls, self.auth, self.etcd_args = tls, auth, list(etcd_args)
        self.scheme = "https" if tls else "http"
        self.certs = make_certificates(self.dir / "certs", [self.ip(f"e{i}") for i in (1, 2, 3)]) if tls else {}
        self.etcd_endpoints = ",".join(f"{self.scheme}://{self.ip(f'e{i}')}:{ETCD_PORT}" for i in (1, 2, 3))

    # -- addresses and namespaces

    @staticmethod
    def ip(name):
        host = {"store": 30, "client": 40}.get(name)
        if host is None:
            host = {"e": 10, "n": 20}[name[0]] + int(name[1:])
        return f"{SUBNET}.{host}"

    def netns(self, name):
        return f"{self.tag}-{name}"

    def port(self, name):
        """The switch-side end of NAME's link."""
        return f"p-{name}"

    def _add_namespace(self, name):
        ns = self.netns(name)
        run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        return ns

    def _build_network(self):
        switch = self._add_namespace("sw")
        run("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", switch, "link", "set", "br0", "up")
        names = ["e1", "e2", "e3", "store", "client"] + [f"n{i}" for i in range(1, self.node_count + 1)]
        for name in names:
            ns = self._add_namespace(name)
            run("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", self.port(name), "netns", switch)
            run("ip", "-n", switch, "link", "set", self.port(name), "master", "br0")
            run("ip", "-n", switch, "link", "set", self.port(name), "up")
            run("ip", "-n", ns, "addr", "add", f"{self.ip(name)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def enter(self, name):
        return ["nsenter", f"--net=/run/netns/{self.netns(name)}"]

    # -- processes

    def _start_etcd(self, name):
        ip = self.ip(name)
        initial = ",".join(f"e{i}=http://{self.ip(f'e{i}')}:2380" for i in (1, 2, 3))
        args = self.enter(name) + [
            "etcd", "--name", name, "--data-dir", str(self.dir / name),
            "--listen-peer-urls", f"http://{ip}:2380", "--initial-advertise-peer-urls", f"http://{ip}:2380",
            "--listen-client-urls", f"{self.scheme}://{ip}:{ETCD_PORT}",
            "--advertise-client-urls", f"{self.scheme}://{ip}:{ETCD_PORT}",
            "--initial-cluster", initial, "--initial-cluster-token", self.tag, "--initial-cluster-state", "new",
            "--heartbeat-interval", "100", "--election-timeout", "1000", "--pre-vote=true",
            "--logger", "zap", "--log-level", "error",
        ]
        if self.tls:
            args += ["--cert-file", str(self.certs["server"]), "--key-file", str(self.certs["server_key"]),
                     "--trusted-ca-file", str(self.certs["ca"]), "--client-cert-auth"]
        args += self.etcd_args
        log = open(self.dir / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def etcdctl_flags(self, root=True):
        """etcdctl's TLS flags, and root's credentials once auth is on."""
        flags = []
        if self.tls:
            flags += [f"--cacert={self.certs['ca']}", f"--cert={self.certs['client']}",
                      f"--key={self.certs['client_key']}"]
        if self.auth and root and getattr(self, "auth_enabled", False):
            flags.append(f"--user=root:{ROOT_PASSWORD}")
        return flags

    def etcdctl(self, *args, check=True, timeout=10, endpoints=None):
        return run(*self.enter("client"), "etcdctl", f"--endpoints={endpoints or self.etcd_endpoints}",
                   *self.etcdctl_flags(), *args, check=check, timeout=timeout, env=dict(os.environ, ETCDCTL_API="3"))

    def _enable_auth(self):
        """etcd's auth, as docs/cluster.md sets it up: root, and a kiln user that reads and
        writes the cluster's prefix."""
        self.etcdctl("user", "add", f"root:{ROOT_PASSWORD}")
        self.etcdctl("user", "add", f"{KILN_USER}:{KILN_PASSWORD}")
        self.etcdctl("role", "add", "kiln-role")
        self.etcdctl("role", "grant-permission", "kiln-role", "--prefix=true", "readwrite", "/kiln/")
        self.etcdctl("user", "grant-role", KILN_USER, "kiln-role")
        self.etcdctl("auth", "enable")
        self.auth_enabled = True

    def wait_etcd(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.etcdctl("endpoint", "health", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("etcd did not become healthy:\n" + self.etcdctl("endpoint", "health", check=False).stderr)

    def etcd_leader(self):
        """The name (e1..e3) of the etcd member that leads now, asked of each live member."""
        for name in ("e1", "e2", "e3"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            out = self.etcdctl("endpoint", "status", "-w", "json", check=False,
                               endpoints=f"{self.scheme}://{self.ip(name)}:{ETCD_PORT}")
            if out.returncode != 0:
                continue
            status = json.loads(out.stdout)[0]["Status"]
            if status["leader"] == status["header"]["member_id"]:
                return name
        raise RuntimeError("no etcd member says it leads")

    def _start_store(self):
        data = self.dir / "store"
        args = self.enter("store") + [
            str(KILN_BIN), "up", "--store-only", "--data-dir", str(data),
            "--s3-listen", f"{self.ip('store')}:9001", "--no-aws-profile",
        ]
        self.outputs["store"] = []
        self.procs["store"], self.store_endpoint = launch(args, r"object store on (http://\S+)", self.outputs["store"])
        creds = json.loads((data / "credentials.json").read_text())
        self.store_keys = (creds["accessKeyId"], creds["secretAccessKey"])

    def node_args(self, name):
        ip = self.ip(name)
        return [
            str(KILN_BIN), "up",
            "--listen", f"{ip}:{API_PORT}", "--s3-listen", f"{ip}:9001",
            "--data-dir", str(self.dir / name), "--no-aws-profile",
            "--memory-budget-mb", "1024", "--warm-standbys", "0", "--shutdown-grace", "5",
            "--cluster", self.etcd_endpoints, "--node-id", name,
            "--advertise", f"{ip}:{API_PORT}", "--peer-listen", f"{ip}:9100",
            "--credentials-file", str(self.credentials_file),
            "--node-lease-ttl", str(self.lease_ttl),
            "--s3-backend", self.store_endpoint,
            *self.tls_args(),
            *self.extra_node_args(name),
        ]

    def tls_args(self):
        """`kiln up`'s flags for etcd's TLS and auth (the password goes in the environment)."""
        args = []
        if self.tls:
            args += ["--cluster-ca", str(self.certs["ca"]), "--cluster-cert", str(self.certs["client"]),
                     "--cluster-key", str(self.certs["client_key"])]
        if self.auth:
            args += ["--cluster-user", KILN_USER]
        return args

    def node_env(self):
        env = dict(os.environ, KILN_S3_BACKEND_ACCESS_KEY=self.store_keys[0],
                   KILN_S3_BACKEND_SECRET_KEY=self.store_keys[1])
        if self.auth:
            env["KILN_CLUSTER_PASSWORD"] = KILN_PASSWORD
        return env

    def start_node(self, name, timeout=60):
        env = self.node_env()
        self.outputs[name] = []
        # A node killed before left its code-slot mount under its data dir.
        detach_mounts(self.dir / name)
        self.procs[name], _ = launch(self.enter(name) + self.node_args(name), r"listening on (http://\S+)",
                                     self.outputs[name], timeout=timeout, env=env)
        return self.procs[name]

    def kill9(self, name):
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, name, timeout=30):
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=timeout)
        return proc.returncode

    def partition(self, name):
        run("ip", "-n", self.netns("sw"), "link", "set", self.port(name), "down")

    def heal(self, name):
        run("ip", "-n", self.netns("sw"), "link", "set", self.port(name), "up")

    # -- the client's side

    def credentials(self):
        creds = json.loads(self.credentials_file.read_text())
        return creds["accessKeyId"], creds["secretAccessKey"]

    def cli(self, *args, on=None, via=None, check=True, credentials=None, timeout=30):
        """The kiln CLI against node `on`, run in namespace `via` (the client's by default), signed
        with the cluster's credentials (or `credentials`)."""
        key, secret = credentials or self.credentials()
        target = on or "n1"
        env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
                   KILN_ENDPOINT=f"http://{self.ip(target)}:{API_PORT}")
        result = run(*self.enter(via or "client"), str(KILN_BIN), *args, check=False, env=env, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kiln {' '.join(args)} on {target} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def cli_metrics(self, on, via=None):
        """The node's /metrics (unsigned), fetched from namespace `via` (the client's by default)."""
        code = ("import sys, urllib.request; "
                "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")
        url = f"http://{self.ip(on)}:{API_PORT}/metrics"
        return run(*self.enter(via or "client"), sys.executable, "-c", code, url, timeout=30).stdout

    def endpoint(self, node):
        return f"http://{self.ip(node)}:{API_PORT}"

    def lambda_op(self, op, timeout=120, **args):
        """One of tests/cluster/lambda_ops.py's operations, run in the client's namespace with the
        cluster's credentials; its JSON result."""
        key, secret = self.credentials()
        env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        script = Path(__file__).parent / "cluster" / "lambda_ops.py"
        result = run(*self.enter("client"), sys.executable, str(script), op, json.dumps(args),
                     env=env, timeout=timeout, check=False)
        if result.returncode != 0:
            raise AssertionError(f"lambda_ops {op} failed:\n{result.stdout}\n{result.stderr}")
        return json.loads(result.stdout)


    def answer(self, node, name):
        """The `marker` the function `name` answers with when invoked through `node` (None
        until it can)."""
        result = self.lambda_op("invoke", endpoint=self.endpoint(node), name=name)
        if "error" in result or result["functionError"]:
            return None
        return result["payload"].get("marker")
    def start_marks_server(self):
        """A server in the client's namespace that records the tokens MARKING_FUNCTION reports;
        stopped with the cluster."""
        self.marks_file = self.dir / "marks.txt"
        self.marks_file.touch()
        self.marks_url = f"http://{self.ip('client')}:{MARKS_PORT}/"
        self.procs["marks"] = subprocess.Popen(
            self.enter("client") + [sys.executable, "-c", MARKS_SERVER, self.ip("client"), str(MARKS_PORT),
                                    str(self.marks_file)])

    def marks(self):
        """Each token reported so far, with how many times."""
        counts = {}
        for token in self.marks_file.read_text().split():
            counts[token] = counts.get(token, 0) + 1
        return counts

    def status(self, on="n1", via=None):
        """`kiln cluster status --json` as seen by node `on`."""
        return json.loads(self.cli("--json", "cluster", "status", on=on, via=via).stdout)

    def states(self, on="n1", via=None):
        return {n["id"]: n["state"] for n in self.status(on, via)["nodes"]}

    def wait_for(self, predicate, timeout, interval=0.1, what="condition"):
        """Polls `predicate` until it returns a true value; returns it and the seconds it took."""
        start = time.time()
        last = None
        while time.time() - start < timeout:
            try:
                last = predicate()
            except (AssertionError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
                last = e
            else:
                if last:
                    return last, time.time() - start
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")

    # -- life cycle

    def __enter__(self):
        try:
            self._build_network()
            for name in ("e1", "e2", "e3"):
                self._start_etcd(name)
            self.wait_etcd()
            if self.auth:
                self._enable_auth()
            self._start_store()
            for i in range(1, self.node_count + 1):
                self.start_node(f"n{i}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if name.startswith("n") or name == "store" else signal.SIGKILL)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)
        self.namespaces = []
        for i in range(1, self.node_count + 1):
            data = self.dir / f"n{i}"
            detach_mounts(data)
            remove_cgroups(data)
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self):
        return {name: "".join(lines) for name, lines in self.outputs.items()}


def remove_cgroups(data_dir):
    """Removes the empty cgroup parents a killed node left (kiln names them after its data dir)."""
    try:
        real = os.path.realpath(data_dir)
    except OSError:
        return
    name = "kiln-" + hashlib.sha256(real.encode()).hexdigest()[:12]
    for hierarchy in Path("/sys/fs/cgroup").glob("*"):
        parent = hierarchy / name
        if parent.is_dir():
            for child in sorted(parent.rglob("*"), key=lambda p: -len(p.parts)):
                if child.is_dir():
                    try:
                        child.rmdir()
                    except OSError:
                        pass
            try:
                parent.rmdir()
            except OSError:
                pass
