/*
 * test_jobs_run.c - `trainyard serve` runs jobs: the local backend and the
 * reconcile loop, end to end through the HTTP API.
 *
 * Usage: test_jobs_run TRAINYARD_BINARY OPENAPI_YAML (CTest passes both).
 * Every case starts its own server (its own flags, its own data directory),
 * submits jobs whose commands are small shell scripts, and polls the API
 * until they end. The scripts leave evidence in files (their environment,
 * who ran at the same time as whom, which attempt saw which processes), and
 * the test scans /proc for processes whose environment names the job, so
 * "nothing is left running" is checked on the machine itself. Deadlines are
 * generous and only bound a hang; nothing asserts how long anything took.
 *
 * A case that passes ends by stopping its server with SIGTERM, which must
 * exit 0 (under the sanitizers: no error, no leak) and leave no process of
 * any job behind. The teardown of a failed case kills whatever its jobs left
 * (processes whose TRAINYARD_OUTPUT_DIR lies in that server's data
 * directory), so a failure never leaves a `sleep 1000` running.
 */
#define _GNU_SOURCE /* strcasestr() */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

#define DEADLINE_MS 60000       /* for a job to reach a state */
#define BURST_JOBS 500
#define BURST_DEADLINE_MS 240000 /* for all of the burst to end */
#define IMAGE "registry.example/worker:1.0"
/* The states in which a job holds its queue's place and its slots. */
#define ACTIVE_STATES "ADMITTED,STARTING,RUNNING,RESTARTING,CANCELLING"

/* Set by each case's server start; torn down by teardown(). */
static ty_server *g_srv;
static ty_client *g_c;

#define EXPECT_STATUS(r, want)                                                                     \
    do {                                                                                           \
        if ((r)->status != (want))                                                                 \
            fail_msg("%s:%d: expected HTTP %d, got %ld: %.*s", __FILE__, __LINE__, (int)(want),    \
                     (r)->status, (int)((r)->body_len > 600 ? 600 : (r)->body_len), (r)->body);    \
    } while (0)

/* ---- small helpers ------------------------------------------------------- */

/* Reads a whole file (new, NUL-terminated; *len without the NUL); NULL if absent. */
static char *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = NULL;
    size_t n = 0, cap = 0;

    if (fd < 0)
        return NULL;
    for (;;) {
        ssize_t got;
        if (cap - n < 4096) {
            char *grown = realloc(buf, cap + 65536 + 1);
            if (!grown) {
                free(buf);
                close(fd);
                return NULL;
            }
            buf = grown;
            cap += 65536;
        }
        got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (!buf && !(buf = malloc(1)))
        return NULL;
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* The file's text (new); fails the test when it cannot be read. */
static char *slurp_or_fail(const char *path)
{
    char *text = slurp(path, NULL);
    if (!text)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    return text;
}

/* Number of lines of text that start with prefix. */
static int count_lines(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    int count = 0;

    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, prefix, n) == 0)
            count++;
        line = end ? end + 1 : NULL;
    }
    return count;
}

/* realpath() into out; fails the test on error. */
static void real_path(const char *path, char *out)
{
    if (!realpath(path, out))
        fail_msg("realpath %s: %s", path, strerror(errno));
}

/* ---- processes ----------------------------------------------------------- */

/*
 * Whether the environment block env[0..len) (NUL-separated "NAME=value")
 * holds every entry of want (NULL-terminated): exactly, or as a prefix when
 * the wanted entry ends with '*'.
 */
static int environ_has_all(const char *env, size_t len, const char *const *want)
{
    for (size_t w = 0; want[w]; w++) {
        size_t wl = strlen(want[w]);
        int prefix = wl > 0 && want[w][wl - 1] == '*', found = 0;
        if (prefix)
            wl--;
        for (size_t i = 0; i < len && !found;) {
            size_t el = strnlen(env + i, len - i);
            if (prefix ? el >= wl && memcmp(env + i, want[w], wl) == 0
                       : el == wl && memcmp(env + i, want[w], wl) == 0)
                found = 1;
            i += el + 1;
        }
        if (!found)
            return 0;
    }
    return 1;
}

/*
 * Live processes whose environment holds every entry of want (see above):
 * their number, and up to max of their pids in pids (may be NULL). A zombie
 * has an empty environment, so only processes that still run are counted.
 */
static int find_procs(const char *const *want, pid_t *pids, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char path[64], *env, *end = NULL;
        size_t len = 0;
        long pid = strtol(de->d_name, &end, 10);

        if (!end || *end || pid <= 0 || pid == (long)getpid())
            continue;
        snprintf(path, sizeof path, "/proc/%ld/environ", pid);
        env = slurp(path, &len);
        if (!env)
            continue;
        if (len > 0 && environ_has_all(env, len, want)) {
            if (pids && n < max)
                pids[n] = (pid_t)pid;
            n++;
        }
        free(env);
    }
    closedir(d);
    return n;
}

/* Processes of one job (any attempt when attempt is 0). */
static int job_procs(const char *id, int attempt, pid_t *pids, int max)
{
    char want_id[96], want_attempt[64];
    const char *want[3] = {want_id, NULL, NULL};

    snprintf(want_id, sizeof want_id, "TRAINYARD_JOB_ID=%s", id);
    if (attempt > 0) {
        snprintf(want_attempt, sizeof want_attempt, "TRAINYARD_ATTEMPT=%d", attempt);
        want[1] = want_attempt;
    }
    return find_procs(want, pids, max);
}

/* Fails when a process of the job still runs, naming the first few. */
static void expect_no_procs(const char *id, const char *when)
{
    pid_t pids[8];
    int n = job_procs(id, 0, pids, 8);

    if (n > 0)
        fail_msg("%s: %d process(es) of job %s still run (pid %d%s)", when, n, id, (int)pids[0],
                 n > 1 ? ", ..." : "");
}

/*
 * Processes of any job of server s: those whose TRAINYARD_OUTPUT_DIR lies in
 * its data directory, spelled as given or canonical. Their number, and up to
 * max of their pids (pids may be NULL).
 */
static int server_job_procs(const ty_server *s, pid_t *pids, int max)
{
    char dirs[2][PATH_MAX], want0[PATH_MAX + 64];
    const char *want[2] = {want0, NULL};
    int n = 0;

    snprintf(dirs[0], sizeof dirs[0], "%s", ty_server_dir(s));
    if (!realpath(ty_server_dir(s), dirs[1]) || strcmp(dirs[0], dirs[1]) == 0)
        dirs[1][0] = '\0';
    for (int d = 0; d < 2 && dirs[d][0]; d++) {
        if (snprintf(want0, sizeof want0, "TRAINYARD_OUTPUT_DIR=%s/jobs/*", dirs[d]) >=
            (int)sizeof want0)
            continue;
        n += find_procs(want, pids ? pids + (n < max ? n : max) : NULL, n < max ? max - n : 0);
    }
    return n;
}

/* Waits until at least n processes of the job's attempt run. */
static void wait_procs(const char *id, int attempt, int n)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;

    while (job_procs(id, attempt, NULL, 0) < n) {
        if (ty_now_ms() > deadline)
            fail_msg("job %s: fewer than %d processes of attempt %d after 60 s", id, n, attempt);
        ty_sleep_ms(50);
    }
}

/* SIGKILLs whatever a job of server s left running (teardown only). */
static void kill_leftovers(const ty_server *s)
{
    pid_t pids[256];
    int n, killed = 0;

    for (int round = 0; round < 20 && (n = server_job_procs(s, pids, 256)) > 0; round++) {
        for (int i = 0; i < n && i < 256; i++)
            kill(pids[i], SIGKILL);
        killed += n;
        ty_sleep_ms(50);
    }
    if (killed > 0)
        print_message("teardown: killed %d leftover job process(es)\n", killed);
}

/* ---- the server ---------------------------------------------------------- */

/* Starts this case's server with the extra flags args (NULL-terminated). */
static void start_server(const char *const *args)
{
    /* A variable only the server has: no rank may see it. */
    static const char *const env[] = {"TY_IT_SERVER_ONLY=must-not-leak", NULL};
    ty_server_opts opts = {.args = args, .env = env};
    char err[2048];

    assert_null(g_srv);
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0)
        fail_msg("%s", err);
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
    kill_leftovers(g_srv);
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

/* The tail of the server's log, for failure messages (static buffer). */
static const char *log_tail(void)
{
    static char tail[3000];
    char *text = ty_server_log(g_srv);
    size_t n;

    if (!text)
        return "(no log)";
    n = strlen(text);
    snprintf(tail, sizeof tail, "%s", n > sizeof tail - 1 ? text + n - (sizeof tail - 1) : text);
    free(text);
    return tail;
}

/*
 * The end of a case that passed: SIGTERM must stop the server cleanly (exit
 * status 0, so under the sanitizers without an error or a leak) and leave no
 * process of any of its jobs behind.
 */
static void finish(void)
{
    char err[512];
    int wstatus, left;

    ty_client_free(g_c);
    g_c = NULL;
    if (ty_server_stop(g_srv, 60000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fail_msg("the server ended with status %d after SIGTERM; log: %s",
                 WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus), log_tail());
    left = server_job_procs(g_srv, NULL, 0);
    if (left > 0)
        fail_msg("%d job process(es) still run after the server stopped", left);
}

/* ---- the API ------------------------------------------------------------- */

/* Serializes and frees j (new string). */
static char *dumps(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    assert_non_null(s);
    return s;
}

/*
 * A spec (new) whose command is `sh -c script` with `workers` ranks, no
 * restarts and no backoff; callers add or replace members.
 */
static json_t *sh_spec(const char *name, int workers, const char *script)
{
    json_t *spec = json_pack("{s:s, s:s, s:[s,s,s], s:{s:i}, s:{s:i, s:i}}", "name", name,
                             "image", IMAGE, "command", "sh", "-c", script, "workers", "count",
                             workers, "restart", "max", 0, "backoff_seconds", 0);
    assert_non_null(spec);
    return spec;
}

/* POST /v1/jobs expecting 201; returns the job's id (new). spec is stolen. */
static char *submit(json_t *spec)
{
    char *body = dumps(spec), *id;
    ty_http_resp *r = ty_req(g_c, "POST", "/v1/jobs", body);

    free(body);
    EXPECT_STATUS(r, 201);
    assert_non_null(ty_json_str(r->json, "id"));
    id = strdup(ty_json_str(r->json, "id"));
    assert_non_null(id);
    ty_resp_destroy(r);
    return id;
}

/* POST /v1/jobs:batch of the specs in jobs (stolen) expecting 201 and all of them. */
static void submit_batch(json_t *jobs)
{
    size_t n = json_array_size(jobs);
    char *body = dumps(json_pack("{s:o}", "jobs", jobs));
    ty_http_resp *r = ty_req(g_c, "POST", "/v1/jobs:batch", body);

    free(body);
    EXPECT_STATUS(r, 201);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), n);
    ty_resp_destroy(r);
}

