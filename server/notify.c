/*
 * notify.c - the delivery thread of notifications out (see notify.h for the contract).
 *
 * One thread, one request at a time: deliveries are rare (one per job end and subscription)
 * and a request is bounded by its timeouts, so a pool would only add ordering questions. The
 * thread sleeps on a condition variable until the earliest pending row is due or the store's
 * notify hook says a commit ended jobs; it never polls.
 */
#include "server/notify.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/ty_addr.h"
#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_metrics.h"
#include "common/ty_time.h"
#include "common/ty_thread.h"

#ifndef TY_VERSION
#define TY_VERSION "0.0.0"
#endif

#define BATCH 32                 /* due rows read at once */
#define MAX_RESPONSE (64 * 1024) /* bytes of a response body read, then the transfer stops */
#define ERROR_PAUSE_MS 1000      /* after a store error, before the next round */

struct notify {
    notify_options opt;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int woken;         /* mu: the hook fired since the last look at the outbox */
    atomic_int stop;
    atomic_ullong delivered, retried, failed;
};

/* ---- one attempt ------------------------------------------------------------------ */

static const char *event_name(job_state s)
{
    return s == JOB_SUCCEEDED ? "job.succeeded" : s == JOB_FAILED ? "job.failed" : "job.cancelled";
}

static json_t *time_json(int64_t ms)
{
    char t[32];
    return ms ? json_string(ty_time_format_rfc3339(ms, t, sizeof t)) : json_null();
}

/*
 * The body of delivery d (new, compact JSON), from the job as the store has it now: a job
 * that ended does not change. The reason and the end time are those of the event that moved
 * the job into d->event.
 */
static ty_err build_body(store *st, const store_delivery *d, char **out)
{
    store_job *job = NULL;
    store_event *ev = NULL;
    size_t nev = 0;
    json_t *spec = NULL, *body = NULL;
    ty_err e = store_job_get(st, d->job_id, &job);
    if (e || (e = store_job_events(st, d->job_id, &ev, &nev)) != TY_OK)
        goto out;
    const store_event *end = NULL;
    for (size_t i = 0; i < nev; i++)
        if (ev[i].to == d->event)
            end = &ev[i];
    spec = json_loads(job->spec_json, 0, NULL);
    json_t *labels = json_object_get(spec, "labels");
    body = json_pack("{s:s, s:I, s:{s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:o, s:o}}", "event",
                     event_name(d->event), "delivery", (json_int_t)d->id, "job", "id", job->id,
                     "name", job->name, "queue", job->queue, "state", job_state_name(d->event),
                     "reason", end ? end->reason : "", "message", end ? end->message : "", "labels",
                     json_is_object(labels) ? labels : json_object(), "created_at",
                     time_json(job->created_at_ms), "finished_at",
                     time_json(end ? end->time_ms : d->created_at_ms));
    e = TY_ENOMEM;
    if (body && (*out = json_dumps(body, JSON_COMPACT)) != NULL)
        e = TY_OK;
out:
    json_decref(body);
    json_decref(spec);
    store_events_free(ev, nev);
    store_jobs_free(job, job ? 1 : 0);
    return e;
}

/* "t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>" into out. */
static ty_err sign(const store_notify_sub *sub, int64_t t, const char *body, char *out, size_t len)
{
    char ts[24];
    unsigned char mac[EVP_MAX_MD_SIZE];
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    int n = snprintf(ts, sizeof ts, "%" PRId64 ".", t);
    EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = m ? EVP_MAC_CTX_new(m) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end()};
    size_t outl = 0;
    ty_err e = TY_EINTERNAL;
    if (c && EVP_MAC_init(c, sub->secret, sub->secret_len, params) == 1 &&
        EVP_MAC_update(c, (const unsigned char *)ts, (size_t)n) == 1 &&
        EVP_MAC_update(c, (const unsigned char *)body, strlen(body)) == 1 &&
        EVP_MAC_final(c, mac, &outl, sizeof mac) == 1 && outl == 32) {
        ty_hex(mac, outl, hex);
        n = snprintf(out, len, "t=%" PRId64 ",v1=%s", t, hex);
        e = n > 0 && (size_t)n < len ? TY_OK : TY_ETOOLARGE;
    }
    EVP_MAC_CTX_free(c);
    EVP_MAC_free(m);
    OPENSSL_cleanse(mac, sizeof mac);
    return e;
}

