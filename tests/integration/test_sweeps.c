/*
 * test_sweeps.c - sweeps with the real `trainyard serve` over loopback: a
 * grid's trials created with it as labelled jobs, seeded random draws, the
 * best trial by the values trials report, cancel, a failed trial among
 * others, the bound on trials active at once, median early stopping, and the
 * 4xx answers.
 *
 * Usage: test_sweeps TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
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
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

#define DEADLINE_MS 60000

static ty_server *g_srv;
static ty_client *g_admin;

/* The queue "held" admits nothing: its trials stay PENDING. */
static void start_server(void)
{
    char err[1024];
    static const char *const args[] = {"--local-slots", "8",    "--stop-grace", "2",
                                       "--queue-limit", "held=0", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
}

static int setup(void **state)
{
    (void)state;
    start_server();
    return 0;
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

/* POSTs a sweep body; expects 201 and returns the Sweep (new); its id goes to id. */
static json_t *create(const char *body, char id[32])
{
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/sweeps", body);
    if (r->status != 201)
        fail_msg("POST /v1/sweeps: %ld %.400s", r->status, r->body);
    snprintf(id, 32, "%s", json_string_value(json_object_get(r->json, "id")));
    char want[64];
    snprintf(want, sizeof want, "/v1/sweeps/%s", id);
    assert_string_equal(ty_resp_header(r, "Location"), want);
    json_t *sw = json_incref(r->json);
    ty_resp_destroy(r);
    return sw;
}

static json_t *get_sweep(const char *id)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/sweeps/%s", id);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *sw = json_incref(r->json);
    ty_resp_destroy(r);
    return sw;
}

/* Polls the sweep until its state is `want`; returns it (new). */
static json_t *wait_sweep(const char *id, const char *want)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        json_t *sw = get_sweep(id);
        const char *st = json_string_value(json_object_get(sw, "state"));
        if (strcmp(st, want) == 0)
            return sw;
        if (ty_now_ms() > deadline)
            fail_msg("sweep %s: waiting for %s, it is %s", id, want, st);
        json_decref(sw);
        ty_sleep_ms(50);
    }
}

static json_int_t count(const json_t *sw, const char *state)
{
    return json_integer_value(json_object_get(json_object_get(sw, "counts"), state));
}

/* A request expecting `status` (and `code` for a problem); token NULL: the admin's. */
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

#define GRID12                                                                                 \
    "{\"name\": \"lr-grid\", \"algorithm\": \"grid\", \"parallelism\": 4,"                     \
    " \"parameters\": {\"lr\": [0.1, 0.01, 0.001], \"bs\": [16, 32, 64, 128]},"                \
    " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"                          \
    " \"template\": {\"name\": \"trial\", \"queue\": \"held\", \"command\": [\"train\"],"     \
    " \"args\": [\"--lr\", \"${lr}\", \"--batch\", \"${bs}\"], \"workers\": {\"count\": 1}}}"

