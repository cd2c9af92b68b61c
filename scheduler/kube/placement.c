/*
 * placement.c - the zone decision (see placement.h for the rules).
 *
 * One pass over the nodes fills a per-zone tally (rank slots, free GPUs, eligible nodes, and the
 * slots each resource alone would leave); the decision and the reason a person reads are both
 * made from the tally, so what the message says is exactly what the decision saw.
 */
#include "scheduler/kube/placement.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_quantity.h"

#define GPU_PRODUCT_LABEL "nvidia.com/gpu.product"

/* The resources a rank is counted by, each alone (slots a node has for it). */
enum { RES_GPU, RES_PODS, RES_CPU, RES_MEMORY, RES_EPHEMERAL, RES_N };

static const char *const res_names[RES_N] = {"GPUs", "pod slots", "CPU", "memory",
                                             "ephemeral storage"};

typedef struct tally {
    const char *zone;
    long slots;                       /* ranks that fit on the zone's eligible nodes */
    long free_gpus;                   /* free GPUs on the zone's eligible nodes */
    long nodes;                       /* eligible nodes */
    long by[RES_N];                   /* ranks that would fit counting that resource alone */
    int grow;                         /* new nodes needed (-1: the groups cannot grow enough) */
    const char *used[KUBE_NEEDS_MAX]; /* the groups that must grow, first ones */
    int counts[KUBE_NEEDS_MAX];       /* and by how many nodes each */
    int ngrown;                       /* groups that must grow */
    const char *mismatch;             /* a group not grown: the cluster names it otherwise */
    const char *mismatch_by;          /* and the name the cluster's nodes carry */
} tally;

typedef struct req {
    const kube_profile *p;
    const kube_gang *g;
    const kube_node_class *gpu;
    const kube_node_class *cap; /* NULL: any capacity */
    const unsigned char *match; /* NULL, or class_ok() of each node, computed before */
} req;

