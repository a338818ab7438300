// The kiln console: one page, views chosen by the URL's fragment (#/functions/NAME/test), data
// from kiln's API with the session cookie. Everything a user controls is put into the page as
// text (textContent, text nodes, attribute values): never parsed as HTML.
"use strict";

const REFRESH_MS = 2000;
let csrfToken = null;
let refreshTimer = null;

// --- DOM helpers -----------------------------------------------------------------------------

/** An element with properties (`text` is textContent, `class`, `on*` listeners) and children. */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(id, headers, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, headers.map((h) =>
      el("th", { class: h.num ? "num" : null, text: h.label || h })))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted", text: "none" }))));
}

function row(cells) {
  return el("tr", {}, cells.map((c) =>
    c instanceof Node ? el("td", {}, c) : el("td", { class: typeof c === "number" ? "num" : null, text: c ?? "" })));
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// --- Formatting -------------------------------------------------------------------------------

function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
const mb = (n) => (n === undefined || n === null ? "" : `${n} MB`);
const seconds = (s) => (s < 60 ? `${s.toFixed(1)} s` : s < 3600 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`);

/** A time in the viewer's zone, with UTC on hover. */
function when(value) {
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return el("span", { text: value ?? "" });
  return el("time", { datetime: date.toISOString(), title: date.toISOString(), text: date.toLocaleString() });
}

// --- The API -----------------------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** A request to kiln's API with the session cookie; changes carry the CSRF token. */
async function api(method, path, { body, headers } = {}) {
  const sent = Object.assign({}, headers);
  if (method !== "GET" && method !== "HEAD") sent["X-Kiln-Csrf"] = csrfToken || "";
  const response = await fetch(path, { method, headers: sent, body, credentials: "same-origin", cache: "no-store" });
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
const getJson = async (path) => (await api("GET", path)).json();
const fnPath = (name) => `/2015-03-31/functions/${encodeURIComponent(name)}`;
const kilnFnPath = (name) => `/kiln/v1/functions/${encodeURIComponent(name)}`;

// --- Signing in and out -----------------------------------------------------------------------

function startSignIn() {
  document.getElementById("sign-in").hidden = false;
  document.getElementById("access-key").focus();
  document.getElementById("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const secretInput = document.getElementById("secret");
    const message = document.getElementById("sign-in-error");
    const button = document.getElementById("sign-in-button");
    message.textContent = "";
    button.disabled = true;
    try {
      const response = await fetch("/ui/api/session", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        credentials: "same-origin",
        body: JSON.stringify({
          accessKeyId: document.getElementById("access-key").value,
          secretAccessKey: secretInput.value,
        }),
      });
      if (response.ok) {
        window.location.replace("/ui/");
        return;
      }
      let text = `${response.status} ${response.statusText}`;
      try { text = (await response.json()).message || text; } catch (_) { /* not JSON */ }
      message.textContent = text;
    } catch (e) {
      message.textContent = `kiln did not answer: ${e.message}`;
    } finally {
      // The secret is never kept in the page once it has been sent.
      secretInput.value = "";
      button.disabled = false;
    }
  });
}

async function signOut() {
  try {
    await api("DELETE", "/ui/api/session");
  } catch (e) {
    if (e.status !== 401) { showError(e.message); return; }
  }
  window.location.replace("/ui/sign-in");
}

// --- Views ------------------------------------------------------------------------------------

function setRefresh(fn) {
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = fn ? setInterval(() => fn().catch((e) => showError(e.message)), REFRESH_MS) : null;
}

function render(...nodes) {
  document.getElementById("view").replaceChildren(...nodes);
}

async function overview() {
  const view = el("div", { id: "overview" });
  render(el("h1", { text: "Overview" }), view);
  const draw = async () => {
    const status = await getJson("/kiln/v1/status");
    const node = status.node;
    const states = { starting: 0, idle: 0, busy: 0 };
    const paths = { coldest: 0, warm: 0, hot: 0 };
    let used = 0;
    for (const i of node.instances) {
      states[i.state] = (states[i.state] || 0) + 1;
      paths[i.start_path] = (paths[i.start_path] || 0) + 1;
      used += i.memory_used_bytes;
    }
    const budget = node.memory_budget_mb * 1024 * 1024;
    const booked = node.memory_reserved_mb * 1024 * 1024;
    const card = (label, value, id) => el("div", { class: "card", id }, el("div", { class: "value", text: value }), el("div", { class: "label", text: label }));
    const share = (n) => `${Math.max(0, Math.min(100, (100 * n) / Math.max(budget, 1)))}%`;
    const part = (cls, n, title) => { const s = el("span", { class: cls, title }); s.style.width = share(n); return s; };
    const usedShare = Math.min(used, booked);
    view.replaceChildren(
      el("div", { class: "cards" },
        card("functions", status.functions.length, "card-functions"),
        card("instances (busy / idle / starting)", `${node.instances.length} (${states.busy} / ${states.idle} / ${states.starting})`, "card-instances"),
        card("start paths of live instances (coldest / warm / hot)", `${paths.coldest} / ${paths.warm} / ${paths.hot}`, "card-paths"),
        card("snapshots", node.snapshots.length),
        card("async queue depth", status.asyncQueueDepth, "card-queue"),
        card("cgroups", node.cgroup_version)),
      el("h2", { text: "Memory" }),
      el("div", { class: "bar", id: "memory-bar" },
        part("used", usedShare, `used by instances: ${bytes(used)}`),
        part("booked", booked - usedShare, `booked, not used: ${bytes(booked - usedShare)}`)),
      el("div", { class: "legend" },
        el("span", {}, el("span", { class: "swatch used" }), `used ${bytes(used)}`),
        el("span", {}, el("span", { class: "swatch booked" }), `booked ${mb(node.memory_reserved_mb)}`),
        el("span", {}, el("span", { class: "swatch free" }), `free ${mb(node.memory_budget_mb - node.memory_reserved_mb)} of ${mb(node.memory_budget_mb)}`)),
      el("h2", { text: "Runtimes" }),
      el("p", { text: node.runtimes.join(", ") }));
  };
  await draw();
  setRefresh(draw);
}

async function functionsList(params) {
  const marker = params.get("marker");
  const query = (params.get("q") || "").toLowerCase();
  const search = el("input", { id: "function-search", type: "search", placeholder: "filter this page by name", value: params.get("q") || "" });
  search.addEventListener("change", () => {
    const next = new URLSearchParams(params);
    if (search.value) next.set("q", search.value); else next.delete("q");
    window.location.hash = `#/functions?${next}`;
  });
  const list = await getJson(`/2015-03-31/functions?MaxItems=50${marker ? `&Marker=${encodeURIComponent(marker)}` : ""}`);
  const rows = list.Functions
    .filter((f) => !query || f.FunctionName.toLowerCase().includes(query))
    .map((f) => row([
      el("a", { href: `#/functions/${encodeURIComponent(f.FunctionName)}`, text: f.FunctionName }),
      f.Runtime || f.PackageType,
      mb(f.MemorySize),
      `${f.Timeout} s`,
      f.State || "",
      when(f.LastModified),
      f.Description || "",
    ]));
  const pager = el("div", { class: "toolbar" });
  if (marker) pager.append(el("a", { href: "#/functions", text: "« first page" }));
  if (list.NextMarker) pager.append(el("a", { id: "next-page", href: `#/functions?marker=${encodeURIComponent(list.NextMarker)}`, text: "next page »" }));
  render(
    el("h1", { text: "Functions" }),
    el("div", { class: "toolbar" }, search),
    table("functions-table", ["Name", "Runtime", "Memory", "Timeout", "State", "Last modified", "Description"], rows),
    pager);
}

