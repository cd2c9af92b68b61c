/*
 * sched.c - the reconcile loop (see sched.h for what it guarantees).
 *
 * Its parts, one answer per file (what they share is in sched_int.h): this file holds the
 * jobs, the round and its phases; sched_record.c the attempt record; sched_admit.c the
 * admission snapshot and its decisions carried out (the policy is admit.c); sched_recover.c
 * the takeover of what a previous server process left; sched_nodes.c the node ledger and
 * quarantine (the policy is quarantine.c).
 *
 * The scheduler thread owns every `sjob` (one per job it holds: ADMITTED
 * through CANCELLING) and runs rounds in four phases:
 *
 *   observe the change feed (submissions, cancels) and the backend's events
 *           (ranks placed, pending, running, exited, disrupted; launches and
 *           stops that failed; capacity that grew)
 *   decide  timers (the hard stop after the grace period, backoff, timeouts),
 *           what each job's state must become, and which PENDING jobs to
 *           admit. Deciding only records: changes for the store, and on each
 *           job the backend calls it wants (launch, stop). The one backend call
 *           it makes is reserve(), a booking in the backend's own memory that
 *           admission needs to know what fits; a booking whose change does not
 *           commit is kept for the retry or released when the job is forgotten
 *   commit  every decision of the round with one store_jobs_update()
 *   act     after the commit, for the jobs whose changes committed (or that
 *           had none): launch, stop, release and forget
 *
 * A decision is a `change`: one job's update for the store plus the action
 * to take once it committed. If the store refuses an update because the job
 * moved (TY_ECONFLICT: a client cancelled it meanwhile), the job is read
 * again and the next round decides afresh; nothing was launched for it. If
 * the store fails (busy, I/O), nothing of the round is acted on for the jobs
 * it touched: their changes are tried again next round, after a pause, and
 * their wanted backend calls wait with them.
 *
 * The attempt record (the JSON the API shows as current_attempt and lists
 * under /attempts) is rebuilt from the sjob whenever a rank or the attempt
 * changes, and written with the round's commit.
 *
 * Job tokens. Every attempt's ranks get a token of their own in
 * TRAINYARD_TOKEN, with which they report metrics for their job and nothing
 * else. The commit phase mints it for each transition into STARTING (a side
 * effect, so not while deciding) and the store keeps only its SHA-256, written
 * with that transition, which revokes the previous attempt's token. The
 * secret lives in the sjob from the commit to launch() and is wiped once the
 * backend has its copy: it is never stored, logged or put in a record. A
 * commit that fails mints again when it is retried. Beside it, launch() mints
 * the attempt's TRAINYARD_RENDEZVOUS_SECRET, with which its ranks admit only
 * each other into their gang; that one is not even hashed into the store.
 *
 * Which jobs a round visits. A round decides the jobs something happened to, not
 * every job held: those an event or a cancel concerns, those admission linked or
 * preempted, those whose changes the store refused or failed, and those still busy
 * after the last round (a record to write, a RUNNING to commit). sched_touch() puts a
 * job on the `touched` list; the round moves the list to `visiting`, decides it, and
 * afterwards puts each job back on `touched` if it is still busy, or on `blocked` if it
 * waits for capacity to restart (those are decided every round, as a capacity event or a
 * release may let them go). Timers need no event: `due_ms` is the earliest timer of any
 * job (kept as jobs are decided), and the first round at or after it decides every job
 * and finds the next one. So does the first round, and every round while stopping.
 *
 * News waits a little. An event that changes only what a job's record and events say
 * (where the backend placed the attempt, the node a rank was given, why it waits, a rank
 * that started while others have not) makes the job news_only. The first such job after a
 * quiet spell is decided at once; those that follow within SCHED_NEWS_HOLD_MS of it are
 * `held` and decided together when it has passed, so that a burst of launches writes its
 * placements in a few commits, not one each. Anything else that touches a held job (it
 * runs, fails, is cancelled) decides it at the next round with its news, in order.
 *
 * Threads: everything here runs on the scheduler thread except
 * sched_get_stats() and sched_log_*(), which read `mu`-protected fields:
 * the job list and each rank's state (for follow).
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
#include "common/ty_hash.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_mem.h"
#include "common/ty_quantity.h"
#include "common/ty_thread.h"
#include "common/ty_time.h"

/* ---- small helpers -------------------------------------------------------- */

static void wake(sched *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n; /* a full counter already means "wake up" */
}

static void on_store_change(void *ud)
{
    wake(ud);
}

int sched_limit_of(const sched *s, const char *queue)
{
    for (size_t i = 0; i < s->nlimits; i++)
        if (strcmp(s->limits[i].queue, queue) == 0)
            return s->limits[i].limit;
    return s->default_limit;
}

/* The count of a queue the scheduler has held jobs of, or NULL. */
queue_count *sched_queue_find(sched *s, const char *queue)
{
    for (size_t i = 0; i < s->nqueues; i++)
        if (strcmp(s->queues[i].name, queue) == 0)
            return &s->queues[i];
    return NULL;
}

/* The count of a queue, added at 0 when new; NULL when out of memory. */
static queue_count *queue_get(sched *s, const char *queue)
{
    queue_count *found = sched_queue_find(s, queue);
    if (found)
        return found;
    if (s->nqueues == s->capqueues) {
        size_t cap = s->capqueues ? s->capqueues * 2 : 8;
        queue_count *q = realloc(s->queues, cap * sizeof *q);
        if (!q)
            return NULL;
        s->queues = q;
        s->capqueues = cap;
    }
    char *name = strdup(queue);
    if (!name)
        return NULL;
    s->queues[s->nqueues] = (queue_count){name, 0};
    return &s->queues[s->nqueues++];
}

/* The trials of sweep `sweep` held here. */
int sched_sweep_active(const sched *s, int64_t sweep)
{
    for (size_t i = 0; i < s->nsweeps; i++)
        if (s->sweeps[i].sweep == sweep)
            return s->sweeps[i].active;
    return 0;
}

/* Counts one trial of `sweep` more (delta 1) or less (-1). A count that cannot grow for want
 * of memory only lets a sweep run more trials at once than it asked for. */
static void sweep_add(sched *s, int64_t sweep, int delta)
{
    for (size_t i = 0; i < s->nsweeps; i++) {
        if (s->sweeps[i].sweep != sweep)
            continue;
        s->sweeps[i].active += delta;
        if (s->sweeps[i].active <= 0)
            s->sweeps[i] = s->sweeps[--s->nsweeps];
        return;
    }
    if (delta <= 0)
        return;
    if (s->nsweeps == s->capsweeps) {
        size_t cap = s->capsweeps ? s->capsweeps * 2 : 8;
        sweep_count *g = realloc(s->sweeps, cap * sizeof *g);
        if (!g)
            return;
        s->sweeps = g;
        s->capsweeps = cap;
    }
    s->sweeps[s->nsweeps++] = (sweep_count){sweep, delta};
}

static size_t bucket_of(const sched *s, const char *id)
{
    return (size_t)(ty_fnv1a_str(id) & (s->nbuckets - 1));
}

sjob *sched_job_find(sched *s, const char *id)
{
    if (!s->nbuckets) { /* no memory for the buckets: the list */
        for (sjob *j = s->jobs; j; j = j->next)
            if (strcmp(j->id, id) == 0)
                return j;
        return NULL;
    }
    for (sjob *j = s->buckets[bucket_of(s, id)]; j; j = j->hnext)
        if (strcmp(j->id, id) == 0)
            return j;
    return NULL;
}