/* GET path expecting 200; returns the JSON body (new). */
static json_t *get_json(const char *path)
{
    ty_http_resp *r = ty_req(g_c, "GET", path, NULL);
    json_t *j;

    EXPECT_STATUS(r, 200);
    assert_non_null(r->json);
    j = json_incref(r->json);
    ty_resp_destroy(r);
    return j;
}

static json_t *get_job(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    return get_json(path);
}

/* The job's events array (new). */
static json_t *get_events(const char *id)
{
    char path[128];
    json_t *body, *events;

    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    body = get_json(path);
    events = json_incref(json_object_get(body, "events"));
    json_decref(body);
    assert_true(json_is_array(events));
    return events;
}

/* The job's attempts array (new). */
static json_t *get_attempts(const char *id)
{
    char path[128];
    json_t *body, *attempts;

    snprintf(path, sizeof path, "/v1/jobs/%s/attempts", id);
    body = get_json(path);
    attempts = json_incref(json_object_get(body, "attempts"));
    json_decref(body);
    assert_true(json_is_array(attempts));
    return attempts;
}

static const char *jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* obj[key] as an integer; fails the test when it is not one. */
static long long jint(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) {
        char *text = json_dumps(obj, JSON_COMPACT);
        fail_msg("member %s is not an integer in %s", key, text ? text : "?");
    }
    return json_integer_value(v);
}

static int str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static int is_terminal(const char *state)
{
    return str_eq(state, "SUCCEEDED") || str_eq(state, "FAILED") || str_eq(state, "CANCELLED");
}

/* Prints a job, its events and the server log's tail (before a failure). */
static void dump_job(const char *id)
{
    char path[128];
    ty_http_resp *r;

    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    r = ty_req(g_c, "GET", path, NULL);
    print_message("job: %s\n", r->body);
    ty_resp_destroy(r);
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    r = ty_req(g_c, "GET", path, NULL);
    print_message("events: %s\n", r->body);
    ty_resp_destroy(r);
    print_message("server log (tail): %s\n", log_tail());
}

/*
 * Polls the job until its state is `want` (returns the job, new). Reaching
 * another terminal state, or no `want` within DEADLINE_MS, fails the test.
 */
static json_t *wait_state(const char *id, const char *want)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    char last[32] = "";

    for (;;) {
        json_t *job = get_job(id);
        const char *state = jstr(job, "state");
        if (str_eq(state, want))
            return job;
        snprintf(last, sizeof last, "%s", state ? state : "?");
        json_decref(job);
        if (is_terminal(last) || ty_now_ms() > deadline) {
            dump_job(id);
            fail_msg("job %s: waiting for %s, it is %s%s", id, want, last,
                     is_terminal(last) ? "" : " after 60 s");
        }
        ty_sleep_ms(50);
    }
}

/* The first event from -> to (either may be NULL: any); borrowed or NULL. */
static const json_t *find_event(const json_t *events, const char *from, const char *to)
{
    size_t i;
    const json_t *ev;

    json_array_foreach(events, i, ev) {
        if ((!from || str_eq(jstr(ev, "from"), from)) && (!to || str_eq(jstr(ev, "to"), to)))
            return ev;
    }
    return NULL;
}

/* The event into `to` (the last one), failing when there is none. */
static const json_t *event_into(const char *id, const json_t *events, const char *to)
{
    const json_t *found = NULL, *ev;
    size_t i;

    json_array_foreach(events, i, ev) {
        if (str_eq(jstr(ev, "to"), to))
            found = ev;
    }
    if (!found) {
        char *text = json_dumps(events, JSON_COMPACT);
        fail_msg("job %s: no event into %s in %s", id, to, text ? text : "?");
    }
    return found;
}

static int has_reason(const json_t *events, const char *reason)
{
    size_t i;
    const json_t *ev;

    json_array_foreach(events, i, ev) {
        if (str_eq(jstr(ev, "reason"), reason))
            return 1;
    }
    return 0;
}

/* The ranks' pids of the job's current attempt (at most max); their number. */
static int current_pids(const json_t *job, pid_t *pids, int max)
{
    const json_t *ranks = json_object_get(json_object_get(job, "current_attempt"), "ranks");
    const json_t *rk;
    size_t i;
    int n = 0;

    assert_true(json_is_array(ranks));
    json_array_foreach(ranks, i, rk) {
        long long pid = jint(rk, "pid");
        assert_true(pid > 0);
        if (n < max)
            pids[n++] = (pid_t)pid;
    }
    return n;
}

/* Path of a file the job's ranks wrote under TRAINYARD_OUTPUT_DIR. */
static void output_path(const char *id, const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/jobs/%s/output/%s", ty_server_dir(g_srv), id, name);
}

/* Waits until the file exists and holds at least n lines starting with prefix. */
static char *wait_lines(const char *id, const char *path, const char *prefix, int n)
{
    int64_t deadline = ty_now_ms() + DEADLINE_MS;

    for (;;) {
        char *text = slurp(path, NULL);
        if (text && count_lines(text, prefix) >= n)
            return text;
        free(text);
        if (ty_now_ms() > deadline) {
            dump_job(id);
            fail_msg("%s: fewer than %d lines '%s...' after 60 s", path, n, prefix);
        }
        ty_sleep_ms(50);
    }
}

/* ---- 1. the environment of every rank ------------------------------------ */

/* Parses an environ block (NUL-separated) into {name: value} (new). */
static json_t *parse_environ(const char *env, size_t len)
{
    json_t *obj = json_object();

    assert_non_null(obj);
    for (size_t i = 0; i < len;) {
        size_t el = strnlen(env + i, len - i);
        const char *eq = memchr(env + i, '=', el);
        if (eq) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(eq - (env + i)), env + i);
            json_object_set_new(obj, name, json_stringn(eq + 1, el - (size_t)(eq + 1 - (env + i))));
        }
        i += el + 1;
    }
    return obj;
}

/*
 * The tests of scheduling (slots, queue limits, order) watch their jobs through one
 * directory all of them write to; a sandbox shows a job nothing of the others (see
 * test_sandbox), so these run their ranks unsandboxed. What they test is the same.
 */
#define SHARED_DIR_OFF "--local-sandbox=off"

static const char *const allowed_env[] = {
    /* the contract of DESIGN.md */
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TRAINYARD_JOB_ID", "TRAINYARD_ATTEMPT", "TRAINYARD_SERVER", "TRAINYARD_TOKEN",
    "TRAINYARD_RENDEZVOUS_SECRET",
    "TRAINYARD_DATA_DIR", "TRAINYARD_OUTPUT_DIR", "TRAINYARD_CHECKPOINT_DIR",
    "CUDA_VISIBLE_DEVICES",
    /* what the local backend passes on from the server */
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR",
    /* set by the sandbox: the working directory */
    "PWD",
    /* the job's own */
    "MY_VAR", "MY_OTHER_VAR", NULL};

static int is_allowed_env(const char *name)
{
    for (size_t i = 0; allowed_env[i]; i++)
        if (strcmp(allowed_env[i], name) == 0)
            return 1;
    return 0;
}

static void expect_env(const json_t *env, int rank, const char *name, const char *want)
{
    const char *got = jstr(env, name);
    if (!str_eq(got, want))
        fail_msg("rank %d: %s is '%s', expected '%s'", rank, name, got ? got : "(unset)", want);
}

