/*
 * sweep_space.c - parameters of a sweep, the trials they yield and the
 * substitution of a trial into its job template (see sweep_space.h).
 *
 * Invariant: a parsed space is valid - every list has 1..SWEEP_MAX_TRIALS
 * values, every range is ordered, ntrials is 1..SWEEP_MAX_TRIALS - so
 * sweep_space_trial() cannot fail on input, only on memory.
 */
#include "api/sweep_space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_buf.h"

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL

typedef enum param_kind { P_LIST, P_UNIFORM, P_LOG_UNIFORM, P_INT } param_kind;

typedef struct param {
    char name[SWEEP_MAX_PARAM_NAME + 1];
    param_kind kind;
    json_t *values;   /* P_LIST: owned array of scalars (grid values or choices) */
    double lo, hi;    /* P_UNIFORM, P_LOG_UNIFORM */
    int64_t ilo, ihi; /* P_INT, both included */
} param;

struct sweep_space {
    int random;
    uint64_t seed;
    size_t ntrials;
    size_t nparams;
    param p[SWEEP_MAX_PARAMS]; /* sorted by name */
};

uint64_t sweep_splitmix64(uint64_t state)
{
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void sweep_space_free(sweep_space *sp)
{
    if (!sp)
        return;
    for (size_t i = 0; i < sp->nparams; i++)
        json_decref(sp->p[i].values);
    free(sp);
}

size_t sweep_space_ntrials(const sweep_space *sp)
{
    return sp->ntrials;
}

/* ---- parsing ------------------------------------------------------------- */

static int is_param_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SWEEP_MAX_PARAM_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int is_scalar(const json_t *v)
{
    return json_is_string(v) || json_is_number(v) || json_is_boolean(v);
}

/* Records an error at prefix + suffix (suffix may be ""). */
static ty_err add_at(spec_errors *errs, const char *prefix, const char *suffix, const char *msg)
{
    char path[256];
    snprintf(path, sizeof path, "%s%s", prefix, suffix);
    return spec_errors_add(errs, path, msg);
}

/* A list of 1..SWEEP_MAX_TRIALS scalars at `path`; *bad set when it is not. */
static ty_err check_list(const json_t *v, const char *path, spec_errors *errs, int *bad)
{
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > SWEEP_MAX_TRIALS) {
        *bad = 1;
        return add_at(errs, path, "", "must be an array of 1 to 1000 values");
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        if (is_scalar(json_array_get(v, i)))
            continue;
        char sub[32];
        snprintf(sub, sizeof sub, "[%zu]", i);
        *bad = 1;
        ty_err e = add_at(errs, path, sub, "must be a string, a number or a boolean");
        if (e != TY_OK)
            return e;
    }
    return TY_OK;
}

/* Two numbers [lo, hi] with lo <= hi (and 0 < lo when positive). */
static int read_range(const json_t *v, int positive, double *lo, double *hi)
{
    if (!json_is_array(v) || json_array_size(v) != 2)
        return 0;
    const json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (!json_is_number(a) || !json_is_number(b))
        return 0;
    *lo = json_number_value(a);
    *hi = json_number_value(b);
    if (!isfinite(*lo) || !isfinite(*hi) || *lo > *hi)
        return 0;
    return !positive || *lo > 0;
}

/* One random parameter {"choice"|"uniform"|"log_uniform"|"int": ...} at `path`. */
static ty_err parse_random_param(const json_t *v, const char *path, param *p, spec_errors *errs,
                                 int *bad)
{
    const char *key = NULL;
    const json_t *arg = NULL;
    if (json_is_object(v) && json_object_size(v) == 1) {
        void *it = json_object_iter((json_t *)v);
        key = json_object_iter_key(it);
        arg = json_object_iter_value(it);
    }
    if (!key) {
        *bad = 1;
        return add_at(errs, path, "",
                      "must be one of {\"choice\"}, {\"uniform\"}, "
                      "{\"log_uniform\"} or {\"int\"}");
    }
    char sub[256];
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    if (strcmp(key, "choice") == 0) {
        p->kind = P_LIST;
        p->values = json_incref((json_t *)arg);
        return check_list(arg, sub, errs, bad);
    }
    if (strcmp(key, "uniform") == 0 || strcmp(key, "log_uniform") == 0) {
        int log = key[0] == 'l';
        p->kind = log ? P_LOG_UNIFORM : P_UNIFORM;
        if (read_range(arg, log, &p->lo, &p->hi))
            return TY_OK;
        *bad = 1;
        return add_at(errs, sub, "",
                      log ? "must be [low, high] with 0 < low <= high"
                          : "must be [low, high] with low <= high");
    }
    if (strcmp(key, "int") == 0) {
        p->kind = P_INT;
        const json_t *a = json_array_get(arg, 0), *b = json_array_get(arg, 1);
        if (json_is_array(arg) && json_array_size(arg) == 2 && json_is_integer(a) &&
            json_is_integer(b) && json_integer_value(a) <= json_integer_value(b)) {
            p->ilo = json_integer_value(a);
            p->ihi = json_integer_value(b);
            return TY_OK;
        }
        *bad = 1;
        return add_at(errs, sub, "", "must be [low, high], integers with low <= high");
    }
    *bad = 1;
    return add_at(errs, path, "",
                  "must be one of {\"choice\"}, {\"uniform\"}, "
                  "{\"log_uniform\"} or {\"int\"}");
}

