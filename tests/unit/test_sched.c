/*
 * test_sched.c - the reconcile loop with a real store.
 *
 * With the real local backend: admission order (priority, then age; no
 * backfill), queue limits, gangs that can never fit, exit code 75, and a
 * graceful stop followed by a new scheduler that resumes the job. Jobs are
 * `sh -c` scripts that append what they do to files in the test's directory,
 * so the assertions are about the order of things, never about how long they
 * took.
 *
 * With the fake backend (tests/support/fake_backend.h), where the test plays
 * the world, and the store's fault injection: RUNNING only once the ranks
 * run, a pending reason shown, a launch that fails, disruptions that spend no
 * restart while application failures do, a store that fails during a commit
 * (retried, nothing done twice), a commit that conflicts with a concurrent
 * cancel, stops the backend could not deliver, a wake-up when capacity grows
 * (and the Waiting reason before it), and an attempt adopted on recovery.
 * Every attempt's ranks get a job token the store knows the hash of, and a
 * restart's new token revokes the old one.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"
#include "scheduler/local/local.h"
#include "scheduler/sched.h"
#include "scheduler/sched_int.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tests/support/fake_backend.h"

#define WAIT_MS 30000

typedef struct fixture {
    char dir[64];
    char db[96];
    store *st;
    backend *be;
    sched *sc;
} fixture;

static void start_sched(fixture *f, int slots, int queue_limit, const sched_queue_limit *limits,
                        size_t nlimits)
{
    char err[256] = "";
    if (!f->be) {
        local_options lo = {.data_dir = f->dir, .slots = slots, .gpus = 0};
        assert_int_equal(local_backend_new(&lo, &f->be, err, sizeof err), TY_OK);
    }
    sched_options so = {.store = f->st,
                        .backend = f->be,
                        .queue_limit = queue_limit,
                        .queue_limits = limits,
                        .nqueue_limits = nlimits,
                        .stop_grace_ms = 2000};
    assert_int_equal(sched_start(&so, &f->sc, err, sizeof err), TY_OK);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ty-sched-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->db, sizeof f->db, "%s/trainyard.db", f->dir);
    char err[256];
    if (store_open(f->db, NULL, &f->st, err, sizeof err) != TY_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sched_stop(f->sc);
    if (f->be)
        f->be->ops->free(f->be);
    store_close(f->st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", f->dir);
    free(f);
    return 0;
}

/* Submits a job running `sh -c script` with `world` ranks; returns its id in id. */
static void submit(fixture *f, const char *name, const char *queue, int64_t priority, int world,
                   int restart_max, const char *script, char id[STORE_ID_LEN + 1])
{
    json_t *spec = json_pack(
        "{s:s, s:{}, s:s, s:I, s:s, s:[s,s,s], s:[], s:{s:s}, s:{s:i}, s:{s:n}, s:{s:i, s:i}, "
        "s:n}",
        "name", name, "labels", "queue", queue, "priority", (json_int_t)priority, "image", "local",
        "command", "sh", "-c", script, "args", "env", "T", f->dir, "workers", "count", world,
        "resources", "gpu", "restart", "max", restart_max, "backoff_seconds", 0,
        "timeout_seconds");
    assert_non_null(spec);
    char *text = json_dumps(spec, JSON_COMPACT);
    store_job_new n = {.name = name, .queue = queue, .priority = priority, .spec_json = text};
    store_job *out = NULL;
    size_t nout = 0;
    int replayed = 0;
    assert_int_equal(store_jobs_submit(f->st, &n, 1, NULL, NULL, &out, &nout, &replayed), TY_OK);
    memcpy(id, out[0].id, STORE_ID_LEN + 1);
    store_jobs_free(out, nout);
    free(text);
    json_decref(spec);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until the job is in a state of mask; returns the job (new). */
static store_job *wait_state(fixture *f, const char *id, unsigned mask)
{
    for (int waited = 0; waited < WAIT_MS; waited += 20) {
        store_job *j = NULL;
        assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
        if (mask & (1u << j->state))
            return j;
        store_jobs_free(j, 1);
        sleep_ms(20);
    }
    fail_msg("job %s did not reach the expected state in time", id);
    return NULL;
}

#define DONE (1u << JOB_SUCCEEDED | 1u << JOB_FAILED | 1u << JOB_CANCELLED)

static void expect_done(fixture *f, const char *id, job_state want)
{
    store_job *j = wait_state(f, id, DONE);
    assert_string_equal(job_state_name(j->state), job_state_name(want));
    store_jobs_free(j, 1);
}

/* The file's lines, concatenated with '|' (new). */
static char *read_lines(const char *dir, const char *name)
{
    char path[160], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "r");
    char *all = calloc(1, 4096);
    assert_non_null(all);
    while (fp && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = '\0';
        if (all[0])
            strcat(all, "|");
        strncat(all, line, 4096 - strlen(all) - 2);
    }
    if (fp)
        fclose(fp);
    return all;
}

/* The message of the job's last event (new). */
static char *last_event(fixture *f, const char *id, char *reason, size_t rlen)
{
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->st, id, &ev, &n), TY_OK);
    assert_true(n > 0);
    snprintf(reason, rlen, "%s", ev[n - 1].reason);
    char *msg = strdup(ev[n - 1].message);
    store_events_free(ev, n);
    return msg;
}

/* A script that waits for $T/<file> to exist, then records its name. */
#define GATED(file, tag) "while [ ! -e \"$T/" file "\" ]; do sleep 0.02; done; echo " tag " >> \"$T/order\""

static void touch(const fixture *f, const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
}

/* Higher priority first, then older first, whatever the submission order. */
static void test_priority_then_age(void **state)
{
    fixture *f = *state;
    start_sched(f, 1, SCHED_UNLIMITED, NULL, 0);
    char blocker[27], low[27], high1[27], high2[27];
    submit(f, "blocker", "default", 0, 1, 0, GATED("go", "blocker"), blocker);
    store_jobs_free(wait_state(f, blocker, 1u << JOB_RUNNING), 1);
    submit(f, "low", "default", 1, 1, 0, "echo low >> \"$T/order\"", low);
    submit(f, "high1", "default", 10, 1, 0, "echo high1 >> \"$T/order\"", high1);
    submit(f, "high2", "default", 10, 1, 0, "echo high2 >> \"$T/order\"", high2);
    touch(f, "go");
    expect_done(f, low, JOB_SUCCEEDED);
    expect_done(f, high1, JOB_SUCCEEDED);
    expect_done(f, high2, JOB_SUCCEEDED);
    char *order = read_lines(f->dir, "order");
    assert_string_equal(order, "blocker|high1|high2|low");
    free(order);
}

/* A gang that does not fit yet holds the line: a smaller job behind it waits. */
static void test_no_backfill(void **state)
{
    fixture *f = *state;
    start_sched(f, 2, SCHED_UNLIMITED, NULL, 0);
    char blocker[27], big[27], small[27];
    submit(f, "blocker", "default", 0, 1, 0, GATED("go", "blocker"), blocker);
    store_jobs_free(wait_state(f, blocker, 1u << JOB_RUNNING), 1);
    submit(f, "big", "default", 0, 2, 0, "[ \"$RANK\" = 0 ] && echo big >> \"$T/order\"; true",
           big);
    submit(f, "small", "default", 0, 1, 0, "echo small >> \"$T/order\"", small);
    sleep_ms(300); /* room for a wrong decision: small must still wait */
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, small, &j), TY_OK);
    assert_string_equal(job_state_name(j->state), "PENDING");
    store_jobs_free(j, 1);
    touch(f, "go");
    expect_done(f, big, JOB_SUCCEEDED);
    expect_done(f, small, JOB_SUCCEEDED);
    char *order = read_lines(f->dir, "order");
    assert_string_equal(order, "blocker|big|small");
    free(order);
}

/* A queue at its limit waits; other queues go on. */
static void test_queue_limit(void **state)
{
    fixture *f = *state;
    sched_queue_limit limits[] = {{"batch", 1}};
    start_sched(f, 4, SCHED_UNLIMITED, limits, 1);
    char a[27], b[27], c[27];
    submit(f, "a", "batch", 0, 1, 0, GATED("go-a", "a"), a);
    submit(f, "b", "batch", 0, 1, 0, "echo b >> \"$T/order\"", b);
    submit(f, "c", "interactive", 0, 1, 0, "echo c >> \"$T/order\"", c);
    expect_done(f, c, JOB_SUCCEEDED); /* ran although a holds the batch queue */
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, b, &j), TY_OK);
    assert_string_equal(job_state_name(j->state), "PENDING");
    store_jobs_free(j, 1);
    touch(f, "go-a");
    expect_done(f, a, JOB_SUCCEEDED);
    expect_done(f, b, JOB_SUCCEEDED);
    char *order = read_lines(f->dir, "order");
    assert_string_equal(order, "c|a|b");
    free(order);
}

/* The ids of the jobs the scheduler admitted, in the order of their Admitted events ('|'). */
static char *admitted_order(fixture *f, char (*ids)[STORE_ID_LEN + 1], const char *const *names,
                            size_t n)
{
    char *all = calloc(1, 4096);
    assert_non_null(all);
    int64_t after = 0;
    for (;;) {
        store_change *ch = NULL;
        size_t got = 0;
        assert_int_equal(store_changes(f->st, after, 1000, &ch, &got), TY_OK);
        for (size_t i = 0; i < got; i++) {
            after = ch[i].seq;
            if (ch[i].to != JOB_ADMITTED)
                continue;
            const char *name = "?";
            for (size_t k = 0; k < n; k++)
                if (strcmp(ids[k], ch[i].id) == 0)
                    name = names[k];
            if (all[0])
                strcat(all, "|");
            strncat(all, name, 4096 - strlen(all) - 2);
        }
        free(ch);
        if (got < 1000)
            return all;
    }
}

