/*
 * webhooks.c - CI webhooks: registration (/v1/webhooks, admin) and deliveries
 * (POST /v1/hooks/{id}, open: a delivery proves itself by its signature, not a token).
 *
 * A delivery is checked in this order, and nothing is written before the last step:
 *   0. the guard (api_hook_guard, below), before any store read or HMAC: token buckets per
 *      client address, per hook, and for bad signatures per address; past one, 429 with
 *      Retry-After, answered after that wait (at most max_delay_ms) so that a flood costs
 *      the server sleeping threads, not CPU;
 *   1. the hook exists (404), the body fits (413), it is JSON (415);
 *   2. its signature (401, logged): GitHub's X-Hub-Signature-256 (HMAC-SHA256 of the raw
 *      body), GitLab's X-Gitlab-Token (its SHA-256 against the stored one), or the generic
 *      X-Trainyard-Signature, an HMAC of "<X-Trainyard-Timestamp>.<body>" refused more than
 *      WINDOW_S seconds from now, so a captured delivery cannot be replayed later;
 *   3. the event and the branch are among those the hook selects, else 202 "ignored";
 *   4. the payload's values are filled into the template's strings, and the result is
 *      validated exactly as a POST /v1/jobs body is (422);
 *   5. the job is stored with the delivery's id (X-GitHub-Delivery, X-Gitlab-Event-UUID,
 *      X-Trainyard-Delivery) as its idempotency key, so a redelivery gets the same job (200);
 *      the store keeps that job for the delivery id as long as the job exists, so a
 *      redelivery is looked up first, before the hook's current template or filters apply;
 *   6. replays, whatever their delivery id: a GitHub or GitLab body identical to one the hook
 *      accepted in the last 24 hours, or a generic delivery's signature accepted inside its
 *      window, is answered 200 "redelivered" with the first job (store_webhook_replay).
 * Refusals (bad signature, rate limited, replay, unknown hook) are counted for /metrics and
 * logged at most once a minute per hook and reason, with the number of lines left out.
 * Every comparison of secret material is constant-time (CRYPTO_memcmp).
 */
#include "api/api_int.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>

#include "common/ty_crypto.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_ratelimit.h"
#include "common/ty_time.h"

#define WINDOW_S 300
#define MIN_SECRET 8
#define MAX_SECRET 1024
#define MAX_EVENTS 32
#define MAX_BRANCHES 64
#define MAX_VALUE 255
#define MAX_DELIVERY_ID 200
#define REPLAY_TTL_MS (24 * 3600 * 1000LL)
#define LIMIT_SLOTS 4096    /* buckets per limit: 3 x 4096 x 32 bytes */
#define QUIET_SLOTS 128     /* (hook, reason) log lines remembered */
#define QUIET_EVERY_MS 60000

enum { V_REPOSITORY, V_REF, V_BRANCH, V_COMMIT, V_COMMIT_SHORT, V_PUSHER, V_COUNT };
static const char *const var_names[V_COUNT] = {"repository", "ref",          "branch",
                                               "commit",     "commit_short", "pusher"};
/* Values a template is checked with when it is registered. */
static const char *const sample_vars[V_COUNT] = {
    "example/repo", "refs/heads/main", "main", "0123456789abcdef0123456789abcdef01234567",
    "0123456789ab", "someone"};

/* ---- templates ----------------------------------------------------------------- */

/*
 * Copies the string s with every ${name} replaced by its value into *out (new). An unknown
 * name is an error at `path` in errs (TY_EINVAL); "$" not followed by "{" stays as it is.
 */
static ty_err fill_string(const char *s, const char *const *vars, const char *path,
                          spec_errors *errs, json_t **out)
{
    ty_buf b;
    ty_buf_init(&b, 1u << 20);
    ty_err e = TY_OK;
    while (*s && !e) {
        const char *p = strstr(s, "${");
        const char *end = p ? strchr(p + 2, '}') : NULL;
        if (!p || !end) {
            e = ty_buf_puts(&b, s);
            break;
        }
        e = ty_buf_append(&b, s, (size_t)(p - s));
        size_t n = (size_t)(end - p - 2);
        int k = 0;
        while (k < V_COUNT && !(strlen(var_names[k]) == n && !strncmp(p + 2, var_names[k], n)))
            k++;
        if (k == V_COUNT) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "unknown placeholder ${%.*s}; known: repository, ref, branch, commit, "
                     "commit_short, pusher",
                     (int)(n > 32 ? 32 : n), p + 2);
            e = spec_errors_add(errs, path, msg);
            if (!e)
                e = TY_EINVAL;
        } else if (!e) {
            e = ty_buf_puts(&b, vars[k]);
        }
        s = end + 1;
    }
    if (!e && !(*out = json_stringn(b.data ? b.data : "", b.len)))
        e = TY_ENOMEM;
    ty_buf_free(&b);
    return e;
}

/* A new copy of v with the placeholders of every string value filled; keys are kept as they
 * are. Every unknown placeholder is reported (TY_EINVAL). */
