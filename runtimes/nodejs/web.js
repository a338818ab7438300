'use strict';
/*
 * kiln's web adapter for Node.js (docs/web-adapter.md): serves an unmodified web app as a function.
 *
 * The app runs in the shim's own process with Node's real `http` server: either its unchanged entry script
 * listens on KILN_WEB_PORT itself (KILN_WEB_START), or kiln makes its exported app or `(req, res)` handler
 * listen on a Unix socket (KILN_WEB_APP, `FILE#EXPORT`). Each function URL event (payload format 2.0) becomes a
 * real HTTP request to it inside the sandbox, and the real response becomes the payload 2.0 answer, so the app
 * sees real `req`/`res` objects and bodies are passed as bytes. Only Node built-ins are used.
 */
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { pathToFileURL } = require('url');

// How long an entry script may take to listen; Lambda's init phase has 10 s.
const READY_TIMEOUT_MS = 10000;
const READY_POLL_MS = 10;
// Headers that describe one connection, not the message: never forwarded either way.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te',
  'trailer', 'proxy-authenticate', 'proxy-authorization']);
const TEXT_TYPES = ['text/', 'application/json', 'application/javascript', 'application/ecmascript',
  'application/xml', 'application/x-www-form-urlencoded', 'image/svg+xml'];
const utf8 = new TextDecoder('utf-8', { fatal: true });

class WebAppError extends Error {}
WebAppError.prototype.name = 'Runtime.WebAppError';

function isHttpEvent(event) {
  return event != null && typeof event === 'object' && event.requestContext != null &&
    typeof event.requestContext.http === 'object' && event.requestContext.http !== null;
}

// The answer to an event that is no HTTP request (a warm-up's `{}`): the app is not called, so that a warm-up
// or readiness check never runs a route with side effects.
function notHttp() {
  return { statusCode: 400, headers: { 'content-type': 'text/plain; charset=utf-8' }, isBase64Encoded: false,
    body: 'kiln web adapter: the event is not an HTTP request (function URL payload format 2.0)\n' };
}

function textual(contentType) {
  const kind = String(contentType || '').split(';')[0].trim().toLowerCase();
  return TEXT_TYPES.some((t) => kind.startsWith(t)) || kind.endsWith('+json') || kind.endsWith('+xml');
}

// The payload 2.0 answer: lower-case headers (repeated ones joined with ", "), each Set-Cookie in `cookies`, the
// body as text only when its type is textual and it is UTF-8, else base64.
function toResponse(method, res, body) {
  const headers = {};
  const cookies = [];
  const raw = res.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    // Node reads header bytes as latin-1; the event carries text, so UTF-8 bytes become their characters again.
    const value = Buffer.from(raw[i + 1], 'latin1').toString('utf8');
    if (HOP_BY_HOP.has(name)) continue;
    if (name === 'set-cookie') cookies.push(value);
    else headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  }
  const out = { statusCode: res.statusCode, headers, isBase64Encoded: false, body: '' };
  if (cookies.length) out.cookies = cookies;
  if (method === 'HEAD' || body.length === 0) return out;
  if (textual(headers['content-type'])) {
    try {
      out.body = utf8.decode(body);
      return out;
    } catch (_) { /* not UTF-8: base64 below */ }
  }
  out.body = body.toString('base64');
  out.isBase64Encoded = true;
  return out;
}