static size_t res_bucket(const sched *s, const backend_attempt *a)
{
    uint64_t h = (uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing */
    return (size_t)(h >> 32) & (s->nbuckets - 1);
}

/* Puts every job of the list in n buckets, each chain in the list's order, and in as many
 * by reservation; under s->mu. */
static int rehash(sched *s, size_t n)
{
    sjob **b = calloc(n, sizeof *b), **rb = calloc(n, sizeof *rb);
    if (!b || !rb) {
        free(b);
        free(rb);
        return -1;
    }
    free(s->buckets);
    free(s->rbuckets);
    s->buckets = b;
    s->rbuckets = rb;
    s->nbuckets = n;
    for (sjob *j = s->jobs; j; j = j->next) {
        sjob **p = &s->buckets[bucket_of(s, j->id)];
        while (*p)
            p = &(*p)->hnext;
        j->hnext = NULL;
        *p = j;
        j->rkey = NULL;
        if (j->res) {
            size_t r = res_bucket(s, j->res);
            j->rkey = j->res;
            j->rnext = rb[r];
            rb[r] = j;
        }
    }
    return 0;
}

/* Takes j out of the reservation index. */
static void res_unindex(sched *s, sjob *j)
{
    if (!j->rkey)
        return;
    for (sjob **p = &s->rbuckets[res_bucket(s, j->rkey)]; *p; p = &(*p)->rnext)
        if (*p == j) {
            *p = j->rnext;
            break;
        }
    j->rnext = NULL;
    j->rkey = NULL;
}

/* Puts j in the reservation index under its reservation. */
static void res_index(sched *s, sjob *j)
{
    res_unindex(s, j);
    if (!j->res)
        return;
    size_t b = res_bucket(s, j->res);
    j->rkey = j->res;
    j->rnext = s->rbuckets[b];
    s->rbuckets[b] = j;
}

/* The job whose reservation is a. The index is a cache checked against j->res: a job is
 * put in it when linked, or when found through the list (its reservation changed). */
static sjob *job_by_res(sched *s, const backend_attempt *a)
{
    if (s->nbuckets)
        for (sjob *j = s->rbuckets[res_bucket(s, a)]; j; j = j->rnext)
            if (j->rkey == a && j->res == a)
                return j;
    for (sjob *j = s->jobs; j; j = j->next)
        if (j->res == a) {
            if (s->nbuckets)
                res_index(s, j);
            return j;
        }
    return NULL;
}

/* ---- which jobs a round visits (see the top of this file) ------------------------ */

static void list_add(sjob **head, sjob *j, int which)
{
    j->tnext = *head;
    if (*head)
        (*head)->tpprev = &j->tnext;
    *head = j;
    j->tpprev = head;
    j->on = which;
}

static void list_del(sjob *j)
{
    if (!j->tpprev)
        return;
    *j->tpprev = j->tnext;
    if (j->tnext)
        j->tnext->tpprev = j->tpprev;
    j->tnext = NULL;
    j->tpprev = NULL;
    j->on = ON_NONE;
}

void sched_touch(sched *s, sjob *j)
{
    j->news_only = 0;
    if (j->on == ON_TOUCHED)
        return;
    list_del(j);
    list_add(&s->touched, j, ON_TOUCHED);
}

/* Like sched_touch(), for news alone: a job already on a list stays where it is. */
static void touch_news(sched *s, sjob *j)
{
    if (j->on != ON_NONE)
        return;
    list_add(&s->touched, j, ON_TOUCHED);
    j->news_only = 1;
}

/* Frees what the ranks own and makes them all pending again. */
void sched_ranks_reset(sjob *j)
{
    for (int r = 0; r < j->world; r++) {
        free(j->ranks[r].pod);
        free(j->ranks[r].node);
        j->ranks[r] = (srank){.exit_code = -1};
    }
}

void sched_job_free(sjob *j)
{
    if (!j)
        return;
    if (j->ranks)
        sched_ranks_reset(j);
    free(j->volumes);
    if (j->env)
        for (char **e = j->env; *e; e++)
            free(*e);
    free(j->env);
    free(j->argv);
    free(j->ranks);
    free(j->queue);
    free(j->team);
    json_decref(j->spec);
    json_decref(j->placement);
    explicit_bzero(j->token, sizeof j->token);
    free(j);
}

/* Builds a job from its stored row: the spec's fields a backend needs. */
ty_err sched_job_new(const store_job *row, sjob **out)
{
    sjob *j = calloc(1, sizeof *j);
    if (!j)
        return TY_ENOMEM;
    ty_err e = TY_ENOMEM;
    memcpy(j->id, row->id, sizeof j->id);
    j->state = row->state;
    j->attempt = row->attempt;
    j->restarts = row->restarts;
    j->sweep = row->sweep;
    j->priority = row->priority;
    j->admitted_ms = row->updated_at_ms;
    j->created_ms = row->created_at_ms;
    if (!(j->queue = strdup(row->queue)) ||
        !(j->team = strdup(row->team ? row->team : STORE_TEAM_DEFAULT)))
        goto fail;
    json_error_t jerr;
    j->spec = json_loads(row->spec_json, 0, &jerr);
    e = TY_EINTERNAL; /* the store holds only specs the API validated */
    if (!json_is_object(j->spec))
        goto fail;
    const json_t *cmd = json_object_get(j->spec, "command");
    const json_t *args = json_object_get(j->spec, "args");
    const json_t *env = json_object_get(j->spec, "env");
    const json_t *workers = json_object_get(j->spec, "workers");
    const json_t *res = json_object_get(j->spec, "resources");
    const json_t *gpu = json_object_get(res, "gpu");
    const json_t *restart = json_object_get(j->spec, "restart");
    size_t nargv = json_array_size(cmd) + json_array_size(args);
    j->world = (int)json_integer_value(json_object_get(workers, "count"));
    if (nargv == 0 || j->world < 1)
        goto fail;
    j->gpus_per_rank =
        json_is_object(gpu) ? (int)json_integer_value(json_object_get(gpu, "count")) : 0;
    j->gpu_type = json_is_object(gpu) ? json_string_value(json_object_get(gpu, "type")) : NULL;
    j->restart_max = (int)json_integer_value(json_object_get(restart, "max"));
    j->backoff_s = (int)json_integer_value(json_object_get(restart, "backoff_seconds"));
    j->timeout_s = json_integer_value(json_object_get(j->spec, "timeout_seconds"));
    const json_t *place = json_object_get(j->spec, "placement");
    j->image = json_string_value(json_object_get(j->spec, "image"));
    j->cpu = json_string_value(json_object_get(res, "cpu"));
    j->memory = json_string_value(json_object_get(res, "memory"));
    j->zone = json_string_value(json_object_get(place, "zone"));
    j->capacity = json_string_value(json_object_get(place, "capacity"));
    if ((j->cpu && ty_quantity_parse(j->cpu, strlen(j->cpu), &j->cpu_cores) != TY_OK) ||
        (j->memory && ty_quantity_parse(j->memory, strlen(j->memory), &j->memory_bytes) != TY_OK))
        goto fail;
    const json_t *vols = json_object_get(j->spec, "volumes");
    const json_t *ttl = json_object_get(j->spec, "ttl_seconds_after_finished");
    j->name = json_string_value(json_object_get(j->spec, "name"));
    j->ncommand = (int)json_array_size(cmd);
    j->has_ttl = json_is_integer(ttl);
    j->ttl_s = json_integer_value(ttl);

    e = TY_ENOMEM;
    if ((j->nvolumes = json_array_size(vols)) > 0) {
        if (!(j->volumes = calloc(j->nvolumes, sizeof *j->volumes)))
            goto fail;
        for (size_t i = 0; i < j->nvolumes; i++) {
            const json_t *vol = json_array_get(vols, i);
            j->volumes[i] = (backend_volume){
                .claim = json_string_value(json_object_get(vol, "claim")),
                .mount = json_string_value(json_object_get(vol, "mount")),
                .read_only = json_is_true(json_object_get(vol, "read_only")),
            };
        }
    }
    if (!(j->argv = calloc(nargv + 1, sizeof *j->argv)) ||
        !(j->env = calloc(json_object_size(env) + 1, sizeof *j->env)) ||
        !(j->ranks = calloc((size_t)j->world, sizeof *j->ranks)))
        goto fail;
    size_t n = 0, i;
    json_t *v;
    json_array_foreach(cmd, i, v) j->argv[n++] = (char *)json_string_value(v);
    json_array_foreach(args, i, v) j->argv[n++] = (char *)json_string_value(v);
    const char *k;
    n = 0;
    json_object_foreach((json_t *)env, k, v)
    {
        /* A secret entry ({"value": null, "secret": true}) has its value in the store only:
         * launch() opens it. */
        if (!json_is_string(v))
            continue;
        size_t len = strlen(k) + strlen(json_string_value(v)) + 2;
        if (!(j->env[n] = malloc(len)))
            goto fail;
        snprintf(j->env[n++], len, "%s=%s", k, json_string_value(v));
    }
    sched_ranks_reset(j);
    *out = j;
    return TY_OK;
fail:
    sched_job_free(j);
    return e;
}

void sched_job_view(const sjob *j, int attempt, backend_job *bj)
{
    *bj = (backend_job){
        .id = j->id,
        .attempt = attempt,
        .world_size = j->world,
        .argv = (const char *const *)j->argv,
        .env = (const char *const *)j->env,
        .image = j->image,
        .cpu = j->cpu,
        .memory = j->memory,
        .cpu_cores = j->cpu_cores,
        .memory_bytes = j->memory_bytes,
        .gpus_per_rank = j->gpus_per_rank,
        .gpu_type = j->gpu_type,
        .zone = j->zone,
        .capacity = j->capacity,
        .volumes = j->volumes,
        .nvolumes = j->nvolumes,
        .timeout_s = j->timeout_s,
        .name = j->name,
        .ncommand = j->ncommand,
        .has_ttl = j->has_ttl,
        .ttl_seconds_after_finished = j->ttl_s,
    };
}

/* Adds j to the list (and its queue's count). */
void sched_job_link(sched *s, sjob *j)
{
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    s->jobs = j;
    s->njobs++;
    /* Without memory for more buckets, those there are (or the list) still find every job. */
    if ((s->njobs <= s->nbuckets || rehash(s, s->nbuckets ? 2 * s->nbuckets : 256) != 0) &&
        s->nbuckets) {
        size_t b = bucket_of(s, j->id);
        j->hnext = s->buckets[b];
        s->buckets[b] = j;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->nbuckets)
        res_index(s, j);
    sched_touch(s, j);
    queue_count *q = queue_get(s, j->queue);
    if (q)
        q->active++;
    if (j->sweep)
        sweep_add(s, j->sweep, 1);
}

/* Removes j from the list, releases its reservation and frees it. */
void sched_job_forget(sched *s, sjob *j)
{
    pthread_mutex_lock(&s->mu);
    for (sjob **p = &s->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            s->njobs--;
            break;
        }
    for (sjob **p = s->nbuckets ? &s->buckets[bucket_of(s, j->id)] : NULL; p && *p;
         p = &(*p)->hnext)
        if (*p == j) {
            *p = j->hnext;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    list_del(j);
    if (s->nbuckets)
        res_unindex(s, j);
    queue_count *q = queue_get(s, j->queue);
    if (q && q->active > 0)
        q->active--;
    if (j->sweep)
        sweep_add(s, j->sweep, -1);
    if (j->res)
        s->be->ops->release(s->be, j->res);
    sched_job_free(j);
    s->admit_wanted = 1; /* capacity and a queue place came free */
}

/* Sets the action of a change (NULL when it could not be recorded: out of memory). */
void sched_set_act(change *c, act a)
{
    if (c)
        c->act = a;
}

/* Adds a transition (to == from: none) of j; the record, if dirty, goes with the job's last
 * change. */
change *sched_push(round *r, sjob *j, job_state to, const char *reason, const char *fmt, ...)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        change *c = realloc(r->c, cap * sizeof *c);
        if (!c)
            return NULL;
        r->c = c;
        r->cap = cap;
    }
    change *c = &r->c[r->n++];
    memset(c, 0, sizeof *c);
    c->job = j;
    j->lc_round = r;
    j->lc_gen = r->gen;
    j->lc_ix = r->n - 1;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof c->msg, fmt, ap);
        va_end(ap);
    }
    c->u.id = j->id;
    c->u.from = j->state;
    c->u.to = to;
    c->u.reason = reason;
    c->u.restarts = -1; /* u.message is set by commit(): r->c may move before then */
    /* The next change of this job in the round starts where this one ends. */
    j->state = to;
    return c;
}

