/*
 * test_events_stream.c - the live event streams of `trainyard serve`, end to
 * end over loopback: GET /v1/events?follow=true and
 * GET /v1/jobs/{id}/events?follow=true, read as a client reads them (libcurl's
 * write callback, on a thread of its own per stream).
 *
 * Usage: test_events_stream TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
 * Jobs run `true` on the local backend, so each goes PENDING, ADMITTED,
 * STARTING, RUNNING, SUCCEEDED. Deadlines only bound a hang; nothing asserts
 * how long anything took. Where a test must know that the stream has sent
 * everything up to some point (to check that something was left out), it
 * submits a sentinel job and waits for its event: events come in commit
 * order, so every earlier one was sent or filtered by then.
 *
 * The caps on followed streams run on a server of their own, with a small
 * connection limit and a small cap per token set by flags.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

#define DEADLINE_MS 60000
#define MAX_EVENTS 4096

static ty_server *g_srv;
static ty_client *g_admin;

/* ---- a stream client ------------------------------------------------------------------- */

/* One event as received: its id line and its data (parsed). */
typedef struct sse_event {
    char id[64];
    char type[16];
    json_t *data;
} sse_event;

typedef struct sse {
    pthread_t thread;
    char url[512];
    char auth[200];
    char last_id[80];            /* Last-Event-ID to send, "" for none */
    pthread_mutex_t mu;
    char *buf;                   /* everything received (mu) */
    size_t len, cap;
    size_t parsed;               /* bytes of buf turned into events */
    sse_event ev[MAX_EVENTS];    /* (mu) */
    size_t nev;
    atomic_int stop;             /* asks the transfer to end */
    atomic_int done;             /* the transfer ended */
    int joined;                  /* its thread was joined */
    CURLcode rc;
    long status;
} sse;

/* Turns the complete blocks of buf into events; mu held. */
static void sse_parse(sse *s)
{
    for (;;) {
        char *start = s->buf + s->parsed;
        char *end = strstr(start, "\n\n");
        if (!end)
            return;
        *end = '\0';
        sse_event e = {.id = "", .type = "", .data = NULL};
        int any = 0;
        for (char *line = start; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strncmp(line, "id: ", 4) == 0) {
                snprintf(e.id, sizeof e.id, "%s", line + 4);
            } else if (strncmp(line, "event: ", 7) == 0) {
                snprintf(e.type, sizeof e.type, "%s", line + 7);
                any = 1;
            } else if (strncmp(line, "data: ", 6) == 0) {
                e.data = json_loads(line + 6, 0, NULL);
                if (!e.data)
                    fail_msg("an event's data is not JSON: %s", line + 6);
            }
            if (nl)
                *nl = '\n';
            line = nl ? nl + 1 : NULL;
        }
        *end = '\n';
        s->parsed = (size_t)(end + 2 - s->buf);
        if (any && s->nev < MAX_EVENTS)
            s->ev[s->nev++] = e;
        else
            json_decref(e.data);
    }
}

static size_t sse_write(char *p, size_t size, size_t n, void *ud)
{
    sse *s = ud;
    size_t len = size * n;
    pthread_mutex_lock(&s->mu);
    if (s->len + len + 1 > s->cap) {
        size_t cap = (s->len + len + 1) * 2;
        char *grown = realloc(s->buf, cap);
        if (!grown) {
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        s->buf = grown;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, len);
    s->len += len;
    s->buf[s->len] = '\0';
    sse_parse(s);
    pthread_mutex_unlock(&s->mu);
    return len;
}

/* Called about once a second even while nothing arrives: ends the transfer when asked. */
static int sse_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    sse *s = ud;
    (void)a, (void)b, (void)c, (void)d;
    return atomic_load(&s->stop) ? 1 : 0;
}

