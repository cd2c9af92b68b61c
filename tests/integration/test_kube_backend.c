/*
 * test_kube_backend.c - the Kubernetes backend (scheduler/kube/kube_backend.h) driven through its
 * operations against fake-kube-apiserver on loopback, as the reconcile loop drives it: reserve,
 * launch, then a loop that polls event_fd() and observe() while the test plays the kubelet and
 * the cluster through the fake's control API (pod phases, evictions, taints, nodes, node groups,
 * faults, dropped watches).
 *
 * Usage: test_kube_backend FAKE_BINARY (CTest passes it). Each case starts its own fake with the
 * 14-node cluster of tests/fixtures/fake-kube/ and a backend with profile-backend.yaml.
 */
#include <poll.h>
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
#include <curl/curl.h>
#include <jansson.h>

#include "common/ty_buf.h"
#include "scheduler/kube/kclient.h"
#include "scheduler/kube/kube_backend.h"
#include "scheduler/kube/kubeconfig.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"
#include "tests/support/fake_kube_proc.h"

#define NS "kbe"
#define SEL "labelSelector=trainyard.io%%2Fjob-id%%3D" /* in formats */

static const char *g_binary;
static pid_t g_pid;
static char g_dir[64];
static ty_kubeconfig *g_kc;
static ty_kclient *g_c;       /* the test's own client, for the fake's API */
static kube_profile *g_prof;
static backend *g_b;
static int64_t g_recheck_ms; /* the next new_backend()'s rank_service_recheck_ms; 0: default */

/* Every event observed in the case, in order; `taken` marks those a check consumed. */
#define MAX_EVENTS 512
static backend_event g_ev[MAX_EVENTS];
static int g_taken[MAX_EVENTS];
static size_t g_nev;

/* ---- the fake -------------------------------------------------------------------------------- */

static json_t *api(const char *method, const char *path, const char *body, long want)
{
    ty_kresp r = {0};
    char err[1024] = "";
    ty_kclient_request(g_c, method, path, body, &r, err, sizeof(err));
    if (r.code != want)
        fail_msg("%s %s: HTTP %ld, want %ld: %s", method, path, r.code, want, err);
    json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
    ty_kresp_clear(&r);
    return j;
}

static void fake(const char *method, const char *path, const char *body)
{
    json_decref(api(method, path, body, 200));
}

static void fakef(const char *method, const char *body, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fakef(const char *method, const char *body, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    fake(method, path, body);
}

/* Moves every pod of a job's attempt to phase (with exit code and reason). */
static void pods_phase(const char *job, int attempt, const char *phase, int code,
                       const char *reason)
{
    char body[256];
    snprintf(body, sizeof(body), "{\"phase\":\"%s\",\"exitCode\":%d,\"reason\":\"%s\"}", phase,
             code, reason);
    char path[512];
    snprintf(path, sizeof(path), "/fake/pods/" NS "/phase?" SEL "%s,trainyard.io%%2Fattempt%%3D%d",
             job, attempt);
    /* 409 while a pod is not bound or its attempt's Secret (created just after the Job) is not
     * there yet, as the kubelet waits for it: asked again until it is. */
    for (int i = 0;; i++) {
        ty_kresp r = {0};
        char err[256] = "";
        ty_kclient_request(g_c, "POST", path, body, &r, err, sizeof(err));
        long got = r.code;
        ty_kresp_clear(&r);
        if (got == 200)
            return;
        if (got != 409 || i == 300)
            fail_msg("POST %s: HTTP %ld: %s", path, got, err);
        usleep(100 * 1000);
    }
}

/* The list of a job's objects of one kind ("pods", "secrets", "jobs"), new. */
static json_t *objects(const char *kind, const char *job)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/namespaces/" NS "/%s?" SEL "%s",
             strcmp(kind, "jobs") ? "/api/v1" : "/apis/batch/v1", kind, job);
    json_t *l = api("GET", path, NULL, 200);
    json_t *items = json_incref(json_object_get(l, "items"));
    json_decref(l);
    return items;
}

/* The objects once there are n of them (the worker creates the Secret after the Job), new. */
static json_t *objects_n(const char *kind, const char *job, size_t n)
{
    json_t *l = objects(kind, job);
    for (int i = 0; i < 250 && json_array_size(l) != n; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        json_decref(l);
        l = objects(kind, job);
    }
    return l;
}

/*
 * The job's pods are named through the one headless Service of the namespace: it exists,
 * headless, selects what the Job's pod template is labelled with, is the pods' subdomain, and
 * the job has no Service of its own.
 */
static void expect_rank_service(const char *job_id, const json_t *job)
{
    json_t *svc = api("GET", "/api/v1/namespaces/" NS "/services/trainyard-ranks", NULL, 200);
    const json_t *ss = json_object_get(svc, "spec");
    assert_string_equal(json_string_value(json_object_get(ss, "clusterIP")), "None");
    assert_true(json_is_true(json_object_get(ss, "publishNotReadyAddresses")));
    const json_t *tmpl = json_object_get(json_object_get(job, "spec"), "template");
    const json_t *labels = json_object_get(json_object_get(tmpl, "metadata"), "labels");
    const char *k;
    const json_t *v;
    assert_int_equal(json_object_size(json_object_get(ss, "selector")), 1);
    json_object_foreach((json_t *)json_object_get(ss, "selector"), k, v)
        assert_true(json_equal(json_object_get(labels, k), v));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(tmpl, "spec"), "subdomain")),
        "trainyard-ranks");
    json_t *own = objects("services", job_id);
    assert_int_equal(json_array_size(own), 0);
    json_decref(own);
    json_decref(svc);
}

static const char *pod_of_rank(json_t *pods, int rank)
{
    size_t i;
    json_t *p;
    char want[16];
    snprintf(want, sizeof(want), "%d", rank);
    json_array_foreach(pods, i, p)
    {
        const char *idx = json_string_value(json_object_get(
            json_object_get(json_object_get(p, "metadata"), "annotations"),
            "batch.kubernetes.io/job-completion-index"));
        if (idx && !strcmp(idx, want))
            return json_string_value(json_object_get(json_object_get(p, "metadata"), "name"));
    }
    return NULL;
}

static const char *node_of(json_t *pods, const char *pod)
{
    size_t i;
    json_t *p;
    json_array_foreach(pods, i, p)
    {
        if (!strcmp(json_string_value(json_object_get(json_object_get(p, "metadata"), "name")),
                    pod))
            return json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName"));
    }
    return NULL;
}

/* Whether the job's attempt is pinned to zone (its pod template's node affinity says so); waits
 * for the Job to be created (the backend's worker creates it after launch() returned). */
