/*
 * cluster.c - GET /v1/cluster: the cluster as Trainyard sees it, for people; and
 * POST /v1/cluster/nodes/{name}:release, an admin's end of a node's quarantine.
 *
 * What it shows comes from two places: the backend's view of the nodes and node groups now
 * (sched_cluster(), backend.h cluster()), and the store's node ledger (the quarantined nodes and
 * the failures that put them there). Per zone and GPU type it sums the nodes (ready, cordoned,
 * quarantined, spot, on-demand) and their GPUs: allocatable, in use by Trainyard's ranks, in use
 * by every other pod, and free (allocatable minus both, on the nodes placement may use: ready,
 * not cordoned, not quarantined). Beside them: the profile's node groups with their sizes, the
 * GPU nodes the profile does not know, and the quarantined nodes with their evidence.
 *
 * Evidence names jobs; a job the caller may not see (another team's) is shown without its id,
 * as the rest of the API shows it: not at all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "api/api_int.h"
#include "common/ty_time.h"
#include "scheduler/quarantine.h"

#define EVIDENCE_MAX 50 /* failures shown per quarantined node */

static json_t *time_json(int64_t ms)
{
    char buf[40];
    return ms > 0 ? json_string(ty_time_format_rfc3339(ms, buf, sizeof buf)) : json_null();
}

static json_t *str_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

/* The summary row of (zone, GPU type), created on first use (borrowed from rows). */
static json_t *row_of(json_t *rows, const backend_node *n)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        const char *z = json_string_value(json_object_get(r, "zone"));
        const char *g = json_string_value(json_object_get(r, "gpu_type"));
        if (!strcmp(z ? z : "", n->zone) && !strcmp(g ? g : "", n->gpu_type))
            return r;
    }
    r = json_pack("{s:o, s:o, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}}",
                  "zone", str_or_null(n->zone), "gpu_type", str_or_null(n->gpu_type), "nodes",
                  "total", 0, "ready", 0, "cordoned", 0, "quarantined", 0, "spot", 0,
                  "on_demand", 0, "gpus", "allocatable", 0, "trainyard", 0, "others", 0, "free",
                  0);
    if (!r || json_array_append_new(rows, r))
        return NULL;
    return r;
}

static void add(json_t *obj, const char *key, json_int_t v)
{
    json_t *x = json_object_get(obj, key);
    json_integer_set(x, json_integer_value(x) + v);
}

static int add_node(json_t *rows, const backend_node *n)
{
    json_t *r = row_of(rows, n);
    if (!r)
        return -1;
    json_t *nodes = json_object_get(r, "nodes"), *gpus = json_object_get(r, "gpus");
    add(nodes, "total", 1);
    add(nodes, "ready", n->ready);
    add(nodes, "cordoned", n->cordoned);
    add(nodes, "quarantined", n->quarantined);
    add(nodes, "spot", !strcmp(n->capacity, "spot"));
    add(nodes, "on_demand", !strcmp(n->capacity, "on-demand"));
    add(gpus, "allocatable", n->gpus_allocatable);
    add(gpus, "trainyard", n->gpus_trainyard);
    add(gpus, "others", n->gpus_others);
    int free_gpus = 0;
    if (n->ready && !n->cordoned && !n->quarantined) {
        free_gpus = n->gpus_allocatable - n->gpus_trainyard - n->gpus_others - n->gpus_quarantined;
        if (free_gpus < 0)
            free_gpus = 0;
    }
    add(gpus, "free", free_gpus);
    return 0;
}

