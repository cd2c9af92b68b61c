/*
 * sweeps.c - the /v1/sweeps resource: create a sweep with all its trials,
 * list sweeps, get one with its trials, objective values and best trial,
 * cancel one.
 *
 * Creation reads straight down like a job submission: the body is validated
 * whole (sweep_spec.c: the space, the objective and the template for every
 * trial, 422 with paths), every trial's job spec is built and serialized
 * here, and the store writes the sweep and all its trial jobs in one
 * transaction (201 only after the commit). Random sweeps draw all their
 * trials at creation too: the draws depend only on the seed, so the same body
 * always creates the same trials.
 *
 * A sweep's state is derived from its trials: "running" while any trial has
 * not ended, then "cancelled" when a cancel was asked, else "finished". A
 * failed trial is one ended trial among others; nothing stops the sweep.
 *
 * "early_stopping": {"rule": "median", "min_trials": N (3), "min_step": S (0)}
 * is read here (sweep_parse() knows no such member) and kept with the sweep;
 * the rule runs after each metrics report a trial stores (metrics.c calls
 * sweep_stop_check(), scheduler/sweep_stop.h), so it never makes the report fail.
 *
 * Like jobs, sweeps are visible to every token with the read scope and
 * cancellable by every token with the submit scope.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/sweep_spec.h"
#include "common/ty_json.h"
#include "common/ty_time.h"

#define SWEEPS_DEFAULT_PAGE 50
#define SWEEPS_MAX_PAGE 100

static void reply_sweep_not_found(api_resp *resp)
{
    api_reply_problem(resp, 404, "sweep-not-found", NULL, "no sweep has this id", NULL);
}

/* ---- the Sweep resource -------------------------------------------------- */

/* The trial's parameters (a JSON text the store kept), as a new value; {} if unreadable. */
static json_t *params_json(const char *text)
{
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v ? v : json_object();
}

