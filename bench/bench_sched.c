/*
 * bench_sched.c - the scheduling overhead of `trainyard serve` with the local
 * backend: how fast queued jobs drain, and how long a job waits between its
 * submission and the exec of its first rank when a slot is free.
 *
 * Usage:
 *   bench_sched [--trainyard PATH] [--stamp PATH] [--slots N] [--jobs N] [--rounds N]
 *               [--workers N] [--latency-jobs N] [--warmup N] [--idle N] [--idle-seconds S]
 *               [--keep] [--server-arg ARG]...
 *
 *   --trainyard    the server binary (default: the one of this build tree)
 *   --stamp        bench_stamp, the latency run's job (default: this build tree's)
 *   --slots        --local-slots of the server (default 4)
 *   --jobs         jobs per throughput round, submitted in one :batch (default 1000, max 1000)
 *   --rounds       throughput rounds (default 3)
 *   --workers      ranks per throughput job (default 1)
 *   --latency-jobs jobs of the latency run, one at a time (default 200)
 *   --warmup       latency jobs run first and not counted (default 10)
 *   --idle         jobs left waiting in a paused queue for the idle run (default 0: no idle run)
 *   --idle-seconds how long the idle server is sampled (default 10)
 *   --keep         keep the temporary directory (database, logs, the server's log)
 *   --server-arg   one more argument for `trainyard serve` (repeatable), e.g. --log-level warn
 *
 * It starts its own server (on 127.0.0.1, port chosen by the kernel, a fresh
 * data directory under $TMPDIR) and stops it at the end. Build in Release:
 *   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2 \
 *       --target bench_sched && build-rel/bench/bench_sched
 *
 * Throughput: each round submits --jobs jobs whose command is `true` in one
 * POST /v1/jobs:batch, so they are all queued at once, then polls /metrics
 * (trainyard_jobs{state="SUCCEEDED"}) until every one has succeeded. jobs/s
 * counts from the start of the POST (the scheduler may start jobs before the
 * answer arrives), the conservative figure; the time from the end of the
 * submission is printed beside it, with the store's group commits (one
 * fsync each) and the share of the round they took (from /metrics), and the
 * CPU of the server process (its ranks not included) and of this client.
 *
 * Latency: one job at a time, each bench_stamp, which writes CLOCK_REALTIME
 * at the start of its main() to $TRAINYARD_OUTPUT_DIR/stamp; the latency is
 * that stamp minus the client's CLOCK_REALTIME just before the POST (both on
 * this machine). It includes the durable submission (one fsync at least),
 * the scheduler's wake-up and admission, writing STARTING before the launch,
 * and posix_spawn + exec. Each job is waited for (SUCCEEDED) before the next,
 * so every one finds its slot free. Percentiles are nearest-rank.
 *
 * Idle (--idle N, after the other runs): the server is started with
 * `--queue-limit idle=0`, and N jobs are submitted to queue "idle" through
 * :batch (1,000 per request), so they wait for as long as the server runs,
 * as a sweep held back by its parallelism limit does. Once the server has
 * settled (no scheduler round and under 1 % of a core for a second, or 60 s
 * at most: WAL checkpoints after the fill), its CPU time (/proc/<pid>/stat
 * utime + stime) and trainyard_scheduler_rounds_total are read, the server
 * is left alone for --idle-seconds, and both are read again: the share of
 * one core it used, and the rounds it ran, while nothing changed. Target:
 * under 1 % of a core.
 *
 * Output: human-readable figures, then one key=value line for scripts. Exit
 * status 0 when every job succeeded (targets missed or not), 1 otherwise,
 * 2 on a usage error.
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
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
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
#ifndef BENCH_STAMP
#define BENCH_STAMP "bench_stamp"
#endif

#define MAX_SERVER_ARGS 32
#define START_TIMEOUT_MS 30000
#define ROUND_TIMEOUT_MS 600000 /* a round that takes longer is a failure */
#define JOB_TIMEOUT_MS 60000
/* /metrics is polled this often while a round drains: rarely enough that the
 * client leaves the CPUs to the server, often enough to add under 2% to a
 * round of a second or more. */
