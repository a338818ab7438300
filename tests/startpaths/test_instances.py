"""Instance lifecycle with Lambda's semantics: warm reuse, scale-out, concurrency caps and queueing,
timeouts, crashes, idle reaping and graceful shutdown.

The fixture functions (tests/functions/python_state, node_state) keep a random id in a module global, so
the id in an answer tells which instance served it.
"""

import json
import os
import re
import signal
import threading
import uuid
from pathlib import Path

import botocore.exceptions
import pytest

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME, cgroup_parent, owned_cgroups, wait_for

CGROUP_ROOT = Path("/sys/fs/cgroup")



def cgroup_dirs(server):
    """Instance cgroups that exist on the host for this server, over every v1 hierarchy or v2."""
    parent = cgroup_parent(server)
    found = set()
    for base in [CGROUP_ROOT / parent] + [CGROUP_ROOT / c / parent for c in ("memory", "pids", "cpu")]:
        if base.is_dir():
            found |= {d.name for d in base.iterdir() if d.is_dir()}
    return found


def status(server):
    return json.loads(server.cli("--json", "status").stdout)["node"]


def instances_of(server, function):
    return [i for i in status(server)["instances"] if i["function"] == function]


def processes_with(marker):
    """Host pids whose command line contains `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                pids.append(int(entry.name))
    return pids


def processes_in_cgroups_of(server, only_instances=False):
    """Host pids in any cgroup of this server's instances (and snapshots, unless `only_instances`)."""
    parent = cgroup_parent(server)
    snapshots = {f"/{parent}/{name}\n" for name in snapshot_cgroups(server)} if only_instances else set()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "cgroup").read_text()
                if parent in text and not any(s in text for s in snapshots):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def snapshot_cgroups(server):
    """The cgroups of the server's snapshots (fork servers and their spare forks, standbys)."""
    return owned_cgroups(status(server), instances=False)


def expected_cgroups(server):
    """The cgroups this server should have: one per instance and one per snapshot (and spare fork)."""
    return owned_cgroups(status(server))


def invoke_tail(server, name, event=None):
    result, response = server.invoke(name, event or {}, LogType="Tail")
    return result, response, server.log_tail(response)


def concurrently(server, name, events):
    """Invokes `name` once per event, all at the same time; returns the results (or exceptions) in order."""
    clients = [server.client(read_timeout=120) for _ in events]
    results = [None] * len(events)
    barrier = threading.Barrier(len(events))

    def run(i):
        barrier.wait()
        try:
            response = clients[i].invoke(FunctionName=name, Payload=json.dumps(events[i]))
            results[i] = (json.loads(response["Payload"].read()), response)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(events))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    return results