static ty_err fill(const json_t *v, const char *const *vars, const char *path, spec_errors *errs,
                   json_t **out)
{
    char sub[512];
    ty_err e = TY_OK, first = TY_OK;
    if (json_is_string(v))
        return fill_string(json_string_value(v), vars, path, errs, out);
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        if (!o)
            return TY_ENOMEM;
        json_object_foreach((json_t *)v, k, x)
        {
            json_t *c = NULL;
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            e = fill(x, vars, sub, errs, &c);
            if (!e && json_object_set_new(o, k, c))
                e = TY_ENOMEM;
            if (e == TY_ENOMEM) {
                json_decref(o);
                return e;
            }
            if (e && !first)
                first = e;
        }
        if (first)
            json_decref(o);
        else
            *out = o;
        return first;
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        size_t i;
        json_t *x;
        if (!a)
            return TY_ENOMEM;
        json_array_foreach(v, i, x)
        {
            json_t *c = NULL;
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            e = fill(x, vars, sub, errs, &c);
            if (!e && json_array_append_new(a, c))
                e = TY_ENOMEM;
            if (e == TY_ENOMEM) {
                json_decref(a);
                return e;
            }
            if (e && !first)
                first = e;
        }
        if (first)
            json_decref(a);
        else
            *out = a;
        return first;
    }
    *out = json_deep_copy(v);
    return *out ? TY_OK : TY_ENOMEM;
}

/*
 * The job spec for vars: the template filled, the hook and commit added as labels, then
 * validated and normalized as POST /v1/jobs does (errors at "$.template..." when path says
 * so). TY_OK: *spec new. TY_EINVAL: errors in errs.
 */
static ty_err job_from_template(const api_ctx *ctx, const json_t *tmpl, const char *hook,
                                const char *const *vars, const char *path, spec_errors *errs,
                                json_t **spec)
{
    json_t *filled = NULL;
    ty_err e = fill(tmpl, vars, path, errs, &filled);
    if (e)
        return e;
    json_t *labels = json_object_get(filled, "labels");
    if (json_is_object(filled) && !labels) {
        labels = json_object();
        if (!labels || json_object_set_new(filled, "labels", labels))
            e = TY_ENOMEM;
    }
    if (!e && json_is_object(labels)) {
        const char *commit = vars[V_COMMIT];
        if (json_object_set_new(labels, "webhook", json_string(hook)) ||
            json_object_set_new(labels, "commit",
                                json_string(strlen(commit) <= SPEC_MAX_NAME
                                                ? commit
                                                : vars[V_COMMIT_SHORT])))
            e = TY_ENOMEM;
    }
    /* "webhook" and "commit" are reserved for the server: these two are ours. */
    spec_opts opts = {.limits = &ctx->limits, .server_labels = spec_webhook_labels,
                      .no_secrets = "a webhook's template is stored as written: it cannot hold "
                                    "a secret value"};
    if (!e)
        e = spec_job_opts(filled, path, &opts, spec, errs);
    char cpath[128] = "$", msg[256] = "", full[192];
    if (!e && ctx->spec_check &&
        ctx->spec_check(ctx->spec_check_ud, *spec, cpath, sizeof cpath, msg, sizeof msg) != 0) {
        snprintf(full, sizeof full, "%s%s", path, cpath[0] == '$' ? cpath + 1 : cpath);
        e = spec_errors_add(errs, full, msg[0] ? msg : "cannot run on this cluster");
        if (!e)
            e = TY_EINVAL;
        json_decref(*spec);
        *spec = NULL;
    }
    json_decref(filled);
    return e;
}

/* ---- registration ----------------------------------------------------------------- */

static int is_provider(const char *p)
{
    return p && (!strcmp(p, "github") || !strcmp(p, "gitlab") || !strcmp(p, "generic"));
}

/* A list of 0..max strings of 1..maxlen bytes at path; absent or null takes dflt. */
static ty_err check_strings(json_t *body, const char *key, size_t min, size_t max,
                            size_t maxlen, const char *dflt, spec_errors *errs)
{
    char path[64], msg[128];
    json_t *v = json_object_get(body, key);
    snprintf(path, sizeof path, "$.%s", key);
    if (!v || json_is_null(v)) {
        json_t *d = json_array();
        if (!d || (dflt && json_array_append_new(d, json_string(dflt))) ||
            json_object_set_new(body, key, d))
            return TY_ENOMEM;
        return TY_OK;
    }
    if (!json_is_array(v) || json_array_size(v) < min || json_array_size(v) > max) {
        snprintf(msg, sizeof msg, "must be a list of %zu to %zu strings", min, max);
        return spec_errors_add(errs, path, msg);
    }
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        size_t n = json_string_length(x);
        if (!json_is_string(x) || n < 1 || n > maxlen) {
            snprintf(path, sizeof path, "$.%s[%zu]", key, i);
            snprintf(msg, sizeof msg, "must be a string of 1 to %zu bytes", maxlen);
            ty_err e = spec_errors_add(errs, path, msg);
            if (e)
                return e;
        }
    }
    return TY_OK;
}

