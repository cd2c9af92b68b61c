/*
 * train.c - one rank's training run: data, rendezvous, resume, the step loop, stop votes,
 * checkpoints, evaluation and the JSON report (contracts in train.h).
 *
 * Every collective below is issued by all ranks in the same order: the loop's decisions
 * (when to log, checkpoint, stop, end an epoch) depend only on values all ranks share.
 */
#include "runtime/train.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/data.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/report.h"
#include "runtime/rng.h"
#include "runtime/rt_error.h"
#include "runtime/rt_fs.h"
#include "runtime/shard.h"

#define DATA_ORDER_SALT 0x646174616f726472ULL /* keeps the data order apart from the init stream */
#define MIN_EVAL_CHUNK 256

typedef struct trainer {
    const worker_config *cfg;
    FILE *out;               /* NULL on ranks other than 0 */
    report *report;          /* rank 0's metrics to the server; NULL when not reporting */
    dataset train, test;
    float mean, inv_std;
    model_layout model;
    shard_layout shard;
    comm *comm;              /* NULL when world == 1 */
    engine *eng;
    float *params;           /* host copy of the full vector (init, resume, checkpoints, end) */
    float *owned;            /* host owned vector */
    float *state[2];         /* host optimizer state */
    uint32_t *perm;
    FILE *sample_log;
    /* position */
    int64_t step, epoch, epoch_pos;
    rng epoch_rng;           /* data-order state at the start of `epoch` */
    int64_t resumed_step;    /* -1 when started fresh */
    int64_t saved_step;      /* step of the last checkpoint written or loaded (-1: none) */
    float vote;              /* this step's stop vote, in flight in a collective */
    int64_t steps_per_epoch, planned_steps;
    /* reporting */
    double win_loss, ep_loss;
    int64_t win_n, ep_n;
    double last_loss;
    double ckpt_seconds;     /* checkpoint time inside the loop, not training time */
    int64_t samples_trained;
} trainer;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes one JSON line (rank 0 only), reports its figures, and steals obj. */
static void emit(trainer *t, json_t *obj)
{
    report_event(t->report, obj);
    if (t->out && obj) {
        char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (s) {
            fputs(s, t->out);
            fputc('\n', t->out);
            fflush(t->out);
            free(s);
        }
    }
    json_decref(obj);
}

static ty_err lost(trainer *t, char *err, size_t errlen)
{
    rt_errf(err, errlen, "%s", comm_error(t->comm));
    return TY_EIO;
}

/* Every rank passes ok; returns TY_OK when all were ok, TY_EIO otherwise (err set if empty). */
static ty_err agree(trainer *t, int ok, const char *what, char *err, size_t errlen)
{
    int64_t failed = ok ? 0 : 1;
    if (t->comm && comm_all_reduce_i64(t->comm, &failed) != COMM_OK)
        return lost(t, err, errlen);
    if (failed == 0)
        return TY_OK;
    if (ok)
        rt_errf(err, errlen, "%s failed on %lld other rank(s)", what, (long long)failed);
    return TY_EIO;
}

/* Sums a few floats over the ranks (log windows, epoch losses). */
static ty_err sum_floats(trainer *t, float *v, size_t n, char *err, size_t errlen)
{
    if (t->comm && comm_all_reduce(t->comm, v, n) != COMM_OK)
        return lost(t, err, errlen);
    return TY_OK;
}

static ty_err collect_loss(trainer *t, char *err, size_t errlen)
{
    double s = 0;
    ty_err rc = engine_take_loss(t->eng, &s, err, errlen);
    if (rc != TY_OK)
        return rc;
    t->win_loss += s;
    t->ep_loss += s;
    return TY_OK;
}