static int pinned_to(const char *job, int attempt, const char *zone)
{
    char path[256], name[KUBE_NAME_MAX], err[512];
    assert_int_equal(kube_render_name(job, (unsigned)attempt, name, sizeof(name)), TY_OK);
    snprintf(path, sizeof(path), "/apis/batch/v1/namespaces/" NS "/jobs/%s", name);
    for (int i = 0; i < 200; i++) {
        ty_kresp r = {0};
        ty_err e = ty_kclient_request(g_c, "GET", path, NULL, &r, err, sizeof(err));
        ty_kresp_clear(&r);
        if (e != TY_ENOTFOUND)
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    json_t *j = api("GET", path, NULL, 200);
    json_t *aff = json_object_get(json_object_get(json_object_get(json_object_get(
                                      json_object_get(j, "spec"), "template"), "spec"),
                                  "affinity"), "nodeAffinity");
    char *text = json_dumps(aff, JSON_COMPACT);
    int yes = text && strstr(text, zone) != NULL;
    free(text);
    json_decref(j);
    return yes;
}

/* ---- the loop -------------------------------------------------------------------------------- */

static void pump(int ms)
{
    struct pollfd p = {g_b->ops->event_fd(g_b), POLLIN, 0};
    poll(&p, 1, ms);
    g_nev += g_b->ops->observe(g_b, g_ev + g_nev, MAX_EVENTS - g_nev);
    assert_true(g_nev < MAX_EVENTS);
}

/* The first event not yet taken of kind for rank (-2: any) and attempt (NULL: any), waited for
 * up to 15 s; fails the test without one. */
static backend_event *expect(backend_event_kind kind, int rank, backend_attempt *a)
{
    for (int waited = 0; waited < 15000; waited += 50) {
        for (size_t i = 0; i < g_nev; i++) {
            if (g_taken[i] || g_ev[i].kind != kind || (rank != -2 && g_ev[i].rank != rank) ||
                (a && g_ev[i].attempt != a))
                continue;
            g_taken[i] = 1;
            return &g_ev[i];
        }
        pump(50);
    }
    fail_msg("no event of kind %d for rank %d", (int)kind, rank);
    return NULL;
}

/* Whether an event of kind for rank came (none taken); drains for ms first. */
static int seen(backend_event_kind kind, int rank, int ms)
{
    for (int waited = 0; waited < ms; waited += 50)
        pump(50);
    for (size_t i = 0; i < g_nev; i++)
        if (g_ev[i].kind == kind && (rank == -2 || g_ev[i].rank == rank))
            return 1;
    return 0;
}

/* ---- jobs ------------------------------------------------------------------------------------ */

static const char *const g_argv[] = {"python", "train.py", "--epochs", "1", NULL};
static const char *const g_env[] = {"LR=0.1", NULL};

static backend_job job_of(const char *id, int attempt, int world, int gpus, const char *type,
                          const char *capacity)
{
    return (backend_job){
        .name = "resnet-sweep",
        .ncommand = 2,
        .id = id,
        .attempt = attempt,
        .world_size = world,
        .argv = g_argv,
        .env = g_env,
        .image = "ghcr.io/example/train:1",
        .cpu = "4",
        .memory = "16Gi",
        .cpu_cores = 4,
        .memory_bytes = 16.0 * 1024 * 1024 * 1024,
        .gpus_per_rank = gpus,
        .gpu_type = type,
        .zone = "auto",
        .capacity = capacity,
    };
}

static backend_attempt *reserve_ok(const backend_job *j)
{
    backend_attempt *a = NULL;
    char why[512] = "";
    ty_err e = g_b->ops->reserve(g_b, j, &a, why, sizeof(why));
    if (e != TY_OK)
        fail_msg("reserve: %s: %s", ty_strerror(e), why);
    assert_non_null(a);
    return a;
}

/* Launches and waits until every rank is placed; returns the pods (new). */
static json_t *launch_placed(backend_attempt *a, const backend_job *j)
{
    g_b->ops->launch(g_b, a, j);
    for (int r = 0; r < j->world_size; r++) {
        backend_event *ev = expect(BACKEND_EV_PLACED, r, a);
        assert_true(ev->where.pod[0] != '\0');
        assert_true(ev->where.node[0] != '\0');
    }
    return objects("pods", j->id);
}

static void run_all(const backend_job *j, backend_attempt *a)
{
    pods_phase(j->id, j->attempt, "Running", 0, "");
    for (int r = 0; r < j->world_size; r++) {
        backend_event *ev = expect(BACKEND_EV_RUNNING, r, a);
        assert_true(ev->where.started_ms > 0);
    }
}

static uint64_t metric(const char *name)
{
    ty_buf b = {0};
    assert_int_equal(kube_backend_metrics(g_b, &b), TY_OK);
    ty_buf_puts(&b, "");
    const char *at = strstr(b.data, name); /* "NAME VALUE" (past the "# TYPE NAME" line) */
    while (at && at > b.data && at[-1] != '\n')
        at = strstr(at + 1, name);
    uint64_t v = at ? strtoull(at + strlen(name), NULL, 10) : UINT64_MAX;
    ty_buf_free(&b);
    return v;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void test_gang_succeeds(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000a";
    backend_job j = job_of(id, 1, 2, 4, "a100", "spot");
    backend_attempt *a = reserve_ok(&j);
    int total, used;
    g_b->ops->capacity(g_b, &total, &used);
    assert_int_equal(used, 2);
    json_t *pods = launch_placed(a, &j);

    /* One Job, labelled, its pods named through the rank Service; the gang pinned to the zone
     * with the most room. */
    json_t *jobs = objects("jobs", id);
    assert_int_equal(json_array_size(jobs), 1);
    const json_t *labels =
        json_object_get(json_object_get(json_array_get(jobs, 0), "metadata"), "labels");
    assert_string_equal(json_string_value(json_object_get(labels, "trainyard.io/attempt")), "1");
    expect_rank_service(id, json_array_get(jobs, 0));
    assert_true(pinned_to(id, 1, "us-west-2b"));
    /* Rendered from the typed job: its name, its command apart from its args. */
    const json_t *md = json_object_get(json_array_get(jobs, 0), "metadata");
    assert_string_equal(json_string_value(json_object_get(json_object_get(md, "annotations"),
                                                          "trainyard.io/job-name")),
                        "resnet-sweep");
    const json_t *ctr = json_array_get(
        json_object_get(json_object_get(json_object_get(json_object_get(
                                            json_array_get(jobs, 0), "spec"), "template"),
                                        "spec"),
                        "containers"),
        0);
    char *cmd = json_dumps(json_object_get(ctr, "command"), JSON_COMPACT);
    char *args = json_dumps(json_object_get(ctr, "args"), JSON_COMPACT);
    assert_string_equal(cmd, "[\"python\",\"train.py\"]");
    assert_string_equal(args, "[\"--epochs\",\"1\"]");
    free(cmd);
    free(args);
    assert_int_equal(json_array_size(pods), 2);
    assert_non_null(strstr(node_of(pods, pod_of_rank(pods, 0)), "usw2b-a100-spot"));

    run_all(&j, a);
    pods_phase(id, 1, "Succeeded", 0, "");
    for (int r = 0; r < 2; r++) {
        backend_event *ev = expect(BACKEND_EV_EXITED, r, a);
        assert_int_equal(ev->exit_code, 0);
    }
    assert_int_equal(metric("trainyard_kube_objects_created_total "), 2);
    g_b->ops->release(g_b, a);
    g_b->ops->capacity(g_b, &total, &used);
    assert_int_equal(used, 0);
    json_decref(pods);
    json_decref(jobs);
}

static void test_oom_killed(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000b";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    run_all(&j, a);
    char path[256];
    snprintf(path, sizeof(path), "/fake/pods/" NS "/%s/phase", pod_of_rank(pods, 0));
    fake("POST", path, "{\"phase\":\"Failed\",\"exitCode\":137,\"reason\":\"OOMKilled\"}");
    backend_event *ev = expect(BACKEND_EV_EXITED, 0, a);
    assert_int_equal(ev->exit_code, 137);
    assert_non_null(strstr(ev->detail, "OOMKilled"));
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

static void test_image_pull_pending(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000n";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    /* The kubelet cannot pull the image: the rank waits, and says why. */
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/namespaces/" NS "/pods/%s/status", pod_of_rank(pods, 0));
    json_decref(api("PATCH", path,
                    "{\"status\":{\"containerStatuses\":[{\"name\":\"trainer\",\"image\":"
                    "\"ghcr.io/example/train:1\",\"imageID\":\"\",\"ready\":false,"
                    "\"restartCount\":0,\"state\":{\"waiting\":{\"reason\":\"ErrImagePull\","
                    "\"message\":\"manifest unknown\"}}}]}}",
                    200));
    backend_event *ev = expect(BACKEND_EV_PENDING, 0, a);
    assert_non_null(strstr(ev->detail, "ErrImagePull"));
    assert_non_null(strstr(ev->detail, "manifest unknown"));
    g_b->ops->stop(g_b, a, 1);
    ev = expect(BACKEND_EV_DISRUPTED, 0, a);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_STOP_REQUESTED);
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

static void test_eviction(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000c";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    run_all(&j, a);
    fakef("POST", "{}", "/fake/pods/" NS "/%s/evict", pod_of_rank(pods, 0));
    backend_event *ev;
    do
        ev = expect(BACKEND_EV_DISRUPTED, 0, a);
    while (!ev->ended);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_EVICTED);
    assert_false(seen(BACKEND_EV_EXITED, 0, 200));
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

static void test_spot_reclaim_moves_zone(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000d";
    backend_job j = job_of(id, 1, 1, 8, "a100", "spot");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    assert_true(pinned_to(id, 1, "us-west-2b"));
    run_all(&j, a);
    const char *node = node_of(pods, pod_of_rank(pods, 0));
    fakef("POST",
          "{\"key\":\"aws-node-termination-handler/spot-itn\",\"value\":\"true\","
          "\"effect\":\"NoSchedule\"}",
          "/fake/nodes/%s/taint", node);
    backend_event *ev = expect(BACKEND_EV_DISRUPTED, 0, a);
    assert_int_equal(ev->ended, 0);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_RECLAIMED);

    g_b->ops->stop(g_b, a, 0);
    ev = expect(BACKEND_EV_DISRUPTED, 0, a);
    assert_int_equal(ev->ended, 1);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_STOP_REQUESTED);

    /* The next attempt goes where the reclaim is not. */
    j.attempt = 2;
    json_t *pods2 = launch_placed(a, &j);
    assert_true(pinned_to(id, 2, "us-west-2c"));
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(pods);
    json_decref(pods2);
}

static const char *const NEW_V100 =
    "{\"metadata\":{\"name\":\"usw2a-v100-od-1\",\"labels\":{"
    "\"eks.amazonaws.com/capacityType\":\"ON_DEMAND\",\"karpenter.sh/capacity-type\":"
    "\"on-demand\",\"nvidia.com/gpu.product\":\"Tesla-V100-SXM2-16GB\","
    "\"node.kubernetes.io/instance-type\":\"p3.16xlarge\",\"topology.kubernetes.io/zone\":"
    "\"us-west-2a\",\"kubernetes.io/hostname\":\"usw2a-v100-od-1\"}},"
    "\"spec\":{\"taints\":[{\"key\":\"nvidia.com/gpu\",\"value\":\"present\","
    "\"effect\":\"NoSchedule\"}]},"
    "\"status\":{\"allocatable\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"64\",\"memory\":\"480Gi\","
    "\"pods\":\"110\"},\"capacity\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"64\",\"memory\":"
    "\"480Gi\",\"pods\":\"110\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}";

static void test_wait_then_capacity(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000e";
    backend_job j = job_of(id, 1, 2, 8, "v100", "on-demand");
    backend_attempt *a = NULL;
    char why[512] = "";
    assert_int_equal(g_b->ops->reserve(g_b, &j, &a, why, sizeof(why)), TY_EAGAIN);
    assert_null(a);
    assert_true(why[0] != '\0');

    /* More GPUs a rank than any V100 node has: never. */
    backend_job big = job_of(id, 1, 1, 16, "v100", "on-demand");
    assert_int_equal(g_b->ops->reserve(g_b, &big, &a, why, sizeof(why)), TY_EINVAL);
    assert_non_null(strstr(why, "16 GPUs"));
    backend_job noimg = job_of(id, 1, 1, 1, "v100", "on-demand");
    noimg.image = NULL;
    assert_int_equal(g_b->ops->reserve(g_b, &noimg, &a, why, sizeof(why)), TY_EINVAL);

    fake("POST", "/fake/nodes", NEW_V100);
    backend_event *ev = expect(BACKEND_EV_CAPACITY, -2, NULL);
    assert_null(ev->attempt);
    a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    assert_true(pinned_to(id, 1, "us-west-2a"));
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    expect(BACKEND_EV_DISRUPTED, 1, a);
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

static const char *const H100_GROUP_2B =
    "{\"name\":\"p5-spot-2b\",\"max\":4,\"delaySeconds\":0,\"node\":{\"metadata\":{\"labels\":{"
    "\"eks.amazonaws.com/capacityType\":\"SPOT\",\"karpenter.sh/capacity-type\":\"spot\","
    "\"eks.amazonaws.com/nodegroup\":\"p5-spot-2b\","
    "\"nvidia.com/gpu.product\":\"NVIDIA-H100-80GB-HBM3\",\"node.kubernetes.io/instance-type\":"
    "\"p5.48xlarge\",\"topology.kubernetes.io/zone\":\"us-west-2b\"}},"
    "\"spec\":{\"taints\":[{\"key\":\"nvidia.com/gpu\",\"value\":\"present\","
    "\"effect\":\"NoSchedule\"}]},"
    "\"status\":{\"allocatable\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"192\",\"memory\":\"2000Gi\","
    "\"pods\":\"110\"},\"capacity\":{\"nvidia.com/gpu\":\"8\",\"cpu\":\"192\",\"memory\":"
    "\"2000Gi\",\"pods\":\"110\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}}";

static void test_scale_from_zero(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000f";
    fake("POST", "/fake/nodegroups", H100_GROUP_2B);
    /* Two H100 ranks of 8: zone 2b has one node and a group that can add the second. */
    backend_job j = job_of(id, 1, 2, 8, "h100", "spot");
    backend_attempt *a = reserve_ok(&j);
    g_b->ops->launch(g_b, a, &j);
    backend_event *ev = expect(BACKEND_EV_PENDING, -1, a);
    assert_non_null(strstr(ev->detail, "p5-spot-2b"));
    expect(BACKEND_EV_PLACED, 0, a);
    expect(BACKEND_EV_PLACED, 1, a);
    assert_true(pinned_to(id, 1, "us-west-2b"));
    run_all(&j, a);
    /* Running in time: no withdrawal follows. */
    assert_false(seen(BACKEND_EV_DISRUPTED, -2, 2500));
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    expect(BACKEND_EV_DISRUPTED, 1, a);
    g_b->ops->release(g_b, a);
}

/*
 * Gangs without GPUs are placed by what the nodes have left, like GPU gangs: one-rank jobs of 6
 * CPUs fill the three 16-CPU nodes of the three zones two by two (none stays Pending where
 * another zone is empty), and the seventh waits, saying what is short.
 */
static void test_cpu_gangs_spread_by_capacity(void **state)
{
    (void)state;
    char ids[7][32];
    backend_job js[7];
    backend_attempt *as[7];
    int per_zone[3] = {0, 0, 0};
    static const char *const zones[3] = {"us-west-2a", "us-west-2b", "us-west-2c"};
    for (int i = 0; i < 7; i++) {
        snprintf(ids[i], sizeof ids[i], "01kbe000000000000000000c%02d", i);
        js[i] = job_of(ids[i], 1, 1, 0, NULL, "on-demand");
        js[i].cpu = "6";
        js[i].cpu_cores = 6;
        js[i].memory = "1Gi";
        js[i].memory_bytes = 1024.0 * 1024 * 1024;
    }
    for (int i = 0; i < 6; i++) {
        as[i] = reserve_ok(&js[i]);
        g_b->ops->launch(g_b, as[i], &js[i]);
        backend_event *ev = expect(BACKEND_EV_PLACEMENT, -1, as[i]);
        assert_string_equal(ev->placement.gpu_type, "");
        assert_int_equal(ev->placement.ngroups, 0);
        char words[BACKEND_DETAIL_MAX];
        snprintf(words, sizeof words, "placed in %s: its rank fits on existing nodes",
                 ev->placement.zone);
        assert_string_equal(ev->detail, words);
        for (int z = 0; z < 3; z++)
            per_zone[z] += !strcmp(ev->placement.zone, zones[z]);
        ev = expect(BACKEND_EV_PLACED, 0, as[i]);
        assert_non_null(strstr(ev->where.node, "cpu-od"));
    }
    for (int z = 0; z < 3; z++)
        assert_int_equal(per_zone[z], 2);
    backend_attempt *a = NULL;
    char why[512] = "";
    assert_int_equal(g_b->ops->reserve(g_b, &js[6], &a, why, sizeof why), TY_EAGAIN);
    assert_string_equal(why, "no zone has room for 1 rank of 6 CPU, 1Gi memory on on-demand "
                             "nodes; the most is 0 in us-west-2a (short of CPU)");
    for (int i = 0; i < 6; i++) {
        g_b->ops->stop(g_b, as[i], 1);
        expect(BACKEND_EV_DISRUPTED, 0, as[i]);
        g_b->ops->release(g_b, as[i]);
    }
}

/*
 * An attempt whose pods the scheduler refuses in their zone (another tenant took the room
 * between the placement and the pods) is withdrawn after unschedulable_timeout_seconds, with
 * the scheduler's words, and placed again elsewhere.
 */
static void test_unschedulable_withdrawn(void **state)
{
    (void)state;
    const char *id = "01kbe000000000000000000u01";
    backend_job j = job_of(id, 1, 1, 0, NULL, "on-demand");
    j.cpu = "10";
    j.cpu_cores = 10;
    j.memory = "1Gi";
    j.memory_bytes = 1024.0 * 1024 * 1024;
    backend_attempt *a = reserve_ok(&j);
    /* The room it was given in us-west-2a goes to another tenant before its pod exists. */
    json_decref(api("POST", "/api/v1/namespaces/default/pods",
                    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"squatter\"},"
                    "\"spec\":{\"nodeName\":\"usw2a-cpu-od-0\",\"containers\":[{\"name\":\"m\","
                    "\"image\":\"busybox:1.36\",\"resources\":{\"requests\":{\"cpu\":\"10\"}}}]}}",
                    201));
    g_b->ops->launch(g_b, a, &j);
    backend_event *ev = expect(BACKEND_EV_PLACEMENT, -1, a);
    assert_string_equal(ev->placement.zone, "us-west-2a");
    ev = expect(BACKEND_EV_PENDING, 0, a);
    assert_non_null(strstr(ev->detail, "Insufficient cpu"));
    ev = expect(BACKEND_EV_DISRUPTED, -1, a);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_WITHDRAWN);
    assert_int_equal(ev->ended, 1);
    /* The scheduler's words, up to their preemption part. */
    assert_string_equal(ev->detail,
                        "unschedulable in us-west-2a for 2 s: 0/14 nodes are available: 1 "
                        "Insufficient cpu, 11 node(s) had untolerated taint {nvidia.com/gpu: "
                        "present}, 2 node(s) didn't match Pod's node affinity/selector; placing "
                        "again");
    /* The next attempt goes where there is room. */
    j.attempt = 2;
    g_b->ops->launch(g_b, a, &j);
    ev = expect(BACKEND_EV_PLACEMENT, -1, a);
    assert_string_equal(ev->placement.zone, "us-west-2b");
    expect(BACKEND_EV_PLACED, 0, a);
    assert_true(pinned_to(id, 2, "us-west-2b"));
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(api("DELETE", "/api/v1/namespaces/default/pods/squatter", NULL, 200));
}

static void test_scale_up_withdrawn(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000g";
    backend_job j = job_of(id, 1, 2, 8, "h100", "spot");
    backend_attempt *a = reserve_ok(&j);
    g_b->ops->launch(g_b, a, &j);
    /* Where it went and what it waits for, in fields and in words. */
    backend_event *ev = expect(BACKEND_EV_PLACEMENT, -1, a);
    const backend_placement *pl = &ev->placement;
    char zone[64], group[64], words[BACKEND_DETAIL_MAX];
    snprintf(zone, sizeof zone, "%s", pl->zone);
    assert_string_equal(pl->gpu_type, "h100");
    assert_string_equal(pl->capacity, "spot");
    assert_int_equal(pl->ngroups, 1);
    assert_int_equal(pl->groups[0].nodes, 1);
    snprintf(group, sizeof group, "%s", pl->groups[0].name);
    assert_true(pl->deadline_ms > 0);
    snprintf(words, sizeof words,
             "placed in %s: 1 of 2 ranks fit on existing nodes, waiting for 1 node of group %s "
             "(up to 2 s)",
             zone, group);
    assert_string_equal(ev->detail, words);
    expect(BACKEND_EV_PENDING, -1, a);
    /* Rank 1 waits for a node that never comes (the scheduler says why); rank 0 is placed. */
    ev = expect(BACKEND_EV_PENDING, -2, a);
    assert_true(ev->rank >= 0);
    assert_non_null(strstr(ev->detail, "nodes are available"));
    ev = expect(BACKEND_EV_DISRUPTED, -1, a);
    assert_int_equal(ev->ended, 1);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_WITHDRAWN);
    snprintf(words, sizeof words,
             "withdrawn from %s: the nodes of group %s did not come in 2 s; placing again", zone,
             group);
    assert_string_equal(ev->detail, words);
    assert_int_equal(metric("trainyard_kube_withdrawn_total "), 1);

    /* The next attempt avoids the zone that did not grow. */
    j.attempt = 2;
    g_b->ops->launch(g_b, a, &j);
    expect(BACKEND_EV_PENDING, -1, a);
    assert_true(pinned_to(id, 2, "us-west-2a"));
    json_t *old = NULL;
    for (int i = 0; i < 100; i++) { /* the withdrawn attempt's objects go */
        json_decref(old);
        old = objects("jobs", id);
        if (json_array_size(old) == 1)
            break;
        pump(50);
    }
    assert_int_equal(json_array_size(old), 1);
    json_decref(old);
    g_b->ops->stop(g_b, a, 1);
    for (int r = 0; r < 2; r++)
        expect(BACKEND_EV_DISRUPTED, r, a);
    g_b->ops->release(g_b, a);
}

