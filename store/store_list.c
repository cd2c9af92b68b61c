/*
 * store_list.c - the filtered job listing, newest first, keyset-paginated.
 *
 * Why keyset pagination. A page is "the `limit` newest matching jobs with
 * seq < cursor", and the cursor handed back is the seq of the last job
 * returned. Unlike OFFSET, it costs the same on page 1 and page 10,000, and
 * jobs inserted while a client pages get higher seqs, so they never shift the
 * pages still to come: nothing is skipped or repeated.
 *
 * How a filter is answered. Every equality filter is a stream of seqs in
 * descending order read from an index range, and the page is the
 * intersection of the streams:
 *   states         one cursor per state on jobs(state) = (state, seq), merged
 *   queue [+state] one cursor per state on jobs(queue, state) = (queue, state, seq)
 *   each label     job_labels (key, value, seq)
 *   team           jobs(team) = (team, seq): the caller's team, for every non-admin
 *                  caller; on a one-team install it is dense and costs a step
 *                  forward per match, and a small team's jobs are a sparse stream
 *                  the leapfrog follows, so no team's page walks another's jobs
 *   name_prefix    the seqs of the name range of jobs(name), when the range
 *                  holds at most LIST_GATHER_MAX of them: they come out in name
 *                  order, go into a max-heap (linear time) and are popped only
 *                  as far as the listing goes
 *   none of these  the rowid itself
 * Streams are intersected by leapfrogging: each one in turn is asked for its
 * greatest seq <= the current target, which lowers the target, until all of
 * them agree. The cost follows the sparsest stream instead of the first one
 * SQLite would pick, so a rare label combined with a common state, or a rare
 * state combined with a common label, are both cheap. A cursor first steps
 * forward a few rows (dense streams) and re-seeks through its index when the
 * target is further away (sparse streams). Matching rows are then read by seq.
 *
 * A name_prefix range with more jobs than LIST_GATHER_MAX is a residual
 * check instead: on each row read when other streams exist, or else inline in
 * a scan of the rowid by windows of LIST_WINDOW seqs.
 *
 * created_after/before become seq bounds: ids are time-ordered and increase
 * with seq (store_id.c), so the first id at or after a timestamp, found in the
 * unique index on id, is the first seq created at or after it.
 *
 * Bounded work. A listing spends at most LIST_BUDGET units (about a
 * microsecond each: a cursor step, a seek, a row read, a window). Filters
 * whose matches are far apart (two common labels that rarely meet, a common
 * prefix whose jobs are old) could otherwise walk much of the table for one
 * page. When the budget runs out, the page is returned as it is, possibly
 * short or empty, with a cursor where the walk stopped: every seq above it has
 * been examined, so following the cursor still skips and repeats nothing, and
 * the cursor always moves. Clients follow the cursor until it is 0 rather
 * than stop at a short page.
 *
 * The whole listing runs in one read transaction, so every stream sees the
 * same snapshot. It looks for limit + 1 matches to know whether a next page
 * exists.
 */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

#define LIST_MAX_LIMIT 1000
#define LIST_MAX_LABELS 64
#define LIST_MAX_CURSORS (JOB_STATE_COUNT + LIST_MAX_LABELS + 2)
#define LIST_GATHER_MAX 16384 /* seqs of a name_prefix range gathered in memory */
#define LIST_STEP_TRIES 8     /* steps forward before a cursor re-seeks */
#define LIST_WINDOW 256       /* seqs per window of the residual prefix scan */
#define LIST_BUDGET 20000     /* work units per listing */
#define COST_STEP 1
#define COST_SEEK 2
#define COST_FETCH 4
#define COST_WINDOW LIST_WINDOW /* one per row examined */
#define GATHERED_PER_UNIT 16    /* index entries read sequentially per unit */

/* The limits in force; store_test_list_limits() lowers them for the tests. */
static size_t gather_max = LIST_GATHER_MAX;
static long budget_max = LIST_BUDGET;

static const char SQL_STREAM_ALL[] = "SELECT seq FROM jobs WHERE seq <= ?1 ORDER BY seq DESC";
static const char SQL_STREAM_STATE[] = "SELECT seq FROM jobs INDEXED BY jobs_state "
                                       "WHERE state = ?2 AND seq <= ?1 ORDER BY seq DESC";
