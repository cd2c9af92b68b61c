/* Unit tests for store/store_sched.c: batched updates, attempts, admission order, change feed. */
#include <pthread.h>
#include <stdatomic.h>

#include "tests/unit/test_store_util.h"

static store_job *get_job(store *s, const char *id)
{
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, id, &j), TY_OK);
    return j;
}

/* Submits n jobs with the given priorities (all 0 when NULL); caller frees. */
static store_job *submit_n(store *s, size_t n, const int64_t *prio)
{
    store_job_new in[16];
    assert_true(n <= sizeof in / sizeof *in);
    for (size_t i = 0; i < n; i++) {
        in[i] = job_template("job", "default");
        in[i].priority = prio ? prio[i] : 0;
    }
    store_job *out = NULL;
    size_t nout = 0;
    assert_int_equal(store_jobs_submit(s, in, n, NULL, NULL, &out, &nout, NULL), TY_OK);
    assert_int_equal(nout, n);
    return out;
}

/* An update of job id from `from` to `to` with no record and restarts unchanged. */
static store_update upd(const char *id, job_state from, job_state to)
{
    return (store_update){.id = id, .from = from, .to = to, .reason = "Test", .restarts = -1};
}

/* Moves a job along a path of states with single updates. */
static void walk(store *s, const char *id, const job_state *path, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        store_update u = upd(id, path[i - 1], path[i]);
        assert_int_equal(store_jobs_update(s, &u, 1), TY_OK);
        assert_int_equal(u.result, TY_OK);
    }
}

/* ---- batched updates ------------------------------------------------------ */

static void test_updates_share_one_commit(void **state)
{
    store_fixture *f = *state;
    enum { N = 8 };
    store_job *jobs = submit_n(f->s, N, NULL);
    store_update u[N];
    for (size_t i = 0; i < N; i++)
        u[i] = upd(jobs[i].id, JOB_PENDING, JOB_ADMITTED);
    uint64_t before = commits(f->s);
    assert_int_equal(store_jobs_update(f->s, u, N), TY_OK);
    assert_int_equal(commits(f->s), before + 1);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(u[i].result, TY_OK);
        assert_int_equal(u[i].now, JOB_ADMITTED);
        assert_int_equal(u[i].now_attempt, 0);
        store_job *j = get_job(f->s, jobs[i].id);
        assert_int_equal(j->state, JOB_ADMITTED);
        assert_true(j->updated_at_ms >= j->created_at_ms);
        store_jobs_free(j, 1);
        assert_int_equal(count_events(f->s, jobs[i].id), 2);
    }
    /* The event carries the reason and message of the update. */
    store_update m = upd(jobs[0].id, JOB_ADMITTED, JOB_CANCELLED);
    m.reason = "Cancelled";
    m.message = "by test";
    assert_int_equal(store_jobs_update(f->s, &m, 1), TY_OK);
    store_event *ev = NULL;
    size_t nev = 0;
    assert_int_equal(store_job_events(f->s, jobs[0].id, &ev, &nev), TY_OK);
    assert_int_equal(nev, 3);
    assert_int_equal(ev[2].from, JOB_ADMITTED);
    assert_int_equal(ev[2].to, JOB_CANCELLED);
    assert_string_equal(ev[2].reason, "Cancelled");
    assert_string_equal(ev[2].message, "by test");
    assert_string_equal(ev[1].message, ""); /* NULL message */
    store_events_free(ev, nev);
    store_jobs_free(jobs, N);
}

static void test_failing_updates_leave_the_others(void **state)
{
    store_fixture *f = *state;
    store_job *jobs = submit_n(f->s, 4, NULL);
    assert_int_equal(move_job(f->s, jobs[1].id, JOB_ADMITTED), TY_OK); /* moved meanwhile */
    store_update u[6] = {
        upd(jobs[0].id, JOB_PENDING, JOB_ADMITTED),
        upd(jobs[1].id, JOB_PENDING, JOB_ADMITTED), /* stale: ECONFLICT */
        upd("00000000000000000000000000", JOB_PENDING, JOB_ADMITTED),
        upd(jobs[2].id, JOB_PENDING, JOB_ADMITTED),
        upd(jobs[3].id, JOB_PENDING, JOB_ADMITTED),
        upd(jobs[3].id, JOB_PENDING, JOB_ADMITTED), /* the update before moved it */
    };
    u[1].restarts = 5;
    u[1].attempt = 1;
    u[1].attempt_json = "{\"stale\":true}";
    u[3].reason = NULL; /* a transition needs a reason */
    uint64_t before = commits(f->s);
    assert_int_equal(store_jobs_update(f->s, u, 6), TY_OK);
    assert_int_equal(commits(f->s), before + 1);

    static const ty_err want[] = {TY_OK,     TY_ECONFLICT, TY_ENOTFOUND,
                                  TY_EINVAL, TY_OK,        TY_ECONFLICT};
    for (size_t i = 0; i < 6; i++)
        if (u[i].result != want[i])
            fail_msg("update %zu: got %s, want %s", i, ty_strerror(u[i].result),
                     ty_strerror(want[i]));
    assert_int_equal(u[1].now, JOB_ADMITTED); /* where the job really is */
    assert_int_equal(u[5].now, JOB_ADMITTED);
    assert_int_equal(u[2].now, JOB_STATE_NONE);

    store_job *j = get_job(f->s, jobs[1].id);
    assert_int_equal(j->restarts, 0);
    assert_null(j->attempt_json);
    store_jobs_free(j, 1);
    assert_int_equal(count_events(f->s, jobs[1].id), 2);
    j = get_job(f->s, jobs[2].id);
    assert_int_equal(j->state, JOB_PENDING);
    store_jobs_free(j, 1);
    assert_int_equal(count_events(f->s, jobs[3].id), 2);
    store_jobs_free(jobs, 4);
}

