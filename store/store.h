/*
 * store.h - Trainyard's durable state in SQLite.
 *
 * One database file in WAL mode. All writes go through one writer thread that
 * folds the operations queued by concurrent callers into a single transaction
 * (group commit) and commits it with synchronous=FULL, so a call that returns
 * TY_OK has been fsync'ed: it survives kill -9 and power loss. A failing
 * operation is rolled back to its own savepoint and does not affect the others
 * in the same group. Reads use a pool of separate read-only connections and
 * never wait for the writer.
 *
 * Schema migrations are applied at store_open(); a database whose schema is
 * newer than this binary knows is refused with TY_ESCHEMA and a message.
 *
 * Every job state change goes through store_job_transition() or
 * store_jobs_update(), which write the new state and its job_events row in the
 * same transaction and refuse any transition that common/job_state.h does
 * not allow.
 *
 * Thread safety: every function may be called from any thread.
 * Ownership: out-parameters are new and owned by the caller only on TY_OK;
 * free them with the matching *_free function. Inputs are borrowed.
 */
#ifndef TY_STORE_H
#define TY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "common/ty_metrics.h"
#include "common/job_state.h"

typedef struct store store;

typedef struct store_options {
    int busy_timeout_ms;   /* wait for a lock held by another process; default 5000 */
    int max_group_ops;     /* operations folded into one commit at most; default 4096 */
    int read_connections;  /* size of the read pool; default 4 */
    int64_t metrics_max_points; /* metric points one job may store (store_metrics_append);
                                   default STORE_METRIC_DEFAULT_MAX_POINTS */
} store_options;

/* Opens (creating if needed) and migrates the database; starts the writer.
 * `opt` may be NULL, and zero fields take their defaults. On failure, err (if given) holds a one-line reason. *out is new. */
ty_err store_open(const char *path, const store_options *opt, store **out, char *err, size_t errlen);
/* Finishes every queued write, stops the writer, closes all connections. Accepts NULL. */
void store_close(store *s);
/* The schema version this binary writes (PRAGMA user_version). */
int store_schema_version(void);
/* A round trip through the writer (BEGIN IMMEDIATE ... COMMIT): TY_OK when the database is writable. */
ty_err store_ping(store *s);

/* ---- jobs ---------------------------------------------------------------- */

#define STORE_ID_LEN 26 /* job ids: lower-case, time-ordered, [0-9a-z]{26} */

typedef struct store_label {
    const char *key;
    const char *value;
} store_label;

/* A job to insert. All fields borrowed. */
/*
 * A secret env value of a job (the spec's {"value": ..., "secret": true}). In a
 * store_job_new the strings are borrowed; from store_job_secrets_open() they are new.
 */
typedef struct store_env_secret {
    const char *name;            /* the variable's name */
    const char *value;           /* NUL-terminated, value_len bytes */
    size_t value_len;
} store_env_secret;

typedef struct store_job_new {
    const char *name;
    const char *queue;
    int64_t priority;
    const char *spec_json;       /* the normalized spec, a JSON object, stored verbatim */
    const store_label *labels;   /* copies of spec.labels, indexed for filtering */
    size_t nlabels;
    const store_env_secret *secrets; /* its secret env values (the spec holds none of them:
                                        {"value": null, "secret": true}), sealed in the job's
                                        own transaction (job_secrets); NULL when none */
    size_t nsecrets;
    const char *team;            /* the owning team; NULL: STORE_TEAM_DEFAULT. Not checked
                                    against the teams table: the caller checked it */
    const char *owner;           /* the submitting token's name; NULL: none */
} store_job_new;

typedef struct store_job {
    int64_t seq;                 /* insertion order, strictly increasing */
    char id[STORE_ID_LEN + 1];
    char *name;
    char *queue;
    int64_t priority;
    job_state state;
    int attempt;                 /* 0 until the first attempt starts */
    int restarts;                /* restarts spent on failures (counted against restart.max) */
    int64_t created_at_ms;
    int64_t updated_at_ms;
    char *spec_json;
    char *attempt_json;          /* the current attempt's record (a JSON object written by the
                                    scheduler, see store_update), or NULL before the first */
    int64_t sweep;               /* a sweep's trial: the sweep's seq, else 0 */
    int sweep_parallelism;       /* a trial: its sweep's trials active at once, else 0 */
    char *team;                  /* the owning team */
    char *owner;                 /* the submitting token's name; NULL for a job submitted
                                    before jobs had owners (schema version 13) */
    char *pending_reason;        /* PENDING: why it waits, as the scheduler last wrote it (a
                                    JSON object: reason, message, position, team_position);
                                    NULL when none was written or the job is not PENDING */
    int preempted;               /* it went back to PENDING because it was preempted, and has
                                    not started again since */
} store_job;

/* Frees the members of n jobs and the array itself. Accepts NULL. */
void store_jobs_free(store_job *jobs, size_t n);

/*
 * Inserts n jobs (1 <= n) atomically: all or none, each with its first event
 * (NONE -> PENDING, reason "Submitted"). When idem_key is not NULL, the key
 * (scoped by the caller, e.g. "<token name>:<header>") is recorded with
 * body_hash; a later call with the same key and hash returns the jobs of the
 * first call with *replayed = 1 and inserts nothing; the same key with another
 * hash is TY_ECONFLICT. Keys are kept at least 24 hours.
 * On TY_OK *out is a new array of *nout jobs in input order.
 */
ty_err store_jobs_submit(store *s, const store_job_new *jobs, size_t n, const char *idem_key,
                         const unsigned char body_hash[32], store_job **out, size_t *nout,
                         int *replayed);

/* TY_ENOTFOUND when no job has that id. *out (one job) is new. */
ty_err store_job_get(store *s, const char *id, store_job **out);

/*
 * The secret env values of job `id`, opened (store_secrets.c): *out is a new array of *n
 * entries in name order (NULL and 0 when the job has none, or no such job exists), freed
 * with store_env_secrets_free(), which wipes the values. Each value is sealed with
 * AES-256-GCM under the key file next to the database ("webhook-secrets.key"), with
 * "job-env:<id>:<name>" as associated data, so a blob moved to another job or name does not
 * open: TY_ESCHEMA then; TY_EIO when the key file cannot be read; TY_ENOMEM. The sealed
 * values are deleted in the transaction that ends the job.
 */
ty_err store_job_secrets_open(store *s, const char *id, store_env_secret **out, size_t *n);
/* Wipes and frees what store_job_secrets_open() returned. Accepts NULL. */
void store_env_secrets_free(store_env_secret *v, size_t n);
/*
 * Whether the caller of `team` may see job `id`: TY_OK when the job exists and team is NULL
 * (every team) or the job's team; TY_ENOTFOUND otherwise, the same answer for another team's
 * job as for no job. One index seek on a read connection (a job's team never changes).
 */
