/*
 * fk_sched.c - the fake scheduler: binds a pending pod to a node, or leaves it
 * Pending with PodScheduled=False in the v1.26 scheduler's words (12a-12e).
 *
 * Filters run in the default profile's order and a node is counted once,
 * under the first filter it fails: NodeUnschedulable, TaintToleration,
 * NodeAffinity (nodeSelector and required nodeAffinity), NodeResourcesFit,
 * InterPodAffinity (required podAffinity by topologyKey). The message's
 * "<count> <reason>" parts are sorted as plain strings, count included.
 *
 * NodeResourcesFit counts as v1.26's fitsRequest: a pod slot (allocatable.pods
 * against the active pods bound there: "Too many pods"); then, unless the pod
 * requests nothing, cpu, memory and ephemeral-storage (allocatable minus the
 * requests of those pods: "Insufficient cpu", ...) and each extended resource
 * the pod asks for ("Insufficient nvidia.com/gpu"). A node short of several
 * counts under each of them, but once in the preemption part.
 */
#include "tests/support/fake_kube/fk.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GPU "nvidia.com/gpu"

#include "common/ty_quantity.h"

static long quantity_int(const json_t *v)
{
    if (json_is_integer(v))
        return (long)json_integer_value(v);
    const char *s = json_string_value(v);
    return s ? strtol(s, NULL, 10) : 0;
}

static long container_gpus(const json_t *c)
{
    const json_t *v = json_object_get(fk_path((json_t *)c, "resources.requests", 0), GPU);
    if (!v)
        v = json_object_get(fk_path((json_t *)c, "resources.limits", 0), GPU);
    return quantity_int(v);
}

long fk_pod_gpus(const json_t *pod)
{
    long n = 0, init = 0;
    size_t i;
    json_t *c;
    json_array_foreach(fk_path((json_t *)pod, "spec.containers", 0), i, c)
        n += container_gpus(c);
    /* Init containers run one at a time first: the largest counts against the sum. */
    json_array_foreach(fk_path((json_t *)pod, "spec.initContainers", 0), i, c)
        if (container_gpus(c) > init)
            init = container_gpus(c);
    return n > init ? n : init;
}

/* A quantity in units of 10^-scale (cores at 3: millicores); 0 when absent or bad. */
static int64_t scaled(const json_t *v, int scale)
{
    int64_t n = 0;
    if (json_is_integer(v)) {
        n = json_integer_value(v);
        for (int i = 0; i < scale; i++)
            n *= 10;
        return n;
    }
    const char *s = json_string_value(v);
    if (!s || ty_quantity_scaled(s, strlen(s), scale, &n) != TY_OK)
        return 0;
    return n;
}

static void container_requests(const json_t *c, int64_t out[3])
{
    static const char *const names[3] = {"cpu", "memory", "ephemeral-storage"};
    const json_t *req = fk_path((json_t *)c, "resources.requests", 0);
    const json_t *lim = fk_path((json_t *)c, "resources.limits", 0);
    for (int i = 0; i < 3; i++) {
        const json_t *q = json_object_get(req, names[i]);
        out[i] = scaled(q ? q : json_object_get(lim, names[i]), i == 0 ? 3 : 0);
    }
}

void fk_pod_requests(const json_t *pod, int64_t out[3])
{
    static const char *const names[3] = {"cpu", "memory", "ephemeral-storage"};
    int64_t one[3];
    size_t i;
    json_t *c;
    out[0] = out[1] = out[2] = 0;
    json_array_foreach(fk_path((json_t *)pod, "spec.containers", 0), i, c)
    {
        container_requests(c, one);
        for (int k = 0; k < 3; k++)
            out[k] += one[k];
    }
    json_array_foreach(fk_path((json_t *)pod, "spec.initContainers", 0), i, c)
    {
        container_requests(c, one);
        for (int k = 0; k < 3; k++)
            if (one[k] > out[k])
                out[k] = one[k];
    }
    const json_t *ov = fk_path((json_t *)pod, "spec.overhead", 0);
    for (int k = 0; k < 3; k++)
        out[k] += scaled(json_object_get(ov, names[k]), k == 0 ? 3 : 0);
}

