/*
 * test_api_http.c - the HTTP API of the real `trainyard` binary, end to end.
 *
 * Usage: test_api_http TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
 * Most cases share one server started by the group setup; each case tags its
 * jobs with its own label or names, so cases do not see each other's jobs.
 * Cases about startup, the data directory and shutdown start their own.
 * Every response is checked against openapi.yaml by the harness.
 *
 * The cases are about the API, not about running jobs (test_jobs_run.c): their
 * servers run with every queue paused (--queue-limit 0), so that a submitted
 * job stays PENDING until the test moves it.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "tests/support/ty_harness.h"

static ty_server *g_srv;
static ty_client *g_admin;
static int g_counter;
/* Secrets of the tokens created during the run: none may appear in the log. */
static char g_secrets[32][128];
static size_t g_nsecrets;

#define EXPECT_STATUS(r, want)                                                                     \
    do {                                                                                           \
        if ((r)->status != (want))                                                                 \
            fail_msg("%s:%d: expected HTTP %d, got %ld: %.*s", __FILE__, __LINE__, (int)(want),    \
                     (r)->status, (int)((r)->body_len > 600 ? 600 : (r)->body_len), (r)->body);    \
    } while (0)

/* ---- helpers ------------------------------------------------------------- */

/* A unique DNS-label name: "<prefix>-<n>", in a buffer reused after eight calls. */
static const char *uniq(const char *prefix)
{
    static char buf[8][64];
    static int slot;
    char *b = buf[slot++ % 8];
    snprintf(b, 64, "%s-%d", prefix, ++g_counter);
    return b;
}

/* A minimal valid spec (new). */
static json_t *spec_new(const char *name)
{
    return json_pack("{s:s, s:s, s:[s], s:{s:i}}", "name", name, "image",
                     "registry.example/worker:1.0", "command", "train", "workers", "count", 2);
}

/* Serializes and frees j. */
static char *dumps(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    assert_non_null(s);
    return s;
}

/* POST /v1/jobs expecting 201; returns the job (new). spec is stolen. */
static json_t *submit_ok(ty_client *c, json_t *spec)
{
    char *body = dumps(spec);
    ty_http_resp *r = ty_req(c, "POST", "/v1/jobs", body);
    json_t *job;

    free(body);
    EXPECT_STATUS(r, 201);
    job = json_incref(r->json);
    ty_resp_destroy(r);
    return job;
}

static ty_http_resp *get_job(ty_client *c, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    return ty_req(c, "GET", path, NULL);
}

static ty_http_resp *cancel_job(ty_client *c, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    return ty_req(c, "POST", path, NULL);
}

/* Checks a problem+json response: status, content type, code. */
static void expect_problem(const ty_http_resp *r, long status, const char *code)
{
    const char *ct = ty_resp_header(r, "Content-Type");

    EXPECT_STATUS(r, status);
    if (!ct || strncmp(ct, "application/problem+json", 24) != 0)
        fail_msg("HTTP %ld with content type '%s', expected application/problem+json", status,
                 ct ? ct : "(none)");
    assert_non_null(r->json);
    if (code && (!ty_json_str(r->json, "code") || strcmp(ty_json_str(r->json, "code"), code) != 0))
        fail_msg("HTTP %ld: problem code '%s', expected '%s': %s", status,
                 ty_json_str(r->json, "code") ? ty_json_str(r->json, "code") : "(none)", code,
                 r->body);
    assert_int_equal(json_integer_value(json_object_get(r->json, "status")), status);
}

/* Whether the problem lists an error at path (a trailing '*' matches a prefix). */
static int has_error_path(const json_t *problem, const char *path)
{
    const json_t *errors = json_object_get(problem, "errors"), *e;
    size_t i, n = strlen(path);
    int prefix = n > 0 && path[n - 1] == '*';

    json_array_foreach(errors, i, e) {
        const char *p = ty_json_str(e, "path");
        if (!p)
            continue;
        if (prefix ? strncmp(p, path, n - 1) == 0 : strcmp(p, path) == 0)
            return 1;
    }
    return 0;
}

static void expect_error_path(const ty_http_resp *r, const char *path)
{
    if (!has_error_path(r->json, path))
        fail_msg("no error at %s in: %s", path, r->body);
}

/* URL-encodes s into a static buffer (one of four). */
static const char *qenc(const char *s)
{
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ % 4];
    char *e = curl_easy_escape(NULL, s, 0);

    assert_non_null(e);
    snprintf(b, 512, "%s", e);
    curl_free(e);
    return b;
}

/* GET /v1/jobs?query expecting 200; returns the body (new). */
static json_t *list_ok(ty_client *c, const char *query)
{
    char path[2048];
    ty_http_resp *r;
    json_t *j;

    snprintf(path, sizeof path, "/v1/jobs?%s", query);
    r = ty_req(c, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    j = json_incref(r->json);
    ty_resp_destroy(r);
    return j;
}

static const char *job_id(const json_t *job)
{
    const char *id = ty_json_str(job, "id");
    assert_non_null(id);
    return id;
}

/* Creates a token through the API; returns its secret (static slot). */
static const char *create_token(const char *name, const char *scopes_json)
{
    char body[512];
    ty_http_resp *r;
    const char *secret;

    snprintf(body, sizeof body, "{\"name\": \"%s\", \"scopes\": %s}", name, scopes_json);
    r = ty_req(g_admin, "POST", "/v1/tokens", body);
    EXPECT_STATUS(r, 201);
    secret = ty_json_str(r->json, "token");
    assert_non_null(secret);
    assert_true(strncmp(secret, "ty_", 3) == 0);
    assert_true(g_nsecrets < sizeof g_secrets / sizeof g_secrets[0]);
    snprintf(g_secrets[g_nsecrets], sizeof g_secrets[0], "%s", secret);
    ty_resp_destroy(r);
    return g_secrets[g_nsecrets++];
}

/* Polls path with token until it answers want (5 s at most). */
static void poll_status(const char *token, const char *method, const char *path, long want)
{
    ty_client *c = ty_client_new(g_srv, token);
    int64_t deadline = ty_now_ms() + 5000;
    long last = 0;

    assert_non_null(c);
    for (;;) {
        ty_http_resp *r = ty_req(c, method, path, NULL);
        last = r->status;
        ty_resp_destroy(r);
        if (last == want || ty_now_ms() > deadline)
            break;
        ty_sleep_ms(50);
    }
    ty_client_free(c);
    if (last != want)
        fail_msg("%s %s kept answering %ld, expected %ld within 5 s", method, path, last, want);
}

/* Value of the first sample of metric `name` whose labels include every
 * `k="v"` in labels (NULL-terminated); -1 when absent. */
static double metric(const char *text, const char *name, const char *const *labels)
{
    const char *line = text;
    size_t n = strlen(name);

    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (line[0] != '#' && len > n && strncmp(line, name, n) == 0 &&
            (line[n] == ' ' || line[n] == '{')) {
            const char *value = memchr(line, ' ', len);
            char lab[1024];
            int ok = 1;
            snprintf(lab, sizeof lab, "%.*s", (int)(value ? value - line : 0), line);
            for (size_t i = 0; labels && labels[i]; i++)
                if (!strstr(lab, labels[i]))
                    ok = 0;
            if (ok && value)
                return strtod(value + 1, NULL);
        }
        line = end ? end + 1 : NULL;
    }
    return -1;
}

static char *get_metrics(void)
{
    ty_http_resp *r = ty_req(g_admin, "GET", "/metrics", NULL);
    char *text;

    EXPECT_STATUS(r, 200);
    text = strdup(r->body);
    ty_resp_destroy(r);
    assert_non_null(text);
    return text;
}

/* Polls the server log for the request line of request_id (5 s at most) and
 * checks its fields. */
static void expect_request_logged(const char *request_id, const char *route, long status)
{
    int64_t deadline = ty_now_ms() + 5000;

    for (;;) {
        char *log = ty_server_log(g_srv), *line, *next;
        assert_non_null(log);
        for (line = log; line && *line; line = next) {
            json_t *j;
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            j = json_loads(line, 0, NULL);
            if (j && ty_json_str(j, "msg") && strcmp(ty_json_str(j, "msg"), "request") == 0 &&
                ty_json_str(j, "request_id") &&
                strcmp(ty_json_str(j, "request_id"), request_id) == 0) {
                static const char *const fields[] = {"ts",          "level", "method",
                                                     "path",        "route", "status",
                                                     "duration_ms", "bytes", "principal"};
                for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
                    if (!json_object_get(j, fields[i]))
                        fail_msg("the request log line lacks \"%s\": %s", fields[i], line);
                if (!ty_json_str(j, "route") || strcmp(ty_json_str(j, "route"), route) != 0 ||
                    json_integer_value(json_object_get(j, "status")) != status)
                    fail_msg("request log line: expected route %s status %ld: %s", route, status,
                             line);
                json_decref(j);
                free(log);
                return;
            }
            json_decref(j);
        }
        free(log);
        if (ty_now_ms() > deadline)
            fail_msg("no request log line with request_id %s", request_id);
        ty_sleep_ms(20);
    }
}

/* ---- group setup --------------------------------------------------------- */

/* Server arguments that keep every job PENDING (see the top of the file). */
static const char *const paused[] = {"--queue-limit", "0", NULL};

static int group_setup(void **state)
{
    ty_server_opts opts = {.args = paused};
    char err[2048];

    (void)state;
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    return g_admin ? 0 : -1;
}

static int group_teardown(void **state)
{
    char err[512];
    int wstatus = 0, rc = 0;
    char *log;

    (void)state;
    ty_client_free(g_admin);
    if (ty_server_stop(g_srv, 20000, &wstatus, err, sizeof err) < 0) {
        fprintf(stderr, "stopping the server: %s\n", err);
        rc = -1;
    } else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        fprintf(stderr, "the server exited with status %d after SIGTERM\n", wstatus);
        rc = -1;
    }
    log = ty_server_log(g_srv);
    if (log && strstr(log, TY_TEST_ADMIN_TOKEN)) {
        fprintf(stderr, "the server log contains the admin token\n");
        rc = -1;
    }
    if (log && strstr(log, "registry.example/worker")) {
        fprintf(stderr, "the server log contains request bodies\n");
        rc = -1;
    }
    for (size_t i = 0; log && i < g_nsecrets; i++)
        if (strstr(log, g_secrets[i])) {
            fprintf(stderr, "the server log contains the secret of a created token\n");
            rc = -1;
        }
    if (rc != 0 && log) {
        size_t len = strlen(log);
        fprintf(stderr, "server log (tail):\n%s\n", len > 4000 ? log + len - 4000 : log);
    }
    free(log);
    ty_server_free(g_srv);
    return rc;
}