ty_err store_job_visible(store *s, const char *id, const char *team);

/* Filters for store_jobs_list(); zero-initialize, then set what applies. */
typedef struct store_job_filter {
    unsigned state_mask;         /* bit (1u << state); 0 = any state */
    const char *queue;           /* NULL = any */
    const char *name_prefix;     /* NULL = any */
    const store_label *labels;   /* all must match (AND) */
    size_t nlabels;
    int64_t created_after_ms;    /* exclusive; 0 = no bound */
    int64_t created_before_ms;   /* exclusive; 0 = no bound */
    int64_t before_seq;          /* cursor: only jobs with seq < before_seq; 0 = from the newest */
    int limit;                   /* 1..1000 */
    const char *team;            /* only this team's jobs; NULL = every team */
} store_job_filter;

/*
 * Newest first (descending seq). Keyset pagination: *next_before_seq is the
 * cursor for the next page, 0 when this page is the last. Jobs inserted while
 * a client pages have higher seq and never shift later pages, so nothing is
 * skipped or repeated.
 */
ty_err store_jobs_list(store *s, const store_job_filter *f, store_job **out, size_t *nout,
                       int64_t *next_before_seq);

typedef struct store_event {
    int64_t seq;
    int64_t time_ms;
    job_state from;              /* JOB_STATE_NONE for the creation event */
    job_state to;
    char *reason;                /* CamelCase machine reason: "Submitted", "Cancelled", ... */
    char *message;               /* human text, may be "" */
} store_event;

void store_events_free(store_event *events, size_t n);
/* The job's history, oldest first. TY_ENOTFOUND for an unknown job. */
ty_err store_job_events(store *s, const char *id, store_event **out, size_t *nout);

/*
 * Decides, inside the write transaction, the state a job moves to. Called with
 * the job's current state; returns TY_OK and sets *to (== cur means "no change,
 * not an error"), or an error (e.g. TY_ECONFLICT) that aborts the operation.
 */
typedef ty_err (*store_decide_fn)(job_state cur, job_state *to, void *ud);

/*
 * Atomically reads the job, asks decide() for the target state and, when it
 * differs, writes it with one job_events row (reason, message). A target that
 * job_state_transition_allowed() refuses is TY_EINTERNAL and is logged; nothing
 * is written. On TY_OK and on TY_ECONFLICT from decide(), *out (if not NULL) is
 * the job as it is after the call (new).
 */
ty_err store_job_transition(store *s, const char *id, store_decide_fn decide, void *ud,
                            const char *reason, const char *message, store_job **out);

/* ---- the scheduler's side ------------------------------------------------ */

/*
 * One scheduler write for one job: an optional state transition, an optional
 * attempt record and the restart count, applied together or not at all.
 */
typedef struct store_update {
    const char *id;
    job_state from;              /* the state the caller believes the job is in */
    job_state to;                /* == from: no transition, only the record and counters */
    int note;                    /* with to == from: also a job_events row from = to with
                                    reason and message, something to tell about a job that
                                    does not move (why a PENDING job waits); it wakes no
                                    change hook */
    const char *reason;          /* the job_events row's reason; required when to != from
                                    and for a note */
    const char *message;         /* its message; NULL = "" */
    int attempt;                 /* > 0: attempt_json is the record of this attempt, which must
                                    be the job's attempt after the transition (a transition into
                                    STARTING increments it), else TY_ECONFLICT */
    const char *attempt_json;    /* JSON object text stored verbatim: as a row of the job's
                                    attempts, read back as store_job.attempt_json */
    int restarts;                /* the job's new restart count; -1 = unchanged */
    const unsigned char *job_token_hash; /* NULL, or with a transition into STARTING: the
                                    SHA-256 (32 bytes) of the new attempt's job token, stored
                                    bound to the job and that attempt while every earlier token
                                    of the job is revoked (see store_job_token_lookup); with any
                                    other transition TY_EINVAL */
    const char *pending_reason;  /* NULL: unchanged; else the job's pending_reason (JSON object
                                    text; "" clears it), written only while the job is PENDING
                                    (a move out of PENDING clears it) */
    int preempted;               /* with a transition into PENDING: 1 marks the job preempted
                                    (a move into STARTING clears the mark) */
    /* Results, set by store_jobs_update() for each update: */
    ty_err result;               /* TY_OK; TY_ECONFLICT when the job was not in `from` (nothing
                                    written); TY_ENOTFOUND; TY_EINTERNAL for a transition that
                                    job_state_transition_allowed() refuses (logged); TY_EINVAL
                                    for a malformed update (no id, a state out of range, no
                                    reason for a transition, restarts < -1, attempt_json
                                    without attempt > 0) */
    job_state now;               /* the job's state after the update (when it exists) */
    int now_attempt;             /* the job's attempt number after the update */
} store_update;

/*
 * Applies n updates in one group commit, each in its own savepoint, so one
 * failing update leaves the others intact. Returns TY_OK when the commit
 * happened (look at each update's result), or the error that lost all of them.
 */
ty_err store_jobs_update(store *s, store_update *u, size_t n);

/*
 * The admission order is per queue: each queue's PENDING jobs by priority
 * descending, then age (seq ascending). The scheduler merges the heads of the
 * queues it may admit from, so a queue at its limit costs it nothing however
 * many jobs wait in it.
 *
 * store_pending_queues(): the names of the queues that hold PENDING jobs, in
 * byte order, after `after` (NULL: from the first), at most limit (1..1000);
 * fewer than limit means the list is done. Each name costs one index seek, not
 * a walk of the queue's jobs. *out is a new array of new strings (NULL when
 * there are none); free it with store_queues_free().
 *
 * store_jobs_pending(): the PENDING jobs of `queue` that are no sweep's
 * trials, in admission order. With after_seq > 0 the walk resumes after the
 * job (after_priority, after_seq), which need not be PENDING any more. At
 * most limit (1..1000) jobs; *out is new (NULL when there are none). Fewer
 * than limit jobs means the walk is done. store_jobs_pending_sweep() is the
 * same walk over the trials of sweep `sweep` (a seq; 0: no sweep's) in
 * `queue`: each (queue, sweep) pair is a line of its own, so a sweep at its
 * parallelism costs admission nothing, like a queue at its limit.
 *
 * store_pending_sweeps(): the sweeps with PENDING trials in `queue`, by seq,
 * after after_sweep (0: from the first), with their parallelism; at most
 * limit (1..1000); one index seek each. *out is new (free(); NULL when none).
 *
 * Both read on a read connection, never the writer, each call in one snapshot.
 */
