/*
 * local_int.h - what the local backend's files (local.c, local_disk.c, sandbox.c)
 * share: small wrappers of system calls glibc 2.36 does not wrap, the "why" formatter
 * of their error messages, and the disk limit's walk and monitor (local_disk.c). Not
 * a public header: nothing outside scheduler/local*.c and scheduler/sandbox.c
 * includes it (but their unit tests).
 */
#ifndef TY_SCHEDULER_LOCAL_INT_H
#define TY_SCHEDULER_LOCAL_INT_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_error.h"

/* Formats an error message into why (which may be NULL). */
static inline void local_why(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void local_why(char *why, size_t len, const char *fmt, ...)
{
    if (!why || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* pidfd_open(2); -1 with errno ENOSYS where the kernel headers lack it. */
static inline int local_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* pidfd_send_signal(2), likewise. */
static inline int local_pidfd_send_signal(int pidfd, int sig)
{
#ifdef SYS_pidfd_send_signal
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
#else
    (void)pidfd;
    (void)sig;
    errno = ENOSYS;
    return -1;
#endif
}

/* Sleeps ms milliseconds, signals or not. */
static inline void local_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- the disk limit of a job's directory (local_disk.c) ------------------------ */

#define LOCAL_DISK_PERIOD_MS 2000      /* how often a running job's directory is walked */
#define LOCAL_DISK_MAX_ENTRIES 1000000 /* entries one walk of one job counts at most */
#define LOCAL_DISK_MAX_DEPTH 64        /* directory levels it follows (a descriptor each) */
#define LOCAL_DISK_DETAIL_MAX 256      /* = BACKEND_DETAIL_MAX */
#define LOCAL_JOB_ID_MAX 32

/* What a walk of a directory found. */
typedef struct local_usage {
    uint64_t bytes;                /* allocated: st_blocks * 512, the directory included */
    uint64_t entries;              /* files, directories, links... counted */
    int too_many;                  /* stopped at max_entries: bytes is a lower bound */
    int too_deep;                  /* a directory max_depth levels down was not entered */
    int unreadable;                /* directories that could not be opened, not counted */
} local_usage;

/*
 * Walks dir (not following links, not leaving the tree) and sums what it allocates.
 * max_depth <= LOCAL_DISK_MAX_DEPTH. TY_ENOTFOUND when dir does not exist, TY_EIO
 * when it cannot be opened, TY_EINVAL. *u is filled in any case.
 */
ty_err local_disk_usage(const char *dir, uint64_t max_entries, int max_depth, local_usage *u);

/*
 * 1 when u is over limit (0: no limit): its bytes above it, or a walk cut short by
 * its bounds. why (may be NULL) then says so for a person: "job directory uses 1.2
 * GiB, over its limit of 1 GiB (--local-disk-limit)".
 */
int local_disk_over(const local_usage *u, uint64_t limit, char *why, size_t len);

/* n as "512 bytes", "1 GiB", "1.2 GiB" (binary units, one decimal unless exact). */
void local_fmt_bytes(char *buf, size_t len, uint64_t n);

/* One line for the start-up log: whether the filesystem of dir has project quotas. */
void local_disk_quota_note(const char *dir, char *note, size_t len);

/*
 * The monitor: a thread that walks the directory of every watched job every period_ms
 * and remembers those over limit; its descriptor (an eventfd) polls readable when one
 * was found. With limit 0 nothing is started and nothing is ever found. Every function
 * but new and free may be called while the thread runs.
 */
typedef struct local_disk local_disk;

typedef struct local_disk_finding {
    const void *key;               /* as given to local_disk_watch() */
    char detail[LOCAL_DISK_DETAIL_MAX];
} local_disk_finding;

/* *out is new (local_disk_free). TY_ENOMEM, TY_EIO (no eventfd or thread). */
ty_err local_disk_new(const char *data_dir, uint64_t limit, int period_ms, local_disk **out);
int local_disk_fd(const local_disk *m);
/* Watches <data_dir>/jobs/<job_id> for key (an attempt) until unwatched. job_id copied. */
ty_err local_disk_watch(local_disk *m, const char *job_id, const void *key);
void local_disk_unwatch(local_disk *m, const void *key);
/* Up to max findings not handed out before, each once; resets the descriptor. */
size_t local_disk_take(local_disk *m, local_disk_finding *out, size_t max);
/* Stops the thread (waiting for a walk in progress) and frees m. Accepts NULL. */
void local_disk_free(local_disk *m);

#endif
