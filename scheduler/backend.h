/*
 * backend.h - the seam between the reconcile loop and what runs a job's ranks.
 *
 * The reconcile loop (sched.c) decides; a backend executes and reports.
 * Nothing above this interface knows whether ranks are local processes
 * (local.c) or the pods of a Kubernetes Job. The life of a job on a backend:
 *
 *   reserve   book the capacity the whole gang needs in the backend's own
 *             view of it (slots, GPUs, a zone with room), or say "not now"
 *             (TY_EAGAIN: wait, with a reason) or "never" (TY_EINVAL: fail)
 *   launch    start every rank of attempt n on a reservation; returns at once,
 *             what happens next arrives as events (placed, pending, running,
 *             or launch failed); repeated on the same reservation for each
 *             restart, once every rank of the previous attempt has ended
 *   observe   the events of every attempt, through a pollable descriptor
 *   stop      ask the gang to stop (graceful) or kill it (hard); returns at
 *             once, the ranks' ends arrive as events
 *   release   give the capacity back once no rank of the reservation runs
 *   recover   after a server restart: find what a previous server process
 *             started for a job and either adopt it (it keeps running, its
 *             events follow) or stop it
 *
 * Classification is the backend's, cost is the loop's. A backend says what
 * happened to a rank in the terms of the interface: it exited on its own
 * (EXITED, with exit code, signal and what else it knows, e.g. "OOMKilled"),
 * or it was taken away by something outside the application (DISRUPTED:
 * evicted, preempted, node lost, stop requested). The loop decides what that
 * costs: an application failure spends restart.max, a disruption does not.
 *
 * Never blocking. Every function except recover() returns without waiting
 * for the outside world: no HTTP request, no wait for a process. A backend
 * that talks to a remote API does so on its own threads and hands the results
 * to observe(); its reserve() answers from the inventory it keeps (watches),
 * not from a request.
 *
 * Threads: every function except log_*, capacity, rank_limits and cluster is
 * called from the scheduler's thread only. log_open/log_read/log_close may be called from any
 * thread at any time (they serve GET /v1/jobs/{id}/logs).
 */
#ifndef TY_SCHEDULER_BACKEND_H
#define TY_SCHEDULER_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/ty_error.h"

#define BACKEND_NAME_MAX 254   /* a pod or node name: a DNS subdomain, 253 bytes, and NUL */
#define BACKEND_DETAIL_MAX 256

/* One volume of the spec (volumes[]): a claim mounted into every rank. */
typedef struct backend_volume {
    const char *claim;          /* a PersistentVolumeClaim name */
    const char *mount;          /* absolute path inside the rank */
    int read_only;
} backend_volume;

/*
 * What a backend needs to run one attempt of a job, typed so that no backend
 * reads the spec JSON; all borrowed, valid for the duration of the call.
 * Resources are per rank.
 */
typedef struct backend_job {
    const char *id;             /* the job id (26 characters) */
    int attempt;                /* 1, 2, ... (TRAINYARD_ATTEMPT) */
    int world_size;             /* workers.count: ranks in the gang */
    const char *const *argv;    /* command then args, NULL-terminated, argv[0] non-empty */
    const char *const *env;     /* the job's env as "NAME=value", NULL-terminated; at
                                   launch() its secret values, TRAINYARD_TOKEN and
                                   TRAINYARD_RENDEZVOUS_SECRET too */
    const char *const *secret_names; /* the names of env whose values are secrets (never
                                   logged; on Kubernetes held by a Secret, not the pod
                                   template), NULL-terminated; NULL: none */
    const char *image;          /* the container image, or NULL (the local backend runs the
                                   command on the host and ignores it) */
    const char *cpu;            /* resources.cpu as written ("1", "500m"), for rendering */
    const char *memory;         /* resources.memory as written ("2Gi") */
    double cpu_cores;           /* the same, parsed: 0.5 */
    double memory_bytes;        /* 2147483648 */
    int gpus_per_rank;          /* resources.gpu.count, 0 for none */
    const char *gpu_type;       /* resources.gpu.type, or NULL for any */
    const char *zone;           /* placement.zone: "auto" or a zone name */
    const char *capacity;       /* placement.capacity: "on-demand" or "spot" */
    const backend_volume *volumes;
    size_t nvolumes;
    int64_t timeout_s;          /* timeout_seconds, 0 for none. The loop enforces it; a backend
                                   may pass it on as well (activeDeadlineSeconds) */
    /* What a backend that creates objects of its own (Kubernetes) shows or keeps of them: */
    const char *name;           /* the job's name, or NULL */
    int ncommand;               /* argv's first ncommand strings are the spec's command, the rest
                                   its args (a rendered container keeps them apart); 0: all */
    int has_ttl;                /* 1 when the spec gave ttl_seconds_after_finished */
    int64_t ttl_seconds_after_finished; /* with has_ttl: how long a finished job's objects stay */
} backend_job;

