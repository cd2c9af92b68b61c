/*
 * kclient.c - requests, lists and watches against the Kubernetes API server.
 *
 * One attempt is one curl_easy_perform() on a pooled easy handle: curl keeps the handle's
 * connection alive between attempts, so a handle taken back from the pool reuses it. A pooled
 * handle is used by one thread at a time (curl's rule); the pool grows to the number of threads
 * calling at once. The retry loop wraps attempts; the rate limiter runs before each attempt.
 */
#include "scheduler/kube/kclient.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/ty_crypto.h"
#include "common/ty_time.h"
#include "scheduler/kube/kpick.h"

#define POOL_MAX 16

static const int codes[TY_KCODE_COUNT] = {
    0, 200, 201, 202, 204, 400, 401, 403, 404, 409, 410, 413, 422, 429, 500, 503, 504, -1,
};

static const char *const verbs[TY_KVERB_COUNT] = {
    "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE",
};

struct ty_kclient {
    ty_kubeconfig *kc;              /* borrowed */
    ty_kclient_opts o;
    char *user_agent;

    pthread_mutex_t pool_lock;
    CURL *pool[POOL_MAX];
    int npool;

    pthread_mutex_t rl_lock;        /* the token bucket */
    double tokens;
    uint64_t rl_last_ns;

