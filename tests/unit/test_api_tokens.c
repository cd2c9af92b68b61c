/*
 * test_api_tokens.c - api/tokens.c: /v1/tokens against a real store; every
 * response checked against openapi.yaml by the fixture.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "api/tokens.h"
#include "common/ty_crypto.h"
#include "tests/unit/test_api_fixture.h"

static json_t *create(fixture *f, const char *body, api_resp *resp)
{
    return fx_call(f, "POST", "/v1/tokens", &(fx_req){.body = body}, resp);
}

static json_t *find_token(json_t *list, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(list, "tokens"), i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return t;
    }
    return NULL;
}

static void test_create_list_revoke(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *t = create(f, "{\"name\":\"ci\",\"scopes\":[\"submit\",\"read\"]}", &resp);
    assert_int_equal(resp.status, 201);
    const char *secret = json_string_value(json_object_get(t, "token"));
    assert_int_equal(strlen(secret), 46);
    assert_memory_equal(secret, "ty_", 3);
    /* Scopes come back in one canonical order. */
    json_t *scopes = json_object_get(t, "scopes");
    assert_int_equal(json_array_size(scopes), 2);
    assert_string_equal(json_string_value(json_array_get(scopes, 0)), "read");
    assert_string_equal(json_string_value(json_array_get(scopes, 1)), "submit");
    api_resp_free(&resp);

    /* The store has only the SHA-256 of the secret. */
    store_token *tokens = NULL;
    size_t n = 0;
    assert_int_equal(store_tokens_list(f->store, &tokens, &n), TY_OK);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tokens[i].name, "ci") != 0)
            continue;
        unsigned char h[TY_SHA256_LEN];
        ty_sha256(secret, strlen(secret), h);
        assert_memory_equal(tokens[i].hash, h, sizeof h);
        assert_int_equal(tokens[i].scopes, STORE_SCOPE_READ | STORE_SCOPE_SUBMIT);
        found = 1;
    }
    assert_true(found);
    store_tokens_free(tokens, n);

    /* The listing shows it without any secret. */
    json_t *list = fx_call(f, "GET", "/v1/tokens", NULL, &resp);
    assert_int_equal(resp.status, 200);
    json_t *ci = find_token(list, "ci");
    assert_non_null(ci);
    assert_null(json_object_get(ci, "token"));
    assert_null(json_object_get(ci, "revoked_at"));
    assert_string_equal(json_string_value(json_object_get(ci, "created_at")),
                        json_string_value(json_object_get(t, "created_at")));
    assert_null(strstr(resp.body, secret));
    json_decref(list);
    api_resp_free(&resp);

    /* Same name again: 409. */
    json_t *p = create(f, "{\"name\":\"ci\",\"scopes\":[\"read\"]}", &resp);
    fx_expect_problem(&resp, p, 409, "token-exists");
    json_decref(p);
    api_resp_free(&resp);

    /* Revoke: 204 without a body, then it shows revoked_at; again: 404. */
    p = fx_call(f, "DELETE", "/v1/tokens/{id}", &(fx_req){.id = "ci"}, &resp);
    assert_int_equal(resp.status, 204);
    assert_null(resp.body);
    api_resp_free(&resp);
    list = fx_call(f, "GET", "/v1/tokens", NULL, &resp);
    assert_non_null(json_object_get(find_token(list, "ci"), "revoked_at"));
    json_decref(list);
    api_resp_free(&resp);
    p = fx_call(f, "DELETE", "/v1/tokens/{id}", &(fx_req){.id = "ci"}, &resp);
    fx_expect_problem(&resp, p, 404, "token-not-found");
    json_decref(p);
    api_resp_free(&resp);
    p = fx_call(f, "DELETE", "/v1/tokens/{id}", &(fx_req){.id = "nobody"}, &resp);
    fx_expect_problem(&resp, p, 404, "token-not-found");
    json_decref(p);
    api_resp_free(&resp);

    /* A revoked name is not reused. */
    p = create(f, "{\"name\":\"ci\",\"scopes\":[\"read\"]}", &resp);
    fx_expect_problem(&resp, p, 409, "token-exists");
    json_decref(p);
    api_resp_free(&resp);
    json_decref(t);
}