static void test_create_conflict_adopts(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000h";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    /* The Job exists already (a create whose answer was lost): the launch adopts it. */
    json_t *obj = NULL;
    char msg[256];
    assert_int_equal(kube_render_job_typed(g_prof, &j, "us-west-2a", NULL, 0, &obj, msg, sizeof(msg)),
                     TY_OK);
    char *body = json_dumps(obj, JSON_COMPACT);
    json_decref(api("POST", "/apis/batch/v1/namespaces/" NS "/jobs", body, 201));
    free(body);
    json_decref(obj);

    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    assert_false(seen(BACKEND_EV_LAUNCH_FAILED, -2, 200));
    json_t *jobs = objects("jobs", id);
    assert_int_equal(json_array_size(jobs), 1);
    assert_int_equal(json_array_size(pods), 1);
    assert_int_equal(metric("trainyard_kube_objects_adopted_total "), 1);
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(jobs);
    json_decref(pods);
}

/* The env entry of the Job's container named name (borrowed), or NULL. */
static const json_t *job_env(const json_t *job, const char *name)
{
    const json_t *ctr = json_array_get(
        json_object_get(json_object_get(json_object_get(json_object_get(job, "spec"), "template"),
                                        "spec"),
                        "containers"),
        0);
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(ctr, "env"), i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "name")), name))
            return e;
    }
    return NULL;
}

