/*
 * admit.h - the admission policy: which pending jobs to admit, which running jobs to preempt for
 * them, and why every other pending head waits. A pure function of a snapshot that the reconcile
 * loop gathers (teams, their quotas and usage, the cluster's free capacity, the head of every
 * pending line, the running jobs); it reads no store and calls no backend but through the two
 * callbacks the snapshot carries (the next job of a line, and optionally the backend's booking).
 *
 * Resources. A snapshot names up to ADMIT_MAX_RES resources: one per GPU type (the profile's type
 * names), `cpu` (millicores) and `memory` (bytes). A job's request is its gang's sum over ranks.
 * A team has per resource a nominal quota and a borrowing limit (ADMIT_UNLIMITED: none). The
 * cohort total of a resource is the sum of the teams' nominal quotas (unlimited if any team's is).
 *
 * The rules, in the order a round applies them:
 *
 *   Fits. A job fits its quota when, for every resource, the team's usage plus the request stays
 *   within the nominal quota; it fits by borrowing when it stays within nominal + borrowing limit
 *   and the cohort still has that much idle: cohort total minus every team's usage, minus what
 *   the other teams' heads that fit their nominal quota ask for (those their queue or sweep does
 *   not hold back): a team waiting within its quota leaves nothing idle, so the victim of a
 *   reclaim does not borrow back the room it gave. Either way it is admitted only if the
 *   cluster's free capacity holds the request, and then, when the snapshot has a reserve
 *   callback, only if the backend books it.
 *
 *   Fair share. Among teams with a head that may be tried, the next job tried is the best head of
 *   the team with the lowest weighted dominant share: max over resources of usage / cohort total
 *   (resources with an unlimited or zero cohort total do not count), divided by the team's weight;
 *   ties by that head's priority (higher first), then age (lower seq first). Within a team the
 *   order is priority then age, across all its lines. Usage includes this round's admissions.
 *
 *   Lines. A line is a FIFO (a queue's jobs outside sweeps, or one sweep's trials) of one team;
 *   only its head can be admitted. Queue limits and sweep parallelism are rooms shared by lines:
 *   a line whose room is used up stops (its head waits with QueueLimit or SweepParallelism).
 *
 *   No backfill, per GPU type. A job's class is the first GPU type it asks for, or "no GPU". A
 *   head refused on quota stops its team's class for the rest of the round (its team's smaller
 *   jobs of that type do not pass it; its other types go on, and other teams are not blocked). A
 *   head refused for capacity (free capacity, or the reserve callback's "not now"), or waiting for
 *   preempted jobs to stop, stops its class for every team: a wide gang is not starved by a stream
 *   of small ones of the same GPU type, and the other types go on.
 *
 *   Reclaim. A head that fits its team's nominal quota but not the free capacity (plus what jobs
 *   already stopping will give back) takes it back from borrowers: running jobs of teams whose
 *   usage exceeds their nominal quota in a resource the head lacks and the job uses, lowest
 *   priority first, then most recently started, a team being a lender again no further than one
 *   job below its nominal. Victims are chosen only if they free enough; else nobody is preempted.
 *
 *   Priority preemption (a per-team switch, off by default). A head that does not fit may preempt
 *   its own team's running jobs of lower priority that give back something it lacks (quota or
 *   capacity), in the same order, until it fits quota and capacity; only if that suffices.
 *
 *   No cascade. A job is never preempted to admit one that would itself be preempted in the same
 *   round: a reclaim preemptor fits its nominal quota (it borrows nothing, so no reclaim takes it);
 *   a priority preemptor may end up borrowing a resource only if no other team's head of this
 *   snapshot fits its nominal quota for that resource (none could reclaim it). A job being
 *   stopped, or already chosen as a victim this round, is never chosen again, and a preemptor
 *   waits for its victims to stop (the loop does not admit it this round).
 *
 * Positions. Every head not admitted gets a reason and two positions: `position`, its place in
 * the order admission would take the remaining heads if nothing changed (the same DRF order,
 * each head's request added to its team's usage as it is taken), and `team_position`, its place
 * among its team's heads (priority, then age). Both count heads only. A job deeper in a line has
 * no position from this module: its reason is its line's head's, and the store can say how many
 * jobs of its line are ahead of it when a person asks (one index count then, never in a round).
 *
 * Cost. A round costs O(tries x (teams + the tried team's lines) x resources + lines x log lines)
 * (a team's best head is found again only when it can have changed; positions go through a heap
 * of teams), plus O(running log running) when a preemption is considered: never a function of
 * the number of pending jobs, which the module never sees.
 *
 * Threads: none of its own; a result is used by one thread at a time.
 */
