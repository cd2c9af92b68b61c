/*
 * store_metrics.c - the metrics jobs report: one value per (job, name, step).
 *
 * Writes. A report is one writer operation, so the points of many jobs that
 * arrive together share one group commit and one fsync, like submissions. The
 * operation checks the job inside the transaction (unknown: TY_ENOTFOUND;
 * terminal: TY_ECONFLICT), so a report that races the job's end is either
 * committed before it or refused, never stored after it. Each distinct name of
 * the report costs two seeks (metric_names, job_metric_names); each point is
 * one insert of its primary key, or, when the step is there already, an update
 * of it: the last write wins. seq is taken for the
 * whole report from metric_seq with one UPDATE ... RETURNING, so every point
 * gets a seq above every point committed before it. The report then writes
 * one metric_batches row per series: its seq interval and the series' step
 * range, which is all the live stream needs to find the report's points.
 *
 * The caps. A job is untrusted code with a token: what it may store is bounded
 * by STORE_METRIC_MAX_SERIES names and by the store's metrics_max_points
 * points. Both are counted in job_metric_totals, one row per job read at the
 * start of a report and written at its end, in the same transaction as the
 * points: a new series and a new point (an insert, not the update of a step
 * already there) add one. The report that would cross a cap stops at the row
 * that crosses it and returns TY_ETOOLARGE; the writer rolls its savepoint
 * back, so nothing of it is stored and the count is as it was. A job at its
 * cap can still rewrite its steps.
 *
 * Retention (store_metrics_purge). A trigger sets job_metric_totals.ended_ms
 * in the transaction that ends the job; the purge takes the jobs ended before
 * the cutoff by that index and deletes their rows, at most max_rows in one
 * writer operation: points first, then stream batches, series, and last the
 * totals row, so a job half purged is found again by the next operation.
 *
 * The stream's read (store_metrics_since). The batches of the job after the
 * cursor come in last_seq order; each is one range read of its series' steps,
 * keeping the rows whose seq lies in the batch's interval and after the
 * cursor (a row rewritten by a later report has that report's seq, and comes
 * with it). Batches of different reports have disjoint intervals, so the read
 * stops at the first report past the limit; the rows are sorted by seq and
 * cut to the limit, and no row with a smaller seq can have been left behind.
 *
 * Downsampled reads. The range's first and last steps come from two seeks
 * (SQLite's min/max optimization handles one aggregate per statement), which
 * fixes the buckets' width before anything is read; then one walk of the
 * range in step order feeds them. The bucketing is done here, in C, over that
 * one walk, not in SQL: keeping each bucket's min and max *points* (their
 * steps and times, not only the values) in SQL would take a GROUP BY per
 * extreme plus a count, i.e. several walks of the same range, where C keeps
 * two points per bucket as it goes. While the walk has seen at most
 * max_points points they are kept as they are (a short series comes back
 * whole); past that they are folded into the buckets.
 */
#include "store/store_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SINCE_MAX_LIMIT 100000

static const char SQL_JOB_FOR_METRICS[] = "SELECT seq, state FROM jobs WHERE id = ?1";
static const char SQL_NAME_INSERT[] =
    "INSERT INTO metric_names (name) VALUES (?1) ON CONFLICT (name) DO NOTHING";
static const char SQL_NAME_ID[] = "SELECT id FROM metric_names WHERE name = ?1";
static const char SQL_JOB_NAME_INSERT[] =
    "INSERT OR IGNORE INTO job_metric_names (job_seq, name_id) VALUES (?1, ?2)";
static const char SQL_TOTALS[] =
    "SELECT points, series FROM job_metric_totals WHERE job_seq = ?1";
static const char SQL_TOTALS_PUT[] =
    "INSERT INTO job_metric_totals (job_seq, points, series) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (job_seq) DO UPDATE SET points = excluded.points, series = excluded.series";
static const char SQL_SEQ_TAKE[] =
    "UPDATE metric_seq SET last = last + ?1 WHERE id = 1 RETURNING last";
