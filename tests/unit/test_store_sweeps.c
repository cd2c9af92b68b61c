/* Unit tests for store/store_sweeps.c: a sweep and its trial jobs, their objective values,
 * the listing, the cancel, and the facts median early stopping judges on (the rule's own
 * cases are in test_early_stop.c). */
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
    /* They wait in a line of their own, in order (newest first in the list). */
    store_line_place pl[NTRIALS];
    assert_int_equal(store_jobs_line_places(f->s, jobs, n, pl), TY_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(pl[i].ahead, (int64_t)(n - 1 - i));
        assert_string_equal(pl[i].head_id, jobs[n - 1].id);
    }
    store_line_places_clear(pl, n);
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

/* A sweep of NTRIALS running trials with median early stopping (min_trials 2, min_step 1);
 * their ids go to trial. */
static void create_with_rule(store *s, char trial[NTRIALS][STORE_ID_LEN + 1])
{
    char id[STORE_ID_LEN + 1];
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
                          .maximize = 1,
                          .stop_min_trials = 2,
                          .stop_min_step = 1,
                          .body_json = "{}",
                          .trials = jobs,
                          .params_json = params,
                          .ntrials = NTRIALS};
    assert_int_equal(store_sweep_create(s, &in), TY_OK);
    store_sweep *sw = get(s, id);
    for (int i = 0; i < NTRIALS; i++) {
        memcpy(trial[i], sw->trials[i].job_id, STORE_ID_LEN + 1);
        run_to(s, trial[i], JOB_RUNNING);
    }
    store_sweeps_free(sw, 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The facts early stopping judges on: the rule as stored, the trial's latest point, and each
 * succeeded trial's last value at or before that step. The store decides nothing. */
static void test_stop_facts(void **state)
{
    store_fixture *f = *state;
    char trial[NTRIALS][STORE_ID_LEN + 1];
    store_stop_facts sf;
    create_with_rule(f->s, trial);
    /* A trial that reported nothing: the rule, no point. */
    assert_int_equal(store_sweep_stop_facts(f->s, trial[2], &sf), TY_OK);
    assert_true(sf.rule);
    assert_string_equal(sf.metric, "loss");
    assert_int_equal(sf.maximize, 1);
    assert_int_equal(sf.min_trials, 2);
    assert_int_equal(sf.min_step, 1);
    assert_false(sf.has_point);
    assert_null(sf.done);
    store_stop_facts_clear(&sf);

    report(f->s, trial[0], 1, 1.0);
    report(f->s, trial[0], 2, 0.5);
    report(f->s, trial[0], 3, 0.25);
    report(f->s, trial[1], 2, 0.75); /* reports every other step */
    report(f->s, trial[2], 0, 5.0);
    /* Below min_step the values are not read: the point alone. */
    assert_int_equal(store_sweep_stop_facts(f->s, trial[2], &sf), TY_OK);
    assert_true(sf.rule && sf.has_point);
    assert_int_equal(sf.step, 0);
    assert_true(sf.value == 5.0);
    assert_null(sf.done);
    assert_int_equal(sf.ndone, 0);
    store_stop_facts_clear(&sf);
    /* No trial succeeded yet: none to compare with. */
    report(f->s, trial[2], 1, 4.0);
    assert_int_equal(store_sweep_stop_facts(f->s, trial[2], &sf), TY_OK);
    assert_int_equal(sf.step, 1);
    assert_true(sf.value == 4.0);
    assert_int_equal(sf.ndone, 0);
    store_stop_facts_clear(&sf);
    assert_int_equal(move_job(f->s, trial[0], JOB_SUCCEEDED), TY_OK);
    assert_int_equal(move_job(f->s, trial[1], JOB_SUCCEEDED), TY_OK);
    /* At step 1 trial 1 has nothing yet: it is left out. */
    assert_int_equal(store_sweep_stop_facts(f->s, trial[2], &sf), TY_OK);
    assert_int_equal(sf.ndone, 1);
    assert_true(sf.done[0] == 1.0);
    store_stop_facts_clear(&sf);
    assert_null(sf.done);
    /* Each succeeded trial's last value at or before step 3: trial 0's at 3, trial 1's at 2. */
    report(f->s, trial[2], 3, 0.5);
    uint64_t before = commits(f->s);
    assert_int_equal(store_sweep_stop_facts(f->s, trial[2], &sf), TY_OK);
    assert_int_equal(commits(f->s), before); /* a read */
    assert_int_equal(sf.step, 3);
    assert_true(sf.value == 0.5);
    assert_int_equal(sf.ndone, 2);
    qsort(sf.done, sf.ndone, sizeof *sf.done, cmp_double);
    assert_true(sf.done[0] == 0.25 && sf.done[1] == 0.75);
    store_stop_facts_clear(&sf);

    /* A job outside sweeps, a sweep without the rule, an unknown job: no rule. */
    store_job *other = submit_one(f->s, "other", "default");
    assert_int_equal(store_sweep_stop_facts(f->s, other->id, &sf), TY_OK);
    assert_false(sf.rule);
    store_jobs_free(other, 1);
    char plain[STORE_ID_LEN + 1];
    create(f->s, "plain", 1, plain);
    store_sweep *sw = get(f->s, plain);
    assert_int_equal(store_sweep_stop_facts(f->s, sw->trials[0].job_id, &sf), TY_OK);
    assert_false(sf.rule);
    store_sweeps_free(sw, 1);
    assert_int_equal(store_sweep_stop_facts(f->s, "no-such-job", &sf), TY_OK);
    assert_false(sf.rule);
    assert_int_equal(store_sweep_stop_facts(f->s, NULL, &sf), TY_EINVAL);
    store_stop_facts_clear(NULL);
}

/* Stopping a trial moves it as a cancel would, with the reason and message given, once. */
static void test_stop_trial(void **state)
{
    store_fixture *f = *state;
    char trial[NTRIALS][STORE_ID_LEN + 1];
    create_with_rule(f->s, trial);
    int stopped = -1;
    assert_int_equal(store_sweep_stop_trial(f->s, trial[2], "EarlyStopped", "worse", &stopped),
                     TY_OK);
    assert_int_equal(stopped, 1);
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->s, trial[2], &ev, &n), TY_OK);
    assert_int_equal(ev[n - 1].to, JOB_CANCELLING);
    assert_string_equal(ev[n - 1].reason, "EarlyStopped");
    assert_string_equal(ev[n - 1].message, "worse");
    store_events_free(ev, n);
    /* Once stopping, nothing more happens; nor to a job that ended. */
    assert_int_equal(store_sweep_stop_trial(f->s, trial[2], "EarlyStopped", "worse", &stopped),
                     TY_OK);
    assert_int_equal(stopped, 0);
    assert_int_equal(move_job(f->s, trial[0], JOB_SUCCEEDED), TY_OK);
    assert_int_equal(store_sweep_stop_trial(f->s, trial[0], "EarlyStopped", "worse", &stopped),
                     TY_OK);
    assert_int_equal(stopped, 0);
    assert_int_equal(store_sweep_stop_trial(f->s, trial[1], "EarlyStopped", "m", NULL), TY_OK);
    assert_int_equal(store_sweep_stop_trial(f->s, "no-such-job", "EarlyStopped", "m", &stopped),
                     TY_ENOTFOUND);
    assert_int_equal(store_sweep_stop_trial(f->s, trial[1], NULL, "m", &stopped), TY_EINVAL);
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
        cmocka_unit_test_setup_teardown(test_stop_facts, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_stop_trial, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
