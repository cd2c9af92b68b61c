/*
 * fk_ctrl.c - server-side defaults, the Job controller, the garbage collector
 * and the kubelet stand-in of the fake apiserver.
 *
 * The Job controller follows v1.26 with finalizer-based tracking (11c-11p):
 * pods carry batch.kubernetes.io/job-tracking; a finished pod is first listed
 * in status.uncountedTerminatedPods, its finalizer removed, then counted. A pod
 * being deleted counts as failed. There is no kubelet: a pod being deleted
 * goes away as soon as no finalizer holds it, and its phase changes only when
 * a test says so (fk_pod_set_phase, fk_pod_evict).
 */
#include "tests/support/fake_kube/fk.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRACKING "batch.kubernetes.io/job-tracking"
#define INDEX_ANN "batch.kubernetes.io/job-completion-index"

static void set_default(json_t *obj, const char *key, json_t *value)
{
    if (!json_object_get(obj, key))
        json_object_set_new(obj, key, value);
    else
        json_decref(value);
}

static void pod_spec_defaults(json_t *spec, int is_pod)
{
    const char *lists[] = {"initContainers", "containers"};
    for (int l = 0; l < 2; l++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, lists[l]), i, c)
        {
            set_default(c, "resources", json_object());
            set_default(c, "terminationMessagePath", json_string("/dev/termination-log"));
            set_default(c, "terminationMessagePolicy", json_string("File"));
            const char *img = fk_str(c, "image");
            size_t n = strlen(img);
            int latest = !strchr(img, ':') || (n > 7 && strcmp(img + n - 7, ":latest") == 0);
            set_default(c, "imagePullPolicy", json_string(latest ? "Always" : "IfNotPresent"));
            /* Extended resources: a limit alone is also the request. */
            json_t *res = json_object_get(c, "resources");
            json_t *lim = json_object_get(res, "limits");
            const char *k;
            json_t *v;
            json_object_foreach(lim, k, v)
            {
                if (strchr(k, '/') || is_pod) {
                    json_t *req = fk_path(res, "requests", 1);
                    set_default(req, k, json_deep_copy(v));
                }
            }
        }
    }
    set_default(spec, "restartPolicy", json_string("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json_integer(30));
    set_default(spec, "dnsPolicy", json_string("ClusterFirst"));
    set_default(spec, "securityContext", json_object());
    set_default(spec, "schedulerName", json_string("default-scheduler"));
}

static const char *qos_class(const json_t *spec)
{
    int any = 0, guaranteed = 1;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        const char *names[] = {"cpu", "memory"};
        for (int r = 0; r < 2; r++) {
            const json_t *req = json_object_get(fk_path(c, "resources.requests", 0), names[r]);
            const json_t *lim = json_object_get(fk_path(c, "resources.limits", 0), names[r]);
            any |= req || lim;
            if (!lim || (req && !json_equal(req, lim)))
                guaranteed = 0;
        }
    }
    return !any ? "BestEffort" : guaranteed ? "Guaranteed" : "Burstable";
}

/* Members in the order the apiserver writes them: kind, apiVersion,
 * metadata first, status last. */
static void order_members(json_t *obj)
{
    const char *first[] = {"kind", "apiVersion", "metadata"};
    json_t *rest = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (strcmp(k, "kind") && strcmp(k, "apiVersion") && strcmp(k, "metadata") &&
            strcmp(k, "status"))
            json_object_set(rest, k, v);
    }
    json_t *status = json_incref(json_object_get(obj, "status"));
    json_t *keep[3];
    for (int i = 0; i < 3; i++)
        keep[i] = json_incref(json_object_get(obj, first[i]));
    json_object_clear(obj);
    for (int i = 0; i < 3; i++)
        if (keep[i])
            json_object_set_new(obj, first[i], keep[i]);
    json_object_update(obj, rest);
    if (status)
        json_object_set_new(obj, "status", status);
    json_decref(rest);
}

