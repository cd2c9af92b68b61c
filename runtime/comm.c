/*
 * comm.c - rendezvous and the TCP ring behind comm.h.
 *
 * Threads. A comm of world > 1 runs two threads. The worker executes the
 * queued operations in issue order and is the only reader of the socket from
 * the ring predecessor: it receives each frame, adds it into the buffer
 * (reduce) or stores it (gather), and publishes how many frames are done. The
 * sender is the only writer of the socket to the ring successor: it sends a
 * frame as soon as the data it carries is final. Receiving, reducing and
 * sending of different chunks therefore overlap, and every rank's inbound and
 * outbound links carry data at the same time.
 *
 * Streams. At each rank an operation is a send stream and a receive stream of
 * segments (one shard per ring step) cut into frames (see chunk_for()).
 * Send segment s+1 is receive segment s once reduced or stored (all-reduce is
 * reduce-scatter followed by all-gather without a break in the pipeline), so
 * send frame f may leave once receive frame f - F0 is done, where F0 is the
 * number of frames of send segment 0 (this rank's own data). Empty shards
 * (n < world) have no frames.
 *
 * Summation order. Shard k is summed along the ring starting at rank k+1:
 * ((x[k+1] + x[k+2]) + ...) + x[k], ranks modulo world. It is the same on
 * every run for a given world size, and the all-gather copies the result, so
 * every rank holds the same bits.
 *
 * Failure. A frame is DATA, BEAT or ABORT. While its rank is inside a
 * collective, a sender with nothing to send sends a BEAT every timeout/4, so a
 * rank that waits on a predecessor that is itself waiting does not blame it.
 * The worker declares its predecessor lost on end of stream, reset, or
 * timeout_ms without a byte, and sends an ABORT naming it down the ring; each
 * rank that receives an ABORT fails the same way and forwards it once, so
 * every survivor names the rank that was lost rather than a neighbour that
 * merely gave up. A failed send (the successor is gone) is weaker evidence: it
 * stops the sender, but the operation ends on the receive side, where the
 * ABORT from the lost rank's successor arrives; only when nothing else is
 * learned does the operation fail naming the successor. Ranks keep their
 * sockets open after a failure (closing them would make neighbours blame
 * this rank); the sockets close in comm_destroy().
 */
#define _GNU_SOURCE /* POLLRDHUP, accept4, SOCK_CLOEXEC */

#include "runtime/comm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define WIRE_MAGIC 0x54594352u /* "TYCR" */
#define WIRE_VERSION 1u
#define DEFAULT_TIMEOUT_MS 30000
#define HOST_MAX 64
#define ERR_MAX 256
#define REJECT_TEXT_MAX 192

/*
 * Frame payload size: a quarter of a shard, so that receiving, reducing and
 * sending overlap within each ring step. The floor keeps syscalls and
 * wake-ups from dominating; the ceiling keeps a frame within L2 for the
 * reduce and the pipeline quick to fill (each hop delays it by one frame).
 * Measured on loopback, 1 MiB frames cost about 15% less CPU per byte than
 * 256 KiB ones and 64 KiB ones about 15% more.
 */
#define CHUNK_MIN ((size_t)64 * 1024)
#define CHUNK_MAX ((size_t)1024 * 1024)

/*
 * Socket buffers, requested before connect/listen so the window scale covers
 * them (Linux doubles the request, capped by net.core.{w,r}mem_max). Fixed
 * rather than autotuned, and sized for the bandwidth-delay product of a data
 * centre link (512 KiB of window keeps 40 Gb/s busy at 100 us RTT), not
 * larger: a sender far ahead of its receiver makes the receiver copy data
 * that has left the cache. On loopback, 4 MiB (or autotuning, which grows
 * that far) measured 2-3x slower than this in bench_collectives.
 */
#define SOCK_BUF_BYTES (256 * 1024)

/* Control messages (rendezvous and ring hello): six big-endian u32. */
enum msg_kind { MSG_REGISTER = 1, MSG_TABLE = 2, MSG_REJECT = 3, MSG_RING = 4 };
#define MSG_BYTES 24
#define ENTRY_BYTES (HOST_MAX + 4)

struct msg {
    uint32_t magic, version, kind, world, rank, port;
};

/* Ring frames, in native byte order like the floats they carry. */
enum frame_type {
    FRAME_DATA = 0x44415441u,
    FRAME_BEAT = 0x42454154u,
    FRAME_ABORT = 0x41424f52u,
};

struct frame_hdr {
    uint32_t type;
    uint32_t len; /* payload bytes */
    uint64_t tag; /* DATA: op sequence number and kind, see op_tag() */
};

struct abort_msg {
    int32_t lost;     /* the rank that was lost */
    int32_t reporter; /* the rank that noticed */
    char text[200];   /* "rank 3 (host:port) lost: reason", NUL-terminated */
};

enum op_kind { OP_RS = 1, OP_AG, OP_AR, OP_BCAST };
enum side { SEND, RECV };
enum io { IO_OK, IO_CLOSED, IO_TIMEOUT, IO_ERROR };

struct comm_work {
    comm_work *qnext; /* queue of operations not yet started */
    comm_work *lnext; /* every operation not yet waited for */
    int kind;
    size_t elem; /* bytes per element */
    void *buf;
    size_t n; /* elements */
    int root;
    size_t chunk; /* frame payload bytes, the same at every rank */
    bool done;
    comm_status status;
};

struct peer {
    char host[HOST_MAX]; /* numeric address as rank 0 saw it */
    int port;            /* where the rank accepts its ring predecessor */
};

/* A position in one side's sequence of segments. */
struct cursor {
    int seg;
    size_t pos; /* bytes of the segment already covered */
};

struct comm {
    int rank, world, timeout_ms;
    double beat_s;
    struct peer *peers;
    int send_fd, recv_fd;   /* to the ring successor, from the predecessor */
    int wake_rd, wake_wr;   /* self-pipe waking the idle worker */
    unsigned char *stage;   /* one received chunk before it is reduced */
    pthread_t worker, sender;
    bool worker_started, sender_started, sync_ready;
    pthread_mutex_t mu;
    pthread_cond_t cv_done; /* an operation completed */
    pthread_cond_t cv_send; /* something for the sender to do */
    pthread_cond_t cv_sent; /* the sender made progress */

    /* Under mu. */
    comm_work *head, *tail; /* not yet started, in issue order */
    comm_work *works;       /* not yet waited for */
    bool stop, worker_idle;
    bool op_active;         /* the worker is executing cur */
    comm_work *cur;
    uint64_t seq;           /* operations started so far */
    size_t send_total, send_f0, send_next, recv_done; /* frames of cur */
    bool sender_busy;       /* the sender is reading cur's buffer */
    bool sender_waiting;
    bool sender_exited;
    bool send_dead;         /* a send failed: nothing more goes out */
    char send_err[ERR_MAX];
    bool failed;            /* sticky: every later operation fails */
    char err[ERR_MAX];
    bool abort_pending;     /* abort_out still to be sent to the successor */
    struct abort_msg abort_out;
    double busy_s;

