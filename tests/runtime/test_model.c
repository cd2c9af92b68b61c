/*
 * test_model.c - parameter layout, initialisation, and the CPU passes: gradients against
 * central finite differences, the loss of known logits, accuracy counting.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/model.h"
#include "runtime/rng.h"

static void test_layout(void **state)
{
    (void)state;
    static const struct {
        size_t in, classes;
        size_t hidden[3];
        int n_hidden;
        size_t n_params;
        ty_err rc;
    } cases[] = {
        {784, 10, {512, 512}, 2, 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10, TY_OK},
        {4, 3, {0}, 0, 4 * 3 + 3, TY_OK},
        {5, 2, {7, 1, 9}, 3, 5 * 7 + 7 + 7 * 1 + 1 + 1 * 9 + 9 + 9 * 2 + 2, TY_OK},
        {0, 10, {4}, 1, 0, TY_EINVAL},
        {4, 0, {4}, 1, 0, TY_EINVAL},
        {4, 10, {0}, 1, 0, TY_EINVAL},
        {4, 10, {4}, -1, 0, TY_EINVAL},
        {4, 10, {(size_t)1 << 31}, 1, 0, TY_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_layout m;
        ty_err rc = model_layout_init(&m, cases[i].in, cases[i].hidden, cases[i].n_hidden,
                                      cases[i].classes);
        assert_int_equal(rc, cases[i].rc);
        if (rc != TY_OK)
            continue;
        assert_int_equal(m.n_params, cases[i].n_params);
        assert_int_equal(m.layer_off[0], 0);
        assert_int_equal(m.layer_off[m.n_layers], m.n_params);
        for (int l = 0; l < m.n_layers; l++) {
            assert_int_equal(m.w_off[l], m.layer_off[l]);
            assert_int_equal(m.b_off[l], m.w_off[l] + m.sizes[l] * m.sizes[l + 1]);
            assert_int_equal(m.layer_off[l + 1], m.b_off[l] + m.sizes[l + 1]);
        }
    }
    model_layout m;
    size_t many[MODEL_MAX_LAYERS];
    for (int i = 0; i < MODEL_MAX_LAYERS; i++)
        many[i] = 3;
    assert_int_equal(model_layout_init(&m, 3, many, MODEL_MAX_LAYERS, 2), TY_EINVAL);
    assert_int_equal(model_layout_init(&m, 3, many, MODEL_MAX_LAYERS - 1, 2), TY_OK);
}

static void test_init(void **state)
{
    (void)state;
    model_layout m;
    size_t hidden[1] = {16};
    assert_int_equal(model_layout_init(&m, 24, hidden, 1, 4), TY_OK);
    float *a = malloc(m.n_params * sizeof(float)), *b = malloc(m.n_params * sizeof(float));
    model_init_params(&m, 3, a);
    model_init_params(&m, 3, b);
    assert_memory_equal(a, b, m.n_params * sizeof(float));
    model_init_params(&m, 4, b);
    assert_memory_not_equal(a, b, m.n_params * sizeof(float));
    for (int l = 0; l < m.n_layers; l++) {
        float bound = sqrtf(6.0f / (float)m.sizes[l]);
        for (size_t i = m.w_off[l]; i < m.b_off[l]; i++)
            assert_true(fabsf(a[i]) <= bound);
        for (size_t i = m.b_off[l]; i < m.layer_off[l + 1]; i++)
            assert_true(a[i] == 0.0f);
    }
    free(a);
    free(b);
}

/* Mean loss of the batch in w at params p, in double. */
static double batch_loss(const model_layout *m, const float *p, size_t b, model_work *w)
{
    model_forward(m, p, b, w);
    return model_loss_grad(m, b, 1.0f, w) / (double)b;
}

typedef struct order_log {
    int layers[MODEL_MAX_LAYERS];
    int n;
} order_log;

static void record_layer(void *ctx, int layer)
{
    order_log *o = ctx;
    o->layers[o->n++] = layer;
}

