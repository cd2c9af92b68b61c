/*
 * test_notifications.c - notifications out with the real server and a real receiver on
 * loopback (a libmicrohttpd daemon in this process): retries until a 2xx with the signature
 * checked here with OpenSSL, exactly one delivery after a kill -9 between the job's end and
 * its delivery, nothing for a deleted subscription, and the registration's 422/403/404/409.
 *
 * The receiver listens on loopback, which a server refuses as a notification's address by
 * default (no SSRF: common/ty_addr.h), so the server most tests use runs with
 * --notify-allow-private. A second server without it shows the refusals:
 *
 *   - at registration (422 on $.url): loopback, link-local (the metadata service
 *     169.254.169.254 and fd00:ec2::254), private, CGNAT, unspecified, multicast and
 *     broadcast addresses, their IPv4-mapped and NAT64 forms, the numeric shorthands
 *     (2130706433, 0x7f.1, 017700000001, 127.1), the server's own API, and localhost, a
 *     name that resolves to loopback;
 *   - at delivery, a name that resolved to a public address at registration and resolves to
 *     loopback when the delivery is made (DNS rebinding). This is tested end to end, with
 *     the real resolver of the real server: the test enters a private mount namespace
 *     (unshare(CLONE_NEWNS), root only) and binds its own file over /etc/hosts there, which
 *     the server started from it reads ("hosts: files" comes first in nsswitch.conf). The
 *     file says 1.1.1.1 at registration and 127.0.0.1 before the job ends. A unit test of
 *     the open-socket callback with CURLOPT_RESOLVE would need the callback exported from
 *     server/notify.c and would not show that the delivery is recorded as refused; this
 *     shows both, and is skipped (with the reason) where the test is not root or the
 *     namespace or the bind mount cannot be made.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "tests/support/ty_harness.h"

#define SECRET "notify-secret-0123"
#define WAIT_MS 30000
#define MAX_SEEN 64
#define MAX_BODY 65536

/* ---- the receiver ----------------------------------------------------------------- */

typedef struct seen {
    char path[64];
    int64_t delivery;
    char event[32];
    int sig_ok;
    unsigned status; /* what the receiver answered */
    json_t *body;
} seen;

static struct {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    int fail_next;   /* answer 503 to this many requests, then 204 */
    int fail_always; /* answer 503 */
    seen seen[MAX_SEEN];
    size_t nseen;
} g_rx = {.mu = PTHREAD_MUTEX_INITIALIZER};

static ty_server *g_srv;
static ty_client *g_admin;

typedef struct rx_body {
    char buf[MAX_BODY];
    size_t len;
} rx_body;

/* Whether sig is "t=<t>,v1=<hex>" with hex the HMAC-SHA256 under SECRET of "<t>.<body>". */
static int sig_valid(const char *sig, const char *body, size_t len)
{
    const char *v1 = sig ? strstr(sig, ",v1=") : NULL;
    if (!sig || strncmp(sig, "t=", 2) != 0 || !v1 || strlen(v1 + 4) != 64)
        return 0;
    char *msg = malloc((size_t)(v1 - sig) + len + 1);
    if (!msg)
        return 0;
    size_t tl = (size_t)(v1 - sig - 2);
    memcpy(msg, sig + 2, tl);
    msg[tl] = '.';
    memcpy(msg + tl + 1, body, len);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned maclen = 0;
    int ok = HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (unsigned char *)msg, tl + 1 + len,
                  mac, &maclen) != NULL;
    free(msg);
    char hex[65];
    for (unsigned i = 0; ok && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    return ok && maclen == 32 && CRYPTO_memcmp(hex, v1 + 4, 64) == 0;
}