void fk_defaults(fk_store *st, int res, json_t *obj)
{
    json_t *md = fk_path(obj, "metadata", 1);
    char buf[600];
    if (!*fk_str(obj, "metadata.name") && *fk_str(obj, "metadata.generateName")) {
        char r5[6];
        fk_rand5(st, r5);
        snprintf(buf, sizeof buf, "%s%s", fk_str(obj, "metadata.generateName"), r5);
        json_object_set_new(md, "name", json_string(buf));
    }
    if (!json_object_get(md, "uid")) {
        fk_uid(st, buf, sizeof buf);
        json_object_set_new(md, "uid", json_string(buf));
    }
    json_object_set_new(obj, "kind", json_string(fk_resources[res].kind));
    json_object_set_new(obj, "apiVersion", json_string(fk_resources[res].api_version));
    const char *uid = fk_str(obj, "metadata.uid");
    if (res == FK_JOBS) {
        json_t *spec = fk_path(obj, "spec", 1);
        if (!json_object_get(spec, "completions") && !json_object_get(spec, "parallelism")) {
            json_object_set_new(spec, "completions", json_integer(1));
            json_object_set_new(spec, "parallelism", json_integer(1));
        }
        set_default(spec, "parallelism", json_integer(1));
        set_default(spec, "backoffLimit", json_integer(6));
        set_default(spec, "completionMode", json_string("NonIndexed"));
        set_default(spec, "suspend", json_false());
        if (!json_object_get(spec, "selector"))
            json_object_set_new(spec, "selector",
                                json_pack("{s:{s:s}}", "matchLabels", "controller-uid", uid));
        json_t *tmd = fk_path(obj, "spec.template.metadata", 1);
        set_default(tmd, "creationTimestamp", json_null());
        json_t *tl = fk_path(tmd, "labels", 1);
        json_object_set_new(tl, "controller-uid", json_string(uid));
        json_object_set_new(tl, "job-name", json_string(fk_str(obj, "metadata.name")));
        json_object_set_new(fk_path(md, "annotations", 1), TRACKING, json_string(""));
        pod_spec_defaults(fk_path(obj, "spec.template.spec", 1), 0);
        json_object_set_new(obj, "status", json_object());
    } else if (res == FK_PODS) {
        json_t *spec = fk_path(obj, "spec", 1);
        pod_spec_defaults(spec, 1);
        set_default(spec, "serviceAccountName", json_string("default"));
        set_default(spec, "serviceAccount", json_string("default"));
        set_default(spec, "priority", json_integer(0));
        set_default(spec, "enableServiceLinks", json_true());
        set_default(spec, "preemptionPolicy", json_string("PreemptLowerPriority"));
        json_t *tol = json_object_get(spec, "tolerations");
        if (!tol) {
            tol = json_array();
            json_object_set_new(spec, "tolerations", tol);
        }
        const char *keys[] = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"};
        for (int i = 0; i < 2; i++)
            json_array_append_new(tol, json_pack("{s:s, s:s, s:s, s:i}", "key", keys[i], "operator",
                                                 "Exists", "effect", "NoExecute",
                                                 "tolerationSeconds", 300));
        if (!json_object_get(obj, "status") || !*fk_str(obj, "status.phase"))
            json_object_set_new(
                obj, "status",
                json_pack("{s:s, s:s}", "phase", "Pending", "qosClass", qos_class(spec)));
    } else if (res == FK_SERVICES) {
        json_t *spec = fk_path(obj, "spec", 1);
        set_default(spec, "type", json_string("ClusterIP"));
        set_default(spec, "sessionAffinity", json_string("None"));
        if (!json_object_get(spec, "clusterIP")) {
            snprintf(buf, sizeof buf, "10.96.%lu.%lu", (st->rv / 250) % 250, st->rv % 250 + 2);
            json_object_set_new(spec, "clusterIP", json_string(buf));
        }
        set_default(spec, "clusterIPs", json_pack("[O]", json_object_get(spec, "clusterIP")));
        set_default(spec, "ipFamilies", json_pack("[s]", "IPv4"));
        set_default(spec, "ipFamilyPolicy", json_string("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json_string("Cluster"));
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(spec, "ports"), i, p)
        {
            set_default(p, "protocol", json_string("TCP"));
            set_default(p, "targetPort", json_deep_copy(json_object_get(p, "port")));
        }
        json_object_set_new(obj, "status", json_pack("{s:{}}", "loadBalancer"));
    } else if (res == FK_SECRETS) {
        /* stringData is write-only: merged into data (base64) over the same keys, then
         * dropped, as the apiserver's conversion does; type defaults to Opaque. */
        json_t *sd = json_object_get(obj, "stringData");
        if (json_is_object(sd)) {
            json_t *data = json_object_get(obj, "data");
            if (!json_is_object(data)) {
                data = json_object();
                json_object_set_new(obj, "data", data);
            }
            const char *k;
            json_t *v;
            json_object_foreach(sd, k, v)
            {
                const char *s = json_string_value(v) ? json_string_value(v) : "";
                size_t n = strlen(s);
                char *enc = malloc(4 * ((n + 2) / 3) + 1);
                if (enc) {
                    EVP_EncodeBlock((unsigned char *)enc, (const unsigned char *)s, (int)n);
                    json_object_set_new(data, k, json_string(enc));
                    free(enc);
                }
            }
        }
        json_object_del(obj, "stringData");
        set_default(obj, "type", json_string("Opaque"));
    } else if (res == FK_NAMESPACES) {
        json_object_set_new(fk_path(md, "labels", 1), "kubernetes.io/metadata.name",
                            json_string(fk_str(obj, "metadata.name")));
        json_object_set_new(obj, "spec", json_pack("{s:[s]}", "finalizers", "kubernetes"));
        json_object_set_new(obj, "status", json_pack("{s:s}", "phase", "Active"));
    }
    order_members(obj);
}

/* ---- helpers ---------------------------------------------------------- */

static int has_str(const json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return 1;
    }
    return 0;
}

static void drop_str(json_t *arr, const char *s)
{
    for (size_t i = json_array_size(arr); i-- > 0;) {
        const char *v = json_string_value(json_array_get(arr, i));
        if (v && strcmp(v, s) == 0)
            json_array_remove(arr, i);
    }
}

static int is_deleting(const json_t *obj)
{
    return *fk_str(obj, "metadata.deletionTimestamp") != '\0';
}

/*
 * With the kubelet's terminating period on (/fake/kubelet): a bound pod still running that is
 * being deleted with a grace period stays, its GPUs held, until its containers end (a test
 * moves it to Succeeded or Failed) or the period runs out (the kubelet kills it).
 */
static int held_terminating(const fk_store *st, const json_t *pod)
{
    char now[64];
    const char *ph = fk_str(pod, "status.phase");
    if (!st->terminating || !*fk_str(pod, "spec.nodeName") || !strcmp(ph, "Succeeded") ||
        !strcmp(ph, "Failed") || !json_integer_value(json_object_get(
                                     json_object_get(pod, "metadata"), "deletionGracePeriodSeconds")))
        return 0;
    fk_now(now, sizeof now, 0);
    return strcmp(fk_str(pod, "metadata.deletionTimestamp"), now) > 0;
}

static int pod_terminal(const json_t *pod)
{
    const char *ph = fk_str(pod, "status.phase");
    return strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0;
}

static int cond_true(const json_t *obj, const char *type)
{
    size_t i;
    json_t *c;
    json_array_foreach(fk_path((json_t *)obj, "status.conditions", 0), i, c)
    {
        if (strcmp(fk_str(c, "type"), type) == 0 && strcmp(fk_str(c, "status"), "True") == 0)
            return 1;
    }
    return 0;
}

static long long int_at(const json_t *obj, const char *path, long long dflt)
{
    const json_t *v = fk_path((json_t *)obj, path, 0);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static long pod_index(const json_t *pod)
{
    const char *s = json_string_value(
        fk_path((json_t *)pod, "metadata.annotations", 0)
            ? json_object_get(fk_path((json_t *)pod, "metadata.annotations", 0), INDEX_ANN)
            : NULL);
    char *end;
    long v = s ? strtol(s, &end, 10) : -1;
    return s && *s && !*end ? v : -1;
}

/* "0-2,4,6,7": runs of three or more as ranges, as the Job controller writes. */
static void format_indexes(const unsigned char *done, long n, char *out, size_t len)
{
    size_t w = 0;
    out[0] = '\0';
    for (long i = 0; i < n && w < len; i++) {
        if (!done[i])
            continue;
        long j = i;
        while (j + 1 < n && done[j + 1])
            j++;
        int k;
        if (j - i >= 2)
            k = snprintf(out + w, len - w, "%s%ld-%ld", w ? "," : "", i, j);
        else if (j > i)
            k = snprintf(out + w, len - w, "%s%ld,%ld", w ? "," : "", i, j);
        else
            k = snprintf(out + w, len - w, "%s%ld", w ? "," : "", i);
        w += k > 0 ? (size_t)k : 0;
        i = j;
    }
}

static void parse_indexes(const char *s, unsigned char *done, long n)
{
    while (s && *s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long i = a; i <= b && i < n; i++)
            if (i >= 0)
                done[i] = 1;
        s = *end == ',' ? end + 1 : NULL;
    }
}

