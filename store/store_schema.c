/*
 * store_schema.c - the database schema and its versioned migrations.
 *
 * PRAGMA user_version holds the number of migration steps applied. Each step
 * of migrations[] runs in its own BEGIN IMMEDIATE transaction together with
 * the user_version bump, so a crash leaves the database at a step boundary;
 * the version is re-read inside the transaction, so two processes opening a
 * fresh file at once apply each step exactly once. A database with a version
 * above the number of steps was written by a newer binary and is refused
 * (TY_ESCHEMA): running old code on it could corrupt data the new code relies
 * on. Steps are append-only: never edit a released step, add a new one.
 *
 * Why the indexes look like this (store_list.c walks them):
 *   jobs.seq           rowid; newest first is a backwards walk; keyset cursor
 *   jobs(id)           unique; ids are time-ordered and increase with seq, so
 *                      this index also maps created_* bounds to seq bounds
 *   jobs(state)        = (state, seq): one descending stream per state
 *   jobs(queue, state) = (queue, state, seq): queue with or without states
 *   jobs(name)         = (name, seq): the seqs of a name_prefix range
 *   job_labels         (key, value, seq): one descending stream per label
 *   jobs_pending_queue (queue, sweep, priority DESC, seq) of the PENDING jobs
 *                      only (partial): each (queue, sweep) line's admission
 *                      order, read in order without a sort, and the lists of
 *                      queues and of a queue's sweeps with PENDING jobs, one
 *                      seek each (loose index scans); jobs leave it when
 *                      admitted, so it stays small
 * job_events is keyed by its own seq and indexed by (job_seq, seq), so a job's
 * history is one range read, oldest first, and the change feed (events after
 * a seq) is a range of its primary key. attempts is keyed by (job_seq,
 * attempt): a job's attempts are one range, and the scheduler's rewrite of an
 * attempt's record is an upsert of one row. Tables are STRICT: a value of the
 * wrong type is an error, not a silent conversion.
 *
 * Versions:
 *   1  jobs, job_labels, job_events, idempotency_keys, tokens
 *   2  jobs.restarts, jobs.attempt_json (the current attempt's record),
 *      attempts, jobs_pending
 *   3  jobs_pending_queue replaces jobs_pending: admission merges the queues
 *      it may admit from, so a queue at its limit is never walked
 *   4  job_tokens (per-attempt tokens with which a job reports), metrics,
 *      metric_names, job_metric_names, metric_seq
 *   5  metric_batches replaces metrics_job_seq: the stream finds new points
 *      through one row per report and series instead of an index entry per
 *      point, which halved what ingestion writes
 *   6  webhooks: CI webhooks, their sealed secrets and job templates
 *   7  webhook_deliveries: a delivery id's job, kept past its idempotency key
 *   8  sweeps, sweep_trials; jobs.sweep and jobs.sweep_parallelism on a trial
 *   9  notify_subs, notify_outbox: notification subscriptions and their deliveries,
 *      queued by a trigger on a job's move into a terminal state
 *  10  jobs_pending_queue on (queue, sweep, priority, seq): a line per sweep
 *  11  job_metric_totals (a job's stored points and series, its end time) and its
 *      trigger; notify_outbox_done: the caps and the retention purges
 *  12  webhook_replays: a delivery's job by its body's SHA-256 (GitHub, GitLab) or its
 *      signature (generic), so a replayed delivery finds its first job
 *  13  teams, team_resources; tokens.team, jobs.team and .owner, the requested totals
 *      jobs.gpu_type, .gpus, .cpu_milli, .memory_bytes; sweeps.team and .owner; jobs_team
 *      (team, seq) is the list's team stream, jobs_team_state (team, state, seq) a team's
 *      usage and counts (covering from 21)
 *  14  job_secrets: a job's secret env values, sealed; dropped when the job ends
 *  15  admission by team: jobs_pending_team (team, queue, sweep, priority DESC, seq) of
 *      the PENDING jobs, a line per (team, queue, sweep) read like jobs_pending_queue's;
 *      jobs.pending_reason (the scheduler's last word on why a PENDING job waits, cleared
 *      by a trigger when it leaves PENDING) and jobs.preempted (cleared when it starts)
 *  16  teams.priority_preemption: the team's switch for preemption by priority within it
 *  17  pending_counts: the PENDING jobs of each line (team, queue, sweep or 0), priority and
 *      bucket of 1,024 seqs (seq >> 10), kept by the insertion and a trigger, so the place of a job in its line
 *      is a sum over buckets plus a count within one bucket (store_jobs_line_places)
 *  18  node_failures, node_quarantine: the node ledger
 *  19  jobs.attempt_json dropped: the current attempt's record is its row of attempts
 *  20  node_quarantine.counted_from_ms: where the failures that condemned the node begin
 *  21  jobs_team_state (team, state, gpu_type, gpus, cpu_milli, memory_bytes): a team's
 *      usage summed from the index alone
 *
 * Why the metrics tables look like this (store_metrics.c): a point is one row
 * of metrics keyed (job_seq, name_id, step) WITHOUT ROWID, so a series read by
 * step range is one range of the table itself, sorted, with no second lookup,
 * and "the same step again" is an upsert of that key (the last write wins).
 * A name is an integer (metric_names) so a row stays about 30 bytes whatever
 * the name's length. seq is global and increasing in commit order (the one
 * writer takes it from metric_seq, one row). The live stream reads "the
 * points of job J after seq X" through metric_batches: one row per report and
 * series, keyed (job_seq, last_seq), holding the report's seq interval and the
 * series' step range, so the points are a few range reads of metrics filtered
 * by seq, at the cost of one row per report and series rather than one index
 * entry per point (version 4 had an index (job_seq, seq) on metrics: half of
 * the ingestion's work).
 * job_metric_names lists a job's series without walking its points.
 * job_tokens is keyed by the token's SHA-256, so checking a token is one
 * seek; job_tokens_live holds only the tokens not revoked, so revoking a
 * job's tokens at its end is one seek too.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#include "common/ty_quantity.h"

/* 'TYd1': marks the file as a Trainyard database. */
#define STORE_APPLICATION_ID 0x54596431

