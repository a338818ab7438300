'use strict';
// The relay floor: what any platform that runs the function in another process pays at least.
// Node's bare `http` server takes each request and hands its body, length-prefixed, over a Unix
// socket to a second Node process (the "runtime"), which runs the NoOp handler and answers the
// same way; the relay then writes the HTTP response. No auth, no routing, no bookkeeping: one
// HTTP exchange plus one IPC round trip per request. The relay's CPU per request, next to
// node_http.js's, shows what the extra process hop alone costs on this machine.
// Usage: node node_relay.js [port]  — prints "listening on http://127.0.0.1:PORT".
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { fork } = require('child_process');

function frame(buf) {
  const out = Buffer.allocUnsafe(4 + buf.length);
  out.writeUInt32BE(buf.length, 0);
  buf.copy(out, 4);
  return out;
}

// Reads length-prefixed frames from `socket`, calling `onFrame(buffer)` for each.
function frames(socket, onFrame) {
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 4) {
      const len = pending.readUInt32BE(0);
      if (pending.length < 4 + len) break;
      onFrame(pending.subarray(4, 4 + len));
      pending = pending.subarray(4 + len);
    }
  });
}

if (process.argv[2] === '--runtime') {
  // The runtime: one connection, one request at a time, as a function instance.
  const { handler } = require(path.join(__dirname, '..', 'functions', 'node', 'index.js'));
  const context = Object.freeze({ functionName: 'noop-relay', awsRequestId: 'relay' });
  const socket = net.connect(process.argv[3]);
  frames(socket, async (body) => {
    const raw = body.toString();
    const event = raw.trim() === '' ? {} : JSON.parse(raw);
    const result = await handler(event, context);
    socket.write(frame(Buffer.from(JSON.stringify(result === undefined ? null : result))));
  });
} else {
  const sockPath = path.join(os.tmpdir(), `kiln-relay-${process.pid}.sock`);
  const waiting = [];
  let runtime = null;
  const ipc = net.createServer((socket) => {
    socket.setNoDelay(true);
    runtime = socket;
    frames(socket, (answer) => waiting.shift()(answer));
    server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
      console.log(`listening on http://127.0.0.1:${server.address().port}`);
    });
  });
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      waiting.push((answer) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length });
        res.end(answer);
      });
      runtime.write(frame(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
    });
  });
  server.keepAliveTimeout = 10 * 60 * 1000;
  server.on('connection', (socket) => socket.setNoDelay(true));
  ipc.listen(sockPath, () => {
    const child = fork(__filename, ['--runtime', sockPath], { stdio: 'inherit' });
    for (const signal of ['SIGTERM', 'SIGINT']) {
      process.on(signal, () => {
        child.kill('SIGTERM');
        process.exit(0);
      });
    }
  });
  process.on('exit', () => {
    try { require('fs').unlinkSync(sockPath); } catch (_) { /* gone already */ }
  });
}
