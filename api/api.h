/*
 * api.h - the REST API of Trainyard: route table, request/response model and
 * handlers, independent of the HTTP library.
 *
 * server/ parses HTTP (libmicrohttpd), authenticates, matches the request
 * against api_routes[] and calls the route's handler with an api_req; the
 * handler fills an api_resp, which server/ sends. Handlers never see the
 * HTTP library and never touch SQL directly (they call store/).
 *
 * Errors are RFC 9457 application/problem+json:
 *   {"type": "urn:trainyard:problem:<code>", "title": "...", "status": 422,
 *    "detail": "...", "code": "<code>",
 *    "errors": [{"path": "$.workers.count", "message": "must be >= 1"}]}
 * `code` is stable for machines; `errors` lists every offending field by its
 * JSON path ($ is the request body; "$.jobs[3].image" inside a batch).
 */
#ifndef TY_API_H
#define TY_API_H

#include <jansson.h>
#include <stddef.h>
#include <string.h>

#include "api/spec.h"
#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "common/ty_metrics.h"
#include "scheduler/sched.h"
#include "store/store.h"

#define API_DEFAULT_MAX_BODY (1u << 20) /* 1 MiB */
#define API_MAX_BATCH 1000
#define API_MAX_PAGE 1000
#define API_DEFAULT_PAGE 100

/*
 * Whether the backend jobs run on can run a valid, normalized spec at all (the Kubernetes
 * backend cannot run a job without an image, or with a GPU type its cluster profile lacks).
 * Returns 0 when it can; otherwise nonzero, with the offending field's JSON path relative to the
 * spec in path ("$.image") and a sentence in msg. Called from any connection's thread.
 */
typedef int (*api_spec_check_fn)(void *ud, const json_t *spec, char *path, size_t pathlen,
                                 char *msg, size_t msglen);

/* Process-wide context, created by server/ and borrowed by every handler. */
typedef struct api_ctx {
    store *store;
    sched *sched;                    /* runs the jobs; NULL: logs are unavailable (503) */
    api_spec_check_fn spec_check;    /* NULL: every valid spec can run */
    void *spec_check_ud;
    spec_limits limits;              /* the largest rank the backend could ever place, from its
                                        rank_limits() at start; zeroed: nothing checked */
    /* Appends the backend's own families to /metrics (Prometheus text); NULL: none. */
    ty_err (*backend_metrics)(void *ud, ty_buf *out);
    void *backend_metrics_ud;
    size_t max_body;                 /* bytes; bodies above it are 413 */
    ty_counter_vec *http_requests;   /* {route, code}, owned by server/ */
    ty_histogram *http_duration;     /* seconds, owned by server/ */
    struct api_feed *feed;           /* wakes the event streams (api/feed.h); NULL: they are
                                        unavailable (503) */
    struct api_streams *streams;     /* the places of the followed streams (api/streams.h):
                                        past its caps a stream is 429; NULL: no caps */
    int notify_allow_private;        /* 1: notification URLs need not resolve to public
                                        addresses (common/ty_addr.h); 0: they must */
    struct api_hook_guard *hook_guard; /* rate limits and refusal counters of /v1/hooks
                                          (api_hook_guard_new()); NULL: none */
} api_ctx;

typedef struct api_kv {
    const char *key;
    const char *value;
} api_kv;

/* The authenticated caller; NULL on open routes. */
typedef struct api_principal {
    const char *name;                /* token name; a job token's is API_JOB_PRINCIPAL_PREFIX
                                        and its job's id */
    unsigned scopes;                 /* STORE_SCOPE_*; a job token's: STORE_SCOPE_REPORT alone */
    const char *team;                /* the API token's team (an admin's: its default for
                                        submissions); NULL for a job token */
} api_principal;

/* The name prefix of a job token's principal. API token names cannot hold ':'. */
#define API_JOB_PRINCIPAL_PREFIX "job:"

/* The id of the job a job token's principal is bound to (borrowed from p), or NULL for any
 * other principal. */
static inline const char *api_principal_job_id(const api_principal *p)
{
    size_t n = sizeof API_JOB_PRINCIPAL_PREFIX - 1;
    if (!p || !p->name || p->scopes != STORE_SCOPE_REPORT ||
        strncmp(p->name, API_JOB_PRINCIPAL_PREFIX, n) != 0)
        return NULL;
    return p->name + n;
}