ty_err store_pending_queues(store *s, const char *after, int limit, char ***out, size_t *nout);
/* Frees n names and the array. Accepts NULL. */
void store_queues_free(char **queues, size_t n);
ty_err store_jobs_pending(store *s, const char *queue, int64_t after_priority, int64_t after_seq,
                          int limit, store_job **out, size_t *nout);
ty_err store_jobs_pending_sweep(store *s, const char *queue, int64_t sweep, int64_t after_priority,
                                int64_t after_seq, int limit, store_job **out, size_t *nout);
typedef struct store_pending_sweep {
    int64_t sweep;               /* the sweep's seq */
    int parallelism;             /* its trials active at once */
} store_pending_sweep;
ty_err store_pending_sweeps(store *s, const char *queue, int64_t after_sweep, int limit,
                            store_pending_sweep **out, size_t *nout);
/*
 * Admission by team. store_jobs_pending_line() is store_jobs_pending_sweep() over the jobs of
 * `team` only (NULL: every team's, as store_jobs_pending_sweep()): a line is (team, queue,
 * sweep). store_pending_lines(): the lines that hold PENDING jobs, by team, queue, then sweep
 * (a queue's jobs outside sweeps first, sweep 0), after `after` (NULL: from the first), at
 * most limit (1..1000); fewer means the list is done. One index seek per line, whatever the
 * number of jobs waiting. *out is new (NULL when none): free with store_pending_lines_free().
 */
typedef struct store_pending_line {
    char *team;
    char *queue;
    int64_t sweep;               /* the sweep's seq; 0: the queue's jobs outside sweeps */
    int parallelism;             /* the sweep's trials active at once; 0 outside sweeps */
} store_pending_line;
ty_err store_jobs_pending_line(store *s, const char *team, const char *queue, int64_t sweep,
                               int64_t after_priority, int64_t after_seq, int limit,
                               store_job **out, size_t *nout);
ty_err store_pending_lines(store *s, const store_pending_line *after, int limit,
                           store_pending_line **out, size_t *nout);
void store_pending_lines_free(store_pending_line *lines, size_t n);
/*
 * The PENDING jobs that have a pending_reason (the heads of their lines as the scheduler last
 * described them), by their position, of team `team` (NULL: every team's), at most limit
 * (1..1000). A walk of each team's PENDING jobs (the index's team prefix), merged by position,
 * for a person who asks, never for a round. *out is new (NULL when none).
 */
ty_err store_queue_heads(store *s, const char *team, int limit, store_job **out, size_t *nout);
/*
 * Where PENDING jobs stand in their lines, for a person who asks (never for a round): for each
 * of the n jobs (as read by the caller: its team, queue, sweep, priority and seq), out[i] says
 * how many PENDING jobs of its line (team, queue, sweep) come before it in admission order, and
 * which job heads the line now, with that head's stored pending_reason. Jobs of one line share
 * one head seek; a job's count is the buckets of pending_counts ahead of it (1,024 seqs each,
 * kept by triggers) plus the jobs before it in its own bucket of jobs_pending_team, or, for a
 * job within a bucket's width behind the previous one asked about at the same priority, the
 * jobs between the two. So a page of jobs costs about one walk of the buckets and a few
 * thousand index entries, however deep in a line of a million it is. out[i].ahead is -1 for a job that is not PENDING as
 * read, or that its line's head now comes after (it has left the line meanwhile). All in one
 * snapshot. out (n entries, caller's) is overwritten; clear it with store_line_places_clear().
 */
typedef struct store_line_place {
    int64_t ahead;                  /* PENDING jobs of its line before it; 0: it is the head */
    char head_id[STORE_ID_LEN + 1]; /* its line's head now ("" when ahead is -1) */
    char *head_reason;              /* new: that head's stored pending_reason when ahead > 0
                                       and it has one, else NULL */
} store_line_place;
ty_err store_jobs_line_places(store *s, const store_job *jobs, size_t n, store_line_place *out);
/* Frees what n places hold (not the array). Accepts NULL. */
void store_line_places_clear(store_line_place *p, size_t n);

/* One job_events row as a change feed entry (like a watch event). */
typedef struct store_change {
    int64_t seq;                 /* the event's seq: increases in commit order */
    char id[STORE_ID_LEN + 1];   /* the job */
    job_state from, to;          /* from is JOB_STATE_NONE for a submission */
} store_change;

/* Events with seq > after, oldest first, at most limit (1..10000). *out is new (free(); NULL
 * when there are none). */
ty_err store_changes(store *s, int64_t after, int limit, store_change **out, size_t *nout);
/* The seq of the newest event, 0 when there is none. */
ty_err store_changes_head(store *s, int64_t *seq);
/*
 * How many committed operations, since the store opened, submitted jobs or moved one into
 * CANCELLING or CANCELLED. Kept in memory and moved before the change hook is called: a
 * reader of the feed that cares only for those (a scheduler) need not read it while this
 * stays the same. Any thread.
 */
uint64_t store_submits_cancels(store *s);

/*
 * Registers fn to be called by the writer thread after every commit that
 * wrote at least one job event (a submission or a transition). fn must be
 * quick and must not call the store (e.g. it writes to an eventfd). One hook
 * per store; NULL removes it. Set it before other threads write.
 */
void store_set_change_hook(store *s, void (*fn)(void *ud), void *ud);

/*
 * Fault injection, for tests; compiled in always, armed only by a test. The
 * write transactions numbered nth to nth + count - 1 from now (nth 1: the
 * next one) fail at their commit with err, as SQLITE_BUSY (TY_EBUSY) or an
 * I/O error (TY_EIO) would: each is rolled back whole and every operation in
 * it returns err. nth 0 disarms. Any thread.
 */
void store_fail_writes(store *s, int nth, int count, ty_err err);

typedef struct store_attempt {
    int attempt;
    char *json;                  /* the record as the scheduler last wrote it */
} store_attempt;

void store_attempts_free(store_attempt *a, size_t n);
/* The job's attempts, oldest first (none: *out NULL, *nout 0). TY_ENOTFOUND for an unknown
 * job. */
ty_err store_job_attempts(store *s, const char *id, store_attempt **out, size_t *nout);

/* ---- feed ------------------------------------------------------------------ */

/*
 * The change feed as the live event stream (api/feed) shows it: one
 * job_events row with its job's id, name, queue and labels. Notes (from == to,
 * see store_update.note) are rows too.
 */