static job_state state_of(fixture *f, const char *id)
{
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    job_state st = j->state;
    store_jobs_free(j, 1);
    return st;
}

/*
 * Admission merges the queues under their limit in one order (priority, then
 * age): a queue at its limit is passed over whatever its priorities, a queue
 * that reaches its limit during a round leaves it, a job that can never fit
 * fails without holding anything, and the first job that does not fit holds
 * the line for every queue.
 *
 * 4 slots. The blocker (4 ranks, queue "one" limited to 1) holds all of them
 * while the others are submitted. When it ends, one round admits one-x (9),
 * which fills "one", so one-y (8) waits behind d1 (7), c1 and c2 (5, oldest
 * first); those four take the 4 slots; d2 (0, 4 ranks) waits. "paused"
 * (limit 0) is never admitted, its priority 10 notwithstanding. When go2 lets
 * them end, one-y comes before d2 whatever order they end in: d2 needs all 4
 * slots and holds the line until then, and one-y outranks it.
 */
static void test_admission_across_queues(void **state)
{
    fixture *f = *state;
    sched_queue_limit limits[] = {{"one", 1}, {"paused", 0}};
    start_sched(f, 4, SCHED_UNLIMITED, limits, 2);
    enum { BLOCKER, ONE_X, ONE_Y, PAUSED, D1, C1, WIDE, C2, D2, N };
    static const char *const names[N] = {"blocker", "one-x", "one-y", "paused", "d1",
                                         "c1",      "wide",  "c2",    "d2"};
    char ids[N][STORE_ID_LEN + 1];
    submit(f, "blocker", "one", 0, 4, 0, GATED("go", "blocker"), ids[BLOCKER]);
    store_jobs_free(wait_state(f, ids[BLOCKER], 1u << JOB_RUNNING), 1);
    submit(f, "one-x", "one", 9, 1, 0, GATED("go2", "one-x"), ids[ONE_X]);
    submit(f, "one-y", "one", 8, 1, 0, "true", ids[ONE_Y]);
    submit(f, "paused", "paused", 10, 1, 0, "true", ids[PAUSED]);
    submit(f, "d1", "d", 7, 1, 0, GATED("go2", "d1"), ids[D1]);
    submit(f, "c1", "c", 5, 1, 0, GATED("go2", "c1"), ids[C1]);
    submit(f, "wide", "c", 6, 5, 0, "true", ids[WIDE]);
    submit(f, "c2", "c", 5, 1, 0, GATED("go2", "c2"), ids[C2]);
    submit(f, "d2", "d", 0, 4, 0, "true", ids[D2]);
    touch(f, "go");
    expect_done(f, ids[BLOCKER], JOB_SUCCEEDED);
    expect_done(f, ids[WIDE], JOB_FAILED);
    for (int i = ONE_X; i < N; i++)
        if (i == ONE_X || i == D1 || i == C1 || i == C2)
            store_jobs_free(wait_state(f, ids[i], 1u << JOB_RUNNING), 1);
    assert_string_equal(job_state_name(state_of(f, ids[ONE_Y])), "PENDING");
    assert_string_equal(job_state_name(state_of(f, ids[D2])), "PENDING");
    assert_string_equal(job_state_name(state_of(f, ids[PAUSED])), "PENDING");
    touch(f, "go2");
    expect_done(f, ids[ONE_Y], JOB_SUCCEEDED);
    expect_done(f, ids[D2], JOB_SUCCEEDED);
    for (int i = ONE_X; i < N; i++)
        if (i == ONE_X || i == D1 || i == C1 || i == C2)
            expect_done(f, ids[i], JOB_SUCCEEDED);
    char *order = admitted_order(f, ids, names, N);
    assert_string_equal(order, "blocker|one-x|d1|c1|c2|one-y|d2");
    free(order);
    char reason[64];
    free(last_event(f, ids[WIDE], reason, sizeof reason));
    assert_string_equal(reason, "Unschedulable");
    assert_string_equal(job_state_name(state_of(f, ids[PAUSED])), "PENDING");
}

/* Submits n jobs of `true` to queue in one commit. */
static void submit_many(fixture *f, const char *queue, size_t n)
{
    json_t *spec = json_pack("{s:s, s:s, s:[s,s,s], s:{s:i}, s:{s:i, s:i}}", "name", "many",
                             "image", "local", "command", "sh", "-c", "true", "workers", "count",
                             1, "restart", "max", 0, "backoff_seconds", 0);
    assert_non_null(spec);
    char *text = json_dumps(spec, JSON_COMPACT);
    store_job_new *in = calloc(n, sizeof *in);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++)
        in[i] = (store_job_new){.name = "many", .queue = queue, .spec_json = text};
    store_job *out = NULL;
    size_t nout = 0;
    int replayed = 0;
    assert_int_equal(store_jobs_submit(f->st, in, n, NULL, NULL, &out, &nout, &replayed), TY_OK);
    assert_int_equal(nout, n);
    store_jobs_free(out, nout);
    free(in);
    free(text);
    json_decref(spec);
}

static uint64_t rounds(fixture *f)
{
    sched_stats st;
    sched_get_stats(f->sc, &st);
    return st.rounds_total;
}

/* Waits until the loop has run its last round for what happened (it runs none for 300 ms). */
static uint64_t wait_quiet(fixture *f)
{
    uint64_t before = rounds(f);
    for (int waited = 0; waited < WAIT_MS; waited += 300) {
        sleep_ms(300);
        uint64_t now = rounds(f);
        if (now == before)
            return now;
        before = now;
    }
    fail_msg("the scheduler never stopped running rounds (%llu so far)",
             (unsigned long long)before);
    return 0;
}

/*
 * Jobs waiting in a queue at its limit cost no round: with 1,100 of them in a
 * paused queue (more than one page of any walk) the loop sleeps, and a job of
 * another queue still runs at once.
 */
static void test_full_queue_costs_no_rounds(void **state)
{
    fixture *f = *state;
    sched_queue_limit limits[] = {{"sweep", 0}};
    start_sched(f, 2, SCHED_UNLIMITED, limits, 1);
    submit_many(f, "sweep", 1000);
    submit_many(f, "sweep", 100);
    uint64_t quiet = wait_quiet(f);
    sleep_ms(1000);
    assert_int_equal(rounds(f), quiet);

    char other[27];
    submit(f, "other", "default", 0, 1, 0, "true", other);
    expect_done(f, other, JOB_SUCCEEDED);
    uint64_t after = wait_quiet(f);
    assert_true(after > quiet);
    sleep_ms(1000);
    assert_int_equal(rounds(f), after);
    store_stats st;
    store_get_stats(f->st, &st);
    assert_int_equal(st.jobs_by_state[JOB_PENDING], 1100);
}

/* More ranks than slots fails at once, with the reason. */
static void test_never_fits(void **state)
{
    fixture *f = *state;
    start_sched(f, 2, SCHED_UNLIMITED, NULL, 0);
    char id[27];
    submit(f, "wide", "default", 0, 3, 0, "true", id);
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "Unschedulable");
    assert_non_null(strstr(msg, "slots"));
    free(msg);
}

/* Exit 75 unasked is a failure like any other code. */
static void test_exit_75_unasked_fails(void **state)
{
    fixture *f = *state;
    start_sched(f, 2, SCHED_UNLIMITED, NULL, 0);
    char id[27];
    submit(f, "quits", "default", 0, 1, 0, "exit 75", id);
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "RankFailed");
    assert_non_null(strstr(msg, "rank 0 exited with code 75"));
    free(msg);
}

/*
 * A graceful stop asks the gang to stop (the rank exits 75 as a checkpointing
 * trainer would) and records RESTARTING; the next scheduler resumes the job as
 * attempt 2, which spends no restart.
 */
static void test_stop_then_resume(void **state)
{
    fixture *f = *state;
    start_sched(f, 2, SCHED_UNLIMITED, NULL, 0);
    char id[27];
    submit(f, "resumable", "default", 0, 2, 0,
           "if [ \"$TRAINYARD_ATTEMPT\" = 1 ]; then trap 'exit 75' TERM; "
           "echo up-$RANK >> \"$T/up\"; while :; do sleep 0.05; done; fi; exit 0",
           id);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    for (int waited = 0; waited < WAIT_MS; waited += 20) { /* both traps are set */
        char *up = read_lines(f->dir, "up");
        int both = strstr(up, "up-0") && strstr(up, "up-1");
        free(up);
        if (both)
            break;
        sleep_ms(20);
    }
    sched_stop(f->sc);
    f->sc = NULL;
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_string_equal(job_state_name(j->state), "RESTARTING");
    assert_int_equal(j->restarts, 0);
    assert_non_null(j->attempt_json);
    json_t *rec = json_loads(j->attempt_json, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(rec, "state")), "stopped");
    assert_string_equal(json_string_value(json_object_get(rec, "reason")), "ServerShutdown");
    json_t *r0 = json_array_get(json_object_get(rec, "ranks"), 0);
    assert_string_equal(json_string_value(json_object_get(r0, "state")), "stopped");
    assert_int_equal(json_integer_value(json_object_get(r0, "exit_code")), 75);
    json_decref(rec);
    store_jobs_free(j, 1);

    start_sched(f, 2, SCHED_UNLIMITED, NULL, 0);
    expect_done(f, id, JOB_SUCCEEDED);
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_int_equal(j->attempt, 2);
    assert_int_equal(j->restarts, 0);
    store_jobs_free(j, 1);
    store_attempt *att = NULL;
    size_t n = 0;
    assert_int_equal(store_job_attempts(f->st, id, &att, &n), TY_OK);
    assert_int_equal(n, 2);
    store_attempts_free(att, n);
}


