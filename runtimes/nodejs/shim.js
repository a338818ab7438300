'use strict';
/*
 * kiln runtime shim for Node.js 20 — run as `node /opt/kiln/shim.js` with cwd /var/task.
 *
 * Loads the function named by _HANDLER the way AWS Lambda's nodejs20.x runtime does and serves invocations,
 * either over kiln's framed protocol on the fd named by KILN_SHIM_FD or, when only AWS_LAMBDA_RUNTIME_API is
 * set, over the Lambda Runtime API (see docs/shim-protocol.md). Only Node built-ins are used so the shim can
 * be dropped into any image; it never touches the disk per invocation.
 */
const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const { pathToFileURL } = require('url');

const env = process.env;
const TASK_ROOT = env.LAMBDA_TASK_ROOT || '/var/task';
// Exit status after an uncaught exception / unhandled rejection. Lambda's client exits 129 / 128; the agent
// turns any non-zero status into Runtime.ExitError, so kiln settles on a plain 1.
const CRASH_EXIT_CODE = 1;

// ---------------------------------------------------------------------------------------------- errors
// Lambda names its own failures "Runtime.X" through the prototype, so the name is not an own enumerable
// property and does not show up twice when the error is JSON-logged.
function runtimeError(name, init) {
  const C = class extends Error {
    constructor(arg) { super(init ? init(arg) : arg); }
  };
  C.prototype.name = 'Runtime.' + name;
  return C;
}
const MalformedHandlerName = runtimeError('MalformedHandlerName');
const HandlerNotFound = runtimeError('HandlerNotFound');
const ImportModuleError = runtimeError('ImportModuleError', String);
const UserCodeSyntaxError = runtimeError('UserCodeSyntaxError', String);
const UnhandledPromiseRejection = runtimeError('UnhandledPromiseRejection', safeString);
const MarshalError = runtimeError('MarshalError');
const NodeJsExit = runtimeError('NodeJsExit', () =>
  'The Lambda runtime client detected an unexpected Node.js exit code. This is most commonly caused by a ' +
  'Promise that was never settled. For more information, see https://nodejs.org/docs/latest/api/process.html#exit-codes');

function safeString(v) {
  try { return String(v); } catch (_) { return Object.prototype.toString.call(v); }
}

// Lambda only treats real Errors (or look-alikes with string name/message/stack) as errors; anything else
// thrown is reported as {errorType: typeof value, errorMessage: String(value)}.
function isErrorLike(e) {
  return util.types.isNativeError(e) || (e != null && typeof e.name === 'string' && e.name !== '' &&
    typeof e.message === 'string' && e.message !== '' && typeof e.stack === 'string' && e.stack !== '');
}

// The body of an error / init_error frame. Lambda's Node runtime calls the stack lines `trace` (its
// Python runtime, `stackTrace`).
function errorBody(err) {
  try {
    if (isErrorLike(err)) {
      return {
        errorType: err.name || (err.constructor && err.constructor.name) || 'Error',
        errorMessage: err.message,
        trace: typeof err.stack === 'string' ? err.stack.split('\n') : [],
      };
    }
    return { errorType: typeof err, errorMessage: String(err), trace: [] };
  } catch (_) { // a getter threw, or String() on a null-prototype object
    return { errorType: 'handled', trace: [], errorMessage: 'callback called with Error argument, but there ' +
      'was a problem while retrieving one or more of its message, name, and stack' };
  }
}

// ---------------------------------------------------------------------------------------------- logging
// Lambda keeps the current request id in this global symbol; libraries (e.g. Powertools) read it from there.
const REQUEST_ID = Symbol.for('aws.lambda.runtime.requestId');
global[REQUEST_ID] = undefined; // logs written during init show "undefined", as on Lambda

// process.stdout on a Linux pipe is a plain write(2) unless the pipe is full, in which case Node queues the
// rest; flushStdio() waits for that queue before every answer, so the agent never sees an answer ahead of
// the log lines written before it. Lambda turns \n into \r so a multi-line message stays one record on the
// line-oriented pipe; we do the same.
function writeLog(level, msg, params) {
  let line = `${new Date().toISOString()}\t${global[REQUEST_ID]}\t${level}\t${util.format(msg, ...params)}`;
  if (line.indexOf('\n') !== -1) line = line.replace(/\n/g, '\r');
  process.stdout.write(line + '\n');
}

