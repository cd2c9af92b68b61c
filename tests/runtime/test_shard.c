/*
 * test_shard.c - buckets (reverse layer order, size cap) and the owned slices of every rank.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/comm.h"
#include "runtime/shard.h"

/* Layers of 100, 50, 7 and 30 elements. */
static const size_t layer_off[] = {0, 100, 150, 157, 187};

static void test_buckets(void **state)
{
    (void)state;
    static const struct {
        size_t cap;
        size_t n_buckets;
        int first[4], last[4];
    } cases[] = {
        {0, 4, {3, 2, 1, 0}, {3, 2, 1, 0}},  /* one bucket per layer */
        {30, 3, {3, 1, 0}, {3, 2, 0}},        /* the last layer alone reaches the cap */
        {31, 3, {2, 1, 0}, {3, 1, 0}},        /* 30 + 7, then 50, then 100 */
        {60, 2, {1, 0}, {3, 0}},              /* 30 + 7 + 50 */
        {1000, 1, {0}, {3}},                  /* everything */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        shard_layout s;
        assert_int_equal(shard_layout_init(&s, layer_off, 4, cases[c].cap, 1, 0), TY_OK);
        assert_int_equal(s.n_buckets, cases[c].n_buckets);
        size_t covered = 0, prev_offset = 187;
        for (size_t b = 0; b < s.n_buckets; b++) {
            const shard_bucket *k = &s.buckets[b];
            assert_int_equal(k->first_layer, cases[c].first[b]);
            assert_int_equal(k->last_layer, cases[c].last[b]);
            assert_int_equal(k->offset, layer_off[k->first_layer]);
            assert_int_equal(k->offset + k->count, prev_offset); /* contiguous, descending */
            prev_offset = k->offset;
            covered += k->count;
            assert_int_equal(shard_bucket_completed_by(&s, k->first_layer), (int)b);
        }
        assert_int_equal(covered, 187);
        shard_layout_free(&s);
    }
}

static void test_owned_slices_partition_every_bucket(void **state)
{
    (void)state;
    static const int worlds[] = {1, 2, 3, 4, 7, 200};
    for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
        int world = worlds[wi];
        unsigned char *owner_count = calloc(187, 1);
        for (int r = 0; r < world; r++) {
            shard_layout s;
            assert_int_equal(shard_layout_init(&s, layer_off, 4, 31, world, r), TY_OK);
            size_t pos = 0;
            for (size_t b = 0; b < s.n_buckets; b++) {
                const shard_bucket *k = &s.buckets[b];
                assert_int_equal(k->own_offset, k->offset + comm_shard_offset(k->count, world, r));
                assert_int_equal(k->own_count, comm_shard_count(k->count, world, r));
                assert_true(k->own_offset + k->own_count <= k->offset + k->count);
                assert_int_equal(k->own_pos, pos);
                pos += k->own_count;
                for (size_t i = 0; i < k->own_count; i++)
                    owner_count[k->own_offset + i]++;
            }
            assert_int_equal(s.n_owned, pos);
            shard_layout_free(&s);
        }
        for (size_t i = 0; i < 187; i++)
            assert_int_equal(owner_count[i], 1);
        free(owner_count);
    }
}

static void test_pack(void **state)
{
    (void)state;
    shard_layout s;
    assert_int_equal(shard_layout_init(&s, layer_off, 4, 0, 3, 1), TY_OK);
    float full[187], owned[187];
    for (int i = 0; i < 187; i++)
        full[i] = (float)i;
    shard_pack(&s, full, owned);
    for (size_t b = 0; b < s.n_buckets; b++)
        for (size_t i = 0; i < s.buckets[b].own_count; i++)
            assert_true(owned[s.buckets[b].own_pos + i] == (float)(s.buckets[b].own_offset + i));
    shard_layout_free(&s);
}

static void test_invalid(void **state)
{
    (void)state;
    shard_layout s;
    static const size_t bad_off[] = {0, 10, 5};
    assert_int_equal(shard_layout_init(&s, layer_off, 4, 0, 0, 0), TY_EINVAL);
    assert_int_equal(shard_layout_init(&s, layer_off, 4, 0, 2, 2), TY_EINVAL);
    assert_int_equal(shard_layout_init(&s, layer_off, 0, 0, 1, 0), TY_EINVAL);
    assert_int_equal(shard_layout_init(&s, bad_off, 2, 0, 1, 0), TY_EINVAL);
    shard_layout_free(NULL);
    assert_int_equal(shard_bucket_completed_by(&s, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_owned_slices_partition_every_bucket),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
