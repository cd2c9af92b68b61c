/*
 * test_checkpoint.c - sharded checkpoints written by one world size and read back by
 * others; completeness, corruption and pruning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/checkpoint.h"
#include "runtime/shard.h"
#include "tests/runtime/rt_testdata.h"

/* Four layers of 1000, 500, 37 and 63 elements. */
static const size_t layer_off[] = {0, 1000, 1500, 1537, 1600};
#define NP 1600
#define WRITE_WORLD 4
#define WRITE_CAP 100

static char dir[4096];
static float full[3][NP]; /* params, state 0, state 1 */

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < NP; i++) {
        full[0][i] = (float)i + 0.5f;
        full[1][i] = (float)i * 10.0f + 1.0f;
        full[2][i] = (float)i * -3.0f + 2.0f;
    }
    return rt_make_tempdir(dir, sizeof dir, "ckpt");
}

static int teardown(void **state)
{
    (void)state;
    rt_remove_tree(dir);
    return 0;
}

/* Writes every rank's shard of a WRITE_WORLD run at step; commits when asked. */
static void write_checkpoint(int64_t step, int ranks, int commit)
{
    char err[512];
    shard_layout s0;
    for (int r = 0; r < ranks; r++) {
        shard_layout s;
        assert_int_equal(shard_layout_init(&s, layer_off, 4, WRITE_CAP, WRITE_WORLD, r), TY_OK);
        float *vec[3];
        for (int k = 0; k < 3; k++) {
            vec[k] = malloc((s.n_owned + 1) * sizeof(float));
            shard_pack(&s, full[k], vec[k]);
        }
        if (ckpt_write_shard(dir, step, &s, (const float *const *)vec, 3, err, sizeof err) != TY_OK)
            fail_msg("write shard %d: %s", r, err);
        for (int k = 0; k < 3; k++)
            free(vec[k]);
        shard_layout_free(&s);
    }
    if (!commit)
        return;
    assert_int_equal(shard_layout_init(&s0, layer_off, 4, WRITE_CAP, WRITE_WORLD, 0), TY_OK);
    size_t offs[8], cnts[8];
    for (size_t b = 0; b < s0.n_buckets; b++) {
        offs[b] = s0.buckets[b].offset;
        cnts[b] = s0.buckets[b].count;
    }
    ckpt_meta m = {.step = step, .epoch = 3, .epoch_pos = 1234, .rng = {1, 2, 3, UINT64_MAX},
                   .seed = 0xfeedfacecafebeefULL, .batch = 256, .world = WRITE_WORLD,
                   .n_params = NP, .n_vectors = 3, .optimizer = "adamw", .n_layers = 4,
                   .sizes = {10, 20, 30, 40, 50}, .n_buckets = s0.n_buckets,
                   .bucket_offset = offs, .bucket_count = cnts};
    if (ckpt_commit(dir, &m, err, sizeof err) != TY_OK)
        fail_msg("commit: %s", err);
    shard_layout_free(&s0);
}

static void shard_file(char *buf, size_t len, int64_t step, int rank)
{
    snprintf(buf, len, "%s/step-%012lld/shard-%05d-of-%05d.bin", dir, (long long)step, rank,
             WRITE_WORLD);
}

static void test_round_trip_to_other_world_sizes(void **state)
{
    (void)state;
    char err[512];
    write_checkpoint(10, WRITE_WORLD, 1);
    int64_t step = -1;
    assert_int_equal(ckpt_latest(dir, &step, err, sizeof err), TY_OK);
    assert_int_equal(step, 10);
    ckpt_meta m;
    assert_int_equal(ckpt_read_manifest(dir, 10, &m, err, sizeof err), TY_OK);
    assert_int_equal(m.epoch, 3);
    assert_int_equal(m.epoch_pos, 1234);
    assert_true(m.rng[3] == UINT64_MAX && m.rng[0] == 1);
    assert_true(m.seed == 0xfeedfacecafebeefULL);
    assert_int_equal(m.world, WRITE_WORLD);
    assert_int_equal(m.n_vectors, 3);
    assert_string_equal(m.optimizer, "adamw");
    assert_int_equal(m.n_layers, 4);
    assert_int_equal(m.sizes[4], 50);

    static const struct {
        int world;
        size_t cap;
    } readers[] = {{1, 0}, {2, WRITE_CAP}, {3, 0}, {4, WRITE_CAP}, {5, 700}, {64, 1}};
    for (size_t c = 0; c < sizeof readers / sizeof readers[0]; c++) {
        for (int r = 0; r < readers[c].world; r++) {
            shard_layout s;
            assert_int_equal(
                shard_layout_init(&s, layer_off, 4, readers[c].cap, readers[c].world, r), TY_OK);
            for (size_t b = 0; b < s.n_buckets; b++) {
                const shard_bucket *k = &s.buckets[b];
                float got[NP];
                for (int v = 0; v < 3; v++) {
                    if (ckpt_read(dir, 10, &m, v, k->own_offset, k->own_count, got, err,
                                  sizeof err) != TY_OK)
                        fail_msg("world %d rank %d: %s", readers[c].world, r, err);
                    assert_memory_equal(got, full[v] + k->own_offset, k->own_count * sizeof(float));
                }
            }
            shard_layout_free(&s);
        }
    }
    float one;
    assert_int_equal(ckpt_read(dir, 10, &m, 3, 0, 1, &one, err, sizeof err), TY_EINVAL);
    assert_int_equal(ckpt_read(dir, 10, &m, 0, NP - 1, 2, &one, err, sizeof err), TY_EINVAL);
    ckpt_meta_free(&m);
}