#define POLL_US 20000
#define TARGET_JOBS_PER_S 500.0
#define TARGET_P50_MS 5.0
#define TARGET_IDLE_CPU_PCT 1.0
#define IDLE_QUEUE "idle"
#define IDLE_BATCH 1000
#define SETTLE_TIMEOUT_MS 60000

extern char **environ;

typedef struct opts {
    const char *trainyard;
    const char *stamp;
    int slots;
    int jobs;
    int rounds;
    int workers;
    int latency_jobs;
    int warmup;
    int idle;
    int idle_seconds;
    int keep;
    const char *server_args[MAX_SERVER_ARGS];
    int nserver_args;
} opts;

typedef bench_buf buf;

static bench_server g_srv;
static CURL *g_curl;                  /* the connection to the server */
static struct curl_slist *g_headers; /* its headers: the admin token, JSON */

/* ---- small helpers ------------------------------------------------------- */

static void start_server(const opts *o)
{
    char slots[16], auth[160];
    const char *args[MAX_SERVER_ARGS + 8] = {"--local-slots", slots};
    size_t n = 2;

    snprintf(g_srv.token, sizeof g_srv.token, "bench-sched-%ld-%lld", (long)getpid(),
             (long long)bench_real_ns());
    snprintf(slots, sizeof slots, "%d", o->slots);
    if (o->idle > 0) {
        args[n++] = "--queue-limit";
        args[n++] = IDLE_QUEUE "=0";
    }
    for (int i = 0; i < o->nserver_args; i++)
        args[n++] = o->server_args[i];
    args[n] = NULL;
    bench_start_server(&g_srv, o->trainyard, args, START_TIMEOUT_MS);

    g_curl = curl_easy_init();
    if (!g_curl)
        bench_die("curl_easy_init failed");
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_srv.token);
    g_headers = curl_slist_append(NULL, auth);
    g_headers = curl_slist_append(g_headers, "Content-Type: application/json");
    g_headers = curl_slist_append(g_headers, "Expect:");
}

static void stop_server(void)
{
    if (g_curl) {
        curl_easy_cleanup(g_curl);
        g_curl = NULL;
    }
    curl_slist_free_all(g_headers);
    g_headers = NULL;
    bench_stop_server(&g_srv);
}

/* ---- HTTP ---------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    return bench_buf_add(ud, ptr, size * nmemb) < 0 ? 0 : size * nmemb;
}

/* One request on the keep-alive connection; returns the status, the body in *out. */
static long http(const char *method, const char *path, const char *body, buf *out)
{
    CURL *h = g_curl;
    char url[512];
    long status = 0;
    CURLcode cc;

    bench_buf_reset(out);
    snprintf(url, sizeof url, "%s%s", g_srv.url, path);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, g_headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? strlen(body) : 0));
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        bench_die("%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* The value of the sample trainyard_jobs{state="STATE"} in /metrics; -1 if absent. */
static long long jobs_in_state(const char *state, buf *scratch)
{
    char needle[96];
    const char *p;

    if (http("GET", "/metrics", NULL, scratch) != 200)
        bench_die("GET /metrics: %s", scratch->data ? scratch->data : "");
    snprintf(needle, sizeof needle, "\ntrainyard_jobs{state=\"%s\"} ", state);
    p = strstr(scratch->data, needle);
    return p ? strtoll(p + strlen(needle), NULL, 10) : -1;
}

/* The value of the unlabelled sample `name` in /metrics (e.g. a histogram's
 * _count); 0 when absent. */
static double metric_value(const char *name, buf *scratch)
{
    char needle[160];
    const char *p;

    if (http("GET", "/metrics", NULL, scratch) != 200)
        bench_die("GET /metrics: %s", scratch->data ? scratch->data : "");
    snprintf(needle, sizeof needle, "\n%s ", name);
    if (!(p = strstr(scratch->data, needle))) {
        snprintf(needle, sizeof needle, "\n%s{} ", name);
        p = strstr(scratch->data, needle);
    }
    return p ? strtod(p + strlen(needle), NULL) : 0;
}

/* ---- throughput ---------------------------------------------------------- */

typedef struct round_result {
    double submit_ms;  /* the POST, until its answer */
    double drain_ms;   /* from the answer until all succeeded */
    double total_ms;   /* from the start of the POST until all succeeded */
    double server_cpu; /* seconds, over total_ms */
    double client_cpu; /* seconds of this process, over total_ms */
    double commits;    /* store group commits (each one fsync), over total_ms */
    double commit_s;   /* seconds the store spent committing, over total_ms */
} round_result;

/* {"jobs": jobs} as text (new); jobs is stolen. */
static char *jobs_body(json_t *jobs)
{
    json_t *req = json_pack("{s:o}", "jobs", jobs);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!text)
        bench_die("out of memory");
    return text;
}

