/*
 * test_web.c - the web page in a real browser: headless Chromium driven through chromedriver's
 * WebDriver API (W3C WebDriver: JSON over HTTP, spoken here with libcurl), against the real
 * `trainyard serve` on loopback with a temporary database.
 *
 * Usage: test_web TRAINYARD_BINARY OPENAPI_YAML ARTIFACT_DIR (CTest passes all three).
 * Screenshots (PNG) of what the cases saw are written to ARTIFACT_DIR. Every case skips, saying
 * why, where chromium or chromedriver is not installed (scripts/install-deps installs both).
 *
 * The cases read the page the way a user does (rows, text, charts) plus a few data attributes
 * the page sets for this purpose: body[data-view] (login, jobs, job, compare, sweeps, sweep,
 * teams, cluster), #pending[data-reason, data-position, data-team-position] (a waiting job's place),
 * section[data-team] and its tr[data-resource] (the Teams view), #cluster-zones and
 * #cluster-quarantined (the Cluster view), #metrics div.metric[data-series, data-kind] (a job's
 * metric series: "chart", or "value" for a series of one point) and #metrics-note, #cancel-job,
 * #job-actions, #cancel-dialog with #cancel-keep and #cancel-confirm, and #cancel-error (the
 * job page's Cancel),
 * body[data-ready] ("1" once a view has drawn what it fetched), #live[data-mode] ("live" while
 * its event stream is connected), and window.trainyard (the SSE parser, Chart.js instances, CSP
 * violations seen).
 * Waits are bounded by deadlines, never measured.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/ty_net.h"
#include "tests/support/ty_harness.h"

extern char **environ;

#define WAIT_MS 20000 /* the longest any wait for the page may take before the case fails */
#define PAYLOAD_SCRIPT "<script>window.__xss=1</script>"
#define PAYLOAD_IMG "<img src=x onerror=\"window.__xss=1\">"

static const char *g_artifacts;
static char g_chromium[512], g_chromedriver[512];
static char g_skip[256]; /* why the cases skip; "" when the browser runs */
static ty_server *g_srv;
static ty_client *g_admin;
static pid_t g_driver_pid = -1;
static char g_driver_url[64];
static char g_session[128];
static int g_counter;

/* ---- helpers ------------------------------------------------------------- */

/* A unique job name "<prefix>-<n>" in a buffer reused after eight calls. */
static const char *uniq(const char *prefix)
{
    static char buf[8][64];
    static int slot;
    char *b = buf[slot++ % 8];
    snprintf(b, 64, "%s-%d", prefix, ++g_counter);
    return b;
}

/* The first executable named `name` along PATH (or in /usr/bin) into out; 0 when found. */
static int find_program(const char *name, char *out, size_t outlen)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (snprintf(out, outlen, "%s/%s", d, name) < (int)outlen && access(out, X_OK) == 0)
            return 0;
    }
    out[0] = '\0';
    return -1;
}

