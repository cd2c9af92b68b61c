/*
 * test_api_teams.c - api/teams.c: /v1/teams against a real store, and the ownership check of
 * the job and sweep routes; every response checked against openapi.yaml by the fixture.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tests/unit/test_api_fixture.h"

static void call(fixture *f, const char *method, const char *tmpl, const fx_req *r,
                 unsigned want, const char *code)
{
    api_resp resp;
    json_t *j = fx_call(f, method, tmpl, r, &resp);
    if (code)
        fx_expect_problem(&resp, j, want, code);
    else if (resp.status != want)
        fail_msg("%s %s: %u, not %u: %s", method, tmpl, resp.status, want,
                 resp.body ? resp.body : "");
    json_decref(j);
    api_resp_free(&resp);
}

/* The paths of a 422's errors, in order, joined by spaces. */
static void error_paths(const json_t *problem, char *out, size_t len)
{
    size_t i, used = 0;
    json_t *e;
    out[0] = '\0';
    json_array_foreach(json_object_get(problem, "errors"), i, e)
    {
        int n = snprintf(out + used, len - used, "%s%s", used ? " " : "",
                         json_string_value(json_object_get(e, "path")));
        if (n > 0 && (size_t)n < len - used)
            used += (size_t)n;
    }
}

static void test_create_get_update_delete(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *t = fx_call(f, "POST", "/v1/teams",
                        &(fx_req){.body = "{\"name\":\"vision\",\"quota\":{\"gpu\":{\"a100\":16,"
                                          "\"h100\":8},\"cpu\":\"512\",\"memory\":\"4Ti\"},"
                                          "\"borrowing_limit\":{\"gpu\":{\"a100\":8}},"
                                          "\"weight\":1}"},
                        &resp);
    assert_int_equal(resp.status, 201);
    assert_string_equal(fx_header(&resp, "Location"), "/v1/teams/vision");
    json_t *q = json_object_get(t, "quota");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(q, "gpu"), "h100")), 8);
    assert_string_equal(json_string_value(json_object_get(q, "cpu")), "512");
    assert_string_equal(json_string_value(json_object_get(q, "memory")), "4Ti");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(t, "borrowing_limit"), "gpu"), "a100")),
                     8);
    assert_int_equal(json_object_size(json_object_get(t, "usage")), 0);
    json_decref(t);
    api_resp_free(&resp);
    call(f, "POST", "/v1/teams", &(fx_req){.body = "{\"name\":\"vision\"}"}, 409, "team-exists");

    /* PUT replaces: the quota as GET shows it. */
    t = fx_call(f, "PUT", "/v1/teams/{id}",
                &(fx_req){.id = "vision", .body = "{\"quota\":{\"cpu\":0.5},\"weight\":3}"}, &resp);
    assert_int_equal(resp.status, 200);
    json_decref(t);
    api_resp_free(&resp);
    t = fx_call(f, "GET", "/v1/teams/{id}", &(fx_req){.id = "vision"}, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(t, "quota"), "cpu")),
                        "0.5");
    assert_null(json_object_get(json_object_get(t, "quota"), "gpu"));
    assert_int_equal(json_integer_value(json_object_get(t, "weight")), 3);
    json_decref(t);
    api_resp_free(&resp);

    call(f, "PUT", "/v1/teams/{id}", &(fx_req){.id = "nobody", .body = "{}"}, 404,
         "team-not-found");
    call(f, "GET", "/v1/teams/{id}", &(fx_req){.id = "nobody"}, 404, "team-not-found");
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "default"}, 409, "team-in-use");
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "vision"}, 204, NULL);
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "vision"}, 404, "team-not-found");
}

