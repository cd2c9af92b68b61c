/*
 * kube_events.c - the informers' changes of pods and nodes as backend events (backend.h).
 *
 * A rank's life is read from its pod: bound (PLACED), unschedulable or pulling its image in
 * vain (PENDING, with the scheduler's or the kubelet's words), its container running (RUNNING),
 * then exactly one end. Why a pod ended decides the end's kind: Succeeded is EXITED 0; Failed
 * is EXITED with the container's code and reason ("OOMKilled"), unless the pod was taken away
 * (status.reason Evicted/Preempting, a DisruptionTarget condition, exit 75 for "resumable"),
 * then DISRUPTED. A pod deleted before it ended was stopped (we asked), lost with its node, or
 * evicted. A node tainted for spot reclaim, or a running pod marked DisruptionTarget, is a
 * notice (DISRUPTED, ended 0) so the loop stops the gang while it can still checkpoint.
 */
#include "scheduler/kube/kube_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_time.h"
#include "scheduler/kube/placement.h"
#include "scheduler/quarantine.h"

static const json_t *md(const json_t *o, const char *key)
{
    return json_object_get(json_object_get(o, "metadata"), key);
}

static const char *str(const json_t *o, const char *k1, const char *k2)
{
    const json_t *v = json_object_get(o, k1);
    if (k2)
        v = json_object_get(v, k2);
    return json_string_value(v);
}

int kb_pod_rank(const json_t *pod)
{
    const char *idx = json_string_value(json_object_get(md(pod, "annotations"), KB_ANN_INDEX));
    if (!idx)
        idx = json_string_value(json_object_get(md(pod, "annotations"), KB_ANN_VC_INDEX));
    if (!idx)
        idx = json_string_value(json_object_get(md(pod, "labels"), KB_ANN_INDEX));
    if (!idx || !*idx)
        return -1;
    char *end;
    long r = strtol(idx, &end, 10);
    return *end || r < 0 || r > 100000 ? -1 : (int)r;
}

static const json_t *condition(const json_t *obj, const char *type)
{
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
    {
        const char *t = str(c, "type", NULL);
        if (t && !strcmp(t, type))
            return c;
    }
    return NULL;
}

static int condition_true(const json_t *obj, const char *type)
{
    const char *s = str(condition(obj, type), "status", NULL);
    return s && !strcmp(s, "True");
}

static int has_taint(const json_t *node, const char *key)
{
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(json_object_get(node, "spec"), "taints"), i, t)
    {
        const char *k = str(t, "key", NULL);
        if (k && !strcmp(k, key))
            return 1;
    }
    return 0;
}

static size_t hard_taints(const json_t *node)
{
    size_t i, n = 0;
    const json_t *t;
    json_array_foreach(json_object_get(json_object_get(node, "spec"), "taints"), i, t)
    {
        const char *e = str(t, "effect", NULL);
        n += e && (!strcmp(e, "NoSchedule") || !strcmp(e, "NoExecute"));
    }
    return n;
}

/* The first container's status (ours run one container). */
static const json_t *container(const json_t *pod)
{
    return json_array_get(json_object_get(json_object_get(pod, "status"), "containerStatuses"),
                          0);
}

/* What the pod's status.reason and DisruptionTarget condition say took it away, as the
 * interface's disruption (quarantine_pod_cause() decides); 0 when nothing did. */
static backend_disruption disruption_of(const json_t *pod, char *why, size_t len)
{
    const char *reason = str(pod, "status", "reason");
    const json_t *dt = condition(pod, "DisruptionTarget");
    const char *dr = dt && condition_true(pod, "DisruptionTarget") ? str(dt, "reason", NULL)
                                                                   : NULL;
    const char *msg = dr ? str(dt, "message", NULL) : str(pod, "status", "message");
    backend_disruption d = 0;
    switch (quarantine_pod_cause(reason, dr)) {
    case QUARANTINE_CAUSE_PREEMPTED:
        d = BACKEND_DISRUPT_PREEMPTED;
        break;
    case QUARANTINE_CAUSE_NODE_LOST:
        d = BACKEND_DISRUPT_NODE_LOST;
        break;
    case QUARANTINE_CAUSE_EVICTED:
        d = BACKEND_DISRUPT_EVICTED;
        break;
    case QUARANTINE_CAUSE_NONE:
        break;
    }
    if (d)
        kb_fmt(why, len, "%s%s%s", dr ? dr : reason ? reason : "", msg ? ": " : "",
                 msg ? msg : "");
    return d;
}

