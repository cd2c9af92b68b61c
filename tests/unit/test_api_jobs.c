/*
 * test_api_jobs.c - api/jobs.c: the /v1/jobs handlers against a real store in
 * a temporary directory; every response is checked against openapi.yaml by
 * the fixture.
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

#define MINIMAL                                                                                    \
    "{\"name\":\"train\",\"image\":\"img\",\"command\":[\"run\"],\"workers\":{\"count\":2}}"

static void test_submit_get_events(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *job = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = MINIMAL}, &resp);
    assert_int_equal(resp.status, 201);
    const char *id = json_string_value(json_object_get(job, "id"));
    assert_int_equal(strlen(id), STORE_ID_LEN);
    char location[64];
    snprintf(location, sizeof location, "/v1/jobs/%s", id);
    assert_string_equal(fx_header(&resp, "Location"), location);
    assert_string_equal(json_string_value(json_object_get(job, "state")), "PENDING");
    assert_string_equal(json_string_value(json_object_get(job, "queue")), "default");
    assert_int_equal(json_integer_value(json_object_get(job, "attempt")), 0);
    assert_true(json_is_integer(json_object_get(job, "restarts")));
    assert_int_equal(json_integer_value(json_object_get(job, "restarts")), 0);
    assert_true(json_is_null(json_object_get(job, "current_attempt")));
    json_t *spec = json_object_get(job, "spec");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "workers"), "min")),
                     2);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(spec, "resources"), "memory")), "2Gi");
    api_resp_free(&resp);

    /* GET returns the same job. */
    json_t *got = fx_call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    assert_true(json_equal(got, job));
    json_decref(got);
    api_resp_free(&resp);

    /* Its history starts with null -> PENDING, Submitted. */
    json_t *ev = fx_call(f, "GET", "/v1/jobs/{id}/events", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    json_t *events = json_object_get(ev, "events");
    assert_int_equal(json_array_size(events), 1);
    json_t *first = json_array_get(events, 0);
    assert_true(json_is_null(json_object_get(first, "from")));
    assert_string_equal(json_string_value(json_object_get(first, "to")), "PENDING");
    assert_string_equal(json_string_value(json_object_get(first, "reason")), "Submitted");
    json_decref(ev);
    api_resp_free(&resp);
    json_decref(job);
}

/* The local backend runs no image: a spec may leave it out, and it is stored as null. */
static void test_image_is_optional(void **state)
{
    fixture *f = *state;
    api_resp resp;
    const char *body = "{\"name\":\"local\",\"command\":[\"run\"],\"workers\":{\"count\":1}}";
    json_t *job = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
    assert_int_equal(resp.status, 201);
    json_t *image = json_object_get(json_object_get(job, "spec"), "image");
    assert_non_null(image);
    assert_true(json_is_null(image));
    json_decref(job);
    api_resp_free(&resp);
}

static void test_unknown_job_is_404(void **state)
{
    fixture *f = *state;
    static const char *const ids[] = {"00000000000000000000000000", "short",
                                      "UPPERCASE0000000000000000X", "0000000000000000000000000'",
                                      "x';DROP TABLE jobs;--"};
    static const char *const routes[][2] = {{"GET", "/v1/jobs/{id}"},
                                            {"GET", "/v1/jobs/{id}/events"},
                                            {"GET", "/v1/jobs/{id}/attempts"},
                                            {"GET", "/v1/jobs/{id}/logs"},
                                            {"POST", "/v1/jobs/{id}:cancel"}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        for (size_t r = 0; r < sizeof routes / sizeof routes[0]; r++) {
            api_resp resp;
            json_t *p = fx_call(f, routes[r][0], routes[r][1], &(fx_req){.id = ids[i]}, &resp);
            fx_expect_problem(&resp, p, 404, "job-not-found");
            json_decref(p);
            api_resp_free(&resp);
        }
    }
}

static void test_media_type(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *ct;
        unsigned status;
    } cases[] = {
        {NULL, 415},
        {"text/plain", 415},
        {"application/jsonx", 415},
        {"application/x-www-form-urlencoded", 415},
        {"application/json", 201},
        {"application/json; charset=utf-8", 201},
        {"Application/JSON;charset=UTF-8", 201},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        fx_req r = {.body = MINIMAL, .content_type = cases[i].ct, .no_content_type = !cases[i].ct};
        json_t *j = fx_call(f, "POST", "/v1/jobs", &r, &resp);
        if (cases[i].status == 415)
            fx_expect_problem(&resp, j, 415, "unsupported-media-type");
        else
            assert_int_equal(resp.status, cases[i].status);
        json_decref(j);
        api_resp_free(&resp);
    }
}

