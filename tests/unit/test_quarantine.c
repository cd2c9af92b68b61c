/*
 * test_quarantine.c - scheduler/quarantine.c: the node quarantine rule, as a table. What a user
 * notices: a node that ended attempts of several jobs often enough within the window is taken
 * out of rotation with a sentence saying so; one job failing again and again on a node, old
 * failures and and failures before a release do not take it away; a quarantine lasts release_seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "scheduler/quarantine.h"

#define MAX_F 8
#define S 1000 /* ms */

typedef struct q_case {
    const char *name;
    quarantine_policy p;
    quarantine_failure f[MAX_F];
    size_t n;
    int64_t now_ms;
    int64_t released_ms;
    int want;
    int counted, jobs;
    const char *reason;
} q_case;

/* clang-format off */
static const q_case cases[] = {
    {"three failures of two jobs", {3, 2, 3600, 86400},
     {{"a", 100 * S}, {"b", 200 * S}, {"a", 300 * S}}, 3, 400 * S, 0,
     1, 3, 2, "3 failures of 2 jobs within 3600 s"},
    {"one job's own bug, again and again", {3, 2, 3600, 86400},
     {{"a", 100 * S}, {"a", 200 * S}, {"a", 300 * S}, {"a", 350 * S}}, 4, 400 * S, 0,
     0, 4, 1, "4 failures, but of 1 job (at least 2 needed)"},
    {"too few failures", {3, 2, 3600, 86400},
     {{"a", 100 * S}, {"b", 200 * S}}, 2, 400 * S, 0,
     0, 2, 2, "2 of 3 failures within 3600 s"},
    {"an old failure is outside the window", {3, 2, 600, 86400},
     {{"a", 10 * S}, {"b", 500 * S}, {"c", 900 * S}}, 3, 1000 * S, 0,
     0, 2, 2, "2 of 3 failures within 600 s"},
    {"the window's edge is exclusive", {2, 2, 600, 86400},
     {{"a", 400 * S}, {"b", 1000 * S}}, 2, 1000 * S, 0,
     0, 1, 1, "1 of 2 failures within 600 s"},
    {"failures before a release do not count", {3, 2, 3600, 86400},
     {{"a", 100 * S}, {"b", 200 * S}, {"c", 300 * S}, {"d", 500 * S}}, 4, 600 * S, 300 * S,
     0, 1, 1, "1 of 3 failures within 3600 s"},
    {"after a release, new failures do", {3, 2, 3600, 86400},
     {{"a", 100 * S}, {"b", 400 * S}, {"c", 500 * S}, {"b", 550 * S}}, 4, 600 * S, 300 * S,
     1, 3, 2, "3 failures of 2 jobs within 3600 s"},
    {"a failure later than now is not counted", {2, 1, 3600, 86400},
     {{"a", 100 * S}, {"a", 700 * S}}, 2, 600 * S, 0,
     0, 1, 1, "1 of 2 failures within 3600 s"},
    {"one failure is enough when asked so", {1, 1, 60, 30},
     {{"a", 100 * S}}, 1, 100 * S, 0,
     1, 1, 1, "1 failure of 1 job within 60 s"},
    {"settings below 1 count as 1", {0, 0, 0, 0},
     {{"a", 100 * S}}, 1, 100 * S, 0,
     1, 1, 1, "1 failure of 1 job within 1 s"},
    {"no failures", {3, 2, 3600, 86400}, {{0}}, 0, 100 * S, 0,
     0, 0, 0, "0 of 3 failures within 3600 s"},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const q_case *c = &cases[i];
        quarantine_input in = {&c->p, c->f, c->n, c->now_ms, c->released_ms};
        quarantine_verdict v;
        quarantine_judge(&in, &v);
        if (v.quarantine != c->want || v.counted != c->counted || v.jobs != c->jobs ||
            strcmp(v.reason, c->reason))
            fail_msg("%s: got quarantine=%d counted=%d jobs=%d \"%s\"", c->name, v.quarantine,
                     v.counted, v.jobs, v.reason);
        if (v.quarantine) {
            int64_t rel = c->p.release_seconds > 0 ? c->p.release_seconds : 1;
            assert_int_equal(v.release_at_ms, c->now_ms + rel * 1000);
        }
    }
}

static void test_defaults(void **state)
{
    (void)state;
    quarantine_policy p = quarantine_default();
    assert_int_equal(p.failures, 3);
    assert_int_equal(p.min_jobs, 2);
    assert_int_equal(p.window_seconds, 3600);
    assert_int_equal(p.release_seconds, 86400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
