/*
 * test_teams.c - teams and ownership with the real `trainyard serve` over loopback: an admin
 * creates teams vision and nlp and a submit token for each; vision's token cannot see or act
 * on nlp's job or sweep on any route (404 problem+json that says no more than "no such job"),
 * never lists them, and its event stream never carries an nlp event; the admin sees both; a
 * team with a job that has not ended cannot be deleted; PUT changes the quota as GET shows;
 * the CLI's team commands; a one-team install (no team created) behaves as before.
 *
 * Usage: test_teams TRAINYARD_BINARY OPENAPI_YAML (CTest passes both). Every response of
 * ty_req*() is checked against openapi.yaml by the harness. Deadlines only bound a hang;
 * nothing asserts how long anything took.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/ty_harness.h"

#define STREAM_DEADLINE_MS 30000

static ty_server *g_srv;
static ty_client *g_admin;

/* Jobs of the queue "held" are never admitted: they stay PENDING, i.e. active. */
static int setup(void **state)
{
    (void)state;
    char err[1024];
    static const char *const args[] = {"--local-slots", "4", "--queue-limit", "held=0", NULL};
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

/* A request with token (NULL: the admin's) expecting status; the response (new). */
static ty_http_resp *call(const char *token, const char *method, const char *path,
                          const char *body, long status)
{
    ty_http_req req = {.method = method, .path = path, .token = token, .body = body};
    ty_http_resp *r = ty_reqx(g_admin, &req);
    if (r->status != status)
        fail_msg("%s %s: %ld, want %ld: %.300s", method, path, r->status, status, r->body);
    return r;
}

static void expect(const char *token, const char *method, const char *path, const char *body,
                   long status)
{
    ty_resp_destroy(call(token, method, path, body, status));
}

/* A new submit+read token of team (NULL: none named) into tok. */
static void make_token(const char *name, const char *team, char tok[128])
{
    char body[256];
    if (team)
        snprintf(body, sizeof body, "{\"name\":\"%s\",\"scopes\":[\"submit\",\"read\"],"
                                    "\"team\":\"%s\"}", name, team);
    else
        snprintf(body, sizeof body, "{\"name\":\"%s\",\"scopes\":[\"submit\",\"read\"]}", name);
    ty_http_resp *r = call(NULL, "POST", "/v1/tokens", body, 201);
    assert_string_equal(json_string_value(json_object_get(r->json, "team")),
                        team ? team : "default");
    snprintf(tok, 128, "%s", json_string_value(json_object_get(r->json, "token")));
    ty_resp_destroy(r);
}

/* Submits a held job named name with token; its id into id. */
static void submit(const char *token, const char *name, char id[32])
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"queue\":\"held\",\"command\":[\"true\"],"
             "\"workers\":{\"count\":2},\"resources\":{\"cpu\":\"1\",\"memory\":\"1Gi\"}}",
             name);
    ty_http_resp *r = call(token, "POST", "/v1/jobs", body, 201);
    snprintf(id, 32, "%s", json_string_value(json_object_get(r->json, "id")));
    ty_resp_destroy(r);
}

/* Expects the 404 of an unknown job or sweep: problem+json whose body names neither the id
 * nor a team. */
static void expect_hidden(const char *token, const char *method, const char *path,
                          const char *id, const char *code)
{
    ty_http_resp *r = call(token, method, path, NULL, 404);
    const char *ct = ty_resp_header(r, "Content-Type");
    assert_non_null(ct);
    assert_non_null(strstr(ct, "application/problem+json"));
    assert_string_equal(json_string_value(json_object_get(r->json, "code")), code);
    assert_null(strstr(r->body, id));
    assert_null(strstr(r->body, "nlp"));
    if (strcmp(code, "team-not-found") != 0)
        assert_null(strstr(r->body, "team"));
    ty_resp_destroy(r);
}

/* ---- a stream read until a text appears ------------------------------------------------- */

typedef struct stream_buf {
    char *data;
    size_t len;
    const char *until;
} stream_buf;

