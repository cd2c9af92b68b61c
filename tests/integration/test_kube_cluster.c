/*
 * test_kube_cluster.c - GET /v1/cluster and node quarantine through the real server on the
 * Kubernetes backend, against the fake Kubernetes API server (the 14-node cluster of the
 * transcripts) and deploy/cluster-profile.example.yaml with a quarantine section.
 *
 * What a user notices: a GPU node whose node group the profile does not know is reported (with
 * the profile's group it was probably meant as) and counted in /metrics; a node on which two
 * jobs failed three times is taken out of rotation (an event on the job, the node listed with
 * its evidence, a metric), the next gang goes elsewhere and its Job excludes the node by name;
 * the quarantine outlives a server restart; an admin releases it and placement uses the node
 * again; a quarantine also ends on its own after release_seconds. Evictions and a rank naming a
 * lost peer are not charged to the node; the evidence names each failure's kind.
 *
 * Usage: test_kube_cluster TRAINYARD OPENAPI FAKE_APISERVER (CTest passes them).
 */
#include <curl/curl.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/fake_kube_proc.h"
#include "tests/support/ty_harness.h"

#ifndef TY_KUBE_PROFILE
#error "TY_KUBE_PROFILE must name deploy/cluster-profile.example.yaml"
#endif
#ifndef TY_KUBE_NODES
#error "TY_KUBE_NODES must name tests/fixtures/fake-kube/nodes-14.json"
#endif

#define NS "trainyard"
#define FAKE_TOKEN "fake-cluster-admin-token"
#define WAIT_S 30
#define NODE_BAD "usw2a-a100-od-0"
#define NODE_GOOD "usw2a-a100-od-1"
#define HOLD "{\"key\": \"test.trainyard.io/hold\", \"value\": \"x\", \"effect\": \"NoSchedule\"}"

static const char *g_fake_bin;
static pid_t g_fake_pid = -1;
static char g_fake[64];
static char g_dir[] = "/tmp/ty-kube-cluster-XXXXXX";
static char g_kubeconfig[256], g_profile[256];
static ty_server *g_srv;
static ty_client *g_cli;

/* ---- the fake ------------------------------------------------------------------------------ */

typedef struct fresp {
    long status;
    json_t *json;
} fresp;

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

static void fake_ctl(const char *method, const char *path, const char *body)
{
    fresp r = fake_call(method, path, body);
    if (r.status != 200)
        fail_msg("%s %s: HTTP %ld", method, path, r.status);
    json_decref(r.json);
}

static void node_ctl(const char *node, const char *what, const char *body)
{
    char path[256];
    snprintf(path, sizeof path, "/fake/nodes/%s/%s", node, what);
    fake_ctl("POST", path, body);
}

#define JOBS "/apis/batch/v1/namespaces/" NS "/jobs"
#define PODS "/api/v1/namespaces/" NS "/pods"

static json_t *fake_list(const char *collection, const char *job, int attempt)
{
    char sel[256], path[512];
    fk_selector(sel, sizeof sel, job, attempt);
    snprintf(path, sizeof path, "%s?labelSelector=%s", collection, sel);
    fresp r = fake_call("GET", path, NULL);
    if (r.status != 200)
        fail_msg("GET %s: HTTP %ld", path, r.status);
    json_t *items = json_incref(json_object_get(r.json, "items"));
    json_decref(r.json);
    return items;
}

/* Waits until the attempt's one pod is bound; returns its node (static buffer). */
static const char *wait_bound(const char *job, int attempt)
{
    static char node[256];
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *items = fake_list(PODS, job, attempt);
        const char *n = json_string_value(
            json_object_get(json_object_get(json_array_get(items, 0), "spec"), "nodeName"));
        if (n) {
            snprintf(node, sizeof node, "%s", n);
            json_decref(items);
            return node;
        }
        json_decref(items);
        ty_sleep_ms(100);
    }
    fail_msg("attempt %d of %s: its pod was never bound", attempt, job);
    return NULL;
}

