/*
 * store_sweeps.c - sweeps: a search over a job template whose trials are
 * ordinary jobs.
 *
 * A sweep is one row of sweeps and one row of sweep_trials per trial (its
 * index, its job, its parameter values). Creating a sweep is one writer
 * operation (STORE_OP_SWEEP_CREATE): the sweep row, every trial's job through
 * the same insertion as a submission (store_jobs_insert(), so a trial has its
 * labels and its "Submitted" event like any job) and the trial rows commit
 * together or not at all. Each trial job also carries its sweep's seq and
 * parallelism (jobs.sweep, jobs.sweep_parallelism), so the scheduler can
 * bound the trials active at once from the rows it already reads.
 *
 * Cancelling a sweep is one writer operation too (STORE_OP_SWEEP_CANCEL):
 * every trial that has not ended moves as a job cancel would move it, and the
 * sweep records when it was cancelled (its state then reads "cancelled" once
 * every trial ended). A second cancel finds nothing left to move.
 *
 * A trial's objective value is the last value it reported of the sweep's
 * metric: the point of the highest step, one seek in metrics' primary key
 * (job_seq, name_id, step).
 *
 * Median early stopping keeps only its facts here: store_sweep_stop_facts()
 * reads, in one snapshot, the sweep's rule, the trial's latest point of the
 * objective and each succeeded trial's last value at or before that step;
 * store_sweep_stop_trial() moves a trial as a cancel would. The rule itself
 * is scheduler/early_stop.h's, and scheduler/sweep_stop.c joins the three.
 * A job outside sweeps with the rule costs one seek.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"

#define SWEEPS_MAX_LIMIT 1000

static const char SQL_SWEEP_INSERT[] =
    "INSERT INTO sweeps (id, name, algorithm, parallelism, metric, maximize, stop_min_trials, "
    "stop_min_step, body, created_ms, team, owner) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
static const char SQL_TRIAL_INSERT[] =
    "INSERT INTO sweep_trials (sweep_seq, trial, job_seq, params) VALUES (?1, ?2, ?3, ?4)";
static const char SQL_JOB_SET_SWEEP[] =
    "UPDATE jobs SET sweep = ?2, sweep_parallelism = ?3 WHERE seq = ?1";
#define SWEEP_COLUMNS                                                                              \
    "seq, id, name, algorithm, parallelism, metric, maximize, stop_min_trials, stop_min_step, "   \
    "created_ms, cancelled_ms, (SELECT count(*) FROM sweep_trials AS t WHERE t.sweep_seq = "      \
    "sweeps.seq), team, owner"
static const char SQL_SWEEP_BY_ID[] = "SELECT " SWEEP_COLUMNS " FROM sweeps WHERE id = ?1";
static const char SQL_SWEEPS_PAGE[] =
    "SELECT " SWEEP_COLUMNS " FROM sweeps WHERE seq < ?1 ORDER BY seq DESC LIMIT ?2";
/* One team's page: a range of sweeps_team = (team, seq), newest first. */
static const char SQL_SWEEPS_TEAM_PAGE[] =
    "SELECT " SWEEP_COLUMNS " FROM sweeps INDEXED BY sweeps_team "
    "WHERE team = ?3 AND seq < ?1 ORDER BY seq DESC LIMIT ?2";
static const char SQL_SWEEP_VISIBLE[] =
    "SELECT 1 FROM sweeps WHERE id = ?1 AND (?2 IS NULL OR team = ?2)";
static const char SQL_SWEEP_COUNTS[] =
    "SELECT j.state, count(*) FROM sweep_trials AS t JOIN jobs AS j ON j.seq = t.job_seq "
    "WHERE t.sweep_seq = ?1 GROUP BY j.state";
