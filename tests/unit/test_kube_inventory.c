/*
 * test_kube_inventory.c - scheduler/kube/inventory: what placement sees after each node and
 * pod change, in the orders informers deliver them; and what admission across teams counts of
 * it per GPU type (placement.h: kube_type_capacity_of(), the Kubernetes backend's
 * free_resources()).
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/kube/inventory.h"
#include "scheduler/kube/placement.h"
#include "scheduler/kube/profile.h"

static const char *const groups[] = {"p4d-spot-2b", "p4d-od-2a"};

static json_t *node(const char *name, const char *zone, const char *group, int gpus, int ready)
{
    return json_pack("{s:{s:s, s:{s:s, s:s, s:s}}, s:{s:[{s:s, s:s, s:s}]}, "
                     "s:{s:{s:s}, s:[{s:s, s:s}]}}",
                     "metadata", "name", name, "labels", "topology.kubernetes.io/zone", zone,
                     "eks.amazonaws.com/nodegroup", group, "nvidia.com/gpu.product",
                     "NVIDIA-A100-SXM4-40GB", "spec", "taints", "key", "nvidia.com/gpu", "value",
                     "present", "effect", "NoSchedule", "status", "allocatable",
                     "nvidia.com/gpu", gpus == 8 ? "8" : "4", "conditions", "type", "Ready",
                     "status", ready ? "True" : "False");
}

static json_t *pod(const char *name, const char *node_name, int gpus, const char *phase)
{
    json_t *p = json_pack("{s:{s:s, s:s}, s:{s:[{s:s, s:{s:{s:I}}}]}, s:{s:s}}", "metadata",
                          "namespace", "trainyard", "name", name, "spec", "containers", "name",
                          "worker", "resources", "limits", "nvidia.com/gpu", (json_int_t)gpus,
                          "status", "phase", phase);
    if (node_name)
        json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node_name));
    return p;
}

typedef struct seen {
    char names[8][64];
    char stray[8][64]; /* each node's stray_group, "" for none */
    int alloc[8], used[8], ready[8], ntaints[8];
    size_t n;
    int sizes[2];
    char zone0[64];
} seen;

static ty_err look(void *ud, kube_inv_view *view)
{
    seen *s = ud;
    s->n = view->nnodes;
    for (size_t i = 0; i < view->nnodes && i < 8; i++) {
        snprintf(s->names[i], sizeof s->names[i], "%s", view->nodes[i].name);
        s->alloc[i] = view->nodes[i].gpus_allocatable;
        s->used[i] = view->nodes[i].gpus_requested;
        s->ready[i] = view->nodes[i].ready;
        s->ntaints[i] = (int)view->nodes[i].ntaints;
        snprintf(s->stray[i], sizeof s->stray[i], "%s",
                 view->nodes[i].stray_group ? view->nodes[i].stray_group : "");
    }
    snprintf(s->zone0, sizeof s->zone0, "%s", view->nnodes ? view->nodes[0].zone : "");
    assert_int_equal(view->ngroups, 2);
    for (size_t g = 0; g < 2; g++)
        s->sizes[g] = view->groups[g].size;
    /* The view is a scratch copy: booking on it changes nothing kept. */
    if (view->nnodes)
        view->nodes[0].gpus_requested += 100;
    return TY_OK;
}

static int used_of(const seen *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return s->used[i];
    fail_msg("no node %s in the view", name);
    return -1;
}

static void feed_node(kube_inv *inv, json_t *old, json_t *n)
{
    assert_int_equal(kube_inv_node(inv, old, n), TY_OK);
    json_decref(old);
    json_decref(n);
}

static void feed_pod(kube_inv *inv, json_t *old, json_t *p)
{
    assert_int_equal(kube_inv_pod(inv, old, p, NULL), TY_OK);
    json_decref(old);
    json_decref(p);
}

