/*
 * store.c - connections, the writer thread with group commit, the read pool.
 *
 * Why one writer. SQLite allows one write transaction at a time per database;
 * many threads each running their own transaction would queue on the file
 * lock and pay one fsync each. Instead every write is an operation (store_op)
 * queued to one thread that owns the only read-write connection.
 *
 * Why group commit. A durable commit costs an fsync of the WAL, which takes
 * far longer than inserting a row. The writer waits for the first queued
 * operation, then takes everything queued behind it (at most max_group_ops
 * operations and about STORE_GROUP_MAX_ROWS jobs) and runs them all in one
 * BEGIN IMMEDIATE ... COMMIT with synchronous=FULL: one fsync for the whole
 * group. There is no timer: while one group commits, the next one queues, so
 * groups grow with the load and a lone request is committed at once. Only
 * after COMMIT returned does the writer wake the callers of that group, so a
 * caller that sees TY_OK is on disk.
 *
 * Why savepoints. Each operation runs inside its own SAVEPOINT. When one
 * fails (a constraint, an illegal transition, an idempotency conflict) it is
 * rolled back to its savepoint and reports its error, while the other
 * operations of the group still commit: callers cannot tell whether they
 * shared a group. Should SQLite abandon the whole transaction (I/O error,
 * out of memory), the operations that had succeeded in it are failed too,
 * because they were never committed, and the writer carries on in a fresh
 * transaction.
 *
 * In-memory counts. The number of jobs per state (for /metrics) is read once
 * at open with a GROUP BY and then kept by the writer: every operation records
 * its effect, and the effects are applied only after the COMMIT that holds
 * them. This assumes one server process per database file.
 *
 * Change hook. After a COMMIT that holds at least one job_events row, and
 * before waking the callers of the group, the writer calls the hook set by
 * store_set_change_hook(): a scheduler sleeping on it wakes up to read the
 * change feed, and a caller that returns from a write knows the hook has
 * already fired for it. A commit that stored metric points calls the metrics
 * hook instead (or as well): the points a job reports by the thousand a second
 * must not wake the scheduler, which has nothing to do with them.
 *
 * Checkpoints. The writer's connection has no automatic checkpoint: a
 * background thread with its own connection copies the WAL back into the
 * database (PASSIVE, never blocking the writer) when the WAL passes
 * STORE_CKPT_SOFT_PAGES. Under a constant write load such a checkpoint never
 * catches up with the last frame and the WAL could not restart, so past
 * STORE_CKPT_HARD_PAGES the writer finishes the job itself between two groups
 * (cheap, most frames are copied already) and the next transaction rewinds the
 * WAL. journal_size_limit truncates the file after a burst.
 *
 * Reads never touch the writer's connection: a small pool of read-only
 * connections serves them, each with its own cached statements. WAL readers
 * see the last committed snapshot and never wait for the writer.
 *
 * Memory: every connection has a bounded page cache and mmap is off, so the
 * store's memory is about cache_size times the number of connections.
 */
#include "store/store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_log.h"
#include "common/ty_time.h"
#include "common/ty_thread.h"

#define STORE_GROUP_MAX_ROWS 16384  /* jobs inserted by one group, about */
#define STORE_CKPT_SOFT_PAGES 2048  /* 8 MiB of WAL: background checkpoint */
#define STORE_CKPT_HARD_PAGES 16384 /* 64 MiB of WAL: the writer completes it */
#define STORE_WRITER_CACHE_KIB 16384
#define STORE_READER_CACHE_KIB 4096
#define STORE_JOURNAL_LIMIT (64 * 1024 * 1024)
#define STORE_IDEM_TTL_MS (24 * 3600 * 1000LL)
#define STORE_PURGE_EVERY_MS (60 * 1000LL)

static const char SQL_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";
static const char SQL_SAVEPOINT[] = "SAVEPOINT op";
static const char SQL_RELEASE[] = "RELEASE op";
static const char SQL_ROLLBACK_TO[] = "ROLLBACK TO op";
static const char SQL_READ_BEGIN[] = "BEGIN";
static const char SQL_READ_END[] = "COMMIT";
static const char SQL_PURGE[] = "DELETE FROM idempotency_keys WHERE created_ms < ?1";

/* ---- helpers shared by the store's files --------------------------------- */

