/*
 * fk.h - the fake Kubernetes API server's modules, shared by its files.
 *
 * The fake plays a v1.26 kube-apiserver with the Job controller, the garbage
 * collector and the scheduler, as the transcripts in
 * tests/fixtures/kubernetes-transcripts/ show them. Layout:
 *   fk_store.c   objects, resourceVersion, the event window, indexes, selectors
 *   fk_valid.c   decoding (400) and validation (422) of written objects
 *   fk_ctrl.c    the Job controller and the garbage collector
 *   fk_sched.c   the scheduler (filters, binding, FailedScheduling), the autoscaler
 *   fk_watch.c   watches (chunked events, bookmarks, 410 Expired), pods/log?follow
 *   fk_logs.c    pods' logs as the kubelet keeps them (a time per line) and serves them
 *   fk_control.c the /fake control API for tests and injected faults
 *   fk_http.c    routing, the REST verbs, lists, main()
 *
 * Threads: every HTTP connection has its own thread; one mutex (fk_store.mu)
 * guards all state. Stored objects are immutable once stored: a writer
 * deep-copies, changes the copy and stores it again, so a watch event may hold
 * a reference to the object as it was.
 */
#ifndef TY_FAKE_KUBE_FK_H
#define TY_FAKE_KUBE_FK_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum fk_res_id {
    FK_NAMESPACES,
    FK_NODES,
    FK_PODS,
    FK_SERVICES,
    FK_EVENTS,
    FK_JOBS,
    FK_VCJOBS,
    FK_SECRETS,
    FK_NRES
};

typedef struct fk_res {
    const char *plural;      /* "jobs" */
    const char *kind;        /* "Job" */
    const char *group;       /* "" for the core group */
    const char *version;     /* "v1" */
    const char *api_version; /* "batch/v1" */
    const char *def;         /* swagger definition; NULL: validated by the CRD schema */
    int namespaced;
} fk_res;

extern const fk_res fk_resources[FK_NRES];

typedef struct fk_event {
    uint64_t rv;
    int res;
    const char *type; /* "ADDED", "MODIFIED", "DELETED" (static) */
    json_t *obj;      /* a reference to the stored state */
    json_t *prev;     /* MODIFIED: the state it replaced (a watch with a selector tells an
                         object entering it, ADDED, or leaving it, DELETED); else NULL */
} fk_event;

typedef struct fk_fault {
    char method[16];  /* "" matches every method */
    char prefix[256]; /* matches paths starting with it */
    int remaining;    /* requests still to answer this way */
    int status;       /* 0: only a delay */
    int retry_after;  /* seconds, for 429 */
    int delay_ms;
} fk_fault;

typedef struct fk_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* broadcast on every event and on a watch drop */
    json_t *objs[FK_NRES]; /* "ns/name" -> object */
    json_t *logs;          /* "ns/name" -> log of a pod, set by tests: each line prefixed
                              with the time it was written (fk_logs.c) */
    int64_t log_last_ns;   /* the time of the last line written */
    uint64_t rv;           /* the last resourceVersion given out */
    fk_event *ring;        /* the window of recent events a watch can resume from */
    size_t ring_cap, ring_len, ring_head;
    uint64_t window_rv;      /* a watch from an rv below this gets 410 Expired */
    unsigned drop_gen;       /* bumped to end every open watch */
    unsigned long seq;       /* for names and uids */
    const json_t *swagger;   /* the Kubernetes definitions (borrowed from main) */
    const json_t *vc_schema; /* the Volcano Job CRD's openAPIV3Schema */
    json_t *groups;          /* node groups of the autoscaler stand-in (fk_autoscale) */
    fk_fault faults[32];
    int nfaults;
    volatile int stopping;  /* set once at shutdown: watches end */
    uint64_t reconciled_rv; /* the controllers have seen every event up to this rv */
    size_t sched_next;      /* where the scheduler's next search of a large cluster starts */
    /* Indexes of the pods, kept by fk_create/fk_update/fk_remove: */
    json_t *pods_by_owner; /* controller uid -> {"ns/name": true}, in creation order */
    json_t *pods_by_label; /* "key=value" -> {"ns/name": true}: pod affinity's candidates */
    json_t *pending;       /* "ns/name" -> true: pods the scheduler has to place */
    json_t *gpu_used;      /* node -> GPUs requested by the active pods bound there */
    json_t *res_used;      /* node -> [CPU m, memory, ephemeral-storage, pods] of the same pods */
    json_t *owners;        /* uid of a Job or Volcano job -> [res, "ns/name"] */
    json_t *nodes_sorted;  /* fk_list() of the nodes, NULL after a node changed */
    int terminating;       /* /fake/kubelet: bound pods deleted with a grace period stay
                              until they end or their grace period runs out */
} fk_store;

