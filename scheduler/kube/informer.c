/*
 * informer.c - list, then watch, one collection; see informer.h.
 *
 * The cache is a jansson object "namespace/name" -> object. Cached objects are never changed once
 * stored (an event replaces the whole object), so the thread can hand them to the consumer after
 * dropping the lock while holding a reference of its own.
 */
#include "scheduler/kube/informer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ty_time.h"
#include "common/ty_thread.h"

struct ty_informer {
    ty_kclient *c;
    ty_informer_opts o;           /* o.path points at path */
    char *path;
    pthread_t thread;
    int started;
    pthread_mutex_t join_mu;      /* one joiner */
    int joined;

    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t cv;            /* synced, stopping (CLOCK_MONOTONIC) */
    json_t *cache;
    char rv[64];
    int synced;
    ty_informer_stats st;
    uint64_t watch_seen;          /* events of any type seen by the current watch */
    int must_relist;              /* an event could not be applied: the cache is behind */
    char last_err[512];           /* why the last list or watch failed; "" after a list */

    atomic_int stopping;
    ty_kstop kstop;               /* never reset: once stopped, every later watch ends at once */
    unsigned seed;
};

typedef struct inf_ev {
    ty_inf_type type;
    json_t *old_obj, *new_obj;    /* references of their own, or NULL */
} inf_ev;

typedef struct inf_evs {
    inf_ev *v;
    size_t n, cap;
} inf_evs;

void ty_informer_opts_default(ty_informer_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->page_limit = 500;
    o->watch_timeout_s = 300;
    o->backoff_base_ms = 500;
    o->backoff_max_ms = 30000;
}

/* "<what>: <path>" into err. */
static void set_err(char *err, size_t errlen, const char *what, const char *path)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, path);
}

/* "ns/name", or "name" when cluster-scoped; 0 when the object has no name. */
static int key_of(const json_t *obj, char *buf, size_t len)
{
    const json_t *md = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *name = json_string_value(json_object_get(md, "name"));
    int n;
    if (!name || !name[0])
        return 0;
    n = ns && ns[0] ? snprintf(buf, len, "%s/%s", ns, name) : snprintf(buf, len, "%s", name);
    return n > 0 && (size_t)n < len;
}

static const char *rv_of(const json_t *obj)
{
    const char *rv = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    return rv ? rv : "";
}

static const char *uid_of(const json_t *obj)
{
    const char *uid = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "uid"));
    return uid ? uid : "";
}

static int evs_push(inf_evs *e, ty_inf_type type, json_t *old_obj, json_t *new_obj)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        inf_ev *v = realloc(e->v, cap * sizeof(*v));
        if (!v)
            return -1;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (inf_ev){type, json_incref(old_obj), json_incref(new_obj)};
    return 0;
}

/* Delivers and releases the events; called without the lock. */
static void evs_deliver(ty_informer *inf, inf_evs *e)
{
    for (size_t i = 0; i < e->n; i++) {
        if (inf->o.on_event)
            inf->o.on_event(inf->o.ud, e->v[i].type, e->v[i].old_obj, e->v[i].new_obj);
        json_decref(e->v[i].old_obj);
        json_decref(e->v[i].new_obj);
    }
    free(e->v);
    memset(e, 0, sizeof(*e));
}

