/*
 * optim.c - SGD with momentum and AdamW on an owned slice; learning-rate schedules.
 */
#include "runtime/optim.h"

#include <math.h>
#include <string.h>

int optim_state_count(optim_kind kind)
{
    return kind == OPTIM_ADAMW ? 2 : 1;
}

const char *optim_name(optim_kind kind)
{
    return kind == OPTIM_ADAMW ? "adamw" : "sgd";
}

int optim_parse(const char *name)
{
    if (strcmp(name, "sgd") == 0)
        return OPTIM_SGD;
    if (strcmp(name, "adamw") == 0)
        return OPTIM_ADAMW;
    return -1;
}

float optim_lr_at(const optim_config *c, int64_t step, int64_t total_steps)
{
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->schedule == OPTIM_SCHED_CONSTANT || total_steps <= c->warmup_steps)
        return c->lr;
    double progress = (double)(step - c->warmup_steps) / (double)(total_steps - c->warmup_steps);
    if (progress > 1)
        progress = 1;
    return (float)(0.5 * (double)c->lr * (1.0 + cos(M_PI * progress)));
}

/* Adam's bias correction as PyTorch computes it: 1 - beta^t, in double precision. */
static double bias_correction(float beta, int64_t t)
{
    return 1.0 - pow((double)beta, (double)t);
}

optim_scalars optim_step_scalars(const optim_config *c, float lr, int64_t t)
{
    optim_scalars s = {.lr = lr, .decay = 1.0f, .step_size = lr, .inv_sqrt_bc2 = 1.0f};
    if (c->kind == OPTIM_ADAMW) {
        s.decay = 1.0f - lr * c->weight_decay;
        s.step_size = (float)((double)lr / bias_correction(c->beta1, t));
        s.inv_sqrt_bc2 = (float)(1.0 / sqrt(bias_correction(c->beta2, t)));
    }
    return s;
}

void optim_step(const optim_config *c, float *p, const float *g, float *const *state, size_t n,
                float lr, int64_t t)
{
    const optim_scalars k = optim_step_scalars(c, lr, t);
    if (c->kind == OPTIM_SGD) {
        float *buf = state[0];
        const float mu = c->momentum, wd = c->weight_decay;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            buf[i] = mu * buf[i] + gi;
            p[i] -= k.lr * buf[i];
        }
        return;
    }
    float *m = state[0], *v = state[1];
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * k.decay - k.step_size * mi / (sqrtf(vi) * k.inv_sqrt_bc2 + eps);
    }
}
