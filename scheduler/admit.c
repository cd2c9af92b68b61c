/*
 * admit.c - the admission policy (see admit.h for the rules).
 *
 * A round works on copies it owns: the lines' heads, the teams' usage and shares, the free
 * capacity, the rooms. Each step picks the team with the lowest weighted dominant share among
 * those with a head that may be tried (a scan of the teams, each keeping its lines), tries that
 * team's best head and records what became of it. A head that waits keeps its line out of the
 * round. The working memory lives in the result and is reused by the next round.
 */
#include "scheduler/admit.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L_EMPTY = 0, L_OPEN, L_WAIT };

typedef struct line_st {
    admit_job head;
    int state; /* L_EMPTY, L_OPEN (may be tried), L_WAIT (its reason is set) */
    int cls;   /* the first GPU resource it asks for, or nres: no GPU */
    admit_reason reason;
    admit_facts facts;
    int claims; /* its head fits its team's nominal quota: counted in round_st.claim */
} line_st;

typedef struct team_st {
    int64_t used[ADMIT_MAX_RES];
    double share;
    uint32_t blocked; /* classes stopped for this team (quota) */
    int stale;        /* best must be found again */
    size_t best;      /* its best head that may be tried (SIZE_MAX: none) */
    size_t first, n;  /* its lines in work.byteam[first..first+n) */
} team_st;

typedef struct work {
    line_st *ls;
    size_t *byteam; /* line indices grouped by team */
    team_st *ts;
    size_t *taken;             /* per team: its heads given a position */
    int64_t *scratch;          /* 2 x teams x ADMIT_MAX_RES */
    const char **team_blocker; /* teams x classes: the head that stopped the class */
    size_t *order;             /* running jobs in victim order */
    unsigned char *victim;     /* per running job: 2 chosen for this head, 1 this round */
    int *rooms;
    size_t *tmp;    /* a merge sort's buffer: lines + running */
    size_t *heap;   /* teams, ordered for positions */
    size_t cap[11]; /* each array's capacity, in the order above */
    size_t cap_admitted, cap_failed, cap_preempt, cap_pending;
} work;

/* The round's state beside the snapshot. */
typedef struct round_st {
    const admit_snapshot *s;
    admit_result *r;
    work *w;
    size_t R;
    int64_t total[ADMIT_MAX_RES]; /* cohort totals; ADMIT_UNLIMITED */
    int64_t cused[ADMIT_MAX_RES]; /* cohort usage */
    int64_t free[ADMIT_MAX_RES];
    int64_t releasing[ADMIT_MAX_RES];
    uint32_t gblocked; /* classes stopped for every team (capacity) */
    const char *gblocker[ADMIT_MAX_RES + 1];
    admit_reason gcause[ADMIT_MAX_RES + 1];
    int64_t rc[ADMIT_MAX_RES]; /* heads fitting their nominal quota that ask for a resource */
    int64_t *rc_team;          /* the same per team (the second third of w->scratch) */
    int64_t claim[ADMIT_MAX_RES]; /* what those heads ask for: not idle for a borrower */
    int64_t *claim_team;          /* the same per team (the last third of w->scratch) */
    int sorted;                /* w->order is ready */
} round_st;

static int grow(void **p, size_t *cap, size_t want, size_t size)
{
    if (want <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < want)
        c *= 2;
    void *g = realloc(*p, c * size);
    if (!g)
        return -1;
    *p = g;
    *cap = c;
    return 0;
}

void admit_result_init(admit_result *r)
{
    memset(r, 0, sizeof *r);
}

void admit_result_free(admit_result *r)
{
    if (!r)
        return;
    work *w = r->priv;
    if (w) {
        free(w->ls);
        free(w->ts);
        free(w->byteam);
        free(w->order);
        free(w->victim);
        free(w->scratch);
        free(w->team_blocker);
        free(w->rooms);
        free(w->taken);
        free(w->tmp);
        free(w->heap);
        free(w);
    }
    free(r->admitted);
    free(r->failed);
    free(r->preemptions);
    free(r->pending);
    memset(r, 0, sizeof *r);
}

/* ---- quantities ---------------------------------------------------------- */

static int limited(int64_t v)
{
    return v != ADMIT_UNLIMITED;
}

static double team_share(const round_st *st, const admit_team *t, const int64_t *used)
{
    double m = 0;
    for (size_t k = 0; k < st->R; k++)
        if (limited(st->total[k]) && st->total[k] > 0) {
            double x = (double)used[k] / (double)st->total[k];
            if (x > m)
                m = x;
        }
    return m / t->weight;
}

static int job_class(const admit_snapshot *s, const admit_job *j)
{
    for (size_t k = 0; k < s->nres; k++)
        if (s->res[k].kind == ADMIT_RES_GPU && j->req[k] > 0)
            return (int)k;
    return (int)s->nres;
}

/* Within nominal on every resource. */
static int fits_nominal(const round_st *st, const admit_team *t, const int64_t *used,
                        const admit_job *j)
{
    for (size_t k = 0; k < st->R; k++)
        if (j->req[k] > 0 && limited(t->nominal[k]) && used[k] + j->req[k] > t->nominal[k])
            return 0;
    return 1;
}

/*
 * Within nominal + borrowing and the cohort's idle, given the team's usage `used` and the cohort's
 * `cused`. 1 when it fits; else 0 with *f describing the first resource that does not.
 */