/* ---- submit, get, events, cancel ----------------------------------------- */

static void test_submit_returns_created_job(void **state)
{
    json_t *spec = spec_new(uniq("sub"));
    const char *hdrs[] = {"X-Request-Id: it-req-0001", NULL};
    ty_http_req req = {.method = "POST", .path = "/v1/jobs", .headers = hdrs};
    ty_http_resp *r, *g;
    const json_t *job, *ns;
    const char *id, *loc;
    char *body, want_loc[128];

    (void)state;
    json_object_set_new(spec, "labels", json_pack("{s:s}", "team", "vision"));
    body = dumps(spec);
    req.body = body;
    r = ty_reqx(g_admin, &req);
    EXPECT_STATUS(r, 201);
    job = r->json;
    id = job_id(job);
    assert_int_equal(strlen(id), 26);
    assert_int_equal(strspn(id, "0123456789abcdefghijklmnopqrstuvwxyz"), 26);
    assert_string_equal(ty_json_str(job, "state"), "PENDING");
    assert_string_equal(ty_json_str(job, "queue"), "default");
    assert_int_equal(json_integer_value(json_object_get(job, "priority")), 0);
    assert_int_equal(json_integer_value(json_object_get(job, "attempt")), 0);
    assert_string_equal(ty_resp_header(r, "X-Request-Id"), "it-req-0001");

    /* Location names the job, relative or absolute. */
    loc = ty_resp_header(r, "Location");
    assert_non_null(loc);
    snprintf(want_loc, sizeof want_loc, "/v1/jobs/%s", id);
    if (strcmp(loc, want_loc) != 0 &&
        !(strncmp(loc, ty_server_url(g_srv), strlen(ty_server_url(g_srv))) == 0 &&
          strcmp(loc + strlen(ty_server_url(g_srv)), want_loc) == 0))
        fail_msg("Location '%s', expected '%s'", loc, want_loc);

    /* The normalized spec has every default filled in. */
    ns = json_object_get(job, "spec");
    assert_non_null(ns);
    assert_string_equal(ty_json_str(ns, "queue"), "default");
    assert_int_equal(json_integer_value(json_object_get(ns, "priority")), 0);
    assert_int_equal(json_array_size(json_object_get(ns, "args")), 0);
    assert_true(json_is_object(json_object_get(ns, "env")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ns, "workers"), "min")), 2);
    assert_string_equal(ty_json_str(json_object_get(ns, "resources"), "cpu"), "1");
    assert_string_equal(ty_json_str(json_object_get(ns, "resources"), "memory"), "2Gi");
    assert_string_equal(ty_json_str(json_object_get(ns, "placement"), "zone"), "auto");
    assert_string_equal(ty_json_str(json_object_get(ns, "placement"), "capacity"), "on-demand");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ns, "restart"), "max")), 0);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(ns, "restart"), "backoff_seconds")), 10);
    assert_int_equal(json_integer_value(json_object_get(ns, "ttl_seconds_after_finished")), 604800);
    assert_true(!json_object_get(ns, "timeout_seconds") ||
                json_is_null(json_object_get(ns, "timeout_seconds")));
    assert_string_equal(ty_json_str(json_object_get(ns, "labels"), "team"), "vision");

    /* GET returns the same job, but for where it stands in line: the scheduler may have
     * written its pending_reason since the 201. */
    g = ty_req(g_admin, "GET", want_loc, NULL);
    EXPECT_STATUS(g, 200);
    json_object_del(g->json, "pending_reason");
    json_object_del(r->json, "pending_reason"); /* job */
    if (!json_equal(g->json, job))
        fail_msg("GET %s differs from the 201 body:\n  %s\n  %s", want_loc, g->body, r->body);
    ty_resp_destroy(g);
    ty_resp_destroy(r);
    free(body);
    expect_request_logged("it-req-0001", "/v1/jobs", 201);
}

/* An X-Request-Id that is not sane (too long, odd characters) is replaced. */
static void test_request_id_not_echoed_when_insane(void **state)
{
    char longid[400], hdr[420];
    const char *hdrs[] = {hdr, NULL};
    ty_http_req req = {.method = "GET", .path = "/healthz", .headers = hdrs};
    static const char *const odd = "X-Request-Id: a\"b<script>";

    (void)state;
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    for (int i = 0; i < 2; i++) {
        ty_http_resp *r;
        const char *got;
        if (i == 0)
            snprintf(hdr, sizeof hdr, "X-Request-Id: %s", longid);
        else
            snprintf(hdr, sizeof hdr, "%s", odd);
        r = ty_reqx(g_admin, &req);
        EXPECT_STATUS(r, 200);
        got = ty_resp_header(r, "X-Request-Id");
        assert_non_null(got);
        if (strlen(got) == 0 || strcmp(got, hdr + 14) == 0 || strchr(got, '"') || strchr(got, '<'))
            fail_msg("X-Request-Id '%s' was echoed or not replaced by a sane one: '%s'", hdr + 14,
                     got);
        ty_resp_destroy(r);
    }
}

static void test_events_and_cancel(void **state)
{
    json_t *job = submit_ok(g_admin, spec_new(uniq("cancel")));
    char path[128];
    ty_http_resp *r;
    const json_t *events, *ev;

    (void)state;
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job_id(job));
    r = ty_req(g_admin, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    events = json_object_get(r->json, "events");
    assert_int_equal(json_array_size(events), 1);
    ev = json_array_get(events, 0);
    assert_true(json_is_null(json_object_get(ev, "from")));
    assert_string_equal(ty_json_str(ev, "to"), "PENDING");
    assert_string_equal(ty_json_str(ev, "reason"), "Submitted");
    ty_resp_destroy(r);

    /* PENDING -> CANCELLED at once; a repeat is harmless. */
    for (int i = 0; i < 2; i++) {
        r = cancel_job(g_admin, job_id(job));
        EXPECT_STATUS(r, 200);
        assert_string_equal(ty_json_str(r->json, "state"), "CANCELLED");
        assert_string_equal(ty_json_str(r->json, "id"), job_id(job));
        ty_resp_destroy(r);
    }
    r = get_job(g_admin, job_id(job));
    EXPECT_STATUS(r, 200);
    assert_string_equal(ty_json_str(r->json, "state"), "CANCELLED");
    ty_resp_destroy(r);

    r = ty_req(g_admin, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    events = json_object_get(r->json, "events");
    if (json_array_size(events) != 2)
        fail_msg("expected 2 events (Submitted, Cancelled) after two cancels, got: %s", r->body);
    ev = json_array_get(events, 1);
    assert_string_equal(ty_json_str(ev, "from"), "PENDING");
    assert_string_equal(ty_json_str(ev, "to"), "CANCELLED");
    assert_string_equal(ty_json_str(ev, "reason"), "Cancelled");
    ty_resp_destroy(r);
    json_decref(job);
}

static void test_unknown_ids_and_routes(void **state)
{
    static const struct {
        const char *method, *path;
        long status;
        const char *code;
        int outside;          /* undocumented path or method */
        const char *allow[3]; /* expected members of Allow */
    } cases[] = {
        {"GET", "/v1/jobs/00000000000000000000000000", 404, "job-not-found", 0, {NULL}},
        {"GET", "/v1/jobs/no-such-job", 404, "job-not-found", 0, {NULL}},
        {"GET", "/v1/jobs/00000000000000000000000000/events", 404, "job-not-found", 0, {NULL}},
        {"POST", "/v1/jobs/00000000000000000000000000:cancel", 404, "job-not-found", 0, {NULL}},
        {"GET", "/nope", 404, "not-found", 1, {NULL}},
        {"GET", "/v1/jobs/x/y/z", 404, "not-found", 1, {NULL}},
        {"GET", "/v2/jobs", 404, "not-found", 1, {NULL}},
        {"DELETE", "/v1/jobs", 405, "method-not-allowed", 1, {"GET", "POST"}},
        {"PUT", "/healthz", 405, "method-not-allowed", 1, {"GET"}},
        {"GET", "/v1/jobs:batch", 405, "method-not-allowed", 1, {"POST"}},
        {"PATCH", "/v1/tokens", 405, "method-not-allowed", 1, {"GET", "POST"}},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ty_http_req req = {
            .method = cases[i].method, .path = cases[i].path, .outside_contract = cases[i].outside};
        ty_http_resp *r = ty_reqx(g_admin, &req);

        expect_problem(r, cases[i].status, cases[i].code);
        if (cases[i].allow[0]) {
            const char *allow = ty_resp_header(r, "Allow");
            if (!allow)
                fail_msg("%s %s: 405 without an Allow header", cases[i].method, cases[i].path);
            for (size_t k = 0; k < 3 && cases[i].allow[k]; k++)
                if (!strstr(allow, cases[i].allow[k]))
                    fail_msg("%s %s: Allow '%s' lacks %s", cases[i].method, cases[i].path, allow,
                             cases[i].allow[k]);
            if (strstr(allow, cases[i].method))
                fail_msg("%s %s: Allow '%s' lists the refused method", cases[i].method,
                         cases[i].path, allow);
        }
        ty_resp_destroy(r);
    }
}

/* ---- listing ------------------------------------------------------------- */

/* Appends "<id>," to buf (cap bytes); fails the test when it does not fit. */
static void append_id(char *buf, size_t cap, const char *id)
{
    size_t len = strlen(buf);
    int n = snprintf(buf + len, cap - len, "%s,", id);
    if (n < 0 || (size_t)n >= cap - len)
        fail_msg("id list longer than %zu bytes", cap);
}

static size_t count_jobs(const json_t *list)
{
    return json_array_size(json_object_get(list, "jobs"));
}

/* The ids of the list, in order, as one comma-separated string (new). */
static char *ids_of(const json_t *list)
{
    const json_t *job;
    size_t i;
    size_t cap = 64 * (count_jobs(list) + 1);
    char *out = calloc(1, cap);

    assert_non_null(out);
    json_array_foreach(json_object_get(list, "jobs"), i, job)
        append_id(out, cap, job_id(job));
    return out;
}

static void test_list_filters(void **state)
{
    char run[48];
    json_t *jobs[6];
    json_t *list;
    char q[1024], *got, want[512] = "";
    char prefix[48];
    ty_http_resp *r;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("run"));
    snprintf(prefix, sizeof prefix, "%s", uniq("lst"));
    /* 6 jobs: queues a/b alternate, teams x/y, names <prefix>-i or other-i. */
    for (int i = 0; i < 6; i++) {
        char name[64];
        json_t *spec;
        snprintf(name, sizeof name, i < 4 ? "%s-%d" : "other-%s-%d", prefix, i);
        spec = spec_new(name);
        json_object_set_new(spec, "queue", json_string(i % 2 ? "qb" : "qa"));
        json_object_set_new(spec, "labels",
                            json_pack("{s:s, s:s}", "run", run, "team", i < 3 ? "x" : "y"));
        jobs[i] = submit_ok(g_admin, spec);
    }
    r = cancel_job(g_admin, job_id(jobs[1]));
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);

    /* Newest first. */
    snprintf(q, sizeof q, "label=run%%3D%s", run);
    list = list_ok(g_admin, q);
    got = ids_of(list);
    for (int i = 5; i >= 0; i--)
        append_id(want, sizeof want, job_id(jobs[i]));
    if (strcmp(got, want) != 0)
        fail_msg("label filter: got %s, want %s (newest first)", got, want);
    assert_null(json_object_get(list, "next_page_token"));
    free(got);
    json_decref(list);

    static const struct {
        const char *extra;  /* appended to label=run=<run> */
        const char *expect; /* indexes of the expected jobs, newest first */
    } cases[] = {
        {"&state=CANCELLED", "1"},
        {"&state=PENDING", "5,4,3,2,0"},
        {"&state=PENDING,CANCELLED", "5,4,3,2,1,0"},
        {"&state=RUNNING", ""},
        {"&queue=qb", "5,3,1"},
        {"&queue=qa&state=PENDING", "4,2,0"},
        {"&label=team%3Dx", "2,1,0"},
        {"&label=team%3Dy&queue=qa", "4"},
        {"&label=team%3Dnobody", ""},
        {"&name_prefix=other-", "5,4"},
        {"&name_prefix=@P", "3,2,1,0"},
        {"&limit=1000", "5,4,3,2,1,0"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char expect[512] = "";
        const char *extra = cases[c].extra;
        char extra_buf[256];
        if (strstr(extra, "@P")) {
            snprintf(extra_buf, sizeof extra_buf, "&name_prefix=%s-", prefix);
            extra = extra_buf;
        }
        snprintf(q, sizeof q, "label=run%%3D%s%s", run, extra);
        list = list_ok(g_admin, q);
        got = ids_of(list);
        for (const char *p = cases[c].expect; *p; p++)
            if (*p >= '0' && *p <= '9')
                append_id(expect, sizeof expect, job_id(jobs[*p - '0']));
        if (strcmp(got, expect) != 0)
            fail_msg("GET /v1/jobs?%s: got [%s], want [%s]", q, got, expect);
        free(got);
        json_decref(list);
    }

    /* created_after / created_before are exclusive bounds on created_at. */
    {
        const char *mid = ty_json_str(jobs[2], "created_at");
        const json_t *job;
        size_t i;
        assert_non_null(mid);
        snprintf(q, sizeof q, "label=run%%3D%s&created_after=%s", run, qenc(mid));
        list = list_ok(g_admin, q);
        json_array_foreach(json_object_get(list, "jobs"), i, job)
            if (strcmp(ty_json_str(job, "created_at"), mid) <= 0)
                fail_msg("created_after=%s returned a job created at %s", mid,
                         ty_json_str(job, "created_at"));
        got = ids_of(list);
        for (int k = 3; k < 6; k++)
            if (strcmp(ty_json_str(jobs[k], "created_at"), mid) > 0 &&
                !strstr(got, job_id(jobs[k])))
                fail_msg("created_after=%s missed a job created at %s", mid,
                         ty_json_str(jobs[k], "created_at"));
        free(got);
        json_decref(list);
        snprintf(q, sizeof q, "label=run%%3D%s&created_before=%s", run, qenc(mid));
        list = list_ok(g_admin, q);
        json_array_foreach(json_object_get(list, "jobs"), i, job)
            if (strcmp(ty_json_str(job, "created_at"), mid) >= 0)
                fail_msg("created_before=%s returned a job created at %s", mid,
                         ty_json_str(job, "created_at"));
        json_decref(list);
    }
    for (int i = 0; i < 6; i++)
        json_decref(jobs[i]);
}

