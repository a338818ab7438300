'use strict';
// The Node floor: the NoOp function body behind Node's bare `http` server, keep-alive, doing the
// same per-request work a runtime must do (read the body, JSON.parse it, await the handler,
// JSON.stringify the result). No platform, no sandbox, no IPC: what kiln is compared against.
// Usage: node node_http.js [port]  — prints "listening on http://127.0.0.1:PORT".
const http = require('http');
const path = require('path');

const { handler } = require(path.join(__dirname, '..', 'functions', 'node', 'index.js'));
const context = Object.freeze({ functionName: 'noop-floor', awsRequestId: 'floor' });

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', async () => {
    let status = 200;
    let out;
    try {
      const raw = chunks.length === 1 ? chunks[0].toString() : Buffer.concat(chunks).toString();
      const event = raw.trim() === '' ? {} : JSON.parse(raw);
      const result = await handler(event, context);
      out = JSON.stringify(result === undefined ? null : result);
    } catch (e) {
      status = 500;
      out = JSON.stringify({ errorMessage: String(e) });
    }
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  });
});
server.keepAliveTimeout = 10 * 60 * 1000;
server.on('connection', (socket) => socket.setNoDelay(true));
server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
