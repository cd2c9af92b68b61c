/*
 * inventory.c - nodes and the GPUs in use, kept change by change (see inventory.h).
 *
 * Nodes live in an array (so that a view is one memcpy) with a name -> index map beside it;
 * what the pods request (GPUs, CPU, memory, ephemeral storage, one pod slot each) is kept per
 * node name, whether or not the node is known yet, and each counted pod remembers what it added
 * so that its next change or its deletion takes exactly that back. The maps are jansson objects:
 * hash tables keyed by string, with deletion.
 */
#include "scheduler/kube/inventory.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_quantity.h"
#include "scheduler/kube/render.h"

#define GPU "nvidia.com/gpu"
#define LABEL_ZONE "topology.kubernetes.io/zone"
#define LABEL_GROUP "eks.amazonaws.com/nodegroup"

/* What the inventory keeps of a node: a copy of it, and arrays pointing into the copy. */
typedef struct inode {
    json_t *obj;
    kube_label *labels;
    kube_taint *taints;
    int group; /* index into kube_inv.groups, -1 for none */
} inode;

struct kube_inv {
    pthread_mutex_t mu;
    char **groups;
    kube_group_size *sizes;
    size_t ngroups;
    inode *nodes;     /* n entries, parallel to flat */
    kube_node *flat;  /* the nodes as placement reads them */
    size_t n, cap;
    unsigned long shape; /* kube_inv_view.shape */
    kube_node *scratch; /* the copy a view hands out */
    size_t scratch_cap;
    unsigned long gen;  /* changes whenever a node or what is counted on one changes */
    /* kube_inv_with_kept(): whose the scratch is, as it left it, and of which gen and epoch */
    const void *kept_key;
    unsigned long kept_gen, kept_epoch;
    json_t *index;    /* node name -> index into nodes */
    json_t *used;     /* node name -> [GPUs, CPU m, memory, ephemeral, pods] of the counted pods
                         bound there */
    json_t *pods;     /* "namespace/name" -> [node name, GPUs, CPU m, memory, ephemeral, job id]
                         of each counted pod */
    json_t *jobs;     /* job id (trainyard.io/job-id) -> how many of its pods are counted */
    json_t *ended;    /* "namespace/name/uid" of pods seen ended or deleted -> true */
    char **ring;      /* the same keys, oldest first from ring_at: INV_ENDED_MAX at most */
    size_t ring_at, nring;
};

/* How many ended pods the inventory remembers: a late change from the second informer comes
 * within moments of the first one's, long before this many other pods end. */
#define INV_ENDED_MAX 4096

static const char *str_at(const json_t *obj, const char *a, const char *b)
{
    const json_t *v = json_object_get(obj, a);
    return json_string_value(b ? json_object_get(v, b) : v);
}

/* No node has more GPUs than this; a count above it is clamped, so that a hostile or broken
 * object cannot wrap the sums of a pod or a node. */
#define GPU_COUNT_MAX 65536

/* A count as Kubernetes writes it: a JSON integer or a quantity string ("8"), clamped to
 * 0..GPU_COUNT_MAX. */
static int quantity(const json_t *q)
{
    double v = 0;
    if (json_is_integer(q))
        v = (double)json_integer_value(q);
    else {
        const char *s = json_string_value(q);
        if (!s || ty_quantity_parse(s, strlen(s), &v) != TY_OK)
            return 0;
    }
    if (!(v > 0))
        return 0;
    return v >= GPU_COUNT_MAX ? GPU_COUNT_MAX : (int)v;
}

/* A container's nvidia.com/gpu: its limit, else its request (extended resources have both
 * equal when both are given). */
static int container_gpus(const json_t *c)
{
    const json_t *res = json_object_get(c, "resources");
    int q = quantity(json_object_get(json_object_get(res, "limits"), GPU));
    return q ? q : quantity(json_object_get(json_object_get(res, "requests"), GPU));
}