static void test_grid_creates_every_trial_with_the_sweep(void **state)
{
    (void)state;
    char id[32], path[160];
    json_t *sw = create(GRID12, id);
    assert_string_equal(json_string_value(json_object_get(sw, "state")), "running");
    assert_int_equal(json_integer_value(json_object_get(sw, "trials_total")), 12);
    assert_int_equal(json_array_size(json_object_get(sw, "trials")), 12);
    assert_int_equal(count(sw, "PENDING"), 12);
    assert_true(json_is_null(json_object_get(sw, "best")));
    json_decref(sw);

    /* Right after the 201, all twelve are jobs, found by their sweep's label. */
    snprintf(path, sizeof path, "/v1/jobs?label=trainyard.io/sweep=%s&limit=100", id);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *jobs = json_object_get(r->json, "jobs");
    assert_int_equal(json_array_size(jobs), 12);
    int seen[12] = {0};
    for (size_t i = 0; i < 12; i++) {
        json_t *spec = json_object_get(json_array_get(jobs, i), "spec");
        json_t *labels = json_object_get(spec, "labels");
        int k = atoi(json_string_value(json_object_get(labels, "trainyard.io/sweep-trial")));
        assert_true(k >= 0 && k < 12);
        seen[k]++;
        /* Parameters in name order, the last varying fastest: bs = k / 3, lr = k % 3. */
        static const char *const bs[] = {"16", "32", "64", "128"};
        static const char *const lr[] = {"0.1", "0.01", "0.001"};
        assert_string_equal(json_string_value(json_object_get(labels, "param.trainyard.io/bs")),
                            bs[k / 3]);
        assert_string_equal(json_string_value(json_object_get(labels, "param.trainyard.io/lr")),
                            lr[k % 3]);
        json_t *args = json_object_get(spec, "args");
        assert_string_equal(json_string_value(json_array_get(args, 1)), lr[k % 3]);
        assert_string_equal(json_string_value(json_array_get(args, 3)), bs[k / 3]);
        assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, i), "state")),
                            "PENDING");
    }
    for (int k = 0; k < 12; k++)
        assert_int_equal(seen[k], 1);
    ty_resp_destroy(r);

    /* Listed, newest first. */
    char id2[32];
    json_decref(create(GRID12, id2));
    r = ty_req(g_admin, "GET", "/v1/sweeps?limit=1", NULL);
    assert_int_equal(r->status, 200);
    json_t *list = json_object_get(r->json, "sweeps");
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")), id2);
    snprintf(path, sizeof path, "/v1/sweeps?limit=1&page_token=%s",
             json_string_value(json_object_get(r->json, "next_page_token")));
    ty_resp_destroy(r);
    r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    list = json_object_get(r->json, "sweeps");
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")), id);
    assert_null(json_object_get(r->json, "next_page_token"));
    ty_resp_destroy(r);
}

/* Whether the file at path holds needle anywhere (0 when it does not exist). */
static int file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    size_t n = strlen(needle), len = 0, cap = 1 << 16, r;
    char *buf = malloc(cap);
    int found = 0;
    assert_non_null(buf);
    while (f && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    if (f)
        fclose(f);
    for (size_t i = 0; !found && len >= n && i <= len - n; i++)
        found = memcmp(buf + i, needle, n) == 0;
    free(buf);
    return found;
}

/*
 * A template's secret env value: every trial's ranks get it, nobody reads it back (the trials'
 * specs and the sweep show it null), and neither the database nor its WAL holds it in clear.
 */
static void test_secret_in_the_template(void **state)
{
    (void)state;
    static const char value[] = "sweep-secret-3c1f9e7a";
    char id[32], path[256];
    json_t *sw = create(
        "{\"name\": \"secret\", \"algorithm\": \"grid\", \"parameters\": {\"lr\": [0.1, 0.2]},"
        " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
        " \"template\": {\"name\": \"trial\", \"command\": [\"sh\", \"-c\","
        " \"echo key=$API_KEY lr=$1\", \"sh\"], \"args\": [\"${lr}\"],"
        " \"env\": {\"API_KEY\": {\"value\": \"sweep-secret-3c1f9e7a\", \"secret\": true}},"
        " \"workers\": {\"count\": 1}}}",
        id);
    char *text = json_dumps(sw, JSON_COMPACT);
    assert_null(strstr(text, value));
    free(text);
    json_decref(sw);
    json_decref(wait_sweep(id, "finished"));
    snprintf(path, sizeof path, "/v1/sweeps/%s", id);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    assert_null(strstr(r->body, value));
    ty_resp_destroy(r);

    snprintf(path, sizeof path, "/v1/jobs?label=trainyard.io/sweep=%s&limit=100", id);
    r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    assert_null(strstr(r->body, value));
    json_t *jobs = json_incref(json_object_get(r->json, "jobs"));
    ty_resp_destroy(r);
    assert_int_equal(json_array_size(jobs), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *job = json_array_get(jobs, i);
        const json_t *key = json_object_get(
            json_object_get(json_object_get(job, "spec"), "env"), "API_KEY");
        assert_true(json_is_null(json_object_get(key, "value")));
        assert_true(json_is_true(json_object_get(key, "secret")));
        snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=0",
                 json_string_value(json_object_get(job, "id")));
        r = ty_req(g_admin, "GET", path, NULL);
        assert_int_equal(r->status, 200);
        if (!strstr(r->body, "key=sweep-secret-3c1f9e7a lr=0."))
            fail_msg("trial %zu's log: '%s'", i, r->body);
        ty_resp_destroy(r);
    }
    json_decref(jobs);

    char err[512];
    int wstatus;
    if (ty_server_stop(g_srv, 60000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    snprintf(path, sizeof path, "%s-wal", ty_server_db(g_srv));
    assert_false(file_has(ty_server_db(g_srv), value));
    assert_false(file_has(path, value));
    assert_true(file_has(ty_server_db(g_srv), "echo key=$API_KEY")); /* the template is there */
}

#define RANDOM(seed)                                                                           \
    "{\"name\": \"rnd\", \"algorithm\": \"random\", \"trials\": 5, \"seed\": " seed ","        \
    " \"parameters\": {\"lr\": {\"log_uniform\": [0.0001, 0.1]},"                              \
    " \"layers\": {\"choice\": [1, 2, 3]}},"                                                   \
    " \"objective\": {\"metric\": \"acc\", \"goal\": \"maximize\"},"                           \
    " \"template\": {\"name\": \"trial\", \"queue\": \"held\", \"command\": [\"train\"],"     \
    " \"args\": [\"--lr=${lr}\", \"--layers=${layers}\"], \"workers\": {\"count\": 1}}}"

/* The parameters of every trial, as one compact JSON text (new). */
static char *trial_params(const json_t *sw)
{
    json_t *all = json_array();
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(sw, "trials"), i, t)
        json_array_append(all, json_object_get(t, "parameters"));
    char *s = json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(all);
    return s;
}

