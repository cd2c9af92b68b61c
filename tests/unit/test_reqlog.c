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

/* Repeated refusals: at most one 401 or 429 line a second per route and status, the next one
 * written with the count left out; other statuses always. Explicit monotonic times. */
static const struct {
    const char *route;
    unsigned status;
    long long t;
    int due;
    unsigned long long suppressed;
} quiet_steps[] = {
    {"/v1/hooks/{id}", 401, 1000, 1, 0},
    {"/v1/hooks/{id}", 401, 1001, 0, 0},
    {"/v1/hooks/{id}", 401, 1500, 0, 0},
    {"/v1/hooks/{id}", 429, 1500, 1, 0},  /* another status: its own line */
    {"/v1/jobs", 401, 1500, 1, 0},        /* another route */
    {"/v1/hooks/{id}", 201, 1500, 1, 0},  /* not a refusal: never left out */
    {"/v1/hooks/{id}", 201, 1500, 1, 0},
    {"/v1/hooks/{id}", 401, 1999, 0, 0},
    {"/v1/hooks/{id}", 401, 2000, 1, 3},  /* a second later, with the 3 left out */
    {"/v1/hooks/{id}", 401, 2100, 0, 0},
    {"/v1/hooks/{id}", 401, 9000, 1, 1},
};

static void test_repeated_refusals_are_quiet(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof quiet_steps / sizeof quiet_steps[0]; i++) {
        unsigned long long n = 99;
        int due = reqlog_quiet_due(quiet_steps[i].route, quiet_steps[i].status, quiet_steps[i].t,
                                   &n);
        if (due != quiet_steps[i].due || (due && n != quiet_steps[i].suppressed))
            fail_msg("step %zu: due %d suppressed %llu", i, due, n);
    }
    char buf[2048];
    reqlog_entry e = {.request_id = "r", .method = "POST", .path = "/v1/hooks/gh",
                      .route = "/v1/hooks/{id}", .status = 429, .suppressed = 41};
    json_t *j = format_and_parse(&e, buf, sizeof buf);
    assert_int_equal(json_integer_value(json_object_get(j, "suppressed")), 41);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_paths_are_escaped),
        cmocka_unit_test(test_long_path_is_cut),
        cmocka_unit_test(test_repeated_refusals_are_quiet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
