/* Unit tests for store/store_jobs.c: submit, get, events, transitions, idempotency. */
#include "tests/unit/test_store_util.h"

/* The number of jobs stored, counted by listing them all. */
static size_t count_jobs(store *s)
{
    size_t total = 0;
    store_job_filter flt = {.limit = 1000};
    for (;;) {
        store_job *jobs = NULL;
        size_t n = 0;
        int64_t next = 0;
        assert_int_equal(store_jobs_list(s, &flt, &jobs, &n, &next), TY_OK);
        store_jobs_free(jobs, n);
        total += n;
        if (!next)
            return total;
        flt.before_seq = next;
    }
}

static job_state state_of(store *s, const char *id)
{
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, id, &j), TY_OK);
    job_state st = j->state;
    store_jobs_free(j, 1);
    return st;
}

static void test_submit_get_round_trip(void **state)
{
    store_fixture *f = *state;
    store_label labels[] = {{"team", "vision"}, {"sweep", "lr-grid"}};
    store_job_new in = {
        .name = "fmnist-lr-0-05",
        .queue = "gpu",
        .priority = -42,
        .spec_json = "{\"name\":\"fmnist-lr-0-05\",\"image\":\"img:1\"}",
        .labels = labels,
        .nlabels = 2,
    };
    store_job *out = NULL;
    size_t n = 0;
    int replayed = -1;
    assert_int_equal(store_jobs_submit(f->s, &in, 1, NULL, NULL, &out, &n, &replayed), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(replayed, 0);
    assert_int_equal(strlen(out->id), STORE_ID_LEN);
    for (const char *p = out->id; *p; p++)
        assert_true((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z'));
    assert_true(out->seq > 0);
    assert_int_equal(out->state, JOB_PENDING);
    assert_int_equal(out->attempt, 0);
    assert_true(out->created_at_ms > 0);
    assert_int_equal(out->created_at_ms, out->updated_at_ms);

    store_job *got = NULL;
    assert_int_equal(store_job_get(f->s, out->id, &got), TY_OK);
    assert_int_equal(got->seq, out->seq);
    assert_string_equal(got->id, out->id);
    assert_string_equal(got->name, "fmnist-lr-0-05");
    assert_string_equal(got->queue, "gpu");
    assert_int_equal(got->priority, -42);
    assert_int_equal(got->state, JOB_PENDING);
    assert_int_equal(got->attempt, 0);
    assert_int_equal(got->created_at_ms, out->created_at_ms);
    assert_int_equal(got->updated_at_ms, out->updated_at_ms);
    assert_string_equal(got->spec_json, in.spec_json);
    assert_string_equal(got->spec_json, out->spec_json);
    assert_string_equal(got->name, out->name);
    store_jobs_free(got, 1);
    store_jobs_free(out, 1);
}

static void test_get_unknown_job(void **state)
{
    store_fixture *f = *state;
    static const char *const ids[] = {"00000000000000000000000000", "short", "",
                                      "zzzzzzzzzzzzzzzzzzzzzzzzzzzz"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        store_job *j = NULL;
        assert_int_equal(store_job_get(f->s, ids[i], &j), TY_ENOTFOUND);
        assert_null(j);
        store_event *ev = NULL;
        size_t n = 7;
        assert_int_equal(store_job_events(f->s, ids[i], &ev, &n), TY_ENOTFOUND);
        assert_null(ev);
        assert_int_equal(n, 0);
        assert_int_equal(move_job(f->s, ids[i], JOB_ADMITTED), TY_ENOTFOUND);
    }
}

static void test_batch_keeps_input_order(void **state)
{
    store_fixture *f = *state;
    static const char *const names[] = {"a-0", "a-1", "a-2", "a-3", "a-4"};
    store_job_new in[5];
    for (int i = 0; i < 5; i++)
        in[i] = job_template(names[i], "default");
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(f->s, in, 5, NULL, NULL, &out, &n, NULL), TY_OK);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(out[i].name, names[i]);
        if (i > 0) {
            assert_int_equal(out[i].seq, out[i - 1].seq + 1);
            assert_true(strcmp(out[i].id, out[i - 1].id) > 0);
            assert_true(out[i].created_at_ms >= out[i - 1].created_at_ms);
        }
    }
    /* Each job has one event, its own "Submitted" at its creation time, in the jobs' order. */
    int64_t last_event = 0;
    for (int i = 0; i < 5; i++) {
        store_event *ev = NULL;
        size_t nev = 0;
        assert_int_equal(store_job_events(f->s, out[i].id, &ev, &nev), TY_OK);
        assert_int_equal(nev, 1);
        assert_int_equal(ev[0].from, JOB_STATE_NONE);
        assert_int_equal(ev[0].to, JOB_PENDING);
        assert_string_equal(ev[0].reason, "Submitted");
        assert_int_equal(ev[0].time_ms, out[i].created_at_ms);
        assert_true(ev[0].seq > last_event);
        last_event = ev[0].seq;
        store_events_free(ev, nev);
    }
    store_jobs_free(out, n);
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 5);
    assert_int_equal(st.jobs_submitted_total, 5);
}

