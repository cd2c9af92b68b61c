/*
 * placement.h - which zone an attempt's gang goes to: a pure function of a node inventory (what
 * the backend's watches on nodes and pods have seen), the profile's node groups and the gang.
 *
 * Resources are counted as kube-scheduler's NodeResourcesFit counts them: on each node, its
 * allocatable nvidia.com/gpu, CPU, memory, ephemeral storage and pod slots (allocatable.pods)
 * minus what the pods bound there request, whoever's they are. A rank fits a node when the pod
 * slot and every resource it asks for (a resource it asks none of is not checked) fit what is
 * left. A gang fits a zone when all its ranks can be packed onto that zone's eligible nodes,
 * each rank on one node. A node is eligible when it is ready, schedulable, not tainted for
 * reclaim (aws-node-termination-handler/spot-itn), carries every node label of the GPU type and
 * the capacity type, and has no NoSchedule/NoExecute taint that the rendered pod does not
 * tolerate (render.h: the GPU type's and the capacity type's taints). Among the zones that fit,
 * the one with the most room (ranks of this gang that would still fit) wins (ties: the profile's
 * zone order, then name order), so that the next gang finds room too. Gangs with and without
 * GPUs follow the same rule.
 *
 * When no zone fits with the nodes that exist, a zone whose node groups (profile.h; same GPU
 * type and capacity, below their max_size) can grow to fit is chosen, the one needing the fewest
 * new nodes: the autoscaler only adds nodes for pods that exist and are pending, so the backend
 * must create the pods pinned there and wait (at most the profile's scale_up_timeout_seconds,
 * then it withdraws the attempt and places it again with that zone in avoid). Node groups are
 * GPU groups: a gang without GPUs never waits for one. Otherwise the answer is "wait", with a
 * reason a person can read.
 *
 * A profile group with no node is not counted as able to grow when nodes stand where its nodes
 * would (its zone, GPU type and capacity type) under an eks.amazonaws.com/nodegroup name the
 * profile does not have (kube_group_mismatch()): the profile names the cluster's group
 * otherwise, and counting both the nodes that are there and the group's whole max_size counts
 * the same capacity twice. The nodes themselves count as any others (eligibility is by labels
 * and taints, not by group). The placement says so in `note`.
 */
#ifndef TY_KUBE_PLACEMENT_H
#define TY_KUBE_PLACEMENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "scheduler/kube/profile.h"

#define KUBE_RECLAIM_TAINT "aws-node-termination-handler/spot-itn"

/* What the scheduler counts besides GPUs: of a node (allocatable, or requested by its pods) or
 * of one rank. */
typedef struct kube_res {
    int64_t cpu_millis;
    int64_t memory_bytes;
    int64_t ephemeral_bytes; /* ephemeral-storage */
    int64_t pods;            /* pod slots: allocatable.pods, or the pods bound there */
} kube_res;

typedef struct kube_node {
    const char *name;
    const char *zone; /* topology.kubernetes.io/zone; NULL: the node is in no zone */
    const kube_label *labels;
    size_t nlabels;
    const kube_taint *taints;
    size_t ntaints;
    int gpus_allocatable; /* status.allocatable nvidia.com/gpu */
    int gpus_requested;   /* summed over the pods bound to the node that have not ended */
    kube_res allocatable; /* status.allocatable cpu, memory, ephemeral-storage, pods */
    kube_res requested;   /* summed over the same pods as gpus_requested (pods: their number) */
    int ready;            /* the Ready condition is True */
    int unschedulable;    /* spec.unschedulable (cordoned) */
    const char *stray_group; /* its eks.amazonaws.com/nodegroup label when that names no node
                                group of the profile, else NULL (inventory.h fills it) */
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
    /* NULL, or kube_class_match() of these nodes for the GPU type and capacity the call asks
     * about (kube_place(): the gang's; kube_type_capacity_of(): the type's, any capacity):
     * what their labels and taints decide, then not worked out again for every node. */
    const unsigned char *match;
    /* NULL, or kube_zone_index() of these nodes: each node's zone by its position in the
     * profile's zones, then not compared by name for every node and zone. */
    const unsigned char *zone_of;
} kube_inventory;

typedef struct kube_gang {
    int count;                /* ranks, >= 1 */
    int gpus_per_rank;        /* 0: no GPUs */
    const char *gpu_type;     /* a profile GPU type; NULL when gpus_per_rank is 0 */
    int64_t cpu_millis;       /* per rank: what its pod requests (0: not checked) */
    int64_t memory_bytes;
    int64_t ephemeral_bytes;
    const char *capacity;     /* "spot", "on-demand" or "any"/NULL */
    const char *zone;         /* NULL or "auto": any zone; else only that one */
    const char *const *avoid; /* zones not to pick under "auto" (an attempt withdrawn there) */
    size_t navoid;
} kube_gang;

typedef enum kube_verdict {
    KUBE_PLACE = 1, /* create the attempt pinned to zone */
    KUBE_WAIT,      /* nothing fits now: retry when the inventory changes */
} kube_verdict;

/* One node group a placement waits for, and by how many nodes. */
typedef struct kube_group_need {
    char group[64];
    int nodes;
} kube_group_need;

#define KUBE_NEEDS_MAX 4

typedef struct kube_placement {
    kube_verdict verdict;
    char zone[64];    /* with KUBE_PLACE */
    int fit_ranks;    /* with KUBE_PLACE: ranks that fit on the zone's existing nodes (at most
                         the gang's count; all of them when grow_nodes is 0) */
    int grow_nodes;   /* with KUBE_PLACE: new nodes the zone's groups must add; 0 = none */
    char group[64];   /* with grow_nodes: the group that must grow first */
    kube_group_need needs[KUBE_NEEDS_MAX]; /* with grow_nodes: the groups, first ones */
    int nneeds;
    char reason[256]; /* KUBE_WAIT: why; KUBE_PLACE with growth: "waiting for ..." */
    char note[192];   /* "" or, when a group was not counted as able to grow because the
                         cluster names it otherwise (kube_group_mismatch()), which and why */
} kube_placement;

