/*
 * bench_admit.c - what the admission policy (scheduler/admit.c) costs, alone: no store, no
 * backend, no server. A cohort of 50 teams over 3 GPU types (a100 400, h100 400, l4 200: 1,000
 * GPUs), their nominal quotas summing to 120 % of each type with a borrowing limit equal to the
 * nominal quota, weights 1 to 3; pending jobs in 2,000 lines (40 per team) of 1, 2, 4 or 8 GPUs.
 *
 * A run fills the cluster (rounds of at most 256 admissions until a round admits nothing), then
 * churns: 250 times, ends 8 running jobs at random (and every job a preemption stopped), and
 * decides a round. Admissions per second are the admissions decided over the time spent in
 * admit_round() by the filling and churning rounds. The cost of one round is the median of 64
 * rounds on the full cluster (nothing fits: every head gets its reason and positions) and the
 * median churn round, with 50 jobs a line (100,000 pending) against 5 (10,000). Each line's
 * first jobs are the same at both depths, so the full-cluster rounds decide exactly the same;
 * while churning, the lines of 5 that run dry (printed) leave slightly fewer heads at 10k.
 * Prints the median of --runs runs (default 5), as a table.
 *   cmake --build BUILD --target bench_admit && BUILD/bench/bench_admit
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/admit.h"

enum { A100, H100, L4, CPU, MEM, NRES };

#define TEAMS 50
#define LINES 2000
#define CHURN 250
#define ENDS_PER_STEP 8
#define MAX_ADMITS 256

typedef struct bench {
    admit_resource res[NRES];
    admit_team teams[TEAMS];
    admit_line lines[LINES];
    admit_job *jobs; /* LINES x depth */
    char (*ids)[32]; /* the same */
    size_t depth, next[LINES];
    admit_running *run; /* held jobs; run_line: the line each came from */
    size_t nrun, caprun;
    uint64_t rng;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int next_cb(void *ctx, size_t line, admit_job *out)
{
    bench *b = ctx;
    if (b->next[line] >= b->depth)
        return 0;
    *out = b->jobs[line * b->depth + b->next[line]++];
    return 1;
}

static int setup(bench *b, size_t depth, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    static const int64_t gpus[3] = {400, 400, 200};
    b->res[A100] = (admit_resource){"a100", ADMIT_RES_GPU, gpus[0]};
    b->res[H100] = (admit_resource){"h100", ADMIT_RES_GPU, gpus[1]};
    b->res[L4] = (admit_resource){"l4", ADMIT_RES_GPU, gpus[2]};
    b->res[CPU] = (admit_resource){"cpu", ADMIT_RES_CPU, 1000 * 12 * 1000};
    b->res[MEM] = (admit_resource){"memory", ADMIT_RES_MEMORY, 1000 * (96LL << 30)};
    /* Quotas: team t's part grows with t % 5 + 1 (sum of parts over 50 teams: 150). */
    for (size_t t = 0; t < TEAMS; t++) {
        admit_team *tm = &b->teams[t];
        static char names[TEAMS][8];
        snprintf(names[t], sizeof names[t], "team%02zu", t);
        tm->name = names[t];
        tm->weight = (double)(1 + t % 3);
        for (int k = 0; k < 3; k++) {
            tm->nominal[k] = gpus[k] * 12 / 10 * (int64_t)(t % 5 + 1) / 150;
            tm->borrow[k] = tm->nominal[k];
        }
        tm->nominal[CPU] = tm->borrow[CPU] = ADMIT_UNLIMITED;
        tm->nominal[MEM] = tm->borrow[MEM] = ADMIT_UNLIMITED;
        tm->preempt_within = t % 4 == 0;
    }
    b->depth = depth;
    b->jobs = calloc(LINES * depth, sizeof *b->jobs);
    b->ids = calloc(LINES * depth, sizeof *b->ids);
    b->caprun = 4096;
    b->run = calloc(b->caprun, sizeof *b->run);
    if (!b->jobs || !b->ids || !b->run)
        return -1;
    /* Line l's jobs depend on l alone: the first 5 are the same at any depth. */
    for (size_t l = 0; l < LINES; l++) {
        uint64_t s = seed ^ (l * 0x2545f4914f6cdd1dULL);
        int type = (int)(splitmix(&s) % 3);
        for (size_t i = 0; i < depth; i++) {
            admit_job *j = &b->jobs[l * depth + i];
            char *id = b->ids[l * depth + i];
            snprintf(id, 32, "j%zu.%zu", l, i);
            j->id = id;
            j->priority = (int64_t)(splitmix(&s) % 4);
            j->seq = (int64_t)(i * LINES + l);
            int64_t g = (int64_t)1 << (splitmix(&s) % 4);
            j->req[type] = g;
            j->req[CPU] = 12000 * g;
            j->req[MEM] = (96LL << 30) * g;
        }
        b->lines[l] = (admit_line){.team = l % TEAMS, .room = {-1, -1}};
        b->lines[l].has_head = next_cb(b, l, &b->lines[l].head);
    }
    b->rng = seed;
    return 0;
}