static void test_list_pagination_while_inserting(void **state)
{
    char run[48];
    char *ids[12];
    char q[1024], seen[2048] = "";
    const char *token = NULL;
    json_t *page = NULL;
    int pages = 0, nseen = 0;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("page"));
    for (int i = 0; i < 12; i++) {
        json_t *spec = spec_new(uniq("pg"));
        json_t *job;
        json_object_set_new(spec, "labels", json_pack("{s:s}", "run", run));
        job = submit_ok(g_admin, spec);
        ids[i] = strdup(job_id(job));
        json_decref(job);
    }
    for (;;) {
        json_t *next;
        const json_t *job;
        size_t i;

        if (token)
            snprintf(q, sizeof q, "label=run%%3D%s&limit=5&page_token=%s", run, qenc(token));
        else
            snprintf(q, sizeof q, "label=run%%3D%s&limit=5", run);
        next = list_ok(g_admin, q);
        json_decref(page);
        page = next;
        pages++;
        assert_true(count_jobs(page) <= 5);
        json_array_foreach(json_object_get(page, "jobs"), i, job) {
            if (strstr(seen, job_id(job)))
                fail_msg("page %d repeats job %s", pages, job_id(job));
            append_id(seen, sizeof seen, job_id(job));
            nseen++;
        }
        /* New jobs while paging are newer: they must not shift later pages. */
        for (int k = 0; k < 2; k++) {
            json_t *spec = spec_new(uniq("pg-late"));
            json_object_set_new(spec, "labels", json_pack("{s:s}", "run", run));
            json_decref(submit_ok(g_admin, spec));
        }
        token = ty_json_str(page, "next_page_token");
        if (!token)
            break;
        assert_true(pages < 10);
    }
    if (nseen != 12)
        fail_msg("paging saw %d jobs, expected the 12 that existed when it began: %s", nseen, seen);
    for (int i = 0; i < 12; i++) {
        if (!strstr(seen, ids[i]))
            fail_msg("paging skipped job %s", ids[i]);
        free(ids[i]);
    }
    assert_int_equal(pages, 3);
    json_decref(page);
}

static void test_list_bad_queries(void **state)
{
    static const struct {
        const char *query;
        const char *path;
    } cases[] = {
        {"limit=0", "query.limit"},
        {"limit=1001", "query.limit"},
        {"limit=abc", "query.limit"},
        {"limit=", "query.limit"},
        {"state=BOGUS", "query.state"},
        {"state=PENDING,,RUNNING", "query.state"},
        {"state=", "query.state"},
        {"created_after=yesterday", "query.created_after"},
        {"created_before=2026-13-45T00:00:00Z", "query.created_before"},
        {"page_token=garbage!", "query.page_token"},
        {"colour=blue", "query.colour"},
        {"label=novalue", "query.label"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        ty_http_resp *r;
        snprintf(path, sizeof path, "/v1/jobs?%s", cases[i].query);
        r = ty_req(g_admin, "GET", path, NULL);
        if (r->status != 400)
            fail_msg("GET %s: expected 400 invalid-query, got %ld: %s", path, r->status, r->body);
        expect_problem(r, 400, "invalid-query");
        if (!has_error_path(r->json, cases[i].path))
            fail_msg("GET %s: no error at %s in %s", path, cases[i].path, r->body);
        ty_resp_destroy(r);
    }
}

/* ---- authentication and tokens ------------------------------------------- */

static void test_auth_and_scopes(void **state)
{
    char rname[64], sname[64], body[256];
    const char *ro, *sub;
    ty_client *anon = ty_client_new(g_srv, NULL), *bad = ty_client_new(g_srv, "ty_not_a_token");
    ty_client *reader, *submitter;
    ty_http_resp *r;
    char *spec = dumps(spec_new(uniq("auth")));

    (void)state;
    snprintf(rname, sizeof rname, "%s", uniq("ro"));
    snprintf(sname, sizeof sname, "%s", uniq("sub"));
    ro = create_token(rname, "[\"read\"]");
    sub = create_token(sname, "[\"submit\"]");
    reader = ty_client_new(g_srv, ro);
    submitter = ty_client_new(g_srv, sub);

    /* No token and a wrong token: 401 with a Bearer challenge. */
    for (int i = 0; i < 2; i++) {
        ty_client *c = i == 0 ? anon : bad;
        r = ty_req(c, "GET", "/v1/jobs", NULL);
        expect_problem(r, 401, NULL);
        assert_non_null(ty_resp_header(r, "WWW-Authenticate"));
        assert_true(strncmp(ty_resp_header(r, "WWW-Authenticate"), "Bearer", 6) == 0);
        ty_resp_destroy(r);
        r = ty_req(c, "POST", "/v1/jobs", spec);
        expect_problem(r, 401, NULL);
        ty_resp_destroy(r);
    }
    /* Open routes need no token. */
    r = ty_req(anon, "GET", "/healthz", NULL);
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);

    /* read: may read, may not submit, cancel or manage tokens. */
    r = ty_req(reader, "GET", "/v1/jobs?limit=1", NULL);
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);
    r = ty_req(reader, "POST", "/v1/jobs", spec);
    expect_problem(r, 403, NULL);
    ty_resp_destroy(r);
    r = ty_req(reader, "GET", "/v1/tokens", NULL);
    expect_problem(r, 403, NULL);
    ty_resp_destroy(r);

    /* submit: may submit and cancel, may not read or manage tokens. */
    r = ty_req(submitter, "POST", "/v1/jobs", spec);
    EXPECT_STATUS(r, 201);
    {
        char path[128];
        snprintf(path, sizeof path, "/v1/jobs/%s:cancel", job_id(r->json));
        ty_resp_destroy(r);
        r = ty_req(submitter, "POST", path, NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
    }
    r = ty_req(submitter, "GET", "/v1/jobs", NULL);
    expect_problem(r, 403, NULL);
    ty_resp_destroy(r);
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"scopes\": [\"admin\"]}", uniq("esc"));
    r = ty_req(submitter, "POST", "/v1/tokens", body);
    expect_problem(r, 403, NULL);
    ty_resp_destroy(r);

    /* The list shows both tokens, never a secret. */
    r = ty_req(g_admin, "GET", "/v1/tokens", NULL);
    EXPECT_STATUS(r, 200);
    assert_non_null(strstr(r->body, rname));
    assert_null(strstr(r->body, ro));
    assert_null(strstr(r->body, "\"token\""));
    ty_resp_destroy(r);

    /* A second token with the same name: 409. */
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"scopes\": [\"read\"]}", rname);
    r = ty_req(g_admin, "POST", "/v1/tokens", body);
    expect_problem(r, 409, NULL);
    ty_resp_destroy(r);

    /* Revoke: 204, the token stops working, a second revoke is 404. */
    {
        char path[128];
        snprintf(path, sizeof path, "/v1/tokens/%s", rname);
        r = ty_req(g_admin, "DELETE", path, NULL);
        EXPECT_STATUS(r, 204);
        ty_resp_destroy(r);
        poll_status(ro, "GET", "/v1/jobs?limit=1", 401);
        r = ty_req(g_admin, "DELETE", path, NULL);
        expect_problem(r, 404, NULL);
        ty_resp_destroy(r);
        r = ty_req(g_admin, "DELETE", "/v1/tokens/never-existed", NULL);
        expect_problem(r, 404, NULL);
        ty_resp_destroy(r);
    }
    free(spec);
    ty_client_free(anon);
    ty_client_free(bad);
    ty_client_free(reader);
    ty_client_free(submitter);
}

