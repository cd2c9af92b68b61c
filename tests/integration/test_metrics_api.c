/*
 * test_metrics_api.c - job tokens and metrics with the real `trainyard serve`
 * over loopback: what a job's TRAINYARD_TOKEN may and may not do, that it
 * stops working when its job ends, and a job that reports its own loss with
 * one curl call, read back through the API.
 *
 * Usage: test_metrics_api TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
 * Every response is checked against openapi.yaml by the harness. Deadlines
 * only bound a hang; nothing asserts how long anything took.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

#define DEADLINE_MS 60000

static ty_server *g_srv;
static ty_client *g_admin;

static void start_server_with(const char *const *args)
{
    char err[1024];
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
}

static void start_server(void)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "2", NULL};
    start_server_with(args);
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_admin);
    g_admin = NULL;
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

/* Stops the server with SIGTERM; it must exit 0. */
static void stop_server(void)
{
    char err[512];
    int ws = 0;
    if (ty_server_stop(g_srv, 30000, &ws, err, sizeof err))
        fail_msg("stopping the server: %s", err);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* Submits a one-rank job running `sh -c script`; its id goes to id. */
static void submit(const char *name, const char *script, char id[32])
{
    json_t *spec = json_pack("{s:s, s:[s,s,s], s:{s:i}}", "name", name, "command", "sh", "-c",
                             script, "workers", "count", 1);
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
    free(body);
    assert_int_equal(r->status, 201);
    snprintf(id, 32, "%s", json_string_value(json_object_get(r->json, "id")));
    ty_resp_destroy(r);
}

static void wait_state(const char *id, const char *want)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
        assert_int_equal(r->status, 200);
        char state[32];
        snprintf(state, sizeof state, "%s",
                 json_string_value(json_object_get(r->json, "state")));
        ty_resp_destroy(r);
        if (strcmp(state, want) == 0)
            return;
        if (ty_now_ms() > deadline)
            fail_msg("job %s: waiting for %s, it is %s", id, want, state);
        ty_sleep_ms(50);
    }
}

/* The token the job wrote to its output directory (the script below). */
static void read_token(const char *id, char *token, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/jobs/%s/output/token", ty_server_dir(g_srv), id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    FILE *fp;
    while (!(fp = fopen(path, "r"))) {
        if (ty_now_ms() > deadline)
            fail_msg("job %s never wrote its token", id);
        ty_sleep_ms(50);
    }
    assert_non_null(fgets(token, (int)len, fp));
    fclose(fp);
    token[strcspn(token, "\n")] = '\0';
}

/* A request with `token`, the given body, expecting `status` (and `code` for a problem). */
static void expect(const char *token, const char *method, const char *path, const char *body,
                   long status, const char *code)
{
    ty_http_req req = {.method = method, .path = path, .token = token, .body = body};
    ty_http_resp *r = ty_reqx(g_admin, &req);
    if (r->status != status)
        fail_msg("%s %s: %ld, want %ld: %.300s", method, path, r->status, status, r->body);
    if (code)
        assert_string_equal(json_string_value(json_object_get(r->json, "code")), code);
    ty_resp_destroy(r);
}

#define TOKEN_SCRIPT                                                                           \
    "printf '%s\\n' \"$TRAINYARD_TOKEN\" > \"$TRAINYARD_OUTPUT_DIR/token.tmp\" && "             \
    "mv \"$TRAINYARD_OUTPUT_DIR/token.tmp\" \"$TRAINYARD_OUTPUT_DIR/token\" && exec sleep 1000"

static const char POINT[] = "{\"points\":[{\"step\":1,\"loss\":0.5}]}";

