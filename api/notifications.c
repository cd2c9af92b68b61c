/*
 * notifications.c - notifications out: subscriptions (/v1/notifications, admin) and the
 * deliveries of each (GET /v1/notifications/{id}/deliveries).
 *
 * A subscription is an http(s) URL, the job events it wants (job.succeeded, job.failed,
 * job.cancelled, or job.finished for all three), a secret that signs every delivery, and
 * optionally a queue and labels a job must have. The store queues a delivery when a job ends
 * (store.h, "notifications"); server/notify.c sends it. The secret is never returned.
 *
 * The URL is an http(s) URL an admin gives, and its host must be public: the server will
 * POST to it from inside its own network, so a URL whose host is, or resolves to, a loopback,
 * private, link-local (the cloud metadata service), ... address (common/ty_addr.h) is refused
 * with a 422, unless the server runs with --notify-allow-private (a receiver on its own
 * machine or network). Every address the name resolves to must be public. DNS may answer
 * otherwise later: server/notify.c checks again the address each delivery connects to.
 * Registering stays an admin's act; redirects are never followed.
 */
#include "api/api_int.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/ty_addr.h"
#include "common/ty_time.h"

#define MIN_SECRET 8
#define MAX_SECRET 1024
#define MAX_URL 2048
#define MAX_EVENTS 4
#define DEFAULT_LIMIT 100

static const struct {
    const char *name;
    unsigned bits;
} events[] = {
    {"job.succeeded", STORE_NOTIFY_SUCCEEDED},
    {"job.failed", STORE_NOTIFY_FAILED},
    {"job.cancelled", STORE_NOTIFY_CANCELLED},
    {"job.finished", STORE_NOTIFY_ALL},
};
#define NEVENTS (sizeof events / sizeof events[0])

/* The event name of a terminal state ("job.succeeded", ...). */
static const char *event_of(job_state s)
{
    return s == JOB_SUCCEEDED ? "job.succeeded" : s == JOB_FAILED ? "job.failed" : "job.cancelled";
}

/*
 * An http:// or https:// URL with a host, no more than MAX_URL bytes, without spaces or
 * control characters. libcurl parses it for real when it is used; this refuses at
 * registration what could never be delivered.
 */
static int is_http_url(const char *u)
{
    size_t n = strlen(u), skip;
    if (n > MAX_URL)
        return 0;
    if (!strncasecmp(u, "http://", 7))
        skip = 7;
    else if (!strncasecmp(u, "https://", 8))
        skip = 8;
    else
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)u[i] <= 0x20 || u[i] == 0x7f)
            return 0;
    const char *host = u + skip;
    return *host && *host != '/' && *host != '?' && *host != '#' && *host != ':' && *host != '@';
}

/*
 * The host of URL u (already is_http_url()) into host: what follows "scheme://" and any
 * "userinfo@", up to the port, path, query or fragment; an IPv6 literal without its brackets.
 * 0 when there is one that fits, else -1. A percent sign in the host is refused outright:
 * libcurl would decode it, and the name checked must be the name connected to.
 */
static int url_host(const char *u, char *host, size_t len)
{
    const char *a = strstr(u, "://") + 3;
    size_t n = strcspn(a, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < n; i++)
        if (a[i] == '@')
            at = a + i;
    if (at) {
        n -= (size_t)(at + 1 - a);
        a = at + 1;
    }
    const char *end;
    if (*a == '[') {
        end = memchr(a, ']', n);
        if (!end || (end + 1 < a + n && end[1] != ':'))
            return -1;
        a++;
    } else {
        end = memchr(a, ':', n);
        if (!end)
            end = a + n;
    }
    size_t hl = (size_t)(end - a);
    if (hl == 0 || hl >= len || memchr(a, '%', hl))
        return -1;
    memcpy(host, a, hl);
    host[hl] = '\0';
    return 0;
}

/*
 * Whether the URL's host is, or resolves to, public addresses only. TY_OK when it does; else
 * TY_EINVAL with the reason in why, or TY_EAGAIN when DNS could not answer now.
 */