/* The last line of text that is not blank (its length in *len), or NULL. */
static const char *last_line(const char *text, size_t *len)
{
    if (!text)
        return NULL;
    size_t end = strlen(text);
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' '))
        end--;
    if (end == 0)
        return NULL;
    size_t start = end;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    *len = end - start;
    return text + start;
}

static void end_failed(kbe *kb, backend_attempt *a, int r, const json_t *pod, uint64_t t0)
{
    const json_t *term = json_object_get(json_object_get(container(pod), "state"), "terminated");
    const char *treason = str(term, "reason", NULL);
    const char *tmsg = str(term, "message", NULL);
    backend_event ev = {.exit_code = -1};
    if (json_is_integer(json_object_get(term, "exitCode")))
        ev.exit_code = (int)json_integer_value(json_object_get(term, "exitCode"));
    if (json_integer_value(json_object_get(term, "signal")) > 0) {
        ev.signal = (int)json_integer_value(json_object_get(term, "signal"));
        ev.exit_code = -1;
    }
    backend_disruption d = disruption_of(pod, ev.detail, sizeof ev.detail);
    if (a->stopping) {
        ev.kind = BACKEND_EV_DISRUPTED;
        ev.disruption = BACKEND_DISRUPT_STOP_REQUESTED;
    } else if (d) {
        ev.kind = BACKEND_EV_DISRUPTED;
        ev.disruption = d;
    } else if (ev.exit_code == 75) {
        ev.kind = BACKEND_EV_DISRUPTED;
        ev.disruption = BACKEND_DISRUPT_RESUMABLE;
    } else if (a->ranks[r].noticed) {
        ev.kind = BACKEND_EV_DISRUPTED;
        ev.disruption = BACKEND_DISRUPT_RECLAIMED;
    } else {
        ev.kind = BACKEND_EV_EXITED;
        size_t llen = 0;
        const char *last = last_line(tmsg, &llen);
        if (treason && strcmp(treason, "Error") && strcmp(treason, "Completed"))
            kb_fmt(ev.detail, sizeof ev.detail, "%s%s%.*s", treason, last ? ": " : "",
                   (int)llen, last ? last : "");
        else if (last) /* the worker's own words: the end of its log (FallbackToLogsOnError) */
            kb_fmt(ev.detail, sizeof ev.detail, "%.*s", (int)llen, last);
        else if (!term)
            kb_fmt(ev.detail, sizeof ev.detail, "the pod failed: %s",
                     str(pod, "status", "message") ? str(pod, "status", "message")
                                                   : "no container status");
    }
    kb_end_rank(kb, a, r, &ev, t0);
}

static void end_deleted(kbe *kb, backend_attempt *a, int r, const json_t *pod, uint64_t t0)
{
    backend_event ev = {.kind = BACKEND_EV_DISRUPTED, .exit_code = -1};
    const char *node = a->ranks[r].node;
    json_t *n = node[0] ? ty_informer_get(kb->nodes, NULL, node) : NULL;
    backend_disruption d = disruption_of(pod, ev.detail, sizeof ev.detail);
    if (a->stopping || a->gang_failed) {
        ev.disruption = BACKEND_DISRUPT_STOP_REQUESTED;
        kb_fmt(ev.detail, sizeof ev.detail, "%s",
                 a->stopping ? "deleted as asked" : "deleted: another rank of the gang failed");
    } else if (node[0] && !n) {
        ev.disruption = BACKEND_DISRUPT_NODE_LOST;
        kb_fmt(ev.detail, sizeof ev.detail, "node %s is gone", node);
    } else if (d) {
        ev.disruption = d;
    } else if (a->ranks[r].noticed) {
        ev.disruption = BACKEND_DISRUPT_RECLAIMED;
        kb_fmt(ev.detail, sizeof ev.detail, "deleted after a reclaim notice");
    } else {
        ev.disruption = BACKEND_DISRUPT_EVICTED;
        kb_fmt(ev.detail, sizeof ev.detail, "the pod was deleted before it ended");
    }
    json_decref(n);
    kb_end_rank(kb, a, r, &ev, t0);
}

