/*
 * test_store_metrics.c - store_metrics.c and the job tokens: what a reporting job and a
 * reader of its curves see.
 */
#include <math.h>
#include <stdatomic.h>

#include "common/ty_time.h"
#include "test_store_util.h"

/* Appends one point of `name` (borrowed). */
static ty_err put1(store *s, const char *id, const char *name, int64_t step, double value)
{
    const char *names[] = {name};
    store_metric_in p = {.name = 0, .step = step, .time_ms = 1000 + step, .value = value};
    return store_metrics_append(s, id, names, 1, &p, 1);
}

/* Moves a fresh job to STARTING with the token hash h (all bytes = b). */
static void start_with_token(store *s, const char *id, job_state from, unsigned char b)
{
    unsigned char h[32];
    memset(h, b, sizeof h);
    store_update u[2] = {0};
    size_t n = 0;
    if (from == JOB_PENDING)
        u[n++] = (store_update){.id = id, .from = JOB_PENDING, .to = JOB_ADMITTED,
                                .reason = "Admitted", .restarts = -1};
    u[n++] = (store_update){.id = id,
                            .from = from == JOB_PENDING ? JOB_ADMITTED : from,
                            .to = JOB_STARTING,
                            .reason = "Starting",
                            .restarts = -1,
                            .job_token_hash = h};
    assert_int_equal(store_jobs_update(s, u, n), TY_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(u[i].result, TY_OK);
}

static ty_err lookup(store *s, unsigned char b, char id[STORE_ID_LEN + 1], int *attempt)
{
    unsigned char h[32];
    memset(h, b, sizeof h);
    return store_job_token_lookup(s, h, id, attempt);
}

static void test_round_trip_and_last_write_wins(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    const char *names[] = {"loss", "accuracy"};
    store_metric_in pts[] = {
        {0, 10, 5000, 2.5}, {1, 10, 5000, 0.1}, {0, 20, 6000, 1.5},
        {0, 10, 7000, 2.0}, /* the same step again in one report: the later one stays */
    };
    assert_int_equal(store_metrics_append(f->s, job->id, names, 2, pts, 4), TY_OK);
    assert_int_equal(put1(f->s, job->id, "loss", 20, 1.25), TY_OK); /* and in a later one */

    store_metric_series ser;
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, 1000, &ser), TY_OK);
    assert_string_equal(ser.name, "loss");
    assert_int_equal(ser.total_points, 2);
    assert_int_equal(ser.npoints, 2);
    assert_int_equal(ser.points[0].step, 10);
    assert_true(ser.points[0].value == 2.0);
    assert_int_equal(ser.points[0].time_ms, 7000);
    assert_int_equal(ser.points[1].step, 20);
    assert_true(ser.points[1].value == 1.25);
    store_metric_series_clear(&ser);

    /* A step range: only steps > 10 (what since_step=10 asks). */
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 11, INT64_MAX, 1000, &ser), TY_OK);
    assert_int_equal(ser.total_points, 1);
    assert_int_equal(ser.points[0].step, 20);
    store_metric_series_clear(&ser);

    /* A name the job never reported is an empty series, not an error. */
    assert_int_equal(store_metrics_read(f->s, job->id, "lr", 0, INT64_MAX, 1000, &ser), TY_OK);
    assert_int_equal(ser.total_points, 0);
    assert_int_equal(ser.npoints, 0);
    store_metric_series_clear(&ser);

    char **list = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_names(f->s, job->id, &list, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0], "accuracy");
    assert_string_equal(list[1], "loss");
    store_queues_free(list, n);
    store_jobs_free(job, 1);
}

