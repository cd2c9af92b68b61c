/*
 * test_kube_render.c - scheduler/kube/render.c: an attempt as Kubernetes objects.
 *
 * Golden tests, one file per feature in tests/fixtures/kube-render/ (TY_UPDATE_GOLDEN=1 rewrites
 * them from the renderer; review the diff). Every rendered object is also validated against the
 * Kubernetes v1.26 schemas (batch/v1 Job, core/v1 Service) or the Volcano Job CRD with unknown
 * fields refused, as the API server does with fieldValidation=Strict. Specs are normalized by
 * api/spec.c first, exactly as a submission stores them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"
#include "tests/support/oas.h"

#define JOB_ID "01m83jjz3ffxex5t69bvv9gne0"
#define JOB_UID "2b8efaf7-c811-4144-875e-4e1b4af59565"

static json_t *swagger;     /* the v1.26 definitions */
static json_t *volcano_crd; /* the Volcano Job's openAPIV3Schema (borrowed from volcano_doc) */
static json_t *volcano_doc;
static kube_profile *example;

/* ---- helpers ---- */

static json_t *normalized(const char *text)
{
    json_error_t jerr;
    json_t *in = json_loads(text, 0, &jerr);
    json_t *out = NULL;
    spec_errors errs;
    if (!in)
        fail_msg("bad test spec: %s", jerr.text);
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    if (spec_job(in, "$", &out, &errs) != TY_OK) {
        char *e = json_dumps(errs.list, 0);
        fail_msg("spec refused: %s", e);
    }
    spec_errors_free(&errs);
    json_decref(in);
    return out;
}

static kube_profile *profile_of(const char *yaml)
{
    kube_profile *p = NULL;
    char msg[256] = "";
    if (kube_profile_parse(yaml, strlen(yaml), "inline", &p, msg, sizeof msg) != TY_OK)
        fail_msg("profile: %s", msg);
    return p;
}

static void validate_k8s(const json_t *obj, const char *definition)
{
    char ref[160], err[512] = "";
    snprintf(ref, sizeof ref, "#/definitions/%s", definition);
    json_t *schema = json_pack("{s:s}", "$ref", ref);
    int rc = oas_validate(swagger, schema, obj, OAS_STRICT, err, sizeof err);
    json_decref(schema);
    if (rc != 0)
        fail_msg("%s does not validate: %s", definition, err);
}

static void validate_volcano(const json_t *obj)
{
    char err[512] = "";
    if (oas_validate(NULL, volcano_crd, obj, OAS_STRICT, err, sizeof err) != 0)
        fail_msg("Volcano Job does not validate: %s", err);
}