#ifndef TY_SCHEDULER_ADMIT_H
#define TY_SCHEDULER_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

#define ADMIT_MAX_RES 16     /* resources in a snapshot: GPU types + cpu + memory */
#define ADMIT_UNLIMITED (-1) /* a quota or borrowing limit that does not limit */
#define ADMIT_MAX_QTY                                                                              \
    (1LL << 52) /* the largest quantity anywhere (4 PiB of memory), so that                        \
                   sums of up to 2,000 of them cannot overflow */

typedef enum admit_res_kind {
    ADMIT_RES_GPU = 0, /* GPUs of one type (a count) */
    ADMIT_RES_CPU,     /* millicores */
    ADMIT_RES_MEMORY,  /* bytes */
} admit_res_kind;

typedef struct admit_resource {
    const char *name; /* "a100", "cpu", "memory": used in messages */
    admit_res_kind kind;
    int64_t free; /* the cluster's free capacity now, the backend's view (>= 0) */
} admit_resource;

typedef struct admit_team {
    const char *name;
    double weight;                  /* > 0; 1 by default */
    int64_t nominal[ADMIT_MAX_RES]; /* quota per resource, or ADMIT_UNLIMITED */
    int64_t borrow[ADMIT_MAX_RES];  /* most it may use beyond nominal, or ADMIT_UNLIMITED */
    int64_t used[ADMIT_MAX_RES];    /* what its held jobs (admitted, running, stopping) use */
    int preempt_within;             /* 1: a higher-priority job may preempt its lower ones */
} admit_team;

/* A pending job as admission sees it. */
typedef struct admit_job {
    const char *id;             /* borrowed: must stay valid until the result is acted on */
    int64_t priority;           /* higher first */
    int64_t seq;                /* age: lower is older */
    int64_t req[ADMIT_MAX_RES]; /* the whole gang's request */
    int preempted;              /* it waits again because it was preempted */
} admit_job;

/* A shared room: a queue's limit or a sweep's parallelism. */
typedef enum admit_room_kind {
    ADMIT_ROOM_QUEUE = 1,
    ADMIT_ROOM_SWEEP,
} admit_room_kind;

typedef struct admit_room {
    admit_room_kind kind;
    const char *name; /* the queue's name, or the sweep's id as text */
    int limit;        /* jobs active at once; < 0: unlimited */
    int active;       /* active now (ADMITTED..CANCELLING) */
} admit_room;

typedef struct admit_line {
    size_t team;    /* index in the snapshot's teams */
    int room[2];    /* indices in the snapshot's rooms (its queue, its sweep); -1: none */
    int has_head;   /* 0: the line is empty (it is then ignored) */
    admit_job head; /* with has_head */
} admit_line;

/* A held job that a preemption may stop. */
typedef struct admit_running {
    const char *id; /* borrowed */
    size_t team;
    int64_t priority;
    int64_t started_ms; /* when it was admitted: the most recent goes first */
    int64_t req[ADMIT_MAX_RES];
    int stopping; /* being stopped already: its capacity comes back soon */
} admit_running;

/*
 * The next job of line (the one after the head just admitted or failed): 1 with *out filled, 0 when
 * the line has no more, -1 when it cannot be read. On -1, or a job whose request is negative or
 * over ADMIT_MAX_QTY, the line counts as empty for the rest of the round (the loop knows why).
 */
typedef int (*admit_next_fn)(void *ctx, size_t line, admit_job *out);

typedef enum admit_fit {
    ADMIT_FIT_OK = 0,  /* booked: the job is admitted */
    ADMIT_FIT_NOT_NOW, /* the backend has no room now (why says what lacks) */
    ADMIT_FIT_NEVER,   /* the backend can never run it: the loop fails the job */
} admit_fit;

/* The backend's booking (sched.c: reserve()), asked for each job the policy admits. */
typedef admit_fit (*admit_reserve_fn)(void *ctx, size_t line, const admit_job *job, char *why,
                                      size_t whylen);

typedef struct admit_snapshot {
    const admit_resource *res;
    size_t nres; /* 1..ADMIT_MAX_RES */
    const admit_team *teams;
    size_t nteams;
    const admit_room *rooms;
    size_t nrooms;
    const admit_line *lines; /* the heads; the module copies them */
    size_t nlines;
    const admit_running *running;
    size_t nrunning;
    int max_admits;           /* admissions per round; <= 0: no cap */
    admit_next_fn next;       /* required */
    admit_reserve_fn reserve; /* NULL: the free capacity alone decides */
    void *ctx;                /* passed to both */
} admit_snapshot;