static void test_every_offending_field_by_path(void **state)
{
    fixture *f = *state;
    api_resp resp;
    char paths[512];
    json_t *p = fx_call(f, "POST", "/v1/teams",
                        &(fx_req){.body = "{\"name\":\"Not_A_Label\",\"weight\":0,\"quota\":"
                                          "{\"gpu\":{\"a100\":-1,\"BAD\":1},\"cpu\":\"lots\","
                                          "\"memory\":[1],\"disk\":\"1Gi\"},"
                                          "\"borrowing_limit\":7,\"extra\":true}"},
                        &resp);
    fx_expect_problem(&resp, p, 422, "invalid-team");
    error_paths(p, paths, sizeof paths);
    assert_string_equal(paths, "$.extra $.name $.weight $.quota.gpu.a100 $.quota.gpu.BAD "
                               "$.quota.cpu $.quota.memory $.quota.disk $.borrowing_limit");
    json_decref(p);
    api_resp_free(&resp);

    p = fx_call(f, "POST", "/v1/teams", &(fx_req){.body = "{}"}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-team");
    error_paths(p, paths, sizeof paths);
    assert_string_equal(paths, "$.name");
    json_decref(p);
    api_resp_free(&resp);

    p = fx_call(f, "PUT", "/v1/teams/{id}",
                &(fx_req){.id = "default", .body = "{\"name\":\"other\",\"weight\":1001}"}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-team");
    error_paths(p, paths, sizeof paths);
    assert_string_equal(paths, "$.name $.weight");
    json_decref(p);
    api_resp_free(&resp);
}

static void test_tokens_name_an_existing_team(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *p = fx_call(
        f, "POST", "/v1/tokens",
        &(fx_req){.body = "{\"name\":\"bob\",\"scopes\":[\"submit\"],\"team\":\"nope\"}"}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-request");
    char paths[128];
    error_paths(p, paths, sizeof paths);
    assert_string_equal(paths, "$.team");
    json_decref(p);
    api_resp_free(&resp);
    call(f, "POST", "/v1/teams", &(fx_req){.body = "{\"name\":\"nlp\"}"}, 201, NULL);
    json_t *t = fx_call(
        f, "POST", "/v1/tokens",
        &(fx_req){.body = "{\"name\":\"bob\",\"scopes\":[\"submit\"],\"team\":\"nlp\"}"}, &resp);
    assert_int_equal(resp.status, 201);
    assert_string_equal(json_string_value(json_object_get(t, "team")), "nlp");
    json_decref(t);
    api_resp_free(&resp);
    /* A team with a valid token stays. */
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "nlp"}, 409, "team-in-use");
}

static const char job_body[] =
    "{\"name\":\"j\",\"image\":\"img\",\"command\":[\"run\"],\"workers\":{\"count\":2},"
    "\"resources\":{\"cpu\":\"1\",\"memory\":\"1Gi\"}}";

/* A non-admin token of vision reads and acts only on vision's jobs and sweeps. */
static void test_another_teams_job_is_not_found(void **state)
{
    fixture *f = *state;
    api_resp resp;
    call(f, "POST", "/v1/teams", &(fx_req){.body = "{\"name\":\"vision\"}"}, 201, NULL);
    call(f, "POST", "/v1/teams", &(fx_req){.body = "{\"name\":\"nlp\"}"}, 201, NULL);

    /* The admin submits for nlp; vision's token submits its own. */
    json_t *j = fx_call(f, "POST", "/v1/jobs",
                        &(fx_req){.body = "{\"team\":\"nlp\",\"name\":\"n\",\"image\":\"img\","
                                          "\"command\":[\"run\"],\"workers\":{\"count\":1}}"},
                        &resp);
    assert_int_equal(resp.status, 201);
    assert_string_equal(json_string_value(json_object_get(j, "team")), "nlp");
    assert_string_equal(json_string_value(json_object_get(j, "owner")), "tester");
    char nlp_id[STORE_ID_LEN + 1];
    snprintf(nlp_id, sizeof nlp_id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "POST", "/v1/jobs",
                &(fx_req){.body = job_body, .team = "vision", .principal = "bob"}, &resp);
    assert_int_equal(resp.status, 201);
    assert_string_equal(json_string_value(json_object_get(j, "team")), "vision");
    assert_string_equal(json_string_value(json_object_get(j, "owner")), "bob");
    char vis_id[STORE_ID_LEN + 1];
    snprintf(vis_id, sizeof vis_id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);

    /* Every route answers 404 for nlp's job, as for no job at all. */
    static const struct {
        const char *method, *tmpl;
    } routes[] = {
        {"GET", "/v1/jobs/{id}"},           {"GET", "/v1/jobs/{id}/events"},
        {"GET", "/v1/jobs/{id}/attempts"},  {"GET", "/v1/jobs/{id}/logs"},
        {"GET", "/v1/jobs/{id}/metrics"},   {"POST", "/v1/jobs/{id}:cancel"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        call(f, routes[i].method, routes[i].tmpl, &(fx_req){.id = nlp_id, .team = "vision"}, 404,
             "job-not-found");
        call(f, routes[i].method, routes[i].tmpl,
             &(fx_req){.id = "00000000000000000000000000", .team = "vision"}, 404,
             "job-not-found");
    }
    api_kv follow = {"follow", "true"};
    call(f, "GET", "/v1/jobs/{id}/events",
         &(fx_req){.id = nlp_id, .team = "vision", .query = &follow, .nquery = 1}, 404,
         "job-not-found");
    /* Its own job is there; the admin sees both. */
    call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = vis_id, .team = "vision"}, 200, NULL);
    call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = nlp_id}, 200, NULL);

    j = fx_call(f, "GET", "/v1/jobs", &(fx_req){.team = "vision"}, &resp);
    assert_int_equal(json_array_size(json_object_get(j, "jobs")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "jobs"), 0), "id")),
        vis_id);
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "GET", "/v1/jobs", NULL, &resp);
    assert_int_equal(json_array_size(json_object_get(j, "jobs")), 2);
    json_decref(j);
    api_resp_free(&resp);

    /* Only an admin submits for another team. */
    j = fx_call(f, "POST", "/v1/jobs",
                &(fx_req){.body = "{\"team\":\"nlp\",\"name\":\"n\",\"image\":\"img\","
                                  "\"command\":[\"run\"],\"workers\":{\"count\":1}}",
                          .team = "vision"},
                &resp);
    fx_expect_problem(&resp, j, 422, "invalid-spec");
    json_decref(j);
    api_resp_free(&resp);
    call(f, "POST", "/v1/jobs:batch",
         &(fx_req){.body = "{\"team\":\"nobody\",\"jobs\":[{\"name\":\"n\",\"image\":\"img\","
                           "\"command\":[\"run\"],\"workers\":{\"count\":1}}]}"},
         422, "invalid-spec");

    /* The team's usage: nothing admitted yet, one pending. */
    j = fx_call(f, "GET", "/v1/teams/{id}", &(fx_req){.id = "vision", .team = "vision"}, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_integer_value(json_object_get(j, "pending")), 1);
    json_decref(j);
    api_resp_free(&resp);
    call(f, "GET", "/v1/teams/{id}", &(fx_req){.id = "nlp", .team = "vision"}, 404,
         "team-not-found");
    j = fx_call(f, "GET", "/v1/teams", &(fx_req){.team = "vision"}, &resp);
    assert_int_equal(json_array_size(json_object_get(j, "teams")), 1);
    json_decref(j);
    api_resp_free(&resp);

    /* A team with a job that has not ended stays. */
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "nlp"}, 409, "team-in-use");
    call(f, "POST", "/v1/jobs/{id}:cancel", &(fx_req){.id = nlp_id}, 200, NULL);
    call(f, "DELETE", "/v1/teams/{id}", &(fx_req){.id = "nlp"}, 204, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_get_update_delete, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_every_offending_field_by_path, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_tokens_name_an_existing_team, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_another_teams_job_is_not_found, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
