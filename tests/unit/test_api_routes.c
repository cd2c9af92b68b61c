/*
 * test_api_routes.c - api/routes.c: the route table is well formed, and each
 * route's scope is the one openapi.yaml states (security, x-trainyard-scope).
 * That the two list the same operations is checked by test_openapi.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <string.h>

#include "api/api.h"
#include "api/openapi_doc.h"
#include "tests/support/oas.h"

static void test_table_is_well_formed(void **state)
{
    (void)state;
    assert_true(api_nroutes >= 13);
    for (size_t i = 0; i < api_nroutes; i++) {
        const api_route *r = &api_routes[i];
        assert_non_null(r->handler);
        assert_true(strcmp(r->method, "GET") == 0 || strcmp(r->method, "POST") == 0 ||
                    strcmp(r->method, "PUT") == 0 || strcmp(r->method, "DELETE") == 0);
        assert_int_equal(r->path[0], '/');
        int v1 = strncmp(r->path, "/v1/", 4) == 0;
        /* CI webhook deliveries prove themselves by their signature, not a token. */
        int hook = strcmp(r->path, "/v1/hooks/{id}") == 0;
        /* /v1 needs a token; the operational routes are open. */
        assert_true(v1 && !hook ? r->scope != 0 : r->scope == 0);
        if (hook)
            assert_string_equal(r->method, "POST");
        else if (v1 && (strncmp(r->path, "/v1/tokens", 10) == 0 ||
                        strncmp(r->path, "/v1/webhooks", 12) == 0 ||
                        strncmp(r->path, "/v1/notifications", 17) == 0))
            assert_int_equal(r->scope, STORE_SCOPE_ADMIN);
        else if (v1 && (strncmp(r->path, "/v1/teams", 9) == 0 || /* a token reads its own team */
                        strncmp(r->path, "/v1/cluster", 11) == 0))  /* an admin releases nodes */
            assert_int_equal(r->scope,
                             strcmp(r->method, "GET") == 0 ? STORE_SCOPE_READ : STORE_SCOPE_ADMIN);
        else if (v1 && r->scope == STORE_SCOPE_REPORT) /* a job's token reports its metrics */
            assert_true(strcmp(r->method, "POST") == 0 &&
                        strcmp(r->path, "/v1/jobs/{id}/metrics") == 0);
        else if (v1 && strcmp(r->method, "GET") == 0)
            assert_int_equal(r->scope, STORE_SCOPE_READ);
        else if (v1)
            assert_int_equal(r->scope, STORE_SCOPE_SUBMIT);
        for (size_t k = 0; k < i; k++)
            assert_false(strcmp(api_routes[k].method, r->method) == 0 &&
                         strcmp(api_routes[k].path, r->path) == 0);
    }
}

/* The route a method and path template name, or NULL. */
static const api_route *route(const char *method, const char *path)
{
    for (size_t i = 0; i < api_nroutes; i++)
        if (strcmp(api_routes[i].method, method) == 0 && strcmp(api_routes[i].path, path) == 0)
            return &api_routes[i];
    return NULL;
}

/* Sweeps: a read token sees them, a submit token creates and cancels them. */
static void test_sweep_routes(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        unsigned scope;
    } want[] = {
        {"POST", "/v1/sweeps", STORE_SCOPE_SUBMIT},
        {"GET", "/v1/sweeps", STORE_SCOPE_READ},
        {"GET", "/v1/sweeps/{id}", STORE_SCOPE_READ},
        {"POST", "/v1/sweeps/{id}:cancel", STORE_SCOPE_SUBMIT},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const api_route *r = route(want[i].method, want[i].path);
        assert_non_null(r);
        assert_int_equal(r->scope, want[i].scope);
    }
}

static void test_scopes_match_openapi(void **state)
{
    (void)state;
    json_t *doc = NULL;
    char err[256];
    if (oas_yaml_parse(api_openapi_yaml, api_openapi_yaml_len, &doc, err, sizeof err))
        fail_msg("openapi.yaml: %s", err);
    json_t *paths = json_object_get(doc, "paths");
    for (size_t i = 0; i < api_nroutes; i++) {
        const api_route *r = &api_routes[i];
        char method[8];
        size_t n = strlen(r->method);
        for (size_t k = 0; k <= n; k++)
            method[k] = (char)tolower((unsigned char)r->method[k]);
        json_t *op = json_object_get(json_object_get(paths, r->path), method);
        if (!op)
            fail_msg("%s %s is not in openapi.yaml", r->method, r->path);
        json_t *security = json_object_get(op, "security");
        const char *scope = json_string_value(json_object_get(op, "x-trainyard-scope"));
        if (r->scope == 0) {
            assert_true(json_is_array(security) && json_array_size(security) == 0);
            assert_null(scope);
            continue;
        }
        const char *want = r->scope == STORE_SCOPE_ADMIN    ? "admin"
                           : r->scope == STORE_SCOPE_SUBMIT ? "submit"
                           : r->scope == STORE_SCOPE_REPORT ? "report"
                                                            : "read";
        if (!scope || strcmp(scope, want) != 0)
            fail_msg("%s %s: x-trainyard-scope %s, want %s", r->method, r->path,
                     scope ? scope : "(none)", want);
    }
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_well_formed),
        cmocka_unit_test(test_scopes_match_openapi),
        cmocka_unit_test(test_sweep_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