/* j's last change in r, or NULL. */
static change *last_change(const round *r, const sjob *j)
{
    return j->lc_round == r && j->lc_gen == r->gen && j->lc_ix < r->n ? &r->c[j->lc_ix] : NULL;
}

/* Attaches j's record to its last change in the round, or a record-only change. */
static void attach_record(round *r, sjob *j)
{
    if (!j->dirty || !j->have_record)
        return;
    change *c = last_change(r, j);
    if (!c && !(c = sched_push(r, j, j->state, NULL, NULL)))
        return;
    /* A transition into STARTING begins the next attempt (the store counts it). */
    int attempt = j->attempt + (c->u.to == JOB_STARTING && c->u.from != JOB_STARTING);
    free(c->record);
    c->record = sched_record_text(j, attempt);
    if (c->record) {
        c->u.attempt = attempt;
        c->u.attempt_json = c->record;
    }
    c->u.restarts = j->restarts;
}

/* Copies what a change pushed again (a retry) keeps of the first: from, the note, the act,
 * the pending reason and the preemption mark. */
static void carry(change *again, const change *c)
{
    if (!again)
        return;
    again->u.from = c->u.from;
    again->u.note = c->u.note;
    again->u.preempted = c->u.preempted;
    again->act = c->act;
    if (c->preason && (again->preason = strdup(c->preason)))
        again->u.pending_reason = again->preason;
}

static void round_clear(round *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->c[i].record);
        free(r->c[i].preason);
    }
    r->n = 0;
    r->gen++;
}

/* ---- deciding ---------------------------------------------------------------- */

static void describe_end(const srank *k, int rank, char *buf, size_t len)
{
    if (k->signal > 0)
        snprintf(buf, len, "rank %d killed by signal %d", rank, k->signal);
    else
        snprintf(buf, len, "rank %d exited with code %d", rank, k->exit_code);
}

static const char *disruption_name(backend_disruption d)
{
    switch (d) {
    case BACKEND_DISRUPT_STOP_REQUESTED:
        return "stopped as asked";
    case BACKEND_DISRUPT_EVICTED:
        return "evicted";
    case BACKEND_DISRUPT_PREEMPTED:
        return "preempted";
    case BACKEND_DISRUPT_NODE_LOST:
        return "node lost";
    case BACKEND_DISRUPT_RECLAIMED:
        return "capacity reclaimed";
    case BACKEND_DISRUPT_RESUMABLE:
        return "stopped, resumable";
    case BACKEND_DISRUPT_WITHDRAWN:
        return "withdrawn";
    }
    return "disrupted";
}

/* Decides that the gang stops for `cause`. The first cause decides what the end means,
 * except that a cancel overrides any other cause in progress. The stop itself is asked
 * for in the act phase. */
void sched_stop_gang(sched *s, sjob *j, end_cause cause, const char *msg, int64_t now)
{
    if (j->cause == END_NONE || (cause == END_CANCEL && j->cause != END_CANCEL)) {
        j->cause = cause;
        if (msg)
            snprintf(j->cause_msg, sizeof j->cause_msg, "%s", msg);
    }
    if (j->alive > 0 && !j->stop_asked) {
        j->stop_asked = 1;
        j->kill_at_ms = now + s->grace_ms;
        if (j->want_stop < STOP_SOFT)
            j->want_stop = STOP_SOFT;
        if (j->astate == ATT_RUNNING || j->astate == ATT_STARTING) {
            j->astate = ATT_STOPPING;
            j->dirty = 1;
        }
    }
}

/* Replaces an owned string with a copy of v ("" = none); out of memory leaves it unknown. */
static void set_name(char **dst, const char *v)
{
    free(*dst);
    *dst = v && v[0] ? strdup(v) : NULL;
}

/* Every rank of a launched attempt has been seen running (or has already ended). */
static int all_started(const sjob *j)
{
    for (int r = 0; r < j->world; r++)
        if (j->ranks[r].state == RANK_PENDING)
            return 0;
    return 1;
}