static json_t *hook_json(const store_webhook *w)
{
    char created[32], url[96];
    ty_time_format_rfc3339(w->created_at_ms, created, sizeof created);
    snprintf(url, sizeof url, "/v1/hooks/%s", w->name);
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:s, s:s}", "name", w->name, "provider",
                     w->provider, "events", json_loads(w->events_json, 0, NULL), "branches",
                     json_loads(w->branches_json, 0, NULL), "template",
                     json_loads(w->template_json, 0, NULL), "url", url, "created_at", created);
}

void api_webhooks_create(const api_req *req, api_resp *resp)
{
    json_t *body = NULL, *spec = NULL;
    spec_errors errs = {0};
    store_webhook w = {0};
    store_webhook *got = NULL;
    ty_err e;

    if (!api_need_json_body(req, resp, &body))
        goto out;
    if ((e = spec_errors_init(&errs)) != TY_OK)
        goto fail;
    if (!json_is_object(body)) {
        spec_errors_add(&errs, "$", "must be an object");
        goto invalid;
    }
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        static const char *const known[] = {"name",     "provider", "secret",
                                            "events",   "branches", "template"};
        size_t i = 0;
        while (i < 6 && strcmp(k, known[i]))
            i++;
        if (i == 6) {
            char path[320];
            snprintf(path, sizeof path, "$.%.256s", k);
            if ((e = spec_errors_add(&errs, path, "unknown field")) != TY_OK)
                goto fail;
        }
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    const char *provider = json_string_value(json_object_get(body, "provider"));
    json_t *secret = json_object_get(body, "secret");
    json_t *tmpl = json_object_get(body, "template");
    e = TY_OK;
    if (!name || !spec_is_dns_label(name, strlen(name)) || strlen(name) > SPEC_MAX_NAME)
        e = spec_errors_add(&errs, "$.name",
                            "must be a DNS label: 1 to 63 of [a-z0-9-], starting and ending "
                            "with a letter or digit");
    if (!e && !is_provider(provider))
        e = spec_errors_add(&errs, "$.provider", "must be one of github, gitlab, generic");
    if (!e && (!json_is_string(secret) || json_string_length(secret) < MIN_SECRET ||
               json_string_length(secret) > MAX_SECRET))
        e = spec_errors_add(&errs, "$.secret", "must be a string of 8 to 1024 bytes");
    if (!e)
        e = check_strings(body, "events", 1, MAX_EVENTS, 64, "push", &errs);
    if (!e)
        e = check_strings(body, "branches", 0, MAX_BRANCHES, MAX_VALUE, NULL, &errs);
    if (!e && !json_is_object(tmpl))
        e = spec_errors_add(&errs, "$.template", "must be a job spec (an object)");
    if (!e && errs.count == 0)
        e = job_from_template(req->ctx, tmpl, name, sample_vars, "$.template", &errs, &spec);
    if (e == TY_ENOMEM)
        goto fail;
    if (errs.count > 0)
        goto invalid;

    w.name = (char *)name;
    w.provider = (char *)provider;
    w.events_json = json_dumps(json_object_get(body, "events"), JSON_COMPACT);
    w.branches_json = json_dumps(json_object_get(body, "branches"), JSON_COMPACT);
    w.template_json = json_dumps(tmpl, JSON_COMPACT);
    w.secret = (unsigned char *)json_string_value(secret);
    w.secret_len = json_string_length(secret);
    e = TY_ENOMEM;
    if (!w.events_json || !w.branches_json || !w.template_json)
        goto fail;
    e = store_webhook_create(req->ctx->store, &w);
    if (e == TY_EEXISTS) {
        api_reply_problem(resp, 409, "webhook-exists", NULL, "a webhook already has this name",
                          NULL);
        goto out;
    }
    if (e || (e = store_webhook_get(req->ctx->store, name, &got)) != TY_OK)
        goto fail;
    json_t *view = hook_json(got);
    if (!view) {
        e = TY_ENOMEM;
        goto fail;
    }
    char location[96];
    snprintf(location, sizeof location, "/v1/webhooks/%s", name);
    api_reply_json(resp, 201, view);
    api_resp_header(resp, "Location", location);
    goto out;

invalid:
    api_reply_invalid(resp, 422, "invalid-webhook", &errs);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    free(w.events_json);
    free(w.branches_json);
    free(w.template_json);
    store_webhooks_free(got, 1);
    spec_errors_free(&errs);
    json_decref(spec);
    json_decref(body);
}

void api_webhooks_list(const api_req *req, api_resp *resp)
{
    store_webhook *hooks = NULL;
    size_t n = 0;
    ty_err e = store_webhooks_list(req->ctx->store, &hooks, &n);
    json_t *list = e ? NULL : json_array();
    for (size_t i = 0; list && i < n; i++)
        if (json_array_append_new(list, hook_json(&hooks[i]))) {
            json_decref(list);
            list = NULL;
        }
    if (!e && !list)
        e = TY_ENOMEM;
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json(resp, 200, json_pack("{s:o}", "webhooks", list));
    store_webhooks_free(hooks, n);
}

