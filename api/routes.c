/*
 * routes.c - the route table: the one place that says which handler answers
 * which method and path, and with which scope. openapi/openapi.yaml lists
 * exactly these operations (a test compares the two).
 */
#include "api/api.h"
#include "api/api_int.h"

const api_route api_routes[] = {
    {"GET", "/healthz", api_ops_healthz, 0},
    {"GET", "/readyz", api_ops_readyz, 0},
    {"GET", "/metrics", api_ops_metrics, 0},
    {"GET", "/openapi.yaml", api_ops_openapi, 0},
    {"GET", "/", api_ui_get, 0},
    {"GET", "/ui/app.js", api_ui_get, 0},
    {"GET", "/ui/style.css", api_ui_get, 0},
    {"GET", "/ui/chart.js", api_ui_get, 0},
    {"POST", "/v1/jobs", api_jobs_create, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/jobs", api_jobs_list, STORE_SCOPE_READ},
    {"POST", "/v1/jobs:batch", api_jobs_batch, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/jobs/{id}", api_jobs_get, STORE_SCOPE_READ},
    {"GET", "/v1/jobs/{id}/events", api_jobs_events, STORE_SCOPE_READ},
    {"GET", "/v1/events", api_events_follow, STORE_SCOPE_READ},
    {"GET", "/v1/jobs/{id}/attempts", api_jobs_attempts, STORE_SCOPE_READ},
    {"GET", "/v1/jobs/{id}/logs", api_jobs_logs, STORE_SCOPE_READ},
    {"POST", "/v1/jobs/{id}/metrics", api_metrics_report, STORE_SCOPE_REPORT},
    {"GET", "/v1/jobs/{id}/metrics", api_metrics_read, STORE_SCOPE_READ},
    {"POST", "/v1/jobs/{id}:cancel", api_jobs_cancel, STORE_SCOPE_SUBMIT},
    {"POST", "/v1/sweeps", api_sweeps_create, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/sweeps", api_sweeps_list, STORE_SCOPE_READ},
    {"GET", "/v1/sweeps/{id}", api_sweeps_get, STORE_SCOPE_READ},
    {"POST", "/v1/sweeps/{id}:cancel", api_sweeps_cancel, STORE_SCOPE_SUBMIT},
    {"GET", "/v1/queue", api_queue_list, STORE_SCOPE_READ},
    {"GET", "/v1/cluster", api_cluster_get, STORE_SCOPE_READ},
    {"POST", "/v1/cluster/nodes/{id}:release", api_cluster_release, STORE_SCOPE_ADMIN},
    {"GET", "/v1/teams", api_teams_list, STORE_SCOPE_READ},
    {"POST", "/v1/teams", api_teams_create, STORE_SCOPE_ADMIN},
    {"GET", "/v1/teams/{id}", api_teams_get, STORE_SCOPE_READ},
    {"PUT", "/v1/teams/{id}", api_teams_update, STORE_SCOPE_ADMIN},
    {"DELETE", "/v1/teams/{id}", api_teams_delete, STORE_SCOPE_ADMIN},
    {"GET", "/v1/tokens", api_tokens_list, STORE_SCOPE_ADMIN},
    {"POST", "/v1/tokens", api_tokens_create, STORE_SCOPE_ADMIN},
    {"DELETE", "/v1/tokens/{id}", api_tokens_revoke, STORE_SCOPE_ADMIN},
    {"GET", "/v1/whoami", api_tokens_whoami, STORE_SCOPE_READ},
    {"GET", "/v1/webhooks", api_webhooks_list, STORE_SCOPE_ADMIN},
    {"POST", "/v1/webhooks", api_webhooks_create, STORE_SCOPE_ADMIN},
    {"DELETE", "/v1/webhooks/{id}", api_webhooks_delete, STORE_SCOPE_ADMIN},
    {"POST", "/v1/hooks/{id}", api_webhooks_deliver, 0},
    {"GET", "/v1/notifications", api_notifications_list, STORE_SCOPE_ADMIN},
    {"POST", "/v1/notifications", api_notifications_create, STORE_SCOPE_ADMIN},
    {"DELETE", "/v1/notifications/{id}", api_notifications_delete, STORE_SCOPE_ADMIN},
    {"GET", "/v1/notifications/{id}/deliveries", api_notifications_deliveries,
     STORE_SCOPE_ADMIN},
};

const size_t api_nroutes = sizeof api_routes / sizeof api_routes[0];
