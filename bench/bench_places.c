/*
 * bench_places.c - what it costs to say where PENDING jobs stand (store_jobs_line_places), on
 * the store alone, with every job waiting in one line (team default, queue default), as a
 * paused queue leaves them.
 *
 *   bench_places [--jobs N] [--pages P]      (defaults 1000000 and 50)
 *
 * Figures, each beside a baseline measured in the same run:
 *   - submissions: N jobs through store_jobs_submit() in batches of 1,000 into two stores,
 *     batch by batch in turn: one as built, one whose pending_counts ignores every insert (a
 *     BEFORE INSERT trigger raising IGNORE), so its batches skip the counts' writes but still
 *     read the batch back for them; the time of that read alone (the same SELECT on a second
 *     connection after each batch) is printed as a share of the batch's time. Together: what
 *     keeping pending_counts costs a submission.
 *   - a page of 100 jobs: store_jobs_list() (the baseline: what GET /v1/jobs reads anyway)
 *     and store_jobs_line_places() on the same page, for the newest page, P pages following
 *     the cursor, and a page from the middle of the line; p50 and p99 of each, and the ratio.
 *   - one job half-way down the line (GET /v1/jobs/{id}): store_jobs_line_places(), beside a
 *     count of the index entries ahead of it (what the place cost before pending_counts).
 * The database files live in a temporary directory, removed at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "bench_util.h"
#include "store/store.h"

#define BATCH 1000
#define PAGE 100

static store *open_store(const char *path)
{
    store *s = NULL;
    char err[256];
    if (store_open(path, NULL, &s, err, sizeof err) != TY_OK)
        bench_die("store_open %s: %s", path, err);
    return s;
}

static double seconds_to_submit(store *s, store_job_new *in, size_t n)
{
    store_job *out = NULL;
    size_t nout = 0;
    double t0 = bench_mono_ms();
    if (store_jobs_submit(s, in, n, NULL, NULL, &out, &nout, NULL) != TY_OK || nout != n)
        bench_die("store_jobs_submit failed");
    double t = bench_mono_ms() - t0;
    store_jobs_free(out, nout);
    return t / 1000.0;
}

/* p50 and p99 (ms) of n timings, sorted in place. */
static void pcts(double *v, size_t n, double *p50, double *p99)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    *p50 = bench_percentile(v, n, 50);
    *p99 = bench_percentile(v, n, 99);
}

/* Reads `pages` pages of PAGE jobs from before_seq (0: the newest), timing the list and the
 * places of each page; prints one row. */
static void page_case(store *s, const char *what, int64_t before_seq, int pages)
{
    double *tl = calloc((size_t)pages, sizeof *tl), *tp = calloc((size_t)pages, sizeof *tp);
    store_line_place *pl = calloc(PAGE, sizeof *pl);
    if (!tl || !tp || !pl)
        bench_die("out of memory");
    int64_t cursor = before_seq, ahead_first = -1;
    int n = 0;
    for (; n < pages; n++) {
        store_job_filter f = {.before_seq = cursor, .limit = PAGE};
        store_job *jobs = NULL;
        size_t nj = 0;
        int64_t next = 0;
        double t0 = bench_mono_ms();
        if (store_jobs_list(s, &f, &jobs, &nj, &next) != TY_OK)
            bench_die("store_jobs_list failed");
        double t1 = bench_mono_ms();
        if (store_jobs_line_places(s, jobs, nj, pl) != TY_OK)
            bench_die("store_jobs_line_places failed");
        double t2 = bench_mono_ms();
        tl[n] = t1 - t0;
        tp[n] = t2 - t1;
        if (n == 0 && nj)
            ahead_first = pl[0].ahead;
        store_line_places_clear(pl, nj);
        store_jobs_free(jobs, nj);
        if (!next)
            break;
        cursor = next;
    }
    if (n < pages)
        n++;
    double l50, l99, p50, p99;
    pcts(tl, (size_t)n, &l50, &l99);
    pcts(tp, (size_t)n, &p50, &p99);
    printf("%-34s %5d %9lld %8.3f %8.3f %8.3f %8.3f %7.2fx\n", what, n, (long long)ahead_first,
           l50, l99, p50, p99, l50 > 0 ? p50 / l50 : 0.0);
    free(tl);
    free(tp);
    free(pl);
}

