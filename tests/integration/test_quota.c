/*
 * test_quota.c - admission across teams with the real server on the local backend, with four
 * GPUs of type "local" (--local-gpus 4; none need exist: the backend hands out indices in
 * CUDA_VISIBLE_DEVICES). Two teams with a quota of 2 GPUs each, one allowed to borrow 2:
 * the borrower runs 4 jobs on the other team's idle quota, its fifth waits QuotaExceeded with
 * its position; the other team's job reclaims a GPU: the borrower's most recent job is
 * stopped gracefully (its script checkpoints on SIGTERM and exits 75), its attempt ends
 * Preempted naming the job that took its place, and it waits again without spending a
 * restart. A server restart in the middle rebuilds usage from what runs before anything is
 * admitted: nothing more is admitted, nothing finished comes back. Once GPUs come free, the
 * preempted job runs again: a new attempt, restarts unchanged. Every PENDING job says where it
 * stands: the heads of the lines as the scheduler wrote it, the jobs behind them Queued, with
 * positions counted from their head's that follow the jobs as they come and go.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

#define WAIT_MS 60000

static ty_server *g_srv;
static ty_client *g_admin;

static int setup(void **state)
{
    (void)state;
    char err[1024];
    /* Unsandboxed: the ranks write their checkpoints where the test reads them. */
    static const char *const args[] = {"--local-slots", "16", "--local-gpus", "4",
                                       "--local-sandbox=off", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_admin);
    g_admin = NULL;
    ty_server_free(g_srv);
    g_srv = NULL;
    return 0;
}

static ty_http_resp *call(const char *token, const char *method, const char *path,
                          const char *body, long status)
{
    ty_http_req req = {.method = method, .path = path, .token = token, .body = body};
    ty_http_resp *r = ty_reqx(g_admin, &req);
    if (r->status != status)
        fail_msg("%s %s: %ld, want %ld: %.300s", method, path, r->status, status, r->body);
    return r;
}

static void make_token(const char *name, const char *team, char tok[128])
{
    char body[256];
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"scopes\":[\"submit\",\"read\"],\"team\":\"%s\"}",
             name, team);
    ty_http_resp *r = call(NULL, "POST", "/v1/tokens", body, 201);
    snprintf(tok, 128, "%s", json_string_value(json_object_get(r->json, "token")));
    ty_resp_destroy(r);
}

/* Submits a job of one rank with one GPU that runs until SIGTERM, then writes
 * <dir>/<name>.ckpt (its checkpoint) and exits 75. */
static void submit(const char *token, const char *name, char id[32])
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"command\":[\"sh\",\"-c\",\"trap 'echo $CUDA_VISIBLE_DEVICES > "
             "%s/%s.ckpt; exit 75' TERM; while :; do sleep 0.05; done\"],"
             "\"workers\":{\"count\":1},\"resources\":{\"gpu\":{\"type\":\"local\",\"count\":1},\"cpu\":\"1\","
             "\"memory\":\"64Mi\"}}",
             name, ty_server_dir(g_srv), name);
    ty_http_resp *r = call(token, "POST", "/v1/jobs", body, 201);
    snprintf(id, 32, "%s", json_string_value(json_object_get(r->json, "id")));
    ty_resp_destroy(r);
}

/* The job (new) once `field` of it equals want (state or pending_reason.reason). */
static ty_http_resp *wait_job(const char *id, const char *state, const char *reason)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int waited = 0;; waited += 50) {
        ty_http_resp *r = call(NULL, "GET", path, NULL, 200);
        const char *st = json_string_value(json_object_get(r->json, "state"));
        const char *re = json_string_value(
            json_object_get(json_object_get(r->json, "pending_reason"), "reason"));
        if ((!state || (st && strcmp(st, state) == 0)) &&
            (!reason || (re && strcmp(re, reason) == 0)))
            return r;
        if (waited >= WAIT_MS)
            fail_msg("job %s never was %s/%s: %.600s", id, state ? state : "-",
                     reason ? reason : "-", r->body);
        ty_resp_destroy(r);
        ty_sleep_ms(50);
    }
}