static ty_err load_data(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    ty_err rc = data_load(c->data_dir, "train", &t->train, err, errlen);
    if (rc == TY_OK)
        rc = data_load(c->data_dir, "t10k", &t->test, err, errlen);
    if (rc == TY_ENOTFOUND) {
        /* What the message alone does not say: where a data set comes from. */
        size_t n = strlen(err);
        if (n + 1 < errlen && strcmp(c->data_dir, CONFIG_DEFAULT_DATA_DIR) == 0)
            rt_errf(err + n, errlen - n,
                    "; install Debian's dataset-fashion-mnist, which puts its files there, or "
                    "pass --data DIR");
        else if (n + 1 < errlen)
            rt_errf(err + n, errlen - n,
                    "; pass --data DIR, or install Debian's dataset-fashion-mnist (%s), which is "
                    "read when --data is not given and this directory has no data set",
                    CONFIG_DEFAULT_DATA_DIR);
    }
    if (rc != TY_OK)
        return rc;
    if (t->train.dim != t->test.dim) {
        rt_errf(err, errlen, "%s: train samples have %zu values, test samples %zu", c->data_dir,
                t->train.dim, t->test.dim);
        return TY_EINVAL;
    }
    if (t->train.n > UINT32_MAX) {
        rt_errf(err, errlen, "%s: more than 2^32 training samples", c->data_dir);
        return TY_EINVAL;
    }
    data_limit(&t->train, c->train_limit);
    data_limit(&t->test, c->test_limit);
    float sd;
    data_pixel_stats(&t->train, &t->mean, &sd);
    t->inv_std = 1.0f / sd;
    t->perm = malloc(t->train.n * sizeof *t->perm);
    if (!t->perm) {
        rt_errf(err, errlen, "out of memory for the sample order");
        return TY_ENOMEM;
    }
    return TY_OK;
}

static ty_err build(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    size_t classes = (size_t)(t->train.n_classes > t->test.n_classes ? t->train.n_classes
                                                                      : t->test.n_classes);
    ty_err rc = model_layout_init(&t->model, t->train.dim, c->hidden, c->n_hidden, classes);
    if (rc != TY_OK) {
        rt_errf(err, errlen, "model too large or malformed");
        return rc;
    }
    size_t cap = (size_t)(c->bucket_mb * 1048576.0 / sizeof(float));
    if ((rc = shard_layout_init(&t->shard, t->model.layer_off, t->model.n_layers, cap, c->world,
                                c->rank)) != TY_OK) {
        rt_errf(err, errlen, "cannot shard the model");
        return rc;
    }
    size_t np = t->model.n_params, no = t->shard.n_owned ? t->shard.n_owned : 1;
    t->params = calloc(np, sizeof(float));
    t->owned = calloc(no, sizeof(float));
    t->state[0] = calloc(no, sizeof(float));
    t->state[1] = calloc(no, sizeof(float));
    if (!t->params || !t->owned || !t->state[0] || !t->state[1]) {
        rt_errf(err, errlen, "out of memory for %zu parameters", np);
        return TY_ENOMEM;
    }
    t->steps_per_epoch = (int64_t)((t->train.n + (size_t)c->batch - 1) / (size_t)c->batch);
    t->planned_steps = t->steps_per_epoch * c->epochs;
    return TY_OK;
}

static ty_err connect_ranks(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    if (c->world == 1)
        return TY_OK;
    comm_config cc = {
        .rank = c->rank,
        .world = c->world,
        .master_addr = c->master_addr,
        .master_port = c->master_port,
        .timeout_ms = c->timeout_s * 1000,
        .secret = (const unsigned char *)c->rendezvous_secret,
        .secret_len = c->rendezvous_secret ? strlen(c->rendezvous_secret) : 0,
    };
    if (comm_init(&cc, &t->comm, err, errlen) != COMM_OK)
        return TY_EIO;
    return TY_OK;
}

