"""The sandbox's security properties, each asserted from inside a real function.

The probe function (tests/functions/sandbox_probe) reports what it sees and which system calls fail with
which errno; the tests compare that with what the host has.
"""

import base64
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

from kiln_harness import FUNCTIONS, NODE_RUNTIME, PYTHON_RUNTIME, cgroup_parent, owned_cgroups

DENIED = {"ENOENT", "EACCES", "EPERM"}
CGROUP_ROOT = Path("/sys/fs/cgroup")


def probe(server, name, event):
    result, response = server.invoke(name, event, LogType="Tail")
    assert "FunctionError" not in response, (result, server.log_tail(response))
    return result


def code_dir_on_host(server, created):
    digest = base64.b64decode(created["CodeSha256"]).hex()
    return Path(os.path.realpath(server.data_dir)) / "store" / "code" / digest


def api_port(server):
    return urlparse(server.endpoint).port


def processes_with(marker):
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids



def leaked_cgroups(server):
    """Instance cgroup directories on the host (any hierarchy) that belong to no live instance or snapshot."""
    parent = cgroup_parent(server)
    node = json.loads(server.cli("--json", "status").stdout)["node"]
    # Function snapshots (fork servers, standby instances, spare forks) have cgroups of their own too.
    live = owned_cgroups(node)
    leaked = set()
    for base in [CGROUP_ROOT / parent] + [CGROUP_ROOT / c / parent for c in ("memory", "pids", "cpu")]:
        if base.is_dir():
            leaked |= {d.name for d in base.iterdir() if d.is_dir() and d.name not in live}
    return leaked