static void test_nodes_and_pods(void **state)
{
    (void)state;
    kube_inv *inv;
    seen s;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(s.n, 0);

    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1));
    feed_node(inv, NULL, node("b1", "us-west-2b", "p4d-spot-2b", 8, 1));
    feed_node(inv, NULL, node("a0", "us-west-2a", "p4d-od-2a", 8, 0));
    /* A pod bound before its node was seen counts once the node appears. */
    feed_pod(inv, NULL, pod("early", "c0", 2, "Running"));
    feed_pod(inv, NULL, pod("p1", "b0", 4, "Pending"));
    feed_pod(inv, NULL, pod("unbound", NULL, 8, "Pending"));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.zone0, "us-west-2b");
    assert_int_equal(used_of(&s, "b0"), 4);
    assert_int_equal(used_of(&s, "b1"), 0);
    assert_int_equal(s.alloc[0], 8);
    assert_int_equal(s.ntaints[0], 1);
    assert_int_equal(s.sizes[0], 2);
    assert_int_equal(s.sizes[1], 1);
    feed_node(inv, NULL, node("c0", "us-west-2c", "other-group", 8, 1));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "c0"), 2);
    /* A node of a group that is not the profile's keeps its group's name apart. */
    for (size_t i = 0; i < s.n; i++)
        assert_string_equal(s.stray[i], strcmp(s.names[i], "c0") ? "" : "other-group");
    assert_int_equal(used_of(&s, "b0"), 4); /* the last view's booking was on a copy */

    /* The pod is bound elsewhere, then ends: its GPUs move, then free. */
    feed_pod(inv, pod("p1", "b0", 4, "Pending"), pod("p1", "b1", 4, "Running"));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 0);
    assert_int_equal(used_of(&s, "b1"), 4);
    feed_pod(inv, NULL, pod("p2", "b1", 2, "Running"));
    feed_pod(inv, pod("p1", "b1", 4, "Running"), pod("p1", "b1", 4, "Failed"));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b1"), 2);
    /* A deletion takes back exactly what the pod added. */
    feed_pod(inv, pod("p2", "b1", 2, "Running"), NULL);
    feed_pod(inv, pod("p1", "b1", 4, "Failed"), NULL); /* counted no more: nothing to take */
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b1"), 0);

    /* A node that changes (Ready now) keeps what is used on it; a deleted one leaves the
     * view, and the others keep their place in it and their counts. */
    feed_node(inv, node("a0", "us-west-2a", "p4d-od-2a", 8, 0),
              node("a0", "us-west-2a", "p4d-od-2a", 8, 1));
    feed_node(inv, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1), NULL);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(s.n, 3);
    for (size_t i = 0; i < s.n; i++) {
        assert_string_not_equal(s.names[i], "b0");
        if (!strcmp(s.names[i], "a0"))
            assert_int_equal(s.ready[i], 1);
    }
    assert_int_equal(used_of(&s, "c0"), 2);
    assert_int_equal(s.sizes[0], 1);
    /* The node comes back (a replacement with the same name): counts start from its pods. */
    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 4, 1));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 0);
    kube_inv_free(inv);
    kube_inv_free(NULL);
}

/*
 * Every bound pod of the cluster, slimmed as the bound pods' informer keeps them: GPUs counted
 * as the scheduler counts them (the containers' sum, or the largest init container when that
 * is more), one count per pod however many informers report it, and what a pod that ends
 * gives back, even when its deletion carries its ended state (it left the field selector).
 */
