/*
 * render.c - the Kubernetes objects of one attempt (see render.h for what they hold and why).
 *
 * Objects are built with jansson; a failed allocation anywhere is caught once, at the end, through
 * the `bad` flag every helper sets (jansson's *_new setters release the value they are given even
 * when they fail, so nothing leaks on the way).
 */
#include "scheduler/kube/render.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
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

/* ---- the attempt as the renderer reads it ---- */

/* One variable of the job's env: key[0..klen) = value; a secret's comes from the Secret. */
typedef struct kv {
    const char *key;
    size_t klen;
    const char *value;
    int secret;
} kv;

/*
 * What rendering reads, from a typed job (backend.h) or a normalized spec; strings borrowed
 * from either, arrays owned (view_free).
 */
typedef struct view {
    const char *job_id;
    unsigned attempt;
    const char *zone;          /* the placement's zone, or NULL */
    const char *const *avoid_nodes; /* nodes its pods must not run on (quarantined) */
    size_t navoid_nodes;
    const char *name;          /* the job's name, or NULL */
    const char *image;
    json_int_t count;
    const char *cpu, *memory;
    json_int_t gpus;
    const char *gpu_type;
    const char *capacity;      /* as asked: NULL or "any" for any */
    const char *want_zone;     /* as asked: NULL or "auto" for any */
    const char **argv;         /* command then args */
    size_t nargv, ncommand;
    kv *env;                   /* sorted by key */
    size_t nenv;
    size_t nsecret;            /* the entries of env that are secrets */
    backend_volume *vols;
    size_t nvols;
    json_int_t timeout_s;      /* 0: none */
    int has_ttl;
    json_int_t ttl;
} view;

static void view_free(view *v)
{
    free(v->argv);
    free(v->env);
    free(v->vols);
    memset(v, 0, sizeof *v);
}

