/*
 * test_api_feed.c - api/feed.c (the fan-out) and api/events.c (the streams
 * over it), against a real store: wake-ups and shutdown of the fan-out; what
 * GET /v1/events and GET /v1/jobs/{id}/events?follow=true send, their filters
 * and cursors, the per-job stream's metric points and its end, the
 * refusals, and the places the streams hold (api/streams.h): refused past
 * their caps before anything is allocated, given back however they end. A
 * stream is read the way server/ reads it, through its read().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "api/feed.h"
#include "api/streams.h"
#include "common/ty_time.h"

typedef struct fx {
    char dir[64];
    char db[128];
    store *store;
    api_feed *feed;
    api_ctx ctx;
    const char *who;             /* the caller's principal; NULL: "tester" */
} fx;

static void on_change(void *ud)
{
    api_feed_notify(ud);
}

static void on_metrics(void *ud)
{
    api_feed_notify_metrics(ud);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    char err[256];
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ty-feed-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    assert_int_equal(store_open(f->db, NULL, &f->store, err, sizeof err), TY_OK);
    assert_int_equal(api_feed_new(&f->feed), TY_OK);
    f->ctx.store = f->store;
    f->ctx.feed = f->feed;
    /* As server/main.c wires them. */
    store_set_change_hook(f->store, on_change, f->feed);
    store_set_metrics_hook(f->store, on_metrics, f->feed);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    char path[160];
    store_close(f->store);
    api_feed_free(f->feed);
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", f->db, sfx[i]);
        unlink(path);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Submits a job with a spec that has these labels (a JSON object). */
static void submit(fx *f, const char *name, const char *queue, const char *labels,
                   char id[STORE_ID_LEN + 1])
{
    char spec[256];
    snprintf(spec, sizeof spec, "{\"name\":\"%s\",\"labels\":%s}", name, labels);
    store_job_new j = {.name = name, .queue = queue, .spec_json = spec};
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(f->store, &j, 1, NULL, NULL, &out, &n, NULL), TY_OK);
    memcpy(id, out->id, STORE_ID_LEN + 1);
    store_jobs_free(out, n);
}

