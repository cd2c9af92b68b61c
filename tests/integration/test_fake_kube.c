/*
 * test_fake_kube.c - the fake Kubernetes API server against the real one.
 *
 * Usage: test_fake_kube FAKE_BINARY (CTest passes it). The group setup starts
 * fake-kube-apiserver on loopback with a token and the 14-node cluster of the
 * transcripts, and every case drives it with libcurl and compares its answers
 * with tests/fixtures/kubernetes-transcripts/ (the recorded answers of a real
 * v1.26.1 apiserver, Job controller and scheduler): status codes, Status
 * bodies, Warning headers, list envelopes, watch framing, the scheduler's
 * messages and what the Job controller writes. Values that differ on every
 * run (uids, resourceVersions, timestamps, random name suffixes) are compared
 * by shape, not by value.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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

#include "tests/support/fake_kube_proc.h"
#include <curl/curl.h>
#include <jansson.h>

static const char *g_binary;
static pid_t g_pid;
static char g_base[64];
static const char *g_token = "fake-admin-token";

/* ---- a small HTTP client ----------------------------------------------- */

typedef struct resp {
    long status;
    char *body;
    size_t len;
    json_t *json;     /* the body parsed, or NULL */
    json_t *warnings; /* Warning header values in order */
    char ctype[128];
    char retry_after[32];
    int chunked;
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    resp *r = ud;
    char *b = realloc(r->body, r->len + sz * n + 1);
    if (!b)
        return 0;
    memcpy(b + r->len, p, sz * n);
    r->body = b;
    r->len += sz * n;
    r->body[r->len] = '\0';
    return sz * n;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t len)
{
    size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':')
        return;
    const char *v = line + k + 1;
    while (*v == ' ')
        v++;
    size_t m = (size_t)(line + n - v);
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n'))
        m--;
    snprintf(out, len, "%.*s", (int)m, v);
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    resp *r = ud;
    char v[2048] = "";
    header_value(p, sz * n, "Warning", v, sizeof v);
    if (*v)
        json_array_append_new(r->warnings, json_string(v));
    header_value(p, sz * n, "Content-Type", r->ctype, sizeof r->ctype);
    header_value(p, sz * n, "Retry-After", r->retry_after, sizeof r->retry_after);
    char te[64] = "";
    header_value(p, sz * n, "Transfer-Encoding", te, sizeof te);
    if (!strcmp(te, "chunked"))
        r->chunked = 1;
    return sz * n;
}

/* Sends one request; auth: the token, NULL for none, or another token. */
/* A call that accepts `accept` (a whole header line; NULL: JSON), with the token auth. */
static resp *call_accept(const char *accept, const char *auth, const char *method,
                         const char *path, const char *body)
{
    resp *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->warnings = json_array();
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[4096], hdr[256];
    snprintf(url, sizeof url, "%s%s", g_base, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, accept ? accept : "Accept: application/json");
    if (auth) {
        snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", auth);
        h = curl_slist_append(h, hdr);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "test-fake-kube/1.0");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (r->body && !strncmp(r->ctype, "application/json", 16))
        r->json = json_loadb(r->body, r->len, 0, NULL);
    return r;
}

static resp *call_as(const char *auth, const char *method, const char *path, const char *body)
{
    return call_accept(NULL, auth, method, path, body);
}

static resp *call(const char *method, const char *path, const char *body)
{
    return call_as(g_token, method, path, body);
}

/* Sends j (stolen) as the body. */
static resp *call_json(const char *method, const char *path, json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    resp *r = call(method, path, text);
    free(text);
    return r;
}

static void resp_free(resp *r)
{
    if (!r)
        return;
    free(r->body);
    json_decref(r->json);
    json_decref(r->warnings);
    free(r);
}

#define EXPECT_STATUS(r, want)                                                                     \
    do {                                                                                           \
        if ((r)->status != (want))                                                                 \
            fail_msg("%s:%d: expected HTTP %d, got %ld: %.600s", __FILE__, __LINE__, (int)(want),  \
                     (r)->status, (r)->body ? (r)->body : "");                                     \
    } while (0)

static void expect_json_equal(const json_t *got, const json_t *want, const char *what)
{
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
        fail_msg("%s differs:\n got  %.1500s\n want %.1500s", what, g ? g : "(null)",
                 w ? w : "(null)");
    }
}

/* ---- transcripts --------------------------------------------------------- */

static json_t *transcript(const char *name)
{
    char path[1024];
    json_error_t err;
    snprintf(path, sizeof path, "%s/%s.json", FK_TRANSCRIPTS, name);
    json_t *t = json_load_file(path, 0, &err);
    if (!t)
        fail_msg("%s: %s", path, err.text);
    return t;
}

static const char *t_str(const json_t *t, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(t, a), b));
}

/* Replays a transcript's request; returns the fake's answer. */
static resp *replay(const json_t *t)
{
    const json_t *body = json_object_get(json_object_get(t, "request"), "body");
    const char *method = t_str(t, "request", "method"), *path = t_str(t, "request", "path");
    if (json_is_string(body))
        return call(method, path, json_string_value(body));
    if (json_is_null(body) || !body)
        return call(method, path, NULL);
    return call_json(method, path, json_deep_copy(body));
}

static const json_t *want_body(const json_t *t)
{
    return json_object_get(json_object_get(t, "response"), "body");
}

static long want_status(const json_t *t)
{
    return (long)json_integer_value(json_object_get(json_object_get(t, "response"), "status"));
}

static const json_t *want_warnings(const json_t *t)
{
    return json_object_get(json_object_get(json_object_get(t, "response"), "headers"), "Warning");
}

/* The fake answers as the transcript does: status and the whole Status body. */
static void expect_same_answer(const char *name)
{
    json_t *t = transcript(name);
    resp *r = replay(t);
    EXPECT_STATUS(r, want_status(t));
    assert_non_null(r->json);
    assert_string_equal(r->ctype, "application/json");
    expect_json_equal(r->json, want_body(t), name);
    assert_int_equal(r->body[r->len - 1], '\n');
    resp_free(r);
    json_decref(t);
}

static void expect_warnings(const resp *r, const json_t *want)
{
    json_t *w = json_is_string(want) ? json_pack("[O]", want) : json_incref((json_t *)want);
    expect_json_equal(r->warnings, w ? w : json_array(), "Warning headers");
    json_decref(w);
}

static void delete_ok(const char *path)
{
    resp *r = call("DELETE", path, NULL);
    if (r->status != 200 && r->status != 404)
        fail_msg("DELETE %s: %ld", path, r->status);
    resp_free(r);
}

static void fake(const char *path, const char *body)
{
    resp *r = call("POST", path, body);
    EXPECT_STATUS(r, 200);
    resp_free(r);
}

/* ---- the server ------------------------------------------------------- */

static int start_server(void **state)
{
    (void)state;
    int port;
    const char *const extra[] = {"--window", "100000", NULL};
    if ((g_pid = fk_proc_start(g_binary, g_token, FK_NODES, extra, &port)) < 0)
        return -1;
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%d", port);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    resp *r = call("POST", "/api/v1/namespaces",
                   "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\","
                   "\"metadata\":{\"name\":\"transcripts\"}}");
    int ok = r->status == 201;
    resp_free(r);
    return ok ? 0 : -1;
}

static int stop_server(void **state)
{
    (void)state;
    int st = 0;
    if (g_pid > 0) {
        kill(g_pid, SIGTERM);
        waitpid(g_pid, &st, 0);
    }
    curl_global_cleanup();
    return 0;
}

/* Last: SIGTERM ends the fake cleanly, every watch closed, nothing leaked
 * (under the sanitizers a leak makes the exit status non-zero). */
