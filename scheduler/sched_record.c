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
#include "common/ty_hash.h"
#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_quantity.h"
#include "common/ty_time.h"

static const char *const rank_state_names[] = {"pending", "running", "succeeded", "failed",
                                               "killed",  "stopped", "disrupted"};

static const char *const attempt_state_names[] = {"starting", "running", "stopping", "succeeded",
                                                  "failed",   "stopped", "cancelled"};

/* ---- the attempt record --------------------------------------------------- */

/* The record is written straight into text, member by member (a tree of jansson values built
 * and dumped for each of the several records a job's start writes was a tenth of the scheduler
 * thread). Members keep the order readers have always seen. */

typedef struct out {
    ty_buf b;
    ty_err e; /* the first failure sticks: later writes do nothing */
} out;

static void raw(out *o, const char *s)
{
    if (!o->e)
        o->e = ty_buf_puts(&o->b, s);
}

/* A string value, or null for NULL. */
static void str(out *o, const char *s)
{
    if (!o->e)
        o->e = s ? ty_json_put_string(&o->b, s, SIZE_MAX) : ty_buf_puts(&o->b, "null");
}

static void num(out *o, long long v, int present)
{
    if (!o->e)
        o->e = present ? ty_buf_printf(&o->b, "%lld", v) : ty_buf_puts(&o->b, "null");
}

static void when(out *o, int64_t ms)
{
    char t[32];
    str(o, ms > 0 ? ty_time_format_rfc3339(ms, t, sizeof t) : NULL);
}

static void put_rank(out *o, const srank *k, int r)
{
    int ended = k->state >= RANK_SUCCEEDED;
    raw(o, r ? ",{\"rank\":" : "{\"rank\":");
    num(o, r, 1);
    raw(o, ",\"state\":");
    str(o, rank_state_names[k->state]);
    raw(o, ",\"exit_code\":");
    num(o, k->exit_code, ended && k->exit_code >= 0);
    raw(o, ",\"signal\":");
    num(o, k->signal, ended && k->signal > 0);
    raw(o, ",\"started_at\":");
    when(o, k->started_ms);
    raw(o, ",\"ended_at\":");
    when(o, k->ended_ms);
    /* Where it runs, as far as the backend said: a pid here, a pod and a node there. */
    if (k->pid > 0) {
        raw(o, ",\"pid\":");
        num(o, k->pid, 1);
    }
    if (k->pod) {
        raw(o, ",\"pod\":");
        str(o, k->pod);
    }
    if (k->node) {
        raw(o, ",\"node\":");
        str(o, k->node);
    }
    raw(o, "}");
}

/* Where the backend placed the attempt, with the nodes its ranks were given, each once in the
 * order of the ranks. */
static void put_placement(out *o, const sjob *j)
{
    const char *key;
    json_t *v;
    raw(o, ",\"placement\":{");
    json_object_foreach(j->placement, key, v)
    {
        if (strcmp(key, "nodes") && !o->e) {
            str(o, key);
            raw(o, ":");
            if (!o->e)
                o->e = ty_json_write(&o->b, v);
            raw(o, ",");
        }
    }
    raw(o, "\"nodes\":[");
    /* The names written, in an open-addressed set: a gang has up to thousands of ranks. */
    size_t cap = 16, n = 0;
    while (cap < (size_t)j->world * 2)
        cap *= 2;
    const char **set = calloc(cap, sizeof *set);
    if (!set && !o->e)
        o->e = TY_ENOMEM;
    for (int r = 0; !o->e && r < j->world; r++) {
        const char *node = j->ranks[r].node;
        if (!node)
            continue;
        size_t at = (size_t)ty_fnv1a_str(node) & (cap - 1);
        while (set[at] && strcmp(set[at], node))
            at = (at + 1) & (cap - 1);
        if (set[at])
            continue;
        set[at] = node;
        raw(o, n++ ? "," : "");
        str(o, node);
    }
    free(set);
    raw(o, "]}");
}

/* The record of j's current attempt, number `attempt`, as JSON text (new). */
char *sched_record_text(const sjob *j, int attempt)
{
    out o = {{0}, TY_OK};
    char *text = NULL;
    raw(&o, "{\"attempt\":");
    num(&o, attempt, 1);
    raw(&o, ",\"state\":");
    str(&o, attempt_state_names[j->astate]);
    raw(&o, ",\"started_at\":");
    when(&o, j->a_started_ms);
    raw(&o, ",\"ended_at\":");
    when(&o, j->a_ended_ms);
    raw(&o, ",\"reason\":");
    str(&o, j->a_reason);
    raw(&o, ",\"message\":");
    str(&o, j->a_message);
    raw(&o, ",\"ranks\":[");
    for (int r = 0; r < j->world; r++)
        put_rank(&o, &j->ranks[r], r);
    raw(&o, "]");
    if (j->placement)
        put_placement(&o, j);
    raw(&o, "}");
    if (!o.e)
        ty_buf_steal(&o.b, &text, NULL);
    ty_buf_free(&o.b);
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
