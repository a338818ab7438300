// The object store: its buckets; a bucket's keys one prefix at a time (folders split at `/`),
// paged by the store's continuation tokens; an object's metadata and checksums, its download,
// a presigned link and its deletion; uploads with a progress bar, in parts for large files.
// Keys are user data: they reach the page as text, and the API in a query parameter.

import { api, base64Bytes, bytes, el, getJson, render, row, send, sendJson, showError, table, when } from "./dom.js";

// Files above this go up in parts of this size (S3's smallest part is 5 MiB).
const PART_BYTES = 8 * 1024 * 1024;
const PAGE_KEYS = 50;
const LINK_LIFETIMES = [["1 hour", 3600], ["1 day", 86400], ["7 days", 604800]];

const bucketApi = (bucket) => `/kiln/v1/buckets/${encodeURIComponent(bucket)}`;
const objectApi = (bucket, key, what = "") => `${bucketApi(bucket)}/object${what}?${new URLSearchParams({ key })}`;

/** The view's URL: a bucket's listing under `prefix`, or one object's page (`key`). */
function hash(bucket, params) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
  return `#/objects/${encodeURIComponent(bucket)}${query.toString() ? `?${query}` : ""}`;
}

export async function objectsView(bucket, params) {
  if (!bucket) return bucketsPage();
  if (params.has("key")) return objectPage(bucket, params.get("key"));
  return bucketPage(bucket, params.get("prefix") || "", params.get("token"));
}

async function bucketsPage() {
  const buckets = (await getJson("/kiln/v1/buckets")).Buckets;
  const rows = buckets.map((b) => {
    const remove = el("button", { type: "button", class: "plain", text: "Delete" });
    remove.addEventListener("click", async () => {
      remove.disabled = true;
      try {
        await api("DELETE", bucketApi(b.Name));
        await bucketsPage();
      } catch (e) { showError(e.message); remove.disabled = false; }
    });
    return row([el("a", { href: hash(b.Name, {}), text: b.Name }), when(b.CreationDate), remove]);
  });
  const name = el("input", { id: "bucket-name", required: true, spellcheck: "false", placeholder: "new-bucket", pattern: "[a-z0-9][a-z0-9.\\-]{1,61}[a-z0-9]" });
  const status = el("span", { id: "bucket-status" });
  const form = el("form", { id: "bucket-form", class: "edit" },
    el("label", {}, "Bucket name ", name), el("button", { type: "submit", id: "bucket-create", text: "Create bucket" }), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("PUT", bucketApi(name.value));
      window.location.hash = hash(name.value, {});
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    }
  });
  render(
    el("h1", { text: "Object store" }),
    table("buckets-table", ["Bucket", "Created", ""], rows),
    el("h2", { text: "New bucket" }),
    form);
}

/** The bucket, then each folder of `prefix`, as links up the tree. */
function breadcrumb(bucket, prefix) {
  const trail = el("nav", { id: "object-path", class: "crumbs" }, el("a", { href: "#/objects", text: "Buckets" }), " / ",
    el("a", { href: hash(bucket, {}), text: bucket }));
  let at = 0;
  while (at < prefix.length) {
    const end = prefix.indexOf("/", at);
    const upTo = end < 0 ? prefix.length : end + 1;
    trail.append(" / ", el("a", { href: hash(bucket, { prefix: prefix.slice(0, upTo) }), text: prefix.slice(at, end < 0 ? upTo : end) || "(empty)" }));
    at = upTo;
  }
  return trail;
}

async function bucketPage(bucket, prefix, token) {
  const listing = el("div", { id: "listing" });
  const draw = async () => listing.replaceChildren(...await keysUnder(bucket, prefix, token, draw));
  await draw();
  render(el("h1", { text: bucket }), breadcrumb(bucket, prefix), uploadForm(bucket, prefix, draw), listing);
}