static ty_err bad(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ty_err bad(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return TY_EINVAL;
}

/* Ranks of `per` each that the rest of alloc holds; LONG_MAX when the rank asks none. */
static long room_for(int64_t alloc, int64_t used, int64_t per)
{
    if (per <= 0)
        return LONG_MAX;
    int64_t left = alloc - used;
    if (left <= 0)
        return 0;
    int64_t k = left / per;
    return k > LONG_MAX ? LONG_MAX : (long)k;
}

/* The slots node n has for ranks of g, per resource alone. */
static void node_room(const kube_node *n, const kube_gang *g, long by[RES_N])
{
    by[RES_GPU] = room_for(n->gpus_allocatable, n->gpus_requested, g->gpus_per_rank);
    by[RES_PODS] = room_for(n->allocatable.pods, n->requested.pods, 1);
    by[RES_CPU] = room_for(n->allocatable.cpu_millis, n->requested.cpu_millis, g->cpu_millis);
    by[RES_MEMORY] =
        room_for(n->allocatable.memory_bytes, n->requested.memory_bytes, g->memory_bytes);
    by[RES_EPHEMERAL] =
        room_for(n->allocatable.ephemeral_bytes, n->requested.ephemeral_bytes, g->ephemeral_bytes);
}

/* Ranks of g that node n holds: the least of what each resource leaves. */
static long node_slots(const kube_node *n, const kube_gang *g)
{
    long by[RES_N], k = LONG_MAX;
    node_room(n, g, by);
    for (int i = 0; i < RES_N; i++)
        if (by[i] < k)
            k = by[i];
    return k;
}

int kube_rank_fits(const kube_node *n, const kube_gang *g)
{
    return n && g && node_slots(n, g) >= 1;
}

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* snprintf where cutting the text short is intended. */
static void say(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int has_label(const kube_node *n, const char *key, const char *value)
{
    for (size_t i = 0; i < n->nlabels; i++)
        if (!strcmp(n->labels[i].key, key))
            return !strcmp(n->labels[i].value, value);
    return 0;
}

static int class_tolerates(const kube_node_class *c, const kube_taint *t)
{
    for (size_t i = 0; c && i < c->ntaints; i++)
        if (!strcmp(c->taints[i].key, t->key) && !strcmp(c->taints[i].value, t->value) &&
            !strcmp(c->taints[i].effect, t->effect))
            return 1;
    return 0;
}

/* Whether the pods render.c makes for this gang tolerate taint t. */
static int tolerated(const req *r, const kube_taint *t)
{
    if (strcmp(t->effect, "NoSchedule") && strcmp(t->effect, "NoExecute"))
        return 1; /* PreferNoSchedule only steers the scheduler */
    if (r->gpu && class_tolerates(r->gpu, t))
        return 1;
    if (r->cap)
        return class_tolerates(r->cap, t);
    for (size_t i = 0; i < r->p->ncapacity_types; i++)
        if (class_tolerates(&r->p->capacity_types[i], t))
            return 1;
    return 0;
}

/* What labels and taints alone decide of a node's eligibility for r's GPU type and capacity. */
static int class_ok(const req *r, const kube_node *n)
{
    for (size_t i = 0; i < n->ntaints; i++) {
        if (!strcmp(n->taints[i].key, KUBE_RECLAIM_TAINT))
            return 0;
        if (!tolerated(r, &n->taints[i]))
            return 0;
    }
    for (size_t i = 0; r->gpu && i < r->gpu->nlabels; i++)
        if (!has_label(n, r->gpu->labels[i].key, r->gpu->labels[i].value))
            return 0;
    for (size_t i = 0; r->cap && i < r->cap->nlabels; i++)
        if (!has_label(n, r->cap->labels[i].key, r->cap->labels[i].value))
            return 0;
    return 1;
}

/* Node i of the nodes r's match was computed for. */
static int eligible(const req *r, const kube_node *n, size_t i)
{
    if (!n->ready || n->unschedulable || !n->zone)
        return 0;
    return r->match ? r->match[i] : class_ok(r, n);
}

/* The classes gang g's pods belong to; TY_EINVAL (msg says why) when the profile lacks one. */
static ty_err resolve(const kube_profile *p, const kube_gang *g, req *r, char *msg, size_t msglen)
{
    if (g->gpus_per_rank > 0 && !(r->gpu = kube_profile_gpu_type(p, g->gpu_type)))
        return bad(msg, msglen, "GPU type '%s' is not in the cluster profile",
                   g->gpu_type ? g->gpu_type : "");
    if (g->capacity && strcmp(g->capacity, "any") && p->ncapacity_types > 0 &&
        !(r->cap = kube_profile_capacity(p, g->capacity)))
        return bad(msg, msglen, "capacity type '%s' is not in the cluster profile", g->capacity);
    return TY_OK;
}

ty_err kube_class_match(const kube_profile *p, const kube_node *nodes, size_t nnodes,
                        const kube_gang *g, unsigned char *match)
{
    char msg[160];
    req r = {p, g, NULL, NULL, NULL};
    if (!p || !g || (nnodes && (!nodes || !match)))
        return TY_EINVAL;
    ty_err e = resolve(p, g, &r, msg, sizeof msg);
    for (size_t i = 0; e == TY_OK && i < nnodes; i++)
        match[i] = (unsigned char)class_ok(&r, &nodes[i]);
    return e;
}

static int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] && !strcmp(list[i], s))
            return 1;
    return 0;
}

static int cmp_zone(const void *a, const void *b)
{
    return strcmp(((const tally *)a)->zone, ((const tally *)b)->zone);
}

/* The zones to consider, in preference order. *out is new (free()). */
static ty_err candidate_zones(const req *r, const kube_inventory *inv, tally **out, size_t *nout)
{
    const kube_gang *g = r->g;
    /* The nodes' zones are only read when the profile lists none. */
    size_t cap = (r->p->nzones ? r->p->nzones : inv->nnodes) + 1, n = 0;
    tally *t = calloc(cap, sizeof *t);
    if (!t)
        return TY_ENOMEM;
    if (g->zone && strcmp(g->zone, "auto")) {
        t[n++].zone = g->zone;
    } else if (r->p->nzones) {
        for (size_t i = 0; i < r->p->nzones; i++)
            if (!in_list(g->avoid, g->navoid, r->p->zones[i]))
                t[n++].zone = r->p->zones[i];
    } else {
        /* No zones in the profile: those the nodes are in, by name. */
        for (size_t i = 0; i < inv->nnodes; i++) {
            const char *z = inv->nodes[i].zone;
            int seen = !z || in_list(g->avoid, g->navoid, z);
            for (size_t j = 0; !seen && j < n; j++)
                seen = !strcmp(t[j].zone, z);
            if (!seen)
                t[n++].zone = z;
        }
        qsort(t, n, sizeof *t, cmp_zone);
    }
    *out = t;
    *nout = n;
    return TY_OK;
}

