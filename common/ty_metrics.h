/*
 * ty_metrics.h - Prometheus-style counters and histograms, safe across threads.
 *
 * Components own their metric objects (the store its commit histograms, the
 * server its request counters); api/ renders them in the Prometheus text
 * exposition format (version 0.0.4) with the ty_metrics_render_* functions.
 */
#ifndef TY_METRICS_H
#define TY_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_buf.h"

#define TY_HIST_MAX_BOUNDS 24

/* A histogram with fixed upper bounds (ascending; +Inf is implicit). */
typedef struct ty_histogram {
    pthread_mutex_t mu;
    size_t nbounds;
    double bounds[TY_HIST_MAX_BOUNDS];
    uint64_t counts[TY_HIST_MAX_BOUNDS + 1]; /* per bucket, not cumulative */
    uint64_t count;
    double sum;
} ty_histogram;

void ty_histogram_init(ty_histogram *h, const double *bounds, size_t nbounds);
void ty_histogram_destroy(ty_histogram *h);
void ty_histogram_observe(ty_histogram *h, double value);

/* Bounds in seconds for latencies from 100 us to 10 s. */
extern const double ty_latency_bounds[];
extern const size_t ty_latency_nbounds;

/* A counter family keyed by up to two label values, e.g. requests{route,code}. */
typedef struct ty_counter_entry {
    char *label1, *label2;
    uint64_t value;
} ty_counter_entry;

typedef struct ty_counter_vec {
    pthread_mutex_t mu;
    ty_counter_entry *entries;
    size_t n, cap;
} ty_counter_vec;

void ty_counter_vec_init(ty_counter_vec *v);
void ty_counter_vec_destroy(ty_counter_vec *v);
/* Adds delta to the series (label1, label2); label2 may be NULL. Allocation failures drop the sample. */
void ty_counter_vec_add(ty_counter_vec *v, const char *label1, const char *label2, uint64_t delta);

/*
 * Rendering. `name` is the metric name, `labels` a pre-rendered label list
 * without braces (e.g. `route="/v1/jobs"`) or NULL. HELP/TYPE lines are written
 * by ty_metrics_render_header(), once per family.
 */
ty_err ty_metrics_render_header(ty_buf *out, const char *name, const char *type, const char *help);
ty_err ty_metrics_render_histogram(ty_buf *out, const char *name, const char *labels, ty_histogram *h);
ty_err ty_metrics_render_counter_vec(ty_buf *out, const char *name, const char *label1_name,
                                     const char *label2_name, ty_counter_vec *v);

#endif
