/*
 * feed.c - the generation counters and condition variable of api/feed.h, and
 * the shared window of the change feed.
 *
 * The condition variables wait on the monotonic clock, so that a step of the
 * wall clock neither fires nor delays a follower's heartbeat.
 *
 * The window is a ring of the newest events read from the store, complete
 * from `base` (exclusive) to `top` (inclusive): the store numbers events in
 * commit order and a read returns a run without holes, so an event later
 * committed always lands after top. One follower at a time extends it
 * (`filling`); it reads and formats outside the lock, then appends. Items are
 * freed when the ring drops them, never while the lock is held by a visitor.
 */
#include "api/feed.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ty_json.h"
#include "common/ty_time.h"

/* Events read from the store at a time to extend the window. */
#define FILL_BATCH 256

typedef struct item {
    int64_t seq;
    job_state to;
    char *queue;
    char *labels_json;
    char *text;
    size_t len;
    char *team;
} item;

struct api_feed {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* broadcast on every notify and at shutdown */
    api_feed_gen gen;    /* mu */
    int closed;          /* mu */
    long followers;      /* mu */
    /* The window (mu). */
    item *ring;          /* API_FEED_WINDOW slots */
    size_t first, n;     /* the oldest item's slot; items held */
    int64_t base, top;   /* complete over (base, top]; base == top: empty */
    int valid;           /* base and top were set by a read */
    int at_head;         /* the last fill read to the store's head ... */
    uint64_t head_gen;   /* ... which then held every commit notified before this
                            events generation */
    int filling;         /* a follower is extending it */
    pthread_cond_t filled; /* broadcast when a fill ends */
};

ty_err api_feed_new(api_feed **out)
{
    api_feed *f = calloc(1, sizeof *f);
    pthread_condattr_t ca;
    if (!f)
        return TY_ENOMEM;
    if (pthread_condattr_init(&ca) != 0) {
        free(f);
        return TY_ENOMEM;
    }
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&f->cv, &ca);
    if (rc == 0 && (rc = pthread_cond_init(&f->filled, &ca)) != 0)
        pthread_cond_destroy(&f->cv);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(f);
        return TY_EINTERNAL;
    }
    if (!(f->ring = calloc(API_FEED_WINDOW, sizeof *f->ring))) {
        pthread_cond_destroy(&f->filled);
        pthread_cond_destroy(&f->cv);
        free(f);
        return TY_ENOMEM;
    }
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return TY_OK;
}

