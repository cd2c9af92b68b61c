/*
 * test_api_metrics.c - api/metrics.c: POST and GET /v1/jobs/{id}/metrics against a real
 * store, every response checked against openapi.yaml by the fixture. (Which tokens may
 * report is tested with the real server: tests/integration/test_metrics_api.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_buf.h"
#include "tests/unit/test_api_fixture.h"

#define TMPL "/v1/jobs/{id}/metrics"

static json_t *report(fixture *f, const char *id, const char *body, api_resp *resp)
{
    return fx_call(f, "POST", TMPL, &(fx_req){.id = id, .body = body}, resp);
}

static json_t *read_metrics(fixture *f, const char *id, const api_kv *q, size_t nq,
                            api_resp *resp)
{
    return fx_call(f, "GET", TMPL, &(fx_req){.id = id, .query = q, .nquery = nq}, resp);
}

/* The series `name` of a GET's body (borrowed), or NULL. */
static json_t *series(json_t *body, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(body, "series"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            return s;
    }
    return NULL;
}

static void test_report_then_read(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "curves", NULL, NULL, id);
    api_resp resp;
    json_t *b = report(f, id,
                       "{\"points\":[{\"step\":100,\"time\":\"2026-11-23T11:30:00.123Z\","
                       "\"loss\":0.53,\"accuracy\":0.91,\"samples_per_s\":120000.0,\"lr\":0.01},"
                       "{\"step\":200,\"loss\":0.25}]}",
                       &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_integer_value(json_object_get(b, "accepted")), 2);
    json_decref(b);
    api_resp_free(&resp);

    /* Every series of the job, in name order. */
    b = read_metrics(f, id, NULL, 0, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(b, "job_id")), id);
    json_t *all = json_object_get(b, "series");
    assert_int_equal(json_array_size(all), 4);
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "name")),
                        "accuracy");
    json_t *loss = series(b, "loss");
    assert_int_equal(json_integer_value(json_object_get(loss, "total_points")), 2);
    json_t *p0 = json_array_get(json_object_get(loss, "points"), 0);
    assert_int_equal(json_integer_value(json_object_get(p0, "step")), 100);
    assert_string_equal(json_string_value(json_object_get(p0, "time")),
                        "2026-11-23T11:30:00.123Z");
    assert_true(json_real_value(json_object_get(p0, "value")) == 0.53);
    /* The shortest text that reads back as the value. */
    assert_non_null(strstr(resp.body, "\"value\":0.53}"));
    json_decref(b);
    api_resp_free(&resp);

    /* The same step again: the last value wins. Then since_step reads only what is new. */
    b = report(f, id, "{\"points\":[{\"step\":200,\"loss\":0.125},{\"step\":300,\"loss\":0.1}]}",
               &resp);
    assert_int_equal(resp.status, 200);
    json_decref(b);
    api_resp_free(&resp);
    api_kv q[] = {{"name", "loss"}, {"since_step", "100"}, {"name", "loss"}};
    b = read_metrics(f, id, q, 3, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_array_size(json_object_get(b, "series")), 1);
    loss = series(b, "loss");
    json_t *pts = json_object_get(loss, "points");
    assert_int_equal(json_array_size(pts), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 0), "step")), 200);
    assert_true(json_real_value(json_object_get(json_array_get(pts, 0), "value")) == 0.125);
    json_decref(b);
    api_resp_free(&resp);

    /* A name never reported is an empty series. */
    api_kv q2[] = {{"name", "grad_norm"}};
    b = read_metrics(f, id, q2, 1, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_integer_value(json_object_get(series(b, "grad_norm"), "total_points")),
                     0);
    json_decref(b);
    api_resp_free(&resp);
}

