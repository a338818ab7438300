// One function's view: its configuration (edited in place, new code uploaded), a test tab that
// invokes it, its instances, its log streamed live, and its sessions.

import {
  api, base64Of, bytes, chart, el, every, fnPath, getJson, kilnFnPath, mb, ms, onLeave, render, row,
  seconds, sendJson, showError, table, when,
} from "./dom.js";

const TABS = ["configuration", "code", "test", "metrics", "instances", "logs", "sessions"];
const MASK = "••••••••";
const KEPT_LOG_LINES = 5000;

export async function functionView(name, tab, file) {
  const fn = await getJson(fnPath(name));
  const c = fn.Configuration;
  const tabs = el("div", { class: "tabs" }, TABS.map((t) =>
    el("a", { href: `#/functions/${encodeURIComponent(name)}/${t}`, class: t === tab ? "active" : null, id: `tab-${t}`, text: t[0].toUpperCase() + t.slice(1) })));
  const body = el("div", { id: `fn-${tab}` });
  render(
    el("h1", { id: "fn-title", text: c.FunctionName }),
    el("p", { id: "fn-description", class: "muted", text: c.Description || "" }),
    tabs, body);
  const views = { configuration: configurationTab, code: codeTab, test: testTab, metrics: metricsTab, instances: instancesTab, logs: logsTab, sessions: sessionsTab };
  await (views[tab] || configurationTab)(name, fn, body, file);
}

function configurationTab(name, fn, body) {
  const c = fn.Configuration;
  const item = (label, value) => [el("dt", { text: label }), el("dd", {}, value instanceof Node ? value : String(value ?? ""))];
  const env = Object.entries((c.Environment && c.Environment.Variables) || {});
  const envRows = env.map(([key, value]) => {
    const shown = el("span", { class: "secret", text: MASK });
    const toggle = el("button", { type: "button", class: "plain", text: "Show" });
    toggle.addEventListener("click", () => {
      const hidden = toggle.textContent === "Show";
      shown.textContent = hidden ? value : MASK;
      toggle.textContent = hidden ? "Hide" : "Show";
    });
    return row([key, shown, toggle]);
  });
  body.append(...[
    el("dl", { class: "config", id: "fn-config" },
      item("Runtime", c.Runtime || c.PackageType),
      item("Handler", c.Handler),
      item("Memory", mb(c.MemorySize)),
      item("Timeout", `${c.Timeout} s`),
      item("Ephemeral storage", mb(c.EphemeralStorage && c.EphemeralStorage.Size)),
      item("State", `${c.State || ""} ${c.LastUpdateStatus ? `(last update: ${c.LastUpdateStatus})` : ""}`),
      item("Code", `${bytes(c.CodeSize)}, SHA-256 ${c.CodeSha256}`),
      (c.Layers || []).length > 0 && item("Layers", c.Layers.map((l) => `${l.Arn} (${bytes(l.CodeSize)})`).join(", ")),
      item("Revision", c.RevisionId),
      item("Last modified", when(c.LastModified)),
      item("ARN", c.FunctionArn)),
    el("h2", { text: "Environment" }),
    table("fn-env", ["Name", "Value", ""], envRows),
    envForm(name, c),
    editForm(name, c),
    kilnForm(name, c),
    urlSection(name),
    keySection(name),
    codeForm(name, fn),
  ].flat().filter(Boolean));
}

/** The function's key for the object store, fetched only when asked for and forgotten when
 *  hidden. */
function keySection(name) {
  const shown = el("div", { id: "fn-key", class: "muted", text: "Hidden: the key the function's sandbox signs object-store requests with." });
  const toggle = el("button", { type: "button", id: "fn-key-toggle", text: "Show function key" });
  toggle.addEventListener("click", async () => {
    if (toggle.textContent !== "Show function key") {
      shown.replaceChildren("Hidden.");
      shown.className = "muted";
      toggle.textContent = "Show function key";
      return;
    }
    try {
      const key = await (await api("POST", `${kilnFnPath(name)}/key`)).json();
      shown.className = "";
      shown.replaceChildren(
        el("div", {}, "Access key ID: ", el("code", { id: "fn-key-id", text: key.AccessKeyId })),
        el("div", {}, "Secret access key: ", el("code", { id: "fn-key-secret", text: key.SecretAccessKey })));
      toggle.textContent = "Hide function key";
    } catch (e) {
      shown.className = "error";
      shown.textContent = e.message;
    }
  });
  return [el("h2", { text: "Function key" }), shown, el("div", { class: "toolbar" }, toggle)];
}

