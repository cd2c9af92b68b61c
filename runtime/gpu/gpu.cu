/*
 * gpu.cu - the MLP step on one GPU: cuBLAS for the layers, small kernels for the rest,
 * NCCL for the sharded gradient exchange. See gpu.h for the design.
 *
 * cuBLAS is column-major; our matrices are row-major, and a row-major [r][c] matrix is the
 * column-major c x r matrix, its transpose. So, with b the batch and W row-major [out][in]:
 *   forward  Y^T (out x b)  = W (out x in) . X^T (in x b)    gemm(T, N, out, b, in)
 *   weights dW^T (in x out) = X^T (in x b) . dY (b x out)    gemm(N, T, in, out, b)
 *   inputs  dX^T (in x b)   = W^T (in x out) . dY^T (out x b) gemm(N, N, in, b, out)
 *   bias    db (out)        = dY^T (out x b) . ones (b)      gemv(N, out, b)
 * which are the row-major products of model.c.
 */
#include "runtime/gpu/gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

namespace {

const int kThreads = 256;
const unsigned kMaxBlocks = 4096;

__constant__ float c_input_lut[256];

unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    if (b < 1)
        b = 1;
    return b > kMaxBlocks ? kMaxBlocks : (unsigned)b;
}

__global__ void k_gather(const uint8_t *images, const uint8_t *labels, const uint32_t *idx,
                         size_t n, size_t dim, float *x, uint8_t *y)
{
    size_t total = n * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / dim, col = i - row * dim;
        uint32_t s = idx[row];
        x[i] = c_input_lut[images[(size_t)s * dim + col]];
        if (col == 0)
            y[row] = labels[s];
    }
}

__global__ void k_gather_range(const uint8_t *images, const uint8_t *labels, size_t first,
                               size_t n, size_t dim, float *x, uint8_t *y)
{
    size_t total = n * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / dim, col = i - row * dim;
        x[i] = c_input_lut[images[(first + row) * dim + col]];
        if (col == 0)
            y[row] = labels[first + row];
    }
}

__global__ void k_bias_act(float *y, const float *bias, size_t n, size_t out, int relu)
{
    size_t total = n * out;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % out];
        y[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

__global__ void k_relu_mask(float *dx, const float *x, size_t total)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        dx[i] = x[i] > 0.0f ? dx[i] : 0.0f;
}

__global__ void k_fill(float *p, float v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

/* One thread per sample: softmax cross-entropy, its gradient times scale, the loss summed. */
__global__ void k_softmax_xent(const float *logits, const uint8_t *labels, size_t n, size_t c,
                               float scale, float *dlogits, double *loss_sum)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    double loss = 0;
    if (i < n) {
        const float *z = logits + i * c;
        float *g = dlogits + i * c;
        float mx = z[0];
        for (size_t j = 1; j < c; j++)
            mx = fmaxf(mx, z[j]);
        float sum = 0;
        for (size_t j = 0; j < c; j++) {
            g[j] = expf(z[j] - mx);
            sum += g[j];
        }
        unsigned y = labels[i];
        loss = (double)(logf(sum) + mx - z[y]);
        float inv = scale / sum;
        for (size_t j = 0; j < c; j++)
            g[j] *= inv;
        g[y] -= scale;
    }
    for (int off = 16; off > 0; off /= 2)
        loss += __shfl_down_sync(0xffffffffu, loss, off);
    if ((threadIdx.x & 31) == 0 && loss != 0)
        atomicAdd(loss_sum, loss);
}

__global__ void k_count_correct(const float *logits, const uint8_t *labels, size_t n, size_t c,
                                unsigned long long *correct)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float *z = logits + i * c;
    size_t best = 0;
    for (size_t j = 1; j < c; j++)
        if (z[j] > z[best])
            best = j;
    if (best == labels[i])
        atomicAdd(correct, 1ULL);
}

/* optim.h's rules, element for element. */
__global__ void k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] + wd * p[i];
        float b = mu * buf[i] + gi;
        buf[i] = b;
        p[i] -= lr * b;
    }
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float decay,
                        float step_size, float inv_sqrt_bc2, float b1, float b2, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pause_briefly()
{
    struct timespec ts = {0, 20000}; /* 20 us between polls */
    nanosleep(&ts, NULL);
}

} // namespace

