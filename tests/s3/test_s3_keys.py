"""Every key S3 allows, through each of kiln's object-store paths, compared with each other.

Three kilns answer the same requests: the local store (a `--store-only` kiln, which is also the
backing store of the other two), remote mode over it without the cache, and remote mode with the
object cache. A key made only of whitespace, `\\r`, `\\n`, `%`, `+`, a leading `/` or `..` must
come back as it went in, from all three, and reach the backing store by remote mode and by the
cache's write-back. Hypothesis draws the keys; the named ones are always tried."""

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3_harness import StoreOnlyKiln, s3_client, wait_until

NAMED_KEYS = [" ", "  ", "\t", " \t ", "\r", "\n", "\r\n", "%", "%20", "+", "a+b c", "/lead", "//x",
              "..", "../up", "a/../b", "./x", "x/.", "?q=1&r", "#frag", "ü ", "\u3000", "k" * 1024]

# Any UTF-8 text of 1 to 1024 bytes, without the control characters XML 1.0 cannot carry (S3's
# listings are XML) other than tab, CR and LF.
KEY = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=[
        chr(c) for c in range(32) if chr(c) not in "\t\r\n"] + ["\x7f"]),
    min_size=1, max_size=60,
).filter(lambda k: len(k.encode()) <= 1024)


class Stores:
    def __init__(self):
        self.local = StoreOnlyKiln().start()
        backend = ["--s3-backend", self.local.endpoint, "--s3-backend-access-key", self.local.access_key,
                   "--s3-backend-secret-key", self.local.secret_key]
        self.remote = StoreOnlyKiln(extra_args=[*backend, "--object-cache", "off"]).start()
        self.cache = StoreOnlyKiln(extra_args=[*backend, "--object-cache", "on",
                                               "--object-cache-admission", "all"]).start()
        self.kilns = {"local": self.local, "remote": self.remote, "cache": self.cache}
        self.clients = {name: client(k) for name, k in self.kilns.items()}
        self.buckets = {}
        for name, s3 in self.clients.items():
            bucket = f"keys-{name}-{uuid.uuid4().hex[:8]}"
            s3.create_bucket(Bucket=bucket)
            self.buckets[name] = bucket

    def cleanup(self):
        for k in (self.cache, self.remote, self.local):
            k.cleanup()


def client(kiln):
    return s3_client(endpoint=kiln.endpoint, access_key=kiln.access_key, secret_key=kiln.secret_key,
                     region=kiln.region)


@pytest.fixture(scope="module")
def stores():
    s = Stores()
    yield s
    s.cleanup()


def listed(s3, bucket, prefix=None):
    args = {"Bucket": bucket, **({"Prefix": prefix} if prefix is not None else {})}
    return [o["Key"] for o in s3.list_objects_v2(**args).get("Contents", [])]


def round_trip(s3, bucket, key, body):
    """What one store answers for one key: PUT, GET, HEAD, a listing, a copy each way, DELETE."""
    put = s3.put_object(Bucket=bucket, Key=key, Body=body)
    got = s3.get_object(Bucket=bucket, Key=key)
    head = s3.head_object(Bucket=bucket, Key=key)
    copy = ("copy/" + key)[:1000]
    s3.copy_object(Bucket=bucket, Key=copy, CopySource={"Bucket": bucket, "Key": key})
    copied = s3.get_object(Bucket=bucket, Key=copy)["Body"].read()
    keys = sorted(listed(s3, bucket, prefix=key))
    s3.delete_object(Bucket=bucket, Key=copy)
    return {
        "etag": put["ETag"],
        "body": got["Body"].read(),
        "get_etag": got["ETag"],
        "length": head["ContentLength"],
        "copied": copied,
        "listed": keys,
    }


def check_key(stores, key):
    body = f"body of {key!r}".encode()
    answers = {name: round_trip(s3, stores.buckets[name], key, body) for name, s3 in stores.clients.items()}
    for name, answer in answers.items():
        assert answer["body"] == body, (name, key)
        assert answer["copied"] == body, (name, key)
        assert answer["length"] == len(body), (name, key)
        assert key in answer["listed"], (name, key, answer["listed"])
    assert answers["remote"] == answers["local"], key
    assert answers["cache"] == answers["local"], key
    # Remote mode and the cache's write-back put the key, as it is, in the backing store.
    backing = stores.clients["local"]
    assert backing.get_object(Bucket=stores.buckets["remote"], Key=key)["Body"].read() == body

    def written_back():
        return key in listed(backing, stores.buckets["cache"], prefix=key)
    wait_until(written_back, 30, f"the write-back of {key!r}")
    assert backing.get_object(Bucket=stores.buckets["cache"], Key=key)["Body"].read() == body
    for name, s3 in stores.clients.items():
        s3.delete_object(Bucket=stores.buckets[name], Key=key)
        assert key not in listed(s3, stores.buckets[name], prefix=key), (name, key)


@pytest.mark.parametrize("key", NAMED_KEYS, ids=[repr(k)[:20] for k in NAMED_KEYS])
def test_named_keys_round_trip_through_every_path(stores, key):
    check_key(stores, key)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=KEY)
def test_any_key_round_trips_alike_through_local_remote_and_cache(stores, key):
    check_key(stores, key)


def test_multipart_uploads_of_blank_keys_reach_the_backing_store(stores):
    part = b"p" * (5 * 1024 * 1024)
    for name in ("remote", "cache"):
        s3, bucket = stores.clients[name], stores.buckets[name]
        upload = s3.create_multipart_upload(Bucket=bucket, Key=" ")
        etag = s3.upload_part(Bucket=bucket, Key=" ", UploadId=upload["UploadId"], PartNumber=1, Body=part)["ETag"]
        assert [p["PartNumber"] for p in s3.list_parts(Bucket=bucket, Key=" ", UploadId=upload["UploadId"])["Parts"]] == [1]
        s3.complete_multipart_upload(Bucket=bucket, Key=" ", UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        assert stores.clients["local"].head_object(Bucket=bucket, Key=" ")["ContentLength"] == len(part)
        aborted = s3.create_multipart_upload(Bucket=bucket, Key="\t")
        s3.abort_multipart_upload(Bucket=bucket, Key="\t", UploadId=aborted["UploadId"])
        s3.delete_object(Bucket=bucket, Key=" ")
