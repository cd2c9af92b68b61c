/*
 * test_kube_quota.c - admission across teams with the real server on the Kubernetes backend,
 * against the fake Kubernetes API server (the 14-node cluster of the transcripts, on the example
 * profile without node groups: its 24 V100s, three nodes of 8, are all the V100s there are).
 *
 * Team vision has a quota of 16 V100s, team nlp 8 and may borrow 16. nlp runs one job to its
 * end, then three of 8 V100s: the cluster's V100s are all nlp's, 16 of them borrowed from
 * vision's idle quota. vision's job, within its quota, takes its GPUs back: nlp's most recently
 * started job is preempted (its Job deleted, its pod with the profile's grace period; the fake
 * keeps a deleted pod terminating until the test, as the worker, ends it), its attempt ends
 * Preempted naming vision's job and it waits again, PENDING; only then is vision's job's Job
 * created. The server is killed and started again on the same database and API server:
 * it adopts the Jobs that run and counts them before it admits anything: the preempted job is
 * not admitted over them, the finished one does not run again, and a second job of vision
 * reclaims from nlp as the counts say it must. When vision's first job ends, nlp's oldest
 * preempted job runs again: attempt 2, restarts unchanged.
 *
 * Usage: test_kube_quota TRAINYARD OPENAPI FAKE_APISERVER (CTest passes them).
 */
#include <curl/curl.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/fake_kube_proc.h"
#include "tests/support/ty_harness.h"

#ifndef TY_KUBE_PROFILE_FIXED
#error "TY_KUBE_PROFILE_FIXED must name a profile without node groups"
#endif
#ifndef TY_KUBE_NODES
#error "TY_KUBE_NODES must name tests/fixtures/fake-kube/nodes-14.json"
#endif

#define NS "trainyard"
#define FAKE_TOKEN "fake-cluster-admin-token"
#define WAIT_S 60
#define JOBS "/apis/batch/v1/namespaces/" NS "/jobs"
#define PODS "/api/v1/namespaces/" NS "/pods"

static const char *g_fake_bin;
static pid_t g_fake_pid = -1;
static char g_fake[64];
static char g_dir[] = "/tmp/ty-kube-quota-XXXXXX";
static char g_kubeconfig[256];
static ty_server *g_srv;
static ty_client *g_cli;

/* ---- the fake ------------------------------------------------------------ */

/* A request to the fake; the body's text (new) in *text. Returns the HTTP status. */
static long fake_text(const char *method, const char *path, const char *body, char **text)
{
    return fk_request(g_fake, FAKE_TOKEN, method, path, body, text);
}

static long fake_call(const char *method, const char *path, const char *body, json_t **out)
{
    char *text = NULL;
    long st = fake_text(method, path, body, &text);
    if (out)
        *out = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return st;
}

/* The list (new) of collection that the selector of job (and attempt, when > 0) picks. */
static json_t *fake_list(const char *collection, const char *job, int attempt)
{
    char sel[256], path[512];
    json_t *r = NULL;
    fk_selector(sel, sizeof sel, job, attempt);
    snprintf(path, sizeof path, "%s?labelSelector=%s", collection, sel);
    if (fake_call("GET", path, NULL, &r) != 200)
        fail_msg("GET %s failed", path);
    return r;
}

static size_t count_objects(const char *collection, const char *job, int attempt)
{
    json_t *r = fake_list(collection, job, attempt);
    size_t n = json_array_size(json_object_get(r, "items"));
    json_decref(r);
    return n;
}

/* Every pod of the attempt moves to the phase in body, as a kubelet would, once its pod exists;
 * asked again while the fake answers 409 (a pod not bound yet, or its Secret not there yet). */