static void move(fx *f, const char *id, job_state from, job_state to)
{
    store_update u = {.id = id, .from = from, .to = to, .reason = "Test", .restarts = -1};
    assert_int_equal(store_jobs_update(f->store, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
}

static int64_t head(fx *f)
{
    int64_t h = 0;
    assert_int_equal(store_changes_head(f->store, &h), TY_OK);
    return h;
}

/* Calls a stream handler; the query is "k=v" strings. */
static void call(fx *f, void (*handler)(const api_req *, api_resp *), const char *id,
                 const char *last_event_id, const char *const *query, size_t nquery,
                 api_resp *resp)
{
    api_kv kv[8];
    char buf[8][128];
    assert_true(nquery <= 8);
    for (size_t i = 0; i < nquery; i++) {
        snprintf(buf[i], sizeof buf[i], "%s", query[i]);
        char *eq = strchr(buf[i], '=');
        if (eq)
            *eq = '\0';
        kv[i] = (api_kv){buf[i], eq ? eq + 1 : NULL};
    }
    api_principal p = {.name = f->who ? f->who : "tester", .scopes = STORE_SCOPE_READ};
    api_req req = {.ctx = &f->ctx, .method = "GET", .path = "/v1/events", .id = id,
                   .query = kv, .nquery = nquery, .last_event_id = last_event_id,
                   .principal = &p, .request_id = "test"};
    memset(resp, 0, sizeof *resp);
    handler(&req, resp);
}

/*
 * Reads the stream until it has sent `want` events, into out (reset first).
 * A heartbeat would mean the stream waited 15 s for an event that does not
 * come: that fails the test.
 */
static void read_events(api_resp *resp, int want, ty_buf *out)
{
    char buf[4096];
    int got = 0;
    ty_buf_reset(out);
    assert_non_null(resp->stream.read);
    while (got < want) {
        long n = resp->stream.read(resp->stream.ud, buf, sizeof buf);
        assert_true(n > 0);
        assert_int_equal(ty_buf_append(out, buf, (size_t)n), TY_OK);
        assert_int_equal(ty_buf_append(out, "", 1), TY_OK);
        out->len--;
        assert_null(strstr(out->data, ": ping"));
        got = 0;
        for (const char *p = out->data; (p = strstr(p, "event: ")); p++)
            got++;
    }
    assert_int_equal(got, want);
}

/* The id lines of out, comma-separated. */
static void ids(const ty_buf *out, char *dst, size_t len)
{
    size_t used = 0;
    dst[0] = '\0';
    for (const char *p = out->data; (p = strstr(p, "id: ")); p += 4) {
        size_t n = strcspn(p + 4, "\n");
        int w = snprintf(dst + used, len - used, "%s%.*s", used ? "," : "", (int)n, p + 4);
        assert_true(w > 0 && (size_t)w < len - used);
        used += (size_t)w;
    }
}

/* Ends the stream as a server shutdown does, and frees it. */
static void end_stream(fx *f, api_resp *resp)
{
    char buf[64];
    api_feed_shutdown(f->feed);
    assert_int_equal(resp->stream.read(resp->stream.ud, buf, sizeof buf), 0);
    api_resp_free(resp);
    assert_int_equal(api_feed_followers(f->feed), 0);
}

/* ---- the fan-out ----------------------------------------------------------------------- */

static void test_wait_says_why_it_returned(void **state)
{
    fx *f = *state;
    api_feed_gen g = api_feed_generation(f->feed);
    /* A deadline already past: nothing moved. */
    assert_int_equal(api_feed_wait(f->feed, g, 1, 0), API_FEED_TIMEOUT);
    api_feed_notify_metrics(f->feed);
    assert_int_equal(api_feed_wait(f->feed, g, 0, 0), API_FEED_TIMEOUT); /* not waited for */
    assert_int_equal(api_feed_wait(f->feed, g, 1, 0), API_FEED_CHANGED);
    api_feed_notify(f->feed);
    assert_int_equal(api_feed_wait(f->feed, g, 0, 0), API_FEED_CHANGED);
    api_feed_gen g2 = api_feed_generation(f->feed);
    assert_true(g2.events == g.events + 1 && g2.metrics == g.metrics + 1);
    api_feed_shutdown(f->feed);
    assert_int_equal(api_feed_wait(f->feed, g2, 1, UINT64_MAX), API_FEED_CLOSED);
}

typedef struct waiter {
    api_feed *feed;
    api_feed_gen seen;
    int result;
} waiter;

static void *wait_main(void *ud)
{
    waiter *w = ud;
    w->result = api_feed_wait(w->feed, w->seen, 0, UINT64_MAX);
    return NULL;
}

static void test_notify_wakes_every_waiter(void **state)
{
    fx *f = *state;
    enum { N = 8 };
    waiter w[N];
    pthread_t t[N];
    api_feed_gen g = api_feed_generation(f->feed);
    for (int i = 0; i < N; i++) {
        w[i] = (waiter){f->feed, g, -1};
        assert_int_equal(pthread_create(&t[i], NULL, wait_main, &w[i]), 0);
    }
    api_feed_notify(f->feed);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].result, API_FEED_CHANGED);
    }
}

/* Collects the seqs a read visits. */
typedef struct visited {
    int64_t seqs[1000];
    size_t n;
} visited;

static ty_err collect(void *ud, const api_feed_item *it)
{
    visited *s = ud;
    assert_true(s->n < 1000);
    assert_non_null(strstr(it->text, "event: job\ndata: {\"seq\":"));
    s->seqs[s->n++] = it->seq;
    return TY_OK;
}

/* Reads [after+1 ...] through the window and checks the seqs are the next ones: want of them,
 * or with want 0 and limit > 0 any number from 1 to limit (a read stops at the window's end). */
