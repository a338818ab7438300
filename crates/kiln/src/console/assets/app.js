// The kiln console: one page, views chosen by the URL's fragment (#/functions/NAME/test), data
// from kiln's API with the session cookie (see dom.js for how the page is built: as text).

import {
  api, base64Of, bytes, chart, el, every, getJson, leave, mb, ms, onLeave, render, row, sendJson,
  setCsrfToken, showError, table, when,
} from "./dom.js";
import { functionView, instanceTables } from "./function.js";
import { objectsView } from "./objects.js";

// --- The theme: the system's unless the viewer picks one (kept in this browser) ---------------

const THEME_KEY = "kiln.theme";

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function startTheme() {
  const saved = localStorage.getItem(THEME_KEY) || "";
  applyTheme(saved);
  const choice = document.getElementById("theme");
  choice.value = saved;
  choice.addEventListener("change", () => {
    if (choice.value) localStorage.setItem(THEME_KEY, choice.value);
    else localStorage.removeItem(THEME_KEY);
    applyTheme(choice.value);
  });
}

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

// The overview's windows: the fragment's `minutes`, and what the page calls it.
const WINDOWS = [[10, "10 minutes"], [60, "hour"]];

async function overview(params) {
  const minutes = WINDOWS.some(([m]) => String(m) === params.get("minutes")) ? Number(params.get("minutes")) : 10;
  const span = WINDOWS.find(([m]) => m === minutes)[1];
  const view = el("div", { id: "overview" });
  const choices = el("div", { class: "toolbar", id: "overview-window" }, "Show the last ",
    WINDOWS.map(([m, label]) => (m === minutes
      ? el("strong", { text: label })
      : el("a", { href: `#/overview?minutes=${m}`, id: `window-${m}`, text: label }))));
  render(el("h1", { text: "Overview" }), choices, view);
  const draw = async () => {
    const [status, history] = await Promise.all([getJson("/kiln/v1/status"), getJson(`/kiln/v1/history?seconds=${minutes * 60}`)]);
    const samples = history.Samples;
    const node = status.node;
    const states = { starting: 0, idle: 0, busy: 0 };
    const paths = { coldest: 0, warm: 0, hot: 0 };
    let used = 0;
    for (const i of node.instances) {
      states[i.state] = (states[i.state] || 0) + 1;
      paths[i.start_path] = (paths[i.start_path] || 0) + 1;
      used += i.memory_used_bytes;
    }
    const card = (label, value, id) => el("div", { class: "card", id }, el("div", { class: "value", text: value }), el("div", { class: "label", text: label }));
    view.replaceChildren(
      el("div", { class: "cards" },
        card("functions", status.functions.length, "card-functions"),
        card("instances (busy / idle / starting)", `${node.instances.length} (${states.busy} / ${states.idle} / ${states.starting})`, "card-instances"),
        card("start paths of live instances (coldest / warm / hot)", `${paths.coldest} / ${paths.warm} / ${paths.hot}`, "card-paths"),
        card("snapshots", node.snapshots.length),
        card(`duration p50 / p99, last ${span}`, `${ms(history.Duration.P50)} / ${ms(history.Duration.P99)}`, "card-duration"),
        card("async queue depth", status.asyncQueueDepth, "card-queue"),
        card("cgroups", node.cgroup_version)),
      el("h2", { text: `The last ${span}, per second` }),
      el("div", { class: "charts" },
        chart("chart-invocations", "Invocations", samples, [
          { key: "Invocations", label: "invocations", cls: "line-invocations" },
          { key: "Errors", label: "function errors", cls: "line-errors" },
          { key: "Throttles", label: "throttles", cls: "line-throttles" }]),
        chart("chart-starts", "Cold starts by path", samples, [
          { key: "Coldest", label: "coldest", cls: "line-coldest" },
          { key: "Warm", label: "warm", cls: "line-warm" },
          { key: "Hot", label: "hot", cls: "line-hot" }]),
        chart("chart-duration", "Duration of each second's invocations", samples, [
          { key: "P50", label: "p50", cls: "line-p50" },
          { key: "P99", label: "p99", cls: "line-p99" }],
        { format: ms, legend: (line) => `${ms(history.Duration[line.key])} over the ${span}` }),
        chart("chart-objects", "Object store requests", samples, [
          { key: "ObjectRequests", label: "requests", cls: "line-invocations" },
          { key: "ObjectErrors", label: "errors (4xx, 5xx)", cls: "line-errors" }]),
        chart("chart-object-bytes", "Object store traffic", samples, [
          { key: "ObjectBytesIn", label: "received", cls: "line-p50" },
          { key: "ObjectBytesOut", label: "sent", cls: "line-p99" }],
        { format: (v) => `${bytes(v)}/s`, legend: (line) => bytes(samples.reduce((sum, s) => sum + (s[line.key] || 0), 0)) })),
      el("h2", { text: "Memory" }),
      ...memoryPicture(node, used, status.objectCacheMemory),
      el("h2", { text: "Runtimes" }),
      el("p", { text: node.runtimes.join(", ") }));
  };
  await draw();
  every(draw);
}

