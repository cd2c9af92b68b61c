/*
 * store_sched.c - the scheduler's side of the store: batched updates, attempt
 * records, the admission order and the change feed.
 *
 * Batched updates. The reconcile loop decides about many jobs at once and
 * writes all its decisions with one store_jobs_update(): one writer operation
 * holding the whole array, hence one group commit and one fsync for n jobs.
 * Inside the operation each update runs in a nested savepoint, so a stale
 * update (the job moved meanwhile: TY_ECONFLICT), an unknown job or an
 * illegal transition is rolled back alone and the others stay. An update is
 * checked against the state its caller read (`from`), not decided inside the
 * transaction: the scheduler owns its decisions, the store only guarantees
 * that none is applied to a job that changed under it. A transition goes
 * through store_job_move() like store_job_transition(), so both write the
 * same rows and refuse the same transitions.
 *
 * Attempt records. The scheduler keeps what it knows of an attempt (backend
 * names, ranks, exit codes) as a JSON object it rewrites as the attempt goes
 * on. Each write upserts the attempt's row in attempts, once: reading a job
 * takes its current attempt's record from there (one seek of the table's key,
 * STORE_JOB_COLUMNS), and the history of attempts stays readable after a
 * restart. Before schema 19 the record was also copied into the jobs row,
 * which rewrote the whole row, spec and all, for every record written.
 *
 * The admission order is per (queue, sweep) line, a walk of the partial index
 * jobs_pending_queue (queue, sweep, priority descending, then seq): only
 * PENDING jobs are in it, so its size follows the waiting jobs, not the
 * history. The jobs outside sweeps are one line per queue (sweep NULL); each
 * sweep's trials are another, so the scheduler can leave a sweep at its
 * parallelism out without reading it. A cursor (priority, seq) resumes
 * strictly after a job in two index ranges of its line: the rest of its
 * priority, then the priorities below, read in one transaction so both see
 * the same snapshot. The queues that hold PENDING jobs, and a queue's sweeps,
 * are found by loose index scans of the same index: one seek for the first
 * name (or sweep) greater than the last one found, so listing them costs one
 * seek each whatever the number of jobs waiting.
 *
 * Where a job stands in its line, for a person who asks (store_jobs_line_places), is a count
 * of the PENDING jobs ahead of it: pending_counts holds them per line, priority and bucket of
 * 1,024 seqs, so the count is a walk of the buckets ahead of it plus at most one bucket of the
 * index; a page's next job of the same line and priority counts from the one before it.
 *
 * The change feed is job_events read by its primary key: every submission and
 * every transition is one row, and seqs increase in commit order because the
 * single writer assigns them, so "events after seq N" is all a consumer needs
 * to follow every change (store_set_change_hook() says when to look).
 */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

#define PENDING_MAX_LIMIT 1000
#define QUEUES_MAX_LIMIT 1000
#define CHANGES_MAX_LIMIT 10000

static const char SQL_SAVEPOINT_UPDATE[] = "SAVEPOINT upd";
static const char SQL_ROLLBACK_UPDATE[] = "ROLLBACK TO upd";
static const char SQL_RELEASE_UPDATE[] = "RELEASE upd";
static const char SQL_UPSERT_ATTEMPT[] =
    "INSERT INTO attempts (job_seq, attempt, record) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (job_seq, attempt) DO UPDATE SET record = excluded.record";
static const char SQL_SET_RESTARTS[] = "UPDATE jobs SET restarts = ?2 WHERE seq = ?1";