static int64_t read_run(fx *f, int64_t after, int limit, size_t want)
{
    visited s = {.n = 0};
    int64_t last = -1;
    int more = 0;
    uint64_t seen = api_feed_generation(f->feed).events;
    assert_int_equal(
        api_feed_read(f->feed, f->store, seen, after, limit, collect, &s, &last, &more), TY_OK);
    if (want == 0 && limit > 1)
        assert_true(s.n >= 1 && s.n <= (size_t)limit);
    else
        assert_int_equal(s.n, want);
    for (size_t i = 0; i < s.n; i++)
        assert_int_equal(s.seqs[i], after + 1 + (int64_t)i);
    assert_int_equal(last, s.n ? s.seqs[s.n - 1] : after);
    return last;
}

static void test_window_serves_every_cursor(void **state)
{
    fx *f = *state;
    /* More events than the window holds: the oldest leave it. */
    enum { JOBS = 10000, BATCH = 1000 };
    assert_true(JOBS > API_FEED_WINDOW);
    static store_job_new in[BATCH];
    for (size_t i = 0; i < BATCH; i++)
        in[i] = (store_job_new){.name = "w", .queue = "default", .spec_json = "{}"};
    for (int done = 0; done < JOBS; done += BATCH) {
        store_job *out = NULL;
        size_t n = 0;
        assert_int_equal(store_jobs_submit(f->store, in, BATCH, NULL, NULL, &out, &n, NULL),
                         TY_OK);
        store_jobs_free(out, n);
    }
    /* One cursor walks the whole feed through the window. */
    int64_t c = 0;
    while (c < JOBS) /* a read stops at the window's end */
        c = read_run(f, c, 200, 0);
    assert_int_equal(c, JOBS);
    read_run(f, c, 1, 0); /* caught up */
    /* A second one, at the start: behind the window now, it reads the store itself. */
    read_run(f, 0, 1000, 1000);
    /* One in the window, as the many followers of a commit are. */
    read_run(f, JOBS - 5, 1000, 5);
    /* A new event extends the window for everyone. */
    char id[STORE_ID_LEN + 1];
    submit(f, "late", "default", "{}", id);
    read_run(f, JOBS, 1000, 1);
    read_run(f, JOBS - 1, 1000, 2);
    visited s = {.n = 0};
    int64_t last = 0;
    int more = 0;
    assert_int_equal(api_feed_read(f->feed, f->store, 0, -1, 10, collect, &s, &last, &more),
                     TY_EINVAL);
}

/* ---- GET /v1/events -------------------------------------------------------------------- */

static void test_stream_of_every_job(void **state)
{
    fx *f = *state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    submit(f, "before", "default", "{}", a); /* before the stream: not sent */
    api_resp resp;
    const char *q[] = {"follow=true"};
    call(f, api_events_follow, NULL, NULL, q, 1, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "text/event-stream");
    submit(f, "alpha", "gpu", "{\"sweep\":\"lr\"}", b);
    move(f, b, JOB_PENDING, JOB_CANCELLED);

    ty_buf out = {0};
    read_events(&resp, 2, &out);
    char want[512];
    snprintf(want, sizeof want,
             "event: job\ndata: {\"seq\":%lld,\"job_id\":\"%s\",\"name\":\"alpha\","
             "\"queue\":\"gpu\",\"labels\":{\"sweep\":\"lr\"},\"from\":null,\"to\":\"PENDING\",",
             (long long)head(f) - 1, b);
    assert_non_null(strstr(out.data, want));
    assert_non_null(strstr(out.data, "\"from\":\"PENDING\",\"to\":\"CANCELLED\""));
    assert_null(strstr(out.data, "before"));
    /* The data of an event is one line of JSON. */
    const char *data = strstr(out.data, "data: ") + 6;
    json_error_t jerr;
    json_t *ev = json_loadb(data, strcspn(data, "\n"), 0, &jerr);
    assert_non_null(ev);
    assert_string_equal(json_string_value(json_object_get(ev, "reason")), "Submitted");
    json_decref(ev);
    ty_buf_free(&out);
    end_stream(f, &resp);
}