static void test_batch_is_all_or_nothing(void **state)
{
    store_fixture *f = *state;
    store_label null_key[] = {{NULL, "v"}};
    store_label dup_label[] = {{"k", "v"}, {"k", "v"}};
    struct {
        const char *what;
        store_job_new bad;
    } cases[] = {
        {"NULL name", {.name = NULL, .queue = "default", .spec_json = "{}"}},
        {"empty name", {.name = "", .queue = "default", .spec_json = "{}"}},
        {"NULL queue", {.name = "b", .queue = NULL, .spec_json = "{}"}},
        {"NULL spec", {.name = "b", .queue = "default", .spec_json = NULL}},
        {"NULL label key",
         {.name = "b", .queue = "q", .spec_json = "{}", .labels = null_key, .nlabels = 1}},
        {"duplicate label",
         {.name = "b", .queue = "q", .spec_json = "{}", .labels = dup_label, .nlabels = 2}},
    };
    store_job *keep = submit_one(f->s, "before", "default");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        store_job_new in[3] = {job_template("good-1", "default"), cases[i].bad,
                               job_template("good-3", "default")};
        store_job *out = (store_job *)1;
        size_t n = 99;
        int replayed = -1;
        ty_err e = store_jobs_submit(f->s, in, 3, NULL, NULL, &out, &n, &replayed);
        if (e != TY_EINVAL)
            fail_msg("%s: got %s", cases[i].what, ty_strerror(e));
        assert_null(out);
        assert_int_equal(n, 0);
        assert_int_equal(count_jobs(f->s), 1);
    }
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 1);
    assert_int_equal(st.jobs_submitted_total, 1);
    /* The store still works, and the next id still follows the last one. */
    store_job *after = submit_one(f->s, "after", "default");
    assert_true(strcmp(after->id, keep->id) > 0);
    store_jobs_free(after, 1);
    store_jobs_free(keep, 1);
}

static void test_invalid_arguments(void **state)
{
    store_fixture *f = *state;
    store_job_new in = job_template("x", "default");
    store_job *out = NULL;
    size_t n = 0;
    unsigned char hash[32] = {0};
    assert_int_equal(store_jobs_submit(f->s, &in, 0, NULL, NULL, &out, &n, NULL), TY_EINVAL);
    assert_int_equal(store_jobs_submit(f->s, NULL, 1, NULL, NULL, &out, &n, NULL), TY_EINVAL);
    assert_int_equal(store_jobs_submit(f->s, &in, 1, "k", NULL, &out, &n, NULL), TY_EINVAL);
    assert_int_equal(store_jobs_submit(f->s, &in, 1, NULL, hash, NULL, &n, NULL), TY_EINVAL);
    assert_int_equal(store_job_transition(f->s, "x", NULL, NULL, "R", "", NULL), TY_EINVAL);
    assert_int_equal(count_jobs(f->s), 0);
}

