/*
 * test_sandbox.c - what the local backend gives a job and what it takes from it, end to
 * end through the real `trainyard serve`: a disk limit on the job's directory, a total
 * on the logs a job keeps across attempts, and a sandbox ordinary programs can live in
 * (a writable /tmp, /dev/shm and $HOME; a 2-rank trainyard-worker gang).
 *
 * Usage: test_sandbox TRAINYARD_BINARY OPENAPI_YAML (CTest passes both). Every
 * response is checked against openapi.yaml by the harness. Deadlines only bound a hang;
 * nothing asserts how long anything took. The disk and log cases do not depend on the
 * sandbox and run their ranks unsandboxed, so they run on every machine; the sandbox
 * cases skip, saying why, where the machine cannot build one (the server refuses to
 * start and says what is missing).
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/runtime/rt_testdata.h"
#include "tests/support/ty_harness.h"

#define DEADLINE_MS 120000 /* for a job to reach a state */

static ty_server *g_srv;
static ty_client *g_c;

/* ---- the server ------------------------------------------------------------ */

/* Starts this case's server with args; with sandboxed, skips the case (with the
 * server's reason) where this machine cannot sandbox jobs. */
static void start(const char *const *args, int sandboxed)
{
    ty_server_opts opts = {.args = args};
    char err[2048];

    assert_null(g_srv);
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        if (sandboxed && strstr(err, "local sandbox:")) {
            print_message("skipped: this machine cannot sandbox jobs: %s\n",
                          strstr(err, "local sandbox:"));
            ty_server_free(g_srv);
            g_srv = NULL;
            skip();
        }
        fail_msg("%s", err);
    }
    g_c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_c);
}

static int teardown(void **state)
{
    char err[512];
    int wstatus;

    (void)state;
    ty_client_free(g_c);
    g_c = NULL;
    if (!g_srv)
        return 0;
    if (ty_server_pid(g_srv) > 0 && ty_server_stop(g_srv, 60000, &wstatus, err, sizeof err) < 0)
        print_error("teardown: %s\n", err);
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

/* The end of a case that passed: SIGTERM stops the server cleanly (exit 0). */
static void finish(void)
{
    char err[512];
    int wstatus;

    ty_client_free(g_c);
    g_c = NULL;
    if (ty_server_stop(g_srv, 60000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fail_msg("the server ended with status %d after SIGTERM",
                 WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus));
}

/* ---- the API --------------------------------------------------------------- */

static const char *jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static int str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* GET path expecting 200; the body (new): JSON when it is JSON, else NULL and *text. */
static ty_http_resp *get_ok(const char *path)
{
    ty_http_resp *r = ty_req(g_c, "GET", path, NULL);
    if (r->status != 200)
        fail_msg("GET %s: HTTP %ld: %.600s", path, r->status, r->body);
    return r;
}

static json_t *get_json(const char *path)
{
    ty_http_resp *r = get_ok(path);
    json_t *j = json_incref(r->json);
    assert_non_null(j);
    ty_resp_destroy(r);
    return j;
}

/* GET path's body as text (new), expecting 200. */
static char *get_text(const char *path)
{
    ty_http_resp *r = get_ok(path);
    char *t = strdup(r->body ? r->body : "");
    assert_non_null(t);
    ty_resp_destroy(r);
    return t;
}

/* POST /v1/jobs of spec (stolen), expecting 201; the job's id (new). */
static char *submit(json_t *spec)
{
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    assert_non_null(body);
    ty_http_resp *r = ty_req(g_c, "POST", "/v1/jobs", body);
    free(body);
    if (r->status != 201)
        fail_msg("submit: HTTP %ld: %.600s", r->status, r->body);
    char *id = strdup(jstr(r->json, "id"));
    assert_non_null(id);
    ty_resp_destroy(r);
    return id;
}

/* A spec (new) running `sh -c script` on `workers` ranks with `restarts` restarts. */
static json_t *sh_spec(const char *name, int workers, int restarts, const char *script)
{
    json_t *spec = json_pack("{s:s, s:[s,s,s], s:{s:i}, s:{s:i, s:i}}", "name", name, "command",
                             "sh", "-c", script, "workers", "count", workers, "restart", "max",
                             restarts, "backoff_seconds", 0);
    assert_non_null(spec);
    return spec;
}

/* The text of rank's log of attempt (0: the current one); new. */
static char *rank_log(const char *id, int attempt, int rank)
{
    char path[200];
    if (attempt > 0)
        snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=%d&attempt=%d", id, rank, attempt);
    else
        snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=%d", id, rank);
    return get_text(path);
}

/* Polls the job until it ends; returns it (new). Fails with its events and its rank 0
 * log when it is not `want`, or when it does not end in time. */
static json_t *wait_end(const char *id, const char *want)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        json_t *job = get_json(path);
        const char *st = jstr(job, "state");
        int end = str_eq(st, "SUCCEEDED") || str_eq(st, "FAILED") || str_eq(st, "CANCELLED");
        if (end && str_eq(st, want))
            return job;
        if (end || ty_now_ms() > deadline) {
            char epath[160];
            snprintf(epath, sizeof epath, "/v1/jobs/%s/events", id);
            char *events = get_text(epath), *log = rank_log(id, 0, 0);
            fail_msg("job %s is %s, expected %s; events: %.1500s\nrank 0 log: %.1500s", id,
                     st ? st : "?", want, events, log);
        }
        json_decref(job);
        ty_sleep_ms(100);
    }
}