struct gpu_trainer {
    gpu_trainer_config cfg;
    model_layout model;
    char name[300]; /* "cuda:N " + cudaDeviceProp::name (256) */
    int world, rank;
    cudaStream_t compute, comm;
    cublasHandle_t blas;
    ncclComm_t nccl;
    float *params, *grads, *state[2];
    float *act[MODEL_MAX_LAYERS + 1], *delta[2], *ones;
    uint8_t *labels;
    uint8_t *train_x, *train_y, *test_x, *test_y;
    uint32_t *idx, *host_idx;
    double *loss;
    unsigned long long *correct;
    cudaEvent_t *bucket_ready;
    cudaEvent_t backward_done;
    size_t *shard_offset, *shard_count;
};

#define CUDA_TRY(expr)                                                                      \
    do {                                                                                    \
        cudaError_t e_ = (expr);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            errf(err, errlen, "CUDA: %s: %s", #expr, cudaGetErrorString(e_));               \
            return TY_EIO;                                                                  \
        }                                                                                   \
    } while (0)

#define CUBLAS_TRY(expr)                                                                    \
    do {                                                                                    \
        cublasStatus_t s_ = (expr);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
            errf(err, errlen, "cuBLAS: %s: status %d", #expr, (int)s_);                     \
            return TY_EIO;                                                                  \
        }                                                                                   \
    } while (0)

namespace {

/* Polls a non-blocking communicator until its last call has finished, within the deadline. */
ty_err nccl_settle(gpu_trainer *g, ncclResult_t r, double deadline, const char *what, char *err,
                   size_t errlen)
{
    while (r == ncclInProgress) {
        if (now_s() > deadline) {
            errf(err, errlen, "NCCL %s did not finish within %d ms", what, g->cfg.timeout_ms);
            ncclCommAbort(g->nccl);
            g->nccl = NULL;
            return TY_EIO;
        }
        pause_briefly();
        if (ncclCommGetAsyncError(g->nccl, &r) != ncclSuccess)
            r = ncclSystemError;
    }
    if (r != ncclSuccess) {
        errf(err, errlen, "NCCL %s: %s (%s)", what, ncclGetErrorString(r),
             ncclGetLastError(g->nccl));
        ncclCommAbort(g->nccl);
        g->nccl = NULL;
        return TY_EIO;
    }
    return TY_OK;
}

/* Waits for a stream within the timeout, watching the communicator for asynchronous errors. */
ty_err wait_stream(gpu_trainer *g, cudaStream_t s, const char *what, char *err, size_t errlen)
{
    double deadline = now_s() + g->cfg.timeout_ms / 1000.0;
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return TY_OK;
        if (e != cudaErrorNotReady) {
            errf(err, errlen, "CUDA %s: %s", what, cudaGetErrorString(e));
            return TY_EIO;
        }
        if (g->nccl) {
            ncclResult_t ar = ncclSuccess;
            ncclCommGetAsyncError(g->nccl, &ar);
            if (ar != ncclSuccess && ar != ncclInProgress) {
                errf(err, errlen, "NCCL %s: %s (%s)", what, ncclGetErrorString(ar),
                     ncclGetLastError(g->nccl));
                ncclCommAbort(g->nccl);
                g->nccl = NULL;
                return TY_EIO;
            }
        }
        if (now_s() > deadline) {
            errf(err, errlen, "%s did not finish within %d ms", what, g->cfg.timeout_ms);
            if (g->nccl) {
                ncclCommAbort(g->nccl);
                g->nccl = NULL;
            }
            return TY_EIO;
        }
        pause_briefly();
    }
}

ty_err forward(gpu_trainer *g, size_t b, char *err, size_t errlen)
{
    const model_layout *m = &g->model;
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < m->n_layers; l++) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        CUBLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, (int)b, in, &one,
                               g->params + m->w_off[l], in, g->act[l], in, &zero, g->act[l + 1],
                               out));
        k_bias_act<<<blocks_for(b * out), kThreads, 0, g->compute>>>(
            g->act[l + 1], g->params + m->b_off[l], b, (size_t)out, l + 1 < m->n_layers);
        CUDA_TRY(cudaGetLastError());
    }
    return TY_OK;
}