/** Saves a change of the configuration (with the shown RevisionId) and shows the tab again,
 *  or says in `status` why not. */
async function saveConfiguration(name, c, change, status) {
  status.className = "muted";
  status.textContent = "saving…";
  try {
    await settled(name, status);
    await sendJson("PUT", `${fnPath(name)}/configuration`, Object.assign({ RevisionId: c.RevisionId }, change));
    await functionView(name, "configuration");
  } catch (e) {
    status.className = "error";
    status.textContent = e.message;
  }
}

/** Returns once `name` is neither being created nor updated, saying so in `status` meanwhile:
 *  Lambda refuses a change until the last one is done (409), so the page waits as deploy tools do. */
async function settled(name, status) {
  const shown = status.textContent;
  for (;;) {
    const c = await getJson(`${fnPath(name)}/configuration`);
    if (c.State !== "Pending" && c.LastUpdateStatus !== "InProgress") break;
    status.textContent = "waiting for the last change to finish…";
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  status.textContent = shown;
}

const number = (id, value, min, max) => el("input", { id, type: "number", min, max, step: 1, value, required: true });
const choice = (id, options, value) => {
  const select = el("select", { id }, options.map(([v, label]) => el("option", { value: v, text: label })));
  select.value = value;
  return select;
};

/** kiln's own settings: when the snapshot is built and how it warms up (KilnPrebake), and
 *  sessions (KilnSessions: where a request's session id comes from, and how they are placed). */
function kilnForm(name, c) {
  const prebake = c.KilnPrebake || { Mode: "deploy", WarmupInvocations: 3 };
  const mode = choice("edit-prebake", [["deploy", "at deploy"], ["lazy", "after the first start"], ["off", "off"]], prebake.Mode);
  const warmups = number("edit-warmups", prebake.WarmupInvocations, 0, 100);
  const standbys = number("edit-standbys", prebake.Standbys || 0, 0, 64);
  const sessions = c.KilnSessions;
  const on = el("input", { id: "edit-sessions", type: "checkbox" });
  on.checked = Boolean(sessions);
  const hint = el("input", { id: "edit-session-hint", placeholder: "header:X-Session", spellcheck: "false", value: sessions ? sessions.Hint : "" });
  const placement = choice("edit-placement", [["binpack", "bin-pack"], ["spread", "spread"]], sessions ? sessions.Placement : "binpack");
  const perInstance = number("edit-per-instance", sessions ? sessions.MaxSessionsPerInstance : 16, 1, 1024);
  const ttl = number("edit-session-ttl", sessions ? sessions.IdleTtlSeconds : 900, 1, 86400);
  const sessionFields = [hint, placement, perInstance, ttl];
  const follow = () => sessionFields.forEach((f) => { f.disabled = !on.checked; });
  on.addEventListener("change", follow);
  follow();
  const status = el("span", { id: "kiln-status" });
  const form = el("form", { id: "kiln-form", class: "edit" },
    el("label", {}, "Snapshot ", mode),
    el("label", {}, "Warm-up invocations ", warmups),
    el("label", {}, "Standbys at least ", standbys),
    el("label", {}, "Sessions ", on),
    el("label", {}, "Session id from ", hint),
    el("label", {}, "Placement ", placement),
    el("label", {}, "Sessions per instance ", perInstance),
    el("label", {}, "Idle session lifetime (s) ", ttl),
    el("button", { type: "submit", id: "kiln-save", text: "Save" }),
    status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const kilnPrebake = Object.assign({}, prebake, { Mode: mode.value, WarmupInvocations: Number(warmups.value), Standbys: Number(standbys.value) });
    const kilnSessions = on.checked
      ? Object.assign({}, sessions || {}, { Hint: hint.value, Placement: placement.value, MaxSessionsPerInstance: Number(perInstance.value), IdleTtlSeconds: Number(ttl.value) })
      : null;
    saveConfiguration(name, c, { KilnPrebake: kilnPrebake, KilnSessions: kilnSessions }, status);
  });
  return [el("h2", { text: "Snapshot and sessions" }), form];
}

