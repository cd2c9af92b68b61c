/*
 * kclient.h - a client of the Kubernetes API server, over libcurl (TLS through OpenSSL).
 *
 * What every call does for the caller:
 *   - authenticates with the ty_kubeconfig's current credentials (renewed once after a 401);
 *   - passes a client-side rate limiter shared by every thread (a token bucket: `qps` tokens a
 *     second, `burst` at most, as client-go; qps 0 turns it off). Each attempt takes a token;
 *   - retries 429, 5xx except 501, connection failures and timeouts, waiting the `Retry-After`
 *     the server gave or else a jittered exponential backoff; at most `max_retries` times and never
 *     starting a wait that would end past `retry_deadline_ms` after the call began. A create that
 *     timed out may have happened: its retry can answer AlreadyExists (names are deterministic, so
 *     the caller treats that as done);
 *   - sends creates and updates (POST, PUT, PATCH) with `?fieldValidation=Strict`, so that a field
 *     the server does not know fails the call instead of being dropped with a warning;
 *   - reuses connections: curl handles are pooled, and a handle keeps its connection alive.
 * Answers: 2xx is TY_OK. An error answer's `Status` body is decoded into err as a message a person
 * can act on, "<Status.message> (HTTP <code> <reason>)", and resp->code / resp->reason tell the
 * caller what happened. Return codes: 400/422 TY_EINVAL, 401 TY_EAUTH, 403 TY_EFORBIDDEN,
 * 404 TY_ENOTFOUND, 409 AlreadyExists TY_EEXISTS, other 409 TY_ECONFLICT, 410 (Gone, Expired:
 * re-list) TY_EAGAIN, 413 TY_ETOOLARGE, 429/5xx after the retries TY_EAGAIN, other codes and
 * transport failures TY_EIO (err has curl's reason), a body over `max_body` TY_ETOOLARGE, a
 * credentials failure TY_EAUTH, a stopped watch TY_ESHUTDOWN.
 *
 * Threads: every function may be called from any thread at once, except ty_kclient_free (no call
 * may be running). Calls block (rate limit, backoff, the network): never call them from the
 * scheduler's thread. Messages never contain a token or a key.
 */
#ifndef TY_SCHEDULER_KUBE_KCLIENT_H
#define TY_SCHEDULER_KUBE_KCLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "scheduler/kube/kubeconfig.h"

typedef struct ty_kclient ty_kclient;

typedef struct ty_kclient_opts {
    double qps;                   /* requests per second; 0 = no client-side limit (default 100) */
    int burst;                    /* tokens the bucket holds (default 1000) */
    int max_retries;              /* retries after the first attempt (default 5) */
    int64_t retry_deadline_ms;    /* no retry wait ends later than this after the call (30000) */
    int64_t backoff_base_ms;      /* first backoff; doubles each retry, jittered (200) */
    int64_t backoff_max_ms;       /* cap on one backoff and on Retry-After (10000) */
    int64_t timeout_ms;           /* one attempt of a request, not of a watch (30000) */
    int64_t connect_timeout_ms;   /* TCP and TLS handshake (10000) */
    size_t max_body;              /* cap on a response body or one watch event (64 MiB) */
    const char *user_agent;       /* copied; default "trainyard/<version>" */
} ty_kclient_opts;

/* Fills *o with the defaults above. */
void ty_kclient_opts_default(ty_kclient_opts *o);

/*
 * A new client of the server kc describes. kc is borrowed and must outlive the client; opts may be
 * NULL for the defaults (copied). TY_ENOMEM, TY_EINVAL (bad options), TY_EIO (libcurl failed).
 */
ty_err ty_kclient_new(ty_kubeconfig *kc, const ty_kclient_opts *opts, ty_kclient **out,
                      char *err, size_t errlen);
/* Accepts NULL. */
void ty_kclient_free(ty_kclient *c);

#define TY_KRESP_MAX_WARNINGS 16

/* What came back; start it zeroed, clear it with ty_kresp_clear() whatever the call returned. */
typedef struct ty_kresp {
    long code;                    /* HTTP status of the last answer, 0 when none came */
    char reason[48];              /* Status.reason of an error ("AlreadyExists"), or "" */
    char *body;                   /* owned: the last answer's body, NUL-terminated, or NULL */
    size_t body_len;
    char *warnings[TY_KRESP_MAX_WARNINGS];  /* owned: `Warning` headers' text, in order */
    size_t nwarnings;             /* past the array's size, the rest are dropped */
    int attempts;                 /* requests sent, retries included */
} ty_kresp;