static void deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits the failures'th backoff, or less when stopped. */
static void backoff(ty_informer *inf, int failures)
{
    int64_t d = inf->o.backoff_base_ms;
    struct timespec ts;
    for (int i = 0; i < failures && d < inf->o.backoff_max_ms; i++)
        d *= 2;
    if (d > inf->o.backoff_max_ms)
        d = inf->o.backoff_max_ms;
    /* Jitter over [d/2, d]: informers that failed together do not retry together. */
    d = d / 2 + (int64_t)(rand_r(&inf->seed) % (unsigned)(d / 2 + 1));
    deadline_after(&ts, d);
    pthread_mutex_lock(&inf->mu);
    while (!atomic_load(&inf->stopping))
        if (pthread_cond_timedwait(&inf->cv, &inf->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&inf->mu);
}

/* ---- list ------------------------------------------------------------------------------------*/

typedef struct list_ctx {
    ty_informer *inf;
    json_t *map;
} list_ctx;

/* What the cache keeps of obj: a new reference (obj itself without a transform), or NULL. */
static json_t *kept(ty_informer *inf, json_t *obj)
{
    return inf->o.transform ? inf->o.transform(inf->o.ud, obj) : json_incref(obj);
}

static ty_err on_item(void *ud, json_t *item)
{
    list_ctx *l = ud;
    char key[512];
    if (atomic_load(&l->inf->stopping))
        return TY_ESHUTDOWN;
    if (!key_of(item, key, sizeof(key)))
        return TY_OK;             /* nothing can address it; the server never sends one */
    json_t *k = kept(l->inf, item);
    return k && json_object_set_new(l->map, key, k) == 0 ? TY_OK : TY_ENOMEM;
}

/*
 * Lists, replaces the cache and delivers the differences with the old one: every object the
 * first time; on a re-list what was added, changed or deleted while no watch saw it.
 */
static ty_err relist(ty_informer *inf, char *err, size_t errlen)
{
    list_ctx l = {inf, json_object()};
    char rv[64] = "";
    ty_kresp resp = {0};
    inf_evs evs = {0};
    ty_err rc;
    const char *key;
    json_t *obj, *old, *was;
    int first;
    if (!l.map)
        return TY_ENOMEM;
    err[0] = '\0';
    rc = ty_kclient_list(inf->c, inf->path, inf->o.page_limit, inf->o.metadata_only, on_item, &l,
                         rv, sizeof(rv), &resp, err, errlen);
    ty_kresp_clear(&resp);
    if (rc != TY_OK) {
        json_decref(l.map);
        return rc;
    }
    pthread_mutex_lock(&inf->mu);
    old = inf->cache;
    first = !inf->synced;
    json_object_foreach(l.map, key, obj) {
        was = json_object_get(old, key);
        if (!was) {
            rc = evs_push(&evs, TY_INF_ADDED, NULL, obj) ? TY_ENOMEM : rc;
        } else if (strcmp(uid_of(was), uid_of(obj)) != 0) {
            /* Deleted and created again under the same name while no watch saw it. */
            if (evs_push(&evs, TY_INF_DELETED, was, NULL) ||
                evs_push(&evs, TY_INF_ADDED, NULL, obj))
                rc = TY_ENOMEM;
        } else if (strcmp(rv_of(was), rv_of(obj)) != 0)
            rc = evs_push(&evs, TY_INF_MODIFIED, was, obj) ? TY_ENOMEM : rc;
    }
    json_object_foreach(old, key, was) {
        if (!json_object_get(l.map, key))
            rc = evs_push(&evs, TY_INF_DELETED, was, NULL) ? TY_ENOMEM : rc;
    }
    if (rc == TY_OK) {
        inf->cache = l.map;
        snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
        inf->st.lists++;
        inf->st.events += evs.n;
        if (!first)
            inf->st.relist_events += evs.n;
        inf->st.objects = json_object_size(l.map);
        inf->last_err[0] = '\0';
    }
    pthread_mutex_unlock(&inf->mu);
    if (rc != TY_OK) {
        /* The old cache stays; the list is tried again after a backoff. */
        for (size_t i = 0; i < evs.n; i++) {
            json_decref(evs.v[i].old_obj);
            json_decref(evs.v[i].new_obj);
        }
        free(evs.v);
        json_decref(l.map);
        set_err(err, errlen, "informer: out of memory applying a list of", inf->path);
        return rc;
    }
    json_decref(old);
    evs_deliver(inf, &evs);
    if (first) {
        if (inf->o.on_synced)
            inf->o.on_synced(inf->o.ud);
        /* Synced only now: whoever waited for it has had every object as ADDED. */
        pthread_mutex_lock(&inf->mu);
        inf->synced = 1;
        pthread_cond_broadcast(&inf->cv);
        pthread_mutex_unlock(&inf->mu);
    }
    return TY_OK;
}

/* ---- watch -----------------------------------------------------------------------------------*/

static ty_err on_watch(void *ud, ty_kwatch_type type, json_t *sent)
{
    ty_informer *inf = ud;
    char key[512];
    json_t *was, *obj = NULL;
    inf_evs evs = {0};
    int oom = 0;
    if (atomic_load(&inf->stopping))
        return TY_ESHUTDOWN;
    if (type == TY_KWATCH_ERROR)
        return TY_OK;             /* the client ends the watch and says why */
    if (type != TY_KWATCH_BOOKMARK && !(obj = kept(inf, sent))) {
        /* The resourceVersion moves past this event: only a re-list repairs the cache. */
        pthread_mutex_lock(&inf->mu);
        inf->must_relist = 1;
        pthread_mutex_unlock(&inf->mu);
        return TY_ENOMEM;
    }
    if (!obj)
        obj = json_incref(sent);
    pthread_mutex_lock(&inf->mu);
    inf->watch_seen++;
    if (rv_of(obj)[0])
        snprintf(inf->rv, sizeof(inf->rv), "%s", rv_of(obj));
    if (type == TY_KWATCH_BOOKMARK || !key_of(obj, key, sizeof(key))) {
        pthread_mutex_unlock(&inf->mu);
        json_decref(obj);
        return TY_OK;
    }
    was = json_object_get(inf->cache, key);
    if (type == TY_KWATCH_DELETED) {
        /* Only what the consumer has seen can be deleted for it. */
        if (was) {
            oom = evs_push(&evs, TY_INF_DELETED, obj, NULL);
            if (!oom)
                json_object_del(inf->cache, key);
        }
    } else if (!was || strcmp(rv_of(was), rv_of(obj)) != 0) {
        /* The type follows the cache: an ADDED for a cached object changes it. */
        oom = evs_push(&evs, was ? TY_INF_MODIFIED : TY_INF_ADDED, was, obj) ||
              json_object_set(inf->cache, key, obj) != 0;
    }
    inf->st.events += evs.n;
    inf->st.objects = json_object_size(inf->cache);
    /* The resourceVersion has moved past the event: only a re-list can repair the cache. */
    if (oom)
        inf->must_relist = 1;
    pthread_mutex_unlock(&inf->mu);
    evs_deliver(inf, &evs);
    json_decref(obj);
    return oom ? TY_ENOMEM : TY_OK;
}

/* One watch from the cache's resourceVersion. *need_list is set when the cache must be
 * listed again (410, or an event it could not take); *progressed when any event came. */
static ty_err watch_once(ty_informer *inf, int *need_list, int *progressed, char *err,
                         size_t errlen)
{
    char from[64], last[64];
    ty_kresp resp = {0};
    ty_err rc;
    pthread_mutex_lock(&inf->mu);
    snprintf(from, sizeof(from), "%s", inf->rv);
    inf->watch_seen = 0;
    inf->st.watches++;
    pthread_mutex_unlock(&inf->mu);
    snprintf(last, sizeof(last), "%s", from);
    ty_kwatch_opts wo = {
        .path = inf->path,
        .resource_version = from,
        .timeout_s = inf->o.watch_timeout_s,
        .cb = on_watch,
        .ud = inf,
        .stop = &inf->kstop,
        .pick = inf->o.pick,
        .metadata_only = inf->o.metadata_only,
    };
    err[0] = '\0';
    rc = ty_kclient_watch(inf->c, &wo, last, sizeof(last), &resp, err, errlen);
    if (atomic_load(&inf->stopping))
        rc = TY_ESHUTDOWN;
    pthread_mutex_lock(&inf->mu);
    *progressed = inf->watch_seen > 0;
    if (rc != TY_ESHUTDOWN)
        inf->st.watch_restarts++;
    if (rc == TY_EAGAIN && resp.code == 410) {
        inf->st.expired++;
        *need_list = 1;
    }
    if (inf->must_relist) {
        inf->must_relist = 0;
        *need_list = 1;
    }
    if (rc != TY_OK && rc != TY_ESHUTDOWN)
        snprintf(inf->last_err, sizeof(inf->last_err), "%s", err);
    pthread_mutex_unlock(&inf->mu);
    ty_kresp_clear(&resp);
    return rc;
}

/* "ty-inf-" and the resource the informer lists ("pods", "jobs", "nodes"), "-sel" when a
 * selector narrows it across namespaces (the cluster's bound pods). */
static void name_thread(const char *path)
{
    char res[64] = "", name[sizeof res + 16]; /* ty_thread_name() cuts it to 15 */
    size_t n = strcspn(path, "?");
    size_t i = n;
    while (i > 0 && path[i - 1] != '/')
        i--;
    snprintf(res, sizeof res, "%.*s", (int)(n - i), path + i);
    snprintf(name, sizeof name, "ty-inf-%s%s", res,
             strstr(path, "fieldSelector") && !strstr(path, "/namespaces/") ? "-sel" : "");
    ty_thread_name(name);
}

static void *run(void *arg)
{
    ty_informer *inf = arg;
    name_thread(inf->path);
    char err[512] = "";
    int need_list = 1, failures = 0, progressed;
    ty_err rc;
    while (!atomic_load(&inf->stopping)) {
        if (need_list) {
            rc = relist(inf, err, sizeof(err));
            if (rc == TY_ESHUTDOWN || atomic_load(&inf->stopping))
                break;
            if (rc != TY_OK) {
                pthread_mutex_lock(&inf->mu);
                inf->st.list_failures++;
                snprintf(inf->last_err, sizeof(inf->last_err), "%s", err);
                pthread_mutex_unlock(&inf->mu);
                backoff(inf, failures++);
                continue;
            }
            need_list = 0;
            failures = 0;
        }
        rc = watch_once(inf, &need_list, &progressed, err, sizeof(err));
        if (rc == TY_ESHUTDOWN)
            break;
        if (need_list && !progressed) {
            /* 410 at once: a server that forgets every version right away is not listed in a
             * tight loop. */
            backoff(inf, failures++);
            continue;
        }
        if (need_list || (progressed && (rc == TY_OK || rc == TY_EIO))) {
            /* 410, or a stream that delivered and then ended or broke: again at once. */
            failures = 0;
            continue;
        }
        if (rc == TY_OK) {
            /* Ended without a single event: the first backoff, so that a server that closes
             * every watch at once is not asked again in a tight loop. */
            failures = 0;
            backoff(inf, 0);
            continue;
        }
        backoff(inf, failures++);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------------------*/

ty_err ty_informer_start(ty_kclient *c, const ty_informer_opts *o, ty_informer **out, char *err,
                         size_t errlen)
{
    ty_informer *inf;
    pthread_condattr_t ca;
    if (!c || !o || !o->path || o->path[0] != '/' || o->page_limit < 0 ||
        o->watch_timeout_s < 0 || o->backoff_base_ms <= 0 ||
        o->backoff_max_ms < o->backoff_base_ms) {
        set_err(err, errlen, "informer: bad options (a path starting with '/', no negative limit, "
                "0 < backoff_base_ms <= backoff_max_ms) for",
                o && o->path ? o->path : "(none)");
        return TY_EINVAL;
    }
    inf = calloc(1, sizeof(*inf));
    if (!inf || !(inf->path = strdup(o->path)) || !(inf->cache = json_object())) {
        if (inf) {
            free(inf->path);
            free(inf);
        }
        set_err(err, errlen, "informer: out of memory for", o->path);
        return TY_ENOMEM;
    }
    inf->c = c;
    inf->o = *o;
    inf->o.path = inf->path;
    inf->seed = (unsigned)ty_time_mono_ns() ^ (unsigned)(uintptr_t)inf;
    pthread_mutex_init(&inf->mu, NULL);
    pthread_mutex_init(&inf->join_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&inf->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&inf->thread, NULL, run, inf) != 0) {
        set_err(err, errlen, "informer: cannot start the thread of", o->path);
        ty_informer_free(inf);
        return TY_EIO;
    }
    inf->started = 1;
    *out = inf;
    return TY_OK;
}

void ty_informer_stop(ty_informer *inf)
{
    if (!inf)
        return;
    atomic_store(&inf->stopping, 1);
    ty_kstop_request(&inf->kstop);
    pthread_mutex_lock(&inf->mu);
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
    pthread_mutex_lock(&inf->join_mu);
    if (inf->started && !inf->joined) {
        pthread_join(inf->thread, NULL);
        inf->joined = 1;
    }
    pthread_mutex_unlock(&inf->join_mu);
}

void ty_informer_free(ty_informer *inf)
{
    if (!inf)
        return;
    ty_informer_stop(inf);
    json_decref(inf->cache);
    pthread_cond_destroy(&inf->cv);
    pthread_mutex_destroy(&inf->mu);
    pthread_mutex_destroy(&inf->join_mu);
    free(inf->path);
    free(inf);
}

/* ---- reading ---------------------------------------------------------------------------------*/

int ty_informer_synced(ty_informer *inf)
{
    int s;
    pthread_mutex_lock(&inf->mu);
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

int ty_informer_wait_synced(ty_informer *inf, int64_t timeout_ms)
{
    struct timespec ts;
    int s;
    deadline_after(&ts, timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&inf->mu);
    while (!inf->synced && !atomic_load(&inf->stopping))
        if (pthread_cond_timedwait(&inf->cv, &inf->mu, &ts) != 0)
            break;
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

json_t *ty_informer_get(ty_informer *inf, const char *ns, const char *name)
{
    char key[512];
    int n;
    json_t *copy = NULL;
    if (!name)
        return NULL;
    n = ns && ns[0] ? snprintf(key, sizeof(key), "%s/%s", ns, name)
                    : snprintf(key, sizeof(key), "%s", name);
    if (n < 0 || (size_t)n >= sizeof(key))
        return NULL;
    pthread_mutex_lock(&inf->mu);
    /* A copy, not a reference: the caller may change it or keep it past the next event. */
    copy = json_deep_copy(json_object_get(inf->cache, key));
    pthread_mutex_unlock(&inf->mu);
    return copy;
}

size_t ty_informer_len(ty_informer *inf)
{
    size_t n;
    pthread_mutex_lock(&inf->mu);
    n = json_object_size(inf->cache);
    pthread_mutex_unlock(&inf->mu);
    return n;
}

ty_err ty_informer_foreach(ty_informer *inf, ty_inf_each_cb fn, void *ud)
{
    const char *key;
    json_t *obj;
    ty_err rc = TY_OK;
    pthread_mutex_lock(&inf->mu);
    json_object_foreach(inf->cache, key, obj) {
        rc = fn(ud, obj);
        if (rc != TY_OK)
            break;
    }
    pthread_mutex_unlock(&inf->mu);
    return rc;
}

void ty_informer_rv(ty_informer *inf, char *buf, size_t len)
{
    pthread_mutex_lock(&inf->mu);
    snprintf(buf, len, "%s", inf->rv);
    pthread_mutex_unlock(&inf->mu);
}

void ty_informer_last_error(ty_informer *inf, char *buf, size_t len)
{
    pthread_mutex_lock(&inf->mu);
    snprintf(buf, len, "%s", inf->last_err);
    pthread_mutex_unlock(&inf->mu);
}

void ty_informer_stats_get(ty_informer *inf, ty_informer_stats *out)
{
    pthread_mutex_lock(&inf->mu);
    *out = inf->st;
    pthread_mutex_unlock(&inf->mu);
}
