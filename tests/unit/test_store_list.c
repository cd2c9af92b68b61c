/* Unit tests for store/store_list.c: filters and keyset pagination. */
#include <sqlite3.h>
#include <time.h>

#include "store/store_int.h"
#include "tests/unit/test_store_util.h"

/* What the test knows about each job it stored: the model the store must match. */
typedef struct model_job {
    int64_t seq;
    char id[STORE_ID_LEN + 1];
    char name[32];
    const char *queue;
    job_state state;
    store_label labels[2];
    size_t nlabels;
    int64_t created;
} model_job;

typedef struct fixture {
    tdir t;
    store *s;
    model_job *jobs;
    size_t n, cap;
    int64_t batch_created[4]; /* created_at of each time batch of the data set */
} fixture;

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    tdir_make(&f->t);
    f->s = open_store(&f->t);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    tdir_remove(&f->t);
    free(f->jobs);
    free(f);
    return 0;
}

/* Submits the jobs described by m[0..n) in one batch and records them. */
static void add_jobs(fixture *f, model_job *m, size_t n)
{
    store_job_new *in = calloc(n, sizeof *in);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++) {
        in[i] = job_template(m[i].name, m[i].queue);
        in[i].labels = m[i].labels;
        in[i].nlabels = m[i].nlabels;
    }
    store_job *out = NULL;
    size_t nout = 0;
    assert_int_equal(store_jobs_submit(f->s, in, n, NULL, NULL, &out, &nout, NULL), TY_OK);
    assert_int_equal(nout, n);
    if (f->n + n > f->cap) {
        f->cap = (f->n + n) * 2;
        f->jobs = realloc(f->jobs, f->cap * sizeof *f->jobs);
        assert_non_null(f->jobs);
    }
    for (size_t i = 0; i < n; i++) {
        m[i].seq = out[i].seq;
        memcpy(m[i].id, out[i].id, sizeof m[i].id);
        m[i].created = out[i].created_at_ms;
        m[i].state = JOB_PENDING;
        f->jobs[f->n++] = m[i];
    }
    store_jobs_free(out, nout);
    free(in);
}

/* Moves the recorded job to a target state along a legal path. */
static void drive_to(fixture *f, model_job *m, job_state target)
{
    static const job_state to_running[] = {JOB_ADMITTED, JOB_STARTING, JOB_RUNNING};
    switch (target) {
    case JOB_PENDING:
        break;
    case JOB_ADMITTED:
    case JOB_CANCELLED:
    case JOB_FAILED:
        assert_int_equal(move_job(f->s, m->id, target), TY_OK);
        break;
    case JOB_RUNNING:
    case JOB_SUCCEEDED:
        for (size_t k = 0; k < 3; k++)
            assert_int_equal(move_job(f->s, m->id, to_running[k]), TY_OK);
        if (target == JOB_SUCCEEDED)
            assert_int_equal(move_job(f->s, m->id, JOB_SUCCEEDED), TY_OK);
        break;
    default:
        fail_msg("drive_to: unsupported state");
    }
    m->state = target;
}

static const char *const queues[] = {"default", "gpu", "cpu"};
static const char *const sweeps[] = {"s0", "s1", "s2", "s3"};
static const job_state states[] = {JOB_PENDING,   JOB_ADMITTED,  JOB_RUNNING,
                                   JOB_SUCCEEDED, JOB_CANCELLED, JOB_FAILED};

/* 4 batches of 30 jobs, each batch in a later millisecond, with varied
 * names, queues, labels and states. */
static void build_data_set(fixture *f)
{
    for (int b = 0; b < 4; b++) {
        model_job m[30];
        memset(m, 0, sizeof m);
        for (int k = 0; k < 30; k++) {
            int i = b * 30 + k;
            snprintf(m[k].name, sizeof m[k].name, "%s-%d", i % 3 == 0 ? "alpha" : "beta", i);
            m[k].queue = queues[i % 3];
            m[k].labels[0] = (store_label){"team", i % 2 ? "vision" : "nlp"};
            m[k].nlabels = 1;
            if (i % 5 != 0)
                m[k].labels[m[k].nlabels++] = (store_label){"sweep", sweeps[i % 4]};
        }
        add_jobs(f, m, 30);
        f->batch_created[b] = m[29].created;
        sleep_ms(3);
    }
    for (size_t i = 0; i < f->n; i++)
        drive_to(f, &f->jobs[i], states[i % 6]);
}

