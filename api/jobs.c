/*
 * jobs.c - the /v1/jobs resource: submit one or a batch, list with filters
 * and keyset pagination, get one, its events, its attempts, cancel.
 *
 * A submission is parsed once, validated in one pass (spec.c), serialized
 * once into the normalized spec the store keeps verbatim, and answered only
 * after the store's group commit returned (201 means durable).
 *
 * Idempotency-Key: the key is scoped by the caller's token name and recorded
 * by the store with the SHA-256 of the raw body bytes in the same
 * transaction as the jobs, so a retry after a lost response gets the original
 * jobs back (200) and never a duplicate.
 *
 * Page tokens are opaque to clients: base64url of 16 bytes, the cursor
 * (before_seq, big-endian) and the first 8 bytes of a SHA-256 over the
 * canonical filter set, so a token is refused with another query's filters.
 */
#include "api/api_int.h"
#include "common/ty_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "common/ty_crypto.h"
#include "common/ty_time.h"

/* ---- JSON views of store objects ----------------------------------------- */

/* Times formatted once per distinct millisecond: the jobs of one batch share a few. */
typedef struct time_cache {
    int64_t ms;
    int valid;
    char text[32];
} time_cache;

static const char *time_text(time_cache *c, int64_t ms)
{
    if (!c->valid || c->ms != ms) {
        ty_time_format_rfc3339(ms, c->text, sizeof c->text);
        c->ms = ms;
        c->valid = 1;
    }
    return c->text;
}

/* Appends v in decimal: a page or a batch writes thousands, and vsnprintf costs more. */
static ty_err put_int(ty_buf *b, long long v)
{
    char digits[24];
    size_t i = sizeof digits;
    unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[--i] = (char)('0' + mag % 10);
        mag /= 10;
    } while (mag);
    if (v < 0)
        digits[--i] = '-';
    return ty_buf_append(b, digits + i, sizeof digits - i);
}

/*
 * Appends the Job resource to b. The spec is the stored normalized spec,
 * copied verbatim: the store keeps exactly the compact JSON that submit()
 * wrote, so it is neither parsed nor serialized again (which matters for
 * pages of 1000 jobs). The current attempt's record is copied the same way:
 * the scheduler wrote it as one JSON object. tc keeps the last time formatted, for
 * the next job.
 */
static ty_err job_write_cached(ty_buf *b, const store_job *j, const char *reason,
                               time_cache *tc)
{
    if (!j->spec_json || j->spec_json[0] != '{')
        return TY_EINTERNAL;
    if (j->attempt_json && j->attempt_json[0] != '{')
        return TY_EINTERNAL;
    ty_err e = ty_buf_puts(b, "{\"id\":");
    if (!e)
        e = ty_json_put_string(b, j->id, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"name\":");
    if (!e)
        e = ty_json_put_string(b, j->name, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"state\":\"");
    if (!e)
        e = ty_buf_puts(b, job_state_name(j->state));
    if (!e)
        e = ty_buf_puts(b, "\",\"queue\":");
    if (!e)
        e = ty_json_put_string(b, j->queue, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"team\":");
    if (!e)
        e = ty_json_put_string(b, j->team ? j->team : STORE_TEAM_DEFAULT, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"owner\":");
    if (!e)
        e = j->owner ? ty_json_put_string(b, j->owner, SIZE_MAX) : ty_buf_puts(b, "null");
    if (!e)
        e = ty_buf_puts(b, ",\"priority\":");
    if (!e)
        e = put_int(b, (long long)j->priority);
    if (!e)
        e = ty_buf_puts(b, ",\"attempt\":");
    if (!e)
        e = put_int(b, j->attempt);
    if (!e)
        e = ty_buf_puts(b, ",\"restarts\":");
    if (!e)
        e = put_int(b, j->restarts);
    if (!e)
        e = ty_buf_puts(b, ",\"pending_reason\":");
    if (!e) /* a JSON object (the scheduler's, or made from its line's head's), copied */
        e = ty_buf_puts(b, reason ? reason : "null");
    if (!e)
        e = ty_buf_puts(b, ",\"current_attempt\":");
    if (!e)
        e = ty_buf_puts(b, j->attempt_json ? j->attempt_json : "null");
    if (!e)
        e = ty_buf_puts(b, ",\"created_at\":\"");
    if (!e)
        e = ty_buf_puts(b, time_text(tc, j->created_at_ms));
    if (!e)
        e = ty_buf_puts(b, "\",\"updated_at\":\"");
    if (!e)
        e = ty_buf_puts(b, time_text(tc, j->updated_at_ms));
    if (!e)
        e = ty_buf_puts(b, "\",\"spec\":");
    if (!e)
        e = ty_buf_puts(b, j->spec_json);
    if (!e)
        e = ty_buf_append(b, "}", 1);
    return e;
}

