/*
 * quarantine.c - the quarantine rule (see quarantine.h).
 */
#include "scheduler/quarantine.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

quarantine_policy quarantine_default(void)
{
    return (quarantine_policy){QUARANTINE_FAILURES, QUARANTINE_MIN_JOBS,
                               QUARANTINE_WINDOW_SECONDS, QUARANTINE_RELEASE_SECONDS};
}

static int at_least_one(int v)
{
    return v < 1 ? 1 : v;
}

void quarantine_judge(const quarantine_input *in, quarantine_verdict *out)
{
    const quarantine_policy *p = in->policy;
    int need = at_least_one(p->failures), need_jobs = at_least_one(p->min_jobs);
    int64_t window_ms = (p->window_seconds > 0 ? p->window_seconds : 1) * 1000;
    int64_t from = in->now_ms - window_ms; /* exclusive */
    memset(out, 0, sizeof *out);
    out->counted_after_ms = in->released_ms > from ? in->released_ms : from;
    for (size_t i = 0; i < in->n; i++) {
        const quarantine_failure *f = &in->f[i];
        if (f->time_ms <= from || f->time_ms > in->now_ms || f->time_ms <= in->released_ms ||
            !f->job_id)
            continue;
        out->counted++;
        /* A job counts once: the first of its failures that counts. Only up to need_jobs
         * different jobs matter, so the search stays short. */
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++) {
            const quarantine_failure *g = &in->f[k];
            seen = g->job_id && g->time_ms > from && g->time_ms <= in->now_ms &&
                   g->time_ms > in->released_ms && !strcmp(g->job_id, f->job_id);
        }
        if (!seen)
            out->jobs++;
    }
    if (out->counted >= need && out->jobs >= need_jobs) {
        out->quarantine = 1;
        int64_t release_s = p->release_seconds > 0 ? p->release_seconds : 1;
        out->release_at_ms = in->now_ms + release_s * 1000;
        snprintf(out->reason, sizeof out->reason, "%d failure%s of %d job%s within %lld s",
                 out->counted, out->counted == 1 ? "" : "s", out->jobs,
                 out->jobs == 1 ? "" : "s", (long long)(window_ms / 1000));
    } else if (out->counted < need) {
        snprintf(out->reason, sizeof out->reason, "%d of %d failures within %lld s",
                 out->counted, need, (long long)(window_ms / 1000));
    } else {
        snprintf(out->reason, sizeof out->reason,
                 "%d failures, but of %d job%s (at least %d needed)", out->counted, out->jobs,
                 out->jobs == 1 ? "" : "s", need_jobs);
    }
}

static int is(const char *s, const char *v)
{
    return s && !strcmp(s, v);
}

quarantine_cause quarantine_pod_cause(const char *status_reason, const char *disruption_reason)
{
    const char *d = disruption_reason && *disruption_reason ? disruption_reason : NULL;
    if (is(d, "PreemptionByKubeScheduler") || is(d, "PreemptionByScheduler") ||
        is(status_reason, "Preempting"))
        return QUARANTINE_CAUSE_PREEMPTED;
    if (is(d, "DeletionByTaintManager") || is(d, "DeletionByPodGC") ||
        is(status_reason, "NodeLost") || is(status_reason, "Terminated") ||
        is(status_reason, "Shutdown"))
        return QUARANTINE_CAUSE_NODE_LOST;
    if (d || is(status_reason, "Evicted"))
        return QUARANTINE_CAUSE_EVICTED;
    return QUARANTINE_CAUSE_NONE;
}

/* Whether text holds the worker's "rank N (host:port) lost" naming a lost peer. */
static int names_lost_peer(const char *text)
{
    for (const char *p = strstr(text, "rank "); p; p = strstr(p + 1, "rank ")) {
        const char *q = p + 5;
        if (!isdigit((unsigned char)*q))
            continue;
        while (isdigit((unsigned char)*q))
            q++;
        if (*q != ' ' || q[1] != '(')
            continue;
        const char *close = strchr(q, ')');
        if (close && !strncmp(close, ") lost", 6))
            return 1;
    }
    return 0;
}

quarantine_charge quarantine_attribute(int exit_code, int signal, const char *detail)
{
    const char *d = detail ? detail : "";
    (void)exit_code;
    if (names_lost_peer(d))
        return (quarantine_charge){0, "lost_peer"};
    if (strstr(d, "OOMKilled") || strstr(d, "out of memory"))
        return (quarantine_charge){1, "oom_killed"};
    if (strstr(d, "NCCL") || strstr(d, "CUDA") || strstr(d, "Xid"))
        return (quarantine_charge){1, "gpu_error"};
    if (strstr(d, "the pod failed"))
        return (quarantine_charge){1, "pod_failed"};
    if (signal > 0)
        return (quarantine_charge){1, "signal"};
    return (quarantine_charge){1, "exit_code"};
}