static void test_incomplete_and_damaged_are_skipped(void **state)
{
    (void)state;
    char err[512], path[4300];
    int64_t step = -1;
    /* Shards of step 20 without a manifest: a writer died before committing. */
    write_checkpoint(20, WRITE_WORLD, 0);
    /* Step 30 committed, then one shard lost its tail. */
    write_checkpoint(30, WRITE_WORLD, 1);
    shard_file(path, sizeof path, 30, 2);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(ckpt_latest(dir, &step, err, sizeof err), TY_OK);
    assert_int_equal(step, 10);

    /* Commit refuses a checkpoint whose shards are not all there. */
    write_checkpoint(35, WRITE_WORLD - 1, 0);
    shard_layout s;
    assert_int_equal(shard_layout_init(&s, layer_off, 4, WRITE_CAP, WRITE_WORLD, 0), TY_OK);
    size_t offs[8], cnts[8];
    for (size_t b = 0; b < s.n_buckets; b++) {
        offs[b] = s.buckets[b].offset;
        cnts[b] = s.buckets[b].count;
    }
    ckpt_meta m = {.step = 35, .world = WRITE_WORLD, .n_params = NP, .n_vectors = 3,
                   .optimizer = "sgd", .n_layers = 1, .sizes = {1, 1}, .n_buckets = s.n_buckets,
                   .bucket_offset = offs, .bucket_count = cnts};
    assert_int_equal(ckpt_commit(dir, &m, err, sizeof err), TY_EINVAL);
    shard_layout_free(&s);

    /* A shard whose header names another rank is refused when read. */
    write_checkpoint(40, WRITE_WORLD, 1);
    shard_file(path, sizeof path, 40, 1);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 12, SEEK_SET);
    fputc(3, f);
    fclose(f);
    assert_int_equal(ckpt_latest(dir, &step, err, sizeof err), TY_OK);
    assert_int_equal(step, 40);
    ckpt_meta m40;
    assert_int_equal(ckpt_read_manifest(dir, 40, &m40, err, sizeof err), TY_OK);
    float got[NP];
    assert_int_equal(ckpt_read(dir, 40, &m40, 0, 0, NP, got, err, sizeof err), TY_EINVAL);
    assert_non_null(strstr(err, "header"));
    ckpt_meta_free(&m40);

    /* A manifest that is not one. */
    snprintf(path, sizeof path, "%s/step-%012d", dir, 45);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/step-%012d/manifest.json", dir, 45);
    f = fopen(path, "w");
    fputs("{\"format\":\"something-else\"}", f);
    fclose(f);
    assert_int_equal(ckpt_read_manifest(dir, 45, &m40, err, sizeof err), TY_EINVAL);
    assert_int_equal(ckpt_latest(dir, &step, err, sizeof err), TY_OK);
    assert_int_equal(step, 40);
}

static void test_prune(void **state)
{
    (void)state;
    char err[512], path[4300];
    int64_t step;
    write_checkpoint(50, WRITE_WORLD, 1);
    write_checkpoint(60, WRITE_WORLD, 0); /* newer, still being written: must stay */
    assert_int_equal(ckpt_prune(dir, 2, err, sizeof err), TY_OK);
    struct stat st;
    static const struct {
        int step;
        int exists;
    } expect[] = {{10, 0}, {20, 0}, {30, 0}, {35, 0}, {40, 1}, {45, 0}, {50, 1}, {60, 1}};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        snprintf(path, sizeof path, "%s/step-%012d", dir, expect[i].step);
        if ((stat(path, &st) == 0) != expect[i].exists)
            fail_msg("step %d: exists %d, expected %d", expect[i].step, !expect[i].exists,
                     expect[i].exists);
    }
    assert_int_equal(ckpt_latest(dir, &step, err, sizeof err), TY_OK);
    assert_int_equal(step, 50);
    assert_int_equal(ckpt_latest("/nonexistent/dir", &step, err, sizeof err), TY_ENOTFOUND);
}

int main(void)
{
    /* The cases build on each other's files, in this order. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_to_other_world_sizes),
        cmocka_unit_test(test_incomplete_and_damaged_are_skipped),
        cmocka_unit_test(test_prune),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