// Same levels and AWS_LAMBDA_LOG_LEVEL filtering as Lambda's text log format.
const LEVELS = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL'];
const minLevel = Math.max(0, LEVELS.indexOf(String(env.AWS_LAMBDA_LOG_LEVEL || 'TRACE').toUpperCase()));
for (const [method, level] of [['trace', 'TRACE'], ['debug', 'DEBUG'], ['info', 'INFO'], ['log', 'INFO'],
  ['warn', 'WARN'], ['error', 'ERROR'], ['fatal', 'FATAL']]) {
  console[method] = LEVELS.indexOf(level) < minLevel && level !== 'FATAL'
    ? () => {} : (msg, ...params) => writeLog(level, msg, params);
}

// "Invoke Error \t{...}" lines as Lambda prints them: the error as JSON, with its non-enumerable name,
// message and stack spelled out next to any properties the user attached.
function logError(title, err) {
  const e = err instanceof Error ? err : new Error(safeString(err));
  let json;
  try {
    json = JSON.stringify(e, (_k, v) => (v instanceof Error
      ? Object.assign({ errorType: v.name, errorMessage: v.message, code: v.code }, v,
        typeof v.stack === 'string' ? { stack: v.stack.split('\n') } : {})
      : v));
  } catch (_) {
    json = JSON.stringify(errorBody(err));
  }
  writeLog('ERROR', title, ['\t' + json]);
}

// Call cb once everything the function wrote to stdout/stderr has reached the pipe. Normally that is
// already the case and cb runs synchronously; the polling branch only runs when a pipe was full.
function flushStdio(cb) {
  const out = process.stdout, err = process.stderr;
  if (out.writableLength === 0 && err.writableLength === 0) return cb();
  setTimeout(flushStdio, 1, cb);
}

// ---------------------------------------------------------------------------------------------- loading
// Same search order as Lambda: extensionless file, .js (CommonJS unless the nearest package.json says
// "type":"module"), .js as ESM, .mjs, .cjs, then Node's own resolution (node_modules, NODE_PATH).
function nearestTypeModule(dir) {
  for (;;) {
    if (dir.endsWith('/node_modules')) return false;
    const pj = path.join(dir, 'package.json');
    if (fs.existsSync(pj)) {
      try { return JSON.parse(fs.readFileSync(pj, 'utf8')).type === 'module'; } catch (_) { return false; }
    }
    const parent = path.dirname(dir);
    if (parent === dir) return false;
    dir = parent;
  }
}

async function loadModule(file, mod, moduleRoot) {
  const esm = (p) => import(pathToFileURL(p).href);
  if (fs.existsSync(file)) return require(file);
  const jsIsEsm = nearestTypeModule(path.dirname(file));
  if (fs.existsSync(file + '.js')) return jsIsEsm ? esm(file + '.js') : require(file + '.js');
  if (fs.existsSync(file + '.mjs')) return esm(file + '.mjs');
  if (fs.existsSync(file + '.cjs')) return require(file + '.cjs');
  // Throws MODULE_NOT_FOUND, "Cannot find module 'x'\nRequire stack: ...", when nothing matches.
  return require(require.resolve(mod, { paths: [TASK_ROOT, path.resolve(TASK_ROOT, moduleRoot)] }));
}

async function loadHandler(full) {
  if (full.includes('..')) {
    throw new MalformedHandlerName(`'${full}' is not a valid handler name. Use absolute paths when ` +
      'specifying root directories in handler names.');
  }
  const base = path.basename(full); // "dir/file.nested.fn" -> module root "dir/", "file.nested.fn"
  const moduleRoot = full.slice(0, full.length - base.length);
  const match = /^([^.]*)\.(.*)$/.exec(base);
  if (!match) throw new MalformedHandlerName('Bad handler');
  const [, mod, handlerPath] = match;
  let app;
  try {
    app = await loadModule(path.resolve(TASK_ROOT, moduleRoot, mod), mod, moduleRoot);
  } catch (e) {
    if (e instanceof SyntaxError) {
      const err = new UserCodeSyntaxError(e);
      err.stack = e.stack; // keep the original, which points at the offending source line
      throw err;
    }
    if (e && (e.code === 'MODULE_NOT_FOUND' || e.code === 'ERR_MODULE_NOT_FOUND')) throw new ImportModuleError(e);
    throw e; // an exception at init is reported under its own class name
  }
  const fn = handlerPath.split('.').reduce((obj, key) => obj && obj[key], app);
  if (!fn) throw new HandlerNotFound(`${full} is undefined or not exported`);
  if (typeof fn !== 'function') throw new HandlerNotFound(`${full} is not a function`);
  return fn;
}