static void test_illegal_transition_writes_nothing(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "illegal", "default");
    store_update u = upd(j->id, JOB_PENDING, JOB_RUNNING);
    u.restarts = 3;
    u.attempt = 1;
    u.attempt_json = "{\"a\":1}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINTERNAL);
    assert_int_equal(u.now, JOB_PENDING);
    assert_int_equal(u.now_attempt, 0);
    store_job *got = get_job(f->s, j->id);
    assert_int_equal(got->state, JOB_PENDING);
    assert_int_equal(got->restarts, 0);
    assert_int_equal(got->attempt, 0);
    assert_null(got->attempt_json);
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, j->id), 1);
    store_attempt *a = NULL;
    size_t na = 9;
    assert_int_equal(store_job_attempts(f->s, j->id, &a, &na), TY_OK);
    assert_int_equal(na, 0);
    store_attempts_free(a, na);
    /* A terminal state never changes either. */
    static const job_state path[] = {JOB_PENDING, JOB_CANCELLED};
    walk(f->s, j->id, path, 2);
    u = upd(j->id, JOB_CANCELLED, JOB_PENDING);
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINTERNAL);
    assert_int_equal(u.now, JOB_CANCELLED);
    store_jobs_free(j, 1);
}

static void test_attempt_follows_starting(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "attempts", "default");
    static const job_state path[] = {JOB_PENDING, JOB_ADMITTED};
    walk(f->s, j->id, path, 2);

    /* ADMITTED -> STARTING starts attempt 1, and its record goes with it. */
    store_update u = upd(j->id, JOB_ADMITTED, JOB_STARTING);
    u.attempt = 1;
    u.attempt_json = "{\"attempt\":1,\"phase\":\"creating\"}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(u.now, JOB_STARTING);
    assert_int_equal(u.now_attempt, 1);

    /* A record for attempt 2 while the job is on attempt 1: refused, and the
     * transition that came with it is rolled back too. */
    u = upd(j->id, JOB_STARTING, JOB_RUNNING);
    u.attempt = 2;
    u.attempt_json = "{\"attempt\":2}";
    u.restarts = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_ECONFLICT);
    assert_int_equal(u.now, JOB_STARTING);
    assert_int_equal(u.now_attempt, 1);
    store_job *got = get_job(f->s, j->id);
    assert_int_equal(got->state, JOB_STARTING);
    assert_int_equal(got->restarts, 0);
    assert_string_equal(got->attempt_json, "{\"attempt\":1,\"phase\":\"creating\"}");
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, j->id), 3);

    /* Through RESTARTING, the next STARTING is attempt 2. */
    static const job_state path2[] = {JOB_STARTING, JOB_RUNNING, JOB_RESTARTING};
    walk(f->s, j->id, path2, 3);
    u = upd(j->id, JOB_RESTARTING, JOB_STARTING);
    u.attempt = 2;
    u.attempt_json = "{\"attempt\":2}";
    u.restarts = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(u.now_attempt, 2);
    got = get_job(f->s, j->id);
    assert_int_equal(got->attempt, 2);
    assert_int_equal(got->restarts, 1);
    assert_string_equal(got->attempt_json, "{\"attempt\":2}");
    store_jobs_free(got, 1);

    /* A record for an earlier attempt is refused as well. */
    u = upd(j->id, JOB_STARTING, JOB_STARTING);
    u.attempt = 1;
    u.attempt_json = "{\"late\":true}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_ECONFLICT);
    store_jobs_free(j, 1);
}

static void test_attempt_records_are_visible(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "records", "rec-queue");
    assert_int_equal(j->restarts, 0);
    assert_null(j->attempt_json);
    store_attempt *a = NULL;
    size_t na = 9;
    assert_int_equal(store_job_attempts(f->s, j->id, &a, &na), TY_OK);
    assert_int_equal(na, 0);
    store_attempts_free(a, na);

    static const job_state path[] = {JOB_PENDING, JOB_ADMITTED};
    walk(f->s, j->id, path, 2);
    store_update u = upd(j->id, JOB_ADMITTED, JOB_STARTING);
    u.attempt = 1;
    u.attempt_json = "{\"v\":1}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    /* Writing attempt 1 again replaces its record (no transition this time). */
    u = upd(j->id, JOB_STARTING, JOB_STARTING);
    u.attempt = 1;
    u.attempt_json = "{\"v\":2}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(count_events(f->s, j->id), 3); /* a record alone writes no event */

    assert_int_equal(store_job_attempts(f->s, j->id, &a, &na), TY_OK);
    assert_int_equal(na, 1);
    assert_int_equal(a[0].attempt, 1);
    assert_string_equal(a[0].json, "{\"v\":2}");
    store_attempts_free(a, na);

    static const job_state path2[] = {JOB_STARTING, JOB_RESTARTING};
    walk(f->s, j->id, path2, 2);
    u = upd(j->id, JOB_RESTARTING, JOB_STARTING);
    u.attempt = 2;
    u.attempt_json = "{\"v\":3}";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);

    assert_int_equal(store_job_attempts(f->s, j->id, &a, &na), TY_OK);
    assert_int_equal(na, 2);
    assert_int_equal(a[0].attempt, 1);
    assert_string_equal(a[0].json, "{\"v\":2}");
    assert_int_equal(a[1].attempt, 2);
    assert_string_equal(a[1].json, "{\"v\":3}");
    store_attempts_free(a, na);

    store_job *got = get_job(f->s, j->id);
    assert_string_equal(got->attempt_json, "{\"v\":3}");
    store_jobs_free(got, 1);
    store_job_filter flt = {.queue = "rec-queue", .limit = 10};
    store_job *list = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_jobs_list(f->s, &flt, &list, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].attempt_json, "{\"v\":3}");
    assert_int_equal(list[0].attempt, 2);
    store_jobs_free(list, n);

    a = (store_attempt *)1;
    assert_int_equal(store_job_attempts(f->s, "00000000000000000000000000", &a, &na), TY_ENOTFOUND);
    assert_null(a);
    assert_int_equal(na, 0);
    assert_int_equal(store_job_attempts(f->s, "short", &a, &na), TY_ENOTFOUND);
    store_jobs_free(j, 1);
}