static void reply_hook_not_found(api_resp *resp)
{
    api_reply_problem(resp, 404, "webhook-not-found", NULL, "no webhook has this name", NULL);
}

void api_webhooks_delete(const api_req *req, api_resp *resp)
{
    ty_err e = store_webhook_delete(req->ctx->store, req->id);
    if (e == TY_ENOTFOUND)
        reply_hook_not_found(resp);
    else if (e)
        api_reply_error(resp, e, NULL);
    else
        resp->status = 204;
}

/* ---- the guard of deliveries ------------------------------------------------------- */

enum { R_BAD_SIGNATURE, R_RATE_LIMITED, R_REPLAY, R_UNKNOWN_HOOK, R_COUNT };
static const char *const reason_names[R_COUNT] = {"bad_signature", "rate_limited", "replay",
                                                  "unknown_hook"};

/* When a (hook, reason) log line was last written, and how many were left out since. */
typedef struct quiet_line {
    char hook[64];
    int reason;          /* -1: empty */
    int64_t last_ms;     /* monotonic */
    uint64_t suppressed;
} quiet_line;

struct api_hook_guard {
    api_hook_limits lim;
    ty_ratelimit *addr, *hook, *fail;
    _Atomic uint64_t refused[R_COUNT];
    pthread_mutex_t mu; /* quiet */
    quiet_line quiet[QUIET_SLOTS];
};

static double or_default(double v, double d)
{
    return v > 0 ? v : d;
}

ty_err api_hook_guard_new(const api_hook_limits *lim, api_hook_guard **out)
{
    api_hook_limits l = lim ? *lim : (api_hook_limits){0};
    unsigned char seed[24];
    uint64_t k[3];
    api_hook_guard *g = calloc(1, sizeof *g);
    ty_err e = TY_ENOMEM;
    if (!g)
        return e;
    l.addr_rate = or_default(l.addr_rate, 10);
    l.addr_burst = or_default(l.addr_burst, 50);
    l.hook_rate = or_default(l.hook_rate, 20);
    l.hook_burst = or_default(l.hook_burst, 100);
    l.fail_rate = or_default(l.fail_rate, 0.1);
    l.fail_burst = or_default(l.fail_burst, 10);
    l.max_delay_ms = l.max_delay_ms == 0 ? 1000 : l.max_delay_ms < 0 ? 0 : l.max_delay_ms;
    g->lim = l;
    for (int i = 0; i < QUIET_SLOTS; i++)
        g->quiet[i].reason = -1;
    if ((e = ty_random_bytes(seed, sizeof seed)) != TY_OK)
        goto fail;
    memcpy(k, seed, sizeof k);
    if ((e = ty_ratelimit_new(LIMIT_SLOTS, l.addr_rate, l.addr_burst, k[0], &g->addr)) ||
        (e = ty_ratelimit_new(LIMIT_SLOTS, l.hook_rate, l.hook_burst, k[1], &g->hook)) ||
        (e = ty_ratelimit_new(LIMIT_SLOTS, l.fail_rate, l.fail_burst, k[2], &g->fail)))
        goto fail;
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        e = TY_ENOMEM;
        goto fail;
    }
    *out = g;
    return TY_OK;
fail:
    ty_ratelimit_free(g->addr);
    ty_ratelimit_free(g->hook);
    ty_ratelimit_free(g->fail);
    free(g);
    return e;
}

void api_hook_guard_free(api_hook_guard *g)
{
    if (!g)
        return;
    ty_ratelimit_free(g->addr);
    ty_ratelimit_free(g->hook);
    ty_ratelimit_free(g->fail);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

ty_err api_webhooks_render_metrics(const api_hook_guard *g, ty_buf *out)
{
    ty_err e = ty_metrics_render_header(
        out, "trainyard_webhook_deliveries_refused_total", "counter",
        "Webhook deliveries that made no new job, by reason: bad_signature (401), rate_limited "
        "(429), replay (answered with the first job), unknown_hook (404).");
    for (int r = 0; g && r < R_COUNT && !e; r++)
        e = ty_buf_printf(out, "trainyard_webhook_deliveries_refused_total{reason=\"%s\"} %llu\n",
                          reason_names[r], (unsigned long long)atomic_load(&g->refused[r]));
    return e;
}

static int64_t mono_ms(void)
{
    return (int64_t)(ty_time_mono_ns() / 1000000u);
}

/* The bucket key of the peer: an IPv4 address, or an IPv6 address's /64 (what one host is
 * given). 0 when the peer is unknown. */
static size_t addr_key(const api_req *req, unsigned char key[16])
{
    static const unsigned char v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!req->peer_ip)
        return 0;
    memcpy(key, req->peer_ip, 16);
    return memcmp(key, v4, sizeof v4) == 0 ? 16 : 8;
}

/*
 * Whether a line about (key, reason) is due: the first one, then one a minute; *suppressed
 * is then the number left out since the last. Without a guard every line is due.
 */