const MiB = 1024 * 1024;

/**
 * The node's memory budget as OFC divides it: what instances use, what their predicted limits
 * hold beyond that, what the rest of their bookings lends the object cache and keeps as slack
 * (when the cache is sized by lending), the rest booked, and what is free.
 */
function memoryPicture(node, used, cache) {
  const budget = node.memory_budget_mb * MiB;
  const booked = node.memory_reserved_mb * MiB;
  const limits = Math.min(booked, node.instances.reduce((n, i) => n + i.memory_limit_mb * MiB, 0));
  const inUse = Math.min(used, limits);
  const lending = Boolean(cache && cache.lent);
  const lent = lending ? Math.min(cache.capacityBytes, booked - limits) : 0;
  const slack = lending ? Math.min(cache.slackBytes, booked - limits - lent) : 0;
  const parts = [
    ["used", inUse, "used by instances"],
    ["predicted", limits - inUse, "predicted limits, not used"],
    ["cache", lent, "lent to the object cache"],
    ["slack", slack, "slack"],
    ["booked", Math.max(0, booked - limits - lent - slack), "booked beyond the limits"],
    ["free", Math.max(0, budget - booked), "free"],
  ];
  const bar = el("div", { class: "bar", id: "memory-bar" }, parts.filter(([, n]) => n > 0).map(([cls, n, label]) => {
    const part = el("span", { class: cls, title: `${label}: ${bytes(n)}` });
    part.style.width = `${Math.min(100, (100 * n) / Math.max(budget, 1))}%`;
    return part;
  }));
  const legend = el("div", { class: "legend", id: "memory-legend" }, parts
    .filter(([cls]) => lending || (cls !== "cache" && cls !== "slack"))
    .map(([cls, n, label]) => el("span", {}, el("span", { class: `swatch ${cls}` }), `${label} ${bytes(n)}`)),
  el("span", { text: `of a budget of ${mb(node.memory_budget_mb)}` }));
  const note = cache && !lending
    ? el("p", { class: "muted", id: "memory-cache", text: `The object cache has a fixed capacity: ${bytes(cache.usedBytes)} of ${bytes(cache.capacityBytes)} held, beside the budget.` })
    : null;
  return [bar, legend, note].filter(Boolean);
}

// The functions table's sortable columns: header, and the key `/kiln/v1/functions` sorts by.
const SORTABLE = [["Name", "name"], ["Runtime", "runtime"], ["Memory", "memory"],
  ["Last invocation", "lastInvocation"], ["Error rate (1 h)", "errorRate"]];
const FUNCTIONS_PAGE = 50;
// Set while the search box is typed in, so that the redrawn page gives it back its focus.
let searching = false;