static void test_other_tenants_and_slim_pods(void **state)
{
    (void)state;
    kube_inv *inv;
    seen s;
    int freed = -1;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1));

    json_t *sum = json_pack("{s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:[{s:{s:{s:s}}}, "
                            "{s:{s:{s:i}}}, {}], s:[{s:{s:{s:s}}}]}, s:{s:s}}",
                            "metadata", "namespace", "ml", "name", "sum", "uid", "u-1",
                            "resourceVersion", "7", "generateName", "x-", "spec", "nodeName",
                            "b0", "containers", "resources", "limits", "nvidia.com/gpu", "2",
                            "resources", "requests", "nvidia.com/gpu", 3, "initContainers",
                            "resources", "limits", "nvidia.com/gpu", "1", "status", "phase",
                            "Running");
    json_t *init = json_pack("{s:{s:s, s:s}, s:{s:s, s:[{}], s:[{s:{s:{s:s}}}, "
                             "{s:{s:{s:s}}}]}, s:{s:s}}",
                             "metadata", "namespace", "ml", "name", "init", "spec", "nodeName",
                             "b0", "containers", "initContainers", "resources", "limits",
                             "nvidia.com/gpu", "2", "resources", "limits", "nvidia.com/gpu", "3",
                             "status", "phase", "Pending");
    assert_int_equal(kube_inv_pod_gpus(sum), 5);
    assert_int_equal(kube_inv_pod_gpus(init), 3);
    /* Absurd counts are clamped, never wrapped: neither a quantity past INT_MAX nor a sum. */
    json_t *huge = json_pack("{s:{s:[{s:{s:{s:s}}}, {s:{s:{s:I}}}]}}", "spec", "containers",
                             "resources", "limits", "nvidia.com/gpu", "1e12", "resources",
                             "limits", "nvidia.com/gpu", (json_int_t)1 << 40);
    assert_int_equal(kube_inv_pod_gpus(huge), 65536);
    json_decref(huge);
    json_t *slim = kube_inv_pod_slim(sum);
    assert_non_null(slim);
    assert_int_equal(kube_inv_pod_gpus(slim), 5);
    const json_t *md = json_object_get(slim, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "uid")), "u-1");
    assert_string_equal(json_string_value(json_object_get(md, "resourceVersion")), "7");
    assert_null(json_object_get(md, "generateName"));
    assert_null(json_object_get(json_object_get(slim, "spec"), "containers"));

    /* Reported by two informers (ours and the cluster's), in either form: counted once. */
    feed_pod(inv, NULL, json_incref(sum));
    feed_pod(inv, NULL, json_incref(slim));
    feed_pod(inv, NULL, kube_inv_pod_slim(init));
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 8);

    /* It ends: the deletion carries phase Succeeded; the 5 GPUs it held are given back. */
    json_object_set_new(json_object_get(slim, "status"), "phase", json_string("Succeeded"));
    assert_int_equal(kube_inv_pod(inv, slim, NULL, &freed), TY_OK);
    assert_int_equal(freed, 5);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 3);
    /* Told again (the other informer): nothing more to give back. */
    assert_int_equal(kube_inv_pod(inv, sum, NULL, &freed), TY_OK);
    assert_int_equal(freed, 0);
    json_decref(slim);
    json_decref(sum);
    json_decref(init);
    kube_inv_free(inv);
}

static json_t *pod_uid(const char *name, const char *uid, const char *node_name, int gpus,
                       const char *phase)
{
    json_t *p = pod(name, node_name, gpus, phase);
    json_object_set_new(json_object_get(p, "metadata"), "uid", json_string(uid));
    return p;
}

/*
 * Our pods' informer and the cluster's bound pods' informer report the same pod, each in
 * order but not in step: what one delivers late does not undo what the other reported. A pod
 * deleted (or ended) stays uncounted when the other informer's older changes come after; a
 * bound pod stays counted when an older, unbound state comes after; a new pod of the same name
 * (another uid) counts.
 */
static void test_late_changes_from_the_other_informer(void **state)
{
    (void)state;
    kube_inv *inv;
    seen s;
    int freed = -1;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1));
    json_t *unbound = pod_uid("w", "u-1", NULL, 8, "Pending");
    json_t *bound = pod_uid("w", "u-1", "b0", 8, "Running");
    json_t *deleting = pod_uid("w", "u-1", "b0", 8, "Running");
    json_object_set_new(json_object_get(deleting, "metadata"), "deletionTimestamp",
                        json_string("2026-01-01T00:00:00Z"));
    /* Bound (the cluster's informer first), then ours' older unbound state: still counted. */
    assert_int_equal(kube_inv_pod(inv, NULL, bound, NULL), TY_OK);
    assert_int_equal(kube_inv_pod(inv, NULL, unbound, NULL), TY_OK);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 8);
    /* Ours sees it deleted; the cluster's informer then delivers its being deleted, and its
     * deletion: nothing comes back, nothing more is freed. */
    assert_int_equal(kube_inv_pod(inv, deleting, NULL, &freed), TY_OK);
    assert_int_equal(freed, 8);
    assert_int_equal(kube_inv_pod(inv, bound, deleting, &freed), TY_OK);
    assert_int_equal(freed, 0);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 0);
    assert_int_equal(kube_inv_pod(inv, deleting, NULL, &freed), TY_OK);
    assert_int_equal(freed, 0);
    /* A pod that succeeded, then an older Running state from the other informer. */
    json_t *x_run = pod_uid("x", "u-2", "b0", 2, "Running");
    json_t *x_done = pod_uid("x", "u-2", "b0", 2, "Succeeded");
    assert_int_equal(kube_inv_pod(inv, NULL, x_run, NULL), TY_OK);
    assert_int_equal(kube_inv_pod(inv, x_run, x_done, &freed), TY_OK);
    assert_int_equal(freed, 2);
    assert_int_equal(kube_inv_pod(inv, NULL, x_run, NULL), TY_OK);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 0);
    /* The name again, a new pod: counted. */
    json_t *again = pod_uid("w", "u-3", "b0", 4, "Running");
    assert_int_equal(kube_inv_pod(inv, NULL, again, NULL), TY_OK);
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 4);
    /* Thousands of pods end after it: the memory of ended pods stays bounded, the counts
     * right. */
    char name[32], uid[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "m%d", i);
        snprintf(uid, sizeof uid, "um%d", i);
        json_t *run = pod_uid(name, uid, "b0", 1, "Running");
        assert_int_equal(kube_inv_pod(inv, NULL, run, NULL), TY_OK);
        assert_int_equal(kube_inv_pod(inv, run, NULL, NULL), TY_OK);
        json_decref(run);
    }
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(used_of(&s, "b0"), 4);
    json_decref(unbound);
    json_decref(bound);
    json_decref(deleting);
    json_decref(x_run);
    json_decref(x_done);
    json_decref(again);
    kube_inv_free(inv);
}