typedef struct store_feed_event {
    int64_t seq;                 /* the event's seq: increases in commit order */
    int64_t time_ms;
    job_state from;              /* JOB_STATE_NONE for the creation event */
    job_state to;
    char *reason;
    char *message;               /* may be "" */
    char id[STORE_ID_LEN + 1];   /* the job */
    char *name;
    char *queue;
    char *labels_json;           /* the job's labels: a compact JSON object, "{}" for none */
    char *team;                  /* the job's team: a follower sees its own team's only */
} store_feed_event;

/* Frees the members of n events and the array. Accepts NULL. */
void store_feed_free(store_feed_event *ev, size_t n);
/*
 * Events with seq > after (>= 0), oldest first, at most limit (1..1000), in one read
 * snapshot and one statement. *out is new (NULL when there are none).
 */
ty_err store_feed_read(store *s, int64_t after, int limit, store_feed_event **out, size_t *nout);
/* The same for the events of job `id` only; an unknown job has none (not an error). */
ty_err store_feed_read_job(store *s, const char *id, int64_t after, int limit,
                           store_feed_event **out, size_t *nout);
/* The hook store_set_change_hook() set (NULL when none), so that a second listener can be
 * chained behind it: set a hook that calls both. */
void store_change_hook_get(store *s, void (**fn)(void *ud), void **ud);
/* The seq of the newest metric point of any job, 0 when there is none: a stream that starts
 * after it sends only points stored from now on (store_metrics_since()). */
ty_err store_metrics_head(store *s, int64_t *seq);

/* ---- metrics ------------------------------------------------------------- */

/*
 * Scalar series a job reports (loss, accuracy, ...): one value per (job,
 * name, step). Writing a step again replaces its value and time (the last
 * write wins) and gives the point a new seq. Every stored point has a seq,
 * global and increasing in commit order, so "the points of a job with seq >
 * X" misses nothing a later commit adds.
 */
#define STORE_METRIC_NAME_MAX 64     /* bytes of a metric name */
#define STORE_METRIC_MAX_SERIES 1000 /* names one job may report: a job is untrusted code */
#define STORE_METRIC_DEFAULT_MAX_POINTS 1000000 /* points one job may store, by default */

/* A point to store: names[name] at step. */
typedef struct store_metric_in {
    size_t name;                 /* index into the names array of the call */
    int64_t step;                /* >= 0 */
    int64_t time_ms;             /* when it was measured (Unix ms) */
    double value;                /* finite */
} store_metric_in;

/*
 * Stores n points (1..) of job `id` through the writer: TY_OK only after the
 * group commit that holds them, all or none. names (nnames, borrowed) are the
 * distinct metric names the points refer to, each 1..STORE_METRIC_NAME_MAX
 * bytes. TY_ENOTFOUND for an unknown job; TY_ECONFLICT when the job is in a
 * terminal state (nothing stored); TY_ETOOLARGE when the job would have more
 * than STORE_METRIC_MAX_SERIES names, or more stored points than the store's
 * metrics_max_points (store_options), nothing stored either way; TY_EINVAL for
 * a malformed point (a name index out of range, a negative step, a value that
 * is not finite).
 *
 * The points a job stores are counted in the transaction that writes them (a
 * per-job total, one seek): a step written again replaces its point and
 * counts nothing, so a report that only rewrites steps always fits.
 */
ty_err store_metrics_append(store *s, const char *id, const char *const *names, size_t nnames,
                            const store_metric_in *points, size_t n);

/* Which cap refused a report (store_metrics_append_why()'s TY_ETOOLARGE). */
typedef struct store_metrics_refusal {
    int points;                  /* 1: the points cap; 0: the series cap */
    int64_t limit;               /* that cap */
    int64_t stored;              /* the job's stored points (or series) before the report */
} store_metrics_refusal;

/* store_metrics_append() that says, on TY_ETOOLARGE, which cap refused the report (why may
 * be NULL; it is written on TY_ETOOLARGE only). */
ty_err store_metrics_append_why(store *s, const char *id, const char *const *names,
                                size_t nnames, const store_metric_in *points, size_t n,
                                store_metrics_refusal *why);

/* The points cap of this store (store_options.metrics_max_points). */
int64_t store_metrics_max_points(const store *s);

/*
 * Retention: deletes the metrics of jobs that ended before ended_before_ms
 * (their points, stream batches, series and totals), oldest end first, at
 * most max_rows (1..100000) rows in one writer operation, so a purge never
 * holds the writer for long and submissions commit between its batches.
 * *points (may be NULL) counts the points deleted; *more is 1 when rows may
 * be left to delete (call again), 0 when none is. Jobs that ended later, and
 * jobs that run, are not touched. A job being purged reads as having fewer
 * points, then none.
 */
ty_err store_metrics_purge(store *s, int64_t ended_before_ms, int max_rows, int64_t *points,
                           int *more);

typedef struct store_metric_point {
    int64_t step;
    int64_t time_ms;
    double value;
} store_metric_point;

typedef struct store_metric_series {
    char *name;
    int64_t total_points;        /* points of the series in the step range read */
    store_metric_point *points;  /* ascending by step; NULL when none */
    size_t npoints;
} store_metric_series;

/* Frees the members of *ser and zeroes it. Accepts NULL. */
void store_metric_series_clear(store_metric_series *ser);
/* Frees the members of n series and the array. Accepts NULL. */
void store_metric_series_free(store_metric_series *ser, size_t n);

/*
 * One series of job `id`: its points with step_min <= step <= step_max,
 * ascending by step. When the range holds more than max_points (>= 2) points
 * it is downsampled to at most max_points: the first and the last point are
 * kept, and the steps between are cut into (max_points - 2) / 2 buckets of
 * equal width, each keeping the point of its lowest and of its highest value,
 * so no extreme is lost. One read snapshot, one walk of the range.
 * TY_ENOTFOUND for an unknown job; a name the job never reported is an empty
 * series (total_points 0). On TY_OK *out (zeroed first) holds new members.
 */
ty_err store_metrics_read(store *s, const char *id, const char *name, int64_t step_min,
                          int64_t step_max, size_t max_points, store_metric_series *out);

/* The names of the job's series in byte order; *out is a new array of new strings (NULL when
 * none), free with store_queues_free(). TY_ENOTFOUND for an unknown job. */
ty_err store_metrics_names(store *s, const char *id, char ***out, size_t *nout);

/* A stored point as the live stream reads it. */
typedef struct store_metric_row {
    int64_t seq;
    char name[STORE_METRIC_NAME_MAX + 1];
    int64_t step;
    int64_t time_ms;
    double value;
} store_metric_row;

