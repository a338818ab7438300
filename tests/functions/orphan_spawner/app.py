"""Leaves a daemonized grandchild (double fork, new session, sleeping under a marker) and then outstays its
timeout, to show that nothing of a sandbox survives the end of its instance."""
import os
import time


def handler(event, context):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in range(0, 3):
                os.close(fd)
            os.execvp("sleep", ["sleep", event["marker"]])
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(event.get("seconds", 0))
    return {"spawned": True}
