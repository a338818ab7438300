"""The object store through the console: its `/kiln/v1/buckets/…` endpoints over HTTP (the CSRF
token on every change, signed access on the API's listener, keys as written, the download's
headers, errors), and its browser in headless Chromium (buckets, folders and pages of keys, an
upload in one request and one in parts with its progress bar, the downloads compared byte for
byte, checksums, a presigned link, deletion, and keys that stay text)."""

import base64
import hashlib
import os
import time

import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from console_pages import go, page_errors, shot, signed_in, wait
from console_support import XSS, sign_in
from s3_harness import s3_client

# The browser uploads files above this in parts (objects.js's PART_BYTES).
PART_BYTES = 8 * 1024 * 1024


def sha256_b64(data):
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


@pytest.fixture
def console(kiln):
    """A signed-in HTTP session on the console's listener, the base of the buckets API and the
    session's CSRF header."""
    http, response = sign_in(kiln)
    return http, kiln.console + "/kiln/v1/buckets", {"X-Kiln-Csrf": response.json()["csrfToken"]}


def drop_bucket(kiln, name):
    """Deletes the bucket and what it holds, if it is there (the tests share one kiln)."""
    s3 = s3_client(kiln)
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket=name, Key=obj["Key"])
        s3.delete_bucket(Bucket=name)
    except s3.exceptions.NoSuchBucket:
        pass
    return s3


def fresh_bucket(kiln, name):
    s3 = drop_bucket(kiln, name)
    s3.create_bucket(Bucket=name)
    return s3


def test_changes_need_the_csrf_token_and_reads_do_not(kiln, console):
    http, base, csrf = console
    s3 = fresh_bucket(kiln, "console-csrf")
    s3.put_object(Bucket="console-csrf", Key="kept", Body=b"kept")
    key = {"key": "kept"}
    refused = [
        http.put(base + "/console-csrf-new"),
        http.delete(base + "/console-csrf"),
        http.put(base + "/console-csrf/object", params={"key": "new"}, data=b"x"),
        http.delete(base + "/console-csrf/object", params=key),
        http.post(base + "/console-csrf/object/link", params=key),
        http.post(base + "/console-csrf/uploads", params={"key": "new"}),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    assert all(r.json()["__type"] == "AccessDeniedException" for r in refused)
    names = [b["Name"] for b in http.get(base, timeout=10).json()["Buckets"]]
    assert "console-csrf" in names and "console-csrf-new" not in names
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="console-csrf")["Contents"]] == ["kept"]
    # With the token, the same changes go through.
    assert http.delete(base + "/console-csrf/object", params=key, headers=csrf).status_code == 204
    assert http.delete(base + "/console-csrf", headers=csrf).status_code == 204


def test_the_api_listener_takes_signatures_and_no_cookie(kiln, console):
    http, _, _ = console
    fresh_bucket(kiln, "console-signed")
    signed = kiln.signed_request("PUT", "/kiln/v1/buckets/console-signed/object?key=from-the-cli", body=b"signed")
    assert signed.status_code == 200, signed.text
    listing = kiln.signed_request("GET", "/kiln/v1/buckets/console-signed/objects").json()
    assert [o["Key"] for o in listing["Objects"]] == ["from-the-cli"]
    # The session cookie counts for nothing on the API's listener.
    cookie = requests.get(kiln.endpoint + "/kiln/v1/buckets", cookies=http.cookies, timeout=10)
    assert cookie.status_code == 403


