/*
 * test_webhooks.c - CI webhooks against the real server on loopback: hooks registered
 * through the API, deliveries made of real GitHub and GitLab push payloads
 * (tests/fixtures/webhooks) signed here with OpenSSL, and what a CI system sees: a job
 * created from the filled template, the same job on a redelivery, 401 for any bad signature
 * with nothing created, 202 for a branch the hook does not select; the first job again for a
 * replayed body or signature, even after a restart; 429 past the rate limits, with a server
 * log that stays small under a flood of bad signatures; the refusals in /metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/support/ty_harness.h"

static ty_server *g_srv;
static ty_client *g_admin, *g_anon;

#define SECRET "It's a Secret to Everybody"
#define TEMPLATE                                                                                  \
    "{\"name\": \"ci-${commit_short}\", \"command\": [\"true\"], "                               \
    "\"args\": [\"--rev\", \"${commit}\", \"--repo\", \"${repository}\", \"--branch\", "        \
    "\"${branch}\", \"--by\", \"${pusher}\"], \"env\": {\"REF\": \"${ref}\"}, "    \
    "\"workers\": {\"count\": 1}}"

static char *read_fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1u << 16);
    assert_non_null(buf);
    *len = fread(buf, 1, (1u << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* "sha256=<hex>" of HMAC-SHA256(secret, a || b). */
static void sign(const char *secret, const char *a, size_t alen, const char *b, size_t blen,
                 char out[72])
{
    unsigned char md[32];
    unsigned int n = 0;
    char *msg = malloc(alen + blen + 1);
    assert_non_null(msg);
    memcpy(msg, a, alen);
    memcpy(msg + alen, b, blen);
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)msg, alen + blen, md, &n);
    free(msg);
    strcpy(out, "sha256=");
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static int setup(void **state)
{
    (void)state;
    char err[1024];
    static const char *const args[] = {"--max-body", "65536", NULL};
    ty_server_opts o = {.args = args};
    if (ty_server_start(&o, &g_srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    g_anon = ty_client_new(g_srv, NULL);
    assert_non_null(g_admin);
    assert_non_null(g_anon);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_admin);
    ty_client_free(g_anon);
    ty_server_free(g_srv);
    return 0;
}

static void register_hook(const char *name, const char *provider, const char *branches)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"provider\": \"%s\", \"secret\": \"" SECRET "\", "
             "\"events\": [\"push\"], \"branches\": %s, \"template\": " TEMPLATE "}",
             name, provider, branches);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/webhooks", body);
    if (r->status != 201)
        fail_msg("registering %s: %ld %s", name, r->status, r->body);
    assert_null(strstr(r->body, "Secret"));
    ty_resp_destroy(r);
}

static ty_http_resp *deliver(const char *hook, const char *body, size_t len,
                             const char *const *headers)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/hooks/%s", hook);
    ty_http_req q = {.method = "POST", .path = path, .token = "", .body = body,
                     .body_len = len, .body_len_set = 1, .headers = headers};
    return ty_reqx(g_anon, &q);
}

/* The number of jobs the server holds. */
static size_t njobs(void)
{
    ty_http_resp *r = ty_req(g_admin, "GET", "/v1/jobs?limit=1000", NULL);
    assert_int_equal(r->status, 200);
    size_t n = json_array_size(json_object_get(r->json, "jobs"));
    ty_resp_destroy(r);
    return n;
}

