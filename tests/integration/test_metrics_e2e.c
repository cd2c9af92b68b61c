/*
 * test_metrics_e2e.c - a training job reports its loss curve, end to end: the real
 * `trainyard serve` (local backend, ranks sandboxed as in production) runs a 2-rank
 * `trainyard-worker train` job on a small synthetic data set; rank 0 reports with the
 * job's own token (TRAINYARD_TOKEN, TRAINYARD_SERVER from the scheduler); once the job has
 * SUCCEEDED, GET /v1/jobs/{id}/metrics reads the series back.
 *
 * Usage: test_metrics_e2e TRAINYARD_BINARY OPENAPI_YAML (CTest passes both). Every
 * response is checked against openapi.yaml by the harness. Deadlines only bound a hang;
 * nothing asserts how long anything took. Where the machine cannot sandbox jobs the case
 * skips, saying why (as test_jobs_run's sandbox cases do).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "tests/runtime/rt_testdata.h"
#include "tests/support/ty_harness.h"

#define DEADLINE_MS 180000 /* for the job to end */
#define N_TRAIN 2048
#define N_TEST 256

/* GET path with the client's token, expecting 200; the body (new). */
static json_t *get_json(ty_client *c, const char *path)
{
    ty_http_resp *r = ty_req(c, "GET", path, NULL);
    if (r->status != 200)
        fail_msg("GET %s: HTTP %ld: %.400s", path, r->status, r->body);
    json_t *j = json_incref(r->json);
    assert_non_null(j);
    ty_resp_destroy(r);
    return j;
}

/* The rank's log (new text). */
static char *rank_log(ty_client *c, const char *id, int rank)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=%d", id, rank);
    ty_http_resp *r = ty_req(c, "GET", path, NULL);
    char *text = strdup(r->status == 200 && r->body ? r->body : "");
    assert_non_null(text);
    ty_resp_destroy(r);
    return text;
}

/* Polls the job until it is SUCCEEDED; fails with its ranks' logs if it ends otherwise. */
static void wait_succeeded(ty_client *c, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        json_t *job = get_json(c, path);
        char state[32];
        snprintf(state, sizeof state, "%s", ty_json_str(job, "state") ? ty_json_str(job, "state")
                                                                     : "?");
        json_decref(job);
        if (strcmp(state, "SUCCEEDED") == 0)
            return;
        if (strcmp(state, "FAILED") == 0 || strcmp(state, "CANCELLED") == 0 ||
            ty_now_ms() > deadline) {
            char *l0 = rank_log(c, id, 0), *l1 = rank_log(c, id, 1);
            fail_msg("job %s is %s; rank 0:\n%.3000s\nrank 1:\n%.1500s", id, state, l0, l1);
        }
        ty_sleep_ms(100);
    }
}

/* The one series of GET /v1/jobs/{id}/metrics?name=NAME (new). */
static json_t *series(ty_client *c, const char *id, const char *name)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics?name=%s", id, name);
    json_t *body = get_json(c, path);
    assert_string_equal(ty_json_str(body, "job_id"), id);
    json_t *all = json_object_get(body, "series");
    if (json_array_size(all) != 1)
        fail_msg("%s: %zu series, expected one", path, json_array_size(all));
    json_t *s = json_incref(json_array_get(all, 0));
    json_decref(body);
    assert_string_equal(ty_json_str(s, "name"), name);
    return s;
}

static void test_worker_reports_loss(void **state)
{
    (void)state;
    char err[2048];
    ty_server *srv = NULL;
    if (ty_server_start(NULL, &srv, err, sizeof err) < 0) {
        if (strstr(err, "local sandbox:")) {
            print_message("skipped: this machine cannot sandbox jobs: %s\n",
                          strstr(err, "local sandbox:"));
            ty_server_free(srv);
            skip();
        }
        fail_msg("%s", err);
    }
    /* The data set where every job reads (TRAINYARD_DATA_DIR, read-only in the sandbox). */
    char data[4096];
    snprintf(data, sizeof data, "%s/datasets/e2e", ty_server_dir(srv));
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(rt_write_dataset(data, N_TRAIN, N_TEST, 11), 0);
    ty_client *c = ty_client_new(srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);

    /* 3 epochs of 16 steps, a log line every 4 steps: 12 loss points and the final one. */
    static const char script[] =
        "exec trainyard-worker train --data \"$TRAINYARD_DATA_DIR/e2e\" --epochs 3 "
        "--batch 128 --log-every 4 --threads 1";
    json_t *spec = json_pack("{s:s, s:[s,s,s], s:{s:i}, s:{s:i}}", "name", "metrics-e2e",
                             "command", "sh", "-c", script, "workers", "count", 2, "restart",
                             "max", 0);
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    ty_http_resp *r = ty_req(c, "POST", "/v1/jobs", body);
    free(body);
    if (r->status != 201)
        fail_msg("submit: HTTP %ld: %.400s", r->status, r->body);
    char id[64];
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);

    wait_succeeded(c, id);

    /* Rank 0 sent every point it logged, and only rank 0 reported. */
    char *log0 = rank_log(c, id, 0), *log1 = rank_log(c, id, 1);
    const char *line = strstr(log0, "reporting: ");
    if (!line || !strstr(line, " points sent, 0 dropped"))
        fail_msg("rank 0 did not report everything:\n%.3000s", log0);
    assert_null(strstr(log1, "reporting: "));
    free(log0);
    free(log1);

    json_t *loss = series(c, id, "loss");
    json_t *pts = json_object_get(loss, "points");
    size_t n = json_array_size(pts);
    if (n < 2)
        fail_msg("loss series of %zu points", n);
    assert_int_equal(json_integer_value(json_object_get(loss, "total_points")), (json_int_t)n);
    json_int_t prev = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(pts, i);
        json_int_t step = json_integer_value(json_object_get(p, "step"));
        if (step <= prev)
            fail_msg("loss point %zu: step %lld after %lld", i, (long long)step, (long long)prev);
        prev = step;
        assert_true(json_is_number(json_object_get(p, "value")));
        assert_non_null(ty_json_str(p, "time"));
    }
    double first = json_number_value(json_object_get(json_array_get(pts, 0), "value"));
    double last = json_number_value(json_object_get(json_array_get(pts, n - 1), "value"));
    if (!(last < first))
        fail_msg("the loss did not fall: %g at the first step, %g at the last", first, last);
    /* The last point is the done line's: the run's final step. */
    assert_int_equal(prev, 48);
    json_decref(loss);

    /* The test accuracy, evaluated once at the end. */
    json_t *acc = series(c, id, "accuracy");
    assert_int_equal(json_array_size(json_object_get(acc, "points")), 1);
    json_decref(acc);

    int wstatus = 0;
    if (ty_server_stop(srv, 30000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    assert_int_equal(wstatus, 0);
    ty_client_free(c);
    ty_server_free(srv);
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "test_metrics_e2e: %s\n", err);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_reports_loss),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
