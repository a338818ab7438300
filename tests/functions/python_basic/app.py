"""Python handlers of tests/lambda/test_runtimes.py."""
import logging
import os
import sys

import tinylib  # vendored in the zip, next to this file

ENV_NAMES = ["AWS_LAMBDA_FUNCTION_NAME", "_HANDLER", "LAMBDA_TASK_ROOT", "AWS_REGION",
             "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_EXECUTION_ENV", "KILN_SHIM_FD"]

logger = logging.getLogger()
logger.setLevel(logging.INFO)


def echo(event, context):
    return {"kind": "python", "event": event}


def context_info(event, context):
    return {
        "awsRequestId": context.aws_request_id,
        "functionName": context.function_name,
        "invokedFunctionArn": context.invoked_function_arn,
        "memoryLimitInMB": context.memory_limit_in_mb,
        "remaining": context.get_remaining_time_in_millis(),
        "cwd": os.getcwd(),
        "env": {name: os.environ.get(name) for name in ENV_NAMES},
    }


def uses_dependency(event, context):
    return {"slug": tinylib.slugify(event["text"]), "version": tinylib.__version__, "from": tinylib.__file__}


class CustomFailure(Exception):
    pass


def fails(event, context):
    raise CustomFailure("kaboom from python")


def logs(event, context):
    print("python print line", event["tag"])
    sys.stderr.write("python stderr line %s\n" % event["tag"])
    logger.info("python logging line %s", event["tag"])
    return "logged"


def chatty(event, context):
    for i in range(event["lines"]):
        print("chatty line %06d %s" % (i, "x" * 100))
    return {"lines": event["lines"]}


def spawns(event, context):
    import subprocess
    import threading
    from concurrent.futures import ThreadPoolExecutor

    child = subprocess.run(["/bin/sh", "-c", "echo from-child $$"], capture_output=True, text=True, check=True)
    results = []
    thread = threading.Thread(target=lambda: results.append(sum(range(10))))
    thread.start()
    thread.join()
    with ThreadPoolExecutor(4) as pool:
        squares = list(pool.map(lambda n: n * n, range(5)))
    return {"child": child.stdout.startswith("from-child "), "thread": results, "pool": squares}