/* Why node n is unknown, in words, naming the profile's groups it may have been meant as. */
static json_t *unknown_entry(const backend_cluster *c, const backend_node *n)
{
    char msg[768];
    size_t len = 0;
    json_t *reasons = json_array();
    if (n->unknown_group) {
        json_array_append_new(reasons, json_string("node_group"));
        len += (size_t)snprintf(msg + len, sizeof msg - len,
                                "node group %s is not in the cluster profile", n->group);
        int listed = 0, empty = 0;
        for (size_t g = 0; g < c->ngroups && len < sizeof msg; g++) {
            const backend_group *bg = &c->groups[g];
            if (strcmp(bg->zone, n->zone) || strcmp(bg->gpu_type, n->gpu_type) ||
                (n->capacity[0] && strcmp(bg->capacity, n->capacity)))
                continue;
            len += (size_t)snprintf(msg + len, sizeof msg - len,
                                    "%s %s (%d of %d nodes)", listed ? "," : "; the profile has",
                                    bg->name, bg->size, bg->max_size);
            listed = 1;
            empty |= bg->nmismatch > 0;
        }
        if (listed && len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s",
                                    empty ? " for these nodes; placement counts these nodes and "
                                            "does not grow a group of the profile that no node "
                                            "carries the name of"
                                          : " for these nodes; placement counts these nodes and "
                                            "grows that group to its maximum beside them");
    }
    if (n->unknown_gpu && len < sizeof msg) {
        json_array_append_new(reasons, json_string("gpu_product"));
        len += (size_t)snprintf(msg + len, sizeof msg - len,
                                "%sGPU product %s matches no GPU type of the cluster profile",
                                len ? "; " : "", n->gpu_product[0] ? n->gpu_product : "(unnamed)");
    }
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:i, s:o, s:s}", "name", n->name, "zone",
                     str_or_null(n->zone), "node_group", str_or_null(n->group), "gpu_product",
                     str_or_null(n->gpu_product), "capacity", str_or_null(n->capacity),
                     "gpus_allocatable", n->gpus_allocatable, "reasons", reasons, "message",
                     msg);
}

/* null, or what says that the cluster names group bg otherwise: the names its nodes carry. */
static json_t *mismatch_of(const backend_group *bg)
{
    if (bg->nmismatch <= 0)
        return json_null();
    json_t *names = json_array();
    char msg[640];
    size_t len = (size_t)snprintf(msg, sizeof msg,
                                  "no node carries this group's name, while nodes of %s with its "
                                  "GPU type and capacity type are in node group",
                                  bg->zone);
    for (int i = 0; i < bg->nmismatch && i < BACKEND_GROUP_MISMATCH; i++) {
        json_array_append_new(names, json_string(bg->mismatch[i]));
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s",
                                    i == 0 ? (bg->nmismatch > 1 ? "s" : "") : ",",
                                    bg->mismatch[i]);
    }
    if (len < sizeof msg)
        snprintf(msg + len, sizeof msg - len,
                 ", which the cluster profile does not name: placement counts those nodes and "
                 "does not count this group as able to grow (is the profile's name the "
                 "cluster's?)");
    return json_pack("{s:o, s:s}", "node_groups", names, "message", msg);
}

/* The evidence of quarantine q: the failures charged to its node within the window before
 * it began. */
static json_t *evidence_of(const api_req *req, const store_node_quarantine *q, int64_t window_ms)
{
    store_node_failure *f = NULL;
    size_t n = 0;
    json_t *out = json_array();
    /* The failures the quarantine counted: after its window's start and the node's release
     * before it (counted_from_ms; 0 in rows older than that column: the window). */
    int64_t after = q->counted_from_ms > 0 ? q->counted_from_ms : q->since_ms - window_ms - 1;
    if (!out ||
        store_node_failures(req->ctx->store, q->node, after + 1, EVIDENCE_MAX * 4, &f, &n) != TY_OK)
        return out;
    const char *team = api_team_filter(req);
    for (size_t i = 0; i < n && json_array_size(out) < EVIDENCE_MAX; i++) {
        if (f[i].time_ms > q->since_ms)
            break; /* after the quarantine began: not why it began */
        int visible = !team || store_job_visible(req->ctx->store, f[i].job_id, team) == TY_OK;
        /* What kind of failure it was, read from the facts as when it was charged. */
        quarantine_charge why = quarantine_attribute(f[i].exit_code, f[i].signal, f[i].cause);
        json_array_append_new(
            out, json_pack("{s:o, s:i, s:i, s:o, s:o, s:o, s:s, s:s}", "job_id",
                           visible ? json_string(f[i].job_id) : json_null(), "attempt",
                           f[i].attempt, "rank", f[i].rank, "time", time_json(f[i].time_ms),
                           "exit_code", f[i].exit_code >= 0 ? json_integer(f[i].exit_code)
                                                            : json_null(),
                           "signal", f[i].signal > 0 ? json_integer(f[i].signal) : json_null(),
                           "reason", why.reason, "cause",
                           visible ? f[i].cause : "a job of another team"));
    }
    store_node_failures_free(f, n);
    return out;
}

