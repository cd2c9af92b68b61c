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
    assert_string_equal(p->data_dir, "/data");
    assert_string_equal(p->volcano_queue, "default");
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
        "\"image_pull_secrets\": [\"regcred\"], \"kubernetes_version\": \"1.29\"}");
    assert_string_equal(p->namespace, "ml");
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
    {"kubernetes_version: \"1.20\"\n", "p.yaml:1: kubernetes_version must be"},
    {"server_url: trainyard:8080\n", "p.yaml:1: server_url must start with http://"},
    {"paths:\n  data: data\n", "p.yaml:2: paths.data must be an absolute path"},
    {"volcano:\n  enabled: yes\n", "p.yaml:2: volcano.enabled must be true or false"},
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
        cmocka_unit_test(test_empty_mapping_gets_defaults),
        cmocka_unit_test(test_json_profile),
        cmocka_unit_test(test_bad_profiles_name_line_and_reason),
        cmocka_unit_test(test_missing_file_is_io_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