/* A job token reports for its job only, can do nothing else, and dies with its job. */
static void test_job_token_reports_for_its_job_only(void **state)
{
    (void)state;
    start_server();
    char a[32], b[32], ta[128], tb[128], path[128], other[128];
    submit("token-a", TOKEN_SCRIPT, a);
    submit("token-b", TOKEN_SCRIPT, b);
    read_token(a, ta, sizeof ta);
    read_token(b, tb, sizeof tb);
    assert_int_equal(strncmp(ta, "ty_", 3), 0);
    assert_string_not_equal(ta, tb);

    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", a);
    snprintf(other, sizeof other, "/v1/jobs/%s/metrics", b);
    expect(ta, "POST", path, POINT, 200, NULL);
    expect(ta, "POST", other, POINT, 403, "forbidden");   /* another job's */
    expect(ta, "GET", path, NULL, 403, "forbidden");      /* reading is not reporting */
    expect(ta, "GET", "/v1/jobs", NULL, 403, "forbidden");
    expect(ta, "POST", "/v1/jobs", "{\"command\":[\"true\"],\"workers\":{\"count\":1}}", 403,
           "forbidden");
    char cancel[96];
    snprintf(cancel, sizeof cancel, "/v1/jobs/%s:cancel", b);
    expect(ta, "POST", cancel, NULL, 403, "forbidden");
    expect(ta, "GET", "/v1/tokens", NULL, 403, "forbidden");
    expect("ty_not_a_token_of_anything", "POST", path, POINT, 401, "unauthorized");
    /* An admin token may report for any job. */
    expect(TY_TEST_ADMIN_TOKEN, "POST", other, POINT, 200, NULL);

    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *loss = json_array_get(json_object_get(r->json, "series"), 0);
    assert_string_equal(json_string_value(json_object_get(loss, "name")), "loss");
    assert_int_equal(json_integer_value(json_object_get(loss, "total_points")), 1);
    ty_resp_destroy(r);

    /* A ends: its token stops at once; B's still works. */
    snprintf(cancel, sizeof cancel, "/v1/jobs/%s:cancel", a);
    r = ty_req(g_admin, "POST", cancel, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    wait_state(a, "CANCELLED");
    expect(ta, "POST", path, POINT, 401, "unauthorized");
    expect(tb, "POST", other, POINT, 200, NULL);
    /* and an admin's report for the finished job is refused. */
    expect(TY_TEST_ADMIN_TOKEN, "POST", path, POINT, 409, "job-finished");

    snprintf(cancel, sizeof cancel, "/v1/jobs/%s:cancel", b);
    r = ty_req(g_admin, "POST", cancel, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    wait_state(b, "CANCELLED");
    expect(tb, "POST", other, POINT, 401, "unauthorized");
    stop_server();
}

/* The one line a job runs to report (README): curl with the variables every rank has. */
#define CURL_REPORT                                                                            \
    "for s in 0 1 2; do curl -sf -H \"Authorization: Bearer $TRAINYARD_TOKEN\" "               \
    "-H 'Content-Type: application/json' "                                                     \
    "-d \"{\\\"points\\\":[{\\\"step\\\":$s,\\\"loss\\\":$((3 - s)).5}]}\" "                  \
    "\"$TRAINYARD_SERVER/v1/jobs/$TRAINYARD_JOB_ID/metrics\" >/dev/null || exit 1; done"

static void test_job_reports_with_curl(void **state)
{
    (void)state;
    start_server();
    char id[32], path[128];
    submit("curl-reporter", CURL_REPORT, id);
    wait_state(id, "SUCCEEDED");
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics?name=loss", id);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *loss = json_array_get(json_object_get(r->json, "series"), 0);
    json_t *pts = json_object_get(loss, "points");
    assert_int_equal(json_array_size(pts), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *p = json_array_get(pts, i);
        assert_int_equal(json_integer_value(json_object_get(p, "step")), (json_int_t)i);
        assert_true(json_number_value(json_object_get(p, "value")) == 3.5 - (double)i);
    }
    ty_resp_destroy(r);
    stop_server();
}

/* A POST of body with `token`; the response (ty_resp_destroy() it). */
static ty_http_resp *post(const char *token, const char *path, const char *body)
{
    ty_http_req req = {.method = "POST", .path = path, .token = token, .body = body};
    return ty_reqx(g_admin, &req);
}

/* The 422 of one bad member: its code and the path of its one error. */
static void expect_invalid(const char *token, const char *path, const char *body,
                           const char *at)
{
    ty_http_resp *r = post(token, path, body);
    if (r->status != 422)
        fail_msg("%s: %ld, want 422: %.300s", body, r->status, r->body);
    assert_string_equal(json_string_value(json_object_get(r->json, "code")), "invalid-metrics");
    json_t *errors = json_object_get(r->json, "errors");
    assert_int_equal(json_array_size(errors), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(errors, 0), "path")),
                        at);
    ty_resp_destroy(r);
}

