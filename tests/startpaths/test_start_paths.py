"""Start paths: the coldest path, the warm path from a runtime-generic standby, and the hot path from a
function-specific snapshot (a Python fork server, a Node standby instance), chosen automatically, visible in logs,
metrics and status, invalidated by updates, and falling back safely.

The fixture function (tests/functions/python_snapshot) reports what ran at init, in warm-up invocations and in
its snapshot hooks (snapshot_restore_py, Lambda SnapStart's API).
"""

import glob
import json
import os
import re
import shutil
import signal
import threading
import time

import requests

from kiln_harness import (FUNCTIONS, NODE_RUNTIME, PYTHON_RUNTIME, cgroup_parent, node_status, snapshot_of, start_path,
                          wait_for, wait_ready, wait_spare, wait_standby)


def deploy_cli(server, tmp_path, name, *flags, version="v1", files=None, runtime=PYTHON_RUNTIME):
    """Deploys the python_snapshot (or node_snapshot) fixture with the kiln CLI, which carries kiln's
    KilnPrebake extension."""
    fixture, handler = ("python_snapshot", "app.handler") if runtime == PYTHON_RUNTIME \
        else ("node_snapshot", "index.handler")
    code = tmp_path / name
    if code.exists():
        shutil.rmtree(code)
    shutil.copytree(FUNCTIONS / fixture, code)
    (code / "version.txt").write_text(version + "\n")
    for path, text in (files or {}).items():
        (code / path).write_text(text)
    server.cli("deploy", name, "--runtime", runtime, "--handler", handler, "--code", str(code),
               "--timeout", "10", *flags)


def invoke(server, name, event=None):
    result, response = server.invoke(name, event or {}, LogType="Tail")
    log = server.log_tail(response)
    report = [l for l in log.splitlines() if l.startswith("REPORT")][-1]
    return result, response, report


def fresh_instance(server, name, event=None):
    """Invokes `name` on a new instance: the idle ones are made busy by a parallel sleeping invocation first."""
    busy = [i for i in node_status(server)["instances"] if i["function"] == name and i["state"] == "idle"]
    threads = [threading.Thread(target=server.invoke, args=(name, {"action": "sleep", "seconds": 2}))
               for _ in busy]
    for t in threads:
        t.start()
    if threads:
        wait_for(lambda: len([i for i in node_status(server)["instances"]
                              if i["function"] == name and i["state"] == "busy"]) >= len(busy),
                 what="the idle instances to be busy")
    try:
        return invoke(server, name, event)
    finally:
        for t in threads:
            t.join(timeout=30)