/* ---- with the fake backend ------------------------------------------------------ */

/* Starts a scheduler on a fake backend of `slots` slots (the fixture frees it). */
static void start_fake(fixture *f, int slots)
{
    if (!f->be)
        assert_non_null(f->be = fake_backend_new(slots));
    start_sched(f, slots, SCHED_UNLIMITED, NULL, 0);
}

/* "verb id" or "verb id tail": a line of the fake's call log. */
static void call_line(char *line, size_t len, const char *verb, const char *id, const char *tail)
{
    snprintf(line, len, "%s %.*s%s%s", verb, STORE_ID_LEN, id, tail ? " " : "", tail ? tail : "");
}

static void expect_call(fixture *f, const char *verb, const char *id, const char *tail,
                        int times)
{
    char line[128];
    call_line(line, sizeof line, verb, id, tail);
    if (!fake_wait_call(f->be, line, times, WAIT_MS)) {
        char calls[4096];
        fake_calls(f->be, calls, sizeof calls);
        fail_msg("no \"%s\" (x%d) in the backend's calls:\n%s", line, times, calls);
    }
}

static int count_call(fixture *f, const char *verb, const char *id, const char *tail)
{
    char line[128];
    call_line(line, sizeof line, verb, id, tail);
    return fake_count_calls(f->be, line);
}

/* The job's current attempt record (new), once `field` of it equals `want` (NULL: now). */
static json_t *wait_record(fixture *f, const char *id, const char *field, const char *want)
{
    for (int waited = 0; waited < WAIT_MS; waited += 20) {
        store_job *j = NULL;
        assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
        json_t *rec = j->attempt_json ? json_loads(j->attempt_json, 0, NULL) : NULL;
        store_jobs_free(j, 1);
        const char *v = json_string_value(json_object_get(rec, field));
        if (rec && (!want || (v && strstr(v, want))))
            return rec;
        json_decref(rec);
        sleep_ms(20);
    }
    fail_msg("the record of job %s never had %s ~ %s", id, field, want ? want : "");
    return NULL;
}

/* How many events of the job have this reason. */
static int count_reason(fixture *f, const char *id, const char *reason)
{
    store_event *ev = NULL;
    size_t n = 0;
    int k = 0;
    assert_int_equal(store_job_events(f->st, id, &ev, &n), TY_OK);
    for (size_t i = 0; i < n; i++)
        k += strcmp(ev[i].reason, reason) == 0;
    store_events_free(ev, n);
    return k;
}

static int job_restarts(fixture *f, const char *id)
{
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    int r = j->restarts;
    store_jobs_free(j, 1);
    return r;
}

/*
 * A round that decides more changes than the last one could hold (here 300 admissions and
 * starts in the first round) writes each with its own message: the round's array grows while
 * it is filled, and what the store writes is read from where each change is at the commit.
 */
static void test_large_round_keeps_each_message(void **state)
{
    fixture *f = *state;
    submit_many(f, "default", 300);
    start_fake(f, 300);
    store_job *jobs = NULL;
    size_t n = 0;
    int64_t next = 0;
    store_job_filter flt = {.limit = 300};
    for (int waited = 0; waited < WAIT_MS; waited += 50) {
        store_stats st;
        store_get_stats(f->st, &st);
        if (st.jobs_by_state[JOB_SUCCEEDED] == 300)
            break;
        sleep_ms(50);
    }
    assert_int_equal(store_jobs_list(f->st, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, 300);
    for (size_t i = 0; i < n; i++) {
        store_event *ev = NULL;
        size_t ne = 0;
        int admitted = 0, starting = 0;
        assert_int_equal(store_job_events(f->st, jobs[i].id, &ev, &ne), TY_OK);
        for (size_t k = 0; k < ne; k++) {
            if (!strcmp(ev[k].reason, "Admitted")) {
                assert_string_equal(ev[k].message, "queue default, priority 0");
                admitted++;
            } else if (!strcmp(ev[k].reason, "Starting")) {
                assert_string_equal(ev[k].message, "attempt 1: 1 rank");
                starting++;
            }
        }
        assert_int_equal(admitted, 1);
        assert_int_equal(starting, 1);
        store_events_free(ev, ne);
    }
    store_jobs_free(jobs, n);
}

/* STARTING until the backend says every rank runs; then RUNNING, with where they run. */
static void test_fake_running_when_ranks_run(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "two", "default", 0, 2, 0, "true", id);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(fake_emit_running(f->be, id, 0, "node-a"), 0);
    /* One rank of two runs: the record shows it, the job is still STARTING. */
    json_t *rec = NULL;
    for (int waited = 0; waited < WAIT_MS; waited += 20) {
        rec = wait_record(f, id, "state", NULL);
        json_t *r0 = json_array_get(json_object_get(rec, "ranks"), 0);
        if (strcmp(json_string_value(json_object_get(r0, "state")), "running") == 0)
            break;
        json_decref(rec);
        rec = NULL;
        sleep_ms(20);
    }
    assert_non_null(rec);
    json_decref(rec);
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_string_equal(job_state_name(j->state), "STARTING");
    store_jobs_free(j, 1);

    assert_int_equal(fake_emit_running(f->be, id, 1, "node-b"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    rec = wait_record(f, id, "state", "running");
    json_t *ranks = json_object_get(rec, "ranks");
    const char *nodes[] = {"node-a", "node-b"};
    for (int r = 0; r < 2; r++) {
        json_t *k = json_array_get(ranks, (size_t)r);
        assert_string_equal(json_string_value(json_object_get(k, "state")), "running");
        assert_string_equal(json_string_value(json_object_get(k, "node")), nodes[r]);
        assert_non_null(json_string_value(json_object_get(k, "pod")));
        assert_null(json_object_get(k, "pid")); /* no process here */
    }
    json_decref(rec);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
    expect_call(f, "release", id, NULL, 1);
    assert_int_equal(fake_slots_used(f->be), 0);
}

/*
 * News that comes in a burst (here one rank of each of 40 two-rank jobs starting, 5 ms apart)
 * is written at most once every SCHED_NEWS_HOLD_MS, not once a job, and none of it is lost;
 * the other rank's start, which makes each job RUNNING, is not held.
 */
static void test_fake_news_written_together(void **state)
{
    enum { N = 40 };
    fixture *f = *state;
    char ids[N][STORE_ID_LEN + 1];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "burst-%d", i);
        submit(f, name, "default", 0, 2, 0, "true", ids[i]);
    }
    start_fake(f, 2 * N);
    for (int i = 0; i < N; i++)
        expect_call(f, "launch", ids[i], "1", 1);
    wait_quiet(f);
    store_stats st;
    store_get_stats(f->st, &st);
    uint64_t before = st.commits_total;
    int64_t t0 = ty_time_now_ms();
    for (int i = 0; i < N; i++) {
        assert_int_equal(fake_emit_running(f->be, ids[i], 0, "node-a"), 0);
        sleep_ms(5);
    }
    for (int i = 0; i < N; i++) {
        json_t *rec = NULL;
        for (int waited = 0; waited < WAIT_MS; waited += 20) {
            rec = wait_record(f, ids[i], "state", NULL);
            json_t *r0 = json_array_get(json_object_get(rec, "ranks"), 0);
            if (!strcmp(json_string_value(json_object_get(r0, "state")), "running"))
                break;
            json_decref(rec);
            rec = NULL;
            sleep_ms(20);
        }
        assert_non_null(rec);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(rec, "ranks"), 0), "node")),
                            "node-a");
        json_decref(rec);
    }
    store_get_stats(f->st, &st);
    uint64_t commits = st.commits_total - before;
    int64_t spent = ty_time_now_ms() - t0;
    assert_true(commits >= 1);
    assert_true(commits <= (uint64_t)(spent / SCHED_NEWS_HOLD_MS) + 2);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fake_emit_running(f->be, ids[i], 1, "node-b"), 0);
        store_jobs_free(wait_state(f, ids[i], 1u << JOB_RUNNING), 1);
    }
}

/* While the ranks wait, the attempt says why; the reason goes once they run. */
static void test_fake_pending_reason_shown(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "waits", "default", 0, 2, 0, "true", id);
    expect_call(f, "launch", id, "1", 1);
    const char *why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
    assert_int_equal(fake_emit_pending(f->be, id, why), 0);
    json_t *rec = wait_record(f, id, "message", why);
    assert_string_equal(json_string_value(json_object_get(rec, "state")), "starting");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(rec, "ranks"), 0),
                                          "state")),
        "pending");
    json_decref(rec);
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-a"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    rec = wait_record(f, id, "state", "running");
    assert_string_equal(json_string_value(json_object_get(rec, "message")), "");
    json_decref(rec);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
}

/* A launch the backend reports as failed fails the job and frees its capacity. */
static void test_fake_launch_failure(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "nolaunch", "default", 0, 2, 3, "true", id);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(fake_emit_launch_failed(f->be, id, "image pull: not found"), 0);
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "LaunchFailed");
    assert_non_null(strstr(msg, "image pull: not found"));
    free(msg);
    expect_call(f, "release", id, NULL, 1);
    assert_int_equal(count_call(f, "stop", id, "soft"), 0); /* nothing ran to stop */
    assert_int_equal(fake_slots_used(f->be), 0);
    json_t *rec = wait_record(f, id, "reason", "LaunchFailed");
    assert_string_equal(json_string_value(json_object_get(rec, "state")), "failed");
    json_decref(rec);
}

/*
 * A node that keeps failing jobs: two jobs fail three times on node "bad" (one job twice), so
 * the third failure quarantines it: the job's event says so and the backend is told to keep off
 * it. An admin's release tells the backend again, with no node; a second release finds none.
 */
