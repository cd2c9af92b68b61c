/*
 * test_retention.c - server/retention.c: the purge thread deletes, batch by batch, the
 * metrics of jobs ended past the retention and finished deliveries past theirs, counts them
 * for /metrics, and leaves running jobs alone. Deadlines only bound a hang.
 */
#include "tests/unit/test_store_util.h"

#include "common/ty_buf.h"
#include "common/ty_time.h"
#include "server/retention.h"

/* The value of counter `name` in the purger's /metrics text. */
static unsigned long long counter(retention *r, const char *name)
{
    ty_buf b = {0};
    assert_int_equal(retention_render_metrics(r, &b), TY_OK);
    char line[128];
    snprintf(line, sizeof line, "\n%s ", name);
    const char *at = strstr(b.data, line);
    assert_non_null(at);
    unsigned long long v = strtoull(at + strlen(line), NULL, 10);
    ty_buf_free(&b);
    return v;
}

/* Stores steps [0, n) of "loss" for job id. */
static void put_loss(store *s, const char *id, int n)
{
    const char *names[] = {"loss"};
    store_metric_in pts[100];
    assert_true(n <= 100);
    for (int i = 0; i < n; i++)
        pts[i] = (store_metric_in){.name = 0, .step = i, .time_ms = 1, .value = i};
    assert_int_equal(store_metrics_append(s, id, names, 1, pts, (size_t)n), TY_OK);
}

static int64_t loss_points(store *s, const char *id)
{
    store_metric_series ser;
    assert_int_equal(store_metrics_read(s, id, "loss", 0, INT64_MAX, 10, &ser), TY_OK);
    int64_t n = ser.total_points;
    store_metric_series_clear(&ser);
    return n;
}

static void test_purges_in_the_background(void **state)
{
    store_fixture *f = *state;
    store_job *ended = submit_one(f->s, "ended", "q"), *running = submit_one(f->s, "run", "q");
    put_loss(f->s, ended->id, 100);
    put_loss(f->s, running->id, 40);
    /* A delivery that finished long ago. */
    store_notify_sub sub = {.name = (char *)"a",
                            .url = (char *)"http://127.0.0.1:9/hook",
                            .events = STORE_NOTIFY_ALL,
                            .secret = (unsigned char *)"s3cret",
                            .secret_len = 6};
    assert_int_equal(store_notify_create(f->s, &sub), TY_OK);
    assert_int_equal(move_job(f->s, ended->id, JOB_CANCELLED), TY_OK);
    store_delivery *d = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_notify_due(f->s, ty_time_now_ms(), 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    store_delivery_mark m = {.id = d[0].id, .state = STORE_DELIVERY_DELIVERED, .at_ms = 1,
                             .code = 204};
    assert_int_equal(store_notify_mark(f->s, &m), TY_OK);
    store_deliveries_free(d, n);

    retention *r = NULL;
    char err[128];
    retention_options o = {.store = f->s, .metrics_ms = 1, .deliveries_ms = 1,
                           .interval_ms = 10, .batch_rows = 7};
    assert_int_equal(retention_start(&o, &r, err, sizeof err), TY_OK);
    int64_t deadline = ty_time_now_ms() + 10000;
    while (counter(r, "trainyard_retention_metric_points_deleted_total") < 100 ||
           counter(r, "trainyard_retention_deliveries_deleted_total") < 1) {
        assert_true(ty_time_now_ms() < deadline);
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        nanosleep(&ms, NULL);
    }
    retention_stop(r);
    assert_int_equal(loss_points(f->s, ended->id), 0);
    assert_int_equal(loss_points(f->s, running->id), 40); /* a running job keeps its points */
    store_delivery *left = NULL;
    assert_int_equal(store_notify_deliveries(f->s, "a", 10, &left, &n), TY_OK);
    assert_int_equal(n, 0);
    store_deliveries_free(left, n);
    store_jobs_free(ended, 1);
    store_jobs_free(running, 1);
}

/* Retention 0 keeps everything: no thread, counters at 0; bad options are refused. */
static void test_forever_and_bad_options(void **state)
{
    store_fixture *f = *state;
    store_job *job = submit_one(f->s, "ended", "q");
    put_loss(f->s, job->id, 10);
    assert_int_equal(move_job(f->s, job->id, JOB_CANCELLED), TY_OK);
    retention *r = NULL;
    char err[128];
    retention_options o = {.store = f->s};
    assert_int_equal(retention_start(&o, &r, err, sizeof err), TY_OK);
    assert_non_null(r);
    assert_int_equal(counter(r, "trainyard_retention_metric_points_deleted_total"), 0);
    retention_stop(r);
    assert_int_equal(loss_points(f->s, job->id), 10);
    retention_stop(NULL);
    assert_int_equal(counter(NULL, "trainyard_retention_deliveries_deleted_total"), 0);
    retention_options bad = {.store = f->s, .metrics_ms = -1};
    assert_int_equal(retention_start(&bad, &r, err, sizeof err), TY_EINVAL);
    bad = (retention_options){.store = NULL, .metrics_ms = 1};
    assert_int_equal(retention_start(&bad, &r, err, sizeof err), TY_EINVAL);
    store_jobs_free(job, 1);
}

static int teardown(void **state)
{
    store_fixture *f = *state;
    char path[256];
    snprintf(path, sizeof path, "%s/webhook-secrets.key", f->t.dir);
    unlink(path);
    return store_fixture_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_purges_in_the_background, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_forever_and_bad_options, store_fixture_setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