const urlPath = (name) => `/2021-10-31/functions/${encodeURIComponent(name)}/url`;
const URL_AUTH = [["NONE", "public (no auth)"], ["AWS_IAM", "signed (AWS_IAM)"]];

/** The function's URL: made, its auth changed, or taken away. */
function urlSection(name) {
  const holder = el("div", { id: "fn-url" });
  const status = el("span", { id: "url-status" });
  const act = (label, id, method, body) => {
    const button = el("button", { type: "button", class: "plain", id, text: label });
    button.addEventListener("click", async () => {
      status.className = "muted";
      status.textContent = "saving…";
      try {
        if (body) await sendJson(method, urlPath(name), body());
        else await api(method, urlPath(name));
        await draw();
      } catch (e) {
        status.className = "error";
        status.textContent = e.message;
      }
    });
    return button;
  };
  const draw = async () => {
    // Listed rather than got: a function without a URL is no error (a 404 would be one). The
    // list has its aliases' URLs too: this page is the unqualified function's.
    const configs = (await getJson(`${urlPath(name)}s`)).FunctionUrlConfigs;
    const config = configs.find((c) => c.FunctionArn.endsWith(`:function:${name}`)) || null;
    const auth = choice("url-auth", URL_AUTH, config ? config.AuthType : "NONE");
    status.textContent = "";
    holder.replaceChildren(config
      ? el("p", {}, el("a", { href: config.FunctionUrl, id: "url-link", target: "_blank", rel: "noopener noreferrer", text: config.FunctionUrl }),
        ` · ${config.AuthType === "NONE" ? "public" : "signed requests only"}`)
      : el("p", { class: "muted", id: "url-none", text: "No URL: the function is reached through Invoke only." }),
    el("div", { class: "toolbar" }, auth,
      config ? act("Change its auth", "url-update", "PUT", () => ({ AuthType: auth.value })) : act("Give it a URL", "url-create", "POST", () => ({ AuthType: auth.value })),
      config ? act("Take the URL away", "url-delete", "DELETE") : null,
      status),
    config ? corsForm(config.Cors || {}, act) : "");
  };
  draw().catch((e) => { status.className = "error"; status.textContent = e.message; holder.append(status); });
  return [el("h2", { text: "Function URL" }), holder];
}

/** A function URL's CORS (UpdateFunctionUrlConfig's `Cors`): lists as comma-separated
 *  fields, an empty field leaving that setting out; the URL answers preflights with them. */
function corsForm(cors, act) {
  const list = (id, key, placeholder) => el("input", { id, type: "text", value: (cors[key] || []).join(", "), placeholder, size: 48 });
  const origins = list("cors-origins", "AllowOrigins", "https://example.com, *");
  const methods = list("cors-methods", "AllowMethods", "GET, POST, *");
  const headers = list("cors-headers", "AllowHeaders", "content-type, x-custom");
  const expose = list("cors-expose", "ExposeHeaders", "x-request-id");
  const maxAge = el("input", { id: "cors-max-age", type: "number", min: 0, max: 86400, step: 1, value: cors.MaxAge ?? "" });
  const credentials = el("input", { id: "cors-credentials", type: "checkbox" });
  credentials.checked = Boolean(cors.AllowCredentials);
  const split = (input) => input.value.split(",").map((v) => v.trim()).filter(Boolean);
  const body = () => {
    const value = {};
    for (const [key, input] of [["AllowOrigins", origins], ["AllowMethods", methods], ["AllowHeaders", headers], ["ExposeHeaders", expose]]) {
      const items = split(input);
      if (items.length) value[key] = items;
    }
    if (maxAge.value !== "") value.MaxAge = Number(maxAge.value);
    if (credentials.checked) value.AllowCredentials = true;
    return { Cors: value };
  };
  return el("div", { id: "url-cors" },
    el("h3", { text: "CORS" }),
    el("div", { class: "form-grid" },
      el("label", {}, "Allowed origins ", origins),
      el("label", {}, "Allowed methods ", methods),
      el("label", {}, "Allowed headers ", headers),
      el("label", {}, "Exposed headers ", expose),
      el("label", {}, "Max age (s) ", maxAge),
      el("label", {}, credentials, " Allow credentials")),
    el("div", { class: "toolbar" }, act("Save CORS", "cors-save", "PUT", body)));
}

