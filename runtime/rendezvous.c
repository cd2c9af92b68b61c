/*
 * rendezvous.c - the rendezvous and ring set-up of rendezvous.h, with its handshake.
 *
 * Threads. Rank 0's rendezvous and every rank's acceptance of its ring predecessor
 * run on the calling thread, which serves every connection still in its handshake at
 * once (struct gate), each bounded by RDV_HANDSHAKE_MS. Connecting to the ring successor
 * runs on a second thread meanwhile:
 * every rank is at once the dialer of one link and the acceptor of another, and the
 * acceptor speaks first, so a rank that did one after the other would wait on its
 * successor, which waits on its own, around the whole ring.
 */
#define _GNU_SOURCE /* accept4, SOCK_CLOEXEC */

#include "runtime/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ty_crypto.h"
#include "runtime/comm_int.h"

#define REJECT_TEXT_MAX 192
#define ENTRY_BYTES (RDV_HOST_MAX + 4)
#define CONTEXT_BYTES (sizeof RDV_CONTEXT - 1)
/* A dialer that met a listener without the secret dials again after this. */
#define REDIAL_MS 100

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

struct msg {
    uint32_t magic, version, kind, world, rank, port;
};

/* ----------------------------------------------------------------- wire */

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

/* Latency and throughput options; best effort, a refusal only costs speed. */
static void tune_socket(int fd)
{
    int one = 1, bytes = SOCK_BUF_BYTES;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
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
        cnet_fmt(why, whylen, "socket: %s", cnet_errno_text(errno));
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
            k = poll(&p, 1, cnet_remaining_ms(deadline));
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
    /*
     * Dialling a free port of the ephemeral range again and again, the kernel may pick
     * that very port as the source and connect the socket to itself. Nobody listens.
     */
    struct sockaddr_storage me, peer;
    socklen_t mel = sizeof me, peerl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &mel) == 0 &&
        getpeername(fd, (struct sockaddr *)&peer, &peerl) == 0 && mel == peerl &&
        memcmp(&me, &peer, mel) == 0) {
        errno = ECONNREFUSED;
        goto fail;
    }
    return fd;