static enum MHD_Result rx_handle(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *data,
                                 size_t *size, void **ptr)
{
    (void)cls, (void)method, (void)version;
    rx_body *b = *ptr;
    if (!b) {
        if (!(b = calloc(1, sizeof *b)))
            return MHD_NO;
        *ptr = b;
        return MHD_YES;
    }
    if (*size) {
        size_t n = *size < MAX_BODY - 1 - b->len ? *size : MAX_BODY - 1 - b->len;
        memcpy(b->buf + b->len, data, n);
        b->len += n;
        *size = 0;
        return MHD_YES;
    }
    const char *sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Trainyard-Signature");
    const char *del = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Trainyard-Delivery");
    const char *ev = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Trainyard-Event");
    unsigned status = 204;
    pthread_mutex_lock(&g_rx.mu);
    if (g_rx.fail_always || g_rx.fail_next > 0) {
        status = 503;
        if (g_rx.fail_next > 0)
            g_rx.fail_next--;
    }
    if (g_rx.nseen < MAX_SEEN) {
        seen *s = &g_rx.seen[g_rx.nseen++];
        snprintf(s->path, sizeof s->path, "%s", url);
        s->delivery = del ? strtoll(del, NULL, 10) : -1;
        snprintf(s->event, sizeof s->event, "%s", ev ? ev : "");
        s->sig_ok = sig_valid(sig, b->buf, b->len);
        s->status = status;
        s->body = json_loadb(b->buf, b->len, 0, NULL);
    }
    pthread_mutex_unlock(&g_rx.mu);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void rx_done(void *cls, struct MHD_Connection *c, void **ptr,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    free(*ptr);
    *ptr = NULL;
}

static void rx_mode(int fail_next, int fail_always)
{
    pthread_mutex_lock(&g_rx.mu);
    g_rx.fail_next = fail_next;
    g_rx.fail_always = fail_always;
    pthread_mutex_unlock(&g_rx.mu);
}

/* Requests received at path: in total, with a valid signature, answered 2xx. The first one's
 * delivery id, event and body (borrowed) when first is not NULL. */
static void rx_count(const char *path, int *total, int *signed_ok, int *accepted, seen *first)
{
    *total = *signed_ok = *accepted = 0;
    pthread_mutex_lock(&g_rx.mu);
    for (size_t i = 0; i < g_rx.nseen; i++) {
        const seen *s = &g_rx.seen[i];
        if (strcmp(s->path, path) != 0)
            continue;
        if (first && *total == 0)
            *first = *s;
        (*total)++;
        *signed_ok += s->sig_ok;
        *accepted += s->status < 300;
    }
    pthread_mutex_unlock(&g_rx.mu);
}

/* ---- helpers ------------------------------------------------------------------------ */

static void url_of(const char *path, char *out, size_t len)
{
    snprintf(out, len, "http://127.0.0.1:%d%s", g_rx.port, path);
}

static void subscribe(const char *name, const char *path, const char *events)
{
    char url[128], body[512];
    url_of(path, url, sizeof url);
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"url\": \"%s\", \"events\": %s, \"secret\": \"" SECRET "\"}",
             name, url, events);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/notifications", body);
    assert_int_equal(r->status, 201);
    assert_null(json_object_get(r->json, "secret"));
    ty_resp_destroy(r);
}

/* Submits a job whose one rank runs `sh -c script`; returns its id (new). */
static char *submit(const char *name, const char *script)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"image\": \"registry.example/worker:1.0\", \"command\": "
             "[\"sh\", \"-c\", \"%s\"], \"workers\": {\"count\": 1}, \"labels\": {\"team\": "
             "\"it\"}, \"restart\": {\"max\": 0, \"backoff_seconds\": 0}}",
             name, script);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
    assert_int_equal(r->status, 201);
    char *id = strdup(ty_json_str(r->json, "id"));
    assert_non_null(id);
    ty_resp_destroy(r);
    return id;
}

/* The newest delivery of subscription name (new), or NULL while there is none. */
static json_t *newest_delivery(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/notifications/%s/deliveries", name);
    ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
    assert_int_equal(r->status, 200);
    json_t *d = json_array_get(json_object_get(r->json, "deliveries"), 0);
    json_incref(d);
    ty_resp_destroy(r);
    return d;
}

/* Polls until the newest delivery of name satisfies: state == want, or (want NULL) at least
 * min_attempts attempts. Returns it (new); fails the test after WAIT_MS. */
static json_t *wait_delivery(const char *name, const char *want, int min_attempts)
{
    int64_t deadline = ty_now_ms() + WAIT_MS;
    for (;;) {
        json_t *d = newest_delivery(name);
        const char *state = d ? ty_json_str(d, "state") : NULL;
        int attempts = d ? (int)json_integer_value(json_object_get(d, "attempts")) : 0;
        if (d && (want ? !strcmp(state, want) : attempts >= min_attempts))
            return d;
        json_decref(d);
        if (ty_now_ms() > deadline)
            fail_msg("notification %s: no delivery in state %s within %d ms", name,
                     want ? want : "(attempted)", WAIT_MS);
        ty_sleep_ms(50);
    }
}

/* ---- tests -------------------------------------------------------------------------- */