/* Issues the reduce-scatter of bucket bk on the communication stream. */
ty_err reduce_scatter(gpu_trainer *g, size_t bk, char *err, size_t errlen)
{
    const shard_bucket *b = &g->cfg.shard->buckets[bk];
    const size_t *off = g->shard_offset + bk * g->world, *cnt = g->shard_count + bk * g->world;
    float *base = g->grads + b->offset;
    double deadline = now_s() + g->cfg.timeout_ms / 1000.0;
    ncclResult_t r;
    if (b->count % (size_t)g->world == 0) {
        size_t c = b->count / (size_t)g->world;
        r = ncclReduceScatter(base, base + (size_t)g->rank * c, c, ncclFloat, ncclSum, g->nccl,
                              g->comm);
        return nccl_settle(g, r, deadline, "reduce-scatter", err, errlen);
    }
    ncclGroupStart();
    for (int q = 0; q < g->world; q++)
        if (cnt[q] > 0)
            ncclReduce(base + off[q], base + off[q], cnt[q], ncclFloat, ncclSum, q, g->nccl,
                       g->comm);
    r = ncclGroupEnd();
    return nccl_settle(g, r, deadline, "reduce-scatter", err, errlen);
}

ty_err all_gather(gpu_trainer *g, size_t bk, char *err, size_t errlen)
{
    const shard_bucket *b = &g->cfg.shard->buckets[bk];
    const size_t *off = g->shard_offset + bk * g->world, *cnt = g->shard_count + bk * g->world;
    float *base = g->params + b->offset;
    double deadline = now_s() + g->cfg.timeout_ms / 1000.0;
    ncclResult_t r;
    if (b->count % (size_t)g->world == 0) {
        size_t c = b->count / (size_t)g->world;
        r = ncclAllGather(base + (size_t)g->rank * c, base, c, ncclFloat, g->nccl, g->comm);
        return nccl_settle(g, r, deadline, "all-gather", err, errlen);
    }
    ncclGroupStart();
    for (int q = 0; q < g->world; q++)
        if (cnt[q] > 0)
            ncclBroadcast(base + off[q], base + off[q], cnt[q], ncclFloat, q, g->nccl, g->comm);
    r = ncclGroupEnd();
    return nccl_settle(g, r, deadline, "all-gather", err, errlen);
}

/* The optimizer on bucket bk's owned slice, on stream s. */
ty_err optimize(gpu_trainer *g, size_t bk, const optim_scalars *k, cudaStream_t s, char *err,
                size_t errlen)
{
    const shard_bucket *b = &g->cfg.shard->buckets[bk];
    size_t n = b->own_count;
    if (n == 0)
        return TY_OK;
    float *p = g->params + b->own_offset;
    const float *gr = g->grads + b->own_offset;
    const optim_config *c = &g->cfg.optim;
    if (c->kind == OPTIM_SGD)
        k_sgd<<<blocks_for(n), kThreads, 0, s>>>(p, gr, g->state[0] + b->own_pos, n, k->lr,
                                                 c->momentum, c->weight_decay);
    else
        k_adamw<<<blocks_for(n), kThreads, 0, s>>>(p, gr, g->state[0] + b->own_pos,
                                                   g->state[1] + b->own_pos, n, k->decay,
                                                   k->step_size, k->inv_sqrt_bc2, c->beta1,
                                                   c->beta2, c->eps);
    CUDA_TRY(cudaGetLastError());
    return TY_OK;
}