static const char *const migrations[] = {
    /* 1: jobs, their labels and events, idempotency keys, API tokens. */
    "CREATE TABLE jobs ("
    "  seq        INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id         TEXT NOT NULL UNIQUE CHECK (length(id) = 26),"
    "  name       TEXT NOT NULL CHECK (length(name) > 0),"
    "  queue      TEXT NOT NULL CHECK (length(queue) > 0),"
    "  priority   INTEGER NOT NULL,"
    "  state      INTEGER NOT NULL CHECK (state BETWEEN 0 AND 8),"
    "  attempt    INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL,"
    "  spec       TEXT NOT NULL"
    ") STRICT;"
    "CREATE INDEX jobs_state ON jobs (state);"
    "CREATE INDEX jobs_queue_state ON jobs (queue, state);"
    "CREATE INDEX jobs_name ON jobs (name);"
    "CREATE TABLE job_labels ("
    "  key   TEXT NOT NULL CHECK (length(key) > 0),"
    "  value TEXT NOT NULL,"
    "  seq   INTEGER NOT NULL,"
    "  PRIMARY KEY (key, value, seq)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE TABLE job_events ("
    "  seq        INTEGER PRIMARY KEY,"
    "  job_seq    INTEGER NOT NULL,"
    "  time_ms    INTEGER NOT NULL,"
    "  from_state INTEGER CHECK (from_state BETWEEN 0 AND 8),"
    "  to_state   INTEGER NOT NULL CHECK (to_state BETWEEN 0 AND 8),"
    "  reason     TEXT NOT NULL CHECK (length(reason) > 0),"
    "  message    TEXT NOT NULL"
    ") STRICT;"
    "CREATE INDEX job_events_job ON job_events (job_seq);"
    "CREATE TABLE idempotency_keys ("
    "  key        TEXT PRIMARY KEY,"
    "  body_hash  BLOB NOT NULL CHECK (length(body_hash) = 32),"
    "  first_seq  INTEGER NOT NULL,"
    "  njobs      INTEGER NOT NULL CHECK (njobs > 0),"
    "  created_ms INTEGER NOT NULL"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ms);"
    "CREATE TABLE tokens ("
    "  name       TEXT PRIMARY KEY CHECK (length(name) > 0),"
    "  scopes     INTEGER NOT NULL CHECK (scopes BETWEEN 1 AND 7),"
    "  hash       BLOB NOT NULL CHECK (length(hash) = 32),"
    "  created_ms INTEGER NOT NULL,"
    "  revoked_ms INTEGER"
    ") STRICT;",

    /* 2: the scheduler's records: restart counts, attempts, the admission index. */
    "ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0);"
    "ALTER TABLE jobs ADD COLUMN attempt_json TEXT;"
    "CREATE TABLE attempts ("
    "  job_seq INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL CHECK (attempt > 0),"
    "  record  TEXT NOT NULL,"
    "  PRIMARY KEY (job_seq, attempt)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX jobs_pending ON jobs (priority DESC, seq) WHERE state = 0;",

    /* 3: the admission order per queue; the global one has no reader left. */
    "DROP INDEX jobs_pending;"
    "CREATE INDEX jobs_pending_queue ON jobs (queue, priority DESC, seq) WHERE state = 0;",

    /* 4: per-job tokens and the metrics workers report. */
    "CREATE TABLE job_tokens ("
    "  hash       BLOB PRIMARY KEY CHECK (length(hash) = 32),"
    "  job_seq    INTEGER NOT NULL,"
    "  attempt    INTEGER NOT NULL CHECK (attempt > 0),"
    "  created_ms INTEGER NOT NULL,"
    "  revoked_ms INTEGER"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX job_tokens_live ON job_tokens (job_seq) WHERE revoked_ms IS NULL;"
    "CREATE TABLE metric_names ("
    "  id   INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64)"
    ") STRICT;"
    "CREATE TABLE job_metric_names ("
    "  job_seq INTEGER NOT NULL,"
    "  name_id INTEGER NOT NULL,"
    "  PRIMARY KEY (job_seq, name_id)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE TABLE metrics ("
    "  job_seq INTEGER NOT NULL,"
    "  name_id INTEGER NOT NULL,"
    "  step    INTEGER NOT NULL CHECK (step >= 0),"
    "  value   REAL NOT NULL,"
    "  time_ms INTEGER NOT NULL,"
    "  seq     INTEGER NOT NULL,"
    "  PRIMARY KEY (job_seq, name_id, step)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX metrics_job_seq ON metrics (job_seq, seq);"
    "CREATE TABLE metric_seq ("
    "  id   INTEGER PRIMARY KEY CHECK (id = 1),"
    "  last INTEGER NOT NULL"
    ") STRICT;"
    "INSERT INTO metric_seq (id, last) VALUES (1, 0);",

    /* 5: the stream's way to new points, one row per report and series. A database of
     * version 4 gets one batch per series covering all its points (their seqs overlap other
     * series': store_metrics_since() allows that). */
    "DROP INDEX metrics_job_seq;"
    "CREATE TABLE metric_batches ("
    "  job_seq   INTEGER NOT NULL,"
    "  last_seq  INTEGER NOT NULL,"
    "  name_id   INTEGER NOT NULL,"
    "  first_seq INTEGER NOT NULL CHECK (first_seq <= last_seq),"
    "  step_min  INTEGER NOT NULL,"
    "  step_max  INTEGER NOT NULL CHECK (step_min <= step_max),"
    "  PRIMARY KEY (job_seq, last_seq, name_id)"
    ") STRICT, WITHOUT ROWID;"
    "INSERT INTO metric_batches (job_seq, last_seq, name_id, first_seq, step_min, step_max) "
    "  SELECT job_seq, max(seq), name_id, min(seq), min(step), max(step) FROM metrics "
    "  GROUP BY job_seq, name_id;",

    /* 6: CI webhooks (store_webhooks.c); a delivery's id is kept with its job as an
     * idempotency key ("webhook:<name>:<delivery id>"). */
    "CREATE TABLE webhooks ("
    "  name       TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63),"
    "  provider   TEXT NOT NULL CHECK (provider IN ('github', 'gitlab', 'generic')),"
    "  events     TEXT NOT NULL,"
    "  branches   TEXT NOT NULL,"
    "  template   TEXT NOT NULL,"
    "  secret     BLOB NOT NULL,"
    "  created_ms INTEGER NOT NULL"
    ") STRICT, WITHOUT ROWID;",

    /* 7: a webhook delivery's job for as long as the job exists, past the purge of its
     * idempotency key: written by a trigger in the transaction that stores the job. */
    "CREATE TABLE webhook_deliveries ("
    "  key       TEXT PRIMARY KEY,"
    "  body_hash BLOB NOT NULL CHECK (length(body_hash) = 32),"
    "  job_seq   INTEGER NOT NULL"
    ") STRICT, WITHOUT ROWID;"
    "CREATE TRIGGER webhook_deliveries_record AFTER INSERT ON idempotency_keys "
    "  WHEN new.key LIKE 'webhook:%' BEGIN"
    "  INSERT OR IGNORE INTO webhook_deliveries (key, body_hash, job_seq)"
    "    VALUES (new.key, new.body_hash, new.first_seq);"
    "  END;",

    /* 8: sweeps (store_sweeps.c). A trial job carries its sweep's seq and parallelism so that
     * admission bounds a sweep's active trials from the job rows it reads anyway. */
    "CREATE TABLE sweeps ("
    "  seq             INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id              TEXT NOT NULL UNIQUE CHECK (length(id) = 26),"
    "  name            TEXT NOT NULL CHECK (length(name) > 0),"
    "  algorithm       TEXT NOT NULL CHECK (algorithm IN ('grid', 'random')),"
    "  parallelism     INTEGER NOT NULL CHECK (parallelism > 0),"
    "  metric          TEXT NOT NULL CHECK (length(metric) > 0),"
    "  maximize        INTEGER NOT NULL CHECK (maximize IN (0, 1)),"
    "  stop_min_trials INTEGER CHECK (stop_min_trials >= 0),"
    "  stop_min_step   INTEGER CHECK (stop_min_step >= 0),"
    "  body            TEXT NOT NULL,"
    "  created_ms      INTEGER NOT NULL,"
    "  cancelled_ms    INTEGER"
    ") STRICT;"
    "CREATE TABLE sweep_trials ("
    "  sweep_seq INTEGER NOT NULL,"
    "  trial     INTEGER NOT NULL CHECK (trial >= 0),"
    "  job_seq   INTEGER NOT NULL,"
    "  params    TEXT NOT NULL,"
    "  PRIMARY KEY (sweep_seq, trial)"
    ") STRICT, WITHOUT ROWID;"
    "ALTER TABLE jobs ADD COLUMN sweep INTEGER;"
    "ALTER TABLE jobs ADD COLUMN sweep_parallelism INTEGER CHECK (sweep_parallelism > 0);",

    /* 9: notification subscriptions and the outbox of their deliveries (store_notify.c). The
     * trigger queues a delivery per matching subscription in the statement, hence the
     * transaction, that moves a job into SUCCEEDED (6), FAILED (7) or CANCELLED (8); event bit
     * state - 6 of a subscription's events selects it, then its queue and labels when set. */
    "CREATE TABLE notify_subs ("
    "  id         INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name       TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 63),"
    "  url        TEXT NOT NULL CHECK (length(url) > 0),"
    "  events     INTEGER NOT NULL CHECK (events BETWEEN 1 AND 7),"
    "  queue      TEXT,"
    "  labels     TEXT CHECK (labels IS NULL OR json_type(labels) = 'object'),"
    "  secret     BLOB NOT NULL,"
    "  created_ms INTEGER NOT NULL"
    ") STRICT;"
    "CREATE TABLE notify_outbox ("
    "  id         INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  sub_id     INTEGER NOT NULL,"
    "  job_seq    INTEGER NOT NULL,"
    "  event      INTEGER NOT NULL CHECK (event BETWEEN 6 AND 8),"
    "  state      INTEGER NOT NULL DEFAULT 0 CHECK (state BETWEEN 0 AND 2),"
    "  attempts   INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),"
    "  created_ms INTEGER NOT NULL,"
    "  next_ms    INTEGER NOT NULL,"
    "  last_ms    INTEGER NOT NULL DEFAULT 0,"
    "  done_ms    INTEGER NOT NULL DEFAULT 0,"
    "  last_code  INTEGER NOT NULL DEFAULT 0,"
    "  last_error TEXT NOT NULL DEFAULT ''"
    ") STRICT;"
    "CREATE INDEX notify_outbox_due ON notify_outbox (next_ms) WHERE state = 0;"
    "CREATE INDEX notify_outbox_sub ON notify_outbox (sub_id);"
    "CREATE TRIGGER notify_outbox_queue AFTER UPDATE OF state ON jobs"
    "  WHEN new.state BETWEEN 6 AND 8 AND old.state < 6 BEGIN"
    "  INSERT INTO notify_outbox (sub_id, job_seq, event, created_ms, next_ms)"
    "    SELECT s.id, new.seq, new.state, new.updated_ms, new.updated_ms FROM notify_subs AS s"
    "    WHERE (s.events >> (new.state - 6)) & 1"
    "      AND (s.queue IS NULL OR s.queue = new.queue)"
    "      AND NOT EXISTS (SELECT 1 FROM json_each(s.labels) AS l WHERE NOT EXISTS ("
    "        SELECT 1 FROM job_labels AS jl WHERE jl.key = l.key AND jl.value = l.value"
    "        AND jl.seq = new.seq));"
    "  END;",

    /* 10: admission lines per (queue, sweep): a sweep's trials wait in their queue's order
     * but apart from the other jobs, so a sweep at its parallelism is never walked. */
    "DROP INDEX jobs_pending_queue;"
    "CREATE INDEX jobs_pending_queue ON jobs (queue, sweep, priority DESC, seq) WHERE state = 0;",

    /* 11: per-job metric totals (store_metrics.c): the points and series a job stores, kept by
     * the report that writes them, so the caps cost one seek; ended_ms, set by a trigger in
     * the transaction that ends the job, lets retention find old jobs' metrics by one index
     * range. notify_outbox_done: finished deliveries by the time they finished, for theirs. */
    "CREATE TABLE job_metric_totals ("
    "  job_seq  INTEGER PRIMARY KEY,"
    "  points   INTEGER NOT NULL CHECK (points >= 0),"
    "  series   INTEGER NOT NULL CHECK (series >= 0),"
    "  ended_ms INTEGER"
    ") STRICT;"
    "CREATE INDEX job_metric_totals_ended ON job_metric_totals (ended_ms) "
    "  WHERE ended_ms IS NOT NULL;"
    "INSERT INTO job_metric_totals (job_seq, points, series, ended_ms)"
    "  SELECT n.job_seq, (SELECT count(*) FROM metrics AS m WHERE m.job_seq = n.job_seq),"
    "    count(*), (SELECT j.updated_ms FROM jobs AS j WHERE j.seq = n.job_seq AND j.state >= 6)"
    "  FROM job_metric_names AS n GROUP BY n.job_seq;"
    "CREATE TRIGGER job_metric_totals_end AFTER UPDATE OF state ON jobs"
    "  WHEN new.state BETWEEN 6 AND 8 AND old.state < 6 BEGIN"
    "  UPDATE job_metric_totals SET ended_ms = new.updated_ms WHERE job_seq = new.seq;"
    "  END;"
    "CREATE INDEX notify_outbox_done ON notify_outbox (done_ms) WHERE state > 0;",

    /* 12: replays of webhook deliveries (store_webhooks.c): the job a hook's delivery made,
     * by the SHA-256 of a GitHub or GitLab body (24 hours) or a generic delivery's signature
     * (its 5-minute window), written in the job's transaction; purged by expiry. */
    "CREATE TABLE webhook_replays ("
    "  hook       TEXT NOT NULL,"
    "  digest     BLOB NOT NULL CHECK (length(digest) = 32),"
    "  job_seq    INTEGER NOT NULL,"
    "  expires_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (hook, digest)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX webhook_replays_expires ON webhook_replays (expires_ms);",

    /* 13: teams (store_teams.c) and who owns what. Tokens, jobs and sweeps made before belong
     * to the team "default" (unlimited); their owner is unknown (NULL). A job records what it
     * requests in total (per rank times its workers) so a team's usage is a sum over one
     * index range; jobs that have not ended get theirs from their spec here (ty_quantity() is
     * registered by store_schema_migrate_to()), ended ones keep 0: usage never counts them. */
    "CREATE TABLE teams ("
    "  name       TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63),"
    "  weight     INTEGER NOT NULL CHECK (weight BETWEEN 1 AND 1000),"
    "  has_quota  INTEGER NOT NULL CHECK (has_quota IN (0, 1)),"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL"
    ") STRICT, WITHOUT ROWID;"
    "CREATE TABLE team_resources ("
    "  team            TEXT NOT NULL,"
    "  resource        TEXT NOT NULL CHECK (length(resource) > 0),"
    "  quota           INTEGER CHECK (quota >= 0),"
    "  borrowing_limit INTEGER CHECK (borrowing_limit >= 0),"
    "  PRIMARY KEY (team, resource)"
    ") STRICT, WITHOUT ROWID;"
    "INSERT INTO teams (name, weight, has_quota, created_ms, updated_ms) VALUES ('default', 1, 0,"
    "  CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),"
    "  CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));"
    "ALTER TABLE tokens ADD COLUMN team TEXT NOT NULL DEFAULT 'default';"
    "ALTER TABLE jobs ADD COLUMN team TEXT NOT NULL DEFAULT 'default';"
    "ALTER TABLE jobs ADD COLUMN owner TEXT;"
    "ALTER TABLE jobs ADD COLUMN gpu_type TEXT;"
    "ALTER TABLE jobs ADD COLUMN gpus INTEGER NOT NULL DEFAULT 0 CHECK (gpus >= 0);"
    "ALTER TABLE jobs ADD COLUMN cpu_milli INTEGER NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0);"
    "ALTER TABLE jobs ADD COLUMN memory_bytes INTEGER NOT NULL DEFAULT 0 "
    "  CHECK (memory_bytes >= 0);"
    "UPDATE jobs SET gpu_type = json_extract(spec, '$.resources.gpu.type'),"
    "  gpus = coalesce(json_extract(spec, '$.workers.count') *"
    "    json_extract(spec, '$.resources.gpu.count'), 0),"
    "  cpu_milli = coalesce(json_extract(spec, '$.workers.count') *"
    "    ty_quantity(json_extract(spec, '$.resources.cpu'), 3), 0),"
    "  memory_bytes = coalesce(json_extract(spec, '$.workers.count') *"
    "    ty_quantity(json_extract(spec, '$.resources.memory'), 0), 0)"
    "  WHERE state < 6;"
    "CREATE INDEX jobs_team ON jobs (team);"
    "CREATE INDEX jobs_team_state ON jobs (team, state);"
    "ALTER TABLE sweeps ADD COLUMN team TEXT NOT NULL DEFAULT 'default';"
    "ALTER TABLE sweeps ADD COLUMN owner TEXT;"
    "CREATE INDEX sweeps_team ON sweeps (team);",

    /* 14: jobs' secret env values (store_secrets.c), sealed under the key file, written in
     * the job's own transaction; deleted in the transaction that ends the job. */
    "CREATE TABLE job_secrets ("
    "  job_seq INTEGER NOT NULL,"
    "  name    TEXT NOT NULL CHECK (length(name) > 0),"
    "  sealed  BLOB NOT NULL,"
    "  PRIMARY KEY (job_seq, name)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE TRIGGER job_secrets_end AFTER UPDATE OF state ON jobs"
    "  WHEN new.state BETWEEN 6 AND 8 AND old.state < 6 BEGIN"
    "  DELETE FROM job_secrets WHERE job_seq = new.seq;"
    "  END;",
    /* 15 */
    "CREATE INDEX jobs_pending_team ON jobs (team, queue, sweep, priority DESC, seq)"
    "  WHERE state = 0;"
    "ALTER TABLE jobs ADD COLUMN pending_reason TEXT;"
    "ALTER TABLE jobs ADD COLUMN preempted INTEGER NOT NULL DEFAULT 0 CHECK (preempted IN (0, 1));"
    "CREATE TRIGGER jobs_pending_reason_end AFTER UPDATE OF state ON jobs"
    "  WHEN new.state <> 0 AND (old.state = 0 OR new.state = 2) BEGIN"
    "  UPDATE jobs SET pending_reason = NULL,"
    "    preempted = CASE WHEN new.state = 2 THEN 0 ELSE preempted END WHERE seq = new.seq;"
    "  END;",
    /* 16 */
    "ALTER TABLE teams ADD COLUMN priority_preemption INTEGER NOT NULL DEFAULT 0"
    "  CHECK (priority_preemption IN (0, 1));",
    /* 17: how many PENDING jobs each line has per priority and bucket of 1,024 seqs
     * (STORE_PENDING_BUCKET_SHIFT), so that a job's place in its line costs a walk of the
     * buckets ahead of it and of its own bucket, not of every job ahead of it. The insertion
     * adds a batch's jobs with one statement (store_jobs.c: a trigger per row halved the
     * submissions' rate); a trigger keeps it on every change of a job's state, line or
     * priority that moves it into, out of or within PENDING (a sweep's trials get their sweep
     * after their insert); a bucket left empty is deleted. */
    "CREATE TABLE pending_counts ("
    "  team     TEXT NOT NULL,"
    "  queue    TEXT NOT NULL,"
    "  sweep    INTEGER NOT NULL,"
    "  priority INTEGER NOT NULL,"
    "  bucket   INTEGER NOT NULL,"
    "  n        INTEGER NOT NULL,"
    "  PRIMARY KEY (team, queue, sweep, priority, bucket)"
    ") STRICT, WITHOUT ROWID;"
    "INSERT INTO pending_counts (team, queue, sweep, priority, bucket, n)"
    "  SELECT team, queue, coalesce(sweep, 0), priority, seq >> 10, count(*) FROM jobs"
    "  WHERE state = 0 GROUP BY 1, 2, 3, 4, 5;"
    "CREATE TRIGGER pending_counts_update"
    "  AFTER UPDATE OF state, team, queue, sweep, priority ON jobs"
    "  WHEN (old.state = 0 OR new.state = 0) AND (old.state IS NOT new.state"
    "    OR old.team IS NOT new.team OR old.queue IS NOT new.queue"
    "    OR old.sweep IS NOT new.sweep OR old.priority IS NOT new.priority) BEGIN"
    "  UPDATE pending_counts SET n = n - 1 WHERE old.state = 0 AND team = old.team"
    "    AND queue = old.queue AND sweep = coalesce(old.sweep, 0) AND priority = old.priority"
    "    AND bucket = old.seq >> 10;"
    "  DELETE FROM pending_counts WHERE old.state = 0 AND team = old.team"
    "    AND queue = old.queue AND sweep = coalesce(old.sweep, 0) AND priority = old.priority"
    "    AND bucket = old.seq >> 10 AND n <= 0;"
    "  INSERT INTO pending_counts (team, queue, sweep, priority, bucket, n)"
    "    SELECT new.team, new.queue, coalesce(new.sweep, 0), new.priority, new.seq >> 10, 1"
    "    WHERE new.state = 0"
    "    ON CONFLICT (team, queue, sweep, priority, bucket) DO UPDATE SET n = n + 1;"
    "  END;",
    /* 18: the node ledger (store_nodes.c): which node ended which attempt and why, and the
     * nodes taken out of rotation for it. A row of node_quarantine stays after its release
     * (released_ms): failures before the release no longer count against the node. */
    "CREATE TABLE node_failures ("
    "  seq       INTEGER PRIMARY KEY,"
    "  node      TEXT NOT NULL CHECK (length(node) > 0),"
    "  job_id    TEXT NOT NULL,"
    "  attempt   INTEGER NOT NULL CHECK (attempt > 0),"
    "  rank      INTEGER NOT NULL CHECK (rank >= 0),"
    "  time_ms   INTEGER NOT NULL,"
    "  exit_code INTEGER NOT NULL,"
    "  signal    INTEGER NOT NULL,"
    "  cause     TEXT NOT NULL"
    ") STRICT;"
    "CREATE INDEX node_failures_node ON node_failures (node, time_ms);"
    "CREATE INDEX node_failures_time ON node_failures (time_ms);"
    "CREATE TABLE node_quarantine ("
    "  node          TEXT PRIMARY KEY CHECK (length(node) > 0),"
    "  since_ms      INTEGER NOT NULL,"
    "  release_at_ms INTEGER NOT NULL,"
    "  reason        TEXT NOT NULL,"
    "  released_ms   INTEGER NOT NULL DEFAULT 0,"
    "  released_by   TEXT NOT NULL DEFAULT ''"
    ") STRICT, WITHOUT ROWID;",
    /* 19: the current attempt's record is read from attempts (STORE_JOB_COLUMNS), not kept
     * a second time in jobs.attempt_json: each record the scheduler writes rewrote the
     * job's row, spec and all, besides its row of attempts. Both were always written
     * together; a record that reached only the jobs row is copied over first. */
    "INSERT INTO attempts (job_seq, attempt, record)"
    "  SELECT seq, attempt, attempt_json FROM jobs"
    "  WHERE attempt > 0 AND attempt_json IS NOT NULL"
    "  ON CONFLICT (job_seq, attempt) DO NOTHING;"
    "ALTER TABLE jobs DROP COLUMN attempt_json;",
    /* 20: a quarantine keeps where the failures it counted begin (after the window's start and
     * after the node's last release), so that its evidence is those failures: the upsert of a
     * new quarantine forgets the release before it. 0 for rows written before: the window. */
    "ALTER TABLE node_quarantine ADD COLUMN counted_from_ms INTEGER NOT NULL DEFAULT 0;",
    /* 21: jobs_team_state also holds what a team's usage sums (store_teams.c), so that the
     * sums read the index alone instead of a row of jobs, spec and all, for every job held.
     * A reader's page cache starts empty after any commit of the writer's, so each /metrics
     * or GET /v1/teams read them all again: 3.2 to 3.6 ms of CPU with 1,000 jobs held, 0.8 to
     * 0.9 ms from the index. The columns are written once, at submission; a move of state
     * moves the entry as before. */
    "DROP INDEX jobs_team_state;"
    "CREATE INDEX jobs_team_state ON jobs (team, state, gpu_type, gpus, cpu_milli, "
    "  memory_bytes);",
};