static const char SQL_METRIC_ID[] = "SELECT id FROM metric_names WHERE name = ?1";
/* Each trial with the point of its highest step of metric ?2 (NULLs when it reported none). */
static const char SQL_SWEEP_TRIALS[] =
    "SELECT t.trial, j.id, j.state, t.params, m.step, m.value "
    "FROM sweep_trials AS t JOIN jobs AS j ON j.seq = t.job_seq "
    "LEFT JOIN metrics AS m ON m.job_seq = t.job_seq AND m.name_id = ?2 AND m.step = "
    "(SELECT max(x.step) FROM metrics AS x WHERE x.job_seq = t.job_seq AND x.name_id = ?2) "
    "WHERE t.sweep_seq = ?1 ORDER BY t.trial";
static const char SQL_SWEEP_OPEN_TRIALS[] =
    "SELECT j.id FROM sweep_trials AS t JOIN jobs AS j ON j.seq = t.job_seq "
    "WHERE t.sweep_seq = ?1 AND j.state NOT IN (6, 7, 8) ORDER BY t.trial";
static const char SQL_SWEEP_SET_CANCELLED[] =
    "UPDATE sweeps SET cancelled_ms = coalesce(cancelled_ms, ?2) WHERE seq = ?1";
/* Early stopping: the job's sweep, when the sweep has the rule. */
static const char SQL_STOP_RULE[] =
    "SELECT j.seq, s.seq, s.metric, s.maximize, s.stop_min_trials, s.stop_min_step "
    "FROM jobs AS j JOIN sweeps AS s ON s.seq = j.sweep "
    "WHERE j.id = ?1 AND s.stop_min_trials IS NOT NULL";
static const char SQL_LAST_POINT[] =
    "SELECT step, value FROM metrics WHERE job_seq = ?1 AND name_id = ?2 "
    "ORDER BY step DESC LIMIT 1";
/* Each succeeded trial's last value of metric ?2 at a step <= ?3 (NULL when it has none). */
static const char SQL_DONE_VALUES_AT[] =
    "SELECT (SELECT m.value FROM metrics AS m WHERE m.job_seq = j.seq AND m.name_id = ?2 "
    "AND m.step <= ?3 ORDER BY m.step DESC LIMIT 1) "
    "FROM sweep_trials AS t JOIN jobs AS j ON j.seq = t.job_seq "
    "WHERE t.sweep_seq = ?1 AND j.state = 6";

/* ---- ids ------------------------------------------------------------------- */

ty_err store_sweep_id_new(char id[STORE_ID_LEN + 1])
{
    unsigned char r[10];
    ty_err e = ty_random_bytes(r, sizeof r);
    if (e != TY_OK)
        return e;
    uint64_t rhi = (uint64_t)r[0] << 8 | r[1], rlo = 0;
    for (int i = 2; i < 10; i++)
        rlo = rlo << 8 | r[i];
    int64_t ms = ty_time_now_ms();
    if (ms < 0 || ms > STORE_ID_MAX_MS)
        return TY_EINTERNAL;
    store_id_encode(ms, rhi, rlo, id);
    return TY_OK;
}

/* ---- creation (writer thread) ---------------------------------------------- */

