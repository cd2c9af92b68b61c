/*
 * test_api_resp.c - api/resp.c: response bodies, problem documents, headers
 * and the ty_err -> HTTP status table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_int.h"

static json_t *body_json(const api_resp *r)
{
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, 0, &e);
    if (!j)
        fail_msg("not JSON: %s", e.text);
    return j;
}

static void test_reply_json(void **state)
{
    (void)state;
    api_resp r = {0};
    api_reply_json(&r, 201, json_pack("{s:i, s:[s]}", "a", 1, "b", "x"));
    assert_int_equal(r.status, 201);
    assert_string_equal(r.content_type, "application/json");
    assert_string_equal(r.body, "{\"a\":1,\"b\":[\"x\"]}");
    assert_int_equal(r.body_len, strlen(r.body));
    /* A second reply replaces the first (no leak, no stale body). */
    api_reply_json(&r, 200, json_pack("{}"));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{}");
    api_resp_free(&r);
    api_resp_free(&r); /* idempotent */
    api_resp_free(NULL);

    /* No JSON (allocation failed upstream): a 503 problem, never a crash. */
    api_reply_json(&r, 200, NULL);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.content_type, "application/problem+json");
    json_t *p = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(p, "code")), "out-of-memory");
    json_decref(p);
    api_resp_free(&r);
}

static void test_reply_text_keeps_bytes(void **state)
{
    (void)state;
    api_resp r = {0};
    api_reply_text(&r, 200, "application/octet-stream", "a\0b", 3);
    assert_int_equal(r.body_len, 3);
    assert_memory_equal(r.body, "a\0b", 4);
    assert_string_equal(r.content_type, "application/octet-stream");
    api_reply_text(&r, 200, "text/plain", "", 0);
    assert_int_equal(r.body_len, 0);
    assert_string_equal(r.body, "");
    api_resp_free(&r);
}

static void test_problem(void **state)
{
    (void)state;
    api_resp r = {0};
    api_reply_problem(&r, 422, "invalid-spec", NULL, "2 errors",
                      json_pack("[{s:s, s:s}]", "path", "$.name", "message", "is required"));
    assert_int_equal(r.status, 422);
    assert_string_equal(r.content_type, "application/problem+json");
    json_t *p = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(p, "type")),
                        "urn:trainyard:problem:invalid-spec");
    assert_string_equal(json_string_value(json_object_get(p, "title")), "Unprocessable Content");
    assert_int_equal(json_integer_value(json_object_get(p, "status")), 422);
    assert_string_equal(json_string_value(json_object_get(p, "detail")), "2 errors");
    assert_string_equal(json_string_value(json_object_get(p, "code")), "invalid-spec");
    assert_int_equal(json_array_size(json_object_get(p, "errors")), 1);
    json_decref(p);

    /* No detail, no errors: the members are absent; a title is kept. */
    api_reply_problem(&r, 404, "job-not-found", "No such job", NULL, NULL);
    p = body_json(&r);
    assert_null(json_object_get(p, "detail"));
    assert_null(json_object_get(p, "errors"));
    assert_string_equal(json_string_value(json_object_get(p, "title")), "No such job");
    json_decref(p);
    api_resp_free(&r);
}

static void test_headers(void **state)
{
    (void)state;
    api_resp r = {0};
    api_resp_header(&r, "Location", "/v1/jobs/x");
    api_resp_header(&r, "X-Bad", "a\r\nSet-Cookie: x"); /* header injection: dropped */
    assert_int_equal(r.nheaders, 1);
    assert_string_equal(r.headers[0].key, "Location");
    assert_string_equal(r.headers[0].value, "/v1/jobs/x");
    api_resp_free(&r);
    assert_int_equal(r.nheaders, 0);
}

static void test_status_table(void **state)
{
    (void)state;
    static const struct {
        ty_err e;
        unsigned status;
    } cases[] = {
        {TY_EINVAL, 400},    {TY_EAUTH, 401},     {TY_EFORBIDDEN, 403}, {TY_ENOTFOUND, 404},
        {TY_ECONFLICT, 409}, {TY_EEXISTS, 409},   {TY_ETOOLARGE, 413},  {TY_EINTERNAL, 500},
        {TY_EIO, 500},       {TY_ESCHEMA, 500},   {TY_ENOMEM, 503},     {TY_EBUSY, 503},
        {TY_ESHUTDOWN, 503}, {TY_ERR_COUNT, 500}, {(ty_err)-1, 500},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(api_http_status(cases[i].e), cases[i].status);

    /* Every error becomes a problem with the same status; 503s say when to retry. */
    for (int e = 1; e < TY_ERR_COUNT; e++) {
        api_resp r = {0};
        api_reply_error(&r, (ty_err)e, NULL);
        assert_int_equal(r.status, api_http_status((ty_err)e));
        json_t *p = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(p, "detail")),
                            ty_strerror((ty_err)e));
        if (r.status == 503) {
            assert_int_equal(r.nheaders, 1);
            assert_string_equal(r.headers[0].key, "Retry-After");
        }
        json_decref(p);
        api_resp_free(&r);
    }
}

/* A reply whose JSON cannot be written (nested too deep) is a 503, not a crash. */
static void test_reply_json_too_deep(void **state)
{
    (void)state;
    json_t *deep = json_array();
    for (int i = 0; i < 200; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, deep);
        deep = outer;
    }
    api_resp r = {0};
    api_reply_json(&r, 200, deep);
    assert_int_equal(r.status, 503);
    api_resp_free(&r);
}

static long never_read(void *ud, char *buf, size_t max)
{
    (void)ud;
    (void)buf;
    (void)max;
    fail_msg("an unsent stream was read");
    return -1;
}

static void count_free(void *ud)
{
    (*(int *)ud)++;
}

/* A stream the server never took is freed exactly once by whatever replaces or frees it. */
static void test_stream_ownership(void **state)
{
    (void)state;
    int freed = 0;
    api_stream s = {.read = never_read, .free = count_free, .ud = &freed};
    api_resp r = {0};
    api_reply_text(&r, 200, "text/plain", "x", 1);
    api_reply_stream(&r, 200, "text/plain; charset=utf-8", s);
    assert_null(r.body); /* the stream replaces the body */
    assert_int_equal(r.body_len, 0);
    assert_string_equal(r.content_type, "text/plain; charset=utf-8");
    assert_ptr_equal(r.stream.ud, &freed);
    api_resp_free(&r);
    assert_int_equal(freed, 1);
    assert_null(r.stream.read);
    api_resp_free(&r);
    assert_int_equal(freed, 1);

    /* A reply after the stream (say, an error found late) frees it and wins. */
    api_reply_stream(&r, 200, "text/plain", s);
    api_reply_problem(&r, 404, "log-not-found", NULL, "gone", NULL);
    assert_int_equal(freed, 2);
    assert_null(r.stream.read);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "log-not-found"));
    api_resp_free(&r);
    assert_int_equal(freed, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_json),       cmocka_unit_test(test_reply_text_keeps_bytes),
        cmocka_unit_test(test_problem),          cmocka_unit_test(test_headers),
        cmocka_unit_test(test_status_table),     cmocka_unit_test(test_reply_json_too_deep),
        cmocka_unit_test(test_stream_ownership),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
