/*
 * rbac_granted.h - what the RBAC in deploy/ grants the server, and so all the Kubernetes
 * backend may ask: test_deploy holds deploy/ to this table exactly, and test_kube_serve holds
 * every request the server made of the fake API server to it.
 */
#ifndef TY_TESTS_RBAC_GRANTED_H
#define TY_TESTS_RBAC_GRANTED_H

typedef struct rbac_grant {
    const char *kind, *group, *resource, *verbs; /* verbs separated by spaces */
} rbac_grant;

/* The Role in the jobs' namespace and the cluster-wide reads of the ClusterRole. */
static const rbac_grant rbac_granted[] = {
    /* An attempt's Job: created, read back (409 after a restart), followed, deleted. */
    {"Role", "batch", "jobs", "create get list watch delete"},
    {"Role", "batch.volcano.sh", "jobs", "create get list watch delete"},
    /* Followed; a gang's pods deleted when their Job's deletion leaves them. */
    {"Role", "", "pods", "get list watch delete"},
    {"Role", "", "pods/log", "get"},
    /* The ranks' one headless Service: created once, read back when it exists already. An
     * attempt's Secret: created, read back after a restart; the garbage collector deletes it
     * with its Job. */
    {"Role", "", "services", "create get"},
    {"Role", "", "secrets", "create get"},
    {"ClusterRole", "", "nodes", "get list watch"},
    {"ClusterRole", "", "pods", "get list watch"}, /* other tenants' GPUs, read-only */
};

#endif