static int tolerates(const json_t *pod, const json_t *taint)
{
    size_t i;
    json_t *t;
    json_array_foreach(fk_path((json_t *)pod, "spec.tolerations", 0), i, t)
    {
        const char *key = fk_str(t, "key"), *op = fk_str(t, "operator");
        const char *eff = fk_str(t, "effect");
        if (*eff && strcmp(eff, fk_str(taint, "effect")))
            continue;
        if (!*key && !strcmp(op, "Exists"))
            return 1;
        if (strcmp(key, fk_str(taint, "key")))
            continue;
        if (!strcmp(op, "Exists") || !strcmp(fk_str(t, "value"), fk_str(taint, "value")))
            return 1;
    }
    return 0;
}

static int expr_matches(const json_t *e, const char *value)
{
    const char *op = fk_str(e, "operator");
    const json_t *vals = json_object_get(e, "values");
    int in = 0;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v)
    {
        in |= value && json_is_string(v) && !strcmp(json_string_value(v), value);
    }
    if (!strcmp(op, "In"))
        return in;
    if (!strcmp(op, "NotIn"))
        return !in;
    if (!strcmp(op, "Exists"))
        return value != NULL;
    if (!strcmp(op, "DoesNotExist"))
        return value == NULL;
    if (!value || json_array_size(vals) != 1)
        return 0;
    long a = strtol(value, NULL, 10), b = strtol(fk_str(json_array_get(vals, 0), ""), NULL, 10);
    const char *bv = json_string_value(json_array_get(vals, 0));
    b = bv ? strtol(bv, NULL, 10) : b;
    return !strcmp(op, "Gt") ? a > b : !strcmp(op, "Lt") ? a < b : 0;
}

