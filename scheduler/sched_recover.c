/*
 * sched_recover.c - taking over the jobs a previous server process held (sched_int.h).
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

/* ---- recovery ------------------------------------------------------------------ */

/* The start of the job's first attempt, for its timeout. */
static int64_t first_start(sched *s, const sjob *j)
{
    store_attempt *a = NULL;
    size_t n = 0;
    int64_t ms = 0;
    if (store_job_attempts(s->st, j->id, &a, &n) == TY_OK && n > 0) {
        json_t *rec = json_loads(a[0].json, 0, NULL);
        const char *st = json_string_value(json_object_get(rec, "started_at"));
        if (st)
            ty_time_parse_rfc3339(st, &ms);
        json_decref(rec);
    }
    store_attempts_free(a, n);
    return ms;
}

/*
 * Takes over j, which a previous server process held in a state where its gang may run:
 * the backend adopts the attempt (it carries on; 1 returned) or stops what is left of it.
 */
static int recover_job(sched *s, sjob *j, int *found)
{
    backend_job bj;
    backend_recovery rec = {0};
    char why[256] = "";
    sched_job_view(j, j->attempt, &bj);
    /* A restarting job's last attempt should have ended: what is left of it is stopped. */
    int may_adopt = j->state != JOB_RESTARTING;
    ty_err e = s->be->ops->recover(s->be, &bj, may_adopt, s->grace_ms, &rec, why, sizeof why);
    *found = rec.found;
    if (e != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "scheduler: what a job left could not be recovered", "{s:s, s:s}",
               "job_id", j->id, "error", why[0] ? why : ty_strerror(e));
        return 0;
    }
    if (!rec.adopted)
        return 0;
    /* The attempt goes on (a cancel is then carried out by the first round): its ranks'
     * events follow, running or how they ended. */
    j->res = rec.adopted;
    if (!j->have_record)
        sched_record_begin(s, j, ty_time_now_ms());
    j->launched = 1;
    j->alive = 0;
    pthread_mutex_lock(&s->mu);
    for (int r = 0; r < j->world; r++) {
        if (j->ranks[r].state <= RANK_RUNNING)
            j->alive++;
        if (j->ranks[r].state == RANK_RUNNING)
            s->running_ranks++;
    }
    if (j->alive == 0) {
        /* The record says every rank ended, the backend that the attempt exists: what it
         * says of each rank decides. */
        for (int r = 0; r < j->world; r++)
            j->ranks[r].state = RANK_PENDING;
        j->alive = j->world;
    }
    pthread_mutex_unlock(&s->mu);
    if (j->state == JOB_STARTING)
        j->astate = ATT_STARTING;
    return 1;
}

/*
 * Takes over the jobs a previous server process held: the attempt that still runs is
 * adopted when the backend can; otherwise what is left is stopped and the attempt
 * restarts (ServerRestarted) or the cancel ends.
 */
void sched_recover(sched *s, round *r)
{
    const unsigned mask = 1u << JOB_ADMITTED | 1u << JOB_STARTING | 1u << JOB_RUNNING |
                          1u << JOB_RESTARTING | 1u << JOB_CANCELLING;
    int64_t before = 0;
    int64_t now = ty_time_now_ms();
    do {
        store_job_filter f = {.state_mask = mask, .before_seq = before, .limit = 1000};
        store_job *rows = NULL;
        size_t n = 0;
        int64_t next = 0;
        if (store_jobs_list(s->st, &f, &rows, &n, &next) != TY_OK)
            return;
        for (size_t i = 0; i < n; i++) {
            sjob *j = NULL;
            if (sched_job_new(&rows[i], &j) != TY_OK)
                continue;
            sched_record_load(j, rows[i].attempt_json);
            if (j->timeout_s > 0)
                j->first_start_ms = first_start(s, j);
            int found = 0, adopted = 0;
            if (j->state != JOB_ADMITTED)
                adopted = recover_job(s, j, &found);
            sched_job_link(s, j);
            now = ty_time_now_ms();
            switch (j->state) {
            case JOB_ADMITTED: /* admitted, never started: back in line */
                sched_set_act(
                    sched_push(r, j, JOB_PENDING, "ServerRestarted",
                               "the server restarted before the job started; it waits for "
                               "admission again"),
                    ACT_DISCARD);
                break;
            case JOB_STARTING:
            case JOB_RUNNING:
                if (adopted)
                    break; /* it carries on */
                if (j->have_record)
                    sched_record_end(s, j, ATT_STOPPED, "ServerRestarted",
                                     "the server restarted while this attempt ran", now);
                j->restart_at_ms = now;
                sched_push(
                    r, j, JOB_RESTARTING, "ServerRestarted",
                    "the server restarted while attempt %d ran; %d leftover process%s stopped; "
                    "restarting (does not count against restart.max)",
                    j->attempt, found, found == 1 ? " was" : "es were");
                break;
            case JOB_RESTARTING:
                j->restart_at_ms = now;
                break;
            default: /* CANCELLING: decided by the first round */
                break;
            }
            TY_LOG(TY_LOG_INFO, "scheduler: recovered a job", "{s:s, s:s, s:i, s:i, s:b}", "job_id",
                   j->id, "state", job_state_name(rows[i].state), "attempt", j->attempt, "found",
                   found, "adopted", adopted);
        }
        store_jobs_free(rows, n);
        before = next;
    } while (before > 0);
}