static void test_fake_quarantine(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char a[27], b[27];
    submit(f, "flaky-a", "default", 0, 1, 1, "true", a);
    for (int attempt = 1; attempt <= 2; attempt++) {
        char n[4];
        snprintf(n, sizeof n, "%d", attempt);
        expect_call(f, "launch", a, n, 1);
        assert_int_equal(fake_emit_running(f->be, a, -1, "bad"), 0);
        store_jobs_free(wait_state(f, a, 1u << JOB_RUNNING), 1);
        assert_int_equal(fake_emit_exit(f->be, a, 0, 1, 0, NULL), 0);
    }
    expect_done(f, a, JOB_FAILED);
    assert_int_equal(count_call(f, "exclude", "bad", NULL), 0); /* one job alone: not yet */
    submit(f, "flaky-b", "default", 0, 1, 0, "true", b);
    expect_call(f, "launch", b, "1", 1);
    assert_int_equal(fake_emit_running(f->be, b, -1, "bad"), 0);
    store_jobs_free(wait_state(f, b, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_exit(f->be, b, 0, 137, 0, "OOMKilled"), 0);
    expect_done(f, b, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, b, reason, sizeof reason);
    assert_non_null(strstr(msg, "rank 0 exited with code 137 (OOMKilled) on node bad; node bad "
                                "quarantined (3 failures of 2 jobs within 3600 s)"));
    free(msg);
    expect_call(f, "exclude", "bad", NULL, 1);
    sched_stats st;
    sched_get_stats(f->sc, &st);
    assert_int_equal(st.nodes_quarantined, 1);
    assert_int_equal(st.quarantines_total, 1);
    assert_int_equal(st.node_failures_total, 3);

    assert_int_equal(sched_node_release(f->sc, "bad", "admin"), TY_OK);
    expect_call(f, "exclude", "-", NULL, 2); /* at start, and after the release */
    assert_int_equal(sched_node_release(f->sc, "bad", "admin"), TY_ENOTFOUND);
}

/* A disruption restarts the attempt without spending restart.max; a failure spends it. */
static void test_fake_disruption_spends_no_restart(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "evicted", "default", 0, 2, 1, "true", id);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-a"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);

    /* Rank 1 evicted: the gang is stopped, attempt 2 starts, no restart spent. */
    assert_int_equal(
        fake_emit_disrupted(f->be, id, 1, BACKEND_DISRUPT_EVICTED, 1, "node memory pressure"),
        0);
    expect_call(f, "stop", id, "soft", 1);
    expect_call(f, "launch", id, "2", 1);
    assert_int_equal(job_restarts(f, id), 0);
    assert_int_equal(count_reason(f, id, "Disrupted"), 1);
    store_attempt *att = NULL;
    size_t n = 0;
    assert_int_equal(store_job_attempts(f->st, id, &att, &n), TY_OK);
    assert_int_equal(n, 2);
    json_t *a1 = json_loads(att[0].json, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(a1, "reason")), "Disrupted");
    assert_non_null(strstr(json_string_value(json_object_get(a1, "message")), "evicted"));
    json_t *k1 = json_array_get(json_object_get(a1, "ranks"), 1);
    assert_string_equal(json_string_value(json_object_get(k1, "state")), "disrupted");
    json_decref(a1);
    store_attempts_free(att, n);

    /* A spot notice (the rank still runs) stops the gang gracefully: no restart spent. */
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-b"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_disrupted(f->be, id, 0, BACKEND_DISRUPT_RECLAIMED, 0,
                                         "spot interruption notice"),
                     0);
    expect_call(f, "launch", id, "3", 1);
    assert_int_equal(job_restarts(f, id), 0);

    /* An application failure spends the one restart... */
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-c"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_exit(f->be, id, 0, 137, 0, "OOMKilled"), 0);
    expect_call(f, "launch", id, "4", 1);
    assert_int_equal(job_restarts(f, id), 1);
    /* ...and the next one fails the job. */
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-c"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_exit(f->be, id, 1, 3, 0, NULL), 0);
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "RankFailed");
    assert_non_null(strstr(msg, "rank 1 exited with code 3 on node node-c; no restart left"));
    free(msg);
    assert_int_equal(count_call(f, "launch", id, "5"), 0);
}

/*
 * The store fails the commit that admits and starts a job: nothing is launched for
 * it until the same decisions commit, and they are written once.
 */
static void test_fake_store_failure_retried(void **state)
{
    fixture *f = *state;
    char id[27];
    submit(f, "busy", "default", 0, 1, 0, "true", id);
    store_fail_writes(f->st, 1, 2, TY_EBUSY);
    start_fake(f, 4);
    store_jobs_free(wait_state(f, id, 1u << JOB_STARTING), 1);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(count_call(f, "reserve", id, NULL), 1);
    assert_int_equal(count_reason(f, id, "Admitted"), 1);
    assert_int_equal(count_reason(f, id, "Starting"), 1);
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_int_equal(j->attempt, 1);
    store_jobs_free(j, 1);

    assert_int_equal(fake_emit_running(f->be, id, -1, NULL), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    /* The commit of its end fails with an I/O error: the capacity is not given back
     * before the end is written, and then exactly once. */
    store_fail_writes(f->st, 1, 1, TY_EIO);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
    expect_call(f, "release", id, NULL, 1);
    assert_int_equal(count_reason(f, id, "Succeeded"), 1);
    assert_int_equal(count_call(f, "release", id, NULL), 1);
    assert_int_equal(count_call(f, "launch", id, "1"), 1);
}

static ty_err decide_cancel(job_state cur, job_state *to, void *ud)
{
    (void)ud;
    *to = cur == JOB_RUNNING ? JOB_CANCELLING : cur;
    return TY_OK;
}

typedef struct cancel_task {
    store *st;
    const char *id;
    ty_err result;
} cancel_task;

static void *cancel_main(void *arg)
{
    cancel_task *t = arg;
    t->result = store_job_transition(t->st, t->id, decide_cancel, NULL, "Cancelled",
                                     "cancelled by the test", NULL);
    return NULL;
}

static void wait_queued_ops(store *st, size_t n)
{
    for (int waited = 0; waited < WAIT_MS && store_test_queued(st) < n; waited += 5)
        sleep_ms(5);
    assert_int_equal(store_test_queued(st), n);
}

/*
 * A client cancels while the loop commits a decision about the same job (a rank
 * failed: restart). The store refuses the loop's update; the loop reads the job again
 * and the cancel wins: CANCELLED, no restart, the gang stopped once.
 */
static void test_fake_conflict_with_cancel(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "raced", "default", 0, 2, 3, "true", id);
    expect_call(f, "launch", id, "1", 1);
    fake_set_stop_ends(f->be, 0);
    assert_int_equal(fake_emit_running(f->be, id, -1, NULL), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);

    store_test_hold_writer(f->st, 1);
    cancel_task t = {.st = f->st, .id = id};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_main, &t), 0);
    wait_queued_ops(f->st, 1);
    /* Rank 0 fails: the loop's decision (the gang stops) queues behind the cancel. */
    assert_int_equal(fake_emit_exit(f->be, id, 0, 3, 0, NULL), 0);
    wait_queued_ops(f->st, 2);
    assert_int_equal(count_call(f, "stop", id, "soft"), 0); /* not before it committed */
    store_test_hold_writer(f->st, 0);
    pthread_join(th, NULL);
    assert_int_equal(t.result, TY_OK);

    expect_call(f, "stop", id, "soft", 1);
    assert_int_equal(fake_emit_disrupted(f->be, id, 1, BACKEND_DISRUPT_STOP_REQUESTED, 1, NULL),
                     0);
    expect_done(f, id, JOB_CANCELLED);
    assert_int_equal(count_call(f, "launch", id, "2"), 0);
    assert_int_equal(count_call(f, "stop", id, "soft"), 1);
    assert_int_equal(job_restarts(f, id), 0);
    assert_int_equal(count_reason(f, id, "RankFailed"), 0);
    expect_call(f, "release", id, NULL, 1);
}

/* Stops the backend could not deliver are asked again, hard, after the grace period. */
static void test_fake_stop_failure_asked_again(void **state)
{
    fixture *f = *state;
    start_fake(f, 4);
    char id[27];
    submit(f, "sticky", "default", 0, 2, 0, "true", id);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(fake_emit_running(f->be, id, -1, NULL), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    fake_fail_stops(f->be, 2);
    assert_int_equal(fake_emit_exit(f->be, id, 0, 3, 0, NULL), 0);
    expect_call(f, "stop", id, "soft failed", 1);
    expect_call(f, "stop", id, "hard failed", 1);
    expect_call(f, "stop", id, "hard", 1); /* the third ask is delivered */
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "RankFailed");
    assert_non_null(strstr(msg, "rank 0 exited with code 3"));
    free(msg);
    expect_call(f, "release", id, NULL, 1);
}

/* A job waiting for capacity is admitted when the backend says capacity grew. */
static void test_fake_capacity_wakes_waiting_job(void **state)
{
    fixture *f = *state;
    start_fake(f, 2);
    char big[27], next[27];
    submit(f, "holder", "default", 0, 2, 0, "true", big);
    expect_call(f, "launch", big, "1", 1);
    submit(f, "next", "default", 0, 2, 0, "true", next);
    /* It waits, saying why: the holder has every slot. */
    char reason[64] = "";
    char *msg = NULL;
    for (int waited = 0; waited < WAIT_MS && strcmp(reason, "Waiting") != 0; waited += 20) {
        free(msg);
        msg = last_event(f, next, reason, sizeof reason);
        sleep_ms(20);
    }
    assert_string_equal(reason, "Waiting");
    assert_string_equal(msg, "needs 2 slots, 0 of 2 free");
    free(msg);
    assert_string_equal(job_state_name(state_of(f, next)), "PENDING");
    fake_set_slots(f->be, 4);
    fake_emit_capacity(f->be);
    expect_call(f, "launch", next, "1", 1);
    assert_string_equal(job_state_name(state_of(f, big)), "STARTING"); /* still holding */
    assert_int_equal(count_reason(f, next, "Waiting"), 1); /* told once */
    /* The note left the job where it was: it was admitted from PENDING. */
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(f->st, next, &ev, &n), TY_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ev[1].from, JOB_PENDING);
    assert_int_equal(ev[1].to, JOB_PENDING);
    assert_string_equal(ev[2].reason, "Admitted");
    store_events_free(ev, n);
}