/* Marks a pod as being deleted (MODIFIED); the GC pass removes it once no
 * finalizer holds it. */
static void mark_deleting(fk_store *st, const json_t *pod, long grace)
{
    char ts[64];
    json_t *p = json_deep_copy(pod);
    fk_now(ts, sizeof ts, grace);
    json_object_set_new(fk_path(p, "metadata", 1), "deletionTimestamp", json_string(ts));
    json_object_set_new(fk_path(p, "metadata", 1), "deletionGracePeriodSeconds",
                        json_integer(grace));
    fk_update(st, FK_PODS, p);
}

static json_t *new_pod(fk_store *st, const json_t *job, long index)
{
    const char *jname = fk_str(job, "metadata.name");
    char gen[600], r5[6], name[640];
    if (index >= 0)
        snprintf(gen, sizeof gen, "%s-%ld-", jname, index);
    else
        snprintf(gen, sizeof gen, "%s-", jname);
    fk_rand5(st, r5);
    snprintf(name, sizeof name, "%s%s", gen, r5);
    json_t *tmpl = fk_path((json_t *)job, "spec.template", 0);
    json_t *tmd = json_object_get(tmpl, "metadata");
    json_t *md = json_pack("{s:s, s:s, s:s}", "name", name, "generateName", gen, "namespace",
                           fk_str(job, "metadata.namespace"));
    const char *k;
    json_t *v;
    json_object_foreach(tmd, k, v)
    {
        if (strcmp(k, "creationTimestamp") && strcmp(k, "name") && strcmp(k, "namespace"))
            json_object_set_new(md, k, json_deep_copy(v));
    }
    json_object_set_new(md, "ownerReferences",
                        json_pack("[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", "batch/v1",
                                  "kind", "Job", "name", jname, "uid", fk_str(job, "metadata.uid"),
                                  "controller", 1, "blockOwnerDeletion", 1));
    json_object_set_new(md, "finalizers", json_pack("[s]", TRACKING));
    json_t *spec = json_deep_copy(json_object_get(tmpl, "spec"));
    if (index >= 0) {
        char idx[32], host[640];
        snprintf(idx, sizeof idx, "%ld", index);
        json_object_set_new(fk_path(md, "annotations", 1), INDEX_ANN, json_string(idx));
        snprintf(host, sizeof host, "%s-%ld", jname, index);
        json_object_set_new(spec, "hostname", json_string(host));
        const char *lists[] = {"initContainers", "containers"};
        for (int l = 0; l < 2; l++) {
            size_t i;
            json_t *c;
            json_array_foreach(json_object_get(spec, lists[l]), i, c)
            {
                json_t *env = json_object_get(c, "env");
                if (!env) {
                    env = json_array();
                    json_object_set_new(c, "env", env);
                }
                json_array_append_new(env, json_pack("{s:s, s:{s:{s:s, s:s}}}", "name",
                                                     "JOB_COMPLETION_INDEX", "valueFrom",
                                                     "fieldRef", "apiVersion", "v1", "fieldPath",
                                                     "metadata.annotations['" INDEX_ANN "']"));
            }
        }
    }
    json_t *pod = json_pack("{s:s, s:s, s:o, s:o}", "kind", "Pod", "apiVersion", "v1", "metadata",
                            md, "spec", spec);
    fk_defaults(st, FK_PODS, pod);
    return pod;
}

static json_t *condition(const char *type, const char *reason, const char *message)
{
    char now[64];
    fk_now(now, sizeof now, 0);
    json_t *c = json_pack("{s:s, s:s, s:s, s:s}", "type", type, "status", "True", "lastProbeTime",
                          now, "lastTransitionTime", now);
    if (reason)
        json_object_set_new(c, "reason", json_string(reason));
    if (message)
        json_object_set_new(c, "message", json_string(message));
    return c;
}

/* Builds a status in the order the apiserver writes its members. */
static json_t *job_status(const json_t *conds, const char *start, const char *completion,
                          long active, long succeeded, long failed, const char *indexes,
                          json_t *uncounted, long ready)
{
    json_t *s = json_object();
    if (json_array_size(conds))
        json_object_set_new(s, "conditions", json_deep_copy(conds));
    if (start && *start)
        json_object_set_new(s, "startTime", json_string(start));
    if (completion && *completion)
        json_object_set_new(s, "completionTime", json_string(completion));
    if (active)
        json_object_set_new(s, "active", json_integer(active));
    if (succeeded)
        json_object_set_new(s, "succeeded", json_integer(succeeded));
    if (failed)
        json_object_set_new(s, "failed", json_integer(failed));
    if (indexes && *indexes)
        json_object_set_new(s, "completedIndexes", json_string(indexes));
    json_object_set_new(s, "uncountedTerminatedPods", uncounted ? uncounted : json_object());
    json_object_set_new(s, "ready", json_integer(ready));
    return s;
}

static int write_status(fk_store *st, const json_t *job, json_t *status)
{
    if (json_equal(json_object_get(job, "status"), status)) {
        json_decref(status);
        return 0;
    }
    json_t *j = json_deep_copy(job);
    json_object_set_new(j, "status", status);
    fk_update(st, FK_JOBS, j);
    return 1;
}

/* A finished Job's status no longer changes (11j); its pods only lose the
 * tracking finalizer. */
