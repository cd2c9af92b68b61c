/* Unit tests for store/store.c: the writer with group commit, the read pool, statistics. */
#include <pthread.h>
#include <sqlite3.h>
#include <time.h>

#include "store/store_int.h"
#include "tests/unit/test_store_util.h"

/* ---- one blocking call per thread ----------------------------------------- */

typedef enum task_kind {
    T_SUBMIT,     /* one valid job named `name` */
    T_SUBMIT_BAD, /* a batch whose second job has an empty name */
    T_MOVE,       /* transition job `id` to `to` */
    T_TOKEN,      /* create token `name` */
    T_PING,
} task_kind;

typedef struct task {
    task_kind kind;
    store *s;
    const char *name;
    const char *id;
    job_state to;
    ty_err result;
    pthread_t th;
} task;

static void *task_main(void *arg)
{
    task *t = arg;
    store_job *out = NULL;
    size_t n = 0;
    switch (t->kind) {
    case T_SUBMIT: {
        store_job_new j = job_template(t->name, "default");
        t->result = store_jobs_submit(t->s, &j, 1, NULL, NULL, &out, &n, NULL);
        store_jobs_free(out, n);
        break;
    }
    case T_SUBMIT_BAD: {
        store_job_new j[2] = {job_template(t->name, "default"), job_template("", "default")};
        t->result = store_jobs_submit(t->s, j, 2, NULL, NULL, &out, &n, NULL);
        store_jobs_free(out, n);
        break;
    }
    case T_MOVE:
        t->result = move_job(t->s, t->id, t->to);
        break;
    case T_TOKEN: {
        unsigned char h[32] = {1};
        t->result = store_token_create(t->s, t->name, STORE_SCOPE_READ, h);
        break;
    }
    case T_PING:
        t->result = store_ping(t->s);
        break;
    }
    return NULL;
}

static void start_task(task *t)
{
    assert_int_equal(pthread_create(&t->th, NULL, task_main, t), 0);
}

static size_t count_named(store *s, const char *prefix)
{
    store_job_filter flt = {.name_prefix = prefix, .limit = 1000};
    store_job *jobs = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_jobs_list(s, &flt, &jobs, &n, &next), TY_OK);
    store_jobs_free(jobs, n);
    return n;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_ping_is_a_write_round_trip(void **state)
{
    store_fixture *f = *state;
    uint64_t before = commits(f->s);
    assert_int_equal(store_ping(f->s), TY_OK);
    assert_int_equal(commits(f->s), before + 1);
    assert_int_equal(store_ping(NULL), TY_EINVAL);
}

static void test_committed_on_return(void **state)
{
    store_fixture *f = *state;
    store_job *j = submit_one(f->s, "durable", "default");
    /* Another connection, as another process would: the row is committed. */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(f->t.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT name FROM jobs WHERE id = ?1", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "durable");
    sqlite3_finalize(st);
    sqlite3_close(db);
    store_jobs_free(j, 1);
}

enum { THREADS = 16, PER_THREAD = 200 };

typedef struct submitter {
    store *s;
    int idx;
    ty_err first_error;
    int64_t seqs[PER_THREAD];
    char ids[PER_THREAD][STORE_ID_LEN + 1];
    pthread_t th;
} submitter;

static void *submitter_main(void *arg)
{
    submitter *w = arg;
    char name[32];
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(name, sizeof name, "t%d-%d", w->idx, i);
        store_job_new j = job_template(name, w->idx % 2 ? "odd" : "even");
        store_job *out = NULL;
        size_t n = 0;
        ty_err e = store_jobs_submit(w->s, &j, 1, NULL, NULL, &out, &n, NULL);
        if (e != TY_OK) {
            w->first_error = e;
            return NULL;
        }
        w->seqs[i] = out->seq;
        memcpy(w->ids[i], out->id, sizeof w->ids[i]);
        store_jobs_free(out, n);
    }
    return NULL;
}

typedef struct seq_id {
    int64_t seq;
    const char *id;
} seq_id;

static int by_seq(const void *a, const void *b)
{
    int64_t x = ((const seq_id *)a)->seq, y = ((const seq_id *)b)->seq;
    return x < y ? -1 : x > y;
}

