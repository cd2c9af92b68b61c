/*
 * http.c - libmicrohttpd wiring: lifecycle, routing, auth, bodies, logs, metrics.
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION with an
 * internal accept thread). Handlers block: a submission waits for the store's
 * group commit, and the more requests wait on one commit the more a single
 * fsync pays for. With a fixed pool of event-loop threads (epoll) a blocked
 * handler blocks every connection of its thread, so at most pool-size requests
 * could be in flight and group commit would degrade to a few jobs per fsync;
 * suspending connections would need an asynchronous store API. So each
 * connection gets a thread, bounded by the connection limit. A thread that
 * waits for a slow client costs little: measured with 1,100 slow-header
 * connections held, the server ran 1,107 threads in 33 MiB RSS (13 MiB
 * before; the stacks are virtual), and /healthz and submissions kept their
 * latency. So slow clients are bounded by limits and a deadline rather than
 * by a different threading model.
 *
 * Slow and hostile clients:
 *   admission    the accept policy (on_accept) refuses a connection when its
 *                address holds per_ip_limit connections, when connection_limit
 *                connections are open, or when fewer than `reserve` slots are
 *                left and its address already holds RESERVE_PER_IP: the
 *                reserve keeps room for a health check or a scraper during a
 *                flood from addresses that each stay under their limit. A
 *                connection admitted into the reserve is served only the
 *                operations routes, with Connection: close. The counts live
 *                here (conns_mu), updated by MHD_OPTION_NOTIFY_CONNECTION;
 *                the accept policy, the notifications and libmicrohttpd's
 *                own limit checks all run on its accept thread, in order.
 *                libmicrohttpd's own limit is set above ours, so that it keeps
 *                accepting (and we refuse at once, counted) instead of leaving
 *                connections in the backlog.
 *   deadline     a watchdog thread shuts down (shutdown(2)) each connection
 *                whose current request has not been received whole within
 *                request_deadline_ms of the connection becoming ready for it
 *                (accepted, or its previous response completed). libmicrohttpd's
 *                own timeout only measures inactivity, which a client sending a
 *                byte now and then resets. The deadline stands still while the
 *                server makes the request wait (for a large-body slot), and
 *                once the request has arrived (the handler may wait for a
 *                commit, a stream may last hours). A connection whose request
 *                line arrived, or that received bytes since it became ready,
 *                gets a 408 first; an idle one is simply closed.
 *   answers      errors are problem+json. 414 and 431 (our limits, below
 *                libmicrohttpd's memory per connection) and the answer to a
 *                body that cannot be read to its end are written straight to
 *                the socket, which then closes: building a response in
 *                libmicrohttpd's pool fails when the headers filled it, and
 *                such requests used to be dropped without an answer. So are
 *                refusals of a request's framing, whose connection must close
 *                before anything after its headers is read. Before a
 *                connection with unread input is closed, it is half-closed and
 *                drained for a bounded time (a "lingering close"): closing a
 *                socket with unread data resets the connection, and the reset
 *                can destroy the answer before the client has read it.
 *
 * Request lifecycle, as libmicrohttpd's doc/examples/largepost.c:
 *   1st call     allocate req_state (freed in on_completed), check the request
 *                target and header sizes (414/431, answered at once), the
 *                framing (400/501, answered at once: http_check_framing(), the
 *                fields as received, before auth reads a header), route,
 *                authenticate, check a declared Content-Length against
 *                max_body. Another error found here is answered at once only
 *                when the client waits for "100 Continue" (no body comes);
 *                otherwise the body is read and dropped and the error answered
 *                on the final call, so that a client still writing its body
 *                reads the answer instead of a reset connection.
 *   body calls   append to a ty_buf capped at max_body; past the cap the rest
 *                is read and dropped (libmicrohttpd cannot answer in the
 *                middle of a body) and the answer is 413 on the final call;
 *                when more than DISCARD_MAX bytes would have to be dropped
 *                the answer is written at once and the connection closed with
 *                a lingering close.
 *                A body above large_body (declared, or grown past it) first
 *                takes one of large_slots slots, waiting for one if needed:
 *                handling a body costs many times its size in memory, so the
 *                slots bound the peak under concurrent batches.
 *   final call   call the handler, queue its response.
 *   completed    count the request, write its log line, free the state.
 *
 * A streamed response (api_stream, e.g. a log that is followed) is sent with
 * chunked encoding, read block by block from the connection's thread while it
 * is sent; it may block there, which costs only that connection. Its request
 * completes when the stream has ended, so the log line comes then, with the
 * bytes sent; the duration histogram gets the time until the response began,
 * since a followed log may last hours and would drown the latency of every
 * other request.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_hash.h"
#include "common/ty_log.h"
#include "common/ty_mem.h"
#include "common/ty_thread.h"
#include "common/ty_time.h"
#include "server/reqlog.h"
#include "server/router.h"

#define DEFAULT_CONNECTION_LIMIT 1024
#define MIN_CONNECTION_LIMIT 16
#define DEFAULT_PER_IP_LIMIT 64
#define DEFAULT_REQUEST_DEADLINE_MS 30000
#define DEFAULT_CONNECTION_TIMEOUT_S 60
/* The reserve: connection_limit / RESERVE_DIV slots, 1..RESERVE_MAX. */
#define RESERVE_DIV 16
#define RESERVE_MAX 64
/*
 * Connections an address may hold when admitted into the reserve: more than
 * one, as a client's previous connection (closed after its answer) may not
 * have been cleaned up yet when it connects again.
 */
#define RESERVE_PER_IP 2
/* The watchdog looks at the connections this often at most (and at least every deadline/4). */
#define WATCHDOG_TICK_MS 250
/* Receive-clock granularity allowed when telling an idle connection from a partial request. */
#define IDLE_SLACK_MS 20
/* A lingering close reads and drops at most this much, for at most this long. */
#define LINGER_BYTES ((size_t)8 << 20)
#define LINGER_MS 2000
/* libmicrohttpd messages written to the log per window; the rest are counted. */
#define LOG_BURST 20
#define LOG_WINDOW_NS (60ull * 1000000000ull)
#define LISTEN_BACKLOG 1024
/* Body bytes read and dropped past max_body before the connection is closed instead. */
#define DISCARD_MAX ((size_t)8 << 20)
#define DEFAULT_LARGE_BODY ((size_t)64 << 10)
#define DEFAULT_LARGE_SLOTS 2
#define DEFAULT_LARGE_WAIT_MS 30000
/* An incoming X-Request-Id is echoed when it is 1..64 characters of this set. */
#define REQUEST_ID_MAX 64
#define TOO_LARGE_DETAIL "the request body is larger than the server accepts"
#define BUSY_DETAIL "too many large requests at once; retry later"
#define RESERVE_DETAIL                                                                          \
    "the server is at its connection limit; this connection is served only /healthz, /readyz " \
    "and /metrics"
#define DEADLINE_DETAIL "the request was not received in time"
#define URI_DETAIL "the request target is longer than the server accepts (8192 bytes)"
#define REQUEST_ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
/* Header fields checked without an allocation (more are allocated). */
#define FIELDS_ON_STACK 32
/* The problem code of a request refused for its framing (400). */
#define MALFORMED "malformed-request"
#define TARGET_DETAIL "the request target holds a space or a control character"
/* Bytes asked of a stream at a time (the chunk size on the wire at most). */
#define STREAM_BLOCK ((size_t)32 << 10)

/* Reasons a connection was refused or cut: the label values of the metric. */
static const char *const refuse_reasons[] = {"per_ip_limit", "total_limit", "deadline",
                                             "idle_timeout"};
enum { REFUSED_PER_IP, REFUSED_TOTAL, REFUSED_DEADLINE, REFUSED_IDLE, REFUSED_NREASONS };

/*
 * One open connection, from MHD_CONNECTION_NOTIFY_STARTED to ..._CLOSED (its
 * socket context). Fields below `next` are guarded by the server's conns_mu.
 */