/*
 * The points of job `id` with seq > after_seq, by seq, at most limit
 * (1..100000). *out is new (free(); NULL when none). An unknown job has none
 * (not an error).
 */
ty_err store_metrics_since(store *s, const char *id, int64_t after_seq, int limit,
                           store_metric_row **out, size_t *nout);

/*
 * Registers fn to be called by the writer thread after every commit that
 * stored metric points, apart from the change hook so that metric traffic
 * never wakes the scheduler. fn must be quick and must not call the store.
 * One hook per store; NULL removes it.
 */
void store_set_metrics_hook(store *s, void (*fn)(void *ud), void *ud);

/* ---- job tokens ---------------------------------------------------------- */

/*
 * A job token authenticates the ranks of one job's attempt (they report
 * metrics with it). Only its SHA-256 is stored, written with the transition
 * into STARTING (store_update.job_token_hash); it is revoked when the next
 * attempt's token is stored and, in the same transaction, when the job
 * reaches a terminal state.
 *
 * store_job_token_lookup(): TY_OK with the job's id and the attempt when hash
 * belongs to a token not revoked; TY_ENOTFOUND otherwise. One index seek on a
 * read connection.
 */
ty_err store_job_token_lookup(store *s, const unsigned char hash[32],
                              char id[STORE_ID_LEN + 1], int *attempt);

/* ---- API tokens ---------------------------------------------------------- */

enum {
    STORE_SCOPE_READ = 1u << 0,
    STORE_SCOPE_SUBMIT = 1u << 1,
    STORE_SCOPE_ADMIN = 1u << 2,
    STORE_SCOPE_REPORT = 1u << 3, /* POST a job's metrics: a job token of that job; never
                                     stored with an API token (an admin token may report) */
};

typedef struct store_token {
    char *name;
    unsigned scopes;             /* STORE_SCOPE_* bits */
    char *team;                  /* the team it acts for (an admin's: its default team) */
    unsigned char hash[32];      /* SHA-256 of the secret; the secret itself is never stored */
    int64_t created_at_ms;
    int64_t revoked_at_ms;       /* 0 while valid */
} store_token;

void store_tokens_free(store_token *tokens, size_t n);
/* TY_EEXISTS when a token (valid or revoked) already has that name. The token belongs to
 * STORE_TEAM_DEFAULT. */
ty_err store_token_create(store *s, const char *name, unsigned scopes, const unsigned char hash[32]);
/* The same for team (NULL: STORE_TEAM_DEFAULT); TY_ENOTFOUND when no team has that name. */
ty_err store_token_create_team(store *s, const char *name, unsigned scopes, const char *team,
                               const unsigned char hash[32]);
/* All tokens, revoked ones included, ordered by name. */
ty_err store_tokens_list(store *s, store_token **out, size_t *nout);
/* TY_ENOTFOUND for an unknown or already revoked name. */
ty_err store_token_revoke(store *s, const char *name);
/* Number of valid (not revoked) tokens with the admin scope. */
ty_err store_token_count_admin(store *s, int64_t *count);

/* ---- teams ------------------------------------------------------------- */

/*
 * Teams own tokens, jobs and sweeps. A team's quota and borrowing limit are stored per
 * resource: "gpu/<type>" (GPUs of the cluster profile's type name), "cpu" (millicores) and
 * "memory" (bytes). A team without a quota (has_quota 0) is unlimited; a team with one has
 * a nominal quota of 0 of every resource its quota does not name. A borrowing limit is how
 * far above its nominal quota a team may go in a resource; a resource without one has none.
 * What the numbers mean for admission is the scheduler's business; the store keeps them.
 * The team STORE_TEAM_DEFAULT always exists (schema version 13 creates it, unlimited) and
 * owns everything made before teams.
 */
#define STORE_TEAM_DEFAULT "default"
#define STORE_TEAM_MAX_RESOURCES 64 /* resources one team names, quota and limit together */
#define STORE_TEAM_WEIGHT_MAX 1000

typedef struct store_team_res {
    char *resource;              /* "gpu/<type>", "cpu" or "memory" */
    int64_t quota;               /* >= 0; -1: not named in the quota */
    int64_t borrowing_limit;     /* >= 0; -1: no borrowing limit */
} store_team_res;

typedef struct store_team {
    char *name;                  /* a DNS label */
    int weight;                  /* 1..STORE_TEAM_WEIGHT_MAX */
    int has_quota;               /* 0: unlimited */
    int priority_preemption;     /* 1: a higher-priority job may preempt the team's lower ones */
    store_team_res *res;         /* by resource name; NULL when none */
    size_t nres;
    int64_t created_at_ms;
    int64_t updated_at_ms;
} store_team;

/* One resource a team's admitted jobs request, summed over their ranks. */
typedef struct store_team_use {
    char *resource;              /* as in store_team_res */
    int64_t amount;              /* > 0 */
} store_team_use;

typedef struct store_team_usage {
    store_team_use *use;         /* by resource name; NULL when none */
    size_t nuse;
    int64_t pending;             /* its PENDING jobs */
    int64_t admitted;            /* its jobs from ADMITTED to CANCELLING: what usage counts */
} store_team_usage;

/* Frees the members of n teams and the array. Accepts NULL. */
void store_teams_free(store_team *t, size_t n);
/* Frees the members of *u and zeroes it. */
void store_team_usage_clear(store_team_usage *u);
/* Stores t (borrowed; times ignored). TY_EEXISTS when the name is taken, TY_EINVAL for a
 * malformed team (weight, a negative amount, a resource named twice, too many). */
ty_err store_team_create(store *s, const store_team *t);
/* Replaces the weight, quota and borrowing limits of team t->name. TY_ENOTFOUND. */
ty_err store_team_update(store *s, const store_team *t);
/* Deletes a team. TY_ENOTFOUND; TY_ECONFLICT when it is STORE_TEAM_DEFAULT, has a job that
 * has not ended, or has a valid token (*why, when not NULL, is then a static reason). Its
 * ended jobs keep its name. */
ty_err store_team_delete(store *s, const char *name, const char **why);
/* One team. TY_ENOTFOUND. *out is new: free with store_teams_free(*out, 1). */
ty_err store_team_get(store *s, const char *name, store_team **out);
/* Every team by name. *out is new (NULL when none). */
ty_err store_teams_list(store *s, store_team **out, size_t *nout);
/*
 * What team `name`'s jobs request now, in one snapshot: the sums, over its jobs from ADMITTED
 * to CANCELLING, of the totals each job recorded at submission (GPUs by type, millicores,
 * bytes: per rank times workers.count of its normalized spec), and its pending and admitted
 * counts; two ranges of the (team, state) index. A team without jobs has none (not an
 * error). *out is zeroed first.
 */
