/*
 * test_kube_serve.c - `trainyard serve --cluster-profile ... --kubeconfig ...` against the fake
 * Kubernetes API server: jobs through the real server, the real scheduler and the Kubernetes
 * backend, with the cluster's part (the kubelet, the spot reclaimer, the autoscaler, faults)
 * played through the fake's control API.
 *
 * Usage: test_kube_serve TRAINYARD OPENAPI FAKE_APISERVER (CTest passes them). The group
 * starts one fake with the 14-node cluster of the transcripts (A100/H100/V100 nodes in
 * us-west-2a/b/c, spot and on-demand) and one server on deploy/cluster-profile.example.yaml,
 * unchanged; the test that needs a cluster that cannot grow starts its own server on a
 * profile without node groups.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/fake_kube_proc.h"
#include "tests/support/rbac_granted.h"
#include "tests/support/ty_harness.h"

#ifndef TY_KUBE_PROFILE
#error "TY_KUBE_PROFILE must name deploy/cluster-profile.example.yaml"
#endif
#ifndef TY_KUBE_PROFILE_FIXED
#error "TY_KUBE_PROFILE_FIXED must name a profile without node groups"
#endif
#ifndef TY_KUBE_NODES
#error "TY_KUBE_NODES must name tests/fixtures/fake-kube/nodes-14.json"
#endif

#define NS "trainyard"
#define FAKE_TOKEN "fake-cluster-admin-token"
#define WAIT_S 30

static const char *g_fake_bin;
static pid_t g_fake_pid = -1;
static char g_fake[64];       /* http://127.0.0.1:PORT */
static char g_dir[] = "/tmp/ty-kube-serve-XXXXXX";
static char g_kubeconfig[256];
static ty_server *g_srv;
static ty_client *g_cli;

/* ---- the fake: its API and its control API ------------------------------- */

typedef struct fresp {
    long status;
    json_t *json;
} fresp;

/* A request to the fake; Kubernetes paths get the cluster's token. */
static fresp fake_call(const char *method, const char *path, const char *body)
{
    fresp r = {0};
    char *text = NULL;
    r.status = fk_request(g_fake, FAKE_TOKEN, method, path, body, &text);
    if (text)
        r.json = json_loads(text, 0, NULL);
    free(text);
    return r;
}

/* A control call that must succeed. */
static void fake_ctl(const char *path, const char *body)
{
    fresp r = fake_call("POST", path, body);
    if (r.status != 200)
        fail_msg("POST %s: HTTP %ld", path, r.status);
    json_decref(r.json);
}

/* The items of a list of the fake (new), by label selector. */
static json_t *fake_list(const char *collection, const char *selector)
{
    char path[512];
    snprintf(path, sizeof path, "%s?labelSelector=%s", collection, selector);
    fresp r = fake_call("GET", path, NULL);
    if (r.status != 200)
        fail_msg("GET %s: HTTP %ld", path, r.status);
    json_t *items = json_incref(json_object_get(r.json, "items"));
    json_decref(r.json);
    return items;
}

#define JOBS "/apis/batch/v1/namespaces/" NS "/jobs"
#define PODS "/api/v1/namespaces/" NS "/pods"
#define SERVICES "/api/v1/namespaces/" NS "/services"

static size_t count_objects(const char *collection, const char *job, int attempt)
{
    char sel[256];
    fk_selector(sel, sizeof sel, job, attempt);
    json_t *items = fake_list(collection, sel);
    size_t n = json_array_size(items);
    json_decref(items);
    return n;
}

/* Waits until the attempt has n pods bound to nodes; returns them (new). */
static json_t *wait_pods_bound(const char *job, int attempt, size_t n)
{
    char sel[256];
    fk_selector(sel, sizeof sel, job, attempt);
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *items = fake_list(PODS, sel);
        size_t bound = 0, k;
        json_t *p;
        json_array_foreach(items, k, p)
        {
            if (json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName")))
                bound++;
        }
        if (json_array_size(items) == n && bound == n)
            return items;
        json_decref(items);
        ty_sleep_ms(100);
    }
    fail_msg("attempt %d of %s: %zu pods never all bound", attempt, job, n);
    return NULL;
}

/* Moves every pod of the attempt to the phase in body (fk_set_phase()). */
static void set_phase(const char *job, int attempt, const char *body)
{
    long st = fk_set_phase(g_fake, FAKE_TOKEN, NS, job, attempt, body, WAIT_S * 10);
    if (st != 200)
        fail_msg("attempt %d of %s: setting its pods' phase: HTTP %ld", attempt, job, st);
}

static const char *pod_node(const json_t *pod)
{
    return json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
}

static const char *pod_zone_affinity(const json_t *pod)
{
    /* spec.affinity.nodeAffinity.required...nodeSelectorTerms[0].matchExpressions[] */
    const json_t *terms = json_object_get(
        json_object_get(json_object_get(json_object_get(json_object_get(pod, "spec"), "affinity"),
                                        "nodeAffinity"),
                        "requiredDuringSchedulingIgnoredDuringExecution"),
        "nodeSelectorTerms");
    size_t i, j;
    json_t *t, *e;
    json_array_foreach(terms, i, t)
    {
        json_array_foreach(json_object_get(t, "matchExpressions"), j, e)
        {
            if (strcmp(ty_json_str(e, "key"), "topology.kubernetes.io/zone") == 0)
                return json_string_value(json_array_get(json_object_get(e, "values"), 0));
        }
    }
    return NULL;
}

/* ---- the server ---------------------------------------------------------- */

static json_t *get_job(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    ty_http_resp *r = ty_req(g_cli, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *j = json_incref(r->json);
    ty_resp_destroy(r);
    return j;
}

static void dump_events(const char *id)
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

/* Waits until the job is in `state` (or fails the test with its events). Returns the job. */
static json_t *wait_state(const char *id, const char *state)
{
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *j = get_job(id);
        if (strcmp(ty_json_str(j, "state"), state) == 0)
            return j;
        json_decref(j);
        ty_sleep_ms(100);
    }
    dump_events(id);
    fail_msg("job %s never reached %s", id, state);
    return NULL;
}

static int has_event(const char *id, const char *reason, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    ty_http_resp *r = ty_req(g_cli, "GET", path, NULL);
    int found = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r->json, "events"), i, e)
    {
        if ((!reason || strcmp(ty_json_str(e, "reason"), reason) == 0) &&
            (!text || strstr(ty_json_str(e, "message"), text)))
            found = 1;
    }
    ty_resp_destroy(r);
    return found;
}