static void *sse_main(void *ud)
{
    sse *s = ud;
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    char lei[128];
    hdr = curl_slist_append(hdr, s->auth);
    if (s->last_id[0]) {
        snprintf(lei, sizeof lei, "Last-Event-ID: %s", s->last_id);
        hdr = curl_slist_append(hdr, lei);
    }
    curl_easy_setopt(h, CURLOPT_URL, s->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, sse_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, s);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L); /* bounds a hang only */
    s->rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s->status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Starts following path (with its query) with token; last_id may be NULL. */
static sse *sse_start(const char *path, const char *token, const char *last_id)
{
    sse *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->url, sizeof s->url, "%s%s", ty_server_url(g_srv), path);
    snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", token);
    snprintf(s->last_id, sizeof s->last_id, "%s", last_id ? last_id : "");
    assert_int_equal(pthread_create(&s->thread, NULL, sse_main, s), 0);
    return s;
}

/* Waits until the stream has received text (its first bytes, ": ok", say it is set up). */
static void sse_wait_text(sse *s, const char *text)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int found = s->buf && strstr(s->buf, text);
        pthread_mutex_unlock(&s->mu);
        if (found)
            return;
        if (atomic_load(&s->done) || ty_now_ms() > deadline)
            fail_msg("the stream %s did not send \"%s\" (ended: %d, status %ld)", s->url, text,
                     atomic_load(&s->done), s->status);
        ty_sleep_ms(10);
    }
}

/* The index of the first event of job `id` moving it to state `to`, or -1; mu held. */
static long find_event(const sse *s, const char *id, const char *to)
{
    for (size_t i = 0; i < s->nev; i++) {
        const json_t *d = s->ev[i].data;
        if (strcmp(s->ev[i].type, "job") == 0 && strcmp(ty_json_str(d, "job_id"), id) == 0 &&
            strcmp(ty_json_str(d, "to"), to) == 0)
            return (long)i;
    }
    return -1;
}

/* Waits for the event of job id moving to `to`; returns its index. */
static size_t sse_wait_event(sse *s, const char *id, const char *to)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        long i = find_event(s, id, to);
        pthread_mutex_unlock(&s->mu);
        if (i >= 0)
            return (size_t)i;
        if (atomic_load(&s->done) || ty_now_ms() > deadline)
            fail_msg("the stream %s sent no %s event for job %s", s->url, to, id);
        ty_sleep_ms(10);
    }
}

/* Waits until the transfer has ended on its own. */
static void sse_wait_end(sse *s)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    while (!atomic_load(&s->done)) {
        if (ty_now_ms() > deadline)
            fail_msg("the stream %s did not end", s->url);
        ty_sleep_ms(10);
    }
}

/* Ends the transfer (the client goes away) and waits for its thread. */
static void sse_stop(sse *s)
{
    if (s->joined)
        return;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    s->joined = 1;
}

/* Ends the transfer (if it runs) and frees. */
static void sse_free(sse *s)
{
    if (!s)
        return;
    sse_stop(s);
    for (size_t i = 0; i < s->nev; i++)
        json_decref(s->ev[i].data);
    free(s->buf);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- jobs ------------------------------------------------------------------------------ */

/* Submits a job running `command` (a JSON array); its id is copied into id. */
static void submit_cmd(const char *name, const char *queue, const char *labels_json,
                       const char *command, char id[32])
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"queue\": \"%s\", \"labels\": %s, \"command\": %s, "
             "\"workers\": {\"count\": 1}}",
             name, queue, labels_json, command);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
    if (r->status != 201)
        fail_msg("submit: %ld %s", r->status, r->body);
    snprintf(id, 32, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
}

/* Submits a job running `true`. */
static void submit(const char *name, const char *queue, const char *labels_json, char id[32])
{
    submit_cmd(name, queue, labels_json, "[\"true\"]", id);
}

/* Waits until the job is SUCCEEDED (polling GET /v1/jobs/{id}). */
static void wait_succeeded(const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
        int ok = strcmp(ty_json_str(r->json, "state"), "SUCCEEDED") == 0;
        ty_resp_destroy(r);
        if (ok)
            return;
        if (ty_now_ms() > deadline)
            fail_msg("job %s did not succeed", id);
        ty_sleep_ms(20);
    }
}

