/*
 * test_slow_clients.c - the listener of the real `trainyard` binary against
 * slow and hostile clients:
 *   - 1,100 connections that send a header line now and then ("slowloris")
 *     from one address are held to the per-address limit, and from twenty
 *     addresses to the total limit, whose reserve still lets /healthz and
 *     /metrics through; a submission from another address succeeds; every
 *     slow connection is cut once the request deadline has passed, and the
 *     refusals and cuts are counted in /metrics; idle connections are
 *     closed after the deadline too;
 *   - a body far above --max-body, streamed without "Expect: 100-continue",
 *     gets a 413 problem that the client reads (not a reset connection);
 *   - an over-long request target gets a 414 problem, over-large headers a
 *     431 problem, and requests beyond libmicrohttpd's own bound still get
 *     an answer.
 * Linux routes all of 127/8 to loopback, so the slow clients bind to
 * 127.0.0.2 and up while the good client comes from 127.0.0.1. The servers
 * run with every queue paused (--queue-limit 0): submitted jobs stay PENDING.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/ty_harness.h"

#define FLOOD 1100
#define DEADLINE_S "2"
#define SPEC                                                                                   \
    "{\"name\": \"after-flood\", \"image\": \"registry.example/worker:1.0\", \"command\": " \
    "[\"train\"], \"workers\": {\"count\": 1}}"

/* Each flood needs a descriptor per connection, in this process and in the server. */
static void raise_nofile(void)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    if (rl.rlim_cur < 2 * FLOOD + 256)
        skip(); /* the machine does not allow the flood */
}

/* ---- raw connections ------------------------------------------------------ */

/* A blocking TCP connection from src (an IPv4 loopback address) to the server; -1 on failure. */
static int connect_from(const ty_server *s, const char *src)
{
    struct sockaddr_in a = {.sin_family = AF_INET}, b = {.sin_family = AF_INET};
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    inet_pton(AF_INET, src, &a.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &b.sin_addr);
    b.sin_port = htons((uint16_t)ty_server_port(s));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        connect(fd, (struct sockaddr *)&b, sizeof b) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends all of p (a send error ends it early); 0 when everything went. */
static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* An answer read to the end of the connection: status, content type and body. */
typedef struct raw_answer {
    int status;
    char content_type[128];
    json_t *json; /* the body parsed, or NULL */
} raw_answer;

/* The value of header name in the head buf..end (ASCII case ignored), or NULL. */
static const char *find_header(const char *buf, const char *end, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(buf, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            p += 3 + n;
            while (*p == ' ')
                p++;
            return p;
        }
    return NULL;
}

/* Reads until the server closes (or 10 s pass) and parses what came. */
static void read_answer(int fd, raw_answer *out)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    memset(out, 0, sizeof *out);
    for (;;) {
        if (len == cap)
            break;
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
        /* A kept-alive connection does not close: stop at the end of the body. */
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        const char *cl = end ? find_header(buf, end, "Content-Length") : NULL;
        if (cl && len >= (size_t)(end + 4 - buf) + strtoul(cl, NULL, 10))
            break;
    }
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (len > 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0)
        out->status = atoi(buf + 9);
    const char *ct = end ? find_header(buf, end, "Content-Type") : NULL;
    if (ct) {
        size_t n = strcspn(ct, "\r");
        snprintf(out->content_type, sizeof out->content_type, "%.*s", (int)n, ct);
    }
    if (end)
        out->json = json_loads(end + 4, JSON_DISABLE_EOF_CHECK, NULL);
    free(buf);
}

static void assert_raw_problem(const raw_answer *a, int status, const char *code)
{
    if (a->status != status)
        print_message("status %d, expected %d\n", a->status, status);
    assert_int_equal(a->status, status);
    assert_string_equal(a->content_type, "application/problem+json");
    assert_non_null(a->json);
    assert_string_equal(ty_json_str(a->json, "code"), code);
    assert_int_equal(json_integer_value(json_object_get(a->json, "status")), status);
}

/* ---- the flood ------------------------------------------------------------ */

/* Slow clients: each sent a request line and sends a header line on every tick. */
typedef struct flood {
    int fd[FLOOD];
    int open[FLOOD];
    int n;           /* connections made */
    int nopen;       /* not yet closed by the server */
    int got_408;     /* closed with a 408 answer */
} flood;