/* RFC 1035 label, as the API server checks Service names (transcript 05). */
static int is_dns1035(const char *s)
{
    regex_t re;
    assert_int_equal(regcomp(&re, "^[a-z]([-a-z0-9]*[a-z0-9])?$", REG_EXTENDED | REG_NOSUB), 0);
    int ok = strlen(s) <= 63 && regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* RFC 1123 label: what an Indexed Job's pod hostname must be (transcript 05d). */
static int is_dns1123(const char *s)
{
    regex_t re;
    assert_int_equal(regcomp(&re, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", REG_EXTENDED | REG_NOSUB), 0);
    int ok = strlen(s) <= 63 && regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static const json_t *pod_spec_of(const json_t *job)
{
    const json_t *spec = json_object_get(job, "spec");
    const json_t *tmpl = json_object_get(spec, "template");
    if (!tmpl)
        tmpl = json_object_get(json_array_get(json_object_get(spec, "tasks"), 0), "template");
    return json_object_get(tmpl, "spec");
}

static const json_t *container_of(const json_t *job)
{
    return json_array_get(json_object_get(pod_spec_of(job), "containers"), 0);
}

/* The env entry named name: its value, or its fieldRef path prefixed "field:". */
static const char *env_of(const json_t *job, const char *name)
{
    static char buf[256];
    const json_t *e;
    size_t i;
    json_array_foreach(json_object_get(container_of(job), "env"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")), name))
            continue;
        const json_t *v = json_object_get(e, "value");
        if (v)
            return json_string_value(v);
        snprintf(buf, sizeof buf, "field:%s",
                 json_string_value(json_object_get(
                     json_object_get(json_object_get(e, "valueFrom"), "fieldRef"), "fieldPath")));
        return buf;
    }
    return NULL;
}

/* The typed job (backend.h) the scheduler makes of a normalized spec, as sched.c does; the
 * arrays are allocated in t and freed by typed_free(). */
typedef struct typed {
    backend_job job;
    const char **argv;
    char **env;
    const char **secret_names;
    backend_volume *vols;
    int64_t ttl;
} typed;

static void typed_of(const json_t *spec, unsigned attempt, typed *t)
{
    const json_t *cmd = json_object_get(spec, "command"), *args = json_object_get(spec, "args");
    const json_t *env = json_object_get(spec, "env"), *vols = json_object_get(spec, "volumes");
    const json_t *res = json_object_get(spec, "resources");
    const json_t *gpu = json_object_get(res, "gpu"), *pl = json_object_get(spec, "placement");
    const json_t *ttl = json_object_get(spec, "ttl_seconds_after_finished");
    size_t n = 0, i;
    const json_t *v;
    const char *k;
    memset(t, 0, sizeof *t);
    t->argv = calloc(json_array_size(cmd) + json_array_size(args) + 1, sizeof *t->argv);
    /* Room for TRAINYARD_TOKEN and TRAINYARD_RENDEZVOUS_SECRET, which launch() adds. */
    t->env = calloc(json_object_size(env) + 3, sizeof *t->env);
    t->secret_names = calloc(json_object_size(env) + 3, sizeof *t->secret_names);
    t->vols = calloc(json_array_size(vols) + 1, sizeof *t->vols);
    assert_true(t->argv && t->env && t->vols && t->secret_names);
    json_array_foreach(cmd, i, v) t->argv[n++] = json_string_value(v);
    json_array_foreach(args, i, v) t->argv[n++] = json_string_value(v);
    n = 0;
    size_t ns = 0;
    json_object_foreach((json_t *)env, k, v)
    {
        /* A secret's value, as the scheduler opens it from the store. */
        const char *val = json_is_object(v) ? json_string_value(json_object_get(v, "value"))
                                            : json_string_value(v);
        size_t len = strlen(k) + strlen(val) + 2;
        if (json_is_object(v))
            t->secret_names[ns++] = k;
        t->env[n] = malloc(len);
        assert_non_null(t->env[n]);
        snprintf(t->env[n++], len, "%s=%s", k, val);
    }
    json_array_foreach(vols, i, v)
    {
        t->vols[i] = (backend_volume){
            .claim = json_string_value(json_object_get(v, "claim")),
            .mount = json_string_value(json_object_get(v, "mount")),
            .read_only = json_is_true(json_object_get(v, "read_only")),
        };
    }
    t->job = (backend_job){
        .id = JOB_ID,
        .attempt = (int)attempt,
        .world_size = (int)json_integer_value(json_object_get(json_object_get(spec, "workers"),
                                                              "count")),
        .argv = t->argv,
        .env = (const char *const *)t->env,
        .secret_names = t->secret_names,
        .image = json_string_value(json_object_get(spec, "image")),
        .cpu = json_string_value(json_object_get(res, "cpu")),
        .memory = json_string_value(json_object_get(res, "memory")),
        .gpus_per_rank = (int)json_integer_value(json_object_get(gpu, "count")),
        .gpu_type = json_string_value(json_object_get(gpu, "type")),
        .zone = json_string_value(json_object_get(pl, "zone")),
        .capacity = json_string_value(json_object_get(pl, "capacity")),
        .volumes = t->vols,
        .nvolumes = json_array_size(vols),
        .timeout_s = json_integer_value(json_object_get(spec, "timeout_seconds")),
        .name = json_string_value(json_object_get(spec, "name")),
        .ncommand = (int)json_array_size(cmd),
        .has_ttl = json_is_integer(ttl),
        .ttl_seconds_after_finished = json_integer_value(ttl),
    };
}

static void typed_free(typed *t)
{
    for (size_t i = 0; t->env && t->env[i]; i++)
        free(t->env[i]);
    free(t->env);
    free(t->secret_names);
    free(t->argv);
    free(t->vols);
}

/* The same JSON text, byte for byte. */
static void assert_same(const json_t *a, const json_t *b)
{
    char *x = json_dumps(a, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    char *y = json_dumps(b, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    assert_non_null(x);
    assert_non_null(y);
    assert_string_equal(x, y);
    free(x);
    free(y);
}

/* Renders the Job (and, without Volcano, the rank Service) into {"job":..., "service":...}
 * (new), from the typed job the backend is given; the normalized spec must render the same
 * bytes. */
static json_t *render(const kube_profile *p, const char *spec_text, unsigned attempt,
                      const char *zone)
{
    json_t *spec = normalized(spec_text);
    kube_render_in in = {spec, JOB_ID, attempt, zone};
    typed t;
    json_t *job = NULL, *svc = NULL, *from_spec = NULL;
    char msg[256] = "";
    typed_of(spec, attempt, &t);
    if (kube_render_job_typed(p, &t.job, zone, NULL, 0, &job, msg, sizeof msg) != TY_OK)
        fail_msg("render_job_typed: %s", msg);
    if (kube_render_job(p, &in, &from_spec, msg, sizeof msg) != TY_OK)
        fail_msg("render_job: %s", msg);
    assert_same(job, from_spec);
    json_decref(from_spec);
    json_t *both = json_pack("{s:o}", "job", job);
    if (!p->volcano) {
        if (kube_render_rank_service(p, &svc, msg, sizeof msg) != TY_OK)
            fail_msg("render_rank_service: %s", msg);
        json_object_set_new(both, "service", svc);
        validate_k8s(job, "io.k8s.api.batch.v1.Job");
        validate_k8s(svc, "io.k8s.api.core.v1.Service");
    } else {
        validate_volcano(job);
    }
    typed_free(&t);
    json_decref(spec);
    return both;
}

/* Compares with (or, under TY_UPDATE_GOLDEN=1, rewrites) tests/fixtures/kube-render/<name>. */
static void golden(const char *name, const json_t *got)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", TY_GOLDEN_DIR, name);
    const char *update = getenv("TY_UPDATE_GOLDEN");
    if (update && !strcmp(update, "1")) {
        assert_int_equal(json_dump_file(got, path, JSON_INDENT(2) | JSON_ENSURE_ASCII), 0);
        FILE *f = fopen(path, "a");
        assert_non_null(f);
        fputc('\n', f);
        fclose(f);
        return;
    }
    json_error_t jerr;
    json_t *want = json_load_file(path, 0, &jerr);
    if (!want)
        fail_msg("%s: %s (run with TY_UPDATE_GOLDEN=1 to write it)", path, jerr.text);
    if (!json_equal(want, got)) {
        char *g = json_dumps(got, JSON_INDENT(2));
        fprintf(stderr, "rendered:\n%s\n", g);
        free(g);
        json_decref(want);
        fail_msg("%s differs from the rendering (TY_UPDATE_GOLDEN=1 rewrites it)", path);
    }
    json_decref(want);
}

#define BASE                                                                                       \
    "\"name\":\"fmnist-lr-0.05\",\"image\":\"registry.example/trainyard-worker:1.0\","             \
    "\"command\":[\"trainyard-worker\",\"train\"]"

/* ---- golden cases, one per feature ---- */

static void test_plain(void **state)
{
    (void)state;
    json_t *r = render(example, "{" BASE ",\"workers\":{\"count\":2}}", 1, NULL);
    golden("plain", r);
    const json_t *job = json_object_get(r, "job");
    const json_t *js = json_object_get(job, "spec");
    assert_string_equal(json_string_value(json_object_get(js, "completionMode")), "Indexed");
    assert_int_equal(json_integer_value(json_object_get(js, "parallelism")), 2);
    assert_int_equal(json_integer_value(json_object_get(js, "completions")), 2);
    assert_int_equal(json_integer_value(json_object_get(js, "backoffLimit")), 0);
    /* The profile's TTL wins over the job's default. */
    assert_int_equal(json_integer_value(json_object_get(js, "ttlSecondsAfterFinished")), 86400);
    assert_null(json_object_get(js, "activeDeadlineSeconds"));
    const json_t *pod = pod_spec_of(job);
    assert_string_equal(json_string_value(json_object_get(pod, "restartPolicy")), "Never");
    /* Every attempt's pods are named through the one rank Service. */
    assert_string_equal(json_string_value(json_object_get(pod, "subdomain")), "trainyard-ranks");
    assert_string_equal(env_of(job, "MASTER_ADDR"), "ty-" JOB_ID "-a1-0.trainyard-ranks");
    /* No GPUs: no GPU selector, toleration or limit; on-demand nodes by default. */
    const json_t *sel = json_object_get(pod, "nodeSelector");
    assert_null(json_object_get(sel, "nvidia.com/gpu.product"));
    assert_string_equal(json_string_value(json_object_get(sel, "eks.amazonaws.com/capacityType")),
                        "ON_DEMAND");
    assert_null(json_object_get(pod, "tolerations"));
    const json_t *res = json_object_get(container_of(job), "resources");
    assert_null(json_object_get(json_object_get(res, "limits"), "nvidia.com/gpu"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(res, "requests"), "memory")), "2Gi");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(res, "limits"), "memory")), "2Gi");
    /* The rank Service: headless, its pods' names published before they are ready, named as
     * the pods' subdomain, owned by no Job (it outlives every attempt) and selecting the pods of
     * every attempt. */
    const json_t *svc = json_object_get(r, "service");
    const json_t *ss = json_object_get(svc, "spec");
    assert_string_equal(json_string_value(json_object_get(ss, "clusterIP")), "None");
    assert_true(json_is_true(json_object_get(ss, "publishNotReadyAddresses")));
    const json_t *smeta = json_object_get(svc, "metadata");
    assert_string_equal(json_string_value(json_object_get(smeta, "name")), "trainyard-ranks");
    assert_null(json_object_get(smeta, "ownerReferences"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(smeta, "labels"),
                                                          "app.kubernetes.io/name")),
                        "trainyard");
    assert_int_equal(json_object_size(json_object_get(ss, "selector")), 1);
    const json_t *pod_labels = json_object_get(
        json_object_get(json_object_get(json_object_get(job, "spec"), "template"), "metadata"),
        "labels");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(ss, "selector"), k, v)
        assert_true(json_equal(json_object_get(pod_labels, k), v));
    assert_string_equal(json_string_value(json_object_get(pod_labels, "trainyard.io/job-id")),
                        JOB_ID);
    assert_string_equal(json_string_value(json_object_get(pod_labels, "trainyard.io/attempt")),
                        "1");
    json_decref(r);
}