/* The attempt's pods move to the phase in body (fk_set_phase()). */
static void set_phase(const char *job, int attempt, const char *body)
{
    long st = fk_set_phase(g_fake, FAKE_TOKEN, NS, job, attempt, body, WAIT_S * 10);
    if (st != 200)
        fail_msg("attempt %d of %s: setting its pods' phase: HTTP %ld", attempt, job, st);
}

/* ---- the server ---------------------------------------------------------------------------- */

static json_t *get_json(const char *path)
{
    ty_http_resp *r = ty_req(g_cli, "GET", path, NULL);
    if (r->status != 200)
        fail_msg("GET %s: %ld %s", path, r->status, r->body);
    json_t *j = json_incref(r->json);
    ty_resp_destroy(r);
    return j;
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

static void wait_state(const char *id, const char *state)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int i = 0; i < WAIT_S * 10; i++) {
        json_t *j = get_json(path);
        int done = strcmp(ty_json_str(j, "state"), state) == 0;
        json_decref(j);
        if (done)
            return;
        ty_sleep_ms(100);
    }
    dump(id);
    fail_msg("job %s never reached %s", id, state);
}

static int has_event(const char *id, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    json_t *j = get_json(path);
    int found = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "events"), i, e)
    {
        if (strstr(ty_json_str(e, "message"), text))
            found = 1;
    }
    json_decref(j);
    return found;
}

/* One rank of 8 A100s on demand in us-west-2a (where NODE_BAD and NODE_GOOD are). */
static void submit(const char *name, int restarts, char id[64])
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"image\": \"registry.example/trainyard-worker:1.0\", "
             "\"command\": [\"trainyard-worker\", \"train\"], \"workers\": {\"count\": 1}, "
             "\"resources\": {\"gpu\": {\"type\": \"a100\", \"count\": 8}}, "
             "\"placement\": {\"zone\": \"us-west-2a\", \"capacity\": \"on-demand\"}, "
             "\"restart\": {\"max\": %d, \"backoff_seconds\": 0}}",
             name, restarts);
    ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs", body);
    if (r->status != 201)
        fail_msg("submit %s: %ld %s", name, r->status, r->body);
    snprintf(id, 64, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
}

/* Attempt `attempt` of id runs on `node` and fails there with body's status. */
static void fail_on(const char *id, int attempt, const char *node, const char *body)
{
    const char *at = wait_bound(id, attempt);
    if (strcmp(at, node) != 0) {
        dump(id);
        fail_msg("attempt %d of %s ran on %s, not %s", attempt, id, at, node);
    }
    set_phase(id, attempt, "{\"phase\": \"Running\"}");
    wait_state(id, "RUNNING");
    set_phase(id, attempt, body);
}

/* A job runs to success; returns the node it ran on (static buffer) and its Job (new). */
static const char *succeed(const char *name, json_t **job_obj)
{
    static char node[256];
    char id[64];
    submit(name, 0, id);
    snprintf(node, sizeof node, "%s", wait_bound(id, 1));
    json_t *jobs = fake_list(JOBS, id, 1);
    *job_obj = json_incref(json_array_get(jobs, 0));
    json_decref(jobs);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    wait_state(id, "RUNNING");
    set_phase(id, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    wait_state(id, "SUCCEEDED");
    return node;
}

/* The names of a Job's required nodeAffinity matchFields NotIn (borrowed), or NULL. */
static const json_t *not_in(const json_t *job)
{
    const json_t *na = json_object_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(job, "spec"), "template"), "spec"),
            "affinity"),
        "nodeAffinity");
    const json_t *t0 = json_array_get(
        json_object_get(json_object_get(na, "requiredDuringSchedulingIgnoredDuringExecution"),
                        "nodeSelectorTerms"),
        0);
    const json_t *f = json_array_get(json_object_get(t0, "matchFields"), 0);
    if (!f)
        return NULL;
    assert_string_equal(ty_json_str(f, "key"), "metadata.name");
    assert_string_equal(ty_json_str(f, "operator"), "NotIn");
    return json_object_get(f, "values");
}