static void test_invalid_requests(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *body;
        const char *path;
    } cases[] = {
        {"[]", "$"},
        {"{\"scopes\":[\"read\"]}", "$.name"},
        {"{\"name\":null,\"scopes\":[\"read\"]}", "$.name"},
        {"{\"name\":5,\"scopes\":[\"read\"]}", "$.name"},
        {"{\"name\":\"has space\",\"scopes\":[\"read\"]}", "$.name"},
        {"{\"name\":\"-x\",\"scopes\":[\"read\"]}", "$.name"},
        {"{\"name\":\"x\"}", "$.scopes"},
        {"{\"name\":\"x\",\"scopes\":\"read\"}", "$.scopes"},
        {"{\"name\":\"x\",\"scopes\":[]}", "$.scopes"},
        {"{\"name\":\"x\",\"scopes\":[\"root\"]}", "$.scopes[0]"},
        {"{\"name\":\"x\",\"scopes\":[\"read\",7]}", "$.scopes[1]"},
        {"{\"name\":\"x\",\"scopes\":[\"read\",\"read\"]}", "$.scopes[1]"},
        {"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":5}", "$.ttl"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        json_t *p = create(f, cases[i].body, &resp);
        fx_expect_problem(&resp, p, 422, "invalid-request");
        const char *path = json_string_value(
            json_object_get(json_array_get(json_object_get(p, "errors"), 0), "path"));
        if (!path || strcmp(path, cases[i].path) != 0)
            fail_msg("%s: path %s, want %s", cases[i].body, path ? path : "-", cases[i].path);
        json_decref(p);
        api_resp_free(&resp);
    }

    api_resp resp;
    json_t *p = create(f, "{\"name\":", &resp);
    fx_expect_problem(&resp, p, 400, "malformed-json");
    json_decref(p);
    api_resp_free(&resp);
    p = fx_call(
        f, "POST", "/v1/tokens",
        &(fx_req){.body = "{\"name\":\"x\",\"scopes\":[\"read\"]}", .content_type = "text/plain"},
        &resp);
    fx_expect_problem(&resp, p, 415, "unsupported-media-type");
    json_decref(p);
    api_resp_free(&resp);
}

/* The name rule shared by POST /v1/tokens and `trainyard token create`. */
static void test_name_rules(void **state)
{
    (void)state;
    assert_true(api_token_name_valid("ci"));
    assert_true(api_token_name_valid("CI-bot_1.prod"));
    char longname[API_TOKEN_MAX_NAME + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_false(api_token_name_valid(longname));
    longname[API_TOKEN_MAX_NAME] = '\0';
    assert_true(api_token_name_valid(longname));
    assert_false(api_token_name_valid(""));
    assert_false(api_token_name_valid("a b"));
    assert_false(api_token_name_valid("a/b"));
    assert_false(api_token_name_valid("a:b"));
    assert_false(api_token_name_valid("\xc3\xa9"));
    assert_false(api_token_name_valid("-ci"));
    assert_false(api_token_name_valid("ci."));
}

/* Issuing stores only the hash, refuses taken names, bad names and empty scopes. */
static void test_issue(void **state)
{
    fixture *f = *state;
    char secret[TY_TOKEN_BUFLEN];
    assert_int_equal(api_token_issue(f->store, "ci", STORE_SCOPE_READ, secret), TY_OK);
    assert_int_equal(strncmp(secret, "ty_", 3), 0);
    assert_int_equal(strlen(secret), 46);
    assert_int_equal(api_token_issue(f->store, "ci", STORE_SCOPE_READ, secret), TY_EEXISTS);
    assert_int_equal(api_token_issue(f->store, "bad name", STORE_SCOPE_READ, secret), TY_EINVAL);
    assert_int_equal(api_token_issue(f->store, "x", 0, secret), TY_EINVAL);

    assert_int_equal(api_token_issue(f->store, "ci2", STORE_SCOPE_READ, secret), TY_OK);
    store_token *tokens = NULL;
    size_t n = 0;
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(secret, strlen(secret), hash);
    assert_int_equal(store_tokens_list(f->store, &tokens, &n), TY_OK);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(tokens[i].name, "ci2") == 0)
            found = ty_equal_ct(tokens[i].hash, hash, TY_SHA256_LEN);
    assert_true(found);
    store_tokens_free(tokens, n);
}

/* GET /v1/whoami: the caller's own name, scopes and team. */
static void test_whoami(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *me = fx_call(f, "GET", "/v1/whoami", &(fx_req){.principal = "alice", .team = "vision"},
                         &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(me, "name")), "alice");
    assert_string_equal(json_string_value(json_object_get(me, "team")), "vision");
    json_t *scopes = json_object_get(me, "scopes");
    assert_int_equal(json_array_size(scopes), 2);
    assert_string_equal(json_string_value(json_array_get(scopes, 0)), "read");
    assert_string_equal(json_string_value(json_array_get(scopes, 1)), "submit");
    json_decref(me);
    api_resp_free(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_list_revoke, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_requests, fx_setup, fx_teardown),
        cmocka_unit_test(test_name_rules),
        cmocka_unit_test_setup_teardown(test_issue, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_whoami, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