static void pending(kbe *kb, backend_attempt *a, int r, const char *detail, uint64_t t0)
{
    krank *k = &a->ranks[r];
    if (!strncmp(k->pending, detail, sizeof k->pending - 1))
        return; /* repeated only when the reason changes */
    kb_fmt(k->pending, sizeof k->pending, "%s", detail);
    backend_event ev = {.kind = BACKEND_EV_PENDING, .attempt = a, .rank = r, .exit_code = -1};
    kb_fmt(ev.detail, sizeof ev.detail, "%s", detail);
    kb_push(kb, &ev, t0);
}

void kb_pod_changed(kbe *kb, const json_t *pod, int deleted, uint64_t t0)
{
    const char *job = json_string_value(json_object_get(md(pod, "labels"), KUBE_LABEL_JOB_ID));
    const char *att = json_string_value(json_object_get(md(pod, "labels"), KUBE_LABEL_ATTEMPT));
    const char *name = json_string_value(md(pod, "name"));
    if (!job || !att || !name)
        return;
    backend_attempt *a = kb_find(kb, job, atoi(att));
    int r = kb_pod_rank(pod);
    if (!a || r < 0 || r >= a->world)
        return;
    krank *k = &a->ranks[r];
    if (k->ended || (k->pod[0] && strcmp(k->pod, name)))
        return; /* a rank's first pod is the rank: a later one of the same index is not ours */
    kb_fmt(k->pod, sizeof k->pod, "%s", name);

    const char *node = str(pod, "spec", "nodeName");
    if (node && *node && !k->placed) {
        k->placed = 1;
        if (k->unschedulable) {
            k->unschedulable = 0;
            int any = 0;
            for (int i = 0; i < a->world; i++)
                any |= a->ranks[i].unschedulable;
            if (!any)
                a->unsched_since_ms = 0; /* the clock starts again with the next refusal */
        }
        kb_fmt(k->node, sizeof k->node, "%s", node);
        backend_event ev = {.kind = BACKEND_EV_PLACED, .attempt = a, .rank = r, .exit_code = -1};
        kb_fmt(ev.where.pod, sizeof ev.where.pod, "%s", name);
        kb_fmt(ev.where.node, sizeof ev.where.node, "%s", node);
        kb_push(kb, &ev, t0);
    }
    const char *phase = str(pod, "status", "phase");
    phase = phase ? phase : "Pending";
    const json_t *cs = container(pod);
    const json_t *running = json_object_get(json_object_get(cs, "state"), "running");
    if (!k->running && !strcmp(phase, "Running") && running) {
        k->running = 1;
        backend_event ev = {.kind = BACKEND_EV_RUNNING, .attempt = a, .rank = r, .exit_code = -1};
        kb_fmt(ev.where.pod, sizeof ev.where.pod, "%s", name);
        kb_fmt(ev.where.node, sizeof ev.where.node, "%s", k->node);
        int64_t ms = 0;
        const char *at = str(running, "startedAt", NULL);
        if (at && ty_time_parse_rfc3339(at, &ms) == 0)
            ev.where.started_ms = ms;
        kb_push(kb, &ev, t0);
        int all = 1;
        for (int i = 0; i < a->world; i++)
            all &= a->ranks[i].running || a->ranks[i].ended;
        if (all)
            a->grow_deadline_ms = 0; /* the group grew in time */
    }
    if (!strcmp(phase, "Succeeded")) {
        backend_event ev = {.kind = BACKEND_EV_EXITED, .exit_code = 0};
        if (a->stopping) {
            ev.kind = BACKEND_EV_DISRUPTED;
            ev.disruption = BACKEND_DISRUPT_STOP_REQUESTED;
            ev.exit_code = 0;
        }
        kb_end_rank(kb, a, r, &ev, t0);
        return;
    }
    if (!strcmp(phase, "Failed")) {
        end_failed(kb, a, r, pod, t0);
        return;
    }
    if (deleted) {
        end_deleted(kb, a, r, pod, t0);
        return;
    }
    if (!strcmp(phase, "Running") && !k->noticed && !a->stopping &&
        condition_true(pod, "DisruptionTarget")) {
        k->noticed = 1;
        backend_event ev = {.kind = BACKEND_EV_DISRUPTED, .attempt = a, .rank = r,
                            .exit_code = -1};
        ev.disruption = disruption_of(pod, ev.detail, sizeof ev.detail);
        if (!ev.disruption)
            ev.disruption = BACKEND_DISRUPT_RECLAIMED;
        kb_push(kb, &ev, t0);
        return;
    }
    if (strcmp(phase, "Pending"))
        return;
    const json_t *sched = condition(pod, "PodScheduled");
    const char *ss = str(sched, "status", NULL);
    if (ss && !strcmp(ss, "False") && !k->placed) {
        const char *msg = str(sched, "message", NULL);
        /* The withdrawal's clock (kube_backend.c's check_growth) runs from the first refusal
         * while any rank is refused; the event quotes the scheduler's latest words. */
        k->unschedulable = 1;
        if (!a->unsched_since_ms) {
            a->unsched_since_ms = ty_time_now_ms();
            kb_growth_due(kb, a->unsched_since_ms + kb->p->unschedulable_timeout_seconds * 1000);
        }
        kb_fmt(a->unsched_msg, sizeof a->unsched_msg, "%s",
               msg                          ? msg
               : str(sched, "reason", NULL) ? str(sched, "reason", NULL)
                                            : "unschedulable");
        pending(kb, a, r, msg ? msg : str(sched, "reason", NULL) ? str(sched, "reason", NULL)
                                                                : "unschedulable", t0);
        return;
    }
    const json_t *waiting = json_object_get(json_object_get(cs, "state"), "waiting");
    const char *wr = str(waiting, "reason", NULL);
    if (wr && (!strcmp(wr, "ErrImagePull") || !strcmp(wr, "ImagePullBackOff") ||
               !strcmp(wr, "InvalidImageName"))) {
        char d[BACKEND_DETAIL_MAX];
        const char *wm = str(waiting, "message", NULL);
        kb_fmt(d, sizeof d, "image pull: %s%s%s", wr, wm ? ": " : "", wm ? wm : "");
        pending(kb, a, r, d, t0);
    }
}

