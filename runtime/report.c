/*
 * report.c - the metrics reporter of trainyard-worker (contracts in report.h).
 *
 * Invariants: the ring is points [head, head + count) modulo cap, all under mu. Only the
 * training side appends (at the tail) and only the reporter thread removes (at the head),
 * so the points the reporter copied out to send stay in place while the POST runs without
 * the lock, and are removed only once the server has answered for them. Nothing on the
 * training side waits for anything but mu, which is held for copies only.
 */
#include "runtime/report.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/rt_error.h"

#define JOB_ID_MAX 64
#define MIN_INTERVAL_S 0.01
#define MAX_INTERVAL_S 3600.0

typedef enum send_result {
    SEND_OK,       /* 200: the points are stored */
    SEND_RETRY,    /* transport error, 408, 429, 5xx: keep the points for the next try */
    SEND_DROP,     /* an answer retrying cannot change: drop this batch */
    SEND_DISABLE,  /* the token or the job is gone: drop everything, report no more */
} send_result;

struct report {
    /* configuration, immutable after report_open() */
    char *url;
    char *auth;                  /* "Authorization: Bearer ..." */
    double interval_s, request_timeout_s, final_timeout_s;
    size_t cap;
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cond;         /* wakes the reporter: a full batch, or close */
    report_point *ring;
    size_t head, count;
    int wake, stopping, disabled;
    double final_deadline;       /* monotonic seconds, set with stopping */
    report_stats st;
    char last_error[160];        /* why the last POST failed, for the closing log line */
    /* the reporter thread's own */
    pthread_t thread;
    report_point *batch;         /* REPORT_MAX_BATCH points copied out of the ring */
    CURL *curl;
    struct curl_slist *headers;
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "2026-11-23T11:30:00.123Z" into buf (at least 32 bytes). */
static void format_time(int64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    size_t n = gmtime_r(&secs, &tm) ? strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm) : 0;
    if (n == 0 || len - n < 6)
        snprintf(buf, len, "1970-01-01T00:00:00.000Z");
    else
        snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}

void report_config_defaults(report_config *c)
{
    memset(c, 0, sizeof *c);
    c->interval_s = 5.0;
    c->capacity = 8192;
    c->request_timeout_s = 10.0;
    c->final_timeout_s = 5.0;
}

static int valid_job_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > JOB_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_'))
            return 0;
    }
    return 1;
}