static const char SQL_BATCH_INSERT[] =
    "INSERT INTO metric_batches (job_seq, last_seq, name_id, first_seq, step_min, step_max) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
/* A new point is an insert; a step already stored is an update of its row: the two are told
 * apart by the insert's change count, so that only new rows count against the cap. */
static const char SQL_POINT_INSERT[] =
    "INSERT INTO metrics (job_seq, name_id, step, value, time_ms, seq) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (job_seq, name_id, step) DO NOTHING";
static const char SQL_POINT_UPDATE[] =
    "UPDATE metrics SET value = ?4, time_ms = ?5, seq = ?6 "
    "WHERE job_seq = ?1 AND name_id = ?2 AND step = ?3";

/* Retention. Each delete takes at most ?2 rows of one job through its primary key. */
static const char SQL_PURGE_NEXT[] =
    "SELECT job_seq FROM job_metric_totals WHERE ended_ms < ?1 ORDER BY ended_ms LIMIT 1";
static const char SQL_PURGE_POINTS[] =
    "DELETE FROM metrics WHERE (job_seq, name_id, step) IN "
    "(SELECT job_seq, name_id, step FROM metrics WHERE job_seq = ?1 LIMIT ?2)";
static const char SQL_PURGE_BATCHES[] =
    "DELETE FROM metric_batches WHERE (job_seq, last_seq, name_id) IN "
    "(SELECT job_seq, last_seq, name_id FROM metric_batches WHERE job_seq = ?1 LIMIT ?2)";
static const char SQL_PURGE_NAMES[] =
    "DELETE FROM job_metric_names WHERE (job_seq, name_id) IN "
    "(SELECT job_seq, name_id FROM job_metric_names WHERE job_seq = ?1 LIMIT ?2)";
static const char SQL_PURGE_TOTALS[] = "DELETE FROM job_metric_totals WHERE job_seq = ?1";
static const char SQL_PURGE_COUNT[] =
    "UPDATE job_metric_totals SET points = max(points - ?2, 0) WHERE job_seq = ?1";

static const char SQL_FIRST_STEP[] =
    "SELECT step FROM metrics WHERE job_seq = ?1 AND name_id = ?2 AND step BETWEEN ?3 AND ?4 "
    "ORDER BY step LIMIT 1";
static const char SQL_LAST_STEP[] =
    "SELECT step FROM metrics WHERE job_seq = ?1 AND name_id = ?2 AND step BETWEEN ?3 AND ?4 "
    "ORDER BY step DESC LIMIT 1";
static const char SQL_RANGE[] =
    "SELECT step, time_ms, value FROM metrics "
    "WHERE job_seq = ?1 AND name_id = ?2 AND step BETWEEN ?3 AND ?4 ORDER BY step";
static const char SQL_NAMES[] =
    "SELECT n.name FROM job_metric_names AS jm JOIN metric_names AS n ON n.id = jm.name_id "
    "WHERE jm.job_seq = ?1";
static const char SQL_BATCHES[] =
    "SELECT b.last_seq, b.first_seq, b.name_id, b.step_min, b.step_max, n.name "
    "FROM metric_batches AS b JOIN metric_names AS n ON n.id = b.name_id "
    "WHERE b.job_seq = ?1 AND b.last_seq > ?2 ORDER BY b.last_seq, b.name_id";
static const char SQL_BATCH_ROWS[] =
    "SELECT seq, step, time_ms, value FROM metrics "
    "WHERE job_seq = ?1 AND name_id = ?2 AND step BETWEEN ?3 AND ?4 AND seq > ?5 "
    "AND seq BETWEEN ?6 AND ?7";

const char *const store_metrics_sql[] = {SQL_FIRST_STEP, SQL_LAST_STEP,  SQL_RANGE, SQL_NAMES,
                                         SQL_BATCHES,    SQL_BATCH_ROWS, NULL};

/* ---- writes (writer thread) ----------------------------------------------- */

