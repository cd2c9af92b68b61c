/*
 * streams.c - the places of the followed streams (api/streams.h), and the
 * request helper that takes one or answers 429 (api_need_stream_place()).
 *
 * The counts live in a hash table of principals: a fixed array of chains
 * (NBUCKETS), each entry a principal holding at least one place. An entry is
 * made by its first place and freed with its last, so the table holds at most
 * `total` entries and a principal that stopped streaming costs nothing. Every
 * count is under one mutex, held for a lookup and an increment (and a
 * principal's first place, a small malloc): taking a place costs a hash of the
 * name and a walk of one chain.
 */
#include "api/streams.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "common/ty_log.h"

#define NBUCKETS 256

typedef struct api_streams_entry {
    struct api_streams_entry *next;
    unsigned held;                   /* places of this principal; >= 1 while listed */
    unsigned bucket;
    char name[];                     /* the principal's name, NUL-terminated */
} entry;

struct api_streams {
    pthread_mutex_t mu;
    unsigned total, per_token;       /* the limits, fixed at creation */
    unsigned open;                   /* mu: places held */
    uint64_t refused[2];             /* mu: by api_streams_limit */
    entry *buckets[NBUCKETS];        /* mu */
};

/* FNV-1a over the name. Token names are chosen by an admin, not by the client streaming, and a
 * chain is at most `total` long anyway. */
static unsigned bucket_of(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % NBUCKETS;
}

ty_err api_streams_new(unsigned total, unsigned per_token, api_streams **out)
{
    if (total < 1 || per_token < 1)
        return TY_EINVAL;
    api_streams *s = calloc(1, sizeof *s);
    if (!s)
        return TY_ENOMEM;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return TY_ENOMEM;
    }
    s->total = total;
    s->per_token = per_token;
    *out = s;
    return TY_OK;
}

void api_streams_free(api_streams *s)
{
    if (!s)
        return;
    if (s->open)
        TY_LOG(TY_LOG_ERROR, "streams still hold places at exit", "{s:i}", "open", (int)s->open);
    for (size_t i = 0; i < NBUCKETS; i++) {
        entry *e = s->buckets[i];
        while (e) {
            entry *next = e->next;
            free(e);
            e = next;
        }
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The entry of name, or NULL; mu held. */
static entry *find(api_streams *s, const char *name, unsigned b)
{
    for (entry *e = s->buckets[b]; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

ty_err api_streams_take(api_streams *s, const char *who, api_stream_place *place,
                        api_streams_limit *which)
{
    const char *name = who ? who : "";
    unsigned b = bucket_of(name);
    ty_err e = TY_OK;

    pthread_mutex_lock(&s->mu);
    entry *en = find(s, name, b);
    if (en && en->held >= s->per_token) {
        *which = API_STREAMS_PER_TOKEN;
        s->refused[API_STREAMS_PER_TOKEN]++;
        e = TY_EAGAIN;
        goto out;
    }
    if (s->open >= s->total) {
        *which = API_STREAMS_TOTAL;
        s->refused[API_STREAMS_TOTAL]++;
        e = TY_EAGAIN;
        goto out;
    }
    if (!en) {
        /* A principal's first place; a small allocation, rare next to the stream's own. */
        size_t len = strlen(name);
        if (!(en = malloc(sizeof *en + len + 1))) {
            e = TY_ENOMEM;
            goto out;
        }
        memcpy(en->name, name, len + 1);
        en->held = 0;
        en->bucket = b;
        en->next = s->buckets[b];
        s->buckets[b] = en;
    }
    en->held++;
    s->open++;
    place->owner = s;
    place->entry = en;
out:
    pthread_mutex_unlock(&s->mu);
    return e;
}

void api_stream_place_release(api_stream_place *place)
{
    if (!place || !place->owner)
        return;
    api_streams *s = place->owner;
    entry *en = place->entry;
    place->owner = NULL;
    place->entry = NULL;
    pthread_mutex_lock(&s->mu);
    s->open--;
    if (--en->held == 0) {
        entry **pp = &s->buckets[en->bucket];
        while (*pp != en)
            pp = &(*pp)->next;
        *pp = en->next;
    } else {
        en = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(en);
}

void api_stream_place_move(api_stream_place *to, api_stream_place *from)
{
    *to = *from;
    from->owner = NULL;
    from->entry = NULL;
}

void api_streams_get_stats(api_streams *s, api_streams_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    out->total = s->total;
    out->per_token = s->per_token;
    out->open = s->open;
    out->refused[0] = s->refused[0];
    out->refused[1] = s->refused[1];
    pthread_mutex_unlock(&s->mu);
}

unsigned api_streams_held(api_streams *s, const char *who)
{
    const char *name = who ? who : "";
    pthread_mutex_lock(&s->mu);
    entry *en = find(s, name, bucket_of(name));
    unsigned n = en ? en->held : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- the request helper ------------------------------------------------------------------ */

bool api_need_stream_place(const api_req *req, api_resp *resp, api_stream_place *place)
{
    api_streams *s = req->ctx->streams;
    api_streams_limit which = API_STREAMS_PER_TOKEN;
    char detail[160];
    if (!s)
        return true; /* no accounting in this process: no caps */
    ty_err e = api_streams_take(s, api_principal_name(req), place, &which);
    if (e == TY_OK)
        return true;
    if (e != TY_EAGAIN) {
        api_reply_error(resp, e, NULL);
        return false;
    }
    api_streams_stats st;
    api_streams_get_stats(s, &st);
    if (which == API_STREAMS_PER_TOKEN)
        snprintf(detail, sizeof detail,
                 "this token holds %u followed streams, its most at once; close one first",
                 st.per_token);
    else
        snprintf(detail, sizeof detail,
                 "the server holds %u followed streams, its most at once; retry later", st.total);
    api_reply_problem(resp, 429, "too-many-streams", NULL, detail, NULL);
    api_resp_header(resp, "Retry-After", API_STREAMS_RETRY_AFTER);
    return false;
}