static ty_err make_engine(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    size_t local = comm_shard_count((size_t)c->batch, c->world, 0);
    engine_config ec = {
        .model = &t->model,
        .shard = &t->shard,
        .comm = t->comm,
        .train = &t->train,
        .test = &t->test,
        .mean = t->mean,
        .inv_std = t->inv_std,
        .max_local_batch = local > MIN_EVAL_CHUNK ? local : MIN_EVAL_CHUNK,
        .optim = c->optim,
        .timeout_ms = c->timeout_s * 1000,
        .local_rank = c->local_rank,
        .local_world = c->local_world,
        .threads = c->threads,
    };
    ty_err rc = c->device == DEVICE_CUDA ? engine_create_cuda(&ec, &t->eng, err, errlen)
                                         : engine_create_cpu(&ec, &t->eng, err, errlen);
    /* Creation may fail on one rank only (no GPU there): make everyone fail together. */
    ty_err ag = agree(t, rc == TY_OK, "engine set-up", err, errlen);
    return rc != TY_OK ? rc : ag;
}

static int n_vectors(const trainer *t)
{
    return 1 + optim_state_count(t->cfg->optim.kind);
}

/* Loads checkpoint `step` (its manifest in m) into the engine and the position. */
static ty_err load_checkpoint(trainer *t, int64_t step, const ckpt_meta *m, char *err,
                              size_t errlen)
{
    const char *dir = t->cfg->checkpoint_dir;
    ty_err rc = TY_OK;
    int same = m->n_layers == t->model.n_layers && m->n_params == t->model.n_params;
    for (int l = 0; same && l <= m->n_layers; l++)
        same = m->sizes[l] == t->model.sizes[l];
    if (!same) {
        rt_errf(err, errlen, "checkpoint step %lld in %s is of another model", (long long)step, dir);
        rc = TY_EINVAL;
    } else if (m->n_vectors != n_vectors(t) ||
               strcmp(m->optimizer, optim_name(t->cfg->optim.kind)) != 0) {
        rt_errf(err, errlen, "checkpoint step %lld in %s was written with --optimizer %s",
                (long long)step, dir, m->optimizer);
        rc = TY_EINVAL;
    } else if ((size_t)m->epoch_pos > t->train.n) {
        rt_errf(err, errlen, "checkpoint step %lld is at sample %lld of an epoch of %zu",
                (long long)step, (long long)m->epoch_pos, t->train.n);
        rc = TY_EINVAL;
    }
    for (size_t b = 0; rc == TY_OK && b < t->shard.n_buckets; b++) {
        const shard_bucket *bk = &t->shard.buckets[b];
        rc = ckpt_read(dir, step, m, 0, bk->own_offset, bk->own_count, t->params + bk->own_offset,
                       err, errlen);
        for (int k = 1; rc == TY_OK && k < m->n_vectors; k++)
            rc = ckpt_read(dir, step, m, k, bk->own_offset, bk->own_count,
                           t->state[k - 1] + bk->own_pos, err, errlen);
    }
    ty_err ag = agree(t, rc == TY_OK, "loading the checkpoint", err, errlen);
    if (rc != TY_OK || ag != TY_OK)
        return rc != TY_OK ? rc : ag;
    /* Each rank read the slices it owns now; the all-gathers give everyone the rest. */
    for (size_t b = 0; t->comm && b < t->shard.n_buckets; b++)
        if (comm_all_gather(t->comm, t->params + t->shard.buckets[b].offset,
                            t->shard.buckets[b].count) != COMM_OK)
            return lost(t, err, errlen);
    if ((rc = engine_set_params(t->eng, t->params, err, errlen)) != TY_OK ||
        (rc = engine_set_state(t->eng, (const float *const *)t->state, err, errlen)) != TY_OK)
        return rc;
    t->step = m->step;
    t->epoch = m->epoch;
    t->epoch_pos = m->epoch_pos;
    memcpy(t->epoch_rng.s, m->rng, sizeof m->rng);
    t->resumed_step = step;
    t->saved_step = step;
    return TY_OK;
}