static void set_phase(const char *job, int attempt, const char *body)
{
    for (int i = 0; count_objects(PODS, job, attempt) == 0; i++) {
        if (i == WAIT_S * 10)
            fail_msg("attempt %d of %s: no pod", attempt, job);
        ty_sleep_ms(100);
    }
    long st = fk_set_phase(g_fake, FAKE_TOKEN, NS, job, attempt, body, WAIT_S * 10);
    if (st != 200)
        fail_msg("attempt %d of %s: setting its pods' phase: HTTP %ld", attempt, job, st);
}

/* ---- the server ---------------------------------------------------------- */

static ty_http_resp *call(const char *token, const char *method, const char *path,
                          const char *body, long status)
{
    ty_http_req req = {.method = method, .path = path, .token = token, .body = body};
    ty_http_resp *r = ty_reqx(g_cli, &req);
    if (r->status != status)
        fail_msg("%s %s: %ld, want %ld: %.300s", method, path, r->status, status, r->body);
    return r;
}

static void make_token(const char *name, const char *team, char tok[128])
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"scopes\":[\"submit\",\"read\"],\"team\":\"%s\"}", name, team);
    ty_http_resp *r = call(NULL, "POST", "/v1/tokens", body, 201);
    snprintf(tok, 128, "%s", json_string_value(json_object_get(r->json, "token")));
    ty_resp_destroy(r);
}

/* One rank of 8 V100s (a whole node). */
static void submit(const char *token, const char *name, char id[32])
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"registry.example/trainyard-worker:1.0\","
             "\"command\":[\"trainyard-worker\",\"train\"],\"workers\":{\"count\":1},"
             "\"resources\":{\"gpu\":{\"type\":\"v100\",\"count\":8},\"cpu\":\"4\","
             "\"memory\":\"16Gi\"},\"restart\":{\"max\":1,\"backoff_seconds\":0}}",
             name);
    ty_http_resp *r = call(token, "POST", "/v1/jobs", body, 201);
    snprintf(id, 32, "%s", json_string_value(json_object_get(r->json, "id")));
    ty_resp_destroy(r);
}

static void dump(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    ty_http_resp *r = ty_req(g_cli, "GET", path, NULL);
    print_message("events of %s: %s\n", id, r->body);
    ty_resp_destroy(r);
    char *log = ty_server_log(g_srv);
    size_t n = log ? strlen(log) : 0;
    print_message("server log (tail):\n%s\n", log ? log + (n > 6000 ? n - 6000 : 0) : "");
    free(log);
}

/* The job (new) once its state is `state` and, when reason is set, its pending_reason's. */
static ty_http_resp *wait_job(const char *id, const char *state, const char *reason)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int waited = 0;; waited += 50) {
        ty_http_resp *r = call(NULL, "GET", path, NULL, 200);
        const char *st = json_string_value(json_object_get(r->json, "state"));
        const char *re = json_string_value(
            json_object_get(json_object_get(r->json, "pending_reason"), "reason"));
        if (st && strcmp(st, state) == 0 && (!reason || (re && strcmp(re, reason) == 0)))
            return r;
        if (waited >= WAIT_S * 1000) {
            dump(id);
            fail_msg("job %s never was %s/%s: %.600s", id, state, reason ? reason : "-",
                     r->body);
        }
        ty_resp_destroy(r);
        ty_sleep_ms(50);
    }
}

static void expect_job(const char *id, const char *state)
{
    ty_resp_destroy(wait_job(id, state, NULL));
}

