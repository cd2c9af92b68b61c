/*
 * test_admit.c - scheduler/admit.c: the admission policy on small clusters written out by hand.
 * What a team notices: a job within its quota runs; beyond it, it borrows what others leave idle
 * up to its limit; the team using the least of its weighted share goes next; a team's own quota
 * comes back from borrowers when it needs it, and nobody is preempted for a job that would be
 * preempted in turn; a high-priority job preempts its own team's lower ones only when the team
 * asked for it; every job left waiting says why and where it stands. Then seeded random
 * snapshots: never over quota or capacity, no cascade, the same snapshot gives the same answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/admit.h"

/* ---- a small cluster builder: resources a100, h100, cpu, memory ---- */

enum { A100, H100, CPU, MEM, NRES };

#define MAX_T 8
#define MAX_L 32
#define MAX_J 16
#define MAX_RUN 64

typedef struct fix {
    admit_resource res[NRES];
    admit_team teams[MAX_T];
    size_t nteams;
    admit_room rooms[8];
    size_t nrooms;
    admit_line lines[MAX_L];
    admit_job jobs[MAX_L][MAX_J]; /* each line's jobs after its head */
    size_t njobs[MAX_L], next[MAX_L];
    size_t nlines;
    admit_running run[MAX_RUN];
    size_t nrun;
    char ids[MAX_L * (MAX_J + 1) + MAX_RUN][48];
    size_t nids;
    int64_t seq;
    int reserve_mode; /* 0: none; 1: refuse (not now) h100; 2: never for ids starting with "x" */
    admit_snapshot snap;
    admit_result r;
} fix;

static void fix_init(fix *f, int64_t a100, int64_t h100)
{
    memset(f, 0, sizeof *f);
    f->res[A100] = (admit_resource){"a100", ADMIT_RES_GPU, a100};
    f->res[H100] = (admit_resource){"h100", ADMIT_RES_GPU, h100};
    f->res[CPU] = (admit_resource){"cpu", ADMIT_RES_CPU, 1000000};
    f->res[MEM] = (admit_resource){"memory", ADMIT_RES_MEMORY, 1LL << 50};
    admit_result_init(&f->r);
}

/* A team with quotas on GPUs (cpu and memory unlimited). Returns its index. */
static size_t team(fix *f, const char *name, double weight, int64_t nom_a, int64_t bor_a,
                   int64_t nom_h, int64_t bor_h)
{
    size_t t = f->nteams++;
    admit_team *tm = &f->teams[t];
    memset(tm, 0, sizeof *tm);
    tm->name = name;
    tm->weight = weight;
    tm->nominal[A100] = nom_a;
    tm->borrow[A100] = bor_a;
    tm->nominal[H100] = nom_h;
    tm->borrow[H100] = bor_h;
    tm->nominal[CPU] = tm->borrow[CPU] = ADMIT_UNLIMITED;
    tm->nominal[MEM] = tm->borrow[MEM] = ADMIT_UNLIMITED;
    return t;
}

static const char *keep(fix *f, const char *id)
{
    assert_true(f->nids < sizeof f->ids / sizeof f->ids[0]);
    snprintf(f->ids[f->nids], sizeof f->ids[0], "%s", id);
    return f->ids[f->nids++];
}

static admit_job job(fix *f, const char *id, int64_t prio, int64_t a100, int64_t h100)
{
    admit_job j;
    memset(&j, 0, sizeof j);
    j.id = keep(f, id);
    j.priority = prio;
    j.seq = ++f->seq;
    j.req[A100] = a100;
    j.req[H100] = h100;
    j.req[CPU] = 4000 * (a100 + h100 + 1);
    j.req[MEM] = (16LL << 30) * (a100 + h100 + 1);
    return j;
}

/* A line of team t; returns its index. Jobs are added with push(). */
static size_t line(fix *f, size_t t, int queue_room, int sweep_room)
{
    size_t l = f->nlines++;
    f->lines[l] = (admit_line){.team = t, .room = {queue_room, sweep_room}};
    return l;
}

static void push(fix *f, size_t l, admit_job j)
{
    if (!f->lines[l].has_head) {
        f->lines[l].has_head = 1;
        f->lines[l].head = j;
        return;
    }
    assert_true(f->njobs[l] < MAX_J);
    f->jobs[l][f->njobs[l]++] = j;
}

static size_t running(fix *f, const char *id, size_t t, int64_t prio, int64_t started, int64_t a100,
                      int64_t h100)
{
    size_t i = f->nrun++;
    admit_running *r = &f->run[i];
    memset(r, 0, sizeof *r);
    r->id = keep(f, id);
    r->team = t;
    r->priority = prio;
    r->started_ms = started;
    r->req[A100] = a100;
    r->req[H100] = h100;
    f->teams[t].used[A100] += a100;
    f->teams[t].used[H100] += h100;
    f->res[A100].free -= a100;
    f->res[H100].free -= h100;
    return i;
}

static int next_cb(void *ctx, size_t l, admit_job *out)
{
    fix *f = ctx;
    if (f->next[l] >= f->njobs[l])
        return 0;
    *out = f->jobs[l][f->next[l]++];
    return 1;
}