/* Opens count connections, spread evenly over naddrs addresses from 127.0.0.<first>. */
static void flood_open(flood *f, const ty_server *s, int count, int first, int naddrs)
{
    static const char line[] = "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n";
    memset(f, 0, sizeof *f);
    for (int i = 0; i < count; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", first + i % naddrs);
        int fd = connect_from(s, src);
        if (fd < 0)
            continue;
        /* A refused connection may already be closed: that send may fail. */
        (void)send(fd, line, sizeof line - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        f->fd[f->n] = fd;
        f->open[f->n] = 1;
        f->n++;
        f->nopen++;
    }
    assert_true(f->n >= count * 9 / 10); /* loopback connects do not fail */
}

/* One tick: every open connection sends a header line; closed ones are collected. */
static void flood_tick(flood *f)
{
    for (int i = 0; i < f->n; i++) {
        if (!f->open[i])
            continue;
        (void)send(f->fd[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT);
        struct pollfd p = {.fd = f->fd[i], .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            continue;
        char buf[2048];
        ssize_t k = recv(f->fd[i], buf, sizeof buf - 1, MSG_DONTWAIT);
        if (k > 0) {
            buf[k] = '\0';
            if (strncmp(buf, "HTTP/1.1 408", 12) == 0)
                f->got_408++;
            continue; /* the end of the connection comes next */
        }
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        f->open[i] = 0;
        f->nopen--;
        close(f->fd[i]);
    }
}

/* Ticks until the server has closed every connection (failing after 60 s). */
static void flood_wait_closed(flood *f)
{
    int64_t end = ty_now_ms() + 60000;
    while (f->nopen > 0 && ty_now_ms() < end) {
        flood_tick(f);
        ty_sleep_ms(200);
    }
    assert_int_equal(f->nopen, 0);
}

static void flood_close(flood *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->open[i])
            close(f->fd[i]);
    f->nopen = 0;
}

/* The sample of a metric line "name{labels} value" (0 when absent). */
static long long metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
    return 0;
}

#define REFUSED(reason) "trainyard_http_connections_refused_total{reason=\"" reason "\"}"

static ty_server *start(const char *const *args)
{
    char err[1024];
    ty_server *s = NULL;
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &s, err, sizeof err) != 0)
        fail_msg("%s", err);
    return s;
}

/*
 * 1,100 slow connections from one address: 64 (the per-address limit) are
 * held, the others refused at once; /healthz and a submission from another
 * address get through meanwhile; after the deadline every slow connection
 * has been cut, and each one is counted as refused or cut.
 */
static void test_flood_from_one_address(void **state)
{
    (void)state;
    raise_nofile();
    static const char *const args[] = {"--request-deadline", DEADLINE_S, "--queue-limit", "0",
                                       NULL};
    ty_server *s = start(args);
    static flood f;
    flood_open(&f, s, FLOOD, 2, 1);
    flood_tick(&f);

    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);
    ty_http_resp *r = ty_req(c, "GET", "/healthz", NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    r = ty_req(c, "POST", "/v1/jobs", SPEC);
    assert_int_equal(r->status, 201);
    assert_string_equal(ty_json_str(r->json, "state"), "PENDING");
    ty_resp_destroy(r);
    r = ty_req(c, "GET", "/metrics", NULL);
    assert_int_equal(r->status, 200);
    assert_true(metric(r->body, REFUSED("per_ip_limit")) > 0);
    ty_resp_destroy(r);

    flood_wait_closed(&f);
    assert_true(f.got_408 > 0); /* cut with an answer, not only closed */
    r = ty_req(c, "GET", "/metrics", NULL);
    long long per_ip = metric(r->body, REFUSED("per_ip_limit"));
    long long deadline = metric(r->body, REFUSED("deadline"));
    assert_true(per_ip >= FLOOD - 64 - f.n / 10);
    assert_true(deadline >= 1);
    assert_int_equal(per_ip + deadline, f.n); /* every slow connection: refused or cut */
    assert_int_equal(metric(r->body, REFUSED("total_limit")), 0);
    ty_resp_destroy(r);

    /* One line at most per refused connection would be over a thousand: the log stays short. */
    char *log = ty_server_log(s);
    size_t lines = 0;
    for (const char *p = log; p && (p = strstr(p, "\"msg\":\"http\"")); p++)
        lines++;
    assert_true(lines <= 20);
    free(log);
    ty_client_free(c);
    flood_close(&f);
    ty_server_free(s);
}

