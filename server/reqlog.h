/*
 * reqlog.h - the per-request log line, formatted without building a json_t.
 *
 * The line has the shape of every ty_log line (common/ty_log.h):
 *   {"ts":"...","level":"info","msg":"request","request_id":"...","method":"POST",
 *    "path":"/v1/jobs","route":"/v1/jobs","status":201,"duration_ms":1.234,
 *    "bytes":541,"principal":"ci"}
 * ("principal" is null on open routes; "aborted":true is added when the client
 * went away before the response was sent). It is written at info level with
 * one write(2).
 * Refusals repeat in floods (a bad signature, a bad token, a rate limit): a 401 or
 * 429 line is written at most once a second per route and status, and the line
 * written carries "suppressed":N, the lines of that route and status left out
 * since the last one. It exists because it runs once per request: formatting it
 * through jansson cost about ten times as much CPU as this.
 * Strings are escaped for JSON; bytes that are not valid UTF-8 become U+FFFD and
 * a path longer than REQLOG_MAX_PATH bytes is cut there. Never pass secrets.
 */
#ifndef TY_SERVER_REQLOG_H
#define TY_SERVER_REQLOG_H

#include <stddef.h>

#define REQLOG_MAX_PATH 1024

typedef struct reqlog_entry {
    const char *request_id;
    const char *method;
    const char *path;
    const char *route;       /* template, or "unmatched" */
    unsigned status;
    double duration_ms;
    size_t bytes;            /* response body bytes */
    const char *principal;   /* NULL on open routes */
    int aborted;
    unsigned long long suppressed; /* lines like this left out before it (0: none) */
} reqlog_entry;

/*
 * Formats the line into buf (ending in '\n', then NUL); returns its length
 * without the NUL, or 0 when buf is too small.
 */
size_t reqlog_format(const reqlog_entry *e, long long now_ms, char *buf, size_t len);
/* Formats and writes the line to stderr when info is enabled, unless it is a repeated
 * refusal (see above). */
void reqlog_write(const reqlog_entry *e);

/*
 * Whether a line of (route, status) is due at now_ms (a monotonic clock): always, except for
 * a 401 or 429 less than a second after the last one written for the same route and status;
 * when due, *suppressed is the number left out since that one. Process-wide table of
 * REQLOG_QUIET_SLOTS (route, status) pairs; safe from any thread.
 */
#define REQLOG_QUIET_SLOTS 64
int reqlog_quiet_due(const char *route, unsigned status, long long now_ms,
                     unsigned long long *suppressed);

#endif
