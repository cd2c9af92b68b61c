/*
 * kube_backend.c - the Kubernetes backend's operations (backend.h), its writer threads and its
 * inventory; kube_events.c turns the informers' changes into backend events.
 *
 * One mutex (kb->mu) guards the attempts, the event queue and the writers' queue. The
 * informers' callbacks take it; nothing that blocks (a request) runs under it. Lock order:
 * kb->mu, then an informer's cache lock (ty_informer_get); ty_informer_foreach callbacks never
 * take kb->mu (the inventory copies what it needs first).
 */
#define _GNU_SOURCE
#include "scheduler/kube/kube_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_hash.h"
#include "common/ty_json.h"
#include "common/ty_quantity.h"
#include "common/ty_thread.h"
#include "common/ty_time.h"
#include "scheduler/kube/kpick.h"
#include "scheduler/kube/placement.h"
#include "scheduler/kube/render.h"
#include "scheduler/ranklog.h"

/* snprintf where cutting the text short is intended (names and messages into fixed fields). */
void kb_fmt(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static void why_set(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ---- the event queue ---------------------------------------------------------------------- */

void kb_push(kbe *kb, backend_event *ev, uint64_t t0)
{
    if (!ev->time_ms)
        ev->time_ms = ty_time_now_ms();
    if (kb->qlen == kb->qcap) {
        size_t cap = kb->qcap ? kb->qcap * 2 : 64;
        backend_event *q = realloc(kb->q, cap * sizeof *q);
        if (!q) {
            fprintf(stderr, "kube backend: an event was lost: out of memory\n");
            return;
        }
        kb->q = q;
        uint64_t *qt = realloc(kb->qt, cap * sizeof *qt);
        if (!qt) {
            fprintf(stderr, "kube backend: an event was lost: out of memory\n");
            return;
        }
        kb->qt = qt;
        kb->qcap = cap;
    }
    kb->q[kb->qlen] = *ev;
    kb->qt[kb->qlen] = t0;
    kb->qlen++;
    uint64_t one = 1;
    if (write(kb->efd, &one, sizeof one) < 0 && errno != EAGAIN)
        fprintf(stderr, "kube backend: eventfd: %s\n", strerror(errno));
}

void kb_push_capacity(kbe *kb)
{
    for (size_t i = 0; i < kb->qlen; i++)
        if (kb->q[i].kind == BACKEND_EV_CAPACITY)
            return; /* one pending CAPACITY says it all */
    backend_event ev = {.kind = BACKEND_EV_CAPACITY, .rank = -1, .exit_code = -1};
    kb_push(kb, &ev, 0);
}

static const double hist_bounds[KB_HIST] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5};

static size_t kb_observe(backend *b, backend_event *ev, size_t max)
{
    kbe *kb = (kbe *)b;
    uint64_t v;
    pthread_mutex_lock(&kb->mu);
    if (read(kb->efd, &v, sizeof v) < 0 && errno != EAGAIN)
        fprintf(stderr, "kube backend: eventfd: %s\n", strerror(errno));
    size_t n = kb->qlen < max ? kb->qlen : max;
    uint64_t now = ty_time_mono_ns();
    for (size_t i = 0; i < n; i++) {
        ev[i] = kb->q[i];
        if (!kb->qt[i])
            continue;
        double s = (double)(now - kb->qt[i]) / 1e9;
        size_t k = 0;
        while (k < KB_HIST && s > hist_bounds[k])
            k++;
        kb->hist[k]++;
        kb->hist_sum += s;
        kb->hist_count++;
    }
    if (n) {
        memmove(kb->q, kb->q + n, (kb->qlen - n) * sizeof *kb->q);
        memmove(kb->qt, kb->qt + n, (kb->qlen - n) * sizeof *kb->qt);
        kb->qlen -= n;
    }
    if (kb->qlen) {
        uint64_t one = 1; /* still readable: the rest waits for the next call */
        if (write(kb->efd, &one, sizeof one) < 0 && errno != EAGAIN)
            fprintf(stderr, "kube backend: eventfd: %s\n", strerror(errno));
    }
    pthread_mutex_unlock(&kb->mu);
    return n;
}

static int kb_event_fd(backend *b)
{
    return ((kbe *)b)->efd;
}

/* ---- attempts ----------------------------------------------------------------------------- */

static size_t bucket_of(const kbe *kb, const char *job_id)
{
    return (size_t)(ty_fnv1a_str(job_id) & (kb->nbuckets - 1));
}

/* Rebuilds the buckets for n of them, each chain in the list's order (newest first). */
static int rehash(kbe *kb, size_t n)
{
    backend_attempt **b = calloc(n, sizeof *b);
    if (!b)
        return -1;
    free(kb->buckets);
    kb->buckets = b;
    kb->nbuckets = n;
    for (backend_attempt *a = kb->attempts; a; a = a->next) {
        backend_attempt **p = &kb->buckets[bucket_of(kb, a->job_id)];
        while (*p)
            p = &(*p)->hnext;
        a->hnext = NULL;
        *p = a;
    }
    return 0;
}

/* Adds a at the head of the list and of its bucket; under kb->mu. */
static void attempt_link(kbe *kb, backend_attempt *a)
{
    a->next = kb->attempts;
    kb->attempts = a;
    kb->nattempts++;
    if (kb->nattempts > kb->nbuckets && rehash(kb, kb->nbuckets ? 2 * kb->nbuckets : 64) == 0)
        return; /* the rehash chained a too */
    if (!kb->nbuckets) {
        a->hnext = NULL; /* no buckets (no memory for them): kb_find() reads the list */
        return;
    }
    size_t i = bucket_of(kb, a->job_id);
    a->hnext = kb->buckets[i];
    kb->buckets[i] = a;
}

/* Takes a out of the list and its bucket; under kb->mu. */
static void attempt_unlink(kbe *kb, backend_attempt *a)
{
    for (backend_attempt **p = &kb->attempts; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            kb->nattempts--;
            break;
        }
    if (!kb->nbuckets)
        return;
    for (backend_attempt **p = &kb->buckets[bucket_of(kb, a->job_id)]; *p; p = &(*p)->hnext)
        if (*p == a) {
            *p = a->hnext;
            break;
        }
}

backend_attempt *kb_find(kbe *kb, const char *job_id, int attempt)
{
    if (!kb->nbuckets) {
        for (backend_attempt *a = kb->attempts; a; a = a->next)
            if (a->live && a->attempt == attempt && !strcmp(a->job_id, job_id))
                return a;
        return NULL;
    }
    for (backend_attempt *a = kb->buckets[bucket_of(kb, job_id)]; a; a = a->hnext)
        if (a->live && a->attempt == attempt && !strcmp(a->job_id, job_id))
            return a;
    return NULL;
}

void kb_end_rank(kbe *kb, backend_attempt *a, int r, backend_event *ev, uint64_t t0)
{
    if (r < 0 || r >= a->world || a->ranks[r].ended)
        return;
    a->ranks[r].ended = 1;
    ev->attempt = a;
    ev->rank = r;
    if (ev->kind == BACKEND_EV_DISRUPTED)
        ev->ended = 1;
    if (ev->kind == BACKEND_EV_EXITED && (ev->exit_code != 0 || ev->signal))
        a->gang_failed = 1;
    kb_push(kb, ev, t0);
}

static void attempt_set_job(backend_attempt *a, const backend_job *job)
{
    kb_fmt(a->job_id, sizeof a->job_id, "%s", job->id);
    a->world = job->world_size;
    a->gpus_per_rank = job->gpus_per_rank;
    kb_fmt(a->gpu_type, sizeof a->gpu_type, "%s", job->gpu_type ? job->gpu_type : "");
    kb_fmt(a->capacity, sizeof a->capacity, "%s", job->capacity ? job->capacity : "");
    kb_fmt(a->want_zone, sizeof a->want_zone, "%s", job->zone ? job->zone : "");
    /* What each rank's pod will request, exactly as rendered (render.c writes these). */
    int64_t v = 0;
    a->cpu_millis =
        job->cpu && ty_quantity_scaled(job->cpu, strlen(job->cpu), 3, &v) == TY_OK && v > 0 ? v : 0;
    v = 0;
    a->memory_bytes =
        job->memory && ty_quantity_scaled(job->memory, strlen(job->memory), 0, &v) == TY_OK && v > 0
            ? v
            : 0;
}

static backend_attempt *attempt_new(kbe *kb, const backend_job *job)
{
    backend_attempt *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->kb = kb;
    attempt_set_job(a, job);
    a->ranks = calloc((size_t)(job->world_size > 0 ? job->world_size : 1), sizeof *a->ranks);
    if (!a->ranks) {
        free(a);
        return NULL;
    }
    return a;
}

/* ---- the inventory ------------------------------------------------------------------------ */

static int node_matches_type(const kbe *kb, const kube_node *n, const char *gpu_type)
{
    const kube_node_class *c = kube_profile_gpu_type(kb->p, gpu_type);
    if (!c)
        return 0;
    for (size_t i = 0; i < c->nlabels; i++) {
        int ok = 0;
        for (size_t j = 0; j < n->nlabels && !ok; j++)
            ok = !strcmp(n->labels[j].key, c->labels[i].key) &&
                 !strcmp(n->labels[j].value, c->labels[i].value);
        if (!ok)
            return 0;
    }
    return 1;
}

/* avoid points at the caller's zone name (placement keeps the pointer while it runs). */
static void gang_of(const backend_attempt *a, const char *const *avoid, kube_gang *g)
{
    memset(g, 0, sizeof *g);
    g->count = a->world;
    g->gpus_per_rank = a->gpus_per_rank;
    g->gpu_type = a->gpus_per_rank ? a->gpu_type : NULL;
    g->cpu_millis = a->cpu_millis;
    g->memory_bytes = a->memory_bytes;
    g->capacity = a->capacity[0] ? a->capacity : NULL;
    g->zone = a->want_zone[0] ? a->want_zone : NULL;
    if (avoid && *avoid && **avoid) {
        g->avoid = avoid;
        g->navoid = 1;
    }
}

/*
 * What the labels and taints of the view's nodes decide for g's GPU type and capacity
 * (kube_class_match()), worked out again only when the view's shape changed: most decisions
 * then read one byte a node where they compared its labels and taints with the classes'.
 * NULL when not known (the calls then work it out themselves). In kube_inv_with()'s callbacks.
 */
static const unsigned char *class_match(kbe *kb, const kube_inv_view *view, const kube_gang *g)
{
    const kube_node_class *gpu = NULL, *cap = NULL;
    if (g->gpus_per_rank > 0 && !(gpu = kube_profile_gpu_type(kb->p, g->gpu_type)))
        return NULL;
    if (g->capacity && strcmp(g->capacity, "any") && kb->p->ncapacity_types > 0 &&
        !(cap = kube_profile_capacity(kb->p, g->capacity)))
        return NULL;
    kb_match *m = NULL;
    for (size_t i = 0; i < kb->nmatches && !m; i++)
        if (kb->matches[i].gpu == gpu && kb->matches[i].cap == cap)
            m = &kb->matches[i];
    if (!m) {
        if (kb->nmatches == KB_MATCHES)
            return NULL;
        m = &kb->matches[kb->nmatches++];
        m->gpu = gpu;
        m->cap = cap;
    }
    int fresh;
    unsigned char *v = kb_node_bytes_of(&m->match, view, &fresh);
    if (!v || !fresh)
        return v;
    if (kube_class_match(kb->p, view->nodes, view->nnodes, g, v) != TY_OK)
        return NULL;
    kb_node_bytes_done(&m->match, view);
    return v;
}

unsigned char *kb_node_bytes_of(kb_node_bytes *b, const kube_inv_view *view, int *fresh)
{
    *fresh = 0;
    if (b->valid && b->shape == view->shape && b->n == view->nnodes)
        return b->v;
    b->valid = 0;
    if (b->cap < view->nnodes || !b->v) {
        unsigned char *grown = realloc(b->v, view->nnodes ? view->nnodes : 1);
        if (!grown)
            return NULL;
        b->v = grown;
        b->cap = view->nnodes;
    }
    *fresh = 1;
    return b->v;
}

void kb_node_bytes_done(kb_node_bytes *b, const kube_inv_view *view)
{
    b->valid = 1;
    b->shape = view->shape;
    b->n = view->nnodes;
}

/* kube_zone_index() of the view's nodes, worked out again only when its shape changed (a
 * zone is a label); NULL when not known. In kube_inv_with()'s callbacks, like class_match(). */
static const unsigned char *zone_index(kbe *kb, const kube_inv_view *view)
{
    int fresh;
    unsigned char *v = kb_node_bytes_of(&kb->zones, view, &fresh);
    if (!v || !fresh)
        return v;
    if (kube_zone_index(kb->p, view->nodes, view->nnodes, v) != TY_OK)
        return NULL;
    kb_node_bytes_done(&kb->zones, view);
    return v;
}

/* Two attempts whose pods are eligible for the same nodes of the same zone. */
static int same_class(const backend_attempt *x, const backend_attempt *y)
{
    return !strcmp(x->zone, y->zone) && (x->gpus_per_rank > 0) == (y->gpus_per_rank > 0) &&
           (!x->gpus_per_rank || !strcmp(x->gpu_type, y->gpu_type)) &&
           !strcmp(x->capacity, y->capacity);
}

/* The ranks of a's reservation whose pods the inventory does not count on a node (not bound
 * yet, or ended), whichever informer reported the others; under the inventory's lock. */
static int ranks_not_counted(const kube_inv_view *view, const backend_attempt *a)
{
    int counted = kube_inv_job_pods(view, a->job_id);
    return counted < a->world ? a->world - counted : 0;
}

/*
 * What a reservation booked but whose pods are not bound yet counts on the nodes of its zone
 * (kube_book(): each rank where it has most room), so that two gangs reserved in one round do
 * not both count on the same free GPUs, CPU or pod slots. Under kb->mu, on the inventory's
 * scratch view. One booker per zone, GPU type and capacity that has such gangs: a decision
 * costs O(nodes + pending ranks x log nodes), however many gangs wait for their pods. An
 * attempt whose ranks are all bound books nothing and makes no booker (most of them, once a
 * sweep's pods are placed). On a kept scratch (view->kept: the bookings of the last placement
 * are still there and hold) only the attempts not booked in it yet are: the gang placed last,
 * mostly, so that a burst of placements in one round books each pending rank once, not once
 * per placement.
 */
static void book_pending(kbe *kb, const kube_inv_view *view, const backend_attempt *skip)
{
    kube_node *nodes = view->nodes;
    size_t nnodes = view->nnodes;
    if (!view->kept)
        for (backend_attempt *a = kb->attempts; a; a = a->next)
            a->in_scratch = 0;
    for (const backend_attempt *lead = kb->attempts; lead; lead = lead->next) {
        if (lead == skip || !lead->zone[0] || lead->booked_pass || lead->in_scratch ||
            !ranks_not_counted(view, lead))
            continue;
        /* The first pending attempt of a class makes its booker; later attempts of the same
         * class use it, in the list's order. */
        kube_gang g;
        kube_booker *bk = NULL;
        gang_of(lead, NULL, &g);
        if (kube_booker_new(kb->p, nodes, nnodes, class_match(kb, view, &g),
                            zone_index(kb, view), &g, lead->zone, &bk) != TY_OK)
            bk = NULL; /* the placement then counts less as taken: the scheduler still decides */
        for (backend_attempt *a = (backend_attempt *)lead; a; a = a->next) {
            if (a == skip || !a->zone[0] || a->booked_pass || a->in_scratch ||
                !same_class(a, lead))
                continue;
            a->booked_pass = 1;
            gang_of(a, NULL, &g);
            kube_book(bk, &g, ranks_not_counted(view, a));
        }
        kube_booker_free(bk);
    }
    for (backend_attempt *a = kb->attempts; a; a = a->next) {
        /* Booked now, or with nothing to book while its pods stay counted (a pod bound or
         * ended changes the inventory, and the next view is fresh). */
        if (a != skip && a->zone[0])
            a->in_scratch = 1;
        a->booked_pass = 0;
    }
}

/*
 * The largest GPU count one node of the type has or a group's node would have, or `enough`
 * as soon as it is known to be at least that (the nodes are then not looked at).
 */
static int max_gpus_per_node(kbe *kb, const kube_node *nodes, size_t nnodes, const char *gpu_type,
                             int enough)
{
    int best = 0;
    for (size_t g = 0; g < kb->p->ngroups; g++)
        if (!strcmp(kb->p->groups[g].gpu_type, gpu_type) &&
            kb->p->groups[g].gpus_per_node > best)
            best = kb->p->groups[g].gpus_per_node;
    for (size_t i = 0; i < nnodes && best < enough; i++)
        if (nodes[i].gpus_allocatable > best && node_matches_type(kb, &nodes[i], gpu_type))
            best = nodes[i].gpus_allocatable;
    return best;
}

static void count_placement(kbe *kb, const char *result)
{
    pthread_mutex_lock(&kb->mu);
    json_t *v = json_object_get(kb->placements, result);
    json_object_set_new(kb->placements, result,
                        json_integer(v ? json_integer_value(v) + 1 : 1));
    pthread_mutex_unlock(&kb->mu);
}

typedef struct place_ctx {
    kbe *kb;
    backend_attempt *a;
    const char *avoid;
    kube_placement *out;
    char *why;
    size_t whylen;
} place_ctx;

/* kube_inv_with()'s callback: books what other gangs await, then places. */
static ty_err place_on(void *ud, kube_inv_view *view)
{
    place_ctx *c = ud;
    kbe *kb = c->kb;
    backend_attempt *a = c->a;
    kube_gang g;
    pthread_mutex_lock(&kb->mu);
    kb_mark_excluded(kb, view->nodes, view->nnodes); /* before booking: no rank goes there */
    book_pending(kb, view, a);
    pthread_mutex_unlock(&kb->mu);
    if (a->gpus_per_rank > 0 && kube_profile_gpu_type(kb->p, a->gpu_type)) {
        int most = max_gpus_per_node(kb, view->nodes, view->nnodes, a->gpu_type,
                                     a->gpus_per_rank);
        if (a->gpus_per_rank > most) {
            why_set(c->why, c->whylen, "needs %d GPUs of type %s per rank; no node or node "
                    "group of this cluster has more than %d", a->gpus_per_rank, a->gpu_type,
                    most);
            return TY_EINVAL;
        }
    }
    gang_of(a, &c->avoid, &g);
    kube_inventory ki = {view->nodes, view->nnodes, view->groups, view->ngroups,
                         class_match(kb, view, &g), zone_index(kb, view)};
    ty_err e = kube_place(kb->p, &ki, &g, c->out, c->why, c->whylen);
    if (e == TY_OK && c->out->verdict == KUBE_WAIT && c->avoid && *c->avoid) {
        gang_of(a, NULL, &g); /* nothing else fits: the avoided zone is better than none */
        e = kube_place(kb->p, &ki, &g, c->out, c->why, c->whylen);
    }
    return e;
}

/*
 * Places a (skipping its own booking) avoiding `avoid` when another zone fits; TY_OK with out
 * filled, TY_EINVAL for what can never run here, TY_ENOMEM. Takes kb->mu itself.
 */
static ty_err place(kbe *kb, backend_attempt *a, const char *avoid, kube_placement *out,
                    char *why, size_t whylen)
{
    place_ctx c = {kb, a, avoid, out, why, whylen};
    pthread_mutex_lock(&kb->mu);
    if (a->in_scratch) /* placed again: its booking in the kept scratch goes */
        kb->book_epoch++;
    unsigned long epoch = kb->book_epoch;
    pthread_mutex_unlock(&kb->mu);
    ty_err e = kube_inv_with_kept(kb->inv, kb, epoch, place_on, &c);
    if (e == TY_ENOMEM)
        why_set(why, whylen, "kube backend: the inventory: %s", ty_strerror(e));
    if (e != TY_OK)
        count_placement(kb, "invalid");
    else if (out->verdict == KUBE_WAIT)
        count_placement(kb, "wait");
    else
        count_placement(kb, out->grow_nodes ? "scale_up" : "placed");
    return e;
}

/* Keeps what placement decided on the attempt; under kb->mu or before the attempt is shared. */
static void keep_placement(backend_attempt *a, const kube_placement *pl)
{
    kb_fmt(a->zone, sizeof a->zone, "%s", pl->zone);
    a->grow_nodes = pl->grow_nodes;
    kb_fmt(a->group, sizeof a->group, "%s", pl->group);
    kb_fmt(a->grow_reason, sizeof a->grow_reason, "%s", pl->reason);
    kb_fmt(a->place_note, sizeof a->place_note, "%s", pl->note);
    a->fit_ranks = pl->fit_ranks;
    a->nneeds = pl->nneeds;
    memcpy(a->needs, pl->needs, sizeof a->needs);
}

/* The PLACEMENT event of a launched attempt: where, and in words; under kb->mu. `why` is
 * placement's reason when a restart found no place and stays where it was, else NULL. */
static void push_placement(kbe *kb, backend_attempt *a, const char *why)
{
    backend_event ev = {.kind = BACKEND_EV_PLACEMENT, .attempt = a, .rank = -1, .exit_code = -1};
    backend_placement *p = &ev.placement;
    kb_fmt(p->zone, sizeof p->zone, "%s", a->zone);
    kb_fmt(p->capacity, sizeof p->capacity, "%s", strcmp(a->capacity, "any") ? a->capacity : "");
    kb_fmt(p->gpu_type, sizeof p->gpu_type, "%s", a->gpus_per_rank ? a->gpu_type : "");
    p->fit_ranks = a->fit_ranks;
    for (int i = 0; i < a->nneeds && i < BACKEND_PLACEMENT_GROUPS && a->grow_nodes > 0; i++) {
        kb_fmt(p->groups[i].name, sizeof p->groups[i].name, "%s", a->needs[i].group);
        p->groups[i].nodes = a->needs[i].nodes;
        p->ngroups = i + 1;
    }
    p->deadline_ms = a->grow_nodes > 0 ? a->grow_deadline_ms : 0;
    if (why)
        kb_fmt(ev.detail, sizeof ev.detail, "placed in %s again, where its pods wait: %s", a->zone,
               why);
    else if (a->grow_nodes > 0)
        kb_fmt(ev.detail, sizeof ev.detail,
               "placed in %s: %d of %d rank%s fit on existing nodes, %s (up to %lld s)%s%s",
               a->zone, a->fit_ranks, a->world, a->world == 1 ? "" : "s", a->grow_reason,
               (long long)kb->p->scale_up_timeout_seconds, a->place_note[0] ? "; " : "",
               a->place_note);
    else if (a->world == 1)
        kb_fmt(ev.detail, sizeof ev.detail, "placed in %s: its rank fits on existing nodes",
               a->zone);
    else
        kb_fmt(ev.detail, sizeof ev.detail, "placed in %s: all %d ranks fit on existing nodes",
               a->zone, a->world);
    kb_push(kb, &ev, 0);
}

/* ---- reserve, launch, stop, release -------------------------------------------------------- */

static ty_err kb_reserve(backend *b, const backend_job *job, backend_attempt **out, char *why,
                         size_t whylen)
{
    kbe *kb = (kbe *)b;
    *out = NULL;
    if (!job->image || !*job->image) {
        why_set(why, whylen, "a job needs an image to run on Kubernetes");
        return TY_EINVAL;
    }
    if (job->world_size < 1 || job->world_size > 4096) {
        why_set(why, whylen, "a gang of %d ranks cannot run on Kubernetes (1 to 4096)",
                job->world_size);
        return TY_EINVAL;
    }
    backend_attempt *a = attempt_new(kb, job);
    if (!a) {
        why_set(why, whylen, "out of memory");
        return TY_ENOMEM;
    }
    kube_placement pl;
    ty_err e = place(kb, a, NULL, &pl, why, whylen);
    if (e == TY_OK && pl.verdict == KUBE_WAIT) {
        why_set(why, whylen, "%s%s%s", pl.reason, pl.note[0] ? "; " : "", pl.note);
        e = TY_EAGAIN;
    }
    if (e != TY_OK) {
        free(a->ranks);
        free(a);
        return e;
    }
    keep_placement(a, &pl);
    pthread_mutex_lock(&kb->mu);
    attempt_link(kb, a);
    kb->used_ranks += a->world;
    pthread_mutex_unlock(&kb->mu);
    *out = a;
    return TY_OK;
}

/* obj as compact JSON text, a request's body: *out new; TY_ENOMEM, or TY_EINVAL past 128
 * levels. */
static ty_err json_text(const json_t *obj, char **out)
{
    ty_buf b = {0};
    ty_err e = ty_json_write(&b, obj);
    if (e == TY_OK)
        e = ty_buf_steal(&b, out, NULL);
    ty_buf_free(&b);
    return e;
}

static void act_queue(kbe *kb, kb_action *act)
{
    act->next = NULL;
    *kb->atail = act;
    kb->atail = &act->next;
    pthread_cond_signal(&kb->cv);
}

static void launch_failed_locked(kbe *kb, backend_attempt *a, const char *msg)
{
    backend_event ev = {.kind = BACKEND_EV_LAUNCH_FAILED, .attempt = a, .rank = -1,
                        .exit_code = -1};
    kb_fmt(ev.detail, sizeof ev.detail, "%s", msg);
    a->live = 0;
    a->grow_deadline_ms = 0;
    kb->launch_failures++;
    kb->book_epoch++;
    kb_push(kb, &ev, 0);
}

static void kb_launch(backend *b, backend_attempt *a, const backend_job *job)
{
    kbe *kb = (kbe *)b;
    char msg[512] = "", avoid[64], stayed[256] = "";
    kube_placement pl = {0};

    /* The informers' threads read the attempt: it changes under the lock. */
    pthread_mutex_lock(&kb->mu);
    a->live = 0; /* the previous attempt's late events are not wanted */
    kb->book_epoch++; /* its gang may change (world, resources) */
    if (job->world_size != a->world) {
        krank *r = calloc((size_t)(job->world_size > 0 ? job->world_size : 1), sizeof *r);
        if (!r) {
            launch_failed_locked(kb, a, "out of memory");
            pthread_mutex_unlock(&kb->mu);
            return;
        }
        free(a->ranks);
        a->ranks = r;
    }
    attempt_set_job(a, job);
    kb_fmt(avoid, sizeof avoid, "%s", a->avoid);
    a->avoid[0] = '\0';
    pthread_mutex_unlock(&kb->mu);

    if (a->launched_once) {
        /* A restart goes where capacity is now; the previous zone only if nothing else fits. */
        ty_err e = place(kb, a, avoid, &pl, msg, sizeof msg);
        pthread_mutex_lock(&kb->mu);
        if (e == TY_OK && pl.verdict == KUBE_PLACE) {
            keep_placement(a, &pl);
        } else {
            a->grow_nodes = 0; /* pinned where it was: its pods wait for room there */
            a->fit_ranks = 0;
            a->nneeds = 0;
            if (e == TY_OK)
                kb_fmt(stayed, sizeof stayed, "%s%s%s", pl.reason, pl.note[0] ? "; " : "",
                       pl.note);
            else
                kb_fmt(stayed, sizeof stayed, "%s", msg);
        }
        pthread_mutex_unlock(&kb->mu);
    }
    a->launched_once = 1;

    json_t *obj = NULL, *secret = NULL;
    size_t navoid = 0;
    char **avoid_nodes = kb_excluded_copy(kb, &navoid);
    ty_err e = kube_render_job_typed(kb->p, job, a->zone[0] ? a->zone : NULL,
                                     (const char *const *)avoid_nodes, navoid, &obj, msg,
                                     sizeof msg);
    kb_excluded_free(avoid_nodes, navoid);
    /* The secrets are rendered now, while the scheduler's copy of them is at hand. */
    if (e == TY_OK && kube_render_has_secrets(job))
        e = kube_render_secret_typed(kb->p, job, &secret, msg, sizeof msg);
    /* The writer sends text: the tree is serialized and freed on this thread. */
    char *body = NULL;
    if (e == TY_OK && (e = json_text(obj, &body)) != TY_OK)
        kb_fmt(msg, sizeof msg, "the rendered workload: %s", ty_strerror(e));
    json_decref(obj);
    kb_action *act = e == TY_OK ? calloc(1, sizeof *act) : NULL;

    pthread_mutex_lock(&kb->mu);
    a->attempt = job->attempt;
    a->live = 1;
    a->stopping = 0;
    a->gang_failed = 0;
    a->unsched_since_ms = 0;
    a->unsched_msg[0] = '\0';
    memset(a->ranks, 0, (size_t)a->world * sizeof *a->ranks);
    if (!act) {
        launch_failed_locked(kb, a, e == TY_OK || e == TY_ENOMEM ? "out of memory" : msg);
        pthread_mutex_unlock(&kb->mu);
        free(body);
        json_decref(secret);
        return;
    }
    act->kind = KB_ACT_CREATE;
    kb_fmt(act->job_id, sizeof act->job_id, "%s", job->id);
    act->attempt = job->attempt;
    kube_render_name(job->id, (unsigned)job->attempt, act->name, sizeof act->name);
    act->body = body;
    act->secret = secret;
    act_queue(kb, act);
    a->grow_deadline_ms =
        a->grow_nodes > 0 ? ty_time_now_ms() + kb->p->scale_up_timeout_seconds * 1000 : 0;
    kb_growth_due(kb, a->grow_deadline_ms);
    if (a->zone[0])
        push_placement(kb, a, stayed[0] ? stayed : NULL);
    if (a->grow_nodes > 0) {
        backend_event ev = {.kind = BACKEND_EV_PENDING, .attempt = a, .rank = -1,
                            .exit_code = -1};
        kb_fmt(ev.detail, sizeof ev.detail, "%s", a->grow_reason);
        kb_push(kb, &ev, 0);
    }
    pthread_mutex_unlock(&kb->mu);
}

/* Queues the deletion of attempt `attempt` of job_id; under kb->mu. */
static void queue_delete(kbe *kb, backend_attempt *a, int hard, int report)
{
    kb_action *act = calloc(1, sizeof *act);
    if (!act) {
        if (report) {
            backend_event ev = {.kind = BACKEND_EV_STOP_FAILED, .attempt = a, .rank = -1,
                                .exit_code = -1};
            kb_fmt(ev.detail, sizeof ev.detail, "out of memory");
            kb_push(kb, &ev, 0);
        }
        return;
    }
    act->kind = KB_ACT_DELETE;
    kb_fmt(act->job_id, sizeof act->job_id, "%s", a->job_id);
    act->attempt = a->attempt;
    kube_render_name(a->job_id, (unsigned)a->attempt, act->name, sizeof act->name);
    act->grace = hard ? 0 : (int)kb->p->termination_grace_seconds;
    act->hard = hard;
    act->report = report;
    act_queue(kb, act);
}

static void kb_stop(backend *b, backend_attempt *a, int hard)
{
    kbe *kb = (kbe *)b;
    pthread_mutex_lock(&kb->mu);
    if (a->live && a->attempt > 0) {
        a->stopping = 1;
        a->grow_deadline_ms = 0;
        queue_delete(kb, a, hard, 1);
    }
    pthread_mutex_unlock(&kb->mu);
}

static void kb_release(backend *b, backend_attempt *a)
{
    kbe *kb = (kbe *)b;
    if (!a)
        return;
    pthread_mutex_lock(&kb->mu);
    attempt_unlink(kb, a);
    kb->used_ranks -= a->world;
    kb->book_epoch++;
    /* Events of this attempt not yet observed would point at freed memory: they go. */
    size_t k = 0;
    for (size_t i = 0; i < kb->qlen; i++)
        if (kb->q[i].attempt != a) {
            kb->q[k] = kb->q[i];
            kb->qt[k++] = kb->qt[i];
        }
    kb->qlen = k;
    pthread_mutex_unlock(&kb->mu);
    free(a->ranks);
    free(a);
}

static void kb_capacity(const backend *b, int *total, int *used)
{
    kbe *kb = (kbe *)b;
    pthread_mutex_lock(&kb->mu);
    *total = -1; /* the cluster's capacity is its node groups': not a count of ranks */
    *used = kb->used_ranks;
    pthread_mutex_unlock(&kb->mu);
}

typedef struct limits_ctx {
    kbe *kb;
    backend_rank_limit *out; /* out[1..n]: one per GPU type of the profile */
    size_t n;
} limits_ctx;

/* kube_inv_read()'s callback: the most GPUs a node of each type has or a group's would have,
 * and the most CPU and memory a node of each type, and one for ranks without GPUs, has. */
static ty_err limits_on(void *ud, kube_inv_view *view)
{
    limits_ctx *c = ud;
    kube_inventory ki = {view->nodes, view->nnodes, view->groups, view->ngroups, NULL, NULL};
    kube_gang g = {.count = 1};
    kube_largest big;
    if (kube_largest_node(c->kb->p, &ki, &g, &big) == TY_OK) {
        c->out[0].cpu_millis = big.cpu_millis;
        c->out[0].memory_bytes = big.memory_bytes;
    }
    for (size_t i = 0; i < c->n; i++) {
        c->out[1 + i].gpus =
            max_gpus_per_node(c->kb, view->nodes, view->nnodes, c->kb->p->gpu_types[i].name,
                              INT_MAX);
        g = (kube_gang){.count = 1, .gpus_per_rank = 1, .gpu_type = c->kb->p->gpu_types[i].name};
        if (kube_largest_node(c->kb->p, &ki, &g, &big) == TY_OK) {
            c->out[1 + i].cpu_millis = big.cpu_millis;
            c->out[1 + i].memory_bytes = big.memory_bytes;
        }
    }
    return TY_OK;
}

/*
 * Per GPU type of the profile, the GPUs of its largest node group or of its largest node, and
 * the CPU and memory of its largest node, that the inventory holds now; out[0], the CPU and
 * memory of the largest node a rank without GPUs may use (kube_largest_node()). A node that
 * joins later with more is not seen until the next start; a type none of whose nodes exists
 * yet (a group scaling from zero) has its CPU and memory not known, so not checked: the
 * profile's node groups do not say their instances' size.
 */
static size_t kb_rank_limits(const backend *b, backend_rank_limit *out, size_t max)
{
    kbe *kb = (kbe *)b;
    size_t n = 1 + kb->p->ngpu_types;
    if (max < n)
        return n;
    memset(out, 0, n * sizeof *out);
    for (size_t i = 0; i < kb->p->ngpu_types; i++)
        out[1 + i].gpu_type = kb->p->gpu_types[i].name;
    limits_ctx c = {kb, out, kb->p->ngpu_types};
    if (kube_inv_read(kb->inv, limits_on, &c) != TY_OK)
        for (size_t i = 0; i < n; i++) /* not known: not checked */
            out[i].gpus = 0, out[i].cpu_millis = 0, out[i].memory_bytes = 0;
    return n;
}

typedef struct free_ctx {
    kbe *kb;
    backend_free *out; /* one per GPU type of the profile */
} free_ctx;

/* kube_inv_with()'s callback: each type's capacity on the nodes not excluded (quarantined),
 * less what reservations booked of it that the inventory does not count on a node (pods not
 * bound yet, or ended: an attempt that ended keeps its booking until release()). */
static ty_err free_on(void *ud, kube_inv_view *view)
{
    free_ctx *c = ud;
    kbe *kb = c->kb;
    pthread_mutex_lock(&kb->mu);
    kb_mark_excluded(kb, view->nodes, view->nnodes); /* quarantined: their GPUs are not free */
    pthread_mutex_unlock(&kb->mu);
    kube_inventory ki = {view->nodes, view->nnodes, view->groups, view->ngroups, NULL,
                         zone_index(kb, view)};
    for (size_t i = 0; i < kb->p->ngpu_types; i++) {
        kube_type_capacity cap = {0, 0};
        kube_gang g = {.count = 1, .gpus_per_rank = 1, .gpu_type = kb->p->gpu_types[i].name};
        ki.match = class_match(kb, view, &g);
        if (kube_type_capacity_of(kb->p, &ki, kb->p->gpu_types[i].name, &cap) != TY_OK)
            cap = (kube_type_capacity){0, 0};
        c->out[i] = (backend_free){.kind = BACKEND_RES_GPU,
                                   .gpu_type = kb->p->gpu_types[i].name,
                                   .free = cap.free,
                                   .total = cap.total};
    }
    pthread_mutex_lock(&kb->mu);
    for (const backend_attempt *a = kb->attempts; a; a = a->next) {
        if (!a->gpus_per_rank)
            continue;
        int64_t booked = (int64_t)ranks_not_counted(view, a) * a->gpus_per_rank;
        for (size_t i = 0; i < kb->p->ngpu_types; i++)
            if (!strcmp(a->gpu_type, kb->p->gpu_types[i].name))
                c->out[i].free = c->out[i].free > booked ? c->out[i].free - booked : 0;
    }
    pthread_mutex_unlock(&kb->mu);
    return TY_OK;
}

/*
 * Per GPU type of the profile, what admission may count (placement.h:
 * kube_type_capacity_of(): the nodes, and what the node groups can still add) and what of it
 * is free: minus the GPUs of every bound pod of the cluster (any tenant's, ours included) and
 * of our reservations whose pods are not bound. CPU and memory are left to reserve(), whose
 * placement counts them node by node.
 */
static size_t kb_free_resources(const backend *b, backend_free *out, size_t max)
{
    kbe *kb = (kbe *)b;
    size_t n = kb->p->ngpu_types;
    if (n == 0 || max < n)
        return n;
    free_ctx c = {kb, out};
    if (kube_inv_with(kb->inv, free_on, &c) != TY_OK)
        return 0; /* not known now: nothing is counted this time */
    return n;
}

/* ---- the writers --------------------------------------------------------------------------- */

static void workload_path(kbe *kb, const char *name, char *buf, size_t len)
{
    if (kb->p->volcano)
        kb_fmt(buf, len, "/apis/batch.volcano.sh/v1alpha1/namespaces/%s/jobs%s%s", kb->ns,
                 name ? "/" : "", name ? name : "");
    else
        kb_fmt(buf, len, "/apis/batch/v1/namespaces/%s/jobs%s%s", kb->ns, name ? "/" : "",
                 name ? name : "");
}

static void report_launch_failure(kbe *kb, const kb_action *act, const char *msg)
{
    pthread_mutex_lock(&kb->mu);
    backend_attempt *a = kb_find(kb, act->job_id, act->attempt);
    if (a)
        launch_failed_locked(kb, a, msg);
    pthread_mutex_unlock(&kb->mu);
}

/* POSTs body (JSON text) to path; 409 AlreadyExists GETs the existing one (deterministic names:
 * ours). */
static ty_err create_or_adopt(kbe *kb, const char *path, const char *name, const char *body,
                              char *uid, size_t uidlen, int *adopted, char *err, size_t errlen)
{
    ty_kresp r = {0};
    ty_err e = ty_kclient_request(kb->c, "POST", path, body, &r, err, errlen);
    if (e == TY_EEXISTS) {
        char one[512];
        kb_fmt(one, sizeof one, "%s/%s", path, name);
        ty_kresp_clear(&r);
        e = ty_kclient_request(kb->c, "GET", one, NULL, &r, err, errlen);
        if (e == TY_OK) {
            pthread_mutex_lock(&kb->mu);
            kb->adopted++;
            pthread_mutex_unlock(&kb->mu);
            if (adopted)
                *adopted = 1;
        }
    } else if (e == TY_OK) {
        pthread_mutex_lock(&kb->mu);
        kb->created++;
        pthread_mutex_unlock(&kb->mu);
    }
    if (e == TY_OK && uid) {
        /* Of the object the server answers with (all of it, status and managed fields), only
         * its uid is read; metadata comes first. */
        static const char *const uid_path[] = {"metadata", "uid"};
        if (ty_kpick_string(r.body, r.body_len, uid_path, 2, uid, uidlen))
            uid[0] = '\0';
    }
    ty_kresp_clear(&r);
    return e;
}

typedef struct replay {
    const char *job_id;
    int attempt;
    json_t *pods;
} replay;

static ty_err collect_pod(void *ud, const json_t *pod)
{
    replay *rp = ud;
    const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, KUBE_LABEL_JOB_ID));
    const char *att = json_string_value(json_object_get(labels, KUBE_LABEL_ATTEMPT));
    if (job && att && !strcmp(job, rp->job_id) && atoi(att) == rp->attempt)
        json_array_append_new(rp->pods, json_deep_copy(pod));
    return TY_OK;
}

