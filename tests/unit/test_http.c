/*
 * test_http.c - the HTTP layer over loopback with a test route table: request
 * ids, 404/405/401/403/413 problems, query arguments (repeats, "label=k=v"),
 * bodies at and past the cap, keep-alive, token-cache invalidation, metrics,
 * streamed (chunked) responses and their errors, and a graceful shutdown that
 * lets a request in flight finish and cuts a stream that does not end; the
 * framing rules (http_check_framing) as a table.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/http.h"
#include "store/store.h"

#define MAX_BODY 1000

static atomic_int slow_entered;

static void echo(const api_req *req, api_resp *resp)
{
    json_t *q = json_array();
    for (size_t i = 0; i < req->nquery; i++)
        json_array_append_new(q, json_pack("[s,s]", req->query[i].key, req->query[i].value));
    api_reply_json(resp, 200,
                   json_pack("{s:s, s:s, s:s?, s:o, s:I, s:s?, s:s?, s:s?, s:s}", "method",
                             req->method, "path", req->path, "id", req->id, "query", q, "body_len",
                             (json_int_t)req->body_len, "principal",
                             req->principal ? req->principal->name : NULL, "content_type",
                             req->content_type, "idempotency_key", req->idempotency_key,
                             "request_id", req->request_id));
}

static void open_route(const api_req *req, api_resp *resp)
{
    (void)req;
    api_reply_text(resp, 200, "text/plain", "ok\n", 3);
}

static void no_status(const api_req *req, api_resp *resp)
{
    (void)req;
    (void)resp;
}

static void slow(const api_req *req, api_resp *resp)
{
    (void)req;
    atomic_store(&slow_entered, 1);
    struct timespec t = {0, 300 * 1000 * 1000};
    nanosleep(&t, NULL);
    api_reply_text(resp, 200, "text/plain", "slow\n", 5);
}

/* POST /slow holds its request until the test opens the gate (10 s at most). */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open = 1;

static void set_gate(int open)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static void slow_post(const api_req *req, api_resp *resp)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    atomic_store(&slow_entered, 1);
    pthread_mutex_lock(&gate_mu);
    while (!gate_open && pthread_cond_timedwait(&gate_cv, &gate_mu, &deadline) == 0)
        ;
    pthread_mutex_unlock(&gate_mu);
    echo(req, resp);
}

static void revoke_ci(const api_req *req, api_resp *resp)
{
    store_token_revoke(req->ctx->store, "ci");
    resp->status = 204;
}

/*
 * Streamed bodies: STREAM_PIECES pieces of PIECE_LEN bytes (about 100 KB, so
 * several blocks), each read returning the rest of one piece. /stream/fail
 * fails after 3 pieces; /stream/endless never ends.
 */
#define STREAM_PIECES 100
#define PIECE_LEN 1000

static atomic_int streams_open; /* made by a handler and not yet freed */

typedef struct stream_src {
    int pieces;     /* -1: endless */
    int fail_after; /* read() returns -1 after this many pieces; -1: never */
    int sent;
    size_t off; /* in the current piece */
} stream_src;

static void make_piece(int i, char *out)
{
    int n = snprintf(out, PIECE_LEN, "piece %04d ", i);
    memset(out + n, 'a' + i % 26, PIECE_LEN - (size_t)n - 1);
    out[PIECE_LEN - 1] = '\n';
}

static long stream_read(void *ud, char *buf, size_t max)
{
    stream_src *ts = ud;
    char piece[PIECE_LEN];
    if (ts->fail_after >= 0 && ts->sent == ts->fail_after)
        return -1;
    if (ts->pieces >= 0 && ts->sent == ts->pieces)
        return 0;
    if (ts->pieces < 0) {
        struct timespec t = {0, 1000 * 1000};
        nanosleep(&t, NULL);
    }
    make_piece(ts->sent, piece);
    size_t n = PIECE_LEN - ts->off;
    if (n > max)
        n = max;
    memcpy(buf, piece + ts->off, n);
    ts->off += n;
    if (ts->off == PIECE_LEN) {
        ts->off = 0;
        ts->sent++;
    }
    return (long)n;
}

static void stream_free(void *ud)
{
    free(ud);
    atomic_fetch_sub(&streams_open, 1);
}

static void stream_route(const api_req *req, api_resp *resp)
{
    stream_src *ts = calloc(1, sizeof *ts);
    if (!ts) {
        api_reply_text(resp, 503, "text/plain", "oom\n", 4);
        return;
    }
    int fail = strcmp(req->path, "/stream/fail") == 0;
    int endless = strcmp(req->path, "/stream/endless") == 0;
    *ts = (stream_src){.pieces = endless ? -1 : STREAM_PIECES, .fail_after = fail ? 3 : -1};
    atomic_fetch_add(&streams_open, 1);
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
    resp->stream = (api_stream){.read = stream_read, .free = stream_free, .ud = ts};
}

