"""/tmp is storage of the function's EphemeralStorage size (a disk of its own per sandbox), not memory.

Before, /tmp was a tmpfs counted against the instance's memory cgroup, so a function that left files in /tmp
was killed for memory on a later invocation (SeBS 311.compression at 256 MB died on its 13th call).
"""

import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

from kiln_harness import PYTHON_RUNTIME, node_status, wait_for

TMP_FUNCTION = r'''
import errno
import os

def handler(event, context):
    op = event["op"]
    if op == "append":
        # Writes `mb` MiB in a new file, 1 MiB at a time: the function's own memory stays small.
        chunk = os.urandom(1 << 20)
        path = "/tmp/part-%d" % len(os.listdir("/tmp"))
        with open(path, "wb") as f:
            for _ in range(event["mb"]):
                f.write(chunk)
        return {"files": len(os.listdir("/tmp")), "mb": sum(os.path.getsize("/tmp/" + n) for n in os.listdir("/tmp")) >> 20}
    if op == "fill":
        chunk = b"\xa5" * (1 << 20)
        written = 0
        try:
            with open("/tmp/fill.bin", "wb") as f:
                while written < 20 << 10:
                    f.write(chunk)
                    f.flush()
                    written += 1
                os.fsync(f.fileno())
        except OSError as e:
            return {"written_mb": written, "errno": e.errno}
        finally:
            try:
                os.unlink("/tmp/fill.bin")
            except OSError:
                pass
        return {"written_mb": written, "errno": None}
    if op == "put":
        with open("/tmp/" + event["name"], "w") as f:
            f.write("mine")
        return "ok"
    if op == "list":
        return sorted(os.listdir("/tmp"))
    if op == "sleep":
        import time
        time.sleep(event["seconds"])
        return "slept"
    if op == "mount":
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if fields[4] == "/tmp":
                    return {"options": fields[5], "fstype": fields[fields.index("-") + 1]}
    raise ValueError(op)
'''


def deploy(server, name, **config):
    return server.deploy(name, PYTHON_RUNTIME, "app.handler", files={"app.py": TMP_FUNCTION}, Timeout=120, **config)


def call(server, name, event):
    result, response = server.invoke(name, event, LogType="Tail")
    assert "FunctionError" not in response, (result, server.log_tail(response))
    return result


def loop_devices_of(data_dir):
    """`losetup -a` entries whose backing file is under `data_dir`."""
    prefix = os.path.realpath(data_dir)
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if prefix in line]


def test_tmp_is_a_disk_of_its_own(kiln):
    assert node_status(kiln)["tmp"] == "disk"
    deploy(kiln, "tmp-disk-mount")
    mount = call(kiln, "tmp-disk-mount", {"op": "mount"})
    assert mount["fstype"] == "ext4", mount
    assert {"rw", "nosuid", "nodev"} <= set(mount["options"].split(",")), mount
    kiln.client().delete_function(FunctionName="tmp-disk-mount")


def test_files_in_tmp_do_not_count_against_memory(kiln):
    # 128 MB of memory, 300 MB left in /tmp across invocations: on a tmpfs the instance was killed for memory.
    deploy(kiln, "tmp-disk-128", MemorySize=128)
    for round in range(1, 7):
        seen = call(kiln, "tmp-disk-128", {"op": "append", "mb": 50})
        assert seen == {"files": round, "mb": 50 * round}, seen
    # And it keeps answering with the files still there.
    assert len(call(kiln, "tmp-disk-128", {"op": "list"})) == 6
    kiln.client().delete_function(FunctionName="tmp-disk-128")


def test_writing_past_ephemeral_storage_is_enospc(kiln):
    deploy(kiln, "tmp-disk-full", MemorySize=256, EphemeralStorage={"Size": 512})
    full = call(kiln, "tmp-disk-full", {"op": "fill"})
    assert full["errno"] == 28, full  # ENOSPC, inside the function; the instance lives on
    assert 512 <= full["written_mb"] <= 560, full
    assert call(kiln, "tmp-disk-full", {"op": "put", "name": "after"}) == "ok"
    kiln.client().delete_function(FunctionName="tmp-disk-full")


def test_a_larger_ephemeral_storage_is_honoured(kiln):
    deploy(kiln, "tmp-disk-1g", MemorySize=256, EphemeralStorage={"Size": 1024})
    full = call(kiln, "tmp-disk-1g", {"op": "fill"})
    assert full["errno"] == 28 and 1024 <= full["written_mb"] <= 1100, full
    kiln.client().delete_function(FunctionName="tmp-disk-1g")


