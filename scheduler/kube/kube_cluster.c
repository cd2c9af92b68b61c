/*
 * kube_cluster.c - the cluster as the Kubernetes backend sees it, for people (backend.h
 * cluster()), the nodes it keeps gangs off (exclude_nodes(): quarantined), and the nodes the
 * profile does not describe.
 *
 * A node the profile does not know is a GPU node (allocatable nvidia.com/gpu > 0) whose
 * eks.amazonaws.com/nodegroup label names no profile node group, or whose labels match no
 * profile GPU type. The first is the mismatch of a profile written with other group names than
 * the cluster's (p4d-od-2a against p4d-ondemand-2a): placement counts such nodes as nodes and
 * does not count the profile's group, which no node carries, as able to grow beside them
 * (placement.h, kube_group_mismatch()); the group's entry in the view names the cluster's groups
 * seen in its place. Each such node is logged once when it appears (the first list at start
 * included) and counted in trainyard_cluster_unknown_nodes. CPU nodes are not checked: the
 * profile describes GPU capacity only.
 *
 * Locks: the inventory's lock is taken before kb->mu (placement's order), never after.
 */
#include <stdlib.h>
#include <string.h>

#include "common/ty_log.h"
#include "scheduler/kube/kube_int.h"

#define LABEL_PRODUCT "nvidia.com/gpu.product"

/* A label's value by key, or NULL: over a node's JSON labels or a kube_node's array. */
typedef const char *(*label_fn)(const void *ud, const char *key);

static const char *json_label(const void *ud, const char *key)
{
    return json_string_value(json_object_get((const json_t *)ud, key));
}

static const char *node_label(const void *ud, const char *key)
{
    const kube_node *n = ud;
    for (size_t i = 0; i < n->nlabels; i++)
        if (!strcmp(n->labels[i].key, key))
            return n->labels[i].value;
    return NULL;
}

static int class_matches(const kube_node_class *c, label_fn label, const void *ud)
{
    for (size_t i = 0; i < c->nlabels; i++) {
        const char *v = label(ud, c->labels[i].key);
        if (!v || strcmp(v, c->labels[i].value))
            return 0;
    }
    return 1;
}

typedef struct node_class {
    const char *gpu_type;  /* a profile GPU type, or NULL */
    const char *capacity;  /* a profile capacity type, or NULL */
    const char *group;     /* the group label, or NULL */
    int unknown_group, unknown_gpu;
} node_class;

static void classify(const kube_profile *p, label_fn label, const void *ud, int gpus,
                     node_class *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < p->ngpu_types && !out->gpu_type; i++)
        if (class_matches(&p->gpu_types[i], label, ud))
            out->gpu_type = p->gpu_types[i].name;
    for (size_t i = 0; i < p->ncapacity_types && !out->capacity; i++)
        if (class_matches(&p->capacity_types[i], label, ud))
            out->capacity = p->capacity_types[i].name;
    out->group = label(ud, KB_LABEL_GROUP);
    if (gpus <= 0)
        return;
    out->unknown_gpu = !out->gpu_type;
    if (out->group) {
        int known = 0;
        for (size_t g = 0; g < p->ngroups && !known; g++)
            known = !strcmp(p->groups[g].name, out->group);
        out->unknown_group = !known;
    }
}

void kb_note_node(kbe *kb, const json_t *old_obj, const json_t *node, int deleted)
{
    const json_t *any = node ? node : old_obj;
    const json_t *md = json_object_get(any, "metadata");
    const char *name = json_string_value(json_object_get(md, "name"));
    if (!name)
        return;
    if (deleted) {
        pthread_mutex_lock(&kb->mu);
        json_object_del(kb->unknown_logged, name); /* logged again if it comes back */
        pthread_mutex_unlock(&kb->mu);
        return;
    }
    const json_t *labels = json_object_get(md, "labels");
    node_class c;
    classify(kb->p, json_label, labels, kube_inv_node_gpus(node), &c);
    if (!c.unknown_group && !c.unknown_gpu)
        return;
    pthread_mutex_lock(&kb->mu);
    int seen = json_object_get(kb->unknown_logged, name) != NULL;
    if (!seen)
        json_object_set_new(kb->unknown_logged, name, json_true());
    pthread_mutex_unlock(&kb->mu);
    if (seen)
        return;
    const char *product = json_label(labels, LABEL_PRODUCT);
    if (c.unknown_group)
        TY_LOG(TY_LOG_WARN,
               "kube backend: a GPU node's node group is not in the cluster profile; placement "
               "counts the node but grows no group for it",
               "{s:s, s:s, s:s?}", "node", name, "node_group", c.group, "zone",
               json_label(labels, KB_LABEL_ZONE));
    if (c.unknown_gpu)
        TY_LOG(TY_LOG_WARN,
               "kube backend: a GPU node matches no GPU type of the cluster profile; no job is "
               "placed on it",
               "{s:s, s:s?}", "node", name, "gpu_product", product);
}

