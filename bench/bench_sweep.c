/*
 * bench_sweep.c - a grid sweep of 1,000 trials through `trainyard serve` with
 * the local backend: the time to create it (one POST /v1/sweeps: validation,
 * every trial's spec, one transaction), the trials drained per second, the
 * time to read the sweep with its 1,000 trials, and as a baseline the same
 * 1,000 jobs through one POST /v1/jobs:batch in the same run.
 *
 * Usage:
 *   bench_sweep [--trainyard PATH] [--slots N] [--trials N] [--parallelism N] [--keep]
 *
 *   --trainyard    the server binary (default: the one of this build tree)
 *   --slots        --local-slots of the server (default 4)
 *   --trials       trials of the grid, and jobs of the baseline (default 1000, max 1000)
 *   --parallelism  the sweep's parallelism (default: every trial)
 *   --keep         keep the temporary directory (database, logs, the server's log)
 *
 * Every trial, and every baseline job, runs `true ${i}` (one rank, no restart):
 * the cheapest command the sandbox runs, so the figures are the server's
 * overhead. Drained means SUCCEEDED, read from /metrics
 * (trainyard_jobs{state="SUCCEEDED"}) every 20 ms; trials/s counts from the
 * start of the POST. Build in Release:
 *   cmake --build build-rel --target bench_sweep && build-rel/bench/bench_sweep
 *
 * Output: human-readable figures, then one key=value line for scripts. Exit
 * status 0 when every trial and job succeeded, 1 otherwise, 2 on a usage error.
 */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef BENCH_TRAINYARD
#define BENCH_TRAINYARD "trainyard"
#endif

#define START_TIMEOUT_MS 30000
#define DRAIN_TIMEOUT_MS 600000
#define POLL_US 20000

typedef struct opts {
    const char *trainyard;
    int slots, trials, parallelism, keep;
} opts;

typedef struct run_result {
    double post_ms;  /* the POST, until its answer */
    double total_ms; /* from the start of the POST until every job SUCCEEDED */
} run_result;

static bench_server g_srv;
static CURL *g_curl;
static struct curl_slist *g_headers;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    return bench_buf_add(ud, ptr, size * nmemb) < 0 ? 0 : size * nmemb;
}

