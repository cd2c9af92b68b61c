/*
 * model.c - MLP forward and backward on the CPU with cblas_sgemm.
 *
 * Shapes (row-major, b = batch, in/out = layer sizes):
 *   forward   Y[b][out]  = X[b][in] . W^T          sgemm(N, T)
 *   weights  dW[out][in] = dY^T[out][b] . X[b][in] sgemm(T, N)
 *   inputs   dX[b][in]   = dY[b][out] . W[out][in] sgemm(N, N), skipped for layer 0
 * The bias add, ReLU and its mask are fused into one pass over each activation.
 */
#include "runtime/model.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rng.h"

#define MODEL_MAX_PARAMS ((size_t)1 << 40)

ty_err model_layout_init(model_layout *m, size_t inputs, const size_t *hidden, int n_hidden,
                         size_t classes)
{
    memset(m, 0, sizeof *m);
    /* BLAS takes int dimensions. */
    if (n_hidden < 0 || n_hidden + 1 > MODEL_MAX_LAYERS || inputs == 0 || classes == 0 ||
        inputs > INT_MAX || classes > INT_MAX)
        return TY_EINVAL;
    m->n_layers = n_hidden + 1;
    m->sizes[0] = inputs;
    for (int i = 0; i < n_hidden; i++) {
        if (hidden[i] == 0 || hidden[i] > INT_MAX)
            return TY_EINVAL;
        m->sizes[i + 1] = hidden[i];
    }
    m->sizes[m->n_layers] = classes;
    size_t off = 0;
    for (int l = 0; l < m->n_layers; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        if (in > MODEL_MAX_PARAMS / out)
            return TY_EINVAL;
        size_t n = in * out + out;
        if (n > MODEL_MAX_PARAMS - off)
            return TY_EINVAL;
        m->layer_off[l] = off;
        m->w_off[l] = off;
        m->b_off[l] = off + in * out;
        off += n;
    }
    m->layer_off[m->n_layers] = off;
    m->n_params = off;
    return TY_OK;
}

void model_init_params(const model_layout *m, uint64_t seed, float *params)
{
    rng r;
    rng_seed(&r, seed ^ 0x6d6f64656cULL);
    for (int l = 0; l < m->n_layers; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        float bound = sqrtf(6.0f / (float)in);
        float *w = params + m->w_off[l];
        for (size_t i = 0; i < in * out; i++)
            w[i] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
        memset(params + m->b_off[l], 0, out * sizeof(float));
    }
}

ty_err model_work_init(model_work *w, const model_layout *m, size_t max_batch)
{
    memset(w, 0, sizeof *w);
    w->max_batch = max_batch;
    size_t widest = 0;
    for (int l = 0; l <= m->n_layers; l++) {
        w->act[l] = malloc(max_batch * m->sizes[l] * sizeof(float) + sizeof(float));
        if (!w->act[l])
            goto fail;
        if (m->sizes[l] > widest)
            widest = m->sizes[l];
    }
    for (int i = 0; i < 2; i++) {
        w->delta[i] = malloc(max_batch * widest * sizeof(float) + sizeof(float));
        if (!w->delta[i])
            goto fail;
    }
    w->labels = malloc(max_batch + 1);
    if (!w->labels)
        goto fail;
    return TY_OK;
fail:
    model_work_free(w);
    return TY_ENOMEM;
}

void model_work_free(model_work *w)
{
    if (!w)
        return;
    for (int l = 0; l <= MODEL_MAX_LAYERS; l++)
        free(w->act[l]);
    free(w->delta[0]);
    free(w->delta[1]);
    free(w->labels);
    memset(w, 0, sizeof *w);
}

void model_forward(const model_layout *m, const float *params, size_t b, model_work *w)
{
    if (b == 0)
        return;
    for (int l = 0; l < m->n_layers; l++) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        const float *x = w->act[l];
        float *y = w->act[l + 1];
        const float *wt = params + m->w_off[l];
        const float *bias = params + m->b_off[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, out, in, 1.0f, x, in, wt, in,
                    0.0f, y, out);
        int relu = l + 1 < m->n_layers;
        for (size_t i = 0; i < b; i++) {
            float *row = y + i * (size_t)out;
            if (relu) {
                for (int j = 0; j < out; j++) {
                    float v = row[j] + bias[j];
                    row[j] = v > 0.0f ? v : 0.0f;
                }
            } else {
                for (int j = 0; j < out; j++)
                    row[j] += bias[j];
            }
        }
    }
}

double model_loss_grad(const model_layout *m, size_t b, float scale, model_work *w)
{
    size_t c = m->sizes[m->n_layers];
    const float *logits = w->act[m->n_layers];
    float *d = w->delta[0];
    double total = 0;
    for (size_t i = 0; i < b; i++) {
        const float *z = logits + i * c;
        float *g = d + i * c;
        float mx = z[0];
        for (size_t j = 1; j < c; j++)
            if (z[j] > mx)
                mx = z[j];
        float sum = 0;
        for (size_t j = 0; j < c; j++) {
            g[j] = expf(z[j] - mx);
            sum += g[j];
        }
        size_t y = w->labels[i];
        total += (double)(logf(sum) + mx - z[y]);
        float inv = scale / sum;
        for (size_t j = 0; j < c; j++)
            g[j] *= inv;
        g[y] -= scale;
    }
    return total;
}

void model_backward(const model_layout *m, const float *params, size_t b, model_work *w,
                    float *grads, model_layer_done_fn done, void *ctx)
{
    int cur = 0;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        float *dw = grads + m->w_off[l];
        float *db = grads + m->b_off[l];
        const float *dy = w->delta[cur];
        const float *x = w->act[l];
        if (b == 0) {
            memset(grads + m->layer_off[l], 0, (m->layer_off[l + 1] - m->layer_off[l]) * sizeof(float));
            if (done)
                done(ctx, l);
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, (int)b, 1.0f, dy, out, x, in,
                    0.0f, dw, in);
        memcpy(db, dy, (size_t)out * sizeof(float));
        for (size_t i = 1; i < b; i++) {
            const float *row = dy + i * (size_t)out;
            for (int j = 0; j < out; j++)
                db[j] += row[j];
        }
        if (done)
            done(ctx, l);
        if (l == 0)
            break;
        float *dx = w->delta[1 - cur];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, in, out, 1.0f, dy, out,
                    params + m->w_off[l], in, 0.0f, dx, in);
        /* x is this layer's input, the ReLU output of layer l-1: its mask gates dx. */
        size_t n = b * (size_t)in;
        for (size_t i = 0; i < n; i++)
            dx[i] = x[i] > 0.0f ? dx[i] : 0.0f;
        cur = 1 - cur;
    }
}

size_t model_count_correct(const model_layout *m, size_t b, const model_work *w)
{
    size_t c = m->sizes[m->n_layers], correct = 0;
    const float *logits = w->act[m->n_layers];
    for (size_t i = 0; i < b; i++) {
        const float *z = logits + i * c;
        size_t best = 0;
        for (size_t j = 1; j < c; j++)
            if (z[j] > z[best])
                best = j;
        correct += best == w->labels[i];
    }
    return correct;
}