/** KEY=VALUE lines into Lambda's `Variables`, or an error naming the first bad line. */
function parseEnvironment(text) {
  const variables = {};
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  for (const [i, line] of lines.entries()) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`line ${i + 1} is not KEY=VALUE: ${line}`);
    variables[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return variables;
}

/** The environment, edited as KEY=VALUE lines: shown (unmasked) only once asked for. */
function envForm(name, c) {
  const open = el("button", { type: "button", class: "plain", id: "env-edit", text: "Edit the environment" });
  const holder = el("div", { id: "env-editor" });
  open.addEventListener("click", () => {
    open.hidden = true;
    const current = Object.entries((c.Environment && c.Environment.Variables) || {});
    const text = el("textarea", { id: "env-text", spellcheck: "false" });
    text.value = current.map(([k, v]) => `${k}=${v}`).join("\n");
    const status = el("span", { id: "env-status" });
    const save = el("button", { type: "button", id: "env-save", text: "Save the environment" });
    save.addEventListener("click", async () => {
      let variables;
      try { variables = parseEnvironment(text.value); } catch (e) { status.className = "error"; status.textContent = e.message; return; }
      status.className = "muted";
      status.textContent = "saving…";
      try {
        await settled(name, status);
        await sendJson("PUT", `${fnPath(name)}/configuration`, { Environment: { Variables: variables }, RevisionId: c.RevisionId });
        await functionView(name, "configuration");
      } catch (e) {
        status.className = "error";
        status.textContent = e.message;
      }
    });
    holder.replaceChildren(text, el("div", { class: "toolbar" }, save, status));
  });
  return [el("div", { class: "toolbar" }, open), holder];
}

/** Memory, timeout and description, changed with UpdateFunctionConfiguration. */
function editForm(name, c) {
  const memory = el("input", { id: "edit-memory", type: "number", min: 128, max: 10240, step: 1, value: c.MemorySize, required: true });
  const timeout = el("input", { id: "edit-timeout", type: "number", min: 1, max: 900, value: c.Timeout, required: true });
  const description = el("input", { id: "edit-description", maxlength: 256, value: c.Description || "" });
  const status = el("span", { id: "edit-status" });
  const form = el("form", { id: "edit-form", class: "edit" },
    el("label", {}, "Memory (MB) ", memory),
    el("label", {}, "Timeout (s) ", timeout),
    el("label", {}, "Description ", description),
    el("button", { type: "submit", id: "edit-save", text: "Save" }),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.className = "muted";
    status.textContent = "saving…";
    try {
      await settled(name, status);
      await sendJson("PUT", `${fnPath(name)}/configuration`, {
        MemorySize: Number(memory.value),
        Timeout: Number(timeout.value),
        Description: description.value,
        RevisionId: c.RevisionId,
      });
      await functionView(name, "configuration");
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    }
  });
  return [el("h2", { text: "Edit" }), form];
}

/** The code: download the zip, or upload a new one (UpdateFunctionCode). */
function codeForm(name, fn) {
  const file = el("input", { id: "code-file", type: "file", accept: ".zip,application/zip", required: true });
  const status = el("span", { id: "code-status" });
  const form = el("form", { id: "code-form", class: "edit" }, file, el("button", { type: "submit", text: "Upload new code" }), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!file.files.length) return;
    status.className = "muted";
    status.textContent = "uploading…";
    try {
      await settled(name, status);
      await sendJson("PUT", `${fnPath(name)}/code`, { ZipFile: await base64Of(file.files[0]) });
      await functionView(name, "configuration");
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    }
  });
  const download = fn.Code && fn.Code.Location
    ? el("p", {}, el("a", { href: fn.Code.Location, id: "code-download", text: "Download the code (zip)" }))
    : null;
  return [el("h2", { text: "Code" }), download, form];
}

