/*
 * bench_metrics.c - metric ingestion of `trainyard serve`: points per second accepted
 * durably (answered 200 only after the group commit that stored them) from many jobs
 * reporting at once, beside two baselines measured by the same threads in the same run.
 *
 * Usage:
 *   bench_metrics [--trainyard PATH] [--jobs N] [--batch N] [--values N] [--seconds S]
 *                 [--baseline-seconds S] [--keep] [--server-arg ARG]...
 *
 *   --trainyard         the server binary (default: the one of this build tree)
 *   --jobs              reporting jobs, one thread and one keep-alive connection each (64)
 *   --batch             points per POST (default 1000; trainyard-worker sends what its ring
 *                       holds, up to 2000)
 *   --values            metric values per point (default 4: loss, lr, samples_per_s, epoch,
 *                       the values of trainyard-worker's "log" points)
 *   --seconds           length of the ingestion run (default 10)
 *   --baseline-seconds  length of each baseline run (default 5)
 *   --keep              keep the temporary directory (database, the server's log)
 *   --server-arg        one more argument for `trainyard serve` (repeatable)
 *
 * It starts its own server (127.0.0.1, a port the kernel picks, a fresh data directory and
 * database under $TMPDIR, admission paused with --queue-limit 0 so that the jobs stay
 * PENDING and accept points, --max-connections-per-ip 1024 since every client shares one
 * address here) and stops it at the end. It submits --jobs jobs, then runs,
 * with --jobs threads each time:
 *   1. GET /healthz as fast as it answers: the HTTP stack's rate on this machine now;
 *   2. the ingestion run: each thread POSTs /v1/jobs/{its job}/metrics with --batch points
 *      of consecutive steps (step, time and --values values, like the worker's points),
 *      checking the 200 and its "accepted" count;
 *   3. durable single-job submissions (POST /v1/jobs), the figure the server benchmark
 *      reports, as a second baseline.
 * The ingestion figure is then also given as a ratio to each baseline, which reads the
 * same on a busier or quieter machine. Afterwards every job's loss series is read back
 * (GET /v1/jobs/{id}/metrics?name=loss) and its total_points must equal the points
 * acknowledged for it: acknowledged means stored.
 *
 * The admin token reports for every job (the per-job tokens are the server's to mint).
 * Output: the figures, then one key=value line for scripts. Exit status 0 when every
 * request succeeded and every point was read back (target met or not), 1 otherwise,
 * 2 on a usage error. Build in Release:
 *   cmake --build build-rel --target bench_metrics && build-rel/bench/bench_metrics
 */
#define _GNU_SOURCE /* FTW_PHYS, FTW_DEPTH */
#include "bench/bench_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_TRAINYARD
#define BENCH_TRAINYARD "trainyard"
#endif

#define MAX_SERVER_ARGS 32
#define MAX_JOBS 1024
#define START_TIMEOUT_MS 30000
#define REQUEST_TIMEOUT_MS 120000L
#define LAT_SAMPLES 200000 /* per thread and run, enough for minutes of small batches */
#define TARGET_POINTS_PER_S 200000.0

extern char **environ;

static const char *const value_names[] = {"loss", "lr", "samples_per_s", "epoch",
                                          "accuracy", "grad_norm", "tokens_per_s", "mem_gb"};
#define MAX_VALUES ((int)(sizeof value_names / sizeof value_names[0]))

typedef struct opts {
    const char *trainyard;
    int jobs, batch, values, seconds, baseline_seconds, keep;
    const char *server_args[MAX_SERVER_ARGS];
    int nserver_args;
} opts;

typedef bench_buf buf;

typedef enum mode { MODE_HEALTHZ, MODE_METRICS, MODE_SUBMIT } mode;

/* One client thread: its job, its connection, its counts for the current run. */
typedef struct client {
    int idx;
    char job[48];
    CURL *h;
    struct curl_slist *headers;
    buf body, resp;
    int64_t next_step;        /* first step of the next batch */
    uint64_t acked_points;    /* over all ingestion runs */
    /* per run */
    uint64_t requests, points, errors;
    long bad_status;
    char bad_body[200];
    double *lat_ms;
    size_t nlat;
    pthread_t th;
} client;

static bench_server g_srv;
static char g_auth[160];
static opts g_o;
static client *g_clients;
static mode g_mode;
static atomic_int g_stop;
static pthread_barrier_t g_ready;

