/*
 * shard.h - gradient buckets and the parameter shards each rank owns.
 *
 * The flat parameter vector (model.h) is cut into buckets at layer boundaries, walking the
 * layers from the last to the first (the order backward produces them) and closing a
 * bucket once it holds at least bucket_cap elements. Bucket 0 therefore holds the last
 * layers; a bucket is ready to travel as soon as backward has finished its lowest layer.
 *
 * Every bucket is split among the ranks by the rule of comm.h: rank r owns elements
 * [offset + comm_shard_offset(count, world, r), +comm_shard_count(count, world, r)) of
 * bucket b. Rank r is the parameter server of those slices: the reduce-scatter of bucket b
 * delivers it their summed gradient, it alone applies the optimizer to them and keeps their
 * optimizer state, and the all-gather of bucket b brings everyone the updated values.
 *
 * A rank's "owned vector" is its slices packed in bucket order; own_pos gives where each
 * bucket's slice starts in it. Optimizer state and checkpoint shard files use that order.
 */
#ifndef TY_RUNTIME_SHARD_H
#define TY_RUNTIME_SHARD_H

#include <stddef.h>

#include "common/ty_error.h"

typedef struct shard_bucket {
    size_t offset, count;       /* elements [offset, offset + count) of the flat vector */
    int first_layer;            /* lowest layer in the bucket: backward completes it last */
    int last_layer;             /* highest layer in the bucket */
    size_t own_offset;          /* this rank's slice, in flat-vector coordinates */
    size_t own_count;
    size_t own_pos;             /* where the slice starts in the owned vector */
} shard_bucket;

typedef struct shard_layout {
    int world, rank;
    size_t n_params;
    size_t n_buckets;
    shard_bucket *buckets;      /* owned; in reduction order (last layers first) */
    size_t n_owned;             /* length of this rank's owned vector */
} shard_layout;

/*
 * Builds the layout for layers [layer_off[l], layer_off[l+1]), l < n_layers (model.h's
 * layer_off), with buckets of at least bucket_cap elements (0: one bucket per layer).
 * On TY_OK *s holds new memory (free with shard_layout_free). TY_EINVAL for world < 1,
 * rank outside [0, world), n_layers < 1 or decreasing offsets; TY_ENOMEM.
 */
ty_err shard_layout_init(shard_layout *s, const size_t *layer_off, int n_layers, size_t bucket_cap,
                         int world, int rank);

/* Frees the buckets; accepts NULL and a zeroed struct. */
void shard_layout_free(shard_layout *s);

/* Index of the bucket whose first_layer is `layer`, or -1 when layer completes no bucket. */
int shard_bucket_completed_by(const shard_layout *s, int layer);

/* Copies this rank's slices of the full vector `full` into the owned vector `owned`. */
void shard_pack(const shard_layout *s, const float *full, float *owned);

#endif
