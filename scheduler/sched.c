/*
 * sched.c - the reconcile loop (see sched.h for what it guarantees).
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
 * Threads: everything here runs on the scheduler thread except
 * sched_get_stats() and sched_log_*(), which read `mu`-protected fields:
 * the job list and each rank's state (for follow).
 */
#include "scheduler/sched.h"

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
#include "scheduler/admit.h"

#define DEFAULT_GRACE_MS 10000
#define MAX_ADMITS_PER_ROUND 256   /* keeps a round (and its commit) short under a flood */
#define PENDING_FIRST_PAGE 8      /* a queue's first page in a round */
#define PENDING_PAGE 64            /* its later pages */
#define QUEUES_PAGE 256            /* queue names read at once */
#define CHANGES_PAGE 4096
#define EVENTS_PAGE 64             /* backend events read at once (on the stack) */
#define FOLLOW_POLL_MS 100

/* ---- jobs as the scheduler holds them ------------------------------------ */

typedef enum rank_state {
    RANK_PENDING,
    RANK_RUNNING,
    RANK_SUCCEEDED,
    RANK_FAILED,    /* exited non-zero on its own */
    RANK_KILLED,    /* killed by a signal nobody here sent */
    RANK_STOPPED,   /* ended after the server asked the gang to stop */
    RANK_DISRUPTED, /* taken away by its environment (evicted, preempted, node lost) */
} rank_state;

static const char *const rank_state_names[] = {"pending", "running", "succeeded", "failed",
                                               "killed",  "stopped", "disrupted"};

typedef enum attempt_state {
    ATT_STARTING,
    ATT_RUNNING,
    ATT_STOPPING,
    ATT_SUCCEEDED,
    ATT_FAILED,
    ATT_STOPPED,
    ATT_CANCELLED,
} attempt_state;

static const char *const attempt_state_names[] = {"starting",  "running", "stopping", "succeeded",
                                                  "failed",    "stopped", "cancelled"};

/* Why the gang of the current attempt is being stopped: what its end means. */
typedef enum end_cause {
    END_NONE,
    END_FAILED,   /* a rank failed: restart or fail */
    END_TIMEOUT,  /* timeout_seconds: fail */
    END_CANCEL,   /* a client cancelled: CANCELLED */
    END_SHUTDOWN, /* the server stops: RESTARTING, resumed by the next start */
    END_DISRUPTED, /* the backend took a rank away: RESTARTING without spending restart.max */
    END_LAUNCH,   /* the attempt could not be started: FAILED (LaunchFailed) */
    END_DISK,     /* the job's directory went over the backend's disk limit: FAILED
                     (DiskLimitExceeded); a restart would find the same full disk */
    END_PREEMPTED, /* admission took its place for another job: back to PENDING at its place,
                      without spending restart.max (a disruption) */
} end_cause;

/* A backend call a job wants, made in the act phase. */
typedef enum want_stop {
    STOP_NONE,
    STOP_SOFT, /* ask the gang to stop (SIGTERM, pods deleted with their grace period) */
    STOP_HARD, /* end it now */
} want_stop;

typedef struct srank {
    rank_state state;
    int pid;         /* 0: none */
    char *pod;       /* owned; NULL: none */
    char *node;      /* owned; NULL: none */
    int exit_code;   /* -1: none */
    int signal;      /* 0: none */
    int64_t started_ms, ended_ms;
} srank;

typedef struct sjob {
    struct sjob *next;
    char id[STORE_ID_LEN + 1];
    char *queue;
    char *team;      /* the owning team */
    int64_t priority;
    int64_t admitted_ms; /* when this loop admitted it (recovered: its last update) */
    int64_t created_ms;  /* its submission */
    admit_preempt_kind preempt_kind; /* END_PREEMPTED: reclaim or priority */
    job_state state; /* as last committed */
    int attempt;     /* the store's attempt number */
    int restarts;
    int64_t sweep;   /* a sweep's trial: the sweep's seq, else 0 */
    /* From the spec: what backend_job shows a backend, parsed once. */
    json_t *spec;
    char **argv;     /* borrowed strings of spec, NULL-terminated */
    char **env;      /* owned "NAME=value" strings, NULL-terminated */
    int world, gpus_per_rank, restart_max, backoff_s;
    const char *gpu_type, *image, *cpu, *memory, *zone, *capacity; /* borrowed from spec */
    double cpu_cores, memory_bytes;
    backend_volume *volumes; /* owned array of borrowed strings */
    size_t nvolumes;
    int64_t timeout_s; /* 0: none */
    const char *name;  /* borrowed from spec, or NULL */
    int ncommand, has_ttl;
    int64_t ttl_s;
    /* The backend's reservation and the current attempt. */
    backend_attempt *res;
    srank *ranks;      /* world entries; protected by mu for readers */
    int launched;      /* the current attempt was launched (or adopted) and has not ended */
    int alive;         /* launched ranks whose end was not observed yet */
    want_stop want_stop; /* a stop to ask for in the act phase */
    attempt_state astate;
    int64_t a_started_ms, a_ended_ms;
    const char *a_reason;
    char a_message[BACKEND_DETAIL_MAX + 96]; /* as long as cause_msg, which it may hold */
    int have_record;   /* an attempt record exists for `attempt` */
    int dirty;         /* the record changed since it was written */
    /* Stopping and timers. */
    end_cause cause;
    char cause_msg[BACKEND_DETAIL_MAX + 96];
    int stop_asked, kill_sent; /* decided (the act phase makes the call) */
    int64_t kill_at_ms;    /* the hard stop, when the gang is still there; 0: none */
    int64_t restart_at_ms; /* RESTARTING: launch the next attempt then */
    int64_t first_start_ms;
    int need_running;      /* every rank runs: write STARTING -> RUNNING */
    char waiting[BACKEND_DETAIL_MAX]; /* the backend's last PENDING reason, "" when none */
    int recheck;           /* the store refused an update: read the job again */
    int retry;             /* the store failed: this round's changes are tried again */
    char token[TY_TOKEN_BUFLEN]; /* the starting attempt's job token until launch(), else "" */
} sjob;

