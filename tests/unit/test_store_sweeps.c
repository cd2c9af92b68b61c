/* Unit tests for store/store_sweeps.c: a sweep and its trial jobs, their objective values,
 * the listing and the cancel. */
#include "tests/unit/test_store_util.h"

#include <math.h>

#define NTRIALS 3

/* A sweep of NTRIALS trials, each a job labelled with the sweep; its id goes to id. */
static void create(store *s, const char *name, int parallelism, char id[STORE_ID_LEN + 1])
{
    store_job_new jobs[NTRIALS];
    store_label labels[NTRIALS][2];
    char trial[NTRIALS][8];
    const char *params[NTRIALS];
    static const char *const pj[NTRIALS] = {"{\"lr\":0.1}", "{\"lr\":0.01}", "{\"lr\":0.001}"};
    assert_int_equal(store_sweep_id_new(id), TY_OK);
    for (int i = 0; i < NTRIALS; i++) {
        snprintf(trial[i], sizeof trial[i], "%d", i);
        labels[i][0] = (store_label){"trainyard.io/sweep", id};
        labels[i][1] = (store_label){"trainyard.io/sweep-trial", trial[i]};
        jobs[i] = job_template("trial", "default");
        jobs[i].labels = labels[i];
        jobs[i].nlabels = 2;
        params[i] = pj[i];
    }
    store_sweep_new in = {.id = id,
                          .name = name,
                          .algorithm = "grid",
                          .parallelism = parallelism,
                          .metric = "loss",
                          .maximize = 0,
                          .stop_min_trials = -1,
                          .body_json = "{}",
                          .trials = jobs,
                          .params_json = params,
                          .ntrials = NTRIALS};
    assert_int_equal(store_sweep_create(s, &in), TY_OK);
}

static store_sweep *get(store *s, const char *id)
{
    store_sweep *sw = NULL;
    assert_int_equal(store_sweep_get(s, id, &sw), TY_OK);
    assert_non_null(sw);
    return sw;
}

static void test_create_makes_every_trial_job(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    uint64_t before = commits(f->s);
    create(f->s, "lr", 2, id);
    assert_int_equal(commits(f->s), before + 1); /* the sweep and its trials: one commit */
    store_sweep *sw = get(f->s, id);
    assert_string_equal(sw->id, id);
    assert_string_equal(sw->name, "lr");
    assert_string_equal(sw->algorithm, "grid");
    assert_int_equal(sw->parallelism, 2);
    assert_int_equal(sw->ntrials, NTRIALS);
    assert_int_equal(sw->ntrials_read, NTRIALS);
    assert_int_equal(sw->counts[JOB_PENDING], NTRIALS);
    assert_string_equal(store_sweep_state(sw), "running");
    for (int i = 0; i < NTRIALS; i++) {
        assert_int_equal(sw->trials[i].index, i);
        assert_int_equal(sw->trials[i].state, JOB_PENDING);
        assert_false(sw->trials[i].has_value);
        store_job *job = NULL;
        assert_int_equal(store_job_get(f->s, sw->trials[i].job_id, &job), TY_OK);
        assert_int_equal(job->state, JOB_PENDING);
        store_jobs_free(job, 1);
        assert_int_equal(count_events(f->s, sw->trials[i].job_id), 1);
    }
    assert_string_equal(sw->trials[1].params_json, "{\"lr\":0.01}");
    /* The trials are found by their sweep's label like any labelled job. */
    store_label l = {"trainyard.io/sweep", id};
    store_job_filter flt = {.labels = &l, .nlabels = 1, .limit = 100};
    store_job *jobs = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, NTRIALS);
    store_jobs_free(jobs, n);
    store_sweeps_free(sw, 1);
}

static void test_a_taken_id_creates_nothing(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    create(f->s, "first", 1, id);
    store_job_new job = job_template("trial", "default");
    const char *params[] = {"{}"};
    store_sweep_new in = {.id = id,
                          .name = "again",
                          .algorithm = "grid",
                          .parallelism = 1,
                          .metric = "loss",
                          .stop_min_trials = -1,
                          .body_json = "{}",
                          .trials = &job,
                          .params_json = params,
                          .ntrials = 1};
    assert_int_equal(store_sweep_create(f->s, &in), TY_EEXISTS);
    store_job_filter flt = {.limit = 100};
    store_job *jobs = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, NTRIALS); /* the first sweep's trials only */
    store_jobs_free(jobs, n);
}

static void report(store *s, const char *job, int64_t step, double value)
{
    const char *names[] = {"loss"};
    store_metric_in p = {.name = 0, .step = step, .time_ms = 1, .value = value};
    assert_int_equal(store_metrics_append(s, job, names, 1, &p, 1), TY_OK);
}

