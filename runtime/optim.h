/*
 * optim.h - optimizers applied by a rank to the parameter slices it owns, and the
 * learning-rate schedule.
 *
 * The update rules are PyTorch's, so a run can be compared with torch.optim:
 *   sgd:   g += wd * p;  buf = momentum * buf + g;  p -= lr * buf
 *   adamw: p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)     (t = 1, 2, ...)
 * State vectors (momentum; Adam's m and v) exist only for owned elements and start at zero.
 * The CUDA kernels in runtime/gpu/ implement the same formulas.
 */
#ifndef TY_RUNTIME_OPTIM_H
#define TY_RUNTIME_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum optim_kind {
    OPTIM_SGD = 0,
    OPTIM_ADAMW = 1,
} optim_kind;

typedef enum optim_schedule {
    OPTIM_SCHED_CONSTANT = 0,
    OPTIM_SCHED_COSINE = 1, /* linear warm-up, then cosine decay to 0 at the last planned step */
} optim_schedule;

typedef struct optim_config {
    optim_kind kind;
    float lr;             /* peak learning rate */
    float momentum;       /* sgd */
    float weight_decay;
    float beta1, beta2, eps; /* adamw */
    optim_schedule schedule;
    int64_t warmup_steps;
} optim_config;

/* Number of state vectors: 1 for sgd (momentum), 2 for adamw (m, v). */
int optim_state_count(optim_kind kind);

/* "sgd" / "adamw". */
const char *optim_name(optim_kind kind);
/* Parses a name of optim_name(); returns -1 when unknown. */
int optim_parse(const char *name);

/* Learning rate for the step with 0-based index `step` of a run planned for total_steps. */
float optim_lr_at(const optim_config *c, int64_t step, int64_t total_steps);

/* The per-step constants of an update, computed once on the host for CPU and GPU alike. */
typedef struct optim_scalars {
    float lr;
    float decay;          /* adamw: 1 - lr * weight_decay */
    float step_size;      /* adamw: lr / (1 - beta1^t) */
    float inv_sqrt_bc2;   /* adamw: 1 / sqrt(1 - beta2^t) */
} optim_scalars;

/* Constants of update number t (1-based) at learning rate lr. */
optim_scalars optim_step_scalars(const optim_config *c, float lr, int64_t t);

/*
 * One update of n elements: p (parameters), g (their summed gradient, read only),
 * state[0..optim_state_count) (each n elements), at learning rate lr; t is the 1-based
 * number of this update (Adam's bias correction).
 */
void optim_step(const optim_config *c, float *p, const float *g, float *const *state, size_t n,
                float lr, int64_t t);

#endif
