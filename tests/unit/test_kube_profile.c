/*
 * test_kube_profile.c - scheduler/kube/profile.c: the cluster profile a server starts with. What a
 * user notices: the example profile loads as the cluster is built; a mistake stops the server with
 * the file, the line and a reason; defaults fill what a profile leaves out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/kube/profile.h"
#include "tests/support/oas.h"

static kube_profile *parse_ok(const char *text)
{
    kube_profile *p = NULL;
    char msg[256] = "";
    ty_err e = kube_profile_parse(text, strlen(text), "p.yaml", &p, msg, sizeof msg);
    if (e != TY_OK)
        fail_msg("profile refused (%d): %s", e, msg);
    return p;
}

/* ---- the example profile of deploy/ ---- */

static void test_example_profile_loads(void **state)
{
    (void)state;
    kube_profile *p = NULL;
    char msg[256] = "";
    assert_int_equal(kube_profile_load(TY_EXAMPLE_PROFILE, &p, msg, sizeof msg), TY_OK);
    assert_string_equal(p->namespace, "trainyard");
    assert_int_equal(p->version_major, 1);
    assert_int_equal(p->version_minor, 26);
    assert_int_equal(p->nzones, 3);
    assert_string_equal(p->zones[1], "us-west-2b");
    assert_non_null(p->server_url);
    assert_int_equal(p->volcano, 0);
    assert_int_equal(p->termination_grace_seconds, 90);

    /* Four GPU types, each with its product label and the GPU taint. */
    static const char *const types[][2] = {{"a100", "NVIDIA-A100-SXM4-40GB"},
                                           {"h100", "NVIDIA-H100-80GB-HBM3"},
                                           {"v100", "Tesla-V100-SXM2-16GB"},
                                           {"a10g", "NVIDIA-A10G"}};
    assert_int_equal(p->ngpu_types, 4);
    for (size_t i = 0; i < 4; i++) {
        const kube_node_class *c = kube_profile_gpu_type(p, types[i][0]);
        assert_non_null(c);
        assert_string_equal(kube_node_class_label(c, "nvidia.com/gpu.product"), types[i][1]);
        assert_int_equal(c->ntaints, 1);
        assert_string_equal(c->taints[0].key, "nvidia.com/gpu");
        assert_string_equal(c->taints[0].value, "present");
        assert_string_equal(c->taints[0].effect, "NoSchedule");
    }
    const kube_node_class *spot = kube_profile_capacity(p, "spot");
    assert_non_null(spot);
    assert_string_equal(kube_node_class_label(spot, "eks.amazonaws.com/capacityType"), "SPOT");
    assert_string_equal(kube_node_class_label(spot, "karpenter.sh/capacity-type"), "spot");
    assert_non_null(kube_profile_capacity(p, "on-demand"));

    /* One group per GPU type, capacity type and zone, named as EKS labels the nodes. */
    assert_int_equal(p->ngroups, 4 * 2 * 3);
    int found = 0;
    for (size_t i = 0; i < p->ngroups; i++) {
        const kube_node_group *g = &p->groups[i];
        assert_int_equal(g->max_size, 4);
        if (!strcmp(g->name, "p4d-spot-2b")) {
            found = 1;
            assert_string_equal(g->zone, "us-west-2b");
            assert_string_equal(g->gpu_type, "a100");
            assert_string_equal(g->capacity, "spot");
            assert_int_equal(g->gpus_per_node, 8);
        }
        if (!strcmp(g->name, "g5-od-2a"))
            assert_int_equal(g->gpus_per_node, 4);
    }
    assert_true(found);
    kube_profile_free(p);
}

/* ---- the example profile describes the cluster deploy/eksctl/cluster.yaml builds ---- */

static const char *tag(const json_t *ng, const char *kind, const char *key)
{
    char name[256];
    snprintf(name, sizeof name, "k8s.io/cluster-autoscaler/node-template/%s/%s", kind, key);
    return json_string_value(json_object_get(json_object_get(ng, "tags"), name));
}