static ty_err first_node(void *ud, kube_inv_view *view)
{
    kube_node *out = ud;
    assert_true(view->nnodes >= 1);
    *out = view->nodes[0];
    return TY_OK;
}

/* Every bound pod takes a pod slot and what it requests of CPU, memory and storage, as the
 * scheduler counts them: a CPU node full of small pods has no room left. */
static ty_err job_pods_of(void *ud, kube_inv_view *view)
{
    int *got = ud;
    got[0] = kube_inv_job_pods(view, "01kjob");
    got[1] = kube_inv_job_pods(view, "01kother");
    return TY_OK;
}

/*
 * How many pods of one job (label trainyard.io/job-id) are counted, whichever informer
 * reported them, full or slim: the ranks of a job's reservation the nodes' counts hold already.
 */
static void test_pods_per_job(void **state)
{
    (void)state;
    kube_inv *inv;
    int got[2];
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1));
    json_t *r0 = pod_uid("j-0", "u-0", "b0", 4, "Running");
    json_t *r1 = pod_uid("j-1", "u-1", NULL, 4, "Pending");
    json_object_set_new(json_object_get(r0, "metadata"), "labels",
                        json_pack("{s:s}", "trainyard.io/job-id", "01kjob"));
    json_object_set_new(json_object_get(r1, "metadata"), "labels",
                        json_pack("{s:s}", "trainyard.io/job-id", "01kjob"));
    /* Rank 0 bound, seen first slim by the cluster's informer, then in full by ours. */
    json_t *slim = kube_inv_pod_slim(r0);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(slim, "metadata"), "labels"),
                            "trainyard.io/job-id")),
                        "01kjob");
    assert_int_equal(kube_inv_pod(inv, NULL, slim, NULL), TY_OK);
    assert_int_equal(kube_inv_pod(inv, NULL, r0, NULL), TY_OK);
    assert_int_equal(kube_inv_pod(inv, NULL, r1, NULL), TY_OK); /* not bound: not counted */
    assert_int_equal(kube_inv_with(inv, job_pods_of, got), TY_OK);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 0);
    /* Rank 1 is bound, then rank 0 ends. */
    json_t *r1b = json_deep_copy(r1);
    json_object_set_new(json_object_get(r1b, "spec"), "nodeName", json_string("b0"));
    assert_int_equal(kube_inv_pod(inv, r1, r1b, NULL), TY_OK);
    assert_int_equal(kube_inv_with(inv, job_pods_of, got), TY_OK);
    assert_int_equal(got[0], 2);
    assert_int_equal(kube_inv_pod(inv, r0, NULL, NULL), TY_OK);
    assert_int_equal(kube_inv_with(inv, job_pods_of, got), TY_OK);
    assert_int_equal(got[0], 1);
    json_decref(slim);
    json_decref(r0);
    json_decref(r1);
    json_decref(r1b);
    kube_inv_free(inv);
}