/* ---- request bodies ------------------------------------------------------ */

static void test_content_type(void **state)
{
    static const struct {
        const char *content_type;
        long status;
    } cases[] = {
        {"application/json", 201},
        {"application/json; charset=utf-8", 201},
        {"Application/JSON", 201},
        {"text/plain", 415},
        {"application/x-www-form-urlencoded", 415},
        {"application/jsonx", 415},
        {"", 415},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *body = dumps(spec_new(uniq("ct")));
        ty_http_req req = {.method = "POST",
                           .path = "/v1/jobs",
                           .body = body,
                           .content_type = cases[i].content_type};
        ty_http_resp *r = ty_reqx(g_admin, &req);
        if (r->status != cases[i].status)
            fail_msg("Content-Type '%s': expected %ld, got %ld: %s", cases[i].content_type,
                     cases[i].status, r->status, r->body);
        if (cases[i].status == 415)
            expect_problem(r, 415, "unsupported-media-type");
        ty_resp_destroy(r);
        free(body);
    }
}

static void test_body_too_large(void **state)
{
    size_t n = 2u << 20;
    char *body = malloc(n + 64);
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);

    (void)state;
    assert_non_null(body);
    snprintf(body, 64, "{\"name\": \"big\", \"pad\": \"");
    memset(body + strlen(body), 'a', n - strlen(body) - 2);
    body[n - 2] = '"';
    body[n - 1] = '}';
    /* Content-Length, Content-Length with Expect: 100-continue, and chunked
     * (the server learns the size only while reading). */
    for (int mode = 0; mode < 3; mode++) {
        ty_http_req req = {.method = "POST",
                           .path = "/v1/jobs",
                           .body = body,
                           .body_len = n,
                           .body_len_set = 1,
                           .expect_100 = mode == 1,
                           .chunked = mode == 2};
        ty_http_resp *r = ty_reqx(c, &req);
        expect_problem(r, 413, "body-too-large");
        ty_resp_destroy(r);
        /* The server still serves the next request, on this client too. */
        r = ty_req(c, "GET", "/healthz", NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
        r = ty_req(g_admin, "GET", "/readyz", NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
    }
    ty_client_free(c);
    free(body);
}

static void test_chunked_body(void **state)
{
    char *body = dumps(spec_new(uniq("chunked")));
    ty_http_req req = {.method = "POST", .path = "/v1/jobs", .body = body, .chunked = 1};
    ty_http_resp *r = ty_reqx(g_admin, &req);

    (void)state;
    EXPECT_STATUS(r, 201);
    ty_resp_destroy(r);
    free(body);
}

static void test_malformed_json(void **state)
{
    static const struct {
        const char *body;
        size_t len;
    } cases[] = {
        {"{", 1},
        {"", 0},
        {"   ", 3},
        {"{\"name\": }", 10},
        {"{} trailing", 11},
        {"{\"name\": \"a\", \"name\": \"b\"}", 26},
        {"{\"name\": \"\xff\xfe\"}", 14},
        {"{\"name\": \"\xc0\xaf\"}", 14},
        {"{\"name\": \"\xed\xa0\x80\"}", 15},
        {"{\"name\": \"\\ud800\"}", 18},
        {"{\"name\": \"a\0b\"}", 15},
        {"{\"name\": 'single'}", 18},
        {"{name: \"x\"}", 11},
        {"[1, 2,]", 7},
        {"NaN", 3},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ty_http_req req = {.method = "POST",
                           .path = "/v1/jobs",
                           .body = cases[i].body,
                           .body_len = cases[i].len,
                           .body_len_set = 1};
        ty_http_resp *r = ty_reqx(g_admin, &req);
        if (r->status != 400)
            fail_msg("case %zu: expected 400 malformed-json, got %ld: %s", i, r->status, r->body);
        expect_problem(r, 400, "malformed-json");
        expect_error_path(r, "$");
        ty_resp_destroy(r);
    }
}

/* Deep nesting, huge values: never a 5xx, the server stays up. */
static void test_hostile_bodies(void **state)
{
    enum { DEEP = 1000000 };
    char *deep = malloc(DEEP);
    char *deep_obj = malloc(16 * 100 + 64);
    char *long_name = malloc(900000 + 64);
    size_t o = 0;
    json_t *spec;

    (void)state;
    assert_non_null(deep);
    memset(deep, '[', DEEP);
    for (int i = 0; i < 100; i++) {
        memcpy(deep_obj + o, "{\"a\":", 5);
        o += 5;
    }
    deep_obj[o++] = '1';
    for (int i = 0; i < 100; i++)
        deep_obj[o++] = '}';
    deep_obj[o] = '\0';
    snprintf(long_name, 64, "{\"name\": \"");
    memset(long_name + strlen(long_name), 'a', 900000);
    snprintf(long_name + 10 + 900000, 54, "\", \"image\": \"i\", \"command\": [\"c\"]}");

    const struct {
        const char *what;
        const char *body;
        size_t len;
        long status;
        const char *code;
    } cases[] = {
        {"1e6 open brackets", deep, DEEP, 400, "malformed-json"},
        {"objects nested 100 deep", deep_obj, strlen(deep_obj), 400, "malformed-json"},
        {"a 900 KB name", long_name, strlen(long_name), 422, "invalid-spec"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ty_http_req req = {.method = "POST",
                           .path = "/v1/jobs",
                           .body = cases[i].body,
                           .body_len = cases[i].len,
                           .body_len_set = 1};
        ty_http_resp *r = ty_reqx(g_admin, &req);
        if (r->status >= 500)
            fail_msg("%s: server error %ld: %s", cases[i].what, r->status, r->body);
        if (r->status != cases[i].status)
            fail_msg("%s: expected %ld %s, got %ld: %.300s", cases[i].what, cases[i].status,
                     cases[i].code, r->status, r->body);
        expect_problem(r, cases[i].status, cases[i].code);
        ty_resp_destroy(r);
        r = ty_req(g_admin, "GET", "/healthz", NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
    }

    /* 100,000 command items and 20,000 labels: field-precise 422s. */
    spec = spec_new("many");
    {
        json_t *cmd = json_array(), *labels = json_object();
        char key[32];
        for (int i = 0; i < 100000; i++)
            json_array_append_new(cmd, json_string("x"));
        for (int i = 0; i < 20000; i++) {
            snprintf(key, sizeof key, "k%d", i);
            json_object_set_new(labels, key, json_string("v"));
        }
        json_object_set_new(spec, "command", cmd);
        json_object_set_new(spec, "labels", labels);
    }
    {
        char *body = dumps(spec);
        ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
        expect_problem(r, 422, "invalid-spec");
        expect_error_path(r, "$.command");
        expect_error_path(r, "$.labels");
        ty_resp_destroy(r);
        free(body);
    }
    free(deep);
    free(deep_obj);
    free(long_name);
}

/* Valid JSON that is not an object: an invalid spec (422 at $), not malformed JSON. */
static void test_top_level_not_an_object(void **state)
{
    static const char *const bodies[] = {"null", "[]", "\"x\"", "42", "true"};

    (void)state;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", bodies[i]);
        if (r->status != 422)
            fail_msg(
                "body %s: expected 422 invalid-spec at $ (valid JSON, not a spec), got %ld: %s",
                bodies[i], r->status, r->body);
        expect_problem(r, 422, "invalid-spec");
        expect_error_path(r, "$");
        ty_resp_destroy(r);
    }
}

/* One bad field at a time: 422 with that field's path. */
static void test_invalid_specs(void **state)
{
    static const struct {
        const char *set;    /* JSON object merged into the valid spec, or NULL */
        const char *remove; /* top-level member removed, or NULL */
        const char *path;   /* expected error path ('*' = prefix) */
    } cases[] = {
        {"{\"name\": \"Bad_Name\"}", NULL, "$.name"},
        {"{\"name\": \"\"}", NULL, "$.name"},
        {"{\"name\": \"-lead\"}", NULL, "$.name"},
        {"{\"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", NULL,
         "$.name"},
        {"{\"name\": 5}", NULL, "$.name"},
        {NULL, "name", "$.name"},
        {"{\"labels\": {\"team\": 5}}", NULL, "$.labels.team"},
        {"{\"labels\": {\"team\": \"has space\"}}", NULL, "$.labels.team"},
        {"{\"labels\": {\"bad key!\": \"x\"}}", NULL, "$.labels*"},
        {"{\"labels\": [\"a\"]}", NULL, "$.labels"},
        {"{\"queue\": \"Q\"}", NULL, "$.queue"},
        {"{\"priority\": 1.5}", NULL, "$.priority"},
        {"{\"priority\": true}", NULL, "$.priority"},
        {"{\"priority\": \"1\"}", NULL, "$.priority"},
        {"{\"priority\": 1000001}", NULL, "$.priority"},
        {"{\"priority\": -1000001}", NULL, "$.priority"},
        {"{\"image\": \"\"}", NULL, "$.image"},
        {"{\"image\": \"has space:1\"}", NULL, "$.image"},
        {"{\"image\": \"tab\\there\"}", NULL, "$.image"},
        {"{\"image\": 7}", NULL, "$.image"},
        {"{\"command\": []}", NULL, "$.command"},
        {"{\"command\": \"train\"}", NULL, "$.command"},
        {"{\"command\": [\"ok\", \"\"]}", NULL, "$.command[1]"},
        {"{\"command\": [\"ok\", 7]}", NULL, "$.command[1]"},
        {NULL, "command", "$.command"},
        {"{\"args\": [1]}", NULL, "$.args[0]"},
        {"{\"env\": {\"TRAINYARD_TOKEN\": \"x\"}}", NULL, "$.env.TRAINYARD_TOKEN"},
        {"{\"env\": {\"RANK\": \"0\"}}", NULL, "$.env.RANK"},
        {"{\"env\": {\"MASTER_ADDR\": \"h\"}}", NULL, "$.env.MASTER_ADDR"},
        {"{\"env\": {\"1BAD\": \"x\"}}", NULL, "$.env*"},
        {"{\"env\": {\"OK\": 1}}", NULL, "$.env.OK"},
        {"{\"workers\": {\"count\": 0}}", NULL, "$.workers.count"},
        {"{\"workers\": {\"count\": 4097}}", NULL, "$.workers.count"},
        {"{\"workers\": {\"count\": 2, \"min\": 3}}", NULL, "$.workers.min"},
        {"{\"workers\": {\"count\": 2, \"min\": 0}}", NULL, "$.workers.min"},
        {"{\"workers\": {\"min\": 1}}", NULL, "$.workers.count"},
        {"{\"workers\": {\"count\": 2, \"extra\": 1}}", NULL, "$.workers.extra"},
        {"{\"workers\": 2}", NULL, "$.workers"},
        {NULL, "workers", "$.workers"},
        {"{\"resources\": {\"cpu\": \"abc\"}}", NULL, "$.resources.cpu"},
        {"{\"resources\": {\"cpu\": \"0\"}}", NULL, "$.resources.cpu"},
        {"{\"resources\": {\"memory\": \"2Gx\"}}", NULL, "$.resources.memory"},
        {"{\"resources\": {\"memory\": 2}}", NULL, "$.resources.memory"},
        {"{\"resources\": {\"gpu\": {\"type\": \"a100\", \"count\": 17}}}", NULL,
         "$.resources.gpu.count"},
        {"{\"resources\": {\"gpu\": {\"type\": \"A100\", \"count\": 1}}}", NULL,
         "$.resources.gpu.type"},
        {"{\"placement\": {\"capacity\": \"cheap\"}}", NULL, "$.placement.capacity"},
        {"{\"placement\": {\"zone\": \"Us East\"}}", NULL, "$.placement.zone"},
        {"{\"volumes\": [{\"claim\": \"data\", \"mount\": \"relative\"}]}", NULL,
         "$.volumes[0].mount"},
        {"{\"volumes\": [{\"claim\": \"data\", \"mount\": \"/a/../b\"}]}", NULL,
         "$.volumes[0].mount"},
        {"{\"volumes\": [{\"mount\": \"/data\"}]}", NULL, "$.volumes[0].claim"},
        {"{\"volumes\": [{\"claim\": \"a\", \"mount\": \"/d\"}, {\"claim\": \"b\", \"mount\": "
         "\"/d\"}]}",
         NULL, "$.volumes[1].mount"},
        {"{\"volumes\": [{\"claim\": \"a\", \"mount\": \"/d\", \"read_only\": \"yes\"}]}", NULL,
         "$.volumes[0].read_only"},
        {"{\"restart\": {\"max\": 101}}", NULL, "$.restart.max"},
        {"{\"restart\": {\"backoff_seconds\": -1}}", NULL, "$.restart.backoff_seconds"},
        {"{\"timeout_seconds\": 0}", NULL, "$.timeout_seconds"},
        {"{\"timeout_seconds\": 31536001}", NULL, "$.timeout_seconds"},
        {"{\"ttl_seconds_after_finished\": -1}", NULL, "$.ttl_seconds_after_finished"},
        {"{\"gpus\": 1}", NULL, "$.gpus"},
        {"{\"priority\": 99999999999999999999}", NULL, "$.priority"},
        {"{\"priority\": 1e400}", NULL, "$.priority"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *spec = spec_new(uniq("inv"));
        ty_http_resp *r;
        char *body;

        if (cases[i].remove)
            json_object_del(spec, cases[i].remove);
        if (cases[i].set) {
            /* The member replaces the valid one: its key is the first string of set. */
            char key[64];
            const char *q1 = strchr(cases[i].set, '"'), *q2 = q1 ? strchr(q1 + 1, '"') : NULL;
            assert_non_null(q2);
            snprintf(key, sizeof key, "%.*s", (int)(q2 - q1 - 1), q1 + 1);
            json_object_del(spec, key);
        }
        body = dumps(spec);
        if (cases[i].set) {
            /* Splice the member text in, so numbers reach the server verbatim. */
            size_t n = strlen(body), m = strlen(cases[i].set);
            char *spliced = malloc(n + m + 4);
            assert_non_null(spliced);
            snprintf(spliced, n + m + 4, "%.*s, %s", (int)(n - 1), body, cases[i].set + 1);
            free(body);
            body = spliced;
        }
        r = ty_req(g_admin, "POST", "/v1/jobs", body);
        if (r->status != 422)
            fail_msg("case %zu (%s): expected 422 at %s, got %ld: %s\n  body: %s", i,
                     cases[i].set ? cases[i].set : cases[i].remove, cases[i].path, r->status,
                     r->body, body);
        expect_problem(r, 422, "invalid-spec");
        if (!has_error_path(r->json, cases[i].path))
            fail_msg("case %zu: body %s: no error at %s in %s", i, body, cases[i].path, r->body);
        ty_resp_destroy(r);
        free(body);
    }
}

static void test_invalid_spec_lists_every_field(void **state)
{
    json_t *spec = spec_new(uniq("multi"));
    ty_http_resp *r;
    char *body;

    (void)state;
    json_object_set_new(spec, "image", json_string(""));
    json_object_set_new(spec, "workers", json_pack("{s:i}", "count", 0));
    json_object_set_new(spec, "bogus", json_true());
    json_object_set_new(spec, "labels", json_pack("{s:i}", "team", 1));
    body = dumps(spec);
    r = ty_req(g_admin, "POST", "/v1/jobs", body);
    expect_problem(r, 422, "invalid-spec");
    expect_error_path(r, "$.image");
    expect_error_path(r, "$.workers.count");
    expect_error_path(r, "$.bogus");
    expect_error_path(r, "$.labels.team");
    ty_resp_destroy(r);
    free(body);
}

/* The message of the error at path, or NULL (borrowed from r). */
static const char *error_message(const ty_http_resp *r, const char *path)
{
    const json_t *errors = json_object_get(r->json, "errors"), *e;
    size_t i;

    json_array_foreach(errors, i, e) {
        const char *p = ty_json_str(e, "path");
        if (p && strcmp(p, path) == 0)
            return ty_json_str(e, "message");
    }
    return NULL;
}

/*
 * Resources no rank of this machine could ever get, or past what a quantity can say, are
 * 422s from the real server naming the field (and the machine's size): never accepted and
 * started with a limit that does not hold. So are the labels the server writes itself.
 */
static void test_resources_beyond_the_machine(void **state)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char want[128];
    static const struct {
        const char *member, *path, *fragment; /* fragment NULL: the machine's size is named */
    } cases[] = {
        {"{\"cpu\": \"100000\"}", "$.resources.cpu", NULL},
        {"{\"cpu\": \"1e308\"}", "$.resources.cpu", "too large"},
        {"{\"cpu\": \"9e999999999\"}", "$.resources.cpu", "too large"},
        {"{\"cpu\": \"1e-400\"}", "$.resources.cpu", "greater than 0"},
        {"{\"memory\": \"64Ei\"}", "$.resources.memory", "too large"},
        {"{\"memory\": \"9223372036854775807\"}", "$.resources.memory", "below 8Ei"},
        {"{\"memory\": \"1Pi\"}", "$.resources.memory", "1Pi of memory requested per rank, "
                                                        "this machine has "},
        {"{\"memory\": \"0.5\"}", "$.resources.memory", "at least 1 byte"},
    };

    (void)state;
    assert_true(cpus > 0);
    snprintf(want, sizeof want, "100000 CPUs requested per rank, this machine has %ld", cpus);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *spec = spec_new(uniq("big"));
        json_object_set_new(spec, "resources", json_loads(cases[i].member, 0, NULL));
        char *body = dumps(spec);
        ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
        if (r->status != 422)
            fail_msg("%s: expected 422, got %ld: %s", cases[i].member, r->status, r->body);
        expect_problem(r, 422, "invalid-spec");
        const char *msg = error_message(r, cases[i].path);
        const char *fragment = cases[i].fragment ? cases[i].fragment : want;
        if (!msg || !strstr(msg, fragment))
            fail_msg("%s: want \"%s\" at %s, got %s", cases[i].member, fragment, cases[i].path,
                     r->body);
        ty_resp_destroy(r);
        free(body);
    }

    /* The same in a batch, at the job's path. */
    json_t *big = spec_new(uniq("big")), *ok = spec_new(uniq("ok"));
    json_object_set_new(big, "resources", json_pack("{s:s}", "cpu", "100000"));
    json_t *batch = json_pack("{s:[o, o]}", "jobs", ok, big);
    char *body = dumps(batch);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs:batch", body);
    expect_problem(r, 422, "invalid-spec");
    expect_error_path(r, "$.jobs[1].resources.cpu");
    ty_resp_destroy(r);
    free(body);

    /* A sweep's membership cannot be faked by a client. */
    json_t *fake = spec_new(uniq("fake"));
    json_object_set_new(fake, "labels", json_pack("{s:s}", "trainyard.io/sweep",
                                                  "01hzzzzzzzzzzzzzzzzzzzzzzz"));
    body = dumps(fake);
    r = ty_req(g_admin, "POST", "/v1/jobs", body);
    expect_problem(r, 422, "invalid-spec");
    const char *msg = error_message(r, "$.labels[\"trainyard.io/sweep\"]");
    if (!msg || !strstr(msg, "reserved for the server"))
        fail_msg("want reserved-for-the-server at $.labels[\"trainyard.io/sweep\"], got %s",
                 r->body);
    ty_resp_destroy(r);
    free(body);
}

/* ---- batch and idempotency ----------------------------------------------- */

static json_t *batch_of(const char *run, int n)
{
    json_t *jobs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *spec = spec_new(uniq("bat"));
        json_object_set_new(spec, "labels", json_pack("{s:s}", "run", run));
        json_array_append_new(jobs, spec);
    }
    return json_pack("{s:o}", "jobs", jobs);
}