static ty_err create_apply(store *s, store_conn *w, store_op *op)
{
    const store_sweep_new *in = op->u.sweep.in;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_SWEEP_INSERT, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, in->id);
    store_bind_text(st, 2, in->name);
    store_bind_text(st, 3, in->algorithm);
    sqlite3_bind_int(st, 4, in->parallelism);
    store_bind_text(st, 5, in->metric);
    sqlite3_bind_int(st, 6, in->maximize ? 1 : 0);
    if (in->stop_min_trials >= 0) {
        sqlite3_bind_int(st, 7, in->stop_min_trials);
        sqlite3_bind_int64(st, 8, in->stop_min_step);
    }
    store_bind_text(st, 9, in->body_json);
    sqlite3_bind_int64(st, 10, ty_time_now_ms());
    store_bind_text(st, 11, in->team ? in->team : STORE_TEAM_DEFAULT);
    if (in->owner)
        store_bind_text(st, 12, in->owner);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    int64_t sweep_seq = sqlite3_last_insert_rowid(w->db);
    if ((e = store_jobs_insert(s, w, in->trials, in->ntrials, op->u.sweep.jobs)) != TY_OK)
        return e == TY_EEXISTS ? TY_EINVAL : e; /* the input was at fault, as in a submission */
    for (size_t i = 0; i < in->ntrials; i++) {
        int64_t job_seq = op->u.sweep.jobs[i].seq;
        if ((e = store_conn_stmt(w, SQL_JOB_SET_SWEEP, 0, &st)) != TY_OK)
            return e;
        sqlite3_bind_int64(st, 1, job_seq);
        sqlite3_bind_int64(st, 2, sweep_seq);
        sqlite3_bind_int(st, 3, in->parallelism);
        if ((e = store_step_done(st)) != TY_OK)
            return e;
        if ((e = store_conn_stmt(w, SQL_TRIAL_INSERT, 0, &st)) != TY_OK)
            return e;
        sqlite3_bind_int64(st, 1, sweep_seq);
        sqlite3_bind_int64(st, 2, (int64_t)i);
        sqlite3_bind_int64(st, 3, job_seq);
        store_bind_text(st, 4, in->params_json[i]);
        if ((e = store_step_done(st)) != TY_OK)
            return e;
    }
    op->new_pending = in->ntrials;
    op->wrote_events = 1;
    return TY_OK;
}

ty_err store_sweep_create(store *s, const store_sweep_new *in)
{
    if (!s || !in || !in->id || !in->name || !in->algorithm || !in->metric || !in->body_json ||
        !in->trials || !in->params_json || in->ntrials == 0 || in->parallelism < 1)
        return TY_EINVAL;
    for (size_t i = 0; i < in->ntrials; i++)
        if (!in->params_json[i])
            return TY_EINVAL;
    store_job *jobs = calloc(in->ntrials, sizeof *jobs);
    if (!jobs)
        return TY_ENOMEM;
    store_op op = {.kind = STORE_OP_SWEEP_CREATE};
    op.u.sweep.in = in;
    op.u.sweep.jobs = jobs; /* the writer fills only seq, id, state and times: nothing to free */
    ty_err e = store_writer_run(s, &op);
    free(jobs);
    return e;
}

/* ---- cancel (writer thread) ------------------------------------------------- */

