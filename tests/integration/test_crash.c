/*
 * test_crash.c - kill -9 under concurrent submissions loses no acknowledged
 * job and leaves no half-written one.
 *
 * Usage: test_crash TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
 * Eight threads submit over keep-alive connections; the server is killed
 * with SIGKILL while they do, then restarted on the same database. Every job
 * that got a 201 must be there with its creation event and the labels it was
 * submitted with, and the database must hold no job without events and no
 * label or event row without its job. Three rounds on the same database.
 * The server runs with every queue paused (--queue-limit 0): what is checked
 * is the submissions, and paused jobs keep exactly the rows submission wrote.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "tests/support/ty_harness.h"

#define ROUNDS 3
#define THREADS 8
#define LOAD_MS 1500 /* how long the threads submit before the kill */

typedef struct acked_job {
    ty_acked a;
    int round;
} acked_job;

static acked_job *g_acked;
static size_t g_nacked;

static void remember(const ty_load *load, int round)
{
    size_t n;
    const ty_acked *a = ty_load_acked(load, &n);

    g_acked = realloc(g_acked, (g_nacked + n) * sizeof *g_acked);
    assert_non_null(g_acked);
    for (size_t i = 0; i < n; i++) {
        g_acked[g_nacked].a = a[i];
        g_acked[g_nacked].round = round;
        g_nacked++;
    }
}

/* Whether job (an API Job) carries the spec acked job j was submitted with. */
static void check_job_matches(const json_t *job, const acked_job *j)
{
    const json_t *labels = json_object_get(json_object_get(job, "spec"), "labels");
    char name[64], tag[32], thread[16], seq[16];

    snprintf(name, sizeof name, "load-%d-%d", j->a.thread, j->a.seq);
    snprintf(tag, sizeof tag, "crash-%d", j->round);
    snprintf(thread, sizeof thread, "%d", j->a.thread);
    snprintf(seq, sizeof seq, "%d", j->a.seq);
    if (!json_string_value(json_object_get(job, "name")) ||
        strcmp(json_string_value(json_object_get(job, "name")), name) != 0 ||
        json_object_size(labels) != 3 || !json_string_value(json_object_get(labels, "load")) ||
        strcmp(json_string_value(json_object_get(labels, "load")), tag) != 0 ||
        !json_string_value(json_object_get(labels, "thread")) ||
        strcmp(json_string_value(json_object_get(labels, "thread")), thread) != 0 ||
        !json_string_value(json_object_get(labels, "seq")) ||
        strcmp(json_string_value(json_object_get(labels, "seq")), seq) != 0) {
        char *text = json_dumps(job, JSON_COMPACT);
        fail_msg("job %s is not the one submitted as %s (labels load=%s thread=%s seq=%s): %s",
                 j->a.id, name, tag, thread, seq, text);
    }
}

/* Through the API: a sample of the round's acknowledged jobs (the last 20 of
 * each thread, the ones closest to the kill, and every 10th); the database
 * check covers all of them. */
static void check_api(ty_server *s, int round)
{
    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    int last_seq[THREADS];

    assert_non_null(c);
    for (int t = 0; t < THREADS; t++)
        last_seq[t] = -1;
    for (size_t i = 0; i < g_nacked; i++)
        if (g_acked[i].round == round && g_acked[i].a.seq > last_seq[g_acked[i].a.thread])
            last_seq[g_acked[i].a.thread] = g_acked[i].a.seq;
    for (size_t i = 0; i < g_nacked; i++) {
        const acked_job *j = &g_acked[i];
        char path[128];
        ty_http_resp *r;
        const json_t *first;

        if (j->round != round || (j->a.seq <= last_seq[j->a.thread] - 20 && i % 10 != 0))
            continue;
        snprintf(path, sizeof path, "/v1/jobs/%s", j->a.id);
        r = ty_req(c, "GET", path, NULL);
        if (r->status != 200)
            fail_msg("round %d: job %s (load-%d-%d, round %d) got 201 but GET answers %ld: %s",
                     round, j->a.id, j->a.thread, j->a.seq, j->round, r->status, r->body);
        check_job_matches(r->json, j);
        if (!ty_json_str(r->json, "state") || strcmp(ty_json_str(r->json, "state"), "PENDING") != 0)
            fail_msg("job %s left PENDING in a paused queue: %s", j->a.id, r->body);
        ty_resp_destroy(r);
        snprintf(path, sizeof path, "/v1/jobs/%s/events", j->a.id);
        r = ty_req(c, "GET", path, NULL);
        assert_int_equal(r->status, 200);
        first = json_array_get(json_object_get(r->json, "events"), 0);
        if (!first || !json_is_null(json_object_get(first, "from")) ||
            strcmp(json_string_value(json_object_get(first, "to")), "PENDING") != 0 ||
            strcmp(json_string_value(json_object_get(first, "reason")), "Submitted") != 0)
            fail_msg("job %s: the first event is not the creation event: %s", j->a.id, r->body);
        ty_resp_destroy(r);
    }
    ty_client_free(c);
}

