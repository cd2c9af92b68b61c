/*
 * test_http_framing.c - the real `trainyard` binary against requests whose
 * framing two HTTP parsers could read differently (RFC 9112 section 6.3), the
 * way a proxy in front of the server and the server itself might:
 *   - Content-Length beside Transfer-Encoding, with a second request hidden
 *     after the body (request smuggling): one 400, the hidden request never
 *     answered, nothing created, the connection closed;
 *   - Content-Length twice (differing or equal), "5, 5"; whitespace before a
 *     colon; transfer codings other than one "chunked" (501 or 400);
 *   - a bare CR, a NUL, a folded line in the headers; two Authorization
 *     fields; HTTP/1.1 without Host; a request target with a space;
 *   - what libmicrohttpd 0.9.75 answers itself (a malformed chunk, a chunk
 *     line longer than its buffer, an unsupported version): answered once,
 *     the connection closed, the rest of the bytes never read as a request;
 *   - and, so that strictness costs nothing that is allowed: a chunked
 *     submission, bare-LF lines, HTTP/1.0 without Host, two pipelined GETs,
 *     headers sent a byte at a time.
 * Every case sends all its bytes on a fresh connection and reads everything
 * until the server closes it (or 10 s pass, which fails the case), then counts
 * the status lines in what came back.
 */
#define _GNU_SOURCE /* asprintf() */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/ty_harness.h"

/* The job a smuggling case carries; its label finds it if it was ever created. */
#define JOB                                                                                        \
    "{\"name\": \"smuggled\", \"labels\": {\"probe\": \"framing\"}, \"image\": "                   \
    "\"registry.example/worker:1.0\", \"command\": [\"train\"], \"workers\": {\"count\": 1}}"
#define AUTH "Authorization: Bearer " TY_TEST_ADMIN_TOKEN "\r\n"
/* The request hidden after a body: answering it would list the tokens. */
#define HIDDEN "GET /v1/tokens HTTP/1.1\r\nHost: trainyard\r\n" AUTH "\r\n"
#define READ_CAP ((size_t)1 << 20)

static ty_server *g_srv;

/* Everything the server sent on one connection, until it closed it. */
typedef struct answer {
    char *buf; /* NUL-terminated; len is authoritative */
    size_t len;
    int closed;   /* the server closed (EOF, or a reset after its answer) */
    int statuses; /* status lines ("HTTP/1.x NNN ") in buf */
    int status;   /* the first one's code, 0 when none */
    char content_type[128];
    int conn_close; /* the first answer carries "Connection: close" */
    json_t *json;   /* the first answer's body parsed, or NULL */
} answer;

static void answer_free(answer *a)
{
    free(a->buf);
    json_decref(a->json);
    memset(a, 0, sizeof *a);
}