static void test_filters_apply_to_the_job(void **state)
{
    fx *f = *state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1], c[STORE_ID_LEN + 1];
    int64_t start = head(f);
    submit(f, "a", "gpu", "{\"team\":\"x\",\"sweep\":\"lr\"}", a);
    submit(f, "b", "gpu", "{\"team\":\"y\"}", b);
    submit(f, "c", "cpu", "{\"team\":\"x\"}", c);
    move(f, a, JOB_PENDING, JOB_CANCELLED);
    move(f, b, JOB_PENDING, JOB_CANCELLED);
    move(f, c, JOB_PENDING, JOB_CANCELLED);
    char after[32];
    snprintf(after, sizeof after, "after=%lld", (long long)start);
    static const struct {
        const char *filters[3];
        size_t n;
        int events;
        const char *names; /* the jobs in the stream, in order */
    } cases[] = {
        {{"queue=gpu"}, 1, 4, "a,b,a,b"},
        {{"label=team=x"}, 1, 4, "a,c,a,c"},
        {{"label=team=x", "label=sweep=lr"}, 2, 2, "a,a"},
        {{"state=cancelled"}, 1, 3, "a,b,c"},
        {{"state=PENDING", "queue=cpu"}, 2, 1, "c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *q[5] = {"follow=true", after};
        for (size_t k = 0; k < cases[i].n; k++)
            q[2 + k] = cases[i].filters[k];
        api_resp resp;
        call(f, api_events_follow, NULL, NULL, q, 2 + cases[i].n, &resp);
        assert_int_equal(resp.status, 200);
        ty_buf out = {0};
        read_events(&resp, cases[i].events, &out);
        char names[64] = "";
        for (const char *p = out.data; (p = strstr(p, "\"name\":\"")); p += 8)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%c",
                     names[0] ? "," : "", p[8]);
        if (strcmp(names, cases[i].names) != 0)
            fail_msg("case %zu: jobs %s, want %s", i, names, cases[i].names);
        ty_buf_free(&out);
        api_resp_free(&resp);
    }
    assert_int_equal(api_feed_followers(f->feed), 0);
}

static void test_resumes_after_the_cursor(void **state)
{
    fx *f = *state;
    char a[STORE_ID_LEN + 1];
    int64_t start = head(f);
    submit(f, "a", "default", "{}", a);
    move(f, a, JOB_PENDING, JOB_ADMITTED);
    move(f, a, JOB_ADMITTED, JOB_STARTING);
    move(f, a, JOB_STARTING, JOB_RUNNING);
    char cursor[32], want[64];
    snprintf(cursor, sizeof cursor, "%lld", (long long)start + 2);
    /* Last-Event-ID wins over ?after=. */
    const char *q[] = {"follow=true", "after=0"};
    api_resp resp;
    call(f, api_events_follow, NULL, cursor, q, 2, &resp);
    ty_buf out = {0};
    read_events(&resp, 2, &out);
    char got[128];
    ids(&out, got, sizeof got);
    snprintf(want, sizeof want, "%lld,%lld", (long long)start + 3, (long long)start + 4);
    assert_string_equal(got, want);
    ty_buf_free(&out);
    end_stream(f, &resp);
}

static void test_refusals(void **state)
{
    fx *f = *state;
    char big[32];
    snprintf(big, sizeof big, "after=%lld", (long long)head(f) + 5);
    static const struct {
        const char *q[3];
        size_t n;
        const char *last_event_id;
        const char *path;
    } cases[] = {
        {{NULL}, 0, NULL, "query.follow"},
        {{"follow=false"}, 1, NULL, "query.follow"},
        {{"follow=true", "bogus=1"}, 2, NULL, "query.bogus"},
        {{"follow=true", "state=WAITING"}, 2, NULL, "query.state"},
        {{"follow=true", "label=no"}, 2, NULL, "query.label"},
        {{"follow=true", "after=-1"}, 2, NULL, "query.after"},
        {{"follow=true", "after=1", "after=2"}, 3, NULL, "query.after"},
        {{"follow=true"}, 1, "12.3", "header.Last-Event-ID"},
        {{"follow=true", NULL}, 2, NULL, "query.after"}, /* after the newest event */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *q[3] = {cases[i].q[0], cases[i].q[1] ? cases[i].q[1] : big, cases[i].q[2]};
        api_resp resp;
        call(f, api_events_follow, NULL, cases[i].last_event_id, q, cases[i].n, &resp);
        if (resp.status != 400 || !resp.body || !strstr(resp.body, cases[i].path))
            fail_msg("case %zu: %u %.*s", i, resp.status, (int)resp.body_len,
                     resp.body ? resp.body : "");
        assert_null(resp.stream.read);
        api_resp_free(&resp);
    }
    /* No fan-out in this process: 503. */
    f->ctx.feed = NULL;
    const char *q[] = {"follow=true"};
    api_resp resp;
    call(f, api_events_follow, NULL, NULL, q, 1, &resp);
    assert_int_equal(resp.status, 503);
    api_resp_free(&resp);
    f->ctx.feed = f->feed;
}