static void test_body_too_large(void **state)
{
    fixture *f = *state;
    api_resp resp;
    f->ctx.max_body = 16;
    json_t *p = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = MINIMAL}, &resp);
    fx_expect_problem(&resp, p, 413, "body-too-large");
    json_decref(p);
    api_resp_free(&resp);
    p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = MINIMAL}, &resp);
    fx_expect_problem(&resp, p, 413, "body-too-large");
    json_decref(p);
    api_resp_free(&resp);
    f->ctx.max_body = API_DEFAULT_MAX_BODY;
}

static void test_malformed_bodies_are_400(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *body;
        size_t len;
    } cases[] = {
        {"", 0},
        {"{", 1},
        {"{\"name\":\"a\",\"name\":\"b\"}", 23},
        {"{\"name\":\"a\0b\"}", 14},
        {"{\"name\":\"\xff\"}", 12},
        {"{\"name\":\"\\u0000\"}", 17},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 70},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        fx_req r = {.body = cases[i].body, .body_len = cases[i].len};
        if (cases[i].len == 0)
            r.body = "";
        json_t *p = fx_call(f, "POST", "/v1/jobs", &r, &resp);
        fx_expect_problem(&resp, p, 400, "malformed-json");
        json_t *e0 = json_array_get(json_object_get(p, "errors"), 0);
        assert_string_equal(json_string_value(json_object_get(e0, "path")), "$");
        assert_non_null(strstr(json_string_value(json_object_get(e0, "message")), "line"));
        json_decref(p);
        api_resp_free(&resp);
    }
}

static void test_invalid_spec_is_422_with_every_error(void **state)
{
    fixture *f = *state;
    api_resp resp;
    const char *body = "{\"name\":\"Bad\",\"image\":\"\",\"command\":[\"x\"],"
                       "\"workers\":{\"count\":99999999999999999999999},\"colour\":\"red\"}";
    json_t *p = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    json_t *errors = json_object_get(p, "errors");
    assert_int_equal(json_array_size(errors), 4);
    const char *want[] = {"$.colour", "$.name", "$.image", "$.workers.count"};
    for (size_t i = 0; i < 4; i++) {
        int found = 0;
        size_t k;
        json_t *e;
        json_array_foreach(errors, k, e) found |=
            strcmp(json_string_value(json_object_get(e, "path")), want[i]) == 0;
        assert_true(found);
    }
    json_decref(p);
    api_resp_free(&resp);
}

static void test_idempotency(void **state)
{
    fixture *f = *state;
    api_resp resp;
    fx_req r = {.body = MINIMAL, .idem = "key-1"};
    json_t *a = fx_call(f, "POST", "/v1/jobs", &r, &resp);
    assert_int_equal(resp.status, 201);
    api_resp_free(&resp);

    /* Same key, same bytes: the first job, 200. */
    json_t *b = fx_call(f, "POST", "/v1/jobs", &r, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(a, "id")),
                        json_string_value(json_object_get(b, "id")));
    assert_non_null(fx_header(&resp, "Location"));
    json_decref(b);
    api_resp_free(&resp);

    /* Same key, other bytes (even an equivalent spec): 409. */
    fx_req other = {.body = "{\"name\":\"train\",\"image\":\"img\",\"command\":[\"run\"],"
                            "\"workers\":{\"count\":2} }",
                    .idem = "key-1"};
    json_t *p = fx_call(f, "POST", "/v1/jobs", &other, &resp);
    fx_expect_problem(&resp, p, 409, "idempotency-key-reused");
    json_decref(p);
    api_resp_free(&resp);

    /* The key is scoped by the caller: another token gets its own job. */
    fx_req someone = {.body = MINIMAL, .idem = "key-1", .principal = "someone-else"};
    json_t *c = fx_call(f, "POST", "/v1/jobs", &someone, &resp);
    assert_int_equal(resp.status, 201);
    assert_string_not_equal(json_string_value(json_object_get(a, "id")),
                            json_string_value(json_object_get(c, "id")));
    json_decref(c);
    api_resp_free(&resp);

    json_decref(a);

    /* Bad keys. */
    char long_key[300];
    memset(long_key, 'k', 256);
    long_key[256] = '\0';
    const char *bad[] = {"", long_key, "tab\there", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx_req k = {.body = MINIMAL, .idem = bad[i]};
        p = fx_call(f, "POST", "/v1/jobs", &k, &resp);
        fx_expect_problem(&resp, p, 400, "invalid-idempotency-key");
        json_decref(p);
        api_resp_free(&resp);
    }
    long_key[255] = '\0';
    fx_req ok = {.body = MINIMAL, .idem = long_key};
    p = fx_call(f, "POST", "/v1/jobs", &ok, &resp);
    assert_int_equal(resp.status, 201);
    json_decref(p);
    api_resp_free(&resp);
}