/** Functions a page at a time, searched and sorted by kiln (`/kiln/v1/functions`). */
async function functionsList(params) {
  const state = { search: params.get("search") || "", sort: params.get("sort") || "name",
    order: params.get("order") === "desc" ? "desc" : "asc", token: params.get("token") || "" };
  const link = (changes) => {
    const next = Object.assign({}, state, { token: "" }, changes);
    return `#/functions?${new URLSearchParams(Object.entries(next).filter(([, v]) => v))}`;
  };
  const query = new URLSearchParams({ search: state.search, sort: state.sort, order: state.order, limit: FUNCTIONS_PAGE });
  if (state.token) query.set("token", state.token);
  const list = await getJson(`/kiln/v1/functions?${query}`);
  const search = el("input", { id: "function-search", type: "search", placeholder: "search by name", value: state.search, spellcheck: "false" });
  let typing;
  onLeave(() => clearTimeout(typing));
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { searching = true; window.location.replace(link({ search: search.value })); }, 300);
  });
  const header = (label, key) => {
    const sorted = key === state.sort;
    const order = sorted && state.order === "asc" ? "desc" : "asc";
    return el("a", { id: `sort-${key}`, class: sorted ? `sort ${state.order}` : "sort", href: link({ sort: key, order }),
      text: `${label}${sorted ? (state.order === "asc" ? " ▲" : " ▼") : ""}` });
  };
  const sortable = Object.fromEntries(SORTABLE.map(([label, key]) => [label, header(label, key)]));
  const rows = list.Functions.map((f) => {
    const c = f.Configuration;
    const predicted = f.PredictedMemory && f.PredictedMemory < c.MemorySize ? ` (runs at ${mb(f.PredictedMemory)})` : "";
    return row([
      el("a", { href: `#/functions/${encodeURIComponent(c.FunctionName)}`, text: c.FunctionName }),
      c.Runtime || c.PackageType,
      `${mb(c.MemorySize)}${predicted}`,
      `${c.Timeout} s`,
      c.State || "",
      f.LastInvocation ? when(f.LastInvocation) : "",
      f.ErrorRate === null || f.ErrorRate === undefined ? "" : `${(100 * f.ErrorRate).toFixed(1)} % of ${f.Invocations}`,
      f.Duration && f.Duration.Count ? `${ms(f.Duration.P50)} / ${ms(f.Duration.P99)}` : "",
      f.Instances,
      f.Sessions,
      f.Snapshot ? `${f.Snapshot.Kind} (${f.Snapshot.State})` : "",
      f.MemoryModel ? `${f.MemoryModel.Invocations} invocations${f.MemoryModel.Mature ? ", sizing" : ", learning"}` : "",
      when(c.LastModified),
      c.Description || "",
    ]);
  });
  const pager = el("div", { class: "toolbar", id: "functions-pager" });
  const shown = list.Functions.length;
  pager.append(el("span", { class: "muted", id: "functions-count", text: shown ? `${shown} shown of ${list.Total}` : `none of ${list.Total}` }));
  if (state.token) pager.append(el("a", { href: link({}), text: "« first page" }));
  if (list.NextToken) pager.append(el("a", { id: "next-page", href: link({ token: list.NextToken }), text: "next page »" }));
  render(
    el("h1", { text: "Functions" }),
    el("div", { class: "toolbar" }, search),
    table("functions-table", [sortable.Name, sortable.Runtime, sortable.Memory, "Timeout", "State", sortable["Last invocation"],
      sortable["Error rate (1 h)"], "p50 / p99 (1 h)", "Instances", "Sessions", "Snapshot", "Memory model", "Last modified", "Description"], rows),
    pager,
    await createForm());
  if (searching) {
    searching = false;
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
}

/** A new function from a zip (CreateFunction). */
async function createForm() {
  const runtimes = (await getJson("/kiln/v1/status")).node.runtimes;
  const name = el("input", { id: "create-name", required: true, pattern: "[\\w\\-]{1,64}", spellcheck: "false" });
  const runtime = el("select", { id: "create-runtime" }, runtimes.map((r) => el("option", { value: r, text: r })));
  const handler = el("input", { id: "create-handler", value: "app.handler", required: true });
  const memory = el("input", { id: "create-memory", type: "number", min: 128, max: 10240, value: 128, required: true });
  const file = el("input", { id: "create-zip", type: "file", accept: ".zip,application/zip", required: true });
  const status = el("span", { id: "create-status" });
  const form = el("form", { id: "create-form", class: "edit" },
    el("label", {}, "Name ", name), el("label", {}, "Runtime ", runtime), el("label", {}, "Handler ", handler),
    el("label", {}, "Memory (MB) ", memory), el("label", {}, "Code (zip) ", file),
    el("button", { type: "submit", id: "create-button", text: "Create" }), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.className = "muted";
    status.textContent = "creating…";
    try {
      await sendJson("POST", "/2015-03-31/functions", {
        FunctionName: name.value,
        Runtime: runtime.value,
        Handler: handler.value,
        MemorySize: Number(memory.value),
        Role: "arn:aws:iam::000000000000:role/kiln-console",
        Code: { ZipFile: await base64Of(file.files[0]) },
      });
      window.location.hash = `#/functions/${encodeURIComponent(name.value)}/test`;
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    }
  });
  return el("details", { id: "create" }, el("summary", { text: "Create a function from a zip" }), form);
}