static int group_size(const kube_inventory *inv, const char *name)
{
    for (size_t i = 0; i < inv->ngroups; i++)
        if (inv->groups[i].name && !strcmp(inv->groups[i].name, name))
            return inv->groups[i].size;
    return 0;
}

static int has_class_labels(const kube_node *n, const kube_node_class *c)
{
    for (size_t i = 0; c && i < c->nlabels; i++)
        if (!has_label(n, c->labels[i].key, c->labels[i].value))
            return 0;
    return 1;
}

static int profile_has_group(const kube_profile *p, const char *name)
{
    for (size_t g = 0; g < p->ngroups; g++)
        if (!strcmp(p->groups[g].name, name))
            return 1;
    return 0;
}

size_t kube_group_mismatch(const kube_profile *p, const kube_inventory *inv,
                           const kube_node_group *grp, const char **names, size_t max)
{
    size_t n = 0;
    if (!p || !inv || !grp || !names || max == 0 || group_size(inv, grp->name) > 0)
        return 0;
    const kube_node_class *gpu = kube_profile_gpu_type(p, grp->gpu_type);
    const kube_node_class *cap = kube_profile_capacity(p, grp->capacity);
    if (!gpu)
        return 0;
    for (size_t i = 0; i < inv->nnodes && n < max; i++) {
        const kube_node *node = &inv->nodes[i];
        const char *name = node->stray_group;
        if (!name || !node->zone || strcmp(node->zone, grp->zone) || profile_has_group(p, name) ||
            !has_class_labels(node, gpu) || !has_class_labels(node, cap))
            continue;
        int seen = 0;
        for (size_t k = 0; k < n && !seen; k++)
            seen = !strcmp(names[k], name);
        if (!seen)
            names[n++] = name;
    }
    return n;
}

/* How many new nodes of zone t's groups would make the gang fit; -1 when they cannot. */
static void growth(const req *r, const kube_inventory *inv, tally *t)
{
    long missing = r->g->count - t->slots;
    t->grow = 0;
    t->ngrown = 0;
    t->mismatch = t->mismatch_by = NULL;
    if (!r->gpu || r->g->gpus_per_rank <= 0) {
        t->grow = missing > 0 ? -1 : 0; /* node groups are GPU groups */
        return;
    }
    for (size_t i = 0; i < r->p->ngroups && missing > 0; i++) {
        const kube_node_group *grp = &r->p->groups[i];
        if (strcmp(grp->zone, t->zone) || strcmp(grp->gpu_type, r->gpu->name) ||
            (r->cap && strcmp(grp->capacity, r->cap->name)))
            continue;
        long per_node = grp->gpus_per_node / r->g->gpus_per_rank;
        long size = group_size(inv, grp->name);
        long room = grp->max_size - size;
        const char *other = NULL;
        if (per_node <= 0 || room <= 0)
            continue;
        if (size == 0 && kube_group_mismatch(r->p, inv, grp, &other, 1) > 0) {
            if (!t->mismatch) {
                t->mismatch = grp->name;
                t->mismatch_by = other;
            }
            continue; /* its nodes are there under another name, and counted as nodes */
        }
        long k = (missing + per_node - 1) / per_node;
        if (k > room)
            k = room;
        missing -= k * per_node;
        t->grow += (int)k;
        if (t->ngrown < KUBE_NEEDS_MAX) {
            t->used[t->ngrown] = grp->name;
            t->counts[t->ngrown] = (int)k;
        }
        t->ngrown++;
    }
    if (missing > 0)
        t->grow = -1;
}