/* Where a rank runs, as far as the backend knows; "" / 0 for what it does not know. */
typedef struct backend_rank {
    int pid;                    /* the local backend's process id; 0 elsewhere */
    char pod[BACKEND_NAME_MAX];  /* the pod's name (Kubernetes) */
    char node[BACKEND_NAME_MAX]; /* the node it was placed on (Kubernetes) */
    int64_t started_ms;         /* when it started running; 0 before */
} backend_rank;

/* A reservation (and the attempt running on it); owned by the backend. */
typedef struct backend_attempt backend_attempt;

typedef enum backend_event_kind {
    /* Rank `rank` (or every rank: -1) has a place, not yet running: where.node (and pod). */
    BACKEND_EV_PLACED = 1,
    /* The attempt (rank -1) or one rank waits for something outside the backend's control;
     * detail says what, in words a person can act on ("0/12 nodes are available: 4
     * Insufficient nvidia.com/gpu", "image pull: not found"). Repeated when the reason changes. */
    BACKEND_EV_PENDING,
    /* Rank `rank` runs; `where` says where (pid, pod, node, started_ms). */
    BACKEND_EV_RUNNING,
    /* Rank `rank` ended on its own: exit_code >= 0, or signal > 0 (exit_code -1); detail is
     * what the backend knows beyond the status ("OOMKilled", "out of memory: ..."), or "". */
    BACKEND_EV_EXITED,
    /* Rank `rank` (or every rank: -1) was taken away or is about to be, for a reason outside
     * the application (see `disruption`); `ended` says whether it has ended (then exit_code
     * and signal as for EXITED, when known) or still runs (a notice: the loop stops the gang). */
    BACKEND_EV_DISRUPTED,
    /* The attempt could not be started (detail says why). Nothing of it runs any more and no
     * other event of this attempt follows; the reservation is still held. */
    BACKEND_EV_LAUNCH_FAILED,
    /* A stop() could not be delivered (detail says why); ranks may still run. The loop asks
     * again (hard) after its grace period. */
    BACKEND_EV_STOP_FAILED,
    /* Capacity grew outside the loop's doing (a node joined, another tenant's pods ended):
     * a job waiting for reserve() is reconsidered. attempt is NULL. Capacity given back by
     * release() needs no event. */
    BACKEND_EV_CAPACITY,
    /* The attempt (rank -1) went over a limit the backend keeps on the job as a whole,
     * beyond any rank's own resources (`limit` says which); detail says by how much ("job
     * directory uses 1.2 GiB, over its limit of 1 GiB"). Its ranks still run: the loop
     * stops the gang and decides what it costs. Said once per attempt. */
    BACKEND_EV_OVER_LIMIT,
    /* The attempt (rank -1) was placed: `placement` says where and what it waits for, detail
     * says it in words a person reads ("placed in us-west-2a: 2 of 4 ranks fit on existing
     * nodes, waiting for 2 nodes of group p4d-od-2a (up to 900 s)"). Once per launch, by a
     * backend that chooses where a gang goes (Kubernetes); before any PLACED of the attempt. */
    BACKEND_EV_PLACEMENT,
} backend_event_kind;

/* OVER_LIMIT: which limit. */
typedef enum backend_limit {
    BACKEND_LIMIT_DISK = 1,             /* the job's directory (working, output, checkpoints):
                                           a restart would start on the same full disk */
} backend_limit;