typedef struct queue_count {
    char *name;
    int active;
} queue_count;

/* The trials of a sweep held here (active); a sweep leaves the list when none is. */
typedef struct sweep_count {
    int64_t sweep;
    int active;
} sweep_count;

struct sched {
    store *st;
    backend *be;
    int default_limit;
    sched_queue_limit *limits;
    size_t nlimits;
    int grace_ms;

    pthread_t thread;
    int thread_started;
    int wake_fd;
    atomic_int stopping;

    /* Scheduler thread only. */
    int64_t feed_seq;
    int admit_wanted;
    int commit_failed; /* the last commit failed: pause before trying again */
    int read_failed;   /* admission could not read the store: pause before trying again */
    queue_count *queues;
    size_t nqueues, capqueues;
    sweep_count *sweeps;
    size_t nsweeps, capsweeps;
    /* The head of the line that waits for capacity, and why, as last written (a Waiting
     * event is written when either changes). */
    struct said *said; /* the pending heads' reasons as last written (admit()) */
    size_t nsaid;

    /* Shared with sched_get_stats() and sched_log_*(). */
    pthread_mutex_t mu;
    sjob *jobs;
    uint64_t njobs, running_ranks, rounds, launches, restarts_total;
    uint64_t preemptions[2]; /* attempts ended by a preemption: [0] reclaim, [1] priority */
    uint64_t admissions, admission_wait_ms; /* jobs admitted, their waits since submission */
    int stopped; /* the thread finished: every follower stops waiting */
};

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

static int queue_limit(const sched *s, const char *queue)
{
    for (size_t i = 0; i < s->nlimits; i++)
        if (strcmp(s->limits[i].queue, queue) == 0)
            return s->limits[i].limit;
    return s->default_limit;
}

/* The count of a queue the scheduler has held jobs of, or NULL. */
static queue_count *queue_find(sched *s, const char *queue)
{
    for (size_t i = 0; i < s->nqueues; i++)
        if (strcmp(s->queues[i].name, queue) == 0)
            return &s->queues[i];
    return NULL;
}

/* The count of a queue, added at 0 when new; NULL when out of memory. */
static queue_count *queue_get(sched *s, const char *queue)
{
    queue_count *found = queue_find(s, queue);
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
static int sweep_active(const sched *s, int64_t sweep)
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

static sjob *job_find(sched *s, const char *id)
{
    for (sjob *j = s->jobs; j; j = j->next)
        if (strcmp(j->id, id) == 0)
            return j;
    return NULL;
}

static sjob *job_by_res(sched *s, const backend_attempt *a)
{
    for (sjob *j = s->jobs; j; j = j->next)
        if (j->res == a)
            return j;
    return NULL;
}

/* Frees what the ranks own and makes them all pending again. */
static void ranks_reset(sjob *j)
{
    for (int r = 0; r < j->world; r++) {
        free(j->ranks[r].pod);
        free(j->ranks[r].node);
        j->ranks[r] = (srank){.exit_code = -1};
    }
}

static void job_free(sjob *j)
{
    if (!j)
        return;
    if (j->ranks)
        ranks_reset(j);
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
    explicit_bzero(j->token, sizeof j->token);
    free(j);
}

/* Builds a job from its stored row: the spec's fields a backend needs. */
static ty_err job_new(const store_job *row, sjob **out)
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
    ranks_reset(j);
    *out = j;
    return TY_OK;
fail:
    job_free(j);
    return e;
}

static void job_backend_view(const sjob *j, int attempt, backend_job *bj)
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
static void job_link(sched *s, sjob *j)
{
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    s->jobs = j;
    s->njobs++;
    pthread_mutex_unlock(&s->mu);
    queue_count *q = queue_get(s, j->queue);
    if (q)
        q->active++;
    if (j->sweep)
        sweep_add(s, j->sweep, 1);
}

/* Removes j from the list, releases its reservation and frees it. */
static void job_forget(sched *s, sjob *j)
{
    pthread_mutex_lock(&s->mu);
    for (sjob **p = &s->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            s->njobs--;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    queue_count *q = queue_get(s, j->queue);
    if (q && q->active > 0)
        q->active--;
    if (j->sweep)
        sweep_add(s, j->sweep, -1);
    if (j->res)
        s->be->ops->release(s->be, j->res);
    job_free(j);
    s->admit_wanted = 1; /* capacity and a queue place came free */
}

/* ---- the attempt record --------------------------------------------------- */

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms > 0 ? json_string(ty_time_format_rfc3339(ms, buf, sizeof buf)) : json_null();
}

static json_t *int_or_null(int v, int present)
{
    return present ? json_integer(v) : json_null();
}

/* The record of j's current attempt, number `attempt`, as JSON text (new). */
static char *record_text(const sjob *j, int attempt)
{
    json_t *ranks = json_array();
    for (int r = 0; ranks && r < j->world; r++) {
        const srank *k = &j->ranks[r];
        int ended = k->state >= RANK_SUCCEEDED;
        json_t *o = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "rank", r, "state",
                              rank_state_names[k->state], "exit_code",
                              int_or_null(k->exit_code, ended && k->exit_code >= 0), "signal",
                              int_or_null(k->signal, ended && k->signal > 0), "started_at",
                              time_or_null(k->started_ms), "ended_at", time_or_null(k->ended_ms));
        /* Where it runs, as far as the backend said: a pid here, a pod and a node there. */
        if (o && k->pid > 0)
            json_object_set_new(o, "pid", json_integer(k->pid));
        if (o && k->pod)
            json_object_set_new(o, "pod", json_string(k->pod));
        if (o && k->node)
            json_object_set_new(o, "node", json_string(k->node));
        json_array_append_new(ranks, o);
    }
    json_t *rec = json_pack("{s:i, s:s, s:o, s:o, s:o, s:s, s:o}", "attempt", attempt, "state",
                            attempt_state_names[j->astate], "started_at",
                            time_or_null(j->a_started_ms), "ended_at",
                            time_or_null(j->a_ended_ms), "reason",
                            j->a_reason ? json_string(j->a_reason) : json_null(), "message",
                            j->a_message, "ranks", ranks ? ranks : json_null());
    char *text = NULL;
    ty_buf b = {0};
    if (rec && ty_json_write(&b, rec) == TY_OK)
        ty_buf_steal(&b, &text, NULL);
    ty_buf_free(&b);
    json_decref(rec);
    return text;
}

