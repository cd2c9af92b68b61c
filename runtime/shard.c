/*
 * shard.c - buckets and owned slices.
 */
#include "runtime/shard.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

ty_err shard_layout_init(shard_layout *s, const size_t *layer_off, int n_layers, size_t bucket_cap,
                         int world, int rank)
{
    memset(s, 0, sizeof *s);
    if (world < 1 || rank < 0 || rank >= world || n_layers < 1)
        return TY_EINVAL;
    for (int l = 0; l < n_layers; l++)
        if (layer_off[l + 1] < layer_off[l])
            return TY_EINVAL;
    s->buckets = calloc((size_t)n_layers, sizeof *s->buckets);
    if (!s->buckets)
        return TY_ENOMEM;
    s->world = world;
    s->rank = rank;
    s->n_params = layer_off[n_layers] - layer_off[0];

    int top = n_layers - 1;
    while (top >= 0) {
        int low = top;
        while (low > 0 && layer_off[top + 1] - layer_off[low] < bucket_cap)
            low--;
        shard_bucket *b = &s->buckets[s->n_buckets++];
        b->first_layer = low;
        b->last_layer = top;
        b->offset = layer_off[low];
        b->count = layer_off[top + 1] - layer_off[low];
        b->own_offset = b->offset + comm_shard_offset(b->count, world, rank);
        b->own_count = comm_shard_count(b->count, world, rank);
        b->own_pos = s->n_owned;
        s->n_owned += b->own_count;
        top = low - 1;
    }
    return TY_OK;
}

void shard_layout_free(shard_layout *s)
{
    if (!s)
        return;
    free(s->buckets);
    memset(s, 0, sizeof *s);
}

int shard_bucket_completed_by(const shard_layout *s, int layer)
{
    for (size_t i = 0; i < s->n_buckets; i++)
        if (s->buckets[i].first_layer == layer)
            return (int)i;
    return -1;
}

void shard_pack(const shard_layout *s, const float *full, float *owned)
{
    for (size_t i = 0; i < s->n_buckets; i++) {
        const shard_bucket *b = &s->buckets[i];
        memcpy(owned + b->own_pos, full + b->own_offset, b->own_count * sizeof(float));
    }
}