    /* Worker only: a DATA header read while idle, for the next operation. */
    struct frame_hdr pending;
    bool have_pending;
};

/* ---------------------------------------------------------------- helpers */

static void fmt_text(char *dst, size_t len, const char *f, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats into dst; a message cut short stays a message, marked by "...". */
static void fmt_text(char *dst, size_t len, const char *f, ...)
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int remaining_ms(double deadline)
{
    double ms = (deadline - now_s()) * 1000.0;
    if (ms <= 0)
        return 0;
    return ms >= INT_MAX ? INT_MAX : (int)ms + 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void abstime(struct timespec *ts, double when_s)
{
    double whole = (double)(long long)when_s;
    ts->tv_sec = (time_t)whole;
    ts->tv_nsec = (long)((when_s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int mod(int a, int m)
{
    int r = a % m;
    return r < 0 ? r + m : r;
}

/* Thread-safe text for the errno values sockets produce. */
static const char *errno_text(int e)
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

static void io_reason(enum io io, int e, int timeout_ms, bool sending, char *why, size_t len)
{
    switch (io) {
    case IO_CLOSED: fmt_text(why, len, "connection closed"); break;
    case IO_TIMEOUT:
        fmt_text(why, len, sending ? "not reading for %d ms" : "no data for %d ms", timeout_ms);
        break;
    default: fmt_text(why, len, "%s (errno %d)", errno_text(e), e); break;
    }
}

/* ------------------------------------------------------------- socket I/O */

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void msg_encode(unsigned char *out, const struct msg *m)
{
    put_u32(out, m->magic);
    put_u32(out + 4, m->version);
    put_u32(out + 8, m->kind);
    put_u32(out + 12, m->world);
    put_u32(out + 16, m->rank);
    put_u32(out + 20, m->port);
}

static void msg_decode(struct msg *m, const unsigned char *in)
{
    m->magic = get_u32(in);
    m->version = get_u32(in + 4);
    m->kind = get_u32(in + 8);
    m->world = get_u32(in + 12);
    m->rank = get_u32(in + 16);
    m->port = get_u32(in + 20);
}

/* Bounds every later blocking send and recv on fd (ms >= 1). */
static void set_io_timeout(int fd, int ms)
{
    if (ms < 1)
        ms = 1;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* Latency and throughput options; best effort, a refusal only costs speed. */
static void tune_socket(int fd)
{
    int one = 1, bytes = SOCK_BUF_BYTES;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

/*
 * Reads exactly n bytes from a blocking socket whose SO_RCVTIMEO is set.
 * IO_TIMEOUT means a whole timeout passed without a byte.
 */
static enum io io_recv(int fd, void *p, size_t n, int *err)
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

/* Sends header and payload with one syscall per kernel round; see io_recv. */
static enum io io_send(int fd, const void *hdr, size_t hlen, const void *p, size_t n, int *err)
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

static int numeric_host(const struct sockaddr *sa, socklen_t len, char *host, size_t hostlen)
{
    return getnameinfo(sa, len, host, (socklen_t)hostlen, NULL, 0, NI_NUMERICHOST) == 0 ? 0 : -1;
}

/* Connects one candidate address before the deadline; -1 with why. */
static int connect_one(const struct addrinfo *ai, double deadline, char *why, size_t whylen)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        fmt_text(why, whylen, "socket: %s", errno_text(errno));
        return -1;
    }
    tune_socket(fd);
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        goto fail;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS)
            goto fail;
        struct pollfd p = {fd, POLLOUT, 0};
        int k;
        do
            k = poll(&p, 1, remaining_ms(deadline));
        while (k < 0 && errno == EINTR);
        if (k == 0)
            errno = ETIMEDOUT;
        if (k <= 0)
            goto fail;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            goto fail;
        if (soerr != 0) {
            errno = soerr;
            goto fail;
        }
    }
    if (fcntl(fd, F_SETFL, flags) < 0)
        goto fail;
    return fd;
fail:
    fmt_text(why, whylen, "%s", errno_text(errno));
    close(fd);
    return -1;
}

/*
 * Connects to host:port. With retry, keeps trying (the listener may not exist
 * yet, or its name may not resolve yet) until the deadline. Returns the
 * blocking socket, or -1 with err.
 */
static int dial(const char *host, int port, double deadline, bool retry, char *err, size_t errlen)
{
    char service[16], why[128] = "no address";
    fmt_text(service, sizeof service, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    for (;;) {
        struct addrinfo *res = NULL;
        int g = getaddrinfo(host, service, &hints, &res);
        if (g != 0) {
            fmt_text(why, sizeof why, "cannot resolve: %s", gai_strerror(g));
        } else {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                int fd = connect_one(ai, deadline, why, sizeof why);
                if (fd >= 0) {
                    freeaddrinfo(res);
                    return fd;
                }
            }
            freeaddrinfo(res);
        }
        int left = remaining_ms(deadline);
        if (!retry || left == 0)
            break;
        sleep_ms(left < 50 ? left : 50);
    }
    fmt_text(err, errlen, "cannot connect to %s:%d: %s", host, port, why);
    return -1;
}

/* Listens on the wildcard address of family; *bound gets the port. */
static int listen_any(int family, int port, bool reuse, int *bound, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        a->sin6_port = htons((uint16_t)port);
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        a->sin_port = htons((uint16_t)port);
        sl = sizeof *a;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    int one = 1;
    if (reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        goto fail;
    tune_socket(fd); /* accepted sockets inherit the buffer sizes */
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0)
        goto fail;
    sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        goto fail;
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
fail:;
    int e = errno;
    fmt_text(err, errlen, "cannot listen on port %d: %s", port, errno_text(e));
    if (fd >= 0)
        close(fd);
    errno = e;
    return -1;
}

/* Accepts one connection before the deadline; -1 on timeout or error. */
static int accept_by(int lfd, double deadline, struct sockaddr_storage *sa, socklen_t *salen)
{
    for (;;) {
        struct pollfd p = {lfd, POLLIN, 0};
        int k = poll(&p, 1, remaining_ms(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        *salen = sizeof *sa;
        int fd = accept4(lfd, (struct sockaddr *)sa, salen, SOCK_CLOEXEC);
        if (fd >= 0) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
            return -1;
    }
}

static int send_msg(int fd, uint32_t kind, int world, int rank, int port)
{
    struct msg m = {WIRE_MAGIC, WIRE_VERSION, kind, (uint32_t)world, (uint32_t)rank, (uint32_t)port};
    unsigned char b[MSG_BYTES];
    int e = 0;
    msg_encode(b, &m);
    return io_send(fd, b, sizeof b, NULL, 0, &e) == IO_OK ? 0 : -1;
}

/* Best effort: tells a registered rank why the rendezvous failed. */
static void send_reject(int fd, int world, const char *why)
{
    unsigned char b[MSG_BYTES + REJECT_TEXT_MAX];
    struct msg m = {WIRE_MAGIC, WIRE_VERSION, MSG_REJECT, (uint32_t)world, 0, 0};
    int e = 0;
    memset(b, 0, sizeof b);
    msg_encode(b, &m);
    fmt_text((char *)b + MSG_BYTES, REJECT_TEXT_MAX, "%s", why);
    set_io_timeout(fd, 1000);
    (void)io_send(fd, b, sizeof b, NULL, 0, &e);
}

/* ------------------------------------------------------------- rendezvous */

/* The address family rank 0 listens on: that of master_addr, IPv4 if unknown. */
static int master_family(const char *addr)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int family = AF_INET;
    if (getaddrinfo(addr, NULL, &hints, &res) == 0 && res != NULL)
        family = res->ai_family == AF_INET6 ? AF_INET6 : AF_INET;
    if (res != NULL)
        freeaddrinfo(res);
    return family;
}

/*
 * Rank 0: accepts one registration per other rank on MASTER_PORT, then sends
 * everyone the table of ring addresses. Connections that do not speak the
 * protocol are dropped; ranks of another job (version, world size, rank out
 * of range or twice) fail the rendezvous on both sides with the reason.
 */
static comm_status rendezvous_root(comm *c, const comm_config *cfg, double deadline, int *ring_lfd,
                                   char *err, size_t errlen)
{
    comm_status st = COMM_ESETUP;
    int W = c->world, lfd = -1, joined = 1;
    int family = master_family(cfg->master_addr);
    unsigned char *table = NULL;
    int *conns = malloc((size_t)W * sizeof *conns);
    if (conns == NULL) {
        fmt_text(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }
    for (int k = 0; k < W; k++)
        conns[k] = -1;

    /* A previous attempt may still hold the port for a moment. */
    for (;;) {
        int unused;
        lfd = listen_any(family, cfg->master_port, true, &unused, err, errlen);
        if (lfd >= 0)
            break;
        if (errno != EADDRINUSE || remaining_ms(deadline) == 0)
            goto out;
        sleep_ms(50);
    }
    *ring_lfd = listen_any(family, 0, false, &c->peers[0].port, err, errlen);
    if (*ring_lfd < 0)
        goto out;

    while (joined < W) {
        struct sockaddr_storage sa;
        socklen_t salen;
        int fd = accept_by(lfd, deadline, &sa, &salen);
        if (fd < 0) {
            fmt_text(err, errlen, "rendezvous: only %d of %d ranks joined within %d ms", joined, W,
                     c->timeout_ms);
            goto out;
        }
        /* A rank sends its registration right after connecting. */
        int left = remaining_ms(deadline);
        set_io_timeout(fd, left < 2000 ? left : 2000);
        unsigned char b[MSG_BYTES];
        struct msg m;
        int e = 0;
        if (io_recv(fd, b, sizeof b, &e) != IO_OK) {
            close(fd);
            continue;
        }
        msg_decode(&m, b);
        if (m.magic != WIRE_MAGIC || m.kind != MSG_REGISTER) {
            close(fd);
            continue;
        }
        char why[160] = "";
        if (m.version != WIRE_VERSION)
            fmt_text(why, sizeof why, "a rank speaks protocol version %u, expected %u", m.version,
                     WIRE_VERSION);
        else if (m.world != (uint32_t)W)
            fmt_text(why, sizeof why, "rank %u says world size %u, expected %d", m.rank, m.world, W);
        else if (m.rank == 0 || m.rank >= (uint32_t)W)
            fmt_text(why, sizeof why, "rank %u is out of range for world size %d", m.rank, W);
        else if (conns[m.rank] >= 0)
            fmt_text(why, sizeof why, "rank %u registered twice", m.rank);
        else if (m.port == 0 || m.port > 65535)
            fmt_text(why, sizeof why, "rank %u sent port %u", m.rank, m.port);
        if (why[0] != '\0') {
            send_reject(fd, W, why);
            close(fd);
            fmt_text(err, errlen, "rendezvous: %s", why);
            goto out;
        }
        struct peer *p = &c->peers[m.rank];
        if (numeric_host((struct sockaddr *)&sa, salen, p->host, sizeof p->host) != 0) {
            close(fd);
            fmt_text(err, errlen, "rendezvous: cannot name the address of rank %u", m.rank);
            goto out;
        }
        p->port = (int)m.port;
        conns[m.rank] = fd;
        joined++;
        if (c->peers[0].host[0] == '\0') {
            /* Our own address as the others reach it. */
            struct sockaddr_storage me;
            socklen_t mel = sizeof me;
            if (getsockname(fd, (struct sockaddr *)&me, &mel) != 0 ||
                numeric_host((struct sockaddr *)&me, mel, c->peers[0].host, HOST_MAX) != 0) {
                fmt_text(err, errlen, "rendezvous: cannot name our own address");
                goto out;
            }
        }
    }

    size_t tlen = MSG_BYTES + (size_t)W * ENTRY_BYTES;
    table = calloc(1, tlen);
    if (table == NULL) {
        fmt_text(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }
    struct msg head = {WIRE_MAGIC, WIRE_VERSION, MSG_TABLE, (uint32_t)W, 0, 0};
    msg_encode(table, &head);
    for (int k = 0; k < W; k++) {
        unsigned char *e = table + MSG_BYTES + (size_t)k * ENTRY_BYTES;
        memcpy(e, c->peers[k].host, HOST_MAX);
        put_u32(e + HOST_MAX, (uint32_t)c->peers[k].port);
    }
    for (int k = 1; k < W; k++) {
        int e = 0;
        set_io_timeout(conns[k], remaining_ms(deadline));
        if (io_send(conns[k], table, tlen, NULL, 0, &e) != IO_OK) {
            fmt_text(err, errlen, "rendezvous: cannot send the table to rank %d", k);
            goto out;
        }
    }
    st = COMM_OK;
out:
    if (conns != NULL) {
        for (int k = 0; k < W; k++) {
            if (conns[k] < 0)
                continue;
            if (st != COMM_OK)
                send_reject(conns[k], W, err);
            close(conns[k]);
        }
    }
    if (lfd >= 0)
        close(lfd);
    free(conns);
    free(table);
    return st;
}

/* Other ranks: register with rank 0 and receive the table. */
static comm_status rendezvous_join(comm *c, const comm_config *cfg, double deadline, int *ring_lfd,
                                   char *err, size_t errlen)
{
    comm_status st = COMM_ESETUP;
    int W = c->world, e = 0;
    char why[160];
    unsigned char *table = NULL;
    int fd = dial(cfg->master_addr, cfg->master_port, deadline, true, why, sizeof why);
    if (fd < 0) {
        fmt_text(err, errlen, "rendezvous: %s", why);
        goto out;
    }
    struct sockaddr_storage me;
    socklen_t mel = sizeof me;
    if (getsockname(fd, (struct sockaddr *)&me, &mel) != 0) {
        fmt_text(err, errlen, "rendezvous: getsockname: %s", errno_text(errno));
        goto out;
    }
    *ring_lfd = listen_any(me.ss_family, 0, false, &c->peers[c->rank].port, err, errlen);
    if (*ring_lfd < 0)
        goto out;
    set_io_timeout(fd, remaining_ms(deadline));
    if (send_msg(fd, MSG_REGISTER, W, c->rank, c->peers[c->rank].port) != 0) {
        fmt_text(err, errlen, "rendezvous: cannot register with %s:%d", cfg->master_addr,
                 cfg->master_port);
        goto out;
    }
    /* Rank 0 answers once every rank has joined. */
    set_io_timeout(fd, remaining_ms(deadline));
    unsigned char b[MSG_BYTES];
    struct msg m;
    enum io io = io_recv(fd, b, sizeof b, &e);
    if (io != IO_OK) {
        fmt_text(err, errlen, "rendezvous: no table from rank 0 at %s:%d within %d ms (%s)",
                 cfg->master_addr, cfg->master_port, c->timeout_ms,
                 io == IO_TIMEOUT ? "timed out" : io == IO_CLOSED ? "connection closed" : errno_text(e));
        goto out;
    }
    msg_decode(&m, b);
    if (m.magic != WIRE_MAGIC || m.version != WIRE_VERSION) {
        fmt_text(err, errlen, "rendezvous: %s:%d does not speak this protocol (version %u)",
                 cfg->master_addr, cfg->master_port, m.version);
        goto out;
    }
    if (m.kind == MSG_REJECT) {
        char text[REJECT_TEXT_MAX];
        if (io_recv(fd, text, sizeof text, &e) != IO_OK)
            fmt_text(text, sizeof text, "no reason given");
        text[sizeof text - 1] = '\0';
        fmt_text(err, errlen, "rendezvous: rank 0 refused: %s", text);
        goto out;
    }
    if (m.kind != MSG_TABLE || m.world != (uint32_t)W) {
        fmt_text(err, errlen, "rendezvous: unexpected answer from rank 0 (kind %u, world %u)", m.kind,
                 m.world);
        goto out;
    }
    size_t tlen = (size_t)W * ENTRY_BYTES;
    table = malloc(tlen);
    if (table == NULL) {
        fmt_text(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }
    if (io_recv(fd, table, tlen, &e) != IO_OK) {
        fmt_text(err, errlen, "rendezvous: truncated table from rank 0");
        goto out;
    }
    for (int k = 0; k < W; k++) {
        const unsigned char *ent = table + (size_t)k * ENTRY_BYTES;
        memcpy(c->peers[k].host, ent, HOST_MAX);
        c->peers[k].host[HOST_MAX - 1] = '\0';
        uint32_t port = get_u32(ent + HOST_MAX);
        if (port == 0 || port > 65535) {
            fmt_text(err, errlen, "rendezvous: bad port %u for rank %d in the table", port, k);
            goto out;
        }
        c->peers[k].port = (int)port;
    }
    st = COMM_OK;
out:
    if (fd >= 0)
        close(fd);
    free(table);
    return st;
}

/* Connects to the successor and accepts the predecessor. */
static comm_status ring_connect(comm *c, int lfd, double deadline, char *err, size_t errlen)
{
    int W = c->world, next = (c->rank + 1) % W, prev = mod(c->rank - 1, W);
    char why[160];
    const struct peer *pn = &c->peers[next], *pp = &c->peers[prev];

    c->send_fd = dial(pn->host, pn->port, deadline, true, why, sizeof why);
    if (c->send_fd < 0) {
        fmt_text(err, errlen, "ring: cannot reach rank %d: %s", next, why);
        return COMM_ESETUP;
    }
    set_io_timeout(c->send_fd, remaining_ms(deadline));
    if (send_msg(c->send_fd, MSG_RING, W, c->rank, 0) != 0) {
        fmt_text(err, errlen, "ring: cannot greet rank %d (%s:%d)", next, pn->host, pn->port);
        return COMM_ESETUP;
    }
    while (c->recv_fd < 0) {
        struct sockaddr_storage sa;
        socklen_t salen;
        int fd = accept_by(lfd, deadline, &sa, &salen);
        if (fd < 0) {
            fmt_text(err, errlen, "ring: rank %d (%s) did not connect within %d ms", prev, pp->host,
                     c->timeout_ms);
            return COMM_ESETUP;
        }
        set_io_timeout(fd, remaining_ms(deadline));
        unsigned char b[MSG_BYTES];
        struct msg m;
        int e = 0;
        if (io_recv(fd, b, sizeof b, &e) != IO_OK) {
            close(fd);
            continue;
        }
        msg_decode(&m, b);
        if (m.magic != WIRE_MAGIC || m.kind != MSG_RING) {
            close(fd);
            continue;
        }
        if (m.version != WIRE_VERSION || m.world != (uint32_t)W || m.rank != (uint32_t)prev) {
            close(fd);
            fmt_text(err, errlen, "ring: expected rank %d of %d, got rank %u of %u (version %u)", prev,
                     W, m.rank, m.world, m.version);
            return COMM_ESETUP;
        }
        c->recv_fd = fd;
    }
    return COMM_OK;
}

/* ---------------------------------------------------------- op schedule */

static int seg_count(const comm *c, const comm_work *w, enum side side)
{
    int W = c->world;
    switch (w->kind) {
    case OP_RS:
    case OP_AG: return W - 1;
    case OP_AR: return 2 * (W - 1);
    default: /* broadcast: a chain from the root to the rank before it */
        if (side == SEND)
            return c->rank == mod(w->root - 1, W) ? 0 : 1;
        return c->rank == w->root ? 0 : 1;
    }
}

/* Byte range of segment s of one side, and whether receiving it reduces. */
static void segment(const comm *c, const comm_work *w, enum side side, int s, size_t *off, size_t *len,
                    bool *reduce)
{
    int W = c->world, r = c->rank, shard;
    int kind = w->kind;
    *reduce = false;
    if (kind == OP_BCAST) {
        *off = 0;
        *len = w->n * w->elem;
        return;
    }
    if (kind == OP_AR) {
        if (s < W - 1) {
            kind = OP_RS;
        } else {
            kind = OP_AG;
            s -= W - 1;
        }
    }
    if (kind == OP_RS) {
        shard = side == SEND ? r - s - 1 : r - s - 2;
        *reduce = side == RECV;
    } else {
        shard = side == SEND ? r - s : r - s - 1;
    }
    shard = mod(shard, W);
    *off = comm_shard_offset(w->n, W, shard) * w->elem;
    *len = comm_shard_count(w->n, W, shard) * w->elem;
}

/* The next frame of one side; false when the side is exhausted. */
static bool next_frame(const comm *c, const comm_work *w, enum side side, struct cursor *cur,
                       size_t *off, size_t *len, bool *reduce)
{
    int nseg = seg_count(c, w, side);
    while (cur->seg < nseg) {
        size_t so, sl;
        segment(c, w, side, cur->seg, &so, &sl, reduce);
        if (cur->pos < sl) {
            *off = so + cur->pos;
            *len = sl - cur->pos < w->chunk ? sl - cur->pos : w->chunk;
            cur->pos += *len;
            return true;
        }
        cur->seg++;
        cur->pos = 0;
    }
    return false;
}

static size_t frames_of(size_t bytes, size_t chunk)
{
    return (bytes + chunk - 1) / chunk;
}

/* Depends only on what every rank issues identically. */
static size_t chunk_for(size_t n, size_t elem, int world, int kind)
{
    size_t shard = kind == OP_BCAST ? n : n / (size_t)world + 1;
    size_t c = (shard * elem / 4 + 4095) / 4096 * 4096;
    return c < CHUNK_MIN ? CHUNK_MIN : c > CHUNK_MAX ? CHUNK_MAX : c;
}

/* Frames of one side; *first gets the frames of its segment 0. */
static size_t side_frames(const comm *c, const comm_work *w, enum side side, size_t *first)
{
    size_t total = 0;
    int nseg = seg_count(c, w, side);
    *first = 0;
    for (int s = 0; s < nseg; s++) {
        size_t off, len;
        bool reduce;
        segment(c, w, side, s, &off, &len, &reduce);
        if (s == 0)
            *first = frames_of(len, w->chunk);
        total += frames_of(len, w->chunk);
    }
    return total;
}

static uint64_t op_tag(uint64_t seq, int kind)
{
    return seq << 4 | (uint64_t)kind;
}

static void add_f32(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    /* Fixed-width blocks so the compiler vectorizes at -O2. */
    for (; i + 16 <= n; i += 16)
        for (size_t j = 0; j < 16; j++)
            dst[i + j] += src[i + j];
    for (; i < n; i++)
        dst[i] += src[i];
}

/* ---------------------------------------------------------------- failure */

static void describe_peer(const comm *c, int rank, const char *reason, char *out, size_t len)
{
    fmt_text(out, len, "rank %d (%s:%d) lost: %s", rank, c->peers[rank].host, c->peers[rank].port,
             reason);
}

/* The predecessor is lost: fail, and tell the successor. */
static void fail_lost(comm *c, const char *reason)
{
    struct abort_msg m;
    memset(&m, 0, sizeof m);
    m.lost = mod(c->rank - 1, c->world);
    m.reporter = c->rank;
    describe_peer(c, m.lost, reason, m.text, sizeof m.text);
    pthread_mutex_lock(&c->mu);
    if (!c->failed && !c->stop) {
        c->failed = true;
        fmt_text(c->err, sizeof c->err, "%s", m.text);
        c->abort_out = m;
        c->abort_pending = true;
        pthread_cond_signal(&c->cv_send);
    }
    pthread_mutex_unlock(&c->mu);
}

static void fail_io(comm *c, enum io io, int e)
{
    char why[96];
    io_reason(io, e, c->timeout_ms, false, why, sizeof why);
    fail_lost(c, why);
}

/* An ABORT arrived: fail with its story and pass it on. */
static void fail_from_abort(comm *c, const struct abort_msg *m)
{
    pthread_mutex_lock(&c->mu);
    if (!c->failed && !c->stop) {
        c->failed = true;
        if (m->lost == c->rank && c->send_dead) {
            /* Someone timed out on us because our successor stopped reading. */
            fmt_text(c->err, sizeof c->err, "%s", c->send_err);
            memset(&c->abort_out, 0, sizeof c->abort_out);
            c->abort_out.lost = (c->rank + 1) % c->world;
            c->abort_out.reporter = c->rank;
            fmt_text(c->abort_out.text, sizeof c->abort_out.text, "%s", c->send_err);
        } else {
            fmt_text(c->err, sizeof c->err, "%s (seen by rank %d)", m->text, m->reporter);
            c->abort_out = *m;
        }
        c->abort_pending = true;
        pthread_cond_signal(&c->cv_send);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Called with mu held. */
static void sender_failed(comm *c, enum io io, int e)
{
    char why[96];
    if (c->send_dead)
        return;
    c->send_dead = true;
    io_reason(io, e, c->timeout_ms, true, why, sizeof why);
    describe_peer(c, (c->rank + 1) % c->world, why, c->send_err, sizeof c->send_err);
    pthread_cond_broadcast(&c->cv_sent);
}

static void read_abort(comm *c, const struct frame_hdr *h)
{
    struct abort_msg m;
    int e = 0;
    if (h->len != sizeof m) {
        fail_lost(c, "sent a malformed frame");
        return;
    }
    enum io io = io_recv(c->recv_fd, &m, sizeof m, &e);
    if (io != IO_OK) {
        fail_io(c, io, e);
        return;
    }
    m.text[sizeof m.text - 1] = '\0';
    if (m.lost < 0 || m.lost >= c->world || m.reporter < 0 || m.reporter >= c->world) {
        fail_lost(c, "sent a malformed frame");
        return;
    }
    fail_from_abort(c, &m);
}

static enum io discard(comm *c, size_t n, int *e)
{
    while (n > 0) {
        size_t k = n < CHUNK_MAX ? n : CHUNK_MAX;
        enum io io = io_recv(c->recv_fd, c->stage, k, e);
        if (io != IO_OK)
            return io;
        n -= k;
    }
    return IO_OK;
}

/*
 * The predecessor closed its end while we were idle. The stream may still
 * hold an ABORT explaining why it left; look for it before blaming it.
 */
static void predecessor_gone(comm *c)
{
    enum io io = IO_CLOSED;
    int e = 0;
    for (;;) {
        struct frame_hdr h;
        if (c->have_pending) {
            h = c->pending;
            c->have_pending = false;
        } else if ((io = io_recv(c->recv_fd, &h, sizeof h, &e)) != IO_OK) {
            break;
        }
        if (h.type == FRAME_ABORT) {
            read_abort(c, &h);
            return;
        }
        if (h.type == FRAME_BEAT && h.len == 0)
            continue;
        if (h.type != FRAME_DATA || (io = discard(c, h.len, &e)) != IO_OK)
            break;
    }
    fail_io(c, io, e);
}

/* Input from the predecessor while no operation runs. */
static void idle_input(comm *c, short revents)
{
    struct frame_hdr h;
    int e = 0;
    if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        predecessor_gone(c);
        return;
    }
    enum io io = io_recv(c->recv_fd, &h, sizeof h, &e);
    if (io != IO_OK) {
        fail_io(c, io, e);
        return;
    }
    if (h.type == FRAME_BEAT && h.len == 0)
        return;
    if (h.type == FRAME_ABORT) {
        read_abort(c, &h);
        return;
    }
    if (h.type == FRAME_DATA) {
        /* The predecessor started the next operation before us. */
        c->pending = h;
        c->have_pending = true;
        return;
    }
    fail_lost(c, "sent a malformed frame");
}

/* ------------------------------------------------------------------ worker */

/* The next DATA header, skipping BEATs; false after recording a failure. */
static bool next_data_header(comm *c, struct frame_hdr *h)
{
    int e = 0;
    for (;;) {
        if (c->have_pending) {
            *h = c->pending;
            c->have_pending = false;
        } else {
            enum io io = io_recv(c->recv_fd, h, sizeof *h, &e);
            if (io != IO_OK) {
                fail_io(c, io, e);
                return false;
            }
        }
        if (h->type == FRAME_DATA)
            return true;
        if (h->type == FRAME_BEAT && h->len == 0)
            continue;
        if (h->type == FRAME_ABORT)
            read_abort(c, h);
        else
            fail_lost(c, "sent a malformed frame");
        return false;
    }
}

/*
 * Receives, reduces or stores every frame of w; publishes progress.
 *
 * In an all-reduce, all-gather frame g (counting from the first of that half,
 * guard) overwrites the slice that reduce-scatter send frame g - guard read.
 * The ring already orders the two (the slice cannot come back before it left),
 * but the wait below makes that hold locally too, whatever the peers send.
 */
static comm_status recv_frames(comm *c, comm_work *w, uint64_t tag, size_t guard)
{
    struct cursor cur = {0, 0};
    size_t off, len, g = 0;
    bool reduce;
    unsigned char *buf = w->buf;
    for (; next_frame(c, w, RECV, &cur, &off, &len, &reduce); g++) {
        struct frame_hdr h;
        int e = 0;
        if (!next_data_header(c, &h))
            return COMM_ELOST;
        if (g >= guard) {
            pthread_mutex_lock(&c->mu);
            while (c->send_next <= g - guard && !c->send_dead && !c->stop)
                pthread_cond_wait(&c->cv_sent, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
        if (h.tag != tag || h.len != len) {
            fail_lost(c, "sent a frame of another operation (every rank must issue the same "
                         "collectives with the same sizes)");
            return COMM_ELOST;
        }
        unsigned char *dst = reduce ? c->stage : buf + off;
        enum io io = io_recv(c->recv_fd, dst, len, &e);
        if (io != IO_OK) {
            fail_io(c, io, e);
            return COMM_ELOST;
        }
        if (reduce)
            add_f32((float *)(void *)(buf + off), (const float *)(void *)c->stage, len / sizeof(float));
        pthread_mutex_lock(&c->mu);
        c->recv_done++;
        if (c->sender_waiting)
            pthread_cond_signal(&c->cv_send);
        pthread_mutex_unlock(&c->mu);
    }
    return COMM_OK;
}

static void run_op(comm *c, comm_work *w)
{
    size_t send_f0;
    size_t send_total = side_frames(c, w, SEND, &send_f0);
    size_t guard = SIZE_MAX;
    if (w->kind == OP_AR) {
        /* Receive frames of the reduce-scatter half: its W-1 segments. */
        struct cursor cur = {0, 0};
        size_t off, len;
        bool reduce;
        guard = 0;
        while (next_frame(c, w, RECV, &cur, &off, &len, &reduce) && reduce)
            guard++;
    }

    pthread_mutex_lock(&c->mu);
    if (c->failed) {
        w->status = COMM_ELOST;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->cur = w;
    c->seq++;
    uint64_t tag = op_tag(c->seq, w->kind);
    c->send_total = send_total;
    c->send_f0 = w->kind == OP_BCAST ? (c->rank == w->root ? send_total : 0) : send_f0;
    c->send_next = 0;
    c->recv_done = 0;
    c->op_active = true;
    pthread_cond_signal(&c->cv_send);
    pthread_mutex_unlock(&c->mu);

    comm_status st = recv_frames(c, w, tag, guard);

    pthread_mutex_lock(&c->mu);
    /* The buffer is the caller's again only once the sender has let go of it. */
    while (!c->stop &&
           (c->sender_busy || (c->send_next < c->send_total && !c->send_dead && !c->failed)))
        pthread_cond_wait(&c->cv_sent, &c->mu);
    if (st == COMM_OK && c->send_next < c->send_total) {
        /* Everything we needed arrived, but our successor did not get it all. */
        if (!c->failed) {
            c->failed = true;
            fmt_text(c->err, sizeof c->err, "%s",
                     c->send_dead ? c->send_err : "stopped before the operation finished");
        }
        st = COMM_ELOST;
    }
    c->op_active = false;
    c->cur = NULL;
    w->status = st;
    pthread_mutex_unlock(&c->mu);
}

/* With mu held: waits for work, watching the predecessor meanwhile. */
static void wait_for_work(comm *c)
{
    while (!c->stop && c->head == NULL) {
        bool watch = !c->failed;
        c->worker_idle = true;
        pthread_mutex_unlock(&c->mu);

        struct pollfd p[2] = {
            {c->wake_rd, POLLIN, 0},
            {watch ? c->recv_fd : -1, (short)(POLLRDHUP | (c->have_pending ? 0 : POLLIN)), 0},
        };
        int k = poll(p, 2, -1);
        if (k > 0 && (p[0].revents & POLLIN)) {
            char drain[64];
            while (read(c->wake_rd, drain, sizeof drain) > 0) {
            }
        }
        pthread_mutex_lock(&c->mu);
        c->worker_idle = false;
        bool go = c->stop || c->head != NULL;
        pthread_mutex_unlock(&c->mu);
        if (!go && k > 0 && watch && p[1].revents != 0)
            idle_input(c, p[1].revents);
        pthread_mutex_lock(&c->mu);
    }
}

static void *worker_main(void *arg)
{
    comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        wait_for_work(c);
        if (c->stop)
            break;
        comm_work *w = c->head;
        c->head = w->qnext;
        if (c->head == NULL)
            c->tail = NULL;
        pthread_mutex_unlock(&c->mu);

        double t0 = now_s();
        run_op(c, w);
        double t1 = now_s();

        pthread_mutex_lock(&c->mu);
        c->busy_s += t1 - t0;
        w->done = true;
        pthread_cond_broadcast(&c->cv_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ------------------------------------------------------------------ sender */

static void *sender_main(void *arg)
{
    comm *c = arg;
    uint64_t seq = 0;
    struct cursor cur = {0, 0};
    double last = now_s();
    int e = 0;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        /* Even when stopping: a failure must reach the successor before we close. */
        if (c->abort_pending) {
            struct abort_msg m = c->abort_out;
            c->abort_pending = false;
            if (c->send_dead)
                continue;
            pthread_mutex_unlock(&c->mu);
            struct frame_hdr h = {FRAME_ABORT, sizeof m, 0};
            enum io io = io_send(c->send_fd, &h, sizeof h, &m, sizeof m, &e);
            pthread_mutex_lock(&c->mu);
            if (io != IO_OK)
                sender_failed(c, io, e);
            last = now_s();
            continue;
        }
        if (c->stop)
            break;
        bool active = c->op_active && !c->failed && !c->send_dead;
        if (active && c->seq != seq) {
            seq = c->seq;
            cur = (struct cursor){0, 0};
        }
        if (active && c->send_next < c->send_total &&
            (c->send_next < c->send_f0 || c->send_next - c->send_f0 < c->recv_done)) {
            const comm_work *w = c->cur;
            size_t off = 0, len = 0;
            bool reduce;
            bool more = next_frame(c, w, SEND, &cur, &off, &len, &reduce);
            (void)more;
            struct frame_hdr h = {FRAME_DATA, (uint32_t)len, op_tag(seq, w->kind)};
            c->sender_busy = true;
            pthread_mutex_unlock(&c->mu);
            enum io io = io_send(c->send_fd, &h, sizeof h, (const unsigned char *)w->buf + off, len, &e);
            pthread_mutex_lock(&c->mu);
            c->sender_busy = false;
            if (io != IO_OK)
                sender_failed(c, io, e);
            else
                c->send_next++;
            last = now_s();
            /* Both the worker and comm_destroy() may wait on cv_sent. */
            pthread_cond_broadcast(&c->cv_sent);
            continue;
        }
        if (active) {
            /* Inside a collective with nothing to send: prove we are alive. */
            double due = last + c->beat_s;
            if (now_s() >= due) {
                struct frame_hdr h = {FRAME_BEAT, 0, 0};
                pthread_mutex_unlock(&c->mu);
                enum io io = io_send(c->send_fd, &h, sizeof h, NULL, 0, &e);
                pthread_mutex_lock(&c->mu);
                if (io != IO_OK)
                    sender_failed(c, io, e);
                last = now_s();
                continue;
            }
            struct timespec ts;
            abstime(&ts, due);
            c->sender_waiting = true;
            pthread_cond_timedwait(&c->cv_send, &c->mu, &ts);
            c->sender_waiting = false;
            continue;
        }
        c->sender_waiting = true;
        pthread_cond_wait(&c->cv_send, &c->mu);
        c->sender_waiting = false;
    }
    c->sender_exited = true;
    pthread_cond_broadcast(&c->cv_sent);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* -------------------------------------------------------------- public API */

size_t comm_shard_offset(size_t n, int world, int rank)
{
    if (world < 1 || rank < 0)
        return 0;
    if (rank > world)
        rank = world;
    size_t W = (size_t)world, r = (size_t)rank, q = n / W, rem = n % W;
    return q * r + (r < rem ? r : rem);
}

size_t comm_shard_count(size_t n, int world, int rank)
{
    if (world < 1 || rank < 0 || rank >= world)
        return 0;
    return n / (size_t)world + ((size_t)rank < n % (size_t)world ? 1 : 0);
}

static comm_status init_sync(comm *c)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return COMM_ENOMEM;
    comm_status st = COMM_ENOMEM;
    bool mu = false, done = false, send = false;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0)
        goto out;
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto out;
    mu = true;
    if (pthread_cond_init(&c->cv_done, &ca) != 0)
        goto out;
    done = true;
    if (pthread_cond_init(&c->cv_send, &ca) != 0)
        goto out;
    send = true;
    if (pthread_cond_init(&c->cv_sent, &ca) != 0)
        goto out;
    c->sync_ready = true;
    st = COMM_OK;
out:
    if (st != COMM_OK) {
        if (send)
            pthread_cond_destroy(&c->cv_send);
        if (done)
            pthread_cond_destroy(&c->cv_done);
        if (mu)
            pthread_mutex_destroy(&c->mu);
    }
    pthread_condattr_destroy(&ca);
    return st;
}

static comm_status start_threads(comm *c, char *err, size_t errlen)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fmt_text(err, errlen, "pipe: %s", errno_text(errno));
        return COMM_ENOMEM;
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];
    for (int k = 0; k < 2; k++) {
        int fl = fcntl(fds[k], F_GETFL);
        if (fl < 0 || fcntl(fds[k], F_SETFL, fl | O_NONBLOCK) != 0 ||
            fcntl(fds[k], F_SETFD, FD_CLOEXEC) != 0) {
            fmt_text(err, errlen, "pipe: %s", errno_text(errno));
            return COMM_ENOMEM;
        }
    }
    if (pthread_create(&c->worker, NULL, worker_main, c) != 0) {
        fmt_text(err, errlen, "cannot start the comm worker thread");
        return COMM_ENOMEM;
    }
    c->worker_started = true;
    if (pthread_create(&c->sender, NULL, sender_main, c) != 0) {
        fmt_text(err, errlen, "cannot start the comm sender thread");
        return COMM_ENOMEM;
    }
    c->sender_started = true;
    return COMM_OK;
}

comm_status comm_init(const comm_config *cfg, comm **out, char *err, size_t errlen)
{
    char scratch[ERR_MAX];
    comm_status st = COMM_EINVAL;
    comm *c = NULL;
    int ring_lfd = -1;
    if (err == NULL || errlen == 0) {
        err = scratch;
        errlen = sizeof scratch;
    }
    err[0] = '\0';
    if (out == NULL || cfg == NULL) {
        fmt_text(err, errlen, "comm_init: NULL argument");
        goto out;
    }
    *out = NULL;
    if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || cfg->timeout_ms < 0) {
        fmt_text(err, errlen, "comm_init: bad rank %d / world %d / timeout %d", cfg->rank, cfg->world,
                 cfg->timeout_ms);
        goto out;
    }
    if (cfg->world > 1 &&
        (cfg->master_addr == NULL || cfg->master_addr[0] == '\0' || cfg->master_port < 1 ||
         cfg->master_port > 65535)) {
        fmt_text(err, errlen, "comm_init: need master_addr and a master_port in 1..65535");
        goto out;
    }

    st = COMM_ENOMEM;
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        fmt_text(err, errlen, "out of memory");
        goto out;
    }
    c->rank = cfg->rank;
    c->world = cfg->world;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->beat_s = c->timeout_ms / 4000.0;
    c->send_fd = c->recv_fd = c->wake_rd = c->wake_wr = -1;
    if (init_sync(c) != COMM_OK) {
        fmt_text(err, errlen, "out of memory");
        goto out;
    }
    if (c->world == 1) {
        st = COMM_OK;
        goto out;
    }
    c->peers = calloc((size_t)c->world, sizeof *c->peers);
    c->stage = malloc(CHUNK_MAX);
    if (c->peers == NULL || c->stage == NULL) {
        fmt_text(err, errlen, "out of memory");
        goto out;
    }

    double deadline = now_s() + c->timeout_ms / 1000.0;
    st = c->rank == 0 ? rendezvous_root(c, cfg, deadline, &ring_lfd, err, errlen)
                      : rendezvous_join(c, cfg, deadline, &ring_lfd, err, errlen);
    if (st != COMM_OK)
        goto out;
    st = ring_connect(c, ring_lfd, deadline, err, errlen);
    if (st != COMM_OK)
        goto out;
    set_io_timeout(c->send_fd, c->timeout_ms);
    set_io_timeout(c->recv_fd, c->timeout_ms);
    st = start_threads(c, err, errlen);
out:
    if (ring_lfd >= 0)
        close(ring_lfd);
    if (st == COMM_OK) {
        *out = c;
    } else {
        comm_destroy(c);
    }
    return st;
}

void comm_destroy(comm *c)
{
    if (c == NULL)
        return;
    if (c->sync_ready) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_broadcast(&c->cv_send);
        pthread_cond_broadcast(&c->cv_sent);
        pthread_cond_broadcast(&c->cv_done);
        /* Let the sender pass on a failure (bounded: its successor may hang). */
        double until = now_s() + (c->timeout_ms < 2000 ? c->timeout_ms : 2000) / 1000.0;
        struct timespec ts;
        abstime(&ts, until);
        while (c->sender_started && !c->sender_exited && now_s() < until)
            pthread_cond_timedwait(&c->cv_sent, &c->mu, &ts);
        pthread_mutex_unlock(&c->mu);
    }
    if (c->wake_wr >= 0)
        (void)!write(c->wake_wr, "x", 1);
    /* Wakes a thread blocked in send or recv. */
    if (c->send_fd >= 0)
        shutdown(c->send_fd, SHUT_RDWR);
    if (c->recv_fd >= 0)
        shutdown(c->recv_fd, SHUT_RDWR);
    if (c->worker_started)
        pthread_join(c->worker, NULL);
    if (c->sender_started)
        pthread_join(c->sender, NULL);
    int fds[4] = {c->send_fd, c->recv_fd, c->wake_rd, c->wake_wr};
    for (int k = 0; k < 4; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    while (c->works != NULL) {
        comm_work *w = c->works;
        c->works = w->lnext;
        free(w);
    }
    if (c->sync_ready) {
        pthread_cond_destroy(&c->cv_sent);
        pthread_cond_destroy(&c->cv_send);
        pthread_cond_destroy(&c->cv_done);
        pthread_mutex_destroy(&c->mu);
    }
    free(c->peers);
    free(c->stage);
    free(c);
}

int comm_rank(const comm *c)
{
    return c != NULL ? c->rank : -1;
}

int comm_world(const comm *c)
{
    return c != NULL ? c->world : 0;
}

const char *comm_error(const comm *c)
{
    return c != NULL ? c->err : "";
}

double comm_seconds(const comm *c)
{
    if (c == NULL)
        return 0.0;
    comm *m = (comm *)c; /* the lock is not part of the observable state */
    pthread_mutex_lock(&m->mu);
    double s = m->busy_s;
    pthread_mutex_unlock(&m->mu);
    return s;
}

static comm_status submit(comm *c, int kind, size_t elem, void *buf, size_t n, int root,
                          comm_work **work)
{
    if (work != NULL)
        *work = NULL;
    if (c == NULL || work == NULL || (n > 0 && buf == NULL) || n > SIZE_MAX / 8)
        return COMM_EINVAL;
    if (kind == OP_BCAST && (root < 0 || root >= c->world))
        return COMM_EINVAL;
    comm_work *w = calloc(1, sizeof *w);
    if (w == NULL)
        return COMM_ENOMEM;
    w->kind = kind;
    w->elem = elem;
    w->buf = buf;
    w->n = n;
    w->root = root;
    w->chunk = chunk_for(n, elem, c->world, kind);
    pthread_mutex_lock(&c->mu);
    w->lnext = c->works;
    c->works = w;
    if (c->world == 1) {
        /* A world of one holds the whole sum already. */
        w->done = true;
        w->status = COMM_OK;
    } else {
        if (c->tail != NULL)
            c->tail->qnext = w;
        else
            c->head = w;
        c->tail = w;
        if (c->worker_idle)
            (void)!write(c->wake_wr, "x", 1);
    }
    pthread_mutex_unlock(&c->mu);
    *work = w;
    return COMM_OK;
}

comm_status comm_reduce_scatter_start(comm *c, float *buf, size_t n, comm_work **work)
{
    return submit(c, OP_RS, sizeof(float), buf, n, 0, work);
}

comm_status comm_all_gather_start(comm *c, float *buf, size_t n, comm_work **work)
{
    return submit(c, OP_AG, sizeof(float), buf, n, 0, work);
}

comm_status comm_all_reduce_start(comm *c, float *buf, size_t n, comm_work **work)
{
    return submit(c, OP_AR, sizeof(float), buf, n, 0, work);
}

comm_status comm_wait(comm *c, comm_work *work)
{
    if (c == NULL || work == NULL)
        return COMM_EINVAL;
    pthread_mutex_lock(&c->mu);
    while (!work->done)
        pthread_cond_wait(&c->cv_done, &c->mu);
    comm_status st = work->status;
    for (comm_work **p = &c->works; *p != NULL; p = &(*p)->lnext) {
        if (*p == work) {
            *p = work->lnext;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    free(work);
    return st;
}

static comm_status run_blocking(comm *c, int kind, size_t elem, void *buf, size_t n, int root)
{
    comm_work *w = NULL;
    comm_status st = submit(c, kind, elem, buf, n, root, &w);
    if (st != COMM_OK)
        return st;
    return comm_wait(c, w);
}

comm_status comm_reduce_scatter(comm *c, float *buf, size_t n)
{
    return run_blocking(c, OP_RS, sizeof(float), buf, n, 0);
}

comm_status comm_all_gather(comm *c, float *buf, size_t n)
{
    return run_blocking(c, OP_AG, sizeof(float), buf, n, 0);
}

comm_status comm_all_reduce(comm *c, float *buf, size_t n)
{
    return run_blocking(c, OP_AR, sizeof(float), buf, n, 0);
}

comm_status comm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    return run_blocking(c, OP_BCAST, 1, buf, bytes, root);
}

comm_status comm_all_reduce_i64(comm *c, int64_t *value)
{
    if (c == NULL || value == NULL)
        return COMM_EINVAL;
    int64_t *all = calloc((size_t)c->world, sizeof *all);
    if (all == NULL)
        return COMM_ENOMEM;
    all[c->rank] = *value;
    /* Gather every rank's value, then add in rank order (exact, wraps like uint64). */
    comm_status st = run_blocking(c, OP_AG, sizeof *all, all, (size_t)c->world, 0);
    if (st == COMM_OK) {
        uint64_t sum = 0;
        for (int k = 0; k < c->world; k++)
            sum += (uint64_t)all[k];
        *value = (int64_t)sum;
    }
    free(all);
    return st;
}

comm_status comm_barrier(comm *c)
{
    int64_t v = 0;
    return comm_all_reduce_i64(c, &v);
}
