/*
 * metrics.c - POST and GET /v1/jobs/{id}/metrics: the scalars a job reports
 * (loss, accuracy, ...) by step, and their curves read back downsampled.
 *
 * A report comes from a job's own token (the principal "job:<id>", see
 * server/auth.h), which may report for that job only, or from an admin token.
 * The body is decoded strictly like a job spec and validated whole: every
 * offending field is listed by its path ("$.points[3].loss") and nothing is
 * stored unless all of it is valid. The points go to the store's writer as
 * one operation, so the 200 comes after the group commit that holds them, and
 * reports of many jobs share a commit.
 *
 * Values. spec_decode() (api/spec.c) never lets a number through as inf: a
 * real too large for a double (1e400) comes out clamped to +-1e308, an integer
 * too large for int64 as INT64_MAX or INT64_MIN. Those clamped values cannot be
 * told from the same numbers written out, so a value must lie strictly inside
 * them: |v| < 1e308, and an integer other than the two int64 extremes. Past
 * that it is a 422 naming the member, never a stored 1e+308. JSON has no NaN
 * or Infinity, but Python's json module writes a float that is not finite as
 * the bare word NaN, Infinity or -Infinity, and a diverging loss is just when
 * a job reports one: a body that does not decode is read once more with those
 * words quoted where they stand as a member's value, so such a point gets the
 * same 422 naming its member; anything else wrong keeps the first decoding's
 * 400.
 *
 * The caps of a job (store.h): 1000 series and the store's points cap. A
 * report past the points cap is a 413 "metrics-cap" naming the cap, nothing of
 * it stored; what the job stored before stays readable. 413 rather than 429:
 * the cap is on what the job stores, not on a rate, and nothing frees room
 * while the job runs, so the same report would be refused again at any time;
 * a 429 tells clients (and retrying HTTP libraries) to come back later, which
 * would only make a reporter spin.
 *
 * A curve is read downsampled by the store (store_metrics_read): at most
 * max_points points keeping the first, the last and each bucket's extremes.
 * The response is written straight into a buffer: a 10,000-point series
 * would otherwise be 10,000 jansson objects built to be printed once.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_time.h"
#include "scheduler/sweep_stop.h"

#define METRICS_MAX_POINTS 5000           /* points in one report */
#define METRICS_MAX_STEP 9007199254740991 /* 2^53 - 1: exact in every JSON reader */
#define METRICS_DEFAULT_READ 1000
#define METRICS_MIN_READ 2
#define METRICS_MAX_READ 10000
#define METRICS_MAX_NAMES 256             /* name= parameters in one read */
#define METRICS_MAX_VALUE 1e308           /* |value| below it: see the file comment */
#define STR(x) #x
#define XSTR(x) STR(x)
#define TOO_MANY_SERIES                                                                        \
    "would give the job more than " XSTR(STORE_METRIC_MAX_SERIES) " metric names"

/* [A-Za-z_][A-Za-z0-9_.:/-]{0,63} */
static int metric_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > STORE_METRIC_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (i > 0 && ((c >= '0' && c <= '9') || c == '.' || c == ':' || c == '/' ||
                            c == '-'));
        if (!ok)
            return 0;
    }
    return 1;
}

/* ---- POST: a report ------------------------------------------------------- */

/* The words Python's json module writes for a float that is not finite. */
static const char *const NON_FINITE[] = {"NaN", "Infinity", "-Infinity"};

/* The length of the word of NON_FINITE at body + i that ends there (a delimiter or the end
 * follows), else 0. */
static size_t non_finite_at(const char *body, size_t len, size_t i)
{
    for (size_t k = 0; k < sizeof NON_FINITE / sizeof *NON_FINITE; k++) {
        size_t n = strlen(NON_FINITE[k]);
        if (n <= len - i && memcmp(body + i, NON_FINITE[k], n) == 0 &&
            (i + n == len || memchr(" \t\r\n,}]", body[i + n], 7)))
            return n;
    }
    return 0;
}

/*
 * A copy of body[0..len) with each NON_FINITE word that follows a ':' (a member's value)
 * quoted, *outlen bytes (new); NULL when there is none, or no memory (the caller then answers
 * as for any body that does not decode). Strings are skipped with their escapes.
 */