/** A page of what is under `prefix`: folders, then objects (each downloaded or deleted). */
async function keysUnder(bucket, prefix, token, redraw) {
  const query = new URLSearchParams({ prefix, delimiter: "/", limit: String(PAGE_KEYS) });
  if (token) query.set("token", token);
  const listing = await getJson(`${bucketApi(bucket)}/objects?${query}`);
  // A name shown relative to the folder; a key equal to the folder's name shown whole.
  const shortName = (key) => key.slice(prefix.length) || key;
  const folders = listing.Prefixes.map((p) => row([
    el("a", { href: hash(bucket, { prefix: p }), class: "folder", text: shortName(p) }), "folder", "", "", ""]));
  const objects = listing.Objects.map((o) => {
    const remove = el("button", { type: "button", class: "plain", text: "Delete" });
    remove.addEventListener("click", async () => {
      remove.disabled = true;
      try {
        await api("DELETE", objectApi(bucket, o.Key));
        await redraw();
      } catch (e) { showError(e.message); remove.disabled = false; }
    });
    return row([
      el("a", { href: hash(bucket, { key: o.Key }), text: shortName(o.Key) }),
      bytes(o.Size),
      when(o.LastModified),
      el("a", { href: objectApi(bucket, o.Key), download: "", text: "Download" }),
      remove,
    ]);
  });
  const pager = el("div", { class: "toolbar" });
  if (token) pager.append(el("a", { href: hash(bucket, { prefix }), text: "« first page" }));
  if (listing.NextToken) pager.append(el("a", { id: "objects-next", href: hash(bucket, { prefix, token: listing.NextToken }), text: "next page »" }));
  return [table("objects-table", ["Name", "Size", "Last modified", "", ""], [...folders, ...objects]), pager];
}

/** The SHA-256 of `data` in base64, for the store to check what arrived; null where the
 *  browser keeps `crypto.subtle` from the page (plain HTTP to a host other than localhost). */
async function sha256(data) {
  if (!window.crypto || !window.crypto.subtle) return null;
  return base64Bytes(new Uint8Array(await window.crypto.subtle.digest("SHA-256", data)));
}

async function checked(data, type) {
  const digest = await sha256(data);
  const headers = { "Content-Type": type };
  if (digest) headers["x-amz-checksum-sha256"] = digest;
  return headers;
}

/** Writes `file` as `key`: in one request, or in parts past PART_BYTES (an upload that fails
 *  is aborted, so its parts do not linger). `progress(bytesSent)` follows it. */
async function uploadFile(bucket, key, file, progress) {
  const type = file.type || "application/octet-stream";
  if (file.size <= PART_BYTES) {
    const data = await file.arrayBuffer();
    return send("PUT", objectApi(bucket, key), data, { headers: await checked(data, type), onProgress: progress });
  }
  const uploads = `${bucketApi(bucket)}/uploads`;
  const keyQuery = new URLSearchParams({ key });
  const { UploadId } = await (await sendJson("POST", `${uploads}?${keyQuery}`, { ContentType: type })).json();
  const upload = `${uploads}/${encodeURIComponent(UploadId)}`;
  try {
    const parts = [];
    for (let offset = 0, number = 1; offset < file.size; offset += PART_BYTES, number++) {
      const data = await file.slice(offset, offset + PART_BYTES).arrayBuffer();
      const done = offset;
      parts.push(await send("PUT", `${upload}/${number}?${keyQuery}`, data, {
        headers: await checked(data, "application/octet-stream"),
        onProgress: (sent) => progress(done + sent),
      }));
    }
    return (await sendJson("POST", `${upload}?${keyQuery}`, { Parts: parts })).json();
  } catch (e) {
    await api("DELETE", `${upload}?${keyQuery}`).catch(() => {});
    throw e;
  }
}

function uploadForm(bucket, prefix, done) {
  const files = el("input", { id: "upload-file", type: "file", multiple: true, required: true });
  const bar = el("progress", { id: "upload-progress", max: 100, value: 0 });
  bar.hidden = true;
  const status = el("span", { id: "upload-status" });
  const button = el("button", { type: "submit", id: "upload-button", text: "Upload" });
  const form = el("form", { id: "upload-form", class: "edit" },
    el("label", {}, `Upload to ${prefix || "the bucket's top"} `, files), button, bar, status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = [...files.files];
    if (!chosen.length) return;
    const total = chosen.reduce((n, f) => n + f.size, 0);
    let finished = 0;
    button.disabled = true;
    bar.hidden = false;
    status.className = "muted";
    const show = (sent) => {
      bar.value = total ? (100 * (finished + sent)) / total : 100;
      status.textContent = `${bytes(finished + sent)} of ${bytes(total)}`;
    };
    try {
      for (const file of chosen) {
        await uploadFile(bucket, prefix + file.name, file, show);
        finished += file.size;
        show(0);
      }
      status.className = "ok";
      status.textContent = `uploaded ${chosen.length} file${chosen.length > 1 ? "s" : ""}, ${bytes(total)}`;
      await done();
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
      button.disabled = false;
    }
  });
  return form;
}