/* ---- exclusion -------------------------------------------------------------------------- */

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void kb_exclude_nodes(backend *b, const char *const *nodes, size_t n)
{
    kbe *kb = (kbe *)b;
    char **names = calloc(n ? n : 1, sizeof *names);
    json_t *set = json_object();
    size_t k = 0;
    for (size_t i = 0; names && set && i < n; i++) {
        if (!(names[k] = strdup(nodes[i])))
            break;
        json_object_set_new(set, names[k], json_true());
        k++;
    }
    if (!names || !set || k < n) {
        /* Out of memory: the previous set stays, so that no quarantined node comes back. */
        names_free(names, k);
        json_decref(set);
        return;
    }
    pthread_mutex_lock(&kb->mu);
    names_free(kb->excluded_names, kb->nexcluded);
    json_decref(kb->excluded);
    kb->excluded_names = names;
    kb->nexcluded = k;
    kb->excluded = set;
    kb->book_epoch++; /* nodes marked unschedulable in a kept scratch may be back */
    pthread_mutex_unlock(&kb->mu);
}

void kb_mark_excluded(kbe *kb, kube_node *nodes, size_t nnodes)
{
    if (!kb->nexcluded)
        return;
    for (size_t i = 0; i < nnodes; i++)
        if (json_object_get(kb->excluded, nodes[i].name))
            nodes[i].unschedulable = 1; /* a scratch copy: placement treats it as cordoned */
}

char **kb_excluded_copy(kbe *kb, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&kb->mu);
    size_t m = kb->nexcluded;
    char **copy = m ? calloc(m, sizeof *copy) : NULL;
    for (size_t i = 0; copy && i < m; i++) {
        if (!(copy[i] = strdup(kb->excluded_names[i]))) {
            names_free(copy, i);
            copy = NULL;
        }
    }
    pthread_mutex_unlock(&kb->mu);
    if (copy)
        *n = m;
    return copy;
}

void kb_excluded_free(char **names, size_t n)
{
    names_free(names, n);
}

/* ---- the cluster view ------------------------------------------------------------------- */

typedef struct cluster_ctx {
    kbe *kb;
    json_t *ours; /* node name -> GPUs of our ranks there */
    json_t *excluded; /* the excluded set as it was (exclude_nodes() replaces, never changes) */
    backend_cluster *out;
    size_t unknown_group, unknown_gpu; /* counts only (metrics) */
} cluster_ctx;

static void copy_str(char *dst, size_t len, const char *src)
{
    kb_fmt(dst, len, "%s", src ? src : "");
}