const TABS = ["configuration", "test", "instances", "logs", "sessions"];

async function functionView(name, tab) {
  const fn = await getJson(fnPath(name));
  const c = fn.Configuration;
  const tabs = el("div", { class: "tabs" }, TABS.map((t) =>
    el("a", { href: `#/functions/${encodeURIComponent(name)}/${t}`, class: t === tab ? "active" : null, id: `tab-${t}`, text: t[0].toUpperCase() + t.slice(1) })));
  const body = el("div", { id: `fn-${tab}` });
  render(
    el("h1", { id: "fn-title", text: c.FunctionName }),
    el("p", { id: "fn-description", class: "muted", text: c.Description || "" }),
    tabs, body);
  const views = { configuration: configurationTab, test: testTab, instances: instancesTab, logs: logsTab, sessions: sessionsTab };
  await (views[tab] || configurationTab)(name, fn, body);
}

function configurationTab(name, fn, body) {
  const c = fn.Configuration;
  const item = (label, value) => [el("dt", { text: label }), el("dd", {}, value instanceof Node ? value : String(value ?? ""))];
  const env = Object.entries((c.Environment && c.Environment.Variables) || {});
  const envRows = env.map(([key, value]) => {
    const shown = el("span", { class: "secret", text: "••••••••" });
    const toggle = el("button", { type: "button", class: "plain", text: "Show" });
    toggle.addEventListener("click", () => {
      const hidden = toggle.textContent === "Show";
      shown.textContent = hidden ? value : "••••••••";
      toggle.textContent = hidden ? "Hide" : "Show";
    });
    return row([key, shown, toggle]);
  });
  body.append(
    el("dl", { class: "config", id: "fn-config" },
      item("Runtime", c.Runtime || c.PackageType),
      item("Handler", c.Handler),
      item("Memory", mb(c.MemorySize)),
      item("Timeout", `${c.Timeout} s`),
      item("Ephemeral storage", mb(c.EphemeralStorage && c.EphemeralStorage.Size)),
      item("State", `${c.State || ""} ${c.LastUpdateStatus ? `(last update: ${c.LastUpdateStatus})` : ""}`),
      item("Code", `${bytes(c.CodeSize)}, SHA-256 ${c.CodeSha256}`),
      item("Revision", c.RevisionId),
      item("Last modified", when(c.LastModified)),
      item("ARN", c.FunctionArn)),
    el("h2", { text: "Environment" }),
    table("fn-env", ["Name", "Value", ""], envRows));
  if (fn.Code && fn.Code.Location) {
    body.append(el("p", {}, el("a", { href: fn.Code.Location, id: "code-download", text: "Download the code (zip)" })));
  }
}

