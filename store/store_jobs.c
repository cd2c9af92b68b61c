/*
 * store_jobs.c - jobs: submission, lookup, history and state transitions.
 *
 * Writes run on the writer thread (store.c) inside the group's transaction,
 * each within its own savepoint, so everything an operation writes commits
 * or vanishes together:
 *   - a submission inserts all its jobs, their labels, their first events and
 *     its idempotency key; one failing row (a constraint) fails the whole
 *     submission and leaves nothing;
 *   - a transition updates the job and inserts its job_events row; it reads the
 *     current state and asks decide() inside the same transaction, so no
 *     concurrent change can slip between the check and the write, and it
 *     refuses whatever job_state_transition_allowed() refuses.
 * The writer does only what needs the transaction: the caller allocates and
 * fills the returned job copies before queuing and after waking up.
 *
 * Idempotency keys record the first seq and the number of jobs of the
 * submission: a submission's jobs get consecutive seqs because the writer
 * inserts them in one go. A key older than 24 hours is treated as absent and
 * purged by the writer (store.c).
 *
 * attempt counts the attempts started: it is incremented by every transition
 * into STARTING (from ADMITTED for the first attempt, from RESTARTING later).
 * store_job_move() is the one place a job changes state, for
 * store_job_transition() and the scheduler's batched updates (store_sched.c),
 * and it revokes a job's tokens in the transaction that ends the job.
 *
 * Reads (get, events, the replay of an idempotent submission) use a read
 * connection and a single statement each, hence one consistent snapshot.
 */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/ty_log.h"
#include "common/ty_time.h"

#define STORE_IDEM_TTL_MS (24 * 3600 * 1000LL)

/* The requested totals are the normalized spec's per-rank resources times its workers (see
 * store_team_usage_get()); ty_quantity() is store_schema.c's. */
static const char SQL_INSERT_JOB[] =
    "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, spec, "
    "team, owner, gpu_type, gpus, cpu_milli, memory_bytes) "
    "VALUES (?1, ?2, ?3, ?4, 0, 0, ?5, ?5, ?6, ?7, ?8, json_extract(?6, '$.resources.gpu.type'), "
    "coalesce(json_extract(?6, '$.workers.count') * json_extract(?6, '$.resources.gpu.count'), 0), "
    "coalesce(json_extract(?6, '$.workers.count') * "
    "ty_quantity(json_extract(?6, '$.resources.cpu'), 3), 0), "
    "coalesce(json_extract(?6, '$.workers.count') * "
    "ty_quantity(json_extract(?6, '$.resources.memory'), 0), 0))";
static const char SQL_INSERT_LABEL[] =
    "INSERT INTO job_labels (key, value, seq) VALUES (?1, ?2, ?3)";
static const char SQL_INSERT_EVENT[] =
    "INSERT INTO job_events (job_seq, time_ms, from_state, to_state, reason, message) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
/* The "Submitted" events of the jobs just inserted with seq in [?1, ?2], in seq order, each
 * at its job's creation time: one statement for a whole submission. */
static const char SQL_INSERT_SUBMITTED[] =
    "INSERT INTO job_events (job_seq, time_ms, from_state, to_state, reason, message) "
    "SELECT seq, created_ms, NULL, 0, 'Submitted', '' FROM jobs "
    "WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq";
/* The new jobs' places in pending_counts (schema 17), one upsert per line, priority and bucket
 * of the batch rather than a trigger per row. */
static const char SQL_COUNT_SUBMITTED[] =
    "INSERT INTO pending_counts (team, queue, sweep, priority, bucket, n) "
    "SELECT team, queue, coalesce(sweep, 0), priority, seq >> 10, count(*) FROM jobs "
    "WHERE seq BETWEEN ?1 AND ?2 AND state = 0 GROUP BY 1, 2, 3, 4, 5 "
    "ON CONFLICT (team, queue, sweep, priority, bucket) DO UPDATE SET n = n + excluded.n";