def test_keys_reach_the_store_as_written(kiln, console):
    http, base, csrf = console
    s3 = fresh_bucket(kiln, "console-keys")
    keys = ["a//b", "../up", " ", "dir/", "q?x=1&y=2#frag", "ünï/çø dé", "+plus%20", XSS, "k" * 1024]
    for key in keys:
        put = http.put(base + "/console-keys/object", params={"key": key}, data=key.encode(), headers=csrf)
        assert put.status_code == 200, (key, put.text)
    stored = [o["Key"] for o in s3.list_objects_v2(Bucket="console-keys")["Contents"]]
    assert sorted(stored) == sorted(keys)
    for key in keys:
        got = http.get(base + "/console-keys/object", params={"key": key}, timeout=10)
        assert got.status_code == 200 and got.content == key.encode(), key
    # Folders split at `/`, the prefix's own key listed under it.
    listing = http.get(base + "/console-keys/objects", params={"prefix": "dir/"}, timeout=10).json()
    assert [o["Key"] for o in listing["Objects"]] == ["dir/"] and listing["Prefixes"] == []
    top = http.get(base + "/console-keys/objects", timeout=10).json()
    assert {"a/", "dir/", "ünï/"} <= set(top["Prefixes"])
    too_long = http.put(base + "/console-keys/object", params={"key": "k" * 1025}, data=b"", headers=csrf)
    assert too_long.status_code == 400 and "1024 bytes" in too_long.json()["message"]


def test_listing_pages_follow_the_stores_tokens(kiln, console):
    http, base, _ = console
    s3 = fresh_bucket(kiln, "console-pages")
    for i in range(7):
        s3.put_object(Bucket="console-pages", Key=f"p/{i:02}", Body=b"")
    seen, token, pages = [], None, 0
    while True:
        params = {"prefix": "p/", "limit": 3, **({"token": token} if token else {})}
        page = http.get(base + "/console-pages/objects", params=params, timeout=10).json()
        seen += [o["Key"] for o in page["Objects"]]
        pages += 1
        token = page["NextToken"]
        if not token:
            break
    assert seen == [f"p/{i:02}" for i in range(7)] and pages == 3
    bad = http.get(base + "/console-pages/objects", params={"limit": 0}, timeout=10)
    assert bad.status_code == 400 and "limit" in bad.json()["message"]


def test_downloads_are_attachments_whatever_the_object_says_it_is(kiln, console):
    http, base, csrf = console
    fresh_bucket(kiln, "console-html")
    page = b"<script>document.title='ran'</script>"
    put = http.put(base + "/console-html/object", params={"key": "site/index.html"}, data=page,
                   headers={**csrf, "Content-Type": "text/html"})
    assert put.status_code == 200
    got = http.get(base + "/console-html/object", params={"key": "site/index.html"}, timeout=10)
    assert got.content == page
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert got.headers["Content-Disposition"].startswith('attachment; filename="index.html"')
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Security-Policy"].startswith("sandbox")
    # The details keep what it is.
    details = http.get(base + "/console-html/object/details", params={"key": "site/index.html"}, timeout=10).json()
    assert details["ContentType"] == "text/html" and details["Size"] == len(page)
    assert details["Checksums"]["SHA256"] == sha256_b64(page)


def test_uploads_in_parts_check_each_part_and_make_one_object(kiln, console):
    http, base, csrf = console
    s3 = fresh_bucket(kiln, "console-parts")
    parts_data = [os.urandom(5 * 1024 * 1024), os.urandom(1000)]
    key = {"key": "big/blob"}
    upload = http.post(base + "/console-parts/uploads", params=key, json={"ContentType": "application/x-blob"},
                       headers=csrf).json()["UploadId"]
    wrong = http.put(f"{base}/console-parts/uploads/{upload}/1", params=key, data=parts_data[0],
                     headers={**csrf, "x-amz-checksum-sha256": sha256_b64(b"other")})
    assert wrong.status_code == 400 and wrong.json()["__type"] == "BadDigest"
    parts = []
    for number, data in enumerate(parts_data, 1):
        part = http.put(f"{base}/console-parts/uploads/{upload}/{number}", params=key, data=data,
                        headers={**csrf, "x-amz-checksum-sha256": sha256_b64(data)})
        assert part.status_code == 200, part.text
        parts.append(part.json())
    done = http.post(f"{base}/console-parts/uploads/{upload}", params=key, json={"Parts": parts}, headers=csrf)
    assert done.status_code == 200, done.text
    assert done.json()["ETag"].endswith('-2"')
    stored = s3.get_object(Bucket="console-parts", Key="big/blob")
    assert stored["Body"].read() == b"".join(parts_data) and stored["ContentType"] == "application/x-blob"
    details = http.get(base + "/console-parts/object/details", params=key, timeout=10).json()
    assert details["ChecksumType"] == "COMPOSITE" and details["Checksums"]["SHA256"].endswith("-2")
    # An aborted upload leaves nothing behind.
    other = http.post(base + "/console-parts/uploads", params={"key": "gone"}, headers=csrf).json()["UploadId"]
    assert http.delete(f"{base}/console-parts/uploads/{other}", params={"key": "gone"}, headers=csrf).status_code == 204
    assert s3.list_multipart_uploads(Bucket="console-parts").get("Uploads", []) == []
    assert http.put(f"{base}/console-parts/uploads/{upload}/0", params=key, data=b"", headers=csrf).status_code == 400