static void test_gradient_matches_finite_differences(void **state)
{
    (void)state;
    model_layout m;
    size_t hidden[2] = {7, 5};
    const size_t b = 6;
    assert_int_equal(model_layout_init(&m, 4, hidden, 2, 3), TY_OK);
    float *p = malloc(m.n_params * sizeof(float)), *g = malloc(m.n_params * sizeof(float));
    model_work w;
    assert_int_equal(model_work_init(&w, &m, b), TY_OK);
    model_init_params(&m, 11, p);
    rng r;
    rng_seed(&r, 12);
    for (size_t i = 0; i < m.n_params; i++) /* non-zero biases exercise their gradient */
        if (p[i] == 0.0f)
            p[i] = 0.1f * (rng_uniform(&r) - 0.5f);
    float x[6 * 4];
    for (size_t i = 0; i < b * 4; i++)
        x[i] = 2.0f * rng_uniform(&r) - 1.0f;
    uint8_t y[6] = {0, 1, 2, 2, 1, 0};

    memcpy(w.act[0], x, sizeof x);
    memcpy(w.labels, y, b);
    model_forward(&m, p, b, &w);
    model_loss_grad(&m, b, 1.0f / (float)b, &w);
    order_log order = {.n = 0};
    model_backward(&m, p, b, &w, g, record_layer, &order);
    assert_int_equal(order.n, 3);
    assert_int_equal(order.layers[0], 2);
    assert_int_equal(order.layers[1], 1);
    assert_int_equal(order.layers[2], 0);

    const float h = 1e-3f;
    for (size_t i = 0; i < m.n_params; i++) {
        float saved = p[i];
        p[i] = saved + h;
        memcpy(w.act[0], x, sizeof x);
        double up = batch_loss(&m, p, b, &w);
        p[i] = saved - h;
        memcpy(w.act[0], x, sizeof x);
        double down = batch_loss(&m, p, b, &w);
        p[i] = saved;
        double numeric = (up - down) / (2.0 * h);
        double tol = 2e-3 + 2e-2 * fabs(numeric);
        if (fabs(numeric - g[i]) > tol)
            fail_msg("parameter %zu: backward %g, finite difference %g", i, (double)g[i], numeric);
    }
    model_work_free(&w);
    free(p);
    free(g);
}

static void test_loss_of_known_logits(void **state)
{
    (void)state;
    model_layout m;
    assert_int_equal(model_layout_init(&m, 2, NULL, 0, 4), TY_OK);
    float *p = calloc(m.n_params, sizeof(float));
    model_work w;
    assert_int_equal(model_work_init(&w, &m, 3), TY_OK);
    memset(w.act[0], 0, 3 * 2 * sizeof(float));
    w.labels[0] = 0;
    w.labels[1] = 3;
    w.labels[2] = 1;
    model_forward(&m, p, 3, &w);
    /* Zero weights: uniform softmax, loss ln(4) per sample, gradient (1/4 - onehot) * scale. */
    double loss = model_loss_grad(&m, 3, 0.5f, &w);
    assert_float_equal(loss, 3 * log(4.0), 1e-5);
    assert_float_equal(w.delta[0][0], (0.25 - 1) * 0.5, 1e-6);
    assert_float_equal(w.delta[0][1], 0.25 * 0.5, 1e-6);
    assert_float_equal(w.delta[0][4 + 3], (0.25 - 1) * 0.5, 1e-6);
    /* Huge logits stay finite (the max is subtracted). */
    float big[4] = {1000.0f, -1000.0f, 0.0f, 999.0f};
    memcpy(w.act[1], big, sizeof big);
    w.labels[0] = 3;
    loss = model_loss_grad(&m, 1, 1.0f, &w);
    assert_float_equal(loss, log(1.0 + exp(-1.0)) + 1.0, 1e-4);
    model_work_free(&w);
    free(p);
}

static void test_count_correct_and_empty_batch(void **state)
{
    (void)state;
    model_layout m;
    size_t hidden[1] = {3};
    assert_int_equal(model_layout_init(&m, 2, hidden, 1, 3), TY_OK);
    model_work w;
    assert_int_equal(model_work_init(&w, &m, 4), TY_OK);
    float logits[4 * 3] = {1, 2, 0, 5, 1, 1, 0, 0, 0, 3, 3, 1};
    memcpy(w.act[2], logits, sizeof logits);
    uint8_t y[4] = {1, 0, 0, 1};
    memcpy(w.labels, y, 4);
    /* Rows: argmax 1 (right), 0 (right), 0 on ties (right), 0 on ties (wrong). */
    assert_int_equal(model_count_correct(&m, 4, &w), 3);

    float *p = calloc(m.n_params, sizeof(float)), *g = malloc(m.n_params * sizeof(float));
    for (size_t i = 0; i < m.n_params; i++)
        g[i] = 1.0f;
    order_log order = {.n = 0};
    model_backward(&m, p, 0, &w, g, record_layer, &order);
    for (size_t i = 0; i < m.n_params; i++)
        assert_true(g[i] == 0.0f);
    assert_int_equal(order.n, 2);
    model_work_free(&w);
    free(p);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_gradient_matches_finite_differences),
        cmocka_unit_test(test_loss_of_known_logits),
        cmocka_unit_test(test_count_correct_and_empty_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