static int fits_quota(const round_st *st, const admit_team *t, const int64_t *used,
                      const int64_t *cused, const admit_job *j, admit_facts *f)
{
    size_t ti = (size_t)(t - st->s->teams);
    for (size_t k = 0; k < st->R; k++) {
        int64_t q = j->req[k];
        if (q <= 0 || !limited(t->nominal[k]) || used[k] + q <= t->nominal[k])
            continue;
        /* Other teams' heads within their nominal quota leave nothing idle of what they ask. */
        int64_t claimed = st->claim[k] - st->claim_team[ti * st->R + k];
        int over_limit = limited(t->borrow[k]) && used[k] + q > t->nominal[k] + t->borrow[k];
        int over_cohort = limited(st->total[k]) && cused[k] + claimed + q > st->total[k];
        if (!over_limit && !over_cohort)
            continue;
        if (f) {
            f->res = (int)k;
            f->used = used[k];
            f->nominal = t->nominal[k];
            f->borrowed = used[k] > t->nominal[k] ? used[k] - t->nominal[k] : 0;
            f->borrow = t->borrow[k];
            f->need = q;
            f->idle = limited(st->total[k]) && st->total[k] > cused[k] + claimed
                          ? st->total[k] - cused[k] - claimed
                          : 0;
            if (!limited(st->total[k]))
                f->idle = ADMIT_UNLIMITED;
        }
        return 0;
    }
    return 1;
}

/* The first resource whose free capacity (plus extra, when not NULL) does not hold j; -1: none. */
static int short_of(const round_st *st, const admit_job *j, const int64_t *extra)
{
    for (size_t k = 0; k < st->R; k++)
        if (j->req[k] > st->free[k] + (extra ? extra[k] : 0))
            return (int)k;
    return -1;
}

/* ---- the order ----------------------------------------------------------- */

/* -1, 0, 1: shares equal to 1e-12 relative count as a tie (weights are not exact). */
static int share_cmp(double a, double b)
{
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    if (fabs(a - b) <= 1e-12 * m)
        return 0;
    return a < b ? -1 : 1;
}

/* a before b in a team's order: priority, then age. */
static int head_before(const admit_job *a, const admit_job *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->seq < b->seq;
}

static int line_blocked(const round_st *st, size_t t, const line_st *l)
{
    uint32_t bit = 1u << l->cls;
    return (st->gblocked & bit) || (st->w->ts[t].blocked & bit);
}

static int room_left(const round_st *st, size_t line)
{
    const admit_line *al = &st->s->lines[line];
    for (int i = 0; i < 2; i++)
        if (al->room[i] >= 0 && st->w->rooms[al->room[i]] <= 0)
            return al->room[i];
    return -1;
}

/* A room's facts: active now (this round's admissions included) of its limit. */
static void room_facts(const round_st *st, int room, admit_facts *f)
{
    const admit_room *ro = &st->s->rooms[room];
    f->nominal = ro->limit;
    f->used = ro->active > ro->limit ? ro->active : ro->limit - st->w->rooms[room];
}

static void wait_line(line_st *l, admit_reason reason, const admit_facts *f)
{
    l->state = L_WAIT;
    l->reason = reason;
    l->facts = *f;
}

/* The team's best head that may be tried now; SIZE_MAX for none. Lines at their room wait. */
static size_t team_best(round_st *st, size_t t)
{
    work *w = st->w;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < w->ts[t].n; i++) {
        size_t li = w->byteam[w->ts[t].first + i];
        line_st *l = &w->ls[li];
        if (l->state != L_OPEN || line_blocked(st, t, l))
            continue;
        int room = room_left(st, li);
        if (room >= 0) {
            admit_facts f = {.res = -1, .room = room};
            room_facts(st, room, &f);
            wait_line(l,
                      st->s->rooms[room].kind == ADMIT_ROOM_QUEUE ? ADMIT_QUEUE_LIMIT
                                                                  : ADMIT_SWEEP_PARALLELISM,
                      &f);
            continue;
        }
        if (best == SIZE_MAX || head_before(&l->head, &w->ls[best].head))
            best = li;
    }
    return best;
}

/* ---- results --------------------------------------------------------------- */

static int push_admitted(round_st *st, size_t line, const admit_job *j, int borrows)
{
    admit_result *r = st->r;
    if (grow((void **)&r->admitted, &st->w->cap_admitted, r->nadmitted + 1, sizeof *r->admitted))
        return -1;
    r->admitted[r->nadmitted++] = (admit_admitted){.line = line, .job = *j, .borrows = borrows};
    return 0;
}

static int push_failed(round_st *st, size_t line, const admit_job *j, const char *why)
{
    admit_result *r = st->r;
    if (grow((void **)&r->failed, &st->w->cap_failed, r->nfailed + 1, sizeof *r->failed))
        return -1;
    admit_failed *f = &r->failed[r->nfailed++];
    f->line = line;
    f->job = *j;
    snprintf(f->why, sizeof f->why, "%s", why);
    return 0;
}