ty_err store_team_usage_get(store *s, const char *name, store_team_usage *out);

/* ---- the node ledger ---------------------------------------------------- */

/*
 * Which node ended which attempt and why (node_failures), and the nodes taken out of rotation
 * for it (node_quarantine): facts only; what counts as a reason to quarantine is the
 * scheduler's (scheduler/quarantine.h). Node names are the backend's: a Kubernetes node, or a
 * GPU of the local machine ("gpu0").
 */
typedef struct store_node_failure {
    char *node;
    char *job_id;
    int attempt;
    int rank;
    int64_t time_ms;   /* when the rank ended */
    int exit_code;     /* -1 when it was killed by a signal */
    int signal;        /* 0 when none */
    char *cause;       /* what ended it, in words ("rank 1 exited with code 137 (OOMKilled)") */
} store_node_failure;

typedef struct store_node_quarantine {
    char *node;
    int64_t since_ms;        /* when it was quarantined */
    int64_t release_at_ms;   /* when it is released on its own */
    char *reason;            /* the policy's sentence */
    int64_t counted_from_ms; /* the failures it counted are after this (0: not kept) */
    int64_t released_ms;     /* 0 while quarantined */
    char *released_by;       /* "" while quarantined; a token's name, or "expired" */
} store_node_quarantine;

/* Frees the members of n rows and the array. Accept NULL. */
void store_node_failures_free(store_node_failure *f, size_t n);
void store_node_quarantines_free(store_node_quarantine *q, size_t n);

/* Appends f (borrowed; node, job_id and cause required) to the ledger, and deletes the rows
 * older than prune_before_ms in the same transaction (0: none), so that the ledger holds only
 * what a policy can still count or show. TY_EINVAL for a malformed row. */
ty_err store_node_failure_add(store *s, const store_node_failure *f, int64_t prune_before_ms);
/* The ledger's rows of node (NULL: every node) with time_ms >= since_ms, oldest first, at
 * most max (the newest kept when more). *out is new (NULL when none). */
ty_err store_node_failures(store *s, const char *node, int64_t since_ms, size_t max,
                           store_node_failure **out, size_t *nout);
/* Quarantines q->node (borrowed; released_* ignored), replacing an earlier quarantine of it.
 * TY_EINVAL. */
ty_err store_node_quarantine_put(store *s, const store_node_quarantine *q);
/* Releases node at now_ms, by `by` ("expired", a token's name). TY_ENOTFOUND when it is not
 * quarantined now. */
ty_err store_node_release(store *s, const char *node, int64_t now_ms, const char *by);
/* Every node ever quarantined (active_only: only those quarantined now), by name. *out is new
 * (NULL when none). */
ty_err store_node_quarantines(store *s, int active_only, store_node_quarantine **out,
                              size_t *nout);

/* ---- webhooks ---------------------------------------------------------- */

/*
 * CI webhooks: a named hook, its provider and the job template its deliveries fill. The
 * secret is never stored in clear: a GitHub or generic secret is needed again to compute
 * HMACs, so it is encrypted (AES-256-GCM, the hook's name as associated data) with a key kept
 * in "webhook-secrets.key" (32 random bytes, mode 0600, created on first use) in the
 * database's directory; a GitLab token is only compared, so only its SHA-256 is kept. A copy
 * of the database alone therefore reveals no secret.
 *
 * Registrations are rare admin writes: they use a connection of their own (waiting on the
 * writer's lock like another process would) instead of the group-commit writer.
 */
typedef struct store_webhook {
    char *name;
    char *provider;              /* "github", "gitlab" or "generic" */
    char *events_json;           /* a JSON array of event names */
    char *branches_json;         /* a JSON array of branch names; [] = every branch */
    char *template_json;         /* a JSON object: a job spec with ${...} placeholders */
    int64_t created_at_ms;
    /* Set by store_webhook_get() only: the secret in clear (github, generic) or the SHA-256
     * of the token (gitlab, secret_len 32); wiped by store_webhooks_free(). */
    unsigned char *secret;
    size_t secret_len;
} store_webhook;

/* Frees n hooks (secrets wiped first) and the array. Accepts NULL. */
void store_webhooks_free(store_webhook *hooks, size_t n);
/*
 * Stores w (borrowed; created_at_ms ignored): w->secret is the secret in clear, encrypted or
 * hashed here as its provider allows. TY_EEXISTS when a hook has that name; TY_EIO when the
 * key file cannot be created or read, or when others may read it (logged).
 */
ty_err store_webhook_create(store *s, const store_webhook *w);
/* Every hook by name, without secrets (secret NULL). */
ty_err store_webhooks_list(store *s, store_webhook **out, size_t *nout);
/* One hook with its secret (see store_webhook). TY_ENOTFOUND for an unknown name. */
ty_err store_webhook_get(store *s, const char *name, store_webhook **out);
/* TY_ENOTFOUND for an unknown name. The hook's delivery records go with it. */
ty_err store_webhook_delete(store *s, const char *name);
/*
 * A delivery is submitted with the idempotency key "webhook:<name>:<delivery id>"; the store
 * keeps that key's job (and the body's SHA-256) for as long as the job exists, not only the 24
 * hours of other idempotency keys. store_webhook_delivery() finds it: TY_OK with the job's id,
 * TY_ECONFLICT when the key came with another body_hash, TY_ENOTFOUND when it never came.
 */
ty_err store_webhook_delivery(store *s, const char *key, const unsigned char body_hash[32],
                              char id[STORE_ID_LEN + 1]);

/*
 * Replays. A hook's delivery is also known by a replay key, a 32-byte digest chosen by the
 * caller (api/webhooks.c: the SHA-256 of a GitHub or GitLab body, a generic delivery's
 * signature), kept with its job until expires_ms (wall clock, ms) whatever its delivery id.
 */
typedef struct store_webhook_replay {
    const char *hook;              /* borrowed */
    const unsigned char *digest;   /* 32 bytes, borrowed */
    int64_t expires_ms;
} store_webhook_replay;

/*
 * The job of a live replay key: TY_OK with its id, TY_ENOTFOUND when the key is unknown or
 * expired (or its job is gone).
 */
ty_err store_webhook_replay_get(store *s, const store_webhook_replay *r,
                                char id[STORE_ID_LEN + 1]);