static const api_route routes[] = {
    {"GET", "/open", open_route, 0},
    {"GET", "/slow", slow, 0},
    {"POST", "/slow", slow_post, 0},
    {"GET", "/nostatus", no_status, 0},
    {"GET", "/echo/{id}", echo, STORE_SCOPE_READ},
    {"POST", "/echo", echo, STORE_SCOPE_SUBMIT},
    {"GET", "/echo", echo, STORE_SCOPE_READ},
    {"DELETE", "/v1/tokens/{id}", revoke_ci, STORE_SCOPE_ADMIN},
    {"GET", "/stream", stream_route, 0},
    {"GET", "/stream/{id}", stream_route, 0},
};

typedef struct fixture {
    char dir[64];
    char db[128];
    store *st;
    auth_cache *auth;
    http_server *srv;
    ty_counter_vec requests;
    ty_histogram duration;
    api_ctx ctx;
    char base[64];
} fixture;

static void add_token(store *s, const char *name, const char *secret, unsigned scopes)
{
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(secret, strlen(secret), hash);
    assert_int_equal(store_token_create(s, name, scopes, hash), TY_OK);
}

/* Large-body settings of the next setup(); zeros are the server's defaults. */
static size_t opt_large_body;
static unsigned opt_large_slots, opt_large_wait_ms;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    config_listen l;
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ty_test_http_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    store_options opt = {.busy_timeout_ms = 5000, .max_group_ops = 64, .read_connections = 2};
    assert_int_equal(store_open(f->db, &opt, &f->st, err, sizeof err), TY_OK);
    add_token(f->st, "ci", "ty_ci", STORE_SCOPE_SUBMIT | STORE_SCOPE_READ);
    add_token(f->st, "reader", "ty_reader", STORE_SCOPE_READ);
    add_token(f->st, "root", "ty_root", STORE_SCOPE_ADMIN);
    /* An hour: only an invalidation can make the cache reload during a test. */
    assert_int_equal(auth_cache_new(f->st, 3600 * 1000, &f->auth), TY_OK);
    ty_counter_vec_init(&f->requests);
    ty_histogram_init(&f->duration, ty_latency_bounds, ty_latency_nbounds);

    assert_int_equal(config_parse_listen("127.0.0.1:0", &l, err, sizeof err), TY_OK);
    http_options ho = {.listen = &l, .routes = routes, .nroutes = sizeof routes / sizeof routes[0],
                       .large_body = opt_large_body, .large_slots = opt_large_slots,
                       .large_wait_ms = opt_large_wait_ms};
    assert_int_equal(http_server_bind(&ho, &f->srv, err, sizeof err), TY_OK);
    assert_int_not_equal(http_server_port(f->srv), 0);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%u", http_server_port(f->srv));
    f->ctx = (api_ctx){.store = f->st, .max_body = MAX_BODY, .http_requests = &f->requests,
                       .http_duration = &f->duration};
    assert_int_equal(http_server_start(f->srv, &f->ctx, f->auth, err, sizeof err), TY_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    http_server_free(f->srv);
    auth_cache_free(f->auth);
    store_close(f->st);
    ty_histogram_destroy(&f->duration);
    ty_counter_vec_destroy(&f->requests);
    DIR *d = opendir(f->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* ---- a small libcurl client ---------------------------------------------- */

typedef struct reply {
    long status;
    ty_buf body;
    char request_id[128];
    char content_type[128];
    char allow[128];
    char www_auth[128];
    char connection[64];
    char transfer_encoding[64];
    json_t *json; /* the body parsed, when it is JSON */
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    return ty_buf_append(&r->body, p, size * n) == TY_OK ? size * n : 0;
}

static void copy_header(const char *line, size_t len, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    if (len <= n + 1 || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return;
    const char *v = line + n + 1;
    size_t vl = len - n - 1;
    while (vl && (*v == ' '))
        v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
        vl--;
    snprintf(out, outlen, "%.*s", (int)vl, v);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;
    copy_header(p, len, "X-Request-Id", r->request_id, sizeof r->request_id);
    copy_header(p, len, "Content-Type", r->content_type, sizeof r->content_type);
    copy_header(p, len, "Allow", r->allow, sizeof r->allow);
    copy_header(p, len, "WWW-Authenticate", r->www_auth, sizeof r->www_auth);
    copy_header(p, len, "Connection", r->connection, sizeof r->connection);
    copy_header(p, len, "Transfer-Encoding", r->transfer_encoding, sizeof r->transfer_encoding);
    return len;
}

typedef struct body_src {
    const char *data;
    size_t len, off;
} body_src;

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
    body_src *b = ud;
    size_t k = size * n;
    if (k > b->len - b->off)
        k = b->len - b->off;
    memcpy(buf, b->data + b->off, k);
    b->off += k;
    return k;
}

static void reply_free(reply *r)
{
    ty_buf_free(&r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/*
 * One request on handle h (reused for keep-alive). headers is a
 * NULL-terminated list. body with chunked = 1 is sent with
 * Transfer-Encoding: chunked.
 */
static void request(CURL *h, const fixture *f, const char *method, const char *path,
                    const char *const *headers, const char *body, size_t body_len, int chunked,
                    reply *r)
{
    char url[512];
    struct curl_slist *hl = NULL;
    body_src src = {body, body_len, 0};
    memset(r, 0, sizeof *r);
    snprintf(url, sizeof url, "%s%s", f->base, path);
    for (size_t i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    if (chunked)
        hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &src);
        if (!chunked)
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body_len);
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        print_message("%s %s: %s\n", method, path, curl_easy_strerror(cc));
    assert_int_equal(cc, CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->body.len)
        r->json = json_loadb(r->body.data, r->body.len, 0, NULL);
    curl_slist_free_all(hl);
}

static const char *jstr(const reply *r, const char *key)
{
    return json_string_value(json_object_get(r->json, key));
}

static void assert_problem(const reply *r, long status, const char *code)
{
    assert_int_equal(r->status, status);
    assert_string_equal(r->content_type, "application/problem+json");
    assert_string_equal(jstr(r, "code"), code);
    assert_int_equal(json_integer_value(json_object_get(r->json, "status")), status);
    assert_true(r->request_id[0] != '\0');
}

/* ---- tests ---------------------------------------------------------------- */

static void test_request_ids(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply a, b, c;
    request(h, f, "GET", "/open", NULL, NULL, 0, 0, &a);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.body.data, "ok\n");
    assert_string_equal(a.content_type, "text/plain");
    request(h, f, "GET", "/open", NULL, NULL, 0, 0, &b);
    assert_true(a.request_id[0] && b.request_id[0]);
    assert_string_not_equal(a.request_id, b.request_id);

    const char *sane[] = {"X-Request-Id: abc-123.x:y_Z", NULL};
    request(h, f, "GET", "/open", sane, NULL, 0, 0, &c);
    assert_string_equal(c.request_id, "abc-123.x:y_Z");
    reply_free(&c);
    const char *insane[] = {"X-Request-Id: has space", NULL};
    request(h, f, "GET", "/open", insane, NULL, 0, 0, &c);
    assert_string_not_equal(c.request_id, "has space");
    assert_true(c.request_id[0] != '\0');
    reply_free(&a);
    reply_free(&b);
    reply_free(&c);
    curl_easy_cleanup(h);
}

static void test_not_found_and_bad_method(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    request(h, f, "GET", "/nope", NULL, NULL, 0, 0, &r);
    assert_problem(&r, 404, "not-found");
    reply_free(&r);
    request(h, f, "PUT", "/echo", NULL, NULL, 0, 0, &r);
    assert_problem(&r, 405, "method-not-allowed");
    assert_string_equal(r.allow, "GET, POST");
    reply_free(&r);
    request(h, f, "POST", "/open", NULL, "x", 1, 0, &r);
    assert_problem(&r, 405, "method-not-allowed");
    assert_string_equal(r.allow, "GET");
    reply_free(&r);
    request(h, f, "HEAD", "/open", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 0);
    reply_free(&r);
    request(h, f, "GET", "/nostatus", NULL, NULL, 0, 0, &r);
    assert_problem(&r, 500, "internal");
    reply_free(&r);
    curl_easy_cleanup(h);
}

static void test_auth_errors(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    request(h, f, "GET", "/echo", NULL, NULL, 0, 0, &r);
    assert_problem(&r, 401, "unauthorized");
    assert_string_equal(r.www_auth, "Bearer");
    reply_free(&r);

    const char *bad[] = {"Authorization: Bearer ty_wrong", NULL};
    request(h, f, "GET", "/echo", bad, NULL, 0, 0, &r);
    assert_problem(&r, 401, "unauthorized");
    assert_string_equal(r.www_auth, "Bearer");
    reply_free(&r);

    const char *reader[] = {"Authorization: Bearer ty_reader", "Content-Type: application/json",
                            NULL};
    request(h, f, "POST", "/echo", reader, "{}", 2, 0, &r);
    assert_problem(&r, 403, "forbidden");
    reply_free(&r);

    request(h, f, "GET", "/echo", reader, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(&r, "principal"), "reader");
    reply_free(&r);

    const char *admin[] = {"Authorization: Bearer ty_root", NULL};
    request(h, f, "GET", "/echo", admin, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(&r, "principal"), "root");
    reply_free(&r);
    curl_easy_cleanup(h);
}

static void test_request_fields(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    const char *hdr[] = {"Authorization: Bearer ty_ci", NULL};
    request(h, f, "GET",
            "/echo?label=team=vision&label=a%3Db&state=RUNNING,FAILED&flag&name_prefix=x%20y",
            hdr, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    json_t *q = json_object_get(r.json, "query");
    assert_int_equal(json_array_size(q), 5);
    static const char *const want[5][2] = {{"label", "team=vision"}, {"label", "a=b"},
                                           {"state", "RUNNING,FAILED"}, {"flag", ""},
                                           {"name_prefix", "x y"}};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(json_string_value(json_array_get(json_array_get(q, i), 0)),
                            want[i][0]);
        assert_string_equal(json_string_value(json_array_get(json_array_get(q, i), 1)),
                            want[i][1]);
    }
    assert_true(json_is_null(json_object_get(r.json, "id")));
    assert_string_equal(jstr(&r, "path"), "/echo");
    reply_free(&r);

    request(h, f, "GET", "/echo/ab%63", hdr, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(&r, "id"), "abc");
    reply_free(&r);

    const char *post[] = {"Authorization: Bearer ty_ci",
                          "Content-Type: application/json; charset=utf-8",
                          "Idempotency-Key: key-1", NULL};
    request(h, f, "POST", "/echo", post, "{\"a\":1}", 7, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "body_len")), 7);
    assert_string_equal(jstr(&r, "content_type"), "application/json; charset=utf-8");
    assert_string_equal(jstr(&r, "idempotency_key"), "key-1");
    assert_string_equal(jstr(&r, "method"), "POST");
    assert_string_equal(jstr(&r, "request_id"), r.request_id);
    reply_free(&r);
    curl_easy_cleanup(h);
}

