/*
 * placement.h - which zone an attempt's gang goes to: a pure function of a node inventory (what
 * the backend's watches on nodes and pods have seen), the profile's node groups and the gang.
 *
 * A gang fits a zone when all its ranks can be packed onto that zone's eligible nodes, each
 * rank's GPUs on one node. A node is eligible when it is ready, schedulable, not tainted for
 * reclaim (aws-node-termination-handler/spot-itn), carries every node label of the GPU type and
 * the capacity type, and has no NoSchedule/NoExecute taint that the rendered pod does not
 * tolerate (render.h: the GPU type's and the capacity type's taints). Among the zones that fit,
 * the one with the most room wins (ties: the profile's zone order, then name order), so that the
 * next gang finds room too.
 *
 * When no zone fits with the nodes that exist, a zone whose node groups (profile.h; same GPU
 * type and capacity, below their max_size) can grow to fit is chosen, the one needing the fewest
 * new nodes: the autoscaler only adds nodes for pods that exist and are pending, so the backend
 * must create the pods pinned there and wait (at most the profile's scale_up_timeout_seconds,
 * then it withdraws the attempt and places it again with that zone in avoid). Otherwise the
 * answer is "wait", with a reason a person can read.
 *
 * A gang without GPUs fits any zone with one eligible node (CPU and memory are left to the
 * Kubernetes scheduler: the inventory does not count them).
 */
#ifndef TY_KUBE_PLACEMENT_H
#define TY_KUBE_PLACEMENT_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty_error.h"
#include "scheduler/kube/profile.h"

#define KUBE_RECLAIM_TAINT "aws-node-termination-handler/spot-itn"

typedef struct kube_node {
    const char *name;
    const char *zone; /* topology.kubernetes.io/zone; NULL: the node is in no zone */
    const kube_label *labels;
    size_t nlabels;
    const kube_taint *taints;
    size_t ntaints;
    int gpus_allocatable; /* status.allocatable nvidia.com/gpu */
    int gpus_requested;   /* summed over the pods bound to the node that have not ended */
    int ready;            /* the Ready condition is True */
    int unschedulable;    /* spec.unschedulable (cordoned) */
} kube_node;

/* A node group's current size as the autoscaler sees it; its other facts come from the profile. */
typedef struct kube_group_size {
    const char *name; /* a profile node group */
    int size;         /* nodes it has or is already bringing up */
} kube_group_size;

typedef struct kube_inventory {
    const kube_node *nodes;
    size_t nnodes;
    const kube_group_size *groups; /* groups not listed count as size 0 */
    size_t ngroups;
} kube_inventory;

typedef struct kube_gang {
    int count;                /* ranks, >= 1 */
    int gpus_per_rank;        /* 0: no GPUs */
    const char *gpu_type;     /* a profile GPU type; NULL when gpus_per_rank is 0 */
    const char *capacity;     /* "spot", "on-demand" or "any"/NULL */
    const char *zone;         /* NULL or "auto": any zone; else only that one */
    const char *const *avoid; /* zones not to pick under "auto" (an attempt withdrawn there) */
    size_t navoid;
} kube_gang;

typedef enum kube_verdict {
    KUBE_PLACE = 1, /* create the attempt pinned to zone */
    KUBE_WAIT,      /* nothing fits now: retry when the inventory changes */
} kube_verdict;

typedef struct kube_placement {
    kube_verdict verdict;
    char zone[64];    /* with KUBE_PLACE */
    int grow_nodes;   /* with KUBE_PLACE: new nodes the zone's groups must add; 0 = none */
    char group[64];   /* with grow_nodes: the group that must grow first */
    char reason[256]; /* KUBE_WAIT: why; KUBE_PLACE with growth: "waiting for ..." */
} kube_placement;

/*
 * Decides where gang goes. All inputs borrowed; *out is filled. TY_EINVAL (msg says why) for a
 * gang that cannot be asked of this cluster (a GPU type or capacity the profile lacks, count < 1)
 * - something to fail the job with, not to wait on.
 */
ty_err kube_place(const kube_profile *p, const kube_inventory *inv, const kube_gang *gang,
                  kube_placement *out, char *msg, size_t msglen);

/*
 * The GPUs of one type of the profile that admission across teams may count (sched_admit):
 * total is what the eligible nodes of the type have (allocatable nvidia.com/gpu) plus what
 * its node groups can still add (max_size minus their size, times gpus_per_node); free is
 * total minus what the pods bound to those nodes request (any tenant's, ours included), each
 * node counted at most at its allocatable. Eligible as kube_place() counts nodes for a gang of
 * that type on any capacity type: ready, schedulable, in a zone of the profile (any zone when
 * it lists none), not tainted for reclaim, carrying the type's labels, tolerating the taints.
 * A coarse view (one number per type, not per zone or node): reserve() stays the final word.
 * TY_EINVAL when gpu_type is not the profile's.
 */
typedef struct kube_type_capacity {
    long total;
    long free; /* <= total */
} kube_type_capacity;
ty_err kube_type_capacity_of(const kube_profile *p, const kube_inventory *inv,
                             const char *gpu_type, kube_type_capacity *out);

/*
 * The gang a normalized job spec (api/spec.c) asks for: workers.count, resources.gpu and
 * placement; out's strings are borrowed from spec, avoid is left empty. TY_EINVAL when spec has
 * no workers.count.
 */
ty_err kube_gang_from_spec(const json_t *spec, kube_gang *out);

#endif