static admit_fit reserve_cb(void *ctx, size_t l, const admit_job *j, char *why, size_t len)
{
    fix *f = ctx;
    (void)l;
    if (f->reserve_mode == 1 && j->req[H100] > 0) {
        snprintf(why, len, "no zone has %lld free h100 on one node", (long long)j->req[H100]);
        return ADMIT_FIT_NOT_NOW;
    }
    if (f->reserve_mode == 2 && j->id[0] == 'x') {
        snprintf(why, len, "GPU type not in the profile");
        return ADMIT_FIT_NEVER;
    }
    return ADMIT_FIT_OK;
}

static admit_result *decide(fix *f, int max_admits)
{
    f->snap = (admit_snapshot){.res = f->res,
                               .nres = NRES,
                               .teams = f->teams,
                               .nteams = f->nteams,
                               .rooms = f->rooms,
                               .nrooms = f->nrooms,
                               .lines = f->lines,
                               .nlines = f->nlines,
                               .running = f->run,
                               .nrunning = f->nrun,
                               .max_admits = max_admits,
                               .next = next_cb,
                               .reserve = f->reserve_mode ? reserve_cb : NULL,
                               .ctx = f};
    char msg[128] = "";
    if (admit_round(&f->snap, &f->r, msg, sizeof msg) != TY_OK)
        fail_msg("admit_round: %s", msg);
    return &f->r;
}

/* The admitted ids joined by spaces. */
static const char *admitted(const admit_result *r, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->nadmitted && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? " " : "", r->admitted[i].job.id);
    return buf;
}

static const admit_pending *pending(const admit_result *r, const char *id)
{
    for (size_t i = 0; i < r->npending; i++)
        if (!strcmp(r->pending[i].job.id, id))
            return &r->pending[i];
    fail_msg("%s is not pending", id);
    return NULL;
}

static const char *message(fix *f, const char *id, char *buf, size_t len)
{
    return admit_message(&f->snap, pending(&f->r, id), buf, len);
}

static void fix_free(fix *f)
{
    admit_result_free(&f->r);
}

/* ---- fits and borrowing ---- */

static void test_a_job_within_quota_is_admitted(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 16, 8);
    size_t v = team(&f, "vision", 1, 8, 0, 0, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "j1", 0, 4, 0));
    push(&f, l, job(&f, "j2", 0, 4, 0));
    push(&f, l, job(&f, "j3", 0, 1, 0));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "j1 j2");
    assert_int_equal(r->admitted[0].borrows, 0);
    assert_int_equal(r->admitted[1].borrows, 0);
    /* j3 would borrow and nobody else has a quota to lend: the cohort has nothing idle. */
    assert_int_equal(r->npending, 1);
    assert_int_equal(pending(r, "j3")->reason, ADMIT_QUOTA_EXCEEDED);
    assert_string_equal(message(&f, "j3", buf, sizeof buf),
                        "team vision uses 8 of 8 a100 and borrows 0 of 0; this job needs 1; the "
                        "cohort has 0 idle a100");
    fix_free(&f);
}

static void test_borrowing_up_to_the_limit(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 24, 0);
    size_t v = team(&f, "vision", 1, 8, 4, 0, 0);
    team(&f, "nlp", 1, 16, 0, 0, 0); /* lends: uses nothing */
    running(&f, "r1", v, 0, 1, 6, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "j1", 0, 4, 0)); /* 10 of 8: borrows 2 */
    push(&f, l, job(&f, "j2", 0, 2, 0)); /* 12 of 8: borrows 4, the limit */
    push(&f, l, job(&f, "j3", 0, 1, 0)); /* 13: over */
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "j1 j2");
    assert_int_equal(r->admitted[0].borrows, 1);
    assert_int_equal(pending(r, "j3")->reason, ADMIT_QUOTA_EXCEEDED);
    assert_string_equal(message(&f, "j3", buf, sizeof buf),
                        "team vision uses 12 of 8 a100 and borrows 4 of 4; this job needs 1; the "
                        "cohort has 12 idle a100");

    /* The cohort's idle bounds borrowing too: nlp uses 14 of its 16, 2 are idle. */
    fix g;
    fix_init(&g, 40, 0);
    v = team(&g, "vision", 1, 14, 8, 0, 0);
    size_t n = team(&g, "nlp", 1, 16, 0, 0, 0);
    running(&g, "r1", v, 0, 1, 14, 0);
    running(&g, "r2", n, 0, 1, 14, 0);
    l = line(&g, v, -1, -1);
    push(&g, l, job(&g, "j1", 0, 4, 0));
    r = decide(&g, 0);
    assert_int_equal(r->nadmitted, 0);
    assert_string_equal(message(&g, "j1", buf, sizeof buf),
                        "team vision uses 14 of 14 a100 and borrows 0 of 8; this job needs 4; the "
                        "cohort has 2 idle a100");
    fix_free(&f);
    fix_free(&g);
}

static void test_within_quota_but_the_cluster_is_full(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 4, 0); /* quotas sum to more than the cluster has */
    size_t v = team(&f, "vision", 1, 8, 0, 0, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "j1", 0, 6, 0));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->nadmitted, 0);
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "j1")->reason, ADMIT_NO_CAPACITY);
    assert_string_equal(message(&f, "j1", buf, sizeof buf),
                        "the cluster has 4 free a100; this job needs 6");
    fix_free(&f);
}

