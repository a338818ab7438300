// The XFaaS workloads (RO, RMW, RMW_Linear) for kiln's wasm runtime, state in the kiln session
// (runtimes/wasm/c/kiln_session.h). WASI preview 1 has no sockets, so there is no Redis or
// object-store variant. The event is the one bench/sessions/xfaas.py sends the other languages:
// {"backend": "session", "workload": W, "size": S, "client": C, "session": …}; the function
// times its own state accesses (clock_gettime, itself a host call of ~0.1 µs, inside the
// timed region) and answers them as get_ns / put_ns / op_ns. "seed" stores one value of `size`
// bytes (the start-up benchmark's sessions with state to restore).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln_session.h"

static char event[4096];
static unsigned char value[1 << 20];

// The pre-initialised snapshot (kiln's hot path) has the buffers' pages already touched.
__attribute__((export_name("kiln_init"))) void kiln_init(void) {
    memset(value, 'v', sizeof value);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// The string value of "name" in the event (no escapes: the benchmark sends none).
static int field(const char *name, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", name);
    const char *at = strstr(event, pattern);
    if (!at) return 0;
    at = strchr(at + strlen(pattern), ':');
    if (!at) return 0;
    at++;
    while (*at == ' ') at++;
    size_t n = 0;
    if (*at == '"') {
        at++;
        while (at[n] && at[n] != '"' && n + 1 < cap) n++;
    } else {
        while (at[n] && at[n] != ',' && at[n] != '}' && n + 1 < cap) n++;
    }
    memcpy(out, at, n);
    out[n] = 0;
    return 1;
}

static uint64_t count_of(int64_t len) {
    uint64_t count = 0;
    if (len >= 8) memcpy(&count, value, 8);
    return count;
}

static void value_of(uint64_t count) { memcpy(value, &count, 8); }

// A fresh instance's first write to a page of its memory is a copy-on-write fault (about 2 µs
// per 4 KiB page here): the instance's cost, not the state access's. The value's pages are
// written before the timed region, as a long-lived process's buffers would already be.
static void touch(size_t size) {
    volatile unsigned char *bytes = value;
    for (size_t i = 0; i < size; i += 4096) bytes[i] = 'v';
    bytes[size - 1] = 'v';  // the buffer need not start on a page: its last page too
}

int main(void) {
    size_t len = fread(event, 1, sizeof event - 1, stdin);
    event[len] = 0;
    char backend[32], workload[32], client[64], size_text[32];
    if (!field("backend", backend, sizeof backend)) {
        printf("{}");
        return 0;
    }
    field("workload", workload, sizeof workload);
    field("client", client, sizeof client);
    field("size", size_text, sizeof size_text);
    size_t size = (size_t)atol(size_text);
    if (size < 8 || size > sizeof value) {
        printf("{\"errorType\": \"BadEvent\", \"errorMessage\": \"size must be 8 to %zu\"}\n", sizeof value);
        return 1;
    }
    char key[160];
    int linear = strcmp(workload, "rmw_linear") == 0;
    snprintf(key, sizeof key, "%s-%zu-%s", workload, size, linear ? "shared" : client);
    size_t key_len = strlen(key);
    if (strcmp(workload, "seed") == 0) {
        int32_t status = kiln_session_put(key, key_len, value, size, 0);
        printf("{\"status\": %d}", status);
        return status == 0 ? 0 : 2;
    }
    touch(size);
    if (strcmp(workload, "ro") == 0) {
        uint64_t t0 = now_ns();
        int64_t got = kiln_session_get(key, key_len, value, sizeof value);
        uint64_t t1 = now_ns();
        if (got == KILN_SESSION_NOT_FOUND) {  // the first request of a client seeds its key
            value_of(0);
            kiln_session_put(key, key_len, value, size, 0);
        }
        printf("{\"get_ns\": %llu}", (unsigned long long)(t1 - t0));
        return 0;
    }
    if (strcmp(workload, "rmw") == 0) {
        uint64_t t0 = now_ns();
        int64_t got = kiln_session_get(key, key_len, value, sizeof value);
        uint64_t t1 = now_ns();
        value_of(count_of(got) + 1);  // the function's own work, not timed
        uint64_t t2 = now_ns();
        int32_t status = kiln_session_put(key, key_len, value, size, 0);
        uint64_t t3 = now_ns();
        if (status != 0) {
            printf("{\"errorType\": \"Session\", \"errorMessage\": \"put: %d\"}\n", status);
            return 1;
        }
        printf("{\"get_ns\": %llu, \"put_ns\": %llu, \"op_ns\": %llu}", (unsigned long long)(t1 - t0),
               (unsigned long long)(t3 - t2), (unsigned long long)(t1 - t0 + t3 - t2));
        return 0;
    }
    if (linear) {
        uint64_t t0 = now_ns();
        kiln_session_begin();
        uint64_t count = count_of(kiln_session_get(key, key_len, value, sizeof value)) + 1;
        value_of(count);
        kiln_session_put(key, key_len, value, size, 0);
        int32_t status = kiln_session_end(1);
        uint64_t t1 = now_ns();
        if (status != 0) {
            printf("{\"errorType\": \"Session\", \"errorMessage\": \"transaction: %d\"}\n", status);
            return 1;
        }
        printf("{\"op_ns\": %llu, \"retries\": 0, \"count\": %llu}", (unsigned long long)(t1 - t0),
               (unsigned long long)count);
        return 0;
    }
    printf("{\"errorType\": \"BadEvent\", \"errorMessage\": \"unknown workload %s\"}\n", workload);
    return 1;
}
