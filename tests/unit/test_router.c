/*
 * test_router.c - route matching: templates, {id} and ":verb" segments, 404
 * versus 405 with the Allow list, and the real api_routes[] table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/router.h"

static void dummy(const api_req *req, api_resp *resp)
{
    (void)req;
    (void)resp;
}

static const api_route table[] = {
    {"GET", "/healthz", dummy, 0},
    {"GET", "/v1/jobs", dummy, STORE_SCOPE_READ},
    {"POST", "/v1/jobs", dummy, STORE_SCOPE_SUBMIT},
    {"POST", "/v1/jobs:batch", dummy, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/jobs/{id}", dummy, STORE_SCOPE_READ},
    {"GET", "/v1/jobs/{id}/events", dummy, STORE_SCOPE_READ},
    {"POST", "/v1/jobs/{id}:cancel", dummy, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/tokens", dummy, STORE_SCOPE_ADMIN},
    {"POST", "/v1/tokens", dummy, STORE_SCOPE_ADMIN},
    {"DELETE", "/v1/tokens/{id}", dummy, STORE_SCOPE_ADMIN},
};
#define NTABLE (sizeof table / sizeof table[0])

typedef struct {
    const char *method, *path;
    router_result want;
    const char *tmpl;  /* FOUND and BAD_METHOD */
    const char *id;    /* FOUND */
    const char *allow; /* BAD_METHOD */
} route_case;

static const route_case cases[] = {
    {"GET", "/healthz", ROUTER_FOUND, "/healthz", "", NULL},
    {"HEAD", "/healthz", ROUTER_FOUND, "/healthz", "", NULL},
    {"POST", "/healthz", ROUTER_BAD_METHOD, "/healthz", NULL, "GET"},
    {"GET", "/v1/jobs", ROUTER_FOUND, "/v1/jobs", "", NULL},
    {"POST", "/v1/jobs", ROUTER_FOUND, "/v1/jobs", "", NULL},
    {"DELETE", "/v1/jobs", ROUTER_BAD_METHOD, "/v1/jobs", NULL, "GET, POST"},
    {"PUT", "/v1/jobs", ROUTER_BAD_METHOD, "/v1/jobs", NULL, "GET, POST"},
    {"POST", "/v1/jobs:batch", ROUTER_FOUND, "/v1/jobs:batch", "", NULL},
    {"GET", "/v1/jobs:batch", ROUTER_BAD_METHOD, "/v1/jobs:batch", NULL, "POST"},
    {"GET", "/v1/jobs/abc", ROUTER_FOUND, "/v1/jobs/{id}", "abc", NULL},
    {"DELETE", "/v1/jobs/abc", ROUTER_BAD_METHOD, "/v1/jobs/{id}", NULL, "GET"},
    {"GET", "/v1/jobs/abc/events", ROUTER_FOUND, "/v1/jobs/{id}/events", "abc", NULL},
    {"POST", "/v1/jobs/abc/events", ROUTER_BAD_METHOD, "/v1/jobs/{id}/events", NULL, "GET"},
    {"POST", "/v1/jobs/abc:cancel", ROUTER_FOUND, "/v1/jobs/{id}:cancel", "abc", NULL},
    {"GET", "/v1/jobs/abc:cancel", ROUTER_BAD_METHOD, "/v1/jobs/{id}:cancel", NULL, "POST"},
    {"POST", "/v1/jobs/abc:frobnicate", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"POST", "/v1/jobs/:cancel", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"POST", "/v1/jobs/a:b:cancel", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobs/a:b", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobs/", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobs/abc/", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobs/abc/events/x", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobs/a/b", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "//v1/jobs", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1//jobs", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/jobsx", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/job", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/V1/jobs", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "healthz", ROUTER_NOT_FOUND, NULL, NULL, NULL},
    {"GET", "/v1/tokens", ROUTER_FOUND, "/v1/tokens", "", NULL},
    {"DELETE", "/v1/tokens/ci-bot", ROUTER_FOUND, "/v1/tokens/{id}", "ci-bot", NULL},
    {"GET", "/v1/tokens/ci-bot", ROUTER_BAD_METHOD, "/v1/tokens/{id}", NULL, "DELETE"},
    {"DELETE", "/v1/tokens", ROUTER_BAD_METHOD, "/v1/tokens", NULL, "GET, POST"},
};

static void test_table_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const route_case *c = &cases[i];
        router_match m;
        router_result r = router_match_route(table, NTABLE, c->method, c->path, &m);
        if (r != c->want)
            print_message("case %zu: %s %s\n", i, c->method, c->path);
        assert_int_equal(r, c->want);
        if (c->want == ROUTER_NOT_FOUND) {
            assert_null(m.route);
            assert_null(m.tmpl);
            continue;
        }
        assert_string_equal(m.tmpl, c->tmpl);
        if (c->want == ROUTER_FOUND) {
            assert_non_null(m.route);
            assert_string_equal(m.route->path, c->tmpl);
            assert_string_equal(m.id, c->id);
            assert_string_equal(m.allow, "");
        } else {
            assert_null(m.route);
            assert_string_equal(m.allow, c->allow);
        }
    }
}