static void wait_event(const char *id, const char *reason, const char *text)
{
    for (int i = 0; i < WAIT_S * 10; i++) {
        if (has_event(id, reason, text))
            return;
        ty_sleep_ms(100);
    }
    dump_events(id);
    fail_msg("job %s: no event %s with \"%s\"", id, reason ? reason : "*", text ? text : "");
}

/* Submits a job (JSON fields after "name") and returns its id in id. */
static void submit(const char *name, const char *fields, char id[64])
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"image\": \"registry.example/trainyard-worker:1.0\", "
             "\"command\": [\"trainyard-worker\", \"train\"], %s}",
             name, fields);
    ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs", body);
    if (r->status != 201)
        fail_msg("submit %s: %ld %s", name, r->status, r->body);
    snprintf(id, 64, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int start_fake(void)
{
    int port;
    if ((g_fake_pid = fk_proc_start(g_fake_bin, FAKE_TOKEN, TY_KUBE_NODES, NULL, &port)) < 0)
        return -1;
    snprintf(g_fake, sizeof g_fake, "http://127.0.0.1:%d", port);
    fresp r = fake_call("POST", "/api/v1/namespaces",
                        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", "
                        "\"metadata\": {\"name\": \"" NS "\"}}");
    json_decref(r.json);
    return r.status == 201 ? 0 : -1;
}

static int start_server_on(const char *profile, ty_server **out)
{
    char err[512];
    const char *args[] = {"--cluster-profile", profile, "--kubeconfig", g_kubeconfig,
                          "--kube-qps", "0", "--local-log-limit", "64Ki", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, out, err, sizeof err) != 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    char text[1024];
    if (!mkdtemp(g_dir) || start_fake() != 0)
        return -1;
    snprintf(g_kubeconfig, sizeof g_kubeconfig, "%s/kubeconfig", g_dir);
    snprintf(text, sizeof text,
             "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
             "clusters:\n- name: fake\n  cluster:\n    server: %s\n"
             "users:\n- name: admin\n  user:\n    token: %s\n"
             "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n"
             "    namespace: " NS "\n",
             g_fake, FAKE_TOKEN);
    if (write_file(g_kubeconfig, text) != 0 || start_server_on(TY_KUBE_PROFILE, &g_srv) != 0)
        return -1;
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    return g_cli ? 0 : -1;
}

static int group_teardown(void **state)
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
    if (system(cmd) != 0)
        return -1;
    return 0;
}

/* ---- cases --------------------------------------------------------------- */

/* A job without an image cannot run on a cluster: 422 at $.image, nothing stored. */
static void test_image_required(void **state)
{
    (void)state;
    ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs",
                             "{\"name\": \"no-image\", \"command\": [\"run\"], "
                             "\"workers\": {\"count\": 1}}");
    assert_int_equal(r->status, 422);
    const json_t *e0 = json_array_get(json_object_get(r->json, "errors"), 0);
    assert_string_equal(ty_json_str(e0, "path"), "$.image");
    ty_resp_destroy(r);
}

/*
 * A rank asking for more GPUs of a type than the type's largest node (group) has can never be
 * placed: 422 at $.resources.gpu.count naming the type and the size (the profile's node
 * groups of the example have 8 GPUs per node).
 */
static void test_gpus_beyond_the_largest_node(void **state)
{
    (void)state;
    ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs",
                             "{\"name\": \"too-wide\", \"image\": \"img\", \"command\": [\"run\"], "
                             "\"workers\": {\"count\": 1}, \"resources\": {\"gpu\": "
                             "{\"type\": \"a100\", \"count\": 16}}}");
    assert_int_equal(r->status, 422);
    const json_t *e0 = json_array_get(json_object_get(r->json, "errors"), 0);
    assert_string_equal(ty_json_str(e0, "path"), "$.resources.gpu.count");
    assert_string_equal(ty_json_str(e0, "message"),
                        "16 GPUs of type a100 requested per rank, the largest a100 node has 8");
    ty_resp_destroy(r);
}

/*
 * CPU and memory per rank beyond the largest node a rank may use can never be placed either:
 * a rank without GPUs is measured against the CPU nodes (16 CPUs, 64Gi: the GPU nodes' taint
 * keeps it off them), a rank of a GPU type against that type's nodes (96 CPUs, 1152Gi).
 */
static void test_cpu_and_memory_beyond_the_largest_node(void **state)
{
    (void)state;
    static const struct {
        const char *resources, *path, *message;
    } cases[] = {
        {"{\"cpu\": \"17\"}", "$.resources.cpu",
         "17 CPUs requested per rank, the largest node for ranks without GPUs has 16"},
        {"{\"memory\": \"65Gi\"}", "$.resources.memory",
         "65Gi of memory requested per rank, the largest node for ranks without GPUs has 64Gi"},
        {"{\"cpu\": \"97\", \"gpu\": {\"type\": \"a100\", \"count\": 8}}", "$.resources.cpu",
         "97 CPUs requested per rank, the largest a100 node has 96"},
        {"{\"memory\": \"2Ti\", \"gpu\": {\"type\": \"h100\", \"count\": 1}}",
         "$.resources.memory",
         "2Ti of memory requested per rank, the largest h100 node has 1.12Ti"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"name\": \"too-big\", \"image\": \"img\", \"command\": [\"run\"], "
                 "\"workers\": {\"count\": 1}, \"resources\": %s}",
                 cases[i].resources);
        ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs", body);
        if (r->status != 422)
            fail_msg("%s: %ld %s", cases[i].resources, r->status, r->body);
        const json_t *e0 = json_array_get(json_object_get(r->json, "errors"), 0);
        assert_string_equal(ty_json_str(e0, "path"), cases[i].path);
        assert_string_equal(ty_json_str(e0, "message"), cases[i].message);
        ty_resp_destroy(r);
    }
}

/*
 * Two ranks of 4 A100s on spot: one Job (its pods named through the one rank Service, no
 * Service of its own), every pod pinned to the same zone, RUNNING once both pods run (ranks
 * carry pod and node), SUCCEEDED when both succeed.
 */