ty_err store_collect(sqlite3_stmt *st, size_t size, store_row_fn row, store_vec *v)
{
    ty_err e = TY_OK;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (v->n == v->cap) {
            size_t ncap = v->cap ? v->cap * 2 : 8;
            void *grown = realloc(v->items, ncap * size);
            if (!grown) {
                e = TY_ENOMEM;
                break;
            }
            v->items = grown;
            v->cap = ncap;
        }
        void *item = (char *)v->items + v->n * size;
        memset(item, 0, size);
        v->n++;
        if ((e = row(st, item)) != TY_OK)
            break;
    }
    if (e == TY_OK && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

ty_err store_sqlite_err(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return TY_OK;
    case SQLITE_NOMEM:
        return TY_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return TY_EBUSY;
    case SQLITE_CONSTRAINT:
        return rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY ? TY_EEXISTS
                                                                                    : TY_EINVAL;
    case SQLITE_TOOBIG:
        return TY_ETOOLARGE;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_SCHEMA:
        return TY_ESCHEMA;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
        return TY_EINTERNAL;
    default:
        return TY_EIO;
    }
}

int store_bind_text(sqlite3_stmt *st, int idx, const char *text)
{
    return text ? sqlite3_bind_text(st, idx, text, -1, SQLITE_STATIC) : sqlite3_bind_null(st, idx);
}

char *store_column_dup(sqlite3_stmt *st, int col)
{
    const unsigned char *p = sqlite3_column_text(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    char *out = malloc(n + 1);
    if (out) {
        if (p)
            memcpy(out, p, n);
        out[p ? n : 0] = '\0';
    }
    return out;
}

job_state store_column_state(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? JOB_STATE_NONE
                                                       : (job_state)sqlite3_column_int(st, col);
}

ty_err store_conn_stmt(store_conn *c, const char *sql, int inst, sqlite3_stmt **out)
{
    for (size_t i = 0; i < c->nslots; i++) {
        if (c->slots[i].sql == sql && c->slots[i].inst == inst) {
            sqlite3_reset(c->slots[i].st);
            sqlite3_clear_bindings(c->slots[i].st);
            *out = c->slots[i].st;
            return TY_OK;
        }
    }
    if (c->nslots == c->capslots) {
        size_t cap = c->capslots ? c->capslots * 2 : 32;
        store_stmt_slot *slots = realloc(c->slots, cap * sizeof *slots);
        if (!slots)
            return TY_ENOMEM;
        c->slots = slots;
        c->capslots = cap;
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
        TY_LOG(TY_LOG_ERROR, "store: cannot prepare a statement", "{s:s,s:s}", "sql", sql, "error",
               sqlite3_errmsg(c->db));
        return rc == SQLITE_NOMEM ? TY_ENOMEM : TY_EINTERNAL;
    }
    c->slots[c->nslots++] = (store_stmt_slot){.sql = sql, .inst = inst, .st = st};
    *out = st;
    return TY_OK;
}

ty_err store_step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
}

ty_err store_conn_exec(store_conn *c, const char *sql)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    return e == TY_OK ? store_step_done(st) : e;
}

static void conn_close(store_conn *c)
{
    for (size_t i = 0; i < c->nslots; i++)
        sqlite3_finalize(c->slots[i].st);
    free(c->slots);
    free(c->scratch);
    if (c->db)
        sqlite3_close(c->db);
    memset(c, 0, sizeof *c);
}

/* Opens a connection with the store's settings. */
static ty_err conn_open(const char *path, int flags, int busy_ms, int cache_kib, sqlite3 **out,
                        char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    ty_err e = TY_OK;
    int rc = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        e = store_sqlite_err(rc);
        if (err && errlen)
            snprintf(err, errlen, "cannot open %s: %s", path,
                     db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        goto out;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, busy_ms);
    char pragmas[160];
    int n = snprintf(pragmas, sizeof pragmas,
                     "PRAGMA cache_size = -%d; PRAGMA mmap_size = 0; PRAGMA temp_store = MEMORY",
                     cache_kib);
    if (n < 0 || (size_t)n >= sizeof pragmas) {
        e = TY_EINTERNAL;
        goto out;
    }
    if ((rc = sqlite3_exec(db, pragmas, NULL, NULL, NULL)) != SQLITE_OK) {
        e = store_sqlite_err(rc);
        if (err && errlen)
            snprintf(err, errlen, "cannot configure %s: %s", path, sqlite3_errmsg(db));
        goto out;
    }
out:
    if (e != TY_OK) {
        sqlite3_close(db);
        db = NULL;
    }
    *out = db;
    return e;
}

