/* A `provided` runtime in C: compiled to `bootstrap` at test time, it polls the Runtime API and answers
 * each event with {"lang":"c","requestId":...,"event":<the event>}. One HTTP/1.1 connection per request. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static char host[64];
static int port;

static int connect_api(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, host, &addr.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}

static void send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n <= 0) { perror("write"); exit(1); }
        buf += n;
        len -= (size_t)n;
    }
}

/* Reads the whole response (the server closes the connection); returns it NUL-terminated. */
static char *read_all(int fd, size_t *len) {
    size_t cap = 65536, used = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (used + 1 >= cap) buf = realloc(buf, cap *= 2);
        ssize_t n = read(fd, buf + used, cap - used - 1);
        if (n <= 0) break;
        used += (size_t)n;
    }
    buf[used] = 0;
    *len = used;
    return buf;
}

static const char *header(const char *head, const char *name, char *out, size_t out_len) {
    size_t name_len = strlen(name);
    for (const char *line = head; line && *line; line = strstr(line, "\r\n") ? strstr(line, "\r\n") + 2 : NULL) {
        if (strncasecmp(line, name, name_len) == 0 && line[name_len] == ':') {
            const char *v = line + name_len + 1;
            while (*v == ' ') v++;
            size_t n = strcspn(v, "\r\n");
            if (n >= out_len) n = out_len - 1;
            memcpy(out, v, n);
            out[n] = 0;
            return out;
        }
        if (strncmp(line, "\r\n", 2) == 0) break;
    }
    return NULL;
}

int main(void) {
    const char *api = getenv("AWS_LAMBDA_RUNTIME_API");
    if (!api) { fprintf(stderr, "no AWS_LAMBDA_RUNTIME_API\n"); return 1; }
    const char *colon = strrchr(api, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - api), api);
    port = atoi(colon + 1);
    printf("c bootstrap polling %s\n", api);
    fflush(stdout);
    for (;;) {
        int fd = connect_api();
        char req[512];
        int n = snprintf(req, sizeof req, "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", api);
        send_all(fd, req, (size_t)n);
        size_t len;
        char *resp = read_all(fd, &len);
        close(fd);
        char *body = strstr(resp, "\r\n\r\n");
        if (!body) { fprintf(stderr, "bad response\n"); return 1; }
        body += 4;
        char id[256];
        if (!header(strstr(resp, "\r\n") + 2, "Lambda-Runtime-Aws-Request-Id", id, sizeof id)) {
            fprintf(stderr, "no request id\n");
            return 1;
        }
        size_t body_len = len - (size_t)(body - resp);
        size_t out_cap = body_len + 512;
        char *out = malloc(out_cap);
        int out_len = snprintf(out, out_cap, "{\"lang\":\"c\",\"requestId\":\"%s\",\"event\":%.*s}", id, (int)body_len, body);
        fd = connect_api();
        char head[1024];
        n = snprintf(head, sizeof head, "POST /2018-06-01/runtime/invocation/%s/response HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", id, api, out_len);
        send_all(fd, head, (size_t)n);
        send_all(fd, out, (size_t)out_len);
        free(read_all(fd, &len));
        close(fd);
        free(out);
        free(resp);
    }
}
