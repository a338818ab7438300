"""Function URLs, called with plain `requests`: payload format 2.0 in, response mapping out."""

import base64
import json
import uuid

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest
import requests

from kiln_harness import NODE_RUNTIME, PYTHON_RUNTIME, zip_files

ROLE = "arn:aws:iam::000000000000:role/test"

# Returns the event it got, as an HTTP response.
ECHO_EVENT = """
import json

def handler(event, context):
    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(event)}
"""


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def deploy_url(kiln, code, auth="NONE", runtime=PYTHON_RUNTIME, handler="app.handler", filename="app.py"):
    name = unique("url")
    lam = kiln.client()
    lam.create_function(FunctionName=name, Runtime=runtime, Role=ROLE, Handler=handler,
                        Code={"ZipFile": zip_files({filename: code})})
    url = lam.create_function_url_config(FunctionName=name, AuthType=auth)["FunctionUrl"]
    assert url.endswith("/")
    return name, url


def echo(kiln, method="GET", path="", **kwargs):
    name, url = deploy_url(kiln, ECHO_EVENT)
    response = requests.request(method, url + path, timeout=60, **kwargs)
    assert response.status_code == 200, response.text
    return name, response.json()


def sigv4_headers(kiln, method, url, body=b"", headers=None, secret=None):
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    creds = botocore.credentials.Credentials(kiln.access_key, secret or kiln.secret_key)
    botocore.auth.SigV4Auth(creds, "lambda", kiln.region).add_auth(request)
    return dict(request.headers.items())


# --- Request event (payload format 2.0) -------------------------------------------------------


def test_event_has_payload_format_2(kiln):
    name, event = echo(kiln, "GET", "some/path?b=2&a=1&a=3&e=x%20y", headers={"X-Custom": "Value"})
    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/some/path"
    assert event["rawQueryString"] == "b=2&a=1&a=3&e=x%20y"
    assert event["queryStringParameters"] == {"a": "1,3", "b": "2", "e": "x y"}
    assert event["headers"]["x-custom"] == "Value"
    assert all(key == key.lower() for key in event["headers"])
    assert "host" in event["headers"]
    assert event["isBase64Encoded"] is False
    assert "body" not in event or event["body"] in (None, "")
    assert "cookies" not in event
    http = event["requestContext"]["http"]
    assert http["method"] == "GET"
    assert http["path"] == "/some/path"
    assert http["sourceIp"] == "127.0.0.1"
    assert http["userAgent"].startswith("python-requests")
    assert event["requestContext"]["requestId"]
    assert isinstance(event["requestContext"]["timeEpoch"], int)


def test_root_path_with_and_without_slash(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT)
    assert requests.get(url, timeout=60).json()["rawPath"] == "/"
    assert requests.get(url.rstrip("/"), timeout=60).json()["rawPath"] == "/"
    event = requests.get(url.rstrip("/") + "?x=1", timeout=60).json()
    assert event["rawPath"] == "/" and event["rawQueryString"] == "x=1"


def test_cookies_are_split_out_of_headers(kiln):
    _, event = echo(kiln, headers={"Cookie": "a=1; b=two"})
    assert event["cookies"] == ["a=1", "b=two"]
    assert "cookie" not in event["headers"]


def test_text_body(kiln):
    _, event = echo(kiln, "POST", "submit", data="hello world", headers={"Content-Type": "text/plain"})
    assert event["body"] == "hello world"
    assert event["isBase64Encoded"] is False
    assert event["requestContext"]["http"]["method"] == "POST"


def test_json_body(kiln):
    _, event = echo(kiln, "PUT", "", json={"k": [1, 2]})
    assert json.loads(event["body"]) == {"k": [1, 2]}
    assert event["isBase64Encoded"] is False


def test_binary_body_is_base64(kiln):
    data = bytes(range(256)) * 4
    _, event = echo(kiln, "POST", "upload", data=data, headers={"Content-Type": "application/octet-stream"})
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == data


def test_repeated_headers_are_joined(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT)
    # requests cannot repeat a header; http.client can.
    import http.client
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.putrequest("GET", parts.path)
    conn.putheader("X-Multi", "one")
    conn.putheader("X-Multi", "two")
    conn.endheaders()
    response = conn.getresponse()
    event = json.loads(response.read())
    conn.close()
    assert event["headers"]["x-multi"] == "one,two"


# --- Response mapping -------------------------------------------------------------------------


def test_response_mapping(kiln):
    name, url = deploy_url(kiln, """
def handler(event, context):
    return {
        "statusCode": 201,
        "headers": {"Content-Type": "text/html", "X-Extra": "yes"},
        "body": "<h1>created</h1>",
        "cookies": ["session=abc; Path=/", "theme=dark"],
    }
""")
    response = requests.post(url, timeout=60)
    assert response.status_code == 201
    assert response.text == "<h1>created</h1>"
    assert response.headers["Content-Type"] == "text/html"
    assert response.headers["X-Extra"] == "yes"
    set_cookies = response.raw.headers.getlist("Set-Cookie")
    assert set_cookies == ["session=abc; Path=/", "theme=dark"]