/* ---- the writer ---------------------------------------------------------- */

/* Forgets the effects of an op that was rolled back. */
static void op_clear_effects(store_op *op)
{
    op->new_pending = 0;
    memset(op->moved, 0, sizeof op->moved);
    op->wrote_events = 0;
    op->wrote_metrics = 0;
}

void store_op_moved(store_op *op, job_state from, job_state to)
{
    op->moved[from]--;
    op->moved[to]++;
    op->wrote_events = 1;
}

/* The jobs an op writes, about: what a group's size is measured in. */
static size_t op_rows(const store_op *op)
{
    if (op->kind == STORE_OP_SUBMIT)
        return op->u.submit.n;
    if (op->kind == STORE_OP_UPDATE)
        return op->u.update.n;
    if (op->kind == STORE_OP_SWEEP_CREATE)
        return op->u.sweep.in->ntrials;
    if (op->kind == STORE_OP_METRICS) /* a point costs a small fraction of a job */
        return 1 + op->u.metrics.n / 16;
    if (op->kind == STORE_OP_METRICS_PURGE || op->kind == STORE_OP_NOTIFY_PURGE)
        return 1 + (size_t)op->u.purge.max_rows / 16; /* a deleted row, about a point */
    return 1;
}

ty_err store_writer_run(store *s, store_op *op)
{
    op->next = NULL;
    op->result = TY_OK;
    op_clear_effects(op);
    if (sem_init(&op->done, 0, 0) != 0)
        return TY_EINTERNAL;
    pthread_mutex_lock(&s->qmu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->qmu);
        sem_destroy(&op->done);
        return TY_ESHUTDOWN;
    }
    if (s->qtail)
        s->qtail->next = op;
    else
        s->qhead = op;
    s->qtail = op;
    s->qlen++;
    pthread_cond_signal(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    while (sem_wait(&op->done) != 0 && errno == EINTR)
        ;
    sem_destroy(&op->done);
    return op->result;
}

ty_err store_purge_run(store *s, int kind, int64_t before_ms, int max_rows, int64_t *deleted,
                       int *more)
{
    if (!s || !more || max_rows < 1 || max_rows > 100000)
        return TY_EINVAL;
    store_op op = {.kind = kind};
    op.u.purge.before_ms = before_ms;
    op.u.purge.max_rows = max_rows;
    ty_err e = store_writer_run(s, &op);
    *more = e == TY_OK && op.u.purge.more;
    if (deleted)
        *deleted = e == TY_OK ? op.u.purge.deleted : 0;
    return e;
}

static ty_err op_apply(store *s, store_op *op)
{
    switch (op->kind) {
    case STORE_OP_PING:
        return TY_OK;
    case STORE_OP_SUBMIT:
        return store_submit_apply(s, &s->writer, op);
    case STORE_OP_TRANSITION:
        return store_transition_apply(s, &s->writer, op);
    case STORE_OP_UPDATE:
        return store_update_apply(s, &s->writer, op);
    case STORE_OP_TOKEN_CREATE:
    case STORE_OP_TOKEN_REVOKE:
        return store_token_apply(s, &s->writer, op);
    case STORE_OP_METRICS:
        return store_metrics_apply(s, &s->writer, op);
    case STORE_OP_METRICS_PURGE:
        return store_metrics_purge_apply(s, &s->writer, op);
    case STORE_OP_NOTIFY_CREATE:
    case STORE_OP_NOTIFY_DELETE:
    case STORE_OP_NOTIFY_MARK:
    case STORE_OP_NOTIFY_PURGE:
        return store_notify_apply(s, &s->writer, op);
    case STORE_OP_WEBHOOK_CREATE:
    case STORE_OP_WEBHOOK_DELETE:
    case STORE_OP_WEBHOOK_SUBMIT:
        return store_webhook_apply(s, &s->writer, op);
    case STORE_OP_SWEEP_CREATE:
    case STORE_OP_SWEEP_CANCEL:
        return store_sweep_apply(s, &s->writer, op);
    case STORE_OP_TEAM_CREATE:
    case STORE_OP_TEAM_UPDATE:
    case STORE_OP_TEAM_DELETE:
        return store_team_apply(s, &s->writer, op);
    case STORE_OP_NODE_FAILURE:
    case STORE_OP_NODE_QUARANTINE:
    case STORE_OP_NODE_RELEASE:
        return store_node_apply(s, &s->writer, op);
    }
    return TY_EINTERNAL;
}

