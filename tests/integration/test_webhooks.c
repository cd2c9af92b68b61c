/*
 * test_webhooks.c - CI webhooks against the real server on loopback: hooks registered
 * through the API, deliveries made of real GitHub and GitLab push payloads
 * (tests/fixtures/webhooks) signed here with OpenSSL, and what a CI system sees: a job
 * created from the filled template, the same job on a redelivery, 401 for any bad signature
 * with nothing created, 202 for a branch the hook does not select.
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
    };
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "test_webhooks: %s\n", err);
        return 2;
    }
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    ty_harness_cleanup();
    return rc;
}