#define SKIP_WITHOUT_BROWSER()                                                                     \
    do {                                                                                           \
        if (g_skip[0]) {                                                                           \
            print_message("[  SKIP    ] %s\n", g_skip);                                            \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- WebDriver ----------------------------------------------------------- */

typedef struct membuf {
    char *p;
    size_t n;
} membuf;

static size_t collect(char *data, size_t size, size_t nmemb, void *ud)
{
    membuf *b = ud;
    size_t add = size * nmemb;
    char *p = realloc(b->p, b->n + add + 1);
    if (!p)
        return 0;
    memcpy(p + b->n, data, add);
    b->p = p;
    b->n += add;
    b->p[b->n] = '\0';
    return add;
}

/*
 * One WebDriver command: method on g_driver_url + path, body (stolen, may be NULL). Returns
 * the answer's "value" (new) and 0, or -1 with the reason in err (a transport error, or the
 * driver's error and message).
 */
static int wd_try(const char *method, const char *path, json_t *body, json_t **value, char *err,
                  size_t errlen)
{
    CURL *c = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    membuf resp = {0};
    char url[512], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    long status = 0;
    int rc = -1;
    json_t *doc = NULL;

    *value = NULL;
    json_decref(body);
    if (!c || !hdr || (body && !text)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    snprintf(url, sizeof url, "%s%s", g_driver_url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 90L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (text)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    CURLcode ce = curl_easy_perform(c);
    if (ce != CURLE_OK) {
        snprintf(err, errlen, "%s %s: %s", method, path, curl_easy_strerror(ce));
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    doc = json_loadb(resp.p ? resp.p : "", resp.n, 0, NULL);
    json_t *v = json_object_get(doc, "value");
    if (status != 200 || !v) {
        snprintf(err, errlen, "%s %s: HTTP %ld: %s: %.400s", method, path, status,
                 json_string_value(json_object_get(v, "error")) ?: "?",
                 json_string_value(json_object_get(v, "message")) ?: (resp.p ? resp.p : ""));
        goto out;
    }
    *value = json_incref(v);
    rc = 0;
out:
    json_decref(doc);
    free(text);
    free(resp.p);
    curl_slist_free_all(hdr);
    if (c)
        curl_easy_cleanup(c);
    return rc;
}

static void screenshot(const char *name);

/* wd_try() on the session, failing the test on any error; returns new. */
#define wd(method, path, body) wd_at(__LINE__, (method), (path), (body))
static json_t *wd_at(int line, const char *method, const char *path, json_t *body)
{
    char full[512], err[1024];
    json_t *v;
    snprintf(full, sizeof full, "/session/%s%s", g_session, path);
    if (wd_try(method, full, body, &v, err, sizeof err) < 0)
        fail_msg("line %d: webdriver: %s", line, err);
    return v;
}

/* Runs script in the page (arguments[0] is arg, stolen, may be NULL); returns its value (new). */
#define js(script, arg) js_at(__LINE__, (script), (arg))
static json_t *js_at(int line, const char *script, json_t *arg)
{
    json_t *args = json_array();
    if (arg)
        json_array_append_new(args, arg);
    return wd_at(line, "POST", "/execute/sync",
                 json_pack("{s:s, s:o}", "script", script, "args", args));
}

/* js() of an expression that must be true. */
#define js_true(expr, arg) js_true_at(__LINE__, (expr), (arg))
static void js_true_at(int line, const char *expr, json_t *arg)
{
    char script[4096];
    snprintf(script, sizeof script, "return !!(%s);", expr);
    json_t *v = js_at(line, script, arg);
    if (!json_is_true(v))
        fail_msg("line %d: not true in the page: %s", line, expr);
    json_decref(v);
}

/* Waits until expr (with arguments[0] = arg, borrowed) is true in the page. */
#define wait_js(expr, arg, what) wait_js_at(__LINE__, (expr), (arg), (what))
static void wait_js_at(int line, const char *expr, const json_t *arg, const char *what)
{
    char script[4096];
    int64_t deadline = ty_now_ms() + WAIT_MS;
    /* A view that failed says so at once (data-ready="error"): no use waiting for it. */
    snprintf(script, sizeof script,
             "if (document.body.dataset.ready === 'error') return 'error';"
             "try { return !!(%s); } catch (e) { return false; }",
             expr);
    for (;;) {
        json_t *v = js_at(line, script, arg ? json_deep_copy(arg) : NULL);
        int ok = json_is_true(v), failed = json_is_string(v);
        json_decref(v);
        if (ok)
            return;
        if (failed || ty_now_ms() > deadline) {
            json_t *seen = js_at(line, "return document.body.innerText.slice(0, 600);", NULL);
            char shot[64];
            snprintf(shot, sizeof shot, "failed-line-%d.png", line);
            screenshot(shot);
            fail_msg("line %d: waited %d ms for %s (%s); the page shows: %s", line, WAIT_MS, what,
                     expr, json_string_value(seen) ? json_string_value(seen) : "?");
        }
        ty_sleep_ms(100);
    }
}

static void navigate(const char *hash)
{
    char url[512];
    snprintf(url, sizeof url, "%s/%s", ty_server_url(g_srv), hash);
    json_decref(wd("POST", "/url", json_pack("{s:s}", "url", url)));
}

/* Goes to a view (a hash route) and waits until it has drawn what it fetched. */
static void open_view(const char *hash, const char *view)
{
    char expr[256];
    json_decref(js("location.hash = arguments[0];", json_string(hash)));
    snprintf(expr, sizeof expr,
             "document.body.dataset.view === '%s' && document.body.dataset.ready === '1'", view);
    wait_js(expr, NULL, hash);
}

/* The WebDriver id of the first element matching css. */
static char *find(const char *css)
{
    json_t *v =
        wd("POST", "/element", json_pack("{s:s, s:s}", "using", "css selector", "value", css));
    const char *key;
    json_t *id;
    char *out = NULL;
    json_object_foreach(v, key, id) out = strdup(json_string_value(id));
    json_decref(v);
    assert_non_null(out);
    return out;
}

static void click(const char *css)
{
    char path[256], *id = find(css);
    snprintf(path, sizeof path, "/element/%s/click", id);
    json_decref(wd("POST", path, json_object()));
    free(id);
}

static void type_into(const char *css, const char *text)
{
    char path[256], *id = find(css);
    snprintf(path, sizeof path, "/element/%s/value", id);
    json_decref(wd("POST", path, json_pack("{s:s}", "text", text)));
    free(id);
}

/* Saves what the browser shows as ARTIFACT_DIR/name (PNG). */
static void screenshot(const char *name)
{
    json_t *v = wd("GET", "/screenshot", NULL);
    const char *b64 = json_string_value(v);
    char path[1024];
    assert_non_null(b64);
    size_t len = strlen(b64);
    unsigned char *png = malloc(len / 4 * 3 + 3);
    assert_non_null(png);
    int n = EVP_DecodeBlock(png, (const unsigned char *)b64, (int)len);
    assert_true(n > 8);
    /* EVP_DecodeBlock counts the padding's zero bytes; a PNG's IEND chunk ends it. */
    while (len > 0 && b64[len - 1] == '=') {
        n--;
        len--;
    }
    assert_memory_equal(png, "\x89PNG", 4);
    snprintf(path, sizeof path, "%s/%s", g_artifacts, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(png, 1, (size_t)n, f), (size_t)n);
    assert_int_equal(fclose(f), 0);
    print_message("[ ARTEFACT ] %s\n", path);
    free(png);
    json_decref(v);
}

/* ---- the driver and the browser ------------------------------------------ */

static void driver_stop(void)
{
    char err[256];
    json_t *v;
    if (g_session[0]) {
        char path[256];
        snprintf(path, sizeof path, "/session/%s", g_session);
        if (wd_try("DELETE", path, NULL, &v, err, sizeof err) == 0)
            json_decref(v);
    }
    g_session[0] = '\0';
    if (g_driver_pid > 0) {
        kill(g_driver_pid, SIGTERM);
        waitpid(g_driver_pid, NULL, 0);
    }
    g_driver_pid = -1;
}

/* Starts chromedriver on a free loopback port and a headless Chromium session through it. */
static int driver_start(char *err, size_t errlen)
{
    char port_arg[32], log_arg[1100];
    int port = ty_net_free_port();
    if (port < 0) {
        snprintf(err, errlen, "no free port for chromedriver");
        return -1;
    }
    snprintf(port_arg, sizeof port_arg, "--port=%d", port);
    snprintf(log_arg, sizeof log_arg, "--log-path=%s/chromedriver.log", g_artifacts);
    snprintf(g_driver_url, sizeof g_driver_url, "http://127.0.0.1:%d", port);
    char *const argv[] = {g_chromedriver, port_arg, log_arg, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&g_driver_pid, g_chromedriver, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        g_driver_pid = -1;
        snprintf(err, errlen, "%s: %s", g_chromedriver, strerror(rc));
        return -1;
    }
    /* Ready when /status says so. */
    int64_t deadline = ty_now_ms() + 30000;
    for (;;) {
        json_t *v = NULL;
        if (wd_try("GET", "/status", NULL, &v, err, errlen) == 0 &&
            json_is_true(json_object_get(v, "ready"))) {
            json_decref(v);
            break;
        }
        json_decref(v);
        if (ty_now_ms() > deadline || waitpid(g_driver_pid, NULL, WNOHANG) == g_driver_pid) {
            snprintf(err, errlen, "chromedriver did not get ready (see %s/chromedriver.log)",
                     g_artifacts);
            return -1;
        }
        ty_sleep_ms(100);
    }
    /* We run as root in CI: Chromium's sandbox needs a user namespace it may not get. */
    json_t *caps = json_pack("{s:{s:{s:s, s:{s:s, s:[s,s,s,s,s,s]}}}}", "capabilities",
                             "alwaysMatch", "browserName", "chrome", "goog:chromeOptions", "binary",
                             g_chromium, "args", "--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,900", "--lang=en-US");
    json_t *v = NULL;
    if (wd_try("POST", "/session", caps, &v, err, errlen) < 0)
        return -1;
    const char *sid = json_string_value(json_object_get(v, "sessionId"));
    snprintf(g_session, sizeof g_session, "%s", sid ? sid : "");
    json_decref(v);
    if (!g_session[0]) {
        snprintf(err, errlen, "chromedriver answered a session without an id");
        return -1;
    }
    return 0;
}

/* The page itself (its files, Chart.js) did nothing the policy refused. */
static void expect_no_violation(void)
{
    json_t *v = js("return JSON.stringify(window.trainyard.cspViolations);", NULL);
    if (strcmp(json_string_value(v) ? json_string_value(v) : "", "[]") != 0)
        fail_msg("the page broke its Content-Security-Policy: %s", json_string_value(v));
    json_decref(v);
}

/* ---- jobs ------------------------------------------------------------------ */

/* Submits spec (stolen) as the admin; returns the job's id (static buffer of the caller). */
static void submit(json_t *spec, char id[32])
{
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/jobs", body);
    free(body);
    if (r->status != 201)
        fail_msg("submit: HTTP %ld: %.400s", r->status, r->body);
    snprintf(id, 32, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);
}

static void cancel(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    ty_resp_destroy(ty_req(g_admin, "POST", path, NULL));
}

/* Whether the server's contract (openapi.yaml) has this path: routes not built yet are not. */
static int documented(const char *path)
{
    return json_object_get(json_object_get(oas_doc(ty_harness_oas()), "paths"), path) != NULL;
}

/* ---- cases --------------------------------------------------------------- */

/*
 * The page asks for a token, keeps it in sessionStorage only, and asks again when the server
 * refuses it.
 */
static void test_token_form(void **state)
{
    (void)state;
    SKIP_WITHOUT_BROWSER();
    navigate("#/jobs");
    wait_js("document.body.dataset.view === 'login'", NULL, "the token form");
    js_true("!document.getElementById('login').hidden", NULL);
    screenshot("login.png");

    type_into("#login-token", "ty_this_is_not_a_token_of_this_server_000000000");
    click("#login-form button[type=submit]");
    wait_js("document.body.dataset.view === 'login' && "
            "document.getElementById('login-error').textContent.includes('401')",
            NULL, "the refused token to be asked for again");
    js_true("sessionStorage.getItem('trainyard.token') === null", NULL);

    type_into("#login-token", TY_TEST_ADMIN_TOKEN);
    click("#login-form button[type=submit]");
    wait_js("document.body.dataset.view === 'jobs' && document.body.dataset.ready === '1'", NULL,
            "the jobs table");
    js_true("sessionStorage.getItem('trainyard.token') === arguments[0]",
            json_string(TY_TEST_ADMIN_TOKEN));
    js_true("localStorage.length === 0 && !document.cookie", NULL);
}

/* (a) A job submitted while the table is open appears, and changes state, without a reload. */
static void test_jobs_table_live(void **state)
{
    static const struct {
        const char *name, *lr, *script;
    } others[] = {
        {"fmnist-sgd-lr-0.1", "0.1", "sleep 120"},
        {"fmnist-sgd-lr-0.05", "0.05", "exit 0"},
        {"fmnist-adam-lr-0.001", "0.001", "echo diverged >&2; exit 3"},
    };
    char id[32], id2[32], other[32], expr[512];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/events")) {
        print_message("[  SKIP    ] GET /v1/events (the event stream) is not on this server yet; "
                      "the table's live updates need it\n");
        skip();
    }
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        submit(json_pack("{s:s, s:{s:s, s:s}, s:[s,s,s], s:[s,s], s:{s:i}}", "name", others[i].name,
                         "labels", "sweep", "lr-grid", "team", "vision", "command", "sh", "-c",
                         others[i].script, "args", "--lr", others[i].lr, "workers", "count", 2),
               other);
    open_view("#/jobs", "jobs");
    wait_js("document.getElementById('live').dataset.mode === 'live'", NULL, "the event stream");
    json_decref(js("window.__sameDocument = 1;", NULL));

    const char *name = uniq("live");
    submit(json_pack("{s:s, s:{s:s}, s:[s,s,s], s:{s:i}}", "name", name, "labels", "case", "live",
                     "command", "sh", "-c", "exit 0", "workers", "count", 1),
           id);
    snprintf(expr, sizeof expr, "document.querySelector('#jobs tr[data-id=\"%s\"]')", id);
    wait_js(expr, NULL, "the submitted job's row");
    snprintf(expr, sizeof expr,
             "document.querySelector('#jobs tr[data-id=\"%s\"] td.name').textContent === "
             "arguments[0]",
             id);
    js_true(expr, json_string(name));
    snprintf(expr, sizeof expr,
             "document.querySelector('#jobs tr[data-id=\"%s\"]').dataset.state === 'SUCCEEDED'",
             id);
    wait_js(expr, NULL, "the row to show SUCCEEDED");

    /*
     * A drop: the connection is cut and held down while a job is submitted and runs; the
     * stream that reconnects with Last-Event-ID brings its events.
     */
    json_decref(js("window.trainyard.dropStreams();", NULL));
    wait_js("document.getElementById('live').dataset.mode === 'reconnecting'", NULL,
            "the stream to drop");
    submit(json_pack("{s:s, s:{s:s}, s:[s,s,s], s:{s:i}}", "name", uniq("resumed"), "labels",
                     "case", "live", "command", "sh", "-c", "exit 3", "workers", "count", 1),
           id2);
    snprintf(expr, sizeof expr, "/v1/jobs/%s", id2);
    for (int64_t deadline = ty_now_ms() + WAIT_MS;;) {
        ty_http_resp *r = ty_req(g_admin, "GET", expr, NULL);
        int failed = strcmp(ty_json_str(r->json, "state"), "FAILED") == 0;
        ty_resp_destroy(r);
        if (failed)
            break;
        if (ty_now_ms() > deadline)
            fail_msg("the job that exits 3 did not fail");
        ty_sleep_ms(100);
    }
    js_true("!document.querySelector('#jobs tr[data-id=\"' + arguments[0] + '\"]')",
            json_string(id2));
    json_decref(js("window.trainyard.resumeStreams();", NULL));
    snprintf(expr, sizeof expr,
             "document.querySelector('#jobs tr[data-id=\"%s\"]').dataset.state === 'FAILED'", id2);
    wait_js(expr, NULL, "the job submitted during the drop, FAILED");
    wait_js("document.getElementById('live').dataset.mode === 'live'", NULL, "the stream back");
    js_true("window.__sameDocument === 1", NULL);
    expect_no_violation();
    screenshot("jobs.png");
}

/* The filters narrow the table as GET /v1/jobs does, from the form or from the address. */
static void test_jobs_filters(void **state)
{
    (void)state;
    SKIP_WITHOUT_BROWSER();
    open_view("#/jobs?label=sweep%3Dlr-grid", "jobs");
    js_true("document.querySelectorAll('#jobs tbody tr').length >= 3", NULL);
    js_true("[...document.querySelectorAll('#jobs tbody tr td.labels')]"
            ".every((td) => td.textContent.includes('sweep=lr-grid'))",
            NULL);
    /* The form: FAILED among them is the job that exited 3. */
    json_decref(js("const f = document.querySelector('form.filters');"
                   "f.querySelector('select[name=state]').value = 'FAILED';"
                   "f.requestSubmit();",
                   NULL));
    wait_js("location.hash === '#/jobs?state=FAILED&label=sweep%3Dlr-grid' && "
            "document.body.dataset.ready === '1'",
            NULL, "the filtered table");
    js_true("[...document.querySelectorAll('#jobs tbody tr')].map((tr) => "
            "tr.querySelector('td.name').textContent).join() === 'fmnist-adam-lr-0.001'",
            NULL);
}

/*
 * POSTs n points (steps 10 * (from..from+n-1)) of loss and accuracy for job id as the admin;
 * rate says how fast the loss falls.
 */
static void post_points(const char *id, int from, int n, double rate)
{
    json_t *points = json_array();
    char path[128];
    for (int s = from; s < from + n; s++)
        json_array_append_new(points, json_pack("{s:i, s:f, s:f}", "step", s * 10, "loss",
                                                2.5 / (1.0 + s * rate), "accuracy",
                                                0.1 + 0.8 * s / (s + 2.0 / rate)));
    json_t *body = json_pack("{s:o}", "points", points);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", id);
    ty_http_resp *r = ty_req(g_admin, "POST", path, text);
    free(text);
    if (r->status != 200)
        fail_msg("POST %s: HTTP %ld: %.400s", path, r->status, r->body);
    ty_resp_destroy(r);
}

/* (b) A job page draws the reported points, and the points reported while it is open. */
static void test_job_chart(void **state)
{
    char id[32], hash[64];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/jobs/{id}/metrics")) {
        print_message("[  SKIP    ] /v1/jobs/{id}/metrics is not on this server yet; "
                      "the job page's charts need it\n");
        skip();
    }
    submit(json_pack("{s:s, s:{s:s, s:s}, s:[s,s,s], s:[s,s,s,s], s:{s:i}}", "name",
                     "fmnist-adam-lr-0.003", "labels", "sweep", "lr-grid", "team", "vision",
                     "command", "sh", "-c", "sleep 120", "args", "--optimizer", "adam", "--lr",
                     "0.003", "workers", "count", 2),
           id);
    post_points(id, 0, 50, 0.1);
    snprintf(hash, sizeof hash, "#/jobs/%s", id);
    open_view(hash, "job");
    const char *chart = "Chart.getChart(document.getElementById('chart-loss'))";
    char expr[512];
    snprintf(expr, sizeof expr, "%s && %s.data.datasets[0].data.length === 50", chart, chart);
    wait_js(expr, NULL, "the loss chart's 50 points");
    /* The chart holds what was reported: steps in order, first and last values. */
    json_t *pts = js("const d = Chart.getChart(document.getElementById('chart-loss'))"
                     ".data.datasets[0].data; return [d[0].x, d[0].y, d[49].x, d[49].y];",
                     NULL);
    assert_int_equal(json_integer_value(json_array_get(pts, 0)), 0);
    assert_true(json_real_value(json_array_get(pts, 1)) == 2.5);
    assert_int_equal(json_integer_value(json_array_get(pts, 2)), 490);
    /* The server may print fewer digits than a double has. */
    double last = json_number_value(json_array_get(pts, 3)), want = 2.5 / (1.0 + 49 * 0.1);
    assert_true(last > want * (1 - 1e-6) && last < want * (1 + 1e-6));
    json_decref(pts);
    js_true("Chart.getChart(document.getElementById('chart-accuracy'))"
            ".data.datasets[0].data.length === 50",
            NULL);

    /* Points reported now reach the open page through the job's stream. */
    wait_js("document.getElementById('live').dataset.mode === 'live'", NULL, "the job stream");
    post_points(id, 50, 10, 0.1);
    snprintf(expr, sizeof expr, "%s.data.datasets[0].data.length === 60", chart);
    wait_js(expr, NULL, "the chart to grow to 60 points");
    /* A long run: past 4,000 points the chart reads the series downsampled again. */
    post_points(id, 60, 4000, 0.1);
    snprintf(expr, sizeof expr,
             "%s.data.datasets[0].data.length <= 1000 && %s.data.datasets[0].data[0].x === 0 && "
             "%s.data.datasets[0].data.at(-1).x === 40590",
             chart, chart, chart);
    wait_js(expr, NULL, "the chart to hold the long run downsampled, first and last points kept");
    expect_no_violation();
    screenshot("job.png");
    cancel(id);
}

/*
 * Puts a name and labels on job id that the API would refuse (a row written by something else
 * than the API): the page must not rely on validation to render them as text.
 */
static void poke_hostile_row(const char *id)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    const char *sql = "UPDATE jobs SET name = ?1, spec = json_set(spec, '$.name', ?1, '$.labels',"
                      " json_object('team', ?2, 'note', ?1)) WHERE id = ?3";
    assert_int_equal(sqlite3_open_v2(ty_server_db(g_srv), &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, PAYLOAD_SCRIPT, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, PAYLOAD_IMG, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    assert_int_equal(sqlite3_changes(db), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Nothing of the payloads became an element, and nothing ran. */
static void expect_nothing_ran(void)
{
    js_true("typeof window.__xss === 'undefined'", NULL);
    js_true("document.querySelectorAll('#view script, #view img, #view iframe, "
            "#view [onerror]').length === 0",
            NULL);
}

/* (c) Names, labels, env, args and log lines holding markup are shown as text. */
static void test_hostile_strings_are_text(void **state)
{
    char id[32], hash[64], expr[512];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    /* What the API accepts: markup in env values, args and what the job prints. */
    submit(json_pack("{s:s, s:{s:s}, s:[s,s,s], s:[s,s], s:{s:s}, s:{s:i}}", "name",
                     uniq("hostile"), "labels", "case", "hostile", "command", "sh", "-c",
                     "echo \"$NOTE\"; echo '" PAYLOAD_SCRIPT "'; sleep 120", "args", PAYLOAD_SCRIPT,
                     PAYLOAD_IMG, "env", "NOTE", PAYLOAD_IMG, "workers", "count", 1),
           id);
    poke_hostile_row(id);

    open_view("#/jobs", "jobs");
    snprintf(expr, sizeof expr, "document.querySelector('#jobs tr[data-id=\"%s\"]')", id);
    wait_js(expr, NULL, "the hostile job's row");
    snprintf(expr, sizeof expr,
             "document.querySelector('#jobs tr[data-id=\"%s\"] td.name').textContent === "
             "arguments[0]",
             id);
    js_true(expr, json_string(PAYLOAD_SCRIPT));
    snprintf(expr, sizeof expr,
             "document.querySelector('#jobs tr[data-id=\"%s\"] td.labels').textContent"
             ".includes(arguments[0])",
             id);
    js_true(expr, json_string("team=" PAYLOAD_IMG));
    expect_nothing_ran();

    snprintf(hash, sizeof hash, "#/jobs/%s", id);
    open_view(hash, "job");
    js_true("document.querySelector('.jobhead h1').textContent.startsWith(arguments[0])",
            json_string(PAYLOAD_SCRIPT));
    js_true("document.getElementById('spec').textContent.includes(arguments[0])",
            json_string("\"NOTE\": \"<img src=x onerror=\\\"window.__xss=1\\\">\""));
    /* The rank's log, followed live, holds both payloads as text. */
    wait_js("document.querySelector('.attempt')", NULL, "the job's attempt");
    json_decref(js("[...document.querySelectorAll('button')]"
                   ".find((b) => b.textContent === 'Follow rank 0').click();",
                   NULL));
    json_t *both = json_pack("[s,s]", PAYLOAD_SCRIPT, PAYLOAD_IMG);
    wait_js("document.querySelector('pre.log').textContent.includes(arguments[0][0]) && "
            "document.querySelector('pre.log').textContent.includes(arguments[0][1])",
            both, "the payloads in the log");
    json_decref(both);
    expect_nothing_ran();
    screenshot("hostile.png");
    /* Not through cancel(): the answer holds the name that the contract refuses. */
    ty_http_req req = {.method = "POST", .path = NULL};
    char path[128];
    ty_http_resp r = {0};
    snprintf(path, sizeof path, "/v1/jobs/%s:cancel", id);
    req.path = path;
    assert_int_equal(ty_http_do(g_admin, &req, &r, expr, sizeof expr), TY_HTTP_ECONTRACT);
    assert_int_equal(r.status, 200);
    ty_resp_free(&r);
}

/* (d) The page's files carry the policy, and the browser enforces it: inline script is refused. */
static void test_csp(void **state)
{
    static const char *const paths[] = {"/", "/ui/app.js", "/ui/style.css", "/ui/chart.js"};
    (void)state;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        ty_http_req req = {.method = "GET", .path = paths[i], .token = ""};
        ty_http_resp *r = ty_reqx(g_admin, &req);
        assert_int_equal(r->status, 200);
        const char *csp = ty_resp_header(r, "Content-Security-Policy");
        assert_non_null(csp);
        assert_non_null(strstr(csp, "default-src 'self'"));
        assert_non_null(strstr(csp, "script-src 'self';"));
        assert_non_null(strstr(csp, "style-src 'self';"));
        assert_null(strstr(csp, "unsafe"));
        assert_string_equal(ty_resp_header(r, "X-Content-Type-Options"), "nosniff");
        ty_resp_destroy(r);
    }
    SKIP_WITHOUT_BROWSER();
    open_view("#/jobs", "jobs");
    json_decref(js("const s = document.createElement('script');"
                   "s.textContent = 'window.__inline = 1';"
                   "document.body.appendChild(s);"
                   "const d = document.createElement('div');"
                   "d.setAttribute('style', 'color: rgb(255, 0, 0)');"
                   "d.id = 'inline-style';"
                   "document.body.appendChild(d);",
                   NULL));
    js_true("typeof window.__inline === 'undefined'", NULL);
    js_true("getComputedStyle(document.getElementById('inline-style')).color !== "
            "'rgb(255, 0, 0)'",
            NULL);
    wait_js("window.trainyard.cspViolations.some((v) => v.directive.startsWith('script-src'))",
            NULL, "the browser to report the refused inline script");
    /* A script the page did not come with cannot be loaded from elsewhere either. */
    json_decref(js("const s = document.createElement('script');"
                   "s.src = 'http://127.0.0.2:9/x.js'; document.body.appendChild(s);",
                   NULL));
    wait_js("window.trainyard.cspViolations.some((v) => v.blocked.includes('127.0.0.2'))", NULL,
            "the browser to refuse a foreign script");
    /* The cases after this one start from a document without these violations. */
    json_decref(wd("POST", "/refresh", json_object()));
    wait_js("document.body.dataset.ready === '1' && window.trainyard.cspViolations.length === 0",
            NULL, "the page to load again");
}

/* The page's event-stream parser: chunks cut anywhere, CR, LF and CRLF, comments, ids. */
static void test_sse_parser(void **state)
{
    (void)state;
    SKIP_WITHOUT_BROWSER();
    open_view("#/jobs", "jobs");
    json_t *got =
        js("const out = [];"
           "const p = new window.trainyard.SseParser((e) => out.push([e.event, e.id, e.data]));"
           "const text = ': ping\\r\\nid: 7\\r\\nevent: job\\r\\n'"
           " + 'data: {\"a\":\\r\\ndata: 1}\\r\\n\\r\\n'"
           " + 'data: no type\\n\\n' + 'id: 9.3\\revent: metrics\\rdata:x\\r\\r'"
           " + 'event: empty\\n\\n' + 'id\\ndata: after\\n\\n';"
           "p.push(text);"
           "const whole = JSON.stringify(out);"
           "for (let cut = 1; cut < text.length; cut++) {"
           "  out.length = 0;"
           "  const q = new window.trainyard.SseParser((e) => out.push([e.event, e.id, e.data]));"
           "  q.push(text.slice(0, cut));"
           "  q.push(text.slice(cut));"
           "  if (JSON.stringify(out) !== whole)"
           "    return 'differs when cut at ' + cut + ': ' + JSON.stringify(out);"
           "}"
           "return whole;",
           NULL);
    assert_string_equal(json_string_value(got),
                        "[[\"job\",\"7\",\"{\\\"a\\\":\\n1}\"],[\"message\",\"7\",\"no type\"],"
                        "[\"metrics\",\"9.3\",\"x\"],[\"message\",\"\",\"after\"]]");
    json_decref(got);
}

/* The compare view overlays the runs of a label and names each by what differs. */
static void test_compare(void **state)
{
    char ids[3][32];
    static const char *const lrs[] = {"0.1", "0.05", "0.01"};
    static const char *const names[] = {"fmnist-sgd-lr-0.1", "fmnist-sgd-lr-0.05",
                                        "fmnist-sgd-lr-0.01"};
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/jobs/{id}/metrics")) {
        print_message("[  SKIP    ] /v1/jobs/{id}/metrics is not on this server yet; "
                      "the compare view's curves need it\n");
        skip();
    }
    for (int i = 0; i < 3; i++) {
        submit(json_pack("{s:s, s:{s:s}, s:[s,s,s], s:[s,s,s,s], s:{s:i}}", "name", names[i],
                         "labels", "sweep", "cmp-grid", "command", "sh", "-c", "sleep 120", "args",
                         "--optimizer", "sgd", "--lr", lrs[i], "workers", "count", 1),
               ids[i]);
        post_points(ids[i], 0, 20 + 10 * i, 0.3 / (i + 1));
    }
    open_view("#/compare?label=sweep%3Dcmp-grid&metric=loss", "compare");
    wait_js("Chart.getChart(document.getElementById('chart-compare'))", NULL, "the chart");
    json_t *labels = js("const c = Chart.getChart(document.getElementById('chart-compare'));"
                        "return c.data.datasets.map((d) => d.label + ':' + d.data.length)"
                        ".sort().join(' ');",
                        NULL);
    assert_string_equal(json_string_value(labels), "lr=0.01:40 lr=0.05:30 lr=0.1:20");
    json_decref(labels);
    screenshot("compare.png");
    for (int i = 0; i < 3; i++)
        cancel(ids[i]);
}

/* A sweep's page compares its trials on the objective's metric and marks the best trial. */
static void test_sweep_view(void **state)
{
    char id[32], hash[64], expr[512], path[128];
    static const double rates[] = {0.1, 0.3, 0.2}; /* trial 1's loss ends lowest */
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/sweeps/{id}")) {
        print_message("[  SKIP    ] /v1/sweeps is not on this server yet\n");
        skip();
    }
    ty_http_resp *r = ty_req(g_admin, "POST", "/v1/sweeps",
                             "{\"name\": \"web-grid\", \"algorithm\": \"grid\", \"parallelism\": 3,"
                             " \"parameters\": {\"x\": [1, 2, 3]},"
                             " \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"},"
                             " \"template\": {\"name\": \"web-trial\", \"command\": [\"sh\", "
                             "\"-c\", \"sleep 120\"], \"args\": [\"--x\", \"${x}\"],"
                             " \"workers\": {\"count\": 1}}}");
    if (r->status != 201)
        fail_msg("POST /v1/sweeps: HTTP %ld: %.400s", r->status, r->body);
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "id"));
    json_t *trials = json_object_get(r->json, "trials");
    assert_int_equal(json_array_size(trials), 3);
    for (size_t i = 0; i < 3; i++)
        post_points(ty_json_str(json_array_get(trials, i), "job_id"), 0, 20, rates[i]);
    ty_resp_destroy(r);

    open_view("#/sweeps", "sweeps");
    snprintf(expr, sizeof expr, "document.querySelector('#sweeps tr[data-id=\"%s\"]') !== null",
             id);
    js_true(expr, NULL);
    snprintf(hash, sizeof hash, "#/sweeps/%s", id);
    open_view(hash, "sweep");
    json_t *labels = js("const c = Chart.getChart(document.getElementById('chart-sweep'));"
                        "return c.data.datasets.map((d) => d.label + ':' + d.data.length)"
                        ".join(' ');",
                        NULL);
    assert_string_equal(json_string_value(labels), "x=1:20 x=2:20 x=3:20");
    json_decref(labels);
    js_true("document.querySelector('#trials tr.best').dataset.trial === '1'", NULL);
    js_true("document.getElementById('sweep-best').textContent.startsWith('Best: trial 1 (x=2)')",
            NULL);
    expect_no_violation();
    screenshot("sweep.png");
    snprintf(path, sizeof path, "/v1/sweeps/%s:cancel", id);
    ty_resp_destroy(ty_req(g_admin, "POST", path, NULL));
}