/*
 * Secrets: the job's secret env values, its token and its rendezvous secret reach the pods
 * through the attempt's Secret (secretKeyRef), which is owned by the Job and goes with it; the
 * Job and its pods hold none of the values.
 */
static void test_secrets(void **state)
{
    (void)state;
    static const char *const env[] = {"LR=0.1", "HF_TOKEN=hf_0123456789abcdef",
                                      "TRAINYARD_TOKEN=ty_job_token_for_the_test",
                                      "TRAINYARD_RENDEZVOUS_SECRET=00ff00ff00ff00ff", NULL};
    static const char *const names[] = {"HF_TOKEN", "TRAINYARD_TOKEN",
                                        "TRAINYARD_RENDEZVOUS_SECRET", NULL};
    static const char *const keys[][2] = {
        {"HF_TOKEN", "aGZfMDEyMzQ1Njc4OWFiY2RlZg=="},
        {"TRAINYARD_TOKEN", "dHlfam9iX3Rva2VuX2Zvcl90aGVfdGVzdA=="},
        {"TRAINYARD_RENDEZVOUS_SECRET", "MDBmZjAwZmYwMGZmMDBmZg=="},
    };
    const char *id = "01kbe00000000000000000000s";
    backend_job j = job_of(id, 1, 2, 0, NULL, "on-demand");
    j.env = env;
    j.secret_names = names;
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    json_t *jobs = objects("jobs", id), *secs = objects_n("secrets", id, 1);
    assert_int_equal(json_array_size(jobs), 1);
    assert_int_equal(json_array_size(secs), 1);
    const json_t *job = json_array_get(jobs, 0), *sec = json_array_get(secs, 0);

    /* The Secret: named like the Job, owned by it, holding the three values. */
    const json_t *smd = json_object_get(sec, "metadata");
    assert_string_equal(json_string_value(json_object_get(smd, "name")),
                        json_string_value(json_object_get(json_object_get(job, "metadata"),
                                                          "name")));
    const json_t *owner = json_array_get(json_object_get(smd, "ownerReferences"), 0);
    assert_non_null(owner);
    assert_string_equal(json_string_value(json_object_get(owner, "kind")), "Job");
    assert_string_equal(json_string_value(json_object_get(owner, "uid")),
                        json_string_value(json_object_get(json_object_get(job, "metadata"),
                                                          "uid")));
    assert_string_equal(json_string_value(json_object_get(sec, "type")), "Opaque");
    const json_t *data = json_object_get(sec, "data");
    assert_int_equal(json_object_size(data), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(data, keys[i][0])), keys[i][1]);

    /* The pods take them by reference; the Job and the pods hold no value. */
    for (size_t i = 0; i < 3; i++) {
        const json_t *ref = json_object_get(json_object_get(job_env(job, names[i]), "valueFrom"),
                                            "secretKeyRef");
        if (!ref)
            fail_msg("%s is not a secretKeyRef", names[i]);
        assert_string_equal(json_string_value(json_object_get(ref, "name")),
                            json_string_value(json_object_get(smd, "name")));
        assert_string_equal(json_string_value(json_object_get(ref, "key")), names[i]);
    }
    assert_string_equal(json_string_value(json_object_get(job_env(job, "LR"), "value")), "0.1");
    char *text = json_dumps(jobs, JSON_COMPACT), *ptext = json_dumps(pods, JSON_COMPACT);
    for (size_t i = 1; env[i]; i++) {
        const char *value = strchr(env[i], '=') + 1;
        assert_null(strstr(text, value));
        assert_null(strstr(ptext, value));
    }
    free(text);
    free(ptext);
    /* The rank Service, the Job and the Secret, counted once the worker has the answer, just
     * after the object appears. */
    for (int i = 0; i < 250 && metric("trainyard_kube_objects_created_total ") != 3; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(metric("trainyard_kube_objects_created_total "), 3);

    /* They run (the kubelet found their Secret), then the Job goes and its Secret with it. */
    run_all(&j, a);
    g_b->ops->stop(g_b, a, 1);
    for (int r = 0; r < 2; r++)
        expect(BACKEND_EV_DISRUPTED, r, a);
    g_b->ops->release(g_b, a);
    json_t *left = objects_n("secrets", id, 0);
    assert_int_equal(json_array_size(left), 0);
    json_decref(left);
    json_decref(pods);
    json_decref(jobs);
    json_decref(secs);
}