static const char SQL_IDEM_GET[] =
    "SELECT body_hash, first_seq, njobs, created_ms FROM idempotency_keys WHERE key = ?1";
static const char SQL_IDEM_PUT[] =
    "INSERT OR REPLACE INTO idempotency_keys (key, body_hash, first_seq, njobs, created_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";
static const char SQL_LAST_ID[] = "SELECT id FROM jobs ORDER BY seq DESC LIMIT 1";
static const char SQL_JOB_BY_ID[] = "SELECT " STORE_JOB_COLUMNS " FROM jobs WHERE id = ?1";
static const char SQL_JOB_STATE_BY_ID[] =
    "SELECT seq, state, attempt, updated_ms FROM jobs WHERE id = ?1";
static const char SQL_JOB_VISIBLE[] =
    "SELECT 1 FROM jobs WHERE id = ?1 AND (?2 IS NULL OR team = ?2)";
static const char SQL_JOBS_RANGE[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs WHERE seq >= ?1 AND seq < ?2 ORDER BY seq";
static const char SQL_UPDATE_STATE[] =
    "UPDATE jobs SET state = ?2, attempt = ?3, updated_ms = ?4 WHERE seq = ?1";
static const char SQL_EVENTS[] =
    "SELECT e.seq, e.time_ms, e.from_state, e.to_state, e.reason, e.message "
    "FROM jobs AS j JOIN job_events AS e ON e.job_seq = j.seq WHERE j.id = ?1 ORDER BY e.seq";

const char *const store_jobs_sql[] = {SQL_LAST_ID,  SQL_JOB_BY_ID, SQL_JOBS_RANGE,  SQL_EVENTS,
                                      SQL_IDEM_GET, SQL_JOB_VISIBLE, NULL};

/* ---- shared helpers ------------------------------------------------------ */

void store_job_clear(store_job *j)
{
    free(j->name);
    free(j->queue);
    free(j->spec_json);
    free(j->attempt_json);
    free(j->team);
    free(j->owner);
    free(j->pending_reason);
    memset(j, 0, sizeof *j);
}

void store_jobs_free(store_job *jobs, size_t n)
{
    if (!jobs)
        return;
    for (size_t i = 0; i < n; i++)
        store_job_clear(&jobs[i]);
    free(jobs);
}

void store_events_free(store_event *events, size_t n)
{
    if (!events)
        return;
    for (size_t i = 0; i < n; i++) {
        free(events[i].reason);
        free(events[i].message);
    }
    free(events);
}

ty_err store_job_from_row(sqlite3_stmt *st, void *job)
{
    store_job *j = job;
    memset(j, 0, sizeof *j);
    j->seq = sqlite3_column_int64(st, 0);
    const unsigned char *id = sqlite3_column_text(st, 1);
    if (!id || sqlite3_column_bytes(st, 1) != STORE_ID_LEN)
        return TY_ESCHEMA;
    memcpy(j->id, id, STORE_ID_LEN + 1);
    j->priority = sqlite3_column_int64(st, 4);
    j->state = (job_state)sqlite3_column_int(st, 5);
    j->attempt = sqlite3_column_int(st, 6);
    j->created_at_ms = sqlite3_column_int64(st, 7);
    j->updated_at_ms = sqlite3_column_int64(st, 8);
    j->restarts = sqlite3_column_int(st, 10);
    j->sweep = sqlite3_column_int64(st, 12); /* NULL reads as 0: not a trial */
    j->sweep_parallelism = sqlite3_column_int(st, 13);
    int has_attempt = sqlite3_column_type(st, 11) != SQLITE_NULL;
    int has_owner = sqlite3_column_type(st, 15) != SQLITE_NULL;
    int has_reason = sqlite3_column_type(st, 16) != SQLITE_NULL;
    j->preempted = sqlite3_column_int(st, 17);
    if (!(j->name = store_column_dup(st, 2)) || !(j->queue = store_column_dup(st, 3)) ||
        !(j->spec_json = store_column_dup(st, 9)) ||
        (has_attempt && !(j->attempt_json = store_column_dup(st, 11))) ||
        !(j->team = store_column_dup(st, 14)) ||
        (has_owner && !(j->owner = store_column_dup(st, 15))) ||
        (has_reason && !(j->pending_reason = store_column_dup(st, 16)))) {
        store_job_clear(j);
        return TY_ENOMEM;
    }
    return TY_OK;
}

ty_err store_job_load_state(store_conn *c, const char *id, store_job *job)
{
    sqlite3_stmt *st = NULL;
    memset(job, 0, sizeof *job);
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    ty_err e = store_conn_stmt(c, SQL_JOB_STATE_BY_ID, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        memcpy(job->id, id, STORE_ID_LEN + 1);
        job->seq = sqlite3_column_int64(st, 0);
        job->state = (job_state)sqlite3_column_int(st, 1);
        job->attempt = sqlite3_column_int(st, 2);
        job->updated_at_ms = sqlite3_column_int64(st, 3);
    } else {
        e = rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    return e;
}

ty_err store_job_load(store_conn *c, const char *id, store_job *job)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_JOB_BY_ID, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        e = store_job_from_row(st, job);
    else
        e = rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

static ty_err insert_event(store_conn *w, int64_t job_seq, int64_t time_ms, job_state from,
                           job_state to, const char *reason, const char *message)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_INSERT_EVENT, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, time_ms);
    if (from == JOB_STATE_NONE)
        sqlite3_bind_null(st, 3);
    else
        sqlite3_bind_int(st, 3, (int)from);
    sqlite3_bind_int(st, 4, (int)to);
    store_bind_text(st, 5, reason);
    store_bind_text(st, 6, message ? message : "");
    return store_step_done(st);
}

