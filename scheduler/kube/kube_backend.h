/*
 * kube_backend.h - the Kubernetes backend: every attempt of a job is a batch/v1 Job (Indexed,
 * one pod per rank) and its headless Service, or a Volcano Job (render.h), in one namespace.
 *
 * Parts joined here: the API client (kclient.h), four informers (informer.h) that keep slim
 * records of the cluster's nodes, of every pod of the namespace, of its Jobs labelled
 * trainyard.io/job-id and, slimmed to node and GPUs (inventory.h), of every bound unfinished
 * pod of the other namespaces, the cluster
 * profile (profile.h), rendering (render.h) and placement (placement.h). A few writer threads
 * (KB_WRITERS), each over its own keep-alive connection, perform the API writes (creates,
 * deletes): the writes of different jobs at once, those of one job in the order they were
 * asked, so launch() and stop() return at once and a sweep's attempts are not created one
 * round trip after another; what happens to the pods arrives through the informers' callbacks,
 * which turn each change into backend events (backend.h) queued for observe() behind an
 * eventfd.
 *
 * reserve() places the gang (placement.h) on the inventory the informers hold: GPUs per node,
 * minus what the pods bound there request (any tenant's) and what other reservations booked
 * in a zone before their pods were bound. launch() places every attempt again (the zone of a
 * reclaimed or withdrawn attempt is avoided when another fits). An attempt that waits for a
 * node group to grow from zero is withdrawn after the profile's scale_up_timeout_seconds: its
 * objects are deleted and it ends as one DISRUPTED (RECLAIMED, rank -1) event, which costs no
 * restart. free_resources() tells admission across teams, per GPU type of the profile, what
 * placement could use (nodes, and what node groups can still add) and what of it is free (less
 * every bound pod's GPUs and what reservations booked whose pods are not bound).
 *
 * Objects of attempts that ended on their own are left to the Job's ttlSecondsAfterFinished;
 * stop() and withdrawal delete theirs. Logs do not depend on them: while a rank's container
 * runs, its pods/log is streamed into the server's own capped log files (kube_logs.h), and
 * log_open() reads those, whether the pod still exists or not.
 *
 * Threads: as backend.h. kube_backend_metrics() may be called from any thread.
 */
#ifndef TY_SCHEDULER_KUBE_KUBE_BACKEND_H
#define TY_SCHEDULER_KUBE_KUBE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_buf.h"
#include "common/ty_error.h"
#include "scheduler/backend.h"
#include "scheduler/kube/kclient.h"
#include "scheduler/kube/kubeconfig.h"
#include "scheduler/kube/profile.h"

typedef struct kube_backend_config {
    ty_kubeconfig *kubeconfig;      /* loaded (file or in-cluster); borrowed, outlives the backend */
    const kube_profile *profile;    /* loaded; borrowed, outlives the backend */
    const char *namespace_;         /* NULL: the profile's namespace */
    const ty_kclient_opts *client;  /* NULL: the client's defaults */
    int64_t sync_timeout_ms;        /* how long new() waits for the first lists; 0: 30000 */
    int64_t informer_backoff_ms;    /* an informer's first wait after a failure; 0: its default */
    const char *logs_dir;           /* where the ranks' logs are kept (<data_dir>/logs,
                                       kube_logs.h); NULL: no logs are kept or served */
    uint64_t log_limit;             /* bytes kept of one rank's log; 0: ranklog.h's default */
    uint64_t job_log_limit;         /* bytes a job's previous attempts' logs keep; 0: 4 x that */
    int64_t rank_service_recheck_ms; /* how long the ranks' Service, once known to exist, is
                                        not asked for again (a deleted one comes back at the
                                        first launch after this); 0: 60000 */
} kube_backend_config;

/*
 * Starts the backend: the client, the informers, the worker; waits (bounded) until the first
 * lists of nodes, pods, Jobs and the cluster's bound pods arrived (the last needs pods
 * get/list/watch cluster-wide: deploy/kustomize's ClusterRole). TY_EAGAIN with err saying which list failed and why
 * ("cannot list pods in namespace trainyard: ... (HTTP 403 Forbidden)") when they did not in
 * time; TY_EINVAL for a bad config; TY_ENOMEM, TY_EIO.
 */
ty_err kube_backend_new(const kube_backend_config *cfg, backend **out, char *err, size_t len);

/*
 * Appends the backend's counters as Prometheus text: the client's (kclient.h), informer watch
 * restarts and re-lists, objects created, placement decisions and waits by reason, and
 * trainyard_kube_event_delay_seconds, a histogram of the time from an informer's delivery of a
 * change to observe() handing out the event it caused. b must be a Kubernetes backend.
 */
ty_err kube_backend_metrics(backend *b, ty_buf *out);

#endif
