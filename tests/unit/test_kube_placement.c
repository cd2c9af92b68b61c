/*
 * test_kube_placement.c - scheduler/kube/placement.c: which zone a gang goes to, against the
 * example profile's cluster (us-west-2a/b/c, GPU node groups scaling from 0 to 4). What a user
 * notices: the whole gang lands in one zone that has room for it; nodes being reclaimed, not
 * ready or cordoned do not count; a gang that fits nowhere waits with a sentence saying why; on a
 * cluster that scales from zero, a gang is placed where the groups can grow, and says so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/kube/placement.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"

static kube_profile *prof;

/* ---- a small cluster builder ---- */

#define MAX_NODES 16
#define MAX_LABELS 6

typedef struct cluster {
    kube_node nodes[MAX_NODES];
    kube_label labels[MAX_NODES][MAX_LABELS];
    kube_taint taints[MAX_NODES][3];
    size_t n;
    kube_group_size groups[32];
    size_t ngroups;
} cluster;

static const kube_taint gpu_taint = {"nvidia.com/gpu", "present", "NoSchedule"};
static const kube_taint reclaim_taint = {"aws-node-termination-handler/spot-itn", "true",
                                         "NoSchedule"};

#define GI ((int64_t)1 << 30)
/* What a p4d.24xlarge and an m5.4xlarge leave for pods on EKS. */
static const kube_res P4D = {95690, 1100 * GI, 500 * GI, 110};
static const kube_res M5 = {15890, 58 * GI, 100 * GI, 110};

/* A p4d (A100) node as EKS labels it (a CPU node when product is NULL); spot or on-demand.
 * Returns it for further changes. */
static kube_node *node(cluster *c, const char *zone, const char *product, int spot, int alloc,
                       int requested)
{
    assert_true(c->n < MAX_NODES);
    size_t i = c->n++;
    kube_label *l = c->labels[i];
    size_t nl = 0;
    l[nl++] = (kube_label){"topology.kubernetes.io/zone", (char *)zone};
    l[nl++] = (kube_label){"eks.amazonaws.com/capacityType", spot ? "SPOT" : "ON_DEMAND"};
    l[nl++] = (kube_label){"karpenter.sh/capacity-type", spot ? "spot" : "on-demand"};
    if (product) {
        l[nl++] = (kube_label){"nvidia.com/gpu.product", (char *)product};
        l[nl++] = (kube_label){"node.kubernetes.io/instance-type",
                               !strcmp(product, "NVIDIA-A100-SXM4-40GB") ? "p4d.24xlarge"
                                                                         : "p5.48xlarge"};
        c->taints[i][0] = gpu_taint;
    }
    kube_node *n = &c->nodes[i];
    *n = (kube_node){.name = "node",
                     .zone = zone,
                     .labels = l,
                     .nlabels = nl,
                     .taints = c->taints[i],
                     .ntaints = product ? 1 : 0,
                     .gpus_allocatable = alloc,
                     .gpus_requested = requested,
                     .allocatable = product ? P4D : M5,
                     .ready = 1,
                     .unschedulable = 0};
    return n;
}

#define A100 "NVIDIA-A100-SXM4-40GB"
#define H100 "NVIDIA-H100-80GB-HBM3"

static void group(cluster *c, const char *name, int size)
{
    c->groups[c->ngroups++] = (kube_group_size){name, size};
}

/* Every group of the example profile at its maximum: nothing can grow. */
static void all_groups_full(cluster *c)
{
    for (size_t i = 0; i < prof->ngroups && c->ngroups < 32; i++)
        group(c, prof->groups[i].name, prof->groups[i].max_size);
}

/* Places g three times, working the labels, taints and zones out node by node, reading the
 * labels and taints from kube_class_match(), and reading the zones from kube_zone_index() too:
 * every case below checks that all three decide the same, reason included. */
static kube_placement place(cluster *c, kube_gang g)
{
    kube_inventory inv = {c->nodes, c->n, c->groups, c->ngroups, NULL, NULL};
    kube_placement out, kept, indexed;
    unsigned char match[64], zone_of[64];
    char msg[256] = "";
    if (kube_place(prof, &inv, &g, &out, msg, sizeof msg) != TY_OK)
        fail_msg("kube_place: %s", msg);
    assert_true(c->n <= sizeof match);
    assert_int_equal(kube_class_match(prof, c->nodes, c->n, &g, match), TY_OK);
    inv.match = match;
    if (kube_place(prof, &inv, &g, &kept, msg, sizeof msg) != TY_OK)
        fail_msg("kube_place with a class match: %s", msg);
    assert_memory_equal(&out, &kept, sizeof out);
    assert_int_equal(kube_zone_index(prof, c->nodes, c->n, zone_of), TY_OK);
    inv.zone_of = zone_of;
    if (kube_place(prof, &inv, &g, &indexed, msg, sizeof msg) != TY_OK)
        fail_msg("kube_place with a zone index: %s", msg);
    assert_memory_equal(&out, &indexed, sizeof out);
    return out;
}

static kube_gang a100_spot(int count, int gpus)
{
    return (kube_gang){
        .count = count, .gpus_per_rank = gpus, .gpu_type = "a100", .capacity = "spot"};
}