int kube_inv_pod_gpus(const json_t *pod)
{
    const json_t *spec = json_object_get(pod, "spec"), *c;
    const json_t *slim = json_object_get(pod, KUBE_INV_SLIM_GPUS);
    int sum = 0, init = 0;
    size_t i;
    if (json_is_integer(slim))
        return (int)json_integer_value(slim);
    json_array_foreach(json_object_get(spec, "containers"), i, c) {
        sum += container_gpus(c);
        if (sum > GPU_COUNT_MAX)
            sum = GPU_COUNT_MAX;
    }
    /* Init containers run one at a time before the others: the scheduler counts the largest
     * of them against the containers' sum (v1.26 has no restartable init containers). */
    json_array_foreach(json_object_get(spec, "initContainers"), i, c)
        if (container_gpus(c) > init)
            init = container_gpus(c);
    return sum > init ? sum : init;
}

/* No request is counted above this (an exabyte, a billion cores): sums cannot wrap. */
#define RES_MAX ((int64_t)1 << 60)

/* A quantity in units of 10^-scale, clamped to 0..RES_MAX. */
static int64_t scaled(const json_t *q, int scale)
{
    int64_t v = 0;
    if (json_is_integer(q)) {
        v = json_integer_value(q);
        for (int i = 0; i < scale && v > 0 && v < RES_MAX; i++)
            v *= 10;
    } else {
        const char *s = json_string_value(q);
        if (!s || ty_quantity_scaled(s, strlen(s), scale, &v) != TY_OK)
            return 0;
    }
    return v <= 0 ? 0 : v > RES_MAX ? RES_MAX : v;
}

/* A container's requests of cpu, memory and ephemeral-storage: its request, else its limit (the
 * apiserver defaults a request to the limit). */
static void container_requests(const json_t *c, kube_res *out)
{
    const json_t *res = json_object_get(c, "resources");
    const json_t *req = json_object_get(res, "requests"), *lim = json_object_get(res, "limits");
    static const char *const names[3] = {"cpu", "memory", "ephemeral-storage"};
    int64_t *dst[3] = {&out->cpu_millis, &out->memory_bytes, &out->ephemeral_bytes};
    for (int i = 0; i < 3; i++) {
        const json_t *q = json_object_get(req, names[i]);
        *dst[i] = scaled(q ? q : json_object_get(lim, names[i]), i == 0 ? 3 : 0);
    }
}

static int64_t add_clamped(int64_t a, int64_t b)
{
    return a > RES_MAX - b ? RES_MAX : a + b;
}

void kube_inv_pod_requests(const json_t *pod, kube_res *out)
{
    const json_t *slim = json_object_get(pod, KUBE_INV_SLIM_REQUESTS);
    memset(out, 0, sizeof *out);
    out->pods = 1;
    if (json_is_array(slim)) {
        out->cpu_millis = json_integer_value(json_array_get(slim, 0));
        out->memory_bytes = json_integer_value(json_array_get(slim, 1));
        out->ephemeral_bytes = json_integer_value(json_array_get(slim, 2));
        return;
    }
    const json_t *spec = json_object_get(pod, "spec"), *c;
    size_t i;
    kube_res one;
    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        container_requests(c, &one);
        out->cpu_millis = add_clamped(out->cpu_millis, one.cpu_millis);
        out->memory_bytes = add_clamped(out->memory_bytes, one.memory_bytes);
        out->ephemeral_bytes = add_clamped(out->ephemeral_bytes, one.ephemeral_bytes);
    }
    /* Init containers run one at a time first: each counts against the containers' sum. */
    json_array_foreach(json_object_get(spec, "initContainers"), i, c)
    {
        container_requests(c, &one);
        if (one.cpu_millis > out->cpu_millis)
            out->cpu_millis = one.cpu_millis;
        if (one.memory_bytes > out->memory_bytes)
            out->memory_bytes = one.memory_bytes;
        if (one.ephemeral_bytes > out->ephemeral_bytes)
            out->ephemeral_bytes = one.ephemeral_bytes;
    }
    /* The RuntimeClass's overhead comes on top (spec.overhead, set at admission). */
    const json_t *ov = json_object_get(spec, "overhead");
    out->cpu_millis = add_clamped(out->cpu_millis, scaled(json_object_get(ov, "cpu"), 3));
    out->memory_bytes = add_clamped(out->memory_bytes, scaled(json_object_get(ov, "memory"), 0));
    out->ephemeral_bytes =
        add_clamped(out->ephemeral_bytes, scaled(json_object_get(ov, "ephemeral-storage"), 0));
}

