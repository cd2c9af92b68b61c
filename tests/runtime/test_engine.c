/*
 * test_engine.c - the CPU engine against model.c + optim.c by hand, and the GPU engine
 * against the CPU engine (skipped where no CUDA device is present).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/data.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "runtime/rng.h"
#include "runtime/shard.h"
#include "tests/runtime/rt_testdata.h"

#define BATCH 32
#define STEPS 12

typedef struct fixture {
    char dir[4096];
    dataset train, test;
    float mean, inv_std;
    model_layout model;
    shard_layout shard;
    engine_config cfg;
    float *init;
    uint32_t idx[STEPS][BATCH];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    if (!f || rt_make_tempdir(f->dir, sizeof f->dir, "engine") != 0 ||
        rt_write_dataset(f->dir, 512, 128, 3) != 0 ||
        data_load(f->dir, "train", &f->train, err, sizeof err) != TY_OK ||
        data_load(f->dir, "t10k", &f->test, err, sizeof err) != TY_OK)
        return -1;
    float sd;
    data_pixel_stats(&f->train, &f->mean, &sd);
    f->inv_std = 1.0f / sd;
    size_t hidden[2] = {48, 24};
    if (model_layout_init(&f->model, 784, hidden, 2, 10) != TY_OK ||
        shard_layout_init(&f->shard, f->model.layer_off, f->model.n_layers, 1000, 1, 0) != TY_OK)
        return -1;
    f->init = malloc(f->model.n_params * sizeof(float));
    model_init_params(&f->model, 5, f->init);
    rng r;
    rng_seed(&r, 8);
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH; i++)
            f->idx[s][i] = (uint32_t)rng_below(&r, f->train.n);
    f->cfg = (engine_config){
        .model = &f->model, .shard = &f->shard, .comm = NULL, .train = &f->train,
        .test = &f->test, .mean = f->mean, .inv_std = f->inv_std, .max_local_batch = BATCH,
        .optim = {.kind = OPTIM_ADAMW, .lr = 3e-3f, .weight_decay = 0.01f, .beta1 = 0.9f,
                  .beta2 = 0.999f, .eps = 1e-8f, .momentum = 0.9f},
        .timeout_ms = 10000, .threads = 1};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    rt_remove_tree(f->dir);
    data_free(&f->train);
    data_free(&f->test);
    shard_layout_free(&f->shard);
    free(f->init);
    free(f);
    return 0;
}

static void test_cpu_engine_matches_hand_computation(void **state)
{
    fixture *f = *state;
    char err[256];
    engine *e = NULL;
    assert_int_equal(engine_create_cpu(&f->cfg, &e, err, sizeof err), TY_OK);
    assert_int_equal(engine_set_params(e, f->init, err, sizeof err), TY_OK);

    size_t np = f->model.n_params;
    float *p = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
    float *m = calloc(np, sizeof(float)), *v = calloc(np, sizeof(float)), *st[2] = {m, v};
    memcpy(p, f->init, np * sizeof(float));
    model_work w;
    assert_int_equal(model_work_init(&w, &f->model, BATCH), TY_OK);
    double hand_loss = 0, first = 0, last = 0;
    for (int s = 0; s < STEPS; s++) {
        float lr = optim_lr_at(&f->cfg.optim, s, STEPS);
        assert_int_equal(engine_step(e, f->idx[s], BATCH, BATCH, lr, s + 1, err, sizeof err), TY_OK);
        data_gather(&f->train, f->idx[s], BATCH, f->mean, f->inv_std, w.act[0], w.labels);
        model_forward(&f->model, p, BATCH, &w);
        double l = model_loss_grad(&f->model, BATCH, 1.0f / BATCH, &w);
        hand_loss += l;
        if (s == 0)
            first = l;
        last = l;
        model_backward(&f->model, p, BATCH, &w, g, NULL, NULL);
        optim_step(&f->cfg.optim, p, g, st, np, lr, s + 1);
    }
    assert_true(last < first); /* it learns */
    float *got = malloc(np * sizeof(float));
    assert_int_equal(engine_get_params(e, got, err, sizeof err), TY_OK);
    assert_memory_equal(got, p, np * sizeof(float));
    double loss = 0;
    assert_int_equal(engine_take_loss(e, &loss, err, sizeof err), TY_OK);
    assert_float_equal(loss, hand_loss, 1e-6 * fabs(hand_loss));
    assert_int_equal(engine_take_loss(e, &loss, err, sizeof err), TY_OK);
    assert_true(loss == 0);

    /* The optimizer state goes out (in the owned vector's bucket order) and comes back. */
    float *s0 = malloc(np * sizeof(float)), *s1 = malloc(np * sizeof(float)), *sv[2] = {s0, s1};
    float *packed = malloc(np * sizeof(float));
    assert_int_equal(engine_get_state(e, sv, err, sizeof err), TY_OK);
    shard_pack(&f->shard, m, packed);
    assert_memory_equal(s0, packed, np * sizeof(float));
    shard_pack(&f->shard, v, packed);
    assert_memory_equal(s1, packed, np * sizeof(float));
    free(packed);
    memset(s0, 0, np * sizeof(float));
    assert_int_equal(engine_set_state(e, (const float *const *)sv, err, sizeof err), TY_OK);
    assert_int_equal(engine_get_state(e, sv, err, sizeof err), TY_OK);
    assert_true(s0[0] == 0.0f);

    int64_t correct = -1;
    assert_int_equal(engine_evaluate(e, 0, f->test.n, &correct, err, sizeof err), TY_OK);
    assert_in_range(correct, 0, f->test.n);
    assert_int_equal(engine_evaluate(e, 0, f->test.n + 1, &correct, err, sizeof err), TY_EINVAL);
    /* An empty slice of the global batch (more ranks than samples) is a valid step. */
    assert_int_equal(engine_step(e, f->idx[0], 0, BATCH, 1e-3f, STEPS + 1, err, sizeof err), TY_OK);

    engine_destroy(e);
    engine_destroy(NULL);
    model_work_free(&w);
    free(p);
    free(g);
    free(m);
    free(v);
    free(got);
    free(s0);
    free(s1);
}

