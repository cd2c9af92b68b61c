/*
 * profile.h - the cluster profile of the Kubernetes backend: what Trainyard must know about a
 * cluster that the API server does not say (which labels mean "an A100 node" or "a spot node",
 * which taints those nodes carry, which node groups can grow from zero, whether Volcano runs).
 *
 * The profile is one YAML (or JSON, which is YAML) document; deploy/cluster-profile.example.yaml
 * documents every key. Unknown keys, duplicate keys and values of the wrong shape are errors,
 * reported as "FILE:LINE: reason" so that a bad profile stops the server at start with a line to
 * fix. Keys (all optional unless marked):
 *
 *   namespace                  DNS label; "default"
 *   kubernetes_version         "MAJOR.MINOR" the rendering targets, at least 1.24; "1.26"
 *   server_url                 TRAINYARD_SERVER as pods reach the server (in-cluster URL)
 *   zones                      the zones placement may pick, in order of preference
 *   image_pull_secrets         secret names given to every pod
 *   service_account            the pods' service account
 *   priority_class             the pods' priority class
 *   ttl_seconds_after_finished overrides the job's own value when set
 *   master_port                MASTER_PORT; 29500
 *   paths: {data, output, checkpoints}
 *                              TRAINYARD_DATA_DIR as is; TRAINYARD_OUTPUT_DIR and
 *                              TRAINYARD_CHECKPOINT_DIR with "/<job id>" appended, so that jobs
 *                              sharing one EFS claim keep apart; "/data", "/output", "/checkpoints"
 *   gpu_types: {NAME: {node_labels: {K: V}, taints: [{key, value, effect}]}}
 *   capacity_types: {spot|on-demand: {node_labels, taints}}
 *   node_groups: [{name, zone, gpu_type, capacity, gpus_per_node, max_size}]   (all required)
 *   scale_up_timeout_seconds   how long an attempt placed on a growing group may wait for its
 *                              nodes before it is withdrawn and placed elsewhere; 900
 *   unschedulable_timeout_seconds
 *                              how long an attempt's pods may stay unschedulable in their zone
 *                              (the scheduler's PodScheduled=False, no node group growing for
 *                              them) before it is withdrawn and placed elsewhere; 300
 *   volcano: {enabled, queue}  false, "default"
 *   termination_grace_seconds  how long a rank has from SIGTERM (its checkpoint) to SIGKILL;
 *                              unset: Kubernetes' 30
 *   quarantine: {failures, min_jobs, window_seconds, release_seconds}
 *                              when a node that keeps ending attempts is taken out of rotation
 *                              (scheduler/quarantine.h): 3 failures of at least 2 jobs within
 *                              3600 s; released after 86400 s
 *
 * A node group's gpu_type, capacity and zone must name a declared GPU type, capacity type and
 * (when zones are listed) zone. Threads: a loaded profile is only read; share it freely.
 */
#ifndef TY_KUBE_PROFILE_H
#define TY_KUBE_PROFILE_H

#include <stddef.h>

#include "common/ty_error.h"

typedef struct kube_label {
    char *key;
    char *value;
} kube_label;

typedef struct kube_taint {
    char *key;
    char *value;  /* may be "" */
    char *effect; /* NoSchedule, PreferNoSchedule or NoExecute */
} kube_taint;

/* A GPU type or a capacity type: the labels its nodes carry and the taints they have. */
typedef struct kube_node_class {
    char *name; /* "a100"; for capacity types "spot" or "on-demand" */
    kube_label *labels;
    size_t nlabels;
    kube_taint *taints;
    size_t ntaints;
} kube_node_class;

typedef struct kube_node_group {
    char *name; /* as the cluster names it: "p4d-spot-2b" */
    char *zone;
    char *gpu_type;    /* a kube_profile.gpu_types name */
    char *capacity;    /* "spot" or "on-demand" */
    int gpus_per_node; /* >= 1 */
    int max_size;      /* nodes; >= 1 */
} kube_node_group;

/* The quarantine settings (scheduler/quarantine.h's policy, which the server passes on). */
typedef struct kube_quarantine {
    long long failures, min_jobs, window_seconds, release_seconds;
} kube_quarantine;

typedef struct kube_profile {
    char *namespace;
    int version_major, version_minor;
    char *server_url; /* NULL when not set */
    char **zones;
    size_t nzones;
    char **pull_secrets;
    size_t npull_secrets;
    char *service_account;                /* NULL when not set */
    char *priority_class;                 /* NULL when not set */
    long long ttl_seconds_after_finished; /* -1: the job's own value */
    int master_port;
    char *data_dir, *output_dir, *checkpoint_dir;
    kube_node_class *gpu_types;
    size_t ngpu_types;
    kube_node_class *capacity_types;
    size_t ncapacity_types;
    kube_node_group *groups;
    size_t ngroups;
    long long scale_up_timeout_seconds;
    long long unschedulable_timeout_seconds;
    int volcano; /* 1: render Volcano Jobs */
    char *volcano_queue;
    long long termination_grace_seconds; /* -1: Kubernetes' default */
    kube_quarantine quarantine;
} kube_profile;

/*
 * Parses text[0..len) (YAML or JSON); file names the source in messages ("profile.yaml:12:
 * unknown key 'zone'"). *out is new (kube_profile_free). TY_EINVAL with msg for a bad profile,
 * TY_ENOMEM.
 */
ty_err kube_profile_parse(const char *text, size_t len, const char *file, kube_profile **out,
                          char *msg, size_t msglen);

/* Reads and parses the file at path. TY_EIO (msg says why) when it cannot be read. */
ty_err kube_profile_load(const char *path, kube_profile **out, char *msg, size_t msglen);

/* Accepts NULL. */
void kube_profile_free(kube_profile *p);

/* Look-ups by name; borrowed results, NULL when absent. */
const kube_node_class *kube_profile_gpu_type(const kube_profile *p, const char *name);
const kube_node_class *kube_profile_capacity(const kube_profile *p, const char *name);

/* The value of label key in c, or NULL (borrowed). */
const char *kube_node_class_label(const kube_node_class *c, const char *key);

#endif