/* obj[key] = v (a string held, not copied) or null when v is not a string; -1 without memory. */
static int set_str(json_t *obj, const char *key, const json_t *v)
{
    return json_object_set_new(obj, key,
                               json_is_string(v) ? json_incref((json_t *)v) : json_null());
}

json_t *kube_inv_pod_slim(const json_t *pod)
{
    static const char *const keys[] = {"namespace", "name", "uid", "resourceVersion"};
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *job = json_object_get(json_object_get(md, "labels"), KUBE_LABEL_JOB_ID);
    kube_res r;
    kube_inv_pod_requests(pod, &r);
    int gpus = kube_inv_pod_gpus(pod);
    /* Built member by member (json_pack() parses its format on every call, every watch event
     * of every pod), holding the pod's own strings rather than copies. */
    json_t *slim = json_object(), *m = json_object(), *spec = json_object(),
           *status = json_object(), *req = json_array(), *labels = NULL;
    int bad = !slim || !m || !spec || !status || !req;
    if (bad) {
        json_decref(slim);
        json_decref(m);
        json_decref(spec);
        json_decref(status);
        json_decref(req);
        return NULL;
    }
    /* Each set takes its value, even when it fails. */
    bad = json_object_set_new(slim, "metadata", m) != 0;
    bad |= json_object_set_new(slim, "spec", spec) != 0;
    bad |= json_object_set_new(slim, "status", status) != 0;
    bad |= json_object_set_new(slim, KUBE_INV_SLIM_GPUS, json_integer(gpus)) != 0;
    bad |= json_object_set_new(slim, KUBE_INV_SLIM_REQUESTS, req) != 0;
    for (size_t k = 0; !bad && k < sizeof keys / sizeof keys[0]; k++)
        bad = set_str(m, keys[k], json_object_get(md, keys[k])) != 0;
    bad = bad ||
          set_str(spec, "nodeName", json_object_get(json_object_get(pod, "spec"), "nodeName")) ||
          set_str(status, "phase", json_object_get(json_object_get(pod, "status"), "phase")) ||
          json_array_append_new(req, json_integer((json_int_t)r.cpu_millis)) ||
          json_array_append_new(req, json_integer((json_int_t)r.memory_bytes)) ||
          json_array_append_new(req, json_integer((json_int_t)r.ephemeral_bytes));
    if (!bad && json_is_string(job))
        bad = !(labels = json_object()) || json_object_set_new(m, "labels", labels) ||
              json_object_set_new(labels, KUBE_LABEL_JOB_ID, json_incref((json_t *)job));
    if (bad) {
        json_decref(slim);
        return NULL;
    }
    return slim;
}

int kube_inv_job_pods(const kube_inv_view *view, const char *job_id)
{
    return (int)json_integer_value(json_object_get(view->inv->jobs, job_id));
}

/* Adds delta to how many of job's pods are counted; under mu. */
static ty_err add_job(kube_inv *inv, const char *job, int delta)
{
    if (!job || !*job)
        return TY_OK;
    json_int_t now = json_integer_value(json_object_get(inv->jobs, job)) + delta;
    if (now <= 0)
        json_object_del(inv->jobs, job);
    else if (json_object_set_new(inv->jobs, job, json_integer(now)))
        return TY_ENOMEM;
    return TY_OK;
}

void kube_inv_node_allocatable(const json_t *node, kube_res *out)
{
    const json_t *a = json_object_get(json_object_get(node, "status"), "allocatable");
    out->cpu_millis = scaled(json_object_get(a, "cpu"), 3);
    out->memory_bytes = scaled(json_object_get(a, "memory"), 0);
    out->ephemeral_bytes = scaled(json_object_get(a, "ephemeral-storage"), 0);
    out->pods = scaled(json_object_get(a, "pods"), 0);
}

int kube_inv_node_ready(const json_t *node)
{
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(json_object_get(node, "status"), "conditions"), i, c)
    {
        const char *type = str_at(c, "type", NULL), *status = str_at(c, "status", NULL);
        if (type && !strcmp(type, "Ready"))
            return status && !strcmp(status, "True");
    }
    return 0;
}