/* ---- small helpers ------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void buf_printf(buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp || bench_buf_add(b, tmp, (size_t)n) < 0)
        bench_die("out of memory building a request");
}

static void start_server(void)
{
    /* Every reporting job connects from 127.0.0.1 here, where real ones have an address
     * each: room for them all, the probe that reads /metrics and the baselines. */
    const char *args[MAX_SERVER_ARGS + 8] = {"--queue-limit", "0", "--max-connections-per-ip",
                                             "1024"};
    size_t n = 4;

    snprintf(g_srv.token, sizeof g_srv.token, "bench-metrics-%ld-%lld", (long)getpid(),
             (long long)(bench_mono_ms() * 1e3));
    snprintf(g_auth, sizeof g_auth, "Authorization: Bearer %s", g_srv.token);
    for (int i = 0; i < g_o.nserver_args; i++)
        args[n++] = g_o.server_args[i];
    args[n] = NULL;
    bench_start_server(&g_srv, g_o.trainyard, args, START_TIMEOUT_MS);
}

/* ---- HTTP ---------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    return bench_buf_add(ud, ptr, size * nmemb) < 0 ? 0 : size * nmemb;
}

static void client_init(client *c)
{
    c->h = curl_easy_init();
    c->headers = curl_slist_append(NULL, g_auth);
    c->headers = curl_slist_append(c->headers, "Content-Type: application/json");
    c->headers = curl_slist_append(c->headers, "Expect:");
    c->lat_ms = malloc(LAT_SAMPLES * sizeof *c->lat_ms);
    if (!c->h || !c->headers || !c->lat_ms)
        bench_die("out of memory");
}

static void client_free(client *c)
{
    curl_easy_cleanup(c->h);
    curl_slist_free_all(c->headers);
    free(c->body.data);
    free(c->resp.data);
    free(c->lat_ms);
}

/* One request on c's keep-alive connection; the status, the body in c->resp; -1: none. */
static long http(client *c, const char *method, const char *path, const buf *body)
{
    char url[512];
    long status = 0;

    bench_buf_reset(&c->resp);
    snprintf(url, sizeof url, "%s%s", g_srv.url, path);
    curl_easy_reset(c->h);
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->resp);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body->data);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    } else {
        curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
    }
    if (curl_easy_perform(c->h) != CURLE_OK)
        return -1;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* A number from the /metrics text: the first sample of name (any labels); -1: none. */
static double metric_value(client *c, const char *name)
{
    buf none = {0};
    if (http(c, "GET", "/metrics", &none) != 200)
        bench_die("GET /metrics failed");
    size_t len = strlen(name);
    for (const char *p = c->resp.data; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, len) != 0)
            continue;
        const char *v = p + len;
        if (*v == '{' && (v = strchr(v, '}')) != NULL)
            v++;
        if (v && *v == ' ')
            return strtod(v + 1, NULL);
    }
    return -1;
}

/* ---- the requests -------------------------------------------------------- */

