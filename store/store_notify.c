/*
 * store_notify.c - notification subscriptions and the outbox of their deliveries.
 *
 * The outbox is filled by a trigger (schema: notify_outbox_queue) on the update of a job's
 * state into SUCCEEDED, FAILED or CANCELLED: whatever path moves the job (the scheduler's
 * batched updates, a client's cancel, a transition), its delivery rows are written by the same
 * statement, in the same transaction, so they commit or roll back with the transition. The
 * store knows nothing of HTTP: a row is "event E of job J for subscription S", plus the
 * bookkeeping of its attempts, which server/notify.c writes through store_notify_mark().
 *
 * Writes go through the store's one writer (STORE_OP_NOTIFY_*); reads use the read pool.
 *
 * Retention (store_notify_purge): delivered and failed rows go once they are older than the
 * cutoff, found through notify_outbox_done (done_ms of the rows not pending), at most
 * max_rows per writer operation; a pending row is never purged, whatever its age.
 */
#include "store/store_int.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_log.h"
#include "common/ty_time.h"

#define AAD_PREFIX "notification:"

static const char SQL_SUB_INSERT[] =
    "INSERT INTO notify_subs (name, url, events, queue, labels, secret, created_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_SUB_DELETE[] = "DELETE FROM notify_subs WHERE name = ?1 RETURNING id";
static const char SQL_OUTBOX_DELETE[] = "DELETE FROM notify_outbox WHERE sub_id = ?1";
static const char SQL_MARK[] =
    "UPDATE notify_outbox SET state = ?2, attempts = attempts + 1, last_ms = ?3, next_ms = ?4, "
    "last_code = ?5, last_error = ?6, done_ms = CASE WHEN ?2 = 0 THEN 0 ELSE ?3 END "
    "WHERE id = ?1 AND state = 0";
static const char SQL_SUBS_LIST[] =
    "SELECT name, url, events, queue, labels, created_ms FROM notify_subs ORDER BY name";
static const char SQL_SUB_GET[] =
    "SELECT name, url, events, queue, labels, created_ms, secret FROM notify_subs "
    "WHERE name = ?1";
static const char SQL_SUB_ID[] = "SELECT id FROM notify_subs WHERE name = ?1";
static const char SQL_PURGE[] =
    "DELETE FROM notify_outbox WHERE id IN (SELECT id FROM notify_outbox "
    "WHERE state > 0 AND done_ms < ?1 ORDER BY done_ms LIMIT ?2)";

#define DELIVERY_COLUMNS                                                                           \
    "o.id, s.name, j.id, o.event, o.state, o.attempts, o.created_ms, o.next_ms, o.last_ms, "       \
    "o.done_ms, o.last_code, o.last_error"
/* A subscription's rows newest first: a backwards walk of notify_outbox_sub. */
static const char SQL_DELIVERIES[] =
    "SELECT " DELIVERY_COLUMNS " FROM notify_outbox AS o JOIN notify_subs AS s ON s.id = o.sub_id "
    "JOIN jobs AS j ON j.seq = o.job_seq WHERE o.sub_id = ?1 ORDER BY o.id DESC LIMIT ?2";
/* Due rows through the partial index of pending rows, earliest first. */
static const char SQL_DUE[] =
    "SELECT " DELIVERY_COLUMNS " FROM notify_outbox AS o JOIN notify_subs AS s ON s.id = o.sub_id "
    "JOIN jobs AS j ON j.seq = o.job_seq WHERE o.state = 0 AND o.next_ms <= ?1 "
    "ORDER BY o.next_ms LIMIT ?2";
static const char SQL_NEXT_DUE[] = "SELECT min(next_ms) FROM notify_outbox WHERE state = 0";

/* ---- writes ----------------------------------------------------------------- */

static void aad_of(const char *name, char *out, size_t len)
{
    snprintf(out, len, AAD_PREFIX "%s", name);
}

ty_err store_notify_create(store *s, const store_notify_sub *sub)
{
    if (!s || !sub || !sub->name || !sub->name[0] || strlen(sub->name) > 63 || !sub->url ||
        !sub->url[0] || !sub->events || (sub->events & ~(unsigned)STORE_NOTIFY_ALL) ||
        !sub->secret || !sub->secret_len || sub->secret_len > STORE_SECRET_MAX)
        return TY_EINVAL;
    char aad[96];
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    aad_of(sub->name, aad, sizeof aad);
    ty_err e = store_secret_seal(s, aad, sub->secret, sub->secret_len, &blob, &bloblen);
    if (e)
        return e;
    store_op op = {.kind = STORE_OP_NOTIFY_CREATE};
    op.u.notify.sub = sub;
    op.u.notify.sealed = blob;
    op.u.notify.sealed_len = bloblen;
    e = store_writer_run(s, &op);
    free(blob);
    return e;
}