typedef enum admit_reason {
    ADMIT_QUOTA_EXCEEDED = 1, /* over nominal + borrowing, or the cohort has too little idle */
    ADMIT_QUEUE_LIMIT,        /* its queue is at its limit */
    ADMIT_SWEEP_PARALLELISM,  /* its sweep is at its parallelism */
    ADMIT_NO_CAPACITY,        /* the cluster (or the backend) has no room now */
    ADMIT_PREEMPTING,         /* jobs are being preempted for it: it waits for them to stop */
    ADMIT_PREEMPTED,          /* it was preempted and waits again (the message says for what) */
    ADMIT_BEHIND,             /* a head of its team or GPU type ahead of it waits */
    ADMIT_ROUND_CAP,          /* the round's admission cap was reached: the next round goes on */
} admit_reason;

typedef enum admit_preempt_kind {
    ADMIT_RECLAIM = 1, /* a borrower gives back another team's nominal quota */
    ADMIT_PRIORITY,    /* a higher-priority job of the same team */
} admit_preempt_kind;

typedef struct admit_admitted {
    size_t line;
    admit_job job; /* the job (id borrowed as given) */
    int borrows;   /* 1: its team is over its nominal quota once it runs */
} admit_admitted;

typedef struct admit_failed {
    size_t line;
    admit_job job;
    char why[256]; /* the reserve callback's reason */
} admit_failed;

typedef struct admit_preemption {
    size_t victim;      /* index in the snapshot's running */
    size_t for_line;    /* the line whose head it makes room for */
    const char *for_id; /* that head's id */
    admit_preempt_kind kind;
} admit_preemption;

/* The facts behind a pending head's message; admit_message() writes the sentence. */
typedef struct admit_facts {
    int res; /* the resource concerned; -1 none */
    int64_t used, nominal, borrowed, borrow, need, idle, released;
    int room;                /* QUEUE_LIMIT / SWEEP_PARALLELISM: index in rooms */
    const char *blocker;     /* BEHIND: the id of the head ahead that waits (borrowed) */
    int victims;             /* PREEMPTING: victims chosen this round */
    admit_preempt_kind kind; /* PREEMPTING: reclaim or priority */
    admit_reason cause;      /* PREEMPTED: why it waits now; BEHIND: why the blocker waits */
    char why[256];           /* NO_CAPACITY from the reserve callback */
} admit_facts;

typedef struct admit_pending {
    size_t line;
    admit_job job; /* the head (id borrowed) */
    admit_reason reason;
    admit_facts facts;
    int64_t position;      /* 1-based, over every head not admitted */
    int64_t team_position; /* 1-based, over its team's heads not admitted */
} admit_pending;

/* A round's decisions. Its arrays are kept for the next round: reuse one result. */
typedef struct admit_result {
    admit_admitted *admitted; /* in the order they were decided */
    size_t nadmitted;
    admit_failed *failed; /* the backend said never */
    size_t nfailed;
    admit_preemption *preemptions; /* grouped by preemptor, victims in order */
    size_t npreemptions;
    admit_pending *pending; /* one per line with a head left, by position */
    size_t npending;
    void *priv; /* the module's working memory */
} admit_result;

/* An empty result, to be passed to admit_round() and freed with admit_result_free(). */
void admit_result_init(admit_result *r);

/* Frees what r holds (not r). Accepts NULL. */
void admit_result_free(admit_result *r);

/*
 * Decides one round. snap and everything it points to are borrowed; *r is overwritten (its arrays
 * reused). Calls snap->next for each line whose head it admits or fails, and snap->reserve (when
 * set) for each job it would admit, in the order of r->admitted. TY_EINVAL for a snapshot that
 * breaks the contract above (msg says how); TY_ENOMEM. On error *r holds no decisions.
 */
ty_err admit_round(const admit_snapshot *snap, admit_result *r, char *msg, size_t msglen);

/* "QuotaExceeded", "QueueLimit", ...: the pending_reason's code. Never NULL. */
const char *admit_reason_name(admit_reason reason);

/*
 * The sentence a person reads for p, e.g. "team vision uses 14 of 16 a100 and borrows 0 of 8;
 * this job needs 4; the cohort has 1 idle a100". Written into buf (truncated, always terminated);
 * snap must be the snapshot of the round that produced p. Returns buf.
 */
char *admit_message(const admit_snapshot *snap, const admit_pending *p, char *buf, size_t len);

#endif