static void test_env_contract(void **state)
{
    static const char *const args[] = {"--local-slots", "4", NULL};
    /* The shell's environment as it was exec'ed, and its working directory. */
    const char *script = "cat /proc/$$/environ > \"$TRAINYARD_OUTPUT_DIR/env-$RANK\" && "
                         "pwd -P > \"$TRAINYARD_OUTPUT_DIR/cwd-$RANK\"";
    json_t *spec, *job, *env[3], *attempt;
    const json_t *ranks, *rk;
    char *id, path[PATH_MAX], want[PATH_MAX], real[PATH_MAX], port[16];
    const char *master_port = NULL;
    size_t i;

    (void)state;
    start_server(args);
    spec = sh_spec("env-test", 3, script);
    json_object_set_new(spec, "env",
                        json_pack("{s:s, s:s}", "MY_VAR", "hello world", "MY_OTHER_VAR", "a=b;c"));
    json_object_set_new(spec, "timeout_seconds", json_integer(30));
    id = submit(spec);
    job = wait_state(id, "SUCCEEDED");

    /* The job's record of its one attempt. */
    assert_int_equal(jint(job, "restarts"), 0);
    assert_int_equal(jint(job, "attempt"), 1);
    attempt = json_incref(json_object_get(job, "current_attempt"));
    assert_true(json_is_object(attempt));
    assert_int_equal(jint(attempt, "attempt"), 1);
    if (!str_eq(jstr(attempt, "state"), "succeeded"))
        fail_msg("current_attempt.state is %s", jstr(attempt, "state"));
    ranks = json_object_get(attempt, "ranks");
    assert_int_equal(json_array_size(ranks), 3);
    json_array_foreach(ranks, i, rk) {
        assert_int_equal(jint(rk, "rank"), (long long)i);
        assert_int_equal(jint(rk, "exit_code"), 0);
        if (!str_eq(jstr(rk, "state"), "succeeded"))
            fail_msg("rank %zu: state %s", i, jstr(rk, "state"));
    }
    json_decref(attempt);

    snprintf(port, sizeof port, ":%d", ty_server_port(g_srv));
    for (int r = 0; r < 3; r++) {
        char num[16], *text;
        size_t len = 0;
        const char *name;
        json_t *val;

        snprintf(num, sizeof num, "env-%d", r);
        output_path(id, num, path, sizeof path);
        text = slurp(path, &len);
        if (!text)
            fail_msg("rank %d wrote no %s", r, path);
        env[r] = parse_environ(text, len);
        free(text);

        snprintf(num, sizeof num, "%d", r);
        expect_env(env[r], r, "RANK", num);
        expect_env(env[r], r, "LOCAL_RANK", num);
        expect_env(env[r], r, "WORLD_SIZE", "3");
        expect_env(env[r], r, "LOCAL_WORLD_SIZE", "3");
        expect_env(env[r], r, "MASTER_ADDR", "127.0.0.1");
        expect_env(env[r], r, "TRAINYARD_JOB_ID", id);
        expect_env(env[r], r, "TRAINYARD_ATTEMPT", "1");
        expect_env(env[r], r, "MY_VAR", "hello world");
        expect_env(env[r], r, "MY_OTHER_VAR", "a=b;c");
        /* No GPU was asked for: an empty list, so no library picks one by default. */
        expect_env(env[r], r, "CUDA_VISIBLE_DEVICES", "");

        /* MASTER_PORT: a port, the same for every rank of the attempt. */
        {
            const char *p = jstr(env[r], "MASTER_PORT");
            char *end = NULL;
            long v = p ? strtol(p, &end, 10) : 0;
            if (!p || !*p || *end || v < 1 || v > 65535)
                fail_msg("rank %d: MASTER_PORT '%s'", r, p ? p : "(unset)");
            if (!master_port)
                master_port = p;
            else if (!str_eq(master_port, p))
                fail_msg("rank %d: MASTER_PORT %s, rank 0 has %s", r, p, master_port);
        }
        /* TRAINYARD_RENDEZVOUS_SECRET: 32 bytes in hex, the same for every rank. */
        {
            const char *sec = jstr(env[r], "TRAINYARD_RENDEZVOUS_SECRET");
            if (!sec || strlen(sec) != 64 || strspn(sec, "0123456789abcdef") != 64)
                fail_msg("rank %d: TRAINYARD_RENDEZVOUS_SECRET is not 64 hex digits", r);
            if (r > 0 && !str_eq(sec, jstr(env[0], "TRAINYARD_RENDEZVOUS_SECRET")))
                fail_msg("rank %d: another TRAINYARD_RENDEZVOUS_SECRET than rank 0's", r);
        }
        /* TRAINYARD_SERVER names this server. */
        if (!jstr(env[r], "TRAINYARD_SERVER") || !strstr(jstr(env[r], "TRAINYARD_SERVER"), port))
            fail_msg("rank %d: TRAINYARD_SERVER '%s' does not name port %d", r,
                     jstr(env[r], "TRAINYARD_SERVER") ? jstr(env[r], "TRAINYARD_SERVER") : "(unset)",
                     ty_server_port(g_srv));
        /* The directories: output (per job), data and checkpoints, the same for every rank. */
        snprintf(want, sizeof want, "%s/jobs/%s/output", ty_server_dir(g_srv), id);
        real_path(want, path);
        if (!jstr(env[r], "TRAINYARD_OUTPUT_DIR"))
            fail_msg("rank %d: no TRAINYARD_OUTPUT_DIR", r);
        real_path(jstr(env[r], "TRAINYARD_OUTPUT_DIR"), real);
        if (strcmp(path, real) != 0)
            fail_msg("rank %d: TRAINYARD_OUTPUT_DIR is %s, expected %s", r, real, path);
        if (!jstr(env[r], "TRAINYARD_DATA_DIR") || !*jstr(env[r], "TRAINYARD_DATA_DIR") ||
            !jstr(env[r], "TRAINYARD_CHECKPOINT_DIR") ||
            !*jstr(env[r], "TRAINYARD_CHECKPOINT_DIR"))
            fail_msg("rank %d: TRAINYARD_DATA_DIR or TRAINYARD_CHECKPOINT_DIR unset", r);
        if (r > 0) {
            expect_env(env[r], r, "TRAINYARD_DATA_DIR", jstr(env[0], "TRAINYARD_DATA_DIR"));
            expect_env(env[r], r, "TRAINYARD_CHECKPOINT_DIR",
                       jstr(env[0], "TRAINYARD_CHECKPOINT_DIR"));
            expect_env(env[r], r, "TRAINYARD_OUTPUT_DIR", jstr(env[0], "TRAINYARD_OUTPUT_DIR"));
        }
        /* Nothing of the server's own environment but the few variables the contract lists. */
        json_object_foreach(env[r], name, val) {
            if (!is_allowed_env(name))
                fail_msg("rank %d: unexpected variable %s=%s (from the server?)", r, name,
                         json_string_value(val));
        }
        if (json_object_get(env[r], "TRAINYARD_ADMIN_TOKEN") ||
            json_object_get(env[r], "TY_IT_SERVER_ONLY"))
            fail_msg("rank %d: a server variable leaked into the rank", r);

        /* cwd = <data dir>/jobs/<id>. */
        snprintf(num, sizeof num, "cwd-%d", r);
        output_path(id, num, path, sizeof path);
        text = slurp_or_fail(path);
        text[strcspn(text, "\n")] = '\0';
        snprintf(want, sizeof want, "%s/jobs/%s", ty_server_dir(g_srv), id);
        real_path(want, real);
        if (strcmp(text, real) != 0)
            fail_msg("rank %d: cwd %s, expected %s", r, text, real);
        free(text);
    }
    for (int r = 0; r < 3; r++)
        json_decref(env[r]);
    json_decref(job);
    expect_no_procs(id, "after SUCCEEDED");
    free(id);
    finish();
}

/* ---- 2. a failed rank restarts the gang ---------------------------------- */

/*
 * On attempt 1 every rank announces itself; rank 1 waits for all three, then
 * a moment more (so that the job is RUNNING), and exits 3 while the others
 * sleep. Attempt 2 succeeds.
 */
static const char restart_script[] =
    "if [ \"$TRAINYARD_ATTEMPT\" = 1 ]; then\n"
    "  : > \"$TRAINYARD_OUTPUT_DIR/up-$RANK\"\n"
    "  if [ \"$RANK\" = 1 ]; then\n"
    "    while [ ! -e \"$TRAINYARD_OUTPUT_DIR/up-0\" ] || [ ! -e \"$TRAINYARD_OUTPUT_DIR/up-2\" ];"
    " do sleep 0.05; done\n"
    "    sleep 1; exit 3\n"
    "  fi\n"
    "  exec sleep 60\n"
    "fi\n"
    "sleep 0.2\n";

/* Whether the file at path holds needle anywhere (0 when the file does not exist). */
static int file_has(const char *path, const char *needle)
{
    size_t len = 0, n = strlen(needle);
    char *text = slurp(path, &len);
    int found = 0;

    for (size_t i = 0; text && !found && len >= n && i <= len - n; i++)
        found = memcmp(text + i, needle, n) == 0;
    free(text);
    return found;
}

/* GET path with token expecting 200; the raw body must not hold secret. */
static void expect_hidden(const char *token, const char *path, const char *secret)
{
    ty_http_req q = {.method = "GET", .path = path, .token = token};
    ty_http_resp *r = ty_reqx(g_c, &q);

    EXPECT_STATUS(r, 200);
    if (strstr(r->body, secret))
        fail_msg("GET %s shows the secret value: %s", path, r->body);
    ty_resp_destroy(r);
}

/*
 * A secret env value: the job's rank gets it, nobody reads it back (admin or read token: the
 * spec shows {"value": null, "secret": true}; not in events, lists, attempts or the log of
 * the server), and the database file never holds it in clear. The same submission again
 * (its Idempotency-Key) answers the same job.
 */