/*
 * Stores a delivery's job (as store_jobs_submit() with one job, idem_key and body_hash may be
 * NULL) and records replay in the same transaction. When the replay key is live, or idem_key
 * came before with the same body_hash, nothing is inserted and *replayed is 1, with the first
 * job's id. TY_ECONFLICT: idem_key came with another body_hash. Expired replay keys are
 * deleted a few at a time by the same writes.
 */
ty_err store_webhook_submit(store *s, const store_job_new *job, const char *idem_key,
                            const unsigned char body_hash[32], const store_webhook_replay *replay,
                            char id[STORE_ID_LEN + 1], int *replayed);

/* ---- sweeps ------------------------------------------------------------ */

/*
 * A sweep: a job template tried over a search space, each trial an ordinary
 * job labelled with its sweep. All its trials are created with it, in one
 * transaction; each trial job records its sweep and the sweep's parallelism,
 * so that admission can bound the trials active at once (store_job.sweep_*).
 */
typedef struct store_sweep_new {
    const char *id;                 /* from store_sweep_id_new(); also in the trials' labels */
    const char *name;
    const char *algorithm;          /* "grid" or "random" */
    int parallelism;                /* trials active at once, >= 1 */
    const char *metric;             /* the objective's metric name */
    int maximize;                   /* goal: 1 maximize, 0 minimize */
    int stop_min_trials;            /* median early stopping: succeeded trials needed; < 0: off */
    int64_t stop_min_step;          /* ... and the first step it applies at */
    const char *body_json;          /* the request body, kept for the record */
    const char *team;               /* the owning team (NULL: STORE_TEAM_DEFAULT); the trials'
                                       own team and owner are the caller's to set alike */
    const char *owner;              /* the creating token's name; NULL: none */
    const store_job_new *trials;    /* trial i's job */
    const char *const *params_json; /* trial i's parameter values, a JSON object */
    size_t ntrials;                 /* >= 1 */
} store_sweep_new;

typedef struct store_sweep_trial {
    int64_t index;                  /* from 0 */
    char job_id[STORE_ID_LEN + 1];
    job_state state;
    char *params_json;
    int has_value;                  /* the trial reported the objective's metric */
    int64_t step;                   /* ... its highest step */
    double value;                   /* ... and the value there: the trial's objective value */
} store_sweep_trial;

typedef struct store_sweep {
    int64_t seq;                    /* creation order */
    char id[STORE_ID_LEN + 1];
    char *name;
    char *algorithm;
    char *metric;
    int parallelism;
    int maximize;
    int stop_min_trials;            /* < 0: no early stopping */
    int64_t stop_min_step;
    int64_t created_at_ms;
    int64_t cancelled_at_ms;        /* 0 unless a cancel was asked */
    int64_t ntrials;
    int64_t counts[JOB_STATE_COUNT]; /* trials in each state */
    store_sweep_trial *trials;      /* store_sweep_get() only: every trial, by index */
    size_t ntrials_read;
    char *team;                     /* the owning team */
    char *owner;                    /* the creating token's name; NULL before owners (v13) */
} store_sweep;

/* A fresh sweep id: the format of job ids (a millisecond timestamp, 80 random bits). */
ty_err store_sweep_id_new(char id[STORE_ID_LEN + 1]);
/*
 * Creates the sweep and all its trial jobs (each PENDING with its "Submitted"
 * event) in one transaction: all or none. TY_EINVAL for a malformed input,
 * TY_EEXISTS when the id is taken.
 */
ty_err store_sweep_create(store *s, const store_sweep_new *in);
/* One sweep with its trials and their objective values, in one snapshot. TY_ENOTFOUND. *out is
 * new: free with store_sweeps_free(*out, 1). */
ty_err store_sweep_get(store *s, const char *id, store_sweep **out);
/*
 * Sweeps newest first with their state counts (no trials), at most limit (1..1000), before the
 * cursor before_seq (0: from the newest); *next_before_seq is the next page's cursor, 0 after
 * the last page. *out is new (NULL when none).
 */
ty_err store_sweeps_list(store *s, const char *team, int64_t before_seq, int limit,
                         store_sweep **out, size_t *nout,
                         int64_t *next_before_seq);
void store_sweeps_free(store_sweep *sw, size_t n);
/*
 * Cancels every trial that has not ended, as a job cancel does (reason "Cancelled", message),
 * and marks the sweep cancelled, in one transaction; *ncancelled (may be NULL) counts the
 * trials moved. Idempotent. TY_ENOTFOUND for an unknown sweep.
 */
ty_err store_sweep_cancel(store *s, const char *id, const char *message, size_t *ncancelled);
/* "running" while a trial has not ended, then "cancelled" (a cancel was asked) or "finished";
 * from sw->counts. Static. */
const char *store_sweep_state(const store_sweep *sw);
/* TY_OK when sweep `id` exists and team is NULL or its team; TY_ENOTFOUND otherwise. */
ty_err store_sweep_visible(store *s, const char *id, const char *team);
/*
 * What median early stopping judges a trial on (the rule is scheduler/early_stop.h's; the store
 * only reads). Filled by store_sweep_stop_facts(); release with store_stop_facts_clear().
 */
typedef struct store_stop_facts {
    int rule;                               /* 1: the job is a trial of a sweep with the rule;
                                               0: nothing below is set */
    char metric[STORE_METRIC_NAME_MAX + 1]; /* the objective's metric */
    int maximize;                           /* the goal: 1 maximize, 0 minimize */
    int min_trials;                         /* the sweep's settings, as stored */
    int64_t min_step;
    int has_point;                          /* the trial reported the metric; 0: no more below */
    int64_t step;                           /* its highest step */
    double value;                           /* its value there */
    double *done;                           /* each SUCCEEDED trial's last value at a step <= step,
                                               in no order; trials with none are left out. Read
                                               only when step >= min_step (below it, where the
                                               sweep's rule does not look, NULL and 0) */
    size_t ndone;
} store_stop_facts;
/*
 * Reads, in one snapshot, the facts of job `id` for median early stopping: its sweep's rule,
 * its latest point of the objective and the succeeded trials' values up to that step. A job
 * outside sweeps with the rule costs one seek (f->rule is 0); a trial, three seeks, plus from
 * min_step on a walk of its sweep's trials with one seek per succeeded one. TY_OK whatever the
 * job is (an unknown job has no rule); TY_ENOMEM. *f is overwritten; f->done is new (also
 * cleared on error).
 */