static void grow_reason(const tally *t, kube_placement *out)
{
    size_t cap = sizeof out->reason;
    int off = snprintf(out->reason, cap, "waiting for %d node%s of group%s ", t->grow,
                       t->grow == 1 ? "" : "s", t->ngrown == 1 ? "" : "s");
    for (int i = 0; i < t->ngrown && i < KUBE_NEEDS_MAX && off > 0 && (size_t)off < cap; i++)
        off += snprintf(out->reason + off, cap - (size_t)off, "%s%s", i ? ", " : "", t->used[i]);
    if (t->ngrown > KUBE_NEEDS_MAX && off > 0 && (size_t)off < cap)
        snprintf(out->reason + off, cap - (size_t)off, ", ...");
}

static const char *gpu_display(const kube_node_class *gpu)
{
    const char *product = kube_node_class_label(gpu, GPU_PRODUCT_LABEL);
    return product ? product : gpu->name;
}

/* "4 CPUs, 16Gi memory" for what a rank asks besides GPUs; "" when nothing. */
static void shape(const kube_gang *g, char *buf, size_t len)
{
    char q[32];
    size_t off = 0;
    buf[0] = '\0';
    if (g->cpu_millis > 0) {
        ty_quantity_format_millis(g->cpu_millis, q, sizeof q);
        off += (size_t)snprintf(buf + off, len - off, "%s CPU", q);
    }
    if (g->memory_bytes > 0 && off < len) {
        ty_quantity_format_bytes(g->memory_bytes, q, sizeof q);
        off += (size_t)snprintf(buf + off, len - off, "%s%s memory", off ? ", " : "", q);
    }
    if (g->ephemeral_bytes > 0 && off < len) {
        ty_quantity_format_bytes(g->ephemeral_bytes, q, sizeof q);
        snprintf(buf + off, len - off, "%s%s ephemeral storage", off ? ", " : "", q);
    }
}

/* The resources that alone leave zone t short of the gang: "pod slots and CPU". */
static void short_of(const req *r, const tally *t, char *buf, size_t len)
{
    size_t off = 0;
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < RES_N && off < len; i++)
        if (t->by[i] < r->g->count)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", n++ ? ", " : "", res_names[i]);
}