static int model_matches(const model_job *m, const store_job_filter *flt)
{
    if (flt->state_mask && !(flt->state_mask & (1u << m->state)))
        return 0;
    if (flt->queue && strcmp(flt->queue, m->queue) != 0)
        return 0;
    if (flt->name_prefix && strncmp(m->name, flt->name_prefix, strlen(flt->name_prefix)) != 0)
        return 0;
    for (size_t i = 0; i < flt->nlabels; i++) {
        int found = 0;
        for (size_t k = 0; k < m->nlabels; k++)
            found |= strcmp(m->labels[k].key, flt->labels[i].key) == 0 &&
                     strcmp(m->labels[k].value, flt->labels[i].value) == 0;
        if (!found)
            return 0;
    }
    if (flt->created_after_ms && m->created <= flt->created_after_ms)
        return 0;
    if (flt->created_before_ms && m->created >= flt->created_before_ms)
        return 0;
    return 1;
}

/* Pages through the listing with the given page size and checks it returns
 * exactly the model's matching jobs, newest first. */
static void check_listing(fixture *f, store_job_filter flt, int page, const char *what)
{
    size_t want = 0, got = 0;
    int64_t want_seqs[512];
    for (size_t i = f->n; i-- > 0;)
        if (model_matches(&f->jobs[i], &flt)) {
            assert_true(want < 512);
            want_seqs[want++] = f->jobs[i].seq;
        }
    flt.limit = page;
    flt.before_seq = 0;
    for (int pages = 0;; pages++) {
        store_job *jobs = NULL;
        size_t n = 0;
        int64_t next = -1;
        ty_err e = store_jobs_list(f->s, &flt, &jobs, &n, &next);
        if (e != TY_OK)
            fail_msg("%s: %s", what, ty_strerror(e));
        assert_true(n <= (size_t)page);
        for (size_t i = 0; i < n; i++) {
            if (got >= want || jobs[i].seq != want_seqs[got])
                fail_msg("%s (page size %d): job %zu has seq %lld, want %lld", what, page, got,
                         (long long)jobs[i].seq, got < want ? (long long)want_seqs[got] : -1LL);
            got++;
        }
        store_jobs_free(jobs, n);
        if (next == 0)
            break;
        /* A page may be short when the scan budget ran out, but the cursor moves on. */
        assert_true(flt.before_seq == 0 || next < flt.before_seq);
        flt.before_seq = next;
        assert_true(pages < 100000);
    }
    if (got != want)
        fail_msg("%s (page size %d): got %zu jobs, want %zu", what, page, got, want);
}

#define BIT(s) (1u << (s))

