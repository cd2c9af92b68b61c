/*
 * events.c - the live event streams, as Server-Sent Events (text/event-stream):
 *
 *   GET /v1/events?follow=true[&state=..][&queue=..][&label=k=v]
 *       every job's events; the filters are GET /v1/jobs's (jobs.c parses them) and apply
 *       to the job: its queue and labels, and `state` to the state the event moved it to.
 *       A token that is not an admin's gets its own team's jobs' events only: each item of the
 *       shared window carries its job's team, and a follower skips the others'.
 *   GET /v1/jobs/{id}/events?follow=true
 *       first every event the job has, then its new ones, and the metric points it reports
 *       from now on; the stream ends after the event that moves the job to a terminal state
 *       and the points stored before it.
 *
 * Each event of a job is
 *
 *   id: 812
 *   event: job
 *   data: {"seq":812,"job_id":"...","name":"...","queue":"...","labels":{...},
 *          "from":"PENDING","to":"ADMITTED","time":"...","reason":"...","message":"..."}
 *
 * with the data on one line (JSON escapes every line break). The id is the
 * event's seq in the change feed. A client that reconnects sends the last id
 * it received as Last-Event-ID (or ?after=SEQ) and gets exactly the events
 * after it: the stream is a read of the feed from a cursor, never a relay of
 * wake-ups, so nothing is lost across a reconnect and nothing comes twice.
 * Without either, GET /v1/events starts at the feed's head (only new events)
 * and the per-job stream at the job's first event.
 *
 * The per-job stream also sends the job's metric points, grouped by step:
 *
 *   id: 14.5230
 *   event: metrics
 *   data: {"points":[{"step":100,"time":"...","loss":0.53,"accuracy":0.91},...]}
 *
 * Its ids carry both cursors, "<event seq>.<metric seq>", and a Last-Event-ID
 * of that form resumes both; without one the points start at the newest
 * stored (the page reads the history with GET /v1/jobs/{id}/metrics). Within
 * one read, job events go before points: the two are numbered apart, so
 * their order across kinds is not kept, only within each.
 *
 * A comment line (": ping") is sent after 15 s without an event, which keeps
 * proxies and libmicrohttpd's inactivity timeout from closing a quiet stream
 * and lets a stream whose client went away notice it at that write. Notes
 * (PENDING -> PENDING, Waiting) wake no follower (the store fires no hook for
 * them): they go out with the next event that does (a per-job stream also at
 * its next heartbeat).
 *
 * Each stream holds a place among the followed streams (api/streams.h),
 * taken after every other check of its request and before the follower is
 * allocated (past a cap: 429), and given back by follower_free(), which
 * server/ calls once however the stream ends.
 *
 * Threads: everything below the handlers runs on the connection's thread, in
 * the stream's read() (see api_stream), which blocks in api_feed_wait() while
 * there is nothing to send. It holds no lock while server/ writes what it
 * returned, so a slow client slows only itself. GET /v1/events reads through
 * the feed's shared window (api_feed_read()); a per-job stream reads the
 * store for its job. What one read() returns is bounded: at most FEED_BATCH
 * events are formatted at a time, and only when the previous batch has been
 * handed out.
 */
#include "api/api_int.h"
#include "api/feed.h"

#include <stdlib.h>
#include <string.h>

#include "api/streams.h"
#include "common/ty_json.h"
#include "common/ty_time.h"

#define SSE_CONTENT_TYPE "text/event-stream"
/* Events read at a time: about 400 bytes each, so a batch fits one chunk. */
#define FEED_BATCH 64
/* Metric points read at a time (about 30 bytes each in a metrics event). */
#define METRICS_BATCH 1000
#define HEARTBEAT_NS (15ull * 1000000000ull)
/* The longest cursor accepted: digits of a seq (an int64 has 19). */
#define MAX_SEQ_DIGITS 18

