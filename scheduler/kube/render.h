/*
 * render.h - one attempt of a job as Kubernetes objects: pure functions from the job as the
 * backend sees it (backend_job, backend.h: id, attempt, image, argv, resources, ...), or from its
 * normalized spec (api/spec.c) with the id and attempt number, the placement's zone and the
 * cluster profile (profile.h) to jansson objects ready to POST with fieldValidation=Strict. Both
 * inputs of one job render the same bytes. Nothing here talks to
 * a server, reads a clock or draws a random number: the same input renders the same bytes.
 *
 * Objects of an attempt (names from kube_render_name(), "ty-<job id>-a<attempt>"):
 *
 *  - Without Volcano: a batch/v1 Job (Indexed, parallelism = completions = workers.count,
 *    backoffLimit 0: restarts are the gang's). Its pods' hostname is "<name>-<i>" (the Job
 *    controller's, for Indexed Jobs) and their subdomain KUBE_RANK_SERVICE; they carry the label
 *    KUBE_LABEL_SERVICE, which the one headless Service of the namespace
 *    (kube_render_rank_service) selects, so pod i has the DNS name "<name>-<i>.trainyard-ranks".
 *    That Service is every attempt's: it is made once, not per attempt, and owned by no Job.
 *    Pods may start before it exists; their names resolve as soon as it does
 *    (publishNotReadyAddresses).
 *  - With Volcano (profile->volcano): one batch.volcano.sh/v1alpha1 Job, one task "rank" of N
 *    replicas, minAvailable N, maxRetry 0 and no policies (Trainyard owns restarts). Volcano's
 *    svc plugin makes a headless Service per Job and sets hostname/subdomain; pod i is
 *    "<name>-rank-<i>.<name>". There is no Service to render (kube_render_rank_service refuses).
 *
 * Every object and pod carries the labels trainyard.io/job-id and trainyard.io/attempt (what the
 * backend lists and adopts by) and the annotation trainyard.io/job-name. Each pod gets the env
 * contract of docs/DESIGN.md: RANK from the completion index (the pod annotation
 * batch.kubernetes.io/job-completion-index; volcano.sh/task-index with Volcano), WORLD_SIZE,
 * LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR (rank 0's DNS name), MASTER_PORT (the profile's),
 * TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT, TRAINYARD_SERVER (when the profile has server_url),
 * TRAINYARD_DATA_DIR, TRAINYARD_OUTPUT_DIR and TRAINYARD_CHECKPOINT_DIR (profile paths, the last
 * two with "/<job id>"), then the job's env in key order. Secrets are never in the pod
 * template: the job's secret env values and the attempt's TRAINYARD_TOKEN and
 * TRAINYARD_RENDEZVOUS_SECRET (backend_job.secret_names; a stored spec's
 * {"value": null, "secret": true}) are `valueFrom.secretKeyRef` {name: the attempt's name, key:
 * the variable's name}, and their values are the data of one v1 Secret of type Opaque, named like
 * the Job and owned by it (kube_render_secret_typed), so every pod of the attempt (and one the Job
 * controller would recreate) reads the same values, and deleting the Job deletes them. A pod
 * whose Secret does not exist yet waits (the kubelet's CreateContainerConfigError) until it
 * does. Nothing secret goes into a label or an annotation.
 *
 * Placement: the GPU type's and capacity type's node labels as nodeSelector, their taints as
 * tolerations; with a zone, a required nodeAffinity on topology.kubernetes.io/zone (and the
 * quarantined nodes excluded by name, in the same term); always a
 * required podAffinity on that key over the attempt's labels, so the gang shares one zone even
 * when the zone is left to the scheduler. A spec without capacity constraint ("any") tolerates
 * every capacity type's taints; a profile with no capacity_types constrains nothing.
 *
 * Only fields that Kubernetes 1.26 has are rendered (the minimum the profile accepts is 1.24,
 * which has them all).
 */
#ifndef TY_KUBE_RENDER_H
#define TY_KUBE_RENDER_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty_error.h"
#include "scheduler/backend.h"
#include "scheduler/kube/profile.h"

/* Label keys on every object and pod of an attempt. */
#define KUBE_LABEL_JOB_ID "trainyard.io/job-id"
#define KUBE_LABEL_ATTEMPT "trainyard.io/attempt"
#define KUBE_ANNOTATION_JOB_NAME "trainyard.io/job-name"