/* The record a previous server left of a running attempt of `world` ranks. */
static void store_running(fixture *f, const char *id, int world)
{
    json_t *ranks = json_array();
    for (int r = 0; r < world; r++)
        json_array_append_new(ranks, json_pack("{s:i, s:s, s:s, s:s, s:n, s:n, s:s, s:n}", "rank",
                                               r, "state", "running", "pod", "p", "node", "n1",
                                               "exit_code", "signal", "started_at",
                                               "2026-11-22T10:00:00.000Z", "ended_at"));
    json_t *rec = json_pack("{s:i, s:s, s:s, s:n, s:n, s:s, s:o}", "attempt", 1, "state",
                            "running", "started_at", "2026-11-22T10:00:00.000Z", "ended_at",
                            "reason", "message", "", "ranks", ranks);
    char *text = json_dumps(rec, JSON_COMPACT);
    store_update u[3] = {
        {.id = id, .from = JOB_PENDING, .to = JOB_ADMITTED, .reason = "Admitted",
         .restarts = -1},
        {.id = id, .from = JOB_ADMITTED, .to = JOB_STARTING, .reason = "Starting", .attempt = 1,
         .attempt_json = text, .restarts = 0},
        {.id = id, .from = JOB_STARTING, .to = JOB_RUNNING, .reason = "Running",
         .restarts = -1},
    };
    assert_int_equal(store_jobs_update(f->st, u, 3), TY_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(u[i].result, TY_OK);
    free(text);
    json_decref(rec);
}

/*
 * After a server restart the backend adopts the attempt that still runs: no restart,
 * no new attempt, and its end is the job's end. An attempt it cannot adopt restarts.
 */
static void test_fake_adopt_on_recover(void **state)
{
    fixture *f = *state;
    char kept[27], lost[27];
    submit(f, "kept", "default", 0, 2, 0, "true", kept);
    submit(f, "lost", "default", 0, 1, 0, "true", lost);
    store_running(f, kept, 2);
    store_running(f, lost, 1);
    assert_non_null(f->be = fake_backend_new(4));
    fake_adopt_next(f->be, kept, 2);
    start_fake(f, 4);
    expect_call(f, "recover", kept, "adopted", 1);
    expect_call(f, "recover", lost, "stopped", 1);
    expect_call(f, "launch", lost, "2", 1); /* restarted: ServerRestarted */

    /* The adopted attempt says how its ranks are, then ends. */
    assert_int_equal(fake_emit_running(f->be, kept, -1, "n1"), 0);
    assert_int_equal(fake_emit_exit(f->be, kept, -1, 0, 0, NULL), 0);
    expect_done(f, kept, JOB_SUCCEEDED);
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, kept, &j), TY_OK);
    assert_int_equal(j->attempt, 1);
    store_jobs_free(j, 1);
    assert_int_equal(count_call(f, "launch", kept, "1"), 0);
    assert_int_equal(count_call(f, "launch", kept, "2"), 0);
    assert_int_equal(count_reason(f, kept, "ServerRestarted"), 0);
    assert_int_equal(count_reason(f, lost, "ServerRestarted"), 1);
    expect_call(f, "release", kept, NULL, 1);
}

/*
 * On a backend whose gangs outlive the server (Kubernetes), a graceful stop leaves the gang
 * running: no stop is asked, the job stays RUNNING in its attempt, and the next start adopts
 * it: no new attempt, no restart spent.
 */
