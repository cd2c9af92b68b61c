/*
 * sched_admit.c - admission's snapshot and its decisions carried out (sched_int.h).
 */
#include "scheduler/sched_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_quantity.h"
#include "common/ty_time.h"

/*
 * Admission across teams: the loop gathers a snapshot and scheduler/admit decides (see
 * admit.h). A line is a team's queue's jobs outside sweeps, or one sweep's trials in that
 * queue (store_pending_lines, one index seek each); the snapshot holds each line's head, read
 * from a small first page, and admit_round() asks for the next job of a line only after it
 * admitted or failed the head (next()), so a round reads a few pages per line whatever the
 * number of jobs waiting. The resources are the backend's GPU types (free_resources(), else
 * the types rank_limits() names, uncounted) plus cpu and memory; the teams come from the
 * store, their usage from the jobs this loop holds (ADMITTED to CANCELLING: after a restart,
 * the recovered ones, before any admission). reserve() stays the final word: its "not now"
 * is NoCapacity with its own words, its "never" fails the job. Every head not admitted gets
 * its pending_reason (reason, message, position, team_position), written with the round's
 * changes when it changed; a Waiting event tells a person when the reason or its words
 * change (not for a queue's limit, a sweep's parallelism or a head behind another, which are
 * the line's own business).
 */
#define ADMIT_ANY_GPU "any" /* the resource of GPUs of no type where the type is not implied */

typedef struct wline {
    store_pending_line key; /* borrowed from the round's list */
    store_job *page;        /* owned; rows [0, pos) were handed to the policy */
    size_t n, pos;
    int reads, want; /* pages read this round; the last one's size asked */
    int team;        /* index in the snapshot's teams; -1: unknown team */
} wline;

typedef struct said {
    char id[STORE_ID_LEN + 1];
    char *queue; /* its queue (owned) */
    char *json;  /* the pending_reason last written (owned) */
    char *note;  /* the reason and message last told in a Waiting event (owned) */
} said;

typedef struct old_page {
    store_job *p;
    size_t n;
} old_page;

typedef struct actx {
    sched *s;
    wline *lines;
    size_t nlines;
    old_page *old; /* pages used up this round: the ids the policy holds stay valid */
    size_t nold, capold;
    sjob **made; /* jobs booked or refused for good by reserve() this round */
    size_t nmade, capmade;
    admit_resource res[ADMIT_MAX_RES];
    char resnames[ADMIT_MAX_RES][64];
    size_t nres, cpu, mem; /* cpu and memory: their indices */
    int read_failed;
} actx;

static ty_err ptr_push(void ***a, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        void **g = realloc(*a, c * sizeof *g);
        if (!g)
            return TY_ENOMEM;
        *a = g;
        *cap = c;
    }
    (*a)[(*n)++] = p;
    return TY_OK;
}

/* The index of GPU type `type` (NULL: none named) in the snapshot's resources; one is added,
 * uncounted, for a type the backend did not name. -1 when there is no room. */
static int gpu_res(actx *c, const char *type)
{
    int only = -1, ngpu = 0;
    for (size_t i = 0; i < c->nres; i++) {
        if (c->res[i].kind != ADMIT_RES_GPU)
            continue;
        if (strcmp(c->resnames[i], ADMIT_ANY_GPU) != 0) {
            ngpu++;
            only = (int)i;
        }
        if (type && strcmp(c->resnames[i], type) == 0)
            return (int)i;
    }
    if (!type && ngpu == 1)
        return only; /* GPUs of no type on a backend of one type are of that type */
    if (!type)
        type = ADMIT_ANY_GPU;
    for (size_t i = 0; i < c->nres; i++)
        if (c->res[i].kind == ADMIT_RES_GPU && strcmp(c->resnames[i], type) == 0)
            return (int)i;
    if (c->nres >= ADMIT_MAX_RES)
        return -1;
    snprintf(c->resnames[c->nres], sizeof c->resnames[c->nres], "%s", type);
    c->res[c->nres] = (admit_resource){c->resnames[c->nres], ADMIT_RES_GPU, ADMIT_MAX_QTY};
    return (int)c->nres++;
}