async function instancesPage() {
  const holder = el("div");
  render(el("h1", { text: "Instances" }), holder);
  const draw = async () => {
    const node = (await getJson("/kiln/v1/status")).node;
    holder.replaceChildren(...instanceTables(node, () => true));
  };
  await draw();
  every(draw);
}

/** The object cache's last `minutes`, a second at a time: its memory against what instances
 *  lend it and the slack kept, hits against misses, admissions and evictions, how far
 *  write-back lags, and the journal's size. */
function cacheCharts(samples, span) {
  const ratio = samples.map((s) => ({ ...s, HitRatio: s.Hits + s.Misses > 0 ? (100 * s.Hits) / (s.Hits + s.Misses) : null }));
  const sum = (key) => samples.reduce((total, s) => total + (s[key] || 0), 0);
  const hits = sum("Hits");
  const reads = hits + sum("Misses");
  const last = samples[samples.length - 1] || {};
  const lent = samples.some((s) => s.Lent);
  const card = (label, value, id) => el("div", { class: "card", id }, el("div", { class: "value", text: value }), el("div", { class: "label", text: label }));
  const latest = (format) => (line) => format(last[line.key] || 0);
  return [
    el("div", { class: "cards" },
      card(`hit ratio, last ${span}`, reads ? `${((100 * hits) / reads).toFixed(1)} % of ${reads}` : "–", "cache-hit-ratio"),
      card("held / capacity", `${bytes(last.UsedBytes || 0)} / ${bytes(last.CapacityBytes || 0)}`, "cache-held"),
      card(`admitted / evicted, last ${span}`, `${sum("Admitted")} / ${sum("Evictions")}`, "cache-admissions"),
      card("write-back lag (oldest write waiting)", ms(last.LagMs || 0), "cache-lag"),
      card("journal on disk", bytes(last.JournalBytes || 0), "cache-journal")),
    el("div", { class: "charts" },
      chart("cache-chart-memory", lent ? "Capacity against what instances lend" : "Capacity and use", samples, [
        { key: "CapacityBytes", label: "capacity", cls: "line-booked" },
        { key: "UsedBytes", label: "held", cls: "line-memory" },
        { key: "DirtyBytes", label: "not yet written back", cls: "line-errors" },
        ...(lent ? [
          { key: "LendableBytes", label: "lendable", cls: "line-limit" },
          { key: "SlackBytes", label: "slack", cls: "line-warm" }] : [])],
      { format: bytes, legend: latest(bytes) }),
      chart("cache-chart-hits", "Hit ratio", ratio, [{ key: "HitRatio", label: "hits per cacheable read", cls: "line-hot" }],
        { format: (v) => `${Math.round(v)} %`, max: 100, legend: () => (reads ? `${((100 * hits) / reads).toFixed(1)} % over the ${span}` : "–") }),
      chart("cache-chart-admissions", "Admissions and evictions", samples, [
        { key: "Admitted", label: "admitted", cls: "line-invocations" },
        { key: "Evictions", label: "evicted", cls: "line-throttles" },
        { key: "WrittenBack", label: "written back", cls: "line-p50" }]),
      chart("cache-chart-lag", "Write-back lag and journal", samples, [
        { key: "LagMs", label: "oldest write waiting", cls: "line-p99" }],
      { format: ms, legend: latest(ms) }),
      chart("cache-chart-journal", "Journal size", samples, [
        { key: "JournalBytes", label: "journal on disk", cls: "line-memory" }],
      { format: bytes, legend: latest(bytes) })),
  ];
}