typedef struct conn_state {
    struct conn_state *prev, *next;  /* in srv->conns */
    int fd;                          /* libmicrohttpd's socket; open until after CLOSED */
    unsigned char ip[16];            /* client address; IPv4 as ::ffff:a.b.c.d */
    int reserve;                     /* admitted into the reserve: operations routes only */
    int started;                     /* the request line of its current request arrived */
    int received;                    /* its current request arrived whole: no deadline */
    int cut;                         /* shut down by the watchdog */
    int ip_released;                 /* no longer counted for its address (closing) */
    uint64_t ready_ns;               /* ready for its current request (monotonic clock) */
    uint64_t grace_ns;               /* time the server made the current request wait */
    uint64_t wait_ns;                /* the server makes it wait since then; 0 = not */
} conn_state;

/* Connections per client address: open addressing, linear probing; count 0 = empty. */
typedef struct ip_slot {
    unsigned char ip[16];
    unsigned count;
} ip_slot;

struct http_server {
    struct MHD_Daemon *daemon;
    int listen_fd;                   /* the bound socket until the daemon has its copy */
    unsigned port;
    const api_ctx *ctx;
    auth_cache *auth;
    const api_route *routes;
    size_t nroutes;
    unsigned connection_limit;
    unsigned per_ip_limit;
    unsigned reserve;                /* the last slots of connection_limit (see the top) */
    uint64_t deadline_ns;
    unsigned connection_timeout_s;
    pthread_mutex_t conns_mu;        /* guards conns, nconns, ips, wd_stop */
    pthread_cond_t wd_cv;            /* wakes the watchdog to stop (monotonic clock) */
    conn_state *conns;               /* open connections */
    unsigned nconns;
    ip_slot *ips;
    size_t ips_mask;                 /* capacity - 1, a power of two above 2 * connection_limit */
    pthread_t watchdog;
    int wd_running;
    int wd_stop;
    ty_counter_vec refused;          /* {reason}: connections refused or cut */
    pthread_mutex_t log_mu;          /* guards the four below */
    uint64_t log_window_ns;          /* start of the current log window */
    unsigned log_written;            /* messages written in it */
    unsigned long log_suppressed;    /* messages dropped in it */
    size_t large_body;
    unsigned large_wait_ms;
    pthread_mutex_t large_mu;        /* guards large_free */
    pthread_cond_t large_cv;
    unsigned large_free;             /* slots for large bodies not taken */
    int stopped;
    atomic_long inflight;            /* requests between the 1st call and on_completed */
    atomic_int draining;             /* responses carry Connection: close */
    atomic_int stopping;             /* past the drain: streams still running are cut */
    char rid_prefix[17];             /* random per process, so ids differ across restarts */
    atomic_uint_fast64_t rid_counter;
    char start_error[256];           /* the last libmicrohttpd message while starting */
    atomic_int starting;             /* MHD_start_daemon() is running (single-threaded) */
};

/*
 * A streamed body in flight, shared by the libmicrohttpd response (which reads
 * it and, when the response is destroyed, frees the api_stream) and the
 * request state (which reads the byte count for the log line); the last of
 * the two to let go frees it. Both run on the connection's thread, but their
 * order differs between a completed and an aborted request.
 */
typedef struct stream_state {
    api_stream s;
    http_server *srv;
    atomic_size_t bytes;             /* sent so far */
    atomic_int refs;
} stream_state;

typedef struct req_state {
    uint64_t start_ns;
    char method[16];                 /* copied: logged after libmicrohttpd may reuse its memory */
    char *path;                      /* copy of the decoded path, for the log line */
    router_result rr;
    router_match match;
    char *principal;                 /* token name, NULL on open routes */
    unsigned scopes;
    char *team;                      /* the token's team; NULL for a job token and open routes */
    char request_id[REQUEST_ID_MAX + 1];
    ty_buf body;
    int too_large;                   /* the body passed max_body; the rest is dropped */
    int oom;                         /* the body could not be buffered */
    size_t discarded;                /* body bytes read and dropped after too_large or oom */
    int large;                       /* holds a large-body slot (released in on_completed) */
    int busy;                        /* no large-body slot in time: the answer is 503 */
    int replied;                     /* a response has been queued (or written, see raw) */
    int raw;                         /* the answer was written to the socket, which closes */
    int discard;                     /* err decided on the 1st call: the body is read and dropped */
    conn_state *conn;                /* the connection's state, or NULL */
    struct {                         /* an answer decided on the first call; status 0 = none */
        unsigned status;
        const char *code, *detail;   /* static strings */
        const char *hkey, *hval;     /* extra header or NULL; hval static or in match */
    } err;
    unsigned status;
    size_t bytes;                    /* response body bytes; a stream counts its own */
    stream_state *stream;            /* the streamed body, or NULL */
    uint64_t head_ns;                /* when a streamed response was queued */
    api_kv *query;
    size_t nquery, query_cap;
} req_state;

static void stream_unref(stream_state *ss)
{
    if (ss && atomic_fetch_sub(&ss->refs, 1) == 1)
        free(ss);
}

/* libmicrohttpd's content reader: one block of the stream. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_state *ss = cls;
    (void)pos;
    /* Shutdown is past its drain deadline: end what is still being sent. */
    if (atomic_load(&ss->srv->stopping))
        return MHD_CONTENT_READER_END_WITH_ERROR;
    long n = ss->s.read(ss->s.ud, buf, max);
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0 || (size_t)n > max)
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the client sees a cut-off chunked body */
    atomic_fetch_add(&ss->bytes, (size_t)n);
    return (ssize_t)n;
}

/* Called once when libmicrohttpd destroys the response. */
static void stream_done(void *cls)
{
    stream_state *ss = cls;
    if (ss->s.free)
        ss->s.free(ss->s.ud);
    stream_unref(ss);
}

static void req_state_free(req_state *st)
{
    if (!st)
        return;
    stream_unref(st->stream);
    free(st->path);
    free(st->principal);
    free(st->team);
    free(st->query);
    ty_buf_free(&st->body);
    free(st);
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_server *srv = cls;
    char msg[256];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (n < 0)
        return;
    size_t len = strlen(msg);
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        msg[--len] = '\0';
    if (atomic_load(&srv->starting)) {
        memcpy(srv->start_error, msg, len + 1);
        TY_LOG(TY_LOG_WARN, "http", "{s:s}", "detail", msg);
        return;
    }
    /* Our own doing: a deliberate close after an answer written to the socket. */
    if (strncmp(msg, "Application reported internal error", 35) == 0) {
        TY_LOG(TY_LOG_DEBUG, "http", "{s:s}", "detail", msg);
        return;
    }
    /*
     * Every other message may come once per connection (a client's error, a
     * limit): a flood of clients must not flood the log. LOG_BURST messages
     * per window are written, the rest counted and summed up once.
     */
    unsigned long dropped = 0;
    int write = 0;
    uint64_t now = ty_time_mono_ns();
    pthread_mutex_lock(&srv->log_mu);
    if (now - srv->log_window_ns >= LOG_WINDOW_NS) {
        dropped = srv->log_suppressed;
        srv->log_suppressed = 0;
        srv->log_written = 0;
        srv->log_window_ns = now;
    }
    if (srv->log_written < LOG_BURST) {
        srv->log_written++;
        write = 1;
    } else {
        srv->log_suppressed++;
    }
    pthread_mutex_unlock(&srv->log_mu);
    if (dropped)
        TY_LOG(TY_LOG_WARN, "http messages suppressed", "{s:I, s:i}", "count",
               (json_int_t)dropped, "window_s", (int)(LOG_WINDOW_NS / 1000000000ull));
    if (write)
        TY_LOG(TY_LOG_WARN, "http", "{s:s}", "detail", msg);
}

/* ---- connections: admission, the request deadline, raw answers ----------- */

static size_t ip_hash(const unsigned char *ip)
{
    uint64_t h = ty_fnv1a(TY_FNV1A_INIT, ip, 16);
    return (size_t)(h ^ (h >> 29));
}