static char *quote_non_finite(const char *body, size_t len, size_t *outlen)
{
    char *out = malloc(len + 2 * (len / 3 + 1)); /* each word of n >= 3 bytes grows by 2 */
    size_t i = 0, o = 0;
    char prev = 0; /* the last byte outside strings that is not white space */
    int found = 0;
    if (!out)
        return NULL;
    while (i < len) {
        char c = body[i];
        size_t n;
        if (c == '"') {
            out[o++] = body[i++];
            while (i < len && body[i] != '"') {
                if (body[i] == '\\' && i + 1 < len)
                    out[o++] = body[i++];
                out[o++] = body[i++];
            }
            if (i < len)
                out[o++] = body[i++];
            prev = '"';
        } else if (prev == ':' && (n = non_finite_at(body, len, i)) > 0) {
            out[o++] = '"';
            memcpy(out + o, body + i, n);
            o += n;
            out[o++] = '"';
            i += n;
            prev = '"';
            found = 1;
        } else {
            out[o++] = body[i++];
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
                prev = c;
        }
    }
    if (!found) {
        free(out);
        return NULL;
    }
    *outlen = o;
    return out;
}

/* The report's body decoded (*out new), or false with the answer sent: 415, 413, or 400 for a
 * body that does not decode even with NaN and Infinity read as strings (the file comment). */
static bool need_report_body(const api_req *req, api_resp *resp, json_t **out)
{
    if (!api_need_json_content(req, resp) || !api_need_body_size(req, resp))
        return false;
    const char *body = req->body ? req->body : "";
    size_t len = req->body ? req->body_len : 0, qlen = 0;
    char msg[256], ignored[8];
    ty_err e = spec_decode(body, len, out, msg, sizeof msg);
    if (e == TY_EINVAL) {
        char *quoted = quote_non_finite(body, len, &qlen);
        if (quoted && spec_decode(quoted, qlen, out, ignored, sizeof ignored) == TY_OK)
            e = TY_OK;
        free(quoted);
    }
    if (e == TY_OK)
        return true;
    if (e != TY_EINVAL) {
        api_reply_error(resp, e, NULL);
        return false;
    }
    json_t *errors = json_pack("[{s:s, s:s}]", "path", "$", "message", msg);
    api_reply_problem(resp, 400, "malformed-json", NULL, msg, errors);
    return false;
}

/* 1 when s is one of NON_FINITE. */
static int is_non_finite_word(const char *s)
{
    for (size_t k = 0; k < sizeof NON_FINITE / sizeof *NON_FINITE; k++)
        if (strcmp(s, NON_FINITE[k]) == 0)
            return 1;
    return 0;
}

/* 1 when v is a number a metric may hold (see the file comment). */
static int value_valid(const json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) != LLONG_MAX && json_integer_value(v) != LLONG_MIN;
    double d = json_real_value(v);
    return json_is_real(v) && isfinite(d) && fabs(d) < METRICS_MAX_VALUE;
}

typedef struct report {
    const char **names;     /* borrowed from the body's keys */
    size_t nnames, capnames;
    json_t *index;          /* name -> its position in names (a hash set) */
    store_metric_in *pts;
    size_t npts, cappts;
} report;

static void report_free(report *r)
{
    free(r->names);
    json_decref(r->index);
    free(r->pts);
}

/* Appends a value of `name` (borrowed) to the report. */
static ty_err report_add(report *r, const char *name, int64_t step, int64_t time_ms, double v)
{
    json_t *at = json_object_get(r->index, name);
    size_t idx;
    if (at) {
        idx = (size_t)json_integer_value(at);
    } else {
        if (r->nnames == r->capnames) {
            size_t cap = r->capnames ? r->capnames * 2 : 16;
            const char **grown = realloc(r->names, cap * sizeof *grown);
            if (!grown)
                return TY_ENOMEM;
            r->names = grown;
            r->capnames = cap;
        }
        idx = r->nnames;
        if (json_object_set_new(r->index, name, json_integer((json_int_t)idx)))
            return TY_ENOMEM;
        r->names[r->nnames++] = name;
    }
    if (r->npts == r->cappts) {
        size_t cap = r->cappts ? r->cappts * 2 : 64;
        store_metric_in *grown = realloc(r->pts, cap * sizeof *grown);
        if (!grown)
            return TY_ENOMEM;
        r->pts = grown;
        r->cappts = cap;
    }
    r->pts[r->npts++] = (store_metric_in){.name = idx, .step = step, .time_ms = time_ms,
                                          .value = v};
    return TY_OK;
}

