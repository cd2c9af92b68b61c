/*
 * kube_logs.h - the logs of a Kubernetes backend's ranks, kept by the server: while a rank's
 * container runs, its pods/log is streamed into the same capped files per attempt and rank as
 * the local backend writes (ranklog.h): <dir>/<id>/a<n>/rank-<r>.log. The API reads those
 * files, never pods, so a log outlives its pod (a gang restart, the Job's TTL, a lost node).
 *
 * One thread and one curl multi handle move every stream: GET pods/{name}/log?follow=true&
 * timestamps=true&container=... , one per pod whose container started, opened as the client's
 * rate limiter allows. Each line's timestamp is cut off before it is written; the last one
 * written, how many lines carried it and where the log ended are kept beside the log
 * (rank-<r>.log.since), so that a stream that broke, or a server that restarted, goes on with
 * sinceTime from there and drops the lines it already has: none are written twice, and a line
 * a server wrote past its last record (killed between the two writes) is cut and fetched again.
 * A stream that ended with its container (the body's end after the pod terminated) is marked
 * complete and never opened again.
 *
 * Bounded: a stream holds a curl transfer (its receive buffer), its files and a few hundred
 * bytes; what arrives is written to disk in the transfer's callback, so nothing queues in
 * memory, and a disk slower than the kubelet pauses the socket (TCP backpressure). Each log is
 * capped per rank (rotation, ranklog.h); when a job's attempt n >= 2 begins, the older
 * attempts' logs are pruned to the job's total as the local backend does.
 *
 * Threads: every function may be called from any thread; kube_logs_pod() never blocks (it
 * hands the change to the thread).
 */
#ifndef TY_SCHEDULER_KUBE_KUBE_LOGS_H
#define TY_SCHEDULER_KUBE_KUBE_LOGS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "scheduler/kube/kclient.h"

typedef struct kube_logs kube_logs;

typedef struct kube_logs_opts {
    ty_kclient *client;           /* borrowed; outlives the collector */
    const char *namespace_;       /* the pods' namespace */
    const char *dir;              /* the logs' root, <data_dir>/logs (created when missing) */
    uint64_t rank_limit;          /* bytes kept of one rank's log; 0: RANKLOG_DEFAULT_LIMIT */
    uint64_t job_limit;           /* bytes the previous attempts' logs of a job keep;
                                     0: RANKLOG_JOB_LIMIT_FACTOR x rank_limit */
} kube_logs_opts;

/* Starts the thread. TY_EINVAL (no client, namespace or dir), TY_ENOMEM, TY_EIO. */
ty_err kube_logs_new(const kube_logs_opts *o, kube_logs **out, char *err, size_t errlen);

/*
 * A pod of ours as it is now (deleted: its last state). A pod labelled with a job id, an
 * attempt and a completion index whose container has started gets a stream (resumed from
 * what its log kept); one that ended or was deleted is streamed to the body's end and not
 * opened again. Anything else is ignored.
 */
void kube_logs_pod(kube_logs *kl, const json_t *pod, int deleted);

/* The log file of one rank: 0 when it fits in len. */
int kube_logs_path(const kube_logs *kl, const char *job_id, int attempt, int rank, char *buf,
                   size_t len);

typedef enum kube_log_state {
    KUBE_LOG_IDLE = 0,            /* nothing streams into that log now */
    KUBE_LOG_LIVE,                /* its container runs: bytes may come */
    KUBE_LOG_DRAINING,            /* its container ended: the stream is taking the last bytes */
} kube_log_state;

/* What streams into one rank's log now. */
kube_log_state kube_logs_state(kube_logs *kl, const char *job_id, int attempt, int rank);

/* The directory of a job's attempt, for the pruned note: 0 when it fits. */
int kube_logs_attempt_dir(const kube_logs *kl, const char *job_id, int attempt, char *buf,
                          size_t len);

typedef struct kube_logs_stats {
    size_t streams;               /* logs followed (open or waiting to reopen) */
    size_t open;                  /* transfers open now */
    uint64_t opened;              /* transfers opened since start */
    uint64_t bytes;               /* bytes written to logs (timestamps cut) */
    uint64_t skipped_lines;       /* lines dropped on a resume: already kept */
    uint64_t completed;           /* logs complete (their container's end reached) */
} kube_logs_stats;

void kube_logs_stats_get(kube_logs *kl, kube_logs_stats *out);

/* Stops the thread and closes every stream (what was written stays). Accepts NULL. */
void kube_logs_free(kube_logs *kl);

#endif