// ---------------------------------------------------------------------------------------------- transports
// Both transports offer the same five operations, so the invocation logic below does not care which one
// is in use: start(onInvoke), answer(kind, requestId, json, errorType, cb) with kind 'response', 'error' or
// 'error_fatal' (an error after which the process exits), initError(json, errorType, cb), busy() while a
// handler runs and idle() once it has been answered.

function frameTransport(fd) {
  const sock = new net.Socket({ fd, readable: true, writable: true });
  const headers = {};
  for (const t of ['ready', 'response', 'error', 'init_error', 'session_commit', 'trace']) {
    headers[t] = Buffer.from(`{"type":"${t}"}`);
  }
  // An error answer after which the shim exits (an uncaught exception): the agent must not send another
  // invocation to this process.
  headers.error_fatal = Buffer.from('{"type":"error","fatal":true}');
  let onInvoke = null, onLoad = null, reading = false;
  let pending = [], have = 0, need = 0; // bytes received so far, and the length of the frame they start
  function read() {
    if (!reading) sock.on('data', onData);
    reading = true;
  }

  // One allocation and one write(2) per frame: length prefix, header and body are laid out together.
  function send(type, payload, cb) {
    const h = headers[type], bodyLen = Buffer.byteLength(payload);
    const out = Buffer.allocUnsafe(8 + h.length + bodyLen);
    out.writeUInt32BE(h.length, 0);
    out.writeUInt32BE(bodyLen, 4);
    h.copy(out, 8);
    if (typeof payload === 'string') out.write(payload, 8 + h.length);
    else payload.copy(out, 8 + h.length);
    sock.write(out, cb);
  }

  // Chunks are only concatenated once a whole frame is there, so a large event costs one copy.
  function onData(chunk) {
    pending.push(chunk);
    have += chunk.length;
    while (have >= 8) {
      if (need === 0) {
        if (pending[0].length < 8) pending = [Buffer.concat(pending, have)];
        need = 8 + pending[0].readUInt32BE(0) + pending[0].readUInt32BE(4);
      }
      if (have < need) return;
      const buf = pending.length === 1 ? pending[0] : Buffer.concat(pending, have);
      const hlen = buf.readUInt32BE(0);
      const header = JSON.parse(buf.toString('utf8', 8, 8 + hlen));
      const body = buf.subarray(8 + hlen, need);
      pending = have > need ? [buf.subarray(need)] : [];
      have -= need;
      need = 0;
      if (header.type === 'invoke') onInvoke(header, body); // unknown frame types are ignored
      else if (header.type === 'session_load') loadSession(header, Buffer.from(body));
      else if (header.type === 'session_drop') sessions.delete(header.sessionId);
      else if (header.type === 'load' && onLoad) { const cb = onLoad; onLoad = null; cb(header); }
      else if (header.type === 'trace_dump') send('trace', traceDump());
    }
  }

  // The agent closing the socket is the normal way to stop: exit 0 once the logs are out.
  sock.on('end', () => flushStdio(() => process.exit(0)));
  sock.on('error', (e) => {
    process.stderr.write(`kiln shim: socket error: ${e.message}\n`);
    flushStdio(() => process.exit(e.code === 'EPIPE' || e.code === 'ECONNRESET' ? 0 : 1));
  });

  return {
    start(fn) { onInvoke = fn; send('ready', ''); read(); },
    // A standby says it is ready for a function, and waits for the `load` frame.
    awaitLoad(cb) { onLoad = cb; send('ready', ''); read(); },
    answer(type, _id, payload, _errorType, cb) { send(type, payload, cb); },
    initError(payload, _errorType, cb) { send('init_error', payload, cb); },
    commit(entries) { send('session_commit', entries); },
    // While a handler runs the socket must not keep the event loop alive, or 'beforeExit' (how Lambda
    // notices an empty event loop) could never fire. The agent sends nothing until we answer anyway.
    busy() { sock.unref(); },
    idle() { sock.ref(); },
  };
}