static void test_objective_is_the_last_reported_value(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    create(f->s, "lr", 3, id);
    store_sweep *sw = get(f->s, id);
    char job0[STORE_ID_LEN + 1], job2[STORE_ID_LEN + 1];
    memcpy(job0, sw->trials[0].job_id, sizeof job0);
    memcpy(job2, sw->trials[2].job_id, sizeof job2);
    store_sweeps_free(sw, 1);
    report(f->s, job0, 5, 0.5);
    report(f->s, job0, 10, 0.25);
    report(f->s, job0, 7, 0.75); /* written later, but an earlier step */
    report(f->s, job2, 1, 2.0);
    const char *other[] = {"accuracy"};
    store_metric_in p = {.name = 0, .step = 20, .time_ms = 1, .value = 9};
    assert_int_equal(store_metrics_append(f->s, job2, other, 1, &p, 1), TY_OK);
    sw = get(f->s, id);
    assert_true(sw->trials[0].has_value);
    assert_int_equal(sw->trials[0].step, 10);
    assert_true(fabs(sw->trials[0].value - 0.25) < 1e-12);
    assert_false(sw->trials[1].has_value);
    assert_true(sw->trials[2].has_value);
    assert_int_equal(sw->trials[2].step, 1);
    assert_true(fabs(sw->trials[2].value - 2.0) < 1e-12);
    store_sweeps_free(sw, 1);
}

static void test_cancel_ends_every_open_trial_once(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    create(f->s, "lr", 3, id);
    store_sweep *sw = get(f->s, id);
    assert_int_equal(move_job(f->s, sw->trials[0].job_id, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, sw->trials[0].job_id, JOB_STARTING), TY_OK);
    assert_int_equal(move_job(f->s, sw->trials[1].job_id, JOB_FAILED), TY_OK);
    store_sweeps_free(sw, 1);
    size_t moved = 99;
    assert_int_equal(store_sweep_cancel(f->s, id, "cancelled by test", &moved), TY_OK);
    assert_int_equal(moved, 2);
    sw = get(f->s, id);
    assert_int_equal(sw->trials[0].state, JOB_CANCELLING); /* it was starting: it stops first */
    assert_int_equal(sw->trials[1].state, JOB_FAILED);
    assert_int_equal(sw->trials[2].state, JOB_CANCELLED);
    assert_string_equal(store_sweep_state(sw), "running");
    assert_int_equal(move_job(f->s, sw->trials[0].job_id, JOB_CANCELLED), TY_OK);
    store_sweeps_free(sw, 1);
    sw = get(f->s, id);
    assert_string_equal(store_sweep_state(sw), "cancelled");
    assert_true(sw->cancelled_at_ms > 0);
    store_sweeps_free(sw, 1);
    assert_int_equal(store_sweep_cancel(f->s, id, "again", &moved), TY_OK);
    assert_int_equal(moved, 0);
    assert_int_equal(store_sweep_cancel(f->s, "0000000000000000000000000z", "x", &moved),
                     TY_ENOTFOUND);
    assert_int_equal(store_sweep_get(f->s, "nope", &sw), TY_ENOTFOUND);
}

static void test_finished_when_every_trial_ended(void **state)
{
    store_fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    create(f->s, "lr", 3, id);
    store_sweep *sw = get(f->s, id);
    assert_int_equal(move_job(f->s, sw->trials[0].job_id, JOB_FAILED), TY_OK);
    assert_int_equal(move_job(f->s, sw->trials[1].job_id, JOB_FAILED), TY_OK);
    store_sweeps_free(sw, 1);
    sw = get(f->s, id);
    assert_string_equal(store_sweep_state(sw), "running"); /* a failure stops no other trial */
    assert_int_equal(move_job(f->s, sw->trials[2].job_id, JOB_FAILED), TY_OK);
    store_sweeps_free(sw, 1);
    sw = get(f->s, id);
    assert_string_equal(store_sweep_state(sw), "finished");
    assert_int_equal(sw->counts[JOB_FAILED], 3);
    store_sweeps_free(sw, 1);
}

static void test_list_is_newest_first_in_pages(void **state)
{
    store_fixture *f = *state;
    char ids[5][STORE_ID_LEN + 1];
    for (int i = 0; i < 5; i++)
        create(f->s, "s", 1, ids[i]);
    store_sweep *page = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_sweeps_list(f->s, NULL, 0, 3, &page, &n, &next), TY_OK);
    assert_int_equal(n, 3);
    assert_true(next > 0);
    assert_string_equal(page[0].id, ids[4]);
    assert_string_equal(page[2].id, ids[2]);
    assert_int_equal(page[0].counts[JOB_PENDING], NTRIALS);
    assert_null(page[0].trials);
    store_sweeps_free(page, n);
    assert_int_equal(store_sweeps_list(f->s, NULL, next, 3, &page, &n, &next), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(next, 0);
    assert_string_equal(page[1].id, ids[0]);
    store_sweeps_free(page, n);
    assert_int_equal(store_sweeps_list(f->s, NULL, 0, 0, &page, &n, &next), TY_EINVAL);
}