/* A receiver that fails twice and then accepts: one delivery, three attempts, all signed,
 * the same delivery id each time, and visible as such through the API. */
static void test_retries_until_delivered_once(void **state)
{
    (void)state;
    rx_mode(2, 0);
    subscribe("retry", "/retry", "[\"job.succeeded\"]");
    char *id = submit("notify-ok", "true");
    json_t *d = wait_delivery("retry", "delivered", 0);
    assert_int_equal(json_integer_value(json_object_get(d, "attempts")), 3);
    assert_int_equal(json_integer_value(json_object_get(d, "last_status")), 204);
    assert_string_equal(ty_json_str(d, "event"), "job.succeeded");
    assert_string_equal(ty_json_str(d, "job_id"), id);
    assert_non_null(json_object_get(d, "finished_at"));

    int total, ok, accepted;
    seen first;
    rx_count("/retry", &total, &ok, &accepted, &first);
    assert_int_equal(total, 3);
    assert_int_equal(ok, 3);
    assert_int_equal(accepted, 1);
    assert_int_equal(first.delivery, json_integer_value(json_object_get(d, "id")));
    assert_string_equal(first.event, "job.succeeded");
    pthread_mutex_lock(&g_rx.mu);
    for (size_t i = 0; i < g_rx.nseen; i++)
        if (!strcmp(g_rx.seen[i].path, "/retry"))
            assert_int_equal(g_rx.seen[i].delivery, first.delivery);
    pthread_mutex_unlock(&g_rx.mu);
    json_t *job = json_object_get(first.body, "job");
    assert_string_equal(ty_json_str(first.body, "event"), "job.succeeded");
    assert_string_equal(ty_json_str(job, "id"), id);
    assert_string_equal(ty_json_str(job, "name"), "notify-ok");
    assert_string_equal(ty_json_str(job, "state"), "SUCCEEDED");
    assert_string_equal(ty_json_str(job, "reason"), "Succeeded");
    assert_string_equal(ty_json_str(json_object_get(job, "labels"), "team"), "it");
    json_decref(d);
    free(id);

    /* The counters show it. */
    ty_http_resp *r = ty_req(g_admin, "GET", "/metrics", NULL);
    assert_non_null(strstr(r->body, "trainyard_notifications_delivered_total "));
    assert_null(strstr(r->body, "trainyard_notifications_delivered_total 0\n"));
    assert_non_null(strstr(r->body, "trainyard_notifications_retried_total "));
    ty_resp_destroy(r);
    r = ty_req(g_admin, "DELETE", "/v1/notifications/retry", NULL);
    assert_int_equal(r->status, 204);
    ty_resp_destroy(r);
}

/* A subscription deleted before the job ends gets no request; another one does. */
static void test_deleted_subscription_gets_nothing(void **state)
{
    (void)state;
    rx_mode(0, 0);
    subscribe("gone", "/gone", "[\"job.finished\"]");
    subscribe("kept", "/kept", "[\"job.finished\"]");
    ty_http_resp *r = ty_req(g_admin, "DELETE", "/v1/notifications/gone", NULL);
    assert_int_equal(r->status, 204);
    ty_resp_destroy(r);
    char *id = submit("notify-gone", "exit 3");
    json_t *d = wait_delivery("kept", "delivered", 0);
    assert_string_equal(ty_json_str(d, "event"), "job.failed");
    assert_string_equal(ty_json_str(d, "job_id"), id);
    json_decref(d);
    int total, ok, accepted;
    rx_count("/gone", &total, &ok, &accepted, NULL);
    assert_int_equal(total, 0);
    r = ty_req(g_admin, "GET", "/v1/notifications/gone/deliveries", NULL);
    assert_int_equal(r->status, 404);
    ty_resp_destroy(r);
    r = ty_req(g_admin, "DELETE", "/v1/notifications/kept", NULL);
    assert_int_equal(r->status, 204);
    ty_resp_destroy(r);
    free(id);
}

/* The server is killed (SIGKILL) after the job's end committed and before any delivery
 * succeeded; after the restart the delivery is made, exactly once. */