def wait_for(predicate, timeout=30, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def probe_fn(kiln):
    return kiln.deploy("sbx-probe", PYTHON_RUNTIME, "app.handler", code="sandbox_probe", Timeout=30)


# ------------------------------------------------------------------------------------------------- files
def test_host_files_are_invisible(kiln, probe_fn):
    other = kiln.deploy("sbx-other", PYTHON_RUNTIME, "app.echo", code="python_basic")
    # Its package is extracted once it is Active.
    kiln.settled("sbx-other")
    other_code = code_dir_on_host(kiln, other)
    own_code = code_dir_on_host(kiln, probe_fn)
    assert (other_code / "app.py").is_file() and (own_code / "app.py").is_file()
    secret = Path("/root") / f"kiln-sandbox-secret-{uuid.uuid4().hex}"
    secret.write_text("top secret")
    try:
        data_dir = Path(os.path.realpath(kiln.data_dir))
        paths = [
            "/etc/shadow", "/etc/sudoers", str(secret), "/root/.bash_history", "/root/.ssh",
            str(data_dir), str(data_dir / "credentials.json"), str(data_dir / "store"),
            str(other_code), str(other_code / "app.py"), str(own_code),
            "/proc/1/environ", "/proc/1/root", "/proc/1/cwd", "/sys/fs/cgroup", "/var/run/docker.sock",
            "/home", "/boot", "/dev/mem", "/dev/kmsg",
        ]
        seen = probe(kiln, "sbx-probe", {"op": "read", "paths": paths + ["/root", "/var/task"]})
        for path in paths:
            assert seen[path].get("error") in DENIED, (path, seen[path])
        # /root exists only as far as the runtime's own installation needs (pyenv keeps Python there).
        allowed = set()
        if sys.base_prefix.startswith("/root/"):
            allowed.add(Path(sys.base_prefix).relative_to("/root").parts[0])
        root_listing = seen["/root"].get("listing", [])
        assert set(root_listing) <= allowed, root_listing
        # /var/task holds this function's code and nothing else.
        assert seen["/var/task"]["listing"] == ["app.py"]
    finally:
        secret.unlink()


def test_tmp_and_shm_are_private_to_each_instance(kiln, probe_fn):
    kiln.deploy("sbx-probe-2", PYTHON_RUNTIME, "app.handler", code="sandbox_probe")
    name = f"kiln-private-{uuid.uuid4().hex}"
    paths = [f"/tmp/{name}", f"/dev/shm/{name}"]
    assert probe(kiln, "sbx-probe", {"op": "put_tmp", "paths": paths, "value": "mine"}) == "ok"
    assert all(probe(kiln, "sbx-probe", {"op": "read", "paths": paths})[p] == {"bytes": 4} for p in paths)
    seen = probe(kiln, "sbx-probe-2", {"op": "read", "paths": paths + ["/tmp"]})
    for path in paths:
        assert seen[path] == {"error": "ENOENT"}, (path, seen[path])
    assert name not in seen["/tmp"]["listing"]
    assert not list(Path("/tmp").glob(name)) and not list(Path("/dev/shm").glob(name)), "written to the host"


def test_no_host_descriptor_leaks_into_the_sandbox(kiln, probe_fn):
    fds = probe(kiln, "sbx-probe", {"op": "fds"})
    data_dir = os.path.realpath(kiln.data_dir)
    for fd, target in fds.items():
        if target == "ENOENT":
            continue  # the descriptor of the /proc/self/fd listing itself, closed by then
        assert data_dir not in target and "cgroup" not in target, (fd, target)
        assert target.startswith(("pipe:", "socket:", "anon_inode:", "/dev/null", "/proc/", "/var/task",
                                  "/opt/kiln", "/tmp")) or target.startswith(sys.base_prefix), (fd, target)
    assert fds["0"] == "/dev/null"
    assert fds["1"].startswith("pipe:") and fds["2"] == fds["1"]


def test_read_only_code_and_root(kiln, probe_fn):
    seen = probe(kiln, "sbx-probe", {"op": "write", "paths": [
        "/var/task/new.py", "/var/task/app.py", "/new-file", "/etc/passwd", "/usr/evil", "/opt/kiln/shim.py",
        "/tmp/ok.txt", "/dev/shm/ok.txt"]})
    for path in ["/var/task/new.py", "/var/task/app.py", "/new-file", "/etc/passwd", "/usr/evil",
                 "/opt/kiln/shim.py"]:
        assert seen[path] in {"EROFS", "EACCES"}, (path, seen[path])
    assert seen["/var/task/new.py"] == "EROFS"
    assert seen["/tmp/ok.txt"] == "ok"
    assert seen["/dev/shm/ok.txt"] == "ok"
    mounts = {fields[4]: fields for fields in probe(kiln, "sbx-probe", {"op": "mountinfo"})}
    task = mounts["/var/task"]
    assert "ro" in task[5].split(","), task
    assert "nosuid" in task[5].split(",") and "nodev" in task[5].split(","), task
    assert "ro" in mounts["/"][5].split(","), mounts["/"]
    assert "rw" in mounts["/tmp"][5].split(","), mounts["/tmp"]


def test_tmp_is_size_limited(kiln):
    # /tmp is a disk of EphemeralStorage's size (512 MB by default), not memory (tests/sandbox/test_tmp_disk.py).
    kiln.deploy("sbx-tmp", PYTHON_RUNTIME, "app.handler", code="sandbox_probe", Timeout=60, MemorySize=256)
    result = probe(kiln, "sbx-tmp", {"op": "fill_tmp"})
    assert result["error"] == "ENOSPC", result
    assert 512 <= result["written_mb"] <= 560, result
    # The space is freed again, and a later invoke can write.
    assert probe(kiln, "sbx-tmp", {"op": "write", "paths": ["/tmp/after.txt"]}) == {"/tmp/after.txt": "ok"}
    kiln.client().delete_function(FunctionName="sbx-tmp")  # gives its memory back to the shared server


# ------------------------------------------------------------------------------------------------- identity
def test_only_its_own_processes_are_visible(kiln, probe_fn):
    procs = probe(kiln, "sbx-probe", {"op": "processes"})
    # The sandbox's init and the runtime; nothing of the host, kiln's server least of all.
    assert 2 <= len(procs) <= 4, procs
    assert all(int(pid) < 100 for pid in procs), procs
    server = " ".join(kiln.proc.args)
    for cmdline in procs.values():
        assert " up " not in cmdline and "--data-dir" not in cmdline and cmdline not in server, procs
    assert any(cmdline.endswith("/opt/kiln/shim.py") for cmdline in procs.values()), procs


def test_unprivileged_without_capabilities(kiln, probe_fn):
    seen = probe(kiln, "sbx-probe", {"op": "status"})
    assert seen["uid"] != 0 and seen["euid"] != 0 and seen["gid"] != 0, seen
    status = seen["status"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, (cap, status)
    assert status["NoNewPrivs"] == "1", status
    assert status["Seccomp"] == "2", status
    assert status["Groups"] == "", status
    assert seen["hostname"] != os.uname().nodename


def test_dangerous_system_calls_fail(kiln, probe_fn):
    seen = probe(kiln, "sbx-probe", {"op": "syscalls"})
    for call, outcome in seen.items():
        assert outcome != "ok", (call, seen)
    for call in ("mount", "mount_bind", "umount", "unshare_user", "unshare_mount", "unshare_net", "unshare_pid",
                 "ptrace_traceme", "ptrace_attach_init", "chroot", "setuid_root", "kill_init", "sethostname"):
        assert seen[call] == "EPERM", (call, seen)


# ------------------------------------------------------------------------------------------------- resources
def test_memory_limit_kills_with_out_of_memory(kiln):
    kiln.deploy("sbx-hog", PYTHON_RUNTIME, "app.handler", code="memory_hog", MemorySize=128, Timeout=60)
    fits, response = kiln.invoke("sbx-hog", {"mb": 48})
    assert "FunctionError" not in response and fits == {"allocated_mb": 48}, fits
    result, response = kiln.invoke("sbx-hog", {"mb": 1024}, LogType="Tail")
    assert response.get("FunctionError") == "Unhandled", result
    assert result["errorType"] == "Runtime.OutOfMemory", result
    assert "Runtime exited with error: signal: killed" in result["errorMessage"], result
    assert "Memory Size: 128 MB" in kiln.log_tail(response)
    after, response = kiln.invoke("sbx-hog", {"mb": 16})
    assert "FunctionError" not in response and after == {"allocated_mb": 16}, after


def test_node_memory_limit(kiln):
    kiln.deploy("sbx-node-hog", NODE_RUNTIME, "index.handler", code="node_memory_hog", MemorySize=128, Timeout=60)
    fits, response = kiln.invoke("sbx-node-hog", {"mb": 32})
    assert "FunctionError" not in response and fits == {"allocated_mb": 32}, fits
    result, response = kiln.invoke("sbx-node-hog", {"mb": 1024})
    assert response.get("FunctionError") == "Unhandled", result
    assert result["errorType"] == "Runtime.OutOfMemory", result
    after, response = kiln.invoke("sbx-node-hog", {"mb": 16})
    assert "FunctionError" not in response and after == {"allocated_mb": 16}, after


def test_out_of_memory_during_init(kiln):
    kiln.deploy("sbx-init-hog", PYTHON_RUNTIME, "app.handler", code="python_slow_init", MemorySize=128,
                Environment={"Variables": {"INIT_SLEEP": "0", "INIT_HOG_MB": "1024"}})
    result, response = kiln.invoke("sbx-init-hog")
    assert response.get("FunctionError") == "Unhandled", result
    assert result["errorType"] == "Runtime.OutOfMemory", result


def test_orphans_are_reaped(kiln, probe_fn):
    result = probe(kiln, "sbx-probe", {"op": "zombies", "count": 50})
    assert result["zombies"] == 0, result
    assert result["processes"] <= result["before"] <= 4, result


def test_fork_bomb_is_contained(kiln, probe_fn):
    kiln.deploy("sbx-forkbomb", PYTHON_RUNTIME, "app.handler", code="fork_bomb", MemorySize=1536, Timeout=120)
    result, response = kiln.invoke("sbx-forkbomb", {"n": 5000})
    if "FunctionError" not in response:
        assert result["forked"] < 1100 and result["error"], result
    # kiln and the other functions are fine, and so is the function itself.
    assert probe(kiln, "sbx-probe", {"op": "status"})["uid"] != 0
    small, response = kiln.invoke("sbx-forkbomb", {"n": 10})
    assert "FunctionError" not in response and small == {"forked": 10, "error": None}, small
    kiln.client().delete_function(FunctionName="sbx-forkbomb")


def test_fork_bomb_that_times_out_is_cleaned_up(kiln):
    kiln.deploy("sbx-forkbomb-hold", PYTHON_RUNTIME, "app.handler", code="fork_bomb", MemorySize=1536, Timeout=3)
    result, response = kiln.invoke("sbx-forkbomb-hold", {"n": 5000, "hold": True, "seconds": 60})
    assert response.get("FunctionError") == "Unhandled" and result["errorType"] == "Sandbox.Timedout", result
    # Every process of the instance is killed and its cgroups are removed.
    wait_for(lambda: not leaked_cgroups(kiln), timeout=30,
             what="the timed-out fork bomb's cgroups to be removed")
    small, response = kiln.invoke("sbx-forkbomb-hold", {"n": 3})
    assert small == {"forked": 3, "error": None}, small
    kiln.client().delete_function(FunctionName="sbx-forkbomb-hold")


def test_nothing_outlives_a_timeout(kiln):
    marker = "%d.%d" % (6000 + os.getpid() % 1000, uuid.uuid4().int % 10**9)
    kiln.deploy("sbx-orphans", PYTHON_RUNTIME, "app.handler", code="orphan_spawner", Timeout=2)
    result, response = kiln.invoke("sbx-orphans", {"marker": marker, "seconds": 30})
    assert result["errorType"] == "Sandbox.Timedout", result
    wait_for(lambda: not processes_with(marker), timeout=15, what="the daemonized grandchild to be killed")
    # A normal invocation leaves its daemon running inside the (warm) instance, as on Lambda...
    marker2 = marker + "1"
    result, response = kiln.invoke("sbx-orphans", {"marker": marker2, "seconds": 0})
    assert result == {"spawned": True}
    wait_for(lambda: processes_with(marker2), timeout=15, what="the daemon of a normal invocation")
    # ...until the instance goes, e.g. on redeploy (idle instances of the old revision are retired).
    kiln.client().update_function_configuration(FunctionName="sbx-orphans", Timeout=3)
    wait_for(lambda: not processes_with(marker2), timeout=15, what="the retired instance's daemon to be killed")


# ------------------------------------------------------------------------------------------------- network
def test_isolated_network_cannot_reach_the_host(kiln, probe_fn):
    port = api_port(kiln)
    seen = probe(kiln, "sbx-probe", {"op": "connect", "targets": [["127.0.0.1", port], ["127.0.0.1", 9001],
                                                                   ["localhost", port]]})
    for target, outcome in seen.items():
        assert outcome in {"ECONNREFUSED", "ENETUNREACH", "EADDRNOTAVAIL", "timeout"}, (target, outcome)
    assert probe(kiln, "sbx-probe", {"op": "interfaces"}) == ["lo"]


def test_host_network_function_needs_credentials(kiln, probe_fn):
    kiln.cli("deploy", "sbx-hostnet", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
             "--code", str(FUNCTIONS / "sandbox_probe"), "--network", "host", "--timeout", "30")
    config = kiln.client().get_function(FunctionName="sbx-hostnet")["Configuration"]
    assert config.get("KilnNetwork", "host") == "host"
    base = kiln.endpoint
    seen = probe(kiln, "sbx-hostnet", {"op": "http", "requests": [
        ["GET", base + "/2015-03-31/functions"], ["GET", base + "/kiln/v1/status"],
        ["POST", base + "/2015-03-31/functions/sbx-probe/invocations"],
        ["DELETE", base + "/2015-03-31/functions/sbx-probe"]]})
    for request, outcome in seen.items():
        assert outcome.get("status") == 403, (request, outcome)
    # The function is still there: the refused DELETE did nothing.
    kiln.client().get_function(FunctionName="sbx-probe")
    # It shares the host's network, but not the host's files: kiln's credentials stay out of reach.
    data_dir = Path(os.path.realpath(kiln.data_dir))
    files = probe(kiln, "sbx-hostnet", {"op": "read", "paths": [str(data_dir / "credentials.json"), "/etc/shadow"]})
    for path, outcome in files.items():
        assert outcome.get("error") in DENIED, (path, outcome)


def test_host_network_function_cannot_hijack_another_runtime_api(kiln):
    victim = kiln.cli("deploy", "sbx-victim", "--runtime", "provided", "--handler", "x.y",
                      "--code", str(FUNCTIONS / "provided_manual"), "--network", "host", "--timeout", "20")
    assert victim.returncode == 0
    first, _ = kiln.invoke("sbx-victim", {"mode": "echo"})
    api = first["runtimeApi"]
    assert not api.endswith(":9001"), api
    kiln.cli("deploy", "sbx-attacker", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
             "--code", str(FUNCTIONS / "sandbox_probe"), "--network", "host", "--timeout", "30")
    box = {}
    attacker = threading.Thread(target=lambda: box.update(result=kiln.invoke("sbx-attacker", {"op": "hijack", "api": api})))
    attacker.start()
    answers = []
    try:
        # Give the attacker time to poll (if it can connect at all), then invoke the victim.
        time.sleep(2)
        for n in range(3):
            answers.append(kiln.invoke("sbx-victim", {"mode": "echo", "n": n})[0])
    finally:
        attacker.join(timeout=60)
    stolen, _ = box["result"]
    assert "stole" not in stolen, stolen
    for n, answer in enumerate(answers):
        assert answer != "hijacked"
        assert answer["event"] == {"mode": "echo", "n": n}, answer