def in_background(fn, *args, **kwargs):
    box = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            box["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


@pytest.fixture
def own_kiln(fresh_kiln):
    """fresh_kiln, stopped gracefully at the end: a SIGKILLed kiln cannot remove its cgroups, and its
    data dir (whose next start would) is deleted right after."""
    servers = []

    def make(**kwargs):
        server = fresh_kiln(**kwargs)
        servers.append(server)
        return server

    yield make
    for server in servers:
        try:
            server.stop(timeout=120)
        except Exception:  # noqa: BLE001 - conftest kills it anyway
            pass


# ------------------------------------------------------------------------------------------------- warm/cold
def test_second_invoke_reuses_the_warm_instance(kiln):
    kiln.deploy("inst-warm", PYTHON_RUNTIME, "app.handler", code="python_state")
    first, _, first_log = invoke_tail(kiln, "inst-warm")
    second, _, second_log = invoke_tail(kiln, "inst-warm")
    assert first["instance"] == second["instance"]
    assert (first["count"], second["count"]) == (1, 2)
    assert first["pid"] == second["pid"]
    assert "Init Duration" in first_log.splitlines()[-1]
    assert "Init Duration" not in second_log.splitlines()[-1]
    assert len(instances_of(kiln, "inst-warm")) == 1


def test_redeploy_starts_a_new_instance(kiln):
    kiln.deploy("inst-redeploy", PYTHON_RUNTIME, "app.handler", code="python_state")
    first, _, _ = invoke_tail(kiln, "inst-redeploy")
    kiln.client().update_function_configuration(FunctionName="inst-redeploy", Timeout=9)
    second, _, log = invoke_tail(kiln, "inst-redeploy")
    assert second["instance"] != first["instance"]
    assert "Init Duration" in log


def test_instance_busy_during_a_redeploy_is_retired_afterwards(fresh_kiln):
    # A kiln of its own: its memory accounting must not see other tests' functions, whose
    # mature memory models make their idle instances reserve less than their MemorySize.
    kiln = fresh_kiln()
    kiln.deploy("inst-rev", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=30)
    thread, box = in_background(kiln.invoke, "inst-rev", {"action": "sleep", "seconds": 3})
    wait_for(lambda: [i for i in instances_of(kiln, "inst-rev") if i["state"] == "busy"],
             what="the invocation to be running")
    kiln.client().update_function_configuration(FunctionName="inst-rev", Timeout=31)
    thread.join(timeout=60)
    old, _ = box["value"]
    new, _, log = invoke_tail(kiln, "inst-rev")
    assert new["instance"] != old["instance"] and "Init Duration" in log
    # The old revision's instance is gone for good: no bookkeeping, no cgroup, no memory booked.
    wait_for(lambda: len(instances_of(kiln, "inst-rev")) == 1, what="the old instance to be retired")
    wait_for(lambda: cgroup_dirs(kiln) == expected_cgroups(kiln),
             what="the old instance's cgroup to be removed")
    node = status(kiln)
    assert node["memory_reserved_mb"] == sum(i["memory_limit_mb"] for i in node["instances"])


def test_concurrent_invokes_scale_out(kiln):
    kiln.deploy("inst-scale", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=60)
    results = concurrently(kiln, "inst-scale", [{"action": "sleep", "seconds": 5}] * 3)
    for r in results:
        assert not isinstance(r, Exception), r
        assert "FunctionError" not in r[1], r[0]
    assert len({r[0]["instance"] for r in results}) == 3
    assert len(instances_of(kiln, "inst-scale")) == 3
    # All three are idle now; the next request is served warm by one of them.
    again, _, log = invoke_tail(kiln, "inst-scale")
    assert again["instance"] in {r[0]["instance"] for r in results}
    assert "Init Duration" not in log


def test_reserved_concurrency_caps_instances(kiln):
    kiln.deploy("inst-capped", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=60)
    kiln.client().put_function_concurrency(FunctionName="inst-capped", ReservedConcurrentExecutions=2)
    results = concurrently(kiln, "inst-capped", [{"action": "sleep", "seconds": 2}] * 5)
    for r in results:
        assert not isinstance(r, Exception), r
        assert "FunctionError" not in r[1], r[0]
    # Requests beyond the cap waited for a free instance instead of starting more.
    assert len({r[0]["instance"] for r in results}) == 2
    assert sorted(r[0]["count"] for r in results)[-1] >= 2
    assert len(instances_of(kiln, "inst-capped")) <= 2


def test_zero_reserved_concurrency_throttles(kiln):
    kiln.deploy("inst-zero", PYTHON_RUNTIME, "app.handler", code="python_state")
    lam = kiln.client()
    lam.put_function_concurrency(FunctionName="inst-zero", ReservedConcurrentExecutions=0)
    with pytest.raises(lam.exceptions.TooManyRequestsException):
        lam.invoke(FunctionName="inst-zero", Payload=b"{}")
    lam.delete_function_concurrency(FunctionName="inst-zero")
    result, _ = kiln.invoke("inst-zero")
    assert result["count"] == 1


def test_queue_full_is_throttled(own_kiln):
    server = own_kiln(extra_args=["--queue-depth", "1"])
    server.deploy("inst-queue", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=60)
    server.client().put_function_concurrency(FunctionName="inst-queue", ReservedConcurrentExecutions=1)
    # One runs, one waits in the queue of depth 1, the third is refused.
    results = concurrently(server, "inst-queue", [{"action": "sleep", "seconds": 5}] * 3)
    throttled = [r for r in results if isinstance(r, botocore.exceptions.ClientError)]
    served = [r for r in results if not isinstance(r, Exception)]
    assert len(throttled) == 1 and len(served) == 2, results
    error = throttled[0].response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert error["Error"]["Code"] == "TooManyRequestsException"
    # The queued request ran on the same (only) instance after the first.
    assert len({r[0]["instance"] for r in served}) == 1
    assert sorted(r[0]["count"] for r in served) == [1, 2]


def test_init_time_does_not_count_against_the_timeout(kiln):
    # As on Lambda, the init phase has its own limit (10 s); the timeout starts with the invocation.
    # Without a snapshot, so that the invocation itself runs the init.
    kiln.deploy("inst-slow-init", PYTHON_RUNTIME, "app.handler", code="python_slow_init", Timeout=1,
                Environment={"Variables": {"INIT_SLEEP": "2"}}, Tags={"kiln:prebake": "off"})
    result, response, log = invoke_tail(kiln, "inst-slow-init")
    assert "FunctionError" not in response, result
    assert result["init_seconds"] >= 2
    assert 0 < result["remaining"] <= 1000
    report = log.splitlines()[-1]
    init_ms = float(re.search(r"Init Duration: ([0-9.]+) ms", report).group(1))
    assert init_ms >= 2000, report
    duration_ms = float(re.search(r"\tDuration: ([0-9.]+) ms", report).group(1))
    assert duration_ms < 1000, report
    _, _, warm_log = invoke_tail(kiln, "inst-slow-init")
    assert "Init Duration" not in warm_log


# ------------------------------------------------------------------------------------------------- failures
def test_timeout_replaces_the_instance(kiln):
    kiln.deploy("inst-timeout", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=1)
    warm, _, _ = invoke_tail(kiln, "inst-timeout")
    result, response, log = invoke_tail(kiln, "inst-timeout", {"action": "sleep", "seconds": 30})
    assert response.get("FunctionError") == "Unhandled"
    assert result["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in result["errorMessage"]
    assert "Task timed out after 1.00 seconds" in log
    assert "about to sleep 30" in log, "what the function printed before it timed out is in its log"
    # The timed-out instance is gone; the next invoke is a cold start on a new one and works.
    after, response, log = invoke_tail(kiln, "inst-timeout")
    assert "FunctionError" not in response
    assert after["instance"] != warm["instance"] and after["count"] == 1
    assert "Init Duration" in log.splitlines()[-1]
    wait_for(lambda: cgroup_dirs(kiln) == expected_cgroups(kiln),
             what="the timed-out instance's cgroup to be removed")


@pytest.mark.parametrize("runtime,code", [(PYTHON_RUNTIME, "python_state"), (NODE_RUNTIME, "node_state")])
def test_exit_is_an_exit_error_and_the_next_invoke_works(kiln, runtime, code):
    name = "inst-exit-" + runtime.split(".")[0]
    kiln.deploy(name, runtime, "app.handler" if code == "python_state" else "index.handler", code=code)
    warm, _ = kiln.invoke(name)
    result, response, log = invoke_tail(kiln, name, {"action": "exit"})
    assert response.get("FunctionError") == "Unhandled"
    assert result["errorType"] == "Runtime.ExitError", result
    assert "Runtime exited with error: exit status 3" in result["errorMessage"]
    assert "exit status 3" in log
    after, response = kiln.invoke(name)
    assert "FunctionError" not in response
    # A new instance; a standby one (Node's hot path) has served its warm-up invocations already.
    assert after["instance"] != warm["instance"] and after["count"] in (1, 4)


def test_a_crash_leaves_other_instances_alone(kiln):
    kiln.deploy("inst-neighbour", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=60)
    thread, box = in_background(kiln.invoke, "inst-neighbour", {"action": "sleep", "seconds": 4})
    wait_for(lambda: [i for i in instances_of(kiln, "inst-neighbour") if i["state"] == "busy"],
             what="the first instance to be busy")
    crashed, response = kiln.invoke("inst-neighbour", {"action": "exit"})
    assert crashed["errorType"] == "Runtime.ExitError"
    thread.join(timeout=60)
    survivor, response = box["value"]
    assert "FunctionError" not in response, survivor
    again, _ = kiln.invoke("inst-neighbour")
    assert again["instance"] == survivor["instance"] and again["count"] == 2


# ------------------------------------------------------------------------------------------------- lifecycle
def test_idle_instances_are_reaped(own_kiln):
    server = own_kiln(extra_args=["--idle-ttl", "1"])
    server.deploy("inst-reap", PYTHON_RUNTIME, "app.handler", code="python_state")
    first, _ = server.invoke("inst-reap")
    assert cgroup_dirs(server)
    wait_for(lambda: not status(server)["instances"], timeout=30, what="idle instances to be reaped")
    # What is left is the function's snapshot, which outlives its instances.
    wait_for(lambda: cgroup_dirs(server) == snapshot_cgroups(server), timeout=30,
             what="reaped instances' cgroups to be removed")
    assert not processes_in_cgroups_of(server, only_instances=True)
    assert status(server)["memory_reserved_mb"] == 0
    after, _, log = invoke_tail(server, "inst-reap")
    assert after["instance"] != first["instance"]
    assert "Init Duration" in log


def test_graceful_shutdown_finishes_in_flight_work_and_leaves_nothing(own_kiln):
    server = own_kiln()
    marker = "%d.%s" % (7000 + os.getpid() % 1000, uuid.uuid4().int % 10**9)
    server.deploy("inst-shutdown", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=60)
    server.deploy("inst-shutdown-idle", NODE_RUNTIME, "index.handler", code="node_state")
    server.invoke("inst-shutdown-idle")  # an idle instance of another runtime, too
    thread, box = in_background(server.invoke, "inst-shutdown",
                                {"action": "spawn", "marker": marker, "seconds": 3})
    wait_for(lambda: [i for i in instances_of(server, "inst-shutdown") if i["state"] == "busy"],
             what="the invocation to be running")
    wait_for(lambda: processes_with(marker), timeout=30, what="the function's background process")
    assert len(status(server)["instances"]) == 2
    # Snapshots and standbys may still be starting (or going), their cgroups a moment behind status.
    wait_for(lambda: cgroup_dirs(server) == expected_cgroups(server), what="each instance's cgroups")
    assert processes_in_cgroups_of(server)
    server.proc.send_signal(signal.SIGTERM)
    thread.join(timeout=60)
    assert "error" not in box, box.get("error")
    result, response = box["value"]
    assert "FunctionError" not in response, result
    assert result["count"] == 1
    assert server.proc.wait(timeout=60) == 0, "".join(server.output)
    # Nothing of any sandbox is left: no process, no cgroup.
    wait_for(lambda: not processes_with(marker), timeout=10, what="the background process to be gone")
    assert not processes_in_cgroups_of(server)
    assert not cgroup_dirs(server)
    parent = cgroup_parent(server)
    assert not [p for p in CGROUP_ROOT.glob(f"*/{parent}")] and not (CGROUP_ROOT / parent).exists()


def test_sandboxes_die_with_kiln_and_leftovers_go_on_restart(own_kiln):
    server = own_kiln()
    marker = "%d.%s" % (5000 + os.getpid() % 1000, uuid.uuid4().int % 10**9)
    server.deploy("inst-kill9", PYTHON_RUNTIME, "app.handler", code="python_state")
    result, _ = server.invoke("inst-kill9", {"action": "spawn", "marker": marker})
    assert result["count"] == 1
    wait_for(lambda: processes_with(marker), what="the warm instance's background process")
    server.kill9()
    # Nothing of a sandbox outlives the agent, even one killed without a chance to clean up...
    wait_for(lambda: not processes_with(marker), timeout=15, what="the sandbox to die with kiln")
    wait_for(lambda: not processes_in_cgroups_of(server), timeout=15, what="the sandbox's processes to go")
    # ...and what it could not remove itself is removed by the next start on the same data dir.
    server.start()
    wait_for(lambda: cgroup_dirs(server) == expected_cgroups(server), timeout=30,
             what="stale cgroups to be removed")
    again, _ = server.invoke("inst-kill9")
    assert again["count"] == 1 and again["instance"] != result["instance"]


def test_shutdown_grace_bounds_in_flight_work(own_kiln):
    server = own_kiln()  # the harness starts kiln with --shutdown-grace 10
    server.deploy("inst-grace", PYTHON_RUNTIME, "app.handler", code="python_state", Timeout=300)
    thread, box = in_background(server.invoke, "inst-grace", {"action": "sleep", "seconds": 45})
    wait_for(lambda: [i for i in instances_of(server, "inst-grace") if i["state"] == "busy"],
             what="the invocation to be running")
    server.proc.send_signal(signal.SIGTERM)
    try:
        exited = server.proc.wait(timeout=30) == 0
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
        exited = False
    finally:
        # Either way, let kiln finish on its own so that it removes its cgroups.
        server.proc.wait(timeout=120)
        thread.join(timeout=60)
    assert exited, "kiln was still running 30 s after SIGTERM with a 10 s shutdown grace"
    assert not processes_in_cgroups_of(server)
    assert not cgroup_dirs(server)
