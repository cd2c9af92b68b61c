/*
 * bench_submit.c - load generator for the Trainyard HTTP API.
 *
 * One thread drives C concurrent keep-alive connections through libcurl's
 * multi interface. Each connection owns one easy handle, configured once
 * (URL, headers, body pointer) and reused for every request, so connections
 * stay open. Request bodies are built once per connection; before each request
 * only the digits of the job names (and of one label) are rewritten, so every
 * job gets a distinct name and the client spends its time on HTTP, not on
 * building JSON. Latency runs from handing the request to libcurl to libcurl
 * reporting it complete (CLOCK_MONOTONIC); percentiles are nearest-rank over
 * the sorted samples.
 *
 * Modes:
 *   submit  POST /v1/jobs (--batch 1) or POST /v1/jobs:batch (--batch N > 1)
 *           for --duration seconds after --warmup seconds, or, with --jobs,
 *           until that many jobs are stored. A request counts when the server
 *           answers 201 or 200: the contract acknowledges only committed jobs.
 *   list    GET /v1/jobs?limit=L[&QUERY], following next_page_token for
 *           --pages pages, then again from the first page.
 *
 * The jobs carry the labels team=bench and shard=sD, D = (job number mod 10),
 * so a label filter on shard selects a tenth of them.
 *
 * Output: one line of key=value pairs on stdout, for scripts: rates and
 * latencies cover the measured window; errors and acked_jobs the whole run,
 * warm-up included. Diagnostics (the first answer of every unexpected status)
 * go to stderr. Exit status 0 when every request succeeded, 1 when some
 * failed, 2 on a usage error.
 */
#include "bench/bench_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define NAME_DIGITS 10            /* job number in each name: 10^10 names per prefix */
#define MAX_PREFIX 40             /* prefix + '-' + digits stays a 63-char DNS label */
#define SUBMIT_RESP_CAP 2048      /* bytes of a submit answer kept (only shown on errors) */
#define LIST_RESP_CAP (16u << 20) /* a page of 1000 jobs fits */
#define MAX_STATUS 600

typedef enum { MODE_SUBMIT, MODE_LIST } bench_mode;

typedef struct opts {
    bench_mode mode;
    const char *url; /* base URL, e.g. http://127.0.0.1:8080 */
    const char *token;
    const char *prefix; /* job names are <prefix>-<NAME_DIGITS digits> */
    const char *query;  /* list mode: extra query parameters */
    int concurrency;
    int batch; /* jobs per request; 1 = POST /v1/jobs */
    int limit; /* list mode: page size */
    int pages; /* list mode: pages followed before starting over */
    double duration_s;
    double warmup_s;
    long long jobs;  /* submit mode: stop after this many jobs (0 = use duration) */
    long long first; /* number of the first job name */
} opts;

/* A request body with the positions of the digits rewritten per request. */
typedef struct body {
    char *buf;
    size_t len;
    size_t njobs;
    size_t *name_off;  /* offset of each job's NAME_DIGITS-digit number */
    size_t *shard_off; /* offset of each job's one-digit shard label value */
} body;

typedef struct conn {
    CURL *easy;
    body body;
    char *resp; /* the answer, truncated at resp_cap */
    size_t resp_len, resp_cap;
    double start_ms;
    int busy;
    int page; /* list mode: pages of the current walk already fetched */
    char url[4096];
} conn;

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

typedef struct stats {
    long long ok_requests, ok_jobs, err_requests, curl_errors, connects;
    long long acked_jobs; /* jobs acknowledged, warm-up included */
    long long status_count[MAX_STATUS];
    long long pages_jobs; /* list mode: jobs received in measured pages */
    long long last_pages; /* list mode: walks that ended on a page without next_page_token */
    double bytes_down;
    samples lat;
} stats;

static int samples_add(samples *s, double v)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 65536;
        double *nv = realloc(s->v, ncap * sizeof *nv);
        if (nv == NULL)
            return -1;
        s->v = nv;
        s->cap = ncap;
    }
    s->v[s->n++] = v;
    return 0;
}

/* ---- request bodies -------------------------------------------------------- */

static const char spec_head[] = "{\"name\":\"";
static const char spec_mid[] = "\",\"labels\":{\"team\":\"bench\",\"shard\":\"s";
static const char spec_tail[] = "\"},\"image\":\"registry.example/trainyard-worker:1.0\","
                                "\"command\":[\"trainyard-worker\",\"train\"],"
                                "\"args\":[\"--epochs\",\"5\"],\"workers\":{\"count\":4}}";

