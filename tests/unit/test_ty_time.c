/* Unit tests for common/ty_time.c: RFC 3339 as the API shows and accepts it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/ty_time.h"

static const struct {
    const char *text;
    int ok;
    int64_t ms;
} parse_cases[] = {
    {"1970-01-01T00:00:00Z", 1, 0},
    {"1970-01-01T00:00:00.001Z", 1, 1},
    {"2026-11-22T10:00:00.123Z", 1, 1795341600123},
    {"2026-11-22T10:00:00.1234567Z", 1, 1795341600123},
    {"2026-11-22T11:00:00+01:00", 1, 1795341600000},
    {"2026-11-22t10:00:00z", 1, 1795341600000},
    {"2000-02-29T00:00:00Z", 1, 951782400000},
    {"1969-12-31T23:59:59Z", 1, -1000},
    {"2026-11-22", 0, 0},
    {"2026-13-01T00:00:00Z", 0, 0},
    {"2026-11-22T10:00:00", 0, 0},
    {"2026-11-22T10:00:00.Z", 0, 0},
    {"2026-11-22T10:00:00Zjunk", 0, 0},
    {"", 0, 0},
    {"yesterday", 0, 0},
};

static void test_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        int64_t ms = 0;
        int rc = ty_time_parse_rfc3339(parse_cases[i].text, &ms);
        if (parse_cases[i].ok) {
            assert_int_equal(rc, 0);
            assert_int_equal(ms, parse_cases[i].ms);
        } else {
            assert_int_equal(rc, -1);
        }
    }
}

static void test_format_round_trips(void **state)
{
    (void)state;
    const int64_t values[] = {0, 1, 999, 1795341600123, -1000, 253402300799999};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char buf[32];
        ty_time_format_rfc3339(values[i], buf, sizeof buf);
        int64_t back = 0;
        assert_int_equal(ty_time_parse_rfc3339(buf, &back), 0);
        assert_int_equal(back, values[i]);
    }
    char buf[32];
    assert_string_equal(ty_time_format_rfc3339(1795341600123, buf, sizeof buf),
                        "2026-11-22T10:00:00.123Z");
}

static void test_clocks_move_forward(void **state)
{
    (void)state;
    uint64_t a = ty_time_mono_ns(), b = ty_time_mono_ns();
    assert_true(b >= a);
    assert_true(ty_time_now_ms() > 1700000000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),
        cmocka_unit_test(test_format_round_trips),
        cmocka_unit_test(test_clocks_move_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