fail:
    cnet_fmt(why, whylen, "%s", cnet_errno_text(errno));
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
    cnet_fmt(service, sizeof service, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    for (;;) {
        struct addrinfo *res = NULL;
        int g = getaddrinfo(host, service, &hints, &res);
        if (g != 0) {
            cnet_fmt(why, sizeof why, "cannot resolve: %s", gai_strerror(g));
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
        int left = cnet_remaining_ms(deadline);
        if (!retry || left == 0)
            break;
        cnet_sleep_ms(left < 50 ? left : 50);
    }
    cnet_fmt(err, errlen, "cannot connect to %s:%d: %s", host, port, why);
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
    cnet_fmt(err, errlen, "cannot listen on port %d: %s", port, cnet_errno_text(e));
    if (fd >= 0)
        close(fd);
    errno = e;
    return -1;
}

/* Best effort: tells a registered rank why the rendezvous failed. */
static void send_reject(int fd, int world, const char *why)
{
    unsigned char b[RDV_HEADER_BYTES + REJECT_TEXT_MAX];
    struct msg m = {RDV_MAGIC, RDV_VERSION, RDV_REJECT, (uint32_t)world, 0, 0};
    int e = 0;
    memset(b, 0, sizeof b);
    msg_encode(b, &m);
    cnet_fmt((char *)b + RDV_HEADER_BYTES, REJECT_TEXT_MAX, "%s", why);
    cnet_set_io_timeout(fd, 1000);
    (void)cnet_send(fd, b, sizeof b, NULL, 0, &e);
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

/* ------------------------------------------------------------- handshake */

/* One end of a handshake: the header this end sent and the nonce it chose. */
struct hs {
    unsigned char mine[RDV_HEADER_BYTES];
    unsigned char nonce[RDV_NONCE_BYTES];
    struct msg peer; /* the other end's header, decoded */
};

/* HMAC-SHA256(K, C || nonce || header); -1 if OpenSSL fails. */
static int proof_of(const comm_config *cfg, const unsigned char *nonce, const unsigned char *header,
                    unsigned char out[RDV_MAC_BYTES])
{
    unsigned char in[CONTEXT_BYTES + RDV_NONCE_BYTES + RDV_HEADER_BYTES];
    memcpy(in, RDV_CONTEXT, CONTEXT_BYTES);
    memcpy(in + CONTEXT_BYTES, nonce, RDV_NONCE_BYTES);
    memcpy(in + CONTEXT_BYTES + RDV_NONCE_BYTES, header, RDV_HEADER_BYTES);
    return ty_hmac_sha256(cfg->secret, cfg->secret_len, in, sizeof in, out) == TY_OK ? 0 : -1;
}

/* The header and nonce of this end; -1 if there are no random bytes. */
static int hs_begin(struct hs *h, uint32_t kind, int world, int rank, uint32_t port)
{
    struct msg m = {RDV_MAGIC, RDV_VERSION, kind, (uint32_t)world, (uint32_t)rank, port};
    memset(h, 0, sizeof *h);
    msg_encode(h->mine, &m);
    return ty_random_bytes(h->nonce, sizeof h->nonce) == TY_OK ? 0 : -1;
}

/* Acceptor, step 1: the challenge for a link of kind. -1: cannot send it. */
static int hs_challenge(int fd, const comm_config *cfg, uint32_t kind, struct hs *h)
{
    unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES];
    int e = 0;
    if (hs_begin(h, RDV_CHALLENGE, cfg->world, cfg->rank, kind) != 0)
        return -1;
    memcpy(b, h->mine, RDV_HEADER_BYTES);
    memcpy(b + RDV_HEADER_BYTES, h->nonce, RDV_NONCE_BYTES);
    return cnet_send(fd, b, sizeof b, NULL, 0, &e) == IO_OK ? 0 : -1;
}

/*
 * Acceptor, steps 2 and 3: checks the dialer's hello of kind and its proof over h's
 * nonce (in, HELLO_BYTES received), and answers with this end's proof over the dialer's
 * nonce. 0 with h->peer when the dialer proved the secret; -1 for anything else (a
 * stranger: close it).
 */
static int hs_check(int fd, const comm_config *cfg, uint32_t kind, const unsigned char *in,
                    struct hs *h)
{
    unsigned char want[RDV_MAC_BYTES];
    int e = 0;
    msg_decode(&h->peer, in);
    if (h->peer.magic != RDV_MAGIC || h->peer.version != RDV_VERSION || h->peer.kind != kind)
        return -1;
    if (proof_of(cfg, h->nonce, in, want) != 0 ||
        !ty_equal_ct(want, in + RDV_HEADER_BYTES + RDV_NONCE_BYTES, RDV_MAC_BYTES))
        return -1;
    if (proof_of(cfg, in + RDV_HEADER_BYTES, h->mine, want) != 0 ||
        cnet_send(fd, want, sizeof want, NULL, 0, &e) != IO_OK)
        return -1;
    return 0;
}

/*
 * Dialer: answers the challenge of rank `peer` accepting links of kind with this end's
 * hello (world, rank, port) and proof, and checks the acceptor's proof, all by deadline
 * (the acceptor may be busy with other connections first). 0 when both ends
 * proved the secret; HS_REFUSED with why when a proof failed either way, HS_NO_ANSWER
 * with why for anything else (no challenge, another protocol, I/O).
 */
enum { HS_NO_ANSWER = -1, HS_REFUSED = -2 };

static int hs_dial(int fd, const comm_config *cfg, uint32_t kind, uint32_t port, int peer,
                   double deadline, char *why, size_t whylen)
{
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES];
    unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES];
    unsigned char want[RDV_MAC_BYTES], got[RDV_MAC_BYTES];
    struct hs h;
    struct msg m;
    int e = 0;
    enum io io = cnet_recv_by(fd, ch, sizeof ch, deadline, &e);
    if (io != IO_OK) {
        cnet_fmt(why, whylen, "no challenge (%s)",
                 io == IO_TIMEOUT  ? "timed out"
                 : io == IO_CLOSED ? "connection closed"
                                   : cnet_errno_text(e));
        return HS_NO_ANSWER;
    }
    msg_decode(&m, ch);
    if (m.magic != RDV_MAGIC || m.version != RDV_VERSION || m.kind != RDV_CHALLENGE) {
        cnet_fmt(why, whylen, "does not speak this protocol (version %u)", m.version);
        return HS_NO_ANSWER;
    }
    if (m.rank != (uint32_t)peer || m.port != kind) {
        cnet_fmt(why, whylen, "answers as rank %u (link kind %u), expected rank %d", m.rank, m.port,
                 peer);
        return HS_NO_ANSWER;
    }
    if (hs_begin(&h, kind, cfg->world, cfg->rank, port) != 0 ||
        proof_of(cfg, ch + RDV_HEADER_BYTES, h.mine, b + RDV_HEADER_BYTES + RDV_NONCE_BYTES) != 0) {
        cnet_fmt(why, whylen, "no random bytes or HMAC from OpenSSL");
        return HS_NO_ANSWER;
    }
    memcpy(b, h.mine, RDV_HEADER_BYTES);
    memcpy(b + RDV_HEADER_BYTES, h.nonce, RDV_NONCE_BYTES);
    if (cnet_send(fd, b, sizeof b, NULL, 0, &e) != IO_OK) {
        cnet_fmt(why, whylen, "cannot send our proof: %s", cnet_errno_text(e));
        return HS_NO_ANSWER;
    }
    io = cnet_recv_by(fd, got, sizeof got, deadline, &e);
    if (io != IO_OK) {
        /* A peer with the secret never closes on a rank that has it. */
        cnet_fmt(why, whylen,
                 "refused our proof (%s): is the rendezvous secret the same for every "
                 "rank?",
                 io == IO_TIMEOUT  ? "timed out"
                 : io == IO_CLOSED ? "connection closed"
                                   : cnet_errno_text(e));
        return HS_REFUSED;
    }
    if (proof_of(cfg, h.nonce, ch, want) != 0 || !ty_equal_ct(want, got, sizeof got)) {
        cnet_fmt(why, whylen, "did not prove the rendezvous secret");
        return HS_REFUSED;
    }
    return 0;
}