/* ---- fair share ---- */

static void test_drf_order_between_three_teams_with_weights(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 12, 0);
    /* Cohort total 12 a100. alpha weight 2, beta and gamma weight 1. Jobs of 1 GPU each, same
     * priority: the lowest used/12/weight goes next; ties by age (alpha's jobs are oldest). */
    size_t a = team(&f, "alpha", 2, 4, 8, 0, 0);
    size_t b = team(&f, "beta", 1, 4, 8, 0, 0);
    size_t c = team(&f, "gamma", 1, 4, 8, 0, 0);
    size_t la = line(&f, a, -1, -1), lb = line(&f, b, -1, -1), lc = line(&f, c, -1, -1);
    for (int i = 1; i <= 6; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        push(&f, la, job(&f, id, 0, 1, 0));
    }
    for (int i = 1; i <= 6; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i);
        push(&f, lb, job(&f, id, 0, 1, 0));
    }
    for (int i = 1; i <= 6; i++) {
        char id[8];
        snprintf(id, sizeof id, "c%d", i);
        push(&f, lc, job(&f, id, 0, 1, 0));
    }
    char buf[256];
    admit_result *r = decide(&f, 8);
    /* Shares x24 (alpha's halved by its weight): a1 (alpha 1), b1 (beta 2), c1 (gamma 2),
     * a2 (alpha 2); all at 2, alpha's head is the oldest: a3 (alpha 3); b2, c2 (4); a4. */
    assert_string_equal(admitted(r, buf, sizeof buf), "a1 b1 c1 a2 a3 b2 c2 a4");
    assert_int_equal(pending(r, "a5")->reason, ADMIT_ROUND_CAP);

    /* A team that uses more goes after, whatever the age of its jobs. */
    fix g;
    fix_init(&g, 12, 0);
    a = team(&g, "alpha", 1, 4, 8, 0, 0);
    b = team(&g, "beta", 1, 4, 8, 0, 0);
    running(&g, "r", a, 0, 1, 4, 0);
    la = line(&g, a, -1, -1);
    lb = line(&g, b, -1, -1);
    push(&g, la, job(&g, "old", 0, 1, 0));
    push(&g, lb, job(&g, "new1", 0, 1, 0));
    push(&g, lb, job(&g, "new2", 0, 1, 0));
    push(&g, lb, job(&g, "new3", 0, 1, 0));
    r = decide(&g, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "new1 new2 new3 old");
    fix_free(&f);
    fix_free(&g);
}

static void test_a_team_blocked_on_quota_blocks_nobody_else(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 16, 8);
    size_t a = team(&f, "alpha", 1, 2, 0, 4, 0);
    size_t b = team(&f, "beta", 1, 8, 0, 4, 0);
    size_t la = line(&f, a, -1, -1), la2 = line(&f, a, -1, -1), lb = line(&f, b, -1, -1);
    push(&f, la, job(&f, "big", 5, 4, 0));    /* over alpha's a100 quota */
    push(&f, la2, job(&f, "small", 0, 1, 0)); /* alpha's a100 after big: must not pass it */
    push(&f, la2, job(&f, "never", 0, 0, 1));
    push(&f, lb, job(&f, "b1", 0, 4, 0));
    push(&f, lb, job(&f, "b2", 0, 0, 2));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "b1 b2");
    assert_int_equal(pending(r, "big")->reason, ADMIT_QUOTA_EXCEEDED);
    assert_int_equal(pending(r, "small")->reason, ADMIT_BEHIND);
    assert_string_equal(message(&f, "small", buf, sizeof buf),
                        "behind job big, which waits (QuotaExceeded)");
    fix_free(&f);
}

/* ---- no backfill, per GPU type ---- */

static void test_no_capacity_stops_its_gpu_type_only(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 4, 8);
    size_t a = team(&f, "alpha", 1, 16, 0, 8, 0);
    size_t b = team(&f, "beta", 1, 16, 0, 8, 0);
    size_t la = line(&f, a, -1, -1), lb = line(&f, b, -1, -1);
    push(&f, la, job(&f, "wide", 9, 8, 0));   /* 8 a100, 4 free */
    push(&f, lb, job(&f, "narrow", 0, 2, 0)); /* would fit, but must not pass the wide gang */
    push(&f, lb, job(&f, "h", 0, 0, 4));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "");
    /* beta's narrow a100 is its head: nothing of beta passes it, though h100 is free. */
    assert_int_equal(pending(r, "wide")->reason, ADMIT_NO_CAPACITY);
    assert_int_equal(pending(r, "narrow")->reason, ADMIT_BEHIND);
    assert_string_equal(message(&f, "narrow", buf, sizeof buf),
                        "behind job wide, which waits (NoCapacity)");

    /* In a line of its own, beta's h100 job goes on. */
    fix g;
    fix_init(&g, 4, 8);
    a = team(&g, "alpha", 1, 16, 0, 8, 0);
    b = team(&g, "beta", 1, 16, 0, 8, 0);
    la = line(&g, a, -1, -1);
    lb = line(&g, b, -1, -1);
    size_t lb2 = line(&g, b, -1, -1);
    push(&g, la, job(&g, "wide", 9, 8, 0));
    push(&g, lb, job(&g, "narrow", 0, 2, 0));
    push(&g, lb2, job(&g, "h", 0, 0, 4));
    r = decide(&g, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "h");

    /* The backend's "not now" stops the type the same way; its words are the reason. */
    g.reserve_mode = 1;
    g.lines[la].head.req[A100] = 2; /* wide now fits the free count */
    lb2 = line(&g, a, -1, -1);
    push(&g, lb2, job(&g, "h2", 0, 0, 2));
    g.next[lb] = g.next[la] = 0;
    r = decide(&g, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "wide narrow");
    assert_int_equal(pending(r, "h")->reason, ADMIT_NO_CAPACITY);
    assert_string_equal(message(&g, "h", buf, sizeof buf), "no zone has 4 free h100 on one node");
    assert_int_equal(pending(r, "h2")->reason, ADMIT_BEHIND);
    fix_free(&f);
    fix_free(&g);
}