static int release_pods(fk_store *st, const json_t *job)
{
    int writes = 0;
    json_t *pods = fk_pods_of(st, fk_str(job, "metadata.uid"));
    size_t i;
    json_t *p;
    json_array_foreach(pods, i, p)
    {
        if (!has_str(fk_path(p, "metadata.finalizers", 0), TRACKING))
            continue;
        json_t *c = json_deep_copy(p);
        drop_str(fk_path(c, "metadata.finalizers", 0), TRACKING);
        if (json_array_size(fk_path(c, "metadata.finalizers", 0)) == 0)
            json_object_del(fk_path(c, "metadata", 0), "finalizers");
        fk_update(st, FK_PODS, c);
        writes++;
    }
    json_decref(pods);
    return writes;
}

/* One pass of the Job controller over one Job; returns the writes made. */
static int sync_job(fk_store *st, const json_t *job0)
{
    const char *ns = fk_str(job0, "metadata.namespace"), *jname = fk_str(job0, "metadata.name");
    const char *uid = fk_str(job0, "metadata.uid");
    int writes = 0;
    if (is_deleting(job0))
        return release_pods(st, job0);
    if (json_is_true(fk_path((json_t *)job0, "spec.suspend", 0)))
        return 0;
    int finished = cond_true(job0, "Complete") || cond_true(job0, "Failed");
    if (finished)
        return release_pods(st, job0);
    long completions = (long)int_at(job0, "spec.completions", -1);
    long parallelism = (long)int_at(job0, "spec.parallelism", 1);
    long backoff = (long)int_at(job0, "spec.backoffLimit", 6);
    int indexed = strcmp(fk_str(job0, "spec.completionMode"), "Indexed") == 0;
    long n_idx = indexed && completions > 0 ? completions : 1;
    unsigned char *done = calloc((size_t)n_idx, 1), *running = calloc((size_t)n_idx, 1);
    char start[64], now[64];
    fk_now(now, sizeof now, 0);
    snprintf(start, sizeof start, "%s", fk_str(job0, "status.startTime"));
    if (!*start)
        snprintf(start, sizeof start, "%s", now);
    if (indexed)
        parse_indexes(fk_str(job0, "status.completedIndexes"), done, n_idx);
    long succeeded = (long)int_at(job0, "status.succeeded", 0);
    long failed = (long)int_at(job0, "status.failed", 0);
    json_t *conds = json_deep_copy(fk_path((json_t *)job0, "status.conditions", 0));
    if (!conds)
        conds = json_array();

    json_t *mine = fk_pods_of(st, uid);
    size_t i;
    json_t *p;

    /* Failure: the backoff limit, or the deadline. */
    long new_failed = 0;
    json_array_foreach(mine, i, p)
    {
        json_t *fin = fk_path(p, "metadata.finalizers", 0);
        if (has_str(fin, TRACKING) && !strcmp(fk_str(p, "status.phase"), "Failed"))
            new_failed++;
    }
    const char *fail_reason = NULL, *fail_msg = NULL;
    long ads = (long)int_at(job0, "spec.activeDeadlineSeconds", 0);
    if (!finished && failed + new_failed > backoff) {
        fail_reason = "BackoffLimitExceeded";
        fail_msg = "Job has reached the specified backoff limit";
    } else if (!finished && ads > 0 && *fk_str(job0, "status.startTime")) {
        struct tm tm = {0};
        if (sscanf(fk_str(job0, "status.startTime"), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon,
                   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) == 6) {
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
        }
        if (tm.tm_mday && timegm(&tm) + ads <= time(NULL)) {
            fail_reason = "DeadlineExceeded";
            fail_msg = "Job was active longer than specified deadline";
        }
    }
    if (fail_reason) {
        json_array_foreach(mine, i, p)
        {
            if (pod_terminal(p) || is_deleting(p))
                continue;
            mark_deleting(st, p, int_at(p, "spec.terminationGracePeriodSeconds", 30));
            char msg[700];
            snprintf(msg, sizeof msg, "Deleted pod: %s", fk_str(p, "metadata.name"));
            fk_event_record(st, FK_JOBS, job0, "Normal", "SuccessfulDelete", msg, "job-controller");
            writes++;
        }
        /* Re-read: the deleted pods are now being deleted. */
        json_t *again = json_array();
        json_array_foreach(mine, i, p)
        {
            json_t *cur = fk_get(st, FK_PODS, ns, fk_str(p, "metadata.name"));
            if (cur)
                json_array_append(again, cur);
        }
        json_decref(mine);
        mine = again;
    }

    /* Active and ready pods, and the finished ones not counted yet. */
    long active = 0, ready = 0;
    json_t *unc_s = json_array(), *unc_f = json_array(), *to_count = json_array();
    json_array_foreach(mine, i, p)
    {
        long idx = pod_index(p);
        int tracked = has_str(fk_path(p, "metadata.finalizers", 0), TRACKING);
        int succ = !strcmp(fk_str(p, "status.phase"), "Succeeded");
        /* A pod being deleted still counts as ready until it stops (11f). */
        if (!pod_terminal(p))
            ready += cond_true(p, "Ready");
        if (pod_terminal(p) || is_deleting(p)) {
            if (tracked) {
                json_array_append_new(succ ? unc_s : unc_f, json_string(fk_str(p, "metadata.uid")));
                json_array_append(to_count, p);
            }
            continue;
        }
        active++;
        if (indexed && idx >= 0 && idx < n_idx)
            running[idx] = 1;
    }
    char idx_text[4096];
    if (json_array_size(to_count)) {
        json_t *unc = json_object();
        if (json_array_size(unc_s))
            json_object_set(unc, "succeeded", unc_s);
        if (json_array_size(unc_f))
            json_object_set(unc, "failed", unc_f);
        format_indexes(done, indexed ? n_idx : 0, idx_text, sizeof idx_text);
        writes += write_status(
            st, job0,
            job_status(conds, start, NULL, active, succeeded, failed, idx_text, unc, ready));
        json_array_foreach(to_count, i, p)
        {
            json_t *cur = fk_get(st, FK_PODS, ns, fk_str(p, "metadata.name"));
            if (!cur)
                continue;
            json_t *c = json_deep_copy(cur);
            drop_str(fk_path(c, "metadata.finalizers", 0), TRACKING);
            if (json_array_size(fk_path(c, "metadata.finalizers", 0)) == 0)
                json_object_del(fk_path(c, "metadata", 0), "finalizers");
            fk_update(st, FK_PODS, c);
            writes++;
            if (!strcmp(fk_str(p, "status.phase"), "Succeeded")) {
                succeeded++;
                long idx = pod_index(p);
                if (indexed && idx >= 0 && idx < n_idx)
                    done[idx] = 1;
            } else {
                failed++;
            }
        }
    }
    json_decref(unc_s);
    json_decref(unc_f);
    json_decref(to_count);

    /* Completion. */
    const char *completion = fk_str(job0, "status.completionTime");
    char ctime[64] = "";
    long n_done = 0;
    for (long k = 0; k < n_idx; k++)
        n_done += done[k];
    int complete = !finished && !fail_reason &&
                   (indexed ? n_done == n_idx && completions > 0
                            : completions >= 0 && succeeded >= completions);
    if (!indexed && completions < 0 && succeeded > 0 && active == 0 && !finished && !fail_reason)
        complete = 1;
    job0 = fk_get(st, FK_JOBS, ns, jname);
    if (!job0)
        goto out;
    if (fail_reason) {
        json_array_append_new(conds, condition("Failed", fail_reason, fail_msg));
        fk_event_record(st, FK_JOBS, job0, "Warning", fail_reason, fail_msg, "job-controller");
        finished = 1;
    } else if (complete) {
        json_array_append_new(conds, condition("Complete", NULL, NULL));
        snprintf(ctime, sizeof ctime, "%s", now);
        completion = ctime;
        fk_event_record(st, FK_JOBS, job0, "Normal", "Completed", "Job completed",
                        "job-controller");
        finished = 1;
    }

    /* New pods for what is missing. */
    if (!finished) {
        if (indexed) {
            for (long k = 0; k < n_idx && active < parallelism; k++) {
                if (done[k] || running[k])
                    continue;
                json_t *pod = fk_create(st, FK_PODS, new_pod(st, job0, k));
                char msg[700];
                snprintf(msg, sizeof msg, "Created pod: %s", fk_str(pod, "metadata.name"));
                fk_event_record(st, FK_JOBS, job0, "Normal", "SuccessfulCreate", msg,
                                "job-controller");
                active++;
                writes++;
            }
        } else {
            long want = parallelism;
            if (completions >= 0 && completions - succeeded < want)
                want = completions - succeeded;
            while (active < want) {
                json_t *pod = fk_create(st, FK_PODS, new_pod(st, job0, -1));
                char msg[700];
                snprintf(msg, sizeof msg, "Created pod: %s", fk_str(pod, "metadata.name"));
                fk_event_record(st, FK_JOBS, job0, "Normal", "SuccessfulCreate", msg,
                                "job-controller");
                active++;
                writes++;
            }
        }
    }
    format_indexes(done, indexed ? n_idx : 0, idx_text, sizeof idx_text);
    job0 = fk_get(st, FK_JOBS, ns, jname);
    if (job0)
        writes += write_status(st, job0,
                               job_status(conds, start, completion, complete ? 0 : active,
                                          succeeded, failed, idx_text, NULL, ready));
out:
    json_decref(conds);
    json_decref(mine);
    free(done);
    free(running);
    return writes;
}