static void test_unknown_job_and_bad_points(void **state)
{
    store_fixture *f = *state;
    const char *unknown = "00000000000000000000000000";
    store_metric_series ser;
    char **list = NULL;
    size_t n = 0;
    assert_int_equal(put1(f->s, unknown, "loss", 1, 1.0), TY_ENOTFOUND);
    assert_int_equal(store_metrics_read(f->s, unknown, "loss", 0, INT64_MAX, 10, &ser),
                     TY_ENOTFOUND);
    assert_int_equal(store_metrics_names(f->s, unknown, &list, &n), TY_ENOTFOUND);

    store_job *job = submit_one(f->s, "a", "q");
    assert_int_equal(put1(f->s, job->id, "loss", -1, 1.0), TY_EINVAL);
    assert_int_equal(put1(f->s, job->id, "loss", 1, NAN), TY_EINVAL);
    assert_int_equal(put1(f->s, job->id, "loss", 1, INFINITY), TY_EINVAL);
    assert_int_equal(put1(f->s, job->id, "", 1, 1.0), TY_EINVAL);
    const char *names[] = {"loss"};
    store_metric_in p = {.name = 1, .step = 1, .value = 1.0};
    assert_int_equal(store_metrics_append(f->s, job->id, names, 1, &p, 1), TY_EINVAL);
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, 10, &ser), TY_OK);
    assert_int_equal(ser.total_points, 0);
    store_metric_series_clear(&ser);
    store_jobs_free(job, 1);
}

/* A job has at most STORE_METRIC_MAX_SERIES series; a report past that stores nothing. */
static void test_series_per_job_bounded(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q"), *other = submit_one(f->s, "b", "q");
    enum { N = STORE_METRIC_MAX_SERIES };
    static char buf[N + 1][16];
    const char *names[N + 1];
    store_metric_in pts[N + 1];
    for (int i = 0; i <= N; i++) {
        snprintf(buf[i], sizeof buf[i], "m%d", i);
        names[i] = buf[i];
        pts[i] = (store_metric_in){.name = (size_t)i, .step = 1, .time_ms = 1, .value = i};
    }
    assert_int_equal(store_metrics_append(f->s, job->id, names, N, pts, N), TY_OK);
    assert_int_equal(store_metrics_append(f->s, job->id, names, N, pts, N), TY_OK); /* known */
    store_metrics_refusal why = {.points = -1};
    assert_int_equal(store_metrics_append_why(f->s, job->id, names + N, 1, pts, 1, &why),
                     TY_ETOOLARGE);
    assert_int_equal(why.points, 0);
    assert_int_equal(why.limit, N);
    assert_int_equal(why.stored, N);
    char **list = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_names(f->s, job->id, &list, &n), TY_OK);
    assert_int_equal(n, N);
    store_queues_free(list, n);
    /* The limit is per job. */
    assert_int_equal(store_metrics_append(f->s, other->id, names + N, 1, pts, 1), TY_OK);
    store_jobs_free(job, 1);
    store_jobs_free(other, 1);
}

/* A store with a points cap of `cap` in a scratch directory. */
static store *open_capped(const tdir *t, int64_t cap)
{
    store *s = NULL;
    char err[256];
    store_options opt = {.metrics_max_points = cap};
    if (store_open(t->db, &opt, &s, err, sizeof err) != TY_OK)
        fail_msg("store_open: %s", err);
    return s;
}

/* Stores steps [from, to) of "loss" and "acc" (two points a step) in one report. */
static ty_err put_steps(store *s, const char *id, int64_t from, int64_t to,
                        store_metrics_refusal *why)
{
    const char *names[] = {"loss", "acc"};
    store_metric_in pts[64];
    size_t n = 0;
    assert_true(to - from <= 32);
    for (int64_t st = from; st < to; st++) {
        pts[n++] = (store_metric_in){.name = 0, .step = st, .time_ms = 1, .value = (double)st};
        pts[n++] = (store_metric_in){.name = 1, .step = st, .time_ms = 1, .value = 1.0};
    }
    return store_metrics_append_why(s, id, names, 2, pts, n, why);
}

static int64_t total(store *s, const char *id, const char *name)
{
    store_metric_series ser;
    assert_int_equal(store_metrics_read(s, id, name, 0, INT64_MAX, 10, &ser), TY_OK);
    int64_t n = ser.total_points;
    store_metric_series_clear(&ser);
    return n;
}