/** The package's files; one of them shown read-only (`#/functions/NAME/code/PATH`). */
async function codeTab(name, fn, body, file) {
  const files = (await getJson(`${kilnFnPath(name)}/files`)).Files;
  const link = (f) => el("a", { href: `#/functions/${encodeURIComponent(name)}/code/${encodeURIComponent(f.Path)}`, text: f.Path });
  body.append(table("code-files", ["File", "Size"], files.map((f) => row([link(f), bytes(f.Size)]))));
  if (!file) return;
  const shown = el("pre", { id: "code-text" });
  body.append(el("h2", { id: "code-file", text: file }), shown);
  try {
    const response = await api("GET", `${kilnFnPath(name)}/files/${file.split("/").map(encodeURIComponent).join("/")}`);
    shown.textContent = await response.text();
  } catch (e) {
    shown.className = "error";
    shown.textContent = e.message;
  }
}

/** Test events saved in this browser for a function, by name. */
/** Test events kept in this browser (private, as the Lambda console's private events). */
function savedEvents(name) {
  const key = `kiln.testEvents.${name}`;
  const read = () => { try { return JSON.parse(localStorage.getItem(key) || "{}"); } catch (_) { return {}; } };
  return {
    all: read,
    save: (event, text) => localStorage.setItem(key, JSON.stringify(Object.assign(read(), { [event]: text }))),
    remove: (event) => { const all = read(); delete all[event]; localStorage.setItem(key, JSON.stringify(all)); },
  };
}

function testTab(name, fn, body) {
  const payload = el("textarea", { id: "invoke-payload", spellcheck: "false" });
  payload.value = "{}";
  const saved = savedEvents(name);
  const sharedPath = (event) => `${kilnFnPath(name)}/test-events${event ? `/${encodeURIComponent(event)}` : ""}`;
  // The function's shareable events, as kiln last listed them: every viewer sees them.
  let shared = {};
  const choice = el("select", { id: "saved-events" });
  const fill = (selected) => {
    const options = (entries, kind) => entries.sort().map((n) => el("option", { value: `${kind}:${n}`, text: n }));
    choice.replaceChildren(el("option", { value: "", text: "saved events…" }),
      el("optgroup", { label: "Private (this browser)", id: "private-events" }, options(Object.keys(saved.all()), "private")),
      el("optgroup", { label: "Shareable (every viewer)", id: "shared-events" }, options(Object.keys(shared), "shared")));
    choice.value = selected || "";
    remove.disabled = !choice.value;
  };
  const loadShared = async (selected) => {
    const listed = await getJson(sharedPath());
    shared = Object.fromEntries(listed.TestEvents.map((e) => [e.Name, e.Event]));
    fill(selected);
  };
  const selected = () => {
    const [kind, ...rest] = choice.value.split(":");
    return { kind, event: rest.join(":") };
  };
  choice.addEventListener("change", () => {
    remove.disabled = !choice.value;
    if (!choice.value) return;
    const { kind, event } = selected();
    payload.value = kind === "shared" ? shared[event] : saved.all()[event];
  });
  const eventName = el("input", { id: "event-name", placeholder: "name", maxlength: 25 });
  const shareable = el("input", { id: "event-shareable", type: "checkbox" });
  const save = el("button", { type: "button", class: "plain", id: "save-event", text: "Save event" });
  const remove = el("button", { type: "button", class: "plain", id: "delete-event", text: "Delete event", disabled: true });
  const eventStatus = el("span", { id: "event-status" });
  const failed = (e) => { eventStatus.className = "error"; eventStatus.textContent = e.message; };
  save.addEventListener("click", async () => {
    eventStatus.textContent = "";
    if (!eventName.value) return;
    try { JSON.parse(payload.value); } catch (e) { failed(new Error(`The event is not JSON: ${e.message}`)); return; }
    if (!shareable.checked) {
      saved.save(eventName.value, payload.value);
      fill(`private:${eventName.value}`);
      return;
    }
    try {
      await api("PUT", sharedPath(eventName.value), { body: payload.value, headers: { "Content-Type": "application/json" } });
      await loadShared(`shared:${eventName.value}`);
      eventStatus.className = "ok";
      eventStatus.textContent = "saved for every viewer";
    } catch (e) { failed(e); }
  });
  remove.addEventListener("click", async () => {
    eventStatus.textContent = "";
    const { kind, event } = selected();
    if (!event) return;
    try {
      if (kind === "shared") {
        await api("DELETE", sharedPath(event));
        await loadShared();
      } else {
        saved.remove(event);
        fill();
      }
    } catch (e) { failed(e); }
  });
  fill();
  loadShared().catch(failed);
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
    el("h2", { text: "Test event (JSON)" }),
    el("div", { class: "toolbar" }, choice, remove, eventName, el("label", {}, shareable, " shareable"), save, eventStatus),
    payload,
    el("div", { class: "toolbar" }, button),
    status,
    el("h2", { text: "Result" }), result,
    el("h2", { text: "Log (START, END and REPORT)" }), log);
}

