"""S3 event notifications to Lambda functions: PutBucketNotificationConfiguration and
GetBucketNotificationConfiguration through boto3 and the AWS CLI, and the events of object
writes delivered through kiln's async queue to a real function, which reports each event it
receives to an HTTP server of the test's own."""

import base64
import http.server
import json
import os
import subprocess
import threading
import time
import uuid

import botocore.exceptions
import pytest
import requests

from kiln_harness import PYTHON_RUNTIME, zip_files
from s3_harness import (VENV_BIN, StoreOnlyKiln, bucket, error_code, s3, s3_client, s3_endpoint, send,
                        signed_request)

ROLE = "arn:aws:iam::000000000000:role/test"
DEADLINE = 120

RECORDER = """
import json, os, urllib.request

def handler(event, context):
    request = urllib.request.Request(os.environ["REPORT_URL"], data=json.dumps(event).encode())
    urllib.request.urlopen(request, timeout=30).read()
    return "ok"
"""


class Recorder:
    """An HTTP server on the host that the recording function (host networking) posts each
    event it receives to."""

    def __init__(self):
        self.events = []
        lock = self.lock = threading.Lock()
        events = self.events

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                event = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with lock:
                    events.append(event)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self, bucket):
        """Every record received for `bucket`, in the order they came (kiln's own invocations
        of a new function, with `{}`, are not events)."""
        with self.lock:
            return [r for e in self.events for r in e.get("Records", []) if r["s3"]["bucket"]["name"] == bucket]

    def wait(self, bucket, count, what):
        end = time.time() + DEADLINE
        while len(self.records(bucket)) < count:
            if time.time() > end:
                raise AssertionError(f"timed out waiting for {what}; got {self.records(bucket)}")
            time.sleep(0.2)
        return self.records(bucket)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    server = Recorder()
    yield server
    server.close()


def create_recorder(server, recorder):
    """A Python function that posts each event it gets to `recorder`; returns its ARN."""
    name = f"notified-{uuid.uuid4().hex[:10]}"
    body = {
        "FunctionName": name, "Runtime": PYTHON_RUNTIME, "Role": ROLE, "Handler": "app.handler",
        "Code": {"ZipFile": base64.b64encode(zip_files({"app.py": RECORDER})).decode()},
        "Environment": {"Variables": {"REPORT_URL": recorder.url}},
        "KilnNetwork": "host",
    }
    response = server.signed_request("POST", "/2015-03-31/functions", json.dumps(body).encode())
    assert response.status_code == 201, response.text
    return response.json()["FunctionArn"]


def lambda_config(arn, events, prefix=None, suffix=None, id=None):
    config = {"LambdaFunctionArn": arn, "Events": events}
    rules = [{"Name": n, "Value": v} for n, v in (("prefix", prefix), ("suffix", suffix)) if v is not None]
    if rules:
        config["Filter"] = {"Key": {"FilterRules": rules}}
    if id:
        config["Id"] = id
    return config


def configure(s3, bucket, *configs):
    s3.put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={"LambdaFunctionConfigurations": list(configs)})


