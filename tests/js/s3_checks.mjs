// The object store as @aws-sdk/client-s3 sees it. Shared by the test driver (s3_test.mjs, run
// from tests/s3/test_s3_js.py) and by the function that runs the same checks inside a sandbox.

import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetBucketCorsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectVersionsCommand,
  ListPartsCommand,
  PutBucketCorsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  UploadPartCommand,
  paginateListObjectsV2,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

const MiB = 1024 * 1024;

const md5 = (data) => createHash("md5").update(data).digest("hex");
const sha256 = (data) => createHash("sha256").update(data).digest("hex");

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

function assertEqual(actual, expected, what) {
  if (actual !== expected) throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

async function expectError(promise, check, what) {
  try {
    await promise;
  } catch (err) {
    const status = err.$metadata?.httpStatusCode;
    if (!check(err, status)) throw new Error(`${what}: unexpected error ${err.name} (${status}): ${err.message}`);
    return err;
  }
  throw new Error(`${what}: expected an error`);
}

async function bodyBytes(output) {
  return Buffer.from(await output.Body.transformToByteArray());
}

/** A deterministic body of `size` bytes. */
function pattern(size, seed = 1) {
  const buf = Buffer.alloc(size);
  let x = seed;
  for (let i = 0; i < size; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    buf[i] = x >> 16;
  }
  return buf;
}

/**
 * Runs every check against `bucket` (created if missing). `presign` is false where the client's
 * host name is not resolvable by fetch; `versions` adds the check of versions and CORS rules, in
 * a bucket of its own. Returns {passed: [...], failed: [{name, error}]}.
 */
export async function runChecks(client, { bucket, presign = true, expectVirtualHost = false, versions = false }) {
  const passed = [];
  const failed = [];
  const hosts = new Set();
  client.middlewareStack.add(
    (next) => async (args) => {
      hosts.add(args.request.hostname);
      return next(args);
    },
    { step: "finalizeRequest", name: "recordHost" },
  );

  const check = async (name, fn) => {
    try {
      await fn();
      passed.push(name);
    } catch (err) {
      failed.push({ name, error: `${err.name}: ${err.message}` });
    }
  };

  await check("create and head bucket", async () => {
    try {
      await client.send(new CreateBucketCommand({ Bucket: bucket }));
    } catch (err) {
      if (err.name !== "BucketAlreadyOwnedByYou") throw err;
    }
    await client.send(new HeadBucketCommand({ Bucket: bucket }));
  });

  await check("put and get with the default CRC32", async () => {
    const text = "hello from @aws-sdk/client-s3";
    const put = await client.send(new PutObjectCommand({ Bucket: bucket, Key: "hello.txt", Body: text, ContentType: "text/plain", Metadata: { from: "js" } }));
    assertEqual(put.ETag, `"${md5(text)}"`, "ETag");
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", ChecksumMode: "ENABLED" }));
    assertEqual((await bodyBytes(got)).toString(), text, "body");
    assertEqual(got.ContentType, "text/plain", "ContentType");
    assertEqual(got.Metadata.from, "js", "metadata");
    assert(got.ChecksumCRC32, "GetObject returns the stored CRC32");
  });

  await check("streamed upload (aws-chunked with a trailing checksum)", async () => {
    const data = pattern(3 * MiB + 17);
    const chunks = [];
    for (let i = 0; i < data.length; i += 64 * 1024) chunks.push(data.subarray(i, i + 64 * 1024));
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "streamed", Body: Readable.from(chunks), ContentLength: data.length }));
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "streamed" }));
    assertEqual(sha256(await bodyBytes(got)), sha256(data), "streamed body");
  });

  await check("ranges", async () => {
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", Range: "bytes=6-9" }));
    assertEqual((await bodyBytes(got)).toString(), "from", "range body");
    assertEqual(got.ContentRange, "bytes 6-9/29", "ContentRange");
    await expectError(client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", Range: "bytes=100-" })), (e, s) => s === 416, "unsatisfiable range");
  });

  await check("conditional requests", async () => {
    const head = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: "hello.txt" }));
    assertEqual(head.ContentLength, 29, "ContentLength");
    await expectError(client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", IfNoneMatch: head.ETag })), (e, s) => s === 304, "If-None-Match");
    await expectError(client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", IfMatch: '"0123"' })), (e, s) => s === 412, "If-Match");
    const since = new Date(head.LastModified.getTime() + 3600 * 1000);
    await expectError(client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt", IfModifiedSince: since })), (e, s) => s === 304, "If-Modified-Since");
    await expectError(client.send(new PutObjectCommand({ Bucket: bucket, Key: "hello.txt", Body: "x", IfNoneMatch: "*" })), (e, s) => s === 412, "If-None-Match: * on PUT");
  });

  await check("errors by name", async () => {
    await expectError(client.send(new GetObjectCommand({ Bucket: bucket, Key: "missing" })), (e) => e.name === "NoSuchKey", "NoSuchKey");
    await expectError(client.send(new GetObjectCommand({ Bucket: "no-such-bucket-anywhere", Key: "k" })), (e) => e.name === "NoSuchBucket", "NoSuchBucket");
    await expectError(
      client.send(new PutObjectCommand({ Bucket: bucket, Key: "bad", Body: "data", ChecksumCRC32: "AAAAAA==" })),
      (e) => e.name === "BadDigest",
      "wrong checksum",
    );
  });

  await check("copy, list with prefixes and pages, batch delete", async () => {
    await client.send(new CopyObjectCommand({ Bucket: bucket, Key: "dir/a", CopySource: `${bucket}/hello.txt` }));
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "dir/b", Body: "b" }));
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "dir/sub/c", Body: "c" }));
    const keys = [];
    const prefixes = [];
    for await (const page of paginateListObjectsV2({ client, pageSize: 1 }, { Bucket: bucket, Prefix: "dir/", Delimiter: "/" })) {
      for (const o of page.Contents ?? []) keys.push(o.Key);
      for (const p of page.CommonPrefixes ?? []) prefixes.push(p.Prefix);
    }
    assertEqual(JSON.stringify(keys), JSON.stringify(["dir/a", "dir/b"]), "keys");
    assertEqual(JSON.stringify(prefixes), JSON.stringify(["dir/sub/"]), "prefixes");
    const copied = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "dir/a" }));
    assertEqual((await bodyBytes(copied)).toString(), "hello from @aws-sdk/client-s3", "copy");
    const deleted = await client.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: "dir/a" }, { Key: "dir/b" }, { Key: "dir/sub/c" }] } }));
    assertEqual(deleted.Deleted.length, 3, "deleted");
  });

  await check("multipart upload with lib-storage", async () => {
    const data = pattern(12 * MiB + 5, 7);
    const upload = new Upload({ client, params: { Bucket: bucket, Key: "multipart", Body: Readable.from([data]) }, partSize: 5 * MiB, queueSize: 2 });
    const done = await upload.done();
    assert(done.ETag.endsWith('-3"'), `multipart ETag ${done.ETag}`);
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "multipart", ChecksumMode: "ENABLED" }));
    assertEqual(sha256(await bodyBytes(got)), sha256(data), "multipart body");
  });

  await check("multipart upload by hand: list parts, complete, abort", async () => {
    const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: "manual" }));
    const parts = [pattern(5 * MiB, 3), Buffer.from("tail")];
    const etags = [];
    for (const [i, body] of parts.entries()) {
      const out = await client.send(new UploadPartCommand({ Bucket: bucket, Key: "manual", UploadId, PartNumber: i + 1, Body: body }));
      etags.push(out.ETag);
    }
    const listed = await client.send(new ListPartsCommand({ Bucket: bucket, Key: "manual", UploadId }));
    assertEqual(listed.Parts.map((p) => p.PartNumber).join(","), "1,2", "parts");
    await client.send(new CompleteMultipartUploadCommand({
      Bucket: bucket, Key: "manual", UploadId,
      MultipartUpload: { Parts: etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 })) },
    }));
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "manual" }));
    assertEqual(sha256(await bodyBytes(got)), sha256(Buffer.concat(parts)), "manual body");
    const other = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: "aborted" }));
    await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: "aborted", UploadId: other.UploadId }));
    await expectError(client.send(new ListPartsCommand({ Bucket: bucket, Key: "aborted", UploadId: other.UploadId })), (e) => e.name === "NoSuchUpload", "aborted upload");
  });

  if (presign) {
    await check("presigned PUT and GET", async () => {
      const putUrl = await getSignedUrl(client, new PutObjectCommand({ Bucket: bucket, Key: "presigned" }), { expiresIn: 300 });
      const put = await fetch(putUrl, { method: "PUT", body: "via presigned url" });
      assertEqual(put.status, 200, "presigned PUT status");
      const getUrl = await getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: "presigned" }), { expiresIn: 300 });
      const got = await fetch(getUrl);
      assertEqual(await got.text(), "via presigned url", "presigned GET");
      const tampered = await fetch(getUrl.replace("presigned?", "other?"));
      assertEqual(tampered.status, 403, "tampered URL");
    });
  }

  await check("delete", async () => {
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: "hello.txt" }));
    await expectError(client.send(new HeadObjectCommand({ Bucket: bucket, Key: "hello.txt" })), (e, s) => s === 404, "deleted object");
  });

  if (versions) {
    await check("versions, delete markers and CORS rules", async () => {
      const versioned = `${bucket}-v`;
      await client.send(new CreateBucketCommand({ Bucket: versioned }));
      await client.send(new PutBucketVersioningCommand({ Bucket: versioned, VersioningConfiguration: { Status: "Enabled" } }));
      const first = await client.send(new PutObjectCommand({ Bucket: versioned, Key: "v", Body: "one" }));
      const second = await client.send(new PutObjectCommand({ Bucket: versioned, Key: "v", Body: "two" }));
      assert(first.VersionId && second.VersionId && first.VersionId !== second.VersionId, "version ids on PUT");
      const old = await client.send(new GetObjectCommand({ Bucket: versioned, Key: "v", VersionId: first.VersionId }));
      assertEqual((await bodyBytes(old)).toString(), "one", "GET by version");
      const deleted = await client.send(new DeleteObjectCommand({ Bucket: versioned, Key: "v" }));
      assertEqual(deleted.DeleteMarker, true, "a delete marker");
      await expectError(client.send(new GetObjectCommand({ Bucket: versioned, Key: "v" })), (e, s) => s === 404, "read past a delete marker");
      const listed = await client.send(new ListObjectVersionsCommand({ Bucket: versioned }));
      assertEqual(listed.Versions.map((v) => v.VersionId).join(), [second.VersionId, first.VersionId].join(), "listed versions");
      assertEqual(listed.DeleteMarkers[0].VersionId, deleted.VersionId, "listed delete marker");
      const rules = [{ AllowedMethods: ["GET"], AllowedOrigins: ["https://app.example"] }];
      await client.send(new PutBucketCorsCommand({ Bucket: versioned, CORSConfiguration: { CORSRules: rules } }));
      const cors = await client.send(new GetBucketCorsCommand({ Bucket: versioned }));
      assertEqual(cors.CORSRules[0].AllowedOrigins[0], "https://app.example", "CORS rules");
      for (const id of [first.VersionId, second.VersionId, deleted.VersionId]) {
        await client.send(new DeleteObjectCommand({ Bucket: versioned, Key: "v", VersionId: id }));
      }
      await client.send(new DeleteBucketCommand({ Bucket: versioned }));
    });
  }

  await check("addressing style", async () => {
    const seen = [...hosts];
    if (expectVirtualHost) assert(seen.includes(`${bucket}.localhost`), `virtual-host requests, saw ${seen}`);
    else assert(!seen.some((h) => h.startsWith(`${bucket}.`)), `path-style requests, saw ${seen}`);
  });

  return { passed, failed };
}