static void test_example_profile_matches_the_eksctl_cluster(void **state)
{
    (void)state;
    kube_profile *p = NULL;
    json_t *cfg = NULL;
    char msg[256] = "";
    assert_int_equal(kube_profile_load(TY_EXAMPLE_PROFILE, &p, msg, sizeof msg), TY_OK);
    if (oas_yaml_load_file(TY_EKSCTL_CONFIG, &cfg, msg, sizeof msg))
        fail_msg("%s", msg);
    const json_t *zones = json_object_get(cfg, "availabilityZones");
    assert_int_equal(json_array_size(zones), p->nzones);
    for (size_t i = 0; i < p->nzones; i++)
        assert_string_equal(json_string_value(json_array_get(zones, i)), p->zones[i]);

    size_t gpu_groups = 0, i;
    const json_t *ng;
    json_array_foreach(json_object_get(cfg, "managedNodeGroups"), i, ng)
    {
        const char *name = json_string_value(json_object_get(ng, "name"));
        if (!tag(ng, "resources", "nvidia.com/gpu"))
            continue; /* the CPU groups that run the server are not placement's business */
        gpu_groups++;
        const kube_node_group *g = NULL;
        for (size_t k = 0; k < p->ngroups; k++)
            if (!strcmp(p->groups[k].name, name))
                g = &p->groups[k];
        if (!g)
            fail_msg("eksctl's node group %s is not in the profile", name);
        assert_string_equal(
            json_string_value(json_array_get(json_object_get(ng, "availabilityZones"), 0)),
            g->zone);
        assert_int_equal(json_integer_value(json_object_get(ng, "maxSize")), g->max_size);
        assert_string_equal(g->capacity,
                            json_is_true(json_object_get(ng, "spot")) ? "spot" : "on-demand");
        assert_int_equal(strtol(tag(ng, "resources", "nvidia.com/gpu"), NULL, 10),
                         g->gpus_per_node);
        /* Every label the profile selects on is one the group's nodes will carry, and every
         * taint they carry is one the profile tolerates. */
        const kube_node_class *classes[] = {kube_profile_gpu_type(p, g->gpu_type),
                                            kube_profile_capacity(p, g->capacity)};
        for (size_t c = 0; c < 2; c++)
            for (size_t l = 0; l < classes[c]->nlabels; l++) {
                const char *want = tag(ng, "label", classes[c]->labels[l].key);
                if (!want || strcmp(want, classes[c]->labels[l].value))
                    fail_msg("group %s: nodes labelled %s=%s, the profile wants %s", name,
                             classes[c]->labels[l].key, want ? want : "(none)",
                             classes[c]->labels[l].value);
            }
        const json_t *t;
        size_t ti;
        json_array_foreach(json_object_get(ng, "taints"), ti, t)
        {
            int tolerated = 0;
            for (size_t c = 0; c < 2; c++)
                for (size_t k = 0; k < classes[c]->ntaints; k++)
                    tolerated |= !strcmp(classes[c]->taints[k].key,
                                         json_string_value(json_object_get(t, "key"))) &&
                                 !strcmp(classes[c]->taints[k].effect,
                                         json_string_value(json_object_get(t, "effect")));
            if (!tolerated)
                fail_msg("group %s: a taint the profile does not tolerate", name);
        }
    }
    assert_int_equal(gpu_groups, p->ngroups);
    json_decref(cfg);
    kube_profile_free(p);
}

/* ---- defaults and JSON ---- */

static void test_empty_mapping_gets_defaults(void **state)
{
    (void)state;
    kube_profile *p = parse_ok("{}");
    assert_string_equal(p->namespace, "default");
    assert_int_equal(p->version_minor, 26);
    assert_null(p->server_url);
    assert_int_equal(p->ttl_seconds_after_finished, -1);
    assert_int_equal(p->master_port, 29500);
    assert_int_equal(p->termination_grace_seconds, -1);
    assert_int_equal(p->scale_up_timeout_seconds, 900);
    assert_int_equal(p->unschedulable_timeout_seconds, 300);
    assert_int_equal(p->quarantine.failures, 3);
    assert_int_equal(p->quarantine.min_jobs, 2);
    assert_int_equal(p->quarantine.window_seconds, 3600);
    assert_int_equal(p->quarantine.release_seconds, 86400);
    assert_string_equal(p->data_dir, "/data");
    assert_string_equal(p->volcano_queue, "default");
    kube_profile_free(p);
}

