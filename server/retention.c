/*
 * retention.c - the purge thread (see retention.h for the contract).
 *
 * A pass computes its cutoffs from the wall clock once, then deletes batch by batch until
 * the store says nothing is left, checking for stop between batches. A store error ends the
 * pass (logged); the next interval tries again. The thread sleeps on a condition variable
 * between passes, so stopping it never waits for the interval.
 */
#include "server/retention.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ty_log.h"
#include "common/ty_metrics.h"
#include "common/ty_time.h"
#include "common/ty_thread.h"

#define DEFAULT_INTERVAL_MS 60000
#define DEFAULT_BATCH_ROWS 1000

struct retention {
    retention_options opt;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    atomic_int stop;
    atomic_ullong points, deliveries; /* rows deleted since the start */
};

typedef ty_err (*purge_fn)(store *s, int64_t before_ms, int max_rows, int64_t *rows, int *more);

/* Deletes what purge finds before before_ms, a batch per writer operation; *total counts the
 * rows. Stops early when the purger is stopped. */
static ty_err purge_all(retention *r, purge_fn purge, int64_t before_ms, atomic_ullong *counter,
                        int64_t *total)
{
    int more = 1;
    ty_err e = TY_OK;
    *total = 0;
    while (more && !atomic_load(&r->stop)) {
        int64_t rows = 0;
        if ((e = purge(r->opt.store, before_ms, r->opt.batch_rows, &rows, &more)) != TY_OK)
            break;
        *total += rows;
        atomic_fetch_add(counter, (unsigned long long)rows);
    }
    return e;
}

static void pass(retention *r)
{
    int64_t now = ty_time_now_ms(), n = 0;
    if (r->opt.metrics_ms > 0) {
        ty_err e = purge_all(r, store_metrics_purge, now - r->opt.metrics_ms, &r->points, &n);
        if (e)
            TY_LOG(TY_LOG_WARN, "retention: purging old jobs' metrics failed", "{s:s, s:I}",
                   "error", ty_strerror(e), "points_deleted", (json_int_t)n);
        else if (n > 0)
            TY_LOG(TY_LOG_INFO, "retention: old jobs' metrics deleted", "{s:I}",
                   "points_deleted", (json_int_t)n);
    }
    if (r->opt.deliveries_ms > 0 && !atomic_load(&r->stop)) {
        ty_err e =
            purge_all(r, store_notify_purge, now - r->opt.deliveries_ms, &r->deliveries, &n);
        if (e)
            TY_LOG(TY_LOG_WARN, "retention: purging finished deliveries failed", "{s:s, s:I}",
                   "error", ty_strerror(e), "deliveries_deleted", (json_int_t)n);
        else if (n > 0)
            TY_LOG(TY_LOG_INFO, "retention: finished deliveries deleted", "{s:I}",
                   "deliveries_deleted", (json_int_t)n);
    }
}

static void *run(void *arg)
{
    ty_thread_name("ty-retention");
    retention *r = arg;
    while (!atomic_load(&r->stop)) {
        pass(r);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(r->opt.interval_ms / 1000);
        ts.tv_nsec += (long)(r->opt.interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&r->mu);
        while (!atomic_load(&r->stop) &&
               pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

ty_err retention_start(const retention_options *opt, retention **out, char *err, size_t errlen)
{
    ty_err e = TY_OK;
    retention *r = NULL;
    int mu = 0, cv = 0;
    if (!opt || !opt->store || !out || opt->metrics_ms < 0 || opt->deliveries_ms < 0 ||
        opt->interval_ms < 0 || opt->batch_rows < 0 || opt->batch_rows > 100000) {
        snprintf(err, errlen, "retention: invalid options");
        return TY_EINVAL;
    }
    if (!(r = calloc(1, sizeof *r))) {
        e = TY_ENOMEM;
        goto out;
    }
    r->opt = *opt;
    if (r->opt.interval_ms == 0)
        r->opt.interval_ms = DEFAULT_INTERVAL_MS;
    if (r->opt.batch_rows == 0)
        r->opt.batch_rows = DEFAULT_BATCH_ROWS;
    if (r->opt.metrics_ms == 0 && r->opt.deliveries_ms == 0)
        goto out; /* everything is kept forever: nothing to run */
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    cv = ok && pthread_cond_init(&r->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    mu = cv && pthread_mutex_init(&r->mu, NULL) == 0;
    if (!mu) {
        snprintf(err, errlen, "retention: cannot create the thread's condition");
        e = TY_EINTERNAL;
        goto out;
    }
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
        snprintf(err, errlen, "retention: cannot start the thread: %s", strerror(errno));
        e = TY_EINTERNAL;
        goto out;
    }
    r->started = 1;
    TY_LOG(TY_LOG_INFO, "retention: purging in the background", "{s:I, s:I}", "metrics_ms",
           (json_int_t)r->opt.metrics_ms, "deliveries_ms", (json_int_t)r->opt.deliveries_ms);
out:
    if (e != TY_OK) {
        if (mu)
            pthread_mutex_destroy(&r->mu);
        if (cv)
            pthread_cond_destroy(&r->cv);
        free(r);
        r = NULL;
    }
    if (out)
        *out = r;
    return e;
}

void retention_stop(retention *r)
{
    if (!r)
        return;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        atomic_store(&r->stop, 1);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    free(r);
}

ty_err retention_render_metrics(retention *r, ty_buf *out)
{
    static const char *const names[2] = {"trainyard_retention_metric_points_deleted_total",
                                         "trainyard_retention_deliveries_deleted_total"};
    static const char *const helps[2] = {
        "Metric points of jobs ended past --metrics-retention deleted by the purge.",
        "Finished notification deliveries past --delivery-retention deleted by the purge."};
    unsigned long long v[2] = {r ? atomic_load(&r->points) : 0ULL,
                               r ? atomic_load(&r->deliveries) : 0ULL};
    ty_err e = TY_OK;
    for (size_t i = 0; !e && i < 2; i++) {
        e = ty_metrics_render_header(out, names[i], "counter", helps[i]);
        if (!e)
            e = ty_buf_printf(out, "%s %llu\n", names[i], v[i]);
    }
    return e;
}