static int64_t clamp_qty(double v)
{
    if (!(v > 0))
        return 0;
    return v >= (double)ADMIT_MAX_QTY ? ADMIT_MAX_QTY + 1 : (int64_t)(v + 0.5);
}

/* A gang's request: world x (GPUs of its type, millicores, bytes). 0 on success. */
static int request_of(actx *c, int world, int gpus, const char *type, double cores, double bytes,
                      int64_t req[ADMIT_MAX_RES])
{
    memset(req, 0, ADMIT_MAX_RES * sizeof *req);
    if (gpus > 0) {
        int g = gpu_res(c, type);
        if (g < 0)
            return -1;
        req[g] = (int64_t)world * gpus;
    }
    req[c->cpu] = clamp_qty(cores * 1000.0 * world);
    req[c->mem] = clamp_qty(bytes * world);
    return 0;
}

/* The policy's view of a stored PENDING job; -1 for a spec it cannot read (never in a store
 * the API filled: the line then counts as empty this round). */
static int row_to_admit(actx *c, const store_job *row, admit_job *out)
{
    memset(out, 0, sizeof *out);
    out->id = row->id;
    out->priority = row->priority;
    out->seq = row->seq;
    out->preempted = row->preempted;
    json_t *spec = json_loads(row->spec_json, 0, NULL);
    const json_t *res = json_object_get(spec, "resources");
    const json_t *gpu = json_object_get(res, "gpu");
    const char *cpu = json_string_value(json_object_get(res, "cpu"));
    const char *mem = json_string_value(json_object_get(res, "memory"));
    int world = (int)json_integer_value(json_object_get(json_object_get(spec, "workers"), "count"));
    double cores = 0, bytes = 0;
    int rc = -1;
    if (!spec || world < 1 || (cpu && ty_quantity_parse(cpu, strlen(cpu), &cores) != TY_OK) ||
        (mem && ty_quantity_parse(mem, strlen(mem), &bytes) != TY_OK))
        goto out;
    rc = request_of(c, world, (int)json_integer_value(json_object_get(gpu, "count")),
                    json_string_value(json_object_get(gpu, "type")), cores, bytes, out->req);
out:
    json_decref(spec);
    if (rc != 0)
        out->req[0] = -1; /* the policy takes the line as empty */
    return rc;
}

/* Makes line l's next row available (page[pos]); 1, 0 when the line has no more, -1 on a
 * store error. A used-up page is kept until the round ends: the policy holds its ids. */
static int wline_fill(actx *c, wline *l)
{
    if (l->pos < l->n)
        return 1;
    if (l->reads > 0 && l->n < (size_t)l->want)
        return 0; /* the last page was short: the line has no more */
    int64_t ap = 0, as = 0;
    if (l->n) {
        ap = l->page[l->n - 1].priority;
        as = l->page[l->n - 1].seq;
    }
    if (l->page) {
        if (c->nold == c->capold) {
            size_t cap = c->capold ? c->capold * 2 : 16;
            old_page *g = realloc(c->old, cap * sizeof *g);
            if (!g) {
                c->read_failed = 1;
                return -1;
            }
            c->old = g;
            c->capold = cap;
        }
        c->old[c->nold++] = (old_page){l->page, l->n};
        l->page = NULL;
    }
    l->n = l->pos = 0;
    l->want = l->reads++ == 0 ? PENDING_FIRST_PAGE : PENDING_PAGE;
    if (store_jobs_pending_line(c->s->st, l->key.team, l->key.queue, l->key.sweep, ap, as, l->want,
                                &l->page, &l->n) != TY_OK) {
        c->read_failed = 1;
        return -1;
    }
    return l->n > 0;
}

/* Moves line l to its next job that this loop does not hold already (a held one has a change
 * waiting to be written, or is the head whose Waiting note is being written: it stays the
 * head). 1 with *row set, 0 when none, -1 on a store error. */
static int wline_head(actx *c, wline *l, const store_job **row)
{
    for (;;) {
        int got = wline_fill(c, l);
        if (got <= 0)
            return got;
        const store_job *r = &l->page[l->pos];
        const sjob *held = sched_job_find(c->s, r->id);
        if (!held || held->state == JOB_PENDING) {
            *row = r;
            return 1;
        }
        l->pos++;
    }
}

