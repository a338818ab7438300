"""Instance semantics of tests/startpaths/test_instances.py: a module-level id and counter show which instance served a
request and whether it was warm."""
import os
import subprocess
import time
import uuid

INSTANCE_ID = uuid.uuid4().hex
COUNT = 0

try:  # kiln's hot start path forks instances from a snapshot taken after init: each needs its own id
    from snapshot_restore_py import register_after_restore

    @register_after_restore
    def _new_instance():
        global INSTANCE_ID, COUNT
        INSTANCE_ID, COUNT = uuid.uuid4().hex, 0
except ImportError:
    pass


def handler(event, context):
    global COUNT
    COUNT += 1
    action = event.get("action")
    if action == "sleep":
        print("about to sleep", event["seconds"], flush=True)
        time.sleep(event["seconds"])
    elif action == "exit":
        os._exit(3)
    elif action == "spawn":
        # A detached grandchild that would outlive the invocation if kiln let it.
        subprocess.Popen(["sleep", event["marker"]], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(event.get("seconds", 0))
    print("served by", INSTANCE_ID, "count", COUNT)
    return {"instance": INSTANCE_ID, "count": COUNT, "pid": os.getpid()}