static void test_found_route_has_the_method(void **state)
{
    (void)state;
    router_match m;
    assert_int_equal(router_match_route(table, NTABLE, "POST", "/v1/jobs", &m), ROUTER_FOUND);
    assert_string_equal(m.route->method, "POST");
    assert_int_equal(m.route->scope, STORE_SCOPE_SUBMIT);
    assert_int_equal(router_match_route(table, NTABLE, "GET", "/v1/jobs", &m), ROUTER_FOUND);
    assert_string_equal(m.route->method, "GET");
    assert_int_equal(m.route->scope, STORE_SCOPE_READ);
}

/* Allow lists methods in a fixed order, whatever the order of the table. */
static void test_allow_order(void **state)
{
    (void)state;
    static const api_route t[] = {
        {"DELETE", "/x/{id}", dummy, 0}, {"PURGE", "/x/{id}", dummy, 0},
        {"POST", "/x/{id}", dummy, 0},   {"GET", "/x/{id}", dummy, 0},
        {"PATCH", "/x/{id}", dummy, 0},  {"GET", "/x/{id}", dummy, 0},
    };
    router_match m;
    assert_int_equal(router_match_route(t, 6, "PUT", "/x/1", &m), ROUTER_BAD_METHOD);
    assert_string_equal(m.allow, "GET, POST, PATCH, DELETE, PURGE");
    assert_string_equal(m.tmpl, "/x/{id}");
}

static void test_id_length_limit(void **state)
{
    (void)state;
    char path[16 + ROUTER_MAX_ID + 2];
    char id[ROUTER_MAX_ID + 2];
    router_match m;

    memset(id, 'a', ROUTER_MAX_ID);
    id[ROUTER_MAX_ID] = '\0';
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    assert_int_equal(router_match_route(table, NTABLE, "GET", path, &m), ROUTER_FOUND);
    assert_string_equal(m.id, id);

    memset(id, 'a', ROUTER_MAX_ID + 1);
    id[ROUTER_MAX_ID + 1] = '\0';
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    assert_int_equal(router_match_route(table, NTABLE, "GET", path, &m), ROUTER_NOT_FOUND);
}

/* Every route of the real table is reachable through its own template. */
static void test_api_routes_reachable(void **state)
{
    (void)state;
    assert_true(api_nroutes > 0);
    for (size_t i = 0; i < api_nroutes; i++) {
        const api_route *r = &api_routes[i];
        char path[256];
        const char *brace = strstr(r->path, "{id}");
        if (brace)
            snprintf(path, sizeof path, "%.*sx1%s", (int)(brace - r->path), r->path, brace + 4);
        else
            snprintf(path, sizeof path, "%s", r->path);
        router_match m;
        router_result res = router_match_route(api_routes, api_nroutes, r->method, path, &m);
        if (res != ROUTER_FOUND)
            print_message("route %zu: %s %s\n", i, r->method, path);
        assert_int_equal(res, ROUTER_FOUND);
        assert_ptr_equal(m.route, r);
        assert_string_equal(m.id, brace ? "x1" : "");
        assert_non_null(r->handler);
    }
}

/* No method+template pair appears twice (the second would be unreachable). */
static void test_api_routes_unique(void **state)
{
    (void)state;
    for (size_t i = 0; i < api_nroutes; i++)
        for (size_t j = i + 1; j < api_nroutes; j++)
            assert_false(strcmp(api_routes[i].method, api_routes[j].method) == 0 &&
                         strcmp(api_routes[i].path, api_routes[j].path) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_cases),
        cmocka_unit_test(test_found_route_has_the_method),
        cmocka_unit_test(test_allow_order),
        cmocka_unit_test(test_id_length_limit),
        cmocka_unit_test(test_api_routes_reachable),
        cmocka_unit_test(test_api_routes_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
