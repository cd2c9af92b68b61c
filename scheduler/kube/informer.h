/*
 * informer.h - a list-then-watch cache of one collection of Kubernetes objects.
 *
 * An informer keeps, on a thread of its own, a copy of every object of one collection (a path
 * with its selector, e.g. "/api/v1/pods?labelSelector=trainyard.io%2Fjob-id"):
 *   list (paged) -> replace the cache -> watch from the list's resourceVersion (with bookmarks)
 *   -> apply each event -> when the stream ends or breaks, watch again from the last
 *   resourceVersion seen -> on 410 Gone/Expired, list again and deliver what changed between the
 *   old cache and the new list as events of their own, so a consumer never misses a deletion.
 * Failures are retried forever after a jittered exponential backoff (capped) until stopped.
 *
 * The consumer sees every change once, in the server's order for each object, through on_event
 * on the informer's thread, never under the cache lock (so it may read the cache):
 *   ADDED     old NULL, new the object;
 *   MODIFIED  old the cached state, new the object (events that leave an object's
 *             resourceVersion unchanged are not delivered);
 *   DELETED   old the last state (the one the server sent, or the cached one when the deletion
 *             was found by a re-list), new NULL.
 * An object a re-list finds under a cached name with another uid (deleted and created again
 * meanwhile) comes as DELETED then ADDED. Both objects are borrowed for the call. When a
 * callback runs, the cache already holds the change (after a re-list: the whole new list).
 * The first list's objects come as ADDED, then on_synced once, then ty_informer_synced() is 1.
 * Objects are keyed "namespace/name" ("name" when cluster-scoped). With a transform, the cache
 * and the callbacks hold what it made of each object (as client-go's SetTransform): a cache of
 * every pod of a cluster then costs what its consumer needs, not the pods' specs.
 *
 * Threads: every function may be called from any thread except from on_event/on_synced, where
 * ty_informer_stop and ty_informer_free must not be called. The informer knows nothing of what
 * its objects mean.
 */
#ifndef TY_SCHEDULER_KUBE_INFORMER_H
#define TY_SCHEDULER_KUBE_INFORMER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "scheduler/kube/kclient.h"

typedef struct ty_informer ty_informer;

typedef enum ty_inf_type {
    TY_INF_ADDED,
    TY_INF_MODIFIED,
    TY_INF_DELETED,
} ty_inf_type;

typedef void (*ty_inf_event_cb)(void *ud, ty_inf_type type, const json_t *old_obj,
                                const json_t *new_obj);
typedef void (*ty_inf_synced_cb)(void *ud);
/*
 * What the cache keeps of an object the server sent (borrowed): a new, smaller object, or NULL
 * without memory. It must keep metadata.namespace, name, uid and resourceVersion, which the
 * cache is keyed and compared by. Consumers then see only what it returns. It may hold values
 * of the object sent rather than copies: nothing changes that object, and the informer drops
 * it once transformed.
 */
typedef json_t *(*ty_inf_transform_cb)(void *ud, const json_t *obj);

typedef struct ty_informer_opts {
    const char *path;             /* the collection and its own query, escaped (copied) */
    int page_limit;               /* items a list page (default 500) */
    int watch_timeout_s;          /* timeoutSeconds of a watch (default 300) */
    int64_t backoff_base_ms;      /* first wait after a failure; doubles, jittered (500) */
    int64_t backoff_max_ms;       /* cap on one wait (30000) */
    ty_inf_event_cb on_event;     /* may be NULL */
    ty_inf_synced_cb on_synced;   /* may be NULL */
    ty_inf_transform_cb transform; /* may be NULL: the whole object is kept */
    const json_t *pick;           /* what a watch parses of each object (kclient.h, kpick.h),
                                     borrowed, outliving the informer: everything transform
                                     reads and the metadata above; NULL: all of it */
    int metadata_only;            /* list and watch the objects' metadata alone: all a
                                     consumer of owners and labels needs (client-go's
                                     metadata informer); the server sends nothing else */
    void *ud;
} ty_informer_opts;

/* Fills *o with the defaults above (path and callbacks NULL). */
void ty_informer_opts_default(ty_informer_opts *o);

/*
 * A new informer of o->path through c (borrowed: it must outlive the informer), started: its
 * thread lists at once. TY_EINVAL (no path, bad options), TY_ENOMEM, TY_EIO (no thread).
 */
ty_err ty_informer_start(ty_kclient *c, const ty_informer_opts *o, ty_informer **out, char *err,
                         size_t errlen);

/*
 * Stops the thread and joins it: an open watch ends within about a second; a list in progress
 * ends at its next page or when its request ends. No callback runs after it returns. The cache
 * stays readable. Idempotent.
 */
void ty_informer_stop(ty_informer *inf);
/* Stops, then frees. Accepts NULL. */
void ty_informer_free(ty_informer *inf);

/* 1 once the first list has been delivered (its ADDED events and on_synced returned), else 0. */
int ty_informer_synced(ty_informer *inf);
/* Waits up to timeout_ms for the first list; returns ty_informer_synced(). */
int ty_informer_wait_synced(ty_informer *inf, int64_t timeout_ms);

/* A copy (new) of the cached object ns/name (ns NULL or "" when cluster-scoped), or NULL. */
json_t *ty_informer_get(ty_informer *inf, const char *ns, const char *name);
/* The number of cached objects. */
size_t ty_informer_len(ty_informer *inf);
/*
 * Calls fn for every cached object (borrowed; do not keep it) under the cache lock, in no
 * particular order; fn must not call the informer. A non-TY_OK return ends the walk with it.
 */
typedef ty_err (*ty_inf_each_cb)(void *ud, const json_t *obj);
ty_err ty_informer_foreach(ty_informer *inf, ty_inf_each_cb fn, void *ud);
/* The resourceVersion the cache is at ("" before the first list), copied into buf. */
void ty_informer_rv(ty_informer *inf, char *buf, size_t len);

/*
 * Why the last list or watch failed, as the client said it ("... (HTTP 500 InternalError)"), for
 * logs and health; "" when none failed since the last list.
 */
void ty_informer_last_error(ty_informer *inf, char *buf, size_t len);

/* ---- counters, for /metrics ---- */

typedef struct ty_informer_stats {
    uint64_t lists;               /* lists that completed */
    uint64_t list_failures;       /* lists that failed (each one retried after a backoff) */
    uint64_t watches;             /* watches started */
    uint64_t watch_restarts;      /* watches that ended other than by stop (then resumed) */
    uint64_t expired;             /* of which: 410, resourceVersion too old (then re-listed) */
    uint64_t events;              /* on_event calls, re-list differences included */
    uint64_t relist_events;       /* of which: differences found by a re-list */
    uint64_t objects;             /* objects in the cache now */
} ty_informer_stats;

void ty_informer_stats_get(ty_informer *inf, ty_informer_stats *out);

#endif