/* Fails the operations [from, to) that had succeeded: their transaction is gone. */
static void fail_succeeded(store_op *from, store_op *to, ty_err e)
{
    for (store_op *op = from; op != to; op = op->next)
        if (op->result == TY_OK)
            op->result = e;
}

/* Deletes expired idempotency keys, at most once a minute, in its own savepoint. */
static void maybe_purge(store *s)
{
    int64_t now = ty_time_now_ms();
    if (now - s->last_purge_ms < STORE_PURGE_EVERY_MS)
        return;
    s->last_purge_ms = now;
    sqlite3_stmt *st = NULL;
    if (store_conn_exec(&s->writer, SQL_SAVEPOINT) != TY_OK)
        return;
    ty_err e = store_conn_stmt(&s->writer, SQL_PURGE, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, now - STORE_IDEM_TTL_MS);
        int rc = sqlite3_step(st);
        e = rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
        sqlite3_reset(st);
    }
    if (e != TY_OK) {
        TY_LOG(TY_LOG_WARN, "store: purging idempotency keys failed", "{s:s}", "error",
               ty_strerror(e));
        store_conn_exec(&s->writer, SQL_ROLLBACK_TO);
    }
    store_conn_exec(&s->writer, SQL_RELEASE);
}

void store_fail_writes(store *s, int nth, int count, ty_err err)
{
    pthread_mutex_lock(&s->smu);
    s->fail_skip = nth > 0 ? nth - 1 : 0;
    s->fail_count = nth > 0 && count > 0 ? count : 0;
    s->fail_err = err != TY_OK ? err : TY_EIO;
    pthread_mutex_unlock(&s->smu);
}

/* The error an armed store_fail_writes() gives the transaction about to commit, else TY_OK. */
static ty_err injected_fault(store *s)
{
    ty_err e = TY_OK;
    pthread_mutex_lock(&s->smu);
    if (s->fail_count > 0) {
        if (s->fail_skip > 0) {
            s->fail_skip--;
        } else {
            s->fail_count--;
            e = s->fail_err;
        }
    }
    pthread_mutex_unlock(&s->smu);
    return e;
}

/* Calls the change hook (or the metrics hook), if any; writer thread, after a commit. */
static void call_change_hook(store *s, int metrics)
{
    pthread_mutex_lock(&s->qmu);
    void (*fn)(void *) = metrics ? s->metrics_hook : s->change_hook;
    void *ud = metrics ? s->metrics_hook_ud : s->change_hook_ud;
    pthread_mutex_unlock(&s->qmu);
    if (fn)
        fn(ud);
}

/* Calls the notify hook, if any; writer thread, after a commit. */
static void call_notify_hook(store *s)
{
    pthread_mutex_lock(&s->qmu);
    void (*fn)(void *) = s->notify_hook;
    void *ud = s->notify_hook_ud;
    pthread_mutex_unlock(&s->qmu);
    if (fn)
        fn(ud);
}

/*
 * Runs one group of nops operations: BEGIN IMMEDIATE, every op in its own
 * savepoint, COMMIT; then sets the counters, calls the change hook when the
 * commit holds job events, and wakes every caller.
 */
