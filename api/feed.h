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

#include <stdint.h>

#include "common/ty_error.h"

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

/* The streams following the feed now, for /metrics. */
long api_feed_followers(api_feed *f);
/* A stream begins (+1) or ends (-1) following the feed. */
void api_feed_follow(api_feed *f, int delta);

#endif
