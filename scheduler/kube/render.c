/*
 * render.c - the Kubernetes objects of one attempt (see render.h for what they hold and why).
 *
 * Objects are built with jansson; a failed allocation anywhere is caught once, at the end, through
 * the `bad` flag every helper sets (jansson's *_new setters release the value they are given even
 * when they fail, so nothing leaks on the way).
 */
#include "scheduler/kube/render.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZONE_KEY "topology.kubernetes.io/zone"
#define INDEX_ANNOTATION "batch.kubernetes.io/job-completion-index"
#define VOLCANO_INDEX_ANNOTATION "volcano.sh/task-index"
#define VOLCANO_TASK "rank"
#define CONTAINER "trainer"
/* Largest pod index a name leaves room for: workers.count is at most 4096. */
#define MAX_INDEX_DIGITS 4

static ty_err fail(char *path, size_t pathlen, char *msg, size_t msglen, const char *where,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static ty_err fail(char *path, size_t pathlen, char *msg, size_t msglen, const char *where,
                   const char *fmt, ...)
{
    va_list ap;
    if (path && pathlen)
        snprintf(path, pathlen, "%s", where);
    if (msg && msglen) {
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return TY_EINVAL;
}

static void set(json_t *obj, const char *key, json_t *val, int *bad)
{
    if (json_object_set_new(obj, key, val))
        *bad = 1;
}

static void push(json_t *arr, json_t *val, int *bad)
{
    if (json_array_append_new(arr, val))
        *bad = 1;
}

ty_err kube_render_name(const char *job_id, unsigned attempt, char *out, size_t outlen)
{
    size_t n = job_id ? strlen(job_id) : 0;
    if (n == 0 || n > 26 || attempt == 0)
        return TY_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!((job_id[i] >= 'a' && job_id[i] <= 'z') || (job_id[i] >= '0' && job_id[i] <= '9')))
            return TY_EINVAL;
    int w = snprintf(out, outlen, "ty-%s-a%u", job_id, attempt);
    /* A pod's hostname is "<name>-rank-<index>" at the longest (Volcano): it must stay a label. */
    if (w < 0 || (size_t)w >= outlen || w + 6 + MAX_INDEX_DIGITS > 63)
        return TY_EINVAL;
    return TY_OK;
}

/* ---- what a spec needs of the cluster ---- */

typedef struct need {
    const char *image;
    json_int_t count;
    const kube_node_class *gpu;      /* NULL: no GPUs */
    json_int_t gpus;                 /* per rank */
    const kube_node_class *capacity; /* NULL: any capacity */
    const char *zone;                /* NULL: auto */
} need;

static ty_err read_need(const kube_profile *p, const json_t *spec, need *n, char *path,
                        size_t pathlen, char *msg, size_t msglen)
{
    memset(n, 0, sizeof *n);
    if (!json_is_object(spec))
        return fail(path, pathlen, msg, msglen, "$", "the spec is not an object");
    n->image = json_string_value(json_object_get(spec, "image"));
    if (!n->image || !*n->image)
        return fail(path, pathlen, msg, msglen, "$.image",
                    "is required to run on Kubernetes: the container image of every rank");
    n->count = json_integer_value(json_object_get(json_object_get(spec, "workers"), "count"));
    if (n->count < 1 || n->count > 4096)
        return fail(path, pathlen, msg, msglen, "$.workers.count", "must be 1 to 4096");
    const json_t *res = json_object_get(spec, "resources");
    if (!json_is_string(json_object_get(res, "cpu")) ||
        !json_is_string(json_object_get(res, "memory")))
        return fail(path, pathlen, msg, msglen, "$.resources", "needs cpu and memory");
    const json_t *gpu = json_object_get(res, "gpu");
    if (json_is_object(gpu)) {
        const char *type = json_string_value(json_object_get(gpu, "type"));
        n->gpus = json_integer_value(json_object_get(gpu, "count"));
        if (n->gpus > 0) {
            n->gpu = kube_profile_gpu_type(p, type);
            if (!n->gpu)
                return fail(path, pathlen, msg, msglen, "$.resources.gpu.type",
                            "GPU type '%s' is not one of this cluster's (its profile's gpu_types)",
                            type ? type : "");
        }
    }
    const json_t *pl = json_object_get(spec, "placement");
    const char *cap = json_string_value(json_object_get(pl, "capacity"));
    if (cap && strcmp(cap, "any") && p->ncapacity_types > 0) {
        n->capacity = kube_profile_capacity(p, cap);
        if (!n->capacity)
            return fail(path, pathlen, msg, msglen, "$.placement.capacity",
                        "capacity type '%s' is not one of this cluster's", cap);
    }
    const char *zone = json_string_value(json_object_get(pl, "zone"));
    if (zone && strcmp(zone, "auto")) {
        int known = p->nzones == 0;
        for (size_t i = 0; i < p->nzones; i++)
            known |= !strcmp(p->zones[i], zone);
        if (!known)
            return fail(path, pathlen, msg, msglen, "$.placement.zone",
                        "zone '%s' is not one of this cluster's", zone);
        n->zone = zone;
    }
    return TY_OK;
}

ty_err kube_render_check(const kube_profile *p, const json_t *spec, char *path, size_t pathlen,
                         char *msg, size_t msglen)
{
    need n;
    return read_need(p, spec, &n, path, pathlen, msg, msglen);
}

/* ---- pieces of the pod ---- */

static json_t *attempt_labels(const char *job_id, unsigned attempt)
{
    char a[16];
    snprintf(a, sizeof a, "%u", attempt);
    return json_pack("{s:s, s:s}", KUBE_LABEL_JOB_ID, job_id, KUBE_LABEL_ATTEMPT, a);
}

static json_t *metadata(const kube_profile *p, const char *name, const kube_render_in *in,
                        int with_ns)
{
    const char *job_name = json_string_value(json_object_get(in->spec, "name"));
    json_t *m = json_object();
    int bad = !m;
    if (name)
        set(m, "name", json_string(name), &bad);
    if (with_ns)
        set(m, "namespace", json_string(p->namespace), &bad);
    set(m, "labels", attempt_labels(in->job_id, in->attempt), &bad);
    if (job_name)
        set(m, "annotations", json_pack("{s:s}", KUBE_ANNOTATION_JOB_NAME, job_name), &bad);
    if (bad) {
        json_decref(m);
        return NULL;
    }
    return m;
}

static void env_value(json_t *env, const char *name, const char *value, int *bad)
{
    push(env, json_pack("{s:s, s:s}", "name", name, "value", value), bad);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static json_t *env_list(const kube_profile *p, const kube_render_in *in, const need *n,
                        const char *name)
{
    char buf[512];
    json_t *env = json_array();
    int bad = !env;
    const char *index_key = p->volcano ? VOLCANO_INDEX_ANNOTATION : INDEX_ANNOTATION;

    snprintf(buf, sizeof buf, "metadata.annotations['%s']", index_key);
    push(env,
         json_pack("{s:s, s:{s:{s:s}}}", "name", "RANK", "valueFrom", "fieldRef", "fieldPath", buf),
         &bad);
    snprintf(buf, sizeof buf, "%lld", (long long)n->count);
    env_value(env, "WORLD_SIZE", buf, &bad);
    env_value(env, "LOCAL_RANK", "0", &bad);
    env_value(env, "LOCAL_WORLD_SIZE", "1", &bad);
    if (p->volcano)
        snprintf(buf, sizeof buf, "%s-" VOLCANO_TASK "-0.%s", name, name);
    else
        snprintf(buf, sizeof buf, "%s-0.%s", name, name);
    env_value(env, "MASTER_ADDR", buf, &bad);
    snprintf(buf, sizeof buf, "%d", p->master_port);
    env_value(env, "MASTER_PORT", buf, &bad);
    env_value(env, "TRAINYARD_JOB_ID", in->job_id, &bad);
    snprintf(buf, sizeof buf, "%u", in->attempt);
    env_value(env, "TRAINYARD_ATTEMPT", buf, &bad);
    if (p->server_url)
        env_value(env, "TRAINYARD_SERVER", p->server_url, &bad);
    env_value(env, "TRAINYARD_DATA_DIR", p->data_dir, &bad);
    snprintf(buf, sizeof buf, "%s/%s", p->output_dir, in->job_id);
    env_value(env, "TRAINYARD_OUTPUT_DIR", buf, &bad);
    snprintf(buf, sizeof buf, "%s/%s", p->checkpoint_dir, in->job_id);
    env_value(env, "TRAINYARD_CHECKPOINT_DIR", buf, &bad);

    /* The job's own variables, in key order so that a spec renders the same bytes whatever
     * order its object was built in. spec.c has already refused the reserved names. */
    const json_t *user = json_object_get(in->spec, "env");
    size_t nuser = json_is_object(user) ? json_object_size(user) : 0;
    if (nuser) {
        const char **keys = calloc(nuser, sizeof *keys);
        const char *k;
        const json_t *v;
        size_t i = 0;
        if (!keys) {
            json_decref(env);
            return NULL;
        }
        json_object_foreach((json_t *)user, k, v) keys[i++] = k;
        qsort(keys, nuser, sizeof *keys, cmp_str);
        for (i = 0; i < nuser; i++) {
            const char *val = json_string_value(json_object_get(user, keys[i]));
            env_value(env, keys[i], val ? val : "", &bad);
        }
        free(keys);
    }
    if (bad) {
        json_decref(env);
        return NULL;
    }
    return env;
}

static void add_tolerations(json_t *tol, const kube_node_class *c, int *bad)
{
    for (size_t i = 0; c && i < c->ntaints; i++) {
        const kube_taint *t = &c->taints[i];
        push(tol,
             json_pack("{s:s, s:s, s:s, s:s}", "key", t->key, "operator", "Equal", "value",
                       t->value, "effect", t->effect),
             bad);
    }
}

static void add_selector(json_t *sel, const kube_node_class *c, int *bad)
{
    for (size_t i = 0; c && i < c->nlabels; i++)
        set(sel, c->labels[i].key, json_string(c->labels[i].value), bad);
}

static json_t *affinity(const kube_render_in *in, const need *n)
{
    json_t *aff = json_object();
    int bad = !aff;
    if (n->zone || in->zone) {
        const char *zone = in->zone ? in->zone : n->zone;
        set(aff, "nodeAffinity",
            json_pack("{s:{s:[{s:[{s:s, s:s, s:[s]}]}]}}",
                      "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms",
                      "matchExpressions", "key", ZONE_KEY, "operator", "In", "values", zone),
            &bad);
    }
    set(aff, "podAffinity",
        json_pack("{s:[{s:{s:o}, s:s}]}", "requiredDuringSchedulingIgnoredDuringExecution",
                  "labelSelector", "matchLabels", attempt_labels(in->job_id, in->attempt),
                  "topologyKey", ZONE_KEY),
        &bad);
    if (bad) {
        json_decref(aff);
        return NULL;
    }
    return aff;
}

static json_t *pod_spec(const kube_profile *p, const kube_render_in *in, const need *n,
                        const char *name)
{
    const json_t *spec = in->spec;
    const json_t *res = json_object_get(spec, "resources");
    const char *cpu = json_string_value(json_object_get(res, "cpu"));
    const char *mem = json_string_value(json_object_get(res, "memory"));
    json_t *pod = json_object();
    int bad = !pod;
    char buf[32];

    set(pod, "restartPolicy", json_string("Never"), &bad);
    if (!p->volcano)
        set(pod, "subdomain", json_string(name), &bad);
    if (p->volcano) {
        json_int_t t = json_integer_value(json_object_get(spec, "timeout_seconds"));
        if (t > 0)
            set(pod, "activeDeadlineSeconds", json_integer(t), &bad);
    }
    /* No Service variables: the server's own Service "trainyard" would put TRAINYARD_PORT and
     * friends beside the contract's TRAINYARD_ variables. */
    set(pod, "enableServiceLinks", json_false(), &bad);
    if (p->termination_grace_seconds >= 0)
        set(pod, "terminationGracePeriodSeconds", json_integer(p->termination_grace_seconds), &bad);
    if (p->service_account)
        set(pod, "serviceAccountName", json_string(p->service_account), &bad);
    if (p->priority_class)
        set(pod, "priorityClassName", json_string(p->priority_class), &bad);
    if (p->npull_secrets) {
        json_t *ps = json_array();
        for (size_t i = 0; i < p->npull_secrets; i++)
            push(ps, json_pack("{s:s}", "name", p->pull_secrets[i]), &bad);
        set(pod, "imagePullSecrets", ps, &bad);
    }

    json_t *sel = json_object();
    add_selector(sel, n->gpu, &bad);
    add_selector(sel, n->capacity, &bad);
    if (json_object_size(sel))
        set(pod, "nodeSelector", sel, &bad);
    else
        json_decref(sel);
    set(pod, "affinity", affinity(in, n), &bad);

    json_t *tol = json_array();
    add_tolerations(tol, n->gpu, &bad);
    if (n->capacity)
        add_tolerations(tol, n->capacity, &bad);
    else
        for (size_t i = 0; i < p->ncapacity_types; i++)
            add_tolerations(tol, &p->capacity_types[i], &bad);
    if (json_array_size(tol))
        set(pod, "tolerations", tol, &bad);
    else
        json_decref(tol);

    /* The container. */
    json_t *c = json_object();
    set(c, "name", json_string(CONTAINER), &bad);
    set(c, "image", json_string(n->image), &bad);
    set(c, "command", json_deep_copy(json_object_get(spec, "command")), &bad);
    const json_t *args = json_object_get(spec, "args");
    if (json_array_size(args))
        set(c, "args", json_deep_copy(args), &bad);
    set(c, "env", env_list(p, in, n, name), &bad);
    set(c, "ports",
        json_pack("[{s:s, s:i, s:s}]", "name", "rendezvous", "containerPort", p->master_port,
                  "protocol", "TCP"),
        &bad);
    json_t *limits = json_pack("{s:s}", "memory", mem);
    if (n->gpu) {
        snprintf(buf, sizeof buf, "%lld", (long long)n->gpus);
        set(limits, "nvidia.com/gpu", json_string(buf), &bad);
    }
    set(c, "resources",
        json_pack("{s:{s:s, s:s}, s:o}", "requests", "cpu", cpu, "memory", mem, "limits", limits),
        &bad);

    /* /dev/shm first: NCCL and data loaders need more than the runtime's 64 MiB default. */
    json_t *vols = json_array();
    json_t *mounts = json_array();
    push(vols, json_pack("{s:s, s:{s:s}}", "name", "dshm", "emptyDir", "medium", "Memory"), &bad);
    push(mounts, json_pack("{s:s, s:s}", "name", "dshm", "mountPath", "/dev/shm"), &bad);
    const json_t *v;
    size_t i;
    json_array_foreach(json_object_get(spec, "volumes"), i, v)
    {
        char vname[32];
        const char *claim = json_string_value(json_object_get(v, "claim"));
        const char *mount = json_string_value(json_object_get(v, "mount"));
        int ro = json_is_true(json_object_get(v, "read_only"));
        if (!claim || !mount) {
            bad = 1;
            break;
        }
        snprintf(vname, sizeof vname, "vol-%zu", i);
        push(vols,
             json_pack("{s:s, s:{s:s, s:b}}", "name", vname, "persistentVolumeClaim", "claimName",
                       claim, "readOnly", ro),
             &bad);
        push(mounts,
             json_pack("{s:s, s:s, s:b}", "name", vname, "mountPath", mount, "readOnly", ro), &bad);
    }
    set(c, "volumeMounts", mounts, &bad);
    set(pod, "containers", json_pack("[o]", c), &bad);
    set(pod, "volumes", vols, &bad);
    if (bad) {
        json_decref(pod);
        return NULL;
    }
    return pod;
}

static json_int_t ttl_of(const kube_profile *p, const json_t *spec)
{
    if (p->ttl_seconds_after_finished >= 0)
        return p->ttl_seconds_after_finished;
    const json_t *t = json_object_get(spec, "ttl_seconds_after_finished");
    return json_is_integer(t) ? json_integer_value(t) : -1;
}

static json_t *batch_job(const kube_profile *p, const kube_render_in *in, const need *n,
                         const char *name)
{
    json_t *job = json_object();
    json_t *js = json_object();
    int bad = !job || !js;
    json_int_t timeout = json_integer_value(json_object_get(in->spec, "timeout_seconds"));
    json_int_t ttl = ttl_of(p, in->spec);

    set(job, "apiVersion", json_string("batch/v1"), &bad);
    set(job, "kind", json_string("Job"), &bad);
    set(job, "metadata", metadata(p, name, in, 1), &bad);
    set(js, "completionMode", json_string("Indexed"), &bad);
    set(js, "completions", json_integer(n->count), &bad);
    set(js, "parallelism", json_integer(n->count), &bad);
    set(js, "backoffLimit", json_integer(0), &bad);
    if (timeout > 0)
        set(js, "activeDeadlineSeconds", json_integer(timeout), &bad);
    if (ttl >= 0)
        set(js, "ttlSecondsAfterFinished", json_integer(ttl), &bad);
    set(js, "template",
        json_pack("{s:o, s:o}", "metadata", metadata(p, NULL, in, 0), "spec",
                  pod_spec(p, in, n, name)),
        &bad);
    set(job, "spec", js, &bad);
    if (bad) {
        json_decref(job);
        return NULL;
    }
    return job;
}

static json_t *volcano_job(const kube_profile *p, const kube_render_in *in, const need *n,
                           const char *name)
{
    json_t *job = json_object();
    json_t *js = json_object();
    int bad = !job || !js;
    json_int_t ttl = ttl_of(p, in->spec);

    set(job, "apiVersion", json_string("batch.volcano.sh/v1alpha1"), &bad);
    set(job, "kind", json_string("Job"), &bad);
    set(job, "metadata", metadata(p, name, in, 1), &bad);
    set(js, "schedulerName", json_string("volcano"), &bad);
    set(js, "minAvailable", json_integer(n->count), &bad);
    set(js, "queue", json_string(p->volcano_queue), &bad);
    /* No retries and no policies: a failed member ends the Volcano Job and Trainyard decides
     * whether the gang runs again, with a new attempt. */
    set(js, "maxRetry", json_integer(0), &bad);
    if (ttl >= 0)
        set(js, "ttlSecondsAfterFinished", json_integer(ttl), &bad);
    if (p->priority_class)
        set(js, "priorityClassName", json_string(p->priority_class), &bad);
    /* svc: the headless Service and each pod's hostname/subdomain; not-ready addresses published
     * so rank 0's name resolves before it is ready; no NetworkPolicy of its own. */
    set(js, "plugins",
        json_pack("{s:[s, s]}", "svc", "--publish-not-ready-addresses=true",
                  "--disable-network-policy=true"),
        &bad);
    set(js, "tasks",
        json_pack("[{s:s, s:I, s:I, s:{s:o, s:o}}]", "name", VOLCANO_TASK, "replicas",
                  (json_int_t)n->count, "minAvailable", (json_int_t)n->count, "template",
                  "metadata", metadata(p, NULL, in, 0), "spec", pod_spec(p, in, n, name)),
        &bad);
    set(job, "spec", js, &bad);
    if (bad) {
        json_decref(job);
        return NULL;
    }
    return job;
}

ty_err kube_render_job(const kube_profile *p, const kube_render_in *in, json_t **out, char *msg,
                       size_t msglen)
{
    char name[KUBE_NAME_MAX];
    char path[64];
    char why[200];
    need n;
    if (!p || !in || !out)
        return TY_EINVAL;
    if (kube_render_name(in->job_id, in->attempt, name, sizeof name))
        return fail(NULL, 0, msg, msglen, "", "bad job id or attempt");
    if (read_need(p, in->spec, &n, path, sizeof path, why, sizeof why))
        return fail(NULL, 0, msg, msglen, "", "%s: %s", path, why);
    json_t *job = p->volcano ? volcano_job(p, in, &n, name) : batch_job(p, in, &n, name);
    if (!job)
        return TY_ENOMEM;
    *out = job;
    return TY_OK;
}

ty_err kube_render_service(const kube_profile *p, const kube_render_in *in, const char *job_uid,
                           json_t **out, char *msg, size_t msglen)
{
    char name[KUBE_NAME_MAX];
    if (!p || !in || !out)
        return TY_EINVAL;
    if (p->volcano)
        return fail(NULL, 0, msg, msglen, "", "with Volcano, its svc plugin makes the Service");
    if (!job_uid || !*job_uid)
        return fail(NULL, 0, msg, msglen, "", "the Service needs the created Job's uid");
    if (kube_render_name(in->job_id, in->attempt, name, sizeof name))
        return fail(NULL, 0, msg, msglen, "", "bad job id or attempt");

    json_t *meta = metadata(p, name, in, 1);
    int bad = !meta;
    /* Owned by the Job, so that deleting the Job (Background propagation) deletes the Service.
     * No blockOwnerDeletion: it would need update rights on jobs/finalizers. */
    set(meta, "ownerReferences",
        json_pack("[{s:s, s:s, s:s, s:s, s:b}]", "apiVersion", "batch/v1", "kind", "Job", "name",
                  name, "uid", job_uid, "controller", 1),
        &bad);
    json_t *svc = json_pack(
        "{s:s, s:s, s:o, s:{s:s, s:b, s:o, s:[{s:s, s:i, s:i, s:s}]}}", "apiVersion", "v1", "kind",
        "Service", "metadata", meta, "spec", "clusterIP", "None", "publishNotReadyAddresses", 1,
        "selector", attempt_labels(in->job_id, in->attempt), "ports", "name", "rendezvous", "port",
        p->master_port, "targetPort", p->master_port, "protocol", "TCP");
    if (!svc || bad) {
        json_decref(svc);
        return TY_ENOMEM;
    }
    *out = svc;
    return TY_OK;
}