/*
 * 1,100 slow connections from twenty addresses (55 each, under the
 * per-address limit) against --max-connections 1150: thread per connection
 * holds the 1,086 below the reserve, the rest are refused; a new address
 * still gets /healthz and /metrics through the reserve, where a submission
 * is turned away (503) until the flood has been cut, and then succeeds.
 */
static void test_flood_from_many_addresses(void **state)
{
    (void)state;
    raise_nofile();
    static const char *const args[] = {"--request-deadline", DEADLINE_S, "--max-connections",
                                       "1150", "--queue-limit", "0", NULL};
    ty_server *s = start(args);
    static flood f;
    flood_open(&f, s, FLOOD, 10, 20);
    flood_tick(&f);

    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);
    ty_http_resp *r = ty_req(c, "GET", "/healthz", NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    r = ty_req(c, "GET", "/metrics", NULL);
    assert_int_equal(r->status, 200);
    long long held = metric(r->body, "trainyard_http_connections");
    long long total = metric(r->body, REFUSED("total_limit"));
    ty_resp_destroy(r);
    if (held > 1000) {
        /* Still flooded (the deadline has not passed yet): only the reserve is left. */
        assert_true(total > 0);
        r = ty_req(c, "POST", "/v1/jobs", SPEC);
        assert_int_equal(r->status, 503);
        assert_string_equal(ty_json_str(r->json, "code"), "unavailable");
        ty_resp_destroy(r);
    }

    flood_wait_closed(&f);
    r = ty_req(c, "POST", "/v1/jobs", SPEC);
    assert_int_equal(r->status, 201);
    ty_resp_destroy(r);
    r = ty_req(c, "GET", "/metrics", NULL);
    long long deadline = metric(r->body, REFUSED("deadline"));
    total = metric(r->body, REFUSED("total_limit"));
    assert_true(total > 0);
    assert_true(deadline > 1000); /* the server held them all until the deadline */
    assert_int_equal(total + deadline, f.n);
    assert_int_equal(metric(r->body, REFUSED("per_ip_limit")), 0);
    ty_resp_destroy(r);
    ty_client_free(c);
    flood_close(&f);
    ty_server_free(s);
}

/*
 * Idle connections do not hold a slot forever: one that never sends a byte,
 * and a kept-alive one after its answer, are closed once the deadline has
 * passed, without an answer, and counted as idle_timeout.
 */
static void test_idle_connections_are_closed(void **state)
{
    (void)state;
    static const char *const args[] = {"--request-deadline", "1", "--queue-limit", "0", NULL};
    static const char get[] = "GET /healthz HTTP/1.1\r\nHost: trainyard\r\n\r\n";
    ty_server *s = start(args);
    raw_answer a;
    char buf[256];
    int silent = connect_from(s, "127.0.0.3");
    int kept = connect_from(s, "127.0.0.3");
    assert_true(silent >= 0 && kept >= 0);
    assert_int_equal(send_all(kept, get, sizeof get - 1), 0);
    read_answer(kept, &a); /* stops at the end of the body: the connection stays */
    assert_int_equal(a.status, 200);
    json_decref(a.json);
    /* Each recv() waits up to 5 s (SO_RCVTIMEO): the server closes first, sending nothing. */
    assert_int_equal(recv(silent, buf, sizeof buf, 0), 0);
    assert_int_equal(recv(kept, buf, sizeof buf, 0), 0);
    close(silent);
    close(kept);

    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    ty_http_resp *r = ty_req(c, "GET", "/metrics", NULL);
    assert_true(metric(r->body, REFUSED("idle_timeout")) >= 2);
    assert_int_equal(metric(r->body, REFUSED("deadline")), 0);
    ty_resp_destroy(r);
    ty_client_free(c);
    ty_server_free(s);
}

/* ---- oversized requests ---------------------------------------------------- */

#define BODY_HEAD                                                                   \
    "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\nAuthorization: Bearer " TY_TEST_ADMIN_TOKEN \
    "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n"

/*
 * Streams len bytes of body after the headers in 64 KiB writes, without
 * waiting for "100 Continue", then reads the answer. Returns how many body
 * bytes went out before a write failed.
 */