static const char SQL_STREAM_QUEUE_STATE[] =
    "SELECT seq FROM jobs INDEXED BY jobs_queue_state "
    "WHERE queue = ?2 AND state = ?3 AND seq <= ?1 ORDER BY seq DESC";
static const char SQL_STREAM_TEAM[] = "SELECT seq FROM jobs INDEXED BY jobs_team "
                                      "WHERE team = ?2 AND seq <= ?1 ORDER BY seq DESC";
static const char SQL_STREAM_LABEL[] =
    "SELECT seq FROM job_labels "
    "WHERE key = ?2 AND value = ?3 AND seq <= ?1 ORDER BY seq DESC";
static const char SQL_STREAM_WINDOW[] =
    "SELECT seq FROM jobs WHERE seq <= ?1 AND seq >= ?2 "
    "AND name >= ?3 AND (?4 IS NULL OR name < ?4) ORDER BY seq DESC";
static const char SQL_NAME_RANGE[] = "SELECT seq FROM jobs INDEXED BY jobs_name "
                                     "WHERE name >= ?1 AND name < ?2 LIMIT ?3";
static const char SQL_NAME_FROM[] = "SELECT seq FROM jobs INDEXED BY jobs_name "
                                    "WHERE name >= ?1 LIMIT ?3";
static const char SQL_ID_FLOOR[] = "SELECT seq FROM jobs WHERE id >= ?1 ORDER BY id LIMIT 1";
static const char SQL_MAX_SEQ[] = "SELECT max(seq) FROM jobs";
static const char SQL_FETCH[] = "SELECT " STORE_JOB_COLUMNS " FROM jobs WHERE seq = ?1";
static const char SQL_FETCH_PREFIX[] =
    "SELECT " STORE_JOB_COLUMNS " FROM jobs "
    "WHERE seq = ?1 AND name >= ?2 AND (?3 IS NULL OR name < ?3)";

const char *const store_list_sql[] = {
    SQL_STREAM_ALL,    SQL_STREAM_STATE, SQL_STREAM_QUEUE_STATE, SQL_STREAM_LABEL,
    SQL_STREAM_WINDOW, SQL_NAME_RANGE,   SQL_NAME_FROM,          SQL_ID_FLOOR,
    SQL_MAX_SEQ,       SQL_FETCH,        SQL_FETCH_PREFIX,       SQL_STREAM_TEAM,
    NULL,
};

/*
 * A descending stream of seqs: a statement whose ?1 is the upper bound, a
 * window scan (?1 upper, ?2 lower bound of the window), or a max-heap.
 */
typedef struct cursor {
    sqlite3_stmt *st;
    int window;  /* st is SQL_STREAM_WINDOW */
    int64_t wlo; /* window: lower end of the window st is stepping in */
    int is_heap;
    int64_t *heap; /* may be NULL when empty */
    size_t nheap;
    int started;    /* head is valid */
    int positioned; /* st is stepping (its last step returned head) */
    int64_t head;   /* greatest seq <= the last bound asked; 0 when none */
} cursor;

/* The union of the cursors [first, first + n). */
typedef struct stream {
    size_t first, n;
} stream;

typedef struct plan {
    cursor cur[LIST_MAX_CURSORS];
    size_t ncur;
    stream str[LIST_MAX_LABELS + 4];
    size_t nstr;
    int64_t hi, lo;     /* seq range, inclusive */
    int empty;          /* the bounds exclude every job */
    long budget;        /* work units left */
    int64_t stopped_at; /* a window scan ran out of budget: seqs above it are examined */
    const char *prefix; /* checked on each row read when not NULL */
    char *prefix_end;   /* exclusive upper bound of the prefix range; NULL = none */
} plan;

static void heap_sift_down(int64_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] > h[m])
            m = l;
        if (r < n && h[r] > h[m])
            m = r;
        if (m == i)
            return;
        int64_t x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static void heap_make(int64_t *h, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        heap_sift_down(h, n, i);
}