#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_schema_version(void)
{
    return NMIGRATIONS;
}

static void set_err(char *err, size_t errlen, const char *msg, const char *detail)
{
    if (err && errlen)
        snprintf(err, errlen, "%s%s%s", msg, detail ? ": " : "", detail ? detail : "");
}

static int pragma_int(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

ty_err store_schema_migrate(sqlite3 *db, char *err, size_t errlen)
{
    return store_schema_migrate_to(db, NMIGRATIONS, err, errlen);
}

/*
 * ty_quantity(text, scale): the Kubernetes quantity text times 10^scale as an integer
 * (ty_quantity_scaled()), NULL when it is NULL, not a quantity, negative or too large.
 * Registered on the connection that migrates, which is the writer's: version 13 and every
 * job insertion (store_jobs.c) compute a job's requested totals with it.
 */
static void sql_quantity(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    int64_t v = 0;
    const unsigned char *text = sqlite3_value_text(argv[0]);
    int scale = sqlite3_value_int(argv[1]);
    (void)argc;
    if (!text || scale < 0 || scale > 18 ||
        ty_quantity_scaled((const char *)text, (size_t)sqlite3_value_bytes(argv[0]), scale,
                           &v) != TY_OK ||
        v < 0) {
        sqlite3_result_null(ctx);
        return;
    }
    sqlite3_result_int64(ctx, v);
}

ty_err store_schema_migrate_to(sqlite3 *db, int target, char *err, size_t errlen)
{
    ty_err e = TY_OK;
    int in_tx = 0;
    if (target < 1 || target > NMIGRATIONS)
        return TY_EINVAL;
    if (sqlite3_create_function(db, "ty_quantity", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                sql_quantity, NULL, NULL) != SQLITE_OK) {
        set_err(err, errlen, "cannot register ty_quantity()", sqlite3_errmsg(db));
        return TY_EINTERNAL;
    }
    for (;;) {
        int version = 0, app_id = 0, rc;
        if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) != SQLITE_OK) {
            e = store_sqlite_err(rc);
            set_err(err, errlen, "cannot lock the database for migration", sqlite3_errmsg(db));
            goto out;
        }
        in_tx = 1;
        if ((rc = pragma_int(db, "PRAGMA user_version", &version)) != SQLITE_OK ||
            (rc = pragma_int(db, "PRAGMA application_id", &app_id)) != SQLITE_OK) {
            e = rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? TY_ESCHEMA : store_sqlite_err(rc);
            set_err(err, errlen, "cannot read the schema version", sqlite3_errmsg(db));
            goto out;
        }
        if (app_id != 0 && app_id != STORE_APPLICATION_ID) {
            e = TY_ESCHEMA;
            set_err(err, errlen, "not a Trainyard database (foreign application_id)", NULL);
            goto out;
        }
        if (version > NMIGRATIONS) {
            e = TY_ESCHEMA;
            if (err && errlen)
                snprintf(err, errlen,
                         "database schema version %d is newer than this binary's version %d; "
                         "upgrade trainyard",
                         version, NMIGRATIONS);
            goto out;
        }
        if (version >= target)
            break;
        char bump[96];
        int n = snprintf(bump, sizeof bump, "PRAGMA user_version = %d; PRAGMA application_id = %d",
                         version + 1, STORE_APPLICATION_ID);
        if (n < 0 || (size_t)n >= sizeof bump) {
            e = TY_EINTERNAL;
            goto out;
        }
        char *msg = NULL;
        if ((rc = sqlite3_exec(db, migrations[version], NULL, NULL, &msg)) != SQLITE_OK ||
            (rc = sqlite3_exec(db, bump, NULL, NULL, &msg)) != SQLITE_OK) {
            e = TY_ESCHEMA;
            if (err && errlen)
                snprintf(err, errlen, "migration to schema version %d failed: %s", version + 1,
                         msg ? msg : sqlite3_errstr(rc));
            sqlite3_free(msg);
            goto out;
        }
        if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
            e = store_sqlite_err(rc);
            set_err(err, errlen, "cannot commit a migration", sqlite3_errmsg(db));
            goto out;
        }
        in_tx = 0;
    }
out:
    if (in_tx)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return e;
}