static void wait_reason(const req *r, const tally *t, size_t nt, kube_placement *out)
{
    char on[48] = "";
    if (r->cap)
        snprintf(on, sizeof on, " on %s nodes", r->cap->name);
    int named = r->g->zone && strcmp(r->g->zone, "auto");
    if (nt == 0) {
        snprintf(out->reason, sizeof out->reason,
                 "no zone is left to try: every zone was avoided after a withdrawn attempt");
        return;
    }
    long any_nodes = 0;
    for (size_t i = 0; i < nt; i++)
        any_nodes += t[i].nodes;
    if (r->g->gpus_per_rank == 0 && any_nodes == 0) {
        if (named)
            snprintf(out->reason, sizeof out->reason,
                     "zone %s has no ready, schedulable node%s that a rank without GPUs may use",
                     t[0].zone, on);
        else
            snprintf(out->reason, sizeof out->reason,
                     "no zone has a ready, schedulable node%s that a rank without GPUs may use",
                     on);
        return;
    }
    if (r->g->gpus_per_rank > 0) {
        const tally *best = &t[0];
        for (size_t i = 1; i < nt; i++)
            if (t[i].free_gpus > best->free_gpus)
                best = &t[i];
        long need = (long)r->g->count * r->g->gpus_per_rank;
        const char *gpu = gpu_display(r->gpu);
        if (best->free_gpus < need) {
            if (named)
                snprintf(out->reason, sizeof out->reason,
                         "zone %s does not have %ld free %s GPUs%s; it has %ld", best->zone, need,
                         gpu, on, best->free_gpus);
            else if (best->free_gpus == 0)
                snprintf(out->reason, sizeof out->reason,
                         "no zone has %ld free %s GPUs%s; none has any", need, gpu, on);
            else
                snprintf(out->reason, sizeof out->reason,
                         "no zone has %ld free %s GPUs%s; the most is %ld in %s", need, gpu, on,
                         best->free_gpus, best->zone);
            return;
        }
        /* Enough GPUs, scattered: a rank's GPUs must share a node. */
        const tally *most = &t[0];
        for (size_t i = 1; i < nt; i++)
            if (t[i].by[RES_GPU] > most->by[RES_GPU])
                most = &t[i];
        if (most->by[RES_GPU] < r->g->count) {
            if (named)
                snprintf(out->reason, sizeof out->reason,
                         "zone %s has no room for %d ranks of %d %s GPUs on one node each%s; it "
                         "has room for %ld",
                         most->zone, r->g->count, r->g->gpus_per_rank, gpu, on, most->by[RES_GPU]);
            else
                snprintf(out->reason, sizeof out->reason,
                         "no zone has room for %d ranks of %d %s GPUs on one node each%s; the "
                         "most is %ld in %s",
                         r->g->count, r->g->gpus_per_rank, gpu, on, most->by[RES_GPU], most->zone);
            return;
        }
    }
    /* The GPUs would do (or none are asked): pod slots, CPU, memory or storage fall short. */
    const tally *most = &t[0];
    for (size_t i = 1; i < nt; i++)
        if (t[i].slots > most->slots)
            most = &t[i];
    char what[128], lack[96];
    shape(r->g, what, sizeof what);
    short_of(r, most, lack, sizeof lack);
    const char *ranks = r->g->count == 1 ? "rank" : "ranks";
    const char *gpus =
        r->g->gpus_per_rank ? r->g->count == 1 ? " and its GPUs" : " and their GPUs" : "";
    /* Cut short when the names are long: say(), not snprintf(), says that it may be. */
    if (named)
        say(out->reason, sizeof out->reason,
            "zone %s has room for %ld of %d %s%s%s%s%s (short of %s)", most->zone, most->slots,
            r->g->count, ranks, what[0] ? " of " : "", what, gpus, on,
            lack[0] ? lack : "room on one node");
    else
        say(out->reason, sizeof out->reason,
            "no zone has room for %d %s%s%s%s%s; the most is %ld in %s (short of %s)", r->g->count,
            ranks, what[0] ? " of " : "", what, gpus, on, most->slots, most->zone,
            lack[0] ? lack : "room on one node");
}

/* Adds eligible node n's room for ranks of gang to zone tally t. */
static void count_node(tally *t, const kube_node *n, const kube_gang *gang)
{
    long by[RES_N], slots = LONG_MAX;
    node_room(n, gang, by);
    long free_gpus = n->gpus_allocatable - n->gpus_requested;
    t->nodes++;
    t->free_gpus += free_gpus > 0 ? free_gpus : 0;
    for (int k = 0; k < RES_N; k++) {
        if (by[k] < slots)
            slots = by[k];
        /* Each resource alone only matters up to the gang's size. */
        long add = by[k] > gang->count ? gang->count : by[k];
        t->by[k] = t->by[k] > LONG_MAX - add ? LONG_MAX : t->by[k] + add;
    }
    t->slots += slots;
}

/* 1 + the position of zone in the profile's zones; 0 when it lists none or not this one. */
static int zone_position(const kube_profile *p, const char *zone)
{
    for (size_t k = 0; zone && k < p->nzones && k < KUBE_ZONE_INDEX_MAX; k++)
        if (!strcmp(p->zones[k], zone))
            return (int)k + 1;
    return 0;
}

ty_err kube_zone_index(const kube_profile *p, const kube_node *nodes, size_t nnodes,
                       unsigned char *zone_of)
{
    if (!p || (nnodes && (!nodes || !zone_of)) || !p->nzones ||
        p->nzones > KUBE_ZONE_INDEX_MAX)
        return TY_EINVAL;
    for (size_t i = 0; i < nnodes; i++)
        zone_of[i] = (unsigned char)zone_position(p, nodes[i].zone);
    return TY_OK;
}

