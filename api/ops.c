/*
 * ops.c - the open operational routes: liveness, readiness, Prometheus
 * metrics and the OpenAPI document.
 */
#include "api/api_int.h"

#include <stdlib.h>
#include <string.h>

#include "api/openapi_doc.h"
#include "api/streams.h"

void api_ops_healthz(const api_req *req, api_resp *resp)
{
    (void)req;
    api_reply_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

void api_ops_readyz(const api_req *req, api_resp *resp)
{
    ty_err e = req->ctx->store ? store_ping(req->ctx->store) : TY_ESHUTDOWN;
    if (e) {
        api_reply_problem(resp, 503, "not-ready", NULL, "the database is not writable", NULL);
        api_resp_header(resp, "Retry-After", "1");
        return;
    }
    api_reply_json(resp, 200, json_pack("{s:s}", "status", "ready"));
}

/* One family with a single unlabelled sample, or none when has_value is 0. */
static ty_err render_single(ty_buf *out, const char *name, const char *type, const char *help,
                            int has_value, unsigned long long value)
{
    ty_err e = ty_metrics_render_header(out, name, type, help);
    if (!e && has_value)
        e = ty_buf_printf(out, "%s %llu\n", name, value);
    return e;
}

/* The scheduler's families; without a scheduler (or a known capacity) they have no samples. */
static ty_err render_sched(const api_ctx *ctx, ty_buf *out)
{
    sched_stats ss = {0};
    int on = ctx->sched != NULL;
    if (on)
        sched_get_stats(ctx->sched, &ss);
    ty_err e = render_single(out, "trainyard_local_slots", "gauge",
                             "Ranks the local backend may run at once.", on && ss.slots_total >= 0,
                             (unsigned long long)ss.slots_total);
    if (!e)
        e = render_single(out, "trainyard_local_slots_used", "gauge",
                          "Slots reserved by the gangs of admitted jobs.", on && ss.slots_used >= 0,
                          (unsigned long long)ss.slots_used);
    if (!e)
        e = render_single(out, "trainyard_scheduler_active_jobs", "gauge",
                          "Jobs the scheduler holds, from ADMITTED to CANCELLING.", on,
                          (unsigned long long)ss.active_jobs);
    if (!e)
        e = render_single(out, "trainyard_running_ranks", "gauge", "Ranks running now.", on,
                          (unsigned long long)ss.running_ranks);
    if (!e)
        e = render_single(out, "trainyard_scheduler_rounds_total", "counter",
                          "Reconcile rounds the scheduler ran.", on,
                          (unsigned long long)ss.rounds_total);
    if (!e)
        e = render_single(out, "trainyard_attempts_launched_total", "counter",
                          "Attempts launched, restarts included.", on,
                          (unsigned long long)ss.launches_total);
    if (!e)
        e = render_single(out, "trainyard_attempt_restarts_total", "counter",
                          "Attempts restarted after a failure or a disruption.", on,
                          (unsigned long long)ss.restarts_total);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_preemptions_total", "counter",
                                     "Attempts ended Preempted, by why: reclaim (a team took "
                                     "its quota back from a borrower) or priority (within a team).");
    if (!e && on)
        e = ty_buf_printf(out,
                          "trainyard_preemptions_total{reason=\"reclaim\"} %llu\n"
                          "trainyard_preemptions_total{reason=\"priority\"} %llu\n",
                          (unsigned long long)ss.preemptions_reclaim,
                          (unsigned long long)ss.preemptions_priority);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_admission_wait_seconds", "summary",
                                     "How long admitted jobs waited, from submission to "
                                     "admission.");
    if (!e && on)
        e = ty_buf_printf(out,
                          "trainyard_admission_wait_seconds_sum %.3f\n"
                          "trainyard_admission_wait_seconds_count %llu\n",
                          ss.admission_wait_seconds, (unsigned long long)ss.admissions_total);
    if (!e)
        e = render_single(out, "trainyard_nodes_quarantined", "gauge",
                          "Nodes out of rotation now: they kept ending attempts of several jobs.",
                          on, (unsigned long long)ss.nodes_quarantined);
    if (!e)
        e = render_single(out, "trainyard_node_quarantines_total", "counter",
                          "Nodes this process took out of rotation.", on,
                          (unsigned long long)ss.quarantines_total);
    if (!e)
        e = render_single(out, "trainyard_node_failures_total", "counter",
                          "Attempts' application failures charged to the node their failed rank "
                          "ran on.",
                          on, (unsigned long long)ss.node_failures_total);
    return e;
}