/* fk_store.c ------------------------------------------------------------ */
int fk_store_init(fk_store *st, size_t window);
void fk_store_fini(fk_store *st);
/* Current time as RFC 3339 ("2026-11-23T06:20:53Z"), offset by delta seconds. */
void fk_now(char *buf, size_t len, long delta);
/* A fresh uid (RFC 4122 form). */
void fk_uid(fk_store *st, char *buf, size_t len);
/* A 5-character suffix as the apiserver's generateName makes. */
void fk_rand5(fk_store *st, char out[6]);
/* The stored object (borrowed) or NULL. ns is "" for cluster-scoped kinds. */
json_t *fk_get(fk_store *st, int res, const char *ns, const char *name);
/* Stores a new object (stolen): uid, creationTimestamp, generation and
 * resourceVersion are set here. Returns the stored object (borrowed). */
json_t *fk_create(fk_store *st, int res, json_t *obj);
/* Replaces a stored object (stolen) with a new resourceVersion (MODIFIED).
 * Returns the stored object (borrowed). */
json_t *fk_update(fk_store *st, int res, json_t *obj);
/* Removes an object (DELETED event carrying its last state, new rv). */
void fk_remove(fk_store *st, int res, const char *ns, const char *name);
/* All objects of res in ns (NULL: every namespace), sorted by namespace then
 * name; a new array of borrowed-then-increfed objects. */
json_t *fk_list(fk_store *st, int res, const char *ns);
/* The nodes sorted by name (borrowed; valid until a node changes). */
json_t *fk_nodes(fk_store *st);
/* Forgets the event window: a watch from any earlier rv gets 410. */
void fk_compact(fk_store *st);
/* Writes an Event (core/v1) about obj. */
void fk_event_record(fk_store *st, int res, const json_t *obj, const char *type, const char *reason,
                     const char *message, const char *component);

/* Label selectors (labelSelector=...) and the few field selectors clients use. */
typedef struct fk_sel fk_sel;
/* Parses a label selector string; NULL or "" matches everything. */
int fk_sel_parse(const char *text, fk_sel **out, char *err, size_t errlen);
/* Parses a metav1.LabelSelector object (matchLabels, matchExpressions). */
int fk_sel_from_json(const json_t *ls, fk_sel **out);
void fk_sel_free(fk_sel *s);
int fk_sel_matches(const fk_sel *s, const json_t *labels);
int fk_sel_empty(const fk_sel *s);
/* fieldSelector terms "label=value", "label==value", "label!=value", joined by ","
 * (the value may be empty: "spec.nodeName!="). Returns -1 for a term without an operator. */
int fk_fsel_matches(const char *text, const json_t *obj, int *ok);
/* 0 when every label of the field selector is one a v1.26 apiserver accepts for res; else
 * -1 with err as it answers (400 BadRequest): "field label not supported: spec.foo". */
int fk_fsel_check(int res, const char *text, char *err, size_t errlen);

/* The uid of obj's controller (or first owner); "" when it has none. */
const char *fk_owner_uid(const json_t *obj);
/* The Job or Volcano job with uid (borrowed) or NULL; *res says which. */
json_t *fk_owner(fk_store *st, const char *uid, int *res);
/* The pods (array of borrowed objects, new) whose controller has uid. */
json_t *fk_pods_of(fk_store *st, const char *uid);

/* Small helpers on objects. */
const char *fk_str(const json_t *obj, const char *path); /* "metadata.name" */
json_t *fk_path(json_t *obj, const char *path, int create);

/* Whether obj, an object of res, is in namespace ns ("" or NULL: any) and
 * matches the label selector and the field selector text (NULL: any). */
int fk_selects(int res, const char *ns, const json_t *obj, const fk_sel *sel, const char *fsel);

/* fk_valid.c ------------------------------------------------------------ */
/* Reasons a write is refused: HTTP status plus a Status body (new) in *status. */
enum fk_fieldval { FK_FV_WARN, FK_FV_STRICT, FK_FV_IGNORE };
/*
 * Decodes and validates a request body for res as the apiserver does:
 * malformed JSON, type errors and (strict) unknown or duplicate fields are 400
 * BadRequest; semantic errors 422 Invalid. On success *out is the object (new)
 * with unknown fields dropped and *warnings (new array of strings) holds the
 * Warning header values. On failure returns the HTTP status and *status holds
 * the Status body (new); *warnings may still be set (a 422 carries them).
 */
int fk_decode(fk_store *st, int res, const char *body, size_t len, enum fk_fieldval fv,
              json_t **out, json_t **warnings, json_t **status);
/* Semantic validation of an object about to be stored (also for updates).
 * Returns 0 or 422 with *status. */
int fk_validate(int res, const json_t *obj, json_t **status);
/* A Status body (new). details may be NULL (stolen). */
json_t *fk_status(int code, const char *reason, const char *message, json_t *details);
/* details for res/name: {name, group (if any), kind: plural or Kind}. */
json_t *fk_details(int res, const char *name, int use_kind);
/* obj (borrowed) as a PartialObjectMetadata (new): its kind and its metadata alone, as the
 * apiserver answers a client that asks for metadata (fk_http.c). */
json_t *fk_partial_of(const json_t *obj);

/* fk_ctrl.c ------------------------------------------------------------- */
/* Applies server-side defaults of a newly created object (Job, Pod, Service). */
void fk_defaults(fk_store *st, int res, json_t *obj);
/* Runs the Job controller, the garbage collector and the scheduler on what
 * changed since they last ran, until nothing changes. Called with the lock
 * held after every write. */
