"""Start-path semantics of tests/startpaths/test_start_paths.py: what ran at init, in warm-up invocations and in the
snapshot hooks, and what an instance holds in memory."""
import os

from snapshot_restore_py import register_after_restore, register_before_snapshot

VERSION = open(os.path.join(os.path.dirname(__file__), "version.txt")).read().strip()
INIT_PID = os.getpid()
EVENTS = []  # every event this process (or the zygote it was forked from) handled
HOOKS = []
# Shared with forks copy-on-write: 48 MB of distinct pages, built at init.
BALLAST = [os.urandom(4096) for _ in range(int(os.environ.get("BALLAST_PAGES", "0")))]


@register_before_snapshot
def _before():
    HOOKS.append("before_snapshot:%d" % os.getpid())


@register_after_restore
def _after():
    HOOKS.append("after_restore:%d" % os.getpid())


def handler(event, context):
    EVENTS.append(event)
    action = event.get("action")
    if action == "sleep":
        import time
        time.sleep(event["seconds"])
    elif action == "inspect":
        return {"env": dict(os.environ), "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
                "version": VERSION, "uid": os.getuid()}
    elif action == "allocate":
        hog = bytearray(event["mb"] << 20)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
    return {
        "version": VERSION,
        "events": EVENTS,
        "hooks": HOOKS,
        "init_pid": INIT_PID,
        "pid": os.getpid(),
        "stream": context.log_stream_name,
        "init_type": os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE"),
    }