/* ?5 is the sweep's seq, or NULL for the jobs outside sweeps: `IS` matches both in the index. */
static const char SQL_PENDING_AT[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs INDEXED BY jobs_pending_queue "
    "WHERE state = 0 AND queue = ?4 AND sweep IS ?5 AND priority = ?1 AND seq > ?2 "
    "ORDER BY priority DESC, seq LIMIT ?3";
static const char SQL_PENDING_BELOW[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs INDEXED BY jobs_pending_queue "
    "WHERE state = 0 AND queue = ?4 AND sweep IS ?5 AND priority <= ?1 "
    "ORDER BY priority DESC, seq LIMIT ?3";
/* One step of the loose index scan of a queue's sweeps: the first sweep after ?2. */
static const char SQL_PENDING_SWEEP_AFTER[] =
    "SELECT sweep, sweep_parallelism FROM jobs INDEXED BY jobs_pending_queue "
    "WHERE state = 0 AND queue = ?1 AND sweep > ?2 ORDER BY sweep LIMIT 1";
/* One step of the loose index scan: the first queue name after ?1 ('' before any). */
static const char SQL_PENDING_QUEUE_AFTER[] =
    "SELECT queue FROM jobs INDEXED BY jobs_pending_queue "
    "WHERE state = 0 AND queue > ?1 ORDER BY queue LIMIT 1";
/* The same walks over one team's line, through jobs_pending_team. */
static const char SQL_TEAM_PENDING_AT[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?6 AND queue = ?4 AND sweep IS ?5 AND priority = ?1 AND seq > ?2 "
    "ORDER BY priority DESC, seq LIMIT ?3";
static const char SQL_TEAM_PENDING_BELOW[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?6 AND queue = ?4 AND sweep IS ?5 AND priority <= ?1 "
    "ORDER BY priority DESC, seq LIMIT ?3";
/* The loose index scan of the lines (team, queue, sweep), one seek per line: the next sweep
 * of the same (team, queue), else the first line of the next queue of the team, else the
 * first line of the next team. A queue's line outside sweeps (sweep NULL) comes first. */
static const char SQL_LINE_NEXT_SWEEP[] =
    "SELECT team, queue, sweep, sweep_parallelism FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?1 AND queue = ?2 AND sweep > ?3 ORDER BY sweep LIMIT 1";
static const char SQL_LINE_NEXT_QUEUE[] =
    "SELECT team, queue, sweep, sweep_parallelism FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?1 AND queue > ?2 ORDER BY queue, sweep LIMIT 1";
static const char SQL_LINE_NEXT_TEAM[] =
    "SELECT team, queue, sweep, sweep_parallelism FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team > ?1 ORDER BY team, queue, sweep LIMIT 1";
static const char SQL_SET_PENDING_REASON[] =
    "UPDATE jobs SET pending_reason = nullif(?2, '') WHERE seq = ?1 AND state = 0";
/* One team's heads as the scheduler last described them (one per line, so few), in index
 * order: a walk of the team's PENDING jobs, only when a person asks; sorted by position in C. */
static const char SQL_QUEUE_HEADS[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?1 AND pending_reason IS NOT NULL";
static const char SQL_SET_PREEMPTED[] = "UPDATE jobs SET preempted = 1 WHERE seq = ?1";
/* Where a job stands in its line (?1 team, ?2 queue, ?3 sweep or NULL), for a person who asks:
 * the line's head (one seek), the PENDING jobs of the buckets before the job's (pending_counts,
 * ?3 the sweep or 0), and a count within one bucket of the line's index. */
static const char SQL_LINE_HEAD[] =
    "SELECT id, priority, seq, pending_reason FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?1 AND queue = ?2 AND sweep IS ?3 "
    "ORDER BY priority DESC, seq LIMIT 1";
static const char SQL_LINE_COUNT_AT[] =
    "SELECT count(*) FROM jobs INDEXED BY jobs_pending_team "
    "WHERE state = 0 AND team = ?1 AND queue = ?2 AND sweep IS ?3 AND priority = ?4 "
    "AND seq >= ?5 AND seq < ?6";
static const char SQL_LINE_COUNT_ABOVE[] =
    "SELECT coalesce(sum(n), 0) FROM pending_counts "
    "WHERE team = ?1 AND queue = ?2 AND sweep = ?3 AND priority > ?4";
static const char SQL_LINE_COUNT_BUCKETS[] =
    "SELECT coalesce(sum(n), 0) FROM pending_counts "
    "WHERE team = ?1 AND queue = ?2 AND sweep = ?3 AND priority = ?4 AND bucket < ?5";
static const char SQL_CHANGES[] =
    "SELECT e.seq, j.id, e.from_state, e.to_state FROM job_events AS e "
    "JOIN jobs AS j ON j.seq = e.job_seq WHERE e.seq > ?1 ORDER BY e.seq LIMIT ?2";
static const char SQL_CHANGES_HEAD[] = "SELECT max(seq) FROM job_events";
static const char SQL_ATTEMPTS[] =
    "SELECT a.attempt, a.record FROM jobs AS j LEFT JOIN attempts AS a ON a.job_seq = j.seq "
    "WHERE j.id = ?1 ORDER BY a.attempt";

const char *const store_sched_sql[] = {SQL_PENDING_AT,    SQL_PENDING_BELOW, SQL_PENDING_QUEUE_AFTER,
                                       SQL_CHANGES,       SQL_CHANGES_HEAD,  SQL_ATTEMPTS,
                                       SQL_PENDING_SWEEP_AFTER, SQL_TEAM_PENDING_AT,
                                       SQL_TEAM_PENDING_BELOW, SQL_LINE_NEXT_SWEEP,
                                       SQL_LINE_NEXT_QUEUE, SQL_LINE_NEXT_TEAM,
                                       SQL_SET_PENDING_REASON, SQL_SET_PREEMPTED,
                                       SQL_QUEUE_HEADS, SQL_LINE_HEAD, SQL_LINE_COUNT_AT,
                                       SQL_LINE_COUNT_ABOVE, SQL_LINE_COUNT_BUCKETS, NULL};

/* ---- batched updates (writer thread) ------------------------------------- */

/* The checks that need no database. */
static int update_valid(const store_update *u)
{
    return u->id && u->from >= 0 && u->from < JOB_STATE_COUNT && u->to >= 0 &&
           u->to < JOB_STATE_COUNT && ((u->to == u->from && !u->note) || u->reason) &&
           (!u->note || u->to == u->from) && u->restarts >= -1 &&
           (!u->attempt_json || u->attempt > 0) &&
           (!u->job_token_hash || (u->to == JOB_STARTING && u->from != JOB_STARTING));
}

/* Writes the attempt record and the restart count of an update that passed its checks. */
static ty_err write_records(store_conn *w, const store_job *job, const store_update *u)
{
    sqlite3_stmt *st = NULL;
    ty_err e;
    if (u->attempt > 0 && u->attempt_json) {
        if ((e = store_conn_stmt(w, SQL_UPSERT_ATTEMPT, 0, &st)) != TY_OK)
            return e;
        sqlite3_bind_int64(st, 1, job->seq);
        sqlite3_bind_int(st, 2, u->attempt);
        store_bind_text(st, 3, u->attempt_json);
        if ((e = store_step_done(st)) != TY_OK)
            return e;
    }
    if (u->restarts < 0)
        return TY_OK;
    if ((e = store_conn_stmt(w, SQL_SET_RESTARTS, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job->seq);
    sqlite3_bind_int(st, 2, u->restarts);
    return store_step_done(st);
}

/* Runs sql with ?1 = seq and, when text is not NULL, ?2 = text. */
static ty_err set_seq(store_conn *w, const char *sql, int64_t seq, const char *text)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, sql, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, seq);
    if (text)
        store_bind_text(st, 2, text);
    return store_step_done(st);
}

/* One update, inside its savepoint; returns its result. */
static ty_err update_one(store_conn *w, store_update *u)
{
    store_job job = {0};
    ty_err e;
    u->now = JOB_STATE_NONE;
    u->now_attempt = 0;
    if (!update_valid(u))
        return TY_EINVAL;
    if ((e = store_job_load_state(w, u->id, &job)) != TY_OK)
        return e;
    job_state cur = job.state;
    int cur_attempt = job.attempt;
    if (cur != u->from)
        e = TY_ECONFLICT;
    else if (u->to != cur)
        e = store_job_move(w, &job, u->to, u->reason, u->message);
    else if (u->note)
        e = store_job_note(w, &job, u->reason, u->message);
    if (e == TY_OK && u->attempt > 0 && u->attempt_json && u->attempt != job.attempt)
        e = TY_ECONFLICT; /* a record for another attempt than the job's */
    if (e == TY_OK)
        e = write_records(w, &job, u);
    if (e == TY_OK && u->job_token_hash)
        e = store_job_token_put(w, job.seq, job.attempt, u->job_token_hash);
    if (e == TY_OK && u->preempted && u->to == JOB_PENDING && u->from != JOB_PENDING)
        e = set_seq(w, SQL_SET_PREEMPTED, job.seq, NULL);
    if (e == TY_OK && u->pending_reason)
        e = set_seq(w, SQL_SET_PENDING_REASON, job.seq, u->pending_reason);
    /* A failed update is rolled back: the job stays as it was read. */
    u->now = e == TY_OK ? job.state : cur;
    u->now_attempt = e == TY_OK ? job.attempt : cur_attempt;
    store_job_clear(&job);
    return e;
}

ty_err store_update_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    for (size_t i = 0; i < op->u.update.n; i++) {
        store_update *u = &op->u.update.u[i];
        ty_err e = store_conn_exec(w, SQL_SAVEPOINT_UPDATE);
        if (e != TY_OK)
            return e;
        u->result = update_one(w, u);
        if (sqlite3_get_autocommit(w->db))
            return u->result != TY_OK ? u->result : TY_EIO; /* SQLite gave up the transaction */
        if (u->result != TY_OK && (e = store_conn_exec(w, SQL_ROLLBACK_UPDATE)) != TY_OK)
            return e;
        if ((e = store_conn_exec(w, SQL_RELEASE_UPDATE)) != TY_OK)
            return e;
        if (u->result == TY_OK && u->to != u->from)
            store_op_moved(op, u->from, u->to);
    }
    return TY_OK;
}

ty_err store_jobs_update(store *s, store_update *u, size_t n)
{
    if (!s || (n && !u))
        return TY_EINVAL;
    if (n == 0)
        return TY_OK;
    store_op op = {.kind = STORE_OP_UPDATE};
    op.u.update.u = u;
    op.u.update.n = n;
    ty_err e = store_writer_run(s, &op);
    if (e != TY_OK) {
        /* Nothing of the operation committed, whatever each update said. */
        for (size_t i = 0; i < n; i++)
            u[i].result = e;
    }
    return e;
}

/* ---- reads --------------------------------------------------------------- */

/* Appends to v the jobs sql returns for (queue, sweep, priority, seq, limit). */
static ty_err pending_read(store_conn *c, const char *sql, const char *team, const char *queue,
                           int64_t sweep, int64_t priority, int64_t seq, int limit, store_vec *v)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, priority);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int(st, 3, limit);
    store_bind_text(st, 4, queue);
    if (sweep > 0)
        sqlite3_bind_int64(st, 5, sweep); /* else NULL: the jobs outside sweeps */
    if (team)
        store_bind_text(st, 6, team);
    return store_collect(st, sizeof(store_job), store_job_from_row, v);
}

ty_err store_jobs_pending(store *s, const char *queue, int64_t after_priority, int64_t after_seq,
                          int limit, store_job **out, size_t *nout)
{
    return store_jobs_pending_sweep(s, queue, 0, after_priority, after_seq, limit, out, nout);
}

ty_err store_jobs_pending_sweep(store *s, const char *queue, int64_t sweep, int64_t after_priority,
                                int64_t after_seq, int limit, store_job **out, size_t *nout)
{
    return store_jobs_pending_line(s, NULL, queue, sweep, after_priority, after_seq, limit, out,
                                   nout);
}

ty_err store_jobs_pending_line(store *s, const char *team, const char *queue, int64_t sweep,
                               int64_t after_priority, int64_t after_seq, int limit,
                               store_job **out, size_t *nout)
{
    const char *at = team ? SQL_TEAM_PENDING_AT : SQL_PENDING_AT;
    const char *below = team ? SQL_TEAM_PENDING_BELOW : SQL_PENDING_BELOW;
    if (!s || !queue || !out || !nout || sweep < 0)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > PENDING_MAX_LIMIT || after_seq < 0)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto out;
    if (after_seq == 0) {
        e = pending_read(c, below, team, queue, sweep, INT64_MAX, 0, limit, &v);
    } else {
        /* The rest of the cursor's priority, then the priorities below it. */
        e = pending_read(c, at, team, queue, sweep, after_priority, after_seq, limit, &v);
        if (e == TY_OK && v.n < (size_t)limit && after_priority > INT64_MIN)
            e = pending_read(c, below, team, queue, sweep, after_priority - 1, 0,
                             limit - (int)v.n, &v);
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_jobs_free(v.items, v.n);
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

void store_queues_free(char **queues, size_t n)
{
    if (!queues)
        return;
    for (size_t i = 0; i < n; i++)
        free(queues[i]);
    free(queues);
}

ty_err store_pending_queues(store *s, const char *after, int limit, char ***out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > QUEUES_MAX_LIMIT)
        return TY_EINVAL;
    char **names = calloc((size_t)limit, sizeof *names);
    if (!names)
        return TY_ENOMEM;
    size_t n = 0;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto out;
    if ((e = store_conn_stmt(c, SQL_PENDING_QUEUE_AFTER, 0, &st)) != TY_OK)
        goto end;
    /* Names are never empty (a CHECK of jobs.queue), so '' is before them all. */
    const char *last = after ? after : "";
    while (n < (size_t)limit) {
        store_bind_text(st, 1, last);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            e = store_sqlite_err(rc);
            break;
        }
        if (!(names[n] = store_column_dup(st, 0))) {
            e = TY_ENOMEM;
            break;
        }
        last = names[n++];
        sqlite3_reset(st);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
end:
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e != TY_OK || n == 0) {
        store_queues_free(names, n);
        return e;
    }
    *out = names;
    *nout = n;
    return TY_OK;
}

ty_err store_pending_sweeps(store *s, const char *queue, int64_t after_sweep, int limit,
                            store_pending_sweep **out, size_t *nout)
{
    if (!s || !queue || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > QUEUES_MAX_LIMIT || after_sweep < 0)
        return TY_EINVAL;
    store_pending_sweep *list = calloc((size_t)limit, sizeof *list);
    if (!list)
        return TY_ENOMEM;
    size_t n = 0;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto out;
    if ((e = store_conn_stmt(c, SQL_PENDING_SWEEP_AFTER, 0, &st)) != TY_OK)
        goto end;
    /* Sweep seqs are >= 1, so after 0 comes the first; the jobs outside sweeps (NULL) never
     * compare greater. */
    int64_t last = after_sweep;
    while (n < (size_t)limit) {
        store_bind_text(st, 1, queue);
        sqlite3_bind_int64(st, 2, last);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            e = store_sqlite_err(rc);
            break;
        }
        list[n].sweep = last = sqlite3_column_int64(st, 0);
        list[n].parallelism = sqlite3_column_int(st, 1);
        n++;
        sqlite3_reset(st);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
end:
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e != TY_OK || n == 0) {
        free(list);
        return e;
    }
    *out = list;
    *nout = n;
    return TY_OK;
}