static ty_err check_url_host(const char *url, char *why, size_t len)
{
    char host[256], text[64];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (url_host(url, host, sizeof host) != 0) {
        snprintf(why, len, "must have a host of at most 255 bytes, without percent-encoding");
        return TY_EINVAL;
    }
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc == EAI_AGAIN) {
        snprintf(why, len, "the host %s cannot be resolved now: %s", host, gai_strerror(rc));
        return TY_EAGAIN;
    }
    if (rc != 0) {
        snprintf(why, len, "the host %s does not resolve: %s", host, gai_strerror(rc));
        return TY_EINVAL;
    }
    ty_err e = TY_OK;
    for (const struct addrinfo *x = ai; x && !e; x = x->ai_next) {
        ty_addr_class c = ty_addr_classify(x->ai_addr);
        if (c == TY_ADDR_PUBLIC)
            continue;
        ty_addr_format(x->ai_addr, text, sizeof text);
        if (!strcmp(text, host))
            snprintf(why, len, "address %s is not public (%s): notifications go to public "
                     "addresses only", text, ty_addr_class_name(c));
        else
            snprintf(why, len, "the host %s resolves to %s, which is not public (%s): "
                     "notifications go to public addresses only", host, text,
                     ty_addr_class_name(c));
        e = TY_EINVAL;
    }
    freeaddrinfo(ai);
    return e;
}

/* $.events: a list of 1..MAX_EVENTS known names; their bits into *mask. */
static ty_err check_events(const json_t *v, unsigned *mask, spec_errors *errs)
{
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > MAX_EVENTS)
        return spec_errors_add(errs, "$.events", "must be a list of 1 to 4 event names");
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        const char *s = json_string_value(x);
        size_t k = 0;
        while (s && k < NEVENTS && strcmp(s, events[k].name))
            k++;
        if (!s || k == NEVENTS) {
            char path[32];
            snprintf(path, sizeof path, "$.events[%zu]", i);
            ty_err e = spec_errors_add(errs, path,
                                       "must be one of job.succeeded, job.failed, job.cancelled, "
                                       "job.finished");
            if (e)
                return e;
            continue;
        }
        *mask |= events[k].bits;
    }
    return TY_OK;
}

/* $.labels: an object of label keys to values, as a job's labels are written. */
static ty_err check_labels(const json_t *v, spec_errors *errs)
{
    if (!json_is_object(v) || json_object_size(v) > SPEC_MAX_LABELS)
        return spec_errors_add(errs, "$.labels", "must be an object of at most 64 labels");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x)
    {
        char path[320];
        snprintf(path, sizeof path, "$.labels.%.256s", k);
        ty_err e = TY_OK;
        if (!spec_is_label_key(k, strlen(k)))
            e = spec_errors_add(errs, path, "not a valid label key");
        else if (!json_is_string(x) ||
                 !spec_is_label_value(json_string_value(x), json_string_length(x)))
            e = spec_errors_add(errs, path, "must be a valid label value (a string)");
        if (e)
            return e;
    }
    return TY_OK;
}

static json_t *sub_json(const store_notify_sub *x)
{
    char created[32];
    json_t *ev = json_array(), *o = NULL;
    if (!ev)
        return NULL;
    for (size_t k = 0; k + 1 < NEVENTS; k++) /* the three single events; not job.finished */
        if ((x->events & events[k].bits) && json_array_append_new(ev, json_string(events[k].name)))
            goto fail;
    ty_time_format_rfc3339(x->created_at_ms, created, sizeof created);
    if (!(o = json_pack("{s:s, s:s, s:o, s:s}", "name", x->name, "url", x->url, "events", ev,
                        "created_at", created)))
        return NULL;
    if (x->queue && json_object_set_new(o, "queue", json_string(x->queue)))
        goto fail_o;
    if (x->labels_json && json_object_set_new(o, "labels", json_loads(x->labels_json, 0, NULL)))
        goto fail_o;
    return o;
fail:
    json_decref(ev);
    return NULL;
fail_o:
    json_decref(o);
    return NULL;
}

