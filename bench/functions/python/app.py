"""NoOp: the smallest function that still answers with JSON.

The kiln function and both Python floors (bench/floors/py_*.py) load this very file.
"""


def handler(event, context):
    return {}