/* Records an error at member `key` of point i ("$.points[i].key"; NULL: the point itself, as
 * for a key that cannot be shown in a path: too long, or not plain printable ASCII). The
 * path is only formatted here, on an error: valid points cost no formatting. */
static ty_err point_error(spec_errors *errs, size_t i, const char *key, const char *msg)
{
    char path[160];
    size_t n = key ? strlen(key) : 0;
    int plain = n > 0 && n <= 100;
    for (size_t k = 0; k < n && plain; k++)
        plain = key[k] > ' ' && key[k] < 0x7f && key[k] != '"' && key[k] != '\\';
    if (plain)
        snprintf(path, sizeof path, "$.points[%zu].%s", i, key);
    else
        snprintf(path, sizeof path, "$.points[%zu]", i);
    return spec_errors_add(errs, path, msg);
}

/*
 * Validates one point and, while the whole report is valid so far, adds its values (one pass
 * over its members). Errors go to errs; once there is one, nothing will be stored.
 */
static ty_err parse_point(const json_t *pt, size_t i, int64_t now, report *r, spec_errors *errs)
{
    if (!json_is_object(pt))
        return point_error(errs, i, NULL, "must be an object");
    int64_t step = 0, time_ms = now;
    const json_t *js = json_object_get(pt, "step");
    if (!js) {
        point_error(errs, i, "step", "is required");
    } else if (!json_is_integer(js) || json_integer_value(js) < 0 ||
               json_integer_value(js) > METRICS_MAX_STEP) {
        point_error(errs, i, "step", "must be an integer between 0 and 9007199254740991");
    } else {
        step = json_integer_value(js);
    }
    const json_t *jt = json_object_get(pt, "time");
    if (jt && (!json_is_string(jt) || ty_time_parse_rfc3339(json_string_value(jt), &time_ms)))
        point_error(errs, i, "time", "must be an RFC 3339 time");
    size_t nvalues = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)pt, key, v)
    {
        if (strcmp(key, "step") == 0 || strcmp(key, "time") == 0)
            continue;
        nvalues++;
        if (!metric_name_valid(key)) {
            point_error(errs, i, key, "is not a metric name ([A-Za-z_][A-Za-z0-9_.:/-]{0,63})");
        } else if (json_is_string(v) && is_non_finite_word(json_string_value(v))) {
            point_error(errs, i, key, "must be a finite number, not NaN or Infinity");
        } else if (!json_is_number(v)) {
            point_error(errs, i, key, "must be a number");
        } else if (!value_valid(v)) {
            point_error(errs, i, key,
                        "must be a finite number of magnitude below 1e308 (an integer: inside "
                        "int64)");
        } else if (!errs->count) {
            ty_err e = report_add(r, key, step, time_ms, json_number_value(v));
            if (e)
                return e;
        }
    }
    if (nvalues == 0)
        point_error(errs, i, NULL, "must hold at least one metric besides step and time");
    return TY_OK;
}

static ty_err parse_report(const json_t *body, report *r, spec_errors *errs)
{
    if (!json_is_object(body))
        return spec_errors_add(errs, "$", "must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "points") != 0) {
            char path[128];
            snprintf(path, sizeof path, "$.%.100s", key);
            spec_errors_add(errs, path, "unknown field");
        }
    }
    const json_t *pts = json_object_get(body, "points");
    if (!pts)
        return spec_errors_add(errs, "$.points", "is required");
    if (!json_is_array(pts) || json_array_size(pts) < 1 ||
        json_array_size(pts) > METRICS_MAX_POINTS)
        return spec_errors_add(errs, "$.points", "must be an array of 1 to 5000 points");
    int64_t now = ty_time_now_ms();
    size_t i;
    json_array_foreach(pts, i, v)
    {
        ty_err e = parse_point(v, i, now, r, errs);
        if (e)
            return e;
    }
    return TY_OK;
}

/* 413 metrics-cap: the report would pass the job's points cap (why). */
static void reply_cap(api_resp *resp, const store_metrics_refusal *why)
{
    char detail[256];
    snprintf(detail, sizeof detail,
             "a job may store at most %lld metric points (--metrics-max-points-per-job) and this "
             "one has %lld: the report's new points would pass the cap, and nothing of it was "
             "stored; steps already stored may still be written again",
             (long long)why->limit, (long long)why->stored);
    json_t *p = api_problem_new(413, "metrics-cap", NULL, detail, NULL);
    if (p && json_object_set_new(p, "limit", json_integer((json_int_t)why->limit))) {
        json_decref(p);
        p = NULL;
    }
    api_reply_problem_json(resp, p);
}