/* The points cap is per job, counts new rows only (a step written again replaces its point),
 * refuses the crossing report whole, and holds across a restart. */
static void test_points_cap_per_job(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_capped(&t, 20);
    assert_int_equal(store_metrics_max_points(s), 20);
    store_job *a = submit_one(s, "a", "q"), *b = submit_one(s, "b", "q");
    store_metrics_refusal why = {0};
    assert_int_equal(put_steps(s, a->id, 0, 6, NULL), TY_OK); /* 12 points */
    /* 12 + 10 > 20: refused whole, nothing of it stored. */
    assert_int_equal(put_steps(s, a->id, 6, 11, &why), TY_ETOOLARGE);
    assert_int_equal(why.points, 1);
    assert_int_equal(why.limit, 20);
    assert_int_equal(why.stored, 12);
    assert_int_equal(total(s, a->id, "loss"), 6);
    assert_int_equal(total(s, a->id, "acc"), 6);
    /* Rewrites count nothing: 6 old steps and 4 new ones make exactly 20. */
    assert_int_equal(put_steps(s, a->id, 0, 10, NULL), TY_OK);
    assert_int_equal(total(s, a->id, "loss"), 10);
    /* At the cap a job may still write its steps again, and nothing new. */
    assert_int_equal(put_steps(s, a->id, 0, 10, NULL), TY_OK);
    memset(&why, 0, sizeof why);
    assert_int_equal(put_steps(s, a->id, 10, 11, &why), TY_ETOOLARGE);
    assert_int_equal(why.stored, 20);
    /* Another job has its own count. */
    assert_int_equal(put_steps(s, b->id, 0, 10, NULL), TY_OK);
    assert_int_equal(put_steps(s, b->id, 10, 11, NULL), TY_ETOOLARGE);
    /* The count is stored with the points: a restart keeps it. */
    store_close(s);
    s = open_capped(&t, 20);
    assert_int_equal(put_steps(s, a->id, 10, 11, NULL), TY_ETOOLARGE);
    assert_int_equal(put_steps(s, a->id, 9, 10, NULL), TY_OK);
    store_close(s);
    /* A higher cap set later lets the job go on from its count. */
    s = open_capped(&t, 22);
    assert_int_equal(put_steps(s, a->id, 10, 11, NULL), TY_OK);
    assert_int_equal(put_steps(s, a->id, 11, 12, NULL), TY_ETOOLARGE);
    assert_int_equal(total(s, a->id, "loss"), 11);
    store_jobs_free(a, 1);
    store_jobs_free(b, 1);
    store_close(s);
    tdir_remove(&t);
}

/* Moves job id to CANCELLED and returns the time its end was recorded. */
static int64_t end_job(store *s, const char *id)
{
    assert_int_equal(move_job(s, id, JOB_CANCELLED), TY_OK);
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, id, &j), TY_OK);
    int64_t at = j->updated_at_ms;
    store_jobs_free(j, 1);
    return at;
}

static int64_t rows_of(store *s, const char *sql)
{
    int64_t n = -1;
    assert_int_equal(store_read_int64(s, sql, &n), TY_OK);
    return n;
}

/* Retention deletes the metrics of jobs that ended before the cutoff, in operations of at
 * most max_rows rows, and leaves the jobs that ended later and those that run alone. */