static void test_batch_all_or_nothing(void **state)
{
    char run[48];
    char q[256], *body;
    ty_http_resp *r;
    json_t *batch, *list;
    const json_t *job;
    size_t i;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("batch"));
    /* The fourth job is bad: nothing is stored, the error names $.jobs[3]. */
    batch = batch_of(run, 5);
    json_object_set_new(json_array_get(json_object_get(batch, "jobs"), 3), "image",
                        json_string("two words"));
    json_object_set_new(json_array_get(json_object_get(batch, "jobs"), 4), "priority",
                        json_real(0.5));
    body = dumps(batch);
    r = ty_req(g_admin, "POST", "/v1/jobs:batch", body);
    expect_problem(r, 422, "invalid-spec");
    expect_error_path(r, "$.jobs[3].image");
    expect_error_path(r, "$.jobs[4].priority");
    ty_resp_destroy(r);
    free(body);
    snprintf(q, sizeof q, "label=run%%3D%s", run);
    list = list_ok(g_admin, q);
    assert_int_equal(count_jobs(list), 0);
    json_decref(list);

    /* A good batch: 201, every job stored, in order. */
    body = dumps(batch_of(run, 3));
    r = ty_req(g_admin, "POST", "/v1/jobs:batch", body);
    EXPECT_STATUS(r, 201);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 3);
    json_array_foreach(json_object_get(r->json, "jobs"), i, job) {
        ty_http_resp *g = get_job(g_admin, job_id(job));
        EXPECT_STATUS(g, 200);
        assert_string_equal(ty_json_str(g->json, "state"), "PENDING");
        ty_resp_destroy(g);
    }
    ty_resp_destroy(r);
    free(body);
    list = list_ok(g_admin, q);
    assert_int_equal(count_jobs(list), 3);
    json_decref(list);

    /* Empty and oversized batches are 422 at $.jobs. */
    for (int k = 0; k < 3; k++) {
        body = k == 0   ? strdup("{\"jobs\": []}")
               : k == 1 ? dumps(batch_of(run, 1001))
                        : strdup("{\"jobs\": 5}");
        r = ty_req(g_admin, "POST", "/v1/jobs:batch", body);
        expect_problem(r, 422, "invalid-spec");
        expect_error_path(r, "$.jobs");
        ty_resp_destroy(r);
        free(body);
    }
    list = list_ok(g_admin, q);
    assert_int_equal(count_jobs(list), 3);
    json_decref(list);
}

