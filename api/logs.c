/*
 * logs.c - GET /v1/jobs/{id}/logs: what one rank of one attempt wrote to
 * stdout and stderr, as text/plain.
 *
 * Everything that can be refused is refused before the log is opened: an
 * unknown job (404), a bad query or a rank or attempt the job does not have
 * (400), no attempt started yet or no log for that rank (404 log-not-found),
 * no scheduler in this process (503). Then the body is an api_stream over
 * sched_log_read(): server/ sends it chunked as it is read, and its free()
 * closes the log. With follow=true the reads wait for output while the rank
 * runs (server/ calls them from the connection's own thread), and the body
 * ends once the rank has ended and everything was sent. tail=N starts the body
 * at the last N lines, followed or not.
 *
 * A followed log may stay open for hours: it holds a place among the followed
 * streams (api/streams.h), taken last, before the log is opened (past a cap:
 * 429), and given back when the stream is freed. A log read without follow
 * ends by itself and takes none.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/streams.h"

#define LOG_CONTENT_TYPE "text/plain; charset=utf-8"
/* Digits accepted in rank=, attempt= and tail=; more overflow int and name nothing anyway. */
#define MAX_DIGITS 9
/* The most lines tail= may ask for: the backend finds them by reading backwards. */
#define MAX_TAIL_LINES 100000

typedef struct log_query {
    long rank;    /* -1 when not given: rank 0 */
    long attempt; /* -1 when not given: the job's current attempt */
    int follow;
    long tail;    /* -1 when not given: the whole log */
    int seen_rank, seen_attempt, seen_follow, seen_tail;
} log_query;

/* A decimal number without sign or spaces, at most MAX_DIGITS digits; -1 otherwise. */
static long parse_number(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > MAX_DIGITS || strspn(v, "0123456789") != n)
        return -1;
    long x = 0;
    for (size_t i = 0; i < n; i++)
        x = x * 10 + (v[i] - '0');
    return x;
}

/* Records "must be given once" and returns 1 when the parameter was seen before. */
static int repeated(spec_errors *errs, const char *path, int *seen)
{
    if (!*seen) {
        *seen = 1;
        return 0;
    }
    spec_errors_add(errs, path, "must be given once");
    return 1;
}

/* The syntax of the query; what depends on the job is checked by check_query(). */
static void parse_query(const api_req *req, log_query *q, spec_errors *errs)
{
    q->rank = -1;
    q->attempt = -1;
    q->follow = 0;
    q->tail = -1;
    for (size_t i = 0; i < req->nquery; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (strcmp(k, "rank") == 0) {
            if (repeated(errs, "query.rank", &q->seen_rank))
                continue;
            q->rank = parse_number(v);
            if (q->rank < 0)
                spec_errors_add(errs, "query.rank", "must be an integer >= 0");
        } else if (strcmp(k, "attempt") == 0) {
            if (repeated(errs, "query.attempt", &q->seen_attempt))
                continue;
            q->attempt = parse_number(v);
            if (q->attempt < 1) {
                q->attempt = -1;
                spec_errors_add(errs, "query.attempt", "must be an integer >= 1");
            }
        } else if (strcmp(k, "follow") == 0) {
            if (repeated(errs, "query.follow", &q->seen_follow))
                continue;
            if (strcmp(v, "true") == 0)
                q->follow = 1;
            else if (strcmp(v, "false") != 0)
                spec_errors_add(errs, "query.follow", "must be true or false");
        } else if (strcmp(k, "tail") == 0) {
            if (repeated(errs, "query.tail", &q->seen_tail))
                continue;
            q->tail = parse_number(v);
            if (q->tail < 1 || q->tail > MAX_TAIL_LINES) {
                char msg[64];
                snprintf(msg, sizeof msg, "must be an integer from 1 to %d", MAX_TAIL_LINES);
                q->tail = -1;
                spec_errors_add(errs, "query.tail", msg);
            }
        } else {
            char path[96];
            snprintf(path, sizeof path, "query.%.80s", k);
            spec_errors_add(errs, path, "unknown query parameter");
        }
    }
}

/*
 * workers.count of the stored spec: the ranks of every attempt. The spec was
 * written by submit(), so one that does not parse is a bug (or no memory).
 */