/* ---- teams and where a job stands ---------------------------------------- */

/* A request as the admin that must answer `status`; the answer (new). */
static ty_http_resp *admin_call(const char *method, const char *path, const char *body,
                                long status)
{
    ty_http_resp *r = ty_req(g_admin, method, path, body);
    if (r->status != status)
        fail_msg("%s %s: HTTP %ld, want %ld: %.400s", method, path, r->status, status, r->body);
    return r;
}

/* Waits until job id's state is `state` and (reason not NULL) its pending_reason's reason is
 * `reason`, as the API answers. */
static void api_wait_job(const char *id, const char *state, const char *reason)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int64_t deadline = ty_now_ms() + WAIT_MS;;) {
        ty_http_resp *r = admin_call("GET", path, NULL, 200);
        const char *st = ty_json_str(r->json, "state");
        const char *re = ty_json_str(json_object_get(r->json, "pending_reason"), "reason");
        int ok = st && strcmp(st, state) == 0 && (!reason || (re && strcmp(re, reason) == 0));
        if (!ok && ty_now_ms() > deadline)
            fail_msg("job %s never was %s/%s: %.400s", id, state, reason ? reason : "-", r->body);
        ty_resp_destroy(r);
        if (ok)
            return;
        ty_sleep_ms(100);
    }
}

