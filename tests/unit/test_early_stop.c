/*
 * test_early_stop.c - scheduler/early_stop.c: median early stopping's rule, as a table. What a
 * user notices: a trial worse than the median of the succeeded trials at its step is stopped
 * with a sentence saying so; a tie, a trial before min_step or a sweep with too few succeeded
 * trials goes on. NaN and infinities never reach the rule (ingestion refuses them), so no row
 * holds one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "scheduler/early_stop.h"

#define MAX_DONE 8

typedef struct stop_case {
    const char *name;
    int maximize;
    int min_trials;
    int64_t min_step;
    int64_t step;
    double value;
    double done[MAX_DONE];
    size_t ndone;
    early_stop_verdict want;
    double median;       /* GO_ON and STOP */
    const char *message; /* the whole sentence */
} stop_case;

/* One case to a row. */
/* clang-format off */
static const stop_case cases[] = {
    /* Minimize: above the median stops, below goes on. */
    {"minimize, odd count, worse", 0, 3, 0, 400, 0.91, {0.52, 0.4, 0.7, 0.3, 0.6}, 5,
     EARLY_STOP_STOP, 0.52,
     "loss 0.91 at step 400 is worse than the median 0.52 of 5 succeeded trials"},
    {"minimize, odd count, better", 0, 3, 0, 400, 0.45, {0.52, 0.4, 0.7, 0.3, 0.6}, 5,
     EARLY_STOP_GO_ON, 0.52,
     "loss 0.45 at step 400 is no worse than the median 0.52 of 5 succeeded trials"},
    /* Even counts: the mean of the two middle values, whatever the order given. */
    {"minimize, even count, worse", 0, 2, 1, 2, 0.6, {0.5, 0.4}, 2, EARLY_STOP_STOP, 0.45,
     "loss 0.6 at step 2 is worse than the median 0.45 of 2 succeeded trials"},
    {"minimize, even count, better", 0, 2, 1, 1, 0.85, {1.0, 0.8}, 2, EARLY_STOP_GO_ON, 0.9,
     "loss 0.85 at step 1 is no worse than the median 0.9 of 2 succeeded trials"},
    {"even count of four, unsorted", 0, 4, 0, 10, 2.6, {4, 1, 3, 2}, 4, EARLY_STOP_STOP, 2.5,
     "loss 2.6 at step 10 is worse than the median 2.5 of 4 succeeded trials"},
    /* A tie is not worse, either goal. */
    {"minimize, tie", 0, 1, 0, 5, 0.5, {0.5}, 1, EARLY_STOP_GO_ON, 0.5,
     "loss 0.5 at step 5 is no worse than the median 0.5 of 1 succeeded trials"},
    {"maximize, tie", 1, 3, 0, 5, 0.7, {0.9, 0.7, 0.1}, 3, EARLY_STOP_GO_ON, 0.7,
     "loss 0.7 at step 5 is no worse than the median 0.7 of 3 succeeded trials"},
    /* Maximize: below the median stops, above goes on. */
    {"maximize, worse", 1, 3, 0, 100, 0.6, {0.9, 0.8, 0.7}, 3, EARLY_STOP_STOP, 0.8,
     "loss 0.6 at step 100 is worse than the median 0.8 of 3 succeeded trials"},
    {"maximize, better", 1, 3, 0, 100, 0.95, {0.9, 0.8, 0.7}, 3, EARLY_STOP_GO_ON, 0.8,
     "loss 0.95 at step 100 is no worse than the median 0.8 of 3 succeeded trials"},
    {"maximize, even count", 1, 2, 0, 7, 0.74, {0.8, 0.7}, 2, EARLY_STOP_STOP, 0.75,
     "loss 0.74 at step 7 is worse than the median 0.75 of 2 succeeded trials"},
    /* Negative values sort as numbers. */
    {"negative values", 1, 3, 0, 3, -5, {-1, -10, -3}, 3, EARLY_STOP_STOP, -3,
     "loss -5 at step 3 is worse than the median -3 of 3 succeeded trials"},
    /* Fewer than min_trials: not judged, however bad. */
    {"none succeeded", 0, 2, 1, 1, 5.0, {0}, 0, EARLY_STOP_TOO_FEW, 0,
     "0 succeeded trials with loss at or before step 1, 2 needed"},
    {"one of two", 0, 2, 1, 1, 5.0, {1.0}, 1, EARLY_STOP_TOO_FEW, 0,
     "1 succeeded trial with loss at or before step 1, 2 needed"},
    {"four of five", 0, 5, 0, 9, 100, {1, 2, 3, 4}, 4, EARLY_STOP_TOO_FEW, 0,
     "4 succeeded trials with loss at or before step 9, 5 needed"},
    {"exactly min_trials", 0, 5, 0, 9, 100, {1, 2, 3, 4, 5}, 5, EARLY_STOP_STOP, 3,
     "loss 100 at step 9 is worse than the median 3 of 5 succeeded trials"},
    /* min_trials below 1 still needs one value: no median of nothing. */
    {"min_trials 0, none", 0, 0, 0, 1, 5.0, {0}, 0, EARLY_STOP_TOO_FEW, 0,
     "0 succeeded trials with loss at or before step 1, 1 needed"},
    /* Below min_step: not judged; at it: judged. */
    {"below min_step", 0, 1, 100, 99, 9.0, {0.1, 0.2}, 2, EARLY_STOP_TOO_EARLY, 0,
     "loss at step 99 is not judged before step 100"},
    {"at min_step", 0, 1, 100, 100, 9.0, {0.25, 0.75}, 2, EARLY_STOP_STOP, 0.5,
     "loss 9 at step 100 is worse than the median 0.5 of 2 succeeded trials"},
    {"below min_step, too few as well", 0, 3, 10, 0, 9.0, {0}, 0, EARLY_STOP_TOO_EARLY, 0,
     "loss at step 0 is not judged before step 10"},
};
/* clang-format on */

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const stop_case *c = &cases[i];
        double done[MAX_DONE];
        memcpy(done, c->done, sizeof done);
        early_stop_input in = {.metric = "loss",
                               .maximize = c->maximize,
                               .min_trials = c->min_trials,
                               .min_step = c->min_step,
                               .step = c->step,
                               .value = c->value,
                               .done = c->ndone ? done : NULL,
                               .ndone = c->ndone};
        early_stop_result r;
        memset(&r, 0x5a, sizeof r); /* every member is written */
        early_stop_decide(&in, &r);
        if (r.verdict != c->want || r.median != c->median || strcmp(r.message, c->message)) {
            print_error("case %zu (%s): verdict %d median %g \"%s\"\n", i, c->name, (int)r.verdict,
                        r.median, r.message);
            fail();
        }
    }
}

