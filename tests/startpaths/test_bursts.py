"""Bursts start hot: a function keeps as many instances made ahead of demand (Python spare forks, Node standbys)
as its recent peak concurrency predicts, or its `KilnPrebake.Standbys` floor, made at the lowest CPU share and
given the function's share when a request takes one; the surplus goes as the prediction decays.
"""

import glob
import json
import threading

import pytest
import requests

from kiln_harness import NODE_RUNTIME, cgroup_parent, node_status, snapshot_of, start_path, wait_for
from test_start_paths import deploy_cli, invoke


def burst(server, name, n, seconds=0.5):
    """`n` concurrent invocations that each hold their instance for `seconds`; returns their REPORT lines."""
    clients = [server.client() for _ in range(n)]
    barrier = threading.Barrier(n)
    reports = [None] * n

    def one(i):
        barrier.wait()
        response = clients[i].invoke(FunctionName=name, LogType="Tail",
                                     Payload=b'{"action": "sleep", "seconds": %f}' % seconds)
        log = server.log_tail(response)
        if "FunctionError" not in response:
            reports[i] = [l for l in log.splitlines() if l.startswith("REPORT")][-1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(reports), "every request of the burst was answered"
    return reports


def standbys(server, name, ready, revision=None, timeout=120):
    """Waits for `ready` instances made ahead of `name` (of `revision`), none being made; returns its status."""
    last = {}

    def done():
        s = last["status"] = snapshot_of(server, name)
        if s and s.get("standbys_ready") == ready and s.get("standbys_making") == 0 \
                and (revision is None or s["revision"] == revision):
            return s
        return None
    try:
        return wait_for(done, timeout=timeout, what=f"{ready} standbys of {name}")
    except AssertionError as e:
        raise AssertionError(f"{e}; its status last: {last.get('status')}") from None


def cpu_idle(server, instance_id):
    """The instance cgroup's `cpu.idle` (SCHED_IDLE), or None where the kernel has none."""
    parent = cgroup_parent(server)
    files = glob.glob(f"/sys/fs/cgroup/cpu*/{parent}/i{instance_id}/cpu.idle") + \
        glob.glob(f"/sys/fs/cgroup/{parent}/i{instance_id}/cpu.idle")
    return int(open(files[0]).read()) if files else None


def cpu_shares(server, instance_id):
    """The instance's CPU share (cgroup v1 cpu.shares, or v2 cpu.weight)."""
    parent = cgroup_parent(server)
    v1 = glob.glob(f"/sys/fs/cgroup/cpu*/{parent}/i{instance_id}/cpu.shares")
    if v1:
        return ("shares", int(open(v1[0]).read()))
    v2 = glob.glob(f"/sys/fs/cgroup/{parent}/i{instance_id}/cpu.weight")
    return ("weight", int(open(v2[0]).read())) if v2 else None


def test_a_fixed_floor_keeps_that_many_spare_forks_and_a_burst_takes_them_all(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "burst-floor", "--standbys", "4", "--warmup", "0", "--memory", "256")
    status = standbys(kiln, "burst-floor", 4)
    assert status["standbys_target"] == 4 and status["standbys_memory_bytes"] > 0
    assert status["refill_ms"] > 0
    # Made ahead at the lowest CPU share, so that making them never slows a request.
    share = cpu_shares(kiln, status["spare"])
    assert share in (("shares", 2), ("shares", 3), ("weight", 1)), share  # 3: the weight of SCHED_IDLE
    assert cpu_idle(kiln, status["spare"]) in (1, None)
    reports = burst(kiln, "burst-floor", 4)
    assert [start_path(r) for r in reports] == ["hot"] * 4, reports
    # Each started with its function's share (256 MB: 148 of 1024 on cgroup v1).
    instances = [i for i in kiln_status_instances(kiln) if i["function"] == "burst-floor"]
    assert len(instances) == 4
    for instance in instances:
        assert cpu_shares(kiln, instance["id"]) in (("shares", 148), ("weight", 6)), instance
        assert cpu_idle(kiln, instance["id"]) in (0, None)
    # The floor is kept whatever the demand: four more are made behind the burst.
    standbys(kiln, "burst-floor", 4)
    metrics = kiln_metrics(kiln)
    assert 'kiln_standbys{function="burst-floor",kind="target"} 4' in metrics
    assert 'kiln_standbys{function="burst-floor",kind="ready"} 4' in metrics
    assert 'kiln_standby_memory_bytes{function="burst-floor"}' in metrics


def test_node_standbys_are_sized_by_the_functions_recent_peak(kiln, tmp_path):
    deploy_cli(kiln, tmp_path, "burst-node", "--warmup", "1", runtime=NODE_RUNTIME)
    first = standbys(kiln, "burst-node", 1)
    assert first["kind"] == "standby" and first["standbys_target"] == 1
    # A first burst of 3: one standby, the rest on slower paths. It sets the function's peak.
    reports = burst(kiln, "burst-node", 3)
    # (A request that came late may reuse a freed instance: no start path, None.)
    assert [start_path(r) for r in reports].count("hot") >= 1, reports
    # A new revision has no instances: its standbys are made for the peak.
    kiln.client().update_function_configuration(FunctionName="burst-node", Description="v2")
    revision = first["revision"] + 1
    status = standbys(kiln, "burst-node", 3, revision=revision)
    assert status["standbys_target"] == 3
    reports = burst(kiln, "burst-node", 3)
    assert [start_path(r) for r in reports] == ["hot"] * 3, reports


def test_a_first_burst_onto_a_node_function_waits_for_hot_instances_not_coldest_starts(kiln, tmp_path):
    # One standby and no history: the burst's other requests wait for the first of that
    # instance freed and a standby made for them, rather than each booting Node on its own.
    deploy_cli(kiln, tmp_path, "burst-first", "--warmup", "0", runtime=NODE_RUNTIME)
    standbys(kiln, "burst-first", 1)
    reports = burst(kiln, "burst-first", 6, seconds=0.05)
    started = [start_path(r) for r in reports if "Init Duration" in r]
    assert started and set(started) == {"hot"}, reports
    # The burst's size is remembered: the next revision has a standby for each request.
    revision = snapshot_of(kiln, "burst-first")["revision"] + 1
    kiln.client().update_function_configuration(FunctionName="burst-first", Description="v2")

    def made():
        s = snapshot_of(kiln, "burst-first")
        return s if s and s["revision"] == revision and s["state"] == "ready" \
            and s.get("standbys_making") == 0 and s.get("standbys_ready") == s["standbys_target"] else None
    status = wait_for(made, timeout=120, what="the standbys of the new revision")
    assert status["standbys_target"] >= 6, status
    reports = burst(kiln, "burst-first", 6, seconds=0.05)
    started = [start_path(r) for r in reports if "Init Duration" in r]
    assert started and set(started) == {"hot"}, reports


def test_spares_are_let_go_as_the_peak_decays(fresh_kiln, tmp_path):
    server = fresh_kiln(extra_args=["--standby-window", "2"])
    deploy_cli(server, tmp_path, "burst-decay", "--warmup", "0")
    standbys(server, "burst-decay", 1)
    burst(server, "burst-decay", 3, seconds=0.3)
    server.client().update_function_configuration(FunctionName="burst-decay", Description="v2")
    # Held for one window (2 s), then halved every window: 3, 2, 1.
    status = standbys(server, "burst-decay", 3, timeout=60)
    assert status["standbys_target"] == 3
    status = standbys(server, "burst-decay", 1, timeout=30)
    assert status["standbys_target"] == 1 and "standbys_memory_bytes" in status


@pytest.mark.parametrize("flags, error", [
    (["--standbys", "65"], "less than or equal to 64"),
    (["--prebake", "off", "--standbys", "2"], "Mode must be deploy or lazy"),
])
def test_standbys_out_of_range_are_refused(kiln, tmp_path, flags, error):
    with pytest.raises(AssertionError) as refused:
        deploy_cli(kiln, tmp_path, "burst-bad", *flags)
    assert error in str(refused.value)


def kiln_status_instances(server):
    return node_status(server)["instances"]


def kiln_metrics(server):
    return requests.get(server.endpoint + "/metrics", timeout=10).text


def test_kiln_turns_the_kernels_favordynmods_on(kiln):
    # Moving a fork into its cgroup then takes no RCU grace period (several ms on cgroup v1).
    refused = [line for line in kiln.output if "waits for the kernel" in line]
    if refused:
        pytest.skip(f"this kernel has no favordynmods: {refused[0]}")
    mounts = open("/proc/self/mountinfo").read().splitlines()
    favoured = [m for m in mounts if " - cgroup" in m and "favordynmods" in m.split(" - ")[1].split()[2].split(",")]
    assert favoured, "no cgroup hierarchy is mounted with favordynmods"


def test_a_function_made_again_under_its_name_gets_its_own_standbys(kiln, tmp_path):
    # Deleted while its snapshot is still being built: nothing of the old function may keep the
    # new one from having its standbys.
    deploy_cli(kiln, tmp_path, "burst-again", "--standbys", "2", runtime=NODE_RUNTIME)
    lam = kiln.client()
    kiln.settled("burst-again")
    lam.update_function_configuration(FunctionName="burst-again", Description="revision 2")
    lam.delete_function(FunctionName="burst-again")
    deploy_cli(kiln, tmp_path, "burst-again", "--standbys", "2", runtime=NODE_RUNTIME)
    status = standbys(kiln, "burst-again", 2, timeout=60)
    assert status["revision"] == 1 and status["standbys_target"] == 2
    reports = burst(kiln, "burst-again", 2)
    assert [start_path(r) for r in reports] == ["hot"] * 2, reports


def test_a_fork_server_outlives_what_its_many_forks_leave_charged_to_it(fresh_kiln, tmp_path):
    # Each fork leaves the pages it copied before its move to its own cgroup charged to the fork
    # server's (about 1 MB for this function): 64 spares taken by a burst and 64 made again
    # would fill a 128 MB limit, and the fork server would be killed for memory. A kiln of its
    # own: the snapshots of the session's other functions are no part of this.
    kiln = fresh_kiln()
    deploy_cli(kiln, tmp_path, "burst-many", "--standbys", "64", "--memory", "128", "--warmup", "0")
    # Spares are made at SCHED_IDLE: other work on the machine delays them, by design.
    status = standbys(kiln, "burst-many", 64, timeout=300)
    reports = burst(kiln, "burst-many", 64, seconds=0.5)
    started = [r for r in reports if "Init Duration" in r]
    assert all(start_path(r) == "hot" for r in started), reports
    standbys(kiln, "burst-many", 64, timeout=300)
    after = snapshot_of(kiln, "burst-many")
    assert after["state"] == "ready" and after["id"] == status["id"], "the fork server lived"
    # Each spare the burst took was forked again (on a loaded machine a request may reuse an
    # instance another finished with, so fewer than 64 may have been taken).
    assert after["forks"] >= 64 + len(started), (after, len(started))


def test_a_refill_short_of_the_snapshot_budget_evicts_an_idle_functions_snapshot(fresh_kiln, tmp_path):
    # A budget that the burst function's fork server (its forks' charges grow it) and an idle
    # function's snapshot overfill: the function in demand gets its spares back, the idle one's
    # snapshot goes (it is rebuilt on its next cold start).
    kiln = fresh_kiln(extra_args=["--snapshot-memory-mb", "52"])
    deploy_cli(kiln, tmp_path, "budget-idle", "--warmup", "0")
    standbys(kiln, "budget-idle", 1)
    invoke(kiln, "budget-idle")
    deploy_cli(kiln, tmp_path, "budget-busy", "--standbys", "16", "--warmup", "0")
    standbys(kiln, "budget-busy", 16)
    # Half are taken: the refill runs with the other half ready, each as large as the last.
    burst(kiln, "budget-busy", 8)
    standbys(kiln, "budget-busy", 16, timeout=60)
    assert snapshot_of(kiln, "budget-idle") is None, "the idle function's snapshot was evicted"
    _, response, _ = invoke(kiln, "budget-idle")
    assert "FunctionError" not in response


# Holds one HTTP connection to the sandbox's object store, opened at init and used by every invocation (as an SDK
# client's pool does); answers which process and which local port served the request.
CONNECTED = """
import http.client, os, time, urllib.parse

endpoint = urllib.parse.urlsplit(os.environ["AWS_ENDPOINT_URL_S3"])
conn = http.client.HTTPConnection(endpoint.hostname, endpoint.port, timeout=10)


def ask():
    conn.request("GET", "/")
    conn.getresponse().read()
    return conn.sock.getsockname()[1]


def handler(event, context):
    try:
        port = ask()
    except OSError:  # the connection is gone: open one of this process's own
        conn.close()
        port = ask()
    time.sleep(event.get("seconds", 0))
    return {"pid": os.getpid(), "port": port}
"""


def test_forks_never_share_a_connection_the_zygote_opened(kiln, tmp_path):
    # The warm-up opens the connection in what becomes the zygote; each fork must use one of its own, or the
    # requests of several forks interleave on one socket (a write of one read as another's).
    deploy_cli(kiln, tmp_path, "burst-conn", "--standbys", "3", "--warmup", "2", files={"app.py": CONNECTED})
    standbys(kiln, "burst-conn", 3)
    clients = [kiln.client() for _ in range(3)]
    barrier = threading.Barrier(3)
    answers = [None] * 3

    def one(i):
        barrier.wait()
        response = clients[i].invoke(FunctionName="burst-conn", Payload=b'{"seconds": 0.5}')
        answers[i] = json.loads(response["Payload"].read())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(a and "pid" in a for a in answers), answers
    assert len({a["pid"] for a in answers}) == 3, answers
    assert len({a["port"] for a in answers}) == 3, f"forks shared a connection: {answers}"