static void check_every_filter(fixture *f)
{
    store_label vision[] = {{"team", "vision"}};
    store_label vision_s1[] = {{"team", "vision"}, {"sweep", "s1"}};
    store_label nlp_s1[] = {{"team", "nlp"}, {"sweep", "s1"}};
    store_label s3_vision[] = {{"sweep", "s3"}, {"team", "vision"}};
    store_label unknown[] = {{"team", "nobody"}};
    store_label key_only[] = {{"sweep", ""}};
    struct {
        const char *what;
        store_job_filter flt;
    } cases[] = {
        {"no filter", {0}},
        {"state PENDING", {.state_mask = BIT(JOB_PENDING)}},
        {"state RUNNING", {.state_mask = BIT(JOB_RUNNING)}},
        {"state STARTING (none)", {.state_mask = BIT(JOB_STARTING)}},
        {"states PENDING,FAILED", {.state_mask = BIT(JOB_PENDING) | BIT(JOB_FAILED)}},
        {"all states", {.state_mask = (1u << JOB_STATE_COUNT) - 1}},
        {"queue gpu", {.queue = "gpu"}},
        {"queue none", {.queue = "nope"}},
        {"queue + state", {.queue = "cpu", .state_mask = BIT(JOB_SUCCEEDED)}},
        {"queue + states", {.queue = "default", .state_mask = BIT(JOB_PENDING) | BIT(JOB_RUNNING)}},
        {"label", {.labels = vision, .nlabels = 1}},
        {"labels AND", {.labels = vision_s1, .nlabels = 2}},
        {"labels AND (disjoint)", {.labels = nlp_s1, .nlabels = 2}},
        {"labels AND, other order", {.labels = s3_vision, .nlabels = 2}},
        {"unknown label", {.labels = unknown, .nlabels = 1}},
        {"empty label value", {.labels = key_only, .nlabels = 1}},
        {"label + state", {.labels = vision, .nlabels = 1, .state_mask = BIT(JOB_ADMITTED)}},
        {"label + queue + states",
         {.labels = vision_s1,
          .nlabels = 2,
          .queue = "gpu",
          .state_mask = BIT(JOB_PENDING) | BIT(JOB_SUCCEEDED) | BIT(JOB_ADMITTED)}},
        {"name_prefix alpha", {.name_prefix = "alpha-"}},
        {"name_prefix beta-1", {.name_prefix = "beta-1"}},
        {"name_prefix exact", {.name_prefix = "beta-101"}},
        {"name_prefix none", {.name_prefix = "gamma"}},
        {"name_prefix empty", {.name_prefix = ""}},
        {"name_prefix + label + state",
         {.name_prefix = "beta", .labels = vision, .nlabels = 1, .state_mask = BIT(JOB_PENDING)}},
        {"created_after batch 0", {.created_after_ms = f->batch_created[0]}},
        {"created_before batch 2", {.created_before_ms = f->batch_created[2]}},
        {"created between",
         {.created_after_ms = f->batch_created[0], .created_before_ms = f->batch_created[3]}},
        {"created after the last", {.created_after_ms = f->batch_created[3]}},
        {"created before the first", {.created_before_ms = f->jobs[0].created}},
        {"created_before far future", {.created_before_ms = INT64_C(1) << 50}},
        {"created + queue + label",
         {.created_after_ms = f->batch_created[0],
          .created_before_ms = f->batch_created[3],
          .queue = "default",
          .labels = vision,
          .nlabels = 1}},
    };
    static const int pages[] = {7, 1, 1000};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t p = 0; p < sizeof pages / sizeof *pages; p++)
            check_listing(f, cases[i].flt, pages[p], cases[i].what);
}

static void test_every_filter_returns_exactly_the_matching_jobs(void **state)
{
    fixture *f = *state;
    build_data_set(f);
    check_every_filter(f);
}

/* The same with a tiny gather limit (name_prefix checked row by row) and a
 * tiny scan budget (short pages with a cursor): still exact. */
static void test_every_filter_within_tiny_limits(void **state)
{
    fixture *f = *state;
    build_data_set(f);
    static const struct {
        size_t gather;
        long budget;
    } limits[] = {{4, 0}, {0, 25}, {4, 9}, {1, 1}};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        store_test_list_limits(limits[i].gather, limits[i].budget);
        check_every_filter(f);
    }
    store_test_list_limits(0, 0);
}

/* Two common labels that never meet: with a small budget the listing answers
 * in empty pages with a cursor, and following it reaches the end. */
static void test_budget_bounds_a_sparse_intersection(void **state)
{
    fixture *f = *state;
    build_data_set(f);
    store_label never[] = {{"team", "vision"}, {"team", "nlp"}};
    store_job_filter flt = {.labels = never, .nlabels = 2, .limit = 10};
    store_test_list_limits(0, 20);
    int pages = 0;
    for (;;) {
        store_job *jobs = NULL;
        size_t n = 0;
        int64_t next = -1;
        assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
        assert_int_equal(n, 0);
        store_jobs_free(jobs, n);
        pages++;
        if (!next)
            break;
        assert_true(flt.before_seq == 0 || next < flt.before_seq);
        flt.before_seq = next;
    }
    store_test_list_limits(0, 0);
    assert_true(pages > 1);
}

static void test_cursor_and_bounds_combine(void **state)
{
    fixture *f = *state;
    build_data_set(f);
    /* A cursor in the middle of the data set: only older jobs. */
    store_job_filter flt = {
        .state_mask = BIT(JOB_PENDING), .limit = 1000, .before_seq = f->jobs[60].seq};
    store_job *jobs = NULL;
    size_t n = 0;
    int64_t next = -1;
    assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(next, 0);
    size_t want = 0;
    for (size_t i = 0; i < 60; i++)
        want += f->jobs[i].state == JOB_PENDING;
    assert_int_equal(n, want);
    for (size_t i = 0; i < n; i++)
        assert_true(jobs[i].seq < f->jobs[60].seq && jobs[i].state == JOB_PENDING);
    store_jobs_free(jobs, n);
}