typedef struct transfer {
    size_t got;
    const atomic_int *stop;
    int allow_private;
    char refused[96]; /* "address 127.0.0.1 is not public (loopback)" when one was refused */
} transfer;

/*
 * libcurl's socket for each address it is about to connect to: the check of the address the
 * request really goes to, whatever the name resolved to at registration. A refused address
 * gets no socket (CURL_SOCKET_BAD: libcurl tries the name's next address, else fails the
 * attempt); why is kept in t->refused for the delivery's record.
 */
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    transfer *t = ud;
    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    ty_addr_class c = ty_addr_classify(&a->addr);
    if (c != TY_ADDR_PUBLIC && !t->allow_private) {
        char text[64];
        snprintf(t->refused, sizeof t->refused, "address %s is not public (%s)",
                 ty_addr_format(&a->addr, text, sizeof text), ty_addr_class_name(c));
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol); /* not into jobs */
}

/* Reads up to MAX_RESPONSE bytes of the answer (and keeps none): past it, stop the transfer. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    (void)p;
    transfer *t = ud;
    t->got += size * nmemb;
    return t->got > MAX_RESPONSE ? 0 : size * nmemb;
}

/* Aborts an attempt in flight when the notifier stops. */
static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    const transfer *t = ud;
    return atomic_load(t->stop) ? 1 : 0;
}

/*
 * POSTs body to sub's URL. *code is the HTTP status (0 when none came back); *error says why
 * there was none, else "": a static string, or errbuf (errlen bytes) when an address was
 * refused. A response whose body ran past MAX_RESPONSE still counts by its status.
 */
static void post(notify *n, const store_notify_sub *sub, const store_delivery *d, const char *body,
                 int *code, const char **error, char *errbuf, size_t errlen)
{
    char sig[128], hdr[3][192];
    struct curl_slist *h = NULL, *x;
    transfer t = {.stop = &n->stop, .allow_private = n->opt.allow_private};
    *code = 0;
    *error = "cannot prepare the request";
    CURL *c = curl_easy_init();
    if (!c || sign(sub, ty_time_now_ms() / 1000, body, sig, sizeof sig))
        goto out;
    snprintf(hdr[0], sizeof hdr[0], "X-Trainyard-Event: %s", event_name(d->event));
    snprintf(hdr[1], sizeof hdr[1], "X-Trainyard-Delivery: %" PRId64, d->id);
    snprintf(hdr[2], sizeof hdr[2], "X-Trainyard-Signature: %s", sig);
    static const char *const fixed[] = {"Content-Type: application/json",
                                        "Expect:", "User-Agent: trainyard/" TY_VERSION};
    for (size_t i = 0; i < 3; i++) {
        if (!(x = curl_slist_append(h, fixed[i])))
            goto out;
        h = x;
        if (!(x = curl_slist_append(h, hdr[i])))
            goto out;
        h = x;
    }
    curl_easy_setopt(c, CURLOPT_URL, sub->url);
    /* Only http(s), straight to the URL's host: no proxy from the environment (the address
     * checked would be the proxy's), no redirect. Every address connected to is checked. */
    if (curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(c, CURLOPT_PROXY, "") != CURLE_OK ||
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) != CURLE_OK ||
        curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &t) != CURLE_OK)
        goto out;
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)n->opt.connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)n->opt.timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t.got > MAX_RESPONSE && status > 0)) {
        *code = (int)status;
        *error = "";
    } else if (t.refused[0]) {
        snprintf(errbuf, errlen, "%s", t.refused);
        *error = errbuf;
    } else {
        *error = curl_easy_strerror(rc);
    }
out:
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