function testTab(name, fn, body) {
  const payload = el("textarea", { id: "invoke-payload", spellcheck: "false" });
  payload.value = "{}";
  const status = el("p", { id: "invoke-status" });
  const result = el("pre", { id: "invoke-result" });
  const log = el("pre", { id: "invoke-log" });
  const button = el("button", { type: "button", id: "invoke-button", text: "Invoke" });
  button.addEventListener("click", async () => {
    showError("");
    try { JSON.parse(payload.value); } catch (e) { status.className = "error"; status.textContent = `The event is not JSON: ${e.message}`; return; }
    button.disabled = true;
    status.className = "muted";
    status.textContent = "invoking…";
    try {
      const response = await api("POST", `${fnPath(name)}/invocations`, {
        body: payload.value,
        headers: { "Content-Type": "application/json", "X-Amz-Log-Type": "Tail" },
      });
      const text = await response.text();
      const functionError = response.headers.get("X-Amz-Function-Error");
      status.className = functionError ? "error" : "ok";
      status.textContent = functionError ? `Function error (${functionError})` : `Succeeded (status ${response.status})`;
      try { result.textContent = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { result.textContent = text; }
      const tail = response.headers.get("X-Amz-Log-Result");
      log.textContent = tail ? new TextDecoder().decode(Uint8Array.from(atob(tail), (ch) => ch.charCodeAt(0))) : "";
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    } finally {
      button.disabled = false;
    }
  });
  body.append(
    el("h2", { text: "Test event (JSON)" }), payload,
    el("div", { class: "toolbar" }, button),
    status,
    el("h2", { text: "Result" }), result,
    el("h2", { text: "Log (START, END and REPORT)" }), log);
}

async function instancesTab(name, fn, body) {
  const draw = async () => {
    const node = (await getJson("/kiln/v1/status")).node;
    body.replaceChildren(...instanceTables(node, (x) => x.function === name));
  };
  await draw();
  setRefresh(draw);
}

function instanceTables(node, keep) {
  const instances = node.instances.filter(keep).map((i) => row([
    i.id, i.function, i.state, i.start_path, seconds(i.age_s), mb(i.memory_limit_mb), bytes(i.memory_used_bytes), i.sessions]));
  const snapshots = node.snapshots.filter(keep).map((s) => row([
    s.function, s.kind, s.state, s.revision, bytes(s.memory_bytes), s.forks, `${s.standbys_ready} / ${s.standbys_target}`, s.error || ""]));
  return [
    el("h2", { text: "Instances" }),
    table("instances-table", ["ID", "Function", "State", "Start path", "Age", "Memory limit", "Memory used", "Sessions"], instances),
    el("h2", { text: "Snapshots" }),
    table("snapshots-table", ["Function", "Kind", "State", "Revision", "Memory", "Forks", "Standbys ready / wanted", "Error"], snapshots),
  ];
}

async function logsTab(name, fn, body) {
  const filter = el("input", { id: "logs-filter", type: "search", placeholder: "show lines containing…" });
  const follow = el("input", { id: "logs-follow", type: "checkbox", checked: "" });
  const text = el("pre", { id: "logs-text" });
  let lines = [];
  const show = () => {
    const needle = filter.value;
    text.textContent = lines.filter((l) => !needle || l.includes(needle)).join("\n");
  };
  filter.addEventListener("input", show);
  const load = async () => {
    if (!follow.checked) return;
    const response = await api("GET", `${kilnFnPath(name)}/logs?bytes=65536`);
    lines = (await response.text()).split("\n");
    show();
  };
  body.append(
    el("div", { class: "toolbar" }, filter, el("label", {}, follow, " refresh every 2 s")),
    text);
  await load();
  setRefresh(load);
}

async function sessionsTab(name, fn, body) {
  const draw = async () => {
    const list = (await getJson(`${kilnFnPath(name)}/sessions`)).Sessions;
    const rows = list.map((s) => {
      const end = el("button", { type: "button", class: "plain", text: "End" });
      end.addEventListener("click", async () => {
        try {
          await api("DELETE", `${kilnFnPath(name)}/sessions/${encodeURIComponent(s.session)}`);
          await draw();
        } catch (e) { showError(e.message); }
      });
      return row([s.session, s.instance, s.requests, seconds(s.age_s), seconds(s.idle_s), end]);
    });
    body.replaceChildren(table("sessions-table", ["Session", "Instance", "Requests", "Age", "Idle", ""], rows));
  };
  await draw();
  setRefresh(draw);
}

async function instancesPage() {
  const holder = el("div");
  render(el("h1", { text: "Instances" }), holder);
  const draw = async () => {
    const node = (await getJson("/kiln/v1/status")).node;
    holder.replaceChildren(...instanceTables(node, () => true));
  };
  await draw();
  setRefresh(draw);
}

async function cachePage() {
  const status = await getJson("/kiln/v1/status");
  const cache = status.objectCache;
  const models = (status.memoryModels || []).map((m) => row([
    m.function, m.mature ? "mature" : "learning", m.invocations, m.samples,
    m.exact_or_over === null || m.exact_or_over === undefined ? "" : `${(100 * m.exact_or_over).toFixed(1)} %`,
    m.cache_benefit === undefined ? "" : `${(100 * m.cache_benefit).toFixed(1)} %`,
    (m.features || []).join(", ")]));
  const failing = cache ? cache.failing.map((f) => row(Object.values(f).map((v) => (typeof v === "object" ? JSON.stringify(v) : v)))) : [];
  render(
    el("h1", { text: "Object cache and memory models" }),
    cache
      ? el("div", { class: "cards" },
        el("div", { class: "card", id: "cache-dirty" }, el("div", { class: "value", text: bytes(cache.dirty_bytes) }), el("div", { class: "label", text: "written, not yet in the backing store" })),
        el("div", { class: "card" }, el("div", { class: "value", text: cache.failing.length }), el("div", { class: "label", text: "keys failing to write back" })))
      : el("p", { class: "muted", id: "cache-off", text: "The object cache is off (it runs in front of a remote backing store, or with --object-cache on)." }),
    failing.length ? table("cache-failing", ["Failing write-back"], failing) : "",
    el("h2", { text: "Memory models" }),
    table("models-table", ["Function", "State", "Invocations", "Samples", "Exact or over", "Cache benefit", "Features"], models));
}

// --- Routing ----------------------------------------------------------------------------------

async function route() {
  setRefresh(null);
  showError("");
  const hash = window.location.hash.replace(/^#\/?/, "") || "overview";
  const [path, query] = hash.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.view === parts[0]);
  }
  try {
    if (parts[0] === "functions" && parts[1]) await functionView(parts[1], parts[2] || "configuration");
    else if (parts[0] === "functions") await functionsList(params);
    else if (parts[0] === "instances") await instancesPage();
    else if (parts[0] === "cache") await cachePage();
    else await overview();
  } catch (e) {
    if (e.status !== 401) showError(e.message);
  }
}

async function start() {
  if (window.location.pathname === "/ui/sign-in") {
    startSignIn();
    return;
  }
  const response = await fetch("/ui/api/session", { credentials: "same-origin", cache: "no-store" });
  if (!response.ok) {
    window.location.replace("/ui/sign-in");
    return;
  }
  const session = await response.json();
  csrfToken = session.csrfToken;
  document.getElementById("top").hidden = false;
  const who = document.getElementById("who");
  who.textContent = `${session.accessKeyId} · until `;
  who.append(when(session.expiresAt * 1000));
  document.getElementById("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  await route();
}

document.addEventListener("DOMContentLoaded", () => { start().catch((e) => showError(e.message)); });
