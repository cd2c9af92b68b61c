/* Unit tests for store/store_feed.c: the change feed with each event's job. */
#include "tests/unit/test_store_util.h"

/* Submits one job with its labels in the spec, as the API stores them. */
static store_job *submit_labelled(store *s, const char *name, const char *queue,
                                  const char *labels_json)
{
    char spec[256];
    snprintf(spec, sizeof spec, "{\"name\":\"%s\",\"labels\":%s}", name, labels_json);
    store_job_new j = job_template(name, queue);
    j.spec_json = spec;
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(s, &j, 1, NULL, NULL, &out, &n, NULL), TY_OK);
    return out;
}

static void test_feed_carries_the_job(void **state)
{
    store_fixture *f = *state;
    int64_t head = 0;
    assert_int_equal(store_changes_head(f->s, &head), TY_OK);
    store_job *a = submit_labelled(f->s, "alpha", "gpu", "{\"sweep\":\"lr\",\"team\":\"x\"}");
    store_job *b = submit_one(f->s, "beta", "default");
    assert_int_equal(move_job(f->s, a->id, JOB_CANCELLED), TY_OK);

    store_feed_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_feed_read(f->s, head, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(ev[0].id, a->id);
    assert_string_equal(ev[0].name, "alpha");
    assert_string_equal(ev[0].queue, "gpu");
    assert_string_equal(ev[0].labels_json, "{\"sweep\":\"lr\",\"team\":\"x\"}");
    assert_int_equal(ev[0].from, JOB_STATE_NONE);
    assert_int_equal(ev[0].to, JOB_PENDING);
    assert_string_equal(ev[0].reason, "Submitted");
    assert_string_equal(ev[1].id, b->id);
    assert_string_equal(ev[1].labels_json, "{}"); /* a spec without labels */
    assert_string_equal(ev[2].id, a->id);
    assert_int_equal(ev[2].from, JOB_PENDING);
    assert_int_equal(ev[2].to, JOB_CANCELLED);
    assert_string_equal(ev[2].reason, "Test");
    assert_true(ev[0].seq < ev[1].seq && ev[1].seq < ev[2].seq);
    assert_true(ev[0].time_ms > 0 && ev[2].time_ms >= ev[0].time_ms);
    int64_t second = ev[1].seq;
    store_feed_free(ev, n);

    /* A cursor resumes strictly after it; the limit bounds a read. */
    assert_int_equal(store_feed_read(f->s, second, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].to, JOB_CANCELLED);
    store_feed_free(ev, n);
    assert_int_equal(store_feed_read(f->s, head, 2, &ev, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[1].seq, second);
    store_feed_free(ev, n);

    /* Caught up: nothing, and no array. */
    int64_t now = 0;
    assert_int_equal(store_changes_head(f->s, &now), TY_OK);
    assert_int_equal(store_feed_read(f->s, now, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 0);
    assert_null(ev);
    store_jobs_free(a, 1);
    store_jobs_free(b, 1);
}

static void test_feed_of_one_job(void **state)
{
    store_fixture *f = *state;
    store_job *a = submit_one(f->s, "alpha", "default");
    store_job *b = submit_one(f->s, "beta", "default");
    assert_int_equal(move_job(f->s, b->id, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, a->id, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, a->id, JOB_STARTING), TY_OK);

    store_feed_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_feed_read_job(f->s, a->id, 0, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(ev[i].id, a->id);
        assert_string_equal(ev[i].name, "alpha");
    }
    assert_int_equal(ev[0].to, JOB_PENDING);
    assert_int_equal(ev[1].to, JOB_ADMITTED);
    assert_int_equal(ev[2].to, JOB_STARTING);
    int64_t first = ev[0].seq;
    store_feed_free(ev, n);

    /* After its first event: the two that follow, though b's event lies between. */
    assert_int_equal(store_feed_read_job(f->s, a->id, first, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[0].to, JOB_ADMITTED);
    store_feed_free(ev, n);
    assert_int_equal(store_feed_read_job(f->s, a->id, first, 1, &ev, &n), TY_OK);
    assert_int_equal(n, 1);
    store_feed_free(ev, n);

    /* An unknown job has no events. */
    assert_int_equal(store_feed_read_job(f->s, "0000000000zzzzzzzzzzzzzzzz", 0, 100, &ev, &n),
                     TY_OK);
    assert_int_equal(n, 0);
    store_jobs_free(a, 1);
    store_jobs_free(b, 1);
}

static void test_feed_shows_notes(void **state)
{
    store_fixture *f = *state;
    store_job *a = submit_one(f->s, "alpha", "default");
    store_update u = {.id = a->id, .from = JOB_PENDING, .to = JOB_PENDING, .note = 1,
                      .reason = "Waiting", .message = "needs 4 slots", .restarts = -1};
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    store_feed_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_feed_read_job(f->s, a->id, 0, 100, &ev, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[1].from, JOB_PENDING);
    assert_int_equal(ev[1].to, JOB_PENDING);
    assert_string_equal(ev[1].reason, "Waiting");
    assert_string_equal(ev[1].message, "needs 4 slots");
    store_feed_free(ev, n);
    store_jobs_free(a, 1);
}

static void test_feed_refuses_bad_arguments(void **state)
{
    store_fixture *f = *state;
    store_feed_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_feed_read(f->s, 0, 0, &ev, &n), TY_EINVAL);
    assert_int_equal(store_feed_read(f->s, 0, 1001, &ev, &n), TY_EINVAL);
    assert_int_equal(store_feed_read(f->s, -1, 10, &ev, &n), TY_EINVAL);
    assert_int_equal(store_feed_read_job(f->s, NULL, 0, 10, &ev, &n), TY_EINVAL);
    assert_null(ev);
    store_feed_free(NULL, 0);
}

static int hook_calls;
static void count_hook(void *ud)
{
    (void)ud;
    hook_calls++;
}

static void test_change_hook_get_allows_chaining(void **state)
{
    store_fixture *f = *state;
    void (*fn)(void *) = count_hook;
    void *ud = &hook_calls;
    store_change_hook_get(f->s, &fn, &ud);
    assert_null(fn);
    assert_null(ud);
    store_set_change_hook(f->s, count_hook, &hook_calls);
    store_change_hook_get(f->s, &fn, &ud);
    assert_ptr_equal(fn, count_hook);
    assert_ptr_equal(ud, &hook_calls);
    store_set_change_hook(f->s, NULL, NULL);
}

static void test_metrics_head_follows_points(void **state)
{
    store_fixture *f = *state;
    int64_t head = -1;
    assert_int_equal(store_metrics_head(f->s, &head), TY_OK);
    assert_int_equal(head, 0);
    store_job *a = submit_one(f->s, "alpha", "default");
    const char *names[] = {"loss", "accuracy"};
    store_metric_in pts[] = {{0, 1, 1000, 2.5}, {1, 1, 1000, 0.1}, {0, 2, 2000, 2.0}};
    assert_int_equal(store_metrics_append(f->s, a->id, names, 2, pts, 3), TY_OK);
    assert_int_equal(store_metrics_head(f->s, &head), TY_OK);
    store_metric_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_metrics_since(f->s, a->id, 0, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(head, rows[2].seq); /* the newest point */
    free(rows);
    /* Nothing is newer than the head. */
    assert_int_equal(store_metrics_since(f->s, a->id, head, 100, &rows, &n), TY_OK);
    assert_int_equal(n, 0);
    free(rows);
    store_jobs_free(a, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_feed_carries_the_job, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_feed_of_one_job, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_feed_shows_notes, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_feed_refuses_bad_arguments, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_head_follows_points, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_change_hook_get_allows_chaining,
                                        store_fixture_setup, store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