static void teardown(bench *b)
{
    free(b->jobs);
    free(b->ids);
    free(b->run);
}

/* Ends running job i: its capacity and its team's usage come back. */
static void end_job(bench *b, size_t i)
{
    admit_running *r = &b->run[i];
    for (int k = 0; k < NRES; k++) {
        b->res[k].free += r->req[k];
        b->teams[r->team].used[k] -= r->req[k];
    }
    b->run[i] = b->run[--b->nrun];
}

/* One round, carried out as the loop would; returns its seconds (admit_round alone). */
static double round_once(bench *b, admit_result *r, int64_t now_ms, size_t *admitted,
                         size_t *preempted)
{
    admit_snapshot s = {.res = b->res,
                        .nres = NRES,
                        .teams = b->teams,
                        .nteams = TEAMS,
                        .lines = b->lines,
                        .nlines = LINES,
                        .running = b->run,
                        .nrunning = b->nrun,
                        .max_admits = MAX_ADMITS,
                        .next = next_cb,
                        .ctx = b};
    char msg[128];
    double t0 = now_s();
    if (admit_round(&s, r, msg, sizeof msg) != TY_OK) {
        fprintf(stderr, "admit_round: %s\n", msg);
        exit(1);
    }
    double dt = now_s() - t0;
    /* The lines' heads are now the results': admitted heads moved on. */
    for (size_t l = 0; l < LINES; l++)
        b->lines[l].has_head = 0;
    for (size_t i = 0; i < r->npending; i++) {
        b->lines[r->pending[i].line].has_head = 1;
        b->lines[r->pending[i].line].head = r->pending[i].job;
    }
    for (size_t i = 0; i < r->npreemptions; i++)
        b->run[r->preemptions[i].victim].stopping = 1;
    for (size_t i = 0; i < r->nadmitted; i++) {
        const admit_admitted *a = &r->admitted[i];
        if (b->nrun == b->caprun) {
            fprintf(stderr, "too many running jobs\n");
            exit(1);
        }
        size_t t = b->lines[a->line].team;
        admit_running *run = &b->run[b->nrun++];
        *run = (admit_running){
            .id = a->job.id, .team = t, .priority = a->job.priority, .started_ms = now_ms};
        memcpy(run->req, a->job.req, sizeof run->req);
        for (int k = 0; k < NRES; k++) {
            b->res[k].free -= a->job.req[k];
            b->teams[t].used[k] += a->job.req[k];
        }
    }
    *admitted += r->nadmitted;
    *preempted += r->npreemptions;
    return dt;
}

typedef struct figures {
    double adm_per_s, full_round_ms, churn_round_ms;
    size_t admitted, preempted, rounds, emptied;
} figures;