static ty_err job_world_size(const store_job *job, long *out)
{
    json_t *spec = job->spec_json ? json_loads(job->spec_json, 0, NULL) : NULL;
    json_int_t n = json_integer_value(json_object_get(json_object_get(spec, "workers"), "count"));
    json_decref(spec);
    if (n < 1)
        return TY_EINTERNAL;
    *out = (long)n;
    return TY_OK;
}

/* The rank and attempt against what the job has; errors are appended to errs. */
static ty_err check_query(const store_job *job, const log_query *q, spec_errors *errs)
{
    char msg[128];
    if (q->rank > 0) {
        long world = 0;
        ty_err e = job_world_size(job, &world);
        if (e)
            return e;
        if (q->rank >= world) {
            snprintf(msg, sizeof msg, "must be less than %ld: the job has %ld rank%s", world, world,
                     world == 1 ? "" : "s");
            spec_errors_add(errs, "query.rank", msg);
        }
    }
    /* Before the first attempt there is no log at all: that is the 404 below, not a 400. */
    if (job->attempt > 0 && q->attempt > job->attempt) {
        snprintf(msg, sizeof msg, "must be at most %d, the job's current attempt", job->attempt);
        spec_errors_add(errs, "query.attempt", msg);
    }
    return TY_OK;
}

/* The body of the response: the open log, and the place of a followed one. */
typedef struct log_stream {
    sched_log *log;
    api_stream_place place;      /* held by a followed log, given back by stream_free() */
} log_stream;

static long stream_read(void *ud, char *buf, size_t max)
{
    log_stream *ls = ud;
    return sched_log_read(ls->log, buf, max);
}

static void stream_free(void *ud)
{
    log_stream *ls = ud;
    if (!ls)
        return;
    sched_log_close(ls->log);
    api_stream_place_release(&ls->place);
    free(ls);
}

void api_jobs_logs(const api_req *req, api_resp *resp)
{
    store_job *job = NULL;
    sched_log *log = NULL;
    log_stream *ls = NULL;
    api_stream_place place = {0};
    spec_errors errs = {0};
    log_query q;
    char detail[128];

    memset(&q, 0, sizeof q);
    /* Another team's job is 404 like a job that does not exist. */
    if (!api_need_job_visible(req, resp, req->id))
        return;
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_query(req, &q, &errs);
    e = store_job_get(req->ctx->store, req->id, &job);
    if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
        goto out;
    }
    if (e)
        goto fail;
    if ((e = check_query(job, &q, &errs)))
        goto fail;
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    if (job->attempt < 1) {
        api_reply_problem(resp, 404, "log-not-found", NULL,
                          "no attempt of this job has started yet", NULL);
        goto out;
    }
    if (!req->ctx->sched) {
        api_reply_problem(resp, 503, "unavailable", NULL,
                          "logs are not available: this server runs no scheduler", NULL);
        goto out;
    }
    int attempt = q.attempt > 0 ? (int)q.attempt : job->attempt;
    int rank = q.rank > 0 ? (int)q.rank : 0;
    if (q.follow && !api_need_stream_place(req, resp, &place))
        goto out;
    if (!(ls = calloc(1, sizeof *ls))) {
        e = TY_ENOMEM;
        goto fail;
    }
    e = sched_log_open(req->ctx->sched, job->id, attempt, rank, q.follow, q.tail, &log);
    if (e == TY_ENOTFOUND) {
        snprintf(detail, sizeof detail, "rank %d of attempt %d has no log", rank, attempt);
        api_reply_problem(resp, 404, "log-not-found", NULL, detail, NULL);
        goto out;
    }
    if (e)
        goto fail;
    ls->log = log;
    api_stream_place_move(&ls->place, &place);
    api_reply_stream(resp, 200, LOG_CONTENT_TYPE,
                     (api_stream){.read = stream_read, .free = stream_free, .ud = ls});
    ls = NULL; /* now the response's */
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    free(ls);
    api_stream_place_release(&place); /* held still when no stream was made */
    spec_errors_free(&errs);
    store_jobs_free(job, job ? 1 : 0);
}
