/*
 * bench_kube.c - the Kubernetes backend against the fake API server, at cluster scale.
 *
 *   bench_kube [--nodes 3000] [--jobs 1000] [--ranks 2] [--samples 200] [--sweep 200]
 *              [--concurrency 32] [--trainyard PATH] [--fake PATH] [--profile FILE]
 *
 * First, side by side against one fake-kube-apiserver (--nodes nodes in us-west-2a/b/c, 8
 * on-demand A100s each, as deploy/cluster-profile.example.yaml describes them; the fake has no
 * rate limit of its own): --sweep one-rank jobs created through `trainyard serve` with its
 * default client settings (the time from submitting them in one :batch until the server has
 * created every object of theirs), beside the same objects created straight on the API
 * server by --concurrency threads on keep-alive connections (the Job, then its Secret owned by
 * it, as the backend renders them: scheduler/kube/render.h; the one headless Service that
 * names the ranks is made beforehand, as the server makes it once). The direct
 * creation runs before and after Trainyard's (with the server idle) and the ratio is against
 * their mean, so that the fake's growing store weighs on both sides alike.
 *
 * Then a fresh fake and server with no client-side rate limit (--kube-qps 0), printing:
 *   1. creation: --jobs jobs of --ranks ranks (1 GPU each) submitted in batches of 1,000;
 *      jobs/s from submission until every job's batch/v1 Job and Secret (and the rank
 *      Service) exist in the API server, and the server's CPU per job meanwhile (and over
 *      the fake's);
 *   2. every pod set Running at once: seconds until the server shows every job RUNNING, and
 *      the server's resident memory then (--jobs jobs running);
 *   3. status latency with every job running: for --samples jobs one at a time, the pods
 *      of one job set Succeeded (one control call), then GET /v1/jobs/{id} polled until it
 *      says SUCCEEDED; p50/p99/max of that time, which includes the fake's own reaction and
 *      the polling interval (1 ms);
 *   4. the pods' logs: seconds until the server streams the log of every running pod
 *      (trainyard_kube_log_streams_open), its CPU over 5 s with every stream open and quiet,
 *      then 10 lines of 100 bytes appended to every pod's log (one control call each) and
 *      the time and server CPU until all of it is in the server's log files
 *      (trainyard_kube_log_bytes_total); then for 10 s, 4 clients append 10 such lines a call
 *      to pod after pod: lines/s appended and written by the server, the server's and the fake's
 *      CPU per second and the server's RSS meanwhile;
 *   5. the server's resident memory now and at its peak (VmRSS, VmHWM).
 *
 *   bench_kube --free-to-admit [--nodes 100] [--samples 300] [--profile FILE]
 *
 * measures admission instead: the fake with --nodes nodes of 8 A100s, the server on a profile
 * whose node groups cannot grow (tests/fixtures/kube-serve/profile-fixed.yaml), every GPU taken
 * by a job of one rank of 8 A100s and --samples more jobs waiting. Then, --samples times: the
 * pods of the oldest running job are set Succeeded (one control call), and a watch on the Jobs
 * of the API server (opened before, read by a thread of its own) records when the next waiting
 * job's batch/v1 Job is ADDED; that job's pod is then set Running and the server waited for to
 * show it RUNNING before the next sample. Printed: p50/p99/max of the time from the control
 * call to the ADDED event, and as a baseline from the same call and the same watch, the time
 * until the fake's own Job controller's write of the finished Job's status (MODIFIED) arrives.
 * Everything runs on this machine: the fake's and the client's CPU compete with the
 * server's, so the figures are a lower bound of what the server alone can do.
 */
#include "bench/bench_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_net.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"

#define TOKEN "bench-admin-token-0123456789abcdef"
#define FAKE_TOKEN "bench-cluster-token"
#define NS "trainyard"
#define DIRECT_NS "direct"
/* Objects the server creates per attempt: the Job and its Secret (TRAINYARD_TOKEN and the
 * rendezvous secret); and, once for all of them, the headless Service that names the ranks. */
#define OBJECTS_PER_JOB 2
#define OBJECTS_ONCE 1

static char g_fake[64], g_srv[64], g_dir[] = "/tmp/ty-bench-kube-XXXXXX";
static pid_t g_fake_pid = -1, g_srv_pid = -1;
static char g_srv_log[340]; /* the running server's log */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_kube: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (g_srv_pid > 0)
        kill(g_srv_pid, SIGKILL);
    if (g_fake_pid > 0)
        kill(g_fake_pid, SIGKILL);
    exit(1);
}

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t collect(char *p, size_t sz, size_t n, void *ud)
{
    buf *b = ud;
    char *m = realloc(b->p, b->n + sz * n + 1);
    if (!m)
        return 0;
    memcpy(m + b->n, p, sz * n);
    b->n += sz * n;
    m[b->n] = '\0';
    b->p = m;
    return sz * n;
}

/* One keep-alive handle per target. */
static CURL *g_hf, *g_hs;

static long call(CURL *h, const char *base, const char *token, const char *method,
                 const char *path, const char *body, json_t **out)
{
    char url[2048], auth[128];
    buf b = {0};
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    hd = curl_slist_append(hd, auth);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    if (out)
        *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    return status;
}

static long fake(const char *method, const char *path, const char *body, json_t **out)
{
    return call(g_hf, g_fake, FAKE_TOKEN, method, path, body, out);
}

/* Dies when the server has exited (a crash, a sanitizer's report): nothing would answer. */
static void check_server(void)
{
    int st;
    if (g_srv_pid > 0 && waitpid(g_srv_pid, &st, WNOHANG) == g_srv_pid) {
        g_srv_pid = -1;
        if (WIFSIGNALED(st))
            die("the server exited on signal %d; its log is %s", WTERMSIG(st), g_srv_log);
        die("the server exited with status %d; its log is %s", WEXITSTATUS(st), g_srv_log);
    }
}

static long srv(const char *method, const char *path, const char *body, json_t **out)
{
    long st = call(g_hs, g_srv, TOKEN, method, path, body, out);
    if (st <= 0)
        check_server();
    return st;
}

