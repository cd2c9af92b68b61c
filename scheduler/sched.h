/*
 * sched.h - the reconcile loop: it drives every job from PENDING to a
 * terminal state through a backend (backend.h).
 *
 * One thread owns all scheduling state. It wakes when the store commits job
 * events (a submission, a cancel), when the backend has events (a rank runs,
 * ends, is disrupted; capacity grew), and at its own deadlines (the hard stop
 * after the grace period, restart backoff, timeouts), then runs one round:
 *
 *   1. observes: the change feed (store_changes) and the backend's events
 *   2. decides, per job, what its state must become and which backend calls
 *      it wants; deciding calls nothing but reserve() (see sched.c)
 *   3. admits PENDING jobs by priority, then age, while their queue is under
 *      its limit, a sweep's trial only while fewer than the sweep's
 *      parallelism of its trials are active (ADMITTED to CANCELLING), and
 *      the backend can reserve the whole gang; the first job
 *      that does not fit stops admission (no backfill, so a big gang is not
 *      starved by a stream of small ones) and says why (a Waiting event, when
 *      the reason changes); a job that can never fit fails.
 *      Admission runs only after something that may let a job in (a
 *      submission, a job that ended and freed its slots and its queue place,
 *      a round that hit its admission cap), and reads only the queues under
 *      their limit and the sweeps under their parallelism: jobs waiting in a
 *      queue at its limit, or trials of a sweep at its parallelism, cost
 *      nothing and block nobody, and a
 *      loop with nothing to do sleeps until the next event or deadline
 *   4. commits every decision of the round in one group commit
 *      (store_jobs_update), then acts, for the jobs whose changes committed:
 *      launches, stops, releases. A commit the store fails is tried again
 *      with its calls; a change the store refuses (the job moved) is dropped
 *      and the job read again
 *
 * A state is written before the action it announces (STARTING before the
 * ranks exist), so a crash leaves the store ahead of the world, never behind.
 * RUNNING is written when the backend reports every rank running. Every
 * attempt's ranks get a job token of their own in TRAINYARD_TOKEN (in the env
 * the backend gets for that attempt only); the store keeps its SHA-256,
 * written with the transition into STARTING, which revokes the previous
 * attempt's token, and revokes it when the job ends. At start
 * the loop recovers every job a previous process left STARTING, RUNNING,
 * RESTARTING or CANCELLING: the backend adopts the attempt that still runs
 * (it carries on), or stops what is left of it and the attempt restarts
 * without spending restart.max (reason ServerRestarted), or a cancel
 * completes.
 *
 * Gang semantics: a rank that exits non-zero or is killed (an application
 * failure) stops the whole gang (SIGTERM, then SIGKILL after stop_grace_ms);
 * while restart.max allows, attempt n+1 starts after restart.backoff_seconds
 * (RESTARTING), else the job FAILS. A rank the backend reports disrupted
 * (evicted, preempted, node lost, reclaimed) stops the gang too, and the next
 * attempt starts at once without spending restart.max (reason Disrupted). A
 * rank that ends after the server asked the gang to stop is stopped, whatever
 * its exit code (75 included). timeout_seconds counts from the start of the
 * first attempt (FAILED, reason Timeout).
 */
#ifndef TY_SCHEDULER_SCHED_H
#define TY_SCHEDULER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "scheduler/backend.h"
#include "scheduler/quarantine.h"
#include "store/store.h"

/* The exit code with which a rank says "stopped as asked, resumable". */
#define SCHED_EXIT_RESUMABLE 75

#define SCHED_UNLIMITED (-1)

/* Jobs of a queue active (ADMITTED..CANCELLING) at once: a count, 0 to pause
 * the queue (its jobs stay PENDING), or SCHED_UNLIMITED. */
typedef struct sched_queue_limit {
    const char *queue;
    int limit;
} sched_queue_limit;

typedef struct sched_options {
    store *store;                  /* borrowed, outlives the scheduler */
    backend *backend;              /* borrowed, outlives the scheduler */
    int queue_limit;               /* every queue's limit unless overridden (see above) */
    const sched_queue_limit *queue_limits; /* per-queue overrides (copied) */
    size_t nqueue_limits;
    int stop_grace_ms;             /* SIGTERM to SIGKILL; default (0) 10000 */
    const quarantine_policy *quarantine; /* when nodes are taken out of rotation (copied);
                                    NULL: quarantine_default() */
} sched_options;