/* The number of events GET /v1/jobs/{id}/events lists. */
static size_t count_events(const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    size_t n = json_array_size(json_object_get(r->json, "events"));
    ty_resp_destroy(r);
    return n;
}

/* The seq of event i (its data's seq, which its id repeats). */
static int64_t seq_of(const sse *s, size_t i)
{
    int64_t seq = (int64_t)json_integer_value(json_object_get(s->ev[i].data, "seq"));
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)seq);
    assert_string_equal(s->ev[i].id, id);
    return seq;
}

/* ---- setup ----------------------------------------------------------------------------- */

static int setup(void **state)
{
    /* Jobs of queue "held" are never admitted: they wait, PENDING, until cancelled. The
     * request deadline (1 s) bounds receiving a request, never a stream that lasts. */
    static const char *const args[] = {"--local-slots", "4", "--local-sandbox=off",
                                       "--queue-limit", "held=0", "--request-deadline", "1",
                                       NULL};
    ty_server_opts opts = {.args = args};
    char err[512];
    (void)state;
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    return g_admin ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_admin);
    g_admin = NULL;
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

/* ---- tests ----------------------------------------------------------------------------- */

static const char *const RUN[] = {"PENDING", "ADMITTED", "STARTING", "RUNNING", "SUCCEEDED"};

/* A follower sees a job submitted after it connected go from its submission to its end. */
static void test_follower_sees_a_job_run(void **state)
{
    (void)state;
    sse *s = sse_start("/v1/events?follow=true", TY_TEST_ADMIN_TOKEN, NULL);
    sse_wait_text(s, ": ok");
    ty_sleep_ms(2500); /* past the request deadline: the stream stays */
    char id[32];
    submit("watched", "default", "{\"team\": \"vision\"}", id);
    size_t last = sse_wait_event(s, id, "SUCCEEDED");

    pthread_mutex_lock(&s->mu);
    size_t k = 0;
    int64_t prev = 0;
    for (size_t i = 0; i <= last; i++) {
        const json_t *d = s->ev[i].data;
        int64_t seq = seq_of(s, i);
        assert_true(seq > prev); /* commit order */
        prev = seq;
        if (strcmp(ty_json_str(d, "job_id"), id) != 0)
            continue;
        assert_true(k < 5);
        assert_string_equal(ty_json_str(d, "to"), RUN[k]);
        if (k == 0)
            assert_true(json_is_null(json_object_get(d, "from")));
        else
            assert_string_equal(ty_json_str(d, "from"), RUN[k - 1]);
        assert_string_equal(ty_json_str(d, "name"), "watched");
        assert_string_equal(ty_json_str(d, "queue"), "default");
        assert_string_equal(ty_json_str(json_object_get(d, "labels"), "team"), "vision");
        assert_non_null(ty_json_str(d, "time"));
        k++;
    }
    assert_int_equal(k, 5);
    pthread_mutex_unlock(&s->mu);
    sse_free(s);

    /* The job's own stream: its whole history, then it ends (the job has ended). */
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", id);
    s = sse_start(path, TY_TEST_ADMIN_TOKEN, NULL);
    sse_wait_end(s);
    assert_int_equal(s->rc, CURLE_OK);
    assert_int_equal(s->status, 200);
    assert_int_equal(s->nev, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(ty_json_str(s->ev[i].data, "to"), RUN[i]);
    sse_free(s);
}

/* The filters of GET /v1/jobs apply to the jobs of the stream. */
static void test_filters(void **state)
{
    (void)state;
    sse *s = sse_start("/v1/events?follow=true&queue=train&label=team=x", TY_TEST_ADMIN_TOKEN,
                       NULL);
    sse_wait_text(s, ": ok");
    sse *st = sse_start("/v1/events?follow=true&state=succeeded", TY_TEST_ADMIN_TOKEN, NULL);
    sse_wait_text(st, ": ok");
    char in[32], other_queue[32], other_label[32], sentinel[32];
    submit("other-queue", "eval", "{\"team\": \"x\"}", other_queue);
    submit("other-label", "train", "{\"team\": \"y\"}", other_label);
    submit("in", "train", "{\"team\": \"x\", \"extra\": \"1\"}", in);
    sse_wait_event(s, in, "SUCCEEDED");
    wait_succeeded(other_queue);
    wait_succeeded(other_label);
    submit("sentinel", "train", "{\"team\": \"x\"}", sentinel);
    sse_wait_event(s, sentinel, "PENDING");
    sse_wait_event(st, other_label, "SUCCEEDED");

    /* The sentinel runs on: count the events of the others only. */
    pthread_mutex_lock(&s->mu);
    size_t n_in = 0;
    for (size_t i = 0; i < s->nev; i++) {
        const char *job = ty_json_str(s->ev[i].data, "job_id");
        if (strcmp(job, in) != 0 && strcmp(job, sentinel) != 0)
            fail_msg("event %s of job %s passed the filters", s->ev[i].id, job);
        n_in += strcmp(job, in) == 0;
    }
    assert_int_equal(n_in, 5);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&st->mu);
    size_t n_other = 0;
    for (size_t i = 0; i < st->nev; i++) {
        const char *job = ty_json_str(st->ev[i].data, "job_id");
        assert_string_equal(ty_json_str(st->ev[i].data, "to"), "SUCCEEDED");
        n_other += strcmp(job, in) == 0 || strcmp(job, other_queue) == 0 ||
                   strcmp(job, other_label) == 0;
    }
    assert_int_equal(n_other, 3);
    pthread_mutex_unlock(&st->mu);
    sse_free(s);
    sse_free(st);
}