async function objectPage(bucket, key) {
  const details = await getJson(objectApi(bucket, key, "/details"));
  const item = (label, value) => (value === null || value === undefined || value === ""
    ? [] : [el("dt", { text: label }), el("dd", {}, value instanceof Node ? value : String(value))]);
  const folder = key.includes("/") ? key.slice(0, key.lastIndexOf("/") + 1) : "";
  render(
    el("h1", { id: "object-key", text: key }),
    breadcrumb(bucket, folder),
    el("dl", { class: "config", id: "object-details" },
      item("Bucket", bucket),
      item("Key", key),
      item("Size", `${bytes(details.Size)} (${details.Size} bytes)`),
      item("Content type", details.ContentType),
      item("ETag", details.ETag),
      item("Last modified", details.LastModified && when(details.LastModified)),
      item("Storage class", details.StorageClass || "STANDARD"),
      item("Cache-Control", details.CacheControl),
      item("Content-Encoding", details.ContentEncoding),
      item("Content-Disposition", details.ContentDisposition),
      item("Content-Language", details.ContentLanguage),
      item("Checksum type", details.ChecksumType)),
    el("h2", { text: "Checksums" }),
    table("object-checksums", ["Algorithm", "Value (base64)"], Object.entries(details.Checksums).map(([a, v]) => row([a, v]))),
    el("h2", { text: "Metadata" }),
    table("object-metadata", ["Name", "Value"], Object.entries(details.Metadata).map(([k, v]) => row([k, v]))),
    el("div", { class: "toolbar" }, el("a", { id: "object-download", href: objectApi(bucket, key), download: "", text: "Download" })),
    ...linkForm(bucket, key),
    ...deleteForm(bucket, key, folder));
}

/** A presigned GET link, made on request, for as long as chosen. */
function linkForm(bucket, key) {
  const lifetime = el("select", { id: "link-lifetime" }, LINK_LIFETIMES.map(([label, s]) => el("option", { value: s, text: label })));
  const button = el("button", { type: "button", class: "plain", id: "link-button", text: "Make a presigned link" });
  const url = el("input", { id: "link-url", readonly: true, class: "wide" });
  url.hidden = true;
  const status = el("span", { id: "link-status", class: "muted" });
  button.addEventListener("click", async () => {
    try {
      const link = await (await api("POST", `${objectApi(bucket, key, "/link")}&expires=${lifetime.value}`)).json();
      url.value = link.Url;
      url.hidden = false;
      url.select();
      status.textContent = "valid until ";
      status.append(when(link.Expires));
    } catch (e) {
      status.className = "error";
      status.textContent = e.message;
    }
  });
  return [el("h2", { text: "Share" }), el("div", { class: "toolbar" }, lifetime, button, status), url];
}

/** Deleting asks once more, on the page. */
function deleteForm(bucket, key, folder) {
  const ask = el("button", { type: "button", class: "plain", id: "object-delete", text: "Delete" });
  const sure = el("button", { type: "button", id: "object-delete-confirm", text: "Delete it for good" });
  const question = el("span", { class: "toolbar" }, el("span", { text: "This object cannot be brought back." }), sure);
  question.hidden = true;
  ask.addEventListener("click", () => { question.hidden = false; ask.hidden = true; });
  sure.addEventListener("click", async () => {
    sure.disabled = true;
    try {
      await api("DELETE", objectApi(bucket, key));
      window.location.hash = hash(bucket, { prefix: folder });
    } catch (e) { showError(e.message); sure.disabled = false; }
  });
  return [el("h2", { text: "Delete" }), el("div", { class: "toolbar" }, ask, question)];
}