static int param_cmp(const void *a, const void *b)
{
    return strcmp(((const param *)a)->name, ((const param *)b)->name);
}

/* An integer member in [lo, hi] or absent; *bad set (and an error added) otherwise. */
static ty_err int_member(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *val,
                         int *present, spec_errors *errs, int *bad)
{
    const json_t *v = json_object_get(body, key);
    *present = v != NULL;
    if (!v)
        return TY_OK;
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi) {
        *val = json_integer_value(v);
        return TY_OK;
    }
    char path[64], msg[96];
    snprintf(path, sizeof path, "$.%s", key);
    snprintf(msg, sizeof msg, "must be an integer between %lld and %lld", (long long)lo,
             (long long)hi);
    *bad = 1;
    return spec_errors_add(errs, path, msg);
}

ty_err sweep_space_parse(const json_t *body, sweep_space **out, spec_errors *errs)
{
    ty_err e = TY_OK;
    int bad = 0;
    sweep_space *sp = calloc(1, sizeof *sp);
    if (!sp)
        return TY_ENOMEM;

    const char *alg = json_string_value(json_object_get(body, "algorithm"));
    if (alg && strcmp(alg, "random") == 0) {
        sp->random = 1;
    } else if (!alg || strcmp(alg, "grid") != 0) {
        bad = 1;
        if ((e = spec_errors_add(errs, "$.algorithm", "must be \"grid\" or \"random\"")) != TY_OK)
            goto out;
    }

    int64_t trials = 0, seed = 0;
    int has_trials = 0, has_seed = 0;
    e = int_member(body, "trials", 1, SWEEP_MAX_TRIALS, &trials, &has_trials, errs, &bad);
    if (e == TY_OK)
        e = int_member(body, "seed", 0, INT64_MAX, &seed, &has_seed, errs, &bad);
    if (e != TY_OK)
        goto out;
    int grid = alg && strcmp(alg, "grid") == 0;
    if (grid && (has_trials || has_seed)) {
        bad = 1;
        e = spec_errors_add(errs, has_trials ? "$.trials" : "$.seed",
                            "only for algorithm \"random\"");
    } else if (sp->random && !json_object_get(body, "trials")) {
        bad = 1;
        e = spec_errors_add(errs, "$.trials", "required for algorithm \"random\"");
    }
    if (e != TY_OK)
        goto out;
    sp->seed = (uint64_t)seed;

    const json_t *params = json_object_get(body, "parameters");
    if (!json_is_object(params) || json_object_size(params) == 0 ||
        json_object_size(params) > SWEEP_MAX_PARAMS) {
        bad = 1;
        e = spec_errors_add(errs, "$.parameters", "must be an object of 1 to 32 parameters");
        goto out;
    }
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)params, name, v)
    {
        if (!is_param_name(name)) {
            bad = 1;
            if ((e = spec_errors_add(errs, "$.parameters",
                                     "parameter names are 1 to 63 letters, digits or _, "
                                     "not starting with a digit")) != TY_OK)
                goto out;
            continue;
        }
        param *p = &sp->p[sp->nparams++];
        memcpy(p->name, name, strlen(name) + 1);
        char path[128];
        snprintf(path, sizeof path, "$.parameters.%s", name);
        if (sp->random) {
            e = parse_random_param(v, path, p, errs, &bad);
        } else {
            p->kind = P_LIST;
            p->values = json_incref((json_t *)v);
            e = check_list(v, path, errs, &bad);
        }
        if (e != TY_OK)
            goto out;
    }
    if (bad)
        goto out;
    qsort(sp->p, sp->nparams, sizeof sp->p[0], param_cmp);

    if (sp->random) {
        sp->ntrials = (size_t)trials;
    } else {
        sp->ntrials = 1;
        for (size_t i = 0; i < sp->nparams; i++) {
            sp->ntrials *= json_array_size(sp->p[i].values); /* each <= 1000: no overflow */
            if (sp->ntrials > SWEEP_MAX_TRIALS) {
                bad = 1;
                e = spec_errors_add(errs, "$.parameters", "the grid has more than 1000 trials");
                goto out;
            }
        }
    }