/* Rank `rank` of j ended: its state from what the backend says and what we asked. */
static void rank_ended(sched *s, sjob *j, const backend_event *ev)
{
    srank *k = &j->ranks[ev->rank];
    if (k->state != RANK_RUNNING && k->state != RANK_PENDING)
        return; /* ended already */
    int disrupted =
        ev->kind == BACKEND_EV_DISRUPTED && ev->disruption != BACKEND_DISRUPT_STOP_REQUESTED;
    pthread_mutex_lock(&s->mu);
    if (k->state == RANK_RUNNING)
        s->running_ranks--;
    k->exit_code = ev->exit_code;
    k->signal = ev->signal;
    k->ended_ms = ev->time_ms;
    if (j->stop_asked)
        k->state = RANK_STOPPED; /* what we asked for, whatever the code (75 included) */
    else if (disrupted)
        k->state = RANK_DISRUPTED;
    else if (ev->exit_code == 0 && ev->signal == 0)
        k->state = RANK_SUCCEEDED;
    else
        k->state = ev->signal > 0 ? RANK_KILLED : RANK_FAILED;
    pthread_mutex_unlock(&s->mu);
    j->alive--;
    j->dirty = 1;
    char msg[BACKEND_DETAIL_MAX + 96];
    if (k->state == RANK_DISRUPTED && ev->disruption == BACKEND_DISRUPT_WITHDRAWN &&
        ev->detail[0]) {
        /* The whole attempt, in the backend's words. */
        if (j->cause == END_NONE)
            j->withdrawn = 1;
        sched_stop_gang(s, j, END_DISRUPTED, ev->detail, ev->time_ms);
    } else if (k->state == RANK_DISRUPTED) {
        snprintf(msg, sizeof msg, "rank %d %s%s%s", ev->rank, disruption_name(ev->disruption),
                 ev->detail[0] ? ": " : "", ev->detail);
        sched_stop_gang(s, j, END_DISRUPTED, msg, ev->time_ms);
    } else if (k->state == RANK_FAILED || k->state == RANK_KILLED) {
        describe_end(k, ev->rank, msg, sizeof msg);
        if (ev->detail[0]) { /* what the backend knows beyond the status */
            size_t n = strlen(msg);
            snprintf(msg + n, sizeof msg - n, " (%s)", ev->detail);
        }
        if (k->node && j->cause == END_NONE) { /* the attempt's failure: its node's too */
            size_t n = strlen(msg);
            snprintf(msg + n, sizeof msg - n, " on node %s", k->node);
            /* unless the rank says another ended it (a lost peer): quarantine.h */
            if (quarantine_attribute(ev->exit_code, ev->signal, ev->detail).charge)
                sched_nodes_charge(s, j, ev->rank, ev, msg, sizeof msg);
        }
        TY_LOG(TY_LOG_INFO, "rank ended", "{s:s, s:i, s:i, s:s}", "job_id", j->id, "attempt",
               j->attempt, "rank", ev->rank, "cause", msg);
        sched_stop_gang(s, j, END_FAILED, msg, ev->time_ms);
    }
}

/* One event of the backend, turned into what the loop knows of the job (observe phase). */
static void on_event(sched *s, const backend_event *ev)
{
    if (ev->kind == BACKEND_EV_CAPACITY) {
        s->admit_wanted = 1; /* a waiting job may fit now */
        return;
    }
    sjob *j = job_by_res(s, ev->attempt);
    if (!j || !j->launched || ev->rank < -1 || ev->rank >= j->world)
        return; /* an attempt that ended already, or a bug of the backend */
    if (ev->kind == BACKEND_EV_PLACEMENT || ev->kind == BACKEND_EV_PLACED ||
        ev->kind == BACKEND_EV_PENDING)
        touch_news(s, j);
    else if (ev->kind != BACKEND_EV_RUNNING)
        sched_touch(s, j);
    int lo = ev->rank < 0 ? 0 : ev->rank, hi = ev->rank < 0 ? j->world : ev->rank + 1;
    switch (ev->kind) {
    case BACKEND_EV_PLACEMENT: {
        const backend_placement *p = &ev->placement;
        json_t *groups = json_array(), *o;
        for (int i = 0; groups && i < p->ngroups && i < BACKEND_PLACEMENT_GROUPS; i++)
            json_array_append_new(groups, json_pack("{s:s, s:i}", "name", p->groups[i].name,
                                                    "nodes", p->groups[i].nodes));
        char at[32];
        o = json_pack("{s:s, s:o, s:o, s:i, s:o, s:o}", "zone", p->zone, "capacity",
                      p->capacity[0] ? json_string(p->capacity) : json_null(), "gpu_type",
                      p->gpu_type[0] ? json_string(p->gpu_type) : json_null(), "fit_ranks",
                      p->fit_ranks, "node_groups", groups ? groups : json_array(), "deadline",
                      p->deadline_ms > 0
                          ? json_string(ty_time_format_rfc3339(p->deadline_ms, at, sizeof at))
                          : json_null());
        if (o) {
            json_decref(j->placement);
            j->placement = o;
        }
        snprintf(j->placed, sizeof j->placed, "%s", ev->detail);
        j->dirty = 1;
        break;
    }
    case BACKEND_EV_PLACED:
        pthread_mutex_lock(&s->mu);
        for (int r = lo; r < hi; r++) {
            set_name(&j->ranks[r].node, ev->where.node);
            if (ev->where.pod[0])
                set_name(&j->ranks[r].pod, ev->where.pod);
        }
        pthread_mutex_unlock(&s->mu);
        j->dirty = 1;
        break;
    case BACKEND_EV_PENDING:
        /* The attempt's message says why it waits, for as long as it waits. */
        if (strcmp(j->waiting, ev->detail) != 0 && j->astate == ATT_STARTING) {
            snprintf(j->waiting, sizeof j->waiting, "%s", ev->detail);
            if (ev->rank >= 0)
                snprintf(j->a_message, sizeof j->a_message, "waiting: rank %d: %s", ev->rank,
                         ev->detail);
            else
                snprintf(j->a_message, sizeof j->a_message, "waiting: %s", ev->detail);
            j->dirty = 1;
        }
        break;
    case BACKEND_EV_RUNNING:
        if (ev->rank < 0)
            break;
        if (j->ranks[ev->rank].state == RANK_PENDING) {
            srank *k = &j->ranks[ev->rank];
            pthread_mutex_lock(&s->mu);
            k->state = RANK_RUNNING;
            k->pid = ev->where.pid;
            if (ev->where.pod[0])
                set_name(&k->pod, ev->where.pod);
            if (ev->where.node[0])
                set_name(&k->node, ev->where.node);
            k->started_ms = ev->where.started_ms ? ev->where.started_ms : ev->time_ms;
            s->running_ranks++;
            pthread_mutex_unlock(&s->mu);
            j->dirty = 1;
        }
        if (all_started(j) && j->astate == ATT_STARTING) {
            j->astate = ATT_RUNNING;
            j->a_message[0] = '\0';
            j->waiting[0] = '\0';
            j->need_running = 1;
            sched_touch(s, j);
        } else {
            touch_news(s, j);
        }
        break;
    case BACKEND_EV_EXITED:
    case BACKEND_EV_DISRUPTED:
        if (ev->kind == BACKEND_EV_DISRUPTED && !ev->ended) {
            /* A notice: the rank still runs; the gang is stopped so it can checkpoint. */
            char msg[BACKEND_DETAIL_MAX + 96];
            snprintf(msg, sizeof msg, "rank %d %s%s%s", ev->rank < 0 ? 0 : ev->rank,
                     disruption_name(ev->disruption), ev->detail[0] ? ": " : "", ev->detail);
            sched_stop_gang(s, j, END_DISRUPTED, msg, ev->time_ms);
            break;
        }
        for (int r = lo; r < hi; r++) {
            backend_event one = *ev;
            one.rank = r;
            rank_ended(s, j, &one);
        }
        break;
    case BACKEND_EV_LAUNCH_FAILED:
        /* Nothing of the attempt runs and nothing more will be said of it. */
        TY_LOG(TY_LOG_WARN, "scheduler: launch failed", "{s:s, s:i, s:s}", "job_id", j->id,
               "attempt", j->attempt, "error", ev->detail);
        pthread_mutex_lock(&s->mu);
        for (int r = 0; r < j->world; r++)
            if (j->ranks[r].state == RANK_RUNNING)
                s->running_ranks--;
        pthread_mutex_unlock(&s->mu);
        if (j->cause != END_CANCEL) {
            j->cause = END_LAUNCH;
            snprintf(j->cause_msg, sizeof j->cause_msg, "%s",
                     ev->detail[0] ? ev->detail : "the backend could not start the attempt");
        }
        j->alive = 0;
        j->want_stop = STOP_NONE;
        break;
    case BACKEND_EV_STOP_FAILED:
        TY_LOG(TY_LOG_WARN, "scheduler: a stop could not be delivered", "{s:s, s:i, s:s}", "job_id",
               j->id, "attempt", j->attempt, "error", ev->detail);
        if (j->alive > 0 && j->stop_asked) {
            /* Ask again, hard, after another grace period. */
            j->kill_sent = 0;
            j->kill_at_ms = ev->time_ms + s->grace_ms;
        }
        break;
    case BACKEND_EV_OVER_LIMIT:
        if (ev->limit == BACKEND_LIMIT_DISK && j->alive > 0) {
            TY_LOG(TY_LOG_INFO, "scheduler: over the disk limit", "{s:s, s:i, s:s}", "job_id",
                   j->id, "attempt", j->attempt, "detail", ev->detail);
            sched_stop_gang(s, j, END_DISK, ev->detail[0] ? ev->detail : "over the disk limit",
                            ev->time_ms);
        }
        break;
    case BACKEND_EV_CAPACITY:
        break;
    }
}

