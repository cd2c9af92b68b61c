/*
 * bench_hooks.c - a flood of badly signed webhook deliveries: what it costs the server.
 *
 * Starts `trainyard serve` on a temporary directory (log level info, its stderr in a file, as
 * a served server has), registers one GitHub hook, then keeps C connections busy for D
 * seconds, each POSTing a GitHub push payload with a wrong X-Hub-Signature-256 to
 * /v1/hooks/flood, one request after another (keep-alive), as an attacker on one address
 * would. Measured over the flood alone:
 *   - requests a second answered, by status (401, 429, other);
 *   - the server's CPU, user + system from /proc/<pid>/stat, in cores (CPU seconds per
 *     second of the run);
 *   - the bytes its log grew by, per minute.
 * The load runs on the same machine as the server (libcurl's multi interface, one thread),
 * so on a small machine the two compete for the CPUs; the client's CPU is printed too.
 *
 *   cmake --build BUILD --target bench_hooks trainyard
 *   BUILD/bench/bench_hooks [--trainyard PATH] [--connections 8] [--duration 20] [--label L]
 *                           [--serve-arg ARG]...
 *
 * --trainyard may name another build's binary (the tree before a change, say): the bench
 * needs only the API. --serve-arg adds an argument to `serve` (repeatable), e.g.
 * --serve-arg --webhook-limits=delay=0 to see the cost of 429s answered at once. Output: a human summary, then one line of key=value pairs.
 * Exit status 0, 1 on a failure, 2 on a usage error.
 */
#include "bench/bench_util.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef BENCH_TRAINYARD
#define BENCH_TRAINYARD "trainyard"
#endif

#define START_TIMEOUT_MS 30000
#define MAX_CONNECTIONS 256


/* A push as GitHub sends it, about 1 KiB. */
static const char PAYLOAD[] =
    "{\"ref\":\"refs/heads/main\",\"before\":\"6113728f27ae82c7b1a177c8d03f9e96e0adf246\","
    "\"after\":\"9049f1265b7d61be4a8904a9a27120d2064dab3b\",\"created\":false,\"deleted\":false,"
    "\"forced\":false,\"compare\":\"https://github.com/acme-ml/trainer/compare/6113728f27ae..."
    "9049f1265b7d\",\"commits\":[{\"id\":\"9049f1265b7d61be4a8904a9a27120d2064dab3b\","
    "\"message\":\"Tune the learning rate schedule\",\"timestamp\":\"2026-11-20T10:00:00Z\","
    "\"author\":{\"name\":\"Octo Cat\",\"email\":\"octocat@example.com\",\"username\":"
    "\"octocat\"}}],\"repository\":{\"id\":1296269,\"name\":\"trainer\",\"full_name\":"
    "\"acme-ml/trainer\",\"private\":true,\"default_branch\":\"main\"},\"pusher\":{\"name\":"
    "\"octocat\",\"email\":\"octocat@example.com\"},\"sender\":{\"login\":\"octocat\","
    "\"id\":583231,\"type\":\"User\"}}";

static const char TEMPLATE[] =
    "{\"name\":\"flood\",\"provider\":\"github\",\"secret\":\"the hook's real secret\","
    "\"events\":[\"push\"],\"branches\":[],\"template\":{\"name\":\"ci-${commit_short}\","
    "\"command\":[\"true\"],\"workers\":{\"count\":1}}}";

typedef struct opts {
    const char *trainyard;
    int connections;
    int duration_s;
    const char *label;
    const char *serve_args[18]; /* "--log-level", "info", the --serve-arg values, NULL */
} opts;

static bench_server g_srv;

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_hooks [--trainyard PATH] [--connections N (1..%d)] "
               "[--duration SECS] [--label TEXT] [--serve-arg ARG]...\n",
            MAX_CONNECTIONS);
}

static void parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->trainyard = BENCH_TRAINYARD;
    o->connections = 8;
    o->duration_s = 20;
    o->label = "";
    size_t nargs = 0;
    o->serve_args[nargs++] = "--log-level";
    o->serve_args[nargs++] = "info";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--trainyard") && v) {
            o->trainyard = v;
        } else if (!strcmp(a, "--connections") && v) {
            ok = bench_parse_int(v, 1, MAX_CONNECTIONS, &o->connections) == 0;
        } else if (!strcmp(a, "--duration") && v) {
            ok = bench_parse_int(v, 1, 3600, &o->duration_s) == 0;
        } else if (!strcmp(a, "--label") && v) {
            o->label = v;
        } else if (!strcmp(a, "--serve-arg") && v &&
                   nargs + 1 < sizeof o->serve_args / sizeof o->serve_args[0]) {
            o->serve_args[nargs++] = v;
        } else {
            ok = 0;
        }
        if (!ok) {
            usage(stderr);
            exit(2);
        }
        i++;
    }
}

