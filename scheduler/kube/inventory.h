/*
 * inventory.h - the cluster's nodes and the GPUs their pods use, as placement (placement.h)
 * reads them, kept up to date change by change.
 *
 * The node and pod informers (informer.h) hand every change to kube_inv_node() and
 * kube_inv_pod(); a placement decision then reads a consistent view through kube_inv_with()
 * without parsing or copying a single object. Rebuilding the view from the informers' caches
 * for every decision costs O(nodes x pods) and allocates every node's labels again: with 3,000
 * nodes and 2,000 pods that was most of the backend's CPU and capped it at about 13 jobs a
 * second (bench/bench_kube).
 *
 * What a node contributes: its name, zone (topology.kubernetes.io/zone), labels, taints,
 * allocatable nvidia.com/gpu, cpu, memory, ephemeral-storage and pods, Ready condition,
 * spec.unschedulable, and the node group named by its eks.amazonaws.com/nodegroup label: counted
 * in that group's size when it is one of the profile's, else kept as the node's stray_group. What a pod contributes: one pod slot, the nvidia.com/gpu it
 * asks for (kube_inv_pod_gpus()) and its CPU, memory and ephemeral-storage requests
 * (kube_inv_pod_requests()), counted on spec.nodeName while it is bound and has not ended (phase
 * neither Succeeded nor Failed), whoever's pod it is: the backend feeds it every bound pod of the
 * cluster, so that what other tenants use is not seen as free. Pods are keyed by namespace and
 * name, so a pod reported twice counts once.
 * Two informers report the same pods out of step with each other, so a change that comes late
 * is ignored: any change for a pod (same uid) seen ended or deleted (the last 4,096 of them are
 * remembered), and an unbound state for a pod counted bound.
 * A pod may be seen before its node: its GPUs count from the moment the node appears.
 *
 * Threads: every function may be called from any thread; the view passed to kube_inv_with()'s
 * callback is valid only during the call, which holds the inventory's lock (so the callback
 * must be short and must not call into the inventory).
 */
#ifndef TY_SCHEDULER_KUBE_INVENTORY_H
#define TY_SCHEDULER_KUBE_INVENTORY_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty_error.h"
#include "scheduler/kube/placement.h"

typedef struct kube_inv kube_inv;

/* groups: the profile's node group names (copied), whose sizes the view reports. */
ty_err kube_inv_new(const char *const *groups, size_t ngroups, kube_inv **out);
/* Accepts NULL. */
void kube_inv_free(kube_inv *inv);

/*
 * A node added or changed (node), or deleted (node NULL, old the last state). TY_ENOMEM.
 * node is borrowed, but its metadata.labels and spec.taints are kept by reference until the
 * node changes again or is deleted: they must not be changed afterwards (an informer's cached
 * objects are not; jansson's reference counts are atomic, so the informer may drop its own
 * reference on its thread meanwhile).
 */
ty_err kube_inv_node(kube_inv *inv, const json_t *old, const json_t *node);
/*
 * A pod added or changed (pod), or deleted (pod NULL, old the last state). freed (may be NULL)
 * gets what the change gave back on a node the pod was counted on: the GPUs, or 1 for a pod
 * without GPUs that left it (its pod slot, CPU and memory); 0 when nothing: what a waiting gang
 * may now use. TY_ENOMEM.
 */
ty_err kube_inv_pod(kube_inv *inv, const json_t *old, const json_t *pod, int *freed);

/*
 * Calls fn with the current view: every node (gpus_requested included) and the size of every
 * profile group (nodes carrying its label). The view's nodes are a scratch copy the callback
 * may change (e.g. to book GPUs of gangs whose pods are not bound yet); its strings belong to
 * the inventory. Returns what fn returns, or TY_ENOMEM.
 */
typedef struct kube_inv_view {
    kube_node *nodes;             /* a scratch copy: the callback may change it */
    size_t nnodes;
    const kube_group_size *groups; /* every profile group, in the order given to new() */
    size_t ngroups;
    const kube_inv *inv;          /* for kube_inv_job_pods() */
    unsigned long shape; /* changes whenever a node comes or goes or its labels or taints change:
                            what kube_class_match() computed of the nodes holds while it stays */
    int kept; /* kube_inv_with_kept(): the nodes are as the key's last call left them */
} kube_inv_view;
typedef ty_err (*kube_inv_fn)(void *ud, kube_inv_view *view);
ty_err kube_inv_with(kube_inv *inv, kube_inv_fn fn, void *ud);
/*
 * The same, except that the scratch copy is handed out as the last call with the same key
 * left it (view.kept 1) while nothing changed since: no node and nothing counted on one (no
 * pod bound or ended), no other call used the scratch, and the caller's epoch is the same (the
 * caller changes it when what it wrote in the scratch no longer holds). Else a fresh copy
 * (view.kept 0). For a caller that books into the scratch and books again what is new only.
 */
ty_err kube_inv_with_kept(kube_inv *inv, const void *key, unsigned long epoch, kube_inv_fn fn,
                          void *ud);
/*
 * The same view over the inventory's own nodes rather than a copy, for a callback that only
 * reads them and must not change them: what GET /v1/cluster and every /metrics scrape count.
 * It copies nothing (3,000 nodes are about 400 KB) and leaves a kept scratch copy kept.
 */
ty_err kube_inv_read(kube_inv *inv, kube_inv_fn fn, void *ud);

/*
 * The nvidia.com/gpu a pod asks for, as the scheduler counts it: the sum over its containers
 * (each its limit, else its request), or the largest of its init containers when that is more.
 * A slim pod (below) answers what it recorded.
 */
int kube_inv_pod_gpus(const json_t *pod);
/*
 * The CPU (millicores), memory and ephemeral-storage (bytes) a pod requests, as the scheduler
 * counts them: the sum over its containers (each its request, else its limit), or the largest
 * of its init containers for each resource when that is more, plus spec.overhead; out->pods is
 * 1. A slim pod (below) answers what it recorded.
 */
void kube_inv_pod_requests(const json_t *pod, kube_res *out);
/*
 * What the inventory needs of a pod, as a new object that kube_inv_pod() takes in place of the
 * pod: metadata (namespace, name, uid, resourceVersion, the trainyard.io/job-id label),
 * spec.nodeName, status.phase,
 * KUBE_INV_SLIM_GPUS, the pod's GPUs, and KUBE_INV_SLIM_REQUESTS, [CPU m, memory, ephemeral].
 * About 300 bytes, where a pod is several KiB: an informer of every pod of a cluster keeps this
 * (its transform). NULL without memory.
 */
#define KUBE_INV_SLIM_GPUS "trainyard.io/gpus"
#define KUBE_INV_SLIM_REQUESTS "trainyard.io/requests"
json_t *kube_inv_pod_slim(const json_t *pod);
/*
 * How many pods labelled trainyard.io/job-id job_id are counted (bound, not ended), whichever
 * informer reported them first: the ranks of a reservation the nodes' counts hold already. Only
 * during kube_inv_with()'s callback, on its view.
 */
int kube_inv_job_pods(const kube_inv_view *view, const char *job_id);
/* A node's allocatable nvidia.com/gpu, and whether its Ready condition is True. */
int kube_inv_node_gpus(const json_t *node);
/* A node's allocatable cpu (millicores), memory, ephemeral-storage and pods (0 where absent, as
 * the scheduler reads them). */
void kube_inv_node_allocatable(const json_t *node, kube_res *out);
int kube_inv_node_ready(const json_t *node);

#endif