static void test_body_limits(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    char *big = malloc(MAX_BODY * 3);
    assert_non_null(big);
    memset(big, 'x', MAX_BODY * 3);
    const char *hdr[] = {"Authorization: Bearer ty_ci", "Content-Type: application/json", NULL};

    request(h, f, "POST", "/echo", hdr, big, MAX_BODY, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "body_len")), MAX_BODY);
    reply_free(&r);

    /* Declared too large: refused before the body is read. */
    request(h, f, "POST", "/echo", hdr, big, MAX_BODY + 1, 0, &r);
    assert_problem(&r, 413, "body-too-large");
    reply_free(&r);

    /* Chunked, so the size is only known while reading. */
    request(h, f, "POST", "/echo", hdr, big, MAX_BODY * 3, 1, &r);
    assert_problem(&r, 413, "body-too-large");
    reply_free(&r);
    request(h, f, "POST", "/echo", hdr, big, 10, 1, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "body_len")), 10);
    reply_free(&r);

    /* The connection is still usable after a refused body. */
    request(h, f, "GET", "/open", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    free(big);
    curl_easy_cleanup(h);
}

/*
 * A chunked body far past the cap is not read to its end: once DISCARD_MAX
 * bytes were dropped the server answers 413 and closes, and the client, still
 * writing, reads that answer (not a reset connection).
 */