static void body_free(body *b)
{
    free(b->buf);
    free(b->name_off);
    free(b->shard_off);
    memset(b, 0, sizeof *b);
}

/* Builds a body of n jobs (a bare spec when batch is 0, else {"jobs":[...]}). */
static int body_build(body *b, const char *prefix, size_t n, int batch)
{
    size_t plen = strlen(prefix);
    size_t one = (sizeof spec_head - 1) + plen + 1 + NAME_DIGITS + (sizeof spec_mid - 1) + 1 +
                 (sizeof spec_tail - 1);
    size_t cap = n * (one + 1) + 32;
    body_free(b);
    b->buf = malloc(cap);
    b->name_off = calloc(n, sizeof *b->name_off);
    b->shard_off = calloc(n, sizeof *b->shard_off);
    if (b->buf == NULL || b->name_off == NULL || b->shard_off == NULL) {
        body_free(b);
        return -1;
    }
    char *p = b->buf;
    if (batch) {
        memcpy(p, "{\"jobs\":[", 9);
        p += 9;
    }
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        memcpy(p, spec_head, sizeof spec_head - 1);
        p += sizeof spec_head - 1;
        memcpy(p, prefix, plen);
        p += plen;
        *p++ = '-';
        b->name_off[i] = (size_t)(p - b->buf);
        memset(p, '0', NAME_DIGITS);
        p += NAME_DIGITS;
        memcpy(p, spec_mid, sizeof spec_mid - 1);
        p += sizeof spec_mid - 1;
        b->shard_off[i] = (size_t)(p - b->buf);
        *p++ = '0';
        memcpy(p, spec_tail, sizeof spec_tail - 1);
        p += sizeof spec_tail - 1;
    }
    if (batch) {
        memcpy(p, "]}", 2);
        p += 2;
    }
    b->len = (size_t)(p - b->buf);
    b->njobs = n;
    return 0;
}

/* Gives the jobs of b the numbers first, first+1, ... */
static void body_stamp(body *b, long long first)
{
    for (size_t i = 0; i < b->njobs; i++) {
        unsigned long long v = (unsigned long long)first + i;
        b->buf[b->shard_off[i]] = (char)('0' + v % 10);
        char *d = b->buf + b->name_off[i];
        for (int k = NAME_DIGITS - 1; k >= 0; k--) {
            d[k] = (char)('0' + v % 10);
            v /= 10;
        }
    }
}

/* ---- libcurl plumbing ------------------------------------------------------- */

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    conn *c = ud;
    size_t n = size * nmemb;
    size_t room = c->resp_cap - c->resp_len;
    size_t take = n < room ? n : room;
    memcpy(c->resp + c->resp_len, ptr, take);
    c->resp_len += take;
    return n;
}

static int conn_setup(conn *c, const opts *o, struct curl_slist *headers)
{
    c->resp_cap = o->mode == MODE_LIST ? LIST_RESP_CAP : SUBMIT_RESP_CAP;
    c->resp = malloc(c->resp_cap + 1);
    c->easy = curl_easy_init();
    if (c->resp == NULL || c->easy == NULL)
        return -1;
    CURL *e = c->easy;
    int rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)c);
    rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 60000L);
    if (o->mode == MODE_SUBMIT) {
        int n = snprintf(c->url, sizeof c->url, "%s%s", o->url,
                         o->batch > 1 ? "/v1/jobs:batch" : "/v1/jobs");
        if (n < 0 || (size_t)n >= sizeof c->url)
            return -1;
        rc |= curl_easy_setopt(e, CURLOPT_URL, c->url);
        rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
    } else {
        rc |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    return rc == CURLE_OK ? 0 : -1;
}