def test_a_new_instance_starts_with_an_empty_tmp(kiln):
    deploy(kiln, "tmp-disk-new")
    assert call(kiln, "tmp-disk-new", {"op": "list"}) == []
    assert call(kiln, "tmp-disk-new", {"op": "put", "name": "left-behind"}) == "ok"
    assert call(kiln, "tmp-disk-new", {"op": "list"}) == ["left-behind"]
    # An update makes new instances (a new revision, a new zygote): nothing of the old /tmp shows.
    kiln.client().update_function_configuration(FunctionName="tmp-disk-new", Environment={"Variables": {"V": "2"}})
    wait_for(lambda: call(kiln, "tmp-disk-new", {"op": "list"}) == [], timeout=30, what="a new instance")
    kiln.client().delete_function(FunctionName="tmp-disk-new")


def test_functions_cannot_see_each_others_tmp(kiln):
    deploy(kiln, "tmp-disk-a")
    deploy(kiln, "tmp-disk-b")
    name = f"secret-{uuid.uuid4().hex}"
    assert call(kiln, "tmp-disk-a", {"op": "put", "name": name}) == "ok"
    assert name in call(kiln, "tmp-disk-a", {"op": "list"})
    assert name not in call(kiln, "tmp-disk-b", {"op": "list"})
    # Nor is it anywhere on the host's data dir under its name (the image is unlinked once attached).
    assert not [p for p in Path(kiln.data_dir).rglob(name)]
    for function in ("tmp-disk-a", "tmp-disk-b"):
        kiln.client().delete_function(FunctionName=function)


def test_no_loop_device_or_image_outlives_kiln(fresh_kiln):
    server = fresh_kiln()
    deploy(server, "tmp-disk-crash")
    assert call(server, "tmp-disk-crash", {"op": "put", "name": "x"}) == "ok"
    assert loop_devices_of(server.data_dir), "no disks in use"
    images = Path(server.data_dir) / "run" / "tmp"
    # A disk a crashed run left attached and not yet unlinked (its formatting was cut short).
    stale = images / "1-0.img"
    subprocess.run(["truncate", "-s", "8M", str(stale)], check=True)
    subprocess.run(["losetup", "-f", str(stale)], check=True)
    server.kill9()
    # The sandboxes die with kiln, and with them their mounts; every autoclear device detaches itself.
    wait_for(lambda: len(loop_devices_of(server.data_dir)) == 1, timeout=30, what="the crashed run's disks to go")
    server.start()
    # The restart detached the stale device and removed its image; the rest are the new run's pool.
    pid = server.proc.pid
    wait_for(lambda: all(f"/{pid}-" in line for line in loop_devices_of(server.data_dir)), timeout=30,
             what="only the new run's disks")
    assert not stale.exists()
    assert call(server, "tmp-disk-crash", {"op": "list"}) == []
    server.stop()
    wait_for(lambda: not loop_devices_of(server.data_dir), timeout=30, what="every disk to go at shutdown")
    assert not list(images.glob("*.img"))


def test_without_disks_tmp_is_a_tmpfs_and_functions_still_start(fresh_kiln):
    # What a host without loop devices gets (a container without /dev/loop-control), forced here.
    server = fresh_kiln(extra_args=["--tmp-disks", "off"])
    assert node_status(server)["tmp"].startswith("tmpfs"), node_status(server)["tmp"]
    assert "/tmp is a tmpfs" in "".join(server.output)
    deploy(server, "tmp-tmpfs")
    assert call(server, "tmp-tmpfs", {"op": "mount"})["fstype"] == "tmpfs"
    assert call(server, "tmp-tmpfs", {"op": "put", "name": "x"}) == "ok"
    assert not loop_devices_of(server.data_dir)


def test_a_burst_that_draws_the_pool_dry_keeps_as_many_ready_for_the_next(fresh_kiln, tmp_path):
    # Four disks of the default size are kept ready; a burst of starts that each take one (the
    # coldest path: no snapshot, no spare fork sharing its zygote's /tmp) draws more than that,
    # and the pool keeps as many ready for the next burst as this one drew.
    server = fresh_kiln()
    pool = lambda: node_status(server)["tmp_disks"].get("512", {})
    wait_for(lambda: pool().get("ready") == 4, timeout=60, what="the pool's four disks")
    code = tmp_path / "tmp-burst"
    code.mkdir()
    (code / "app.py").write_text(TMP_FUNCTION)
    server.cli("deploy", "tmp-burst", "--runtime", PYTHON_RUNTIME, "--handler", "app.handler",
               "--code", str(code), "--timeout", "60", "--prebake", "off")
    clients = [server.client() for _ in range(12)]
    barrier = threading.Barrier(12)
    answers = []

    def one(client):
        barrier.wait()
        response = client.invoke(FunctionName="tmp-burst", Payload=json.dumps({"op": "sleep", "seconds": 2}))
        answers.append(json.loads(response["Payload"].read()))
    threads = [threading.Thread(target=one, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert answers == ["slept"] * 12
    refilled = wait_for(lambda: (c := pool()) and c["wanted"] > 4 and c["ready"] == c["wanted"] and c,
                        timeout=120, what="the pool to hold what the burst drew")
    assert 8 <= refilled["wanted"] <= 32, refilled