static void test_clean_exit(void **state)
{
    (void)state;
    int st = 0;
    assert_int_equal(kill(g_pid, SIGTERM), 0);
    assert_int_equal(waitpid(g_pid, &st, 0), g_pid);
    g_pid = -1;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- cases ------------------------------------------------------------ */

/* 17a, 17b: no token is anonymous and forbidden; a wrong token is 401. */
static void test_auth(void **state)
{
    (void)state;
    json_t *t = transcript("17a-no-token-403-anonymous");
    resp *r = call_as(NULL, "GET", t_str(t, "request", "path"), NULL);
    EXPECT_STATUS(r, 403);
    expect_json_equal(r->json, want_body(t), "17a");
    resp_free(r);
    json_decref(t);
    t = transcript("17b-invalid-token-401");
    r = call_as("not-a-valid-token", "GET", t_str(t, "request", "path"), NULL);
    EXPECT_STATUS(r, 401);
    expect_json_equal(r->json, want_body(t), "17b");
    resp_free(r);
    json_decref(t);
}

/* Decode errors are 400 BadRequest without details; a strict error wins
 * over validation (02, 02b, 03, 03b, 03c, 03d, 04c). */
static void test_decode_errors_are_400(void **state)
{
    (void)state;
    const char *names[] = {"02-job-unknown-fields-strict",
                           "02b-job-duplicate-field-strict",
                           "03-job-wrong-type-strict",
                           "03b-job-wrong-type-default",
                           "03c-job-bad-quantity-strict",
                           "03d-job-malformed-json",
                           "04c-job-invalid-and-unknown-field-strict"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect_same_answer(names[i]);
}

/* Validation errors are 422 Invalid with details.causes (04, 04b, 05, 05b, 05d). */
static void test_validation_errors_are_422(void **state)
{
    (void)state;
    const char *names[] = {"04-job-invalid-strict-422", "04b-job-invalid-single-error-422",
                           "05-service-name-starts-with-digit-422", "05b-job-name-64-chars",
                           "05d-indexed-job-name-62-chars"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect_same_answer(names[i]);
    /* 04d: without Strict the unknown field is a Warning, even on a 422. */
    json_t *t = transcript("04d-job-invalid-and-unknown-field-default");
    resp *r = replay(t);
    EXPECT_STATUS(r, 422);
    expect_json_equal(r->json, want_body(t), "04d");
    expect_warnings(r, want_warnings(t));
    resp_free(r);
    json_decref(t);
}

/* Values that differ on every run, replaced by "*" before comparing. */
static void scrub(json_t *j)
{
    static const char *keys[] = {"uid",
                                 "controller-uid",
                                 "resourceVersion",
                                 "creationTimestamp",
                                 "startTime",
                                 "completionTime",
                                 "lastProbeTime",
                                 "lastTransitionTime",
                                 "deletionTimestamp",
                                 "eventTime",
                                 "firstTimestamp",
                                 "lastTimestamp",
                                 "startedAt",
                                 "finishedAt"};
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
        {
            scrub(v);
        }
        return;
    }
    const char *k;
    json_t *v;
    void *tmp;
    /* managedFields is optional for the fake. */
    json_object_del(j, "managedFields");
    json_object_foreach_safe(j, tmp, k, v)
    {
        int hit = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            hit |= !strcmp(k, keys[i]);
        if (hit && !json_is_null(v)) {
            json_object_set_new(j, k, json_string("*"));
        } else if (!strcmp(k, "uncountedTerminatedPods")) {
            /* Lists of pod uids. */
            const char *kk;
            json_t *list;
            json_object_foreach(v, kk, list)
            {
                for (size_t i = 0; i < json_array_size(list); i++)
                    json_array_set_new(list, i, json_string("*"));
            }
        } else {
            scrub(v);
        }
    }
}

static void expect_same_shape(const json_t *got, const json_t *want, const char *what)
{
    json_t *g = json_deep_copy(got), *w = json_deep_copy(want);
    scrub(g);
    scrub(w);
    expect_json_equal(g, w, what);
    json_decref(g);
    json_decref(w);
}

/* Without Strict, unknown and duplicate fields are Warnings and the object is
 * created without them (01, 02c, 02d); a dry run stores nothing. */
static void test_warn_and_ignore(void **state)
{
    (void)state;
    json_t *t = transcript("01-job-unknown-fields-default-warn");
    resp *r = replay(t);
    EXPECT_STATUS(r, 201);
    expect_warnings(r, want_warnings(t));
    /* The defaults the apiserver writes, and no unknown field left. */
    expect_same_shape(json_object_get(r->json, "spec"), json_object_get(want_body(t), "spec"),
                      "01 spec");
    expect_same_shape(json_object_get(r->json, "status"), json_object_get(want_body(t), "status"),
                      "01 status");
    assert_null(json_object_get(r->json, "bogusTopLevel"));
    assert_null(json_object_get(json_object_get(r->json, "metadata"), "resourceVersion"));
    resp_free(r);
    json_decref(t);

    t = transcript("02c-job-unknown-fields-ignore");
    r = replay(t);
    EXPECT_STATUS(r, 201);
    assert_int_equal(json_array_size(r->warnings), 0);
    resp_free(r);
    json_decref(t);

    t = transcript("02d-job-duplicate-field-default-warn");
    r = replay(t);
    EXPECT_STATUS(r, 201);
    expect_warnings(r, want_warnings(t));
    expect_json_equal(json_object_get(json_object_get(r->json, "spec"), "parallelism"),
                      json_object_get(json_object_get(want_body(t), "spec"), "parallelism"),
                      "02d: the last value wins");
    resp_free(r);
    json_decref(t);

    /* Nothing of the dry runs was stored. */
    r = call("GET", "/apis/batch/v1/namespaces/transcripts/jobs/unknown-fields", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
}

/* 06a, 06b, 07a, 07b, 07f, 07g: create, AlreadyExists, NotFound in its forms. */
static void test_create_conflict_not_found(void **state)
{
    (void)state;
    json_t *t = transcript("06a-job-create-201");
    resp *r = replay(t);
    EXPECT_STATUS(r, 201);
    expect_same_shape(r->json, want_body(t), "06a");
    resp_free(r);
    json_decref(t);
    const char *names[] = {"06b-job-create-again-409",   "07a-get-missing-job-404",
                           "07b-delete-missing-job-404", "07f-create-job-missing-namespace-404",
                           "07g-unknown-resource-404",   "14d-pod-log-missing-pod"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect_same_answer(names[i]);
    /* 07d: without a policy a Job is orphaned: the Job itself comes back, with
     * the orphan finalizer and the Warning. */
    t = transcript("07d-delete-job-no-propagation-policy");
    r = replay(t);
    EXPECT_STATUS(r, 200);
    expect_warnings(r, want_warnings(t));
    expect_same_shape(json_object_get(r->json, "metadata"),
                      json_object_get(want_body(t), "metadata"), "07d metadata");
    resp_free(r);
    json_decref(t);
    r = call("GET", "/apis/batch/v1/namespaces/transcripts/jobs/created-twice", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
}

/* An Indexed Job of two ranks (11b) for the cases below; returns its pods' names. */
static json_t *create_indexed_job(const char *name)
{
    json_t *t = transcript("11b-indexed-job-create");
    json_t *job = json_deep_copy(json_object_get(json_object_get(t, "request"), "body"));
    json_object_set_new(json_object_get(job, "metadata"), "name", json_string(name));
    resp *r =
        call_json("POST", "/apis/batch/v1/namespaces/transcripts/jobs?fieldValidation=Strict", job);
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_decref(t);
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods?labelSelector=job-name%%3D%s",
             name);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    json_t *names = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(r->json, "items"), i, p)
    {
        json_array_append(names, json_object_get(json_object_get(p, "metadata"), "name"));
    }
    resp_free(r);
    return names;
}

static json_t *get_json(const char *path)
{
    resp *r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    json_t *j = json_incref(r->json);
    resp_free(r);
    return j;
}

static json_t *job_status(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "/apis/batch/v1/namespaces/transcripts/jobs/%s", name);
    json_t *job = get_json(path);
    json_t *s = json_incref(json_object_get(job, "status"));
    json_decref(job);
    return s;
}

static void set_phase(const char *pod, const char *body)
{
    char path[512];
    snprintf(path, sizeof path, "/fake/pods/transcripts/%s/phase", pod);
    fake(path, body);
}

/* 11c-11k: the Job controller's pods and status through a failed rank. */
static void test_indexed_job_failure(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("idx-demo");
    assert_int_equal(json_array_size(names), 2);
    /* 11c: the pods as the Job controller makes them and the scheduler binds them. */
    json_t *t = transcript("11c-indexed-job-pods-bound");
    const json_t *want_items = json_object_get(want_body(t), "items");
    for (size_t i = 0; i < 2; i++) {
        char path[512];
        const char *name = json_string_value(json_array_get(names, i));
        snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s", name);
        json_t *pod = get_json(path), *want = json_deep_copy(json_array_get(want_items, i));
        /* The random suffix and the node the scheduler picked may differ. */
        char prefix[64];
        snprintf(prefix, sizeof prefix, "idx-demo-%zu-", i);
        assert_int_equal(strncmp(name, prefix, strlen(prefix)), 0);
        assert_int_equal(strlen(name), strlen(prefix) + 5);
        json_t *md = json_object_get(want, "metadata");
        json_object_set(md, "name", json_object_get(json_object_get(pod, "metadata"), "name"));
        json_object_del(json_object_get(want, "spec"), "volumes");
        /* The service account's token volume is admission's, not the Job's. */
        json_object_del(
            json_array_get(json_object_get(json_object_get(want, "spec"), "containers"), 0),
            "volumeMounts");
        const char *node =
            json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        assert_non_null(node);
        assert_non_null(strstr(node, "a100"));
        json_object_set_new(json_object_get(want, "spec"), "nodeName", json_string(node));
        expect_same_shape(json_object_get(pod, "metadata"), md, "11c metadata");
        expect_same_shape(json_object_get(pod, "spec"), json_object_get(want, "spec"), "11c spec");
        expect_same_shape(json_object_get(pod, "status"), json_object_get(want, "status"),
                          "11c status");
        json_decref(pod);
        json_decref(want);
    }
    json_decref(t);
    /* 11d, 11e: active 2 and ready 0, then ready 2 once both run. */
    json_t *s = job_status("idx-demo");
    t = transcript("11d-indexed-job-status-pods-bound");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11d");
    json_decref(s);
    json_decref(t);
    set_phase(json_string_value(json_array_get(names, 0)), "{\"phase\":\"Running\"}");
    set_phase(json_string_value(json_array_get(names, 1)), "{\"phase\":\"Running\"}");
    s = job_status("idx-demo");
    t = transcript("11e-indexed-job-status-running");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11e");
    json_decref(s);
    json_decref(t);
    /* 11f: rank 0 exits 3: Failed/BackoffLimitExceeded, the other rank deleted
     * and counted as failed, the stale ready count. */
    set_phase(json_string_value(json_array_get(names, 0)), "{\"phase\":\"Failed\",\"exitCode\":3}");
    s = job_status("idx-demo");
    t = transcript("11f-indexed-job-status-after-rank0-failed");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11f");
    json_decref(s);
    json_decref(t);
    /* 11k: the controller's events, in order. */
    json_t *ev = get_json("/api/v1/namespaces/transcripts/events?fieldSelector="
                          "involvedObject.name%3Didx-demo");
    t = transcript("11k-indexed-job-events");
    const json_t *items = json_object_get(ev, "items"),
                 *wi = json_object_get(want_body(t), "items");
    assert_int_equal(json_array_size(items), json_array_size(wi));
    for (size_t i = 0; i < json_array_size(wi); i++) {
        json_t *g = json_deep_copy(json_array_get(items, i)),
               *w = json_deep_copy(json_array_get(wi, i));
        json_object_del(g, "metadata");
        json_object_del(w, "metadata");
        json_object_del(g, "message");
        json_object_del(w, "message");
        expect_same_shape(g, w, "11k event");
        json_decref(g);
        json_decref(w);
    }
    json_decref(t);
    json_decref(ev);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/idx-demo?propagationPolicy=Background");
    json_decref(names);
}

/* 11l-11p: completedIndexes, Complete without a reason, pods released. */
static void test_indexed_job_success(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("idx-ok");
    const char *p0 = json_string_value(json_array_get(names, 0));
    const char *p1 = json_string_value(json_array_get(names, 1));
    set_phase(p0, "{\"phase\":\"Running\"}");
    set_phase(p1, "{\"phase\":\"Running\"}");
    set_phase(p1, "{\"phase\":\"Succeeded\"}");
    json_t *s = job_status("idx-ok");
    json_t *t = transcript("11l-indexed-job-status-rank1-succeeded");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11l");
    json_decref(s);
    json_decref(t);
    set_phase(p0, "{\"phase\":\"Succeeded\"}");
    s = job_status("idx-ok");
    t = transcript("11o-indexed-job-status-all-succeeded");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11o");
    json_decref(s);
    json_decref(t);
    /* 11p: the finalizers are gone. */
    json_t *pods = get_json("/api/v1/namespaces/transcripts/pods?labelSelector=job-name%3Didx-ok");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(pods, "items"), i, p)
    {
        assert_null(json_object_get(json_object_get(p, "metadata"), "finalizers"));
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(p, "status"), "phase")), "Succeeded");
    }
    json_decref(pods);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/idx-ok?propagationPolicy=Background");
    json_decref(names);
}