/* One request; everything borrowed for the duration of the handler call. */
typedef struct api_req {
    const api_ctx *ctx;
    const char *method;              /* "GET", "POST", ... */
    const char *path;                /* decoded path without the query */
    const char *id;                  /* the {id} segment of the route, or NULL */
    const api_kv *query;             /* query arguments, decoded, in order, repeats kept */
    size_t nquery;
    const char *content_type;        /* Content-Type header or NULL */
    const char *idempotency_key;     /* Idempotency-Key header or NULL */
    const char *last_event_id;       /* Last-Event-ID header (an event stream resumes) or NULL */
    const char *body;                /* may contain NUL bytes; body_len is authoritative */
    size_t body_len;
    const api_principal *principal;
    const char *request_id;          /* for logs and problem details */
    /* Any other request header by name (any case), or NULL; the value is borrowed for the
     * handler call. header is NULL in requests built without a connection (unit tests). */
    const char *(*header)(void *hctx, const char *name);
    void *hctx;
    const unsigned char *peer_ip;    /* the connection's peer, 16 bytes (IPv4 as
                                        ::ffff:a.b.c.d); NULL when unknown */
} api_req;

#define API_MAX_HEADERS 4

/*
 * A body produced while it is sent (chunked), for logs that grow. server/
 * calls read() from the connection's thread until it returns 0 (the end) or
 * -1 (an error: the connection is closed), then free(ud) once.
 */
typedef struct api_stream {
    long (*read)(void *ud, char *buf, size_t max); /* bytes (> 0), 0 at the end, -1; may block */
    void (*free)(void *ud);
    void *ud;
} api_stream;

/* A response; handlers fill it, server/ sends and frees it with api_resp_free(). */
typedef struct api_resp {
    unsigned status;
    const char *content_type;        /* static string */
    char *body;                      /* owned, malloc'ed; may be NULL for no body */
    size_t body_len;
    api_kv headers[API_MAX_HEADERS]; /* extra headers; key static, value owned (malloc'ed) */
    size_t nheaders;
    api_stream stream;               /* when stream.read is set it replaces body; owned */
} api_resp;

void api_resp_free(api_resp *r);
/* Serializes json (stolen) as the body with Content-Type application/json. */
void api_reply_json(api_resp *r, unsigned status, json_t *json);
/* Sets body and content type from text (copied). */
void api_reply_text(api_resp *r, unsigned status, const char *content_type, const char *text, size_t len);
/*
 * A problem+json response. `code` is the stable machine code (e.g.
 * "invalid-spec"), `detail` free text (copied, may be NULL), `errors` an array
 * of {path, message} (stolen, may be NULL). Never include secrets or raw
 * upstream bodies in detail.
 */
void api_reply_problem(api_resp *r, unsigned status, const char *code, const char *title,
                       const char *detail, json_t *errors);
/* Adds a header (value copied). */
void api_resp_header(api_resp *r, const char *key, const char *value);
/* The HTTP status for a ty_err (TY_ENOTFOUND -> 404, TY_ECONFLICT -> 409, ...). */
unsigned api_http_status(ty_err e);

/*
 * The guard of POST /v1/hooks/{name} (webhooks.c): token buckets checked before a delivery's
 * signature or any store read, per client address (an IPv6 address by its /64), per hook,
 * and for failed signatures per address; past one, 429 with Retry-After. A value <= 0 takes
 * the default in brackets.
 */
typedef struct api_hook_limits {
    double addr_rate, addr_burst; /* deliveries a second from one address [10, 50] */
    double hook_rate, hook_burst; /* deliveries a second to one hook [20, 100] */
    double fail_rate, fail_burst; /* bad signatures a second from one address [0.1, 10] */
    int max_delay_ms;             /* a 429 is answered after the wait its Retry-After names,
                                     at most this long [1000; < 0: at once]: a client that
                                     ignores it waits rather than spins the server */
} api_hook_limits;

typedef struct api_hook_guard api_hook_guard;
/* A new guard (lim may be NULL: every default); TY_ENOMEM. Free with api_hook_guard_free(). */
ty_err api_hook_guard_new(const api_hook_limits *lim, api_hook_guard **out);
/* Accepts NULL. */
void api_hook_guard_free(api_hook_guard *g);

typedef void (*api_handler)(const api_req *req, api_resp *resp);

/*
 * The route table: the one source of truth for routing and for the paths of
 * openapi/openapi.yaml (a test compares them). Path templates use {id} for one
 * segment, which may carry a ":verb" suffix written in the template, e.g.
 * "/v1/jobs/{id}:cancel". `scope` is the STORE_SCOPE_* bit a caller needs, 0 for
 * open routes; STORE_SCOPE_ADMIN satisfies every scope.
 */
typedef struct api_route {
    const char *method;
    const char *path;
    api_handler handler;
    unsigned scope;
} api_route;

extern const api_route api_routes[];
extern const size_t api_nroutes;

#endif