static ty_err start_position(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    int64_t step = -1;
    ty_err rc;
    t->resumed_step = -1;
    t->saved_step = -1;
    if (c->checkpoint_dir) {
        /* Rank 0 chooses, so that every rank loads the same checkpoint. */
        if (c->rank == 0) {
            char why[256];
            if (ckpt_latest(c->checkpoint_dir, &step, why, sizeof why) != TY_OK)
                step = -1;
        }
        if (t->comm && comm_broadcast(t->comm, &step, sizeof step, 0) != COMM_OK)
            return lost(t, err, errlen);
    }
    if (step >= 0) {
        ckpt_meta m;
        rc = ckpt_read_manifest(c->checkpoint_dir, step, &m, err, errlen);
        ty_err ag = agree(t, rc == TY_OK, "reading the manifest", err, errlen);
        if (rc == TY_OK && ag == TY_OK)
            rc = load_checkpoint(t, step, &m, err, errlen);
        else if (rc == TY_OK)
            rc = ag;
        if (rc == TY_OK)
            emit(t, json_pack("{s:s,s:I,s:I,s:I,s:i,s:I,s:s}", "event", "resume", "step",
                              (json_int_t)m.step, "epoch", (json_int_t)m.epoch, "epoch_pos",
                              (json_int_t)m.epoch_pos, "from_world", m.world, "from_batch",
                              (json_int_t)m.batch, "dir", c->checkpoint_dir));
        ckpt_meta_free(&m);
        return rc;
    }
    model_init_params(&t->model, c->seed, t->params);
    rng_seed(&t->epoch_rng, c->seed ^ DATA_ORDER_SALT);
    t->step = t->epoch = t->epoch_pos = 0;
    return engine_set_params(t->eng, t->params, err, errlen);
}

static ty_err save_checkpoint(trainer *t, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    double t0 = now_s();
    ty_err rc;
    if (t->step == t->saved_step)
        return TY_OK; /* this exact state is already on disk */
    if ((rc = engine_get_params(t->eng, t->params, err, errlen)) != TY_OK ||
        (rc = engine_get_state(t->eng, t->state, err, errlen)) != TY_OK)
        return rc;
    shard_pack(&t->shard, t->params, t->owned);
    const float *vec[CKPT_MAX_VECTORS] = {t->owned, t->state[0], t->state[1]};
    rc = ckpt_write_shard(c->checkpoint_dir, t->step, &t->shard, vec, n_vectors(t), err, errlen);
    ty_err ag = agree(t, rc == TY_OK, "writing checkpoint shards", err, errlen);
    if (rc != TY_OK || ag != TY_OK)
        return rc != TY_OK ? rc : ag;
    if (c->rank == 0) {
        ckpt_meta m = {
            .step = t->step,
            .epoch = t->epoch,
            .epoch_pos = t->epoch_pos,
            .seed = c->seed,
            .batch = c->batch,
            .world = c->world,
            .n_params = t->model.n_params,
            .n_vectors = n_vectors(t),
            .n_layers = t->model.n_layers,
            .n_buckets = t->shard.n_buckets,
        };
        memcpy(m.rng, t->epoch_rng.s, sizeof m.rng);
        snprintf(m.optimizer, sizeof m.optimizer, "%s", optim_name(c->optim.kind));
        memcpy(m.sizes, t->model.sizes, sizeof m.sizes);
        m.bucket_offset = malloc(m.n_buckets * sizeof(size_t));
        m.bucket_count = malloc(m.n_buckets * sizeof(size_t));
        if (!m.bucket_offset || !m.bucket_count) {
            rc = TY_ENOMEM;
            rt_errf(err, errlen, "out of memory for the manifest");
        } else {
            for (size_t b = 0; b < m.n_buckets; b++) {
                m.bucket_offset[b] = t->shard.buckets[b].offset;
                m.bucket_count[b] = t->shard.buckets[b].count;
            }
            rc = ckpt_commit(c->checkpoint_dir, &m, err, errlen);
        }
        ckpt_meta_free(&m);
        if (rc == TY_OK) {
            char why[256];
            if (ckpt_prune(c->checkpoint_dir, c->keep_checkpoints, why, sizeof why) != TY_OK)
                emit(t, json_pack("{s:s,s:s}", "event", "warning", "message", why));
        }
    }
    ag = agree(t, rc == TY_OK, "publishing the checkpoint", err, errlen);
    if (rc != TY_OK || ag != TY_OK)
        return rc != TY_OK ? rc : ag;
    t->saved_step = t->step;
    t->ckpt_seconds += now_s() - t0;
    emit(t, json_pack("{s:s,s:I,s:I,s:I,s:s,s:f}", "event", "checkpoint", "step",
                      (json_int_t)t->step, "epoch", (json_int_t)t->epoch, "epoch_pos",
                      (json_int_t)t->epoch_pos, "dir", c->checkpoint_dir, "seconds",
                      now_s() - t0));
    return TY_OK;
}

