/*
 * engine_cuda.c - the GPU engine: engine.h's interface over runtime/gpu/gpu.h.
 *
 * It bootstraps NCCL over the TCP rendezvous (rank 0 makes the ncclUniqueId and
 * comm_broadcast()s it), gives the device the shard rule of comm.h as tables, and turns a
 * failed or timed-out collective into an error naming the lost peer: NCCL cannot say who
 * is gone, but a barrier on the TCP ring can (it fails on the dead connection, or after
 * the timeout on a silent one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine_int.h"
#include "runtime/rt_error.h"

#ifdef TY_HAVE_CUDA

#include "runtime/gpu/gpu.h"

typedef struct cuda_engine {
    engine base;
    engine_config cfg;
    gpu_trainer *gpu;
} cuda_engine;

static cuda_engine *cu(engine *e)
{
    return (cuda_engine *)e;
}

static void cuda_destroy(engine *e)
{
    gpu_trainer_destroy(cu(e)->gpu);
    free(e);
}

static ty_err cuda_set_params(engine *e, const float *params, char *err, size_t errlen)
{
    return gpu_trainer_set_params(cu(e)->gpu, params, err, errlen);
}

static ty_err cuda_get_params(engine *e, float *params, char *err, size_t errlen)
{
    return gpu_trainer_get_params(cu(e)->gpu, params, err, errlen);
}

static ty_err cuda_set_state(engine *e, const float *const *state, char *err, size_t errlen)
{
    return gpu_trainer_set_state(cu(e)->gpu, state, err, errlen);
}

static ty_err cuda_get_state(engine *e, float *const *state, char *err, size_t errlen)
{
    return gpu_trainer_get_state(cu(e)->gpu, state, err, errlen);
}

/* Replaces a collective's error by the TCP ring's diagnosis when it names a lost peer. */
static void name_lost_peer(cuda_engine *c, char *err, size_t errlen)
{
    if (!c->cfg.comm)
        return;
    if (comm_barrier(c->cfg.comm) != COMM_OK) {
        char first[256];
        snprintf(first, sizeof first, "%s", err ? err : "");
        rt_errf(err, errlen, "%s (%s)", comm_error(c->cfg.comm), first);
    }
}

static ty_err cuda_step(engine *e, const uint32_t *idx, size_t n_local, size_t n_global, float lr,
                        int64_t t, char *err, size_t errlen)
{
    cuda_engine *c = cu(e);
    optim_scalars k = optim_step_scalars(&c->cfg.optim, lr, t);
    int failed = 0;
    ty_err rc = gpu_trainer_step(c->gpu, idx, n_local, n_global, &k, &failed, err, errlen);
    if (rc != TY_OK && failed)
        name_lost_peer(c, err, errlen);
    return rc;
}

static ty_err cuda_take_loss(engine *e, double *sum, char *err, size_t errlen)
{
    return gpu_trainer_take_loss(cu(e)->gpu, sum, err, errlen);
}

static ty_err cuda_evaluate(engine *e, size_t begin, size_t end, int64_t *correct, char *err,
                            size_t errlen)
{
    return gpu_trainer_evaluate(cu(e)->gpu, begin, end, correct, err, errlen);
}

static const engine_ops cuda_ops = {
    .destroy = cuda_destroy,
    .set_params = cuda_set_params,
    .get_params = cuda_get_params,
    .set_state = cuda_set_state,
    .get_state = cuda_get_state,
    .step = cuda_step,
    .take_loss = cuda_take_loss,
    .evaluate = cuda_evaluate,
};

int engine_cuda_devices(void)
{
    return gpu_device_count();
}

ty_err engine_create_cuda(const engine_config *cfg, engine **out, char *err, size_t errlen)
{
    ty_err rc = TY_ENOMEM;
    cuda_engine *c = NULL;
    size_t *offs = NULL, *cnts = NULL;
    unsigned char id[GPU_NCCL_ID_BYTES] = {0};
    float lut[256];
    const shard_layout *s = cfg->shard;
    int world = s->world;

    int devices = gpu_device_count();
    if (devices < 1) {
        rt_errf(err, errlen, "--device cuda: no CUDA device is present");
        return TY_ENOTFOUND;
    }
    /* NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected") and its
     * topology search could not serve them: say so before anyone waits on a collective. */
    if (world > 1 && cfg->local_world > devices) {
        rt_errf(err, errlen,
                "--device cuda: %d ranks on this machine but %d CUDA device%s: NCCL needs a "
                "GPU of its own for every rank",
                cfg->local_world, devices, devices == 1 ? "" : "s");
        return TY_EINVAL;
    }
    c = calloc(1, sizeof *c);
    offs = calloc(s->n_buckets * (size_t)world, sizeof *offs);
    cnts = calloc(s->n_buckets * (size_t)world, sizeof *cnts);
    if (!c || !offs || !cnts) {
        rt_errf(err, errlen, "out of memory for the GPU engine");
        goto out;
    }
    for (size_t b = 0; b < s->n_buckets; b++)
        for (int r = 0; r < world; r++) {
            offs[b * (size_t)world + (size_t)r] = comm_shard_offset(s->buckets[b].count, world, r);
            cnts[b * (size_t)world + (size_t)r] = comm_shard_count(s->buckets[b].count, world, r);
        }
    if (world > 1) {
        /* Everyone takes part in the broadcast, even if rank 0's id failed: then all fail. */
        int64_t ok = 1;
        if (s->rank == 0 && gpu_nccl_unique_id(id, err, errlen) != TY_OK)
            ok = 0;
        if (comm_broadcast(cfg->comm, id, sizeof id, 0) != COMM_OK) {
            rt_errf(err, errlen, "%s", comm_error(cfg->comm));
            rc = TY_EIO;
            goto out;
        }
        int64_t all_ok = ok;
        if (comm_all_reduce_i64(cfg->comm, &all_ok) != COMM_OK || all_ok != world) {
            if (ok)
                rt_errf(err, errlen, "rank 0 could not create the NCCL id");
            rc = TY_EIO;
            goto out;
        }
    }
    data_input_lut(cfg->mean, cfg->inv_std, lut);
    gpu_trainer_config g = {
        .model = cfg->model,
        .shard = s,
        .train = cfg->train,
        .test = cfg->test,
        .input_lut = lut,
        .max_local_batch = cfg->max_local_batch,
        .optim = cfg->optim,
        .n_state = optim_state_count(cfg->optim.kind),
        .device = cfg->local_rank % devices,
        .rank = s->rank,
        .world = world,
        .shard_offset = offs,
        .shard_count = cnts,
        .nccl_id = id,
        .timeout_ms = cfg->timeout_ms,
    };
    c->base.ops = &cuda_ops;
    c->cfg = *cfg;
    rc = gpu_trainer_create(&g, &c->gpu, err, errlen);
    if (rc != TY_OK)
        goto out;
    snprintf(c->base.describe, sizeof c->base.describe, "%s", gpu_trainer_device_name(c->gpu));
    *out = &c->base;
    c = NULL;
out:
    free(c);
    free(offs);
    free(cnts);
    return rc;
}

#else /* built without CUDA */

int engine_cuda_devices(void)
{
    return 0;
}

ty_err engine_create_cuda(const engine_config *cfg, engine **out, char *err, size_t errlen)
{
    (void)cfg;
    (void)out;
    rt_errf(err, errlen, "--device cuda: this trainyard-worker was built without CUDA "
                         "(configure with -DTRAINYARD_CUDA=ON)");
    return TY_ENOTFOUND;
}

#endif