static void test_the_backend_says_never(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 8, 0);
    f.reserve_mode = 2;
    size_t a = team(&f, "alpha", 1, 8, 0, 0, 0);
    size_t l = line(&f, a, -1, -1);
    push(&f, l, job(&f, "x1", 0, 1, 0));
    push(&f, l, job(&f, "j2", 0, 1, 0));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->nfailed, 1);
    assert_string_equal(r->failed[0].job.id, "x1");
    assert_string_equal(r->failed[0].why, "GPU type not in the profile");
    assert_string_equal(admitted(r, buf, sizeof buf), "j2");
    fix_free(&f);
}

/* ---- lines: queue limits and sweep parallelism ---- */

static void test_queue_limits_and_sweep_parallelism(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 16, 0);
    f.rooms[0] = (admit_room){ADMIT_ROOM_QUEUE, "default", 3, 1};
    f.rooms[1] = (admit_room){ADMIT_ROOM_SWEEP, "12", 1, 0};
    f.nrooms = 2;
    size_t a = team(&f, "alpha", 1, 16, 0, 0, 0);
    size_t lq = line(&f, a, 0, -1), ls = line(&f, a, 0, 1);
    push(&f, lq, job(&f, "q1", 0, 1, 0));
    push(&f, ls, job(&f, "t1", 0, 1, 0));
    push(&f, ls, job(&f, "t2", 0, 1, 0));
    push(&f, lq, job(&f, "q2", 0, 1, 0));
    push(&f, lq, job(&f, "q3", 0, 1, 0));
    char buf[256];
    admit_result *r = decide(&f, 0);
    /* The queue has room for 2 (3 - 1 active), the sweep for 1 of them. */
    assert_string_equal(admitted(r, buf, sizeof buf), "q1 t1");
    assert_int_equal(pending(r, "q2")->reason, ADMIT_QUEUE_LIMIT);
    assert_string_equal(message(&f, "q2", buf, sizeof buf),
                        "queue default has 3 of its 3 jobs active");
    f.rooms[0].limit = 10;
    memset(f.next, 0, sizeof f.next);
    r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "q1 t1 q2 q3");
    assert_int_equal(pending(r, "t2")->reason, ADMIT_SWEEP_PARALLELISM);
    assert_string_equal(message(&f, "t2", buf, sizeof buf),
                        "sweep 12 has 1 of its 1 trials active (its parallelism)");
    fix_free(&f);
}

/* ---- reclaim ---- */