/* ---- placing on nodes that exist ---- */

static void test_the_zone_with_most_room_fits_the_whole_gang(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", A100, 1, 8, 0);
    node(&c, "us-west-2b", A100, 1, 8, 0);
    node(&c, "us-west-2b", A100, 1, 8, 2);
    node(&c, "us-west-2c", A100, 1, 8, 8);
    kube_placement p = place(&c, a100_spot(4, 2));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2b");
    assert_int_equal(p.grow_nodes, 0);
    /* Equal room: the profile's zone order decides. */
    c.nodes[2].gpus_requested = 8;
    p = place(&c, a100_spot(4, 2));
    assert_string_equal(p.zone, "us-west-2a");
}

static void test_no_zone_fits_says_why(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", A100, 1, 8, 7);
    node(&c, "us-west-2b", A100, 1, 8, 6);
    node(&c, "us-west-2c", A100, 0, 8, 0); /* on-demand: not for a spot gang */
    kube_placement p = place(&c, a100_spot(4, 1));
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.reason, "no zone has 4 free NVIDIA-A100-SXM4-40GB GPUs on spot nodes; "
                                  "the most is 2 in us-west-2b");

    /* A named zone answers for itself. */
    kube_gang g = a100_spot(4, 1);
    g.zone = "us-west-2a";
    p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.reason, "zone us-west-2a does not have 4 free NVIDIA-A100-SXM4-40GB "
                                  "GPUs on spot nodes; it has 1");

    /* No matching node at all. */
    cluster empty = {0};
    all_groups_full(&empty);
    p = place(&empty, a100_spot(1, 8));
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(
        p.reason, "no zone has 8 free NVIDIA-A100-SXM4-40GB GPUs on spot nodes; none has any");
}

static void test_a_ranks_gpus_share_one_node(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    /* 9 free GPUs in the zone, but no node with 4 of them. */
    node(&c, "us-west-2a", A100, 1, 8, 5);
    node(&c, "us-west-2a", A100, 1, 8, 5);
    node(&c, "us-west-2a", A100, 1, 8, 5);
    kube_placement p = place(&c, a100_spot(2, 4));
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.reason, "no zone has room for 2 ranks of 4 NVIDIA-A100-SXM4-40GB GPUs "
                                  "on one node each on spot nodes; the most is 0 in us-west-2a");
    kube_gang g = a100_spot(2, 4);
    g.zone = "us-west-2a";
    p = place(&c, g);
    assert_string_equal(p.reason, "zone us-west-2a has no room for 2 ranks of 4 "
                                  "NVIDIA-A100-SXM4-40GB GPUs on one node each on spot nodes; it "
                                  "has room for 0");
    /* Three ranks of three GPUs do fit: one per node. */
    p = place(&c, a100_spot(3, 3));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2a");
}

/* Each kind of node that must not count, in a zone that would otherwise fit. */
static void test_nodes_that_do_not_count(void **state)
{
    (void)state;
    static const char *const kinds[] = {"reclaim",   "not ready",         "cordoned",     "H100",
                                        "on-demand", "untolerated taint", "overcommitted"};
    static const kube_taint other = {"dedicated", "team-a", "NoExecute"};
    static const kube_taint soft = {"dedicated", "team-a", "PreferNoSchedule"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        cluster c = {0};
        all_groups_full(&c);
        kube_node *n =
            node(&c, "us-west-2c", !strcmp(kinds[k], "H100") ? H100 : A100,
                 strcmp(kinds[k], "on-demand") != 0, 8, !strcmp(kinds[k], "overcommitted") ? 9 : 0);
        if (!strcmp(kinds[k], "reclaim")) {
            c.taints[0][1] = reclaim_taint;
            n->ntaints = 2;
        } else if (!strcmp(kinds[k], "not ready")) {
            n->ready = 0;
        } else if (!strcmp(kinds[k], "cordoned")) {
            n->unschedulable = 1;
        } else if (!strcmp(kinds[k], "untolerated taint")) {
            c.taints[0][1] = other;
            n->ntaints = 2;
        }
        kube_placement p = place(&c, a100_spot(1, 1));
        if (p.verdict != KUBE_WAIT)
            fail_msg("a %s node was counted", kinds[k]);
        assert_non_null(strstr(p.reason, "none has any"));
    }
    /* A PreferNoSchedule taint only steers the scheduler: the node counts. */
    cluster c = {0};
    all_groups_full(&c);
    kube_node *n = node(&c, "us-west-2c", A100, 1, 8, 0);
    c.taints[0][1] = soft;
    n->ntaints = 2;
    assert_int_equal(place(&c, a100_spot(1, 1)).verdict, KUBE_PLACE);
}