ty_err upload(void **dst, const void *src, size_t bytes, char *err, size_t errlen)
{
    CUDA_TRY(cudaMalloc(dst, bytes ? bytes : 1));
    if (bytes)
        CUDA_TRY(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return TY_OK;
}

ty_err create(gpu_trainer *g, const gpu_trainer_config *cfg, char *err, size_t errlen)
{
    const model_layout *m = cfg->model;
    const shard_layout *s = cfg->shard;
    g->cfg = *cfg;
    g->model = *m;
    g->world = cfg->world;
    g->rank = cfg->rank;
    size_t nb = s->n_buckets, ws = (size_t)cfg->world;

    g->shard_offset = (size_t *)calloc(nb * ws, sizeof(size_t));
    g->shard_count = (size_t *)calloc(nb * ws, sizeof(size_t));
    g->bucket_ready = (cudaEvent_t *)calloc(nb, sizeof(cudaEvent_t));
    if (!g->shard_offset || !g->shard_count || !g->bucket_ready) {
        errf(err, errlen, "out of memory");
        return TY_ENOMEM;
    }
    memcpy(g->shard_offset, cfg->shard_offset, nb * ws * sizeof(size_t));
    memcpy(g->shard_count, cfg->shard_count, nb * ws * sizeof(size_t));
    g->cfg.shard_offset = g->shard_offset;
    g->cfg.shard_count = g->shard_count;

    CUDA_TRY(cudaSetDevice(cfg->device));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, cfg->device));
    snprintf(g->name, sizeof g->name, "cuda:%d %s", cfg->device, prop.name);
    CUDA_TRY(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&g->comm, cudaStreamNonBlocking));
    for (size_t b = 0; b < nb; b++)
        CUDA_TRY(cudaEventCreateWithFlags(&g->bucket_ready[b], cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&g->backward_done, cudaEventDisableTiming));
    CUBLAS_TRY(cublasCreate(&g->blas));
    CUBLAS_TRY(cublasSetStream(g->blas, g->compute));
    CUDA_TRY(cudaMemcpyToSymbol(c_input_lut, cfg->input_lut, 256 * sizeof(float)));

    size_t np = m->n_params, no = s->n_owned ? s->n_owned : 1, mb = cfg->max_local_batch;
    CUDA_TRY(cudaMalloc((void **)&g->params, np * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&g->grads, np * sizeof(float)));
    for (int k = 0; k < cfg->n_state; k++) {
        CUDA_TRY(cudaMalloc((void **)&g->state[k], no * sizeof(float)));
        CUDA_TRY(cudaMemset(g->state[k], 0, no * sizeof(float)));
    }
    size_t widest = 0;
    for (int l = 0; l <= m->n_layers; l++) {
        CUDA_TRY(cudaMalloc((void **)&g->act[l], (mb * m->sizes[l] + 1) * sizeof(float)));
        if (m->sizes[l] > widest)
            widest = m->sizes[l];
    }
    for (int i = 0; i < 2; i++)
        CUDA_TRY(cudaMalloc((void **)&g->delta[i], (mb * widest + 1) * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&g->ones, (mb + 1) * sizeof(float)));
    k_fill<<<blocks_for(mb + 1), kThreads>>>(g->ones, 1.0f, mb + 1);
    CUDA_TRY(cudaGetLastError());
    CUDA_TRY(cudaMalloc((void **)&g->labels, mb + 1));
    CUDA_TRY(cudaMalloc((void **)&g->idx, (mb + 1) * sizeof(uint32_t)));
    CUDA_TRY(cudaMallocHost((void **)&g->host_idx, (mb + 1) * sizeof(uint32_t)));
    CUDA_TRY(cudaMalloc((void **)&g->loss, sizeof(double)));
    CUDA_TRY(cudaMemset(g->loss, 0, sizeof(double)));
    CUDA_TRY(cudaMalloc((void **)&g->correct, sizeof(unsigned long long)));
    ty_err rc;
    if ((rc = upload((void **)&g->train_x, cfg->train->images, cfg->train->n * cfg->train->dim,
                     err, errlen)) != TY_OK ||
        (rc = upload((void **)&g->train_y, cfg->train->labels, cfg->train->n, err, errlen)) !=
            TY_OK ||
        (rc = upload((void **)&g->test_x, cfg->test->images, cfg->test->n * cfg->test->dim, err,
                     errlen)) != TY_OK ||
        (rc = upload((void **)&g->test_y, cfg->test->labels, cfg->test->n, err, errlen)) != TY_OK)
        return rc;
    CUDA_TRY(cudaDeviceSynchronize());

    if (cfg->world > 1) {
        ncclUniqueId id;
        memcpy(&id, cfg->nccl_id, sizeof id);
        ncclConfig_t nc = NCCL_CONFIG_INITIALIZER;
        nc.blocking = 0;
        double deadline = now_s() + cfg->timeout_ms / 1000.0;
        ncclResult_t r = ncclCommInitRankConfig(&g->nccl, cfg->world, id, cfg->rank, &nc);
        if (r != ncclSuccess && r != ncclInProgress) {
            errf(err, errlen, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
            g->nccl = NULL;
            return TY_EIO;
        }
        if ((rc = nccl_settle(g, r, deadline, "communicator set-up", err, errlen)) != TY_OK)
            return rc;
    }
    return TY_OK;
}

} // namespace

