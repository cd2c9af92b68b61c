/*
 * comm_net.c - the helpers of comm_int.h: text, clock and blocking socket I/O
 * shared by the ring (comm.c) and the rendezvous (rendezvous.c).
 */
#define _GNU_SOURCE

#include "runtime/comm_int.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>

void cnet_fmt(char *dst, size_t len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(dst, len, f, ap);
    va_end(ap);
    if (n < 0 && len > 0)
        dst[0] = '\0';
    else if ((size_t)n >= len && len > 4)
        memcpy(dst + len - 4, "...", 4);
}

double cnet_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cnet_remaining_ms(double deadline)
{
    double ms = (deadline - cnet_now_s()) * 1000.0;
    if (ms <= 0)
        return 0;
    return ms >= INT_MAX ? INT_MAX : (int)ms + 1;
}

void cnet_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Thread-safe text for the errno values sockets produce. */
const char *cnet_errno_text(int e)
{
    switch (e) {
    case ECONNRESET: return "connection reset";
    case EPIPE: return "connection closed";
    case ECONNREFUSED: return "connection refused";
    case ETIMEDOUT: return "timed out";
    case EHOSTUNREACH: return "host unreachable";
    case ENETUNREACH: return "network unreachable";
    case EADDRINUSE: return "address in use";
    case EADDRNOTAVAIL: return "address not available";
    case ENOMEM: return "out of memory";
    case ENOBUFS: return "no buffer space";
    case EMFILE: return "too many open files";
    default: return "socket error";
    }
}

/* Bounds every later blocking send and recv on fd (ms >= 1). */
void cnet_set_io_timeout(int fd, int ms)
{
    if (ms < 1)
        ms = 1;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/*
 * Reads exactly n bytes from a blocking socket whose SO_RCVTIMEO is set.
 * IO_TIMEOUT means a whole timeout passed without a byte.
 */
enum io cnet_recv(int fd, void *p, size_t n, int *err)
{
    unsigned char *b = p;
    while (n > 0) {
        ssize_t k = recv(fd, b, n, MSG_WAITALL);
        if (k == 0)
            return IO_CLOSED;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            return errno == EAGAIN || errno == EWOULDBLOCK ? IO_TIMEOUT : IO_ERROR;
        }
        b += k;
        n -= (size_t)k;
    }
    return IO_OK;
}

enum io cnet_recv_by(int fd, void *p, size_t n, double deadline, int *err)
{
    unsigned char *b = p;
    while (n > 0) {
        int left = cnet_remaining_ms(deadline);
        if (left == 0) {
            *err = ETIMEDOUT;
            return IO_TIMEOUT;
        }
        cnet_set_io_timeout(fd, left);
        ssize_t k = recv(fd, b, n, 0);
        if (k == 0)
            return IO_CLOSED;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue; /* the deadline decides */
            *err = errno;
            return IO_ERROR;
        }
        b += k;
        n -= (size_t)k;
    }
    return IO_OK;
}

/* Sends header and payload with one syscall per kernel round; see cnet_recv. */
enum io cnet_send(int fd, const void *hdr, size_t hlen, const void *p, size_t n, int *err)
{
    struct iovec iov[2] = {{(void *)hdr, hlen}, {(void *)p, n}};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = n > 0 ? 2 : 1;
    while (mh.msg_iovlen > 0) {
        ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return IO_TIMEOUT;
            return errno == EPIPE ? IO_CLOSED : IO_ERROR;
        }
        size_t done = (size_t)k;
        while (mh.msg_iovlen > 0 && done >= mh.msg_iov[0].iov_len) {
            done -= mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov[0].iov_base = (unsigned char *)mh.msg_iov[0].iov_base + done;
            mh.msg_iov[0].iov_len -= done;
        }
    }
    return IO_OK;
}