static void run_group(store *s, store_op *group, size_t nops)
{
    uint64_t t0 = ty_time_mono_ns();
    sqlite3 *db = s->writer.db;
    int committed = 0;
    ty_err e = store_conn_exec(&s->writer, SQL_BEGIN);
    store_op *tx_first = group; /* first op of the current transaction */
    if (e != TY_OK) {
        for (store_op *op = group; op; op = op->next)
            op->result = e;
        goto wake;
    }
    s->idgen_checked = 0;
    maybe_purge(s);
    for (store_op *op = group; op; op = op->next) {
        if ((e = store_conn_exec(&s->writer, SQL_SAVEPOINT)) == TY_OK) {
            op->result = op_apply(s, op);
            if (sqlite3_get_autocommit(db)) {
                e = op->result != TY_OK ? op->result : TY_EIO;
            } else if (op->result != TY_OK) {
                op_clear_effects(op);
                if ((e = store_conn_exec(&s->writer, SQL_ROLLBACK_TO)) == TY_OK)
                    e = store_conn_exec(&s->writer, SQL_RELEASE);
            } else {
                e = store_conn_exec(&s->writer, SQL_RELEASE);
            }
        }
        if (e != TY_OK) {
            /* The transaction is lost or unusable: nothing since tx_first committed. */
            TY_LOG(TY_LOG_ERROR, "store: write transaction aborted", "{s:s,s:s}", "error",
                   ty_strerror(e), "sqlite", sqlite3_errmsg(db));
            if (op->result == TY_OK)
                op->result = e;
            fail_succeeded(tx_first, op->next, e);
            if (!sqlite3_get_autocommit(db))
                sqlite3_exec(db, SQL_ROLLBACK, NULL, NULL, NULL);
            if (op->next && (e = store_conn_exec(&s->writer, SQL_BEGIN)) != TY_OK) {
                for (store_op *rest = op->next; rest; rest = rest->next)
                    rest->result = e;
                goto wake;
            }
            tx_first = op->next;
            s->idgen_checked = 0;
        }
    }
    if (tx_first) {
        if ((e = injected_fault(s)) == TY_OK)
            e = store_conn_exec(&s->writer, SQL_COMMIT);
        if (e == TY_OK) {
            committed = 1;
        } else {
            TY_LOG(TY_LOG_ERROR, "store: commit failed", "{s:s,s:s}", "error", ty_strerror(e),
                   "sqlite", sqlite3_errmsg(db));
            fail_succeeded(tx_first, NULL, e);
            if (!sqlite3_get_autocommit(db))
                sqlite3_exec(db, SQL_ROLLBACK, NULL, NULL, NULL);
        }
    }

wake:;
    double secs = (double)(ty_time_mono_ns() - t0) / 1e9;
    int changed = 0; /* a committed op wrote job events */
    int measured = 0; /* a committed op stored metric points */
    int ended = 0;    /* a committed op moved a job into a terminal state: the outbox may
                         have new rows (the trigger notify_outbox_queue) */
    pthread_mutex_lock(&s->smu);
    s->commits_total += (uint64_t)committed;
    for (store_op *op = group; op; op = op->next) {
        if (op->result != TY_OK)
            continue; /* rolled back, alone or with its transaction */
        s->jobs_by_state[JOB_PENDING] += op->new_pending;
        s->jobs_submitted_total += op->new_pending;
        s->submits_cancels += op->new_pending > 0 || op->moved[JOB_CANCELLING] > 0 ||
                              op->moved[JOB_CANCELLED] > 0;
        for (int st = 0; st < JOB_STATE_COUNT; st++)
            s->jobs_by_state[st] += (uint64_t)op->moved[st]; /* modular: adds a negative too */
        changed |= op->wrote_events;
        measured |= op->wrote_metrics;
        ended |= op->moved[JOB_SUCCEEDED] > 0 || op->moved[JOB_FAILED] > 0 ||
                 op->moved[JOB_CANCELLED] > 0;
    }
    pthread_mutex_unlock(&s->smu);
    if (committed) {
        ty_histogram_observe(&s->commit_seconds, secs);
        ty_histogram_observe(&s->commit_batch_ops, (double)nops);
        if (changed)
            call_change_hook(s, 0);
        if (measured)
            call_change_hook(s, 1);
        if (ended)
            call_notify_hook(s);
    }
    for (store_op *op = group, *next; op; op = next) {
        next = op->next; /* op may vanish (caller's stack) as soon as it is posted */
        sem_post(&op->done);
    }
}

/* Keeps the WAL bounded; see the file comment. Writer thread only. The
 * background checkpoint is asked for once per STORE_CKPT_SOFT_PAGES of growth
 * (each run ends with an fsync of the database file). */
static void after_commit_checkpoint(store *s)
{
    if (s->wal_pages < s->ckpt_asked_at)
        s->ckpt_asked_at = 0; /* the WAL was restarted */
    if (s->wal_pages >= STORE_CKPT_HARD_PAGES) {
        int rc =
            sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        if (rc == SQLITE_OK)
            s->wal_pages = s->ckpt_asked_at = 0;
    } else if (s->wal_pages - s->ckpt_asked_at >= STORE_CKPT_SOFT_PAGES && s->ckpt_started) {
        s->ckpt_asked_at = s->wal_pages;
        pthread_mutex_lock(&s->ckmu);
        if (!s->ckpt_wanted) {
            s->ckpt_wanted = 1;
            pthread_cond_signal(&s->ckcv);
        }
        pthread_mutex_unlock(&s->ckmu);
    }
}

static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    ((store *)arg)->wal_pages = pages;
    return SQLITE_OK;
}