void fk_reconcile(fk_store *st);
/* The same, and every Job with a deadline, changed or not (once a second). */
void fk_reconcile_deadlines(fk_store *st);
/* Deletes an object as DELETE does; policy "", "Background", "Foreground",
 * "Orphan". *body (new) is what DELETE answers. Returns the HTTP status. */
int fk_delete(fk_store *st, int res, const char *ns, const char *name, const char *policy,
              long grace, json_t **body, int *orphan_warning);
/* Sets a pod's phase as a kubelet would: "Running", "Succeeded", "Failed"
 * (exit_code, reason such as "OOMKilled" or "Error"). */
int fk_pod_set_phase(fk_store *st, const char *ns, const char *name, const char *phase,
                     int exit_code, const char *reason);
/* Evicts a pod: DisruptionTarget condition, then Failed. */
int fk_pod_evict(fk_store *st, const char *ns, const char *name);

/* fk_sched.c ------------------------------------------------------------ */
/* Tries every pending pod once; returns the number of objects written. */
int fk_schedule(fk_store *st);
/* Adds nodes from st->groups for Unschedulable pods; returns the writes. */
int fk_autoscale(fk_store *st);
/* The GPUs (nvidia.com/gpu) a pod requests. */
long fk_pod_gpus(const json_t *pod);
/* What a pod requests as NodeResourcesFit counts it: out[0] CPU millicores, out[1] memory and
 * out[2] ephemeral-storage bytes (containers summed, the largest init container when more,
 * spec.overhead on top; a container's request, else its limit). */
void fk_pod_requests(const json_t *pod, int64_t out[3]);
/* Neither Succeeded nor Failed. */
int fk_pod_active(const json_t *pod);
/* Waiting for the default scheduler: unbound, active, not being deleted. */
int fk_pod_pending(const json_t *pod);

/* fk_watch.c ------------------------------------------------------------ */
struct MHD_Response;
typedef struct fk_watch_req {
    int res;
    const char *ns;             /* "" or NULL: every namespace */
    const char *label_selector; /* query parameters as given, or NULL */
    const char *field_selector;
    const char *resource_version;
    const char *timeout_seconds;
    int bookmarks; /* allowWatchBookmarks=true */
    int metadata_only; /* Accept: ...;as=PartialObjectMetadata;g=meta.k8s.io;v=v1 */
} fk_watch_req;
/* A streaming 200 response (new) for a watch, or NULL with err (a bad selector). */
struct MHD_Response *fk_watch_response(fk_store *st, const fk_watch_req *req, char *err,
                                       size_t errlen);

/* fk_logs.c ------------------------------------------------------------- */
typedef struct fk_log_opts {
    int timestamps;  /* keep each line's time */
    int64_t since_s; /* lines written from this second on; INT64_MIN: all */
    long limit;      /* limitBytes; -1: none */
} fk_log_opts;
/* Appends len bytes to the log of key ("ns/name"), each new line stamped with the time;
 * replace: a text that does not extend the log replaces it. Lock held. */
void fk_log_write(fk_store *st, const char *key, const char *data, size_t len, int replace);
/* sinceTime as the apiserver reads it, in whole seconds; -1 when it is not RFC 3339. */
int fk_log_parse_since(const char *v, int64_t *since_s);
/* Where the last tail lines of a stored log begin (tail < 0: 0). */
size_t fk_log_tail_start(const char *stored, long tail);
/* What the kubelet makes a failed container's terminated.message of under
 * terminationMessagePolicy FallbackToLogsOnError: the plain text of the log of key's last 80
 * lines, at most their last 2,048 bytes (new); NULL when the log is empty. Lock held. */
char *fk_log_termination_message(fk_store *st, const char *key);
/* stored[from, to) as pods/log answers it (new, NUL-terminated, *len bytes); at_start: from is
 * at a line's start. limitBytes is the caller's. */
char *fk_log_render(const char *stored, size_t from, size_t to, int at_start,
                    const fk_log_opts *o, size_t *len);

/* A streaming 200 text/plain response (new) for pods/log?follow=true: first
 * (first_len bytes, copied), then the stored log past byte sent as it grows, rendered with o,
 * until the container ends or the pod goes, or o->limit bytes were sent; NULL without
 * memory. */
struct MHD_Response *fk_log_follow_response(fk_store *st, const char *ns, const char *name,
                                            const fk_log_opts *o, const char *first,
                                            size_t first_len, size_t sent);

/* fk_control.c ---------------------------------------------------------- */
/* Handles a request under /fake/ (takes the lock). Returns the HTTP status;
 * *err (static) says why when it is not 200. */
int fk_control(fk_store *st, const char *method, const char *url, const char *label_selector,
               const char *data, size_t len, const char **err);
/* Adds the nodes of doc: a Node, an array, or a list with items. Lock held. */
int fk_load_nodes(fk_store *st, const json_t *doc);
/* Takes the first fault matching the request, if any (takes the lock). */
int fk_take_fault(fk_store *st, const char *method, const char *url, fk_fault *out);

#endif