/* Starts argv with stdout to a pipe (when port_line) or to log; returns the pid. The child
 * dies with the bench (killed or interrupted, it leaves no server or fake behind, whose CPU
 * would weigh on the next runs' figures). */
static pid_t spawn(char *const argv[], char *const env[], int *port_fd, const char *log)
{
    int fds[2] = {-1, -1};
    if (port_fd && pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        if (port_fd) {
            dup2(fds[1], 1);
            close(fds[0]);
            close(fds[1]);
        }
        if (log) {
            FILE *f = fopen(log, "a");
            if (f) {
                dup2(fileno(f), 2);
                if (!port_fd)
                    dup2(fileno(f), 1);
            }
        }
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    if (port_fd) {
        close(fds[1]);
        *port_fd = fds[0];
    }
    return pid;
}

static void write_nodes(const char *path, int n)
{
    static const char *const zones[] = {"us-west-2a", "us-west-2b", "us-west-2c"};
    FILE *f = fopen(path, "w");
    if (!f)
        die("%s: %s", path, strerror(errno));
    fprintf(f, "{\"items\": [");
    for (int i = 0; i < n; i++) {
        const char *z = zones[i % 3];
        fprintf(f,
                "%s{\"metadata\": {\"name\": \"node-%s-%05d\", \"labels\": {"
                "\"topology.kubernetes.io/zone\": \"%s\", "
                "\"nvidia.com/gpu.product\": \"NVIDIA-A100-SXM4-40GB\", "
                "\"node.kubernetes.io/instance-type\": \"p4d.24xlarge\", "
                "\"eks.amazonaws.com/capacityType\": \"ON_DEMAND\", "
                "\"karpenter.sh/capacity-type\": \"on-demand\", "
                "\"eks.amazonaws.com/nodegroup\": \"p4d-od-%s\"}}, "
                "\"spec\": {\"taints\": [{\"key\": \"nvidia.com/gpu\", \"value\": \"present\", "
                "\"effect\": \"NoSchedule\"}]}, "
                "\"status\": {\"allocatable\": {\"nvidia.com/gpu\": \"8\", \"cpu\": \"96\", "
                "\"memory\": \"1152Gi\", \"pods\": \"110\"}, \"capacity\": {\"nvidia.com/gpu\": "
                "\"8\", \"cpu\": \"96\", \"memory\": \"1152Gi\", \"pods\": \"110\"}, "
                "\"conditions\": [{\"type\": \"Ready\", \"status\": \"True\"}]}}",
                i ? ", " : "", z + 8, i, z, z + 8);
    }
    fprintf(f, "]}\n");
    fclose(f);
}

/* Jobs of the cluster that carry our label, counted through a paged list. */
static long count_kube_jobs(void)
{
    long n = 0;
    char path[1024], cont[512] = "";
    for (;;) {
        json_t *j = NULL;
        snprintf(path, sizeof path,
                 "/apis/batch/v1/namespaces/" NS "/jobs?labelSelector=trainyard.io%%2Fjob-id"
                 "&limit=500%s%s",
                 cont[0] ? "&continue=" : "", cont);
        if (fake("GET", path, NULL, &j) != 200)
            die("listing Jobs failed");
        n += (long)json_array_size(json_object_get(j, "items"));
        const char *c =
            json_string_value(json_object_get(json_object_get(j, "metadata"), "continue"));
        snprintf(cont, sizeof cont, "%s", c ? c : "");
        json_decref(j);
        if (!cont[0])
            return n;
    }
}

/* A sample of the server's /metrics: the value after `needle` (a name with its labels). */
static long server_metric(const char *needle)
{
    char *m = NULL;
    buf b = {0};
    char url[128], auth[128];
    snprintf(url, sizeof url, "%s/metrics", g_srv);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", TOKEN);
    curl_easy_reset(g_hs);
    curl_easy_setopt(g_hs, CURLOPT_URL, url);
    curl_easy_setopt(g_hs, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(g_hs, CURLOPT_WRITEDATA, &b);
    long v = -1;
    if (curl_easy_perform(g_hs) == CURLE_OK && b.p && (m = strstr(b.p, needle)))
        v = strtol(m + strlen(needle), NULL, 10);
    free(b.p);
    if (v < 0)
        check_server();
    return v;
}

static long jobs_in_state(const char *state)
{
    char needle[64];
    snprintf(needle, sizeof needle, "\ntrainyard_jobs{state=\"%s\"} ", state);
    return server_metric(needle);
}

static void rss(pid_t pid, long *now_kb, long *peak_kb)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    *now_kb = *peak_kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *now_kb = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "VmHWM:", 6) == 0)
            *peak_kb = strtol(line + 6, NULL, 10);
    }
    if (f)
        fclose(f);
}

/* CPU seconds (user + system) a process has used. */
static double cpu_s(pid_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *p = strrchr(text, ')');
    unsigned long ut = 0, st = 0;
    /* After the command: state, then 10 fields before utime and stime (fields 14 and 15). */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- --free-to-admit ---------------------------------------------------------------------- */

/* What the Jobs' watch saw: ADDED per job id (the Job of its first attempt), and when each
 * job's Job was first MODIFIED with a Complete condition. */
typedef struct seen_job {
    char id[32];
    double added_ms, complete_ms; /* bench_mono_ms(); 0: not yet */
} seen_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seen_job *jobs;
    size_t n, cap;
    char rv[32];
    bench_buf line;
    int failed;
} g_w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static seen_job *seen_of(const char *id)
{
    for (size_t i = 0; i < g_w.n; i++)
        if (!strcmp(g_w.jobs[i].id, id))
            return &g_w.jobs[i];
    if (g_w.n == g_w.cap) {
        size_t c = g_w.cap ? g_w.cap * 2 : 256;
        seen_job *m = realloc(g_w.jobs, c * sizeof *m);
        if (!m)
            return NULL;
        g_w.jobs = m;
        g_w.cap = c;
    }
    seen_job *j = &g_w.jobs[g_w.n++];
    memset(j, 0, sizeof *j);
    snprintf(j->id, sizeof j->id, "%s", id);
    return j;
}