static void test_same_seed_same_trials(void **state)
{
    (void)state;
    char a[32], b[32], c[32];
    json_t *sa = create(RANDOM("7"), a), *sb = create(RANDOM("7"), b), *sc = create(RANDOM("8"), c);
    assert_string_not_equal(a, b);
    char *pa = trial_params(sa), *pb = trial_params(sb), *pc = trial_params(sc);
    assert_string_equal(pa, pb);
    assert_string_not_equal(pa, pc);
    assert_int_equal(json_array_size(json_object_get(sa, "trials")), 5);
    free(pa);
    free(pb);
    free(pc);
    json_decref(sa);
    json_decref(sb);
    json_decref(sc);
}

static void test_cancel_cancels_the_trials(void **state)
{
    (void)state;
    char id[32], path[128];
    json_decref(create(GRID12, id));
    snprintf(path, sizeof path, "/v1/sweeps/%s:cancel", id);
    ty_http_resp *r = ty_req(g_admin, "POST", path, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "state")), "cancelled");
    assert_int_equal(count(r->json, "CANCELLED"), 12);
    ty_resp_destroy(r);
    r = ty_req(g_admin, "POST", path, NULL); /* again: nothing changes */
    assert_int_equal(r->status, 200);
    assert_int_equal(count(r->json, "CANCELLED"), 12);
    ty_resp_destroy(r);
    /* The trials are cancelled jobs with their event. */
    json_t *sw = get_sweep(id);
    const char *job = json_string_value(
        json_object_get(json_array_get(json_object_get(sw, "trials"), 5), "job_id"));
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job);
    r = ty_req(g_admin, "GET", path, NULL);
    json_t *evs = json_object_get(r->json, "events");
    json_t *last = json_array_get(evs, json_array_size(evs) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "to")), "CANCELLED");
    assert_string_equal(json_string_value(json_object_get(last, "reason")), "Cancelled");
    ty_resp_destroy(r);
    json_decref(sw);
}

/* Trials that report their loss with curl (the variables every rank has), then exit. */
#define REPORT_THEN_EXIT                                                                       \
    "\"curl -sf -H \\\"Authorization: Bearer $TRAINYARD_TOKEN\\\" "                            \
    "-H 'Content-Type: application/json' "                                                     \
    "-d \\\"{\\\\\\\"points\\\\\\\":[{\\\\\\\"step\\\\\\\":3,\\\\\\\"loss\\\\\\\":${v}}]}\\\" " \
    "\\\"$TRAINYARD_SERVER/v1/jobs/$TRAINYARD_JOB_ID/metrics\\\" >/dev/null && exit ${code}\""