static void expect_job(const char *id, const char *state, const char *reason)
{
    ty_resp_destroy(wait_job(id, state, reason));
}

static int64_t jint(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* Waits until job id is in `state` with an attempt number of at least `attempt`. */
static void expect_attempt(const char *id, const char *state, int64_t attempt)
{
    for (int waited = 0;; waited += 50) {
        ty_http_resp *r = wait_job(id, state, NULL);
        int ok = jint(r->json, "attempt") >= attempt;
        if (!ok && waited >= WAIT_MS)
            fail_msg("job %s never was %s in attempt %lld: %.600s", id, state,
                     (long long)attempt, r->body);
        ty_resp_destroy(r);
        if (ok)
            return;
        ty_sleep_ms(50);
    }
}

/* The jobs of the server in state `state`. */
static size_t count_state(const char *state)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs?state=%s", state);
    ty_http_resp *r = call(NULL, "GET", path, NULL, 200);
    size_t n = json_array_size(json_object_get(r->json, "jobs"));
    ty_resp_destroy(r);
    return n;
}

static void test_borrow_reclaim_restart(void **state)
{
    (void)state;
    char vis[128], nlp[128], v[5][32], n1[32], err[512];
    char path[256];
    ty_resp_destroy(call(NULL, "POST", "/v1/teams",
                         "{\"name\":\"vision\",\"quota\":{\"gpu\":{\"local\":2},\"cpu\":\"64\","
                         "\"memory\":\"64Gi\"},\"borrowing_limit\":{\"gpu\":{\"local\":2}}}",
                         201));
    ty_resp_destroy(call(NULL, "POST", "/v1/teams",
                         "{\"name\":\"nlp\",\"quota\":{\"gpu\":{\"local\":2},\"cpu\":\"64\","
                         "\"memory\":\"64Gi\"}}",
                         201));
    make_token("vision-ci", "vision", vis);
    make_token("nlp-ci", "nlp", nlp);

    /* Vision runs on its quota, then on nlp's idle one, up to its borrowing limit. */
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "v%d", i);
        submit(vis, name, v[i]);
        if (i < 4)
            expect_job(v[i], "RUNNING", NULL);
    }
    ty_http_resp *r = wait_job(v[4], "PENDING", "QuotaExceeded");
    json_t *pr = json_object_get(r->json, "pending_reason");
    assert_int_equal(jint(pr, "position"), 1);
    assert_int_equal(jint(pr, "team_position"), 1);
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")),
                           "team vision uses 4 of 2 local and borrows 2 of 2; this job needs 1"));
    ty_resp_destroy(r);

    /* nlp's job takes its quota back: v3, the most recent borrower, is preempted. */
    submit(nlp, "n1", n1);
    expect_job(n1, "RUNNING", NULL);
    r = wait_job(v[3], "PENDING", NULL);
    assert_int_equal(jint(r->json, "restarts"), 0);
    assert_int_equal(jint(r->json, "attempt"), 1);
    json_t *att = json_object_get(r->json, "current_attempt");
    assert_string_equal(json_string_value(json_object_get(att, "reason")), "Preempted");
    assert_non_null(strstr(json_string_value(json_object_get(att, "message")), n1));
    ty_resp_destroy(r);
    char ckpt[512];
    snprintf(ckpt, sizeof ckpt, "%s/v3.ckpt", ty_server_dir(g_srv));
    struct stat sb;
    assert_int_equal(stat(ckpt, &sb), 0); /* it checkpointed on SIGTERM */
    /* v3 is its line's head again (it is older than v4), and says why it waits. */
    r = wait_job(v[3], "PENDING", "Preempted");
    pr = json_object_get(r->json, "pending_reason");
    assert_int_equal(jint(pr, "position"), 1);
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")), "QuotaExceeded") ||
                    strstr(json_string_value(json_object_get(pr, "message")), "team vision"));
    ty_resp_destroy(r);
    /* v4 waits behind v3: Queued, one job ahead of it, positions counted from v3's. */
    r = wait_job(v[4], "PENDING", "Queued");
    pr = json_object_get(r->json, "pending_reason");
    assert_int_equal(jint(pr, "position"), 2);
    assert_int_equal(jint(pr, "team_position"), 2);
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")),
                           "1 job ahead of it in team vision's queue default"));
    assert_non_null(strstr(json_string_value(json_object_get(pr, "message")), v[3]));
    ty_resp_destroy(r);

    /* The queue, in admission order: v3 heads vision's line, v4 waits behind it. */
    r = call(NULL, "GET", "/v1/queue", NULL, 200);
    json_t *jobs = json_object_get(r->json, "jobs");
    assert_int_equal(json_array_size(jobs), 2);
    assert_string_equal(ty_json_str(json_array_get(jobs, 0), "id"), v[3]);
    assert_int_equal(jint(json_array_get(jobs, 0), "line_position"), 1);
    assert_int_equal(jint(json_object_get(json_array_get(jobs, 0), "pending_reason"), "position"),
                     1);
    assert_string_equal(ty_json_str(json_array_get(jobs, 1), "id"), v[4]);
    assert_int_equal(jint(json_array_get(jobs, 1), "line_position"), 2);
    pr = json_object_get(json_array_get(jobs, 1), "pending_reason");
    assert_string_equal(ty_json_str(pr, "reason"), "Queued");
    assert_int_equal(jint(pr, "position"), 2);
    ty_resp_destroy(r);
    r = call(nlp, "GET", "/v1/queue", NULL, 200); /* nlp's own queue: empty */
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 0);
    ty_resp_destroy(r);
    ty_resp_destroy(call(nlp, "GET", "/v1/queue?team=vision", NULL, 404));
    r = call(vis, "GET", "/v1/queue?team=vision", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 2);
    ty_resp_destroy(r);
    /* /metrics: what vision uses and borrows, the reclaim. */
    r = call(NULL, "GET", "/metrics", NULL, 200);
    assert_non_null(strstr(r->body, "trainyard_team_quota{team=\"vision\",resource=\"gpu/local\"} 2\n"));
    assert_non_null(strstr(r->body, "trainyard_team_usage{team=\"vision\",resource=\"gpu/local\"} 3\n"));
    assert_non_null(strstr(r->body, "trainyard_team_borrowed{team=\"vision\",resource=\"gpu/local\"} 1\n"));
    assert_non_null(strstr(r->body, "trainyard_team_pending_jobs{team=\"vision\"} 2\n"));
    assert_non_null(strstr(r->body, "trainyard_preemptions_total{reason=\"reclaim\"} 1\n"));
    assert_non_null(strstr(r->body, "trainyard_admission_wait_seconds_count "));
    ty_resp_destroy(r);
    /* The CLI shows the same. */
    char server[96];
    snprintf(server, sizeof server, "TRAINYARD_SERVER=%s", ty_server_url(g_srv));
    const char *const env[] = {server, "TRAINYARD_TOKEN=" TY_TEST_ADMIN_TOKEN, NULL};
    const char *const qargs[] = {"queue", "vision", NULL};
    int ws = 0;
    char *out = NULL, *errout = NULL;
    if (ty_run(qargs, env, 20000, &ws, &out, &errout, err, sizeof err))
        fail_msg("%s", err);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("trainyard queue: %s", errout);
    assert_non_null(strstr(out, "POSITION"));
    assert_non_null(strstr(out, v[3]));
    assert_non_null(strstr(out, "Preempted"));
    assert_non_null(strstr(out, v[4]));
    assert_non_null(strstr(out, "Queued"));
    free(out);
    free(errout);

    /* The server dies and starts again: usage is rebuilt before anything is admitted (the
     * local backend cannot adopt: what ran restarts, spending no restart). */
    ty_server_kill(g_srv);
    if (ty_server_restart(g_srv, err, sizeof err))
        fail_msg("restart: %s", err);
    ty_client_free(g_admin); /* the new process listens on another port */
    assert_non_null(g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN));
    /* RUNNING in a second attempt: until recovery has run, the store still says RUNNING of
     * the first. */
    for (int i = 0; i < 3; i++)
        expect_attempt(v[i], "RUNNING", 2);
    expect_attempt(n1, "RUNNING", 2);
    r = wait_job(v[3], "PENDING", "Preempted");
    assert_int_equal(jint(r->json, "restarts"), 0);
    ty_resp_destroy(r);
    assert_int_equal(count_state("RUNNING") + count_state("STARTING") +
                         count_state("ADMITTED") + count_state("RESTARTING"),
                     4);

    /* n1 ends: the preempted job runs again, a new attempt, no restart spent. */
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", n1);
    ty_resp_destroy(call(nlp, "POST", path, NULL, 200));
    expect_job(n1, "CANCELLED", NULL);
    r = wait_job(v[3], "RUNNING", NULL);
    assert_int_equal(jint(r->json, "restarts"), 0);
    assert_true(jint(r->json, "attempt") >= 2);
    assert_true(json_is_null(json_object_get(r->json, "pending_reason")));
    ty_resp_destroy(r);
    expect_job(v[4], "PENDING", "QuotaExceeded");
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%s:cancel", v[i]);
        ty_resp_destroy(call(NULL, "POST", path, NULL, 200));
    }
    for (int i = 0; i < 5; i++)
        expect_job(v[i], "CANCELLED", NULL);
}