static int valid_server(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

ty_err report_config_env(report_config *c, const char *(*get)(const char *name), char *err,
                         size_t errlen)
{
    const char *server = get("TRAINYARD_SERVER"), *token = get("TRAINYARD_TOKEN");
    const char *job = get("TRAINYARD_JOB_ID"), *interval = get("TRAINYARD_REPORT_INTERVAL");
    if (!server || !*server || !token || !*token || !job || !*job)
        return TY_ENOTFOUND;
    if (!valid_server(server)) {
        rt_errf(err, errlen, "TRAINYARD_SERVER: not an http:// or https:// URL");
        return TY_EINVAL;
    }
    if (!valid_job_id(job)) {
        rt_errf(err, errlen, "TRAINYARD_JOB_ID: not a job id");
        return TY_EINVAL;
    }
    if (interval && *interval) {
        char *end;
        errno = 0;
        double v = strtod(interval, &end);
        if (errno || end == interval || *end || !(v >= MIN_INTERVAL_S && v <= MAX_INTERVAL_S)) {
            rt_errf(err, errlen, "TRAINYARD_REPORT_INTERVAL: \"%s\" is not a number of seconds "
                    "from %g to %g", interval, MIN_INTERVAL_S, MAX_INTERVAL_S);
            return TY_EINVAL;
        }
        c->interval_s = v;
    }
    c->server = server;
    c->token = token;
    c->job_id = job;
    return TY_OK;
}

/* Discards the answer's body: only the status matters, and a body is never logged. */
static size_t discard(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

/* Aborts a POST still running when the final flush's deadline has passed. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    report *r = arg;
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    pthread_mutex_lock(&r->mu);
    int late = r->stopping && mono_s() > r->final_deadline;
    pthread_mutex_unlock(&r->mu);
    return late;
}

static int setup_curl(report *r)
{
    r->curl = curl_easy_init();
    if (!r->curl)
        return -1;
    struct curl_slist *h = curl_slist_append(NULL, r->auth);
    if (h)
        r->headers = h;
    if (h && (h = curl_slist_append(r->headers, "Content-Type: application/json")))
        r->headers = h;
    /* No 100-continue round trip before each batch. */
    if (h && (h = curl_slist_append(r->headers, "Expect:")))
        r->headers = h;
    if (!h)
        return -1;
    CURL *c = r->curl;
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    /* The token goes to the server named, never to wherever a redirect points. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    return 0;
}

/* {"points": [{"step": .., "time": "..", "<name>": <value>, ..}, ..]}; new, or NULL. */
static char *batch_body(const report_point *pts, size_t n)
{
    json_t *arr = json_array(), *body = NULL;
    char *text = NULL;
    if (!arr)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const report_point *p = &pts[i];
        char when[40];
        format_time(p->time_ms, when, sizeof when);
        json_t *o = json_pack("{s:I,s:s}", "step", (json_int_t)p->step, "time", when);
        for (int k = 0; o && k < p->n; k++)
            if (json_object_set_new(o, p->v[k].name, json_real(p->v[k].value)) != 0) {
                json_decref(o);
                o = NULL;
            }
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    body = json_pack("{s:o}", "points", arr);
    if (body)
        text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(body);
    return text;
}

static send_result post(report *r, size_t n, char *why, size_t whylen)
{
    if (!r->curl && setup_curl(r) != 0) {
        snprintf(why, whylen, "libcurl could not be set up");
        return SEND_RETRY;
    }
    char *body = batch_body(r->batch, n);
    if (!body) {
        snprintf(why, whylen, "out of memory for a batch of %zu points", n);
        return SEND_RETRY;
    }
    double timeout = r->request_timeout_s;
    pthread_mutex_lock(&r->mu);
    if (r->stopping && r->final_deadline - mono_s() < timeout)
        timeout = r->final_deadline - mono_s();
    pthread_mutex_unlock(&r->mu);
    long timeout_ms = timeout > 0.001 ? (long)(timeout * 1000) : 1;
    curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    CURLcode cc = curl_easy_perform(r->curl);
    free(body);
    if (cc != CURLE_OK) {
        snprintf(why, whylen, "%s", curl_easy_strerror(cc));
        return SEND_RETRY;
    }
    long status = 0;
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status == 200)
        return SEND_OK;
    snprintf(why, whylen, "HTTP %ld", status);
    if (status == 408 || status == 429 || status >= 500)
        return SEND_RETRY;
    if (status == 401 || status == 403 || status == 404 || status == 409)
        return SEND_DISABLE;
    return SEND_DROP;
}

/*
 * Sends the oldest batch of the ring. Called and returns with mu held; releases it for
 * the POST.
 */
static send_result send_batch(report *r)
{
    size_t n = r->count < REPORT_MAX_BATCH ? r->count : REPORT_MAX_BATCH;
    for (size_t i = 0; i < n; i++)
        r->batch[i] = r->ring[(r->head + i) % r->cap];
    pthread_mutex_unlock(&r->mu);
    char why[sizeof r->last_error] = "";
    send_result res = post(r, n, why, sizeof why);
    pthread_mutex_lock(&r->mu);
    r->st.posts++;
    if (res != SEND_OK) {
        r->st.failed++;
        snprintf(r->last_error, sizeof r->last_error, "%s", why);
    }
    if (res == SEND_OK || res == SEND_DROP) {
        r->head = (r->head + n) % r->cap;
        r->count -= n;
        if (res == SEND_OK)
            r->st.sent += n;
        else
            r->st.dropped += n;
    } else if (res == SEND_DISABLE) {
        r->st.dropped += r->count;
        r->head = r->count = 0;
        r->disabled = 1;
    }
    return res;
}

static void *reporter_main(void *arg)
{
    report *r = arg;
    double next = mono_s() + r->interval_s;

    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stopping && !r->wake && mono_s() < next) {
            struct timespec ts;
            double whole = floor(next);
            ts.tv_sec = (time_t)whole;
            ts.tv_nsec = (long)((next - whole) * 1e9);
            pthread_cond_timedwait(&r->cond, &r->mu, &ts);
        }
        if (r->stopping)
            break;
        r->wake = 0;
        next = mono_s() + r->interval_s;
        /* Everything the ring holds, batch after batch, until a POST fails. */
        while (r->count > 0 && !r->stopping && send_batch(r) == SEND_OK)
            ;
    }
    /* The final flush: bounded by final_deadline, given up at the first failure. */
    while (r->count > 0 && !r->disabled && mono_s() < r->final_deadline &&
           send_batch(r) == SEND_OK)
        ;
    r->st.dropped += r->count;
    r->head = r->count = 0;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void report_free(report *r)
{
    if (!r)
        return;
    if (r->curl)
        curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    free(r->url);
    if (r->auth) {
        /* The token should not linger in freed memory. */
        memset(r->auth, 0, strlen(r->auth));
        free(r->auth);
    }
    free(r->ring);
    free(r->batch);
    free(r);
}