static void test_secret_env(void **state)
{
    static const char secret[] = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-3f9c";
    char body[1024], path[256], file[PATH_MAX], reader[160];
    const char *const hdrs[] = {"Idempotency-Key: secret-env-1", NULL};
    ty_http_resp *r;
    json_t *job, *env, *spec;
    char *id, *text;

    (void)state;
    start_server(NULL);
    r = ty_req(g_c, "POST", "/v1/tokens", "{\"name\": \"reader\", \"scopes\": [\"read\"]}");
    EXPECT_STATUS(r, 201);
    snprintf(reader, sizeof reader, "%s", ty_json_str(r->json, "token"));
    ty_resp_destroy(r);

    spec = sh_spec("secret-env", 2, "echo \"rank $RANK has key=$AWS_SECRET_ACCESS_KEY "
                                    "region=$REGION\"");
    json_object_set_new(spec, "env",
                        json_pack("{s:{s:s, s:b}, s:s}", "AWS_SECRET_ACCESS_KEY", "value", secret,
                                  "secret", 1, "REGION", "eu-west-1"));
    text = dumps(spec);
    snprintf(body, sizeof body, "%s", text);
    free(text);
    ty_http_req post = {.method = "POST", .path = "/v1/jobs", .body = body, .headers = hdrs};
    r = ty_reqx(g_c, &post);
    EXPECT_STATUS(r, 201);
    if (strstr(r->body, secret))
        fail_msg("the 201 shows the secret value: %s", r->body);
    id = strdup(ty_json_str(r->json, "id"));
    assert_non_null(id);
    ty_resp_destroy(r);
    /* The same request again: the same job, still without the value. */
    r = ty_reqx(g_c, &post);
    EXPECT_STATUS(r, 200);
    assert_string_equal(ty_json_str(r->json, "id"), id);
    if (strstr(r->body, secret))
        fail_msg("the replay shows the secret value: %s", r->body);
    ty_resp_destroy(r);

    job = wait_state(id, "SUCCEEDED");
    env = json_object_get(json_object_get(job, "spec"), "env");
    assert_true(json_is_null(json_object_get(json_object_get(env, "AWS_SECRET_ACCESS_KEY"),
                                             "value")));
    assert_true(json_is_true(json_object_get(json_object_get(env, "AWS_SECRET_ACCESS_KEY"),
                                             "secret")));
    assert_string_equal(jstr(env, "REGION"), "eu-west-1");
    json_decref(job);

    /* Every rank got it: the job has its secret. */
    for (int rank = 0; rank < 2; rank++) {
        char want[256];
        snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=%d", id, rank);
        r = ty_req(g_c, "GET", path, NULL);
        EXPECT_STATUS(r, 200);
        snprintf(want, sizeof want, "rank %d has key=%s region=eu-west-1\n", rank, secret);
        if (!strstr(r->body, want))
            fail_msg("rank %d's log: '%s'", rank, r->body);
        ty_resp_destroy(r);
    }

    /* Nobody reads it back: the admin and a read token. */
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    expect_hidden(NULL, path, secret);
    expect_hidden(reader, path, secret);
    snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
    expect_hidden(NULL, path, secret);
    expect_hidden(reader, path, secret);
    snprintf(path, sizeof path, "/v1/jobs/%s/attempts", id);
    expect_hidden(reader, path, secret);
    expect_hidden(NULL, "/v1/jobs", secret);
    expect_hidden(reader, "/v1/jobs", secret);
    {
        ty_http_req q = {.method = "GET", .path = path, .token = reader};
        snprintf(path, sizeof path, "/v1/jobs/%s", id);
        r = ty_reqx(g_c, &q);
        EXPECT_STATUS(r, 200);
        env = json_object_get(json_object_get(r->json, "spec"), "env");
        assert_true(json_is_null(json_object_get(json_object_get(env, "AWS_SECRET_ACCESS_KEY"),
                                                 "value")));
        ty_resp_destroy(r);
    }

    finish();
    /* Stopped: the WAL is in the database file. Neither holds the value, nor does the log. */
    assert_false(file_has(ty_server_db(g_srv), secret));
    snprintf(file, sizeof file, "%s-wal", ty_server_db(g_srv));
    assert_false(file_has(file, secret));
    assert_true(file_has(ty_server_db(g_srv), "eu-west-1")); /* the plain one is there */
    text = ty_server_log(g_srv);
    assert_non_null(text);
    assert_null(strstr(text, secret));
    free(text);
    free(id);
}

static void test_failed_rank_restarts_gang(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "5", NULL};
    json_t *spec, *job, *events, *attempts, *a1, *a2;
    const json_t *ev, *r1;
    char *id;

    (void)state;
    start_server(args);
    spec = sh_spec("restart-once", 3, restart_script);
    json_object_set_new(spec, "restart", json_pack("{s:i, s:i}", "max", 2, "backoff_seconds", 0));
    json_object_set_new(spec, "timeout_seconds", json_integer(60));
    id = submit(spec);
    job = wait_state(id, "SUCCEEDED");
    assert_int_equal(jint(job, "attempt"), 2);
    assert_int_equal(jint(job, "restarts"), 1);
    assert_int_equal(jint(json_object_get(job, "current_attempt"), "attempt"), 2);

    events = get_events(id);
    ev = find_event(events, "RUNNING", "RESTARTING");
    if (!ev || !jstr(ev, "message") || !strstr(jstr(ev, "message"), "rank 1 exited with code 3")) {
        dump_job(id);
        fail_msg("no RUNNING -> RESTARTING event saying 'rank 1 exited with code 3'");
    }
    if (!find_event(events, "RESTARTING", "STARTING"))
        fail_msg("no RESTARTING -> STARTING event");
    if (!str_eq(jstr(event_into(id, events, "SUCCEEDED"), "reason"), "Succeeded"))
        fail_msg("the job succeeded with reason %s",
                 jstr(event_into(id, events, "SUCCEEDED"), "reason"));

    attempts = get_attempts(id);
    assert_int_equal(json_array_size(attempts), 2);
    a1 = json_array_get(attempts, 0);
    a2 = json_array_get(attempts, 1);
    assert_int_equal(jint(a1, "attempt"), 1);
    assert_int_equal(jint(a2, "attempt"), 2);
    if (!str_eq(jstr(a1, "state"), "failed") || !str_eq(jstr(a2, "state"), "succeeded"))
        fail_msg("attempt states %s, %s; expected failed, succeeded", jstr(a1, "state"),
                 jstr(a2, "state"));
    if (json_is_null(json_object_get(a1, "ended_at")))
        fail_msg("attempt 1 has no ended_at");
    r1 = json_array_get(json_object_get(a1, "ranks"), 1);
    assert_int_equal(jint(r1, "rank"), 1);
    assert_int_equal(jint(r1, "exit_code"), 3);
    if (!str_eq(jstr(r1, "state"), "failed"))
        fail_msg("attempt 1, rank 1: state %s, expected failed", jstr(r1, "state"));
    if (!jstr(a1, "message") || !strstr(jstr(a1, "message"), "rank 1 exited with code 3"))
        fail_msg("attempt 1's message '%s'", jstr(a1, "message"));
    json_decref(attempts);
    json_decref(events);
    json_decref(job);
    expect_no_procs(id, "after SUCCEEDED");
    free(id);
    finish();
}

/* ---- 3. restarts run out ------------------------------------------------- */

static void test_restarts_exhausted(void **state)
{
    static const char *const args[] = {"--local-slots", "4", NULL};
    json_t *spec, *job, *events, *attempts;
    const json_t *last;
    char *id;

    (void)state;
    start_server(args);
    spec = sh_spec("always-fails", 2, "exit 3");
    json_object_set_new(spec, "restart", json_pack("{s:i, s:i}", "max", 1, "backoff_seconds", 0));
    id = submit(spec);
    job = wait_state(id, "FAILED");
    assert_int_equal(jint(job, "attempt"), 2);
    assert_int_equal(jint(job, "restarts"), 1);
    events = get_events(id);
    last = event_into(id, events, "FAILED");
    if (!str_eq(jstr(last, "reason"), "RankFailed") || !jstr(last, "message") ||
        !strstr(jstr(last, "message"), "exited with code 3")) {
        char *text = json_dumps(last, JSON_COMPACT);
        fail_msg("the event into FAILED is %s; expected reason RankFailed, 'exited with code 3'",
                 text);
    }
    if (!find_event(events, NULL, "RESTARTING"))
        fail_msg("no restart before the failure");
    attempts = get_attempts(id);
    assert_int_equal(json_array_size(attempts), 2);
    if (!str_eq(jstr(json_array_get(attempts, 1), "state"), "failed"))
        fail_msg("the last attempt is %s", jstr(json_array_get(attempts, 1), "state"));
    json_decref(attempts);
    json_decref(events);
    json_decref(job);
    expect_no_procs(id, "after FAILED");
    free(id);
    finish();
}

/* ---- 4. cancel ----------------------------------------------------------- */

/* Rank 1 ignores SIGTERM (and so does its sleep): only SIGKILL after the grace period ends it. */
static const char cancel_script[] = "if [ \"$RANK\" = 1 ]; then trap '' TERM; fi\n"
                                    "sleep 1000 & wait\n"
                                    "wait\n";

static void test_cancel_running_job(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "1", NULL};
    json_t *job, *events;
    pid_t pids[4];
    char *id, path[128];
    ty_http_resp *r;

    (void)state;
    start_server(args);
    id = submit(sh_spec("cancel-me", 2, cancel_script));
    job = wait_state(id, "RUNNING");
    assert_int_equal(current_pids(job, pids, 4), 2);
    json_decref(job);
    /* The ranks run, each with its `sleep 1000` child. */
    wait_procs(id, 1, 4);
    for (int i = 0; i < 2; i++) {
        char want_pid[64], p[64];
        snprintf(p, sizeof p, "/proc/%d/environ", (int)pids[i]);
        snprintf(want_pid, sizeof want_pid, "TRAINYARD_JOB_ID=%s", id);
        {
            size_t len = 0;
            char *env = slurp(p, &len);
            const char *want[] = {want_pid, NULL};
            if (!env || !environ_has_all(env, len, want))
                fail_msg("rank pid %d from current_attempt is not a process of the job",
                         (int)pids[i]);
            free(env);
        }
    }

    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    r = ty_req(g_c, "POST", path, NULL);
    EXPECT_STATUS(r, 200);
    if (!str_eq(jstr(r->json, "state"), "CANCELLING") &&
        !str_eq(jstr(r->json, "state"), "CANCELLED"))
        fail_msg("cancel answered state %s", jstr(r->json, "state"));
    ty_resp_destroy(r);

    job = wait_state(id, "CANCELLED");
    expect_no_procs(id, "after CANCELLED");
    events = get_events(id);
    if (!find_event(events, "RUNNING", "CANCELLING"))
        fail_msg("no RUNNING -> CANCELLING event");
    if (!str_eq(jstr(event_into(id, events, "CANCELLED"), "reason"), "Cancelled"))
        fail_msg("cancelled with reason %s", jstr(event_into(id, events, "CANCELLED"), "reason"));
    if (!str_eq(jstr(json_object_get(job, "current_attempt"), "state"), "cancelled"))
        fail_msg("current_attempt.state %s after the cancel",
                 jstr(json_object_get(job, "current_attempt"), "state"));
    json_decref(events);
    json_decref(job);

    /* A second cancel changes nothing and is no error. */
    r = ty_req(g_c, "POST", path, NULL);
    EXPECT_STATUS(r, 200);
    assert_string_equal(jstr(r->json, "state"), "CANCELLED");
    ty_resp_destroy(r);
    free(id);
    finish();
}

/* ---- 5. timeout ---------------------------------------------------------- */

