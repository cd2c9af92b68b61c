/*
 * bench_sse.c - fan-out of the live event stream: F followers on
 * GET /v1/events?follow=true while J jobs change state; how long each event
 * takes from its commit to each follower.
 *
 * The state changes cost no processes: the jobs go to a queue whose limit is 0
 * (--queue-limit held=0), so none is ever admitted, and each is cancelled
 * after its submission. Every job therefore writes two events, its submission
 * (NONE -> PENDING) and its cancel (PENDING -> CANCELLED), each in a commit
 * of its own request: W writer threads run submit-then-cancel cycles, one
 * request at a time each, so commits come as fast as the server acknowledges
 * them and group commit folds concurrent ones.
 *
 * Latency: a follower takes the wall clock (CLOCK_REALTIME, the clock the
 * server stamps events with) when the event's block arrives, and subtracts
 * the event's `time`. That time is taken inside the write transaction, before
 * the group's commit and fsync, so the figure is an upper bound of commit to
 * delivery: it includes the wait for the commit. Both clocks are the same
 * machine's; `time` has millisecond resolution. The followers run in T client
 * threads, each with a libcurl multi handle over its share of the
 * connections, on the same machine as the server: the client competes with
 * the server for the CPUs, which the figures include.
 *
 * Every follower must receive every event exactly once, in order (checked:
 * seqs strictly increasing, count); the run fails otherwise.
 *
 *   cmake --build BUILD --target bench_sse && BUILD/bench/bench_sse
 *   BUILD/bench/bench_sse --followers 200 --jobs 1000 --writers 4
 *
 * Output: a human summary, then one line of key=value pairs for scripts.
 * Exit status 0 on success, 1 when a follower missed or repeated an event or
 * a request failed, 2 on a usage error.
 */
#define _GNU_SOURCE /* timegm() */
#include "bench/bench_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_TRAINYARD
#define BENCH_TRAINYARD "trainyard"
#endif

#define START_TIMEOUT_MS 30000
#define DRAIN_TIMEOUT_MS 120000
#define QUEUE "held"
#define MAX_THREADS 64

extern char **environ;

typedef struct opts {
    const char *trainyard;
    int followers;
    int jobs;
    int writers;
    int threads; /* client threads the followers share */
} opts;

static bench_server g_srv;
static char g_auth[128];

/* ---- the server --------------------------------------------------------------------------- */

static void start_server(const opts *o)
{
    char conns[16];
    const char *args[] = {"--queue-limit", QUEUE "=0", "--max-connections", conns,
                          "--max-connections-per-ip", conns, "--max-streams-per-token", conns,
                          "--log-level", "warn", NULL};

    snprintf(g_srv.token, sizeof g_srv.token, "bench-sse-%ld", (long)getpid());
    snprintf(g_auth, sizeof g_auth, "Authorization: Bearer %s", g_srv.token);
    /* Followed streams may hold half of the connections: room for every follower twice. */
    snprintf(conns, sizeof conns, "%d", 2 * (o->followers + o->writers) + 64);
    bench_start_server(&g_srv, o->trainyard, args, START_TIMEOUT_MS);
}

/* ---- followers ---------------------------------------------------------------------------- */

typedef struct follower {
    CURL *easy;
    char *buf;                   /* bytes of an event block not complete yet */
    size_t len, cap;
    atomic_int ready;            /* the stream's first bytes arrived */
    atomic_long events;          /* events received */
    int64_t last_seq;
    long disorder;               /* events whose seq was not above the previous one */
    double *lat;                 /* ms, one per event received (jobs * 2 room) */
    long nlat, caplat;
} follower;

typedef struct client {
    pthread_t thread;
    follower *f;                 /* this thread's followers */
    int n;
} client;

static atomic_int g_stop;
static struct curl_slist *g_headers;

/* Event time "2026-11-23T11:30:00.123Z" as Unix ms; -1 when malformed. */
static double parse_time(const char *s)
{
    struct tm tm;
    int ms = 0;
    memset(&tm, 0, sizeof tm);
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) * 1e3 + ms;
}