/* The line's next head after its head was admitted or failed. */
static void advance(round_st *st, size_t line)
{
    line_st *l = &st->w->ls[line];
    if (l->claims) {
        size_t t = st->s->lines[line].team;
        for (size_t k = 0; k < st->R; k++) {
            st->claim[k] -= l->head.req[k];
            st->claim_team[t * st->R + k] -= l->head.req[k];
        }
        l->claims = 0;
    }
    admit_job next;
    memset(&next, 0, sizeof next);
    int got = st->s->next(st->s->ctx, line, &next);
    int bad = 0;
    for (size_t k = 0; got == 1 && k < st->R; k++)
        bad |= next.req[k] < 0 || next.req[k] > ADMIT_MAX_QTY;
    if (got == 1 && !bad) {
        l->head = next;
        l->cls = job_class(st->s, &next);
        l->state = L_OPEN;
    } else {
        l->state = L_EMPTY;
    }
}

/* A stable merge sort of n indices by before(ctx, x, y), with tmp holding n. */
static void sort_idx(size_t *a, size_t n, size_t *tmp,
                     int (*before)(const round_st *, size_t, size_t), const round_st *ctx)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_idx(a, h, tmp, before, ctx);
    sort_idx(a + h, n - h, tmp, before, ctx);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = before(ctx, a[j], a[i]) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

/* ---- preemption ---------------------------------------------------------- */

/* Victim order: lowest priority, then most recently started, then the snapshot's order. */
static int victim_before(const round_st *st, size_t x, size_t y)
{
    const admit_running *a = &st->s->running[x], *b = &st->s->running[y];
    if (a->priority != b->priority)
        return a->priority < b->priority;
    if (a->started_ms != b->started_ms)
        return a->started_ms > b->started_ms;
    return x < y;
}

static void sort_victims(round_st *st)
{
    if (st->sorted)
        return;
    for (size_t i = 0; i < st->s->nrunning; i++)
        st->w->order[i] = i;
    sort_idx(st->w->order, st->s->nrunning, st->w->tmp, victim_before, st);
    st->sorted = 1;
}

/* Records the victims marked 2 in w->victim as preemptions for line (and marks them 1). */
static int commit_victims(round_st *st, size_t line, admit_preempt_kind kind, int *count)
{
    admit_result *r = st->r;
    *count = 0;
    for (size_t i = 0; i < st->s->nrunning; i++) {
        size_t v = st->w->order[i];
        if (st->w->victim[v] != 2)
            continue;
        st->w->victim[v] = 1;
        if (grow((void **)&r->preemptions, &st->w->cap_preempt, r->npreemptions + 1,
                 sizeof *r->preemptions))
            return -1;
        r->preemptions[r->npreemptions++] = (admit_preemption){
            .victim = v, .for_line = line, .for_id = st->w->ls[line].head.id, .kind = kind};
        (*count)++;
    }
    return 0;
}

static void undo_victims(round_st *st)
{
    for (size_t i = 0; i < st->s->nrunning; i++)
        if (st->w->victim[i] == 2)
            st->w->victim[i] = 0;
}

static int may_be_victim(const round_st *st, size_t v)
{
    return !st->s->running[v].stopping && st->w->victim[v] == 0;
}

/*
 * Reclaim for the head of line (team t, within its nominal quota): borrowers of other teams,
 * until free + releasing + freed holds the request. 1 when victims were chosen (marked 2).
 */
static int try_reclaim(round_st *st, size_t line, size_t t)
{
    const admit_snapshot *s = st->s;
    const admit_job *j = &st->w->ls[line].head;
    int64_t need[ADMIT_MAX_RES];
    int any = 0;
    for (size_t k = 0; k < st->R; k++) {
        need[k] = j->req[k] - st->free[k] - st->releasing[k];
        any |= need[k] > 0;
    }
    if (!any || s->nrunning == 0)
        return 0;
    sort_victims(st);
    int64_t *used = st->w->scratch; /* teams x resources: usage as victims leave */
    for (size_t u = 0; u < s->nteams; u++)
        memcpy(used + u * st->R, st->w->ts[u].used, st->R * sizeof *used);
    for (size_t i = 0; i < s->nrunning && any; i++) {
        size_t v = st->w->order[i];
        const admit_running *run = &s->running[v];
        if (run->team == t || !may_be_victim(st, v))
            continue;
        const admit_team *ut = &s->teams[run->team];
        int64_t *uu = used + run->team * st->R;
        int eligible = 0;
        for (size_t k = 0; k < st->R && !eligible; k++)
            eligible =
                need[k] > 0 && run->req[k] > 0 && limited(ut->nominal[k]) && uu[k] > ut->nominal[k];
        if (!eligible)
            continue;
        st->w->victim[v] = 2;
        any = 0;
        for (size_t k = 0; k < st->R; k++) {
            need[k] -= run->req[k];
            uu[k] -= run->req[k];
            any |= need[k] > 0;
        }
    }
    if (any) {
        undo_victims(st);
        return 0;
    }
    return 1;
}

/*
 * Priority preemption for the head of line within team t (its switch on): the team's running jobs
 * of lower priority until quota and capacity hold the request, if the preemptor then borrows
 * nothing another team's head could reclaim. 1 when victims were chosen (marked 2).
 */