static void test_purge_old_jobs_in_batches(void **state)
{
    store_fixture *f = *state;
    store_job *old1 = submit_one(f->s, "old1", "q"), *old2 = submit_one(f->s, "old2", "q");
    store_job *young = submit_one(f->s, "young", "q"), *running = submit_one(f->s, "run", "q");
    store_job *jobs[] = {old1, old2, young, running};
    for (size_t j = 0; j < 4; j++) /* 3 reports of 2 series and 10 steps: 60 points a job */
        for (int64_t r = 0; r < 3; r++)
            assert_int_equal(put_steps(f->s, jobs[j]->id, r * 10, r * 10 + 10, NULL), TY_OK);
    end_job(f->s, old1->id);
    int64_t cutoff = end_job(f->s, old2->id) + 1;
    struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
    while (ty_time_now_ms() <= cutoff) /* young ends after the cutoff */
        nanosleep(&ms, NULL);
    end_job(f->s, young->id);

    int64_t purged = 0, points = 0;
    int more = 1, calls = 0;
    while (more) {
        assert_int_equal(store_metrics_purge(f->s, cutoff, 25, &points, &more), TY_OK);
        assert_true(points <= 25);
        purged += points;
        assert_true(++calls < 100);
    }
    assert_int_equal(purged, 120);
    assert_true(calls >= 120 / 25); /* in batches, not at once */
    for (size_t j = 0; j < 2; j++) {
        char **names = NULL;
        size_t n = 9;
        assert_int_equal(total(f->s, jobs[j]->id, "loss"), 0);
        assert_int_equal(store_metrics_names(f->s, jobs[j]->id, &names, &n), TY_OK);
        assert_int_equal(n, 0);
        store_job *still = NULL; /* the job itself stays */
        assert_int_equal(store_job_get(f->s, jobs[j]->id, &still), TY_OK);
        store_jobs_free(still, 1);
    }
    for (size_t j = 2; j < 4; j++) {
        assert_int_equal(total(f->s, jobs[j]->id, "loss"), 30);
        assert_int_equal(total(f->s, jobs[j]->id, "acc"), 30);
    }
    /* Of the old jobs nothing is left: points, the stream's batches, series, totals. */
    static const char q_points[] = "SELECT count(*) FROM metrics";
    static const char q_batches[] = "SELECT count(*) FROM metric_batches";
    static const char q_names[] = "SELECT count(*) FROM job_metric_names";
    static const char q_totals[] = "SELECT count(*) FROM job_metric_totals";
    assert_int_equal(rows_of(f->s, q_points), 120);
    assert_int_equal(rows_of(f->s, q_batches), 12);
    assert_int_equal(rows_of(f->s, q_names), 4);
    assert_int_equal(rows_of(f->s, q_totals), 2);
    /* Nothing more to do; the running job's points survive any cutoff. */
    assert_int_equal(store_metrics_purge(f->s, cutoff, 25, &points, &more), TY_OK);
    assert_int_equal(points, 0);
    assert_int_equal(more, 0);
    assert_int_equal(store_metrics_purge(f->s, INT64_MAX, 1000, &points, &more), TY_OK);
    assert_int_equal(points, 60); /* young's */
    assert_int_equal(total(f->s, running->id, "loss"), 30);
    assert_int_equal(put_steps(f->s, running->id, 30, 31, NULL), TY_OK);
    assert_int_equal(store_metrics_purge(f->s, 0, 0, &points, &more), TY_EINVAL);
    for (size_t j = 0; j < 4; j++)
        store_jobs_free(jobs[j], 1);
}

/* A purge that fails to commit deletes nothing and can be run again. */
static void test_purge_failing_commit(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    assert_int_equal(put_steps(f->s, job->id, 0, 10, NULL), TY_OK);
    int64_t cutoff = end_job(f->s, job->id) + 1;
    int64_t points = -1;
    int more = -1;
    store_fail_writes(f->s, 1, 1, TY_EIO);
    assert_int_equal(store_metrics_purge(f->s, cutoff, 5, &points, &more), TY_EIO);
    assert_int_equal(points, 0);
    assert_int_equal(more, 0);
    assert_int_equal(total(f->s, job->id, "loss"), 10);
    assert_int_equal(store_metrics_purge(f->s, cutoff, 100, &points, &more), TY_OK);
    assert_int_equal(points, 20);
    assert_int_equal(total(f->s, job->id, "loss"), 0);
    store_jobs_free(job, 1);
}