static ty_err cancel_apply(store_conn *w, store_op *op)
{
    sqlite3_stmt *st = NULL;
    store_vec ids = {0};
    ty_err e = store_conn_stmt(w, SQL_SWEEP_BY_ID, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, op->u.sweep.id);
    int rc = sqlite3_step(st);
    int64_t seq = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
        return TY_ENOTFOUND;
    if (rc != SQLITE_ROW)
        return store_sqlite_err(rc);
    if ((e = store_conn_stmt(w, SQL_SWEEP_SET_CANCELLED, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, seq);
    sqlite3_bind_int64(st, 2, ty_time_now_ms());
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    /* The ids first: moving a job while the statement walks jobs would disturb the walk. */
    if ((e = store_conn_stmt(w, SQL_SWEEP_OPEN_TRIALS, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, seq);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (ids.n == ids.cap) {
            size_t cap = ids.cap ? ids.cap * 2 : 16;
            void *grown = realloc(ids.items, cap * (STORE_ID_LEN + 1));
            if (!grown) {
                e = TY_ENOMEM;
                break;
            }
            ids.items = grown;
            ids.cap = cap;
        }
        const unsigned char *id = sqlite3_column_text(st, 0);
        if (!id || sqlite3_column_bytes(st, 0) != STORE_ID_LEN) {
            e = TY_ESCHEMA;
            break;
        }
        memcpy((char *)ids.items + ids.n++ * (STORE_ID_LEN + 1), id, STORE_ID_LEN + 1);
    }
    if (e == TY_OK && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    for (size_t i = 0; e == TY_OK && i < ids.n; i++) {
        store_job job = {0};
        if ((e = store_job_load(w, (char *)ids.items + i * (STORE_ID_LEN + 1), &job)) != TY_OK)
            break;
        job_state cur = job.state, to = cur;
        if (!job_state_cancel_conflicts(cur) && job_state_cancel_target(cur, &to) && to != cur) {
            e = store_job_move(w, &job, to, "Cancelled", op->u.sweep.message);
            if (e == TY_OK) {
                store_op_moved(op, cur, to);
                op->u.sweep.cancelled++;
            }
        }
        store_job_clear(&job);
    }
    free(ids.items);
    return e;
}

ty_err store_sweep_apply(store *s, store_conn *w, store_op *op)
{
    if (op->kind == STORE_OP_SWEEP_CREATE)
        return create_apply(s, w, op);
    return cancel_apply(w, op);
}

ty_err store_sweep_cancel(store *s, const char *id, const char *message, size_t *ncancelled)
{
    if (ncancelled)
        *ncancelled = 0;
    if (!s || !id)
        return TY_EINVAL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_op op = {.kind = STORE_OP_SWEEP_CANCEL};
    op.u.sweep.id = id;
    op.u.sweep.message = message ? message : "";
    ty_err e = store_writer_run(s, &op);
    if (e == TY_OK && ncancelled)
        *ncancelled = op.u.sweep.cancelled;
    return e;
}

/* ---- reads ----------------------------------------------------------------- */

/* Frees the members a row of SWEEP_COLUMNS set. */
static void sweep_clear_row(store_sweep *x)
{
    free(x->name);
    free(x->algorithm);
    free(x->metric);
    free(x->team);
    free(x->owner);
}

void store_sweeps_free(store_sweep *sw, size_t n)
{
    if (!sw)
        return;
    for (size_t i = 0; i < n; i++) {
        sweep_clear_row(&sw[i]);
        for (size_t k = 0; k < sw[i].ntrials_read; k++)
            free(sw[i].trials[k].params_json);
        free(sw[i].trials);
    }
    free(sw);
}

/* A row of SWEEP_COLUMNS; a store_row_fn. */
static ty_err sweep_from_row(sqlite3_stmt *st, void *item)
{
    store_sweep *x = item;
    const unsigned char *id = sqlite3_column_text(st, 1);
    if (!id || sqlite3_column_bytes(st, 1) != STORE_ID_LEN)
        return TY_ESCHEMA;
    x->seq = sqlite3_column_int64(st, 0);
    memcpy(x->id, id, STORE_ID_LEN + 1);
    x->parallelism = sqlite3_column_int(st, 4);
    x->maximize = sqlite3_column_int(st, 6);
    x->stop_min_trials = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 7);
    x->stop_min_step = sqlite3_column_int64(st, 8);
    x->created_at_ms = sqlite3_column_int64(st, 9);
    x->cancelled_at_ms = sqlite3_column_int64(st, 10);
    x->ntrials = sqlite3_column_int64(st, 11);
    if (!(x->name = store_column_dup(st, 2)) || !(x->algorithm = store_column_dup(st, 3)) ||
        !(x->metric = store_column_dup(st, 5)) || !(x->team = store_column_dup(st, 12)) ||
        (sqlite3_column_type(st, 13) != SQLITE_NULL && !(x->owner = store_column_dup(st, 13))))
        return TY_ENOMEM;
    return TY_OK;
}

/* Fills sw->counts from its trials' states. */
static ty_err read_counts(store_conn *c, store_sweep *sw)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_SWEEP_COUNTS, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, sw->seq);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int state = sqlite3_column_int(st, 0);
        if (state >= 0 && state < JOB_STATE_COUNT)
            sw->counts[state] = sqlite3_column_int64(st, 1);
    }
    e = rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

/* The id of metric `name`, -1 when no job ever reported it. */
static ty_err metric_id(store_conn *c, const char *name, int64_t *id)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_METRIC_ID, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    *id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    e = rc == SQLITE_ROW || rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

static ty_err trial_from_row(sqlite3_stmt *st, void *item)
{
    store_sweep_trial *t = item;
    const unsigned char *id = sqlite3_column_text(st, 1);
    if (!id || sqlite3_column_bytes(st, 1) != STORE_ID_LEN)
        return TY_ESCHEMA;
    t->index = sqlite3_column_int64(st, 0);
    memcpy(t->job_id, id, STORE_ID_LEN + 1);
    t->state = store_column_state(st, 2);
    t->has_value = sqlite3_column_type(st, 5) != SQLITE_NULL;
    t->step = sqlite3_column_int64(st, 4);
    t->value = sqlite3_column_double(st, 5);
    return (t->params_json = store_column_dup(st, 3)) ? TY_OK : TY_ENOMEM;
}

static ty_err read_trials(store_conn *c, store_sweep *sw)
{
    int64_t name_id;
    sqlite3_stmt *st = NULL;
    store_vec v = {0};
    ty_err e = metric_id(c, sw->metric, &name_id);
    if (e == TY_OK)
        e = store_conn_stmt(c, SQL_SWEEP_TRIALS, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, sw->seq);
        sqlite3_bind_int64(st, 2, name_id);
        e = store_collect(st, sizeof(store_sweep_trial), trial_from_row, &v);
    }
    /* Counted before filled: the free function releases whatever was read. */
    sw->trials = v.items;
    sw->ntrials_read = v.n;
    for (size_t i = 0; e == TY_OK && i < v.n; i++) {
        job_state s = sw->trials[i].state;
        if (s >= 0 && s < JOB_STATE_COUNT)
            sw->counts[s]++;
    }
    return e;
}