    atomic_uint_least64_t requests[TY_KVERB_COUNT][TY_KCODE_COUNT];
    atomic_uint_least64_t retries, throttled, watches, watch_restarts, watch_expired;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    /* Server text ends up here: keep a message on one line. */
    for (char *p = err; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
}

void ty_kclient_opts_default(ty_kclient_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->qps = 100;
    o->burst = 1000;
    o->max_retries = 5;
    o->retry_deadline_ms = 30000;
    o->backoff_base_ms = 200;
    o->backoff_max_ms = 10000;
    o->timeout_ms = 30000;
    o->connect_timeout_ms = 10000;
    o->max_body = 64u << 20;
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

ty_err ty_kclient_new(ty_kubeconfig *kc, const ty_kclient_opts *opts, ty_kclient **out,
                      char *err, size_t errlen)
{
    ty_kclient *c;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        set_err(err, errlen, "libcurl: %s", curl_easy_strerror(global_rc));
        return TY_EIO;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return TY_ENOMEM;
    if (opts)
        c->o = *opts;
    else
        ty_kclient_opts_default(&c->o);
    if (c->o.qps < 0 || (c->o.qps > 0 && c->o.burst < 1) || c->o.max_retries < 0 ||
        c->o.max_body == 0 || c->o.timeout_ms <= 0 || c->o.connect_timeout_ms <= 0 ||
        c->o.backoff_base_ms < 0 || c->o.backoff_max_ms < c->o.backoff_base_ms) {
        set_err(err, errlen, "kube client: invalid options (qps >= 0, burst >= 1, timeouts > 0)");
        free(c);
        return TY_EINVAL;
    }
    c->kc = kc;
    c->user_agent = strdup(c->o.user_agent ? c->o.user_agent : "trainyard/0.1");
    c->o.user_agent = NULL;
    if (!c->user_agent) {
        free(c);
        return TY_ENOMEM;
    }
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_mutex_init(&c->rl_lock, NULL);
    c->tokens = c->o.burst;
    c->rl_last_ns = ty_time_mono_ns();
    *out = c;
    return TY_OK;
}

void ty_kclient_free(ty_kclient *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->rl_lock);
    free(c->user_agent);
    free(c);
}

void ty_kresp_clear(ty_kresp *r)
{
    if (!r)
        return;
    free(r->body);
    for (size_t i = 0; i < r->nwarnings && i < TY_KRESP_MAX_WARNINGS; i++)
        free(r->warnings[i]);
    memset(r, 0, sizeof(*r));
}

void ty_kstop_request(ty_kstop *s)
{
    atomic_store(&s->stop, 1);
}

/* ---- rate limit and backoff -------------------------------------------------------------------*/

static void sleep_ms(int64_t ms, ty_kstop *stop)
{
    /* In slices, so that a stopped watch does not sit out a long Retry-After. */
    while (ms > 0 && !(stop && atomic_load(&stop->stop))) {
        int64_t step = ms > 100 ? 100 : ms;
        struct timespec ts = {(time_t)(step / 1000), (long)(step % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* Takes a token, waiting for one; tokens are reserved in order, so waiters are served FIFO. */
static void rate_limit(ty_kclient *c, ty_kstop *stop)
{
    double wait_s = 0;
    if (c->o.qps <= 0)
        return;
    pthread_mutex_lock(&c->rl_lock);
    uint64_t now = ty_time_mono_ns();
    c->tokens += (double)(now - c->rl_last_ns) / 1e9 * c->o.qps;
    if (c->tokens > c->o.burst)
        c->tokens = c->o.burst;
    c->rl_last_ns = now;
    c->tokens -= 1;
    if (c->tokens < 0)
        wait_s = -c->tokens / c->o.qps;
    pthread_mutex_unlock(&c->rl_lock);
    if (wait_s > 0) {
        atomic_fetch_add(&c->throttled, 1);
        sleep_ms((int64_t)(wait_s * 1000) + 1, stop);
    }
}

/* Full jitter over the upper half: base * 2^retry, capped, times [0.5, 1). */
static int64_t backoff_ms(const ty_kclient *c, int retry)
{
    unsigned char r[2] = {0, 0};
    int64_t d = c->o.backoff_base_ms;
    for (int i = 0; i < retry && d < c->o.backoff_max_ms; i++)
        d *= 2;
    if (d > c->o.backoff_max_ms)
        d = c->o.backoff_max_ms;
    (void)ty_random_bytes(r, sizeof(r));
    return d / 2 + (d / 2) * ((r[0] << 8) | r[1]) / 65536;
}

/* ---- one attempt ------------------------------------------------------------------------------*/

typedef struct xfer {
    ty_kclient *c;
    CURL *h;
    ty_kresp *resp;
    ty_buf body;                    /* the body of a non-streamed answer */
    int64_t retry_after_ms;         /* -1 when none */
    /* Watches only. */
    const ty_kwatch_opts *watch;
    int streaming;                  /* a 200 arrived: the body is events */
    ty_buf line;                    /* what came of the event being read */
    size_t scanned;                 /* bytes of line known to hold no newline */
    char *last_rv;
    size_t rvlen;
    long events;
    ty_err stream_err;              /* why the write callback ended the stream */
    char stream_msg[512];
    int error_event;                /* an ERROR event came: the stream is over */
    long status_code;               /* its Status.code */
} xfer;

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n, k;
    char *v;
    if (len > 12 && strncasecmp(p, "HTTP/", 5) == 0) {
        /* A new answer (after a 100 Continue, or a redirect): forget the last one's headers. */
        for (size_t i = 0; i < x->resp->nwarnings && i < TY_KRESP_MAX_WARNINGS; i++)
            free(x->resp->warnings[i]);
        x->resp->nwarnings = 0;
        x->retry_after_ms = -1;
        return len;
    }
    if (len > 8 && strncasecmp(p, "Warning:", 8) == 0) {
        k = 8;
        while (k < len && (p[k] == ' ' || p[k] == '\t'))
            k++;
        while (len > k && (p[len - 1] == '\r' || p[len - 1] == '\n' || p[len - 1] == ' '))
            len--;
        if (x->resp->nwarnings < TY_KRESP_MAX_WARNINGS) {
            v = strndup(p + k, len - k);
            if (v)
                x->resp->warnings[x->resp->nwarnings++] = v;
        }
        return size * n;
    }
    if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
        char buf[32], *end;
        k = len - 12 < sizeof(buf) - 1 ? len - 12 : sizeof(buf) - 1;
        memcpy(buf, p + 12, k);
        buf[k] = '\0';
        long long s = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n')
            end++;
        /* Only delta-seconds: the API server never sends an HTTP date here. */
        if (end != buf && *end == '\0' && s >= 0)
            x->retry_after_ms = s * 1000;
    }
    return size * n;
}

static void set_rv(xfer *x, json_t *obj)
{
    const char *rv = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    if (rv && x->last_rv && x->rvlen > 0)
        snprintf(x->last_rv, x->rvlen, "%s", rv);
}

/* One newline-delimited event of a watch stream. */
static ty_err watch_event(xfer *x, const char *line, size_t len)
{
    static const char *const types[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
    json_error_t jerr;
    char why[160] = "";
    json_t *ev, *obj;
    const char *type;
    ty_err rc;
    int t = -1;
    /* With a pick (here the event's: its type and the object's pick), only that is built. */
    if (x->watch->pick) {
        ev = ty_kpick_parse(line, len, x->watch->pick, why, sizeof why);
        type = json_string_value(json_object_get(ev, "type"));
        if (ev && type && !strcmp(type, "ERROR")) {
            json_decref(ev); /* a Status: all of it */
            ev = NULL;
        }
    } else {
        ev = NULL;
    }
    if (!ev && !why[0]) {
        ev = json_loadb(line, len, 0, &jerr);
        if (!ev)
            snprintf(why, sizeof why, "%s", jerr.text);
    }
    if (!ev) {
        snprintf(x->stream_msg, sizeof(x->stream_msg), "watch %s: an event is not JSON: %s",
                 x->watch->path, why);
        return TY_EIO;
    }
    type = json_string_value(json_object_get(ev, "type"));
    obj = json_object_get(ev, "object");
    for (int i = 0; type && i < 5; i++)
        if (strcmp(type, types[i]) == 0)
            t = i;
    if (t < 0 || !json_is_object(obj)) {
        snprintf(x->stream_msg, sizeof(x->stream_msg), "watch %s: an event of type %.40s%s",
                 x->watch->path, type ? type : "(none)",
                 json_is_object(obj) ? "" : " without an object");
        json_decref(ev);
        return TY_EIO;
    }
    x->events++;
    if (t == TY_KWATCH_ERROR) {
        const char *reason = json_string_value(json_object_get(obj, "reason"));
        const char *msg = json_string_value(json_object_get(obj, "message"));
        x->status_code = (long)json_integer_value(json_object_get(obj, "code"));
        snprintf(x->resp->reason, sizeof(x->resp->reason), "%s", reason ? reason : "");
        snprintf(x->stream_msg, sizeof(x->stream_msg), "watch %s: %s (code %ld %s)",
                 x->watch->path, msg ? msg : "error", x->status_code, reason ? reason : "");
    } else {
        set_rv(x, obj);
    }
    rc = x->watch->cb(x->watch->ud, (ty_kwatch_type)t, obj);
    json_decref(ev);
    if (rc != TY_OK) {
        snprintf(x->stream_msg, sizeof(x->stream_msg), "watch %s: ended by its consumer: %s",
                 x->watch->path, ty_strerror(rc));
        return rc;
    }
    /* The server closes the stream after an ERROR; nothing more will come. */
    x->error_event = t == TY_KWATCH_ERROR;
    return TY_OK;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (x->watch && !x->streaming && x->body.len == 0) {
        long code = 0;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        x->streaming = code == 200;
    }
    if (!x->streaming) {
        if (ty_buf_append(&x->body, p, len) != TY_OK) {
            x->stream_err = TY_ETOOLARGE;
            return 0;
        }
        return len;
    }
    if (ty_buf_append(&x->line, p, len) != TY_OK) {
        x->stream_err = TY_ETOOLARGE;
        snprintf(x->stream_msg, sizeof(x->stream_msg), "watch %s: an event over %zu bytes",
                 x->watch->path, x->c->o.max_body);
        return 0;
    }
    /* An event of a few kilobytes comes in pieces: what was searched is not searched again. */
    size_t start = 0;
    const char *nl;
    while (x->scanned < x->line.len &&
           (nl = memchr(x->line.data + x->scanned, '\n', x->line.len - x->scanned))) {
        size_t i = (size_t)(nl - x->line.data);
        if (i > start) {
            ty_err rc = watch_event(x, x->line.data + start, i - start);
            if (rc != TY_OK || x->error_event) {
                x->stream_err = rc;
                return 0;
            }
        }
        start = x->scanned = i + 1;
    }
    if (start > 0) {
        memmove(x->line.data, x->line.data + start, x->line.len - start);
        x->line.len -= start;
        x->line.data[x->line.len] = '\0';
    }
    x->scanned = x->line.len;
    return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    const xfer *x = ud;
    (void)dt, (void)dn, (void)ut, (void)un;
    return x->watch && x->watch->stop && atomic_load(&x->watch->stop->stop);
}

static int code_bucket(long code)
{
    for (int i = 0; i < TY_KCODE_COUNT - 1; i++)
        if (codes[i] == code)
            return i;
    return TY_KCODE_COUNT - 1;
}

/* Maps an answer that is not 2xx to our error. */
static ty_err code_err(long code, const char *reason)
{
    switch (code) {
    case 400: case 422: return TY_EINVAL;
    case 401: return TY_EAUTH;
    case 403: return TY_EFORBIDDEN;
    case 404: return TY_ENOTFOUND;
    case 409: return strcmp(reason, "AlreadyExists") == 0 ? TY_EEXISTS : TY_ECONFLICT;
    case 410: case 429: return TY_EAGAIN;
    case 413: return TY_ETOOLARGE;
    default: return code >= 500 && code != 501 ? TY_EAGAIN : TY_EIO;
    }
}

/* Decodes the answer's Status into resp->reason and err. */
static void status_err(const char *method, const char *path, ty_kresp *r, char *err,
                       size_t errlen)
{
    json_t *j = r->body ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    const char *msg = json_string_value(json_object_get(j, "message"));
    const char *reason = json_string_value(json_object_get(j, "reason"));
    if (kind && strcmp(kind, "Status") == 0 && msg && msg[0]) {
        snprintf(r->reason, sizeof(r->reason), "%s", reason ? reason : "");
        set_err(err, errlen, "%s (HTTP %ld%s%s)", msg, r->code, r->reason[0] ? " " : "",
                r->reason);
    } else {
        r->reason[0] = '\0';
        set_err(err, errlen, "%s %s: HTTP %ld", method, path, r->code);
    }
    json_decref(j);
}

static int retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int has_query(const char *path, const char *name)
{
    const char *q = strchr(path, '?');
    size_t n = strlen(name);
    for (; q; q = strchr(q + 1, '&'))
        if (strncmp(q + 1, name, n) == 0 && q[1 + n] == '=')
            return 1;
    return 0;
}

/* Appends a header line; on failure the list is kept (and freed by the caller) and *oom set. */
static void add_header(struct curl_slist **l, const char *line, int *oom)
{
    struct curl_slist *n = curl_slist_append(*l, line);
    if (n)
        *l = n;
    else
        *oom = 1;
}

/* What every handle needs to reach the server: identity, TLS, timeouts of the connection. The
 * client certificate, which a renewal may change, is set for each request. */
static void conn_opts(ty_kclient *c, CURL *h)
{
    ty_kube_tls tls;
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->o.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    ty_kubeconfig_tls(c->kc, &tls);
    if (tls.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (tls.ca_pem) {
        struct curl_blob b = {(void *)tls.ca_pem, tls.ca_len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
}

/* The client certificate of this request's credentials; none when they have none (a handle
 * kept from a request whose credentials had one drops it). */
static void cert_opts(CURL *h, const ty_kube_cred *cred)
{
    if (cred->cert_pem && cred->key_pem) {
        struct curl_blob cb = {cred->cert_pem, cred->cert_len, CURL_BLOB_COPY};
        struct curl_blob kb = {cred->key_pem, cred->key_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cb);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
    } else {
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, NULL);
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, NULL);
    }
}

/* A handle from the pool, keeping its live connection and its options: what reaches the server
 * is set when the handle is made, what each request needs is set by perform(). */
static CURL *handle_get(ty_kclient *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool > 0)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->pool_lock);
    if (!h && (h = curl_easy_init()) != NULL) {
        conn_opts(c, h);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    }
    return h;
}

static void handle_put(ty_kclient *c, CURL *h)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool < POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (h)
        curl_easy_cleanup(h);
}

/*
 * Runs one request with its retries. verb is for the counters; watch is NULL except for
 * watches. Returns as the header says.
 */
static ty_err perform(ty_kclient *c, ty_kverb verb, const char *method, const char *path,
                      const char *accept, const char *body, const ty_kwatch_opts *watch,
                      char *last_rv, size_t rvlen, ty_kresp *resp, char *err, size_t errlen)
{
    int64_t deadline = ty_time_now_ms() + c->o.retry_deadline_ms;
    int renewed = 0, retry = 0, attempts = 0;
    ty_kstop *stop = watch ? watch->stop : NULL;
    ty_buf url;
    ty_err rc;
    const char *server = ty_kubeconfig_server(c->kc);
    int strict = strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                 strcmp(method, "PATCH") == 0;

    ty_buf_init(&url, 0);
    rc = ty_buf_printf(&url, "%s%s", server, path);
    if (rc == TY_OK && strict && !has_query(path, "fieldValidation"))
        rc = ty_buf_printf(&url, "%cfieldValidation=Strict", strchr(path, '?') ? '&' : '?');
    if (rc != TY_OK) {
        ty_buf_free(&url);
        return rc;
    }

    for (;;) {
        char curl_msg[CURL_ERROR_SIZE] = "";
        char *auth = NULL;
        ty_kube_cred cred = {0};
        struct curl_slist *hdrs = NULL;
        xfer x = {0};
        CURLcode cc;
        int64_t wait = -1;
        int oom = 0;

        rate_limit(c, stop);
        if (stop && atomic_load(&stop->stop)) {
            set_err(err, errlen, "watch %s: stopped", path);
            rc = TY_ESHUTDOWN;
            break;
        }
        rc = ty_kubeconfig_credentials(c->kc, renewed == 1, &cred, err, errlen);
        if (rc != TY_OK)
            break;
        if (renewed == 1)
            renewed = 2;
        x.c = c;
        x.resp = resp;
        x.retry_after_ms = -1;
        x.watch = watch;
        x.last_rv = last_rv;
        x.rvlen = rvlen;
        ty_buf_init(&x.body, c->o.max_body);
        ty_buf_init(&x.line, c->o.max_body);
        ty_kresp_clear(resp);
        resp->attempts = ++attempts;
        x.h = handle_get(c);
        if (!x.h) {
            ty_kube_cred_clear(&cred);
            rc = TY_ENOMEM;
            break;
        }
        CURL *h = x.h;

        add_header(&hdrs, accept ? accept : "Accept: application/json", &oom);
        if (body)
            add_header(&hdrs, strcmp(method, "PATCH") == 0
                              ? "Content-Type: application/merge-patch+json"
                              : "Content-Type: application/json", &oom);
        if (cred.token) {
            size_t alen = strlen(cred.token) + 32;
            if ((auth = malloc(alen)) != NULL) {
                snprintf(auth, alen, "Authorization: Bearer %s", cred.token);
                add_header(&hdrs, auth, &oom);
                OPENSSL_cleanse(auth, alen);
                free(auth);
            } else {
                oom = 1;
            }
        }
        if (oom) {
            curl_slist_free_all(hdrs);
            ty_kube_cred_clear(&cred);
            handle_put(c, h);
            rc = TY_ENOMEM;
            break;
        }
        /* Every option a request sets, each request sets (the handle keeps the last one's). */
        curl_easy_setopt(h, CURLOPT_URL, url.data);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_msg);
        cert_opts(h, &cred);
        if (watch) {
            /* The server ends the stream after timeoutSeconds; past a margin it is dead. */
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ((long)watch->timeout_s + 30) * 1000L);
            curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
            curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
            curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, NULL);
        } else {
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->o.timeout_ms);
            curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);
            curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
        }
        if (body || strcmp(method, "POST") == 0) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t)(body ? strlen(body) : 0));
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
        } else {
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST,
                         strcmp(method, "GET") && strcmp(method, "POST") ? method : NULL);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        if (watch)
            atomic_fetch_add(&c->watches, 1);

        cc = curl_easy_perform(h);
        ty_kube_cred_clear(&cred);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->code);
        /* Drop the pointers into this attempt's stack, headers and body; the connection and
         * the other options stay. */
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, NULL);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
        for (struct curl_slist *l = hdrs; l; l = l->next)
            OPENSSL_cleanse(l->data, strlen(l->data));
        curl_slist_free_all(hdrs);
        handle_put(c, h);
        atomic_fetch_add(&c->requests[verb][code_bucket(cc == CURLE_OK || x.streaming
                                                         ? resp->code : 0)], 1);
        if (x.body.len > 0 || x.body.data) {
            size_t blen;
            (void)ty_buf_puts(&x.body, "");
            if (ty_buf_steal(&x.body, &resp->body, &blen) == TY_OK)
                resp->body_len = blen;
        }
        ty_buf_free(&x.body);
        ty_buf_free(&x.line);

        if (x.streaming) {
            /* Events were (or could have been) delivered: no retry from here. */
            if (stop && atomic_load(&stop->stop)) {
                set_err(err, errlen, "watch %s: stopped", path);
                rc = TY_ESHUTDOWN;
            } else if (x.error_event && x.stream_err == TY_OK) {
                /* An ERROR event: its Status says what happened. */
                resp->code = x.status_code;
                set_err(err, errlen, "%s", x.stream_msg);
                rc = code_err(x.status_code, resp->reason);
                if (x.status_code == 410)
                    atomic_fetch_add(&c->watch_expired, 1);
                atomic_fetch_add(&c->watch_restarts, 1);
            } else if (x.stream_err != TY_OK) {
                set_err(err, errlen, "%s", x.stream_msg);
                rc = x.stream_err;
                atomic_fetch_add(&c->watch_restarts, 1);
            } else if (cc != CURLE_OK) {
                set_err(err, errlen, "watch %s: the stream broke after %ld events: %s", path,
                        x.events, curl_msg[0] ? curl_msg : curl_easy_strerror(cc));
                rc = TY_EIO;
                atomic_fetch_add(&c->watch_restarts, 1);
            } else {
                rc = TY_OK;
                atomic_fetch_add(&c->watch_restarts, 1);
            }
            break;
        }
        if (watch && cc == CURLE_OK && resp->code == 200) {
            atomic_fetch_add(&c->watch_restarts, 1);    /* ended before any byte came */
            rc = TY_OK;
            break;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            set_err(err, errlen, "watch %s: stopped", path);
            rc = TY_ESHUTDOWN;
            break;
        }
        if (cc == CURLE_WRITE_ERROR && x.stream_err == TY_ETOOLARGE) {
            set_err(err, errlen, "%s %s: the answer is over %zu bytes", method, path,
                    c->o.max_body);
            rc = TY_ETOOLARGE;
            break;
        }
        if (cc != CURLE_OK) {
            set_err(err, errlen, "%s %s%s: %s", method, server, path,
                    curl_msg[0] ? curl_msg : curl_easy_strerror(cc));
            rc = TY_EIO;
            resp->code = 0;
            if (retryable_curl(cc))
                wait = backoff_ms(c, retry);
        } else if (resp->code >= 200 && resp->code < 300) {
            rc = TY_OK;
            break;
        } else {
            status_err(method, path, resp, err, errlen);
            rc = code_err(resp->code, resp->reason);
            if (watch && resp->code == 410)
                atomic_fetch_add(&c->watch_expired, 1);
            if (resp->code == 401 && !renewed) {
                renewed = 1;    /* the token may have expired early: renew it once */
                atomic_fetch_add(&c->retries, 1);
                continue;
            }
            if (resp->code == 429 || (resp->code >= 500 && resp->code != 501))
                wait = x.retry_after_ms >= 0 ? x.retry_after_ms : backoff_ms(c, retry);
            if (wait > c->o.backoff_max_ms)
                wait = c->o.backoff_max_ms;
        }
        if (wait < 0 || retry >= c->o.max_retries || ty_time_now_ms() + wait > deadline)
            break;
        retry++;
        atomic_fetch_add(&c->retries, 1);
        sleep_ms(wait, stop);
    }
    ty_buf_free(&url);
    return rc;
}