static void heap_pop(int64_t *h, size_t *n)
{
    h[0] = h[--*n];
    heap_sift_down(h, *n, 0);
}

/* Steps a positioned statement forward a few rows, looking for a seq <= t.
 * *found = 1 with c->head set, or 0 (c->positioned is 0 when st ended). */
static ty_err step_forward(plan *p, cursor *c, int64_t t, int *found)
{
    *found = 0;
    for (int k = 0; c->positioned && k < LIST_STEP_TRIES; k++) {
        p->budget -= COST_STEP;
        int rc = sqlite3_step(c->st);
        if (rc == SQLITE_DONE) {
            c->positioned = 0;
            return TY_OK;
        }
        if (rc != SQLITE_ROW)
            return store_sqlite_err(rc);
        c->head = sqlite3_column_int64(c->st, 0);
        if (c->head <= t) {
            *found = 1;
            return TY_OK;
        }
    }
    return TY_OK;
}

/* (Re)starts st at bound t (and window lower end wlo); *found as above. */
static ty_err seek(plan *p, cursor *c, int64_t t, int64_t wlo, long cost, int *found)
{
    sqlite3_reset(c->st);
    sqlite3_bind_int64(c->st, 1, t);
    if (c->window)
        sqlite3_bind_int64(c->st, 2, wlo);
    p->budget -= cost;
    int rc = sqlite3_step(c->st);
    c->positioned = rc == SQLITE_ROW;
    *found = c->positioned;
    if (rc == SQLITE_ROW)
        c->head = sqlite3_column_int64(c->st, 0);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
}

/* The window scan: windows of LIST_WINDOW seqs downwards from t. Sets *v to
 * -1 when the budget ran out first (p->stopped_at says how far it got). */
static ty_err window_seek(plan *p, cursor *c, int64_t t, int64_t *v)
{
    int found = 0, windows = 0;
    ty_err e = TY_OK;
    if (c->positioned) {
        if ((e = step_forward(p, c, t, &found)) != TY_OK || found)
            goto out;
        if (!c->positioned && c->wlo - 1 < t)
            t = c->wlo - 1; /* that window is done: go on below it */
    }
    for (;; windows++) {
        if (t < p->lo) {
            c->head = 0;
            goto out;
        }
        if (windows > 0 && p->budget <= 0) {
            p->stopped_at = t;
            *v = -1;
            return TY_OK;
        }
        c->wlo = t - p->lo >= LIST_WINDOW ? t - LIST_WINDOW + 1 : p->lo;
        if ((e = seek(p, c, t, c->wlo, COST_WINDOW, &found)) != TY_OK || found)
            goto out;
        t = c->wlo - 1;
    }
out:
    *v = found ? c->head : 0;
    return e;
}

/*
 * The greatest seq <= t in the cursor's stream (0 when none; -1 when a window
 * scan ran out of budget). The bound never grows within a listing, so a head
 * obtained for an earlier, larger bound is still the answer when it is <= t.
 */
static ty_err cursor_seek(plan *p, cursor *c, int64_t t, int64_t *v)
{
    ty_err e = TY_OK;
    int found;
    if (c->started && c->head <= t) {
        *v = c->head;
        return TY_OK;
    }
    c->started = 1;
    if (c->is_heap) {
        while (c->nheap > 0 && c->heap[0] > t)
            heap_pop(c->heap, &c->nheap);
        c->head = c->nheap > 0 ? c->heap[0] : 0;
    } else if (c->window) {
        e = window_seek(p, c, t, v);
        if (*v < 0)
            c->started = 0;
        return e;
    } else if ((e = step_forward(p, c, t, &found)) == TY_OK && !found &&
               (e = seek(p, c, t, 0, COST_SEEK, &found)) == TY_OK && !found) {
        c->head = 0;
    }
    *v = c->head;
    return e;
}

static ty_err stream_seek(plan *p, const stream *s, int64_t t, int64_t *v)
{
    *v = 0;
    for (size_t i = s->first; i < s->first + s->n; i++) {
        int64_t x = 0;
        ty_err e = cursor_seek(p, &p->cur[i], t, &x);
        if (e != TY_OK || x < 0) {
            *v = x;
            return e;
        }
        if (x > *v)
            *v = x;
    }
    return TY_OK;
}