static void test_github_push_creates_the_filled_job_once(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("github_push.json", &len), sig[72], h[128];
    register_hook("gh", "github", "[\"main\"]");
    sign(SECRET, body, len, "", 0, sig);
    snprintf(h, sizeof h, "X-Hub-Signature-256: %s", sig);
    const char *const headers[] = {h, "X-GitHub-Event: push",
                                   "X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958",
                                   NULL};
    ty_http_resp *r = deliver("gh", body, len, headers);
    assert_int_equal(r->status, 201);
    char id[64];
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "job_id"));
    ty_resp_destroy(r);

    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *spec = json_object_get(r->json, "spec");
    assert_string_equal(ty_json_str(spec, "name"), "ci-9049f1265b7d");
    char *args = json_dumps(json_object_get(spec, "args"), JSON_COMPACT);
    assert_string_equal(args, "[\"--rev\",\"9049f1265b7d61be4a8904a9a27120d2064dab3b\",\"--repo\","
                              "\"acme-ml/trainer\",\"--branch\",\"main\",\"--by\",\"octocat\"]");
    free(args);
    assert_string_equal(ty_json_str(json_object_get(spec, "env"), "REF"), "refs/heads/main");
    json_t *labels = json_object_get(spec, "labels");
    assert_string_equal(ty_json_str(labels, "webhook"), "gh");
    assert_string_equal(ty_json_str(labels, "commit"),
                        "9049f1265b7d61be4a8904a9a27120d2064dab3b");
    ty_resp_destroy(r);

    /* GitHub's "Redeliver": the same delivery id and body get the same job. */
    size_t before = njobs();
    r = deliver("gh", body, len, headers);
    assert_int_equal(r->status, 200);
    assert_string_equal(ty_json_str(r->json, "status"), "redelivered");
    assert_string_equal(ty_json_str(r->json, "job_id"), id);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before);

    /* The list shows the hook, never its secret. */
    r = ty_req(g_admin, "GET", "/v1/webhooks", NULL);
    assert_int_equal(r->status, 200);
    assert_non_null(strstr(r->body, "\"gh\""));
    assert_null(strstr(r->body, SECRET));
    ty_resp_destroy(r);
    free(body);
}

static void test_bad_signatures_create_nothing(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("github_push.json", &len), sig[72], h[128];
    size_t before = njobs();

    /* Tampered: signed, then one byte of the body changed. */
    sign(SECRET, body, len, "", 0, sig);
    snprintf(h, sizeof h, "X-Hub-Signature-256: %s", sig);
    const char *const headers[] = {h, "X-GitHub-Event: push", NULL};
    char *tampered = strdup(body);
    tampered[strstr(tampered, "octocat") - tampered] = 'O';
    ty_http_resp *r = deliver("gh", tampered, len, headers);
    assert_int_equal(r->status, 401);
    ty_resp_destroy(r);

    /* Signed with another secret. */
    sign("not the secret", body, len, "", 0, sig);
    snprintf(h, sizeof h, "X-Hub-Signature-256: %s", sig);
    r = deliver("gh", body, len, headers);
    assert_int_equal(r->status, 401);
    ty_resp_destroy(r);

    /* No signature at all. */
    const char *const none[] = {"X-GitHub-Event: push", NULL};
    r = deliver("gh", body, len, none);
    assert_int_equal(r->status, 401);
    ty_resp_destroy(r);

    assert_int_equal(njobs(), before);
    char *log = ty_server_log(g_srv);
    assert_non_null(strstr(log, "webhook delivery refused"));
    assert_null(strstr(log, SECRET));
    free(log);
    free(tampered);
    free(body);
}

static void test_unknown_hook_and_oversized_body(void **state)
{
    (void)state;
    const char *const headers[] = {"X-GitHub-Event: push", NULL};
    ty_http_resp *r = deliver("no-such-hook", "{}", 2, headers);
    assert_int_equal(r->status, 404);
    ty_resp_destroy(r);

    size_t n = 100000; /* over --max-body 65536 */
    char *big = malloc(n);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    size_t before = njobs();
    r = deliver("gh", big, n, headers);
    assert_int_equal(r->status, 413);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before);
    free(big);
}