static void test_reclaim_picks_borrowers_lowest_priority_then_newest(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 16, 0);
    size_t v = team(&f, "vision", 1, 8, 0, 0, 0);
    size_t n = team(&f, "nlp", 1, 8, 8, 0, 0);
    size_t s = team(&f, "speech", 1, 0, 4, 0, 0);
    /* nlp uses 12 of 8 (borrows 4), speech 4 of 0 (borrows 4); the cluster is full. */
    running(&f, "n-old-p0", n, 0, 100, 2, 0);
    running(&f, "n-new-p0", n, 0, 200, 2, 0);
    running(&f, "n-p5", n, 5, 300, 8, 0);
    running(&f, "s-p1", s, 1, 50, 4, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "mine", 0, 6, 0));
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->nadmitted, 0);
    /* Lowest priority first (nlp's two p0, newest first), then speech's p1: 2 + 2 + 4 >= 6. */
    assert_int_equal(r->npreemptions, 3);
    assert_string_equal(f.run[r->preemptions[0].victim].id, "n-new-p0");
    assert_string_equal(f.run[r->preemptions[1].victim].id, "n-old-p0");
    assert_string_equal(f.run[r->preemptions[2].victim].id, "s-p1");
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(r->preemptions[i].kind, ADMIT_RECLAIM);
        assert_string_equal(r->preemptions[i].for_id, "mine");
    }
    assert_int_equal(pending(r, "mine")->reason, ADMIT_PREEMPTING);
    assert_string_equal(message(&f, "mine", buf, sizeof buf),
                        "waiting for 3 preempted jobs to stop (reclaiming the team's quota)");

    /* Next round: the victims are stopping; nobody more is preempted, mine waits for them. */
    for (size_t i = 0; i < 3; i++)
        f.run[r->preemptions[i].victim].stopping = 1;
    f.next[l] = 0;
    r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "mine")->reason, ADMIT_NO_CAPACITY);
    assert_string_equal(message(&f, "mine", buf, sizeof buf),
                        "the cluster has 0 free a100 and 8 being given back; this job needs 6");

    /* A lender's jobs are taken only while it borrows: once nlp is back at its nominal 8, its
     * p5 job stays, and a head it would not satisfy preempts nobody. */
    fix g;
    fix_init(&g, 16, 0);
    v = team(&g, "vision", 1, 8, 0, 0, 0);
    n = team(&g, "nlp", 1, 8, 8, 0, 0);
    running(&g, "n-p5", n, 5, 300, 8, 0);
    running(&g, "n-p0", n, 0, 100, 2, 0);
    running(&g, "v", v, 0, 100, 4, 0);
    l = line(&g, v, -1, -1);
    push(&g, l, job(&g, "mine", 0, 2, 0)); /* 4 + 2: within nominal; 2 free, 2 short */
    r = decide(&g, 0);
    assert_int_equal(r->npreemptions, 0); /* 2 free: it fits */
    assert_int_equal(r->nadmitted, 1);
    g.lines[l].head.req[A100] = 4; /* 2 short: n-p0 frees them */
    r = decide(&g, 0);
    assert_int_equal(r->npreemptions, 1);
    assert_string_equal(g.run[r->preemptions[0].victim].id, "n-p0");
    g.res[A100].free = 0; /* 4 short now, but nlp lends only 2 */
    r = decide(&g, 0);
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "mine")->reason, ADMIT_NO_CAPACITY);
    fix_free(&f);
    fix_free(&g);
}

static void test_reclaim_preempts_nobody_when_it_cannot_free_enough(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 16, 0);
    size_t v = team(&f, "vision", 1, 12, 0, 0, 0);
    size_t n = team(&f, "nlp", 1, 8, 8, 0, 0);
    running(&f, "n1", n, 0, 1, 8, 0);
    running(&f, "n2", n, 0, 2, 2, 0); /* borrows 2 */
    running(&f, "v1", v, 0, 1, 6, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "mine", 0, 6, 0)); /* needs 6, only 2 are borrowed */
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "mine")->reason, ADMIT_NO_CAPACITY);
    /* A job that would borrow reclaims nothing either. */
    f.lines[l].head.req[A100] = 10; /* 6 + 10 > 12 */
    f.teams[v].borrow[A100] = 8;
    r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 0);
    fix_free(&f);
}

/* ---- within-team priority preemption ---- */

static void test_priority_preemption_on_and_off(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 8, 0);
    size_t v = team(&f, "vision", 1, 8, 0, 0, 0);
    running(&f, "low-old", v, 1, 100, 4, 0);
    running(&f, "low-new", v, 1, 200, 4, 0);
    size_t l = line(&f, v, -1, -1);
    push(&f, l, job(&f, "urgent", 10, 4, 0));
    char buf[256];
    /* Off (the default): urgent waits on the team's quota. */
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "urgent")->reason, ADMIT_QUOTA_EXCEEDED);
    assert_string_equal(message(&f, "urgent", buf, sizeof buf),
                        "team vision uses 8 of 8 a100 and borrows 0 of 0; this job needs 4; the "
                        "cohort has 0 idle a100");
    /* On: the most recently started of the lowest priority goes. */
    f.teams[v].preempt_within = 1;
    r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 1);
    assert_string_equal(f.run[r->preemptions[0].victim].id, "low-new");
    assert_int_equal(r->preemptions[0].kind, ADMIT_PRIORITY);
    assert_string_equal(message(&f, "urgent", buf, sizeof buf),
                        "waiting for 1 preempted job to stop (by priority)");
    /* A lower job of another GPU type gives back nothing it lacks: it stays. */
    fix g;
    fix_init(&g, 8, 4);
    v = team(&g, "vision", 1, 8, 0, 4, 0);
    g.teams[v].preempt_within = 1;
    running(&g, "low-a100", v, 1, 100, 8, 0);
    running(&g, "low-h100", v, 0, 300, 0, 4);
    size_t lg = line(&g, v, -1, -1);
    push(&g, lg, job(&g, "urgent", 10, 4, 0));
    r = decide(&g, 0);
    assert_int_equal(r->npreemptions, 1);
    assert_string_equal(g.run[r->preemptions[0].victim].id, "low-a100");
    fix_free(&g);
    /* Equal priority never preempts. */
    f.lines[l].head.priority = 1;
    r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 0);
    fix_free(&f);
}

/* ---- no cascade ---- */