static json_t *trial_json(const store_sweep_trial *t)
{
    json_t *o = json_pack("{s:I, s:s, s:s, s:o}", "index", (json_int_t)t->index, "job_id",
                          t->job_id, "state", job_state_name(t->state), "parameters",
                          params_json(t->params_json));
    if (!o)
        return NULL;
    int bad = t->has_value ? json_object_set_new(o, "objective_value", json_real(t->value)) ||
                                 json_object_set_new(o, "objective_step",
                                                     json_integer((json_int_t)t->step))
                           : json_object_set_new(o, "objective_value", json_null()) ||
                                 json_object_set_new(o, "objective_step", json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The best trial that reported the objective, by goal (the lower index on a tie), or NULL. */
static const store_sweep_trial *best_trial(const store_sweep *sw)
{
    const store_sweep_trial *best = NULL;
    for (size_t i = 0; i < sw->ntrials_read; i++) {
        const store_sweep_trial *t = &sw->trials[i];
        if (!t->has_value)
            continue;
        if (!best || (sw->maximize ? t->value > best->value : t->value < best->value))
            best = t;
    }
    return best;
}

/* The Sweep (with_trials: its trials and best trial too) as a new object. */
static json_t *sweep_json(const store_sweep *sw, int with_trials)
{
    char created[32];
    ty_time_format_rfc3339(sw->created_at_ms, created, sizeof created);
    json_t *counts = json_object();
    for (int s = 0; counts && s < JOB_STATE_COUNT; s++)
        if (sw->counts[s] > 0 &&
            json_object_set_new(counts, job_state_name((job_state)s),
                                json_integer((json_int_t)sw->counts[s]))) {
            json_decref(counts);
            counts = NULL;
        }
    json_t *stop = sw->stop_min_trials < 0
                       ? json_null()
                       : json_pack("{s:s, s:i, s:I}", "rule", "median", "min_trials",
                                   sw->stop_min_trials, "min_step",
                                   (json_int_t)sw->stop_min_step);
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:{s:s, s:s}, s:o*, s:s, s:s, s:I, s:o*}", "id",
                          sw->id, "name", sw->name, "algorithm", sw->algorithm, "parallelism",
                          sw->parallelism, "objective", "metric", sw->metric, "goal",
                          sw->maximize ? "maximize" : "minimize", "early_stopping", stop,
                          "state", store_sweep_state(sw), "created_at", created, "trials_total",
                          (json_int_t)sw->ntrials, "counts", counts);
    if (o && (json_object_set_new(o, "team",
                                  json_string(sw->team ? sw->team : STORE_TEAM_DEFAULT)) ||
              json_object_set_new(o, "owner", sw->owner ? json_string(sw->owner) : json_null())))
        stop = NULL; /* out of memory: o goes below */
    if (!o || !stop || !counts) {
        json_decref(o);
        return NULL;
    }
    if (!with_trials)
        return o;
    json_t *trials = json_array();
    if (!trials || json_object_set_new(o, "trials", trials)) {
        json_decref(o);
        return NULL;
    }
    for (size_t i = 0; i < sw->ntrials_read; i++)
        if (json_array_append_new(trials, trial_json(&sw->trials[i]))) {
            json_decref(o);
            return NULL;
        }
    const store_sweep_trial *b = best_trial(sw);
    if (json_object_set_new(o, "best", b ? trial_json(b) : json_null())) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Reads the sweep and replies with it (status), with a Location header when asked. */
static void reply_sweep(const api_req *req, api_resp *resp, const char *id, unsigned status,
                        int location)
{
    store_sweep *sw = NULL;
    ty_err e = store_sweep_get(req->ctx->store, id, &sw);
    if (e == TY_ENOTFOUND) {
        reply_sweep_not_found(resp);
        return;
    }
    if (e) {
        api_reply_error(resp, e, NULL);
        return;
    }
    json_t *o = sweep_json(sw, 1);
    store_sweeps_free(sw, 1);
    if (!o) {
        api_reply_error(resp, TY_ENOMEM, NULL);
        return;
    }
    api_reply_json(resp, status, o);
    if (location) {
        char path[64];
        snprintf(path, sizeof path, "/v1/sweeps/%s", id);
        api_resp_header(resp, "Location", path);
    }
}

/* ---- creation ------------------------------------------------------------ */

/* The optional "early_stopping" member, removed from body before sweep_parse() sees it. */
static void parse_early_stopping(json_t *body, store_sweep_new *in, spec_errors *errs)
{
    json_t *es = json_object_get(body, "early_stopping");
    in->stop_min_trials = -1;
    in->stop_min_step = 0;
    if (!es)
        return;
    json_incref(es);
    json_object_del(body, "early_stopping");
    if (json_is_null(es))
        goto out;
    if (!json_is_object(es)) {
        spec_errors_add(errs, "$.early_stopping", "must be an object");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(es, k, v)
    {
        if (strcmp(k, "rule") && strcmp(k, "min_trials") && strcmp(k, "min_step")) {
            char path[96];
            snprintf(path, sizeof path, "$.early_stopping.%.60s", k);
            spec_errors_add(errs, path, "is not a known member");
        }
    }
    const json_t *rule = json_object_get(es, "rule");
    if (!json_is_string(rule) || strcmp(json_string_value(rule), "median") != 0)
        spec_errors_add(errs, "$.early_stopping.rule", "must be \"median\"");
    const json_t *mt = json_object_get(es, "min_trials");
    in->stop_min_trials = 3;
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
               json_integer_value(mt) > SWEEP_MAX_TRIALS))
        spec_errors_add(errs, "$.early_stopping.min_trials", "must be an integer, 1..1000");
    else if (mt)
        in->stop_min_trials = (int)json_integer_value(mt);
    const json_t *ms = json_object_get(es, "min_step");
    if (ms && (!json_is_integer(ms) || json_integer_value(ms) < 0))
        spec_errors_add(errs, "$.early_stopping.min_step", "must be an integer >= 0");
    else if (ms)
        in->stop_min_step = json_integer_value(ms);
out:
    json_decref(es);
}

/* The backend's refusal of trial i's spec, as one 422 error under $.template. */
static ty_err check_runnable(const api_ctx *ctx, const json_t *spec, spec_errors *errs)
{
    char path[128] = "$", msg[256] = "", full[192];
    if (!ctx->spec_check ||
        ctx->spec_check(ctx->spec_check_ud, spec, path, sizeof path, msg, sizeof msg) == 0)
        return TY_OK;
    snprintf(full, sizeof full, "$.template%s", path[0] == '$' ? path + 1 : path);
    if (spec_errors_add(errs, full, msg[0] ? msg : "cannot run on this cluster"))
        return TY_ENOMEM;
    return TY_EINVAL;
}

/* What a creation builds for the store; everything owned, released by trials_free(). */
typedef struct trials {
    store_job_new *jobs;
    store_label *labels;
    char **spec_text;
    char **params_text;
    json_t **specs;
    size_t n;
    api_secrets secrets; /* the trials' secret env values, taken out of their specs */
} trials;