typedef enum backend_disruption {
    BACKEND_DISRUPT_STOP_REQUESTED = 1, /* ended after stop() was asked */
    BACKEND_DISRUPT_EVICTED,            /* evicted (node pressure, API eviction) */
    BACKEND_DISRUPT_PREEMPTED,          /* preempted by a pod of higher priority */
    BACKEND_DISRUPT_NODE_LOST,          /* its node disappeared or stopped answering */
    BACKEND_DISRUPT_RECLAIMED,          /* spot capacity reclaimed, or a notice of it */
    BACKEND_DISRUPT_RESUMABLE,          /* the rank exited 75 ("stopped, resumable") because
                                           its environment asked it to */
    BACKEND_DISRUPT_WITHDRAWN,          /* the backend took back an attempt that could not
                                           start where it was placed (its node group did not
                                           grow in time, its pods stayed unschedulable) to
                                           place it again; detail says so in full
                                           ("withdrawn from us-west-2a: ...; placing again") */
} backend_disruption;

/* Where an attempt was placed (PLACEMENT); "" / 0 for what does not apply. */
#define BACKEND_PLACEMENT_GROUPS 4
typedef struct backend_placement {
    char zone[64];
    char capacity[32];          /* "spot", "on-demand"; "" for any */
    char gpu_type[64];          /* "" for a gang without GPUs */
    int fit_ranks;              /* ranks that fit on the nodes that exist */
    struct {
        char name[64];          /* a node group that must grow for the rest */
        int nodes;              /* by this many nodes */
    } groups[BACKEND_PLACEMENT_GROUPS];
    int ngroups;
    int64_t deadline_ms;        /* with groups: when the attempt is withdrawn if they have not
                                   grown (wall clock); 0: none */
} backend_placement;

typedef struct backend_event {
    backend_event_kind kind;
    backend_attempt *attempt;   /* NULL only for BACKEND_EV_CAPACITY */
    int rank;                   /* 0..world_size-1, or -1 for the whole attempt */
    backend_rank where;         /* PLACED, RUNNING: where the rank is */
    int exit_code;              /* EXITED, DISRUPTED with ended: >= 0 when it exited, else -1 */
    int signal;                 /* > 0 when killed by a signal, else 0 */
    backend_disruption disruption; /* DISRUPTED: why */
    int ended;                  /* DISRUPTED: 1 when the rank has ended, 0 for a notice */
    backend_limit limit;        /* OVER_LIMIT: which */
    backend_placement placement; /* PLACEMENT: where */
    int64_t time_ms;            /* when it happened, wall clock */
    char detail[BACKEND_DETAIL_MAX]; /* words for a person, see each kind; "" when none */
} backend_event;

/* What recover() found of a job. */
typedef struct backend_recovery {
    /* Non-NULL: the attempt job->attempt still exists and was adopted, as a reservation
     * with that attempt launched on it. It carries on: observe() delivers the state of
     * each of its ranks (RUNNING for those that run, EXITED or DISRUPTED for those that
     * ended while no server watched), then everything as for a launch. */
    backend_attempt *adopted;
    int found;                  /* processes or pods found (adopted or stopped) */
} backend_recovery;

/* A reader of one rank's log. */
typedef struct backend_log backend_log;

/* The most one rank could ever get (rank_limits()); 0 where the backend does not know. */
typedef struct backend_rank_limit {
    const char *gpu_type;       /* NULL: any rank; else ranks asking for this GPU type
                                   (borrowed from the backend, valid for its life) */
    int64_t cpu_millis;         /* CPUs x 1000 */
    int64_t memory_bytes;
    int gpus;                   /* GPUs per rank */
} backend_rank_limit;

/* The free capacity of one resource (free_resources()). */
typedef enum backend_res_kind {
    BACKEND_RES_GPU = 0,        /* GPUs of one type */
    BACKEND_RES_CPU,            /* millicores */
    BACKEND_RES_MEMORY,         /* bytes */
} backend_res_kind;

typedef struct backend_free {
    backend_res_kind kind;
    const char *gpu_type;       /* BACKEND_RES_GPU: the type's name (borrowed from the backend,
                                   valid for its life) */
    int64_t free;               /* >= 0: not reserved now */
    int64_t total;              /* >= free */
} backend_free;

/*
 * The cluster as the backend sees it (cluster()): its nodes and the node groups it knows of.
 * Arrays new, released with backend_cluster_clear(); strings inline.
 */