/* A note tells about a job that does not move: one event from = to, nothing else changes. */
static void test_note(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "noted", "default");
    int64_t head = 0;
    assert_int_equal(store_changes_head(f->s, &head), TY_OK);
    store_update u = upd(j->id, JOB_PENDING, JOB_PENDING);
    u.note = 1;
    u.reason = "Waiting";
    u.message = "needs 4 slots, 2 of 8 free";
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(u.now, JOB_PENDING);
    store_job *got = get_job(f->s, j->id);
    assert_int_equal(got->state, JOB_PENDING);
    assert_int_equal(got->attempt, 0);
    store_jobs_free(got, 1);
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->s, j->id, &ev, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[1].from, JOB_PENDING);
    assert_int_equal(ev[1].to, JOB_PENDING);
    assert_string_equal(ev[1].reason, "Waiting");
    assert_string_equal(ev[1].message, "needs 4 slots, 2 of 8 free");
    store_events_free(ev, n);
    /* The feed has it too; the job is still first in its queue's line. */
    store_change *ch = NULL;
    assert_int_equal(store_changes(f->s, head, 10, &ch, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ch[0].from, JOB_PENDING);
    assert_int_equal(ch[0].to, JOB_PENDING);
    free(ch);
    store_job *pend = NULL;
    assert_int_equal(store_jobs_pending(f->s, "default", 0, 0, 10, &pend, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(pend[0].id, j->id);
    store_jobs_free(pend, n);

    /* A note is no transition and has a reason. */
    u = upd(j->id, JOB_PENDING, JOB_CANCELLED);
    u.note = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINVAL);
    u = upd(j->id, JOB_PENDING, JOB_PENDING);
    u.note = 1;
    u.reason = NULL;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINVAL);
    assert_int_equal(count_events(f->s, j->id), 2);
    store_jobs_free(j, 1);
}

static void test_restarts(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "restarts", "default");
    store_update u = upd(j->id, JOB_PENDING, JOB_PENDING);
    u.restarts = 2;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(u.now, JOB_PENDING);
    store_job *got = get_job(f->s, j->id);
    assert_int_equal(got->restarts, 2);
    assert_int_equal(got->updated_at_ms, j->updated_at_ms);
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, j->id), 1);

    u.restarts = -1; /* unchanged */
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    got = get_job(f->s, j->id);
    assert_int_equal(got->restarts, 2);
    store_jobs_free(got, 1);

    u.restarts = -2;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_EINVAL);
    u.restarts = 0;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    got = get_job(f->s, j->id);
    assert_int_equal(got->restarts, 0);
    store_jobs_free(got, 1);
    store_jobs_free(j, 1);
}

static void test_invalid_updates(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "invalid", "default");
    store_update u = upd(j->id, JOB_PENDING, JOB_ADMITTED);
    assert_int_equal(store_jobs_update(NULL, &u, 1), TY_EINVAL);
    assert_int_equal(store_jobs_update(f->s, NULL, 1), TY_EINVAL);
    uint64_t before = commits(f->s);
    assert_int_equal(store_jobs_update(f->s, NULL, 0), TY_OK);
    assert_int_equal(store_jobs_update(f->s, &u, 0), TY_OK);
    assert_int_equal(commits(f->s), before);

    store_update bad[] = {
        upd(NULL, JOB_PENDING, JOB_ADMITTED), upd(j->id, JOB_STATE_NONE, JOB_ADMITTED),
        upd(j->id, JOB_PENDING, JOB_STATE_COUNT),
        upd(j->id, JOB_PENDING, JOB_PENDING), /* a record without an attempt number */
    };
    bad[3].attempt_json = "{}";
    assert_int_equal(store_jobs_update(f->s, bad, 4), TY_OK);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(bad[i].result, TY_EINVAL);
    store_job *got = get_job(f->s, j->id);
    assert_int_equal(got->state, JOB_PENDING);
    assert_null(got->attempt_json);
    store_jobs_free(got, 1);
    store_jobs_free(j, 1);
}

