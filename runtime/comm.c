/*
 * comm.c - the TCP ring behind comm.h. How the ring forms (the rendezvous and
 * its handshake) is rendezvous.c; the socket helpers both use are comm_net.c.
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
#define _GNU_SOURCE /* POLLRDHUP */

#include "runtime/comm.h"

#include "runtime/comm_int.h"
#include "runtime/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 30000
#define ERR_MAX 256

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

/* A position in one side's sequence of segments. */
struct cursor {
    int seg;
    size_t pos; /* bytes of the segment already covered */
};

struct comm {
    int rank, world, timeout_ms;
    double beat_s;
    rdv_peer *peers;
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

static void io_reason(enum io io, int e, int timeout_ms, bool sending, char *why, size_t len)
{
    switch (io) {
    case IO_CLOSED: cnet_fmt(why, len, "connection closed"); break;
    case IO_TIMEOUT:
        cnet_fmt(why, len, sending ? "not reading for %d ms" : "no data for %d ms", timeout_ms);
        break;
    default: cnet_fmt(why, len, "%s (errno %d)", cnet_errno_text(e), e); break;
    }
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
    cnet_fmt(out, len, "rank %d (%s:%d) lost: %s", rank, c->peers[rank].host, c->peers[rank].port,
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
        cnet_fmt(c->err, sizeof c->err, "%s", m.text);
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
            cnet_fmt(c->err, sizeof c->err, "%s", c->send_err);
            memset(&c->abort_out, 0, sizeof c->abort_out);
            c->abort_out.lost = (c->rank + 1) % c->world;
            c->abort_out.reporter = c->rank;
            cnet_fmt(c->abort_out.text, sizeof c->abort_out.text, "%s", c->send_err);
        } else {
            cnet_fmt(c->err, sizeof c->err, "%s (seen by rank %d)", m->text, m->reporter);
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
    enum io io = cnet_recv(c->recv_fd, &m, sizeof m, &e);
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
        enum io io = cnet_recv(c->recv_fd, c->stage, k, e);
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
        } else if ((io = cnet_recv(c->recv_fd, &h, sizeof h, &e)) != IO_OK) {
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
    enum io io = cnet_recv(c->recv_fd, &h, sizeof h, &e);
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
            enum io io = cnet_recv(c->recv_fd, h, sizeof *h, &e);
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
        enum io io = cnet_recv(c->recv_fd, dst, len, &e);
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
            cnet_fmt(c->err, sizeof c->err, "%s",
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

        double t0 = cnet_now_s();
        run_op(c, w);
        double t1 = cnet_now_s();

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
    double last = cnet_now_s();
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
            enum io io = cnet_send(c->send_fd, &h, sizeof h, &m, sizeof m, &e);
            pthread_mutex_lock(&c->mu);
            if (io != IO_OK)
                sender_failed(c, io, e);
            last = cnet_now_s();
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
            enum io io = cnet_send(c->send_fd, &h, sizeof h, (const unsigned char *)w->buf + off, len, &e);
            pthread_mutex_lock(&c->mu);
            c->sender_busy = false;
            if (io != IO_OK)
                sender_failed(c, io, e);
            else
                c->send_next++;
            last = cnet_now_s();
            /* Both the worker and comm_destroy() may wait on cv_sent. */
            pthread_cond_broadcast(&c->cv_sent);
            continue;
        }
        if (active) {
            /* Inside a collective with nothing to send: prove we are alive. */
            double due = last + c->beat_s;
            if (cnet_now_s() >= due) {
                struct frame_hdr h = {FRAME_BEAT, 0, 0};
                pthread_mutex_unlock(&c->mu);
                enum io io = cnet_send(c->send_fd, &h, sizeof h, NULL, 0, &e);
                pthread_mutex_lock(&c->mu);
                if (io != IO_OK)
                    sender_failed(c, io, e);
                last = cnet_now_s();
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
        cnet_fmt(err, errlen, "pipe: %s", cnet_errno_text(errno));
        return COMM_ENOMEM;
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];
    for (int k = 0; k < 2; k++) {
        int fl = fcntl(fds[k], F_GETFL);
        if (fl < 0 || fcntl(fds[k], F_SETFL, fl | O_NONBLOCK) != 0 ||
            fcntl(fds[k], F_SETFD, FD_CLOEXEC) != 0) {
            cnet_fmt(err, errlen, "pipe: %s", cnet_errno_text(errno));
            return COMM_ENOMEM;
        }
    }
    if (pthread_create(&c->worker, NULL, worker_main, c) != 0) {
        cnet_fmt(err, errlen, "cannot start the comm worker thread");
        return COMM_ENOMEM;
    }
    c->worker_started = true;
    if (pthread_create(&c->sender, NULL, sender_main, c) != 0) {
        cnet_fmt(err, errlen, "cannot start the comm sender thread");
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
    if (err == NULL || errlen == 0) {
        err = scratch;
        errlen = sizeof scratch;
    }
    err[0] = '\0';
    if (out == NULL || cfg == NULL) {
        cnet_fmt(err, errlen, "comm_init: NULL argument");
        goto out;
    }
    *out = NULL;
    if (cfg->secret == NULL && cfg->secret_len > 0) {
        cnet_fmt(err, errlen, "comm_init: a secret length without a secret");
        goto out;
    }
    if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || cfg->timeout_ms < 0) {
        cnet_fmt(err, errlen, "comm_init: bad rank %d / world %d / timeout %d", cfg->rank, cfg->world,
                 cfg->timeout_ms);
        goto out;
    }
    if (cfg->world > 1 &&
        (cfg->master_addr == NULL || cfg->master_addr[0] == '\0' || cfg->master_port < 1 ||
         cfg->master_port > 65535)) {
        cnet_fmt(err, errlen, "comm_init: need master_addr and a master_port in 1..65535");
        goto out;
    }

    st = COMM_ENOMEM;
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        cnet_fmt(err, errlen, "out of memory");
        goto out;
    }
    c->rank = cfg->rank;
    c->world = cfg->world;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->beat_s = c->timeout_ms / 4000.0;
    c->send_fd = c->recv_fd = c->wake_rd = c->wake_wr = -1;
    if (init_sync(c) != COMM_OK) {
        cnet_fmt(err, errlen, "out of memory");
        goto out;
    }
    if (c->world == 1) {
        st = COMM_OK;
        goto out;
    }
    c->peers = calloc((size_t)c->world, sizeof *c->peers);
    c->stage = malloc(CHUNK_MAX);
    if (c->peers == NULL || c->stage == NULL) {
        cnet_fmt(err, errlen, "out of memory");
        goto out;
    }

    double deadline = cnet_now_s() + c->timeout_ms / 1000.0;
    st = rdv_form_ring(cfg, c->timeout_ms, deadline, c->peers, &c->send_fd, &c->recv_fd, err,
                       errlen);
    if (st != COMM_OK)
        goto out;
    cnet_set_io_timeout(c->send_fd, c->timeout_ms);
    cnet_set_io_timeout(c->recv_fd, c->timeout_ms);
    st = start_threads(c, err, errlen);
out:
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
        double until = cnet_now_s() + (c->timeout_ms < 2000 ? c->timeout_ms : 2000) / 1000.0;
        struct timespec ts;
        abstime(&ts, until);
        while (c->sender_started && !c->sender_exited && cnet_now_s() < until)
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