def queued_total(server):
    """How many events kiln has queued, from /metrics."""
    text = requests.get(server.endpoint + "/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith('kiln_async_events_total{outcome="queued"}'):
            return float(line.split()[-1])
    return 0.0


def queue_depth(server):
    return server.signed_request("GET", "/kiln/v1/status").json()["asyncQueueDepth"]


# --- the configuration --------------------------------------------------------------------------


def test_a_configuration_round_trips_and_an_empty_one_removes_it(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    got = s3.get_bucket_notification_configuration(Bucket=bucket)
    assert "LambdaFunctionConfigurations" not in got
    configure(s3, bucket,
              lambda_config(arn, ["s3:ObjectCreated:*"], prefix="in/", suffix=".txt", id="created"),
              lambda_config(arn, ["s3:ObjectRemoved:Delete", "s3:ObjectRemoved:DeleteMarkerCreated"],
                            prefix="in/", id="removed"))
    got = s3.get_bucket_notification_configuration(Bucket=bucket)["LambdaFunctionConfigurations"]
    assert got == [
        {"Id": "created", "LambdaFunctionArn": arn, "Events": ["s3:ObjectCreated:*"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"},
                                            {"Name": "suffix", "Value": ".txt"}]}}},
        {"Id": "removed", "LambdaFunctionArn": arn,
         "Events": ["s3:ObjectRemoved:Delete", "s3:ObjectRemoved:DeleteMarkerCreated"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}}},
    ]
    # A configuration without an Id is given one.
    configure(s3, bucket, lambda_config(arn, ["s3:ObjectCreated:Put"]))
    (only,) = s3.get_bucket_notification_configuration(Bucket=bucket)["LambdaFunctionConfigurations"]
    assert only["Id"] and only["Events"] == ["s3:ObjectCreated:Put"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
    assert "LambdaFunctionConfigurations" not in s3.get_bucket_notification_configuration(Bucket=bucket)


def test_invalid_configurations_are_refused_as_s3_refuses_them(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    missing = arn.rsplit(":", 1)[0] + ":no-such-function"

    def refused(notification):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration=notification)
        return e

    e = refused({"LambdaFunctionConfigurations": [lambda_config(missing, ["s3:ObjectCreated:*"])]})
    assert error_code(e) == "InvalidArgument"
    assert "Unable to validate the following destination configurations" in e.value.response["Error"]["Message"]
    e = refused({"LambdaFunctionConfigurations": [lambda_config(arn, ["s3:ObjectCreated:Everything"])]})
    assert error_code(e) == "InvalidArgument"
    e = refused({"LambdaFunctionConfigurations": [
        lambda_config(arn, ["s3:ObjectCreated:*"], prefix="img/"),
        lambda_config(arn, ["s3:ObjectCreated:Put"], prefix="img/raw/"),
    ]})
    assert error_code(e) == "InvalidArgument"
    e = refused({"QueueConfigurations": [
        {"QueueArn": "arn:aws:sqs:us-east-1:000000000000:q", "Events": ["s3:ObjectCreated:*"]}]})
    assert error_code(e) == "InvalidArgument"
    assert "SQS" in e.value.response["Error"]["Message"]
    status, text = send(signed_request(kiln, "PUT", f"/{bucket}?notification", b"<NotificationConfiguration><Cloud"))
    assert status == 400 and "<Code>MalformedXML</Code>" in text
    # Nothing was kept of the refused configurations.
    assert "LambdaFunctionConfigurations" not in s3.get_bucket_notification_configuration(Bucket=bucket)
    # Unsigned requests may neither read nor set it.
    url = f"{s3_endpoint(kiln)}/{bucket}?notification"
    assert requests.get(url, timeout=30).status_code == 403
    assert requests.put(url, data=b"<NotificationConfiguration/>", timeout=30).status_code == 403
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_notification_configuration(Bucket=f"missing-{uuid.uuid4().hex[:8]}")
    assert error_code(e) == "NoSuchBucket"


def test_the_aws_cli_sets_and_reads_a_configuration(kiln, bucket, recorder, tmp_path):
    arn = create_recorder(kiln, recorder)
    config = tmp_path / "notification.json"
    config.write_text(json.dumps({"LambdaFunctionConfigurations": [
        {"Id": "from-cli", "LambdaFunctionArn": arn, "Events": ["s3:ObjectCreated:*"],
         "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": ".csv"}]}}}]}))
    env = dict(os.environ, AWS_ACCESS_KEY_ID=kiln.access_key, AWS_SECRET_ACCESS_KEY=kiln.secret_key,
               AWS_DEFAULT_REGION=kiln.region, AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    env.pop("AWS_PROFILE", None)

    def aws(*args):
        done = subprocess.run([str(VENV_BIN / "aws"), "--endpoint-url", s3_endpoint(kiln), "s3api", *args],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    aws("put-bucket-notification-configuration", "--bucket", bucket,
        "--notification-configuration", f"file://{config}")
    got = json.loads(aws("get-bucket-notification-configuration", "--bucket", bucket))
    assert got["LambdaFunctionConfigurations"][0]["Id"] == "from-cli"
    assert got["LambdaFunctionConfigurations"][0]["LambdaFunctionArn"] == arn
    s3_client(kiln).put_object(Bucket=bucket, Key="table.csv", Body=b"a,b\n")
    (record,) = recorder.wait(bucket, 1, "the CLI-configured event")
    assert record["s3"]["configurationId"] == "from-cli"


# --- the events ---------------------------------------------------------------------------------


def test_a_put_matching_the_filter_sends_the_event_s3_sends(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    configure(s3, bucket, lambda_config(arn, ["s3:ObjectCreated:*"], prefix="in/", suffix=".txt", id="uploads"))
    queued = queued_total(kiln)
    # Keys the filter leaves out queue nothing (the event is queued before the write's answer).
    s3.put_object(Bucket=bucket, Key="out/skipped.txt", Body=b"no")
    s3.put_object(Bucket=bucket, Key="in/skipped.png", Body=b"no")
    assert queued_total(kiln) == queued
    body = b"hello, notified world"
    put = s3.put_object(Bucket=bucket, Key="in/a report.txt", Body=body)
    assert queued_total(kiln) == queued + 1
    (record,) = recorder.wait(bucket, 1, "the PUT's event")
    assert record["eventVersion"] == "2.1" and record["eventSource"] == "aws:s3"
    assert record["awsRegion"] == kiln.region
    assert record["eventName"] == "ObjectCreated:Put"
    assert record["eventTime"].endswith("Z") and record["eventTime"][:2] == "20"
    assert record["userIdentity"]["principalId"] == kiln.access_key
    assert record["requestParameters"]["sourceIPAddress"] == "127.0.0.1"
    assert record["responseElements"]["x-amz-request-id"] == put["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert record["responseElements"]["x-amz-id-2"] == put["ResponseMetadata"]["HTTPHeaders"]["x-amz-id-2"]
    s3_part = record["s3"]
    assert s3_part["s3SchemaVersion"] == "1.0" and s3_part["configurationId"] == "uploads"
    assert s3_part["bucket"]["name"] == bucket and s3_part["bucket"]["arn"] == f"arn:aws:s3:::{bucket}"
    assert s3_part["bucket"]["ownerIdentity"]["principalId"]
    assert s3_part["object"]["key"] == "in/a+report.txt"
    assert s3_part["object"]["size"] == len(body)
    assert s3_part["object"]["eTag"] == put["ETag"].strip('"')
    assert int(s3_part["object"]["sequencer"], 16) > 0
    assert "versionId" not in s3_part["object"]
    # The skipped keys never arrive, whatever the order of delivery.
    assert [r["s3"]["object"]["key"] for r in recorder.records(bucket)] == ["in/a+report.txt"]


def test_copy_multipart_and_deletes_send_their_events(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    configure(s3, bucket,
              lambda_config(arn, ["s3:ObjectCreated:Copy", "s3:ObjectCreated:CompleteMultipartUpload"], id="made"),
              lambda_config(arn, ["s3:ObjectRemoved:*"], id="gone"))
    # A plain PUT is not configured: no event.
    s3.put_object(Bucket=bucket, Key="source", Body=b"copy me")
    s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "source"})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")
    part = s3.upload_part(Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1000)
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    s3.delete_object(Bucket=bucket, Key="source")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "copied"}, {"Key": "big"}]})
    records = recorder.wait(bucket, 5, "the copy, upload and delete events")
    by_event = sorted((r["eventName"], r["s3"]["object"]["key"]) for r in records)
    assert by_event == [
        ("ObjectCreated:CompleteMultipartUpload", "big"),
        ("ObjectCreated:Copy", "copied"),
        ("ObjectRemoved:Delete", "big"),
        ("ObjectRemoved:Delete", "copied"),
        ("ObjectRemoved:Delete", "source"),
    ]
    made = {r["s3"]["object"]["key"]: r["s3"]["object"] for r in records if r["eventName"].startswith("ObjectCreated")}
    assert made["copied"]["size"] == len(b"copy me")
    assert made["big"]["size"] == 1000 and made["big"]["eTag"] == done["ETag"].strip('"')
    removed = [r for r in records if r["eventName"].startswith("ObjectRemoved")]
    assert all("size" not in r["s3"]["object"] and "eTag" not in r["s3"]["object"] for r in removed)
    assert {r["s3"]["configurationId"] for r in removed} == {"gone"}
    # One key's events are ordered by their sequencers.
    big = sorted((r for r in records if r["s3"]["object"]["key"] == "big"),
                 key=lambda r: int(r["s3"]["object"]["sequencer"], 16))
    assert [r["eventName"] for r in big] == ["ObjectCreated:CompleteMultipartUpload", "ObjectRemoved:Delete"]


