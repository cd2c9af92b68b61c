/*
 * store_feed.c - the change feed as the live event stream reads it: each
 * job_events row with the job it belongs to (id, name, queue, labels).
 *
 * One statement per read, so each read is one snapshot and costs no query per
 * row: the event range is a range of job_events' primary key (the whole feed)
 * or of job_events_job (one job, found by jobs(id)), and each row joins its
 * job by primary key. The labels come from the stored normalized spec
 * (json_extract of $.labels, compact JSON text) rather than from job_labels,
 * which is keyed for filtering by (key, value) and has no index by job.
 *
 * The change hook is single (store_set_change_hook()); store_change_hook_get()
 * lets the server chain a second listener behind the scheduler's. The metrics
 * head is the one row of metric_seq, from which the writer numbers points.
 */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

#define FEED_MAX_LIMIT 1000

#define FEED_COLUMNS                                                                               \
    "e.seq, e.time_ms, e.from_state, e.to_state, e.reason, e.message, j.id, j.name, j.queue, "    \
    "coalesce(json_extract(j.spec, '$.labels'), '{}'), j.team"

static const char SQL_FEED[] = "SELECT " FEED_COLUMNS " FROM job_events AS e "
                               "JOIN jobs AS j ON j.seq = e.job_seq "
                               "WHERE e.seq > ?1 ORDER BY e.seq LIMIT ?2";
static const char SQL_METRICS_HEAD[] = "SELECT last FROM metric_seq WHERE id = 1";
static const char SQL_FEED_JOB[] = "SELECT " FEED_COLUMNS " FROM jobs AS j "
                                   "JOIN job_events AS e ON e.job_seq = j.seq "
                                   "WHERE j.id = ?3 AND e.seq > ?1 ORDER BY e.seq LIMIT ?2";

void store_feed_free(store_feed_event *ev, size_t n)
{
    if (!ev)
        return;
    for (size_t i = 0; i < n; i++) {
        free(ev[i].reason);
        free(ev[i].message);
        free(ev[i].name);
        free(ev[i].queue);
        free(ev[i].labels_json);
        free(ev[i].team);
    }
    free(ev);
}

static ty_err feed_from_row(sqlite3_stmt *st, void *item)
{
    store_feed_event *x = item;
    const unsigned char *id = sqlite3_column_text(st, 6);
    if (!id || sqlite3_column_bytes(st, 6) != STORE_ID_LEN)
        return TY_ESCHEMA;
    x->seq = sqlite3_column_int64(st, 0);
    x->time_ms = sqlite3_column_int64(st, 1);
    x->from = store_column_state(st, 2);
    x->to = store_column_state(st, 3);
    memcpy(x->id, id, STORE_ID_LEN + 1);
    if (!(x->reason = store_column_dup(st, 4)) || !(x->message = store_column_dup(st, 5)) ||
        !(x->name = store_column_dup(st, 7)) || !(x->queue = store_column_dup(st, 8)) ||
        !(x->labels_json = store_column_dup(st, 9)) || !(x->team = store_column_dup(st, 10)))
        return TY_ENOMEM;
    return TY_OK;
}

/* Runs sql (?1 after, ?2 limit, ?3 the job id when not NULL) on a read connection. */
static ty_err feed_read(store *s, const char *sql, const char *id, int64_t after, int limit,
                        store_feed_event **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > FEED_MAX_LIMIT || after < 0)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, after);
        sqlite3_bind_int(st, 2, limit);
        if (id)
            store_bind_text(st, 3, id);
        e = store_collect(st, sizeof(store_feed_event), feed_from_row, &v);
    }
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_feed_free(v.items, v.n);
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

ty_err store_feed_read(store *s, int64_t after, int limit, store_feed_event **out, size_t *nout)
{
    return feed_read(s, SQL_FEED, NULL, after, limit, out, nout);
}

ty_err store_feed_read_job(store *s, const char *id, int64_t after, int limit,
                           store_feed_event **out, size_t *nout)
{
    if (!id)
        return TY_EINVAL;
    return feed_read(s, SQL_FEED_JOB, id, after, limit, out, nout);
}

void store_change_hook_get(store *s, void (**fn)(void *ud), void **ud)
{
    pthread_mutex_lock(&s->qmu);
    *fn = s->change_hook;
    *ud = s->change_hook_ud;
    pthread_mutex_unlock(&s->qmu);
}

ty_err store_metrics_head(store *s, int64_t *seq)
{
    if (!s || !seq)
        return TY_EINVAL;
    *seq = 0;
    return store_read_int64(s, SQL_METRICS_HEAD, seq);
}