static void test_fake_stop_leaves_gang_to_adopt(void **state)
{
    fixture *f = *state;
    char id[27];
    assert_non_null(f->be = fake_backend_new(4));
    fake_set_adopts(f->be, 1);
    start_fake(f, 4);
    submit(f, "runs-on", "default", 0, 2, 0, "true", id);
    expect_call(f, "launch", id, "1", 1);
    assert_int_equal(fake_emit_running(f->be, id, -1, "n1"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    sched_stop(f->sc);
    f->sc = NULL;
    assert_int_equal(count_call(f, "stop", id, "soft") + count_call(f, "stop", id, "hard"), 0);
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_string_equal(job_state_name(j->state), "RUNNING");
    assert_int_equal(j->attempt, 1);
    store_jobs_free(j, 1);

    fake_adopt_next(f->be, id, 2);
    start_fake(f, 4);
    expect_call(f, "recover", id, "adopted", 1);
    assert_int_equal(fake_emit_running(f->be, id, -1, "n1"), 0);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
    assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
    assert_int_equal(j->attempt, 1);
    assert_int_equal(j->restarts, 0);
    store_jobs_free(j, 1);
    assert_int_equal(count_call(f, "launch", id, "2"), 0);
    assert_int_equal(count_reason(f, id, "ServerShutdown"), 0);
}

/*
 * A backend in front of the fake that keeps the TRAINYARD_TOKEN of each launch (the fake
 * keeps no env); everything else goes to the fake, which the test drives as usual.
 */
typedef struct spy_backend {
    backend base;
    backend_ops ops;
    backend *inner;
    pthread_mutex_t mu;
    char tokens[8][TY_TOKEN_BUFLEN]; /* by attempt; "" when a launch had none */
    char secrets[8][80];             /* TRAINYARD_RENDEZVOUS_SECRET by attempt, the same way */
    char api_key[8][80];             /* the job's secret API_KEY by attempt, the same way */
    int named[8];                    /* how many of API_KEY, TRAINYARD_TOKEN and
                                        TRAINYARD_RENDEZVOUS_SECRET secret_names held */
    int launches;
} spy_backend;

static spy_backend *spy_of(backend *b)
{
    return (spy_backend *)b;
}

static ty_err spy_reserve(backend *b, const backend_job *job, backend_attempt **out, char *why,
                          size_t whylen)
{
    backend *in = spy_of(b)->inner;
    return in->ops->reserve(in, job, out, why, whylen);
}

static void spy_launch(backend *b, backend_attempt *a, const backend_job *job)
{
    spy_backend *sp = spy_of(b);
    pthread_mutex_lock(&sp->mu);
    if (job->attempt > 0 && job->attempt < 8) {
        sp->tokens[job->attempt][0] = '\0';
        sp->secrets[job->attempt][0] = '\0';
        for (size_t i = 0; job->env && job->env[i]; i++) {
            if (strncmp(job->env[i], "TRAINYARD_TOKEN=", 16) == 0)
                snprintf(sp->tokens[job->attempt], TY_TOKEN_BUFLEN, "%s", job->env[i] + 16);
            if (strncmp(job->env[i], "TRAINYARD_RENDEZVOUS_SECRET=", 28) == 0)
                snprintf(sp->secrets[job->attempt], sizeof sp->secrets[0], "%s",
                         job->env[i] + 28);
            if (strncmp(job->env[i], "API_KEY=", 8) == 0)
                snprintf(sp->api_key[job->attempt], sizeof sp->api_key[0], "%s",
                         job->env[i] + 8);
        }
        sp->named[job->attempt] = 0;
        for (size_t i = 0; job->secret_names && job->secret_names[i]; i++)
            sp->named[job->attempt] += !strcmp(job->secret_names[i], "API_KEY") ||
                                       !strcmp(job->secret_names[i], "TRAINYARD_TOKEN") ||
                                       !strcmp(job->secret_names[i],
                                               "TRAINYARD_RENDEZVOUS_SECRET");
    }
    sp->launches++;
    pthread_mutex_unlock(&sp->mu);
    sp->inner->ops->launch(sp->inner, a, job);
}

static int spy_event_fd(backend *b)
{
    backend *in = spy_of(b)->inner;
    return in->ops->event_fd(in);
}

static size_t spy_observe(backend *b, backend_event *ev, size_t max)
{
    backend *in = spy_of(b)->inner;
    return in->ops->observe(in, ev, max);
}

static void spy_stop(backend *b, backend_attempt *a, int hard)
{
    backend *in = spy_of(b)->inner;
    in->ops->stop(in, a, hard);
}

static void spy_release(backend *b, backend_attempt *a)
{
    backend *in = spy_of(b)->inner;
    in->ops->release(in, a);
}

static ty_err spy_recover(backend *b, const backend_job *job, int may_adopt, int grace_ms,
                          backend_recovery *out, char *why, size_t whylen)
{
    backend *in = spy_of(b)->inner;
    return in->ops->recover(in, job, may_adopt, grace_ms, out, why, whylen);
}

static void spy_capacity(const backend *b, int *total, int *used)
{
    const backend *in = ((const spy_backend *)b)->inner;
    in->ops->capacity(in, total, used);
}

static size_t spy_free_resources(const backend *b, backend_free *out, size_t max)
{
    const backend *in = ((const spy_backend *)b)->inner;
    return in->ops->free_resources ? in->ops->free_resources(in, out, max) : 0;
}

static void spy_exclude_nodes(backend *b, const char *const *nodes, size_t n)
{
    backend *in = spy_of(b)->inner;
    in->ops->exclude_nodes(in, nodes, n);
}

static void spy_free(backend *b)
{
    (void)b; /* the fixture frees the fake */
}

/* The job's token for `attempt` as the spy saw it: (id, attempt) in the store. */
static void expect_token(spy_backend *sp, const fixture *f, const char *id, int attempt)
{
    pthread_mutex_lock(&sp->mu);
    char token[TY_TOKEN_BUFLEN];
    memcpy(token, sp->tokens[attempt], sizeof token);
    pthread_mutex_unlock(&sp->mu);
    assert_int_equal(strncmp(token, "ty_", 3), 0);
    assert_int_equal(strlen(token), 3 + 43); /* "ty_" and 32 bytes in base64url */
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(token, strlen(token), hash);
    char got[STORE_ID_LEN + 1];
    int got_attempt = 0;
    assert_int_equal(store_job_token_lookup(f->st, hash, got, &got_attempt), TY_OK);
    assert_string_equal(got, id);
    assert_int_equal(got_attempt, attempt);
}

static int token_valid(spy_backend *sp, const fixture *f, int attempt)
{
    unsigned char hash[TY_SHA256_LEN];
    pthread_mutex_lock(&sp->mu);
    ty_sha256(sp->tokens[attempt], strlen(sp->tokens[attempt]), hash);
    pthread_mutex_unlock(&sp->mu);
    char id[STORE_ID_LEN + 1];
    int attempt_seen;
    return store_job_token_lookup(f->st, hash, id, &attempt_seen) == TY_OK;
}

/* Starts the loop on a spy around a fake backend of 4 slots (sp outlives a failed assertion:
 * the loop may still run, so callers keep it static). */
static void start_spy(fixture *f, spy_backend *sp)
{
    assert_non_null(f->be = fake_backend_new(4));
    memset(sp, 0, sizeof *sp);
    sp->inner = f->be;
    sp->ops = *f->be->ops;
    sp->ops.reserve = spy_reserve;
    sp->ops.launch = spy_launch;
    sp->ops.event_fd = spy_event_fd;
    sp->ops.observe = spy_observe;
    sp->ops.stop = spy_stop;
    sp->ops.release = spy_release;
    sp->ops.recover = spy_recover;
    sp->ops.capacity = spy_capacity;
    sp->ops.free_resources = spy_free_resources;
    sp->ops.exclude_nodes = spy_exclude_nodes;
    sp->ops.free = spy_free;
    sp->base.ops = &sp->ops;
    pthread_mutex_init(&sp->mu, NULL);
    char err[256] = "";
    sched_options so = {.store = f->st, .backend = &sp->base, .queue_limit = SCHED_UNLIMITED,
                        .stop_grace_ms = 2000};
    assert_int_equal(sched_start(&so, &f->sc, err, sizeof err), TY_OK);
}

/* Each attempt's ranks get a token of their own; a restart revokes the old; the end, the last. */
static void test_fake_job_token_per_attempt(void **state)
{
    fixture *f = *state;
    static spy_backend sp; /* outlives a failed assertion: the loop may still run */
    start_spy(f, &sp);

    char id[27];
    submit(f, "reporting", "default", 0, 2, 1, "true", id);
    expect_call(f, "launch", id, "1", 1);
    expect_token(&sp, f, id, 1);

    /* A rank fails: attempt 2 gets a new token and the first one stops working. */
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-a"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_exit(f->be, id, 0, 1, 0, NULL), 0);
    expect_call(f, "launch", id, "2", 1);
    expect_token(&sp, f, id, 2);
    assert_string_not_equal(sp.tokens[1], sp.tokens[2]);
    /* Each launch also carries a rendezvous secret of its own: 32 random bytes in hex. */
    for (int a = 1; a <= 2; a++) {
        assert_int_equal(strlen(sp.secrets[a]), 64);
        assert_int_equal(strspn(sp.secrets[a], "0123456789abcdef"), 64);
    }
    assert_string_not_equal(sp.secrets[1], sp.secrets[2]);
    assert_false(token_valid(&sp, f, 1));

    /* The job ends: its token is revoked with the transition. */
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-a"), 0);
    store_jobs_free(wait_state(f, id, 1u << JOB_RUNNING), 1);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
    assert_false(token_valid(&sp, f, 2));

    sched_stop(f->sc);
    f->sc = NULL;
    pthread_mutex_destroy(&sp.mu);
}

/* A job whose env has API_KEY as a secret (value in the store only), as api/jobs.c submits it. */
static void submit_secret(fixture *f, const char *name, char id[STORE_ID_LEN + 1])
{
    static const char spec[] =
        "{\"name\":\"s\",\"labels\":{},\"queue\":\"default\",\"priority\":0,\"image\":null,"
        "\"command\":[\"true\"],\"args\":[],\"env\":{\"API_KEY\":{\"value\":null,\"secret\":true},"
        "\"PLAIN\":\"p\"},\"workers\":{\"count\":1,\"min\":1},\"resources\":{\"cpu\":\"1\","
        "\"memory\":\"1Gi\",\"gpu\":null},\"placement\":{\"zone\":\"auto\",\"capacity\":"
        "\"on-demand\"},\"volumes\":[],\"restart\":{\"max\":0,\"backoff_seconds\":0},"
        "\"timeout_seconds\":null,\"ttl_seconds_after_finished\":60}";
    const store_env_secret key = {"API_KEY", "k-7f3a-secret", 13};
    store_job_new n = {.name = name, .queue = "default", .spec_json = spec, .secrets = &key,
                       .nsecrets = 1};
    store_job *out = NULL;
    size_t nout = 0;
    assert_int_equal(store_jobs_submit(f->st, &n, 1, NULL, NULL, &out, &nout, NULL), TY_OK);
    memcpy(id, out[0].id, STORE_ID_LEN + 1);
    store_jobs_free(out, nout);
}

/* launch() opens a job's secret values from the store: the backend gets them in the env, named
 * in secret_names with the token and the rendezvous secret. */
static void test_fake_secrets_reach_the_launch(void **state)
{
    fixture *f = *state;
    static spy_backend sp;
    char id[27];
    start_spy(f, &sp);
    submit_secret(f, "secret", id);
    expect_call(f, "launch", id, "1", 1);
    pthread_mutex_lock(&sp.mu);
    assert_string_equal(sp.api_key[1], "k-7f3a-secret");
    assert_int_equal(sp.named[1], 3);
    pthread_mutex_unlock(&sp.mu);
    assert_int_equal(fake_emit_running(f->be, id, -1, "node-a"), 0);
    assert_int_equal(fake_emit_exit(f->be, id, -1, 0, 0, NULL), 0);
    expect_done(f, id, JOB_SUCCEEDED);
    sched_stop(f->sc);
    f->sc = NULL;
    pthread_mutex_destroy(&sp.mu);
}

/* Secrets that cannot be opened (the key file lost: a new one is made, which opens nothing):
 * the attempt is not launched without them; it fails as a refused launch, saying why. */
static void test_fake_secrets_unopened_fail_the_launch(void **state)
{
    fixture *f = *state;
    static spy_backend sp;
    char id[27], path[160];
    submit_secret(f, "lost-key", id);
    snprintf(path, sizeof path, "%s/webhook-secrets.key", f->dir);
    assert_int_equal(unlink(path), 0);
    start_spy(f, &sp);
    expect_done(f, id, JOB_FAILED);
    char reason[64];
    char *msg = last_event(f, id, reason, sizeof reason);
    assert_string_equal(reason, "LaunchFailed");
    assert_non_null(strstr(msg, "secret env values could not be opened"));
    free(msg);
    pthread_mutex_lock(&sp.mu);
    assert_int_equal(sp.launches, 0);
    pthread_mutex_unlock(&sp.mu);
    expect_call(f, "release", id, NULL, 1);
    assert_int_equal(fake_slots_used(f->be), 0);
    sched_stop(f->sc);
    f->sc = NULL;
    pthread_mutex_destroy(&sp.mu);
}

/* ---- sweeps ---------------------------------------------------------------- */

/* A sweep of n trials in `queue`, trial i running `sh -c scripts[i]`; their ids go to ids. */
static void create_sweep(fixture *f, const char *queue, int parallelism, size_t n,
                         const char *const *scripts, char (*ids)[STORE_ID_LEN + 1])
{
    char sweep_id[STORE_ID_LEN + 1];
    store_job_new jobs[8];
    char *texts[8];
    const char *params[8];
    assert_true(n <= 8);
    assert_int_equal(store_sweep_id_new(sweep_id), TY_OK);
    for (size_t i = 0; i < n; i++) {
        json_t *spec = json_pack("{s:s, s:{}, s:s, s:i, s:s, s:[s,s,s], s:[], s:{s:s}, s:{s:i}, "
                                 "s:{s:n}, s:{s:i, s:i}, s:n}",
                                 "name", "trial", "labels", "queue", queue, "priority", 0,
                                 "image", "local", "command", "sh", "-c", scripts[i], "args",
                                 "env", "T", f->dir, "workers", "count", 1, "resources", "gpu",
                                 "restart", "max", 0, "backoff_seconds", 0, "timeout_seconds");
        assert_non_null(spec);
        texts[i] = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        jobs[i] = (store_job_new){.name = "trial", .queue = queue, .spec_json = texts[i]};
        params[i] = "{}";
    }
    store_sweep_new in = {.id = sweep_id,
                          .name = "sweep",
                          .algorithm = "grid",
                          .parallelism = parallelism,
                          .metric = "loss",
                          .stop_min_trials = -1,
                          .body_json = "{}",
                          .trials = jobs,
                          .params_json = params,
                          .ntrials = n};
    assert_int_equal(store_sweep_create(f->st, &in), TY_OK);
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
    store_sweep *sw = NULL;
    assert_int_equal(store_sweep_get(f->st, sweep_id, &sw), TY_OK);
    for (size_t i = 0; i < n; i++)
        memcpy(ids[i], sw->trials[i].job_id, STORE_ID_LEN + 1);
    store_sweeps_free(sw, 1);
}

/*
 * At most `parallelism` trials of a sweep are active; the trials waiting for a place block
 * nobody (a job submitted after them runs), and a trial that ends lets the next one in.
 */
static void test_sweep_parallelism(void **state)
{
    fixture *f = *state;
    start_sched(f, 8, SCHED_UNLIMITED, NULL, 0);
    char ids[5][STORE_ID_LEN + 1];
    static const char *const scripts[] = {GATED("go-0", "t0"), GATED("go-1", "t1"),
                                          GATED("go-2", "t2"), GATED("go-3", "t3")};
    create_sweep(f, "default", 2, 4, scripts, ids);
    submit(f, "o", "default", 0, 1, 0, "echo o >> \"$T/order\"", ids[4]);
    expect_done(f, ids[4], JOB_SUCCEEDED); /* passed the trials waiting for their sweep */
    store_jobs_free(wait_state(f, ids[0], 1u << JOB_RUNNING), 1);
    store_jobs_free(wait_state(f, ids[1], 1u << JOB_RUNNING), 1);
    assert_int_equal(state_of(f, ids[2]), JOB_PENDING);
    assert_int_equal(state_of(f, ids[3]), JOB_PENDING);
    touch(f, "go-0");
    expect_done(f, ids[0], JOB_SUCCEEDED);
    store_jobs_free(wait_state(f, ids[2], 1u << JOB_RUNNING), 1); /* t0's place went to t2 */
    assert_int_equal(state_of(f, ids[3]), JOB_PENDING);
    touch(f, "go-1");
    touch(f, "go-2");
    touch(f, "go-3");
    for (int i = 0; i < 4; i++)
        expect_done(f, ids[i], JOB_SUCCEEDED);
    static const char *const names[] = {"t0", "t1", "t2", "t3", "o"};
    char *order = admitted_order(f, ids, names, 5);
    assert_string_equal(order, "t0|t1|o|t2|t3");
    free(order);
}

/* A sweep does not bypass its queue's limit: its trials count against it like other jobs. */
static void test_sweep_within_queue_limit(void **state)
{
    fixture *f = *state;
    sched_queue_limit limits[] = {{"batch", 1}};
    start_sched(f, 8, SCHED_UNLIMITED, limits, 1);
    char ids[2][STORE_ID_LEN + 1];
    static const char *const scripts[] = {GATED("go-0", "t0"), GATED("go-1", "t1")};
    create_sweep(f, "batch", 2, 2, scripts, ids);
    store_jobs_free(wait_state(f, ids[0], 1u << JOB_RUNNING), 1);
    assert_int_equal(state_of(f, ids[1]), JOB_PENDING);
    touch(f, "go-1");
    touch(f, "go-0");
    expect_done(f, ids[0], JOB_SUCCEEDED);
    expect_done(f, ids[1], JOB_SUCCEEDED);
    static const char *const names[] = {"t0", "t1"};
    char *order = admitted_order(f, ids, names, 2);
    assert_string_equal(order, "t0|t1");
    free(order);
}


/* ---- teams: quotas, borrowing, fair share ------------------------------------------------ */

/* Creates team `name` with a quota of `quota` a100 GPUs and a borrowing limit of `borrow`. */
static void make_team(fixture *f, const char *name, int64_t quota, int64_t borrow)
{
    store_team_res res = {.resource = "gpu/a100", .quota = quota, .borrowing_limit = borrow};
    store_team t = {.name = (char *)name, .weight = 1, .has_quota = 1, .res = &res, .nres = 1};
    assert_int_equal(store_team_create(f->st, &t), TY_OK);
}

/* Submits a job of team `team`: `world` ranks of `gpus` a100 GPUs each, running `true`
 * (the fake runs nothing). */
static void submit_team(fixture *f, const char *name, const char *team, int64_t priority,
                        int world, int gpus, char id[STORE_ID_LEN + 1])
{
    json_t *spec = json_pack(
        "{s:s, s:{}, s:s, s:I, s:s, s:[s], s:[], s:{}, s:{s:i}, s:{s:{s:s, s:i}}, "
        "s:{s:i, s:i}, s:n}",
        "name", name, "labels", "queue", "default", "priority", (json_int_t)priority, "image",
        "local", "command", "true", "args", "env", "workers", "count", world, "resources", "gpu",
        "type", "a100", "count", gpus, "restart", "max", 0, "backoff_seconds", 0,
        "timeout_seconds");
    assert_non_null(spec);
    char *text = json_dumps(spec, JSON_COMPACT);
    store_job_new n = {.name = name, .queue = "default", .priority = priority, .spec_json = text,
                       .team = team};
    store_job *out = NULL;
    size_t nout = 0;
    int replayed = 0;
    assert_int_equal(store_jobs_submit(f->st, &n, 1, NULL, NULL, &out, &nout, &replayed), TY_OK);
    memcpy(id, out[0].id, STORE_ID_LEN + 1);
    store_jobs_free(out, nout);
    free(text);
    json_decref(spec);
}

/* The job's pending_reason (new), once its reason is `want`. */
static json_t *wait_pending_reason(fixture *f, const char *id, const char *want)
{
    for (int waited = 0; waited < WAIT_MS; waited += 20) {
        store_job *j = NULL;
        assert_int_equal(store_job_get(f->st, id, &j), TY_OK);
        json_t *pr = j->pending_reason ? json_loads(j->pending_reason, 0, NULL) : NULL;
        store_jobs_free(j, 1);
        const char *r = json_string_value(json_object_get(pr, "reason"));
        if (r && strcmp(r, want) == 0)
            return pr;
        json_decref(pr);
        sleep_ms(20);
    }
    fail_msg("job %s never waited with %s", id, want);
    return NULL;
}

/*
 * A team within its quota, then beyond it by borrowing what the other team leaves idle, up to
 * its borrowing limit; past that the head waits with QuotaExceeded, saying by how much, while
 * the other team's job that fits is admitted.
 */
static void test_quota_and_borrowing(void **state)
{
    fixture *f = *state;
    make_team(f, "vision", 4, 2);
    make_team(f, "nlp", 4, -1); /* no borrowing limit named: it borrows nothing */
    assert_non_null(f->be = fake_backend_new(100));
    fake_set_gpus(f->be, "a100", 8);
    char v[4][27], n1[27], n2[27];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "v%d", i);
        submit_team(f, name, "vision", 0, 1, 2, v[i]);
    }
    start_fake(f, 100);
    expect_call(f, "launch", v[0], "1", 1);
    expect_call(f, "launch", v[1], "1", 1);
    expect_call(f, "launch", v[2], "1", 1); /* borrows 2 of nlp's idle 4 */
    json_t *pr = wait_pending_reason(f, v[3], "QuotaExceeded");
    assert_int_equal(json_integer_value(json_object_get(pr, "position")), 1);
    assert_int_equal(json_integer_value(json_object_get(pr, "team_position")), 1);
    const char *msg = json_string_value(json_object_get(pr, "message"));
    assert_non_null(strstr(msg, "team vision uses 6 of 4 a100 and borrows 2 of 2"));
    json_decref(pr);
    assert_int_equal(count_call(f, "launch", v[3], "1"), 0);
    assert_int_equal(count_reason(f, v[3], "Waiting"), 1);
    /* nlp's job fits its own quota and the 2 free GPUs. */
    submit_team(f, "n1", "nlp", 0, 1, 2, n1);
    expect_call(f, "launch", n1, "1", 1);
    assert_int_equal(state_of(f, v[3]), JOB_PENDING);
    /* nlp uses 2 of its 4; without a borrowing limit it may not go beyond 4. */
    submit_team(f, "n2", "nlp", 0, 1, 4, n2);
    json_t *np = wait_pending_reason(f, n2, "QuotaExceeded");
    assert_non_null(strstr(json_string_value(json_object_get(np, "message")),
                           "team nlp uses 2 of 4 a100 and borrows 0 of 0; this job needs 4"));
    json_decref(np);
    assert_int_equal(count_call(f, "launch", n2, "1"), 0);
    assert_int_equal(count_call(f, "stop", v[2], "soft"), 0); /* no reclaim beyond a quota */
    /* A vision job ends: its place goes to the next vision job. */
    assert_int_equal(fake_emit_exit(f->be, v[0], -1, 0, 0, NULL), 0);
    expect_done(f, v[0], JOB_SUCCEEDED);
    expect_call(f, "launch", v[3], "1", 1);
    store_job *j = wait_state(f, v[3], 1u << JOB_STARTING | 1u << JOB_RUNNING);
    assert_null(j->pending_reason); /* cleared when it left PENDING */
    store_jobs_free(j, 1);
}

