"""Tries to fork event["n"] children and counts how many it got. By default the children wait on a pipe and
are released and reaped before the answer; with "hold" they stay, and the handler sleeps for "seconds"."""
import os
import time


def handler(event, context):
    read_end, write_end = os.pipe()
    children, failure = [], None
    for _ in range(event["n"]):
        try:
            pid = os.fork()
        except OSError as e:
            failure = e.strerror
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)  # returns at end of file: when the parent lets go
            os._exit(0)
        children.append(pid)
    if event.get("hold"):
        time.sleep(event.get("seconds", 0))
    os.close(write_end)
    os.close(read_end)
    for pid in children:
        os.waitpid(pid, 0)
    return {"forked": len(children), "error": failure}