/* Pages of 7 while new jobs keep arriving between pages: the pages still
 * hold exactly the jobs that existed at the first page, none twice. */
static void paginate_while_inserting(fixture *f, const store_job_filter *base)
{
    int64_t seen[64];
    size_t nseen = 0;
    int64_t newest_at_start = f->jobs[f->n - 1].seq;
    store_job_filter flt = *base;
    flt.limit = 7;
    for (int extra = 0;; extra++) {
        store_job *jobs = NULL;
        size_t n = 0;
        int64_t next = -1;
        assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
        for (size_t i = 0; i < n; i++) {
            assert_true(nseen < 64);
            assert_true(jobs[i].seq <= newest_at_start);
            if (nseen > 0)
                assert_true(jobs[i].seq < seen[nseen - 1]);
            seen[nseen++] = jobs[i].seq;
        }
        store_jobs_free(jobs, n);
        if (!next)
            break;
        flt.before_seq = next;
        /* Three more matching jobs arrive before the client asks for the next page. */
        model_job m[3];
        memset(m, 0, sizeof m);
        for (int k = 0; k < 3; k++) {
            snprintf(m[k].name, sizeof m[k].name, "late-%d-%d", extra, k);
            m[k].queue = "default";
            m[k].labels[0] = (store_label){"team", "vision"};
            m[k].nlabels = 1;
        }
        add_jobs(f, m, 3);
    }
    assert_int_equal(nseen, 50);
}

static void test_pagination_never_skips_or_repeats(void **state)
{
    fixture *f = *state;
    model_job m[50];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 50; i++) {
        snprintf(m[i].name, sizeof m[i].name, "job-%d", i);
        m[i].queue = "default";
        m[i].labels[0] = (store_label){"team", "vision"};
        m[i].nlabels = 1;
    }
    add_jobs(f, m, 50);
    store_job_filter none = {0};
    paginate_while_inserting(f, &none);
    store_label vision[] = {{"team", "vision"}};
    store_job_filter filtered = {.state_mask = BIT(JOB_PENDING), .labels = vision, .nlabels = 1};
    /* The first 50 jobs again, now among later arrivals: start the cursor at job 49. */
    filtered.before_seq = f->jobs[49].seq + 1;
    int64_t seen = 0, prev = INT64_MAX;
    filtered.limit = 7;
    for (;;) {
        store_job *jobs = NULL;
        size_t n = 0;
        int64_t next = -1;
        assert_int_equal(store_jobs_list(f->s, &filtered, &jobs, &n, &next), TY_OK);
        for (size_t i = 0; i < n; i++) {
            assert_true(jobs[i].seq < prev);
            prev = jobs[i].seq;
            seen++;
        }
        store_jobs_free(jobs, n);
        if (!next)
            break;
        filtered.before_seq = next;
        model_job late = {.queue = "default", .labels = {{"team", "vision"}}, .nlabels = 1};
        snprintf(late.name, sizeof late.name, "late-f-%lld", (long long)seen);
        add_jobs(f, &late, 1);
    }
    assert_int_equal(seen, 50);
}

