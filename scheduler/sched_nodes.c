/*
 * sched_nodes.c - the node ledger and quarantine as the reconcile loop applies them (see
 * sched.h): charging an attempt's application failure to the node its failed rank ran on,
 * judging the node (quarantine.c decides), writing the quarantine, releasing on time, and
 * keeping the backend's excluded set equal to the store's quarantines.
 *
 * The set of quarantined nodes is read from the store (at start, after a quarantine or a
 * release, and at the earliest release time), never kept apart from it, so that an admin's
 * release through the API and a restart both come down to one read.
 */
#include "scheduler/sched_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty_log.h"
#include "common/ty_time.h"

/* Failures of one node read to judge it; the policy takes at most 1,000 anyway. */
#define FAILURES_READ 1000

static void qnodes_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void sched_nodes_free(sched *s)
{
    qnodes_free(s->qnodes, s->nqnodes);
    s->qnodes = NULL;
    s->nqnodes = 0;
}

static int is_quarantined(const sched *s, const char *node)
{
    for (size_t i = 0; i < s->nqnodes; i++)
        if (!strcmp(s->qnodes[i], node))
            return 1;
    return 0;
}

void sched_nodes_load(sched *s, int64_t now)
{
    store_node_quarantine *q = NULL;
    size_t n = 0;
    ty_err e = store_node_quarantines(s->st, 1, &q, &n);
    if (e != TY_OK) {
        TY_LOG(TY_LOG_WARN, "scheduler: cannot read the quarantined nodes", "{s:s}", "error",
               ty_strerror(e));
        atomic_store(&s->nodes_reload, 1);
        return;
    }
    char **names = calloc(n ? n : 1, sizeof *names);
    size_t k = 0;
    int64_t next = 0;
    for (size_t i = 0; names && i < n; i++) {
        if (now >= q[i].release_at_ms) {
            e = store_node_release(s->st, q[i].node, now, "expired");
            if (e == TY_OK || e == TY_ENOTFOUND) {
                TY_LOG(TY_LOG_INFO, "scheduler: node released from quarantine", "{s:s, s:s}",
                       "node", q[i].node, "by", "expired");
                continue;
            }
            TY_LOG(TY_LOG_WARN, "scheduler: cannot release a node", "{s:s, s:s}", "node",
                   q[i].node, "error", ty_strerror(e));
            /* still quarantined: tried again at the next round's deadline */
        }
        if (!(names[k] = strdup(q[i].node)))
            break;
        k++;
        int64_t at = q[i].release_at_ms > now ? q[i].release_at_ms : now + 1000;
        if (!next || at < next)
            next = at;
    }
    store_node_quarantines_free(q, n);
    if (!names) {
        atomic_store(&s->nodes_reload, 1);
        return;
    }
    s->admit_wanted = 1; /* GPUs may have come back (loads are rare: no need to compare) */
    sched_nodes_free(s);
    s->qnodes = names;
    s->nqnodes = k;
    s->qnext_release_ms = next;
    if (s->be->ops->exclude_nodes)
        s->be->ops->exclude_nodes(s->be, (const char *const *)s->qnodes, s->nqnodes);
    pthread_mutex_lock(&s->mu);
    s->nodes_quarantined = k;
    pthread_mutex_unlock(&s->mu);
}

/* The node's last release (0 for none), from the store; 0 when it cannot be read. */
static int64_t released_at(sched *s, const char *node)
{
    store_node_quarantine *q = NULL;
    size_t n = 0;
    int64_t at = 0;
    if (store_node_quarantines(s->st, 0, &q, &n) != TY_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(q[i].node, node))
            at = q[i].released_ms;
    store_node_quarantines_free(q, n);
    return at;
}

void sched_nodes_charge(sched *s, sjob *j, int rank, const backend_event *ev, char *msg,
                        size_t msglen)
{
    const char *node = j->ranks[rank].node;
    if (!node || !*node)
        return; /* the backend does not say where it ran: nothing to charge */
    int64_t now = ty_time_now_ms();
    const quarantine_policy *p = &s->qpolicy;
    store_node_failure f = {.node = (char *)node,
                            .job_id = j->id,
                            .attempt = j->attempt,
                            .rank = rank,
                            .time_ms = ev->time_ms > 0 ? ev->time_ms : now,
                            .exit_code = ev->exit_code,
                            .signal = ev->signal,
                            .cause = msg};
    /* Kept while the policy may count it or a quarantine may show it as evidence. */
    int64_t keep_ms = (p->window_seconds + p->release_seconds) * 1000;
    ty_err e = store_node_failure_add(s->st, &f, now - keep_ms);
    if (e != TY_OK) {
        TY_LOG(TY_LOG_WARN, "scheduler: cannot write the node ledger", "{s:s, s:s, s:s}",
               "job_id", j->id, "node", node, "error", ty_strerror(e));
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->node_failures_total++;
    pthread_mutex_unlock(&s->mu);
    if (is_quarantined(s, node))
        return;

    store_node_failure *rows = NULL;
    size_t n = 0;
    if (store_node_failures(s->st, node, now - p->window_seconds * 1000, FAILURES_READ, &rows,
                            &n) != TY_OK)
        return;
    quarantine_failure *qf = calloc(n ? n : 1, sizeof *qf);
    if (!qf) {
        store_node_failures_free(rows, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        qf[i] = (quarantine_failure){rows[i].job_id, rows[i].time_ms};
    quarantine_input in = {p, qf, n, now, released_at(s, node)};
    quarantine_verdict v;
    quarantine_judge(&in, &v);
    free(qf);
    store_node_failures_free(rows, n);
    if (!v.quarantine)
        return;
    store_node_quarantine q = {.node = (char *)node,
                               .since_ms = now,
                               .release_at_ms = v.release_at_ms,
                               .reason = v.reason,
                               .counted_from_ms = v.counted_after_ms};
    if ((e = store_node_quarantine_put(s->st, &q)) != TY_OK) {
        TY_LOG(TY_LOG_WARN, "scheduler: cannot quarantine a node", "{s:s, s:s}", "node", node,
               "error", ty_strerror(e));
        return;
    }
    TY_LOG(TY_LOG_WARN, "scheduler: node quarantined", "{s:s, s:s, s:s}", "node", node,
           "reason", v.reason, "job_id", j->id);
    pthread_mutex_lock(&s->mu);
    s->quarantines_total++;
    pthread_mutex_unlock(&s->mu);
    size_t len = strlen(msg);
    snprintf(msg + len, msglen - len, "; node %s quarantined (%s)", node, v.reason);
    sched_nodes_load(s, now);
}

quarantine_policy sched_quarantine_policy(const sched *s)
{
    return s ? s->qpolicy : quarantine_default();
}

ty_err sched_node_release(sched *s, const char *node, const char *by)
{
    if (!s || !node || !*node)
        return TY_EINVAL;
    ty_err e = store_node_release(s->st, node, ty_time_now_ms(), by);
    if (e != TY_OK)
        return e;
    TY_LOG(TY_LOG_INFO, "scheduler: node released from quarantine", "{s:s, s:s}", "node", node,
           "by", by ? by : "");
    atomic_store(&s->nodes_reload, 1);
    uint64_t one = 1;
    ssize_t w = write(s->wake_fd, &one, sizeof one);
    (void)w;
    return TY_OK;
}

ty_err sched_cluster(sched *s, backend_cluster *out)
{
    memset(out, 0, sizeof *out);
    if (!s || !s->be->ops->cluster)
        return TY_OK;
    return s->be->ops->cluster(s->be, out);
}