static void test_gitlab_token_and_branches(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("gitlab_push.json", &len);
    register_hook("gl", "gitlab", "[\"release\"]");
    register_hook("gl-main", "gitlab", "[\"main\"]");
    const char *const good[] = {"X-Gitlab-Token: " SECRET, "X-Gitlab-Event: Push Hook",
                                "X-Gitlab-Event-UUID: 13792a34-cac6-4fda-95a8-c58e00a3954e",
                                NULL};
    ty_http_resp *r = deliver("gl", body, len, good);
    assert_int_equal(r->status, 201);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", ty_json_str(r->json, "job_id"));
    ty_resp_destroy(r);
    r = ty_req(g_admin, "GET", path, NULL);
    json_t *spec = json_object_get(r->json, "spec");
    assert_string_equal(ty_json_str(spec, "name"), "ci-da1560886d4f");
    assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "args"), 3)),
                        "ml/trainer");
    ty_resp_destroy(r);

    size_t before = njobs();
    /* A branch the hook does not select. */
    r = deliver("gl-main", body, len, good);
    assert_int_equal(r->status, 202);
    assert_string_equal(ty_json_str(r->json, "status"), "ignored");
    ty_resp_destroy(r);

    const char *const wrong[] = {"X-Gitlab-Token: guessed", "X-Gitlab-Event: Push Hook", NULL};
    r = deliver("gl", body, len, wrong);
    assert_int_equal(r->status, 401);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before);

    /* Deleted, its deliveries are unknown. */
    r = ty_req(g_admin, "DELETE", "/v1/webhooks/gl-main", NULL);
    assert_int_equal(r->status, 204);
    ty_resp_destroy(r);
    r = deliver("gl-main", body, len, good);
    assert_int_equal(r->status, 404);
    ty_resp_destroy(r);
    free(body);
}

/* The generic scheme: a fresh signature is accepted once per delivery id; the same signed
 * request from outside the 5-minute window is refused. */
static void test_generic_window(void **state)
{
    (void)state;
    register_hook("plain", "generic", "[]");
    const char *body = "{\"repository\": \"acme/infra\", \"ref\": \"refs/heads/dev\", "
                       "\"commit\": \"0fe1c0ffee0fe1c0ffee0fe1c0ffee0fe1c0ffee\", "
                       "\"pusher\": \"ci-bot\"}";
    size_t len = strlen(body);
    char sig[72], hs[128], ht[64], pre[32];
    long long ts[] = {(long long)time(NULL), (long long)time(NULL) - 3600};
    int want[] = {201, 401};
    size_t before = njobs();
    for (int i = 0; i < 2; i++) {
        snprintf(pre, sizeof pre, "%lld.", ts[i]);
        sign(SECRET, pre, strlen(pre), body, len, sig);
        snprintf(hs, sizeof hs, "X-Trainyard-Signature: %s", sig);
        snprintf(ht, sizeof ht, "X-Trainyard-Timestamp: %lld", ts[i]);
        const char *const headers[] = {hs, ht, "X-Trainyard-Delivery: d-1", NULL};
        ty_http_resp *r = deliver("plain", body, len, headers);
        assert_int_equal(r->status, want[i]);
        ty_resp_destroy(r);
    }
    assert_int_equal(njobs(), before + 1);

    /* The same delivery id with another body is a conflict, not a second job. */
    const char *other = "{\"repository\": \"acme/infra\", \"ref\": \"refs/heads/dev\", "
                        "\"commit\": \"1111111111111111111111111111111111111111\"}";
    snprintf(pre, sizeof pre, "%lld.", ts[0]);
    sign(SECRET, pre, strlen(pre), other, strlen(other), sig);
    snprintf(hs, sizeof hs, "X-Trainyard-Signature: %s", sig);
    snprintf(ht, sizeof ht, "X-Trainyard-Timestamp: %lld", ts[0]);
    const char *const headers[] = {hs, ht, "X-Trainyard-Delivery: d-1", NULL};
    ty_http_resp *r = deliver("plain", other, strlen(other), headers);
    assert_int_equal(r->status, 409);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before + 1);
}

/* The key that seals the secrets is a 0600 file next to the database; a template that is not a
 * valid job is refused when the hook is registered. */