/* What a job whose gang is all gone becomes; returns 1 when it decided something. */
static int decide_gang_end(sched *s, round *r, sjob *j, int64_t now)
{
    if (!j->launched || j->alive > 0)
        return 0;
    j->kill_at_ms = 0;
    j->want_stop = STOP_NONE;
    int decided = 1;
    switch (j->cause) {
    case END_NONE:
        sched_record_end(s, j, ATT_SUCCEEDED, "Succeeded", "", now);
        sched_set_act(sched_push(r, j, JOB_SUCCEEDED, "Succeeded",
                                 "all %d rank%s exited with code 0", j->world,
                                 j->world == 1 ? "" : "s"),
                      ACT_FORGET);
        break;
    case END_FAILED:
        sched_record_end(s, j, ATT_FAILED, "RankFailed", j->cause_msg, now);
        if (j->restarts < j->restart_max) {
            j->restarts++;
            j->restart_at_ms = now + (int64_t)j->backoff_s * 1000;
            sched_push(r, j, JOB_RESTARTING, "RankFailed", "%s; restart %d of %d in %d s",
                       j->cause_msg, j->restarts, j->restart_max, j->backoff_s);
            pthread_mutex_lock(&s->mu);
            s->restarts_total++;
            pthread_mutex_unlock(&s->mu);
        } else {
            sched_set_act(sched_push(r, j, JOB_FAILED, "RankFailed",
                                     "%s; no restart left (restart.max is %d)", j->cause_msg,
                                     j->restart_max),
                          ACT_FORGET);
        }
        j->cause = END_NONE; /* the next attempt starts clean; a timeout may still come */
        break;
    case END_DISRUPTED:
        /* Not the application's failure: bounded by the timeout only. */
        if (j->withdrawn) {
            /* The backend placed it where it could not start: placed again at once. */
            sched_record_end(s, j, ATT_STOPPED, "Withdrawn", j->cause_msg, now);
            j->restart_at_ms = now;
            sched_push(r, j, JOB_RESTARTING, "Withdrawn", "%s (does not count against restart.max)",
                       j->cause_msg);
        } else {
            sched_record_end(s, j, ATT_STOPPED, "Disrupted", j->cause_msg, now);
            j->restart_at_ms = now;
            sched_push(r, j, JOB_RESTARTING, "Disrupted",
                       "%s; restarting (does not count against restart.max)", j->cause_msg);
        }
        j->withdrawn = 0;
        pthread_mutex_lock(&s->mu);
        s->restarts_total++;
        pthread_mutex_unlock(&s->mu);
        j->cause = END_NONE;
        break;
    case END_LAUNCH:
        j->launched = 0; /* its ranks never ran: they stay pending in the record */
        sched_record_end(s, j, ATT_FAILED, "LaunchFailed", j->cause_msg, now);
        sched_set_act(sched_push(r, j, JOB_FAILED, "LaunchFailed", "%s", j->cause_msg), ACT_FORGET);
        break;
    case END_DISK:
        sched_record_end(s, j, ATT_FAILED, "DiskLimitExceeded", j->cause_msg, now);
        sched_set_act(sched_push(r, j, JOB_FAILED, "DiskLimitExceeded", "%s", j->cause_msg),
                      ACT_FORGET);
        break;
    case END_TIMEOUT:
        sched_record_end(s, j, ATT_FAILED, "Timeout", j->cause_msg, now);
        sched_set_act(sched_push(r, j, JOB_FAILED, "Timeout", "%s", j->cause_msg), ACT_FORGET);
        break;
    case END_CANCEL:
        sched_record_end(s, j, ATT_CANCELLED, "Cancelled", "every rank stopped", now);
        sched_set_act(sched_push(r, j, JOB_CANCELLED, "Cancelled", "every rank stopped"),
                      ACT_FORGET);
        break;
    case END_PREEMPTED: {
        /* Like a disruption, it spends no restart; the job waits again in its line, at the
         * place its seq gives it, and its reservation goes back. */
        sched_record_end(s, j, ATT_STOPPED, "Preempted", j->cause_msg, now);
        change *c = sched_push(r, j, JOB_PENDING, "Preempted",
                               "%s; back in line at its place (does not count against restart.max)",
                               j->cause_msg);
        if (c) {
            c->u.preempted = 1;
            c->act = ACT_DISCARD;
        }
        pthread_mutex_lock(&s->mu);
        s->preemptions[j->preempt_kind == ADMIT_PRIORITY]++;
        pthread_mutex_unlock(&s->mu);
        j->cause = END_NONE;
        break;
    }
    case END_SHUTDOWN:
        sched_record_end(s, j, ATT_STOPPED, "ServerShutdown", j->cause_msg, now);
        j->restart_at_ms = now;
        sched_push(
            r, j, JOB_RESTARTING, "ServerShutdown",
            "the server shut down; attempt %d was stopped and resumes as a new attempt at the "
            "next start",
            j->attempt);
        j->cause = END_NONE;
        break;
    }
    j->launched = 0;
    return decided;
}

/* The decisions for one job the scheduler holds: changes and wanted calls, no call. */
static void decide_job(sched *s, round *r, sjob *j, int64_t now)
{
    int stopping = atomic_load(&s->stopping);
    if (j->placed[0]) {
        /* Where the backend placed the attempt: an event that is no transition. */
        change *c = sched_push(r, j, j->state, "Placed", "%s", j->placed);
        if (c)
            c->u.note = 1;
        j->placed[0] = '\0';
    }
    if (j->state == JOB_CANCELLING && j->cause != END_CANCEL)
        sched_stop_gang(s, j, END_CANCEL, "cancelled", now);
    if (j->timeout_s > 0 && j->first_start_ms > 0 && j->cause == END_NONE &&
        now >= j->first_start_ms + j->timeout_s * 1000) {
        char msg[96];
        snprintf(msg, sizeof msg, "timeout_seconds (%lld) exceeded", (long long)j->timeout_s);
        sched_stop_gang(s, j, END_TIMEOUT, msg, now);
    }
    /* A server that stops ends the gangs that die with it; on a backend that adopts, they
     * run on and the next start adopts them (sched_recover.c). */
    if (stopping && j->alive > 0 && !s->be->ops->adopts)
        sched_stop_gang(s, j, END_SHUTDOWN, "the server shut down", now);
    if (j->alive > 0 && j->kill_at_ms && now >= j->kill_at_ms && !j->kill_sent) {
        j->kill_sent = 1;
        j->want_stop = STOP_HARD;
    }
    if (j->need_running) {
        j->need_running = 0;
        j->dirty = 1;
        if (j->state == JOB_STARTING)
            sched_push(r, j, JOB_RUNNING, "Running", "%s%d rank%s running",
                       j->world > 1 ? "all " : "", j->world, j->world == 1 ? "" : "s");
    }
    if (decide_gang_end(s, r, j, now))
        return;
    if (j->launched)
        return;
    /* No gang runs: a cancel, a timeout or a restart can be decided at once. */
    if (j->state == JOB_CANCELLING) {
        if (j->have_record && j->astate < ATT_SUCCEEDED)
            sched_record_end(s, j, ATT_CANCELLED, "Cancelled", "cancelled", now);
        sched_set_act(sched_push(r, j, JOB_CANCELLED, "Cancelled", "no rank was running"),
                      ACT_FORGET);
    } else if (j->state == JOB_RESTARTING && j->cause == END_TIMEOUT) {
        sched_set_act(sched_push(r, j, JOB_FAILED, "Timeout", "%s", j->cause_msg), ACT_FORGET);
    } else if (j->state == JOB_RESTARTING && !stopping && now >= j->restart_at_ms) {
        if (!j->res) {
            char why[256] = "";
            backend_job bj;
            sched_job_view(j, j->attempt + 1, &bj);
            ty_err e = s->be->ops->reserve(s->be, &bj, &j->res, why, sizeof why);
            if (e == TY_EINVAL) {
                sched_set_act(sched_push(r, j, JOB_FAILED, "Unschedulable", "%s", why), ACT_FORGET);
                return;
            }
            if (e != TY_OK)
                return; /* no capacity now: a release or a CAPACITY event wakes us */
        }
        sched_record_begin(s, j, now);
        change *c = sched_push(r, j, JOB_STARTING, "Starting", "attempt %d: %d rank%s",
                               j->attempt + 1, j->world, j->world == 1 ? "" : "s");
        sched_set_act(c, ACT_LAUNCH);
    }
}
/* ---- acting after the commit ---------------------------------------------- */

