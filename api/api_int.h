/*
 * api_int.h - internals shared by the files of api/: the handlers the route
 * table points at, and the request/response helpers every handler uses.
 *
 * Helpers named api_need_* check one aspect of a request; when the check
 * fails they fill resp with the problem response and return false, so a
 * handler only writes `if (!api_need_...(req, resp)) goto out;`.
 */
#ifndef TY_API_INT_H
#define TY_API_INT_H

#include <stdbool.h>

#include "api/api.h"
#include "api/spec.h"

/* ---- handlers (one signature, see api_handler) ---------------------------- */

void api_ops_healthz(const api_req *req, api_resp *resp);
void api_ops_readyz(const api_req *req, api_resp *resp);
void api_ops_metrics(const api_req *req, api_resp *resp);
void api_ops_openapi(const api_req *req, api_resp *resp);
/* The web page and its files (ui.c): "/" and each file under "/ui/" in the table. */
void api_ui_get(const api_req *req, api_resp *resp);

void api_jobs_create(const api_req *req, api_resp *resp);
void api_jobs_batch(const api_req *req, api_resp *resp);
void api_jobs_list(const api_req *req, api_resp *resp);
void api_jobs_get(const api_req *req, api_resp *resp);
void api_jobs_events(const api_req *req, api_resp *resp);
void api_jobs_attempts(const api_req *req, api_resp *resp);
void api_jobs_cancel(const api_req *req, api_resp *resp);
void api_jobs_logs(const api_req *req, api_resp *resp);

/* Sweeps (sweeps.c): a template over a search space, each trial a job. */
void api_sweeps_create(const api_req *req, api_resp *resp);
void api_sweeps_list(const api_req *req, api_resp *resp);
void api_sweeps_get(const api_req *req, api_resp *resp);
void api_sweeps_cancel(const api_req *req, api_resp *resp);

void api_metrics_report(const api_req *req, api_resp *resp);
void api_metrics_read(const api_req *req, api_resp *resp);

void api_tokens_list(const api_req *req, api_resp *resp);
void api_tokens_create(const api_req *req, api_resp *resp);
void api_tokens_revoke(const api_req *req, api_resp *resp);
/* GET /v1/whoami: the calling token's name, scopes and team (what a client may offer). */
void api_tokens_whoami(const api_req *req, api_resp *resp);

/* CI webhooks (webhooks.c): registration (admin) and deliveries (open, signed). */
void api_webhooks_create(const api_req *req, api_resp *resp);
void api_webhooks_list(const api_req *req, api_resp *resp);
void api_webhooks_delete(const api_req *req, api_resp *resp);
void api_webhooks_deliver(const api_req *req, api_resp *resp);

/* Teams (teams.c): admins manage them; a token reads its own. */
void api_teams_create(const api_req *req, api_resp *resp);
void api_teams_list(const api_req *req, api_resp *resp);
/* GET /v1/queue (queue.c): the PENDING jobs in admission order, with where they stand. */
void api_queue_list(const api_req *req, api_resp *resp);
/*
 * Where each of n jobs (as read from the store) stands, for the Job resource (queue.c):
 * out[i] is its pending_reason as JSON text (new), or NULL for null. A job that is not PENDING
 * has none; the head of its line has the scheduler's stored one; a job behind its line's head
 * gets reason Queued, derived from the head's (api_queued_reason()), read at this moment with
 * store_jobs_line_places(). On error every out[i] is NULL.
 */
ty_err api_pending_reasons(store *st, const store_job *jobs, size_t n, char **out);
void api_teams_get(const api_req *req, api_resp *resp);
void api_teams_update(const api_req *req, api_resp *resp);
void api_teams_delete(const api_req *req, api_resp *resp);

/* The cluster as placement sees it, and the release of a quarantined node (cluster.c). */
void api_cluster_get(const api_req *req, api_resp *resp);
void api_cluster_release(const api_req *req, api_resp *resp);

/* Notifications out (notifications.c): subscriptions and their deliveries (admin). */
void api_notifications_create(const api_req *req, api_resp *resp);
void api_notifications_list(const api_req *req, api_resp *resp);
void api_notifications_delete(const api_req *req, api_resp *resp);
void api_notifications_deliveries(const api_req *req, api_resp *resp);

/* The counters of refused webhook deliveries (webhooks.c), for /metrics: the family's header
 * always, its samples when g is not NULL. */
ty_err api_webhooks_render_metrics(const api_hook_guard *g, ty_buf *out);

/* ---- responses (resp.c) --------------------------------------------------- */

#define API_CT_JSON "application/json"
#define API_CT_PROBLEM "application/problem+json"

/*
 * A new problem object (see api.h for its members); detail is copied and may
 * be NULL, errors is stolen and may be NULL. Returns NULL when out of memory.
 */
json_t *api_problem_new(unsigned status, const char *code, const char *title, const char *detail,
                        json_t *errors);
/* Sends a problem built by api_problem_new() (stolen; NULL sends a bare 503). */
void api_reply_problem_json(api_resp *r, json_t *problem);
/* The problem response for an error returned by store/ or common/; detail may be NULL. */
void api_reply_error(api_resp *r, ty_err e, const char *detail);
/* Sends the JSON text in b (stolen: b is reset) with the given status. */
void api_reply_json_buf(api_resp *r, unsigned status, ty_buf *b);
/*
 * A body produced while it is sent (see api_stream): s is stolen, and freed
 * with s.free(s.ud) by whoever ends up owning the response. content_type is
 * static. Any body set before is dropped.
 */