static void test_cpu_memory_storage_and_pod_slots(void **state)
{
    (void)state;
    kube_inv *inv;
    kube_node n;
    int freed = -1;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL,
              json_pack("{s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s, s:s}, s:[{s:s, s:s}]}}",
                        "metadata", "name", "c0", "labels", "topology.kubernetes.io/zone",
                        "us-west-2a", "status", "allocatable", "cpu", "15890m", "memory", "57Gi",
                        "ephemeral-storage", "100Gi", "pods", "110", "conditions", "type", "Ready",
                        "status", "True"));
    /* Requests, else limits; the largest init container when it asks more; the overhead. */
    json_t *p1 = json_pack("{s:{s:s, s:s}, s:{s:s, s:[{s:{s:{s:s, s:s}}}, {s:{s:{s:s}}}], "
                           "s:[{s:{s:{s:s}}}], s:{s:s}}, s:{s:s}}",
                           "metadata", "namespace", "other", "name", "p1", "spec", "nodeName", "c0",
                           "containers", "resources", "requests", "cpu", "500m", "memory", "1Gi",
                           "resources", "limits", "cpu", "1", "initContainers", "resources",
                           "requests", "ephemeral-storage", "2Gi", "overhead", "cpu", "10m",
                           "status", "phase", "Running");
    kube_res r;
    kube_inv_pod_requests(p1, &r);
    assert_int_equal(r.cpu_millis, 1510);
    assert_int_equal(r.memory_bytes, (int64_t)1 << 30);
    assert_int_equal(r.ephemeral_bytes, (int64_t)2 << 30);
    json_t *slim = kube_inv_pod_slim(p1);
    kube_inv_pod_requests(slim, &r);
    assert_int_equal(r.cpu_millis, 1510);
    assert_int_equal(r.pods, 1);
    feed_pod(inv, NULL, slim);
    /* A pod that asks for nothing still takes its slot. */
    feed_pod(inv, NULL,
             json_pack("{s:{s:s, s:s}, s:{s:s, s:[{}]}, s:{s:s}}", "metadata", "namespace",
                       "kube-system", "name", "p2", "spec", "nodeName", "c0", "containers",
                       "status", "phase", "Running"));
    assert_int_equal(kube_inv_with(inv, first_node, &n), TY_OK);
    assert_int_equal(n.allocatable.cpu_millis, 15890);
    assert_int_equal(n.allocatable.memory_bytes, (int64_t)57 << 30);
    assert_int_equal(n.allocatable.pods, 110);
    assert_int_equal(n.requested.pods, 2);
    assert_int_equal(n.requested.cpu_millis, 1510);
    assert_int_equal(n.requested.ephemeral_bytes, (int64_t)2 << 30);
    /* It ends: its slot and requests come back, and the change says room came free. */
    json_object_set_new(json_object_get(p1, "status"), "phase", json_string("Succeeded"));
    assert_int_equal(kube_inv_pod(inv, NULL, p1, &freed), TY_OK);
    assert_true(freed > 0);
    assert_int_equal(kube_inv_with(inv, first_node, &n), TY_OK);
    assert_int_equal(n.requested.pods, 1);
    assert_int_equal(n.requested.cpu_millis, 0);
    json_decref(p1);
    kube_inv_free(inv);
}

static ty_err sum_used(void *ud, kube_inv_view *view)
{
    long *got = ud;
    for (size_t i = 0; i < view->nnodes; i++)
        got[0] += view->nodes[i].gpus_requested;
    got[1] = (long)view->nnodes;
    return TY_OK;
}

/* Thousands of nodes and pods: every pod's GPUs land on its node, whatever the order. */
static ty_err shape_of(void *ud, kube_inv_view *view)
{
    *(unsigned long *)ud = view->shape;
    return TY_OK;
}

/* The view's shape changes when what decides eligibility by labels and taints may have: a node
 * added, deleted or relabelled; not when its pods or status change. */