static void test_idempotency(void **state)
{
    char run[48];
    char key[80], hdr[128], q[256], *body, *other;
    const char *hdrs[] = {hdr, NULL};
    ty_http_req req = {.method = "POST", .path = "/v1/jobs", .headers = hdrs};
    ty_http_resp *first, *r;
    json_t *spec, *list;
    const char *sub_secret;
    ty_client *sub;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("idem"));
    snprintf(key, sizeof key, "key-%s", run);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
    spec = spec_new(uniq("idem"));
    json_object_set_new(spec, "labels", json_pack("{s:s}", "run", run));
    body = dumps(json_deep_copy(spec));
    json_object_set_new(spec, "priority", json_integer(5));
    other = dumps(spec);

    req.body = body;
    first = ty_reqx(g_admin, &req);
    EXPECT_STATUS(first, 201);
    /* The same key and body: 200 with the same job. */
    r = ty_reqx(g_admin, &req);
    EXPECT_STATUS(r, 200);
    assert_string_equal(job_id(r->json), job_id(first->json));
    ty_resp_destroy(r);
    /* The same key, another body: 409. */
    req.body = other;
    r = ty_reqx(g_admin, &req);
    expect_problem(r, 409, "idempotency-key-reused");
    ty_resp_destroy(r);
    snprintf(q, sizeof q, "label=run%%3D%s", run);
    list = list_ok(g_admin, q);
    assert_int_equal(count_jobs(list), 1);
    json_decref(list);

    /* Keys are scoped to the token: another token's same key is a new job. */
    sub_secret = create_token(uniq("idem-sub"), "[\"submit\", \"read\"]");
    sub = ty_client_new(g_srv, sub_secret);
    req.body = body;
    r = ty_reqx(sub, &req);
    EXPECT_STATUS(r, 201);
    assert_string_not_equal(job_id(r->json), job_id(first->json));
    ty_resp_destroy(r);
    ty_client_free(sub);

    /* Batches replay too. */
    {
        char bhdr[128], *bbody = dumps(batch_of(run, 2));
        const char *bhdrs[] = {bhdr, NULL};
        ty_http_req breq = {
            .method = "POST", .path = "/v1/jobs:batch", .headers = bhdrs, .body = bbody};
        ty_http_resp *b1, *b2;
        snprintf(bhdr, sizeof bhdr, "Idempotency-Key: batch-%s", run);
        b1 = ty_reqx(g_admin, &breq);
        EXPECT_STATUS(b1, 201);
        b2 = ty_reqx(g_admin, &breq);
        EXPECT_STATUS(b2, 200);
        /* Where each stands in line may have been written by the scheduler in between. */
        size_t k;
        json_t *bj;
        json_array_foreach(json_object_get(b1->json, "jobs"), k, bj)
            json_object_del(bj, "pending_reason");
        json_array_foreach(json_object_get(b2->json, "jobs"), k, bj)
            json_object_del(bj, "pending_reason");
        if (!json_equal(json_object_get(b1->json, "jobs"), json_object_get(b2->json, "jobs")))
            fail_msg("batch replay differs:\n  %s\n  %s", b1->body, b2->body);
        ty_resp_destroy(b1);
        ty_resp_destroy(b2);
        free(bbody);
    }

    /* Bad keys: 400 invalid-idempotency-key. */
    {
        char longkey[300];
        static const char *const bad[] = {"Idempotency-Key: has\x01"
                                          "ctl",
                                          NULL, NULL};
        const char *bad_hdrs[2] = {NULL, NULL};
        snprintf(longkey, sizeof longkey, "Idempotency-Key: %0256d", 7);
        for (int k = 0; k < 2; k++) {
            bad_hdrs[0] = k == 0 ? longkey : bad[0];
            req.headers = bad_hdrs;
            req.body = body;
            r = ty_reqx(g_admin, &req);
            /* A control byte in any header value is refused by the listener first. */
            expect_problem(r, 400, k == 0 ? "invalid-idempotency-key" : "malformed-request");
            ty_resp_destroy(r);
        }
    }
    ty_resp_destroy(first);
    free(body);
    free(other);
}

/* ---- concurrent requests ------------------------------------------------- */

#define RACERS 8

typedef struct racer {
    pthread_barrier_t *start;
    const ty_http_req *req;
    ty_http_resp resp;
    int rc;
    char err[1024];
} racer;

static void *race_main(void *arg)
{
    racer *r = arg;
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);

    if (!c) {
        r->rc = TY_HTTP_ETRANSPORT;
        snprintf(r->err, sizeof r->err, "out of memory");
        pthread_barrier_wait(r->start);
        return NULL;
    }
    /* Connect first, so the requests themselves start together. */
    {
        ty_http_req warm = {.method = "GET", .path = "/healthz"};
        ty_http_resp w;
        if (ty_http_do(c, &warm, &w, r->err, sizeof r->err) == 0)
            ty_resp_free(&w);
    }
    pthread_barrier_wait(r->start);
    r->rc = ty_http_do(c, r->req, &r->resp, r->err, sizeof r->err);
    ty_client_free(c);
    return NULL;
}

/* Sends req from RACERS threads at once; fails on transport or contract errors. */
static void race(const ty_http_req *req, racer out[RACERS])
{
    pthread_t tid[RACERS];
    pthread_barrier_t start;

    pthread_barrier_init(&start, NULL, RACERS);
    for (int i = 0; i < RACERS; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].start = &start;
        out[i].req = req;
        assert_int_equal(pthread_create(&tid[i], NULL, race_main, &out[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < RACERS; i++)
        if (out[i].rc != 0)
            fail_msg("racer %d: %s", i, out[i].err);
}

static void test_concurrent_idempotent_submits(void **state)
{
    char run[48], hdr[128], q[128], *body;
    const char *hdrs[] = {hdr, NULL};
    ty_http_req req = {.method = "POST", .path = "/v1/jobs", .headers = hdrs};
    racer rs[RACERS];
    json_t *spec, *list;
    const char *id = NULL;
    int created = 0;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("race"));
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", run);
    spec = spec_new(run);
    json_object_set_new(spec, "labels", json_pack("{s:s}", "run", run));
    body = dumps(spec);
    req.body = body;
    race(&req, rs);
    for (int i = 0; i < RACERS; i++) {
        const char *got;
        if (rs[i].resp.status != 201 && rs[i].resp.status != 200)
            fail_msg("racer %d: the same key and body got %ld: %s", i, rs[i].resp.status,
                     rs[i].resp.body);
        created += rs[i].resp.status == 201;
        got = ty_json_str(rs[i].resp.json, "id");
        assert_non_null(got);
        if (!id)
            id = got;
        else if (strcmp(id, got) != 0)
            fail_msg("%d requests with one Idempotency-Key created different jobs (%s, %s)", RACERS,
                     id, got);
    }
    if (created != 1)
        fail_msg("%d concurrent requests with one Idempotency-Key got %d 201s, expected 1", RACERS,
                 created);
    snprintf(q, sizeof q, "label=run%%3D%s", run);
    list = list_ok(g_admin, q);
    if (count_jobs(list) != 1)
        fail_msg("%d concurrent requests with one Idempotency-Key stored %zu jobs", RACERS,
                 count_jobs(list));
    json_decref(list);
    for (int i = 0; i < RACERS; i++)
        ty_resp_free(&rs[i].resp);
    free(body);
}

static void test_concurrent_cancels(void **state)
{
    json_t *job = submit_ok(g_admin, spec_new(uniq("race-cancel")));
    char path[128];
    ty_http_req req = {.method = "POST", .path = path};
    racer rs[RACERS];
    ty_http_resp *r;

    (void)state;
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", job_id(job));
    race(&req, rs);
    for (int i = 0; i < RACERS; i++) {
        if (rs[i].resp.status != 200 ||
            strcmp(ty_json_str(rs[i].resp.json, "state"), "CANCELLED") != 0)
            fail_msg("concurrent cancel %d: %ld %s", i, rs[i].resp.status, rs[i].resp.body);
        ty_resp_free(&rs[i].resp);
    }
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job_id(job));
    r = ty_req(g_admin, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    if (json_array_size(json_object_get(r->json, "events")) != 2)
        fail_msg("%d concurrent cancels: expected 2 events, got %s", RACERS, r->body);
    ty_resp_destroy(r);
    json_decref(job);
}

static void test_largest_batch(void **state)
{
    char run[48], q[128], *body;
    ty_http_resp *r;
    json_t *list;

    (void)state;
    snprintf(run, sizeof run, "%s", uniq("big-batch"));
    body = dumps(batch_of(run, 1000));
    r = ty_req(g_admin, "POST", "/v1/jobs:batch", body);
    EXPECT_STATUS(r, 201);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 1000);
    ty_resp_destroy(r);
    free(body);
    snprintf(q, sizeof q, "label=run%%3D%s&limit=1000", run);
    list = list_ok(g_admin, q);
    assert_int_equal(count_jobs(list), 1000);
    assert_null(json_object_get(list, "next_page_token"));
    json_decref(list);
}