static void test_gpu_spot_zone(void **state)
{
    (void)state;
    json_t *r = render(example,
                       "{" BASE ",\"workers\":{\"count\":4},\"timeout_seconds\":86400,"
                       "\"resources\":{\"cpu\":\"8\",\"memory\":\"32Gi\","
                       "\"gpu\":{\"type\":\"a100\",\"count\":2}},"
                       "\"placement\":{\"zone\":\"auto\",\"capacity\":\"spot\"}}",
                       2, "us-west-2b");
    golden("gpu-spot-zone", r);
    const json_t *job = json_object_get(r, "job");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(job, "spec"), "activeDeadlineSeconds")),
        86400);
    const json_t *pod = pod_spec_of(job);
    const json_t *sel = json_object_get(pod, "nodeSelector");
    assert_string_equal(json_string_value(json_object_get(sel, "nvidia.com/gpu.product")),
                        "NVIDIA-A100-SXM4-40GB");
    assert_string_equal(json_string_value(json_object_get(sel, "eks.amazonaws.com/capacityType")),
                        "SPOT");
    assert_string_equal(json_string_value(json_object_get(sel, "karpenter.sh/capacity-type")),
                        "spot");
    const json_t *tol = json_array_get(json_object_get(pod, "tolerations"), 0);
    assert_string_equal(json_string_value(json_object_get(tol, "key")), "nvidia.com/gpu");
    const json_t *aff = json_object_get(pod, "affinity");
    const json_t *expr = json_array_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(json_object_get(aff, "nodeAffinity"),
                                                           "requiredDuringSchedulingIgnoredDuring"
                                                           "Execution"),
                                           "nodeSelectorTerms"),
                           0),
            "matchExpressions"),
        0);
    assert_string_equal(json_string_value(json_object_get(expr, "key")),
                        "topology.kubernetes.io/zone");
    assert_string_equal(json_string_value(json_array_get(json_object_get(expr, "values"), 0)),
                        "us-west-2b");
    const json_t *term =
        json_array_get(json_object_get(json_object_get(aff, "podAffinity"),
                                       "requiredDuringSchedulingIgnoredDuringExecution"),
                       0);
    assert_string_equal(json_string_value(json_object_get(term, "topologyKey")),
                        "topology.kubernetes.io/zone");
    const json_t *res = json_object_get(container_of(job), "resources");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(res, "limits"), "nvidia.com/gpu")), "2");
    json_decref(r);
}

