/*
 * engine_cpu.c - the CPU engine: model.c's OpenBLAS passes, comm.h's TCP ring, optim.c.
 *
 * Overlap: model_backward() reports each finished layer; when that completes a bucket,
 * its reduce-scatter is issued at once and travels on comm's thread while backward goes
 * on with earlier layers. Then, bucket by bucket in issue order, the rank waits for the
 * reduced slice, updates it, and issues the bucket's all-gather, so later all-gathers
 * overlap with the optimizer of later buckets.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine_int.h"
#include "runtime/rt_error.h"

typedef struct cpu_engine {
    engine base;
    engine_config cfg;
    float *params, *grads;   /* n_params each */
    float *state[2];         /* n_owned each, optim_state_count() of them */
    model_work work;
    double loss_sum;
    comm_work **rs, **ag;    /* per bucket, in flight */
    comm_status issue_status;
} cpu_engine;

static cpu_engine *cpu(engine *e)
{
    return (cpu_engine *)e;
}

static void cpu_destroy(engine *e)
{
    cpu_engine *c = cpu(e);
    free(c->params);
    free(c->grads);
    free(c->state[0]);
    free(c->state[1]);
    free(c->rs);
    free(c->ag);
    model_work_free(&c->work);
    free(c);
}

static ty_err cpu_set_params(engine *e, const float *params, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    memcpy(cpu(e)->params, params, cpu(e)->cfg.model->n_params * sizeof(float));
    return TY_OK;
}

static ty_err cpu_get_params(engine *e, float *params, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    memcpy(params, cpu(e)->params, cpu(e)->cfg.model->n_params * sizeof(float));
    return TY_OK;
}

static ty_err cpu_set_state(engine *e, const float *const *state, char *err, size_t errlen)
{
    cpu_engine *c = cpu(e);
    (void)err;
    (void)errlen;
    for (int k = 0; k < optim_state_count(c->cfg.optim.kind); k++)
        memcpy(c->state[k], state[k], c->cfg.shard->n_owned * sizeof(float));
    return TY_OK;
}

static ty_err cpu_get_state(engine *e, float *const *state, char *err, size_t errlen)
{
    cpu_engine *c = cpu(e);
    (void)err;
    (void)errlen;
    for (int k = 0; k < optim_state_count(c->cfg.optim.kind); k++)
        memcpy(state[k], c->state[k], c->cfg.shard->n_owned * sizeof(float));
    return TY_OK;
}

/* model_backward's callback: issue the reduce-scatter of the bucket this layer completes. */
static void layer_done(void *ctx, int layer)
{
    cpu_engine *c = ctx;
    if (!c->cfg.comm || c->issue_status != COMM_OK)
        return;
    int b = shard_bucket_completed_by(c->cfg.shard, layer);
    if (b < 0)
        return;
    const shard_bucket *bk = &c->cfg.shard->buckets[b];
    c->issue_status = comm_reduce_scatter_start(c->cfg.comm, c->grads + bk->offset, bk->count,
                                                &c->rs[b]);
}

/* Waits for every operation still in flight (they fail fast once comm has failed). */
static comm_status drain(cpu_engine *c, comm_work **works)
{
    comm_status first = COMM_OK;
    for (size_t b = 0; b < c->cfg.shard->n_buckets; b++) {
        if (!works[b])
            continue;
        double t0 = engine_now();
        comm_status st = comm_wait(c->cfg.comm, works[b]);
        c->base.wait_seconds += engine_now() - t0;
        works[b] = NULL;
        if (first == COMM_OK)
            first = st;
    }
    return first;
}