int main(int argc, char **argv)
{
    int njobs = 1000000, pages = 50;
    bench_init("bench_places", NULL);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc) {
            if (bench_parse_int(argv[++i], BATCH, 10000000, &njobs))
                bench_die("--jobs: %d to 10000000", BATCH);
        } else if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc) {
            if (bench_parse_int(argv[++i], 1, 10000, &pages))
                bench_die("--pages: 1 to 10000");
        } else {
            fprintf(stderr, "usage: bench_places [--jobs N] [--pages P]\n");
            return 2;
        }
    }
    char dir[] = "/tmp/bench_places.XXXXXX", a_path[64], b_path[64];
    if (!mkdtemp(dir))
        bench_die("mkdtemp failed");
    snprintf(a_path, sizeof a_path, "%s/a.db", dir);
    snprintf(b_path, sizeof b_path, "%s/b.db", dir);

    /* b: pending_counts ignores every write (the update trigger is dropped too). */
    store_close(open_store(b_path));
    sqlite3 *db = NULL;
    if (sqlite3_open(b_path, &db) != SQLITE_OK ||
        sqlite3_exec(db, "DROP TRIGGER pending_counts_update; DROP TABLE pending_counts;"
                         "CREATE TABLE pending_counts (team, queue, sweep, priority, bucket, n,"
                         "  PRIMARY KEY (team, queue, sweep, priority, bucket)) WITHOUT ROWID;"
                         "CREATE TRIGGER pending_counts_none BEFORE INSERT ON pending_counts"
                         "  BEGIN SELECT RAISE(IGNORE); END;",
                     NULL, NULL, NULL) != SQLITE_OK)
        bench_die("cannot drop the triggers: %s", db ? sqlite3_errmsg(db) : "open");
    sqlite3_close(db);
    store *a = open_store(a_path), *b = open_store(b_path);

    store_job_new *in = calloc(BATCH, sizeof *in);
    if (!in)
        bench_die("out of memory");
    for (size_t i = 0; i < BATCH; i++)
        in[i] = (store_job_new){.name = "wait", .queue = "default", .spec_json = "{}"};
    sqlite3_stmt *grp = NULL;
    if (sqlite3_open_v2(a_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT team, queue, coalesce(sweep, 0), priority, seq >> 10, count(*)"
                           " FROM jobs WHERE seq BETWEEN ?1 AND ?2 AND state = 0"
                           " GROUP BY 1, 2, 3, 4, 5",
                           -1, &grp, NULL) != SQLITE_OK)
        bench_die("cannot prepare the batch's read: %s", sqlite3_errmsg(db));
    double ta = 0, tb = 0, tr = 0;
    for (int done = 0; done < njobs; done += BATCH) {
        ta += seconds_to_submit(a, in, BATCH);
        tb += seconds_to_submit(b, in, BATCH);
        double t0 = bench_mono_ms();
        sqlite3_bind_int64(grp, 1, done + 1);
        sqlite3_bind_int64(grp, 2, done + BATCH);
        while (sqlite3_step(grp) == SQLITE_ROW)
            ;
        sqlite3_reset(grp);
        tr += (bench_mono_ms() - t0) / 1000.0;
    }
    sqlite3_finalize(grp);
    sqlite3_close(db);
    store_close(b);
    printf("bench_places: %d PENDING jobs in one line, pages of %d\n\n", njobs, PAGE);
    printf("submissions, batches of %d: jobs/s %.0f as built, %.0f without the counts' writes "
           "(%.2fx the time); the batch's read for the counts alone: %.1f%% of a batch\n\n",
           BATCH, njobs / ta, njobs / tb, tb > 0 ? ta / tb : 0.0, ta > 0 ? 100 * tr / ta : 0.0);

    printf("%-34s %5s %9s %8s %8s %8s %8s %8s\n", "page", "pages", "ahead[0]", "list p50",
           "list p99", "place50", "place99", "p50/list");
    page_case(a, "newest page", 0, 1);
    page_case(a, "newest, following the cursor", 0, pages);
    store_job_filter f = {.limit = 1};
    store_job *first = NULL;
    size_t nf = 0;
    int64_t next = 0;
    if (store_jobs_list(a, &f, &first, &nf, &next) != TY_OK || nf != 1)
        bench_die("cannot read the newest job");
    int64_t newest = first[0].seq;
    store_jobs_free(first, nf);
    page_case(a, "half-way down, following", newest - njobs / 2, pages);

    /* One job half-way down: its place, and the index count it took before. */
    f = (store_job_filter){.before_seq = newest - njobs / 2 + 1, .limit = 1};
    store_job *mid = NULL;
    if (store_jobs_list(a, &f, &mid, &nf, &next) != TY_OK || nf != 1)
        bench_die("cannot read the middle job");
    double tp[21], tc[21];
    store_line_place pl;
    for (int r = 0; r < 21; r++) {
        double t0 = bench_mono_ms();
        if (store_jobs_line_places(a, mid, 1, &pl) != TY_OK)
            bench_die("store_jobs_line_places failed");
        tp[r] = bench_mono_ms() - t0;
        store_line_places_clear(&pl, 1);
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_open_v2(a_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM jobs INDEXED BY jobs_pending_team WHERE state = 0"
                           " AND team = 'default' AND queue = 'default' AND sweep IS NULL"
                           " AND priority = 0 AND seq < ?1",
                           -1, &st, NULL) != SQLITE_OK)
        bench_die("cannot prepare the count: %s", sqlite3_errmsg(db));
    int64_t counted = 0;
    for (int r = 0; r < 21; r++) {
        double t0 = bench_mono_ms();
        sqlite3_bind_int64(st, 1, mid[0].seq);
        if (sqlite3_step(st) != SQLITE_ROW)
            bench_die("count failed");
        counted = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        tc[r] = bench_mono_ms() - t0;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    double p50, p99, c50, c99;
    pcts(tp, 21, &p50, &p99);
    pcts(tc, 21, &c50, &c99);
    printf("\none job %lld deep: store_jobs_line_places p50 %.3f ms; counting the index "
           "entries ahead of it p50 %.3f ms (%.0fx)\n",
           (long long)counted, p50, c50, p50 > 0 ? c50 / p50 : 0.0);
    store_jobs_free(mid, nf);
    store_close(a);
    unlink(a_path);
    unlink(b_path);
    char side[96];
    for (const char *suf = "-wal"; suf; suf = strcmp(suf, "-wal") == 0 ? "-shm" : NULL) {
        snprintf(side, sizeof side, "%s%s", a_path, suf);
        unlink(side);
        snprintf(side, sizeof side, "%s%s", b_path, suf);
        unlink(side);
    }
    rmdir(dir);
    free(in);
    return 0;
}
