#include "common/ty_metrics.h"

#include <stdlib.h>
#include <string.h>

const double ty_latency_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                    0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                    5,      10};
const size_t ty_latency_nbounds = sizeof ty_latency_bounds / sizeof ty_latency_bounds[0];

void ty_histogram_init(ty_histogram *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    if (nbounds > TY_HIST_MAX_BOUNDS)
        nbounds = TY_HIST_MAX_BOUNDS;
    h->nbounds = nbounds;
    memcpy(h->bounds, bounds, nbounds * sizeof *bounds);
}

void ty_histogram_destroy(ty_histogram *h)
{
    pthread_mutex_destroy(&h->mu);
}

void ty_histogram_observe(ty_histogram *h, double value)
{
    size_t i = 0;
    while (i < h->nbounds && value > h->bounds[i])
        i++;
    pthread_mutex_lock(&h->mu);
    h->counts[i]++;
    h->count++;
    h->sum += value;
    pthread_mutex_unlock(&h->mu);
}

void ty_counter_vec_init(ty_counter_vec *v)
{
    memset(v, 0, sizeof *v);
    pthread_mutex_init(&v->mu, NULL);
}

void ty_counter_vec_destroy(ty_counter_vec *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free(v->entries[i].label1);
        free(v->entries[i].label2);
    }
    free(v->entries);
    pthread_mutex_destroy(&v->mu);
}

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

void ty_counter_vec_add(ty_counter_vec *v, const char *label1, const char *label2, uint64_t delta)
{
    pthread_mutex_lock(&v->mu);
    for (size_t i = 0; i < v->n; i++) {
        if (same(v->entries[i].label1, label1) && same(v->entries[i].label2, label2)) {
            v->entries[i].value += delta;
            pthread_mutex_unlock(&v->mu);
            return;
        }
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        ty_counter_entry *e = realloc(v->entries, cap * sizeof *e);
        if (!e)
            goto out;
        v->entries = e;
        v->cap = cap;
    }
    ty_counter_entry *e = &v->entries[v->n];
    e->label1 = label1 ? strdup(label1) : NULL;
    e->label2 = label2 ? strdup(label2) : NULL;
    if ((label1 && !e->label1) || (label2 && !e->label2)) {
        free(e->label1);
        free(e->label2);
        goto out;
    }
    e->value = delta;
    v->n++;
out:
    pthread_mutex_unlock(&v->mu);
}

ty_err ty_metrics_render_header(ty_buf *out, const char *name, const char *type, const char *help)
{
    return ty_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prometheus label values escape backslash, double quote and newline. */
static ty_err put_label_value(ty_buf *out, const char *s)
{
    ty_err e = TY_OK;
    for (; *s && !e; s++) {
        if (*s == '\\' || *s == '"')
            e = ty_buf_printf(out, "\\%c", *s);
        else if (*s == '\n')
            e = ty_buf_puts(out, "\\n");
        else
            e = ty_buf_append(out, s, 1);
    }
    return e;
}

ty_err ty_metrics_render_histogram(ty_buf *out, const char *name, const char *labels, ty_histogram *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t counts[TY_HIST_MAX_BOUNDS + 1];
    memcpy(counts, h->counts, sizeof counts);
    uint64_t count = h->count;
    double sum = h->sum;
    pthread_mutex_unlock(&h->mu);

    const char *sep = labels && *labels ? "," : "";
    const char *l = labels ? labels : "";
    ty_err e = TY_OK;
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nbounds && !e; i++) {
        cum += counts[i];
        if (i < h->nbounds)
            e = ty_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, l, sep, h->bounds[i],
                              (unsigned long long)cum);
        else
            e = ty_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep,
                              (unsigned long long)cum);
    }
    if (!e)
        e = ty_buf_printf(out, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, l, sum, name, l,
                          (unsigned long long)count);
    return e;
}

ty_err ty_metrics_render_counter_vec(ty_buf *out, const char *name, const char *label1_name,
                                     const char *label2_name, ty_counter_vec *v)
{
    ty_err e = TY_OK;
    pthread_mutex_lock(&v->mu);
    for (size_t i = 0; i < v->n && !e; i++) {
        ty_counter_entry *c = &v->entries[i];
        e = ty_buf_printf(out, "%s{%s=\"", name, label1_name);
        if (!e)
            e = put_label_value(out, c->label1 ? c->label1 : "");
        if (!e && label2_name && c->label2) {
            e = ty_buf_printf(out, "\",%s=\"", label2_name);
            if (!e)
                e = put_label_value(out, c->label2);
        }
        if (!e)
            e = ty_buf_printf(out, "\"} %llu\n", (unsigned long long)c->value);
    }
    pthread_mutex_unlock(&v->mu);
    return e;
}