/* Polls job id until its pending_reason is `reason` at (position, team_position). */
static void expect_place(const char *id, const char *reason, int64_t pos, int64_t tpos)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int waited = 0;; waited += 50) {
        ty_http_resp *r = call(NULL, "GET", path, NULL, 200);
        json_t *pr = json_object_get(r->json, "pending_reason");
        const char *re = ty_json_str(pr, "reason");
        int ok = re && strcmp(re, reason) == 0 && jint(pr, "position") == pos &&
                 jint(pr, "team_position") == tpos;
        if (ok) {
            ty_resp_destroy(r);
            return;
        }
        if (waited >= WAIT_MS)
            fail_msg("job %s never was %s at %lld/%lld: %.600s", id, reason, (long long)pos,
                     (long long)tpos, r->body);
        ty_resp_destroy(r);
        ty_sleep_ms(50);
    }
}

/* The pending_reason of job id in a list (new reference), failing when it is not listed. */
static json_t *listed_reason(const json_t *jobs, const char *id)
{
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        if (strcmp(ty_json_str(j, "id"), id) == 0)
            return json_incref(json_object_get(j, "pending_reason"));
    }
    fail_msg("job %s is not listed", id);
    return NULL;
}

/*
 * Every PENDING job says where it stands, and the positions follow the jobs as they come and
 * go: a team with a quota of one GPU runs one job; the four behind it wait, the first as the
 * head of the team's line (QuotaExceeded), the others Queued behind it, at positions 2, 3, 4.
 * Cancelling one ahead moves those behind it up; cancelling the head makes the next one the
 * head; a job of higher priority goes ahead of the jobs already waiting.
 */