/*
 * The pods of an attempt as the cache holds them now, as if they had just changed: those of an
 * adopted object came before the attempt was live, and no change of theirs may follow.
 */
static void replay_pods(kbe *kb, const char *job_id, int attempt)
{
    replay rp = {job_id, attempt, json_array()};
    if (!rp.pods)
        return;
    ty_informer_foreach(kb->pods, collect_pod, &rp);
    pthread_mutex_lock(&kb->mu);
    size_t i;
    json_t *pod;
    json_array_foreach(rp.pods, i, pod)
    {
        backend_attempt *a = kb_find(kb, job_id, attempt);
        const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"),
                                                             "nodeName"));
        if (a && !a->zone[0] && node) {
            json_t *n = ty_informer_get(kb->nodes, NULL, node);
            const char *z = json_string_value(
                json_object_get(json_object_get(json_object_get(n, "metadata"), "labels"),
                                KB_LABEL_ZONE));
            kb_fmt(a->zone, sizeof a->zone, "%s", z ? z : "");
            json_decref(n);
        }
        kb_pod_changed(kb, pod, 0, 0);
    }
    pthread_mutex_unlock(&kb->mu);
    json_decref(rp.pods);
}

/* Deletes the workload just created (and, through the collector, what it owns). */
static void take_back(kbe *kb, const kb_action *act)
{
    ty_kresp r = {0};
    char path[512], del[640], derr[256];
    workload_path(kb, act->name, path, sizeof path);
    kb_fmt(del, sizeof del, "%s?propagationPolicy=Background&gracePeriodSeconds=0", path);
    ty_kclient_request(kb->c, "DELETE", del, NULL, &r, derr, sizeof derr);
    ty_kresp_clear(&r);
}