/* POSTs one report (a JSON text) for job id as the admin. */
static void post_report(const char *id, const char *body)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/metrics", id);
    ty_http_resp *r = ty_req(g_admin, "POST", path, body);
    if (r->status != 200)
        fail_msg("POST %s: HTTP %ld: %.400s", path, r->status, r->body);
    ty_resp_destroy(r);
}

/* The tile of metric series `name` on a job's page, as a JS expression. */
#define TILE(name) "document.querySelector('#metrics div.metric[data-series=\"" name "\"]')"

/*
 * A series of one point (a final accuracy, a test score) is shown as its value, step and time,
 * not as an empty chart; series of two points or more are charts; a one-point series that gets
 * a second point while the page is open becomes a chart.
 */
static void test_job_single_point_series(void **state)
{
    char id[32], hash[64];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/jobs/{id}/metrics")) {
        print_message("[  SKIP    ] /v1/jobs/{id}/metrics is not on this server yet\n");
        skip();
    }
    submit(json_pack("{s:s, s:[s,s,s], s:{s:i}}", "name", uniq("final-accuracy"), "command", "sh",
                     "-c", "sleep 120", "workers", "count", 1),
           id);
    post_report(id, "{\"points\":[{\"step\":100,\"loss\":2.0},{\"step\":200,\"loss\":1.5},"
                    "{\"step\":300,\"loss\":1.1}]}");
    post_report(id, "{\"points\":[{\"step\":300,\"time\":\"2026-11-20T10:11:12Z\","
                    "\"accuracy\":0.9132,\"test_score\":0.875}]}");
    snprintf(hash, sizeof hash, "#/jobs/%s", id);
    open_view(hash, "job");

    wait_js(TILE("accuracy") " && " TILE("accuracy") ".dataset.kind === 'value'", NULL,
            "accuracy (one point) shown as a value");
    js_true(TILE("accuracy") ".querySelector('.metric-name').textContent === 'accuracy' && "
            TILE("accuracy") ".querySelector('.metric-number').textContent === '0.9132' && "
            "/^step 300 · 2026-11-2[01] [0-9]{2}:11:12$/.test(" TILE("accuracy")
            ".querySelector('.metric-at').textContent) && "
            "!" TILE("accuracy") ".querySelector('canvas')",
            NULL);
    js_true(TILE("test_score") ".dataset.kind === 'value' && " TILE("test_score")
            ".querySelector('.metric-number').textContent === '0.875'",
            NULL);
    /* Three points of loss: a chart of three points. */
    js_true(TILE("loss") ".dataset.kind === 'chart' && "
            "Chart.getChart(document.getElementById('chart-loss')).data.datasets[0].data"
            ".length === 3 && !document.getElementById('chart-accuracy')",
            NULL);
    js_true("document.getElementById('metrics-note').textContent.includes('accuracy (1 point)')",
            NULL);
    /* Nothing drawn as the word "null" where a running job has no pending reason. */
    js_true("!document.querySelector('.jobhead').textContent.includes('null')", NULL);
    screenshot("job-single-point.png");

    /* A second point of accuracy while the page is open: now a chart of two points. */
    wait_js("document.getElementById('live').dataset.mode === 'live'", NULL, "the job stream");
    post_report(id, "{\"points\":[{\"step\":400,\"accuracy\":0.9250}]}");
    wait_js(TILE("accuracy") ".dataset.kind === 'chart' && "
            "Chart.getChart(document.getElementById('chart-accuracy')).data.datasets[0].data"
            ".length === 2",
            NULL, "accuracy (two points now) drawn as a chart");
    js_true("Chart.getChart(document.getElementById('chart-accuracy')).data.datasets[0].data[1].y"
            " === 0.925 && !" TILE("accuracy") ".querySelector('.metric-value') && "
            TILE("test_score") ".dataset.kind === 'value'",
            NULL);
    expect_no_violation();
    cancel(id);
}