static ty_err job_write(ty_buf *b, const store_job *j, const char *reason)
{
    time_cache tc = {0};
    return job_write_cached(b, j, reason, &tc);
}

/* The stored pending_reason of a PENDING job (a head's, or none), or NULL. */
static const char *own_reason(const store_job *j)
{
    return j->state == JOB_PENDING && j->pending_reason && j->pending_reason[0] == '{'
               ? j->pending_reason
               : NULL;
}

/* Replies 200 with one Job as stored (a job just created or cancelled). */
static void reply_job(api_resp *resp, const store_job *j)
{
    ty_buf b = {0};
    ty_err e = job_write(&b, j, own_reason(j));
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json_buf(resp, 200, &b);
    ty_buf_free(&b);
}

static json_t *event_json(const store_event *ev)
{
    char time[32];
    ty_time_format_rfc3339(ev->time_ms, time, sizeof time);
    json_t *from = ev->from == JOB_STATE_NONE ? json_null() : json_string(job_state_name(ev->from));
    return json_pack("{s:s, s:o, s:s, s:s, s:s}", "time", time, "from", from, "to",
                     job_state_name(ev->to), "reason", ev->reason ? ev->reason : "", "message",
                     ev->message ? ev->message : "");
}

int api_is_job_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n != STORE_ID_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z')))
            return 0;
    return 1;
}

void api_reply_job_not_found(api_resp *resp)
{
    api_reply_problem(resp, 404, "job-not-found", NULL, "no job has this id", NULL);
}

void api_reply_invalid(api_resp *resp, unsigned status, const char *code, spec_errors *errs)
{
    char detail[128];
    if (errs->count > json_array_size(errs->list))
        snprintf(detail, sizeof detail, "%zu errors; the first %zu are listed", errs->count,
                 json_array_size(errs->list));
    else
        snprintf(detail, sizeof detail, "%zu error%s in the request", errs->count,
                 errs->count == 1 ? "" : "s");
    json_t *list = errs->list;
    errs->list = NULL;
    api_reply_problem(resp, status, code, NULL, detail, list);
}

/* ---- submission ---------------------------------------------------------- */

ty_err api_secrets_take(json_t *const *specs, size_t n, store_job_new *jobs, api_secrets *held)
{
    size_t total = 0;
    memset(held, 0, sizeof *held);
    for (size_t i = 0; i < n; i++) {
        json_t *taken = NULL;
        if (spec_secrets_take(specs[i], &taken) != TY_OK)
            return TY_ENOMEM;
        if (!taken)
            continue;
        if (!held->taken && !(held->taken = calloc(n, sizeof *held->taken))) {
            json_decref(taken);
            return TY_ENOMEM;
        }
        held->nspecs = n;
        held->taken[i] = taken;
        total += json_object_size(taken);
    }
    if (!total)
        return TY_OK;
    if (!(held->v = calloc(total, sizeof *held->v)))
        return TY_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *k;
        json_t *val;
        if (!held->taken[i])
            continue;
        jobs[i].secrets = held->v + held->n;
        json_object_foreach(held->taken[i], k, val)
        {
            held->v[held->n++] = (store_env_secret){k, json_string_value(val),
                                                    json_string_length(val)};
            jobs[i].nsecrets++;
        }
    }
    return TY_OK;
}

void api_secrets_free(api_secrets *held)
{
    if (!held)
        return;
    for (size_t i = 0; held->taken && i < held->nspecs; i++)
        json_decref(held->taken[i]);
    free(held->taken);
    free(held->v);
    memset(held, 0, sizeof *held);
}

#define SPEC_TEXT_GUESS 512 /* bytes of a typical normalized spec, to reserve up front */
#define JOB_TEXT_EXTRA 320  /* bytes of a Job resource besides its spec, about */

/*
 * Stores n normalized specs (borrowed) in one transaction and replies with
 * the Job (single) or {"jobs": [...]} (batch): 201, or 200 on a replay.
 */