static void watch_event(const char *text, size_t len, double at)
{
    json_t *ev = json_loadb(text, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    const json_t *obj = json_object_get(ev, "object");
    const json_t *md = json_object_get(obj, "metadata");
    const char *id =
        json_string_value(json_object_get(json_object_get(md, "labels"), "trainyard.io/job-id"));
    if (type && id) {
        int complete = 0;
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
        {
            const char *ct = json_string_value(json_object_get(c, "type"));
            const char *cs = json_string_value(json_object_get(c, "status"));
            complete |= ct && cs && !strcmp(ct, "Complete") && !strcmp(cs, "True");
        }
        pthread_mutex_lock(&g_w.mu);
        seen_job *j = seen_of(id);
        if (j && !strcmp(type, "ADDED") && !j->added_ms)
            j->added_ms = at;
        if (j && complete && !j->complete_ms)
            j->complete_ms = at;
        pthread_cond_broadcast(&g_w.cv);
        pthread_mutex_unlock(&g_w.mu);
    }
    json_decref(ev);
}

static size_t watch_write(char *p, size_t sz, size_t n, void *ud)
{
    (void)ud;
    double at = bench_mono_ms();
    if (bench_buf_add(&g_w.line, p, sz * n) != 0)
        return 0;
    char *start = g_w.line.data, *nl;
    while ((nl = memchr(start, '\n', g_w.line.len - (size_t)(start - g_w.line.data)))) {
        watch_event(start, (size_t)(nl - start), at);
        start = nl + 1;
    }
    size_t rest = g_w.line.len - (size_t)(start - g_w.line.data);
    memmove(g_w.line.data, start, rest);
    g_w.line.len = rest;
    g_w.line.data[rest] = '\0';
    return sz * n;
}

static void *watch_main(void *ud)
{
    (void)ud;
    char url[512], auth[128];
    snprintf(url, sizeof url,
             "%s/apis/batch/v1/namespaces/" NS "/jobs?watch=1&labelSelector=trainyard.io%%2Fjob-id"
             "&resourceVersion=%s&timeoutSeconds=3600",
             g_fake, g_w.rv);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", FAKE_TOKEN);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_perform(h); /* until the fake goes */
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    pthread_mutex_lock(&g_w.mu);
    g_w.failed = 1;
    pthread_cond_broadcast(&g_w.cv);
    pthread_mutex_unlock(&g_w.mu);
    return NULL;
}

/* Sets the pods of job id to phase (a control call), asking again while the fake answers 409
 * (a pod not bound yet, or its Secret not there yet). */
static void pods_to(const char *id, const char *body)
{
    char path[512];
    snprintf(path, sizeof path,
             "/fake/pods/" NS "/phase?labelSelector=trainyard.io%%2Fjob-id%%3D%s", id);
    for (int i = 0;; i++) {
        long st = fake("POST", path, body, NULL);
        if (st == 200)
            return;
        if (st != 409 || i > 10000)
            die("POST %s: %ld", path, st);
        bench_sleep_us(1000);
    }
}

static void wait_job_state(const char *id, const char *state)
{
    char jp[128];
    snprintf(jp, sizeof jp, "/v1/jobs/%s", id);
    double t0 = bench_mono_ms();
    for (;;) {
        json_t *got = NULL;
        srv("GET", jp, NULL, &got);
        const char *st = json_string_value(json_object_get(got, "state"));
        int done = st && !strcmp(st, state);
        json_decref(got);
        if (done)
            return;
        if (bench_mono_ms() - t0 > 60000)
            die("job %s not %s after 60 s", id, state);
        bench_sleep_us(1000);
    }
}

/* The index in g_w.jobs of the next job whose Job is ADDED after `after` (waits). */
static size_t wait_added(size_t after)
{
    double t0 = bench_mono_ms();
    pthread_mutex_lock(&g_w.mu);
    while (g_w.n <= after || !g_w.jobs[after].added_ms) {
        if (g_w.failed || bench_mono_ms() - t0 > 60000) {
            pthread_mutex_unlock(&g_w.mu);
            die("no new Job in the API server after 60 s");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g_w.cv, &g_w.mu, &ts);
    }
    pthread_mutex_unlock(&g_w.mu);
    return after;
}

static void print_lat(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    printf("%s (%d samples): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", what, n,
           bench_percentile(v, (size_t)n, 50), bench_percentile(v, (size_t)n, 99), v[n - 1]);
}

/* --free-to-admit: see the header. The fake and the server are started by the caller. */
static void free_to_admit(int nodes, int samples)
{
    json_t *l = NULL;
    if (fake("GET", "/apis/batch/v1/namespaces/" NS "/jobs?limit=1", NULL, &l) != 200)
        die("listing Jobs failed");
    snprintf(g_w.rv, sizeof g_w.rv, "%s",
             json_string_value(json_object_get(json_object_get(l, "metadata"), "resourceVersion")));
    json_decref(l);
    pthread_t th;
    if (pthread_create(&th, NULL, watch_main, NULL) != 0)
        die("pthread_create failed");
    pthread_detach(th);
    bench_sleep_us(200000); /* the watch is open */

    /* Every GPU taken, one job per node, then the waiting ones. */
    int total = nodes + samples;
    for (int i = 0; i < total; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"name\": \"a%d\", \"image\": \"registry.example/w:1\", "
                 "\"command\": [\"train\"], \"workers\": {\"count\": 1}, "
                 "\"resources\": {\"gpu\": {\"type\": \"a100\", \"count\": 8}}}",
                 i);
        if (srv("POST", "/v1/jobs", body, NULL) != 201)
            die("submitting job %d failed", i);
        if (i < nodes) {
            size_t k = wait_added((size_t)i);
            char id[32];
            pthread_mutex_lock(&g_w.mu);
            snprintf(id, sizeof id, "%s", g_w.jobs[k].id);
            pthread_mutex_unlock(&g_w.mu);
            pods_to(id, "{\"phase\": \"Running\"}");
        }
    }
    while (jobs_in_state("RUNNING") < nodes)
        bench_sleep_us(20000);
    bench_sleep_us(500000);
    pthread_mutex_lock(&g_w.mu);
    size_t have = g_w.n;
    pthread_mutex_unlock(&g_w.mu);
    if (have != (size_t)nodes || jobs_in_state("PENDING") != samples)
        die("%zu Jobs for %d nodes, %ld jobs pending: the cluster is not full as expected", have,
            nodes, jobs_in_state("PENDING"));
    printf("fake API server: %d nodes (8 A100s each), every GPU taken by a job of 8; %d jobs "
           "waiting; server on a profile whose node groups cannot grow\n",
           nodes, samples);

    double *lat = calloc((size_t)samples, sizeof *lat), *base = calloc((size_t)samples, sizeof *base);
    double cpu0 = cpu_s(g_srv_pid);
    long rounds0 = server_metric("\ntrainyard_scheduler_rounds_total ");
    for (int i = 0; i < samples; i++) {
        char done[32], next[32];
        pthread_mutex_lock(&g_w.mu);
        snprintf(done, sizeof done, "%s", g_w.jobs[i].id);
        pthread_mutex_unlock(&g_w.mu);
        double t0 = bench_mono_ms();
        pods_to(done, "{\"phase\": \"Succeeded\", \"exitCode\": 0}");
        size_t k = wait_added((size_t)(nodes + i));
        pthread_mutex_lock(&g_w.mu);
        lat[i] = g_w.jobs[k].added_ms - t0;
        base[i] = g_w.jobs[i].complete_ms ? g_w.jobs[i].complete_ms - t0 : -1;
        snprintf(next, sizeof next, "%s", g_w.jobs[k].id);
        pthread_mutex_unlock(&g_w.mu);
        if (base[i] < 0)
            die("the finished Job of %s was never seen Complete", done);
        pods_to(next, "{\"phase\": \"Running\"}");
        wait_job_state(next, "RUNNING");
        wait_job_state(done, "SUCCEEDED");
    }
    double cpu = cpu_s(g_srv_pid) - cpu0;
    long rounds = server_metric("\ntrainyard_scheduler_rounds_total ") - rounds0;
    print_lat("GPU freed (pods Succeeded) -> the next waiting job's Job ADDED", lat, samples);
    print_lat("baseline, the same call -> the finished Job's Complete status (the fake's own "
              "controller)",
              base, samples);
    printf("  the server used %.2f CPU s over the samples (%.2f ms a sample: the finished job's "
           "end, the admission, the new job's start; %.1f scheduler rounds a sample, each "
           "visiting the %d jobs it holds)\n",
           cpu, 1e3 * cpu / samples, (double)rounds / samples, nodes);
    free(lat);
    free(base);
}