/* A series of n points: a smooth curve with a few spikes the downsampling must keep. */
static void test_downsampling_keeps_extremes(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    enum { N = 10000 };
    store_metric_in *pts = calloc(N, sizeof *pts);
    assert_non_null(pts);
    for (int i = 0; i < N; i++)
        pts[i] = (store_metric_in){.name = 0, .step = i * 3, .time_ms = i, .value = 1.0};
    pts[1234].value = 100.0;  /* the maximum */
    pts[7777].value = -50.0;  /* the minimum */
    pts[4000].value = 42.0;   /* a spike in another bucket */
    pts[0].value = 7.0;       /* the first */
    pts[N - 1].value = 8.0;   /* the last */
    const char *names[] = {"loss"};
    assert_int_equal(store_metrics_append(f->s, job->id, names, 1, pts, N), TY_OK);

    static const size_t maxes[] = {2, 3, 4, 5, 100, 101, 9999};
    for (size_t m = 0; m < sizeof maxes / sizeof *maxes; m++) {
        store_metric_series ser;
        assert_int_equal(
            store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, maxes[m], &ser), TY_OK);
        assert_int_equal(ser.total_points, N);
        assert_true(ser.npoints <= maxes[m]);
        assert_true(ser.npoints >= 2);
        assert_int_equal(ser.points[0].step, 0);
        assert_true(ser.points[0].value == 7.0);
        assert_int_equal(ser.points[ser.npoints - 1].step, (N - 1) * 3);
        assert_true(ser.points[ser.npoints - 1].value == 8.0);
        int saw_max = 0, saw_min = 0, saw_spike = 0;
        for (size_t i = 0; i < ser.npoints; i++) {
            if (i)
                assert_true(ser.points[i].step > ser.points[i - 1].step);
            saw_max |= ser.points[i].step == 1234 * 3 && ser.points[i].value == 100.0;
            saw_min |= ser.points[i].step == 7777 * 3 && ser.points[i].value == -50.0;
            saw_spike |= ser.points[i].step == 4000 * 3;
        }
        if (maxes[m] >= 4) {
            assert_true(saw_max);
            assert_true(saw_min);
        }
        if (maxes[m] >= 100)
            assert_true(saw_spike);
        store_metric_series_clear(&ser);
    }
    /* Not more than max_points: the series comes back whole. */
    store_metric_series ser;
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, N, &ser), TY_OK);
    assert_int_equal(ser.npoints, N);
    store_metric_series_clear(&ser);
    free(pts);
    store_jobs_free(job, 1);
}

