// The XFaaS workloads (RO, RMW, RMW_Linear) over three state backends: kiln sessions, Redis, the object store.
// The event names the backend, the workload, the value size and the client. The function times its own state
// accesses (process.hrtime.bigint) and returns them. Clients are created lazily, at the first request.
'use strict';

const BUCKET = 'xfaas';
let redis = null;
let watcher = null; // WATCH holds for a connection: the linearizable RMW gets one of its own
let s3 = null;

function connect() {
  const Redis = require('ioredis');
  return new Redis({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT) });
}

function redisClient() {
  if (!redis) redis = connect();
  return redis;
}

function s3Client() {
  if (!s3) {
    const { S3Client } = require('@aws-sdk/client-s3');
    s3 = new S3Client({ region: 'us-east-1', endpoint: process.env.AWS_ENDPOINT_URL_S3, forcePathStyle: true });
  }
  return s3;
}

const valueOf = (count, size) => {
  const value = Buffer.alloc(size, 118);
  value.writeBigUInt64LE(BigInt(count), 0);
  return value;
};
const countOf = (value) => (value ? Number(value.readBigUInt64LE(0)) : 0);

const backends = {
  // The session API is synchronous: no await (a microtask) around its calls.
  session: (context) => ({
    sync: true,
    get: (key) => context.session.get(key),
    put: (key, value) => context.session.put(key, value),
    rmwLinear: async (key, size) => [context.session.transact((tx) => {
      const count = countOf(tx.get(key)) + 1;
      tx.put(key, valueOf(count, size));
      return count;
    }), 0],
  }),
  redis: () => ({
    get: (key) => redisClient().getBuffer(key),
    put: (key, value) => redisClient().set(key, value),
    // WATCH / MULTI / EXEC on a connection of its own: optimistic, linearizable.
    rmwLinear: async (key, size) => {
      if (!watcher) watcher = connect();
      const conn = watcher;
      for (let retries = 0; ; retries++) {
        await conn.watch(key);
        const count = countOf(await conn.getBuffer(key)) + 1;
        const done = await conn.multi().set(key, valueOf(count, size)).exec();
        if (done !== null) return [count, retries];
      }
    },
  }),
  s3: () => {
    const { GetObjectCommand, PutObjectCommand } = require('@aws-sdk/client-s3');
    const get = async (key) => {
      try {
        const got = await s3Client().send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
        return [Buffer.from(await got.Body.transformToByteArray()), got.ETag];
      } catch (e) {
        if (e.name === 'NoSuchKey') return [null, null];
        throw e;
      }
    };
    const put = (key, value, condition = {}) =>
      s3Client().send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: value, ...condition }));
    return {
      get: async (key) => (await get(key))[0],
      put: (key, value) => put(key, value),
      // A conditional write on the ETag read: linearizable.
      rmwLinear: async (key, size) => {
        for (let retries = 0; ; retries++) {
          const [value, etag] = await get(key);
          const count = countOf(value) + 1;
          try {
            await put(key, valueOf(count, size), etag ? { IfMatch: etag } : { IfNoneMatch: '*' });
            return [count, retries];
          } catch (e) {
            if (e.name !== 'PreconditionFailed' && e.$metadata?.httpStatusCode !== 412) throw e;
          }
        }
      },
    };
  },
};

const clock = () => Number(process.hrtime.bigint());

exports.handler = async (event, context) => {
  if (!event.backend) return {};
  const store = backends[event.backend](context);
  const size = Number(event.size);
  const key = `${event.workload}-${size}-${event.workload === 'rmw_linear' ? 'shared' : event.client}`;
  if (event.workload === 'ro') {
    const t0 = clock();
    const value = store.sync ? store.get(key) : await store.get(key);
    const t1 = clock();
    if (value == null) await store.put(key, valueOf(0, size)); // the first request of a client seeds its key
    return { get_ns: t1 - t0 };
  }
  if (event.workload === 'rmw') {
    const t0 = clock();
    let value = store.sync ? store.get(key) : await store.get(key);
    const t1 = clock();
    value = valueOf(countOf(value) + 1, size); // the function's own work, not timed
    const t2 = clock();
    if (store.sync) store.put(key, value); else await store.put(key, value);
    const t3 = clock();
    return { get_ns: t1 - t0, put_ns: t3 - t2, op_ns: t1 - t0 + t3 - t2 };
  }
  if (event.workload === 'rmw_linear') {
    const t0 = clock();
    const [count, retries] = await store.rmwLinear(key, size);
    return { op_ns: clock() - t0, retries, count };
  }
  throw new Error(`unknown workload ${event.workload}`);
};