static void test_the_shape_of_the_nodes(void **state)
{
    (void)state;
    kube_inv *inv;
    unsigned long s0, s1;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("n1", "us-west-2a", "p4d-od-2a", 8, 1));
    feed_node(inv, NULL, node("n2", "us-west-2b", "p4d-spot-2b", 8, 1));
    assert_int_equal(kube_inv_with(inv, shape_of, &s0), TY_OK);
    feed_node(inv, node("n1", "us-west-2a", "p4d-od-2a", 8, 1),
              node("n1", "us-west-2a", "p4d-od-2a", 4, 0));
    feed_pod(inv, NULL, pod("p1", "n1", 2, "Running"));
    assert_int_equal(kube_inv_with(inv, shape_of, &s1), TY_OK);
    assert_true(s1 == s0);
    feed_node(inv, node("n1", "us-west-2a", "p4d-od-2a", 4, 0),
              node("n1", "us-west-2c", "p4d-od-2a", 4, 0));
    assert_int_equal(kube_inv_with(inv, shape_of, &s1), TY_OK);
    assert_true(s1 != s0);
    s0 = s1;
    feed_node(inv, node("n2", "us-west-2b", "p4d-spot-2b", 8, 1), NULL);
    assert_int_equal(kube_inv_with(inv, shape_of, &s1), TY_OK);
    assert_true(s1 != s0);
    s0 = s1;
    feed_node(inv, NULL, node("n3", "us-west-2b", "p4d-spot-2b", 8, 1));
    assert_int_equal(kube_inv_with(inv, shape_of, &s1), TY_OK);
    assert_true(s1 != s0);
    kube_inv_free(inv);
}

/* kube_inv_with_kept()'s callback: books one GPU on the first node, and says what it got. */
typedef struct kept_seen {
    int kept, used0;
} kept_seen;

static ty_err book_one(void *ud, kube_inv_view *view)
{
    kept_seen *k = ud;
    k->kept = view->kept;
    k->used0 = view->nodes[0].gpus_requested;
    view->nodes[0].gpus_requested++;
    return TY_OK;
}

/* A kept scratch comes back as its key's last call left it while nothing changed; a pod
 * bound, a node changed, another caller of the scratch or another epoch make it fresh. */