async function cachePage(params) {
  const minutes = WINDOWS.some(([m]) => String(m) === params.get("minutes")) ? Number(params.get("minutes")) : 10;
  const span = WINDOWS.find(([m]) => m === minutes)[1];
  const holder = el("div", { id: "cache-page" });
  render(el("h1", { text: "Object cache and memory models" }), holder);
  const draw = async () => {
    const [status, history] = await Promise.all([getJson("/kiln/v1/status"), getJson(`/kiln/v1/history?seconds=${minutes * 60}`)]);
    const cache = status.objectCache;
    const models = (status.memoryModels || []).map((m) => row([
      m.function, m.mature ? "mature" : "learning", m.invocations, m.samples,
      m.exactOrOver === null || m.exactOrOver === undefined ? "" : `${(100 * m.exactOrOver).toFixed(1)} %`,
      m.cacheBenefit === undefined ? "" : `${(100 * m.cacheBenefit).toFixed(1)} %`,
      (m.features || []).join(", ")]));
    const failing = cache ? cache.failing.map((f) => row(Object.values(f).map((v) => (typeof v === "object" ? JSON.stringify(v) : v)))) : [];
    holder.replaceChildren(
      cache
        ? el("div", { class: "cards" },
          el("div", { class: "card", id: "cache-dirty" }, el("div", { class: "value", text: bytes(cache.dirty_bytes) }), el("div", { class: "label", text: "written, not yet in the backing store" })),
          el("div", { class: "card" }, el("div", { class: "value", text: cache.failing.length }), el("div", { class: "label", text: "keys failing to write back" })))
        : el("p", { class: "muted", id: "cache-off", text: "The object cache is off (it runs in front of a remote backing store, or with --object-cache on)." }),
      cache && history.Cache
        ? el("div", { id: "cache-history" },
          el("div", { class: "toolbar", id: "cache-window" }, `The last ${span}, per second. Show the last `,
            WINDOWS.map(([m, label]) => (m === minutes
              ? el("strong", { text: label })
              : el("a", { href: `#/cache?minutes=${m}`, id: `cache-window-${m}`, text: label })))),
          ...cacheCharts(history.Cache, span))
        : "",
      failing.length ? table("cache-failing", ["Failing write-back"], failing) : "",
      el("h2", { text: "Memory models" }),
      table("models-table", ["Function", "State", "Invocations", "Samples", "Exact or over", "Cache benefit", "Features"], models));
  };
  await draw();
  every(draw);
}

/** The async queue: queued events, and the failures kept, each retried or deleted. */
async function asyncPage() {
  const holder = el("div");
  render(el("h1", { text: "Async invocations" }), holder);
  const draw = async () => {
    const events = await getJson("/kiln/v1/async");
    const act = (label, method, path) => {
      const button = el("button", { type: "button", class: "plain", text: label });
      button.addEventListener("click", async () => {
        button.disabled = true;
        try {
          await api(method, path);
          await draw();
        } catch (e) { showError(e.message); button.disabled = false; }
      });
      return button;
    };
    const pending = events.Pending.map((e) => row([e.RequestId, e.Function, e.Attempts, when(e.NotBefore)]));
    const failures = events.Failures.map((f) => {
      const path = `/kiln/v1/async/failures/${encodeURIComponent(f.RequestId)}`;
      return row([f.RequestId, f.Function, when(f.FailedAt), f.Error, el("pre", { text: f.Payload }),
        el("span", { class: "toolbar" }, act("Retry", "POST", `${path}/retry`), act("Delete", "DELETE", path))]);
    });
    holder.replaceChildren(
      el("p", { id: "async-depth", text: `${events.Depth} queued` }),
      el("h2", { text: "Queued" }),
      table("async-pending", ["Request ID", "Function", "Attempts", "Next attempt"], pending),
      el("h2", { text: "Failed every attempt" }),
      table("async-failures", ["Request ID", "Function", "Failed", "Error", "Event", ""], failures));
  };
  await draw();
  every(draw);
}

// --- Routing ----------------------------------------------------------------------------------

async function route() {
  leave();
  showError("");
  const hash = window.location.hash.replace(/^#\/?/, "") || "overview";
  const [path, query] = hash.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.view === parts[0]);
  }
  try {
    if (parts[0] === "functions" && parts[1]) await functionView(parts[1], parts[2] || "configuration", parts[3]);
    else if (parts[0] === "functions") await functionsList(params);
    else if (parts[0] === "instances") await instancesPage();
    else if (parts[0] === "cache") await cachePage(params);
    else if (parts[0] === "async") await asyncPage();
    else if (parts[0] === "objects") await objectsView(parts[1], params);
    else await overview(params);
  } catch (e) {
    if (e.status !== 401) showError(e.message);
  }
}

async function start() {
  startTheme();
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
  setCsrfToken(session.csrfToken);
  document.getElementById("top").hidden = false;
  const who = document.getElementById("who");
  who.textContent = `${session.accessKeyId} · until `;
  who.append(when(session.expiresAt * 1000));
  document.getElementById("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  await route();
}

document.addEventListener("DOMContentLoaded", () => { start().catch((e) => showError(e.message)); });