/* 11m: rank 1 succeeded, then rank 0 failed: Failed with succeeded 1, failed 1. */
static void test_indexed_job_mixed(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("idx-mixed");
    const char *p0 = json_string_value(json_array_get(names, 0));
    const char *p1 = json_string_value(json_array_get(names, 1));
    set_phase(p0, "{\"phase\":\"Running\"}");
    set_phase(p1, "{\"phase\":\"Running\"}");
    set_phase(p1, "{\"phase\":\"Succeeded\"}");
    set_phase(p0, "{\"phase\":\"Failed\",\"exitCode\":1}");
    json_t *s = job_status("idx-mixed");
    json_t *t = transcript("11m-indexed-job-status-rank0-failed-after-rank1-succeeded");
    expect_same_shape(s, json_object_get(want_body(t), "status"), "11m");
    json_decref(s);
    json_decref(t);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/idx-mixed?propagationPolicy=Background");
    json_decref(names);
}

/* Creates the pods of 12a-12d from the recorded pods' specs. */
static void create_unschedulable_pods(void)
{
    const char *names[] = {"12a-unschedulable-too-many-gpus", "12b-unschedulable-no-toleration",
                           "12c-unschedulable-selector-no-match",
                           "12d-unschedulable-zone-a100-pod-affinity"};
    for (size_t i = 0; i < 4; i++) {
        json_t *t = transcript(names[i]);
        const json_t *pod = want_body(t), *spec = json_object_get(pod, "spec");
        json_t *body =
            json_pack("{s:s, s:s, s:{s:O, s:O}, s:{s:O, s:O}}", "apiVersion", "v1", "kind", "Pod",
                      "metadata", "name", json_object_get(json_object_get(pod, "metadata"), "name"),
                      "labels", json_object_get(json_object_get(pod, "metadata"), "labels"), "spec",
                      "restartPolicy", json_object_get(spec, "restartPolicy"), "containers",
                      json_object_get(spec, "containers"));
        json_t *bspec = json_object_get(body, "spec");
        const char *keep[] = {"nodeSelector", "affinity"};
        for (int k = 0; k < 2; k++)
            if (json_object_get(spec, keep[k]))
                json_object_set(bspec, keep[k], json_object_get(spec, keep[k]));
        /* Admission's defaults stay out of the request. */
        json_t *tol = json_array();
        size_t j;
        json_t *x;
        json_array_foreach(json_object_get(spec, "tolerations"), j, x)
        {
            if (!strstr(json_string_value(json_object_get(x, "key")), "node.kubernetes.io/"))
                json_array_append(tol, x);
        }
        json_object_set_new(bspec, "tolerations", tol);
        json_array_foreach(json_object_get(bspec, "containers"), j, x)
        {
            json_object_del(x, "volumeMounts");
        }
        resp *r = call_json("POST", "/api/v1/namespaces/transcripts/pods?fieldValidation=Strict",
                            json_deep_copy(body));
        EXPECT_STATUS(r, 201);
        resp_free(r);
        json_decref(body);
        json_decref(t);
    }
}

/* 12a-12e: PodScheduled=False in the scheduler's words, and its events. */
static void test_scheduler_messages(void **state)
{
    (void)state;
    create_unschedulable_pods();
    const char *names[] = {"12a-unschedulable-too-many-gpus", "12b-unschedulable-no-toleration",
                           "12c-unschedulable-selector-no-match",
                           "12d-unschedulable-zone-a100-pod-affinity"};
    for (size_t i = 0; i < 4; i++) {
        json_t *t = transcript(names[i]);
        json_t *pod = get_json(t_str(t, "request", "path"));
        expect_same_shape(json_object_get(pod, "status"), json_object_get(want_body(t), "status"),
                          names[i]);
        json_decref(pod);
        json_decref(t);
    }
    /* 12e: one FailedScheduling event per pod, as the scheduler writes it. */
    json_t *t = transcript("12e-events-failedscheduling");
    json_t *ev = get_json("/api/v1/namespaces/transcripts/events?fieldSelector="
                          "reason%3DFailedScheduling");
    const json_t *wi = json_object_get(want_body(t), "items");
    const json_t *gi = json_object_get(ev, "items");
    assert_int_equal(json_array_size(gi), json_array_size(wi));
    for (size_t i = 0; i < json_array_size(wi); i++) {
        json_t *g = json_deep_copy(json_array_get(gi, i)),
               *w = json_deep_copy(json_array_get(wi, i));
        const char *gname =
            json_string_value(json_object_get(json_object_get(g, "metadata"), "name"));
        const char *obj =
            json_string_value(json_object_get(json_object_get(w, "involvedObject"), "name"));
        assert_int_equal(strncmp(gname, obj, strlen(obj)), 0);
        json_object_del(g, "metadata");
        json_object_del(w, "metadata");
        json_object_del(g, "reportingInstance");
        json_object_del(w, "reportingInstance");
        expect_same_shape(g, w, "12e event");
        json_decref(g);
        json_decref(w);
    }
    json_decref(ev);
    json_decref(t);
}

/* The scheduler retries when nodes change: a pod waiting for a toleration-free
 * GPU node is bound once such a node is added; one without room stays. */
static void test_scheduler_retries_on_node_change(void **state)
{
    (void)state;
    resp *r =
        call("POST", "/api/v1/namespaces/transcripts/pods",
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"wants-h200\"},"
             "\"spec\":{\"restartPolicy\":\"Never\",\"nodeSelector\":"
             "{\"nvidia.com/gpu.product\":\"NVIDIA-H200\"},\"containers\":[{\"name\":\"m\","
             "\"image\":\"busybox:1.36\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":4}}}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *pod = get_json("/api/v1/namespaces/transcripts/pods/wants-h200");
    assert_null(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    json_decref(pod);
    fake("/fake/nodes", "{\"metadata\":{\"name\":\"usw2a-h200-od-0\",\"labels\":{"
                        "\"nvidia.com/gpu.product\":\"NVIDIA-H200\","
                        "\"topology.kubernetes.io/zone\":\"us-west-2a\"}},"
                        "\"status\":{\"allocatable\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"96\","
                        "\"memory\":\"1152Gi\",\"pods\":\"110\"}}}");
    pod = get_json("/api/v1/namespaces/transcripts/pods/wants-h200");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName")),
        "usw2a-h200-od-0");
    json_decref(pod);
    /* 4 of 8 GPUs are taken: a pod asking for 5 does not fit. */
    r = call("POST", "/api/v1/namespaces/transcripts/pods",
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"wants-5-h200\"},"
             "\"spec\":{\"restartPolicy\":\"Never\",\"nodeSelector\":"
             "{\"nvidia.com/gpu.product\":\"NVIDIA-H200\"},\"containers\":[{\"name\":\"m\","
             "\"image\":\"busybox:1.36\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":5}}}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    pod = get_json("/api/v1/namespaces/transcripts/pods/wants-5-h200");
    json_t *cond = json_array_get(json_object_get(json_object_get(pod, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(cond, "message")),
                        "0/15 nodes are available: 1 Insufficient nvidia.com/gpu, 11 node(s) had "
                        "untolerated taint {nvidia.com/gpu: present}, 3 node(s) didn't match "
                        "Pod's node affinity/selector. preemption: 0/15 nodes are available: 1 No "
                        "preemption victims found for incoming pod, 14 Preemption is not helpful "
                        "for scheduling..");
    json_decref(pod);
    delete_ok("/api/v1/namespaces/transcripts/pods/wants-h200");
    delete_ok("/api/v1/namespaces/transcripts/pods/wants-5-h200");
    r = call("DELETE", "/fake/nodes/usw2a-h200-od-0", NULL);
    EXPECT_STATUS(r, 200);
    resp_free(r);
}

/* The scheduler counts pod slots, CPU and memory as NodeResourcesFit does, in its words: a
 * node short of several resources counts under each, and once in the preemption part. */
