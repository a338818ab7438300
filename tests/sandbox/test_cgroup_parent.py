"""`kiln up --cgroup-parent PATH`: kiln itself and every instance it starts are under one cgroup
the operator names, so a limit set there (a node's CPU quota in a cluster, its memory) covers
the node as a whole. Checked on the host's real cgroup hierarchy (v1 or v2)."""

import uuid
from pathlib import Path

import pytest

from kiln_harness import PYTHON_RUNTIME, Kiln, cgroup_parent

CGROUP_ROOT = Path("/sys/fs/cgroup")


def hierarchies():
    """Where a cgroup path lives: the unified mount (v2), else the v1 controllers kiln uses."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [CGROUP_ROOT / c for c in ("memory", "pids", "cpu")]


def remove_tree(path):
    """rmdir a cgroup tree leaf first (cgroup directories hold only the kernel's files)."""
    if not path.is_dir():
        return
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            child.rmdir()
        except OSError:
            pass
    try:
        path.rmdir()
    except OSError:
        pass


@pytest.fixture
def parent():
    top = f"kiln-test-parent-{uuid.uuid4().hex[:8]}"
    yield f"{top}/node-1"
    for hierarchy in hierarchies():
        remove_tree(hierarchy / top)


def test_kiln_and_its_instances_live_under_the_parent_it_is_given(parent):
    server = Kiln(extra_args=["--cgroup-parent", parent])
    server.start()
    try:
        own = cgroup_parent(server)
        for hierarchy in hierarchies():
            procs = (hierarchy / parent / f"{own}-node" / "cgroup.procs").read_text().split()
            assert str(server.proc.pid) in procs, (hierarchy, procs)
        server.deploy("under-parent", PYTHON_RUNTIME, "app.handler",
                      files={"app.py": "import os\ndef handler(e, c):\n    return {'pid': os.getpid()}\n"})
        server.invoke("under-parent", {})
        instances = [d for d in (hierarchies()[0] / parent / own).iterdir() if d.is_dir() and d.name.startswith("i")]
        assert instances, "no instance cgroup under the parent"
        # Nothing of this kiln's is left at the mount's top level.
        assert not (hierarchies()[0] / own).exists()
    finally:
        server.cleanup()


def test_a_cgroup_parent_that_is_not_a_path_is_refused():
    server = Kiln(extra_args=["--cgroup-parent", "a/../b"])
    with pytest.raises(RuntimeError, match="not a cgroup path"):
        server.start(timeout=10)
    server.cleanup()
