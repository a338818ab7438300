"""Served by the unmodified AWS Lambda runtime interface client (awslambdaric), vendored at test time."""
import os

import awslambdaric


def handler(event, context):
    print("hello from awslambdaric", context.aws_request_id)
    if event.get("fail"):
        raise ValueError("ric failure")
    return {
        "ric": os.path.dirname(awslambdaric.__file__),
        "requestId": context.aws_request_id,
        "functionName": context.function_name,
        "remaining": context.get_remaining_time_in_millis(),
        "event": event,
    }