static void test_gpu_engine_matches_cpu_engine(void **state)
{
    fixture *f = *state;
    char err[512];
    if (engine_cuda_devices() < 1) {
        engine *e = NULL;
        assert_int_equal(engine_create_cuda(&f->cfg, &e, err, sizeof err), TY_ENOTFOUND);
        skip();
    }
    static const optim_kind kinds[] = {OPTIM_ADAMW, OPTIM_SGD};
    for (size_t k = 0; k < 2; k++) {
        engine_config cfg = f->cfg;
        cfg.optim.kind = kinds[k];
        engine *cpu = NULL, *gpu = NULL;
        assert_int_equal(engine_create_cpu(&cfg, &cpu, err, sizeof err), TY_OK);
        if (engine_create_cuda(&cfg, &gpu, err, sizeof err) != TY_OK)
            fail_msg("GPU engine: %s", err);
        assert_int_equal(engine_set_params(cpu, f->init, err, sizeof err), TY_OK);
        assert_int_equal(engine_set_params(gpu, f->init, err, sizeof err), TY_OK);
        for (int s = 0; s < STEPS; s++) {
            float lr = optim_lr_at(&cfg.optim, s, STEPS);
            size_t n = s == STEPS - 1 ? 0 : BATCH - (size_t)s; /* ragged, and one empty */
            assert_int_equal(engine_step(cpu, f->idx[s], n, BATCH, lr, s + 1, err, sizeof err), TY_OK);
            if (engine_step(gpu, f->idx[s], n, BATCH, lr, s + 1, err, sizeof err) != TY_OK)
                fail_msg("GPU step: %s", err);
        }
        size_t np = f->model.n_params;
        float *a = malloc(np * sizeof(float)), *b = malloc(np * sizeof(float));
        assert_int_equal(engine_get_params(cpu, a, err, sizeof err), TY_OK);
        assert_int_equal(engine_get_params(gpu, b, err, sizeof err), TY_OK);
        double rel = rt_rel_l2(b, a, np);
        if (rel > 1e-4)
            fail_msg("%s: GPU and CPU parameters differ by %g (relative L2)",
                     optim_name(kinds[k]), rel);
        double la, lb;
        assert_int_equal(engine_take_loss(cpu, &la, err, sizeof err), TY_OK);
        assert_int_equal(engine_take_loss(gpu, &lb, err, sizeof err), TY_OK);
        assert_float_equal(la, lb, 1e-4 * fabs(la));
        int64_t ca, cb;
        assert_int_equal(engine_evaluate(cpu, 0, f->test.n, &ca, err, sizeof err), TY_OK);
        assert_int_equal(engine_evaluate(gpu, 0, f->test.n, &cb, err, sizeof err), TY_OK);
        assert_in_range(cb, ca - 2, ca + 2); /* a near-tie may round either way */
        free(a);
        free(b);
        engine_destroy(cpu);
        engine_destroy(gpu);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_engine_matches_hand_computation),
        cmocka_unit_test(test_gpu_engine_matches_cpu_engine),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
