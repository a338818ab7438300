// What every view of the console uses: building the page from text, formatting, and kiln's API.
// Everything a user controls goes into the page as text (textContent, text nodes, attribute
// values): never parsed as HTML.

export const REFRESH_MS = 2000;
let csrfToken = null;
let leaving = [];

export function setCsrfToken(token) {
  csrfToken = token;
}

/** An element with properties (`text` is textContent, `class`, `on*` listeners) and children. */
export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A table; a header is text or a node (a sort link). */
export function table(id, headers, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted", text: "none" }))));
}

export function row(cells) {
  return el("tr", {}, cells.map((c) =>
    c instanceof Node ? el("td", {}, c) : el("td", { class: typeof c === "number" ? "num" : null, text: c ?? "" })));
}

export function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

export function render(...nodes) {
  document.getElementById("view").replaceChildren(...nodes);
}

/** Runs `fn` when the view is left (timers, streams). */
export function onLeave(fn) {
  leaving.push(fn);
}

export function leave() {
  const done = leaving;
  leaving = [];
  for (const fn of done) fn();
}

/** Redraws with `draw` every REFRESH_MS while the view is shown. */
export function every(draw) {
  const timer = setInterval(() => draw().catch((e) => showError(e.message)), REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
export const mb = (n) => (n === undefined || n === null ? "" : `${n} MB`);
export const seconds = (s) => (s < 60 ? `${s.toFixed(1)} s` : s < 3600 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`);

/** A time in the viewer's zone, with UTC on hover. */
export function when(value) {
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return el("span", { text: value ?? "" });
  return el("time", { datetime: date.toISOString(), title: date.toISOString(), text: date.toLocaleString() });
}

/** Bytes as base64. */
export function base64Bytes(data) {
  let text = "";
  for (let i = 0; i < data.length; i += 0x8000) text += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return btoa(text);
}

/** A file's bytes as base64, as Lambda's `ZipFile` takes them. */
export async function base64Of(file) {
  return base64Bytes(new Uint8Array(await file.arrayBuffer()));
}

export class ApiFailure extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** A request to kiln's API with the session cookie; changes carry the CSRF token. */
export async function api(method, path, { body, headers, signal } = {}) {
  const sent = Object.assign({}, headers);
  if (method !== "GET" && method !== "HEAD") sent["X-Kiln-Csrf"] = csrfToken || "";
  const response = await fetch(path, { method, headers: sent, body, signal, credentials: "same-origin", cache: "no-store" });
  if (response.status === 401) {
    window.location.assign("/ui/sign-in");
    throw new ApiFailure(401, "signed out");
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const problem = await response.json();
      message = problem.message || problem.Message || message;
    } catch (_) { /* not JSON */ }
    throw new ApiFailure(response.status, message);
  }
  return response;
}

/** The message of an error answer's JSON body, if it has one. */
function problemMessage(text) {
  try {
    const problem = JSON.parse(text);
    return problem.message || problem.Message || null;
  } catch (_) {
    return null;
  }
}

/**
 * A request whose upload is followed as it goes (`fetch` cannot): `onProgress(bytesSent)`.
 * Resolves to the answer's JSON, or null when it has none.
 */
export function send(method, path, body, { headers, onProgress } = {}) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open(method, path);
    for (const [name, value] of Object.entries(headers || {})) request.setRequestHeader(name, value);
    request.setRequestHeader("X-Kiln-Csrf", csrfToken || "");
    if (onProgress) request.upload.addEventListener("progress", (event) => onProgress(event.loaded));
    request.addEventListener("load", () => {
      if (request.status === 401) {
        window.location.assign("/ui/sign-in");
        reject(new ApiFailure(401, "signed out"));
      } else if (request.status < 200 || request.status > 299) {
        reject(new ApiFailure(request.status, problemMessage(request.responseText) || `${request.status} ${request.statusText}`));
      } else {
        try { resolve(request.responseText ? JSON.parse(request.responseText) : null); } catch (_) { resolve(null); }
      }
    });
    request.addEventListener("error", () => reject(new ApiFailure(0, "kiln did not answer")));
    request.send(body);
  });
}

export const getJson = async (path) => (await api("GET", path)).json();
export const sendJson = (method, path, value) =>
  api(method, path, { body: JSON.stringify(value), headers: { "Content-Type": "application/json" } });
export const fnPath = (name) => `/2015-03-31/functions/${encodeURIComponent(name)}`;
export const kilnFnPath = (name) => `/kiln/v1/functions/${encodeURIComponent(name)}`;

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

/** Milliseconds, to the precision that matters at their size. */
export function ms(value) {
  if (value === null || value === undefined) return "–";
  return `${value < 1 ? value.toFixed(2) : value < 100 ? value.toFixed(1) : Math.round(value)} ms`;
}

/**
 * A line chart of `samples` (oldest first): one line per `series` entry ({key, label, cls}),
 * scaled to the largest value shown (or to `options.max`). A value of null (nothing measured
 * then) is skipped: the line joins the values on either side. `options.unit` follows the peak ("/s" unless said),
 * `options.format` writes values, and `options.legend(line)` is what the legend says of a
 * line (its total unless said).
 */
export function chart(id, title, samples, series, options = {}) {
  const unit = options.unit ?? "/s";
  const format = options.format || ((v) => `${v}${unit}`);
  const total = (key) => samples.reduce((sum, s) => sum + (s[key] || 0), 0);
  const legend = options.legend || ((line) => total(line.key));
  const width = 600;
  const height = 110;
  const shown = (v) => v !== null && v !== undefined;
  const values = samples.flatMap((s) => series.map((x) => s[x.key]).filter(shown));
  const peak = values.length ? Math.max(...values) : 0;
  const scale = options.max ?? (peak > 0 ? peak : 1);
  const picture = svg("svg", { id, class: "chart", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img" });
  picture.append(svg("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  const step = samples.length > 1 ? width / (samples.length - 1) : width;
  for (const line of series) {
    const points = samples
      .map((s, i) => [i, s[line.key]])
      .filter(([, v]) => shown(v))
      .map(([i, v]) => `${(i * step).toFixed(1)},${(height - 1 - ((height - 6) * v) / scale).toFixed(1)}`);
    // A single value would draw nothing: it is drawn as a dot.
    if (points.length === 1) {
      const [x, y] = points[0].split(",");
      picture.append(svg("circle", { cx: x, cy: y, r: 2, class: `dot ${line.cls}` }));
    }
    picture.append(svg("polyline", { points: points.join(" "), class: line.cls }));
  }
  return el("figure", { class: "chart" },
    el("figcaption", {}, el("strong", { text: title }), ` (peak ${format(peak)})`),
    picture,
    el("div", { class: "legend" }, series.map((line) =>
      el("span", {}, el("span", { class: `swatch ${line.cls}` }), `${line.label}: ${legend(line)}`))));
}