static void trials_free(trials *t)
{
    for (size_t i = 0; i < t->n; i++) {
        if (t->spec_text)
            free(t->spec_text[i]);
        if (t->params_text)
            free(t->params_text[i]);
        if (t->specs)
            json_decref(t->specs[i]);
    }
    api_secrets_free(&t->secrets);
    free(t->jobs);
    free(t->labels);
    free(t->spec_text);
    free(t->params_text);
    free(t->specs);
    memset(t, 0, sizeof *t);
}

/* Builds every trial's job of d under the sweep id. TY_EINVAL: the backend refused one. */
static ty_err trials_build(const api_ctx *ctx, const sweep_def *d, const char *id, trials *t,
                           spec_errors *errs)
{
    size_t n = sweep_space_ntrials(d->space), nlabels = 0;
    t->n = n;
    if (!(t->jobs = calloc(n, sizeof *t->jobs)) || !(t->spec_text = calloc(n, sizeof(char *))) ||
        !(t->params_text = calloc(n, sizeof(char *))) ||
        !(t->specs = calloc(n, sizeof(json_t *))))
        return TY_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *params = NULL;
        ty_err e = sweep_trial_spec(d, id, i, &t->specs[i], &params);
        if (e)
            return e;
        t->params_text[i] = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(params);
        if (!t->params_text[i])
            return TY_ENOMEM;
        /* The template is the same for every trial but its args and env: one check will do. */
        if (i == 0 && (e = check_runnable(ctx, t->specs[i], errs)) != TY_OK)
            return e;
        nlabels += json_object_size(json_object_get(t->specs[i], "labels"));
    }
    /* Secret values leave the specs before they are written: the store seals them. */
    if (api_secrets_take(t->specs, n, t->jobs, &t->secrets) != TY_OK)
        return TY_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ty_buf b = {0};
        if (ty_json_write(&b, t->specs[i]) || ty_buf_steal(&b, &t->spec_text[i], NULL)) {
            ty_buf_free(&b);
            return TY_ENOMEM;
        }
    }
    if (!(t->labels = calloc(nlabels ? nlabels : 1, sizeof *t->labels)))
        return TY_ENOMEM;
    nlabels = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *spec = t->specs[i];
        store_job_new *j = &t->jobs[i];
        j->name = json_string_value(json_object_get(spec, "name"));
        j->queue = json_string_value(json_object_get(spec, "queue"));
        j->priority = json_integer_value(json_object_get(spec, "priority"));
        j->spec_json = t->spec_text[i];
        j->labels = t->labels + nlabels;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(spec, "labels"), k, v)
        {
            t->labels[nlabels].key = k;
            t->labels[nlabels].value = json_string_value(v);
            nlabels++;
            j->nlabels++;
        }
    }
    return TY_OK;
}

void api_sweeps_create(const api_req *req, api_resp *resp)
{
    json_t *body = NULL;
    sweep_def *d = NULL;
    spec_errors errs = {0};
    trials t = {0};
    char *body_text = NULL;
    store_sweep_new in = {0};
    char id[STORE_ID_LEN + 1];
    const char *team;
    json_t *team_json = NULL;

    if (!api_need_json_body(req, resp, &body) || !api_need_submit_team(req, resp, body, &team))
        goto out;
    team_json = json_incref(json_object_get(body, "team")); /* keeps team valid */
    json_object_del(body, "team");
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    if (json_is_object(body)) {
        /* Stored as sent, but for the template's secret env values (null there). */
        json_t *kept = json_deep_copy(body);
        if (!kept || spec_secrets_take(json_object_get(kept, "template"), NULL) != TY_OK ||
            !(body_text = json_dumps(kept, JSON_COMPACT))) {
            json_decref(kept);
            e = TY_ENOMEM;
            goto fail;
        }
        json_decref(kept);
        parse_early_stopping(body, &in, &errs);
    }
    e = sweep_parse_limited(body, &req->ctx->limits, &d, &errs);
    if (!e && errs.count)
        e = TY_EINVAL;
    if (!e)
        e = store_sweep_id_new(id);
    if (!e)
        e = trials_build(req->ctx, d, id, &t, &errs);
    if (e == TY_EINVAL) {
        api_reply_invalid(resp, 422, "invalid-spec", &errs);
        goto out;
    }
    if (e)
        goto fail;
    in.id = id;
    in.name = d->name;
    in.algorithm = json_string_value(json_object_get(body, "algorithm"));
    in.parallelism = d->parallelism;
    in.metric = d->metric;
    in.maximize = d->maximize;
    in.body_json = body_text;
    in.trials = t.jobs;
    in.params_json = (const char *const *)t.params_text;
    in.ntrials = t.n;
    in.team = team;
    in.owner = api_principal_name(req)[0] ? api_principal_name(req) : NULL;
    for (size_t i = 0; i < t.n; i++) { /* trials belong where their sweep does */
        t.jobs[i].team = in.team;
        t.jobs[i].owner = in.owner;
    }
    if ((e = store_sweep_create(req->ctx->store, &in)))
        goto fail;
    reply_sweep(req, resp, id, 201, 1);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    trials_free(&t);
    free(body_text);
    sweep_def_free(d);
    spec_errors_free(&errs);
    json_decref(body);
    json_decref(team_json);
}

