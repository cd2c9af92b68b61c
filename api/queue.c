/*
 * queue.c - where PENDING jobs stand. GET /v1/queue lists them in the order admission would take
 * them: first the heads of the lines (a team's queue, or one sweep's trials), by the position
 * the scheduler's last round gave them, each with its pending_reason; then, line by line in
 * that order, the jobs behind each head, with their place in their line (line_position). A
 * token of a team sees its own team's queue (another team's is 404, as for a team that does
 * not exist); the admin sees every team's, or one with ?team=. Reads the store only (api/ runs
 * no SQL).
 *
 * A job behind its line's head has no reason of its own in the store: the scheduler describes
 * only the heads, so that its round costs the same however many jobs wait. Its pending_reason
 * is made when a person reads it (reason Queued): how many jobs of its line are ahead of it,
 * what the first of them waits for, and positions counted from the head's: the head's
 * position plus the jobs ahead of it in its line. Positions follow the jobs as they come and
 * go, because the count is read from the store's index at that moment.
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

/* The stored pending_reason of a PENDING job, or NULL. */
static const char *stored_reason(const store_job *j)
{
    return j->state == JOB_PENDING && j->pending_reason && j->pending_reason[0] == '{'
               ? j->pending_reason
               : NULL;
}

/*
 * The pending_reason (new JSON text) of job j, `ahead` (>= 1) jobs behind the head of its line
 * (head_id, whose stored pending_reason is head_reason): reason Queued, position and
 * team_position the head's plus `ahead`. NULL when the head has no reason yet (no round has
 * considered the line) or on error.
 */
static char *queued_reason(const store_job *j, int64_t ahead, const char *head_id,
                           const char *head_reason)
{
    json_t *h = head_reason ? json_loads(head_reason, 0, NULL) : NULL;
    json_t *pos = json_object_get(h, "position"), *tpos = json_object_get(h, "team_position");
    const char *why = json_string_value(json_object_get(h, "reason"));
    const char *msg = json_string_value(json_object_get(h, "message"));
    char *text = NULL;
    if (!json_is_integer(pos) || !json_is_integer(tpos) || !why || !msg || ahead < 1) {
        json_decref(h);
        return NULL;
    }
    char line[160], message[1024];
    const char *team = j->team ? j->team : STORE_TEAM_DEFAULT;
    if (j->sweep > 0)
        snprintf(line, sizeof line, "its sweep's trials in team %s's queue %s", team, j->queue);
    else
        snprintf(line, sizeof line, "team %s's queue %s", team, j->queue);
    snprintf(message, sizeof message, "%lld job%s ahead of it in %s; the first of them, job %s, "
             "waits: %s: %s", (long long)ahead, ahead == 1 ? "" : "s", line, head_id, why, msg);
    json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "reason", "Queued", "message", message,
                          "position", (json_int_t)(json_integer_value(pos) + ahead),
                          "team_position", (json_int_t)(json_integer_value(tpos) + ahead));
    if (o)
        text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    json_decref(h);
    return text;
}

ty_err api_pending_reasons(store *st, const store_job *jobs, size_t n, char **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (n == 0)
        return TY_OK;
    store_line_place *pl = calloc(n, sizeof *pl);
    if (!pl)
        return TY_ENOMEM;
    ty_err e = store_jobs_line_places(st, jobs, n, pl);
    for (size_t i = 0; i < n && !e; i++) {
        const char *own = stored_reason(&jobs[i]);
        if (jobs[i].state != JOB_PENDING)
            continue;
        if (pl[i].ahead > 0)
            out[i] = queued_reason(&jobs[i], pl[i].ahead, pl[i].head_id, pl[i].head_reason);
        else if (own && !(out[i] = strdup(own)))
            e = TY_ENOMEM;
    }
    store_line_places_clear(pl, n);
    free(pl);
    if (e)
        for (size_t i = 0; i < n; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    return e;
}

/* Appends one entry of the queue: j at line_position in the line that head heads. */
static ty_err entry_write(ty_buf *b, const store_job *j, const store_job *head,
                          long long line_position, int first)
{
    char *queued = line_position > 1 ? queued_reason(j, line_position - 1, head->id,
                                                     stored_reason(head))
                                     : NULL;
    const char *reason = line_position > 1 ? queued : stored_reason(j);
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
    if (!e) /* the scheduler's own JSON object (a head's), or the one made from it */
        e = ty_buf_puts(b, reason ? reason : "null");
    if (!e)
        e = ty_buf_append(b, "}", 1);
    free(queued);
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
        e = entry_write(&b, &heads[i], &heads[i], 1, n == 0);
    /* Behind each head, its line. */
    for (size_t i = 0; i < nheads && !e && n < (size_t)limit; i++) {
        store_job *line = NULL;
        size_t nl = 0;
        e = store_jobs_pending_line(st, heads[i].team, heads[i].queue, heads[i].sweep,
                                    heads[i].priority, heads[i].seq, (int)(limit - (long)n),
                                    &line, &nl);
        for (size_t k = 0; k < nl && !e; k++, n++)
            e = entry_write(&b, &line[k], &heads[i], (long long)k + 2, n == 0);
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