/* ---- garbage collector and the kubelet stand-in ----------------------- */

/* The collector and the kubelet stand-in for one object (a pod, a Service or
 * a Job, as a dependent). */
static int gc_object(fk_store *st, int res, const json_t *o)
{
    const char *ns = fk_str(o, "metadata.namespace"), *name = fk_str(o, "metadata.name");
    json_t *refs = fk_path((json_t *)o, "metadata.ownerReferences", 0);
    if (json_array_size(refs) > 0) {
        int ores;
        const json_t *owner = fk_owner(st, fk_owner_uid(o), &ores);
        int alive = owner != NULL;
        json_t *ofin = fk_path((json_t *)owner, "metadata.finalizers", 0);
        int fg = alive && has_str(ofin, "foregroundDeletion");
        int orphan = alive && has_str(ofin, "orphan");
        if (res == FK_PODS && !alive &&
            has_str(fk_path((json_t *)o, "metadata.finalizers", 0), TRACKING)) {
            /* The Job controller lets go of the pods of a Job that is gone
             * before the collector deletes them (09). */
            json_t *c = json_deep_copy(o);
            drop_str(fk_path(c, "metadata.finalizers", 0), TRACKING);
            if (json_array_size(fk_path(c, "metadata.finalizers", 0)) == 0)
                json_object_del(fk_path(c, "metadata", 0), "finalizers");
            fk_update(st, res, c);
            return 1;
        }
        if (orphan) {
            json_t *c = json_deep_copy(o);
            json_object_del(fk_path(c, "metadata", 0), "ownerReferences");
            fk_update(st, res, c);
            return 1;
        }
        if ((!alive || fg) && !is_deleting(o)) {
            if (res == FK_PODS && *fk_str(o, "spec.nodeName"))
                mark_deleting(st, o, int_at(o, "spec.terminationGracePeriodSeconds", 30));
            else if (res == FK_PODS &&
                     json_array_size(fk_path((json_t *)o, "metadata.finalizers", 0)))
                mark_deleting(st, o, 0);
            else
                fk_remove(st, res, ns, name);
            return 1;
        }
    }
    /* Nothing holds a deleted object any more: it goes. */
    if (is_deleting(o) && json_array_size(fk_path((json_t *)o, "metadata.finalizers", 0)) == 0 &&
        !(res == FK_PODS && held_terminating(st, o))) {
        fk_remove(st, res, ns, name);
        return 1;
    }
    return 0;
}

/* What the collector looks at in one round (see reconcile()). */
typedef struct gc_todo {
    json_t *objs;   /* "res/ns/name" -> [res, ns, name]: changed dependents */
    json_t *owners; /* uids of owners deleted, being deleted, or losing a dependent */
    json_t *nodes;  /* names of the nodes deleted */
    int namespaces; /* a namespace changed */
} gc_todo;

static void todo_object(gc_todo *t, int res, const json_t *obj)
{
    char key[700];
    const char *ns = fk_str(obj, "metadata.namespace"), *name = fk_str(obj, "metadata.name");
    snprintf(key, sizeof key, "%d/%s/%s", res, ns, name);
    json_object_set_new(t->objs, key, json_pack("[i, s, s]", res, ns, name));
}

/* The pod garbage collector: the pods bound to a node that is gone fail
 * with DisruptionTarget DeletionByPodGC and are deleted (v1.26 with
 * PodDisruptionConditions). */