typedef struct follower {
    store *store;                /* borrowed: outlives the server and its streams */
    api_feed *feed;              /* borrowed, likewise */
    char job[STORE_ID_LEN + 1];  /* the job of a per-job stream; "" for every job */
    int64_t cursor;              /* the last event read, sent or filtered out */
    api_job_filter filter;       /* state_mask and labels; owns its label copies */
    char *queue;                 /* the queue filter (owned), or NULL */
    char *team;                  /* GET /v1/events of a non-admin caller: its team's events
                                    only (owned); NULL: every team's */
    ty_buf out;                  /* formatted and not yet handed out, from `off` */
    size_t off;
    uint64_t last_sent_ns;       /* when read() last returned bytes (monotonic) */
    int metrics;                 /* a per-job stream: it sends metric points too */
    int64_t mcursor;             /* the last metric point read (metrics set) */
    int terminal;                /* a per-job stream read the job's terminal event (or the
                                    job had ended when it began): end once caught up */
    int done;                    /* nothing more will be sent: end once out is handed out */
    api_stream_place place;      /* its place among the followed streams, given back by free */
} follower;

static void follower_free(void *ud)
{
    follower *fl = ud;
    if (!fl)
        return;
    api_feed_follow(fl->feed, -1);
    api_stream_place_release(&fl->place);
    api_job_filter_free(&fl->filter);
    free(fl->queue);
    free(fl->team);
    ty_buf_free(&fl->out);
    free(fl);
}

/*
 * Whether a job passes the filters (see the top of the file). Label keys and
 * values cannot hold a quote or a backslash (spec.c), so in the compact JSON
 * of the labels the text "key":"value" occurs exactly when the job has that
 * label: a string search, no parse per event and follower.
 */
static bool matches(const follower *fl, job_state to, const char *queue, const char *labels)
{
    char pair[512]; /* a key is at most 253 + 1 + 63 bytes, a value 63 */
    if (fl->filter.f.state_mask && !(fl->filter.f.state_mask & (1u << to)))
        return false;
    if (fl->queue && strcmp(fl->queue, queue) != 0)
        return false;
    for (size_t i = 0; i < fl->filter.f.nlabels; i++) {
        int n = snprintf(pair, sizeof pair, "\"%s\":\"%s\"", fl->filter.labels[i].key,
                         fl->filter.labels[i].value);
        if (n < 0 || (size_t)n >= sizeof pair || !strstr(labels, pair))
            return false;
    }
    return true;
}

/* Appends the id line of an event: the event seq, and on a per-job stream the metric seq. */
static ty_err put_id(const follower *fl, ty_buf *b, int64_t seq)
{
    if (fl->metrics)
        return ty_buf_printf(b, "id: %lld.%lld\n", (long long)seq, (long long)fl->mcursor);
    return ty_buf_printf(b, "id: %lld\n", (long long)seq);
}

/* api_feed_visit of GET /v1/events: an event of the window, filtered, into out. */
static ty_err visit(void *ud, const api_feed_item *it)
{
    follower *fl = ud;
    if (fl->team && (!it->team || strcmp(fl->team, it->team) != 0))
        return TY_OK; /* another team's job: never sent, and its existence never shown */
    if (!matches(fl, it->to, it->queue, it->labels_json))
        return TY_OK;
    ty_err e = put_id(fl, &fl->out, it->seq);
    return e ? e : ty_buf_append(&fl->out, it->text, it->len);
}

/*
 * Appends one `metrics` event holding rows r[0..n) (n > 0, by seq): the rows
 * of one step in a row make one point, so a report of several series at a
 * step is one point with a member per series.
 */