/* 409 job-finished, with the job's state when it can be read. */
static void reply_finished(const api_req *req, api_resp *resp)
{
    store_job *job = NULL;
    const char *state = NULL;
    if (store_job_get(req->ctx->store, req->id, &job) == TY_OK)
        state = job_state_name(job->state);
    json_t *p = api_problem_new(409, "job-finished", NULL,
                                "the job has finished: it takes no more metrics", NULL);
    if (p && state && json_object_set_new(p, "state", json_string(state))) {
        json_decref(p);
        p = NULL;
    }
    api_reply_problem_json(resp, p);
    store_jobs_free(job, job ? 1 : 0);
}

void api_metrics_report(const api_req *req, api_resp *resp)
{
    json_t *body = NULL;
    report r = {0};
    spec_errors errs = {0};
    if (!api_is_job_id(req->id)) {
        api_reply_job_not_found(resp);
        return;
    }
    const char *own = api_principal_job_id(req->principal);
    if (own && strcmp(own, req->id) != 0) {
        api_reply_problem(resp, 403, "forbidden", NULL,
                          "a job's token reports for that job only", NULL);
        return;
    }
    if (!need_report_body(req, resp, &body))
        return;
    ty_err e = spec_errors_init(&errs);
    if (e || !(r.index = json_object()) || (e = parse_report(body, &r, &errs))) {
        api_reply_error(resp, e ? e : TY_ENOMEM, NULL);
        goto out;
    }
    if (errs.count) {
        api_reply_invalid(resp, 422, "invalid-metrics", &errs);
        goto out;
    }
    store_metrics_refusal why = {0};
    e = store_metrics_append_why(req->ctx->store, req->id, r.names, r.nnames, r.pts, r.npts,
                                 &why);
    if (e == TY_OK) {
        /* A sweep's median rule may stop the trial now. The points are stored whatever it
         * decides: its failure is logged, never the report's. */
        ty_err se = sweep_stop_check(req->ctx->store, req->id, NULL);
        if (se != TY_OK)
            TY_LOG(TY_LOG_WARN, "metrics: early stopping check failed", "{s:s,s:s}", "job_id",
                   req->id, "error", ty_strerror(se));
    }
    if (e == TY_OK)
        api_reply_json(resp, 200,
                       json_pack("{s:I}", "accepted",
                                 (json_int_t)json_array_size(json_object_get(body, "points"))));
    else if (e == TY_ENOTFOUND)
        api_reply_job_not_found(resp);
    else if (e == TY_ECONFLICT)
        reply_finished(req, resp);
    else if (e == TY_ETOOLARGE && why.points)
        reply_cap(resp, &why);
    else if (e == TY_ETOOLARGE && spec_errors_add(&errs, "$.points", TOO_MANY_SERIES) == TY_OK)
        api_reply_invalid(resp, 422, "invalid-metrics", &errs);
    else
        api_reply_error(resp, e, NULL);
out:
    spec_errors_free(&errs);
    report_free(&r);
    json_decref(body);
}

/* ---- GET: the curves ------------------------------------------------------ */

typedef struct read_query {
    const char *names[METRICS_MAX_NAMES];
    size_t nnames;
    int64_t max_points;
    int64_t since_step; /* -1: from the first step */
    int seen_max, seen_since;
} read_query;