/* The quarantined node named node in GET /v1/cluster (new), or NULL. */
static json_t *quarantined(const char *node)
{
    json_t *c = get_json("/v1/cluster");
    json_t *found = NULL;
    size_t i;
    json_t *q;
    json_array_foreach(json_object_get(c, "quarantined_nodes"), i, q)
    {
        if (!strcmp(ty_json_str(q, "name"), node))
            found = json_incref(q);
    }
    json_decref(c);
    return found;
}

/* The value of a /metrics sample line that starts with prefix, or -1. */
static long long metric(const char *prefix)
{
    ty_http_resp *r = ty_req(g_cli, "GET", "/metrics", NULL);
    long long v = -1;
    for (const char *p = r->body; p && *p;) {
        const char *nl = strchr(p, '\n');
        if (!strncmp(p, prefix, strlen(prefix)) && p[strlen(prefix)] == ' ')
            v = strtoll(p + strlen(prefix) + 1, NULL, 10);
        p = nl ? nl + 1 : NULL;
    }
    ty_resp_destroy(r);
    return v;
}

static int write_profile(long long release_seconds)
{
    FILE *in = fopen(TY_KUBE_PROFILE, "r"), *out = fopen(g_profile, "w");
    int rc = in && out ? 0 : -1;
    char buf[4096];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (rc == 0)
        fprintf(out, "\nquarantine: {failures: 3, min_jobs: 2, window_seconds: 3600, "
                     "release_seconds: %lld}\n",
                release_seconds);
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

static void restart_server(void)
{
    char err[512];
    ty_client_free(g_cli);
    ty_server_kill(g_srv);
    assert_int_equal(ty_server_restart(g_srv, err, sizeof err), 0);
    g_cli = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
}

static int group_setup(void **state)
{
    (void)state;
    char text[1024], err[512];
    int port;
    if (!mkdtemp(g_dir))
        return -1;
    if ((g_fake_pid = fk_proc_start(g_fake_bin, FAKE_TOKEN, TY_KUBE_NODES, NULL, &port)) < 0)
        return -1;
    snprintf(g_fake, sizeof g_fake, "http://127.0.0.1:%d", port);
    fresp r = fake_call("POST", "/api/v1/namespaces",
                        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", "
                        "\"metadata\": {\"name\": \"" NS "\"}}");
    json_decref(r.json);
    if (r.status != 201)
        return -1;
    snprintf(g_kubeconfig, sizeof g_kubeconfig, "%s/kubeconfig", g_dir);
    snprintf(g_profile, sizeof g_profile, "%s/profile.yaml", g_dir);
    snprintf(text, sizeof text,
             "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
             "clusters:\n- name: fake\n  cluster:\n    server: %s\n"
             "users:\n- name: admin\n  user:\n    token: %s\n"
             "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n"
             "    namespace: " NS "\n",
             g_fake, FAKE_TOKEN);
    FILE *f = fopen(g_kubeconfig, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || write_profile(86400) != 0)
        return -1;
    const char *args[] = {"--cluster-profile", g_profile, "--kubeconfig", g_kubeconfig,
                          "--kube-qps", "0", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err) != 0) {
        fprintf(stderr, "cannot start the server: %s\n", err);
        return -1;
    }
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
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- cases --------------------------------------------------------------------------------- */

/*
 * The cluster as placement sees it, and a node whose group the profile does not know: a third
 * A100 node of us-west-2a joins, labeled p4d-ondemand-2a where the profile says p4d-od-2a. It
 * is reported, naming the profile's group that placement counts as empty beside it, logged once
 * and counted in /metrics; it goes when the node goes.
 */
static void test_unknown_node_group(void **state)
{
    (void)state;
    json_t *c = get_json("/v1/cluster");
    assert_int_equal(json_array_size(json_object_get(c, "unknown_nodes")), 0);
    size_t i;
    json_t *z, *row = NULL;
    json_array_foreach(json_object_get(c, "zones"), i, z)
    {
        if (!strcmp(ty_json_str(z, "zone"), "us-west-2a") &&
            json_is_string(json_object_get(z, "gpu_type")) &&
            !strcmp(ty_json_str(z, "gpu_type"), "a100"))
            row = z;
    }
    assert_non_null(row);
    const json_t *nodes = json_object_get(row, "nodes"), *gpus = json_object_get(row, "gpus");
    assert_int_equal(json_integer_value(json_object_get(nodes, "total")), 2);
    assert_int_equal(json_integer_value(json_object_get(nodes, "on_demand")), 2);
    assert_int_equal(json_integer_value(json_object_get(gpus, "allocatable")), 16);
    assert_int_equal(json_integer_value(json_object_get(gpus, "free")), 16);
    json_t *g;
    int groups = 0;
    json_array_foreach(json_object_get(c, "node_groups"), i, g)
    {
        if (!strcmp(ty_json_str(g, "name"), "p4d-od-2a")) {
            assert_int_equal(json_integer_value(json_object_get(g, "size")), 2);
            assert_int_equal(json_integer_value(json_object_get(g, "max_size")), 4);
            groups++;
        }
    }
    assert_int_equal(groups, 1);
    json_decref(c);
    assert_int_equal(metric("trainyard_cluster_unknown_nodes{reason=\"node_group\"}"), 0);

    /* A node of the transcripts' cluster, renamed, in a group the profile does not name. */
    json_error_t jerr;
    json_t *all = json_load_file(TY_KUBE_NODES, 0, &jerr), *node = NULL;
    assert_non_null(all);
    json_array_foreach(json_object_get(all, "items"), i, g)
    {
        if (!strcmp(ty_json_str(json_object_get(g, "metadata"), "name"), NODE_BAD))
            node = json_deep_copy(g);
    }
    json_decref(all);
    assert_non_null(node);
    json_t *md = json_object_get(node, "metadata");
    json_object_set_new(md, "name", json_string("usw2a-a100-od-9"));
    json_object_del(md, "resourceVersion");
    json_object_del(md, "uid");
    json_object_set_new(json_object_get(md, "labels"), "eks.amazonaws.com/nodegroup",
                        json_string("p4d-ondemand-2a"));
    char *text = json_dumps(node, 0);
    json_decref(node);
    fake_ctl("POST", "/fake/nodes", text);
    free(text);

    json_t *u = NULL;
    for (int k = 0; k < WAIT_S * 10 && !u; k++) {
        c = get_json("/v1/cluster");
        json_array_foreach(json_object_get(c, "unknown_nodes"), i, g)
        {
            if (!strcmp(ty_json_str(g, "name"), "usw2a-a100-od-9"))
                u = json_incref(g);
        }
        json_decref(c);
        if (!u)
            ty_sleep_ms(100);
    }
    assert_non_null(u);
    assert_string_equal(ty_json_str(u, "node_group"), "p4d-ondemand-2a");
    assert_string_equal(ty_json_str(u, "zone"), "us-west-2a");
    assert_string_equal(json_string_value(json_array_get(json_object_get(u, "reasons"), 0)),
                        "node_group");
    assert_int_equal(json_array_size(json_object_get(u, "reasons")), 1);
    const char *msg = json_string_value(json_object_get(u, "message"));
    if (!strstr(msg, "node group p4d-ondemand-2a is not in the cluster profile") ||
        !strstr(msg, "p4d-od-2a (2 of 4 nodes)"))
        fail_msg("unexpected message: %s", msg);
    json_decref(u);
    assert_int_equal(metric("trainyard_cluster_unknown_nodes{reason=\"node_group\"}"), 1);
    assert_int_equal(metric("trainyard_cluster_unknown_nodes{reason=\"gpu_product\"}"), 0);
    char *log = ty_server_log(g_srv);
    const char *first = strstr(log, "node group is not in the cluster profile");
    assert_non_null(first);
    assert_non_null(strstr(first, "usw2a-a100-od-9"));
    assert_null(strstr(first + 1, "node group is not in the cluster profile")); /* once */
    free(log);

    fake_ctl("DELETE", "/fake/nodes/usw2a-a100-od-9", NULL);
    for (int k = 0; k < WAIT_S * 10; k++) {
        if (metric("trainyard_cluster_unknown_nodes{reason=\"node_group\"}") == 0)
            return;
        ty_sleep_ms(100);
    }
    fail_msg("the deleted node is still counted");
}

/* A gang of `count` ranks of 8 A100s on demand in zone, never restarted. */
static void submit_gang(const char *name, int count, const char *zone, char id[64])
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"image\": \"registry.example/trainyard-worker:1.0\", "
             "\"command\": [\"trainyard-worker\", \"train\"], \"workers\": {\"count\": %d}, "
             "\"resources\": {\"gpu\": {\"type\": \"a100\", \"count\": 8}}, "
             "\"placement\": {\"zone\": \"%s\", \"capacity\": \"on-demand\"}, "
             "\"restart\": {\"max\": 0, \"backoff_seconds\": 0}}",
             name, count, zone);
    ty_http_resp *r = ty_req(g_cli, "POST", "/v1/jobs", body);
    if (r->status != 201)
        fail_msg("submit %s: %ld %s", name, r->status, r->body);
    snprintf(id, 64, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
}