static int quiet_due(api_hook_guard *g, const char *hook, int reason, uint64_t *suppressed)
{
    *suppressed = 0;
    if (!g)
        return 1;
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)reason;
    for (const char *p = hook; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    int64_t now = mono_ms();
    int due = 1;
    pthread_mutex_lock(&g->mu);
    quiet_line *q = &g->quiet[h % QUIET_SLOTS];
    if (q->reason != reason || strcmp(q->hook, hook) != 0) {
        q->reason = reason;
        snprintf(q->hook, sizeof q->hook, "%s", hook);
        q->suppressed = 0;
    } else if (now - q->last_ms >= QUIET_EVERY_MS) {
        *suppressed = q->suppressed;
        q->suppressed = 0;
    } else {
        q->suppressed++;
        due = 0;
    }
    if (due)
        q->last_ms = now;
    pthread_mutex_unlock(&g->mu);
    return due;
}

/* Counts a refusal and logs it when due (see quiet_due()); quiet_key is the hook's name, or
 * "" for refusals by an address's limits, which come before the name is known to be a hook's:
 * a client that makes up names gets one line a minute, not one per name. */
static void note_refusal(api_hook_guard *g, const api_req *req, const char *hook,
                         const char *quiet_key, int reason, const char *why)
{
    uint64_t left_out;
    if (g)
        atomic_fetch_add(&g->refused[reason], 1);
    if (!ty_log_enabled(reason == R_REPLAY ? TY_LOG_INFO : TY_LOG_WARN) ||
        !quiet_due(g, quiet_key, reason, &left_out))
        return;
    TY_LOG(reason == R_REPLAY ? TY_LOG_INFO : TY_LOG_WARN,
           reason == R_REPLAY ? "webhook delivery replayed" : "webhook delivery refused",
           "{s:s, s:s, s:s, s:s, s:I}", "request_id", req->request_id ? req->request_id : "",
           "webhook", hook, "reason", reason_names[reason], "detail", why, "suppressed",
           (json_int_t)left_out);
}

/*
 * The guard's check of a delivery, before anything costly: NULL when it may go on, else the
 * limit that refuses it, with *wait_ms until it would not and *by_addr set when an address's
 * limit refused it. A delivery refused by its address's limits spends none of the hook's: one
 * client cannot use up a hook's budget.
 */
static const char *guard_admit(api_hook_guard *g, const api_req *req, int64_t now,
                               int64_t *wait_ms, int *by_addr)
{
    unsigned char key[16];
    size_t klen = addr_key(req, key);
    *by_addr = 1;
    if (klen && !ty_ratelimit_take(g->addr, key, klen, now, 1, wait_ms))
        return "too many deliveries from this address";
    if (klen && !ty_ratelimit_check(g->fail, key, klen, now, 1, wait_ms))
        return "too many deliveries with bad signatures from this address";
    *by_addr = 0;
    if (!ty_ratelimit_take(g->hook, req->id, strlen(req->id), now, 1, wait_ms))
        return "too many deliveries to this hook";
    return NULL;
}

/* A bad signature spends one of its address's few. */
static void guard_failed(api_hook_guard *g, const api_req *req)
{
    unsigned char key[16];
    size_t klen = addr_key(req, key);
    if (g && klen)
        ty_ratelimit_take(g->fail, key, klen, mono_ms(), 1, NULL);
}

/* 429 after min(wait_ms, max_delay_ms), with Retry-After for the rest of the wait. */
static void reply_limited(const api_hook_guard *g, api_resp *resp, const char *why,
                          int64_t wait_ms)
{
    int64_t delay = wait_ms < g->lim.max_delay_ms ? wait_ms : g->lim.max_delay_ms;
    struct timespec ts = {.tv_sec = delay / 1000, .tv_nsec = (long)(delay % 1000) * 1000000L};
    while (delay > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    int64_t left = (wait_ms - delay + 999) / 1000;
    char ra[24];
    snprintf(ra, sizeof ra, "%lld", (long long)(left < 1 ? 1 : left));
    api_reply_problem(resp, 429, "rate-limited", NULL, why, NULL);
    api_resp_header(resp, "Retry-After", ra);
}

/* ---- deliveries ------------------------------------------------------------------- */

static const char *header(const api_req *req, const char *name)
{
    return req->header ? req->header(req->hctx, name) : NULL;
}

/* HMAC-SHA256 with key over a then b (b may be NULL). */
static ty_err hmac_sha256(const unsigned char *key, size_t keylen, const void *a, size_t alen,
                          const void *b, size_t blen, unsigned char out[32])
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end()};
    size_t n = 0;
    ty_err e = TY_EINTERNAL;
    if (c && EVP_MAC_init(c, key, keylen, params) == 1 && EVP_MAC_update(c, a, alen) == 1 &&
        (!b || EVP_MAC_update(c, b, blen) == 1) && EVP_MAC_final(c, out, &n, 32) == 1 &&
        n == 32)
        e = TY_OK;
    EVP_MAC_CTX_free(c);
    EVP_MAC_free(mac);
    return e;
}