static int try_priority(round_st *st, size_t line, size_t t)
{
    const admit_snapshot *s = st->s;
    const admit_team *team = &s->teams[t];
    const admit_job *j = &st->w->ls[line].head;
    if (s->nrunning == 0)
        return 0;
    sort_victims(st);
    int64_t used[ADMIT_MAX_RES], cused[ADMIT_MAX_RES], freed[ADMIT_MAX_RES];
    for (size_t k = 0; k < st->R; k++) {
        used[k] = st->w->ts[t].used[k];
        cused[k] = st->cused[k];
        freed[k] = st->releasing[k];
    }
    int ok = 0, took = 0;
    for (size_t i = 0; i < s->nrunning && !ok; i++) {
        size_t v = st->w->order[i];
        const admit_running *run = &s->running[v];
        if (run->team != t || run->priority >= j->priority || !may_be_victim(st, v))
            continue;
        /* Only a job that gives back something the head still lacks (quota or capacity). */
        int helps = 0;
        for (size_t k = 0; k < st->R && !helps; k++) {
            int64_t q = j->req[k];
            int lacks =
                q > st->free[k] + freed[k] ||
                (limited(team->nominal[k]) && used[k] + q > team->nominal[k] &&
                 ((limited(team->borrow[k]) && used[k] + q > team->nominal[k] + team->borrow[k]) ||
                  (limited(st->total[k]) && cused[k] + q > st->total[k])));
            helps = q > 0 && lacks && run->req[k] > 0;
        }
        if (!helps)
            continue;
        st->w->victim[v] = 2;
        took = 1;
        for (size_t k = 0; k < st->R; k++) {
            used[k] -= run->req[k];
            cused[k] -= run->req[k];
            freed[k] += run->req[k];
        }
        ok = fits_quota(st, team, used, cused, j, NULL) && short_of(st, j, freed) < 0;
    }
    /* No cascade: a resource it would borrow must be one no other team's head reclaims. */
    for (size_t k = 0; ok && k < st->R; k++)
        if (j->req[k] > 0 && limited(team->nominal[k]) && used[k] + j->req[k] > team->nominal[k] &&
            st->rc[k] - st->rc_team[t * st->R + k] > 0)
            ok = 0;
    if (!ok) {
        if (took)
            undo_victims(st);
        return 0;
    }
    return 1;
}

/* ---- one head -------------------------------------------------------------- */

static void block_global(round_st *st, const line_st *l, admit_reason why)
{
    st->gblocked |= 1u << l->cls;
    st->gblocker[l->cls] = l->head.id;
    st->gcause[l->cls] = why;
}

/* Tries the head of line (team t). 0, or -1 when memory runs out. */
static int try_head(round_st *st, size_t line, size_t t)
{
    const admit_snapshot *s = st->s;
    work *w = st->w;
    line_st *l = &w->ls[line];
    team_st *ts = &w->ts[t];
    const admit_team *team = &s->teams[t];
    const admit_job *j = &l->head;
    admit_facts qf = {.res = -1};
    int quota = fits_quota(st, team, ts->used, st->cused, j, &qf);
    int shortk = short_of(st, j, NULL);

    if (quota && shortk < 0) {
        char why[256] = "";
        admit_fit fit = s->reserve ? s->reserve(s->ctx, line, j, why, sizeof why) : ADMIT_FIT_OK;
        if (fit == ADMIT_FIT_NEVER) {
            if (push_failed(st, line, j, why))
                return -1;
            advance(st, line);
            return 0;
        }
        if (fit != ADMIT_FIT_OK) {
            admit_facts f = {.res = -1, .cause = ADMIT_NO_CAPACITY};
            snprintf(f.why, sizeof f.why, "%s", why[0] ? why : "the backend has no room now");
            wait_line(l, ADMIT_NO_CAPACITY, &f);
            block_global(st, l, ADMIT_NO_CAPACITY);
            return 0;
        }
        int borrows = 0;
        for (size_t k = 0; k < st->R; k++) {
            ts->used[k] += j->req[k];
            st->cused[k] += j->req[k];
            st->free[k] -= j->req[k];
            borrows |= limited(team->nominal[k]) && ts->used[k] > team->nominal[k];
        }
        for (int i = 0; i < 2; i++)
            if (s->lines[line].room[i] >= 0)
                w->rooms[s->lines[line].room[i]]--;
        ts->share = team_share(st, team, ts->used);
        if (push_admitted(st, line, j, borrows))
            return -1;
        advance(st, line);
        return 0;
    }
    if (quota && short_of(st, j, st->releasing) < 0) {
        /* What jobs being stopped give back will hold it: wait for that, take nothing more. */
        admit_facts f = {.res = shortk,
                         .need = j->req[shortk],
                         .idle = st->free[shortk],
                         .released = st->releasing[shortk]};
        for (size_t k = 0; k < st->R; k++) {
            int64_t take = j->req[k] - st->free[k];
            if (take > 0)
                st->releasing[k] -= take < st->releasing[k] ? take : st->releasing[k];
        }
        wait_line(l, ADMIT_NO_CAPACITY, &f);
        block_global(st, l, ADMIT_NO_CAPACITY);
        return 0;
    }
    admit_preempt_kind kind = 0;
    if (quota && fits_nominal(st, team, ts->used, j) && try_reclaim(st, line, t))
        kind = ADMIT_RECLAIM;
    else if (team->preempt_within && try_priority(st, line, t))
        kind = ADMIT_PRIORITY;
    if (kind) {
        admit_facts f = {.res = -1, .kind = kind};
        if (commit_victims(st, line, kind, &f.victims))
            return -1;
        wait_line(l, ADMIT_PREEMPTING, &f);
        block_global(st, l, ADMIT_PREEMPTING);
        return 0;
    }
    if (!quota) {
        wait_line(l, ADMIT_QUOTA_EXCEEDED, &qf);
        ts->blocked |= 1u << l->cls;
        w->team_blocker[t * (st->R + 1) + (size_t)l->cls] = j->id;
        return 0;
    }
    admit_facts f = {.res = shortk,
                     .need = j->req[shortk],
                     .idle = st->free[shortk],
                     .released = st->releasing[shortk]};
    wait_line(l, ADMIT_NO_CAPACITY, &f);
    block_global(st, l, ADMIT_NO_CAPACITY);
    return 0;
}