function runtimeApiTransport(api) {
  const http = require('http');
  const sep = api.lastIndexOf(':');
  const hostname = api.slice(0, sep), port = Number(api.slice(sep + 1));
  // One keep-alive connection, like Lambda's client. Idle pooled sockets are unref'd by Node, so they do not
  // hold the event loop open while a handler runs.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const base = '/2018-06-01/runtime';
  let onInvoke = null;

  function request(method, urlPath, body, headers, cb) {
    const req = http.request({ hostname, port, method, path: base + urlPath, headers, agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => cb(res, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
    });
    req.on('error', (e) => {
      process.stderr.write(`kiln shim: Runtime API ${method} ${urlPath} failed: ${e.message}\n`);
      flushStdio(() => process.exit(1));
    });
    req.end(body);
  }
  function post(urlPath, payload, errorType, cb) {
    const headers = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) };
    if (errorType) headers['Lambda-Runtime-Function-Error-Type'] = errorType;
    request('POST', urlPath, payload, headers, () => cb && cb());
  }
  function next() {
    request('GET', '/invocation/next', null, {}, (res, body) => {
      const h = res.headers;
      onInvoke({
        requestId: h['lambda-runtime-aws-request-id'],
        deadlineMs: Number(h['lambda-runtime-deadline-ms']),
        functionArn: h['lambda-runtime-invoked-function-arn'],
        traceId: h['lambda-runtime-trace-id'],
        clientContext: h['lambda-runtime-client-context'] || null,
        cognitoIdentity: h['lambda-runtime-cognito-identity'] || null,
      }, body);
    });
  }
  return {
    start(fn) { onInvoke = fn; next(); },
    answer(type, id, payload, errorType, cb) {
      // The Runtime API has no "fatal" flag: the agent notices that the next event is never taken.
      const kind = type === 'error_fatal' ? 'error' : type;
      post(`/invocation/${encodeURIComponent(id)}/${kind}`, payload, kind === 'error' ? errorType : null, cb);
    },
    initError(payload, errorType, cb) { post('/init/error', payload, errorType, cb); },
    busy() {},
    idle: next,
  };
}

// ---------------------------------------------------------------------------------------------- sessions
// A session's state (docs/sessions.md): held here, in the session's primary instance, and read and written at
// memory speed. The agent loads it before the session's first request on this instance (`session_load`), and
// each invocation's writes go to the agent as one `session_commit` frame before its answer, which the agent
// makes durable in the session's log before the answer leaves kiln. Requests of one session never run
// concurrently, so a read-modify-write in one invocation is linearizable; `transact` also makes it atomic.
const sessions = new Map();
const MAX_KEY_BYTES = 1024;
const DELETED = Symbol('deleted');

class SessionError extends Error {}
SessionError.prototype.name = 'SessionError';
class SessionLimitError extends SessionError {}
SessionLimitError.prototype.name = 'SessionLimitError';

function keyBytes(key) {
  if (typeof key !== 'string') throw new SessionError(`a session key must be a string, not ${typeof key}`);
  const size = Buffer.byteLength(key);
  if (size === 0 || size > MAX_KEY_BYTES) {
    throw new SessionError(`a session key must be 1 to ${MAX_KEY_BYTES} bytes of UTF-8, not ${size}`);
  }
  return size;
}

// [kind, bytes]: kind 0 for bytes (a Buffer or another Uint8Array), 1 for the JSON encoding of anything else.
function encodeValue(key, value, limit) {
  let item;
  if (value instanceof Uint8Array) item = [0, copyBytes(value)]; // a copy: later changes do not leak in
  else {
    let json;
    try { json = JSON.stringify(value); } catch (e) {
      throw new SessionError(`the value for '${key}' cannot be encoded as JSON: ${e && e.message}`);
    }
    if (json === undefined) throw new SessionError(`the value for '${key}' has no JSON encoding`);
    item = [1, Buffer.from(json)];
  }
  if (item[1].length > limit) {
    throw new SessionLimitError(`the value for '${key}' is ${item[1].length} bytes, over the limit of ${limit} bytes`);
  }
  return item;
}

function decodeValue(item) {
  return item[0] === 0 ? copyBytes(item[1]) : JSON.parse(item[1].toString('utf8'));
}

// A copy of a Buffer or Uint8Array: allocUnsafe and copy, a quarter faster than Buffer.from for 16 KB.
function copyBytes(bytes) {
  const out = Buffer.allocUnsafe(bytes.length);
  out.set(bytes);
  return out;
}