static void test_scheduler_counts_pods_cpu_and_memory(void **state)
{
    (void)state;
    /* The 3 CPU nodes have 16 CPUs and 64Gi each; the 11 GPU nodes are tainted. */
    resp *r =
        call("POST", "/api/v1/namespaces/transcripts/pods",
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"wants-17-cpus\"},"
             "\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"m\","
             "\"image\":\"busybox:1.36\",\"resources\":{\"requests\":{\"cpu\":\"17\","
             "\"memory\":\"65Gi\"}}}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *pod = get_json("/api/v1/namespaces/transcripts/pods/wants-17-cpus");
    json_t *cond = json_array_get(json_object_get(json_object_get(pod, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(cond, "message")),
                        "0/14 nodes are available: 11 node(s) had untolerated taint "
                        "{nvidia.com/gpu: present}, 3 Insufficient cpu, 3 Insufficient memory. "
                        "preemption: 0/14 nodes are available: 11 Preemption is not helpful for "
                        "scheduling, 3 No preemption victims found for incoming pod..");
    json_decref(pod);
    delete_ok("/api/v1/namespaces/transcripts/pods/wants-17-cpus");

    /* A node with room for one pod: the second is "Too many pods", whatever it asks. */
    fake("/fake/nodes", "{\"metadata\":{\"name\":\"usw2a-tiny-0\",\"labels\":{"
                        "\"node.kubernetes.io/instance-type\":\"t3.nano\","
                        "\"topology.kubernetes.io/zone\":\"us-west-2a\"}},"
                        "\"status\":{\"allocatable\":{\"cpu\":\"2\",\"memory\":\"512Mi\","
                        "\"pods\":\"1\"}}}");
    for (int i = 0; i < 2; i++) {
        char body[600];
        snprintf(body, sizeof body,
                 "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"tiny-%d\"},"
                 "\"spec\":{\"restartPolicy\":\"Never\",\"nodeSelector\":"
                 "{\"node.kubernetes.io/instance-type\":\"t3.nano\"},\"containers\":[{\"name\":"
                 "\"m\",\"image\":\"busybox:1.36\",\"resources\":{\"limits\":"
                 "{\"cpu\":\"10m\"}}}]}}",
                 i);
        r = call("POST", "/api/v1/namespaces/transcripts/pods", body);
        EXPECT_STATUS(r, 201);
        resp_free(r);
    }
    pod = get_json("/api/v1/namespaces/transcripts/pods/tiny-0");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName")),
        "usw2a-tiny-0");
    json_decref(pod);
    pod = get_json("/api/v1/namespaces/transcripts/pods/tiny-1");
    cond = json_array_get(json_object_get(json_object_get(pod, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(cond, "message")),
                        "0/15 nodes are available: 1 Too many pods, 11 node(s) had untolerated "
                        "taint {nvidia.com/gpu: present}, 3 node(s) didn't match Pod's node "
                        "affinity/selector. preemption: 0/15 nodes are available: 1 "
                        "No preemption victims found for incoming pod, 14 Preemption is not "
                        "helpful for scheduling..");
    /* The first one ends: its slot is free again and the second is bound. */
    r = call("PATCH", "/api/v1/namespaces/transcripts/pods/tiny-0/status",
             "{\"status\":{\"phase\":\"Succeeded\"}}");
    EXPECT_STATUS(r, 200);
    resp_free(r);
    const char *node = NULL;
    for (int i = 0; i < 100 && !node; i++) {
        json_decref(pod);
        pod = get_json("/api/v1/namespaces/transcripts/pods/tiny-1");
        node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        if (!node) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    assert_non_null(node);
    assert_string_equal(node, "usw2a-tiny-0");
    json_decref(pod);
    delete_ok("/api/v1/namespaces/transcripts/pods/tiny-0");
    delete_ok("/api/v1/namespaces/transcripts/pods/tiny-1");
    r = call("DELETE", "/fake/nodes/usw2a-tiny-0", NULL);
    EXPECT_STATUS(r, 200);
    resp_free(r);
}

/* 08, 08b-08d: list envelopes, selectors, limit and continue. */
static void test_lists(void **state)
{
    (void)state;
    /* The pods of 12 exist (test_scheduler_messages). */
    json_t *t = transcript("08-list-pods-labelselector");
    resp *r = replay(t);
    EXPECT_STATUS(r, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "kind")), "PodList");
    assert_string_equal(json_string_value(json_object_get(r->json, "apiVersion")), "v1");
    const json_t *items = json_object_get(r->json, "items");
    const json_t *wi = json_object_get(want_body(t), "items");
    assert_int_equal(json_array_size(items), json_array_size(wi));
    for (size_t i = 0; i < json_array_size(wi); i++) {
        const json_t *g = json_array_get(items, i), *w = json_array_get(wi, i);
        assert_null(json_object_get(g, "kind"));
        expect_json_equal(json_object_get(json_object_get(g, "metadata"), "name"),
                          json_object_get(json_object_get(w, "metadata"), "name"), "08 order");
    }
    resp_free(r);
    json_decref(t);
    /* 08b: limit with a selector: continue, no remainingItemCount. */
    r = call("GET", "/api/v1/namespaces/transcripts/pods?labelSelector=app%3Dunsched&limit=1",
             NULL);
    EXPECT_STATUS(r, 200);
    const json_t *md = json_object_get(r->json, "metadata");
    const char *cont = json_string_value(json_object_get(md, "continue"));
    assert_non_null(cont);
    assert_null(json_object_get(md, "remainingItemCount"));
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(r->json, "items"), 0), "metadata"),
            "name")),
        "unsched-affinity");
    /* 08c: the last page has no continue. */
    char path[1024];
    snprintf(path, sizeof path,
             "/api/v1/namespaces/transcripts/pods?labelSelector=app%%3Dunsched&limit=3&continue=%s",
             cont);
    resp *r2 = call("GET", path, NULL);
    EXPECT_STATUS(r2, 200);
    assert_int_equal(json_array_size(json_object_get(r2->json, "items")), 3);
    assert_null(json_object_get(json_object_get(r2->json, "metadata"), "continue"));
    resp_free(r2);
    resp_free(r);
    /* 08d: without a selector, remainingItemCount. */
    r = call("GET", "/api/v1/namespaces/transcripts/pods?limit=1", NULL);
    EXPECT_STATUS(r, 200);
    md = json_object_get(r->json, "metadata");
    assert_non_null(json_object_get(md, "continue"));
    assert_true(json_integer_value(json_object_get(md, "remainingItemCount")) >= 3);
    resp_free(r);
    /* Every selector operator. */
    static const struct {
        const char *sel;
        size_t n;
    } cases[] = {
        {"app%3Dunsched", 4},
        {"app%3D%3Dunsched,transcript%3D12", 4},
        {"app!%3Dunsched", 0},
        {"app%20in%20(unsched,other)", 4},
        {"app%20notin%20(unsched)", 0},
        {"transcript", 4},
        {"!transcript", 0},
        {"transcript,app%3Dnone", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods?labelSelector=%s",
                 cases[i].sel);
        json_t *l = get_json(path);
        size_t n = 0, k;
        json_t *p;
        /* Other tests' pods have other labels; count only the 12 ones. */
        json_array_foreach(json_object_get(l, "items"), k, p)
        {
            const char *name =
                json_string_value(json_object_get(json_object_get(p, "metadata"), "name"));
            n += !strncmp(name, "unsched-", 8);
        }
        if (n != cases[i].n)
            fail_msg("labelSelector=%s: %zu pods, want %zu", cases[i].sel, n, cases[i].n);
        json_decref(l);
    }
}

typedef struct watcher {
    char path[1024];
    const char *accept; /* NULL: JSON */
    resp *r;
    pthread_mutex_t mu;
    int done;
} watcher;

static void *watch_thread(void *arg)
{
    watcher *w = arg;
    resp *r = call_accept(w->accept, g_token, "GET", w->path, NULL);
    pthread_mutex_lock(&w->mu);
    w->r = r;
    w->done = 1;
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int watcher_done(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    int d = w->done;
    pthread_mutex_unlock(&w->mu);
    return d;
}

/* Splits a watch body on newlines; returns the events (new). */
static json_t *watch_events(const resp *r)
{
    json_t *events = json_array();
    const char *p = r->body ? r->body : "";
    while (*p) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every event ends with a newline */
        json_t *e = json_loadb(p, (size_t)(nl - p), 0, NULL);
        assert_non_null(e);
        json_array_append_new(events, e);
        p = nl + 1;
    }
    return events;
}

/* 09, 11i: watch framing, the Job's writes in order, bookmarks' shape. */
static void test_watch_job(void **state)
{
    (void)state;
    json_t *l = get_json("/apis/batch/v1/namespaces/transcripts/jobs");
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path,
             "/apis/batch/v1/namespaces/transcripts/jobs?fieldSelector=metadata.name%%3Dwatch-idx"
             "&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=3&watch=true",
             json_string_value(json_object_get(json_object_get(l, "metadata"), "resourceVersion")));
    json_decref(l);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_thread, &w), 0);
    json_t *names = create_indexed_job("watch-idx");
    /* Both ranks start together: one status write, as in 11i. */
    fake("/fake/pods/transcripts/phase?labelSelector=job-name%3Dwatch-idx",
         "{\"phase\":\"Running\"}");
    set_phase(json_string_value(json_array_get(names, 0)), "{\"phase\":\"Failed\",\"exitCode\":3}");
    pthread_join(th, NULL);
    EXPECT_STATUS(w.r, 200);
    assert_string_equal(w.r->ctype, "application/json");
    assert_true(w.r->chunked);
    json_t *got = watch_events(w.r);
    json_t *t = transcript("11i-indexed-job-watch-job");
    const json_t *want = want_body(t);
    /* The same writes, in the same order, each a whole Job with kind; and
     * bookmarks, empty Jobs with only their rv, which may come at any point
     * of a slow run but come at least once before the deadline. */
    const json_t *last_want = json_array_get(want, json_array_size(want) - 1);
    json_t *writes = json_array();
    int bookmarks = 0;
    size_t i;
    json_t *ge;
    json_array_foreach(got, i, ge)
    {
        if (strcmp(json_string_value(json_object_get(ge, "type")), "BOOKMARK")) {
            json_array_append(writes, ge);
            continue;
        }
        expect_same_shape(json_object_get(ge, "object"), json_object_get(last_want, "object"),
                          "bookmark");
        bookmarks++;
    }
    assert_true(bookmarks > 0);
    size_t gi = 0;
    json_t *we;
    json_array_foreach(want, i, we)
    {
        const char *type = json_string_value(json_object_get(we, "type"));
        if (!strcmp(type, "BOOKMARK"))
            continue;
        ge = json_array_get(writes, gi++);
        assert_non_null(ge);
        assert_string_equal(json_string_value(json_object_get(ge, "type")), type);
        const json_t *go = json_object_get(ge, "object");
        assert_string_equal(json_string_value(json_object_get(go, "kind")), "Job");
        expect_same_shape(json_object_get(go, "status"),
                          json_object_get(json_object_get(we, "object"), "status"), "11i status");
    }
    assert_int_equal(gi, json_array_size(writes));
    json_decref(writes);
    json_decref(got);
    json_decref(t);
    resp_free(w.r);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/watch-idx?propagationPolicy=Background");
    json_decref(names);
}

/* An object as a PartialObjectMetadata: its metadata alone, and it says so. */
static void expect_partial(const json_t *o, const char *what)
{
    if (strcmp(json_string_value(json_object_get(o, "kind")), "PartialObjectMetadata") ||
        strcmp(json_string_value(json_object_get(o, "apiVersion")), "meta.k8s.io/v1") ||
        !json_object_get(json_object_get(o, "metadata"), "resourceVersion") ||
        json_object_size(o) != 3)
        fail_msg("%s: not a PartialObjectMetadata: %s", what, json_dumps(o, JSON_COMPACT));
}

/* Metadata alone, as client-go's metadata informers ask for it: a PartialObjectMetadataList
 * for a list, PartialObjectMetadata for a get and for each object of a watch (bookmarks
 * included); the other one of the two is 406 NotAcceptable, as the apiserver answers it. */
static void test_metadata_only(void **state)
{
    (void)state;
    static const char *const as_list =
        "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
        "application/json";
    static const char *const as_one =
        "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    json_t *names = create_indexed_job("meta-idx");
    const char *sel = "/apis/batch/v1/namespaces/transcripts/jobs?fieldSelector=metadata.name"
                      "%3Dmeta-idx";
    resp *r = call_accept(as_list, g_token, "GET", sel, NULL);
    EXPECT_STATUS(r, 200);
    const json_t *l = r->json;
    assert_string_equal(json_string_value(json_object_get(l, "kind")),
                        "PartialObjectMetadataList");
    assert_string_equal(json_string_value(json_object_get(l, "apiVersion")), "meta.k8s.io/v1");
    char rv[32];
    snprintf(rv, sizeof rv, "%s",
             json_string_value(json_object_get(json_object_get(l, "metadata"), "resourceVersion")));
    assert_true(rv[0] != '\0');
    assert_int_equal(json_array_size(json_object_get(l, "items")), 1);
    const json_t *item = json_array_get(json_object_get(l, "items"), 0);
    expect_partial(item, "list item");
    const json_t *md = json_object_get(item, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "name")), "meta-idx");
    assert_non_null(json_object_get(md, "uid"));
    resp_free(r);

    r = call_accept(as_list, g_token, "GET", "/apis/batch/v1/namespaces/transcripts/jobs/meta-idx",
                    NULL);
    EXPECT_STATUS(r, 406);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "NotAcceptable");
    resp_free(r);
    r = call_accept(as_one, g_token, "GET", sel, NULL);
    EXPECT_STATUS(r, 406);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "NotAcceptable");
    resp_free(r);
    r = call_accept(as_one, g_token, "GET", "/apis/batch/v1/namespaces/transcripts/jobs/meta-idx",
                    NULL);
    EXPECT_STATUS(r, 200);
    expect_partial(r->json, "get");
    resp_free(r);

    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER, .accept = as_one};
    snprintf(w.path, sizeof w.path,
             "%s&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=3&watch=true", sel, rv);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_thread, &w), 0);
    /* The Job's status changes: its metadata's resourceVersion does too. */
    fake("/fake/pods/transcripts/phase?labelSelector=job-name%3Dmeta-idx",
         "{\"phase\":\"Running\"}");
    pthread_join(th, NULL);
    EXPECT_STATUS(w.r, 200);
    json_t *got = watch_events(w.r);
    int modified = 0, bookmarks = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(got, i, ev)
    {
        const char *type = json_string_value(json_object_get(ev, "type"));
        expect_partial(json_object_get(ev, "object"), type);
        modified += !strcmp(type, "MODIFIED");
        bookmarks += !strcmp(type, "BOOKMARK");
    }
    assert_true(modified > 0);
    assert_true(bookmarks > 0);
    json_decref(got);
    resp_free(w.r);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/meta-idx?propagationPolicy=Background");
    json_decref(names);
}