/* Adds a cursor on a cached statement; binds of ?2.. are left to the caller. */
static ty_err add_cursor(plan *p, store_conn *c, const char *sql, int inst, sqlite3_stmt **st)
{
    ty_err e = store_conn_stmt(c, sql, inst, st);
    if (e != TY_OK)
        return e;
    p->cur[p->ncur++] = (cursor){.st = *st};
    return TY_OK;
}

static void begin_stream(plan *p)
{
    p->str[p->nstr] = (stream){.first = p->ncur, .n = 0};
}

static void end_stream(plan *p)
{
    p->str[p->nstr].n = p->ncur - p->str[p->nstr].first;
    p->nstr++;
}

/* The first seq whose id is at or after ms; 0 when there is none. */
static ty_err id_floor(store_conn *c, int64_t ms, int64_t *seq)
{
    char id[STORE_ID_LEN + 1];
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_ID_FLOOR, 0, &st);
    *seq = 0;
    if (e != TY_OK)
        return e;
    store_id_encode(ms, 0, 0, id);
    store_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *seq = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
    return e;
}

/* Narrows [lo, hi] to the seqs that exist and to the created_* bounds (both
 * exclusive, 0 = none). A tight hi keeps every cursor, including a budget
 * cursor, inside the table. */
static ty_err apply_bounds(plan *p, store_conn *c, const store_job_filter *f)
{
    int64_t seq;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_MAX_SEQ, 0, &st);
    if (e != TY_OK)
        return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        if (sqlite3_column_int64(st, 0) < p->hi)
            p->hi = sqlite3_column_int64(st, 0);
    } else if (rc == SQLITE_ROW) {
        p->empty = 1; /* no jobs at all */
    } else {
        e = store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    if (e != TY_OK)
        return e;
    if (f->created_after_ms != 0 && f->created_after_ms >= 0) {
        int64_t from = f->created_after_ms + 1; /* first millisecond allowed */
        if (from > STORE_ID_MAX_MS)
            p->empty = 1;
        else if ((e = id_floor(c, from, &seq)) != TY_OK)
            return e;
        else if (seq == 0)
            p->empty = 1;
        else if (seq > p->lo)
            p->lo = seq;
    }
    if (f->created_before_ms != 0) {
        if (f->created_before_ms < 0) {
            p->empty = 1;
        } else if (f->created_before_ms <= STORE_ID_MAX_MS) {
            if ((e = id_floor(c, f->created_before_ms, &seq)) != TY_OK)
                return e;
            if (seq != 0 && seq - 1 < p->hi)
                p->hi = seq - 1;
        }
    }
    if (p->lo > p->hi)
        p->empty = 1;
    return TY_OK;
}

/* The smallest string greater than every string that starts with prefix, or
 * NULL (in *end) when there is none (a prefix of 0xff bytes only). */
static ty_err prefix_upper(const char *prefix, char **end)
{
    size_t n = strlen(prefix);
    while (n > 0 && (unsigned char)prefix[n - 1] == 0xff)
        n--;
    *end = NULL;
    if (n == 0)
        return TY_OK;
    char *u = malloc(n + 1);
    if (!u)
        return TY_ENOMEM;
    memcpy(u, prefix, n);
    u[n - 1] = (char)((unsigned char)u[n - 1] + 1);
    u[n] = '\0';
    *end = u;
    return TY_OK;
}

/* The name_prefix stream: the seqs of the name range, when few enough. At
 * most gather_max + 1 index entries are read, whatever the seq bounds (they
 * are applied here), so the cost of gathering is bounded too. */