def test_a_versioned_bucket_reports_the_delete_marker(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    configure(s3, bucket, lambda_config(arn, ["s3:ObjectCreated:Put", "s3:ObjectRemoved:*"]))
    put = s3.put_object(Bucket=bucket, Key="doc", Body=b"v1")
    marker = s3.delete_object(Bucket=bucket, Key="doc")
    s3.delete_object(Bucket=bucket, Key="doc", VersionId=put["VersionId"])
    records = recorder.wait(bucket, 3, "the versioned events")
    by_event = {r["eventName"]: r["s3"]["object"] for r in records}
    assert set(by_event) == {"ObjectCreated:Put", "ObjectRemoved:DeleteMarkerCreated", "ObjectRemoved:Delete"}
    assert by_event["ObjectCreated:Put"]["versionId"] == put["VersionId"]
    assert by_event["ObjectRemoved:DeleteMarkerCreated"]["versionId"] == marker["VersionId"]
    assert by_event["ObjectRemoved:Delete"]["versionId"] == put["VersionId"]


def test_a_browser_upload_sends_object_created_post(kiln, s3, bucket, recorder):
    arn = create_recorder(kiln, recorder)
    configure(s3, bucket, lambda_config(arn, ["s3:ObjectCreated:Post"]))
    post = s3.generate_presigned_post(bucket, "uploads/${filename}")
    response = requests.post(post["url"], data=post["fields"],
                             files={"file": ("form file.txt", b"from a form")}, timeout=30)
    assert response.status_code == 204, response.text
    # A PUT is another event type: not configured here.
    s3.put_object(Bucket=bucket, Key="uploads/put.txt", Body=b"x")
    (record,) = recorder.wait(bucket, 1, "the form upload's event")
    assert record["eventName"] == "ObjectCreated:Post"
    assert record["s3"]["object"]["key"] == "uploads/form+file.txt"
    assert record["s3"]["object"]["size"] == len(b"from a form")


def test_a_deleted_bucket_takes_its_configuration_along(kiln, s3, recorder):
    arn = create_recorder(kiln, recorder)
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    configure(s3, name, lambda_config(arn, ["s3:ObjectCreated:*"]))
    s3.delete_bucket(Bucket=name)
    s3.create_bucket(Bucket=name)
    assert "LambdaFunctionConfigurations" not in s3.get_bucket_notification_configuration(Bucket=name)


# --- durability ---------------------------------------------------------------------------------


def test_the_configuration_survives_a_restart(fresh_kiln, recorder):
    server = fresh_kiln()
    arn = create_recorder(server, recorder)
    s3 = s3_client(server)
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    configure(s3, name, lambda_config(arn, ["s3:ObjectCreated:*"], prefix="logs/", id="kept"))
    server.restart()
    s3 = s3_client(server)
    (kept,) = s3.get_bucket_notification_configuration(Bucket=name)["LambdaFunctionConfigurations"]
    assert kept["Id"] == "kept" and kept["LambdaFunctionArn"] == arn
    s3.put_object(Bucket=name, Key="logs/after-restart", Body=b"1")
    (record,) = recorder.wait(name, 1, "an event after the restart")
    assert record["s3"]["object"]["key"] == "logs/after-restart"


def test_an_acknowledged_write_is_delivered_after_kill_9(fresh_kiln, recorder):
    """The event is queued durably before the PUT's answer: kill -9 right after it loses nothing."""
    server = fresh_kiln()
    arn = create_recorder(server, recorder)
    function = arn.rsplit(":", 1)[1]
    # Nothing runs until the restart: the events wait in the queue.
    server.client().put_function_concurrency(FunctionName=function, ReservedConcurrentExecutions=0)
    s3 = s3_client(server)
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    configure(s3, name, lambda_config(arn, ["s3:ObjectCreated:*"]))
    keys = [f"k{i}" for i in range(5)]
    for key in keys:
        s3.put_object(Bucket=name, Key=key, Body=b"acknowledged")
    server.kill9()
    restarted = fresh_kiln(data_dir=server.data_dir)
    assert queue_depth(restarted) == len(keys)
    restarted.client().delete_function_concurrency(FunctionName=function)
    records = recorder.wait(name, len(keys), "every acknowledged write's event")
    assert sorted({r["s3"]["object"]["key"] for r in records}) == keys


# --- the object cache and remote mode ----------------------------------------------------------


@pytest.fixture
def remote_store():
    store = StoreOnlyKiln().start()
    yield store
    store.cleanup()


@pytest.mark.parametrize("mode", ["cache", "remote", "remote-cached"])
def test_writes_through_the_cache_and_in_remote_mode_send_events(fresh_kiln, recorder, request, mode):
    if mode == "cache":
        args = ["--object-cache", "on"]
    else:
        store = request.getfixturevalue("remote_store")
        args = ["--object-cache", "on" if mode == "remote-cached" else "off",
                "--s3-backend", store.endpoint,
                "--s3-backend-access-key", store.access_key, "--s3-backend-secret-key", store.secret_key]
    server = fresh_kiln(extra_args=args)
    arn = create_recorder(server, recorder)
    s3 = s3_client(server)
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    configure(s3, name, lambda_config(arn, ["s3:ObjectCreated:*"], prefix="in/", id="made"),
              lambda_config(arn, ["s3:ObjectRemoved:*"], prefix="in/", id="gone"))
    put = s3.put_object(Bucket=name, Key="in/one", Body=b"first")
    s3.put_object(Bucket=name, Key="out/none", Body=b"skipped")
    s3.copy_object(Bucket=name, Key="in/two", CopySource={"Bucket": name, "Key": "in/one"})
    s3.delete_object(Bucket=name, Key="in/one")
    records = recorder.wait(name, 3, f"the events of writes ({mode})")
    assert sorted((r["eventName"], r["s3"]["object"]["key"]) for r in records) == [
        ("ObjectCreated:Copy", "in/two"), ("ObjectCreated:Put", "in/one"), ("ObjectRemoved:Delete", "in/one")]
    created = {r["s3"]["object"]["key"]: r["s3"]["object"] for r in records if r["s3"]["configurationId"] == "made"}
    assert created["in/one"]["eTag"] == put["ETag"].strip('"') and created["in/one"]["size"] == 5
    assert created["in/two"]["size"] == 5
    # The configuration is kiln's, kept across a restart, in remote mode too.
    server.restart()
    kept = s3_client(server).get_bucket_notification_configuration(Bucket=name)["LambdaFunctionConfigurations"]
    assert sorted(c["Id"] for c in kept) == ["gone", "made"]