static void submit(const api_req *req, api_resp *resp, json_t *const *specs, size_t n,
                   const char *idem, int batch, const char *team)
{
    store_job_new *jobs = calloc(n, sizeof *jobs);
    size_t *spec_at = malloc(n * sizeof *spec_at);
    store_label *labels = NULL;
    char *idem_scoped = NULL;
    store_job *out = NULL;
    size_t nout = 0, nlabels = 0;
    ty_buf text = {0}, specs_text = {0};
    time_cache tc = {0};
    api_secrets secrets = {0};
    ty_err e = TY_ENOMEM;

    if (!jobs || !spec_at)
        goto fail;
    /* Secret values leave the specs before they are written: the store seals them. */
    if ((e = api_secrets_take(specs, n, jobs, &secrets)) != TY_OK)
        goto fail;
    /*
     * Every spec is written once, NUL-terminated, into one buffer (a batch
     * reallocates it a few times instead of each spec's own buffer growing
     * from empty); the pointers into it are taken once it stopped moving.
     */
    if ((e = ty_buf_reserve(&specs_text, n * SPEC_TEXT_GUESS)) != TY_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        spec_at[i] = specs_text.len;
        if ((e = ty_json_write(&specs_text, specs[i])) != TY_OK ||
            (e = ty_buf_append(&specs_text, "", 1)) != TY_OK)
            goto fail;
    }
    e = TY_ENOMEM;
    for (size_t i = 0; i < n; i++)
        nlabels += json_object_size(json_object_get(specs[i], "labels"));
    labels = calloc(nlabels ? nlabels : 1, sizeof *labels);
    if (!labels)
        goto fail;
    nlabels = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *spec = specs[i];
        jobs[i].name = json_string_value(json_object_get(spec, "name"));
        jobs[i].queue = json_string_value(json_object_get(spec, "queue"));
        jobs[i].priority = json_integer_value(json_object_get(spec, "priority"));
        jobs[i].team = team;
        jobs[i].owner = api_principal_name(req)[0] ? api_principal_name(req) : NULL;
        jobs[i].spec_json = specs_text.data + spec_at[i];
        jobs[i].labels = labels + nlabels;
        const char *k;
        json_t *val;
        json_object_foreach(json_object_get(spec, "labels"), k, val)
        {
            labels[nlabels].key = k;
            labels[nlabels].value = json_string_value(val);
            nlabels++;
            jobs[i].nlabels++;
        }
    }

    unsigned char hash[TY_SHA256_LEN];
    if (idem) {
        ty_sha256(req->body ? req->body : "", req->body ? req->body_len : 0, hash);
        /* The name's length first: no name/key pair can collide with another. */
        const char *who = api_principal_name(req);
        size_t len = strlen(who) + strlen(idem) + 32;
        idem_scoped = malloc(len);
        if (!idem_scoped)
            goto fail;
        snprintf(idem_scoped, len, "%zu:%s:%s", strlen(who), who, idem);
    }

    int replayed = 0;
    e = store_jobs_submit(req->ctx->store, jobs, n, idem_scoped, idem ? hash : NULL, &out, &nout,
                          &replayed);
    if (e == TY_ECONFLICT && idem) {
        api_reply_problem(resp, 409, "idempotency-key-reused", NULL,
                          "this Idempotency-Key was used with a different request body", NULL);
        goto done;
    }
    if (e)
        goto fail;
    if (nout < 1 || (!batch && nout != 1)) {
        e = TY_EINTERNAL;
        goto fail;
    }

    /* The response holds every spec again, plus about JOB_TEXT_EXTRA bytes per job. */
    e = ty_buf_reserve(&text, specs_text.len + nout * JOB_TEXT_EXTRA);
    if (!e && batch)
        e = ty_buf_puts(&text, "{\"jobs\":[");
    for (size_t i = 0; i < nout && !e; i++) {
        if (i)
            e = ty_buf_append(&text, ",", 1);
        if (!e)
            e = job_write_cached(&text, &out[i], own_reason(&out[i]), &tc);
    }
    if (!e && batch)
        e = ty_buf_puts(&text, "]}");
    if (e)
        goto fail;
    api_reply_json_buf(resp, replayed ? 200 : 201, &text);
    if (!batch) {
        char location[64];
        snprintf(location, sizeof location, "/v1/jobs/%s", out[0].id);
        api_resp_header(resp, "Location", location);
    }
    goto done;

fail:
    api_reply_error(resp, e, NULL);
done:
    api_secrets_free(&secrets);
    free(jobs);
    free(spec_at);
    ty_buf_free(&specs_text);
    free(labels);
    free(idem_scoped);
    ty_buf_free(&text);
    store_jobs_free(out, nout);
}

/*
 * The backend's refusal of a spec that is valid but cannot run where jobs run: one more 422
 * error, at the field the backend names under `prefix` ("$" or "$.jobs[3]").
 */