/* Creates the attempt's Secret owned by the workload with that uid; one that exists already
 * (409, an attempt adopted after a restart) is taken as it is. */
static ty_err create_secret(kbe *kb, kb_action *act, const char *uid, char *err, size_t errlen)
{
    char path[512];
    ty_err e = kube_render_set_owner(kb->p, act->secret, uid);
    if (e != TY_OK) {
        kb_fmt(err, errlen, "%s", e == TY_ENOMEM ? "out of memory"
                                                 : "the created workload has no uid");
        return e;
    }
    char *body;
    if (json_text(act->secret, &body) != TY_OK) {
        kb_fmt(err, errlen, "out of memory");
        return TY_ENOMEM;
    }
    kb_fmt(path, sizeof path, "/api/v1/namespaces/%s/secrets", kb->ns);
    e = create_or_adopt(kb, path, act->name, body, NULL, 0, NULL, err, errlen);
    free(body);
    return e;
}

/* How long the rank Service, once known to exist, is taken to exist without asking, by
 * default: one deleted by hand is made again within this, at the next launch. */
#define KB_RANK_SERVICE_RECHECK_MS 60000

/*
 * Makes sure the headless Service that names every rank (render.h) exists before a Job is
 * created: created when missing; when there (409), taken if it is headless and selects our pods,
 * refused otherwise (its ranks would get no DNS names). Asked at most once every
 * kb->svc_recheck_ms; a writer that comes while another asks waits for its answer.
 */