/*
 * Decides where gang goes. All inputs borrowed; *out is filled. TY_EINVAL (msg says why) for a
 * gang that cannot be asked of this cluster (a GPU type or capacity the profile lacks, count < 1)
 * - something to fail the job with, not to wait on.
 */
ty_err kube_place(const kube_profile *p, const kube_inventory *inv, const kube_gang *gang,
                  kube_placement *out, char *msg, size_t msglen);

/*
 * The most one rank of g could ever get of each resource besides GPUs: the largest
 * allocatable CPU, memory and ephemeral storage among the nodes its pods may use by labels and
 * taints (g's GPU type, none when it asks no GPUs; any capacity type) in the profile's zones
 * (any zone when it lists none), whether ready, cordoned or busy now. Each with the node that has
 * it (borrowed from inv; NULL and 0 when no node qualifies: nothing is known). TY_EINVAL for a
 * GPU type the profile lacks.
 */
typedef struct kube_largest {
    int64_t cpu_millis, memory_bytes, ephemeral_bytes;
    const char *cpu_node, *memory_node, *ephemeral_node;
} kube_largest;
ty_err kube_largest_node(const kube_profile *p, const kube_inventory *inv, const kube_gang *g,
                         kube_largest *out);

/*
 * The node groups the cluster has in place of profile group grp: when no node carries grp's
 * name (its size in inv is 0) and nodes of grp's zone carrying the labels of its GPU type and
 * of its capacity type name in their eks.amazonaws.com/nodegroup label a group the profile does
 * not have - a profile written with other names than the cluster's (p4d-od-2a against
 * p4d-ondemand-2a). names gets them, each once, at most max (>= 1), borrowed from the nodes;
 * returns how many it found (0: no mismatch). Readiness and cordons do not matter: the node says
 * what the group is called either way. The nodes' stray_group says which groups the profile
 * lacks, so that a cluster whose nodes are all in the profile's groups costs one test a node.
 */
size_t kube_group_mismatch(const kube_profile *p, const kube_inventory *inv,
                           const kube_node_group *grp, const char **names, size_t max);

/*
 * The GPUs of one type of the profile that admission across teams may count (sched_admit):
 * total is what the eligible nodes of the type have (allocatable nvidia.com/gpu) plus what
 * its node groups can still add (max_size minus their size, times gpus_per_node; nothing for a
 * group kube_group_mismatch() finds named otherwise by the cluster); free is
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
 * Books what pods of gang g not bound yet will take, on the eligible nodes of zone (as the
 * scheduler would bind them: each rank on the node with the most room for it), by adding their
 * requests to the nodes' requested counts; so that a placement decided next does not count the
 * same room twice. A booker is made once per (zone, GPU type, capacity) of the gangs to book and
 * then books each of them in turn: O(nodes) to make, O(log nodes) per rank. Ranks that fit no
 * node are not booked (the scheduler leaves them Pending). Returns the ranks booked. The booker
 * keeps each node's room: nothing but kube_book() may change the nodes while it lives.
 */
typedef struct kube_booker kube_booker;
/* match: NULL, or kube_class_match() of the nodes for g's GPU type and capacity; zone_of: NULL,
 * or kube_zone_index() of the nodes. */
ty_err kube_booker_new(const kube_profile *p, kube_node *nodes, size_t nnodes,
                       const unsigned char *match, const unsigned char *zone_of,
                       const kube_gang *g, const char *zone, kube_booker **out);
int kube_book(kube_booker *b, const kube_gang *g, int ranks);
void kube_booker_free(kube_booker *b);

/*
 * The part of eligibility that a node's labels and taints decide, for g's GPU type (none when
 * g asks no GPUs) and capacity: match[i] is 1 when nodes[i] is not tainted for reclaim,
 * tolerates the taints and carries the labels, else 0 (readiness, cordons and zones are
 * checked by each call). It changes only when labels or taints do: a caller may keep it across
 * decisions and hand it to the calls above. TY_EINVAL for a type or capacity the profile lacks.
 */
ty_err kube_class_match(const kube_profile *p, const kube_node *nodes, size_t nnodes,
                        const kube_gang *g, unsigned char *match);

/*
 * Each node's zone as a position in the profile's zones: zone_of[i] is 1 + the position of
 * nodes[i]'s zone in p->zones, or 0 when it is in none of them (no zone, or one the profile does
 * not list). It changes only when labels do (the zone is one): a caller may keep it with a class
 * match. TY_EINVAL when the profile lists no zones or more than KUBE_ZONE_INDEX_MAX (the calls
 * then compare zones by name).
 */
#define KUBE_ZONE_INDEX_MAX 254
ty_err kube_zone_index(const kube_profile *p, const kube_node *nodes, size_t nnodes,
                       unsigned char *zone_of);

/* Whether a rank of g fits on node n's free resources (eligibility aside). */
int kube_rank_fits(const kube_node *n, const kube_gang *g);

/*
 * The gang a normalized job spec (api/spec.c) asks for: workers.count, resources.gpu and
 * placement, resources.cpu and resources.memory; out's strings are borrowed from spec, avoid is
 * left empty. TY_EINVAL when spec has no workers.count.
 */
ty_err kube_gang_from_spec(const json_t *spec, kube_gang *out);

#endif