/* {"jobs": [n specs of `true`]} (new). */
static char *batch_body(int round, int n, int workers)
{
    json_t *jobs = json_array();

    for (int i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "tp-%d-%d", round, i);
        json_array_append_new(
            jobs, json_pack("{s:s, s:s, s:[s], s:{s:i}, s:{s:i, s:i}}", "name", name, "image",
                            "local", "command", "true", "workers", "count", workers, "restart",
                            "max", 0, "backoff_seconds", 0));
    }
    return jobs_body(jobs);
}

static void throughput_round(const opts *o, int round, round_result *res)
{
    char *body = batch_body(round, o->jobs, o->workers);
    buf resp = {0}, scratch = {0};
    long long base = jobs_in_state("SUCCEEDED", &scratch), done = 0, failed0, failed;
    double t0, t1, deadline, cpu0, self0, commits0, commit_s0;
    long status;

    if (base < 0)
        bench_die("/metrics has no trainyard_jobs{state=\"SUCCEEDED\"} sample");
    failed0 = jobs_in_state("FAILED", &scratch);
    commits0 = metric_value("trainyard_store_commit_batch_size_count", &scratch);
    commit_s0 = metric_value("trainyard_store_commit_duration_seconds_sum", &scratch);
    cpu0 = bench_proc_cpu_s(g_srv.pid);
    self0 = bench_self_cpu_s();
    t0 = bench_mono_ms();
    status = http("POST", "/v1/jobs:batch", body, &resp);
    t1 = bench_mono_ms();
    if (status != 201)
        bench_die("POST /v1/jobs:batch answered %ld: %.300s", status, resp.data ? resp.data : "");
    deadline = t1 + ROUND_TIMEOUT_MS;
    for (;;) {
        done = jobs_in_state("SUCCEEDED", &scratch) - base;
        if (done >= o->jobs)
            break;
        failed = jobs_in_state("FAILED", &scratch);
        if (failed > failed0)
            bench_die("round %d: %lld jobs FAILED (the server's log says why)", round,
                failed - failed0);
        if (bench_mono_ms() > deadline)
            bench_die("round %d: only %lld of %d jobs succeeded after %d s", round, done, o->jobs,
                ROUND_TIMEOUT_MS / 1000);
        bench_sleep_us(POLL_US);
    }
    res->total_ms = bench_mono_ms() - t0;
    res->submit_ms = t1 - t0;
    res->drain_ms = res->total_ms - res->submit_ms;
    res->server_cpu = bench_proc_cpu_s(g_srv.pid) - cpu0;
    res->client_cpu = bench_self_cpu_s() - self0;
    res->commits = metric_value("trainyard_store_commit_batch_size_count", &scratch) - commits0;
    res->commit_s =
        metric_value("trainyard_store_commit_duration_seconds_sum", &scratch) - commit_s0;
    free(body);
    free(resp.data);
    free(scratch.data);
}

/* ---- latency ------------------------------------------------------------- */

/* The id in a Job answer (copied into id). */
static void job_id_of(const char *body, char *id, size_t idlen)
{
    json_t *j = json_loads(body, 0, NULL);
    const char *s = json_string_value(json_object_get(j, "id"));
    if (!s)
        bench_die("no id in the answer: %.300s", body);
    snprintf(id, idlen, "%s", s);
    json_decref(j);
}