static ty_kverb verb_of(const char *method)
{
    if (strcmp(method, "POST") == 0)
        return TY_KVERB_POST;
    if (strcmp(method, "PUT") == 0)
        return TY_KVERB_PUT;
    if (strcmp(method, "PATCH") == 0)
        return TY_KVERB_PATCH;
    if (strcmp(method, "DELETE") == 0)
        return TY_KVERB_DELETE;
    return TY_KVERB_GET;
}

ty_err ty_kclient_request(ty_kclient *c, const char *method, const char *path, const char *body,
                          ty_kresp *resp, char *err, size_t errlen)
{
    static const char *const ok[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    int known = 0;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        known |= strcmp(method, ok[i]) == 0;
    if (!known || path[0] != '/') {
        set_err(err, errlen, "kube client: bad method or path");
        return TY_EINVAL;
    }
    return perform(c, verb_of(method), method, path, NULL, body, NULL, NULL, 0, resp, err,
                   errlen);
}

/*
 * What a metadata-only read asks for, as client-go's metadata client does: each object as a
 * PartialObjectMetadata (meta.k8s.io/v1), its metadata alone; a list as a
 * PartialObjectMetadataList. A server that cannot sends whole objects (the plain JSON after the
 * comma), which have the same metadata.
 */
#define ACCEPT_PARTIAL "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," \
                       "application/json"
#define ACCEPT_PARTIAL_LIST                                                                   \
    "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

ty_err ty_kclient_list(ty_kclient *c, const char *path, int limit, int metadata_only,
                       ty_klist_cb cb, void *ud, char *rv, size_t rvlen, ty_kresp *resp,
                       char *err, size_t errlen)
{
    char *cont = NULL;
    ty_buf p;
    ty_err rc = TY_OK;
    if (path[0] != '/' || limit < 0)
        return TY_EINVAL;
    ty_buf_init(&p, 0);
    for (;;) {
        json_t *j, *items, *item, *meta;
        const char *next;
        char sep = strchr(path, '?') ? '&' : '?';
        size_t i;
        ty_buf_reset(&p);
        rc = ty_buf_puts(&p, path);
        if (rc == TY_OK && limit > 0) {
            rc = ty_buf_printf(&p, "%climit=%d", sep, limit);
            sep = '&';
        }
        if (rc == TY_OK && cont) {
            char *esc = curl_easy_escape(NULL, cont, 0);
            rc = esc ? ty_buf_printf(&p, "%ccontinue=%s", sep, esc) : TY_ENOMEM;
            curl_free(esc);
        }
        if (rc != TY_OK)
            break;
        rc = perform(c, TY_KVERB_LIST, "GET", p.data, metadata_only ? ACCEPT_PARTIAL_LIST : NULL,
                     NULL, NULL, NULL, 0, resp, err, errlen);
        if (rc != TY_OK)
            break;
        j = resp->body ? json_loadb(resp->body, resp->body_len, 0, NULL) : NULL;
        items = json_object_get(j, "items");
        meta = json_object_get(j, "metadata");
        if (!json_is_array(items) && !json_is_null(items)) {
            set_err(err, errlen, "GET %s: the answer is not a list", path);
            json_decref(j);
            rc = TY_EIO;
            break;
        }
        json_array_foreach(items, i, item) {
            rc = cb(ud, item);
            if (rc != TY_OK)
                break;
        }
        if (rc == TY_OK && rv && rvlen > 0) {
            const char *lrv = json_string_value(json_object_get(meta, "resourceVersion"));
            snprintf(rv, rvlen, "%s", lrv ? lrv : "");
        }
        next = json_string_value(json_object_get(meta, "continue"));
        free(cont);
        cont = rc == TY_OK && next && next[0] ? strdup(next) : NULL;
        json_decref(j);
        if (rc != TY_OK || !cont)
            break;
    }
    free(cont);
    ty_buf_free(&p);
    return rc;
}

ty_err ty_kclient_watch(ty_kclient *c, const ty_kwatch_opts *o, char *last_rv, size_t rvlen,
                        ty_kresp *resp, char *err, size_t errlen)
{
    ty_buf p;
    ty_err rc;
    int timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    if (!o->path || o->path[0] != '/' || !o->cb)
        return TY_EINVAL;
    ty_buf_init(&p, 0);
    rc = ty_buf_printf(&p, "%s%cwatch=1&allowWatchBookmarks=true&timeoutSeconds=%d", o->path,
                       strchr(o->path, '?') ? '&' : '?', timeout);
    if (rc == TY_OK && o->resource_version && o->resource_version[0]) {
        char *esc = curl_easy_escape(NULL, o->resource_version, 0);
        rc = esc ? ty_buf_printf(&p, "&resourceVersion=%s", esc) : TY_ENOMEM;
        curl_free(esc);
    }
    /* Inside, the pick is the event's: {"type": true, "object": <the object's pick>}. */
    json_t *evpick = NULL;
    if (rc == TY_OK && o->pick &&
        !(evpick = json_pack("{s:b, s:O}", "type", 1, "object", (json_t *)o->pick)))
        rc = TY_ENOMEM;
    if (rc == TY_OK) {
        ty_kwatch_opts wo = *o;
        wo.timeout_s = timeout;
        wo.pick = evpick;
        rc = perform(c, TY_KVERB_WATCH, "GET", p.data, o->metadata_only ? ACCEPT_PARTIAL : NULL,
                     NULL, &wo, last_rv, rvlen, resp, err, errlen);
    }
    json_decref(evpick);
    ty_buf_free(&p);
    return rc;
}

/* ---- streamed reads ---------------------------------------------------------------------------*/

struct ty_kstream {
    ty_kclient *c;
    CURLM *m;
    CURL *h;
    struct curl_slist *hdrs;
    char *url;
    char curl_msg[CURL_ERROR_SIZE];
    long code;                      /* the answer's status, once its headers came */
    int headers_done;
    char *buf;                      /* bytes of a 2xx body the reader has not taken */
    size_t len, cap;
    ty_buf err_body;                /* the body of an error answer (its Status) */
    int paused;                     /* the write callback paused the transfer: buf was full */
    int done;                       /* the transfer ended */
    CURLcode cc;
};

static size_t stream_header(char *p, size_t size, size_t n, void *ud)
{
    ty_kstream *s = ud;
    size_t len = size * n;
    if (len > 5 && strncasecmp(p, "HTTP/", 5) == 0)
        s->headers_done = 0;        /* a new answer (after a 100 Continue) */
    else if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->code);
        s->headers_done = s->code >= 200;
    }
    return len;
}