static int podgc(fk_store *st, const json_t *nodes)
{
    int writes = 0;
    json_t *pods = fk_list(st, FK_PODS, NULL);
    size_t i;
    json_t *p;
    json_array_foreach(pods, i, p)
    {
        if (!json_object_get(nodes, fk_str(p, "spec.nodeName")) || is_deleting(p))
            continue;
        if (!pod_terminal(p)) {
            char now[64];
            fk_now(now, sizeof now, 0);
            json_t *c = json_deep_copy(p);
            json_t *status = fk_path(c, "status", 1);
            json_t *conds = json_object_get(status, "conditions");
            if (!json_is_array(conds)) {
                conds = json_array();
                json_object_set_new(status, "conditions", conds);
            }
            json_array_append_new(conds,
                                  json_pack("{s:s, s:s, s:n, s:s, s:s, s:s}", "type",
                                            "DisruptionTarget", "status", "True", "lastProbeTime",
                                            "lastTransitionTime", now, "reason", "DeletionByPodGC",
                                            "message", "PodGC: node no longer exists"));
            json_object_set_new(status, "phase", json_string("Failed"));
            p = fk_update(st, FK_PODS, c);
        }
        if (json_array_size(fk_path(p, "metadata.finalizers", 0)))
            mark_deleting(st, p, 0);
        else
            fk_remove(st, FK_PODS, fk_str(p, "metadata.namespace"), fk_str(p, "metadata.name"));
        writes++;
    }
    json_decref(pods);
    return writes;
}

static int gc(fk_store *st, gc_todo *todo, int full)
{
    int writes = 0;
    if (json_object_size(todo->nodes))
        writes += podgc(st, todo->nodes);
    const int deps[] = {FK_PODS, FK_SERVICES, FK_JOBS, FK_SECRETS};
    if (full || json_object_size(todo->owners)) {
        /* The dependents of the owners that went or are going. */
        for (int d = 0; d < 4; d++) {
            const char *key;
            json_t *o;
            if (deps[d] == FK_PODS && !full) {
                /* Their pods through the index by owner, not a walk over every pod. */
                const char *uid;
                json_t *u, *v;
                json_object_foreach(todo->owners, uid, u)
                {
                    json_object_foreach(json_object_get(st->pods_by_owner, uid), key, v)
                    {
                        if ((o = json_object_get(st->objs[FK_PODS], key)))
                            todo_object(todo, FK_PODS, o);
                    }
                }
                continue;
            }
            json_object_foreach(st->objs[deps[d]], key, o)
            {
                if (full || json_object_get(todo->owners, fk_owner_uid(o)))
                    todo_object(todo, deps[d], o);
            }
        }
    }
    const char *key;
    json_t *item;
    json_object_foreach(todo->objs, key, item)
    {
        int res = (int)json_integer_value(json_array_get(item, 0));
        const json_t *o = fk_get(st, res, json_string_value(json_array_get(item, 1)),
                                 json_string_value(json_array_get(item, 2)));
        if (o)
            writes += gc_object(st, res, o);
    }
    /* Owners held by orphan or foregroundDeletion go once their dependents have. */
    json_t *check = json_object();
    if (full) {
        json_object_foreach(st->owners, key, item)
        {
            json_object_set_new(check, key, json_true());
        }
    } else {
        json_object_update(check, todo->owners);
    }
    json_object_foreach(check, key, item)
    {
        int ores;
        const json_t *o = fk_owner(st, key, &ores);
        json_t *fin = fk_path((json_t *)o, "metadata.finalizers", 0);
        if (!o || !is_deleting(o) ||
            (!has_str(fin, "orphan") && !has_str(fin, "foregroundDeletion")))
            continue;
        json_t *pods = fk_pods_of(st, key);
        size_t left = json_array_size(pods);
        json_decref(pods);
        const char *skey;
        json_t *x;
        json_object_foreach(st->objs[FK_SERVICES], skey, x)
        {
            left += strcmp(fk_owner_uid(x), key) == 0;
        }
        json_object_foreach(st->objs[FK_SECRETS], skey, x)
        {
            left += strcmp(fk_owner_uid(x), key) == 0;
        }
        if (!left) {
            fk_remove(st, ores, fk_str(o, "metadata.namespace"), fk_str(o, "metadata.name"));
            writes++;
        }
    }
    json_decref(check);
    if (!full && !todo->namespaces)
        return writes;
    /* Namespaces being deleted: their contents go, then the namespace. */
    json_t *nss = fk_list(st, FK_NAMESPACES, NULL);
    size_t i;
    json_t *nso;
    json_array_foreach(nss, i, nso)
    {
        if (!is_deleting(nso))
            continue;
        const char *ns = fk_str(nso, "metadata.name");
        for (int r = 0; r < FK_NRES; r++) {
            if (!fk_resources[r].namespaced)
                continue;
            json_t *objs = fk_list(st, r, ns);
            size_t j;
            json_t *o;
            json_array_foreach(objs, j, o)
            {
                fk_remove(st, r, ns, fk_str(o, "metadata.name"));
                writes++;
            }
            json_decref(objs);
        }
        fk_remove(st, FK_NAMESPACES, "", ns);
        writes++;
    }
    json_decref(nss);
    return writes;
}

/*
 * Each round looks at the events written since the last one: a Job or its
 * pods changed -> that Job is synced; pods or nodes changed -> the scheduler
 * and the autoscaler run; anything but an Event or a Node changed -> the
 * collector looks at what changed and at the dependents of owners that went.
 * Their own writes are the next round's events; it ends when a round finds
 * none. deadlines: Jobs with activeDeadlineSeconds are synced as well.
 */