typedef struct sched sched;

/* Starts the scheduler thread (which first recovers, see above). *out is new. */
ty_err sched_start(const sched_options *opt, sched **out, char *err, size_t errlen);

/*
 * Begins stopping, returns at once: log followers end, no job is admitted any
 * more and every running gang is asked to stop, unless the backend adopts what
 * runs (backend_ops.adopts: Kubernetes), whose gangs are left running. Call
 * before shutting the HTTP server down, then sched_stop(). Accepts NULL.
 */
void sched_shutdown(sched *s);

/*
 * Stops every running gang (SIGTERM, SIGKILL after the grace period), records
 * each as RESTARTING (reason ServerShutdown; the next start resumes it as a
 * new attempt), joins the thread and frees s. On a backend that adopts, it
 * stops none: it writes what the scheduler decided, and the next start adopts
 * every gang. Accepts NULL.
 */
void sched_stop(sched *s);

typedef struct sched_stats {
    int slots_total;               /* the backend's capacity, -1 when unknown */
    int slots_used;
    uint64_t active_jobs;          /* jobs the scheduler holds (ADMITTED..CANCELLING) */
    uint64_t running_ranks;
    uint64_t rounds_total;         /* reconcile rounds run */
    uint64_t launches_total;       /* attempts launched */
    uint64_t restarts_total;       /* attempts restarted (failures and disruptions) */
    uint64_t preemptions_reclaim;  /* attempts ended Preempted to reclaim a team's quota */
    uint64_t preemptions_priority; /* ... for a higher-priority job of the same team */
    uint64_t admissions_total;     /* jobs admitted (a preempted job again when it comes back) */
    double admission_wait_seconds; /* their waits summed: admission time minus submission */
    uint64_t nodes_quarantined;    /* nodes out of rotation now */
    uint64_t quarantines_total;    /* nodes this process took out of rotation */
    uint64_t node_failures_total;  /* attempts' ends this process charged to a node */
} sched_stats;

void sched_get_stats(sched *s, sched_stats *out);

/*
 * Nodes that keep failing jobs. Every application failure of an attempt (a rank that exited
 * non-zero or was killed, before any stop was asked) is charged to the node its rank ran on
 * (store_node_failure_add(): job, attempt, rank, time, exit code, signal and the backend's
 * words, such as OOMKilled). After each, the node's failures are judged by the policy
 * (quarantine.h); a node it condemns is quarantined in the store and the backend is told to
 * keep every new attempt off it (exclude_nodes); the failed job's event says so. A quarantine
 * ends at its release time or when an admin releases it (sched_node_release()); the
 * scheduler reads the store's quarantines at start, so they survive a restart.
 */

/* The policy the scheduler applies (what it was started with). */
quarantine_policy sched_quarantine_policy(const sched *s);
/* Releases node now, by `by` (a token's name). TY_ENOTFOUND when it is not quarantined; store
 * errors. The backend hears of it in the scheduler's next round. Any thread. */
ty_err sched_node_release(sched *s, const char *node, const char *by);
/* The cluster as the backend sees it (backend.h cluster()); *out zeroed and TY_OK when the
 * backend shows nothing. Any thread. */
ty_err sched_cluster(sched *s, backend_cluster *out);

/*
 * A rank's log. attempt >= 1 names the attempt. tail_lines < 0 reads it from
 * the beginning, tail_lines >= 0 from the start of its last tail_lines lines.
 * With follow, reads wait for more output while that rank runs and the log
 * ends when it has ended and everything was read; without follow the log ends
 * at its current end. TY_ENOTFOUND when that rank never started.
 */
typedef struct sched_log sched_log;

ty_err sched_log_open(sched *s, const char *job_id, int attempt, int rank, int follow,
                      long tail_lines, sched_log **out);
/* Bytes copied (> 0), 0 at the end of the log, -1 on an error. May block while following. */
long sched_log_read(sched_log *l, char *buf, size_t max);
void sched_log_close(sched_log *l);

#endif