static ty_err log_window(trainer *t, double seconds, int64_t samples, double comm_s,
                         double wait_s, float lr, char *err, size_t errlen)
{
    float v[2] = {(float)t->win_loss, (float)t->win_n};
    ty_err rc = sum_floats(t, v, 2, err, errlen);
    if (rc != TY_OK)
        return rc;
    t->win_loss = 0;
    t->win_n = 0;
    if (v[1] > 0)
        t->last_loss = v[0] / v[1];
    double epoch = (double)t->epoch + (double)t->epoch_pos / (double)t->train.n;
    emit(t, json_pack("{s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "event", "log", "step",
                      (json_int_t)t->step, "epoch", epoch, "loss", t->last_loss, "lr", (double)lr,
                      "samples_per_s", seconds > 0 ? (double)samples / seconds : 0.0,
                      "step_ms", 1e3 * seconds / (double)t->cfg->log_every, "comm_s", comm_s,
                      "wait_s", wait_s));
    return TY_OK;
}

static ty_err end_epoch(trainer *t, char *err, size_t errlen)
{
    ty_err rc = collect_loss(t, err, errlen);
    if (rc != TY_OK)
        return rc;
    float v[2] = {(float)t->ep_loss, (float)t->ep_n};
    if ((rc = sum_floats(t, v, 2, err, errlen)) != TY_OK)
        return rc;
    if (v[1] > 0)
        emit(t, json_pack("{s:s,s:I,s:I,s:f}", "event", "epoch", "epoch", (json_int_t)t->epoch,
                          "step", (json_int_t)t->step, "train_loss", v[0] / v[1]));
    t->ep_loss = 0;
    t->ep_n = 0;
    return TY_OK;
}

static void log_samples(trainer *t, const uint32_t *idx, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(t->sample_log, "%lld %u\n", (long long)t->epoch, idx[i]);
}

/*
 * The stop vote of a step: every rank contributes 1 if it was asked to stop. The vote is
 * issued before the step's own collectives and waited for after them, so it costs no
 * round trip of its own; a stop asked for before step t begins ends the run after step t.
 */
static ty_err vote_start(trainer *t, const volatile sig_atomic_t *stop, comm_work **work,
                         char *err, size_t errlen)
{
    t->vote = stop && *stop ? 1.0f : 0.0f;
    *work = NULL;
    if (t->comm && comm_all_reduce_start(t->comm, &t->vote, 1, work) != COMM_OK)
        return lost(t, err, errlen);
    return TY_OK;
}

static ty_err vote_finish(trainer *t, comm_work *work, int *stop_now, char *err, size_t errlen)
{
    if (work && comm_wait(t->comm, work) != COMM_OK)
        return lost(t, err, errlen);
    *stop_now = t->vote > 0.5f;
    return TY_OK;
}