/*
 * A client reads some events, goes away, jobs change state meanwhile; it comes
 * back with Last-Event-ID and gets exactly the events it missed, in order,
 * none twice.
 */
static void test_resumes_after_a_reconnect(void **state)
{
    (void)state;
    sse *s = sse_start("/v1/events?follow=true", TY_TEST_ADMIN_TOKEN, NULL);
    sse_wait_text(s, ": ok");
    char first[32];
    /* It runs a while, so that the client most likely leaves in the middle of its run; what
     * follows counts whatever the client had received. */
    submit_cmd("first", "default", "{}", "[\"sleep\", \"1\"]", first);
    sse_wait_event(s, first, "ADMITTED");
    sse_stop(s); /* gone, mid-way through first's run */
    /* The last id it received, and how many of first's events it had. */
    char last_id[64];
    snprintf(last_id, sizeof last_id, "%s", s->ev[s->nev - 1].id);
    int64_t last_seq = seq_of(s, s->nev - 1);
    size_t first_seen = s->nev;
    assert_true(first_seen >= 2 && first_seen <= 5);
    sse_free(s);

    /* Meanwhile: first runs to its end, three more jobs run. */
    char ids[3][32];
    submit("second", "default", "{}", ids[0]);
    submit("third", "default", "{}", ids[1]);
    submit("fourth", "default", "{}", ids[2]);
    wait_succeeded(first);
    for (int i = 0; i < 3; i++)
        wait_succeeded(ids[i]);

    /* ?after=0 is overridden by the header: the client's URL may carry its first cursor. */
    sse *r = sse_start("/v1/events?follow=true&after=0", TY_TEST_ADMIN_TOKEN, last_id);
    char sentinel[32];
    sse_wait_text(r, ": ok");
    submit("sentinel", "default", "{}", sentinel);
    sse_wait_event(r, sentinel, "PENDING");

    pthread_mutex_lock(&r->mu);
    /* Exactly every event after last_seq: consecutive seqs, none at or before it. */
    size_t per_job[4] = {0};
    for (size_t i = 0; i < r->nev; i++) {
        assert_int_equal(seq_of(r, i), last_seq + 1 + (int64_t)i);
        const char *job = ty_json_str(r->ev[i].data, "job_id");
        for (int k = 0; k < 3; k++)
            per_job[k] += strcmp(job, ids[k]) == 0;
        per_job[3] += strcmp(job, first) == 0;
    }
    /* Every event of the jobs submitted while it was away, and first's rest. */
    for (int k = 0; k < 3; k++)
        assert_int_equal(per_job[k], count_events(ids[k]));
    assert_int_equal(per_job[3], 5 - first_seen); /* first's rest */
    assert_string_equal(ty_json_str(r->ev[r->nev - 1].data, "job_id"), sentinel);
    pthread_mutex_unlock(&r->mu);
    sse_free(r);
}