static void test_kill_between_commit_and_delivery(void **state)
{
    (void)state;
    char err[1024];
    rx_mode(0, 1);
    subscribe("crash", "/crash", "[\"job.failed\"]");
    char *id = submit("notify-crash", "exit 7");
    json_t *d = wait_delivery("crash", NULL, 1);
    assert_string_equal(ty_json_str(d, "state"), "pending");
    int64_t delivery = json_integer_value(json_object_get(d, "id"));
    json_decref(d);
    ty_server_kill(g_srv);

    int total, ok, accepted;
    rx_count("/crash", &total, &ok, &accepted, NULL);
    assert_int_equal(accepted, 0);
    rx_mode(0, 0);
    if (ty_server_restart(g_srv, err, sizeof err))
        fail_msg("cannot restart the server: %s", err);
    ty_client_free(g_admin);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
    d = wait_delivery("crash", "delivered", 0);
    assert_int_equal(json_integer_value(json_object_get(d, "id")), delivery);
    assert_string_equal(ty_json_str(d, "job_id"), id);
    json_decref(d);
    rx_count("/crash", &total, &ok, &accepted, NULL);
    assert_int_equal(accepted, 1);
    assert_int_equal(ok, total);
    free(id);
}

/* Registration: 422 with field paths, 409 for a taken name, 404, and admin only. */
static void test_registration_errors_and_scope(void **state)
{
    (void)state;
    static const struct {
        const char *body, *path;
    } bad[] = {
        {"{\"name\": \"x\", \"url\": \"ftp://h/x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"" SECRET "\"}",
         "$.url"},
        {"{\"name\": \"x\", \"url\": \"http:///x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"" SECRET "\"}",
         "$.url"},
        {"{\"name\": \"x\", \"url\": \"http://h/x\", \"events\": [\"job.started\"], "
         "\"secret\": \"" SECRET "\"}",
         "$.events[0]"},
        {"{\"name\": \"x\", \"url\": \"http://h/x\", \"events\": [], \"secret\": \"" SECRET "\"}",
         "$.events"},
        {"{\"name\": \"x\", \"url\": \"http://h/x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"short\"}",
         "$.secret"},
        {"{\"name\": \"Not A Label\", \"url\": \"http://h/x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"" SECRET "\"}",
         "$.name"},
        {"{\"name\": \"x\", \"url\": \"http://h/x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"" SECRET "\", \"labels\": {\"team\": 3}}",
         "$.labels.team"},
        {"{\"name\": \"x\", \"url\": \"http://h/x\", \"events\": [\"job.failed\"], "
         "\"secret\": \"" SECRET "\", \"headers\": {}}",
         "$.headers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ty_http_resp *r = ty_req(g_admin, "POST", "/v1/notifications", bad[i].body);
        assert_int_equal(r->status, 422);
        assert_non_null(strstr(r->body, bad[i].path));
        ty_resp_destroy(r);
    }
    subscribe("dup", "/dup", "[\"job.finished\"]");
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/notifications",
                             "{\"name\": \"dup\", \"url\": \"http://h/x\", \"events\": "
                             "[\"job.failed\"], \"secret\": \"" SECRET "\"}");
    assert_int_equal(r->status, 409);
    ty_resp_destroy(r);
    r = ty_req(g_admin, "GET", "/v1/notifications", NULL);
    assert_int_equal(r->status, 200);
    assert_non_null(strstr(r->body, "\"dup\""));
    assert_null(strstr(r->body, SECRET));
    ty_resp_destroy(r);
    r = ty_req(g_admin, "DELETE", "/v1/notifications/nope", NULL);
    assert_int_equal(r->status, 404);
    ty_resp_destroy(r);

    /* A token that may read and submit is not an admin: 403 on every route. */
    r = ty_req(g_admin, "POST", "/v1/tokens",
               "{\"name\": \"worker\", \"scopes\": [\"read\", \"submit\"]}");
    assert_int_equal(r->status, 201);
    ty_client *user = ty_client_new(g_srv, ty_json_str(r->json, "token"));
    ty_resp_destroy(r);
    assert_non_null(user);
    static const char *const routes[][2] = {{"GET", "/v1/notifications"},
                                            {"POST", "/v1/notifications"},
                                            {"DELETE", "/v1/notifications/dup"},
                                            {"GET", "/v1/notifications/dup/deliveries"}};
    for (size_t i = 0; i < 4; i++) {
        r = ty_req(user, routes[i][0], routes[i][1],
                   !strcmp(routes[i][0], "POST") ? "{\"name\": \"mine\"}" : NULL);
        assert_int_equal(r->status, 403);
        ty_resp_destroy(r);
    }
    ty_client_free(user);
}

/* A secret that no longer opens (the key file was replaced) is recorded on the delivery as a
 * failed attempt, which backs off like any other instead of stopping the outbox. */
