"""Probes the sandbox from the inside for tests/sandbox/test_sandbox.py. Each op reports what it saw; errors are
returned as errno names so that the test asserts on the exact failure."""
import ctypes
import errno
import os
import socket
import time
import urllib.error
import urllib.request

LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
PTRACE_TRACEME, PTRACE_ATTACH = 0, 16
X32, SYS_MOUNT, SYS_UNSHARE, SYS_IO_URING_SETUP = 0x40000000, 165, 272, 425  # x86_64 numbers


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else repr(e)


def try_read(path):
    try:
        if os.path.isdir(path):
            return {"listing": sorted(os.listdir(path))}
        with open(path, "rb") as f:
            return {"bytes": len(f.read(4096))}
    except OSError as e:
        return {"error": errname(e)}


def try_write(path):
    try:
        with open(path, "w") as f:
            f.write("written from the sandbox")
        os.unlink(path)
        return "ok"
    except OSError as e:
        return errname(e)


def libc_call(fn, *args):
    ctypes.set_errno(0)
    ret = fn(*args)
    if ret == -1:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return "ok"


def syscalls():
    os.makedirs("/tmp/mnt", exist_ok=True)
    return {
        "mount": libc_call(LIBC.mount, b"tmpfs", b"/tmp/mnt", b"tmpfs", ctypes.c_ulong(0), None),
        "mount_bind": libc_call(LIBC.mount, b"/", b"/tmp/mnt", None, ctypes.c_ulong(4096), None),
        "umount": libc_call(LIBC.umount2, b"/var/task", 2),
        "unshare_user": libc_call(LIBC.unshare, CLONE_NEWUSER),
        "unshare_mount": libc_call(LIBC.unshare, CLONE_NEWNS),
        "unshare_net": libc_call(LIBC.unshare, CLONE_NEWNET),
        "unshare_pid": libc_call(LIBC.unshare, CLONE_NEWPID),
        "ptrace_traceme": libc_call(LIBC.ptrace, ctypes.c_long(PTRACE_TRACEME), 0, None, None),
        "ptrace_attach_init": libc_call(LIBC.ptrace, ctypes.c_long(PTRACE_ATTACH), 1, None, None),
        "chroot": libc_call(LIBC.chroot, b"/tmp"),
        "setuid_root": libc_call(LIBC.setuid, 0),
        "kill_init": libc_call(LIBC.kill, 1, 9),
        "sethostname": libc_call(LIBC.sethostname, b"evil", 4),
        # The x32 ABI numbers the same calls with bit 30 set; a filter keyed on numbers must not let them by.
        "x32_unshare_user": libc_call(LIBC.syscall, ctypes.c_long(X32 | SYS_UNSHARE), CLONE_NEWUSER),
        "x32_mount": libc_call(LIBC.syscall, ctypes.c_long(X32 | SYS_MOUNT), b"tmpfs", b"/tmp/mnt", b"tmpfs",
                               ctypes.c_ulong(0), None),
        "io_uring_setup": libc_call(LIBC.syscall, ctypes.c_long(SYS_IO_URING_SETUP), 4, ctypes.create_string_buffer(256)),
    }


def proc_status():
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    keep = ["Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]
    return {k: fields.get(k) for k in keep}


def processes():
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    found[name] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError as e:
                found[name] = errname(e)
    return found


def fill_tmp(chunk_mb=16):
    chunk = b"\xa5" * (chunk_mb << 20)
    written = 0
    path = "/tmp/fill.bin"
    try:
        with open(path, "wb") as f:
            while written < (4 << 30):
                f.write(chunk)
                f.flush()
                written += chunk_mb
        return {"written_mb": written, "error": None}
    except OSError as e:
        return {"written_mb": written, "error": errname(e)}
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def connect(host, port):
    try:
        with socket.create_connection((host, port), timeout=3):
            return "ok"
    except OSError as e:
        return errname(e) if e.errno else type(e).__name__


def http(method, url):
    try:
        request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=5) as response:
            return {"status": response.status}
    except urllib.error.HTTPError as e:
        return {"status": e.code}
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return {"error": errname(reason) if isinstance(reason, OSError) else repr(reason)}


def hijack(api):
    """Polls another instance's Runtime API and, given an event, answers it with a forgery."""
    try:
        with urllib.request.urlopen("http://%s/2018-06-01/runtime/invocation/next" % api, timeout=8) as r:
            request_id = r.headers["Lambda-Runtime-Aws-Request-Id"]
        forged = urllib.request.Request("http://%s/2018-06-01/runtime/invocation/%s/response" % (api, request_id),
                                        data=b'"hijacked"', method="POST")
        with urllib.request.urlopen(forged, timeout=5) as r:
            return {"stole": request_id, "status": r.status}
    except urllib.error.HTTPError as e:
        return {"status": e.code}
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return {"error": errname(reason) if isinstance(reason, OSError) else repr(reason)}


def process_states():
    """Each process this sandbox can see, with its state letter."""
    states = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    states[name] = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                pass
    return states


def zombies(count):
    """Leaves `count` orphans that exit at once (double fork); the sandbox's init must reap them.

    Waits (up to 10 s) until no zombie is left and no more processes run than before: an orphan
    may still be running when its parent has been waited for."""
    before = len(process_states())
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            if os.fork() == 0:
                os._exit(0)
            os._exit(0)
        os.waitpid(pid, 0)
    deadline = time.time() + 10
    while True:
        states = process_states()
        left = [pid for pid, state in states.items() if state == "Z"]
        if (not left and len(states) <= before) or time.time() > deadline:
            return {"zombies": len(left), "processes": len(states), "before": before}
        time.sleep(0.05)


def handler(event, context):
    op = event["op"]
    if op == "read":
        return {path: try_read(path) for path in event["paths"]}
    if op == "write":
        return {path: try_write(path) for path in event["paths"]}
    if op == "mountinfo":
        with open("/proc/self/mountinfo") as f:
            return [line.split() for line in f]
    if op == "fill_tmp":
        return fill_tmp()
    if op == "processes":
        return processes()
    if op == "status":
        return {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "status": proc_status(),
                "hostname": socket.gethostname()}
    if op == "syscalls":
        return syscalls()
    if op == "connect":
        return {"%s:%d" % (h, p): connect(h, p) for h, p in event["targets"]}
    if op == "http":
        return {"%s %s" % (method, url): http(method, url) for method, url in event["requests"]}
    if op == "interfaces":
        return sorted(name for _, name in socket.if_nameindex())
    if op == "fds":
        found = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                found[fd] = os.readlink("/proc/self/fd/" + fd)
            except OSError as e:
                found[fd] = errname(e)
        return found
    if op == "put_tmp":
        for path in event["paths"]:
            with open(path, "w") as f:
                f.write(event["value"])
        return "ok"
    if op == "zombies":
        return zombies(event["count"])
    if op == "hijack":
        return hijack(event["api"])
    raise ValueError("unknown op " + op)