/* Number of jobs a list query returns on its first page. */
static size_t count_jobs(fixture *f, const api_kv *q, size_t nq)
{
    api_resp resp;
    json_t *j = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = q, .nquery = nq}, &resp);
    if (resp.status != 200)
        fail_msg("list: %u %s", resp.status, resp.body);
    size_t n = json_array_size(json_object_get(j, "jobs"));
    json_decref(j);
    api_resp_free(&resp);
    return n;
}

/* A backend that needs an image (as the Kubernetes backend does), for the test below. */
static int needs_image(void *ud, const json_t *spec, char *path, size_t pathlen, char *msg,
                       size_t msglen)
{
    (*(int *)ud)++;
    if (json_is_string(json_object_get(spec, "image")))
        return 0;
    snprintf(path, pathlen, "$.image");
    snprintf(msg, msglen, "is required: jobs run as containers on this cluster");
    return 1;
}

/* The backend's own refusal is a 422 at the field it names, single or batched; nothing is
 * stored. */
static void test_backend_refusal_is_422(void **state)
{
    fixture *f = *state;
    api_resp resp;
    int calls = 0;
    f->ctx.spec_check = needs_image;
    f->ctx.spec_check_ud = &calls;
    size_t before = count_jobs(f, NULL, 0);
    const char *no_image = "{\"name\":\"b\",\"command\":[\"run\"],\"workers\":{\"count\":1}}";
    json_t *p = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = no_image}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    json_t *err0 = json_array_get(json_object_get(p, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(err0, "path")), "$.image");
    assert_non_null(strstr(json_string_value(json_object_get(err0, "message")), "containers"));
    json_decref(p);
    api_resp_free(&resp);

    const char *batch = "{\"jobs\":[{\"name\":\"a\",\"image\":\"img\",\"command\":[\"run\"],"
                        "\"workers\":{\"count\":1}},{\"name\":\"b\",\"command\":[\"run\"],"
                        "\"workers\":{\"count\":1}}]}";
    p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = batch}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    err0 = json_array_get(json_object_get(p, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(err0, "path")), "$.jobs[1].image");
    json_decref(p);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before);

    const char *ok = "{\"name\":\"a\",\"image\":\"img\",\"command\":[\"run\"],"
                     "\"workers\":{\"count\":1}}";
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = ok}, &resp);
    assert_int_equal(resp.status, 201);
    json_decref(j);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before + 1);
    assert_int_equal(calls, 4);
    f->ctx.spec_check = NULL;
}

/* The first error of a 422 problem: its path and message (borrowed from p). */
static void expect_first_error(const json_t *p, const char *path, const char *message)
{
    const json_t *err0 = json_array_get(json_object_get(p, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(err0, "path")), path);
    assert_string_equal(json_string_value(json_object_get(err0, "message")), message);
}

/* A rank asking for more than the backend could ever give is a 422 naming the field and the
 * size, single or batched; nothing is stored. */
static void test_backend_limits_are_422(void **state)
{
    fixture *f = *state;
    api_resp resp;
    f->ctx.limits = (spec_limits){.where = "this machine",
                                  .any = {.cpu_millis = 2000, .memory_bytes = (int64_t)4 << 30}};
    size_t before = count_jobs(f, NULL, 0);
    static const struct {
        const char *resources, *path, *message;
    } cases[] = {
        {"{\"cpu\":\"64\"}", "$.resources.cpu", "64 CPUs requested per rank, this machine has 2"},
        {"{\"memory\":\"64Gi\"}", "$.resources.memory",
         "64Gi of memory requested per rank, this machine has 4Gi"},
        {"{\"memory\":\"64Ei\"}", "$.resources.memory",
         "is too large: must be below 8Ei (2^63 bytes)"},
        {"{\"cpu\":\"1e308\"}", "$.resources.cpu", "is too large: must be below 9223372036854775.808 CPUs (2^63 millicores)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"name\":\"big\",\"command\":[\"run\"],\"workers\":{\"count\":1},"
                 "\"resources\":%s}",
                 cases[i].resources);
        json_t *p = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
        fx_expect_problem(&resp, p, 422, "invalid-spec");
        expect_first_error(p, cases[i].path, cases[i].message);
        json_decref(p);
        api_resp_free(&resp);
    }
    const char *batch = "{\"jobs\":[" MINIMAL ",{\"name\":\"b\",\"command\":[\"run\"],"
                        "\"workers\":{\"count\":1},\"resources\":{\"cpu\":\"3\"}}]}";
    json_t *p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = batch}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    expect_first_error(p, "$.jobs[1].resources.cpu",
                       "3 CPUs requested per rank, this machine has 2");
    json_decref(p);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before);

    /* At the machine's size exactly: accepted. */
    const char *fits = "{\"name\":\"fits\",\"command\":[\"run\"],\"workers\":{\"count\":1},"
                       "\"resources\":{\"cpu\":\"2000m\",\"memory\":\"4Gi\"}}";
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = fits}, &resp);
    assert_int_equal(resp.status, 201);
    json_decref(j);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before + 1);
    f->ctx.limits = (spec_limits){0};
}