/* The id of name, inserted when new, with the job's series list kept: *series (the job's
 * count) grows by one when the name is new to the job. */
static ty_err name_id(store_conn *w, int64_t job_seq, const char *name, int64_t *id,
                      int64_t *series)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_NAME_INSERT, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, name);
    if ((e = store_step_done(st)) != TY_OK || (e = store_conn_stmt(w, SQL_NAME_ID, 0, &st)))
        return e;
    store_bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW)
        return rc == SQLITE_DONE ? TY_EINTERNAL : store_sqlite_err(rc);
    if ((e = store_conn_stmt(w, SQL_JOB_NAME_INSERT, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, *id);
    if ((e = store_step_done(st)) == TY_OK && sqlite3_changes(w->db) > 0)
        (*series)++;
    return e;
}

/* The job's totals (points, series); none yet is 0, 0. */
static ty_err totals_get(store_conn *w, int64_t job_seq, int64_t *points, int64_t *series)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_TOTALS, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    int rc = sqlite3_step(st);
    *points = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    *series = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
}

/* Writes point p of the report with seq through ins (SQL_POINT_INSERT), or, when its step is
 * there already, upd (SQL_POINT_UPDATE); *added is 1 when it is a new row. */
static ty_err point_put(store_conn *w, sqlite3_stmt *ins, sqlite3_stmt *upd, int64_t job_seq,
                        int64_t name_id, const store_metric_in *p, int64_t seq, int *added)
{
    sqlite3_stmt *st = ins;
    for (int pass = 0; pass < 2; pass++, st = upd) {
        sqlite3_bind_int64(st, 1, job_seq);
        sqlite3_bind_int64(st, 2, name_id);
        sqlite3_bind_int64(st, 3, p->step);
        sqlite3_bind_double(st, 4, p->value);
        sqlite3_bind_int64(st, 5, p->time_ms);
        sqlite3_bind_int64(st, 6, seq);
        ty_err e = store_step_done(st);
        if (e != TY_OK)
            return e;
        if (sqlite3_changes(w->db) > 0) {
            *added = pass == 0;
            return TY_OK;
        }
    }
    return TY_EINTERNAL; /* neither inserted nor there to update */
}