int kube_inv_node_gpus(const json_t *node)
{
    return quantity(
        json_object_get(json_object_get(json_object_get(node, "status"), "allocatable"), GPU));
}

static void inode_clear(inode *in)
{
    json_decref(in->obj);
    free(in->labels);
    free(in->taints);
    memset(in, 0, sizeof *in);
}

/* Parses node into *in and *out (whose strings point into in->obj). */
static ty_err inode_make(const kube_inv *inv, const json_t *node, inode *in, kube_node *out)
{
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    in->group = -1;
    /* Only what placement reads is kept (a node's status, images included, can be large):
     * {"name", "labels", "taints"}; the facts below are read from the node itself. The labels
     * and taints are the node's own, shared (never changed: see kube_inv_node()), not copies:
     * 3,000 nodes' labels were 7 MiB again beside the informer's. */
    const json_t *md = json_object_get(node, "metadata");
    json_t *lab = json_incref(json_object_get(md, "labels"));
    json_t *tai = json_incref(json_object_get(json_object_get(node, "spec"), "taints"));
    const char *name = json_string_value(json_object_get(md, "name"));
    /* json_pack steals lab and tai, even when it fails */
    in->obj = json_pack("{s:s?, s:o?, s:o?}", "name", name, "labels", lab, "taints", tai);
    if (!in->obj)
        return TY_ENOMEM;
    const json_t *labels = json_object_get(in->obj, "labels");
    const json_t *taints = json_object_get(in->obj, "taints");
    size_t nl = json_object_size(labels), nt = json_array_size(taints), i = 0, k;
    in->labels = calloc(nl ? nl : 1, sizeof *in->labels);
    in->taints = calloc(nt ? nt : 1, sizeof *in->taints);
    if (!in->labels || !in->taints) {
        inode_clear(in);
        return TY_ENOMEM;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)labels, key, v)
    {
        if (json_is_string(v))
            in->labels[i++] = (kube_label){(char *)key, (char *)json_string_value(v)};
    }
    out->labels = in->labels;
    out->nlabels = i;
    i = 0;
    json_array_foreach(taints, k, v)
    {
        const char *tk = str_at(v, "key", NULL);
        if (!tk)
            continue;
        const char *tv = str_at(v, "value", NULL), *te = str_at(v, "effect", NULL);
        in->taints[i++] = (kube_taint){(char *)tk, (char *)(tv ? tv : ""), (char *)(te ? te : "")};
    }
    out->taints = in->taints;
    out->ntaints = i;
    out->name = str_at(in->obj, "name", NULL);
    out->zone = str_at(labels, LABEL_ZONE, NULL);
    out->gpus_allocatable = kube_inv_node_gpus(node);
    kube_inv_node_allocatable(node, &out->allocatable);
    out->ready = kube_inv_node_ready(node);
    out->unschedulable = json_is_true(json_object_get(json_object_get(node, "spec"),
                                                      "unschedulable"));
    const char *group = str_at(labels, LABEL_GROUP, NULL);
    for (size_t g = 0; group && g < inv->ngroups; g++)
        if (!strcmp(inv->groups[g], group))
            in->group = (int)g;
    out->stray_group = in->group < 0 ? group : NULL;
    return TY_OK;
}

ty_err kube_inv_new(const char *const *groups, size_t ngroups, kube_inv **out)
{
    kube_inv *inv = calloc(1, sizeof *inv);
    if (!inv)
        return TY_ENOMEM;
    pthread_mutex_init(&inv->mu, NULL);
    inv->index = json_object();
    inv->used = json_object();
    inv->pods = json_object();
    inv->ended = json_object();
    inv->jobs = json_object();
    inv->ring = calloc(INV_ENDED_MAX, sizeof *inv->ring);
    inv->groups = calloc(ngroups ? ngroups : 1, sizeof *inv->groups);
    inv->sizes = calloc(ngroups ? ngroups : 1, sizeof *inv->sizes);
    int ok = inv->index && inv->used && inv->pods && inv->ended && inv->jobs && inv->ring &&
             inv->groups &&
             inv->sizes;
    for (size_t g = 0; ok && g < ngroups; g++) {
        if (!(inv->groups[g] = strdup(groups[g])))
            ok = 0;
        inv->ngroups = g + 1;
    }
    if (!ok) {
        kube_inv_free(inv);
        return TY_ENOMEM;
    }
    *out = inv;
    return TY_OK;
}