/* Points the handle at the first page, or at the page after the answer in c->resp. */
static int list_next_url(conn *c, const opts *o, stats *st, int measured)
{
    const char *token = NULL;
    json_t *root = NULL;
    int rc = -1;
    if (c->page > 0) {
        c->resp[c->resp_len] = '\0';
        root = json_loadb(c->resp, c->resp_len, 0, NULL);
        json_t *jobs = root ? json_object_get(root, "jobs") : NULL;
        if (!json_is_array(jobs)) {
            fprintf(stderr, "bench_submit: list answer without a jobs array\n");
            goto out;
        }
        if (measured)
            st->pages_jobs += (long long)json_array_size(jobs);
        token = json_string_value(json_object_get(root, "next_page_token"));
        if (token == NULL && measured)
            st->last_pages++;
    }
    if (token == NULL || c->page >= o->pages)
        c->page = 0;
    int n = snprintf(c->url, sizeof c->url, "%s/v1/jobs?limit=%d%s%s", o->url, o->limit,
                     o->query[0] ? "&" : "", o->query);
    if (n < 0 || (size_t)n >= sizeof c->url)
        goto out;
    if (c->page > 0) {
        char *esc = curl_easy_escape(c->easy, token, 0);
        if (esc == NULL)
            goto out;
        int m = snprintf(c->url + n, sizeof c->url - (size_t)n, "&page_token=%s", esc);
        curl_free(esc);
        if (m < 0 || (size_t)m >= sizeof c->url - (size_t)n)
            goto out;
    }
    c->page++;
    if (curl_easy_setopt(c->easy, CURLOPT_URL, c->url) != CURLE_OK)
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static void report_status(const conn *c, long code, const char *what)
{
    int shown = c->resp_len > 300 ? 300 : (int)c->resp_len;
    fprintf(stderr, "bench_submit: %s: HTTP %ld: %.*s\n", what, code, shown, c->resp);
}

/* ---- the run ------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_submit submit --url URL --token T [--concurrency C] [--batch N]\n"
               "                           [--duration S] [--warmup S] [--jobs TOTAL]\n"
               "                           [--prefix P] [--first N]\n"
               "       bench_submit list --url URL --token T [--concurrency C] [--limit L]\n"
               "                         [--query 'state=PENDING&label=k=v'] [--pages P]\n"
               "                         [--duration S] [--warmup S]\n"
               "Prints one line of key=value results on stdout.\n");
}

static int parse_ll(const char *s, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int valid_prefix(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > MAX_PREFIX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        if (!alnum && (ch != '-' || i == 0))
            return 0;
    }
    return 1;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},
        {"token", required_argument, NULL, 'T'},
        {"concurrency", required_argument, NULL, 'c'},
        {"batch", required_argument, NULL, 'b'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"jobs", required_argument, NULL, 'n'},
        {"prefix", required_argument, NULL, 'p'},
        {"first", required_argument, NULL, 'f'},
        {"limit", required_argument, NULL, 'l'},
        {"query", required_argument, NULL, 'q'},
        {"pages", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts){.concurrency = 1,
                .batch = 1,
                .limit = 100,
                .pages = 1,
                .duration_s = 5,
                .warmup_s = 1,
                .prefix = "bench",
                .query = ""};
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "submit") == 0) {
        o->mode = MODE_SUBMIT;
    } else if (strcmp(argv[1], "list") == 0) {
        o->mode = MODE_LIST;
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 1;
    } else {
        usage(stderr);
        return 2;
    }
    optind = 2;
    int ch;
    long long v;
    while ((ch = getopt_long(argc, argv, "c:", longopts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'u':
            o->url = optarg;
            break;
        case 'T':
            o->token = optarg;
            break;
        case 'p':
            o->prefix = optarg;
            bad = !valid_prefix(optarg);
            break;
        case 'q':
            o->query = optarg;
            break;
        case 'c':
            bad = parse_ll(optarg, 1, 4096, &v);
            o->concurrency = (int)v;
            break;
        case 'b':
            bad = parse_ll(optarg, 1, 1000, &v);
            o->batch = (int)v;
            break;
        case 'l':
            bad = parse_ll(optarg, 1, 1000, &v);
            o->limit = (int)v;
            break;
        case 'P':
            bad = parse_ll(optarg, 1, 1000000, &v);
            o->pages = (int)v;
            break;
        case 'n':
            bad = parse_ll(optarg, 1, 1000000000000LL, &o->jobs);
            break;
        case 'f':
            bad = parse_ll(optarg, 0, 9000000000LL, &o->first);
            break;
        case 'd':
            bad = parse_double(optarg, 0.1, 3600, &o->duration_s);
            break;
        case 'w':
            bad = parse_double(optarg, 0, 3600, &o->warmup_s);
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "bench_submit: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (optind != argc || o->url == NULL || o->token == NULL) {
        usage(stderr);
        return 2;
    }
    if (o->mode == MODE_LIST && o->jobs) {
        fprintf(stderr, "bench_submit: --jobs is for submit mode\n");
        return 2;
    }
    return 0;
}

/* The state of one run, shared by the event loop and the libcurl callbacks. */
typedef struct run {
    opts o;
    CURLM *m;
    conn *conns;
    stats st;
    double from, to;    /* measurement window, bench_mono_ms() clock */
    long long next_job; /* number of the next job name */
    long long total_requests;
    double last_done;
    int busy; /* requests in flight */
} run;

/* Prepares and hands one request of connection c to the multi handle. */
static int issue(run *r, conn *c, int measured)
{
    const opts *o = &r->o;
    if (o->mode == MODE_SUBMIT) {
        long long want = o->batch;
        long long left = o->jobs - (r->next_job - o->first);
        if (o->jobs && left < want)
            want = left;
        if ((size_t)want != c->body.njobs) {
            if (body_build(&c->body, o->prefix, (size_t)want, o->batch > 1) != 0)
                return -1;
        }
        body_stamp(&c->body, r->next_job);
        r->next_job += want;
        if (curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body.buf) != CURLE_OK ||
            curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body.len) !=
                CURLE_OK)
            return -1;
    } else if (list_next_url(c, o, &r->st, measured) != 0) {
        return -1;
    }
    c->resp_len = 0;
    c->start_ms = bench_mono_ms();
    if (curl_multi_add_handle(r->m, c->easy) != CURLM_OK)
        return -1;
    c->busy = 1;
    r->busy++;
    return 0;
}