/* The step loop. Sets *preempted when the ranks agreed to stop. */
static ty_err loop(trainer *t, const volatile sig_atomic_t *stop, int *preempted, char *err,
                   size_t errlen)
{
    const worker_config *c = t->cfg;
    const size_t n = t->train.n, B = (size_t)c->batch;
    ty_err rc;
    double win_start = now_s(), comm0 = t->comm ? comm_seconds(t->comm) : 0;
    double wait0 = engine_wait_seconds(t->eng);
    int64_t win_samples = 0;
    float lr = 0;

    *preempted = 0;
    while (t->epoch < c->epochs) {
        rng next = t->epoch_rng;
        rng_permutation(&next, t->perm, n);
        while ((size_t)t->epoch_pos < n) {
            if (c->max_steps > 0 && t->step >= c->max_steps)
                return TY_OK;
            comm_work *vote = NULL;
            int stop_now = 0;
            if ((rc = vote_start(t, stop, &vote, err, errlen)) != TY_OK)
                return rc;
            size_t bsz = n - (size_t)t->epoch_pos < B ? n - (size_t)t->epoch_pos : B;
            size_t lo = (size_t)t->epoch_pos + comm_shard_offset(bsz, c->world, c->rank);
            size_t cnt = comm_shard_count(bsz, c->world, c->rank);
            lr = optim_lr_at(&c->optim, t->step, t->planned_steps);
            rc = engine_step(t->eng, t->perm + lo, cnt, bsz, lr, t->step + 1, err, errlen);
            ty_err vrc = vote_finish(t, vote, &stop_now, rc == TY_OK ? err : NULL, errlen);
            if (rc != TY_OK || vrc != TY_OK)
                return rc != TY_OK ? rc : vrc;
            if (t->sample_log)
                log_samples(t, t->perm + lo, cnt);
            t->epoch_pos += (int64_t)bsz;
            t->step++;
            t->win_n += (int64_t)cnt;
            t->ep_n += (int64_t)cnt;
            win_samples += (int64_t)bsz;
            t->samples_trained += (int64_t)bsz;

            if (t->step % c->log_every == 0) {
                if ((rc = collect_loss(t, err, errlen)) != TY_OK)
                    return rc;
                double now = now_s(), comm1 = t->comm ? comm_seconds(t->comm) : 0;
                double wait1 = engine_wait_seconds(t->eng);
                if ((rc = log_window(t, now - win_start, win_samples, comm1 - comm0, wait1 - wait0,
                                     lr, err, errlen)) != TY_OK)
                    return rc;
                win_start = now_s();
                comm0 = comm1;
                wait0 = wait1;
                win_samples = 0;
            }
            if (c->checkpoint_dir && c->checkpoint_every > 0 && t->step % c->checkpoint_every == 0) {
                if ((rc = save_checkpoint(t, err, errlen)) != TY_OK)
                    return rc;
                win_start = now_s(); /* checkpoint time is not training time */
            }
            if (stop_now) {
                *preempted = 1;
                return TY_OK;
            }
        }
        if ((rc = end_epoch(t, err, errlen)) != TY_OK)
            return rc;
        t->epoch++;
        t->epoch_pos = 0;
        t->epoch_rng = next;
    }
    return TY_OK;
}

static ty_err evaluate(trainer *t, double *accuracy, char *err, size_t errlen)
{
    const worker_config *c = t->cfg;
    size_t n = t->test.n;
    size_t lo = comm_shard_offset(n, c->world, c->rank), cnt = comm_shard_count(n, c->world, c->rank);
    int64_t correct = 0;
    ty_err rc = engine_evaluate(t->eng, lo, lo + cnt, &correct, err, errlen);
    ty_err ag = agree(t, rc == TY_OK, "evaluation", err, errlen);
    if (rc != TY_OK || ag != TY_OK)
        return rc != TY_OK ? rc : ag;
    if (t->comm && comm_all_reduce_i64(t->comm, &correct) != COMM_OK)
        return lost(t, err, errlen);
    *accuracy = n ? (double)correct / (double)n : 0;
    return TY_OK;
}