void kube_inv_free(kube_inv *inv)
{
    if (!inv)
        return;
    for (size_t i = 0; i < inv->n; i++)
        inode_clear(&inv->nodes[i]);
    for (size_t g = 0; g < inv->ngroups; g++)
        free(inv->groups[g]);
    free(inv->groups);
    free(inv->sizes);
    free(inv->nodes);
    free(inv->flat);
    free(inv->scratch);
    json_decref(inv->index);
    json_decref(inv->used);
    json_decref(inv->pods);
    json_decref(inv->ended);
    json_decref(inv->jobs);
    for (size_t i = 0; inv->ring && i < INV_ENDED_MAX; i++)
        free(inv->ring[i]);
    free(inv->ring);
    pthread_mutex_destroy(&inv->mu);
    free(inv);
}

/* What the counted pods bound to node request, [GPUs, CPU m, memory, ephemeral, pods]. */
static void used_on(const kube_inv *inv, const char *node, int *gpus, kube_res *r)
{
    const json_t *u = json_object_get(inv->used, node);
    *gpus = (int)json_integer_value(json_array_get(u, 0));
    r->cpu_millis = json_integer_value(json_array_get(u, 1));
    r->memory_bytes = json_integer_value(json_array_get(u, 2));
    r->ephemeral_bytes = json_integer_value(json_array_get(u, 3));
    r->pods = json_integer_value(json_array_get(u, 4));
}

/* Adds (sign 1) or takes back (-1) what a pod requests on node (known or not); under mu. */
static ty_err add_used(kube_inv *inv, const char *node, int sign, int gpus, const kube_res *d)
{
    inv->gen++;
    int g;
    kube_res r;
    used_on(inv, node, &g, &r);
    g += sign * gpus;
    r.cpu_millis += sign * d->cpu_millis;
    r.memory_bytes += sign * d->memory_bytes;
    r.ephemeral_bytes += sign * d->ephemeral_bytes;
    r.pods += sign * d->pods;
    if (r.pods <= 0) {
        json_object_del(inv->used, node);
        g = 0;
        memset(&r, 0, sizeof r);
    } else if (json_object_set_new(inv->used, node,
                                   json_pack("[i, I, I, I, I]", g, (json_int_t)r.cpu_millis,
                                             (json_int_t)r.memory_bytes,
                                             (json_int_t)r.ephemeral_bytes, (json_int_t)r.pods))) {
        return TY_ENOMEM;
    }
    const json_t *idx = json_object_get(inv->index, node);
    if (idx) {
        kube_node *n = &inv->flat[json_integer_value(idx)];
        n->gpus_requested = g > 0 ? g : 0;
        n->requested = r;
    }
    return TY_OK;
}

ty_err kube_inv_node(kube_inv *inv, const json_t *old, const json_t *node)
{
    const char *name = str_at(node ? node : old, "metadata", "name");
    if (!name)
        return TY_OK;
    inode in;
    kube_node flat;
    if (node && inode_make(inv, node, &in, &flat) != TY_OK)
        return TY_ENOMEM;
    ty_err e = TY_OK;
    pthread_mutex_lock(&inv->mu);
    inv->gen++;
    const json_t *idx = json_object_get(inv->index, name);
    if (!node) {
        if (idx) {
            size_t i = (size_t)json_integer_value(idx), last = inv->n - 1;
            inode_clear(&inv->nodes[i]);
            if (i != last) {
                inv->nodes[i] = inv->nodes[last];
                inv->flat[i] = inv->flat[last];
                json_object_set_new(inv->index, inv->flat[i].name, json_integer((json_int_t)i));
            }
            inv->n--;
            inv->shape++;
            json_object_del(inv->index, name); /* name points into a freed copy no more */
        }
    } else if (idx) {
        size_t i = (size_t)json_integer_value(idx);
        if (!json_equal(inv->nodes[i].obj, in.obj))
            inv->shape++; /* its labels or taints changed */
        inode_clear(&inv->nodes[i]);
        inv->nodes[i] = in;
        used_on(inv, flat.name, &flat.gpus_requested, &flat.requested);
        inv->flat[i] = flat;
    } else {
        if (inv->n == inv->cap) {
            size_t cap = inv->cap ? inv->cap * 2 : 64;
            inode *nodes = realloc(inv->nodes, cap * sizeof *nodes);
            if (nodes)
                inv->nodes = nodes;
            kube_node *f = nodes ? realloc(inv->flat, cap * sizeof *f) : NULL;
            if (f) {
                inv->flat = f;
                inv->cap = cap;
            }
        }
        if (inv->n < inv->cap &&
            !json_object_set_new(inv->index, flat.name, json_integer((json_int_t)inv->n))) {
            used_on(inv, flat.name, &flat.gpus_requested, &flat.requested);
            inv->nodes[inv->n] = in;
            inv->flat[inv->n] = flat;
            inv->n++;
            inv->shape++;
        } else {
            inode_clear(&in);
            e = TY_ENOMEM;
        }
    }
    pthread_mutex_unlock(&inv->mu);
    return e;
}

