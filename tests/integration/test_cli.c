/*
 * test_cli.c - the client commands of the real `trainyard` binary, run as subprocesses against a
 * real `trainyard serve` on loopback with a temporary database: every command, --wait's exit
 * statuses, problem details with their field paths, the exit statuses of refusals, where the
 * server and token come from (flag > environment > config file) and the config file's 0600 rule.
 */
#include <pthread.h>
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

#include "tests/support/ty_harness.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif
#define JOB_FILE FIXTURES "/cli/job.yaml"
#define SWEEP_FILE FIXTURES "/cli/sweep.yaml"
#define RUN_MS 60000

static ty_server *g_srv;
static char g_cfgdir[256]; /* XDG_CONFIG_HOME of every run */
static char g_env_server[300], g_env_token[128], g_env_xdg[300];

/* What one run of `trainyard ...` did. */
typedef struct run_result {
    int status; /* the exit status; -1 when killed */
    char *out, *err;
} run_result;

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

/* Runs `trainyard args...` with env (NULL-terminated "NAME=value" entries). */
static run_result run_env(const char *const *env, const char *const *args)
{
    run_result r = {0};
    char err[512];
    int wstatus;
    if (ty_run(args, env, RUN_MS, &wstatus, &r.out, &r.err, err, sizeof err) < 0)
        fail_msg("trainyard %s: %s", args[0], err);
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    return r;
}

/* Runs with the server and admin token in the environment. */
static run_result run(const char *const *args)
{
    const char *env[] = {g_env_server, g_env_token, g_env_xdg, NULL};
    return run_env(env, args);
}

#define EXPECT_EXIT(r, want)                                                                       \
    do {                                                                                           \
        if ((r).status != (want))                                                                  \
            fail_msg("%s:%d: exit %d, want %d\nstdout: %s\nstderr: %s", __FILE__, __LINE__,        \
                     (r).status, (want), (r).out, (r).err);                                        \
    } while (0)

#define EXPECT_IN(hay, needle)                                                                     \
    do {                                                                                           \
        if (!strstr((hay), (needle)))                                                              \
            fail_msg("%s:%d: '%s' not in:\n%s", __FILE__, __LINE__, (needle), (hay));              \
    } while (0)

/* The id a `submit` printed (its first line), copied into id. */
static void first_line(const char *out, char *id, size_t len)
{
    size_t n = strcspn(out, "\n");
    assert_true(n > 0 && n < len);
    memcpy(id, out, n);
    id[n] = '\0';
}