static ty_err cluster_on(void *ud, kube_inv_view *view)
{
    cluster_ctx *c = ud;
    const kube_profile *p = c->kb->p;
    backend_cluster *out = c->out;
    if (!out) { /* counting only */
        kbe *kb = c->kb;
        /* What the labels decide is kept until the view's shape changes (every /metrics
         * counts these); only nodes with GPUs can be unknown, and their GPUs are read now. */
        int fresh;
        unsigned char *unknown = kb_node_bytes_of(&kb->unknown, view, &fresh);
        if (!unknown)
            return TY_ENOMEM;
        if (fresh) {
            for (size_t i = 0; i < view->nnodes; i++) {
                node_class nc;
                classify(p, node_label, &view->nodes[i], 1, &nc);
                unknown[i] = (unsigned char)(nc.unknown_gpu | nc.unknown_group << 1);
            }
            kb_node_bytes_done(&kb->unknown, view);
        }
        for (size_t i = 0; i < view->nnodes; i++) {
            if (view->nodes[i].gpus_allocatable <= 0)
                continue;
            c->unknown_gpu += unknown[i] & 1;
            c->unknown_group += unknown[i] >> 1 & 1;
        }
        return TY_OK;
    }
    kube_inventory inv = {view->nodes, view->nnodes, view->groups, view->ngroups, NULL, NULL};
    out->nodes = calloc(view->nnodes ? view->nnodes : 1, sizeof *out->nodes);
    out->groups = calloc(p->ngroups ? p->ngroups : 1, sizeof *out->groups);
    if (!out->nodes || !out->groups)
        return TY_ENOMEM;
    for (size_t i = 0; i < view->nnodes; i++) {
        const kube_node *n = &view->nodes[i];
        backend_node *o = &out->nodes[out->nnodes++];
        node_class nc;
        classify(p, node_label, n, n->gpus_allocatable, &nc);
        copy_str(o->name, sizeof o->name, n->name);
        copy_str(o->zone, sizeof o->zone, n->zone);
        copy_str(o->gpu_type, sizeof o->gpu_type,
                 n->gpus_allocatable > 0 ? nc.gpu_type : NULL);
        copy_str(o->gpu_product, sizeof o->gpu_product, node_label(n, LABEL_PRODUCT));
        copy_str(o->group, sizeof o->group, nc.group);
        copy_str(o->capacity, sizeof o->capacity, nc.capacity);
        o->ready = n->ready;
        o->cordoned = n->unschedulable;
        o->gpus_allocatable = n->gpus_allocatable;
        int ours = (int)json_integer_value(json_object_get(c->ours, n->name));
        o->gpus_trainyard = ours;
        o->gpus_others = n->gpus_requested > ours ? n->gpus_requested - ours : 0;
        o->quarantined = json_object_get(c->excluded, n->name) != NULL;
        o->gpus_quarantined = o->quarantined ? n->gpus_allocatable : 0;
        o->unknown_group = nc.unknown_group;
        o->unknown_gpu = nc.unknown_gpu;
    }
    for (size_t g = 0; g < p->ngroups; g++) {
        const kube_node_group *pg = &p->groups[g];
        backend_group *o = &out->groups[out->ngroups++];
        copy_str(o->name, sizeof o->name, pg->name);
        copy_str(o->zone, sizeof o->zone, pg->zone);
        copy_str(o->gpu_type, sizeof o->gpu_type, pg->gpu_type);
        copy_str(o->capacity, sizeof o->capacity, pg->capacity);
        o->gpus_per_node = pg->gpus_per_node;
        o->max_size = pg->max_size;
        for (size_t k = 0; k < view->ngroups; k++)
            if (!strcmp(view->groups[k].name, pg->name))
                o->size = view->groups[k].size;
        const char *names[BACKEND_GROUP_MISMATCH];
        size_t nm = kube_group_mismatch(p, &inv, pg, names, BACKEND_GROUP_MISMATCH);
        for (size_t k = 0; k < nm; k++)
            copy_str(o->mismatch[k], sizeof o->mismatch[k], names[k]);
        o->nmismatch = (int)nm;
    }
    return TY_OK;
}

ty_err kb_cluster(backend *b, backend_cluster *out)
{
    kbe *kb = (kbe *)b;
    memset(out, 0, sizeof *out);
    json_t *ours = json_object();
    if (!ours)
        return TY_ENOMEM;
    /* Our ranks' GPUs per node: the ranks of live attempts that have a node and have not
     * ended (the inventory counts their pods among every tenant's). */
    pthread_mutex_lock(&kb->mu);
    for (const backend_attempt *a = kb->attempts; a; a = a->next) {
        if (!a->live || !a->gpus_per_rank)
            continue;
        for (int r = 0; r < a->world; r++) {
            const krank *k = &a->ranks[r];
            if (!k->node[0] || k->ended)
                continue;
            json_int_t have = json_integer_value(json_object_get(ours, k->node));
            json_object_set_new(ours, k->node, json_integer(have + a->gpus_per_rank));
        }
    }
    json_t *excluded = json_incref(kb->excluded);
    pthread_mutex_unlock(&kb->mu);
    cluster_ctx c = {kb, ours, excluded, out, 0, 0};
    ty_err e = kube_inv_read(kb->inv, cluster_on, &c);
    json_decref(ours);
    json_decref(excluded);
    if (e != TY_OK)
        backend_cluster_clear(out);
    return e;
}

ty_err kb_unknown_counts(kbe *kb, size_t *unknown_group, size_t *unknown_gpu)
{
    cluster_ctx c = {kb, NULL, NULL, NULL, 0, 0};
    ty_err e = kube_inv_read(kb->inv, cluster_on, &c);
    *unknown_group = c.unknown_group;
    *unknown_gpu = c.unknown_gpu;
    return e;
}