static ty_err add_prefix_stream(plan *p, store_conn *c, const char *prefix)
{
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int rc;
    ty_err e = prefix_upper(prefix, &p->prefix_end);
    if (e != TY_OK)
        return e;
    if ((e = store_conn_stmt(c, p->prefix_end ? SQL_NAME_RANGE : SQL_NAME_FROM, 0, &st)) != TY_OK)
        return e;
    store_bind_text(st, 1, prefix);
    if (p->prefix_end)
        store_bind_text(st, 2, p->prefix_end);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)gather_max + 1);
    size_t seen = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && seen++ <= gather_max) {
        int64_t seq = sqlite3_column_int64(st, 0);
        if (seq < p->lo || seq > p->hi)
            continue;
        if (n == c->scratch_cap) {
            size_t cap = c->scratch_cap ? c->scratch_cap * 4 : 1024;
            if (cap > gather_max + 1)
                cap = gather_max + 1;
            int64_t *grown = realloc(c->scratch, cap * sizeof *grown);
            if (!grown) {
                sqlite3_reset(st);
                return TY_ENOMEM;
            }
            c->scratch = grown;
            c->scratch_cap = cap;
        }
        c->scratch[n++] = seq;
    }
    sqlite3_reset(st);
    p->budget -= (long)(seen / GATHERED_PER_UNIT);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return store_sqlite_err(rc);
    if (seen > gather_max) {
        p->prefix = prefix; /* common prefix: check it on each candidate */
        return TY_OK;
    }
    heap_make(c->scratch, n);
    begin_stream(p);
    p->cur[p->ncur++] = (cursor){.is_heap = 1, .heap = c->scratch, .nheap = n};
    end_stream(p);
    return TY_OK;
}

static ty_err build_plan(plan *p, store_conn *c, const store_job_filter *f)
{
    const unsigned all = (1u << JOB_STATE_COUNT) - 1;
    unsigned mask = f->state_mask == all ? 0 : f->state_mask;
    sqlite3_stmt *st = NULL;
    ty_err e;
    p->hi = f->before_seq > 0 ? f->before_seq - 1 : INT64_MAX;
    p->lo = 1;
    p->budget = budget_max;
    if ((e = apply_bounds(p, c, f)) != TY_OK || p->empty)
        return e;

    if (f->name_prefix && f->name_prefix[0] &&
        (e = add_prefix_stream(p, c, f->name_prefix)) != TY_OK)
        return e;
    for (size_t i = 0; i < f->nlabels; i++) {
        begin_stream(p);
        if ((e = add_cursor(p, c, SQL_STREAM_LABEL, (int)i, &st)) != TY_OK)
            return e;
        store_bind_text(st, 2, f->labels[i].key);
        store_bind_text(st, 3, f->labels[i].value);
        end_stream(p);
    }
    if (f->team) {
        begin_stream(p);
        if ((e = add_cursor(p, c, SQL_STREAM_TEAM, 0, &st)) != TY_OK)
            return e;
        store_bind_text(st, 2, f->team);
        end_stream(p);
    }
    if (f->queue || mask) {
        begin_stream(p);
        for (int s = 0; s < JOB_STATE_COUNT; s++) {
            if (mask && !(mask & (1u << s)))
                continue;
            if (f->queue) {
                if ((e = add_cursor(p, c, SQL_STREAM_QUEUE_STATE, s, &st)) != TY_OK)
                    return e;
                store_bind_text(st, 2, f->queue);
                sqlite3_bind_int(st, 3, s);
            } else {
                if ((e = add_cursor(p, c, SQL_STREAM_STATE, s, &st)) != TY_OK)
                    return e;
                sqlite3_bind_int(st, 2, s);
            }
        }
        end_stream(p);
    }
    if (p->nstr == 0) {
        begin_stream(p);
        if (p->prefix) {
            /* Only a prefix too common to gather: scan windows, the check inline. */
            if ((e = add_cursor(p, c, SQL_STREAM_WINDOW, 0, &st)) != TY_OK)
                return e;
            p->cur[p->ncur - 1].window = 1;
            store_bind_text(st, 3, p->prefix);
            store_bind_text(st, 4, p->prefix_end);
            p->prefix = NULL; /* the stream checks it */
        } else if ((e = add_cursor(p, c, SQL_STREAM_ALL, 0, &st)) != TY_OK) {
            return e;
        }
        end_stream(p);
    }
    return TY_OK;
}

/* Reads the job with that seq into *j (when j is not NULL); *match = 0 when the
 * row fails the residual name_prefix check. st is SQL_FETCH or SQL_FETCH_PREFIX. */