/*
 * With inv's zone index: zt[v] is the tally of the zone whose index value is v, -1 for none
 * (v 0: no zone of the profile). Returns 0 when there is no index to use; the zones are then
 * compared by name. The candidates are the profile's zones whenever it lists any.
 */
static int zone_tallies(const kube_profile *p, const kube_inventory *inv, const tally *t,
                        size_t nt, int zt[KUBE_ZONE_INDEX_MAX + 1])
{
    if (!inv->zone_of || !p->nzones || p->nzones > KUBE_ZONE_INDEX_MAX)
        return 0;
    for (size_t v = 0; v <= KUBE_ZONE_INDEX_MAX; v++)
        zt[v] = -1;
    for (size_t z = 0; z < nt; z++) {
        int v = zone_position(p, t[z].zone);
        if (!v)
            return 0; /* not a zone of the profile: by name */
        zt[v] = (int)z;
    }
    return 1;
}

ty_err kube_place(const kube_profile *p, const kube_inventory *inv, const kube_gang *gang,
                  kube_placement *out, char *msg, size_t msglen)
{
    req r = {p, gang, NULL, NULL, inv ? inv->match : NULL};
    tally *t = NULL;
    size_t nt = 0;
    ty_err e;

    if (!p || !inv || !gang || !out)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    if (gang->count < 1 || gang->gpus_per_rank < 0)
        return bad(msg, msglen, "a gang needs at least one rank and no negative GPU count");
    if ((e = resolve(p, gang, &r, msg, msglen)))
        return e;
    if (gang->zone && strcmp(gang->zone, "auto") && p->nzones &&
        !in_list((const char *const *)p->zones, p->nzones, gang->zone))
        return bad(msg, msglen, "zone '%s' is not in the cluster profile", gang->zone);
    if ((e = candidate_zones(&r, inv, &t, &nt)))
        return e;

    int zt[KUBE_ZONE_INDEX_MAX + 1]; /* with a zone index: its value -> the zone's tally */
    int by_index = zone_tallies(p, inv, t, nt, zt);
    for (size_t i = 0; i < inv->nnodes; i++) {
        const kube_node *n = &inv->nodes[i];
        if (!eligible(&r, n, i))
            continue;
        if (by_index) {
            if (zt[inv->zone_of[i]] >= 0)
                count_node(&t[zt[inv->zone_of[i]]], n, gang);
            continue;
        }
        for (size_t z = 0; z < nt; z++)
            if (!strcmp(t[z].zone, n->zone))
                count_node(&t[z], n, gang);
    }

    /* The zone with the most room among those that fit now. */
    const tally *pick = NULL;
    for (size_t z = 0; z < nt; z++)
        if (t[z].slots >= gang->count && (!pick || t[z].slots > pick->slots))
            pick = &t[z];
    if (pick) {
        out->verdict = KUBE_PLACE;
        out->fit_ranks = gang->count;
        snprintf(out->zone, sizeof out->zone, "%s", pick->zone);
        goto done;
    }

    /* Then the zone whose groups need the fewest new nodes. */
    const tally *mismatch = NULL;
    for (size_t z = 0; z < nt; z++) {
        growth(&r, inv, &t[z]);
        if (t[z].grow > 0 && (!pick || t[z].grow < pick->grow))
            pick = &t[z];
        if (t[z].mismatch && !mismatch)
            mismatch = &t[z];
    }
    if (pick && pick->mismatch)
        mismatch = pick;
    if (mismatch)
        say(out->note, sizeof out->note,
            "the profile's group %s is not grown: %s has its nodes under the name %s",
            mismatch->mismatch, mismatch->zone, mismatch->mismatch_by);
    if (pick) {
        out->verdict = KUBE_PLACE;
        out->grow_nodes = pick->grow;
        out->fit_ranks = (int)(pick->slots < gang->count ? pick->slots : gang->count);
        snprintf(out->zone, sizeof out->zone, "%s", pick->zone);
        snprintf(out->group, sizeof out->group, "%s", pick->used[0]);
        for (int k = 0; k < pick->ngrown && k < KUBE_NEEDS_MAX; k++) {
            snprintf(out->needs[k].group, sizeof out->needs[k].group, "%s", pick->used[k]);
            out->needs[k].nodes = pick->counts[k];
            out->nneeds = k + 1;
        }
        grow_reason(pick, out);
        goto done;
    }
    out->verdict = KUBE_WAIT;
    wait_reason(&r, t, nt, out);
done:
    free(t);
    return TY_OK;
}