static_assert(sizeof(ncclUniqueId) == GPU_NCCL_ID_BYTES, "ncclUniqueId size");

extern "C" int gpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" ty_err gpu_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        errf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        return TY_EIO;
    }
    memcpy(id, &u, sizeof u);
    return TY_OK;
}

extern "C" void gpu_trainer_destroy(gpu_trainer *g)
{
    if (!g)
        return;
    if (g->compute)
        cudaStreamSynchronize(g->compute);
    if (g->nccl) {
        /* Finalize waits for peers; after a failure the communicator is already aborted. */
        ncclCommAbort(g->nccl);
    }
    if (g->comm)
        cudaStreamSynchronize(g->comm);
    cudaFree(g->params);
    cudaFree(g->grads);
    cudaFree(g->state[0]);
    cudaFree(g->state[1]);
    for (int l = 0; l <= MODEL_MAX_LAYERS; l++)
        cudaFree(g->act[l]);
    cudaFree(g->delta[0]);
    cudaFree(g->delta[1]);
    cudaFree(g->ones);
    cudaFree(g->labels);
    cudaFree(g->idx);
    cudaFreeHost(g->host_idx);
    cudaFree(g->loss);
    cudaFree(g->correct);
    cudaFree(g->train_x);
    cudaFree(g->train_y);
    cudaFree(g->test_x);
    cudaFree(g->test_y);
    if (g->bucket_ready)
        for (size_t b = 0; b < g->cfg.shard->n_buckets; b++)
            if (g->bucket_ready[b])
                cudaEventDestroy(g->bucket_ready[b]);
    if (g->backward_done)
        cudaEventDestroy(g->backward_done);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->compute)
        cudaStreamDestroy(g->compute);
    if (g->comm)
        cudaStreamDestroy(g->comm);
    free(g->bucket_ready);
    free(g->shard_offset);
    free(g->shard_count);
    free(g);
}

extern "C" ty_err gpu_trainer_create(const gpu_trainer_config *cfg, gpu_trainer **out, char *err,
                                     size_t errlen)
{
    gpu_trainer *g = (gpu_trainer *)calloc(1, sizeof *g);
    if (!g) {
        errf(err, errlen, "out of memory");
        return TY_ENOMEM;
    }
    ty_err rc = create(g, cfg, err, errlen);
    if (rc != TY_OK) {
        gpu_trainer_destroy(g);
        return rc;
    }
    *out = g;
    return TY_OK;
}

extern "C" const char *gpu_trainer_device_name(const gpu_trainer *g)
{
    return g->name;
}

/*
 * Host <-> device copies go through the compute stream and wait for it: the streams are
 * non-blocking, so a plain cudaMemcpy (legacy default stream) would not be ordered with
 * the kernels of a step.
 */
static ty_err copy_sync(gpu_trainer *g, void *dst, const void *src, size_t bytes,
                        cudaMemcpyKind kind, char *err, size_t errlen)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, g->compute));
    CUDA_TRY(cudaStreamSynchronize(g->compute));
    return TY_OK;
}

extern "C" ty_err gpu_trainer_set_params(gpu_trainer *g, const float *params, char *err,
                                         size_t errlen)
{
    return copy_sync(g, g->params, params, g->model.n_params * sizeof(float),
                     cudaMemcpyHostToDevice, err, errlen);
}