void ty_kresp_clear(ty_kresp *r);

/*
 * One request. method is "GET", "POST", "PUT", "PATCH" (a JSON merge patch) or "DELETE"; path is
 * the API path with its query, e.g. "/apis/batch/v1/namespaces/ns/jobs?labelSelector=a%3Db"
 * (the caller escapes the query). body (borrowed, may be NULL) is sent as JSON.
 * Returns as the file header says; resp is filled in either way.
 */
ty_err ty_kclient_request(ty_kclient *c, const char *method, const char *path, const char *body,
                          ty_kresp *resp, char *err, size_t errlen);

/*
 * Lists a collection (path as above, without limit/continue) page by page, `limit` items a page
 * (0: the server's choice, no paging). cb sees every item (borrowed) in order; a cb error ends
 * the list and is returned. rv (may be NULL) gets the list's resourceVersion, from which to
 * watch. An expired continue token (410 Expired: the pages would not be consistent) returns
 * TY_EAGAIN: list again from the start. With metadata_only the server is asked for each item's
 * metadata alone (a PartialObjectMetadata); one that cannot sends whole items.
 */
typedef ty_err (*ty_klist_cb)(void *ud, json_t *item);
ty_err ty_kclient_list(ty_kclient *c, const char *path, int limit, int metadata_only,
                       ty_klist_cb cb, void *ud, char *rv, size_t rvlen, ty_kresp *resp,
                       char *err, size_t errlen);

typedef enum ty_kwatch_type {
    TY_KWATCH_ADDED,
    TY_KWATCH_MODIFIED,
    TY_KWATCH_DELETED,
    TY_KWATCH_BOOKMARK,           /* only metadata.resourceVersion is meaningful */
    TY_KWATCH_ERROR,              /* object is a Status; code 410 means re-list */
} ty_kwatch_type;

/* One event; object is borrowed for the call. A non-TY_OK return ends the watch with it. */
typedef ty_err (*ty_kwatch_cb)(void *ud, ty_kwatch_type type, json_t *object);

/* Stops a watch from another thread; zero it ({0}) before the watch starts. */
typedef struct ty_kstop {
    atomic_int stop;
} ty_kstop;
/* The watch returns TY_ESHUTDOWN within about a second (curl checks once a second when idle). */
void ty_kstop_request(ty_kstop *s);

typedef struct ty_kwatch_opts {
    const char *path;             /* the collection, e.g. "/api/v1/namespaces/ns/pods", and any
                                     query of its own ("?labelSelector=...") */
    const char *resource_version; /* watch from here (from a list); NULL or "": from now */
    int timeout_s;                /* timeoutSeconds: the server ends the stream after it (300) */
    ty_kwatch_cb cb;
    void *ud;
    ty_kstop *stop;               /* may be NULL */
    const json_t *pick;           /* what of each event's object to parse (kpick.h), borrowed;
                                     NULL: all of it. cb sees only that (metadata's
                                     resourceVersion must be in it); an ERROR event's Status is
                                     parsed whole */
    int metadata_only;            /* each object's metadata alone (PartialObjectMetadata), as
                                     for ty_kclient_list() */
} ty_kwatch_opts;

/*
 * Watches with `watch=1&allowWatchBookmarks=true`, delivering each newline-delimited event to
 * o->cb as it arrives. last_rv (may be NULL) holds the resourceVersion of the last event seen,
 * bookmarks included; it is left as is when no event came. Returns TY_OK when the server ended
 * the stream (timeoutSeconds): watch again from last_rv. TY_EIO when the connection broke after
 * events came: watch again from last_rv too. TY_EAGAIN with resp->code 410 after an ERROR event
 * of code 410 (or an HTTP 410): the resourceVersion is too old, re-list. TY_ESHUTDOWN when
 * stopped. Before the first event, failures are retried as for requests.
 */
ty_err ty_kclient_watch(ty_kclient *c, const ty_kwatch_opts *o, char *last_rv, size_t rvlen,
                        ty_kresp *resp, char *err, size_t errlen);

/* ---- streamed reads ---- */

/*
 * A GET whose body is read as it comes, e.g. pods/{name}/log?follow=true, which the kubelet
 * keeps open and writes lines to as the container writes them. The stream has its own curl
 * handle and connection (none of the pool's), no retries and no overall timeout; opening it
 * takes a token of the rate limiter like any request. The transfer moves only inside
 * ty_kstream_read(), on the reader's thread: no thread of its own. At most max_buffer bytes
 * (at least 2 x CURL_MAX_WRITE_SIZE) wait for the reader; past that the transfer pauses (and
 * stops reading the socket) until the reader takes some, so memory stays bounded however fast
 * the server writes.
 */