static void test_positions_as_jobs_come_and_go(void **state)
{
    (void)state;
    char tok[128], s[6][32], path[256];
    ty_resp_destroy(call(NULL, "POST", "/v1/teams",
                         "{\"name\":\"small\",\"quota\":{\"gpu\":{\"local\":1},\"cpu\":\"64\","
                         "\"memory\":\"64Gi\"}}",
                         201));
    make_token("small-ci", "small", tok);
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        submit(tok, name, s[i]);
        if (i == 0)
            expect_job(s[0], "RUNNING", NULL);
    }
    expect_place(s[1], "QuotaExceeded", 1, 1);
    for (int i = 2; i < 5; i++)
        expect_place(s[i], "Queued", i, i);
    snprintf(path, sizeof path, "/v1/jobs/%s", s[4]);
    ty_http_resp *r = call(tok, "GET", path, NULL, 200);
    json_t *pr = json_object_get(r->json, "pending_reason");
    const char *msg = ty_json_str(pr, "message");
    assert_non_null(strstr(msg, "3 jobs ahead of it in team small's queue default; the first of "
                                "them, job "));
    assert_non_null(strstr(msg, s[1]));
    assert_non_null(strstr(msg, "waits: QuotaExceeded: team small uses 1 of 1 local"));
    ty_resp_destroy(r);

    /* The same in a list of jobs and in the queue. */
    r = call(tok, "GET", "/v1/jobs?state=PENDING", NULL, 200);
    for (int i = 1; i < 5; i++) {
        json_t *lr = listed_reason(json_object_get(r->json, "jobs"), s[i]);
        assert_string_equal(ty_json_str(lr, "reason"), i == 1 ? "QuotaExceeded" : "Queued");
        assert_int_equal(jint(lr, "position"), i);
        assert_int_equal(jint(lr, "team_position"), i);
        json_decref(lr);
    }
    ty_resp_destroy(r);
    r = call(tok, "GET", "/v1/queue", NULL, 200);
    json_t *jobs = json_object_get(r->json, "jobs");
    assert_int_equal(json_array_size(jobs), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *q = json_array_get(jobs, i);
        assert_string_equal(ty_json_str(q, "id"), s[i + 1]);
        assert_int_equal(jint(q, "line_position"), (int64_t)i + 1);
        assert_int_equal(jint(json_object_get(q, "pending_reason"), "position"), (int64_t)i + 1);
        assert_string_equal(ty_json_str(json_object_get(q, "pending_reason"), "reason"),
                            i == 0 ? "QuotaExceeded" : "Queued");
    }
    ty_resp_destroy(r);

    /* One ahead goes: those behind it move up at once. */
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", s[2]);
    ty_resp_destroy(call(tok, "POST", path, NULL, 200));
    expect_place(s[3], "Queued", 2, 2);
    expect_place(s[4], "Queued", 3, 3);
    snprintf(path, sizeof path, "/v1/jobs/%s", s[2]);
    r = call(tok, "GET", path, NULL, 200);
    assert_true(json_is_null(json_object_get(r->json, "pending_reason"))); /* not PENDING */
    ty_resp_destroy(r);

    /* The head goes: the next one heads the line, the scheduler says why it waits. */
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", s[1]);
    ty_resp_destroy(call(tok, "POST", path, NULL, 200));
    expect_place(s[3], "QuotaExceeded", 1, 1);
    expect_place(s[4], "Queued", 2, 2);

    /* A job of higher priority goes ahead of those waiting. */
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"s5\",\"priority\":10,\"command\":[\"true\"],\"workers\":{\"count\":1},"
             "\"resources\":{\"gpu\":{\"type\":\"local\",\"count\":1}}}");
    r = call(tok, "POST", "/v1/jobs", body, 201);
    snprintf(s[5], sizeof s[5], "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
    expect_place(s[5], "QuotaExceeded", 1, 1);
    expect_place(s[3], "Queued", 2, 2);
    expect_place(s[4], "Queued", 3, 3);

    for (int i = 5; i >= 0; i--) { /* the waiting ones first: none runs before it goes */
        if (i == 1 || i == 2)
            continue;
        snprintf(path, sizeof path, "/v1/jobs/%s:cancel", s[i]);
        ty_resp_destroy(call(tok, "POST", path, NULL, 200));
    }
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_borrow_reclaim_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_positions_as_jobs_come_and_go, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