/* Labels the server writes (sweeps', webhooks') cannot be set by a client: 422 naming the
 * label, single or batched; nothing is stored. */
static void test_reserved_labels_are_422(void **state)
{
    fixture *f = *state;
    api_resp resp;
    size_t before = count_jobs(f, NULL, 0);
    static const char *const keys[] = {"trainyard.io/sweep", "trainyard.io/sweep-trial",
                                       "param.trainyard.io/lr", "webhook", "commit"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char body[256], path[96];
        snprintf(body, sizeof body,
                 "{\"name\":\"fake\",\"command\":[\"run\"],\"workers\":{\"count\":1},"
                 "\"labels\":{\"%s\":\"01hzzzzzzzzzzzzzzzzzzzzzzz\"}}",
                 keys[i]);
        snprintf(path, sizeof path, "$.labels[\"%s\"]", keys[i]);
        json_t *p = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
        fx_expect_problem(&resp, p, 422, "invalid-spec");
        const json_t *err0 = json_array_get(json_object_get(p, "errors"), 0);
        assert_string_equal(json_string_value(json_object_get(err0, "path")), path);
        assert_non_null(
            strstr(json_string_value(json_object_get(err0, "message")), "reserved for the server"));
        json_decref(p);
        api_resp_free(&resp);
    }
    const char *batch = "{\"jobs\":[" MINIMAL ",{\"name\":\"b\",\"command\":[\"run\"],"
                        "\"workers\":{\"count\":1},\"labels\":{\"webhook\":\"ci\"}}]}";
    json_t *p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = batch}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    const json_t *err0 = json_array_get(json_object_get(p, "errors"), 0);
    assert_string_equal(json_string_value(json_object_get(err0, "path")),
                        "$.jobs[1].labels[\"webhook\"]");
    json_decref(p);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before);
}

static void test_batch(void **state)
{
    fixture *f = *state;
    api_resp resp;
    size_t before = count_jobs(f, NULL, 0);
    const char *body = "{\"jobs\":[" MINIMAL ",{\"name\":\"second\",\"image\":\"img\","
                       "\"command\":[\"run\"],\"workers\":{\"count\":1}}]}";
    json_t *j = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = body, .idem = "b1"}, &resp);
    assert_int_equal(resp.status, 201);
    json_t *jobs = json_object_get(j, "jobs");
    assert_int_equal(json_array_size(jobs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 1), "name")),
                        "second");
    api_resp_free(&resp);
    /* Each job in the answer is the job as stored, spec and times included. */
    for (size_t i = 0; i < 2; i++) {
        const json_t *job = json_array_get(jobs, i);
        const char *id = json_string_value(json_object_get(job, "id"));
        json_t *got = fx_call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = id}, &resp);
        assert_int_equal(resp.status, 200);
        assert_true(json_equal(got, job));
        json_decref(got);
        api_resp_free(&resp);
    }

    json_t *again =
        fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = body, .idem = "b1"}, &resp);
    assert_int_equal(resp.status, 200);
    for (size_t i = 0; i < 2; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, i), "id")),
                            json_string_value(json_object_get(
                                json_array_get(json_object_get(again, "jobs"), i), "id")));
    json_decref(again);
    json_decref(j);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before + 2);

    /* One bad spec: 422 naming it, nothing stored. */
    const char *bad = "{\"jobs\":[" MINIMAL ",{\"name\":\"x\",\"image\":\"\","
                      "\"command\":[\"run\"],\"workers\":{\"count\":1}}]}";
    json_t *p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = bad}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(p, "errors"), 0), "path")),
        "$.jobs[1].image");
    json_decref(p);
    api_resp_free(&resp);
    p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = "{\"jobs\":[]}"}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    json_decref(p);
    api_resp_free(&resp);
    assert_int_equal(count_jobs(f, NULL, 0), before + 2);

    /* A single spec to the batch route is not a batch. */
    p = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = MINIMAL}, &resp);
    fx_expect_problem(&resp, p, 422, "invalid-spec");
    json_decref(p);
    api_resp_free(&resp);
}