static void test_counts_follow_committed_updates(void **state)
{
    store_fixture *f = *state;
    store_job *jobs = submit_n(f->s, 5, NULL);
    store_update u[] = {
        upd(jobs[0].id, JOB_PENDING, JOB_ADMITTED),
        upd(jobs[1].id, JOB_PENDING, JOB_CANCELLED),
        upd(jobs[2].id, JOB_PENDING, JOB_RUNNING),   /* illegal */
        upd(jobs[3].id, JOB_ADMITTED, JOB_STARTING), /* stale */
        upd(jobs[4].id, JOB_PENDING, JOB_ADMITTED),
        upd(jobs[4].id, JOB_ADMITTED, JOB_STARTING), /* follows the previous one */
        upd(jobs[0].id, JOB_ADMITTED, JOB_STARTING),
    };
    u[6].attempt = 2; /* mismatch: rolls its transition back */
    u[6].attempt_json = "{}";
    assert_int_equal(store_jobs_update(f->s, u, 7), TY_OK);
    static const ty_err want[] = {TY_OK, TY_OK, TY_EINTERNAL, TY_ECONFLICT,
                                  TY_OK, TY_OK, TY_ECONFLICT};
    for (size_t i = 0; i < 7; i++)
        assert_int_equal(u[i].result, want[i]);
    assert_int_equal(u[5].now_attempt, 1);

    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 2);
    assert_int_equal(st.jobs_by_state[JOB_ADMITTED], 1);
    assert_int_equal(st.jobs_by_state[JOB_CANCELLED], 1);
    assert_int_equal(st.jobs_by_state[JOB_STARTING], 1);
    assert_int_equal(st.jobs_by_state[JOB_RUNNING], 0);

    /* The counts read again from the database at open agree. */
    store_close(f->s);
    f->s = open_store(&f->t);
    store_stats again;
    store_get_stats(f->s, &again);
    assert_memory_equal(again.jobs_by_state, st.jobs_by_state, sizeof st.jobs_by_state);
    store_jobs_free(jobs, 5);
}

/* ---- admission order ------------------------------------------------------ */

/* Pages through a queue's pending jobs with a cursor of `limit`; returns their seqs in order. */
static size_t pending_walk(store *s, const char *queue, int limit, int64_t *seqs, size_t cap)
{
    size_t total = 0;
    int64_t after_prio = 0, after_seq = 0;
    for (;;) {
        store_job *jobs = NULL;
        size_t n = 0;
        assert_int_equal(store_jobs_pending(s, queue, after_prio, after_seq, limit, &jobs, &n),
                         TY_OK);
        assert_true(n <= (size_t)limit);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(jobs[i].state, JOB_PENDING);
            assert_string_equal(jobs[i].queue, queue);
            assert_true(total < cap);
            seqs[total++] = jobs[i].seq;
        }
        if (n > 0) {
            after_prio = jobs[n - 1].priority;
            after_seq = jobs[n - 1].seq;
        }
        store_jobs_free(jobs, n);
        if (n < (size_t)limit)
            return total;
    }
}

static void test_pending_order(void **state)
{
    store_fixture *f = *state;
    static const int64_t prio[] = {0, 5, 5, -3, 5, 0, INT64_MAX, INT64_MIN, -3};
    enum { N = sizeof prio / sizeof *prio };
    store_job *jobs = submit_n(f->s, N, prio);
    /* priority descending, then submission order */
    static const size_t order[] = {6, 1, 2, 4, 0, 5, 3, 8, 7};
    int64_t seqs[N + 1];
    for (int limit = 1; limit <= N + 1; limit++) {
        size_t n = pending_walk(f->s, "default", limit, seqs, N + 1);
        assert_int_equal(n, N);
        for (size_t i = 0; i < N; i++)
            if (seqs[i] != jobs[order[i]].seq)
                fail_msg("limit %d, position %zu: seq %lld, want %lld", limit, i,
                         (long long)seqs[i], (long long)jobs[order[i]].seq);
    }

    /* The first page carries the whole job, its priority included. */
    store_job *page = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_pending(f->s, "default", 0, 0, 2, &page, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(page[0].id, jobs[6].id);
    assert_int_equal(page[0].priority, INT64_MAX);
    assert_string_equal(page[1].spec_json, jobs[1].spec_json);
    store_jobs_free(page, n);

    /* Admitted or cancelled jobs leave the order; the others keep theirs. */
    store_update u[] = {upd(jobs[1].id, JOB_PENDING, JOB_ADMITTED),
                        upd(jobs[3].id, JOB_PENDING, JOB_CANCELLED)};
    assert_int_equal(store_jobs_update(f->s, u, 2), TY_OK);
    n = pending_walk(f->s, "default", 3, seqs, N + 1);
    static const size_t rest[] = {6, 2, 4, 0, 5, 8, 7};
    assert_int_equal(n, sizeof rest / sizeof *rest);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(seqs[i], jobs[rest[i]].seq);

    /* A cursor on a job that left the order still resumes after its place. */
    assert_int_equal(store_jobs_pending(f->s, "default", 5, jobs[1].seq, 10, &page, &n), TY_OK);
    assert_int_equal(n, 6);
    assert_int_equal(page[0].seq, jobs[2].seq);
    store_jobs_free(page, n);
    /* After the lowest priority there is nothing. */
    assert_int_equal(
        store_jobs_pending(f->s, "default", INT64_MIN, jobs[7].seq, 10, &page, &n), TY_OK);
    assert_int_equal(n, 0);
    store_jobs_free(page, n);

    static const int bad_limits[] = {0, -1, 1001};
    for (size_t i = 0; i < sizeof bad_limits / sizeof *bad_limits; i++) {
        page = (store_job *)1;
        assert_int_equal(store_jobs_pending(f->s, "default", 0, 0, bad_limits[i], &page, &n),
                         TY_EINVAL);
        assert_null(page);
        assert_int_equal(n, 0);
    }
    assert_int_equal(store_jobs_pending(f->s, "default", 0, -1, 10, &page, &n), TY_EINVAL);
    assert_int_equal(store_jobs_pending(f->s, NULL, 0, 0, 10, &page, &n), TY_EINVAL);
    store_jobs_free(jobs, N);
}

/* Submits one job of queue with priority; returns its seq. */
static int64_t submit_q(store *s, const char *queue, int64_t priority)
{
    store_job_new in = job_template("job", queue);
    in.priority = priority;
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(s, &in, 1, NULL, NULL, &out, &n, NULL), TY_OK);
    int64_t seq = out[0].seq;
    store_jobs_free(out, n);
    return seq;
}