static int run_once(size_t depth, uint64_t seed, figures *out)
{
    bench *b = malloc(sizeof *b);
    if (!b || setup(b, depth, seed)) {
        free(b);
        return -1;
    }
    admit_result r;
    admit_result_init(&r);
    double spent = 0, full[64], churn[CHURN];
    size_t nfull = 0, nchurn = 0, admitted = 0, preempted = 0, rounds = 0;
    int64_t now_ms = 0;
    for (;;) { /* fill */
        size_t before = admitted;
        spent += round_once(b, &r, ++now_ms, &admitted, &preempted);
        rounds++;
        if (admitted == before)
            break;
    }
    for (size_t i = 0; i < 64; i++) { /* the full cluster: nothing changes, every head waits */
        size_t before = admitted;
        full[nfull++] = round_once(b, &r, now_ms, &admitted, &preempted);
        if (admitted != before) { /* a preemption's victims were marked: not a full round */
            spent += full[--nfull];
            continue;
        }
    }
    for (size_t step = 0; step < CHURN; step++) {
        for (size_t i = 0; i < b->nrun;)
            if (b->run[i].stopping)
                end_job(b, i);
            else
                i++;
        for (int e = 0; e < ENDS_PER_STEP && b->nrun; e++)
            end_job(b, (size_t)(splitmix(&b->rng) % b->nrun));
        churn[nchurn] = round_once(b, &r, ++now_ms, &admitted, &preempted);
        spent += churn[nchurn++];
        rounds++;
    }
    out->adm_per_s = (double)admitted / spent;
    out->full_round_ms = median(full, nfull) * 1e3;
    out->churn_round_ms = median(churn, nchurn) * 1e3;
    out->admitted = admitted;
    out->preempted = preempted;
    out->rounds = rounds;
    out->emptied = 0;
    for (size_t l = 0; l < LINES; l++)
        out->emptied += !b->lines[l].has_head;
    admit_result_free(&r);
    teardown(b);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    int runs = 5;
    if (argc == 3 && strcmp(argv[1], "--runs") == 0) {
        char *end = NULL;
        long n = strtol(argv[2], &end, 10);
        if (*end || n < 1 || n > 100) {
            fprintf(stderr, "usage: bench_admit [--runs 1..100]\n");
            return 2;
        }
        runs = (int)n;
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_admit [--runs 1..100]\n");
        return 2;
    }
    static const size_t depths[2] = {5, 50};
    double f[2][3][100];
    figures last[2];
    for (int i = 0; i < runs; i++)
        for (int d = 0; d < 2; d++) {
            figures x;
            if (run_once(depths[d], 0x5eed0000ULL + (uint64_t)i, &x)) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            f[d][0][i] = x.adm_per_s;
            f[d][1][i] = x.full_round_ms;
            f[d][2][i] = x.churn_round_ms;
            last[d] = x;
        }
    double m[2][3];
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            m[d][k] = median(f[d][k], (size_t)runs);
    printf("50 teams, 3 GPU types, 1,000 GPUs, quotas 120 %%, %d lines; median of %d runs\n", LINES,
           runs);
    printf("(last run: %zu admissions, %zu preemptions in %zu rounds at 100k pending, the same "
           "at 10k: %zu, %zu, %zu; lines emptied at 10k: %zu)\n\n",
           last[1].admitted, last[1].preempted, last[1].rounds, last[0].admitted, last[0].preempted,
           last[0].rounds, last[0].emptied);
    printf("| figure | 10,000 pending | 100,000 pending | 100k/10k |\n");
    printf("| --- | --- | --- | --- |\n");
    printf("| admissions decided per second | %.0f | %.0f | %.2f |\n", m[0][0], m[1][0],
           m[1][0] / m[0][0]);
    printf("| one round, cluster full (ms) | %.3f | %.3f | %.2f |\n", m[0][1], m[1][1],
           m[1][1] / m[0][1]);
    printf("| one round, churn (ms) | %.3f | %.3f | %.2f |\n", m[0][2], m[1][2], m[1][2] / m[0][2]);
    return 0;
}