static void test_no_cascade(void **state)
{
    (void)state;
    fix f;
    /* vision (nominal 4, borrows up to 4) runs 8 a100 of low priority; nlp (nominal 4) waits for
     * its quota. vision goes first (its share, 8/8 over weight 10, is below nlp's 4/4 of h100).
     * Its urgent job could preempt one of its own, but it would then borrow 4 that nlp's head
     * reclaims in the same round: a cascade. So only the reclaim happens. */
    fix_init(&f, 8, 4);
    size_t v = team(&f, "vision", 10, 4, 4, 0, 0);
    size_t n = team(&f, "nlp", 1, 4, 0, 4, 0);
    f.teams[v].preempt_within = 1;
    running(&f, "v-low1", v, 0, 100, 4, 0);
    running(&f, "v-low2", v, 0, 200, 4, 0);
    running(&f, "n-h", n, 0, 50, 0, 4);
    size_t lv = line(&f, v, -1, -1), ln = line(&f, n, -1, -1);
    push(&f, lv, job(&f, "urgent", 10, 4, 0));
    push(&f, ln, job(&f, "nlp1", 0, 4, 0));
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 1);
    assert_string_equal(r->preemptions[0].for_id, "nlp1");
    assert_int_equal(r->preemptions[0].kind, ADMIT_RECLAIM);
    assert_string_equal(f.run[r->preemptions[0].victim].id, "v-low2");
    assert_int_equal(pending(r, "urgent")->reason, ADMIT_QUOTA_EXCEEDED);

    /* Without nlp's head, vision's urgent job preempts its own low one (it borrows, but nobody
     * could reclaim it this round). */
    f.lines[ln].has_head = 0;
    r = decide(&f, 0);
    assert_int_equal(r->npreemptions, 1);
    assert_string_equal(r->preemptions[0].for_id, "urgent");
    assert_int_equal(r->preemptions[0].kind, ADMIT_PRIORITY);
    fix_free(&f);
}

/*
 * What a team's head within its nominal quota asks for is not idle for another team to borrow:
 * the victim of a reclaim, back in line and older than the job it made room for, does not take
 * that room again by borrowing (it would only be preempted again), even when the shares tie.
 */
static void test_a_borrower_leaves_what_a_head_within_quota_waits_for(void **state)
{
    (void)state;
    fix f;
    char buf[256];
    fix_init(&f, 24, 0);
    size_t v = team(&f, "vision", 1, 16, 0, 0, 0);
    size_t n = team(&f, "nlp", 1, 8, 16, 0, 0);
    running(&f, "v1", v, 0, 100, 8, 0);
    running(&f, "n1", n, 0, 50, 8, 0); /* 8 free: n2's, which stopped for v2 */
    size_t ln = line(&f, n, -1, -1), lv = line(&f, v, -1, -1);
    admit_job n2 = job(&f, "n2", 0, 8, 0);
    n2.preempted = 1;
    push(&f, ln, n2);
    push(&f, lv, job(&f, "v2", 0, 8, 0));
    admit_result *r = decide(&f, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "v2");
    assert_int_equal(r->npreemptions, 0);
    assert_int_equal(pending(r, "n2")->reason, ADMIT_PREEMPTED);
    assert_int_equal(pending(r, "n2")->facts.cause, ADMIT_QUOTA_EXCEEDED);
    assert_string_equal(message(&f, "n2", buf, sizeof buf),
                        "preempted; now: team nlp uses 8 of 8 a100 and borrows 0 of 16; this job "
                        "needs 8; the cohort has 0 idle a100");

    /* vision's head held back by its queue's limit claims nothing: nlp borrows. */
    fix g;
    fix_init(&g, 24, 0);
    v = team(&g, "vision", 1, 16, 0, 0, 0);
    n = team(&g, "nlp", 1, 8, 16, 0, 0);
    running(&g, "v1", v, 0, 100, 8, 0);
    running(&g, "n1", n, 0, 50, 8, 0);
    g.rooms[g.nrooms] = (admit_room){ADMIT_ROOM_QUEUE, "vq", 1, 1};
    int full = (int)g.nrooms++;
    ln = line(&g, n, -1, -1);
    lv = line(&g, v, full, -1);
    push(&g, ln, job(&g, "n2", 0, 8, 0));
    push(&g, lv, job(&g, "v2", 0, 8, 0));
    r = decide(&g, 0);
    assert_string_equal(admitted(r, buf, sizeof buf), "n2");
    assert_int_equal(pending(r, "v2")->reason, ADMIT_QUEUE_LIMIT);
    fix_free(&f);
    fix_free(&g);
}

/* ---- positions ---- */

static void test_positions(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 0, 0); /* nothing free: every head waits */
    size_t a = team(&f, "alpha", 1, 8, 0, 0, 0);
    size_t b = team(&f, "beta", 1, 8, 0, 0, 0);
    running(&f, "r", a, 0, 1, 0, 0);
    f.teams[a].used[A100] = 4; /* alpha's share 4/16, beta's 0 */
    size_t la1 = line(&f, a, -1, -1), la2 = line(&f, a, -1, -1);
    size_t lb1 = line(&f, b, -1, -1), lb2 = line(&f, b, -1, -1);
    push(&f, la1, job(&f, "a-lo", 0, 2, 0));
    push(&f, la2, job(&f, "a-hi", 5, 2, 0));
    push(&f, lb1, job(&f, "b-old", 0, 4, 0));
    push(&f, lb2, job(&f, "b-new", 0, 2, 0));
    push(&f, lb2, job(&f, "b-deep", 0, 2, 0)); /* not a head: no position */
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_int_equal(r->nadmitted, 0);
    assert_int_equal(r->npending, 4);
    /* beta first (0/16): b-old (beta 4/16 = alpha's; tie: a-hi has priority 5), a-hi (alpha
     * 6/16), b-new (beta 4/16 < 6/16), a-lo. */
    static const struct {
        const char *id;
        int64_t pos, team_pos;
    } want[] = {{"b-old", 1, 1}, {"a-hi", 2, 1}, {"b-new", 3, 2}, {"a-lo", 4, 2}};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(r->pending[i].job.id, want[i].id);
        assert_int_equal(r->pending[i].position, want[i].pos);
        assert_int_equal(r->pending[i].team_position, want[i].team_pos);
    }
    assert_int_equal(pending(r, "b-old")->reason, ADMIT_NO_CAPACITY);
    assert_int_equal(pending(r, "a-lo")->reason, ADMIT_BEHIND);
    (void)buf;
    fix_free(&f);
}