static size_t on_stream(char *p, size_t size, size_t n, void *ud)
{
    stream_buf *b = ud;
    char *g = realloc(b->data, b->len + size * n + 1);
    if (!g)
        return 0;
    b->data = g;
    memcpy(b->data + b->len, p, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return strstr(b->data, b->until) ? 0 : size * n; /* 0 ends the transfer */
}

/* Follows path with token until the text `until` arrived (bounded by a deadline that only
 * catches a hang); returns what arrived (new). */
static char *follow_until(const char *token, const char *path, const char *until)
{
    char url[256], auth[256];
    stream_buf b = {.until = until};
    snprintf(url, sizeof url, "%s%s", ty_server_url(g_srv), path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hdr = curl_slist_append(NULL, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)STREAM_DEADLINE_MS);
    curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    assert_int_equal(status, 200);
    if (!b.data || !strstr(b.data, until))
        fail_msg("the stream %s never sent %s: %.300s", path, until, b.data ? b.data : "");
    return b.data;
}

/* ---- the tests ---------------------------------------------------------------------- */

static void test_teams_own_their_jobs(void **state)
{
    (void)state;
    char vis[128], nlp[128], path[160];
    expect(NULL, "POST", "/v1/teams",
           "{\"name\":\"vision\",\"quota\":{\"gpu\":{\"local\":16},\"cpu\":\"512\","
           "\"memory\":\"4Ti\"},\"borrowing_limit\":{\"gpu\":{\"local\":8}},\"weight\":1}",
           201);
    expect(NULL, "POST", "/v1/teams", "{\"name\":\"nlp\"}", 201);
    make_token("vision-ci", "vision", vis);
    make_token("nlp-ci", "nlp", nlp);

    char nlp_job[32], vis_job[32], nlp_sweep[32];
    submit(nlp, "nlp-job", nlp_job);
    ty_http_resp *r = call(nlp, "POST", "/v1/sweeps",
                           "{\"name\":\"nlp-sweep\",\"algorithm\":\"grid\",\"parameters\":{\"lr\":"
                           "[1,2]},\"objective\":{\"metric\":\"loss\",\"goal\":"
                           "\"minimize\"},\"template\":{\"name\":\"t\",\"queue\":\"held\","
                           "\"command\":[\"true\"],\"workers\":{\"count\":1}}}",
                           201);
    snprintf(nlp_sweep, sizeof nlp_sweep, "%s", json_string_value(json_object_get(r->json, "id")));
    assert_string_equal(json_string_value(json_object_get(r->json, "team")), "nlp");
    assert_string_equal(json_string_value(json_object_get(r->json, "owner")), "nlp-ci");
    ty_resp_destroy(r);
    /* Vision's job comes last: once a vision stream sent it, it has passed nlp's events. */
    submit(vis, "vision-job", vis_job);

    /* Every route of nlp's job and sweep is 404 to vision's token. */
    static const struct {
        const char *method, *suffix;
    } job_routes[] = {
        {"GET", ""},
        {"GET", "/events"},
        {"GET", "/events?follow=true"},
        {"GET", "/attempts"},
        {"GET", "/logs"},
        {"GET", "/logs?follow=true"},
        {"GET", "/metrics"},
        {"POST", ":cancel"},
    };
    for (size_t i = 0; i < sizeof job_routes / sizeof job_routes[0]; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%s%s", nlp_job, job_routes[i].suffix);
        expect_hidden(vis, job_routes[i].method, path, nlp_job, "job-not-found");
        /* The same answer as for a job that never was. */
        snprintf(path, sizeof path, "/v1/jobs/%s%s", "00000000000000000000000000",
                 job_routes[i].suffix);
        expect_hidden(vis, job_routes[i].method, path, "00000000000000000000000000",
                      "job-not-found");
    }
    snprintf(path, sizeof path, "/v1/sweeps/%s", nlp_sweep);
    expect_hidden(vis, "GET", path, nlp_sweep, "sweep-not-found");
    snprintf(path, sizeof path, "/v1/sweeps/%s:cancel", nlp_sweep);
    expect_hidden(vis, "POST", path, nlp_sweep, "sweep-not-found");
    expect_hidden(vis, "GET", "/v1/teams/nlp", "nlp", "team-not-found");

    /* Lists: vision's own only; the admin's: both. */
    r = call(vis, "GET", "/v1/jobs", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 1);
    assert_null(strstr(r->body, nlp_job));
    assert_non_null(strstr(r->body, vis_job));
    ty_resp_destroy(r);
    r = call(vis, "GET", "/v1/jobs?queue=held&state=PENDING", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 1);
    ty_resp_destroy(r);
    r = call(vis, "GET", "/v1/sweeps", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "sweeps")), 0);
    ty_resp_destroy(r);
    r = call(vis, "GET", "/v1/teams", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "teams")), 1);
    ty_resp_destroy(r);
    r = call(NULL, "GET", "/v1/jobs", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 4); /* 2 trials */
    ty_resp_destroy(r);
    r = call(NULL, "GET", "/v1/sweeps", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "sweeps")), 1);
    ty_resp_destroy(r);
    snprintf(path, sizeof path, "/v1/jobs/%s", nlp_job);
    r = call(NULL, "GET", path, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "team")), "nlp");
    assert_string_equal(json_string_value(json_object_get(r->json, "owner")), "nlp-ci");
    ty_resp_destroy(r);

    /* The global stream from the start: vision's follower gets its job, never nlp's. */
    char *got = follow_until(vis, "/v1/events?follow=true&after=0", vis_job);
    assert_null(strstr(got, nlp_job));
    assert_null(strstr(got, "nlp"));
    free(got);
    got = follow_until(TY_TEST_ADMIN_TOKEN, "/v1/events?follow=true&after=0", vis_job);
    assert_non_null(strstr(got, nlp_job));
    free(got);
    snprintf(path, sizeof path, "/v1/jobs/%s/events?follow=true", vis_job);
    got = follow_until(vis, path, "Submitted");
    free(got);

    /* Vision's token acts on its own job. */
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", vis_job);
    expect(vis, "POST", path, NULL, 200);

    /* Only an admin submits for another team. */
    expect(vis, "POST", "/v1/jobs",
           "{\"team\":\"nlp\",\"name\":\"x\",\"command\":[\"true\"],\"workers\":{\"count\":1}}",
           422);
    r = call(NULL, "POST", "/v1/jobs",
             "{\"team\":\"vision\",\"name\":\"x\",\"queue\":\"held\",\"command\":[\"true\"],"
             "\"workers\":{\"count\":1}}",
             201);
    assert_string_equal(json_string_value(json_object_get(r->json, "team")), "vision");
    ty_resp_destroy(r);

    /* Usage and counts, then PUT changes the quota as GET shows. */
    r = call(vis, "GET", "/v1/teams/vision", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(r->json, "pending")), 1);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(r->json, "quota"), "gpu"), "local")),
                     16);
    ty_resp_destroy(r);
    expect(vis, "PUT", "/v1/teams/vision", "{\"quota\":{\"gpu\":{\"local\":4}}}", 403);
    expect(NULL, "PUT", "/v1/teams/vision", "{\"quota\":{\"gpu\":{\"local\":4}},\"weight\":2}",
           200);
    r = call(vis, "GET", "/v1/teams/vision", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(r->json, "quota"), "gpu"), "local")),
                     4);
    assert_null(json_object_get(json_object_get(r->json, "quota"), "cpu"));
    assert_int_equal(json_integer_value(json_object_get(r->json, "weight")), 2);
    ty_resp_destroy(r);

    /* nlp has a job that has not ended: 409; so is vision (its admin-submitted job). */
    r = call(NULL, "DELETE", "/v1/teams/nlp", NULL, 409);
    assert_string_equal(json_string_value(json_object_get(r->json, "code")), "team-in-use");
    ty_resp_destroy(r);
}