ty_err store_metrics_apply(store *s, store_conn *w, store_op *op)
{
    sqlite3_stmt *st = NULL;
    int64_t job_seq = 0, last = 0, *ids = NULL, *lo = NULL, *hi = NULL;
    int64_t points = 0, series = 0, points0, series0;
    size_t nn = op->u.metrics.nnames;
    ty_err e = store_conn_stmt(w, SQL_JOB_FOR_METRICS, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, op->u.metrics.id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        job_seq = sqlite3_column_int64(st, 0);
        if (job_state_is_terminal((job_state)sqlite3_column_int(st, 1)))
            e = TY_ECONFLICT;
    } else {
        e = rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    if (e != TY_OK)
        return e;
    if (!(ids = malloc(nn * sizeof *ids)) || !(lo = malloc(nn * sizeof *lo)) ||
        !(hi = malloc(nn * sizeof *hi))) {
        e = TY_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nn; i++) {
        lo[i] = INT64_MAX;
        hi[i] = -1; /* a name no point uses gets no batch */
    }
    if ((e = totals_get(w, job_seq, &points, &series)) != TY_OK)
        goto out;
    points0 = points;
    series0 = series;
    for (size_t i = 0; i < nn && e == TY_OK; i++)
        e = name_id(w, job_seq, op->u.metrics.names[i], &ids[i], &series);
    if (e == TY_OK && series > STORE_METRIC_MAX_SERIES) {
        op->u.metrics.refusal =
            (store_metrics_refusal){.points = 0, .limit = STORE_METRIC_MAX_SERIES,
                                    .stored = series0};
        e = TY_ETOOLARGE;
    }
    if (e != TY_OK || (e = store_conn_stmt(w, SQL_SEQ_TAKE, 0, &st)) != TY_OK)
        goto out;
    sqlite3_bind_int64(st, 1, (int64_t)op->u.metrics.n);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        last = sqlite3_column_int64(st, 0);
    rc = rc == SQLITE_ROW ? sqlite3_step(st) : rc; /* RETURNING: done after the one row */
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        e = store_sqlite_err(rc) != TY_OK ? store_sqlite_err(rc) : TY_ESCHEMA;
        goto out;
    }
    int64_t seq = last - (int64_t)op->u.metrics.n;
    sqlite3_stmt *ins = NULL, *upd = NULL; /* two cached statements, held for the loop */
    if ((e = store_conn_stmt(w, SQL_POINT_INSERT, 0, &ins)) != TY_OK ||
        (e = store_conn_stmt(w, SQL_POINT_UPDATE, 0, &upd)) != TY_OK)
        goto out;
    for (size_t i = 0; i < op->u.metrics.n; i++) {
        const store_metric_in *p = &op->u.metrics.points[i];
        int added = 0;
        if ((e = point_put(w, ins, upd, job_seq, ids[p->name], p, ++seq, &added)) != TY_OK)
            goto out;
        if (added && ++points > s->opt.metrics_max_points) {
            /* The first new row past the cap: the savepoint's rollback takes back the rest. */
            op->u.metrics.refusal = (store_metrics_refusal){
                .points = 1, .limit = s->opt.metrics_max_points, .stored = points0};
            e = TY_ETOOLARGE;
            goto out;
        }
        if (p->step < lo[p->name])
            lo[p->name] = p->step;
        if (p->step > hi[p->name])
            hi[p->name] = p->step;
    }
    if ((e = store_conn_stmt(w, SQL_BATCH_INSERT, 0, &st)) != TY_OK)
        goto out;
    for (size_t i = 0; i < nn; i++) {
        if (hi[i] < 0)
            continue;
        sqlite3_bind_int64(st, 1, job_seq);
        sqlite3_bind_int64(st, 2, last);
        sqlite3_bind_int64(st, 3, ids[i]);
        sqlite3_bind_int64(st, 4, last - (int64_t)op->u.metrics.n + 1);
        sqlite3_bind_int64(st, 5, lo[i]);
        sqlite3_bind_int64(st, 6, hi[i]);
        if ((e = store_step_done(st)) != TY_OK)
            goto out;
    }
    if (points != points0 || series != series0) {
        if ((e = store_conn_stmt(w, SQL_TOTALS_PUT, 0, &st)) != TY_OK)
            goto out;
        sqlite3_bind_int64(st, 1, job_seq);
        sqlite3_bind_int64(st, 2, points);
        sqlite3_bind_int64(st, 3, series);
        if ((e = store_step_done(st)) != TY_OK)
            goto out;
    }
    op->wrote_metrics = 1;
out:
    free(ids);
    free(lo);
    free(hi);
    return e;
}

ty_err store_metrics_append(store *s, const char *id, const char *const *names, size_t nnames,
                            const store_metric_in *points, size_t n)
{
    return store_metrics_append_why(s, id, names, nnames, points, n, NULL);
}

int64_t store_metrics_max_points(const store *s)
{
    return s ? s->opt.metrics_max_points : STORE_METRIC_DEFAULT_MAX_POINTS;
}

ty_err store_metrics_append_why(store *s, const char *id, const char *const *names,
                                size_t nnames, const store_metric_in *points, size_t n,
                                store_metrics_refusal *why)
{
    if (!s || !id || !names || nnames == 0 || !points || n == 0)
        return TY_EINVAL;
    for (size_t i = 0; i < nnames; i++) {
        size_t len = names[i] ? strlen(names[i]) : 0;
        if (len == 0 || len > STORE_METRIC_NAME_MAX)
            return TY_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if (points[i].name >= nnames || points[i].step < 0 || !isfinite(points[i].value))
            return TY_EINVAL;
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    store_op op = {.kind = STORE_OP_METRICS};
    op.u.metrics.id = id;
    op.u.metrics.names = names;
    op.u.metrics.nnames = nnames;
    op.u.metrics.points = points;
    op.u.metrics.n = n;
    ty_err e = store_writer_run(s, &op);
    if (e == TY_ETOOLARGE && why)
        *why = op.u.metrics.refusal;
    return e;
}

/* ---- retention (writer thread) -------------------------------------------- */

/* Runs the delete sql for job_seq with at most `limit` rows; *n is the rows deleted. */
static ty_err purge_rows(store_conn *w, const char *sql, int64_t job_seq, int64_t limit,
                         int64_t *n)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, sql, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, limit);
    if ((e = store_step_done(st)) == TY_OK)
        *n = sqlite3_changes(w->db);
    return e;
}

