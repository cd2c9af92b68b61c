/*
 * http.h - the HTTP listener: libmicrohttpd in front of the api/ handlers.
 *
 * Per request: route (router.h), authenticate (auth.h), read the body into a
 * buffer capped at max_body, call the route's handler, send its api_resp with
 * an X-Request-Id header, then count it in the api_ctx metrics and write one
 * JSON log line ("msg":"request"). A response with an api_stream is sent with
 * chunked encoding as its read() produces it (from the connection's thread,
 * where read() may block); read() returning -1 closes the connection without
 * the final chunk, so the client sees the body cut off. Its log line is
 * written when the stream has ended.
 *
 * Errors the server answers itself, as problem+json:
 *   404 not-found (no route), 405 method-not-allowed (+ Allow),
 *   401 unauthorized (+ WWW-Authenticate: Bearer), 403 forbidden,
 *   408 request-timeout (the request was not received within the deadline),
 *   413 body-too-large, 414 uri-too-long, 431 headers-too-large,
 *   503 unavailable (token list unreadable, no slot for a large body in
 *   time, out of memory for the request, or the connection was admitted
 *   into the operations reserve and asks for another route).
 * A request line or header block beyond libmicrohttpd's per-connection
 * memory (HTTP_HARD_HEADER_BOUND bytes) is answered by libmicrohttpd itself
 * (414/431 with its own short body), never dropped.
 *
 * Framing (RFC 9112 section 6.3): a message whose length or headers two
 * parsers could read differently is refused before routing or
 * authentication, as problem+json with "Connection: close", the connection
 * then closed, so no byte after its headers is read as another request:
 *   400 malformed-request  see http_check_framing() below, and a request
 *                          target holding a space or a control byte;
 *   501 not-implemented    a transfer coding other than chunked.
 * What libmicrohttpd 0.9.75 answers itself, before the server sees the
 * request (a malformed request line, a Content-Length that is not a
 * number, a malformed chunk), is listed in the README's security section.
 *
 * Slow and hostile clients (see the top of http.c):
 *   - connections are admitted per client address (per_ip_limit) and in
 *     total (connection_limit); the last slots of the total are a reserve
 *     for addresses that hold at most one connection, and a connection
 *     admitted into it is served only GET /healthz, /readyz and /metrics,
 *     each answer closing it;
 *   - each request must arrive whole (headers and body) within
 *     request_deadline_ms of the moment its connection became ready for it
 *     (accepted, or the previous response sent); slow writes do not extend
 *     it. A connection past it is cut (408 when part of a request had
 *     arrived; an idle keep-alive connection is simply closed);
 *   - refusals and cuts are counted in the /metrics response:
 *     trainyard_http_connections_refused_total{reason} with reason
 *     per_ip_limit, total_limit, deadline or idle_timeout, and the gauge
 *     trainyard_http_connections (open now). libmicrohttpd's own messages
 *     are rate-limited in the log.
 */
#ifndef TY_SERVER_HTTP_H
#define TY_SERVER_HTTP_H

#include <stddef.h>

#include "api/api.h"
#include "common/ty_error.h"
#include "server/auth.h"
#include "server/config.h"

/* libmicrohttpd's memory per connection: the most request line plus headers it can take. */
#define HTTP_HARD_HEADER_BOUND ((size_t)64 << 10)
/* Our own limits, answered as problem+json: the request target, and the whole header block. */
#define HTTP_URL_MAX ((size_t)8 << 10)
#define HTTP_HEADERS_MAX ((size_t)16 << 10)

/*
 * One request header field as libmicrohttpd stored it; name and value are
 * borrowed, with their lengths. cut is 1 when the field's line held bytes
 * that are not in name or value: libmicrohttpd 0.9.75 keeps a value only up
 * to an embedded NUL, and joins a line folded onto the next (obs-fold).
 */
typedef struct http_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    int cut;
} http_field;

