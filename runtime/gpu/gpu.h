/*
 * gpu.h - the device math of trainyard-worker on NVIDIA GPUs (cuBLAS, CUDA kernels, NCCL).
 *
 * A C interface over gpu.cu, used by engine_cuda.c; nothing here knows about files,
 * flags or the TCP rendezvous. The trainer keeps on the device: the train and test sets
 * (uint8 pixels, normalised by a 256-entry table while gathering a batch), the flat
 * parameter vector, its gradients, the optimizer state of the owned slices, activations.
 * Per step only the batch's sample indices go up, nothing comes down.
 *
 * Streams: forward and backward run on a compute stream; each gradient bucket, once
 * backward has finished it (an event), is reduce-scattered on a communication stream,
 * which then runs the optimizer on the owned slice and the bucket's all-gather. Buckets
 * whose size is a multiple of the world size use ncclReduceScatter / ncclAllGather, the
 * others a group of ncclReduce / ncclBroadcast, one per rank slice, so that the shards
 * follow comm.h's rule (shard_offset/shard_count below) on every device.
 *
 * Failure: the communicator is non-blocking; every wait polls the stream and
 * ncclCommGetAsyncError with a deadline of timeout_ms and aborts the communicator when it
 * passes, so a dead or hung peer gives TY_EIO instead of a hang.
 *
 * All functions return TY_OK or an error with a message in err; ownership as stated.
 */
#ifndef TY_RUNTIME_GPU_H
#define TY_RUNTIME_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "runtime/data.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "runtime/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_NCCL_ID_BYTES 128

typedef struct gpu_trainer gpu_trainer;

typedef struct gpu_trainer_config {
    const model_layout *model;   /* borrowed, outlives the trainer */
    const shard_layout *shard;   /* borrowed */
    const dataset *train;        /* copied to the device at creation */
    const dataset *test;
    const float *input_lut;      /* 256 floats: data_input_lut() */
    size_t max_local_batch;
    optim_config optim;
    int n_state;                 /* optim_state_count(optim.kind) */
    int device;                  /* CUDA device ordinal */
    int rank, world;
    const size_t *shard_offset;  /* [bucket * world + r]: comm_shard_offset(count_b, world, r) */
    const size_t *shard_count;   /* [bucket * world + r]: comm_shard_count(count_b, world, r) */
    const unsigned char *nccl_id;/* GPU_NCCL_ID_BYTES, identical on all ranks; unused if world == 1 */
    int timeout_ms;
} gpu_trainer_config;

/* Number of CUDA devices (0 when there is no driver or no device). Never fails. */
int gpu_device_count(void);

/* A fresh ncclUniqueId (rank 0 makes it, the others receive it). */
ty_err gpu_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], char *err, size_t errlen);

/* On TY_OK *out is new (gpu_trainer_destroy). Collective across ranks when world > 1. */
ty_err gpu_trainer_create(const gpu_trainer_config *cfg, gpu_trainer **out, char *err,
                          size_t errlen);
/* Accepts NULL. */
void gpu_trainer_destroy(gpu_trainer *g);
/* "NVIDIA H100 80GB HBM3" etc. Borrowed. */
const char *gpu_trainer_device_name(const gpu_trainer *g);

ty_err gpu_trainer_set_params(gpu_trainer *g, const float *params, char *err, size_t errlen);
ty_err gpu_trainer_get_params(gpu_trainer *g, float *params, char *err, size_t errlen);
ty_err gpu_trainer_set_state(gpu_trainer *g, const float *const *state, char *err, size_t errlen);
ty_err gpu_trainer_get_state(gpu_trainer *g, float *const *state, char *err, size_t errlen);

/*
 * One step on train samples idx[0..n_local) of a global batch of n_global; k holds the
 * optimizer constants (optim_step_scalars). Returns when the updated parameters are on
 * the device. TY_EIO for a CUDA/NCCL failure or a collective past the timeout; then
 * *collective_failed is 1 (the communicator has been aborted).
 */
ty_err gpu_trainer_step(gpu_trainer *g, const uint32_t *idx, size_t n_local, size_t n_global,
                        const optim_scalars *k, int *collective_failed, char *err, size_t errlen);

/* Sum of per-sample training losses since the previous call (then reset). */
ty_err gpu_trainer_take_loss(gpu_trainer *g, double *sum, char *err, size_t errlen);

/* Correctly classified test samples in [begin, end). */
ty_err gpu_trainer_evaluate(gpu_trainer *g, size_t begin, size_t end, int64_t *correct, char *err,
                            size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
