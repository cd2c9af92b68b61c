/*
 * test_api_ops.c - api/ops.c: /healthz, /readyz, /metrics, /openapi.yaml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "api/openapi_doc.h"
#include "tests/unit/test_api_fixture.h"

static void test_health_and_readiness(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *j = fx_call(f, "GET", "/healthz", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    api_resp_free(&resp);

    j = fx_call(f, "GET", "/readyz", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ready");
    json_decref(j);
    api_resp_free(&resp);

    /* Without a usable store the server is alive but not ready. */
    f->ctx.store = NULL;
    j = fx_call(f, "GET", "/readyz", NULL, &resp);
    fx_expect_problem(&resp, j, 503, "not-ready");
    assert_string_equal(fx_header(&resp, "Retry-After"), "1");
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "GET", "/healthz", NULL, &resp);
    assert_int_equal(resp.status, 200);
    json_decref(j);
    api_resp_free(&resp);
    f->ctx.store = f->store;
}

static void test_metrics(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "m1", NULL, NULL, id);
    fx_submit(f, "m2", NULL, NULL, id);
    ty_counter_vec_add(&f->requests, "/v1/jobs", "201", 2);
    ty_counter_vec_add(&f->requests, "unmatched", "404", 1);
    ty_histogram_observe(&f->duration, 0.003);

    api_resp resp;
    fx_call(f, "GET", "/metrics", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "text/plain; version=0.0.4");
    const char *text = resp.body;
    static const char *const want[] = {
        "# TYPE trainyard_http_requests_total counter\n",
        "trainyard_http_requests_total{route=\"/v1/jobs\",code=\"201\"} 2\n",
        "trainyard_http_requests_total{route=\"unmatched\",code=\"404\"} 1\n",
        "# TYPE trainyard_http_request_duration_seconds histogram\n",
        "trainyard_http_request_duration_seconds_bucket{le=\"0.005\"} 1\n",
        "trainyard_http_request_duration_seconds_bucket{le=\"+Inf\"} 1\n",
        "trainyard_http_request_duration_seconds_count{} 1\n",
        "# TYPE trainyard_jobs gauge\n",
        "trainyard_jobs{state=\"PENDING\"} 2\n",
        "trainyard_jobs{state=\"RUNNING\"} 0\n",
        "trainyard_jobs{state=\"CANCELLED\"} 0\n",
        "# TYPE trainyard_jobs_submitted_total counter\n",
        "trainyard_jobs_submitted_total 2\n",
        "# TYPE trainyard_store_commit_duration_seconds histogram\n",
        "trainyard_store_commit_duration_seconds_count",
        "# TYPE trainyard_store_commit_batch_size histogram\n",
        "trainyard_store_commit_batch_size_bucket",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i]))
            fail_msg("metrics lack \"%s\":\n%s", want[i], text);
    /* Every state has a sample. */
    for (int s = 0; s < JOB_STATE_COUNT; s++) {
        char line[64];
        snprintf(line, sizeof line, "trainyard_jobs{state=\"%s\"}", job_state_name((job_state)s));
        assert_non_null(strstr(text, line));
    }
    api_resp_free(&resp);

    /* Without a store or server metrics the families are still there. */
    f->ctx.store = NULL;
    f->ctx.http_requests = NULL;
    f->ctx.http_duration = NULL;
    fx_call(f, "GET", "/metrics", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_non_null(strstr(resp.body, "trainyard_jobs{state=\"PENDING\"} 0\n"));
    assert_non_null(strstr(resp.body, "# TYPE trainyard_http_requests_total counter\n"));
    api_resp_free(&resp);
    f->ctx.store = f->store;
}

static void test_openapi_document(void **state)
{
    fixture *f = *state;
    api_resp resp;
    fx_call(f, "GET", "/openapi.yaml", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "application/yaml");
    assert_int_equal(resp.body_len, api_openapi_yaml_len);
    assert_memory_equal(resp.body, api_openapi_yaml, api_openapi_yaml_len);
    assert_non_null(strstr(resp.body, "openapi: 3.0.3"));
    assert_int_equal(strlen(api_openapi_yaml), api_openapi_yaml_len);
    api_resp_free(&resp);

}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health_and_readiness, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_metrics, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_openapi_document, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
