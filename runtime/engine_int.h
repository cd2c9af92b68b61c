/*
 * engine_int.h - what the CPU and GPU engines implement (see engine.h for the contracts).
 */
#ifndef TY_RUNTIME_ENGINE_INT_H
#define TY_RUNTIME_ENGINE_INT_H

#include "runtime/engine.h"

typedef struct engine_ops {
    void (*destroy)(engine *e);
    ty_err (*set_params)(engine *e, const float *params, char *err, size_t errlen);
    ty_err (*get_params)(engine *e, float *params, char *err, size_t errlen);
    ty_err (*set_state)(engine *e, const float *const *state, char *err, size_t errlen);
    ty_err (*get_state)(engine *e, float *const *state, char *err, size_t errlen);
    ty_err (*step)(engine *e, const uint32_t *idx, size_t n_local, size_t n_global, float lr,
                   int64_t t, char *err, size_t errlen);
    ty_err (*take_loss)(engine *e, double *sum, char *err, size_t errlen);
    ty_err (*evaluate)(engine *e, size_t begin, size_t end, int64_t *correct, char *err,
                       size_t errlen);
} engine_ops;

/* The first member of every engine implementation. */
struct engine {
    const engine_ops *ops;
    char describe[160];
    double wait_seconds;
};

/* Monotonic seconds, for wait accounting. */
double engine_now(void);

#endif