/* The CLI: team create, get, list, set with the admin token. */
static void test_cli_team_commands(void **state)
{
    (void)state;
    char server[96], err[512];
    snprintf(server, sizeof server, "TRAINYARD_SERVER=%s", ty_server_url(g_srv));
    const char *const env[] = {server, "TRAINYARD_TOKEN=" TY_TEST_ADMIN_TOKEN, NULL};
    int ws = 0;
    char *out = NULL, *errout = NULL;
    const char *const create[] = {"team", "create", "audio", "--set", "quota.gpu.local=2",
                                  "--set", "quota.memory=64Gi", NULL};
    if (ty_run(create, env, 20000, &ws, &out, &errout, err, sizeof err))
        fail_msg("%s", err);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("team create: %s", errout);
    assert_string_equal(out, "audio\n");
    free(out);
    free(errout);
    const char *const set[] = {"team", "set", "audio", "--set", "quota.cpu=8", NULL};
    assert_int_equal(ty_run(set, env, 20000, &ws, &out, &errout, err, sizeof err), 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    free(out);
    free(errout);
    const char *const get[] = {"team", "get", "audio", NULL};
    assert_int_equal(ty_run(get, env, 20000, &ws, &out, &errout, err, sizeof err), 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_non_null(strstr(out, "quota:            cpu=8\n"));
    free(out);
    free(errout);
    const char *const list[] = {"team", "list", NULL};
    assert_int_equal(ty_run(list, env, 20000, &ws, &out, &errout, err, sizeof err), 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_non_null(strstr(out, "audio"));
    assert_non_null(strstr(out, "unlimited")); /* default */
    free(out);
    free(errout);
    const char *const missing[] = {"team", "get", "nobody", NULL};
    assert_int_equal(ty_run(missing, env, 20000, &ws, &out, &errout, err, sizeof err), 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 3); /* not found */
    free(out);
    free(errout);
}

/* No team created: a token made as before (no team) is the default team's and sees and
 * cancels what the admin submitted, as every token did. */
static void test_one_team_install_as_before(void **state)
{
    (void)state;
    char tok[128], id[32], path[96];
    make_token("plain", NULL, tok);
    submit(TY_TEST_ADMIN_TOKEN, "admins", id);
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    ty_http_resp *r = call(tok, "GET", path, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(r->json, "team")), "default");
    assert_string_equal(json_string_value(json_object_get(r->json, "owner")), "admin");
    ty_resp_destroy(r);
    r = call(tok, "GET", "/v1/jobs", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 1);
    ty_resp_destroy(r);
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    expect(tok, "POST", path, NULL, 200);
    r = call(tok, "GET", "/v1/teams", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "teams")), 1);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(r->json, "teams"), 0),
                                             "quota")));
    ty_resp_destroy(r);
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_teams_own_their_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_team_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_team_install_as_before, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