static ty_err check_runnable(const api_ctx *ctx, const json_t *spec, const char *prefix,
                             spec_errors *errs)
{
    char path[128] = "$", msg[256] = "", full[192];
    if (!ctx->spec_check ||
        ctx->spec_check(ctx->spec_check_ud, spec, path, sizeof path, msg, sizeof msg) == 0)
        return TY_OK;
    snprintf(full, sizeof full, "%s%s", prefix, path[0] == '$' ? path + 1 : path);
    if (spec_errors_add(errs, full, msg[0] ? msg : "cannot run on this cluster"))
        return TY_ENOMEM;
    return TY_EINVAL;
}

void api_jobs_create(const api_req *req, api_resp *resp)
{
    json_t *body = NULL, *spec = NULL, *team_json = NULL;
    spec_errors errs = {0};
    const char *idem, *team;

    if (!api_need_json_body(req, resp, &body) || !api_need_idempotency_key(req, resp, &idem) ||
        !api_need_submit_team(req, resp, body, &team))
        goto out;
    team_json = json_incref(json_object_get(body, "team")); /* keeps team valid */
    json_object_del(body, "team");
    ty_err e = spec_errors_init(&errs);
    if (!e)
        e = spec_job_opts(body, "$", &(spec_opts){.limits = &req->ctx->limits}, &spec, &errs);
    if (!e)
        e = check_runnable(req->ctx, spec, "$", &errs);
    if (e == TY_EINVAL)
        api_reply_invalid(resp, 422, "invalid-spec", &errs);
    else if (e)
        api_reply_error(resp, e, NULL);
    else
        submit(req, resp, &spec, 1, idem, 0, team);
out:
    json_decref(team_json);
    spec_errors_free(&errs);
    json_decref(spec);
    json_decref(body);
}

void api_jobs_batch(const api_req *req, api_resp *resp)
{
    json_t *body = NULL, *specs = NULL, *team_json = NULL;
    spec_errors errs = {0};
    const char *idem, *team;

    if (!api_need_json_body(req, resp, &body) || !api_need_idempotency_key(req, resp, &idem) ||
        !api_need_submit_team(req, resp, body, &team))
        goto out;
    team_json = json_incref(json_object_get(body, "team")); /* keeps team valid */
    json_object_del(body, "team");
    ty_err e = spec_errors_init(&errs);
    if (!e)
        e = spec_batch_opts(body, API_MAX_BATCH, &(spec_opts){.limits = &req->ctx->limits},
                            &specs, &errs);
    for (size_t i = 0; !e && i < json_array_size(specs) && req->ctx->spec_check; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "$.jobs[%zu]", i);
        ty_err c = check_runnable(req->ctx, json_array_get(specs, i), prefix, &errs);
        if (c == TY_ENOMEM)
            e = c;
    }
    if (!e && errs.count > 0)
        e = TY_EINVAL;
    if (e == TY_EINVAL) {
        api_reply_invalid(resp, 422, "invalid-spec", &errs);
    } else if (e) {
        api_reply_error(resp, e, NULL);
    } else {
        size_t n = json_array_size(specs);
        json_t **items = malloc(n * sizeof *items);
        if (!items) {
            api_reply_error(resp, TY_ENOMEM, NULL);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            items[i] = json_array_get(specs, i);
        submit(req, resp, items, n, idem, 1, team);
        free(items);
    }
out:
    json_decref(team_json);
    spec_errors_free(&errs);
    json_decref(specs);
    json_decref(body);
}

/* ---- listing ------------------------------------------------------------- */

#define PAGE_TOKEN_BYTES 16
#define PAGE_TOKEN_CHARS 22 /* base64url of 16 bytes, no padding */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Encodes n bytes as unpadded base64url into out (room for 4*ceil(n/3)+1). */
static void b64url_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        size_t chars = n - i >= 3 ? 4 : n - i + 1;
        for (size_t k = 0; k < chars; k++)
            out[o++] = b64url[(v >> (18 - 6 * k)) & 63];
    }
    out[o] = '\0';
}

/* Decodes exactly PAGE_TOKEN_CHARS characters into PAGE_TOKEN_BYTES bytes; -1 if invalid. */
static int page_token_decode(const char *s, unsigned char out[PAGE_TOKEN_BYTES])
{
    if (strlen(s) != PAGE_TOKEN_CHARS)
        return -1;
    unsigned long acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < PAGE_TOKEN_CHARS; i++) {
        const char *p = strchr(b64url, s[i]);
        if (!p || !s[i])
            return -1;
        acc = (acc << 6 | (unsigned long)(p - b64url)) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o < PAGE_TOKEN_BYTES)
                out[o++] = (unsigned char)(acc >> bits);
        }
    }
    /* The 4 bits left over must be zero, so every token has one spelling. */
    return o == PAGE_TOKEN_BYTES && (acc & ((1ul << bits) - 1)) == 0 ? 0 : -1;
}