/* Remembers that the pod of key `uk` ended or was deleted (under inv->mu); the oldest memory
 * goes when INV_ENDED_MAX are kept. */
static void remember_ended(kube_inv *inv, const char *uk)
{
    if (json_object_get(inv->ended, uk))
        return;
    char *k = strdup(uk);
    if (!k || json_object_set_new(inv->ended, uk, json_true())) {
        free(k);
        return; /* without memory: a late change may count the pod again for a moment */
    }
    size_t slot = (inv->ring_at + inv->nring) % INV_ENDED_MAX;
    if (inv->nring == INV_ENDED_MAX) {
        json_object_del(inv->ended, inv->ring[inv->ring_at]);
        free(inv->ring[inv->ring_at]);
        inv->ring_at = (inv->ring_at + 1) % INV_ENDED_MAX;
        slot = (inv->ring_at + inv->nring - 1) % INV_ENDED_MAX;
    } else {
        inv->nring++;
    }
    inv->ring[slot] = k;
}

/*
 * Two informers report the same pods (ours and the cluster's bound pods), each in order but
 * not in step with the other: a change one of them delivers late must not undo what the other
 * reported. A pod's life only goes forward (unbound, bound, ended or deleted; its node and its
 * GPUs never change once bound), so a change for a pod seen ended or deleted (same uid) is
 * late and ignored, as is an unbound state for a pod counted bound.
 */