static void test_capacity_any_tolerates_every_capacity(void **state)
{
    (void)state;
    kube_profile *p = profile_of(
        "zones: [z1]\n"
        "gpu_types: {h100: {node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3},\n"
        "  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}}\n"
        "capacity_types:\n"
        "  spot: {node_labels: {karpenter.sh/capacity-type: spot},\n"
        "    taints: [{key: spot, value: \"true\", effect: NoSchedule}]}\n"
        "  on-demand: {node_labels: {karpenter.sh/capacity-type: on-demand}}\n");
    json_t *r = render(p,
                       "{" BASE ",\"workers\":{\"count\":1},"
                       "\"resources\":{\"gpu\":{\"type\":\"h100\",\"count\":8}},"
                       "\"placement\":{\"capacity\":\"any\"}}",
                       1, NULL);
    golden("capacity-any", r);
    const json_t *pod = pod_spec_of(json_object_get(r, "job"));
    assert_null(
        json_object_get(json_object_get(pod, "nodeSelector"), "karpenter.sh/capacity-type"));
    assert_int_equal(json_array_size(json_object_get(pod, "tolerations")), 2);
    /* Without a zone from placement, only the podAffinity keeps the gang together. */
    assert_null(json_object_get(json_object_get(pod, "affinity"), "nodeAffinity"));
    assert_non_null(json_object_get(json_object_get(pod, "affinity"), "podAffinity"));
    json_decref(r);
    kube_profile_free(p);
}

static void test_volumes(void **state)
{
    (void)state;
    json_t *r = render(example,
                       "{" BASE ",\"workers\":{\"count\":2},\"volumes\":["
                       "{\"claim\":\"efs-data\",\"mount\":\"/data\",\"read_only\":true},"
                       "{\"claim\":\"efs-out\",\"mount\":\"/out\"}]}",
                       1, "us-west-2a");
    golden("volumes", r);
    const json_t *job = json_object_get(r, "job");
    const json_t *vols = json_object_get(pod_spec_of(job), "volumes");
    const json_t *mounts = json_object_get(container_of(job), "volumeMounts");
    assert_int_equal(json_array_size(vols), 3);
    assert_int_equal(json_array_size(mounts), 3);
    /* /dev/shm in memory, then the claims in spec order, read-only where the spec says. */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(vols, 0), "emptyDir"), "medium")),
                        "Memory");
    assert_string_equal(json_string_value(json_object_get(json_array_get(mounts, 0), "mountPath")),
                        "/dev/shm");
    const json_t *pvc = json_object_get(json_array_get(vols, 1), "persistentVolumeClaim");
    assert_string_equal(json_string_value(json_object_get(pvc, "claimName")), "efs-data");
    assert_true(json_is_true(json_object_get(pvc, "readOnly")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(mounts, 2), "mountPath")),
                        "/out");
    assert_true(json_is_false(json_object_get(json_array_get(mounts, 2), "readOnly")));
    json_decref(r);
}