/* A job's stream: its events, the metric points it reports, its end; resumed after the end. */
static void test_job_stream_with_metrics(void **state)
{
    (void)state;
    char id[32], path[160], mpath[160];
    submit("reporting", "held", "{}", id);
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", id);
    sse *s = sse_start(path, TY_TEST_ADMIN_TOKEN, NULL);
    sse_wait_event(s, id, "PENDING");
    snprintf(mpath, sizeof mpath, "/v1/jobs/%s/metrics", id);
    ty_http_resp *r = ty_req(g_admin, "POST", mpath,
                             "{\"points\": [{\"step\": 1, \"loss\": 0.5, \"accuracy\": 0.75}, "
                             "{\"step\": 2, \"loss\": 0.25}]}");
    if (r->status != 200)
        fail_msg("POST metrics: %ld %s", r->status, r->body);
    ty_resp_destroy(r);
    sse_wait_text(s, "event: metrics");
    pthread_mutex_lock(&s->mu);
    assert_int_equal(s->nev, 2);
    assert_string_equal(s->ev[1].type, "metrics");
    const json_t *pts = json_object_get(s->ev[1].data, "points");
    assert_int_equal(json_array_size(pts), 2);
    const json_t *p0 = json_array_get(pts, 0), *p1 = json_array_get(pts, 1);
    assert_int_equal(json_integer_value(json_object_get(p0, "step")), 1);
    assert_true(json_real_value(json_object_get(p0, "loss")) == 0.5);
    assert_true(json_real_value(json_object_get(p0, "accuracy")) == 0.75);
    assert_int_equal(json_integer_value(json_object_get(p1, "step")), 2);
    assert_null(json_object_get(p1, "accuracy"));
    /* Both cursors in every id: the event's seq, then the last point's. */
    assert_non_null(strchr(s->ev[1].id, '.'));
    pthread_mutex_unlock(&s->mu);

    char cpath[160];
    snprintf(cpath, sizeof cpath, "/v1/jobs/%s:cancel", id);
    r = ty_req(g_admin, "POST", cpath, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    sse_wait_end(s); /* the terminal event ends it */
    assert_int_equal(s->rc, CURLE_OK);
    assert_int_equal(s->nev, 3);
    assert_string_equal(ty_json_str(s->ev[2].data, "to"), "CANCELLED");
    char last[64];
    snprintf(last, sizeof last, "%s", s->ev[2].id);
    sse_free(s);

    /* Resumed after its last event: nothing is left, the stream ends at once. */
    s = sse_start(path, TY_TEST_ADMIN_TOKEN, last);
    sse_wait_end(s);
    assert_int_equal(s->rc, CURLE_OK);
    assert_int_equal(s->status, 200);
    assert_int_equal(s->nev, 0);
    sse_free(s);
}

/* A token without the read scope is refused; so are an unknown filter and a bad cursor. */
static void test_refusals(void **state)
{
    (void)state;
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/tokens",
                             "{\"name\": \"submitter\", \"scopes\": [\"submit\"]}");
    assert_int_equal(r->status, 201);
    char token[128];
    snprintf(token, sizeof token, "%s", ty_json_str(r->json, "token"));
    ty_resp_destroy(r);

    ty_client *c = ty_client_new(g_srv, token);
    ty_http_resp *x = NULL;
    int64_t deadline = ty_now_ms() + 5000;
    for (;;) { /* the token list is cached for up to a second */
        ty_resp_destroy(x);
        x = ty_req(c, "GET", "/v1/events?follow=true", NULL);
        if (x->status != 401 || ty_now_ms() > deadline)
            break;
        ty_sleep_ms(50);
    }
    assert_int_equal(x->status, 403);
    assert_string_equal(ty_json_str(x->json, "code"), "forbidden");
    assert_string_equal(ty_resp_header(x, "Content-Type"), "application/problem+json");
    ty_resp_destroy(x);
    ty_client_free(c);

    static const struct {
        const char *path;
        const char *last_id;
        const char *error_path;
    } cases[] = {
        {"/v1/events?follow=true&colour=red", NULL, "query.colour"},
        {"/v1/events?follow=true&state=DONE", NULL, "query.state"},
        {"/v1/events", NULL, "query.follow"},
        {"/v1/events?follow=true", "abc", "header.Last-Event-ID"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hdr[96];
        const char *headers[] = {hdr, NULL};
        snprintf(hdr, sizeof hdr, "Last-Event-ID: %s", cases[i].last_id ? cases[i].last_id : "");
        ty_http_req req = {.method = "GET", .path = cases[i].path,
                           .headers = cases[i].last_id ? headers : NULL};
        r = ty_reqx(g_admin, &req);
        if (r->status != 400 || !strstr(r->body, cases[i].error_path))
            fail_msg("%s: %ld %s", cases[i].path, r->status, r->body);
        assert_string_equal(ty_json_str(r->json, "code"), "invalid-query");
        ty_resp_destroy(r);
    }
}

/* SIGTERM ends the open streams at once and cleanly (their final chunk is sent). */
static void test_shutdown_ends_streams(void **state)
{
    (void)state;
    sse *s[3];
    char id[32];
    submit("job", "default", "{}", id);
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", id);
    wait_succeeded(id);
    s[0] = sse_start("/v1/events?follow=true", TY_TEST_ADMIN_TOKEN, NULL);
    s[1] = sse_start("/v1/events?follow=true&queue=none", TY_TEST_ADMIN_TOKEN, NULL);
    s[2] = sse_start("/v1/events?follow=true&after=0", TY_TEST_ADMIN_TOKEN, NULL);
    for (int i = 0; i < 3; i++)
        sse_wait_text(s[i], ": ok");
    int wstatus = 0;
    char err[256];
    if (ty_server_stop(g_srv, 30000, &wstatus, err, sizeof err) < 0)
        fail_msg("stop: %s", err);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    for (int i = 0; i < 3; i++) {
        sse_wait_end(s[i]);
        assert_int_equal(s[i]->rc, CURLE_OK); /* not cut off */
        assert_int_equal(s[i]->status, 200);
        sse_free(s[i]);
    }
}

/* ---- the caps on followed streams -------------------------------------------------------- */

/* 16 connections: the streams may hold 8 of them, each token 3. */
#define CAP_TOTAL 8
#define CAP_PER_TOKEN 3

static int setup_caps(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--local-sandbox=off",
                                       "--queue-limit", "held=0", "--max-connections", "16",
                                       "--max-streams-per-token", "3", NULL};
    ty_server_opts opts = {.args = args};
    char err[512];
    (void)state;
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    return g_admin ? 0 : -1;
}