static ty_err put_metrics_event(follower *fl, const store_metric_row *r, size_t n)
{
    char time[32];
    fl->mcursor = r[n - 1].seq;
    ty_err e = put_id(fl, &fl->out, fl->cursor);
    if (!e)
        e = ty_buf_puts(&fl->out, "event: metrics\ndata: {\"points\":[");
    for (size_t i = 0; i < n && !e; i++) {
        if (i == 0 || r[i].step != r[i - 1].step) {
            ty_time_format_rfc3339(r[i].time_ms, time, sizeof time);
            e = ty_buf_printf(&fl->out, "%s{\"step\":%lld,\"time\":\"%s\"", i ? "}," : "",
                              (long long)r[i].step, time);
        }
        if (!e)
            e = ty_buf_append(&fl->out, ",", 1);
        if (!e)
            e = ty_json_put_string(&fl->out, r[i].name, SIZE_MAX);
        /* Stored values are finite (the store refuses others): %.17g is valid JSON and exact. */
        if (!e)
            e = ty_buf_printf(&fl->out, ":%.17g", r[i].value);
    }
    if (!e)
        e = ty_buf_puts(&fl->out, "}]}\n\n");
    return e;
}

/*
 * Reads the next batch after the cursors and formats what passes the filters
 * into out. *more is set when a batch was full (more may follow at once).
 */
static ty_err fill(follower *fl, uint64_t seen, int *more)
{
    store_feed_event *ev = NULL;
    store_metric_row *rows = NULL;
    size_t n = 0, nrows = 0;
    if (!fl->job[0])
        return api_feed_read(fl->feed, fl->store, seen, fl->cursor, FEED_BATCH, visit, fl,
                             &fl->cursor, more);
    ty_err e = store_feed_read_job(fl->store, fl->job, fl->cursor, FEED_BATCH, &ev, &n);
    *more = e == TY_OK && n == FEED_BATCH;
    for (size_t i = 0; i < n && !e; i++) {
        e = put_id(fl, &fl->out, ev[i].seq);
        if (!e)
            e = api_feed_put_event(&fl->out, &ev[i]);
        fl->cursor = ev[i].seq;
        if (job_state_is_terminal(ev[i].to))
            fl->terminal = 1;
    }
    store_feed_free(ev, n);
    /* Read after the events: once the terminal event is read, this read sees every point
     * stored before it, and none can be stored after it. */
    if (!e && fl->metrics)
        e = store_metrics_since(fl->store, fl->job, fl->mcursor, METRICS_BATCH, &rows, &nrows);
    if (!e && nrows) {
        e = put_metrics_event(fl, rows, nrows);
        *more |= nrows == METRICS_BATCH;
    }
    free(rows);
    return e;
}

/* api_stream.read: blocks until there is something to send, the heartbeat, or the end. */
static long follower_read(void *ud, char *buf, size_t max)
{
    follower *fl = ud;
    for (;;) {
        if (fl->off < fl->out.len) {
            size_t n = fl->out.len - fl->off;
            if (n > max)
                n = max;
            memcpy(buf, fl->out.data + fl->off, n);
            fl->off += n;
            if (fl->off == fl->out.len) {
                ty_buf_reset(&fl->out);
                fl->off = 0;
            }
            fl->last_sent_ns = ty_time_mono_ns();
            return (long)n;
        }
        if (fl->done)
            return 0;
        /* Noted before reading: a commit during the read moves it, so the wait below
         * returns at once and nothing committed meanwhile is left unread. */
        api_feed_gen gen = api_feed_generation(fl->feed);
        uint64_t deadline = fl->last_sent_ns + HEARTBEAT_NS;
        if (api_feed_wait(fl->feed, gen, 0, 0) == API_FEED_CLOSED)
            return 0;
        int more = 0;
        if (fill(fl, gen.events, &more) != TY_OK)
            return -1; /* cut off: the client resumes from the last id it received */
        if (!more && fl->terminal)
            fl->done = 1;
        if (fl->out.len || more || fl->done)
            continue;
        int w = api_feed_wait(fl->feed, gen, fl->metrics, deadline);
        if (w == API_FEED_CLOSED)
            return 0;
        if (w == API_FEED_TIMEOUT && ty_buf_puts(&fl->out, ": ping\n\n") != TY_OK)
            return -1;
    }
}