static int next_cb(void *ctx, size_t line, admit_job *out)
{
    actx *c = ctx;
    wline *l = &c->lines[line];
    l->pos++; /* the head was admitted or failed */
    const store_job *row = NULL;
    int got = wline_head(c, l, &row);
    if (got <= 0)
        return got;
    return row_to_admit(c, row, out) == 0 ? 1 : -1;
}

static admit_fit reserve_cb(void *ctx, size_t line, const admit_job *job, char *why, size_t whylen)
{
    actx *c = ctx;
    sched *s = c->s;
    const wline *l = &c->lines[line];
    if (l->pos >= l->n || strcmp(l->page[l->pos].id, job->id) != 0) {
        snprintf(why, whylen, "internal: the line's head moved");
        return ADMIT_FIT_NOT_NOW;
    }
    if (sched_job_find(s, job->id)) {
        snprintf(why, whylen, "the job's last change is being written");
        return ADMIT_FIT_NOT_NOW;
    }
    sjob *j = NULL;
    if (sched_job_new(&l->page[l->pos], &j) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot load a job", "{s:s}", "job_id", job->id);
        snprintf(why, whylen, "the job cannot be loaded");
        return ADMIT_FIT_NOT_NOW;
    }
    backend_job bj;
    sched_job_view(j, j->attempt + 1, &bj);
    ty_err e = s->be->ops->reserve(s->be, &bj, &j->res, why, whylen);
    if ((e == TY_OK || e == TY_EINVAL) &&
        ptr_push((void ***)&c->made, &c->nmade, &c->capmade, j) != TY_OK) {
        if (j->res)
            s->be->ops->release(s->be, j->res);
        j->res = NULL;
        e = TY_ENOMEM;
    }
    if (e == TY_OK)
        return ADMIT_FIT_OK;
    if (e == TY_EINVAL)
        return ADMIT_FIT_NEVER;
    sched_job_free(j);
    if (!why[0])
        snprintf(why, whylen, "the backend cannot book it now: %s", ty_strerror(e));
    return ADMIT_FIT_NOT_NOW;
}

static sjob *made_take(actx *c, const char *id)
{
    for (size_t i = 0; i < c->nmade; i++)
        if (c->made[i] && strcmp(c->made[i]->id, id) == 0) {
            sjob *j = c->made[i];
            c->made[i] = NULL;
            return j;
        }
    return NULL;
}

/* The resources: the backend's counted ones, else the GPU types it names; then cpu, memory. */
static void admit_resources(actx *c)
{
    const backend *be = c->s->be;
    backend_free fr[ADMIT_MAX_RES];
    size_t n = be->ops->free_resources ? be->ops->free_resources(be, NULL, 0) : 0;
    int have_cpu = 0, have_mem = 0;
    c->nres = 0;
    if (n > 0 && n <= ADMIT_MAX_RES - 3 && be->ops->free_resources(be, fr, n) == n) {
        for (size_t i = 0; i < n; i++) {
            size_t k = c->nres++;
            admit_res_kind kind = fr[i].kind == BACKEND_RES_GPU   ? ADMIT_RES_GPU
                                  : fr[i].kind == BACKEND_RES_CPU ? ADMIT_RES_CPU
                                                                  : ADMIT_RES_MEMORY;
            snprintf(c->resnames[k], sizeof c->resnames[k], "%s",
                     kind == ADMIT_RES_GPU   ? (fr[i].gpu_type ? fr[i].gpu_type : ADMIT_ANY_GPU)
                     : kind == ADMIT_RES_CPU ? "cpu"
                                             : "memory");
            int64_t f = fr[i].free < 0               ? 0
                        : fr[i].free > ADMIT_MAX_QTY ? ADMIT_MAX_QTY
                                                     : fr[i].free;
            c->res[k] = (admit_resource){c->resnames[k], kind, f};
            if (kind == ADMIT_RES_CPU && !have_cpu) {
                have_cpu = 1;
                c->cpu = k;
            } else if (kind == ADMIT_RES_MEMORY && !have_mem) {
                have_mem = 1;
                c->mem = k;
            }
        }
    } else if (be->ops->rank_limits) {
        backend_rank_limit lim[ADMIT_MAX_RES];
        size_t m = be->ops->rank_limits(be, NULL, 0);
        if (m > 0 && m <= ADMIT_MAX_RES - 2 && be->ops->rank_limits(be, lim, m) == m)
            for (size_t i = 0; i < m; i++) {
                if (!lim[i].gpu_type)
                    continue;
                size_t k = c->nres++;
                snprintf(c->resnames[k], sizeof c->resnames[k], "%s", lim[i].gpu_type);
                c->res[k] = (admit_resource){c->resnames[k], ADMIT_RES_GPU, ADMIT_MAX_QTY};
            }
    }
    if (!have_cpu) {
        c->cpu = c->nres++;
        snprintf(c->resnames[c->cpu], sizeof c->resnames[c->cpu], "cpu");
        c->res[c->cpu] = (admit_resource){c->resnames[c->cpu], ADMIT_RES_CPU, ADMIT_MAX_QTY};
    }
    if (!have_mem) {
        c->mem = c->nres++;
        snprintf(c->resnames[c->mem], sizeof c->resnames[c->mem], "memory");
        c->res[c->mem] = (admit_resource){c->resnames[c->mem], ADMIT_RES_MEMORY, ADMIT_MAX_QTY};
    }
}

