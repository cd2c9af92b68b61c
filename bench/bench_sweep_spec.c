/*
 * bench_sweep_spec.c - what the 422 layer of a sweep costs the server: a 1,000-trial grid body
 * (the largest allowed, the template) validated with sweep_parse(), which builds and
 * validates every trial's job spec, then the 1,000 labelled trial specs built again as
 * creation would. Prints the median of --rounds runs (default 9).
 *   cmake --build BUILD --target bench_sweep_spec && BUILD/bench/bench_sweep_spec
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/spec.h"
#include "api/sweep_spec.h"

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

/* A grid of 10 learning rates x 10 batch sizes x 10 seeds = 1,000 trials (new). */
static json_t *grid_body(void)
{
    json_t *lr = json_array(), *bs = json_array(), *seed = json_array();
    for (int i = 0; i < 10; i++) {
        json_array_append_new(lr, json_real(0.1 / (double)(1 << i)));
        json_array_append_new(bs, json_integer(16 << (i % 5)));
        json_array_append_new(seed, json_integer(i));
    }
    json_t *body = json_pack(
        "{s:s, s:s, s:i, s:{s:o, s:o, s:o}, s:{s:s, s:s}, s:{s:s, s:[s, s],"
        " s:[s, s, s, s, s, s], s:{s:s}, s:{s:i}}}",
        "name", "lr-grid", "algorithm", "grid", "parallelism", 8, "parameters", "lr", lr, "bs", bs,
        "seed", seed, "objective", "metric", "loss", "goal", "minimize", "template", "name",
        "trial", "command", "trainyard-worker", "train", "args", "--lr", "${lr}", "--batch",
        "${bs}", "--seed", "${seed}", "env", "RUN_SEED", "${seed}", "workers", "count", 2);
    return body;
}

int main(int argc, char **argv)
{
    int rounds = 9;
    if (argc == 3 && strcmp(argv[1], "--rounds") == 0) {
        char *end = NULL;
        long n = strtol(argv[2], &end, 10);
        if (*end || n < 1 || n > 10000) {
            fprintf(stderr, "usage: bench_sweep_spec [--rounds 1..10000]\n");
            return 2;
        }
        rounds = (int)n;
    }
    json_t *body = grid_body();
    if (!body)
        return 1;
    double *parse = calloc((size_t)rounds, sizeof *parse);
    double *build = calloc((size_t)rounds, sizeof *build);
    if (!parse || !build)
        return 1;
    size_t ntrials = 0;
    for (int r = 0; r < rounds; r++) {
        spec_errors errs;
        sweep_def *d = NULL;
        if (spec_errors_init(&errs) != TY_OK)
            return 1;
        double t0 = now_s();
        if (sweep_parse(body, &d, &errs) != TY_OK) {
            fprintf(stderr, "bench_sweep_spec: the body does not validate\n");
            return 1;
        }
        double t1 = now_s();
        ntrials = sweep_space_ntrials(d->space);
        for (size_t i = 0; i < ntrials; i++) {
            json_t *spec = NULL;
            if (sweep_trial_spec(d, "0123456789abcdefghjkmnpqrs", i, &spec, NULL) != TY_OK)
                return 1;
            json_decref(spec);
        }
        double t2 = now_s();
        parse[r] = t1 - t0;
        build[r] = t2 - t1;
        sweep_def_free(d);
        spec_errors_free(&errs);
    }
    qsort(parse, (size_t)rounds, sizeof *parse, cmp_double);
    qsort(build, (size_t)rounds, sizeof *build, cmp_double);
    double p = parse[rounds / 2], b = build[rounds / 2];
    printf("trials %zu, rounds %d (medians)\n", ntrials, rounds);
    printf("validate the body (every trial's spec): %.2f ms, %.0f trials/s\n", p * 1e3,
           (double)ntrials / p);
    printf("build the labelled trial specs:         %.2f ms, %.0f trials/s\n", b * 1e3,
           (double)ntrials / b);
    free(parse);
    free(build);
    json_decref(body);
    return 0;
}