/* Starts the fake on nodes_path with namespaces NS and DIRECT_NS; g_fake and g_fake_pid. */
static void start_fake(const char *fakebin, const char *nodes_path)
{
    int port_fd;
    char *fargv[] = {(char *)fakebin, "--port", "0", "--token", FAKE_TOKEN, "--nodes",
                     (char *)nodes_path, "--window", "1000000", NULL};
    g_fake_pid = spawn(fargv, NULL, &port_fd, NULL);
    FILE *pf = fdopen(port_fd, "r");
    char line[64] = "";
    if (!pf || !fgets(line, sizeof line, pf))
        die("the fake API server did not start");
    fclose(pf);
    snprintf(g_fake, sizeof g_fake, "http://127.0.0.1:%ld", strtol(line, NULL, 10));
    const char *nss[] = {NS, DIRECT_NS};
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": "
                 "\"%s\"}}", nss[i]);
        if (fake("POST", "/api/v1/namespaces", body, NULL) != 201)
            die("cannot create the namespace %s", nss[i]);
    }
}

/* Starts `trainyard serve` on the fake with a new database under sub (a directory of g_dir)
 * and the extra arguments (NULL-terminated, at most 4); waits until it is ready. */
static void start_server(const char *trainyard, const char *profile, const char *sub,
                         const char *const *extra)
{
    char dir[300], kubeconfig[340], db[340], log[340];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    if (mkdir(dir, 0700) != 0)
        die("%s: %s", dir, strerror(errno));
    snprintf(kubeconfig, sizeof kubeconfig, "%s/kubeconfig", dir);
    snprintf(db, sizeof db, "%s/data/trainyard.db", dir);
    snprintf(log, sizeof log, "%s/server.log", dir);
    snprintf(g_srv_log, sizeof g_srv_log, "%s", log);
    FILE *kf = fopen(kubeconfig, "w");
    if (!kf)
        die("%s: %s", kubeconfig, strerror(errno));
    fprintf(kf,
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            "clusters:\n- name: fake\n  cluster:\n    server: %s\n"
            "users:\n- name: admin\n  user:\n    token: %s\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n",
            g_fake, FAKE_TOKEN);
    fclose(kf);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ty_net_free_port());
    char *senv[] = {"TRAINYARD_ADMIN_TOKEN=" TOKEN, NULL};
    char *sargv[20] = {(char *)trainyard, "serve", "--listen", addr, "--db", db,
                       "--cluster-profile", (char *)profile, "--kubeconfig", kubeconfig,
                       "--log-level", "warn"};
    for (int i = 0; extra && extra[i] && i < 4; i++)
        sargv[12 + i] = (char *)extra[i];
    g_srv_pid = spawn(sargv, senv, NULL, log);
    snprintf(g_srv, sizeof g_srv, "http://%s", addr);
    for (int i = 0; i < 600 && srv("GET", "/readyz", NULL, NULL) != 200; i++)
        bench_sleep_us(100000); /* srv() stops the bench if the server exited */
}

static void stop_both(void)
{
    kill(g_srv_pid, SIGTERM);
    waitpid(g_srv_pid, NULL, 0);
    g_srv_pid = -1;
    kill(g_fake_pid, SIGTERM);
    waitpid(g_fake_pid, NULL, 0);
    g_fake_pid = -1;
}