/* 1 when the job SUCCEEDED, 0 while it has not ended; dies when it FAILED or was CANCELLED. */
static int job_succeeded(const char *id, buf *scratch)
{
    char path[128];
    const char *p;

    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    if (http("GET", path, NULL, scratch) != 200)
        bench_die("GET %s: %.300s", path, scratch->data);
    p = strstr(scratch->data, "\"state\":\"");
    if (!p)
        bench_die("GET %s: no state in %.300s", path, scratch->data);
    p += 9;
    if (strncmp(p, "FAILED\"", 7) == 0 || strncmp(p, "CANCELLED\"", 10) == 0)
        bench_die("job %s ended %.9s; the server's log says why: %.400s", id, p, scratch->data);
    return strncmp(p, "SUCCEEDED\"", 10) == 0;
}

/* Waits until the job SUCCEEDED; dies when it ends otherwise. */
static void wait_succeeded(const char *id, buf *scratch)
{
    double deadline = bench_mono_ms() + JOB_TIMEOUT_MS;

    while (!job_succeeded(id, scratch)) {
        if (bench_mono_ms() > deadline)
            bench_die("job %s did not succeed within %d s", id, JOB_TIMEOUT_MS / 1000);
        bench_sleep_us(2000);
    }
}

/*
 * Runs n jobs one after another; lat[i] = stamp - client clock before the
 * POST, post[i] = the POST's round trip (both ms).
 */
static void latency_run(const opts *o, int n, const char *tag, double *lat, double *post)
{
    buf resp = {0}, scratch = {0};
    json_t *spec;

    for (int i = 0; i < n; i++) {
        char name[48], id[64], stamp[512], *body, *text;
        int64_t before, stamp_ns;
        double t0, t1, deadline;
        long status;

        snprintf(name, sizeof name, "lat-%s-%d", tag, i);
        spec = json_pack("{s:s, s:s, s:[s], s:{s:i}, s:{s:i, s:i}}", "name", name, "image",
                         "local", "command", o->stamp, "workers", "count", 1, "restart", "max",
                         0, "backoff_seconds", 0);
        body = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        if (!body)
            bench_die("out of memory");

        before = bench_real_ns();
        t0 = bench_mono_ms();
        status = http("POST", "/v1/jobs", body, &resp);
        t1 = bench_mono_ms();
        free(body);
        if (status != 201)
            bench_die("POST /v1/jobs answered %ld: %.300s", status, resp.data);
        job_id_of(resp.data, id, sizeof id);

        snprintf(stamp, sizeof stamp, "%s/jobs/%s/output/stamp", g_srv.data, id);
        deadline = bench_mono_ms() + JOB_TIMEOUT_MS;
        for (int polls = 1; !(text = bench_slurp(stamp)); polls++) {
            if (bench_mono_ms() > deadline)
                bench_die("job %s: no %s after %d s", id, stamp, JOB_TIMEOUT_MS / 1000);
            /* A job that cannot start never stamps: look at it now and then. */
            if (polls % 200 == 0 && job_succeeded(id, &scratch))
                bench_die("job %s succeeded without writing %s", id, stamp);
            bench_sleep_us(500);
        }
        stamp_ns = strtoll(text, NULL, 10);
        free(text);
        lat[i] = (double)(stamp_ns - before) / 1e6;
        post[i] = t1 - t0;
        wait_succeeded(id, &scratch);
    }
    free(resp.data);
    free(scratch.data);
}

/* ---- idle ---------------------------------------------------------------- */

typedef struct idle_result {
    double fill_s;       /* the submissions, seconds */
    double settle_s;     /* until the server was quiet, seconds */
    int settled;         /* 0: it never was, within SETTLE_TIMEOUT_MS */
    double wall_s;       /* the sampled interval */
    double cpu_s;        /* the server's CPU seconds over it */
    double rounds;       /* scheduler rounds over it */
    long long pending;   /* jobs PENDING at the end */
} idle_result;

/* {"jobs": [n specs of `true` in queue IDLE_QUEUE]} (new). */
static char *idle_body(int first, int n)
{
    json_t *jobs = json_array();

    for (int i = first; i < first + n; i++) {
        char name[48];
        snprintf(name, sizeof name, "idle-%d", i);
        json_array_append_new(
            jobs, json_pack("{s:s, s:s, s:s, s:[s], s:{s:i}}", "name", name, "queue", IDLE_QUEUE,
                            "image", "local", "command", "true", "workers", "count", 1));
    }
    return jobs_body(jobs);
}

