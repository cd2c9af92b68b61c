/*
 * model.h - the multilayer perceptron: parameter layout, initialisation, and the CPU
 * forward and backward passes (OpenBLAS sgemm for every layer).
 *
 * The model is sizes[0] -> sizes[1] -> ... -> sizes[n_layers]: n_layers linear layers,
 * ReLU after every one but the last, softmax cross-entropy on the logits; float32.
 *
 * All parameters live in one flat vector (the unit of sharding, collectives and
 * checkpoints). Layer l occupies [layer_off[l], layer_off[l+1]): first its weight matrix
 * W_l, row-major [sizes[l+1]][sizes[l]] (out x in, like torch.nn.Linear), then its bias
 * of sizes[l+1]. Activations are row-major [batch][features].
 */
#ifndef TY_RUNTIME_MODEL_H
#define TY_RUNTIME_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

#define MODEL_MAX_LAYERS 16

typedef struct model_layout {
    int n_layers;                           /* linear layers, 1..MODEL_MAX_LAYERS */
    size_t sizes[MODEL_MAX_LAYERS + 1];     /* sizes[0] inputs ... sizes[n_layers] classes */
    size_t w_off[MODEL_MAX_LAYERS];         /* weights of layer l in the flat vector */
    size_t b_off[MODEL_MAX_LAYERS];         /* bias of layer l */
    size_t layer_off[MODEL_MAX_LAYERS + 1]; /* layer l is [layer_off[l], layer_off[l+1]) */
    size_t n_params;
} model_layout;

/*
 * Fills *m for inputs -> hidden[0..n_hidden) -> classes. TY_EINVAL when a size is 0 or
 * past INT_MAX, n_hidden + 1 > MODEL_MAX_LAYERS, or the parameter count passes 2^40.
 */
ty_err model_layout_init(model_layout *m, size_t inputs, const size_t *hidden, int n_hidden,
                         size_t classes);

/*
 * Deterministic initialisation from seed (identical on every rank): He-uniform weights,
 * U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)), drawn in flat order from xoshiro256** seeded
 * with splitmix64(seed ^ 0x6d6f64656c), and zero biases.
 */
void model_init_params(const model_layout *m, uint64_t seed, float *params);

/* Scratch memory for batches of up to max_batch samples. */
typedef struct model_work {
    size_t max_batch;
    float *act[MODEL_MAX_LAYERS + 1]; /* act[0] input [b][sizes[0]] ... act[L] logits; owned */
    float *delta[2];                  /* ping-pong gradients w.r.t. layer outputs; owned */
    uint8_t *labels;                  /* [max_batch]; owned */
} model_work;

/* On TY_OK *w holds new buffers (free with model_work_free). TY_ENOMEM. */
ty_err model_work_init(model_work *w, const model_layout *m, size_t max_batch);
/* Frees the buffers; accepts a zeroed struct. */
void model_work_free(model_work *w);

/* Forward pass of b <= max_batch samples from w->act[0]; the logits land in w->act[L]. */
void model_forward(const model_layout *m, const float *params, size_t b, model_work *w);

/*
 * Softmax cross-entropy of the logits in w->act[L] against w->labels. Returns the sum of
 * the b per-sample losses and leaves d(loss)/d(logits) * scale in w->delta[0] (scale is
 * 1 / global batch, so that gradients summed over ranks are the global mean).
 */
double model_loss_grad(const model_layout *m, size_t b, float scale, model_work *w);

/* Called by model_backward once the gradients of `layer` are final. */
typedef void (*model_layer_done_fn)(void *ctx, int layer);

/*
 * Backward pass after model_loss_grad: overwrites grads (n_params) layer by layer, from
 * the last layer to the first, calling done(ctx, l) (may be NULL) as soon as layer l's
 * gradients are final. With b == 0 the gradients are zero.
 */
void model_backward(const model_layout *m, const float *params, size_t b, model_work *w,
                    float *grads, model_layer_done_fn done, void *ctx);

/* Number of the b samples whose largest logit (first on ties) is the label. */
size_t model_count_correct(const model_layout *m, size_t b, const model_work *w);

#endif