// The view `Session.transact` hands its function: reads see the transaction's own writes, which reach the
// session only if the function returns (or its promise resolves).
class Transaction {
  constructor(session) { this._session = session; this._writes = new Map(); }
  get(key, dflt) {
    const item = this._writes.get(key);
    if (item === undefined) return this._session.get(key, dflt);
    return item === DELETED ? dflt : decodeValue(item);
  }
  put(key, value) { keyBytes(key); this._writes.set(key, encodeValue(key, value, this._session._maxValue)); }
  delete(key) { keyBytes(key); this._writes.set(key, DELETED); }
  keys() {
    const keys = new Set(this._session._data.keys());
    for (const [key, item] of this._writes) if (item === DELETED) keys.delete(key); else keys.add(key);
    return [...keys].sort();
  }
}

// One session's state: get, put, delete, keys and transact. Values are bytes (handed back as Buffers) or
// anything JSON can encode (handed back decoded).
class Session {
  constructor(id, maxValue, maxBytes) {
    this.id = id;
    this._data = new Map(); // key -> [kind, Buffer]
    this._bytes = 0; // keys and values, as the session limit counts them
    this._writes = new Map(); // what this invocation wrote: key -> [kind, Buffer] or DELETED
    this._maxValue = maxValue;
    this._maxBytes = maxBytes;
  }
  get size() { return this._data.size; }
  has(key) { return this._data.has(key); }
  get(key, dflt) {
    const item = this._data.get(key);
    return item === undefined ? dflt : decodeValue(item);
  }
  keys() { return [...this._data.keys()].sort(); }
  put(key, value) { keyBytes(key); this._apply(new Map([[key, encodeValue(key, value, this._maxValue)]])); }
  delete(key) { keyBytes(key); this._apply(new Map([[key, DELETED]])); }
  // Runs fn(tx) and applies its writes all together, or none of them if it throws or its promise rejects.
  transact(fn) {
    const tx = new Transaction(this);
    const result = fn(tx);
    if (result && typeof result.then === 'function') {
      return result.then((value) => { this._apply(tx._writes); return value; });
    }
    this._apply(tx._writes);
    return result;
  }
  _apply(writes) {
    let size = this._bytes;
    for (const [key, item] of writes) {
      const keySize = Buffer.byteLength(key);
      const old = this._data.get(key);
      if (old !== undefined) size -= keySize + old[1].length;
      if (item !== DELETED) size += keySize + item[1].length;
    }
    if (size > this._maxBytes) {
      throw new SessionLimitError(`the session's state would be ${size} bytes, over the limit of ${this._maxBytes} bytes`);
    }
    for (const [key, item] of writes) {
      if (item === DELETED) this._data.delete(key); else this._data.set(key, item);
      this._writes.set(key, item);
    }
    this._bytes = size;
  }
  // This invocation's writes, encoded as session-log entries (docs/sessions.md).
  _takeWrites() {
    let length = 0;
    const keys = [];
    for (const [key, item] of this._writes) {
      const raw = Buffer.from(key);
      keys.push(raw);
      length += 3 + raw.length + (item === DELETED ? 0 : 5 + item[1].length);
    }
    const out = Buffer.allocUnsafe(length);
    let at = 0, i = 0;
    for (const item of this._writes.values()) {
      const raw = keys[i++];
      out[at] = item === DELETED ? 2 : 1;
      out.writeUInt16LE(raw.length, at + 1);
      raw.copy(out, at + 3);
      at += 3 + raw.length;
      if (item !== DELETED) {
        out[at] = item[0];
        out.writeUInt32LE(item[1].length, at + 1);
        item[1].copy(out, at + 5);
        at += 5 + item[1].length;
      }
    }
    this._writes = new Map();
    return out;
  }
}

function loadSession(header, body) {
  const session = new Session(header.sessionId, Number(header.maxValueBytes), Number(header.maxSessionBytes));
  let at = 0, size = 0;
  while (at < body.length) {
    const op = body[at], keyLen = body.readUInt16LE(at + 1);
    const key = body.toString('utf8', at + 3, at + 3 + keyLen);
    at += 3 + keyLen;
    if (op === 1) {
      const kind = body[at], valueLen = body.readUInt32LE(at + 1);
      session._data.set(key, [kind, body.subarray(at + 5, at + 5 + valueLen)]);
      size += keyLen + valueLen;
      at += 5 + valueLen;
    } else {
      const old = session._data.get(key);
      if (old !== undefined) { session._data.delete(key); size -= keyLen + old[1].length; }
    }
  }
  session._bytes = size;
  sessions.set(session.id, session);
}