void kb_pod_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj)
{
    kbe *kb = ud;
    uint64_t t0 = ty_time_mono_ns();
    int freed = 0;
    /* The inventory hears of the namespace's pods from here only (the bound pods' informer
     * leaves the namespace out). */
    kube_inv_pod(kb->inv, old_obj, type == TY_INF_DELETED ? NULL : new_obj, &freed);
    const json_t *pod = new_obj ? new_obj : old_obj;
    /* Before the events: a reader told of a rank's end finds its log draining already. */
    kube_logs_pod(kb->logs, type == TY_INF_DELETED ? old_obj : new_obj, type == TY_INF_DELETED);
    pthread_mutex_lock(&kb->mu);
    /* A pod not of ours that ends frees GPUs no release() announces (as a tenant's would). */
    if (freed > 0 && kb->nodes_synced &&
        !json_object_get(md(pod, "labels"), KUBE_LABEL_JOB_ID))
        kb_push_capacity(kb);
    if (type == TY_INF_DELETED)
        kb_pod_changed(kb, old_obj, 1, t0);
    else
        kb_pod_changed(kb, new_obj, 0, t0);
    pthread_mutex_unlock(&kb->mu);
}

json_t *kb_bound_pod_slim(void *ud, const json_t *pod)
{
    (void)ud;
    return kube_inv_pod_slim(pod);
}