/* ---- GET /v1/jobs/{id}/events?follow=true ---------------------------------------------- */

static void test_job_stream_sends_history_points_and_ends(void **state)
{
    fx *f = *state;
    char a[STORE_ID_LEN + 1], other[STORE_ID_LEN + 1];
    submit(f, "a", "default", "{}", a);
    submit(f, "other", "default", "{}", other);
    move(f, a, JOB_PENDING, JOB_ADMITTED);
    const char *names[] = {"loss", "accuracy"};
    /* Points stored before the stream begins are not sent (GET .../metrics has them). */
    store_metric_in old[] = {{0, 0, 1000, 9.0}};
    assert_int_equal(store_metrics_append(f->store, a, names, 1, old, 1), TY_OK);

    const char *q[] = {"follow=true"};
    api_resp resp;
    call(f, api_jobs_events_follow, a, NULL, q, 1, &resp);
    assert_int_equal(resp.status, 200);
    ty_buf out = {0};
    read_events(&resp, 2, &out); /* its history: submitted, admitted */
    assert_null(strstr(out.data, "other"));

    store_metric_in pts[] = {{0, 1, 1000, 2.5}, {1, 1, 1000, 0.25}, {0, 2, 2000, 2.0}};
    assert_int_equal(store_metrics_append(f->store, a, names, 2, pts, 3), TY_OK);
    int64_t mhead = 0;
    assert_int_equal(store_metrics_head(f->store, &mhead), TY_OK);
    api_feed_notify_metrics(f->feed);
    read_events(&resp, 1, &out);
    char want[256];
    snprintf(want, sizeof want,
             "id: %lld.%lld\nevent: metrics\ndata: {\"points\":[{\"step\":1,\"time\":"
             "\"1970-01-01T00:00:01.000Z\",\"loss\":2.5,\"accuracy\":0.25},{\"step\":2,\"time\":"
             "\"1970-01-01T00:00:02.000Z\",\"loss\":2}]}\n\n",
             (long long)head(f), (long long)mhead);
    assert_string_equal(strstr(out.data, "id: "), want);

    /* The terminal event ends the stream. */
    move(f, a, JOB_ADMITTED, JOB_CANCELLED);
    api_feed_notify(f->feed);
    read_events(&resp, 1, &out);
    assert_non_null(strstr(out.data, "\"to\":\"CANCELLED\""));
    char buf[64];
    assert_int_equal(resp.stream.read(resp.stream.ud, buf, sizeof buf), 0);
    api_resp_free(&resp);

    /* Resumed with both cursors after the end: what is left, then the end at once. */
    char cursor[64];
    snprintf(cursor, sizeof cursor, "%lld.0", (long long)head(f) - 1);
    call(f, api_jobs_events_follow, a, cursor, q, 1, &resp);
    read_events(&resp, 2, &out); /* the cancel, then every point after metric seq 0 */
    assert_non_null(strstr(out.data, "\"to\":\"CANCELLED\""));
    assert_non_null(strstr(out.data, "{\"step\":0,\"time\":\"1970-01-01T00:00:01.000Z\","
                                     "\"loss\":9}"));
    assert_int_equal(resp.stream.read(resp.stream.ud, buf, sizeof buf), 0);
    api_resp_free(&resp);
    ty_buf_free(&out);
    assert_int_equal(api_feed_followers(f->feed), 0);
}

