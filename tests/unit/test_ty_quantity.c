/*
 * test_ty_quantity.c - common/ty_quantity.c: the grammar, and values at their
 * extremes, which saturate or fail cleanly and never wrap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_quantity.h"

static ty_err parse(const char *s, double *v)
{
    return ty_quantity_parse(s, strlen(s), v);
}

static const struct {
    const char *text;
    double value;
} good[] = {
    {"1", 1},
    {"500m", 0.5},
    {"1.5", 1.5},
    {".5", 0.5},
    {"5.", 5},
    {"+1", 1},
    {"-2", -2},
    {"2Gi", 2147483648.0},
    {"1Ki", 1024},
    {"3E", 3e18},
    {"7k", 7000},
    {"1e3", 1000},
    {"1E-2", 0.01},
    {"12e+6", 12e6},
    {"0.1", 0.1},
    {"1.1", 1.1},
    {"0", 0},
    {"0.000001", 1e-6},
    {"000000000000000000000000000000000000001", 1},
    {"0.00000000000000000000000000000000000001", 1e-38},
    {"7Ei", 8070450532247928832.0},
    {"9223372036854775", 9223372036854775.0},
    /* Too small for a double: zero, which callers refuse as "greater than 0". */
    {"1e-400", 0},
    {"1e-99999999999999999999", 0},
    {"0e99999999999999999999", 0},
    {"0.0Ei", 0},
};

static void test_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        double v = -12345;
        if (parse(good[i].text, &v) != TY_OK)
            fail_msg("%s: refused", good[i].text);
        if (v != good[i].value && fabs(v - good[i].value) > fabs(good[i].value) * 1e-15)
            fail_msg("%s: got %.17g, want %.17g", good[i].text, v, good[i].value);
    }
}

/* Not quantities: TY_EINVAL, the output untouched. */
static void test_not_quantities(void **state)
{
    (void)state;
    static const char *const bad[] = {"",    "two", "1 Gi", "2GB", "1e",  "1e+", "Gi",  ".",
                                      "+",   "-",   "1.2.3", "1ee3", "1e3Gi", "1Gi1", "0x10",
                                      "inf", "nan", "1mm", "1Mi ", " 1",  "1e1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v = 42;
        int64_t n = 42;
        if (parse(bad[i], &v) != TY_EINVAL)
            fail_msg("\"%s\" accepted as a quantity", bad[i]);
        assert_true(v == 42);
        assert_int_equal(ty_quantity_scaled(bad[i], strlen(bad[i]), 0, &n), TY_EINVAL);
        assert_int_equal(n, 42);
    }
    double v;
    assert_int_equal(ty_quantity_parse(NULL, 0, &v), TY_EINVAL);
    /* The length is authoritative: "12" read as "1". */
    assert_int_equal(ty_quantity_parse("12", 1, &v), TY_OK);
    assert_true(v == 1);
}

/* Magnitudes of 2^63 and more are TY_ETOOLARGE, never infinite, wrapped or negative. */
static void test_too_large(void **state)
{
    (void)state;
    static const char *const huge[] = {
        "64Ei",  "8Ei", "1e308", "9e308", "1e400", "-1e400", "9223372036854775808",
        "9223372036854775807", "1e19",  "10E",   "1e99999999999999999999999",
        "99999999999999999999999999999999999999999999999999999999999999999999999999999"
        "99999999999999999999999999999999999999999999999999999999999999999999999999999"
        "99999999999999999999999999999999999999999999999999999999999999999999999999999"
        "99999999999999999999999999999999999999999999999999999999999999999999999999999",
        "1000000000000000000000000000000000Ki",
    };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        double v = 42;
        if (parse(huge[i], &v) != TY_ETOOLARGE)
            fail_msg("%.40s: want TY_ETOOLARGE, got %.17g", huge[i], v);
        assert_true(v == 42);
    }
    /* Just below the limit is a value, and it converts to an int64 without overflow. */
    double v = 0;
    assert_int_equal(parse("9223372036854774784", &v), TY_OK);
    assert_true(v < TY_QUANTITY_LIMIT && (long long)v > 0);
    assert_int_equal(parse("-9223372036854774784", &v), TY_OK);
    assert_true(v < 0 && (long long)v < 0);
}