/* A framing verdict: status 0 when the message is acceptable. */
typedef struct http_framing {
    unsigned status;    /* 0, 400 or 501 */
    const char *code;   /* problem code: "malformed-request" or "not-implemented"; static */
    const char *detail; /* one line naming the rule broken, never the client's bytes; static */
} http_framing;

/*
 * Checks the header fields of a request (all of them, in the order
 * received; http11 is 0 for HTTP/1.0) for an ambiguous or malformed
 * framing. Pure. Answers 400 when:
 *   - a field name is empty or holds a byte a token may not (whitespace
 *     before the colon among them), or a field was cut (NUL, obs-fold);
 *   - a value holds a control byte (NUL, CR, LF, or any other below 0x20
 *     but HTAB, or DEL);
 *   - Content-Length and Transfer-Encoding are both present, Content-Length
 *     appears twice (equal values too) or is not a decimal number ("5, 5");
 *   - Transfer-Encoding is present in HTTP/1.0, or its codings, over every
 *     field, are not one "chunked" exactly (chunked twice, an empty element,
 *     whitespace around it);
 *   - an HTTP/1.1 request has no Host, or more than one;
 *   - Authorization appears more than once.
 * 501 when a transfer coding other than chunked is named ("gzip",
 * "identity", "xchunked"): the server cannot find where such a body ends.
 */
http_framing http_check_framing(const http_field *fields, size_t n, int http11);

typedef struct http_options {
    const config_listen *listen;     /* borrowed for the call */
    const api_route *routes;         /* the table to serve; borrowed, must outlive the server */
    size_t nroutes;
    unsigned connection_limit;       /* connections at once, 0 = 1024; at least 16 */
    unsigned per_ip_limit;           /* connections at once per client address, 0 = 64 */
    unsigned request_deadline_ms;    /* a request's headers and body, from ready; 0 = 30000 */
    unsigned connection_timeout_s;   /* no byte moved for this long closes it; 0 = 60 */
    /*
     * Requests whose body exceeds large_body bytes (0 = 64 KiB) are handled at
     * most large_slots (0 = 2) at a time; the others wait for a slot, up to
     * large_wait_ms (0 = 30000), then get 503. Handling a body takes many times
     * its size in memory (a 1000-job batch about 20 MiB), so this bounds the
     * server's peak memory under concurrent batches.
     */
    size_t large_body;
    unsigned large_slots;
    unsigned large_wait_ms;
} http_options;

typedef struct http_server http_server;

/*
 * Creates the server and its listening socket (bound and listening, so the
 * real port is known and connections queue up), without serving yet.
 * opt->routes is borrowed and must outlive the server. On failure err holds a
 * one-line reason. *out is new.
 */
ty_err http_server_bind(const http_options *opt, http_server **out, char *err, size_t errlen);

/*
 * Starts serving on the bound socket. ctx and auth are borrowed and must
 * outlive the server; ctx->max_body caps request bodies. auth may be NULL only
 * when no route needs a scope (every scoped route then answers 401).
 */
ty_err http_server_start(http_server *s, const api_ctx *ctx, auth_cache *auth, char *err,
                         size_t errlen);

/* The bound port (the real one when the listen port was 0). */
unsigned http_server_port(const http_server *s);

/*
 * Graceful stop: closes the listening socket (new connections are refused),
 * waits up to drain_ms for the requests in flight to finish (their responses
 * carry "Connection: close"; a stream counts until it has ended), then ends
 * the streams still being sent at their next block (cut off, as for -1),
 * closes every connection and joins the connection threads. A stream whose
 * read() is blocked at that moment (a followed log of a silent rank) delays
 * the return until read() returns, so whatever feeds it must end it first
 * (for logs: sched_shutdown() before this call).
 * Safe to call once; http_server_free() calls it if needed.
 */
void http_server_shutdown(http_server *s, unsigned drain_ms);

/* Shuts down if still running and frees. Accepts NULL. */
void http_server_free(http_server *s);

#endif