/* ---- positions ------------------------------------------------------------ */

static int line_before(const round_st *st, size_t x, size_t y)
{
    const admit_job *a = &st->w->ls[x].head, *b = &st->w->ls[y].head;
    if (a->priority != b->priority || a->seq != b->seq)
        return head_before(a, b);
    return x < y;
}

/* Team x goes before team y for the next position: share, then their next heads, then index. */
static int team_before(const round_st *st, size_t x, size_t y)
{
    const work *w = st->w;
    int c = share_cmp(w->ts[x].share, w->ts[y].share);
    if (c)
        return c < 0;
    size_t lx = w->byteam[w->ts[x].first + w->taken[x]];
    size_t ly = w->byteam[w->ts[y].first + w->taken[y]];
    if (lx != ly && (w->ls[lx].head.priority != w->ls[ly].head.priority ||
                     w->ls[lx].head.seq != w->ls[ly].head.seq))
        return head_before(&w->ls[lx].head, &w->ls[ly].head);
    return x < y;
}

static void heap_push(const round_st *st, size_t *h, size_t *n, size_t t)
{
    size_t i = (*n)++;
    h[i] = t;
    while (i > 0 && team_before(st, h[i], h[(i - 1) / 2])) {
        size_t p = (i - 1) / 2, x = h[i];
        h[i] = h[p];
        h[p] = x;
        i = p;
    }
}

static size_t heap_pop(const round_st *st, size_t *h, size_t *n)
{
    size_t top = h[0], i = 0;
    h[0] = h[--*n];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && team_before(st, h[l], h[m]))
            m = l;
        if (r < *n && team_before(st, h[r], h[m]))
            m = r;
        if (m == i)
            break;
        size_t x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
    return top;
}

/* ---- the round ------------------------------------------------------------- */

static ty_err check(const admit_snapshot *s, char *msg, size_t msglen)
{
    const char *why = NULL;
    if (!s->nres || s->nres > ADMIT_MAX_RES)
        why = "nres must be 1..ADMIT_MAX_RES";
    else if (!s->next)
        why = "no next callback";
    for (size_t k = 0; !why && k < s->nres; k++)
        if (s->res[k].free < 0 || s->res[k].free > ADMIT_MAX_QTY)
            why = "a resource's free capacity is negative or too large";
    for (size_t t = 0; !why && t < s->nteams; t++) {
        const admit_team *tm = &s->teams[t];
        if (!(tm->weight > 0) || !isfinite(tm->weight))
            why = "a team's weight is not > 0";
        for (size_t k = 0; !why && k < s->nres; k++)
            if ((tm->nominal[k] < 0 && tm->nominal[k] != ADMIT_UNLIMITED) ||
                (tm->borrow[k] < 0 && tm->borrow[k] != ADMIT_UNLIMITED) || tm->used[k] < 0 ||
                tm->nominal[k] > ADMIT_MAX_QTY || tm->borrow[k] > ADMIT_MAX_QTY ||
                tm->used[k] > ADMIT_MAX_QTY)
                why = "a team's quota, borrowing limit or usage is negative or too large";
    }
    for (size_t i = 0; !why && i < s->nlines; i++) {
        const admit_line *l = &s->lines[i];
        if (l->team >= s->nteams)
            why = "a line's team is out of range";
        for (int x = 0; !why && x < 2; x++)
            if (l->room[x] < -1 || (l->room[x] >= 0 && (size_t)l->room[x] >= s->nrooms))
                why = "a line's room is out of range";
        for (size_t k = 0; !why && l->has_head && k < s->nres; k++)
            if (l->head.req[k] < 0 || l->head.req[k] > ADMIT_MAX_QTY)
                why = "a request is negative or too large";
    }
    for (size_t i = 0; !why && i < s->nrunning; i++) {
        if (s->running[i].team >= s->nteams)
            why = "a running job's team is out of range";
        for (size_t k = 0; !why && k < s->nres; k++)
            if (s->running[i].req[k] < 0 || s->running[i].req[k] > ADMIT_MAX_QTY)
                why = "a running job's request is negative or too large";
    }
    if (!why)
        return TY_OK;
    snprintf(msg, msglen, "%s", why);
    return TY_EINVAL;
}