/* Submits jobs jobs of ranks ranks (1 A100 each) in :batch requests of at most 1,000. */
static void submit(int jobs, int ranks, const char *prefix)
{
    for (int done = 0; done < jobs;) {
        int n = jobs - done > 1000 ? 1000 : jobs - done;
        size_t cap = (size_t)n * 256 + 64, len = 0;
        char *body = malloc(cap);
        if (!body)
            die("out of memory");
        len += (size_t)snprintf(body + len, cap - len, "{\"jobs\": [");
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(body + len, cap - len,
                                    "%s{\"name\": \"%s%d\", \"image\": \"registry.example/w:1\", "
                                    "\"command\": [\"train\"], \"workers\": {\"count\": %d}, "
                                    "\"resources\": {\"gpu\": {\"type\": \"a100\", \"count\": 1}}}",
                                    i ? ", " : "", prefix, done + i, ranks);
        snprintf(body + len, cap - len, "]}");
        json_t *r = NULL;
        long st = srv("POST", "/v1/jobs:batch", body, &r);
        free(body);
        json_decref(r);
        if (st != 201)
            die(":batch answered %ld", st);
        done += n;
    }
}

/* Waits until the server has created want objects (its own counter, which puts no load on
 * the fake), asking every poll_ms; the seconds since t0. */
static double wait_created(long want, double t0, int poll_ms)
{
    long created;
    while ((created = server_metric("\ntrainyard_kube_objects_created_total ")) < want) {
        if (bench_mono_ms() / 1e3 - t0 > 600)
            die("only %ld of %ld objects created after 600 s", created, want);
        bench_sleep_us(poll_ms * 1000L);
    }
    return bench_mono_ms() / 1e3 - t0;
}

/* ---- direct creation: the baseline -------------------------------------------------------- */

typedef struct direct {
    const kube_profile *p;
    int jobs, round;
    atomic_int next, failed;
} direct;

/* POSTs obj (its namespace set to DIRECT_NS) to the collection; the created object's uid into
 * uid (may be NULL). 0 on 201. */
static int post_direct(CURL *h, const char *collection, json_t *obj, char *uid, size_t uidlen)
{
    char path[256];
    json_object_set_new(json_object_get(obj, "metadata"), "namespace", json_string(DIRECT_NS));
    char *body = json_dumps(obj, JSON_COMPACT);
    snprintf(path, sizeof path, "%s?fieldValidation=Strict", collection);
    json_t *got = NULL;
    long st = body ? call(h, g_fake, FAKE_TOKEN, "POST", path, body, &got) : 0;
    free(body);
    if (st != 201) {
        char *text = got ? json_dumps(got, JSON_COMPACT) : NULL;
        fprintf(stderr, "bench_kube: POST %s answered %ld: %.300s\n", collection, st,
                text ? text : "");
        free(text);
    }
    if (uid) {
        const char *u =
            json_string_value(json_object_get(json_object_get(got, "metadata"), "uid"));
        snprintf(uid, uidlen, "%s", u ? u : "");
    }
    json_decref(got);
    return st == 201 ? 0 : -1;
}

/* One thread of the baseline: takes the next job and creates its Job, then its Secret owned by
 * the Job, as the backend does, on this thread's keep-alive connection. */