static void test_avoided_and_named_zones(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", A100, 1, 8, 0);
    node(&c, "us-west-2b", A100, 1, 8, 0);
    node(&c, "us-west-2b", A100, 1, 8, 0);
    /* The attempt withdrawn from us-west-2b goes elsewhere. */
    static const char *const avoid_b[] = {"us-west-2b"};
    kube_gang g = a100_spot(8, 1);
    g.avoid = avoid_b;
    g.navoid = 1;
    kube_placement p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2a");
    /* A zone the user names is the only candidate. */
    g = a100_spot(8, 1);
    g.zone = "us-west-2a";
    p = place(&c, g);
    assert_string_equal(p.zone, "us-west-2a");
    /* Every zone avoided. */
    static const char *const avoid_all[] = {"us-west-2a", "us-west-2b", "us-west-2c"};
    g = a100_spot(1, 1);
    g.avoid = avoid_all;
    g.navoid = 3;
    p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_non_null(strstr(p.reason, "no zone is left to try"));
}

static void test_ranks_without_gpus(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", A100, 0, 8, 0); /* tainted for GPUs only */
    kube_gang g = {.count = 4, .gpus_per_rank = 0, .capacity = "on-demand"};
    kube_placement p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.reason, "no zone has a ready, schedulable node on on-demand nodes that "
                                  "a rank without GPUs may use");
    node(&c, "us-west-2c", NULL, 0, 0, 0); /* a CPU node */
    p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2c");
}

/* ---- every resource the scheduler counts ---- */

#define MI ((int64_t)1 << 20)

/* One CPU node per zone, each with what the row says is already requested there. */
typedef struct res_row {
    const char *what;
    kube_res used[3]; /* on us-west-2a, 2b, 2c */
    kube_gang gang;
    const char *zone;   /* NULL: wait */
    const char *reason; /* with a wait: a part of the sentence */
} res_row;

static void test_cpu_memory_storage_and_pod_slots_count(void **state)
{
    (void)state;
    static const char *const zones[3] = {"us-west-2a", "us-west-2b", "us-west-2c"};
    const kube_gang one = {.count = 1, .cpu_millis = 10, .memory_bytes = 64 * MI};
    const kube_gang three_big = {.count = 3, .cpu_millis = 4000, .memory_bytes = 8 * GI};
    const res_row rows[] = {
        {"a full node's pod slots do not count (110 one-rank jobs in 2a)",
         {{1100, 7 * GI, 0, 110}, {0}, {0}},
         one,
         "us-west-2b",
         NULL},
        {"the zone with the most pod slots left wins",
         {{0, 0, 0, 100}, {0, 0, 0, 50}, {0, 0, 0, 60}},
         one,
         "us-west-2b",
         NULL},
        {"another tenant's CPU requests leave 2a room for 2 ranks, 2b for 1, 2c for 3",
         {{7890, 0, 0, 3}, {11890, 0, 0, 3}, {0, 0, 0, 3}},
         three_big,
         "us-west-2c",
         NULL},
        {"memory alone can be what is short",
         {{0, 50 * GI, 0, 1}, {0, 50 * GI, 0, 1}, {0, 30 * GI, 0, 1}},
         three_big,
         "us-west-2c",
         NULL},
        {"no zone holds the gang: it waits, saying what is short",
         {{0, 0, 0, 110}, {0, 0, 0, 109}, {0, 0, 0, 108}},
         (kube_gang){.count = 3, .cpu_millis = 10},
         NULL,
         "no zone has room for 3 ranks of 0.01 CPU; the most is 2 in us-west-2c (short of pod "
         "slots)"},
        {"CPU and memory short together",
         {{15890, 58 * GI, 0, 2}, {7000, 50 * GI, 0, 2}, {15890, 0, 0, 2}},
         three_big,
         NULL,
         "no zone has room for 3 ranks of 4 CPU, 8Gi memory; the most is 1 in us-west-2b (short "
         "of CPU, memory)"},
        {"ephemeral storage counts when a rank asks for it",
         {{0, 0, 99 * GI, 1}, {0, 0, 0, 1}, {0, 0, 0, 1}},
         (kube_gang){.count = 1, .ephemeral_bytes = 2 * GI},
         "us-west-2b",
         NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const res_row *row = &rows[i];
        cluster c = {0};
        all_groups_full(&c);
        for (int z = 0; z < 3; z++)
            node(&c, zones[z], NULL, 0, 0, 0)->requested = row->used[z];
        kube_placement p = place(&c, row->gang);
        if (row->zone) {
            if (p.verdict != KUBE_PLACE || strcmp(p.zone, row->zone))
                fail_msg("%s: placed in %s (%s), not %s", row->what, p.zone, p.reason, row->zone);
            assert_int_equal(p.fit_ranks, row->gang.count);
        } else {
            if (p.verdict != KUBE_WAIT || !strstr(p.reason, row->reason))
                fail_msg("%s: %s", row->what, p.reason);
        }
    }
}

static void test_gpu_ranks_need_cpu_and_pod_slots_too(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    /* 2a has the most free GPUs but another tenant's pods fill its pod slots. */
    kube_node *a = node(&c, "us-west-2a", A100, 1, 8, 0);
    a->requested.pods = 110;
    node(&c, "us-west-2b", A100, 1, 8, 4);
    kube_gang g = a100_spot(2, 2);
    g.cpu_millis = 8000;
    kube_placement p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2b");
    /* The GPUs are there, the CPU is not. */
    c.nodes[1].requested.cpu_millis = 90000;
    p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.reason, "no zone has room for 2 ranks of 8 CPU and their GPUs on spot "
                                  "nodes; the most is 0 in us-west-2a (short of pod slots)");
}

