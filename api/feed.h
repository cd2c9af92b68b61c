/*
 * feed.h - the fan-out behind the live event streams (GET /v1/events and
 * GET /v1/jobs/{id}/events?follow=true).
 *
 * One writer side and many followers. The store's writer calls
 * api_feed_notify() after each commit that wrote job events (server/ chains it
 * behind the scheduler's change hook) and api_feed_notify_metrics() after each
 * commit of metric points (the store's metrics hook). A notify only increments
 * a generation counter and broadcasts a condition variable, so it is quick and
 * never touches the store. Metric points have their own counter, so that a
 * stream of job events only (GET /v1/events) is not woken by them. Each follower runs on
 * its own connection's thread and keeps its own cursor in the change feed: it
 * notes the generation, reads the feed after its cursor, and when it has
 * caught up waits until the generation moves on. A follower never holds the
 * feed's lock while it reads the store or writes to its client, so a slow
 * follower delays nobody, and since the cursor, not the wake-up, says what to
 * send, a wake-up merged with others or missed during a read loses nothing.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef TY_API_FEED_H
#define TY_API_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "store/store.h"

typedef struct api_feed api_feed;

/* A new feed with no follower. TY_ENOMEM, TY_EINTERNAL (no clock for the condition). */
ty_err api_feed_new(api_feed **out);
/* Frees the feed; every follower must have ended. Accepts NULL. */
void api_feed_free(api_feed *f);

/* Job events were committed: wakes every waiting follower. Quick; accepts NULL. */
void api_feed_notify(api_feed *f);
/* Metric points were committed: wakes the followers that wait for them. Quick; accepts NULL. */
void api_feed_notify_metrics(api_feed *f);
/* The server is stopping: every wait returns API_FEED_CLOSED at once, now and later, and
 * the streams end. Accepts NULL. */
void api_feed_shutdown(api_feed *f);

/* The generations: each increases with every notify of its kind. */
typedef struct api_feed_gen {
    uint64_t events;
    uint64_t metrics;
} api_feed_gen;

/* The generations now. Note them before reading the store. */
api_feed_gen api_feed_generation(api_feed *f);

enum {
    API_FEED_CHANGED = 0, /* a generation waited for differs from the one seen */
    API_FEED_TIMEOUT = 1, /* the deadline passed */
    API_FEED_CLOSED = 2,  /* api_feed_shutdown() was called */
};

/*
 * Waits until the events generation differs from seen's (or, with metrics set,
 * the metrics generation does), the monotonic clock (ty_time_mono_ns())
 * reaches deadline_ns, or the feed is shut down; returns which. Returns at
 * once when one of them already holds.
 */
int api_feed_wait(api_feed *f, api_feed_gen seen, int metrics, uint64_t deadline_ns);

/* ---- the shared window of the change feed ---------------------------------------------- */

/*
 * Followers of every job's events (GET /v1/events) read the change feed
 * through a window the feed keeps: the newest events (up to
 * API_FEED_WINDOW), each formatted once. A follower whose cursor lies in the
 * window copies from it; the first one past its end reads the store for
 * everyone (the others wait for that read rather than repeat it), so a commit
 * costs one store read and one formatting however many follow. A follower
 * behind the window reads the store for itself. Each still has its own
 * cursor, and what it is sent depends only on it.
 */
#define API_FEED_WINDOW 8192

/* One event of the window; borrowed for the duration of a visit. */
typedef struct api_feed_item {
    int64_t seq;
    job_state to;
    const char *queue;
    const char *labels_json;     /* the job's labels, compact JSON (store_feed_event) */
    const char *text;            /* "event: job\ndata: {...}\n\n", without the id line */
    size_t len;
    const char *team;            /* the job's team: each follower keeps its own team's */
} api_feed_item;

/* Called for each item under the feed's lock: quick, no store and no I/O. */
typedef ty_err (*api_feed_visit)(void *ud, const api_feed_item *item);

/*
 * Visits the events with seq > after, oldest first, at most limit (1..1000),
 * reading the store s when the window does not hold them. `seen` is the
 * events generation the caller noted before the call: every event committed
 * (and notified) before it is visited by this call or the next ones that
 * *more asks for. *last is the seq of the last event visited (after when
 * none); *more is set when more may follow at once. An error of the store or
 * of visit() is returned.
 */
ty_err api_feed_read(api_feed *f, store *s, uint64_t seen, int64_t after, int limit,
                     api_feed_visit visit, void *ud, int64_t *last, int *more);

/* Appends the event lines of one `job` event, "event: job\ndata: {...}\n\n", the data on one
 * line (the StreamJobEvent of openapi.yaml). */
ty_err api_feed_put_event(ty_buf *b, const store_feed_event *ev);

/* The streams following the feed now, for /metrics. */
long api_feed_followers(api_feed *f);
/* A stream begins (+1) or ends (-1) following the feed. */
void api_feed_follow(api_feed *f, int delta);

#endif
