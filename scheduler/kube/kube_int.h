/*
 * kube_int.h - what the Kubernetes backend's files share (kube_backend.c: the operations and the
 * writers; kube_events.c: informer changes as backend events). Not a public API.
 */
#ifndef TY_SCHEDULER_KUBE_KUBE_INT_H
#define TY_SCHEDULER_KUBE_KUBE_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "scheduler/backend.h"
#include "scheduler/kube/informer.h"
#include "scheduler/kube/inventory.h"
#include "scheduler/kube/kclient.h"
#include "scheduler/kube/kube_backend.h"
#include "scheduler/kube/kube_logs.h"
#include "scheduler/kube/placement.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"

#define KB_GPU "nvidia.com/gpu"
#define KB_LABEL_ZONE "topology.kubernetes.io/zone"
#define KB_LABEL_GROUP "eks.amazonaws.com/nodegroup"
#define KB_ANN_INDEX "batch.kubernetes.io/job-completion-index"
#define KB_ANN_VC_INDEX "volcano.sh/task-index"
#define KB_HIST 8
/* Threads that perform the API writes, each over its own keep-alive connection (the client's
 * pooled handles): creates and deletes of different jobs go out at once, those of one job in
 * the order they were asked. */
#define KB_WRITERS 16
/* spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed, query-escaped. */
#define KB_BOUND_PODS_SELECTOR \
    "spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed"

/* What the backend knows of one rank of the attempt launched last. */
typedef struct krank {
    char pod[BACKEND_NAME_MAX];
    char node[BACKEND_NAME_MAX];
    int placed, running, ended, noticed;
    int unschedulable;             /* its pod's PodScheduled is False (Unschedulable) */
    char pending[BACKEND_DETAIL_MAX]; /* the last PENDING detail sent */
} krank;

struct backend_attempt {
    struct kbe *kb;
    struct backend_attempt *next;
    struct backend_attempt *hnext; /* the next in its bucket of kb->buckets */
    char job_id[32];
    int world, gpus_per_rank;
    int64_t cpu_millis, memory_bytes; /* per rank */
    char gpu_type[64], capacity[32], want_zone[64];
    char zone[64];                 /* the zone booked and pinned; "" when none */
    int booked_pass;               /* book_pending() counted it in the current pass */
    int in_scratch;                /* booked in the inventory's kept scratch (place_on()) */
    char avoid[64];                /* the zone the next placement avoids (reclaimed, withdrawn) */
    int attempt;                   /* the attempt launched last (0 before) */
    int launched_once;
    int live;                      /* its events are wanted: launched, not failed or withdrawn */
    int stopping, gang_failed;
    int grow_nodes;
    char group[64], grow_reason[256];
    char place_note[192];          /* of the placement: a group not grown, named otherwise */
    int fit_ranks;                 /* of the placement: ranks that fit on existing nodes */
    kube_group_need needs[KUBE_NEEDS_MAX]; /* of the placement: the groups it waits for */
    int nneeds;
    int64_t grow_deadline_ms;      /* 0: not waiting for a node group */
    int64_t unsched_since_ms;      /* a rank's pod has been unschedulable since; 0: none is */
    char unsched_msg[BACKEND_DETAIL_MAX]; /* the scheduler's last words for it */
    krank *ranks;
};

typedef enum kb_act_kind { KB_ACT_CREATE = 1, KB_ACT_DELETE } kb_act_kind;

/* One API write for a writer; self-contained (the attempt may be released meanwhile). */
typedef struct kb_action {
    struct kb_action *next;
    kb_act_kind kind;
    char job_id[32];
    int attempt;
    char name[KUBE_NAME_MAX];
    char *body;                    /* CREATE: the workload, as JSON text: serialized and freed
                                      where it was rendered, which is cheaper for malloc than
                                      freeing a tree on another thread */
    json_t *secret;                /* CREATE: the attempt's Secret (its values), created once
                                      the workload exists and owned by it; NULL for none */
    int grace;                     /* DELETE: gracePeriodSeconds, -1 for the default */
    int hard;                      /* DELETE: the pods too, at once */
    int report;                    /* DELETE: a failure is a STOP_FAILED (a stop asked it) */
} kb_action;

/* A byte per node of the inventory's view, worked out from the nodes' labels and taints, so
 * kept until the view's shape changes (kube_inv_view.shape): kb_node_bytes_of(). */
typedef struct kb_node_bytes {
    unsigned char *v;
    size_t n, cap;
    unsigned long shape;
    int valid;
} kb_node_bytes;

/* What the labels and taints of the inventory's nodes decide for one GPU type and capacity
 * (kube_class_match()), as of the view's shape. */
typedef struct kb_match {
    const kube_node_class *gpu, *cap; /* the profile's; NULL: none, any */
    kb_node_bytes match;
} kb_match;

#define KB_MATCHES 32

