/*
 * report.h - rank 0 of trainyard-worker reports its training metrics to the Trainyard
 * server (POST /v1/jobs/{id}/metrics) while it trains.
 *
 * This is the runtime's one HTTP client. The training thread never waits on the network:
 * report_push() copies a point into a bounded ring under a mutex and returns; a reporter
 * thread sends what the ring holds every interval (and sooner when the ring is half full),
 * one keep-alive libcurl connection, each POST bounded by a timeout. When the server is
 * slow or away the points stay in the ring and are sent again on the next interval; a
 * point pushed into a full ring is dropped and counted, never waited for. report_close()
 * makes one last flush bounded by final_timeout_s, counts what is still unsent as dropped
 * and logs "reporting: N points sent, M dropped".
 *
 * An answer that retrying cannot change (401, 403, 404, 409 job-finished, 413, 422) drops
 * the batch; 401, 403, 404 and 409 also end reporting for the rest of the run (every
 * later point is dropped). Transport errors, 408, 429 and 5xx keep the batch for the next
 * interval.
 *
 * The environment (set by the server's backends for every rank of a job):
 *   TRAINYARD_SERVER           base URL of the server ("http://127.0.0.1:8080")
 *   TRAINYARD_TOKEN            the job's token (able only to report for this job)
 *   TRAINYARD_JOB_ID           the job
 *   TRAINYARD_REPORT_INTERVAL  seconds between batches (default 5, 0.01..3600)
 * Reporting is off unless the first three are set. The token is never logged.
 *
 * Threads: report_push(), report_event() and report_get_stats() may be called from any
 * thread; report_open*() and report_close() from one.
 */
#ifndef TY_RUNTIME_REPORT_H
#define TY_RUNTIME_REPORT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ty_error.h"

#define REPORT_MAX_VALUES 8     /* metric values in one point */
#define REPORT_MAX_BATCH 2000   /* points in one POST (the API takes 5000, bodies 1 MiB) */

typedef struct report report;

typedef struct report_value {
    const char *name;  /* borrowed for the reporter's lifetime: a string literal */
    double value;      /* a non-finite value is left out of the point */
} report_value;

typedef struct report_point {
    int64_t step;      /* >= 0 */
    int64_t time_ms;   /* wall clock, ms since the Unix epoch; 0: report_push() fills now */
    int n;             /* values used, at most REPORT_MAX_VALUES */
    report_value v[REPORT_MAX_VALUES];
} report_point;

typedef struct report_config {
    const char *server;        /* base URL, no trailing path; copied by report_open() */
    const char *token;         /* bearer token; copied */
    const char *job_id;        /* [A-Za-z0-9_-]{1,64}; copied */
    double interval_s;         /* between batches */
    size_t capacity;           /* points the ring holds; beyond it pushes are dropped */
    double request_timeout_s;  /* one POST, connection included */
    double final_timeout_s;    /* report_close()'s last flush, in total */
} report_config;

typedef struct report_stats {
    uint64_t pushed;   /* points handed to report_push() (valid or not) */
    uint64_t sent;     /* points the server acknowledged (200) */
    uint64_t dropped;  /* points lost: ring full, invalid, refused by the server, unsent at close */
    uint64_t posts;    /* POSTs attempted */
    uint64_t failed;   /* POSTs without a 200 */
} report_stats;

/* Defaults: interval 5 s, 8192 points, 10 s per request, 5 s for the final flush. */
void report_config_defaults(report_config *c);

/*
 * Reads the environment through get into c (strings borrowed from what get returns).
 * TY_ENOTFOUND when TRAINYARD_SERVER, TRAINYARD_TOKEN or TRAINYARD_JOB_ID is unset or
 * empty (reporting is off); TY_EINVAL with a message naming the variable for a malformed
 * value.
 */
ty_err report_config_env(report_config *c, const char *(*get)(const char *name), char *err,
                         size_t errlen);

/*
 * Starts a reporter (its thread and its connection, opened on the first send). *out is
 * new; free it with report_close(). TY_EINVAL for a bad configuration (message says which
 * field), TY_ENOMEM, TY_EIO when the thread cannot start.
 */
ty_err report_open(const report_config *c, report **out, char *err, size_t errlen);

/*
 * report_open() from the environment (getenv). Returns NULL when reporting is off, or
 * when it is misconfigured or cannot start: then it writes why to log (may be NULL) and
 * training goes on without reporting.
 */
report *report_open_env(FILE *log);

/* Queues a copy of p; never blocks on the network. r may be NULL (does nothing). */
void report_push(report *r, const report_point *p);

/*
 * Turns one of train.c's JSON lines (borrowed) into a point and pushes it, so that the
 * server gets exactly the figures the worker logs:
 *   "log"   -> step: loss, lr, samples_per_s, epoch (fractional)
 *   "epoch" -> step: epoch_loss (the epoch's mean training loss)
 *   "done"  -> steps: loss (the final training loss), accuracy (test accuracy)
 * Other events are ignored. r may be NULL.
 */
void report_event(report *r, const json_t *event);

/* Counts so far. */
void report_get_stats(report *r, report_stats *st);

/*
 * Flushes what is left (bounded by final_timeout_s), stops the thread, writes
 * "reporting: N points sent, M dropped" to log (may be NULL), fills *final (may be NULL)
 * and frees r. Accepts NULL.
 */
void report_close(report *r, FILE *log, report_stats *final);

#endif