static ty_err change_from_row(sqlite3_stmt *st, void *item)
{
    store_change *x = item;
    const unsigned char *id = sqlite3_column_text(st, 1);
    if (!id || sqlite3_column_bytes(st, 1) != STORE_ID_LEN)
        return TY_ESCHEMA;
    x->seq = sqlite3_column_int64(st, 0);
    memcpy(x->id, id, STORE_ID_LEN + 1);
    x->from = store_column_state(st, 2);
    x->to = store_column_state(st, 3);
    return TY_OK;
}

ty_err store_changes(store *s, int64_t after, int limit, store_change **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > CHANGES_MAX_LIMIT)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_CHANGES, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, after);
        sqlite3_bind_int(st, 2, limit);
        e = store_collect(st, sizeof(store_change), change_from_row, &v);
    }
    store_reader_release(s, c);
    if (e != TY_OK) {
        free(v.items);
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

ty_err store_changes_head(store *s, int64_t *seq)
{
    if (!s || !seq)
        return TY_EINVAL;
    *seq = 0;
    return store_read_int64(s, SQL_CHANGES_HEAD, seq); /* max() of no rows is NULL: 0 */
}

/* ---- attempts ------------------------------------------------------------ */

void store_attempts_free(store_attempt *a, size_t n)
{
    if (!a)
        return;
    for (size_t i = 0; i < n; i++)
        free(a[i].json);
    free(a);
}

/* A row of SQL_ATTEMPTS; attempt 0 is the row of NULLs of a job without attempts. */
static ty_err attempt_from_row(sqlite3_stmt *st, void *item)
{
    store_attempt *a = item;
    a->attempt = sqlite3_column_int(st, 0);
    return (a->json = store_column_dup(st, 1)) ? TY_OK : TY_ENOMEM;
}

ty_err store_job_attempts(store *s, const char *id, store_attempt **out, size_t *nout)
{
    if (!s || !id || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    store_vec v = {0};
    ty_err e = store_read_rows(s, SQL_ATTEMPTS, id, sizeof(store_attempt), attempt_from_row, &v);
    if (e == TY_OK && v.n == 0)
        e = TY_ENOTFOUND; /* the LEFT JOIN gives every job at least one row */
    if (e != TY_OK) {
        store_attempts_free(v.items, v.n);
        return e;
    }
    if (((store_attempt *)v.items)[0].attempt == 0) { /* attempts are > 0: no attempts */
        store_attempts_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

void store_pending_lines_free(store_pending_line *lines, size_t n)
{
    if (!lines)
        return;
    for (size_t i = 0; i < n; i++) {
        free(lines[i].team);
        free(lines[i].queue);
    }
    free(lines);
}

/* One step of the lines' scan: the first row sql gives for (team, queue, sweep) into *out.
 * 1 found, 0 none, -1 with *e set. */
static int line_step(store_conn *c, const char *sql, const char *team, const char *queue,
                     int64_t sweep, store_pending_line *out, ty_err *e)
{
    sqlite3_stmt *st = NULL;
    if ((*e = store_conn_stmt(c, sql, 0, &st)) != TY_OK)
        return -1;
    store_bind_text(st, 1, team);
    if (queue)
        store_bind_text(st, 2, queue);
    sqlite3_bind_int64(st, 3, sweep);
    int rc = sqlite3_step(st), found = 0;
    if (rc == SQLITE_ROW) {
        out->sweep = sqlite3_column_int64(st, 2); /* NULL reads as 0: outside sweeps */
        out->parallelism = sqlite3_column_int(st, 3);
        if (!(out->team = store_column_dup(st, 0)) || !(out->queue = store_column_dup(st, 1))) {
            free(out->team);
            out->team = NULL;
            *e = TY_ENOMEM;
            found = -1;
        } else {
            found = 1;
        }
    } else if (rc != SQLITE_DONE) {
        *e = store_sqlite_err(rc);
        found = -1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return found;
}

ty_err store_pending_lines(store *s, const store_pending_line *after, int limit,
                           store_pending_line **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > QUEUES_MAX_LIMIT || (after && (!after->team || !after->queue)))
        return TY_EINVAL;
    store_pending_line *list = calloc((size_t)limit, sizeof *list);
    if (!list)
        return TY_ENOMEM;
    size_t n = 0;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto out;
    /* Team names are never empty, so '' is before them all. */
    const char *team = after ? after->team : "", *queue = after ? after->queue : NULL;
    int64_t sweep = after ? after->sweep : 0;
    while (n < (size_t)limit) {
        int got = 0;
        if (queue)
            got = line_step(c, SQL_LINE_NEXT_SWEEP, team, queue, sweep, &list[n], &e);
        if (got == 0 && queue)
            got = line_step(c, SQL_LINE_NEXT_QUEUE, team, queue, 0, &list[n], &e);
        if (got == 0)
            got = line_step(c, SQL_LINE_NEXT_TEAM, team, NULL, 0, &list[n], &e);
        if (got <= 0)
            break;
        team = list[n].team;
        queue = list[n].queue;
        sweep = list[n].sweep;
        n++;
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    if (e != TY_OK || n == 0) {
        store_pending_lines_free(list, n);
        return e;
    }
    *out = list;
    *nout = n;
    return TY_OK;
}

/* The position in a stored pending_reason; INT64_MAX when it has none. */
static int64_t head_position(const store_job *j)
{
    const char *p = j->pending_reason ? strstr(j->pending_reason, "\"position\":") : NULL;
    return p ? strtoll(p + strlen("\"position\":"), NULL, 10) : INT64_MAX;
}

static int by_position(const void *a, const void *b)
{
    int64_t x = head_position(a), y = head_position(b);
    if (x != y)
        return x < y ? -1 : 1;
    int64_t sx = ((const store_job *)a)->seq, sy = ((const store_job *)b)->seq;
    return sx < sy ? -1 : sx > sy;
}

ty_err store_queue_heads(store *s, const char *team, int limit, store_job **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    if (limit < 1 || limit > PENDING_MAX_LIMIT)
        return TY_EINVAL;
    store_team *teams = NULL;
    size_t nteams = 0;
    ty_err e = TY_OK;
    if (!team && (e = store_teams_list(s, &teams, &nteams)) != TY_OK)
        return e;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    if ((e = store_read_begin(c)) != TY_OK)
        goto out;
    /* Every team's heads (a team's own walk each), merged by position. */
    for (size_t t = 0; e == TY_OK && t < (team ? 1 : nteams); t++) {
        if ((e = store_conn_stmt(c, SQL_QUEUE_HEADS, 0, &st)) != TY_OK)
            break;
        store_bind_text(st, 1, team ? team : teams[t].name);
        e = store_collect(st, sizeof(store_job), store_job_from_row, &v);
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    store_teams_free(teams, nteams);
    if (e != TY_OK) {
        store_jobs_free(v.items, v.n);
        return e;
    }
    if (v.n > 1)
        qsort(v.items, v.n, sizeof(store_job), by_position);
    while (v.n > (size_t)limit)
        store_job_clear(&((store_job *)v.items)[--v.n]);
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

/* ---- where a job stands in its line --------------------------------------- */

static const char *job_team(const store_job *j)
{
    return j->team ? j->team : STORE_TEAM_DEFAULT;
}

/* The line's order of two jobs: team, queue, sweep, then admission order (priority
 * descending, then seq). */
static int line_cmp(const store_job *x, const store_job *y)
{
    int c = strcmp(job_team(x), job_team(y));
    if (!c)
        c = strcmp(x->queue, y->queue);
    if (c)
        return c;
    if (x->sweep != y->sweep)
        return x->sweep < y->sweep ? -1 : 1;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int same_line(const store_job *x, const store_job *y)
{
    return strcmp(job_team(x), job_team(y)) == 0 && strcmp(x->queue, y->queue) == 0 &&
           x->sweep == y->sweep;
}

static int by_line(const void *a, const void *b)
{
    return line_cmp(*(const store_job *const *)a, *(const store_job *const *)b);
}

/* Binds the line of j to ?1..?3 of st: the sweep as NULL for the jobs outside sweeps (the jobs'
 * column), or as 0 (pending_counts' column) when counts. */
static void bind_line(sqlite3_stmt *st, const store_job *j, int counts)
{
    store_bind_text(st, 1, job_team(j));
    store_bind_text(st, 2, j->queue);
    if (j->sweep > 0 || counts)
        sqlite3_bind_int64(st, 3, j->sweep);
}

/* Runs a count statement of the line of j whose ?4.. are a, b (and c when has_c). */
static ty_err line_count(store_conn *c, const char *sql, const store_job *j, int64_t a, int64_t b,
                         int64_t cc, int nargs, int64_t *n)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e != TY_OK)
        return e;
    bind_line(st, j, sql != SQL_LINE_COUNT_AT);
    sqlite3_bind_int64(st, 4, a);
    if (nargs > 1)
        sqlite3_bind_int64(st, 5, b);
    if (nargs > 2)
        sqlite3_bind_int64(st, 6, cc);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *n = sqlite3_column_int64(st, 0);
    else
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return e;
}

/* The PENDING jobs of j's line before it: those of higher priorities and those of its
 * priority in earlier buckets (pending_counts), then those of its own bucket before it. */
static ty_err line_ahead(store_conn *c, const store_job *j, int64_t *n)
{
    int64_t bucket = j->seq >> STORE_PENDING_BUCKET_SHIFT, a = 0, b = 0, d = 0;
    ty_err e;
    if ((e = line_count(c, SQL_LINE_COUNT_ABOVE, j, j->priority, 0, 0, 1, &a)) != TY_OK ||
        (e = line_count(c, SQL_LINE_COUNT_BUCKETS, j, j->priority, bucket, 0, 2, &b)) != TY_OK ||
        (e = line_count(c, SQL_LINE_COUNT_AT, j, j->priority,
                        bucket << STORE_PENDING_BUCKET_SHIFT, j->seq, 3, &d)) != TY_OK)
        return e;
    *n = a + b + d;
    return TY_OK;
}

/* The head of j's line into *head (id, priority, seq; pending_reason new or NULL): 1 found, 0
 * the line is empty. */
static int line_head(store_conn *c, const store_job *j, store_job *head, ty_err *e)
{
    sqlite3_stmt *st = NULL;
    if ((*e = store_conn_stmt(c, SQL_LINE_HEAD, 0, &st)) != TY_OK)
        return -1;
    bind_line(st, j, 0);
    int rc = sqlite3_step(st), found = 0;
    if (rc == SQLITE_ROW) {
        const unsigned char *id = sqlite3_column_text(st, 0);
        if (!id || sqlite3_column_bytes(st, 0) != STORE_ID_LEN) {
            *e = TY_ESCHEMA;
            found = -1;
        } else {
            memcpy(head->id, id, STORE_ID_LEN + 1);
            head->priority = sqlite3_column_int64(st, 1);
            head->seq = sqlite3_column_int64(st, 2);
            head->pending_reason = NULL;
            found = 1;
            if (sqlite3_column_type(st, 3) != SQLITE_NULL &&
                !(head->pending_reason = store_column_dup(st, 3))) {
                *e = TY_ENOMEM;
                found = -1;
            }
        }
    } else if (rc != SQLITE_DONE) {
        *e = store_sqlite_err(rc);
        found = -1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return found;
}

void store_line_places_clear(store_line_place *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++) {
        free(p[i].head_reason);
        p[i].head_reason = NULL;
    }
}

ty_err store_jobs_line_places(store *s, const store_job *jobs, size_t n, store_line_place *out)
{
    if (!s || (n && (!jobs || !out)))
        return TY_EINVAL;
    const store_job **order = NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = (store_line_place){.ahead = -1};
        if (jobs[i].state == JOB_PENDING && jobs[i].queue)
            m++;
    }
    if (m == 0)
        return TY_OK;
    if (!(order = malloc(m * sizeof *order)))
        return TY_ENOMEM;
    m = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].state == JOB_PENDING && jobs[i].queue)
            order[m++] = &jobs[i];
    qsort(order, m, sizeof *order, by_line);

    store_conn *c = store_reader_acquire(s);
    store_job head = {0};
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto out;
    for (size_t k = 0; k < m && e == TY_OK;) {
        const store_job *first = order[k];
        size_t end = k + 1;
        while (end < m && same_line(first, order[end]))
            end++;
        free(head.pending_reason);
        head.pending_reason = NULL;
        int found = line_head(c, first, &head, &e);
        if (found <= 0) {
            k = end;
            continue;
        }
        /* In line order. A job near the one before it (same priority, within a bucket's
         * width) counts from it: ahead(cur) = ahead(prev) + the PENDING jobs in [prev, cur);
         * any other counts from the buckets. */
        int64_t pp = head.priority, ps = head.seq, pahead = 0;
        for (; k < end && e == TY_OK; k++) {
            const store_job *j = order[k];
            store_line_place *pl = &out[j - jobs];
            if (j->priority > head.priority ||
                (j->priority == head.priority && j->seq < head.seq))
                continue; /* before the head: it left the line */
            int64_t cnt = 0;
            if (j->priority == pp && j->seq - ps <= (1 << STORE_PENDING_BUCKET_SHIFT)) {
                if ((e = line_count(c, SQL_LINE_COUNT_AT, j, pp, ps, j->seq, 3, &cnt)) != TY_OK)
                    break;
                pl->ahead = pahead + cnt;
            } else {
                if ((e = line_ahead(c, j, &cnt)) != TY_OK)
                    break;
                pl->ahead = cnt;
            }
            memcpy(pl->head_id, head.id, sizeof pl->head_id);
            if (pl->ahead > 0 && head.pending_reason &&
                !(pl->head_reason = strdup(head.pending_reason)))
                e = TY_ENOMEM;
            pp = j->priority;
            ps = j->seq;
            pahead = pl->ahead;
        }
        k = end;
    }
    store_read_end(c);
out:
    store_reader_release(s, c);
    free(head.pending_reason);
    free(order);
    if (e != TY_OK) {
        store_line_places_clear(out, n);
        for (size_t i = 0; i < n; i++)
            out[i] = (store_line_place){.ahead = -1};
    }
    return e;
}