void api_notifications_create(const api_req *req, api_resp *resp)
{
    json_t *body = NULL;
    spec_errors errs = {0};
    store_notify_sub x = {0};
    store_notify_sub *got = NULL;
    ty_err e;

    if (!api_need_json_body(req, resp, &body))
        goto out;
    if ((e = spec_errors_init(&errs)) != TY_OK)
        goto fail;
    if (!json_is_object(body)) {
        spec_errors_add(&errs, "$", "must be an object");
        goto invalid;
    }
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        static const char *const known[] = {"name", "url", "events", "secret", "queue", "labels"};
        size_t i = 0;
        while (i < 6 && strcmp(k, known[i]))
            i++;
        if (i == 6) {
            char path[320];
            snprintf(path, sizeof path, "$.%.256s", k);
            if ((e = spec_errors_add(&errs, path, "unknown field")) != TY_OK)
                goto fail;
        }
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    const char *url = json_string_value(json_object_get(body, "url"));
    json_t *secret = json_object_get(body, "secret");
    json_t *queue = json_object_get(body, "queue");
    json_t *labels = json_object_get(body, "labels");
    e = TY_OK;
    if (!name || strlen(name) > SPEC_MAX_NAME || !spec_is_dns_label(name, strlen(name)))
        e = spec_errors_add(&errs, "$.name",
                            "must be a DNS label: 1 to 63 of [a-z0-9-], starting and ending "
                            "with a letter or digit");
    if (!e && (!url || !is_http_url(url)))
        e = spec_errors_add(&errs, "$.url",
                            "must be an http:// or https:// URL with a host, at most 2048 bytes");
    else if (!e && !req->ctx->notify_allow_private) {
        char why[512];
        ty_err he = check_url_host(url, why, sizeof why);
        if (he == TY_EAGAIN) {
            api_reply_error(resp, TY_EAGAIN, why);
            goto out;
        }
        if (he)
            e = spec_errors_add(&errs, "$.url", why);
    }
    if (!e)
        e = check_events(json_object_get(body, "events"), &x.events, &errs);
    if (!e && (!json_is_string(secret) || json_string_length(secret) < MIN_SECRET ||
               json_string_length(secret) > MAX_SECRET))
        e = spec_errors_add(&errs, "$.secret", "must be a string of 8 to 1024 bytes");
    if (!e && queue && !json_is_null(queue) &&
        (!json_is_string(queue) ||
         !spec_is_dns_label(json_string_value(queue), json_string_length(queue))))
        e = spec_errors_add(&errs, "$.queue", "must be a queue name (a DNS label)");
    if (!e && labels && !json_is_null(labels))
        e = check_labels(labels, &errs);
    if (e == TY_ENOMEM)
        goto fail;
    if (errs.count > 0)
        goto invalid;

    x.name = (char *)name;
    x.url = (char *)url;
    x.queue = json_is_string(queue) ? (char *)json_string_value(queue) : NULL;
    if (json_is_object(labels) && json_object_size(labels) > 0 &&
        !(x.labels_json = json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS))) {
        e = TY_ENOMEM;
        goto fail;
    }
    x.secret = (unsigned char *)json_string_value(secret);
    x.secret_len = json_string_length(secret);
    e = store_notify_create(req->ctx->store, &x);
    if (e == TY_EEXISTS) {
        api_reply_problem(resp, 409, "notification-exists", NULL,
                          "a notification already has this name", NULL);
        goto out;
    }
    if (e || (e = store_notify_get(req->ctx->store, name, &got)) != TY_OK)
        goto fail;
    json_t *view = sub_json(got);
    if (!view) {
        e = TY_ENOMEM;
        goto fail;
    }
    char location[96];
    snprintf(location, sizeof location, "/v1/notifications/%s", name);
    api_reply_json(resp, 201, view);
    api_resp_header(resp, "Location", location);
    goto out;