static void use_token(const char *tok)
{
    json_decref(js("sessionStorage.setItem('trainyard.token', arguments[0]);", json_string(tok)));
}

static const char *job_state(const char *id, char *buf, size_t len)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    ty_http_resp *r = admin_call("GET", path, NULL, 200);
    snprintf(buf, len, "%s", ty_json_str(r->json, "state") ? ty_json_str(r->json, "state") : "");
    ty_resp_destroy(r);
    return buf;
}

/*
 * A running job's page offers Cancel to a token that may cancel: it asks first in a dialog
 * (keeping the job when told to), then cancels through the API and shows the job CANCELLED. A
 * read-only token's page offers no working button and says why; a refusal the server answers
 * (problem+json) is shown to the user.
 */
static void test_cancel_from_job_page(void **state)
{
    char id[32], hash[64], expr[512], st[32], reader[128];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/whoami")) {
        print_message("[  SKIP    ] GET /v1/whoami is not on this server yet\n");
        skip();
    }
    ty_http_resp *r = admin_call("POST", "/v1/tokens",
                                 "{\"name\":\"web-reader\",\"scopes\":[\"read\"]}", 201);
    snprintf(reader, sizeof reader, "%s", ty_json_str(r->json, "token"));
    ty_resp_destroy(r);

    submit(json_pack("{s:s, s:[s,s,s], s:{s:i}}", "name", uniq("to-cancel"), "command", "sh", "-c",
                     "sleep 120", "workers", "count", 1),
           id);
    api_wait_job(id, "RUNNING", NULL);
    snprintf(hash, sizeof hash, "#/jobs/%s", id);

    /* Read-only: the button is there but disabled, its title saying why. */
    use_token(reader);
    json_decref(js("location.hash = '#/jobs';", NULL));
    open_view(hash, "job");
    js_true("document.getElementById('cancel-job').disabled && "
            "document.getElementById('cancel-job').title.includes('submit scope')",
            NULL);
    screenshot("job-read-only.png");

    /* The admin: asked first; "Keep it running" keeps it. */
    use_token(TY_TEST_ADMIN_TOKEN);
    json_decref(js("location.hash = '#/jobs';", NULL));
    open_view(hash, "job");
    js_true("!document.getElementById('cancel-job').disabled && "
            "!document.getElementById('job-actions').hidden && "
            "!document.getElementById('cancel-dialog').open",
            NULL);
    click("#cancel-job");
    wait_js("document.getElementById('cancel-dialog').open", NULL, "the confirmation dialog");
    js_true("document.getElementById('cancel-dialog').textContent.includes(arguments[0])",
            json_string(id));
    screenshot("job-cancel-dialog.png");
    click("#cancel-keep");
    wait_js("!document.getElementById('cancel-dialog').open", NULL, "the dialog to close");
    assert_string_equal(job_state(id, st, sizeof st), "RUNNING");

    /* A refusal is shown: the token changes under the open page to one that may only read. */
    use_token(reader);
    click("#cancel-job");
    wait_js("document.getElementById('cancel-dialog').open", NULL, "the confirmation dialog");
    click("#cancel-confirm");
    wait_js("document.getElementById('cancel-error').textContent.includes('Not cancelled') && "
            "document.getElementById('cancel-error').textContent.includes('orbidden')",
            NULL, "the 403 problem shown");
    assert_string_equal(job_state(id, st, sizeof st), "RUNNING");

    /* Confirmed with the admin's token: cancelled, and the page shows it. */
    use_token(TY_TEST_ADMIN_TOKEN);
    click("#cancel-job");
    wait_js("document.getElementById('cancel-dialog').open", NULL, "the confirmation dialog");
    click("#cancel-confirm");
    snprintf(expr, sizeof expr,
             "document.querySelector('.jobhead h1 .badge').textContent === 'CANCELLED' && "
             "document.getElementById('job-actions').hidden && "
             "document.getElementById('cancel-error').textContent === '' && "
             "[...document.querySelectorAll('#timeline li')].some((li) => "
             "li.textContent.includes('Cancelled'))");
    wait_js(expr, NULL, "the job shown CANCELLED");
    assert_string_equal(job_state(id, st, sizeof st), "CANCELLED");
    expect_no_violation();
    screenshot("job-cancelled.png");
}