/* ---- submission ---------------------------------------------------------- */

/* Looks the key up: *found = 1 with the recorded submission when it is live. */
static ty_err idem_lookup(store_conn *w, store_op *op, int64_t now, int *found)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_IDEM_GET, 0, &st);
    *found = 0;
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, op->u.submit.idem_key);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_int64(st, 3) >= now - STORE_IDEM_TTL_MS) {
        const void *hash = sqlite3_column_blob(st, 0);
        if (sqlite3_column_bytes(st, 0) != 32 || memcmp(hash, op->u.submit.body_hash, 32) != 0) {
            e = TY_ECONFLICT;
        } else {
            *found = 1;
            op->u.submit.first_seq = sqlite3_column_int64(st, 1);
            op->u.submit.njobs = sqlite3_column_int64(st, 2);
        }
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        e = store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    return e;
}

/* Makes the id generator continue after the newest stored id, once per group,
 * so ids stay ordered even if another process inserted jobs meanwhile. */
static ty_err sync_idgen(store *s, store_conn *w)
{
    if (s->idgen_checked)
        return TY_OK;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_LAST_ID, 0, &st);
    if (e != TY_OK)
        return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        store_idgen_observe(&s->idgen, (const char *)sqlite3_column_text(st, 0));
    else if (rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    if (e == TY_OK)
        s->idgen_checked = 1;
    return e;
}

static ty_err insert_job(store *s, store_conn *w, store_sealer *k, const store_job_new *in,
                         int64_t now, store_job *out)
{
    sqlite3_stmt *st = NULL;
    int64_t ms;
    ty_err e = store_idgen_next(&s->idgen, now, out->id, &ms);
    if (e != TY_OK || (e = store_conn_stmt(w, SQL_INSERT_JOB, 0, &st)) != TY_OK)
        return e;
    store_bind_text(st, 1, out->id);
    store_bind_text(st, 2, in->name);
    store_bind_text(st, 3, in->queue);
    sqlite3_bind_int64(st, 4, in->priority);
    sqlite3_bind_int64(st, 5, ms);
    store_bind_text(st, 6, in->spec_json);
    store_bind_text(st, 7, in->team ? in->team : STORE_TEAM_DEFAULT);
    if (in->owner)
        store_bind_text(st, 8, in->owner);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    out->seq = sqlite3_last_insert_rowid(w->db);
    out->priority = in->priority;
    out->state = JOB_PENDING;
    out->attempt = 0;
    out->created_at_ms = out->updated_at_ms = ms;
    if (in->nlabels && !in->labels)
        return TY_EINVAL;
    for (size_t i = 0; i < in->nlabels; i++) {
        if ((e = store_conn_stmt(w, SQL_INSERT_LABEL, 0, &st)) != TY_OK)
            return e;
        store_bind_text(st, 1, in->labels[i].key);
        store_bind_text(st, 2, in->labels[i].value);
        sqlite3_bind_int64(st, 3, out->seq);
        if ((e = store_step_done(st)) != TY_OK)
            return e;
    }
    return store_job_secrets_put(s, w, k, out->seq, out->id, in->secrets, in->nsecrets);
}