/* Pods not bound yet are booked where the scheduler would bind them, so that the next gang
 * placed sees the room they take. */
static void test_booking_pods_not_bound_yet(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", NULL, 0, 0, 0)->requested.pods = 100;
    node(&c, "us-west-2a", NULL, 0, 0, 0)->requested.pods = 105;
    node(&c, "us-west-2b", NULL, 0, 0, 0)->requested.pods = 100;
    kube_gang g = {.count = 12, .cpu_millis = 10};
    kube_booker *b = NULL;
    assert_int_equal(kube_booker_new(prof, c.nodes, c.n, NULL, NULL, &g, "us-west-2a", &b), TY_OK);
    /* 10 + 5 slots: each rank goes where most room is left, so both nodes end with 1 or 2. */
    assert_int_equal(kube_book(b, &g, 12), 12);
    assert_int_equal(c.nodes[0].requested.pods + c.nodes[1].requested.pods, 217);
    assert_true(c.nodes[0].requested.pods >= 108 && c.nodes[1].requested.pods >= 108);
    assert_int_equal(c.nodes[0].requested.cpu_millis, (c.nodes[0].requested.pods - 100) * 10);
    /* Only 3 slots are left in 2a: a gang asking 4 ranks goes to 2b. */
    kube_gang four = {.count = 4, .cpu_millis = 10};
    assert_int_equal(kube_book(b, &four, 4), 3);
    kube_booker_free(b);
    c.nodes[2].requested.pods = 100;
    kube_placement p = place(&c, four);
    assert_string_equal(p.zone, "us-west-2b");
    assert_false(kube_rank_fits(&c.nodes[0], &four));
    assert_true(kube_rank_fits(&c.nodes[2], &four));
}

/* What labels and taints decide is worked out once and kept: readiness and cordons are still
 * read from the nodes by every call, and a booker given it books the same nodes. */
static void test_a_class_match_kept_across_decisions(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2a", A100, 1, 8, 0);
    node(&c, "us-west-2a", A100, 0, 8, 0);                 /* on-demand */
    node(&c, "us-west-2a", NULL, 1, 0, 0);                 /* no GPUs */
    node(&c, "us-west-2a", A100, 1, 8, 0)->ntaints = 2;   /* tainted for reclaim */
    c.taints[3][1] = reclaim_taint;
    node(&c, "us-west-2a", A100, 1, 8, 0);
    unsigned char match[MAX_NODES];
    kube_gang g = a100_spot(2, 8);
    assert_int_equal(kube_class_match(prof, c.nodes, c.n, &g, match), TY_OK);
    assert_memory_equal(match, ((unsigned char[]){1, 0, 0, 0, 1}), 5);
    /* The last node goes down: the match stays as it was, the decision sees it. */
    c.nodes[4].ready = 0;
    kube_inventory inv = {c.nodes, c.n, c.groups, c.ngroups, match, NULL};
    kube_placement p;
    char msg[256] = "";
    assert_int_equal(kube_place(prof, &inv, &g, &p, msg, sizeof msg), TY_OK);
    assert_int_equal(p.verdict, KUBE_WAIT);
    c.nodes[4].ready = 1;
    c.nodes[0].unschedulable = 1;
    assert_int_equal(kube_place(prof, &inv, &g, &p, msg, sizeof msg), TY_OK);
    assert_int_equal(p.verdict, KUBE_WAIT);
    c.nodes[0].unschedulable = 0;
    assert_int_equal(kube_place(prof, &inv, &g, &p, msg, sizeof msg), TY_OK);
    assert_int_equal(p.verdict, KUBE_PLACE);
    /* The booker books the same nodes with the match as without it. */
    kube_booker *b = NULL;
    assert_int_equal(kube_booker_new(prof, c.nodes, c.n, match, NULL, &g, "us-west-2a", &b), TY_OK);
    assert_int_equal(kube_book(b, &g, 3), 2);
    kube_booker_free(b);
    assert_int_equal(c.nodes[0].gpus_requested + c.nodes[4].gpus_requested, 16);
    assert_int_equal(c.nodes[1].gpus_requested + c.nodes[3].gpus_requested, 0);
    /* A rank without GPUs on any capacity: the node without GPUs fits it, the reclaimed not. */
    kube_gang cpu = {.count = 1, .cpu_millis = 10};
    assert_int_equal(kube_class_match(prof, c.nodes, c.n, &cpu, match), TY_OK);
    assert_int_equal(match[2], 1);
    assert_int_equal(match[3], 0);
    kube_gang h = a100_spot(1, 1);
    h.gpu_type = "tpu";
    assert_int_equal(kube_class_match(prof, c.nodes, c.n, &h, match), TY_EINVAL);
}

/* Each node's zone is worked out once as its position in the profile's zones: nodes in no zone
 * or in one the profile does not list are in none, and a booker given the index books the same
 * nodes as one comparing names. */