static void test_since_follows_seq(void **state)
{
    store_fixture *f = *state;
    store_job *a = submit_one(f->s, "a", "q"), *b = submit_one(f->s, "b", "q");
    assert_int_equal(put1(f->s, a->id, "loss", 1, 1.0), TY_OK);
    assert_int_equal(put1(f->s, b->id, "loss", 1, 9.0), TY_OK);
    assert_int_equal(put1(f->s, a->id, "acc", 1, 0.5), TY_OK);

    store_metric_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_since(f->s, a->id, 0, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].name, "loss");
    assert_string_equal(rows[1].name, "acc");
    assert_true(rows[1].seq > rows[0].seq);
    int64_t head = rows[1].seq;
    free(rows);

    /* Nothing new after the head; rewriting a step shows again with a higher seq. */
    assert_int_equal(store_metrics_since(f->s, a->id, head, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 0);
    free(rows);
    assert_int_equal(put1(f->s, a->id, "loss", 1, 0.75), TY_OK);
    assert_int_equal(store_metrics_since(f->s, a->id, head, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_true(rows[0].seq > head);
    assert_true(rows[0].value == 0.75);
    free(rows);
    /* limit */
    assert_int_equal(store_metrics_since(f->s, a->id, 0, 1, &rows, &n), TY_OK);
    assert_int_equal(n, 1);
    free(rows);
    store_jobs_free(a, 1);
    store_jobs_free(b, 1);
}

/* A reader that takes a few rows at a time gets every row once, by seq, in report order. */
static void test_since_in_small_pieces(void **state)
{
    store_fixture *f = *state;
    store_job *a = submit_one(f->s, "a", "q"), *b = submit_one(f->s, "b", "q");
    const char *names[] = {"loss", "acc"};
    store_metric_in pts[10];
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 10; i++)
            pts[i] = (store_metric_in){.name = (size_t)(i % 2), .step = r * 5 + i / 2,
                                       .time_ms = 1, .value = r * 100 + i};
        assert_int_equal(store_metrics_append(f->s, a->id, names, 2, pts, 10), TY_OK);
        assert_int_equal(store_metrics_append(f->s, b->id, names, 2, pts, 10), TY_OK);
    }
    /* A fourth report rewrites two points of the third: they come again, with it. */
    assert_int_equal(store_metrics_append(f->s, a->id, names, 2, pts, 2), TY_OK);
    /* Every value in seq order: the three reports, less the two points the rewrite took
     * from the last one (steps 10 of both series), then the rewrite. */
    double want[30];
    for (int k = 0; k < 28; k++)
        want[k] = k < 10 ? k : k < 20 ? 100 + (k - 10) : 200 + (k - 18);
    want[28] = 200;
    want[29] = 201;
    int64_t after = 0, prev = 0;
    size_t total = 0;
    for (;;) {
        store_metric_row *rows = NULL;
        size_t n = 0;
        assert_int_equal(store_metrics_since(f->s, a->id, after, 3, &rows, &n), TY_OK);
        assert_true(n <= 3 && total + n <= 30);
        for (size_t i = 0; i < n; i++) {
            assert_true(rows[i].seq > prev);
            prev = rows[i].seq;
            assert_true(rows[i].value == want[total + i]);
            assert_string_equal(rows[i].name, (total + i) % 2 ? "acc" : "loss");
        }
        total += n;
        if (n)
            after = rows[n - 1].seq;
        free(rows);
        if (n < 3)
            break;
    }
    assert_int_equal(total, 30);
    store_jobs_free(a, 1);
    store_jobs_free(b, 1);
}

/* Points a version-4 database holds reach the stream after the upgrade to batches. */
static void test_version_4_points_after_upgrade(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    sqlite3 *db = NULL;
    char err[256];
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    assert_int_equal(store_schema_migrate_to(db, 4, err, sizeof err), TY_OK);
    const char *id = "0000000000000000000000000a";
    assert_int_equal(
        sqlite3_exec(db,
                     "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, "
                     "updated_ms, spec) VALUES ('0000000000000000000000000a', 'old', 'q', 0, 3, "
                     "1, 1, 1, '{}');"
                     "INSERT INTO metric_names (id, name) VALUES (1, 'loss'), (2, 'acc');"
                     "INSERT INTO job_metric_names VALUES (1, 1), (1, 2);"
                     "INSERT INTO metrics VALUES (1, 1, 0, 0.5, 1, 1), (1, 2, 0, 0.9, 1, 2), "
                     "(1, 1, 1, 0.4, 2, 3);"
                     "UPDATE metric_seq SET last = 3",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    store *s = open_store(&t);
    store_metric_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_since(s, id, 0, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rows[i].seq, (int64_t)i + 1);
    assert_string_equal(rows[1].name, "acc");
    free(rows);
    assert_int_equal(store_metrics_since(s, id, 1, 1, &rows, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].seq, 2);
    free(rows);
    /* The upgrade counted the job's points and series (schema version 11). */
    static const char q_totals[] = "SELECT points * 10 + series FROM job_metric_totals";
    assert_int_equal(rows_of(s, q_totals), 32);
    /* New reports continue the seq. */
    assert_int_equal(put1(s, id, "loss", 2, 0.3), TY_OK);
    assert_int_equal(rows_of(s, q_totals), 42);
    assert_int_equal(store_metrics_since(s, id, 3, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].seq, 4);
    free(rows);
    store_close(s);
    tdir_remove(&t);
}

static void test_failing_write_stores_nothing(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    store_fail_writes(f->s, 1, 1, TY_EIO);
    assert_int_equal(put1(f->s, job->id, "loss", 5, 1.0), TY_EIO);
    store_metric_series ser;
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, 10, &ser), TY_OK);
    assert_int_equal(ser.total_points, 0);
    store_metric_series_clear(&ser);
    char **list = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_names(f->s, job->id, &list, &n), TY_OK);
    assert_int_equal(n, 0);
    store_queues_free(list, n);
    /* The store carries on. */
    assert_int_equal(put1(f->s, job->id, "loss", 5, 1.0), TY_OK);
    store_jobs_free(job, 1);
}

