/*
 * sched_record.c - the attempt record (sched_int.h).
 */
#include "scheduler/sched_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_quantity.h"
#include "common/ty_time.h"

static const char *const rank_state_names[] = {"pending", "running", "succeeded", "failed",
                                               "killed",  "stopped", "disrupted"};

static const char *const attempt_state_names[] = {"starting", "running", "stopping", "succeeded",
                                                  "failed",   "stopped", "cancelled"};

/* ---- the attempt record --------------------------------------------------- */

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms > 0 ? json_string(ty_time_format_rfc3339(ms, buf, sizeof buf)) : json_null();
}

static json_t *int_or_null(int v, int present)
{
    return present ? json_integer(v) : json_null();
}

/* The record of j's current attempt, number `attempt`, as JSON text (new). */
char *sched_record_text(const sjob *j, int attempt)
{
    json_t *ranks = json_array();
    for (int r = 0; ranks && r < j->world; r++) {
        const srank *k = &j->ranks[r];
        int ended = k->state >= RANK_SUCCEEDED;
        json_t *o = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "rank", r, "state",
                              rank_state_names[k->state], "exit_code",
                              int_or_null(k->exit_code, ended && k->exit_code >= 0), "signal",
                              int_or_null(k->signal, ended && k->signal > 0), "started_at",
                              time_or_null(k->started_ms), "ended_at", time_or_null(k->ended_ms));
        /* Where it runs, as far as the backend said: a pid here, a pod and a node there. */
        if (o && k->pid > 0)
            json_object_set_new(o, "pid", json_integer(k->pid));
        if (o && k->pod)
            json_object_set_new(o, "pod", json_string(k->pod));
        if (o && k->node)
            json_object_set_new(o, "node", json_string(k->node));
        json_array_append_new(ranks, o);
    }
    json_t *rec = json_pack("{s:i, s:s, s:o, s:o, s:o, s:s, s:o}", "attempt", attempt, "state",
                            attempt_state_names[j->astate], "started_at",
                            time_or_null(j->a_started_ms), "ended_at", time_or_null(j->a_ended_ms),
                            "reason", j->a_reason ? json_string(j->a_reason) : json_null(),
                            "message", j->a_message, "ranks", ranks ? ranks : json_null());
    /* Where the backend placed it, with the nodes its ranks were given. */
    json_t *pl = j->placement ? json_deep_copy(j->placement) : NULL;
    json_t *nodes = pl ? json_array() : NULL, *seen = pl ? json_object() : NULL;
    for (int r = 0; nodes && seen && r < j->world; r++) {
        const char *node = j->ranks[r].node;
        if (node && !json_object_get(seen, node) && !json_object_set_new(seen, node, json_true()))
            json_array_append_new(nodes, json_string(node));
    }
    json_decref(seen);
    if (pl && nodes)
        json_object_set_new(pl, "nodes", nodes);
    else
        json_decref(nodes);
    if (rec && pl)
        json_object_set_new(rec, "placement", pl);
    else
        json_decref(pl);
    char *text = NULL;
    ty_buf b = {0};
    if (rec && ty_json_write(&b, rec) == TY_OK)
        ty_buf_steal(&b, &text, NULL);
    ty_buf_free(&b);
    json_decref(rec);
    return text;
}

/* Loads the ranks and times of a stored attempt record into j (recovery). */
void sched_record_load(sjob *j, const char *text)
{
    json_t *rec = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(rec)) {
        json_decref(rec);
        return;
    }
    j->have_record = 1;
    json_t *pl = json_object_get(rec, "placement");
    if (json_is_object(pl)) {
        json_decref(j->placement);
        j->placement = json_deep_copy(pl);
        json_object_del(j->placement, "nodes"); /* the ranks' nodes say it again */
    }
    const char *st = json_string_value(json_object_get(rec, "state"));
    for (size_t n = 0; st && n < sizeof attempt_state_names / sizeof *attempt_state_names; n++)
        if (strcmp(st, attempt_state_names[n]) == 0)
            j->astate = (attempt_state)n;
    st = json_string_value(json_object_get(rec, "started_at"));
    int64_t ms;
    if (st && ty_time_parse_rfc3339(st, &ms) == 0)
        j->a_started_ms = ms;
    size_t i;
    json_t *rk;
    json_array_foreach(json_object_get(rec, "ranks"), i, rk)
    {
        if ((int)i >= j->world)
            break;
        srank *k = &j->ranks[i];
        const char *state = json_string_value(json_object_get(rk, "state"));
        for (size_t n = 0; state && n < sizeof rank_state_names / sizeof *rank_state_names; n++)
            if (strcmp(state, rank_state_names[n]) == 0)
                k->state = (rank_state)n;
        k->pid = (int)json_integer_value(json_object_get(rk, "pid"));
        const char *pod = json_string_value(json_object_get(rk, "pod"));
        const char *node = json_string_value(json_object_get(rk, "node"));
        k->pod = pod ? strdup(pod) : NULL; /* out of memory: shown as unknown */
        k->node = node ? strdup(node) : NULL;
        const json_t *code = json_object_get(rk, "exit_code");
        k->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
        k->signal = (int)json_integer_value(json_object_get(rk, "signal"));
        st = json_string_value(json_object_get(rk, "started_at"));
        if (st && ty_time_parse_rfc3339(st, &ms) == 0)
            k->started_ms = ms;
        st = json_string_value(json_object_get(rk, "ended_at"));
        if (st && ty_time_parse_rfc3339(st, &ms) == 0)
            k->ended_ms = ms;
    }
    json_decref(rec);
}

/* Ends the current attempt's record: every rank not yet ended becomes `left`. */
void sched_record_end(sched *s, sjob *j, attempt_state as, const char *reason, const char *msg,
                      int64_t now)
{
    pthread_mutex_lock(&s->mu);
    for (int r = 0; r < j->world; r++) {
        srank *k = &j->ranks[r];
        if (k->state == RANK_RUNNING || (k->state == RANK_PENDING && j->launched)) {
            k->state = RANK_STOPPED;
            k->ended_ms = now;
        }
    }
    pthread_mutex_unlock(&s->mu);
    j->astate = as;
    j->a_ended_ms = now;
    j->a_reason = reason;
    snprintf(j->a_message, sizeof j->a_message, "%s", msg ? msg : "");
    j->dirty = 1;
}

/* A fresh record for attempt n (ranks pending). */
void sched_record_begin(sched *s, sjob *j, int64_t now)
{
    pthread_mutex_lock(&s->mu);
    sched_ranks_reset(j);
    pthread_mutex_unlock(&s->mu);
    j->astate = ATT_STARTING;
    j->a_started_ms = now;
    j->a_ended_ms = 0;
    j->a_reason = NULL;
    j->a_message[0] = '\0';
    j->launched = j->alive = 0;
    j->cause = END_NONE;
    j->cause_msg[0] = '\0';
    j->stop_asked = j->kill_sent = 0;
    j->want_stop = STOP_NONE;
    j->kill_at_ms = 0;
    j->waiting[0] = '\0';
    json_decref(j->placement);
    j->placement = NULL;
    j->placed[0] = '\0';
    j->withdrawn = 0;
    j->have_record = 1;
    j->dirty = 1;
    if (!j->first_start_ms)
        j->first_start_ms = now;
}