void api_feed_free(api_feed *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        item *it = &f->ring[(f->first + i) % API_FEED_WINDOW];
        free(it->queue);
        free(it->labels_json);
        free(it->text);
        free(it->team);
    }
    free(f->ring);
    pthread_cond_destroy(&f->filled);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void api_feed_notify(api_feed *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->gen.events++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void api_feed_notify_metrics(api_feed *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->gen.metrics++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void api_feed_shutdown(api_feed *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->closed = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

api_feed_gen api_feed_generation(api_feed *f)
{
    pthread_mutex_lock(&f->mu);
    api_feed_gen g = f->gen;
    pthread_mutex_unlock(&f->mu);
    return g;
}

/* Whether a generation waited for moved on; mu held. */
static int moved(const api_feed *f, api_feed_gen seen, int metrics)
{
    return f->gen.events != seen.events || (metrics && f->gen.metrics != seen.metrics);
}

int api_feed_wait(api_feed *f, api_feed_gen seen, int metrics, uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    int r = API_FEED_CHANGED;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        if (f->closed) {
            r = API_FEED_CLOSED;
            break;
        }
        if (moved(f, seen, metrics)) {
            r = API_FEED_CHANGED;
            break;
        }
        if (pthread_cond_timedwait(&f->cv, &f->mu, &ts) == ETIMEDOUT) {
            r = f->closed ? API_FEED_CLOSED
                : moved(f, seen, metrics) ? API_FEED_CHANGED
                                          : API_FEED_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return r;
}

long api_feed_followers(api_feed *f)
{
    if (!f)
        return 0;
    pthread_mutex_lock(&f->mu);
    long n = f->followers;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void api_feed_follow(api_feed *f, int delta)
{
    pthread_mutex_lock(&f->mu);
    f->followers += delta;
    pthread_mutex_unlock(&f->mu);
}

/* ---- the window ------------------------------------------------------------------------- */

ty_err api_feed_put_event(ty_buf *b, const store_feed_event *ev)
{
    char time[32];
    ty_time_format_rfc3339(ev->time_ms, time, sizeof time);
    const char *labels = ev->labels_json[0] == '{' ? ev->labels_json : "{}";
    ty_err e = ty_buf_printf(b, "event: job\ndata: {\"seq\":%lld,\"job_id\":\"%s\",\"name\":",
                             (long long)ev->seq, ev->id);
    if (!e)
        e = ty_json_put_string(b, ev->name, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"queue\":");
    if (!e)
        e = ty_json_put_string(b, ev->queue, SIZE_MAX);
    if (!e)
        e = ty_buf_printf(b, ",\"labels\":%s,\"from\":", labels);
    if (!e)
        e = ev->from == JOB_STATE_NONE ? ty_buf_puts(b, "null")
                                       : ty_buf_printf(b, "\"%s\"", job_state_name(ev->from));
    if (!e)
        e = ty_buf_printf(b, ",\"to\":\"%s\",\"time\":\"%s\",\"reason\":", job_state_name(ev->to),
                          time);
    if (!e)
        e = ty_json_put_string(b, ev->reason, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"message\":");
    if (!e)
        e = ty_json_put_string(b, ev->message, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, "}\n\n");
    return e;
}

static void item_clear(item *it)
{
    free(it->queue);
    free(it->labels_json);
    free(it->text);
    free(it->team);
    memset(it, 0, sizeof *it);
}

/* Formats n events into items (new; all or none). */
static ty_err make_items(const store_feed_event *ev, size_t n, item *out)
{
    ty_buf b = {0};
    ty_err e = TY_OK;
    size_t i;
    for (i = 0; i < n && !e; i++) {
        out[i] = (item){.seq = ev[i].seq, .to = ev[i].to};
        ty_buf_reset(&b);
        if ((e = api_feed_put_event(&b, &ev[i])))
            break;
        out[i].len = b.len;
        if (!(out[i].text = malloc(b.len + 1)) || !(out[i].queue = strdup(ev[i].queue)) ||
            !(out[i].labels_json = strdup(ev[i].labels_json)) ||
            !(out[i].team = strdup(ev[i].team ? ev[i].team : STORE_TEAM_DEFAULT))) {
            e = TY_ENOMEM;
            break;
        }
        memcpy(out[i].text, b.data, b.len + 1);
    }
    if (e)
        for (size_t k = 0; k <= i && k < n; k++)
            item_clear(&out[k]);
    ty_buf_free(&b);
    return e;
}

/* Appends n items after top (mu held); the oldest are dropped past the window's size. */
static void append_items(api_feed *f, item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (f->n == API_FEED_WINDOW) {
            item *old = &f->ring[f->first];
            f->base = old->seq;
            item_clear(old);
            f->first = (f->first + 1) % API_FEED_WINDOW;
            f->n--;
        }
        f->ring[(f->first + f->n) % API_FEED_WINDOW] = items[i];
        f->n++;
        f->top = items[i].seq;
    }
}

/* Visits the window's items after `after` (within it), at most limit; mu held. */
/* Whether the window holds every event committed before the events generation `seen`. */
static int holds(const api_feed *f, uint64_t seen)
{
    return f->at_head && f->head_gen >= seen;
}

static ty_err visit_window(api_feed *f, uint64_t seen, int64_t after, int limit,
                           api_feed_visit visit, void *ud, int64_t *last, int *more)
{
    /* Binary search for the first item with seq > after. */
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->ring[(f->first + mid) % API_FEED_WINDOW].seq <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    ty_err e = TY_OK;
    size_t i;
    for (i = lo; i < f->n && i - lo < (size_t)limit && !e; i++) {
        const item *it = &f->ring[(f->first + i) % API_FEED_WINDOW];
        api_feed_item view = {it->seq,  it->to,  it->queue, it->labels_json,
                              it->text, it->len, it->team};
        e = visit(ud, &view);
        *last = it->seq;
    }
    *more = i < f->n || !holds(f, seen);
    return e;
}

/* Reads the store after `after` and visits what it returns, outside the window. */
static ty_err read_direct(store *s, int64_t after, int limit, api_feed_visit visit, void *ud,
                          int64_t *last, int *more)
{
    store_feed_event *ev = NULL;
    size_t n = 0;
    ty_buf b = {0};
    ty_err e = store_feed_read(s, after, limit, &ev, &n);
    for (size_t i = 0; i < n && !e; i++) {
        ty_buf_reset(&b);
        if (!(e = api_feed_put_event(&b, &ev[i]))) {
            api_feed_item view = {ev[i].seq, ev[i].to, ev[i].queue, ev[i].labels_json,
                                  b.data,    b.len,    ev[i].team};
            e = visit(ud, &view);
        }
        *last = ev[i].seq;
    }
    *more = e == TY_OK && n == (size_t)limit;
    ty_buf_free(&b);
    store_feed_free(ev, n);
    return e;
}

ty_err api_feed_read(api_feed *f, store *s, uint64_t seen, int64_t after, int limit,
                     api_feed_visit visit, void *ud, int64_t *last, int *more)
{
    *last = after;
    *more = 0;
    if (limit < 1 || limit > 1000 || after < 0)
        return TY_EINVAL;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        /* Caught up with a window that holds every commit the caller knows of: nothing. */
        if (f->valid && after == f->top && holds(f, seen)) {
            pthread_mutex_unlock(&f->mu);
            return TY_OK;
        }
        if (f->valid && after >= f->base && after < f->top) {
            ty_err e = visit_window(f, seen, after, limit, visit, ud, last, more);
            pthread_mutex_unlock(&f->mu);
            return e;
        }
        if (f->valid && after < f->base) {
            /* Behind the window: this follower's own read. */
            pthread_mutex_unlock(&f->mu);
            return read_direct(s, after, limit, visit, ud, last, more);
        }
        if (!f->filling)
            break;
        pthread_cond_wait(&f->filled, &f->mu); /* someone reads what this one needs */
    }
    /* Caught up with the window (after == top), ahead of it, or no window yet: extend it. A
     * cursor far ahead of a window left behind (nobody followed for a while) restarts it
     * there, rather than reading everything between. */
    int64_t from = f->valid && after - f->top <= FILL_BATCH ? f->top : after;
    uint64_t fill_gen = f->gen.events; /* the read below sees every commit notified so far */
    f->filling = 1;
    pthread_mutex_unlock(&f->mu);

    store_feed_event *ev = NULL;
    size_t n = 0;
    item *items = NULL;
    ty_err e = store_feed_read(s, from, FILL_BATCH, &ev, &n);
    if (!e && n && !(items = calloc(n, sizeof *items)))
        e = TY_ENOMEM;
    if (!e && n)
        e = make_items(ev, n, items);
    store_feed_free(ev, n);

    pthread_mutex_lock(&f->mu);
    f->filling = 0;
    pthread_cond_broadcast(&f->filled);
    if (e) {
        pthread_mutex_unlock(&f->mu);
        free(items);
        return e;
    }
    if (!f->valid || from != f->top) {
        /* A new window: drop the old one (it ends before `from`, with a hole after it). */
        while (f->n) {
            item_clear(&f->ring[f->first]);
            f->first = (f->first + 1) % API_FEED_WINDOW;
            f->n--;
        }
        f->base = f->top = from;
        f->valid = 1;
    }
    append_items(f, items, n);
    free(items);
    f->at_head = n < FILL_BATCH;
    f->head_gen = fill_gen;
    e = visit_window(f, seen, after, limit, visit, ud, last, more);
    pthread_mutex_unlock(&f->mu);
    return e;
}