static void test_list_filters(void **state)
{
    fixture *f = *state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1], c[STORE_ID_LEN + 1];
    fx_submit(f, "alpha-1", "gpu", "{\"team\":\"vision\",\"sweep\":\"s1\"}", a);
    fx_submit(f, "alpha-2", "gpu", "{\"team\":\"nlp\",\"sweep\":\"s1\"}", b);
    fx_submit(f, "beta-1", "default", "{\"team\":\"vision\"}", c);

    struct {
        api_kv q[3];
        size_t nq;
        size_t want;
    } cases[] = {
        {{{"queue", "gpu"}}, 1, 2},
        {{{"label", "team=vision"}}, 1, 2},
        {{{"label", "team=vision"}, {"label", "sweep=s1"}}, 2, 1},
        {{{"label", "team=vision"}, {"queue", "gpu"}}, 2, 1},
        {{{"name_prefix", "alpha"}}, 1, 2},
        {{{"name_prefix", "beta-1"}}, 1, 1},
        {{{"name_prefix", "alpha"}, {"state", "PENDING"}}, 2, 2},
        {{{"name_prefix", "alpha"}, {"state", "running,cancelled"}}, 2, 0},
        {{{"name_prefix", "alpha"}, {"state", "SUCCEEDED"}, {"state", "PENDING"}}, 3, 2},
        {{{"name_prefix", "alpha"}, {"created_after", "2000-01-01T00:00:00Z"}}, 2, 2},
        {{{"name_prefix", "alpha"}, {"created_after", "2999-01-01T00:00:00Z"}}, 2, 0},
        {{{"name_prefix", "alpha"}, {"created_before", "2999-01-01T00:00:00+02:00"}}, 2, 2},
        {{{"name_prefix", "alpha"}, {"created_before", "1970-01-01T00:00:00Z"}}, 2, 0},
        {{{"label", "team=none"}}, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = count_jobs(f, cases[i].q, cases[i].nq);
        if (n != cases[i].want)
            fail_msg("case %zu: %zu jobs, want %zu", i, n, cases[i].want);
    }

    /* Newest first. */
    api_resp resp;
    api_kv q[] = {{"name_prefix", "alpha"}};
    json_t *j = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = q, .nquery = 1}, &resp);
    json_t *jobs = json_object_get(j, "jobs");
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 0), "id")), b);
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 1), "id")), a);
    assert_null(json_object_get(j, "next_page_token"));
    json_decref(j);
    api_resp_free(&resp);
}

static void test_list_bad_queries(void **state)
{
    fixture *f = *state;
    static const struct {
        api_kv q[2];
        size_t nq;
        const char *path;
    } cases[] = {
        {{{"limit", "0"}}, 1, "query.limit"},
        {{{"limit", "1001"}}, 1, "query.limit"},
        {{{"limit", "ten"}}, 1, "query.limit"},
        {{{"limit", "-5"}}, 1, "query.limit"},
        {{{"limit", "5x"}}, 1, "query.limit"},
        {{{"limit", "5"}, {"limit", "6"}}, 2, "query.limit"},
        {{{"state", "BOGUS"}}, 1, "query.state"},
        {{{"state", "PENDING,"}}, 1, "query.state"},
        {{{"queue", "Not A Queue"}}, 1, "query.queue"},
        {{{"label", "novalue"}}, 1, "query.label"},
        {{{"label", "bad key=v"}}, 1, "query.label"},
        {{{"name_prefix", ""}}, 1, "query.name_prefix"},
        {{{"created_after", "yesterday"}}, 1, "query.created_after"},
        {{{"created_before", "2026-13-01T00:00:00Z"}}, 1, "query.created_before"},
        {{{"page_token", "garbage"}}, 1, "query.page_token"},
        {{{"page_token", "AAAAAAAAAAAAAAAAAAAAAA"}}, 1, "query.page_token"},
        {{{"pagesize", "10"}}, 1, "query.pagesize"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        json_t *p = fx_call(f, "GET", "/v1/jobs",
                            &(fx_req){.query = cases[i].q, .nquery = cases[i].nq}, &resp);
        fx_expect_problem(&resp, p, 400, "invalid-query");
        const char *path = json_string_value(
            json_object_get(json_array_get(json_object_get(p, "errors"), 0), "path"));
        if (!path || strcmp(path, cases[i].path) != 0)
            fail_msg("case %zu: path %s, want %s", i, path ? path : "(none)", cases[i].path);
        json_decref(p);
        api_resp_free(&resp);
    }

    /* Every bad parameter is listed. */
    api_kv q[] = {{"limit", "0"}, {"state", "NOPE"}, {"x", "1"}};
    api_resp resp;
    json_t *p = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = q, .nquery = 3}, &resp);
    fx_expect_problem(&resp, p, 400, "invalid-query");
    assert_int_equal(json_array_size(json_object_get(p, "errors")), 3);
    json_decref(p);
    api_resp_free(&resp);
}

