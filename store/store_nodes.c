/*
 * store_nodes.c - the node ledger (store.h): attempts' ends charged to nodes (node_failures)
 * and the nodes quarantined for them (node_quarantine). Facts only: which failures count, and
 * when a node is quarantined, is decided by scheduler/quarantine.c.
 *
 * Costs: a failure is one insert plus a prune by the time index; the scheduler's read of one
 * node's recent failures is a range of (node, time_ms). The ledger stays small: the scheduler
 * prunes what its policy can no longer count or show.
 */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

static const char SQL_FAILURE_INSERT[] =
    "INSERT INTO node_failures (node, job_id, attempt, rank, time_ms, exit_code, signal, cause)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
static const char SQL_FAILURE_PRUNE[] = "DELETE FROM node_failures WHERE time_ms < ?1";
/* The newest max rows (?3) of a node since ?2, oldest first. */
static const char SQL_FAILURES_NODE[] =
    "SELECT node, job_id, attempt, rank, time_ms, exit_code, signal, cause FROM ("
    " SELECT * FROM node_failures WHERE node = ?1 AND time_ms >= ?2"
    " ORDER BY time_ms DESC, seq DESC LIMIT ?3) ORDER BY time_ms, seq";
static const char SQL_FAILURES_ALL[] =
    "SELECT node, job_id, attempt, rank, time_ms, exit_code, signal, cause FROM ("
    " SELECT * FROM node_failures WHERE time_ms >= ?2"
    " ORDER BY time_ms DESC, seq DESC LIMIT ?3) ORDER BY time_ms, seq";
static const char SQL_QUARANTINE_PUT[] =
    "INSERT INTO node_quarantine (node, since_ms, release_at_ms, reason, counted_from_ms)"
    " VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (node) DO UPDATE SET since_ms = excluded.since_ms,"
    " release_at_ms = excluded.release_at_ms, reason = excluded.reason,"
    " counted_from_ms = excluded.counted_from_ms, released_ms = 0, released_by = ''";
static const char SQL_RELEASE[] =
    "UPDATE node_quarantine SET released_ms = ?2, released_by = ?3"
    " WHERE node = ?1 AND released_ms = 0";
static const char SQL_QUARANTINES[] =
    "SELECT node, since_ms, release_at_ms, reason, released_ms, released_by, counted_from_ms"
    " FROM node_quarantine ORDER BY node";
static const char SQL_QUARANTINES_ACTIVE[] =
    "SELECT node, since_ms, release_at_ms, reason, released_ms, released_by, counted_from_ms"
    " FROM node_quarantine WHERE released_ms = 0 ORDER BY node";

void store_node_failures_free(store_node_failure *f, size_t n)
{
    if (!f)
        return;
    for (size_t i = 0; i < n; i++) {
        free(f[i].node);
        free(f[i].job_id);
        free(f[i].cause);
    }
    free(f);
}

void store_node_quarantines_free(store_node_quarantine *q, size_t n)
{
    if (!q)
        return;
    for (size_t i = 0; i < n; i++) {
        free(q[i].node);
        free(q[i].reason);
        free(q[i].released_by);
    }
    free(q);
}

/* ---- writes ------------------------------------------------------------------------------ */

static ty_err failure_apply(store_conn *w, store_op *op)
{
    const store_node_failure *f = op->u.node.failure;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_FAILURE_INSERT, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, f->node);
    store_bind_text(st, 2, f->job_id);
    sqlite3_bind_int(st, 3, f->attempt);
    sqlite3_bind_int(st, 4, f->rank);
    sqlite3_bind_int64(st, 5, f->time_ms);
    sqlite3_bind_int(st, 6, f->exit_code);
    sqlite3_bind_int(st, 7, f->signal);
    store_bind_text(st, 8, f->cause);
    if ((e = store_step_done(st)) != TY_OK || op->u.node.prune_before_ms <= 0)
        return e;
    if ((e = store_conn_stmt(w, SQL_FAILURE_PRUNE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, op->u.node.prune_before_ms);
    return store_step_done(st);
}

static ty_err quarantine_apply(store_conn *w, store_op *op)
{
    const store_node_quarantine *q = op->u.node.q;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_QUARANTINE_PUT, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, q->node);
    sqlite3_bind_int64(st, 2, q->since_ms);
    sqlite3_bind_int64(st, 3, q->release_at_ms);
    store_bind_text(st, 4, q->reason);
    sqlite3_bind_int64(st, 5, q->counted_from_ms);
    return store_step_done(st);
}