static void test_a_preempted_job_says_so(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 0, 0);
    size_t a = team(&f, "alpha", 1, 8, 0, 0, 0);
    size_t l = line(&f, a, -1, -1);
    admit_job j = job(&f, "back", 0, 2, 0);
    j.preempted = 1;
    push(&f, l, j);
    char buf[256];
    admit_result *r = decide(&f, 0);
    assert_int_equal(pending(r, "back")->reason, ADMIT_PREEMPTED);
    assert_string_equal(admit_reason_name(pending(r, "back")->reason), "Preempted");
    assert_string_equal(message(&f, "back", buf, sizeof buf),
                        "preempted; now: the cluster has 0 free a100; this job needs 2");
    fix_free(&f);
}

static void test_bad_snapshots_are_refused(void **state)
{
    (void)state;
    fix f;
    fix_init(&f, 8, 0);
    size_t a = team(&f, "alpha", 1, 8, 0, 0, 0);
    size_t l = line(&f, a, -1, -1);
    push(&f, l, job(&f, "j", 0, 1, 0));
    decide(&f, 0); /* fills snap */
    f.teams[a].weight = 0;
    char msg[128] = "";
    assert_int_equal(admit_round(&f.snap, &f.r, msg, sizeof msg), TY_EINVAL);
    assert_string_equal(msg, "a team's weight is not > 0");
    f.teams[a].weight = 1;
    f.lines[l].room[0] = 3;
    f.snap.lines = f.lines;
    assert_int_equal(admit_round(&f.snap, &f.r, msg, sizeof msg), TY_EINVAL);
    assert_string_equal(msg, "a line's room is out of range");
    f.lines[l].room[0] = -1;
    f.lines[l].head.req[MEM] = ADMIT_MAX_QTY + 1; /* sums could overflow */
    assert_int_equal(admit_round(&f.snap, &f.r, msg, sizeof msg), TY_EINVAL);
    assert_string_equal(msg, "a request is negative or too large");
    fix_free(&f);
}

/* ---- invariants on seeded random snapshots ---- */

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static void random_fix(fix *f)
{
    fix_init(f, 8 + (int64_t)rnd(40), 4 + (int64_t)rnd(20));
    size_t nt = 2 + rnd(5);
    int64_t free_a = f->res[A100].free, free_h = f->res[H100].free;
    for (size_t t = 0; t < nt; t++) {
        static const char *const names[] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
        size_t x = team(f, names[t], 0.5 + (double)rnd(4), (int64_t)rnd(16), (int64_t)rnd(8),
                        (int64_t)rnd(8), rnd(4) ? (int64_t)rnd(4) : ADMIT_UNLIMITED);
        f->teams[x].preempt_within = (int)rnd(2);
    }
    /* Running jobs within the cluster (they may be over quota: quotas change). */
    size_t nr = rnd(20);
    for (size_t i = 0; i < nr; i++) {
        int64_t ga = (int64_t)rnd(5), gh = rnd(3) ? 0 : (int64_t)rnd(3);
        if (ga > f->res[A100].free || gh > f->res[H100].free)
            continue;
        char id[48];
        snprintf(id, sizeof id, "r%zu", i);
        size_t k = running(f, id, rnd(nt), (int64_t)rnd(4), (int64_t)rnd(1000), ga, gh);
        f->run[k].stopping = rnd(8) == 0;
    }
    (void)free_a;
    (void)free_h;
    f->rooms[0] = (admit_room){ADMIT_ROOM_QUEUE, "q", (int)rnd(12) - 1, (int)rnd(3)};
    f->nrooms = 1;
    size_t nl = 1 + rnd(12);
    for (size_t i = 0; i < nl; i++) {
        size_t l = line(f, rnd(nt), rnd(2) ? 0 : -1, -1);
        size_t nj = rnd(6);
        for (size_t j = 0; j < nj; j++) {
            char id[48];
            snprintf(id, sizeof id, "p%zu.%zu", i, j);
            int h = rnd(3) == 0;
            push(f, l,
                 job(f, id, (int64_t)rnd(6), h ? 0 : (int64_t)rnd(6), h ? 1 + (int64_t)rnd(4) : 0));
        }
    }
}