static int64_t jint(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* Submits a job that is admitted: its Job's pod bound and Running, the job RUNNING. */
static void run_job(const char *token, const char *name, char id[32])
{
    submit(token, name, id);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    expect_job(id, "RUNNING");
}

/* The Jobs of ours the API server holds, not being deleted. */
static size_t live_jobs(void)
{
    json_t *r = NULL;
    if (fake_call("GET", JOBS "?labelSelector=trainyard.io%2Fjob-id", NULL, &r) != 200)
        fail_msg("listing Jobs failed");
    size_t n = 0, i;
    json_t *j;
    json_array_foreach(json_object_get(r, "items"), i, j)
    {
        if (!json_object_get(json_object_get(j, "metadata"), "deletionTimestamp"))
            n++;
    }
    json_decref(r);
    return n;
}

/* Waits until the pod of the job's attempt 1 is being deleted (Terminating). */
static void wait_terminating(const char *job)
{
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *l = fake_list(PODS, job, 1);
        const json_t *md = json_object_get(json_array_get(json_object_get(l, "items"), 0),
                                           "metadata");
        int terminating = json_object_get(md, "deletionTimestamp") != NULL;
        json_decref(l);
        if (terminating)
            return;
        ty_sleep_ms(100);
    }
    dump(job);
    fail_msg("the pod of %s was never deleted", job);
}

/*
 * The victim's pod is deleted with the profile's grace period and, while it terminates (its
 * GPUs still taken), the job it makes room for gets no Job; then its worker checkpoints and
 * exits 75, as trainyard-worker does on SIGTERM. The preempted job: PENDING again with its
 * attempt ended Preempted naming the job it made room for, restarts unchanged; its Job and
 * pod gone (the changes since rv, replayed by a watch).
 */
static void expect_preempted(const char *victim, const char *for_id, const char *rv)
{
    wait_terminating(victim);
    /* A round has seen the victim stopping: the job it makes room for waits for its GPUs. */
    ty_http_resp *r = NULL;
    for (int waited = 0;; waited += 50) {
        r = wait_job(for_id, "PENDING", NULL);
        const char *m = json_string_value(
            json_object_get(json_object_get(r->json, "pending_reason"), "message"));
        if (m && strstr(m, "8 being given back"))
            break;
        if (waited >= WAIT_S * 1000)
            fail_msg("job %s never waited for the victim's GPUs: %.600s", for_id, r->body);
        ty_resp_destroy(r);
        ty_sleep_ms(50);
    }
    ty_resp_destroy(r);
    assert_int_equal(count_objects(JOBS, for_id, 0), 0);
    set_phase(victim, 1, "{\"phase\": \"Failed\", \"exitCode\": 75}");
    r = wait_job(victim, "PENDING", NULL);
    if (jint(r->json, "restarts") != 0 || jint(r->json, "attempt") != 1) {
        dump(victim);
        fail_msg("the preempted job: %.1000s", r->body);
    }
    json_t *att = json_object_get(r->json, "current_attempt");
    assert_string_equal(json_string_value(json_object_get(att, "reason")), "Preempted");
    assert_non_null(strstr(json_string_value(json_object_get(att, "message")), for_id));
    ty_resp_destroy(r);
    assert_int_equal(count_objects(JOBS, victim, 1), 0);
    assert_int_equal(count_objects(PODS, victim, 1), 0);
    char sel[256], path[640], *text = NULL;
    fk_selector(sel, sizeof sel, victim, 1);
    snprintf(path, sizeof path, PODS "?watch=1&labelSelector=%s&resourceVersion=%s&timeoutSeconds=1",
             sel, rv);
    assert_int_equal(fake_text("GET", path, NULL, &text), 200);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"deletionGracePeriodSeconds\":90"));
    assert_non_null(strstr(text, "\"type\":\"DELETED\""));
    free(text);
}

/* The resourceVersion of the pods' list now: a watch from it replays what follows. */
static void pods_rv(char rv[32])
{
    json_t *r = NULL;
    assert_int_equal(fake_call("GET", PODS "?limit=1", NULL, &r), 200);
    snprintf(rv, 32, "%s",
             json_string_value(json_object_get(json_object_get(r, "metadata"), "resourceVersion")));
    json_decref(r);
}