static void test_group_commit_under_concurrency(void **state)
{
    store_fixture *f = *state;
    submitter *w = calloc(THREADS, sizeof *w);
    assert_non_null(w);
    uint64_t commits_before = commits(f->s);
    for (int i = 0; i < THREADS; i++) {
        w[i].s = f->s;
        w[i].idx = i;
        assert_int_equal(pthread_create(&w[i].th, NULL, submitter_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(w[i].th, NULL);
        if (w[i].first_error != TY_OK)
            fail_msg("thread %d: %s", i, ty_strerror(w[i].first_error));
    }
    const size_t total = THREADS * PER_THREAD;
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], total);
    assert_int_equal(st.jobs_submitted_total, total);
    uint64_t ncommits = st.commits_total - commits_before;
    assert_true(ncommits > 0);
    assert_true(ncommits < total); /* operations really were folded into groups */
    assert_int_equal(st.commit_seconds->count, st.commits_total);
    assert_int_equal(st.commit_batch_ops->count, st.commits_total);
    assert_true(st.commit_batch_ops->sum >= (double)total);

    /* Every job is readable, and ids follow the commit order. */
    seq_id *all = calloc(total, sizeof *all);
    assert_non_null(all);
    size_t k = 0;
    for (int i = 0; i < THREADS; i++) {
        for (int j = 0; j < PER_THREAD; j++) {
            store_job *got = NULL;
            assert_int_equal(store_job_get(f->s, w[i].ids[j], &got), TY_OK);
            assert_int_equal(got->seq, w[i].seqs[j]);
            char name[32];
            snprintf(name, sizeof name, "t%d-%d", i, j);
            assert_string_equal(got->name, name);
            store_jobs_free(got, 1);
            all[k++] = (seq_id){w[i].seqs[j], w[i].ids[j]};
        }
    }
    qsort(all, total, sizeof *all, by_seq);
    for (size_t i = 1; i < total; i++) {
        assert_true(all[i].seq > all[i - 1].seq);
        assert_true(strcmp(all[i].id, all[i - 1].id) > 0);
    }
    free(all);
    free(w);
}

/*
 * Operations that fail in the middle of a group roll back alone: the writer is
 * held while eight operations queue, then they run as one group (one commit).
 */
static void test_failing_ops_in_a_group_roll_back_alone(void **state)
{
    store_fixture *f = *state;
    store_job *stay = submit_one(f->s, "stay-pending", "default");
    store_job *go = submit_one(f->s, "go-admitted", "default");
    unsigned char h[32] = {2};
    assert_int_equal(store_token_create(f->s, "taken", STORE_SCOPE_READ, h), TY_OK);
    store_stats before;
    store_get_stats(f->s, &before);
    uint64_t ops_count = before.commit_batch_ops->count;
    double ops_sum = before.commit_batch_ops->sum;

    task tasks[] = {
        {.kind = T_SUBMIT, .name = "good-a"},
        {.kind = T_SUBMIT_BAD, .name = "bad-first"},
        {.kind = T_MOVE, .id = stay->id, .to = JOB_SUCCEEDED}, /* illegal from PENDING */
        {.kind = T_SUBMIT, .name = "good-c"},
        {.kind = T_MOVE, .id = go->id, .to = JOB_ADMITTED},
        {.kind = T_TOKEN, .name = "fresh"},
        {.kind = T_TOKEN, .name = "taken"}, /* duplicate name */
        {.kind = T_PING},
    };
    static const ty_err want[] = {TY_OK, TY_EINVAL, TY_EINTERNAL, TY_OK,
                                  TY_OK, TY_OK,     TY_EEXISTS,   TY_OK};
    const size_t n = sizeof tasks / sizeof *tasks;

    store_test_hold_writer(f->s, 1);
    for (size_t i = 0; i < n; i++) {
        tasks[i].s = f->s;
        start_task(&tasks[i]);
        wait_queued(f->s, i + 1); /* queue them in this order */
    }
    /* Reads do not wait for the writer. */
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->s, stay->id, &j), TY_OK);
    store_jobs_free(j, 1);
    store_test_hold_writer(f->s, 0);
    for (size_t i = 0; i < n; i++) {
        pthread_join(tasks[i].th, NULL);
        if (tasks[i].result != want[i])
            fail_msg("task %zu: got %s, want %s", i, ty_strerror(tasks[i].result),
                     ty_strerror(want[i]));
    }

    store_stats after;
    store_get_stats(f->s, &after);
    assert_int_equal(after.commits_total, before.commits_total + 1);
    assert_int_equal(after.commit_batch_ops->count, ops_count + 1);
    assert_true(after.commit_batch_ops->sum - ops_sum == (double)n);

    assert_int_equal(count_named(f->s, "good-"), 2);
    assert_int_equal(count_named(f->s, "bad-"), 0);
    store_job *got = NULL;
    assert_int_equal(store_job_get(f->s, stay->id, &got), TY_OK);
    assert_int_equal(got->state, JOB_PENDING);
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, stay->id), 1);
    assert_int_equal(store_job_get(f->s, go->id, &got), TY_OK);
    assert_int_equal(got->state, JOB_ADMITTED);
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, go->id), 2);
    store_token *toks = NULL;
    size_t ntoks = 0;
    assert_int_equal(store_tokens_list(f->s, &toks, &ntoks), TY_OK);
    assert_int_equal(ntoks, 2);
    store_tokens_free(toks, ntoks);

    /* The in-memory counts took only the committed effects. */
    assert_int_equal(after.jobs_by_state[JOB_PENDING], before.jobs_by_state[JOB_PENDING] + 2 - 1);
    assert_int_equal(after.jobs_by_state[JOB_ADMITTED], before.jobs_by_state[JOB_ADMITTED] + 1);
    assert_int_equal(after.jobs_by_state[JOB_SUCCEEDED], 0);
    assert_int_equal(after.jobs_submitted_total, before.jobs_submitted_total + 2);
    store_jobs_free(stay, 1);
    store_jobs_free(go, 1);
}