ty_err kube_inv_pod(kube_inv *inv, const json_t *old, const json_t *pod, int *freed)
{
    const json_t *any = pod ? pod : old;
    const char *ns = str_at(any, "metadata", "namespace"), *name = str_at(any, "metadata", "name");
    const char *uid = str_at(any, "metadata", "uid");
    char key[512], uk[640];
    snprintf(key, sizeof key, "%s/%s", ns ? ns : "", name ? name : "");
    snprintf(uk, sizeof uk, "%s/%s", key, uid ? uid : "");
    const char *node = pod ? str_at(pod, "spec", "nodeName") : NULL;
    const char *phase = pod ? str_at(pod, "status", "phase") : NULL;
    const char *job = pod ? json_string_value(json_object_get(
                                json_object_get(json_object_get(pod, "metadata"), "labels"),
                                KUBE_LABEL_JOB_ID))
                          : NULL;
    int ended = !pod || (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
    int counted = node && *node && !ended;
    int gpus = 0;
    kube_res req = {0};
    if (counted) {
        gpus = kube_inv_pod_gpus(pod);
        kube_inv_pod_requests(pod, &req);
    }
    ty_err e = TY_OK;
    if (freed)
        *freed = 0;
    pthread_mutex_lock(&inv->mu);
    if (json_object_get(inv->ended, uk))
        goto out; /* late: it ended already */
    const json_t *prev = json_object_get(inv->pods, key);
    if (ended)
        remember_ended(inv, uk);
    else if (prev && !(node && *node))
        goto out; /* late: it was bound already */
    if (prev) {
        const char *pn = json_string_value(json_array_get(prev, 0));
        int pg = (int)json_integer_value(json_array_get(prev, 1));
        kube_res pr = {json_integer_value(json_array_get(prev, 2)),
                       json_integer_value(json_array_get(prev, 3)),
                       json_integer_value(json_array_get(prev, 4)), 1};
        int same = counted && !strcmp(pn, node);
        if (same && pg == gpus && pr.cpu_millis == req.cpu_millis &&
            pr.memory_bytes == req.memory_bytes && pr.ephemeral_bytes == req.ephemeral_bytes)
            goto out; /* counted as it is */
        /* What came free: its GPUs, or (a pod without) its pod slot and requests. */
        if (freed)
            *freed = same ? (pg > gpus ? pg - gpus : 0) : pg > 0 ? pg : 1;
        add_used(inv, pn, -1, pg, &pr);
        add_job(inv, json_string_value(json_array_get(prev, 5)), -1);
        json_object_del(inv->pods, key);
    }
    if (counted) {
        if (json_object_set_new(inv->pods, key,
                                json_pack("[s, i, I, I, I, s]", node, gpus,
                                          (json_int_t)req.cpu_millis,
                                          (json_int_t)req.memory_bytes,
                                          (json_int_t)req.ephemeral_bytes, job ? job : "")) ||
            add_used(inv, node, 1, gpus, &req) || add_job(inv, job, 1))
            e = TY_ENOMEM;
    }
out:
    pthread_mutex_unlock(&inv->mu);
    return e;
}

/* inv->sizes: how many nodes each profile group has now; under mu. */
static void count_group_sizes(kube_inv *inv)
{
    for (size_t g = 0; g < inv->ngroups; g++)
        inv->sizes[g] = (kube_group_size){inv->groups[g], 0};
    for (size_t i = 0; i < inv->n; i++)
        if (inv->nodes[i].group >= 0)
            inv->sizes[inv->nodes[i].group].size++;
}

/* Copies the nodes into the scratch (unless keep and they are there as key's last call left
 * them) and calls fn; under inv->mu. */
static ty_err with_view(kube_inv *inv, const void *key, unsigned long epoch, kube_inv_fn fn,
                        void *ud)
{
    int kept = key && inv->kept_key == key && inv->kept_gen == inv->gen &&
               inv->kept_epoch == epoch;
    if (!kept) {
        if (inv->scratch_cap < inv->n) {
            kube_node *s = realloc(inv->scratch, inv->n * sizeof *s);
            if (!s) {
                inv->kept_key = NULL;
                return TY_ENOMEM;
            }
            inv->scratch = s;
            inv->scratch_cap = inv->n;
        }
        if (inv->n)
            memcpy(inv->scratch, inv->flat, inv->n * sizeof *inv->scratch);
        count_group_sizes(inv);
    }
    kube_inv_view view = {inv->scratch, inv->n, inv->sizes, inv->ngroups, inv, inv->shape, kept};
    ty_err e = fn(ud, &view);
    inv->kept_key = key;
    inv->kept_gen = inv->gen;
    inv->kept_epoch = epoch;
    return e;
}

ty_err kube_inv_with(kube_inv *inv, kube_inv_fn fn, void *ud)
{
    pthread_mutex_lock(&inv->mu);
    ty_err e = with_view(inv, NULL, 0, fn, ud);
    pthread_mutex_unlock(&inv->mu);
    return e;
}

ty_err kube_inv_read(kube_inv *inv, kube_inv_fn fn, void *ud)
{
    pthread_mutex_lock(&inv->mu);
    /* The sizes depend on the nodes alone: a kept view's are the same while it stays kept. */
    count_group_sizes(inv);
    kube_inv_view view = {inv->flat, inv->n, inv->sizes, inv->ngroups, inv, inv->shape, 0};
    ty_err e = fn(ud, &view);
    pthread_mutex_unlock(&inv->mu);
    return e;
}

ty_err kube_inv_with_kept(kube_inv *inv, const void *key, unsigned long epoch, kube_inv_fn fn,
                          void *ud)
{
    pthread_mutex_lock(&inv->mu);
    ty_err e = with_view(inv, key, epoch, fn, ud);
    pthread_mutex_unlock(&inv->mu);
    return e;
}