/*
 * Launches j's current attempt (its STARTING committed); the backend answers with events.
 * The attempt's env is the job's plus its secret values, opened from the store here and
 * only here (the spec holds none of them), TRAINYARD_TOKEN and TRAINYARD_RENDEZVOUS_SECRET,
 * which the backend copies into every rank; bj.secret_names names those three kinds, which
 * a backend that writes objects keeps out of them (a Kubernetes Secret). A job whose secrets
 * cannot be opened (the key file unreadable, a blob that does not open) is not launched: its
 * attempt fails as a launch the backend refused would. The rendezvous secret (32 random bytes in
 * hex, which trainyard-worker's ranks prove to each other before they form the gang) is minted
 * here, once per launch of an attempt, and kept nowhere: an attempt adopted after a
 * restart goes on with the secret its ranks hold, and the next attempt gets a new one.
 */
static void launch(sched *s, sjob *j)
{
    static const char secret_name[] = "TRAINYARD_RENDEZVOUS_SECRET=";
    backend_job bj;
    char token[sizeof "TRAINYARD_TOKEN=" + TY_TOKEN_BUFLEN] = "";
    unsigned char raw[32];
    char secret[sizeof secret_name + 2 * sizeof raw] = "";
    const char **env = NULL, **names = NULL;
    char **opened = NULL; /* "NAME=value" of the job's secret values */
    store_env_secret *sv = NULL;
    size_t n = 0, nsv = 0;
    sched_job_view(j, j->attempt, &bj);
    while (j->env[n])
        n++;
    ty_err e = store_job_secrets_open(s->st, j->id, &sv, &nsv);
    if (e == TY_OK && nsv && !(opened = calloc(nsv, sizeof *opened)))
        e = TY_ENOMEM;
    for (size_t i = 0; e == TY_OK && i < nsv; i++) {
        size_t len = strlen(sv[i].name) + sv[i].value_len + 2;
        if (!(opened[i] = malloc(len)))
            e = TY_ENOMEM;
        else
            snprintf(opened[i], len, "%s=%s", sv[i].name, sv[i].value);
    }
    if (e == TY_OK && !(names = calloc(nsv + 3, sizeof *names)))
        e = TY_ENOMEM;
    if (e != TY_OK) {
        backend_event ev = {.kind = BACKEND_EV_LAUNCH_FAILED,
                            .attempt = j->res,
                            .rank = -1,
                            .exit_code = -1,
                            .time_ms = ty_time_now_ms()};
        snprintf(ev.detail, sizeof ev.detail, "the job's secret env values could not be opened: %s",
                 e == TY_ESCHEMA ? "they do not open with the key file next to the database "
                                   "(webhook-secrets.key replaced or lost)"
                 : e == TY_EIO   ? "the key file next to the database cannot be read"
                                 : ty_strerror(e));
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot open a job's secrets", "{s:s, s:s}", "job_id",
               j->id, "error", ty_strerror(e));
        j->launched = 1;
        j->alive = j->world;
        on_event(s, &ev);
        goto out;
    }
    for (size_t i = 0; i < nsv; i++)
        names[i] = sv[i].name;
    names[nsv] = "TRAINYARD_TOKEN";
    names[nsv + 1] = "TRAINYARD_RENDEZVOUS_SECRET";
    bj.secret_names = names;
    if (j->token[0])
        snprintf(token, sizeof token, "TRAINYARD_TOKEN=%s", j->token);
    if (ty_random_bytes(raw, sizeof raw) == TY_OK) {
        memcpy(secret, secret_name, sizeof secret_name - 1);
        ty_hex(raw, sizeof raw, secret + sizeof secret_name - 1);
    } else {
        /* Its ranks run, warning that anything may join their rendezvous. */
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot mint a rendezvous secret", "{s:s}", "job_id",
               j->id);
    }
    explicit_bzero(raw, sizeof raw);
    if (!(env = calloc(n + nsv + 3, sizeof *env))) {
        backend_event ev = {.kind = BACKEND_EV_LAUNCH_FAILED,
                            .attempt = j->res,
                            .rank = -1,
                            .exit_code = -1,
                            .time_ms = ty_time_now_ms()};
        snprintf(ev.detail, sizeof ev.detail, "out of memory");
        j->launched = 1;
        j->alive = j->world;
        on_event(s, &ev);
        goto out;
    }
    size_t k = n;
    memcpy(env, j->env, n * sizeof *env);
    for (size_t i = 0; i < nsv; i++)
        env[k++] = opened[i];
    /* Without a token or a secret (the RNG failed) the ranks start without it: they cannot
     * report, or they warn that anything may join their rendezvous. */
    if (token[0])
        env[k++] = token;
    if (secret[0])
        env[k++] = secret;
    bj.env = env;
    j->launched = 1;
    j->alive = j->world;
    pthread_mutex_lock(&s->mu);
    s->launches++;
    pthread_mutex_unlock(&s->mu);
    s->be->ops->launch(s->be, j->res, &bj);
out:
    free(env);
    free(names);
    for (size_t i = 0; opened && i < nsv; i++)
        if (opened[i]) {
            explicit_bzero(opened[i], strlen(opened[i]));
            free(opened[i]);
        }
    free(opened);
    store_env_secrets_free(sv, nsv);
    explicit_bzero(token, sizeof token);
    explicit_bzero(secret, sizeof secret);
    explicit_bzero(j->token, sizeof j->token);
}

/*
 * Mints the job token of the attempt a change into STARTING begins: the secret into the
 * job, its hash into the change (which the store writes with the transition). A failing
 * RNG leaves the attempt without a token: its ranks run but cannot report.
 */
static void mint_token(change *c)
{
    sjob *j = c->job;
    explicit_bzero(j->token, sizeof j->token);
    ty_err e = ty_token_generate(j->token);
    if (e != TY_OK) {
        explicit_bzero(j->token, sizeof j->token);
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot mint a job token", "{s:s, s:s}", "job_id", j->id,
               "error", ty_strerror(e));
        return;
    }
    ty_sha256(j->token, strlen(j->token), c->token_hash);
    c->u.job_token_hash = c->token_hash;
}

/* Reads a job the store refused to move, so the next round decides from its real state. */
static void recheck(sched *s, sjob *j)
{
    store_job *row = NULL;
    ty_err e = store_job_get(s->st, j->id, &row);
    if (e == TY_OK) {
        j->state = row->state;
        j->attempt = row->attempt;
    }
    store_jobs_free(row, row ? 1 : 0);
}

/* The act phase: the backend calls of every job whose decisions hold (committed, or none
 * to commit), then what each committed change asked for. */
static void act_phase(sched *s, round *r)
{
    /* A stop is wanted by a job decided this round or preempted by admission. */
    for (sjob *j = s->visiting; j; j = j->tnext) {
        if (j->retry || j->recheck || j->want_stop == STOP_NONE)
            continue;
        if (j->alive > 0 && j->res)
            s->be->ops->stop(s->be, j->res, j->want_stop == STOP_HARD);
        j->want_stop = STOP_NONE;
    }
    /* Once per job, on its last change's outcome. */
    for (size_t i = 0; i < r->n; i++) {
        change *c = &r->c[i];
        sjob *j = c->job;
        if (!c->last)
            continue;
        if (j->retry) {
            j->retry = 0; /* j->state is where the store still has it (set in commit) */
            continue;
        }
        if (j->recheck) {
            j->recheck = 0;
            recheck(s, j);
            j->dirty = 1;
            sched_touch(s, j);
            if (c->act == ACT_DISCARD || c->act == ACT_LAUNCH) {
                if (!j->launched && j->state != JOB_CANCELLING && j->state != JOB_RESTARTING)
                    sched_job_forget(s, j); /* e.g. cancelled while PENDING: never ran */
            } else if (job_state_is_terminal(j->state) && j->alive == 0) {
                sched_job_forget(s, j);
            }
            continue;
        }
        switch (c->act) {
        case ACT_LAUNCH:
            if (j->state == JOB_STARTING)
                launch(s, j);
            break;
        case ACT_FORGET:
            if (job_state_is_terminal(j->state))
                sched_job_forget(s, j);
            break;
        case ACT_DISCARD:
            sched_job_forget(s, j);
            break;
        case ACT_NONE:
            break;
        }
    }
}

