/*
 * test_sweep_stop.c - scheduler/sweep_stop.c: median early stopping applied to a stored sweep
 * (the store's facts, the rule, the store's cancel). What a user notices: a trial worse than the
 * median of the succeeded trials at its step is cancelled with reason "EarlyStopped" and a
 * sentence naming the median; until enough trials succeeded, or while it is better, it runs on.
 */
#include "tests/unit/test_store_util.h"

#include "scheduler/sweep_stop.h"

#define NTRIALS 3

static void report(store *s, const char *job, int64_t step, double value)
{
    const char *names[] = {"loss"};
    store_metric_in p = {.name = 0, .step = step, .time_ms = 1, .value = value};
    assert_int_equal(store_metrics_append(s, job, names, 1, &p, 1), TY_OK);
}

static void run(store *s, const char *id)
{
    static const job_state path[] = {JOB_ADMITTED, JOB_STARTING, JOB_RUNNING};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(move_job(s, id, path[i]), TY_OK);
}

static void test_median_stopping(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1], trial[NTRIALS][STORE_ID_LEN + 1];
    store_job_new jobs[NTRIALS];
    const char *params[NTRIALS] = {"{}", "{}", "{}"};
    store_label label = {"trainyard.io/sweep", NULL};
    assert_int_equal(store_sweep_id_new(id), TY_OK);
    label.value = id;
    for (int i = 0; i < NTRIALS; i++) {
        jobs[i] = job_template("trial", "default");
        jobs[i].labels = &label;
        jobs[i].nlabels = 1;
    }
    store_sweep_new in = {.id = id,
                          .name = "es",
                          .algorithm = "grid",
                          .parallelism = 3,
                          .metric = "loss",
                          .stop_min_trials = 2,
                          .stop_min_step = 1,
                          .body_json = "{}",
                          .trials = jobs,
                          .params_json = params,
                          .ntrials = NTRIALS};
    assert_int_equal(store_sweep_create(f->s, &in), TY_OK);
    store_sweep *sw = NULL;
    assert_int_equal(store_sweep_get(f->s, id, &sw), TY_OK);
    for (int i = 0; i < NTRIALS; i++) {
        memcpy(trial[i], sw->trials[i].job_id, STORE_ID_LEN + 1);
        run(f->s, trial[i]);
    }
    store_sweeps_free(sw, 1);
    int stopped = -1;
    /* Nothing reported yet: nothing to judge. */
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    report(f->s, trial[0], 1, 1.0);
    report(f->s, trial[0], 2, 0.5);
    report(f->s, trial[1], 1, 0.8);
    report(f->s, trial[1], 2, 0.4);
    report(f->s, trial[2], 1, 5.0);
    /* Far worse, but no trial has succeeded yet: the rule does not apply. */
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    assert_int_equal(move_job(f->s, trial[0], JOB_SUCCEEDED), TY_OK);
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0); /* one succeeded of the two needed */
    assert_int_equal(move_job(f->s, trial[1], JOB_SUCCEEDED), TY_OK);
    report(f->s, trial[2], 1, 0.85); /* the median at step 1 is 0.9: better */
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    report(f->s, trial[2], 2, 0.6); /* the median at step 2 is 0.45: worse */
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 1);
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->s, trial[2], &ev, &n), TY_OK);
    assert_int_equal(ev[n - 1].to, JOB_CANCELLING);
    assert_string_equal(ev[n - 1].reason, "EarlyStopped");
    assert_string_equal(ev[n - 1].message,
                        "loss 0.6 at step 2 is worse than the median 0.45 of 2 succeeded trials");
    store_events_free(ev, n);
    /* Once stopping, nothing more happens; a job outside sweeps is left alone. */
    assert_int_equal(sweep_stop_check(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    store_job *other = submit_one(f->s, "other", "default");
    report(f->s, other->id, 5, 100.0);
    assert_int_equal(sweep_stop_check(f->s, other->id, &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    store_jobs_free(other, 1);
    assert_int_equal(sweep_stop_check(f->s, NULL, &stopped), TY_EINVAL);
    assert_int_equal(stopped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_median_stopping, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
