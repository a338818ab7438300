// OFC's single-stage image functions and pipeline stages (sharp), reading their input from and writing their
// output to the object store (AWS SDK v3, kiln's S3 endpoint from the sandbox's environment) or Redis (ioredis).
// Same events and answers as the Python function (bench/ofc/functions/python/app.py).
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
const sharp = require("sharp");

sharp.concurrency(1);
let s3;
let redis;

function clientS3() {
  if (!s3) s3 = new S3Client({ region: "us-east-1", forcePathStyle: true });
  return s3;
}

function clientRedis() {
  if (!redis) {
    const Redis = require("ioredis");
    redis = new Redis({ host: "127.0.0.1", port: Number(process.env.REDIS_PORT) });
  }
  return redis;
}

async function get(event, key) {
  if (event.store === "redis") return clientRedis().getBuffer(`${event.bucket}/${key}`);
  const out = await clientS3().send(new GetObjectCommand({ Bucket: event.bucket, Key: key }));
  return Buffer.from(await out.Body.transformToByteArray());
}

async function put(event, key, data) {
  if (event.store === "redis") return clientRedis().set(`${event.bucket}/${key}`, data);
  return clientS3().send(new PutObjectCommand({ Bucket: event.bucket, Key: key, Body: data }));
}

async function transform(op, data) {
  const img = sharp(data);
  const meta = await img.metadata();
  let t = img;
  switch (op) {
    case "blur": t = img.blur(2); break;
    case "resize": case "thumb_half":
      t = img.resize(Math.max(1, meta.width >> 1), Math.max(1, meta.height >> 1)); break;
    case "thumb": t = img.resize(64, 64, { fit: "inside" }); break;
    case "rotate": t = img.rotate(90); break;
    case "sepia": t = img.recomb([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]); break;
    case "edge": t = img.greyscale().convolve({ width: 3, height: 3, kernel: [-1, -1, -1, -1, 8, -1, -1, -1, -1] }); break;
    case "denoise": t = img.median(3); break;
    default: throw new Error(`unknown op ${op}`);
  }
  return meta.format === "jpeg" ? t.jpeg().toBuffer() : t.png().toBuffer();
}

function count(text) {
  const counts = {};
  for (const w of text.split(/\s+/)) if (w) counts[w] = (counts[w] || 0) + 1;
  return counts;
}

exports.handler = async (event) => {
  const op = event.op;
  const t0 = process.hrtime.bigint();
  let data;
  let parts;
  if (op === "wc_reduce") parts = await Promise.all(event.keys.map((k) => get(event, k)));
  else data = await get(event, event.key);
  const t1 = process.hrtime.bigint();
  let result;
  if (op === "wc_map") result = Buffer.from(JSON.stringify(count(data.toString())));
  else if (op === "wc_reduce") {
    const total = {};
    for (const p of parts) for (const [w, n] of Object.entries(JSON.parse(p))) total[w] = (total[w] || 0) + n;
    const top = Object.entries(total).sort((a, b) => b[1] - a[1]).slice(0, 100);
    result = Buffer.from(JSON.stringify(Object.fromEntries(top)));
  } else result = await transform(op, data);
  const t2 = process.hrtime.bigint();
  await put(event, event.out, result);
  const t3 = process.hrtime.bigint();
  const ms = (a, b) => Number(b - a) / 1e6;
  return { e_ms: ms(t0, t1), t_ms: ms(t1, t2), l_ms: ms(t2, t3), out_bytes: result.length };
};
