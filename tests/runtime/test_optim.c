/*
 * test_optim.c - the update rules against values worked out by hand (PyTorch's formulas),
 * and the learning-rate schedule.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/optim.h"

static optim_config config(optim_kind kind)
{
    optim_config c = {.kind = kind, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f,
                      .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    return c;
}

static void test_two_steps(void **state)
{
    (void)state;
    /* p = 1, g = 0.5 twice, lr = 0.1, weight decay 0.1:
     * sgd:   g' = 0.6, buf = 0.6, p = 0.94; g' = 0.594, buf = 1.134, p = 0.8266
     * adamw: p = 0.99 - 0.1 = 0.89 (the first Adam step is lr * sign(g));
     *        p = 0.8811 - (0.1 / 0.19) * 0.095 / 0.5 = 0.7811                        */
    static const struct {
        optim_kind kind;
        float after[2];
    } cases[] = {
        {OPTIM_SGD, {0.94f, 0.8266f}},
        {OPTIM_ADAMW, {0.89f, 0.7811f}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        optim_config c = config(cases[i].kind);
        float p[3] = {1, 1, 1}, g[3] = {0.5f, 0.5f, 0.5f}, s0[3] = {0}, s1[3] = {0};
        float *st[2] = {s0, s1};
        for (int t = 1; t <= 2; t++) {
            optim_step(&c, p, g, st, 3, c.lr, t);
            for (int k = 0; k < 3; k++)
                assert_float_equal(p[k], cases[i].after[t - 1], 1e-5);
        }
    }
}

static void test_zero_length_and_scalars(void **state)
{
    (void)state;
    optim_config c = config(OPTIM_ADAMW);
    float *none[2] = {NULL, NULL};
    optim_step(&c, NULL, NULL, none, 0, 0.1f, 1);
    optim_scalars k = optim_step_scalars(&c, 0.1f, 1);
    assert_float_equal(k.decay, 0.99, 1e-7);
    assert_float_equal(k.step_size, 1.0, 1e-6);
    assert_float_equal(k.inv_sqrt_bc2, 1.0 / sqrt(0.001), 1e-3);
    c.kind = OPTIM_SGD;
    k = optim_step_scalars(&c, 0.1f, 5);
    assert_float_equal(k.lr, 0.1, 1e-7);
}

static void test_schedule(void **state)
{
    (void)state;
    static const struct {
        optim_schedule sched;
        int64_t warmup, step, total;
        double lr;
    } cases[] = {
        {OPTIM_SCHED_COSINE, 0, 0, 100, 1.0},
        {OPTIM_SCHED_COSINE, 0, 25, 100, 0.853553390593},
        {OPTIM_SCHED_COSINE, 0, 50, 100, 0.5},
        {OPTIM_SCHED_COSINE, 0, 100, 100, 0.0},
        {OPTIM_SCHED_COSINE, 0, 150, 100, 0.0},  /* past the plan: stays at the end */
        {OPTIM_SCHED_COSINE, 10, 0, 100, 0.1},
        {OPTIM_SCHED_COSINE, 10, 9, 100, 1.0},
        {OPTIM_SCHED_COSINE, 10, 10, 100, 1.0},
        {OPTIM_SCHED_COSINE, 10, 55, 100, 0.5},
        {OPTIM_SCHED_CONSTANT, 0, 77, 100, 1.0},
        {OPTIM_SCHED_CONSTANT, 4, 1, 100, 0.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        optim_config c = {.lr = 1.0f, .schedule = cases[i].sched, .warmup_steps = cases[i].warmup};
        assert_float_equal(optim_lr_at(&c, cases[i].step, cases[i].total), cases[i].lr, 1e-6);
    }
}

static void test_names(void **state)
{
    (void)state;
    assert_int_equal(optim_parse("sgd"), OPTIM_SGD);
    assert_int_equal(optim_parse("adamw"), OPTIM_ADAMW);
    assert_int_equal(optim_parse("adam"), -1);
    assert_string_equal(optim_name(OPTIM_ADAMW), "adamw");
    assert_string_equal(optim_name(OPTIM_SGD), "sgd");
    assert_int_equal(optim_state_count(OPTIM_SGD), 1);
    assert_int_equal(optim_state_count(OPTIM_ADAMW), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_steps),
        cmocka_unit_test(test_zero_length_and_scalars),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
