/*
 * local_int.h - what the local backend's files (local.c, sandbox.c) share: small
 * wrappers of system calls glibc 2.36 does not wrap, and the "why" formatter of
 * their error messages. Not a public header: nothing outside scheduler/local*.c and
 * scheduler/sandbox.c includes it.
 */
#ifndef TY_SCHEDULER_LOCAL_INT_H
#define TY_SCHEDULER_LOCAL_INT_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

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

#endif