/* A decimal integer in [lo, hi] (the whole string), else -1. */
static int parse_int(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    if (!*v || (*v != '-' && (*v < '0' || *v > '9')))
        return -1;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static void parse_read_query(const api_req *req, read_query *q, spec_errors *errs)
{
    q->max_points = METRICS_DEFAULT_READ;
    q->since_step = -1;
    for (size_t i = 0; i < req->nquery; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (strcmp(k, "name") == 0) {
            int dup = 0;
            for (size_t j = 0; j < q->nnames && !dup; j++)
                dup = strcmp(q->names[j], v) == 0;
            if (!metric_name_valid(v))
                spec_errors_add(errs, "query.name",
                                "must be a metric name ([A-Za-z_][A-Za-z0-9_.:/-]{0,63})");
            else if (!dup && q->nnames == METRICS_MAX_NAMES)
                spec_errors_add(errs, "query.name", "at most 256 names");
            else if (!dup)
                q->names[q->nnames++] = v;
        } else if (strcmp(k, "max_points") == 0) {
            if (q->seen_max++)
                spec_errors_add(errs, "query.max_points", "must be given at most once");
            else if (parse_int(v, METRICS_MIN_READ, METRICS_MAX_READ, &q->max_points))
                spec_errors_add(errs, "query.max_points", "must be an integer from 2 to 10000");
        } else if (strcmp(k, "since_step") == 0) {
            if (q->seen_since++)
                spec_errors_add(errs, "query.since_step", "must be given at most once");
            else if (parse_int(v, 0, METRICS_MAX_STEP, &q->since_step))
                spec_errors_add(errs, "query.since_step",
                                "must be an integer between 0 and 9007199254740991");
        } else {
            char path[96];
            snprintf(path, sizeof path, "query.%.80s", k);
            spec_errors_add(errs, path, "unknown query parameter");
        }
    }
}

/* The shortest of %.15g / %.17g that reads back as v (0.53, not 0.53000000000000003). */
static ty_err put_double(ty_buf *b, double v)
{
    char text[32];
    snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v)
        snprintf(text, sizeof text, "%.17g", v);
    /* JSON has no bare "inf" or "nan"; stored values are finite, this is a guard. */
    if (!isfinite(v))
        snprintf(text, sizeof text, "0");
    return ty_buf_puts(b, text);
}

static ty_err put_series(ty_buf *b, const store_metric_series *ser)
{
    ty_err e = ty_buf_puts(b, "{\"name\":");
    if (!e)
        e = ty_json_put_string(b, ser->name, STORE_METRIC_NAME_MAX);
    if (!e)
        e = ty_buf_printf(b, ",\"total_points\":%lld,\"points\":[", (long long)ser->total_points);
    for (size_t i = 0; i < ser->npoints && !e; i++) {
        char when[32];
        const store_metric_point *p = &ser->points[i];
        ty_time_format_rfc3339(p->time_ms, when, sizeof when);
        e = ty_buf_printf(b, "%s{\"step\":%lld,\"time\":\"%s\",\"value\":", i ? "," : "",
                          (long long)p->step, when);
        if (!e)
            e = put_double(b, p->value);
        if (!e)
            e = ty_buf_puts(b, "}");
    }
    return e ? e : ty_buf_puts(b, "]}");
}

void api_metrics_read(const api_req *req, api_resp *resp)
{
    read_query q;
    spec_errors errs = {0};
    char **all = NULL;
    size_t nall = 0;
    ty_buf text = {0};
    store_metric_series ser = {0};
    /* Another team's job is 404 like a job that does not exist. */
    if (!api_need_job_visible(req, resp, req->id))
        return;
    memset(&q, 0, sizeof q);
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_read_query(req, &q, &errs);
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    const char *const *names = q.names;
    size_t nnames = q.nnames;
    if (nnames == 0) {
        if ((e = store_metrics_names(req->ctx->store, req->id, &all, &nall)))
            goto fail;
        names = (const char *const *)all;
        nnames = nall;
    }
    e = ty_buf_puts(&text, "{\"job_id\":");
    if (!e)
        e = ty_json_put_string(&text, req->id, STORE_ID_LEN);
    if (!e)
        e = ty_buf_puts(&text, ",\"series\":[");
    int64_t from = q.since_step + 1;
    for (size_t i = 0; i < nnames && !e; i++) {
        e = store_metrics_read(req->ctx->store, req->id, names[i], from, INT64_MAX,
                               (size_t)q.max_points, &ser);
        if (!e && i)
            e = ty_buf_puts(&text, ",");
        if (!e)
            e = put_series(&text, &ser);
        store_metric_series_clear(&ser);
    }
    if (!e)
        e = ty_buf_puts(&text, "]}");
    if (e)
        goto fail;
    api_reply_json_buf(resp, 200, &text);
    goto out;
fail:
    if (e == TY_ENOTFOUND)
        api_reply_job_not_found(resp);
    else
        api_reply_error(resp, e, NULL);
out:
    ty_buf_free(&text);
    store_queues_free(all, nall);
    spec_errors_free(&errs);
}