ty_err store_metrics_purge_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    int64_t budget = op->u.purge.max_rows;
    ty_err e = TY_OK;
    op->u.purge.deleted = 0;
    op->u.purge.more = 0;
    while (e == TY_OK && budget > 0) {
        sqlite3_stmt *st = NULL;
        int64_t job_seq = 0, n = 0, points = 0;
        if ((e = store_conn_stmt(w, SQL_PURGE_NEXT, 0, &st)) != TY_OK)
            break;
        sqlite3_bind_int64(st, 1, op->u.purge.before_ms);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            job_seq = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        if (rc != SQLITE_ROW) {
            e = rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
            break; /* nothing (more) to purge */
        }
        /* Points, then the rows that find them, then the totals row that finds the job. */
        if ((e = purge_rows(w, SQL_PURGE_POINTS, job_seq, budget, &points)) != TY_OK)
            break;
        budget -= points;
        op->u.purge.deleted += points;
        if (budget > 0 && (e = purge_rows(w, SQL_PURGE_BATCHES, job_seq, budget, &n)) == TY_OK)
            budget -= n;
        if (e == TY_OK && budget > 0 &&
            (e = purge_rows(w, SQL_PURGE_NAMES, job_seq, budget, &n)) == TY_OK)
            budget -= n;
        if (e != TY_OK)
            break;
        if (budget > 0) { /* everything of the job is gone */
            if ((e = store_conn_stmt(w, SQL_PURGE_TOTALS, 0, &st)) == TY_OK) {
                sqlite3_bind_int64(st, 1, job_seq);
                e = store_step_done(st);
            }
            budget--;
        } else { /* the next operation goes on with this job */
            if ((e = store_conn_stmt(w, SQL_PURGE_COUNT, 0, &st)) == TY_OK) {
                sqlite3_bind_int64(st, 1, job_seq);
                sqlite3_bind_int64(st, 2, points);
                e = store_step_done(st);
            }
            op->u.purge.more = 1;
        }
    }
    return e;
}

ty_err store_metrics_purge(store *s, int64_t ended_before_ms, int max_rows, int64_t *points,
                           int *more)
{
    return store_purge_run(s, STORE_OP_METRICS_PURGE, ended_before_ms, max_rows, points, more);
}

/* ---- reads ---------------------------------------------------------------- */

void store_metric_series_clear(store_metric_series *ser)
{
    if (!ser)
        return;
    free(ser->name);
    free(ser->points);
    memset(ser, 0, sizeof *ser);
}

void store_metric_series_free(store_metric_series *ser, size_t n)
{
    if (!ser)
        return;
    for (size_t i = 0; i < n; i++)
        store_metric_series_clear(&ser[i]);
    free(ser);
}