static void test_reclaim_on_kubernetes(void **state)
{
    (void)state;
    char vis[128], nlp[128], b[4][32], a1[32], a2[32], rv[32], err[512], path[128];
    ty_resp_destroy(call(NULL, "POST", "/v1/teams",
                         "{\"name\":\"vision\",\"quota\":{\"gpu\":{\"v100\":16},\"cpu\":\"64\","
                         "\"memory\":\"256Gi\"}}",
                         201));
    ty_resp_destroy(call(NULL, "POST", "/v1/teams",
                         "{\"name\":\"nlp\",\"quota\":{\"gpu\":{\"v100\":8},\"cpu\":\"64\","
                         "\"memory\":\"256Gi\"},\"borrowing_limit\":{\"gpu\":{\"v100\":16}}}",
                         201));
    make_token("vision-ci", "vision", vis);
    make_token("nlp-ci", "nlp", nlp);

    /* nlp's first job runs to its end. */
    run_job(nlp, "b0", b[0]);
    set_phase(b[0], 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    expect_job(b[0], "SUCCEEDED");
    /* Then three: one on its quota, two on vision's idle quota; every V100 is taken. */
    for (int i = 1; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "b%d", i);
        run_job(nlp, name, b[i]);
    }
    ty_http_resp *r = call(NULL, "GET", "/v1/teams/nlp", NULL, 200);
    print_message("team nlp: %s\n", r->body);
    ty_resp_destroy(r);

    /* vision's job within its quota: b3, the most recently started borrower, is preempted. */
    pods_rv(rv);
    submit(vis, "a1", a1);
    expect_preempted(b[3], a1, rv);
    set_phase(a1, 1, "{\"phase\": \"Running\"}");
    expect_job(a1, "RUNNING");
    assert_int_equal(count_objects(JOBS, a1, 1), 1);
    /* b3 waits: nlp borrows all it may of what the cohort has idle. */
    r = wait_job(b[3], "PENDING", "Preempted");
    assert_int_equal(jint(json_object_get(r->json, "pending_reason"), "position"), 1);
    ty_resp_destroy(r);
    assert_int_equal(live_jobs(), 4); /* b0's finished Job, b1, b2, a1 */
    r = call(NULL, "GET", "/metrics", NULL, 200);
    assert_non_null(strstr(r->body, "trainyard_preemptions_total{reason=\"reclaim\"} 1\n"));
    ty_resp_destroy(r);

    /* The server is killed and starts again: it adopts b1, b2 and a1 and counts them before
     * admitting anything. */
    ty_server_kill(g_srv);
    if (ty_server_restart(g_srv, err, sizeof err))
        fail_msg("restart: %s", err);
    ty_client_free(g_cli);
    assert_non_null(g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN));
    for (int i = 1; i < 3; i++)
        expect_job(b[i], "RUNNING");
    expect_job(a1, "RUNNING");
    /* A round has run once vision's second job waits for what it reclaims: b2, nlp's most
     * recent, is preempted for it, not b1 (within nlp's quota once b2 is gone). */
    pods_rv(rv);
    submit(vis, "a2", a2);
    expect_preempted(b[2], a2, rv);
    set_phase(a2, 1, "{\"phase\": \"Running\"}");
    expect_job(a2, "RUNNING");
    for (int i = 1; i < 2; i++) {
        r = wait_job(b[i], "RUNNING", NULL);
        assert_int_equal(jint(r->json, "attempt"), 1); /* adopted, never started again */
        ty_resp_destroy(r);
    }
    r = wait_job(a1, "RUNNING", NULL);
    assert_int_equal(jint(r->json, "attempt"), 1);
    ty_resp_destroy(r);
    /* Nothing was admitted beyond the cluster: b3 still waits, with no Job of its own. */
    r = wait_job(b[3], "PENDING", NULL);
    assert_int_equal(jint(r->json, "attempt"), 1);
    ty_resp_destroy(r);
    assert_int_equal(count_objects(JOBS, b[3], 0), 0);
    /* The finished job did not come back: still SUCCEEDED, its one Job. */
    r = wait_job(b[0], "SUCCEEDED", NULL);
    assert_int_equal(jint(r->json, "attempt"), 1);
    ty_resp_destroy(r);
    assert_int_equal(count_objects(JOBS, b[0], 0), 1);
    assert_int_equal(live_jobs(), 4); /* b0's, b1, a1, a2 */

    /* a1 ends: 8 V100s free; nlp's oldest preempted job, b2, runs again: attempt 2, no
     * restart spent; b3 still waits behind it. */
    set_phase(a1, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    expect_job(a1, "SUCCEEDED");
    for (int i = 0; i < WAIT_S * 10 && count_objects(JOBS, b[2], 2) == 0; i++)
        ty_sleep_ms(100);
    assert_int_equal(count_objects(JOBS, b[2], 2), 1);
    set_phase(b[2], 2, "{\"phase\": \"Running\"}");
    r = wait_job(b[2], "RUNNING", NULL);
    assert_int_equal(jint(r->json, "attempt"), 2);
    assert_int_equal(jint(r->json, "restarts"), 0);
    assert_true(json_is_null(json_object_get(r->json, "pending_reason")));
    ty_resp_destroy(r);
    r = wait_job(b[3], "PENDING", NULL);
    assert_int_equal(jint(r->json, "restarts"), 0);
    ty_resp_destroy(r);
    assert_int_equal(count_objects(JOBS, b[3], 0), 0);

    const char *all[] = {b[1], b[2], b[3], a2};
    const int attempt[] = {1, 2, 0, 1};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%s:cancel", all[i]);
        ty_resp_destroy(call(NULL, "POST", path, NULL, 200));
    }
    for (size_t i = 0; i < 4; i++) {
        if (attempt[i]) /* SIGTERM: the worker exits */
            set_phase(all[i], attempt[i], "{\"phase\": \"Failed\", \"exitCode\": 143}");
        expect_job(all[i], "CANCELLED");
    }
}