/* Lists the queues with PENDING jobs in pages of `limit`; returns them joined with ','. */
static void queues_walk(store *s, int limit, char *buf, size_t len)
{
    char last[64] = "";
    buf[0] = '\0';
    for (;;) {
        char **q = NULL;
        size_t n = 0;
        assert_int_equal(store_pending_queues(s, last[0] ? last : NULL, limit, &q, &n), TY_OK);
        assert_true(n <= (size_t)limit);
        for (size_t i = 0; i < n; i++) {
            size_t used = strlen(buf);
            snprintf(buf + used, len - used, "%s%s", used ? "," : "", q[i]);
            snprintf(last, sizeof last, "%s", q[i]);
        }
        store_queues_free(q, n);
        if (n < (size_t)limit)
            return;
    }
}

/*
 * Each queue has its own admission order; the queues with PENDING jobs are
 * listed in byte order, and a queue whose jobs all left PENDING leaves the list.
 */
static void test_pending_per_queue(void **state)
{
    store_fixture *f = *state;
    static const struct {
        const char *queue;
        int64_t priority;
    } in[] = {{"sweep", 0}, {"b", 3},     {"sweep", 9}, {"a", 1},     {"b", 3},
              {"sweep", 9}, {"a", -1},    {"b", 5},     {"sweep", 0}, {"sweep-2", 0}};
    enum { N = sizeof in / sizeof *in };
    int64_t seq[N];
    for (size_t i = 0; i < N; i++)
        seq[i] = submit_q(f->s, in[i].queue, in[i].priority);
    static const struct {
        const char *queue;
        size_t order[5];
        size_t n;
    } want[] = {{"sweep", {2, 5, 0, 8}, 4},
                {"b", {7, 1, 4}, 3},
                {"a", {3, 6}, 2},
                {"sweep-2", {9}, 1},
                {"none", {0}, 0}};
    int64_t got[N + 1];
    for (size_t q = 0; q < sizeof want / sizeof *want; q++)
        for (int limit = 1; limit <= N + 1; limit++) {
            size_t n = pending_walk(f->s, want[q].queue, limit, got, N + 1);
            assert_int_equal(n, want[q].n);
            for (size_t i = 0; i < n; i++)
                if (got[i] != seq[want[q].order[i]])
                    fail_msg("queue %s, limit %d, position %zu: seq %lld, want %lld",
                             want[q].queue, limit, i, (long long)got[i],
                             (long long)seq[want[q].order[i]]);
        }

    char list[256];
    for (int limit = 1; limit <= 5; limit++) {
        queues_walk(f->s, limit, list, sizeof list);
        assert_string_equal(list, "a,b,sweep,sweep-2");
    }
    /* Paging starts strictly after the name given, which need not be listed itself. */
    char **q = NULL;
    size_t n = 0;
    assert_int_equal(store_pending_queues(f->s, "aa", 10, &q, &n), TY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(q[0], "b");
    store_queues_free(q, n);
    assert_int_equal(store_pending_queues(f->s, "sweep-2", 10, &q, &n), TY_OK);
    assert_int_equal(n, 0);
    assert_null(q);

    /* Queue a empties (one job admitted, one cancelled): it leaves the list. */
    store_job *ja = NULL;
    size_t na = 0;
    assert_int_equal(store_jobs_pending(f->s, "a", 0, 0, 10, &ja, &na), TY_OK);
    assert_int_equal(na, 2);
    store_update u[] = {upd(ja[0].id, JOB_PENDING, JOB_ADMITTED),
                        upd(ja[1].id, JOB_PENDING, JOB_CANCELLED)};
    assert_int_equal(store_jobs_update(f->s, u, 2), TY_OK);
    store_jobs_free(ja, na);
    queues_walk(f->s, 2, list, sizeof list);
    assert_string_equal(list, "b,sweep,sweep-2");

    static const int bad_limits[] = {0, -1, 1001};
    for (size_t i = 0; i < sizeof bad_limits / sizeof *bad_limits; i++) {
        q = (char **)1;
        assert_int_equal(store_pending_queues(f->s, NULL, bad_limits[i], &q, &n), TY_EINVAL);
        assert_null(q);
        assert_int_equal(n, 0);
    }
    assert_int_equal(store_pending_queues(NULL, NULL, 10, &q, &n), TY_EINVAL);
}

static void test_pending_empty(void **state)
{
    store_fixture *f = *state;
    store_job *page = (store_job *)1;
    size_t n = 9;
    assert_int_equal(store_jobs_pending(f->s, "default", 0, 0, 1000, &page, &n), TY_OK);
    assert_int_equal(n, 0);
    store_jobs_free(page, n);
    char **q = (char **)1;
    n = 9;
    assert_int_equal(store_pending_queues(f->s, NULL, 1000, &q, &n), TY_OK);
    assert_int_equal(n, 0);
    assert_null(q);
    store_queues_free(q, n);
}

/* ---- where a job stands in its line --------------------------------------- */

/* The places of jobs[0..n), checked against want_ahead (and each one's head). */
static void expect_places(store *s, const store_job *jobs, size_t n, const int64_t *want_ahead,
                          const char *const *want_head, const char *want_reason)
{
    store_line_place pl[8];
    assert_true(n <= 8);
    assert_int_equal(store_jobs_line_places(s, jobs, n, pl), TY_OK);
    for (size_t i = 0; i < n; i++) {
        if (pl[i].ahead != want_ahead[i])
            fail_msg("job %zu: %lld ahead, want %lld", i, (long long)pl[i].ahead,
                     (long long)want_ahead[i]);
        assert_string_equal(pl[i].head_id, want_head[i] ? want_head[i] : "");
        if (pl[i].ahead > 0 && want_reason)
            assert_string_equal(pl[i].head_reason, want_reason);
        else
            assert_null(pl[i].head_reason);
    }
    store_line_places_clear(pl, n);
}

static void test_line_places(void **state)
{
    store_fixture *f = *state;
    /* Line (default, default): seqs 1..5 with priorities 0 0 5 0 5, in admission order
     * 3 5 1 2 4; job 6 heads a line of its own (queue other), job 7 is another team's. */
    int64_t prio[5] = {0, 0, 5, 0, 5};
    store_job *jobs = submit_n(f->s, 5, prio);
    store_job_new in[2] = {job_template("o", "other"), job_template("v", "default")};
    in[1].team = "vision";
    store_job *more = NULL;
    size_t nmore = 0;
    assert_int_equal(store_jobs_submit(f->s, in, 2, NULL, NULL, &more, &nmore, NULL), TY_OK);
    store_job all[7];
    memcpy(all, jobs, 5 * sizeof *all);
    memcpy(all + 5, more, 2 * sizeof *all);
    const char *h = jobs[2].id;
    {
        int64_t want[7] = {2, 3, 0, 4, 1, 0, 0};
        const char *heads[7] = {h, h, h, h, h, more[0].id, more[1].id};
        expect_places(f->s, all, 7, want, heads, NULL);
    }
    /* The head's reason is given to the jobs behind it, not to the head. */
    const char *reason = "{\"message\":\"m\",\"position\":4,\"reason\":\"QuotaExceeded\","
                         "\"team_position\":2}";
    store_update u = upd(h, JOB_PENDING, JOB_PENDING);
    u.reason = NULL;
    u.pending_reason = reason;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    {
        int64_t want[7] = {2, 3, 0, 4, 1, 0, 0};
        const char *heads[7] = {h, h, h, h, h, more[0].id, more[1].id};
        expect_places(f->s, all, 7, want, heads, reason);
    }
    /* Job 1 is admitted: the jobs behind it move up (its stale copy still counts what is
     * before it); the head is cancelled: job 5 heads the line, the old head's copy is out. */
    store_update a = upd(jobs[0].id, JOB_PENDING, JOB_ADMITTED);
    assert_int_equal(store_jobs_update(f->s, &a, 1), TY_OK);
    store_update c = upd(h, JOB_PENDING, JOB_CANCELLED);
    assert_int_equal(store_jobs_update(f->s, &c, 1), TY_OK);
    {
        int64_t want[5] = {1, 1, -1, 2, 0};
        const char *h5 = jobs[4].id;
        const char *heads[5] = {h5, h5, NULL, h5, h5};
        expect_places(f->s, all, 5, want, heads, NULL);
    }
    /* A job not PENDING as read has no place; n = 0 is nothing to do. */
    store_job done = jobs[0];
    done.state = JOB_ADMITTED;
    int64_t none = -1;
    const char *nohead = NULL;
    expect_places(f->s, &done, 1, &none, &nohead, NULL);
    assert_int_equal(store_jobs_line_places(f->s, NULL, 0, NULL), TY_OK);
    assert_int_equal(store_jobs_line_places(NULL, all, 1, (store_line_place[1]){{0}}), TY_EINVAL);
    store_jobs_free(jobs, 5);
    store_jobs_free(more, nmore);
}

/*
 * A line longer than a few buckets of pending_counts: 2,600 jobs of priority 0, then 40 of
 * priority 3 (ahead of them all); some leave from the middle, one from each end. Every job's
 * place equals its rank among the PENDING jobs in admission order, whether it is counted from
 * the buckets (a page of far-apart jobs) or from the job before it (a page of neighbours).
 */
static void test_line_places_across_buckets(void **state)
{
    store_fixture *f = *state;
    enum { LOW = 2600, HIGH = 40, N = LOW + HIGH, BATCH = 200 };
    store_job *all = calloc(N, sizeof *all);
    assert_non_null(all);
    store_job_new in[BATCH];
    size_t n = 0;
    while (n < N) {
        size_t k = N - n < BATCH ? N - n : BATCH;
        for (size_t i = 0; i < k; i++) {
            in[i] = job_template("job", "default");
            in[i].priority = n + i < LOW ? 0 : 3;
        }
        store_job *out = NULL;
        size_t nout = 0;
        assert_int_equal(store_jobs_submit(f->s, in, k, NULL, NULL, &out, &nout, NULL), TY_OK);
        memcpy(all + n, out, nout * sizeof *out);
        free(out); /* the members moved into all */
        n += nout;
    }
    /* Jobs leave: every 7th of the low ones from 500 to 1,800, the first low one, the last. */
    for (size_t i = 0; i < LOW; i++) {
        if (!(i == 0 || i == LOW - 1 || (i >= 500 && i <= 1800 && i % 7 == 0)))
            continue;
        store_update u = upd(all[i].id, JOB_PENDING, JOB_CANCELLED);
        assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
        assert_int_equal(u.result, TY_OK);
        all[i].state = JOB_CANCELLED;
    }
    /* The expected ranks: the high ones first, in seq order, then the low ones. */
    int64_t *want = calloc(N, sizeof *want);
    assert_non_null(want);
    int64_t rank = 0;
    for (size_t i = LOW; i < N; i++)
        want[i] = rank++;
    for (size_t i = 0; i < LOW; i++)
        want[i] = all[i].state == JOB_PENDING ? rank++ : -1;
    store_line_place *pl = calloc(N, sizeof *pl);
    assert_non_null(pl);
    /* Every job at once (neighbours), then a page of far-apart ones (every 97th). */
    assert_int_equal(store_jobs_line_places(f->s, all, N, pl), TY_OK);
    for (size_t i = 0; i < N; i++) {
        if (pl[i].ahead != want[i])
            fail_msg("job %zu: %lld ahead, want %lld", i, (long long)pl[i].ahead,
                     (long long)want[i]);
        assert_string_equal(pl[i].head_id, want[i] < 0 ? "" : all[LOW].id);
    }
    store_line_places_clear(pl, N);
    static const size_t strides[] = {97, 1031}; /* within a bucket's width, and beyond it */
    for (size_t s = 0; s < 2; s++) {
        store_job far[N / 97 + 1];
        size_t nfar = 0;
        for (size_t i = N; i-- > 0;)
            if (i % strides[s] == 1)
                far[nfar++] = all[i]; /* newest first, as a list page */
        assert_int_equal(store_jobs_line_places(f->s, far, nfar, pl), TY_OK);
        for (size_t i = 0; i < nfar; i++) {
            size_t idx = (size_t)(far[i].seq - all[0].seq);
            if (pl[i].ahead != want[idx])
                fail_msg("job %zu: %lld ahead, want %lld", idx, (long long)pl[i].ahead,
                         (long long)want[idx]);
        }
        store_line_places_clear(pl, nfar);
    }
    free(pl);
    free(want);
    store_jobs_free(all, N);
}

/* ---- change feed ---------------------------------------------------------- */

static void test_change_feed(void **state)
{
    store_fixture *f = *state;
    int64_t head = -1;
    store_change *ch = NULL;
    size_t n = 9;
    assert_int_equal(store_changes_head(f->s, &head), TY_OK);
    assert_int_equal(head, 0);
    assert_int_equal(store_changes(f->s, 0, 100, &ch, &n), TY_OK);
    assert_int_equal(n, 0);
    free(ch);

    store_job *jobs = submit_n(f->s, 2, NULL);
    assert_int_equal(move_job(f->s, jobs[1].id, JOB_ADMITTED), TY_OK);
    store_update u = upd(jobs[0].id, JOB_PENDING, JOB_CANCELLED);
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    u = upd(jobs[1].id, JOB_ADMITTED, JOB_ADMITTED); /* no transition: no change */
    u.restarts = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    unsigned char h[32] = {3};
    assert_int_equal(store_token_create(f->s, "feed", STORE_SCOPE_READ, h), TY_OK);

    struct {
        int job;
        job_state from, to;
    } want[] = {
        {0, JOB_STATE_NONE, JOB_PENDING},
        {1, JOB_STATE_NONE, JOB_PENDING},
        {1, JOB_PENDING, JOB_ADMITTED},
        {0, JOB_PENDING, JOB_CANCELLED},
    };
    assert_int_equal(store_changes(f->s, 0, 100, &ch, &n), TY_OK);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(ch[i].id, jobs[want[i].job].id);
        assert_int_equal(ch[i].from, want[i].from);
        assert_int_equal(ch[i].to, want[i].to);
        if (i > 0)
            assert_true(ch[i].seq > ch[i - 1].seq);
    }
    assert_int_equal(store_changes_head(f->s, &head), TY_OK);
    assert_int_equal(head, ch[3].seq);

    /* The cursor: strictly after, at most limit. */
    store_change *rest = NULL;
    size_t nrest = 0;
    assert_int_equal(store_changes(f->s, ch[1].seq, 1, &rest, &nrest), TY_OK);
    assert_int_equal(nrest, 1);
    assert_int_equal(rest[0].seq, ch[2].seq);
    free(rest);
    assert_int_equal(store_changes(f->s, head, 10000, &rest, &nrest), TY_OK);
    assert_int_equal(nrest, 0);
    free(rest);
    free(ch);

    static const int bad_limits[] = {0, 10001};
    for (size_t i = 0; i < 2; i++) {
        ch = (store_change *)1;
        assert_int_equal(store_changes(f->s, 0, bad_limits[i], &ch, &n), TY_EINVAL);
        assert_null(ch);
    }
    assert_int_equal(store_changes_head(NULL, &head), TY_EINVAL);
    store_jobs_free(jobs, 2);
}