static void ip_from_sockaddr(const struct sockaddr *sa, unsigned char *ip)
{
    memset(ip, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        ip[10] = 0xff;
        ip[11] = 0xff;
        memcpy(ip + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

/* The slot of ip, or the empty slot where it would go. Under conns_mu. */
static ip_slot *ip_slot_of(http_server *srv, const unsigned char *ip)
{
    size_t i = ip_hash(ip) & srv->ips_mask;
    while (srv->ips[i].count && memcmp(srv->ips[i].ip, ip, 16) != 0)
        i = (i + 1) & srv->ips_mask;
    return &srv->ips[i];
}

/* Drops one connection of ip; an emptied slot is filled by backward shifting. Under conns_mu. */
static void ip_release(http_server *srv, const unsigned char *ip)
{
    ip_slot *s = ip_slot_of(srv, ip);
    if (!s->count || --s->count)
        return;
    size_t i = (size_t)(s - srv->ips), j = i;
    for (;;) {
        j = (j + 1) & srv->ips_mask;
        if (!srv->ips[j].count)
            break;
        size_t k = ip_hash(srv->ips[j].ip) & srv->ips_mask;
        /* The entry at j stays when its home k lies cyclically in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            srv->ips[i] = srv->ips[j];
            srv->ips[j].count = 0;
            i = j;
        }
    }
}

static void count_refused(http_server *srv, int reason)
{
    ty_counter_vec_add(&srv->refused, refuse_reasons[reason], NULL, 1);
}

/* MHD's accept policy: admission by address and in total (see the top of the file). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *srv = cls;
    unsigned char ip[16];
    int reason = -1;
    (void)addrlen;
    ip_from_sockaddr(addr, ip);
    pthread_mutex_lock(&srv->conns_mu);
    unsigned held = ip_slot_of(srv, ip)->count;
    if (held >= srv->per_ip_limit)
        reason = REFUSED_PER_IP;
    else if (srv->nconns >= srv->connection_limit ||
             (srv->nconns >= srv->connection_limit - srv->reserve && held >= RESERVE_PER_IP))
        reason = REFUSED_TOTAL;
    pthread_mutex_unlock(&srv->conns_mu);
    if (reason < 0)
        return MHD_YES;
    count_refused(srv, reason);
    return MHD_NO;
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every open connection. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(
            c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(
            c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn_state *cs = calloc(1, sizeof *cs);
        if (!cs || !fi) {
            /* Untracked, it would escape the deadline and the limits: refuse it. */
            if (fi)
                shutdown(fi->connect_fd, SHUT_RDWR);
            free(cs);
            *socket_context = NULL;
            return;
        }
        cs->fd = fi->connect_fd;
        ip_from_sockaddr(ai ? ai->client_addr : NULL, cs->ip);
        cs->ready_ns = ty_time_mono_ns();
        pthread_mutex_lock(&srv->conns_mu);
        ip_slot *s = ip_slot_of(srv, cs->ip);
        if (!s->count)
            memcpy(s->ip, cs->ip, 16);
        s->count++;
        cs->reserve = srv->nconns >= srv->connection_limit - srv->reserve;
        srv->nconns++;
        cs->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = cs;
        srv->conns = cs;
        pthread_mutex_unlock(&srv->conns_mu);
        *socket_context = cs;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_state *cs = *socket_context;
        if (!cs)
            return;
        *socket_context = NULL;
        pthread_mutex_lock(&srv->conns_mu);
        if (cs->prev)
            cs->prev->next = cs->next;
        else
            srv->conns = cs->next;
        if (cs->next)
            cs->next->prev = cs->prev;
        if (!cs->ip_released)
            ip_release(srv, cs->ip);
        srv->nconns--;
        pthread_mutex_unlock(&srv->conns_mu);
        free(cs);
    }
}

static conn_state *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (conn_state *)ci->socket_context : NULL;
}

/*
 * The request on cs arrived whole (or is answered now): the deadline no longer
 * applies to it. 0 when the watchdog cut the connection first.
 */
static int conn_received(http_server *srv, conn_state *cs)
{
    int ok = 1;
    if (!cs)
        return 1;
    pthread_mutex_lock(&srv->conns_mu);
    if (cs->cut)
        ok = 0;
    else
        cs->received = 1;
    pthread_mutex_unlock(&srv->conns_mu);
    return ok;
}

/*
 * The response to the request on cs completed: the deadline runs for the
 * next one. A connection in the reserve closes now (its answers carry
 * Connection: close), so its address stops counting it at once: a client
 * that connects again right away must not find its old connection in the
 * way (the close itself is noticed a little later).
 */
static void conn_ready(http_server *srv, conn_state *cs)
{
    if (!cs)
        return;
    pthread_mutex_lock(&srv->conns_mu);
    if (cs->reserve && !cs->ip_released) {
        ip_release(srv, cs->ip);
        cs->ip_released = 1;
    }
    cs->received = 0;
    cs->started = 0;
    cs->grace_ns = 0;
    cs->wait_ns = 0;
    cs->ready_ns = ty_time_mono_ns();
    pthread_mutex_unlock(&srv->conns_mu);
}

/*
 * The server makes the request on cs wait (begin = 1) or is done with it
 * (begin = 0): the deadline stands still meanwhile, and the time waited is
 * added to it.
 */
static void conn_wait(http_server *srv, conn_state *cs, int begin)
{
    if (!cs)
        return;
    uint64_t now = ty_time_mono_ns();
    pthread_mutex_lock(&srv->conns_mu);
    if (begin) {
        cs->wait_ns = now;
    } else if (cs->wait_ns) {
        cs->grace_ns += now - cs->wait_ns;
        cs->wait_ns = 0;
    }
    pthread_mutex_unlock(&srv->conns_mu);
}

/*
 * Writes a whole problem+json answer straight to the socket, ahead of
 * anything libmicrohttpd would write (it must not write on fd afterwards:
 * the caller closes the connection). Best effort and non-blocking: a socket
 * whose buffer cannot take it now loses the answer, and the close follows.
 */
static void raw_problem(int fd, unsigned status, const char *code, const char *detail,
                        const char *hkey, const char *hval, const char *request_id)
{
    api_resp r;
    char head[768];
    memset(&r, 0, sizeof r);
    api_reply_problem(&r, status, code, NULL, detail, NULL);
    const char *reason = MHD_get_reason_phrase_for(r.status);
    int extra = hkey && hval && r.status == status;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/problem+json\r\n"
                     "Content-Length: %zu\r\nX-Request-Id: %s\r\n%s%s%s%s"
                     "Connection: close\r\n\r\n",
                     r.status, reason && *reason ? reason : "Error", r.body ? r.body_len : 0,
                     request_id, extra ? hkey : "", extra ? ": " : "", extra ? hval : "",
                     extra ? "\r\n" : "");
    if (n > 0 && (size_t)n < sizeof head) {
        struct iovec iov[2] = {{head, (size_t)n}, {r.body, r.body ? r.body_len : 0}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        (void)sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    api_resp_free(&r);
}

/*
 * A lingering close, before the caller closes fd with input maybe unread:
 * half-closes it (the client sees the answer end) and reads and drops what
 * the client still sends until it closes its side, LINGER_BYTES were
 * dropped, or LINGER_MS passed.
 */
static void linger_drain(int fd)
{
    char buf[16384];
    size_t total = 0;
    uint64_t end = ty_time_mono_ns() + (uint64_t)LINGER_MS * 1000000u;
    shutdown(fd, SHUT_WR);
    while (total < LINGER_BYTES) {
        uint64_t now = ty_time_mono_ns();
        if (now >= end)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)((end - now) / 1000000u) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            break;
        }
        total += (size_t)n;
    }
}

/*
 * The watchdog's verdict on a connection past its deadline (under conns_mu):
 * a 408 when a request is in progress (its request line arrived, or bytes
 * arrived since the connection became ready), nothing for an idle one; then
 * both directions are shut down, and libmicrohttpd, seeing the socket end,
 * closes the connection.
 */
