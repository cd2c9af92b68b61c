/*
 * retention.h - the background purge of what the server keeps only for a while: the metrics
 * of jobs that ended long ago, and the notification deliveries that finished long ago.
 *
 * One thread wakes every interval and asks the store to delete what is past its retention
 * (store_metrics_purge, store_notify_purge), batch_rows rows per writer operation until
 * nothing is left. Each batch is an ordinary operation of the store's one writer, queued
 * behind whatever is queued already, so a large purge never holds the writer for long: the
 * submissions and reports queued meanwhile commit between its batches. Deleting is
 * idempotent and each batch commits whole, so a kill -9 mid-purge loses nothing: the next
 * run goes on where the last commit left it.
 *
 * Threads: retention_render_metrics() may be called from any thread while the purger runs;
 * retention_start() and retention_stop() from one thread.
 */
#ifndef TY_SERVER_RETENTION_H
#define TY_SERVER_RETENTION_H

#include <stdint.h>

#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "store/store.h"

typedef struct retention retention;

typedef struct retention_options {
    store *store;           /* borrowed; outlives the purger */
    int64_t metrics_ms;     /* a job's metrics are kept this long after it ended; 0: forever */
    int64_t deliveries_ms;  /* a delivered or failed delivery, this long after its last
                               attempt; 0: forever */
    int64_t interval_ms;    /* between two passes; default 60000 */
    int batch_rows;         /* rows deleted by one writer operation; default 1000 */
} retention_options;

/* Starts the thread (zero fields of interval and batch take their defaults); its first pass
 * runs at once. With both retentions 0 no thread is started. *out is new; stop it with
 * retention_stop(). */
ty_err retention_start(const retention_options *opt, retention **out, char *err, size_t errlen);
/* Stops the thread after the batch in flight, if any, and frees r. Accepts NULL. */
void retention_stop(retention *r);
/* Appends the counters trainyard_retention_metric_points_deleted_total and
 * trainyard_retention_deliveries_deleted_total. */
ty_err retention_render_metrics(retention *r, ty_buf *out);

#endif