static void test_timeout(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "2", NULL};
    json_t *spec, *job, *events;
    const json_t *last;
    char *id;

    (void)state;
    start_server(args);
    spec = sh_spec("times-out", 2, "sleep 1000 & wait");
    json_object_set_new(spec, "timeout_seconds", json_integer(2));
    json_object_set_new(spec, "restart", json_pack("{s:i, s:i}", "max", 3, "backoff_seconds", 0));
    id = submit(spec);
    job = wait_state(id, "FAILED");
    expect_no_procs(id, "after the timeout");
    events = get_events(id);
    last = event_into(id, events, "FAILED");
    if (!str_eq(jstr(last, "reason"), "Timeout"))
        fail_msg("failed with reason %s, expected Timeout", jstr(last, "reason"));
    /* A timeout is not a failure to retry. */
    assert_int_equal(jint(job, "attempt"), 1);
    assert_int_equal(jint(job, "restarts"), 0);
    json_decref(events);
    json_decref(job);
    free(id);
    finish();
}

/* ---- 6. logs ------------------------------------------------------------- */

static void test_logs(void **state)
{
    static const char *const args[] = {"--local-slots", "4", NULL};
    const char *script = "echo \"hello from rank $RANK\"; echo \"complaint of rank $RANK\" >&2";
    const char *slow = "i=1; while [ $i -le 10 ]; do echo \"line $i\"; i=$((i + 1)); "
                       "sleep 0.2; done";
    json_t *job;
    char *id, *id2, path[256], file[PATH_MAX], *disk;
    ty_http_resp *r;
    const char *te, *ct;

    (void)state;
    start_server(args);
    id = submit(sh_spec("logs", 2, script));
    json_decref(wait_state(id, "SUCCEEDED"));

    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=1", id);
    r = ty_req(g_c, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    ct = ty_resp_header(r, "Content-Type");
    if (!ct || strncmp(ct, "text/plain", 10) != 0)
        fail_msg("logs with content type %s", ct ? ct : "(none)");
    if (!strstr(r->body, "hello from rank 1\n") || !strstr(r->body, "complaint of rank 1\n") ||
        strstr(r->body, "rank 0"))
        fail_msg("rank 1's log: '%s'", r->body);
    /* The same bytes as the file on disk. */
    snprintf(file, sizeof file, "%s/logs/%s/a1/rank-1.log", ty_server_dir(g_srv), id);
    disk = slurp_or_fail(file);
    assert_string_equal(disk, r->body);
    free(disk);
    ty_resp_destroy(r);

    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=0&attempt=1", id);
    r = ty_req(g_c, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    if (!strstr(r->body, "hello from rank 0\n") || !strstr(r->body, "complaint of rank 0\n"))
        fail_msg("rank 0's log: '%s'", r->body);
    ty_resp_destroy(r);

    /* A rank the job does not have. */
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=5", id);
    r = ty_req(g_c, "GET", path, NULL);
    EXPECT_STATUS(r, 400);
    ty_resp_destroy(r);
    /* An unknown job. */
    r = ty_req(g_c, "GET", "/v1/jobs/00000000000000000000000000/logs?rank=0", NULL);
    if (r->status != 404 && r->status != 400)
        fail_msg("logs of an unknown job: HTTP %ld", r->status);
    ty_resp_destroy(r);

    /* Following a running rank: everything it prints, and the end when it ends. */
    id2 = submit(sh_spec("follow", 1, slow));
    json_decref(wait_state(id2, "RUNNING"));
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=0&follow=true", id2);
    r = ty_req(g_c, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    te = ty_resp_header(r, "Transfer-Encoding");
    if (!te || strcasecmp(te, "chunked") != 0)
        fail_msg("a followed log is not chunked (Transfer-Encoding: %s)", te ? te : "(none)");
    for (int i = 1; i <= 10; i++) {
        char line[32];
        snprintf(line, sizeof line, "line %d\n", i);
        if (!strstr(r->body, line))
            fail_msg("the followed log lacks '%s': '%s'", line, r->body);
    }
    assert_int_equal(count_lines(r->body, "line "), 10);
    ty_resp_destroy(r);
    job = wait_state(id2, "SUCCEEDED");
    json_decref(job);
    free(id2);
    free(id);
    finish();
}

/* ---- 7. kill -9 of the server while a job runs --------------------------- */

/*
 * Each rank appends "start <attempt> <rank> <pid>" to a shared trace. A rank
 * of a later attempt then looks for any process of an earlier attempt of the
 * job (by their environment) and writes "overlap ..." for each it finds.
 * Attempt 1 sleeps long enough never to end by itself within the test.
 */
static const char restart_trace_script[] =
    "f=\"$TRAINYARD_OUTPUT_DIR/trace\"\n"
    "echo \"start $TRAINYARD_ATTEMPT $RANK $$\" >> \"$f\"\n"
    "if [ \"$TRAINYARD_ATTEMPT\" != 1 ]; then\n"
    "  for e in $(grep -lzx \"TRAINYARD_JOB_ID=$TRAINYARD_JOB_ID\" /proc/[0-9]*/environ "
    "2>/dev/null); do\n"
    "    if ! grep -qzx \"TRAINYARD_ATTEMPT=$TRAINYARD_ATTEMPT\" \"$e\" 2>/dev/null &&\n"
    "       grep -qz '^TRAINYARD_ATTEMPT=' \"$e\" 2>/dev/null; then\n"
    "      echo \"overlap $TRAINYARD_ATTEMPT $RANK $e\" >> \"$f\"\n"
    "    fi\n"
    "  done\n"
    "  sleep 1\n"
    "else\n"
    "  sleep 30\n"
    "fi\n"
    "echo \"end $TRAINYARD_ATTEMPT $RANK $$\" >> \"$f\"\n";

static void test_server_kill9_resumes_job(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "2", NULL};
    json_t *spec, *job, *events;
    char *id, trace[PATH_MAX], err[2048], *text;
    pid_t pids[4];
    int64_t deadline;

    (void)state;
    start_server(args);
    spec = sh_spec("survives-kill9", 2, restart_trace_script);
    /* No restart allowed: a server restart must not spend one. */
    json_object_set_new(spec, "restart", json_pack("{s:i, s:i}", "max", 0, "backoff_seconds", 0));
    id = submit(spec);
    job = wait_state(id, "RUNNING");
    assert_int_equal(current_pids(job, pids, 4), 2);
    json_decref(job);
    output_path(id, "trace", trace, sizeof trace);
    free(wait_lines(id, trace, "start 1 ", 2));

    ty_server_kill(g_srv);
    ty_client_free(g_c);
    g_c = NULL;
    if (ty_server_restart(g_srv, err, sizeof err) < 0)
        fail_msg("restart after kill -9: %s", err);
    g_c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_c);

    /* The new server takes the job over as attempt 2 once attempt 1 is gone. */
    deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        job = get_job(id);
        if (jint(job, "attempt") >= 2 || is_terminal(jstr(job, "state")))
            break;
        json_decref(job);
        if (ty_now_ms() > deadline) {
            dump_job(id);
            fail_msg("job %s: no attempt 2 within 60 s of the restart", id);
        }
        ty_sleep_ms(50);
    }
    json_decref(job);
    if (job_procs(id, 1, NULL, 0) > 0)
        fail_msg("attempt 2 exists while processes of attempt 1 still run");
    for (int i = 0; i < 2; i++) {
        char p[64], want_id[96];
        const char *want[] = {want_id, NULL};
        size_t len = 0;
        char *env;
        snprintf(p, sizeof p, "/proc/%d/environ", (int)pids[i]);
        snprintf(want_id, sizeof want_id, "TRAINYARD_JOB_ID=%s", id);
        env = slurp(p, &len);
        if (env && environ_has_all(env, len, want))
            fail_msg("rank %d of attempt 1 (pid %d) still runs", i, (int)pids[i]);
        free(env);
    }

    job = wait_state(id, "SUCCEEDED");
    assert_int_equal(jint(job, "restarts"), 0);
    assert_int_equal(jint(job, "attempt"), 2);
    events = get_events(id);
    if (!has_reason(events, "ServerRestarted")) {
        dump_job(id);
        fail_msg("no ServerRestarted event");
    }
    expect_no_procs(id, "after SUCCEEDED");

    text = slurp_or_fail(trace);
    if (count_lines(text, "overlap ") != 0)
        fail_msg("attempt 2 ran beside processes of attempt 1; trace:\n%s", text);
    if (count_lines(text, "start 2 ") != 2 || count_lines(text, "end 2 ") != 2)
        fail_msg("attempt 2 did not run each rank once; trace:\n%s", text);
    if (count_lines(text, "start 3 ") != 0 || count_lines(text, "end 1 ") != 0)
        fail_msg("unexpected attempts in the trace:\n%s", text);
    free(text);
    json_decref(events);
    json_decref(job);
    free(id);
    finish();
}

/* ---- 7b. SIGTERM of the server while a job runs -------------------------- */

/* Attempt 1 runs until it is stopped; the attempt after the restart ends at once. */
static const char shutdown_script[] = "if [ \"$TRAINYARD_ATTEMPT\" = 1 ]; then\n"
                                      "  sleep 1000 & wait\n"
                                      "fi\n"
                                      "echo \"attempt $TRAINYARD_ATTEMPT rank $RANK done\"\n";

static void test_server_shutdown_resumes_job(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--stop-grace", "2", NULL};
    json_t *job, *events;
    char *id, err[2048];
    int wstatus;

    (void)state;
    start_server(args);
    id = submit(sh_spec("survives-sigterm", 2, shutdown_script));
    json_decref(wait_state(id, "RUNNING"));
    wait_procs(id, 1, 4); /* each rank and its sleep */

    /* A graceful stop ends the gang and exits 0, leaving nothing behind. */
    ty_client_free(g_c);
    g_c = NULL;
    if (ty_server_stop(g_srv, 60000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fail_msg("the server ended with status %d after SIGTERM with a job running; log: %s",
                 WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus), log_tail());
    expect_no_procs(id, "after the server stopped");

    /* The next start resumes it without spending a restart. */
    if (ty_server_restart(g_srv, err, sizeof err) < 0)
        fail_msg("restart: %s", err);
    g_c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_c);
    job = wait_state(id, "SUCCEEDED");
    assert_int_equal(jint(job, "restarts"), 0);
    assert_int_equal(jint(job, "attempt"), 2);
    events = get_events(id);
    if (!has_reason(events, "ServerShutdown")) {
        dump_job(id);
        fail_msg("no ServerShutdown event");
    }
    json_decref(events);
    json_decref(job);
    expect_no_procs(id, "after SUCCEEDED");
    free(id);
    finish();
}

