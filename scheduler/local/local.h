/*
 * local.h - the local backend: every rank of a job is a process on this
 * machine (the embedded default of `trainyard serve`).
 *
 * Capacity is counted in slots (one per rank) and GPUs; a gang is reserved
 * whole or not at all. A sandboxed rank is signalled through its sandbox's
 * PID 1, which forwards to the rank's group. Unsandboxed, each attempt runs in
 * its own process group (rank 0's pid), so one killpg() reaches every rank and
 * whatever the ranks started, and ranks are started with posix_spawn(): the
 * process is multithreaded, and posix_spawn() is the safe (and fast,
 * vfork-like) way to fork it.
 *
 * Each rank runs in its own sandbox (sandbox.h; unless local_options.sandbox is
 * 0) with cwd <data_dir>/jobs/<id>, signals reset to their defaults, stdout and
 * stderr into a pipe that the log pump (ranklog.h) writes, within log_limit, to
 * <data_dir>/logs/<id>/a<attempt>/rank-<r>.log, and this environment (the env
 * contract of docs/DESIGN.md):
 *
 *   PATH, HOME, USER, LOGNAME, LANG, LC_ALL, TZ, TMPDIR  from the server, when
 *       set (nothing else leaks: the server's own secrets stay out); PATH is
 *       prefixed with bin_dirs so that trainyard-worker is found; in a sandbox
 *       HOME is the job's directory, TMPDIR /tmp (the sandbox's own tmpfs) and
 *       USER, LOGNAME the rank user
 *   the job's env (over the above; a job's PATH replaces the server's, still
 *       after bin_dirs)
 *   RANK, LOCAL_RANK (= RANK), WORLD_SIZE, LOCAL_WORLD_SIZE,
 *   MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port chosen per attempt)
 *   TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT, TRAINYARD_SERVER (when server_url is set)
 *   TRAINYARD_DATA_DIR       data_dir/datasets    (shared by all jobs)
 *   TRAINYARD_OUTPUT_DIR     data_dir/jobs/<id>/output
 *   TRAINYARD_CHECKPOINT_DIR data_dir/jobs/<id>/checkpoints (kept across attempts)
 *   CUDA_VISIBLE_DEVICES     the rank's GPUs ("0,1"), "" for a rank without GPUs
 *
 * Events (backend.h): launch() spawns every rank before it returns and queues
 * one RUNNING event per rank (with its pid), or a LAUNCH_FAILED after killing
 * what had started; there is no PLACED or PENDING (a reserved gang starts at
 * once) and no CAPACITY (only release() frees capacity). A rank that ends
 * after stop() is DISRUPTED (stop requested), any other end EXITED. Rank exits
 * are observed through a pidfd per rank in one epoll set (event_fd; without
 * pidfd_open, before Linux 5.3, a timerfd that ticks every 20 ms while a rank
 * runs, and observe() polls waitid).
 *
 * Disk: a job's directory (<data_dir>/jobs/<id>: its working directory, output and
 * checkpoints) may use disk_limit bytes. The filesystems here have no project quotas
 * the server could set, so usage is measured: while a rank of the job runs, a thread of
 * the backend walks the directory every LOCAL_DISK_PERIOD_MS (at least 4 times as long as
 * the last pass took, for huge trees; allocated blocks, links not followed, at most
 * LOCAL_DISK_MAX_ENTRIES entries and LOCAL_DISK_MAX_DEPTH levels; a tree past either
 * bound counts as over the limit, so it cannot hide bytes behind them). An attempt found over it gets one OVER_LIMIT event (BACKEND_LIMIT_DISK, "job
 * directory uses 1.2 GiB, over its limit of 1 GiB"); the loop stops it. A job that
 * writes past its limit and ends between two walks is not caught: the next attempt is.
 *
 * Logs of a job across attempts: when attempt N starts, the previous attempts' logs
 * are pruned to job_log_limit, oldest first (ranklog_prune_job()); a rank log of a
 * pruned attempt reads as one line that says it was deleted and why.
 *
 * recover() never adopts: a rank's log pipe and its exit status belonged to
 * the previous server process. It stops what is left instead: in the job's
 * cgroups (sandboxed), or the processes with the job's TRAINYARD_JOB_ID in
 * their environment (/proc/<pid>/environ; unsandboxed), SIGTERM then SIGKILL.
 */
#ifndef TY_SCHEDULER_LOCAL_H
#define TY_SCHEDULER_LOCAL_H

#include <stddef.h>

#include "common/ty_error.h"
#include "scheduler/backend.h"

/* The one GPU type of the local backend, as free_resources() names it: a team's quota names
 * it "gpu/local", and a job asking GPUs of no type is charged to it. */
#define LOCAL_GPU_TYPE "local"

typedef struct local_options {
    const char *data_dir;          /* required; created when missing */
    int slots;                     /* ranks that may run at once; 0 = twice the online CPUs */
    int gpus;                      /* GPUs to hand out; -1 = count /dev/nvidia<N> */
    const char *server_url;        /* TRAINYARD_SERVER, or NULL */
    const char *const *bin_dirs;   /* prepended to PATH, NULL-terminated; may be NULL */
    int sandbox;                   /* 1: every rank in its own sandbox (sandbox.h); 0: plain
                                      processes of the server's user (--local-sandbox=off) */
    const char *user;              /* with sandbox, when root: ranks' user; NULL: "trainyard" */
    long long log_limit;           /* bytes kept of each rank's log (ranklog.h); 0: 256 MiB */
    long long job_log_limit;       /* bytes the previous attempts' logs of one job keep
                                      (ranklog.h); 0: RANKLOG_JOB_LIMIT_FACTOR x log_limit */
    long long disk_limit;          /* bytes a job's directory may use; 0: no limit */
} local_options;

/* *out is new (free with out->ops->free). err holds a reason on failure. */
ty_err local_backend_new(const local_options *opt, backend **out, char *err, size_t errlen);

/* The effective limits (after defaults and detection). */
int local_backend_slots(const backend *b);
int local_backend_gpus(const backend *b);
/* Slots in use now (reserved by gangs); for tests and metrics. */
int local_backend_slots_used(const backend *b);
/* The disk limit of a job's directory in bytes (0: none), and the job logs' total. */
long long local_backend_disk_limit(const backend *b);
long long local_backend_job_log_limit(const backend *b);

#endif
