/*
 * feed.c - the generation counter and condition variable of api/feed.h.
 *
 * The condition variable waits on the monotonic clock, so that a step of the
 * wall clock neither fires nor delays a follower's heartbeat.
 */
#include "api/feed.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct api_feed {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* broadcast on every notify and at shutdown */
    api_feed_gen gen;    /* mu */
    int closed;          /* mu */
    long followers;      /* mu */
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
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(f);
        return TY_EINTERNAL;
    }
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return TY_OK;
}

void api_feed_free(api_feed *f)
{
    if (!f)
        return;
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