/* The value of a sample of /metrics ("name" or "name{labels}"); -1 when absent. */
static long long metric(const char *series)
{
    ty_http_resp *r = ty_req(g_admin, "GET", "/metrics", NULL);
    size_t n = strlen(series);
    long long v = -1;
    assert_int_equal(r->status, 200);
    for (const char *p = r->body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            char *end = NULL;
            v = strtoll(p + n + 1, &end, 10);
            assert_true(end && end != p + n + 1);
            break;
        }
    }
    ty_resp_destroy(r);
    return v;
}

#define OPEN "trainyard_streams_open"
#define REFUSED(reason) "trainyard_streams_refused_total{reason=\"" reason "\"}"

/* Waits until the gauge of open streams reads want; submits a held job between looks, so that
 * each /v1/events stream writes an event and the server notices a client that went away. */
static void wait_open(long long want, int nudge)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        long long v = metric(OPEN);
        if (v == want)
            return;
        if (ty_now_ms() > deadline)
            fail_msg("%s stays at %lld, not %lld", OPEN, v, want);
        if (nudge) {
            char id[32];
            submit("nudge", "held", "{}", id);
        }
        ty_sleep_ms(50);
    }
}

/* A token with the read and submit scopes, usable once the server's token cache has it. */
static ty_client *token_client(const char *name, char token[128])
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"scopes\": [\"read\", \"submit\"]}",
             name);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/tokens", body);
    assert_int_equal(r->status, 201);
    snprintf(token, 128, "%s", ty_json_str(r->json, "token"));
    ty_resp_destroy(r);
    ty_client *c = ty_client_new(g_srv, token);
    assert_non_null(c);
    int64_t deadline = ty_now_ms() + 5000;
    for (;;) { /* the token list is cached for up to a second */
        r = ty_req(c, "GET", "/v1/jobs?limit=1", NULL);
        long status = r->status;
        ty_resp_destroy(r);
        if (status == 200)
            return c;
        if (status != 401 || ty_now_ms() > deadline)
            fail_msg("token %s: %ld", name, status);
        ty_sleep_ms(50);
    }
}