/* A watch without a resourceVersion starts with the current state as ADDED;
 * Pods' DELETED events carry the last state (09). */
static void test_watch_pods_from_now(void **state)
{
    (void)state;
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path,
             "/api/v1/namespaces/transcripts/pods?labelSelector=app%%3Dunsched&"
             "timeoutSeconds=2&watch=1");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_thread, &w), 0);
    pthread_join(th, NULL);
    json_t *got = watch_events(w.r);
    assert_int_equal(json_array_size(got), 4);
    size_t i;
    json_t *e;
    json_array_foreach(got, i, e)
    {
        assert_string_equal(json_string_value(json_object_get(e, "type")), "ADDED");
    }
    json_decref(got);
    resp_free(w.r);
}

/* 10, 10b, 10d: the two forms of 410 Gone. */
static void test_expired(void **state)
{
    (void)state;
    json_t *l = get_json("/api/v1/namespaces/transcripts/events?limit=1");
    const char *cont =
        json_string_value(json_object_get(json_object_get(l, "metadata"), "continue"));
    assert_non_null(cont);
    char path[1024];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/events?limit=1&continue=%s", cont);
    /* The window forgets everything up to now. */
    fake("/fake/compact", NULL);
    /* 10: a watch from a too-old rv: 200 and one ERROR event, then the end. */
    json_t *t = transcript("10-watch-too-old-resource-version");
    resp *r = replay(t);
    EXPECT_STATUS(r, 200);
    json_t *got = watch_events(r);
    assert_int_equal(json_array_size(got), 1);
    const json_t *obj = json_object_get(json_array_get(got, 0), "object");
    assert_string_equal(json_string_value(json_object_get(json_array_get(got, 0), "type")),
                        "ERROR");
    json_t *want = json_deep_copy(json_object_get(json_array_get(want_body(t), 0), "object"));
    json_object_set(want, "message", json_object_get(obj, "message"));
    expect_json_equal(obj, want, "10 ERROR event");
    assert_int_equal(strncmp(json_string_value(json_object_get(obj, "message")),
                             "too old resource version: 1 (", 29),
                     0);
    json_decref(want);
    json_decref(got);
    resp_free(r);
    json_decref(t);
    /* 10b: a list at a compacted rv is a real 410. */
    expect_same_answer("10b-list-exact-resource-version-compacted");
    /* 10d: an expired continue token: 410 with a fresh token. */
    t = transcript("10d-list-continue-token-expired");
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 410);
    json_t *w2 = json_deep_copy(want_body(t));
    json_object_set(w2, "metadata", json_object_get(r->json, "metadata"));
    expect_json_equal(r->json, w2, "10d");
    assert_non_null(json_object_get(json_object_get(r->json, "metadata"), "continue"));
    json_decref(w2);
    resp_free(r);
    json_decref(t);
    json_decref(l);
}

/* 13, 13b: a taint goes first; untainting removes it. */
static void test_taint_untaint(void **state)
{
    (void)state;
    fake("/fake/nodes/usw2b-a100-spot-0/taint",
         "{\"key\":\"aws-node-termination-handler/spot-itn\",\"value\":\"true\","
         "\"effect\":\"NoSchedule\"}");
    json_t *node = get_json("/api/v1/nodes/usw2b-a100-spot-0");
    json_t *t = transcript("13-node-tainted-spot-itn");
    expect_json_equal(json_object_get(json_object_get(node, "spec"), "taints"),
                      json_object_get(json_object_get(want_body(t), "spec"), "taints"), "13");
    json_decref(node);
    json_decref(t);
    fake("/fake/nodes/usw2b-a100-spot-0/untaint",
         "{\"key\":\"aws-node-termination-handler/spot-itn\"}");
    node = get_json("/api/v1/nodes/usw2b-a100-spot-0");
    t = transcript("13b-node-untainted");
    expect_json_equal(json_object_get(json_object_get(node, "spec"), "taints"),
                      json_object_get(json_object_get(want_body(t), "spec"), "taints"), "13b");
    json_decref(node);
    json_decref(t);
}

/* 14c: an unscheduled pod's log is 204; a bound pod's container not started yet is the
 * kubelet's 400; a running one's is the text written, each line with the time it was written
 * (timestamps=true), from a second on (sinceTime, whole seconds as the apiserver passes it),
 * its last lines (tailLines), at most limitBytes; a container the pod lacks is 400. */
