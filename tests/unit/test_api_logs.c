/*
 * test_api_logs.c - api/logs.c: GET /v1/jobs/{id}/logs against a real store:
 * the query and its errors, the 404s, the 503 of a server without a
 * scheduler, and logs read through the real scheduler from the local backend,
 * whose ranks are `sh -c` processes (what a rank wrote to stdout and stderr,
 * by rank and attempt, followed until the rank ends, from its last N lines
 * with tail=N). Every response is checked against openapi.yaml by the fixture.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/unit/test_api_fixture.h"

#define TWO_RANKS                                                                                  \
    "{\"name\":\"logs\",\"image\":\"img\",\"command\":[\"run\"],\"workers\":{\"count\":2}}"

#define RECORD_1                                                                                   \
    "{\"attempt\":1,\"state\":\"starting\",\"started_at\":\"2026-11-22T10:00:00.123Z\","           \
    "\"ended_at\":null,\"reason\":null,\"message\":\"\",\"ranks\":[]}"

/* Submits a job with two ranks; with started, its first attempt is starting. */
static void submit(fixture *f, int started, char id[STORE_ID_LEN + 1])
{
    api_resp resp;
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = TWO_RANKS}, &resp);
    assert_int_equal(resp.status, 201);
    snprintf(id, STORE_ID_LEN + 1, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);
    if (started) {
        fx_sched_write(f, id, JOB_PENDING, JOB_ADMITTED, 0, NULL, -1);
        fx_sched_write(f, id, JOB_ADMITTED, JOB_STARTING, 1, RECORD_1, -1);
    }
}

static json_t *logs(fixture *f, const char *id, const api_kv *q, size_t nq, api_resp *resp)
{
    return fx_call(f, "GET", "/v1/jobs/{id}/logs", &(fx_req){.id = id, .query = q, .nquery = nq},
                   resp);
}

/* The errors' paths, comma-separated, in order. */
static void error_paths(const json_t *problem, char *out, size_t len)
{
    size_t i, used = 0;
    json_t *e;
    out[0] = '\0';
    json_array_foreach(json_object_get(problem, "errors"), i, e)
    {
        int n = snprintf(out + used, len - used, "%s%s", i ? "," : "",
                         json_string_value(json_object_get(e, "path")));
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
    }
}

