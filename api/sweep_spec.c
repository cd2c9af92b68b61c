/*
 * sweep_spec.c - a sweep body's validation and its trials' job specs (see
 * sweep_spec.h).
 */
#include "api/sweep_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const body_fields[] = {"name",      "algorithm", "parameters",
                                          "trials",    "seed",      "parallelism",
                                          "objective", "template",  NULL};

void sweep_def_free(sweep_def *d)
{
    if (!d)
        return;
    sweep_space_free(d->space);
    json_decref(d->tmpl);
    free(d);
}

/* The rule of POST /v1/jobs/{id}/metrics: [A-Za-z_][A-Za-z0-9_.:/-]{0,63}. */
static int is_metric_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (i > 0)
            ok = ok || (c >= '0' && c <= '9') || strchr(".:/-", c) != NULL;
        if (!ok)
            return 0;
    }
    return 1;
}

/*
 * The labels the server gives trial i of sweep_id with `params` (new object): the sweep, the
 * trial's index and each parameter whose name and value make a label.
 */
static ty_err trial_labels(const char *sweep_id, size_t i, const json_t *params, json_t **out)
{
    char idx[24];
    json_t *labels = json_object();
    if (!labels)
        return TY_ENOMEM;
    snprintf(idx, sizeof idx, "%zu", i);
    if (json_object_set_new(labels, SWEEP_LABEL, json_string(sweep_id)) != 0 ||
        json_object_set_new(labels, SWEEP_TRIAL_LABEL, json_string(idx)) != 0)
        goto nomem;
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)params, name, v)
    {
        char text[512], key[128];
        if (sweep_value_text(v, text, sizeof text) != TY_OK ||
            !spec_is_label_value(text, strlen(text)))
            continue;
        snprintf(key, sizeof key, "%s%s", SWEEP_PARAM_LABEL_PREFIX, name);
        if (!spec_is_label_key(key, strlen(key)))
            continue; /* a name such as "_x" makes no label name */
        if (json_object_set_new(labels, key, json_string(text)) != 0)
            goto nomem;
    }
    *out = labels;
    return TY_OK;
nomem:
    json_decref(labels);
    return TY_ENOMEM;
}

/*
 * Trial i's spec from `in`, the template with params substituted (borrowed): validated as a
 * client's spec (so a template cannot set the server's labels) against limits (may be NULL),
 * then the trial's labels added. TY_OK: *spec new. TY_EINVAL: errors in errs (more than
 * SPEC_MAX_LABELS with the trial's labels is one at $.template.labels).
 */
static ty_err trial_spec(const json_t *in, const char *sweep_id, size_t i, const json_t *params,
                         const spec_limits *limits, spec_errors *errs, json_t **spec)
{
    json_t *labels = NULL, *res = NULL;
    spec_opts opts = {.limits = limits};
    ty_err e = spec_job_opts(in, "$.template", &opts, &res, errs);
    if (e == TY_OK)
        e = trial_labels(sweep_id, i, params, &labels);
    if (e == TY_OK)
        e = spec_add_server_labels(res, labels);
    if (e == TY_ETOOLARGE && res) {
        e = spec_errors_add(errs, "$.template.labels",
                            "with a trial's own labels (" SWEEP_LABEL ", " SWEEP_TRIAL_LABEL
                            ", " SWEEP_PARAM_LABEL_PREFIX "<name>) more than "
                            STR(SPEC_MAX_LABELS) " labels");
        e = e == TY_OK ? TY_EINVAL : e;
    }
    json_decref(labels);
    if (e != TY_OK) {
        json_decref(res);
        return e;
    }
    *spec = res;
    return TY_OK;
}

/* One error at "$.template" that ends the validation: TY_EINVAL, or TY_ENOMEM. */
static ty_err refuse(spec_errors *errs, const char *message)
{
    ty_err e = spec_errors_add(errs, "$.template", message);
    return e == TY_OK ? TY_EINVAL : e;
}

/* Validates every trial's spec into errs; TY_EINVAL when one is invalid. */
static ty_err check_trials(const sweep_def *d, const spec_limits *limits, spec_errors *errs)
{
    /* Labels get their real values later; a placeholder id of the same shape is as valid.
     * Work is bounded: each value by SWEEP_MAX_VALUE_BYTES, all trials (valid or not, counted
     * before normalization) by SWEEP_MAX_SPEC_BYTES, so a small body cannot make the server
     * build gigabytes. */
    static const char probe_id[] = "00000000000000000000000000";
    ty_err bad = TY_OK;
    size_t total = 0;
    for (size_t i = 0; i < sweep_space_ntrials(d->space); i++) {
        json_t *params = NULL, *in = NULL, *spec = NULL;
        ty_err e = sweep_space_trial(d->space, i, &params);
        if (e == TY_OK)
            e = sweep_substitute(d->tmpl, params, &in);
        if (e == TY_OK) {
            total += json_dumpb(in, NULL, 0, JSON_COMPACT);
            if (total <= SWEEP_MAX_SPEC_BYTES)
                e = trial_spec(in, probe_id, i, params, limits, errs, &spec);
        }
        json_decref(spec);
        json_decref(in);
        json_decref(params);
        if (e == TY_ETOOLARGE)
            return refuse(errs, "a substitution makes an argument or env value longer than "
                                "32768 bytes");
        if (e == TY_EINVAL)
            bad = TY_EINVAL;
        else if (e != TY_OK)
            return e;
        if (total > SWEEP_MAX_SPEC_BYTES)
            return refuse(errs, "the trials' job specs would exceed 16 MiB");
    }
    return bad;
}