/* ---- 8. a burst of short jobs within the slots --------------------------- */

/*
 * Each job marks itself running in a shared directory, counts the marks
 * (its own included), appends the count to a shared file and unmarks itself.
 * While no more than `slots` ranks run at once, no count exceeds it.
 */
static const char count_script[] =
    "m=\"$SHARED/running-$TRAINYARD_JOB_ID\"; : > \"$m\"\n"
    "set -- \"$SHARED\"/running-*; echo \"$#\" >> \"$SHARED/seen\"\n"
    "sleep 0.02\n"
    "set -- \"$SHARED\"/running-*; echo \"$#\" >> \"$SHARED/seen\"\n"
    "rm -f \"$m\"\n";

/* The largest number in a file of one number per line; *lines their count. */
static long max_in_file(const char *path, int *lines)
{
    char *text = slurp_or_fail(path), *line, *next;
    long max = 0;

    *lines = 0;
    for (line = text; line && *line; line = next) {
        char *end = NULL;
        long v;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        v = strtol(line, &end, 10);
        if (end == line || *end)
            fail_msg("%s: bad line '%s'", path, line);
        if (v > max)
            max = v;
        (*lines)++;
    }
    free(text);
    return max;
}

/* Number of jobs on the first page of GET /v1/jobs?query. */
static size_t count_listed(const char *query)
{
    char path[512];
    json_t *body;
    size_t n;

    snprintf(path, sizeof path, "/v1/jobs?%s", query);
    body = get_json(path);
    n = json_array_size(json_object_get(body, "jobs"));
    json_decref(body);
    return n;
}

static void test_burst_respects_slots(void **state)
{
    static const char *const args[] = {"--local-slots", "2", SHARED_DIR_OFF, NULL};
    char shared[PATH_MAX], seen[PATH_MAX + 8];
    json_t *jobs = json_array();
    int64_t deadline;
    size_t done = 0;
    long max;
    int lines;

    (void)state;
    start_server(args);
    snprintf(shared, sizeof shared, "%s/burst", ty_server_dir(g_srv));
    assert_int_equal(mkdir(shared, 0700), 0);
    for (int i = 0; i < BURST_JOBS; i++) {
        char name[32];
        json_t *spec;
        snprintf(name, sizeof name, "burst-%d", i);
        spec = sh_spec(name, 1, count_script);
        json_object_set_new(spec, "env", json_pack("{s:s}", "SHARED", shared));
        json_object_set_new(spec, "labels", json_pack("{s:s}", "case", "burst"));
        json_array_append_new(jobs, spec);
    }
    assert_int_equal(json_array_size(jobs), BURST_JOBS);
    submit_batch(jobs);

    /* Until no burst job is left unfinished (cheap requests: one job per answer at most). */
    deadline = ty_now_ms() + BURST_DEADLINE_MS;
    while (count_listed("label=case%3Dburst&state=" ACTIVE_STATES ",PENDING&limit=1") > 0) {
        json_t *list = get_json("/v1/jobs?label=case%3Dburst&state=FAILED,CANCELLED&limit=1");
        const char *fid = jstr(json_array_get(json_object_get(list, "jobs"), 0), "id");
        if (fid) {
            dump_job(fid);
            fail_msg("burst job %s did not succeed", fid);
        }
        json_decref(list);
        if (ty_now_ms() > deadline)
            fail_msg("%zu of %d burst jobs SUCCEEDED within %d s",
                     count_listed("label=case%3Dburst&state=SUCCEEDED&limit=1000"), BURST_JOBS,
                     BURST_DEADLINE_MS / 1000);
        ty_sleep_ms(200);
    }
    done = count_listed("label=case%3Dburst&state=SUCCEEDED&limit=1000");
    assert_int_equal(done, BURST_JOBS);
    snprintf(seen, sizeof seen, "%s/seen", shared);
    max = max_in_file(seen, &lines);
    /* Two counts per job: every job ran exactly once. */
    assert_int_equal(lines, 2 * BURST_JOBS);
    if (max > 2)
        fail_msg("%ld ranks ran at once with --local-slots 2", max);
    assert_true(max >= 1);
    finish();
}

/* ---- 9. jobs that can never run ------------------------------------------ */

static void expect_unschedulable(const char *id, const char *cause)
{
    json_t *job = wait_state(id, "FAILED"), *events = get_events(id);
    const json_t *last = event_into(id, events, "FAILED");
    const char *msg = jstr(last, "message");

    if (!str_eq(jstr(last, "reason"), "Unschedulable") || !msg || !strcasestr(msg, cause)) {
        char *text = json_dumps(last, JSON_COMPACT);
        fail_msg("job %s failed with %s; expected reason Unschedulable and a message naming %s",
                 id, text, cause);
    }
    /* It never started. */
    assert_int_equal(jint(job, "attempt"), 0);
    if (find_event(events, NULL, "STARTING"))
        fail_msg("job %s was started", id);
    json_decref(events);
    json_decref(job);
}

static void test_unschedulable(void **state)
{
    static const char *const args[] = {"--local-slots", "2", "--local-gpus", "0", NULL};
    json_t *spec;
    char *too_wide, *gpu, *fits;

    (void)state;
    start_server(args);
    too_wide = submit(sh_spec("too-wide", 3, "true"));
    spec = sh_spec("wants-gpu", 1, "true");
    json_object_set_new(spec, "resources",
                        json_pack("{s:{s:s, s:i}}", "gpu", "type", "a100", "count", 1));
    gpu = submit(spec);
    /* A job that fits, behind them, still runs. */
    fits = submit(sh_spec("fits", 2, "true"));
    expect_unschedulable(too_wide, "slot");
    expect_unschedulable(gpu, "gpu");
    json_decref(wait_state(fits, "SUCCEEDED"));
    free(too_wide);
    free(gpu);
    free(fits);
    finish();
}

/* A command that does not exist: the job fails, saying which command. */
static void test_launch_failure(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    json_t *spec, *job, *events;
    const json_t *last;
    char *id;

    (void)state;
    start_server(args);
    spec = sh_spec("cannot-launch", 2, "true");
    json_object_set_new(spec, "command", json_pack("[s]", "trainyard-it-no-such-command"));
    id = submit(spec);
    job = wait_state(id, "FAILED");
    events = get_events(id);
    last = event_into(id, events, "FAILED");
    if (!str_eq(jstr(last, "reason"), "LaunchFailed") || !jstr(last, "message") ||
        !strstr(jstr(last, "message"), "trainyard-it-no-such-command")) {
        char *text = json_dumps(last, JSON_COMPACT);
        fail_msg("failed with %s; expected reason LaunchFailed naming the command", text);
    }
    expect_no_procs(id, "after the failed launch");
    json_decref(events);
    json_decref(job);
    free(id);
    finish();
}

/* ---- 10. queue limits ---------------------------------------------------- */

static const char queue_script[] =
    "m=\"$SHARED/running-$TRAINYARD_JOB_ID\"; : > \"$m\"\n"
    "set -- \"$SHARED\"/running-*; echo \"$#\" >> \"$SHARED/seen\"\n"
    "sleep 2\n"
    "set -- \"$SHARED\"/running-*; echo \"$#\" >> \"$SHARED/seen\"\n"
    "rm -f \"$m\"\n";

/*
 * Two jobs of queue q under a limit of 1 on a server with room for both:
 * never both active (sampled in single list requests, and counted by the
 * jobs themselves), and both succeed.
 */
static void run_queue_limit_case(const char *const *args, const char *queue)
{
    char shared[PATH_MAX], seen[PATH_MAX + 8], query[256];
    char *ids[2];
    int64_t deadline;
    long max;
    int lines;

    start_server(args);
    snprintf(shared, sizeof shared, "%s/queue", ty_server_dir(g_srv));
    assert_int_equal(mkdir(shared, 0700), 0);
    for (int i = 0; i < 2; i++) {
        char name[32];
        json_t *spec;
        snprintf(name, sizeof name, "queued-%d", i);
        spec = sh_spec(name, 1, queue_script);
        json_object_set_new(spec, "env", json_pack("{s:s}", "SHARED", shared));
        json_object_set_new(spec, "queue", json_string(queue));
        ids[i] = submit(spec);
    }
    deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        size_t active;
        /* One request, so one snapshot of the store. */
        snprintf(query, sizeof query, "queue=%s&state=" ACTIVE_STATES "&limit=1000", queue);
        active = count_listed(query);
        if (active > 1)
            fail_msg("%zu jobs of queue %s active at once with a limit of 1", active, queue);
        snprintf(query, sizeof query, "queue=%s&state=SUCCEEDED&limit=1000", queue);
        if (count_listed(query) == 2)
            break;
        snprintf(query, sizeof query, "queue=%s&state=FAILED,CANCELLED&limit=1000", queue);
        if (count_listed(query) > 0) {
            dump_job(ids[0]);
            dump_job(ids[1]);
            fail_msg("a job of queue %s did not succeed", queue);
        }
        if (ty_now_ms() > deadline)
            fail_msg("the two jobs of queue %s did not both succeed within 60 s", queue);
        ty_sleep_ms(50);
    }
    snprintf(seen, sizeof seen, "%s/seen", shared);
    max = max_in_file(seen, &lines);
    assert_int_equal(lines, 4);
    if (max != 1)
        fail_msg("%ld jobs of queue %s ran at once with a limit of 1", max, queue);
    for (int i = 0; i < 2; i++)
        free(ids[i]);
    finish();
}

static void test_queue_limit(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--queue-limit", "1", SHARED_DIR_OFF,
                                       NULL};
    (void)state;
    run_queue_limit_case(args, "default");
}

static void test_queue_limit_per_queue(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--queue-limit", "train=1",
                                       "--queue-limit", "other=3", SHARED_DIR_OFF, NULL};
    (void)state;
    run_queue_limit_case(args, "train");
}

/* ---- 11. a full queue costs nothing ---------------------------------------- */

#define SWEEP_JOBS 1100 /* more than one page of any walk of the waiting jobs */