ty_err kube_type_capacity_of(const kube_profile *p, const kube_inventory *inv,
                             const char *gpu_type, kube_type_capacity *out)
{
    kube_gang g = {.count = 1, .gpus_per_rank = 1, .gpu_type = gpu_type};
    req r = {p, &g, NULL, NULL, inv ? inv->match : NULL};
    if (!p || !inv || !out || !(r.gpu = kube_profile_gpu_type(p, gpu_type)))
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < inv->nnodes; i++) {
        const kube_node *n = &inv->nodes[i];
        if (!eligible(&r, n, i))
            continue;
        if (p->nzones && (inv->zone_of && p->nzones <= KUBE_ZONE_INDEX_MAX
                              ? !inv->zone_of[i]
                              : !in_list((const char *const *)p->zones, p->nzones, n->zone)))
            continue;
        long alloc = n->gpus_allocatable > 0 ? n->gpus_allocatable : 0;
        long used = n->gpus_requested > 0 ? n->gpus_requested : 0;
        out->total += alloc;
        out->free += used < alloc ? alloc - used : 0;
    }
    for (size_t i = 0; i < p->ngroups; i++) {
        const kube_node_group *grp = &p->groups[i];
        long room = grp->max_size - group_size(inv, grp->name);
        const char *other;
        if (strcmp(grp->gpu_type, gpu_type) || room <= 0 ||
            kube_group_mismatch(p, inv, grp, &other, 1) > 0)
            continue;
        out->total += room * grp->gpus_per_node;
        out->free += room * grp->gpus_per_node;
    }
    return TY_OK;
}

ty_err kube_largest_node(const kube_profile *p, const kube_inventory *inv, const kube_gang *g,
                         kube_largest *out)
{
    char msg[160];
    kube_gang any = *g;
    any.capacity = NULL;
    req r = {p, &any, NULL, NULL, inv ? inv->match : NULL};
    if (!p || !inv || !g || !out || resolve(p, &any, &r, msg, sizeof msg) != TY_OK)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < inv->nnodes; i++) {
        const kube_node *n = &inv->nodes[i];
        if (!n->zone || (p->nzones && !in_list((const char *const *)p->zones, p->nzones, n->zone)))
            continue;
        if (!(r.match ? r.match[i] : class_ok(&r, n)))
            continue;
        if (n->allocatable.cpu_millis > out->cpu_millis) {
            out->cpu_millis = n->allocatable.cpu_millis;
            out->cpu_node = n->name;
        }
        if (n->allocatable.memory_bytes > out->memory_bytes) {
            out->memory_bytes = n->allocatable.memory_bytes;
            out->memory_node = n->name;
        }
        if (n->allocatable.ephemeral_bytes > out->ephemeral_bytes) {
            out->ephemeral_bytes = n->allocatable.ephemeral_bytes;
            out->ephemeral_node = n->name;
        }
    }
    return TY_OK;
}

/* ---- booking the pods not bound yet ---- */

struct kube_booker {
    kube_node *nodes;
    size_t *idx; /* a max-heap of eligible node indices by room for `key` ranks */
    long *room;  /* room[i]: node idx[i]'s room, as node_slots() said when it last changed */
    size_t n;
    kube_gang key;
};

static long heap_key(const kube_booker *b, size_t i)
{
    return b->room[i];
}

static void heap_down(kube_booker *b, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, rr = l + 1, m = i;
        if (l < b->n && heap_key(b, l) > heap_key(b, m))
            m = l;
        if (rr < b->n && heap_key(b, rr) > heap_key(b, m))
            m = rr;
        if (m == i)
            return;
        size_t tmp = b->idx[i];
        long room = b->room[i];
        b->idx[i] = b->idx[m];
        b->room[i] = b->room[m];
        b->idx[m] = tmp;
        b->room[m] = room;
        i = m;
    }
}