/* ---- slim records --------------------------------------------------------------------------- */

/*
 * What a watch parses of a pod (kpick.h), for the namespace's informer and the bound pods':
 * everything kb_pod_slim() and kube_inv_pod_slim() read, and not the rest of the pod (its
 * containers' env, volumes, managed fields, the annotations and the members of conditions and
 * container statuses the slim record leaves out). A field either of them reads must be named
 * here.
 */
static const char pod_pick[] =
    "{\"metadata\": {\"namespace\": true, \"name\": true, \"uid\": true, "
    "\"resourceVersion\": true, \"labels\": true, \"annotations\": {\"" KB_ANN_INDEX "\": true, "
    "\"" KB_ANN_VC_INDEX "\": true}, \"deletionTimestamp\": true},"
    " \"spec\": {\"nodeName\": true, \"overhead\": true, \"containers\": {\"name\": true, "
    "\"resources\": true}, \"initContainers\": {\"name\": true, \"resources\": true}},"
    " \"status\": {\"phase\": true, \"reason\": true, \"message\": true, \"startTime\": true, "
    "\"conditions\": {\"type\": true, \"status\": true, \"reason\": true, \"message\": true}, "
    "\"containerStatuses\": {\"name\": true, \"state\": true, \"restartCount\": true}}}";

/* What a watch parses of a Job: what kb_job_slim() reads. */
static const char job_pick[] =
    "{\"metadata\": {\"namespace\": true, \"name\": true, \"uid\": true, "
    "\"resourceVersion\": true, \"labels\": true, \"deletionTimestamp\": true}}";

json_t *kb_pod_pick(void)
{
    return json_loads(pod_pick, 0, NULL);
}

json_t *kb_job_pick(void)
{
    return json_loads(job_pick, 0, NULL);
}

/*
 * What the namespace's and the nodes' informers keep of an object: only the fields this file,
 * kube_backend.c and the inventory read, so that a cache of every pod, Job and node costs a
 * few hundred bytes an object, not the several KiB of a parsed pod or node (whose managed
 * fields, specs and image lists nothing here reads). A field read from a cached object must be
 * kept here too.
 */

/* dst[k1][k2] = src[k1][k2] (src[k1] when k2 is NULL), when there is one; -1 when out of
 * memory. The value is shared, not copied: neither the object the server sent nor the record
 * made of it is ever changed. */
static int keep(json_t *dst, const json_t *src, const char *k1, const char *k2)
{
    const json_t *v = json_object_get(src, k1);
    if (k2)
        v = json_object_get(v, k2);
    if (!v)
        return 0;
    json_t *c = json_incref((json_t *)v);
    if (!k2)
        return json_object_set_new(dst, k1, c);
    json_t *in = json_object_get(dst, k1);
    if (!in) {
        if (!(in = json_object()) || json_object_set_new(dst, k1, in)) {
            json_decref(c);
            return -1;
        }
    }
    return json_object_set_new(in, k2, c);
}

/* dst[k1][k2] = src[k1][k2]'s items with only the given keys (each item an object); only the
 * items whose "type" is one of types, unless types is NULL. */