/* The scheduler's round counter from /metrics. */
static unsigned long long sched_rounds(void)
{
    static const char name[] = "trainyard_scheduler_rounds_total ";
    ty_http_resp *r = ty_req(g_c, "GET", "/metrics", NULL);
    const char *line;
    unsigned long long v = 0;
    char *end = NULL;

    EXPECT_STATUS(r, 200);
    line = r->body;
    while (line && strncmp(line, name, sizeof name - 1) != 0) {
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    if (!line)
        fail_msg("/metrics lacks %s", name);
    v = strtoull(line + sizeof name - 1, &end, 10);
    if (end == line + sizeof name - 1)
        fail_msg("/metrics: bad value for %s", name);
    ty_resp_destroy(r);
    return v;
}

/*
 * Waits until the scheduler has run its last round for what happened (no
 * round for 300 ms), then checks that it runs none for a whole second.
 * Returns the counter. Only counts are compared: a loop that keeps working
 * never settles and fails here, however fast the machine.
 */
static unsigned long long expect_rounds_stand_still(const char *when)
{
    unsigned long long before = sched_rounds(), now;
    int64_t deadline = ty_now_ms() + DEADLINE_MS;

    for (;;) {
        ty_sleep_ms(300);
        now = sched_rounds();
        if (now == before)
            break;
        if (ty_now_ms() > deadline)
            fail_msg("%s: the scheduler never stopped running rounds (%llu, then %llu)", when,
                     before, now);
        before = now;
    }
    ty_sleep_ms(1000);
    now = sched_rounds();
    if (now != before)
        fail_msg("%s: %llu scheduler rounds ran while nothing changed", when, now - before);
    return now;
}

/* Submits jobs [first, first + n) of the sweep in one :batch. */
static void submit_sweep(const char *shared, int first, int n)
{
    json_t *jobs = json_array();

    for (int i = first; i < first + n; i++) {
        char name[32], tag[16];
        json_t *spec;
        snprintf(name, sizeof name, "sweep-%d", i);
        snprintf(tag, sizeof tag, "%d", i);
        spec = sh_spec(name, 1, "echo \"$TAG\" >> \"$SHARED/order\"");
        json_object_set_new(spec, "queue", json_string("sweep"));
        json_object_set_new(spec, "priority", json_integer(i % 3));
        json_object_set_new(spec, "env", json_pack("{s:s, s:s}", "SHARED", shared, "TAG", tag));
        json_object_set_new(spec, "labels", json_pack("{s:s}", "case", "sweep"));
        json_array_append_new(jobs, spec);
    }
    submit_batch(jobs);
}

/*
 * 1,100 jobs wait in queue sweep (limit 1) behind a job that runs until it is
 * cancelled: the scheduler runs no round while nothing changes, a job of
 * another queue still runs at once, and once the blocker is cancelled the
 * sweep runs to the end, one job at a time, by priority and then in
 * submission order.
 */
static void test_full_queue_costs_nothing(void **state)
{
    static const char *const args[] = {"--local-slots", "4", "--queue-limit", "sweep=1",
                                       SHARED_DIR_OFF, NULL};
    char shared[PATH_MAX], order_path[PATH_MAX + 8], path[128], *blocker, *other;
    unsigned long long quiet, later;
    int64_t deadline;
    json_t *spec;
    ty_http_resp *r;

    (void)state;
    start_server(args);
    snprintf(shared, sizeof shared, "%s/sweep", ty_server_dir(g_srv));
    assert_int_equal(mkdir(shared, 0700), 0);
    spec = sh_spec("sweep-blocker", 1, "sleep 1000");
    json_object_set_new(spec, "queue", json_string("sweep"));
    blocker = submit(spec);
    json_decref(wait_state(blocker, "RUNNING"));
    submit_sweep(shared, 0, 1000);
    submit_sweep(shared, 1000, SWEEP_JOBS - 1000);

    quiet = expect_rounds_stand_still("with the sweep waiting");
    assert_int_equal(count_listed("label=case%3Dsweep&state=PENDING&limit=1000"), 1000);

    other = submit(sh_spec("other-queue", 1, "true"));
    json_decref(wait_state(other, "SUCCEEDED"));
    later = expect_rounds_stand_still("after a job of another queue ran");
    assert_true(later > quiet);

    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", blocker);
    r = ty_req(g_c, "POST", path, NULL);
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);
    json_decref(wait_state(blocker, "CANCELLED"));

    deadline = ty_now_ms() + BURST_DEADLINE_MS;
    while (count_listed("label=case%3Dsweep&state=" ACTIVE_STATES ",PENDING&limit=1") > 0) {
        json_t *list = get_json("/v1/jobs?label=case%3Dsweep&state=FAILED,CANCELLED&limit=1");
        const char *fid = jstr(json_array_get(json_object_get(list, "jobs"), 0), "id");
        if (fid) {
            dump_job(fid);
            fail_msg("sweep job %s did not succeed", fid);
        }
        json_decref(list);
        if (ty_now_ms() > deadline)
            fail_msg("the sweep did not end within %d s", BURST_DEADLINE_MS / 1000);
        ty_sleep_ms(200);
    }

    /* One at a time (limit 1), so the file holds the admission order. */
    snprintf(order_path, sizeof order_path, "%s/order", shared);
    {
        char *text = slurp_or_fail(order_path), *line = text, *next;
        int pos = 0;
        for (int prio = 2; prio >= 0; prio--)
            for (int i = 0; i < SWEEP_JOBS; i++) {
                char *end = NULL;
                long got;
                if (i % 3 != prio)
                    continue;
                if (!line || !*line)
                    fail_msg("the sweep ran %d jobs, not %d", pos, SWEEP_JOBS);
                next = strchr(line, '\n');
                if (next)
                    *next++ = '\0';
                got = strtol(line, &end, 10);
                if (end == line || *end || got != i)
                    fail_msg("sweep position %d: job %s ran, expected %d", pos, line, i);
                line = next;
                pos++;
            }
        if (line && *line)
            fail_msg("the sweep ran more than %d jobs: %s", SWEEP_JOBS, line);
        free(text);
    }
    free(blocker);
    free(other);
    finish();
}

/* ---- the sandbox: what a job cannot reach -------------------------------- */

/*
 * Starts a server whose jobs run sandboxed (the default). Skips the case, with the
 * reason, where this machine cannot build the sandbox (no bubblewrap, no user
 * namespaces, no rank user): the server refuses to start and says why.
 */