/* store_submits_cancels() moves with each committed submission and each move into CANCELLING
 * or CANCELLED, and not with the other transitions, notes or records a scheduler writes. */
static void test_submits_cancels(void **state)
{
    store_fixture *f = *state;
    uint64_t n0 = store_submits_cancels(f->s);
    store_job *jobs = submit_n(f->s, 3, NULL); /* one operation */
    assert_int_equal(store_submits_cancels(f->s), n0 + 1);
    static const job_state to_running[] = {JOB_PENDING, JOB_ADMITTED, JOB_STARTING, JOB_RUNNING};
    walk(f->s, jobs[0].id, to_running, 4);
    store_update u = upd(jobs[0].id, JOB_RUNNING, JOB_RUNNING);
    u.note = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(store_submits_cancels(f->s), n0 + 1);

    u = upd(jobs[1].id, JOB_PENDING, JOB_CANCELLED);
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(store_submits_cancels(f->s), n0 + 2);
    u = upd(jobs[0].id, JOB_RUNNING, JOB_CANCELLING);
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(store_submits_cancels(f->s), n0 + 3);

    /* Refused or failed: nothing was committed. */
    u = upd(jobs[2].id, JOB_ADMITTED, JOB_CANCELLED); /* stale */
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_ECONFLICT);
    store_fail_writes(f->s, 1, 1, TY_EIO);
    u = upd(jobs[2].id, JOB_PENDING, JOB_CANCELLED);
    assert_int_not_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(store_submits_cancels(f->s), n0 + 3);
    store_jobs_free(jobs, 3);
}