static ty_err cpu_step(engine *e, const uint32_t *idx, size_t n_local, size_t n_global, float lr,
                       int64_t t, char *err, size_t errlen)
{
    cpu_engine *c = cpu(e);
    const model_layout *m = c->cfg.model;
    const shard_layout *s = c->cfg.shard;
    comm_status st = COMM_OK;

    if (n_local > c->work.max_batch || n_global == 0) {
        rt_errf(err, errlen, "batch of %zu exceeds the engine's %zu", n_local, c->work.max_batch);
        return TY_EINVAL;
    }
    data_gather(c->cfg.train, idx, n_local, c->cfg.mean, c->cfg.inv_std, c->work.act[0],
                c->work.labels);
    model_forward(m, c->params, n_local, &c->work);
    c->loss_sum += model_loss_grad(m, n_local, 1.0f / (float)n_global, &c->work);
    c->issue_status = COMM_OK;
    model_backward(m, c->params, n_local, &c->work, c->grads, layer_done, c);
    st = c->issue_status;

    for (size_t b = 0; b < s->n_buckets && st == COMM_OK; b++) {
        const shard_bucket *bk = &s->buckets[b];
        if (c->cfg.comm) {
            double t0 = engine_now();
            st = comm_wait(c->cfg.comm, c->rs[b]);
            c->base.wait_seconds += engine_now() - t0;
            c->rs[b] = NULL;
            if (st != COMM_OK)
                break;
        }
        float *state[2] = {c->state[0] + bk->own_pos, c->state[1] ? c->state[1] + bk->own_pos : NULL};
        optim_step(&c->cfg.optim, c->params + bk->own_offset, c->grads + bk->own_offset, state,
                   bk->own_count, lr, t);
        if (c->cfg.comm)
            st = comm_all_gather_start(c->cfg.comm, c->params + bk->offset, bk->count, &c->ag[b]);
    }
    if (c->cfg.comm) {
        comm_status st_rs = drain(c, c->rs);
        comm_status st_ag = drain(c, c->ag);
        if (st == COMM_OK)
            st = st_rs != COMM_OK ? st_rs : st_ag;
        if (st != COMM_OK) {
            rt_errf(err, errlen, "%s", comm_error(c->cfg.comm));
            return TY_EIO;
        }
    }
    return TY_OK;
}

static ty_err cpu_take_loss(engine *e, double *sum, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *sum = cpu(e)->loss_sum;
    cpu(e)->loss_sum = 0;
    return TY_OK;
}

static ty_err cpu_evaluate(engine *e, size_t begin, size_t end, int64_t *correct, char *err,
                           size_t errlen)
{
    cpu_engine *c = cpu(e);
    const dataset *d = c->cfg.test;
    uint32_t *idx = NULL;
    size_t chunk = c->work.max_batch;
    (void)err;
    (void)errlen;
    *correct = 0;
    if (end > d->n || begin > end) {
        rt_errf(err, errlen, "test range [%zu, %zu) outside %zu samples", begin, end, d->n);
        return TY_EINVAL;
    }
    idx = malloc(chunk * sizeof *idx);
    if (!idx)
        return TY_ENOMEM;
    for (size_t at = begin; at < end; at += chunk) {
        size_t n = end - at < chunk ? end - at : chunk;
        for (size_t i = 0; i < n; i++)
            idx[i] = (uint32_t)(at + i);
        data_gather(d, idx, n, c->cfg.mean, c->cfg.inv_std, c->work.act[0], c->work.labels);
        model_forward(c->cfg.model, c->params, n, &c->work);
        *correct += (int64_t)model_count_correct(c->cfg.model, n, &c->work);
    }
    free(idx);
    return TY_OK;
}

static const engine_ops cpu_ops = {
    .destroy = cpu_destroy,
    .set_params = cpu_set_params,
    .get_params = cpu_get_params,
    .set_state = cpu_set_state,
    .get_state = cpu_get_state,
    .step = cpu_step,
    .take_loss = cpu_take_loss,
    .evaluate = cpu_evaluate,
};

ty_err engine_create_cpu(const engine_config *cfg, engine **out, char *err, size_t errlen)
{
    cpu_engine *c = calloc(1, sizeof *c);
    if (!c)
        goto nomem;
    c->base.ops = &cpu_ops;
    c->cfg = *cfg;
    size_t np = cfg->model->n_params, no = cfg->shard->n_owned;
    c->params = calloc(np, sizeof(float));
    c->grads = calloc(np, sizeof(float));
    c->rs = calloc(cfg->shard->n_buckets, sizeof *c->rs);
    c->ag = calloc(cfg->shard->n_buckets, sizeof *c->ag);
    if (!c->params || !c->grads || !c->rs || !c->ag)
        goto nomem;
    for (int k = 0; k < optim_state_count(cfg->optim.kind); k++)
        if (!(c->state[k] = calloc(no ? no : 1, sizeof(float))))
            goto nomem;
    if (model_work_init(&c->work, cfg->model, cfg->max_local_batch) != TY_OK)
        goto nomem;
    if (cfg->threads > 0)
        openblas_set_num_threads(cfg->threads);
    snprintf(c->base.describe, sizeof c->base.describe, "cpu (OpenBLAS %s, %d thread%s)",
             openblas_get_corename(), openblas_get_num_threads(),
             openblas_get_num_threads() == 1 ? "" : "s");
    *out = &c->base;
    return TY_OK;
nomem:
    if (c)
        cpu_destroy(&c->base);
    rt_errf(err, errlen, "out of memory for the CPU engine");
    return TY_ENOMEM;
}