/* Accounts for one finished request and starts the next one on its connection. */
static int on_done(run *r, CURLMsg *msg)
{
    const opts *o = &r->o;
    stats *st = &r->st;
    double t = bench_mono_ms();
    char *priv = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
    conn *c = (conn *)(void *)priv;
    CURLcode res = msg->data.result; /* msg is invalid after remove_handle */
    curl_multi_remove_handle(r->m, c->easy);
    c->busy = 0;
    r->busy--;
    r->total_requests++;
    r->last_done = t;

    int measured = t >= r->from && t < r->to;
    long code = 0, nconn = 0;
    curl_off_t down = 0;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(c->easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
    curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &nconn);
    st->connects += nconn;
    int ok =
        res == CURLE_OK && (o->mode == MODE_SUBMIT ? (code == 201 || code == 200) : code == 200);
    if (res != CURLE_OK) {
        if (st->curl_errors++ == 0)
            fprintf(stderr, "bench_submit: %s\n", curl_easy_strerror(res));
    } else if (!ok && code >= 0 && code < MAX_STATUS) {
        if (st->status_count[code]++ == 0)
            report_status(c, code, o->mode == MODE_SUBMIT ? "submit" : "list");
    }
    if (ok && o->mode == MODE_SUBMIT)
        st->acked_jobs += (long long)c->body.njobs;
    if (!ok)
        st->err_requests += res == CURLE_OK; /* curl_errors counts the others */
    if (measured && ok) {
        st->ok_requests++;
        st->ok_jobs += o->mode == MODE_SUBMIT ? (long long)c->body.njobs : 0;
        st->bytes_down += (double)down;
        if (samples_add(&st->lat, t - c->start_ms) != 0)
            return -1;
    }
    if (!ok && o->mode == MODE_LIST)
        c->page = 0; /* never follow a token out of an error */
    if (t >= r->to || (o->jobs && r->next_job - o->first >= o->jobs))
        return 0;
    return issue(r, c, measured);
}

static int drain(run *r)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(r->m, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && on_done(r, msg) != 0)
            return -1;
    }
    return 0;
}

/* The event loop. curl_multi_perform() visits every transfer on each wakeup,
 * but with one wakeup serving many completions it measured cheaper per request
 * than curl_multi_socket_action() with epoll, whose remove/add of a handle per
 * request costs extra epoll_ctl calls and timer round trips. */