/* Pages through a query with limit 2: nothing is repeated or skipped, even
 * when jobs are submitted while paging. */
static void test_pagination(void **state)
{
    fixture *f = *state;
    char ids[7][STORE_ID_LEN + 1];
    for (int i = 0; i < 7; i++) {
        char name[32];
        snprintf(name, sizeof name, "page-%d", i);
        fx_submit(f, name, "pages", NULL, ids[i]);
    }
    char token[64] = "";
    int seen = 0, pages = 0;
    for (;;) {
        api_kv q[3] = {{"queue", "pages"}, {"limit", "2"}, {"page_token", token}};
        api_resp resp;
        json_t *j =
            fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = q, .nquery = token[0] ? 3 : 2}, &resp);
        assert_int_equal(resp.status, 200);
        json_t *jobs = json_object_get(j, "jobs");
        size_t i;
        json_t *job;
        json_array_foreach(jobs, i, job)
        {
            /* Newest first: ids[6], ids[5], ... */
            assert_string_equal(json_string_value(json_object_get(job, "id")), ids[6 - seen]);
            seen++;
        }
        pages++;
        if (pages == 1) {
            /* A job submitted now is newer: it never shows up on later pages. */
            char late[STORE_ID_LEN + 1];
            fx_submit(f, "late", "pages", NULL, late);
        }
        const char *next = json_string_value(json_object_get(j, "next_page_token"));
        if (!next) {
            json_decref(j);
            api_resp_free(&resp);
            break;
        }
        snprintf(token, sizeof token, "%s", next);

        /* The token belongs to these filters: another queue is refused, another limit is fine. */
        api_kv other[2] = {{"queue", "default"}, {"page_token", token}};
        api_resp r2;
        json_t *p = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = other, .nquery = 2}, &r2);
        fx_expect_problem(&r2, p, 400, "invalid-query");
        json_decref(p);
        api_resp_free(&r2);
        api_kv same[3] = {{"limit", "50"}, {"page_token", token}, {"queue", "pages"}};
        p = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = same, .nquery = 3}, &r2);
        assert_int_equal(r2.status, 200);
        json_decref(p);
        api_resp_free(&r2);

        json_decref(j);
        api_resp_free(&resp);
        assert_true(pages < 10);
    }
    assert_int_equal(seen, 7);
    assert_int_equal(pages, 4);
}

/* Moves a job to `target` inside the store, as the scheduler would. */
static ty_err decide_to(job_state cur, job_state *to, void *ud)
{
    (void)cur;
    *to = *(job_state *)ud;
    return TY_OK;
}

static void move(fixture *f, const char *id, job_state target)
{
    assert_int_equal(store_job_transition(f->store, id, decide_to, &target, "Test", "", NULL),
                     TY_OK);
}

static json_t *cancel(fixture *f, const char *id, api_resp *resp)
{
    return fx_call(f, "POST", "/v1/jobs/{id}:cancel", &(fx_req){.id = id}, resp);
}

/* A cancel's body names the reason and message of its event; a bad one is refused whole. */
static void test_cancel_reason(void **state)
{
    fixture *f = *state;
    api_resp resp;
    char id[STORE_ID_LEN + 1];
    fx_submit(f, "c-pruned", NULL, NULL, id);

    json_t *j = fx_call(f, "POST", "/v1/jobs/{id}:cancel",
                        &(fx_req){.id = id, .body = "{\"reason\": \"pruned\", \"why\": 1, "
                                                    "\"message\": 7}"},
                        &resp);
    assert_int_equal(resp.status, 422);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "invalid-request");
    assert_int_equal(json_array_size(json_object_get(j, "errors")), 3);
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "POST", "/v1/jobs/{id}:cancel",
                &(fx_req){.id = id, .body = "reason=Pruned", .content_type = "text/plain"}, &resp);
    assert_int_equal(resp.status, 415);
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = id}, &resp);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "PENDING");
    json_decref(j);
    api_resp_free(&resp);

    j = fx_call(f, "POST", "/v1/jobs/{id}:cancel",
                &(fx_req){.id = id, .body = "{\"reason\": \"Pruned\", "
                                            "\"message\": \"loss 0.9 at step 40\"}"},
                &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "CANCELLED");
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "GET", "/v1/jobs/{id}/events", &(fx_req){.id = id}, &resp);
    json_t *last = json_array_get(json_object_get(j, "events"), 1);
    assert_string_equal(json_string_value(json_object_get(last, "reason")), "Pruned");
    assert_string_equal(json_string_value(json_object_get(last, "message")),
                        "loss 0.9 at step 40 (cancelled by tester)");
    json_decref(j);
    api_resp_free(&resp);
}