def test_errors_say_what_was_wrong(kiln, console):
    http, base, csrf = console
    s3 = fresh_bucket(kiln, "console-errors")
    s3.put_object(Bucket="console-errors", Key="x", Body=b"x")
    cases = [
        (http.get(base + "/console-errors/object/details", params={"key": "missing"}, timeout=10), 404, "NoSuchKey"),
        (http.get(base + "/no-such-bucket-here/objects", timeout=10), 404, "NoSuchBucket"),
        (http.delete(base + "/console-errors", headers=csrf), 409, "BucketNotEmpty"),
        # The bucket is there: kiln's API says so and leaves it (and its ACL) as it is.
        (http.put(base + "/console-errors", headers=csrf), 409, "BucketAlreadyOwnedByYou"),
        (http.put(base + "/Not_A_Bucket", headers=csrf), 400, "InvalidParameterValueException"),
        (http.put(base + "/console-errors/object", params={"key": "y"}, data=b"y",
                  headers={**csrf, "x-amz-checksum-sha256": sha256_b64(b"z")}), 400, "BadDigest"),
        (http.post(base + "/console-errors/object/link", params={"key": "x", "expires": 604801}, headers=csrf),
         400, "InvalidParameterValueException"),
    ]
    for response, status, kind in cases:
        assert (response.status_code, response.json()["__type"]) == (status, kind), response.text
        assert response.json()["message"]


def test_presigned_links_read_the_object_from_the_store(kiln, console):
    http, base, csrf = console
    fresh_bucket(kiln, "console-links")
    http.put(base + "/console-links/object", params={"key": "a b/ç.txt"}, data=b"shared", headers=csrf)
    link = http.post(base + "/console-links/object/link", params={"key": "a b/ç.txt", "expires": 60},
                     headers=csrf).json()
    assert link["Url"].startswith(s3_client(kiln).meta.endpoint_url + "/console-links/")
    assert "X-Amz-Expires=60" in link["Url"] and link["Expires"].endswith("Z")
    assert requests.get(link["Url"], timeout=10).content == b"shared"
    # The signature covers the key: another key with the same query is refused.
    assert requests.get(link["Url"].replace("/a%20b/", "/a%20c/"), timeout=10).status_code == 403


def downloaded(downloads, name, timeout=30):
    """The bytes of `name` once the browser has finished saving it."""
    path = downloads / name
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and not (downloads / (name + ".crdownload")).exists():
            return path.read_bytes()
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded: {sorted(p.name for p in downloads.iterdir())}")