static void reconcile(fk_store *st, int deadlines)
{
    for (int round = 0; round < 50; round++) {
        json_t *dirty = json_object(); /* uids of the Jobs to sync */
        gc_todo todo = {json_object(), json_object(), json_object(), 0};
        int everything = st->reconciled_rv < st->window_rv; /* events were lost */
        int sched = everything, collect = everything;
        for (size_t i = 0; i < st->ring_len; i++) {
            const fk_event *e = &st->ring[(st->ring_head + i) % st->ring_cap];
            if (e->rv <= st->reconciled_rv)
                continue;
            const char *uid = fk_str(e->obj, "metadata.uid"), *owner = fk_owner_uid(e->obj);
            int gone = !strcmp(e->type, "DELETED");
            if (e->res == FK_JOBS || e->res == FK_VCJOBS)
                json_object_set_new(dirty, uid, json_true());
            if (e->res == FK_PODS && *owner)
                json_object_set_new(dirty, owner, json_true());
            if ((e->res == FK_JOBS || e->res == FK_VCJOBS) && (gone || is_deleting(e->obj)))
                json_object_set_new(todo.owners, uid, json_true());
            if ((e->res == FK_PODS || e->res == FK_SERVICES || e->res == FK_SECRETS) && gone &&
                *owner)
                json_object_set_new(todo.owners, owner, json_true());
            if (!gone && (e->res == FK_PODS || e->res == FK_SERVICES || e->res == FK_JOBS ||
                          e->res == FK_SECRETS))
                todo_object(&todo, e->res, e->obj);
            todo.namespaces |= e->res == FK_NAMESPACES;
            if (e->res == FK_NODES && gone)
                json_object_set_new(todo.nodes, fk_str(e->obj, "metadata.name"), json_true());
            sched |= e->res == FK_PODS || e->res == FK_NODES;
            collect = 1;
        }
        st->reconciled_rv = st->rv;
        if (deadlines) {
            /* Time moves on for Jobs with a deadline. */
            const char *key;
            json_t *j;
            json_object_foreach(st->objs[FK_JOBS], key, j)
            {
                if (json_is_integer(fk_path(j, "spec.activeDeadlineSeconds", 0)))
                    json_object_set_new(dirty, fk_str(j, "metadata.uid"), json_true());
            }
            deadlines = 0;
        }
        int idle = !everything && !sched && !collect && json_object_size(dirty) == 0;
        if (collect)
            gc(st, &todo, everything);
        json_decref(todo.objs);
        json_decref(todo.owners);
        json_decref(todo.nodes);
        if (everything) {
            const char *key;
            json_t *v;
            json_object_foreach(st->owners, key, v)
            {
                json_object_set_new(dirty, key, json_true());
            }
        }
        const char *uid;
        json_t *flag;
        json_object_foreach(dirty, uid, flag)
        {
            int res;
            json_t *job = fk_owner(st, uid, &res);
            if (job && res == FK_JOBS)
                sync_job(st, job);
        }
        json_decref(dirty);
        if (sched) {
            fk_schedule(st);
            fk_autoscale(st);
        }
        if (idle)
            return;
    }
}

void fk_reconcile(fk_store *st)
{
    reconcile(st, 0);
}

void fk_reconcile_deadlines(fk_store *st)
{
    if (st->terminating) {
        /* The kubelet kills what its grace period did not see end (SIGKILL: 137). */
        json_t *late = json_array();
        const char *key;
        json_t *p;
        json_object_foreach(st->objs[FK_PODS], key, p)
        {
            if (is_deleting(p) && !pod_terminal(p) && *fk_str(p, "spec.nodeName") &&
                !held_terminating(st, p))
                json_array_append_new(late, json_pack("[ss]", fk_str(p, "metadata.namespace"),
                                                      fk_str(p, "metadata.name")));
        }
        size_t i;
        json_array_foreach(late, i, p)
        {
            fk_pod_set_phase(st, json_string_value(json_array_get(p, 0)),
                             json_string_value(json_array_get(p, 1)), "Failed", 137, "Error");
        }
        json_decref(late);
    }
    reconcile(st, 1);
}

int fk_delete(fk_store *st, int res, const char *ns, const char *name, const char *policy,
              long grace, json_t **body, int *orphan_warning)
{
    json_t *cur = fk_get(st, res, ns, name);
    char msg[700];
    *orphan_warning = 0;
    if (!cur) {
        snprintf(msg, sizeof msg, "%s%s%s \"%s\" not found", fk_resources[res].plural,
                 *fk_resources[res].group ? "." : "", fk_resources[res].group, name);
        *body = fk_status(404, "NotFound", msg, fk_details(res, name, 0));
        return 404;
    }
    char ts[64];
    fk_now(ts, sizeof ts, 0);
    if (res == FK_JOBS || res == FK_VCJOBS) {
        if (!*policy && res == FK_JOBS) {
            policy = "Orphan";
            *orphan_warning = 1;
        }
        if (!strcmp(policy, "Orphan") || !strcmp(policy, "Foreground")) {
            json_t *c = json_deep_copy(cur);
            json_t *md = fk_path(c, "metadata", 1);
            json_object_set_new(md, "deletionTimestamp", json_string(ts));
            json_object_set_new(md, "deletionGracePeriodSeconds", json_integer(0));
            json_object_set_new(md, "generation",
                                json_integer(int_at(c, "metadata.generation", 1) + 1));
            json_t *fin = fk_path(c, "metadata.finalizers", 0);
            if (!json_is_array(fin)) {
                fin = json_array();
                json_object_set_new(md, "finalizers", fin);
            }
            json_array_append_new(
                fin, json_string(!strcmp(policy, "Orphan") ? "orphan" : "foregroundDeletion"));
            *body = json_deep_copy(fk_update(st, res, c));
            return 200;
        }
    }
    if (res == FK_NAMESPACES) {
        json_t *c = json_deep_copy(cur);
        json_object_set_new(fk_path(c, "metadata", 1), "deletionTimestamp", json_string(ts));
        json_object_set_new(fk_path(c, "status", 1), "phase", json_string("Terminating"));
        *body = json_deep_copy(fk_update(st, res, c));
        return 200;
    }
    if (res == FK_PODS) {
        if (grace < 0)
            grace = int_at(cur, "spec.terminationGracePeriodSeconds", 30);
        if (!*fk_str(cur, "spec.nodeName") || pod_terminal(cur))
            grace = 0;
        if (!is_deleting(cur))
            mark_deleting(st, cur, grace);
        cur = fk_get(st, res, ns, name);
        *body = json_deep_copy(cur);
        if (json_array_size(fk_path(cur, "metadata.finalizers", 0)) == 0 &&
            !held_terminating(st, cur))
            fk_remove(st, res, ns, name);
        return 200;
    }
    json_t *d = fk_details(res, name, 0);
    json_object_set_new(d, "uid", json_string(fk_str(cur, "metadata.uid")));
    *body = json_pack("{s:s, s:s, s:{}, s:s, s:o}", "kind", "Status", "apiVersion", "v1",
                      "metadata", "status", "Success", "details", d);
    fk_remove(st, res, ns, name);
    return 200;
}