static int prepare(round_st *st)
{
    const admit_snapshot *s = st->s;
    admit_result *r = st->r;
    work *w = r->priv;
    if (!w) {
        if (!(w = calloc(1, sizeof *w)))
            return -1;
        r->priv = w;
    }
    st->w = w;
    st->R = s->nres;
    size_t n = s->nlines + 1, T = s->nteams + 1, run = s->nrunning + 1;
    if (grow((void **)&w->ls, &w->cap[0], n, sizeof *w->ls) ||
        grow((void **)&w->byteam, &w->cap[1], n, sizeof *w->byteam) ||
        grow((void **)&w->ts, &w->cap[2], T, sizeof *w->ts) ||
        grow((void **)&w->taken, &w->cap[3], T, sizeof *w->taken) ||
        grow((void **)&w->scratch, &w->cap[4], 3 * T * ADMIT_MAX_RES, sizeof *w->scratch) ||
        grow((void **)&w->team_blocker, &w->cap[5], T * (ADMIT_MAX_RES + 1),
             sizeof *w->team_blocker) ||
        grow((void **)&w->order, &w->cap[6], run, sizeof *w->order) ||
        grow((void **)&w->victim, &w->cap[7], run, sizeof *w->victim) ||
        grow((void **)&w->rooms, &w->cap[8], s->nrooms + 1, sizeof *w->rooms) ||
        grow((void **)&w->tmp, &w->cap[9], n + run, sizeof *w->tmp) ||
        grow((void **)&w->heap, &w->cap[10], T, sizeof *w->heap))
        return -1;
    return 0;
}