/* A job of team `team` (submitted by the admin for it) that runs until cancelled. */
static void submit_for(const char *team, const char *name, const char *resources, char id[32])
{
    json_t *res = json_loads(resources, 0, NULL);
    assert_non_null(res);
    submit(json_pack("{s:s, s:s, s:[s,s,s], s:{s:i}, s:o}", "name", name, "team", team,
                     "command", "sh", "-c", "sleep 120", "workers", "count", 1, "resources", res),
           id);
}

/*
 * A waiting job's page says why it waits and where it stands, and follows it as the jobs ahead
 * of it go: a team with a quota of one CPU runs one job; the next waits as its line's head
 * (QuotaExceeded), the third Queued behind it. When the head is cancelled, the third's page
 * shows it heading the line; when the running job ends, it runs and the box goes.
 */
static void test_job_pending_reason(void **state)
{
    char run[32], head[32], third[32], hash[64], expr[256];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    ty_resp_destroy(admin_call("POST", "/v1/teams",
                               "{\"name\":\"webq\",\"quota\":{\"cpu\":\"1\",\"memory\":\"1Gi\"}}",
                               201));
    static const char res[] = "{\"cpu\":\"1\",\"memory\":\"64Mi\"}";
    submit_for("webq", "webq-run", res, run);
    api_wait_job(run, "RUNNING", NULL);
    submit_for("webq", "webq-head", res, head);
    submit_for("webq", "webq-third", res, third);
    api_wait_job(head, "PENDING", "QuotaExceeded");
    api_wait_job(third, "PENDING", "Queued");

    snprintf(hash, sizeof hash, "#/jobs/%s", third);
    open_view(hash, "job");
    js_true("document.getElementById('pending').dataset.reason === 'Queued'", NULL);
    js_true("document.getElementById('pending').dataset.teamPosition === '2'", NULL);
    js_true("Number(document.getElementById('pending').dataset.position) >= 2", NULL);
    snprintf(expr, sizeof expr,
             "document.querySelector('#pending .msg').textContent.includes("
             "'1 job ahead of it in team webq\\'s queue default; the first of them, job %s, "
             "waits: QuotaExceeded: team webq')",
             head);
    js_true(expr, NULL);
    js_true("document.querySelector('#pending .position').textContent.includes('2 in team webq')",
            NULL);
    expect_no_violation();
    screenshot("job-pending.png");

    /* The head goes: the page shows this job heading the line, without a reload. */
    json_decref(js("window.__sameDocument = 2;", NULL));
    cancel(head);
    wait_js("document.getElementById('pending').dataset.reason === 'QuotaExceeded' && "
            "document.getElementById('pending').dataset.teamPosition === '1' && "
            "document.querySelector('#pending .msg').textContent.includes('team webq')",
            NULL, "the job to head its line");
    /* The running job ends: this one runs, and says no more that it waits. */
    cancel(run);
    wait_js("!document.getElementById('pending') && "
            "document.querySelector('.jobhead .badge').textContent === 'RUNNING'",
            NULL, "the job to run");
    js_true("window.__sameDocument === 2", NULL);
    cancel(third);
}