static json_int_t series_points(const char *id, const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics?name=%s", id, name);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *ser = json_array_get(json_object_get(r->json, "series"), 0);
    json_int_t n = json_integer_value(json_object_get(ser, "total_points"));
    ty_resp_destroy(r);
    return n;
}

/*
 * A job that floods metrics with its own token stops at the points cap set by the flag: the
 * report that would cross it is a 413 naming the cap with nothing of it stored, what was
 * stored stays readable, and stored steps may still be written again. Values a double cannot
 * hold, and steps out of range, are 422 naming the member.
 */
static void test_flood_stops_at_the_cap(void **state)
{
    (void)state;
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "2",
                                       "--metrics-max-points-per-job", "100", NULL};
    start_server_with(args);
    char id[32], token[128], path[128];
    submit("flood", TOKEN_SCRIPT, id);
    read_token(id, token, sizeof token);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", id);

    /* Reports of 8 steps of two series (16 points) until the server says no. */
    int accepted = 0, step = 0;
    ty_http_resp *r = NULL;
    for (int i = 0; i < 50; i++, step += 8) {
        char body[1024];
        size_t n = (size_t)snprintf(body, sizeof body, "{\"points\":[");
        for (int k = 0; k < 8; k++)
            n += (size_t)snprintf(body + n, sizeof body - n,
                                  "%s{\"step\":%d,\"loss\":%d.5,\"acc\":0.25}", k ? "," : "",
                                  step + k, step + k);
        snprintf(body + n, sizeof body - n, "]}");
        r = post(token, path, body);
        if (r->status != 200)
            break;
        accepted++;
        ty_resp_destroy(r);
        r = NULL;
    }
    assert_non_null(r);
    if (r->status != 413)
        fail_msg("past the cap: %ld, want 413: %.300s", r->status, r->body);
    assert_string_equal(json_string_value(json_object_get(r->json, "code")), "metrics-cap");
    assert_int_equal(json_integer_value(json_object_get(r->json, "limit")), 100);
    assert_non_null(strstr(json_string_value(json_object_get(r->json, "detail")), "100"));
    ty_resp_destroy(r);
    assert_int_equal(accepted, 6); /* 96 points; 16 more would make 112 */
    assert_int_equal(series_points(id, "loss"), 48);
    assert_int_equal(series_points(id, "acc"), 48);

    /* Nothing half-written: 4 new points fit, but not with the 20 that follow them. */
    expect(token, "POST", path,
           "{\"points\":[{\"step\":1000,\"loss\":1,\"acc\":1},"
           "{\"step\":1001,\"loss\":1,\"acc\":1},"
           "{\"step\":1002,\"loss\":1,\"acc\":1}]}",
           413, "metrics-cap");
    assert_int_equal(series_points(id, "loss"), 48);
    /* A stored step written again counts nothing; what fits still goes in. */
    expect(token, "POST", path, "{\"points\":[{\"step\":0,\"loss\":9,\"acc\":9}]}", 200,
           NULL);
    expect(token, "POST", path, "{\"points\":[{\"step\":2000,\"loss\":1,\"acc\":1}]}",
           200, NULL);
    expect(token, "POST", path, "{\"points\":[{\"step\":2001,\"loss\":1,\"acc\":1}]}",
           200, NULL);
    expect(token, "POST", path, "{\"points\":[{\"step\":2002,\"loss\":1}]}", 413,
           "metrics-cap");
    assert_int_equal(series_points(id, "loss"), 50);
    assert_int_equal(series_points(id, "acc"), 50);

    /* Values no double holds, and steps out of range: 422 at the member, never stored. */
    expect_invalid(token, path, "{\"points\":[{\"step\":0,\"loss\":1e400}]}",
                   "$.points[0].loss");
    expect_invalid(token, path, "{\"points\":[{\"step\":1,\"acc\":0.5},"
                                "{\"step\":0,\"loss\":-1e400}]}",
                   "$.points[1].loss");
    expect_invalid(token, path, "{\"points\":[{\"step\":0,\"loss\":1e308}]}",
                   "$.points[0].loss");
    expect_invalid(token, path,
                   "{\"points\":[{\"step\":0,\"loss\":100000000000000000000}]}",
                   "$.points[0].loss");
    expect_invalid(token, path, "{\"points\":[{\"step\":0,\"loss\":\"NaN\"}]}",
                   "$.points[0].loss");
    /* What Python's json module writes for a float that is not finite: not JSON, yet the
     * point is named rather than the whole body refused. */
    expect_invalid(token, path, "{\"points\":[{\"step\":0,\"loss\":NaN}]}",
                   "$.points[0].loss");
    expect_invalid(token, path, "{\"points\":[{\"step\":0, \"loss\": Infinity}]}",
                   "$.points[0].loss");
    expect_invalid(token, path,
                   "{\"points\":[{\"step\":0,\"a\":1},{\"step\":1,\"acc\":-Infinity}]}",
                   "$.points[1].acc");
    expect(token, "POST", path, "{\"points\":[{\"step\":0,\"loss\":NaN}],}", 400,
           "malformed-json");
    expect(token, "POST", path, "{\"points\":[{\"step\":NaN,\"loss\":1}]]", 400,
           "malformed-json");
    expect_invalid(token, path, "{\"points\":[{\"step\":-1,\"loss\":1}]}",
                   "$.points[0].step");
    expect_invalid(token, path, "{\"points\":[{\"step\":1.5,\"loss\":1}]}",
                   "$.points[0].step");
    expect_invalid(token, path, "{\"points\":[{\"step\":9007199254740992,\"loss\":1}]}",
                   "$.points[0].step");
    expect_invalid(token, path, "{\"points\":[{\"step\":1e400,\"loss\":1}]}",
                   "$.points[0].step");
    /* The largest magnitudes below the bound are stored as sent. */
    expect(token, "POST", path, "{\"points\":[{\"step\":0,\"loss\":-9.5e307}]}", 200,
           NULL);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics?name=loss&max_points=2", id);
    r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *first = json_array_get(
        json_object_get(json_array_get(json_object_get(r->json, "series"), 0), "points"), 0);
    assert_true(json_number_value(json_object_get(first, "value")) == -9.5e307);
    ty_resp_destroy(r);

    char cancel[96];
    snprintf(cancel, sizeof cancel, "/v1/jobs/%s:cancel", id);
    r = ty_req(g_admin, "POST", cancel, NULL);
    assert_int_equal(r->status, 200);
    ty_resp_destroy(r);
    wait_state(id, "CANCELLED");
    assert_int_equal(series_points(id, "loss"), 50); /* readable after the end too */
    stop_server();
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_job_token_reports_for_its_job_only, teardown),
        cmocka_unit_test_teardown(test_job_reports_with_curl, teardown),
        cmocka_unit_test_teardown(test_flood_stops_at_the_cap, teardown),
    };
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "test_metrics_api: %s\n", err);
        return 2;
    }
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