/*
 * A listener and the connections it accepted that are still in their handshake. They
 * are served at once, each with its own RDV_HANDSHAKE_MS, so that strangers that connect
 * and say nothing delay nobody: a real rank's handshake completes beside them. At most
 * GATE_MAX wait at a time; more wait in the kernel's backlog until one ends.
 */
#define GATE_MAX 64
#define HELLO_BYTES (RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES)

struct pending {
    int fd;
    double by; /* its handshake ends then */
    struct hs h;
    unsigned char in[HELLO_BYTES];
    size_t got;
    struct sockaddr_storage sa;
    socklen_t salen;
};

struct gate {
    const comm_config *cfg;
    int lfd;
    uint32_t kind; /* of the hellos it admits */
    int n;
    struct pending *p; /* [GATE_MAX] */
    int refused;       /* strangers closed so far */
};

static comm_status gate_open(struct gate *g, const comm_config *cfg, int lfd, uint32_t kind)
{
    memset(g, 0, sizeof *g);
    g->cfg = cfg;
    g->lfd = lfd;
    g->kind = kind;
    g->p = calloc(GATE_MAX, sizeof *g->p);
    return g->p != NULL ? COMM_OK : COMM_ENOMEM;
}

/* Closes every connection still in its handshake. */
static void gate_close(struct gate *g)
{
    for (int k = 0; k < g->n; k++)
        close(g->p[k].fd);
    g->n = 0;
    free(g->p);
    g->p = NULL;
}

/* Ends pending connection k: closed as a stranger unless keep. */
static void gate_drop(struct gate *g, int k, bool keep)
{
    if (!keep) {
        close(g->p[k].fd);
        g->refused++;
    }
    g->p[k] = g->p[--g->n];
}