static void test_bad_queries(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    submit(f, 1, id);
    static const struct {
        api_kv q[3];
        size_t nq;
        const char *paths; /* every error, in order */
        const char *message;
    } cases[] = {
        {{{"rank", "-1"}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", "one"}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", ""}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", " 1"}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", "1.0"}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", "99999999999999999999"}}, 1, "query.rank", "must be an integer >= 0"},
        {{{"rank", "2"}}, 1, "query.rank", "must be less than 2: the job has 2 ranks"},
        {{{"rank", "4096"}}, 1, "query.rank", "must be less than 2"},
        {{{"rank", "0"}, {"rank", "1"}}, 2, "query.rank", "must be given once"},
        {{{"attempt", "0"}}, 1, "query.attempt", "must be an integer >= 1"},
        {{{"attempt", "+1"}}, 1, "query.attempt", "must be an integer >= 1"},
        {{{"attempt", "2"}}, 1, "query.attempt", "must be at most 1, the job's current attempt"},
        {{{"attempt", "1"}, {"attempt", "1"}}, 2, "query.attempt", "must be given once"},
        {{{"follow", "yes"}}, 1, "query.follow", "must be true or false"},
        {{{"follow", "1"}}, 1, "query.follow", "must be true or false"},
        {{{"follow", "TRUE"}}, 1, "query.follow", "must be true or false"},
        {{{"follow", ""}}, 1, "query.follow", "must be true or false"},
        {{{"follow", "true"}, {"follow", "false"}}, 2, "query.follow", "must be given once"},
        {{{"tail", "0"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "100001"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "-1"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "ten"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", ""}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "1.5"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "99999999999999999999"}}, 1, "query.tail", "must be an integer from 1 to 100000"},
        {{{"tail", "1"}, {"tail", "2"}}, 2, "query.tail", "must be given once"},
        {{{"since", "10"}}, 1, "query.since", "unknown query parameter"},
        /* Every bad parameter is listed. */
        {{{"rank", "7"}, {"attempt", "x"}, {"since", "1"}},
         3,
         "query.attempt,query.since,query.rank",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        json_t *p = logs(f, id, cases[i].q, cases[i].nq, &resp);
        fx_expect_problem(&resp, p, 400, "invalid-query");
        char paths[256];
        error_paths(p, paths, sizeof paths);
        if (strcmp(paths, cases[i].paths) != 0)
            fail_msg("case %zu: paths %s, want %s", i, paths, cases[i].paths);
        const char *msg = json_string_value(
            json_object_get(json_array_get(json_object_get(p, "errors"), 0), "message"));
        if (cases[i].message && (!msg || !strstr(msg, cases[i].message)))
            fail_msg("case %zu: message '%s' lacks '%s'", i, msg ? msg : "", cases[i].message);
        json_decref(p);
        api_resp_free(&resp);
    }
}

static void test_unknown_job(void **state)
{
    fixture *f = *state;
    static const char *const ids[] = {"00000000000000000000000000", "short",
                                      "UPPERCASE0000000000000000X", "..%2F..%2Fetc%2Fpasswd"};
    api_kv q[] = {{"rank", "0"}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        api_resp resp;
        json_t *p = logs(f, ids[i], q, 1, &resp);
        fx_expect_problem(&resp, p, 404, "job-not-found");
        json_decref(p);
        api_resp_free(&resp);
    }
}

/* Before its first attempt a job has no log: a 404 that says so, not a 400. */
static void test_no_attempt_yet(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    submit(f, 0, id);
    static const struct {
        api_kv q[2];
        size_t nq;
    } cases[] = {
        {{{0}}, 0},
        {{{"rank", "1"}}, 1},
        {{{"attempt", "1"}, {"follow", "true"}}, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        json_t *p = logs(f, id, cases[i].q, cases[i].nq, &resp);
        fx_expect_problem(&resp, p, 404, "log-not-found");
        assert_string_equal(json_string_value(json_object_get(p, "detail")),
                            "no attempt of this job has started yet");
        json_decref(p);
        api_resp_free(&resp);
    }
    /* The rank is still checked against the job. */
    api_kv q[] = {{"rank", "2"}};
    api_resp resp;
    json_t *p = logs(f, id, q, 1, &resp);
    fx_expect_problem(&resp, p, 400, "invalid-query");
    json_decref(p);
    api_resp_free(&resp);
}

/* A server without a scheduler checks the request, then cannot serve logs. */
static void test_no_scheduler(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    submit(f, 1, id);
    assert_null(f->ctx.sched);
    static const struct {
        api_kv q[3];
        size_t nq;
    } cases[] = {
        {{{0}}, 0},
        {{{"rank", "1"}, {"attempt", "1"}, {"follow", "true"}}, 3},
        {{{"follow", "false"}}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_resp resp;
        json_t *p = logs(f, id, cases[i].q, cases[i].nq, &resp);
        fx_expect_problem(&resp, p, 503, "unavailable");
        assert_non_null(strstr(json_string_value(json_object_get(p, "detail")), "no scheduler"));
        assert_false(f->streamed);
        json_decref(p);
        api_resp_free(&resp);
    }
}

/* GET .../logs expecting a 200; returns the body (static, so one at a time). */
static const char *read_log(fixture *f, const char *id, const api_kv *q, size_t nq)
{
    static char text[4096];
    api_resp resp;
    json_t *j = logs(f, id, q, nq, &resp);
    if (resp.status != 200)
        fail_msg("logs: %u %.300s", resp.status, resp.body ? resp.body : "");
    assert_null(j);
    assert_true(f->streamed);
    assert_false(f->stream_error);
    assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
    snprintf(text, sizeof text, "%.*s", (int)resp.body_len, resp.body ? resp.body : "");
    api_resp_free(&resp);
    return text;
}

/* Creates the file at path: a rank waiting for it goes on. */
static void touch(const char *path)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
}

typedef struct later {
    char path[160];
} later;

/* Lets a waiting rank go on a little later, most often while a client follows its log. */
static void *touch_later(void *arg)
{
    later *l = arg;
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, NULL); /* either order works: the log holds the same text */
    touch(l->path);
    return NULL;
}

/* GET .../logs with follow=true on that rank while another thread lets it finish. */
static const char *follow_while_released(fixture *f, const char *id, const char *rank,
                                         const char *go)
{
    pthread_t t;
    later l;
    snprintf(l.path, sizeof l.path, "%s", go);
    assert_int_equal(pthread_create(&t, NULL, touch_later, &l), 0);
    api_kv q[] = {{"follow", "true"}, {"rank", rank}};
    const char *text = read_log(f, id, q, 2);
    pthread_join(t, NULL);
    return text;
}

/* A rank that wrote nothing has an empty log, while it runs and after it ended. */
static void test_empty_log(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_sched_start(f);
    fx_submit_sh(f, NULL, 1, 0, "true", id);
    fx_wait_state(f, id, JOB_SUCCEEDED);
    assert_string_equal(read_log(f, id, NULL, 0), "");
    api_kv follow[] = {{"follow", "true"}};
    assert_string_equal(read_log(f, id, follow, 1), "");
}

/* stdout and stderr of each rank of each attempt: rank 0 of attempt 1 fails once. */
static void test_reads_by_rank_and_attempt(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_sched_start(f);
    /* Rank 0 ends only after rank 1 wrote (so a failure cannot stop rank 1 first). */
    fx_submit_sh(f, NULL, 2, 1,
                 "a=$TRAINYARD_ATTEMPT\n"
                 "if [ \"$RANK\" = 1 ]; then\n"
                 "  echo \"rank 1 of attempt $a, on stderr\" >&2\n"
                 "  touch \"rank1-done-$a\"\n"
                 "  exit 0\n"
                 "fi\n"
                 "printf 'line 1 of attempt %s\\nline 2\\n' \"$a\"\n"
                 "while [ ! -e \"rank1-done-$a\" ]; do sleep 0.02; done\n"
                 "[ \"$a\" -ge 2 ] || exit 3\n",
                 id);
    fx_wait_state(f, id, JOB_SUCCEEDED);

    /* By default: rank 0 of the current attempt. */
    assert_string_equal(read_log(f, id, NULL, 0), "line 1 of attempt 2\nline 2\n");
    api_kv a1[] = {{"attempt", "1"}};
    assert_string_equal(read_log(f, id, a1, 1), "line 1 of attempt 1\nline 2\n");
    api_kv r1a1[] = {{"rank", "1"}, {"attempt", "1"}, {"follow", "false"}};
    assert_string_equal(read_log(f, id, r1a1, 3), "rank 1 of attempt 1, on stderr\n");
    api_kv r1[] = {{"rank", "1"}};
    assert_string_equal(read_log(f, id, r1, 1), "rank 1 of attempt 2, on stderr\n");
    /* Followed after the end, a log ends at once. */
    api_kv r0a1f[] = {{"rank", "0"}, {"attempt", "1"}, {"follow", "true"}};
    assert_string_equal(read_log(f, id, r0a1f, 3), "line 1 of attempt 1\nline 2\n");

    /* The scheduler's records of the attempts conform to the document too (the fixture checks). */
    api_resp resp;
    json_t *j = fx_call(f, "GET", "/v1/jobs/{id}/attempts", &(fx_req){.id = id}, &resp);
    assert_int_equal(resp.status, 200);
    json_t *list = json_object_get(j, "attempts");
    assert_int_equal(json_array_size(list), 2);
    static const char *const want[][2] = {{"failed", "RankFailed"}, {"succeeded", "Succeeded"}};
    for (size_t i = 0; i < 2; i++) {
        json_t *a = json_array_get(list, i);
        assert_int_equal(json_integer_value(json_object_get(a, "attempt")), (json_int_t)i + 1);
        assert_string_equal(json_string_value(json_object_get(a, "state")), want[i][0]);
        assert_string_equal(json_string_value(json_object_get(a, "reason")), want[i][1]);
        assert_int_equal(json_array_size(json_object_get(a, "ranks")), 2);
    }
    json_decref(j);
    api_resp_free(&resp);
}

/* A followed log ends when its rank ends, with everything the rank wrote. */
static void test_follow(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1], script[1024], go0[160], go1[160];
    fx_sched_start(f);
    /* Each rank waits for its own file, so the test decides when it ends. */
    snprintf(go0, sizeof go0, "%s/go-0", f->dir);
    snprintf(go1, sizeof go1, "%s/go-1", f->dir);
    snprintf(script, sizeof script,
             "if [ \"$RANK\" = 1 ]; then\n"
             "  echo 'rank 1 starts'\n"
             "  while [ ! -e %s ]; do sleep 0.02; done\n"
             "  echo 'rank 1 ends'\n"
             "  exit 0\n"
             "fi\n"
             "while [ ! -e %s ]; do sleep 0.02; done\n"
             "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three\n",
             go1, go0);
    fx_submit_sh(f, NULL, 2, 0, script, id);
    fx_wait_state(f, id, JOB_RUNNING);

    /* Rank 0 runs and wrote nothing yet: without follow, an empty log at once. */
    assert_string_equal(read_log(f, id, NULL, 0), "");
    api_kv r0[] = {{"follow", "false"}, {"rank", "0"}};
    assert_string_equal(read_log(f, id, r0, 2), "");

    /* Rank 1's log ends with rank 1, while rank 0 still runs. */
    assert_string_equal(follow_while_released(f, id, "1", go1), "rank 1 starts\nrank 1 ends\n");
    store_job *row = NULL;
    assert_int_equal(store_job_get(f->store, id, &row), TY_OK);
    assert_int_equal(row->state, JOB_RUNNING);
    store_jobs_free(row, 1);

    assert_string_equal(follow_while_released(f, id, "0", go0), "one\ntwo\nthree\n");
    fx_wait_state(f, id, JOB_SUCCEEDED);
    api_kv follow[] = {{"follow", "true"}};
    assert_string_equal(read_log(f, id, follow, 1), "one\ntwo\nthree\n");
}

/* tail=N: the last N lines of a log, ended or followed, with and without a last newline. */
static void test_tail(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1], script[1024], go[160];
    fx_sched_start(f);
    snprintf(go, sizeof go, "%s/go-0", f->dir);
    /* Rank 0 writes five lines, waits, writes a last line without a newline. */
    snprintf(script, sizeof script,
             "if [ \"$RANK\" = 1 ]; then printf 'one\\ntwo'; exit 0; fi\n"
             "printf 'l1\\nl2\\nl3\\nl4\\nl5\\n'\n"
             "while [ ! -e %s ]; do sleep 0.02; done\n"
             "printf 'l6\\nend'\n",
             go);
    fx_submit_sh(f, NULL, 2, 0, script, id);
    fx_wait_state(f, id, JOB_RUNNING);

    /* Rank 1's log, followed to its end; its last line has no newline and counts. */
    api_kv r1[] = {{"rank", "1"}, {"follow", "true"}};
    assert_string_equal(read_log(f, id, r1, 2), "one\ntwo");
    static const struct {
        api_kv q[3];
        size_t nq;
        const char *want;
    } ended[] = {
        {{{"rank", "1"}, {"tail", "1"}}, 2, "two"},
        {{{"rank", "1"}, {"tail", "2"}}, 2, "one\ntwo"},
        {{{"rank", "1"}, {"tail", "100000"}}, 2, "one\ntwo"},
        {{{"rank", "1"}, {"tail", "1"}, {"follow", "true"}}, 3, "two"},
    };
    for (size_t i = 0; i < sizeof ended / sizeof ended[0]; i++)
        assert_string_equal(read_log(f, id, ended[i].q, ended[i].nq), ended[i].want);

    /* Rank 0 runs: its log up to now is complete lines. Waiting for them to be
     * there first, so that the tail has five lines to pick from. */
    api_kv all[] = {{"rank", "0"}};
    for (int i = 0; strcmp(read_log(f, id, all, 1), "l1\nl2\nl3\nl4\nl5\n") != 0; i++) {
        if (i == 3000)
            fail_msg("rank 0 did not write its five lines in a minute");
        struct timespec t = {0, 20 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    api_kv t2[] = {{"tail", "2"}};
    assert_string_equal(read_log(f, id, t2, 1), "l4\nl5\n");
    api_kv t9[] = {{"tail", "9"}};
    assert_string_equal(read_log(f, id, t9, 1), "l1\nl2\nl3\nl4\nl5\n");

    /* Followed from its last line until the rank ends. */
    pthread_t th;
    later l;
    snprintf(l.path, sizeof l.path, "%s", go);
    assert_int_equal(pthread_create(&th, NULL, touch_later, &l), 0);
    api_kv t1f[] = {{"tail", "1"}, {"follow", "true"}};
    assert_string_equal(read_log(f, id, t1f, 2), "l5\nl6\nend");
    pthread_join(th, NULL);
    fx_wait_state(f, id, JOB_SUCCEEDED);
    assert_string_equal(read_log(f, id, t2, 1), "l6\nend");
    api_kv t3f[] = {{"follow", "true"}, {"tail", "3"}};
    assert_string_equal(read_log(f, id, t3f, 2), "l5\nl6\nend");
}

/*
 * The scheduler writes STARTING before it starts the ranks, so a crash in
 * between leaves an attempt whose ranks never ran: the restarted server runs
 * the job again as attempt 2, and attempt 1 has no log (404 naming rank and
 * attempt), while attempt 2 has its own.
 */
static void test_rank_without_log(void **state)
{
    fixture *f = *state;
    char id[STORE_ID_LEN + 1];
    fx_submit_sh(f, NULL, 2, 0, "echo \"rank $RANK\"", id);
    fx_sched_write(f, id, JOB_PENDING, JOB_ADMITTED, 0, NULL, -1);
    fx_sched_write(f, id, JOB_ADMITTED, JOB_STARTING, 1, RECORD_1, -1);
    fx_sched_start(f);
    fx_wait_state(f, id, JOB_SUCCEEDED);

    static const struct {
        api_kv q[2];
        size_t nq;
        const char *detail;
    } missing[] = {
        {{{"attempt", "1"}, {"rank", "1"}}, 2, "rank 1 of attempt 1 has no log"},
        {{{"attempt", "1"}}, 1, "rank 0 of attempt 1 has no log"},
        {{{"attempt", "1"}, {"follow", "true"}}, 2, "rank 0 of attempt 1 has no log"},
    };
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        api_resp resp;
        json_t *p = logs(f, id, missing[i].q, missing[i].nq, &resp);
        fx_expect_problem(&resp, p, 404, "log-not-found");
        assert_string_equal(json_string_value(json_object_get(p, "detail")), missing[i].detail);
        assert_false(f->streamed);
        json_decref(p);
        api_resp_free(&resp);
    }
    assert_string_equal(read_log(f, id, NULL, 0), "rank 0\n");
    api_kv r1[] = {{"rank", "1"}, {"attempt", "2"}};
    assert_string_equal(read_log(f, id, r1, 2), "rank 1\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_queries, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_job, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_no_attempt_yet, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_no_scheduler, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_empty_log, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_reads_by_rank_and_attempt, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_follow, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_tail, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_rank_without_log, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