/* The quota of resource `res` in team t; 0 for one its quota does not name. */
static int64_t team_quota(const store_team *t, const char *res)
{
    for (size_t k = 0; k < t->nres; k++)
        if (strcmp(t->res[k].resource, res) == 0 && t->res[k].quota >= 0)
            return t->res[k].quota;
    return 0;
}

/* Per team and resource: the quota (teams with one), what its admitted jobs use, what it
 * borrows (use beyond its quota; a quota names 0 of what it does not name); pending jobs per
 * team. From the store, like GET /v1/teams; each family's samples follow its header. */
static ty_err render_teams(const api_ctx *ctx, ty_buf *out)
{
    store_team *teams = NULL;
    store_team_usage *use = NULL;
    size_t n = 0;
    int known = ctx->store && store_teams_list(ctx->store, &teams, &n) == TY_OK &&
                (n == 0 || (use = calloc(n, sizeof *use)) != NULL);
    for (size_t t = 0; known && t < n; t++)
        if (store_team_usage_get(ctx->store, teams[t].name, &use[t]) != TY_OK)
            known = 0;
    ty_err e = ty_metrics_render_header(out, "trainyard_team_quota", "gauge",
                                        "A team's nominal quota per resource (GPUs by type, "
                                        "cpu in millicores, memory in bytes).");
    for (size_t t = 0; known && t < n && !e; t++)
        for (size_t i = 0; i < teams[t].nres && !e && teams[t].has_quota; i++)
            if (teams[t].res[i].quota >= 0)
                e = ty_buf_printf(out,
                                  "trainyard_team_quota{team=\"%s\",resource=\"%s\"} %lld\n",
                                  teams[t].name, teams[t].res[i].resource,
                                  (long long)teams[t].res[i].quota);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_team_usage", "gauge",
                                     "What a team's admitted jobs request, per resource.");
    for (size_t t = 0; known && t < n && !e; t++)
        for (size_t i = 0; i < use[t].nuse && !e; i++)
            e = ty_buf_printf(out, "trainyard_team_usage{team=\"%s\",resource=\"%s\"} %lld\n",
                              teams[t].name, use[t].use[i].resource,
                              (long long)use[t].use[i].amount);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_team_borrowed", "gauge",
                                     "What a team uses beyond its nominal quota, per resource.");
    for (size_t t = 0; known && t < n && !e; t++)
        for (size_t i = 0; i < use[t].nuse && !e && teams[t].has_quota; i++) {
            int64_t used = use[t].use[i].amount,
                    quota = team_quota(&teams[t], use[t].use[i].resource);
            e = ty_buf_printf(out,
                              "trainyard_team_borrowed{team=\"%s\",resource=\"%s\"} %lld\n",
                              teams[t].name, use[t].use[i].resource,
                              (long long)(used > quota ? used - quota : 0));
        }
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_team_pending_jobs", "gauge",
                                     "A team's PENDING jobs.");
    for (size_t t = 0; known && t < n && !e; t++)
        e = ty_buf_printf(out, "trainyard_team_pending_jobs{team=\"%s\"} %lld\n",
                          teams[t].name, (long long)use[t].pending);
    for (size_t t = 0; use && t < n; t++)
        store_team_usage_clear(&use[t]);
    free(use);
    store_teams_free(teams, n);
    return e;
}