ty_err kube_booker_new(const kube_profile *p, kube_node *nodes, size_t nnodes,
                       const unsigned char *match, const unsigned char *zone_of,
                       const kube_gang *g, const char *zone, kube_booker **out)
{
    char msg[160];
    req r = {p, g, NULL, NULL, match};
    *out = NULL;
    if (resolve(p, g, &r, msg, sizeof msg) != TY_OK)
        return TY_EINVAL;
    kube_booker *b = calloc(1, sizeof *b);
    if (!b || !(b->idx = calloc(nnodes ? nnodes : 1, sizeof *b->idx)) ||
        !(b->room = calloc(nnodes ? nnodes : 1, sizeof *b->room))) {
        if (b)
            free(b->idx);
        free(b);
        return TY_ENOMEM;
    }
    b->nodes = nodes;
    b->key = *g;
    /* With a zone index, a zone of the profile is found by its position, not its name. */
    int v = zone_of && p->nzones <= KUBE_ZONE_INDEX_MAX ? zone_position(p, zone) : 0;
    for (size_t i = 0; i < nnodes; i++)
        if (v ? zone_of[i] == v
              : zone && nodes[i].zone && !strcmp(nodes[i].zone, zone))
            if (eligible(&r, &nodes[i], i))
                b->idx[b->n++] = i;
    for (size_t i = 0; i < b->n; i++)
        b->room[i] = node_slots(&nodes[b->idx[i]], &b->key);
    for (size_t i = b->n / 2; i-- > 0;)
        heap_down(b, i);
    *out = b;
    return TY_OK;
}

int kube_book(kube_booker *b, const kube_gang *g, int ranks)
{
    int booked = 0;
    while (b && booked < ranks && b->n > 0) {
        kube_node *n = &b->nodes[b->idx[0]];
        if (!kube_rank_fits(n, g))
            break;
        n->gpus_requested += g->gpus_per_rank;
        n->requested.cpu_millis += g->cpu_millis;
        n->requested.memory_bytes += g->memory_bytes;
        n->requested.ephemeral_bytes += g->ephemeral_bytes;
        n->requested.pods++;
        b->room[0] = node_slots(n, &b->key); /* no other node changed */
        heap_down(b, 0);
        booked++;
    }
    return booked;
}

void kube_booker_free(kube_booker *b)
{
    if (!b)
        return;
    free(b->idx);
    free(b->room);
    free(b);
}

/* A quantity of the spec in units of 10^-scale ("500m" at scale 3: 500); 0 when absent. */
static int64_t spec_quantity(const json_t *v, int scale)
{
    const char *s = json_string_value(v);
    int64_t n = 0;
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? json_integer_value(v) * (scale == 3 ? 1000 : 1) : 0;
    if (!s || ty_quantity_scaled(s, strlen(s), scale, &n) != TY_OK || n < 0)
        return 0;
    return n;
}

ty_err kube_gang_from_spec(const json_t *spec, kube_gang *out)
{
    const json_t *count = json_object_get(json_object_get(spec, "workers"), "count");
    const json_t *gpu = json_object_get(json_object_get(spec, "resources"), "gpu");
    const json_t *pl = json_object_get(spec, "placement");
    if (!out || !json_is_integer(count) || json_integer_value(count) < 1 ||
        json_integer_value(count) > 1000000)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    out->count = (int)json_integer_value(count);
    if (json_is_object(gpu) && json_integer_value(json_object_get(gpu, "count")) > 0) {
        json_int_t n = json_integer_value(json_object_get(gpu, "count"));
        out->gpus_per_rank = n > 1024 ? 1024 : (int)n;
        out->gpu_type = json_string_value(json_object_get(gpu, "type"));
    }
    const json_t *res = json_object_get(spec, "resources");
    out->cpu_millis = spec_quantity(json_object_get(res, "cpu"), 3);
    out->memory_bytes = spec_quantity(json_object_get(res, "memory"), 0);
    out->capacity = json_string_value(json_object_get(pl, "capacity"));
    out->zone = json_string_value(json_object_get(pl, "zone"));
    return TY_OK;
}
