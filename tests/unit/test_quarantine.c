/*
 * test_quarantine.c - scheduler/quarantine.c: the node quarantine rule, as a table. What a user
 * notices: a node that ended attempts of several jobs often enough within the window is taken
 * out of rotation with a sentence saying so; one job failing again and again on a node, old
 * failures and and failures before a release do not take it away; a quarantine lasts release_seconds.
 * A rank taken away (evicted, preempted, its node lost) or naming a lost peer is not its node's
 * failure; the others are charged with their kind (OOMKilled, a GPU error, ...).
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
        /* Where the counted failures begin: the window's start, or the release if later. */
        int64_t window = (c->p.window_seconds > 0 ? c->p.window_seconds : 1) * 1000;
        int64_t from = c->now_ms - window;
        assert_int_equal(v.counted_after_ms, c->released_ms > from ? c->released_ms : from);
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

/*
 * What a pod's status says took it away (the reasons of Kubernetes v1.26 and later): a pod taken
 * away is not charged to its node, whatever its container's exit code.
 */
static void test_pod_causes(void **state)
{
    (void)state;
    static const struct {
        const char *status_reason, *disruption;
        quarantine_cause want;
    } table[] = {
        {NULL, NULL, QUARANTINE_CAUSE_NONE},
        {"", "", QUARANTINE_CAUSE_NONE},
        {"UnexpectedAdmissionError", NULL, QUARANTINE_CAUSE_NONE}, /* the node refused it */
        {"OutOfnvidia.com/gpu", NULL, QUARANTINE_CAUSE_NONE},
        {NULL, "PreemptionByKubeScheduler", QUARANTINE_CAUSE_PREEMPTED}, /* v1.26 */
        {NULL, "PreemptionByScheduler", QUARANTINE_CAUSE_PREEMPTED},     /* v1.27+ */
        {"Preempting", NULL, QUARANTINE_CAUSE_PREEMPTED},
        {NULL, "DeletionByTaintManager", QUARANTINE_CAUSE_NODE_LOST},
        {NULL, "DeletionByPodGC", QUARANTINE_CAUSE_NODE_LOST},
        {"NodeLost", NULL, QUARANTINE_CAUSE_NODE_LOST},
        {"Terminated", NULL, QUARANTINE_CAUSE_NODE_LOST}, /* graceful node shutdown */
        {"Shutdown", NULL, QUARANTINE_CAUSE_NODE_LOST},
        {NULL, "EvictionByEvictionAPI", QUARANTINE_CAUSE_EVICTED},
        {"Evicted", "TerminationByKubelet", QUARANTINE_CAUSE_EVICTED}, /* node pressure */
        {"Evicted", NULL, QUARANTINE_CAUSE_EVICTED},
        {NULL, "SomeFutureReason", QUARANTINE_CAUSE_EVICTED},
        /* the condition's reason is the more precise */
        {"Evicted", "DeletionByTaintManager", QUARANTINE_CAUSE_NODE_LOST},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        quarantine_cause got = quarantine_pod_cause(table[i].status_reason, table[i].disruption);
        if (got != table[i].want)
            fail_msg("status.reason %s, DisruptionTarget %s: got %d, want %d",
                     table[i].status_reason ? table[i].status_reason : "(none)",
                     table[i].disruption ? table[i].disruption : "(none)", (int)got,
                     (int)table[i].want);
    }
}

/*
 * A failed rank's end: charged to its node with the kind of failure, unless the rank names a
 * lost peer (the worker's "rank N (host:port) lost: ..."): then the peer ended it.
 */
static void test_attribution(void **state)
{
    (void)state;
    static const struct {
        int exit_code, signal;
        const char *detail, *reason;
        int charge;
    } table[] = {
        {1, 0, NULL, "exit_code", 1},
        {1, 0, "", "exit_code", 1},
        {-1, 9, "", "signal", 1},
        {137, 0, "OOMKilled", "oom_killed", 1},
        {-1, 9, "out of memory: the kernel killed it at its limit of 2Gi", "oom_killed", 1},
        {1, 0, "trainyard-worker: NCCL error: unhandled cuda error", "gpu_error", 1},
        {1, 0, "RuntimeError: CUDA error: an illegal memory access was encountered",
         "gpu_error", 1},
        {1, 0, "NVRM: Xid (PCI:0000:10:1c): 79, GPU has fallen off the bus", "gpu_error", 1},
        {-1, 0, "the pod failed: Pod was rejected: UnexpectedAdmissionError", "pod_failed", 1},
        {1, 0, "trainyard-worker: rank 1 (10.0.3.7:29500) lost: connection reset", "lost_peer",
         0},
        {1, 0, "rank 12 (usw2a-a100-od-1:29500) lost: no word for 30 s", "lost_peer", 0},
        /* the same words about itself or about nothing are not a lost peer */
        {1, 0, "rank 1 exited with code 1 (lost) on node n", "exit_code", 1},
        {1, 0, "rank x (h:1) lost", "exit_code", 1},
        /* how the node ledger keeps it: the rank's end as its job's event says it */
        {137, 0, "rank 0 exited with code 137 (OOMKilled) on node usw2a-a100-od-0",
         "oom_killed", 1},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        quarantine_charge c =
            quarantine_attribute(table[i].exit_code, table[i].signal, table[i].detail);
        if (c.charge != table[i].charge || strcmp(c.reason, table[i].reason))
            fail_msg("\"%s\": got charge=%d %s", table[i].detail ? table[i].detail : "(null)",
                     c.charge, c.reason);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_pod_causes),
        cmocka_unit_test(test_attribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