/* The quarantine settings, each key on its own; the others keep their defaults. */
static void test_quarantine_settings(void **state)
{
    (void)state;
    kube_profile *p = parse_ok("quarantine:\n  failures: 5\n  window_seconds: 600\n");
    assert_int_equal(p->quarantine.failures, 5);
    assert_int_equal(p->quarantine.min_jobs, 2);
    assert_int_equal(p->quarantine.window_seconds, 600);
    assert_int_equal(p->quarantine.release_seconds, 86400);
    kube_profile_free(p);
}

static void test_json_profile(void **state)
{
    (void)state;
    kube_profile *p = parse_ok(
        "{\"namespace\": \"ml\", \"zones\": [\"z1\"], \"volcano\": {\"enabled\": true, "
        "\"queue\": \"gpu\"}, \"gpu_types\": {\"t4\": {\"node_labels\": "
        "{\"nvidia.com/gpu.product\": \"Tesla-T4\"}}}, \"capacity_types\": {\"spot\": {}},"
        "\"node_groups\": [{\"name\": \"g4-spot-z1\", \"zone\": \"z1\", \"gpu_type\": \"t4\","
        "\"capacity\": \"spot\", \"gpus_per_node\": 1, \"max_size\": 10}],"
        "\"service_account\": \"runner\", \"priority_class\": \"training\","
        "\"image_pull_secrets\": [\"regcred\"], \"kubernetes_version\": \"1.29\","
        "\"unschedulable_timeout_seconds\": 120}");
    assert_string_equal(p->namespace, "ml");
    assert_int_equal(p->unschedulable_timeout_seconds, 120);
    assert_int_equal(p->volcano, 1);
    assert_string_equal(p->volcano_queue, "gpu");
    assert_int_equal(p->ngroups, 1);
    assert_int_equal(p->groups[0].max_size, 10);
    assert_string_equal(p->service_account, "runner");
    assert_string_equal(p->priority_class, "training");
    assert_int_equal(p->npull_secrets, 1);
    assert_int_equal(p->version_minor, 29);
    kube_profile_free(p);
}

/* ---- mistakes: FILE:LINE: reason ---- */

typedef struct bad_case {
    const char *text;
    const char *expect; /* the whole message must start with this */
} bad_case;

