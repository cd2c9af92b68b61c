/*
 * test_reqlog.c - the request log line: valid JSON of the documented shape,
 * whatever bytes the path holds.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/reqlog.h"

/* 2026-11-22T10:00:00.123Z */
#define NOW_MS 1795341600123LL

static json_t *format_and_parse(const reqlog_entry *e, char *buf, size_t len)
{
    size_t n = reqlog_format(e, NOW_MS, buf, len);
    assert_true(n > 0);
    assert_int_equal(strlen(buf), n);
    assert_int_equal(buf[n - 1], '\n');
    assert_null(memchr(buf, '\n', n - 1)); /* one line */
    json_error_t err;
    json_t *j = json_loadb(buf, n, 0, &err);
    if (!j)
        print_message("not JSON (%s): %s", err.text, buf);
    assert_non_null(j);
    return j;
}

static void test_shape(void **state)
{
    (void)state;
    char buf[4096];
    reqlog_entry e = {.request_id = "r-1", .method = "POST", .path = "/v1/jobs",
                      .route = "/v1/jobs", .status = 201, .duration_ms = 1.23456, .bytes = 541,
                      .principal = "ci"};
    json_t *j = format_and_parse(&e, buf, sizeof buf);
    const char *head =
        "{\"ts\":\"2026-11-22T10:00:00.123Z\",\"level\":\"info\",\"msg\":\"request\",";
    if (strncmp(buf, head, strlen(head)) != 0)
        print_message("%s", buf);
    assert_int_equal(strncmp(buf, head, strlen(head)), 0);
    assert_string_equal(json_string_value(json_object_get(j, "request_id")), "r-1");
    assert_string_equal(json_string_value(json_object_get(j, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(j, "path")), "/v1/jobs");
    assert_string_equal(json_string_value(json_object_get(j, "route")), "/v1/jobs");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
    assert_true(json_real_value(json_object_get(j, "duration_ms")) == 1.235);
    assert_int_equal(json_integer_value(json_object_get(j, "bytes")), 541);
    assert_string_equal(json_string_value(json_object_get(j, "principal")), "ci");
    assert_null(json_object_get(j, "aborted"));
    json_decref(j);

    e.principal = NULL;
    e.aborted = 1;
    j = format_and_parse(&e, buf, sizeof buf);
    assert_true(json_is_null(json_object_get(j, "principal")));
    assert_true(json_is_true(json_object_get(j, "aborted")));
    json_decref(j);
}

static void test_paths_are_escaped(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        const char *want; /* the decoded JSON string */
    } cases[] = {
        {"/a\"b\\c", "/a\"b\\c"},
        {"/tab\there\nnl\x01", "/tab\there\nnl\x01"},
        {"/caf\xc3\xa9", "/caf\xc3\xa9"},             /* valid UTF-8 kept */
        {"/\xf0\x9f\x9a\x82", "/\xf0\x9f\x9a\x82"},   /* 4-byte sequence kept */
        {"/bad\xff", "/bad\xef\xbf\xbd"},             /* invalid byte -> U+FFFD */
        {"/cut\xc3", "/cut\xef\xbf\xbd"},             /* truncated sequence */
        {"/over\xc0\xaf", "/over\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong */
        {"/sur\xed\xa0\x80", "/sur\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reqlog_entry e = {.request_id = "r", .method = "GET", .path = cases[i].path,
                          .route = "unmatched", .status = 404};
        json_t *j = format_and_parse(&e, buf, sizeof buf);
        assert_string_equal(json_string_value(json_object_get(j, "path")), cases[i].want);
        json_decref(j);
    }
}

static void test_long_path_is_cut(void **state)
{
    (void)state;
    static char path[REQLOG_MAX_PATH * 3], buf[REQLOG_MAX_PATH * 8];
    memset(path, 'p', sizeof path - 1);
    reqlog_entry e = {.request_id = "r", .method = "GET", .path = path, .route = "unmatched",
                      .status = 404};
    json_t *j = format_and_parse(&e, buf, sizeof buf);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "path"))), REQLOG_MAX_PATH);
    json_decref(j);
    /* A buffer too small gives nothing rather than half a line. */
    assert_int_equal(reqlog_format(&e, NOW_MS, buf, 100), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_paths_are_escaped),
        cmocka_unit_test(test_long_path_is_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