/* Commits the round's changes; those the store failed are carried to `next`. Then acts. */
static void commit(sched *s, round *r, round *next)
{
    store_update *u = r->n ? malloc(r->n * sizeof *u) : NULL;
    if (r->n && !u) {
        /* Nothing can be written: the round is tried again, nothing is acted on. */
        for (size_t i = 0; i < r->n; i++) {
            change *c = &r->c[i];
            c->job->state = c->u.from;
            change *again = sched_push(next, c->job, c->u.to, c->u.reason, "%s", c->msg);
            carry(again, c);
        }
        s->commit_failed = 1;
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        r->c[i].last = last_change(r, r->c[i].job) == &r->c[i]; /* before any goes to next */
        if (r->c[i].u.to == JOB_STARTING && r->c[i].u.from != JOB_STARTING)
            mint_token(&r->c[i]);
        u[i] = r->c[i].u;
        u[i].message = r->c[i].msg; /* the round pushes no more: r->c stays where it is */
    }
    ty_err e = r->n ? store_jobs_update(s->st, u, r->n) : TY_OK, failed = TY_OK;
    s->commit_failed = 0;
    s->written += r->n;
    for (size_t i = 0; i < r->n; i++) {
        change *c = &r->c[i];
        sjob *j = c->job;
        ty_err ue = e ? e : u[i].result;
        if (ue == TY_OK) {
            j->state = u[i].now;
            j->attempt = u[i].now_attempt;
            if (c->u.attempt_json)
                j->dirty = 0;
            if (u[i].now != c->u.to)
                sched_touch(s, j); /* the store has it elsewhere: decided again */
        } else if (ue == TY_ECONFLICT || ue == TY_ENOTFOUND || ue == TY_EINTERNAL) {
            j->recheck = 1; /* the job is not where we thought: read it again */
        } else {
            /* The store failed (I/O, busy): the same change is tried again next round. */
            if (!j->retry)
                j->state = c->u.from;
            j->retry = 1;
            change *again = sched_push(next, j, c->u.to, c->u.reason, "%s", c->msg);
            carry(again, c);
            j->dirty = 1; /* the record goes with the retry */
            sched_touch(s, j);
            s->commit_failed = 1;
            failed = ue;
        }
    }
    free(u);
    if (s->commit_failed)
        TY_LOG(TY_LOG_WARN, "scheduler: the store failed; the round's changes are tried again",
               "{s:s}", "error", ty_strerror(failed));
    act_phase(s, r);
}

/* ---- the loop --------------------------------------------------------------- */

/* Reads the change feed: new submissions and cancelled waiting jobs wake admission; cancels
 * reach held jobs. Only when something of the kind was committed since it was last read
 * (store_submits_cancels()): most of the feed is the scheduler's own writing. */
static void read_feed(sched *s)
{
    uint64_t marks = store_submits_cancels(s->st);
    if (marks == s->feed_marks)
        return;
    for (;;) {
        store_change *ch = NULL;
        size_t n = 0;
        if (store_changes(s->st, s->feed_seq, CHANGES_PAGE, &ch, &n) != TY_OK)
            return; /* read again next round */
        for (size_t i = 0; i < n; i++) {
            s->feed_seq = ch[i].seq;
            if (ch[i].from == JOB_STATE_NONE) {
                s->admit_wanted = 1;
            } else if (ch[i].from == JOB_PENDING && ch[i].to == JOB_CANCELLED) {
                /* A waiting job left its line: the one behind it may head it now, and the
                 * heads behind it in the order move up. The next round says so. */
                s->admit_wanted = 1;
            } else if (ch[i].to == JOB_CANCELLING) {
                /* A client's cancel of a job that runs; the next decisions stop its gang. */
                sjob *j = sched_job_find(s, ch[i].id);
                if (j && !job_state_is_terminal(j->state)) {
                    j->state = JOB_CANCELLING;
                    sched_touch(s, j);
                }
            }
        }
        free(ch);
        if (n < CHANGES_PAGE)
            break;
    }
    s->feed_marks = marks;
}

/* The earliest timer of j after now (0: none). A restart whose time has come and that
 * waits for capacity has none: it is decided every round (the blocked list). */
static int64_t job_due(const sjob *j, int64_t now)
{
    int64_t t = 0;
    if (j->alive > 0 && j->kill_at_ms && !j->kill_sent)
        t = j->kill_at_ms;
    if (j->state == JOB_RESTARTING && !j->launched && j->restart_at_ms > now &&
        (!t || j->restart_at_ms < t))
        t = j->restart_at_ms;
    if (j->timeout_s > 0 && j->first_start_ms > 0 && j->cause == END_NONE) {
        int64_t to = j->first_start_ms + j->timeout_s * 1000;
        if (!t || to < t)
            t = to;
    }
    return t;
}

/* After the act phase: each job decided this round goes back on `touched` if it is still
 * busy, on `blocked` if it waits for capacity to restart, else off every list; its timer
 * counts towards due_ms. */
static void settle(sched *s, int64_t now)
{
    while (s->visiting) {
        sjob *j = s->visiting;
        list_del(j);
        if (j->need_running || (j->dirty && j->have_record))
            list_add(&s->touched, j, ON_TOUCHED);
        else if (j->state == JOB_RESTARTING && !j->launched)
            list_add(&s->blocked, j, ON_BLOCKED);
        int64_t t = job_due(j, now);
        if (t && (!s->due_ms || t < s->due_ms))
            s->due_ms = t;
    }
}

/* Moves the jobs this round decides onto `visiting`: every job held, or those touched and
 * blocked. */
static void gather(sched *s, int64_t now)
{
    if (s->full_pass || atomic_load(&s->stopping) || (s->due_ms && now >= s->due_ms)) {
        s->full_pass = 0;
        s->due_ms = 0; /* found again by settle() */
        for (sjob *j = s->jobs; j; j = j->next)
            if (j->on != ON_VISITING) {
                list_del(j);
                j->news_only = 0;
                list_add(&s->visiting, j, ON_VISITING);
            }
        return;
    }
    int hold = now < s->news_at_ms, news = 0;
    sjob *lists[3] = {s->touched, s->blocked, hold ? NULL : s->held};
    for (int l = 0; l < 3; l++)
        for (sjob *j = lists[l], *nx; j; j = nx) {
            nx = j->tnext;
            list_del(j);
            if (j->news_only && hold) {
                list_add(&s->held, j, ON_HELD);
                continue;
            }
            news |= j->news_only;
            j->news_only = 0;
            list_add(&s->visiting, j, ON_VISITING);
        }
    if (news)
        s->news_at_ms = now + SCHED_NEWS_HOLD_MS;
}

