/*
 * engine.c - dispatch to the CPU or GPU engine.
 */
#include "runtime/engine.h"

#include <time.h>

#include "runtime/engine_int.h"

double engine_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void engine_destroy(engine *e)
{
    if (e)
        e->ops->destroy(e);
}

const char *engine_describe(const engine *e)
{
    return e->describe;
}

ty_err engine_set_params(engine *e, const float *params, char *err, size_t errlen)
{
    return e->ops->set_params(e, params, err, errlen);
}

ty_err engine_get_params(engine *e, float *params, char *err, size_t errlen)
{
    return e->ops->get_params(e, params, err, errlen);
}

ty_err engine_set_state(engine *e, const float *const *state, char *err, size_t errlen)
{
    return e->ops->set_state(e, state, err, errlen);
}

ty_err engine_get_state(engine *e, float *const *state, char *err, size_t errlen)
{
    return e->ops->get_state(e, state, err, errlen);
}

ty_err engine_step(engine *e, const uint32_t *idx, size_t n_local, size_t n_global, float lr,
                   int64_t t, char *err, size_t errlen)
{
    return e->ops->step(e, idx, n_local, n_global, lr, t, err, errlen);
}

ty_err engine_take_loss(engine *e, double *sum, char *err, size_t errlen)
{
    return e->ops->take_loss(e, sum, err, errlen);
}

ty_err engine_evaluate(engine *e, size_t begin, size_t end, int64_t *correct, char *err,
                       size_t errlen)
{
    return e->ops->evaluate(e, begin, end, correct, err, errlen);
}

double engine_wait_seconds(const engine *e)
{
    return e->wait_seconds;
}
