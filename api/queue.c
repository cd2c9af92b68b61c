/*
 * queue.c - GET /v1/queue: where the PENDING jobs stand, in the order admission would take
 * them. First the heads of the lines (a team's queue, or one sweep's trials), by the position
 * the scheduler's last round gave them, each with its pending_reason; then, line by line in
 * that order, the jobs behind each head, with their place in their line (line_position) and
 * no pending_reason of their own: they wait behind their head. A token of a team sees its
 * own team's queue (another team's is 404, as for a team that does not exist); the admin sees
 * every team's, or one with ?team=. Reads the store only (api/ runs no SQL).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "api/api_int.h"
#include "api/spec.h"
#include "common/ty_buf.h"
#include "common/ty_json.h"

#define QUEUE_DEFAULT_LIMIT 100
#define QUEUE_MAX_LIMIT 1000

/* Appends one entry of the queue; reason is the stored pending_reason or NULL. */
static ty_err entry_write(ty_buf *b, const store_job *j, long long line_position, int first)
{
    char num[64];
    ty_err e = first ? TY_OK : ty_buf_append(b, ",", 1);
    if (!e)
        e = ty_buf_puts(b, "{\"id\":");
    if (!e)
        e = ty_json_put_string(b, j->id, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"name\":");
    if (!e)
        e = ty_json_put_string(b, j->name, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"team\":");
    if (!e)
        e = ty_json_put_string(b, j->team ? j->team : STORE_TEAM_DEFAULT, SIZE_MAX);
    if (!e)
        e = ty_buf_puts(b, ",\"queue\":");
    if (!e)
        e = ty_json_put_string(b, j->queue, SIZE_MAX);
    snprintf(num, sizeof num, ",\"priority\":%lld,\"line_position\":%lld", (long long)j->priority,
             line_position);
    if (!e)
        e = ty_buf_puts(b, num);
    if (!e)
        e = ty_buf_puts(b, ",\"pending_reason\":");
    if (!e) /* the scheduler's own JSON object, copied verbatim */
        e = ty_buf_puts(b, line_position == 1 && j->pending_reason && j->pending_reason[0] == '{'
                               ? j->pending_reason
                               : "null");
    if (!e)
        e = ty_buf_append(b, "}", 1);
    return e;
}

void api_queue_list(const api_req *req, api_resp *resp)
{
    const char *own = api_team_filter(req), *team = own;
    long limit = QUEUE_DEFAULT_LIMIT;
    int seen_team = 0, seen_limit = 0, bad = 0;
    char badwhy[96] = "";
    for (size_t i = 0; i < req->nquery && !bad; i++) {
        const char *k = req->query[i].key, *v = req->query[i].value ? req->query[i].value : "";
        if (strcmp(k, "team") == 0 && !seen_team++) {
            if (!spec_is_dns_label(v, strlen(v))) {
                bad = 1;
                snprintf(badwhy, sizeof badwhy, "query.team: must be a team's name");
            } else if (own && strcmp(own, v) != 0) {
                api_reply_problem(resp, 404, "team-not-found", NULL, "no team has this name",
                                  NULL);
                return;
            }
            team = v;
        } else if (strcmp(k, "limit") == 0 && !seen_limit++) {
            char *end = NULL;
            limit = strtol(v, &end, 10);
            if (!v[0] || *end || limit < 1 || limit > QUEUE_MAX_LIMIT) {
                bad = 1;
                snprintf(badwhy, sizeof badwhy, "query.limit: must be 1 to %d", QUEUE_MAX_LIMIT);
            }
        } else {
            bad = 1;
            snprintf(badwhy, sizeof badwhy, "query.%.40s: unknown or repeated", k);
        }
    }
    if (bad) {
        api_reply_problem(resp, 400, "invalid-query", NULL, badwhy, NULL);
        return;
    }
    store *st = req->ctx->store;
    store_job *heads = NULL;
    size_t nheads = 0;
    ty_buf b = {0};
    ty_err e = store_queue_heads(st, team, (int)limit, &heads, &nheads);
    if (!e)
        e = ty_buf_puts(&b, "{\"jobs\":[");
    size_t n = 0;
    for (size_t i = 0; i < nheads && !e; i++, n++)
        e = entry_write(&b, &heads[i], 1, n == 0);
    /* Behind each head, its line. */
    for (size_t i = 0; i < nheads && !e && n < (size_t)limit; i++) {
        store_job *line = NULL;
        size_t nl = 0;
        e = store_jobs_pending_line(st, heads[i].team, heads[i].queue, heads[i].sweep,
                                    heads[i].priority, heads[i].seq, (int)(limit - (long)n),
                                    &line, &nl);
        for (size_t k = 0; k < nl && !e; k++, n++)
            e = entry_write(&b, &line[k], (long long)k + 2, n == 0);
        store_jobs_free(line, nl);
    }
    if (!e)
        e = ty_buf_puts(&b, "]}");
    if (e)
        api_reply_error(resp, e, NULL);
    else
        api_reply_json_buf(resp, 200, &b);
    ty_buf_free(&b);
    store_jobs_free(heads, nheads);
}