typedef struct hook_state {
    atomic_int calls;
} hook_state;

static void count_hook(void *ud)
{
    hook_state *h = ud;
    atomic_fetch_add(&h->calls, 1);
}

static void test_change_hook(void **state)
{
    store_fixture *f = *state;
    hook_state h;
    atomic_init(&h.calls, 0);
    store_set_change_hook(f->s, count_hook, &h);

    /* A submission: called once, before the caller returns. */
    store_job *j = submit_one(f->s, "hooked", "default");
    assert_int_equal(atomic_load(&h.calls), 1);

    /* Writes without job events: no call. */
    unsigned char hash[32] = {4};
    assert_int_equal(store_token_create(f->s, "hook-token", STORE_SCOPE_READ, hash), TY_OK);
    assert_int_equal(store_token_revoke(f->s, "hook-token"), TY_OK);
    assert_int_equal(store_ping(f->s), TY_OK);
    assert_int_equal(move_job(f->s, j->id, JOB_PENDING), TY_OK); /* no change */
    store_update u = upd(j->id, JOB_PENDING, JOB_PENDING);
    u.restarts = 1;
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    u = upd(j->id, JOB_ADMITTED, JOB_STARTING); /* stale */
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_ECONFLICT);
    assert_int_equal(move_job(f->s, j->id, JOB_SUCCEEDED), TY_EINTERNAL);
    assert_int_equal(atomic_load(&h.calls), 1);

    /* Transitions, by either path: one call per commit. */
    assert_int_equal(move_job(f->s, j->id, JOB_ADMITTED), TY_OK);
    assert_int_equal(atomic_load(&h.calls), 2);
    store_job *more = submit_n(f->s, 2, NULL);
    assert_int_equal(atomic_load(&h.calls), 3);
    store_update two[] = {upd(more[0].id, JOB_PENDING, JOB_ADMITTED),
                          upd(more[1].id, JOB_PENDING, JOB_ADMITTED)};
    assert_int_equal(store_jobs_update(f->s, two, 2), TY_OK);
    assert_int_equal(atomic_load(&h.calls), 4);

    /* Removed: no more calls. */
    store_set_change_hook(f->s, NULL, NULL);
    assert_int_equal(move_job(f->s, j->id, JOB_CANCELLED), TY_OK);
    assert_int_equal(atomic_load(&h.calls), 4);
    store_jobs_free(more, 2);
    store_jobs_free(j, 1);
}