typedef struct backend_node {
    char name[BACKEND_NAME_MAX];
    char zone[64];             /* "" when the node is in no zone */
    char gpu_type[64];         /* the type placement knows it as; "" when it has no GPUs or no
                                  known type matches it (see unknown_gpu) */
    char gpu_product[128];     /* what the node says of its GPUs (nvidia.com/gpu.product), or "" */
    char group[128];           /* the node group it belongs to (eks.amazonaws.com/nodegroup),
                                  or "" */
    char capacity[16];         /* "spot", "on-demand", or "" when no capacity type matches */
    int ready;                 /* ready for pods */
    int cordoned;              /* marked unschedulable by an operator */
    int gpus_allocatable;
    int gpus_trainyard;        /* GPUs the ranks of this server's attempts use there */
    int gpus_others;           /* GPUs every other pod bound there uses */
    int quarantined;           /* the whole node is excluded (exclude_nodes()) */
    int gpus_quarantined;      /* its GPUs that are excluded: all of a quarantined node's, or
                                  the quarantined GPUs of a machine whose GPUs are its nodes */
    int unknown_group;         /* a GPU node whose group is not one the backend places on */
    int unknown_gpu;           /* a GPU node that matches no GPU type the backend knows */
} backend_node;

#define BACKEND_GROUP_MISMATCH 4

typedef struct backend_group {
    char name[128];
    char zone[64];
    char gpu_type[64];
    char capacity[16];
    int gpus_per_node;
    int size;                  /* nodes of the cluster that carry its name now */
    int max_size;
    /* With size 0: the node groups the cluster has in its place (nodes of its zone, GPU type
     * and capacity type under a group name it does not know), which placement counts as nodes
     * while it does not count this group as able to grow; nmismatch 0: none. */
    char mismatch[BACKEND_GROUP_MISMATCH][128];
    int nmismatch;
} backend_group;

typedef struct backend_cluster {
    backend_node *nodes;
    size_t nnodes;
    backend_group *groups;
    size_t ngroups;
} backend_cluster;

/* Frees the arrays of c and zeroes it; accepts NULL and a zeroed c. */
static inline void backend_cluster_clear(backend_cluster *c)
{
    if (!c)
        return;
    free(c->nodes);
    free(c->groups);
    c->nodes = NULL;
    c->groups = NULL;
    c->nnodes = c->ngroups = 0;
}

typedef struct backend backend;

