/* Unit tests for common/ty_buf.c: the capped buffer that guards every input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/ty_buf.h"

static void test_append_grows_and_terminates(void **state)
{
    (void)state;
    ty_buf b;
    ty_buf_init(&b, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ty_buf_append(&b, "abc", 3), TY_OK);
    assert_int_equal(b.len, 3000);
    assert_int_equal(b.data[3000], '\0');
    assert_memory_equal(b.data + 2997, "abc", 3);
    ty_buf_free(&b);
}

static void test_cap_is_enforced_and_nothing_appended(void **state)
{
    (void)state;
    ty_buf b;
    ty_buf_init(&b, 10);
    assert_int_equal(ty_buf_append(&b, "0123456789", 10), TY_OK);
    assert_int_equal(ty_buf_append(&b, "x", 1), TY_ETOOLARGE);
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "0123456789");
    /* a huge length must not wrap around the check */
    assert_int_equal(ty_buf_append(&b, "x", SIZE_MAX), TY_ETOOLARGE);
    ty_buf_free(&b);
}

static void test_printf_long_and_short(void **state)
{
    (void)state;
    ty_buf b = {0};
    assert_int_equal(ty_buf_printf(&b, "%d-%s", 42, "x"), TY_OK);
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(ty_buf_printf(&b, "[%s]", big), TY_OK);
    assert_int_equal(b.len, 4 + 1001);
    assert_memory_equal(b.data, "42-x[zz", 7);
    assert_int_equal(b.data[b.len - 1], ']');
    ty_buf_free(&b);
}

static void test_binary_data_with_nul(void **state)
{
    (void)state;
    ty_buf b = {0};
    assert_int_equal(ty_buf_append(&b, "a\0b", 3), TY_OK);
    assert_int_equal(b.len, 3);
    char *p;
    size_t n;
    assert_int_equal(ty_buf_steal(&b, &p, &n), TY_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "a\0b", 3);
    assert_null(b.data);
    free(p);
}

static void test_steal_empty_gives_empty_string(void **state)
{
    (void)state;
    ty_buf b = {0};
    char *p = NULL;
    assert_int_equal(ty_buf_steal(&b, &p, NULL), TY_OK);
    assert_non_null(p);
    assert_string_equal(p, "");
    free(p);
    ty_buf_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_grows_and_terminates),
        cmocka_unit_test(test_cap_is_enforced_and_nothing_appended),
        cmocka_unit_test(test_printf_long_and_short),
        cmocka_unit_test(test_binary_data_with_nul),
        cmocka_unit_test(test_steal_empty_gives_empty_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
