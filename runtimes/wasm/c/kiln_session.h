/*
 * kiln's session state for C wasm functions (clang --target=wasm32-wasi): the state of the
 * request's session, through the host calls of the `kiln` import module (docs/sessions.md, "wasm").
 *
 * Results: >= 0 is a length (the data is copied only when it fits the buffer: call again with a
 * larger one), or 0 for success; negative is one of the KILN_SESSION_* codes.
 */
#ifndef KILN_SESSION_H
#define KILN_SESSION_H

#include <stddef.h>
#include <stdint.h>

#define KILN_SESSION_NOT_FOUND (-1)      /* the key has no value */
#define KILN_SESSION_NO_SESSION (-2)     /* the request has no session */
#define KILN_SESSION_INVALID (-3)        /* a bad key or JSON value, or a misused transaction */
#define KILN_SESSION_LIMIT_EXCEEDED (-4) /* over MaxValueBytes or MaxSessionBytes; nothing changed */
#define KILN_SESSION_ENDED (-5)          /* the session ended while the request ran */

#define KILN_IMPORT(name) __attribute__((import_module("kiln"), import_name(name)))

KILN_IMPORT("session_id") int64_t kiln_session_id(char *buf, size_t cap);
KILN_IMPORT("session_get")
int64_t kiln_session_get(const char *key, size_t key_len, void *buf, size_t cap);
/* kind: 0 bytes, 1 JSON (checked). */
KILN_IMPORT("session_put")
int32_t kiln_session_put(const char *key, size_t key_len, const void *value, size_t value_len,
                         uint32_t kind);
KILN_IMPORT("session_delete") int32_t kiln_session_delete(const char *key, size_t key_len);
/* The keys, sorted, each followed by a NUL byte. */
KILN_IMPORT("session_keys") int64_t kiln_session_keys(char *buf, size_t cap);
/* The writes between begin and end(1) stand together; end(0) undoes them. */
KILN_IMPORT("session_begin") int32_t kiln_session_begin(void);
KILN_IMPORT("session_end") int32_t kiln_session_end(uint32_t commit);

#undef KILN_IMPORT
#endif