/* A new formatted string, or NULL. */
__attribute__((format(printf, 1, 2))) static char *printf_new(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

ty_err report_open(const report_config *c, report **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!c->server || !valid_server(c->server)) {
        rt_errf(err, errlen, "server: not an http:// or https:// URL");
        return TY_EINVAL;
    }
    if (!c->job_id || !valid_job_id(c->job_id)) {
        rt_errf(err, errlen, "job id: not a job id");
        return TY_EINVAL;
    }
    if (!c->token || !*c->token || strpbrk(c->token, "\r\n")) {
        rt_errf(err, errlen, "token: empty or not one line");
        return TY_EINVAL;
    }
    if (c->capacity == 0 || c->capacity > ((size_t)1 << 24) || !(c->interval_s > 0) ||
        !(c->request_timeout_s > 0) || !(c->final_timeout_s >= 0)) {
        rt_errf(err, errlen, "capacity, interval or timeouts out of range");
        return TY_EINVAL;
    }
    report *r = calloc(1, sizeof *r);
    if (!r) {
        rt_errf(err, errlen, "out of memory");
        return TY_ENOMEM;
    }
    size_t len = strlen(c->server);
    while (len > 0 && c->server[len - 1] == '/')
        len--;
    char *base = strndup(c->server, len);
    r->url = base ? printf_new("%s/v1/jobs/%s/metrics", base, c->job_id) : NULL;
    free(base);
    r->auth = printf_new("Authorization: Bearer %s", c->token);
    r->cap = c->capacity;
    r->ring = calloc(r->cap, sizeof *r->ring);
    r->batch = calloc(REPORT_MAX_BATCH, sizeof *r->batch);
    r->interval_s = c->interval_s;
    r->request_timeout_s = c->request_timeout_s;
    r->final_timeout_s = c->final_timeout_s;
    if (!r->url || !r->auth || !r->ring || !r->batch) {
        report_free(r);
        rt_errf(err, errlen, "out of memory");
        return TY_ENOMEM;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        report_free(r);
        rt_errf(err, errlen, "libcurl could not be initialised");
        return TY_EIO;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);
    int e = pthread_create(&r->thread, NULL, reporter_main, r);
    if (e != 0) {
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->mu);
        report_free(r);
        curl_global_cleanup();
        rt_errf(err, errlen, "cannot start the reporter thread: %s", strerror(e));
        return TY_EIO;
    }
    *out = r;
    return TY_OK;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