static void test_endless_body_gets_413(void **state)
{
    fixture *f = *state;
    size_t len = (size_t)16 << 20;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'x', len);
    body_src src = {big, len, 0};
    reply r;
    memset(&r, 0, sizeof r);
    char url[128];
    snprintf(url, sizeof url, "%s/echo", f->base);
    struct curl_slist *hl = curl_slist_append(NULL, "Authorization: Bearer ty_ci");
    hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    hl = curl_slist_append(hl, "Expect:");
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &src);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        print_message("POST /echo: %s\n", curl_easy_strerror(cc));
    assert_int_equal(cc, CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    r.json = json_loadb(r.body.data, r.body.len, 0, NULL);
    assert_problem(&r, 413, "body-too-large");
    assert_string_equal(r.connection, "close");
    assert_true(src.off < len); /* the upload did not go through */
    reply_free(&r);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    free(big);
}

static void test_keep_alive(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    long connects = -1;
    request(h, f, "GET", "/open", NULL, NULL, 0, 0, &r);
    reply_free(&r);
    const char *hdr[] = {"Authorization: Bearer ty_ci", "Content-Type: application/json", NULL};
    for (int i = 0; i < 5; i++) {
        request(h, f, "POST", "/echo", hdr, "{}", 2, 0, &r);
        assert_int_equal(r.status, 200);
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
        assert_int_equal(connects, 0); /* the first connection was reused */
        reply_free(&r);
    }
    curl_easy_cleanup(h);
}