// The request a server would have read off the wire, from the event.
function toRequest(event) {
  const h = event.requestContext.http;
  const method = String(h.method || 'GET').toUpperCase();
  const rawPath = event.rawPath || h.path || '/';
  const query = event.rawQueryString || '';
  const body = event.body == null ? Buffer.alloc(0)
    : Buffer.from(String(event.body), event.isBase64Encoded ? 'base64' : 'utf8');
  const headers = {};
  for (const [name, value] of Object.entries(event.headers || {})) {
    const lower = name.toLowerCase();
    // Written as the bytes the client sent (kiln read them as UTF-8): Node writes a string as latin-1.
    if (!HOP_BY_HOP.has(lower) && lower !== 'content-length') {
      headers[lower] = Buffer.from(String(value), 'utf8').toString('latin1');
    }
  }
  // An HTTP/1.1 request must name a host (Node's server answers 400 otherwise); an event built by hand may not.
  if (headers.host === undefined) headers.host = event.requestContext.domainName || 'localhost';
  if (Array.isArray(event.cookies) && event.cookies.length) {
    headers.cookie = Buffer.from(event.cookies.join('; '), 'utf8').toString('latin1');
  }
  if (body.length || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(method)) headers['content-length'] = body.length;
  return { method, path: rawPath + (query ? `?${query}` : ''), headers, body };
}

function forward(target, agent, event, onGone) {
  return send(target, agent, toRequest(event), true, onGone);
}

function send(target, agent, request, mayRetry, onGone) {
  return new Promise((resolve, reject) => {
    const req = http.request({ ...target, agent, method: request.method, path: request.path,
      headers: request.headers, setHost: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve(toResponse(request.method, res, Buffer.concat(chunks))));
      res.on('error', reject);
    });
    req.on('error', (e) => {
      // A kept-alive connection the server closed just as it was reused: the request never reached the app.
      if (mayRetry && req.reusedSocket && e.code === 'ECONNRESET') {
        return resolve(send(target, agent, request, false, onGone));
      }
      if (e.code === 'ECONNREFUSED' || e.code === 'ENOENT') {
        // Nothing listens any more (the app closed its server): answered by onGone, which ends the instance.
        return onGone(new WebAppError(`the app's server no longer accepts connections: ${e.message}`));
      }
      reject(new WebAppError(`the app's server failed the request: ${e.message}`));
    });
    req.end(request.body);
  });
}

function isEsm(file) {
  if (file.endsWith('.mjs')) return true;
  if (file.endsWith('.cjs')) return false;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const pj = path.join(dir, 'package.json');
    if (fs.existsSync(pj)) {
      try { return JSON.parse(fs.readFileSync(pj, 'utf8')).type === 'module'; } catch (_) { return false; }
    }
    if (path.dirname(dir) === dir || dir.endsWith('/node_modules')) return false;
  }
}

async function load(taskRoot, file) {
  const full = path.resolve(taskRoot, file);
  if (!fs.existsSync(full)) {
    const err = new Error(`Cannot find the web app's file '${file}' in the package`);
    err.name = 'Runtime.ImportModuleError';
    throw err;
  }
  return isEsm(full) ? import(pathToFileURL(full).href) : require(full);
}

// Polls until something accepts connections on the port: a TCP connect, never an HTTP request, so that the
// readiness check runs none of the app's code.
function waitForPort(port) {
  const hosts = ['127.0.0.1', '::1'];
  const deadline = Date.now() + READY_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    let attempt = 0;
    const tryOnce = () => {
      const host = hosts[attempt++ % hosts.length];
      const sock = net.connect({ host, port });
      sock.once('connect', () => { sock.destroy(); resolve(host); });
      sock.once('error', () => {
        sock.destroy();
        if (Date.now() > deadline) {
          const err = new WebAppError(`the app did not listen on port ${port} within ${READY_TIMEOUT_MS / 1000} s ` +
            '(KilnWeb.Port must be the port the entry script listens on)');
          return reject(err);
        }
        setTimeout(tryOnce, attempt % hosts.length ? 0 : READY_POLL_MS);
      });
    };
    tryOnce();
  });
}

// An exported app: a `(req, res)` function (Express, Connect, a plain handler), an object with `callback()`
// (Koa), or an `http.Server` that is not listening yet.
function requestListener(exported, spec) {
  if (exported instanceof http.Server) return exported;
  if (typeof exported === 'function') return http.createServer(exported);
  if (exported && typeof exported.callback === 'function') return http.createServer(exported.callback());
  const err = new Error(`${spec} is not a web app: export a (req, res) handler, an Express or Koa app, or an ` +
    'http.Server');
  err.name = 'Runtime.HandlerNotFound';
  throw err;
}