static void *writer_main(void *arg)
{
    ty_thread_name("ty-store");
    store *s = arg;
    size_t max_ops = (size_t)s->opt.max_group_ops;
    for (;;) {
        pthread_mutex_lock(&s->qmu);
        while ((!s->qhead || s->hold_writer) && !s->stopping)
            pthread_cond_wait(&s->qcv, &s->qmu);
        if (!s->qhead) { /* stopping, and everything queued is done */
            pthread_mutex_unlock(&s->qmu);
            break;
        }
        /* Take the queue's head: at most max_ops operations and about
         * STORE_GROUP_MAX_ROWS jobs (always at least one operation). */
        store_op *group = s->qhead, *last = group;
        size_t nops = 1, rows = op_rows(group);
        while (last->next && nops < max_ops) {
            store_op *cand = last->next;
            size_t r = op_rows(cand);
            if (rows + r > STORE_GROUP_MAX_ROWS)
                break;
            rows += r;
            nops++;
            last = cand;
        }
        s->qhead = last->next;
        if (!s->qhead)
            s->qtail = NULL;
        s->qlen -= nops;
        last->next = NULL;
        pthread_mutex_unlock(&s->qmu);

        run_group(s, group, nops);
        after_commit_checkpoint(s);
    }
    return NULL;
}

static void *checkpointer_main(void *arg)
{
    ty_thread_name("ty-store-ckpt");
    store *s = arg;
    pthread_mutex_lock(&s->ckmu);
    for (;;) {
        while (!s->ckpt_wanted && !s->ckpt_stop)
            pthread_cond_wait(&s->ckcv, &s->ckmu);
        if (s->ckpt_stop)
            break;
        s->ckpt_wanted = 0;
        pthread_mutex_unlock(&s->ckmu);
        int rc = sqlite3_wal_checkpoint_v2(s->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY)
            TY_LOG(TY_LOG_WARN, "store: checkpoint failed", "{s:s}", "error",
                   sqlite3_errmsg(s->ckpt_db));
        pthread_mutex_lock(&s->ckmu);
    }
    pthread_mutex_unlock(&s->ckmu);
    return NULL;
}

/* ---- the read pool ------------------------------------------------------- */

store_conn *store_reader_acquire(store *s)
{
    pthread_mutex_lock(&s->rmu);
    while (s->nfree == 0)
        pthread_cond_wait(&s->rcv, &s->rmu);
    store_conn *c = &s->readers[s->free_readers[--s->nfree]];
    pthread_mutex_unlock(&s->rmu);
    return c;
}

void store_reader_release(store *s, store_conn *c)
{
    pthread_mutex_lock(&s->rmu);
    s->free_readers[s->nfree++] = (int)(c - s->readers);
    pthread_cond_signal(&s->rcv);
    pthread_mutex_unlock(&s->rmu);
}

ty_err store_read_rows(store *s, const char *sql, const char *arg, size_t size, store_row_fn row,
                       store_vec *v)
{
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e == TY_OK) {
        if (arg)
            store_bind_text(st, 1, arg);
        e = store_collect(st, size, row, v);
    }
    store_reader_release(s, c);
    return e;
}

ty_err store_read_begin(store_conn *c)
{
    return store_conn_exec(c, SQL_READ_BEGIN);
}

void store_read_end(store_conn *c)
{
    store_conn_exec(c, SQL_READ_END); /* a read transaction has nothing to lose */
}

ty_err store_read_int64(store *s, const char *sql, int64_t *out)
{
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e == TY_OK) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *out = sqlite3_column_int64(st, 0); /* 0 for NULL */
        else
            e = rc == SQLITE_DONE ? TY_EINTERNAL : store_sqlite_err(rc);
        sqlite3_reset(st);
    }
    store_reader_release(s, c);
    return e;
}

/* ---- open / close -------------------------------------------------------- */

/* Reads the job counts and the newest id; the writer keeps both up to date. */
static ty_err load_state(store *s, char *err, size_t errlen)
{
    static const char sql_counts[] = "SELECT state, count(*) FROM jobs GROUP BY state";
    static const char sql_last[] = "SELECT id FROM jobs ORDER BY seq DESC LIMIT 1";
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(&s->writer, sql_counts, 0, &st);
    int rc = SQLITE_OK;
    if (e != TY_OK)
        goto out;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int state = sqlite3_column_int(st, 0);
        if (state >= 0 && state < JOB_STATE_COUNT)
            s->jobs_by_state[state] = (uint64_t)sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        e = store_sqlite_err(rc);
        goto out;
    }
    if ((e = store_conn_stmt(&s->writer, sql_last, 0, &st)) != TY_OK)
        goto out;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW)
        store_idgen_observe(&s->idgen, (const char *)sqlite3_column_text(st, 0));
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
out:
    if (e != TY_OK && err && errlen)
        snprintf(err, errlen, "cannot read the job counts: %s", sqlite3_errmsg(s->writer.db));
    return e;
}