ty_err sweep_parse(const json_t *body, sweep_def **out, spec_errors *errs)
{
    return sweep_parse_limited(body, NULL, out, errs);
}

ty_err sweep_parse_limited(const json_t *body, const spec_limits *limits, sweep_def **out,
                           spec_errors *errs)
{
    ty_err e = TY_OK;
    int bad = 0;
    if (!json_is_object(body))
        return spec_errors_add(errs, "$", "must be an object") == TY_OK ? TY_EINVAL : TY_ENOMEM;
    sweep_def *d = calloc(1, sizeof *d);
    if (!d)
        return TY_ENOMEM;

    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        size_t k = 0;
        while (body_fields[k] && strcmp(body_fields[k], key) != 0)
            k++;
        if (body_fields[k])
            continue;
        char path[320];
        snprintf(path, sizeof path, "$.%.256s", key);
        bad = 1;
        if ((e = spec_errors_add(errs, path, "unknown field")) != TY_OK)
            goto out;
    }

    const char *name = json_string_value(json_object_get(body, "name"));
    if (name && strlen(name) <= SPEC_MAX_NAME && spec_is_dns_label(name, strlen(name))) {
        memcpy(d->name, name, strlen(name) + 1);
    } else {
        bad = 1;
        if ((e = spec_errors_add(errs, "$.name",
                                 "must be a DNS label: 1 to 63 characters of "
                                 "[a-z0-9-], alphanumeric at both ends")) != TY_OK)
            goto out;
    }

    e = sweep_space_parse(body, &d->space, errs);
    if (e == TY_EINVAL)
        bad = 1;
    else if (e != TY_OK)
        goto out;
    e = TY_OK;

    const json_t *par = json_object_get(body, "parallelism");
    if (!par) {
        d->parallelism = d->space ? (int)sweep_space_ntrials(d->space) : 1;
    } else if (json_is_integer(par) && json_integer_value(par) >= 1 &&
               json_integer_value(par) <= SWEEP_MAX_TRIALS) {
        d->parallelism = (int)json_integer_value(par);
    } else {
        bad = 1;
        if ((e = spec_errors_add(errs, "$.parallelism", "must be an integer between 1 and 1000")) !=
            TY_OK)
            goto out;
    }

    const json_t *obj = json_object_get(body, "objective");
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    const char *goal = json_string_value(json_object_get(obj, "goal"));
    if (!json_is_object(obj)) {
        bad = 1;
        e = spec_errors_add(errs, "$.objective", "must be an object {\"metric\", \"goal\"}");
    } else {
        json_object_foreach((json_t *)obj, key, v)
        {
            if (strcmp(key, "metric") == 0 || strcmp(key, "goal") == 0)
                continue;
            char path[320];
            snprintf(path, sizeof path, "$.objective.%.256s", key);
            bad = 1;
            if ((e = spec_errors_add(errs, path, "unknown field")) != TY_OK)
                goto out;
        }
        if (metric && is_metric_name(metric)) {
            memcpy(d->metric, metric, strlen(metric) + 1);
        } else {
            bad = 1;
            e = spec_errors_add(errs, "$.objective.metric",
                                "must be a metric name ([A-Za-z_][A-Za-z0-9_.:/-]{0,63})");
        }
        if (e == TY_OK && goal && (strcmp(goal, "minimize") == 0 || strcmp(goal, "maximize") == 0))
            d->maximize = goal[1] == 'a';
        else if (e == TY_OK) {
            bad = 1;
            e = spec_errors_add(errs, "$.objective.goal", "must be \"minimize\" or \"maximize\"");
        }
    }
    if (e != TY_OK)
        goto out;

    const json_t *tmpl = json_object_get(body, "template");
    if (!json_is_object(tmpl)) {
        bad = 1;
        e = spec_errors_add(errs, "$.template", "must be a job spec (an object)");
        goto out;
    }
    d->tmpl = json_incref((json_t *)tmpl);
    if (!d->space)
        goto out; /* no trials to build: the space's errors are listed */
    e = sweep_space_check_template(d->space, tmpl, errs);
    if (e == TY_EINVAL) {
        bad = 1;
        e = TY_OK;
        goto out;
    }
    if (e != TY_OK)
        goto out;
    e = check_trials(d, limits, errs);
    if (e == TY_EINVAL) {
        bad = 1;
        e = TY_OK;
    }

out:
    if (e == TY_OK && bad)
        e = TY_EINVAL;
    if (e != TY_OK) {
        sweep_def_free(d);
        return e;
    }
    *out = d;
    return TY_OK;
}

ty_err sweep_trial_spec(const sweep_def *d, const char *sweep_id, size_t i, json_t **spec,
                        json_t **params)
{
    json_t *p = NULL, *in = NULL, *res = NULL;
    spec_errors errs = {0};
    ty_err e = sweep_space_trial(d->space, i, &p);
    if (e == TY_OK)
        e = sweep_substitute(d->tmpl, p, &in);
    if (e == TY_OK)
        e = spec_errors_init(&errs);
    /* sweep_parse_limited() measured the trials against the backend's limits already. */
    if (e == TY_OK)
        e = trial_spec(in, sweep_id, i, p, NULL, &errs, &res);
    spec_errors_free(&errs);
    json_decref(in);
    if (e != TY_OK) {
        json_decref(p);
        return e;
    }
    *spec = res;
    if (params)
        *params = p;
    else
        json_decref(p);
    return TY_OK;
}