static void test_best_trial_and_a_failure(void **state)
{
    (void)state;
    char id[32];
    const char *body =
        "{\"name\": \"best\", \"algorithm\": \"grid\", \"parallelism\": 2,"
        " \"parameters\": {\"v\": [3.5, 1.25, 2], \"code\": [0, 1]},"
        " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
        " \"template\": {\"name\": \"trial\", \"command\": [\"sh\", \"-c\"],"
        " \"args\": [" REPORT_THEN_EXIT "], \"workers\": {\"count\": 1}}}";
    json_decref(create(body, id));
    json_t *sw = wait_sweep(id, "finished");
    /* Every trial ran: a failed one stopped no other. */
    assert_int_equal(count(sw, "SUCCEEDED"), 3);
    assert_int_equal(count(sw, "FAILED"), 3);
    json_t *best = json_object_get(sw, "best");
    assert_true(json_is_object(best));
    assert_true(json_number_value(json_object_get(best, "objective_value")) == 1.25);
    assert_int_equal(json_integer_value(json_object_get(best, "objective_step")), 3);
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(sw, "trials"), i, t)
    {
        double want = json_number_value(json_object_get(json_object_get(t, "parameters"), "v"));
        assert_true(json_number_value(json_object_get(t, "objective_value")) == want);
    }
    json_decref(sw);
}

static json_int_t active(const json_t *sw)
{
    return count(sw, "ADMITTED") + count(sw, "STARTING") + count(sw, "RUNNING") +
           count(sw, "RESTARTING") + count(sw, "CANCELLING");
}

static void test_parallelism_is_respected(void **state)
{
    (void)state;
    char id[32];
    const char *body = "{\"name\": \"par\", \"algorithm\": \"grid\", \"parallelism\": 2,"
                       " \"parameters\": {\"i\": [1, 2, 3, 4, 5, 6]},"
                       " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
                       " \"template\": {\"name\": \"trial\", \"command\": [\"sh\", \"-c\"],"
                       " \"args\": [\"sleep 0.2\"], \"workers\": {\"count\": 1}}}";
    json_decref(create(body, id));
    json_int_t most = 0;
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        json_t *sw = get_sweep(id);
        json_int_t a = active(sw);
        if (a > 2)
            fail_msg("%lld trials active at once, parallelism 2", (long long)a);
        if (a > most)
            most = a;
        int done = strcmp(json_string_value(json_object_get(sw, "state")), "finished") == 0;
        if (done)
            assert_int_equal(count(sw, "SUCCEEDED"), 6);
        json_decref(sw);
        if (done)
            break;
        if (ty_now_ms() > deadline)
            fail_msg("sweep %s did not finish", id);
        ty_sleep_ms(20);
    }
    assert_true(most >= 1);
}

/* Trials that report the loss they are given at step 1; the one given 5.0 then waits. */
#define REPORT_LOSS                                                                            \
    "\"curl -sf -H \\\"Authorization: Bearer $TRAINYARD_TOKEN\\\" "                            \
    "-H 'Content-Type: application/json' "                                                     \
    "-d \\\"{\\\\\\\"points\\\\\\\":[{\\\\\\\"step\\\\\\\":1,\\\\\\\"loss\\\\\\\":${loss}}]}\\\" " \
    "\\\"$TRAINYARD_SERVER/v1/jobs/$TRAINYARD_JOB_ID/metrics\\\" >/dev/null || exit 1; "         \
    "if [ ${loss} = 5.0 ]; then exec sleep 60; fi\""

static void test_median_stopping_stops_the_worse_trial(void **state)
{
    (void)state;
    char id[32];
    /* One trial at a time, in order: two succeed before the worse one reports. */
    const char *body =
        "{\"name\": \"median\", \"algorithm\": \"grid\", \"parallelism\": 1,"
        " \"parameters\": {\"loss\": [\"1.0\", \"1.2\", \"5.0\", \"0.9\"]},"
        " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
        " \"early_stopping\": {\"rule\": \"median\", \"min_trials\": 2},"
        " \"template\": {\"name\": \"trial\", \"command\": [\"sh\", \"-c\"],"
        " \"args\": [" REPORT_LOSS "], \"workers\": {\"count\": 1}}}";
    json_t *sw = create(body, id);
    json_t *es = json_object_get(sw, "early_stopping");
    assert_string_equal(json_string_value(json_object_get(es, "rule")), "median");
    assert_int_equal(json_integer_value(json_object_get(es, "min_trials")), 2);
    assert_int_equal(json_integer_value(json_object_get(es, "min_step")), 0);
    json_decref(sw);
    sw = wait_sweep(id, "finished");
    json_t *trials = json_object_get(sw, "trials");
    static const char *const want[] = {"SUCCEEDED", "SUCCEEDED", "CANCELLED", "SUCCEEDED"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(trials, i), "state")), want[i]);
    /* Why is in the stopped trial's history. */
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s/events",
             json_string_value(json_object_get(json_array_get(trials, 2), "job_id")));
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    int found = 0;
    json_t *ev;
    size_t i;
    json_array_foreach(json_object_get(r->json, "events"), i, ev)
        found |= strcmp(json_string_value(json_object_get(ev, "reason")), "EarlyStopped") == 0;
    assert_true(found);
    ty_resp_destroy(r);
    assert_true(json_number_value(json_object_get(json_object_get(sw, "best"),
                                                  "objective_value")) == 0.9);
    json_decref(sw);
}