static ty_err release_apply(store_conn *w, store_op *op)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_RELEASE, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, op->u.node.node);
    sqlite3_bind_int64(st, 2, op->u.node.now_ms);
    store_bind_text(st, 3, op->u.node.by);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    return sqlite3_changes(w->db) ? TY_OK : TY_ENOTFOUND;
}

ty_err store_node_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    switch (op->kind) {
    case STORE_OP_NODE_FAILURE:
        return failure_apply(w, op);
    case STORE_OP_NODE_QUARANTINE:
        return quarantine_apply(w, op);
    case STORE_OP_NODE_RELEASE:
        return release_apply(w, op);
    default:
        return TY_EINTERNAL;
    }
}

ty_err store_node_failure_add(store *s, const store_node_failure *f, int64_t prune_before_ms)
{
    if (!s || !f || !f->node || !*f->node || !f->job_id || !f->cause || f->attempt < 1 ||
        f->rank < 0)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_NODE_FAILURE};
    op.u.node.failure = f;
    op.u.node.prune_before_ms = prune_before_ms;
    return store_writer_run(s, &op);
}

ty_err store_node_quarantine_put(store *s, const store_node_quarantine *q)
{
    if (!s || !q || !q->node || !*q->node || !q->reason)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_NODE_QUARANTINE};
    op.u.node.q = q;
    return store_writer_run(s, &op);
}

ty_err store_node_release(store *s, const char *node, int64_t now_ms, const char *by)
{
    if (!s || !node || !*node)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_NODE_RELEASE};
    op.u.node.node = node;
    op.u.node.by = by ? by : "";
    op.u.node.now_ms = now_ms;
    return store_writer_run(s, &op);
}

/* ---- reads ------------------------------------------------------------------------------- */

static ty_err failure_from_row(sqlite3_stmt *st, void *item)
{
    store_node_failure *f = item;
    f->attempt = sqlite3_column_int(st, 2);
    f->rank = sqlite3_column_int(st, 3);
    f->time_ms = sqlite3_column_int64(st, 4);
    f->exit_code = sqlite3_column_int(st, 5);
    f->signal = sqlite3_column_int(st, 6);
    f->node = store_column_dup(st, 0);
    f->job_id = store_column_dup(st, 1);
    f->cause = store_column_dup(st, 7);
    return f->node && f->job_id && f->cause ? TY_OK : TY_ENOMEM;
}

static ty_err quarantine_from_row(sqlite3_stmt *st, void *item)
{
    store_node_quarantine *q = item;
    q->since_ms = sqlite3_column_int64(st, 1);
    q->release_at_ms = sqlite3_column_int64(st, 2);
    q->released_ms = sqlite3_column_int64(st, 4);
    q->counted_from_ms = sqlite3_column_int64(st, 6);
    q->node = store_column_dup(st, 0);
    q->reason = store_column_dup(st, 3);
    q->released_by = store_column_dup(st, 5);
    return q->node && q->reason && q->released_by ? TY_OK : TY_ENOMEM;
}

ty_err store_node_failures(store *s, const char *node, int64_t since_ms, size_t max,
                           store_node_failure **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    store_vec v = {0};
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, node ? SQL_FAILURES_NODE : SQL_FAILURES_ALL, 0, &st);
    if (e == TY_OK) {
        if (node)
            store_bind_text(st, 1, node);
        sqlite3_bind_int64(st, 2, since_ms);
        sqlite3_bind_int64(st, 3, max > INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
        e = store_collect(st, sizeof(store_node_failure), failure_from_row, &v);
    }
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_node_failures_free(v.items, v.n);
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

ty_err store_node_quarantines(store *s, int active_only, store_node_quarantine **out,
                              size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    store_vec v = {0};
    ty_err e = store_read_rows(s, active_only ? SQL_QUARANTINES_ACTIVE : SQL_QUARANTINES, NULL,
                               sizeof(store_node_quarantine), quarantine_from_row, &v);
    if (e != TY_OK) {
        store_node_quarantines_free(v.items, v.n);
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}