#define MAX_LABEL_FILTERS API_MAX_LABEL_FILTERS

typedef struct list_query {
    api_job_filter jf;           /* state, queue, label */
    const char *page_token;
    int seen_prefix, seen_after, seen_before, seen_limit, seen_token;
} list_query;

void api_job_filter_free(api_job_filter *q)
{
    for (size_t i = 0; i < q->f.nlabels; i++)
        free(q->label_text[i]);
    q->f.nlabels = 0;
}

static int cmp_label(const void *a, const void *b)
{
    const store_label *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->value, y->value);
}

/* First 8 bytes of SHA-256 over the canonical text of the filters (limit excluded). */
static ty_err filter_digest(const list_query *q, unsigned char out[8])
{
    store_label sorted[MAX_LABEL_FILTERS];
    ty_buf b = {0};
    size_t n = q->jf.f.nlabels;
    memcpy(sorted, q->jf.labels, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_label);
    ty_err e = ty_buf_printf(&b, "s=%u\n", q->jf.f.state_mask);
    if (!e && q->jf.f.queue)
        e = ty_buf_printf(&b, "q=%s\n", q->jf.f.queue);
    if (!e && q->jf.f.name_prefix)
        e = ty_buf_printf(&b, "n=%s\n", q->jf.f.name_prefix);
    if (!e)
        e = ty_buf_printf(&b, "a=%lld\nb=%lld\n", (long long)q->jf.f.created_after_ms,
                          (long long)q->jf.f.created_before_ms);
    for (size_t i = 0; i < n && !e; i++)
        e = ty_buf_printf(&b, "l=%s=%s\n", sorted[i].key, sorted[i].value);
    if (!e) {
        unsigned char h[TY_SHA256_LEN];
        ty_sha256(b.data, b.len, h);
        memcpy(out, h, 8);
    }
    ty_buf_free(&b);
    return e;
}

/* Records "must be given once" and returns 1 when the parameter was seen before. */
static int once(spec_errors *errs, const char *path, int *seen)
{
    if (!*seen) {
        *seen = 1;
        return 0;
    }
    spec_errors_add(errs, path, "must be given once");
    return 1;
}

static void parse_states(const char *v, api_job_filter *q, spec_errors *errs)
{
    const char *p = v;
    for (;;) {
        size_t n = strcspn(p, ",");
        char name[16];
        int ok = n > 0 && n < sizeof name;
        if (ok) {
            for (size_t i = 0; i < n; i++)
                name[i] = p[i] >= 'a' && p[i] <= 'z' ? (char)(p[i] - 'a' + 'A') : p[i];
            name[n] = '\0';
            job_state s = job_state_parse(name);
            ok = s != JOB_STATE_NONE;
            if (ok)
                q->f.state_mask |= 1u << s;
        }
        if (!ok) {
            spec_errors_add(errs, "query.state",
                            "must be a job state or a comma-separated list of them: PENDING, "
                            "ADMITTED, STARTING, RUNNING, RESTARTING, CANCELLING, SUCCEEDED, "
                            "FAILED, CANCELLED");
            return;
        }
        if (p[n] == '\0')
            return;
        p += n + 1;
    }
}

static void parse_label(const char *v, api_job_filter *q, spec_errors *errs)
{
    const char *eq = strchr(v, '=');
    if (!eq || !spec_is_label_key(v, (size_t)(eq - v)) ||
        !spec_is_label_value(eq + 1, strlen(eq + 1))) {
        spec_errors_add(errs, "query.label", "must be key=value with a valid label key and value");
        return;
    }
    if (q->f.nlabels >= MAX_LABEL_FILTERS) {
        spec_errors_add(errs, "query.label", "at most 64 label filters");
        return;
    }
    char *copy = strdup(v);
    if (!copy) {
        spec_errors_add(errs, "query.label", "out of memory");
        return;
    }
    copy[eq - v] = '\0';
    size_t i = q->f.nlabels++;
    q->label_text[i] = copy;
    q->labels[i].key = copy;
    q->labels[i].value = copy + (eq - v) + 1;
}