/* A GET of a followed stream by c is refused with the 429 of a cap; its detail has `words`. */
static void expect_429(ty_client *c, const char *path, const char *words)
{
    ty_http_resp *r = ty_req(c, "GET", path, NULL);
    if (r->status != 429 || !strstr(r->body, words))
        fail_msg("GET %s: %ld %s", path, r->status, r->body);
    assert_string_equal(ty_json_str(r->json, "code"), "too-many-streams");
    assert_string_equal(ty_resp_header(r, "Content-Type"), "application/problem+json");
    assert_non_null(ty_resp_header(r, "Retry-After"));
    ty_resp_destroy(r);
}

/* A submission of c is accepted. */
static void expect_submit(ty_client *c, const char *name)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"queue\": \"held\", \"command\": [\"true\"], "
             "\"workers\": {\"count\": 1}}", name);
    ty_http_resp *r = ty_req(c, "POST", "/v1/jobs", body);
    if (r->status != 201)
        fail_msg("submit as %s: %ld %s", name, r->status, r->body);
    ty_resp_destroy(r);
}

/*
 * Three followed streams per token and eight in all (half of 16 connections), every kind
 * counted together: past a token's cap its next stream is 429 while it and every other token
 * still submit; the total holds across tokens; and each stream that ends gives its place
 * back, whether its job ended, its rank ended or its client went away: the gauge returns to 0.
 */