/* Loads the ranks and times of a stored attempt record into j (recovery). */
static void record_load(sjob *j, const char *text)
{
    json_t *rec = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(rec)) {
        json_decref(rec);
        return;
    }
    j->have_record = 1;
    const char *st = json_string_value(json_object_get(rec, "state"));
    for (size_t n = 0; st && n < sizeof attempt_state_names / sizeof *attempt_state_names; n++)
        if (strcmp(st, attempt_state_names[n]) == 0)
            j->astate = (attempt_state)n;
    st = json_string_value(json_object_get(rec, "started_at"));
    int64_t ms;
    if (st && ty_time_parse_rfc3339(st, &ms) == 0)
        j->a_started_ms = ms;
    size_t i;
    json_t *rk;
    json_array_foreach(json_object_get(rec, "ranks"), i, rk)
    {
        if ((int)i >= j->world)
            break;
        srank *k = &j->ranks[i];
        const char *state = json_string_value(json_object_get(rk, "state"));
        for (size_t n = 0; state && n < sizeof rank_state_names / sizeof *rank_state_names; n++)
            if (strcmp(state, rank_state_names[n]) == 0)
                k->state = (rank_state)n;
        k->pid = (int)json_integer_value(json_object_get(rk, "pid"));
        const char *pod = json_string_value(json_object_get(rk, "pod"));
        const char *node = json_string_value(json_object_get(rk, "node"));
        k->pod = pod ? strdup(pod) : NULL; /* out of memory: shown as unknown */
        k->node = node ? strdup(node) : NULL;
        const json_t *code = json_object_get(rk, "exit_code");
        k->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
        k->signal = (int)json_integer_value(json_object_get(rk, "signal"));
        st = json_string_value(json_object_get(rk, "started_at"));
        if (st && ty_time_parse_rfc3339(st, &ms) == 0)
            k->started_ms = ms;
        st = json_string_value(json_object_get(rk, "ended_at"));
        if (st && ty_time_parse_rfc3339(st, &ms) == 0)
            k->ended_ms = ms;
    }
    json_decref(rec);
}

/* Ends the current attempt's record: every rank not yet ended becomes `left`. */
static void record_end(sched *s, sjob *j, attempt_state as, const char *reason, const char *msg,
                       int64_t now)
{
    pthread_mutex_lock(&s->mu);
    for (int r = 0; r < j->world; r++) {
        srank *k = &j->ranks[r];
        if (k->state == RANK_RUNNING || (k->state == RANK_PENDING && j->launched)) {
            k->state = RANK_STOPPED;
            k->ended_ms = now;
        }
    }
    pthread_mutex_unlock(&s->mu);
    j->astate = as;
    j->a_ended_ms = now;
    j->a_reason = reason;
    snprintf(j->a_message, sizeof j->a_message, "%s", msg ? msg : "");
    j->dirty = 1;
}

/* A fresh record for attempt n (ranks pending). */
static void record_begin(sched *s, sjob *j, int64_t now)
{
    pthread_mutex_lock(&s->mu);
    ranks_reset(j);
    pthread_mutex_unlock(&s->mu);
    j->astate = ATT_STARTING;
    j->a_started_ms = now;
    j->a_ended_ms = 0;
    j->a_reason = NULL;
    j->a_message[0] = '\0';
    j->launched = j->alive = 0;
    j->cause = END_NONE;
    j->cause_msg[0] = '\0';
    j->stop_asked = j->kill_sent = 0;
    j->want_stop = STOP_NONE;
    j->kill_at_ms = 0;
    j->waiting[0] = '\0';
    j->have_record = 1;
    j->dirty = 1;
    if (!j->first_start_ms)
        j->first_start_ms = now;
}

/* ---- a round's decisions ---------------------------------------------------- */

typedef enum act {
    ACT_NONE,
    ACT_LAUNCH,  /* after STARTING committed: start the ranks */
    ACT_FORGET,  /* after a terminal state committed: release and forget */
    ACT_DISCARD, /* after the change committed: release and forget (it runs nothing) */
} act;

typedef struct change {
    sjob *job;
    store_update u;
    act act;
    char msg[320];
    char *record; /* owned */
    char *preason; /* owned: u.pending_reason's text */
    unsigned char token_hash[TY_SHA256_LEN]; /* into STARTING: the new job token's hash */
} change;

typedef struct round {
    change *c;
    size_t n, cap;
} round;

/* Sets the action of a change (NULL when it could not be recorded: out of memory). */
static void set_act(change *c, act a)
{
    if (c)
        c->act = a;
}

/* Adds a transition (to == from: none) of j; the record, if dirty, goes with the job's last
 * change. */
static change *push(round *r, sjob *j, job_state to, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static change *push(round *r, sjob *j, job_state to, const char *reason, const char *fmt, ...)
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
    c->u.message = c->msg;
    c->u.restarts = -1;
    /* The next change of this job in the round starts where this one ends. */
    j->state = to;
    return c;
}

/* Attaches j's record to its last change in the round, or a record-only change. */
static void attach_record(round *r, sjob *j)
{
    if (!j->dirty || !j->have_record)
        return;
    change *c = NULL;
    for (size_t i = r->n; i-- > 0;)
        if (r->c[i].job == j) {
            c = &r->c[i];
            break;
        }
    if (!c && !(c = push(r, j, j->state, NULL, NULL)))
        return;
    /* A transition into STARTING begins the next attempt (the store counts it). */
    int attempt = j->attempt + (c->u.to == JOB_STARTING && c->u.from != JOB_STARTING);
    free(c->record);
    c->record = record_text(j, attempt);
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
    }
    return "disrupted";
}

/* Decides that the gang stops for `cause`. The first cause decides what the end means,
 * except that a cancel overrides any other cause in progress. The stop itself is asked
 * for in the act phase. */