int api_job_filter_param(api_job_filter *q, const char *k, const char *v, spec_errors *errs)
{
    q->f.labels = q->labels;
    if (strcmp(k, "state") == 0) {
        parse_states(v, q, errs);
    } else if (strcmp(k, "queue") == 0) {
        if (once(errs, "query.queue", &q->seen_queue))
            return 1;
        if (spec_is_dns_label(v, strlen(v)))
            q->f.queue = v;
        else
            spec_errors_add(errs, "query.queue", "must be a queue name (a DNS label)");
    } else if (strcmp(k, "label") == 0) {
        parse_label(v, q, errs);
    } else {
        return 0;
    }
    return 1;
}

static void parse_time(const char *v, const char *path, int64_t *out, spec_errors *errs)
{
    if (ty_time_parse_rfc3339(v, out) != 0)
        spec_errors_add(errs, path, "must be an RFC 3339 time such as 2026-11-22T10:00:00Z");
}

static void parse_limit(const char *v, list_query *q, spec_errors *errs)
{
    char *end = NULL;
    long n = 0;
    int ok = v[0] >= '0' && v[0] <= '9';
    if (ok) {
        n = strtol(v, &end, 10);
        ok = *end == '\0' && n >= 1 && n <= API_MAX_PAGE;
    }
    if (!ok)
        spec_errors_add(errs, "query.limit", "must be an integer between 1 and 1000");
    else
        q->jf.f.limit = (int)n;
}

/* Parses the query into q; every problem is appended to errs. */
static void parse_list_query(const api_req *req, list_query *q, spec_errors *errs)
{
    q->jf.f.limit = API_DEFAULT_PAGE;
    q->jf.f.labels = q->jf.labels;
    for (size_t i = 0; i < req->nquery; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (api_job_filter_param(&q->jf, k, v, errs))
            continue;
        if (strcmp(k, "name_prefix") == 0) {
            if (once(errs, "query.name_prefix", &q->seen_prefix))
                continue;
            size_t n = strlen(v);
            int bad = n == 0 || n > SPEC_MAX_NAME;
            for (size_t j = 0; j < n && !bad; j++)
                bad =
                    !((v[j] >= 'a' && v[j] <= 'z') || (v[j] >= '0' && v[j] <= '9') || v[j] == '-');
            if (bad)
                spec_errors_add(errs, "query.name_prefix",
                                "must be 1-63 characters of a-z, 0-9 and '-'");
            else
                q->jf.f.name_prefix = v;
        } else if (strcmp(k, "created_after") == 0) {
            if (!once(errs, "query.created_after", &q->seen_after))
                parse_time(v, "query.created_after", &q->jf.f.created_after_ms, errs);
        } else if (strcmp(k, "created_before") == 0) {
            if (!once(errs, "query.created_before", &q->seen_before)) {
                parse_time(v, "query.created_before", &q->jf.f.created_before_ms, errs);
                /* 0 means "no bound" to the store; before the epoch means nothing. */
                if (q->jf.f.created_before_ms == 0)
                    q->jf.f.created_before_ms = -1;
            }
        } else if (strcmp(k, "limit") == 0) {
            if (!once(errs, "query.limit", &q->seen_limit))
                parse_limit(v, q, errs);
        } else if (strcmp(k, "page_token") == 0) {
            if (!once(errs, "query.page_token", &q->seen_token))
                q->page_token = v;
        } else {
            char path[96];
            snprintf(path, sizeof path, "query.%.80s", k);
            spec_errors_add(errs, path, "unknown query parameter");
        }
    }
    if (q->page_token && errs->count == 0) {
        unsigned char raw[PAGE_TOKEN_BYTES], digest[8];
        int64_t seq = 0;
        int ok = page_token_decode(q->page_token, raw) == 0;
        for (int i = 0; i < 8 && ok; i++)
            seq = (int64_t)((uint64_t)seq << 8 | raw[i]);
        if (!ok || seq <= 0) {
            spec_errors_add(errs, "query.page_token", "is not a valid page token");
        } else if (filter_digest(q, digest) || memcmp(digest, raw + 8, 8) != 0) {
            spec_errors_add(errs, "query.page_token",
                            "belongs to a query with other filters; start again without it");
        } else {
            q->jf.f.before_seq = seq;
        }
    }
}