/*
 * The Teams view shows each team's quota against its usage per resource (GPUs by type, cpu,
 * memory), what it borrows, its pending and admitted jobs, as GET /v1/teams answers the token:
 * the admin sees every team, a team's token only its own.
 */
static void test_teams_view(void **state)
{
    char ids[3][32], tok[128];
    (void)state;
    SKIP_WITHOUT_BROWSER();
    /* One GPU of its own and one to borrow of the two the server has: two run, the third
     * waits. */
    ty_resp_destroy(admin_call("POST", "/v1/teams",
                               "{\"name\":\"webt\",\"quota\":{\"gpu\":{\"local\":1},\"cpu\":\"4\","
                               "\"memory\":\"1Gi\"},\"borrowing_limit\":{\"gpu\":{\"local\":1}}}",
                               201));
    static const char res[] =
        "{\"gpu\":{\"type\":\"local\",\"count\":1},\"cpu\":\"1\",\"memory\":\"64Mi\"}";
    for (int i = 0; i < 3; i++)
        submit_for("webt", uniq("webt"), res, ids[i]);
    api_wait_job(ids[0], "RUNNING", NULL);
    api_wait_job(ids[1], "RUNNING", NULL);
    api_wait_job(ids[2], "PENDING", "QuotaExceeded");

    open_view("#/teams", "teams");
    const char *t = "document.querySelector('section[data-team=\"webt\"] "
                    "tr[data-resource=\"gpu/local\"]')";
    char expr[1536];
    snprintf(expr, sizeof expr,
             "%s.querySelector('.used').textContent === '2' && "
             "%s.querySelector('.quota').textContent === '1' && "
             "%s.querySelector('.borrowed').textContent === '1' && "
             "%s.querySelector('.limit').textContent === '1' && "
             "%s.querySelector('meter').value === 2",
             t, t, t, t, t);
    wait_js(expr, NULL, "webt's GPUs: 2 used of 1, 1 borrowed");
    js_true("document.querySelector('section[data-team=\"webt\"] tr[data-resource=\"cpu\"] "
            ".used').textContent === '2' && document.querySelector('section[data-team=\"webt\"] "
            "tr[data-resource=\"cpu\"] .quota').textContent === '4'",
            NULL);
    js_true("document.querySelector('section[data-team=\"webt\"] tr[data-resource=\"memory\"] "
            ".quota').textContent === '1Gi'",
            NULL);
    js_true("document.querySelector('section[data-team=\"webt\"] .count-pending').textContent === '1' "
            "&& document.querySelector('section[data-team=\"webt\"] .count-admitted').textContent === "
            "'2'",
            NULL);
    js_true("document.querySelector('section[data-team=\"default\"] tr[data-resource=\"cpu\"] "
            ".quota').textContent === 'unlimited'",
            NULL);
    expect_no_violation();
    screenshot("teams.png");

    /* The view follows: one job ends, the waiting one runs, nothing is borrowed beyond it. */
    cancel(ids[0]);
    api_wait_job(ids[2], "RUNNING", NULL);
    snprintf(expr, sizeof expr,
             "%s.querySelector('.used').textContent === '2' && "
             "document.querySelector('section[data-team=\"webt\"] .count-pending').textContent === '0'",
             t);
    wait_js(expr, NULL, "webt's pending job admitted");

    /* A team's token sees its own team only. */
    ty_http_resp *r = admin_call("POST", "/v1/tokens",
                                 "{\"name\":\"webt-reader\",\"scopes\":[\"read\"],"
                                 "\"team\":\"webt\"}",
                                 201);
    snprintf(tok, sizeof tok, "%s", ty_json_str(r->json, "token"));
    ty_resp_destroy(r);
    json_decref(js("sessionStorage.setItem('trainyard.token', arguments[0]);", json_string(tok)));
    json_decref(js("location.hash = '#/jobs';", NULL));
    open_view("#/teams", "teams");
    js_true("document.querySelectorAll('section[data-team]').length === 1 && "
            "document.querySelector('section[data-team=\"webt\"]') !== null",
            NULL);
    json_decref(js("sessionStorage.setItem('trainyard.token', arguments[0]);",
                   json_string(TY_TEST_ADMIN_TOKEN)));
    json_decref(js("location.hash = '#/jobs';", NULL));
    for (int i = 1; i < 3; i++)
        cancel(ids[i]);
}