static void test_cancel(void **state)
{
    fixture *f = *state;
    api_resp resp;
    char pending[STORE_ID_LEN + 1], running[STORE_ID_LEN + 1], done[STORE_ID_LEN + 1];
    fx_submit(f, "c-pending", NULL, NULL, pending);
    fx_submit(f, "c-running", NULL, NULL, running);
    fx_submit(f, "c-done", NULL, NULL, done);
    move(f, running, JOB_ADMITTED);
    move(f, running, JOB_STARTING);
    move(f, running, JOB_RUNNING);
    move(f, done, JOB_ADMITTED);
    move(f, done, JOB_STARTING);
    move(f, done, JOB_RUNNING);
    move(f, done, JOB_SUCCEEDED);

    /* PENDING: cancelled at once, with an event naming the caller. */
    json_t *j = cancel(f, pending, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "CANCELLED");
    json_decref(j);
    api_resp_free(&resp);
    /* Again: harmless, no new event. */
    j = cancel(f, pending, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "CANCELLED");
    json_decref(j);
    api_resp_free(&resp);
    j = fx_call(f, "GET", "/v1/jobs/{id}/events", &(fx_req){.id = pending}, &resp);
    json_t *events = json_object_get(j, "events");
    assert_int_equal(json_array_size(events), 2);
    json_t *last = json_array_get(events, 1);
    assert_string_equal(json_string_value(json_object_get(last, "from")), "PENDING");
    assert_string_equal(json_string_value(json_object_get(last, "to")), "CANCELLED");
    assert_string_equal(json_string_value(json_object_get(last, "reason")), "Cancelled");
    assert_string_equal(json_string_value(json_object_get(last, "message")), "cancelled by tester");
    json_decref(j);
    api_resp_free(&resp);

    /* RUNNING: CANCELLING while the backend tears it down. */
    j = cancel(f, running, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "CANCELLING");
    json_decref(j);
    api_resp_free(&resp);
    j = cancel(f, running, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "CANCELLING");
    json_decref(j);
    api_resp_free(&resp);

    /* SUCCEEDED: 409 naming the state. */
    j = cancel(f, done, &resp);
    fx_expect_problem(&resp, j, 409, "job-finished");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "SUCCEEDED");
    assert_non_null(strstr(json_string_value(json_object_get(j, "detail")), "SUCCEEDED"));
    json_decref(j);
    api_resp_free(&resp);
}

/* Attempt records as the scheduler writes them (the shape of components.schemas.Attempt). */
#define A1_STARTING                                                                                \
    "{\"attempt\":1,\"state\":\"starting\",\"started_at\":\"2026-11-22T10:00:00.123Z\","           \
    "\"ended_at\":null,\"reason\":null,\"message\":\"\",\"ranks\":["                               \
    "{\"rank\":0,\"state\":\"pending\",\"pid\":null,\"exit_code\":null,\"signal\":null,"           \
    "\"started_at\":null,\"ended_at\":null}]}"
#define A1_FAILED                                                                                  \
    "{\"attempt\":1,\"state\":\"failed\",\"started_at\":\"2026-11-22T10:00:00.123Z\","             \
    "\"ended_at\":\"2026-11-22T10:05:00.000Z\",\"reason\":\"RankFailed\","                         \
    "\"message\":\"rank 1 exited with code 3\",\"ranks\":["                                        \
    "{\"rank\":0,\"state\":\"killed\",\"pid\":4242,\"exit_code\":null,\"signal\":15,"              \
    "\"started_at\":\"2026-11-22T10:00:00.125Z\",\"ended_at\":\"2026-11-22T10:05:00.000Z\"},"      \
    "{\"rank\":1,\"state\":\"failed\",\"pid\":4243,\"exit_code\":3,\"signal\":null,"               \
    "\"started_at\":\"2026-11-22T10:00:00.126Z\",\"ended_at\":\"2026-11-22T10:04:59.000Z\"}]}"
#define A2_RUNNING                                                                                 \
    "{\"attempt\":2,\"state\":\"running\",\"started_at\":\"2026-11-22T10:05:10.000Z\","            \
    "\"ended_at\":null,\"reason\":null,\"message\":\"\",\"ranks\":["                               \
    "{\"rank\":0,\"state\":\"running\",\"pid\":5000,\"exit_code\":null,\"signal\":null,"           \
    "\"started_at\":\"2026-11-22T10:05:10.001Z\",\"ended_at\":null},"                              \
    "{\"rank\":1,\"state\":\"running\",\"pid\":5001,\"exit_code\":null,\"signal\":null,"           \
    "\"started_at\":\"2026-11-22T10:05:10.002Z\",\"ended_at\":null}]}"

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