static void test_env_contract(void **state)
{
    (void)state;
    kube_profile *p = profile_of(
        "namespace: ml\nserver_url: http://trainyard.ml.svc:8080\nmaster_port: 23456\n"
        "service_account: runner\npriority_class: training\nimage_pull_secrets: [regcred]\n"
        "paths: {data: /d, output: /o, checkpoints: /c}\n");
    json_t *r = render(p,
                       "{" BASE ",\"workers\":{\"count\":8},\"args\":[\"--lr\",\"0.05\"],"
                       "\"env\":{\"ZETA\":\"1\",\"ALPHA\":\"two words\"}}",
                       3, NULL);
    golden("env-contract", r);
    const json_t *job = json_object_get(r, "job");
    assert_string_equal(env_of(job, "RANK"),
                        "field:metadata.annotations['batch.kubernetes.io/job-completion-index']");
    assert_string_equal(env_of(job, "WORLD_SIZE"), "8");
    assert_string_equal(env_of(job, "LOCAL_RANK"), "0");
    assert_string_equal(env_of(job, "MASTER_ADDR"), "ty-" JOB_ID "-a3-0.trainyard-ranks");
    assert_string_equal(env_of(job, "MASTER_PORT"), "23456");
    assert_string_equal(env_of(job, "TRAINYARD_JOB_ID"), JOB_ID);
    assert_string_equal(env_of(job, "TRAINYARD_ATTEMPT"), "3");
    assert_string_equal(env_of(job, "TRAINYARD_SERVER"), "http://trainyard.ml.svc:8080");
    assert_string_equal(env_of(job, "TRAINYARD_DATA_DIR"), "/d");
    assert_string_equal(env_of(job, "TRAINYARD_OUTPUT_DIR"), "/o/" JOB_ID);
    assert_string_equal(env_of(job, "TRAINYARD_CHECKPOINT_DIR"), "/c/" JOB_ID);
    assert_string_equal(env_of(job, "ALPHA"), "two words");
    assert_string_equal(env_of(job, "ZETA"), "1");
    const json_t *pod = pod_spec_of(job);
    assert_string_equal(json_string_value(json_object_get(pod, "serviceAccountName")), "runner");
    assert_string_equal(json_string_value(json_object_get(pod, "priorityClassName")), "training");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(pod, "imagePullSecrets"), 0), "name")),
                        "regcred");
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(r, "service"), "metadata"), "namespace")),
        "ml");
    /* The MASTER_PORT the ranks use is the port the Service publishes. */
    const json_t *port = json_array_get(
        json_object_get(json_object_get(json_object_get(r, "service"), "spec"), "ports"), 0);
    assert_int_equal(json_integer_value(json_object_get(port, "port")), 23456);
    /* The job's own TTL where the profile sets none. */
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(job, "spec"), "ttlSecondsAfterFinished")),
                     604800);
    json_decref(r);
    kube_profile_free(p);
}

/* The env entry named name (borrowed), or NULL. */
static const json_t *env_entry(const json_t *job, const char *name)
{
    const json_t *e;
    size_t i;
    json_array_foreach(json_object_get(container_of(job), "env"), i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "name")), name))
            return e;
    }
    return NULL;
}

static void expect_secret_ref(const json_t *job, const char *name)
{
    const json_t *ref = json_object_get(json_object_get(env_entry(job, name), "valueFrom"),
                                        "secretKeyRef");
    if (!ref)
        fail_msg("%s is not a secretKeyRef", name);
    assert_null(json_object_get(env_entry(job, name), "value"));
    assert_string_equal(json_string_value(json_object_get(ref, "name")), "ty-" JOB_ID "-a2");
    assert_string_equal(json_string_value(json_object_get(ref, "key")), name);
}

/*
 * Quarantined nodes: the pods keep off them by name, in the same required term as the zone (a
 * term's requirements all hold; two terms would let the pod go to either), and the Job is still
 * a valid batch/v1 Job. Without a zone the term holds the names alone.
 */
static void test_avoid_nodes(void **state)
{
    (void)state;
    json_t *spec = normalized("{" BASE ",\"workers\":{\"count\":2}}");
    typed t;
    json_t *job = NULL;
    char msg[256] = "";
    const char *const avoid[] = {"usw2a-a100-od-0", "usw2a-a100-od-7"};
    typed_of(spec, 1, &t);
    for (int zoned = 1; zoned >= 0; zoned--) {
        assert_int_equal(kube_render_job_typed(example, &t.job, zoned ? "us-west-2a" : NULL,
                                               avoid, 2, &job, msg, sizeof msg),
                         TY_OK);
        validate_k8s(job, "io.k8s.api.batch.v1.Job");
        const json_t *terms = json_object_get(
            json_object_get(json_object_get(json_object_get(pod_spec_of(job), "affinity"),
                                            "nodeAffinity"),
                            "requiredDuringSchedulingIgnoredDuringExecution"),
            "nodeSelectorTerms");
        assert_int_equal(json_array_size(terms), 1);
        const json_t *term = json_array_get(terms, 0);
        const json_t *expr = json_array_get(json_object_get(term, "matchExpressions"), 0);
        if (zoned)
            assert_string_equal(json_string_value(json_array_get(json_object_get(expr, "values"),
                                                                 0)),
                                "us-west-2a");
        else
            assert_null(expr);
        const json_t *f = json_array_get(json_object_get(term, "matchFields"), 0);
        assert_string_equal(json_string_value(json_object_get(f, "key")), "metadata.name");
        assert_string_equal(json_string_value(json_object_get(f, "operator")), "NotIn");
        const json_t *v = json_object_get(f, "values");
        assert_int_equal(json_array_size(v), 2);
        assert_string_equal(json_string_value(json_array_get(v, 1)), "usw2a-a100-od-7");
        json_decref(job);
        job = NULL;
    }
    typed_free(&t);
    json_decref(spec);
}