static void test_pod_log(void **state)
{
    (void)state;
    json_t *t = transcript("14c-pod-log-unscheduled-pod");
    resp *r = replay(t);
    EXPECT_STATUS(r, 204);
    assert_int_equal(r->len, 0);
    resp_free(r);
    json_decref(t);
    json_t *names = create_indexed_job("log-idx");
    const char *p0 = json_string_value(json_array_get(names, 0));
    char path[512];
    char api[256];
    snprintf(api, sizeof api, "/api/v1/namespaces/transcripts/pods/%.128s/log", p0);
    r = call("GET", api, NULL);
    EXPECT_STATUS(r, 400);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "BadRequest");
    char want[512];
    snprintf(want, sizeof want, "container \"trainer\" in pod \"%s\" is waiting to start: "
             "ContainerCreating", p0);
    assert_string_equal(json_string_value(json_object_get(r->json, "message")), want);
    resp_free(r);
    set_phase(p0, "{\"phase\":\"Running\"}");
    snprintf(path, sizeof path, "/fake/pods/transcripts/%s/log", p0);
    resp *w = call("PUT", path, "epoch 1\nepoch 2\nepoch 3\n");
    EXPECT_STATUS(w, 200);
    resp_free(w);
    snprintf(path, sizeof path, "%.256s?tailLines=2", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(r->ctype, "text/plain");
    assert_string_equal(r->body, "epoch 2\nepoch 3\n");
    resp_free(r);
    snprintf(path, sizeof path, "%.256s?container=trainer&timestamps=true", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    /* "2026-11-26T09:35:23.123456789Z epoch 1\n", three times, times increasing. */
    char *l2 = strchr(r->body, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    assert_int_equal(strlen(r->body), 3 * 39);
    assert_true(r->body[30] == ' ' && r->body[29] == 'Z' && r->body[19] == '.');
    assert_memory_equal(r->body + 31, "epoch 1\n", 8);
    assert_memory_equal(l3 + 31, "epoch 3\n", 8);
    assert_true(memcmp(r->body, l2, 30) < 0 && memcmp(l2, l3, 30) < 0);
    char since[40];
    snprintf(since, sizeof since, "%.30s", l3);
    resp_free(r);
    /* sinceTime in the future of every line: none; at the second of the last: from there. */
    snprintf(path, sizeof path, "%.256s?sinceTime=2999-01-01T00:00:00Z", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    assert_int_equal(r->len, 0);
    resp_free(r);
    snprintf(path, sizeof path, "%.256s?sinceTime=%s", api, since);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    assert_true(strstr(r->body, "epoch 3\n") != NULL);
    resp_free(r);
    snprintf(path, sizeof path, "%.256s?limitBytes=10", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(r->body, "epoch 1\nep");
    resp_free(r);
    snprintf(path, sizeof path, "%.256s?limitBytes=0", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 422);
    resp_free(r);
    snprintf(path, sizeof path, "%.256s?container=other", api);
    r = call("GET", path, NULL);
    EXPECT_STATUS(r, 400);
    snprintf(want, sizeof want, "container other is not valid for pod %s", p0);
    assert_string_equal(json_string_value(json_object_get(r->json, "message")), want);
    resp_free(r);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/log-idx?propagationPolicy=Background");
    json_decref(names);
}

/* Background deletion: the garbage collector removes the Job's pods and the
 * Service it owns; Foreground answers the Job with its finalizer (07e). */
static void test_garbage_collection(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("gc-idx");
    json_t *job = get_json("/apis/batch/v1/namespaces/transcripts/jobs/gc-idx");
    const json_t *uid = json_object_get(json_object_get(job, "metadata"), "uid");
    json_t *svc = json_pack("{s:s, s:s, s:{s:s, s:[{s:s, s:s, s:s, s:O, s:b}]}, "
                            "s:{s:s, s:{s:s}, s:[{s:s, s:i}]}}",
                            "apiVersion", "v1", "kind", "Service", "metadata", "name", "gc-idx",
                            "ownerReferences", "apiVersion", "batch/v1", "kind", "Job", "name",
                            "gc-idx", "uid", uid, "controller", 1, "spec", "clusterIP", "None",
                            "selector", "job-name", "gc-idx", "ports", "name", "x", "port", 29500);
    resp *r =
        call_json("POST", "/api/v1/namespaces/transcripts/services?fieldValidation=Strict", svc);
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_decref(job);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/gc-idx?propagationPolicy=Background");
    r = call("GET", "/api/v1/namespaces/transcripts/services/gc-idx", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
    json_t *pods = get_json("/api/v1/namespaces/transcripts/pods?labelSelector=job-name%3Dgc-idx");
    assert_int_equal(json_array_size(json_object_get(pods, "items")), 0);
    json_decref(pods);
    json_decref(names);

    names = create_indexed_job("fg-idx");
    json_t *t = transcript("07e-delete-job-foreground");
    r = call("DELETE",
             "/apis/batch/v1/namespaces/transcripts/jobs/fg-idx?"
             "propagationPolicy=Foreground",
             NULL);
    EXPECT_STATUS(r, 200);
    expect_json_equal(json_object_get(json_object_get(r->json, "metadata"), "finalizers"),
                      json_object_get(json_object_get(want_body(t), "metadata"), "finalizers"),
                      "07e finalizers");
    assert_non_null(json_object_get(json_object_get(r->json, "metadata"), "deletionTimestamp"));
    resp_free(r);
    json_decref(t);
    r = call("GET", "/apis/batch/v1/namespaces/transcripts/jobs/fg-idx", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
    json_decref(names);
}

/* Eviction: DisruptionTarget, then Failed; the Job controller counts it. */
static void test_evict(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("evict-idx");
    const char *p0 = json_string_value(json_array_get(names, 0));
    set_phase(p0, "{\"phase\":\"Running\"}");
    char path[512];
    snprintf(path, sizeof path, "/fake/pods/transcripts/%s/evict", p0);
    fake(path, NULL);
    json_t *s = job_status("evict-idx");
    assert_int_equal(json_integer_value(json_object_get(s, "failed")), 2);
    json_t *c = json_array_get(json_object_get(s, "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "BackoffLimitExceeded");
    json_decref(s);
    json_t *ev = get_json("/api/v1/namespaces/transcripts/events?fieldSelector="
                          "involvedObject.name%3Devict-idx");
    assert_true(json_array_size(json_object_get(ev, "items")) >= 3);
    json_decref(ev);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/evict-idx?propagationPolicy=Background");
    json_decref(names);
}

/* The pod (new) or NULL when it is gone (404). */
static json_t *pod_or_null(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s", name);
    resp *r = call("GET", path, NULL);
    json_t *j = r->status == 200 ? json_incref(r->json) : NULL;
    if (r->status != 200 && r->status != 404)
        fail_msg("GET %s: %ld", path, r->status);
    resp_free(r);
    return j;
}

/*
 * /fake/kubelet {"terminating": true}: a bound pod deleted with a grace period terminates as on
 * a kubelet: it stays, being deleted, until its containers end (a phase change) or the period
 * runs out (the kubelet kills it); off again, such a pod goes at once.
 */
static void test_kubelet_terminating(void **state)
{
    (void)state;
    fake("/fake/kubelet", "{\"terminating\": true}");
    json_t *names = create_indexed_job("term-idx");
    const char *p0 = json_string_value(json_array_get(names, 0));
    const char *p1 = json_string_value(json_array_get(names, 1));
    set_phase(p0, "{\"phase\":\"Running\"}");
    set_phase(p1, "{\"phase\":\"Running\"}");
    /* Deleted with 1 s: terminating, then killed when the second has passed. */
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s?gracePeriodSeconds=1", p1);
    delete_ok(path);
    json_t *p = pod_or_null(p1);
    assert_non_null(p);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "metadata"),
                                                        "deletionGracePeriodSeconds")),
                     1);
    json_decref(p);
    int gone = 0;
    for (int i = 0; i < 100 && !gone; i++) {
        json_t *q = pod_or_null(p1);
        gone = q == NULL;
        json_decref(q);
        if (!gone)
            usleep(100 * 1000);
    }
    assert_true(gone);
    /* The Job goes: the collector deletes p0 with its own period (30 s); it terminates until
     * its container ends. */
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/term-idx?propagationPolicy=Background");
    p = pod_or_null(p0);
    assert_non_null(p);
    const json_t *md = json_object_get(p, "metadata");
    assert_non_null(json_object_get(md, "deletionTimestamp"));
    assert_int_equal(json_integer_value(json_object_get(md, "deletionGracePeriodSeconds")), 30);
    assert_string_equal(json_string_value(json_object_get(json_object_get(p, "status"), "phase")),
                        "Running");
    json_decref(p);
    set_phase(p0, "{\"phase\":\"Failed\", \"exitCode\": 143}");
    p = pod_or_null(p0);
    assert_null(p);
    fake("/fake/kubelet", "{\"terminating\": false}");
    json_decref(names);
}

/* Injected faults: 429 with Retry-After, 500, for the next N matching requests. */
static void test_faults(void **state)
{
    (void)state;
    fake("/fake/faults", "{\"method\":\"GET\",\"path\":\"/api/v1/nodes\",\"count\":1,"
                         "\"status\":429,\"retryAfter\":2}");
    fake("/fake/faults", "{\"method\":\"GET\",\"path\":\"/api/v1/nodes\",\"count\":1,"
                         "\"status\":500}");
    resp *r = call("GET", "/api/v1/nodes", NULL);
    EXPECT_STATUS(r, 429);
    assert_string_equal(r->retry_after, "2");
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "TooManyRequests");
    resp_free(r);
    r = call("GET", "/api/v1/nodes", NULL);
    EXPECT_STATUS(r, 500);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "InternalError");
    resp_free(r);
    r = call("GET", "/api/v1/nodes", NULL);
    EXPECT_STATUS(r, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 14);
    resp_free(r);
}

/* Dropping watches ends every open watch long before its timeout. */
static void test_drop_watches(void **state)
{
    (void)state;
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path, "/api/v1/nodes?watch=true&timeoutSeconds=120");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_thread, &w), 0);
    /* The watch may not have started at the first drop: drop until it ends. */
    while (!watcher_done(&w)) {
        fake("/fake/watches/drop", NULL);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_join(th, NULL);
    EXPECT_STATUS(w.r, 200);
    /* It had delivered the nodes as ADDED before it ended. */
    json_t *got = watch_events(w.r);
    assert_true(json_array_size(got) <= 14);
    json_decref(got);
    resp_free(w.r);
}

/* Volcano jobs are validated by their CRD's schema. */
static void test_volcano_job(void **state)
{
    (void)state;
    const char *path = "/apis/batch.volcano.sh/v1alpha1/namespaces/transcripts/jobs?"
                       "fieldValidation=Strict";
    resp *r = call("POST", path,
                   "{\"apiVersion\":\"batch.volcano.sh/v1alpha1\",\"kind\":\"Job\","
                   "\"metadata\":{\"name\":\"vc-1\"},\"spec\":{\"minAvailable\":2,"
                   "\"schedulerName\":\"volcano\",\"queue\":\"default\",\"tasks\":[{\"name\":"
                   "\"worker\",\"replicas\":2,\"template\":{\"spec\":{\"restartPolicy\":"
                   "\"Never\",\"containers\":[{\"name\":\"m\",\"image\":\"busybox:1.36\"}]}}}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    r = call("POST", path,
             "{\"apiVersion\":\"batch.volcano.sh/v1alpha1\",\"kind\":\"Job\","
             "\"metadata\":{\"name\":\"vc-2\"},\"spec\":{\"minAvailable\":2,\"bogus\":1}}");
    EXPECT_STATUS(r, 400);
    assert_non_null(strstr(json_string_value(json_object_get(r->json, "message")),
                           "unknown field \"spec.bogus\""));
    resp_free(r);
    delete_ok("/apis/batch.volcano.sh/v1alpha1/namespaces/transcripts/jobs/vc-1");
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *zone_of_pod(const char *pod, char *buf, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s", pod);
    json_t *p = get_json(path);
    const char *node = json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName"));
    assert_non_null(node);
    snprintf(path, sizeof path, "/api/v1/nodes/%s", node);
    json_t *n = get_json(path);
    snprintf(
        buf, len, "%s",
        json_string_value(json_object_get(json_object_get(json_object_get(n, "metadata"), "labels"),
                                          "topology.kubernetes.io/zone")));
    json_decref(n);
    json_decref(p);
    return buf;
}

/* A gang's podAffinity on the zone: the first pod goes anywhere that fits,
 * the others follow it into its zone. */
static void test_gang_pod_affinity(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "gang-%d", i);
        json_t *pod = json_pack(
            "{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:{s:s}, s:[{s:s, s:s, s:s, s:s}], "
            "s:{s:{s:[{s:{s:{s:s}}, s:s}]}}, s:[{s:s, s:s, s:{s:{s:i}}}]}}",
            "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "labels", "gang", "g1",
            "spec", "restartPolicy", "Never", "nodeSelector", "nvidia.com/gpu.product",
            "NVIDIA-A100-SXM4-40GB", "tolerations", "key", "nvidia.com/gpu", "operator", "Equal",
            "value", "present", "effect", "NoSchedule", "affinity", "podAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution", "labelSelector", "matchLabels",
            "gang", "g1", "topologyKey", "topology.kubernetes.io/zone", "containers", "name", "m",
            "image", "busybox:1.36", "resources", "limits", "nvidia.com/gpu", 8);
        resp *r =
            call_json("POST", "/api/v1/namespaces/transcripts/pods?fieldValidation=Strict", pod);
        EXPECT_STATUS(r, 201);
        resp_free(r);
    }
    char z0[64], z1[64];
    assert_string_equal(zone_of_pod("gang-0", z0, sizeof z0), zone_of_pod("gang-1", z1, sizeof z1));
    delete_ok("/api/v1/namespaces/transcripts/pods/gang-0");
    delete_ok("/api/v1/namespaces/transcripts/pods/gang-1");
}

/* The autoscaler stand-in adds a group's nodes only for pending pods, up to
 * its maximum, and says so in a TriggeredScaleUp event. */