ty_err store_notify_delete(store *s, const char *name)
{
    if (!s || !name)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_NOTIFY_DELETE};
    op.u.notify.name = name;
    return store_writer_run(s, &op);
}

ty_err store_notify_mark(store *s, const store_delivery_mark *m)
{
    if (!s || !m || m->state < STORE_DELIVERY_PENDING || m->state > STORE_DELIVERY_FAILED)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_NOTIFY_MARK};
    op.u.notify.mark = m;
    return store_writer_run(s, &op);
}

static ty_err sub_insert(store_conn *w, const store_op *op)
{
    const store_notify_sub *sub = op->u.notify.sub;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_SUB_INSERT, 0, &st);
    if (e)
        return e;
    store_bind_text(st, 1, sub->name);
    store_bind_text(st, 2, sub->url);
    sqlite3_bind_int64(st, 3, sub->events);
    store_bind_text(st, 4, sub->queue);
    store_bind_text(st, 5, sub->labels_json);
    sqlite3_bind_blob(st, 6, op->u.notify.sealed, (int)op->u.notify.sealed_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, ty_time_now_ms());
    return store_step_done(st);
}

/* Removes the subscription and every row of its outbox. */
static ty_err sub_delete(store_conn *w, const char *name)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_SUB_DELETE, 0, &st);
    if (e)
        return e;
    store_bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (rc == SQLITE_ROW)
        rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_sqlite_err(rc);
    if (!id)
        return TY_ENOTFOUND;
    if ((e = store_conn_stmt(w, SQL_OUTBOX_DELETE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, id);
    return store_step_done(st);
}

ty_err store_notify_purge(store *s, int64_t done_before_ms, int max_rows, int64_t *rows,
                          int *more)
{
    return store_purge_run(s, STORE_OP_NOTIFY_PURGE, done_before_ms, max_rows, rows, more);
}

/* At most max_rows finished rows older than the cutoff; more when the limit was reached. */
static ty_err purge(store_conn *w, store_op *op)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_PURGE, 0, &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, op->u.purge.before_ms);
    sqlite3_bind_int64(st, 2, op->u.purge.max_rows);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    op->u.purge.deleted = sqlite3_changes(w->db);
    op->u.purge.more = op->u.purge.deleted >= op->u.purge.max_rows;
    return TY_OK;
}

static ty_err mark(store_conn *w, const store_delivery_mark *m)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_MARK, 0, &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, m->id);
    sqlite3_bind_int(st, 2, (int)m->state);
    sqlite3_bind_int64(st, 3, m->at_ms);
    sqlite3_bind_int64(st, 4, m->next_at_ms);
    sqlite3_bind_int(st, 5, m->code);
    store_bind_text(st, 6, m->error ? m->error : "");
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    return sqlite3_changes(w->db) ? TY_OK : TY_ENOTFOUND;
}

/* Run by the writer, in the group's transaction. */
ty_err store_notify_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    switch (op->kind) {
    case STORE_OP_NOTIFY_CREATE:
        return sub_insert(w, op);
    case STORE_OP_NOTIFY_DELETE:
        return sub_delete(w, op->u.notify.name);
    case STORE_OP_NOTIFY_MARK:
        return mark(w, op->u.notify.mark);
    case STORE_OP_NOTIFY_PURGE:
        return purge(w, op);
    default:
        return TY_EINTERNAL;
    }
}

/* ---- reads ------------------------------------------------------------------ */

void store_notify_subs_free(store_notify_sub *subs, size_t n)
{
    if (!subs)
        return;
    for (size_t i = 0; i < n; i++) {
        store_notify_sub *x = &subs[i];
        free(x->name);
        free(x->url);
        free(x->queue);
        free(x->labels_json);
        if (x->secret)
            OPENSSL_cleanse(x->secret, x->secret_len);
        free(x->secret);
    }
    free(subs);
}

/* A nullable text column: NULL stays NULL. */
static ty_err column_opt(sqlite3_stmt *st, int col, char **out)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        return TY_OK;
    return (*out = store_column_dup(st, col)) ? TY_OK : TY_ENOMEM;
}

static ty_err sub_from_row(sqlite3_stmt *st, void *item)
{
    store_notify_sub *x = item;
    if (!(x->name = store_column_dup(st, 0)) || !(x->url = store_column_dup(st, 1)) ||
        column_opt(st, 3, &x->queue) || column_opt(st, 4, &x->labels_json))
        return TY_ENOMEM;
    x->events = (unsigned)sqlite3_column_int(st, 2);
    x->created_at_ms = sqlite3_column_int64(st, 5);
    return TY_OK;
}