static int node_affinity_ok(const json_t *pod, const json_t *node)
{
    const json_t *labels = fk_path((json_t *)node, "metadata.labels", 0);
    const char *k;
    json_t *v;
    json_object_foreach(fk_path((json_t *)pod, "spec.nodeSelector", 0), k, v)
    {
        const char *have = json_string_value(json_object_get(labels, k));
        if (!have || !json_is_string(v) || strcmp(have, json_string_value(v)))
            return 0;
    }
    const json_t *terms =
        fk_path((json_t *)pod,
                "spec.affinity.nodeAffinity."
                "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                0);
    if (!terms)
        return 1;
    size_t i;
    json_t *t;
    json_array_foreach(terms, i, t)
    {
        int ok = 1;
        size_t j;
        json_t *e;
        json_array_foreach(json_object_get(t, "matchExpressions"), j, e)
        {
            ok &= expr_matches(e, json_string_value(json_object_get(labels, fk_str(e, "key"))));
        }
        json_array_foreach(json_object_get(t, "matchFields"), j, e)
        {
            ok &= expr_matches(e, fk_str(node, "metadata.name"));
        }
        if (ok && (json_object_size(t) > 0))
            return 1;
    }
    return 0;
}

int fk_pod_active(const json_t *p)
{
    const char *ph = fk_str(p, "status.phase");
    return strcmp(ph, "Succeeded") && strcmp(ph, "Failed");
}

/* Required pod affinity, prepared once per pod: for every term, the
 * topology values of the nodes where a matching pod runs. A pod that would
 * match its own term passes when no pod matches anywhere (the first pod of a
 * group). */
typedef struct affinity {
    json_t *terms; /* array of {key, values: {value: true}, open: bool} */
} affinity;

static void affinity_prepare(fk_store *st, const json_t *pod, affinity *a)
{
    const json_t *terms = fk_path((json_t *)pod,
                                  "spec.affinity.podAffinity."
                                  "requiredDuringSchedulingIgnoredDuringExecution",
                                  0);
    a->terms = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(terms, i, t)
    {
        const char *key = fk_str(t, "topologyKey");
        fk_sel *sel = NULL;
        json_t *values = json_object();
        int any = 0;
        if (fk_sel_from_json(json_object_get(t, "labelSelector"), &sel) == 0) {
            const json_t *nss = json_object_get(t, "namespaces");
            /* The candidates: the pods carrying one of matchLabels' pairs (through the index)
             * when there is one, else every pod; the whole selector is checked below. */
            const json_t *candidates = st->objs[FK_PODS];
            const char *mk;
            json_t *mv;
            json_object_foreach(fk_path(t, "labelSelector.matchLabels", 0), mk, mv)
            {
                char pair[700];
                const char *val = json_string_value(mv);
                snprintf(pair, sizeof pair, "%s=%s", mk, val ? val : "");
                const json_t *set = json_object_get(st->pods_by_label, pair);
                candidates = set ? set : json_object_get(st->pods_by_label, "");
                break;
            }
            const char *pkey;
            json_t *c;
            json_object_foreach((json_t *)candidates, pkey, c)
            {
                json_t *p = json_is_object(c) ? c : json_object_get(st->objs[FK_PODS], pkey);
                if (!p)
                    continue;
                const char *pns = fk_str(p, "metadata.namespace");
                int ns_ok =
                    json_array_size(nss) == 0 ? !strcmp(pns, fk_str(pod, "metadata.namespace")) : 0;
                size_t k;
                json_t *n;
                json_array_foreach(nss, k, n)
                {
                    ns_ok |= json_is_string(n) && !strcmp(json_string_value(n), pns);
                }
                if (!ns_ok || !fk_pod_active(p) || !*fk_str(p, "spec.nodeName") ||
                    !fk_sel_matches(sel, fk_path(p, "metadata.labels", 0)))
                    continue;
                any = 1;
                const json_t *pn = fk_get(st, FK_NODES, "", fk_str(p, "spec.nodeName"));
                const char *v = json_string_value(
                    json_object_get(fk_path((json_t *)pn, "metadata.labels", 0), key));
                if (v)
                    json_object_set_new(values, v, json_true());
            }
        }
        int self = sel && fk_sel_matches(sel, fk_path((json_t *)pod, "metadata.labels", 0));
        fk_sel_free(sel);
        json_array_append_new(a->terms, json_pack("{s:s, s:o, s:b}", "key", key, "values", values,
                                                  "open", !any && self));
    }
}

static int pod_affinity_ok(const affinity *a, const json_t *node)
{
    size_t i;
    json_t *t;
    json_array_foreach(a->terms, i, t)
    {
        const char *want = json_string_value(
            json_object_get(fk_path((json_t *)node, "metadata.labels", 0), fk_str(t, "key")));
        if (!want)
            return 0;
        if (!json_object_get(json_object_get(t, "values"), want) &&
            !json_is_true(json_object_get(t, "open")))
            return 0;
    }
    return 1;
}

typedef struct reason_count {
    char text[300];
    int n;
    int resolvable; /* preemption could help: "No preemption victims found" */
} reason_count;

static void count(reason_count *rc, int *nrc, const char *text, int resolvable)
{
    for (int i = 0; i < *nrc; i++) {
        if (!strcmp(rc[i].text, text)) {
            rc[i].n++;
            return;
        }
    }
    if (*nrc < 32) {
        snprintf(rc[*nrc].text, sizeof rc[0].text, "%.299s", text);
        rc[*nrc].n = 1;
        rc[*nrc].resolvable = resolvable;
        (*nrc)++;
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Joins "<n> <text>" parts sorted as strings. */
static void join_sorted(char parts[][320], int n, char *out, size_t len)
{
    const char *v[32];
    for (int i = 0; i < n; i++)
        v[i] = parts[i];
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(out, i ? ", " : "", len - strlen(out) - 1);
        strncat(out, v[i], len - strlen(out) - 1);
    }
}

#define FILTER_REASONS 5

/* Runs the filters for pod on node with free_gpu GPUs left; 0 when the node
 * fits, else how many reasons it gave (at most FILTER_REASONS, in text[]), as
 * the message counts them. used: [CPU m, memory, ephemeral, pods] of the pods
 * bound there (NULL: none, as for a node group's template). */
static int filter(const json_t *pod, const json_t *node, long free_gpu, const json_t *used,
                  const affinity *aff, char text[][300], int *resolvable)
{
    *resolvable = 0;
    if (json_is_true(fk_path((json_t *)node, "spec.unschedulable", 0))) {
        snprintf(text[0], 300, "node(s) were unschedulable");
        return 1;
    }
    size_t j;
    json_t *t;
    json_array_foreach(fk_path((json_t *)node, "spec.taints", 0), j, t)
    {
        const char *eff = fk_str(t, "effect");
        if ((!strcmp(eff, "NoSchedule") || !strcmp(eff, "NoExecute")) && !tolerates(pod, t)) {
            snprintf(text[0], 300, "node(s) had untolerated taint {%s: %s}", fk_str(t, "key"),
                     fk_str(t, "value"));
            return 1;
        }
    }
    if (!node_affinity_ok(pod, node)) {
        snprintf(text[0], 300, "node(s) didn't match Pod's node affinity/selector");
        return 1;
    }
    const json_t *alloc = fk_path((json_t *)node, "status.allocatable", 0);
    int n = 0;
    if (json_integer_value(json_array_get(used, 3)) + 1 > scaled(json_object_get(alloc, "pods"), 0))
        snprintf(text[n++], 300, "Too many pods");
    int64_t req[3];
    fk_pod_requests(pod, req);
    long want = fk_pod_gpus(pod);
    if (req[0] || req[1] || req[2] || want > 0) {
        static const char *const names[3] = {"cpu", "memory", "ephemeral-storage"};
        for (int k = 0; k < 3; k++) {
            int64_t left = scaled(json_object_get(alloc, names[k]), k == 0 ? 3 : 0) -
                           json_integer_value(json_array_get(used, k));
            if (req[k] > left)
                snprintf(text[n++], 300, "Insufficient %s", names[k]);
        }
        if (want > 0 && free_gpu < want)
            snprintf(text[n++], 300, "Insufficient " GPU);
    }
    if (n) {
        *resolvable = 1;
        return n;
    }
    if (!pod_affinity_ok(aff, node)) {
        snprintf(text[0], 300, "node(s) didn't match pod affinity rules");
        return 1;
    }
    return 0;
}

static int schedule_pod(fk_store *st, const json_t *pod, json_t *nodes)
{
    affinity aff;
    affinity_prepare(st, pod, &aff);
    reason_count rc[32];
    int nrc = 0;
    const json_t *best = NULL;
    long best_free = -1;
    /* Like the real scheduler, a large cluster (100 nodes or more) is searched
     * only until enough feasible nodes are found, from where the last search
     * stopped. The real one looks for 5-50% of the nodes; which feasible node
     * a pod gets is not something a client can rely on, so the fake stops at
     * the real minimum, 100. An unschedulable pod still sees every node. */
    size_t n = json_array_size(nodes), enough = n, start = 0, k;
    if (n >= 100) {
        enough = 100;
        start = st->sched_next % n;
    }
    size_t found = 0;
    int n_res = 0, n_unres = 0; /* nodes that preemption could help, or not */
    long best_pods = -1;
    for (k = 0; k < n && found < enough; k++) {
        json_t *node = json_array_get(nodes, (start + k) % n);
        char text[FILTER_REASONS][300];
        int resolvable = 0;
        const char *nname = fk_str(node, "metadata.name");
        const json_t *used = json_object_get(st->res_used, nname);
        long free_gpu = quantity_int(json_object_get(fk_path(node, "status.allocatable", 0), GPU)) -
                        (long)json_integer_value(json_object_get(st->gpu_used, nname));
        int nr = filter(pod, node, free_gpu, used, &aff, text, &resolvable);
        if (nr) {
            for (int i = 0; i < nr; i++)
                count(rc, &nrc, text[i], resolvable);
            if (resolvable)
                n_res++;
            else
                n_unres++;
            continue;
        }
        found++;
        /* Spread, as the default LeastAllocated score does (GPUs, then pod slots); ties by
         * name. */
        long free_pods =
            (long)scaled(json_object_get(fk_path(node, "status.allocatable", 0), "pods"), 0) -
            (long)json_integer_value(json_array_get(used, 3));
        if (free_gpu > best_free || (free_gpu == best_free && free_pods > best_pods)) {
            best = node;
            best_free = free_gpu;
            best_pods = free_pods;
        }
    }
    if (n >= 100)
        st->sched_next = (start + k) % n;
    json_decref(aff.terms);
    const char *ns = fk_str(pod, "metadata.namespace"), *name = fk_str(pod, "metadata.name");
    char now[64];
    fk_now(now, sizeof now, 0);
    json_t *p = json_deep_copy(pod);
    json_t *conds = json_array();
    json_t *old = fk_path(p, "status.conditions", 0);
    size_t i;
    json_t *c;
    json_array_foreach(old, i, c)
    {
        if (strcmp(fk_str(c, "type"), "PodScheduled"))
            json_array_append(conds, c);
    }
    if (best) {
        json_object_set_new(fk_path(p, "spec", 1), "nodeName",
                            json_string(fk_str(best, "metadata.name")));
        json_array_append_new(conds,
                              json_pack("{s:s, s:s, s:n, s:s}", "type", "PodScheduled", "status",
                                        "True", "lastProbeTime", "lastTransitionTime", now));
        json_object_set_new(fk_path(p, "status", 1), "conditions", conds);
        json_t *bound = fk_update(st, FK_PODS, p);
        char msg[1200];
        snprintf(msg, sizeof msg, "Successfully assigned %s/%s to %s", ns, name,
                 fk_str(best, "metadata.name"));
        fk_event_record(st, FK_PODS, bound, "Normal", "Scheduled", msg, "default-scheduler");
        return 1;
    }
    char msg[4096];
    size_t n_nodes = json_array_size(nodes);
    if (n_nodes == 0) {
        snprintf(msg, sizeof msg, "no nodes available to schedule pods");
    } else {
        char parts[32][320], pparts[2][320], a[2048], b[1024];
        for (int r = 0; r < nrc; r++)
            snprintf(parts[r], sizeof parts[0], "%d %.300s", rc[r].n, rc[r].text);
        join_sorted(parts, nrc, a, sizeof a);
        int np = 0;
        if (n_res)
            snprintf(pparts[np++], sizeof pparts[0],
                     "%d No preemption victims found for "
                     "incoming pod",
                     n_res);
        if (n_unres)
            snprintf(pparts[np++], sizeof pparts[0],
                     "%d Preemption is not helpful for "
                     "scheduling",
                     n_unres);
        join_sorted(pparts, np, b, sizeof b);
        snprintf(msg, sizeof msg,
                 "0/%zu nodes are available: %s. preemption: 0/%zu nodes are available: %s..",
                 n_nodes, a, n_nodes, b);
    }
    const json_t *prev = NULL;
    json_array_foreach(old, i, c)
    {
        if (!strcmp(fk_str(c, "type"), "PodScheduled"))
            prev = c;
    }
    if (prev && !strcmp(fk_str(prev, "message"), msg)) {
        json_decref(conds);
        json_decref(p);
        return 0; /* nothing new to say; the scheduler retries on the next change */
    }
    json_array_append_new(conds, json_pack("{s:s, s:s, s:n, s:s, s:s, s:s}", "type", "PodScheduled",
                                           "status", "False", "lastProbeTime", "lastTransitionTime",
                                           prev ? fk_str(prev, "lastTransitionTime") : now,
                                           "reason", "Unschedulable", "message", msg));
    json_object_set_new(fk_path(p, "status", 1), "conditions", conds);
    json_t *stored = fk_update(st, FK_PODS, p);
    fk_event_record(st, FK_PODS, stored, "Warning", "FailedScheduling", msg, "default-scheduler");
    return 1;
}

int fk_pod_pending(const json_t *pod)
{
    return !*fk_str(pod, "spec.nodeName") && fk_pod_active(pod) &&
           !*fk_str(pod, "metadata.deletionTimestamp") &&
           !strcmp(fk_str(pod, "spec.schedulerName"), "default-scheduler");
}

int fk_schedule(fk_store *st)
{
    if (json_object_size(st->pending) == 0)
        return 0;
    int writes = 0;
    /* A reference: the autoscaler may add a node while this list is in use. */
    json_t *nodes = json_incref(fk_nodes(st));
    /* The pods waiting, in creation order; binding changes st->pending. */
    json_t *keys = json_array();
    const char *key;
    json_t *v;
    json_object_foreach(st->pending, key, v)
    {
        json_array_append_new(keys, json_string(key));
    }
    size_t i;
    json_array_foreach(keys, i, v)
    {
        json_t *cur = json_object_get(st->objs[FK_PODS], json_string_value(v));
        if (cur && fk_pod_pending(cur) && schedule_pod(st, cur, nodes))
            writes++;
    }
    json_decref(keys);
    json_decref(nodes);
    return writes;
}

/* ---- the autoscaler stand-in ----------------------------------------- */

/*
 * Node groups (st->groups, name -> {max, count, delaySeconds, node}) grow as
 * cluster-autoscaler and Karpenter do: only for pods that exist and are
 * Unschedulable, by one node from the group's template per pod that the
 * template would fit and the nodes added in this pass cannot hold, up to max,
 * once the pod has waited delaySeconds. Each scale-up is a TriggeredScaleUp
 * event on the pod.
 */
int fk_autoscale(fk_store *st)
{
    if (json_object_size(st->groups) == 0)
        return 0;
    int writes = 0;
    json_t *planned = json_object(); /* group -> GPUs free on the nodes added now */
    time_t now = time(NULL);
    const char *pkey;
    json_t *flag;
    json_object_foreach(st->pending, pkey, flag)
    {
        json_t *pod = json_object_get(st->objs[FK_PODS], pkey);
        if (!pod)
            continue;
        const json_t *cond = NULL;
        size_t k;
        json_t *c;
        json_array_foreach(fk_path(pod, "status.conditions", 0), k, c)
        {
            if (!strcmp(fk_str(c, "type"), "PodScheduled") &&
                !strcmp(fk_str(c, "reason"), "Unschedulable"))
                cond = c;
        }
        if (!cond || *fk_str(pod, "spec.nodeName") || *fk_str(pod, "metadata.deletionTimestamp"))
            continue;
        struct tm tm = {0};
        time_t since = now;
        if (sscanf(fk_str(cond, "lastTransitionTime"), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon,
                   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) == 6) {
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
            since = timegm(&tm);
        }
        affinity aff;
        affinity_prepare(st, pod, &aff);
        long want = fk_pod_gpus(pod);
        const char *gname;
        json_t *g;
        json_object_foreach(st->groups, gname, g)
        {
            const json_t *tmpl = json_object_get(g, "node");
            long alloc = quantity_int(
                json_object_get(fk_path((json_t *)tmpl, "status.allocatable", 0), GPU));
            char text[FILTER_REASONS][300];
            int resolvable;
            if (filter(pod, tmpl, alloc, NULL, &aff, text, &resolvable))
                continue;
            long spare = (long)json_integer_value(json_object_get(planned, gname));
            if (want <= spare) {
                json_object_set_new(planned, gname, json_integer(spare - want));
                break;
            }
            long n = (long)json_integer_value(json_object_get(g, "count"));
            long max = (long)json_integer_value(json_object_get(g, "max"));
            long delay = (long)json_integer_value(json_object_get(g, "delaySeconds"));
            if (n >= max || now - since < delay)
                continue;
            json_t *node = json_deep_copy(tmpl);
            char name[300], msg[600];
            snprintf(name, sizeof name, "%s-%ld", gname, n);
            json_object_set_new(fk_path(node, "metadata", 1), "name", json_string(name));
            json_object_set_new(fk_path(node, "metadata.labels", 1), "kubernetes.io/hostname",
                                json_string(name));
            json_object_set_new(node, "kind", json_string("Node"));
            json_object_set_new(node, "apiVersion", json_string("v1"));
            fk_create(st, FK_NODES, node);
            json_object_set_new(g, "count", json_integer(n + 1));
            json_object_set_new(planned, gname, json_integer(alloc - want));
            snprintf(msg, sizeof msg, "pod triggered scale-up: [{%s %ld->%ld (max: %ld)}]", gname,
                     n, n + 1, max);
            fk_event_record(st, FK_PODS, pod, "Normal", "TriggeredScaleUp", msg,
                            "cluster-autoscaler");
            writes++;
            break;
        }
        json_decref(aff.terms);
    }
    json_decref(planned);
    return writes;
}