static ty_err open_writer(store *s, char *err, size_t errlen)
{
    ty_err e =
        conn_open(s->path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, s->opt.busy_timeout_ms,
                  STORE_WRITER_CACHE_KIB, &s->writer.db, err, errlen);
    if (e != TY_OK)
        return e;
    sqlite3 *db = s->writer.db;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    int wal = 0;
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        wal = sqlite3_stricmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
    sqlite3_finalize(st);
    if (!wal) {
        e = rc == SQLITE_ROW ? TY_EIO : store_sqlite_err(rc);
        if (e == TY_OK)
            e = TY_EIO;
        if (err && errlen)
            snprintf(err, errlen, "cannot put %s in WAL mode: %s", s->path, sqlite3_errmsg(db));
        return e;
    }
    char pragmas[128];
    int n =
        snprintf(pragmas, sizeof pragmas,
                 "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = %d", STORE_JOURNAL_LIMIT);
    if (n < 0 || (size_t)n >= sizeof pragmas)
        return TY_EINTERNAL;
    if ((rc = sqlite3_exec(db, pragmas, NULL, NULL, NULL)) != SQLITE_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot configure %s: %s", s->path, sqlite3_errmsg(db));
        return store_sqlite_err(rc);
    }
    /* Replaces the automatic checkpoint; see after_commit_checkpoint(). */
    sqlite3_wal_hook(db, on_wal_commit, s);
    return store_schema_migrate(db, err, errlen);
}

static ty_err open_readers(store *s, char *err, size_t errlen)
{
    ty_err e = TY_OK;
    s->readers = calloc((size_t)s->opt.read_connections, sizeof *s->readers);
    s->free_readers = calloc((size_t)s->opt.read_connections, sizeof *s->free_readers);
    if (!s->readers || !s->free_readers)
        return TY_ENOMEM;
    for (int i = 0; i < s->opt.read_connections; i++) {
        e = conn_open(s->path, SQLITE_OPEN_READONLY, s->opt.busy_timeout_ms, STORE_READER_CACHE_KIB,
                      &s->readers[i].db, err, errlen);
        if (e != TY_OK)
            return e;
        s->nreaders++;
        s->free_readers[s->nfree++] = i;
    }
    return TY_OK;
}

/*
 * SQLite's memory statistics take a global mutex on every allocation, which
 * the writer and the readers would contend for; the store does not use them.
 * This is process-wide and must precede SQLite's initialization; when SQLite
 * is already initialized the call fails harmlessly.
 */