/* A name_prefix range larger than the gather limit is checked row by row. */
static void test_common_name_prefix(void **state)
{
    fixture *f = *state;
    enum { BULK = 4200, BATCH = 1050 };
    store_test_list_limits(1000, 0);
    model_job *m = calloc(BATCH, sizeof *m);
    assert_non_null(m);
    for (int b = 0; b < BULK / BATCH; b++) {
        for (int k = 0; k < BATCH; k++) {
            int i = b * BATCH + k;
            /* every 7th job has another name, to be filtered out */
            snprintf(m[k].name, sizeof m[k].name, "%s-%d", i % 7 ? "bulk" : "other", i);
            m[k].queue = "default";
            m[k].labels[0] = (store_label){"team", i % 3 ? "nlp" : "vision"};
            m[k].nlabels = 1;
        }
        add_jobs(f, m, BATCH);
    }
    free(m);
    store_label vision[] = {{"team", "vision"}};
    struct {
        const char *what;
        store_job_filter flt;
        size_t want;
    } cases[] = {
        {"common prefix", {.name_prefix = "bulk-"}, BULK - BULK / 7},
        {"common prefix + label", {.name_prefix = "bulk-", .labels = vision, .nlabels = 1}, 0},
        {"rarer prefix", {.name_prefix = "bulk-12"}, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t want = 0;
        for (size_t i = 0; i < f->n; i++)
            want += model_matches(&f->jobs[i], &cases[c].flt);
        if (cases[c].want)
            assert_int_equal(want, cases[c].want);
        store_job_filter flt = cases[c].flt;
        flt.limit = 1000;
        size_t got = 0;
        int64_t prev = INT64_MAX;
        for (;;) {
            store_job *jobs = NULL;
            size_t n = 0;
            int64_t next = -1;
            assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
            for (size_t i = 0; i < n; i++) {
                assert_true(jobs[i].seq < prev);
                prev = jobs[i].seq;
                assert_true(strncmp(jobs[i].name, flt.name_prefix, strlen(flt.name_prefix)) == 0);
            }
            got += n;
            store_jobs_free(jobs, n);
            if (!next)
                break;
            if (flt.before_seq && next >= flt.before_seq)
                fail_msg("%s: cursor %lld after %lld", cases[c].what, (long long)next,
                         (long long)flt.before_seq);
            flt.before_seq = next;
        }
        if (got != want)
            fail_msg("%s: got %zu, want %zu", cases[c].what, got, want);
    }
    store_test_list_limits(0, 0);
}

static void test_invalid_filters(void **state)
{
    fixture *f = *state;
    store_label null_value[] = {{"team", NULL}};
    store_label many[65];
    for (size_t i = 0; i < 65; i++)
        many[i] = (store_label){"k", "v"};
    struct {
        const char *what;
        store_job_filter flt;
    } cases[] = {
        {"limit 0", {.limit = 0}},
        {"limit 1001", {.limit = 1001}},
        {"negative cursor", {.limit = 10, .before_seq = -1}},
        {"unknown state bit", {.limit = 10, .state_mask = 1u << JOB_STATE_COUNT}},
        {"NULL labels", {.limit = 10, .nlabels = 1}},
        {"NULL label value", {.limit = 10, .labels = null_value, .nlabels = 1}},
        {"65 labels", {.limit = 10, .labels = many, .nlabels = 65}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        store_job *jobs = (store_job *)1;
        size_t n = 9;
        int64_t next = 9;
        if (store_jobs_list(f->s, &cases[i].flt, &jobs, &n, &next) != TY_EINVAL)
            fail_msg("%s: not refused", cases[i].what);
        assert_null(jobs);
        assert_int_equal(n, 0);
    }
}

static void test_empty_store_lists_nothing(void **state)
{
    fixture *f = *state;
    store_job_filter flt = {.limit = 100};
    store_job *jobs = NULL;
    size_t n = 9;
    int64_t next = 9;
    assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(next, 0);
    store_jobs_free(jobs, n);
}

/*
 * Every listing is a combination of the statements of store_list_sql (one per
 * stream kind, plus the fetch by seq), so checking each statement's plan
 * checks every filter combination: each must search an index range (no full
 * scan) and never sort in a temporary B-tree. The other read paths
 * (store_jobs_sql, store_sched_sql) are held to the same rule.
 */
static void check_plan(sqlite3 *db, const char *sql)
{
    char q[1024];
    int n = snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
    assert_true(n > 0 && (size_t)n < sizeof q);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
        fail_msg("cannot prepare %s: %s", sql, sqlite3_errmsg(db));
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 3);
        rows++;
        if (strstr(detail, "TEMP B-TREE"))
            fail_msg("%s sorts: %s", sql, detail);
        if (strncmp(detail, "SCAN ", 5) == 0 && !strstr(sql, "LIMIT 1"))
            fail_msg("%s scans: %s", sql, detail);
    }
    assert_true(rows > 0);
    sqlite3_finalize(st);
}

static void test_query_plans_use_indexes(void **state)
{
    fixture *f = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->t.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    for (const char *const *sql = store_list_sql; *sql; sql++)
        check_plan(db, *sql);
    for (const char *const *sql = store_jobs_sql; *sql; sql++)
        check_plan(db, *sql);
    for (const char *const *sql = store_sched_sql; *sql; sql++)
        check_plan(db, *sql);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_filter_returns_exactly_the_matching_jobs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_every_filter_within_tiny_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_bounds_a_sparse_intersection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cursor_and_bounds_combine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pagination_never_skips_or_repeats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_common_name_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_store_lists_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_plans_use_indexes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