out:
    if (e == TY_OK && bad)
        e = TY_EINVAL;
    if (e != TY_OK) {
        sweep_space_free(sp);
        return e;
    }
    *out = sp;
    return TY_OK;
}

/* ---- trials -------------------------------------------------------------- */

static json_t *draw(const sweep_space *sp, size_t trial, size_t j)
{
    const param *p = &sp->p[j];
    uint64_t k = (uint64_t)trial * sp->nparams + j + 1;
    uint64_t r = sweep_splitmix64(sp->seed + k * GOLDEN_GAMMA);
    double u = (double)(r >> 11) * 0x1.0p-53;
    switch (p->kind) {
    case P_LIST:
        return json_incref(json_array_get(p->values, r % json_array_size(p->values)));
    case P_UNIFORM:
        /* Not lo + u * (hi - lo): hi - lo overflows to infinity for [-1e308, 1e308]. */
        return json_real(p->lo * (1 - u) + p->hi * u);
    case P_LOG_UNIFORM:
        return json_real(exp(log(p->lo) + u * (log(p->hi) - log(p->lo))));
    case P_INT: {
        uint64_t width = (uint64_t)p->ihi - (uint64_t)p->ilo + 1; /* 0: the whole int64 range */
        uint64_t off = width ? r % width : r;
        return json_integer((json_int_t)((uint64_t)p->ilo + off));
    }
    }
    return NULL;
}

ty_err sweep_space_trial(const sweep_space *sp, size_t i, json_t **out)
{
    if (i >= sp->ntrials)
        return TY_EINVAL;
    json_t *o = json_object();
    if (!o)
        return TY_ENOMEM;
    size_t rest = i;
    /* Grid: the last parameter varies fastest, so walk the names backwards. */
    for (size_t n = sp->nparams; n-- > 0;) {
        json_t *v;
        if (sp->random) {
            v = draw(sp, i, n);
        } else {
            size_t len = json_array_size(sp->p[n].values);
            v = json_incref(json_array_get(sp->p[n].values, rest % len));
            rest /= len;
        }
        if (!v || json_object_set_new(o, sp->p[n].name, v) != 0) {
            json_decref(o);
            return TY_ENOMEM;
        }
    }
    *out = o;
    return TY_OK;
}

/* ---- placeholders -------------------------------------------------------- */