static void run_round(sched *s, round *r, round *next)
{
    int64_t now = ty_time_now_ms();
    backend_event ev[EVENTS_PAGE];
    size_t n;
    if (atomic_exchange(&s->nodes_reload, 0) ||
        (s->qnext_release_ms && now >= s->qnext_release_ms))
        sched_nodes_load(s, now);
    read_feed(s);
    while ((n = s->be->ops->observe(s->be, ev, EVENTS_PAGE)) > 0) {
        for (size_t i = 0; i < n; i++)
            on_event(s, &ev[i]);
        if (n < EVENTS_PAGE)
            break;
    }
    /* Changes the store failed to write last round go first, as they were decided. */
    for (size_t i = 0; i < next->n; i++) {
        change *c = sched_push(r, next->c[i].job, next->c[i].u.to, next->c[i].u.reason, "%s",
                               next->c[i].msg);
        carry(c, &next->c[i]);
        sched_touch(s, next->c[i].job);
    }
    round_clear(next);
    gather(s, now);
    for (sjob *j = s->visiting; j; j = j->tnext)
        decide_job(s, r, j, now);
    if (s->admit_wanted && !atomic_load(&s->stopping))
        sched_admit(s, r, now);
    /* The jobs admission linked or preempted are this round's too: their records, stops and
     * timers go with it (and need no round of their own). */
    while (s->touched) {
        sjob *j = s->touched;
        list_del(j);
        list_add(&s->visiting, j, ON_VISITING);
    }
    for (sjob *j = s->visiting; j; j = j->tnext)
        attach_record(r, j);
    commit(s, r, next);
    round_clear(r);
    settle(s, now);
    pthread_mutex_lock(&s->mu);
    s->rounds++;
    pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg)
{
    ty_thread_name("ty-sched");
    sched *s = arg;
    round r = {0}, next = {0};
    s->admit_wanted = 1;
    sched_nodes_load(s, ty_time_now_ms()); /* before anything is placed */
    sched_recover(s, &r);
    for (sjob *j = s->jobs; j; j = j->next) {
        list_del(j);
        list_add(&s->visiting, j, ON_VISITING);
        attach_record(&r, j);
    }
    commit(s, &r, &next);
    round_clear(&r);
    settle(s, ty_time_now_ms());
    s->full_pass = 1; /* the first round decides every job recovered */

    uint64_t trimmed_at = s->written; /* the changes written when memory was last trimmed */
    struct pollfd pfd[2] = {{.fd = s->wake_fd, .events = POLLIN},
                            {.fd = s->be->ops->event_fd(s->be), .events = POLLIN}};
    for (;;) {
        run_round(s, &r, &next);
        int stopping = atomic_load(&s->stopping);
        if (stopping) {
            /* Done once every change is written and, unless the backend adopts what runs,
             * every gang has ended. */
            int alive = 0;
            if (!s->be->ops->adopts)
                for (sjob *j = s->jobs; j; j = j->next)
                    alive |= j->alive > 0 || j->launched;
            if (!alive && next.n == 0 && !s->held)
                break;
        }
        int timeout = -1;
        /* While stopping nothing is admitted, so a wish to admit is no work to do. */
        int busy = next.n > 0 || (s->admit_wanted && !stopping) || s->touched;
        if (s->commit_failed || s->read_failed) {
            timeout = 200;
        } else if (busy) {
            timeout = 0;
        } else {
            int64_t d = s->due_ms;
            if (s->qnext_release_ms && (!d || s->qnext_release_ms < d))
                d = s->qnext_release_ms;
            if (s->held && (!d || s->news_at_ms < d))
                d = s->news_at_ms;
            if (d) {
                int64_t wait = d - ty_time_now_ms();
                timeout = wait < 0 ? 0 : wait > 60000 ? 60000 : (int)wait;
            }
        }
        /* Going idle after rounds that moved jobs: hand back the garbage they made (ty_mem.h).
         * When another thread trimmed within the second, the next time the loop goes idle
         * (a wake-up only for this would be a round). */
        if (timeout != 0 && s->written != trimmed_at && ty_mem_trim())
            trimmed_at = s->written;
        if (timeout != 0 && poll(pfd, pfd[1].fd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t got = read(s->wake_fd, &v, sizeof v);
            (void)got;
        }
    }
    /* Shutting down: the jobs left hold reservations only (their gangs ended, or run on where
     * the backend adopts them at the next start). */
    while (s->jobs) {
        sjob *j = s->jobs;
        sched_job_forget(s, j);
    }
    round_clear(&r);
    round_clear(&next);
    free(r.c);
    free(next.c);
    pthread_mutex_lock(&s->mu);
    s->stopped = 1;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public API ------------------------------------------------------------------- */

void sched_shutdown(sched *s)
{
    if (!s || !s->thread_started)
        return;
    atomic_store(&s->stopping, 1);
    wake(s);
}

void sched_stop(sched *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        sched_shutdown(s);
        pthread_join(s->thread, NULL);
    }
    store_set_change_hook(s->st, NULL, NULL);
    free(s->buckets);
    free(s->rbuckets);
    for (size_t i = 0; i < s->nlimits; i++)
        free((char *)s->limits[i].queue);
    free(s->limits);
    for (size_t i = 0; i < s->nqueues; i++)
        free(s->queues[i].name);
    free(s->queues);
    free(s->sweeps);
    sched_admit_free(s);
    sched_nodes_free(s);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

ty_err sched_start(const sched_options *opt, sched **out, char *err, size_t errlen)
{
    if (!opt || !opt->store || !opt->backend || !out) {
        snprintf(err, errlen, "scheduler: store and backend are required");
        return TY_EINVAL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return TY_ENOMEM;
    s->st = opt->store;
    s->be = opt->backend;
    s->default_limit = opt->queue_limit;
    s->grace_ms = opt->stop_grace_ms > 0 ? opt->stop_grace_ms : DEFAULT_GRACE_MS;
    s->qpolicy = opt->quarantine ? *opt->quarantine : quarantine_default();
    s->wake_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    ty_err e = TY_ENOMEM;
    if (opt->nqueue_limits) {
        if (!(s->limits = calloc(opt->nqueue_limits, sizeof *s->limits)))
            goto fail;
        for (size_t i = 0; i < opt->nqueue_limits; i++, s->nlimits++) {
            s->limits[i].limit = opt->queue_limits[i].limit;
            if (!(s->limits[i].queue = strdup(opt->queue_limits[i].queue)))
                goto fail;
        }
    }
    if ((s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        snprintf(err, errlen, "scheduler: eventfd: %s", strerror(errno));
        e = TY_EIO;
        goto fail;
    }
    /* The feed starts at its head: what is older is read by recovery. */
    if ((e = store_changes_head(s->st, &s->feed_seq)) != TY_OK) {
        snprintf(err, errlen, "scheduler: cannot read the change feed: %s", ty_strerror(e));
        goto fail;
    }
    store_set_change_hook(s->st, on_store_change, s);
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        snprintf(err, errlen, "scheduler: cannot start its thread");
        e = TY_EIO;
        goto fail;
    }
    s->thread_started = 1;
    *out = s;
    return TY_OK;
fail:
    sched_stop(s);
    return e;
}

void sched_get_stats(sched *s, sched_stats *out)
{
    *out = (sched_stats){.slots_total = -1};
    if (!s)
        return;
    s->be->ops->capacity(s->be, &out->slots_total, &out->slots_used);
    pthread_mutex_lock(&s->mu);
    out->active_jobs = s->njobs;
    out->running_ranks = s->running_ranks;
    out->rounds_total = s->rounds;
    out->launches_total = s->launches;
    out->restarts_total = s->restarts_total;
    out->preemptions_reclaim = s->preemptions[0];
    out->preemptions_priority = s->preemptions[1];
    out->admissions_total = s->admissions;
    out->admission_wait_seconds = (double)s->admission_wait_ms / 1000.0;
    out->nodes_quarantined = s->nodes_quarantined;
    out->quarantines_total = s->quarantines_total;
    out->node_failures_total = s->node_failures_total;
    pthread_mutex_unlock(&s->mu);
}

/* ---- logs ------------------------------------------------------------------------- */

struct sched_log {
    sched *s;
    backend_log *bl;
    char id[STORE_ID_LEN + 1];
    int attempt, rank, follow;
};

ty_err sched_log_open(sched *s, const char *job_id, int attempt, int rank, int follow,
                      long tail_lines, sched_log **out)
{
    if (!s || !job_id || strlen(job_id) != STORE_ID_LEN || attempt < 1 || rank < 0)
        return TY_EINVAL;
    sched_log *l = calloc(1, sizeof *l);
    if (!l)
        return TY_ENOMEM;
    ty_err e = s->be->ops->log_open(s->be, job_id, attempt, rank, tail_lines, &l->bl);
    if (e != TY_OK) {
        free(l);
        return e;
    }
    l->s = s;
    memcpy(l->id, job_id, sizeof l->id);
    l->attempt = attempt;
    l->rank = rank;
    l->follow = follow;
    *out = l;
    return TY_OK;
}

/* Whether that rank of that attempt may still write to its log. */
static int rank_running(sched *s, const char *id, int attempt, int rank)
{
    int running = 0;
    pthread_mutex_lock(&s->mu);
    sjob *j = !s->stopped && !atomic_load(&s->stopping) ? sched_job_find(s, id) : NULL;
    if (j)
        running = j->attempt == attempt && rank < j->world &&
                  (j->ranks[rank].state == RANK_RUNNING || j->ranks[rank].state == RANK_PENDING);
    pthread_mutex_unlock(&s->mu);
    return running;
}

long sched_log_read(sched_log *l, char *buf, size_t max)
{
    if (!l || !buf || max == 0)
        return -1;
    for (;;) {
        long n = l->s->be->ops->log_read(l->bl, buf, max);
        if (n != 0 || !l->follow)
            return n;
        if (!rank_running(l->s, l->id, l->attempt, l->rank))
            /* It ended: what it wrote before ending is read by one more pass. */
            return l->s->be->ops->log_read(l->bl, buf, max);
        struct timespec ts = {0, FOLLOW_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void sched_log_close(sched_log *l)
{
    if (!l)
        return;
    l->s->be->ops->log_close(l->bl);
    free(l);
}