static void test_bad_token_requests(void **state)
{
    static const char *const bodies[] = {
        "{\"name\": \"t-root\", \"scopes\": [\"root\"]}",
        "{\"name\": \"t-none\", \"scopes\": []}",
        "{\"scopes\": [\"read\"]}",
        "{\"name\": \"\", \"scopes\": [\"read\"]}",
        "{\"name\": \"has space\", \"scopes\": [\"read\"]}",
        "{\"name\": \"t-extra\", \"scopes\": [\"read\"], \"token\": \"ty_chosen\"}",
        "{\"name\": 5, \"scopes\": \"read\"}",
        "[]",
        "{",
    };

    (void)state;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        ty_http_resp *r = ty_req(g_admin, "POST", "/v1/tokens", bodies[i]);
        if (r->status != 400 && r->status != 422)
            fail_msg("POST /v1/tokens %s: expected 400 or 422, got %ld: %s", bodies[i], r->status,
                     r->body);
        expect_problem(r, r->status, NULL);
        ty_resp_destroy(r);
    }
}

/* ---- connections, open endpoints, metrics -------------------------------- */

static void test_keep_alive(void **state)
{
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    json_t *job;

    (void)state;
    for (int i = 0; i < 50; i++) {
        ty_http_resp *r = ty_req(c, "GET", "/healthz", NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
        job = submit_ok(c, spec_new(uniq("ka")));
        r = get_job(c, job_id(job));
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
        json_decref(job);
    }
    if (ty_client_connects(c) != 1)
        fail_msg("150 requests used %ld connections, expected 1 (keep-alive)",
                 ty_client_connects(c));
    ty_client_free(c);
}

static void test_open_endpoints(void **state)
{
    ty_client *anon = ty_client_new(g_srv, NULL);
    ty_http_resp *r;
    FILE *f;
    char *file;
    long len;

    (void)state;
    r = ty_req(anon, "GET", "/healthz", NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(ty_json_str(r->json, "status"), "ok");
    ty_resp_destroy(r);
    r = ty_req(anon, "GET", "/readyz", NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(ty_json_str(r->json, "status"), "ready");
    ty_resp_destroy(r);

    /* /openapi.yaml is exactly the file of the source tree. */
    f = fopen(ty_harness_openapi_path(), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    file = malloc((size_t)len + 1);
    assert_non_null(file);
    assert_int_equal(fread(file, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    r = ty_req(anon, "GET", "/openapi.yaml", NULL);
    EXPECT_STATUS(r, 200);
    if (r->body_len != (size_t)len || memcmp(r->body, file, (size_t)len) != 0)
        fail_msg("/openapi.yaml (%zu bytes) differs from %s (%ld bytes)", r->body_len,
                 ty_harness_openapi_path(), len);
    ty_resp_destroy(r);
    free(file);
    ty_client_free(anon);
}

static void test_metrics(void **state)
{
    static const char *const families[] = {
        "trainyard_http_requests_total",
        "trainyard_http_request_duration_seconds_bucket",
        "trainyard_http_request_duration_seconds_sum",
        "trainyard_http_request_duration_seconds_count",
        "trainyard_jobs",
        "trainyard_jobs_submitted_total",
        "trainyard_store_commit_duration_seconds_bucket",
        "trainyard_store_commit_duration_seconds_count",
        "trainyard_store_commit_batch_size_bucket",
        "trainyard_store_commit_batch_size_count",
    };
    static const char *const types[] = {
        "# TYPE trainyard_http_requests_total counter",
        "# TYPE trainyard_http_request_duration_seconds histogram",
        "# TYPE trainyard_jobs gauge",
        "# TYPE trainyard_jobs_submitted_total counter",
        "# TYPE trainyard_store_commit_duration_seconds histogram",
        "# TYPE trainyard_store_commit_batch_size histogram",
    };
    static const char *const states[] = {"PENDING",   "ADMITTED",   "STARTING",
                                         "RUNNING",   "RESTARTING", "CANCELLING",
                                         "SUCCEEDED", "FAILED",     "CANCELLED"};
    const char *created[] = {"route=\"/v1/jobs\"", "code=\"201\"", NULL};
    const char *unmatched[] = {"route=\"unmatched\"", "code=\"404\"", NULL};
    char *text = get_metrics(), *after = NULL;
    double submitted, req201, req404;
    int64_t deadline;
    ty_http_resp *r;

    (void)state;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (metric(text, families[i], NULL) < 0)
            fail_msg("/metrics lacks %s:\n%s", families[i], text);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strstr(text, types[i]))
            fail_msg("/metrics lacks '%s'", types[i]);
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        char label[64];
        const char *ls[] = {label, NULL};
        snprintf(label, sizeof label, "state=\"%s\"", states[i]);
        if (metric(text, "trainyard_jobs", ls) < 0)
            fail_msg("/metrics lacks trainyard_jobs{%s}", label);
    }
    submitted = metric(text, "trainyard_jobs_submitted_total", NULL);
    req201 = metric(text, "trainyard_http_requests_total", created);
    req404 = metric(text, "trainyard_http_requests_total", unmatched);
    if (req201 < 0)
        req201 = 0; /* earlier cases submitted jobs, but tolerate a cold start */
    if (req404 < 0)
        req404 = 0;

    json_decref(submit_ok(g_admin, spec_new(uniq("met"))));
    {
        ty_http_req req = {.method = "GET", .path = "/no-such-route", .outside_contract = 1};
        r = ty_reqx(g_admin, &req);
        EXPECT_STATUS(r, 404);
        ty_resp_destroy(r);
    }
    /* Counters may be updated when the response completes: poll. */
    deadline = ty_now_ms() + 5000;
    for (;;) {
        free(after);
        after = get_metrics();
        if ((metric(after, "trainyard_jobs_submitted_total", NULL) == submitted + 1 &&
             metric(after, "trainyard_http_requests_total", created) == req201 + 1 &&
             metric(after, "trainyard_http_requests_total", unmatched) == req404 + 1) ||
            ty_now_ms() > deadline)
            break;
        ty_sleep_ms(20);
    }
    if (metric(after, "trainyard_jobs_submitted_total", NULL) != submitted + 1)
        fail_msg("trainyard_jobs_submitted_total went from %g to %g after one submit", submitted,
                 metric(after, "trainyard_jobs_submitted_total", NULL));
    if (metric(after, "trainyard_http_requests_total", created) != req201 + 1)
        fail_msg(
            "trainyard_http_requests_total{route=\"/v1/jobs\",code=\"201\"} went from %g to %g",
            req201, metric(after, "trainyard_http_requests_total", created));
    if (metric(after, "trainyard_http_requests_total", unmatched) != req404 + 1)
        fail_msg(
            "trainyard_http_requests_total{route=\"unmatched\",code=\"404\"} went from %g to %g",
            req404, metric(after, "trainyard_http_requests_total", unmatched));
    free(text);
    free(after);
}

/* ---- the token CLI against a running server ------------------------------ */

static void test_token_cli_while_running(void **state)
{
    char name[64], err[512], *out = NULL, *errout = NULL, *nl;
    int wstatus;

    (void)state;
    snprintf(name, sizeof name, "%s", uniq("cli"));
    {
        const char *args[] = {"token",   "create", "--name", name,
                              "--scope", "read",   "--db",   ty_server_db(g_srv),
                              NULL};
        if (ty_run(args, NULL, 20000, &wstatus, &out, &errout, err, sizeof err) < 0)
            fail_msg("%s", err);
        if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
            fail_msg("token create exited %d: %s", wstatus, errout);
    }
    nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
    if (strncmp(out, "ty_", 3) != 0)
        fail_msg("token create printed '%s', expected the token", out);
    assert_true(g_nsecrets < sizeof g_secrets / sizeof g_secrets[0]);
    snprintf(g_secrets[g_nsecrets++], sizeof g_secrets[0], "%s", out);
    /* The running server picks the new token up. */
    poll_status(out, "GET", "/v1/jobs?limit=1", 200);
    {
        char *lout = NULL;
        const char *args[] = {"token", "list", "--db", ty_server_db(g_srv), NULL};
        if (ty_run(args, NULL, 20000, &wstatus, &lout, NULL, err, sizeof err) < 0)
            fail_msg("%s", err);
        assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
        if (!strstr(lout, name) || strstr(lout, out))
            fail_msg("token list should show '%s' and no secret:\n%s", name, lout);
        free(lout);
    }
    {
        const char *args[] = {"token", "revoke", "--name", name, "--db", ty_server_db(g_srv), NULL};
        if (ty_run(args, NULL, 20000, &wstatus, NULL, NULL, err, sizeof err) < 0)
            fail_msg("%s", err);
        assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    }
    poll_status(out, "GET", "/v1/jobs?limit=1", 401);
    free(out);
    free(errout);
}

/* A database the token CLI creates is the server's own: no other user may read it. */
static void test_token_cli_new_database_private(void **state)
{
    char db[512], path[560], err[512];
    int wstatus;
    struct stat st;

    (void)state;
    snprintf(db, sizeof db, "%s/by-the-cli/trainyard.db", ty_server_dir(g_srv));
    const char *args[] = {"token", "create", "--name", "first", "--scope", "admin", "--db", db,
                          NULL};
    if (ty_run(args, NULL, 20000, &wstatus, NULL, NULL, err, sizeof err) < 0)
        fail_msg("%s", err);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    const char *const suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", db, suffixes[i]);
        if (stat(path, &st) != 0)
            continue; /* -wal and -shm go with the last connection */
        if (st.st_mode & 077)
            fail_msg("%s has mode %03o", path, (unsigned)(st.st_mode & 0777));
    }
    snprintf(path, sizeof path, "%s/by-the-cli", ty_server_dir(g_srv));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 077, 0);
}

/* ---- cases with their own server ----------------------------------------- */

static void test_admin_token_file(void **state)
{
    ty_server_opts opts = {.no_admin_token = 1};
    ty_server *s = NULL;
    char err[2048], path[512], token[256], *log;
    struct stat st;
    FILE *f;
    ty_client *c;
    ty_http_resp *r;

    (void)state;
    if (ty_server_start(&opts, &s, err, sizeof err) < 0)
        fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/admin.token", ty_server_dir(s));
    if (stat(path, &st) != 0)
        fail_msg("%s was not created", path);
    if ((st.st_mode & 0777) != 0600)
        fail_msg("%s has mode %o, expected 0600", path, (unsigned)(st.st_mode & 0777));
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(token, sizeof token, f));
    fclose(f);
    assert_true(strlen(token) > 1 && token[strlen(token) - 1] == '\n');
    token[strlen(token) - 1] = '\0';

    c = ty_client_new(s, token);
    r = ty_req(c, "GET", "/v1/tokens", NULL);
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);
    ty_client_free(c);

    log = ty_server_log(s);
    assert_non_null(log);
    if (!strstr(log, "admin token created") || !strstr(log, path))
        fail_msg("the log should say where the admin token was written:\n%s", log);
    if (strstr(log, token))
        fail_msg("the log contains the admin token");
    free(log);

    /* A restart keeps the token and does not write a new file. */
    {
        int wstatus;
        struct stat st2;
        if (ty_server_stop(s, 20000, &wstatus, err, sizeof err) < 0)
            fail_msg("%s", err);
        if (ty_server_restart(s, err, sizeof err) < 0)
            fail_msg("%s", err);
        assert_int_equal(stat(path, &st2), 0);
        assert_true(st2.st_ino == st.st_ino && st2.st_mtime == st.st_mtime);
        c = ty_client_new(s, token);
        r = ty_req(c, "GET", "/v1/tokens", NULL);
        EXPECT_STATUS(r, 200);
        ty_resp_destroy(r);
        ty_client_free(c);
    }
    ty_server_free(s);
}