/*
 * Secrets: the job's secret env values, the attempt's token and rendezvous secret are
 * secretKeyRefs of the pod template, never values; the values are the data of the attempt's
 * Secret, named like the Job and owned by it.
 */
static void test_secrets(void **state)
{
    (void)state;
    static const char spec_text[] =
        "{" BASE ",\"workers\":{\"count\":2},\"env\":{\"REGION\":\"eu-west-1\","
        "\"AWS_SECRET_ACCESS_KEY\":{\"value\":\"wJalrXUtnFEMI/K7MDENG\",\"secret\":true}}}";
    json_t *spec = normalized(spec_text);
    typed t;
    json_t *job = NULL, *svc = NULL, *sec = NULL, *from_spec = NULL;
    char msg[256] = "";
    typed_of(spec, 2, &t);
    /* What launch() adds (test values). */
    size_t n = 0, ns = 0;
    while (t.env[n])
        n++;
    while (t.secret_names[ns])
        ns++;
    t.env[n] = strdup("TRAINYARD_TOKEN=ty_jobtoken_0123456789");
    t.env[n + 1] = strdup("TRAINYARD_RENDEZVOUS_SECRET=00112233445566778899aabbccddeeff");
    t.secret_names[ns] = "TRAINYARD_TOKEN";
    t.secret_names[ns + 1] = "TRAINYARD_RENDEZVOUS_SECRET";
    assert_true(kube_render_has_secrets(&t.job));
    assert_int_equal(kube_render_job_typed(example, &t.job, NULL, NULL, 0, &job, msg, sizeof msg), TY_OK);
    assert_int_equal(kube_render_rank_service(example, &svc, msg, sizeof msg), TY_OK);
    assert_int_equal(kube_render_secret_typed(example, &t.job, &sec, msg, sizeof msg), TY_OK);
    validate_k8s(job, "io.k8s.api.batch.v1.Job");
    validate_k8s(sec, "io.k8s.api.core.v1.Secret");
    /* Not owned before the Job exists; then owned by it. */
    assert_null(json_object_get(json_object_get(sec, "metadata"), "ownerReferences"));
    assert_int_equal(kube_render_set_owner(example, sec, ""), TY_EINVAL);
    assert_int_equal(kube_render_set_owner(example, sec, JOB_UID), TY_OK);
    validate_k8s(sec, "io.k8s.api.core.v1.Secret");

    expect_secret_ref(job, "AWS_SECRET_ACCESS_KEY");
    expect_secret_ref(job, "TRAINYARD_TOKEN");
    expect_secret_ref(job, "TRAINYARD_RENDEZVOUS_SECRET");
    assert_string_equal(env_of(job, "REGION"), "eu-west-1");
    char *text = json_dumps(job, JSON_COMPACT);
    assert_null(strstr(text, "wJalrXUtnFEMI"));
    assert_null(strstr(text, "ty_jobtoken_0123456789"));
    assert_null(strstr(text, "00112233445566778899aabbccddeeff"));
    free(text);

    const json_t *md = json_object_get(sec, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "name")), "ty-" JOB_ID "-a2");
    assert_string_equal(json_string_value(json_object_get(sec, "type")), "Opaque");
    const json_t *owner = json_array_get(json_object_get(md, "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(owner, "uid")), JOB_UID);
    assert_string_equal(json_string_value(json_object_get(owner, "kind")), "Job");
    assert_string_equal(json_string_value(json_object_get(owner, "apiVersion")), "batch/v1");
    const json_t *data = json_object_get(sec, "data");
    assert_int_equal(json_object_size(data), 3);
    /* base64 of the values */
    assert_string_equal(json_string_value(json_object_get(data, "AWS_SECRET_ACCESS_KEY")),
                        "d0phbHJYVXRuRkVNSS9LN01ERU5H");
    assert_string_equal(json_string_value(json_object_get(data, "TRAINYARD_TOKEN")),
                        "dHlfam9idG9rZW5fMDEyMzQ1Njc4OQ==");
    assert_null(json_object_get(data, "REGION"));

    /* The stored spec ({"value": null, "secret": true}) renders the same secretKeyRef. */
    json_t *stored = normalized(spec_text);
    assert_int_equal(spec_secrets_take(stored, NULL), TY_OK);
    kube_render_in in = {stored, JOB_ID, 2, NULL};
    assert_int_equal(kube_render_job(example, &in, &from_spec, msg, sizeof msg), TY_OK);
    expect_secret_ref(from_spec, "AWS_SECRET_ACCESS_KEY");
    assert_null(env_entry(from_spec, "TRAINYARD_TOKEN")); /* launch() adds it */

    json_t *all = json_pack("{s:O, s:O, s:O}", "job", job, "service", svc, "secret", sec);
    golden("secrets", all);
    json_decref(all);
    json_decref(from_spec);
    json_decref(stored);
    json_decref(job);
    json_decref(svc);
    json_decref(sec);
    typed_free(&t);
    json_decref(spec);
}

static void test_volcano(void **state)
{
    (void)state;
    kube_profile *p = profile_of(
        "namespace: ml\nvolcano: {enabled: true, queue: research}\npriority_class: training\n"
        "gpu_types: {a10g: {node_labels: {nvidia.com/gpu.product: NVIDIA-A10G},\n"
        "  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}}\n");
    json_t *r = render(p,
                       "{" BASE ",\"workers\":{\"count\":3},\"timeout_seconds\":600,"
                       "\"resources\":{\"gpu\":{\"type\":\"a10g\",\"count\":1}}}",
                       1, "us-west-2c");
    golden("volcano", r);
    const json_t *job = json_object_get(r, "job");
    assert_string_equal(json_string_value(json_object_get(job, "apiVersion")),
                        "batch.volcano.sh/v1alpha1");
    const json_t *js = json_object_get(job, "spec");
    assert_int_equal(json_integer_value(json_object_get(js, "minAvailable")), 3);
    assert_int_equal(json_integer_value(json_object_get(js, "maxRetry")), 0);
    assert_null(json_object_get(js, "policies"));
    assert_string_equal(json_string_value(json_object_get(js, "queue")), "research");
    const json_t *task = json_array_get(json_object_get(js, "tasks"), 0);
    assert_int_equal(json_integer_value(json_object_get(task, "replicas")), 3);
    assert_null(json_object_get(task, "policies"));
    assert_string_equal(env_of(job, "MASTER_ADDR"), "ty-" JOB_ID "-a1-rank-0.ty-" JOB_ID "-a1");
    assert_string_equal(env_of(job, "RANK"), "field:metadata.annotations['volcano.sh/task-index']");
    assert_int_equal(json_integer_value(json_object_get(pod_spec_of(job), "activeDeadlineSeconds")),
                     600);
    /* Volcano's svc plugin makes a Service per Job: there is none to render. */
    json_t *svc = NULL;
    char msg[128] = "";
    assert_int_equal(kube_render_rank_service(p, &svc, msg, sizeof msg), TY_EINVAL);
    assert_null(svc);
    assert_null(json_object_get(
        json_object_get(json_object_get(json_object_get(task, "template"), "metadata"), "labels"),
        "trainyard.io/service"));
    json_decref(r);
    kube_profile_free(p);
}

/* ---- what cannot be rendered ---- */

static void test_specs_that_cannot_run_name_their_field(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *path;
    } cases[] = {
        {"{\"name\":\"a\",\"command\":[\"x\"],\"workers\":{\"count\":1}}", "$.image"},
        {"{" BASE ",\"workers\":{\"count\":1},\"resources\":{\"gpu\":{\"type\":\"tpu\","
         "\"count\":1}}}",
         "$.resources.gpu.type"},
        {"{" BASE ",\"workers\":{\"count\":1},\"placement\":{\"zone\":\"eu-west-1a\"}}",
         "$.placement.zone"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *spec = normalized(cases[i].spec);
        char path[64] = "", msg[256] = "";
        assert_int_equal(kube_render_check(example, spec, path, sizeof path, msg, sizeof msg),
                         TY_EINVAL);
        assert_string_equal(path, cases[i].path);
        assert_true(msg[0] != '\0');
        kube_render_in in = {spec, JOB_ID, 1, NULL};
        json_t *job = NULL;
        assert_int_equal(kube_render_job(example, &in, &job, msg, sizeof msg), TY_EINVAL);
        assert_null(job);
        assert_int_equal(strncmp(msg, cases[i].path, strlen(cases[i].path)), 0);
        json_decref(spec);
    }
    /* A profile without that capacity type refuses it; one without capacity types at all does
     * not constrain capacity. */
    kube_profile *p = profile_of("capacity_types: {on-demand: {}}\n");
    json_t *spec = normalized("{" BASE ",\"workers\":{\"count\":1},\"placement\":"
                              "{\"capacity\":\"spot\"}}");
    char path[64] = "", msg[256] = "";
    assert_int_equal(kube_render_check(p, spec, path, sizeof path, msg, sizeof msg), TY_EINVAL);
    assert_string_equal(path, "$.placement.capacity");
    kube_profile *none = profile_of("{}");
    assert_int_equal(kube_render_check(none, spec, path, sizeof path, msg, sizeof msg), TY_OK);
    json_decref(spec);
    kube_profile_free(p);
    kube_profile_free(none);
}

/* ---- names ---- */

static void test_names_are_valid_for_every_object(void **state)
{
    (void)state;
    static const unsigned attempts[] = {1, 9, 10, 100, 4294967295u};
    char name[KUBE_NAME_MAX], host[128];
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
        /* Ids may start with a digit; the name must not (transcript 05). */
        assert_int_equal(
            kube_render_name("0zzzzzzzzzzzzzzzzzzzzzzzzz", attempts[i], name, sizeof name), TY_OK);
        assert_true(is_dns1035(name));
        /* The job-name label value is the name: at most 63 (05b). The last pod's hostname,
         * <name>-4095, must be a label too (05d); with Volcano <name>-rank-4095. */
        snprintf(host, sizeof host, "%s-4095", name);
        assert_true(is_dns1123(host));
        snprintf(host, sizeof host, "%s-rank-4095", name);
        assert_true(is_dns1123(host));
    }
    assert_int_equal(kube_render_name(JOB_ID, 2, name, sizeof name), TY_OK);
    assert_string_equal(name, "ty-" JOB_ID "-a2");
    /* Deterministic, and different per attempt. */
    char again[KUBE_NAME_MAX];
    assert_int_equal(kube_render_name(JOB_ID, 2, again, sizeof again), TY_OK);
    assert_string_equal(name, again);
    assert_int_equal(kube_render_name(JOB_ID, 3, again, sizeof again), TY_OK);
    assert_string_not_equal(name, again);

    assert_int_equal(kube_render_name("01M83JJZ", 1, name, sizeof name), TY_EINVAL);
    assert_int_equal(kube_render_name("0123456789012345678901234567", 1, name, sizeof name),
                     TY_EINVAL);
    assert_int_equal(kube_render_name("", 1, name, sizeof name), TY_EINVAL);
    assert_int_equal(kube_render_name(JOB_ID, 0, name, sizeof name), TY_EINVAL);
    assert_int_equal(kube_render_name(JOB_ID, 1, name, 10), TY_EINVAL);
}