typedef struct kbe {
    backend base;
    const kube_profile *p;
    char ns[64];
    ty_kclient *c;
    ty_informer *nodes, *pods, *jobs;
    ty_informer *bound;            /* every bound, unfinished pod of the cluster, slim */
    json_t *pod_pick, *job_pick;   /* what the watches parse of pods and Jobs (kpick.h) */
    kube_logs *logs;               /* the ranks' logs, streamed to files; NULL: none kept */
    kube_inv *inv;                 /* nodes and GPUs in use, fed by the informers' callbacks */
    kb_match matches[KB_MATCHES];  /* read and written only in kube_inv_with()'s callbacks,
                                      which its lock serializes */
    size_t nmatches;
    kb_node_bytes zones;           /* kube_zone_index() of the view's nodes */
    kb_node_bytes unknown;         /* what classify() says of each node with GPUs (1: GPU type,
                                      2: node group unknown) */
    pthread_mutex_t svc_mu;        /* the rank Service's check (ensure_rank_service()) */
    int64_t svc_known_ms;          /* when it was last known to exist (0: not yet); svc_mu */
    int64_t svc_recheck_ms;        /* kube_backend_config's rank_service_recheck_ms */
    pthread_mutex_t mu;            /* everything below */
    pthread_cond_t cv;
    backend_attempt *attempts;
    backend_attempt **buckets;     /* the same attempts by job id (kb_find()), chained by hnext */
    size_t nbuckets, nattempts;
    int used_ranks;
    backend_event *q;
    uint64_t *qt;                  /* per event: when its informer delivered the change (mono ns) */
    size_t qlen, qcap;
    int efd;
    int nodes_synced;              /* the nodes' first list has been delivered */
    kb_action *ahead, **atail;     /* the writes not taken yet, in the order asked */
    char busy[KB_WRITERS][32];     /* the job of each writer's write in flight ("" idle) */
    int64_t growth_checked_ms;     /* when check_growth() last ran */
    int64_t growth_due_ms;         /* no attempt's scale-up or unschedulable clock runs out
                                      before this (0: none runs): kb_growth_due() */
    int quit, nworkers;
    pthread_t workers[KB_WRITERS];
    uint64_t created, adopted, launch_failures, withdrawn;
    json_t *placements;            /* result -> count */
    unsigned long book_epoch;      /* changes when a booking kept in the inventory's scratch no
                                      longer holds (an attempt released, launched, withdrawn or
                                      placed again; nodes excluded): kube_inv_with_kept() */
    json_t *excluded;              /* node name -> true: quarantined (exclude_nodes()) */
    char **excluded_names;         /* the same names, for rendering */
    size_t nexcluded;
    json_t *unknown_logged;        /* node name -> true: logged as unknown to the profile */
    uint64_t hist[KB_HIST + 1], hist_count;
    double hist_sum;
} kbe;

void kb_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* b's bytes if they were worked out for this view's shape (*fresh 0); else b's buffer grown to
 * the view's nodes (*fresh 1): the caller fills it, then kb_node_bytes_done(). NULL: out of
 * memory. In the callbacks of kube_inv_with() and kube_inv_read(), which the inventory's lock
 * serializes. */
unsigned char *kb_node_bytes_of(kb_node_bytes *b, const kube_inv_view *view, int *fresh);
void kb_node_bytes_done(kb_node_bytes *b, const kube_inv_view *view);
/* A scale-up or unschedulable clock runs out at t (> 0): check_growth() walks the attempts
 * then; under kb->mu. */
void kb_growth_due(kbe *kb, int64_t t);

/* Under kb->mu. */
void kb_push(kbe *kb, backend_event *ev, uint64_t t0);
void kb_push_capacity(kbe *kb);
backend_attempt *kb_find(kbe *kb, const char *job_id, int attempt);
void kb_end_rank(kbe *kb, backend_attempt *a, int r, backend_event *ev, uint64_t t0);
/* A pod of ours as it is now (deleted: its last state): the events it means. Under kb->mu. */
void kb_pod_changed(kbe *kb, const json_t *pod, int deleted, uint64_t t0);

/* The informers' callbacks (they take kb->mu). */
void kb_pod_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj);
void kb_node_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj);
void kb_bound_pod_event(void *ud, ty_inf_type type, const json_t *old_obj,
                        const json_t *new_obj);
json_t *kb_bound_pod_slim(void *ud, const json_t *pod);
/* What the namespace's pod and Job informers and the node informer keep (their transforms):
 * new slim objects, NULL without memory. */
json_t *kb_pod_slim(void *ud, const json_t *pod);
json_t *kb_node_slim(void *ud, const json_t *node);
json_t *kb_job_slim(void *ud, const json_t *job);
/* What the informers' watches parse of a pod and of a Job (kpick.h): new, NULL without
 * memory. Every field the slim records above read is in them. */
json_t *kb_pod_pick(void);
json_t *kb_job_pick(void);

/* kube_cluster.c: the cluster view, the excluded nodes, the nodes the profile does not know. */
ty_err kb_cluster(backend *b, backend_cluster *out);
void kb_exclude_nodes(backend *b, const char *const *nodes, size_t n);
/* Marks the excluded nodes of a scratch view unschedulable, so placement leaves them out.
 * Under kb->mu. */
void kb_mark_excluded(kbe *kb, kube_node *nodes, size_t nnodes);
/* A copy of the excluded names (new, kb_excluded_free()), NULL and *n 0 when none. Takes
 * kb->mu. */
char **kb_excluded_copy(kbe *kb, size_t *n);
void kb_excluded_free(char **names, size_t n);
/* A node added, changed or deleted: logs it once when the profile does not know it. Takes
 * kb->mu. */
void kb_note_node(kbe *kb, const json_t *old_obj, const json_t *node, int deleted);
/* GPU nodes whose group, and whose GPU product, the profile does not know. Not under kb->mu. */
ty_err kb_unknown_counts(kbe *kb, size_t *unknown_group, size_t *unknown_gpu);

/* Pure helpers. */
int kb_pod_rank(const json_t *pod);

#endif
