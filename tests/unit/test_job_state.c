/* Unit tests for common/job_state.c: the state machine of docs/DESIGN.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/job_state.h"

static const struct {
    job_state from, to;
    bool ok;
} transitions[] = {
    {JOB_STATE_NONE, JOB_PENDING, true},
    {JOB_STATE_NONE, JOB_RUNNING, false},
    {JOB_PENDING, JOB_ADMITTED, true},
    {JOB_PENDING, JOB_CANCELLED, true},
    {JOB_PENDING, JOB_RUNNING, false},
    {JOB_ADMITTED, JOB_STARTING, true},
    {JOB_STARTING, JOB_RUNNING, true},
    {JOB_RUNNING, JOB_SUCCEEDED, true},
    {JOB_RUNNING, JOB_RESTARTING, true},
    {JOB_RESTARTING, JOB_STARTING, true},
    {JOB_RESTARTING, JOB_FAILED, true},
    {JOB_RUNNING, JOB_CANCELLING, true},
    {JOB_CANCELLING, JOB_CANCELLED, true},
    {JOB_CANCELLING, JOB_RUNNING, false},
    {JOB_SUCCEEDED, JOB_RUNNING, false},
    {JOB_SUCCEEDED, JOB_FAILED, false},
    {JOB_FAILED, JOB_PENDING, false},
    {JOB_CANCELLED, JOB_PENDING, false},
    {JOB_RUNNING, JOB_RUNNING, false},
};

static void test_transition_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof transitions / sizeof transitions[0]; i++)
        assert_int_equal(job_state_transition_allowed(transitions[i].from, transitions[i].to),
                         transitions[i].ok);
}

static void test_terminal_states_never_change(void **state)
{
    (void)state;
    for (int from = 0; from < JOB_STATE_COUNT; from++) {
        if (!job_state_is_terminal((job_state)from))
            continue;
        for (int to = 0; to < JOB_STATE_COUNT; to++)
            assert_false(job_state_transition_allowed((job_state)from, (job_state)to));
    }
}

static void test_names_round_trip(void **state)
{
    (void)state;
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        assert_int_equal(job_state_parse(job_state_name((job_state)s)), s);
    assert_int_equal(job_state_parse("pending"), JOB_STATE_NONE);
    assert_int_equal(job_state_parse(""), JOB_STATE_NONE);
    assert_string_equal(job_state_name(JOB_STATE_NONE), "NONE");
}

static void test_cancel_semantics(void **state)
{
    (void)state;
    job_state to;
    assert_true(job_state_cancel_target(JOB_PENDING, &to));
    assert_int_equal(to, JOB_CANCELLED);
    assert_true(job_state_cancel_target(JOB_RUNNING, &to));
    assert_int_equal(to, JOB_CANCELLING);
    assert_false(job_state_cancel_target(JOB_CANCELLED, &to));
    assert_int_equal(to, JOB_CANCELLED);
    assert_false(job_state_cancel_conflicts(JOB_CANCELLED));
    assert_true(job_state_cancel_conflicts(JOB_SUCCEEDED));
    assert_true(job_state_cancel_conflicts(JOB_FAILED));
    /* every target the cancel rule picks is a legal transition */
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        if (job_state_cancel_target((job_state)s, &to))
            assert_true(job_state_transition_allowed((job_state)s, to));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transition_table),
        cmocka_unit_test(test_terminal_states_never_change),
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_cancel_semantics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