/* ---- the cluster ----------------------------------------------------------- */

/* Submits a one-rank job on one GPU that exits with code; waits until it FAILED. */
static void fail_on_gpu(const char *name, int code, int restarts)
{
    char id[32], path[64], cmd[32];
    snprintf(cmd, sizeof cmd, "exit %d", code);
    submit(json_pack("{s:s, s:[s,s,s], s:{s:i}, s:{s:{s:s, s:i}}, s:{s:i, s:i}}", "name", name,
                     "command", "sh", "-c", cmd, "workers", "count", 1, "resources", "gpu",
                     "type", "local", "count", 1, "restart", "max", restarts,
                     "backoff_seconds", 0),
           id);
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    for (int64_t deadline = ty_now_ms() + WAIT_MS;;) {
        ty_http_resp *r = ty_req(g_admin, "GET", path, NULL);
        int failed = strcmp(ty_json_str(r->json, "state"), "FAILED") == 0;
        ty_resp_destroy(r);
        if (failed)
            return;
        if (ty_now_ms() > deadline)
            fail_msg("job %s never FAILED", id);
        ty_sleep_ms(50);
    }
}

/*
 * The Cluster view: this machine's row (one node, its two GPUs); after two jobs failed three
 * times on gpu0, it is listed as quarantined with its failures (the jobs linked) and one GPU is
 * free, and the admin's Release button puts it back: the view then says no node is quarantined.
 */
static void test_cluster_view(void **state)
{
    (void)state;
    SKIP_WITHOUT_BROWSER();
    if (!documented("/v1/cluster")) {
        print_message("[  SKIP    ] /v1/cluster is not on this server yet\n");
        skip();
    }
    /* The earlier cases' jobs end first (their cancels are asynchronous): then every failure
     * below lands on the lowest GPU, gpu0. */
    for (int64_t deadline = ty_now_ms() + WAIT_MS;;) {
        ty_http_resp *r = ty_req(g_admin, "GET", "/v1/cluster", NULL);
        const json_t *gpus = json_object_get(json_array_get(json_object_get(r->json, "zones"), 0),
                                             "gpus");
        int idle = json_integer_value(json_object_get(gpus, "trainyard")) == 0;
        ty_resp_destroy(r);
        if (idle)
            break;
        if (ty_now_ms() > deadline)
            fail_msg("the earlier cases' jobs still hold GPUs");
        ty_sleep_ms(100);
    }
    open_view("#/jobs", "jobs");
    open_view("#/cluster", "cluster");
    js_true("document.querySelector('#cluster-zones tr[data-gpu-type=\"local\"] td.free')"
            ".textContent === '2'",
            NULL);
    js_true("document.getElementById('cluster-none') !== null", NULL);

    fail_on_gpu(uniq("gpu-bad"), 3, 1);
    fail_on_gpu(uniq("gpu-bad"), 4, 0);
    open_view("#/jobs", "jobs"); /* the same hash again would not draw the view anew */
    open_view("#/cluster", "cluster");
    js_true("document.querySelector('#cluster-quarantined tr[data-node=\"gpu0\"]') !== null",
            NULL);
    js_true("document.querySelectorAll('#cluster-quarantined ul.evidence li').length === 3", NULL);
    js_true("document.querySelector('#cluster-quarantined ul.evidence a') !== null", NULL);
    js_true("document.querySelector('#cluster-quarantined tr[data-node=\"gpu0\"]').textContent"
            ".includes('3 failures of 2 jobs within 3600 s')",
            NULL);
    js_true("document.querySelector('#cluster-zones tr[data-gpu-type=\"local\"] td.free')"
            ".textContent === '1'",
            NULL);
    screenshot("cluster.png");
    json_decref(js("document.querySelector('#cluster-quarantined button.release').click();"
                   "return true;",
                   NULL));
    wait_js("document.getElementById('cluster-none') !== null", NULL,
            "the released node to leave the list");
    expect_no_violation();
}

/* ---- main ---------------------------------------------------------------- */

static int setup(void **state)
{
    static const char *const args[] = {"--local-slots", "8", "--stop-grace", "1", "--local-gpus",
                                       "2", NULL};
    ty_server_opts opts = {.args = args};
    char err[1024];
    (void)state;
    if (ty_server_start(&opts, &g_srv, err, sizeof err) < 0) {
        print_error("server: %s\n", err);
        return -1;
    }
    g_admin = ty_client_new(g_srv, TY_TEST_ADMIN_TOKEN);
    if (g_skip[0])
        return 0;
    if (driver_start(err, sizeof err) < 0) {
        print_error("browser: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    driver_stop();
    ty_client_free(g_admin);
    ty_server_free(g_srv);
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    /* In this order: later cases read the jobs of earlier ones (the filters, the table). */
    const struct CMUnitTest tests[] = {
        /* clang-format off */
        cmocka_unit_test(test_token_form),
        cmocka_unit_test(test_csp),
        cmocka_unit_test(test_sse_parser),
        cmocka_unit_test(test_jobs_table_live),
        cmocka_unit_test(test_jobs_filters),
        cmocka_unit_test(test_job_chart),
        cmocka_unit_test(test_job_single_point_series),
        cmocka_unit_test(test_cancel_from_job_page),
        cmocka_unit_test(test_hostile_strings_are_text),
        cmocka_unit_test(test_compare),
        cmocka_unit_test(test_sweep_view),
        cmocka_unit_test(test_job_pending_reason),
        cmocka_unit_test(test_teams_view),
        cmocka_unit_test(test_cluster_view),
        /* clang-format on */
    };
    if (argc < 4) {
        fprintf(stderr, "usage: %s TRAINYARD_BINARY OPENAPI_YAML ARTIFACT_DIR\n", argv[0]);
        return 2;
    }
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    g_artifacts = argv[3];
    if (mkdir(g_artifacts, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s\n", g_artifacts, strerror(errno));
        return 2;
    }
    if (find_program("chromium", g_chromium, sizeof g_chromium) < 0 ||
        find_program("chromedriver", g_chromedriver, sizeof g_chromedriver) < 0)
        snprintf(g_skip, sizeof g_skip,
                 "chromium or chromedriver is not installed (Debian: chromium, chromium-driver; "
                 "scripts/install-deps installs them): the page is not tested in a browser");
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    ty_harness_cleanup();
    return failed;
}