static void test_events_follow_transitions(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "ev", "default");
    static const job_state path[] = {JOB_ADMITTED, JOB_STARTING, JOB_RUNNING,  JOB_RESTARTING,
                                     JOB_STARTING, JOB_RUNNING,  JOB_SUCCEEDED};
    static const int attempts[] = {0, 1, 1, 1, 2, 2, 2};
    job_state from = JOB_PENDING;
    for (size_t i = 0; i < sizeof path / sizeof *path; i++) {
        job_state to = path[i];
        store_job *out = NULL;
        assert_int_equal(
            store_job_transition(f->s, j->id, decide_to, &to, "Step", "step message", &out), TY_OK);
        assert_non_null(out);
        assert_int_equal(out->state, to);
        assert_int_equal(out->attempt, attempts[i]);
        assert_true(out->updated_at_ms >= out->created_at_ms);
        store_jobs_free(out, 1);
        assert_int_equal(state_of(f->s, j->id), to);

        store_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(store_job_events(f->s, j->id, &ev, &n), TY_OK);
        assert_int_equal(n, i + 2);
        assert_int_equal(ev[0].from, JOB_STATE_NONE);
        assert_int_equal(ev[0].to, JOB_PENDING);
        assert_string_equal(ev[0].reason, "Submitted");
        assert_string_equal(ev[0].message, "");
        assert_int_equal(ev[n - 1].from, from);
        assert_int_equal(ev[n - 1].to, to);
        assert_string_equal(ev[n - 1].reason, "Step");
        assert_string_equal(ev[n - 1].message, "step message");
        for (size_t k = 1; k < n; k++) {
            assert_true(ev[k].seq > ev[k - 1].seq);
            assert_true(ev[k].time_ms >= ev[k - 1].time_ms);
        }
        store_events_free(ev, n);
        from = to;
    }
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 0);
    assert_int_equal(st.jobs_by_state[JOB_SUCCEEDED], 1);
    store_jobs_free(j, 1);
}

static void test_illegal_transition_writes_nothing(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "illegal", "default");
    static const job_state targets[] = {JOB_SUCCEEDED, JOB_RUNNING,     JOB_CANCELLING,
                                        JOB_STARTING,  JOB_STATE_COUNT, JOB_STATE_NONE};
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        job_state to = targets[i];
        store_job *out = (store_job *)1;
        assert_int_equal(store_job_transition(f->s, j->id, decide_to, &to, "Bad", "", &out),
                         TY_EINTERNAL);
        assert_null(out);
    }
    assert_int_equal(state_of(f->s, j->id), JOB_PENDING);
    assert_int_equal(count_events(f->s, j->id), 1);
    /* Terminal states never change again. */
    assert_int_equal(move_job(f->s, j->id, JOB_FAILED), TY_OK);
    assert_int_equal(move_job(f->s, j->id, JOB_PENDING), TY_EINTERNAL);
    assert_int_equal(state_of(f->s, j->id), JOB_FAILED);
    assert_int_equal(count_events(f->s, j->id), 2);
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 0);
    assert_int_equal(st.jobs_by_state[JOB_FAILED], 1);
    store_jobs_free(j, 1);
}

/* The cancel rule of the API, as a decide function. */
static ty_err decide_cancel(job_state cur, job_state *to, void *ud)
{
    (void)ud;
    if (job_state_cancel_conflicts(cur))
        return TY_ECONFLICT;
    job_state_cancel_target(cur, to);
    return TY_OK;
}

static ty_err decide_fail(job_state cur, job_state *to, void *ud)
{
    (void)cur;
    (void)to;
    return *(ty_err *)ud;
}