/* The headless Service that names every batch/v1 rank, and the label (valued with its name) on
 * each pod it selects. */
#define KUBE_RANK_SERVICE "trainyard-ranks"
#define KUBE_LABEL_SERVICE "trainyard.io/service"

/* A name's buffer: "ty-" + a 26-character id + "-a" + attempt digits, with room to spare. */
#define KUBE_NAME_MAX 64

typedef struct kube_render_in {
    const json_t *spec; /* the normalized job spec (borrowed) */
    const char *job_id; /* 1 to 26 of [0-9a-z] (store/ ids are 26) */
    unsigned attempt;   /* 1, 2, ... */
    const char *zone;   /* the placement's zone; NULL leaves the zone to the scheduler */
} kube_render_in;

/*
 * Writes "ty-<job_id>-a<attempt>" to out: a DNS-1035 label valid as a Job and a Service name
 * whose pods' hostnames (<name>-<index>, index < 4096; <name>-rank-<index> with Volcano) are
 * labels too. TY_EINVAL for an id that is not 1 to 26 of [0-9a-z], attempt 0, or outlen too small.
 */
ty_err kube_render_name(const char *job_id, unsigned attempt, char *out, size_t outlen);

/*
 * Whether spec can run on this cluster, without rendering: TY_EINVAL with the offending field's
 * JSON path in path ("$.image", "$.resources.gpu.type", "$.placement.capacity",
 * "$.placement.zone") and a sentence in msg. What the API answers 422 with at submission.
 */
ty_err kube_render_check(const kube_profile *p, const json_t *spec, char *path, size_t pathlen,
                         char *msg, size_t msglen);

/*
 * The attempt's workload: a batch/v1 Job, or a Volcano Job when p->volcano. *out is new.
 * TY_EINVAL (msg "PATH: reason", as kube_render_check) for a spec that cannot run here or a bad
 * id/attempt; TY_ENOMEM.
 */
ty_err kube_render_job(const kube_profile *p, const kube_render_in *in, json_t **out, char *msg,
                       size_t msglen);

/*
 * The headless Service KUBE_RANK_SERVICE in the profile's namespace: it selects every pod
 * labelled KUBE_LABEL_SERVICE=KUBE_RANK_SERVICE, publishes them before they are ready and names
 * the profile's master_port. The same for every attempt. *out is new. TY_EINVAL with Volcano
 * (its svc plugin makes a Service per Job).
 */
ty_err kube_render_rank_service(const kube_profile *p, json_t **out, char *msg, size_t msglen);

/*
 * The same from the typed job the backend is given (job->id, job->attempt; borrowed): what the
 * Kubernetes backend renders with. zone as kube_render_in's; avoid_nodes (borrowed, may be NULL
 * when navoid_nodes is 0) are nodes no pod of the attempt may run on (quarantined): a required
 * nodeAffinity term matchFields metadata.name NotIn them, in the zone's term.
 */
ty_err kube_render_job_typed(const kube_profile *p, const backend_job *job, const char *zone,
                             const char *const *avoid_nodes, size_t navoid_nodes, json_t **out,
                             char *msg, size_t msglen);

/*
 * The attempt's v1 Secret (type Opaque), named like the Job: one data key per variable of
 * job->env named in job->secret_names, its value base64. It is rendered at launch, while the
 * values are at hand, and owned by the workload once that exists (kube_render_set_owner() with
 * the created Job's uid), so deleting the workload deletes it. *out is new and holds the
 * values: release it once sent. TY_EINVAL for a job without secrets
 * (kube_render_has_secrets) or a bad id/attempt; TY_ENOMEM.
 */
ty_err kube_render_secret_typed(const kube_profile *p, const backend_job *job, json_t **out,
                                char *msg, size_t msglen);
/*
 * Sets obj's metadata.ownerReferences to the attempt's workload named like obj (a batch/v1
 * Job, or a Volcano Job with p->volcano) whose uid is job_uid. TY_EINVAL for an empty uid or
 * an object without a name; TY_ENOMEM.
 */
ty_err kube_render_set_owner(const kube_profile *p, json_t *obj, const char *job_uid);
/* 1 when job->env holds a variable named in job->secret_names: the attempt needs a Secret. */
int kube_render_has_secrets(const backend_job *job);

#endif