/* ---- requests ---------------------------------------------------------------------------- */

/* A cursor: decimal digits, no sign, at most MAX_SEQ_DIGITS; -1 otherwise. */
static int64_t parse_seq(const char *v, size_t n)
{
    if (n == 0 || n > MAX_SEQ_DIGITS)
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

typedef struct stream_query {
    int follow;                  /* follow=true given */
    int seen_follow, seen_after;
    const char *after;           /* the after parameter, borrowed, or NULL */
    api_job_filter filter;       /* GET /v1/events only */
} stream_query;

/* Parses the query of either stream; `filters` allows state, queue and label. */
static void parse_query(const api_req *req, int filters, stream_query *q, spec_errors *errs)
{
    for (size_t i = 0; i < req->nquery; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (filters && api_job_filter_param(&q->filter, k, v, errs))
            continue;
        if (strcmp(k, "follow") == 0) {
            if (q->seen_follow++)
                spec_errors_add(errs, "query.follow", "must be given once");
            else if (strcmp(v, "true") == 0)
                q->follow = 1;
        } else if (strcmp(k, "after") == 0) {
            if (q->seen_after++)
                spec_errors_add(errs, "query.after", "must be given once");
            else
                q->after = v;
        } else {
            char path[96];
            snprintf(path, sizeof path, "query.%.80s", k);
            spec_errors_add(errs, path, "unknown query parameter");
        }
    }
    if (!q->follow)
        spec_errors_add(errs, "query.follow",
                        "must be true: this resource is a stream (Server-Sent Events)");
}

/*
 * The cursors a stream starts after: Last-Event-ID wins over ?after= (a
 * client reconnecting repeats its first URL, the header is newer). The event
 * seq is -1 when neither is given; the metric seq (*mseq, only where it is
 * not NULL: "SEQ.MSEQ" is accepted) is -1 when not given. A bad one is an
 * error in errs.
 */
static int64_t start_cursor(const api_req *req, const stream_query *q, int64_t *mseq,
                            spec_errors *errs)
{
    const char *v = req->last_event_id && req->last_event_id[0] ? req->last_event_id : q->after;
    const char *path = v == q->after ? "query.after" : "header.Last-Event-ID";
    if (mseq)
        *mseq = -1;
    if (!v)
        return -1;
    size_t n = strlen(v), dot = strcspn(v, ".");
    int64_t seq = parse_seq(v, mseq ? dot : n);
    if (seq >= 0 && mseq && dot < n && (*mseq = parse_seq(v + dot + 1, n - dot - 1)) < 0)
        seq = -1;
    if (seq < 0)
        spec_errors_add(errs, path,
                        mseq ? "must be the id of an event: SEQ or SEQ.METRIC_SEQ, digits"
                             : "must be the id of an event: a seq, digits only");
    return seq;
}

/*
 * Creates the follower and hands it to resp as a stream; filter (if any) is stolen, and so is
 * the place, when the stream is made (otherwise *place still holds it).
 */
static void reply_stream(const api_req *req, api_resp *resp, const store_job *job,
                         int64_t cursor, int64_t mcursor, api_job_filter *filter,
                         api_stream_place *place)
{
    follower *fl = calloc(1, sizeof *fl);
    if (!fl || ty_buf_puts(&fl->out, ": ok\n\n") != TY_OK) {
        free(fl);
        api_reply_error(resp, TY_ENOMEM, NULL);
        return;
    }
    fl->store = req->ctx->store;
    fl->feed = req->ctx->feed;
    const char *team = job ? NULL : api_team_filter(req);
    if (team && !(fl->team = strdup(team))) {
        ty_buf_free(&fl->out);
        free(fl);
        api_reply_error(resp, TY_ENOMEM, NULL);
        return;
    }
    if (job) {
        memcpy(fl->job, job->id, STORE_ID_LEN + 1);
        fl->terminal = job_state_is_terminal(job->state);
        fl->metrics = 1;
        fl->mcursor = mcursor;
    }
    fl->cursor = cursor;
    if (filter) {
        if (filter->f.queue && !(fl->queue = strdup(filter->f.queue))) {
            ty_buf_free(&fl->out);
            free(fl->team);
            free(fl);
            api_reply_error(resp, TY_ENOMEM, NULL);
            return;
        }
        fl->filter = *filter; /* the label copies move to fl */
        fl->filter.f.queue = NULL;
        fl->filter.f.labels = NULL;
        filter->f.nlabels = 0;
    }
    fl->last_sent_ns = ty_time_mono_ns();
    api_stream_place_move(&fl->place, place);
    api_feed_follow(fl->feed, 1);
    api_reply_stream(resp, 200, SSE_CONTENT_TYPE,
                     (api_stream){.read = follower_read, .free = follower_free, .ud = fl});
    /* A proxy must neither cache the stream nor hold its events back. */
    api_resp_header(resp, "Cache-Control", "no-store");
    api_resp_header(resp, "X-Accel-Buffering", "no");
}

static bool need_feed(const api_req *req, api_resp *resp)
{
    if (req->ctx->feed)
        return true;
    api_reply_problem(resp, 503, "unavailable", NULL, "event streams are not available", NULL);
    return false;
}

void api_events_follow(const api_req *req, api_resp *resp)
{
    stream_query q;
    spec_errors errs = {0};
    api_stream_place place = {0};
    memset(&q, 0, sizeof q);
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_query(req, 1, &q, &errs);
    int64_t cursor = start_cursor(req, &q, NULL, &errs);
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    if (!need_feed(req, resp))
        goto out;
    int64_t head = 0;
    if ((e = store_changes_head(req->ctx->store, &head)))
        goto fail;
    if (cursor > head) {
        char msg[96];
        snprintf(msg, sizeof msg, "is after the newest event (%lld)", (long long)head);
        spec_errors_add(&errs, req->last_event_id && req->last_event_id[0]
                                   ? "header.Last-Event-ID" : "query.after", msg);
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    if (!api_need_stream_place(req, resp, &place))
        goto out;
    reply_stream(req, resp, NULL, cursor < 0 ? head : cursor, 0, &q.filter, &place);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    api_stream_place_release(&place); /* held still when no stream was made */
    spec_errors_free(&errs);
    api_job_filter_free(&q.filter);
}

bool api_events_follow_asked(const api_req *req)
{
    for (size_t i = 0; i < req->nquery; i++)
        if (strcmp(req->query[i].key, "follow") == 0 &&
            (!req->query[i].value || strcmp(req->query[i].value, "false") != 0))
            return true;
    return false;
}

void api_jobs_events_follow(const api_req *req, api_resp *resp)
{
    stream_query q;
    spec_errors errs = {0};
    store_job *job = NULL;
    api_stream_place place = {0};
    memset(&q, 0, sizeof q);
    /* Another team's job is 404 like a job that does not exist. */
    if (!api_need_job_visible(req, resp, req->id))
        return;
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_query(req, 0, &q, &errs);
    int64_t mcursor = -1;
    int64_t cursor = start_cursor(req, &q, &mcursor, &errs);
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    if (!need_feed(req, resp))
        goto out;
    e = store_job_get(req->ctx->store, req->id, &job);
    if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
        goto out;
    }
    if (e)
        goto fail;
    /* Without a metric cursor the points start at the newest stored. */
    if (mcursor < 0 && (e = store_metrics_head(req->ctx->store, &mcursor)))
        goto fail;
    if (!api_need_stream_place(req, resp, &place))
        goto out;
    reply_stream(req, resp, job, cursor < 0 ? 0 : cursor, mcursor, NULL, &place);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    api_stream_place_release(&place); /* held still when no stream was made */
    spec_errors_free(&errs);
    store_jobs_free(job, job ? 1 : 0);
}