static int group_setup(void **state)
{
    char err[512];
    (void)state;
    if (ty_server_start(NULL, &g_srv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    snprintf(g_cfgdir, sizeof g_cfgdir, "%s/xdg", ty_server_dir(g_srv));
    snprintf(g_env_server, sizeof g_env_server, "TRAINYARD_SERVER=%s", ty_server_url(g_srv));
    snprintf(g_env_token, sizeof g_env_token, "TRAINYARD_TOKEN=%s", TY_TEST_ADMIN_TOKEN);
    snprintf(g_env_xdg, sizeof g_env_xdg, "XDG_CONFIG_HOME=%s", g_cfgdir);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    ty_server_free(g_srv);
    return 0;
}

/* ---- submit --wait, logs, get, events --------------------------------------- */

static void test_submit_wait_succeeds(void **state)
{
    char id[64], path[300];
    (void)state;
    run_result r = run((const char *[]){"submit", "-f", JOB_FILE, "--wait", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, id, sizeof id);
    EXPECT_IN(r.out, "RUNNING -> SUCCEEDED");
    run_free(&r);

    r = run((const char *[]){"logs", id, NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "hello from rank 0");
    run_free(&r);
    r = run((const char *[]){"logs", id, "-r", "0", "-f", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "hello from rank 0");
    run_free(&r);

    /* The job as the server holds it: the alias in the file became env. */
    r = run((const char *[]){"get", id, "-o", "json", NULL});
    EXPECT_EXIT(r, 0);
    json_t *job = json_loads(r.out, 0, NULL);
    assert_non_null(job);
    assert_string_equal(ty_json_str(job, "state"), "SUCCEEDED");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(job, "spec"), "env"), "suite")),
                        "cli");
    json_decref(job);
    run_free(&r);
    r = run((const char *[]){"get", id, "-o", "yaml", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "state: SUCCEEDED");
    run_free(&r);

    r = run((const char *[]){"events", id, NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "REASON");
    EXPECT_IN(r.out, "Submitted");
    EXPECT_IN(r.out, "SUCCEEDED");
    run_free(&r);

    /* A JSON job file is YAML as well. */
    snprintf(path, sizeof path, "%s/job.json", ty_server_dir(g_srv));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"name\": \"cli-json\", \"image\": \"registry.example/worker:1.0\", \"command\":"
          " [\"true\"], \"workers\": {\"count\": 1}}\n",
          f);
    fclose(f);
    r = run((const char *[]){"submit", "-f", path, "-o", "json", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "\"name\": \"cli-json\"");
    run_free(&r);
}

static void test_submit_wait_fails(void **state)
{
    (void)state;
    run_result r = run((const char *[]){"submit", "-f", JOB_FILE, "--set",
                                        "command=[\"sh\", \"-c\", \"exit 3\"]", "--set",
                                        "name=cli-fails", "--wait", NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.out, "RUNNING -> FAILED");
    EXPECT_IN(r.err, "ended FAILED");
    run_free(&r);
}

static void test_problem_paths(void **state)
{
    (void)state;
    run_result r = run((const char *[]){"submit", "-f", JOB_FILE, "--set", "workers.count=0",
                                        "--set", "labels.team=x", NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.err, "HTTP 422");
    EXPECT_IN(r.err, "  $.workers.count: ");
    assert_string_equal(r.out, "");
    run_free(&r);

    /* A bad job file is the user's to fix, before anything is sent. */
    r = run((const char *[]){"submit", "-f", FIXTURES "/cli/no-such-file.yaml", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
    r = run((const char *[]){"submit", "-f", JOB_FILE, "--set", "novalue", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
}

/* ---- list, cancel, watch ------------------------------------------------------ */

static void test_list(void **state)
{
    char a[64], b[64];
    (void)state;
    run_result r = run((const char *[]){"submit", "-f", JOB_FILE, "--set", "labels.suite=list",
                                        "--set", "name=list-a", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, a, sizeof a);
    run_free(&r);
    r = run((const char *[]){"submit", "-f", JOB_FILE, "--set", "labels.suite=list", "--set",
                             "name=list-b", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, b, sizeof b);
    run_free(&r);

    r = run((const char *[]){"list", "--label", "suite=list", NULL});
    EXPECT_EXIT(r, 0);
    /* A header and two rows, newest first, in aligned columns. */
    char *l1 = r.out, *l2 = strchr(l1, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    assert_int_equal(strncmp(l1, "ID", 2), 0);
    assert_int_equal(strncmp(l2, b, strlen(b)), 0);
    assert_int_equal(strncmp(l3, a, strlen(a)), 0);
    assert_int_equal(strstr(l1, "NAME") - l1, strstr(l2, "list-b") - l2);
    assert_int_equal(strstr(l1, "NAME") - l1, strstr(l3, "list-a") - l3);
    run_free(&r);

    r = run((const char *[]){"list", "--label", "suite=list", "--limit", "1", "-o", "json", NULL});
    EXPECT_EXIT(r, 0);
    json_t *page = json_loads(r.out, 0, NULL);
    assert_non_null(page);
    assert_int_equal(json_array_size(json_object_get(page, "jobs")), 1);
    const char *next = json_string_value(json_object_get(page, "next_page_token"));
    assert_non_null(next);
    /* The token printed by one page gives the next one: the older job. */
    run_result r2 = run((const char *[]){"list", "--label", "suite=list", "--limit", "1",
                                         "--page-token", next, NULL});
    EXPECT_EXIT(r2, 0);
    EXPECT_IN(r2.out, a);
    assert_null(strstr(r2.out, b));
    run_free(&r2);
    json_decref(page);
    run_free(&r);
    /* A table of one page says how to get the rest; --all walks every page. */
    r = run((const char *[]){"list", "--label", "suite=list", "--limit", "1", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.err, "--page-token");
    run_free(&r);
    r = run((const char *[]){"list", "--label", "suite=list", "--limit", "1", "--all", "-o",
                             "json", NULL});
    EXPECT_EXIT(r, 0);
    page = json_loads(r.out, 0, NULL);
    assert_non_null(page);
    assert_int_equal(json_array_size(json_object_get(page, "jobs")), 2);
    assert_null(json_object_get(page, "next_page_token"));
    json_decref(page);
    run_free(&r);
    r = run((const char *[]){"list", "--label", "suite=list", "--limit", "1", "--all", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, a);
    EXPECT_IN(r.out, b);
    assert_null(strstr(r.err, "--page-token"));
    run_free(&r);

    r = run((const char *[]){"list", "--label", "suite=list", "-o", "wide", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "LABELS");
    EXPECT_IN(r.out, "suite=list");
    run_free(&r);
    r = run((const char *[]){"list", "--label", "suite=list", "-o", "yaml", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "name: list-a");
    run_free(&r);
    r = run((const char *[]){"list", "--state", "CANCELLED", "--queue", "default", "--label",
                             "suite=list", NULL});
    EXPECT_EXIT(r, 0);
    assert_null(strstr(r.out, a));
    run_free(&r);
    /* The server's refusal of a filter names the parameter. */
    r = run((const char *[]){"list", "--state", "NOPE", NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.err, "query.state");
    run_free(&r);
    r = run((const char *[]){"list", "-o", "xml", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
}

/* ---- sweep ---------------------------------------------------------------------- */

static void test_sweep(void **state)
{
    char id[64], id2[64];
    (void)state;
    /* --wait polls to the end and prints the trials, the best marked; each trial reported its
     * x as its loss, so the best is x = 0.5. */
    run_result r = run((const char *[]){"sweep", "create", "-f", SWEEP_FILE, "--wait", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, id, sizeof id);
    EXPECT_IN(r.out, "finished, 3/3 trials done, 2 at once");
    EXPECT_IN(r.out, "Best: trial 1 (job ");
    EXPECT_IN(r.out, "loss = 0.5");
    EXPECT_IN(r.out, "1 *");
    run_free(&r);

    r = run((const char *[]){"sweep", "get", id, "-o", "json", NULL});
    EXPECT_EXIT(r, 0);
    json_t *sw = json_loads(r.out, 0, NULL);
    assert_non_null(sw);
    assert_int_equal(json_array_size(json_object_get(sw, "trials")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sw, "best"), "index")), 1);
    json_decref(sw);
    run_free(&r);

    /* A second sweep whose trials sleep: listed first, then cancelled with its trials. */
    r = run((const char *[]){"sweep", "create", "-f", SWEEP_FILE, "--set", "name=cli-sleep",
                             "--set", "template.args=[\"sleep 60\"]", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, id2, sizeof id2);
    run_free(&r);
    r = run((const char *[]){"sweep", "list", NULL});
    EXPECT_EXIT(r, 0);
    char *l2 = strchr(r.out, '\n') + 1;
    assert_int_equal(strncmp(l2, id2, strlen(id2)), 0);
    EXPECT_IN(r.out, "cli-sleep");
    EXPECT_IN(r.out, "3/3");
    run_free(&r);
    r = run((const char *[]){"sweep", "list", "--limit", "1", "--all", "-o", "json", NULL});
    EXPECT_EXIT(r, 0);
    sw = json_loads(r.out, 0, NULL);
    assert_non_null(sw);
    assert_true(json_array_size(json_object_get(sw, "sweeps")) >= 2);
    json_decref(sw);
    run_free(&r);
    r = run((const char *[]){"sweep", "cancel", id2, NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, id2);
    run_free(&r);
    r = run((const char *[]){"sweep", "get", id2, NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "CANCELLED");
    assert_null(strstr(r.out, "PENDING"));
    assert_null(strstr(r.out, "RUNNING"));
    run_free(&r);

    /* Refusals: the server's field paths, not found, usage. */
    r = run((const char *[]){"sweep", "create", "-f", SWEEP_FILE, "--set", "parallelism=0", NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.err, "$.parallelism");
    run_free(&r);
    r = run((const char *[]){"sweep", "get", "0000000000000000000000000z", NULL});
    EXPECT_EXIT(r, 3);
    run_free(&r);
    r = run((const char *[]){"sweep", "nope", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
    r = run((const char *[]){"sweep", "get", "--help", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "Usage: trainyard sweep get");
    run_free(&r);
}

static void test_cancel(void **state)
{
    char id[64];
    (void)state;
    run_result r = run(
        (const char *[]){"submit", "-f", JOB_FILE, "--set", "command=[\"sleep\", \"60\"]", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, id, sizeof id);
    run_free(&r);
    r = run((const char *[]){"cancel", id, NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, id);
    EXPECT_IN(r.out, "CANCEL");
    run_free(&r);
    /* One unknown id among others: the others are cancelled, the exit says not found. */
    r = run((const char *[]){"cancel", "0000000000000000000000000z", id, NULL});
    EXPECT_EXIT(r, 3);
    EXPECT_IN(r.err, "HTTP 404");
    EXPECT_IN(r.out, id);
    run_free(&r);
    r = run((const char *[]){"get", "0000000000000000000000000z", NULL});
    EXPECT_EXIT(r, 3);
    run_free(&r);
    r = run((const char *[]){"events", "0000000000000000000000000z", NULL});
    EXPECT_EXIT(r, 3);
    run_free(&r);
}

/* Submits labelled jobs over HTTP until told to stop, so that a watcher sees changes. */
static volatile int g_stop_submitting;

static void *submitter(void *arg)
{
    (void)arg;
    ty_client *c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    const char *body = "{\"name\": \"watched\", \"image\": \"registry.example/worker:1.0\","
                       " \"command\": [\"true\"], \"workers\": {\"count\": 1},"
                       " \"labels\": {\"suite\": \"watch\"}}";
    char err[256];
    for (int i = 0; i < 200 && !g_stop_submitting; i++) {
        ty_http_resp resp = {0};
        ty_http_req req = {.method = "POST", .path = "/v1/jobs", .body = body};
        ty_http_do(c, &req, &resp, err, sizeof err);
        ty_resp_free(&resp);
        usleep(100000);
    }
    ty_client_free(c);
    return NULL;
}

static void test_watch(void **state)
{
    pthread_t t;
    (void)state;
    g_stop_submitting = 0;
    assert_int_equal(pthread_create(&t, NULL, submitter, NULL), 0);
    run_result r = run((const char *[]){"watch", "--label", "suite=watch", "--count", "3", NULL});
    g_stop_submitting = 1;
    pthread_join(t, NULL);
    EXPECT_EXIT(r, 0);
    /* Exactly three lines, each naming a job called "watched" and its change. */
    int lines = 0;
    for (char *p = r.out; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 3);
    EXPECT_IN(r.out, "  watched  ");
    EXPECT_IN(r.out, " -> ");
    run_free(&r);
}

/* ---- refusals, help ------------------------------------------------------------- */

static void test_exit_statuses(void **state)
{
    (void)state;
    const char *bad_token[] = {g_env_server, "TRAINYARD_TOKEN=ty_wrong", g_env_xdg, NULL};
    run_result r = run_env(bad_token, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 4);
    EXPECT_IN(r.err, "HTTP 401");
    run_free(&r);
    r = run((const char *[]){"list", "--server", "http://127.0.0.1:1", NULL});
    EXPECT_EXIT(r, 5);
    EXPECT_IN(r.err, "cannot reach the server");
    run_free(&r);
    const char *none[] = {g_env_xdg, NULL};
    r = run_env(none, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 2);
    EXPECT_IN(r.err, "no server");
    run_free(&r);
    r = run((const char *[]){"submit", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
    r = run((const char *[]){"get", "--bogus", "x", NULL});
    EXPECT_EXIT(r, 2);
    run_free(&r);
}

static void test_help(void **state)
{
    static const char *const cmds[] = {"submit", "list",  "get",   "events", "logs",   "watch",
                                       "cancel", "login", "serve", "token",  "cluster"};
    (void)state;
    run_result r = run((const char *[]){"--help", NULL});
    EXPECT_EXIT(r, 0);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "  %s ", cmds[i]);
        EXPECT_IN(r.out, line);
    }
    run_free(&r);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char usage[64];
        r = run((const char *[]){cmds[i], "--help", NULL});
        EXPECT_EXIT(r, 0);
        snprintf(usage, sizeof usage, "Usage: trainyard %s", cmds[i]);
        EXPECT_IN(r.out, usage);
        run_free(&r);
    }
}

/* ---- the cluster and node quarantine on the local backend --------------------------- */

/*
 * On a server with one GPU ("gpu0" in the node ledger): two jobs fail three times on it, so it
 * is quarantined (their events say so, `trainyard cluster` lists it with the failures); a job
 * that needs a GPU waits, no GPU being free; `trainyard cluster release gpu0` lets it run; a
 * second release is "not found" (exit 3).
 */
static void test_cluster_quarantine_local(void **state)
{
    (void)state;
    char err[512], env_server[300], id[64];
    ty_server *srv = NULL;
    static const char *const args[] = {"--local-gpus", "1", "--local-slots", "4", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &srv, err, sizeof err) < 0)
        fail_msg("%s", err);
    snprintf(env_server, sizeof env_server, "TRAINYARD_SERVER=%s", ty_server_url(srv));
    const char *env[] = {env_server, g_env_token, g_env_xdg, NULL};
    run_result r = run_env(env, (const char *[]){"cluster", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "GPU_TYPE");
    EXPECT_IN(r.out, "Quarantine: 3 failures of at least 2 jobs within 3600 s");
    run_free(&r);

    r = run_env(env, (const char *[]){"submit", "-f", JOB_FILE, "--set", "name=bad-a", "--set",
                                      "command=[\"sh\",\"-c\",\"exit 3\"]", "--set",
                                      "restart.max=1", "--set",
                                      "resources.gpu={\"type\":\"local\",\"count\":1}", "--wait",
                                      NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.out, "rank 0 exited with code 3 on node gpu0");
    run_free(&r);
    r = run_env(env, (const char *[]){"submit", "-f", JOB_FILE, "--set", "name=bad-b", "--set",
                                      "command=[\"sh\",\"-c\",\"exit 4\"]", "--set",
                                      "resources.gpu={\"type\":\"local\",\"count\":1}", "--wait",
                                      NULL});
    EXPECT_EXIT(r, 1);
    EXPECT_IN(r.out, "node gpu0 quarantined (3 failures of 2 jobs within 3600 s)");
    run_free(&r);
    r = run_env(env, (const char *[]){"cluster", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "Quarantined: gpu0 since ");
    EXPECT_IN(r.out, "rank 0 exited with code 4 on node gpu0");
    run_free(&r);

    r = run_env(env, (const char *[]){"submit", "-f", JOB_FILE, "--set", "name=good", "--set",
                                      "resources.gpu={\"type\":\"local\",\"count\":1}", NULL});
    EXPECT_EXIT(r, 0);
    first_line(r.out, id, sizeof id);
    run_free(&r);
    int waiting = 0;
    for (int i = 0; i < 300 && !waiting; i++) {
        r = run_env(env, (const char *[]){"get", id, "-o", "json", NULL});
        waiting = strstr(r.out, "NoCapacity") != NULL;
        run_free(&r);
        if (!waiting)
            ty_sleep_ms(100);
    }
    assert_true(waiting);
    r = run_env(env, (const char *[]){"cluster", "release", "gpu0", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "gpu0  released");
    run_free(&r);
    int done = 0;
    for (int i = 0; i < 300 && !done; i++) {
        r = run_env(env, (const char *[]){"get", id, "-o", "json", NULL});
        done = strstr(r.out, "\"state\": \"SUCCEEDED\"") != NULL;
        run_free(&r);
        if (!done)
            ty_sleep_ms(100);
    }
    assert_true(done);
    r = run_env(env, (const char *[]){"cluster", "release", "gpu0", NULL});
    EXPECT_EXIT(r, 3);
    EXPECT_IN(r.err, "not quarantined");
    run_free(&r);
    ty_server_free(srv);
}

/* ---- where the server and token come from --------------------------------------- */

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_config_precedence(void **state)
{
    char dir[300], cfg[400], text[512], good_tok[400], bad_tok[400], flag_server[300];
    (void)state;
    snprintf(dir, sizeof dir, "%s/trainyard", g_cfgdir);
    mkdir(g_cfgdir, 0700);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg, "%s/config", dir);
    snprintf(good_tok, sizeof good_tok, "%s/good.tok", ty_server_dir(g_srv));
    snprintf(bad_tok, sizeof bad_tok, "%s/bad.tok", ty_server_dir(g_srv));
    write_file(good_tok, TY_TEST_ADMIN_TOKEN "\n", 0600);
    write_file(bad_tok, "ty_wrong\n", 0600);
    snprintf(flag_server, sizeof flag_server, "%s", ty_server_url(g_srv));

    /* The file alone gives both. */
    snprintf(text, sizeof text, "server: %s\ntoken: %s\n", ty_server_url(g_srv),
             TY_TEST_ADMIN_TOKEN);
    write_file(cfg, text, 0600);
    const char *file_only[] = {g_env_xdg, NULL};
    run_result r = run_env(file_only, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 0);
    run_free(&r);

    /* The environment beats the file: an unreachable server from it wins. */
    const char *env_bad[] = {"TRAINYARD_SERVER=http://127.0.0.1:1", "TRAINYARD_TOKEN=ty_wrong",
                             g_env_xdg, NULL};
    r = run_env(env_bad, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 5);
    run_free(&r);
    /* Flags beat the environment: --server reaches the server, the env's token is refused... */
    r = run_env(env_bad, (const char *[]){"list", "--server", flag_server, NULL});
    EXPECT_EXIT(r, 4);
    run_free(&r);
    /* ...until --token-file gives the good one. */
    r = run_env(env_bad,
                (const char *[]){"list", "--server", flag_server, "--token-file", good_tok, NULL});
    EXPECT_EXIT(r, 0);
    run_free(&r);
    /* And a bad --token-file beats a good environment. */
    r = run_env((const char *[]){g_env_server, g_env_token, g_env_xdg, NULL},
                (const char *[]){"list", "--token-file", bad_tok, NULL});
    EXPECT_EXIT(r, 4);
    run_free(&r);

    /* A file others may read is refused, not used. */
    assert_int_equal(chmod(cfg, 0644), 0);
    r = run_env(file_only, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 2);
    EXPECT_IN(r.err, "chmod 600");
    run_free(&r);
    unlink(cfg);
}

static void test_login(void **state)
{
    char cfg[400], good_tok[400], bad_tok[400];
    struct stat st;
    (void)state;
    snprintf(cfg, sizeof cfg, "%s/trainyard/config", g_cfgdir);
    snprintf(good_tok, sizeof good_tok, "%s/good.tok", ty_server_dir(g_srv));
    snprintf(bad_tok, sizeof bad_tok, "%s/bad.tok", ty_server_dir(g_srv));
    write_file(good_tok, TY_TEST_ADMIN_TOKEN "\n", 0600);
    write_file(bad_tok, "ty_wrong\n", 0600);
    unlink(cfg);
    const char *env[] = {g_env_xdg, NULL};

    /* A token the server refuses is not saved. */
    run_result r = run_env(env, (const char *[]){"login", "--server", ty_server_url(g_srv),
                                                 "--token-file", bad_tok, NULL});
    EXPECT_EXIT(r, 4);
    assert_int_equal(stat(cfg, &st), -1);
    run_free(&r);

    r = run_env(env, (const char *[]){"login", "--server", ty_server_url(g_srv), "--token-file",
                                      good_tok, NULL});
    EXPECT_EXIT(r, 0);
    assert_int_equal(stat(cfg, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    run_free(&r);
    r = run_env(env, (const char *[]){"list", NULL});
    EXPECT_EXIT(r, 0);
    EXPECT_IN(r.out, "ID");
    run_free(&r);
    unlink(cfg);
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_wait_succeeds),
        cmocka_unit_test(test_submit_wait_fails),
        cmocka_unit_test(test_problem_paths),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_exit_statuses),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_cluster_quarantine_local),
        cmocka_unit_test(test_config_precedence),
        cmocka_unit_test(test_login),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    ty_harness_cleanup();
    return rc;
}