static ty_err ensure_rank_service(kbe *kb, char *err, size_t errlen)
{
    static const char *const ip_path[] = {"spec", "clusterIP"};
    static const char *const sel_path[] = {"spec", "selector", KUBE_LABEL_SERVICE};
    char path[512], one[640], msg[256], ip[16] = "", sel[64] = "";
    json_t *svc = NULL;
    ty_kresp r = {0};
    char *body = NULL;
    ty_err e = TY_OK;

    pthread_mutex_lock(&kb->svc_mu);
    int64_t now = ty_time_now_ms();
    if (kb->svc_known_ms && now - kb->svc_known_ms < kb->svc_recheck_ms)
        goto out;
    if ((e = kube_render_rank_service(kb->p, &svc, msg, sizeof msg)) != TY_OK ||
        (e = json_text(svc, &body)) != TY_OK) {
        kb_fmt(err, errlen, "the Service %s: %s", KUBE_RANK_SERVICE,
               e == TY_ENOMEM ? "out of memory" : msg);
        goto done;
    }
    kb_fmt(path, sizeof path, "/api/v1/namespaces/%s/services", kb->ns);
    e = ty_kclient_request(kb->c, "POST", path, body, &r, err, errlen);
    if (e == TY_OK) {
        pthread_mutex_lock(&kb->mu);
        kb->created++;
        pthread_mutex_unlock(&kb->mu);
        fprintf(stderr, "kube backend: created the headless Service %s/%s that names the ranks\n",
                kb->ns, KUBE_RANK_SERVICE);
    } else if (e == TY_EEXISTS) {
        kb_fmt(one, sizeof one, "%s/%s", path, KUBE_RANK_SERVICE);
        ty_kresp_clear(&r);
        e = ty_kclient_request(kb->c, "GET", one, NULL, &r, err, errlen);
        if (e == TY_OK &&
            (ty_kpick_string(r.body, r.body_len, ip_path, 2, ip, sizeof ip) || strcmp(ip, "None") ||
             ty_kpick_string(r.body, r.body_len, sel_path, 3, sel, sizeof sel) ||
             strcmp(sel, KUBE_RANK_SERVICE))) {
            kb_fmt(err, errlen,
                   "the Service %s/%s exists but is not headless (clusterIP None) with the "
                   "selector %s=%s: the ranks would have no DNS names; delete it and Trainyard "
                   "makes it again",
                   kb->ns, KUBE_RANK_SERVICE, KUBE_LABEL_SERVICE, KUBE_RANK_SERVICE);
            e = TY_ECONFLICT;
        }
    }
    if (e == TY_OK)
        kb->svc_known_ms = now;
done:
    ty_kresp_clear(&r);
    free(body);
    json_decref(svc);
out:
    pthread_mutex_unlock(&kb->svc_mu);
    return e;
}