ty_err sweep_value_text(const json_t *v, char *buf, size_t len)
{
    int n;
    if (json_is_string(v)) {
        n = snprintf(buf, len, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        n = snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        n = snprintf(buf, len, "%.15g", d);
        if (n >= 0 && (size_t)n < len && strtod(buf, NULL) != d)
            n = snprintf(buf, len, "%.17g", d);
    } else if (json_is_boolean(v)) {
        n = snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
    } else {
        return TY_EINVAL;
    }
    return n >= 0 && (size_t)n < len ? TY_OK : TY_ETOOLARGE;
}

/*
 * Walks the placeholders of s. With out set, appends s with each replaced by its value in
 * params and fails TY_EINVAL on an unknown name; without, stores the first unknown name in
 * unknown (empty when none).
 */
static ty_err expand(const char *s, const json_t *params, ty_buf *out, char *unknown,
                     size_t unknown_len)
{
    if (unknown)
        unknown[0] = '\0';
    for (;;) {
        const char *open = strstr(s, "${");
        const char *close = open ? strchr(open + 2, '}') : NULL;
        if (!close) {
            return out ? ty_buf_puts(out, s) : TY_OK;
        }
        size_t nlen = (size_t)(close - open - 2);
        char name[SWEEP_MAX_PARAM_NAME + 1];
        const json_t *v = NULL;
        if (nlen <= SWEEP_MAX_PARAM_NAME) {
            memcpy(name, open + 2, nlen);
            name[nlen] = '\0';
            v = json_object_get(params, name);
        }
        if (!v) {
            if (!out) {
                snprintf(unknown, unknown_len, "%.*s", (int)(nlen > 64 ? 64 : nlen), open + 2);
                return TY_OK;
            }
            return TY_EINVAL;
        }
        if (out) {
            char text[64]; /* numbers and booleans; strings go in whole */
            ty_err e = ty_buf_append(out, s, (size_t)(open - s));
            if (e == TY_OK && json_is_string(v))
                e = ty_buf_append(out, json_string_value(v), json_string_length(v));
            else if (e == TY_OK && (e = sweep_value_text(v, text, sizeof text)) == TY_OK)
                e = ty_buf_puts(out, text);
            if (e != TY_OK)
                return e;
        }
        s = close + 1;
    }
}

static ty_err check_string(const json_t *names, const json_t *v, const char *path,
                           spec_errors *errs, int *bad)
{
    char unknown[72];
    if (!json_is_string(v))
        return TY_OK; /* the job spec's validation reports it */
    expand(json_string_value(v), names, NULL, unknown, sizeof unknown);
    if (!unknown[0] && !strstr(json_string_value(v), "${}"))
        return TY_OK;
    char msg[128];
    snprintf(msg, sizeof msg, "${%s} names no parameter of the sweep", unknown);
    *bad = 1;
    return spec_errors_add(errs, path, msg);
}

ty_err sweep_space_check_template(const sweep_space *sp, const json_t *tmpl, spec_errors *errs)
{
    ty_err e = TY_OK;
    int bad = 0;
    json_t *names = json_object(); /* parameter name -> true, the shape expand() looks up */
    if (!names)
        return TY_ENOMEM;
    for (size_t i = 0; i < sp->nparams; i++)
        if (json_object_set_new(names, sp->p[i].name, json_true()) != 0) {
            e = TY_ENOMEM;
            goto out;
        }
    const json_t *args = json_object_get(tmpl, "args");
    for (size_t i = 0; e == TY_OK && json_is_array(args) && i < json_array_size(args); i++) {
        char path[64];
        snprintf(path, sizeof path, "$.template.args[%zu]", i);
        e = check_string(names, json_array_get(args, i), path, errs, &bad);
    }
    const json_t *env = json_object_get(tmpl, "env");
    const char *key;
    const json_t *v;
    if (json_is_object(env)) {
        json_object_foreach((json_t *)env, key, v)
        {
            if (e != TY_OK)
                break;
            char path[320];
            snprintf(path, sizeof path, "$.template.env.%.256s", key);
            e = check_string(names, v, path, errs, &bad);
        }
    }
out:
    json_decref(names);
    return e == TY_OK && bad ? TY_EINVAL : e;
}

static ty_err subst_string(json_t *holder_value, const json_t *params, json_t **repl)
{
    ty_buf b;
    ty_buf_init(&b, SWEEP_MAX_VALUE_BYTES); /* "${v}" a thousand times must not explode */
    ty_err e = expand(json_string_value(holder_value), params, &b, NULL, 0);
    if (e == TY_OK) {
        *repl = json_stringn(b.data ? b.data : "", b.len);
        if (!*repl)
            e = TY_ENOMEM;
    }
    ty_buf_free(&b);
    return e;
}

ty_err sweep_substitute(const json_t *tmpl, const json_t *params, json_t **out)
{
    ty_err e = TY_OK;
    json_t *copy = json_deep_copy(tmpl);
    if (!copy)
        return TY_ENOMEM;
    json_t *args = json_object_get(copy, "args");
    for (size_t i = 0; json_is_array(args) && i < json_array_size(args); i++) {
        json_t *v = json_array_get(args, i), *repl = NULL;
        if (!json_is_string(v))
            continue;
        if ((e = subst_string(v, params, &repl)) != TY_OK)
            goto out;
        json_array_set_new(args, i, repl);
    }
    json_t *env = json_object_get(copy, "env");
    const char *key;
    json_t *v;
    if (json_is_object(env)) {
        json_object_foreach(env, key, v)
        {
            json_t *repl = NULL;
            if (!json_is_string(v))
                continue;
            if ((e = subst_string(v, params, &repl)) != TY_OK)
                goto out;
            json_object_set_new(env, key, repl);
        }
    }
out:
    if (e != TY_OK) {
        json_decref(copy);
        return e;
    }
    *out = copy;
    return TY_OK;
}