/* Writes data to dir/name through a temporary file and a rename. */
static ty_err write_output(const char *dir, const char *name, const void *data, size_t len,
                           char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path || snprintf(tmp, sizeof tmp, "%s.tmp", path) < 0) {
        rt_errf(err, errlen, "output path too long");
        return TY_EINVAL;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rt_errf(err, errlen, "write %s: %s", tmp, strerror(errno));
        if (f)
            fclose(f);
        unlink(tmp);
        return TY_EIO;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        rt_errf(err, errlen, "write %s: %s", path, strerror(errno));
        unlink(tmp);
        return TY_EIO;
    }
    return TY_OK;
}

static ty_err open_sample_log(trainer *t, char *err, size_t errlen)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s.rank-%d", t->cfg->sample_log, t->cfg->rank);
    if (n < 0 || (size_t)n >= sizeof path) {
        rt_errf(err, errlen, "--sample-log path too long");
        return TY_EINVAL;
    }
    t->sample_log = fopen(path, "a");
    if (!t->sample_log) {
        rt_errf(err, errlen, "%s: %s", path, strerror(errno));
        return TY_EIO;
    }
    return TY_OK;
}

static void trainer_free(trainer *t)
{
    engine_destroy(t->eng);
    comm_destroy(t->comm);
    shard_layout_free(&t->shard);
    data_free(&t->train);
    data_free(&t->test);
    free(t->params);
    free(t->owned);
    free(t->state[0]);
    free(t->state[1]);
    free(t->perm);
    if (t->sample_log)
        fclose(t->sample_log);
    report_close(t->report, stderr, NULL);
}

static json_t *layer_array(const model_layout *m)
{
    json_t *a = json_array();
    for (int l = 0; a && l <= m->n_layers; l++)
        json_array_append_new(a, json_integer((json_int_t)m->sizes[l]));
    return a;
}