static int cmp_kv(const void *a, const void *b)
{
    const kv *x = a, *y = b;
    int c = memcmp(x->key, y->key, x->klen < y->klen ? x->klen : y->klen);
    return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Allocates v's arrays for n argv strings, m variables and k volumes; -1 when out of memory. */
static int view_alloc(view *v, size_t n, size_t m, size_t k)
{
    v->argv = calloc(n ? n : 1, sizeof *v->argv);
    v->env = calloc(m ? m : 1, sizeof *v->env);
    v->vols = calloc(k ? k : 1, sizeof *v->vols);
    return v->argv && v->env && v->vols ? 0 : -1;
}

static ty_err view_of_job(const backend_job *job, const char *zone, view *v)
{
    size_t n = 0, m = 0;
    memset(v, 0, sizeof *v);
    while (job->argv && job->argv[n])
        n++;
    while (job->env && job->env[m])
        m++;
    if (view_alloc(v, n, m, job->nvolumes)) {
        view_free(v);
        return TY_ENOMEM;
    }
    v->job_id = job->id;
    v->attempt = job->attempt > 0 ? (unsigned)job->attempt : 0;
    v->zone = zone;
    v->name = job->name;
    v->image = job->image;
    v->count = job->world_size;
    v->cpu = job->cpu;
    v->memory = job->memory;
    v->gpus = job->gpus_per_rank;
    v->gpu_type = job->gpu_type;
    v->capacity = job->capacity;
    v->want_zone = job->zone;
    if (n)
        memcpy(v->argv, job->argv, n * sizeof *v->argv);
    v->nargv = n;
    v->ncommand = job->ncommand > 0 && (size_t)job->ncommand <= n ? (size_t)job->ncommand : n;
    for (size_t i = 0; i < m; i++) {
        const char *eq = strchr(job->env[i], '=');
        size_t klen = eq ? (size_t)(eq - job->env[i]) : strlen(job->env[i]);
        int secret = 0;
        for (size_t k = 0; job->secret_names && job->secret_names[k] && !secret; k++)
            secret = strlen(job->secret_names[k]) == klen &&
                     !memcmp(job->secret_names[k], job->env[i], klen);
        v->env[v->nenv++] = (kv){job->env[i], klen, eq ? eq + 1 : "", secret};
        v->nsecret += (size_t)secret;
    }
    qsort(v->env, v->nenv, sizeof *v->env, cmp_kv);
    if (job->nvolumes)
        memcpy(v->vols, job->volumes, job->nvolumes * sizeof *v->vols);
    v->nvols = job->nvolumes;
    v->timeout_s = job->timeout_s;
    v->has_ttl = job->has_ttl;
    v->ttl = job->ttl_seconds_after_finished;
    return TY_OK;
}

static ty_err view_of_spec(const json_t *spec, const char *job_id, unsigned attempt,
                           const char *zone, view *v)
{
    const json_t *cmd = json_object_get(spec, "command"), *args = json_object_get(spec, "args");
    const json_t *env = json_object_get(spec, "env"), *vols = json_object_get(spec, "volumes");
    const json_t *res = json_object_get(spec, "resources");
    const json_t *gpu = json_object_get(res, "gpu"), *pl = json_object_get(spec, "placement");
    const json_t *ttl = json_object_get(spec, "ttl_seconds_after_finished");
    memset(v, 0, sizeof *v);
    if (view_alloc(v, json_array_size(cmd) + json_array_size(args),
                   json_is_object(env) ? json_object_size(env) : 0, json_array_size(vols))) {
        view_free(v);
        return TY_ENOMEM;
    }
    v->job_id = job_id;
    v->attempt = attempt;
    v->zone = zone;
    v->name = json_string_value(json_object_get(spec, "name"));
    v->image = json_string_value(json_object_get(spec, "image"));
    v->count = json_integer_value(json_object_get(json_object_get(spec, "workers"), "count"));
    v->cpu = json_string_value(json_object_get(res, "cpu"));
    v->memory = json_string_value(json_object_get(res, "memory"));
    if (json_is_object(gpu)) {
        v->gpus = json_integer_value(json_object_get(gpu, "count"));
        v->gpu_type = json_string_value(json_object_get(gpu, "type"));
    }
    v->capacity = json_string_value(json_object_get(pl, "capacity"));
    v->want_zone = json_string_value(json_object_get(pl, "zone"));
    size_t i;
    const json_t *x;
    json_array_foreach(cmd, i, x) v->argv[v->nargv++] = json_string_value(x);
    v->ncommand = v->nargv;
    json_array_foreach(args, i, x) v->argv[v->nargv++] = json_string_value(x);
    const char *k;
    json_object_foreach((json_t *)env, k, x)
    {
        /* A secret ({"value": null, "secret": true} once stored) is named, never valued. */
        int secret = json_is_object(x) && json_is_true(json_object_get(x, "secret"));
        const char *val = secret ? json_string_value(json_object_get(x, "value"))
                                 : json_string_value(x);
        v->env[v->nenv++] = (kv){k, strlen(k), val ? val : "", secret};
        v->nsecret += (size_t)secret;
    }
    qsort(v->env, v->nenv, sizeof *v->env, cmp_kv);
    json_array_foreach(vols, i, x)
    {
        v->vols[v->nvols++] = (backend_volume){
            .claim = json_string_value(json_object_get(x, "claim")),
            .mount = json_string_value(json_object_get(x, "mount")),
            .read_only = json_is_true(json_object_get(x, "read_only")),
        };
    }
    v->timeout_s = json_integer_value(json_object_get(spec, "timeout_seconds"));
    v->has_ttl = json_is_integer(ttl);
    v->ttl = json_integer_value(ttl);
    return TY_OK;
}

/* ---- what a job needs of the cluster ---- */

typedef struct need {
    const char *image;
    json_int_t count;
    const kube_node_class *gpu;      /* NULL: no GPUs */
    json_int_t gpus;                 /* per rank */
    const kube_node_class *capacity; /* NULL: any capacity */
    const char *zone;                /* NULL: auto */
} need;

static ty_err read_need(const kube_profile *p, const view *v, need *n, char *path,
                        size_t pathlen, char *msg, size_t msglen)
{
    memset(n, 0, sizeof *n);
    n->image = v->image;
    if (!n->image || !*n->image)
        return fail(path, pathlen, msg, msglen, "$.image",
                    "is required to run on Kubernetes: the container image of every rank");
    n->count = v->count;
    if (n->count < 1 || n->count > 4096)
        return fail(path, pathlen, msg, msglen, "$.workers.count", "must be 1 to 4096");
    if (!v->cpu || !v->memory)
        return fail(path, pathlen, msg, msglen, "$.resources", "needs cpu and memory");
    n->gpus = v->gpus;
    if (n->gpus > 0) {
        n->gpu = kube_profile_gpu_type(p, v->gpu_type);
        if (!n->gpu)
            return fail(path, pathlen, msg, msglen, "$.resources.gpu.type",
                        "GPU type '%s' is not one of this cluster's (its profile's gpu_types)",
                        v->gpu_type ? v->gpu_type : "");
    }
    const char *cap = v->capacity;
    if (cap && strcmp(cap, "any") && p->ncapacity_types > 0) {
        n->capacity = kube_profile_capacity(p, cap);
        if (!n->capacity)
            return fail(path, pathlen, msg, msglen, "$.placement.capacity",
                        "capacity type '%s' is not one of this cluster's", cap);
    }
    const char *zone = v->want_zone;
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
    view v;
    if (!json_is_object(spec))
        return fail(path, pathlen, msg, msglen, "$", "the spec is not an object");
    if (view_of_spec(spec, NULL, 0, NULL, &v) != TY_OK)
        return TY_ENOMEM;
    ty_err e = read_need(p, &v, &n, path, pathlen, msg, msglen);
    view_free(&v);
    return e;
}

/* ---- pieces of the pod ---- */

static json_t *attempt_labels(const char *job_id, unsigned attempt)
{
    char a[16];
    snprintf(a, sizeof a, "%u", attempt);
    return json_pack("{s:s, s:s}", KUBE_LABEL_JOB_ID, job_id, KUBE_LABEL_ATTEMPT, a);
}

static json_t *metadata(const kube_profile *p, const char *name, const view *in, int with_ns)
{
    const char *job_name = in->name;
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

static json_t *env_list(const kube_profile *p, const view *in, const need *n,
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
        snprintf(buf, sizeof buf, "%s-0." KUBE_RANK_SERVICE, name);
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

    /* The job's own variables, in key order (the view's) so that a spec renders the same bytes
     * whatever order its object was built in. spec.c has already refused the reserved names. */
    for (size_t i = 0; i < in->nenv; i++) {
        const kv *e = &in->env[i];
        if (e->secret)
            push(env,
                 json_pack("{s:s#, s:{s:{s:s, s:s#}}}", "name", e->key, e->klen, "valueFrom",
                           "secretKeyRef", "name", name, "key", e->key, e->klen),
                 &bad);
        else
            push(env, json_pack("{s:s#, s:s}", "name", e->key, e->klen, "value", e->value),
                 &bad);
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

static json_t *affinity(const view *in, const need *n)
{
    json_t *aff = json_object();
    int bad = !aff;
    /* One term: its zone expression and the excluded nodes' field hold together (a term's
     * requirements are ANDed; several terms would be ORed). */
    json_t *term = json_object();
    bad |= !term;
    if (n->zone || in->zone) {
        const char *zone = in->zone ? in->zone : n->zone;
        set(term, "matchExpressions",
            json_pack("[{s:s, s:s, s:[s]}]", "key", ZONE_KEY, "operator", "In", "values", zone),
            &bad);
    }
    if (in->navoid_nodes) {
        json_t *names = json_array();
        for (size_t i = 0; i < in->navoid_nodes; i++)
            push(names, json_string(in->avoid_nodes[i]), &bad);
        set(term, "matchFields",
            json_pack("[{s:s, s:s, s:o}]", "key", "metadata.name", "operator", "NotIn",
                      "values", names),
            &bad);
    }
    if (json_object_size(term))
        set(aff, "nodeAffinity",
            json_pack("{s:{s:[o]}}", "requiredDuringSchedulingIgnoredDuringExecution",
                      "nodeSelectorTerms", term),
            &bad);
    else
        json_decref(term);
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

static json_t *pod_spec(const kube_profile *p, const view *in, const need *n, const char *name)
{
    const char *cpu = in->cpu;
    const char *mem = in->memory;
    json_t *pod = json_object();
    int bad = !pod;
    char buf[32];

    set(pod, "restartPolicy", json_string("Never"), &bad);
    if (!p->volcano)
        set(pod, "subdomain", json_string(KUBE_RANK_SERVICE), &bad);
    if (p->volcano) {
        json_int_t t = in->timeout_s;
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
    json_t *cmd = json_array(), *args = json_array();
    for (size_t i = 0; i < in->nargv; i++)
        push(i < in->ncommand ? cmd : args, json_string(in->argv[i]), &bad);
    set(c, "command", cmd, &bad);
    if (json_array_size(args))
        set(c, "args", args, &bad);
    else
        json_decref(args);
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
    /* A failed rank's last log lines become its terminated state's message: the worker's own
     * error report (a lost peer, an NCCL or CUDA error) reaches the backend with its end, and
     * the node ledger charges the right node (scheduler/quarantine.h). */
    set(c, "terminationMessagePolicy", json_string("FallbackToLogsOnError"), &bad);

    /* /dev/shm first: NCCL and data loaders need more than the runtime's 64 MiB default. */
    json_t *vols = json_array();
    json_t *mounts = json_array();
    push(vols, json_pack("{s:s, s:{s:s}}", "name", "dshm", "emptyDir", "medium", "Memory"), &bad);
    push(mounts, json_pack("{s:s, s:s}", "name", "dshm", "mountPath", "/dev/shm"), &bad);
    for (size_t i = 0; i < in->nvols; i++) {
        char vname[32];
        const char *claim = in->vols[i].claim;
        const char *mount = in->vols[i].mount;
        int ro = in->vols[i].read_only != 0;
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

static json_int_t ttl_of(const kube_profile *p, const view *in)
{
    if (p->ttl_seconds_after_finished >= 0)
        return p->ttl_seconds_after_finished;
    return in->has_ttl ? in->ttl : -1;
}

static json_t *batch_job(const kube_profile *p, const view *in, const need *n,
                         const char *name)
{
    json_t *job = json_object();
    json_t *js = json_object();
    int bad = !job || !js;
    json_int_t timeout = in->timeout_s;
    json_int_t ttl = ttl_of(p, in);

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
    /* The rank Service selects the pods by this label. */
    json_t *tmeta = metadata(p, NULL, in, 0);
    if (tmeta)
        set(json_object_get(tmeta, "labels"), KUBE_LABEL_SERVICE, json_string(KUBE_RANK_SERVICE),
            &bad);
    set(js, "template",
        json_pack("{s:o, s:o}", "metadata", tmeta, "spec", pod_spec(p, in, n, name)), &bad);
    set(job, "spec", js, &bad);
    if (bad) {
        json_decref(job);
        return NULL;
    }
    return job;
}

static json_t *volcano_job(const kube_profile *p, const view *in, const need *n,
                           const char *name)
{
    json_t *job = json_object();
    json_t *js = json_object();
    int bad = !job || !js;
    json_int_t ttl = ttl_of(p, in);

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

/* Renders the workload of v (consumed: freed here). */
static ty_err render_job(const kube_profile *p, view *v, json_t **out, char *msg, size_t msglen)
{
    char name[KUBE_NAME_MAX];
    char path[64];
    char why[200];
    need n;
    if (kube_render_name(v->job_id, v->attempt, name, sizeof name)) {
        view_free(v);
        return fail(NULL, 0, msg, msglen, "", "bad job id or attempt");
    }
    if (read_need(p, v, &n, path, sizeof path, why, sizeof why)) {
        view_free(v);
        return fail(NULL, 0, msg, msglen, "", "%s: %s", path, why);
    }
    json_t *job = p->volcano ? volcano_job(p, v, &n, name) : batch_job(p, v, &n, name);
    view_free(v);
    if (!job)
        return TY_ENOMEM;
    *out = job;
    return TY_OK;
}

ty_err kube_render_job(const kube_profile *p, const kube_render_in *in, json_t **out, char *msg,
                       size_t msglen)
{
    view v;
    if (!p || !in || !out)
        return TY_EINVAL;
    if (!json_is_object(in->spec))
        return fail(NULL, 0, msg, msglen, "", "$: the spec is not an object");
    if (view_of_spec(in->spec, in->job_id, in->attempt, in->zone, &v) != TY_OK)
        return TY_ENOMEM;
    return render_job(p, &v, out, msg, msglen);
}

ty_err kube_render_job_typed(const kube_profile *p, const backend_job *job, const char *zone,
                             const char *const *avoid_nodes, size_t navoid_nodes, json_t **out,
                             char *msg, size_t msglen)
{
    view v;
    if (!p || !job || !out)
        return TY_EINVAL;
    if (view_of_job(job, zone, &v) != TY_OK)
        return TY_ENOMEM;
    v.avoid_nodes = avoid_nodes;
    v.navoid_nodes = navoid_nodes;
    return render_job(p, &v, out, msg, msglen);
}

ty_err kube_render_rank_service(const kube_profile *p, json_t **out, char *msg, size_t msglen)
{
    if (!p || !out)
        return TY_EINVAL;
    if (p->volcano)
        return fail(NULL, 0, msg, msglen, "", "with Volcano, its svc plugin makes the Service");
    /* Headless (no virtual IP, no kube-proxy rules): a DNS name for each selected pod, before
     * it is ready, so that rank 0's name resolves while the others wait for it. */
    /* Labelled as deploy/ labels the server's own objects: `kubectl get all -l
     * app.kubernetes.io/name=trainyard` lists it with them. */
    json_t *svc = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s, s:b, s:{s:s}, s:[{s:s, s:i, s:i, s:s}]}}",
        "apiVersion", "v1", "kind", "Service", "metadata", "name", KUBE_RANK_SERVICE, "namespace",
        p->namespace, "labels", "app.kubernetes.io/name", "trainyard", "spec", "clusterIP", "None",
        "publishNotReadyAddresses", 1, "selector", KUBE_LABEL_SERVICE, KUBE_RANK_SERVICE, "ports",
        "name", "rendezvous", "port", p->master_port, "targetPort", p->master_port, "protocol",
        "TCP");
    if (!svc)
        return TY_ENOMEM;
    *out = svc;
    return TY_OK;
}

/* ---- the Secret ---- */

/* The ownerReference to the attempt's workload (a batch/v1 or Volcano Job named name). No
 * blockOwnerDeletion: it would need update rights on jobs/finalizers. */
static json_t *owner_ref(const kube_profile *p, const char *name, const char *uid)
{
    return json_pack("[{s:s, s:s, s:s, s:s, s:b}]", "apiVersion",
                     p->volcano ? "batch.volcano.sh/v1alpha1" : "batch/v1", "kind", "Job", "name",
                     name, "uid", uid, "controller", 1);
}

/* Renders the Secret of v (consumed: freed here), without its owner (kube_render_set_owner). */
static ty_err render_secret(const kube_profile *p, view *v, json_t **out, char *msg,
                            size_t msglen)
{
    char name[KUBE_NAME_MAX];
    ty_err e = TY_ENOMEM;
    json_t *meta = NULL, *data = NULL, *sec = NULL;
    if (v->nsecret == 0 || kube_render_name(v->job_id, v->attempt, name, sizeof name)) {
        e = fail(NULL, 0, msg, msglen, "",
                 v->nsecret == 0 ? "the attempt has no secret" : "bad job id or attempt");
        goto out;
    }
    int bad = 0;
    meta = metadata(p, name, v, 1);
    data = json_object();
    if (!meta || !data)
        goto out;
    for (size_t i = 0; i < v->nenv && !bad; i++) {
        const kv *x = &v->env[i];
        if (!x->secret)
            continue;
        size_t n = strlen(x->value);
        char *b = malloc(4 * ((n + 2) / 3) + 1);
        char key[256];
        if (!b || x->klen >= sizeof key) {
            free(b);
            bad = 1;
            break;
        }
        memcpy(key, x->key, x->klen);
        key[x->klen] = '\0';
        EVP_EncodeBlock((unsigned char *)b, (const unsigned char *)x->value, (int)n);
        set(data, key, json_string(b), &bad);
        OPENSSL_cleanse(b, 4 * ((n + 2) / 3) + 1);
        free(b);
    }
    sec = json_pack("{s:s, s:s, s:o, s:s, s:o}", "apiVersion", "v1", "kind", "Secret", "metadata",
                    meta, "type", "Opaque", "data", data);
    meta = data = NULL;
    if (!sec || bad)
        goto out;
    *out = sec;
    sec = NULL;
    e = TY_OK;
out:
    json_decref(meta);
    json_decref(data);
    json_decref(sec);
    view_free(v);
    return e;
}

ty_err kube_render_secret_typed(const kube_profile *p, const backend_job *job, json_t **out,
                                char *msg, size_t msglen)
{
    view v;
    if (!p || !job || !out)
        return TY_EINVAL;
    if (view_of_job(job, NULL, &v) != TY_OK)
        return TY_ENOMEM;
    return render_secret(p, &v, out, msg, msglen);
}

ty_err kube_render_set_owner(const kube_profile *p, json_t *obj, const char *job_uid)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    int bad = 0;
    if (!p || !json_is_object(meta) || !name || !job_uid || !*job_uid)
        return TY_EINVAL;
    set(meta, "ownerReferences", owner_ref(p, name, job_uid), &bad);
    return bad ? TY_ENOMEM : TY_OK;
}

int kube_render_has_secrets(const backend_job *job)
{
    if (!job || !job->env || !job->secret_names)
        return 0;
    for (size_t i = 0; job->env[i]; i++)
        for (size_t k = 0; job->secret_names[k]; k++) {
            size_t n = strlen(job->secret_names[k]);
            if (!strncmp(job->env[i], job->secret_names[k], n) && job->env[i][n] == '=')
                return 1;
        }
    return 0;
}