static void test_unreadable_secret_is_recorded(void **state)
{
    (void)state;
    char err[1024], key[512];
    rx_mode(0, 0);
    subscribe("sealed", "/sealed", "[\"job.finished\"]");
    ty_server_kill(g_srv);
    snprintf(key, sizeof key, "%s", ty_server_db(g_srv));
    char *slash = strrchr(key, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof key - (size_t)(slash - key), "/webhook-secrets.key");
    FILE *f = fopen(key, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("0123456789abcdef0123456789abcdef", 1, 32, f), 32);
    fclose(f);
    if (ty_server_restart(g_srv, err, sizeof err))
        fail_msg("cannot restart the server: %s", err);
    ty_client_free(g_admin);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
    char *id = submit("notify-sealed", "true");
    json_t *d = wait_delivery("sealed", NULL, 1);
    assert_string_equal(ty_json_str(d, "state"), "pending");
    assert_string_equal(ty_json_str(d, "last_error"), "the subscription's secret cannot be read");
    assert_non_null(json_object_get(d, "next_attempt_at"));
    json_decref(d);
    int total, ok, accepted;
    rx_count("/sealed", &total, &ok, &accepted, NULL);
    assert_int_equal(total, 0);
    free(id);
}

/* ---- no SSRF ------------------------------------------------------------------------ */

/* POSTs a subscription to url on server client c; returns the response (new). */
static ty_http_resp *try_subscribe(ty_client *c, const char *name, const char *url)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"url\": \"%s\", \"events\": [\"job.finished\"], "
             "\"secret\": \"" SECRET "\"}",
             name, url);
    return ty_req(c, "POST", "/v1/notifications", body);
}

/* A server without --notify-allow-private refuses, at registration, every URL whose host is
 * or resolves to an address that is not public, whatever its spelling; it accepts public
 * ones. */