/* The followed streams' families (api/streams.h); without the accounting they have no samples. */
static ty_err render_streams(const api_ctx *ctx, ty_buf *out)
{
    api_streams_stats ss;
    int on = ctx->streams != NULL;
    api_streams_get_stats(ctx->streams, &ss);
    ty_err e = render_single(out, "trainyard_streams_open", "gauge",
                             "Followed streams open now (events and logs with follow=true).", on,
                             ss.open);
    if (!e)
        e = render_single(out, "trainyard_streams_limit", "gauge",
                          "Followed streams the server holds at most at once.", on, ss.total);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_streams_refused_total", "counter",
                                     "Followed streams refused (429), by the cap that refused "
                                     "them: per_token or total.");
    if (!e && on)
        e = ty_buf_printf(out,
                          "trainyard_streams_refused_total{reason=\"per_token\"} %llu\n"
                          "trainyard_streams_refused_total{reason=\"total\"} %llu\n",
                          (unsigned long long)ss.refused[API_STREAMS_PER_TOKEN],
                          (unsigned long long)ss.refused[API_STREAMS_TOTAL]);
    return e;
}

/* Renders every family of the contract; families whose source is absent have no samples. */
static ty_err render_metrics(const api_ctx *ctx, ty_buf *out)
{
    store_stats st = {0};
    if (ctx->store)
        store_get_stats(ctx->store, &st);

    ty_err e = ty_metrics_render_header(out, "trainyard_http_requests_total", "counter",
                                        "HTTP requests by route template and status code.");
    if (!e && ctx->http_requests)
        e = ty_metrics_render_counter_vec(out, "trainyard_http_requests_total", "route", "code",
                                          ctx->http_requests);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_http_request_duration_seconds", "histogram",
                                     "Time from the request's arrival to its response.");
    if (!e && ctx->http_duration)
        e = ty_metrics_render_histogram(out, "trainyard_http_request_duration_seconds", NULL,
                                        ctx->http_duration);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_jobs", "gauge", "Jobs by state.");
    for (int s = 0; s < JOB_STATE_COUNT && !e; s++)
        e = ty_buf_printf(out, "trainyard_jobs{state=\"%s\"} %llu\n", job_state_name((job_state)s),
                          (unsigned long long)st.jobs_by_state[s]);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_jobs_submitted_total", "counter",
                                     "Jobs stored since this process started.");
    if (!e)
        e = ty_buf_printf(out, "trainyard_jobs_submitted_total %llu\n",
                          (unsigned long long)st.jobs_submitted_total);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_store_commit_duration_seconds", "histogram",
                                     "Duration of one group commit, fsync included.");
    if (!e && st.commit_seconds)
        e = ty_metrics_render_histogram(out, "trainyard_store_commit_duration_seconds", NULL,
                                        st.commit_seconds);
    if (!e)
        e = ty_metrics_render_header(out, "trainyard_store_commit_batch_size", "histogram",
                                     "Operations folded into one group commit.");
    if (!e && st.commit_batch_ops)
        e = ty_metrics_render_histogram(out, "trainyard_store_commit_batch_size", NULL,
                                        st.commit_batch_ops);
    if (!e)
        e = render_sched(ctx, out);
    if (!e)
        e = render_teams(ctx, out);
    if (!e)
        e = render_streams(ctx, out);
    if (!e)
        e = api_webhooks_render_metrics(ctx->hook_guard, out);
    if (!e && ctx->backend_metrics)
        e = ctx->backend_metrics(ctx->backend_metrics_ud, out);
    return e;
}

void api_ops_metrics(const api_req *req, api_resp *resp)
{
    ty_buf out = {0};
    ty_err e = render_metrics(req->ctx, &out);
    if (e) {
        api_reply_error(resp, e, NULL);
    } else {
        free(resp->body);
        resp->status = 200;
        resp->content_type = "text/plain; version=0.0.4";
        resp->body = NULL;
        e = ty_buf_steal(&out, &resp->body, &resp->body_len);
        if (e)
            api_reply_error(resp, e, NULL);
    }
    ty_buf_free(&out);
}

void api_ops_openapi(const api_req *req, api_resp *resp)
{
    (void)req;
    api_reply_text(resp, 200, "application/yaml", api_openapi_yaml, api_openapi_yaml_len);
}
