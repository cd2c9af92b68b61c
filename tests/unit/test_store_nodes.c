/*
 * test_store_nodes.c - store/store_nodes.c: the node ledger. What a user notices: failures
 * charged to a node are read back by node and time, oldest first, the newest kept under a cap;
 * old rows are pruned; a quarantine is listed while it lasts, a release ends it (once: a second
 * release is "not quarantined"), a new quarantine of the same node replaces the old one; all of
 * it survives reopening the database.
 */
#include "tests/unit/test_store_util.h"

static void add(store *s, const char *node, const char *job, int64_t t, int exit_code)
{
    store_node_failure f = {.node = (char *)node, .job_id = (char *)job, .attempt = 1,
                            .rank = 0, .time_ms = t, .exit_code = exit_code, .signal = 0,
                            .cause = "rank 0 exited"};
    assert_int_equal(store_node_failure_add(s, &f, 0), TY_OK);
}

static void test_failures_by_node_and_time(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_store(&t);
    add(s, "n1", "a", 3000, 1);
    add(s, "n1", "b", 1000, 2);
    add(s, "n2", "c", 2000, 3);
    add(s, "n1", "c", 5000, 137);
    store_node_failure *f = NULL;
    size_t n = 0;
    assert_int_equal(store_node_failures(s, "n1", 2000, 100, &f, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(f[0].job_id, "a");
    assert_int_equal(f[1].exit_code, 137);
    store_node_failures_free(f, n);
    /* The cap keeps the newest, still oldest first. */
    assert_int_equal(store_node_failures(s, "n1", 0, 2, &f, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(f[0].time_ms, 3000);
    assert_int_equal(f[1].time_ms, 5000);
    store_node_failures_free(f, n);
    assert_int_equal(store_node_failures(s, NULL, 0, 100, &f, &n), TY_OK);
    assert_int_equal(n, 4);
    store_node_failures_free(f, n);
    /* A failure that prunes what is older than 2500. */
    store_node_failure g = {.node = "n2", .job_id = "d", .attempt = 2, .rank = 3,
                            .time_ms = 6000, .exit_code = -1, .signal = 9, .cause = "killed"};
    assert_int_equal(store_node_failure_add(s, &g, 2500), TY_OK);
    assert_int_equal(store_node_failures(s, NULL, 0, 100, &f, &n), TY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(f[2].signal, 9);
    assert_int_equal(f[2].rank, 3);
    store_node_failures_free(f, n);
    /* A row without a node is refused. */
    g.node = "";
    assert_int_equal(store_node_failure_add(s, &g, 0), TY_EINVAL);
    store_close(s);
    tdir_remove(&t);
}

static void test_quarantine_and_release(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_store(&t);
    store_node_quarantine q = {.node = "n1",
                               .since_ms = 1000,
                               .release_at_ms = 9000,
                               .reason = "3 failures of 2 jobs within 3600 s",
                               .counted_from_ms = 500};
    assert_int_equal(store_node_quarantine_put(s, &q), TY_OK);
    q.node = "n2";
    assert_int_equal(store_node_quarantine_put(s, &q), TY_OK);
    assert_int_equal(store_node_release(s, "n2", 2000, "admin"), TY_OK);
    assert_int_equal(store_node_release(s, "n2", 2100, "admin"), TY_ENOTFOUND);
    assert_int_equal(store_node_release(s, "n3", 2100, "admin"), TY_ENOTFOUND);
    store_close(s);

    s = open_store(&t); /* kept across a restart */
    store_node_quarantine *got = NULL;
    size_t n = 0;
    assert_int_equal(store_node_quarantines(s, 1, &got, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(got[0].node, "n1");
    assert_int_equal(got[0].release_at_ms, 9000);
    assert_int_equal(got[0].counted_from_ms, 500);
    assert_string_equal(got[0].released_by, "");
    store_node_quarantines_free(got, n);
    assert_int_equal(store_node_quarantines(s, 0, &got, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(got[1].released_by, "admin");
    assert_int_equal(got[1].released_ms, 2000);
    store_node_quarantines_free(got, n);
    /* Quarantined again: the new one replaces the released one, and counts from its release. */
    q.since_ms = 3000;
    q.release_at_ms = 4000;
    q.counted_from_ms = 2000;
    assert_int_equal(store_node_quarantine_put(s, &q), TY_OK);
    assert_int_equal(store_node_quarantines(s, 1, &got, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(got[1].since_ms, 3000);
    assert_int_equal(got[1].released_ms, 0);
    assert_int_equal(got[1].counted_from_ms, 2000);
    store_node_quarantines_free(got, n);
    store_close(s);
    tdir_remove(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failures_by_node_and_time),
        cmocka_unit_test(test_quarantine_and_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