static void test_private_urls_refused_at_registration(void **state)
{
    (void)state;
    char err[1024], own[256], url[256];
    ty_server *strict = NULL;
    if (ty_server_start(NULL, &strict, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    ty_client *admin = ty_client_new(strict, TY_TEST_ADMIN_TOKEN);
    assert_non_null(admin);
    snprintf(own, sizeof own, "%s/v1/jobs", ty_server_url(strict));
    /* Each with ":<port>/latest/meta-data/" after it. */
    static const char *const refused[] = {
        "http://127.0.0.1",
        "http://2130706433",
        "http://0x7f.1",
        "http://017700000001",
        "http://127.1",
        "http://localhost",
        "http://user:pw@127.0.0.1",
        "http://[::1]",
        "http://[::ffff:127.0.0.1]",
        "http://[::ffff:7f00:1]",
        "http://[64:ff9b::7f00:1]",
        "http://169.254.169.254",
        "http://2852039166",
        "http://[fd00:ec2::254]",
        "http://[::ffff:169.254.169.254]",
        "https://10.0.0.1",
        "http://172.16.3.4",
        "http://192.168.0.1",
        "http://100.64.0.1",
        "http://[fc00::1]",
        "http://[fe80::1]",
        "http://0.0.0.0",
        "http://[::]",
        "http://224.0.0.1",
        "http://255.255.255.255",
        "http://%31%32%37.0.0.1",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0] + 1; i++) {
        if (i < sizeof refused / sizeof refused[0])
            snprintf(url, sizeof url, "%s:%d/latest/meta-data/", refused[i], g_rx.port);
        else
            snprintf(url, sizeof url, "%s", own); /* the server's own API */
        ty_http_resp *r = try_subscribe(admin, "ssrf", url);
        if (r->status != 422 || !strstr(r->body, "$.url") ||
            (!strstr(r->body, "not public") && !strstr(r->body, "percent")))
            fail_msg("%s: %ld %s", url, r->status, r->body);
        ty_resp_destroy(r);
    }
    /* Public addresses are accepted (and deleted at once: nothing is sent to them). */
    static const char *const accepted[] = {"http://1.1.1.1:9/hook",
                                           "https://[2606:4700:4700::1111]/hook"};
    for (size_t i = 0; i < 2; i++) {
        ty_http_resp *r = try_subscribe(admin, "public", accepted[i]);
        if (r->status != 201)
            fail_msg("%s: %ld %s", accepted[i], r->status, r->body);
        ty_resp_destroy(r);
        r = ty_req(admin, "DELETE", "/v1/notifications/public", NULL);
        assert_int_equal(r->status, 204);
        ty_resp_destroy(r);
    }
    ty_client_free(admin);
    ty_server_free(strict);
}

/* Writes text over the file at path (in place: a bind mount holds its inode). */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* A name that was public at registration and resolves to loopback at delivery: the attempt
 * connects nowhere and is recorded with why; the receiver gets nothing. */
static void test_dns_loopback_refused_at_delivery(void **state)
{
    (void)state;
    char err[1024], hosts[] = "/tmp/ty-notify-hosts-XXXXXX", url[128];
    if (geteuid() != 0) {
        print_message("skipped: a private /etc/hosts needs a mount namespace (root)\n");
        skip();
    }
    int fd = mkstemp(hosts);
    assert_true(fd >= 0);
    close(fd);
    write_file(hosts, "127.0.0.1 localhost\n1.1.1.1 hook.trainyard.test\n");
    /* This thread (the one the servers are forked from) gets its own mounts. */
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL) != 0) {
        print_message("skipped: cannot bind a private /etc/hosts: %s\n", strerror(errno));
        unlink(hosts);
        skip();
    }
    ty_server *strict = NULL;
    if (ty_server_start(NULL, &strict, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    ty_client *admin = ty_client_new(strict, TY_TEST_ADMIN_TOKEN);
    assert_non_null(admin);
    snprintf(url, sizeof url, "http://hook.trainyard.test:%d/rebound", g_rx.port);
    ty_http_resp *r = try_subscribe(admin, "rebound", url);
    if (r->status != 201)
        fail_msg("%s at registration: %ld %s", url, r->status, r->body);
    ty_resp_destroy(r);

    write_file(hosts, "127.0.0.1 localhost\n127.0.0.1 hook.trainyard.test\n");
    struct addrinfo hints = {.ai_family = AF_INET}, *ai = NULL;
    assert_int_equal(getaddrinfo("hook.trainyard.test", NULL, &hints, &ai), 0);
    assert_int_equal(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr, htonl(0x7f000001));
    freeaddrinfo(ai);

    rx_mode(0, 0);
    ty_client *saved = g_admin;
    g_admin = admin; /* submit() and wait_delivery() talk to the strict server */
    char *id = submit("notify-rebound", "true");
    json_t *d = wait_delivery("rebound", NULL, 1);
    g_admin = saved;
    assert_string_equal(ty_json_str(d, "job_id"), id);
    assert_string_equal(ty_json_str(d, "state"), "pending"); /* retried: DNS may change back */
    assert_null(json_object_get(d, "last_status"));
    const char *why = ty_json_str(d, "last_error");
    if (!why || !strstr(why, "address 127.0.0.1 is not public"))
        fail_msg("last_error: %s", why ? why : "(none)");
    int total, ok, accepted;
    rx_count("/rebound", &total, &ok, &accepted, NULL);
    assert_int_equal(total, 0);
    json_decref(d);
    free(id);
    ty_client_free(admin);
    ty_server_free(strict);
    umount("/etc/hosts");
    unlink(hosts);
}

/* ---- main --------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    char err[1024];
    g_rx.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                              NULL, NULL, rx_handle, NULL, MHD_OPTION_NOTIFY_COMPLETED, rx_done,
                              NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
    assert_non_null(g_rx.d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_rx.d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    g_rx.port = info->port;
    /* The receiver is on loopback: this server must be allowed to send there. */
    static const char *const args[] = {"--notify-allow-private", NULL};
    const ty_server_opts opts = {.args = args};
    if (ty_server_start(&opts, &g_srv, err, sizeof err))
        fail_msg("cannot start the server: %s", err);
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(g_admin);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ty_client_free(g_admin);
    ty_server_free(g_srv);
    MHD_stop_daemon(g_rx.d);
    for (size_t i = 0; i < g_rx.nseen; i++)
        json_decref(g_rx.seen[i].body);
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retries_until_delivered_once),
        cmocka_unit_test(test_deleted_subscription_gets_nothing),
        cmocka_unit_test(test_kill_between_commit_and_delivery),
        cmocka_unit_test(test_registration_errors_and_scope),
        cmocka_unit_test(test_unreadable_secret_is_recorded),
        cmocka_unit_test(test_private_urls_refused_at_registration),
        cmocka_unit_test(test_dns_loopback_refused_at_delivery), /* last: it changes mounts */
    };
    if (ty_harness_init(argc, argv, err, sizeof err)) {
        fprintf(stderr, "test_notifications: %s\n", err);
        return 2;
    }
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    ty_harness_cleanup();
    return rc;
}