static void test_finished_job_refuses_points(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    assert_int_equal(put1(f->s, job->id, "loss", 1, 1.0), TY_OK);
    assert_int_equal(move_job(f->s, job->id, JOB_CANCELLED), TY_OK);
    assert_int_equal(put1(f->s, job->id, "loss", 2, 1.0), TY_ECONFLICT);
    store_metric_series ser;
    assert_int_equal(store_metrics_read(f->s, job->id, "loss", 0, INT64_MAX, 10, &ser), TY_OK);
    assert_int_equal(ser.total_points, 1); /* what it reported before its end stays readable */
    store_metric_series_clear(&ser);
    store_jobs_free(job, 1);
}

static atomic_int metric_hooks, change_hooks;
static void count_metric_hook(void *ud)
{
    (void)ud;
    atomic_fetch_add(&metric_hooks, 1);
}
static void count_change_hook(void *ud)
{
    (void)ud;
    atomic_fetch_add(&change_hooks, 1);
}

static void test_metrics_hook_apart_from_change_hook(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    atomic_store(&metric_hooks, 0);
    atomic_store(&change_hooks, 0);
    store_set_metrics_hook(f->s, count_metric_hook, NULL);
    store_set_change_hook(f->s, count_change_hook, NULL);
    assert_int_equal(put1(f->s, job->id, "loss", 1, 1.0), TY_OK);
    assert_int_equal(atomic_load(&metric_hooks), 1); /* fired before the caller woke */
    assert_int_equal(atomic_load(&change_hooks), 0); /* the scheduler sleeps on */
    assert_int_equal(put1(f->s, job->id, "loss", -1, 1.0), TY_EINVAL);
    assert_int_equal(atomic_load(&metric_hooks), 1);
    assert_int_equal(move_job(f->s, job->id, JOB_CANCELLED), TY_OK);
    assert_int_equal(atomic_load(&metric_hooks), 1);
    assert_int_equal(atomic_load(&change_hooks), 1);
    store_set_metrics_hook(f->s, NULL, NULL);
    store_set_change_hook(f->s, NULL, NULL);
    store_jobs_free(job, 1);
}

