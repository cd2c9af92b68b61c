/*
 * http.h - the command line's HTTP client (libcurl): requests to the Trainyard API, streamed
 * bodies (logs, Server-Sent Events), and the problem details of a refusal turned into a message
 * and an exit status.
 *
 * Exit statuses (also those of the commands): CLI_EXIT_OK 0, CLI_EXIT_FAIL 1 (a server error,
 * or with --wait a job that did not succeed), CLI_EXIT_USAGE 2, CLI_EXIT_NOTFOUND 3 (404),
 * CLI_EXIT_AUTH 4 (401, 403), CLI_EXIT_UNREACHABLE 5 (no answer from the server).
 */
#ifndef TY_CLI_HTTP_H
#define TY_CLI_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "common/ty_error.h"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_NOTFOUND = 3,
    CLI_EXIT_AUTH = 4,
    CLI_EXIT_UNREACHABLE = 5,
};

/* Largest response body read into memory (streams are not bounded: they are passed on). */
#define CLI_HTTP_MAX_BODY ((size_t)64 << 20)

typedef struct cli_http cli_http;

/* One answer. status is 0 when none came (err then says why). */
typedef struct cli_resp {
    long status;
    char *body; /* NUL-terminated, owned; a streamed 2xx body is not kept */
    size_t len;
    json_t *json; /* the body parsed when it is JSON, owned; else NULL */
    char err[256];
} cli_resp;

/*
 * A client for server (an http:// or https:// base URL, copied) sending token (copied; NULL or
 * "" for none) as its bearer token. TY_ENOMEM; TY_EINVAL for another URL scheme or a token
 * with spaces or control characters.
 */
ty_err cli_http_new(const char *server, const char *token, cli_http **out);
void cli_http_free(cli_http *c); /* accepts NULL */

/* Appends "&name=value" (or "?" first) to the path in buf with the value URL-escaped. Returns
 * TY_ETOOLARGE when buf is too small. */
ty_err cli_query_add(char *buf, size_t len, const char *name, const char *value);
/* Writes "/v1/jobs/<escaped id><suffix>" into buf. */
ty_err cli_job_path(char *buf, size_t len, const char *id, const char *suffix);
/* Writes "/v1/sweeps/<escaped id><suffix>" into buf. */
ty_err cli_sweep_path(char *buf, size_t len, const char *id, const char *suffix);

/* Sends method on path (with its query) with body (JSON, or NULL) and reads the answer into *r
 * (zeroed here; free with cli_resp_free). Returns 0 when an answer came, -1 otherwise. */
int cli_http_do(cli_http *c, const char *method, const char *path, const char *body, cli_resp *r);

/* Receives a 2xx body as it arrives; returns 0 to go on, nonzero to stop reading. */
typedef int (*cli_sink)(void *ud, const char *data, size_t len);

/* GET path and pass a 2xx body to sink while it arrives, without a time limit; other answers
 * are read into *r as cli_http_do does. last_event_id (or NULL) is sent as Last-Event-ID.
 * Returns 0 when the body ended (or the sink stopped it), -1 when the transfer failed. */
int cli_http_stream(cli_http *c, const char *path, const char *last_event_id, cli_sink sink,
                    void *ud, cli_resp *r);

void cli_resp_free(cli_resp *r);

/*
 * For an answer that is not a success (or none): prints "trainyard CMD: TITLE: DETAIL" and one
 * line per field error ("  $.workers.count: must be >= 1") on errf, and returns the exit status
 * it maps to.
 */
int cli_report(const char *cmd, const cli_resp *r, FILE *errf);

/* ---- Server-Sent Events ------------------------------------------------------ */

/* Called per complete event: its `event:` name ("message" when none), `id:` and data. */
typedef int (*cli_sse_fn)(void *ud, const char *event, const char *id, const char *data);

typedef struct cli_sse {
    cli_sse_fn fn;
    void *ud;
    char line[1 << 16]; /* a line longer than this is dropped whole */
    size_t linelen;
    int overflow;
    char event[64];
    char id[64];
    char *data; /* owned */
    size_t datalen;
} cli_sse;

void cli_sse_init(cli_sse *s, cli_sse_fn fn, void *ud);
/* A cli_sink: feeds stream bytes (ud is the cli_sse); returns the event callback's nonzero. */
int cli_sse_feed(void *ud, const char *p, size_t n);
void cli_sse_free(cli_sse *s);

#endif
