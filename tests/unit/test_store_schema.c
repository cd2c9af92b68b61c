/* Unit tests for store/store_schema.c: versioned migrations. */
#include <sqlite3.h>

#include "store/store_int.h"
#include "tests/unit/test_store_util.h"

static int db_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void db_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* Makes the database at path as an older binary left it: schema version `version`,
 * then the rows of sql. */
static void db_at_version(const char *path, int version, const char *sql)
{
    sqlite3 *db = NULL;
    char err[256] = "";
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                     SQLITE_OK);
    if (store_schema_migrate_to(db, version, err, sizeof err) != TY_OK)
        fail_msg("migrating to version %d: %s", version, err);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static void test_fresh_database_gets_current_version(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_store(&t);
    assert_true(store_schema_version() >= 1);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
    static const char *const objects[] = {"jobs",   "job_labels", "job_events",
                                          "idempotency_keys", "tokens", "attempts",
                                          "jobs_pending_queue"};
    for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_schema WHERE name = '%s'",
                 objects[i]);
        assert_int_equal(db_int(t.db, sql), 1);
    }
    /* Replaced by jobs_pending_queue in version 3. */
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_pending'"),
                     0);
    store_close(s);
    tdir_remove(&t);
}

/*
 * The schema's CHECKs and the state machine's numbers are one format: every state of
 * common/job_state.h fits jobs.state and job_events' from/to, and nothing past the
 * last does (a new state needs a migration that widens the CHECKs).
 */
static void test_state_checks_match_the_state_machine(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store_close(open_store(&t));
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(t.db, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    for (int s = JOB_STATE_NONE; s <= JOB_STATE_COUNT; s++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "INSERT INTO jobs (id, name, queue, priority, state, created_ms, updated_ms, "
                 "spec) VALUES ('%026d', 'n', 'q', 0, %d, 0, 0, '{}')",
                 s + 1, s);
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        int want = s >= 0 && s < JOB_STATE_COUNT ? SQLITE_OK : SQLITE_CONSTRAINT;
        if (rc != want)
            fail_msg("jobs.state = %d (%s): sqlite says %d, expected %d", s, job_state_name(s),
                     rc, want);
        snprintf(sql, sizeof sql,
                 "INSERT INTO job_events (job_seq, time_ms, from_state, to_state, reason, "
                 "message) VALUES ((SELECT max(seq) FROM jobs), 0, %d, %d, 'r', '')",
                 s, s);
        if (want == SQLITE_OK) {
            rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                fail_msg("job_events with state %d: sqlite says %d (%s)", s, rc,
                         sqlite3_errmsg(db));
        }
    }
    sqlite3_close(db);
    tdir_remove(&t);
}

static void test_wal_mode(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_store(&t);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(t.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    store_close(s);
    tdir_remove(&t);
}

static void test_reopen_is_idempotent_and_keeps_data(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store *s = open_store(&t);
    store_job *j = submit_one(s, "keep-me", "default");
    char id[STORE_ID_LEN + 1];
    memcpy(id, j->id, sizeof id);
    store_jobs_free(j, 1);
    store_close(s);
    for (int round = 0; round < 2; round++) {
        s = open_store(&t);
        assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
        store_job *got = NULL;
        assert_int_equal(store_job_get(s, id, &got), TY_OK);
        assert_string_equal(got->name, "keep-me");
        store_jobs_free(got, 1);
        store_stats st;
        store_get_stats(s, &st);
        assert_int_equal(st.jobs_by_state[JOB_PENDING], 1);
        store_close(s);
    }
    tdir_remove(&t);
}

static void test_newer_schema_is_refused(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    store_close(open_store(&t));
    char sql[64], want[96];
    int newer = store_schema_version() + 1;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", newer);
    db_exec(t.db, sql);

    store *s = NULL;
    char err[256] = "";
    assert_int_equal(store_open(t.db, NULL, &s, err, sizeof err), TY_ESCHEMA);
    assert_null(s);
    snprintf(want, sizeof want, "version %d", newer);
    assert_non_null(strstr(err, want));
    snprintf(want, sizeof want, "version %d", store_schema_version());
    assert_non_null(strstr(err, want));
    /* Refusing did not touch the file. */
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), newer);
    tdir_remove(&t);
}

