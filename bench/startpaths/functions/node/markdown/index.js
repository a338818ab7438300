'use strict';
// Markdown: renders the ~28 KB document shipped in the package with showdown, the thesis'
// library. showdown is loaded at init; the document is read and rendered on every invocation.
const fs = require('fs');
const path = require('path');
const showdown = require('showdown');

const DOCUMENT = path.join(__dirname, 'document.md');
const converter = new showdown.Converter({ tables: true, ghCodeBlocks: true });

exports.handler = async (event) => {
  if (event && event.hold_ms) await new Promise((r) => setTimeout(r, event.hold_ms));
  const html = converter.makeHtml(fs.readFileSync(DOCUMENT, 'utf8'));
  return { html_bytes: html.length };
};