ty_err train_run(const worker_config *cfg, const volatile sig_atomic_t *stop, FILE *out,
                 train_report *rep, char *err, size_t errlen)
{
    trainer t = {.cfg = cfg, .out = cfg->rank == 0 ? out : NULL};
    t.report = cfg->rank == 0 ? report_open_env(stderr) : NULL;
    ty_err rc;
    int preempted = 0;
    double wall0 = now_s();

    memset(rep, 0, sizeof *rep);
    rep->test_accuracy = -1;
    /* Connect first: a rank that cannot load its data then fails its peers at once. */
    if ((rc = connect_ranks(&t, err, errlen)) != TY_OK)
        goto out;
    rc = load_data(&t, err, errlen);
    if (rc == TY_OK)
        rc = build(&t, err, errlen);
    /* Where rank 0 writes the result, made now: a path that cannot be written fails the run
     * before it trains, not after. */
    if (rc == TY_OK && cfg->rank == 0 && cfg->output_dir)
        rc = rt_make_dirs(cfg->output_dir, "output directory", err, errlen);
    ty_err ag = agree(&t, rc == TY_OK, "loading the data (or making the output directory)", err,
                     errlen);
    if (rc != TY_OK || ag != TY_OK) {
        rc = rc != TY_OK ? rc : ag;
        goto out;
    }
    if ((rc = make_engine(&t, err, errlen)) != TY_OK)
        goto out;
    if (cfg->sample_log && (rc = open_sample_log(&t, err, errlen)) != TY_OK)
        goto out;
    if ((rc = start_position(&t, err, errlen)) != TY_OK)
        goto out;
    rep->start_step = t.resumed_step > 0 ? t.resumed_step : 0;
    emit(&t, json_pack("{s:s,s:i,s:s,s:I,s:o,s:s,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:s?,s:I}",
                       "event", "start", "world", cfg->world, "device", engine_describe(t.eng),
                       "params", (json_int_t)t.model.n_params, "layers", layer_array(&t.model),
                       "optimizer", optim_name(cfg->optim.kind), "batch", (json_int_t)cfg->batch,
                       "lr", (double)cfg->optim.lr, "epochs", (json_int_t)cfg->epochs,
                       "steps_per_epoch", (json_int_t)t.steps_per_epoch, "max_steps",
                       (json_int_t)cfg->max_steps, "train_samples", (json_int_t)t.train.n,
                       "test_samples", (json_int_t)t.test.n, "buckets",
                       (json_int_t)t.shard.n_buckets, "job_id", cfg->job_id, "attempt",
                       (json_int_t)cfg->attempt));

    double loop_start = now_s();
    rc = loop(&t, stop, &preempted, err, errlen);
    /* Training time: the whole loop (votes, logging, epoch ends) but checkpoints. */
    double train_seconds = now_s() - loop_start - t.ckpt_seconds;
    if (rc != TY_OK)
        goto out;
    if (t.sample_log)
        fflush(t.sample_log);
    if (cfg->checkpoint_dir && (rc = save_checkpoint(&t, err, errlen)) != TY_OK)
        goto out;
    rep->steps = t.step;
    rep->train_seconds = train_seconds;
    rep->samples_per_s = train_seconds > 0 ? (double)t.samples_trained / train_seconds : 0;
    if (preempted) {
        rep->preempted = 1;
        emit(&t, json_pack("{s:s,s:I,s:I,s:I,s:b}", "event", "preempted", "step",
                           (json_int_t)t.step, "epoch", (json_int_t)t.epoch, "epoch_pos",
                           (json_int_t)t.epoch_pos, "checkpointed", cfg->checkpoint_dir != NULL));
        goto out;
    }
    /* The last, partial log window: its loss is the run's final training loss. */
    if ((rc = collect_loss(&t, err, errlen)) != TY_OK)
        goto out;
    if (t.win_n > 0 || t.comm) {
        float v[2] = {(float)t.win_loss, (float)t.win_n};
        if ((rc = sum_floats(&t, v, 2, err, errlen)) != TY_OK)
            goto out;
        if (v[1] > 0)
            t.last_loss = v[0] / v[1];
    }
    rep->train_loss = t.last_loss;
    if ((rc = evaluate(&t, &rep->test_accuracy, err, errlen)) != TY_OK)
        goto out;
    if ((rc = engine_get_params(t.eng, t.params, err, errlen)) != TY_OK)
        goto out;
    double sq = 0;
    for (size_t i = 0; i < t.model.n_params; i++)
        sq += (double)t.params[i] * (double)t.params[i];
    rep->param_l2 = sqrt(sq);

    json_t *done = json_pack("{s:s,s:I,s:f,s:f,s:f,s:f,s:i,s:f,s:f}", "event", "done", "steps",
                             (json_int_t)t.step, "train_loss", rep->train_loss, "test_accuracy",
                             rep->test_accuracy, "param_l2", rep->param_l2, "samples_per_s",
                             rep->samples_per_s, "world", cfg->world, "train_s", train_seconds,
                             "wall_s", now_s() - wall0);
    if (cfg->rank == 0 && cfg->output_dir && done) {
        char *text = json_dumps(done, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (!text) {
            rc = TY_ENOMEM;
        } else {
            rc = write_output(cfg->output_dir, "params.f32", t.params,
                              t.model.n_params * sizeof(float), err, errlen);
            if (rc == TY_OK)
                rc = write_output(cfg->output_dir, "result.json", text, strlen(text), err, errlen);
        }
        free(text);
    }
    /* Done only once the result is where it was asked to be. */
    if (rc == TY_OK)
        emit(&t, done);
    else
        json_decref(done);
out:
    if (rc != TY_OK && t.out)
        emit(&t, json_pack("{s:s,s:s}", "event", "error", "message", err ? err : ""));
    trainer_free(&t);
    return rc;
}