static void test_kept_scratch(void **state)
{
    (void)state;
    kube_inv *inv;
    kept_seen k;
    int key, other;
    seen s = {0};
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("n1", "us-west-2a", "p4d-od-2a", 8, 1));
    assert_int_equal(kube_inv_with_kept(inv, &key, 1, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(k.used0, 0);
    assert_int_equal(kube_inv_with_kept(inv, &key, 1, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 1);
    assert_int_equal(k.used0, 1); /* the last call's booking is there */
    assert_int_equal(kube_inv_with_kept(inv, &other, 1, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(k.used0, 0);
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0); /* the caller's epoch changed */
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 1);
    feed_pod(inv, NULL, pod("p1", "n1", 2, "Running"));
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(k.used0, 2); /* the bound pod, counted; no booking of before */
    assert_int_equal(kube_inv_with(inv, look, &s), TY_OK);
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 1);
    feed_node(inv, node("n1", "us-west-2a", "p4d-od-2a", 8, 1),
              node("n1", "us-west-2a", "p4d-od-2a", 8, 0));
    assert_int_equal(kube_inv_with_kept(inv, &other, 2, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(k.used0, 2);
    kube_inv_free(inv);
}

/* kube_inv_read()'s callback: what a reader sees of the first node and of the groups. */
typedef struct read_seen {
    int kept, used0, sizes[2];
} read_seen;

static ty_err read_first(void *ud, kube_inv_view *view)
{
    read_seen *r = ud;
    r->kept = view->kept;
    r->used0 = view->nnodes ? view->nodes[0].gpus_requested : -1;
    assert_int_equal(view->ngroups, 2);
    for (size_t g = 0; g < 2; g++)
        r->sizes[g] = view->groups[g].size;
    return TY_OK;
}

/* A reader (GET /v1/cluster, /metrics) sees the nodes as counted, not what a placement booked
 * in its kept scratch, and that scratch stays kept for the placement's next call. */
static void test_read_leaves_the_kept_scratch(void **state)
{
    (void)state;
    kube_inv *inv;
    kept_seen k;
    read_seen r;
    int key;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    feed_node(inv, NULL, node("n1", "us-west-2a", "p4d-od-2a", 8, 1));
    feed_pod(inv, NULL, pod("p1", "n1", 2, "Running"));
    assert_int_equal(kube_inv_with_kept(inv, &key, 1, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 0);
    assert_int_equal(k.used0, 2);
    assert_int_equal(kube_inv_read(inv, read_first, &r), TY_OK);
    assert_int_equal(r.used0, 2); /* the bound pod's, not the booking */
    assert_int_equal(r.sizes[0], 0); /* p4d-spot-2b */
    assert_int_equal(r.sizes[1], 1); /* p4d-od-2a: n1 */
    assert_int_equal(r.kept, 0);
    assert_int_equal(kube_inv_with_kept(inv, &key, 1, book_one, &k), TY_OK);
    assert_int_equal(k.kept, 1);
    assert_int_equal(k.used0, 3); /* the booking is still there */
    feed_pod(inv, NULL, pod("p2", "n1", 1, "Running"));
    assert_int_equal(kube_inv_read(inv, read_first, &r), TY_OK);
    assert_int_equal(r.used0, 3);
    kube_inv_free(inv);
}

static void test_many(void **state)
{
    (void)state;
    kube_inv *inv;
    assert_int_equal(kube_inv_new(groups, 2, &inv), TY_OK);
    char name[32], pname[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "n%d", i);
        if (i % 2)
            feed_node(inv, NULL, node(name, "us-west-2a", "p4d-od-2a", 8, 1));
        snprintf(pname, sizeof pname, "p%d", i);
        feed_pod(inv, NULL, pod(pname, name, 1 + i % 8, "Running"));
        if (!(i % 2))
            feed_node(inv, NULL, node(name, "us-west-2a", "p4d-od-2a", 8, 1));
    }
    for (int i = 0; i < 3000; i += 3) {
        snprintf(pname, sizeof pname, "p%d", i);
        snprintf(name, sizeof name, "n%d", i);
        feed_pod(inv, pod(pname, name, 1 + i % 8, "Running"), NULL);
    }
    long want = 0;
    for (int i = 0; i < 3000; i++)
        if (i % 3)
            want += 1 + i % 8;
    long got[2] = {0, 0};
    assert_int_equal(kube_inv_with(inv, sum_used, got), TY_OK);
    assert_int_equal(got[1], 3000);
    assert_int_equal(got[0], want);
    kube_inv_free(inv);
}

/* Two zones, A100 nodes in groups that grow to 4 (spot, us-west-2b) and 2 (us-west-2a);
 * H100s only in a group that has no node yet. */
static const char capacity_profile[] =
    "zones: [us-west-2a, us-west-2b]\n"
    "gpu_types:\n"
    "  a100:\n"
    "    node_labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}\n"
    "    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
    "  h100:\n"
    "    node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
    "    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
    "capacity_types:\n"
    "  spot: {node_labels: {karpenter.sh/capacity-type: spot}}\n"
    "  on-demand: {node_labels: {karpenter.sh/capacity-type: on-demand}}\n"
    "node_groups:\n"
    "  - {name: p4d-spot-2b, zone: us-west-2b, gpu_type: a100, capacity: spot,\n"
    "     gpus_per_node: 8, max_size: 4}\n"
    "  - {name: p4d-od-2a, zone: us-west-2a, gpu_type: a100, capacity: on-demand,\n"
    "     gpus_per_node: 8, max_size: 2}\n"
    "  - {name: p5-od-2a, zone: us-west-2a, gpu_type: h100, capacity: on-demand,\n"
    "     gpus_per_node: 8, max_size: 1}\n";

typedef struct counted {
    const kube_profile *p;
    kube_type_capacity a100, h100;
} counted;

static ty_err count_types(void *ud, kube_inv_view *view)
{
    counted *c = ud;
    kube_inventory ki = {view->nodes, view->nnodes, view->groups, view->ngroups, NULL, NULL};
    assert_int_equal(kube_type_capacity_of(c->p, &ki, "a100", &c->a100), TY_OK);
    assert_int_equal(kube_type_capacity_of(c->p, &ki, "h100", &c->h100), TY_OK);
    kube_type_capacity none;
    assert_int_equal(kube_type_capacity_of(c->p, &ki, "tpu", &none), TY_EINVAL);
    return TY_OK;
}

static json_t *with_taint(json_t *n, const char *key)
{
    json_array_append_new(json_object_get(json_object_get(n, "spec"), "taints"),
                          json_pack("{s:s, s:s, s:s}", "key", key, "value", "true", "effect",
                                    "NoSchedule"));
    return n;
}

/*
 * What admission may count per GPU type: the GPUs of the nodes placement would use for the
 * type, plus what its node groups can still add; free is that minus what every bound,
 * unfinished pod asks for (other tenants' too), a node never below zero. Nodes that are not
 * ready, cordoned, being reclaimed, tainted beyond what the pods tolerate or outside the
 * profile's zones count for nothing.
 */
static void test_capacity_per_gpu_type(void **state)
{
    (void)state;
    char msg[256] = "";
    kube_profile *p = NULL;
    if (kube_profile_parse(capacity_profile, sizeof capacity_profile - 1, "profile.yaml", &p, msg,
                           sizeof msg) != TY_OK)
        fail_msg("%s", msg);
    static const char *const pgroups[] = {"p4d-spot-2b", "p4d-od-2a", "p5-od-2a"};
    kube_inv *inv;
    assert_int_equal(kube_inv_new(pgroups, 3, &inv), TY_OK);
    counted c = {.p = p};

    /* No node: what the groups can grow to (4 + 2 A100 nodes, 1 H100 node). */
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.total, 48);
    assert_int_equal(c.a100.free, 48);
    assert_int_equal(c.h100.total, 8);
    assert_int_equal(c.h100.free, 8);

    feed_node(inv, NULL, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1));
    feed_node(inv, NULL, node("b1", "us-west-2b", "p4d-spot-2b", 8, 1));
    feed_node(inv, NULL, node("a0", "us-west-2a", "p4d-od-2a", 8, 1));
    /* Another tenant's pod, ours, a pod not bound yet and one that ended. */
    feed_pod(inv, NULL, pod("theirs", "b0", 4, "Running"));
    feed_pod(inv, NULL, pod("ours", "b1", 8, "Running"));
    feed_pod(inv, NULL, pod("waiting", NULL, 8, "Pending"));
    feed_pod(inv, NULL, pod("done", "a0", 8, "Succeeded"));
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    /* 3 nodes (24) + 2 more spot nodes and 1 more on-demand node (24). */
    assert_int_equal(c.a100.total, 48);
    assert_int_equal(c.a100.free, 48 - 4 - 8);
    assert_int_equal(c.h100.total, 8);

    /* Nodes that placement would not use: counted neither in total nor free; a group's node
     * still counts in its size (the group cannot grow by it). */
    feed_node(inv, NULL, node("a1", "us-west-2a", "p4d-od-2a", 8, 0)); /* not ready */
    json_t *outside = node("c0", "us-west-2c", "other", 8, 1); /* outside the zones */
    feed_node(inv, NULL, outside);
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.total, 40);
    assert_int_equal(c.a100.free, 40 - 12);
    feed_node(inv, node("b1", "us-west-2b", "p4d-spot-2b", 8, 1),
              with_taint(node("b1", "us-west-2b", "p4d-spot-2b", 8, 1),
                         "aws-node-termination-handler/spot-itn"));
    json_t *off = node("a0", "us-west-2a", "p4d-od-2a", 8, 1);
    json_object_set_new(json_object_get(off, "spec"), "unschedulable", json_true());
    feed_node(inv, node("a0", "us-west-2a", "p4d-od-2a", 8, 1), off);
    feed_node(inv, node("b0", "us-west-2b", "p4d-spot-2b", 8, 1),
              with_taint(node("b0", "us-west-2b", "p4d-spot-2b", 8, 1), "dedicated"));
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.total, 16); /* what the groups can still add */
    assert_int_equal(c.a100.free, 16);

    /* A node asked for more than it has (its allocatable shrank): free stops at zero there. */
    feed_node(inv, with_taint(node("b0", "us-west-2b", "p4d-spot-2b", 8, 1), "dedicated"),
              node("b0", "us-west-2b", "p4d-spot-2b", 4, 1));
    feed_pod(inv, NULL, pod("more", "b0", 4, "Running"));
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.total, 16 + 4);
    assert_int_equal(c.a100.free, 16);
    /* The other tenant's pod ends: its GPUs are free again. */
    feed_pod(inv, pod("theirs", "b0", 4, "Running"), pod("theirs", "b0", 4, "Succeeded"));
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.free, 16);
    feed_pod(inv, pod("more", "b0", 4, "Running"), NULL);
    assert_int_equal(kube_inv_with(inv, count_types, &c), TY_OK);
    assert_int_equal(c.a100.free, 20);
    kube_inv_free(inv);
    kube_profile_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes_and_pods),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_other_tenants_and_slim_pods),
        cmocka_unit_test(test_capacity_per_gpu_type),
        cmocka_unit_test(test_late_changes_from_the_other_informer),
        cmocka_unit_test(test_pods_per_job),
        cmocka_unit_test(test_the_shape_of_the_nodes),
        cmocka_unit_test(test_kept_scratch),
        cmocka_unit_test(test_read_leaves_the_kept_scratch),
        cmocka_unit_test(test_cpu_memory_storage_and_pod_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