static void do_create(kbe *kb, kb_action *act)
{
    char path[512], err[1024] = "", uid[128] = "";
    workload_path(kb, NULL, path, sizeof path);
    int adopted = 0;
    /* A gang whose names do not resolve cannot meet: no Job before its Service. */
    ty_err e = kb->p->volcano ? TY_OK : ensure_rank_service(kb, err, sizeof err);
    if (e == TY_OK)
        e = create_or_adopt(kb, path, act->name, act->body, uid, sizeof uid, &adopted, err,
                            sizeof err);
    if (e != TY_OK) {
        report_launch_failure(kb, act, err);
        return;
    }
    /* The Secret, owned by the workload: its pods wait for it (the kubelet's
     * CreateContainerConfigError) until it exists. After a restart it is there already. */
    if (act->secret && (e = create_secret(kb, act, uid, err, sizeof err)) != TY_OK) {
        take_back(kb, act);
        report_launch_failure(kb, act, err);
        return;
    }
    if (kb->p->volcano) {
        replay_pods(kb, act->job_id, act->attempt);
        return;
    }
    /* The pods of a Job that already existed changed before this attempt could hear of them;
     * those of a Job just created arrive as events (the attempt was live before the create). */
    if (adopted)
        replay_pods(kb, act->job_id, act->attempt);
}

typedef struct pod_names {
    const char *job_id;
    int attempt;
    char **names;
    size_t n, cap;
} pod_names;

static ty_err collect_pod_name(void *ud, const json_t *pod)
{
    pod_names *pn = ud;
    const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, KUBE_LABEL_JOB_ID));
    const char *att = json_string_value(json_object_get(labels, KUBE_LABEL_ATTEMPT));
    const char *name = json_string_value(json_object_get(json_object_get(pod, "metadata"),
                                                         "name"));
    if (!job || !att || !name || strcmp(job, pn->job_id) ||
        (pn->attempt > 0 && atoi(att) != pn->attempt))
        return TY_OK;
    if (pn->n == pn->cap) {
        size_t cap = pn->cap ? pn->cap * 2 : 8;
        char **v = realloc(pn->names, cap * sizeof *v);
        if (!v)
            return TY_ENOMEM;
        pn->names = v;
        pn->cap = cap;
    }
    if (!(pn->names[pn->n] = strdup(name)))
        return TY_ENOMEM;
    pn->n++;
    return TY_OK;
}

static void pod_names_free(pod_names *pn)
{
    for (size_t i = 0; i < pn->n; i++)
        free(pn->names[i]);
    free(pn->names);
}

/* Deletes an attempt's workload (and with hard its pods at once); TY_OK when gone or absent. */
static ty_err delete_attempt(kbe *kb, const char *job_id, int attempt, const char *name,
                             int grace, int hard, char *err, size_t errlen)
{
    char path[512], del[640];
    ty_kresp r = {0};
    workload_path(kb, name, path, sizeof path);
    if (grace >= 0)
        kb_fmt(del, sizeof del, "%s?propagationPolicy=Background&gracePeriodSeconds=%d", path,
                 grace);
    else
        kb_fmt(del, sizeof del, "%s?propagationPolicy=Background", path);
    ty_err e = ty_kclient_request(kb->c, "DELETE", del, NULL, &r, err, errlen);
    ty_kresp_clear(&r);
    if (e == TY_ENOTFOUND)
        e = TY_OK;
    if (!hard)
        return e;
    /* The garbage collector deletes the pods with the Job, but with their own grace period. */
    pod_names pn = {job_id, attempt, NULL, 0, 0};
    ty_informer_foreach(kb->pods, collect_pod_name, &pn);
    for (size_t i = 0; i < pn.n; i++) {
        char perr[256];
        kb_fmt(del, sizeof del, "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", kb->ns,
                 pn.names[i]);
        ty_err pe = ty_kclient_request(kb->c, "DELETE", del, NULL, &r, perr, sizeof perr);
        ty_kresp_clear(&r);
        if (pe != TY_OK && pe != TY_ENOTFOUND && e == TY_OK) {
            e = pe;
            kb_fmt(err, errlen, "%s", perr);
        }
    }
    pod_names_free(&pn);
    return e;
}

