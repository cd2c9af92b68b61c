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

static const char *const sched_families[] = {
    "trainyard_local_slots gauge",
    "trainyard_local_slots_used gauge",
    "trainyard_scheduler_active_jobs gauge",
    "trainyard_running_ranks gauge",
    "trainyard_scheduler_rounds_total counter",
    "trainyard_attempts_launched_total counter",
    "trainyard_attempt_restarts_total counter",
};

/* The scheduler's families: always listed, with samples when a scheduler runs. */
static void test_scheduler_metrics(void **state)
{
    fixture *f = *state;
    api_resp resp;
    fx_call(f, "GET", "/metrics", NULL, &resp);
    for (size_t i = 0; i < sizeof sched_families / sizeof sched_families[0]; i++) {
        char name[64], type[80], help[80], sample[80];
        sscanf(sched_families[i], "%63s", name);
        snprintf(type, sizeof type, "# TYPE %s\n", sched_families[i]);
        snprintf(help, sizeof help, "# HELP %s ", name);
        snprintf(sample, sizeof sample, "\n%s ", name);
        if (!strstr(resp.body, type) || !strstr(resp.body, help))
            fail_msg("no HELP or TYPE for %s:\n%s", name, resp.body);
        if (strstr(resp.body, sample))
            fail_msg("a sample of %s without a scheduler:\n%s", name, resp.body);
    }
    api_resp_free(&resp);

    char id[STORE_ID_LEN + 1], slots[64];
    fx_sched_start(f);
    fx_submit_sh(f, NULL, 1, 0, "sleep 600", id); /* runs until the teardown stops it */
    fx_wait_state(f, id, JOB_RUNNING);
    fx_call(f, "GET", "/metrics", NULL, &resp);
    assert_int_equal(resp.status, 200);
    snprintf(slots, sizeof slots, "\ntrainyard_local_slots %d\n", FX_SLOTS);
    const char *const want[] = {
        "\ntrainyard_scheduler_active_jobs 1\n",   "\ntrainyard_running_ranks 1\n",
        "\ntrainyard_attempts_launched_total 1\n", "\ntrainyard_attempt_restarts_total 0\n",
        "\ntrainyard_scheduler_rounds_total ",     slots,
        "\ntrainyard_local_slots_used 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(resp.body, want[i]))
            fail_msg("metrics lack \"%s\":\n%s", want[i] + 1, resp.body);
    api_resp_free(&resp);
}

static ty_err backend_families(void *ud, ty_buf *out)
{
    (*(int *)ud)++;
    return ty_buf_printf(out, "# HELP trainyard_kube_objects_created_total Objects created.\n"
                              "# TYPE trainyard_kube_objects_created_total counter\n"
                              "trainyard_kube_objects_created_total 3\n");
}

/* A backend's own families follow the server's. */
static void test_backend_metrics(void **state)
{
    fixture *f = *state;
    api_resp resp;
    int calls = 0;
    f->ctx.backend_metrics = backend_families;
    f->ctx.backend_metrics_ud = &calls;
    fx_call(f, "GET", "/metrics", NULL, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(calls, 1);
    assert_non_null(strstr(resp.body, "\ntrainyard_kube_objects_created_total 3\n"));
    assert_true(strstr(resp.body, "trainyard_kube_objects") > strstr(resp.body, "trainyard_jobs"));
    api_resp_free(&resp);
    f->ctx.backend_metrics = NULL;
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
        cmocka_unit_test_setup_teardown(test_scheduler_metrics, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_backend_metrics, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_openapi_document, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