/* ---- reads and cancel ---------------------------------------------------- */

/* The sweep exists and the caller may see it (the store checks its team), else 404. */
static bool need_sweep_visible(const api_req *req, api_resp *resp)
{
    ty_err e = api_is_job_id(req->id)
                   ? store_sweep_visible(req->ctx->store, req->id, api_team_filter(req))
                   : TY_ENOTFOUND;
    if (e == TY_ENOTFOUND)
        reply_sweep_not_found(resp);
    else if (e)
        api_reply_error(resp, e, NULL);
    return e == TY_OK;
}

void api_sweeps_get(const api_req *req, api_resp *resp)
{
    if (!need_sweep_visible(req, resp))
        return;
    reply_sweep(req, resp, req->id, 200, 0);
}

/* A page token is the decimal cursor; anything else is refused. */
static int parse_cursor(const char *v, int64_t *out)
{
    char *end = NULL;
    if (!(v[0] >= '1' && v[0] <= '9') || strlen(v) > 18)
        return -1;
    long long n = strtoll(v, &end, 10);
    if (*end || n < 1)
        return -1;
    *out = n;
    return 0;
}

void api_sweeps_list(const api_req *req, api_resp *resp)
{
    spec_errors errs = {0};
    store_sweep *sw = NULL;
    size_t n = 0;
    int64_t before = 0, next = 0;
    int limit = SWEEPS_DEFAULT_PAGE;
    json_t *list = NULL, *o = NULL;
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    for (size_t i = 0; i < req->nquery; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (strcmp(k, "limit") == 0) {
            char *end = NULL;
            long l = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : 0;
            if (!end || *end || l < 1 || l > SWEEPS_MAX_PAGE)
                spec_errors_add(&errs, "query.limit", "must be an integer between 1 and 100");
            else
                limit = (int)l;
        } else if (strcmp(k, "page_token") == 0) {
            if (parse_cursor(v, &before))
                spec_errors_add(&errs, "query.page_token", "is not a valid page token");
        } else {
            char path[80];
            snprintf(path, sizeof path, "query.%.60s", k);
            spec_errors_add(&errs, path, "is not a known parameter");
        }
    }
    if (errs.count) {
        api_reply_invalid(resp, 400, "invalid-query", &errs);
        goto out;
    }
    if ((e = store_sweeps_list(req->ctx->store, api_team_filter(req), before, limit, &sw, &n,
                               &next)))
        goto fail;
    e = TY_ENOMEM;
    if (!(list = json_array()) || !(o = json_pack("{s:O}", "sweeps", list)))
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(list, sweep_json(&sw[i], 0)))
            goto fail;
    if (next > 0) {
        char token[24];
        snprintf(token, sizeof token, "%lld", (long long)next);
        if (json_object_set_new(o, "next_page_token", json_string(token)))
            goto fail;
    }
    api_reply_json(resp, 200, o);
    o = NULL;
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    json_decref(o);
    json_decref(list);
    store_sweeps_free(sw, n);
    spec_errors_free(&errs);
}

void api_sweeps_cancel(const api_req *req, api_resp *resp)
{
    if (!need_sweep_visible(req, resp))
        return;
    char message[128];
    const char *who = api_principal_name(req);
    snprintf(message, sizeof message, "sweep cancelled by %.100s", *who ? who : "an API client");
    ty_err e = store_sweep_cancel(req->ctx->store, req->id, message, NULL);
    if (e == TY_ENOTFOUND)
        reply_sweep_not_found(resp);
    else if (e)
        api_reply_error(resp, e, NULL);
    else
        reply_sweep(req, resp, req->id, 200, 0);
}