/** The function's last hour a minute at a time: invocations and errors, p50 and p99, cold
 *  starts by path, Max Memory Used against MemorySize and the predicted limit, and how its
 *  durations spread over the histogram's buckets. */
async function metricsTab(name, fn, body) {
  const booked = fn.Configuration.MemorySize;
  const draw = async () => {
    const hour = await getJson(`${kilnFnPath(name)}/history`);
    // MemorySize is drawn where the function ran, so that the memory chart's scale is its own.
    const memory = hour.Samples.map((s) => ({ ...s, Booked: s.Invocations > 0 ? booked : null }));
    const peak = (key) => Math.max(0, ...hour.Samples.map((s) => s[key] || 0));
    const d = hour.Duration;
    const card = (label, value, id) => el("div", { class: "card", id }, el("div", { class: "value" }, value), el("div", { class: "label", text: label }));
    const rate = hour.ErrorRate === null ? "–" : `${(100 * hour.ErrorRate).toFixed(1)} %`;
    body.replaceChildren(
      el("div", { class: "cards" },
        card("invocations, last hour", hour.Invocations, "fn-invocations"),
        card("function errors, last hour", `${hour.Errors} (${rate})`, "fn-errors"),
        card("duration p50, last hour", ms(d.P50), "fn-p50"),
        card("duration p99, last hour", ms(d.P99), "fn-p99"),
        card("last invocation", hour.LastInvocation ? when(hour.LastInvocation) : "–", "fn-last")),
      el("h2", { text: "The last hour, per minute" }),
      el("div", { class: "charts" },
        chart("fn-chart-invocations", "Invocations", hour.Samples, [
          { key: "Invocations", label: "invocations", cls: "line-invocations" },
          { key: "Errors", label: "function errors", cls: "line-errors" }], { unit: "/min" }),
        chart("fn-chart-duration", "Duration", hour.Samples, [
          { key: "P50", label: "p50", cls: "line-p50" },
          { key: "P99", label: "p99", cls: "line-p99" }],
        { format: ms, legend: (line) => `${ms(d[line.key])} over the hour` }),
        chart("fn-chart-starts", "Cold starts by path", hour.Samples, [
          { key: "Coldest", label: "coldest", cls: "line-coldest" },
          { key: "Warm", label: "warm", cls: "line-warm" },
          { key: "Hot", label: "hot", cls: "line-hot" }], { unit: "/min" }),
        chart("fn-chart-memory", "Max Memory Used", memory, [
          { key: "MaxMemoryUsed", label: "max memory used", cls: "line-memory" },
          { key: "PredictedLimit", label: "predicted limit", cls: "line-limit" },
          { key: "Booked", label: "MemorySize", cls: "line-booked" }],
        { format: mb, legend: (line) => line.key === "Booked" ? mb(booked) : peak(line.key) ? `up to ${mb(peak(line.key))}` : "–" }),
        accuracyChart(hour.Samples)),
      el("h2", { text: "Durations in the last hour" }),
      histogram(hour.Buckets));
  };
  await draw();
  every(draw);
}