static void test_refusals(void **state)
{
    (void)state;
    expect(NULL, "POST", "/v1/sweeps",
           "{\"name\": \"x\", \"algorithm\": \"bayes\", \"parameters\": {},"
           " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
           " \"template\": {\"name\": \"t\", \"command\": [\"train\"]}}",
           422, "invalid-spec");
    expect(NULL, "POST", "/v1/sweeps",
           "{\"name\": \"x\", \"algorithm\": \"grid\", \"parameters\": {\"lr\": [1]},"
           " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
           " \"early_stopping\": {\"rule\": \"mean\"},"
           " \"template\": {\"name\": \"t\", \"command\": [\"train\"], \"args\": [\"${nope}\"]}}",
           422, "invalid-spec");
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/sweeps",
                             "{\"name\": \"x\", \"algorithm\": \"grid\", \"parameters\": "
                             "{\"lr\": [1]}, \"objective\": {\"metric\": \"loss\", \"goal\": "
                             "\"minimize\"}, \"early_stopping\": {\"rule\": \"mean\"},"
                             " \"template\": {\"name\": \"t\", \"command\": [\"train\"],"
                             " \"args\": [\"${nope}\"]}}");
    assert_int_equal(r->status, 422);
    char *errs = json_dumps(json_object_get(r->json, "errors"), JSON_COMPACT);
    assert_non_null(strstr(errs, "$.early_stopping.rule"));
    assert_non_null(strstr(errs, "$.template.args[0]"));
    free(errs);
    ty_resp_destroy(r);
    expect(NULL, "POST", "/v1/sweeps", "{\"name\": ", 400, "malformed-json");
    expect(NULL, "GET", "/v1/sweeps/0000000000000000000000000z", NULL, 404, "sweep-not-found");
    expect(NULL, "GET", "/v1/sweeps/nope", NULL, 404, "sweep-not-found");
    expect(NULL, "POST", "/v1/sweeps/0000000000000000000000000z:cancel", NULL, 404,
           "sweep-not-found");
    expect(NULL, "GET", "/v1/sweeps?limit=0", NULL, 400, "invalid-query");
    /* Nothing was created by any of them. */
    r = ty_req(g_admin, "GET", "/v1/jobs", NULL);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 0);
    ty_resp_destroy(r);

    /* A read token sees sweeps but cannot create or cancel one. */
    r = ty_req(g_admin, "POST", "/v1/tokens", "{\"name\": \"reader\", \"scopes\": [\"read\"]}");
    assert_int_equal(r->status, 201);
    char reader[128];
    snprintf(reader, sizeof reader, "%s", json_string_value(json_object_get(r->json, "token")));
    ty_resp_destroy(r);
    char id[32], path[96];
    json_decref(create(GRID12, id));
    expect(reader, "POST", "/v1/sweeps", GRID12, 403, NULL);
    snprintf(path, sizeof path, "/v1/sweeps/%s:cancel", id);
    expect(reader, "POST", path, NULL, 403, NULL);
    snprintf(path, sizeof path, "/v1/sweeps/%s", id);
    expect(reader, "GET", path, NULL, 200, NULL);
    expect(reader, "GET", "/v1/sweeps", NULL, 200, NULL);
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grid_creates_every_trial_with_the_sweep, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_same_seed_same_trials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_cancels_the_trials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best_trial_and_a_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallelism_is_respected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_median_stopping_stops_the_worse_trial, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_in_the_template, setup, teardown),
    };
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "test_sweeps: %s\n", err);
        return 2;
    }
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