static void test_cancel_semantics(void **state)
{
    store_fixture *f = *state;
    static const struct {
        job_state path[4]; /* transitions from PENDING, JOB_STATE_NONE-terminated */
        ty_err result;
        job_state after;
        int new_event;
    } cases[] = {
        {{JOB_STATE_NONE}, TY_OK, JOB_CANCELLED, 1},
        {{JOB_ADMITTED, JOB_STATE_NONE}, TY_OK, JOB_CANCELLED, 1},
        {{JOB_ADMITTED, JOB_STARTING, JOB_STATE_NONE}, TY_OK, JOB_CANCELLING, 1},
        {{JOB_ADMITTED, JOB_STARTING, JOB_RUNNING, JOB_STATE_NONE}, TY_OK, JOB_CANCELLING, 1},
        {{JOB_ADMITTED, JOB_STARTING, JOB_CANCELLING, JOB_STATE_NONE}, TY_OK, JOB_CANCELLING, 0},
        {{JOB_CANCELLED, JOB_STATE_NONE}, TY_OK, JOB_CANCELLED, 0},
        {{JOB_FAILED, JOB_STATE_NONE}, TY_ECONFLICT, JOB_FAILED, 0},
        {{JOB_ADMITTED, JOB_STARTING, JOB_SUCCEEDED, JOB_STATE_NONE},
         TY_ECONFLICT,
         JOB_SUCCEEDED,
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        store_job *j = submit_one(f->s, "cancel-me", "default");
        for (int k = 0; cases[i].path[k] != JOB_STATE_NONE; k++)
            assert_int_equal(move_job(f->s, j->id, cases[i].path[k]), TY_OK);
        size_t before = count_events(f->s, j->id);
        store_job *out = NULL;
        assert_int_equal(store_job_transition(f->s, j->id, decide_cancel, NULL, "Cancelled",
                                              "cancelled by the user", &out),
                         cases[i].result);
        assert_non_null(out); /* on TY_OK and on decide()'s TY_ECONFLICT */
        assert_int_equal(out->state, cases[i].after);
        assert_string_equal(out->id, j->id);
        store_jobs_free(out, 1);
        assert_int_equal(state_of(f->s, j->id), cases[i].after);
        assert_int_equal(count_events(f->s, j->id), before + (size_t)cases[i].new_event);
        /* Cancelling twice is harmless. */
        assert_int_equal(
            store_job_transition(f->s, j->id, decide_cancel, NULL, "Cancelled", "", NULL),
            cases[i].result);
        assert_int_equal(count_events(f->s, j->id), before + (size_t)cases[i].new_event);
        store_jobs_free(j, 1);
    }
}

static void test_decide_error_aborts(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "decide-error", "default");
    ty_err fail = TY_EINVAL;
    store_job *out = (store_job *)1;
    assert_int_equal(store_job_transition(f->s, j->id, decide_fail, &fail, "X", "", &out),
                     TY_EINVAL);
    assert_null(out); /* only TY_OK and TY_ECONFLICT return the job */
    assert_int_equal(state_of(f->s, j->id), JOB_PENDING);
    assert_int_equal(count_events(f->s, j->id), 1);
    store_jobs_free(j, 1);
}

static void test_idempotent_replay_and_conflict(void **state)
{
    store_fixture *f = *state;
    unsigned char h1[32], h2[32];
    memset(h1, 0x11, sizeof h1);
    memset(h2, 0x22, sizeof h2);
    store_job_new in[3] = {job_template("idem-0", "default"), job_template("idem-1", "default"),
                           job_template("idem-2", "default")};
    store_job *first = NULL, *again = NULL, *other = NULL;
    size_t n1 = 0, n2 = 0, n3 = 0;
    int replayed = -1;
    assert_int_equal(store_jobs_submit(f->s, in, 3, "ci:key-1", h1, &first, &n1, &replayed), TY_OK);
    assert_int_equal(replayed, 0);
    assert_int_equal(n1, 3);
    /* The job changed meanwhile: the replay shows it as it is now. */
    assert_int_equal(move_job(f->s, first[1].id, JOB_ADMITTED), TY_OK);

    assert_int_equal(store_jobs_submit(f->s, in, 3, "ci:key-1", h1, &again, &n2, &replayed), TY_OK);
    assert_int_equal(replayed, 1);
    assert_int_equal(n2, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(again[i].id, first[i].id);
        assert_int_equal(again[i].seq, first[i].seq);
        assert_string_equal(again[i].name, first[i].name);
        assert_string_equal(again[i].spec_json, first[i].spec_json);
    }
    assert_int_equal(again[1].state, JOB_ADMITTED);
    assert_int_equal(count_jobs(f->s), 3);

    store_job *bad = (store_job *)1;
    size_t nbad = 5;
    assert_int_equal(store_jobs_submit(f->s, in, 3, "ci:key-1", h2, &bad, &nbad, &replayed),
                     TY_ECONFLICT);
    assert_null(bad);
    assert_int_equal(nbad, 0);
    assert_int_equal(replayed, 0);
    assert_int_equal(count_jobs(f->s), 3);

    /* Another scope is another key. */
    assert_int_equal(store_jobs_submit(f->s, in, 1, "cd:key-1", h1, &other, &n3, &replayed), TY_OK);
    assert_int_equal(replayed, 0);
    assert_string_not_equal(other[0].id, first[0].id);
    assert_int_equal(count_jobs(f->s), 4);

    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_submitted_total, 4);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 3);
    assert_int_equal(st.jobs_by_state[JOB_ADMITTED], 1);
    store_jobs_free(first, n1);
    store_jobs_free(again, n2);
    store_jobs_free(other, n3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_get_round_trip, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_get_unknown_job, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_batch_keeps_input_order, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_batch_is_all_or_nothing, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_arguments, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_events_follow_transitions, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_illegal_transition_writes_nothing, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_semantics, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_decide_error_aborts, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_replay_and_conflict, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