/* The next admission goes to the team with the lowest dominant share, not to the oldest job. */
static void test_fair_share_across_teams(void **state)
{
    fixture *f = *state;
    make_team(f, "a", 4, 0);
    make_team(f, "b", 4, 0);
    assert_non_null(f->be = fake_backend_new(100));
    fake_set_gpus(f->be, "a100", 2);
    char a[3][27], b1[27];
    submit_team(f, "a0", "a", 0, 1, 1, a[0]);
    submit_team(f, "a1", "a", 0, 1, 1, a[1]);
    submit_team(f, "a2", "a", 0, 1, 1, a[2]);
    submit_team(f, "b1", "b", 0, 1, 1, b1);
    start_fake(f, 100);
    expect_call(f, "launch", a[0], "1", 1);
    expect_call(f, "launch", b1, "1", 1); /* b's share 0 < a's 1/8, though a1 is older */
    json_t *pr = wait_pending_reason(f, a[1], "NoCapacity");
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")),
                           "the cluster has 0 free a100; this job needs 1"));
    json_decref(pr);
    assert_int_equal(count_call(f, "launch", a[1], "1"), 0);
    /* a2 is deeper in a's line: it has no reason of its own. */
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->st, a[2], &j), TY_OK);
    assert_null(j->pending_reason);
    store_jobs_free(j, 1);
}

