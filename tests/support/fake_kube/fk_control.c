/*
 * fk_control.c - the fake's control API for tests, under /fake/ (not part of
 * Kubernetes), and its injected faults. Without authentication:
 *
 *   POST   /fake/nodes                      a Node, a list of them or {"items": [...]}
 *   DELETE /fake/nodes/NAME                 the node goes (a lost node)
 *   POST   /fake/nodes/NAME/taint           {"key", "value", "effect"}: the taint goes first
 *   POST   /fake/nodes/NAME/untaint         {"key"}
 *   POST   /fake/pods/NS/NAME/phase         {"phase": Running|Succeeded|Failed,
 *                                            "exitCode": N, "reason": "OOMKilled"}
 *   POST   /fake/pods/NS/phase?labelSelector=S   the same for every pod S selects, at once
 *   POST   /fake/pods/NS/NAME/evict         DisruptionTarget, then Failed and deleted
 *   POST   /fake/pods/NS/NAME/log           appends to the container's log, each line
 *                                            stamped with the time (followers see it);
 *                                            PUT sets the text (one that extends the log
 *                                            appends its new part)
 *   POST   /fake/nodegroups                 {"name", "max", "delaySeconds", "node": template}
 *   DELETE /fake/nodegroups/NAME
 *   POST   /fake/faults                     {"method", "path" (a prefix), "count",
 *                                            "status": 500|429|..., "retryAfter", "delayMs"}
 *   DELETE /fake/faults
 *   POST   /fake/watches/drop               ends every open watch
 *   POST   /fake/compact                    forgets the event window (410 for older rvs)
 *   GET    /fake/requests                   what Trainyard asked, by RBAC verb (fk_http.c)
 *   POST   /fake/kubelet                    {"terminating": true|false}: whether a bound pod
 *                                            deleted with a grace period stays (Terminating,
 *                                            its GPUs held) until a phase change ends it or
 *                                            the period runs out (Failed, exit code 137); off
 *                                            by default: such a pod goes at once
 *
 * Answers 200 {"ok": true}, or an error code with {"error": "..."}.
 */
#include "tests/support/fake_kube/fk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fk_take_fault(fk_store *st, const char *method, const char *url, fk_fault *out)
{
    int hit = 0;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->nfaults; i++) {
        fk_fault *f = &st->faults[i];
        if (f->remaining <= 0 || (f->method[0] && strcmp(f->method, method)) ||
            strncmp(url, f->prefix, strlen(f->prefix)))
            continue;
        f->remaining--;
        *out = *f;
        hit = 1;
        break;
    }
    pthread_mutex_unlock(&st->mu);
    return hit;
}

static int add_node(fk_store *st, json_t *node)
{
    if (!json_is_object(node) || !*fk_str(node, "metadata.name"))
        return -1;
    json_t *n = json_deep_copy(node);
    json_object_set_new(n, "kind", json_string("Node"));
    json_object_set_new(n, "apiVersion", json_string("v1"));
    if (fk_get(st, FK_NODES, "", fk_str(n, "metadata.name"))) {
        json_decref(n);
        return -1;
    }
    fk_create(st, FK_NODES, n);
    return 0;
}

int fk_load_nodes(fk_store *st, const json_t *doc)
{
    const json_t *items = json_is_array(doc) ? doc : json_object_get(doc, "items");
    if (!items)
        return add_node(st, (json_t *)doc);
    size_t i;
    json_t *n;
    json_array_foreach(items, i, n)
    {
        if (add_node(st, n) != 0)
            return -1;
    }
    return 0;
}