static void test_job_stream_refusals(void **state)
{
    fx *f = *state;
    char a[STORE_ID_LEN + 1];
    submit(f, "a", "default", "{}", a);
    api_resp resp;
    const char *q[] = {"follow=true"};
    call(f, api_jobs_events_follow, "0000000000zzzzzzzzzzzzzzzz", NULL, q, 1, &resp);
    assert_int_equal(resp.status, 404);
    api_resp_free(&resp);
    call(f, api_jobs_events_follow, a, "1.x", q, 1, &resp);
    assert_int_equal(resp.status, 400);
    api_resp_free(&resp);
    const char *q2[] = {"follow=yes"};
    call(f, api_jobs_events_follow, a, NULL, q2, 1, &resp);
    assert_int_equal(resp.status, 400);
    api_resp_free(&resp);
    const char *q3[] = {"follow=true", "state=RUNNING"}; /* no filters on one job's stream */
    call(f, api_jobs_events_follow, a, NULL, q3, 2, &resp);
    assert_int_equal(resp.status, 400);
    api_resp_free(&resp);
}

/* ---- the places of the streams ------------------------------------------------------------ */

static unsigned streams_open(fx *f)
{
    api_streams_stats st;
    api_streams_get_stats(f->ctx.streams, &st);
    return st.open;
}

/* Calls handler as principal who and expects the 429 of a cap; nothing of a stream is made. */
static void expect_refused(fx *f, const char *who, void (*handler)(const api_req *, api_resp *),
                           const char *id, const char *cap_words)
{
    const char *q[] = {"follow=true"};
    api_resp resp;
    long followers = api_feed_followers(f->feed);
    f->who = who;
    call(f, handler, id, NULL, q, 1, &resp);
    f->who = NULL;
    if (resp.status != 429 || !resp.body || !strstr(resp.body, cap_words))
        fail_msg("%s: %u %.*s", who, resp.status, (int)resp.body_len, resp.body ? resp.body : "");
    assert_string_equal(resp.content_type, "application/problem+json");
    assert_non_null(strstr(resp.body, "\"code\":\"too-many-streams\""));
    assert_null(resp.stream.read);
    assert_int_equal(resp.nheaders, 1);
    assert_string_equal(resp.headers[0].key, "Retry-After");
    assert_int_equal(api_feed_followers(f->feed), followers);
    api_resp_free(&resp);
}

/*
 * Two streams per token, three in all, both kinds counted together: past either cap the
 * answer is 429. Each way a stream ends gives its place back once: the job ended, the
 * response dropped unread (the client gone), the server shutting down.
 */
static void test_streams_hold_places(void **state)
{
    fx *f = *state;
    api_streams *s = NULL;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    api_resp r1, r2, r3;
    const char *q[] = {"follow=true"};
    assert_int_equal(api_streams_new(3, 2, &s), TY_OK);
    f->ctx.streams = s;
    submit(f, "a", "default", "{}", a);
    submit(f, "b", "default", "{}", b);

    call(f, api_events_follow, NULL, NULL, q, 1, &r1);
    assert_int_equal(r1.status, 200);
    call(f, api_jobs_events_follow, a, NULL, q, 1, &r2);
    assert_int_equal(r2.status, 200);
    assert_int_equal(api_streams_held(s, "tester"), 2);
    expect_refused(f, "tester", api_events_follow, NULL, "this token");
    expect_refused(f, "tester", api_jobs_events_follow, b, "this token");

    /* Checks of the request come first: a bad query at the cap is still a 400. */
    const char *bad[] = {"follow=true", "bogus=1"};
    api_resp resp;
    call(f, api_events_follow, NULL, NULL, bad, 2, &resp);
    assert_int_equal(resp.status, 400);
    api_resp_free(&resp);

    /* Another token takes the last place; then the server's cap refuses a third. */
    f->who = "other";
    call(f, api_jobs_events_follow, b, NULL, q, 1, &r3);
    f->who = NULL;
    assert_int_equal(r3.status, 200);
    assert_int_equal(streams_open(f), 3);
    expect_refused(f, "third", api_events_follow, NULL, "the server");
    expect_refused(f, "other", api_jobs_events_follow, a, "the server");

    api_streams_stats st;
    api_streams_get_stats(s, &st);
    assert_int_equal(st.refused[API_STREAMS_PER_TOKEN], 2);
    assert_int_equal(st.refused[API_STREAMS_TOTAL], 2);

    /* The job ended: its stream ends, and its place is back once freed. */
    ty_buf out = {0};
    char buf[64];
    read_events(&r3, 1, &out);
    move(f, b, JOB_PENDING, JOB_CANCELLED);
    api_feed_notify(f->feed);
    read_events(&r3, 1, &out);
    assert_non_null(strstr(out.data, "\"to\":\"CANCELLED\""));
    assert_int_equal(r3.stream.read(r3.stream.ud, buf, sizeof buf), 0);
    api_resp_free(&r3);
    assert_int_equal(api_streams_held(s, "other"), 0);
    assert_int_equal(streams_open(f), 2);

    /* Freed without being read to its end, as when the client went away. */
    api_resp_free(&r2);
    assert_int_equal(api_streams_held(s, "tester"), 1);
    call(f, api_jobs_events_follow, a, NULL, q, 1, &r2);
    assert_int_equal(r2.status, 200);

    /* The server stops: both end, and every place is back. */
    assert_true(r1.stream.read(r1.stream.ud, buf, sizeof buf) > 0); /* ": ok" */
    read_events(&r2, 1, &out); /* a's history */
    ty_buf_free(&out);
    api_feed_shutdown(f->feed);
    assert_int_equal(r1.stream.read(r1.stream.ud, buf, sizeof buf), 0);
    api_resp_free(&r1);
    assert_int_equal(streams_open(f), 1);
    end_stream(f, &r2);
    assert_int_equal(streams_open(f), 0);
    assert_int_equal(api_streams_held(s, "tester"), 0);
    f->ctx.streams = NULL;
    api_streams_free(s);
}