static long long query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    if (sqlite3_step(st) != SQLITE_ROW)
        fail_msg("%s: no row: %s", sql, sqlite3_errmsg(db));
    v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Every job's label rows are exactly the labels of its stored spec. The
 * label table is keyed by (key, value, seq), so the rows are read in one pass
 * and grouped by job first. */
static void check_labels(sqlite3 *db)
{
    sqlite3_stmt *jobs = NULL, *labels = NULL;
    json_t *by_seq = json_object();
    long long checked = 0;
    char seqkey[32];

    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT seq, key, value FROM job_labels", -1, &labels, NULL),
        SQLITE_OK);
    while (sqlite3_step(labels) == SQLITE_ROW) {
        json_t *set;
        snprintf(seqkey, sizeof seqkey, "%lld", (long long)sqlite3_column_int64(labels, 0));
        set = json_object_get(by_seq, seqkey);
        if (!set) {
            set = json_object();
            json_object_set_new(by_seq, seqkey, set);
        }
        json_object_set_new(set, (const char *)sqlite3_column_text(labels, 1),
                            json_string((const char *)sqlite3_column_text(labels, 2)));
    }
    sqlite3_finalize(labels);

    assert_int_equal(sqlite3_prepare_v2(db, "SELECT seq, id, spec FROM jobs", -1, &jobs, NULL),
                     SQLITE_OK);
    while (sqlite3_step(jobs) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(jobs, 1);
        json_t *spec = json_loads((const char *)sqlite3_column_text(jobs, 2), 0, NULL);
        json_t *rows, *want, *empty = json_object();

        if (!spec)
            fail_msg("job %s: the stored spec is not JSON", id);
        snprintf(seqkey, sizeof seqkey, "%lld", (long long)sqlite3_column_int64(jobs, 0));
        rows = json_object_get(by_seq, seqkey);
        want = json_object_get(spec, "labels");
        if (!json_equal(rows ? rows : empty, want ? want : empty)) {
            char *a = json_dumps(rows ? rows : empty, JSON_COMPACT);
            char *b = json_dumps(want, JSON_COMPACT);
            fail_msg("job %s: label rows %s, labels in its spec %s", id, a, b);
        }
        json_decref(empty);
        json_decref(spec);
        checked++;
    }
    sqlite3_finalize(jobs);
    json_decref(by_seq);
    assert_true(checked > 0);
}