typedef struct ty_kstream ty_kstream;

/*
 * Sends the GET (path with its query, escaped) and waits, within the client's timeout_ms, for
 * the answer's headers. TY_OK: *out is new and a 2xx body follows (resp->code says which; a
 * 204 has none). Otherwise the error and resp as for ty_kclient_request (an error's Status
 * decoded into err), and *out stays NULL.
 */
ty_err ty_kstream_open(ty_kclient *c, const char *path, size_t max_buffer, ty_kstream **out,
                       ty_kresp *resp, char *err, size_t errlen);
/*
 * Copies up to max bytes of the body, waiting up to wait_ms for some. Returns the bytes
 * copied, 0 when none came in time (the stream is still open), -1 once the body has ended and
 * every byte was read (ty_kstream_ended() says how).
 */
long ty_kstream_read(ty_kstream *s, char *buf, size_t max, int wait_ms);
/* 0 while bytes may still come; 1 when the server ended the body; -1 when the transfer broke. */
int ty_kstream_ended(const ty_kstream *s);
/* Ends the transfer (closing its connection) and frees. Accepts NULL. */
void ty_kstream_close(ty_kstream *s);

/* ---- transfers the caller drives ---- */

/*
 * For a caller that moves many long-lived GETs in its own curl multi handle (one thread for
 * all of them, e.g. the logs of every running pod), instead of a thread or a ty_kstream each.
 *
 * ty_kclient_try_token() takes a token of the rate limiter if there is one now: 1; else 0,
 * and *wait_ms (may be NULL) says when there will be one. It never waits.
 *
 * ty_kclient_easy_get() prepares h for a GET of path (with its query, escaped) as the
 * client's own requests are made: URL, credentials (a bearer token or client certificate),
 * TLS, user agent, connection timeouts, TCP keep-alive; no overall timeout. The caller sets
 * the callbacks and adds h to its multi handle. *hdrs is new (the handle uses it until the
 * transfer ends): free it with ty_kclient_easy_free(). curl_msg (CURL_ERROR_SIZE bytes) must
 * outlive the transfer. TY_ENOMEM, TY_EAUTH (credentials failed; err says why).
 *
 * ty_kclient_count_get() counts one answered GET (code 0: no answer) in the client's
 * counters, as its own requests are.
 */
int ty_kclient_try_token(ty_kclient *c, int64_t *wait_ms);
ty_err ty_kclient_easy_get(ty_kclient *c, CURL *h, const char *path, struct curl_slist **hdrs,
                           char *curl_msg, char *err, size_t errlen);
void ty_kclient_easy_free(struct curl_slist *hdrs);
void ty_kclient_count_get(ty_kclient *c, long code);

/* ---- counters, for /metrics ---- */

typedef enum ty_kverb {
    TY_KVERB_GET, TY_KVERB_LIST, TY_KVERB_WATCH, TY_KVERB_POST, TY_KVERB_PUT, TY_KVERB_PATCH,
    TY_KVERB_DELETE, TY_KVERB_COUNT
} ty_kverb;

/* Status codes counted one by one; the last bucket holds every other code. */
#define TY_KCODE_COUNT 18

typedef struct ty_kclient_stats {
    uint64_t requests[TY_KVERB_COUNT][TY_KCODE_COUNT];  /* attempts, by verb and answer */
    uint64_t retries;             /* attempts after the first, for any reason */
    uint64_t throttled;           /* attempts the rate limiter held back */
    uint64_t watches;             /* watch streams opened */
    uint64_t watch_restarts;      /* streams that ended other than by ty_kstop_request: each
                                     one is watched again (or re-listed) by the caller */
    uint64_t watch_expired;       /* of which: 410, resourceVersion too old */
} ty_kclient_stats;

void ty_kclient_stats_get(ty_kclient *c, ty_kclient_stats *out);
/* "GET", "LIST", ... for a ty_kverb. */
const char *ty_kverb_name(ty_kverb v);
/* The code of bucket i: 0 means "no answer" (transport failure), -1 "any other code". */
int ty_kcode_at(int i);
/*
 * Appends the counters as Prometheus text: trainyard_kube_requests_total{verb,code},
 * trainyard_kube_retries_total, trainyard_kube_throttled_total, trainyard_kube_watches_total,
 * trainyard_kube_watch_restarts_total, trainyard_kube_watch_expired_total.
 */
ty_err ty_kclient_stats_render(ty_kclient *c, ty_buf *out);

#endif