// What the handler wrote, whether it returned or threw, as the session in memory now holds it: sent before
// the answer, on the same socket.
function commitSession(inv) {
  if (inv.session && inv.session._writes.size && transport.commit) transport.commit(inv.session._takeWrites());
}

// ---------------------------------------------------------------------------------------------- invocations
let transport = null;
let handler = null;
let handlerIsAsync = false;
let current = null; // the invocation in flight, if any
let crashing = false;

function parseHeaderJson(s) {
  return s ? JSON.parse(s) : undefined; // Lambda leaves clientContext / identity undefined when absent
}

function send(inv, type, payload, errorType) {
  if (inv.answered) return;
  inv.answered = true;
  commitSession(inv);
  flushStdio(() => transport.answer(type, inv.id, payload, errorType, () => {
    if (current === inv) current = null;
    if (!crashing) transport.idle();
  }));
}

function answerError(inv, err) {
  if (inv.answered) return;
  logError('Invoke Error', err);
  const body = errorBody(err);
  send(inv, 'error', JSON.stringify(body), body.errorType);
}

function answer(inv, result) {
  if (inv.answered) return;
  let json;
  try {
    json = JSON.stringify(result === undefined ? null : result);
  } catch (e) { // circular structures, BigInt, throwing toJSON()
    return answerError(inv, new MarshalError(`Unable to stringify response body: ${safeString(e && e.message)}`));
  }
  send(inv, 'response', json === undefined ? 'null' : json); // e.g. a function as the result
}

function onInvoke(h, body) {
  const inv = { id: h.requestId, answered: false, settled: false, waiting: false, result: undefined,
    session: (h.sessionId && sessions.get(h.sessionId)) || null };
  current = inv;
  global[REQUEST_ID] = inv.id;
  if (h.traceId) env._X_AMZN_TRACE_ID = h.traceId; else delete env._X_AMZN_TRACE_ID;
  transport.busy();

  const deadline = Number(h.deadlineMs);
  let waitForEmptyLoop = true;
  // Only the first of callback / succeed / fail / done counts, as on Lambda.
  const done = (err, result) => {
    if (inv.settled) return;
    inv.settled = true;
    if (err != null) answerError(inv, err); else answer(inv, result);
  };
  const callback = (err, result) => {
    if (inv.settled) return;
    if (err != null || !waitForEmptyLoop) return done(err, result);
    inv.settled = true; // answered from 'beforeExit' once the event loop has drained
    inv.waiting = true;
    inv.result = result;
  };
  const context = {
    get callbackWaitsForEmptyEventLoop() { return waitForEmptyLoop; },
    set callbackWaitsForEmptyEventLoop(v) { waitForEmptyLoop = v; },
    succeed: (result) => done(null, result),
    fail: (err) => done(err == null ? 'handled' : err),
    done,
    functionVersion: env.AWS_LAMBDA_FUNCTION_VERSION,
    functionName: env.AWS_LAMBDA_FUNCTION_NAME,
    memoryLimitInMB: env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE,
    logGroupName: env.AWS_LAMBDA_LOG_GROUP_NAME,
    logStreamName: env.AWS_LAMBDA_LOG_STREAM_NAME,
    clientContext: undefined,
    identity: undefined,
    invokedFunctionArn: h.functionArn,
    awsRequestId: inv.id,
    getRemainingTimeInMillis: () => deadline - Date.now(),
    session: inv.session,
  };
  try {
    context.clientContext = parseHeaderJson(h.clientContext);
    context.identity = parseHeaderJson(h.cognitoIdentity);
    const ret = handler(JSON.parse(body.toString('utf8')), context, callback);
    // A promise settles the invocation as soon as it settles (no waiting for the event loop). A plain return
    // value is ignored, as on Lambda: a non-async handler must use the callback.
    if (ret && typeof ret.then === 'function') ret.then(context.succeed, context.fail);
  } catch (e) {
    callback(e);
  }
}

// The event loop has drained while an invocation is in flight: answer with the callback's result, or with
// null if a plain handler never called back. An async handler whose promise can no longer settle is an
// error (Runtime.NodeJsExit).
process.on('beforeExit', () => {
  const inv = current;
  if (!inv || inv.answered) return;
  if (inv.waiting) return answer(inv, inv.result);
  inv.settled = true;
  if (handlerIsAsync) answerError(inv, new NodeJsExit()); else answer(inv, null);
});