/* {"points": [...]}: --batch points from c->next_step on, like the worker's. */
static void build_metrics_body(client *c)
{
    struct timespec ts;
    struct tm tm;
    char second[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t secs = ts.tv_sec;
    gmtime_r(&secs, &tm);
    strftime(second, sizeof second, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)(ts.tv_nsec / 1000000);

    bench_buf_reset(&c->body);
    bench_buf_add(&c->body, "{\"points\":[", 11);
    for (int i = 0; i < g_o.batch; i++) {
        int64_t step = c->next_step + i;
        double x = (double)step;
        double v[MAX_VALUES] = {2.3 * exp(-x / 5e4) + 0.05, 2e-3 * cos(x / 1e5),
                                31000.0 + (double)(step % 97), x / 235.0, 0.9 - 0.5 * exp(-x / 1e4),
                                1.0 / (1.0 + x / 1e3), 1e6, 12.5};
        buf_printf(&c->body, "%s{\"step\":%lld,\"time\":\"%s.%03dZ\"", i ? "," : "",
                   (long long)step, second, ms);
        for (int k = 0; k < g_o.values; k++)
            buf_printf(&c->body, ",\"%s\":%.9g", value_names[k], v[k]);
        bench_buf_add(&c->body, "}", 1);
    }
    bench_buf_add(&c->body, "]}", 2);
}

static const char submit_body[] =
    "{\"name\":\"bench-submit\",\"image\":\"local\",\"command\":[\"true\"],"
    "\"workers\":{\"count\":1}}";

/* Sends one request of the current mode; 1 when it succeeded. */
static int one_request(client *c, uint64_t *points)
{
    char path[128];
    long st = 0;
    *points = 0;
    switch (g_mode) {
    case MODE_HEALTHZ:
        bench_buf_reset(&c->body);
        return http(c, "GET", "/healthz", &c->body) == 200;
    case MODE_SUBMIT:
        bench_buf_reset(&c->body);
        bench_buf_add(&c->body, submit_body, sizeof submit_body - 1);
        st = http(c, "POST", "/v1/jobs", &c->body);
        if (st != 201 && st != 200)
            break;
        return 1;
    case MODE_METRICS:
        build_metrics_body(c);
        snprintf(path, sizeof path, "/v1/jobs/%s/metrics", c->job);
        st = http(c, "POST", path, &c->body);
        if (st != 200)
            break;
        json_t *j = json_loadb(c->resp.data, c->resp.len, 0, NULL);
        json_int_t acc = json_integer_value(json_object_get(j, "accepted"));
        json_decref(j);
        if (acc != g_o.batch) {
            st = 0;
            break;
        }
        c->next_step += g_o.batch;
        c->acked_points += (uint64_t)g_o.batch;
        *points = (uint64_t)g_o.batch;
        return 1;
    }
    if (!c->bad_status) {
        c->bad_status = st;
        snprintf(c->bad_body, sizeof c->bad_body, "%.*s",
                 (int)(c->resp.len < 190 ? c->resp.len : 190), c->resp.data ? c->resp.data : "");
    }
    return 0;
}

static void *client_main(void *arg)
{
    client *c = arg;
    uint64_t pts;
    /* Open the connection before the clock starts. */
    buf none = {0};
    http(c, "GET", "/healthz", &none);
    pthread_barrier_wait(&g_ready);
    while (!atomic_load(&g_stop)) {
        double t0 = bench_mono_ms();
        int ok = one_request(c, &pts);
        double dt = bench_mono_ms() - t0;
        if (!ok) {
            c->errors++;
            continue;
        }
        c->requests++;
        c->points += pts;
        if (c->nlat < LAT_SAMPLES)
            c->lat_ms[c->nlat++] = dt;
    }
    return NULL;
}

typedef struct run_result {
    double seconds, rps, pps, p50, p99, server_cpu, self_cpu, commits;
    uint64_t requests, points, errors;
} run_result;

static void run(mode m, int seconds, run_result *res)
{
    int n = g_o.jobs;
    g_mode = m;
    atomic_store(&g_stop, 0);
    for (int i = 0; i < n; i++) {
        client *c = &g_clients[i];
        c->requests = c->points = c->errors = 0;
        c->nlat = 0;
    }
    pthread_barrier_init(&g_ready, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++)
        if (pthread_create(&g_clients[i].th, NULL, client_main, &g_clients[i]) != 0)
            bench_die("pthread_create failed");
    client probe = {0};
    client_init(&probe);
    double commits0 = metric_value(&probe, "trainyard_store_commit_duration_seconds_count");
    pthread_barrier_wait(&g_ready);
    double t0 = bench_mono_ms(), cpu0 = bench_proc_cpu_s(g_srv.pid), self0 = bench_self_cpu_s();
    bench_sleep_us((long)seconds * 1000000L);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(g_clients[i].th, NULL);
    double t1 = bench_mono_ms();
    res->server_cpu = bench_proc_cpu_s(g_srv.pid) - cpu0;
    res->self_cpu = bench_self_cpu_s() - self0;
    res->commits = metric_value(&probe, "trainyard_store_commit_duration_seconds_count") - commits0;
    client_free(&probe);
    pthread_barrier_destroy(&g_ready);

    size_t total_lat = 0;
    res->requests = res->points = res->errors = 0;
    for (int i = 0; i < n; i++) {
        res->requests += g_clients[i].requests;
        res->points += g_clients[i].points;
        res->errors += g_clients[i].errors;
        total_lat += g_clients[i].nlat;
    }
    double *lat = malloc((total_lat ? total_lat : 1) * sizeof *lat);
    if (!lat)
        bench_die("out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < g_clients[i].nlat; j++)
            lat[k++] = g_clients[i].lat_ms[j];
    qsort(lat, k, sizeof *lat, bench_cmp_double);
    res->seconds = (t1 - t0) / 1e3;
    res->rps = (double)res->requests / res->seconds;
    res->pps = (double)res->points / res->seconds;
    res->p50 = bench_percentile(lat, k, 50);
    res->p99 = bench_percentile(lat, k, 99);
    free(lat);
    for (int i = 0; i < n && res->errors; i++)
        if (g_clients[i].bad_status || g_clients[i].errors) {
            fprintf(stderr, "bench_metrics: client %d: %llu failed requests, first: status %ld %s\n",
                    i, (unsigned long long)g_clients[i].errors, g_clients[i].bad_status,
                    g_clients[i].bad_body);
            break;
        }
}

static void print_run(const char *what, const run_result *r)
{
    printf("%-34s %10.0f req/s  p50 %7.2f ms  p99 %7.2f ms  %9llu requests  %llu failed\n", what,
           r->rps, r->p50, r->p99, (unsigned long long)r->requests,
           (unsigned long long)r->errors);
    printf("%-34s server CPU %.0f%% of a core, this client %.0f%%, %.0f group commits\n", "",
           100.0 * r->server_cpu / r->seconds, 100.0 * r->self_cpu / r->seconds, r->commits);
}

/* Creates the jobs (one :batch) and keeps their ids in the clients. */
static void create_jobs(client *c)
{
    json_t *jobs = json_array();
    for (int i = 0; i < g_o.jobs; i++) {
        char name[48];
        snprintf(name, sizeof name, "reporter-%d", i);
        json_array_append_new(jobs, json_pack("{s:s,s:s,s:[s],s:{s:i}}", "name", name, "image",
                                              "local", "command", "true", "workers", "count", 1));
    }
    json_t *req = json_pack("{s:o}", "jobs", jobs);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    buf body = {0};
    if (!text || bench_buf_add(&body, text, strlen(text)) < 0)
        bench_die("out of memory");
    free(text);
    long st = http(c, "POST", "/v1/jobs:batch", &body);
    free(body.data);
    if (st != 201 && st != 200)
        bench_die("POST /v1/jobs:batch: status %ld: %.300s", st,
                  c->resp.data ? c->resp.data : "");
    json_t *j = json_loadb(c->resp.data, c->resp.len, 0, NULL);
    json_t *arr = json_object_get(j, "jobs");
    if (json_array_size(arr) != (size_t)g_o.jobs)
        bench_die("POST /v1/jobs:batch answered %zu jobs: %.300s", json_array_size(arr),
                  c->resp.data);
    for (int i = 0; i < g_o.jobs; i++) {
        const char *id = json_string_value(json_object_get(json_array_get(arr, (size_t)i), "id"));
        if (!id)
            bench_die("a job of the batch has no id: %.300s", c->resp.data);
        snprintf(g_clients[i].job, sizeof g_clients[i].job, "%s", id);
    }
    json_decref(j);
}

/* Every job's loss series holds exactly the points acknowledged for it. 0 when so. */
static int verify(client *c)
{
    buf none = {0};
    int bad = 0;
    for (int i = 0; i < g_o.jobs; i++) {
        char path[160];
        snprintf(path, sizeof path, "/v1/jobs/%s/metrics?name=loss&max_points=2", g_clients[i].job);
        long st = http(c, "GET", path, &none);
        json_t *j = st == 200 ? json_loadb(c->resp.data, c->resp.len, 0, NULL) : NULL;
        json_t *s = json_array_get(json_object_get(j, "series"), 0);
        json_int_t total = json_integer_value(json_object_get(s, "total_points"));
        if (st != 200 || (uint64_t)total != g_clients[i].acked_points) {
            fprintf(stderr, "bench_metrics: job %s: %llu points acknowledged, the server holds "
                    "%lld (status %ld)\n", g_clients[i].job,
                    (unsigned long long)g_clients[i].acked_points, (long long)total, st);
            bad = 1;
        }
        json_decref(j);
    }
    return bad;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_metrics [--trainyard PATH] [--jobs N] [--batch N] [--values N] "
               "[--seconds S]\n"
               "                     [--baseline-seconds S] [--keep] [--server-arg ARG]...\n");
}

static void parse_opts(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"trainyard", required_argument, NULL, 't'},
        {"jobs", required_argument, NULL, 'j'},
        {"batch", required_argument, NULL, 'b'},
        {"values", required_argument, NULL, 'v'},
        {"seconds", required_argument, NULL, 's'},
        {"baseline-seconds", required_argument, NULL, 'B'},
        {"keep", no_argument, NULL, 'k'},
        {"server-arg", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;
    g_o = (opts){.trainyard = BENCH_TRAINYARD, .jobs = 64, .batch = 1000, .values = 4,
                 .seconds = 10, .baseline_seconds = 5};
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 't': g_o.trainyard = optarg; break;
        case 'j': bad |= bench_parse_int(optarg, 1, MAX_JOBS, &g_o.jobs); break;
        case 'b': bad |= bench_parse_int(optarg, 1, 5000, &g_o.batch); break;
        case 'v': bad |= bench_parse_int(optarg, 1, MAX_VALUES, &g_o.values); break;
        case 's': bad |= bench_parse_int(optarg, 1, 3600, &g_o.seconds); break;
        case 'B': bad |= bench_parse_int(optarg, 0, 3600, &g_o.baseline_seconds); break;
        case 'k': g_o.keep = 1; break;
        case 'a':
            if (g_o.nserver_args >= MAX_SERVER_ARGS)
                bad = 1;
            else
                g_o.server_args[g_o.nserver_args++] = optarg;
            break;
        case 'h': usage(stdout); exit(0);
        default: bad = 1;
        }
    }
    if (bad || optind != argc) {
        usage(stderr);
        exit(2);
    }
    if (access(g_o.trainyard, X_OK) != 0) {
        fprintf(stderr, "bench_metrics: %s is not an executable; build it or pass --trainyard\n",
                g_o.trainyard);
        exit(2);
    }
}