static void test_key_file_and_invalid_template(void **state)
{
    (void)state;
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/webhook-secrets.key", ty_server_dir(g_srv));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);

    /* Names are unique. */
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"gh\", \"provider\": \"github\", \"secret\": \"" SECRET
             "\", \"template\": " TEMPLATE "}");
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/webhooks", body);
    assert_int_equal(r->status, 409);
    ty_resp_destroy(r);

    r = ty_req(g_admin, "POST", "/v1/webhooks",
               "{\"name\": \"bad\", \"provider\": \"github\", \"secret\": \"" SECRET
               "\", \"template\": {\"name\": \"x-${nope}\", \"command\": [\"true\"], "
               "\"workers\": {\"count\": 0}}}");
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "$.template.name"));
    assert_non_null(strstr(r->body, "unknown placeholder ${nope}"));
    ty_resp_destroy(r);

    /* A template is stored as written: it cannot hold a secret env value. */
    r = ty_req(g_admin, "POST", "/v1/webhooks",
               "{\"name\": \"with-secret\", \"provider\": \"github\", \"secret\": \"" SECRET
               "\", \"template\": {\"name\": \"x\", \"command\": [\"true\"], "
               "\"workers\": {\"count\": 1}, \"env\": {\"KEY\": {\"value\": \"v-9d2e\", "
               "\"secret\": true}}}}");
    assert_int_equal(r->status, 422);
    assert_non_null(strstr(r->body, "$.template.env.KEY.secret"));
    assert_null(strstr(r->body, "v-9d2e"));
    ty_resp_destroy(r);
}

/* "sha256=" signature headers of a GitHub push, with a delivery id when delivery is set. */
static ty_http_resp *deliver_github(const char *hook, const char *body, size_t len,
                                    const char *delivery)
{
    char sig[72], h[128], d[128];
    sign(SECRET, body, len, "", 0, sig);
    snprintf(h, sizeof h, "X-Hub-Signature-256: %s", sig);
    snprintf(d, sizeof d, "X-GitHub-Delivery: %s", delivery ? delivery : "");
    const char *const headers[] = {h, "X-GitHub-Event: push", delivery ? d : NULL, NULL};
    return deliver(hook, body, len, headers);
}

/* A sample's value in the /metrics text of the server c talks to; -1 when absent. */
static long long metric(ty_client *c, const char *series)
{
    ty_http_resp *r = ty_req(c, "GET", "/metrics", NULL);
    assert_int_equal(r->status, 200);
    long long v = -1;
    size_t n = strlen(series);
    for (const char *p = r->body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            v = strtoll(p + n + 1, NULL, 10);
    ty_resp_destroy(r);
    return v;
}

/* Restarts the server on its data directory; the clients follow it. */
static void restart(void)
{
    char err[1024];
    int ws = 0;
    if (ty_server_stop(g_srv, 30000, &ws, err, sizeof err) ||
        ty_server_restart(g_srv, err, sizeof err))
        fail_msg("cannot restart the server: %s", err);
    ty_client_free(g_admin);
    ty_client_free(g_anon);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    g_anon = ty_client_new(g_srv, NULL);
    assert_non_null(g_admin);
    assert_non_null(g_anon);
}

/* A GitHub body the hook accepted, sent again with a new delivery id (or none), is answered
 * with the first job, also after a restart; another hook is another matter. */
static void test_replayed_github_body_gets_the_first_job(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("github_push.json", &len), id[64];
    register_hook("gh-replay", "github", "[\"main\"]");
    ty_http_resp *r = deliver_github("gh-replay", body, len, "a1a1a1a1-0000-4000-8000-000000000001");
    assert_int_equal(r->status, 201);
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "job_id"));
    ty_resp_destroy(r);
    size_t before = njobs();
    long long replays = metric(g_admin, "trainyard_webhook_deliveries_refused_total{reason=\"replay\"}");
    assert_true(replays >= 0);

    const char *again[] = {"b2b2b2b2-0000-4000-8000-000000000002", NULL};
    for (int i = 0; i < 2; i++) {
        r = deliver_github("gh-replay", body, len, again[i]);
        assert_int_equal(r->status, 200);
        assert_string_equal(ty_json_str(r->json, "status"), "redelivered");
        assert_string_equal(ty_json_str(r->json, "job_id"), id);
        ty_resp_destroy(r);
    }
    assert_int_equal(njobs(), before);
    assert_int_equal(metric(g_admin,
                            "trainyard_webhook_deliveries_refused_total{reason=\"replay\"}"),
                     replays + 2);

    /* Kept in the store: a restart does not forget it. */
    restart();
    r = deliver_github("gh-replay", body, len, "c3c3c3c3-0000-4000-8000-000000000003");
    assert_int_equal(r->status, 200);
    assert_string_equal(ty_json_str(r->json, "job_id"), id);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before);

    /* A changed body is a new push: a new job. */
    char *changed = strdup(body);
    char *at = strstr(changed, "9049f1265b7d61be4a8904a9a27120d2064dab3b");
    assert_non_null(at);
    at[0] = 'a';
    r = deliver_github("gh-replay", changed, len, "d4d4d4d4-0000-4000-8000-000000000004");
    assert_int_equal(r->status, 201);
    assert_string_not_equal(ty_json_str(r->json, "job_id"), id);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before + 1);
    free(changed);
    free(body);
}