ty_err admit_round(const admit_snapshot *snap, admit_result *r, char *msg, size_t msglen)
{
    r->nadmitted = r->nfailed = r->npreemptions = r->npending = 0;
    ty_err e = check(snap, msg, msglen);
    if (e != TY_OK)
        return e;
    round_st st;
    memset(&st, 0, sizeof st);
    st.s = snap;
    st.r = r;
    if (prepare(&st))
        goto nomem;
    work *w = st.w;
    size_t R = st.R, T = snap->nteams;
    st.rc_team = w->scratch + T * ADMIT_MAX_RES;
    memset(st.rc_team, 0, T * R * sizeof *st.rc_team);
    st.claim_team = w->scratch + 2 * T * ADMIT_MAX_RES;
    memset(st.claim_team, 0, T * R * sizeof *st.claim_team);
    memset(w->victim, 0, snap->nrunning);
    memset(w->team_blocker, 0, T * (R + 1) * sizeof *w->team_blocker);

    for (size_t k = 0; k < R; k++) {
        st.free[k] = snap->res[k].free;
        int64_t tot = 0;
        for (size_t t = 0; t < T; t++) {
            st.cused[k] += snap->teams[t].used[k];
            if (!limited(snap->teams[t].nominal[k]) || tot == ADMIT_UNLIMITED)
                tot = ADMIT_UNLIMITED;
            else
                tot += snap->teams[t].nominal[k];
        }
        st.total[k] = T ? tot : 0;
    }
    for (size_t i = 0; i < snap->nrunning; i++)
        if (snap->running[i].stopping)
            for (size_t k = 0; k < R; k++)
                st.releasing[k] += snap->running[i].req[k];
    for (size_t i = 0; i < snap->nrooms; i++) {
        const admit_room *ro = &snap->rooms[i];
        w->rooms[i] = ro->limit < 0 ? INT_MAX : ro->limit > ro->active ? ro->limit - ro->active : 0;
    }
    for (size_t t = 0; t < T; t++) {
        team_st *ts = &w->ts[t];
        memset(ts, 0, sizeof *ts);
        memcpy(ts->used, snap->teams[t].used, R * sizeof *ts->used);
        ts->stale = 1;
        ts->share = team_share(&st, &snap->teams[t], ts->used);
    }
    /* Lines grouped by team (a counting sort), heads copied, reclaimers counted. */
    for (size_t i = 0; i < snap->nlines; i++)
        w->ts[snap->lines[i].team].n++;
    for (size_t t = 0, at = 0; t < T; t++) {
        w->ts[t].first = at;
        at += w->ts[t].n;
        w->ts[t].n = 0;
    }
    for (size_t i = 0; i < snap->nlines; i++) {
        const admit_line *al = &snap->lines[i];
        team_st *ts = &w->ts[al->team];
        w->byteam[ts->first + ts->n++] = i;
        line_st *l = &w->ls[i];
        l->state = L_EMPTY;
        l->claims = 0;
        if (!al->has_head)
            continue;
        l->head = al->head;
        l->cls = job_class(snap, &al->head);
        l->state = L_OPEN;
        if (fits_nominal(&st, &snap->teams[al->team], ts->used, &l->head)) {
            for (size_t k = 0; k < R; k++)
                if (l->head.req[k] > 0) {
                    st.rc[k]++;
                    st.rc_team[al->team * R + k]++;
                }
            /* It claims what it asks for unless its queue or sweep holds it back. */
            if (room_left(&st, i) < 0) {
                l->claims = 1;
                for (size_t k = 0; k < R; k++) {
                    st.claim[k] += l->head.req[k];
                    st.claim_team[al->team * R + k] += l->head.req[k];
                }
            }
        }
    }

    /* Admission: the lowest share first, while a head may be tried. */
    for (;;) {
        if (snap->max_admits > 0 && r->nadmitted >= (size_t)snap->max_admits) {
            break;
        }
        size_t bt = SIZE_MAX, bl = SIZE_MAX;
        for (size_t t = 0; t < T; t++) {
            /* A team's best head changes only when one of its lines, its blocks, a shared room
             * or the global blocks change: found again only then. */
            if (w->ts[t].stale) {
                w->ts[t].best = team_best(&st, t);
                w->ts[t].stale = 0;
            }
            size_t li = w->ts[t].best;
            if (li == SIZE_MAX)
                continue;
            int c = bt == SIZE_MAX ? -1 : share_cmp(w->ts[t].share, w->ts[bt].share);
            if (c < 0 || (c == 0 && head_before(&w->ls[li].head, &w->ls[bl].head))) {
                bt = t;
                bl = li;
            }
        }
        if (bt == SIZE_MAX)
            break;
        uint32_t blocked = st.gblocked;
        size_t had = r->nadmitted;
        if (try_head(&st, bl, bt))
            goto nomem;
        w->ts[bt].stale = 1;
        const admit_line *al = &snap->lines[bl];
        if (st.gblocked != blocked ||
            (r->nadmitted != had && (al->room[0] >= 0 || al->room[1] >= 0)))
            for (size_t t = 0; t < T; t++)
                w->ts[t].stale = 1;
    }

    /* Every head left gets its reason. */
    for (size_t i = 0; i < snap->nlines; i++) {
        line_st *l = &w->ls[i];
        if (l->state != L_OPEN)
            continue;
        size_t t = snap->lines[i].team;
        int room = room_left(&st, i);
        admit_facts f = {.res = -1};
        if (room >= 0) {
            f.room = room;
            room_facts(&st, room, &f);
            wait_line(l,
                      snap->rooms[room].kind == ADMIT_ROOM_QUEUE ? ADMIT_QUEUE_LIMIT
                                                                 : ADMIT_SWEEP_PARALLELISM,
                      &f);
        } else if (!fits_quota(&st, &snap->teams[t], w->ts[t].used, st.cused, &l->head, &f)) {
            wait_line(l, ADMIT_QUOTA_EXCEEDED, &f);
        } else if (w->ts[t].blocked & (1u << l->cls)) {
            f.blocker = w->team_blocker[t * (R + 1) + (size_t)l->cls];
            f.cause = ADMIT_QUOTA_EXCEEDED;
            wait_line(l, ADMIT_BEHIND, &f);
        } else if (st.gblocked & (1u << l->cls)) {
            f.blocker = st.gblocker[l->cls];
            f.cause = st.gcause[l->cls];
            wait_line(l, ADMIT_BEHIND, &f);
        } else {
            wait_line(l, ADMIT_ROUND_CAP, &f);
        }
    }
    for (size_t i = 0; i < snap->nlines; i++) {
        line_st *l = &w->ls[i];
        if (l->state == L_WAIT && l->head.preempted && l->reason != ADMIT_PREEMPTING) {
            l->facts.cause = l->reason;
            l->reason = ADMIT_PREEMPTED;
        }
    }

    /* Positions: each team's waiting heads in its order, then the DRF order across teams. */
    size_t np = 0;
    for (size_t t = 0; t < T; t++) {
        team_st *ts = &w->ts[t];
        size_t keep = 0;
        for (size_t i = 0; i < ts->n; i++) {
            size_t li = w->byteam[ts->first + i];
            if (w->ls[li].state == L_WAIT)
                w->byteam[ts->first + keep++] = li;
        }
        ts->n = keep;
        sort_idx(w->byteam + ts->first, keep, w->tmp, line_before, &st);
        np += keep;
    }
    if (grow((void **)&r->pending, &w->cap_pending, np ? np : 1, sizeof *r->pending))
        goto nomem;
    int64_t *used = w->scratch; /* the usage as the remaining heads are taken in turn */
    size_t *taken = w->taken;
    memset(taken, 0, T * sizeof *taken);
    for (size_t t = 0; t < T; t++)
        memcpy(used + t * R, w->ts[t].used, R * sizeof *used);
    size_t nh = 0;
    for (size_t t = 0; t < T; t++)
        if (w->ts[t].n)
            heap_push(&st, w->heap, &nh, t);
    for (size_t pos = 0; pos < np; pos++) {
        size_t bt = heap_pop(&st, w->heap, &nh);
        size_t li = w->byteam[w->ts[bt].first + taken[bt]];
        line_st *l = &w->ls[li];
        taken[bt]++;
        r->pending[r->npending++] = (admit_pending){.line = li,
                                                    .job = l->head,
                                                    .reason = l->reason,
                                                    .facts = l->facts,
                                                    .position = (int64_t)pos + 1,
                                                    .team_position = (int64_t)taken[bt]};
        int64_t *u = used + bt * R;
        for (size_t k = 0; k < R; k++)
            u[k] += l->head.req[k];
        w->ts[bt].share = team_share(&st, &snap->teams[bt], u);
        if (taken[bt] < w->ts[bt].n)
            heap_push(&st, w->heap, &nh, bt);
    }
    return TY_OK;
nomem:
    r->nadmitted = r->nfailed = r->npreemptions = r->npending = 0;
    snprintf(msg, msglen, "out of memory");
    return TY_ENOMEM;
}

/* ---- words ----------------------------------------------------------------- */

const char *admit_reason_name(admit_reason reason)
{
    switch (reason) {
    case ADMIT_QUOTA_EXCEEDED:
        return "QuotaExceeded";
    case ADMIT_QUEUE_LIMIT:
        return "QueueLimit";
    case ADMIT_SWEEP_PARALLELISM:
        return "SweepParallelism";
    case ADMIT_NO_CAPACITY:
        return "NoCapacity";
    case ADMIT_PREEMPTING:
        return "Preempting";
    case ADMIT_PREEMPTED:
        return "Preempted";
    case ADMIT_BEHIND:
        return "Behind";
    case ADMIT_ROUND_CAP:
        return "RoundCap";
    }
    return "Unknown";
}

