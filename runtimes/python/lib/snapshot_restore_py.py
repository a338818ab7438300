"""Runtime hooks around kiln's function snapshots, with the API of AWS Lambda SnapStart's module of the same name.

kiln's hot start path forks new instances from a zygote that ran the function's init code and its warm-up
invocations. State created at init is then shared by every instance: a function that needs something unique
per instance (a random seed, a connection, a temporary credential) registers an after-restore hook, which runs
in each new instance before its first invocation. Before-snapshot hooks run once, in the zygote, before it
starts forking (close connections there). Both run in the order they were registered; both also work as
decorators.
"""

_before_snapshot = []
_after_restore = []


def register_before_snapshot(func, *args, **kwargs):
    _before_snapshot.append((func, args, kwargs))
    return func


def register_after_restore(func, *args, **kwargs):
    _after_restore.append((func, args, kwargs))
    return func


def get_before_snapshot():
    return list(_before_snapshot)


def get_after_restore():
    return list(_after_restore)