/*
 * store_fail_writes(): the armed transactions fail whole with the error asked for and
 * leave nothing behind (no job, no event, no count); the ones around them commit.
 */
static void test_injected_write_faults(void **state)
{
    store_fixture *f = *state;
    store_job *a = submit_one(f->s, "before", "default");
    store_stats before;
    store_get_stats(f->s, &before);

    store_fail_writes(f->s, 2, 2, TY_EBUSY); /* the next passes, then two fail */
    assert_int_equal(move_job(f->s, a->id, JOB_ADMITTED), TY_OK);
    store_job_new j = job_template("lost-busy", "default");
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(f->s, &j, 1, NULL, NULL, &out, &n, NULL), TY_EBUSY);
    assert_int_equal(n, 0);
    assert_int_equal(move_job(f->s, a->id, JOB_STARTING), TY_EBUSY);
    /* Disarmed by then: writes commit again. */
    assert_int_equal(move_job(f->s, a->id, JOB_STARTING), TY_OK);

    store_fail_writes(f->s, 1, 1, TY_EIO);
    j = job_template("lost-io", "default");
    assert_int_equal(store_jobs_submit(f->s, &j, 1, NULL, NULL, &out, &n, NULL), TY_EIO);
    store_fail_writes(f->s, 1, 5, TY_EIO);
    store_fail_writes(f->s, 0, 0, TY_OK); /* disarmed before any write */
    assert_int_equal(store_ping(f->s), TY_OK);

    assert_int_equal(count_named(f->s, "lost-"), 0);
    store_job *got = NULL;
    assert_int_equal(store_job_get(f->s, a->id, &got), TY_OK);
    assert_int_equal(got->state, JOB_STARTING);
    store_jobs_free(got, 1);
    assert_int_equal(count_events(f->s, a->id), 3); /* submitted, admitted, starting: once */
    store_stats after;
    store_get_stats(f->s, &after);
    assert_int_equal(after.jobs_submitted_total, before.jobs_submitted_total);
    assert_int_equal(after.jobs_by_state[JOB_STARTING], before.jobs_by_state[JOB_STARTING] + 1);
    store_jobs_free(a, 1);
}

static void test_max_group_ops(void **state)
{
    store_fixture *f = *state;
    store_close(f->s);
    store_options opt = {.max_group_ops = 2};
    char err[256];
    assert_int_equal(store_open(f->t.db, &opt, &f->s, err, sizeof err), TY_OK);
    uint64_t before = commits(f->s);
    task tasks[5];
    memset(tasks, 0, sizeof tasks);
    store_test_hold_writer(f->s, 1);
    for (size_t i = 0; i < 5; i++) {
        tasks[i] = (task){.kind = T_PING, .s = f->s};
        start_task(&tasks[i]);
    }
    wait_queued(f->s, 5);
    store_test_hold_writer(f->s, 0);
    for (size_t i = 0; i < 5; i++) {
        pthread_join(tasks[i].th, NULL);
        assert_int_equal(tasks[i].result, TY_OK);
    }
    assert_int_equal(commits(f->s), before + 3); /* 2 + 2 + 1 */
}

static void test_close_finishes_queued_writes(void **state)
{
    store_fixture *f = *state;
    enum { N = 6 };
    task tasks[N];
    char names[N][16];
    memset(tasks, 0, sizeof tasks);
    store_test_hold_writer(f->s, 1);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "queued-%d", i);
        tasks[i] = (task){.kind = T_SUBMIT, .s = f->s, .name = names[i]};
        start_task(&tasks[i]);
    }
    wait_queued(f->s, N);
    store_close(f->s); /* still held: close must drain the queue anyway */
    f->s = NULL;
    for (int i = 0; i < N; i++) {
        pthread_join(tasks[i].th, NULL);
        assert_int_equal(tasks[i].result, TY_OK);
    }
    f->s = open_store(&f->t);
    assert_int_equal(count_named(f->s, "queued-"), N);
    store_stats st;
    store_get_stats(f->s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], N); /* counted again at open */
    assert_int_equal(st.jobs_submitted_total, 0);       /* since this open */
}

static void test_stats_without_store(void **state)
{
    (void)state;
    store_stats st;
    memset(&st, 0xff, sizeof st);
    store_get_stats(NULL, &st);
    assert_int_equal(st.commits_total, 0);
    assert_null(st.commit_seconds);
    store_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ping_is_a_write_round_trip, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_committed_on_return, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_under_concurrency, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_failing_ops_in_a_group_roll_back_alone,
                                        store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_injected_write_faults, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_max_group_ops, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_close_finishes_queued_writes, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test(test_stats_without_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
