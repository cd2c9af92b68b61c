/*
 * test_api_request.c - api/request.c: the checks every handler with a body
 * makes (media type, size, JSON syntax) and the Idempotency-Key header.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "api/api_int.h"

static const char *problem_code(const api_resp *r)
{
    static char code[64];
    json_t *p = json_loadb(r->body, r->body_len, 0, NULL);
    snprintf(code, sizeof code, "%s", p ? json_string_value(json_object_get(p, "code")) : "");
    json_decref(p);
    return code;
}

static void test_media_types(void **state)
{
    (void)state;
    static const struct {
        const char *ct;
        bool ok;
    } cases[] = {
        {"application/json", true},
        {"application/json; charset=utf-8", true},
        {"APPLICATION/JSON", true},
        {" application/json ;charset=utf-8", true},
        {"application/json;", true},
        {NULL, false},
        {"", false},
        {"application/jsonp", false},
        {"application/problem+json", false},
        {"text/json", false},
        {"application/ json", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_req req = {.content_type = cases[i].ct};
        api_resp r = {0};
        bool ok = api_need_json_content(&req, &r);
        if (ok != cases[i].ok)
            fail_msg("\"%s\": got %d", cases[i].ct ? cases[i].ct : "(null)", ok);
        if (!ok) {
            assert_int_equal(r.status, 415);
            assert_string_equal(problem_code(&r), "unsupported-media-type");
        }
        api_resp_free(&r);
    }
}

static void test_body_size(void **state)
{
    (void)state;
    api_ctx ctx = {.max_body = 10};
    api_req req = {.ctx = &ctx, .body = "0123456789", .body_len = 10};
    api_resp r = {0};
    assert_true(api_need_body_size(&req, &r));
    req.body_len = 11;
    assert_false(api_need_body_size(&req, &r));
    assert_int_equal(r.status, 413);
    assert_string_equal(problem_code(&r), "body-too-large");
    api_resp_free(&r);
    /* max_body 0 means the default (1 MiB). */
    ctx.max_body = 0;
    req.body_len = API_DEFAULT_MAX_BODY;
    assert_true(api_need_body_size(&req, &r));
    req.body_len = API_DEFAULT_MAX_BODY + 1;
    assert_false(api_need_body_size(&req, &r));
    api_resp_free(&r);
}

static void test_json_body(void **state)
{
    (void)state;
    api_ctx ctx = {.max_body = 1024};
    api_req req = {
        .ctx = &ctx, .content_type = "application/json", .body = "{\"a\":[1]}", .body_len = 9};
    api_resp r = {0};
    json_t *j = NULL;
    assert_true(api_need_json_body(&req, &r, &j));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "a"), 0)), 1);
    json_decref(j);

    req.body = "{\"a\":[1}";
    req.body_len = 8;
    assert_false(api_need_json_body(&req, &r, &j));
    assert_int_equal(r.status, 400);
    json_t *p = json_loadb(r.body, r.body_len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(p, "code")), "malformed-json");
    json_t *e0 = json_array_get(json_object_get(p, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(e0, "path")), "$");
    assert_non_null(strstr(json_string_value(json_object_get(e0, "message")), "column 8"));
    json_decref(p);
    api_resp_free(&r);

    /* The media type is checked first, then the size. */
    req.content_type = "text/plain";
    req.body_len = 5000;
    assert_false(api_need_json_body(&req, &r, &j));
    assert_int_equal(r.status, 415);
    req.content_type = "application/json";
    assert_false(api_need_json_body(&req, &r, &j));
    assert_int_equal(r.status, 413);
    api_resp_free(&r);
}

static void test_idempotency_key(void **state)
{
    (void)state;
    char k255[256], k256[257];
    memset(k255, '~', 255);
    k255[255] = '\0';
    memset(k256, 'a', 256);
    k256[256] = '\0';
    static const char *const good[] = {"a", "550e8400-e29b-41d4-a716-446655440000", "with space",
                                       "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"};
    const char *bad[] = {"", k256, "tab\t", "nl\n", "del\x7f", "utf8-\xc3\xa9"};
    api_resp r = {0};
    const char *key;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        api_req req = {.idempotency_key = good[i]};
        assert_true(api_need_idempotency_key(&req, &r, &key));
        assert_ptr_equal(key, good[i]);
    }
    api_req req = {.idempotency_key = k255};
    assert_true(api_need_idempotency_key(&req, &r, &key));
    req.idempotency_key = NULL;
    assert_true(api_need_idempotency_key(&req, &r, &key));
    assert_null(key);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        req.idempotency_key = bad[i];
        assert_false(api_need_idempotency_key(&req, &r, &key));
        assert_int_equal(r.status, 400);
        assert_string_equal(problem_code(&r), "invalid-idempotency-key");
        api_resp_free(&r);
    }
}

static void test_principal_name(void **state)
{
    (void)state;
    api_principal p = {.name = "ci", .scopes = STORE_SCOPE_READ};
    api_req req = {.principal = &p};
    assert_string_equal(api_principal_name(&req), "ci");
    req.principal = NULL;
    assert_string_equal(api_principal_name(&req), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_media_types),    cmocka_unit_test(test_body_size),
        cmocka_unit_test(test_json_body),      cmocka_unit_test(test_idempotency_key),
        cmocka_unit_test(test_principal_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
