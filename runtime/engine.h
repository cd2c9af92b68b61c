/*
 * engine.h - the device side of a training step, behind one interface for CPU and GPU.
 *
 * An engine holds the full parameter vector, the gradients, and the optimizer state of
 * the slices this rank owns (shard.h), on its device. One call of engine_step() is one
 * data-parallel step on this rank's slice of a global batch:
 *   forward, softmax cross-entropy scaled by 1 / global batch, backward; every gradient
 *   bucket is reduce-scattered as soon as backward has finished it; the optimizer updates
 *   the owned slices; the buckets are all-gathered.
 * Collectives: the TCP ring of comm.h on CPU, NCCL (bootstrapped over comm_broadcast) on GPU.
 * Everything else (data order, checkpoints, logging) is shared and lives in train.c.
 *
 * Errors are ty_err codes with a message in err; a lost peer gives TY_EIO and a message
 * naming it (comm_error()). After an error the engine can only be destroyed.
 */
#ifndef TY_RUNTIME_ENGINE_H
#define TY_RUNTIME_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "runtime/comm.h"
#include "runtime/data.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "runtime/shard.h"

typedef struct engine engine;

typedef struct engine_config {
    const model_layout *model;  /* borrowed, outlives the engine */
    const shard_layout *shard;  /* borrowed */
    comm *comm;                 /* borrowed; NULL when the world size is 1 */
    const dataset *train;       /* borrowed */
    const dataset *test;        /* borrowed */
    float mean, inv_std;        /* input normalisation (data_pixel_stats of the train set) */
    size_t max_local_batch;     /* largest n_local passed to engine_step/evaluate chunks */
    optim_config optim;
    int timeout_ms;             /* bound on waiting for peers (GPU collectives) */
    int local_rank;             /* picks the GPU */
    int local_world;            /* ranks on this machine: NCCL needs a GPU for each */
    int threads;                /* CPU: BLAS threads (0 leaves the library's choice) */
} engine_config;

/* CPU engine (OpenBLAS). On TY_OK *out is new. TY_ENOMEM. */
ty_err engine_create_cpu(const engine_config *cfg, engine **out, char *err, size_t errlen);

/*
 * GPU engine (cuBLAS, CUDA kernels, NCCL). TY_ENOTFOUND when this build has no CUDA or no
 * device is present; TY_EINVAL when more ranks run on this machine (local_world) than it
 * has devices, which NCCL cannot serve; TY_EIO when CUDA/NCCL initialisation fails. With a world size above 1
 * this is a collective call (it exchanges the ncclUniqueId over cfg->comm).
 */
ty_err engine_create_cuda(const engine_config *cfg, engine **out, char *err, size_t errlen);

/* Number of CUDA devices this build can use (0 without CUDA support or devices). */
int engine_cuda_devices(void);

/* Frees everything; accepts NULL. */
void engine_destroy(engine *e);

/* A short description ("cpu (OpenBLAS Haswell, 1 thread)", "cuda:0 NVIDIA H100"). Borrowed. */
const char *engine_describe(const engine *e);

/* Copies the full parameter vector in (all n_params elements; every rank the same). */
ty_err engine_set_params(engine *e, const float *params, char *err, size_t errlen);
/* Copies the full parameter vector out. */
ty_err engine_get_params(engine *e, float *params, char *err, size_t errlen);
/* Copies the optimizer state of the owned slices in / out: optim_state_count() vectors of n_owned. */
ty_err engine_set_state(engine *e, const float *const *state, char *err, size_t errlen);
ty_err engine_get_state(engine *e, float *const *state, char *err, size_t errlen);

/*
 * One training step on train samples idx[0..n_local) (this rank's slice of a global batch
 * of n_global samples; n_local may be 0), learning rate lr, optimizer step t (1-based).
 */
ty_err engine_step(engine *e, const uint32_t *idx, size_t n_local, size_t n_global, float lr,
                   int64_t t, char *err, size_t errlen);

/* Sum of this rank's per-sample training losses since the previous call (then reset). */
ty_err engine_take_loss(engine *e, double *sum, char *err, size_t errlen);

/* Number of test samples in [begin, end) classified correctly (local; no collectives). */
ty_err engine_evaluate(engine *e, size_t begin, size_t end, int64_t *correct, char *err,
                       size_t errlen);

/*
 * Seconds the training thread spent blocked on collectives (CPU engine; the GPU engine's
 * collectives run on a device stream and report 0 here).
 */
double engine_wait_seconds(const engine *e);

#endif