static void *direct_main(void *arg)
{
    direct *d = arg;
    CURL *h = curl_easy_init();
    for (int i; h && (i = atomic_fetch_add(&d->next, 1)) < d->jobs;) {
        static const char *const zones[] = {"us-west-2a", "us-west-2b", "us-west-2c"};
        char id[32], name[32], token[96], secret[128], uid[128] = "", msg[256];
        snprintf(id, sizeof id, "direct%dx%05d", d->round, i);
        snprintf(name, sizeof name, "d%d", i);
        /* What the scheduler hands the backend at launch: the attempt's token and rendezvous
         * secret among the env, held by the Secret. */
        snprintf(token, sizeof token, "TRAINYARD_TOKEN=ty_job_%032d", i);
        snprintf(secret, sizeof secret, "TRAINYARD_RENDEZVOUS_SECRET=%064d", i);
        const char *argv[] = {"train", NULL};
        const char *env[] = {token, secret, NULL};
        const char *names[] = {"TRAINYARD_TOKEN", "TRAINYARD_RENDEZVOUS_SECRET", NULL};
        backend_job bj = {.id = id, .attempt = 1, .world_size = 1, .argv = argv, .env = env,
                          .secret_names = names, .image = "registry.example/w:1",
                          .cpu = "1", .memory = "2Gi", .cpu_cores = 1,
                          .memory_bytes = 2147483648.0,
                          .gpus_per_rank = 1, .gpu_type = "a100", .zone = "auto",
                          .capacity = "on-demand", .name = name, .ncommand = 1};
        json_t *job = NULL, *sec = NULL;
        msg[0] = '\0';
        int bad = kube_render_job_typed(d->p, &bj, zones[i % 3], NULL, 0, &job, msg,
                                        sizeof msg) != TY_OK ||
                  kube_render_secret_typed(d->p, &bj, &sec, msg, sizeof msg) != TY_OK;
        if (bad)
            fprintf(stderr, "bench_kube: cannot render job %d: %s\n", i, msg);
        bad = bad || post_direct(h, "/apis/batch/v1/namespaces/" DIRECT_NS "/jobs", job, uid,
                                 sizeof uid) != 0;
        bad = bad || kube_render_set_owner(d->p, sec, uid) != TY_OK ||
              post_direct(h, "/api/v1/namespaces/" DIRECT_NS "/secrets", sec, NULL, 0) != 0;
        if (bad)
            atomic_fetch_add(&d->failed, 1);
        json_decref(job);
        json_decref(sec);
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* Creates jobs jobs' objects straight on the fake with conc threads; the seconds it took. */
static double create_direct(const kube_profile *p, int jobs, int conc, int round)
{
    direct d = {.p = p, .jobs = jobs, .round = round};
    pthread_t *t = calloc((size_t)conc, sizeof *t);
    if (!t)
        die("out of memory");
    double t0 = bench_mono_ms() / 1e3;
    for (int i = 0; i < conc; i++)
        if (pthread_create(&t[i], NULL, direct_main, &d) != 0)
            die("pthread_create failed");
    for (int i = 0; i < conc; i++)
        pthread_join(t[i], NULL);
    double took = bench_mono_ms() / 1e3 - t0;
    free(t);
    if (atomic_load(&d.failed))
        die("%d of %d direct creations failed", atomic_load(&d.failed), jobs);
    return took;
}

/*
 * The side-by-side figure: sweep one-rank jobs through a server on its default client
 * settings, beside the same objects created directly at concurrency conc, before and after.
 */
static void side_by_side(const char *trainyard, const char *fakebin, const char *profile,
                         const char *nodes_path, int nodes, int sweep, int conc)
{
    char msg[512];
    kube_profile *p = NULL;
    if (kube_profile_load(profile, &p, msg, sizeof msg) != TY_OK)
        die("%s", msg);
    start_fake(fakebin, nodes_path);
    json_t *svc = NULL;
    CURL *h = curl_easy_init();
    msg[0] = '\0';
    if (!h || kube_render_rank_service(p, &svc, msg, sizeof msg) != TY_OK ||
        post_direct(h, "/api/v1/namespaces/" DIRECT_NS "/services", svc, NULL, 0) != 0)
        die("cannot create the rank Service: %s", msg);
    json_decref(svc);
    curl_easy_cleanup(h);
    double d1 = create_direct(p, sweep, conc, 1);
    start_server(trainyard, profile, "sweep", NULL);
    bench_sleep_us(500000); /* the informers' first lists are behind it */
    double cpu0 = cpu_s(g_srv_pid), t0 = bench_mono_ms() / 1e3;
    submit(sweep, 1, "s");
    double ty = wait_created((long)OBJECTS_PER_JOB * sweep + OBJECTS_ONCE, t0, 10);
    double cpu = cpu_s(g_srv_pid) - cpu0;
    double d2 = create_direct(p, sweep, conc, 2);
    long throttled = server_metric("\ntrainyard_kube_throttled_total ");
    stop_both();
    kube_profile_free(p);
    double base = (d1 + d2) / 2;
    printf("side by side (%d nodes): %d one-rank jobs (a Job and a Secret each)\n"
           "  direct at concurrency %d: %.2f s before, %.2f s after (%.0f jobs/s)\n"
           "  through trainyard, default client settings: %.2f s (%.0f jobs/s; server CPU "
           "%.2f ms a job; %ld requests held by the rate limiter)\n"
           "  ratio trainyard / direct: %.2f (target <= 1.10)\n",
           nodes, sweep, conc, d1, d2, sweep / base, ty, sweep / ty, 1e3 * cpu / sweep,
           throttled, ty / base);
    fflush(stdout);
}

/* ---- sustained logs: appenders ------------------------------------------------------------ */

#define LOG_THREADS 4

typedef struct appender {
    char **paths; /* the pods' log control paths, shared */
    size_t npaths, first; /* this thread's: every LOG_THREADS-th from first */
    const char *lines;
    double until;         /* monotonic s */
    long calls;
} appender;

static void *append_main(void *arg)
{
    appender *a = arg;
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    for (size_t i = a->first; bench_mono_ms() / 1e3 < a->until; i += LOG_THREADS) {
        if (i >= a->npaths)
            i = a->first;
        if (call(h, g_fake, FAKE_TOKEN, "POST", a->paths[i], a->lines, NULL) != 200)
            die("appending to a pod's log failed");
        a->calls++;
    }
    curl_easy_cleanup(h);
    return NULL;
}

int main(int argc, char **argv)
{
    int nodes = 3000, jobs = 1000, ranks = 2, samples = 200, sweep = 200, conc = 32, admit = 0,
        nodes_set = 0, samples_set = 0, profile_set = 0;
    const char *trainyard = BENCH_TRAINYARD, *fakebin = BENCH_FAKE, *profile = BENCH_PROFILE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--free-to-admit") == 0) {
            admit = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            die("%s needs a value", argv[i]);
        if (strcmp(argv[i], "--nodes") == 0)
            nodes = atoi(v), nodes_set = 1;
        else if (strcmp(argv[i], "--jobs") == 0)
            jobs = atoi(v);
        else if (strcmp(argv[i], "--ranks") == 0)
            ranks = atoi(v);
        else if (strcmp(argv[i], "--samples") == 0)
            samples = atoi(v), samples_set = 1;
        else if (strcmp(argv[i], "--sweep") == 0)
            sweep = atoi(v);
        else if (strcmp(argv[i], "--concurrency") == 0)
            conc = atoi(v);
        else if (strcmp(argv[i], "--trainyard") == 0)
            trainyard = v;
        else if (strcmp(argv[i], "--fake") == 0)
            fakebin = v;
        else if (strcmp(argv[i], "--profile") == 0)
            profile = v, profile_set = 1;
        else
            die("unknown argument %s", argv[i]);
        i++;
    }
    if (admit) {
        if (!nodes_set)
            nodes = 100;
        if (!samples_set)
            samples = 300;
        if (!profile_set)
            profile = BENCH_PROFILE_FIXED;
        jobs = samples;
        sweep = 0;
    }
    if (nodes < 3 || jobs < 1 || ranks < 1 || samples < (admit ? 1 : 0) || samples > jobs ||
        sweep < 0 || sweep > 100000 || conc < 1 || conc > 1024)
        die("bad sizes");
    if (!mkdtemp(g_dir))
        die("mkdtemp: %s", strerror(errno));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_hf = curl_easy_init();
    g_hs = curl_easy_init();

    char nodes_path[256], text[1024];
    snprintf(nodes_path, sizeof nodes_path, "%s/nodes.json", g_dir);
    write_nodes(nodes_path, nodes);

    if (sweep > 0)
        side_by_side(trainyard, fakebin, profile, nodes_path, nodes, sweep, conc);

    start_fake(fakebin, nodes_path);
    const char *noqps[] = {"--kube-qps", "0", NULL};
    start_server(trainyard, profile, "main", noqps);
    if (admit) {
        free_to_admit(nodes, samples);
        goto stop;
    }
    printf("fake API server: %d nodes in 3 zones (8 GPUs each); server: %s, --kube-qps 0\n",
           nodes, trainyard);

    /* 1. Creation. */
    double cpu0 = cpu_s(g_srv_pid), fcpu0 = cpu_s(g_fake_pid);
    double t0 = (bench_mono_ms() / 1e3);
    submit(jobs, ranks, "b");
    double t_sub = (bench_mono_ms() / 1e3) - t0;
    /* Polled once a second: rendering /metrics costs the server 1 to 3 ms with 1,000 jobs
     * held (it sums each team's usage in SQL), CPU that creation does not need and that
     * polling every 250 ms added to this phase's figure (0.2 to 0.4 ms a job); the time is
     * then known to a second (3 to 5 % of this phase). */
    double t_created = wait_created((long)OBJECTS_PER_JOB * jobs + OBJECTS_ONCE, t0, 1000);
    long created;
    double cpu = cpu_s(g_srv_pid) - cpu0, fcpu = cpu_s(g_fake_pid) - fcpu0;
    /* A server binary older than the bench makes another number of objects a job, which the
     * wait above cannot tell from a slow one. */
    if ((created = count_kube_jobs()) != jobs)
        die("%ld batch/v1 Jobs in the API server, %d expected: the server created %ld objects, "
            "%d a job and %d once expected (is %s built from this tree?)",
            created, jobs, server_metric("\ntrainyard_kube_objects_created_total "),
            OBJECTS_PER_JOB, OBJECTS_ONCE, trainyard);
    printf("creation: %d jobs of %d ranks submitted in %.2f s; every batch/v1 Job and Secret "
           "created after %.2f s: %.0f jobs/s\n",
           jobs, ranks, t_sub, t_created, jobs / t_created);
    /* The server's CPU over the fake's: the fake's work a job is fixed, so on a machine whose
     * speed varies from run to run this compares runs better than either figure alone. */
    printf("  meanwhile the server used %.2f CPU s (%.2f ms a job: %.0f jobs/s per core), the "
           "fake API server %.2f CPU s (server / fake: %.3f)\n",
           cpu, 1e3 * cpu / jobs, jobs / cpu, fcpu, fcpu > 0 ? cpu / fcpu : 0.0);
    const char *infs[] = {"nodes", "pods", "jobs", "bound_pods"};
    printf("  watch events a job:");
    for (int i = 0; i < 4; i++) {
        char needle[128];
        snprintf(needle, sizeof needle, "\ntrainyard_kube_informer_events_total{informer=\"%s\"} ",
                 infs[i]);
        printf(" %s %.1f", infs[i], (double)server_metric(needle) / jobs);
    }
    printf("; scheduler rounds %.2f\n",
           (double)server_metric("\ntrainyard_scheduler_rounds_total ") / jobs);

    /* 2. Every pod Running. */
    t0 = (bench_mono_ms() / 1e3);
    if (fake("POST", "/fake/pods/" NS "/phase?labelSelector=trainyard.io%2Fjob-id",
             "{\"phase\": \"Running\"}", NULL) != 200)
        die("setting pods Running failed");
    double t_phase = (bench_mono_ms() / 1e3) - t0;
    long running;
    while ((running = jobs_in_state("RUNNING")) < jobs) {
        if ((bench_mono_ms() / 1e3) - t0 > 600)
            die("only %ld of %d jobs RUNNING after 600 s", running, jobs);
        bench_sleep_us(50000);
    }
    printf("all pods Running (one control call, %.2f s): every job RUNNING after %.2f s\n",
           t_phase, (bench_mono_ms() / 1e3) - t0);
    long run_kb, run_peak_kb;
    rss(g_srv_pid, &run_kb, &run_peak_kb);
    printf("server RSS with %d jobs running: %.1f MiB\n", jobs, run_kb / 1024.0);

    /* 3. Status latency, one job at a time, with the others running. */
    double *lat = calloc((size_t)(samples ? samples : 1), sizeof *lat);
    json_t *list = NULL;
    char path[512];
    int taken = 0;
    snprintf(path, sizeof path, "/v1/jobs?state=RUNNING&limit=%d", samples ? samples : 1);
    if (samples && srv("GET", path, NULL, &list) == 200) {
        size_t i;
        json_t *j;
        json_array_foreach(json_object_get(list, "jobs"), i, j)
        {
            const char *id = json_string_value(json_object_get(j, "id"));
            snprintf(path, sizeof path,
                     "/fake/pods/" NS "/phase?labelSelector=trainyard.io%%2Fjob-id%%3D%s", id);
            double s0 = (bench_mono_ms() / 1e3);
            if (fake("POST", path, "{\"phase\": \"Succeeded\", \"exitCode\": 0}", NULL) != 200)
                die("setting pods Succeeded failed");
            double s1 = (bench_mono_ms() / 1e3);
            char jp[128];
            snprintf(jp, sizeof jp, "/v1/jobs/%s", id);
            for (;;) {
                json_t *got = NULL;
                srv("GET", jp, NULL, &got);
                const char *st = json_string_value(json_object_get(got, "state"));
                int done = st && strcmp(st, "SUCCEEDED") == 0;
                json_decref(got);
                if (done)
                    break;
                if ((bench_mono_ms() / 1e3) - s1 > 60)
                    die("job %s not SUCCEEDED 60 s after its pods", id);
                bench_sleep_us(1000);
            }
            lat[taken++] = ((bench_mono_ms() / 1e3) - s1) * 1e3;
            if (s1 - s0 > 1.0)
                fprintf(stderr, "bench_kube: the fake took %.1f s to change a job's pods\n",
                        s1 - s0);
        }
    }
    json_decref(list);
    if (taken) {
        qsort(lat, (size_t)taken, sizeof *lat, bench_cmp_double);
        printf("pod phase -> job state visible in GET /v1/jobs/{id} (%d jobs, %d running "
               "beside): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
               taken, jobs - 1, lat[taken / 2], lat[(int)(taken * 0.99)], lat[taken - 1]);
    }
    free(lat);

    /* 4. The pods' logs, streamed into the server's files. */
    {
        long pods = (long)(jobs - taken) * ranks, open = 0; /* step 3 ended `taken` jobs */
        double l0 = bench_mono_ms() / 1e3;
        while ((open = server_metric("\ntrainyard_kube_log_streams_open ")) < pods) {
            if (bench_mono_ms() / 1e3 - l0 > 600)
                die("only %ld of %ld log streams open after 600 s", open, pods);
            bench_sleep_us(50000);
        }
        double l_open = bench_mono_ms() / 1e3 - l0;
        long idle_kb, idle_peak;
        rss(g_srv_pid, &idle_kb, &idle_peak);
        double c0 = cpu_s(g_srv_pid);
        bench_sleep_us(5000000);
        double c_idle = cpu_s(g_srv_pid) - c0;
        printf("log streams: %ld pods' logs followed after %.2f s; with every stream open and "
               "quiet the server used %.3f CPU s in 5 s (RSS %.1f MiB)\n",
               pods, l_open, c_idle, idle_kb / 1024.0);
        char lines[1200];
        size_t ll = 0;
        for (int i = 0; i < 10; i++)
            ll += (size_t)snprintf(lines + ll, sizeof lines - ll, "step %04d loss 0.%080d\n", i,
                                   i);
        long before = server_metric("\ntrainyard_kube_log_bytes_total ");
        json_t *plist = NULL;
        if (fake("GET", "/api/v1/namespaces/" NS "/pods?labelSelector=trainyard.io%2Fjob-id",
                 NULL, &plist) != 200)
            die("listing pods failed");
        c0 = cpu_s(g_srv_pid);
        l0 = bench_mono_ms() / 1e3;
        size_t i;
        json_t *pod;
        long want = before;
        size_t npaths = 0;
        char **paths = calloc(json_array_size(json_object_get(plist, "items")) + 1, sizeof *paths);
        if (!paths)
            die("out of memory");
        json_array_foreach(json_object_get(plist, "items"), i, pod)
        {
            const char *ph = json_string_value(
                json_object_get(json_object_get(pod, "status"), "phase"));
            if (!ph || strcmp(ph, "Running"))
                continue;
            char lp[512];
            snprintf(lp, sizeof lp, "/fake/pods/" NS "/%s/log",
                     json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")));
            if (fake("POST", lp, lines, NULL) != 200)
                die("appending to a pod's log failed");
            want += (long)ll;
            if (!(paths[npaths++] = strdup(lp)))
                die("out of memory");
        }
        json_decref(plist);
        long got;
        while ((got = server_metric("\ntrainyard_kube_log_bytes_total ")) < want) {
            if (bench_mono_ms() / 1e3 - l0 > 600)
                die("only %ld of %ld log bytes written after 600 s", got - before,
                    want - before);
            bench_sleep_us(20000);
        }
        double l_w = bench_mono_ms() / 1e3 - l0, c_w = cpu_s(g_srv_pid) - c0;
        printf("  %ld bytes appended to every pod's log (%.1f MiB in all) written to the server's "
               "files after %.2f s; server CPU %.2f s (%.1f us a line)\n",
               (long)ll, (want - before) / 1048576.0, l_w, c_w,
               1e6 * c_w / ((double)(want - before) / ((double)ll / 10)));

        /* Sustained: LOG_THREADS clients append 10 lines to pod after pod for 10 s. */
        appender ap[LOG_THREADS];
        pthread_t th[LOG_THREADS];
        double line_len = (double)ll / 10, span = 10;
        long b0 = server_metric("\ntrainyard_kube_log_bytes_total ");
        double sc0 = cpu_s(g_srv_pid), fc0 = cpu_s(g_fake_pid), t0s = bench_mono_ms() / 1e3;
        int nth = npaths < LOG_THREADS ? (int)npaths : LOG_THREADS;
        for (int k = 0; k < nth; k++) {
            ap[k] = (appender){paths, npaths, (size_t)k, lines, t0s + span, 0};
            if (pthread_create(&th[k], NULL, append_main, &ap[k]) != 0)
                die("cannot start the log appenders");
        }
        long calls = 0;
        for (int k = 0; k < nth; k++) {
            pthread_join(th[k], NULL);
            calls += ap[k].calls;
        }
        double t_app = bench_mono_ms() / 1e3 - t0s;
        long b_app = server_metric("\ntrainyard_kube_log_bytes_total ") - b0;
        double sc_app = cpu_s(g_srv_pid) - sc0, fc_app = cpu_s(g_fake_pid) - fc0;
        long sus_kb, sus_peak;
        rss(g_srv_pid, &sus_kb, &sus_peak);
        long wantb = b0 + (long)(calls * (long)ll), gotb;
        while ((gotb = server_metric("\ntrainyard_kube_log_bytes_total ")) < wantb) {
            if (bench_mono_ms() / 1e3 - t0s > 600)
                die("only %ld of %ld log bytes written after 600 s", gotb - b0, wantb - b0);
            bench_sleep_us(20000);
        }
        double t_all = bench_mono_ms() / 1e3 - t0s;
        if (calls > 0)
            printf("  sustained, %d clients appending 10 lines a call to the %zu pods' logs for "
                   "%.1f s: %.0f lines/s appended, %.0f lines/s written by the server meanwhile "
                   "(all %ld lines written after %.2f s: %.0f lines/s); server %.2f CPU s/s "
                   "(%.1f us a line), fake %.2f CPU s/s; server RSS %.1f MiB\n",
                   nth, npaths, t_app, calls * 10 / t_app, b_app / line_len / t_app, calls * 10,
                   t_all, calls * 10 / t_all, sc_app / t_app, 1e6 * sc_app / (b_app / line_len),
                   fc_app / t_app, sus_kb / 1024.0);
        for (size_t k = 0; k < npaths; k++)
            free(paths[k]);
        free(paths);
    }

    /* 5. Memory. */
    long now_kb, peak_kb;
    rss(g_srv_pid, &now_kb, &peak_kb);
    printf("server RSS: %.1f MiB now, %.1f MiB peak\n", now_kb / 1024.0, peak_kb / 1024.0);
stop:

    stop_both();
    curl_easy_cleanup(g_hf);
    curl_easy_cleanup(g_hs);
    curl_global_cleanup();
    snprintf(text, sizeof text, "rm -rf %s", g_dir);
    return system(text) == 0 ? 0 : 1;
}