/* Directly in the database (read-only, next to the running server). */
static void check_db(const ty_server *s)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long n;

    if (sqlite3_open_v2(ty_server_db(s), &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        fail_msg("cannot open %s: %s", ty_server_db(s), sqlite3_errmsg(db));
    sqlite3_busy_timeout(db, 5000);
    /* One read transaction, so the server's commits do not move the rows under us. */
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);

    n = query_int(db, "SELECT count(*) FROM jobs j WHERE NOT EXISTS "
                      "(SELECT 1 FROM job_events e WHERE e.job_seq = j.seq)");
    if (n != 0)
        fail_msg("%lld jobs have no event row", n);
    n = query_int(db, "SELECT count(*) FROM jobs j WHERE (SELECT e.reason || '/' || "
                      "coalesce(e.from_state, 'null') FROM job_events e WHERE e.job_seq = j.seq "
                      "ORDER BY e.seq LIMIT 1) != 'Submitted/null'");
    if (n != 0)
        fail_msg("%lld jobs whose first event is not the creation event", n);
    n = query_int(db, "SELECT count(*) FROM job_events e WHERE NOT EXISTS "
                      "(SELECT 1 FROM jobs j WHERE j.seq = e.job_seq)");
    if (n != 0)
        fail_msg("%lld event rows without their job", n);
    n = query_int(db, "SELECT count(*) FROM job_labels l WHERE NOT EXISTS "
                      "(SELECT 1 FROM jobs j WHERE j.seq = l.seq)");
    if (n != 0)
        fail_msg("%lld label rows without their job", n);
    check_labels(db);

    /* Every acknowledged job is in the file. */
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM jobs WHERE id = ?", -1, &st, NULL), SQLITE_OK);
    for (size_t i = 0; i < g_nacked; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, g_acked[i].a.id, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 1)
            fail_msg("job %s (load-%d-%d, round %d) got 201 but is not in the database",
                     g_acked[i].a.id, g_acked[i].a.thread, g_acked[i].a.seq, g_acked[i].round);
    }
    sqlite3_finalize(st);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);

    /* A separate connection for the integrity check (outside our snapshot). */
    assert_int_equal(sqlite3_open_v2(ty_server_db(s), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    if (strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
        fail_msg("quick_check: %s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* The API lists exactly as many jobs of the round as the database holds. */
static void check_listing(ty_server *s, int round)
{
    ty_client *c = ty_client_new(s, TY_TEST_ADMIN_TOKEN);
    char path[1024], token[512] = "";
    size_t listed = 0, acked = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long in_db;
    char tag[32];

    snprintf(tag, sizeof tag, "crash-%d", round);
    for (;;) {
        ty_http_resp *r;
        const char *next;
        if (token[0])
            snprintf(path, sizeof path, "/v1/jobs?label=load%%3D%s&limit=1000&page_token=%s", tag,
                     token);
        else
            snprintf(path, sizeof path, "/v1/jobs?label=load%%3D%s&limit=1000", tag);
        r = ty_req(c, "GET", path, NULL);
        assert_int_equal(r->status, 200);
        listed += json_array_size(json_object_get(r->json, "jobs"));
        next = json_string_value(json_object_get(r->json, "next_page_token"));
        if (next) {
            char *e = curl_easy_escape(NULL, next, 0);
            snprintf(token, sizeof token, "%s", e);
            curl_free(e);
        }
        ty_resp_destroy(r);
        if (!next)
            break;
    }
    ty_client_free(c);

    assert_int_equal(sqlite3_open_v2(ty_server_db(s), &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM job_labels WHERE key = 'load' "
                                        "AND value = ?",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, tag, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    in_db = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    for (size_t i = 0; i < g_nacked; i++)
        if (g_acked[i].round == round)
            acked++;
    if ((long long)listed != in_db)
        fail_msg("round %d: the API lists %zu jobs, the database holds %lld", round, listed, in_db);
    /* A job may be stored without its 201 having arrived, never the reverse. */
    if (listed < acked)
        fail_msg("round %d: %zu jobs acknowledged, only %zu listed", round, acked, listed);
}

static void test_kill9_loses_no_acknowledged_job(void **state)
{
    static const char *const paused[] = {"--queue-limit", "0", NULL};
    ty_server_opts opts = {.args = paused};
    ty_server *s = NULL;
    char err[2048];
    int wstatus;

    (void)state;
    if (ty_server_start(&opts, &s, err, sizeof err) < 0)
        fail_msg("%s", err);
    for (int round = 0; round < ROUNDS; round++) {
        ty_load *load = NULL;
        char tag[32];
        size_t got;

        snprintf(tag, sizeof tag, "crash-%d", round);
        if (ty_load_start(s, TY_TEST_ADMIN_TOKEN, THREADS, tag, &load, err, sizeof err) < 0)
            fail_msg("%s", err);
        got = ty_load_wait_acked(load, 50, 20000);
        if (got < 50) {
            ty_load_free(load);
            fail_msg("round %d: only %zu jobs accepted in 20 s", round, got);
        }
        ty_sleep_ms(LOAD_MS);
        ty_server_kill(s);
        ty_load_stop(load);
        if (ty_load_violation(load)) {
            char msg[1500];
            snprintf(msg, sizeof msg, "%s", ty_load_violation(load));
            ty_load_free(load);
            fail_msg("round %d: %s", round, msg);
        }
        remember(load, round);
        print_message("round %d: %zu jobs acknowledged before kill -9\n", round,
                      ty_load_wait_acked(load, 0, 0));
        ty_load_free(load);

        if (ty_server_restart(s, err, sizeof err) < 0)
            fail_msg("round %d: restart after kill -9: %s", round, err);
        check_db(s);
        check_api(s, round);
        check_listing(s, round);
    }
    if (ty_server_stop(s, 20000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fail_msg("exit status %d after SIGTERM", wstatus);
    ty_server_free(s);
    free(g_acked);
    g_acked = NULL;
    g_nacked = 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_loses_no_acknowledged_job),
    };
    int failed;

    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    failed = cmocka_run_group_tests_name("crash", tests, NULL, NULL);
    ty_harness_cleanup();
    return failed;
}