static void cancel(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    ty_http_resp *r = ty_req(g_cli, "POST", path, NULL);
    if (r->status != 200 && r->status != 202)
        fail_msg("cancel %s: %ld %s", id, r->status, r->body);
    ty_resp_destroy(r);
}

/* The node group named name in GET /v1/cluster (new). */
static json_t *node_group(const char *name)
{
    json_t *c = get_json("/v1/cluster"), *found = NULL, *g;
    size_t i;
    json_array_foreach(json_object_get(c, "node_groups"), i, g)
    {
        if (!strcmp(ty_json_str(g, "name"), name))
            found = json_incref(g);
    }
    json_decref(c);
    assert_non_null(found);
    return found;
}

/*
 * A profile that names a group otherwise than the cluster: an on-demand A100 node joins
 * us-west-2c in node group p4d-ondemand-2c, where the profile has p4d-od-2c and no node carries
 * that name. The profile's group says so in GET /v1/cluster; a gang of two such ranks pinned to
 * us-west-2c waits, saying that p4d-od-2c is not grown (it is not placed to wait for a node of
 * a group that will not come); a gang of one rank runs on the node that is there.
 */
static void test_group_named_otherwise(void **state)
{
    (void)state;
    json_t *g = node_group("p4d-od-2c");
    assert_true(json_is_null(json_object_get(g, "mismatch")));
    assert_int_equal(json_integer_value(json_object_get(g, "size")), 0);
    json_decref(g);

    json_error_t jerr;
    json_t *all = json_load_file(TY_KUBE_NODES, 0, &jerr), *node = NULL, *n;
    size_t i;
    assert_non_null(all);
    json_array_foreach(json_object_get(all, "items"), i, n)
    {
        if (!strcmp(ty_json_str(json_object_get(n, "metadata"), "name"), NODE_GOOD))
            node = json_deep_copy(n);
    }
    json_decref(all);
    assert_non_null(node);
    json_t *md = json_object_get(node, "metadata"), *labels = json_object_get(md, "labels");
    json_object_set_new(md, "name", json_string("usw2c-a100-od-9"));
    json_object_del(md, "resourceVersion");
    json_object_del(md, "uid");
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v)
    {
        if (json_is_string(v) && !strcmp(json_string_value(v), "us-west-2a"))
            json_string_set(v, "us-west-2c");
    }
    json_object_set_new(labels, "kubernetes.io/hostname", json_string("usw2c-a100-od-9"));
    json_object_set_new(labels, "eks.amazonaws.com/nodegroup", json_string("p4d-ondemand-2c"));
    char *text = json_dumps(node, 0);
    json_decref(node);
    fake_ctl("POST", "/fake/nodes", text);
    free(text);

    json_t *m = NULL;
    for (int t = 0; t < WAIT_S * 10 && !json_is_object(m); t++) {
        g = node_group("p4d-od-2c");
        json_decref(m);
        m = json_incref(json_object_get(g, "mismatch"));
        json_decref(g);
        if (!json_is_object(m))
            ty_sleep_ms(100);
    }
    assert_true(json_is_object(m));
    assert_int_equal(json_array_size(json_object_get(m, "node_groups")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(m, "node_groups"), 0)),
                        "p4d-ondemand-2c");
    if (!strstr(ty_json_str(m, "message"), "p4d-ondemand-2c"))
        fail_msg("unexpected message: %s", ty_json_str(m, "message"));
    json_decref(m);
    g = node_group("p4d-od-2a"); /* its nodes carry its name */
    assert_true(json_is_null(json_object_get(g, "mismatch")));
    json_decref(g);

    char two[64], one[64], path[128];
    submit_gang("two-in-2c", 2, "us-west-2c", two);
    snprintf(path, sizeof path, "/v1/jobs/%s", two);
    const char *want = "the profile's group p4d-od-2c is not grown: us-west-2c has its nodes "
                       "under the name p4d-ondemand-2c";
    int said = 0;
    for (int t = 0; t < WAIT_S * 10 && !said; t++) {
        json_t *j = get_json(path);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "pending_reason"), "message"));
        said = msg && strstr(msg, want);
        assert_string_equal(ty_json_str(j, "state"), "PENDING");
        json_decref(j);
        if (!said)
            ty_sleep_ms(100);
    }
    if (!said) {
        dump(two);
        fail_msg("the waiting gang does not say why p4d-od-2c is not grown");
    }
    json_t *jobs = fake_list(JOBS, two, 1);
    assert_int_equal(json_array_size(jobs), 0); /* nothing created to wait for a node */
    json_decref(jobs);
    cancel(two);
    wait_state(two, "CANCELLED");

    submit_gang("one-in-2c", 1, "us-west-2c", one);
    assert_string_equal(wait_bound(one, 1), "usw2c-a100-od-9");
    said = 0; /* the loop records the backend's events as it gets to them */
    for (int t = 0; t < WAIT_S * 10 && !said; t++)
        if (!(said = has_event(one, "placed in us-west-2c: its rank fits on existing nodes")))
            ty_sleep_ms(100);
    assert_true(said);
    set_phase(one, 1, "{\"phase\": \"Running\"}");
    wait_state(one, "RUNNING");
    set_phase(one, 1, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
    wait_state(one, "SUCCEEDED");
    fake_ctl("DELETE", "/fake/nodes/usw2c-a100-od-9", NULL);
}

