/*
 * test_rng.c - splitmix64 / xoshiro256** against their reference outputs; permutations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/rng.h"

static void test_splitmix64_reference(void **state)
{
    (void)state;
    /* The first outputs for seed 0 published with the algorithm. */
    static const uint64_t expect[] = {0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL,
                                      0x06c45d188009454fULL};
    uint64_t x = 0;
    for (size_t i = 0; i < 3; i++)
        assert_true(rng_splitmix64(&x) == expect[i]);
}

static void test_xoshiro_reference(void **state)
{
    (void)state;
    /* xoshiro256** from the state {1, 2, 3, 4}. */
    static const uint64_t expect[] = {11520ULL, 0ULL, 1509978240ULL, 1215971899390074240ULL};
    rng r = {{1, 2, 3, 4}};
    for (size_t i = 0; i < 4; i++)
        assert_true(rng_next(&r) == expect[i]);
}

static void test_seed_is_deterministic(void **state)
{
    (void)state;
    rng a, b, c;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    rng_seed(&c, 43);
    assert_memory_equal(a.s, b.s, sizeof a.s);
    assert_memory_not_equal(a.s, c.s, sizeof a.s);
}

static void test_below_and_uniform_in_range(void **state)
{
    (void)state;
    rng r;
    rng_seed(&r, 7);
    static const uint64_t bounds[] = {1, 2, 3, 10, 1000, 1ULL << 40, UINT64_MAX};
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
        for (int i = 0; i < 1000; i++)
            assert_true(rng_below(&r, bounds[b]) < bounds[b]);
    int hist[10] = {0};
    for (int i = 0; i < 100000; i++) {
        float u = rng_uniform(&r);
        assert_true(u >= 0.0f && u < 1.0f);
        hist[(int)(u * 10)]++;
    }
    for (int i = 0; i < 10; i++) /* 10000 expected per bin; 5 sigma is 500 */
        assert_in_range(hist[i], 9000, 11000);
}

static void test_permutation(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 2, 17, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint32_t *p = calloc(n + 1, sizeof *p), *q = calloc(n + 1, sizeof *q);
        char *seen = calloc(n + 1, 1);
        rng a, b;
        rng_seed(&a, 1);
        rng_seed(&b, 1);
        rng_permutation(&a, p, n);
        rng_permutation(&b, q, n);
        assert_memory_equal(p, q, n * sizeof *p);
        for (size_t i = 0; i < n; i++) {
            assert_true(p[i] < n);
            assert_false(seen[p[i]]);
            seen[p[i]] = 1;
        }
        free(p);
        free(q);
        free(seen);
    }
    /* A second permutation from the advanced generator differs from the first. */
    uint32_t p1[100], p2[100];
    rng r;
    rng_seed(&r, 5);
    rng_permutation(&r, p1, 100);
    rng_permutation(&r, p2, 100);
    assert_memory_not_equal(p1, p2, sizeof p1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitmix64_reference),
        cmocka_unit_test(test_xoshiro_reference),
        cmocka_unit_test(test_seed_is_deterministic),
        cmocka_unit_test(test_below_and_uniform_in_range),
        cmocka_unit_test(test_permutation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
