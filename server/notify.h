/*
 * notify.h - notifications out: the thread that sends the store's outbox.
 *
 * When a job ends, the store queues one delivery per matching subscription in the same
 * transaction (store.h, "notifications"). This thread takes the due rows, POSTs each as JSON
 * to its subscription's URL and records the outcome through the store's writer:
 *
 *   body       {"event", "delivery", "job": {id, name, queue, state, reason, message, labels,
 *              created_at, finished_at}}, built from the store at each attempt
 *   headers    X-Trainyard-Event: job.succeeded | job.failed | job.cancelled
 *              X-Trainyard-Delivery: <the outbox row's id> (the same on every attempt)
 *              X-Trainyard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
 *   success    a 2xx answer; the row is then marked delivered
 *   otherwise  retried after backoff_ms doubling per attempt up to backoff_max_ms, each delay
 *              drawn uniformly from its upper half (jitter), until max_attempts attempts or
 *              max_age_ms since the job ended; then the row is marked failed
 *
 * Requests have a connect and a total timeout, follow no redirect, speak only http and https,
 * use no proxy (whatever the environment says), and read at most 64 KiB of a response (then
 * stop reading; the status still counts). Unless allow_private, every address libcurl is
 * about to connect to must be public (common/ty_addr.h): the URL was checked at registration,
 * but its name may resolve elsewhere now, so the check is made on the address connected to,
 * and an attempt refused by it fails with "address A is not public (loopback)" and is retried
 * as any failed attempt.
 *
 * Delivery is at least once. The row is marked after the 2xx, so a crash between the two
 * sends it once more after the restart, with the same X-Trainyard-Delivery for the receiver
 * to drop; a crash at any other point loses nothing and sends nothing twice, since the row is
 * committed with the job's end and stays pending until marked.
 *
 * Threads: notify_wake() and notify_render_metrics() may be called from any thread while the
 * notifier runs; notify_start() and notify_stop() from one thread.
 */
#ifndef TY_SERVER_NOTIFY_H
#define TY_SERVER_NOTIFY_H

#include <stdint.h>

#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "store/store.h"

typedef struct notify notify;

typedef struct notify_options {
    store *store;           /* borrowed; outlives the notifier */
    int connect_timeout_ms; /* default 5000 */
    int timeout_ms;         /* a whole attempt; default 10000 */
    int64_t backoff_ms;     /* the delay after the first failed attempt; default 1000 */
    int64_t backoff_max_ms; /* default 300000 (5 minutes) */
    int max_attempts;       /* default 20 */
    int64_t max_age_ms;     /* since the job ended; default 24 hours */
    int allow_private;      /* 1: connect to any address; 0 (default): public ones only */
} notify_options;

/* Starts the delivery thread (zero fields take their defaults). Pending rows left by an
 * earlier run are sent at once. *out is new; stop it with notify_stop(). */
ty_err notify_start(const notify_options *opt, notify **out, char *err, size_t errlen);
/* Tells the thread the outbox may have new rows: a store notify hook (store_set_notify_hook);
 * it only signals. */
void notify_wake(void *n);
/* Stops the thread (an attempt in flight is aborted and stays pending) and frees n. Accepts
 * NULL. */
void notify_stop(notify *n);
/* Appends the counters trainyard_notifications_{delivered,retried,failed}_total. */
ty_err notify_render_metrics(notify *n, ty_buf *out);

#endif