invalid:
    api_reply_invalid(resp, 422, "invalid-notification", &errs);
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    free(x.labels_json);
    store_notify_subs_free(got, 1);
    spec_errors_free(&errs);
    json_decref(body);
}

void api_notifications_list(const api_req *req, api_resp *resp)
{
    store_notify_sub *subs = NULL;
    size_t n = 0;
    ty_err e = store_notify_list(req->ctx->store, &subs, &n);
    json_t *list = e ? NULL : json_array();
    for (size_t i = 0; list && i < n; i++)
        if (json_array_append_new(list, sub_json(&subs[i]))) {
            json_decref(list);
            list = NULL;
        }
    if (!e && !list)
        e = TY_ENOMEM;
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json(resp, 200, json_pack("{s:o}", "notifications", list));
    store_notify_subs_free(subs, n);
}

static void reply_not_found(api_resp *resp)
{
    api_reply_problem(resp, 404, "notification-not-found", NULL, "no notification has this name",
                      NULL);
}

void api_notifications_delete(const api_req *req, api_resp *resp)
{
    ty_err e = store_notify_delete(req->ctx->store, req->id);
    if (e == TY_ENOTFOUND)
        reply_not_found(resp);
    else if (e)
        api_reply_error(resp, e, NULL);
    else
        resp->status = 204;
}

/* Sets key to the RFC 3339 time of ms when ms is not 0. */
static int set_time(json_t *o, const char *key, int64_t ms)
{
    char t[32];
    if (!ms)
        return 0;
    ty_time_format_rfc3339(ms, t, sizeof t);
    return json_object_set_new(o, key, json_string(t));
}

static json_t *delivery_json(const store_delivery *d)
{
    static const char *const states[] = {"pending", "delivered", "failed"};
    json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:i}", "id", (json_int_t)d->id, "event",
                          event_of(d->event), "job_id", d->job_id, "state",
                          states[d->state <= STORE_DELIVERY_FAILED ? d->state : 0], "attempts",
                          d->attempts);
    if (!o || set_time(o, "created_at", d->created_at_ms) ||
        (d->state == STORE_DELIVERY_PENDING && set_time(o, "next_attempt_at", d->next_at_ms)) ||
        set_time(o, "last_attempt_at", d->last_at_ms) ||
        set_time(o, "finished_at", d->done_at_ms) ||
        (d->last_code && json_object_set_new(o, "last_status", json_integer(d->last_code))) ||
        (d->last_error && d->last_error[0] &&
         json_object_set_new(o, "last_error", json_string(d->last_error)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void api_notifications_deliveries(const api_req *req, api_resp *resp)
{
    store_delivery *d = NULL;
    size_t n = 0;
    long limit = DEFAULT_LIMIT;
    for (size_t i = 0; i < req->nquery; i++) {
        char *end = NULL;
        if (strcmp(req->query[i].key, "limit") != 0) {
            api_reply_problem(resp, 400, "invalid-query", NULL, "the only parameter is limit",
                              NULL);
            return;
        }
        limit = strtol(req->query[i].value, &end, 10);
        if (!*req->query[i].value || *end || limit < 1 || limit > 1000) {
            api_reply_problem(resp, 400, "invalid-query", NULL,
                              "limit must be an integer from 1 to 1000", NULL);
            return;
        }
    }
    ty_err e = store_notify_deliveries(req->ctx->store, req->id, (int)limit, &d, &n);
    if (e == TY_ENOTFOUND) {
        reply_not_found(resp);
        return;
    }
    json_t *list = e ? NULL : json_array();
    for (size_t i = 0; list && i < n; i++)
        if (json_array_append_new(list, delivery_json(&d[i]))) {
            json_decref(list);
            list = NULL;
        }
    if (!e && !list)
        e = TY_ENOMEM;
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json(resp, 200, json_pack("{s:o}", "deliveries", list));
    store_deliveries_free(d, n);
}