static int keep_items(json_t *dst, const json_t *src, const char *k1, const char *k2,
                      const char *const *keys, const char *const *types)
{
    const json_t *arr = json_object_get(json_object_get(src, k1), k2);
    if (!json_is_array(arr))
        return 0;
    json_t *out = json_array(), *in = json_object_get(dst, k1);
    if (!out)
        return -1;
    if (!in && (!(in = json_object()) || json_object_set_new(dst, k1, in))) {
        json_decref(out);
        return -1;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(arr, i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        int wanted = !types;
        for (size_t t = 0; !wanted && type && types[t]; t++)
            wanted = !strcmp(type, types[t]);
        if (!wanted)
            continue;
        json_t *o = json_object();
        int bad = !o || json_array_append_new(out, o);
        for (size_t k = 0; !bad && keys[k]; k++)
            bad = keep(o, item, keys[k], NULL) != 0;
        if (bad) {
            json_decref(out);
            return -1;
        }
    }
    return json_object_set_new(in, k2, out);
}

/* metadata: namespace, name, uid, resourceVersion (what the informer keys and compares by),
 * labels and deletionTimestamp; the annotations named in ann. */
static int keep_meta(json_t *dst, const json_t *src, const char *const *ann)
{
    static const char *const keys[] = {"namespace", "name", "uid", "resourceVersion", "labels",
                                       "deletionTimestamp", NULL};
    int bad = 0;
    for (size_t k = 0; !bad && keys[k]; k++)
        bad = keep(dst, src, "metadata", keys[k]) != 0;
    const json_t *from = json_object_get(json_object_get(src, "metadata"), "annotations");
    for (size_t k = 0; !bad && ann && ann[k]; k++) {
        const json_t *v = json_object_get(from, ann[k]);
        if (!v)
            continue;
        json_t *to = json_object_get(json_object_get(dst, "metadata"), "annotations");
        if (!to) {
            bad = !(to = json_object()) ||
                  json_object_set_new(json_object_get(dst, "metadata"), "annotations", to);
            if (bad)
                break;
        }
        bad = json_object_set_new(to, ann[k], json_incref((json_t *)v)) != 0;
    }
    return bad ? -1 : 0;
}

static const char *const cond_keys[] = {"type", "status", "reason", "message", NULL};

/*
 * A pod of ours: what the inventory keeps (kube_inv_pod_slim(): node, phase, requests), the
 * labels, the completion index annotations, the pod's reason and message, the conditions this
 * file reads (PodScheduled and DisruptionTarget: type, status, reason, message; not Ready,
 * Initialized, ContainersReady) and its containers' names, states and restart counts.
 */
json_t *kb_pod_slim(void *ud, const json_t *pod)
{
    static const char *const ann[] = {KB_ANN_INDEX, KB_ANN_VC_INDEX, NULL};
    static const char *const cs_keys[] = {"name", "state", "restartCount", NULL};
    static const char *const cond_types[] = {"PodScheduled", "DisruptionTarget", NULL};
    (void)ud;
    json_t *o = kube_inv_pod_slim(pod);
    int bad = !o || keep_meta(o, pod, ann) || keep(o, pod, "status", "reason") ||
              keep(o, pod, "status", "message") || keep(o, pod, "status", "startTime") ||
              keep_items(o, pod, "status", "conditions", cond_keys, cond_types) ||
              keep_items(o, pod, "status", "containerStatuses", cs_keys, NULL);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A node: metadata with its labels, spec.taints and unschedulable, status.allocatable, the
 * conditions' type and status (the inventory reads Ready's). Not its capacity, images,
 * addresses, or its conditions' reasons and messages, which nothing reads: a cluster's 3,000
 * nodes are cached for the server's whole life. */
json_t *kb_node_slim(void *ud, const json_t *node)
{
    static const char *const node_cond_keys[] = {"type", "status", NULL};
    (void)ud;
    json_t *o = json_object();
    int bad = !o || keep_meta(o, node, NULL) || keep(o, node, "spec", "taints") ||
              keep(o, node, "spec", "unschedulable") ||
              keep(o, node, "status", "allocatable") ||
              keep_items(o, node, "status", "conditions", node_cond_keys, NULL);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A Job (or Volcano Job) of ours: its metadata with the labels that name job and attempt. */
json_t *kb_job_slim(void *ud, const json_t *job)
{
    (void)ud;
    json_t *o = json_object();
    if (!o || keep_meta(o, job, NULL)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void kb_bound_pod_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj)
{
    kbe *kb = ud;
    int freed = 0;
    kube_inv_pod(kb->inv, old_obj, type == TY_INF_DELETED ? NULL : new_obj, &freed);
    /* Another tenant's pod that ends frees GPUs no release() of ours announces. (A pod that
     * ends leaves the field selector: it comes as DELETED, in its new state, so only the
     * inventory knows what it held.) */
    if (freed > 0) {
        pthread_mutex_lock(&kb->mu);
        if (kb->nodes_synced)
            kb_push_capacity(kb);
        pthread_mutex_unlock(&kb->mu);
    }
}

/* Whether a node change may let a waiting gang fit. */
static int capacity_grew(const json_t *old_obj, const json_t *new_obj)
{
    if (!old_obj)
        return 1;
    int unsched_before = json_is_true(json_object_get(json_object_get(old_obj, "spec"),
                                                      "unschedulable"));
    int unsched_after = json_is_true(json_object_get(json_object_get(new_obj, "spec"),
                                                     "unschedulable"));
    return (!kube_inv_node_ready(old_obj) && kube_inv_node_ready(new_obj)) ||
           (unsched_before && !unsched_after) || hard_taints(new_obj) < hard_taints(old_obj) ||
           (has_taint(old_obj, KUBE_RECLAIM_TAINT) && !has_taint(new_obj, KUBE_RECLAIM_TAINT)) ||
           kube_inv_node_gpus(new_obj) > kube_inv_node_gpus(old_obj);
}

void kb_node_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj)
{
    kbe *kb = ud;
    uint64_t t0 = ty_time_mono_ns();
    const json_t *node = new_obj ? new_obj : old_obj;
    const char *name = json_string_value(md(node, "name"));
    const char *zone = json_string_value(json_object_get(md(node, "labels"), KB_LABEL_ZONE));
    if (!name)
        return;
    kube_inv_node(kb->inv, old_obj, type == TY_INF_DELETED ? NULL : new_obj);
    kb_note_node(kb, old_obj, new_obj, type == TY_INF_DELETED);
    int reclaim = type != TY_INF_DELETED && has_taint(new_obj, KUBE_RECLAIM_TAINT) &&
                  !(old_obj && has_taint(old_obj, KUBE_RECLAIM_TAINT));
    pthread_mutex_lock(&kb->mu);
    if (kb->nodes_synced && type != TY_INF_DELETED && capacity_grew(old_obj, new_obj))
        kb_push_capacity(kb);
    for (backend_attempt *a = kb->attempts; a && (reclaim || type == TY_INF_DELETED);
         a = a->next) {
        if (!a->live)
            continue;
        for (int r = 0; r < a->world; r++) {
            krank *k = &a->ranks[r];
            if (k->ended || strcmp(k->node, name))
                continue;
            if (zone && !a->avoid[0])
                kb_fmt(a->avoid, sizeof a->avoid, "%s", zone);
            backend_event ev = {.kind = BACKEND_EV_DISRUPTED, .attempt = a, .rank = r,
                                .exit_code = -1};
            if (type == TY_INF_DELETED) {
                ev.disruption = BACKEND_DISRUPT_NODE_LOST;
                kb_fmt(ev.detail, sizeof ev.detail, "node %s was deleted", name);
                kb_end_rank(kb, a, r, &ev, t0);
            } else if (!k->noticed && !a->stopping) {
                k->noticed = 1;
                ev.disruption = BACKEND_DISRUPT_RECLAIMED;
                kb_fmt(ev.detail, sizeof ev.detail,
                         "node %s is being reclaimed (taint " KUBE_RECLAIM_TAINT ")", name);
                kb_push(kb, &ev, t0);
            }
        }
    }
    pthread_mutex_unlock(&kb->mu);
}
