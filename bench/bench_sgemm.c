/*
 * bench_sgemm.c - this machine's OpenBLAS sgemm rate, and the ceiling it puts on training.
 *
 *   bench_sgemm [--threads T] [--batch B] [--hidden 512,512] [--inputs 784] [--classes 10]
 *
 * Prints which OpenBLAS kernel runs (openblas_get_corename(): OPENBLAS_CORETYPE changes
 * it), the GFLOP/s of a square 1024^3 product, and the time of exactly the sgemm calls of
 * one training step of the MLP at batch B (forward, weight gradients, input gradients but
 * the first layer's, as runtime/model.c issues them), from which samples/s if the step
 * were nothing but sgemm. Each figure is the best of 5 half-second windows. One JSON
 * object per line.
 */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LAYERS 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *random_matrix(size_t n)
{
    float *m = malloc(n * sizeof(float));
    if (!m)
        return NULL;
    unsigned x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        m[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return m;
}

/*
 * Seconds per call of fn: the best of 5 windows of at least window_s each, since other
 * load on the machine only ever makes a window slower.
 */
static double time_calls(void (*fn)(void *), void *ctx, double window_s)
{
    fn(ctx); /* warm-up: pages, thread pool, packing buffers */
    double best = 0;
    for (int w = 0; w < 5; w++) {
        int reps = 0;
        double t0 = now_s(), t;
        do {
            fn(ctx);
            reps++;
            t = now_s() - t0;
        } while (t < window_s);
        if (w == 0 || t / reps < best)
            best = t / reps;
    }
    return best;
}

typedef struct square {
    int n;
    float *a, *b, *c;
} square;

static void run_square(void *p)
{
    square *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->n, s->n, s->n, 1.0f, s->a, s->n,
                s->b, s->n, 0.0f, s->c, s->n);
}

typedef struct mlp {
    int layers, batch;
    int sizes[MAX_LAYERS + 1];
    float *w[MAX_LAYERS], *dw[MAX_LAYERS], *act[MAX_LAYERS + 1], *delta[2];
} mlp;

static void run_mlp_step(void *p)
{
    mlp *m = p;
    int b = m->batch;
    for (int l = 0; l < m->layers; l++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, m->sizes[l + 1], m->sizes[l], 1.0f,
                    m->act[l], m->sizes[l], m->w[l], m->sizes[l], 0.0f, m->act[l + 1],
                    m->sizes[l + 1]);
    for (int l = m->layers - 1; l >= 0; l--) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, b, 1.0f, m->delta[0], out,
                    m->act[l], in, 0.0f, m->dw[l], in);
        if (l > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, in, out, 1.0f, m->delta[0],
                        out, m->w[l], in, 0.0f, m->delta[1], in);
    }
}

static int parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1 << 24)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    int threads = 1, batch = 256, inputs = 784, classes = 10;
    int hidden[MAX_LAYERS] = {512, 512}, n_hidden = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        int bad = 0;
        if (strcmp(f, "--threads") == 0)
            bad = parse_int(v, &threads);
        else if (strcmp(f, "--batch") == 0)
            bad = parse_int(v, &batch);
        else if (strcmp(f, "--inputs") == 0)
            bad = parse_int(v, &inputs);
        else if (strcmp(f, "--classes") == 0)
            bad = parse_int(v, &classes);
        else if (strcmp(f, "--hidden") == 0) {
            n_hidden = 0;
            const char *p = v;
            for (;;) {
                char *end;
                errno = 0;
                long h = strtol(p, &end, 10);
                if (errno || end == p || h < 1 || h > 1 << 24 || n_hidden >= MAX_LAYERS - 1 ||
                    (*end != ',' && *end != '\0')) {
                    bad = 1;
                    break;
                }
                hidden[n_hidden++] = (int)h;
                if (*end == '\0')
                    break;
                p = end + 1;
            }
        } else
            bad = 1;
        if (bad) {
            fprintf(stderr, "usage: bench_sgemm [--threads T] [--batch B] [--hidden 512,512] "
                            "[--inputs 784] [--classes 10]\n");
            return 2;
        }
    }
    openblas_set_num_threads(threads);
    printf("{\"bench\":\"openblas\",\"corename\":\"%s\",\"config\":\"%s\",\"threads\":%d}\n",
           openblas_get_corename(), openblas_get_config(), openblas_get_num_threads());

    square sq = {.n = 1024};
    size_t nn = (size_t)sq.n * (size_t)sq.n;
    sq.a = random_matrix(nn);
    sq.b = random_matrix(nn);
    sq.c = random_matrix(nn);
    if (!sq.a || !sq.b || !sq.c)
        return 1;
    double t = time_calls(run_square, &sq, 0.5);
    printf("{\"bench\":\"sgemm\",\"shape\":\"1024x1024x1024\",\"threads\":%d,\"gflops\":%.1f}\n",
           threads, 2.0 * (double)nn * sq.n / t / 1e9);

    mlp m = {.layers = n_hidden + 1, .batch = batch};
    m.sizes[0] = inputs;
    for (int i = 0; i < n_hidden; i++)
        m.sizes[i + 1] = hidden[i];
    m.sizes[m.layers] = classes;
    int widest = 0;
    double flops = 0;
    for (int l = 0; l <= m.layers; l++) {
        m.act[l] = random_matrix((size_t)batch * (size_t)m.sizes[l]);
        if (!m.act[l])
            return 1;
        if (m.sizes[l] > widest)
            widest = m.sizes[l];
    }
    for (int l = 0; l < m.layers; l++) {
        size_t n = (size_t)m.sizes[l] * (size_t)m.sizes[l + 1];
        m.w[l] = random_matrix(n);
        m.dw[l] = random_matrix(n);
        if (!m.w[l] || !m.dw[l])
            return 1;
        flops += 2.0 * (double)batch * (double)n * (l > 0 ? 3 : 2);
    }
    m.delta[0] = random_matrix((size_t)batch * (size_t)widest);
    m.delta[1] = random_matrix((size_t)batch * (size_t)widest);
    if (!m.delta[0] || !m.delta[1])
        return 1;
    t = time_calls(run_mlp_step, &m, 0.5);
    printf("{\"bench\":\"mlp_step_sgemm\",\"batch\":%d,\"threads\":%d,\"gflops\":%.1f,"
           "\"step_ms\":%.3f,\"samples_per_s_ceiling\":%.0f}\n",
           batch, threads, flops / t / 1e9, t * 1e3, batch / t);
    return 0;
}