static void cut_connection(http_server *srv, conn_state *cs, uint64_t now)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    uint64_t waited_ms = (now - cs->ready_ns) / 1000000u;
    int partial = 1;
    memset(&ti, 0, sizeof ti);
    if (!cs->started && getsockopt(cs->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        (uint64_t)ti.tcpi_last_data_recv + IDLE_SLACK_MS >= waited_ms)
        partial = 0;
    if (partial) {
        char rid[REQUEST_ID_MAX + 1];
        uint64_t k = atomic_fetch_add(&srv->rid_counter, 1);
        snprintf(rid, sizeof rid, "%s-%08" PRIx64, srv->rid_prefix, k);
        raw_problem(cs->fd, 408, "request-timeout", DEADLINE_DETAIL, NULL, NULL, rid);
    }
    shutdown(cs->fd, SHUT_RDWR);
    cs->cut = 1;
    count_refused(srv, partial ? REFUSED_DEADLINE : REFUSED_IDLE);
}

static void *watchdog_main(void *arg)
{
    ty_thread_name("ty-http-watch");
    http_server *srv = arg;
    uint64_t tick_ns = srv->deadline_ns / 4;
    if (tick_ns > (uint64_t)WATCHDOG_TICK_MS * 1000000u)
        tick_ns = (uint64_t)WATCHDOG_TICK_MS * 1000000u;
    pthread_mutex_lock(&srv->conns_mu);
    while (!srv->wd_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(tick_ns % 1000000000u);
        until.tv_sec += (time_t)(tick_ns / 1000000000u) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&srv->wd_cv, &srv->conns_mu, &until);
        if (srv->wd_stop)
            break;
        uint64_t now = ty_time_mono_ns();
        for (conn_state *cs = srv->conns; cs; cs = cs->next)
            if (!cs->received && !cs->cut && !cs->wait_ns &&
                now - cs->ready_ns > srv->deadline_ns + cs->grace_ns)
                cut_connection(srv, cs, now);
    }
    pthread_mutex_unlock(&srv->conns_mu);
    return NULL;
}

/* Appends the listener's families to a /metrics body (api/ renders the rest). */
static void append_listener_metrics(http_server *srv, api_resp *r)
{
    ty_buf b = {0};
    pthread_mutex_lock(&srv->conns_mu);
    unsigned open = srv->nconns;
    pthread_mutex_unlock(&srv->conns_mu);
    ty_err e = ty_buf_append(&b, r->body, r->body_len);
    if (!e)
        e = ty_metrics_render_header(&b, "trainyard_http_connections_refused_total", "counter",
                                     "Connections the listener refused or cut, by reason.");
    if (!e)
        e = ty_metrics_render_counter_vec(&b, "trainyard_http_connections_refused_total",
                                          "reason", NULL, &srv->refused);
    if (!e)
        e = ty_metrics_render_header(&b, "trainyard_http_connections", "gauge",
                                     "Connections open now.");
    if (!e)
        e = ty_buf_printf(&b, "trainyard_http_connections %u\n", open);
    if (!e) {
        char *body = NULL;
        size_t len = 0;
        if (ty_buf_steal(&b, &body, &len) == TY_OK) {
            free(r->body);
            r->body = body;
            r->body_len = len;
        }
    }
    ty_buf_free(&b);
}

static void make_request_id(http_server *srv, struct MHD_Connection *c, char *out)
{
    const char *in = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    if (in) {
        size_t n = strlen(in);
        if (n > 0 && n <= REQUEST_ID_MAX && strspn(in, REQUEST_ID_CHARS) == n) {
            memcpy(out, in, n + 1);
            return;
        }
    }
    uint64_t k = atomic_fetch_add(&srv->rid_counter, 1);
    snprintf(out, REQUEST_ID_MAX + 1, "%s-%08" PRIx64, srv->rid_prefix, k);
}

/* Queues r (consumed) with the common headers. */
static enum MHD_Result send_resp(http_server *srv, struct MHD_Connection *c, req_state *st,
                                 api_resp *r)
{
    struct MHD_Response *mr = NULL;
    stream_state *ss = NULL;
    enum MHD_Result ret = MHD_NO;
    size_t len = r->body ? r->body_len : 0;

    if (r->stream.read) {
        ss = calloc(1, sizeof *ss);
        if (!ss)
            goto out; /* api_resp_free() frees the stream */
        ss->s = r->stream;
        ss->srv = srv;
        atomic_init(&ss->bytes, 0);
        atomic_init(&ss->refs, 1); /* the response's */
        /* Size unknown: chunked in HTTP/1.1; an HTTP/1.0 client sees the connection close. */
        mr = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, ss,
                                               stream_done);
        if (!mr) {
            free(ss);
            ss = NULL;
            goto out;
        }
        memset(&r->stream, 0, sizeof r->stream); /* now owned by the response */
    } else if (len) {
        mr = MHD_create_response_from_buffer_with_free_callback(len, r->body, free);
        if (mr)
            r->body = NULL; /* now owned by the response */
    } else {
        mr = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    }
    if (!mr)
        goto out;
    if (r->content_type && (len || ss))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    MHD_add_response_header(mr, "X-Request-Id", st->request_id);
    for (size_t i = 0; i < r->nheaders; i++)
        if (r->headers[i].key && r->headers[i].value)
            MHD_add_response_header(mr, r->headers[i].key, r->headers[i].value);
    /* A connection in the reserve is not kept: its slot is for the next health check. */
    if (atomic_load(&srv->draining) || (st->conn && st->conn->reserve))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(c, r->status, mr);
    if (ret == MHD_YES) {
        st->replied = 1;
        st->status = r->status;
        st->bytes = len;
        if (ss) {
            /* The connection holds the response: nothing was read from ss yet. */
            atomic_fetch_add(&ss->refs, 1);
            st->stream = ss;
            st->head_ns = ty_time_mono_ns();
        }
    }
    MHD_destroy_response(mr);
out:
    api_resp_free(r);
    return ret;
}

static enum MHD_Result send_problem(http_server *srv, struct MHD_Connection *c, req_state *st,
                                    unsigned status, const char *code, const char *detail,
                                    const char *hkey, const char *hval)
{
    api_resp r;
    memset(&r, 0, sizeof r);
    /* The title is the status's reason phrase (api/ picks it). */
    api_reply_problem(&r, status, code, NULL, detail, NULL);
    if (hkey && r.status == status)
        api_resp_header(&r, hkey, hval);
    return send_resp(srv, c, st, &r);
}

/*
 * The declared Content-Length: 1 and *len when the header holds a number
 * (ULLONG_MAX when it overflows), 0 when absent. libmicrohttpd itself rejects
 * malformed lengths before calling us.
 */
static int declared_length(struct MHD_Connection *c, unsigned long long *len)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (end == cl)
        return 0;
    *len = errno == ERANGE ? ULLONG_MAX : v;
    return 1;
}

/* Takes a large-body slot, waiting up to large_wait_ms. 1 when taken. */
static int large_acquire_wait(http_server *srv)
{
    struct timespec deadline;
    int taken = 0;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += srv->large_wait_ms / 1000;
    deadline.tv_nsec += (long)(srv->large_wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&srv->large_mu);
    while (srv->large_free == 0)
        if (pthread_cond_timedwait(&srv->large_cv, &srv->large_mu, &deadline) != 0)
            break;
    if (srv->large_free > 0) {
        srv->large_free--;
        taken = 1;
    }
    pthread_mutex_unlock(&srv->large_mu);
    return taken;
}

/* large_acquire_wait(), the wait not counted against the request's deadline. */
static int large_acquire(http_server *srv, req_state *st)
{
    conn_wait(srv, st->conn, 1);
    int taken = large_acquire_wait(srv);
    conn_wait(srv, st->conn, 0);
    return taken;
}

static void large_release(http_server *srv)
{
    pthread_mutex_lock(&srv->large_mu);
    srv->large_free++;
    pthread_cond_signal(&srv->large_cv);
    pthread_mutex_unlock(&srv->large_mu);
}

/* 1 when a request body follows the headers (a non-zero length or chunked). */
static int body_follows(struct MHD_Connection *c)
{
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    return te != NULL || (cl != NULL && strspn(cl, "0") != strlen(cl));
}

/* 1 when the client waits for "100 Continue" before it sends the body. */
static int expects_continue(struct MHD_Connection *c, const char *version)
{
    const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return ex && strcasecmp(ex, "100-continue") == 0 &&
           strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
}