/** The memory model's share of exact-or-over predictions a minute at a time, split by
 *  whether the model sized the instances then (mature) or was still learning. */
function accuracyChart(samples) {
  const percent = (v) => `${Math.round(v)} %`;
  const points = samples.map((s) => {
    const value = s.ModelAccuracy === null || s.ModelAccuracy === undefined ? null : 100 * s.ModelAccuracy;
    return { ...s, Sizing: s.ModelSizing ? value : null, Learning: s.ModelSizing === false ? value : null };
  });
  const last = [...samples].reverse().find((s) => s.ModelAccuracy !== null && s.ModelAccuracy !== undefined);
  const note = last
    ? `${percent(100 * last.ModelAccuracy)} of its recent predictions exact or over, ${last.ModelSizing ? "sizing instances" : "still learning"}`
    : "no memory model has seen an invocation in the last hour";
  return el("div", { id: "fn-model-accuracy" },
    chart("fn-chart-accuracy", "Memory model accuracy", points, [
      { key: "Sizing", label: "sizing", cls: "line-hot" },
      { key: "Learning", label: "learning", cls: "line-warm" }],
    { format: percent, max: 100, legend: (line) => {
      const latest = [...points].reverse().find((p) => p[line.key] !== null);
      return latest ? `${percent(latest[line.key])} at ${new Date(latest.Time * 1000).toLocaleTimeString()}` : "–";
    } }),
    el("p", { class: "muted", id: "fn-model-note", text: note }));
}

/** Bars of the buckets from the first that counted an invocation to the last. */
function histogram(buckets) {
  const first = buckets.findIndex((b) => b.Count > 0);
  if (first < 0) return el("p", { class: "muted", id: "fn-histogram", text: "No invocations in the last hour." });
  const last = buckets.length - 1 - [...buckets].reverse().findIndex((b) => b.Count > 0);
  const most = Math.max(...buckets.map((b) => b.Count));
  const rows = buckets.slice(first, last + 1).map((b, i) => {
    const lower = first + i > 0 ? buckets[first + i - 1].Le : 0;
    const bar = el("span", { class: "fill" });
    bar.style.width = `${(100 * b.Count) / most}%`;
    return el("div", { class: "bucket" },
      el("span", { class: "range", text: b.Le === null ? `over ${ms(lower)}` : `${ms(lower)} – ${ms(b.Le)}` }),
      el("span", { class: "track" }, bar),
      el("span", { class: "count", text: b.Count }));
  });
  return el("div", { class: "histogram", id: "fn-histogram" }, rows);
}

async function instancesTab(name, fn, body) {
  const draw = async () => {
    const node = (await getJson("/kiln/v1/status")).node;
    body.replaceChildren(...instanceTables(node, (x) => x.function === name));
  };
  await draw();
  every(draw);
}

export function instanceTables(node, keep) {
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

/** The log's tail, then every line as kiln writes it (the logs endpoint's `follow`). */
async function logsTab(name, fn, body) {
  const filter = el("input", { id: "logs-filter", type: "search", placeholder: "show lines containing…" });
  const state = el("span", { id: "logs-state", class: "muted", text: "connecting…" });
  const text = el("pre", { id: "logs-text" });
  let lines = [];
  const show = () => {
    const needle = filter.value;
    text.textContent = lines.filter((l) => !needle || l.includes(needle)).join("\n");
  };
  filter.addEventListener("input", show);
  body.append(el("div", { class: "toolbar" }, filter, state), text);
  const stop = new AbortController();
  onLeave(() => stop.abort());
  const response = await api("GET", `${kilnFnPath(name)}/logs?follow=true&bytes=65536`, { signal: stop.signal });
  state.textContent = "live";
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  const read = async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      const complete = pending.split("\n");
      pending = complete.pop();
      lines = lines.concat(complete).slice(-KEPT_LOG_LINES);
      show();
    }
    state.textContent = "ended";
  };
  // The stream outlives this call: the view is shown while it reads.
  read().catch((e) => { if (e.name !== "AbortError") state.textContent = `stopped: ${e.message}`; });
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
  every(draw);
}
