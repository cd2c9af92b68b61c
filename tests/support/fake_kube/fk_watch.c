/*
 * fk_watch.c - watches of the fake apiserver (?watch=1 on any list).
 *
 * A watch answers 200 with a chunked body of {"type","object"} JSON objects,
 * each followed by "\n" (09). It replays the events after its
 * resourceVersion from the store's window, or, without one, starts with the
 * current objects as ADDED. From an rv older than the window it sends one
 * ERROR event holding a 410 Expired Status and ends (10). With
 * allowWatchBookmarks it sends BOOKMARKs, empty objects of the watched kind
 * carrying the current rv, about every minute and about 2 s before
 * timeoutSeconds; at the deadline the body just ends. Every connection has
 * its own thread (MHD's thread per connection), so the reader blocks on the
 * store's condition variable.
 *
 * pods/log?follow=true streams the same way: the log text a test stores
 * (and appends to) through /fake/, until the pod ends or goes.
 */
#include "tests/support/fake_kube/fk.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct watch {
    fk_store *st;
    int res;
    char ns[256];
    fk_sel *sel;
    char *fsel;
    uint64_t cursor; /* the last rv looked at */
    json_t *initial; /* synthetic ADDED objects still to send */
    size_t initial_next;
    time_t deadline, next_bookmark;
    int bookmarks;
    int metadata_only; /* each object as a PartialObjectMetadata: its metadata alone */
    unsigned drop_gen;
    int expired; /* send one ERROR event, then end */
    int done;
    char *line;
    size_t len, off;
} watch;

static json_t *bookmark(int res, uint64_t rv)
{
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)rv);
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:n}}", "kind", fk_resources[res].kind, "apiVersion",
                          fk_resources[res].api_version, "metadata", "resourceVersion", s,
                          "creationTimestamp");
    if (res == FK_PODS)
        json_object_set_new(o, "spec", json_pack("{s:n}", "containers"));
    else if (res == FK_JOBS)
        json_object_set_new(o, "spec",
                            json_pack("{s:{s:{s:n}, s:{s:n}}}", "template", "metadata",
                                      "creationTimestamp", "spec", "containers"));
    else
        json_object_set_new(o, "spec", json_object());
    json_object_set_new(o, "status", json_object());
    return o;
}

static void set_line(watch *w, const char *type, json_t *obj)
{
    /* An ERROR's Status stays whole. */
    json_t *o = w->metadata_only && strcmp(type, "ERROR") ? fk_partial_of(obj) : json_incref(obj);
    json_t *ev = json_pack("{s:s, s:o}", "type", type, "object", o);
    char *text = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    free(w->line);
    size_t n = text ? strlen(text) : 0;
    w->line = malloc(n + 2);
    if (w->line) {
        memcpy(w->line, text, n);
        w->line[n] = '\n';
        w->len = n + 1;
    } else {
        w->len = 0;
    }
    w->off = 0;
    free(text);
}

/* Finds the next event for w; called with the lock held. 1 when a line is set. */
static int next_line(watch *w)
{
    if (w->expired) {
        char msg[128];
        snprintf(msg, sizeof msg, "too old resource version: %llu (%llu)",
                 (unsigned long long)w->cursor, (unsigned long long)w->st->window_rv + 1);
        json_t *s = fk_status(410, "Expired", msg, NULL);
        set_line(w, "ERROR", s);
        json_decref(s);
        w->done = 1;
        return 1;
    }
    if (w->initial && w->initial_next < json_array_size(w->initial)) {
        set_line(w, "ADDED", json_array_get(w->initial, w->initial_next++));
        return 1;
    }
    if (w->cursor < w->st->window_rv) {
        w->expired = 1; /* fell behind the window while watching */
        return next_line(w);
    }
    for (size_t i = 0; i < w->st->ring_len; i++) {
        fk_event *e = &w->st->ring[(w->st->ring_head + i) % w->st->ring_cap];
        if (e->rv <= w->cursor)
            continue;
        w->cursor = e->rv;
        if (e->res != w->res)
            continue;
        /* As the apiserver's watch cache filters a change: by the object before and after
         * it. One that leaves the selectors (a pod that ends, under
         * status.phase!=Succeeded) comes as DELETED with its new state; one that enters them
         * as ADDED. */
        int now = fk_selects(w->res, w->ns, e->obj, w->sel, w->fsel);
        int before = e->prev && fk_selects(w->res, w->ns, e->prev, w->sel, w->fsel);
        const char *type = e->type;
        if (e->prev && now != before)
            type = now ? "ADDED" : "DELETED";
        if (now || before) {
            set_line(w, type, e->obj);
            return 1;
        }
    }
    time_t now = time(NULL);
    if (w->bookmarks && now >= w->next_bookmark && now < w->deadline) {
        json_t *b = bookmark(w->res, w->st->rv);
        set_line(w, "BOOKMARK", b);
        json_decref(b);
        time_t next = w->next_bookmark + 60;
        w->next_bookmark = next < w->deadline - 2 ? next : w->deadline - 1;
        if (w->next_bookmark <= now)
            w->next_bookmark = w->deadline + 1;
        return 1;
    }
    return 0;
}