/* One complete block: an event (with its data) or a comment. */
static void on_block(follower *f, const char *block, double now)
{
    const char *data = strstr(block, "data: {");
    if (!data) {
        atomic_store(&f->ready, 1); /* ": ok" */
        return;
    }
    const char *seq = strstr(data, "\"seq\":"), *time = strstr(data, "\"time\":\"");
    if (!seq || !time)
        return;
    int64_t s = strtoll(seq + 6, NULL, 10);
    if (s <= f->last_seq)
        f->disorder++;
    f->last_seq = s;
    atomic_fetch_add(&f->events, 1);
    double t = parse_time(time + 8);
    if (t > 0 && f->nlat < f->caplat)
        f->lat[f->nlat++] = now - t;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    follower *f = ud;
    size_t len = size * n;
    double now = bench_real_ms();
    if (f->len + len + 1 > f->cap) {
        size_t cap = (f->len + len + 1) * 2;
        char *grown = realloc(f->buf, cap);
        if (!grown)
            return 0;
        f->buf = grown;
        f->cap = cap;
    }
    memcpy(f->buf + f->len, p, len);
    f->len += len;
    f->buf[f->len] = '\0';
    char *start = f->buf, *end;
    while ((end = strstr(start, "\n\n"))) {
        *end = '\0';
        on_block(f, start, now);
        start = end + 2;
    }
    f->len -= (size_t)(start - f->buf);
    memmove(f->buf, start, f->len);
    return len;
}

static void *client_main(void *ud)
{
    client *c = ud;
    CURLM *m = curl_multi_init();
    char url[256];
    snprintf(url, sizeof url, "%s/v1/events?follow=true", g_srv.url);
    for (int i = 0; i < c->n; i++) {
        CURL *e = c->f[i].easy = curl_easy_init();
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, g_headers);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &c->f[i]);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
        curl_multi_add_handle(m, e);
    }
    int running = 1;
    while (running && !atomic_load(&g_stop)) {
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (int i = 0; i < c->n; i++) {
        curl_multi_remove_handle(m, c->f[i].easy);
        curl_easy_cleanup(c->f[i].easy);
    }
    curl_multi_cleanup(m);
    return NULL;
}

/* ---- writers ------------------------------------------------------------------------------ */

typedef struct writer {
    pthread_t thread;
    int first, count;            /* the jobs it cycles through */
    long failures;
} writer;

static size_t keep_body(char *p, size_t size, size_t n, void *ud)
{
    char *id = ud;
    const char *k = strstr(p, "\"id\":\"");
    size_t len = size * n;
    /* The id is near the start of the answer: the first block has it. */
    if (k && !id[0] && (size_t)(k - p) + 6 + 26 <= len) {
        memcpy(id, k + 6, 26);
        id[26] = '\0';
    }
    return len;
}

static void *writer_main(void *ud)
{
    writer *w = ud;
    CURL *e = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, g_auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    char url[256], body[256], id[32];
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, id);
    for (int j = w->first; j < w->first + w->count; j++) {
        long status = 0;
        id[0] = '\0';
        snprintf(url, sizeof url, "%s/v1/jobs", g_srv.url);
        snprintf(body, sizeof body,
                 "{\"name\":\"sse-%d\",\"queue\":\"" QUEUE "\",\"command\":[\"true\"],"
                 "\"workers\":{\"count\":1}}",
                 j);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(e) != CURLE_OK ||
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 201 ||
            !id[0]) {
            w->failures++;
            continue;
        }
        snprintf(url, sizeof url, "%s/v1/jobs/%s:cancel", g_srv.url, id);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        if (curl_easy_perform(e) != CURLE_OK ||
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 200)
            w->failures++;
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return NULL;
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_sse [--followers N (200)] [--jobs N (1000)] [--writers N (4)]\n"
               "                 [--threads N (4): client threads for the followers]\n"
               "                 [--trainyard PATH]\n");
}