/* The generic scheme: the same signed request again inside its window gets the first job; a
 * new signature (a new timestamp) of the same body is a new delivery. */
static void test_generic_replay_gets_the_first_job(void **state)
{
    (void)state;
    register_hook("plain-replay", "generic", "[]");
    const char *body = "{\"repository\": \"acme/infra\", \"ref\": \"refs/heads/dev\", "
                       "\"commit\": \"2222222222222222222222222222222222222222\"}";
    size_t len = strlen(body);
    char sig[72], hs[128], ht[64], pre[32], id[64];
    long long ts = (long long)time(NULL);
    snprintf(pre, sizeof pre, "%lld.", ts);
    sign(SECRET, pre, strlen(pre), body, len, sig);
    snprintf(hs, sizeof hs, "X-Trainyard-Signature: %s", sig);
    snprintf(ht, sizeof ht, "X-Trainyard-Timestamp: %lld", ts);
    const char *const headers[] = {hs, ht, NULL};
    ty_http_resp *r = deliver("plain-replay", body, len, headers);
    assert_int_equal(r->status, 201);
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "job_id"));
    ty_resp_destroy(r);
    size_t before = njobs();

    r = deliver("plain-replay", body, len, headers);
    assert_int_equal(r->status, 200);
    assert_string_equal(ty_json_str(r->json, "status"), "redelivered");
    assert_string_equal(ty_json_str(r->json, "job_id"), id);
    assert_non_null(strstr(ty_resp_header(r, "Location"), id));
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before);

    snprintf(pre, sizeof pre, "%lld.", ts - 1);
    sign(SECRET, pre, strlen(pre), body, len, sig);
    snprintf(hs, sizeof hs, "X-Trainyard-Signature: %s", sig);
    snprintf(ht, sizeof ht, "X-Trainyard-Timestamp: %lld", ts - 1);
    r = deliver("plain-replay", body, len, headers);
    assert_int_equal(r->status, 201);
    assert_string_not_equal(ty_json_str(r->json, "job_id"), id);
    ty_resp_destroy(r);
    assert_int_equal(njobs(), before + 1);
}

/*
 * A flood of bad signatures from one address, on a server of its own that answers 429 at once
 * (--webhook-limits delay=0, so the flood is quick): 401 for the first few, then 429 with
 * Retry-After; nothing created; the server's log grows by a few lines, not two per request;
 * every refusal counted in /metrics.
 */