/* The job's current attempt and its history, as the scheduler recorded them. */
static void test_attempts(void **state)
{
    fixture *f = *state;
    api_resp resp;
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = MINIMAL}, &resp);
    char id[STORE_ID_LEN + 1];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);

    /* Before the first attempt: none. */
    j = fx_call(f, "GET", "/v1/jobs/{id}/attempts", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.body, "{\"attempts\":[]}");
    json_decref(j);
    api_resp_free(&resp);

    fx_sched_write(f, id, JOB_PENDING, JOB_ADMITTED, 0, NULL, -1);
    fx_sched_write(f, id, JOB_ADMITTED, JOB_STARTING, 1, A1_STARTING, -1);
    j = fx_call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 1);
    json_t *want = parse(A1_STARTING);
    assert_true(json_equal(json_object_get(j, "current_attempt"), want));
    json_decref(want);
    json_decref(j);
    api_resp_free(&resp);

    /* Attempt 1 fails (one restart spent), attempt 2 runs. */
    fx_sched_write(f, id, JOB_STARTING, JOB_RUNNING, 0, NULL, -1);
    fx_sched_write(f, id, JOB_RUNNING, JOB_RESTARTING, 1, A1_FAILED, 1);
    fx_sched_write(f, id, JOB_RESTARTING, JOB_STARTING, 2, A2_RUNNING, -1);

    /* The record is sent as the scheduler wrote it, byte for byte. */
    j = fx_call(f, "GET", "/v1/jobs/{id}", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    assert_non_null(strstr(resp.body, "\"current_attempt\":" A2_RUNNING ","));
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 1);
    json_decref(j);
    api_resp_free(&resp);

    /* The list shows the same resource. */
    api_kv q[] = {{"name_prefix", "train"}};
    j = fx_call(f, "GET", "/v1/jobs", &(fx_req){.query = q, .nquery = 1}, &resp);
    json_t *listed = json_array_get(json_object_get(j, "jobs"), 0);
    assert_string_equal(json_string_value(json_object_get(listed, "id")), id);
    assert_int_equal(json_integer_value(json_object_get(listed, "restarts")), 1);
    want = parse(A2_RUNNING);
    assert_true(json_equal(json_object_get(listed, "current_attempt"), want));
    json_decref(want);
    json_decref(j);
    api_resp_free(&resp);

    /* Every attempt, oldest first, each as last written. */
    j = fx_call(f, "GET", "/v1/jobs/{id}/attempts", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.body, "{\"attempts\":[" A1_FAILED "," A2_RUNNING "]}");
    json_t *attempts = json_object_get(j, "attempts");
    assert_int_equal(json_array_size(attempts), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(attempts, 0), "attempt")),
                     1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(attempts, 0), "reason")),
                        "RankFailed");
    json_decref(j);
    api_resp_free(&resp);
}

static void test_jobs_submitted_in_a_batch_of_1000(void **state)
{
    fixture *f = *state;
    ty_buf b = {0};
    assert_int_equal(ty_buf_puts(&b, "{\"jobs\":["), TY_OK);
    for (int i = 0; i < API_MAX_BATCH; i++)
        assert_int_equal(ty_buf_printf(&b,
                                       "%s{\"name\":\"bulk-%d\",\"image\":\"img\",\"command\":"
                                       "[\"run\"],\"workers\":{\"count\":1},"
                                       "\"labels\":{\"bulk\":\"yes\"}}",
                                       i ? "," : "", i),
                         TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    api_resp resp;
    json_t *j = fx_call(f, "POST", "/v1/jobs:batch", &(fx_req){.body = b.data}, &resp);
    assert_int_equal(resp.status, 201);
    assert_int_equal(json_array_size(json_object_get(j, "jobs")), API_MAX_BATCH);
    json_decref(j);
    api_resp_free(&resp);
    api_kv q[] = {{"label", "bulk=yes"}, {"limit", "1000"}};
    assert_int_equal(count_jobs(f, q, 2), API_MAX_BATCH);
    ty_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_get_events, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_backend_refusal_is_422, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_backend_limits_are_422, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_reserved_labels_are_422, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_image_is_optional, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_job_is_404, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_media_type, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_body_too_large, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_malformed_bodies_are_400, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_spec_is_422_with_every_error, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_idempotency, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_list_filters, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_list_bad_queries, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_pagination, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_reason, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_cancel, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_attempts, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_jobs_submitted_in_a_batch_of_1000, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