static void test_job_tokens_live_until_the_end(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    char id[STORE_ID_LEN + 1];
    int attempt = 0;
    assert_int_equal(lookup(f->s, 0xa1, id, &attempt), TY_ENOTFOUND);
    start_with_token(f->s, job->id, JOB_PENDING, 0xa1);
    assert_int_equal(lookup(f->s, 0xa1, id, &attempt), TY_OK);
    assert_string_equal(id, job->id);
    assert_int_equal(attempt, 1);

    /* The next attempt's token replaces the first one. */
    store_update u[] = {
        {.id = job->id, .from = JOB_STARTING, .to = JOB_RUNNING, .reason = "Running",
         .restarts = -1},
        {.id = job->id, .from = JOB_RUNNING, .to = JOB_RESTARTING, .reason = "RankFailed",
         .restarts = -1},
    };
    assert_int_equal(store_jobs_update(f->s, u, 2), TY_OK);
    start_with_token(f->s, job->id, JOB_RESTARTING, 0xa2);
    assert_int_equal(lookup(f->s, 0xa1, id, &attempt), TY_ENOTFOUND);
    assert_int_equal(lookup(f->s, 0xa2, id, &attempt), TY_OK);
    assert_int_equal(attempt, 2);

    /* A terminal transition revokes it in the same commit (through store_jobs_update). */
    store_update run = {.id = job->id, .from = JOB_STARTING, .to = JOB_RUNNING,
                        .reason = "Running", .restarts = -1};
    store_update end = {.id = job->id, .from = JOB_RUNNING, .to = JOB_SUCCEEDED,
                        .reason = "Succeeded", .restarts = -1};
    assert_int_equal(store_jobs_update(f->s, &run, 1), TY_OK);
    uint64_t before = commits(f->s);
    assert_int_equal(store_jobs_update(f->s, &end, 1), TY_OK);
    assert_int_equal(end.result, TY_OK);
    assert_int_equal(commits(f->s), before + 1);
    assert_int_equal(lookup(f->s, 0xa2, id, &attempt), TY_ENOTFOUND);

    /* and through store_job_transition() (a client's cancel of a starting job). */
    store_job *other = submit_one(f->s, "b", "q");
    start_with_token(f->s, other->id, JOB_PENDING, 0xb1);
    assert_int_equal(lookup(f->s, 0xb1, id, &attempt), TY_OK);
    assert_int_equal(move_job(f->s, other->id, JOB_CANCELLING), TY_OK);
    assert_int_equal(lookup(f->s, 0xb1, id, &attempt), TY_OK); /* still stopping */
    assert_int_equal(move_job(f->s, other->id, JOB_CANCELLED), TY_OK);
    assert_int_equal(lookup(f->s, 0xb1, id, &attempt), TY_ENOTFOUND);
    store_jobs_free(other, 1);
    store_jobs_free(job, 1);
}

static void test_job_token_only_with_starting(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "a", "q");
    unsigned char h[32] = {1};
    store_update u = {.id = job->id, .from = JOB_PENDING, .to = JOB_ADMITTED,
                      .reason = "Admitted", .restarts = -1, .job_token_hash = h};
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINVAL);
    char id[STORE_ID_LEN + 1];
    int attempt;
    assert_int_equal(store_job_token_lookup(f->s, h, id, &attempt), TY_ENOTFOUND);
    /* A failed commit stores no token. */
    store_fail_writes(f->s, 1, 1, TY_EIO);
    store_update v[] = {
        {.id = job->id, .from = JOB_PENDING, .to = JOB_ADMITTED, .reason = "Admitted",
         .restarts = -1},
        {.id = job->id, .from = JOB_ADMITTED, .to = JOB_STARTING, .reason = "Starting",
         .restarts = -1, .job_token_hash = h},
    };
    assert_int_equal(store_jobs_update(f->s, v, 2), TY_EIO);
    assert_int_equal(store_job_token_lookup(f->s, h, id, &attempt), TY_ENOTFOUND);
    store_jobs_free(job, 1);
}

/* Every read path searches an index range and never sorts (as test_store_list checks its own). */
static void test_query_plans_use_indexes(void **state)
{
    store_fixture *f = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->t.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    for (const char *const *sql = store_metrics_sql; *sql; sql++) {
        char q[1024];
        int n = snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", *sql);
        assert_true(n > 0 && (size_t)n < sizeof q);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
            fail_msg("cannot prepare %s: %s", *sql, sqlite3_errmsg(db));
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *detail = (const char *)sqlite3_column_text(st, 3);
            if (strstr(detail, "TEMP B-TREE") || strncmp(detail, "SCAN ", 5) == 0)
                fail_msg("%s: %s", *sql, detail);
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_last_write_wins, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_job_and_bad_points, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_downsampling_keeps_extremes, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_series_per_job_bounded, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test(test_points_cap_per_job),
        cmocka_unit_test_setup_teardown(test_purge_old_jobs_in_batches, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_purge_failing_commit, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_since_follows_seq, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_since_in_small_pieces, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test(test_version_4_points_after_upgrade),
        cmocka_unit_test_setup_teardown(test_failing_write_stores_nothing, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_finished_job_refuses_points, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_hook_apart_from_change_hook,
                                        store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_job_tokens_live_until_the_end, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_job_token_only_with_starting, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_query_plans_use_indexes, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