int main(int argc, char **argv)
{
    opts o = {.trainyard = BENCH_TRAINYARD, .followers = 200, .jobs = 1000, .writers = 4,
              .threads = 4};
    bench_init("bench_sse", &g_srv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--followers")) {
            bad = bad || bench_parse_int(v, 1, 4000, &o.followers);
        } else if (!strcmp(a, "--jobs")) {
            bad = bad || bench_parse_int(v, 1, 1000000, &o.jobs);
        } else if (!strcmp(a, "--writers")) {
            bad = bad || bench_parse_int(v, 1, 256, &o.writers);
        } else if (!strcmp(a, "--threads")) {
            bad = bad || bench_parse_int(v, 1, MAX_THREADS, &o.threads);
        } else if (!strcmp(a, "--trainyard")) {
            o.trainyard = v;
        } else {
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (o.threads > o.followers)
        o.threads = o.followers;
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    start_server(&o);
    g_headers = curl_slist_append(NULL, g_auth);

    long want = 2L * o.jobs;
    follower *fs = calloc((size_t)o.followers, sizeof *fs);
    client cl[MAX_THREADS];
    if (!fs)
        bench_die("out of memory");
    for (int i = 0; i < o.followers; i++) {
        fs[i].caplat = want;
        if (!(fs[i].lat = malloc((size_t)want * sizeof *fs[i].lat)))
            bench_die("out of memory");
    }
    for (int t = 0, at = 0; t < o.threads; t++) {
        int n = o.followers / o.threads + (t < o.followers % o.threads);
        cl[t] = (client){.f = fs + at, .n = n};
        at += n;
        if (pthread_create(&cl[t].thread, NULL, client_main, &cl[t]) != 0)
            bench_die("pthread_create");
    }
    /* Every stream is set up (its first bytes came) before the first change. */
    double deadline = bench_mono_ms() + START_TIMEOUT_MS;
    for (int i = 0; i < o.followers; i++)
        while (!atomic_load(&fs[i].ready)) {
            if (bench_mono_ms() > deadline)
                bench_die("follower %d did not connect", i);
            bench_sleep_us(5000);
        }

    writer ws[256];
    double t0 = bench_mono_ms();
    for (int w = 0, at = 0; w < o.writers; w++) {
        int n = o.jobs / o.writers + (w < o.jobs % o.writers);
        ws[w] = (writer){.first = at, .count = n};
        at += n;
        if (pthread_create(&ws[w].thread, NULL, writer_main, &ws[w]) != 0)
            bench_die("pthread_create");
    }
    long failures = 0;
    for (int w = 0; w < o.writers; w++) {
        pthread_join(ws[w].thread, NULL);
        failures += ws[w].failures;
    }
    double t_written = bench_mono_ms();
    deadline = t_written + DRAIN_TIMEOUT_MS;
    for (int i = 0; i < o.followers; i++)
        while (atomic_load(&fs[i].events) < want - 2 * failures && bench_mono_ms() < deadline)
            bench_sleep_us(5000);
    double t_done = bench_mono_ms();
    atomic_store(&g_stop, 1);
    for (int t = 0; t < o.threads; t++)
        pthread_join(cl[t].thread, NULL);

    size_t total = 0;
    long missing = 0, disorder = 0;
    for (int i = 0; i < o.followers; i++) {
        total += (size_t)fs[i].nlat;
        long got = atomic_load(&fs[i].events);
        missing += got < want - 2 * failures ? want - 2 * failures - got : 0;
        disorder += fs[i].disorder;
    }
    double *all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        bench_die("out of memory");
    size_t k = 0;
    for (int i = 0; i < o.followers; i++) {
        memcpy(all + k, fs[i].lat, (size_t)fs[i].nlat * sizeof *all);
        k += (size_t)fs[i].nlat;
    }
    qsort(all, total, sizeof *all, bench_cmp_double);
    double p50 = bench_percentile(all, total, 50), p90 = bench_percentile(all, total, 90);
    double p99 = bench_percentile(all, total, 99);
    double mx = total ? all[total - 1] : 0;

    struct utsname u;
    uname(&u);
    printf("Trainyard event stream fan-out (GET /v1/events?follow=true)\n");
    printf("machine: %ld CPUs online, kernel %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.release);
    printf("load: %d followers (%d client threads), %d jobs submitted then cancelled by %d "
           "writers: %ld events\n",
           o.followers, o.threads, o.jobs, o.writers, want);
    printf("writes: %.0f ms (%.0f events/s); all delivered %.0f ms after the last write\n",
           t_written - t0, (double)want * 1e3 / (t_written - t0), t_done - t_written);
    printf("deliveries: %zu (missing %ld, out of order %ld, failed requests %ld)\n", total,
           missing, disorder, failures);
    printf("event time -> delivery (ms): p50 %.1f  p90 %.1f  p99 %.1f  max %.1f "
           "(target p99 <= 50)\n",
           p50, p90, p99, mx);
    printf("followers=%d jobs=%d events=%ld deliveries=%zu missing=%ld disorder=%ld "
           "failures=%ld p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f write_ms=%.0f\n",
           o.followers, o.jobs, want, total, missing, disorder, failures, p50, p90, p99, mx,
           t_written - t0);

    for (int i = 0; i < o.followers; i++) {
        free(fs[i].lat);
        free(fs[i].buf);
    }
    free(fs);
    free(all);
    curl_slist_free_all(g_headers);
    bench_stop_server(&g_srv);
    curl_global_cleanup();
    return missing || disorder || failures ? 1 : 0;
}