/* The name of the attempt's one pod (static buffer), once bound. */
static const char *pod_name(const char *job, int attempt)
{
    static char name[256];
    wait_bound(job, attempt);
    json_t *items = fake_list(PODS, job, attempt);
    snprintf(name, sizeof name, "%s",
             ty_json_str(json_object_get(json_array_get(items, 0), "metadata"), "name"));
    json_decref(items);
    return name;
}

/* The attempt's pod writes text to its log, as its container would. */
static void pod_log(const char *job, int attempt, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/log", pod_name(job, attempt));
    fake_ctl("POST", path, text);
}

/*
 * Ends that are not the node's are not charged to it: a rank evicted through the Eviction API
 * (its pod's DisruptionTarget condition says EvictionByEvictionAPI), and a rank that failed
 * naming a lost peer in its last words (the kubelet's FallbackToLogsOnError hands the end of its
 * log over). The job's events say both; the node ledger counts neither.
 */
static void test_ends_not_charged(void **state)
{
    (void)state;
    char id[64], path[512];
    long long before = metric("trainyard_node_failures_total");
    assert_true(before >= 0);
    node_ctl(NODE_GOOD, "taint", HOLD);
    submit("not-the-node", 0, id);
    assert_string_equal(wait_bound(id, 1), NODE_BAD);
    set_phase(id, 1, "{\"phase\": \"Running\"}");
    wait_state(id, "RUNNING");
    snprintf(path, sizeof path, "/fake/pods/" NS "/%s/evict", pod_name(id, 1));
    fake_ctl("POST", path, "{}");

    /* Evicted: placed again, no restart spent; the second attempt names a lost peer. */
    assert_string_equal(wait_bound(id, 2), NODE_BAD);
    set_phase(id, 2, "{\"phase\": \"Running\"}");
    pod_log(id, 2,
            "epoch 1 loss 0.52\n"
            "trainyard-worker: rank 1 (10.0.3.7:29500) lost: connection reset by peer\n");
    set_phase(id, 2, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    wait_state(id, "FAILED");
    if (!has_event(id, "rank 1 (10.0.3.7:29500) lost: connection reset by peer")) {
        dump(id);
        fail_msg("the rank's last words are not in its end");
    }
    assert_int_equal(metric("trainyard_node_failures_total"), before);
    node_ctl(NODE_GOOD, "untaint", "{\"key\": \"test.trainyard.io/hold\"}");
}

/*
 * Two jobs fail three times on one node (the other A100 node of the zone held by a taint):
 * the node is quarantined, the next gang goes to the other node and its Job excludes the
 * quarantined one; the quarantine survives a server restart; an admin releases it, after which
 * a gang may use the node again.
 */
static void test_quarantine_release_by_admin(void **state)
{
    (void)state;
    char a[64], b[64];
    node_ctl(NODE_GOOD, "taint", HOLD);
    submit("flaky-a", 1, a);
    wait_bound(a, 1);
    pod_log(a, 1, "step 10\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled "
                  "cuda error\n");
    fail_on(a, 1, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    fail_on(a, 2, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 137, \"reason\": \"OOMKilled\"}");
    wait_state(a, "FAILED");
    assert_null(quarantined(NODE_BAD)); /* one job's failures alone do not condemn a node */
    submit("flaky-b", 0, b);
    fail_on(b, 1, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 2}");
    wait_state(b, "FAILED");
    if (!has_event(b, "node " NODE_BAD " quarantined (3 failures of 2 jobs within 3600 s)")) {
        dump(b);
        fail_msg("no event says the node was quarantined");
    }

    json_t *q = quarantined(NODE_BAD);
    assert_non_null(q);
    assert_string_equal(ty_json_str(q, "reason"), "3 failures of 2 jobs within 3600 s");
    const json_t *ev = json_object_get(q, "evidence");
    assert_int_equal(json_array_size(ev), 3);
    static const int codes[] = {1, 137, 2};
    static const char *const reasons[] = {"gpu_error", "oom_killed", "exit_code"};
    for (size_t i = 0; i < 3; i++) {
        const json_t *f = json_array_get(ev, i);
        assert_string_equal(ty_json_str(f, "job_id"), i < 2 ? a : b);
        assert_int_equal(json_integer_value(json_object_get(f, "exit_code")), codes[i]);
        assert_string_equal(ty_json_str(f, "reason"), reasons[i]);
        assert_non_null(json_string_value(json_object_get(f, "time")));
    }
    assert_non_null(strstr(ty_json_str(json_array_get(ev, 1), "cause"), "OOMKilled"));
    json_decref(q);
    assert_int_equal(metric("trainyard_nodes_quarantined"), 1);
    json_t *c = get_json("/v1/cluster");
    size_t i;
    json_t *z;
    json_array_foreach(json_object_get(c, "zones"), i, z)
    {
        if (!strcmp(ty_json_str(z, "zone"), "us-west-2a") &&
            json_is_string(json_object_get(z, "gpu_type")) &&
            !strcmp(ty_json_str(z, "gpu_type"), "a100"))
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(z, "nodes"), "quarantined")),
                1);
    }
    json_decref(c);

    /* The next gang: the other node, and its Job keeps it off the quarantined one. */
    node_ctl(NODE_GOOD, "untaint", "{\"key\": \"test.trainyard.io/hold\"}");
    json_t *job = NULL;
    assert_string_equal(succeed("after", &job), NODE_GOOD);
    const json_t *names = not_in(job);
    assert_non_null(names);
    assert_int_equal(json_array_size(names), 1);
    assert_string_equal(json_string_value(json_array_get(names, 0)), NODE_BAD);
    json_decref(job);

    /* Kept across a restart. */
    restart_server();
    q = quarantined(NODE_BAD);
    assert_non_null(q);
    assert_int_equal(json_array_size(json_object_get(q, "evidence")), 3);
    json_decref(q);

    /* An admin releases it: listed no more, and a gang may go there again. */
    char path[256];
    snprintf(path, sizeof path, "/v1/cluster/nodes/%s:release", NODE_BAD);
    ty_http_resp *r = ty_req(g_cli, "POST", path, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(ty_json_str(r->json, "name"), NODE_BAD);
    ty_resp_destroy(r);
    r = ty_req(g_cli, "POST", path, NULL);
    assert_int_equal(r->status, 404); /* not quarantined any more */
    ty_resp_destroy(r);
    assert_null(quarantined(NODE_BAD));
    node_ctl(NODE_GOOD, "taint", HOLD);
    job = NULL;
    for (int k = 0; k < WAIT_S * 10 && metric("trainyard_nodes_quarantined") != 0; k++)
        ty_sleep_ms(100);
    assert_string_equal(succeed("released", &job), NODE_BAD);
    assert_null(not_in(job));
    json_decref(job);
    node_ctl(NODE_GOOD, "untaint", "{\"key\": \"test.trainyard.io/hold\"}");
}