extern "C" ty_err gpu_trainer_get_params(gpu_trainer *g, float *params, char *err, size_t errlen)
{
    return copy_sync(g, params, g->params, g->model.n_params * sizeof(float),
                     cudaMemcpyDeviceToHost, err, errlen);
}

extern "C" ty_err gpu_trainer_set_state(gpu_trainer *g, const float *const *state, char *err,
                                        size_t errlen)
{
    for (int k = 0; k < g->cfg.n_state; k++) {
        ty_err rc = copy_sync(g, g->state[k], state[k], g->cfg.shard->n_owned * sizeof(float),
                              cudaMemcpyHostToDevice, err, errlen);
        if (rc != TY_OK)
            return rc;
    }
    return TY_OK;
}

extern "C" ty_err gpu_trainer_get_state(gpu_trainer *g, float *const *state, char *err,
                                        size_t errlen)
{
    for (int k = 0; k < g->cfg.n_state; k++) {
        ty_err rc = copy_sync(g, state[k], g->state[k], g->cfg.shard->n_owned * sizeof(float),
                              cudaMemcpyDeviceToHost, err, errlen);
        if (rc != TY_OK)
            return rc;
    }
    return TY_OK;
}

extern "C" ty_err gpu_trainer_step(gpu_trainer *g, const uint32_t *idx, size_t n_local,
                                   size_t n_global, const optim_scalars *k, int *collective_failed,
                                   char *err, size_t errlen)
{
    const model_layout *m = &g->model;
    const shard_layout *s = g->cfg.shard;
    const float one = 1.0f, zero = 0.0f;
    const bool distributed = g->world > 1;
    ty_err rc;
    *collective_failed = 0;
    if (n_local > g->cfg.max_local_batch || n_global == 0) {
        errf(err, errlen, "batch of %zu exceeds the trainer's %zu", n_local,
             g->cfg.max_local_batch);
        return TY_EINVAL;
    }
    if (distributed && !g->nccl) {
        errf(err, errlen, "the NCCL communicator was aborted by an earlier failure");
        *collective_failed = 1;
        return TY_EIO;
    }
    size_t b = n_local;
    if (b > 0) {
        memcpy(g->host_idx, idx, b * sizeof(uint32_t));
        CUDA_TRY(cudaMemcpyAsync(g->idx, g->host_idx, b * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, g->compute));
        k_gather<<<blocks_for(b * m->sizes[0]), kThreads, 0, g->compute>>>(
            g->train_x, g->train_y, g->idx, b, m->sizes[0], g->act[0], g->labels);
        CUDA_TRY(cudaGetLastError());
        if ((rc = forward(g, b, err, errlen)) != TY_OK)
            return rc;
        size_t c = m->sizes[m->n_layers];
        k_softmax_xent<<<(unsigned)((b + kThreads - 1) / kThreads), kThreads, 0, g->compute>>>(
            g->act[m->n_layers], g->labels, b, c, 1.0f / (float)n_global, g->delta[0], g->loss);
        CUDA_TRY(cudaGetLastError());
    }

    int cur = 0;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int in = (int)m->sizes[l], out = (int)m->sizes[l + 1];
        if (b == 0) {
            CUDA_TRY(cudaMemsetAsync(g->grads + m->layer_off[l], 0,
                                     (m->layer_off[l + 1] - m->layer_off[l]) * sizeof(float),
                                     g->compute));
        } else {
            const float *dy = g->delta[cur];
            CUBLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, (int)b, &one,
                                   g->act[l], in, dy, out, &zero, g->grads + m->w_off[l], in));
            CUBLAS_TRY(cublasSgemv(g->blas, CUBLAS_OP_N, out, (int)b, &one, dy, out, g->ones, 1,
                                   &zero, g->grads + m->b_off[l], 1));
        }
        int bk = -1;
        for (size_t i = 0; i < s->n_buckets; i++)
            if (s->buckets[i].first_layer == l)
                bk = (int)i;
        if (bk >= 0 && distributed) {
            CUDA_TRY(cudaEventRecord(g->bucket_ready[bk], g->compute));
            CUDA_TRY(cudaStreamWaitEvent(g->comm, g->bucket_ready[bk], 0));
            if ((rc = reduce_scatter(g, (size_t)bk, err, errlen)) != TY_OK) {
                *collective_failed = 1;
                return rc;
            }
        }
        if (l == 0 || b == 0)
            continue;
        float *dx = g->delta[1 - cur];
        CUBLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, (int)b, out, &one,
                               g->params + m->w_off[l], in, g->delta[cur], out, &zero, dx, in));
        k_relu_mask<<<blocks_for(b * (size_t)in), kThreads, 0, g->compute>>>(dx, g->act[l],
                                                                            b * (size_t)in);
        CUDA_TRY(cudaGetLastError());
        cur = 1 - cur;
    }

    if (!distributed) {
        for (size_t i = 0; i < s->n_buckets; i++)
            if ((rc = optimize(g, i, k, g->compute, err, errlen)) != TY_OK)
                return rc;
        return wait_stream(g, g->compute, "training step", err, errlen);
    }
    /*
     * A bucket is ready before backward has used its weights for the inputs' gradients, so
     * the optimizer (which writes them) must wait for the whole backward pass.
     */
    CUDA_TRY(cudaEventRecord(g->backward_done, g->compute));
    CUDA_TRY(cudaStreamWaitEvent(g->comm, g->backward_done, 0));
    for (size_t i = 0; i < s->n_buckets; i++) {
        if ((rc = optimize(g, i, k, g->comm, err, errlen)) != TY_OK)
            return rc;
        if ((rc = all_gather(g, i, err, errlen)) != TY_OK) {
            *collective_failed = 1;
            return rc;
        }
    }
    /* The next step's forward reads every parameter: wait for both streams. */
    if ((rc = wait_stream(g, g->compute, "backward pass", err, errlen)) != TY_OK ||
        (rc = wait_stream(g, g->comm, "gradient exchange", err, errlen)) != TY_OK) {
        *collective_failed = 1;
        return rc;
    }
    return TY_OK;
}