static void test_a_zone_index_kept_across_decisions(void **state)
{
    (void)state;
    cluster c = {0};
    all_groups_full(&c);
    node(&c, "us-west-2b", A100, 1, 8, 0);
    node(&c, "eu-west-1a", A100, 1, 8, 0); /* a zone the profile does not list */
    node(&c, "us-west-2a", A100, 1, 8, 4);
    node(&c, NULL, A100, 1, 8, 0);         /* no zone */
    node(&c, "us-west-2b", A100, 1, 8, 0);
    node(&c, "us-west-2c", A100, 1, 8, 0);
    unsigned char zone_of[MAX_NODES];
    assert_int_equal(kube_zone_index(prof, c.nodes, c.n, zone_of), TY_OK);
    assert_memory_equal(zone_of, ((unsigned char[]){2, 0, 1, 0, 2, 3}), 6);
    /* 2b has two nodes of 8 free GPUs: the gang of 16 goes there, named or not. */
    kube_placement p = place(&c, a100_spot(2, 8));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2b");
    kube_gang named = a100_spot(1, 4);
    named.zone = "us-west-2a";
    p = place(&c, named);
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2a");
    named.count = 2;
    p = place(&c, named);
    assert_int_equal(p.verdict, KUBE_WAIT);
    /* Booked with the index and without it: the same nodes of 2b, none elsewhere. */
    kube_gang g = a100_spot(3, 4);
    kube_booker *b = NULL;
    assert_int_equal(kube_booker_new(prof, c.nodes, c.n, NULL, zone_of, &g, "us-west-2b", &b),
                     TY_OK);
    assert_int_equal(kube_book(b, &g, 3), 3);
    kube_booker_free(b);
    assert_int_equal(c.nodes[0].gpus_requested + c.nodes[4].gpus_requested, 12);
    assert_int_equal(c.nodes[1].gpus_requested + c.nodes[3].gpus_requested, 0);
    assert_int_equal(kube_booker_new(prof, c.nodes, c.n, NULL, NULL, &g, "us-west-2b", &b),
                     TY_OK);
    assert_int_equal(kube_book(b, &g, 3), 1);
    kube_booker_free(b);
    /* A zone the profile does not list is still booked by name. */
    assert_int_equal(kube_booker_new(prof, c.nodes, c.n, NULL, zone_of, &g, "eu-west-1a", &b),
                     TY_OK);
    assert_int_equal(kube_book(b, &g, 1), 1);
    kube_booker_free(b);
    assert_int_equal(c.nodes[1].gpus_requested, 4);
}

/* ---- clusters that scale from zero ---- */

static void test_groups_that_can_grow(void **state)
{
    (void)state;
    cluster c = {0};
    /* Nothing exists: every a100 spot group can grow to 4 nodes of 8. */
    kube_placement p = place(&c, a100_spot(16, 1));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2a");
    assert_int_equal(p.grow_nodes, 2);
    assert_string_equal(p.group, "p4d-spot-2a");
    assert_string_equal(p.reason, "waiting for 2 nodes of group p4d-spot-2a");

    /* A zone with a node already there needs fewer new ones. */
    node(&c, "us-west-2b", A100, 1, 8, 0);
    group(&c, "p4d-spot-2b", 1);
    p = place(&c, a100_spot(12, 1));
    assert_string_equal(p.zone, "us-west-2b");
    assert_int_equal(p.grow_nodes, 1);
    assert_string_equal(p.reason, "waiting for 1 node of group p4d-spot-2b");

    /* A group at its maximum cannot grow: another zone's can. */
    group(&c, "p4d-spot-2a", 4);
    c.groups[0].size = 4; /* p4d-spot-2b full too (its one node is busy) */
    c.nodes[0].gpus_requested = 8;
    p = place(&c, a100_spot(8, 1));
    assert_string_equal(p.zone, "us-west-2c");
    assert_string_equal(p.group, "p4d-spot-2c");

    /* More than the groups can ever hold: wait. */
    p = place(&c, a100_spot(33, 1));
    assert_int_equal(p.verdict, KUBE_WAIT);
}

static void test_any_capacity_may_grow_both_kinds_of_group(void **state)
{
    (void)state;
    cluster c = {0};
    kube_gang g = {.count = 40, .gpus_per_rank = 1, .gpu_type = "a100", .capacity = "any"};
    kube_placement p = place(&c, g);
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_int_equal(p.grow_nodes, 5);
    assert_string_equal(p.reason, "waiting for 5 nodes of groups p4d-spot-2a, p4d-od-2a");
}

/* Labels node n with the node group the cluster has put it in. */
static void in_group(cluster *c, kube_node *n, const char *name)
{
    size_t i = (size_t)(n - c->nodes);
    assert_true(n->nlabels < MAX_LABELS);
    c->labels[i][n->nlabels++] = (kube_label){"eks.amazonaws.com/nodegroup", (char *)name};
    int known = 0; /* as the inventory sees it */
    for (size_t g = 0; g < prof->ngroups; g++)
        known |= !strcmp(prof->groups[g].name, name);
    n->stray_group = known ? NULL : name;
}

static kube_gang a100_od(int count, const char *zone)
{
    return (kube_gang){.count = count,
                       .gpus_per_rank = 8,
                       .gpu_type = "a100",
                       .capacity = "on-demand",
                       .zone = zone};
}