static ssize_t watch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    watch *w = cls;
    for (;;) {
        if (w->off < w->len) {
            size_t n = w->len - w->off < max ? w->len - w->off : max;
            memcpy(buf, w->line + w->off, n);
            w->off += n;
            return (ssize_t)n;
        }
        if (w->done || w->st->stopping)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&w->st->mu);
        while (!w->st->stopping) {
            if (w->drop_gen != w->st->drop_gen || time(NULL) >= w->deadline) {
                w->done = 1;
                break;
            }
            if (next_line(w))
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&w->st->cv, &w->st->mu, &ts);
        }
        pthread_mutex_unlock(&w->st->mu);
        if (w->done && w->off >= w->len)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void watch_free(void *cls)
{
    watch *w = cls;
    fk_sel_free(w->sel);
    free(w->fsel);
    json_decref(w->initial);
    free(w->line);
    free(w);
}

struct MHD_Response *fk_watch_response(fk_store *st, const fk_watch_req *req, char *err,
                                       size_t errlen)
{
    watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->st = st;
    w->res = req->res;
    snprintf(w->ns, sizeof w->ns, "%s", req->ns ? req->ns : "");
    if (fk_sel_parse(req->label_selector, &w->sel, err, errlen) != 0) {
        free(w);
        return NULL;
    }
    const char *fs = req->field_selector;
    if (fs && *fs && fk_fsel_check(w->res, fs, err, errlen) != 0) {
        fk_sel_free(w->sel);
        free(w);
        return NULL;
    }
    w->fsel = fs && *fs ? strdup(fs) : NULL;
    long timeout = req->timeout_seconds ? strtol(req->timeout_seconds, NULL, 10) : 1800;
    time_t now = time(NULL);
    w->deadline = now + (timeout > 0 ? timeout : 1800);
    w->bookmarks = req->bookmarks;
    w->metadata_only = req->metadata_only;
    /* About every minute, and about 2 s before the deadline (09). */
    w->next_bookmark = now + 60 < w->deadline - 2 ? now + 60 : w->deadline - 2;
    pthread_mutex_lock(&st->mu);
    w->drop_gen = st->drop_gen;
    unsigned long long from = req->resource_version ? strtoull(req->resource_version, NULL, 10) : 0;
    if (from == 0) {
        /* No resourceVersion: the current state as ADDED events, then changes. */
        json_t *all = fk_list(st, w->res, w->ns[0] ? w->ns : NULL);
        w->initial = json_array();
        size_t i;
        json_t *o;
        json_array_foreach(all, i, o)
        {
            if (fk_selects(w->res, w->ns, o, w->sel, w->fsel))
                json_array_append(w->initial, o);
        }
        json_decref(all);
        w->cursor = st->rv;
    } else {
        w->cursor = from;
        w->expired = from < st->window_rv;
    }
    pthread_mutex_unlock(&st->mu);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, watch_read, w, watch_free);
    if (!r) {
        watch_free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-cache, private");
    return r;
}

/* ---- pods/log?follow=true --------------------------------------------- */

typedef struct follow {
    fk_store *st;
    char key[600]; /* "ns/name" */
    fk_log_opts o;
    size_t sent;   /* bytes of the stored log handled so far */
    int at_start;  /* sent is at a line's start */
    size_t given;  /* bytes of the answer so far, for limitBytes */
    char *chunk;
    size_t len, off;
    unsigned drop_gen;
    int done;
} follow;

static ssize_t follow_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    follow *f = cls;
    for (;;) {
        if (f->off < f->len) {
            size_t n = f->len - f->off < max ? f->len - f->off : max;
            if (f->o.limit >= 0 && f->given + n > (size_t)f->o.limit)
                n = (size_t)f->o.limit - f->given;
            if (n == 0)
                return MHD_CONTENT_READER_END_OF_STREAM;
            memcpy(buf, f->chunk + f->off, n);
            f->off += n;
            f->given += n;
            return (ssize_t)n;
        }
        if (f->done || f->st->stopping)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&f->st->mu);
        while (!f->st->stopping) {
            const char *text = json_string_value(json_object_get(f->st->logs, f->key));
            size_t n = text ? strlen(text) : 0;
            if (n > f->sent) {
                free(f->chunk);
                f->chunk = fk_log_render(text, f->sent, n, f->at_start, &f->o, &f->len);
                if (!f->chunk)
                    f->len = 0;
                f->off = 0;
                f->at_start = text[n - 1] == '\n';
                f->sent = n;
                break;
            }
            /* The kubelet ends the stream once the container has ended (or the pod went). */
            const json_t *pod = json_object_get(f->st->objs[FK_PODS], f->key);
            if (!pod || !fk_pod_active(pod) || f->drop_gen != f->st->drop_gen) {
                f->done = 1;
                break;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&f->st->cv, &f->st->mu, &ts);
        }
        pthread_mutex_unlock(&f->st->mu);
        if (f->done && f->off >= f->len)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void follow_free(void *cls)
{
    follow *f = cls;
    free(f->chunk);
    free(f);
}

struct MHD_Response *fk_log_follow_response(fk_store *st, const char *ns, const char *name,
                                            const fk_log_opts *o, const char *first,
                                            size_t first_len, size_t sent)
{
    follow *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->st = st;
    snprintf(f->key, sizeof f->key, "%s/%s", ns, name);
    f->o = *o;
    f->sent = sent;
    f->chunk = malloc(first_len + 1);
    if (!f->chunk) {
        free(f);
        return NULL;
    }
    memcpy(f->chunk, first, first_len);
    f->len = first_len;
    pthread_mutex_lock(&st->mu);
    f->drop_gen = st->drop_gen;
    const char *text = json_string_value(json_object_get(st->logs, f->key));
    f->at_start = !text || sent == 0 || text[sent - 1] == '\n';
    pthread_mutex_unlock(&st->mu);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, follow_read, f, follow_free);
    if (!r) {
        follow_free(f);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain");
    return r;
}