static void test_autoscaler(void **state)
{
    (void)state;
    fake("/fake/nodegroups",
         "{\"name\":\"h100-spot-usw2c\",\"max\":2,\"node\":{\"metadata\":{\"labels\":{"
         "\"nvidia.com/gpu.product\":\"NVIDIA-H100-80GB-HBM3-TEST\","
         "\"topology.kubernetes.io/zone\":\"us-west-2c\"}},\"spec\":{\"taints\":[{\"key\":"
         "\"nvidia.com/gpu\",\"value\":\"present\",\"effect\":\"NoSchedule\"}]},"
         "\"status\":{\"allocatable\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"192\","
         "\"memory\":\"2048Gi\",\"pods\":\"110\"}}}}");
    json_t *t = transcript("11b-indexed-job-create");
    json_t *job = json_deep_copy(json_object_get(json_object_get(t, "request"), "body"));
    json_decref(t);
    json_object_set_new(json_object_get(job, "metadata"), "name", json_string("scale-idx"));
    json_t *tspec =
        json_object_get(json_object_get(json_object_get(job, "spec"), "template"), "spec");
    json_object_set_new(json_object_get(tspec, "nodeSelector"), "nvidia.com/gpu.product",
                        json_string("NVIDIA-H100-80GB-HBM3-TEST"));
    json_object_set_new(
        json_object_get(
            json_object_get(json_array_get(json_object_get(tspec, "containers"), 0), "resources"),
            "limits"),
        "nvidia.com/gpu", json_integer(8));
    resp *r = call_json("POST", "/apis/batch/v1/namespaces/transcripts/jobs", job);
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *pods =
        get_json("/api/v1/namespaces/transcripts/pods?labelSelector=job-name%3Dscale-idx");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(pods, "items"), i, p)
    {
        const char *node =
            json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName"));
        assert_non_null(node);
        assert_int_equal(strncmp(node, "h100-spot-usw2c-", 16), 0);
    }
    assert_int_equal(json_array_size(json_object_get(pods, "items")), 2);
    json_decref(pods);
    json_t *ev = get_json("/api/v1/namespaces/transcripts/events?fieldSelector="
                          "reason%3DTriggeredScaleUp");
    assert_int_equal(json_array_size(json_object_get(ev, "items")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(ev, "items"), 0), "message")),
                        "pod triggered scale-up: [{h100-spot-usw2c 0->1 (max: 2)}]");
    json_decref(ev);
    /* The group is at its maximum: one more pod waits. */
    r = call("POST", "/api/v1/namespaces/transcripts/pods",
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"scale-more\"},"
             "\"spec\":{\"restartPolicy\":\"Never\",\"nodeSelector\":{\"nvidia.com/gpu.product\":"
             "\"NVIDIA-H100-80GB-HBM3-TEST\"},\"tolerations\":[{\"operator\":\"Exists\"}],"
             "\"containers\":[{\"name\":\"m\",\"image\":\"busybox:1.36\",\"resources\":{"
             "\"limits\":{\"nvidia.com/gpu\":1}}}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *pod = get_json("/api/v1/namespaces/transcripts/pods/scale-more");
    assert_null(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    json_decref(pod);
    delete_ok("/api/v1/namespaces/transcripts/pods/scale-more");
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/scale-idx?propagationPolicy=Background");
    delete_ok("/api/v1/nodes/h100-spot-usw2c-0");
    delete_ok("/api/v1/nodes/h100-spot-usw2c-1");
    r = call("DELETE", "/fake/nodegroups/h100-spot-usw2c", NULL);
    EXPECT_STATUS(r, 200);
    resp_free(r);
}

/* activeDeadlineSeconds: Failed with DeadlineExceeded, the pods deleted. */
static void test_deadline(void **state)
{
    (void)state;
    json_t *t = transcript("11b-indexed-job-create");
    json_t *job = json_deep_copy(json_object_get(json_object_get(t, "request"), "body"));
    json_decref(t);
    json_object_set_new(json_object_get(job, "metadata"), "name", json_string("late-idx"));
    json_object_set_new(json_object_get(job, "spec"), "activeDeadlineSeconds", json_integer(1));
    resp *r = call_json("POST", "/apis/batch/v1/namespaces/transcripts/jobs", job);
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *c = NULL;
    for (int i = 0; i < 100 && !c; i++) {
        json_t *s = job_status("late-idx");
        json_t *c0 = json_array_get(json_object_get(s, "conditions"), 0);
        if (c0)
            c = json_incref(c0);
        json_decref(s);
        if (!c)
            sleep_ms(100);
    }
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(c, "type")), "Failed");
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "DeadlineExceeded");
    assert_string_equal(json_string_value(json_object_get(c, "message")),
                        "Job was active longer than specified deadline");
    json_decref(c);
    json_t *pods =
        get_json("/api/v1/namespaces/transcripts/pods?labelSelector=job-name%3Dlate-idx");
    assert_int_equal(json_array_size(json_object_get(pods, "items")), 0);
    json_decref(pods);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/late-idx?propagationPolicy=Background");
}

/* PUT keeps the status, the status subresource keeps the spec; a stale
 * resourceVersion is a 409 Conflict; a merge patch of status works for tests. */
static void test_update_and_patch(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("upd-idx");
    json_t *job = get_json("/apis/batch/v1/namespaces/transcripts/jobs/upd-idx");
    json_t *stale = json_deep_copy(job);
    json_object_set_new(json_object_get(job, "metadata"), "labels",
                        json_pack("{s:s}", "app", "changed"));
    resp *r = call_json("PUT",
                        "/apis/batch/v1/namespaces/transcripts/jobs/upd-idx?"
                        "fieldValidation=Strict",
                        job);
    EXPECT_STATUS(r, 200);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r->json, "status"), "active")), 2);
    resp_free(r);
    r = call_json("PUT", "/apis/batch/v1/namespaces/transcripts/jobs/other", json_incref(stale));
    EXPECT_STATUS(r, 400);
    assert_string_equal(json_string_value(json_object_get(r->json, "message")),
                        "the name of the object (upd-idx) does not match the name on the URL "
                        "(other)");
    resp_free(r);
    r = call_json("PUT", "/apis/batch/v1/namespaces/transcripts/jobs/upd-idx", stale);
    EXPECT_STATUS(r, 409);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "Conflict");
    resp_free(r);
    r = call("PATCH", "/api/v1/namespaces/transcripts/pods/nope/status", "{}");
    EXPECT_STATUS(r, 404);
    resp_free(r);
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s/status",
             json_string_value(json_array_get(names, 0)));
    r = call("PATCH", path,
             "{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
             "\"Ready\",\"status\":\"True\"}]}}");
    EXPECT_STATUS(r, 200);
    resp_free(r);
    json_t *s = job_status("upd-idx");
    assert_int_equal(json_integer_value(json_object_get(s, "ready")), 1);
    json_decref(s);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/upd-idx?propagationPolicy=Background");
    json_decref(names);
}

/* 11a: a headless Service with the apiserver's defaults. */
static void test_headless_service(void **state)
{
    (void)state;
    json_t *t = transcript("11a-headless-service-create");
    resp *r = replay(t);
    EXPECT_STATUS(r, 201);
    expect_same_shape(r->json, want_body(t), "11a");
    resp_free(r);
    json_decref(t);
    delete_ok("/api/v1/namespaces/transcripts/services/idx-demo");
}

/* 15: deleting a namespace answers it Terminating; then it and its objects go. */
static void test_namespace_delete(void **state)
{
    (void)state;
    resp *r =
        call("POST", "/api/v1/namespaces",
             "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"gone\"}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    r = call("POST", "/api/v1/namespaces/gone/services",
             "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"s\"},"
             "\"spec\":{\"ports\":[{\"port\":80}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *t = transcript("15-namespace-delete");
    r = call("DELETE", "/api/v1/namespaces/gone", NULL);
    EXPECT_STATUS(r, 200);
    json_t *want = json_deep_copy(want_body(t));
    json_object_set_new(json_object_get(want, "metadata"), "name", json_string("gone"));
    json_object_set_new(json_object_get(json_object_get(want, "metadata"), "labels"),
                        "kubernetes.io/metadata.name", json_string("gone"));
    expect_same_shape(r->json, want, "15");
    json_decref(want);
    resp_free(r);
    json_decref(t);
    r = call("GET", "/api/v1/namespaces/gone/services/s", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
    r = call("GET", "/api/v1/namespaces/gone", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
}

/* A slow answer is still the right answer. */
static void test_fault_delay(void **state)
{
    (void)state;
    fake("/fake/faults", "{\"path\":\"/api/v1/nodes/usw2a-cpu-od-0\",\"count\":1,"
                         "\"delayMs\":300}");
    json_t *n = get_json("/api/v1/nodes/usw2a-cpu-od-0");
    assert_string_equal(json_string_value(json_object_get(json_object_get(n, "metadata"), "name")),
                        "usw2a-cpu-od-0");
    json_decref(n);
    resp *r = call("DELETE", "/fake/faults", NULL);
    EXPECT_STATUS(r, 200);
    resp_free(r);
}

/* pods/log?follow=true streams what is appended until the pod ends. */
static void test_pod_log_follow(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("follow-idx");
    const char *p0 = json_string_value(json_array_get(names, 0));
    char path[512];
    set_phase(p0, "{\"phase\":\"Running\"}");
    snprintf(path, sizeof path, "/fake/pods/transcripts/%s/log", p0);
    resp *r = call("PUT", path, "epoch 1\n");
    EXPECT_STATUS(r, 200);
    resp_free(r);
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path, "/api/v1/namespaces/transcripts/pods/%s/log?follow=true", p0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_thread, &w), 0);
    r = call("POST", path, "epoch 2\n");
    EXPECT_STATUS(r, 200);
    resp_free(r);
    set_phase(p0, "{\"phase\":\"Succeeded\"}");
    pthread_join(th, NULL);
    EXPECT_STATUS(w.r, 200);
    assert_string_equal(w.r->ctype, "text/plain");
    assert_string_equal(w.r->body, "epoch 1\nepoch 2\n");
    resp_free(w.r);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/follow-idx?propagationPolicy=Background");
    json_decref(names);
}

/* The selector of the pods bound to nodes and not finished, as the scheduler and the
 * cluster-autoscaler list them, escaped as client-go sends it. */
#define BOUND_PODS "spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed"

static int has_pod(const json_t *list, const char *name)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        if (!strcmp(json_string_value(json_object_get(json_object_get(p, "metadata"), "name")),
                    name))
            return 1;
    }
    return 0;
}

/*
 * fieldSelector on pods across namespaces: bound and unfinished pods only; a pod that ends
 * leaves the selector and a watch says DELETED (with its new state), as the watch cache does;
 * a field label pods do not have is the conversion's 400.
 */