static enum MHD_Result add_arg_len(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    size_t *n = cls;
    (void)kind;
    *n += (key ? strlen(key) : 0) + (value ? strlen(value) + 1 : 0) + 1;
    return MHD_YES;
}

/*
 * 414 when the request target (path and query, decoded) is longer than
 * HTTP_URL_MAX (on_uri catches a longer raw target first), 431 when the
 * request line and headers take more than HTTP_HEADERS_MAX bytes, else 0.
 */
static unsigned check_sizes(struct MHD_Connection *c, const char *url)
{
    size_t target = strlen(url);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_arg_len, &target);
    if (target > HTTP_URL_MAX)
        return 414;
    const union MHD_ConnectionInfo *hi = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (hi && hi->header_size > HTTP_HEADERS_MAX)
        return 431;
    return 0;
}

/* ---- framing (RFC 9112 section 6.3) -------------------------------------- */

static http_framing framing_bad(unsigned status, const char *code, const char *detail)
{
    http_framing v = {status, code, detail};
    return v;
}

/* 1 when name (len bytes) equals lit, ASCII case ignored. */
static int name_is(const http_field *f, const char *lit)
{
    size_t n = strlen(lit);
    return f->name_len == n && strncasecmp(f->name, lit, n) == 0;
}

/* RFC 9110 tchar; letters, digits and '-' (nearly every name) first. */
static int is_tchar(unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
        ch == '-')
        return 1;
    return ch && strchr("!#$%&'*+.^_`|~", ch) != NULL;
}

/*
 * The codings of one Transfer-Encoding value, counted: chunked (exactly the
 * word, nothing around it), unknown (any other non-empty element), and
 * malformed (an empty element, or whitespace that libmicrohttpd would keep
 * in the value it compares with "chunked").
 */
static void count_codings(const http_field *f, unsigned *chunked, unsigned *unknown,
                          unsigned *malformed)
{
    size_t i = 0;
    for (;;) {
        size_t start = i;
        while (i < f->value_len && f->value[i] != ',')
            i++;
        size_t b = start, e = i;
        while (b < e && (f->value[b] == ' ' || f->value[b] == '\t'))
            b++;
        while (e > b && (f->value[e - 1] == ' ' || f->value[e - 1] == '\t'))
            e--;
        if (b == e)
            (*malformed)++;
        else if (e - b == 7 && strncasecmp(f->value + b, "chunked", 7) == 0) {
            (*chunked)++;
            if (b != start || e != i)
                (*malformed)++;
        } else
            (*unknown)++;
        if (i >= f->value_len)
            break;
        i++; /* the comma */
    }
}

http_framing http_check_framing(const http_field *fields, size_t n, int http11)
{
    unsigned ncl = 0, nte = 0, nhost = 0, nauth = 0;
    unsigned chunked = 0, unknown = 0, malformed = 0;
    const http_field *cl = NULL;

    for (size_t i = 0; i < n; i++) {
        const http_field *f = &fields[i];
        if (f->cut)
            return framing_bad(400, MALFORMED,
                               "a header line holds a NUL byte or is folded onto the next");
        if (f->name_len == 0)
            return framing_bad(400, MALFORMED, "a header field has an empty name");
        for (size_t k = 0; k < f->name_len; k++)
            if (!is_tchar((unsigned char)f->name[k]))
                return framing_bad(400, MALFORMED,
                                   "a header field name holds whitespace or a character a "
                                   "name may not hold");
        for (size_t k = 0; k < f->value_len; k++) {
            unsigned char ch = (unsigned char)f->value[k];
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return framing_bad(400, MALFORMED,
                                   "a header field value holds a control character (NUL, CR, "
                                   "LF or another)");
        }
        if (name_is(f, "Content-Length")) {
            ncl++;
            cl = f;
        } else if (name_is(f, "Transfer-Encoding")) {
            nte++;
            count_codings(f, &chunked, &unknown, &malformed);
        } else if (name_is(f, "Host")) {
            nhost++;
        } else if (name_is(f, "Authorization")) {
            nauth++;
        }
    }
    if (nte && ncl)
        return framing_bad(400, MALFORMED, "Content-Length and Transfer-Encoding are both present");
    if (ncl > 1)
        return framing_bad(400, MALFORMED, "Content-Length appears more than once");
    if (cl) {
        size_t k = 0;
        while (k < cl->value_len && cl->value[k] >= '0' && cl->value[k] <= '9')
            k++;
        if (k == 0 || k != cl->value_len)
            return framing_bad(400, MALFORMED, "Content-Length is not a decimal number");
    }
    if (nte && !http11)
        return framing_bad(400, MALFORMED, "Transfer-Encoding in an HTTP/1.0 request");
    if (unknown)
        return framing_bad(501, "not-implemented",
                           "the request names a transfer coding the server does not "
                           "implement; only chunked is");
    if (nte && (nte > 1 || chunked != 1 || malformed))
        return framing_bad(400, MALFORMED,
                           "Transfer-Encoding must be chunked, once, and nothing else");
    if (http11 && nhost != 1)
        return framing_bad(400, MALFORMED,
                           nhost ? "Host appears more than once"
                                 : "an HTTP/1.1 request needs a Host header");
    if (nauth > 1)
        return framing_bad(400, MALFORMED, "Authorization appears more than once");
    return framing_bad(0, NULL, NULL);
}

/* The fields of a request, gathered by MHD_get_connection_values_n(). */
typedef struct field_list {
    http_field *f;
    size_t n, cap;
} field_list;

static enum MHD_Result collect_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                     size_t key_size, const char *value, size_t value_size)
{
    field_list *l = cls;
    (void)kind;
    if (l->n < l->cap) {
        http_field *f = &l->f[l->n];
        f->name = key ? key : "";
        f->name_len = key ? key_size : 0;
        f->value = value ? value : "";
        f->value_len = value ? value_size : 0;
        f->cut = 0;
    }
    l->n++;
    return MHD_YES;
}

/*
 * Marks the fields whose line held more than name, colon, blanks, value and
 * line end. libmicrohttpd 0.9.75 parses the header block in place, in one
 * buffer that starts with the request line (at `method`) and spans
 * header_size bytes, and gives a value's length as strlen(): a value is cut
 * at an embedded NUL, and value_len cannot show it. Where the next line
 * starts can: after a whole value come its line end (CRLF or LF, 1 or 2
 * bytes), then the next field's name, or for the last field the empty line
 * (2 to 4 bytes in all). More means bytes the parser dropped (a NUL and what
 * follows it); a field out of place was folded (obs-fold: the parser copies
 * its joined line elsewhere). Only pointers are compared; nothing outside
 * the fields is read. Other versions of the library store fields
 * differently: there the check is off (see the README's security section).
 */
static void mark_cut_fields(http_field *f, size_t n, const char *block, size_t block_len)
{
#if MHD_VERSION == 0x00097500
    uintptr_t lo = (uintptr_t)block, hi = lo + block_len;
    for (size_t i = 0; i < n; i++) {
        uintptr_t name = (uintptr_t)f[i].name, value = (uintptr_t)f[i].value;
        uintptr_t end = value + f[i].value_len;
        int last = i + 1 == n;
        uintptr_t next = last ? hi : (uintptr_t)f[i + 1].name;
        uintptr_t min = last ? 2 : 1, max = last ? 4 : 2;
        if (name < lo || name + f[i].name_len >= value || end > hi || next < end + min ||
            next > end + max)
            f[i].cut = 1;
    }
#else
    (void)f;
    (void)n;
    (void)block;
    (void)block_len;
#endif
}

/* The framing verdict on the request on c; 503 when its fields cannot be gathered. */
static http_framing check_framing(struct MHD_Connection *c, const char *method, const char *version)
{
    http_field local[FIELDS_ON_STACK];
    field_list l = {local, 0, FIELDS_ON_STACK};
    http_framing v;
    int n = MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_field, &l);
    if (n > FIELDS_ON_STACK) {
        /* Many fields: at most HTTP_HEADERS_MAX bytes of them (checked before). */
        l.f = calloc((size_t)n, sizeof *l.f);
        if (!l.f)
            return framing_bad(503, "unavailable", "out of memory");
        l.n = 0;
        l.cap = (size_t)n;
        MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_field, &l);
    }
    if (l.n > l.cap)
        l.n = l.cap;
    const union MHD_ConnectionInfo *hi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (hi)
        mark_cut_fields(l.f, l.n, method, hi->header_size);
    v = http_check_framing(l.f, l.n, strcmp(version, MHD_HTTP_VERSION_1_0) != 0);
    if (l.f != local)
        free(l.f);
    return v;
}

