/*
 * placement.c - the zone decision (see placement.h for the rules).
 *
 * One pass over the nodes fills a per-zone tally (rank slots, free GPUs, eligible nodes); the
 * decision and the reason a person reads are both made from the tally, so what the message says
 * is exactly what the decision saw.
 */
#include "scheduler/kube/placement.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_PRODUCT_LABEL "nvidia.com/gpu.product"

typedef struct tally {
    const char *zone;
    long slots;          /* ranks that fit on the zone's eligible nodes */
    long free_gpus;      /* free GPUs on the zone's eligible nodes */
    long nodes;          /* eligible nodes */
    int grow;            /* new nodes needed (-1: the groups cannot grow enough) */
    const char *used[4]; /* the groups that must grow, first ones */
    int ngrown;          /* groups that must grow */
} tally;

typedef struct req {
    const kube_profile *p;
    const kube_gang *g;
    const kube_node_class *gpu;
    const kube_node_class *cap; /* NULL: any capacity */
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

static int eligible(const req *r, const kube_node *n)
{
    if (!n->ready || n->unschedulable || !n->zone)
        return 0;
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
    size_t cap = r->p->nzones + inv->nnodes + 1, n = 0;
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

/* How many new nodes of zone t's groups would make the gang fit; -1 when they cannot. */
static void growth(const req *r, const kube_inventory *inv, tally *t)
{
    long missing = r->g->count - t->slots;
    t->grow = 0;
    t->ngrown = 0;
    for (size_t i = 0; i < r->p->ngroups && missing > 0; i++) {
        const kube_node_group *grp = &r->p->groups[i];
        if (strcmp(grp->zone, t->zone) || strcmp(grp->gpu_type, r->gpu->name) ||
            (r->cap && strcmp(grp->capacity, r->cap->name)))
            continue;
        long per_node = grp->gpus_per_node / r->g->gpus_per_rank;
        long room = grp->max_size - group_size(inv, grp->name);
        if (per_node <= 0 || room <= 0)
            continue;
        long k = (missing + per_node - 1) / per_node;
        if (k > room)
            k = room;
        missing -= k * per_node;
        t->grow += (int)k;
        if (t->ngrown < 4)
            t->used[t->ngrown] = grp->name;
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
    for (int i = 0; i < t->ngrown && i < 4 && off > 0 && (size_t)off < cap; i++)
        off += snprintf(out->reason + off, cap - (size_t)off, "%s%s", i ? ", " : "", t->used[i]);
    if (t->ngrown > 4 && off > 0 && (size_t)off < cap)
        snprintf(out->reason + off, cap - (size_t)off, ", ...");
}

static const char *gpu_display(const kube_node_class *gpu)
{
    const char *product = kube_node_class_label(gpu, GPU_PRODUCT_LABEL);
    return product ? product : gpu->name;
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
    if (r->g->gpus_per_rank == 0) {
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
    const tally *best = &t[0];
    for (size_t i = 1; i < nt; i++)
        if (t[i].free_gpus > best->free_gpus)
            best = &t[i];
    long need = (long)r->g->count * r->g->gpus_per_rank;
    const char *gpu = gpu_display(r->gpu);
    if (best->free_gpus < need) {
        if (named)
            snprintf(out->reason, sizeof out->reason,
                     "zone %s does not have %ld free %s GPUs%s; it has %ld", best->zone, need, gpu,
                     on, best->free_gpus);
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
        if (t[i].slots > most->slots)
            most = &t[i];
    if (named)
        snprintf(out->reason, sizeof out->reason,
                 "zone %s has no room for %d ranks of %d %s GPUs on one node each%s; it has room "
                 "for %ld",
                 most->zone, r->g->count, r->g->gpus_per_rank, gpu, on, most->slots);
    else
        snprintf(out->reason, sizeof out->reason,
                 "no zone has room for %d ranks of %d %s GPUs on one node each%s; the most is %ld "
                 "in %s",
                 r->g->count, r->g->gpus_per_rank, gpu, on, most->slots, most->zone);
}

ty_err kube_place(const kube_profile *p, const kube_inventory *inv, const kube_gang *gang,
                  kube_placement *out, char *msg, size_t msglen)
{
    req r = {p, gang, NULL, NULL};
    tally *t = NULL;
    size_t nt = 0;
    ty_err e;

    if (!p || !inv || !gang || !out)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    if (gang->count < 1 || gang->gpus_per_rank < 0)
        return bad(msg, msglen, "a gang needs at least one rank and no negative GPU count");
    if (gang->gpus_per_rank > 0 && !(r.gpu = kube_profile_gpu_type(p, gang->gpu_type)))
        return bad(msg, msglen, "GPU type '%s' is not in the cluster profile",
                   gang->gpu_type ? gang->gpu_type : "");
    if (gang->capacity && strcmp(gang->capacity, "any") && p->ncapacity_types > 0 &&
        !(r.cap = kube_profile_capacity(p, gang->capacity)))
        return bad(msg, msglen, "capacity type '%s' is not in the cluster profile", gang->capacity);
    if (gang->zone && strcmp(gang->zone, "auto") && p->nzones &&
        !in_list((const char *const *)p->zones, p->nzones, gang->zone))
        return bad(msg, msglen, "zone '%s' is not in the cluster profile", gang->zone);
    if ((e = candidate_zones(&r, inv, &t, &nt)))
        return e;

    for (size_t i = 0; i < inv->nnodes; i++) {
        const kube_node *n = &inv->nodes[i];
        if (!eligible(&r, n))
            continue;
        for (size_t z = 0; z < nt; z++) {
            if (strcmp(t[z].zone, n->zone))
                continue;
            long free_gpus = n->gpus_allocatable - n->gpus_requested;
            if (free_gpus < 0)
                free_gpus = 0;
            t[z].nodes++;
            t[z].free_gpus += free_gpus;
            t[z].slots += gang->gpus_per_rank ? free_gpus / gang->gpus_per_rank : 0;
        }
    }

    /* The zone with the most room among those that fit now. */
    const tally *pick = NULL;
    for (size_t z = 0; z < nt; z++) {
        int fits = gang->gpus_per_rank ? t[z].slots >= gang->count : t[z].nodes > 0;
        long room = gang->gpus_per_rank ? t[z].slots : t[z].nodes;
        long best = !pick ? -1 : gang->gpus_per_rank ? pick->slots : pick->nodes;
        if (fits && room > best)
            pick = &t[z];
    }
    if (pick) {
        out->verdict = KUBE_PLACE;
        snprintf(out->zone, sizeof out->zone, "%s", pick->zone);
        goto done;
    }

    /* Then the zone whose groups need the fewest new nodes. */
    if (r.gpu) {
        for (size_t z = 0; z < nt; z++) {
            growth(&r, inv, &t[z]);
            if (t[z].grow > 0 && (!pick || t[z].grow < pick->grow))
                pick = &t[z];
        }
    }
    if (pick) {
        out->verdict = KUBE_PLACE;
        out->grow_nodes = pick->grow;
        snprintf(out->zone, sizeof out->zone, "%s", pick->zone);
        snprintf(out->group, sizeof out->group, "%s", pick->used[0]);
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
    req r = {p, &g, NULL, NULL};
    if (!p || !inv || !out || !(r.gpu = kube_profile_gpu_type(p, gpu_type)))
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < inv->nnodes; i++) {
        const kube_node *n = &inv->nodes[i];
        if (!eligible(&r, n) ||
            (p->nzones && !in_list((const char *const *)p->zones, p->nzones, n->zone)))
            continue;
        long alloc = n->gpus_allocatable > 0 ? n->gpus_allocatable : 0;
        long used = n->gpus_requested > 0 ? n->gpus_requested : 0;
        out->total += alloc;
        out->free += used < alloc ? alloc - used : 0;
    }
    for (size_t i = 0; i < p->ngroups; i++) {
        const kube_node_group *grp = &p->groups[i];
        long room = grp->max_size - group_size(inv, grp->name);
        if (strcmp(grp->gpu_type, gpu_type) || room <= 0)
            continue;
        out->total += room * grp->gpus_per_node;
        out->free += room * grp->gpus_per_node;
    }
    return TY_OK;
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
    out->capacity = json_string_value(json_object_get(pl, "capacity"));
    out->zone = json_string_value(json_object_get(pl, "zone"));
    return TY_OK;
}