ty_err store_notify_list(store *s, store_notify_sub **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    ty_err e = store_read_rows(s, SQL_SUBS_LIST, NULL, sizeof(store_notify_sub), sub_from_row, &v);
    if (e != TY_OK) {
        store_notify_subs_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

ty_err store_notify_get(store *s, const char *name, store_notify_sub **out)
{
    if (!s || !name || !out)
        return TY_EINVAL;
    store_notify_sub *x = calloc(1, sizeof *x);
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    if (!x)
        return TY_ENOMEM;
    ty_err e = store_read_sealed_row(s, SQL_SUB_GET, name, 6, sub_from_row, x, &blob, &bloblen);
    if (e)
        goto out;
    char aad[96];
    aad_of(x->name, aad, sizeof aad);
    if ((e = store_secret_unseal(s, aad, blob, bloblen, &x->secret, &x->secret_len)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "a notification secret does not open with the key file", "{s:s}",
               "notification", x->name);
        goto out;
    }
    *out = x;
    x = NULL;
out:
    free(blob);
    store_notify_subs_free(x, x ? 1 : 0);
    return e;
}

void store_deliveries_free(store_delivery *d, size_t n)
{
    if (!d)
        return;
    for (size_t i = 0; i < n; i++) {
        free(d[i].sub);
        free(d[i].last_error);
    }
    free(d);
}

static ty_err delivery_from_row(sqlite3_stmt *st, void *item)
{
    store_delivery *d = item;
    d->id = sqlite3_column_int64(st, 0);
    if (!(d->sub = store_column_dup(st, 1)) || !(d->last_error = store_column_dup(st, 11)))
        return TY_ENOMEM;
    if (sqlite3_column_bytes(st, 2) != STORE_ID_LEN)
        return TY_ESCHEMA;
    memcpy(d->job_id, sqlite3_column_text(st, 2), STORE_ID_LEN + 1);
    d->event = (job_state)sqlite3_column_int(st, 3);
    d->state = (store_delivery_state)sqlite3_column_int(st, 4);
    d->attempts = sqlite3_column_int(st, 5);
    d->created_at_ms = sqlite3_column_int64(st, 6);
    d->next_at_ms = sqlite3_column_int64(st, 7);
    d->last_at_ms = sqlite3_column_int64(st, 8);
    d->done_at_ms = sqlite3_column_int64(st, 9);
    d->last_code = sqlite3_column_int(st, 10);
    return TY_OK;
}

ty_err store_notify_deliveries(store *s, const char *name, int limit, store_delivery **out,
                               size_t *nout)
{
    if (!s || !name || !out || !nout || limit < 1 || limit > 1000)
        return TY_EINVAL;
    store_vec v = {0};
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_read_begin(c);
    if (e)
        goto out;
    if ((e = store_conn_stmt(c, SQL_SUB_ID, 0, &st)) == TY_OK) {
        store_bind_text(st, 1, name);
        int rc = sqlite3_step(st);
        int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        e = rc == SQLITE_ROW ? TY_OK : rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
        sqlite3_reset(st);
        if (!e && (e = store_conn_stmt(c, SQL_DELIVERIES, 0, &st)) == TY_OK) {
            sqlite3_bind_int64(st, 1, id);
            sqlite3_bind_int(st, 2, limit);
            e = store_collect(st, sizeof(store_delivery), delivery_from_row, &v);
        }
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e) {
        store_deliveries_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

ty_err store_notify_due(store *s, int64_t now_ms, int limit, store_delivery **out, size_t *nout,
                        int64_t *next_at_ms)
{
    if (!s || !out || !nout || !next_at_ms || limit < 1 || limit > 1000)
        return TY_EINVAL;
    store_vec v = {0};
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    *next_at_ms = 0;
    ty_err e = store_read_begin(c);
    if (e)
        goto out;
    if ((e = store_conn_stmt(c, SQL_DUE, 0, &st)) == TY_OK) {
        sqlite3_bind_int64(st, 1, now_ms);
        sqlite3_bind_int(st, 2, limit);
        e = store_collect(st, sizeof(store_delivery), delivery_from_row, &v);
    }
    if (!e && (e = store_conn_stmt(c, SQL_NEXT_DUE, 0, &st)) == TY_OK) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *next_at_ms = sqlite3_column_int64(st, 0);
        else
            e = store_sqlite_err(rc);
        sqlite3_reset(st);
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e) {
        store_deliveries_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}