typedef struct backend_ops {
    const char *name;           /* "local", "kubernetes" */
    /*
     * 1: what an attempt runs outlives the server (objects in a cluster) and recover() adopts
     * it, so a graceful stop of the server leaves every gang running for the next start to
     * adopt; 0: the ranks die with the server, and a graceful stop stops every gang first.
     */
    int adopts;
    /*
     * Books the capacity the gang of `job` needs, from what the backend knows
     * now (never a request to the outside). TY_OK: *out holds it (nothing
     * runs yet) and keeps it across every attempt until release(). TY_EAGAIN:
     * not enough is free now; why says what is missing ("needs 4 slots, 2 of 8
     * free"); a BACKEND_EV_CAPACITY or a release() is the time to ask again.
     * TY_EINVAL: the job can never run here; why says so ("needs 5 slots, this
     * machine has 4"). Other errors: why says what failed.
     */
    ty_err (*reserve)(backend *b, const backend_job *job, backend_attempt **out, char *why,
                      size_t whylen);
    /*
     * Starts every rank of job->attempt on a reservation whose previous ranks
     * (if any) have all ended. Returns at once. Events follow: PLACED and
     * PENDING while the ranks wait, RUNNING for each rank that runs, then one
     * EXITED or DISRUPTED (ended) per rank; or a single LAUNCH_FAILED when
     * the attempt cannot be started, after which nothing of it runs (a gang
     * missing a rank would only hang in its rendezvous).
     */
    void (*launch)(backend *b, backend_attempt *a, const backend_job *job);
    /* A descriptor that polls readable while observe() has events, or -1 when the backend
     * has no descriptor (the loop then polls observe() every round). */
    int (*event_fd)(backend *b);
    /* Copies up to max pending events into ev and returns their number; never blocks. */
    size_t (*observe)(backend *b, backend_event *ev, size_t max);
    /*
     * hard = 0: asks every rank of the attempt to stop (SIGTERM; a pod deleted with
     * its grace period), so that workers can checkpoint; hard = 1: ends them now
     * (SIGKILL; grace period 0). Returns at once; each rank's end is an event
     * (DISRUPTED, STOP_REQUESTED, or EXITED when it ended before the request); a
     * request that failed is a STOP_FAILED event. Harmless when nothing runs.
     */
    void (*stop)(backend *b, backend_attempt *a, int hard);
    /* Frees the reservation. Only once no rank of it runs (every launched rank's end
     * was observed, or its launch failed). */
    void (*release)(backend *b, backend_attempt *a);
    /*
     * For a job a previous server process may have run, with job->attempt the
     * attempt the store last recorded: finds what of it still exists on this
     * backend. When may_adopt is 1 (the store says that attempt runs), a
     * backend that can carry on an attempt it did not start adopts it
     * (out->adopted; a Kubernetes backend must, so that a server restart never
     * restarts a running training job). Anything it does not adopt (all of it
     * when may_adopt is 0, and older attempts) it stops, and returns once none
     * of that runs. Called only at start, before
     * the first round, and allowed to block for that: a remote backend answers
     * from the objects it listed when it started; the local backend cannot
     * adopt (its ranks' pipes died with the previous process) and stops what it
     * finds, SIGTERM then SIGKILL after grace_ms.
     */
    ty_err (*recover)(backend *b, const backend_job *job, int may_adopt, int grace_ms,
                      backend_recovery *out, char *why, size_t whylen);
    /*
     * Opens the log of one rank of one attempt: from its beginning when
     * tail_lines < 0, else from the start of its last tail_lines lines (all of
     * it when it has fewer). A backend that caps logs begins a log whose older
     * part was dropped with one line that says so. TY_ENOTFOUND when that rank
     * never started. log_read() returns the number of bytes copied, 0 at the
     * current end (more may come while the rank runs), -1 on an error.
     */
    ty_err (*log_open)(backend *b, const char *job_id, int attempt, int rank, long tail_lines,
                       backend_log **out);
    long (*log_read)(backend_log *l, char *buf, size_t max);
    void (*log_close)(backend_log *l);
    /* The capacity in ranks (-1 when unbounded or unknown) and how much of it
     * is reserved now. Any thread (it serves /metrics). */
    void (*capacity)(const backend *b, int *total, int *used);
    /*
     * The largest rank the backend could ever place, whatever runs now, so that the API can
     * refuse (422) what would otherwise wait or fail later: out[0] for any rank (gpu_type
     * NULL), then one entry per GPU type it knows: returns their number n, and fills
     * out[0..n) when max >= n (max 0 sizes the array). May be NULL: nothing is known. Any
     * thread.
     */
    size_t (*rank_limits)(const backend *b, backend_rank_limit *out, size_t max);
    /*
     * The free capacity per resource the backend counts, for admission across teams:
     * returns their number n and fills out[0..n) when max >= n (max 0 sizes the array). A
     * resource the backend does not count is left out: reserve() alone decides on it, and
     * reserve() stays the final word on the rest. May be NULL: nothing is counted. Called
     * from the scheduler thread only (like reserve() and release()).
     */
    size_t (*free_resources)(const backend *b, backend_free *out, size_t max);
    /*
     * The cluster as the backend sees it now, for people (GET /v1/cluster): *out is filled
     * with new arrays (backend_cluster_clear()). A node excluded by exclude_nodes() is still
     * listed, as it is. TY_ENOMEM. May be NULL: the backend has nothing to show. Any thread.
     */
    ty_err (*cluster)(backend *b, backend_cluster *out);
    /*
     * The nodes no attempt may be placed on from now on (quarantined: see scheduler/quarantine.h),
     * replacing the previous set; names borrowed, copied. What already runs there is left alone;
     * reserve(), free_resources() and the next launch() leave them out (their GPUs are not
     * free, and a rendered gang is kept off them). A backend that runs on one machine names its
     * GPUs ("gpu0", "gpu1", ...) as its nodes. May be NULL: nothing can be excluded. Called
     * from the scheduler thread only.
     */
    void (*exclude_nodes)(backend *b, const char *const *nodes, size_t n);
    /* Frees the backend; every reservation must have been released. */
    void (*free)(backend *b);
} backend_ops;

/* Every backend embeds this as its first member. */
struct backend {
    const backend_ops *ops;
};

#endif