/* Registers the hook the flood goes to. */
static void register_hook(void)
{
    char url[160], auth[128];
    long code = 0;
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    if (!h)
        bench_die("curl_easy_init failed");
    snprintf(url, sizeof url, "%s/v1/webhooks", g_srv.url);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_srv.token);
    hdrs = curl_slist_append(hdrs, auth);
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, TEMPLATE);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK || code != 201)
        bench_die("registering the hook: %s, HTTP %ld", curl_easy_strerror(rc), code);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int main(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    bench_init("bench_hooks", &g_srv);
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        bench_die("curl_global_init failed");
    snprintf(g_srv.token, sizeof g_srv.token, "bench-hooks-%ld", (long)getpid());
    bench_start_server(&g_srv, o.trainyard, o.serve_args, START_TIMEOUT_MS);
    register_hook();

    char url[160];
    snprintf(url, sizeof url, "%s/v1/hooks/flood", g_srv.url);
    struct curl_slist *hdrs = NULL;
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "X-GitHub-Event: push");
    hdrs = curl_slist_append(hdrs, "X-Hub-Signature-256: sha256="
                                   "0000000000000000000000000000000000000000000000000000000000000000");
    CURLM *m = curl_multi_init();
    CURL *easy[MAX_CONNECTIONS];
    if (!m)
        bench_die("curl_multi_init failed");
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.connections);
    for (int i = 0; i < o.connections; i++) {
        if (!(easy[i] = curl_easy_init()))
            bench_die("curl_easy_init failed");
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, PAYLOAD);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDSIZE, (long)(sizeof PAYLOAD - 1));
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(easy[i], CURLOPT_TIMEOUT, 30L);
        curl_multi_add_handle(m, easy[i]);
    }

    unsigned long long n401 = 0, n429 = 0, nother = 0, nfail = 0;
    long log0 = file_size(g_srv.log);
    double cpu0 = bench_proc_cpu_s(g_srv.pid), self0 = bench_self_cpu_s();
    double t0 = bench_mono_ms(), end = t0 + o.duration_s * 1000.0;
    int running = 0;
    while (bench_mono_ms() < end) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            long code = 0;
            CURL *h = msg->easy_handle;
            if (msg->data.result != CURLE_OK) {
                nfail++;
            } else {
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
                if (code == 401)
                    n401++;
                else if (code == 429)
                    n429++;
                else
                    nother++;
            }
            curl_multi_remove_handle(m, h);
            curl_multi_add_handle(m, h); /* the next request, on the same connection */
        }
        curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    double t1 = bench_mono_ms();
    double cpu1 = bench_proc_cpu_s(g_srv.pid), self1 = bench_self_cpu_s();
    long log1 = file_size(g_srv.log);
    double secs = (t1 - t0) / 1000.0;
    unsigned long long total = n401 + n429 + nother;

    for (int i = 0; i < o.connections; i++) {
        curl_multi_remove_handle(m, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    bench_stop_server(&g_srv);
    curl_global_cleanup();

    double server_cores = (cpu1 - cpu0) / secs, client_cores = (self1 - self0) / secs;
    double log_per_min = (double)(log1 - log0) / secs * 60.0;
    printf("bench_hooks%s%s: %d connections, %.1f s of bad signatures to one GitHub hook\n",
           o.label[0] ? " " : "", o.label, o.connections, secs);
    printf("  answered   %10.0f requests/s (401: %llu, 429: %llu, other: %llu, failed: %llu)\n",
           (double)total / secs, n401, n429, nother, nfail);
    printf("  server CPU %10.3f cores   (client %.3f cores)\n", server_cores, client_cores);
    printf("  server log %10.0f bytes/minute\n", log_per_min);
    printf("label=%s connections=%d seconds=%.1f requests_per_s=%.0f n401=%llu n429=%llu "
           "nother=%llu failed=%llu server_cores=%.3f client_cores=%.3f log_bytes_per_min=%.0f\n",
           o.label[0] ? o.label : "-", o.connections, secs, (double)total / secs, n401, n429,
           nother, nfail, server_cores, client_cores, log_per_min);
    return nfail || nother ? 1 : 0;
}