/*
 * A profile that names a group otherwise than the cluster: us-west-2c's on-demand A100 node is
 * in p4d-ondemand-2c where the profile says p4d-od-2c. The node counts as capacity; the
 * profile's group, which no node carries, is not counted as able to grow beside it, and the
 * placement says so.
 */
static void test_a_group_the_cluster_names_otherwise(void **state)
{
    (void)state;
    cluster c = {0};
    /* Before the node: p4d-od-2c is empty and may grow, as any group of the profile. */
    kube_placement p = place(&c, a100_od(2, "us-west-2c"));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_int_equal(p.grow_nodes, 2);
    assert_string_equal(p.note, "");
    kube_inventory inv = {c.nodes, c.n, c.groups, c.ngroups, NULL, NULL};
    kube_type_capacity before;
    assert_int_equal(kube_type_capacity_of(prof, &inv, "a100", &before), TY_OK);

    in_group(&c, node(&c, "us-west-2c", A100, 0, 8, 0), "p4d-ondemand-2c");
    /* Another capacity type's stray group, and a group of the profile's, change nothing. */
    in_group(&c, node(&c, "us-west-2c", A100, 1, 8, 8), "p4d-spot-other-2c");
    in_group(&c, node(&c, "us-west-2b", A100, 0, 8, 8), "p4d-od-2b");
    group(&c, "p4d-od-2b", 1);

    const char *names[2] = {0};
    inv = (kube_inventory){c.nodes, c.n, c.groups, c.ngroups, NULL, NULL};
    const kube_node_group *od2c = NULL, *spot2c = NULL;
    for (size_t i = 0; i < prof->ngroups; i++) {
        if (!strcmp(prof->groups[i].name, "p4d-od-2c"))
            od2c = &prof->groups[i];
        if (!strcmp(prof->groups[i].name, "p4d-spot-2c"))
            spot2c = &prof->groups[i];
    }
    assert_non_null(od2c);
    assert_non_null(spot2c);
    assert_int_equal(kube_group_mismatch(prof, &inv, od2c, names, 2), 1);
    assert_string_equal(names[0], "p4d-ondemand-2c");
    assert_int_equal(kube_group_mismatch(prof, &inv, spot2c, names, 2), 1);
    assert_string_equal(names[0], "p4d-spot-other-2c");

    /* One rank fits on the node that is there. */
    p = place(&c, a100_od(1, "us-west-2c"));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_int_equal(p.grow_nodes, 0);
    assert_string_equal(p.note, "");

    /* Two do not, and the group named otherwise is not a place to wait for a second node. */
    p = place(&c, a100_od(2, "us-west-2c"));
    assert_int_equal(p.verdict, KUBE_WAIT);
    assert_string_equal(p.note, "the profile's group p4d-od-2c is not grown: us-west-2c has its "
                                "nodes under the name p4d-ondemand-2c");

    /* Under "auto" the gang goes where a group the cluster knows by that name grows (two nodes
     * of p4d-od-2a, where us-west-2c would have seemed to need one), and says why not
     * us-west-2c. */
    p = place(&c, a100_od(2, "auto"));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_string_equal(p.zone, "us-west-2a");
    assert_int_equal(p.grow_nodes, 2);
    assert_string_equal(p.group, "p4d-od-2a");
    assert_non_null(strstr(p.note, "p4d-od-2c is not grown"));

    /* Admission counts the nodes and not the growth of the groups named otherwise: the three
     * nodes' 24 GPUs more; p4d-od-2b has one of its 4 nodes (8 fewer to grow), p4d-od-2c and
     * p4d-spot-2c do not grow (32 fewer each). */
    kube_type_capacity after;
    assert_int_equal(kube_type_capacity_of(prof, &inv, "a100", &after), TY_OK);
    assert_int_equal(after.total, before.total + 24 - 8 - 32 - 32);

    /* Once a node carries the profile's name, the group is the profile's again. */
    group(&c, "p4d-od-2c", 1);
    p = place(&c, a100_od(2, "us-west-2c"));
    assert_int_equal(p.verdict, KUBE_PLACE);
    assert_int_equal(p.grow_nodes, 1);
    assert_string_equal(p.note, "");
}

/*
 * The most a rank could ever get besides GPUs: the largest node its pods may use, busy, cordoned
 * or not ready as it may be; a rank without GPUs only measured against the nodes without the
 * GPU taint, a rank of a type against that type's nodes only.
 */