/* "sha256=<64 hex>" into 32 bytes; 0 when the text has another shape. */
static int parse_sig(const char *h, unsigned char out[32])
{
    if (!h || strncmp(h, "sha256=", 7) != 0 || strlen(h + 7) != 64)
        return 0;
    h += 7;
    for (int i = 0; i < 32; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = (char)tolower((unsigned char)h[2 * i + j]);
            if (c >= '0' && c <= '9')
                v = v * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (unsigned)(c - 'a' + 10);
            else
                return 0;
        }
        out[i] = (unsigned char)v;
    }
    return 1;
}

/* NULL when the delivery is authentic, else why not (for the log and the 401). A generic
 * delivery's signature and timestamp come back in sig and *ts. */
static const char *verify(const api_req *req, const store_webhook *w, unsigned char sig[32],
                          long long *ts_out)
{
    unsigned char want[32], got[32];
    const char *body = req->body ? req->body : "";
    if (!strcmp(w->provider, "gitlab")) {
        const char *tok = header(req, "X-Gitlab-Token");
        if (!tok)
            return "missing X-Gitlab-Token";
        ty_sha256(tok, strlen(tok), got);
        return CRYPTO_memcmp(got, w->secret, 32) == 0 ? NULL : "X-Gitlab-Token does not match";
    }
    if (!strcmp(w->provider, "github")) {
        if (!parse_sig(header(req, "X-Hub-Signature-256"), got))
            return "missing or malformed X-Hub-Signature-256";
        if (hmac_sha256(w->secret, w->secret_len, body, req->body_len, NULL, 0, want))
            return "cannot compute the signature";
        return CRYPTO_memcmp(got, want, 32) == 0 ? NULL : "X-Hub-Signature-256 does not match";
    }
    const char *ts = header(req, "X-Trainyard-Timestamp");
    char *end = NULL;
    long long t = ts ? strtoll(ts, &end, 10) : 0;
    if (!ts || !*ts || *end)
        return "missing or malformed X-Trainyard-Timestamp";
    if (!parse_sig(header(req, "X-Trainyard-Signature"), got))
        return "missing or malformed X-Trainyard-Signature";
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%lld.", t);
    if (strncmp(prefix, ts, strlen(ts)) != 0 || strlen(prefix) != strlen(ts) + 1)
        return "malformed X-Trainyard-Timestamp";
    if (hmac_sha256(w->secret, w->secret_len, prefix, strlen(prefix), body, req->body_len, want))
        return "cannot compute the signature";
    if (CRYPTO_memcmp(got, want, 32) != 0)
        return "X-Trainyard-Signature does not match";
    long long now = ty_time_now_ms() / 1000;
    if (t < now - WINDOW_S || t > now + WINDOW_S)
        return "X-Trainyard-Timestamp is outside the 5-minute window";
    memcpy(sig, got, 32);
    *ts_out = t;
    return NULL;
}

/* The event's name as hooks select it: "push", "tag_push", "ping", ... */
static void event_name(const api_req *req, const char *provider, char *out, size_t len)
{
    const char *h = !strcmp(provider, "github")   ? header(req, "X-GitHub-Event")
                    : !strcmp(provider, "gitlab") ? header(req, "X-Gitlab-Event")
                                                  : header(req, "X-Trainyard-Event");
    if (!h)
        h = !strcmp(provider, "generic") ? "push" : "";
    size_t o = 0;
    /* GitLab names its events "Push Hook", "Tag Push Hook": lower case, '_' for ' ',
     * without the " Hook". */
    size_t n = strlen(h);
    if (!strcmp(provider, "gitlab") && n > 5 && !strcasecmp(h + n - 5, " hook"))
        n -= 5;
    for (size_t i = 0; i < n && o + 1 < len; i++)
        out[o++] = h[i] == ' ' ? '_' : (char)tolower((unsigned char)h[i]);
    out[o] = 0;
}

/* Whether list_json (a stored array of strings) holds s; an empty list holds everything when
 * empty_all is set. */
static int in_list(const char *list_json, const char *s, int empty_all)
{
    json_t *l = json_loads(list_json, 0, NULL);
    size_t i;
    json_t *x;
    int found = empty_all && json_array_size(l) == 0;
    json_array_foreach(l, i, x)
    {
        const char *v = json_string_value(x);
        found |= v && !strcmp(v, s);
    }
    json_decref(l);
    return found;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_string_value(v);
}