static void do_delete(kbe *kb, kb_action *act)
{
    char err[1024] = "";
    ty_err e = delete_attempt(kb, act->job_id, act->attempt, act->name, act->grace, act->hard,
                              err, sizeof err);
    if (!act->report)
        return;
    pthread_mutex_lock(&kb->mu);
    backend_attempt *a = kb_find(kb, act->job_id, act->attempt);
    if (a && e != TY_OK) {
        backend_event ev = {.kind = BACKEND_EV_STOP_FAILED, .attempt = a, .rank = -1,
                            .exit_code = -1};
        kb_fmt(ev.detail, sizeof ev.detail, "%s", err);
        kb_push(kb, &ev, 0);
    } else if (a) {
        /* Ranks whose pod was never seen end here: no pod event will ever say so. */
        for (int r = 0; r < a->world; r++)
            if (!a->ranks[r].pod[0] && !a->ranks[r].ended) {
                backend_event ev = {.kind = BACKEND_EV_DISRUPTED, .exit_code = -1,
                                    .disruption = BACKEND_DISRUPT_STOP_REQUESTED};
                kb_fmt(ev.detail, sizeof ev.detail, "deleted before its pod was created");
                kb_end_rank(kb, a, r, &ev, 0);
            }
    }
    pthread_mutex_unlock(&kb->mu);
}

/* Withdraws attempt a (its pods are deleted at once) so that the loop places it again; detail
 * says why. Under kb->mu. */
static void withdraw(kbe *kb, backend_attempt *a, const char *detail)
{
    queue_delete(kb, a, 1, 0);
    kb_fmt(a->avoid, sizeof a->avoid, "%s", a->zone);
    backend_event ev = {.kind = BACKEND_EV_DISRUPTED,
                        .attempt = a,
                        .rank = -1,
                        .exit_code = -1,
                        .disruption = BACKEND_DISRUPT_WITHDRAWN,
                        .ended = 1};
    kb_fmt(ev.detail, sizeof ev.detail, "%s", detail);
    for (int r = 0; r < a->world; r++)
        a->ranks[r].ended = 1;
    a->live = 0;
    a->grow_deadline_ms = 0;
    a->unsched_since_ms = 0;
    kb->withdrawn++;
    kb->book_epoch++;
    kb_push(kb, &ev, 0);
}

void kb_growth_due(kbe *kb, int64_t t)
{
    if (t > 0 && (!kb->growth_due_ms || t < kb->growth_due_ms))
        kb->growth_due_ms = t;
}

/*
 * Attempts waiting for a node group past the profile's scale_up_timeout_seconds, and attempts
 * whose pods stayed unschedulable for its unschedulable_timeout_seconds (while no group grows
 * for them), are withdrawn; under kb->mu. An attempt pinned to a zone its job names stays: there
 * is nowhere else to place it.
 */
static void check_growth(kbe *kb)
{
    int64_t now = ty_time_now_ms();
    char d[BACKEND_DETAIL_MAX];
    if (!kb->growth_due_ms || now < kb->growth_due_ms)
        return; /* no clock runs out yet: the attempts are not walked */
    kb->growth_due_ms = 0; /* found again below: the clocks still to run out */
    for (backend_attempt *a = kb->attempts; a; a = a->next) {
        int64_t unsched_at = a->unsched_since_ms
                                 ? a->unsched_since_ms + kb->p->unschedulable_timeout_seconds * 1000
                                 : 0;
        if (a->grow_deadline_ms > now)
            kb_growth_due(kb, a->grow_deadline_ms);
        if (unsched_at > now)
            kb_growth_due(kb, unsched_at);
        if (!a->live || a->stopping)
            continue;
        if (a->grow_deadline_ms && now >= a->grow_deadline_ms) {
            a->grow_deadline_ms = 0;
            int running = 0;
            for (int r = 0; r < a->world; r++)
                running += a->ranks[r].running || a->ranks[r].ended;
            if (running == a->world)
                continue;
            kb_fmt(d, sizeof d,
                   "withdrawn from %s: the nodes of group %s did not come in %lld s; placing "
                   "again",
                   a->zone, a->group[0] ? a->group : "?",
                   (long long)kb->p->scale_up_timeout_seconds);
            withdraw(kb, a, d);
            continue;
        }
        int named = a->want_zone[0] && strcmp(a->want_zone, "auto");
        if (a->grow_deadline_ms || named || !a->unsched_since_ms ||
            now < a->unsched_since_ms + kb->p->unschedulable_timeout_seconds * 1000)
            continue;
        /* The scheduler's words up to its preemption part, cut to leave room for the rest. */
        const char *pre = strstr(a->unsched_msg, ". preemption: ");
        int keep = pre ? (int)(pre - a->unsched_msg) : (int)strlen(a->unsched_msg);
        int room = (int)sizeof d - (int)strlen(a->zone) - 64;
        if (keep > room)
            keep = room > 0 ? room : 0;
        kb_fmt(d, sizeof d, "unschedulable in %s for %lld s: %.*s; placing again", a->zone,
               (long long)kb->p->unschedulable_timeout_seconds, keep, a->unsched_msg);
        withdraw(kb, a, d);
    }
}

/*
 * The first write in the queue whose job has no write in flight (so a job's writes keep the
 * order they were asked: a delete never overtakes its create); NULL when none. Unlinks it and
 * marks its job busy for writer w. Under kb->mu.
 */
static kb_action *act_take(kbe *kb, int w)
{
    for (kb_action **pp = &kb->ahead; *pp; pp = &(*pp)->next) {
        kb_action *act = *pp;
        int busy = 0;
        for (int i = 0; i < KB_WRITERS && !busy; i++)
            busy = !strcmp(kb->busy[i], act->job_id);
        if (busy)
            continue;
        *pp = act->next;
        if (!*pp)
            kb->atail = pp;
        kb_fmt(kb->busy[w], sizeof kb->busy[w], "%s", act->job_id);
        return act;
    }
    return NULL;
}

typedef struct writer_arg {
    kbe *kb;
    int w;
} writer_arg;

static void *worker_main(void *arg)
{
    ty_thread_name("ty-kube-write");
    kbe *kb = ((writer_arg *)arg)->kb;
    int w = ((writer_arg *)arg)->w;
    free(arg);
    pthread_mutex_lock(&kb->mu);
    while (!kb->quit) {
        int64_t now = ty_time_now_ms();
        if (now - kb->growth_checked_ms >= 100) {
            kb->growth_checked_ms = now;
            check_growth(kb);
        }
        kb_action *act = act_take(kb, w);
        if (!act) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&kb->cv, &kb->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&kb->mu);
        if (act->kind == KB_ACT_CREATE)
            do_create(kb, act);
        else
            do_delete(kb, act);
        free(act->body);
        json_decref(act->secret);
        free(act);
        pthread_mutex_lock(&kb->mu);
        kb->busy[w][0] = '\0';
        /* A write of the same job may have waited for this one. */
        if (kb->ahead)
            pthread_cond_broadcast(&kb->cv);
    }
    pthread_mutex_unlock(&kb->mu);
    return NULL;
}

/* ---- recover ------------------------------------------------------------------------------- */

typedef struct found_attempts {
    const char *job_id;
    int attempts[64];
    size_t n;
} found_attempts;

static ty_err collect_attempt(void *ud, const json_t *obj)
{
    found_attempts *f = ud;
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, KUBE_LABEL_JOB_ID));
    const char *att = json_string_value(json_object_get(labels, KUBE_LABEL_ATTEMPT));
    if (!job || !att || strcmp(job, f->job_id))
        return TY_OK;
    int n = atoi(att);
    for (size_t i = 0; i < f->n; i++)
        if (f->attempts[i] == n)
            return TY_OK;
    if (f->n < sizeof f->attempts / sizeof f->attempts[0])
        f->attempts[f->n++] = n;
    return TY_OK;
}

static ty_err count_left(void *ud, const json_t *pod)
{
    found_attempts *f = ud;
    const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, KUBE_LABEL_JOB_ID));
    const char *att = json_string_value(json_object_get(labels, KUBE_LABEL_ATTEMPT));
    if (job && att && !strcmp(job, f->job_id) && atoi(att) != f->attempts[0])
        f->n++;
    return TY_OK;
}