ty_err store_sweep_get(store *s, const char *id, store_sweep **out)
{
    if (!s || !id || !out)
        return TY_EINVAL;
    *out = NULL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto release;
    if ((e = store_conn_stmt(c, SQL_SWEEP_BY_ID, 0, &st)) == TY_OK) {
        store_bind_text(st, 1, id);
        e = store_collect(st, sizeof(store_sweep), sweep_from_row, &v);
    }
    if (e == TY_OK && v.n != 1)
        e = TY_ENOTFOUND;
    if (e == TY_OK)
        e = read_trials(c, v.items);
    store_read_end(c);
release:
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_sweeps_free(v.items, v.n);
        return e;
    }
    *out = v.items;
    return TY_OK;
}

ty_err store_sweeps_list(store *s, const char *team, int64_t before_seq, int limit,
                         store_sweep **out, size_t *nout, int64_t *next_before_seq)
{
    if (!s || !out || !nout || !next_before_seq)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    *next_before_seq = 0;
    if (limit < 1 || limit > SWEEPS_MAX_LIMIT || before_seq < 0)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    store_vec v = {0};
    sqlite3_stmt *st = NULL;
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto release;
    if ((e = store_conn_stmt(c, team ? SQL_SWEEPS_TEAM_PAGE : SQL_SWEEPS_PAGE, 0, &st)) ==
        TY_OK) {
        if (team)
            store_bind_text(st, 3, team);
        sqlite3_bind_int64(st, 1, before_seq > 0 ? before_seq : INT64_MAX);
        sqlite3_bind_int(st, 2, limit + 1); /* one more tells whether a next page exists */
        e = store_collect(st, sizeof(store_sweep), sweep_from_row, &v);
    }
    if (e == TY_OK && v.n > (size_t)limit) {
        store_sweep *items = v.items;
        *next_before_seq = items[limit - 1].seq;
        sweep_clear_row(&items[limit]);
        v.n = (size_t)limit;
    }
    for (size_t i = 0; e == TY_OK && i < v.n; i++)
        e = read_counts(c, &((store_sweep *)v.items)[i]);
    store_read_end(c);
release:
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_sweeps_free(v.items, v.n);
        *next_before_seq = 0;
        return e;
    }
    *out = v.items;
    *nout = v.n;
    return TY_OK;
}

const char *store_sweep_state(const store_sweep *sw)
{
    for (int st = 0; st < JOB_STATE_COUNT; st++)
        if (sw->counts[st] > 0 && !job_state_is_terminal((job_state)st))
            return "running";
    return sw->cancelled_at_ms > 0 ? "cancelled" : "finished";
}

