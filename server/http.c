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
 * connection gets a thread, bounded by the connection limit.
 *
 * Request lifecycle, as libmicrohttpd's doc/examples/largepost.c:
 *   1st call     allocate req_state (freed in on_completed), route, authenticate,
 *                check a declared Content-Length against max_body. An error found
 *                here is answered at once when a body follows (the body is never
 *                read; libmicrohttpd closes the connection), else on the final
 *                call (the connection stays open).
 *   body calls   append to a ty_buf capped at max_body; past the cap the rest
 *                is read and dropped (libmicrohttpd cannot answer in the
 *                middle of a body) and the answer is 413 on the final call;
 *                when more than DISCARD_MAX bytes would have to be dropped
 *                the connection is closed without an answer.
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
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"
#include "server/reqlog.h"
#include "server/router.h"

#define DEFAULT_CONNECTION_LIMIT 1024
#define DEFAULT_CONNECTION_TIMEOUT_S 60
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
#define REQUEST_ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
/* Bytes asked of a stream at a time (the chunk size on the wire at most). */
#define STREAM_BLOCK ((size_t)32 << 10)

struct http_server {
    struct MHD_Daemon *daemon;
    int listen_fd;                   /* the bound socket until the daemon has its copy */
    unsigned port;
    const api_ctx *ctx;
    auth_cache *auth;
    const api_route *routes;
    size_t nroutes;
    unsigned connection_limit;
    unsigned connection_timeout_s;
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
    char request_id[REQUEST_ID_MAX + 1];
    ty_buf body;
    int too_large;                   /* the body passed max_body; the rest is dropped */
    int oom;                         /* the body could not be buffered */
    size_t discarded;                /* body bytes read and dropped after too_large or oom */
    int large;                       /* holds a large-body slot (released in on_completed) */
    int busy;                        /* no large-body slot in time: the answer is 503 */
    int replied;                     /* a response has been queued */
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
    if (atomic_load(&srv->starting))
        memcpy(srv->start_error, msg, len + 1);
    TY_LOG(TY_LOG_WARN, "http", "{s:s}", "detail", msg);
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
    if (atomic_load(&srv->draining))
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
static int large_acquire(http_server *srv)
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
    unsigned need = st->match.route->scope;
    if (need) {
        const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                        MHD_HTTP_HEADER_AUTHORIZATION);
        ty_err e = srv->auth ? auth_check(srv->auth, authz, need, &st->principal, &st->scopes)
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
        st->large = large_acquire(srv);
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
                                     const char *method, void **con_cls)
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

    check_request(srv, c, st, url, method);
    /*
     * An error with a body on its way is answered now: the body is never read
     * and libmicrohttpd closes the connection after the answer. Without a body
     * the answer waits for the final call, which keeps the connection alive.
     */
    if (st->err.status && body_follows(c))
        return send_error(srv, c, st);
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

static enum MHD_Result finish_request(http_server *srv, struct MHD_Connection *c, req_state *st)
{
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

    api_principal principal = {.name = st->principal, .scopes = st->scopes};
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
        .body = st->body.data ? st->body.data : "",
        .body_len = st->body.len,
        .principal = st->principal ? &principal : NULL,
        .request_id = st->request_id,
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
    (void)version;

    if (!st)
        return begin_request(srv, c, url, method, con_cls);
    if (*upload_data_size) {
        if (!st->large && !st->busy && !st->too_large && !st->oom &&
            st->body.len + *upload_data_size > srv->large_body) {
            /* A body without a declared length just became large. */
            st->large = large_acquire(srv);
            st->busy = !st->large;
            if (st->busy)
                ty_buf_free(&st->body);
        }
        if (st->too_large || st->oom || st->busy) {
            /* Reading on keeps the connection usable for the 413/503; past a limit, hang up. */
            st->discarded += *upload_data_size;
            if (st->discarded > DISCARD_MAX)
                return MHD_NO;
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
            .aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK,
        };
        reqlog_write(&le);
    } else {
        TY_LOG(TY_LOG_DEBUG, "request aborted", "{s:s, s:s, s:s, s:s, s:i}", "request_id",
               st->request_id, "method", st->method, "path", st->path ? st->path : "", "route",
               route, "termination", (int)toe);
    }
    int large = st->large;
    req_state_free(st);
    if (large) {
        /*
         * Hand the memory of a large request back to the system: glibc keeps
         * freed memory in the arena of the thread that used it, so batches
         * served by different connection threads would otherwise add up.
         */
        malloc_trim(0);
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
    srv->connection_timeout_s = opt->connection_timeout_s ? opt->connection_timeout_s
                                                          : DEFAULT_CONNECTION_TIMEOUT_S;
    srv->large_body = opt->large_body ? opt->large_body : DEFAULT_LARGE_BODY;
    srv->large_free = opt->large_slots ? opt->large_slots : DEFAULT_LARGE_SLOTS;
    srv->large_wait_ms = opt->large_wait_ms ? opt->large_wait_ms : DEFAULT_LARGE_WAIT_MS;
    pthread_mutex_init(&srv->large_mu, NULL);
    pthread_cond_init(&srv->large_cv, NULL);
    ty_err e = ty_random_bytes(rnd, sizeof rnd);
    if (e) {
        snprintf(err, errlen, "no random bytes for request ids");
        goto out;
    }
    ty_hex(rnd, sizeof rnd, srv->rid_prefix);
    e = bind_listen(opt->listen, &srv->listen_fd, &srv->port, err, errlen);
out:
    if (e) {
        pthread_cond_destroy(&srv->large_cv);
        pthread_mutex_destroy(&srv->large_mu);
        free(srv);
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
    atomic_store(&srv->starting, 1);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    /* The logger goes first so that every message of the start reaches it. */
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_LISTEN_SOCKET, dfd, MHD_OPTION_CONNECTION_LIMIT,
        srv->connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, srv->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    atomic_store(&srv->starting, 0);
    if (!srv->daemon) {
        snprintf(err, errlen, "cannot start the HTTP daemon%s%s", srv->start_error[0] ? ": " : "",
                 srv->start_error);
        return TY_EIO;
    }
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
    free(s);
}