report *report_open_env(FILE *log)
{
    report_config c;
    report *r = NULL;
    char err[256] = "";
    report_config_defaults(&c);
    ty_err rc = report_config_env(&c, env_get, err, sizeof err);
    if (rc == TY_ENOTFOUND)
        return NULL;
    if (rc == TY_OK)
        rc = report_open(&c, &r, err, sizeof err);
    if (rc != TY_OK && log)
        fprintf(log, "trainyard-worker: reporting off: %s\n", err);
    return rc == TY_OK ? r : NULL;
}

void report_push(report *r, const report_point *p)
{
    if (!r || !p)
        return;
    report_point q;
    q.step = p->step;
    q.time_ms = p->time_ms ? p->time_ms : wall_ms();
    q.n = 0;
    for (int i = 0; i < p->n && i < REPORT_MAX_VALUES; i++)
        if (p->v[i].name && isfinite(p->v[i].value))
            q.v[q.n++] = p->v[i];

    pthread_mutex_lock(&r->mu);
    r->st.pushed++;
    if (q.n == 0 || q.step < 0 || r->disabled || r->stopping || r->count == r->cap) {
        r->st.dropped++;
    } else {
        r->ring[(r->head + r->count) % r->cap] = q;
        r->count++;
        /* A full batch (or half the ring) need not wait for the interval. */
        size_t soon = r->cap / 2 < REPORT_MAX_BATCH ? r->cap / 2 : REPORT_MAX_BATCH;
        if (r->count == (soon ? soon : 1)) {
            r->wake = 1;
            pthread_cond_signal(&r->cond);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

static void add_value(report_point *p, const char *name, const json_t *v)
{
    if (p->n < REPORT_MAX_VALUES && json_is_number(v))
        p->v[p->n++] = (report_value){name, json_number_value(v)};
}

void report_event(report *r, const json_t *event)
{
    if (!r || !event)
        return;
    const char *ev = json_string_value(json_object_get(event, "event"));
    report_point p = {0};
    if (!ev)
        return;
    if (strcmp(ev, "log") == 0) {
        p.step = (int64_t)json_integer_value(json_object_get(event, "step"));
        add_value(&p, "loss", json_object_get(event, "loss"));
        add_value(&p, "lr", json_object_get(event, "lr"));
        add_value(&p, "samples_per_s", json_object_get(event, "samples_per_s"));
        add_value(&p, "epoch", json_object_get(event, "epoch"));
    } else if (strcmp(ev, "epoch") == 0) {
        p.step = (int64_t)json_integer_value(json_object_get(event, "step"));
        add_value(&p, "epoch_loss", json_object_get(event, "train_loss"));
    } else if (strcmp(ev, "done") == 0) {
        p.step = (int64_t)json_integer_value(json_object_get(event, "steps"));
        add_value(&p, "loss", json_object_get(event, "train_loss"));
        add_value(&p, "accuracy", json_object_get(event, "test_accuracy"));
    } else {
        return;
    }
    report_push(r, &p);
}

void report_get_stats(report *r, report_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    *st = r->st;
    pthread_mutex_unlock(&r->mu);
}

void report_close(report *r, FILE *log, report_stats *final)
{
    if (final)
        memset(final, 0, sizeof *final);
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    r->final_deadline = mono_s() + r->final_timeout_s;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);

    report_stats st = r->st;
    if (log) {
        if (r->last_error[0] && st.dropped > 0)
            fprintf(log, "trainyard-worker: reporting: %llu points sent, %llu dropped "
                    "(last failure: %s)\n", (unsigned long long)st.sent,
                    (unsigned long long)st.dropped, r->last_error);
        else
            fprintf(log, "trainyard-worker: reporting: %llu points sent, %llu dropped\n",
                    (unsigned long long)st.sent, (unsigned long long)st.dropped);
        fflush(log);
    }
    if (final)
        *final = st;
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    report_free(r);
    curl_global_cleanup();
}