/* The sentence names the metric, and a name at the longest the store allows still fits. */
static void test_message_names_the_metric(void **state)
{
    (void)state;
    char name[65];
    memset(name, 'm', 64);
    name[64] = '\0';
    double done[] = {1e-300, -1.5e300, 2.5e-7};
    early_stop_input in = {.metric = name,
                           .step = INT64_MAX,
                           .value = 1.7976931348623157e307,
                           .min_trials = 3,
                           .done = done,
                           .ndone = 3};
    early_stop_result r;
    early_stop_decide(&in, &r);
    assert_int_equal(r.verdict, EARLY_STOP_STOP);
    char want[256];
    snprintf(want, sizeof want,
             "%s 1.79769e+307 at step 9223372036854775807 is worse than the median 1e-300 of 3 "
             "succeeded trials",
             name);
    assert_string_equal(r.message, want);
    in.metric = NULL;
    early_stop_decide(&in, &r);
    assert_non_null(strstr(r.message, "objective 1.79769e+307 at step"));
}

/* Outside the contract: judged as nothing, never a crash. */
static void test_no_input(void **state)
{
    (void)state;
    early_stop_result r;
    early_stop_decide(NULL, &r);
    assert_int_equal(r.verdict, EARLY_STOP_TOO_FEW);
    early_stop_input in = {.metric = "loss", .min_trials = 1, .ndone = 2};
    early_stop_decide(&in, &r);
    assert_int_equal(r.verdict, EARLY_STOP_TOO_FEW);
    early_stop_decide(&in, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_message_names_the_metric),
        cmocka_unit_test(test_no_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