/*
 * Inserts the jobs, then their "Submitted" events with one statement: the
 * writer inserts nothing else meanwhile, so the jobs with seq from the first
 * to the last inserted are exactly these (in order), and a row per event
 * costs a fraction of a statement per event.
 */
static ty_err insert_jobs(store *s, store_conn *w, const store_job_new *jobs, size_t n,
                          int64_t now, store_job *out)
{
    sqlite3_stmt *st = NULL;
    store_sealer k = {0}; /* the key file is read once, by the first secret */
    ty_err e = TY_OK;
    for (size_t i = 0; e == TY_OK && i < n; i++)
        e = insert_job(s, w, &k, &jobs[i], now, &out[i]);
    store_sealer_done(&k);
    if (e != TY_OK || n == 0 || (e = store_conn_stmt(w, SQL_INSERT_SUBMITTED, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, out[0].seq);
    sqlite3_bind_int64(st, 2, out[n - 1].seq);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    if (sqlite3_changes(w->db) != (int)n)
        return TY_EINTERNAL;
    if ((e = store_conn_stmt(w, SQL_COUNT_SUBMITTED, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, out[0].seq);
    sqlite3_bind_int64(st, 2, out[n - 1].seq);
    return store_step_done(st);
}

ty_err store_jobs_insert(store *s, store_conn *w, const store_job_new *jobs, size_t n,
                         store_job *out)
{
    int64_t now = ty_time_now_ms();
    ty_err e = sync_idgen(s, w);
    return e == TY_OK ? insert_jobs(s, w, jobs, n, now, out) : e;
}

ty_err store_submit_apply(store *s, store_conn *w, store_op *op)
{
    int64_t now = ty_time_now_ms();
    sqlite3_stmt *st = NULL;
    ty_err e = TY_OK;
    if (op->u.submit.idem_key) {
        int found;
        if ((e = idem_lookup(w, op, now, &found)) != TY_OK)
            goto out;
        if (found) {
            op->u.submit.replayed = 1;
            goto out;
        }
    }
    if ((e = sync_idgen(s, w)) != TY_OK)
        goto out;
    if ((e = insert_jobs(s, w, op->u.submit.jobs, op->u.submit.n, now, op->u.submit.out)) !=
        TY_OK) {
        /* Whatever the constraint, the input was at fault: no row conflicts on ids. */
        if (e == TY_EEXISTS)
            e = TY_EINVAL;
        goto out;
    }
    if (op->u.submit.idem_key) {
        if ((e = store_conn_stmt(w, SQL_IDEM_PUT, 0, &st)) != TY_OK)
            goto out;
        store_bind_text(st, 1, op->u.submit.idem_key);
        sqlite3_bind_blob(st, 2, op->u.submit.body_hash, 32, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, op->u.submit.out[0].seq);
        sqlite3_bind_int64(st, 4, (int64_t)op->u.submit.n);
        sqlite3_bind_int64(st, 5, now);
        if ((e = store_step_done(st)) != TY_OK)
            goto out;
    }
    op->new_pending = op->u.submit.n;
    op->wrote_events = 1;
out:
    return e;
}

/* Reads the jobs with seq in [first, first + n) from a read connection. */
static ty_err read_range(store *s, int64_t first, int64_t n, store_job **out, size_t *nout)
{
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_JOBS_RANGE, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, first);
        sqlite3_bind_int64(st, 2, first + n);
        e = store_collect(st, sizeof(store_job), store_job_from_row, &v);
    }
    store_reader_release(s, c);
    if (e == TY_OK && v.n != (size_t)n)
        e = TY_ENOTFOUND; /* the recorded jobs are gone */
    if (e != TY_OK) {
        store_jobs_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

ty_err store_jobs_submit(store *s, const store_job_new *jobs, size_t n, const char *idem_key,
                         const unsigned char body_hash[32], store_job **out, size_t *nout,
                         int *replayed)
{
    ty_err e = TY_OK;
    store_job *res = NULL;
    size_t nres = 0;
    if (replayed)
        *replayed = 0;
    if (!s || !jobs || n == 0 || !out || !nout || (idem_key && !body_hash))
        return TY_EINVAL;
    if (!(res = calloc(n, sizeof *res)))
        return TY_ENOMEM;
    store_op op = {.kind = STORE_OP_SUBMIT};
    op.u.submit.jobs = jobs;
    op.u.submit.n = n;
    op.u.submit.idem_key = idem_key;
    op.u.submit.body_hash = body_hash;
    op.u.submit.out = res;
    if ((e = store_writer_run(s, &op)) != TY_OK)
        goto out;
    if (op.u.submit.replayed) {
        free(res);
        res = NULL;
        if ((e = read_range(s, op.u.submit.first_seq, op.u.submit.njobs, &res, &nres)) != TY_OK)
            goto out;
        if (replayed)
            *replayed = 1;
        goto out;
    }
    /* Committed; the copies are made here, off the writer thread. */
    for (nres = 0; nres < n; nres++) {
        store_job *j = &res[nres];
        const char *team = jobs[nres].team ? jobs[nres].team : STORE_TEAM_DEFAULT;
        if (!(j->name = strdup(jobs[nres].name)) || !(j->queue = strdup(jobs[nres].queue)) ||
            !(j->spec_json = strdup(jobs[nres].spec_json)) || !(j->team = strdup(team)) ||
            (jobs[nres].owner && !(j->owner = strdup(jobs[nres].owner)))) {
            nres++;
            e = TY_ENOMEM;
            goto out;
        }
    }
out:
    if (e != TY_OK) {
        store_jobs_free(res, nres);
        res = NULL;
        nres = 0;
    }
    *out = res;
    *nout = nres;
    return e;
}

/* ---- reads --------------------------------------------------------------- */

ty_err store_job_get(store *s, const char *id, store_job **out)
{
    if (!s || !id || !out)
        return TY_EINVAL;
    *out = NULL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_job *job = calloc(1, sizeof *job);
    if (!job)
        return TY_ENOMEM;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_job_load(c, id, job);
    store_reader_release(s, c);
    if (e != TY_OK)
        free(job);
    else
        *out = job;
    return e;
}

ty_err store_job_visible(store *s, const char *id, const char *team)
{
    if (!s || !id)
        return TY_EINVAL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_JOB_VISIBLE, 0, &st);
    if (e == TY_OK) {
        store_bind_text(st, 1, id);
        if (team)
            store_bind_text(st, 2, team);
        int rc = sqlite3_step(st);
        e = rc == SQLITE_ROW ? TY_OK : rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
        sqlite3_reset(st);
    }
    store_reader_release(s, c);
    return e;
}

static ty_err event_from_row(sqlite3_stmt *st, void *item)
{
    store_event *x = item;
    x->seq = sqlite3_column_int64(st, 0);
    x->time_ms = sqlite3_column_int64(st, 1);
    x->from = store_column_state(st, 2);
    x->to = store_column_state(st, 3);
    if (!(x->reason = store_column_dup(st, 4)) || !(x->message = store_column_dup(st, 5)))
        return TY_ENOMEM;
    return TY_OK;
}

ty_err store_job_events(store *s, const char *id, store_event **out, size_t *nout)
{
    if (!s || !id || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    ty_err e = store_read_rows(s, SQL_EVENTS, id, sizeof(store_event), event_from_row, &v);
    if (e == TY_OK && v.n == 0)
        e = TY_ENOTFOUND; /* every job has at least its creation event */
    if (e != TY_OK) {
        store_events_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

/* ---- transitions --------------------------------------------------------- */

ty_err store_job_move(store_conn *w, store_job *job, job_state to, const char *reason,
                      const char *message)
{
    job_state cur = job->state;
    if (!job_state_transition_allowed(cur, to)) {
        TY_LOG(TY_LOG_ERROR, "store: illegal job transition refused", "{s:s,s:s,s:s}", "job_id",
               job->id, "from", job_state_name(cur), "to", job_state_name(to));
        return TY_EINTERNAL;
    }
    int64_t now = ty_time_now_ms();
    if (now < job->updated_at_ms)
        now = job->updated_at_ms; /* keep history ordered if the clock steps back */
    int attempt = to == JOB_STARTING ? job->attempt + 1 : job->attempt;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_UPDATE_STATE, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job->seq);
    sqlite3_bind_int(st, 2, (int)to);
    sqlite3_bind_int(st, 3, attempt);
    sqlite3_bind_int64(st, 4, now);
    if ((e = store_step_done(st)) != TY_OK ||
        (e = insert_event(w, job->seq, now, cur, to, reason, message)) != TY_OK)
        return e;
    /* A job that ended has nothing left to report: its tokens die with this commit. */
    if (job_state_is_terminal(to) && (e = store_job_tokens_revoke(w, job->seq)) != TY_OK)
        return e;
    job->state = to;
    job->attempt = attempt;
    job->updated_at_ms = now;
    return TY_OK;
}

ty_err store_job_note(store_conn *w, const store_job *job, const char *reason,
                      const char *message)
{
    int64_t now = ty_time_now_ms();
    if (now < job->updated_at_ms)
        now = job->updated_at_ms; /* keep history ordered if the clock steps back */
    return insert_event(w, job->seq, now, job->state, job->state, reason, message);
}

ty_err store_transition_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    store_job job = {0};
    int have_job = 0;
    ty_err e = store_job_load(w, op->u.transition.id, &job);
    if (e != TY_OK)
        goto out;
    have_job = 1;

    job_state cur = job.state, to = cur;
    if ((e = op->u.transition.decide(cur, &to, op->u.transition.ud)) != TY_OK) {
        op->u.transition.decide_failed = 1;
        goto out;
    }
    if (to == cur)
        goto out;
    if ((e = store_job_move(w, &job, to, op->u.transition.reason, op->u.transition.message)) !=
        TY_OK)
        goto out;
    store_op_moved(op, cur, to);
out:
    if (have_job) {
        int keep = op->u.transition.want_out &&
                   (e == TY_OK || (e == TY_ECONFLICT && op->u.transition.decide_failed));
        if (keep && (op->u.transition.out = malloc(sizeof *op->u.transition.out))) {
            *op->u.transition.out = job; /* the strings move to the copy */
        } else {
            if (keep)
                e = TY_ENOMEM;
            store_job_clear(&job);
        }
    }
    return e;
}

ty_err store_job_transition(store *s, const char *id, store_decide_fn decide, void *ud,
                            const char *reason, const char *message, store_job **out)
{
    if (out)
        *out = NULL;
    if (!s || !id || !decide)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TRANSITION};
    op.u.transition.id = id;
    op.u.transition.decide = decide;
    op.u.transition.ud = ud;
    op.u.transition.reason = reason;
    op.u.transition.message = message;
    op.u.transition.want_out = out != NULL;
    ty_err e = store_writer_run(s, &op);
    store_job *job = op.u.transition.out;
    if (job && (e == TY_OK || (e == TY_ECONFLICT && op.u.transition.decide_failed))) {
        *out = job;
    } else {
        store_jobs_free(job, job ? 1 : 0);
    }
    return e;
}