static void test_bound_pods_field_selector(void **state)
{
    (void)state;
    json_t *names = create_indexed_job("fsel-idx");
    const char *p0 = json_string_value(json_array_get(names, 0));
    const char *p1 = json_string_value(json_array_get(names, 1));
    /* A pod no node takes: never bound, never listed. */
    resp *r = call("POST", "/api/v1/namespaces/transcripts/pods",
                   "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
                   "\"fsel-unbound\"},\"spec\":{\"nodeSelector\":{\"none\":\"none\"},"
                   "\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}");
    EXPECT_STATUS(r, 201);
    resp_free(r);
    json_t *l = get_json("/api/v1/pods?fieldSelector=" BOUND_PODS);
    assert_string_equal(json_string_value(json_object_get(l, "kind")), "PodList");
    assert_true(has_pod(l, p0));
    assert_true(has_pod(l, p1));
    assert_false(has_pod(l, "fsel-unbound"));
    /* The same selector unescaped, as a person types it into curl, reads the same. */
    json_t *l2 = get_json("/api/v1/pods?fieldSelector=spec.nodeName!=,status.phase!=Succeeded,"
                          "status.phase!=Failed");
    assert_int_equal(json_array_size(json_object_get(l2, "items")),
                     json_array_size(json_object_get(l, "items")));
    json_decref(l2);

    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path, "%s%s%s%s", "/api/v1/pods?fieldSelector=", BOUND_PODS,
             "&allowWatchBookmarks=true&timeoutSeconds=1&watch=true&resourceVersion=",
             json_string_value(json_object_get(json_object_get(l, "metadata"), "resourceVersion")));
    json_decref(l);
    set_phase(p0, "{\"phase\":\"Running\"}");
    set_phase(p0, "{\"phase\":\"Succeeded\"}");
    watch_thread(&w);
    EXPECT_STATUS(w.r, 200);
    json_t *got = watch_events(w.r);
    const char *last_p0 = NULL, *phase = NULL;
    int modified = 0;
    size_t i;
    json_t *e;
    json_array_foreach(got, i, e)
    {
        const json_t *o = json_object_get(e, "object");
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *n = json_string_value(json_object_get(json_object_get(o, "metadata"), "name"));
        assert_false(n && !strcmp(n, "fsel-unbound"));
        if (n && !strcmp(n, p0)) {
            modified |= !strcmp(type, "MODIFIED");
            last_p0 = type;
            phase = json_string_value(json_object_get(json_object_get(o, "status"), "phase"));
        }
    }
    assert_true(modified); /* Running: still selected */
    assert_non_null(last_p0);
    assert_string_equal(last_p0, "DELETED");
    assert_string_equal(phase, "Succeeded");
    json_decref(got);
    resp_free(w.r);
    l = get_json("/api/v1/pods?fieldSelector=" BOUND_PODS);
    assert_false(has_pod(l, p0));
    assert_true(has_pod(l, p1));
    json_decref(l);

    /* A field pods cannot be selected by: 400 BadRequest, the conversion's words, no details;
     * a list and a watch alike. */
    const char *bad[] = {"/api/v1/pods?fieldSelector=spec.nodeNam%21%3D",
                         "/api/v1/pods?fieldSelector=spec.nodeNam%21%3D&watch=true",
                         "/api/v1/namespaces/transcripts/pods?fieldSelector=status.phase%3D"
                         "Running%2CinvolvedObject.name%3Dx"};
    const char *label[] = {"spec.nodeNam", "spec.nodeNam", "involvedObject.name"};
    for (i = 0; i < 3; i++) {
        r = call("GET", bad[i], NULL);
        EXPECT_STATUS(r, 400);
        char want[128];
        snprintf(want, sizeof want, "field label not supported: %s", label[i]);
        assert_string_equal(json_string_value(json_object_get(r->json, "kind")), "Status");
        assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "BadRequest");
        assert_string_equal(json_string_value(json_object_get(r->json, "message")), want);
        assert_int_equal(json_integer_value(json_object_get(r->json, "code")), 400);
        assert_null(json_object_get(r->json, "details"));
        resp_free(r);
    }
    delete_ok("/api/v1/namespaces/transcripts/pods/fsel-unbound");
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/fsel-idx?propagationPolicy=Background");
    json_decref(names);
}

/* DELETE on a collection deletes what the selector picks and lists it. */
static void test_delete_collection(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"dc-%d\","
                 "\"labels\":{\"sweep\":\"dc\"}},\"spec\":{\"ports\":[{\"port\":80}]}}",
                 i);
        resp *r = call("POST", "/api/v1/namespaces/transcripts/services", body);
        EXPECT_STATUS(r, 201);
        resp_free(r);
    }
    resp *r =
        call("DELETE", "/api/v1/namespaces/transcripts/services?labelSelector=sweep%3Ddc", NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "kind")), "ServiceList");
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 2);
    resp_free(r);
    r = call("GET", "/api/v1/namespaces/transcripts/services/dc-0", NULL);
    EXPECT_STATUS(r, 404);
    resp_free(r);
}

/* /version and /healthz need no token; a body of another apiVersion is a 400. */
static void test_version_and_api_version(void **state)
{
    (void)state;
    resp *r = call_as(NULL, "GET", "/version", NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "gitVersion")), "v1.26.1");
    assert_string_equal(json_string_value(json_object_get(r->json, "minor")), "26");
    resp_free(r);
    r = call_as(NULL, "GET", "/healthz", NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(r->body, "ok");
    resp_free(r);
    r = call("POST", "/apis/batch/v1/namespaces/transcripts/jobs",
             "{\"apiVersion\":\"batch/v1beta1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"v\"}}");
    EXPECT_STATUS(r, 400);
    assert_string_equal(json_string_value(json_object_get(r->json, "message")),
                        "the API version in the data (batch/v1beta1) does not match the expected "
                        "API version (batch/v1)");
    resp_free(r);
}

/* Label keys and values are checked as the apiserver checks them (422). */
static void test_label_validation(void **state)
{
    (void)state;
    resp *r = call("POST", "/api/v1/namespaces/transcripts/services",
                   "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"lbl\","
                   "\"labels\":{\"trainyard.io/job-id\":\"bad value!\",\"Bad_Prefix/x\":\"ok\"}},"
                   "\"spec\":{\"ports\":[{\"port\":80}]}}");
    EXPECT_STATUS(r, 422);
    assert_string_equal(json_string_value(json_object_get(r->json, "reason")), "Invalid");
    const json_t *causes = json_object_get(json_object_get(r->json, "details"), "causes");
    assert_int_equal(json_array_size(causes), 2);
    const json_t *c0 = json_array_get(causes, 0), *c1 = json_array_get(causes, 1);
    assert_string_equal(json_string_value(json_object_get(c0, "field")), "metadata.labels");
    assert_string_equal(
        json_string_value(json_object_get(c0, "message")),
        "Invalid value: \"bad value!\": a valid label must be an empty string or consist of "
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
    assert_non_null(strstr(json_string_value(json_object_get(c1, "message")),
                           "\"Bad_Prefix/x\": prefix part a lowercase RFC 1123 subdomain"));
    resp_free(r);
}

/* A node that goes takes its pods with it: Failed with DisruptionTarget
 * DeletionByPodGC, then deleted; the Job counts them as failed. */
static void test_node_lost(void **state)
{
    (void)state;
    json_t *l = get_json("/api/v1/namespaces/transcripts/pods?limit=1");
    const char *rv =
        json_string_value(json_object_get(json_object_get(l, "metadata"), "resourceVersion"));
    json_t *names = create_indexed_job("lost-idx");
    fake("/fake/pods/transcripts/phase?labelSelector=job-name%3Dlost-idx",
         "{\"phase\":\"Running\"}");
    const char *p0 = json_string_value(json_array_get(names, 0));
    char path[1024];
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s", p0);
    json_t *pod = get_json(path);
    char node[128];
    snprintf(node, sizeof node, "%s",
             json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName")));
    json_decref(pod);
    snprintf(path, sizeof path, "/api/v1/nodes/%s", node);
    json_t *saved = get_json(path);
    delete_ok(path);
    json_t *s = job_status("lost-idx");
    json_t *c = json_array_get(json_object_get(s, "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "BackoffLimitExceeded");
    json_decref(s);
    /* Gone once the Job controller has let go of it (its tracking finalizer), which may come
     * after the Job's condition on a loaded machine: wait, so the watch below has it all. */
    snprintf(path, sizeof path, "/api/v1/namespaces/transcripts/pods/%s", p0);
    long gone = 0;
    for (int i = 0; i < 500 && gone != 404; i++) {
        resp *g = call("GET", path, NULL);
        gone = g->status;
        resp_free(g);
        if (gone != 404)
            sleep_ms(20);
    }
    assert_int_equal(gone, 404);
    /* The pod's last writes, through a watch from before the job. */
    watcher w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(w.path, sizeof w.path,
             "/api/v1/namespaces/transcripts/pods?fieldSelector=metadata.name%%3D%s&"
             "resourceVersion=%s&timeoutSeconds=1&watch=true",
             p0, rv);
    watch_thread(&w);
    json_t *got = watch_events(w.r);
    int disrupted = 0, deleted = 0;
    size_t i;
    json_t *e;
    json_array_foreach(got, i, e)
    {
        const json_t *st = json_object_get(json_object_get(e, "object"), "status");
        size_t j;
        json_t *cond;
        json_array_foreach(json_object_get(st, "conditions"), j, cond)
        {
            if (!strcmp(json_string_value(json_object_get(cond, "type")), "DisruptionTarget") &&
                !strcmp(json_string_value(json_object_get(cond, "reason")), "DeletionByPodGC") &&
                !strcmp(json_string_value(json_object_get(st, "phase")), "Failed"))
                disrupted = 1;
        }
        deleted |= !strcmp(json_string_value(json_object_get(e, "type")), "DELETED");
    }
    assert_true(disrupted);
    assert_true(deleted);
    json_decref(got);
    resp_free(w.r);
    /* The node comes back for the cases after this one. */
    json_object_del(json_object_get(saved, "metadata"), "resourceVersion");
    char *text = json_dumps(saved, JSON_COMPACT);
    fake("/fake/nodes", text);
    free(text);
    json_decref(saved);
    delete_ok("/apis/batch/v1/namespaces/transcripts/jobs/lost-idx?propagationPolicy=Background");
    json_decref(names);
    json_decref(l);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_KUBE_APISERVER\n", argv[0]);
        return 2;
    }
    g_binary = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_decode_errors_are_400),
        cmocka_unit_test(test_validation_errors_are_422),
        cmocka_unit_test(test_warn_and_ignore),
        cmocka_unit_test(test_create_conflict_not_found),
        cmocka_unit_test(test_indexed_job_failure),
        cmocka_unit_test(test_indexed_job_success),
        cmocka_unit_test(test_indexed_job_mixed),
        cmocka_unit_test(test_scheduler_messages),
        cmocka_unit_test(test_scheduler_retries_on_node_change),
        cmocka_unit_test(test_scheduler_counts_pods_cpu_and_memory),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_watch_job),
        cmocka_unit_test(test_metadata_only),
        cmocka_unit_test(test_watch_pods_from_now),
        cmocka_unit_test(test_taint_untaint),
        cmocka_unit_test(test_pod_log),
        cmocka_unit_test(test_garbage_collection),
        cmocka_unit_test(test_evict),
        cmocka_unit_test(test_kubelet_terminating),
        cmocka_unit_test(test_node_lost),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_drop_watches),
        cmocka_unit_test(test_volcano_job),
        cmocka_unit_test(test_gang_pod_affinity),
        cmocka_unit_test(test_autoscaler),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_update_and_patch),
        cmocka_unit_test(test_headless_service),
        cmocka_unit_test(test_namespace_delete),
        cmocka_unit_test(test_fault_delay),
        cmocka_unit_test(test_pod_log_follow),
        cmocka_unit_test(test_bound_pods_field_selector),
        cmocka_unit_test(test_delete_collection),
        cmocka_unit_test(test_version_and_api_version),
        cmocka_unit_test(test_label_validation),
        cmocka_unit_test(test_expired),
        cmocka_unit_test(test_clean_exit),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