/* Every offending member is listed by its path, and nothing is stored. */
static void test_invalid_points_listed(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "bad", NULL, NULL, id);
    api_resp resp;
    json_t *b = report(f, id,
                       "{\"points\":[{\"step\":1,\"loss\":0.5},"
                       "{\"loss\":0.5},"
                       "{\"step\":-1,\"loss\":\"low\"},"
                       "{\"step\":2,\"time\":\"yesterday\",\"9lives\":1},"
                       "{\"step\":3},"
                       "{\"step\":1.5,\"acc\":1}, 7],"
                       "\"extra\":1}",
                       &resp);
    fx_expect_problem(&resp, b, 422, "invalid-metrics");
    static const char *const want[] = {
        "$.points[1].step", "$.points[2].step", "$.points[2].loss", "$.points[3].time",
        "$.points[3].9lives", "$.points[4]", "$.points[5].step", "$.points[6]", "$.extra",
    };
    json_t *errors = json_object_get(b, "errors");
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        int found = 0;
        size_t i;
        json_t *e;
        json_array_foreach(errors, i, e)
        {
            found |= strcmp(json_string_value(json_object_get(e, "path")), want[w]) == 0;
        }
        if (!found)
            fail_msg("no error at %s", want[w]);
    }
    assert_int_equal(json_array_size(errors), sizeof want / sizeof *want);
    json_decref(b);
    api_resp_free(&resp);

    b = read_metrics(f, id, NULL, 0, &resp);
    assert_int_equal(json_array_size(json_object_get(b, "series")), 0); /* the valid one too */
    json_decref(b);
    api_resp_free(&resp);

    static const char *const bodies[] = {"{\"points\":[]}", "{}", "[1]", "{\"points\":{}}"};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        b = report(f, id, bodies[i], &resp);
        fx_expect_problem(&resp, b, 422, "invalid-metrics");
        json_decref(b);
        api_resp_free(&resp);
    }
    b = report(f, id, "{\"points\":[{\"step\":1,\"loss\":0.5}", &resp);
    assert_int_equal(resp.status, 400);
    json_decref(b);
    api_resp_free(&resp);

    /* More series than a job may have. */
    ty_buf many = {0};
    assert_int_equal(ty_buf_puts(&many, "{\"points\":[{\"step\":1"), TY_OK);
    for (int i = 0; i <= STORE_METRIC_MAX_SERIES; i++)
        assert_int_equal(ty_buf_printf(&many, ",\"m%d\":1", i), TY_OK);
    assert_int_equal(ty_buf_puts(&many, "}]}"), TY_OK);
    b = report(f, id, many.data, &resp);
    fx_expect_problem(&resp, b, 422, "invalid-metrics");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(b, "errors"), 0),
                                          "path")),
        "$.points");
    json_decref(b);
    api_resp_free(&resp);
    ty_buf_free(&many);
}

/* A value must be a number a double holds as sent: what the decoder clamps (1e400, integers
 * past int64) and what is not finite (Python's NaN, Infinity) is a 422 at the member, never
 * stored as something else. */
static void test_values_a_double_holds(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "values", NULL, NULL, id);
    static const struct {
        const char *value;
        unsigned status; /* 200, or 422 at $.points[0].loss, or 400 for the whole body */
    } cases[] = {
        {"1e400", 422},
        {"-1e400", 422},
        {"1e308", 422},
        {"1.7976931348623157e308", 422},
        {"100000000000000000000", 422},
        {"-9223372036854775808", 422},
        {"9223372036854775807", 422},
        {"NaN", 422},
        {"Infinity", 422},
        {"-Infinity", 422},
        {" NaN ", 422},
        {"\"NaN\"", 422},
        {"\"1.5\"", 422},
        {"nan", 400},
        {"NaNa", 400},
        {"9.99e307", 200},
        {"-9.99e307", 200},
        {"9223372036854775806", 200},
        {"1e-400", 200},
        {"0", 200},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"points\":[{\"step\":%zu,\"loss\":%s}]}", i,
                 cases[i].value);
        api_resp resp;
        json_t *b = report(f, id, body, &resp);
        if (resp.status != cases[i].status)
            fail_msg("%s: %u, want %u", cases[i].value, resp.status, cases[i].status);
        if (cases[i].status == 422) {
            fx_expect_problem(&resp, b, 422, "invalid-metrics");
            json_t *errors = json_object_get(b, "errors");
            assert_int_equal(json_array_size(errors), 1);
            assert_string_equal(
                json_string_value(json_object_get(json_array_get(errors, 0), "path")),
                "$.points[0].loss");
        }
        json_decref(b);
        api_resp_free(&resp);
    }
    /* Only the five accepted values were stored, each as sent. */
    api_kv q[] = {{"name", "loss"}};
    api_resp resp;
    json_t *b = read_metrics(f, id, q, 1, &resp);
    json_t *pts = json_object_get(series(b, "loss"), "points");
    assert_int_equal(json_array_size(pts), 5);
    assert_true(json_number_value(json_object_get(json_array_get(pts, 0), "value")) == 9.99e307);
    assert_true(json_number_value(json_object_get(json_array_get(pts, 1), "value")) ==
                -9.99e307);
    json_decref(b);
    api_resp_free(&resp);
}