void api_reply_stream(api_resp *r, unsigned status, const char *content_type, api_stream s);

/* ---- jobs (jobs.c) -------------------------------------------------------- */

/* Ids are STORE_ID_LEN characters of [0-9a-z]; anything else cannot name a job. */
int api_is_job_id(const char *id);
/* The 404 "job-not-found" of every /v1/jobs/{id} route. */
void api_reply_job_not_found(api_resp *resp);
/*
 * The problem listing every error of errs (its list is stolen), e.g. 400
 * "invalid-query" or 422 "invalid-spec"; the detail counts them.
 */
void api_reply_invalid(api_resp *resp, unsigned status, const char *code, spec_errors *errs);

/*
 * The secret env values of n normalized specs, moved out of them before they are stored
 * (spec_secrets_take(): each spec, changed in place, keeps {"value": null, "secret": true}):
 * jobs[i].secrets and .nsecrets point into *held, which must outlive the submission and is
 * released by api_secrets_free(). TY_ENOMEM (then free it all the same).
 */
typedef struct api_secrets {
    json_t **taken;          /* nspecs objects {NAME: value} or NULL; NULL when none */
    size_t nspecs;
    store_env_secret *v;     /* every spec's values, borrowed from taken */
    size_t n;
} api_secrets;
ty_err api_secrets_take(json_t *const *specs, size_t n, store_job_new *jobs, api_secrets *held);
void api_secrets_free(api_secrets *held);

/* ---- job filters (jobs.c): GET /v1/jobs's state, queue and label, also GET /v1/events's ---- */

#define API_MAX_LABEL_FILTERS SPEC_MAX_LABELS

/* Zero-initialize; free with api_job_filter_free(). */
typedef struct api_job_filter {
    store_job_filter f;          /* state_mask, queue (borrowed from the request) and labels */
    store_label labels[API_MAX_LABEL_FILTERS];
    char *label_text[API_MAX_LABEL_FILTERS]; /* owned copies "key\0value" the labels point in */
    int seen_queue;
} api_job_filter;

/*
 * When k is "state", "queue" or "label": parses v (borrowed; must outlive q) into q, appends
 * any error to errs ("query.state", ...) and returns 1. Returns 0 for any other parameter.
 */
int api_job_filter_param(api_job_filter *q, const char *k, const char *v, spec_errors *errs);
void api_job_filter_free(api_job_filter *q);

/* ---- ownership (teams.c) ----------------------------------------------------- */

/*
 * The team whose jobs and sweeps the caller may see: NULL for an admin token (every team) and
 * on open routes; an API token's own team (STORE_TEAM_DEFAULT when the principal names none);
 * "" (no team's) for a job token. Pass it to the
 * store, which applies it in SQL.
 */
const char *api_team_filter(const api_req *req);
/* The caller's team, for what it creates; STORE_TEAM_DEFAULT when it has none. */
const char *api_principal_team(const api_req *req);
/*
 * Job `id` exists and the caller may see it (store_job_visible()), else 404 "job-not-found",
 * the same answer whether the job is another team's or does not exist at all.
 */
bool api_need_job_visible(const api_req *req, api_resp *resp, const char *id);
/*
 * The team a submission's jobs (or sweep) belong to: body's "team" (a string member of the
 * object body, may be absent) when given, else the caller's. Only an admin token may name a
 * team other than its own; the team must exist; else 422 "invalid-spec" at $.team. *team is
 * borrowed from body or from the principal. The caller removes "team" from body before the
 * spec is validated.
 */
bool api_need_submit_team(const api_req *req, api_resp *resp, json_t *body, const char **team);

/* ---- event streams (events.c) ---------------------------------------------- */

/* GET /v1/events?follow=true: every job's events as Server-Sent Events. */
void api_events_follow(const api_req *req, api_resp *resp);
/* Whether GET /v1/jobs/{id}/events asks for the stream (any follow parameter but "false"). */
bool api_events_follow_asked(const api_req *req);
/* GET /v1/jobs/{id}/events?follow=true: the job's events and metric points as a stream. */
void api_jobs_events_follow(const api_req *req, api_resp *resp);

/* ---- the places of the followed streams (streams.c, api/streams.h) ------------------------ */

struct api_stream_place;
/*
 * Takes a place for a followed stream of the caller in ctx->streams (no-op when it is NULL);
 * call it after the request's other checks, before the stream's state is allocated, and give
 * the place back with api_stream_place_release() (the stream's free() does). Past the caller's
 * or the server's cap: 429 "too-many-streams" with Retry-After; out of memory: 503.
 */
bool api_need_stream_place(const api_req *req, api_resp *resp, struct api_stream_place *place);

/* ---- requests (request.c) ------------------------------------------------- */

/* Content-Type is application/json (parameters allowed), else 415. */
bool api_need_json_content(const api_req *req, api_resp *resp);
/* The body is not over ctx->max_body, else 413. */
bool api_need_body_size(const api_req *req, api_resp *resp);
/*
 * Both checks above, then decodes the body strictly (spec_decode()); on
 * success *out is new. Malformed JSON is a 400 "malformed-json".
 */
bool api_need_json_body(const api_req *req, api_resp *resp, json_t **out);
/*
 * The Idempotency-Key header, when present, is 1..255 printable ASCII
 * characters, else 400 "invalid-idempotency-key". *key is borrowed from req
 * (NULL when the header is absent).
 */
bool api_need_idempotency_key(const api_req *req, api_resp *resp, const char **key);
/* The caller's name for messages and scoping, never NULL ("" on open routes). */
const char *api_principal_name(const api_req *req);

#endif