static void check_invariants(fix *f, const admit_result *r)
{
    int64_t used[MAX_T][NRES], cused[NRES] = {0}, total[NRES] = {0};
    for (size_t t = 0; t < f->nteams; t++)
        for (size_t k = 0; k < NRES; k++) {
            used[t][k] = f->teams[t].used[k];
            cused[k] += used[t][k];
            total[k] += f->teams[t].nominal[k];
        }
    int64_t freecap[NRES];
    for (size_t k = 0; k < NRES; k++)
        freecap[k] = f->res[k].free;
    for (size_t i = 0; i < r->nadmitted; i++) {
        const admit_admitted *a = &r->admitted[i];
        size_t t = f->lines[a->line].team;
        const admit_team *tm = &f->teams[t];
        for (size_t k = 0; k < NRES; k++) {
            int64_t q = a->job.req[k];
            if (!q)
                continue;
            freecap[k] -= q;
            assert_true(freecap[k] >= 0); /* never over capacity */
            if (tm->nominal[k] == ADMIT_UNLIMITED)
                continue;
            if (used[t][k] + q > tm->nominal[k]) { /* borrows: within its limit and the idle */
                if (tm->borrow[k] != ADMIT_UNLIMITED)
                    assert_true(used[t][k] + q <= tm->nominal[k] + tm->borrow[k]);
                assert_true(cused[k] + q <= total[k]);
            }
            used[t][k] += q;
            cused[k] += q;
        }
    }
    /* No cascade: a job that preempts is not admitted this round, a victim was running and not
     * stopping, is chosen once, and a preemptor's team never loses a job to reclaim. */
    for (size_t i = 0; i < r->npreemptions; i++) {
        const admit_preemption *p = &r->preemptions[i];
        assert_true(p->victim < f->nrun);
        assert_false(f->run[p->victim].stopping);
        for (size_t j = 0; j < r->npreemptions; j++)
            if (j != i)
                assert_true(r->preemptions[j].victim != p->victim);
        for (size_t j = 0; j < r->nadmitted; j++)
            assert_true(strcmp(r->admitted[j].job.id, p->for_id) != 0);
        size_t pt = f->lines[p->for_line].team;
        if (p->kind == ADMIT_RECLAIM) {
            assert_true(f->run[p->victim].team != pt);
        } else {
            assert_true(f->run[p->victim].team == pt);
            assert_true(f->teams[pt].preempt_within);
        }
    }
    /* Every line with a head left has exactly one pending entry; positions are 1..n. */
    for (size_t i = 0; i < r->npending; i++)
        assert_int_equal(r->pending[i].position, (int64_t)i + 1);
}

static void test_invariants_on_random_snapshots(void **state)
{
    (void)state;
    rng = 0x9e3779b97f4a7c15ULL;
    for (int round = 0; round < 2000; round++) {
        fix *f = malloc(sizeof *f);
        fix *g = malloc(sizeof *g);
        assert_non_null(f);
        assert_non_null(g);
        uint64_t seed = rng;
        random_fix(f);
        rng = seed; /* the same snapshot again */
        random_fix(g);
        admit_result *r = decide(f, (int)rnd(8));
        check_invariants(f, r);
        /* Determinism: the same snapshot, the same decisions. */
        admit_result *q = decide(g, f->snap.max_admits);
        assert_int_equal(r->nadmitted, q->nadmitted);
        assert_int_equal(r->npreemptions, q->npreemptions);
        assert_int_equal(r->npending, q->npending);
        for (size_t i = 0; i < r->nadmitted; i++)
            assert_string_equal(r->admitted[i].job.id, q->admitted[i].job.id);
        for (size_t i = 0; i < r->npreemptions; i++)
            assert_int_equal(r->preemptions[i].victim, q->preemptions[i].victim);
        for (size_t i = 0; i < r->npending; i++) {
            char m1[256], m2[256];
            assert_string_equal(r->pending[i].job.id, q->pending[i].job.id);
            assert_int_equal(r->pending[i].reason, q->pending[i].reason);
            assert_string_equal(admit_message(&f->snap, &r->pending[i], m1, sizeof m1),
                                admit_message(&g->snap, &q->pending[i], m2, sizeof m2));
        }
        fix_free(f);
        fix_free(g);
        free(f);
        free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_job_within_quota_is_admitted),
        cmocka_unit_test(test_borrowing_up_to_the_limit),
        cmocka_unit_test(test_within_quota_but_the_cluster_is_full),
        cmocka_unit_test(test_drf_order_between_three_teams_with_weights),
        cmocka_unit_test(test_a_team_blocked_on_quota_blocks_nobody_else),
        cmocka_unit_test(test_no_capacity_stops_its_gpu_type_only),
        cmocka_unit_test(test_the_backend_says_never),
        cmocka_unit_test(test_queue_limits_and_sweep_parallelism),
        cmocka_unit_test(test_reclaim_picks_borrowers_lowest_priority_then_newest),
        cmocka_unit_test(test_reclaim_preempts_nobody_when_it_cannot_free_enough),
        cmocka_unit_test(test_priority_preemption_on_and_off),
        cmocka_unit_test(test_no_cascade),
        cmocka_unit_test(test_a_borrower_leaves_what_a_head_within_quota_waits_for),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_a_preempted_job_says_so),
        cmocka_unit_test(test_bad_snapshots_are_refused),
        cmocka_unit_test(test_invariants_on_random_snapshots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