static void stop_gang(sched *s, sjob *j, end_cause cause, const char *msg, int64_t now)
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
    int disrupted = ev->kind == BACKEND_EV_DISRUPTED &&
                    ev->disruption != BACKEND_DISRUPT_STOP_REQUESTED;
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
    if (k->state == RANK_DISRUPTED) {
        snprintf(msg, sizeof msg, "rank %d %s%s%s", ev->rank, disruption_name(ev->disruption),
                 ev->detail[0] ? ": " : "", ev->detail);
        stop_gang(s, j, END_DISRUPTED, msg, ev->time_ms);
    } else if (k->state == RANK_FAILED || k->state == RANK_KILLED) {
        describe_end(k, ev->rank, msg, sizeof msg);
        if (ev->detail[0]) { /* what the backend knows beyond the status */
            size_t n = strlen(msg);
            snprintf(msg + n, sizeof msg - n, " (%s)", ev->detail);
        }
        TY_LOG(TY_LOG_INFO, "rank ended", "{s:s, s:i, s:i, s:s}", "job_id", j->id, "attempt",
               j->attempt, "rank", ev->rank, "cause", msg);
        stop_gang(s, j, END_FAILED, msg, ev->time_ms);
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
    int lo = ev->rank < 0 ? 0 : ev->rank, hi = ev->rank < 0 ? j->world : ev->rank + 1;
    switch (ev->kind) {
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
        }
        break;
    case BACKEND_EV_EXITED:
    case BACKEND_EV_DISRUPTED:
        if (ev->kind == BACKEND_EV_DISRUPTED && !ev->ended) {
            /* A notice: the rank still runs; the gang is stopped so it can checkpoint. */
            char msg[BACKEND_DETAIL_MAX + 96];
            snprintf(msg, sizeof msg, "rank %d %s%s%s", ev->rank < 0 ? 0 : ev->rank,
                     disruption_name(ev->disruption), ev->detail[0] ? ": " : "", ev->detail);
            stop_gang(s, j, END_DISRUPTED, msg, ev->time_ms);
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
        TY_LOG(TY_LOG_WARN, "scheduler: a stop could not be delivered", "{s:s, s:i, s:s}",
               "job_id", j->id, "attempt", j->attempt, "error", ev->detail);
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
            stop_gang(s, j, END_DISK, ev->detail[0] ? ev->detail : "over the disk limit",
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
        record_end(s, j, ATT_SUCCEEDED, "Succeeded", "", now);
        set_act(push(r, j, JOB_SUCCEEDED, "Succeeded", "all %d rank%s exited with code 0",
                     j->world, j->world == 1 ? "" : "s"),
                ACT_FORGET);
        break;
    case END_FAILED:
        record_end(s, j, ATT_FAILED, "RankFailed", j->cause_msg, now);
        if (j->restarts < j->restart_max) {
            j->restarts++;
            j->restart_at_ms = now + (int64_t)j->backoff_s * 1000;
            push(r, j, JOB_RESTARTING, "RankFailed", "%s; restart %d of %d in %d s", j->cause_msg,
                 j->restarts, j->restart_max, j->backoff_s);
            pthread_mutex_lock(&s->mu);
            s->restarts_total++;
            pthread_mutex_unlock(&s->mu);
        } else {
            set_act(push(r, j, JOB_FAILED, "RankFailed", "%s; no restart left (restart.max is %d)",
                         j->cause_msg, j->restart_max),
                    ACT_FORGET);
        }
        j->cause = END_NONE; /* the next attempt starts clean; a timeout may still come */
        break;
    case END_DISRUPTED:
        /* Not the application's failure: bounded by the timeout only. */
        record_end(s, j, ATT_STOPPED, "Disrupted", j->cause_msg, now);
        j->restart_at_ms = now;
        push(r, j, JOB_RESTARTING, "Disrupted",
             "%s; restarting (does not count against restart.max)", j->cause_msg);
        pthread_mutex_lock(&s->mu);
        s->restarts_total++;
        pthread_mutex_unlock(&s->mu);
        j->cause = END_NONE;
        break;
    case END_LAUNCH:
        j->launched = 0; /* its ranks never ran: they stay pending in the record */
        record_end(s, j, ATT_FAILED, "LaunchFailed", j->cause_msg, now);
        set_act(push(r, j, JOB_FAILED, "LaunchFailed", "%s", j->cause_msg), ACT_FORGET);
        break;
    case END_DISK:
        record_end(s, j, ATT_FAILED, "DiskLimitExceeded", j->cause_msg, now);
        set_act(push(r, j, JOB_FAILED, "DiskLimitExceeded", "%s", j->cause_msg), ACT_FORGET);
        break;
    case END_TIMEOUT:
        record_end(s, j, ATT_FAILED, "Timeout", j->cause_msg, now);
        set_act(push(r, j, JOB_FAILED, "Timeout", "%s", j->cause_msg), ACT_FORGET);
        break;
    case END_CANCEL:
        record_end(s, j, ATT_CANCELLED, "Cancelled", "every rank stopped", now);
        set_act(push(r, j, JOB_CANCELLED, "Cancelled", "every rank stopped"), ACT_FORGET);
        break;
    case END_PREEMPTED: {
        /* Like a disruption, it spends no restart; the job waits again in its line, at the
         * place its seq gives it, and its reservation goes back. */
        record_end(s, j, ATT_STOPPED, "Preempted", j->cause_msg, now);
        change *c = push(r, j, JOB_PENDING, "Preempted",
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
        record_end(s, j, ATT_STOPPED, "ServerShutdown", j->cause_msg, now);
        j->restart_at_ms = now;
        push(r, j, JOB_RESTARTING, "ServerShutdown",
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
    if (j->state == JOB_CANCELLING && j->cause != END_CANCEL)
        stop_gang(s, j, END_CANCEL, "cancelled", now);
    if (j->timeout_s > 0 && j->first_start_ms > 0 && j->cause == END_NONE &&
        now >= j->first_start_ms + j->timeout_s * 1000) {
        char msg[96];
        snprintf(msg, sizeof msg, "timeout_seconds (%lld) exceeded", (long long)j->timeout_s);
        stop_gang(s, j, END_TIMEOUT, msg, now);
    }
    if (stopping && j->alive > 0)
        stop_gang(s, j, END_SHUTDOWN, "the server shut down", now);
    if (j->alive > 0 && j->kill_at_ms && now >= j->kill_at_ms && !j->kill_sent) {
        j->kill_sent = 1;
        j->want_stop = STOP_HARD;
    }
    if (j->need_running) {
        j->need_running = 0;
        j->dirty = 1;
        if (j->state == JOB_STARTING)
            push(r, j, JOB_RUNNING, "Running", "%s%d rank%s running", j->world > 1 ? "all " : "",
                 j->world, j->world == 1 ? "" : "s");
    }
    if (decide_gang_end(s, r, j, now))
        return;
    if (j->launched)
        return;
    /* No gang runs: a cancel, a timeout or a restart can be decided at once. */
    if (j->state == JOB_CANCELLING) {
        if (j->have_record && j->astate < ATT_SUCCEEDED)
            record_end(s, j, ATT_CANCELLED, "Cancelled", "cancelled", now);
        set_act(push(r, j, JOB_CANCELLED, "Cancelled", "no rank was running"), ACT_FORGET);
    } else if (j->state == JOB_RESTARTING && j->cause == END_TIMEOUT) {
        set_act(push(r, j, JOB_FAILED, "Timeout", "%s", j->cause_msg), ACT_FORGET);
    } else if (j->state == JOB_RESTARTING && !stopping && now >= j->restart_at_ms) {
        if (!j->res) {
            char why[256] = "";
            backend_job bj;
            job_backend_view(j, j->attempt + 1, &bj);
            ty_err e = s->be->ops->reserve(s->be, &bj, &j->res, why, sizeof why);
            if (e == TY_EINVAL) {
                set_act(push(r, j, JOB_FAILED, "Unschedulable", "%s", why), ACT_FORGET);
                return;
            }
            if (e != TY_OK)
                return; /* no capacity now: a release or a CAPACITY event wakes us */
        }
        record_begin(s, j, now);
        change *c = push(r, j, JOB_STARTING, "Starting", "attempt %d: %d rank%s", j->attempt + 1,
                         j->world, j->world == 1 ? "" : "s");
        set_act(c, ACT_LAUNCH);
    }
}

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
    store_pending_line key;  /* borrowed from the round's list */
    store_job *page;         /* owned; rows [0, pos) were handed to the policy */
    size_t n, pos;
    int reads, want;         /* pages read this round; the last one's size asked */
    int team;                /* index in the snapshot's teams; -1: unknown team */
} wline;

typedef struct said {
    char id[STORE_ID_LEN + 1];
    char *queue;             /* its queue (owned) */
    char *json;              /* the pending_reason last written (owned) */
    char *note;              /* the reason and message last told in a Waiting event (owned) */
} said;

typedef struct old_page {
    store_job *p;
    size_t n;
} old_page;

typedef struct actx {
    sched *s;
    wline *lines;
    size_t nlines;
    old_page *old;           /* pages used up this round: the ids the policy holds stay valid */
    size_t nold, capold;
    sjob **made;             /* jobs booked or refused for good by reserve() this round */
    size_t nmade, capmade;
    admit_resource res[ADMIT_MAX_RES];
    char resnames[ADMIT_MAX_RES][64];
    size_t nres, cpu, mem;   /* cpu and memory: their indices */
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
static int request_of(actx *c, int world, int gpus, const char *type, double cores,
                      double bytes, int64_t req[ADMIT_MAX_RES])
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
    if (store_jobs_pending_line(c->s->st, l->key.team, l->key.queue, l->key.sweep, ap, as,
                                l->want, &l->page, &l->n) != TY_OK) {
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
        const sjob *held = job_find(c->s, r->id);
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

static admit_fit reserve_cb(void *ctx, size_t line, const admit_job *job, char *why,
                            size_t whylen)
{
    actx *c = ctx;
    sched *s = c->s;
    const wline *l = &c->lines[line];
    if (l->pos >= l->n || strcmp(l->page[l->pos].id, job->id) != 0) {
        snprintf(why, whylen, "internal: the line's head moved");
        return ADMIT_FIT_NOT_NOW;
    }
    if (job_find(s, job->id)) {
        snprintf(why, whylen, "the job's last change is being written");
        return ADMIT_FIT_NOT_NOW;
    }
    sjob *j = NULL;
    if (job_new(&l->page[l->pos], &j) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot load a job", "{s:s}", "job_id", job->id);
        snprintf(why, whylen, "the job cannot be loaded");
        return ADMIT_FIT_NOT_NOW;
    }
    backend_job bj;
    job_backend_view(j, j->attempt + 1, &bj);
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
    job_free(j);
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
                     kind == ADMIT_RES_GPU ? (fr[i].gpu_type ? fr[i].gpu_type : ADMIT_ANY_GPU)
                     : kind == ADMIT_RES_CPU ? "cpu"
                                             : "memory");
            int64_t f = fr[i].free < 0 ? 0 : fr[i].free > ADMIT_MAX_QTY ? ADMIT_MAX_QTY : fr[i].free;
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
    if (l->pos >= l->n || strcmp(l->page[l->pos].id, p->job.id) != 0 || job_find(s, p->job.id)) {
        free(now->json); /* not written: said again next round */
        free(now->note);
        now->json = now->note = NULL;
        return;
    }
    sjob *j = NULL;
    if (job_new(&l->page[l->pos], &j) != TY_OK) {
        free(now->json);
        free(now->note);
        now->json = now->note = NULL;
        return;
    }
    job_link(s, j);
    change *ch = push(r, j, JOB_PENDING, "Waiting", "%s", msg);
    if (!ch) {
        job_forget(s, j);
        return;
    }
    ch->act = ACT_DISCARD;
    ch->u.note = tells && note_changed;
    ch->preason = strdup(text);
    ch->u.pending_reason = ch->preason;
}

/* Admits PENDING jobs as the policy decides; see admit.h and the comment above. */
static void admit(sched *s, round *r, int64_t now)
{
    actx c = {.s = s};
    store_pending_line *keys = NULL;
    size_t nkeys = 0;
    store_team *teams = NULL;
    size_t nteams = 0;
    admit_team *at = NULL;
    admit_room *rooms = NULL;
    char (*roomnames)[32] = NULL;
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
        ty_err e = store_pending_lines(s->st, nkeys ? &keys[nkeys - 1] : NULL, QUEUES_PAGE, &page,
                                       &got);
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
                    int limit = queue_limit(s, l->key.queue);
                    const queue_count *q = queue_find(s, l->key.queue);
                    rooms[x] = (admit_room){kind, l->key.queue, limit < 0 ? -1 : limit,
                                            q ? q->active : 0};
                } else {
                    snprintf(roomnames[x], sizeof roomnames[x], "%lld", (long long)l->key.sweep);
                    rooms[x] = (admit_room){kind, roomnames[x], l->key.parallelism,
                                            sweep_active(s, l->key.sweep)};
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
            if (t == nteams || request_of(&c, j->world, j->gpus_per_rank, j->gpu_type,
                                          j->cpu_cores, j->memory_bytes, req) != 0)
                continue;
            run[nrun] = (admit_running){.id = j->id, .team = t, .priority = j->priority,
                                        .started_ms = j->admitted_ms, .stopping = 1};
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
        if (request_of(&c, j->world, j->gpus_per_rank, j->gpu_type, j->cpu_cores,
                       j->memory_bytes, req) != 0)
            continue;
        for (size_t k = 0; k < c.nres; k++)
            at[t].used[k] += req[k];
        if (!j->launched || j->alive <= 0)
            continue; /* only a gang that runs can be preempted */
        run[nrun] = (admit_running){.id = j->id, .team = t, .priority = j->priority,
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
        job_link(s, j);
        set_act(push(r, j, JOB_FAILED, "Unschedulable", "%s", res.failed[i].why), ACT_DISCARD);
    }
    for (size_t i = 0; i < res.nadmitted; i++) {
        const admit_admitted *a = &res.admitted[i];
        sjob *j = made_take(&c, a->job.id);
        if (!j)
            continue;
        j->admitted_ms = now;
        job_link(s, j);
        pthread_mutex_lock(&s->mu);
        s->admissions++;
        s->admission_wait_ms += (uint64_t)(now > j->created_ms ? now - j->created_ms : 0);
        pthread_mutex_unlock(&s->mu);
        const admit_team *t = &at[al[a->line].team];
        push(r, j, JOB_ADMITTED, "Admitted", "queue %s, priority %lld%s%s%s", j->queue,
             (long long)a->job.priority, strcmp(t->name, STORE_TEAM_DEFAULT) ? ", team " : "",
             strcmp(t->name, STORE_TEAM_DEFAULT) ? t->name : "",
             a->borrows ? " (borrowing idle quota of other teams)" : "");
        record_begin(s, j, now);
        change *ch = push(r, j, JOB_STARTING, "Starting", "attempt %d: %d rank%s",
                          j->attempt + 1, j->world, j->world == 1 ? "" : "s");
        set_act(ch, ACT_LAUNCH);
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
        sjob *j = job_find(s, run[p->victim].id);
        if (!j || j->cause != END_NONE || j->stop_asked)
            continue;
        const char *team = at[al[p->for_line].team].name;
        char msg[256];
        if (p->kind == ADMIT_RECLAIM)
            snprintf(msg, sizeof msg, "preempted for job %s: team %s reclaims its quota",
                     p->for_id, team);
        else
            snprintf(msg, sizeof msg, "preempted for job %s of higher priority in team %s",
                     p->for_id, team);
        j->preempt_kind = p->kind;
        stop_gang(s, j, END_PREEMPTED, msg, now);
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
        if (still || !old->json || !old->queue || job_find(s, old->id))
            continue;
        sjob *j = calloc(1, sizeof *j);
        if (!j || !(j->queue = strdup(old->queue))) {
            job_free(j);
            continue;
        }
        memcpy(j->id, old->id, sizeof j->id);
        j->state = JOB_PENDING;
        job_link(s, j);
        change *ch = push(r, j, JOB_PENDING, NULL, NULL);
        if (!ch) {
            job_forget(s, j);
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
            job_free(c.made[i]);
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

/* ---- acting after the commit ---------------------------------------------- */

/*
 * Launches j's current attempt (its STARTING committed); the backend answers with events.
 * The attempt's env is the job's plus its secret values, opened from the store here and
 * only here (the spec holds none of them), TRAINYARD_TOKEN and TRAINYARD_RENDEZVOUS_SECRET,
 * which the backend copies into every rank; bj.secret_names names those three kinds, which
 * a backend that writes objects keeps out of them (a Kubernetes Secret). A job whose secrets
 * cannot be opened (the key file unreadable, a blob that does not open) is not launched: its
 * attempt fails as a launch the backend refused would. The rendezvous secret (32 random bytes in hex,
 * which trainyard-worker's ranks prove to each other before they form the gang) is minted
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
    job_backend_view(j, j->attempt, &bj);
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
        backend_event ev = {.kind = BACKEND_EV_LAUNCH_FAILED, .attempt = j->res, .rank = -1,
                            .exit_code = -1, .time_ms = ty_time_now_ms()};
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
        backend_event ev = {.kind = BACKEND_EV_LAUNCH_FAILED, .attempt = j->res, .rank = -1,
                            .exit_code = -1, .time_ms = ty_time_now_ms()};
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
        TY_LOG(TY_LOG_ERROR, "scheduler: cannot mint a job token", "{s:s, s:s}", "job_id",
               j->id, "error", ty_strerror(e));
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
    for (sjob *j = s->jobs; j; j = j->next) {
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
        int last = 1;
        for (size_t k = i + 1; k < r->n && last; k++)
            last = r->c[k].job != j;
        if (!last)
            continue;
        if (j->retry) {
            j->retry = 0; /* j->state is where the store still has it (set in commit) */
            continue;
        }
        if (j->recheck) {
            j->recheck = 0;
            recheck(s, j);
            j->dirty = 1;
            if (c->act == ACT_DISCARD || c->act == ACT_LAUNCH) {
                if (!j->launched && j->state != JOB_CANCELLING && j->state != JOB_RESTARTING)
                    job_forget(s, j); /* e.g. cancelled while PENDING: never ran */
            } else if (job_state_is_terminal(j->state) && j->alive == 0) {
                job_forget(s, j);
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
                job_forget(s, j);
            break;
        case ACT_DISCARD:
            job_forget(s, j);
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
            change *again = push(next, c->job, c->u.to, c->u.reason, "%s", c->msg);
            carry(again, c);
        }
        s->commit_failed = 1;
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        if (r->c[i].u.to == JOB_STARTING && r->c[i].u.from != JOB_STARTING)
            mint_token(&r->c[i]);
        u[i] = r->c[i].u;
    }
    ty_err e = r->n ? store_jobs_update(s->st, u, r->n) : TY_OK, failed = TY_OK;
    s->commit_failed = 0;
    for (size_t i = 0; i < r->n; i++) {
        change *c = &r->c[i];
        sjob *j = c->job;
        ty_err ue = e ? e : u[i].result;
        if (ue == TY_OK) {
            j->state = u[i].now;
            j->attempt = u[i].now_attempt;
            if (c->u.attempt_json)
                j->dirty = 0;
        } else if (ue == TY_ECONFLICT || ue == TY_ENOTFOUND || ue == TY_EINTERNAL) {
            j->recheck = 1; /* the job is not where we thought: read it again */
        } else {
            /* The store failed (I/O, busy): the same change is tried again next round. */
            if (!j->retry)
                j->state = c->u.from;
            j->retry = 1;
            change *again = push(next, j, c->u.to, c->u.reason, "%s", c->msg);
            carry(again, c);
            j->dirty = 1; /* the record goes with the retry */
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

/* Reads the change feed: new submissions wake admission; cancels reach held jobs. */
static void read_feed(sched *s)
{
    for (;;) {
        store_change *ch = NULL;
        size_t n = 0;
        if (store_changes(s->st, s->feed_seq, CHANGES_PAGE, &ch, &n) != TY_OK)
            return;
        for (size_t i = 0; i < n; i++) {
            s->feed_seq = ch[i].seq;
            if (ch[i].from == JOB_STATE_NONE) {
                s->admit_wanted = 1;
            } else if (ch[i].to == JOB_CANCELLING) {
                /* A client's cancel of a job that runs; the next decisions stop its gang. */
                sjob *j = job_find(s, ch[i].id);
                if (j && !job_state_is_terminal(j->state))
                    j->state = JOB_CANCELLING;
            }
        }
        free(ch);
        if (n < CHANGES_PAGE)
            return;
    }
}

static int64_t next_deadline(sched *s)
{
    int64_t d = 0;
    for (sjob *j = s->jobs; j; j = j->next) {
        int64_t t = 0;
        if (j->alive > 0 && j->kill_at_ms && !j->kill_sent)
            t = j->kill_at_ms;
        if (j->state == JOB_RESTARTING && !j->launched && (!t || j->restart_at_ms < t))
            t = j->restart_at_ms;
        if (j->timeout_s > 0 && j->first_start_ms > 0 && j->cause == END_NONE) {
            int64_t to = j->first_start_ms + j->timeout_s * 1000;
            if (!t || to < t)
                t = to;
        }
        if (t && (!d || t < d))
            d = t;
    }
    return d;
}

static void run_round(sched *s, round *r, round *next)
{
    int64_t now = ty_time_now_ms();
    backend_event ev[EVENTS_PAGE];
    size_t n;
    read_feed(s);
    while ((n = s->be->ops->observe(s->be, ev, EVENTS_PAGE)) > 0) {
        for (size_t i = 0; i < n; i++)
            on_event(s, &ev[i]);
        if (n < EVENTS_PAGE)
            break;
    }
    /* Changes the store failed to write last round go first, as they were decided. */
    for (size_t i = 0; i < next->n; i++) {
        change *c = push(r, next->c[i].job, next->c[i].u.to, next->c[i].u.reason, "%s",
                         next->c[i].msg);
        carry(c, &next->c[i]);
    }
    round_clear(next);
    for (sjob *j = s->jobs, *nx; j; j = nx) {
        nx = j->next;
        decide_job(s, r, j, now);
    }
    if (s->admit_wanted && !atomic_load(&s->stopping))
        admit(s, r, now);
    for (sjob *j = s->jobs; j; j = j->next)
        attach_record(r, j);
    commit(s, r, next);
    round_clear(r);
    pthread_mutex_lock(&s->mu);
    s->rounds++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- recovery ------------------------------------------------------------------ */

/* The start of the job's first attempt, for its timeout. */
static int64_t first_start(sched *s, const sjob *j)
{
    store_attempt *a = NULL;
    size_t n = 0;
    int64_t ms = 0;
    if (store_job_attempts(s->st, j->id, &a, &n) == TY_OK && n > 0) {
        json_t *rec = json_loads(a[0].json, 0, NULL);
        const char *st = json_string_value(json_object_get(rec, "started_at"));
        if (st)
            ty_time_parse_rfc3339(st, &ms);
        json_decref(rec);
    }
    store_attempts_free(a, n);
    return ms;
}

/*
 * Takes over j, which a previous server process held in a state where its gang may run:
 * the backend adopts the attempt (it carries on; 1 returned) or stops what is left of it.
 */
static int recover_job(sched *s, sjob *j, int *found)
{
    backend_job bj;
    backend_recovery rec = {0};
    char why[256] = "";
    job_backend_view(j, j->attempt, &bj);
    /* A restarting job's last attempt should have ended: what is left of it is stopped. */
    int may_adopt = j->state != JOB_RESTARTING;
    ty_err e = s->be->ops->recover(s->be, &bj, may_adopt, s->grace_ms, &rec, why, sizeof why);
    *found = rec.found;
    if (e != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "scheduler: what a job left could not be recovered", "{s:s, s:s}",
               "job_id", j->id, "error", why[0] ? why : ty_strerror(e));
        return 0;
    }
    if (!rec.adopted)
        return 0;
    /* The attempt goes on (a cancel is then carried out by the first round): its ranks'
     * events follow, running or how they ended. */
    j->res = rec.adopted;
    if (!j->have_record)
        record_begin(s, j, ty_time_now_ms());
    j->launched = 1;
    j->alive = 0;
    pthread_mutex_lock(&s->mu);
    for (int r = 0; r < j->world; r++) {
        if (j->ranks[r].state <= RANK_RUNNING)
            j->alive++;
        if (j->ranks[r].state == RANK_RUNNING)
            s->running_ranks++;
    }
    if (j->alive == 0) {
        /* The record says every rank ended, the backend that the attempt exists: what it
         * says of each rank decides. */
        for (int r = 0; r < j->world; r++)
            j->ranks[r].state = RANK_PENDING;
        j->alive = j->world;
    }
    pthread_mutex_unlock(&s->mu);
    if (j->state == JOB_STARTING)
        j->astate = ATT_STARTING;
    return 1;
}

/*
 * Takes over the jobs a previous server process held: the attempt that still runs is
 * adopted when the backend can; otherwise what is left is stopped and the attempt
 * restarts (ServerRestarted) or the cancel ends.
 */
static void recover(sched *s, round *r)
{
    const unsigned mask = 1u << JOB_ADMITTED | 1u << JOB_STARTING | 1u << JOB_RUNNING |
                          1u << JOB_RESTARTING | 1u << JOB_CANCELLING;
    int64_t before = 0;
    int64_t now = ty_time_now_ms();
    do {
        store_job_filter f = {.state_mask = mask, .before_seq = before, .limit = 1000};
        store_job *rows = NULL;
        size_t n = 0;
        int64_t next = 0;
        if (store_jobs_list(s->st, &f, &rows, &n, &next) != TY_OK)
            return;
        for (size_t i = 0; i < n; i++) {
            sjob *j = NULL;
            if (job_new(&rows[i], &j) != TY_OK)
                continue;
            record_load(j, rows[i].attempt_json);
            if (j->timeout_s > 0)
                j->first_start_ms = first_start(s, j);
            int found = 0, adopted = 0;
            if (j->state != JOB_ADMITTED)
                adopted = recover_job(s, j, &found);
            job_link(s, j);
            now = ty_time_now_ms();
            switch (j->state) {
            case JOB_ADMITTED: /* admitted, never started: back in line */
                set_act(push(r, j, JOB_PENDING, "ServerRestarted",
                             "the server restarted before the job started; it waits for "
                             "admission again"),
                        ACT_DISCARD);
                break;
            case JOB_STARTING:
            case JOB_RUNNING:
                if (adopted)
                    break; /* it carries on */
                if (j->have_record)
                    record_end(s, j, ATT_STOPPED, "ServerRestarted",
                               "the server restarted while this attempt ran", now);
                j->restart_at_ms = now;
                push(r, j, JOB_RESTARTING, "ServerRestarted",
                     "the server restarted while attempt %d ran; %d leftover process%s stopped; "
                     "restarting (does not count against restart.max)",
                     j->attempt, found, found == 1 ? " was" : "es were");
                break;
            case JOB_RESTARTING:
                j->restart_at_ms = now;
                break;
            default: /* CANCELLING: decided by the first round */
                break;
            }
            TY_LOG(TY_LOG_INFO, "scheduler: recovered a job", "{s:s, s:s, s:i, s:i, s:b}",
                   "job_id", j->id, "state", job_state_name(rows[i].state), "attempt",
                   j->attempt, "found", found, "adopted", adopted);
        }
        store_jobs_free(rows, n);
        before = next;
    } while (before > 0);
}

static void *sched_main(void *arg)
{
    sched *s = arg;
    round r = {0}, next = {0};
    s->admit_wanted = 1;
    recover(s, &r);
    for (sjob *j = s->jobs; j; j = j->next)
        attach_record(&r, j);
    commit(s, &r, &next);
    round_clear(&r);

    struct pollfd pfd[2] = {{.fd = s->wake_fd, .events = POLLIN},
                            {.fd = s->be->ops->event_fd(s->be), .events = POLLIN}};
    for (;;) {
        run_round(s, &r, &next);
        int stopping = atomic_load(&s->stopping);
        if (stopping) {
            int alive = 0;
            for (sjob *j = s->jobs; j; j = j->next)
                alive |= j->alive > 0 || j->launched;
            if (!alive && next.n == 0)
                break;
        }
        int timeout = -1;
        int busy = next.n > 0 || s->admit_wanted;
        for (sjob *j = s->jobs; j && !busy; j = j->next)
            busy = j->need_running || (j->dirty && j->have_record);
        if (s->commit_failed || s->read_failed) {
            timeout = 200;
        } else if (busy) {
            timeout = 0;
        } else {
            int64_t d = next_deadline(s);
            if (d) {
                int64_t wait = d - ty_time_now_ms();
                timeout = wait < 0 ? 0 : wait > 60000 ? 60000 : (int)wait;
            }
        }
        if (timeout != 0 && poll(pfd, pfd[1].fd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t got = read(s->wake_fd, &v, sizeof v);
            (void)got;
        }
    }
    /* Shutting down: jobs that did not run hold reservations only. */
    while (s->jobs) {
        sjob *j = s->jobs;
        job_forget(s, j);
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
    for (size_t i = 0; i < s->nlimits; i++)
        free((char *)s->limits[i].queue);
    free(s->limits);
    for (size_t i = 0; i < s->nqueues; i++)
        free(s->queues[i].name);
    free(s->queues);
    free(s->sweeps);
    for (size_t i = 0; i < s->nsaid; i++) {
        free(s->said[i].json);
        free(s->said[i].note);
        free(s->said[i].queue);
    }
    free(s->said);
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
    if (!s->stopped && !atomic_load(&s->stopping))
        for (sjob *j = s->jobs; j; j = j->next)
            if (strcmp(j->id, id) == 0) {
                running = j->attempt == attempt && rank < j->world &&
                          (j->ranks[rank].state == RANK_RUNNING ||
                           j->ranks[rank].state == RANK_PENDING);
                break;
            }
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