static void test_success(void **state)
{
    (void)state;
    char id[64];
    submit("ok", "\"workers\": {\"count\": 2}, \"resources\": {\"gpu\": {\"type\": \"a100\", "
                 "\"count\": 4}}, \"placement\": {\"capacity\": \"spot\"}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 2);
    assert_int_equal(count_objects(JOBS, id, 0), 1);
    assert_int_equal(count_objects(SERVICES, id, 0), 0);
    fresp svc = fake_call("GET", SERVICES "/trainyard-ranks", NULL);
    assert_int_equal(svc.status, 200);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(svc.json, "spec"), "clusterIP")),
        "None");
    json_decref(svc.json);
    const char *zone = pod_zone_affinity(json_array_get(pods, 0));
    assert_non_null(zone);
    assert_string_equal(zone, pod_zone_affinity(json_array_get(pods, 1)));
    json_decref(pods);

    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_t *j = wait_state(id, "RUNNING");
    const json_t *ranks = json_object_get(json_object_get(j, "current_attempt"), "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    assert_non_null(ty_json_str(json_array_get(ranks, 0), "pod"));
    assert_non_null(ty_json_str(json_array_get(ranks, 0), "node"));
    json_decref(j);

    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    j = wait_state(id, "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
    json_decref(j);
    assert_int_equal(count_objects(JOBS, id, 0), 1); /* left to ttlSecondsAfterFinished */
}

#define SECRETS "/api/v1/namespaces/" NS "/secrets"

/* The container's env entry named name in a pod (borrowed), or NULL. */
static const json_t *pod_env(const json_t *pod, const char *name)
{
    const json_t *c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(c, "env"), i, e)
    {
        if (!strcmp(ty_json_str(e, "name"), name))
            return e;
    }
    return NULL;
}

/*
 * A secret env value through the real server: the pods take it, the job token and the
 * rendezvous secret from the attempt's Secret (secretKeyRef), which the Job owns; no pod or
 * Job holds a value, and the job's spec shows it null.
 */
static void test_secrets(void **state)
{
    (void)state;
    static const char value[] = "hf_secret_for_the_kube_test_42";
    char id[64], sel[256];
    submit("secrets",
           "\"workers\": {\"count\": 2}, \"env\": {\"REGION\": \"us-west-2\", \"HF_TOKEN\": "
           "{\"value\": \"hf_secret_for_the_kube_test_42\", \"secret\": true}}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 2);
    fk_selector(sel, sizeof sel, id, 1);
    json_t *jobs = fake_list(JOBS, sel), *secrets = NULL;
    for (int i = 0; i < WAIT_S * 10; i++) {
        secrets = fake_list(SECRETS, sel);
        if (json_array_size(secrets) == 1)
            break;
        json_decref(secrets);
        secrets = NULL;
        ty_sleep_ms(100);
    }
    if (!secrets)
        fail_msg("job %s: no Secret", id);
    const json_t *job = json_array_get(jobs, 0), *sec = json_array_get(secrets, 0);
    const json_t *jmd = json_object_get(job, "metadata"), *smd = json_object_get(sec, "metadata");
    assert_string_equal(ty_json_str(smd, "name"), ty_json_str(jmd, "name"));
    const json_t *owner = json_array_get(json_object_get(smd, "ownerReferences"), 0);
    assert_non_null(owner);
    assert_string_equal(ty_json_str(owner, "uid"), ty_json_str(jmd, "uid"));
    assert_string_equal(ty_json_str(owner, "kind"), "Job");
    const json_t *data = json_object_get(sec, "data");
    assert_int_equal(json_object_size(data), 3);
    assert_string_equal(ty_json_str(data, "HF_TOKEN"), "aGZfc2VjcmV0X2Zvcl90aGVfa3ViZV90ZXN0XzQy");
    assert_non_null(ty_json_str(data, "TRAINYARD_TOKEN"));
    assert_non_null(ty_json_str(data, "TRAINYARD_RENDEZVOUS_SECRET"));

    static const char *const names[] = {"HF_TOKEN", "TRAINYARD_TOKEN",
                                        "TRAINYARD_RENDEZVOUS_SECRET"};
    size_t k;
    const json_t *pod;
    json_array_foreach(pods, k, pod)
    {
        for (size_t i = 0; i < 3; i++) {
            const json_t *ref = json_object_get(
                json_object_get(pod_env(pod, names[i]), "valueFrom"), "secretKeyRef");
            if (!ref)
                fail_msg("%s is not a secretKeyRef in pod %zu", names[i], k);
            assert_string_equal(ty_json_str(ref, "name"), ty_json_str(smd, "name"));
            assert_string_equal(ty_json_str(ref, "key"), names[i]);
        }
        assert_string_equal(ty_json_str(pod_env(pod, "REGION"), "value"), "us-west-2");
    }
    char *text = json_dumps(pods, JSON_COMPACT), *jtext = json_dumps(jobs, JSON_COMPACT);
    assert_null(strstr(text, value));
    assert_null(strstr(jtext, value));
    free(text);
    free(jtext);
    json_t *j = get_job(id);
    const json_t *env = json_object_get(json_object_get(j, "spec"), "env");
    assert_true(json_is_null(json_object_get(json_object_get(env, "HF_TOKEN"), "value")));
    json_decref(j);

    /* The kubelet finds the Secret: the gang runs and ends. */
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_decref(wait_state(id, "SUCCEEDED"));
    json_decref(pods);
    json_decref(jobs);
    json_decref(secrets);
}

/* A reader of GET /v1/jobs/{id}/logs?follow=true on its own thread, as curl would read it. */
typedef struct follower {
    char url[512];
    pthread_mutex_t mu;
    char body[4096];
    size_t len;
    int ended;
    long status;
} follower;

static size_t follower_body(char *p, size_t sz, size_t n, void *ud)
{
    follower *f = ud;
    size_t len = sz * n;
    pthread_mutex_lock(&f->mu);
    size_t room = sizeof f->body - 1 - f->len, take = len < room ? len : room;
    memcpy(f->body + f->len, p, take);
    f->len += take;
    f->body[f->len] = '\0';
    pthread_mutex_unlock(&f->mu);
    return len;
}

static void *follower_main(void *arg)
{
    follower *f = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Authorization: Bearer "
                                                      TY_TEST_ADMIN_TOKEN);
    curl_easy_setopt(h, CURLOPT_URL, f->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, follower_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L); /* a hung stream fails the case, not CTest */
    long status = curl_easy_perform(h) == CURLE_OK ? 0 : -1;
    if (status == 0)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    pthread_mutex_lock(&f->mu);
    f->status = status;
    f->ended = 1;
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Waits until the follower has read text (at its end) or ended; 1 when it has. */
static int follower_has(follower *f, const char *text)
{
    for (int i = 0; i < WAIT_S * 10; i++) {
        pthread_mutex_lock(&f->mu);
        size_t n = strlen(text);
        int yes = f->len >= n && memcmp(f->body + f->len - n, text, n) == 0;
        int ended = f->ended;
        pthread_mutex_unlock(&f->mu);
        if (yes || ended)
            return yes;
        ty_sleep_ms(100);
    }
    return 0;
}

/*
 * GET /v1/jobs/{id}/logs?follow=true reads the rank's pod log as a stream (pods/log with
 * follow=true): lines the rank writes after the request began come through the open
 * response, and the response ends when the rank's pod ends.
 */
static void test_logs_follow(void **state)
{
    (void)state;
    char id[64], path[512];
    submit("follow", "\"workers\": {\"count\": 1}, \"resources\": {\"gpu\": {\"type\": "
                     "\"a100\", \"count\": 1}}, \"placement\": {\"capacity\": \"spot\"}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 1);
    const char *pod = ty_json_str(json_object_get(json_array_get(pods, 0), "metadata"), "name");
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/log", pod);
    fresp r = fake_call("PUT", path, "epoch 1 loss 2.30\n");
    assert_int_equal(r.status, 200);
    json_decref(r.json);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));

    follower f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(f.url, sizeof f.url, "%s/v1/jobs/%s/logs?follow=true&rank=0",
             ty_server_url(g_srv), id);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, follower_main, &f), 0);
    assert_true(follower_has(&f, "epoch 1 loss 2.30\n"));
    /* Written after the request began: read through the open response. */
    r = fake_call("POST", path, "epoch 2 loss 1.10\n");
    json_decref(r.json);
    assert_true(follower_has(&f, "epoch 1 loss 2.30\nepoch 2 loss 1.10\n"));
    r = fake_call("POST", path, "epoch 3 loss 0.70\n");
    json_decref(r.json);
    assert_true(follower_has(&f, "epoch 2 loss 1.10\nepoch 3 loss 0.70\n"));
    pthread_mutex_lock(&f.mu);
    assert_int_equal(f.ended, 0); /* the rank runs: the response stays open */
    pthread_mutex_unlock(&f.mu);

    /* The pod ends: so does the response, with every line once. */
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    pthread_join(th, NULL);
    assert_int_equal(f.status, 200);
    assert_string_equal(f.body, "epoch 1 loss 2.30\nepoch 2 loss 1.10\nepoch 3 loss 0.70\n");
    json_decref(wait_state(id, "SUCCEEDED"));
    json_decref(pods);
}