def test_deploy_builds_a_snapshot_and_cold_starts_fork_from_it(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-hot", "--warmup", "2", "--warmup-event", '{"warm": true}')
    # The zygote, and one fork of it made ahead of demand, already in its own cgroup.
    snapshot = wait_spare(kiln, "sp-hot")
    assert snapshot["kind"] == "fork-server" and snapshot["forks"] == 1 and snapshot["memory_bytes"] > 0
    spare = snapshot["spare"]
    result, response, report = invoke(kiln, "sp-hot", {"n": 1})
    assert "FunctionError" not in response, result
    assert start_path(report) == "hot" and "Init Duration" in report
    assert [i["id"] for i in node_status(kiln)["instances"] if i["function"] == "sp-hot"] == [spare]
    # Init and both warm-up invocations ran in the zygote, before the snapshot; this instance is a
    # fork of it, made ahead of demand and given one more warm-up invocation of its own.
    assert result["events"] == [{"warm": True}, {"warm": True}, {"warm": True}, {"n": 1}]
    assert result["pid"] != result["init_pid"]
    assert result["hooks"] == ["before_snapshot:%d" % result["init_pid"], "after_restore:%d" % result["pid"]]
    assert result["init_type"] == "snap-start"
    # Warm invocations reuse the fork.
    again, _, report = invoke(kiln, "sp-hot", {"n": 2})
    assert again["pid"] == result["pid"] and start_path(report) is None
    # A second instance is a second fork, with its own log stream.
    other, _, report = fresh_instance(kiln, "sp-hot", {"n": 3})
    assert start_path(report) == "hot" and other["pid"] != result["pid"]
    assert other["stream"] != result["stream"]
    # Forks share no state after the snapshot: this one saw the zygote's warm-up, at most its own
    # (if it was the next spare rather than forked on the spot), and its event.
    assert other["events"][:2] == [{"warm": True}, {"warm": True}] and other["events"][-1] == {"n": 3}
    assert other["events"][2:-1] in ([], [{"warm": True}]), other["events"]
    # Each cold start had a spare forked behind it.
    assert wait_spare(kiln, "sp-hot")["forks"] == 3


def test_a_function_on_the_host_network_is_warmed_up_only_if_it_asks(kiln, tmp_path):
    # A warm-up there could reach anything the host reaches: none unless the function sets some.
    deploy_cli(kiln, tmp_path, "sp-host", "--network", "host", "--warmup-event", '{"warm": true}')
    wait_spare(kiln, "sp-host")
    result, _, report = invoke(kiln, "sp-host", {"n": 1})
    assert start_path(report) == "hot" and result["events"] == [{"n": 1}], result["events"]
    config = kiln.signed_request("GET", "/2015-03-31/functions/sp-host/configuration").json()
    assert config["KilnPrebake"]["WarmupInvocations"] == 0
    deploy_cli(kiln, tmp_path, "sp-host-asked", "--network", "host", "--warmup", "1",
               "--warmup-event", '{"warm": true}')
    wait_spare(kiln, "sp-host-asked")
    result, _, report = invoke(kiln, "sp-host-asked", {"n": 1})
    assert start_path(report) == "hot" and result["events"][0] == {"warm": True}, result["events"]
    config = kiln.signed_request("GET", "/2015-03-31/functions/sp-host-asked/configuration").json()
    assert config["KilnPrebake"]["WarmupInvocations"] == 1


def test_the_path_is_visible_in_metrics_and_status(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-visible")
    wait_ready(kiln, "sp-visible")
    invoke(kiln, "sp-visible")
    instances = [i for i in node_status(kiln)["instances"] if i["function"] == "sp-visible"]
    assert [i["start_path"] for i in instances] == ["hot"]
    text = kiln.cli("status").stdout
    assert "SNAPSHOT" in text and "sp-visible" in text and "fork-server" in text
    body = requests.get(kiln.endpoint + "/metrics", timeout=30).text
    assert re.search(r'kiln_cold_starts_total\{function="sp-visible",path="hot"\} 1', body), body
    assert re.search(r'kiln_memory_bytes\{kind="snapshots"\} [1-9]', body)
    assert re.search(r'kiln_snapshots\{kind="ready"\} [1-9]', body)


def test_prebake_off_takes_the_warm_path(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-off", "--prebake", "off")
    wait_standby(kiln, PYTHON_RUNTIME)
    result, _, report = invoke(kiln, "sp-off")
    assert start_path(report) == "warm"
    assert result["pid"] == result["init_pid"] and result["hooks"] == []
    time.sleep(1)
    assert snapshot_of(kiln, "sp-off") is None
    config = kiln.signed_request("GET", "/2015-03-31/functions/sp-off/configuration").json()
    assert config["KilnPrebake"] == {"Mode": "off", "WarmupInvocations": 3}


def test_lazy_prebake_snapshots_after_the_first_start(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-lazy", "--prebake", "lazy", "--warmup", "0")
    time.sleep(1)
    assert snapshot_of(kiln, "sp-lazy") is None, "a lazy snapshot waits for the first start"
    wait_standby(kiln, PYTHON_RUNTIME)
    first, _, report = invoke(kiln, "sp-lazy")
    assert start_path(report) == "warm"
    wait_ready(kiln, "sp-lazy")
    second, _, report = fresh_instance(kiln, "sp-lazy", {"second": True})
    assert start_path(report) == "hot"
    assert second["events"] == [{"second": True}], "no warm-up invocations were configured"


def test_a_code_update_invalidates_the_snapshot(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-update", version="v1")
    first = wait_ready(kiln, "sp-update")
    result, _, report = invoke(kiln, "sp-update")
    assert result["version"] == "v1" and start_path(report) == "hot"
    deploy_cli(kiln, tmp_path, "sp-update", version="v2")
    # The very next invocation runs the new code, whatever path it takes: never the old snapshot.
    result, _, report = invoke(kiln, "sp-update")
    assert result["version"] == "v2", result
    rebuilt = wait_ready(kiln, "sp-update")
    assert rebuilt["revision"] > first["revision"]
    result, _, report = fresh_instance(kiln, "sp-update")
    assert result["version"] == "v2" and start_path(report) == "hot"


def test_a_dead_snapshot_falls_back_and_still_answers(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-broken", "--warmup", "0")
    snapshot = wait_ready(kiln, "sp-broken")
    os.kill(snapshot["pid"], signal.SIGKILL)
    wait_standby(kiln, PYTHON_RUNTIME)
    result, response, report = invoke(kiln, "sp-broken")
    assert "FunctionError" not in response, result
    assert start_path(report) == "warm"  # the next path that exists
    # The fallback builds a new snapshot, and cold starts take the hot path again.
    rebuilt = wait_ready(kiln, "sp-broken")
    assert rebuilt["pid"] != snapshot["pid"]
    _, _, report = fresh_instance(kiln, "sp-broken")
    assert start_path(report) == "hot"


def test_a_failing_restore_hook_falls_back(kiln, tmp_path):
    hook = ("from snapshot_restore_py import register_after_restore\n"
            "def fail():\n    raise RuntimeError('cannot restore')\n"
            "register_after_restore(fail)\n")
    deploy_cli(kiln, tmp_path, "sp-hook", "--warmup", "0",
               files={"app.py": hook + (FUNCTIONS / "python_snapshot" / "app.py").read_text()})
    wait_ready(kiln, "sp-hook")
    wait_standby(kiln, PYTHON_RUNTIME)
    result, response, report = invoke(kiln, "sp-hook")
    assert "FunctionError" not in response, result
    assert start_path(report) == "warm"


def test_init_errors_never_reach_a_snapshot(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-initerr", files={"app.py": "raise ValueError('broken at init')\n"})
    failed = wait_for(lambda: (s := snapshot_of(kiln, "sp-initerr")) and s["state"] == "failed" and s,
                      what="the snapshot build to fail")
    assert "broken at init" in failed["error"]
    wait_standby(kiln, PYTHON_RUNTIME)
    result, response, report = invoke(kiln, "sp-initerr")
    assert response.get("FunctionError") == "Unhandled"
    assert result["errorType"] == "ValueError" and start_path(report) == "warm"


def test_hot_instances_have_their_own_limits(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-limits", "--memory", "128", "--warmup", "0")
    wait_ready(kiln, "sp-limits")
    result, response, report = invoke(kiln, "sp-limits", {"action": "allocate", "mb": 400})
    assert start_path(report) == "hot"
    assert result["errorType"] == "Runtime.OutOfMemory", result
    # The fork was killed in its own cgroup: the zygote lives on and the next cold start is hot again.
    assert snapshot_of(kiln, "sp-limits")["state"] == "ready"
    again, response, report = invoke(kiln, "sp-limits")
    assert "FunctionError" not in response and start_path(report) == "hot"
    # A timeout ends only the fork too.
    result, response, report = invoke(kiln, "sp-limits", {"action": "sleep", "seconds": 30})
    assert result["errorType"] == "Sandbox.Timedout"
    _, response, report = invoke(kiln, "sp-limits")
    assert "FunctionError" not in response and start_path(report) == "hot"


def test_idle_forks_share_the_zygotes_memory(kiln, tmp_path):
    # 12288 pages of random bytes: 48 MB built at init, shared copy-on-write by every fork.
    deploy_cli(kiln, tmp_path, "sp-share", "--memory", "512", "--warmup", "1", "--env", "BALLAST_PAGES=12288")
    wait_ready(kiln, "sp-share")
    threads = [threading.Thread(target=kiln.invoke, args=("sp-share", {"action": "sleep", "seconds": 2}))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    forks = [i for i in node_status(kiln)["instances"] if i["function"] == "sp-share"]
    assert len(forks) == 3 and all(i["start_path"] == "hot" for i in forks)
    for fork in forks:
        sharing = fork["sharing"]
        assert sharing["rss_bytes"] > 48 << 20, sharing
        # Private memory is a small fraction of what the fork maps: the ballast stays shared.
        assert sharing["uss_bytes"] < sharing["rss_bytes"] / 4, sharing
        assert sharing["pss_bytes"] < sharing["rss_bytes"] / 2, sharing
        # The cgroup charges a fork only for what it wrote itself.
        assert fork["memory_used_bytes"] < 16 << 20, fork


def test_invalid_prebake_settings_are_refused(kiln):
    kiln.deploy("sp-invalid", PYTHON_RUNTIME, "app.handler", code="python_state")
    path = "/2015-03-31/functions/sp-invalid/configuration"
    for body, message in [({"KilnPrebake": {"Mode": "sometimes"}}, "sometimes"),
                          ({"KilnPrebake": {"WarmupInvocations": 1000}}, "warmupInvocations")]:
        response = kiln.signed_request("PUT", path, json.dumps(body), {"Content-Type": "application/json"})
        assert response.status_code == 400, response.text
        assert message in response.json()["message"], response.text


def test_a_restart_rebuilds_snapshots_before_the_first_invocation(fresh_kiln, tmp_path):
    server = fresh_kiln()
    deploy_cli(server, tmp_path, "sp-restart", "--warmup", "1")
    wait_ready(server, "sp-restart")
    server.restart()
    wait_spare(server, "sp-restart")
    result, response, report = invoke(server, "sp-restart")
    assert "FunctionError" not in response and start_path(report) == "hot"
    # The zygote's warm-up, the spare fork's own, then the invocation.
    assert result["events"] == [{}, {}, {}]


# ------------------------------------------------------------------------------------------------- standby
def test_runtimes_that_cannot_fork_start_hot_from_a_standby_instance(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-node", "--warmup", "2", "--warmup-event", '{"warm": 1}', runtime=NODE_RUNTIME)
    snapshot = wait_ready(kiln, "sp-node")
    assert snapshot["kind"] == "standby"
    result, response, report = invoke(kiln, "sp-node", {"n": 1})
    assert "FunctionError" not in response, result
    assert start_path(report) == "hot"
    # The standby ran init and the warm-up invocations before this, its first real one.
    assert result["events"] == [{"warm": 1}, {"warm": 1}, {"n": 1}]
    assert "Init Duration" in report
    # A new standby replaces the one taken, and serves the next cold start.
    wait_ready(kiln, "sp-node")
    other, _, report = fresh_instance(kiln, "sp-node", {"n": 2})
    assert start_path(report) == "hot"
    assert other["events"] == [{"warm": 1}, {"warm": 1}, {"n": 2}]


def test_a_code_update_replaces_the_standby(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-node-update", "--warmup", "0", runtime=NODE_RUNTIME)
    wait_ready(kiln, "sp-node-update")
    deploy_cli(kiln, tmp_path, "sp-node-update", "--warmup", "0", version="v2", runtime=NODE_RUNTIME)
    result, _, report = invoke(kiln, "sp-node-update")
    assert result["version"] == "v2"
    wait_ready(kiln, "sp-node-update")
    result, _, report = fresh_instance(kiln, "sp-node-update")
    assert result["version"] == "v2" and start_path(report) == "hot"


# ------------------------------------------------------------------------------------------------- warm path
def inspect_warm(server, runtime, name):
    wait_standby(server, runtime)
    standby = next(s for s in node_status(server)["snapshots"]
                   if s["function"] == runtime and s["kind"] == "runtime-standby")
    result, response, report = invoke(server, name, {"action": "inspect"})
    assert "FunctionError" not in response, result
    assert start_path(report) == "warm" and "Init Duration" in report, report
    return result, standby


def test_a_runtime_standby_takes_the_functions_code_env_and_identity(kiln, tmp_path):
    for runtime, name in [(PYTHON_RUNTIME, "sp-warm-py"), (NODE_RUNTIME, "sp-warm-node")]:
        deploy_cli(kiln, tmp_path, name, "--prebake", "off", "--env", "GREETING=hello", "--memory", "256",
                   version="w1", runtime=runtime)
        result, standby = inspect_warm(kiln, runtime, name)
        assert result["version"] == "w1" and result["cwd"] == "/var/task"
        assert "version.txt" in result["files"]
        env = result["env"]
        assert env["GREETING"] == "hello" and env["AWS_LAMBDA_FUNCTION_NAME"] == name
        assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256" and env["LAMBDA_TASK_ROOT"] == "/var/task"
        assert "KILN_STANDBY" not in env and "KILN_SHIM_FD" not in env
        # The standby became this function's instance, and a new standby boots for the next one.
        instances = [i for i in node_status(kiln)["instances"] if i["function"] == name]
        assert [(i["id"], i["start_path"], i["memory_limit_mb"]) for i in instances] == [(standby["id"], "warm", 256)]
        fresh = wait_standby(kiln, runtime)
        assert fresh["id"] != standby["id"] and fresh["forks"] >= 1


def test_each_standby_serves_one_function_only(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-warm-a", "--prebake", "off", files={"a-only.txt": "a"})
    deploy_cli(kiln, tmp_path, "sp-warm-b", "--prebake", "off", files={"b-only.txt": "b"})
    a, _ = inspect_warm(kiln, PYTHON_RUNTIME, "sp-warm-a")
    b, _ = inspect_warm(kiln, PYTHON_RUNTIME, "sp-warm-b")
    assert "a-only.txt" in a["files"] and "b-only.txt" not in a["files"]
    assert "b-only.txt" in b["files"] and "a-only.txt" not in b["files"]
    assert a["uid"] != b["uid"]
    assert "GREETING" not in b["env"]


def test_warm_instances_have_their_functions_limits(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-warm-oom", "--prebake", "off", "--memory", "128")
    wait_standby(kiln, PYTHON_RUNTIME)
    result, response, report = invoke(kiln, "sp-warm-oom", {"action": "allocate", "mb": 400})
    assert start_path(report) == "warm"
    assert result["errorType"] == "Runtime.OutOfMemory", result
    wait_standby(kiln, PYTHON_RUNTIME)
    _, response, report = invoke(kiln, "sp-warm-oom")
    assert "FunctionError" not in response and start_path(report) == "warm"


def test_an_init_error_on_the_warm_path_is_the_functions(kiln, tmp_path):
    for runtime, name, files, error in [
            (PYTHON_RUNTIME, "sp-warm-bad-py", {"app.py": "import no_such_module\n"}, "Runtime.ImportModuleError"),
            (NODE_RUNTIME, "sp-warm-bad-node", {"index.js": "throw new TypeError('broken');\n"}, "TypeError")]:
        deploy_cli(kiln, tmp_path, name, "--prebake", "off", files=files, runtime=runtime)
        wait_standby(kiln, runtime)
        result, response, report = invoke(kiln, name)
        assert response.get("FunctionError") == "Unhandled", result
        assert result["errorType"] == error and start_path(report) == "warm", (result, report)
        # The failed standby is gone, not handed to anyone else.
        assert not [i for i in node_status(kiln)["instances"] if i["function"] == name]


def test_without_standbys_cold_starts_take_the_coldest_path(fresh_kiln, tmp_path):
    server = fresh_kiln(extra_args=["--warm-standbys", "0"])
    deploy_cli(server, tmp_path, "sp-coldest", "--prebake", "off")
    result, _, report = invoke(server, "sp-coldest")
    assert start_path(report) == "coldest"
    assert result["pid"] == result["init_pid"] and result["hooks"] == []
    assert not [s for s in node_status(server)["snapshots"] if s["kind"] == "runtime-standby"]


def test_variables_read_at_boot_take_the_coldest_path(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-boot-env", "--prebake", "off", "--env", "PYTHONHASHSEED=0")
    wait_standby(kiln, PYTHON_RUNTIME)
    result, _, report = invoke(kiln, "sp-boot-env", {"action": "inspect"})
    assert start_path(report) == "coldest" and result["env"]["PYTHONHASHSEED"] == "0"


def test_a_dead_spare_fork_is_replaced_and_the_invocation_still_answers(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "sp-spare", "--warmup", "0")
    snapshot = wait_spare(kiln, "sp-spare")
    spare = snapshot["spare"]
    # Kill the spare's process through its cgroup, unseen by kiln until it is taken.
    cgroups = glob.glob(f"/sys/fs/cgroup/*/{cgroup_parent(kiln)}/i{spare}") + glob.glob(
        f"/sys/fs/cgroup/{cgroup_parent(kiln)}/i{spare}")
    assert cgroups, f"no cgroup of the spare {spare}"
    pids = {int(pid) for pid in open(f"{cgroups[0]}/cgroup.procs").read().split()}
    assert pids, f"no process in the spare's cgroup {cgroups[0]}"
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    # Dead and reaped before it is taken, however loaded the machine.
    wait_for(lambda: not open(f"{cgroups[0]}/cgroup.procs").read().split(), what="the spare's processes to end")
    result, response, report = invoke(kiln, "sp-spare", {"n": 1})
    assert "FunctionError" not in response, result
    assert start_path(report) == "hot"
    assert wait_spare(kiln, "sp-spare")["spare"] != spare
    # The dead spare's cgroup goes with it.
    wait_for(lambda: not any(os.path.isdir(c) for c in cgroups), what="the dead spare's cgroup to be removed")
