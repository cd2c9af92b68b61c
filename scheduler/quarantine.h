/*
 * quarantine.h - whether a node that keeps ending attempts is taken out of rotation, and when it
 * comes back. A pure function of the policy and of the node's ledger (store_node_failures());
 * it reads no store and writes nothing. The scheduler applies the verdicts (sched.c): it writes
 * the quarantine, tells the backend (exclude_nodes), releases on time.
 *
 * The rule. A node is quarantined when, counting only the failures charged to it (an attempt's
 * application failure on that node: its failed rank ran there) with a time in
 * (now - window_seconds, now] and after its last release:
 *
 *   - there are at least `failures` of them, and
 *   - they belong to at least `min_jobs` different jobs,
 *
 * so that one job's own bug, failing again and again, does not take a healthy node away, while
 * a node that fails whatever runs on it does go. A quarantined node is released on its own at
 * since + release_seconds (or earlier by an admin); failures before a release never count
 * again.
 *
 * Cost: O(n x min(n, min_jobs)) over the node's failures; no allocation.
 */
#ifndef TY_SCHEDULER_QUARANTINE_H
#define TY_SCHEDULER_QUARANTINE_H

#include <stddef.h>
#include <stdint.h>

/* The cluster profile's quarantine settings; the defaults below when a key is not given. */
typedef struct quarantine_policy {
    int failures;            /* failures in the window; >= 1 (3) */
    int min_jobs;            /* of at least this many different jobs; >= 1 (2) */
    int64_t window_seconds;  /* how far back failures count (3600) */
    int64_t release_seconds; /* how long a quarantine lasts unless an admin ends it (86400) */
} quarantine_policy;

#define QUARANTINE_FAILURES 3
#define QUARANTINE_MIN_JOBS 2
#define QUARANTINE_WINDOW_SECONDS 3600
#define QUARANTINE_RELEASE_SECONDS 86400

/* The defaults. */
quarantine_policy quarantine_default(void);

/* One failure charged to the node (borrowed). */
typedef struct quarantine_failure {
    const char *job_id;
    int64_t time_ms;
} quarantine_failure;

typedef struct quarantine_input {
    const quarantine_policy *policy;
    const quarantine_failure *f; /* the node's failures, any order */
    size_t n;
    int64_t now_ms;
    int64_t released_ms; /* the node's last release, 0 for none */
} quarantine_input;

typedef struct quarantine_verdict {
    int quarantine;           /* 1: take the node out of rotation now */
    int counted;              /* failures that counted */
    int jobs;                 /* different jobs among them */
    int64_t counted_after_ms; /* the failures counted are those after this and up to now:
                                 the window's start, or the node's last release if later */
    int64_t release_at_ms;    /* with quarantine: when it comes back on its own */
    char reason[256];         /* with quarantine: the sentence a person reads ("3 failures of 2
                                 jobs within 3600 s"); else why not */
} quarantine_verdict;

/* Judges the node. Never fails: a policy value below 1 counts as 1. */
void quarantine_judge(const quarantine_input *in, quarantine_verdict *out);

/*
 * What ends an attempt, and whether its node answers for it.
 *
 * A rank taken away - evicted, preempted, its node lost or reclaimed, stopped as asked - is not
 * an application failure: its node is not charged. Kubernetes says so in the pod's status:
 * quarantine_pod_cause() reads status.reason and the reason of a DisruptionTarget condition
 * whose status is True (v1.26 and later):
 *
 *   PreemptionByKubeScheduler (v1.26), PreemptionByScheduler (v1.27+),
 *   status.reason Preempting (the kubelet's, for a critical pod)       preempted
 *   DeletionByTaintManager (NoExecute taint: a node not ready or
 *   unreachable), DeletionByPodGC (a pod of a deleted node),
 *   status.reason NodeLost, Terminated or Shutdown (the node shut
 *   down: graceful node shutdown)                                    node lost
 *   EvictionByEvictionAPI, TerminationByKubelet (node pressure),
 *   status.reason Evicted, any other DisruptionTarget reason         evicted
 *
 * A rank that failed (a non-zero exit or a signal) is charged to its node, with the reason
 * quarantine_attribute() reads from its exit code, signal and the backend's words beyond the
 * status (the container's reason, such as OOMKilled; the pod's message when no container
 * ran; the last line of the worker's own error report):
 *
 *   "rank N (host:port) lost: ..." (the worker names a lost peer)      lost_peer, not charged:
 *                                    the peer's end is the cause, not this node
 *   OOMKilled, "out of memory"                                        oom_killed
 *   NCCL, CUDA, Xid                                                   gpu_error
 *   "the pod failed..." (no container status: the kubelet refused
 *   the pod, e.g. UnexpectedAdmissionError from a device plugin)     pod_failed
 *   a signal                                                          signal
 *   otherwise                                                         exit_code
 */
typedef enum quarantine_cause {
    QUARANTINE_CAUSE_NONE = 0, /* nothing in the pod's status says it was taken away */
    QUARANTINE_CAUSE_EVICTED,
    QUARANTINE_CAUSE_PREEMPTED,
    QUARANTINE_CAUSE_NODE_LOST,
} quarantine_cause;

/* status_reason, disruption_reason: NULL when absent. */
quarantine_cause quarantine_pod_cause(const char *status_reason, const char *disruption_reason);

typedef struct quarantine_charge {
    int charge;         /* 1: the rank's node answers for the end */
    const char *reason; /* "exit_code", "signal", "oom_killed", "gpu_error", "pod_failed",
                           "lost_peer" (static) */
} quarantine_charge;

/* A failed rank's end: exit_code (-1: none), signal (0: none), detail (NULL or ""). */
quarantine_charge quarantine_attribute(int exit_code, int signal, const char *detail);

#endif