static const bad_case bad_cases[] = {
    {"namespace: ml\nzone: [a]\n", "p.yaml:2: unknown key 'zone' in the profile"},
    {"namespace: ml\nnamespace: ml2\n", "p.yaml:2: the profile: key 'namespace' is repeated"},
    {"namespace: Not_A_Label\n", "p.yaml:1: namespace 'Not_A_Label' is not a DNS label"},
    {"zones: us-west-2a\n", "p.yaml:1: zones must be a list of strings"},
    {"zones: [a, a]\n", "p.yaml:1: zones: 'a' is listed twice"},
    {"master_port: 70000\n", "p.yaml:1: master_port must be between 1 and 65535"},
    {"master_port: \"80\"\n", "p.yaml:1: master_port must be an integer"},
    {"unschedulable_timeout_seconds: 0\n",
     "p.yaml:1: unschedulable_timeout_seconds must be between 1 and 86400"},
    {"kubernetes_version: \"1.20\"\n", "p.yaml:1: kubernetes_version must be"},
    {"server_url: trainyard:8080\n", "p.yaml:1: server_url must start with http://"},
    {"paths:\n  data: data\n", "p.yaml:2: paths.data must be an absolute path"},
    {"volcano:\n  enabled: yes\n", "p.yaml:2: volcano.enabled must be true or false"},
    {"quarantine:\n  failures: 0\n", "p.yaml:2: quarantine.failures must be between 1 and"},
    {"quarantine:\n  jobs: 2\n", "p.yaml:2: unknown key 'jobs'"},
    {"quarantine:\n  release_seconds: -5\n",
     "p.yaml:2: quarantine.release_seconds must be between 1 and"},
    {"gpu_types:\n  a100:\n    labels: {}\n", "p.yaml:3: unknown key 'labels' in a GPU type"},
    {"gpu_types:\n  a100:\n    taints:\n      - {key: nvidia.com/gpu, effect: Never}\n",
     "p.yaml:4: a taint's effect is NoSchedule, PreferNoSchedule or NoExecute"},
    {"gpu_types:\n  a100:\n    taints:\n      - {value: x, effect: NoSchedule}\n",
     "p.yaml:4: a taint needs a key and an effect"},
    {"gpu_types:\n  a100:\n    node_labels: {\"bad key!\": x}\n",
     "p.yaml:3: 'bad key!' is not a valid label key"},
    {"capacity_types:\n  preemptible: {}\n",
     "p.yaml:2: capacity type 'preemptible' is neither spot nor on-demand"},
    {"node_groups:\n  - {name: g, zone: z}\n",
     "p.yaml:2: a node group needs name, zone, gpu_type, capacity, gpus_per_node and max_size"},
    {"zones: [z1]\ngpu_types: {t4: {}}\ncapacity_types: {spot: {}}\nnode_groups:\n"
     "  - {name: g, zone: z1, gpu_type: t4, capacity: spot, gpus_per_node: 1, max_size: 1}\n"
     "  - {name: h, zone: z1, gpu_type: a100, capacity: spot, gpus_per_node: 1, max_size: 1}\n",
     "p.yaml:6: node group 'h': GPU type 'a100' is not in gpu_types"},
    {"zones: [z1]\ngpu_types: {t4: {}}\ncapacity_types: {spot: {}}\nnode_groups:\n"
     "  - {name: g, zone: z2, gpu_type: t4, capacity: spot, gpus_per_node: 1, max_size: 1}\n",
     "p.yaml:5: node group 'g': zone 'z2' is not in zones"},
    {"gpu_types: {t4: {}}\nnode_groups:\n"
     "  - {name: g, zone: z1, gpu_type: t4, capacity: on-demand, gpus_per_node: 1, "
     "max_size: 1}\n",
     "p.yaml:3: node group 'g': capacity 'on-demand' is not in capacity_types"},
    {"namespace: [ml\n", "p.yaml:2: "},
    {"- a\n- b\n", "p.yaml:1: the profile must be a mapping"},
    {"", "p.yaml:1: the profile is empty"},
};

static void test_bad_profiles_name_line_and_reason(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        kube_profile *p = NULL;
        char msg[256] = "";
        const bad_case *c = &bad_cases[i];
        ty_err e = kube_profile_parse(c->text, strlen(c->text), "p.yaml", &p, msg, sizeof msg);
        if (e != TY_EINVAL || strncmp(msg, c->expect, strlen(c->expect)))
            fail_msg("case %zu (%s): got %d '%s', want '%s'", i, c->text, e, msg, c->expect);
        assert_null(p);
    }
}

static void test_missing_file_is_io_error(void **state)
{
    (void)state;
    kube_profile *p = NULL;
    char msg[256] = "";
    assert_int_equal(kube_profile_load("/nonexistent/profile.yaml", &p, msg, sizeof msg), TY_EIO);
    assert_non_null(strstr(msg, "/nonexistent/profile.yaml"));
    kube_profile_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_profile_loads),
        cmocka_unit_test(test_example_profile_matches_the_eksctl_cluster),
        cmocka_unit_test(test_empty_mapping_gets_defaults),
        cmocka_unit_test(test_quarantine_settings),
        cmocka_unit_test(test_json_profile),
        cmocka_unit_test(test_bad_profiles_name_line_and_reason),
        cmocka_unit_test(test_missing_file_is_io_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