extern "C" ty_err gpu_trainer_take_loss(gpu_trainer *g, double *sum, char *err, size_t errlen)
{
    CUDA_TRY(cudaMemcpyAsync(sum, g->loss, sizeof(double), cudaMemcpyDeviceToHost, g->compute));
    CUDA_TRY(cudaMemsetAsync(g->loss, 0, sizeof(double), g->compute));
    CUDA_TRY(cudaStreamSynchronize(g->compute));
    return TY_OK;
}

extern "C" ty_err gpu_trainer_evaluate(gpu_trainer *g, size_t begin, size_t end, int64_t *correct,
                                       char *err, size_t errlen)
{
    const model_layout *m = &g->model;
    size_t chunk = g->cfg.max_local_batch;
    if (end > g->cfg.test->n || begin > end) {
        errf(err, errlen, "test range [%zu, %zu) outside %zu samples", begin, end,
             g->cfg.test->n);
        return TY_EINVAL;
    }
    CUDA_TRY(cudaMemsetAsync(g->correct, 0, sizeof(unsigned long long), g->compute));
    for (size_t at = begin; at < end; at += chunk) {
        size_t n = end - at < chunk ? end - at : chunk;
        k_gather_range<<<blocks_for(n * m->sizes[0]), kThreads, 0, g->compute>>>(
            g->test_x, g->test_y, at, n, m->sizes[0], g->act[0], g->labels);
        CUDA_TRY(cudaGetLastError());
        ty_err rc = forward(g, n, err, errlen);
        if (rc != TY_OK)
            return rc;
        k_count_correct<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, g->compute>>>(
            g->act[m->n_layers], g->labels, n, m->sizes[m->n_layers], g->correct);
        CUDA_TRY(cudaGetLastError());
    }
    unsigned long long c = 0;
    CUDA_TRY(cudaMemcpyAsync(&c, g->correct, sizeof c, cudaMemcpyDeviceToHost, g->compute));
    CUDA_TRY(cudaStreamSynchronize(g->compute));
    *correct = (int64_t)c;
    return TY_OK;
}