/* Admission's lines: a queue's jobs outside sweeps, and each sweep's trials apart. */
static void test_pending_lines(void **state)
{
    store_fixture *f = *state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    store_job *other = submit_one(f->s, "other", "default");
    create(f->s, "a", 2, a);
    create(f->s, "b", 3, b);
    store_job *page = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_pending(f->s, "default", 0, 0, 100, &page, &n), TY_OK);
    assert_int_equal(n, 1); /* the trials are not in the queue's own line */
    assert_string_equal(page[0].id, other->id);
    assert_int_equal(page[0].sweep, 0);
    store_jobs_free(page, n);
    store_pending_sweep *sw = NULL;
    assert_int_equal(store_pending_sweeps(f->s, "default", 0, 10, &sw, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sw[0].parallelism, 2);
    assert_int_equal(sw[1].parallelism, 3);
    assert_true(sw[0].sweep < sw[1].sweep);
    int64_t first = sw[0].sweep, second = sw[1].sweep;
    free(sw);
    assert_int_equal(store_pending_sweeps(f->s, "default", first, 10, &sw, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(sw[0].sweep, second);
    free(sw);
    assert_int_equal(store_pending_sweeps(f->s, "other", 0, 10, &sw, &n), TY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_jobs_pending_sweep(f->s, "default", second, 0, 0, 2, &page, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(page[0].sweep, second);
    assert_int_equal(page[0].sweep_parallelism, 3);
    assert_true(page[0].seq < page[1].seq);
    int64_t prio = page[1].priority, seq = page[1].seq;
    store_jobs_free(page, n);
    assert_int_equal(store_jobs_pending_sweep(f->s, "default", second, prio, seq, 10, &page, &n),
                     TY_OK);
    assert_int_equal(n, 1); /* the walk resumes after its cursor */
    store_jobs_free(page, n);
    store_jobs_free(other, 1);
}

static void run_to(store *s, const char *id, job_state last)
{
    static const job_state path[] = {JOB_ADMITTED, JOB_STARTING, JOB_RUNNING};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(move_job(s, id, path[i]), TY_OK);
    if (last != JOB_RUNNING)
        assert_int_equal(move_job(s, id, last), TY_OK);
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
    store_sweep *sw = get(f->s, id);
    for (int i = 0; i < NTRIALS; i++) {
        memcpy(trial[i], sw->trials[i].job_id, STORE_ID_LEN + 1);
        run_to(f->s, trial[i], JOB_RUNNING);
    }
    store_sweeps_free(sw, 1);
    int stopped = -1;
    report(f->s, trial[0], 1, 1.0);
    report(f->s, trial[0], 2, 0.5);
    report(f->s, trial[1], 1, 0.8);
    report(f->s, trial[1], 2, 0.4);
    report(f->s, trial[2], 1, 5.0);
    /* Far worse, but no trial has succeeded yet: the rule does not apply. */
    assert_int_equal(store_sweep_check_stop(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    assert_int_equal(move_job(f->s, trial[0], JOB_SUCCEEDED), TY_OK);
    assert_int_equal(store_sweep_check_stop(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0); /* one succeeded of the two needed */
    assert_int_equal(move_job(f->s, trial[1], JOB_SUCCEEDED), TY_OK);
    report(f->s, trial[2], 1, 0.85); /* the median at step 1 is 0.9: better */
    assert_int_equal(store_sweep_check_stop(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    report(f->s, trial[2], 2, 0.6); /* the median at step 2 is 0.45: worse */
    assert_int_equal(store_sweep_check_stop(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 1);
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->s, trial[2], &ev, &n), TY_OK);
    assert_int_equal(ev[n - 1].to, JOB_CANCELLING);
    assert_string_equal(ev[n - 1].reason, "EarlyStopped");
    assert_non_null(strstr(ev[n - 1].message, "median 0.45 of 2 succeeded trials"));
    store_events_free(ev, n);
    /* Once stopping, nothing more happens; a job outside sweeps is left alone. */
    assert_int_equal(store_sweep_check_stop(f->s, trial[2], &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    store_job *other = submit_one(f->s, "other", "default");
    assert_int_equal(store_sweep_check_stop(f->s, other->id, &stopped), TY_OK);
    assert_int_equal(stopped, 0);
    store_jobs_free(other, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_makes_every_trial_job, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_a_taken_id_creates_nothing, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_objective_is_the_last_reported_value,
                                        store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_ends_every_open_trial_once,
                                        store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_finished_when_every_trial_ended, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_list_is_newest_first_in_pages, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_pending_lines, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_median_stopping, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
