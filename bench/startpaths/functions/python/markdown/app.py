"""Markdown: renders the ~28 KB document shipped in the package with Python-Markdown.

The library is imported at init; the document is read and rendered on every invocation (as in
the thesis' showdown function, which reads it from local disk to keep the network out).
"""

import os
import time

import markdown

DOCUMENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "document.md")


def handler(event, context):
    if isinstance(event, dict) and event.get("hold_ms"):
        time.sleep(event["hold_ms"] / 1000)
    with open(DOCUMENT, encoding="utf-8") as f:
        html = markdown.markdown(f.read(), extensions=["tables", "fenced_code"])
    return {"html_bytes": len(html)}
