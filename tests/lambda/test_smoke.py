"""The shortest path through kiln: deploy with boto3, invoke, read the log tail."""

from kiln_harness import PYTHON_RUNTIME


def test_python_function_round_trip(kiln):
    kiln.deploy("smoke", PYTHON_RUNTIME, "app.handler", files={
        "app.py": "def handler(event, context):\n    print('hi from', context.function_name)\n    return {'echo': event}\n",
    })
    result, response = kiln.invoke("smoke", {"a": 1}, LogType="Tail")
    assert response["StatusCode"] == 200
    assert result == {"echo": {"a": 1}}
    tail = kiln.log_tail(response)
    assert "hi from smoke" in tail
    assert "REPORT RequestId:" in tail and "Init Duration" in tail