/* The request context of a request whose target was refused in on_uri. */
static char uri_refused;

/*
 * MHD_OPTION_URI_LOG_CALLBACK: the raw request target, before libmicrohttpd
 * stores its query arguments in the connection's memory. A target over
 * HTTP_URL_MAX is answered 414 here, written to the socket and followed by
 * a lingering close: a request line that nearly fills that memory leaves
 * libmicrohttpd no room for its arguments or for an answer, and it used to
 * drop such a connection without one. A target holding a space or a
 * control byte (libmicrohttpd splits the request line at its last space and
 * keeps the rest) is answered 400 the same way. Returns the request's
 * context: &uri_refused for a refused target (on_access then ends the
 * connection), else NULL (on_access starts the request as usual).
 */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_server *srv = cls;
    conn_state *cs = conn_of(c);
    if (cs) {
        pthread_mutex_lock(&srv->conns_mu);
        cs->started = 1;
        pthread_mutex_unlock(&srv->conns_mu);
    }
    if (!uri)
        return NULL;
    size_t len = strlen(uri);
    int bad = 0;
    for (size_t i = 0; i < len && !bad; i++)
        bad = (unsigned char)uri[i] <= ' ' || uri[i] == 0x7f;
    if (len <= HTTP_URL_MAX && !bad)
        return NULL;
    const union MHD_ConnectionInfo *fi = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (fi && conn_received(srv, cs)) {
        char rid[REQUEST_ID_MAX + 1];
        uint64_t k = atomic_fetch_add(&srv->rid_counter, 1);
        snprintf(rid, sizeof rid, "%s-%08" PRIx64, srv->rid_prefix, k);
        if (len > HTTP_URL_MAX)
            raw_problem(fi->connect_fd, 414, "uri-too-long", URI_DETAIL, NULL, NULL, rid);
        else
            raw_problem(fi->connect_fd, 400, MALFORMED, TARGET_DETAIL, NULL, NULL, rid);
        linger_drain(fi->connect_fd);
        if (srv->ctx && srv->ctx->http_requests)
            ty_counter_vec_add(srv->ctx->http_requests, "unmatched",
                               len > HTTP_URL_MAX ? "414" : "400", 1);
    }
    return &uri_refused;
}

/*
 * Answers with a problem written to the socket and closes the connection
 * with a lingering close (see the top of the file). Returns MHD_NO, on which
 * libmicrohttpd closes the connection.
 */
static enum MHD_Result answer_raw(http_server *srv, struct MHD_Connection *c, req_state *st,
                                  unsigned status, const char *code, const char *detail,
                                  const char *hkey, const char *hval)
{
    const union MHD_ConnectionInfo *fi = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!fi || !conn_received(srv, st->conn))
        return MHD_NO;
    raw_problem(fi->connect_fd, status, code, detail, hkey, hval, st->request_id);
    linger_drain(fi->connect_fd);
    st->replied = 1;
    st->raw = 1;
    st->status = status;
    return MHD_NO;
}

/* The answer to a body that is being dropped, when it is too long to read to its end. */
static enum MHD_Result answer_dropped_body(http_server *srv, struct MHD_Connection *c,
                                           req_state *st)
{
    if (st->err.status)
        return answer_raw(srv, c, st, st->err.status, st->err.code, st->err.detail, st->err.hkey,
                          st->err.hval);
    if (st->too_large)
        return answer_raw(srv, c, st, 413, "body-too-large", TOO_LARGE_DETAIL, NULL, NULL);
    if (st->busy)
        return answer_raw(srv, c, st, 503, "unavailable", BUSY_DETAIL, NULL, NULL);
    return answer_raw(srv, c, st, 503, "unavailable", "out of memory", NULL, NULL);
}

/* The routes a connection in the reserve is served. */
static int is_ops_route(const req_state *st)
{
    const char *t = st->match.tmpl;
    return (strcmp(st->method, "GET") == 0 || strcmp(st->method, "HEAD") == 0) && t &&
           (strcmp(t, "/healthz") == 0 || strcmp(t, "/readyz") == 0 ||
            strcmp(t, "/metrics") == 0);
}

/* Records the error answer decided on the first call. */
static void set_error(req_state *st, unsigned status, const char *code, const char *detail,
                      const char *hkey, const char *hval)
{
    st->err.status = status;
    st->err.code = code;
    st->err.detail = detail;
    st->err.hkey = hkey;
    st->err.hval = hval;
}

static enum MHD_Result send_error(http_server *srv, struct MHD_Connection *c, req_state *st)
{
    return send_problem(srv, c, st, st->err.status, st->err.code, st->err.detail, st->err.hkey,
                        st->err.hval);
}

/* Routes and authenticates; a failure is recorded in st->err. */
static void check_request(http_server *srv, struct MHD_Connection *c, req_state *st,
                          const char *url, const char *method)
{
    st->rr = router_match_route(srv->routes, srv->nroutes, method, url, &st->match);
    if (st->rr == ROUTER_NOT_FOUND) {
        set_error(st, 404, "not-found", "no such path", NULL, NULL);
        return;
    }
    if (st->rr == ROUTER_BAD_METHOD) {
        set_error(st, 405, "method-not-allowed", "the path does not support this method", "Allow",
                  st->match.allow);
        return;
    }
    if (st->conn && st->conn->reserve && !is_ops_route(st)) {
        set_error(st, 503, "unavailable", RESERVE_DETAIL, "Retry-After", "1");
        return;
    }
    unsigned need = st->match.route->scope;
    if (need) {
        const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                        MHD_HTTP_HEADER_AUTHORIZATION);
        ty_err e = srv->auth ? auth_check_team(srv->auth, authz, need, &st->principal,
                                               &st->scopes, &st->team)
                             : TY_EAUTH;
        if (e == TY_EAUTH) {
            set_error(st, 401, "unauthorized",
                      authz ? "invalid bearer token" : "missing bearer token", "WWW-Authenticate",
                      "Bearer");
            return;
        }
        if (e == TY_EFORBIDDEN) {
            set_error(st, 403, "forbidden", "the token lacks the scope this route needs", NULL,
                      NULL);
            return;
        }
        if (e) {
            set_error(st, 503, "unavailable", "cannot check credentials now", NULL, NULL);
            return;
        }
    }
    unsigned long long len = 0;
    if (!declared_length(c, &len) || len == 0)
        return;
    if (len > srv->ctx->max_body) {
        set_error(st, 413, "body-too-large", TOO_LARGE_DETAIL, NULL, NULL);
        return;
    }
    if (len > srv->large_body) {
        st->large = large_acquire(srv, st);
        if (!st->large) {
            set_error(st, 503, "unavailable", BUSY_DETAIL, NULL, NULL);
            return;
        }
    }
    /* Allocate the body once instead of growing it while it arrives; on
     * failure the buffer simply grows as the body comes in. */
    (void)ty_buf_reserve(&st->body, (size_t)len);
}

static enum MHD_Result begin_request(http_server *srv, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version, void **con_cls)
{
    req_state *st = calloc(1, sizeof *st);
    if (!st)
        return MHD_NO;
    *con_cls = st; /* from here on on_completed frees it */
    atomic_fetch_add(&srv->inflight, 1);
    st->start_ns = ty_time_mono_ns();
    snprintf(st->method, sizeof st->method, "%s", method);
    make_request_id(srv, c, st->request_id);
    ty_buf_init(&st->body, srv->ctx->max_body);
    st->path = strdup(url);
    if (!st->path)
        return MHD_NO;
    st->conn = conn_of(c);