/* ---- the validation is real ---- */

static void test_strict_validation_catches_an_unknown_field(void **state)
{
    (void)state;
    json_t *r = render(example, "{" BASE ",\"workers\":{\"count\":1}}", 1, NULL);
    json_t *job = json_deep_copy(json_object_get(r, "job"));
    json_t *pod = (json_t *)pod_spec_of(job);
    json_object_set_new(pod, "restartPolicyy", json_string("Never"));
    char ref[] = "#/definitions/io.k8s.api.batch.v1.Job", err[512] = "";
    json_t *schema = json_pack("{s:s}", "$ref", ref);
    assert_int_not_equal(oas_validate(swagger, schema, job, OAS_STRICT, err, sizeof err), 0);
    assert_non_null(strstr(err, "restartPolicyy"));
    json_decref(schema);
    json_decref(job);
    json_decref(r);
}

static void test_same_input_same_bytes(void **state)
{
    (void)state;
    const char *s = "{" BASE ",\"workers\":{\"count\":2},\"env\":{\"B\":\"1\",\"A\":\"2\"}}";
    json_t *a = render(example, s, 1, "us-west-2a");
    json_t *b = render(example, s, 1, "us-west-2a");
    char *da = json_dumps(a, JSON_COMPACT);
    char *db = json_dumps(b, JSON_COMPACT);
    assert_string_equal(da, db);
    /* The job's env in key order, after the contract's variables. */
    assert_true(strstr(da, "\"name\":\"A\"") < strstr(da, "\"name\":\"B\""));
    free(da);
    free(db);
    json_decref(a);
    json_decref(b);
}