/* A quantity of resource k as a person writes it: "4", "2.5" cpus, "16Gi". */
static const char *qty(const admit_snapshot *s, int k, int64_t v, char *buf, size_t len)
{
    if (v == ADMIT_UNLIMITED) {
        snprintf(buf, len, "unlimited");
    } else if (s->res[k].kind == ADMIT_RES_CPU) {
        if (v % 1000 == 0)
            snprintf(buf, len, "%lld", (long long)(v / 1000));
        else
            snprintf(buf, len, "%lldm", (long long)v);
    } else if (s->res[k].kind == ADMIT_RES_MEMORY) {
        static const char *const unit[] = {"Gi", "Mi", "Ki"};
        static const int64_t size[] = {1LL << 30, 1LL << 20, 1LL << 10};
        size_t u = 0;
        while (u < 3 && (v == 0 || v % size[u] != 0))
            u++;
        if (u < 3)
            snprintf(buf, len, "%lld%s", (long long)(v / size[u]), unit[u]);
        else
            snprintf(buf, len, "%lld", (long long)v);
    } else {
        snprintf(buf, len, "%lld", (long long)v);
    }
    return buf;
}

static void facts_message(const admit_snapshot *s, const admit_pending *p, admit_reason reason,
                          char *buf, size_t len)
{
    const admit_facts *f = &p->facts;
    char a[32], b[32], c[32], d[32], e[32], g[32];
    const char *rn = f->res >= 0 ? s->res[f->res].name : "";
    switch (reason) {
    case ADMIT_QUOTA_EXCEEDED: {
        const char *team = s->teams[s->lines[p->line].team].name;
        if (f->idle == ADMIT_UNLIMITED)
            snprintf(buf, len, "team %s uses %s of %s %s and borrows %s of %s; this job needs %s",
                     team, qty(s, f->res, f->used, a, sizeof a),
                     qty(s, f->res, f->nominal, b, sizeof b), rn,
                     qty(s, f->res, f->borrowed, c, sizeof c),
                     qty(s, f->res, f->borrow, d, sizeof d), qty(s, f->res, f->need, e, sizeof e));
        else
            snprintf(buf, len,
                     "team %s uses %s of %s %s and borrows %s of %s; this job needs %s; the cohort "
                     "has %s idle %s",
                     team, qty(s, f->res, f->used, a, sizeof a),
                     qty(s, f->res, f->nominal, b, sizeof b), rn,
                     qty(s, f->res, f->borrowed, c, sizeof c),
                     qty(s, f->res, f->borrow, d, sizeof d), qty(s, f->res, f->need, e, sizeof e),
                     qty(s, f->res, f->idle, g, sizeof g), rn);
        break;
    }
    case ADMIT_QUEUE_LIMIT:
        snprintf(buf, len, "queue %s has %lld of its %lld jobs active", s->rooms[f->room].name,
                 (long long)f->used, (long long)f->nominal);
        break;
    case ADMIT_SWEEP_PARALLELISM:
        snprintf(buf, len, "sweep %s has %lld of its %lld trials active (its parallelism)",
                 s->rooms[f->room].name, (long long)f->used, (long long)f->nominal);
        break;
    case ADMIT_NO_CAPACITY:
        if (f->res < 0)
            snprintf(buf, len, "%s", f->why);
        else if (f->released > 0)
            snprintf(
                buf, len, "the cluster has %s free %s and %s being given back; this job needs %s",
                qty(s, f->res, f->idle, a, sizeof a), rn, qty(s, f->res, f->released, b, sizeof b),
                qty(s, f->res, f->need, c, sizeof c));
        else
            snprintf(buf, len, "the cluster has %s free %s; this job needs %s",
                     qty(s, f->res, f->idle, a, sizeof a), rn,
                     qty(s, f->res, f->need, b, sizeof b));
        break;
    case ADMIT_PREEMPTING:
        snprintf(buf, len, "waiting for %d preempted job%s to stop (%s)", f->victims,
                 f->victims == 1 ? "" : "s",
                 f->kind == ADMIT_RECLAIM ? "reclaiming the team's quota" : "by priority");
        break;
    case ADMIT_BEHIND:
        snprintf(buf, len, "behind job %s, which waits (%s)", f->blocker ? f->blocker : "?",
                 admit_reason_name(f->cause));
        break;
    case ADMIT_ROUND_CAP:
        snprintf(buf, len, "this round admitted its most jobs (%d); the next round goes on",
                 s->max_admits);
        break;
    case ADMIT_PREEMPTED:
        snprintf(buf, len, "preempted");
        break;
    }
}

char *admit_message(const admit_snapshot *snap, const admit_pending *p, char *buf, size_t len)
{
    if (!len)
        return buf;
    buf[0] = '\0';
    if (p->reason == ADMIT_PREEMPTED) {
        int n = snprintf(buf, len, "preempted; now: ");
        if (n > 0 && (size_t)n < len)
            facts_message(snap, p, p->facts.cause, buf + n, len - (size_t)n);
    } else {
        facts_message(snap, p, p->reason, buf, len);
    }
    return buf;
}