/* ---- median early stopping's facts ---------------------------------------- */

/* Appends v to f->done, doubling its room. */
static ty_err facts_push(store_stop_facts *f, size_t *cap, double v)
{
    if (f->ndone == *cap) {
        size_t c2 = *cap ? *cap * 2 : 16;
        double *g = realloc(f->done, c2 * sizeof *g);
        if (!g)
            return TY_ENOMEM;
        f->done = g;
        *cap = c2;
    }
    f->done[f->ndone++] = v;
    return TY_OK;
}

/* Reads the facts of job `id` on c (in one read transaction) into *f (zeroed by the caller). */
static ty_err stop_facts_read(store_conn *c, const char *id, store_stop_facts *f)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    ty_err e = store_conn_stmt(c, SQL_STOP_RULE, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc); /* no rule for this job */
    }
    int64_t job_seq = sqlite3_column_int64(st, 0), sweep_seq = sqlite3_column_int64(st, 1);
    const unsigned char *metric = sqlite3_column_text(st, 2);
    snprintf(f->metric, sizeof f->metric, "%s", metric ? (const char *)metric : "");
    f->maximize = sqlite3_column_int(st, 3);
    f->min_trials = sqlite3_column_int(st, 4);
    f->min_step = sqlite3_column_int64(st, 5);
    f->rule = 1;
    sqlite3_reset(st);

    int64_t name_id;
    if ((e = metric_id(c, f->metric, &name_id)) != TY_OK || name_id < 0)
        return e; /* nobody ever reported the metric */
    if ((e = store_conn_stmt(c, SQL_LAST_POINT, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, name_id);
    rc = sqlite3_step(st);
    f->has_point = rc == SQLITE_ROW;
    f->step = f->has_point ? sqlite3_column_int64(st, 0) : 0;
    f->value = f->has_point ? sqlite3_column_double(st, 1) : 0;
    sqlite3_reset(st);
    if (rc != SQLITE_ROW)
        return rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
    if (f->step < f->min_step)
        return TY_OK; /* the sweep's rule does not look here: the walk is not paid for */

    if ((e = store_conn_stmt(c, SQL_DONE_VALUES_AT, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, sweep_seq);
    sqlite3_bind_int64(st, 2, name_id);
    sqlite3_bind_int64(st, 3, f->step);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL)
            continue; /* it reported nothing up to this step */
        if ((e = facts_push(f, &cap, sqlite3_column_double(st, 0))) != TY_OK)
            break;
    }
    if (e == TY_OK && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

void store_stop_facts_clear(store_stop_facts *f)
{
    if (!f)
        return;
    free(f->done);
    *f = (store_stop_facts){0};
}

ty_err store_sweep_stop_facts(store *s, const char *id, store_stop_facts *f)
{
    if (f)
        *f = (store_stop_facts){0};
    if (!s || !id || !f)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e == TY_OK) {
        e = stop_facts_read(c, id, f);
        store_read_end(c);
    }
    store_reader_release(s, c);
    if (e != TY_OK)
        store_stop_facts_clear(f);
    return e;
}

/* Inside the transaction: an open trial stops as a cancel would stop it. */
static ty_err decide_stop(job_state cur, job_state *to, void *ud)
{
    *to = cur;
    if (!job_state_cancel_conflicts(cur))
        job_state_cancel_target(cur, to);
    *(int *)ud = *to != cur;
    return TY_OK;
}

ty_err store_sweep_stop_trial(store *s, const char *id, const char *reason, const char *message,
                              int *stopped)
{
    if (stopped)
        *stopped = 0;
    if (!s || !id || !reason || !message)
        return TY_EINVAL;
    int moved = 0;
    ty_err e = store_job_transition(s, id, decide_stop, &moved, reason, message, NULL);
    if (e == TY_OK && stopped)
        *stopped = moved;
    return e;
}

ty_err store_sweep_visible(store *s, const char *id, const char *team)
{
    if (!s || !id)
        return TY_EINVAL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_SWEEP_VISIBLE, 0, &st);
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