/* Accepts one connection and sends it a challenge. */
static void gate_accept(struct gate *g, double deadline)
{
    struct pending *q = &g->p[g->n];
    q->salen = sizeof q->sa;
    q->fd = accept4(g->lfd, (struct sockaddr *)&q->sa, &q->salen, SOCK_CLOEXEC);
    if (q->fd < 0) {
        /* Out of descriptors or memory: the listener stays readable; do not spin on it. */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            cnet_sleep_ms(10);
        return;
    }
    int one = 1;
    (void)setsockopt(q->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    q->by = cnet_now_s() + RDV_HANDSHAKE_MS / 1000.0;
    if (q->by > deadline)
        q->by = deadline;
    q->got = 0;
    /* A fresh socket's buffer takes the challenge and the proof without blocking. */
    cnet_set_io_timeout(q->fd, RDV_HANDSHAKE_MS);
    g->n++;
    if (hs_challenge(q->fd, g->cfg, g->kind, &q->h) != 0)
        gate_drop(g, g->n - 1, false);
}

/*
 * Reads what pending connection k has sent; when its hello is whole, checks it. Returns
 * true when k proved the secret (and leaves it for the caller), else false.
 */
static bool gate_read(struct gate *g, int k)
{
    struct pending *q = &g->p[k];
    ssize_t r = recv(q->fd, q->in + q->got, sizeof q->in - q->got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    if (r <= 0) {
        gate_drop(g, k, false);
        return false;
    }
    q->got += (size_t)r;
    if (q->got < sizeof q->in)
        return false;
    if (hs_check(q->fd, g->cfg, g->kind, q->in, &q->h) == 0)
        return true;
    gate_drop(g, k, false);
    return false;
}

/*
 * The next connection on g's listener that proves the secret with a hello of g's kind,
 * by deadline: its fd (new), header in *peer and address in sa; -1 at the deadline.
 * Strangers are closed on the way and counted in g->refused.
 */
static int gate_next(struct gate *g, double deadline, struct msg *peer, struct sockaddr_storage *sa,
                     socklen_t *salen)
{
    struct pollfd pf[GATE_MAX + 1];
    for (;;) {
        double now = cnet_now_s(), wake = deadline;
        if (now >= deadline)
            return -1;
        for (int k = g->n - 1; k >= 0; k--)
            if (now >= g->p[k].by)
                gate_drop(g, k, false); /* its time is up: silent, or too slow */
        for (int k = 0; k < g->n; k++) {
            pf[k] = (struct pollfd){g->p[k].fd, POLLIN, 0};
            if (g->p[k].by < wake)
                wake = g->p[k].by;
        }
        int np = g->n;
        if (g->n < GATE_MAX)
            pf[np++] = (struct pollfd){g->lfd, POLLIN, 0};
        int ready = poll(pf, (nfds_t)np, cnet_remaining_ms(wake));
        if (ready < 0 && errno != EINTR)
            return -1;
        if (ready <= 0)
            continue;
        /* From the last: a connection dropped is replaced by the last, already looked at. */
        int n = g->n;
        for (int k = n - 1; k >= 0; k--) {
            if (pf[k].revents == 0)
                continue;
            if (gate_read(g, k)) {
                struct pending *q = &g->p[k];
                int fd = q->fd;
                *peer = q->h.peer;
                *sa = q->sa;
                *salen = q->salen;
                gate_drop(g, k, true);
                return fd;
            }
        }
        if (np > n && pf[n].revents != 0 && g->n < GATE_MAX)
            gate_accept(g, deadline);
    }
}

/* "; N connections refused (...)" for error messages; "" for none. */
static void refused_text(int refused, char *out, size_t len)
{
    if (refused == 0)
        cnet_fmt(out, len, "%s", "");
    else
        cnet_fmt(out, len, "; %d connection%s refused (no proof of the rendezvous secret)", refused,
                 refused == 1 ? "" : "s");
}

/* ------------------------------------------------------------- rendezvous */

/*
 * Rank 0: admits one registration per other rank on MASTER_PORT, then sends everyone
 * the table of ring addresses. Strangers are closed (see rendezvous.h); ranks that
 * proved the secret but belong elsewhere (world size, rank out of range or twice) fail
 * the rendezvous on both sides with the reason.
 */
static comm_status rendezvous_root(const comm_config *cfg, int timeout_ms, double deadline,
                                   rdv_peer *peers, int *ring_lfd, char *err, size_t errlen)
{
    comm_status st = COMM_ESETUP;
    int W = cfg->world, lfd = -1, joined = 1;
    int family = master_family(cfg->master_addr);
    unsigned char *table = NULL;
    struct gate g;
    memset(&g, 0, sizeof g);
    int *conns = malloc((size_t)W * sizeof *conns);
    if (conns == NULL) {
        cnet_fmt(err, errlen, "out of memory");
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
        if (errno != EADDRINUSE || cnet_remaining_ms(deadline) == 0)
            goto out;
        cnet_sleep_ms(50);
    }
    *ring_lfd = listen_any(family, 0, false, &peers[0].port, err, errlen);
    if (*ring_lfd < 0)
        goto out;
    if (gate_open(&g, cfg, lfd, RDV_REGISTER) != COMM_OK) {
        cnet_fmt(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }

    while (joined < W) {
        struct sockaddr_storage sa;
        socklen_t salen;
        struct msg peer;
        int fd = gate_next(&g, deadline, &peer, &sa, &salen);
        if (fd < 0) {
            char more[96];
            refused_text(g.refused, more, sizeof more);
            cnet_fmt(err, errlen, "rendezvous: only %d of %d ranks joined within %d ms%s", joined,
                     W, timeout_ms, more);
            goto out;
        }
        const struct msg *m = &peer;
        char why[160] = "";
        if (m->world != (uint32_t)W)
            cnet_fmt(why, sizeof why, "rank %u says world size %u, expected %d", m->rank, m->world,
                     W);
        else if (m->rank == 0 || m->rank >= (uint32_t)W)
            cnet_fmt(why, sizeof why, "rank %u is out of range for world size %d", m->rank, W);
        else if (conns[m->rank] >= 0)
            cnet_fmt(why, sizeof why, "rank %u registered twice", m->rank);
        else if (m->port == 0 || m->port > 65535)
            cnet_fmt(why, sizeof why, "rank %u sent port %u", m->rank, m->port);
        if (why[0] != '\0') {
            send_reject(fd, W, why);
            close(fd);
            cnet_fmt(err, errlen, "rendezvous: %s", why);
            goto out;
        }
        rdv_peer *p = &peers[m->rank];
        if (numeric_host((struct sockaddr *)&sa, salen, p->host, sizeof p->host) != 0) {
            close(fd);
            cnet_fmt(err, errlen, "rendezvous: cannot name the address of rank %u", m->rank);
            goto out;
        }
        p->port = (int)m->port;
        conns[m->rank] = fd;
        joined++;
        if (peers[0].host[0] == '\0') {
            /* Our own address as the others reach it. */
            struct sockaddr_storage me;
            socklen_t mel = sizeof me;
            if (getsockname(fd, (struct sockaddr *)&me, &mel) != 0 ||
                numeric_host((struct sockaddr *)&me, mel, peers[0].host, RDV_HOST_MAX) != 0) {
                cnet_fmt(err, errlen, "rendezvous: cannot name our own address");
                goto out;
            }
        }
    }

    size_t tlen = RDV_HEADER_BYTES + (size_t)W * ENTRY_BYTES;
    table = calloc(1, tlen);
    if (table == NULL) {
        cnet_fmt(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }
    struct msg head = {RDV_MAGIC, RDV_VERSION, RDV_TABLE, (uint32_t)W, 0, 0};
    msg_encode(table, &head);
    for (int k = 0; k < W; k++) {
        unsigned char *e = table + RDV_HEADER_BYTES + (size_t)k * ENTRY_BYTES;
        memcpy(e, peers[k].host, RDV_HOST_MAX);
        put_u32(e + RDV_HOST_MAX, (uint32_t)peers[k].port);
    }
    for (int k = 1; k < W; k++) {
        int e = 0;
        cnet_set_io_timeout(conns[k], cnet_remaining_ms(deadline));
        if (cnet_send(conns[k], table, tlen, NULL, 0, &e) != IO_OK) {
            cnet_fmt(err, errlen, "rendezvous: cannot send the table to rank %d", k);
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
    gate_close(&g);
    if (lfd >= 0)
        close(lfd);
    free(conns);
    free(table);
    return st;
}

/*
 * Other ranks: register with rank 0 and receive the table. A listener that cannot
 * prove the secret is left, and MASTER_PORT dialled again until the deadline.
 */
static comm_status rendezvous_join(const comm_config *cfg, int timeout_ms, double deadline,
                                   rdv_peer *peers, int *ring_lfd, char *err, size_t errlen)
{
    comm_status st = COMM_ESETUP;
    int W = cfg->world, e = 0, fd = -1;
    bool refused = false;
    char why[160], refusal[160] = "";
    unsigned char *table = NULL;
    for (;;) {
        fd = dial(cfg->master_addr, cfg->master_port, deadline, true, why, sizeof why);
        if (fd < 0) {
            if (refusal[0] != '\0')
                cnet_fmt(err, errlen, "rendezvous: rank 0 at %s:%d %s", cfg->master_addr,
                         cfg->master_port, refusal);
            else
                cnet_fmt(err, errlen, "rendezvous: %s", why);
            goto out;
        }
        if (*ring_lfd < 0) {
            struct sockaddr_storage me;
            socklen_t mel = sizeof me;
            if (getsockname(fd, (struct sockaddr *)&me, &mel) != 0) {
                cnet_fmt(err, errlen, "rendezvous: getsockname: %s", cnet_errno_text(errno));
                goto out;
            }
            *ring_lfd = listen_any(me.ss_family, 0, false, &peers[cfg->rank].port, err, errlen);
            if (*ring_lfd < 0)
                goto out;
        }
        /* Rank 0 may be busy with other connections: its challenge may take a while. */
        cnet_set_io_timeout(fd, cnet_remaining_ms(deadline));
        char now[160];
        int hs = hs_dial(fd, cfg, RDV_REGISTER, (uint32_t)peers[cfg->rank].port, 0, deadline, now,
                         sizeof now);
        if (hs == 0)
            break;
        /* A failed proof says more than a connection that ended before the handshake. */
        if (hs == HS_REFUSED || !refused)
            cnet_fmt(refusal, sizeof refusal, "%s", now);
        refused = refused || hs == HS_REFUSED;
        close(fd);
        fd = -1;
        int left = cnet_remaining_ms(deadline);
        if (left == 0) {
            cnet_fmt(err, errlen, "rendezvous: rank 0 at %s:%d %s", cfg->master_addr,
                     cfg->master_port, refusal);
            goto out;
        }
        cnet_sleep_ms(left < REDIAL_MS ? left : REDIAL_MS);
    }
    /* Rank 0 answers once every rank has joined. */
    cnet_set_io_timeout(fd, cnet_remaining_ms(deadline));
    unsigned char b[RDV_HEADER_BYTES];
    struct msg m;
    enum io io = cnet_recv(fd, b, sizeof b, &e);
    if (io != IO_OK) {
        cnet_fmt(err, errlen, "rendezvous: no table from rank 0 at %s:%d within %d ms (%s)",
                 cfg->master_addr, cfg->master_port, timeout_ms,
                 io == IO_TIMEOUT  ? "timed out"
                 : io == IO_CLOSED ? "connection closed"
                                   : cnet_errno_text(e));
        goto out;
    }
    msg_decode(&m, b);
    if (m.magic != RDV_MAGIC || m.version != RDV_VERSION) {
        cnet_fmt(err, errlen, "rendezvous: %s:%d does not speak this protocol (version %u)",
                 cfg->master_addr, cfg->master_port, m.version);
        goto out;
    }
    if (m.kind == RDV_REJECT) {
        char text[REJECT_TEXT_MAX];
        if (cnet_recv(fd, text, sizeof text, &e) != IO_OK)
            cnet_fmt(text, sizeof text, "no reason given");
        text[sizeof text - 1] = '\0';
        cnet_fmt(err, errlen, "rendezvous: rank 0 refused: %s", text);
        goto out;
    }
    if (m.kind != RDV_TABLE || m.world != (uint32_t)W) {
        cnet_fmt(err, errlen, "rendezvous: unexpected answer from rank 0 (kind %u, world %u)",
                 m.kind, m.world);
        goto out;
    }
    size_t tlen = (size_t)W * ENTRY_BYTES;
    table = malloc(tlen);
    if (table == NULL) {
        cnet_fmt(err, errlen, "out of memory");
        st = COMM_ENOMEM;
        goto out;
    }
    if (cnet_recv(fd, table, tlen, &e) != IO_OK) {
        cnet_fmt(err, errlen, "rendezvous: truncated table from rank 0");
        goto out;
    }
    for (int k = 0; k < W; k++) {
        const unsigned char *ent = table + (size_t)k * ENTRY_BYTES;
        memcpy(peers[k].host, ent, RDV_HOST_MAX);
        peers[k].host[RDV_HOST_MAX - 1] = '\0';
        uint32_t port = get_u32(ent + RDV_HOST_MAX);
        if (port == 0 || port > 65535) {
            cnet_fmt(err, errlen, "rendezvous: bad port %u for rank %d in the table", port, k);
            goto out;
        }
        peers[k].port = (int)port;
    }
    st = COMM_OK;
out:
    if (fd >= 0)
        close(fd);
    free(table);
    return st;
}

/* ------------------------------------------------------------------- ring */

/* The connection to the ring successor, made on its own thread (see the top). */
struct ring_dial {
    const comm_config *cfg;
    const rdv_peer *peer;
    int next;
    double deadline;
    int fd;
    comm_status st;
    char err[256];
};

static void *ring_dial_main(void *arg)
{
    struct ring_dial *d = arg;
    char why[160];
    d->fd = dial(d->peer->host, d->peer->port, d->deadline, true, why, sizeof why);
    if (d->fd < 0) {
        cnet_fmt(d->err, sizeof d->err, "ring: cannot reach rank %d: %s", d->next, why);
        return NULL;
    }
    cnet_set_io_timeout(d->fd, cnet_remaining_ms(d->deadline));
    if (hs_dial(d->fd, d->cfg, RDV_RING, 0, d->next, d->deadline, why, sizeof why) != 0) {
        cnet_fmt(d->err, sizeof d->err, "ring: rank %d (%s:%d) %s", d->next, d->peer->host,
                 d->peer->port, why);
        close(d->fd);
        d->fd = -1;
        return NULL;
    }
    d->st = COMM_OK;
    return NULL;
}

/* Connects to the successor and accepts the predecessor, both proving the secret. */
static comm_status ring_connect(const comm_config *cfg, int timeout_ms, const rdv_peer *peers,
                                int lfd, double deadline, int *send_fd, int *recv_fd, char *err,
                                size_t errlen)
{
    int W = cfg->world, next = (cfg->rank + 1) % W, prev = (cfg->rank + W - 1) % W;
    struct ring_dial d = {cfg, &peers[next], next, deadline, -1, COMM_ESETUP, ""};
    pthread_t dialer;
    comm_status st = COMM_ESETUP;
    struct gate g;
    if (gate_open(&g, cfg, lfd, RDV_RING) != COMM_OK) {
        cnet_fmt(err, errlen, "out of memory");
        return COMM_ENOMEM;
    }
    if (pthread_create(&dialer, NULL, ring_dial_main, &d) != 0) {
        gate_close(&g);
        cnet_fmt(err, errlen, "ring: cannot start a thread");
        return COMM_ENOMEM;
    }
    struct sockaddr_storage sa;
    socklen_t salen;
    struct msg peer;
    int fd = gate_next(&g, deadline, &peer, &sa, &salen);
    int refused = g.refused;
    gate_close(&g);
    pthread_join(dialer, NULL);
    if (fd < 0) {
        char more[96];
        refused_text(refused, more, sizeof more);
        cnet_fmt(err, errlen, "ring: rank %d (%s) did not connect within %d ms%s", prev,
                 peers[prev].host, timeout_ms, more);
        goto out;
    }
    if (peer.world != (uint32_t)W || peer.rank != (uint32_t)prev) {
        cnet_fmt(err, errlen, "ring: expected rank %d of %d, got rank %u of %u", prev, W, peer.rank,
                 peer.world);
        goto out;
    }
    if (d.st != COMM_OK) {
        cnet_fmt(err, errlen, "%s", d.err);
        goto out;
    }
    *send_fd = d.fd;
    *recv_fd = fd;
    d.fd = fd = -1;
    st = COMM_OK;
out:
    if (fd >= 0)
        close(fd);
    if (d.fd >= 0)
        close(d.fd);
    return st;
}

comm_status rdv_form_ring(const comm_config *cfg, int timeout_ms, double deadline, rdv_peer *peers,
                          int *send_fd, int *recv_fd, char *err, size_t errlen)
{
    int ring_lfd = -1;
    *send_fd = *recv_fd = -1;
    comm_status st =
        cfg->rank == 0 ? rendezvous_root(cfg, timeout_ms, deadline, peers, &ring_lfd, err, errlen)
                       : rendezvous_join(cfg, timeout_ms, deadline, peers, &ring_lfd, err, errlen);
    if (st == COMM_OK)
        st =
            ring_connect(cfg, timeout_ms, peers, ring_lfd, deadline, send_fd, recv_fd, err, errlen);
    if (ring_lfd >= 0)
        close(ring_lfd);
    return st;
}