async function startApp(taskRoot, spec) {
  const hash = spec.indexOf('#');
  const file = hash === -1 ? spec : spec.slice(0, hash);
  const exportPath = hash === -1 ? '' : spec.slice(hash + 1);
  const mod = await load(taskRoot, file);
  const exported = exportPath ? exportPath.split('.').reduce((o, k) => (o == null ? o : o[k]), mod)
    : (mod && mod.default !== undefined ? mod.default : mod);
  if (exported == null) {
    const err = new Error(`${spec}: '${exportPath}' is not exported by ${file}`);
    err.name = 'Runtime.HandlerNotFound';
    throw err;
  }
  const server = requestListener(exported, spec);
  const socketPath = path.join(os.tmpdir(), `.kiln-web-${process.pid}.sock`);
  try { fs.unlinkSync(socketPath); } catch (_) { /* none left over */ }
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => { server.off('error', reject); resolve(); });
  });
  return { socketPath, exported };
}

async function startScript(env, taskRoot, script, port) {
  // Most entry scripts read their port from PORT; one the function sets itself is left alone.
  if (env.PORT === undefined) env.PORT = String(port);
  // An entry script whose primary forks workers with node's cluster module: each worker runs the entry script,
  // as under `node server.js`, not the shim this process was started with (cluster's default, process.argv[1]).
  // Settings the script gives setupPrimary itself still win.
  const cluster = require('cluster');
  if (cluster.isPrimary) cluster.setupPrimary({ exec: path.resolve(taskRoot, script), args: [] });
  await load(taskRoot, script);
  const host = await waitForPort(port);
  return { host, port };
}

// The handler the shim calls for each invocation, once the app is listening.
async function loadWebApp(env, taskRoot, onGone) {
  const target = env.KILN_WEB_APP ? await startApp(taskRoot, env.KILN_WEB_APP)
    : await startScript(env, taskRoot, env.KILN_WEB_START, Number(env.KILN_WEB_PORT));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  return async function webHandler(event) {
    if (!isHttpEvent(event)) {
      if (event && event.kiln === 'web-routes') return declaredRoutes(target.exported);
      return notHttp();
    }
    return forward(target, agent, event, onGone);
  };
}

// The routes an Express app (4: `_router`, 5: `router`) declares, in kiln's route patterns (docs/burst.md):
// `:name` is one segment; anything else (regular expressions, optional and wildcard parameters) is skipped.
// An entry script (`--web-start`) exports no app: its routes are unknown.
function declaredRoutes(app) {
  const router = app && (app.router || app._router);
  const stack = router && Array.isArray(router.stack) ? router.stack : null;
  if (!stack) return { framework: null, routes: [], skipped: [] };
  const routes = [];
  const skipped = [];
  for (const layer of stack) {
    const route = layer && layer.route;
    if (!route) continue;
    const paths = Array.isArray(route.path) ? route.path : [route.path];
    for (const p of paths) {
      const translated = typeof p === 'string' && !/[{}*?()+[\]]/.test(p) && p.startsWith('/')
        ? p.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}') : null;
      if (translated === null || translated.includes(':')) {
        skipped.push(String(p));
        continue;
      }
      const methods = Object.keys(route.methods || {}).filter((m) => route.methods[m] && m !== '_all')
        .map((m) => m.toUpperCase());
      // `app.all` registers every method there is (Express 5) or `_all` (4): any method.
      const any = (route.methods && route.methods._all) || methods.length > 8;
      const standard = methods.filter((m) => ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'].includes(m));
      for (const m of any ? ['*'] : standard) routes.push(`${m} ${translated}`);
    }
  }
  return { framework: 'express', routes, skipped };
}

module.exports = { loadWebApp, toResponse, toRequest, isHttpEvent, declaredRoutes };