ty_err store_sweep_stop_facts(store *s, const char *id, store_stop_facts *f);
/* Frees f->done and empties *f. Accepts NULL. */
void store_stop_facts_clear(store_stop_facts *f);
/*
 * Stops job `id` as a client's cancel would move it (CANCELLING, or CANCELLED before it ran),
 * through one job transition with reason and message (borrowed). A job a cancel would not move
 * (it ended, or is already stopping) is left alone: TY_OK with *stopped (may be NULL) 0; 1 when
 * it moved. TY_ENOTFOUND.
 */
ty_err store_sweep_stop_trial(store *s, const char *id, const char *reason, const char *message,
                              int *stopped);

/* ---- notifications --------------------------------------------------------- */

/*
 * Notifications out: a subscription names an http(s) URL, the terminal job events it wants
 * and optionally a queue and labels a job must have. When a job reaches SUCCEEDED, FAILED or
 * CANCELLED, a trigger on the job's state writes one delivery row (the outbox) per matching
 * subscription in the very transaction that writes the state: a transition that committed has
 * its deliveries committed with it, and none is lost to a crash after the commit. The store
 * only records "deliver event E of job J to subscription S"; server/notify.c sends the rows and
 * marks each through store_notify_mark(). The secret that signs a subscription's deliveries is
 * sealed like a webhook's (AES-256-GCM under the key file, "notification:<name>" as associated
 * data) and only store_notify_get() returns it.
 */
enum {
    STORE_NOTIFY_SUCCEEDED = 1u << 0, /* the event bit of a terminal state s: s - JOB_SUCCEEDED */
    STORE_NOTIFY_FAILED = 1u << 1,
    STORE_NOTIFY_CANCELLED = 1u << 2,
    STORE_NOTIFY_ALL = 7u,
};

typedef struct store_notify_sub {
    char *name;                  /* a DNS label, the subscription's id in the API */
    char *url;
    unsigned events;             /* STORE_NOTIFY_* bits, at least one */
    char *queue;                 /* only jobs of this queue; NULL: any */
    char *labels_json;           /* a JSON object of labels a job must all have; NULL: any */
    int64_t created_at_ms;
    /* store_notify_create(): the secret in clear (borrowed). store_notify_get(): a new copy,
     * wiped by store_notify_subs_free(). NULL otherwise. */
    unsigned char *secret;
    size_t secret_len;           /* 1..1024 */
} store_notify_sub;

/* Frees n subscriptions (secrets wiped first) and the array. Accepts NULL. */
void store_notify_subs_free(store_notify_sub *subs, size_t n);
/* Stores sub (borrowed; created_at_ms ignored). TY_EEXISTS when the name is taken; TY_EINVAL
 * for a missing member; TY_EIO when the key file cannot be used (logged). */
ty_err store_notify_create(store *s, const store_notify_sub *sub);
/* Every subscription by name, without secrets. */
ty_err store_notify_list(store *s, store_notify_sub **out, size_t *nout);
/* One subscription with its secret. TY_ENOTFOUND for an unknown name. */
ty_err store_notify_get(store *s, const char *name, store_notify_sub **out);
/* TY_ENOTFOUND for an unknown name. Its deliveries, pending or not, go with it. */
ty_err store_notify_delete(store *s, const char *name);

typedef enum store_delivery_state {
    STORE_DELIVERY_PENDING = 0,
    STORE_DELIVERY_DELIVERED = 1,
    STORE_DELIVERY_FAILED = 2,   /* given up */
} store_delivery_state;

/* One outbox row. */
typedef struct store_delivery {
    int64_t id;                  /* increasing; the receiver's deduplication key */
    char *sub;                   /* the subscription's name */
    char job_id[STORE_ID_LEN + 1];
    job_state event;             /* the terminal state the job reached */
    store_delivery_state state;
    int attempts;
    int64_t created_at_ms;       /* the transition's time */
    int64_t next_at_ms;          /* pending: when the next attempt is due */
    int64_t last_at_ms;          /* the last attempt; 0 before the first */
    int64_t done_at_ms;          /* delivered or failed; 0 while pending */
    int last_code;               /* the last attempt's HTTP status; 0: none (see last_error) */
    char *last_error;            /* "" when the last attempt got a response, or none was made */
} store_delivery;

/* Frees the members of n deliveries and the array. Accepts NULL. */
void store_deliveries_free(store_delivery *d, size_t n);
/* The subscription's deliveries, newest first, at most limit (1..1000). TY_ENOTFOUND for an
 * unknown subscription. */
ty_err store_notify_deliveries(store *s, const char *name, int limit, store_delivery **out,
                               size_t *nout);
/* Pending deliveries due at now_ms (next_at_ms <= now_ms), oldest due first, at most limit
 * (1..1000); *next_at_ms is the due time of the earliest pending row left, 0 when none. */
ty_err store_notify_due(store *s, int64_t now_ms, int limit, store_delivery **out, size_t *nout,
                        int64_t *next_at_ms);

/* The outcome of one attempt. */
typedef struct store_delivery_mark {
    int64_t id;
    store_delivery_state state;  /* PENDING: retry at next_at_ms */
    int64_t at_ms;               /* when the attempt was made */
    int64_t next_at_ms;
    int code;                    /* HTTP status, 0 when there was no response */
    const char *error;           /* NULL or "" when there was a response */
} store_delivery_mark;

/* Records an attempt of a pending delivery through the writer (attempts + 1). TY_ENOTFOUND
 * when the row is gone (its subscription was deleted) or no longer pending. */
ty_err store_notify_mark(store *s, const store_delivery_mark *m);

/*
 * Retention: deletes delivered and failed outbox rows whose last attempt was before
 * done_before_ms, oldest first, at most max_rows (1..100000) in one writer operation.
 * *rows (may be NULL) counts them; *more is 1 when more may be left (call again). Pending
 * rows are never deleted.
 */
ty_err store_notify_purge(store *s, int64_t done_before_ms, int max_rows, int64_t *rows,
                          int *more);

/*
 * Registers fn to be called by the writer thread after every commit that moved a job into a
 * terminal state (which may have queued deliveries). fn must be quick and must not call the
 * store. One hook per store; NULL removes it.
 */
void store_set_notify_hook(store *s, void (*fn)(void *ud), void *ud);

/* ---- statistics for /metrics --------------------------------------------- */

typedef struct store_stats {
    uint64_t jobs_by_state[JOB_STATE_COUNT];
    uint64_t jobs_submitted_total;   /* since this process opened the store */
    uint64_t commits_total;
    ty_histogram *commit_seconds;    /* borrowed: latency of each group commit */
    ty_histogram *commit_batch_ops;  /* borrowed: operations per group commit */
} store_stats;

void store_get_stats(store *s, store_stats *out);

#endif