void api_jobs_list(const api_req *req, api_resp *resp)
{
    list_query q;
    spec_errors errs = {0};
    store_job *jobs = NULL;
    size_t njobs = 0;
    int64_t next = 0;
    ty_buf text = {0};
    char **reasons = NULL; /* per job: its pending_reason text, or NULL */

    memset(&q, 0, sizeof q);
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_list_query(req, &q, &errs);
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    q.jf.f.team = api_team_filter(req);
    if ((e = store_jobs_list(req->ctx->store, &q.jf.f, &jobs, &njobs, &next)))
        goto fail;
    if (njobs && !(reasons = calloc(njobs, sizeof *reasons))) {
        e = TY_ENOMEM;
        goto fail;
    }
    if ((e = api_pending_reasons(req->ctx->store, jobs, njobs, reasons)))
        goto fail;
    e = ty_buf_puts(&text, "{\"jobs\":[");
    for (size_t i = 0; i < njobs && !e; i++) {
        if (i)
            e = ty_buf_append(&text, ",", 1);
        if (!e)
            e = job_write(&text, &jobs[i], reasons[i]);
    }
    if (!e)
        e = ty_buf_append(&text, "]", 1);
    if (!e && next > 0) {
        unsigned char raw[PAGE_TOKEN_BYTES];
        char token[PAGE_TOKEN_CHARS + 4];
        for (int i = 0; i < 8; i++)
            raw[i] = (unsigned char)((uint64_t)next >> (56 - 8 * i));
        e = filter_digest(&q, raw + 8);
        if (!e) {
            b64url_encode(raw, sizeof raw, token);
            e = ty_buf_printf(&text, ",\"next_page_token\":\"%s\"", token);
        }
    }
    if (!e)
        e = ty_buf_append(&text, "}", 1);
    if (e)
        goto fail;
    api_reply_json_buf(resp, 200, &text);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    for (size_t i = 0; reasons && i < njobs; i++)
        free(reasons[i]);
    free(reasons);
    ty_buf_free(&text);
    store_jobs_free(jobs, njobs);
    spec_errors_free(&errs);
    api_job_filter_free(&q.jf);
}

/* ---- one job ------------------------------------------------------------- */

void api_jobs_get(const api_req *req, api_resp *resp)
{
    store_job *job = NULL;
    if (!api_need_job_visible(req, resp, req->id))
        return;
    char *reason = NULL;
    ty_err e = store_job_get(req->ctx->store, req->id, &job);
    if (!e)
        e = api_pending_reasons(req->ctx->store, job, 1, &reason);
    if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
    } else if (e) {
        api_reply_error(resp, e, NULL);
    } else {
        ty_buf b = {0};
        if ((e = job_write(&b, job, reason)))
            api_reply_error(resp, e, NULL);
        else
            api_reply_json_buf(resp, 200, &b);
        ty_buf_free(&b);
    }
    free(reason);
    store_jobs_free(job, job ? 1 : 0);
}

void api_jobs_events(const api_req *req, api_resp *resp)
{
    store_event *events = NULL;
    size_t n = 0;
    json_t *list = NULL;
    if (api_events_follow_asked(req)) {
        api_jobs_events_follow(req, resp); /* events.c: the stream */
        return;
    }
    if (!api_need_job_visible(req, resp, req->id))
        return;
    ty_err e = store_job_events(req->ctx->store, req->id, &events, &n);
    if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
        goto out;
    }
    if (e)
        goto fail;
    e = TY_ENOMEM;
    if (!(list = json_array()))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *ev = event_json(&events[i]);
        if (!ev || json_array_append_new(list, ev))
            goto fail;
    }
    api_reply_json(resp, 200, json_pack("{s:o}", "events", list));
    list = NULL;
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    json_decref(list);
    store_events_free(events, n);
}

void api_jobs_attempts(const api_req *req, api_resp *resp)
{
    store_attempt *attempts = NULL;
    size_t n = 0;
    ty_buf text = {0};
    if (!api_need_job_visible(req, resp, req->id))
        return;
    ty_err e = store_job_attempts(req->ctx->store, req->id, &attempts, &n);
    if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
        goto out;
    }
    /* The records are the scheduler's JSON objects, copied as they are (see job_write). */
    if (!e)
        e = ty_buf_puts(&text, "{\"attempts\":[");
    for (size_t i = 0; i < n && !e; i++) {
        if (!attempts[i].json || attempts[i].json[0] != '{')
            e = TY_EINTERNAL;
        if (!e && i)
            e = ty_buf_append(&text, ",", 1);
        if (!e)
            e = ty_buf_puts(&text, attempts[i].json);
    }
    if (!e)
        e = ty_buf_puts(&text, "]}");
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json_buf(resp, 200, &text);
out:
    ty_buf_free(&text);
    store_attempts_free(attempts, n);
}

/* Inside the store's transaction: where a cancel takes a job in state cur. */
static ty_err decide_cancel(job_state cur, job_state *to, void *ud)
{
    (void)ud;
    if (job_state_cancel_conflicts(cur))
        return TY_ECONFLICT;
    job_state_cancel_target(cur, to); /* false: *to == cur, nothing to write */
    return TY_OK;
}