/* A Secret that exists already (an adopted attempt after a restart, or a create whose answer
 * was lost) is taken as it is: 409 AlreadyExists is no failure. */
static void test_secret_exists_already(void **state)
{
    (void)state;
    static const char *const env[] = {"TRAINYARD_TOKEN=ty_again", NULL};
    static const char *const names[] = {"TRAINYARD_TOKEN", NULL};
    const char *id = "01kbe00000000000000000000t";
    backend_job j = job_of(id, 1, 1, 0, NULL, "on-demand");
    j.env = env;
    j.secret_names = names;
    json_t *obj = NULL;
    char msg[256];
    assert_int_equal(kube_render_secret_typed(g_prof, &j, &obj, msg, sizeof(msg)), TY_OK);
    char *body = json_dumps(obj, JSON_COMPACT);
    json_decref(api("POST", "/api/v1/namespaces/" NS "/secrets", body, 201));
    free(body);
    json_decref(obj);

    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    /* The launch went on past the Secret. */
    for (int i = 0; i < 250 && metric("trainyard_kube_objects_adopted_total ") != 1; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(metric("trainyard_kube_objects_adopted_total "), 1);
    assert_false(seen(BACKEND_EV_LAUNCH_FAILED, -2, 200));
    run_all(&j, a);
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

/* A Secret the API refuses (a Role without create on secrets: 403): the Job just created is
 * taken back (no gang without its secrets) and the launch fails saying why. */
static void test_secret_refused_fails_the_launch(void **state)
{
    (void)state;
    static const char *const env[] = {"TRAINYARD_TOKEN=ty_refused", NULL};
    static const char *const names[] = {"TRAINYARD_TOKEN", NULL};
    const char *id = "01kbe00000000000000000000u";
    backend_job j = job_of(id, 1, 1, 0, NULL, "on-demand");
    j.env = env;
    j.secret_names = names;
    backend_attempt *a = reserve_ok(&j);
    fake("POST", "/fake/faults",
         "{\"method\":\"POST\",\"path\":\"/api/v1/namespaces/" NS "/secrets\","
         "\"count\":1,\"status\":403}");
    g_b->ops->launch(g_b, a, &j);
    backend_event *ev = expect(BACKEND_EV_LAUNCH_FAILED, -1, a);
    assert_non_null(strstr(ev->detail, "403"));
    assert_null(strstr(ev->detail, "ty_refused"));
    json_t *jobs = objects_n("jobs", id, 0), *secs = objects("secrets", id);
    assert_int_equal(json_array_size(jobs), 0);
    assert_int_equal(json_array_size(secs), 0);
    json_decref(jobs);
    json_decref(secs);
    g_b->ops->release(g_b, a);
}

static void test_node_lost(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000l";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    run_all(&j, a);
    fakef("DELETE", NULL, "/fake/nodes/%s", node_of(pods, pod_of_rank(pods, 0)));
    backend_event *ev = expect(BACKEND_EV_DISRUPTED, 0, a);
    assert_int_equal(ev->ended, 1);
    assert_int_equal(ev->disruption, BACKEND_DISRUPT_NODE_LOST);
    /* Each rank ends once, whatever else the pod's deletion says later. */
    assert_false(seen(BACKEND_EV_EXITED, 0, 300));
    size_t ends = 0;
    for (size_t i = 0; i < g_nev; i++)
        ends += g_ev[i].kind == BACKEND_EV_DISRUPTED && g_ev[i].ended;
    assert_int_equal(ends, 1);
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

static backend *new_backend(void);

/* A pod of namespace "other" bound to node, holding GPUs as its containers and init
 * containers (JSON arrays of GPU counts) ask. */
static void tenant_pod(const char *name, const char *node, const char *gpus, const char *init)
{
    char body[2048], c[512] = "", ic[512] = "";
    json_t *a = json_loads(gpus, 0, NULL), *b = json_loads(init, 0, NULL), *v;
    size_t i;
    json_array_foreach(a, i, v)
    {
        size_t at = strlen(c);
        snprintf(c + at, sizeof(c) - at, "%s{\"name\":\"c%zu\",\"image\":\"busybox\","
                 "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"%lld\"}}}", i ? "," : "",
                 i, (long long)json_integer_value(v));
    }
    json_array_foreach(b, i, v)
    {
        size_t at = strlen(ic);
        snprintf(ic + at, sizeof(ic) - at, "%s{\"name\":\"i%zu\",\"image\":\"busybox\","
                 "\"resources\":{\"requests\":{\"nvidia.com/gpu\":\"%lld\"},\"limits\":{"
                 "\"nvidia.com/gpu\":\"%lld\"}}}", i ? "," : "", i,
                 (long long)json_integer_value(v), (long long)json_integer_value(v));
    }
    json_decref(a);
    json_decref(b);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":{\"nodeName\":\"%s\",\"containers\":[%s],\"initContainers\":[%s]}}",
             name, node, c, ic);
    json_decref(api("POST", "/api/v1/namespaces/other/pods", body, 201));
}

/* free_resources()'s free GPUs of `type` (and its total in *total). */
static int64_t free_gpus(const char *type, int64_t *total)
{
    backend_free fr[8];
    size_t n = g_b->ops->free_resources(g_b, NULL, 0);
    assert_true(n > 0 && n <= 8);
    assert_int_equal(g_b->ops->free_resources(g_b, fr, n), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fr[i].kind, BACKEND_RES_GPU);
        assert_true(fr[i].free >= 0 && fr[i].free <= fr[i].total);
        if (!strcmp(fr[i].gpu_type, type)) {
            if (total)
                *total = fr[i].total;
            return fr[i].free;
        }
    }
    fail_msg("free_resources() names no type %s", type);
    return -1;
}

/*
 * Other tenants' pods hold GPUs the inventory must not count as free: with 6 of the 8 V100s
 * of the nodes in us-west-2a and us-west-2b taken by pods of another namespace (one by its
 * containers' sum, one by its largest init container), gangs needing 4 a node go to
 * us-west-2c, two of them (our own bound pod counted once), and a third waits until a
 * tenant's pod ends.
 */
static void test_other_tenants_gpus(void **state)
{
    (void)state;
    json_decref(api("POST", "/api/v1/namespaces",
                    "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":"
                    "\"other\"}}",
                    201));
    tenant_pod("tenant-a", "usw2a-v100-od-0", "[2, 4]", "[]");
    tenant_pod("tenant-b", "usw2b-v100-od-0", "[1]", "[6]");
    /* A backend started now finds them in its first list. */
    g_b->ops->free(g_b);
    g_b = new_backend();

    /* What admission counts (free_resources()): the V100 nodes' 24 GPUs (the type has no
     * node group to grow), less the tenants' 12; the A100s include what their groups can add. */
    int64_t total = 0;
    assert_int_equal(free_gpus("v100", &total), 12);
    assert_int_equal(total, 24);
    assert_int_equal(free_gpus("a100", &total), 5 * 8 + (4 + 2 + 3) * 8); /* 2b has 2, 2c 1 */
    assert_int_equal(total, 5 * 8 + (4 + 2 + 3) * 8);

    backend_job ja = job_of("01kbe00000000000000000000t", 1, 1, 4, "v100", "on-demand");
    backend_attempt *a = reserve_ok(&ja);
    assert_int_equal(free_gpus("v100", NULL), 8); /* booked before its pod exists */
    json_t *pods = launch_placed(a, &ja);
    assert_int_equal(free_gpus("v100", NULL), 8); /* and once bound, counted once */
    assert_string_equal(node_of(pods, pod_of_rank(pods, 0)), "usw2c-v100-od-0");
    assert_true(pinned_to(ja.id, 1, "us-west-2c"));
    /* Its pod is bound: seen by both informers, counted once, so 4 GPUs there are free. */
    backend_job jb = job_of("01kbe00000000000000000000u", 1, 1, 4, "v100", "on-demand");
    backend_attempt *b = reserve_ok(&jb);
    assert_int_equal(free_gpus("v100", NULL), 4);

    backend_job jc = job_of("01kbe00000000000000000000v", 1, 1, 4, "v100", "on-demand");
    backend_attempt *c = NULL;
    char why[512] = "";
    assert_int_equal(g_b->ops->reserve(g_b, &jc, &c, why, sizeof(why)), TY_EAGAIN);
    assert_non_null(strstr(why, "the most is 2"));

    /* The tenant's pod in us-west-2a ends: its GPUs are free, and the waiting gang is told. */
    fake("POST", "/fake/pods/other/tenant-a/phase", "{\"phase\":\"Succeeded\"}");
    expect(BACKEND_EV_CAPACITY, -2, NULL);
    assert_int_equal(free_gpus("v100", NULL), 10);
    c = reserve_ok(&jc);
    json_t *cpods = launch_placed(c, &jc);
    assert_true(pinned_to(jc.id, 1, "us-west-2a"));

    backend_attempt *all[] = {a, c};
    for (int i = 0; i < 2; i++) {
        g_b->ops->stop(g_b, all[i], 1);
        expect(BACKEND_EV_DISRUPTED, 0, all[i]);
        g_b->ops->release(g_b, all[i]);
    }
    g_b->ops->release(g_b, b);
    /* Every reservation released, the stopped pods gone: only the tenant's 6 are taken. */
    for (int i = 0; i < 100 && free_gpus("v100", NULL) != 18; i++)
        pump(50);
    assert_int_equal(free_gpus("v100", NULL), 18);
    json_decref(pods);
    json_decref(cpods);
}

/* Reads l until exactly want has come (a followed log's bytes come when they come); fails
 * on an error, on more than want, or when it has not come after many reads. */
static void read_exactly(backend_log *l, const char *want)
{
    char got[1024] = "";
    size_t len = 0;
    for (int i = 0; i < 400 && len < strlen(want); i++) {
        long n = g_b->ops->log_read(l, got + len, sizeof(got) - 1 - len);
        assert_true(n >= 0);
        len += (size_t)n;
        got[len] = '\0';
        if (n == 0) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    assert_string_equal(got, want);
}

/* The whole log of one rank as the backend serves it now ("" when it has none yet). */
static char *log_now(const char *id, int attempt, int rank, long tail)
{
    backend_log *l = NULL;
    size_t cap = 1 << 20, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    if (g_b->ops->log_open(g_b, id, attempt, rank, tail, &l) != TY_OK)
        return out;
    long n;
    while ((n = g_b->ops->log_read(l, out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    g_b->ops->log_close(l);
    return out;
}

static void wait_log(const char *id, int attempt, int rank, long tail, const char *want)
{
    char *got = NULL;
    for (int i = 0; i < 500; i++) {
        free(got);
        got = log_now(id, attempt, rank, tail);
        if (!strcmp(got, want))
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_string_equal(got, want);
    free(got);
}

/*
 * A rank's log is its pod's log as the backend streamed it into its own files (pods/log with
 * follow and timestamps, the timestamps cut): a tail of it, a follower that reads what the
 * rank writes, every byte of a burst larger than a stream's buffer, and all of it once the
 * pods are gone.
 */
static void test_logs(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000m";
    backend_job j = job_of(id, 1, 2, 4, "a100", "spot");
    backend_attempt *a = reserve_ok(&j);
    json_t *pods = launch_placed(a, &j);
    run_all(&j, a);
    char path[256], buf[256];
    snprintf(path, sizeof(path), "/fake/pods/" NS "/%s/log", pod_of_rank(pods, 1));
    fake("POST", path, "step 1\nstep 2\nstep 3\n");
    wait_log(id, 1, 1, 2, "step 2\nstep 3\n");
    backend_log *l = NULL;
    assert_int_equal(g_b->ops->log_open(g_b, id, 1, 1, 2, &l), TY_OK);
    long n = g_b->ops->log_read(l, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, "step 2\nstep 3\n");
    fake("POST", path, "step 4\n");
    read_exactly(l, "step 4\n");
    fake("POST", path, "step 5\nstep 5\n");
    read_exactly(l, "step 5\nstep 5\n");
    /* More than a stream's buffer at once, read in small pieces: every byte, in order. */
    size_t big_len = 30000 * 11;
    char *big = malloc(big_len + 1), *got = malloc(big_len + 1);
    assert_non_null(big);
    assert_non_null(got);
    for (int i = 0; i < 30000; i++)
        snprintf(big + (size_t)i * 11, 12, "line %05d\n", i);
    fake("POST", path, big);
    size_t have = 0;
    for (int i = 0; i < 20000 && have < big_len; i++) {
        long k = g_b->ops->log_read(l, got + have, big_len - have < 1000 ? big_len - have : 1000);
        assert_true(k >= 0);
        have += (size_t)k;
    }
    got[have] = '\0';
    assert_int_equal(have, big_len);
    assert_true(memcmp(got, big, big_len) == 0);
    free(big);
    free(got);
    fakef("POST", "{\"phase\":\"Succeeded\"}", "/fake/pods/" NS "/%s/phase",
          pod_of_rank(pods, 1));
    assert_int_equal(g_b->ops->log_read(l, buf, sizeof(buf)), 0);
    g_b->ops->log_close(l);
    assert_int_equal(g_b->ops->log_open(g_b, id, 1, 3, -1, &l), TY_ENOTFOUND);
    assert_int_equal(g_b->ops->log_open(g_b, id, 7, 0, -1, &l), TY_ENOTFOUND);
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_EXITED, 1, a);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    /* The pods are gone; the log is not. */
    json_decref(objects_n("pods", id, 0));
    char *all = log_now(id, 1, 1, -1);
    const char *head = "step 1\nstep 2\nstep 3\nstep 4\nstep 5\nstep 5\nline 00000\n";
    assert_memory_equal(all, head, strlen(head));
    assert_int_equal(strlen(all), strlen(head) - 11 + big_len);
    free(all);
    json_decref(pods);
}

static void test_recover_adopts(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000i";
    /* Attempt 1 was stopped and left behind; attempt 2 runs. */
    backend_job j = job_of(id, 1, 2, 4, "a100", "spot");
    backend_attempt *a = reserve_ok(&j);
    json_t *p1 = launch_placed(a, &j);
    j.attempt = 2;
    json_t *p2 = launch_placed(a, &j);
    run_all(&j, a);
    g_b->ops->release(g_b, a); /* the server goes away; its objects stay */
    g_b->ops->free(g_b);
    g_b = new_backend();
    g_nev = 0;
    memset(g_taken, 0, sizeof(g_taken));

    backend_recovery rec = {0};
    char why[512] = "";
    ty_err e = g_b->ops->recover(g_b, &j, 1, 1000, &rec, why, sizeof(why));
    if (e != TY_OK)
        fail_msg("recover: %s", why);
    assert_non_null(rec.adopted);
    assert_int_equal(rec.found, 2);
    for (int r = 0; r < 2; r++) {
        backend_event *ev = expect(BACKEND_EV_RUNNING, r, rec.adopted);
        assert_true(ev->where.pod[0] != '\0');
    }
    /* Nothing was created; attempt 1 is gone, attempt 2 untouched. */
    assert_int_equal(metric("trainyard_kube_objects_created_total "), 0);
    json_t *jobs = objects("jobs", id);
    assert_int_equal(json_array_size(jobs), 1);
    json_t *pods = objects("pods", id);
    assert_int_equal(json_array_size(pods), 2);

    /* It carries on: the adopted attempt's ends come as events. */
    pods_phase(id, 2, "Succeeded", 0, "");
    for (int r = 0; r < 2; r++)
        assert_int_equal(expect(BACKEND_EV_EXITED, r, rec.adopted)->exit_code, 0);
    g_b->ops->release(g_b, rec.adopted);
    json_decref(jobs);
    json_decref(pods);
    json_decref(p1);
    json_decref(p2);
}

static void test_faults_and_dropped_watches(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000j";
    backend_job j = job_of(id, 1, 2, 4, "a100", "spot");
    backend_attempt *a = reserve_ok(&j);
    fake("POST", "/fake/faults",
         "{\"method\":\"POST\",\"path\":\"/apis/batch/v1/namespaces/" NS "/jobs\","
         "\"count\":2,\"status\":500}");
    fake("POST", "/fake/faults",
         "{\"method\":\"POST\",\"path\":\"/api/v1/namespaces/" NS "/services\","
         "\"count\":1,\"status\":429,\"retryAfter\":0}");
    json_t *pods = launch_placed(a, &j);
    fake("POST", "/fake/watches/drop", "{}");
    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"/api/v1/namespaces/" NS "/pods\","
         "\"count\":2,\"status\":500}");
    fake("POST", "/fake/watches/drop", "{}");
    run_all(&j, a);
    fake("POST", "/fake/watches/drop", "{}");
    pods_phase(id, 1, "Succeeded", 0, "");
    for (int r = 0; r < 2; r++)
        assert_int_equal(expect(BACKEND_EV_EXITED, r, a)->exit_code, 0);
    /* The rank Service's create was retried past its 429. */
    json_decref(api("GET", "/api/v1/namespaces/" NS "/services/trainyard-ranks", NULL, 200));
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

/*
 * A rank Service made beforehand (by an earlier server, or by hand) is taken as it is when it
 * does its work; one of that name that is not headless or selects other pods refuses the
 * launch, saying what to do, and no Job is created for ranks whose names would not resolve.
 */
static void test_rank_service_taken_or_refused(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000s";
    json_decref(api("POST", "/api/v1/namespaces/" NS "/services",
                    "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":"
                    "\"trainyard-ranks\"},\"spec\":{\"selector\":{\"app\":\"web\"},\"ports\":"
                    "[{\"port\":80}]}}",
                    201));
    backend_job j = job_of(id, 1, 1, 0, NULL, "on-demand");
    backend_attempt *a = reserve_ok(&j);
    g_b->ops->launch(g_b, a, &j);
    backend_event *ev = expect(BACKEND_EV_LAUNCH_FAILED, -1, a);
    assert_non_null(strstr(ev->detail, "trainyard-ranks"));
    assert_non_null(strstr(ev->detail, "not headless"));
    assert_non_null(strstr(ev->detail, "delete it"));
    json_t *none = objects("jobs", id);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);

    /* Deleted, and made again by hand as Trainyard makes it: taken, and the next attempt runs. */
    json_decref(api("DELETE", "/api/v1/namespaces/" NS "/services/trainyard-ranks", NULL, 200));
    json_t *svc = NULL;
    char msg[256], *body;
    assert_int_equal(kube_render_rank_service(g_prof, &svc, msg, sizeof msg), TY_OK);
    assert_non_null(body = json_dumps(svc, JSON_COMPACT));
    json_decref(api("POST", "/api/v1/namespaces/" NS "/services", body, 201));
    free(body);
    json_decref(svc);
    j.attempt = 2;
    json_t *pods = launch_placed(a, &j);
    json_t *jobs = objects("jobs", id);
    assert_int_equal(json_array_size(jobs), 1);
    expect_rank_service(id, json_array_get(jobs, 0));
    assert_int_equal(metric("trainyard_kube_objects_created_total "), 1); /* the Job alone */
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(jobs);
    json_decref(pods);
}

static void test_rejected_launch(void **state)
{
    (void)state;
    const char *id = "01kbe00000000000000000000k";
    backend_job j = job_of(id, 1, 1, 8, "a100", "on-demand");
    backend_attempt *a = reserve_ok(&j);
    fake("POST", "/fake/faults",
         "{\"method\":\"POST\",\"path\":\"/apis/batch/v1/namespaces/" NS "/jobs\","
         "\"count\":1,\"status\":422}");
    g_b->ops->launch(g_b, a, &j);
    backend_event *ev = expect(BACKEND_EV_LAUNCH_FAILED, -1, a);
    assert_non_null(strstr(ev->detail, "injected fault"));
    assert_non_null(strstr(ev->detail, "422"));
    json_t *none = objects("jobs", id);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    /* The reservation holds: the next attempt launches on it. */
    j.attempt = 2;
    json_t *pods = launch_placed(a, &j);
    g_b->ops->stop(g_b, a, 1);
    expect(BACKEND_EV_DISRUPTED, 0, a);
    g_b->ops->release(g_b, a);
    json_decref(pods);
}

/* A rank Service deleted by hand is made again by the first launch after the recheck interval
 * (60 s by default; 100 ms here), before that launch's Job. */
static void test_rank_service_made_again(void **state)
{
    (void)state;
    g_b->ops->free(g_b);
    g_recheck_ms = 100;
    g_b = new_backend();
    g_recheck_ms = 0;
    const char *ids[] = {"01kbe00000000000000000000u", "01kbe00000000000000000000v"};
    for (int k = 0; k < 2; k++) {
        if (k == 1) {
            json_decref(
                api("DELETE", "/api/v1/namespaces/" NS "/services/trainyard-ranks", NULL, 200));
            struct timespec ts = {0, 150 * 1000000L};
            nanosleep(&ts, NULL);
        }
        backend_job j = job_of(ids[k], 1, 1, 0, NULL, "on-demand");
        backend_attempt *a = reserve_ok(&j);
        json_t *pods = launch_placed(a, &j);
        json_t *jobs = objects("jobs", ids[k]);
        assert_int_equal(json_array_size(jobs), 1);
        expect_rank_service(ids[k], json_array_get(jobs, 0));
        g_b->ops->stop(g_b, a, 1);
        expect(BACKEND_EV_DISRUPTED, 0, a);
        g_b->ops->release(g_b, a);
        json_decref(jobs);
        json_decref(pods);
    }
    /* The Service twice and the two Jobs. */
    assert_int_equal(metric("trainyard_kube_objects_created_total "), 4);
}

/* ---- setup ----------------------------------------------------------------------------------- */

static backend *new_backend(void)
{
    ty_kclient_opts o;
    ty_kclient_opts_default(&o);
    o.qps = 0;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 100;
    o.max_retries = 4;
    o.timeout_ms = 10000;
    char logs[128];
    snprintf(logs, sizeof logs, "%s/logs", g_dir);
    kube_backend_config cfg = {
        .kubeconfig = g_kc,
        .profile = g_prof,
        .client = &o,
        .sync_timeout_ms = 10000,
        .informer_backoff_ms = 20,
        .logs_dir = logs,
        .rank_service_recheck_ms = g_recheck_ms,
    };
    backend *b = NULL;
    char err[1024] = "";
    if (kube_backend_new(&cfg, &b, err, sizeof(err)) != TY_OK)
        fail_msg("kube_backend_new: %s", err);
    return b;
}

static int setup(void **state)
{
    (void)state;
    char path[128], err[1024] = "";
    int port;
    if ((g_pid = fk_proc_start(g_binary, "kbe-token", FK_NODES, NULL, &port)) < 0)
        return -1;
    snprintf(g_dir, sizeof(g_dir), "/tmp/ty-kbe-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(path, sizeof(path), "%s/config", g_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "current-context: t\n"
               "contexts: [{name: t, context: {cluster: c, user: u, namespace: " NS "}}]\n"
               "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
               "users:\n- name: u\n  user:\n    token: kbe-token\n",
            port);
    fclose(f);
    ty_kclient_opts o;
    ty_kclient_opts_default(&o);
    o.qps = 0;
    if (ty_kubeconfig_load(path, NULL, &g_kc, err, sizeof(err)) != TY_OK ||
        ty_kclient_new(g_kc, &o, &g_c, err, sizeof(err)) != TY_OK ||
        kube_profile_load(KBE_PROFILE, &g_prof, err, sizeof(err)) != TY_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    json_decref(api("POST", "/api/v1/namespaces",
                    "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" NS
                    "\"}}",
                    201));
    g_b = new_backend();
    g_nev = 0;
    memset(g_taken, 0, sizeof(g_taken));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int st = 0;
    char path[128];
    if (g_b)
        g_b->ops->free(g_b);
    g_b = NULL;
    ty_kclient_free(g_c);
    g_c = NULL;
    ty_kubeconfig_free(g_kc);
    g_kc = NULL;
    kube_profile_free(g_prof);
    g_prof = NULL;
    snprintf(path, sizeof(path), "rm -rf '%s'", g_dir); /* the config and the logs */
    if (system(path) != 0)
        print_message("cannot remove %s\n", g_dir);
    kill(g_pid, SIGTERM);
    waitpid(g_pid, &st, 0);
    return 0;
}

static void test_unreachable(void **state)
{
    (void)state;
    /* The pods cannot be listed (RBAC, say): new() does not start half-blind, and says why. */
    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"/api/v1/namespaces/" NS "/pods\","
         "\"count\":100000,\"status\":403}");
    kube_backend_config cfg = {.kubeconfig = g_kc, .profile = g_prof, .sync_timeout_ms = 500};
    backend *b = NULL;
    char err[1024] = "";
    assert_int_equal(kube_backend_new(&cfg, &b, err, sizeof(err)), TY_EAGAIN);
    assert_null(b);
    assert_non_null(strstr(err, "cannot list pods in namespace " NS));
    assert_non_null(strstr(err, "403"));
    fake("DELETE", "/fake/faults", NULL);
    /* Nor without the pods of every namespace (the ClusterRole's read of pods). */
    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"/api/v1/pods\",\"count\":100000,\"status\":403}");
    assert_int_equal(kube_backend_new(&cfg, &b, err, sizeof(err)), TY_EAGAIN);
    assert_null(b);
    assert_non_null(strstr(err, "cannot list the pods of all namespaces"));
    fake("DELETE", "/fake/faults", NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_KUBE_APISERVER\n", argv[0]);
        return 2;
    }
    g_binary = argv[1];
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gang_succeeds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_image_pull_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spot_reclaim_moves_zone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_then_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scale_from_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scale_up_withdrawn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_gangs_spread_by_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unschedulable_withdrawn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_conflict_adopts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_exists_already, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_refused_fails_the_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_adopts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_faults_and_dropped_watches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejected_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank_service_taken_or_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank_service_made_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_tenants_gpus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