static void idle_run(const opts *o, idle_result *res)
{
    buf resp = {0}, scratch = {0};
    double t0 = bench_mono_ms(), deadline, cpu0, rounds0;

    for (int first = 0; first < o->idle; first += IDLE_BATCH) {
        int n = o->idle - first < IDLE_BATCH ? o->idle - first : IDLE_BATCH;
        char *body = idle_body(first, n);
        long status = http("POST", "/v1/jobs:batch", body, &resp);
        free(body);
        if (status != 201)
            bench_die("POST /v1/jobs:batch answered %ld: %.300s", status,
                      resp.data ? resp.data : "");
    }
    res->fill_s = (bench_mono_ms() - t0) / 1e3;

    /* Settled: a second without a scheduler round and with under 1 % of a core. */
    t0 = bench_mono_ms();
    deadline = t0 + SETTLE_TIMEOUT_MS;
    res->settled = 0;
    while (bench_mono_ms() < deadline) {
        double c = bench_proc_cpu_s(g_srv.pid);
        double r = metric_value("trainyard_scheduler_rounds_total", &scratch);
        double w = bench_mono_ms();
        bench_sleep_us(1000000);
        w = (bench_mono_ms() - w) / 1e3;
        if (metric_value("trainyard_scheduler_rounds_total", &scratch) == r &&
            100.0 * (bench_proc_cpu_s(g_srv.pid) - c) / w < TARGET_IDLE_CPU_PCT) {
            res->settled = 1;
            break;
        }
    }
    res->settle_s = (bench_mono_ms() - t0) / 1e3;

    rounds0 = metric_value("trainyard_scheduler_rounds_total", &scratch);
    cpu0 = bench_proc_cpu_s(g_srv.pid);
    t0 = bench_mono_ms();
    bench_sleep_us((long)o->idle_seconds * 1000000L);
    res->cpu_s = bench_proc_cpu_s(g_srv.pid) - cpu0;
    res->wall_s = (bench_mono_ms() - t0) / 1e3;
    res->rounds = metric_value("trainyard_scheduler_rounds_total", &scratch) - rounds0;
    res->pending = jobs_in_state("PENDING", &scratch);
    free(resp.data);
    free(scratch.data);
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_sched [--trainyard PATH] [--stamp PATH] [--slots N] [--jobs N] "
               "[--rounds N]\n"
               "                   [--workers N] [--latency-jobs N] [--warmup N] [--idle N] "
               "[--idle-seconds S]\n"
               "                   [--keep] [--server-arg ARG]...\n");
}

static void parse_opts(int argc, char **argv, opts *o)
{
    static char abs_trainyard[PATH_MAX], abs_stamp[PATH_MAX];
    static const struct option longopts[] = {
        {"trainyard", required_argument, NULL, 't'},
        {"stamp", required_argument, NULL, 's'},
        {"slots", required_argument, NULL, 'n'},
        {"jobs", required_argument, NULL, 'j'},
        {"rounds", required_argument, NULL, 'r'},
        {"workers", required_argument, NULL, 'w'},
        {"latency-jobs", required_argument, NULL, 'l'},
        {"warmup", required_argument, NULL, 'u'},
        {"idle", required_argument, NULL, 'i'},
        {"idle-seconds", required_argument, NULL, 'd'},
        {"keep", no_argument, NULL, 'k'},
        {"server-arg", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;

    *o = (opts){.trainyard = BENCH_TRAINYARD, .stamp = BENCH_STAMP, .slots = 4, .jobs = 1000,
                .rounds = 3, .workers = 1, .latency_jobs = 200, .warmup = 10, .idle = 0,
                .idle_seconds = 10};
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 't': o->trainyard = optarg; break;
        case 's': o->stamp = optarg; break;
        case 'n': bad |= bench_parse_int(optarg, 1, 100000, &o->slots); break;
        case 'j': bad |= bench_parse_int(optarg, 1, 1000, &o->jobs); break;
        case 'r': bad |= bench_parse_int(optarg, 0, 1000, &o->rounds); break;
        case 'w': bad |= bench_parse_int(optarg, 1, 4096, &o->workers); break;
        case 'l': bad |= bench_parse_int(optarg, 0, 100000, &o->latency_jobs); break;
        case 'u': bad |= bench_parse_int(optarg, 0, 100000, &o->warmup); break;
        case 'i': bad |= bench_parse_int(optarg, 0, 10000000, &o->idle); break;
        case 'd': bad |= bench_parse_int(optarg, 1, 3600, &o->idle_seconds); break;
        case 'k': o->keep = 1; break;
        case 'a':
            if (o->nserver_args >= MAX_SERVER_ARGS)
                bad = 1;
            else
                o->server_args[o->nserver_args++] = optarg;
            break;
        case 'h': usage(stdout); exit(0);
        default: bad = 1;
        }
    }
    if (bad || optind != argc) {
        usage(stderr);
        exit(2);
    }
    if (access(o->trainyard, X_OK) != 0 || access(o->stamp, X_OK) != 0) {
        fprintf(stderr, "bench_sched: %s or %s is not an executable; build them or pass "
                        "--trainyard and --stamp\n", o->trainyard, o->stamp);
        exit(2);
    }
    /* Absolute: ranks run in their job's directory, not in ours. */
    if (!realpath(o->trainyard, abs_trainyard) || !realpath(o->stamp, abs_stamp)) {
        perror("bench_sched: realpath");
        exit(2);
    }
    o->trainyard = abs_trainyard;
    o->stamp = abs_stamp;
}