static void test_newer_schema_is_refused(void **state)
{
    ty_server *s = NULL;
    sqlite3 *db = NULL;
    char err[2048], *errout = NULL;
    int wstatus, version = -1;
    sqlite3_stmt *st = NULL;

    (void)state;
    if (ty_server_start(NULL, &s, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (ty_server_stop(s, 20000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    assert_int_equal(sqlite3_open(ty_server_db(s), &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 9999", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    {
        const char *args[] = {"serve", "--listen", "127.0.0.1:0", "--db", ty_server_db(s), NULL};
        const char *env[] = {"TRAINYARD_ADMIN_TOKEN=" TY_TEST_ADMIN_TOKEN, NULL};
        if (ty_run(args, env, 20000, &wstatus, NULL, &errout, err, sizeof err) < 0)
            fail_msg("a server on a newer schema did not exit: %s", err);
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) == 0)
        fail_msg("the server started on a newer schema (status %d): %s", wstatus, errout);
    if (!strstr(errout, "9999") || !strstr(errout, "newer"))
        fail_msg("the refusal should name the schema version and say it is newer:\n%s", errout);
    if (strstr(errout, "listening"))
        fail_msg("the server listened before refusing the schema:\n%s", errout);

    /* Nothing was changed. */
    assert_int_equal(sqlite3_open_v2(ty_server_db(s), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_int_equal(version, 9999);
    free(errout);
    ty_server_free(s);
}

static void test_sigterm_with_requests_in_flight(void **state)
{
    ty_server_opts opts = {.args = paused};
    ty_server *s = NULL;
    ty_load *load = NULL;
    ty_client *c;
    char err[2048];
    int wstatus;
    size_t n;
    const ty_acked *acked;

    (void)state;
    if (ty_server_start(&opts, &s, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (ty_load_start(s, TY_TEST_ADMIN_TOKEN, 4, "sigterm", &load, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (ty_load_wait_acked(load, 200, 20000) < 200)
        fail_msg("the load threads did not get 200 jobs accepted: %s",
                 ty_load_violation(load) ? ty_load_violation(load) : "(no violation)");
    /* SIGTERM while the threads keep submitting over their connections. */
    if (ty_server_stop(s, 20000, &wstatus, err, sizeof err) < 0) {
        ty_load_free(load);
        fail_msg("%s", err);
    }
    ty_load_stop(load);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fail_msg("exit status %d after SIGTERM, expected 0", wstatus);
    if (ty_load_violation(load))
        fail_msg("during shutdown: %s", ty_load_violation(load));

    /* Every 201 is stored. */
    if (ty_server_restart(s, err, sizeof err) < 0)
        fail_msg("%s", err);
    c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    acked = ty_load_acked(load, &n);
    for (size_t i = 0; i < n; i++) {
        ty_http_resp *r = get_job(c, acked[i].id);
        if (r->status != 200)
            fail_msg("job %s got 201 before SIGTERM but GET answers %ld after restart", acked[i].id,
                     r->status);
        ty_resp_destroy(r);
    }
    ty_client_free(c);
    ty_load_free(load);
    ty_server_free(s);
}

static void test_cli_help_and_usage_errors(void **state)
{
    static const struct {
        const char *args[4];
        int status;
        const char *out; /* expected in stdout, or NULL */
        const char *err; /* expected in stderr, or NULL */
    } cases[] = {
        {{"--version", NULL}, 0, "trainyard", NULL},
        {{"--help", NULL}, 0, "serve", NULL},
        {{"serve", "--help", NULL}, 0, "--listen", NULL},
        {{"token", "--help", NULL}, 0, "create", NULL},
        {{"frobnicate", NULL}, 2, NULL, "frobnicate"},
        {{"serve", "--no-such-flag", NULL}, 2, NULL, "--no-such-flag"},
        {{"serve", "--listen", "not-an-address", NULL}, 2, NULL, NULL},
        {{"serve", "--max-body", "-5", NULL}, 2, NULL, NULL},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512], *out = NULL, *errout = NULL;
        int wstatus;
        if (ty_run(cases[i].args, NULL, 20000, &wstatus, &out, &errout, err, sizeof err) < 0)
            fail_msg("trainyard %s: %s", cases[i].args[0], err);
        if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != cases[i].status)
            fail_msg("trainyard %s %s: exit status %d, expected exit %d\nstdout: %s\nstderr: %s",
                     cases[i].args[0], cases[i].args[1] ? cases[i].args[1] : "", wstatus,
                     cases[i].status, out, errout);
        if (cases[i].out && !strstr(out, cases[i].out))
            fail_msg("trainyard %s: stdout lacks '%s':\n%s", cases[i].args[0], cases[i].out, out);
        if (cases[i].err && !strstr(errout, cases[i].err))
            fail_msg("trainyard %s: stderr lacks '%s':\n%s", cases[i].args[0], cases[i].err,
                     errout);
        if (cases[i].status == 2 && errout[0] == '\0')
            fail_msg("trainyard %s: a usage error without a message", cases[i].args[0]);
        free(out);
        free(errout);
    }
}

static void test_max_body_flag(void **state)
{
    const char *args[] = {"--max-body", "2000", NULL};
    ty_server_opts opts = {.args = args};
    ty_server *s = NULL;
    ty_client *c;
    ty_http_resp *r;
    char err[2048], body[3000];
    json_t *spec;
    int n;

    (void)state;
    if (ty_server_start(&opts, &s, err, sizeof err) < 0)
        fail_msg("%s", err);
    c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    /* Just under and just over the limit. */
    for (int over = 0; over < 2; over++) {
        char *text;
        spec = spec_new("maxbody");
        json_object_set_new(spec, "args", json_pack("[s]", ""));
        text = dumps(spec);
        n = snprintf(body, sizeof body, "%s", text);
        free(text);
        /* Pad the one argument so the body is 2000 or 2001 bytes. */
        {
            size_t want = over ? 2001 : 2000, have = (size_t)n;
            char *arg = strstr(body, "\"args\":[\"\"]");
            assert_non_null(arg);
            arg += strlen("\"args\":[\"");
            memmove(arg + (want - have), arg, have - (size_t)(arg - body) + 1);
            memset(arg, 'a', want - have);
            assert_int_equal(strlen(body), want);
        }
        r = ty_req(c, "POST", "/v1/jobs", body);
        if (over)
            expect_problem(r, 413, "body-too-large");
        else
            EXPECT_STATUS(r, 201);
        ty_resp_destroy(r);
    }
    ty_client_free(c);
    ty_server_free(s);
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_submit_returns_created_job),
        cmocka_unit_test(test_request_id_not_echoed_when_insane),
        cmocka_unit_test(test_events_and_cancel),
        cmocka_unit_test(test_unknown_ids_and_routes),
        cmocka_unit_test(test_list_filters),
        cmocka_unit_test(test_list_pagination_while_inserting),
        cmocka_unit_test(test_list_bad_queries),
        cmocka_unit_test(test_auth_and_scopes),
        cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_body_too_large),
        cmocka_unit_test(test_chunked_body),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_hostile_bodies),
        cmocka_unit_test(test_top_level_not_an_object),
        cmocka_unit_test(test_invalid_specs),
        cmocka_unit_test(test_invalid_spec_lists_every_field),
        cmocka_unit_test(test_resources_beyond_the_machine),
        cmocka_unit_test(test_batch_all_or_nothing),
        cmocka_unit_test(test_idempotency),
        cmocka_unit_test(test_concurrent_idempotent_submits),
        cmocka_unit_test(test_concurrent_cancels),
        cmocka_unit_test(test_largest_batch),
        cmocka_unit_test(test_bad_token_requests),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_open_endpoints),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_token_cli_while_running),
        cmocka_unit_test(test_token_cli_new_database_private),
    };
    const struct CMUnitTest own[] = {
        cmocka_unit_test(test_cli_help_and_usage_errors),
        cmocka_unit_test(test_max_body_flag),
        cmocka_unit_test(test_admin_token_file),
        cmocka_unit_test(test_newer_schema_is_refused),
        cmocka_unit_test(test_sigterm_with_requests_in_flight),
    };
    int failed;

    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    failed = cmocka_run_group_tests_name("api_http", shared, group_setup, group_teardown);
    failed += cmocka_run_group_tests_name("api_http_own_server", own, NULL, NULL);
    ty_harness_cleanup();
    return failed;
}