int fk_control(fk_store *st, const char *method, const char *url, const char *label_selector,
               const char *data, size_t len, const char **err_out)
{
    char path[1024], *seg[8];
    int n = 0;
    snprintf(path, sizeof path, "%s", url);
    char *save = NULL;
    for (char *t = strtok_r(path, "/", &save); t && n < 8; t = strtok_r(NULL, "/", &save))
        seg[n++] = t;
    json_t *body = len ? json_loadb(data, len, 0, NULL) : NULL;
    int code = 200;
    const char *err = NULL;
    pthread_mutex_lock(&st->mu);
    if (n == 2 && !strcmp(seg[1], "nodes") && !strcmp(method, "POST")) {
        if (fk_load_nodes(st, body) != 0) {
            code = 400;
            err = "a node without a name, or one that exists";
        }
    } else if (n == 3 && !strcmp(seg[1], "nodes") && !strcmp(method, "DELETE")) {
        if (!fk_get(st, FK_NODES, "", seg[2])) {
            code = 404;
            err = "no such node";
        } else {
            fk_remove(st, FK_NODES, "", seg[2]);
        }
    } else if (n == 4 && !strcmp(seg[1], "nodes") &&
               (!strcmp(seg[3], "taint") || !strcmp(seg[3], "untaint"))) {
        json_t *cur = fk_get(st, FK_NODES, "", seg[2]);
        const char *key = fk_str(body, "key");
        if (!cur || !*key) {
            code = cur ? 400 : 404;
            err = cur ? "a taint needs a key" : "no such node";
        } else {
            json_t *node = json_deep_copy(cur);
            json_t *taints = fk_path(node, "spec.taints", 0);
            json_t *kept = json_array();
            if (!strcmp(seg[3], "taint")) {
                /* kubectl puts the new taint first (13). */
                json_t *t = json_pack("{s:s}", "key", key);
                if (*fk_str(body, "value"))
                    json_object_set_new(t, "value", json_string(fk_str(body, "value")));
                json_object_set_new(
                    t, "effect",
                    json_string(*fk_str(body, "effect") ? fk_str(body, "effect") : "NoSchedule"));
                json_array_append_new(kept, t);
            }
            size_t i;
            json_t *t;
            json_array_foreach(taints, i, t)
            {
                if (strcmp(fk_str(t, "key"), key))
                    json_array_append(kept, t);
            }
            if (json_array_size(kept))
                json_object_set_new(fk_path(node, "spec", 1), "taints", kept);
            else {
                json_decref(kept);
                json_object_del(fk_path(node, "spec", 1), "taints");
            }
            fk_update(st, FK_NODES, node);
        }
    } else if (n == 5 && !strcmp(seg[1], "pods") && !strcmp(seg[4], "phase")) {
        code = fk_pod_set_phase(st, seg[2], seg[3], fk_str(body, "phase"),
                                (int)json_integer_value(json_object_get(body, "exitCode")),
                                fk_str(body, "reason"));
        err = code == 404   ? "no such pod"
              : code == 409 ? "the pod is not bound, or a Secret its containers need is missing"
                            : "bad phase";
    } else if (n == 4 && !strcmp(seg[1], "pods") && !strcmp(seg[3], "phase")) {
        /* Every pod of a namespace matching labelSelector at once, as a Job
         * controller that batches its syncs sees them. The answer is the first
         * refusal (409: a pod not bound yet, or whose Secret is not there yet, as
         * the kubelet waits for it), after every pod that could move has moved. */
        fk_sel *sel = NULL;
        char serr[256];
        if (fk_sel_parse(label_selector, &sel, serr, sizeof serr) != 0) {
            code = 400;
            err = "bad labelSelector";
        } else {
            json_t *pods = fk_list(st, FK_PODS, seg[2]);
            size_t i;
            json_t *p;
            json_array_foreach(pods, i, p)
            {
                if (!fk_sel_matches(sel, fk_path(p, "metadata.labels", 0)))
                    continue;
                int c = fk_pod_set_phase(st, seg[2], fk_str(p, "metadata.name"),
                                         fk_str(body, "phase"),
                                         (int)json_integer_value(json_object_get(body, "exitCode")),
                                         fk_str(body, "reason"));
                if (c != 200 && code == 200) {
                    code = c;
                    err = c == 409 ? "a pod is not bound, or a Secret its containers need is "
                                     "missing"
                                   : "bad phase";
                }
            }
            json_decref(pods);
        }
        fk_sel_free(sel);
    } else if (n == 5 && !strcmp(seg[1], "pods") && !strcmp(seg[4], "evict")) {
        code = fk_pod_evict(st, seg[2], seg[3]);
        err = "no such pod";
    } else if (n == 5 && !strcmp(seg[1], "pods") && !strcmp(seg[4], "log")) {
        /* POST appends lines, PUT sets the text (a longer text that begins with the log's
         * appends the rest): a follower sees what is appended. */
        char key[600];
        snprintf(key, sizeof key, "%s/%s", seg[2], seg[3]);
        fk_log_write(st, key, data ? data : "", data ? len : 0, strcmp(method, "PUT") == 0);
        pthread_cond_broadcast(&st->cv);
    } else if (n == 2 && !strcmp(seg[1], "nodegroups") && !strcmp(method, "POST")) {
        const char *gname = fk_str(body, "name");
        if (!*gname || !json_is_object(json_object_get(body, "node"))) {
            code = 400;
            err = "a node group needs a name and a node template";
        } else {
            json_t *g =
                json_pack("{s:I, s:i, s:I, s:O}", "max",
                          json_integer_value(json_object_get(body, "max")), "count", 0,
                          "delaySeconds", json_integer_value(json_object_get(body, "delaySeconds")),
                          "node", json_object_get(body, "node"));
            json_object_set_new(st->groups, gname, g);
        }
    } else if (n == 3 && !strcmp(seg[1], "nodegroups") && !strcmp(method, "DELETE")) {
        json_object_del(st->groups, seg[2]);
    } else if (n == 2 && !strcmp(seg[1], "faults") && !strcmp(method, "POST")) {
        if (st->nfaults == (int)(sizeof st->faults / sizeof st->faults[0])) {
            code = 400;
            err = "too many faults";
        } else {
            fk_fault *f = &st->faults[st->nfaults++];
            memset(f, 0, sizeof *f);
            snprintf(f->method, sizeof f->method, "%s", fk_str(body, "method"));
            snprintf(f->prefix, sizeof f->prefix, "%s", fk_str(body, "path"));
            f->remaining = (int)json_integer_value(json_object_get(body, "count"));
            f->status = (int)json_integer_value(json_object_get(body, "status"));
            f->retry_after = (int)json_integer_value(json_object_get(body, "retryAfter"));
            f->delay_ms = (int)json_integer_value(json_object_get(body, "delayMs"));
        }
    } else if (n == 2 && !strcmp(seg[1], "faults") && !strcmp(method, "DELETE")) {
        st->nfaults = 0;
    } else if (n == 3 && !strcmp(seg[1], "watches") && !strcmp(seg[2], "drop")) {
        st->drop_gen++;
        pthread_cond_broadcast(&st->cv);
    } else if (n == 2 && !strcmp(seg[1], "compact")) {
        fk_compact(st);
    } else if (n == 2 && !strcmp(seg[1], "kubelet") && !strcmp(method, "POST")) {
        st->terminating = json_is_true(json_object_get(body, "terminating"));
    } else {
        code = 404;
        err = "no such control";
    }
    if (code == 200)
        fk_reconcile(st);
    pthread_mutex_unlock(&st->mu);
    json_decref(body);
    *err_out = code == 200 ? NULL : err;
    return code;
}