/* The resource index a team's quota entry ("gpu/<type>", "cpu", "memory") names; -1: none
 * this snapshot has (nothing asks for it). */
static int quota_res(actx *c, const char *name)
{
    for (size_t i = 0; i < c->nres; i++) {
        if (c->res[i].kind == ADMIT_RES_GPU) {
            if (strncmp(name, "gpu/", 4) == 0 && strcmp(name + 4, c->resnames[i]) == 0)
                return (int)i;
        } else if (strcmp(name, c->resnames[i]) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* Fills team t from its stored row (resources known now; GPU types added later get the
 * quota's default: see team_res_default). */
static void team_fill(actx *c, const store_team *row, admit_team *t)
{
    memset(t, 0, sizeof *t);
    t->name = row->name;
    t->weight = row->weight > 0 ? row->weight : 1;
    t->preempt_within = row->priority_preemption;
    for (size_t i = 0; i < ADMIT_MAX_RES; i++) {
        t->nominal[i] = row->has_quota ? 0 : ADMIT_UNLIMITED;
        t->borrow[i] = row->has_quota ? 0 : ADMIT_UNLIMITED;
    }
    if (!row->has_quota)
        return;
    for (size_t i = 0; i < row->nres; i++) {
        int k = quota_res(c, row->res[i].resource);
        if (k < 0)
            continue;
        if (row->res[i].quota >= 0)
            t->nominal[k] = row->res[i].quota;
        if (row->res[i].borrowing_limit >= 0) /* a resource without one borrows nothing */
            t->borrow[k] = row->res[i].borrowing_limit;
    }
}

/* Whether j holds capacity: admitted and not ended, or ended with gang still there. */
static int job_holds(const sjob *j)
{
    return j->state != JOB_PENDING && (!job_state_is_terminal(j->state) || j->alive > 0);
}

static said *said_find(sched *s, const char *id)
{
    for (size_t i = 0; i < s->nsaid; i++)
        if (strcmp(s->said[i].id, id) == 0)
            return &s->said[i];
    return NULL;
}

/* Writes head p's pending_reason (and a Waiting event when its words changed) with the
 * round's changes. */
static void tell_pending(actx *c, round *r, const admit_snapshot *snap, const admit_pending *p,
                         said *now)
{
    sched *s = c->s;
    char msg[512];
    admit_message(snap, p, msg, sizeof msg);
    const char *name = admit_reason_name(p->reason);
    if (p->reason == ADMIT_PREEMPTED)
        name = "Preempted";
    json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "reason", name, "message", msg, "position",
                          (json_int_t)p->position, "team_position", (json_int_t)p->team_position);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    char note[600];
    snprintf(note, sizeof note, "%s\n%s", name, msg);
    memcpy(now->id, p->job.id, sizeof now->id);
    now->queue = strdup(c->lines[p->line].key.queue);
    now->json = text;
    now->note = strdup(note);
    const said *before = said_find(s, p->job.id);
    int json_changed = !text || !before || !before->json || strcmp(before->json, text) != 0;
    int note_changed = !before || !before->note || strcmp(before->note, note) != 0;
    int tells = p->reason != ADMIT_QUEUE_LIMIT && p->reason != ADMIT_SWEEP_PARALLELISM &&
                p->reason != ADMIT_BEHIND && p->reason != ADMIT_ROUND_CAP;
    if (!text || (!json_changed && !(tells && note_changed)))
        return;
    const wline *l = &c->lines[p->line];
    if (l->pos >= l->n || strcmp(l->page[l->pos].id, p->job.id) != 0 ||
        sched_job_find(s, p->job.id)) {
        free(now->json); /* not written: said again next round */
        free(now->note);
        now->json = now->note = NULL;
        return;
    }
    sjob *j = NULL;
    if (sched_job_new(&l->page[l->pos], &j) != TY_OK) {
        free(now->json);
        free(now->note);
        now->json = now->note = NULL;
        return;
    }
    sched_job_link(s, j);
    change *ch = sched_push(r, j, JOB_PENDING, "Waiting", "%s", msg);
    if (!ch) {
        sched_job_forget(s, j);
        return;
    }
    ch->act = ACT_DISCARD;
    ch->u.note = tells && note_changed;
    ch->preason = strdup(text);
    ch->u.pending_reason = ch->preason;
}

/* Admits PENDING jobs as the policy decides; see admit.h and the comment above. */
void sched_admit(sched *s, round *r, int64_t now)
{
    actx c = {.s = s};
    store_pending_line *keys = NULL;
    size_t nkeys = 0;
    store_team *teams = NULL;
    size_t nteams = 0;
    admit_team *at = NULL;
    admit_room *rooms = NULL;
    char(*roomnames)[32] = NULL;
    size_t nrooms = 0;
    admit_line *al = NULL;
    admit_running *run = NULL;
    size_t nrun = 0;
    said *saidnow = NULL;
    size_t nsaidnow = 0;
    admit_result res;
    admit_result_init(&res);
    s->admit_wanted = 0;
    s->read_failed = 0;
    admit_resources(&c);
    /* The lines. */
    for (;;) {
        store_pending_line *page = NULL;
        size_t got = 0;
        ty_err e =
            store_pending_lines(s->st, nkeys ? &keys[nkeys - 1] : NULL, QUEUES_PAGE, &page, &got);
        if (e == TY_OK && got > 0) {
            store_pending_line *grown = realloc(keys, (nkeys + got) * sizeof *keys);
            if (!grown) {
                store_pending_lines_free(page, got);
                e = TY_ENOMEM;
            } else {
                keys = grown;
                memcpy(keys + nkeys, page, got * sizeof *page);
                nkeys += got;
                free(page);
            }
        }
        if (e != TY_OK)
            goto failed;
        if (got < QUEUES_PAGE)
            break;
    }
    if (nkeys == 0)
        goto out;
    if (store_teams_list(s->st, &teams, &nteams) != TY_OK)
        goto failed;
    if (!(c.lines = calloc(nkeys, sizeof *c.lines)) || !(al = calloc(nkeys, sizeof *al)) ||
        !(at = calloc(nteams ? nteams : 1, sizeof *at)) ||
        !(rooms = calloc(2 * nkeys, sizeof *rooms)) ||
        !(roomnames = calloc(2 * nkeys, sizeof *roomnames)) ||
        !(saidnow = calloc(nkeys, sizeof *saidnow)))
        goto failed;
    /* Heads first: a head may name a GPU type the backend did not (its resource is added). */
    size_t nl = 0;
    for (size_t i = 0; i < nkeys; i++) {
        wline *l = &c.lines[nl];
        l->key = keys[i];
        l->team = -1;
        for (size_t t = 0; t < nteams; t++)
            if (strcmp(teams[t].name, keys[i].team) == 0)
                l->team = (int)t;
        if (l->team < 0) {
            TY_LOG(TY_LOG_WARN, "scheduler: pending jobs of a team that does not exist wait",
                   "{s:s}", "team", keys[i].team);
            continue;
        }
        const store_job *row = NULL;
        int got = wline_head(&c, l, &row);
        if (got < 0)
            goto failed;
        admit_line *a = &al[nl];
        a->team = (size_t)l->team;
        a->room[0] = a->room[1] = -1;
        if (got == 1) {
            a->has_head = 1;
            row_to_admit(&c, row, &a->head);
        }
        /* Its rooms: the queue's, and the sweep's. */
        for (int k = 0; k < 2; k++) {
            char name[32];
            admit_room_kind kind = k == 0 ? ADMIT_ROOM_QUEUE : ADMIT_ROOM_SWEEP;
            if (k == 1 && !l->key.sweep)
                break;
            size_t x;
            for (x = 0; x < nrooms; x++) {
                if (rooms[x].kind != kind)
                    continue;
                if (k == 0 ? strcmp(rooms[x].name, l->key.queue) == 0
                           : (snprintf(name, sizeof name, "%lld", (long long)l->key.sweep),
                              strcmp(rooms[x].name, name) == 0))
                    break;
            }
            if (x == nrooms) {
                if (k == 0) {
                    int limit = sched_limit_of(s, l->key.queue);
                    const queue_count *q = sched_queue_find(s, l->key.queue);
                    rooms[x] =
                        (admit_room){kind, l->key.queue, limit < 0 ? -1 : limit, q ? q->active : 0};
                } else {
                    snprintf(roomnames[x], sizeof roomnames[x], "%lld", (long long)l->key.sweep);
                    rooms[x] = (admit_room){kind, roomnames[x], l->key.parallelism,
                                            sched_sweep_active(s, l->key.sweep)};
                }
                nrooms++;
            }
            a->room[k] = (int)x;
        }
        nl++;
    }
    c.nlines = nl;
    for (size_t t = 0; t < nteams; t++)
        team_fill(&c, &teams[t], &at[t]);
    /* Usage: the jobs this loop holds, by team. */
    size_t nheld = 0;
    for (sjob *j = s->jobs; j; j = j->next)
        nheld += job_holds(j) || j->res;
    if (nheld && !(run = calloc(nheld, sizeof *run)))
        goto failed;
    for (sjob *j = s->jobs; j; j = j->next) {
        if (!j->team)
            continue;
        if (!job_holds(j)) {
            /* Its end was decided this round: its reservation goes back after the commit.
             * What it frees counts as coming back (a stopping job), never as a victim. */
            if (!j->res)
                continue;
            size_t t;
            for (t = 0; t < nteams && strcmp(teams[t].name, j->team) != 0; t++)
                ;
            int64_t req[ADMIT_MAX_RES];
            if (t == nteams || request_of(&c, j->world, j->gpus_per_rank, j->gpu_type, j->cpu_cores,
                                          j->memory_bytes, req) != 0)
                continue;
            run[nrun] = (admit_running){.id = j->id,
                                        .team = t,
                                        .priority = j->priority,
                                        .started_ms = j->admitted_ms,
                                        .stopping = 1};
            memcpy(run[nrun].req, req, sizeof req);
            nrun++;
            continue;
        }
        size_t t;
        for (t = 0; t < nteams && strcmp(teams[t].name, j->team) != 0; t++)
            ;
        if (t == nteams)
            continue;
        int64_t req[ADMIT_MAX_RES];
        if (request_of(&c, j->world, j->gpus_per_rank, j->gpu_type, j->cpu_cores, j->memory_bytes,
                       req) != 0)
            continue;
        for (size_t k = 0; k < c.nres; k++)
            at[t].used[k] += req[k];
        if (!j->launched || j->alive <= 0)
            continue; /* only a gang that runs can be preempted */
        run[nrun] = (admit_running){.id = j->id,
                                    .team = t,
                                    .priority = j->priority,
                                    .started_ms = j->admitted_ms,
                                    .stopping = j->stop_asked || j->cause != END_NONE ||
                                                j->state == JOB_CANCELLING ||
                                                job_state_is_terminal(j->state)};
        memcpy(run[nrun].req, req, sizeof req);
        nrun++;
    }
    /* A GPU type seen first in a head or a held job takes each team's quota default. */
    for (size_t t = 0; t < nteams; t++) {
        admit_team keep = at[t];
        team_fill(&c, &teams[t], &at[t]);
        memcpy(at[t].used, keep.used, sizeof keep.used);
    }
    /* A team without a quota that neither waits nor holds anything takes no part: else its
     * unlimited quota would make every cohort total unlimited (see DESIGN). */
    size_t *map = calloc(nteams ? nteams : 1, sizeof *map);
    if (!map)
        goto failed;
    for (size_t i = 0; i < nl; i++)
        map[al[i].team] = 1;
    for (size_t i = 0; i < nrun; i++)
        map[run[i].team] = 1;
    size_t kept = 0;
    for (size_t t = 0; t < nteams; t++) {
        int part = map[t] || teams[t].has_quota;
        map[t] = kept;
        if (part)
            at[kept++] = at[t];
    }
    for (size_t i = 0; i < nl; i++)
        al[i].team = map[al[i].team];
    for (size_t i = 0; i < nrun; i++)
        run[i].team = map[run[i].team];
    free(map);
    admit_snapshot snap = {
        .res = c.res,
        .nres = c.nres,
        .teams = at,
        .nteams = kept,
        .rooms = rooms,
        .nrooms = nrooms,
        .lines = al,
        .nlines = nl,
        .running = run,
        .nrunning = nrun,
        .max_admits = MAX_ADMITS_PER_ROUND,
        .next = next_cb,
        .reserve = reserve_cb,
        .ctx = &c,
    };
    char err[256] = "";
    if (admit_round(&snap, &res, err, sizeof err) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "scheduler: admission refused its snapshot", "{s:s}", "error", err);
        goto failed;
    }
    if (c.read_failed)
        goto failed;
    for (size_t i = 0; i < res.nfailed; i++) {
        sjob *j = made_take(&c, res.failed[i].job.id);
        if (!j)
            continue;
        sched_job_link(s, j);
        sched_set_act(sched_push(r, j, JOB_FAILED, "Unschedulable", "%s", res.failed[i].why),
                      ACT_DISCARD);
    }
    for (size_t i = 0; i < res.nadmitted; i++) {
        const admit_admitted *a = &res.admitted[i];
        sjob *j = made_take(&c, a->job.id);
        if (!j)
            continue;
        j->admitted_ms = now;
        sched_job_link(s, j);
        pthread_mutex_lock(&s->mu);
        s->admissions++;
        s->admission_wait_ms += (uint64_t)(now > j->created_ms ? now - j->created_ms : 0);
        pthread_mutex_unlock(&s->mu);
        const admit_team *t = &at[al[a->line].team];
        sched_push(r, j, JOB_ADMITTED, "Admitted", "queue %s, priority %lld%s%s%s", j->queue,
                   (long long)a->job.priority, strcmp(t->name, STORE_TEAM_DEFAULT) ? ", team " : "",
                   strcmp(t->name, STORE_TEAM_DEFAULT) ? t->name : "",
                   a->borrows ? " (borrowing idle quota of other teams)" : "");
        sched_record_begin(s, j, now);
        change *ch = sched_push(r, j, JOB_STARTING, "Starting", "attempt %d: %d rank%s",
                                j->attempt + 1, j->world, j->world == 1 ? "" : "s");
        sched_set_act(ch, ACT_LAUNCH);
    }
    for (size_t i = 0; i < res.npending; i++) {
        tell_pending(&c, r, &snap, &res.pending[i], &saidnow[nsaidnow]);
        nsaidnow++;
        if (res.pending[i].reason == ADMIT_ROUND_CAP)
            s->admit_wanted = 1; /* more may fit: the next round goes on */
    }
    /* The victims: stopped gracefully; their gangs' ends put them back in line. */
    for (size_t i = 0; i < res.npreemptions; i++) {
        const admit_preemption *p = &res.preemptions[i];
        sjob *j = sched_job_find(s, run[p->victim].id);
        if (!j || j->cause != END_NONE || j->stop_asked)
            continue;
        const char *team = at[al[p->for_line].team].name;
        char msg[256];
        if (p->kind == ADMIT_RECLAIM)
            snprintf(msg, sizeof msg, "preempted for job %s: team %s reclaims its quota", p->for_id,
                     team);
        else
            snprintf(msg, sizeof msg, "preempted for job %s of higher priority in team %s",
                     p->for_id, team);
        j->preempt_kind = p->kind;
        sched_stop_gang(s, j, END_PREEMPTED, msg, now);
        sched_touch(s, j); /* its stop is asked in this round's act phase */
        TY_LOG(TY_LOG_INFO, "scheduler: preempting a job", "{s:s, s:s, s:s}", "job_id", j->id,
               "for", p->for_id, "kind", p->kind == ADMIT_RECLAIM ? "reclaim" : "priority");
    }
    /* A head of the last round that is no head now (a job of its line went ahead of it, a
     * preempted one came back) and was not admitted: its reason is taken back (a job deeper in
     * a line has none of its own). */
    for (size_t i = 0; i < s->nsaid; i++) {
        const said *old = &s->said[i];
        int still = 0;
        for (size_t k = 0; k < nsaidnow && !still; k++)
            still = strcmp(saidnow[k].id, old->id) == 0;
        for (size_t k = 0; k < res.nadmitted && !still; k++)
            still = strcmp(res.admitted[k].job.id, old->id) == 0;
        for (size_t k = 0; k < res.nfailed && !still; k++)
            still = strcmp(res.failed[k].job.id, old->id) == 0;
        if (still || !old->json || !old->queue || sched_job_find(s, old->id))
            continue;
        sjob *j = calloc(1, sizeof *j);
        if (!j || !(j->queue = strdup(old->queue))) {
            sched_job_free(j);
            continue;
        }
        memcpy(j->id, old->id, sizeof j->id);
        j->state = JOB_PENDING;
        sched_job_link(s, j);
        change *ch = sched_push(r, j, JOB_PENDING, NULL, NULL);
        if (!ch) {
            sched_job_forget(s, j);
            continue;
        }
        ch->act = ACT_DISCARD;
        if ((ch->preason = strdup("")))
            ch->u.pending_reason = ch->preason;
    }
    /* What was said is kept for the heads of this round only. */
    for (size_t i = 0; i < s->nsaid; i++) {
        free(s->said[i].json);
        free(s->said[i].note);
        free(s->said[i].queue);
    }
    free(s->said);
    s->said = saidnow;
    s->nsaid = nsaidnow;
    saidnow = NULL;
    nsaidnow = 0;
    goto out;
failed:
    /* The store could not be read: admission is tried again after a pause. */
    s->admit_wanted = 1;
    s->read_failed = 1;
out:
    for (size_t i = 0; i < c.nmade; i++)
        if (c.made[i]) {
            if (c.made[i]->res)
                s->be->ops->release(s->be, c.made[i]->res);
            sched_job_free(c.made[i]);
        }
    free(c.made);
    for (size_t i = 0; i < c.nold; i++)
        store_jobs_free(c.old[i].p, c.old[i].n);
    free(c.old);
    for (size_t i = 0; c.lines && i < nkeys; i++) /* lines read before a failure too */
        store_jobs_free(c.lines[i].page, c.lines[i].n);
    free(c.lines);
    for (size_t i = 0; i < nsaidnow; i++) {
        free(saidnow[i].json);
        free(saidnow[i].note);
        free(saidnow[i].queue);
    }
    free(saidnow);
    admit_result_free(&res);
    free(run);
    free(al);
    free(rooms);
    free(roomnames);
    free(at);
    store_teams_free(teams, nteams);
    store_pending_lines_free(keys, nkeys);
}

void sched_admit_free(sched *s)
{
    for (size_t i = 0; i < s->nsaid; i++) {
        free(s->said[i].json);
        free(s->said[i].note);
        free(s->said[i].queue);
    }
    free(s->said);
    s->said = NULL;
    s->nsaid = 0;
}