/*
 * A database left at version 1 by an older binary: opening it applies the
 * later steps and keeps its jobs, which get no restarts and no attempt yet.
 */
static void test_version_1_is_migrated(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v1_job[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec) "
        "VALUES ('01j0000000000000000000000a', 'old', 'default', 7, 0, 0, 1000, 1000, '{}');"
        "INSERT INTO job_events (job_seq, time_ms, from_state, to_state, reason, message) "
        "VALUES (1, 1000, NULL, 0, 'Submitted', '')";
    db_at_version(t.db, 1, v1_job);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), 1);
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM pragma_table_info('jobs')"), 10);
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'attempts'"), 0);

    store *s = open_store(&t);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, "01j0000000000000000000000a", &j), TY_OK);
    assert_string_equal(j->name, "old");
    assert_int_equal(j->priority, 7);
    assert_int_equal(j->state, JOB_PENDING);
    assert_int_equal(j->restarts, 0);
    assert_null(j->attempt_json);
    store_jobs_free(j, 1);
    store_stats st;
    store_get_stats(s, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 1);

    /* The new parts work on the old job: the admission order, records, the feed. */
    size_t n = 0;
    assert_int_equal(store_jobs_pending(s, "default", 0, 0, 10, &j, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(j->id, "01j0000000000000000000000a");
    store_jobs_free(j, n);
    store_update u = {.id = "01j0000000000000000000000a",
                      .from = JOB_PENDING,
                      .to = JOB_PENDING,
                      .attempt = 1,
                      .attempt_json = "{}",
                      .restarts = 2};
    assert_int_equal(store_jobs_update(s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_ECONFLICT); /* attempt 0: no record for attempt 1 yet */
    u.attempt_json = NULL;
    assert_int_equal(store_jobs_update(s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(store_job_get(s, "01j0000000000000000000000a", &j), TY_OK);
    assert_int_equal(j->restarts, 2);
    store_jobs_free(j, 1);
    store_change *ch = NULL;
    assert_int_equal(store_changes(s, 0, 10, &ch, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ch[0].from, JOB_STATE_NONE);
    free(ch);
    store_close(s);
    tdir_remove(&t);
}

/*
 * A database left at version 2 with jobs waiting in two queues: version 3
 * replaces the global admission index by one per queue, and the waiting jobs
 * are found in it, each queue in its own order.
 */
static void test_version_2_is_migrated(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v2_jobs[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec) VALUES "
        "('01j0000000000000000000000a', 'j1', 'sweep', 0, 0, 0, 1000, 1000, '{}'),"
        "('01j0000000000000000000000b', 'j2', 'other', 0, 0, 0, 1001, 1001, '{}'),"
        "('01j0000000000000000000000c', 'j3', 'sweep', 5, 0, 0, 1002, 1002, '{}'),"
        "('01j0000000000000000000000d', 'j4', 'done', 9, 6, 1, 1003, 1003, '{}')";
    db_at_version(t.db, 2, v2_jobs);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), 2);
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_pending'"),
                     1);

    store *s = open_store(&t);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_pending'"),
                     0);
    assert_int_equal(
        db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_pending_queue'"), 1);
    char **q = NULL;
    size_t n = 0;
    assert_int_equal(store_pending_queues(s, NULL, 10, &q, &n), TY_OK);
    assert_int_equal(n, 2); /* not 'done': its only job is not PENDING */
    assert_string_equal(q[0], "other");
    assert_string_equal(q[1], "sweep");
    store_queues_free(q, n);
    store_job *j = NULL;
    assert_int_equal(store_jobs_pending(s, "sweep", 0, 0, 10, &j, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(j[0].id, "01j0000000000000000000000c"); /* priority 5 first */
    assert_string_equal(j[1].id, "01j0000000000000000000000a");
    store_jobs_free(j, n);
    store_close(s);
    tdir_remove(&t);
}

/*
 * Version 12 to 13: tokens, jobs and sweeps made before teams belong to "default", which is
 * unlimited; their owner is unknown; the jobs that have not ended get their requested totals
 * from their spec, so the default team's usage counts the running one at once.
 */
static void test_version_12_gets_teams(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v12_rows[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec) VALUES "
        "('01j0000000000000000000000a', 'run', 'q', 0, 3, 1, 1000, 1000, "
        "'{\"workers\":{\"count\":2},\"resources\":{\"cpu\":\"500m\",\"memory\":\"2Gi\","
        "\"gpu\":{\"type\":\"a100\",\"count\":4}}}'),"
        "('01j0000000000000000000000b', 'wait', 'q', 0, 0, 0, 1001, 1001, "
        "'{\"workers\":{\"count\":1},\"resources\":{\"cpu\":\"1\",\"memory\":\"1Gi\","
        "\"gpu\":null}}'),"
        "('01j0000000000000000000000c', 'done', 'q', 0, 6, 1, 1002, 1002, '{}');"
        "INSERT INTO tokens (name, scopes, hash, created_ms) VALUES "
        "('ci', 3, zeroblob(32), 5);"
        "INSERT INTO sweeps (id, name, algorithm, parallelism, metric, maximize, body, "
        "created_ms) VALUES ('01s0000000000000000000000a', 'sw', 'grid', 1, 'loss', 0, '{}', 7);";
    db_at_version(t.db, 12, v12_rows);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), 12);

    store *s = open_store(&t);
    assert_true(store_schema_version() >= 13);
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, "01j0000000000000000000000a", &j), TY_OK);
    assert_string_equal(j->team, STORE_TEAM_DEFAULT);
    assert_null(j->owner);
    store_jobs_free(j, 1);

    store_team *team = NULL;
    assert_int_equal(store_team_get(s, STORE_TEAM_DEFAULT, &team), TY_OK);
    assert_int_equal(team->has_quota, 0);
    store_teams_free(team, 1);
    store_team_usage u = {0};
    assert_int_equal(store_team_usage_get(s, STORE_TEAM_DEFAULT, &u), TY_OK);
    assert_int_equal(u.pending, 1);
    assert_int_equal(u.admitted, 1);
    assert_int_equal(u.nuse, 3);
    assert_string_equal(u.use[0].resource, "cpu");
    assert_int_equal(u.use[0].amount, 1000);
    assert_string_equal(u.use[1].resource, "gpu/a100");
    assert_int_equal(u.use[1].amount, 8);
    assert_string_equal(u.use[2].resource, "memory");
    assert_int_equal(u.use[2].amount, 4LL << 30);
    store_team_usage_clear(&u);

    store_token *tok = NULL;
    size_t n = 0;
    assert_int_equal(store_tokens_list(s, &tok, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(tok[0].team, STORE_TEAM_DEFAULT);
    store_tokens_free(tok, n);

    store_sweep *sw = NULL;
    int64_t next = 0;
    assert_int_equal(store_sweeps_list(s, STORE_TEAM_DEFAULT, 0, 10, &sw, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(sw[0].team, STORE_TEAM_DEFAULT);
    assert_null(sw[0].owner);
    store_sweeps_free(sw, n);
    store_close(s);
    tdir_remove(&t);
}

/* Version 16's PENDING jobs get their pending_counts, and the triggers keep them after. */
static void test_version_16_gets_pending_counts(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v16_rows[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec, team) VALUES "
        "('01j0000000000000000000000a', 'a', 'q', 0, 0, 0, 1000, 1000, '{}', 'vision'),"
        "('01j0000000000000000000000b', 'b', 'q', 5, 0, 0, 1001, 1001, '{}', 'vision'),"
        "('01j0000000000000000000000c', 'c', 'q', 0, 3, 1, 1002, 1002, '{}', 'vision'),"
        "('01j0000000000000000000000d', 'd', 'q', 0, 0, 0, 1003, 1003, '{}', 'vision'),"
        "('01j0000000000000000000000e', 'e', 'q', 0, 0, 0, 1004, 1004, '{}', 'nlp');";
    db_at_version(t.db, 16, v16_rows);
    store *s = open_store(&t);
    assert_true(store_schema_version() >= 17);
    assert_int_equal(db_int(t.db, "SELECT sum(n) FROM pending_counts"), 4);
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM pending_counts"), 3);
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, "01j0000000000000000000000d", &j), TY_OK);
    store_line_place pl;
    assert_int_equal(store_jobs_line_places(s, j, 1, &pl), TY_OK);
    assert_int_equal(pl.ahead, 2); /* b (priority 5), then a */
    assert_string_equal(pl.head_id, "01j0000000000000000000000b");
    store_line_places_clear(&pl, 1);
    store_jobs_free(j, 1);
    store_close(s);
    /* A job that leaves PENDING, one that comes back, a trial given its sweep. */
    db_exec(t.db, "UPDATE jobs SET state = 7 WHERE id = '01j0000000000000000000000a';"
                  "UPDATE jobs SET state = 0 WHERE id = '01j0000000000000000000000c';"
                  "UPDATE jobs SET sweep = 9 WHERE id = '01j0000000000000000000000e';");
    assert_int_equal(db_int(t.db, "SELECT sum(n) FROM pending_counts WHERE team = 'vision' "
                                  "AND priority = 0"),
                     2);
    assert_int_equal(db_int(t.db, "SELECT sum(n) FROM pending_counts WHERE team = 'nlp' "
                                  "AND sweep = 9"),
                     1);
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM pending_counts WHERE team = 'nlp' "
                                  "AND sweep = 0"),
                     0);
    tdir_remove(&t);
}