/* The delay before attempt `attempts` + 1: backoff doubling, capped, from its upper half. */
static int64_t backoff(const notify_options *o, int attempts)
{
    int64_t d = o->backoff_ms;
    for (int i = 1; i < attempts && d < o->backoff_max_ms; i++)
        d *= 2;
    if (d > o->backoff_max_ms)
        d = o->backoff_max_ms;
    uint32_t r = 0;
    if (ty_random_bytes((unsigned char *)&r, sizeof r) != TY_OK)
        r = (uint32_t)ty_time_mono_ns();
    return d - d / 2 + (int64_t)(r % (uint32_t)(d / 2 + 1));
}

/*
 * One attempt of d, recorded; TY_OK unless the store failed to record it. A row that cannot
 * be sent (its secret does not open, its body cannot be built) is recorded as a failed attempt
 * too, so that it backs off and finally fails instead of holding up the rows due after it.
 */
static ty_err deliver(notify *n, const store_delivery *d)
{
    store *st = n->opt.store;
    store_notify_sub *sub = NULL;
    char *body = NULL;
    int code = 0;
    const char *error = "";
    char errbuf[128];
    ty_err e = store_notify_get(st, d->sub, &sub);
    if (e == TY_ENOTFOUND) /* deleted since the read: its rows are gone too */
        return TY_OK;
    if (e)
        error = "the subscription's secret cannot be read";
    else if ((e = build_body(st, d, &body)) != TY_OK)
        error = "the delivery's body cannot be built";
    else
        post(n, sub, d, body, &code, &error, errbuf, sizeof errbuf);
    if (atomic_load(&n->stop)) { /* aborted: the row stays as it was, pending */
        e = TY_OK;
        goto out;
    }
    int64_t now = ty_time_now_ms();
    int attempts = d->attempts + 1;
    store_delivery_mark m = {.id = d->id, .at_ms = now, .code = code, .error = error};
    if (code >= 200 && code < 300) {
        m.state = STORE_DELIVERY_DELIVERED;
    } else if (attempts >= n->opt.max_attempts || now - d->created_at_ms >= n->opt.max_age_ms) {
        m.state = STORE_DELIVERY_FAILED;
    } else {
        m.state = STORE_DELIVERY_PENDING;
        m.next_at_ms = now + backoff(&n->opt, attempts);
    }
    e = store_notify_mark(st, &m);
    if (e == TY_ENOTFOUND) /* its subscription was deleted meanwhile */
        e = TY_OK;
    if (e)
        goto out;
    if (m.state == STORE_DELIVERY_DELIVERED) {
        atomic_fetch_add(&n->delivered, 1);
        TY_LOG(TY_LOG_INFO, "notification delivered", "{s:I, s:s, s:s, s:i, s:i}", "delivery",
               (json_int_t)d->id, "notification", d->sub, "job", d->job_id, "status", code,
               "attempts", attempts);
    } else if (m.state == STORE_DELIVERY_FAILED) {
        atomic_fetch_add(&n->failed, 1);
        TY_LOG(TY_LOG_ERROR, "notification failed; no more attempts",
               "{s:I, s:s, s:s, s:i, s:s, s:i}", "delivery", (json_int_t)d->id, "notification",
               d->sub, "job", d->job_id, "status", code, "error", error, "attempts", attempts);
    } else {
        atomic_fetch_add(&n->retried, 1);
        TY_LOG(TY_LOG_WARN, "notification attempt failed; will retry",
               "{s:I, s:s, s:s, s:i, s:s, s:i, s:I}", "delivery", (json_int_t)d->id, "notification",
               d->sub, "job", d->job_id, "status", code, "error", error, "attempts", attempts,
               "retry_in_ms", (json_int_t)(m.next_at_ms - now));
    }
out:
    free(body);
    store_notify_subs_free(sub, sub ? 1 : 0);
    return e;
}

/* ---- the thread ------------------------------------------------------------------- */