/* One request on the keep-alive connection; returns the status, the body in *out. */
static long http(const char *method, const char *path, const char *body, bench_buf *out)
{
    char url[512];
    long status = 0;
    bench_buf_reset(out);
    snprintf(url, sizeof url, "%s%s", g_srv.url, path);
    curl_easy_reset(g_curl);
    curl_easy_setopt(g_curl, CURLOPT_URL, url);
    curl_easy_setopt(g_curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(g_curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(g_curl, CURLOPT_TIMEOUT_MS, 120000L);
    curl_easy_setopt(g_curl, CURLOPT_HTTPHEADER, g_headers);
    curl_easy_setopt(g_curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(g_curl, CURLOPT_WRITEDATA, out);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(g_curl, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(g_curl, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(body ? strlen(body) : 0));
    }
    CURLcode cc = curl_easy_perform(g_curl);
    if (cc != CURLE_OK)
        bench_die("%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_easy_getinfo(g_curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* The sample trainyard_jobs{state="STATE"} of /metrics; 0 when absent. */
static long long jobs_in_state(const char *state, bench_buf *scratch)
{
    char needle[96];
    if (http("GET", "/metrics", NULL, scratch) != 200)
        bench_die("GET /metrics: %s", scratch->data ? scratch->data : "");
    snprintf(needle, sizeof needle, "\ntrainyard_jobs{state=\"%s\"} ", state);
    const char *p = strstr(scratch->data, needle);
    return p ? strtoll(p + strlen(needle), NULL, 10) : 0;
}

/* The template every trial and baseline job shares: `true ${i}`, one rank. */
static json_t *job_template(const char *name)
{
    return json_pack("{s:s, s:s, s:[s], s:[s], s:{s:i}, s:{s:i, s:i}}", "name", name, "image",
                     "local", "command", "true", "args", "${i}", "workers", "count", 1,
                     "restart", "max", 0, "backoff_seconds", 0);
}

static char *sweep_body(const opts *o)
{
    json_t *values = json_array();
    for (int i = 0; i < o->trials; i++)
        json_array_append_new(values, json_integer(i));
    json_t *b = json_pack("{s:s, s:s, s:i, s:{s:o}, s:{s:s, s:s}, s:o}", "name", "bench",
                          "algorithm", "grid", "parallelism", o->parallelism, "parameters", "i",
                          values, "objective", "metric", "loss", "goal", "minimize", "template",
                          job_template("trial"));
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!text)
        bench_die("out of memory");
    return text;
}

/* The same jobs as the sweep's trials, as one :batch body. */
static char *batch_body(const opts *o)
{
    json_t *jobs = json_array();
    for (int i = 0; i < o->trials; i++) {
        char arg[16];
        json_t *j = job_template("batch");
        snprintf(arg, sizeof arg, "%d", i);
        json_array_set_new(json_object_get(j, "args"), 0, json_string(arg));
        json_array_append_new(jobs, j);
    }
    json_t *b = json_pack("{s:o}", "jobs", jobs);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!text)
        bench_die("out of memory");
    return text;
}

/* POSTs body to path (201 expected) and waits until n more jobs SUCCEEDED. The Location's
 * path (a sweep's) goes to location when not NULL. */
static void run(const char *what, const char *path, const char *body, int n, run_result *res,
                char *location, size_t loclen)
{
    bench_buf resp = {0}, scratch = {0};
    long long base = jobs_in_state("SUCCEEDED", &scratch);
    long long failed0 = jobs_in_state("FAILED", &scratch);
    double t0 = bench_mono_ms();
    long status = http("POST", path, body, &resp);
    double t1 = bench_mono_ms();
    if (status != 201)
        bench_die("%s: POST %s answered %ld: %.300s", what, path, status,
                  resp.data ? resp.data : "");
    if (location) {
        json_t *j = json_loads(resp.data, 0, NULL);
        snprintf(location, loclen, "/v1/sweeps/%s", json_string_value(json_object_get(j, "id")));
        json_decref(j);
    }
    for (;;) {
        if (jobs_in_state("SUCCEEDED", &scratch) - base >= n)
            break;
        if (jobs_in_state("FAILED", &scratch) > failed0)
            bench_die("%s: jobs FAILED (the server's log says why)", what);
        if (bench_mono_ms() - t1 > DRAIN_TIMEOUT_MS)
            bench_die("%s: not drained after %d s", what, DRAIN_TIMEOUT_MS / 1000);
        bench_sleep_us(POLL_US);
    }
    res->total_ms = bench_mono_ms() - t0;
    res->post_ms = t1 - t0;
    free(resp.data);
    free(scratch.data);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_sweep [--trainyard PATH] [--slots N] [--trials N] "
               "[--parallelism N] [--keep]\n");
}

static void parse_opts(int argc, char **argv, opts *o)
{
    static char abs_trainyard[PATH_MAX];
    static const struct option longopts[] = {
        {"trainyard", required_argument, NULL, 't'}, {"slots", required_argument, NULL, 's'},
        {"trials", required_argument, NULL, 'n'},    {"parallelism", required_argument, NULL, 'p'},
        {"keep", no_argument, NULL, 'k'},            {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts){.trainyard = BENCH_TRAINYARD, .slots = 4, .trials = 1000};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 't':
            o->trainyard = optarg;
            break;
        case 's':
            bad = bench_parse_int(optarg, 1, 4096, &o->slots);
            break;
        case 'n':
            bad = bench_parse_int(optarg, 1, 1000, &o->trials);
            break;
        case 'p':
            bad = bench_parse_int(optarg, 1, 1000, &o->parallelism);
            break;
        case 'k':
            o->keep = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc) {
        usage(stderr);
        exit(2);
    }
    if (!o->parallelism || o->parallelism > o->trials)
        o->parallelism = o->trials;
    if (!realpath(o->trainyard, abs_trainyard)) {
        fprintf(stderr, "bench_sweep: %s: not found\n", o->trainyard);
        exit(2);
    }
    o->trainyard = abs_trainyard;
}

int main(int argc, char **argv)
{
    opts o;
    char slots[16], auth[160], sweep_path[64];
    run_result sweep = {0}, batch = {0};
    bench_buf scratch = {0};

    bench_init("bench_sweep", &g_srv);
    parse_opts(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        bench_die("curl_global_init failed");
    g_srv.keep_on_exit = o.keep;
    snprintf(g_srv.token, sizeof g_srv.token, "bench-sweep-%ld-%lld", (long)getpid(),
             (long long)bench_real_ns());
    snprintf(slots, sizeof slots, "%d", o.slots);
    const char *args[] = {"--local-slots", slots, NULL};
    bench_start_server(&g_srv, o.trainyard, args, START_TIMEOUT_MS);
    if (!(g_curl = curl_easy_init()))
        bench_die("curl_easy_init failed");
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_srv.token);
    g_headers = curl_slist_append(NULL, auth);
    g_headers = curl_slist_append(g_headers, "Content-Type: application/json");
    g_headers = curl_slist_append(g_headers, "Expect:");
    printf("server: %s serve --local-slots %d; %ld CPUs\n", o.trainyard, o.slots,
           sysconf(_SC_NPROCESSORS_ONLN));

    char *body = sweep_body(&o);
    run("sweep", "/v1/sweeps", body, o.trials, &sweep, sweep_path, sizeof sweep_path);
    free(body);
    double g0 = bench_mono_ms();
    if (http("GET", sweep_path, NULL, &scratch) != 200)
        bench_die("GET %s failed", sweep_path);
    double get_ms = bench_mono_ms() - g0;
    json_t *sw = json_loads(scratch.data, 0, NULL);
    const char *state = json_string_value(json_object_get(sw, "state"));
    int finished = state && strcmp(state, "finished") == 0;
    json_decref(sw);
    if (!finished)
        bench_die("the sweep is not finished after all its trials succeeded");

    body = batch_body(&o);
    run("batch", "/v1/jobs:batch", body, o.trials, &batch, NULL, 0);
    free(body);

    printf("\n%-32s %10s %10s %12s\n", "", "POST ms", "total ms", "jobs/s");
    printf("%-32s %10.1f %10.1f %12.0f\n", "sweep (POST /v1/sweeps)", sweep.post_ms,
           sweep.total_ms, o.trials / (sweep.total_ms / 1e3));
    printf("%-32s %10.1f %10.1f %12.0f\n", "baseline (POST /v1/jobs:batch)", batch.post_ms,
           batch.total_ms, o.trials / (batch.total_ms / 1e3));
    printf("GET %s with %d trials: %.1f ms\n", sweep_path, o.trials, get_ms);
    printf("trials=%d parallelism=%d slots=%d sweep_post_ms=%.1f sweep_total_ms=%.1f "
           "sweep_per_s=%.1f batch_post_ms=%.1f batch_total_ms=%.1f batch_per_s=%.1f "
           "sweep_get_ms=%.1f\n",
           o.trials, o.parallelism, o.slots, sweep.post_ms, sweep.total_ms,
           o.trials / (sweep.total_ms / 1e3), batch.post_ms, batch.total_ms,
           o.trials / (batch.total_ms / 1e3), get_ms);

    free(scratch.data);
    curl_easy_cleanup(g_curl);
    curl_slist_free_all(g_headers);
    bench_stop_server(&g_srv);
    curl_global_cleanup();
    return 0;
}