static int connect_server(void)
{
    struct sockaddr_in b = {.sin_family = AF_INET};
    struct timeval tv = {10, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    inet_pton(AF_INET, "127.0.0.1", &b.sin_addr);
    b.sin_port = htons((uint16_t)ty_server_port(g_srv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&b, sizeof b) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

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

/* "HTTP/1.x NNN " at p (len bytes left): the code, else 0. */
static int status_at(const char *p, size_t len)
{
    if (len < 13 || strncmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ' ||
        p[12] != ' ')
        return 0;
    for (int i = 9; i < 12; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return atoi(p + 9);
}

/*
 * Sends the n bytes of req on a fresh connection, at once or (piece > 0) in
 * pieces of that many bytes a millisecond apart, and reads until the server
 * closes it (a send cut short by the server's close is not an error: the
 * answer is what counts). Fails the case when no close comes in 10 s.
 */
static void exchange_pieces(const char *req, size_t n, size_t piece, answer *a)
{
    memset(a, 0, sizeof *a);
    int fd = connect_server();
    assert_true(fd >= 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    size_t off = 0;
    while (off < n) {
        size_t len = piece && piece < n - off ? piece : n - off;
        if (piece)
            ty_sleep_ms(1);
        ssize_t k = send(fd, req + off, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    a->buf = malloc(READ_CAP + 1);
    assert_non_null(a->buf);
    int timed_out = 0;
    while (a->len < READ_CAP) {
        ssize_t k = recv(fd, a->buf + a->len, READ_CAP - a->len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            timed_out = 1;
            break;
        }
        if (k <= 0) {
            a->closed = 1;
            break;
        }
        a->len += (size_t)k;
    }
    close(fd);
    a->buf[a->len] = '\0';
    if (timed_out)
        fail_msg("no close within 10 s; read so far: %.300s", a->buf);
    for (size_t i = 0; i < a->len; i++) {
        int st = status_at(a->buf + i, a->len - i);
        if (st && !a->status)
            a->status = st;
        a->statuses += st != 0;
    }
    char *end = strstr(a->buf, "\r\n\r\n");
    if (!end)
        return;
    const char *ct = find_header(a->buf, end, "Content-Type");
    if (ct)
        snprintf(a->content_type, sizeof a->content_type, "%.*s", (int)strcspn(ct, "\r"), ct);
    const char *cn = find_header(a->buf, end, "Connection");
    a->conn_close = cn && strncasecmp(cn, "close", 5) == 0;
    a->json = json_loads(end + 4, JSON_DISABLE_EOF_CHECK, NULL);
}

static void exchange(const char *req, size_t n, answer *a)
{
    exchange_pieces(req, n, 0, a);
}

static void exchange_str(const char *req, answer *a)
{
    exchange(req, strlen(req), a);
}

/* The answer is one problem+json document (status, code), then the connection closed. */
static void assert_one_problem(const answer *a, int status, const char *code)
{
    if (a->status != status || a->statuses != 1)
        fail_msg("expected one %d, got %d status line(s), the first %d:\n%.600s", status,
                 a->statuses, a->status, a->buf);
    assert_string_equal(a->content_type, "application/problem+json");
    assert_true(a->conn_close);
    assert_true(a->closed);
    assert_non_null(a->json);
    assert_string_equal(ty_json_str(a->json, "code"), code);
    assert_int_equal(json_integer_value(json_object_get(a->json, "status")), status);
    /* The hidden request, where there is one, was not answered. */
    assert_null(strstr(a->buf, "\"tokens\""));
}

/* An answer libmicrohttpd writes itself: one status line, then the close. */
static void assert_one_answer(const answer *a, int status)
{
    if (a->status != status || a->statuses != 1)
        fail_msg("expected one %d, got %d status line(s), the first %d:\n%.600s", status,
                 a->statuses, a->status, a->buf);
    assert_true(a->closed);
    assert_null(strstr(a->buf, "\"tokens\""));
}

/* A chunked body holding JOB, then the final chunk. */
static char *chunked_job(void)
{
    char *s = NULL;
    assert_true(asprintf(&s, "%zx\r\n%s\r\n0\r\n\r\n", strlen(JOB), JOB) > 0);
    return s;
}

/* No job with the smuggled job's label exists. */
static void assert_nothing_created(void)
{
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);
    ty_http_resp *r = ty_req(c, "GET", "/v1/jobs?label=probe=framing", NULL);
    assert_int_equal(r->status, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 0);
    ty_resp_destroy(r);
    ty_client_free(c);
}

/* ---- the cases ------------------------------------------------------------ */

/* CL + TE: a proxy framing by Content-Length would forward HIDDEN as part of the body. */
static void test_smuggling_cl_te(void **state)
{
    (void)state;
    char *body = chunked_job(), *req = NULL;
    answer a;
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n%s" HIDDEN,
                         strlen(body), body) > 0);
    exchange_str(req, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    free(req);

    /* TE first, then CL: the same. */
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                         "Content-Length: %zu\r\n\r\n%s" HIDDEN,
                         strlen(body), body) > 0);
    exchange_str(req, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    free(req);
    free(body);
    assert_nothing_created();
}

static void test_content_length_twice(void **state)
{
    (void)state;
    char *req = NULL;
    answer a;
    size_t n = strlen(JOB);
    /* Differing: the second would leave five bytes to start another request. */
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Content-Length: %zu\r\n\r\n%s" HIDDEN,
                         n, n + 5, JOB) > 0);
    exchange_str(req, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    free(req);
    /* Equal values repeated: refused too. */
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Content-Length: %zu\r\n\r\n%s" HIDDEN,
                         n, n, JOB) > 0);
    exchange_str(req, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    free(req);
    assert_nothing_created();
}

/*
 * "Content-Length: 5, 5" alone is refused by libmicrohttpd 0.9.75 before the
 * server sees the request (its own 400 page, its status line written twice by
 * a bug of that version): refused, closed, nothing after it answered. Beside
 * a Transfer-Encoding the server sees it and answers one problem.
 */
static void test_content_length_list(void **state)
{
    (void)state;
    answer a;
    exchange_str("POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                 "Content-Length: 5, 5\r\n\r\nhello" HIDDEN,
                 &a);
    assert_int_equal(a.status, 400);
    assert_true(a.closed);
    for (size_t i = 0; i < a.len; i++) {
        int st = status_at(a.buf + i, a.len - i);
        assert_true(st == 0 || st == 400);
    }
    assert_null(strstr(a.buf, "\"tokens\""));
    answer_free(&a);

    exchange_str("POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                 "Transfer-Encoding: chunked\r\nContent-Length: 5, 5\r\n\r\n"
                 "5\r\nhello\r\n0\r\n\r\n" HIDDEN,
                 &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
}

/* "Transfer-Encoding : chunked" is not Transfer-Encoding to every parser. */
static void test_whitespace_before_colon(void **state)
{
    (void)state;
    char *body = chunked_job(), *req = NULL;
    answer a;
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nTransfer-Encoding : chunked\r\n"
                         "Content-Length: %zu\r\n\r\n%s" HIDDEN,
                         strlen(body), body) > 0);
    exchange_str(req, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    free(req);
    free(body);

    exchange_str("GET /healthz HTTP/1.1\r\nHost: trainyard\r\nX-Probe\t: 1\r\n\r\n", &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    assert_nothing_created();
}

/* Codings the server cannot frame: 501 at once, not a wait for the client to close. */
static void test_transfer_codings(void **state)
{
    (void)state;
    static const struct {
        const char *te; /* the Transfer-Encoding lines */
        int status;
        const char *code;
    } cases[] = {
        {"Transfer-Encoding: xchunked\r\n", 501, "not-implemented"},
        {"Transfer-Encoding: chunked, identity\r\n", 501, "not-implemented"},
        {"Transfer-Encoding: gzip, chunked\r\n", 501, "not-implemented"},
        {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501, "not-implemented"},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, "malformed-request"},
        {"Transfer-Encoding: chunked, chunked\r\n", 400, "malformed-request"},
        {"Transfer-Encoding: chunked \r\n", 400, "malformed-request"},
    };
    char *body = chunked_job();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *req = NULL;
        answer a;
        assert_true(asprintf(&req,
                             "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                             "Content-Type: application/json\r\n%s\r\n%s" HIDDEN,
                             cases[i].te, body) > 0);
        exchange_str(req, &a);
        assert_one_problem(&a, cases[i].status, cases[i].code);
        if (cases[i].status == 501)
            assert_string_equal(ty_json_str(a.json, "title"), "Not Implemented");
        answer_free(&a);
        free(req);
    }
    free(body);
    /* HTTP/1.0 has no chunked coding. */
    answer a;
    exchange_str("POST /v1/jobs HTTP/1.0\r\n" AUTH
                 "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                 &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    assert_nothing_created();
}

/* Bytes a header line may not hold, and a line folded onto the next. */
static void test_control_bytes(void **state)
{
    (void)state;
    static const char cr[] =
        "GET /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH "X-Probe: a\rb\r\n\r\n";
    static const char ctl[] =
        "GET /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH "X-Probe: a\x01z\r\n\r\n";
    static const char fold[] =
        "GET /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH "X-Probe: a\r\n b\r\n\r\n";
    static const char target[] = "GET /v1/jobs x HTTP/1.1\r\nHost: trainyard\r\n" AUTH "\r\n";
    const char *reqs[] = {cr, ctl, fold, target};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        answer a;
        exchange_str(reqs[i], &a);
        assert_one_problem(&a, 400, "malformed-request");
        answer_free(&a);
    }
    /* A bare CR in the request line: libmicrohttpd's own 400. */
    answer a;
    exchange_str("GET /healthz HTTP/1.1\rX\r\nHost: trainyard\r\n\r\n" HIDDEN, &a);
    assert_one_answer(&a, 400);
    answer_free(&a);
}

/* libmicrohttpd keeps a value up to a NUL: the admin token followed by junk is not admin. */
static void test_nul_in_authorization(void **state)
{
    (void)state;
    static const char mid[] = "GET /v1/tokens HTTP/1.1\r\nHost: trainyard\r\n"
                              "Authorization: Bearer " TY_TEST_ADMIN_TOKEN "\0xyz\r\n\r\n";
    static const char last[] = "GET /v1/tokens HTTP/1.1\r\n"
                               "Authorization: Bearer " TY_TEST_ADMIN_TOKEN "\0\r\n"
                               "Host: trainyard\r\n\r\n";
    answer a;
    exchange(mid, sizeof mid - 1, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    exchange(last, sizeof last - 1, &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
}

static void test_two_authorizations(void **state)
{
    (void)state;
    answer a;
    exchange_str("GET /v1/tokens HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                 "Authorization: Bearer nope\r\n\r\n",
                 &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    exchange_str("GET /v1/tokens HTTP/1.1\r\nHost: trainyard\r\n"
                 "Authorization: Bearer nope\r\n" AUTH "\r\n",
                 &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
}

static void test_host(void **state)
{
    (void)state;
    answer a;
    exchange_str("GET /v1/tokens HTTP/1.1\r\n" AUTH "\r\n", &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    exchange_str("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &a);
    assert_one_problem(&a, 400, "malformed-request");
    answer_free(&a);
    /* HTTP/1.0 has no Host requirement. */
    exchange_str("GET /healthz HTTP/1.0\r\n\r\n", &a);
    assert_int_equal(a.status, 200);
    assert_int_equal(a.statuses, 1);
    answer_free(&a);
}

/*
 * Chunk framing is read by libmicrohttpd after the server has seen the
 * headers, and answered by it (400 for a malformed size, 500 for a chunk line
 * longer than its buffer): once, the connection closed, nothing after it read
 * as a request.
 */
static void test_malformed_chunks(void **state)
{
    (void)state;
    answer a;
    exchange_str("POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                 "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "-5\r\nhello\r\n0\r\n\r\n" HIDDEN,
                 &a);
    assert_one_answer(&a, 400);
    answer_free(&a);

    size_t ext = 100000;
    static const char head[] =
        "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH "Content-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5;";
    static const char tail[] = "\r\nhello\r\n0\r\n\r\n" HIDDEN;
    size_t n = sizeof head - 1 + ext + sizeof tail - 1;
    char *req = malloc(n);
    assert_non_null(req);
    memcpy(req, head, sizeof head - 1);
    memset(req + sizeof head - 1, 'a', ext);
    memcpy(req + sizeof head - 1 + ext, tail, sizeof tail - 1);
    exchange(req, n, &a);
    assert_one_answer(&a, 500);
    answer_free(&a);
    free(req);
    assert_nothing_created();
}

static void test_unsupported_version(void **state)
{
    (void)state;
    answer a;
    exchange_str("GET /healthz HTTP/2.5\r\nHost: trainyard\r\n\r\n" HIDDEN, &a);
    assert_one_answer(&a, 505);
    answer_free(&a);
}

/* What is allowed still works: chunked bodies, bare-LF lines, pipelined requests. */
static void test_allowed_framing(void **state)
{
    (void)state;
    answer a;
    char *body = chunked_job(), *req = NULL;
    assert_true(asprintf(&req,
                         "POST /v1/jobs HTTP/1.1\r\nHost: trainyard\r\n" AUTH
                         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                         "Connection: close\r\n\r\n%s",
                         body) > 0);
    exchange_str(req, &a);
    assert_int_equal(a.status, 201);
    assert_int_equal(a.statuses, 1);
    answer_free(&a);
    free(req);
    free(body);

    exchange_str("GET /healthz HTTP/1.1\nHost: trainyard\nX-Probe: caf\xc3\xa9\tx\n"
                 "Connection: close\n\n",
                 &a);
    assert_int_equal(a.status, 200);
    assert_int_equal(a.statuses, 1);
    answer_free(&a);

    exchange_str("GET /healthz HTTP/1.1\r\nHost: trainyard\r\n\r\n"
                 "GET /healthz HTTP/1.1\r\nHost: trainyard\r\nConnection: close\r\n\r\n",
                 &a);
    assert_int_equal(a.status, 200);
    assert_int_equal(a.statuses, 2);
    answer_free(&a);

    /* Headers that arrive a byte at a time are read as one block all the same. */
    static const char trickled[] = "GET /v1/jobs HTTP/1.1\r\nHost: trainyard\r\nX-Probe: 1\r\n" AUTH
                                   "Connection: close\r\n\r\n";
    exchange_pieces(trickled, sizeof trickled - 1, 1, &a);
    assert_int_equal(a.status, 200);
    assert_int_equal(a.statuses, 1);
    answer_free(&a);

    /* The created job is the only one with the label: the cleanup of the other cases. */
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);
    ty_http_resp *r = ty_req(c, "GET", "/v1/jobs?label=probe=framing", NULL);
    assert_int_equal(r->status, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 1);
    ty_resp_destroy(r);
    ty_client_free(c);
}

static int group_setup(void **state)
{
    char err[1024];
    static const char *const args[] = {"--queue-limit", "0", NULL};
    ty_server_opts o = {.args = args};
    (void)state;
    if (ty_server_start(&o, &g_srv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    /* The allowed case creates the labelled job: it runs last. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smuggling_cl_te),
        cmocka_unit_test(test_content_length_twice),
        cmocka_unit_test(test_content_length_list),
        cmocka_unit_test(test_whitespace_before_colon),
        cmocka_unit_test(test_transfer_codings),
        cmocka_unit_test(test_control_bytes),
        cmocka_unit_test(test_nul_in_authorization),
        cmocka_unit_test(test_two_authorizations),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_malformed_chunks),
        cmocka_unit_test(test_unsupported_version),
        cmocka_unit_test(test_allowed_framing),
    };
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int failed = cmocka_run_group_tests_name("http_framing", tests, group_setup, group_teardown);
    ty_harness_cleanup();
    return failed;
}