/* GET /v1/jobs/{id}/logs with query q: the body (new; "" for none) and *status. */
static char *get_log(const char *id, const char *q, long *status)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?%s", id, q);
    ty_http_resp *r = ty_req(g_cli, "GET", path, NULL);
    *status = r->status;
    char *body = strdup(r->body ? r->body : "");
    ty_resp_destroy(r);
    assert_non_null(body);
    return body;
}

/* Waits until the log read with q is exactly want. */
static void wait_log(const char *id, const char *q, const char *want)
{
    char *got = NULL;
    long status = 0;
    for (int i = 0; i < WAIT_S * 10; i++) {
        free(got);
        got = get_log(id, q, &status);
        if (status == 200 && !strcmp(got, want))
            break;
        ty_sleep_ms(100);
    }
    if (strcmp(got, want))
        fail_msg("logs?%s: HTTP %ld, got \"%s\", want \"%s\"", q, status, got, want);
    free(got);
}

static void pod_log_append(const char *pod, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/log", pod);
    fresp r = fake_call("POST", path, text);
    assert_int_equal(r.status, 200);
    json_decref(r.json);
}

/* The name of the pod of rank r among pods (borrowed). */
static const char *rank_pod(json_t *pods, int r)
{
    size_t i;
    json_t *p;
    char want[16];
    snprintf(want, sizeof want, "%d", r);
    json_array_foreach(pods, i, p)
    {
        const json_t *md = json_object_get(p, "metadata");
        const char *idx = json_string_value(json_object_get(
            json_object_get(md, "annotations"), "batch.kubernetes.io/job-completion-index"));
        if (idx && !strcmp(idx, want))
            return ty_json_str(md, "name");
    }
    fail_msg("no pod of rank %d", r);
    return NULL;
}

/*
 * Logs outlive pods: the server keeps each rank's log as its pod writes it, so the log of a
 * failed attempt reads the same after a gang restart deleted its pods, a follower of it gets
 * its last lines and ends, a log keeps at most the per-rank cap (--local-log-limit 64Ki here)
 * with the notice of what was dropped, and a server killed with -9 goes on where it stopped:
 * lines written while it was down come once, none twice.
 */