static int loop(run *r)
{
    int running = 0;
    while (r->busy > 0) {
        if (curl_multi_perform(r->m, &running) != CURLM_OK || drain(r) != 0)
            return -1;
        if (r->busy > 0 && curl_multi_poll(r->m, NULL, 0, 100, NULL) != CURLM_OK)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    int prc = parse_opts(argc, argv, &r.o);
    if (prc != 0)
        return prc == 1 ? 0 : 2;
    const opts *o = &r.o;

    int rc = 1;
    struct curl_slist *headers = NULL;
    char auth[1024];

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    int n = snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->token);
    if (n < 0 || (size_t)n >= sizeof auth) {
        fprintf(stderr, "bench_submit: token too long\n");
        goto out;
    }
    headers = curl_slist_append(headers, auth);
    if (headers != NULL && o->mode == MODE_SUBMIT) {
        headers = curl_slist_append(headers, "Content-Type: application/json");
        if (headers != NULL)
            headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
    }
    r.m = curl_multi_init();
    r.conns = calloc((size_t)o->concurrency, sizeof *r.conns);
    if (headers == NULL || r.m == NULL || r.conns == NULL)
        goto out;
    /* Handles in one multi share its connection cache: room for every connection. */
    curl_multi_setopt(r.m, CURLMOPT_MAXCONNECTS, (long)o->concurrency * 2);
    for (int i = 0; i < o->concurrency; i++) {
        if (conn_setup(&r.conns[i], o, headers) != 0) {
            fprintf(stderr, "bench_submit: libcurl setup failed\n");
            goto out;
        }
    }

    r.next_job = o->first;
    double cpu0 = bench_self_cpu_s();
    double t0 = bench_mono_ms();
    r.from = o->jobs ? t0 : t0 + o->warmup_s * 1e3;
    r.to = o->jobs ? 1e300 : r.from + o->duration_s * 1e3;
    r.last_done = t0;
    int failed = 0;
    for (int i = 0; i < o->concurrency && !failed; i++) {
        if (o->jobs && r.next_job - o->first >= o->jobs)
            break;
        failed = issue(&r, &r.conns[i], 0) != 0;
    }
    if (!failed)
        failed = loop(&r) != 0;
    double cpu = bench_self_cpu_s() - cpu0;
    if (failed) {
        fprintf(stderr, "bench_submit: run aborted (libcurl or memory failure)\n");
        goto out;
    }

    stats *st = &r.st;
    double secs = o->jobs ? (r.last_done - t0) / 1e3 : o->duration_s;
    if (st->lat.n > 0)
        qsort(st->lat.v, st->lat.n, sizeof *st->lat.v, bench_cmp_double);
    const double *lv = st->lat.v;
    size_t ln = st->lat.n;
    long long errors = st->err_requests + st->curl_errors;
    printf("mode=%s c=%d batch=%d duration_s=%.2f requests=%lld jobs=%lld errors=%lld "
           "req_per_s=%.1f jobs_per_s=%.1f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f "
           "connects=%lld client_cpu_s=%.2f client_cpu_us_per_req=%.1f next_first=%lld "
           "acked_jobs=%lld",
           o->mode == MODE_SUBMIT ? "submit" : "list", o->concurrency,
           o->mode == MODE_SUBMIT ? o->batch : 0, secs, st->ok_requests, st->ok_jobs, errors,
           (double)st->ok_requests / secs, (double)st->ok_jobs / secs,
           bench_percentile(lv, ln, 50), bench_percentile(lv, ln, 90),
           bench_percentile(lv, ln, 99), ln ? lv[ln - 1] : 0.0, st->connects, cpu,
           r.total_requests ? cpu * 1e6 / (double)r.total_requests : 0.0, r.next_job,
           st->acked_jobs);
    if (o->mode == MODE_LIST) {
        double pages = (double)st->ok_requests;
        printf(" limit=%d pages=%d jobs_per_page=%.1f walks_to_end=%lld kb_per_page=%.1f", o->limit,
               o->pages, pages > 0 ? (double)st->pages_jobs / pages : 0.0, st->last_pages,
               pages > 0 ? st->bytes_down / 1024.0 / pages : 0.0);
    }
    printf("\n");
    rc = errors == 0 && st->ok_requests > 0 ? 0 : 1;
out:
    for (int i = 0; r.conns && i < o->concurrency; i++) {
        if (r.conns[i].easy) {
            if (r.conns[i].busy)
                curl_multi_remove_handle(r.m, r.conns[i].easy);
            curl_easy_cleanup(r.conns[i].easy);
        }
        body_free(&r.conns[i].body);
        free(r.conns[i].resp);
    }
    free(r.conns);
    curl_multi_cleanup(r.m);
    curl_slist_free_all(headers);
    free(r.st.lat.v);
    curl_global_cleanup();
    return rc;
}