static void print_machine(const opts *o)
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
    printf("Trainyard scheduler benchmark (local backend)\n");
    printf("machine: %ld CPUs online, %s, kernel %s, load average %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), model, u.release, load ? load : "?");
    printf("server: %s serve --listen 127.0.0.1:0 --local-slots %d", o->trainyard, o->slots);
    if (o->idle > 0)
        printf(" --queue-limit " IDLE_QUEUE "=0");
    for (int i = 0; i < o->nserver_args; i++)
        printf(" %s", o->server_args[i]);
    printf("\n        (data directory under %s)\n", g_srv.root);
    free(cpuinfo);
    free(load);
}

int main(int argc, char **argv)
{
    opts o;
    round_result *rounds;
    double best = 0, *lat = NULL, *post = NULL, *warm_lat = NULL, *warm_post = NULL;
    double p50 = 0, p90 = 0, p99 = 0, lmax = 0, post50 = 0, post99 = 0;
    double idle_pct = 0;
    idle_result idle = {0};

    bench_init("bench_sched", &g_srv);
    parse_opts(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        bench_die("curl_global_init failed");
    g_srv.keep_on_exit = o.keep;
    start_server(&o);
    print_machine(&o);
    fflush(stdout);

    rounds = calloc((size_t)o.rounds + 1, sizeof *rounds);
    if (!rounds)
        bench_die("out of memory");
    if (o.rounds > 0) {
        printf("\n== throughput: %d round(s) of %d queued jobs (`true`, %d rank%s each) "
               "submitted in one :batch ==\n",
               o.rounds, o.jobs, o.workers, o.workers == 1 ? "" : "s");
        printf("%-6s %9s %9s %9s %8s %14s %8s %9s  %s\n", "round", "submit ms", "drain ms",
               "total ms", "jobs/s", "jobs/s (drain)", "commits", "commit %",
               "CPU: server (per job), this client");
    }
    for (int r = 0; r < o.rounds; r++) {
        round_result *res = &rounds[r];
        double rate, drain_rate;
        throughput_round(&o, r, res);
        rate = o.jobs / (res->total_ms / 1e3);
        drain_rate = res->drain_ms > 0 ? o.jobs / (res->drain_ms / 1e3) : 0;
        if (rate > best)
            best = rate;
        printf("%-6d %9.1f %9.1f %9.1f %8.0f %14.0f %8.0f %8.0f%%  %.0f%% (%.0f us), %.0f%%\n",
               r + 1, res->submit_ms, res->drain_ms, res->total_ms, rate, drain_rate, res->commits,
               100.0 * res->commit_s / (res->total_ms / 1e3),
               100.0 * res->server_cpu / (res->total_ms / 1e3), 1e6 * res->server_cpu / o.jobs,
               100.0 * res->client_cpu / (res->total_ms / 1e3));
        fflush(stdout);
    }

    if (o.latency_jobs > 0) {
        lat = calloc((size_t)o.latency_jobs, sizeof *lat);
        post = calloc((size_t)o.latency_jobs, sizeof *post);
        warm_lat = calloc((size_t)o.warmup + 1, sizeof *warm_lat);
        warm_post = calloc((size_t)o.warmup + 1, sizeof *warm_post);
        if (!lat || !post || !warm_lat || !warm_post)
            bench_die("out of memory");
        printf("\n== latency: %d jobs one at a time (after %d warm-up), from the client's "
               "clock before the POST to the rank's exec ==\n",
               o.latency_jobs, o.warmup);
        latency_run(&o, o.warmup, "warm", warm_lat, warm_post);
        latency_run(&o, o.latency_jobs, "run", lat, post);
        qsort(lat, (size_t)o.latency_jobs, sizeof *lat, bench_cmp_double);
        qsort(post, (size_t)o.latency_jobs, sizeof *post, bench_cmp_double);
        p50 = bench_percentile(lat, (size_t)o.latency_jobs, 50);
        p90 = bench_percentile(lat, (size_t)o.latency_jobs, 90);
        p99 = bench_percentile(lat, (size_t)o.latency_jobs, 99);
        lmax = lat[o.latency_jobs - 1];
        post50 = bench_percentile(post, (size_t)o.latency_jobs, 50);
        post99 = bench_percentile(post, (size_t)o.latency_jobs, 99);
        printf("submission to exec: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms "
               "(min %.2f ms)\n",
               p50, p90, p99, lmax, lat[0]);
        printf("the POST alone (durable submission, 201): p50 %.2f ms, p99 %.2f ms\n", post50,
               post99);
    }

    if (o.idle > 0) {
        printf("\n== idle: %d jobs waiting in queue " IDLE_QUEUE " (--queue-limit " IDLE_QUEUE
               "=0), the server left alone for %d s ==\n",
               o.idle, o.idle_seconds);
        fflush(stdout);
        idle_run(&o, &idle);
        idle_pct = 100.0 * idle.cpu_s / idle.wall_s;
        printf("filled through :batch in %.1f s; %s after %.1f s\n", idle.fill_s,
               idle.settled ? "settled" : "NOT settled", idle.settle_s);
        printf("over %.1f s: server CPU %.3f s = %.2f%% of one core; %.0f scheduler rounds; "
               "%lld jobs PENDING\n",
               idle.wall_s, idle.cpu_s, idle_pct, idle.rounds, idle.pending);
    }

    printf("\n== targets ==\n");
    if (o.rounds > 0)
        printf("%-44s %10.0f  %-10s %s\n", "queued jobs drained per second (best round)", best,
               ">= 500", best >= TARGET_JOBS_PER_S ? "ok" : "MISSED");
    if (o.latency_jobs > 0)
        printf("%-44s %7.2f ms  %-10s %s\n", "submission to exec, p50", p50, "<= 5 ms",
               p50 <= TARGET_P50_MS ? "ok" : "MISSED");
    if (o.idle > 0)
        printf("%-44s %8.2f %%  %-10s %s\n", "idle server, jobs waiting in a full queue", idle_pct,
               "< 1 %", idle_pct < TARGET_IDLE_CPU_PCT ? "ok" : "MISSED");
    printf("cpus=%ld slots=%d jobs=%d rounds=%d workers=%d best_jobs_per_s=%.1f "
           "latency_jobs=%d p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f post_p50_ms=%.3f "
           "idle_jobs=%d idle_cpu_pct=%.3f idle_rounds=%.0f\n",
           sysconf(_SC_NPROCESSORS_ONLN), o.slots, o.jobs, o.rounds, o.workers, best,
           o.latency_jobs, p50, p90, p99, lmax, post50, o.idle, idle_pct, idle.rounds);

    free(rounds);
    free(lat);
    free(post);
    free(warm_lat);
    free(warm_post);
    stop_server();
    curl_global_cleanup();
    return 0;
}