static void print_machine(void)
{
    char *cpuinfo = bench_slurp("/proc/cpuinfo"), *load = bench_slurp("/proc/loadavg");
    char model[128] = "?";
    const char *p = cpuinfo ? strstr(cpuinfo, "model name") : NULL;
    struct utsname u;
    if (p && (p = strchr(p, ':')) != NULL)
        snprintf(model, sizeof model, "%.*s", (int)strcspn(p + 2, "\n"), p + 2);
    uname(&u);
    if (load)
        load[strcspn(load, "\n")] = '\0';
    printf("Trainyard metric ingestion benchmark\n");
    printf("machine: %ld CPUs online, %s, kernel %s, load average %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), model, u.release, load ? load : "?");
    printf("server: %s serve --listen 127.0.0.1:0 --queue-limit 0 --max-connections-per-ip 1024",
           g_o.trainyard);
    for (int i = 0; i < g_o.nserver_args; i++)
        printf(" %s", g_o.server_args[i]);
    printf("\n        (data directory under %s)\n", g_srv.root);
    printf("clients: %d threads, one job and one keep-alive connection each; %d points of %d "
           "values per POST\n", g_o.jobs, g_o.batch, g_o.values);
    free(cpuinfo);
    free(load);
}

int main(int argc, char **argv)
{
    run_result health = {0}, ingest = {0}, submit = {0};
    int failed = 0;

    bench_init("bench_metrics", &g_srv);
    parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        bench_die("curl_global_init failed");
    g_srv.keep_on_exit = g_o.keep;
    start_server();
    print_machine();
    g_clients = calloc((size_t)g_o.jobs, sizeof *g_clients);
    if (!g_clients)
        bench_die("out of memory");
    for (int i = 0; i < g_o.jobs; i++) {
        g_clients[i].idx = i;
        client_init(&g_clients[i]);
    }
    create_jobs(&g_clients[0]);
    printf("\n");
    fflush(stdout);

    if (g_o.baseline_seconds > 0) {
        run(MODE_HEALTHZ, g_o.baseline_seconds, &health);
        print_run("baseline: GET /healthz", &health);
        fflush(stdout);
    }
    run(MODE_METRICS, g_o.seconds, &ingest);
    print_run("ingestion: POST /v1/jobs/{id}/metrics", &ingest);
    printf("%-34s %10.0f points/s accepted durably (%.0f values/s), target >= %.0f: %s\n", "",
           ingest.pps, ingest.pps * g_o.values, TARGET_POINTS_PER_S,
           ingest.pps >= TARGET_POINTS_PER_S ? "met" : "NOT MET");
    fflush(stdout);
    if (g_o.baseline_seconds > 0) {
        run(MODE_SUBMIT, g_o.baseline_seconds, &submit);
        print_run("baseline: POST /v1/jobs (durable)", &submit);
    }
    failed |= verify(&g_clients[0]);
    if (ingest.errors || health.errors || submit.errors)
        failed = 1;

    printf("\nratios: %.2f points per /healthz request; %.2f points per durable submission\n",
           health.rps > 0 ? ingest.pps / health.rps : 0, submit.rps > 0 ? ingest.pps / submit.rps : 0);
    printf("read back: every job's loss series holds the points acknowledged for it: %s\n",
           failed ? "NO" : "yes");
    printf("\nresult points_per_s=%.0f values_per_s=%.0f post_p50_ms=%.2f post_p99_ms=%.2f "
           "healthz_per_s=%.0f submits_per_s=%.0f jobs=%d batch=%d values=%d errors=%llu\n",
           ingest.pps, ingest.pps * g_o.values, ingest.p50, ingest.p99, health.rps, submit.rps,
           g_o.jobs, g_o.batch, g_o.values,
           (unsigned long long)(ingest.errors + health.errors + submit.errors));

    for (int i = 0; i < g_o.jobs; i++)
        client_free(&g_clients[i]);
    free(g_clients);
    bench_stop_server(&g_srv);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