/* ---- calloc's failure injected (test_api_feed links with -Wl,--wrap=calloc) ---------------- */

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
static _Atomic long g_calloc_fail_in; /* > 0: the calloc that many calls from now fails */

void *__wrap_calloc(size_t n, size_t size)
{
    if (atomic_load(&g_calloc_fail_in) > 0 && atomic_fetch_sub(&g_calloc_fail_in, 1) == 1)
        return NULL;
    return __real_calloc(n, size);
}

/*
 * The Nth calloc of a stream request fails, for each N until the request needs no more: the
 * answer is then 503 out-of-memory or, when the failure was absorbed, the stream, and either
 * way once it is freed its place is back and no follower is left.
 */
static void test_failed_allocation_gives_the_place_back(void **state)
{
    fx *f = *state;
    api_streams *s = NULL;
    char a[STORE_ID_LEN + 1];
    assert_int_equal(api_streams_new(1, 1, &s), TY_OK);
    f->ctx.streams = s;
    submit(f, "a", "default", "{\"team\":\"x\"}", a);
    static const char *const q[] = {"follow=true", "label=team=x", "queue=default"};
    int failed = 0;
    for (int kind = 0; kind < 2; kind++) {
        for (long n = 1;; n++) {
            api_resp resp;
            atomic_store(&g_calloc_fail_in, n);
            if (kind == 0)
                call(f, api_events_follow, NULL, NULL, q, 3, &resp);
            else
                call(f, api_jobs_events_follow, a, NULL, q, 1, &resp);
            int reached = atomic_exchange(&g_calloc_fail_in, 0) == 0;
            if (resp.status != 200 && resp.status != 503)
                fail_msg("calloc %ld failing: %u %.*s", n, resp.status, (int)resp.body_len,
                         resp.body ? resp.body : "");
            failed += resp.status == 503;
            api_resp_free(&resp);
            assert_int_equal(streams_open(f), 0);
            assert_int_equal(api_feed_followers(f->feed), 0);
            if (!reached)
                break; /* the request made fewer callocs than n: every one was tried */
        }
    }
    assert_true(failed >= 2); /* at least the follower's own, in each kind */
    f->ctx.streams = NULL;
    api_streams_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wait_says_why_it_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_wakes_every_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_serves_every_cursor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_of_every_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filters_apply_to_the_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resumes_after_the_cursor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_stream_sends_history_points_and_ends, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_job_stream_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streams_hold_places, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_allocation_gives_the_place_back, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
