/* Unit tests for common/ty_json.c: compact JSON text, byte for byte jansson's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/ty_json.h"

/* ty_json_write writes what json_dumps(JSON_COMPACT) writes. */
static void test_writer_matches_jansson(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{}",
        "[]",
        "{\"a\":[1,-2,9223372036854775807,-9223372036854775808],\"b\":{\"c\":null,\"d\":true,"
        "\"e\":false},\"f\":[[],{}]}",
        "[\"quote\\\" backslash\\\\ slash/ nl\\n cr\\r tab\\t bs\\b ff\\f\"]",
        "[\"\\u0001\\u001f\\u007f \\u00e9 \\u2028 \\ud83d\\ude00\"]",
        "{\"k\\\"ey\\n\":\"v\",\"\\u00e9\":1}",
        "[1.5,-0.25,1e300,3.0]",
        "\"top-level string\"",
        "42",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        json_t *j = json_loads(docs[i], JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        char *want = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        ty_buf b = {0};
        assert_int_equal(ty_json_write(&b, j), TY_OK);
        if (strcmp(b.data, want) != 0)
            fail_msg("doc %zu\n  jansson %s\n  ours    %s", i, want, b.data);
        free(want);
        ty_buf_free(&b);
        json_decref(j);
    }

    /* Nesting past the limit is refused, not recursed into. */
    json_t *deep = json_array();
    for (int i = 0; i < 200; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, deep);
        deep = outer;
    }
    ty_buf b = {0};
    assert_int_equal(ty_json_write(&b, deep), TY_EINVAL);
    ty_buf_free(&b);
    json_decref(deep);
}

static const struct {
    const char *in;
    size_t max;
    const char *out;
} string_cases[] = {
    {"plain", SIZE_MAX, "\"plain\""},
    {"a\"b\\c", SIZE_MAX, "\"a\\\"b\\\\c\""},
    {"\x01\x1f", SIZE_MAX, "\"\\u0001\\u001F\""},
    {"caf\xc3\xa9", SIZE_MAX, "\"caf\xc3\xa9\""},
    /* invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate */
    {"x\x80y", SIZE_MAX, "\"x\\uFFFDy\""},
    {"\xc0\xaf", SIZE_MAX, "\"\\uFFFD\\uFFFD\""},
    {"\xed\xa0\x80", SIZE_MAX, "\"\\uFFFD\\uFFFD\\uFFFD\""},
    /* truncated to max bytes, even inside a multi-byte character */
    {"abcdef", 3, "\"abc\""},
    {"\xc3\xa9", 1, "\"\\uFFFD\""},
};

static void test_put_string_escapes_and_repairs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof string_cases / sizeof string_cases[0]; i++) {
        ty_buf b = {0};
        assert_int_equal(ty_json_put_string(&b, string_cases[i].in, string_cases[i].max), TY_OK);
        if (strcmp(b.data, string_cases[i].out) != 0)
            fail_msg("case %zu: want %s got %s", i, string_cases[i].out, b.data);
        /* whatever the input, the output parses as JSON */
        json_t *j = json_loads(b.data, JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        json_decref(j);
        ty_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_matches_jansson),
        cmocka_unit_test(test_put_string_escapes_and_repairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