    /* Written to the socket: libmicrohttpd's memory may be too full to build an answer. */
    unsigned too_big = check_sizes(c, url);
    if (too_big == 414)
        return answer_raw(srv, c, st, 414, "uri-too-long", URI_DETAIL, NULL, NULL);
    if (too_big == 431)
        return answer_raw(srv, c, st, 431, "headers-too-large",
                          "the request headers are larger than the server accepts (16384 bytes)",
                          NULL, NULL);

    /*
     * Framing before routing and authentication: a message two parsers could
     * read differently is answered and its connection closed, so no byte
     * after its headers is taken for another request.
     */
    http_framing fr = check_framing(c, method, version);
    if (fr.status)
        return answer_raw(srv, c, st, fr.status, fr.code, fr.detail, NULL, NULL);

    check_request(srv, c, st, url, method);
    /*
     * An error with a body on its way: a client waiting for "100 Continue"
     * gets the answer now and sends no body. Any other client is already
     * writing it: the body is read and dropped and the answer comes on the
     * final call (a client whose writes fail on a closed connection may
     * never read an answer sent early).
     */
    if (st->err.status && body_follows(c)) {
        if (!expects_continue(c, version))
            st->discard = 1;
        else if (!conn_received(srv, st->conn))
            return MHD_NO;
        else
            return send_error(srv, c, st);
    }
    return MHD_YES;
}

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    req_state *st = cls;
    (void)kind;
    if (st->nquery < st->query_cap) {
        st->query[st->nquery].key = key ? key : "";
        st->query[st->nquery].value = value ? value : "";
        st->nquery++;
    }
    return MHD_YES;
}

static int is_token_change(const req_state *st)
{
    return strncmp(st->match.tmpl, "/v1/tokens", 10) == 0 && strcmp(st->method, "GET") != 0 &&
           strcmp(st->method, "HEAD") != 0;
}

/* api_req.header: a header of the connection, for handlers that verify signed requests. */
static const char *request_header(void *hctx, const char *name)
{
    return MHD_lookup_connection_value(hctx, MHD_HEADER_KIND, name);
}

static enum MHD_Result finish_request(http_server *srv, struct MHD_Connection *c, req_state *st)
{
    /* From here on the request is the server's: the deadline no longer applies. */
    if (!conn_received(srv, st->conn))
        return MHD_NO;
    if (st->err.status)
        return send_error(srv, c, st);
    if (st->too_large)
        return send_problem(srv, c, st, 413, "body-too-large", TOO_LARGE_DETAIL, NULL, NULL);
    if (st->oom)
        return send_problem(srv, c, st, 503, "unavailable", "out of memory", NULL, NULL);
    if (st->busy)
        return send_problem(srv, c, st, 503, "unavailable", BUSY_DETAIL, NULL, NULL);

    int n = MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, NULL, NULL);
    if (n > 0) {
        st->query = calloc((size_t)n, sizeof *st->query);
        if (!st->query)
            return send_problem(srv, c, st, 503, "unavailable", "out of memory", NULL, NULL);
        st->query_cap = (size_t)n;
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_query, st);
    }

    api_principal principal = {.name = st->principal, .scopes = st->scopes, .team = st->team};
    api_req req = {
        .ctx = srv->ctx,
        .method = st->method,
        .path = st->path,
        .id = strstr(st->match.tmpl, "{id}") ? st->match.id : NULL,
        .query = st->query,
        .nquery = st->nquery,
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_CONTENT_TYPE),
        .idempotency_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key"),
        .last_event_id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID"),
        .body = st->body.data ? st->body.data : "",
        .body_len = st->body.len,
        .principal = st->principal ? &principal : NULL,
        .request_id = st->request_id,
        .header = request_header,
        .hctx = c,
        .peer_ip = st->conn ? st->conn->ip : NULL,
    };
    api_resp resp;
    memset(&resp, 0, sizeof resp);
    st->match.route->handler(&req, &resp);
    if (resp.status < 100 || resp.status > 599) {
        TY_LOG(TY_LOG_ERROR, "handler set no status", "{s:s, s:s}", "request_id",
               st->request_id, "route", st->match.tmpl);
        api_resp_free(&resp);
        return send_problem(srv, c, st, 500, "internal", NULL, NULL, NULL);
    }
    if (resp.status < 300 && srv->auth && is_token_change(st))
        auth_cache_invalidate(srv->auth);
    if (resp.status == 200 && resp.body && !resp.stream.read &&
        strcmp(st->match.tmpl, "/metrics") == 0)
        append_listener_metrics(srv, &resp);
    /* The body is no longer needed: free it before the response is sent. */
    ty_buf_free(&st->body);
    return send_resp(srv, c, st, &resp);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    http_server *srv = cls;
    req_state *st = *con_cls;

    if (!st)
        return begin_request(srv, c, url, method, version, con_cls);
    if ((void *)st == (void *)&uri_refused)
        return MHD_NO; /* answered in on_uri */
    if (*upload_data_size) {
        if (!st->large && !st->busy && !st->too_large && !st->oom && !st->discard &&
            st->body.len + *upload_data_size > srv->large_body) {
            /* A body without a declared length just became large. */
            st->large = large_acquire(srv, st);
            st->busy = !st->large;
            if (st->busy)
                ty_buf_free(&st->body);
        }
        if (st->discard || st->too_large || st->oom || st->busy) {
            /*
             * Reading on keeps the connection usable for the answer; past a
             * limit, answer now and close (a lingering close).
             */
            st->discarded += *upload_data_size;
            *upload_data_size = 0;
            if (st->discarded > DISCARD_MAX)
                return answer_dropped_body(srv, c, st);
            return MHD_YES;
        } else if (!st->replied) {
            ty_err e = ty_buf_append(&st->body, upload_data, *upload_data_size);
            if (e == TY_ETOOLARGE) {
                st->too_large = 1;
                ty_buf_free(&st->body);
            } else if (e) {
                st->oom = 1;
                ty_buf_free(&st->body);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->replied)
        return MHD_YES;
    return finish_request(srv, c, st);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    req_state *st = *con_cls;
    (void)c;
    if (!st)
        return;
    *con_cls = NULL;
    if ((void *)st == (void *)&uri_refused)
        return;

    double seconds = (double)(ty_time_mono_ns() - st->start_ns) / 1e9;
    const char *route = st->rr == ROUTER_NOT_FOUND || !st->match.tmpl ? "unmatched"
                                                                       : st->match.tmpl;
    if (st->replied) {
        char code[8];
        snprintf(code, sizeof code, "%u", st->status);
        if (srv->ctx->http_requests)
            ty_counter_vec_add(srv->ctx->http_requests, route, code, 1);
        /* A stream counts until its response began (see the top of this file). */
        if (srv->ctx->http_duration)
            ty_histogram_observe(srv->ctx->http_duration,
                                 st->stream ? (double)(st->head_ns - st->start_ns) / 1e9 : seconds);
        reqlog_entry le = {
            .request_id = st->request_id,
            .method = st->method,
            .path = st->path ? st->path : "",
            .route = route,
            .status = st->status,
            .duration_ms = seconds * 1e3,
            .bytes = st->stream ? atomic_load(&st->stream->bytes) : st->bytes,
            .principal = st->principal,
            .aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !st->raw,
        };
        reqlog_write(&le);
    } else {
        TY_LOG(TY_LOG_DEBUG, "request aborted", "{s:s, s:s, s:s, s:s, s:i}", "request_id",
               st->request_id, "method", st->method, "path", st->path ? st->path : "", "route",
               route, "termination", (int)toe);
    }
    int large = st->large;
    conn_ready(srv, st->conn);
    req_state_free(st);
    if (large) {
        /*
         * Hand the memory of a large request back to the system: glibc keeps
         * freed memory in the arena of the thread that used it, so batches
         * served by different connection threads would otherwise add up.
         * At most once a second (ty_mem_trim(), shared with the scheduler and
         * the backends): trimming returns pages with madvise(), and every call
         * costs a TLB shootdown on all the server's threads, which under a
         * stream of metric reports cost more CPU than the reports.
         */
        ty_mem_trim();
        large_release(srv);
    }
    atomic_fetch_sub(&srv->inflight, 1);
}

static ty_err bind_listen(const config_listen *l, int *fd_out, unsigned *port, char *err,
                          size_t errlen)
{
    int one = 1;
    ty_err e = TY_OK;
    struct sockaddr_storage got;
    socklen_t gotlen = sizeof got;
    int fd = socket(l->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return TY_EIO;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (const struct sockaddr *)&l->addr, l->addrlen) != 0 ||
        listen(fd, LISTEN_BACKLOG) != 0 ||
        getsockname(fd, (struct sockaddr *)&got, &gotlen) != 0) {
        snprintf(err, errlen, "cannot listen on %s port %u: %s", l->host, l->port,
                 strerror(errno));
        e = TY_EIO;
        goto out;
    }
    *port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                      : ntohs(((struct sockaddr_in *)&got)->sin_port);
    *fd_out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return e;
}