static void test_token_change_invalidates_cache(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    const char *ci[] = {"Authorization: Bearer ty_ci", NULL};
    const char *root[] = {"Authorization: Bearer ty_root", NULL};
    request(h, f, "GET", "/echo", ci, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    request(h, f, "DELETE", "/v1/tokens/ci", root, NULL, 0, 0, &r);
    assert_int_equal(r.status, 204);
    reply_free(&r);
    request(h, f, "GET", "/echo", ci, NULL, 0, 0, &r);
    assert_problem(&r, 401, "unauthorized");
    reply_free(&r);
    curl_easy_cleanup(h);
}

static uint64_t counter(fixture *f, const char *route, const char *code)
{
    uint64_t v = 0;
    pthread_mutex_lock(&f->requests.mu);
    for (size_t i = 0; i < f->requests.n; i++)
        if (strcmp(f->requests.entries[i].label1, route) == 0 &&
            strcmp(f->requests.entries[i].label2, code) == 0)
            v = f->requests.entries[i].value;
    pthread_mutex_unlock(&f->requests.mu);
    return v;
}

static void test_metrics(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    const char *ci[] = {"Authorization: Bearer ty_ci", NULL};
    request(h, f, "GET", "/echo/x1", ci, NULL, 0, 0, &r);
    reply_free(&r);
    request(h, f, "GET", "/echo/x2", ci, NULL, 0, 0, &r);
    reply_free(&r);
    request(h, f, "GET", "/missing", NULL, NULL, 0, 0, &r);
    reply_free(&r);
    curl_easy_cleanup(h); /* closing the connection lets the last completion run */
    /* Counting happens after the response is sent: wait for it. */
    for (int i = 0; i < 500 && (counter(f, "/echo/{id}", "200") < 2 ||
                                counter(f, "unmatched", "404") < 1);
         i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    assert_int_equal(counter(f, "/echo/{id}", "200"), 2);
    assert_int_equal(counter(f, "unmatched", "404"), 1);
    pthread_mutex_lock(&f->duration.mu);
    assert_true(f->duration.count >= 3);
    pthread_mutex_unlock(&f->duration.mu);
}

static int setup_one_large_slot(void **state)
{
    opt_large_body = 100;
    opt_large_slots = 1;
    opt_large_wait_ms = 100;
    int rc = setup(state);
    opt_large_body = 0;
    opt_large_slots = 0;
    opt_large_wait_ms = 0;
    return rc;
}

typedef struct post_call {
    fixture *f;
    size_t len;
    int chunked;
    long status;
} post_call;

static void *post_thread(void *arg)
{
    post_call *pc = arg;
    CURL *h = curl_easy_init();
    char *body = malloc(pc->len);
    memset(body, 'y', pc->len);
    reply r;
    request(h, pc->f, "POST", "/slow", NULL, body, pc->len, pc->chunked, &r);
    pc->status = r.status;
    reply_free(&r);
    free(body);
    curl_easy_cleanup(h);
    return NULL;
}

/* With one slot for large bodies, a second large body waits, then gets 503; small ones pass. */
static void test_large_body_slots(void **state)
{
    fixture *f = *state;
    pthread_t t;
    post_call first = {.f = f, .len = 500};
    atomic_store(&slow_entered, 0);
    set_gate(0);
    assert_int_equal(pthread_create(&t, NULL, post_thread, &first), 0);
    for (int i = 0; i < 1000 && !atomic_load(&slow_entered); i++) {
        struct timespec w = {0, 5 * 1000 * 1000};
        nanosleep(&w, NULL);
    }
    assert_true(atomic_load(&slow_entered)); /* the first holds the slot until the gate opens */

    CURL *h = curl_easy_init();
    char body[500];
    memset(body, 'z', sizeof body);
    reply r;
    request(h, f, "POST", "/slow", NULL, body, sizeof body, 0, &r);
    assert_problem(&r, 503, "unavailable");
    reply_free(&r);
    request(h, f, "POST", "/slow", NULL, body, sizeof body, 1, &r); /* chunked */
    assert_problem(&r, 503, "unavailable");
    reply_free(&r);
    const char *ci[] = {"Authorization: Bearer ty_ci", NULL};
    request(h, f, "POST", "/echo", ci, body, 50, 0, &r); /* small: no slot needed */
    assert_int_equal(r.status, 200);
    reply_free(&r);
    set_gate(1);

    pthread_join(t, NULL);
    assert_int_equal(first.status, 200);
    /* The slot is free again once the first request completed. */
    for (int i = 0; i < 2; i++) {
        request(h, f, "POST", "/slow", NULL, body, sizeof body, i, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(json_integer_value(json_object_get(r.json, "body_len")), sizeof body);
        reply_free(&r);
    }
    curl_easy_cleanup(h);
}

typedef struct slow_call {
    fixture *f;
    long status;
    char body[16];
} slow_call;

static void *slow_thread(void *arg)
{
    slow_call *sc = arg;
    CURL *h = curl_easy_init();
    reply r;
    char url[128];
    memset(&r, 0, sizeof r);
    snprintf(url, sizeof url, "%s/slow", sc->f->base);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &sc->status);
    snprintf(sc->body, sizeof sc->body, "%s", r.body.data ? r.body.data : "");
    reply_free(&r);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_graceful_shutdown(void **state)
{
    fixture *f = *state;
    pthread_t t;
    slow_call sc = {.f = f};
    atomic_store(&slow_entered, 0);
    assert_int_equal(pthread_create(&t, NULL, slow_thread, &sc), 0);
    for (int i = 0; i < 1000 && !atomic_load(&slow_entered); i++) {
        struct timespec w = {0, 5 * 1000 * 1000};
        nanosleep(&w, NULL);
    }
    assert_true(atomic_load(&slow_entered));
    http_server_shutdown(f->srv, 5000);
    pthread_join(t, NULL);
    assert_int_equal(sc.status, 200);
    assert_string_equal(sc.body, "slow\n");

    /* Nothing listens any more. */
    CURL *h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/open", f->base);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    reply r;
    memset(&r, 0, sizeof r);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    assert_int_equal(curl_easy_perform(h), CURLE_COULDNT_CONNECT);
    reply_free(&r);
    curl_easy_cleanup(h);
}

/* Waits until every stream a handler made has been freed (failing after 10 s). */
static void wait_streams_freed(void)
{
    for (int i = 0; i < 1000 && atomic_load(&streams_open) != 0; i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    assert_int_equal(atomic_load(&streams_open), 0);
}

/* A GET that may fail: the reply so far and curl's result. */
static CURLcode get_raw(CURL *h, const fixture *f, const char *path, reply *r)
{
    char url[256];
    memset(r, 0, sizeof *r);
    snprintf(url, sizeof url, "%s%s", f->base, path);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    return cc;
}

static void test_stream(void **state)
{
    fixture *f = *state;
    CURL *h = curl_easy_init();
    reply r;
    char *want = malloc(STREAM_PIECES * PIECE_LEN);
    assert_non_null(want);
    for (int i = 0; i < STREAM_PIECES; i++)
        make_piece(i, want + (size_t)i * PIECE_LEN);

    /* Several blocks arrive complete and in order, chunked. */
    request(h, f, "GET", "/stream", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/plain; charset=utf-8");
    assert_string_equal(r.transfer_encoding, "chunked");
    assert_true(r.request_id[0] != '\0');
    assert_int_equal(r.body.len, STREAM_PIECES * PIECE_LEN);
    assert_memory_equal(r.body.data, want, STREAM_PIECES * PIECE_LEN);
    reply_free(&r);

    /* The connection stays usable after a stream that ended. */
    request(h, f, "GET", "/open", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    long connects = -1;
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
    assert_int_equal(connects, 0);
    reply_free(&r);

    /* HEAD sends no body, and the stream is freed all the same. */
    request(h, f, "HEAD", "/stream", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 0);
    reply_free(&r);
    wait_streams_freed();

    /*
     * -1 in the middle: the connection closes without the last chunk, so the
     * client cannot take the body for complete. (The close may be abortive, and
     * then even what was sent before is lost: the status may be missing too.)
     */
    CURLcode cc = get_raw(h, f, "/stream/fail", &r);
    assert_int_not_equal(cc, CURLE_OK);
    assert_true(r.status == 200 || r.status == 0);
    assert_true(r.body.len <= 3 * PIECE_LEN);
    assert_true(r.body.len == 0 || memcmp(r.body.data, want, r.body.len) == 0);
    reply_free(&r);
    wait_streams_freed();

    /* The server goes on. */
    request(h, f, "GET", "/stream", NULL, NULL, 0, 0, &r);
    assert_int_equal(r.body.len, STREAM_PIECES * PIECE_LEN);
    reply_free(&r);
    curl_easy_cleanup(h);
    wait_streams_freed();

    /* Each stream is counted once it completed. */
    for (int i = 0; i < 500 && counter(f, "/stream", "200") < 3; i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    assert_int_equal(counter(f, "/stream", "200"), 3); /* GET, HEAD, GET */
    assert_int_equal(counter(f, "/stream/{id}", "200"), 1);
    free(want);
}

/* 1 when the file at path holds the log line of the streamed request "streamed-1". */
static int has_stream_log_line(const char *path)
{
    FILE *in = fopen(path, "r");
    char line[4096], bytes[64];
    int found = 0;
    snprintf(bytes, sizeof bytes, "\"bytes\":%d,", STREAM_PIECES * PIECE_LEN);
    while (in && fgets(line, sizeof line, in))
        if (strstr(line, "\"msg\":\"request\"") && strstr(line, "\"request_id\":\"streamed-1\""))
            found = strstr(line, "\"route\":\"/stream\"") && strstr(line, "\"status\":200") &&
                    strstr(line, bytes) && !strstr(line, "aborted");
    if (in)
        fclose(in);
    return found;
}

/* The request's log line is written once a stream has ended, with the bytes sent. */
static void test_stream_log_line(void **state)
{
    fixture *f = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/stderr.log", f->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    ty_log_set_level(TY_LOG_INFO);

    CURL *h = curl_easy_init();
    reply r;
    const char *id[] = {"X-Request-Id: streamed-1", NULL};
    request(h, f, "GET", "/stream", id, NULL, 0, 0, &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    curl_easy_cleanup(h); /* closing the connection lets the completion run */
    int found = 0;
    for (int i = 0; i < 500 && !(found = has_stream_log_line(path)); i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    ty_log_set_level(TY_LOG_ERROR);
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    close(fd);
    assert_true(found);
}

typedef struct endless_call {
    fixture *f;
    atomic_size_t got;
    CURLcode cc;
} endless_call;

static size_t count_body(char *p, size_t size, size_t n, void *ud)
{
    endless_call *ec = ud;
    (void)p;
    atomic_fetch_add(&ec->got, size * n);
    return size * n;
}

static void *endless_thread(void *arg)
{
    endless_call *ec = arg;
    char url[128];
    CURL *h = curl_easy_init();
    snprintf(url, sizeof url, "%s/stream/endless", ec->f->base);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, count_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ec);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    ec->cc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    return NULL;
}

/* A stream that never ends does not hold shutdown: it is cut after the drain. */
static void test_shutdown_cuts_endless_stream(void **state)
{
    fixture *f = *state;
    pthread_t t;
    endless_call ec = {.f = f};
    atomic_init(&ec.got, 0);
    assert_int_equal(pthread_create(&t, NULL, endless_thread, &ec), 0);
    for (int i = 0; i < 2000 && atomic_load(&ec.got) < 10 * PIECE_LEN; i++) {
        struct timespec w = {0, 5 * 1000 * 1000};
        nanosleep(&w, NULL);
    }
    assert_true(atomic_load(&ec.got) >= 10 * PIECE_LEN);
    http_server_shutdown(f->srv, 200);
    pthread_join(t, NULL);
    assert_int_not_equal(ec.cc, CURLE_OK); /* cut off, not a clean end */
    assert_int_equal(atomic_load(&streams_open), 0);
}

/* ---- framing: http_check_framing() as a table ----------------------------- */

/* A field of a framing case; vlen 0 means strlen(value), cut as in http_field. */
typedef struct case_field {
    const char *name;
    const char *value;
    size_t vlen;
    int cut;
} case_field;

typedef struct framing_case {
    const char *what;
    int http11;
    case_field f[5]; /* up to the first NULL name */
    unsigned status; /* 0, 400 or 501 */
    const char *detail_has; /* a fragment of the detail, or NULL */
} framing_case;

#define HOST {"Host", "trainyard", 0, 0}

static const framing_case framing_cases[] = {
    {"plain GET", 1, {HOST}, 0, NULL},
    {"a body by length", 1, {HOST, {"Content-Length", "42", 0, 0}}, 0, NULL},
    {"a chunked body", 1, {HOST, {"transfer-encoding", "Chunked", 0, 0}}, 0, NULL},
    {"HTTP/1.0 needs no Host", 0, {{"Accept", "*/*", 0, 0}}, 0, NULL},
    {"HTAB and obs-text in a value", 1, {HOST, {"X-A", "caf\xc3\xa9\tx", 0, 0}}, 0, NULL},
    {"one Authorization", 1, {HOST, {"Authorization", "Bearer t", 0, 0}}, 0, NULL},
    {"empty Host", 1, {{"Host", "", 0, 0}}, 0, NULL},
    {"CL and TE", 1,
     {HOST, {"Content-Length", "10", 0, 0}, {"Transfer-Encoding", "chunked", 0, 0}}, 400,
     "both"},
    {"TE and CL", 1,
     {HOST, {"Transfer-Encoding", "chunked", 0, 0}, {"Content-Length", "0", 0, 0}}, 400, "both"},
    {"two differing CL", 1,
     {HOST, {"Content-Length", "5", 0, 0}, {"Content-Length", "6", 0, 0}}, 400,
     "more than once"},
    {"two equal CL", 1, {HOST, {"Content-Length", "5", 0, 0}, {"content-length", "5", 0, 0}}, 400,
     "more than once"},
    {"CL list", 1, {HOST, {"Content-Length", "5, 5", 0, 0}}, 400, "decimal"},
    {"CL negative", 1, {HOST, {"Content-Length", "-1", 0, 0}}, 400, "decimal"},
    {"CL empty", 1, {HOST, {"Content-Length", "", 0, 0}}, 400, "decimal"},
    {"CL trailing space", 1, {HOST, {"Content-Length", "5 ", 0, 0}}, 400, "decimal"},
    {"space before the colon", 1, {HOST, {"Transfer-Encoding ", "chunked", 0, 0}}, 400,
     "whitespace"},
    {"tab before the colon", 1, {HOST, {"X-A\t", "1", 0, 0}}, 400, "whitespace"},
    {"empty name", 1, {HOST, {"", "x", 0, 0}}, 400, "empty name"},
    {"unknown coding", 1, {HOST, {"Transfer-Encoding", "xchunked", 0, 0}}, 501, "only chunked"},
    {"chunked, identity", 1, {HOST, {"Transfer-Encoding", "chunked, identity", 0, 0}}, 501,
     "only chunked"},
    {"gzip, chunked", 1, {HOST, {"Transfer-Encoding", "gzip, chunked", 0, 0}}, 501,
     "only chunked"},
    {"gzip then chunked in two fields", 1,
     {HOST, {"Transfer-Encoding", "gzip", 0, 0}, {"Transfer-Encoding", "chunked", 0, 0}}, 501,
     "only chunked"},
    {"chunked twice in two fields", 1,
     {HOST, {"Transfer-Encoding", "chunked", 0, 0}, {"Transfer-Encoding", "chunked", 0, 0}}, 400,
     "once"},
    {"chunked twice in one field", 1, {HOST, {"Transfer-Encoding", "chunked, chunked", 0, 0}},
     400, "once"},
    {"empty coding", 1, {HOST, {"Transfer-Encoding", "chunked,", 0, 0}}, 400, "once"},
    {"empty TE", 1, {HOST, {"Transfer-Encoding", "", 0, 0}}, 400, "once"},
    {"chunked with a trailing space", 1, {HOST, {"Transfer-Encoding", "chunked ", 0, 0}}, 400,
     "once"},
    {"TE in HTTP/1.0", 0, {{"Transfer-Encoding", "chunked", 0, 0}}, 400, "HTTP/1.0"},
    {"bare CR in a value", 1, {HOST, {"X-A", "a\rb", 0, 0}}, 400, "control"},
    {"LF in a value", 1, {HOST, {"X-A", "a\nb", 0, 0}}, 400, "control"},
    {"NUL in Authorization", 1, {HOST, {"Authorization", "Bearer t\0xyz", 12, 0}}, 400,
     "control"},
    {"DEL in a value", 1, {HOST, {"X-A", "a\x7f", 0, 0}}, 400, "control"},
    {"a field cut by the parser", 1, {HOST, {"Authorization", "Bearer t", 0, 1}}, 400, "NUL"},
    {"HTTP/1.1 without Host", 1, {{"Accept", "*/*", 0, 0}}, 400, "needs a Host"},
    {"two Host", 1, {HOST, HOST}, 400, "Host appears more than once"},
    {"two Authorization", 1,
     {HOST, {"Authorization", "Bearer a", 0, 0}, {"authorization", "Bearer b", 0, 0}}, 400,
     "Authorization appears more than once"},
};

static void test_framing_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof framing_cases / sizeof framing_cases[0]; i++) {
        const framing_case *c = &framing_cases[i];
        http_field f[5];
        size_t n = 0;
        for (; n < 5 && c->f[n].name; n++) {
            f[n].name = c->f[n].name;
            f[n].name_len = strlen(c->f[n].name);
            f[n].value = c->f[n].value;
            f[n].value_len = c->f[n].vlen ? c->f[n].vlen : strlen(c->f[n].value);
            f[n].cut = c->f[n].cut;
        }
        http_framing v = http_check_framing(f, n, c->http11);
        if (v.status != c->status)
            fail_msg("%s: status %u, expected %u (%s)", c->what, v.status, c->status,
                     v.detail ? v.detail : "");
        if (!c->status) {
            assert_null(v.code);
            continue;
        }
        assert_string_equal(v.code, c->status == 501 ? "not-implemented" : "malformed-request");
        if (c->detail_has && !strstr(v.detail, c->detail_has))
            fail_msg("%s: detail \"%s\" lacks \"%s\"", c->what, v.detail, c->detail_has);
    }
}

int main(void)
{
    ty_log_set_level(TY_LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_request_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found_and_bad_method, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_endless_body_gets_413, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_body_slots, setup_one_large_slot, teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_change_invalidates_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graceful_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_log_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_cuts_endless_stream, setup, teardown),
        cmocka_unit_test(test_framing_table),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