/* ---- the group commit with updates ---------------------------------------- */

typedef struct updater {
    store *s;
    store_update *u;
    size_t n;
    ty_err result;
    pthread_t th;
} updater;

static void *updater_main(void *arg)
{
    updater *w = arg;
    w->result = store_jobs_update(w->s, w->u, w->n);
    return NULL;
}

static void test_updates_group_with_other_writes(void **state)
{
    store_fixture *f = *state;
    store_job *jobs = submit_n(f->s, 4, NULL);
    store_update a[] = {upd(jobs[0].id, JOB_PENDING, JOB_ADMITTED),
                        upd(jobs[1].id, JOB_PENDING, JOB_SUCCEEDED)}; /* illegal */
    store_update b[] = {upd(jobs[2].id, JOB_PENDING, JOB_ADMITTED),
                        upd(jobs[3].id, JOB_PENDING, JOB_ADMITTED)};
    updater w[] = {{.s = f->s, .u = a, .n = 2}, {.s = f->s, .u = b, .n = 2}};
    uint64_t before = commits(f->s);
    store_test_hold_writer(f->s, 1);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&w[i].th, NULL, updater_main, &w[i]), 0);
    wait_queued(f->s, 2);
    store_test_hold_writer(f->s, 0);
    for (size_t i = 0; i < 2; i++) {
        pthread_join(w[i].th, NULL);
        assert_int_equal(w[i].result, TY_OK);
    }
    assert_int_equal(commits(f->s), before + 1);
    assert_int_equal(a[0].result, TY_OK);
    assert_int_equal(a[1].result, TY_EINTERNAL);
    assert_int_equal(b[0].result, TY_OK);
    assert_int_equal(b[1].result, TY_OK);
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_ADMITTED], 3);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 1);
    store_jobs_free(jobs, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_updates_share_one_commit, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_failing_updates_leave_the_others, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_illegal_transition_writes_nothing, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_attempt_follows_starting, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_attempt_records_are_visible, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_note, store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_restarts, store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_updates, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_counts_follow_committed_updates, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_pending_order, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_pending_per_queue, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_pending_empty, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_line_places, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_line_places_across_buckets, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_change_feed, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_submits_cancels, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_change_hook, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_updates_group_with_other_writes, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