static void test_unknown_and_finished_jobs(void **state)
{
    fixture *f = *state;
    api_resp resp;
    const char *body = "{\"points\":[{\"step\":1,\"loss\":0.5}]}";
    json_t *b = report(f, "00000000000000000000000000", body, &resp);
    fx_expect_problem(&resp, b, 404, "job-not-found");
    json_decref(b);
    api_resp_free(&resp);
    b = read_metrics(f, "00000000000000000000000000", NULL, 0, &resp);
    fx_expect_problem(&resp, b, 404, "job-not-found");
    json_decref(b);
    api_resp_free(&resp);
    b = report(f, "not-an-id", body, &resp);
    fx_expect_problem(&resp, b, 404, "job-not-found");
    json_decref(b);
    api_resp_free(&resp);

    char id[STORE_ID_LEN + 1];
    fx_submit(f, "done", NULL, NULL, id);
    b = report(f, id, body, &resp);
    assert_int_equal(resp.status, 200);
    json_decref(b);
    api_resp_free(&resp);
    fx_sched_write(f, id, JOB_PENDING, JOB_CANCELLED, 0, NULL, -1);
    b = report(f, id, body, &resp);
    fx_expect_problem(&resp, b, 409, "job-finished");
    assert_string_equal(json_string_value(json_object_get(b, "state")), "CANCELLED");
    json_decref(b);
    api_resp_free(&resp);
    /* What it reported before its end stays readable. */
    b = read_metrics(f, id, NULL, 0, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_integer_value(json_object_get(series(b, "loss"), "total_points")), 1);
    json_decref(b);
    api_resp_free(&resp);
}

static void test_bad_queries(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "q", NULL, NULL, id);
    static const struct {
        api_kv kv;
        const char *path;
    } cases[] = {
        {{"max_points", "1"}, "query.max_points"},
        {{"max_points", "10001"}, "query.max_points"},
        {{"max_points", "ten"}, "query.max_points"},
        {{"since_step", "-1"}, "query.since_step"},
        {{"name", "bad name"}, "query.name"},
        {{"name", ""}, "query.name"},
        {{"step", "1"}, "query.step"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        api_resp resp;
        json_t *b = read_metrics(f, id, &cases[i].kv, 1, &resp);
        fx_expect_problem(&resp, b, 400, "invalid-query");
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(json_object_get(b, "errors"), 0),
                                              "path")),
            cases[i].path);
        json_decref(b);
        api_resp_free(&resp);
    }
}

/* 10,000 points reported in two requests, read back as at most 100 that keep the extremes. */
static void test_downsampled_through_the_api(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "long", NULL, NULL, id);
    for (int half = 0; half < 2; half++) {
        ty_buf body = {0};
        assert_int_equal(ty_buf_puts(&body, "{\"points\":["), TY_OK);
        for (int i = half * 5000; i < (half + 1) * 5000; i++) {
            double v = 1.0 / (1 + i);
            if (i == 4321)
                v = 99.0;
            if (i == 8765)
                v = -3.0;
            assert_int_equal(ty_buf_printf(&body, "%s{\"step\":%d,\"loss\":%.17g}",
                                           i == half * 5000 ? "" : ",", i, v),
                             TY_OK);
        }
        assert_int_equal(ty_buf_puts(&body, "]}"), TY_OK);
        assert_int_equal(ty_buf_append(&body, "", 1), TY_OK);
        f->ctx.max_body = 1u << 20;
        api_resp resp;
        json_t *b = report(f, id, body.data, &resp);
        assert_int_equal(resp.status, 200);
        assert_int_equal(json_integer_value(json_object_get(b, "accepted")), 5000);
        json_decref(b);
        api_resp_free(&resp);
        ty_buf_free(&body);
    }
    api_kv q[] = {{"name", "loss"}, {"max_points", "100"}};
    api_resp resp;
    json_t *b = read_metrics(f, id, q, 2, &resp);
    assert_int_equal(resp.status, 200);
    json_t *loss = series(b, "loss");
    assert_int_equal(json_integer_value(json_object_get(loss, "total_points")), 10000);
    json_t *pts = json_object_get(loss, "points");
    size_t n = json_array_size(pts);
    assert_true(n <= 100 && n >= 50);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 0), "step")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, n - 1), "step")),
                     9999);
    int saw_max = 0, saw_min = 0;
    for (size_t i = 0; i < n; i++) {
        json_int_t step = json_integer_value(json_object_get(json_array_get(pts, i), "step"));
        saw_max |= step == 4321;
        saw_min |= step == 8765;
    }
    assert_true(saw_max);
    assert_true(saw_min);
    json_decref(b);
    api_resp_free(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_report_then_read, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_points_listed, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_values_a_double_holds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_finished_jobs, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_queries, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_downsampled_through_the_api, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