/* A value fit to fill a template: 0..MAX_VALUE bytes without control characters. */
static int plain_value(const char *s, size_t min)
{
    size_t n = s ? strlen(s) : 0;
    if (!s || n < min || n > MAX_VALUE)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* Fills vars (borrowed from payload, except the three in bufs) from a push payload. NULL when
 * they are all there and well formed, else the offending field. */
static const char *payload_vars(const json_t *p, const char *provider, const char **vars,
                                char *branch, char *commit_short)
{
    if (!strcmp(provider, "github")) {
        vars[V_REPOSITORY] = str_at(p, "repository", "full_name");
        vars[V_COMMIT] = str_at(p, "after", NULL);
        vars[V_PUSHER] = str_at(p, "pusher", "name");
    } else if (!strcmp(provider, "gitlab")) {
        vars[V_REPOSITORY] = str_at(p, "project", "path_with_namespace");
        vars[V_COMMIT] = str_at(p, "checkout_sha", NULL);
        if (!vars[V_COMMIT])
            vars[V_COMMIT] = str_at(p, "after", NULL);
        vars[V_PUSHER] = str_at(p, "user_username", NULL);
    } else {
        vars[V_REPOSITORY] = str_at(p, "repository", NULL);
        vars[V_COMMIT] = str_at(p, "commit", NULL);
        vars[V_PUSHER] = str_at(p, "pusher", NULL);
    }
    vars[V_REF] = str_at(p, "ref", NULL);
    if (!vars[V_PUSHER])
        vars[V_PUSHER] = "";
    if (!plain_value(vars[V_REPOSITORY], 1))
        return "repository";
    if (!plain_value(vars[V_REF], 1))
        return "ref";
    if (!plain_value(vars[V_PUSHER], 0))
        return "pusher";
    const char *c = vars[V_COMMIT];
    size_t n = c ? strlen(c) : 0;
    if (n < 7 || n > 64 || strspn(c, "0123456789abcdef") != n)
        return "commit";
    static const char heads[] = "refs/heads/";
    const char *b = strncmp(vars[V_REF], heads, sizeof heads - 1) ? "" : vars[V_REF] + 11;
    snprintf(branch, MAX_VALUE + 1, "%s", b);
    snprintf(commit_short, 13, "%.12s", c);
    vars[V_BRANCH] = branch;
    vars[V_COMMIT_SHORT] = commit_short;
    return NULL;
}

static void reply_ignored(api_resp *resp, const char *reason)
{
    api_reply_json(resp, 202, json_pack("{s:s, s:s}", "status", "ignored", "reason", reason));
}

/* 201 (created) or 200 (a redelivery) with the job's id and path. */
static void reply_delivery(api_resp *resp, unsigned status, const char *id)
{
    char location[64];
    snprintf(location, sizeof location, "/v1/jobs/%s", id);
    api_reply_json(resp, status,
                   json_pack("{s:s, s:s, s:s}", "status", status == 201 ? "created" : "redelivered",
                             "job_id", id, "job", location));
    api_resp_header(resp, "Location", location);
}

/* The delivery's id as the provider sends it; NULL when absent. "" when malformed. */
static const char *delivery_id(const api_req *req, const char *provider)
{
    const char *d = !strcmp(provider, "github")   ? header(req, "X-GitHub-Delivery")
                    : !strcmp(provider, "gitlab") ? header(req, "X-Gitlab-Event-UUID")
                                                  : header(req, "X-Trainyard-Delivery");
    if (!d)
        return NULL;
    size_t n = strlen(d);
    if (n < 1 || n > MAX_DELIVERY_ID)
        return "";
    for (size_t i = 0; i < n; i++)
        if (d[i] < 0x21 || d[i] > 0x7e)
            return "";
    return d;
}

void api_webhooks_deliver(const api_req *req, api_resp *resp)
{
    store_webhook *w = NULL;
    json_t *payload = NULL, *tmpl = NULL, *spec = NULL;
    spec_errors errs = {0};
    char *spec_json = NULL;
    store_label *labels = NULL;
    char idem[MAX_DELIVERY_ID + 96];
    api_hook_guard *g = req->ctx->hook_guard;
    int64_t wait_ms = 0;
    ty_err e;

    if (!req->id || !spec_is_dns_label(req->id, strlen(req->id))) {
        reply_hook_not_found(resp);
        goto out;
    }
    int by_addr = 0;
    const char *limited = g ? guard_admit(g, req, mono_ms(), &wait_ms, &by_addr) : NULL;
    if (limited) {
        note_refusal(g, req, req->id, by_addr ? "" : req->id, R_RATE_LIMITED, limited);
        reply_limited(g, resp, limited, wait_ms);
        goto out;
    }
    e = store_webhook_get(req->ctx->store, req->id, &w);
    if (e == TY_ENOTFOUND) {
        if (g)
            atomic_fetch_add(&g->refused[R_UNKNOWN_HOOK], 1);
        reply_hook_not_found(resp);
        goto out;
    }
    if (e)
        goto fail;
    if (!api_need_body_size(req, resp) || !api_need_json_content(req, resp))
        goto out;
    unsigned char sig[32] = {0};
    long long ts = 0;
    const char *why = verify(req, w, sig, &ts);
    if (why) {
        guard_failed(g, req);
        note_refusal(g, req, w->name, w->name, R_BAD_SIGNATURE, why);
        api_reply_problem(resp, 401, "invalid-signature", NULL, why, NULL);
        goto out;
    }
    char event[64];
    event_name(req, w->provider, event, sizeof event);
    if (!in_list(w->events_json, event, 0)) {
        reply_ignored(resp, "the hook does not select this event");
        goto out;
    }
    const char *did = delivery_id(req, w->provider);
    if (did && !*did) {
        api_reply_problem(resp, 400, "invalid-delivery-id", NULL,
                          "the delivery id must be 1 to 200 printable ASCII characters", NULL);
        goto out;
    }
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(req->body ? req->body : "", req->body_len, hash);
    if (did) {
        char id[STORE_ID_LEN + 1];
        snprintf(idem, sizeof idem, "webhook:%s:%s", w->name, did);
        e = store_webhook_delivery(req->ctx->store, idem, hash, id);
        if (e == TY_OK) {
            reply_delivery(resp, 200, id);
            goto out;
        }
        if (e == TY_ECONFLICT)
            goto reused;
        if (e != TY_ENOTFOUND)
            goto fail;
    }
    /* A replay: the body (GitHub, GitLab) or the signature (generic) came before. */
    int generic = !strcmp(w->provider, "generic");
    store_webhook_replay replay = {
        .hook = w->name,
        .digest = generic ? sig : hash,
        .expires_ms = generic ? (ts + WINDOW_S + 1) * 1000 : ty_time_now_ms() + REPLAY_TTL_MS,
    };
    char first[STORE_ID_LEN + 1];
    e = store_webhook_replay_get(req->ctx->store, &replay, first);
    if (e == TY_OK) {
        note_refusal(g, req, w->name, w->name, R_REPLAY, "the hook accepted this delivery before");
        reply_delivery(resp, 200, first);
        goto out;
    }
    if (e != TY_ENOTFOUND)
        goto fail;
    if (!api_need_json_body(req, resp, &payload))
        goto out;
    const char *vars[V_COUNT] = {0};
    char branch[MAX_VALUE + 1], commit_short[13];
    const char *bad = payload_vars(payload, w->provider, vars, branch, commit_short);
    if (bad) {
        char msg[96];
        snprintf(msg, sizeof msg, "the payload has no usable %s", bad);
        api_reply_problem(resp, 422, "invalid-payload", NULL, msg, NULL);
        goto out;
    }
    if (strspn(vars[V_COMMIT], "0") == strlen(vars[V_COMMIT])) {
        reply_ignored(resp, "the push deleted the branch");
        goto out;
    }
    if (!in_list(w->branches_json, branch, 1)) {
        reply_ignored(resp, "the hook does not select this branch");
        goto out;
    }
    if (!(tmpl = json_loads(w->template_json, 0, NULL))) {
        e = TY_ESCHEMA;
        goto fail;
    }
    if ((e = spec_errors_init(&errs)) != TY_OK)
        goto fail;
    e = job_from_template(req->ctx, tmpl, w->name, vars, "$.template", &errs, &spec);
    if (e == TY_EINVAL) {
        api_reply_invalid(resp, 422, "invalid-spec", &errs);
        goto out;
    }
    if (e)
        goto fail;

    ty_buf text = {0};
    if (ty_json_write(&text, spec) || ty_buf_steal(&text, &spec_json, NULL)) {
        ty_buf_free(&text);
        e = TY_ENOMEM;
        goto fail;
    }
    json_t *jl = json_object_get(spec, "labels");
    labels = calloc(json_object_size(jl) + 1, sizeof *labels);
    if (!labels) {
        e = TY_ENOMEM;
        goto fail;
    }
    char owner[96];
    snprintf(owner, sizeof owner, "webhook:%.63s", req->id);
    store_job_new job = {
        .name = json_string_value(json_object_get(spec, "name")),
        .queue = json_string_value(json_object_get(spec, "queue")),
        .priority = json_integer_value(json_object_get(spec, "priority")),
        .spec_json = spec_json,
        .labels = labels,
        /* A delivery's job belongs to the default team, owned by "webhook:<name>" (no
         * token name holds ':'): registration is an admin's, and the team is the install's. */
        .team = STORE_TEAM_DEFAULT,
        .owner = owner,
    };
    const char *k;
    json_t *lv;
    json_object_foreach(jl, k, lv)
    {
        labels[job.nlabels].key = k;
        labels[job.nlabels].value = json_string_value(lv);
        job.nlabels++;
    }
    int replayed = 0;
    char job_id[STORE_ID_LEN + 1];
    e = store_webhook_submit(req->ctx->store, &job, did ? idem : NULL, did ? hash : NULL, &replay,
                             job_id, &replayed);
    if (e == TY_ECONFLICT)
        goto reused;
    if (e)
        goto fail;
    reply_delivery(resp, replayed ? 200 : 201, job_id);
    TY_LOG(TY_LOG_INFO, "webhook delivery", "{s:s, s:s, s:s, s:s, s:b}", "request_id",
           req->request_id ? req->request_id : "", "webhook", w->name, "job_id", job_id,
           "commit", vars[V_COMMIT], "redelivered", replayed);
    goto out;

reused:
    api_reply_problem(resp, 409, "delivery-id-reused", NULL,
                      "this delivery id came before with another body", NULL);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    free(labels);
    free(spec_json);
    spec_errors_free(&errs);
    json_decref(spec);
    json_decref(tmpl);
    json_decref(payload);
    store_webhooks_free(w, 1);
}