#define FLOOD 2000
static void test_flood_of_bad_signatures(void **state)
{
    (void)state;
    char err[1024];
    static const char *const args[] = {"--webhook-limits", "delay=0", NULL};
    ty_server_opts o = {.args = args};
    ty_server *srv = NULL;
    if (ty_server_start(&o, &srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    ty_client *admin = ty_client_new(srv, TY_TEST_ADMIN_TOKEN), *anon = ty_client_new(srv, NULL);
    assert_non_null(admin);
    assert_non_null(anon);
    ty_http_resp *r = ty_req(admin, "POST", "/v1/webhooks",
                             "{\"name\": \"flooded\", \"provider\": \"github\", \"secret\": \"" SECRET
                             "\", \"template\": " TEMPLATE "}");
    assert_int_equal(r->status, 201);
    ty_resp_destroy(r);

    size_t len;
    char *body = read_fixture("github_push.json", &len), sig[72], h[128];
    sign("not the secret", body, len, "", 0, sig);
    snprintf(h, sizeof h, "X-Hub-Signature-256: %s", sig);
    const char *const headers[] = {h, "X-GitHub-Event: push", NULL};
    ty_http_req q = {.method = "POST", .path = "/v1/hooks/flooded", .token = "", .body = body,
                     .body_len = len, .body_len_set = 1, .headers = headers};
    char *log = ty_server_log(srv);
    size_t log_before = strlen(log);
    free(log);

    long n401 = 0, n429 = 0, first429 = -1;
    for (long i = 0; i < FLOOD; i++) {
        r = ty_reqx(anon, &q);
        if (r->status == 401) {
            n401++;
        } else {
            assert_int_equal(r->status, 429);
            assert_string_equal(ty_json_str(r->json, "code"), "rate-limited");
            const char *ra = ty_resp_header(r, "Retry-After");
            assert_non_null(ra);
            assert_true(strtol(ra, NULL, 10) >= 1);
            if (first429 < 0)
                first429 = i;
            n429++;
        }
        ty_resp_destroy(r);
    }
    /* The bad-signature bucket holds 10; one more may have dripped in meanwhile. */
    assert_in_range(first429, 10, 11);
    assert_true(n401 <= 12);
    assert_int_equal(n401 + n429, FLOOD);

    log = ty_server_log(srv);
    size_t grown = strlen(log) - log_before;
    /* Unquieted, each request wrote two lines, about 700 bytes: 1.4 MB here. */
    if (grown > 32 * 1024)
        fail_msg("the log grew by %zu bytes for %d refused deliveries", grown, FLOOD);
    assert_non_null(strstr(log + log_before, "\"suppressed\":"));
    assert_non_null(strstr(log + log_before, "webhook delivery refused"));
    free(log);

    assert_int_equal(metric(admin, "trainyard_webhook_deliveries_refused_total"
                                   "{reason=\"bad_signature\"}"),
                     n401);
    assert_int_equal(metric(admin, "trainyard_webhook_deliveries_refused_total"
                                   "{reason=\"rate_limited\"}"),
                     n429);
    r = ty_req(admin, "GET", "/v1/jobs", NULL);
    assert_int_equal(json_array_size(json_object_get(r->json, "jobs")), 0);
    ty_resp_destroy(r);
    free(body);
    ty_client_free(admin);
    ty_client_free(anon);
    ty_server_free(srv);
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_github_push_creates_the_filled_job_once),
        cmocka_unit_test(test_bad_signatures_create_nothing),
        cmocka_unit_test(test_unknown_hook_and_oversized_body),
        cmocka_unit_test(test_gitlab_token_and_branches),
        cmocka_unit_test(test_generic_window),
        cmocka_unit_test(test_key_file_and_invalid_template),
        cmocka_unit_test(test_replayed_github_body_gets_the_first_job),
        cmocka_unit_test(test_generic_replay_gets_the_first_job),
        cmocka_unit_test(test_flood_of_bad_signatures),
    };
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "test_webhooks: %s\n", err);
        return 2;
    }
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    ty_harness_cleanup();
    return rc;
}
