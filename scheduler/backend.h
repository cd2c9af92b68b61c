/*
 * backend.h - the seam between the reconcile loop and what runs a job's ranks.
 *
 * The reconcile loop (sched.c) decides; a backend executes. Nothing above
 * this interface knows whether ranks are local processes (local.c) or the
 * pods of a Kubernetes Job. The life of a job on a backend:
 *
 *   reserve   hold the capacity the whole gang needs (slots, GPUs), or say
 *             "not now" (TY_EAGAIN: wait) or "never" (TY_EINVAL: fail the job)
 *   launch    start every rank of attempt n; repeated on the same reservation
 *             for each restart, once every rank of the previous attempt ended
 *   observe   rank exits, delivered through a pollable descriptor
 *   signal    ask the gang to stop (SIGTERM) or kill it (SIGKILL)
 *   release   give the capacity back once no rank runs
 *   recover   after a server restart: find what a previous server process
 *             started for a job and make sure none of it runs any more
 *
 * Threads: every function except the log_* ones is called from the
 * scheduler's thread only. log_open/log_read/log_close may be called from any
 * thread at any time (they serve GET /v1/jobs/{id}/logs).
 */
#ifndef TY_SCHEDULER_BACKEND_H
#define TY_SCHEDULER_BACKEND_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

/* What a backend needs to run one attempt of a job; all borrowed. */
typedef struct backend_job {
    const char *id;             /* the job id */
    int attempt;                /* 1, 2, ... (TRAINYARD_ATTEMPT) */
    int world_size;             /* workers.count: ranks in the gang */
    int gpus_per_rank;          /* resources.gpu.count, 0 for none */
    const char *gpu_type;       /* resources.gpu.type or NULL */
    const char *const *argv;    /* command then args, NULL-terminated, argv[0] non-empty */
    const char *const *env;     /* the job's env as "NAME=value", NULL-terminated */
    const json_t *spec;         /* the whole normalized spec, for what the fields above lack */
} backend_job;

/* A rank as a backend started it. */
typedef struct backend_rank {
    int pid;                    /* the local backend's process id; 0 elsewhere */
    int64_t started_ms;
} backend_rank;

/* A reservation (and the attempt running on it); owned by the backend. */
typedef struct backend_attempt backend_attempt;

/* A rank that ended. */
typedef struct backend_event {
    backend_attempt *attempt;
    int rank;
    int exit_code;              /* >= 0 when it exited, -1 when killed */
    int signal;                 /* > 0 when killed by a signal, else 0 */
    int64_t time_ms;
    char detail[160];           /* why the rank ended when the backend knows more than the
                                   status ("out of memory: ..."), else "" */
} backend_event;

/* A reader of one rank's log. */
typedef struct backend_log backend_log;

typedef struct backend backend;

typedef struct backend_ops {
    const char *name;           /* "local", "kubernetes" */
    /*
     * Holds the capacity the gang of `job` needs. TY_OK: *out holds it
     * (nothing runs yet). TY_EAGAIN: not enough is free now. TY_EINVAL: the
     * job can never run here; why says so ("needs 5 slots, this machine has
     * 4"). Other errors: why says what failed.
     */
    ty_err (*reserve)(backend *b, const backend_job *job, backend_attempt **out, char *why,
                      size_t whylen);
    /*
     * Starts every rank of job->attempt on a reservation whose previous ranks
     * (if any) have all ended. On TY_OK ranks[0..world_size) are filled and
     * one event per rank will follow when it ends. On failure no rank of
     * this attempt runs any more (what started was killed and reaped) and why
     * says what failed.
     */
    ty_err (*launch)(backend *b, backend_attempt *a, const backend_job *job, backend_rank *ranks,
                     char *why, size_t whylen);
    /* A descriptor that polls readable while observe() has events. */
    int (*event_fd)(backend *b);
    /* Copies up to max pending events into ev and returns their number; never blocks. */
    size_t (*observe)(backend *b, backend_event *ev, size_t max);
    /* hard = 0: asks every running rank of the attempt to stop (SIGTERM to the
     * whole process group); hard = 1: kills them (SIGKILL). */
    void (*signal)(backend *b, backend_attempt *a, int hard);
    /* Frees the reservation. Only once every launched rank has ended. */
    void (*release)(backend *b, backend_attempt *a);
    /*
     * For a job a previous server process may have run: finds whatever of it
     * still runs on this backend, stops it (SIGTERM, then SIGKILL after
     * grace_ms) and returns once none of it runs, with *found set to the
     * number of processes (or pods) that were found. Blocks.
     */
    ty_err (*recover)(backend *b, const char *job_id, int grace_ms, int *found);
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
    /* Frees the backend; every reservation must have been released. */
    void (*free)(backend *b);
} backend_ops;

/* Every backend embeds this as its first member. */
struct backend {
    const backend_ops *ops;
};

#endif