def test_browse_upload_download_and_delete_in_the_browser(kiln, driver, request, tmp_path, downloads):
    s3 = drop_bucket(kiln, "console-browser")
    signed_in(driver, kiln)

    # A bucket made on the page; then what is in it.
    go(driver, kiln, "objects", "buckets-table")
    driver.find_element(By.ID, "bucket-name").send_keys("console-browser")
    driver.find_element(By.ID, "bucket-create").click()
    wait(driver).until(EC.presence_of_element_located((By.ID, "objects-table")))
    for i in range(55):
        s3.put_object(Bucket="console-browser", Key=f"many/k-{i:03}", Body=b"")
    s3.put_object(Bucket="console-browser", Key="top.txt", Body=b"top")
    driver.refresh()
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "many/"))).click()
    wait(driver).until(lambda d: "k-049" in d.find_element(By.ID, "objects-table").text)
    assert "k-050" not in driver.find_element(By.ID, "objects-table").text
    shot(driver, request, "folder")
    driver.find_element(By.ID, "objects-next").click()
    wait(driver).until(lambda d: "k-054" in d.find_element(By.ID, "objects-table").text)
    assert "k-049" not in driver.find_element(By.ID, "objects-table").text
    driver.back()
    wait(driver).until(lambda d: "k-000" in d.find_element(By.ID, "objects-table").text)
    # Up the breadcrumb to the bucket's top.
    driver.find_element(By.CSS_SELECTOR, "#object-path").find_element(By.LINK_TEXT, "console-browser").click()
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "top.txt")))

    # Two files at once: one in a single request, one in parts; the bar follows them.
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(300 * 1024))
    large = tmp_path / "large.bin"
    large.write_bytes(os.urandom(2 * PART_BYTES + 12345))
    driver.find_element(By.ID, "upload-file").send_keys(f"{small}\n{large}")
    driver.find_element(By.ID, "upload-button").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "upload-status"), "uploaded 2 files"))
    assert float(driver.find_element(By.ID, "upload-progress").get_attribute("value")) == 100
    shot(driver, request, "uploaded")
    assert s3.head_object(Bucket="console-browser", Key="large.bin")["ETag"].endswith('-3"')
    assert s3.head_object(Bucket="console-browser", Key="small.bin")["ContentLength"] == small.stat().st_size

    # Its page: metadata and checksums, then the download, byte for byte.
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "small.bin"))).click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "object-details"), "307200 bytes"))
    assert sha256_b64(small.read_bytes()) in driver.find_element(By.ID, "object-checksums").text
    shot(driver, request, "object")
    driver.find_element(By.ID, "object-download").click()
    assert downloaded(downloads, "small.bin") == small.read_bytes()

    # A presigned link works without the console.
    driver.find_element(By.ID, "link-button").click()
    url = wait(driver).until(lambda d: d.find_element(By.ID, "link-url").get_attribute("value"))
    assert requests.get(url, timeout=10).content == small.read_bytes()
    shot(driver, request, "link")

    # Deleted from its page: back in the folder, gone from the store.
    driver.find_element(By.ID, "object-delete").click()
    driver.find_element(By.ID, "object-delete-confirm").click()
    wait(driver).until(EC.presence_of_element_located((By.ID, "objects-table")))
    wait(driver).until(lambda d: "small.bin" not in d.find_element(By.ID, "objects-table").text)
    with pytest.raises(s3.exceptions.ClientError):
        s3.head_object(Bucket="console-browser", Key="small.bin")

    # The large one downloads from the listing too.
    for link in driver.find_elements(By.LINK_TEXT, "Download"):
        if "large.bin" in link.get_attribute("href"):
            link.click()
    assert downloaded(downloads, "large.bin") == large.read_bytes()
    assert page_errors(driver) == []


def test_object_keys_are_shown_as_text(kiln, driver, request):
    s3 = fresh_bucket(kiln, "console-xss")
    s3.put_object(Bucket="console-xss", Key=f"{XSS}/{XSS}", Body=b"x", Metadata={"note": XSS},
                  ContentType=XSS.replace(" ", ""))
    signed_in(driver, kiln)
    driver.execute_script("window.__alerts = []; window.alert = (m) => window.__alerts.push(String(m));")

    def nothing_ran(page):
        assert driver.find_elements(By.CSS_SELECTOR, "#view img, #error img") == [], page
        assert driver.execute_script("return window.__alerts") == [], page
        shot(driver, request, page)

    driver.execute_script("window.location.hash = '#/objects/console-xss'")
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "objects-table"), XSS + "/"))
    nothing_ran("bucket")
    driver.find_element(By.LINK_TEXT, XSS + "/").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "object-path"), XSS))
    nothing_ran("folder")
    driver.find_element(By.CSS_SELECTOR, "#objects-table tbody a").click()
    wait(driver).until(EC.text_to_be_present_in_element((By.ID, "object-key"), f"{XSS}/{XSS}"))
    assert XSS in driver.find_element(By.ID, "object-metadata").text
    nothing_ran("object")
    assert page_errors(driver) == []