def test_base64_response_body(kiln):
    data = bytes(range(256))
    name, url = deploy_url(kiln, f"""
import base64

def handler(event, context):
    return {{
        "statusCode": 200,
        "headers": {{"content-type": "image/png"}},
        "body": base64.b64encode({data!r}).decode(),
        "isBase64Encoded": True,
    }}
""")
    response = requests.get(url, timeout=60)
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content == data


def test_plain_dict_is_200_json(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    return {'hello': 'world', 'n': [1, 2]}\n")
    response = requests.get(url, timeout=60)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"hello": "world", "n": [1, 2]}


def test_plain_string_is_200(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    return 'just text'\n")
    response = requests.get(url, timeout=60)
    assert response.status_code == 200
    assert response.text == "just text"


def test_status_code_without_body(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    return {'statusCode': 204}\n")
    response = requests.delete(url, timeout=60)
    assert response.status_code == 204
    assert response.content == b""


def test_redirect_response(kiln):
    name, url = deploy_url(kiln, (
        "def handler(event, context):\n"
        "    return {'statusCode': 302, 'headers': {'Location': '/elsewhere'}}\n"))
    response = requests.get(url, timeout=60, allow_redirects=False)
    assert response.status_code == 302
    assert response.headers["Location"] == "/elsewhere"


def test_node_function_url(kiln):
    name, url = deploy_url(kiln, """
exports.handler = async (event) => ({
  statusCode: 200,
  headers: { "content-type": "text/plain" },
  body: `node saw ${event.requestContext.http.method} ${event.rawPath} ${event.queryStringParameters.q}`,
});
""", runtime=NODE_RUNTIME, handler="index.handler", filename="index.js")
    response = requests.get(url + "p/q?q=42", timeout=60)
    assert response.status_code == 200
    assert response.text == "node saw GET /p/q 42"


# --- Auth and errors --------------------------------------------------------------------------


def test_aws_iam_url_rejects_unsigned(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT, auth="AWS_IAM")
    response = requests.get(url, timeout=60)
    assert response.status_code == 403
    assert response.json()
    response = requests.post(url + "x", data=b"{}", timeout=60)
    assert response.status_code == 403


def test_aws_iam_url_accepts_sigv4(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT, auth="AWS_IAM")
    target = url + "signed/path?x=1&y=two"
    body = b'{"signed": true}'
    headers = sigv4_headers(kiln, "POST", target, body, headers={"Content-Type": "application/json"})
    response = requests.post(target, data=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    event = response.json()
    assert event["rawPath"] == "/signed/path"
    assert event["queryStringParameters"] == {"x": "1", "y": "two"}
    assert json.loads(event["body"]) == {"signed": True}
    get_headers = sigv4_headers(kiln, "GET", url)
    assert requests.get(url, headers=get_headers, timeout=60).status_code == 200


def test_aws_iam_url_rejects_bad_signature(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT, auth="AWS_IAM")
    headers = sigv4_headers(kiln, "GET", url, secret="wrong" * 8)
    assert requests.get(url, headers=headers, timeout=60).status_code == 403
    # A signature for one path does not open another.
    headers = sigv4_headers(kiln, "GET", url + "a")
    assert requests.get(url + "b", headers=headers, timeout=60).status_code == 403


def test_switching_auth_type_takes_effect(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT, auth="NONE")
    assert requests.get(url, timeout=60).status_code == 200
    kiln.client().update_function_url_config(FunctionName=name, AuthType="AWS_IAM")
    assert requests.get(url, timeout=60).status_code == 403
    kiln.client().delete_function_url_config(FunctionName=name)
    assert requests.get(url, timeout=60).status_code == 404


def test_function_without_url_is_404(kiln):
    name = unique("nourl")
    kiln.client().create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                                  Code={"ZipFile": zip_files({"app.py": ECHO_EVENT})})
    response = requests.get(f"{kiln.endpoint}/fn/{name}/", timeout=60)
    assert response.status_code == 404
    response = requests.get(f"{kiln.endpoint}/fn/{unique('missing')}/", timeout=60)
    assert response.status_code == 404


def test_function_error_is_502(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    raise ValueError('secret detail')\n")
    response = requests.get(url, timeout=60)
    assert response.status_code == 502
    assert "secret detail" not in response.text


def test_malformed_function_response_is_502(kiln):
    name, url = deploy_url(kiln, (
        "def handler(event, context):\n"
        "    return {'statusCode': 200, 'body': '!!!not base64', 'isBase64Encoded': True}\n"))
    assert requests.get(url, timeout=60).status_code == 502


def test_throttled_url_is_429(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT)
    kiln.client().put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    assert requests.get(url, timeout=60).status_code == 429


def test_url_survives_code_update(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    return 'one'\n")
    assert requests.get(url, timeout=60).text == "one"
    kiln.client().update_function_code(FunctionName=name, ZipFile=zip_files({
        "app.py": "def handler(event, context):\n    return 'two'\n"}))
    kiln.settled(name)
    assert requests.get(url, timeout=60).text == "two"


# --- CORS -------------------------------------------------------------------------------------


def deploy_cors(kiln, cors, auth="NONE"):
    name = unique("cors")
    lam = kiln.client()
    lam.create_function(FunctionName=name, Runtime=PYTHON_RUNTIME, Role=ROLE, Handler="app.handler",
                        Code={"ZipFile": zip_files({"app.py": (
                            "def handler(event, context):\n"
                            "    print('INVOKED', event['requestContext']['http']['method'])\n"
                            "    return {'statusCode': 200, 'headers': {'x-out': '1', 'access-control-allow-origin': 'https://evil.example'}, 'body': 'hi'}\n")})})
    created = lam.create_function_url_config(FunctionName=name, AuthType=auth, Cors=cors)
    return name, created


def test_cors_config_round_trips(kiln):
    cors = {"AllowOrigins": ["https://app.example"], "AllowMethods": ["GET", "POST"], "AllowHeaders": ["x-token"],
            "ExposeHeaders": ["x-out"], "MaxAge": 600, "AllowCredentials": True}
    name, created = deploy_cors(kiln, cors)
    assert created["Cors"] == cors
    lam = kiln.client()
    assert lam.get_function_url_config(FunctionName=name)["Cors"] == cors
    # Updating only the auth type keeps CORS; updating CORS replaces it.
    assert lam.update_function_url_config(FunctionName=name, AuthType="AWS_IAM")["Cors"] == cors
    updated = lam.update_function_url_config(FunctionName=name, Cors={"AllowOrigins": ["*"]})
    assert updated["Cors"] == {"AllowOrigins": ["*"]}
    assert updated["AuthType"] == "AWS_IAM"


def test_cors_preflight_is_answered_without_invoking(kiln):
    name, created = deploy_cors(kiln, {"AllowOrigins": ["https://app.example"], "AllowMethods": ["GET", "POST"],
                                       "AllowHeaders": ["x-token"], "MaxAge": 600})
    url = created["FunctionUrl"]
    response = requests.options(url, timeout=60, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-token"})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert set(response.headers["Access-Control-Allow-Methods"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert response.headers["Access-Control-Allow-Headers"].lower() == "x-token"
    assert response.headers["Access-Control-Max-Age"] == "600"
    assert "INVOKED" not in kiln.cli("logs", name).stdout
    # A disallowed origin gets no CORS headers.
    response = requests.options(url, timeout=60, headers={
        "Origin": "https://other.example", "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in response.headers


def test_cors_headers_on_responses(kiln):
    name, created = deploy_cors(kiln, {"AllowOrigins": ["https://app.example"], "ExposeHeaders": ["x-out"],
                                       "AllowCredentials": True})
    url = created["FunctionUrl"]
    response = requests.get(url, timeout=60, headers={"Origin": "https://app.example"})
    assert response.status_code == 200 and response.text == "hi"
    assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert response.headers["Access-Control-Expose-Headers"] == "x-out"
    assert "Origin" in response.headers.get("Vary", "")
    response = requests.get(url, timeout=60, headers={"Origin": "https://other.example"})
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers


def test_cors_wildcard_origin(kiln):
    name, created = deploy_cors(kiln, {"AllowOrigins": ["*"], "AllowMethods": ["*"]})
    url = created["FunctionUrl"]
    response = requests.get(url, timeout=60, headers={"Origin": "https://anywhere.example"})
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    preflight = requests.options(url, timeout=60, headers={
        "Origin": "https://anywhere.example", "Access-Control-Request-Method": "DELETE"})
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "DELETE" in preflight.headers["Access-Control-Allow-Methods"] or \
        preflight.headers["Access-Control-Allow-Methods"] == "*"


def test_cors_preflight_of_iam_url_needs_no_signature(kiln):
    name, created = deploy_cors(kiln, {"AllowOrigins": ["https://app.example"], "AllowMethods": ["POST"]},
                                auth="AWS_IAM")
    url = created["FunctionUrl"]
    preflight = requests.options(url, timeout=60, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert requests.post(url, timeout=60, headers={"Origin": "https://app.example"}).status_code == 403


def test_without_cors_options_reaches_the_function(kiln):
    name, url = deploy_url(kiln, ECHO_EVENT)
    response = requests.options(url, timeout=60, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
    assert response.status_code == 200
    assert response.json()["requestContext"]["http"]["method"] == "OPTIONS"


def test_url_responses_carry_the_request_id(kiln):
    name, url = deploy_url(kiln, "def handler(event, context):\n    return context.aws_request_id\n")
    response = requests.get(url, timeout=60)
    assert response.headers["x-amzn-RequestId"] == response.text
