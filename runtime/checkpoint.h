/*
 * checkpoint.h - sharded checkpoints that a different world size can load.
 *
 * On disk, under the checkpoint directory D:
 *
 *   D/step-000000000060/shard-00000-of-00004.bin   one file per rank of the writing run
 *   D/step-000000000060/...
 *   D/step-000000000060/manifest.json              written last: the checkpoint exists iff it does
 *
 * Shard file of rank r (little-endian):
 *   bytes  0..7   magic "TYSHARD\0"
 *          8..11  u32 format version (1)
 *         12..15  u32 rank r
 *         16..19  u32 world size W
 *         20..23  u32 number of vectors V (1 + optimizer state vectors)
 *         24..31  u64 n_params (length of the flat parameter vector)
 *         32..39  u64 n_owned (elements rank r owns)
 *         40..47  u64 step
 *         48..63  zero
 *   then V blocks of n_owned float32: block 0 the parameters rank r owns, block k >= 1 the
 *   optimizer's state vector k-1 for the same elements. Inside a block, rank r's slices of
 *   the buckets follow each other in bucket order (shard.h's "owned vector").
 *
 * manifest.json records the step, the epoch, the position inside the epoch (samples of it
 * already trained), the data-order RNG state at the start of that epoch, W, n_params, the
 * optimizer and V, the layer sizes, the seed and batch, the bucket boundaries
 * [[offset, count], ...] in bucket order, and each shard file's size. Element i of the
 * flat vector lives in the bucket b containing it, at j = i - offset_b; its old owner is the
 * rank r with comm_shard_offset(count_b, W, r) <= j < that + comm_shard_count(count_b, W, r),
 * and it sits at position sum_{b' < b} comm_shard_count(count_b', W, r)
 * + j - comm_shard_offset(count_b, W, r) of that rank's blocks. ckpt_read() does this
 * mapping, so a run with any world size reads exactly the byte ranges it now owns.
 *
 * Writing protocol: every rank writes its file to a temporary name, fsyncs and renames it;
 * after a barrier rank 0 checks every file, writes the manifest the same way and fsyncs the
 * directory. A crash at any point leaves either the previous complete checkpoint or the new
 * one, never a half-written one that would be loaded.
 */
#ifndef TY_RUNTIME_CHECKPOINT_H
#define TY_RUNTIME_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "runtime/model.h"
#include "runtime/shard.h"

#define CKPT_MAX_VECTORS 3

typedef struct ckpt_meta {
    int64_t step;          /* optimizer steps completed */
    int64_t epoch;         /* epoch in progress (0-based) */
    int64_t epoch_pos;     /* samples of that epoch already trained */
    uint64_t rng[4];       /* data-order xoshiro256** state at the start of `epoch` */
    uint64_t seed;
    int64_t batch;         /* global batch of the writing run */
    int world;             /* world size of the writing run */
    size_t n_params;
    int n_vectors;         /* 1 + optimizer state vectors, <= CKPT_MAX_VECTORS */
    char optimizer[16];    /* optim_name() */
    int n_layers;
    size_t sizes[MODEL_MAX_LAYERS + 1];
    size_t n_buckets;
    size_t *bucket_offset; /* owned; n_buckets, in bucket order */
    size_t *bucket_count;  /* owned */
} ckpt_meta;

/* Frees the bucket arrays of a meta filled by ckpt_read_manifest; accepts NULL. */
void ckpt_meta_free(ckpt_meta *m);

/*
 * Writes this rank's shard of checkpoint `step`: vectors[0..n_vectors), each of
 * layout->n_owned floats (borrowed), durably, creating D/step-N/ as needed.
 * TY_EIO (with the path and errno text) or TY_EINVAL.
 */
ty_err ckpt_write_shard(const char *dir, int64_t step, const shard_layout *layout,
                        const float *const *vectors, int n_vectors, char *err, size_t errlen);

/*
 * Rank 0, after every rank's ckpt_write_shard returned: checks that all m->world shard
 * files exist with the right size and atomically publishes the manifest of m (its
 * bucket arrays borrowed). TY_EIO, TY_EINVAL (a missing or short shard file).
 */
ty_err ckpt_commit(const char *dir, const ckpt_meta *m, char *err, size_t errlen);

/*
 * Step of the newest complete checkpoint in dir (a manifest that parses and whose shard
 * files all exist with their recorded size). TY_ENOTFOUND when there is none (or no dir).
 */
ty_err ckpt_latest(const char *dir, int64_t *step, char *err, size_t errlen);

/* Reads the manifest of checkpoint `step` into *m (new arrays). TY_ENOTFOUND, TY_EINVAL. */
ty_err ckpt_read_manifest(const char *dir, int64_t step, ckpt_meta *m, char *err, size_t errlen);

/*
 * Reads elements [offset, offset + count) of vector `vec` (0 = parameters, k = optimizer
 * state k-1) of checkpoint `step`, described by m, into dst, whatever world size wrote it.
 * TY_EINVAL for a range outside the vector or a shard header that disagrees with m, TY_EIO.
 */
ty_err ckpt_read(const char *dir, int64_t step, const ckpt_meta *m, int vec, size_t offset,
                 size_t count, float *dst, char *err, size_t errlen);

/*
 * Deletes all but the `keep` newest complete checkpoints, and incomplete ones older than
 * the newest complete one. keep >= 1. Best effort: returns TY_EIO if something stayed.
 */
ty_err ckpt_prune(const char *dir, int keep, char *err, size_t errlen);

#endif