// Errors that escape the handler: report them against the invocation in flight (or as the init error), then
// exit like Lambda does. The agent turns the exit into Runtime.ExitError.
function crash(err, code = CRASH_EXIT_CODE) {
  if (crashing) return;
  crashing = true;
  const exit = () => flushStdio(() => process.exit(code));
  const body = errorBody(err);
  const inv = current;
  if (inv && !inv.answered) {
    inv.answered = true;
    commitSession(inv);
    flushStdio(() => transport.answer('error_fatal', inv.id, JSON.stringify(body), body.errorType, exit));
  } else if (transport && !handler) {
    flushStdio(() => transport.initError(JSON.stringify(body), body.errorType, exit));
  } else {
    exit();
  }
}
process.on('uncaughtException', (err) => {
  logError('Uncaught Exception', err);
  crash(err);
});
process.on('unhandledRejection', (reason, promise) => {
  const err = new UnhandledPromiseRejection(reason);
  err.reason = reason;
  err.promise = promise;
  logError('Unhandled Promise Rejection', err);
  crash(err);
});

// ---------------------------------------------------------------------------------------------- standby
// The warm start path (docs/shim-protocol.md, "Standby"): the runtime boots before any function is assigned,
// with an empty task root. It loads the built-ins functions commonly use and the ES module loader, says
// `ready`, and waits for a `load` frame, which comes once the agent has made the code appear at the task root.
const PREWARM_MODULES = ['assert', 'buffer', 'child_process', 'crypto', 'dns', 'events', 'fs/promises', 'http',
  'https', 'os', 'querystring', 'stream', 'stream/promises', 'string_decoder', 'timers/promises', 'url', 'zlib'];

async function standby() {
  for (const name of PREWARM_MODULES) require(name);
  await import('node:path');
  const header = await new Promise((resolve) => transport.awaitLoad(resolve));
  for (const key of Object.keys(env)) delete env[key];
  Object.assign(env, header.env || {});
  delete env.KILN_SHIM_FD;
  // The working directory was entered before the code appeared on top of it.
  process.chdir(TASK_ROOT);
}

// A tracing instance (BREAKOUT, docs/breakout.md) runs the function's instrumented code under the tracing
// runtime, which builds the trace tree as requests run; the agent asks for the tree between invocations. An
// empty answer: this instance traces nothing.
let tracer = null;
function traceDump() {
  return tracer ? JSON.stringify(tracer.dump()) : '';
}

async function main() {
  const fdVar = env.KILN_SHIM_FD;
  delete env.KILN_SHIM_FD; // the agent's socket is none of the function's business
  if (fdVar) transport = frameTransport(Number(fdVar));
  else if (env.AWS_LAMBDA_RUNTIME_API) transport = runtimeApiTransport(env.AWS_LAMBDA_RUNTIME_API);
  else {
    process.stderr.write('kiln shim: neither KILN_SHIM_FD nor AWS_LAMBDA_RUNTIME_API is set\n');
    process.exit(2);
  }
  if (env.KILN_STANDBY === '1' && fdVar) await standby();
  if (env.KILN_BREAKOUT_TRACE === '1') {
    delete env.KILN_BREAKOUT_TRACE;
    tracer = require(path.join(__dirname, 'breakout.js'));
  }
  let fn;
  try {
    // A web function (KilnWeb, docs/web-adapter.md): its app listens inside this process, and each event is
    // forwarded to it as an HTTP request.
    fn = env.KILN_WEB_APP || env.KILN_WEB_START
      ? await require(path.join(__dirname, 'web.js')).loadWebApp(env, TASK_ROOT, (err) => {
        // The app's server is gone: this instance can serve nothing more, so it ends, as after an
        // uncaught exception, and the agent starts another.
        logError('Uncaught Exception', err);
        crash(err);
      })
      : await loadHandler(env._HANDLER || '');
  } catch (err) {
    logError('Uncaught Exception', err); // what Lambda prints for a failed init
    return crash(err, 1); // init_error, then exit 1 as the protocol asks
  }
  if (crashing) return; // an init-time async error has already been reported
  handler = fn;
  handlerIsAsync = fn.constructor && fn.constructor.name === 'AsyncFunction';
  transport.start(onInvoke);
}

main();