static void test_logs_outlive_pods(void **state)
{
    (void)state;
    char id[64], err[512], q[128];
    long status;
    submit("logs", "\"workers\": {\"count\": 2}, \"resources\": {\"gpu\": {\"type\": \"a100\", "
                   "\"count\": 1}}, \"restart\": {\"max\": 1, \"backoff_seconds\": 0}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 2);
    char pod1[256];
    snprintf(pod1, sizeof pod1, "%s", rank_pod(pods, 1));
    json_decref(pods);
    pod_log_append(pod1, "a1 r1 line 1\n");
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    wait_log(id, "attempt=1&rank=1", "a1 r1 line 1\n");

    follower f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    snprintf(f.url, sizeof f.url, "%s/v1/jobs/%s/logs?follow=true&attempt=1&rank=1",
             ty_server_url(g_srv), id);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, follower_main, &f), 0);
    assert_true(follower_has(&f, "a1 r1 line 1\n"));
    pod_log_append(pod1, "a1 r1 line 2\n");
    assert_true(follower_has(&f, "a1 r1 line 2\n"));
    /* Its last words, then it fails: the gang restarts and attempt 1's pods are deleted. */
    pod_log_append(pod1, "a1 r1 NCCL error: unhandled system error\n");
    char path[512];
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/phase", pod1);
    fake_ctl(path, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    pods = wait_pods_bound(id, 2, 2);
    char sel[256];
    fk_selector(sel, sizeof sel, id, 1);
    /* Whatever of attempt 1 is left goes, as the Job's TTL would take it. */
    snprintf(path, sizeof path, PODS "?labelSelector=%s", sel);
    json_decref(fake_call("DELETE", path, NULL).json);
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *old = fake_list(PODS, sel);
        size_t n = json_array_size(old);
        json_decref(old);
        if (n == 0)
            break;
        ty_sleep_ms(100);
    }
    json_t *old = fake_list(PODS, sel);
    assert_int_equal(json_array_size(old), 0);
    json_decref(old);
    /* The follower got every line and ended with the rank. */
    pthread_join(th, NULL);
    assert_int_equal(f.status, 200);
    const char *a1 = "a1 r1 line 1\na1 r1 line 2\na1 r1 NCCL error: unhandled system error\n";
    assert_string_equal(f.body, a1);
    /* Read again with the pods gone: the same, a tail of it too. */
    char *got = get_log(id, "attempt=1&rank=1", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, a1);
    free(got);
    wait_log(id, "attempt=1&rank=1&tail=1", "a1 r1 NCCL error: unhandled system error\n");

    /* Attempt 2: rank 0 writes more than the per-rank cap. */
    char p0[256];
    snprintf(p0, sizeof p0, "%s", rank_pod(pods, 0));
    json_decref(pods);
    set_phase(id, 2, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    size_t nlines = 3000, big_len = nlines * 31;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    for (size_t i = 0; i < nlines; i++)
        snprintf(big + i * 31, 32, "a2 r0 step %05zu loss 0.123456\n", i);
    pod_log_append(p0, big);
    free(big);
    wait_log(id, "attempt=2&rank=0&tail=2",
             "a2 r0 step 02998 loss 0.123456\na2 r0 step 02999 loss 0.123456\n");
    got = get_log(id, "attempt=2&rank=0", &status);
    assert_int_equal(status, 200);
    assert_true(strncmp(got, "[trainyard] ", 12) == 0);
    assert_non_null(strstr(got, "bytes of older output were dropped (log limit 64 KiB)"));
    assert_true(strlen(got) <= 65536 + 128);
    free(got);

    /* The server dies; the rank writes on; a new server takes the log up where it was. */
    ty_client_free(g_cli);
    ty_server_kill(g_srv);
    pod_log_append(p0, "a2 r0 written while no server ran\n");
    assert_int_equal(ty_server_restart(g_srv, err, sizeof err), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    json_decref(wait_state(id, "RUNNING"));
    wait_log(id, "attempt=2&rank=0&tail=3",
             "a2 r0 step 02998 loss 0.123456\na2 r0 step 02999 loss 0.123456\n"
             "a2 r0 written while no server ran\n");
    pod_log_append(p0, "a2 r0 after the restart\n");
    wait_log(id, "attempt=2&rank=0&tail=3",
             "a2 r0 step 02999 loss 0.123456\na2 r0 written while no server ran\n"
             "a2 r0 after the restart\n");
    got = get_log(id, "attempt=1&rank=1", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, a1);
    free(got);
    snprintf(q, sizeof q, "attempt=2&rank=1");
    got = get_log(id, q, &status);
    assert_int_equal(status, 200);
    free(got);

    /* Attempt 2 fails too: the job ends, and its logs stay. */
    set_phase(id, 2, "{\"phase\": \"Failed\", \"exitCode\": 3}");
    json_decref(wait_state(id, "FAILED"));
    wait_log(id, "attempt=2&rank=0&tail=1", "a2 r0 after the restart\n");
}

/* An OOMKilled rank spends a restart; the next attempt succeeds. */
static void test_oom_then_success(void **state)
{
    (void)state;
    char id[64];
    submit("oom", "\"workers\": {\"count\": 2}, \"resources\": {\"gpu\": {\"type\": \"h100\", "
                  "\"count\": 1}}, \"restart\": {\"max\": 2, \"backoff_seconds\": 0}",
           id);
    json_decref(wait_pods_bound(id, 1, 2));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    char sel[256], path[512];
    fk_selector(sel, sizeof sel, id, 1);
    json_t *pods = fake_list(PODS, sel);
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/phase",
             ty_json_str(json_object_get(json_array_get(pods, 1), "metadata"), "name"));
    json_decref(pods);
    fake_ctl(path, "{\"phase\": \"Failed\", \"exitCode\": 137, \"reason\": \"OOMKilled\"}");
    wait_event(id, NULL, "OOMKilled");

    json_decref(wait_pods_bound(id, 2, 2));
    set_phase(id, 2, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    set_phase(id, 2, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_t *j = wait_state(id, "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 2);
    json_decref(j);
}

/* A rank that exits non-zero with no restart left: FAILED, its exit code in the events. */
static void test_restarts_exhausted(void **state)
{
    (void)state;
    char id[64];
    submit("fails", "\"workers\": {\"count\": 1}, \"restart\": {\"max\": 0}", id);
    json_decref(wait_pods_bound(id, 1, 1));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    set_phase(id, 1, "{\"phase\": \"Failed\", \"exitCode\": 3}");
    json_t *j = wait_state(id, "FAILED");
    json_decref(j);
    wait_event(id, NULL, "3");
}

/*
 * A spot notice (the termination handler's taint) on a node of a running gang: the gang is
 * stopped, no restart is spent, and the next attempt goes to another zone.
 */
static void test_spot_notice_moves_the_gang(void **state)
{
    (void)state;
    char id[64];
    submit("spot", "\"workers\": {\"count\": 2}, \"resources\": {\"gpu\": {\"type\": \"a100\", "
                   "\"count\": 4}}, \"placement\": {\"capacity\": \"spot\"}, "
                   "\"restart\": {\"max\": 0, \"backoff_seconds\": 0}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 2);
    char zone1[64], node[256], path[512];
    snprintf(zone1, sizeof zone1, "%s", pod_zone_affinity(json_array_get(pods, 0)));
    snprintf(node, sizeof node, "%s", pod_node(json_array_get(pods, 0)));
    json_decref(pods);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));

    snprintf(path, sizeof path, "/fake/nodes/%s/taint", node);
    fake_ctl(path, "{\"key\": \"aws-node-termination-handler/spot-itn\", \"value\": \"true\", "
                   "\"effect\": \"NoSchedule\"}");
    pods = wait_pods_bound(id, 2, 2);
    const char *zone2 = pod_zone_affinity(json_array_get(pods, 0));
    assert_non_null(zone2);
    if (strcmp(zone1, zone2) == 0)
        fail_msg("attempt 2 stayed in %s, where the spot capacity is being reclaimed", zone1);
    json_decref(pods);
    set_phase(id, 2, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    set_phase(id, 2, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_t *j = wait_state(id, "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
    json_decref(j);
    snprintf(path, sizeof path, "/fake/nodes/%s/untaint", node);
    fake_ctl(path, "{\"key\": \"aws-node-termination-handler/spot-itn\"}");
}

/* Cancel: the attempt's objects are deleted, then CANCELLED. */
static void test_cancel(void **state)
{
    (void)state;
    char id[64], path[128];
    submit("cancel", "\"workers\": {\"count\": 2}", id);
    json_decref(wait_pods_bound(id, 1, 2));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    ty_http_resp *r = ty_req(g_cli, "POST", path, NULL);
    assert_true(r->status == 200 || r->status == 202);
    ty_resp_destroy(r);
    json_decref(wait_state(id, "CANCELLED"));
    assert_int_equal(count_objects(JOBS, id, 0), 0);
    assert_int_equal(count_objects(PODS, id, 0), 0);
}

/*
 * A gang for which the nodes that exist have no room, on groups that scale from zero: its pods
 * are created pinned to a zone whose group can grow, and run once the autoscaler's nodes come.
 */
static void test_scale_from_zero(void **state)
{
    (void)state;
    char id[64];
    /* Four ranks of 8 on-demand A100s: us-west-2a has two such nodes, the others none. */
    fake_ctl("/fake/nodegroups",
             "{\"name\": \"p4d-od-2b\", \"max\": 4, \"delaySeconds\": 0, \"node\": {"
             "\"metadata\": {\"labels\": {\"topology.kubernetes.io/zone\": \"us-west-2b\", "
             "\"nvidia.com/gpu.product\": \"NVIDIA-A100-SXM4-40GB\", "
             "\"node.kubernetes.io/instance-type\": \"p4d.24xlarge\", "
             "\"eks.amazonaws.com/capacityType\": \"ON_DEMAND\", "
             "\"karpenter.sh/capacity-type\": \"on-demand\", "
             "\"eks.amazonaws.com/nodegroup\": \"p4d-od-2b\"}}, "
             "\"spec\": {\"taints\": [{\"key\": \"nvidia.com/gpu\", \"value\": \"present\", "
             "\"effect\": \"NoSchedule\"}]}, "
             "\"status\": {\"allocatable\": {\"nvidia.com/gpu\": \"8\", \"cpu\": \"96\", "
             "\"memory\": \"1152Gi\", \"pods\": \"110\"}, \"capacity\": {\"nvidia.com/gpu\": "
             "\"8\", \"cpu\": \"96\", \"memory\": \"1152Gi\", \"pods\": \"110\"}, "
             "\"conditions\": [{\"type\": \"Ready\", \"status\": \"True\"}]}}}");
    submit("grow", "\"workers\": {\"count\": 4}, \"resources\": {\"gpu\": {\"type\": \"a100\", "
                   "\"count\": 8}}, \"placement\": {\"zone\": \"us-west-2b\"}",
           id);
    json_t *pods = wait_pods_bound(id, 1, 4);
    json_decref(pods);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    /* Where it was placed and what it waited for: the attempt's placement and an event. */
    json_t *j = wait_state(id, "RUNNING");
    const json_t *pl = json_object_get(json_object_get(j, "current_attempt"), "placement");
    assert_string_equal(ty_json_str(pl, "zone"), "us-west-2b");
    assert_string_equal(ty_json_str(pl, "capacity"), "on-demand");
    assert_string_equal(ty_json_str(pl, "gpu_type"), "a100");
    assert_int_equal(json_integer_value(json_object_get(pl, "fit_ranks")), 0);
    const json_t *grp = json_array_get(json_object_get(pl, "node_groups"), 0);
    assert_string_equal(ty_json_str(grp, "name"), "p4d-od-2b");
    assert_int_equal(json_integer_value(json_object_get(grp, "nodes")), 4);
    assert_true(json_is_string(json_object_get(pl, "deadline")));
    assert_int_equal(json_array_size(json_object_get(pl, "nodes")), 4);
    json_decref(j);
    assert_true(has_event(id, "Placed",
                          "placed in us-west-2b: 0 of 4 ranks fit on existing nodes, waiting for "
                          "4 nodes of group p4d-od-2b (up to 900 s)"));
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_decref(wait_state(id, "SUCCEEDED"));
    fresp r = fake_call("DELETE", "/fake/nodegroups/p4d-od-2b", NULL);
    json_decref(r.json);
}

/*
 * The server killed with -9 while a gang runs, then started again: it adopts the attempt
 * (no second Job, no restart) and follows it to the end.
 */
static void test_server_killed_adopts(void **state)
{
    (void)state;
    char id[64], err[512];
    submit("adopt", "\"workers\": {\"count\": 2}", id);
    json_decref(wait_pods_bound(id, 1, 2));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    ty_client_free(g_cli);
    ty_server_kill(g_srv);
    assert_int_equal(ty_server_restart(g_srv, err, sizeof err), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    json_t *j = wait_state(id, "RUNNING");
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 1);
    json_decref(j);
    assert_int_equal(count_objects(JOBS, id, 0), 1);
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    j = wait_state(id, "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
    json_decref(j);
}

/*
 * A graceful stop (SIGTERM, as a rollout of the server's Deployment sends) while a gang runs:
 * the server exits at once and leaves the Job and its pods as they are; the next start adopts
 * the attempt (no ServerShutdown, no second Job, no restart) and follows it to the end.
 */
static void test_server_stopped_leaves_gang(void **state)
{
    (void)state;
    char id[64], err[512];
    int status = -1;
    submit("outlives", "\"workers\": {\"count\": 2}", id);
    json_decref(wait_pods_bound(id, 1, 2));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    ty_client_free(g_cli);
    int stopped = ty_server_stop(g_srv, 10000, &status, err, sizeof err);
    /* What the stop left, read before the next start could adopt or change it. */
    char sel[256];
    fk_selector(sel, sizeof sel, id, 1);
    json_t *items = fake_list(JOBS, sel);
    size_t pods = count_objects(PODS, id, 1);
    assert_int_equal(ty_server_restart(g_srv, err, sizeof err), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_int_equal(stopped, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(json_array_size(items), 1);
    assert_null(json_object_get(json_object_get(json_array_get(items, 0), "metadata"),
                                "deletionTimestamp"));
    json_decref(items);
    assert_int_equal(pods, 2);

    json_t *j = wait_state(id, "RUNNING");
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 1);
    json_decref(j);
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    j = wait_state(id, "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
    json_decref(j);
    assert_false(has_event(id, "ServerShutdown", ""));
    assert_int_equal(count_objects(JOBS, id, 0), 1);
}

/* Lines of the server's log that contain text. */
static int log_count(const char *text)
{
    char *log = ty_server_log(g_srv);
    int n = 0;
    for (const char *p = log ? strstr(log, text) : NULL; p; p = strstr(p + 1, text))
        n++;
    free(log);
    return n;
}

/*
 * When every pod's log stream fails at once (the API server answers 500 to pods/log), the
 * server says so in one line, not one a pod; the job is not disturbed.
 */
static void test_log_stream_failures_told_once(void **state)
{
    (void)state;
    static const char line[] = "pods' log streams failed, retrying";
    char id[64];
    int before = log_count(line);
    fake_ctl("/fake/faults", "{\"method\": \"GET\", \"path\": \"/api/v1/namespaces/" NS
                             "/pods/\", \"count\": 100000, \"status\": 500}");
    submit("quiet-logs", "\"workers\": {\"count\": 4}", id);
    json_decref(wait_pods_bound(id, 1, 4));
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    for (int i = 0; i < WAIT_S * 10 && log_count(line) == before; i++)
        ty_sleep_ms(100);
    assert_int_equal(log_count(line), before + 1);
    ty_sleep_ms(2000); /* the other three fail (and retry) meanwhile */
    assert_int_equal(log_count(line), before + 1);
    fresp r = fake_call("DELETE", "/fake/faults", NULL);
    json_decref(r.json);
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_decref(wait_state(id, "SUCCEEDED"));
}

/* 500s and 429s on the writes and dropped watches: the job still reaches its true state. */
static void test_api_faults(void **state)
{
    (void)state;
    char id[64];
    fake_ctl("/fake/faults", "{\"method\": \"POST\", \"path\": \"/apis/batch/v1/\", "
                             "\"count\": 2, \"status\": 500}");
    fake_ctl("/fake/faults", "{\"method\": \"POST\", \"path\": \"/api/v1/namespaces/" NS
                             "/secrets\", \"count\": 1, \"status\": 429, \"retryAfter\": 1}");
    submit("faults", "\"workers\": {\"count\": 2}", id);
    json_decref(wait_pods_bound(id, 1, 2));
    fake_ctl("/fake/watches/drop", "{}");
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
    fake_ctl("/fake/watches/drop", "{}");
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_decref(wait_state(id, "SUCCEEDED"));
    assert_int_equal(count_objects(JOBS, id, 0), 1);
    fresp r = fake_call("DELETE", "/fake/faults", NULL);
    json_decref(r.json);
}

/*
 * On a cluster that cannot grow (a profile without node groups), a gang that fits no zone
 * waits with a reason a person can read, and starts when nodes appear. Runs last: it replaces
 * the group's server by one on that profile.
 */
static void test_no_zone_waits_for_nodes(void **state)
{
    (void)state;
    char id[64];
    ty_client_free(g_cli);
    ty_server_free(g_srv);
    g_cli = NULL;
    assert_int_equal(start_server_on(TY_KUBE_PROFILE_FIXED, &g_srv), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    /* Three ranks of 8 on-demand H100s: us-west-2a and us-west-2c have one such node each. */
    submit("wait", "\"workers\": {\"count\": 3}, \"resources\": {\"gpu\": {\"type\": \"h100\", "
                   "\"count\": 8}}",
           id);
    wait_event(id, "Waiting", "no zone");
    json_t *j = get_job(id);
    assert_string_equal(ty_json_str(j, "state"), "PENDING");
    json_decref(j);
    assert_int_equal(count_objects(JOBS, id, 0), 0);
    for (int i = 1; i <= 2; i++) {
        char node[1024];
        snprintf(node, sizeof node,
                 "{\"metadata\": {\"name\": \"usw2c-h100-od-new-%d\", \"labels\": {"
                 "\"topology.kubernetes.io/zone\": \"us-west-2c\", "
                 "\"nvidia.com/gpu.product\": \"NVIDIA-H100-80GB-HBM3\", "
                 "\"node.kubernetes.io/instance-type\": \"p5.48xlarge\", "
                 "\"eks.amazonaws.com/capacityType\": \"ON_DEMAND\", "
                 "\"karpenter.sh/capacity-type\": \"on-demand\"}}, "
                 "\"spec\": {\"taints\": [{\"key\": \"nvidia.com/gpu\", \"value\": \"present\", "
                 "\"effect\": \"NoSchedule\"}]}, "
                 "\"status\": {\"allocatable\": {\"nvidia.com/gpu\": \"8\", \"cpu\": \"192\", "
                 "\"memory\": \"2048Gi\", \"pods\": \"110\"}, \"capacity\": {\"nvidia.com/gpu\": "
                 "\"8\", \"cpu\": \"192\", \"memory\": \"2048Gi\", \"pods\": \"110\"}, "
                 "\"conditions\": [{\"type\": \"Ready\", \"status\": \"True\"}]}}",
                 i);
        fake_ctl("/fake/nodes", node);
    }
    json_t *pods = wait_pods_bound(id, 1, 3);
    assert_string_equal(pod_zone_affinity(json_array_get(pods, 0)), "us-west-2c");
    json_decref(pods);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    json_decref(wait_state(id, "RUNNING"));
}

/*
 * An attempt whose pod the scheduler refuses in the zone it was placed in (another tenant took
 * the room between the placement and the pod) is withdrawn after the profile's
 * unschedulable_timeout_seconds with the scheduler's words, spending no restart, and placed in
 * another zone; every decision is an event and the attempts show where they were placed. Runs
 * after test_no_zone_waits_for_nodes: it replaces the group's server by one whose profile waits
 * 2 s.
 */
static void test_unschedulable_placed_elsewhere(void **state)
{
    (void)state;
    char id[64], profile[300], path[160];
    FILE *in = fopen(TY_KUBE_PROFILE_FIXED, "r");
    assert_non_null(in);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 64, in);
    fclose(in);
    text[n] = '\0';
    strcat(text, "\nunschedulable_timeout_seconds: 2\n");
    snprintf(profile, sizeof profile, "%s/profile-unschedulable.yaml", g_dir);
    assert_int_equal(write_file(profile, text), 0);
    ty_client_free(g_cli);
    ty_server_free(g_srv);
    g_cli = NULL;
    assert_int_equal(start_server_on(profile, &g_srv), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);

    /* The Job's creation is slowed down: the room is taken in between. */
    fake_ctl("/fake/faults", "{\"method\": \"POST\", \"path\": \"/apis/batch/v1/namespaces/" NS
                             "/jobs\", \"count\": 1, \"delayMs\": 3000}");
    submit("squeezed",
           "\"workers\": {\"count\": 1}, \"resources\": {\"cpu\": \"10\", "
           "\"memory\": \"1Gi\"}",
           id);
    wait_event(id, "Placed", "placed in us-west-2a: its rank fits on existing nodes");
    fresp r = fake_call("POST", "/api/v1/namespaces/default/pods",
                        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": "
                        "\"squatter\"}, \"spec\": {\"nodeName\": \"usw2a-cpu-od-0\", "
                        "\"containers\": [{\"name\": \"m\", \"image\": \"busybox:1.36\", "
                        "\"resources\": {\"requests\": {\"cpu\": \"10\"}}}]}}");
    assert_int_equal(r.status, 201);
    json_decref(r.json);
    wait_event(id, "Withdrawn", "unschedulable in us-west-2a for 2 s: 0/");
    assert_true(has_event(id, "Withdrawn", "1 Insufficient cpu"));
    assert_true(has_event(id, "Withdrawn",
                          "; placing again (does not count against "
                          "restart.max)"));
    wait_event(id, "Placed", "placed in us-west-2b: its rank fits on existing nodes");
    json_t *pods = wait_pods_bound(id, 2, 1);
    assert_string_equal(pod_zone_affinity(json_array_get(pods, 0)), "us-west-2b");
    json_decref(pods);
    set_phase(id, 2, "{\"phase\": \"Running\"}");
    json_t *j = wait_state(id, "RUNNING");
    assert_int_equal(json_integer_value(json_object_get(j, "restarts")), 0);
    const json_t *pl = json_object_get(json_object_get(j, "current_attempt"), "placement");
    assert_string_equal(ty_json_str(pl, "zone"), "us-west-2b");
    assert_string_equal(ty_json_str(pl, "capacity"), "on-demand");
    assert_true(json_is_null(json_object_get(pl, "gpu_type")));
    assert_int_equal(json_integer_value(json_object_get(pl, "fit_ranks")), 1);
    assert_int_equal(json_array_size(json_object_get(pl, "node_groups")), 0);
    assert_true(json_is_null(json_object_get(pl, "deadline")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(pl, "nodes"), 0)),
                        "usw2b-cpu-od-0");
    json_decref(j);
    /* The first attempt: withdrawn from where it was placed. */
    snprintf(path, sizeof path, "/v1/jobs/%s/attempts", id);
    ty_http_resp *hr = ty_req(g_cli, "GET", path, NULL);
    assert_int_equal(hr->status, 200);
    const json_t *first = NULL, *a;
    size_t i;
    json_array_foreach(json_object_get(hr->json, "attempts"), i, a)
    {
        if (json_integer_value(json_object_get(a, "attempt")) == 1)
            first = a;
    }
    assert_non_null(first);
    assert_string_equal(ty_json_str(first, "reason"), "Withdrawn");
    assert_string_equal(ty_json_str(json_object_get(first, "placement"), "zone"), "us-west-2a");
    ty_resp_destroy(hr);
    set_phase(id, 2, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    json_decref(wait_state(id, "SUCCEEDED"));
    r = fake_call("DELETE", "/api/v1/namespaces/default/pods/squatter", NULL);
    json_decref(r.json);
    r = fake_call("DELETE", "/fake/faults", NULL);
    json_decref(r.json);
}

/* /metrics carries the backend's families. */
static void test_metrics(void **state)
{
    (void)state;
    ty_http_resp *r = ty_req(g_cli, "GET", "/metrics", NULL);
    assert_int_equal(r->status, 200);
    if (!strstr(r->body, "trainyard_kube_"))
        fail_msg("no trainyard_kube_ family in /metrics:\n%s", r->body);
    ty_resp_destroy(r);
}

/*
 * Every request the server made of the API server in all the tests above (the fake counts
 * those whose User-Agent is trainyard's) is one the RBAC in deploy/ grants: nothing it does
 * would be forbidden on a real cluster (test_deploy holds deploy/ to the same table).
 */
static void test_requests_within_rbac(void **state)
{
    (void)state;
    fresp r = fake_call("GET", "/fake/requests", NULL);
    assert_int_equal(r.status, 200);
    assert_true(json_object_size(r.json) > 0);
    const char *key;
    json_t *verbs;
    json_object_foreach(r.json, key, verbs)
    {
        const char *verb;
        json_t *count;
        json_object_foreach(verbs, verb, count)
        {
            int granted = 0;
            for (size_t i = 0; i < sizeof rbac_granted / sizeof rbac_granted[0] && !granted;
                 i++) {
                const rbac_grant *g = &rbac_granted[i];
                char k[256], vs[128], *save = NULL;
                snprintf(k, sizeof k, "%s|%s|%s", g->kind, g->group, g->resource);
                if (strcmp(k, key) != 0)
                    continue;
                snprintf(vs, sizeof vs, "%s", g->verbs);
                for (char *v = strtok_r(vs, " ", &save); v && !granted;
                     v = strtok_r(NULL, " ", &save))
                    granted = !strcmp(v, verb);
            }
            if (!granted)
                fail_msg("the server asked to %s %s (%lld times), which deploy/ does not grant",
                         verb, key, (long long)json_integer_value(count));
        }
    }
    json_decref(r.json);
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc < 4) {
        fprintf(stderr, "usage: %s TRAINYARD OPENAPI FAKE_APISERVER\n", argv[0]);
        return 2;
    }
    g_fake_bin = argv[3];
    if (ty_harness_init(argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_required),
        cmocka_unit_test(test_gpus_beyond_the_largest_node),
        cmocka_unit_test(test_cpu_and_memory_beyond_the_largest_node),
        cmocka_unit_test(test_success),
        cmocka_unit_test(test_secrets),
        cmocka_unit_test(test_logs_follow),
        cmocka_unit_test(test_oom_then_success),
        cmocka_unit_test(test_restarts_exhausted),
        cmocka_unit_test(test_spot_notice_moves_the_gang),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_scale_from_zero),
        cmocka_unit_test(test_server_killed_adopts),
        cmocka_unit_test(test_server_stopped_leaves_gang),
        cmocka_unit_test(test_logs_outlive_pods),
        cmocka_unit_test(test_api_faults),
        cmocka_unit_test(test_log_stream_failures_told_once),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_no_zone_waits_for_nodes),
        cmocka_unit_test(test_unschedulable_placed_elsewhere),
        cmocka_unit_test(test_requests_within_rbac),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    ty_harness_cleanup();
    return rc;
}