static void configure_sqlite_once(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

ty_err store_open(const char *path, const store_options *opt, store **out, char *err, size_t errlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ty_err e = TY_OK;
    store *s = NULL;
    pthread_once(&once, configure_sqlite_once);
    if (err && errlen)
        err[0] = '\0';
    if (!path || !out) {
        e = TY_EINVAL;
        goto out;
    }
    if (!(s = calloc(1, sizeof *s))) {
        e = TY_ENOMEM;
        goto out;
    }
    s->opt.busy_timeout_ms = opt && opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : 5000;
    s->opt.max_group_ops = opt && opt->max_group_ops > 0 ? opt->max_group_ops : 4096;
    s->opt.read_connections = opt && opt->read_connections > 0 ? opt->read_connections : 4;
    s->opt.metrics_max_points = opt && opt->metrics_max_points > 0
                                    ? opt->metrics_max_points
                                    : STORE_METRIC_DEFAULT_MAX_POINTS;
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    pthread_mutex_init(&s->ckmu, NULL);
    pthread_cond_init(&s->ckcv, NULL);
    pthread_mutex_init(&s->rmu, NULL);
    pthread_cond_init(&s->rcv, NULL);
    pthread_mutex_init(&s->smu, NULL);
    ty_histogram_init(&s->commit_seconds, ty_latency_bounds, ty_latency_nbounds);
    static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    ty_histogram_init(&s->commit_batch_ops, batch_bounds,
                      sizeof batch_bounds / sizeof *batch_bounds);
    store_idgen_init(&s->idgen);
    s->last_purge_ms = 0;

    if (!(s->path = strdup(path))) {
        e = TY_ENOMEM;
        goto out;
    }
    if ((e = open_writer(s, err, errlen)) != TY_OK || (e = load_state(s, err, errlen)) != TY_OK ||
        (e = open_readers(s, err, errlen)) != TY_OK)
        goto out;
    if ((e = conn_open(s->path, SQLITE_OPEN_READWRITE, s->opt.busy_timeout_ms, 256, &s->ckpt_db,
                       err, errlen)) != TY_OK)
        goto out;
    sqlite3_exec(s->ckpt_db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
    if (pthread_create(&s->ckpt_thread, NULL, checkpointer_main, s) != 0) {
        e = TY_EINTERNAL;
        goto out;
    }
    s->ckpt_started = 1;
    if (pthread_create(&s->writer_thread, NULL, writer_main, s) != 0) {
        e = TY_EINTERNAL;
        goto out;
    }
    s->writer_started = 1;
out:
    if (e != TY_OK) {
        if (err && errlen && !err[0])
            snprintf(err, errlen, "cannot open the store: %s", ty_strerror(e));
        store_close(s);
        s = NULL;
    }
    if (out)
        *out = s;
    return e;
}

void store_close(store *s)
{
    if (!s)
        return;
    if (s->writer_started) {
        pthread_mutex_lock(&s->qmu);
        s->stopping = 1;
        pthread_cond_signal(&s->qcv);
        pthread_mutex_unlock(&s->qmu);
        pthread_join(s->writer_thread, NULL);
    }
    if (s->ckpt_started) {
        pthread_mutex_lock(&s->ckmu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckcv);
        pthread_mutex_unlock(&s->ckmu);
        pthread_join(s->ckpt_thread, NULL);
    }
    for (int i = 0; i < s->nreaders; i++)
        conn_close(&s->readers[i]);
    free(s->readers);
    free(s->free_readers);
    if (s->ckpt_db)
        sqlite3_close(s->ckpt_db);
    /* The last connection to close checkpoints and removes the WAL. */
    conn_close(&s->writer);
    ty_histogram_destroy(&s->commit_seconds);
    ty_histogram_destroy(&s->commit_batch_ops);
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    pthread_mutex_destroy(&s->ckmu);
    pthread_cond_destroy(&s->ckcv);
    pthread_mutex_destroy(&s->rmu);
    pthread_cond_destroy(&s->rcv);
    pthread_mutex_destroy(&s->smu);
    free(s->path);
    free(s);
}

/* ---- ping, statistics, test hooks ---------------------------------------- */

ty_err store_ping(store *s)
{
    if (!s)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_PING};
    return store_writer_run(s, &op);
}

void store_set_change_hook(store *s, void (*fn)(void *ud), void *ud)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->qmu);
    s->change_hook = fn;
    s->change_hook_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&s->qmu);
}

void store_set_metrics_hook(store *s, void (*fn)(void *ud), void *ud)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->qmu);
    s->metrics_hook = fn;
    s->metrics_hook_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&s->qmu);
}

void store_set_notify_hook(store *s, void (*fn)(void *ud), void *ud)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->qmu);
    s->notify_hook = fn;
    s->notify_hook_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&s->qmu);
}

void store_get_stats(store *s, store_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    pthread_mutex_lock(&s->smu);
    memcpy(out->jobs_by_state, s->jobs_by_state, sizeof out->jobs_by_state);
    out->jobs_submitted_total = s->jobs_submitted_total;
    out->commits_total = s->commits_total;
    pthread_mutex_unlock(&s->smu);
    out->commit_seconds = &s->commit_seconds;
    out->commit_batch_ops = &s->commit_batch_ops;
}

uint64_t store_submits_cancels(store *s)
{
    pthread_mutex_lock(&s->smu);
    uint64_t n = s->submits_cancels;
    pthread_mutex_unlock(&s->smu);
    return n;
}

void store_test_hold_writer(store *s, int hold)
{
    pthread_mutex_lock(&s->qmu);
    s->hold_writer = hold;
    pthread_cond_signal(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
}

size_t store_test_queued(store *s)
{
    pthread_mutex_lock(&s->qmu);
    size_t n = s->qlen;
    pthread_mutex_unlock(&s->qmu);
    return n;
}