static const struct {
    const char *text;
    int scale;
    int64_t want;
} scaled[] = {
    {"1", 3, 1000},
    {"500m", 3, 500},
    {"1.1", 3, 1100}, /* exact: no 1101 from a double's 1.1000000000000001 */
    {"0.1", 3, 100},
    {"2.5", 3, 2500},
    {"0.0001", 3, 1}, /* rounded up to 1m, as Kubernetes does */
    {"0.000001", 3, 1},
    {"1e-400", 3, 1},
    {"0.0000000000000000000000000000000000000000000000001", 3, 1},
    {"1.0001", 3, 1001},
    {"0", 3, 0},
    {"0m", 3, 0},
    {"2Gi", 0, 2147483648},
    {"1.5Gi", 0, 1610612736},
    {"0.5", 0, 1}, /* half a byte is a byte */
    {"1e3", 0, 1000},
    {"7Ei", 0, INT64_C(8070450532247928832)},
    {"9223372036854775807", 0, INT64_MAX},
    {"9223372036854775807000m", 0, INT64_MAX},
    {"-9223372036854775807", 0, -INT64_MAX},
    {"9223372036854775", 3, INT64_C(9223372036854775000)},
    {"10000000000000000000000000000001e-20", 0, INT64_C(100000000000) + 1},
    {"123456789012345678901234567890e-20", 0, INT64_C(1234567891)}, /* digits past 19 round up */
};

static void test_scaled(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof scaled / sizeof scaled[0]; i++) {
        int64_t n = 42;
        ty_err e = ty_quantity_scaled(scaled[i].text, strlen(scaled[i].text), scaled[i].scale, &n);
        if (e != TY_OK || n != scaled[i].want)
            fail_msg("%s x 10^%d: got %d, %lld; want %lld", scaled[i].text, scaled[i].scale, e,
                     (long long)n, (long long)scaled[i].want);
    }
}

static void test_scaled_too_large(void **state)
{
    (void)state;
    static const char *const huge[] = {"64Ei", "8Ei", "9223372036854775808", "1e19",
                                       "1e308", "1e99999999999999", "9223372036854776",
                                       "16Ei"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        int64_t n = 42;
        int scale = i == 6 ? 3 : 0;
        if (ty_quantity_scaled(huge[i], strlen(huge[i]), scale, &n) != TY_ETOOLARGE)
            fail_msg("%s x 10^%d: want TY_ETOOLARGE, got %lld", huge[i], scale, (long long)n);
        assert_int_equal(n, 42);
    }
    int64_t n;
    assert_int_equal(ty_quantity_scaled("1", 1, 3, &n), TY_OK);
    assert_int_equal(ty_quantity_scaled("1", 1, -1, &n), TY_EINVAL);
    assert_int_equal(ty_quantity_scaled("1", 1, 19, &n), TY_EINVAL);
    /* The largest scale: 9.2 x 10^18 fits, 10 x 10^18 does not. */
    assert_int_equal(ty_quantity_scaled("9.2", 3, 18, &n), TY_OK);
    assert_int_equal(n, INT64_C(9200000000000000000));
    assert_int_equal(ty_quantity_scaled("10", 2, 18, &n), TY_ETOOLARGE);
}

/* Amounts as a person reads them: whole units where they are whole, two decimals rounded down
 * and without trailing zeros otherwise. */
static void test_format(void **state)
{
    (void)state;
    static const struct {
        int64_t millis;
        const char *cpus;
    } cpus[] = {{0, "0"}, {2000, "2"}, {2500, "2.5"}, {125, "0.125"}, {1001, "1.001"}};
    static const struct {
        int64_t bytes;
        const char *text;
    } mem[] = {{512, "512"},
               {(int64_t)4 << 40, "4Ti"},
               {(int64_t)3 << 29, "1.5Gi"},
               {(int64_t)8234567890, "7.66Gi"},
               {INT64_MAX, "7.99Ei"}};
    char buf[32];
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
        ty_quantity_format_millis(cpus[i].millis, buf, sizeof buf);
        assert_string_equal(buf, cpus[i].cpus);
    }
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) {
        ty_quantity_format_bytes(mem[i].bytes, buf, sizeof buf);
        assert_string_equal(buf, mem[i].text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),        cmocka_unit_test(test_not_quantities),
        cmocka_unit_test(test_too_large),     cmocka_unit_test(test_scaled),
        cmocka_unit_test(test_scaled_too_large), cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