static void test_the_largest_node_a_rank_may_use(void **state)
{
    (void)state;
    cluster c = {0};
    kube_largest big;
    kube_gang cpu = {.count = 1};
    kube_gang a100 = {.count = 1, .gpus_per_rank = 1, .gpu_type = "a100"};
    kube_gang h100 = {.count = 1, .gpus_per_rank = 1, .gpu_type = "h100"};
    kube_inventory inv = {c.nodes, 0, NULL, 0, NULL, NULL};
    /* No node: nothing known. */
    assert_int_equal(kube_largest_node(prof, &inv, &cpu, &big), TY_OK);
    assert_int_equal(big.cpu_millis, 0);
    assert_null(big.cpu_node);

    kube_node *n = node(&c, "us-west-2a", NULL, 0, 0, 0);
    n->name = "m5-small";
    n->allocatable.cpu_millis = 7910;
    n = node(&c, "us-west-2b", NULL, 1, 0, 0);
    n->name = "m5-busy-cordoned";
    n->unschedulable = 1;
    n->ready = 0;
    n->requested = M5;
    n = node(&c, "us-west-2a", A100, 0, 8, 8);
    n->name = "p4d";
    n = node(&c, "eu-west-1a", NULL, 0, 0, 0); /* not a zone of the profile */
    n->name = "m5-elsewhere";
    n->allocatable.cpu_millis = 64000;
    n = node(&c, "us-west-2c", NULL, 1, 0, 0); /* being reclaimed */
    n->name = "m5-reclaimed";
    n->allocatable.memory_bytes = 500 * GI;
    c.taints[c.n - 1][0] = reclaim_taint;
    n->ntaints = 1;
    inv.nnodes = c.n;

    assert_int_equal(kube_largest_node(prof, &inv, &cpu, &big), TY_OK);
    assert_int_equal(big.cpu_millis, M5.cpu_millis);
    assert_string_equal(big.cpu_node, "m5-busy-cordoned");
    assert_int_equal(big.memory_bytes, M5.memory_bytes);
    assert_int_equal(big.ephemeral_bytes, M5.ephemeral_bytes);

    assert_int_equal(kube_largest_node(prof, &inv, &a100, &big), TY_OK);
    assert_int_equal(big.cpu_millis, P4D.cpu_millis);
    assert_string_equal(big.memory_node, "p4d");
    assert_int_equal(big.memory_bytes, P4D.memory_bytes);
    /* The type's capacity asked does not narrow it: a rank may be put on either kind. */
    a100.capacity = "spot";
    assert_int_equal(kube_largest_node(prof, &inv, &a100, &big), TY_OK);
    assert_int_equal(big.cpu_millis, P4D.cpu_millis);

    /* No h100 node yet: not known. */
    assert_int_equal(kube_largest_node(prof, &inv, &h100, &big), TY_OK);
    assert_int_equal(big.cpu_millis, 0);
    assert_int_equal(big.memory_bytes, 0);

    h100.gpu_type = "tpu";
    assert_int_equal(kube_largest_node(prof, &inv, &h100, &big), TY_EINVAL);
}

/* ---- placement and rendering agree ---- */

/* Whether the pod render.c makes for gang may run on node n, in zone: its nodeSelector,
 * nodeAffinity and tolerations, judged as the Kubernetes scheduler would. */
static int pod_fits_node(const kube_gang *g, const char *zone, const kube_node *n)
{
    json_t *spec = json_pack(
        "{s:s, s:s, s:[s], s:[], s:{}, s:{s:i, s:i}, s:{s:s, s:s, s:o}, s:{s:s, s:s}, s:[],"
        " s:n, s:i}",
        "name", "x", "image", "img", "command", "x", "args", "env", "workers", "count", g->count,
        "min", g->count, "resources", "cpu", "1", "memory", "1Gi", "gpu",
        g->gpus_per_rank ? json_pack("{s:s, s:i}", "type", g->gpu_type, "count", g->gpus_per_rank)
                         : json_null(),
        "placement", "zone", "auto", "capacity", g->capacity ? g->capacity : "any", "volumes",
        "timeout_seconds", "ttl_seconds_after_finished", 60);
    kube_render_in in = {spec, "abc", 1, zone};
    json_t *job = NULL;
    char msg[256] = "";
    if (kube_render_job(prof, &in, &job, msg, sizeof msg))
        fail_msg("render: %s", msg);
    const json_t *pod =
        json_object_get(json_object_get(json_object_get(job, "spec"), "template"), "spec");
    int ok = 1;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(pod, "nodeSelector"), k, v)
    {
        int has = 0;
        for (size_t i = 0; i < n->nlabels; i++)
            has |=
                !strcmp(n->labels[i].key, k) && !strcmp(n->labels[i].value, json_string_value(v));
        ok &= has;
    }
    for (size_t i = 0; i < n->ntaints; i++) {
        if (!strcmp(n->taints[i].effect, "PreferNoSchedule"))
            continue;
        int tol = 0;
        size_t j;
        json_array_foreach(json_object_get(pod, "tolerations"), j, v)
        {
            tol |= !strcmp(json_string_value(json_object_get(v, "key")), n->taints[i].key) &&
                   !strcmp(json_string_value(json_object_get(v, "value")), n->taints[i].value) &&
                   !strcmp(json_string_value(json_object_get(v, "effect")), n->taints[i].effect);
        }
        ok &= tol;
    }
    ok &= !strcmp(n->zone, zone);
    json_decref(job);
    json_decref(spec);
    return ok;
}