static int setup(void **state)
{
    (void)state;
    char err[512] = "";
    json_error_t jerr;
    swagger = json_load_file(TY_K8S_OPENAPI_DIR "/swagger.json", 0, &jerr);
    if (!swagger) {
        fprintf(stderr, "swagger.json: %s\n", jerr.text);
        return -1;
    }
    if (oas_yaml_load_file(TY_CRDS_DIR "/volcano/batch.volcano.sh_jobs.yaml", &volcano_doc, err,
                           sizeof err)) {
        fprintf(stderr, "Volcano CRD: %s\n", err);
        return -1;
    }
    json_t *versions = json_object_get(json_object_get(volcano_doc, "spec"), "versions");
    size_t i;
    json_t *v;
    json_array_foreach(versions, i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "name")), "v1alpha1"))
            volcano_crd = json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
    }
    if (!volcano_crd)
        return -1;
    if (kube_profile_load(TY_EXAMPLE_PROFILE, &example, err, sizeof err)) {
        fprintf(stderr, "example profile: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(swagger);
    json_decref(volcano_doc);
    kube_profile_free(example);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_gpu_spot_zone),
        cmocka_unit_test(test_capacity_any_tolerates_every_capacity),
        cmocka_unit_test(test_volumes),
        cmocka_unit_test(test_env_contract),
        cmocka_unit_test(test_volcano),
        cmocka_unit_test(test_secrets),
        cmocka_unit_test(test_specs_that_cannot_run_name_their_field),
        cmocka_unit_test(test_names_are_valid_for_every_object),
        cmocka_unit_test(test_strict_validation_catches_an_unknown_field),
        cmocka_unit_test(test_same_input_same_bytes),
        cmocka_unit_test(test_avoid_nodes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