void api_cluster_get(const api_req *req, api_resp *resp)
{
    if (req->nquery) {
        api_reply_problem(resp, 400, "invalid-query", NULL, "this resource takes no query", NULL);
        return;
    }
    if (!req->ctx->sched) {
        api_reply_problem(resp, 503, "unavailable", NULL, "no backend runs jobs here", NULL);
        return;
    }
    backend_cluster c;
    store_node_quarantine *q = NULL;
    size_t nq = 0;
    ty_err e = sched_cluster(req->ctx->sched, &c);
    if (e == TY_OK)
        e = store_node_quarantines(req->ctx->store, 1, &q, &nq);
    if (e != TY_OK) {
        backend_cluster_clear(&c);
        api_reply_error(resp, e, NULL);
        return;
    }
    quarantine_policy p = sched_quarantine_policy(req->ctx->sched);
    json_t *rows = json_array(), *groups = json_array(), *unknown = json_array();
    json_t *quarantined = json_array();
    int bad = !rows || !groups || !unknown || !quarantined;
    for (size_t i = 0; i < c.nnodes && !bad; i++) {
        bad |= add_node(rows, &c.nodes[i]) != 0;
        if (c.nodes[i].unknown_group || c.nodes[i].unknown_gpu)
            bad |= json_array_append_new(unknown, unknown_entry(&c, &c.nodes[i])) != 0;
    }
    for (size_t g = 0; g < c.ngroups && !bad; g++) {
        const backend_group *bg = &c.groups[g];
        bad |= json_array_append_new(
                   groups, json_pack("{s:s, s:o, s:o, s:o, s:i, s:i, s:i, s:o}", "name", bg->name,
                                     "zone", str_or_null(bg->zone), "gpu_type",
                                     str_or_null(bg->gpu_type), "capacity",
                                     str_or_null(bg->capacity), "gpus_per_node",
                                     bg->gpus_per_node, "size", bg->size, "max_size",
                                     bg->max_size, "mismatch", mismatch_of(bg))) != 0;
    }
    for (size_t i = 0; i < nq && !bad; i++)
        bad |= json_array_append_new(
                   quarantined,
                   json_pack("{s:s, s:o, s:o, s:s, s:o}", "name", q[i].node, "since",
                             time_json(q[i].since_ms), "release_at",
                             time_json(q[i].release_at_ms), "reason", q[i].reason, "evidence",
                             evidence_of(req, &q[i], p.window_seconds * 1000))) != 0;
    backend_cluster_clear(&c);
    store_node_quarantines_free(q, nq);
    json_t *body = bad ? NULL
                       : json_pack("{s:o, s:o, s:o, s:o, s:{s:i, s:i, s:I, s:I}}", "zones", rows,
                                   "node_groups", groups, "unknown_nodes", unknown,
                                   "quarantined_nodes", quarantined, "quarantine", "failures",
                                   p.failures, "min_jobs", p.min_jobs, "window_seconds",
                                   (json_int_t)p.window_seconds, "release_seconds",
                                   (json_int_t)p.release_seconds);
    if (!body) {
        if (bad) {
            json_decref(rows);
            json_decref(groups);
            json_decref(unknown);
            json_decref(quarantined);
        }
        api_reply_error(resp, TY_ENOMEM, NULL);
        return;
    }
    api_reply_json(resp, 200, body);
}

void api_cluster_release(const api_req *req, api_resp *resp)
{
    const char *node = req->id;
    if (!node || !*node || strlen(node) >= BACKEND_NAME_MAX) {
        api_reply_problem(resp, 404, "node-not-quarantined", NULL, "no node has this name",
                          NULL);
        return;
    }
    if (!req->ctx->sched) {
        api_reply_problem(resp, 503, "unavailable", NULL, "no backend runs jobs here", NULL);
        return;
    }
    const char *by = req->principal && req->principal->name ? req->principal->name : "admin";
    ty_err e = sched_node_release(req->ctx->sched, node, by);
    if (e == TY_ENOTFOUND) {
        api_reply_problem(resp, 404, "node-not-quarantined", NULL, "this node is not quarantined",
                          NULL);
        return;
    }
    if (e != TY_OK) {
        api_reply_error(resp, e, NULL);
        return;
    }
    char buf[40];
    api_reply_json(resp, 200,
                   json_pack("{s:s, s:s, s:s}", "name", node, "released_by", by, "released_at",
                             ty_time_format_rfc3339(ty_time_now_ms(), buf, sizeof buf)));
}