static void test_a_node_placement_counts_takes_the_rendered_pod(void **state)
{
    (void)state;
    static const kube_gang gangs[] = {
        {.count = 1, .gpus_per_rank = 8, .gpu_type = "a100", .capacity = "spot"},
        {.count = 1, .gpus_per_rank = 1, .gpu_type = "a100", .capacity = "on-demand"},
        {.count = 1, .gpus_per_rank = 2, .gpu_type = "h100", .capacity = "any"},
        {.count = 1, .gpus_per_rank = 0, .capacity = "on-demand"},
    };
    for (size_t gi = 0; gi < sizeof gangs / sizeof gangs[0]; gi++) {
        /* One node of each kind, in its own zone so the decision names the one counted. */
        static const char *const zones[] = {"us-west-2a", "us-west-2b", "us-west-2c"};
        for (int kind = 0; kind < 6; kind++) {
            cluster c = {0};
            all_groups_full(&c);
            const char *zone = zones[kind % 3];
            const char *product = kind < 2 ? A100 : kind < 4 ? H100 : NULL;
            kube_node *n = node(&c, zone, product, kind % 2 == 0, product ? 8 : 0, 0);
            kube_placement p = place(&c, gangs[gi]);
            int counted = p.verdict == KUBE_PLACE;
            if (counted != pod_fits_node(&gangs[gi], zone, n))
                fail_msg("gang %zu, node kind %d: placement says %d, the pod disagrees", gi, kind,
                         counted);
        }
    }
}

static void test_the_gang_of_a_spec(void **state)
{
    (void)state;
    json_t *spec =
        json_pack("{s:{s:i, s:i}, s:{s:s, s:s, s:{s:s, s:i}}, s:{s:s, s:s}}", "workers", "count", 4,
                  "min", 4, "resources", "cpu", "8", "memory", "32Gi", "gpu", "type", "a100",
                  "count", 2, "placement", "zone", "us-west-2b", "capacity", "spot");
    kube_gang g;
    assert_int_equal(kube_gang_from_spec(spec, &g), TY_OK);
    assert_int_equal(g.count, 4);
    assert_int_equal(g.gpus_per_rank, 2);
    assert_string_equal(g.gpu_type, "a100");
    assert_string_equal(g.capacity, "spot");
    assert_string_equal(g.zone, "us-west-2b");
    assert_int_equal(g.navoid, 0);
    assert_int_equal(g.cpu_millis, 8000);
    assert_int_equal(g.memory_bytes, 32 * GI);
    json_object_set_new(json_object_get(spec, "resources"), "cpu", json_string("10m"));
    assert_int_equal(kube_gang_from_spec(spec, &g), TY_OK);
    assert_int_equal(g.cpu_millis, 10);
    json_object_set_new(json_object_get(spec, "resources"), "gpu", json_null());
    assert_int_equal(kube_gang_from_spec(spec, &g), TY_OK);
    assert_int_equal(g.gpus_per_rank, 0);
    assert_null(g.gpu_type);
    json_object_del(spec, "workers");
    assert_int_equal(kube_gang_from_spec(spec, &g), TY_EINVAL);
    json_decref(spec);
}

/* ---- asks the cluster cannot answer ---- */

static void test_bad_requests_are_errors(void **state)
{
    (void)state;
    cluster c = {0};
    kube_inventory inv = {c.nodes, 0, NULL, 0, NULL, NULL};
    kube_placement out;
    char msg[256] = "";
    kube_gang g = {.count = 1, .gpus_per_rank = 1, .gpu_type = "tpu", .capacity = "spot"};
    assert_int_equal(kube_place(prof, &inv, &g, &out, msg, sizeof msg), TY_EINVAL);
    assert_non_null(strstr(msg, "tpu"));
    g = a100_spot(1, 1);
    g.zone = "eu-west-1a";
    assert_int_equal(kube_place(prof, &inv, &g, &out, msg, sizeof msg), TY_EINVAL);
    assert_non_null(strstr(msg, "eu-west-1a"));
    g = a100_spot(0, 1);
    assert_int_equal(kube_place(prof, &inv, &g, &out, msg, sizeof msg), TY_EINVAL);
}

static int setup(void **state)
{
    (void)state;
    char msg[256] = "";
    if (kube_profile_load(TY_EXAMPLE_PROFILE, &prof, msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kube_profile_free(prof);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_zone_with_most_room_fits_the_whole_gang),
        cmocka_unit_test(test_no_zone_fits_says_why),
        cmocka_unit_test(test_a_ranks_gpus_share_one_node),
        cmocka_unit_test(test_nodes_that_do_not_count),
        cmocka_unit_test(test_avoided_and_named_zones),
        cmocka_unit_test(test_ranks_without_gpus),
        cmocka_unit_test(test_cpu_memory_storage_and_pod_slots_count),
        cmocka_unit_test(test_gpu_ranks_need_cpu_and_pod_slots_too),
        cmocka_unit_test(test_booking_pods_not_bound_yet),
        cmocka_unit_test(test_groups_that_can_grow),
        cmocka_unit_test(test_any_capacity_may_grow_both_kinds_of_group),
        cmocka_unit_test(test_a_group_the_cluster_names_otherwise),
        cmocka_unit_test(test_the_largest_node_a_rank_may_use),
        cmocka_unit_test(test_a_node_placement_counts_takes_the_rendered_pod),
        cmocka_unit_test(test_a_class_match_kept_across_decisions),
        cmocka_unit_test(test_a_zone_index_kept_across_decisions),
        cmocka_unit_test(test_the_gang_of_a_spec),
        cmocka_unit_test(test_bad_requests_are_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
