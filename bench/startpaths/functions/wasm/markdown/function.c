/* Markdown for kiln's wasm runtime: renders document.md from the function's package to HTML
 * with cmark-gfm (GitHub's CommonMark library, built from source for wasm32-wasi), as the Node
 * function does with showdown and the Python one with Python-Markdown.
 *
 * `kiln_init` is the pre-initialisation export (the wasm hot path): it warms the renderer up on
 * a small built-in document, so that the allocator's heap and cmark's state are part of the
 * snapshot. It cannot read the package: pre-initialisation sees no files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmark-gfm.h"

static const char WARMUP[] =
    "# Warm-up\n\nSome *emphasis*, **strong**, `code` and a [link](https://example.com).\n\n"
    "- one\n- two\n\n> quoted\n\n```\nfenced\n```\n";
static int initialised;

__attribute__((export_name("kiln_init"))) void kiln_init(void) {
    free(cmark_markdown_to_html(WARMUP, sizeof WARMUP - 1, CMARK_OPT_DEFAULT));
    initialised = 1;
}

int main(void) {
    char buf[4096];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    FILE *f = fopen("/var/task/document.md", "rb");
    if (!f) {
        puts("{\"errorType\": \"DocumentMissing\", \"errorMessage\": \"cannot open /var/task/document.md\"}");
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *doc = malloc(size);
    if (fread(doc, 1, size, f) != (size_t)size) {
        puts("{\"errorType\": \"DocumentUnreadable\", \"errorMessage\": \"short read\"}");
        return 1;
    }
    fclose(f);
    char *html = cmark_markdown_to_html(doc, size, CMARK_OPT_DEFAULT);
    printf("{\"statusCode\": 200, \"html_bytes\": %zu, \"preinitialised\": %d}", strlen(html), initialised);
    return 0;
}