static ty_err kb_recover(backend *b, const backend_job *job, int may_adopt, int grace_ms,
                         backend_recovery *out, char *why, size_t whylen)
{
    kbe *kb = (kbe *)b;
    found_attempts f = {job->id, {0}, 0};
    memset(out, 0, sizeof *out);
    ty_informer_foreach(kb->jobs, collect_attempt, &f);
    ty_informer_foreach(kb->pods, collect_attempt, &f);
    int keep = 0;
    for (size_t i = 0; i < f.n; i++) {
        char name[KUBE_NAME_MAX], err[1024] = "";
        out->found++;
        if (may_adopt && f.attempts[i] == job->attempt) {
            keep = job->attempt;
            continue;
        }
        if (kube_render_name(job->id, (unsigned)f.attempts[i], name, sizeof name) != TY_OK)
            continue;
        ty_err e = delete_attempt(kb, job->id, f.attempts[i], name, 0, 1, err, sizeof err);
        if (e != TY_OK) {
            why_set(why, whylen, "cannot delete attempt %d of job %s: %s", f.attempts[i], job->id,
                    err);
            return e;
        }
    }
    /* Wait (bounded) until the pods of what was not adopted are gone from the cache. */
    int64_t until = ty_time_now_ms() + (grace_ms > 0 ? grace_ms : 0) + 30000;
    for (;;) {
        found_attempts left = {job->id, {keep}, 0};
        ty_informer_foreach(kb->pods, count_left, &left);
        if (!left.n)
            break;
        if (ty_time_now_ms() > until) {
            why_set(why, whylen, "%zu pods of job %s's old attempts are still there", left.n,
                    job->id);
            return TY_EAGAIN;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!keep)
        return TY_OK;

    backend_attempt *a = attempt_new(kb, job);
    if (!a) {
        why_set(why, whylen, "out of memory");
        return TY_ENOMEM;
    }
    a->attempt = keep;
    a->live = 1;
    a->launched_once = 1;
    pthread_mutex_lock(&kb->mu);
    attempt_link(kb, a);
    kb->used_ranks += a->world;
    pthread_mutex_unlock(&kb->mu);
    replay_pods(kb, job->id, keep);
    out->adopted = a;
    return TY_OK;
}

/* ---- logs ---------------------------------------------------------------------------------- */

/*
 * A rank's log is the file kube_logs.c writes from its pod's log, read through ranklog.h as
 * the local backend's is (the notice of dropped output included), whether the pod still
 * exists or not. While that file is being written, a read that finds nothing new waits a
 * little for it (KB_LOG_WAIT_MS), longer once the container ended and the stream takes its
 * last bytes (KB_LOG_DRAIN_MS): a follower told the rank ended then reads its whole log.
 */
#define KB_LOG_WAIT_MS 250
#define KB_LOG_DRAIN_MS 3000
#define KB_LOG_POLL_MS 20

struct backend_log {
    kube_logs *kl;
    ranklog_reader *r;
    char job_id[32];
    int attempt, rank;
    char note[320];               /* the attempt's logs were pruned: this line stands for them */
    size_t note_len, note_off;
};

static int is_job_id(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n != 26)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]))
            return 0;
    return 1;
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
    if (b >= (1ull << 30) && b % (1ull << 30) == 0)
        kb_fmt(buf, len, "%lluGi", (unsigned long long)(b >> 30));
    else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
        kb_fmt(buf, len, "%lluMi", (unsigned long long)(b >> 20));
    else
        kb_fmt(buf, len, "%llu bytes", (unsigned long long)b);
}

