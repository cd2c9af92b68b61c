/*
 * ops.c - the open operational routes: liveness, readiness, Prometheus
 * metrics and the OpenAPI document.
 */
#include "api/api_int.h"

#include <stdlib.h>

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