static size_t stream_body(char *p, size_t size, size_t n, void *ud)
{
    ty_kstream *s = ud;
    size_t len = size * n;
    if (s->code < 200 || s->code >= 300)
        return ty_buf_append(&s->err_body, p, len) == TY_OK ? len : 0;
    if (len > s->cap - s->len) {
        /* Full: libcurl keeps this block and stops reading the socket until the reader has
         * taken some (curl_easy_pause). The server's side of the connection then waits too. */
        s->paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    memcpy(s->buf + s->len, p, len);
    s->len += len;
    return len;
}

/* Moves the transfer on, waiting up to wait_ms for the socket; notes its end. */
static void stream_step(ty_kstream *s, int wait_ms)
{
    int running = 0, left;
    CURLMsg *msg;
    if (s->done)
        return;
    if (wait_ms > 0)
        curl_multi_poll(s->m, NULL, 0, wait_ms, NULL);
    curl_multi_perform(s->m, &running);
    while ((msg = curl_multi_info_read(s->m, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE) {
            s->done = 1;
            s->cc = msg->data.result;
        }
}

ty_err ty_kstream_open(ty_kclient *c, const char *path, size_t max_buffer, ty_kstream **out,
                       ty_kresp *resp, char *err, size_t errlen)
{
    ty_kube_cred cred = {0};
    ty_kstream *s = NULL;
    ty_err rc = TY_OK;
    int oom = 0;
    *out = NULL;
    ty_kresp_clear(resp);
    if (!path || path[0] != '/' || max_buffer < 2 * CURL_MAX_WRITE_SIZE) {
        set_err(err, errlen, "kube client: a stream needs a path and a buffer of at least %d "
                "bytes", 2 * CURL_MAX_WRITE_SIZE);
        return TY_EINVAL;
    }
    rate_limit(c, NULL);
    rc = ty_kubeconfig_credentials(c->kc, 0, &cred, err, errlen);
    if (rc != TY_OK)
        return rc;
    const char *server = ty_kubeconfig_server(c->kc);
    size_t ulen = strlen(server) + strlen(path) + 1;
    s = calloc(1, sizeof(*s));
    if (s) {
        s->c = c;
        s->cap = max_buffer;
        s->buf = malloc(max_buffer);
        s->url = malloc(ulen);
        s->m = curl_multi_init();
        s->h = curl_easy_init();
        ty_buf_init(&s->err_body, 64 * 1024);
    }
    if (!s || !s->buf || !s->url || !s->m || !s->h) {
        rc = TY_ENOMEM;
        goto out;
    }
    snprintf(s->url, ulen, "%s%s", server, path);
    add_header(&s->hdrs, "Accept: */*", &oom);
    if (cred.token) {
        size_t alen = strlen(cred.token) + 32;
        char *auth = malloc(alen);
        if (auth) {
            snprintf(auth, alen, "Authorization: Bearer %s", cred.token);
            add_header(&s->hdrs, auth, &oom);
            OPENSSL_cleanse(auth, alen);
            free(auth);
        } else {
            oom = 1;
        }
    }
    if (oom) {
        rc = TY_ENOMEM;
        goto out;
    }
    /* Its own handle, so its own connection: a followed log holds it for as long as the
     * reader reads, and closing the stream closes it. No overall timeout: a quiet log is not a
     * dead one (TCP keep-alive finds a dead peer). */
    curl_easy_setopt(s->h, CURLOPT_URL, s->url);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, s->hdrs);
    conn_opts(c, s->h);
    cert_opts(s->h, &cred);
    curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->curl_msg);
    curl_easy_setopt(s->h, CURLOPT_HEADERFUNCTION, stream_header);
    curl_easy_setopt(s->h, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, stream_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    if (curl_multi_add_handle(s->m, s->h) != CURLM_OK) {
        rc = TY_ENOMEM;
        goto out;
    }
    /* Until the answer's headers (an error: until its Status body), within the timeout of a
     * request. */
    int64_t until = ty_time_now_ms() + c->o.timeout_ms;
    while (!s->done && !s->headers_done && ty_time_now_ms() < until)
        stream_step(s, 50);
    if (s->headers_done && s->code >= 300)
        while (!s->done && ty_time_now_ms() < until)
            stream_step(s, 50);
    resp->code = s->headers_done || s->done ? s->code : 0;
    resp->attempts = 1;
    atomic_fetch_add(&c->requests[TY_KVERB_GET][code_bucket(resp->code)], 1);
    if (resp->code >= 200 && resp->code < 300) {
        *out = s;
        s = NULL;
    } else if (resp->code != 0) {
        (void)ty_buf_puts(&s->err_body, "");
        resp->body = s->err_body.data;
        resp->body_len = s->err_body.len;
        s->err_body.data = NULL;
        s->err_body.len = 0;
        status_err("GET", path, resp, err, errlen);
        rc = code_err(resp->code, resp->reason);
    } else {
        set_err(err, errlen, "GET %s%s: %s", server, path,
                s->done && s->curl_msg[0] ? s->curl_msg
                : s->done                 ? curl_easy_strerror(s->cc)
                                          : "no answer in time");
        rc = TY_EIO;
    }
out:
    ty_kube_cred_clear(&cred);
    ty_kstream_close(s);
    return rc;
}

long ty_kstream_read(ty_kstream *s, char *buf, size_t max, int wait_ms)
{
    int64_t until = ty_time_now_ms() + (wait_ms > 0 ? wait_ms : 0);
    if (!s || !buf || max == 0)
        return -1;
    for (;;) {
        if (s->len > 0) {
            size_t n = s->len < max ? s->len : max;
            memcpy(buf, s->buf, n);
            memmove(s->buf, s->buf + n, s->len - n);
            s->len -= n;
            if (s->paused && s->cap - s->len >= CURL_MAX_WRITE_SIZE) {
                s->paused = 0;
                curl_easy_pause(s->h, CURLPAUSE_CONT); /* may call stream_body at once */
            }
            return (long)n;
        }
        if (s->done)
            return -1;
        int64_t left = until - ty_time_now_ms();
        stream_step(s, left > 50 ? 50 : left > 0 ? (int)left : 0);
        if (s->len == 0 && !s->done && left <= 0)
            return 0;
    }
}

int ty_kstream_ended(const ty_kstream *s)
{
    if (!s->done || s->len > 0)
        return 0;
    return s->cc == CURLE_OK ? 1 : -1;
}

void ty_kstream_close(ty_kstream *s)
{
    if (!s)
        return;
    if (s->m && s->h)
        curl_multi_remove_handle(s->m, s->h);
    if (s->h)
        curl_easy_cleanup(s->h);
    if (s->m)
        curl_multi_cleanup(s->m);
    if (s->hdrs) {
        for (struct curl_slist *l = s->hdrs; l; l = l->next)
            OPENSSL_cleanse(l->data, strlen(l->data));
        curl_slist_free_all(s->hdrs);
    }
    ty_buf_free(&s->err_body);
    free(s->buf);
    free(s->url);
    free(s);
}

/* ---- transfers the caller drives --------------------------------------------------------------*/

int ty_kclient_try_token(ty_kclient *c, int64_t *wait_ms)
{
    int ok = 1;
    if (wait_ms)
        *wait_ms = 0;
    if (c->o.qps <= 0)
        return 1;
    pthread_mutex_lock(&c->rl_lock);
    uint64_t now = ty_time_mono_ns();
    c->tokens += (double)(now - c->rl_last_ns) / 1e9 * c->o.qps;
    if (c->tokens > c->o.burst)
        c->tokens = c->o.burst;
    c->rl_last_ns = now;
    if (c->tokens >= 1) {
        c->tokens -= 1;
    } else {
        ok = 0;
        if (wait_ms)
            *wait_ms = (int64_t)((1 - c->tokens) / c->o.qps * 1000) + 1;
    }
    pthread_mutex_unlock(&c->rl_lock);
    if (!ok)
        atomic_fetch_add(&c->throttled, 1);
    return ok;
}

ty_err ty_kclient_easy_get(ty_kclient *c, CURL *h, const char *path, struct curl_slist **hdrs,
                           char *curl_msg, char *err, size_t errlen)
{
    ty_kube_cred cred = {0};
    ty_buf url;
    int oom = 0;
    *hdrs = NULL;
    ty_err rc = ty_kubeconfig_credentials(c->kc, 0, &cred, err, errlen);
    if (rc != TY_OK)
        return rc;
    ty_buf_init(&url, 0);
    if (ty_buf_printf(&url, "%s%s", ty_kubeconfig_server(c->kc), path) != TY_OK)
        oom = 1;
    add_header(hdrs, "Accept: */*", &oom);
    if (cred.token) {
        size_t alen = strlen(cred.token) + 32;
        char *auth = malloc(alen);
        if (auth) {
            snprintf(auth, alen, "Authorization: Bearer %s", cred.token);
            add_header(hdrs, auth, &oom);
            OPENSSL_cleanse(auth, alen);
            free(auth);
        } else {
            oom = 1;
        }
    }
    if (!oom) {
        curl_easy_setopt(h, CURLOPT_URL, url.data); /* libcurl copies it */
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
        conn_opts(c, h);
        cert_opts(h, &cred);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_msg);
    }
    ty_buf_free(&url);
    ty_kube_cred_clear(&cred);
    if (oom) {
        ty_kclient_easy_free(*hdrs);
        *hdrs = NULL;
        return TY_ENOMEM;
    }
    return TY_OK;
}

void ty_kclient_easy_free(struct curl_slist *hdrs)
{
    for (struct curl_slist *l = hdrs; l; l = l->next)
        OPENSSL_cleanse(l->data, strlen(l->data));
    curl_slist_free_all(hdrs);
}

void ty_kclient_count_get(ty_kclient *c, long code)
{
    atomic_fetch_add(&c->requests[TY_KVERB_GET][code_bucket(code)], 1);
}

/* ---- counters ---------------------------------------------------------------------------------*/

void ty_kclient_stats_get(ty_kclient *c, ty_kclient_stats *out)
{
    for (int v = 0; v < TY_KVERB_COUNT; v++)
        for (int k = 0; k < TY_KCODE_COUNT; k++)
            out->requests[v][k] = atomic_load(&c->requests[v][k]);
    out->retries = atomic_load(&c->retries);
    out->throttled = atomic_load(&c->throttled);
    out->watches = atomic_load(&c->watches);
    out->watch_restarts = atomic_load(&c->watch_restarts);
    out->watch_expired = atomic_load(&c->watch_expired);
}

const char *ty_kverb_name(ty_kverb v)
{
    return (unsigned)v < TY_KVERB_COUNT ? verbs[v] : "OTHER";
}

int ty_kcode_at(int i)
{
    return i >= 0 && i < TY_KCODE_COUNT ? codes[i] : -1;
}

ty_err ty_kclient_stats_render(ty_kclient *c, ty_buf *out)
{
    ty_kclient_stats s;
    ty_err rc;
    ty_kclient_stats_get(c, &s);
    rc = ty_buf_puts(out, "# HELP trainyard_kube_requests_total Requests to the Kubernetes API "
                     "server, by verb and HTTP code (0: no answer).\n"
                     "# TYPE trainyard_kube_requests_total counter\n");
    for (int v = 0; rc == TY_OK && v < TY_KVERB_COUNT; v++)
        for (int k = 0; rc == TY_OK && k < TY_KCODE_COUNT; k++) {
            if (!s.requests[v][k])
                continue;
            if (codes[k] < 0)
                rc = ty_buf_printf(out, "trainyard_kube_requests_total{verb=\"%s\",code=\"other\"}"
                                   " %llu\n", verbs[v], (unsigned long long)s.requests[v][k]);
            else
                rc = ty_buf_printf(out, "trainyard_kube_requests_total{verb=\"%s\",code=\"%d\"}"
                                   " %llu\n", verbs[v], codes[k],
                                   (unsigned long long)s.requests[v][k]);
        }
    const struct { const char *name, *help; uint64_t v; } one[] = {
        {"trainyard_kube_retries_total", "Kubernetes API attempts after the first.", s.retries},
        {"trainyard_kube_throttled_total", "Kubernetes API attempts held by the rate limiter.",
         s.throttled},
        {"trainyard_kube_watches_total", "Kubernetes watch streams opened.", s.watches},
        {"trainyard_kube_watch_restarts_total", "Kubernetes watch streams that ended.",
         s.watch_restarts},
        {"trainyard_kube_watch_expired_total", "Kubernetes watches whose resourceVersion was too "
         "old (410).", s.watch_expired},
    };
    for (size_t i = 0; rc == TY_OK && i < sizeof(one) / sizeof(one[0]); i++)
        rc = ty_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", one[i].name,
                           one[i].help, one[i].name, one[i].name, (unsigned long long)one[i].v);
    return rc;
}