/* A CamelCase word of 1 to CANCEL_REASON_MAX letters and digits ("Pruned"). */
#define CANCEL_REASON_MAX 64
#define CANCEL_MESSAGE_MAX 500

static bool cancel_reason_ok(const char *s, size_t n)
{
    if (n < 1 || n > CANCEL_REASON_MAX || s[0] < 'A' || s[0] > 'Z')
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* The characters (code points) of a JSON string, which jansson keeps as valid UTF-8. */
static size_t utf8_chars(const json_t *str)
{
    const unsigned char *p = (const unsigned char *)json_string_value(str);
    size_t n = 0;
    for (size_t i = 0; i < json_string_length(str); i++)
        n += (p[i] & 0xC0) != 0x80;
    return n;
}

/* Checks a cancel's body (see read_cancel_body); its strings stay in body. */
static void parse_cancel(const json_t *body, spec_errors *errs, const char **reason,
                         const char **message)
{
    const char *k;
    json_t *v;
    if (!json_is_object(body)) {
        spec_errors_add(errs, "$", "must be an object");
        return;
    }
    json_object_foreach((json_t *)body, k, v)
    {
        if (strcmp(k, "reason") == 0) {
            if (json_is_string(v) && cancel_reason_ok(json_string_value(v), json_string_length(v)))
                *reason = json_string_value(v);
            else
                spec_errors_add(errs, "$.reason",
                                "must be a CamelCase word of 1 to 64 letters and digits");
        } else if (strcmp(k, "message") == 0) {
            if (json_is_string(v) && utf8_chars(v) <= CANCEL_MESSAGE_MAX &&
                strlen(json_string_value(v)) == json_string_length(v))
                *message = json_string_value(v);
            else
                spec_errors_add(errs, "$.message", "must be a string of at most 500 characters");
        } else {
            char p[96];
            snprintf(p, sizeof p, "$.%.64s", k);
            spec_errors_add(errs, p, "unknown field");
        }
    }
}

/*
 * The optional body of a cancel, {"reason": "Pruned", "message": "..."}: what the cancel's event
 * says instead of "Cancelled" and "cancelled by <token>". *body (new) holds the strings; false
 * when the answer (400, 415, 422) was sent.
 */
static bool read_cancel_body(const api_req *req, api_resp *resp, json_t **body,
                             const char **reason, const char **message)
{
    spec_errors errs = {0};
    if (req->body_len == 0)
        return true;
    if (!api_need_json_body(req, resp, body))
        return false;
    if (spec_errors_init(&errs)) {
        api_reply_error(resp, TY_ENOMEM, NULL);
        return false;
    }
    parse_cancel(*body, &errs, reason, message);
    bool ok = errs.count == 0;
    if (!ok)
        api_reply_invalid(resp, 422, "invalid-request", &errs);
    spec_errors_free(&errs);
    return ok;
}

void api_jobs_cancel(const api_req *req, api_resp *resp)
{
    store_job *job = NULL;
    json_t *body = NULL;
    const char *reason = "Cancelled", *given = NULL;
    if (!api_need_job_visible(req, resp, req->id) ||
        !read_cancel_body(req, resp, &body, &reason, &given)) {
        json_decref(body);
        return;
    }
    char message[CANCEL_MESSAGE_MAX * 4 + 128];
    const char *who = api_principal_name(req);
    if (given)
        snprintf(message, sizeof message, "%s (cancelled by %.100s)", given,
                 *who ? who : "an API client");
    else
        snprintf(message, sizeof message, "cancelled by %.100s", *who ? who : "an API client");
    ty_err e = store_job_transition(req->ctx->store, req->id, decide_cancel, NULL, reason,
                                    message, &job);
    json_decref(body);
    if (e == TY_OK) {
        reply_job(resp, job);
    } else if (e == TY_ENOTFOUND) {
        api_reply_job_not_found(resp);
    } else if (e == TY_ECONFLICT) {
        const char *state = job ? job_state_name(job->state) : "finished";
        char detail[96];
        snprintf(detail, sizeof detail, "the job has already finished: %s", state);
        json_t *p = api_problem_new(409, "job-finished", NULL, detail, NULL);
        if (p && job && json_object_set_new(p, "state", json_string(state))) {
            json_decref(p);
            p = NULL;
        }
        api_reply_problem_json(resp, p);
    } else {
        api_reply_error(resp, e, NULL);
    }
    store_jobs_free(job, job ? 1 : 0);
}