/*
 * With release_seconds 5, a node quarantined again (failures before its release no longer
 * count: it takes three new ones) shows only the new failures as its evidence, and comes back
 * on its own.
 */
static void test_quarantine_release_by_time(void **state)
{
    (void)state;
    char a[64], b[64];
    assert_int_equal(write_profile(5), 0);
    restart_server();
    node_ctl(NODE_GOOD, "taint", HOLD);
    submit("again-a", 0, a);
    fail_on(a, 1, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    wait_state(a, "FAILED");
    assert_null(quarantined(NODE_BAD)); /* the first three were before the admin's release */
    submit("again-b", 1, b);
    fail_on(b, 1, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    fail_on(b, 2, NODE_BAD, "{\"phase\": \"Failed\", \"exitCode\": 1}");
    wait_state(b, "FAILED");
    assert_true(has_event(b, "node " NODE_BAD " quarantined"));
    json_t *q = quarantined(NODE_BAD);
    assert_non_null(q);
    const json_t *ev = json_object_get(q, "evidence");
    assert_int_equal(json_array_size(ev), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(ty_json_str(json_array_get(ev, i), "job_id"), i == 0 ? a : b);
    json_decref(q);
    node_ctl(NODE_GOOD, "untaint", "{\"key\": \"test.trainyard.io/hold\"}");
    for (int k = 0; k < WAIT_S * 10; k++) {
        if (!(q = quarantined(NODE_BAD))) {
            assert_int_equal(metric("trainyard_nodes_quarantined"), 0);
            return;
        }
        json_decref(q);
        ty_sleep_ms(100);
    }
    fail_msg("the quarantine of %s did not end after release_seconds", NODE_BAD);
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
        cmocka_unit_test(test_unknown_node_group),
        cmocka_unit_test(test_group_named_otherwise),
        cmocka_unit_test(test_ends_not_charged),
        cmocka_unit_test(test_quarantine_release_by_admin),
        cmocka_unit_test(test_quarantine_release_by_time),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    ty_harness_cleanup();
    return rc;
}