/* Waits (mu held) until woken, stopped, or wait_ms passed (< 0: no limit). */
static void wait_locked(notify *n, int64_t wait_ms)
{
    if (n->woken || atomic_load(&n->stop))
        return;
    if (wait_ms < 0) {
        pthread_cond_wait(&n->cv, &n->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(wait_ms / 1000);
    ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&n->cv, &n->mu, &ts);
}

static void *run(void *arg)
{
    ty_thread_name("ty-notify");
    notify *n = arg;
    while (!atomic_load(&n->stop)) {
        pthread_mutex_lock(&n->mu);
        n->woken = 0;
        pthread_mutex_unlock(&n->mu);

        store_delivery *rows = NULL;
        size_t nrows = 0;
        int64_t now = ty_time_now_ms(), next = 0, wait_ms = -1;
        ty_err e = store_notify_due(n->opt.store, now, BATCH, &rows, &nrows, &next);
        for (size_t i = 0; !e && i < nrows && !atomic_load(&n->stop); i++)
            e = deliver(n, &rows[i]);
        store_deliveries_free(rows, nrows);
        if (e) {
            TY_LOG(TY_LOG_ERROR, "notifications: the outbox cannot be read or marked", "{s:s}",
                   "error", ty_strerror(e));
            wait_ms = ERROR_PAUSE_MS;
        } else if (nrows > 0) {
            continue; /* the marks moved the due times: look again */
        } else if (next > 0) {
            wait_ms = next > now ? next - now : 0;
        }
        pthread_mutex_lock(&n->mu);
        wait_locked(n, wait_ms);
        pthread_mutex_unlock(&n->mu);
    }
    return NULL;
}

ty_err notify_start(const notify_options *opt, notify **out, char *err, size_t errlen)
{
    if (!opt || !opt->store || !out) {
        snprintf(err, errlen, "notifications: no store");
        return TY_EINVAL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "notifications: cannot initialize libcurl");
        return TY_EINTERNAL;
    }
    notify *n = calloc(1, sizeof *n);
    if (!n) {
        curl_global_cleanup();
        return TY_ENOMEM;
    }
    n->opt = *opt;
    if (n->opt.connect_timeout_ms <= 0)
        n->opt.connect_timeout_ms = 5000;
    if (n->opt.timeout_ms <= 0)
        n->opt.timeout_ms = 10000;
    if (n->opt.backoff_ms <= 0)
        n->opt.backoff_ms = 1000;
    if (n->opt.backoff_max_ms < n->opt.backoff_ms)
        n->opt.backoff_max_ms = n->opt.backoff_ms > 300000 ? n->opt.backoff_ms : 300000;
    if (n->opt.max_attempts <= 0)
        n->opt.max_attempts = 20;
    if (n->opt.max_age_ms <= 0)
        n->opt.max_age_ms = 24 * 3600 * 1000LL;
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    ok = ok && pthread_cond_init(&n->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_mutex_init(&n->mu, NULL) != 0) {
        if (ok)
            pthread_cond_destroy(&n->cv);
        free(n);
        curl_global_cleanup();
        snprintf(err, errlen, "notifications: cannot create the thread's condition");
        return TY_EINTERNAL;
    }
    if (pthread_create(&n->thread, NULL, run, n) != 0) {
        pthread_mutex_destroy(&n->mu);
        pthread_cond_destroy(&n->cv);
        free(n);
        curl_global_cleanup();
        snprintf(err, errlen, "notifications: cannot start the thread: %s", strerror(errno));
        return TY_EINTERNAL;
    }
    *out = n;
    return TY_OK;
}

void notify_wake(void *ud)
{
    notify *n = ud;
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    n->woken = 1;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

void notify_stop(notify *n)
{
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    atomic_store(&n->stop, 1);
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n);
    curl_global_cleanup();
}

ty_err notify_render_metrics(notify *n, ty_buf *out)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } c[] = {
        {"trainyard_notifications_delivered_total", "Notification deliveries answered with 2xx.",
         offsetof(notify, delivered)},
        {"trainyard_notifications_retried_total",
         "Notification attempts that failed and will be retried.", offsetof(notify, retried)},
        {"trainyard_notifications_failed_total",
         "Notification deliveries given up after their last attempt.", offsetof(notify, failed)},
    };
    ty_err e = TY_OK;
    for (size_t i = 0; !e && i < sizeof c / sizeof c[0]; i++) {
        unsigned long long v = n ? atomic_load((atomic_ullong *)((char *)n + c[i].off)) : 0ULL;
        e = ty_metrics_render_header(out, c[i].name, "counter", c[i].help);
        if (!e)
            e = ty_buf_printf(out, "%s %llu\n", c[i].name, v);
    }
    return e;
}