/* The job's events (new array). */
static json_t *get_events(const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    json_t *body = get_json(path);
    json_t *ev = json_incref(json_object_get(body, "events"));
    json_decref(body);
    assert_true(json_is_array(ev));
    return ev;
}

/* The job's attempts (new array). */
static json_t *get_attempts(const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/attempts", id);
    json_t *body = get_json(path);
    json_t *a = json_incref(json_object_get(body, "attempts"));
    json_decref(body);
    assert_true(json_is_array(a));
    return a;
}

/* Bytes of the regular files in dir (0 when it does not exist). */
static long long dir_bytes(const char *dir)
{
    char cmd[PATH_MAX + 64];
    long long total = 0;
    snprintf(cmd, sizeof cmd, "find '%s' -type f -printf '%%s\\n' 2>/dev/null", dir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[64];
    while (fgets(line, sizeof line, p))
        total += strtoll(line, NULL, 10);
    pclose(p);
    return total;
}

/* ---- the disk limit of a job's directory ------------------------------------ */

/*
 * A job that writes 64 MiB into its output under a limit of 8 MiB, then waits: it
 * is stopped, ends FAILED with reason DiskLimitExceeded and an event that says by how
 * much, and is not restarted (it has restarts left: they would start on the same full
 * disk).
 */
static void test_disk_limit(void **state)
{
    static const char *const args[] = {"--local-sandbox=off", "--local-disk-limit", "8Mi",
                                       "--stop-grace", "1", NULL};
    (void)state;
    start(args, 0);
    char *log = ty_server_log(g_srv);
    if (!log || !strstr(log, "--local-disk-limit") || !strstr(log, "measured"))
        fail_msg("the server does not say at start which disk limit it enforces, and how: %s",
                 log ? log : "(no log)");
    free(log);

    char *id = submit(sh_spec("disk-hog", 1, 3,
                              "head -c 67108864 /dev/zero > \"$TRAINYARD_OUTPUT_DIR/big\" && "
                              "exec sleep 600"));
    json_t *job = wait_end(id, "FAILED");
    json_decref(job);

    json_t *events = get_events(id);
    const json_t *last = json_array_get(events, json_array_size(events) - 1);
    assert_string_equal(jstr(last, "to"), "FAILED");
    assert_string_equal(jstr(last, "reason"), "DiskLimitExceeded");
    const char *msg = jstr(last, "message");
    if (!msg || !strstr(msg, "job directory uses") || !strstr(msg, "over its limit of 8 MiB"))
        fail_msg("the FAILED event does not say the directory is over its limit: %s",
                 msg ? msg : "(none)");
    size_t i;
    const json_t *ev;
    json_array_foreach(events, i, ev) {
        if (str_eq(jstr(ev, "to"), "RESTARTING"))
            fail_msg("a job over its disk limit was restarted: %s", jstr(ev, "message"));
    }
    json_decref(events);

    json_t *attempts = get_attempts(id);
    assert_int_equal(json_array_size(attempts), 1);
    const json_t *a = json_array_get(attempts, 0);
    assert_string_equal(jstr(a, "state"), "failed");
    assert_string_equal(jstr(a, "reason"), "DiskLimitExceeded");
    json_decref(attempts);
    free(id);

    /* A job within its limit is not touched. */
    id = submit(sh_spec("disk-ok", 1, 0,
                        "head -c 1048576 /dev/zero > \"$TRAINYARD_OUTPUT_DIR/small\" && "
                        "sleep 3"));
    json_decref(wait_end(id, "SUCCEEDED"));
    free(id);
    finish();
}

/* With --local-disk-limit 0 the server says, at start, that nothing limits a job's disk. */
static void test_disk_limit_off_is_said(void **state)
{
    static const char *const args[] = {"--local-sandbox=off", "--local-disk-limit", "0", NULL};
    (void)state;
    start(args, 0);
    char *log = ty_server_log(g_srv);
    if (!log || !strstr(log, "NOT limited"))
        fail_msg("the server does not say that a job's directory is not limited: %s",
                 log ? log : "(no log)");
    free(log);
    finish();
}

/* ---- logs capped per job across attempts ------------------------------------- */

/*
 * Each attempt writes 48 KiB of log and fails; ten attempts. The per-rank cap is 64 KiB
 * and the job's total 128 KiB: when an attempt starts, the previous attempts' logs are
 * cut to the newest two (96 KiB); the current attempt's are never deleted. A deleted
 * attempt's log reads as a line that says so.
 */
static void test_job_logs_keep_the_newest(void **state)
{
    static const char *const args[] = {"--local-sandbox=off", "--local-log-limit", "64Ki",
                                       "--local-job-log-limit", "128Ki", NULL};
    (void)state;
    start(args, 0);
    char *id = submit(sh_spec("log-churn", 1, 9,
                              "echo \"attempt $TRAINYARD_ATTEMPT\"; "
                              "head -c 49152 /dev/zero | tr '\\0' x | fold -w 1023; echo; "
                              "echo \"end of attempt $TRAINYARD_ATTEMPT\"; exit 1"));
    json_decref(wait_end(id, "FAILED"));
    json_t *attempts = get_attempts(id);
    assert_int_equal(json_array_size(attempts), 10);
    json_decref(attempts);

    /* On disk: the previous attempts within the total, the last one whole. */
    char dir[PATH_MAX];
    long long previous = 0;
    for (int n = 1; n <= 9; n++) {
        snprintf(dir, sizeof dir, "%s/logs/%s/a%d", ty_server_dir(g_srv), id, n);
        long long b = dir_bytes(dir);
        assert_true(b >= 0);
        previous += b;
    }
    if (previous > 128 * 1024)
        fail_msg("attempts 1-9 keep %lld bytes of logs, over the job's total of 128 KiB",
                 previous);

    /* The newest attempts read whole; the last one is never pruned. */
    for (int n = 8; n <= 10; n++) {
        char want[64];
        char *text = rank_log(id, n, 0);
        snprintf(want, sizeof want, "end of attempt %d\n", n);
        if (!strstr(text, want))
            fail_msg("attempt %d's log lost its end: %.200s", n, text);
        free(text);
    }
    /* The oldest say what happened to them. */
    for (int n = 1; n <= 7; n++) {
        char *text = rank_log(id, n, 0);
        if (strncmp(text, "[trainyard] ", 12) != 0 || !strstr(text, "were deleted") ||
            !strstr(text, "--local-job-log-limit"))
            fail_msg("the log of pruned attempt %d does not say it was deleted: %.300s", n,
                     text);
        free(text);
    }
    free(id);
    finish();
}

/* ---- a sandbox programs can live in ------------------------------------------ */

/*
 * A program writes where programs write: /tmp (and $TMPDIR), /dev/shm and $HOME. /tmp
 * and /dev/shm are private tmpfs of mode 1777, sized from resources.memory.
 */
static void test_sandbox_tmp_shm_home(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    (void)state;
    start(args, 1);
    static const char script[] =
        "set -e\n"
        "echo a > /tmp/x; echo b > /dev/shm/x; echo c > \"$HOME/x\"\n"
        "t=$(mktemp); echo d > \"$t\"\n"
        "echo \"tmpdir=$TMPDIR\"\n"
        "echo \"modes=$(stat -c %a /tmp) $(stat -c %a /dev/shm)\"\n"
        "echo \"sizes=$(df -k /tmp | awk 'NR==2{print $2}') "
        "$(df -k /dev/shm | awk 'NR==2{print $2}')\"\n"
        "cat /tmp/x /dev/shm/x \"$HOME/x\" \"$t\" | tr -d '\\n'; echo\n";
    json_t *spec = sh_spec("lives-here", 1, 0, script);
    json_object_set_new(spec, "resources", json_pack("{s:s}", "memory", "64Mi"));
    char *id = submit(spec);
    json_decref(wait_end(id, "SUCCEEDED"));
    char *log = rank_log(id, 0, 0);
    if (!strstr(log, "tmpdir=/tmp\n") || !strstr(log, "modes=1777 1777\n") ||
        !strstr(log, "sizes=65536 65536\n") || !strstr(log, "abcd\n"))
        fail_msg("the sandbox's /tmp, /dev/shm or $HOME are not what a program needs:\n%s", log);
    free(log);
    free(id);
    finish();
}

/*
 * A 2-rank trainyard-worker gang trains for a few steps in the sandbox (as in
 * production: rendezvous on 127.0.0.1, the data set read-only, checkpoints in the job's
 * directory).
 */
static void test_sandbox_worker_gang(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    (void)state;
    start(args, 1);
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s/datasets/tiny", ty_server_dir(g_srv));
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(rt_write_dataset(data, 512, 128, 7), 0);
    static const char script[] =
        "exec trainyard-worker train --data \"$TRAINYARD_DATA_DIR/tiny\" --epochs 1 "
        "--batch 128 --log-every 2 --threads 1";
    char *id = submit(sh_spec("gang", 2, 0, script));
    json_decref(wait_end(id, "SUCCEEDED"));
    free(id);
    finish();
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_disk_limit, teardown),
        cmocka_unit_test_teardown(test_disk_limit_off_is_said, teardown),
        cmocka_unit_test_teardown(test_job_logs_keep_the_newest, teardown),
        cmocka_unit_test_teardown(test_sandbox_tmp_shm_home, teardown),
        cmocka_unit_test_teardown(test_sandbox_worker_gang, teardown),
    };
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "test_sandbox: %s\n", err);
        return 2;
    }
    int failed = cmocka_run_group_tests_name("sandbox", tests, NULL, NULL);
    ty_harness_cleanup();
    return failed;
}
