// A plain Express 5 app, as it would run on its own server (server.js); kiln serves it as a web function either
// by running server.js (--web-start server.js --web-port 3000) or by taking this export (--web-app app.js#app).
const crypto = require('crypto');
const express = require('express');

const app = express();
const startedIn = process.pid;
const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');
const raw = express.raw({ type: () => true, limit: '10mb' });

function png(width, height) {
  // The same gradient PNG as the Flask fixture (CRCs from zlib's crc32, as Node exposes it).
  const zlib = require('zlib');
  const chunk = (kind, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4); crc.writeUInt32BE(zlib.crc32(Buffer.concat([Buffer.from(kind), data])));
    return Buffer.concat([len, Buffer.from(kind), data, crc]);
  };
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width * 3; x++) row[1 + x] = (x * 7 + y * 3) % 256;
    rows.push(row);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0); header.writeUInt32BE(height, 4);
  header[8] = 8; header[9] = 2;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))), chunk('IEND', Buffer.alloc(0))]);
}

app.all('/echo', raw, (req, res) => {
  const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
  const multi = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].toLowerCase() === 'x-multi') multi.push(req.rawHeaders[i + 1]);
  }
  res.json({
    method: req.method, path: req.path, url: req.originalUrl, query: req.query, multi,
    cookie: req.get('cookie') || null, host: req.get('host'), protocol: req.protocol, name: req.get('x-name') || null,
    length: body.length, sha256: sha256(body), pid: process.pid, startedIn,
  });
});

app.get(encodeURI('/héllo') + '/:name', (req, res) => res.json({ path: decodeURIComponent(req.path), name: req.params.name }));

app.get('/image.png', (req, res) => res.type('png').send(png(64, 48)));
app.post('/image.png', raw, (req, res) => res.type('png').send(req.body));

app.post('/upload', raw, (req, res) => res.json({ type: req.get('content-type'), sha256: sha256(req.body) }));

app.get('/utf8-header', (req, res) => {
  res.set('X-Name', Buffer.from('café', 'utf8').toString('latin1')); // the UTF-8 bytes on the wire
  res.end();
});

app.get('/cookies', (req, res) => {
  res.cookie('a', '1');
  res.cookie('b', '2', { httpOnly: true });
  res.cookie('c', '3', { path: '/echo' });
  res.append('X-Repeated', ['one', 'two']);
  res.json({ ok: true });
});

app.get('/go', (req, res) => res.redirect(`${req.protocol}://${req.get('host')}/echo?q=1`));

app.get('/bytes', (req, res) => res.type('application/octet-stream').send(Buffer.alloc(Number(req.query.n), 120)));

app.get('/boom', () => { throw new Error('the app failed'); });

module.exports = { app };