ty_err http_server_bind(const http_options *opt, http_server **out, char *err, size_t errlen)
{
    unsigned char rnd[8];
    http_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return TY_ENOMEM;
    srv->listen_fd = -1;
    srv->routes = opt->routes;
    srv->nroutes = opt->nroutes;
    srv->connection_limit = opt->connection_limit ? opt->connection_limit
                                                  : DEFAULT_CONNECTION_LIMIT;
    if (srv->connection_limit < MIN_CONNECTION_LIMIT)
        srv->connection_limit = MIN_CONNECTION_LIMIT;
    srv->reserve = srv->connection_limit / RESERVE_DIV;
    srv->reserve = srv->reserve < 1 ? 1 : srv->reserve > RESERVE_MAX ? RESERVE_MAX : srv->reserve;
    srv->per_ip_limit = opt->per_ip_limit ? opt->per_ip_limit : DEFAULT_PER_IP_LIMIT;
    srv->deadline_ns = (uint64_t)(opt->request_deadline_ms ? opt->request_deadline_ms
                                                           : DEFAULT_REQUEST_DEADLINE_MS) *
                       1000000u;
    srv->connection_timeout_s = opt->connection_timeout_s ? opt->connection_timeout_s
                                                          : DEFAULT_CONNECTION_TIMEOUT_S;
    srv->large_body = opt->large_body ? opt->large_body : DEFAULT_LARGE_BODY;
    srv->large_free = opt->large_slots ? opt->large_slots : DEFAULT_LARGE_SLOTS;
    srv->large_wait_ms = opt->large_wait_ms ? opt->large_wait_ms : DEFAULT_LARGE_WAIT_MS;
    pthread_mutex_init(&srv->large_mu, NULL);
    pthread_cond_init(&srv->large_cv, NULL);
    pthread_mutex_init(&srv->conns_mu, NULL);
    pthread_mutex_init(&srv->log_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->wd_cv, &ca);
    pthread_condattr_destroy(&ca);
    ty_counter_vec_init(&srv->refused);
    /* Every reason has a sample from the start, so a dashboard sees zeros. */
    for (int i = 0; i < REFUSED_NREASONS; i++)
        ty_counter_vec_add(&srv->refused, refuse_reasons[i], NULL, 0);
    srv->log_window_ns = ty_time_mono_ns();
    /* At least twice the most addresses at once: probes stay short and always end. */
    size_t cap = 64;
    while (cap < 2 * ((size_t)srv->connection_limit + 1))
        cap *= 2;
    srv->ips_mask = cap - 1;
    srv->ips = calloc(cap, sizeof *srv->ips);
    ty_err e = srv->ips ? TY_OK : TY_ENOMEM;
    if (e) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    e = ty_random_bytes(rnd, sizeof rnd);
    if (e) {
        snprintf(err, errlen, "no random bytes for request ids");
        goto out;
    }
    ty_hex(rnd, sizeof rnd, srv->rid_prefix);
    e = bind_listen(opt->listen, &srv->listen_fd, &srv->port, err, errlen);
out:
    if (e) {
        http_server_free(srv);
        return e;
    }
    *out = srv;
    return TY_OK;
}

unsigned http_server_port(const http_server *s)
{
    return s->port;
}

ty_err http_server_start(http_server *srv, const api_ctx *ctx, auth_cache *auth, char *err,
                         size_t errlen)
{
    if (srv->daemon || srv->listen_fd < 0) {
        snprintf(err, errlen, "server already started");
        return TY_EINVAL;
    }
    /*
     * The daemon gets its own descriptor for the socket: it closes it when it
     * stops, and whether it does so after a failed start is not documented.
     */
    int dfd = fcntl(srv->listen_fd, F_DUPFD_CLOEXEC, 0);
    if (dfd < 0) {
        snprintf(err, errlen, "dup: %s", strerror(errno));
        return TY_EIO;
    }
    srv->ctx = ctx;
    srv->auth = auth;
    /* Past the open-file limit, accept() fails and connections wait in the backlog unanswered. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)srv->connection_limit + 64)
        TY_LOG(TY_LOG_WARN, "the open-file limit is below the connection limit", "{s:I, s:I}",
               "open_files", (json_int_t)rl.rlim_cur, "max_connections",
               (json_int_t)srv->connection_limit);
    atomic_store(&srv->starting, 1);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    /*
     * The logger goes first so that every message of the start reaches it.
     * libmicrohttpd's connection limit is one above ours, so that on_accept
     * decides (see the top of the file); its memory per connection is the
     * hard bound on a request's line and headers.
     */
    srv->daemon = MHD_start_daemon(
        flags, 0, on_accept, srv, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_LISTEN_SOCKET, dfd, MHD_OPTION_CONNECTION_LIMIT,
        srv->connection_limit + 1, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        HTTP_HARD_HEADER_BOUND, MHD_OPTION_CONNECTION_TIMEOUT, srv->connection_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_URI_LOG_CALLBACK, on_uri,
        srv, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_END);
    atomic_store(&srv->starting, 0);
    if (!srv->daemon) {
        snprintf(err, errlen, "cannot start the HTTP daemon%s%s", srv->start_error[0] ? ": " : "",
                 srv->start_error);
        return TY_EIO;
    }
    int pe = pthread_create(&srv->watchdog, NULL, watchdog_main, srv);
    if (pe != 0) {
        MHD_stop_daemon(srv->daemon);
        srv->daemon = NULL;
        snprintf(err, errlen, "cannot start the request watchdog: %s", strerror(pe));
        return TY_EIO;
    }
    srv->wd_running = 1;
    close(srv->listen_fd);
    srv->listen_fd = -1;
    return TY_OK;
}

void http_server_shutdown(http_server *s, unsigned drain_ms)
{
    if (!s || s->stopped)
        return;
    s->stopped = 1;
    if (!s->daemon)
        return;
    atomic_store(&s->draining, 1);
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    uint64_t deadline = ty_time_mono_ns() + (uint64_t)drain_ms * 1000000u;
    struct timespec tick = {0, 5 * 1000 * 1000};
    while (atomic_load(&s->inflight) > 0 && ty_time_mono_ns() < deadline)
        nanosleep(&tick, NULL);
    long left = atomic_load(&s->inflight);
    if (left > 0)
        TY_LOG(TY_LOG_WARN, "requests still in flight at shutdown", "{s:i}", "count", (int)left);
    /*
     * Streams still running (followed logs) end at their next block. A stream
     * whose read() is blocked keeps MHD_stop_daemon() joining its thread until
     * read() returns: its source must end it (see http.h).
     */
    atomic_store(&s->stopping, 1);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    /* Every connection is closed now: nothing is left for the watchdog. */
    if (s->wd_running) {
        pthread_mutex_lock(&s->conns_mu);
        s->wd_stop = 1;
        pthread_cond_signal(&s->wd_cv);
        pthread_mutex_unlock(&s->conns_mu);
        pthread_join(s->watchdog, NULL);
        s->wd_running = 0;
    }
}

void http_server_free(http_server *s)
{
    if (!s)
        return;
    http_server_shutdown(s, 0);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    pthread_cond_destroy(&s->large_cv);
    pthread_mutex_destroy(&s->large_mu);
    pthread_cond_destroy(&s->wd_cv);
    pthread_mutex_destroy(&s->conns_mu);
    pthread_mutex_destroy(&s->log_mu);
    ty_counter_vec_destroy(&s->refused);
    free(s->ips);
    free(s);
}