static size_t stream_body(const ty_server *s, size_t len, raw_answer *a)
{
    char head[512], *chunk = malloc(65536);
    assert_non_null(chunk);
    memset(chunk, 'x', 65536);
    int fd = connect_from(s, "127.0.0.1");
    assert_true(fd >= 0);
    int n = snprintf(head, sizeof head, BODY_HEAD, len);
    assert_int_equal(send_all(fd, head, (size_t)n), 0);
    size_t sent = 0;
    while (sent < len) {
        size_t k = len - sent < 65536 ? len - sent : 65536;
        if (send_all(fd, chunk, k) != 0)
            break;
        sent += k;
    }
    read_answer(fd, a);
    close(fd);
    free(chunk);
    return sent;
}

/* A client that streams a body far above --max-body reads a 413 problem. */
static void test_streamed_body_too_large(void **state)
{
    (void)state;
    static const char *const args[] = {"--max-body", "1024", "--queue-limit", "0", NULL};
    ty_server *s = start(args);
    raw_answer a;

    /* 4 MiB: read to its end and dropped; every write goes through. */
    size_t len = (size_t)4 << 20;
    assert_int_equal(stream_body(s, len, &a), len);
    assert_raw_problem(&a, 413, "body-too-large");
    json_decref(a.json);

    /* 64 MiB: too much to read; answered while the client still writes. */
    len = (size_t)64 << 20;
    size_t sent = stream_body(s, len, &a);
    assert_true(sent < len);
    assert_raw_problem(&a, 413, "body-too-large");
    json_decref(a.json);

    /* The server goes on. */
    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    ty_http_resp *r = ty_req(c, "GET", "/healthz", NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    ty_client_free(c);
    ty_server_free(s);
}

/* Sends a GET with a query of qlen bytes and a header of hlen bytes; reads the answer. */
static void oversized_get(const ty_server *s, size_t qlen, size_t hlen, raw_answer *a)
{
    size_t cap = qlen + hlen + 256;
    char *req = malloc(cap);
    assert_non_null(req);
    size_t n = (size_t)snprintf(req, cap, "GET /healthz?q=");
    memset(req + n, 'a', qlen);
    n += qlen;
    n += (size_t)snprintf(req + n, cap - n, " HTTP/1.1\r\nHost: trainyard\r\nX-Big: ");
    memset(req + n, 'b', hlen);
    n += hlen;
    n += (size_t)snprintf(req + n, cap - n, "\r\nConnection: close\r\n\r\n");
    int fd = connect_from(s, "127.0.0.1");
    assert_true(fd >= 0);
    assert_int_equal(send_all(fd, req, n), 0);
    read_answer(fd, a);
    close(fd);
    free(req);
}

/*
 * Over-long targets get 414 and over-large headers 431, as problem+json,
 * whatever their size below libmicrohttpd's own bound (64 KiB), where a
 * request used to be dropped without an answer; beyond it, an answer still
 * comes.
 */
static void test_uri_and_headers_too_large(void **state)
{
    (void)state;
    static const char *const args[] = {"--queue-limit", "0", NULL};
    ty_server *s = start(args);
    raw_answer a;
    static const size_t uris[] = {9000, 32000, 60000, 65400, 65450};
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
        oversized_get(s, uris[i], 1, &a);
        assert_raw_problem(&a, 414, "uri-too-long");
        json_decref(a.json);
    }
    static const size_t headers[] = {17000, 32300, 32500, 60000, 65000, 65150};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        oversized_get(s, 10, headers[i], &a);
        assert_raw_problem(&a, 431, "headers-too-large");
        json_decref(a.json);
    }
    /* Beyond the bound: libmicrohttpd's own answer, but an answer. */
    oversized_get(s, 200000, 1, &a);
    assert_int_equal(a.status, 414);
    json_decref(a.json);
    oversized_get(s, 10, 200000, &a);
    assert_int_equal(a.status, 431);
    json_decref(a.json);

    /* Just below our limits, the request is served. */
    oversized_get(s, 8000, 7000, &a);
    assert_int_equal(a.status, 200);
    json_decref(a.json);
    ty_server_free(s);
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_from_one_address),
        cmocka_unit_test(test_flood_from_many_addresses),
        cmocka_unit_test(test_idle_connections_are_closed),
        cmocka_unit_test(test_streamed_body_too_large),
        cmocka_unit_test(test_uri_and_headers_too_large),
    };
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int failed = cmocka_run_group_tests_name("slow_clients", tests, NULL, NULL);
    ty_harness_cleanup();
    return failed;
}