/*
 * After a restart, usage is rebuilt from what runs before anything is admitted: a team at its
 * quota with a job running admits nothing more, even though the backend's GPUs look free.
 */
static void test_restart_rebuilds_usage(void **state)
{
    fixture *f = *state;
    make_team(f, "vision", 2, 0);
    char kept[27], next[27];
    submit_team(f, "kept", "vision", 0, 1, 2, kept);
    store_running(f, kept, 1);
    submit_team(f, "next", "vision", 5, 1, 2, next);
    assert_non_null(f->be = fake_backend_new(100));
    fake_set_gpus(f->be, "a100", 8);
    fake_adopt_next(f->be, kept, 1);
    start_fake(f, 100);
    expect_call(f, "recover", kept, "adopted", 1);
    json_t *pr = wait_pending_reason(f, next, "QuotaExceeded");
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")),
                           "team vision uses 2 of 2 a100"));
    json_decref(pr);
    assert_int_equal(count_call(f, "reserve", next, NULL), 0);
    /* Its end gives the quota back. */
    assert_int_equal(fake_emit_running(f->be, kept, -1, "n1"), 0);
    assert_int_equal(fake_emit_exit(f->be, kept, -1, 0, 0, NULL), 0);
    expect_done(f, kept, JOB_SUCCEEDED);
    expect_call(f, "launch", next, "1", 1);
}

/*
 * Reclaim: a team within its nominal quota takes back what another team borrowed. The
 * borrower's most recent job is stopped gracefully, its attempt ends Preempted naming the job
 * it made room for, and it goes back to PENDING without spending a restart; it runs again
 * (a new attempt, restarts unchanged) once GPUs come free.
 */
static void test_reclaim_preempts_borrower(void **state)
{
    fixture *f = *state;
    make_team(f, "vision", 4, 4);
    make_team(f, "nlp", 4, 0);
    assert_non_null(f->be = fake_backend_new(100));
    fake_set_gpus(f->be, "a100", 8);
    char v[4][27], n1[27];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "v%d", i);
        submit_team(f, name, "vision", 0, 1, 2, v[i]);
    }
    start_fake(f, 100);
    for (int i = 0; i < 4; i++)
        expect_call(f, "launch", v[i], "1", 1); /* v2 and v3 borrow nlp's idle quota */
    submit_team(f, "n1", "nlp", 0, 1, 2, n1);
    expect_call(f, "stop", v[3], "soft", 1); /* the most recent borrower's job */
    expect_call(f, "launch", n1, "1", 1);
    store_job *j = wait_state(f, v[3], 1u << JOB_PENDING);
    assert_int_equal(j->restarts, 0);
    assert_int_equal(j->attempt, 1);
    assert_int_equal(j->preempted, 1);
    store_jobs_free(j, 1);
    json_t *rec = wait_record(f, v[3], "reason", "Preempted");
    assert_non_null(strstr(json_string_value(json_object_get(rec, "message")), n1));
    assert_string_equal(json_string_value(json_object_get(rec, "state")), "stopped");
    json_decref(rec);
    json_t *pr = wait_pending_reason(f, v[3], "Preempted");
    json_decref(pr);
    assert_int_equal(count_call(f, "stop", v[2], "soft"), 0);
    /* A vision job ends: the preempted one runs again, a new attempt, no restart spent. */
    assert_int_equal(fake_emit_exit(f->be, v[0], -1, 0, 0, NULL), 0);
    expect_done(f, v[0], JOB_SUCCEEDED);
    expect_call(f, "launch", v[3], "2", 1);
    j = wait_state(f, v[3], 1u << JOB_STARTING | 1u << JOB_RUNNING);
    assert_int_equal(j->restarts, 0);
    assert_int_equal(j->preempted, 0);
    store_jobs_free(j, 1);
    assert_int_equal(job_restarts(f, v[3]), 0);
}

/*
 * Within a team whose switch is on, a job of higher priority that does not fit the team's quota
 * preempts the team's running job of lower priority; with the switch off it waits.
 */
static void test_priority_preemption_within_team(void **state)
{
    fixture *f = *state;
    store_team_res res = {.resource = "gpu/a100", .quota = 2, .borrowing_limit = -1};
    store_team t = {.name = "vision", .weight = 1, .has_quota = 1, .priority_preemption = 1,
                    .res = &res, .nres = 1};
    assert_int_equal(store_team_create(f->st, &t), TY_OK);
    make_team(f, "nlp", 2, 0); /* switch off */
    assert_non_null(f->be = fake_backend_new(100));
    fake_set_gpus(f->be, "a100", 8);
    char low[27], high[27], nlow[27], nhigh[27];
    submit_team(f, "low", "vision", 0, 1, 2, low);
    submit_team(f, "nlow", "nlp", 0, 1, 2, nlow);
    start_fake(f, 100);
    expect_call(f, "launch", low, "1", 1);
    expect_call(f, "launch", nlow, "1", 1);
    submit_team(f, "high", "vision", 10, 1, 2, high);
    submit_team(f, "nhigh", "nlp", 10, 1, 2, nhigh);
    expect_call(f, "stop", low, "soft", 1);
    expect_call(f, "launch", high, "1", 1);
    json_t *rec = wait_record(f, low, "reason", "Preempted");
    const char *msg = json_string_value(json_object_get(rec, "message"));
    assert_non_null(strstr(msg, high));
    assert_non_null(strstr(msg, "higher priority"));
    json_decref(rec);
    assert_int_equal(job_restarts(f, low), 0);
    json_decref(wait_pending_reason(f, low, "Preempted"));
    /* nlp's switch is off: its high-priority job waits on its quota. */
    json_decref(wait_pending_reason(f, nhigh, "QuotaExceeded"));
    assert_int_equal(count_call(f, "stop", nlow, "soft"), 0);
}

/* The attempt record as readers see it: its members in their order, nulls for what is not
 * known, the escapes, and each node of the ranks once under placement. */
static void test_record_text(void **state)
{
    (void)state;
    srank ranks[4] = {
        {.state = RANK_FAILED, .exit_code = 3, .started_ms = 1700000000000, .ended_ms =
         1700000001500, .pod = "p-0", .node = "n\"1"},
        {.state = RANK_RUNNING, .exit_code = -1, .pid = 42, .node = "n2"},
        {.state = RANK_KILLED, .exit_code = -1, .signal = 9, .node = "n\"1"},
        {.state = RANK_PENDING, .exit_code = -1},
    };
    sjob j = {.world = 4, .ranks = ranks, .astate = ATT_FAILED, .a_started_ms = 1700000000000,
              .a_reason = "Failed"};
    snprintf(j.a_message, sizeof j.a_message, "rank 0 exited with code 3\n\xff");
    char *text = sched_record_text(&j, 2);
    assert_non_null(text);
    assert_string_equal(
        text,
        "{\"attempt\":2,\"state\":\"failed\",\"started_at\":\"2023-11-14T22:13:20.000Z\","
        "\"ended_at\":null,\"reason\":\"Failed\",\"message\":\"rank 0 exited with code "
        "3\\n\\uFFFD\",\"ranks\":[{\"rank\":0,\"state\":\"failed\",\"exit_code\":3,"
        "\"signal\":null,\"started_at\":\"2023-11-14T22:13:20.000Z\",\"ended_at\":"
        "\"2023-11-14T22:13:21.500Z\",\"pod\":\"p-0\",\"node\":\"n\\\"1\"},{\"rank\":1,"
        "\"state\":\"running\",\"exit_code\":null,\"signal\":null,\"started_at\":null,"
        "\"ended_at\":null,\"pid\":42,\"node\":\"n2\"},{\"rank\":2,\"state\":\"killed\","
        "\"exit_code\":null,\"signal\":9,\"started_at\":null,\"ended_at\":null,\"node\":"
        "\"n\\\"1\"},{\"rank\":3,\"state\":\"pending\",\"exit_code\":null,\"signal\":"
        "null,\"started_at\":null,\"ended_at\":null}]}");
    free(text);

    j.placement = json_pack("{s:s, s:s, s:[{s:s, s:i}]}", "zone", "us-west-2a", "capacity",
                            "spot", "waiting_for", "group", "g", "nodes", 2);
    j.a_reason = NULL;
    j.a_message[0] = '\0';
    text = sched_record_text(&j, 1);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"reason\":null,\"message\":\"\","));
    assert_non_null(strstr(text, "null}],\"placement\":{\"zone\":\"us-west-2a\",\"capacity\":"
                                 "\"spot\",\"waiting_for\":[{\"group\":\"g\",\"nodes\":2}],"
                                 "\"nodes\":[\"n\\\"1\",\"n2\"]}}"));
    json_t *back = json_loads(text, 0, NULL);
    assert_non_null(back);
    json_decref(back);
    free(text);
    json_decref(j.placement);
}

int main(void)
{
    ty_log_set_level(TY_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_text),
        cmocka_unit_test_setup_teardown(test_priority_then_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_backfill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admission_across_queues, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_costs_no_rounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_round_keeps_each_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_never_fits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_75_unasked_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_then_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_running_when_ranks_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_news_written_together, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_pending_reason_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_launch_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_quarantine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_disruption_spends_no_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_store_failure_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_conflict_with_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_stop_failure_asked_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_capacity_wakes_waiting_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_adopt_on_recover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_stop_leaves_gang_to_adopt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_job_token_per_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_secrets_reach_the_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_secrets_unopened_fail_the_launch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sweep_parallelism, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_within_queue_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_and_borrowing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fair_share_across_teams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_rebuilds_usage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_preempts_borrower, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority_preemption_within_team, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