static json_t *pod_cond(const char *type, const char *status, const char *reason, const char *ts)
{
    json_t *c = json_pack("{s:s, s:s, s:n, s:s}", "type", type, "status", status, "lastProbeTime",
                          "lastTransitionTime", ts);
    if (reason)
        json_object_set_new(c, "reason", json_string(reason));
    return c;
}

/*
 * 1 when a container of pod p takes a variable from a Secret (valueFrom.secretKeyRef, not
 * optional) that does not exist, or lacks the key: the kubelet does not start it.
 */
static int missing_secret(fk_store *st, const json_t *p)
{
    const char *ns = fk_str(p, "metadata.namespace");
    size_t i, j;
    json_t *c, *e;
    json_array_foreach(fk_path((json_t *)p, "spec.containers", 0), i, c)
    {
        json_array_foreach(json_object_get(c, "env"), j, e)
        {
            json_t *ref = fk_path(e, "valueFrom.secretKeyRef", 0);
            if (!json_is_object(ref) || json_is_true(json_object_get(ref, "optional")))
                continue;
            const json_t *s = fk_get(st, FK_SECRETS, ns, fk_str(ref, "name"));
            if (!s || !json_object_get(json_object_get(s, "data"), fk_str(ref, "key")))
                return 1;
        }
    }
    return 0;
}

int fk_pod_set_phase(fk_store *st, const char *ns, const char *name, const char *phase,
                     int exit_code, const char *reason)
{
    json_t *cur = fk_get(st, FK_PODS, ns, name);
    if (!cur)
        return 404;
    if (!*fk_str(cur, "spec.nodeName"))
        return 409;
    if (!strcmp(phase ? phase : "", "Running") && missing_secret(st, cur))
        return 409; /* the kubelet's CreateContainerConfigError: secret "x" not found */
    char now[64];
    fk_now(now, sizeof now, 0);
    json_t *p = json_deep_copy(cur);
    json_t *s = fk_path(p, "status", 1);
    const char *start = *fk_str(p, "status.startTime") ? fk_str(cur, "status.startTime") : now;
    int running = !strcmp(phase, "Running");
    if (!running && strcmp(phase, "Succeeded") && strcmp(phase, "Failed")) {
        json_decref(p);
        return 400;
    }
    const char *why = running ? NULL : "PodCompleted";
    json_t *conds = json_array();
    json_array_append_new(conds, pod_cond("Initialized", "True", why, now));
    json_array_append_new(conds, pod_cond("Ready", running ? "True" : "False", why, now));
    json_array_append_new(conds, pod_cond("ContainersReady", running ? "True" : "False", why, now));
    json_array_append_new(conds, pod_cond("PodScheduled", "True", NULL, now));
    /* An eviction's DisruptionTarget stays. */
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(s, "conditions"), i, c)
    {
        if (!strcmp(fk_str(c, "type"), "DisruptionTarget"))
            json_array_append(conds, c);
    }
    json_object_set_new(s, "phase", json_string(phase));
    json_object_set_new(s, "conditions", conds);
    json_object_set_new(s, "startTime", json_string(start));
    json_t *cstats = json_array();
    json_array_foreach(fk_path(p, "spec.containers", 0), i, c)
    {
        char cid[300];
        snprintf(cid, sizeof cid, "fake://%s", fk_str(c, "name"));
        json_t *state;
        if (running)
            state = json_pack("{s:{s:s}}", "running", "startedAt", start);
        else
            state = json_pack("{s:{s:i, s:s, s:s, s:s, s:s}}", "terminated", "exitCode",
                              !strcmp(phase, "Succeeded") ? 0 : exit_code, "reason",
                              reason && *reason             ? reason
                              : !strcmp(phase, "Succeeded") ? "Completed"
                                                            : "Error",
                              "startedAt", start, "finishedAt", now, "containerID", cid);
        /* A container that failed says why in the end of its log, as the kubelet reads it
         * under FallbackToLogsOnError (the termination-log file is empty here). */
        if (!running && strcmp(phase, "Succeeded") && exit_code != 0 &&
            !strcmp(fk_str(c, "terminationMessagePolicy"), "FallbackToLogsOnError")) {
            char key[512];
            snprintf(key, sizeof key, "%s/%s", ns, name);
            char *msg = fk_log_termination_message(st, key);
            if (msg && state)
                json_object_set_new(json_object_get(state, "terminated"), "message",
                                    json_string(msg));
            free(msg);
        }
        json_array_append_new(cstats,
                              json_pack("{s:s, s:o, s:{}, s:b, s:i, s:s, s:s, s:s, s:b}", "name",
                                        fk_str(c, "name"), "state", state, "lastState", "ready",
                                        running, "restartCount", 0, "image", fk_str(c, "image"),
                                        "imageID", "", "containerID", cid, "started", running));
    }
    json_object_set_new(s, "containerStatuses", cstats);
    fk_update(st, FK_PODS, p);
    return 200;
}

int fk_pod_evict(fk_store *st, const char *ns, const char *name)
{
    json_t *cur = fk_get(st, FK_PODS, ns, name);
    if (!cur)
        return 404;
    char now[64];
    fk_now(now, sizeof now, 0);
    json_t *p = json_deep_copy(cur);
    json_t *conds = fk_path(p, "status.conditions", 0);
    if (!json_is_array(conds)) {
        conds = json_array();
        json_object_set_new(fk_path(p, "status", 1), "conditions", conds);
    }
    json_t *c = pod_cond("DisruptionTarget", "True", "EvictionByEvictionAPI", now);
    json_object_set_new(c, "message", json_string("Eviction API: evicting"));
    json_array_append_new(conds, c);
    fk_update(st, FK_PODS, p);
    if (!*fk_str(cur, "spec.nodeName")) {
        json_t *body = NULL;
        int warn;
        fk_delete(st, FK_PODS, ns, name, "", 0, &body, &warn);
        json_decref(body);
        return 200;
    }
    fk_pod_set_phase(st, ns, name, "Failed", 137, "Error");
    mark_deleting(st, fk_get(st, FK_PODS, ns, name), 30);
    return 200;
}