static void test_caps_on_followed_streams(void **state)
{
    (void)state;
    char ta[128], tb[128], tc[128], held[32], sleeper[32], path[160];
    ty_client *alice = token_client("alice", ta);
    ty_client *bob = token_client("bob", tb);
    ty_client *carol = token_client("carol", tc);
    assert_int_equal(metric(OPEN), 0);
    assert_int_equal(metric("trainyard_streams_limit"), CAP_TOTAL);

    submit("held", "held", "{}", held);
    submit_cmd("sleeper", "default", "{}", "[\"sh\", \"-c\", \"echo started; sleep 300\"]",
               sleeper);
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", sleeper);
    sse *w = sse_start(path, TY_TEST_ADMIN_TOKEN, NULL); /* the admin's, for a while */
    sse_wait_event(w, sleeper, "RUNNING");
    sse_free(w);

    /* alice: one stream of each kind. */
    sse *s[CAP_TOTAL] = {NULL};
    s[0] = sse_start("/v1/events?follow=true", ta, NULL);
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", held);
    s[1] = sse_start(path, ta, NULL);
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?follow=true", sleeper);
    s[2] = sse_start(path, ta, NULL);
    sse_wait_text(s[0], ": ok");
    sse_wait_event(s[1], held, "PENDING");
    sse_wait_text(s[2], "started");
    wait_open(CAP_PER_TOKEN, 0);

    /* Past alice's cap, each kind is refused; alice and bob still submit. */
    expect_429(alice, "/v1/events?follow=true", "this token");
    expect_429(alice, path, "this token");
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", held);
    expect_429(alice, path, "this token");
    expect_submit(alice, "alice-at-her-cap");
    expect_submit(bob, "bob-beside-alice");

    /* bob takes 3, carol 2: the server's 8. Then anyone's next is refused, the admin's too. */
    for (int i = 3; i < 6; i++)
        s[i] = sse_start("/v1/events?follow=true&queue=held", tb, NULL);
    for (int i = 6; i < 8; i++)
        s[i] = sse_start("/v1/events?follow=true", tc, NULL);
    for (int i = 3; i < 8; i++)
        sse_wait_text(s[i], ": ok");
    assert_int_equal(metric(OPEN), CAP_TOTAL);
    expect_429(carol, "/v1/events?follow=true", "the server");
    expect_429(g_admin, "/v1/events?follow=true", "the server");
    expect_429(bob, "/v1/events?follow=true", "this token");

    /* The streams hold half of the connections: submissions still get in. */
    expect_submit(carol, "carol-at-the-total");
    expect_submit(alice, "alice-at-the-total");
    expect_submit(g_admin, "admin-at-the-total");
    assert_int_equal(metric(OPEN), CAP_TOTAL);
    assert_true(metric(REFUSED("per_token")) >= 4);
    assert_true(metric(REFUSED("total")) >= 2);

    /* The held job ends: its stream ends by itself and gives its place back. */
    char cpath[160];
    snprintf(cpath, sizeof cpath, "/v1/jobs/%s:cancel", held);
    ty_http_resp *r = ty_req(g_admin, "POST", cpath, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    sse_wait_end(s[1]);
    assert_int_equal(s[1]->rc, CURLE_OK);
    wait_open(CAP_TOTAL - 1, 0);
    /* Its place is anyone's now: carol's third fits the total again. */
    sse *again = sse_start("/v1/events?follow=true", tc, NULL);
    sse_wait_text(again, ": ok");
    assert_int_equal(metric(OPEN), CAP_TOTAL);
    sse_free(again);

    /* The sleeper is cancelled: its rank ends, and so does the log that followed it. */
    snprintf(cpath, sizeof cpath, "/v1/jobs/%s:cancel", sleeper);
    r = ty_req(g_admin, "POST", cpath, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    sse_wait_end(s[2]);

    /* Every other client goes away: once the server has noticed, no place is held. */
    for (int i = 0; i < CAP_TOTAL; i++)
        sse_stop(s[i]);
    wait_open(0, 1);
    for (int i = 0; i < CAP_TOTAL; i++)
        sse_free(s[i]);

    /* And alice follows again, until the server stops: that ends her stream too, and the
     * server exits cleanly with no place left held. */
    s[0] = sse_start("/v1/events?follow=true", ta, NULL);
    sse_wait_text(s[0], ": ok");
    assert_int_equal(metric(OPEN), 1);
    int wstatus = 0;
    char err[256];
    if (ty_server_stop(g_srv, 30000, &wstatus, err, sizeof err) < 0)
        fail_msg("stop: %s", err);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    sse_wait_end(s[0]);
    sse_free(s[0]);
    char *log = ty_server_log(g_srv);
    assert_non_null(log);
    assert_null(strstr(log, "streams still hold places"));
    free(log);
    ty_client_free(alice);
    ty_client_free(bob);
    ty_client_free(carol);
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_follower_sees_a_job_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resumes_after_a_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_stream_with_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_ends_streams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caps_on_followed_streams, setup_caps, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