static void start_sandboxed(const char *const *args)
{
    static const char *const env[] = {"TY_IT_SERVER_ONLY=must-not-leak", NULL};
    ty_server_opts opts = {.args = args, .env = env};
    char err[2048];

    assert_null(g_srv);
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        if (strstr(err, "local sandbox:")) {
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

/* The text (new) of GET path, expecting 200. */
static char *get_text(const char *path)
{
    ty_http_resp *r = ty_req(g_c, "GET", path, NULL);
    EXPECT_STATUS(r, 200);
    char *text = strdup(r->body);
    assert_non_null(text);
    ty_resp_destroy(r);
    return text;
}

/*
 * What a submit token's job tries, as an attacker would: the token file and the
 * database (by '..' and by their absolute paths), another job's output, the
 * server's process. Each line of the report says whether the attempt got through.
 */
static const char attack_script[] =
    "r=\"$TRAINYARD_OUTPUT_DIR/report\"\n"
    "t() { if eval \"$2\" >/dev/null 2>&1; then echo \"$1 reached\"; else echo \"$1 blocked\"; fi"
    " >> \"$r\"; }\n"
    "t token-by-dotdot 'cat ../../admin.token'\n"
    "t token-by-path 'cat \"$DATA/admin.token\"'\n"
    "t db-read 'cat \"$DATA/trainyard.db\"'\n"
    "t db-write 'echo x >> \"$DATA/trainyard.db\"'\n"
    "t db-dir-by-dotdot 'ls ../../trainyard.db'\n"
    "t other-output 'cat \"$DATA/jobs/$OTHER/output/secret\"'\n"
    "t other-dir 'ls \"$DATA/jobs/$OTHER\"'\n"
    "t logs 'ls \"$DATA/logs\"'\n"
    "t signal-server 'kill -0 $SERVER_PID'\n"
    "t root '[ \"$(id -u)\" = 0 ]'\n"
    "echo \"dotdot: $(ls ../.. | tr '\\n' ' ')\" >> \"$r\"\n";

static void test_sandbox_hides_the_server(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    char data[PATH_MAX], pid[16], path[PATH_MAX];
    (void)state;
    start_sandboxed(args);
    real_path(ty_server_dir(g_srv), data);
    snprintf(pid, sizeof pid, "%d", (int)ty_server_pid(g_srv));

    /* The victim: a job with a secret in its output. */
    char *victim = submit(sh_spec("victim", 1, "echo s3cret > \"$TRAINYARD_OUTPUT_DIR/secret\""));
    json_decref(wait_state(victim, "SUCCEEDED"));

    json_t *spec = sh_spec("attacker", 1, attack_script);
    json_object_set_new(spec, "env", json_pack("{s:s, s:s, s:s}", "DATA", data, "OTHER", victim,
                                               "SERVER_PID", pid));
    char *id = submit(spec);
    json_decref(wait_state(id, "SUCCEEDED"));
    output_path(id, "report", path, sizeof path);
    char *report = slurp_or_fail(path);
    static const char *const blocked[] = {"token-by-dotdot", "token-by-path", "db-read",
                                          "db-write", "db-dir-by-dotdot", "other-output",
                                          "other-dir", "logs", "signal-server", "root", NULL};
    for (size_t i = 0; blocked[i]; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s blocked\n", blocked[i]);
        if (!strstr(report, want))
            fail_msg("the job got through: %s; its report:\n%s", blocked[i], report);
    }
    /* '..' of the working directory shows the job's own tree only. */
    if (!strstr(report, "dotdot: datasets jobs \n"))
        fail_msg("'..' from the job's directory shows more than datasets and jobs:\n%s", report);
    /* And the database is as the server left it: it still answers. */
    json_decref(get_job(victim));

    /* What the sandbox shows is enough for the runtime: trainyard-worker of this build,
     * its shared libraries included, starts in it. */
    json_t *worker = json_pack("{s:s, s:[s,s,s], s:{s:i}}", "name", "worker-help", "command",
                               "trainyard-worker", "train", "--help", "workers", "count", 1);
    char *wid = submit(worker), url[128];
    json_decref(wait_state(wid, "SUCCEEDED"));
    snprintf(url, sizeof url, "/v1/jobs/%s/logs?rank=0", wid);
    char *log = get_text(url);
    if (!strstr(log, "usage: trainyard-worker"))
        fail_msg("trainyard-worker did not run in the sandbox: %.300s", log);
    free(log);
    free(wid);
    free(report);
    free(victim);
    free(id);
    finish();
}

/* A rank that leaves a process behind on purpose: setsid, a new session and group. */
static const char escape_script[] =
    "setsid -f sh -c 'echo $$ > \"$TRAINYARD_OUTPUT_DIR/escapee\"; exec sleep 1000'\n"
    "exec sleep 1000\n";

/* Waits until no process of the job's attempt (0: any) runs, for up to 10 s. */
static void expect_procs_gone(const char *id, int attempt, const char *when)
{
    pid_t pids[8];
    int n;
    int64_t deadline = ty_now_ms() + 10000;
    while ((n = job_procs(id, attempt, pids, 8)) > 0 && ty_now_ms() < deadline)
        ty_sleep_ms(50);
    if (n > 0)
        fail_msg("%s: %d process(es) of job %s still run (pid %d)", when, n, id, (int)pids[0]);
}

static void test_sandbox_setsid_does_not_escape_cancel(void **state)
{
    static const char *const args[] = {"--local-slots", "2", "--stop-grace", "1", NULL};
    char path[PATH_MAX], url[128];
    (void)state;
    start_sandboxed(args);
    char *id = submit(sh_spec("escape-cancel", 1, escape_script));
    output_path(id, "escapee", path, sizeof path);
    free(wait_lines(id, path, "", 1));
    json_decref(wait_state(id, "RUNNING"));
    snprintf(url, sizeof url, "/v1/jobs/%s:cancel", id);
    ty_http_resp *r = ty_req(g_c, "POST", url, NULL);
    EXPECT_STATUS(r, 200);
    ty_resp_destroy(r);
    json_decref(wait_state(id, "CANCELLED"));
    expect_procs_gone(id, 0, "after CANCELLED");
    free(id);
    finish();
}

static void test_sandbox_setsid_does_not_survive_kill9(void **state)
{
    static const char *const args[] = {"--local-slots", "2", "--stop-grace", "1", NULL};
    char path[PATH_MAX], err[2048];
    (void)state;
    start_sandboxed(args);
    char *id = submit(sh_spec("escape-kill9", 1, escape_script));
    output_path(id, "escapee", path, sizeof path);
    free(wait_lines(id, path, "", 1));
    assert_true(job_procs(id, 1, NULL, 0) >= 2);

    /* The sandboxes die with the server (bwrap's parent-death signal ends each PID
     * namespace), setsid or not; the next server would also end what its cgroups
     * still held before it runs the job again as a new attempt. */
    ty_server_kill(g_srv);
    expect_procs_gone(id, 0, "after kill -9 of the server");
    ty_client_free(g_c);
    g_c = NULL;
    if (ty_server_restart(g_srv, err, sizeof err) < 0)
        fail_msg("%s", err);
    g_c = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_c);
    expect_procs_gone(id, 1, "after kill -9 and a restart of the server");
    wait_procs(id, 2, 2);
    json_t *events = get_events(id);
    if (!has_reason(events, "ServerRestarted"))
        fail_msg("no ServerRestarted event after the restart");
    json_decref(events);
    free(id);
    finish();
}

static void test_sandbox_log_is_capped(void **state)
{
    static const char *const args[] = {"--local-slots", "2", "--local-log-limit", "1Mi", NULL};
    char path[PATH_MAX], url[160];
    (void)state;
    start_sandboxed(args);
    /* 300 MiB of 'y' in lines of 4 KiB, then a last line. */
    char *id = submit(sh_spec("chatty", 1,
                              "head -c 314572800 /dev/zero | tr '\\0' y | fold -w 4096; "
                              "echo; echo last-line"));
    json_decref(wait_state(id, "SUCCEEDED"));

    long long on_disk = 0;
    static const char *const parts[] = {"", ".1", ".dropped"};
    for (size_t i = 0; i < 3; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/logs/%s/a1/rank-0.log%s", ty_server_dir(g_srv), id,
                 parts[i]);
        if (stat(path, &st) == 0)
            on_disk += st.st_size;
    }
    if (on_disk > (1 << 20) + 4096)
        fail_msg("the log takes %lld bytes on disk, over its 1 MiB limit", on_disk);

    snprintf(url, sizeof url, "/v1/jobs/%s/logs?rank=0", id);
    char *log = get_text(url);
    if (strncmp(log, "[trainyard] ", 12) != 0 || !strstr(log, "dropped"))
        fail_msg("the capped log does not begin by saying what was dropped: %.120s", log);
    size_t n = strlen(log);
    if (n < 10 || strcmp(log + n - 10, "last-line\n") != 0)
        fail_msg("the capped log lost its end");
    free(log);
    snprintf(url, sizeof url, "/v1/jobs/%s/logs?rank=0&tail=1", id);
    log = get_text(url);
    assert_string_equal(log, "last-line\n");
    free(log);
    free(id);
    finish();
}

/* A job owns what is inside its directory: it may leave a symlink where its output/ was.
 * The next attempt must not follow it (as root, it would chown the target). */
static void test_sandbox_symlinked_output_is_not_followed(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    char victim[PATH_MAX];
    struct stat before, after;
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: only a root server changes the owner of a job's directories\n");
        skip();
    }
    start_sandboxed(args);
    snprintf(victim, sizeof victim, "%s/victim-dir", ty_server_dir(g_srv));
    assert_int_equal(mkdir(victim, 0700), 0);
    assert_int_equal(stat(victim, &before), 0);
    json_t *spec = sh_spec("symlinker", 1,
                           "if [ \"$TRAINYARD_ATTEMPT\" = 1 ]; then rm -rf \"$TRAINYARD_OUTPUT_DIR\" && "
                           "ln -s \"$VICTIM\" \"$TRAINYARD_OUTPUT_DIR\"; exit 1; fi");
    json_object_set_new(spec, "env", json_pack("{s:s}", "VICTIM", victim));
    json_object_set_new(spec, "restart", json_pack("{s:i, s:i}", "max", 1, "backoff_seconds", 0));
    char *id = submit(spec);
    json_decref(wait_state(id, "FAILED"));
    assert_int_equal(stat(victim, &after), 0);
    if (after.st_uid != before.st_uid || after.st_gid != before.st_gid)
        fail_msg("the server followed the job's symlink and gave %s to uid %d", victim,
                 (int)after.st_uid);
    json_t *events = get_events(id);
    if (!has_reason(events, "LaunchFailed"))
        fail_msg("the second attempt did not fail to launch");
    json_decref(events);
    free(id);
    finish();
}

static void test_sandbox_memory_limit(void **state)
{
    static const char *const args[] = {"--local-slots", "2", NULL};
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: cgroup limits need root\n");
        skip();
    }
    start_sandboxed(args);
    char *log = ty_server_log(g_srv);
    int enforced = log && strstr(log, "resources.memory enforced") != NULL;
    free(log);
    if (!enforced) {
        print_message("skipped: the server cannot enforce memory limits on this machine "
                      "(no cgroup memory controller it may manage)\n");
        finish();
        skip();
    }
    json_t *spec = sh_spec("hungry", 1, "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
    json_object_set_new(spec, "resources", json_pack("{s:s}", "memory", "32Mi"));
    char *id = submit(spec);
    json_decref(wait_state(id, "FAILED"));
    json_t *events = get_events(id);
    const json_t *ev = event_into(id, events, "FAILED");
    if (!jstr(ev, "message") || !strstr(jstr(ev, "message"), "out of memory"))
        fail_msg("the FAILED event does not say the rank ran out of memory: %s",
                 jstr(ev, "message") ? jstr(ev, "message") : "(none)");
    json_decref(events);
    free(id);
    finish();
}


int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_env_contract, teardown),
        cmocka_unit_test_teardown(test_secret_env, teardown),
        cmocka_unit_test_teardown(test_failed_rank_restarts_gang, teardown),
        cmocka_unit_test_teardown(test_restarts_exhausted, teardown),
        cmocka_unit_test_teardown(test_cancel_running_job, teardown),
        cmocka_unit_test_teardown(test_timeout, teardown),
        cmocka_unit_test_teardown(test_logs, teardown),
        cmocka_unit_test_teardown(test_server_kill9_resumes_job, teardown),
        cmocka_unit_test_teardown(test_server_shutdown_resumes_job, teardown),
        cmocka_unit_test_teardown(test_burst_respects_slots, teardown),
        cmocka_unit_test_teardown(test_unschedulable, teardown),
        cmocka_unit_test_teardown(test_launch_failure, teardown),
        cmocka_unit_test_teardown(test_queue_limit, teardown),
        cmocka_unit_test_teardown(test_queue_limit_per_queue, teardown),
        cmocka_unit_test_teardown(test_full_queue_costs_nothing, teardown),
        cmocka_unit_test_teardown(test_sandbox_hides_the_server, teardown),
        cmocka_unit_test_teardown(test_sandbox_setsid_does_not_escape_cancel, teardown),
        cmocka_unit_test_teardown(test_sandbox_setsid_does_not_survive_kill9, teardown),
        cmocka_unit_test_teardown(test_sandbox_log_is_capped, teardown),
        cmocka_unit_test_teardown(test_sandbox_symlinked_output_is_not_followed, teardown),
        cmocka_unit_test_teardown(test_sandbox_memory_limit, teardown),
    };
    int failed;

    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    failed = cmocka_run_group_tests_name("jobs_run", tests, NULL, NULL);
    ty_harness_cleanup();
    return failed;
}