/* ---- setup --------------------------------------------------------------- */

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int setup(void **state)
{
    (void)state;
    char text[1024], err[512];
    int port;
    if (!mkdtemp(g_dir) ||
        (g_fake_pid = fk_proc_start(g_fake_bin, FAKE_TOKEN, TY_KUBE_NODES, NULL, &port)) < 0)
        return -1;
    snprintf(g_fake, sizeof g_fake, "http://127.0.0.1:%d", port);
    /* Deleted pods terminate as on a kubelet: the test ends them, as the worker would. */
    if (fake_call("POST", "/fake/kubelet", "{\"terminating\": true}", NULL) != 200)
        return -1;
    if (fake_call("POST", "/api/v1/namespaces",
                  "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", "
                  "\"metadata\": {\"name\": \"" NS "\"}}",
                  NULL) != 201)
        return -1;
    snprintf(g_kubeconfig, sizeof g_kubeconfig, "%s/kubeconfig", g_dir);
    snprintf(text, sizeof text,
             "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
             "clusters:\n- name: fake\n  cluster:\n    server: %s\n"
             "users:\n- name: admin\n  user:\n    token: %s\n"
             "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n"
             "    namespace: " NS "\n",
             g_fake, FAKE_TOKEN);
    if (write_file(g_kubeconfig, text) != 0)
        return -1;
    const char *args[] = {"--cluster-profile", TY_KUBE_PROFILE_FIXED, "--kubeconfig",
                          g_kubeconfig, "--kube-qps", "0", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err) != 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    return g_cli ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_cli);
    ty_server_free(g_srv);
    if (g_fake_pid > 0) {
        kill(g_fake_pid, SIGTERM);
        waitpid(g_fake_pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc < 4) {
        fprintf(stderr, "usage: test_kube_quota TRAINYARD OPENAPI FAKE_APISERVER\n");
        return 2;
    }
    g_fake_bin = argv[3];
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reclaim_on_kubernetes, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    ty_harness_cleanup();
    return rc;
}