static ty_err fetch(plan *p, sqlite3_stmt *st, int64_t seq, store_job *j, int *match)
{
    ty_err e = TY_OK;
    *match = 0;
    sqlite3_bind_int64(st, 1, seq);
    if (p->prefix) {
        store_bind_text(st, 2, p->prefix);
        store_bind_text(st, 3, p->prefix_end);
    }
    p->budget -= COST_FETCH;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *match = 1;
        if (j)
            e = store_job_from_row(st, j);
    } else if (rc != SQLITE_DONE) {
        e = store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    return e;
}

/* Leapfrog intersection of the streams, newest first; see the file comment.
 * *next is the cursor of the next page, 0 when there is none. */
static ty_err run_plan(plan *p, store_conn *c, int limit, store_job *out, size_t *nout,
                       int64_t *next)
{
    int64_t t = p->hi;
    size_t i = 0, agree = 0, n = 0;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, p->prefix ? SQL_FETCH_PREFIX : SQL_FETCH, 0, &st);
    *next = 0;
    while (e == TY_OK && !p->empty && t >= p->lo) {
        int64_t v = 0;
        if (p->budget <= 0 && t < p->hi) {
            /* Out of budget: everything above t has been examined, and the
             * cursor is below the one this page started from (progress). */
            *next = t + 1;
            break;
        }
        if ((e = stream_seek(p, &p->str[i], t, &v)) != TY_OK)
            break;
        if (v < 0) { /* a window scan ran out of budget */
            *next = p->stopped_at + 1;
            break;
        }
        if (v < p->lo) /* 0, or below the range: no further match */
            break;
        if (v == t) {
            agree++;
        } else {
            t = v;
            agree = 1;
        }
        if (agree == p->nstr) {
            int match;
            if ((e = fetch(p, st, t, n < (size_t)limit ? &out[n] : NULL, &match)) != TY_OK)
                break;
            if (match && n == (size_t)limit) {
                *next = out[n - 1].seq;
                break;
            }
            n += (size_t)match;
            t--;
            agree = 0;
        }
        i = (i + 1) % p->nstr;
    }
    *nout = n;
    return e;
}

ty_err store_jobs_list(store *s, const store_job_filter *f, store_job **out, size_t *nout,
                       int64_t *next_before_seq)
{
    if (!s || !f || !out || !nout || !next_before_seq)
        return TY_EINVAL;
    *out = NULL;
    *nout = 0;
    *next_before_seq = 0;
    if (f->limit < 1 || f->limit > LIST_MAX_LIMIT || f->before_seq < 0 ||
        (f->state_mask >> JOB_STATE_COUNT) != 0 || f->nlabels > LIST_MAX_LABELS ||
        (f->nlabels && !f->labels))
        return TY_EINVAL;
    for (size_t i = 0; i < f->nlabels; i++)
        if (!f->labels[i].key || !f->labels[i].value)
            return TY_EINVAL;

    store_job *jobs = calloc((size_t)f->limit, sizeof *jobs);
    if (!jobs)
        return TY_ENOMEM;
    plan *p = calloc(1, sizeof *p);
    store_conn *c = store_reader_acquire(s);
    size_t n = 0;
    int64_t next = 0;
    int in_tx = 0;
    ty_err e = p ? TY_OK : TY_ENOMEM;
    if (e != TY_OK || (e = store_read_begin(c)) != TY_OK)
        goto out;
    in_tx = 1;
    if ((e = build_plan(p, c, f)) != TY_OK)
        goto out;
    e = run_plan(p, c, f->limit, jobs, &n, &next);
out:
    if (p) {
        for (size_t i = 0; i < p->ncur; i++)
            if (p->cur[i].st)
                sqlite3_reset(p->cur[i].st);
        free(p->prefix_end);
        free(p);
    }
    if (in_tx)
        store_read_end(c);
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_jobs_free(jobs, n);
        return e;
    }
    *out = jobs;
    *nout = n;
    *next_before_seq = next;
    return TY_OK;
}

void store_test_list_limits(size_t gather, long budget)
{
    gather_max = gather ? gather : LIST_GATHER_MAX;
    budget_max = budget ? budget : LIST_BUDGET;
}
