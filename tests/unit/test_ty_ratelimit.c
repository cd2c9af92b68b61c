/* Unit tests for common/ty_ratelimit.c: token buckets given explicit times, and a table whose
 * memory stays fixed whatever the number of keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "common/ty_ratelimit.h"

/* One step of a scenario on key "a" of a table of rate 2/s, burst 3: at t ms, take cost
 * tokens; expect ok, and when refused, the wait. */
static const struct {
    int64_t t;
    double cost;
    int ok;
    int64_t wait;
} steps[] = {
    {0, 1, 1, 0},       /* a new key holds a full bucket: 3 */
    {0, 1, 1, 0},       /* 2 */
    {0, 1, 1, 0},       /* 1 -> 0 */
    {0, 1, 0, 500},     /* empty: one token in 500 ms at 2/s */
    {250, 1, 0, 250},   /* half a token */
    {500, 1, 1, 0},     /* one token came */
    {500, 1, 0, 500},
    {400, 1, 0, 500},   /* time going back counts as none */
    {10000, 1, 1, 0},   /* long idle: refilled to burst (3), not 19 */
    {10000, 2, 1, 0},
    {10000, 1, 0, 500},
    {10000, 5, 0, 2500}, /* more than the burst: the wait is still computed */
    {11000, 2, 1, 0},
};

static void test_bucket_table(void **state)
{
    (void)state;
    ty_ratelimit *rl = NULL;
    assert_int_equal(ty_ratelimit_new(64, 2, 3, 42, &rl), TY_OK);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int64_t wait = 0;
        int ok = ty_ratelimit_take(rl, "a", 1, steps[i].t, steps[i].cost, &wait);
        if (ok != steps[i].ok)
            fail_msg("step %zu: ok %d, want %d", i, ok, steps[i].ok);
        if (!ok && wait != steps[i].wait)
            fail_msg("step %zu: wait %lld, want %lld", i, (long long)wait,
                     (long long)steps[i].wait);
    }
    ty_ratelimit_free(rl);
}

static void test_keys_are_apart(void **state)
{
    (void)state;
    ty_ratelimit *rl = NULL;
    assert_int_equal(ty_ratelimit_new(64, 1, 1, 7, &rl), TY_OK);
    assert_true(ty_ratelimit_take(rl, "hook-a", 6, 0, 1, NULL));
    assert_false(ty_ratelimit_take(rl, "hook-a", 6, 0, 1, NULL));
    assert_true(ty_ratelimit_take(rl, "hook-b", 6, 0, 1, NULL));
    /* Same bytes, another length: another key. */
    assert_true(ty_ratelimit_take(rl, "hook-a\0", 7, 0, 1, NULL));
    ty_ratelimit_free(rl);
}

static void test_check_takes_nothing(void **state)
{
    (void)state;
    ty_ratelimit *rl = NULL;
    int64_t wait = 0;
    assert_int_equal(ty_ratelimit_new(8, 0.2, 2, 1, &rl), TY_OK);
    for (int i = 0; i < 10; i++)
        assert_true(ty_ratelimit_check(rl, "x", 1, 0, 1, NULL));
    assert_true(ty_ratelimit_take(rl, "x", 1, 0, 1, NULL));
    assert_true(ty_ratelimit_take(rl, "x", 1, 0, 1, NULL));
    assert_false(ty_ratelimit_check(rl, "x", 1, 0, 1, &wait));
    assert_int_equal(wait, 5000);
    assert_true(ty_ratelimit_check(rl, "x", 1, 5000, 1, NULL));
    ty_ratelimit_free(rl);
}

/* Far more keys than slots: memory is fixed, the table keeps working, and a key that keeps
 * being refused stays refused while others come and go in its set (the fullest goes first). */
static void test_rotating_keys(void **state)
{
    (void)state;
    ty_ratelimit *rl = NULL;
    assert_int_equal(ty_ratelimit_new(4, 1, 5, 3, &rl), TY_OK); /* one set of 4 */
    for (int i = 0; i < 5; i++)
        assert_true(ty_ratelimit_take(rl, "abuser", 6, 0, 1, NULL));
    assert_false(ty_ratelimit_take(rl, "abuser", 6, 0, 1, NULL));
    char key[32];
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(key, sizeof key, "k%d", i);
        assert_true(ty_ratelimit_take(rl, key, (size_t)n, 0, 1, NULL));
        /* The newcomers hold 4 of 5 tokens: fuller than the abuser's 0, so they go first. */
        assert_false(ty_ratelimit_check(rl, "abuser", 6, 0, 1, NULL));
    }
    assert_false(ty_ratelimit_take(rl, "abuser", 6, 0, 1, NULL));
    ty_ratelimit_free(rl);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    ty_ratelimit *rl = NULL;
    static const struct {
        size_t nslots;
        double rate, burst;
    } bad[] = {{0, 1, 1}, {8, 0, 1}, {8, -1, 1}, {8, 1, 0.5}, {(size_t)1 << 25, 1, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ty_ratelimit_new(bad[i].nslots, bad[i].rate, bad[i].burst, 0, &rl),
                         TY_EINVAL);
    assert_null(rl);
    ty_ratelimit_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_table),       cmocka_unit_test(test_keys_are_apart),
        cmocka_unit_test(test_check_takes_nothing), cmocka_unit_test(test_rotating_keys),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