/* One integer of the first row of sql bound to (?1 text, or ?1 int64 when text is NULL). */
static ty_err one_int(store_conn *c, const char *sql, const char *text, int64_t a, int64_t b,
                      int64_t lo, int64_t hi, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e != TY_OK)
        return e;
    if (text) {
        store_bind_text(st, 1, text);
    } else {
        sqlite3_bind_int64(st, 1, a);
        sqlite3_bind_int64(st, 2, b);
        sqlite3_bind_int64(st, 3, lo);
        sqlite3_bind_int64(st, 4, hi);
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        e = rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

/* The job's seq on c; TY_ENOTFOUND when there is no such job. */
static ty_err job_seq_of(store_conn *c, const char *id, int64_t *seq)
{
    static const char sql[] = "SELECT seq FROM jobs WHERE id = ?1";
    if (strlen(id) != STORE_ID_LEN)
        return TY_ENOTFOUND;
    return one_int(c, sql, id, 0, 0, 0, 0, seq);
}

/* The walk's state: points kept as they are, then buckets. */
typedef struct sampler {
    size_t max;                  /* max_points */
    store_metric_point *raw;     /* while total <= max */
    size_t nraw, capraw;
    size_t nb;                   /* buckets; 0 until the walk passes max */
    store_metric_point *bmin, *bmax;
    unsigned char *bused;
    int64_t lo;                  /* the range's first step */
    double span;                 /* last - first + 1 */
    store_metric_point first, last;
    int64_t total;
} sampler;

static void bucket_add(sampler *sp, const store_metric_point *p)
{
    size_t b = (size_t)((double)(p->step - sp->lo) / sp->span * (double)sp->nb);
    if (b >= sp->nb)
        b = sp->nb - 1;
    if (!sp->bused[b]) {
        sp->bused[b] = 1;
        sp->bmin[b] = sp->bmax[b] = *p;
    } else if (p->value < sp->bmin[b].value) {
        sp->bmin[b] = *p;
    } else if (p->value > sp->bmax[b].value) {
        sp->bmax[b] = *p;
    }
}

static ty_err sampler_add(sampler *sp, const store_metric_point *p)
{
    if (sp->total++ == 0)
        sp->first = *p;
    sp->last = *p;
    if (sp->nb) {
        bucket_add(sp, p);
        return TY_OK;
    }
    if (sp->nraw < sp->max) {
        if (sp->nraw == sp->capraw) {
            size_t cap = sp->capraw ? sp->capraw * 2 : 256;
            if (cap > sp->max)
                cap = sp->max;
            store_metric_point *grown = realloc(sp->raw, cap * sizeof *grown);
            if (!grown)
                return TY_ENOMEM;
            sp->raw = grown;
            sp->capraw = cap;
        }
        sp->raw[sp->nraw++] = *p;
        return TY_OK;
    }
    /* One point more than fits: from here on, buckets (at least one, even when max_points
     * leaves room for the first and last points only: then nothing else is emitted). */
    sp->nb = (sp->max - 2) / 2;
    size_t nb = sp->nb ? sp->nb : 1;
    sp->nb = nb;
    if (!(sp->bmin = malloc(nb * sizeof *sp->bmin)) ||
        !(sp->bmax = malloc(nb * sizeof *sp->bmax)) || !(sp->bused = calloc(nb, 1)))
        return TY_ENOMEM;
    for (size_t i = 0; i < sp->nraw; i++)
        bucket_add(sp, &sp->raw[i]);
    bucket_add(sp, p);
    return TY_OK;
}

/* Appends p to out unless its step is not above the last one appended. */
static void emit(store_metric_point *out, size_t *n, const store_metric_point *p)
{
    if (*n == 0 || p->step > out[*n - 1].step)
        out[(*n)++] = *p;
}

/* The sampler's result into ser (points new). */
static ty_err sampler_finish(sampler *sp, store_metric_series *ser)
{
    ser->total_points = sp->total;
    if (!sp->nb) {
        ser->points = sp->raw;
        ser->npoints = sp->nraw;
        sp->raw = NULL;
        return TY_OK;
    }
    store_metric_point *out = malloc(sp->max * sizeof *out);
    size_t n = 0;
    if (!out)
        return TY_ENOMEM;
    emit(out, &n, &sp->first);
    int room = sp->max >= 4; /* besides the first and the last point */
    for (size_t b = 0; room && b < sp->nb; b++) {
        if (!sp->bused[b])
            continue;
        const store_metric_point *a = &sp->bmin[b], *z = &sp->bmax[b];
        if (a->step > z->step) {
            const store_metric_point *t = a;
            a = z;
            z = t;
        }
        if (a->step < sp->last.step)
            emit(out, &n, a);
        if (z->step < sp->last.step)
            emit(out, &n, z);
    }
    emit(out, &n, &sp->last);
    ser->points = out;
    ser->npoints = n;
    return TY_OK;
}

static void sampler_free(sampler *sp)
{
    free(sp->raw);
    free(sp->bmin);
    free(sp->bmax);
    free(sp->bused);
}

/* Reads one series of the job job_seq on c (inside a read transaction). */
static ty_err read_series(store_conn *c, int64_t job_seq, const char *name, int64_t step_min,
                          int64_t step_max, size_t max_points, store_metric_series *ser)
{
    int64_t nid = 0, first = 0, last = 0;
    sampler sp = {.max = max_points};
    sqlite3_stmt *st = NULL;
    ty_err e = one_int(c, SQL_NAME_ID, name, 0, 0, 0, 0, &nid);
    if (e == TY_ENOTFOUND)
        return TY_OK; /* never reported: an empty series */
    if (e != TY_OK)
        return e;
    e = one_int(c, SQL_FIRST_STEP, NULL, job_seq, nid, step_min, step_max, &first);
    if (e == TY_OK)
        e = one_int(c, SQL_LAST_STEP, NULL, job_seq, nid, step_min, step_max, &last);
    if (e == TY_ENOTFOUND)
        return TY_OK; /* nothing in the range */
    if (e != TY_OK)
        return e;
    sp.lo = first;
    sp.span = (double)(uint64_t)(last - first) + 1.0;
    if ((e = store_conn_stmt(c, SQL_RANGE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, nid);
    sqlite3_bind_int64(st, 3, step_min);
    sqlite3_bind_int64(st, 4, step_max);
    int rc;
    while (e == TY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_metric_point p = {
            .step = sqlite3_column_int64(st, 0),
            .time_ms = sqlite3_column_int64(st, 1),
            .value = sqlite3_column_double(st, 2),
        };
        e = sampler_add(&sp, &p);
    }
    if (e == TY_OK && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    if (e == TY_OK)
        e = sampler_finish(&sp, ser);
    sampler_free(&sp);
    return e;
}

ty_err store_metrics_read(store *s, const char *id, const char *name, int64_t step_min,
                          int64_t step_max, size_t max_points, store_metric_series *out)
{
    if (!s || !id || !name || !out || max_points < 2)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    if (!(out->name = strdup(name)))
        return TY_ENOMEM;
    int64_t job_seq = 0;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e == TY_OK) {
        if ((e = job_seq_of(c, id, &job_seq)) == TY_OK && step_min <= step_max)
            e = read_series(c, job_seq, name, step_min, step_max, max_points, out);
        store_read_end(c);
    }
    store_reader_release(s, c);
    if (e != TY_OK)
        store_metric_series_clear(out);
    return e;
}

static ty_err name_from_row(sqlite3_stmt *st, void *item)
{
    char **name = item;
    return (*name = store_column_dup(st, 0)) ? TY_OK : TY_ENOMEM;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ty_err store_metrics_names(store *s, const char *id, char ***out, size_t *nout)
{
    if (!s || !id || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    int64_t job_seq = 0;
    sqlite3_stmt *st = NULL;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e == TY_OK) {
        if ((e = job_seq_of(c, id, &job_seq)) == TY_OK &&
            (e = store_conn_stmt(c, SQL_NAMES, 0, &st)) == TY_OK) {
            sqlite3_bind_int64(st, 1, job_seq);
            e = store_collect(st, sizeof(char *), name_from_row, &v);
        }
        store_read_end(c);
    }
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_queues_free(v.items, v.n);
        v = (store_vec){0};
    }
    if (v.n > 1) /* a job has a few series: sorted here, not by a temporary B-tree */
        qsort(v.items, v.n, sizeof(char *), cmp_names);
    *out = v.items;
    *nout = v.n;
    return e;
}

static int cmp_rows(const void *a, const void *b)
{
    const store_metric_row *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Appends to v the rows of one batch (the current row of bst) with seq > after. */
static ty_err batch_rows(store_conn *c, int64_t job_seq, sqlite3_stmt *bst, int64_t after,
                         store_vec *v)
{
    const unsigned char *name = sqlite3_column_text(bst, 5);
    size_t len = (size_t)sqlite3_column_bytes(bst, 5);
    if (!name || len == 0 || len > STORE_METRIC_NAME_MAX)
        return TY_ESCHEMA;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_BATCH_ROWS, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, sqlite3_column_int64(bst, 2));
    sqlite3_bind_int64(st, 3, sqlite3_column_int64(bst, 3));
    sqlite3_bind_int64(st, 4, sqlite3_column_int64(bst, 4));
    sqlite3_bind_int64(st, 5, after);
    sqlite3_bind_int64(st, 6, sqlite3_column_int64(bst, 1));
    sqlite3_bind_int64(st, 7, sqlite3_column_int64(bst, 0));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (v->n == v->cap) {
            size_t cap = v->cap ? v->cap * 2 : 64;
            void *grown = realloc(v->items, cap * sizeof(store_metric_row));
            if (!grown) {
                sqlite3_reset(st);
                return TY_ENOMEM;
            }
            v->items = grown;
            v->cap = cap;
        }
        store_metric_row *r = (store_metric_row *)v->items + v->n++;
        r->seq = sqlite3_column_int64(st, 0);
        memcpy(r->name, name, len);
        r->name[len] = '\0';
        r->step = sqlite3_column_int64(st, 1);
        r->time_ms = sqlite3_column_int64(st, 2);
        r->value = sqlite3_column_double(st, 3);
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
}

/* The limit-th smallest seq of v (sorted first), or INT64_MAX while v holds fewer. */
static int64_t nth_seq(store_vec *v, size_t limit)
{
    if (v->n < limit)
        return INT64_MAX;
    qsort(v->items, v->n, sizeof(store_metric_row), cmp_rows);
    return ((store_metric_row *)v->items)[limit - 1].seq;
}

ty_err store_metrics_since(store *s, const char *id, int64_t after_seq, int limit,
                           store_metric_row **out, size_t *nout)
{
    if (!s || !id || !out || !nout || limit < 1 || limit > SINCE_MAX_LIMIT)
        return TY_EINVAL;
    store_vec v = {0};
    int64_t job_seq = 0;
    sqlite3_stmt *bst = NULL;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e != TY_OK)
        goto release;
    if ((e = job_seq_of(c, id, &job_seq)) != TY_OK) {
        if (e == TY_ENOTFOUND)
            e = TY_OK; /* an unknown job has no points */
        goto end;
    }
    if ((e = store_conn_stmt(c, SQL_BATCHES, 0, &bst)) != TY_OK)
        goto end;
    sqlite3_bind_int64(bst, 1, job_seq);
    sqlite3_bind_int64(bst, 2, after_seq);
    int rc = SQLITE_DONE;
    int64_t cut = INT64_MAX; /* the limit-th seq found so far */
    while (e == TY_OK && (rc = sqlite3_step(bst)) == SQLITE_ROW) {
        /* Batches come by last_seq: once one starts past the cut, so do all that follow. */
        if (sqlite3_column_int64(bst, 1) > cut)
            break;
        if ((e = batch_rows(c, job_seq, bst, after_seq, &v)) == TY_OK)
            cut = nth_seq(&v, (size_t)limit);
    }
    if (e == TY_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(bst);
end:
    store_read_end(c);
release:
    store_reader_release(s, c);
    if (e == TY_OK) {
        if (v.n > 1)
            qsort(v.items, v.n, sizeof(store_metric_row), cmp_rows);
        if (v.n > (size_t)limit)
            v.n = (size_t)limit;
    } else {
        free(v.items);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}