/*
 * Version 17 to 18: a database of the previous release keeps its jobs and gains the node
 * ledger, empty: no node starts quarantined, and the first failure is written and read back.
 */
static void test_version_17_gets_the_node_ledger(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v17_rows[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec) VALUES ('01j0000000000000000000000a', 'run', 'q', 0, 3, 1, 1000, 1000, '{}')";
    db_at_version(t.db, 17, v17_rows);
    assert_int_equal(
        db_int(t.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'node_failures'"), 0);

    store *s = open_store(&t);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
    assert_int_equal(db_int(t.db, "SELECT count(*) FROM jobs"), 1);
    store_node_quarantine *q = NULL;
    size_t n = 0;
    assert_int_equal(store_node_quarantines(s, 0, &q, &n), TY_OK);
    assert_int_equal(n, 0);
    store_node_failure f = {.node = "n1", .job_id = "01j0000000000000000000000a", .attempt = 1,
                            .rank = 0, .time_ms = 5000, .exit_code = 1, .cause = "rank 0 exited"};
    assert_int_equal(store_node_failure_add(s, &f, 0), TY_OK);
    store_node_failure *got = NULL;
    assert_int_equal(store_node_failures(s, "n1", 0, 10, &got, &n), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(got[0].job_id, "01j0000000000000000000000a");
    store_node_failures_free(got, n);
    store_close(s);
    tdir_remove(&t);
}

/*
 * Version 18 to 19: the current attempt's record moves out of the jobs row. A job keeps the
 * record it had (read back from attempts), a record that reached only the jobs row is kept,
 * and the next record written is the one read.
 */
static void test_version_18_reads_records_from_attempts(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    static const char v18_rows[] =
        "INSERT INTO jobs (id, name, queue, priority, state, attempt, created_ms, updated_ms, "
        "spec, attempt_json) VALUES "
        "('01j0000000000000000000000a', 'a', 'q', 0, 3, 2, 1000, 1000, '{}', '{\"attempt\":2}'),"
        "('01j0000000000000000000000b', 'b', 'q', 0, 3, 1, 1001, 1001, '{}', '{\"attempt\":1}'),"
        "('01j0000000000000000000000c', 'c', 'q', 0, 0, 0, 1002, 1002, '{}', NULL);"
        "INSERT INTO attempts (job_seq, attempt, record) VALUES "
        "(1, 1, '{\"attempt\":1,\"old\":true}'), (1, 2, '{\"attempt\":2}');";
    db_at_version(t.db, 18, v18_rows);
    store *s = open_store(&t);
    assert_int_equal(db_int(t.db, "PRAGMA user_version"), store_schema_version());
    assert_int_equal(
        db_int(t.db, "SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'attempt_json'"),
        0);
    store_job *j = NULL;
    assert_int_equal(store_job_get(s, "01j0000000000000000000000a", &j), TY_OK);
    assert_string_equal(j->attempt_json, "{\"attempt\":2}");
    store_jobs_free(j, 1);
    assert_int_equal(store_job_get(s, "01j0000000000000000000000b", &j), TY_OK);
    assert_string_equal(j->attempt_json, "{\"attempt\":1}"); /* copied over */
    store_jobs_free(j, 1);
    assert_int_equal(store_job_get(s, "01j0000000000000000000000c", &j), TY_OK);
    assert_null(j->attempt_json);
    store_jobs_free(j, 1);

    store_update u = {.id = "01j0000000000000000000000a", .from = JOB_RUNNING,
                      .to = JOB_RUNNING, .attempt = 2, .attempt_json = "{\"attempt\":2,\"n\":1}",
                      .restarts = -1};
    assert_int_equal(store_jobs_update(s, &u, 1), TY_OK);
    assert_int_equal(u.result, TY_OK);
    assert_int_equal(store_job_get(s, "01j0000000000000000000000a", &j), TY_OK);
    assert_string_equal(j->attempt_json, "{\"attempt\":2,\"n\":1}");
    store_jobs_free(j, 1);
    store_close(s);
    tdir_remove(&t);
}

static void test_foreign_database_is_refused(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    db_exec(t.db, "PRAGMA application_id = 1234; CREATE TABLE other (x)");
    store *s = NULL;
    char err[256] = "";
    assert_int_equal(store_open(t.db, NULL, &s, err, sizeof err), TY_ESCHEMA);
    assert_null(s);
    assert_non_null(strstr(err, "not a Trainyard database"));
    tdir_remove(&t);
}

static void test_garbage_file_is_refused(void **state)
{
    (void)state;
    tdir t;
    tdir_make(&t);
    FILE *f = fopen(t.db, "w");
    assert_non_null(f);
    for (int i = 0; i < 256; i++)
        fputs("this is not an SQLite database\n", f);
    fclose(f);
    store *s = NULL;
    char err[256] = "";
    ty_err e = store_open(t.db, NULL, &s, err, sizeof err);
    assert_int_equal(e, TY_ESCHEMA);
    assert_null(s);
    assert_true(err[0] != '\0');
    tdir_remove(&t);
}

static void test_unopenable_path_fails_cleanly(void **state)
{
    (void)state;
    store *s = NULL;
    char err[256] = "";
    ty_err e = store_open("/nonexistent-dir/for/sure/x.db", NULL, &s, err, sizeof err);
    assert_int_not_equal(e, TY_OK);
    assert_null(s);
    assert_non_null(strstr(err, "/nonexistent-dir/for/sure/x.db"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_database_gets_current_version),
        cmocka_unit_test(test_state_checks_match_the_state_machine),
        cmocka_unit_test(test_wal_mode),
        cmocka_unit_test(test_reopen_is_idempotent_and_keeps_data),
        cmocka_unit_test(test_newer_schema_is_refused),
        cmocka_unit_test(test_version_1_is_migrated),
        cmocka_unit_test(test_version_2_is_migrated),
        cmocka_unit_test(test_version_12_gets_teams),
        cmocka_unit_test(test_version_16_gets_pending_counts),
        cmocka_unit_test(test_version_17_gets_the_node_ledger),
        cmocka_unit_test(test_version_18_reads_records_from_attempts),
        cmocka_unit_test(test_foreign_database_is_refused),
        cmocka_unit_test(test_garbage_file_is_refused),
        cmocka_unit_test(test_unopenable_path_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