static ty_err kb_log_open(backend *b, const char *job_id, int attempt, int rank, long tail_lines,
                          backend_log **out)
{
    kbe *kb = (kbe *)b;
    char path[PATH_MAX];
    *out = NULL;
    if (!kb->logs || !is_job_id(job_id) || attempt < 1 || rank < 0 ||
        kube_logs_path(kb->logs, job_id, attempt, rank, path, sizeof path) != 0)
        return TY_ENOTFOUND;
    backend_log *l = calloc(1, sizeof *l);
    if (!l)
        return TY_ENOMEM;
    l->kl = kb->logs;
    kb_fmt(l->job_id, sizeof l->job_id, "%s", job_id);
    l->attempt = attempt;
    l->rank = rank;
    ty_err e = ranklog_reader_open(path, tail_lines, &l->r);
    /* A stream just registered may not have made its file yet. */
    for (int i = 0; e == TY_ENOTFOUND && i < KB_LOG_WAIT_MS / KB_LOG_POLL_MS &&
                    kube_logs_state(kb->logs, job_id, attempt, rank) != KUBE_LOG_IDLE;
         i++) {
        struct timespec ts = {0, KB_LOG_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
        e = ranklog_reader_open(path, tail_lines, &l->r);
    }
    char dir[PATH_MAX], bytes_s[32], limit_s[32];
    uint64_t bytes = 0, limit = 0;
    int ranks = 0;
    if (e == TY_ENOTFOUND && kube_logs_attempt_dir(kb->logs, job_id, attempt, dir, sizeof dir) == 0 &&
        ranklog_pruned(dir, &bytes, &limit, &ranks) && rank < ranks) {
        fmt_bytes(bytes_s, sizeof bytes_s, bytes);
        fmt_bytes(limit_s, sizeof limit_s, limit);
        int n = snprintf(l->note, sizeof l->note,
                         "[trainyard] the logs of attempt %d (%s, all ranks) were deleted: the "
                         "job's logs keep the newest attempts within %s\n",
                         attempt, bytes_s, limit_s);
        l->note_len = n > 0 && (size_t)n < sizeof l->note ? (size_t)n : 0;
        e = TY_OK;
    }
    if (e != TY_OK) {
        free(l);
        return e;
    }
    *out = l;
    return TY_OK;
}

static long kb_log_read(backend_log *l, char *buf, size_t max)
{
    if (!l->r) {
        size_t n = l->note_len - l->note_off < max ? l->note_len - l->note_off : max;
        memcpy(buf, l->note + l->note_off, n);
        l->note_off += n;
        return (long)n;
    }
    long n = ranklog_read(l->r, buf, max);
    int64_t waited = 0;
    while (n == 0) {
        kube_log_state st = kube_logs_state(l->kl, l->job_id, l->attempt, l->rank);
        if (st == KUBE_LOG_IDLE ||
            waited >= (st == KUBE_LOG_DRAINING ? KB_LOG_DRAIN_MS : KB_LOG_WAIT_MS))
            break;
        struct timespec ts = {0, KB_LOG_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
        waited += KB_LOG_POLL_MS;
        n = ranklog_read(l->r, buf, max);
    }
    return n;
}

static void kb_log_close(backend_log *l)
{
    if (!l)
        return;
    ranklog_reader_close(l->r);
    free(l);
}

/* ---- metrics ------------------------------------------------------------------------------- */

ty_err kube_backend_metrics(backend *b, ty_buf *out)
{
    kbe *kb = (kbe *)b;
    ty_err e = ty_kclient_stats_render(kb->c, out);
    size_t unknown_group = 0, unknown_gpu = 0;
    if (e == TY_OK && kb_unknown_counts(kb, &unknown_group, &unknown_gpu) == TY_OK)
        e = ty_buf_printf(out,
                          "# TYPE trainyard_cluster_unknown_nodes gauge\n"
                          "trainyard_cluster_unknown_nodes{reason=\"node_group\"} %zu\n"
                          "trainyard_cluster_unknown_nodes{reason=\"gpu_product\"} %zu\n",
                          unknown_group, unknown_gpu);
    ty_informer *infs[4] = {kb->nodes, kb->pods, kb->jobs, kb->bound};
    const char *names[4] = {"nodes", "pods", "jobs", "bound_pods"};
    ty_informer_stats st[4];
    for (int i = 0; i < 4; i++)
        ty_informer_stats_get(infs[i], &st[i]);
    /* One family after the other, as the text format wants them grouped. */
    static const char *const fam[4][2] = {
        {"trainyard_kube_informer_watch_restarts_total", "counter"},
        {"trainyard_kube_informer_relists_total", "counter"},
        {"trainyard_kube_informer_events_total", "counter"},
        {"trainyard_kube_informer_objects", "gauge"},
    };
    for (int f = 0; f < 4 && e == TY_OK; f++) {
        e = ty_buf_printf(out, "# TYPE %s %s\n", fam[f][0], fam[f][1]);
        for (int i = 0; i < 4 && e == TY_OK; i++) {
            uint64_t v = f == 0 ? st[i].watch_restarts : f == 1 ? st[i].expired
                       : f == 2 ? st[i].events : st[i].objects;
            e = ty_buf_printf(out, "%s{informer=\"%s\"} %llu\n", fam[f][0], names[i],
                              (unsigned long long)v);
        }
    }
    pthread_mutex_lock(&kb->mu);
    if (e == TY_OK)
        e = ty_buf_printf(out,
                          "# TYPE trainyard_kube_objects_created_total counter\n"
                          "trainyard_kube_objects_created_total %llu\n"
                          "# TYPE trainyard_kube_objects_adopted_total counter\n"
                          "trainyard_kube_objects_adopted_total %llu\n"
                          "# TYPE trainyard_kube_launch_failures_total counter\n"
                          "trainyard_kube_launch_failures_total %llu\n"
                          "# TYPE trainyard_kube_withdrawn_total counter\n"
                          "trainyard_kube_withdrawn_total %llu\n"
                          "# TYPE trainyard_kube_placements_total counter\n",
                          (unsigned long long)kb->created, (unsigned long long)kb->adopted,
                          (unsigned long long)kb->launch_failures,
                          (unsigned long long)kb->withdrawn);
    const char *k;
    json_t *v;
    json_object_foreach(kb->placements, k, v)
    {
        if (e == TY_OK)
            e = ty_buf_printf(out, "trainyard_kube_placements_total{result=\"%s\"} %lld\n", k,
                              (long long)json_integer_value(v));
    }
    if (e == TY_OK && kb->logs) {
        kube_logs_stats ls;
        kube_logs_stats_get(kb->logs, &ls);
        e = ty_buf_printf(out,
                          "# TYPE trainyard_kube_log_streams gauge\n"
                          "trainyard_kube_log_streams %zu\n"
                          "# TYPE trainyard_kube_log_streams_open gauge\n"
                          "trainyard_kube_log_streams_open %zu\n"
                          "# TYPE trainyard_kube_log_bytes_total counter\n"
                          "trainyard_kube_log_bytes_total %llu\n"
                          "# TYPE trainyard_kube_log_lines_skipped_total counter\n"
                          "trainyard_kube_log_lines_skipped_total %llu\n",
                          ls.streams, ls.open, (unsigned long long)ls.bytes,
                          (unsigned long long)ls.skipped_lines);
    }
    if (e == TY_OK)
        e = ty_buf_puts(out, "# TYPE trainyard_kube_event_delay_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < KB_HIST && e == TY_OK; i++) {
        cum += kb->hist[i];
        e = ty_buf_printf(out, "trainyard_kube_event_delay_seconds_bucket{le=\"%g\"} %llu\n",
                          hist_bounds[i], (unsigned long long)cum);
    }
    if (e == TY_OK)
        e = ty_buf_printf(out,
                          "trainyard_kube_event_delay_seconds_bucket{le=\"+Inf\"} %llu\n"
                          "trainyard_kube_event_delay_seconds_sum %.6f\n"
                          "trainyard_kube_event_delay_seconds_count %llu\n",
                          (unsigned long long)kb->hist_count, kb->hist_sum,
                          (unsigned long long)kb->hist_count);
    pthread_mutex_unlock(&kb->mu);
    return e;
}

/* ---- life ---------------------------------------------------------------------------------- */

static void kb_free(backend *b)
{
    kbe *kb = (kbe *)b;
    if (!kb)
        return;
    if (kb->nworkers) {
        pthread_mutex_lock(&kb->mu);
        kb->quit = 1;
        pthread_cond_broadcast(&kb->cv);
        pthread_mutex_unlock(&kb->mu);
        for (int i = 0; i < kb->nworkers; i++)
            pthread_join(kb->workers[i], NULL);
    }
    ty_informer_free(kb->nodes);
    ty_informer_free(kb->pods);
    ty_informer_free(kb->jobs);
    ty_informer_free(kb->bound);
    kube_logs_free(kb->logs); /* after the informers: their callbacks feed it */
    kube_inv_free(kb->inv);
    for (size_t i = 0; i < kb->nmatches; i++)
        free(kb->matches[i].match.v);
    free(kb->zones.v);
    free(kb->unknown.v);
    free(kb->buckets);
    while (kb->ahead) {
        kb_action *act = kb->ahead;
        kb->ahead = act->next;
        free(act->body);
        json_decref(act->secret);
        free(act);
    }
    while (kb->attempts) {
        backend_attempt *a = kb->attempts;
        kb->attempts = a->next;
        free(a->ranks);
        free(a);
    }
    ty_kclient_free(kb->c);
    if (kb->efd >= 0)
        close(kb->efd);
    free(kb->q);
    free(kb->qt);
    json_decref(kb->placements);
    json_decref(kb->pod_pick);
    json_decref(kb->job_pick);
    json_decref(kb->excluded);
    kb_excluded_free(kb->excluded_names, kb->nexcluded);
    json_decref(kb->unknown_logged);
    pthread_cond_destroy(&kb->cv);
    pthread_mutex_destroy(&kb->svc_mu);
    pthread_mutex_destroy(&kb->mu);
    free(kb);
}

static const backend_ops kb_ops = {
    .name = "kubernetes",
    .adopts = 1,
    .reserve = kb_reserve,
    .launch = kb_launch,
    .event_fd = kb_event_fd,
    .observe = kb_observe,
    .stop = kb_stop,
    .release = kb_release,
    .recover = kb_recover,
    .log_open = kb_log_open,
    .log_read = kb_log_read,
    .log_close = kb_log_close,
    .capacity = kb_capacity,
    .rank_limits = kb_rank_limits,
    .free_resources = kb_free_resources,
    .cluster = kb_cluster,
    .exclude_nodes = kb_exclude_nodes,
    .free = kb_free,
};

/* The first list of nodes is what there is, not capacity that grew: no CAPACITY for it. */
static void nodes_synced(void *ud)
{
    kbe *kb = ud;
    pthread_mutex_lock(&kb->mu);
    kb->nodes_synced = 1;
    pthread_mutex_unlock(&kb->mu);
}

/* Every informer keeps slim records (transform): what the backend reads of its objects; and
 * the watches of pods and Jobs, which change with every job, parse only that (pick). */
static ty_err start_informer(kbe *kb, const char *path, ty_inf_event_cb cb,
                             ty_inf_transform_cb transform, const json_t *pick,
                             ty_informer **out, int64_t backoff_ms, char *err, size_t len)
{
    ty_informer_opts o;
    ty_informer_opts_default(&o);
    o.path = path;
    o.on_event = cb;
    if (cb == kb_node_event)
        o.on_synced = nodes_synced;
    o.transform = transform;
    o.pick = pick;
    /* Of a workload only its metadata is kept (kb_job_slim()): the server sends no more. */
    o.metadata_only = transform == kb_job_slim;
    o.ud = kb;
    if (backoff_ms > 0) {
        o.backoff_base_ms = backoff_ms;
        o.backoff_max_ms = backoff_ms * 8;
    }
    return ty_informer_start(kb->c, &o, out, err, len);
}

ty_err kube_backend_new(const kube_backend_config *cfg, backend **out, char *err, size_t len)
{
    *out = NULL;
    if (!cfg || !cfg->kubeconfig || !cfg->profile) {
        why_set(err, len, "kube backend: a kubeconfig and a cluster profile are required");
        return TY_EINVAL;
    }
    kbe *kb = calloc(1, sizeof *kb);
    if (!kb) {
        why_set(err, len, "out of memory");
        return TY_ENOMEM;
    }
    kb->base.ops = &kb_ops;
    kb->p = cfg->profile;
    kb->efd = -1;
    kb->atail = &kb->ahead;
    pthread_mutex_init(&kb->mu, NULL);
    pthread_mutex_init(&kb->svc_mu, NULL);
    kb->svc_recheck_ms = cfg->rank_service_recheck_ms > 0 ? cfg->rank_service_recheck_ms
                                                          : KB_RANK_SERVICE_RECHECK_MS;
    pthread_cond_init(&kb->cv, NULL);
    kb_fmt(kb->ns, sizeof kb->ns, "%s", cfg->namespace_ ? cfg->namespace_ : cfg->profile->namespace);
    ty_err e = TY_OK;
    if (!(kb->placements = json_object()) || !(kb->pod_pick = kb_pod_pick()) ||
        !(kb->job_pick = kb_job_pick()) || !(kb->excluded = json_object()) ||
        !(kb->unknown_logged = json_object()))
        e = TY_ENOMEM;
    if (e == TY_OK && (kb->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        why_set(err, len, "kube backend: eventfd: %s", strerror(errno));
        e = TY_EIO;
    }
    if (e == TY_OK) {
        const char **names = calloc(kb->p->ngroups ? kb->p->ngroups : 1, sizeof *names);
        for (size_t g = 0; names && g < kb->p->ngroups; g++)
            names[g] = kb->p->groups[g].name;
        e = names ? kube_inv_new(names, kb->p->ngroups, &kb->inv) : TY_ENOMEM;
        free(names);
        if (e != TY_OK)
            why_set(err, len, "out of memory");
    }
    if (e == TY_OK)
        e = ty_kclient_new(cfg->kubeconfig, cfg->client, &kb->c, err, len);
    if (e == TY_OK && cfg->logs_dir) {
        kube_logs_opts lo = {.client = kb->c, .namespace_ = kb->ns, .dir = cfg->logs_dir,
                             .rank_limit = cfg->log_limit, .job_limit = cfg->job_log_limit};
        e = kube_logs_new(&lo, &kb->logs, err, len);
    }
    char path[512];
    if (e == TY_OK)
        e = start_informer(kb, "/api/v1/nodes", kb_node_event, kb_node_slim, NULL, &kb->nodes,
                           cfg->informer_backoff_ms, err, len);
    /* Every pod of the namespace, ours (labelled trainyard.io/job-id) and any other: the
     * inventory counts them all from here, since the bound pods' informer leaves this
     * namespace out (each pod of ours is parsed once, not twice). */
    kb_fmt(path, sizeof path, "/api/v1/namespaces/%s/pods", kb->ns);
    if (e == TY_OK)
        e = start_informer(kb, path, kb_pod_event, kb_pod_slim, kb->pod_pick, &kb->pods,
                           cfg->informer_backoff_ms, err, len);
    workload_path(kb, NULL, path, sizeof path);
    kb_fmt(path + strlen(path), sizeof path - strlen(path), "?labelSelector=%s",
             "trainyard.io%2Fjob-id");
    if (e == TY_OK)
        e = start_informer(kb, path, NULL, kb_job_slim, kb->job_pick, &kb->jobs,
                           cfg->informer_backoff_ms, err, len);
    /* Every pod bound to a node and not finished, whoever's, as the scheduler and the
     * cluster-autoscaler list them: the GPUs other tenants use are not free. The selector is
     * escaped whole ("!=" and "," included), as client-go sends it. The namespace's own pods
     * come from the informer above. */
    kb_fmt(path, sizeof path, "/api/v1/pods?fieldSelector=%s%%2Cmetadata.namespace%%21%%3D%s",
           KB_BOUND_PODS_SELECTOR, kb->ns);
    if (e == TY_OK)
        e = start_informer(kb, path, kb_bound_pod_event, kb_bound_pod_slim, kb->pod_pick,
                           &kb->bound, cfg->informer_backoff_ms, err, len);
    if (e == TY_OK) {
        int64_t wait = cfg->sync_timeout_ms > 0 ? cfg->sync_timeout_ms : 30000;
        int64_t until = ty_time_now_ms() + wait;
        ty_informer *infs[4] = {kb->nodes, kb->pods, kb->jobs, kb->bound};
        const char *what[4] = {"nodes", "pods", "jobs", "bound pods"};
        for (int i = 0; i < 4 && e == TY_OK; i++) {
            int64_t left = until - ty_time_now_ms();
            if (!ty_informer_wait_synced(infs[i], left > 0 ? left : 0)) {
                char last[768];
                ty_informer_last_error(infs[i], last, sizeof last);
                if (i == 0)
                    why_set(err, len, "cannot list nodes: %s", last[0] ? last : "no answer");
                else if (i == 3)
                    why_set(err, len, "cannot list the pods of all namespaces (the GPUs other "
                            "tenants use): %s", last[0] ? last : "no answer");
                else
                    why_set(err, len, "cannot list %s in namespace %s: %s", what[i], kb->ns,
                            last[0] ? last : "no answer");
                e = TY_EAGAIN;
            }
        }
    }
    for (int i = 0; e == TY_OK && i < KB_WRITERS; i++) {
        writer_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            why_set(err, len, "out of memory");
            e = TY_ENOMEM;
            break;
        }
        *wa = (writer_arg){kb, i};
        if (pthread_create(&kb->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            why_set(err, len, "kube backend: cannot start its writer threads");
            e = TY_EIO;
        } else {
            kb->nworkers++;
        }
    }
    if (e != TY_OK) {
        kb_free(&kb->base);
        return e;
    }
    *out = &kb->base;
    return TY_OK;
}
