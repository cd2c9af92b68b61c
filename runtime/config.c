/*
 * config.c - flags and environment of `trainyard-worker train`, driven by one table.
 */
#include "runtime/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_error.h"

typedef enum flag_kind {
    F_STR,      /* const char * */
    F_I64,      /* int64_t, [min, max] */
    F_INT,      /* int, [min, max] */
    F_SIZE,     /* size_t, [min, max] */
    F_U64,      /* uint64_t */
    F_FLOAT,    /* float, [min, max] */
    F_DOUBLE,   /* double, [min, max] */
    F_HIDDEN,   /* "512,512" */
    F_OPTIM,    /* sgd | adamw */
    F_DEVICE,   /* cpu | cuda */
    F_SCHEDULE, /* cosine | constant */
    F_BIND,     /* cores | none */
} flag_kind;

typedef struct flag_spec {
    const char *name;
    flag_kind kind;
    size_t offset;
    double min, max;
} flag_spec;

#define OFF(field) offsetof(worker_config, field)

static const flag_spec flags[] = {
    {"--data", F_STR, OFF(data_dir), 0, 0},
    {"--train-limit", F_SIZE, OFF(train_limit), 0, 1e12},
    {"--test-limit", F_SIZE, OFF(test_limit), 0, 1e12},
    {"--hidden", F_HIDDEN, 0, 0, 0},
    {"--optimizer", F_OPTIM, 0, 0, 0},
    {"--lr", F_FLOAT, OFF(optim.lr), 0, 1e3},
    {"--momentum", F_FLOAT, OFF(optim.momentum), 0, 1},
    {"--weight-decay", F_FLOAT, OFF(optim.weight_decay), 0, 1e3},
    {"--beta1", F_FLOAT, OFF(optim.beta1), 0, 0.999999},
    {"--beta2", F_FLOAT, OFF(optim.beta2), 0, 0.999999999},
    {"--eps", F_FLOAT, OFF(optim.eps), 1e-30, 1},
    {"--schedule", F_SCHEDULE, 0, 0, 0},
    {"--warmup-steps", F_I64, OFF(optim.warmup_steps), 0, 1e12},
    {"--epochs", F_I64, OFF(epochs), 1, 1e9},
    {"--max-steps", F_I64, OFF(max_steps), 0, 1e15},
    {"--batch", F_I64, OFF(batch), 1, 1e8},
    {"--seed", F_U64, OFF(seed), 0, 0},
    {"--device", F_DEVICE, 0, 0, 0},
    {"--threads", F_INT, OFF(threads), 0, 1024},
    {"--bind", F_BIND, 0, 0, 0},
    {"--bucket-mb", F_DOUBLE, OFF(bucket_mb), 0, 1e5},
    {"--checkpoint-dir", F_STR, OFF(checkpoint_dir), 0, 0},
    {"--checkpoint-every", F_I64, OFF(checkpoint_every), 0, 1e15},
    {"--keep-checkpoints", F_INT, OFF(keep_checkpoints), 1, 1e6},
    {"--output-dir", F_STR, OFF(output_dir), 0, 0},
    {"--sample-log", F_STR, OFF(sample_log), 0, 0},
    {"--log-every", F_I64, OFF(log_every), 1, 1e15},
    {"--timeout", F_INT, OFF(timeout_s), 1, 86400},
    {"--nproc", F_INT, OFF(nproc), 1, CONFIG_MAX_WORLD},
};

void config_defaults(worker_config *c)
{
    memset(c, 0, sizeof *c);
    c->data_dir = CONFIG_DEFAULT_DATA_DIR;
    c->hidden[0] = 512;
    c->hidden[1] = 512;
    c->n_hidden = 2;
    c->optim.kind = OPTIM_ADAMW;
    c->optim.lr = 2e-3f;
    c->optim.momentum = 0.9f;
    c->optim.weight_decay = 0.05f;
    c->optim.beta1 = 0.9f;
    c->optim.beta2 = 0.999f;
    c->optim.eps = 1e-8f;
    c->optim.schedule = OPTIM_SCHED_COSINE;
    c->optim.warmup_steps = 0;
    c->epochs = 15;
    c->batch = 256;
    c->seed = 42;
    c->device = DEVICE_CPU;
    c->bucket_mb = 1.0;
    c->bind = 1;
    c->checkpoint_every = 500;
    c->keep_checkpoints = 2;
    c->log_every = 100;
    c->timeout_s = 30;
    c->world = 1;
    c->local_world = 1;
    c->master_addr = "127.0.0.1";
    c->master_port = 29500;
    c->attempt = 0;
}

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static ty_err parse_hidden(worker_config *c, const char *s, char *err, size_t errlen)
{
    size_t vals[MODEL_MAX_LAYERS];
    int n = 0;
    const char *p = s;
    if (*p == '\0') { /* "--hidden ''": no hidden layer, a linear model */
        c->n_hidden = 0;
        return TY_OK;
    }
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9' || n == MODEL_MAX_LAYERS - 1)
            goto bad;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v == 0 || v > 1u << 30)
            goto bad;
        vals[n++] = (size_t)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            goto bad;
        p = end + 1;
    }
    memcpy(c->hidden, vals, (size_t)n * sizeof vals[0]);
    c->n_hidden = n;
    return TY_OK;
bad:
    rt_errf(err, errlen, "--hidden: expected sizes like 512,512 (at most %d layers), got \"%s\"",
            MODEL_MAX_LAYERS - 1, s);
    return TY_EINVAL;
}

static ty_err apply_flag(worker_config *c, const flag_spec *f, const char *v, char *err,
                         size_t errlen)
{
    char *base = (char *)c;
    int64_t i;
    uint64_t u;
    double d;
    switch (f->kind) {
    case F_STR:
        if (*v == '\0')
            goto bad;
        *(const char **)(base + f->offset) = v;
        return TY_OK;
    case F_I64:
    case F_INT:
    case F_SIZE:
        if (parse_i64(v, &i) != 0 || (double)i < f->min || (double)i > f->max)
            goto bad;
        if (f->kind == F_I64)
            *(int64_t *)(base + f->offset) = i;
        else if (f->kind == F_INT)
            *(int *)(base + f->offset) = (int)i;
        else
            *(size_t *)(base + f->offset) = (size_t)i;
        return TY_OK;
    case F_U64:
        if (parse_u64(v, &u) != 0)
            goto bad;
        *(uint64_t *)(base + f->offset) = u;
        return TY_OK;
    case F_FLOAT:
    case F_DOUBLE:
        if (parse_double(v, &d) != 0 || d < f->min || d > f->max)
            goto bad;
        if (f->kind == F_FLOAT)
            *(float *)(base + f->offset) = (float)d;
        else
            *(double *)(base + f->offset) = d;
        return TY_OK;
    case F_HIDDEN:
        return parse_hidden(c, v, err, errlen);
    case F_OPTIM: {
        int k = optim_parse(v);
        if (k < 0)
            goto bad;
        c->optim.kind = (optim_kind)k;
        return TY_OK;
    }
    case F_DEVICE:
        if (strcmp(v, "cpu") == 0)
            c->device = DEVICE_CPU;
        else if (strcmp(v, "cuda") == 0)
            c->device = DEVICE_CUDA;
        else
            goto bad;
        return TY_OK;
    case F_BIND:
        if (strcmp(v, "cores") == 0)
            c->bind = 1;
        else if (strcmp(v, "none") == 0)
            c->bind = 0;
        else
            goto bad;
        return TY_OK;
    case F_SCHEDULE:
        if (strcmp(v, "cosine") == 0)
            c->optim.schedule = OPTIM_SCHED_COSINE;
        else if (strcmp(v, "constant") == 0)
            c->optim.schedule = OPTIM_SCHED_CONSTANT;
        else
            goto bad;
        return TY_OK;
    }
bad:
    rt_errf(err, errlen, "%s: invalid value \"%s\" (see --help)", f->name, v);
    return TY_EINVAL;
}

ty_err config_parse_args(worker_config *c, int argc, char *const argv[], char *err, size_t errlen)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return TY_ENOTFOUND;
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag_spec *f = NULL;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
            if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0)
                f = &flags[k];
        if (!f) {
            rt_errf(err, errlen, "unknown argument \"%s\" (see --help)", arg);
            return TY_EINVAL;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc) {
                rt_errf(err, errlen, "%s needs a value", f->name);
                return TY_EINVAL;
            }
            value = argv[++i];
        }
        ty_err rc = apply_flag(c, f, value, err, errlen);
        if (rc != TY_OK)
            return rc;
        if (f->kind == F_STR && f->offset == OFF(data_dir))
            c->data_flag = 1;
    }
    return TY_OK;
}

const char *config_data_fallback(const worker_config *c, const char *fallback,
                                 int (*present)(const char *dir))
{
    if (c->data_flag || !fallback || strcmp(c->data_dir, fallback) == 0 || present(c->data_dir) ||
        !present(fallback))
        return NULL;
    return fallback;
}

static ty_err env_int(config_getenv_fn get, const char *name, int64_t min, int64_t max, int64_t *out,
                      char *err, size_t errlen)
{
    const char *v = get(name);
    if (!v || !*v)
        return TY_OK;
    int64_t i;
    if (parse_i64(v, &i) != 0 || i < min || i > max) {
        rt_errf(err, errlen, "environment %s: invalid value \"%s\"", name, v);
        return TY_EINVAL;
    }
    *out = i;
    return TY_OK;
}

ty_err config_apply_env(worker_config *c, config_getenv_fn get, char *err, size_t errlen)
{
    int64_t rank = c->rank, world = c->world, local = c->local_rank, lworld = c->local_world,
            port = c->master_port;
    ty_err rc;
    if ((rc = env_int(get, "WORLD_SIZE", 1, CONFIG_MAX_WORLD, &world, err, errlen)) != TY_OK ||
        (rc = env_int(get, "RANK", 0, CONFIG_MAX_WORLD - 1, &rank, err, errlen)) != TY_OK ||
        (rc = env_int(get, "LOCAL_RANK", 0, CONFIG_MAX_WORLD - 1, &local, err, errlen)) != TY_OK ||
        (rc = env_int(get, "LOCAL_WORLD_SIZE", 1, CONFIG_MAX_WORLD, &lworld, err, errlen)) != TY_OK ||
        (rc = env_int(get, "MASTER_PORT", 1, 65535, &port, err, errlen)) != TY_OK ||
        (rc = env_int(get, "TRAINYARD_ATTEMPT", 0, INT64_MAX, &c->attempt, err, errlen)) != TY_OK)
        return rc;
    if (rank >= world) {
        rt_errf(err, errlen, "environment RANK=%lld is not below WORLD_SIZE=%lld", (long long)rank,
                (long long)world);
        return TY_EINVAL;
    }
    c->rank = (int)rank;
    c->world = (int)world;
    c->local_rank = (int)local;
    c->local_world = (int)lworld;
    c->master_port = (int)port;
    const char *v;
    if ((v = get("MASTER_ADDR")) && *v)
        c->master_addr = v;
    if ((v = get("TRAINYARD_JOB_ID")) && *v)
        c->job_id = v;
    if ((v = get("TRAINYARD_RENDEZVOUS_SECRET")) && *v) {
        size_t n = strlen(v);
        if (n < CONFIG_SECRET_MIN || n > CONFIG_SECRET_MAX) {
            /* The value itself is never printed. */
            rt_errf(err, errlen,
                    "environment TRAINYARD_RENDEZVOUS_SECRET: %zu characters, expected %d to %d",
                    n, CONFIG_SECRET_MIN, CONFIG_SECRET_MAX);
            return TY_EINVAL;
        }
        c->rendezvous_secret = v;
    }
    if ((v = get("TRAINYARD_DATA_DIR")) && *v)
        c->data_dir = v;
    if ((v = get("TRAINYARD_CHECKPOINT_DIR")) && *v)
        c->checkpoint_dir = v;
    if ((v = get("TRAINYARD_OUTPUT_DIR")) && *v)
        c->output_dir = v;
    return TY_OK;
}

void config_format_hidden(const worker_config *c, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < c->n_hidden; i++) {
        int n = snprintf(buf + used, len - used, "%s%zu", i ? "," : "", c->hidden[i]);
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
    }
}

const char *config_usage(void)
{
    return "usage: trainyard-worker train [flags]\n"
           "\n"
           "Trains an MLP on an idx-ubyte dataset (Fashion-MNIST by default), data-parallel over\n"
           "the ranks of RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or over --nproc local ranks.\n"
           "\n"
           "  --data DIR              dataset directory (TRAINYARD_DATA_DIR, " CONFIG_DEFAULT_DATA_DIR ");\n"
           "                          without it, a TRAINYARD_DATA_DIR with no dataset falls back\n"
           "                          to " CONFIG_DEFAULT_DATA_DIR " when that has one\n"
           "  --epochs E              epochs (15)\n"
           "  --max-steps K           stop after K optimizer steps in total (0: no limit)\n"
           "  --batch B               global batch, split over the ranks (256)\n"
           "  --lr X                  peak learning rate (0.002)\n"
           "  --schedule S            cosine | constant (cosine, over the planned epochs)\n"
           "  --warmup-steps N        linear warm-up steps (0)\n"
           "  --hidden 512,512        hidden layer sizes\n"
           "  --optimizer O           adamw | sgd (adamw)\n"
           "  --weight-decay X        (0.05)    --momentum X (sgd, 0.9)\n"
           "  --beta1 X --beta2 X --eps X      (adamw: 0.9, 0.999, 1e-8)\n"
           "  --seed N                initialisation and data order (42)\n"
           "  --device D              cpu | cuda (cpu)\n"
           "  --threads T             BLAS threads per rank (OPENBLAS_NUM_THREADS, else cores / local ranks)\n"
           "  --bind B                cores | none: pin each local rank to its share of the cores (cores)\n"
           "  --bucket-mb M           gradient bucket size in MiB (1)\n"
           "  --checkpoint-dir D      sharded checkpoints; the newest is resumed (TRAINYARD_CHECKPOINT_DIR)\n"
           "  --checkpoint-every K    steps between checkpoints, 0 = only at the end (500)\n"
           "  --keep-checkpoints N    complete checkpoints kept (2)\n"
           "  --output-dir D          params.f32 and result.json at the end, D made (TRAINYARD_OUTPUT_DIR)\n"
           "  --log-every K           steps between log lines (100)\n"
           "  --timeout S             seconds before a silent peer counts as lost (30)\n"
           "  --nproc N               launch N local ranks on 127.0.0.1 (like torchrun --standalone)\n"
           "  --train-limit N, --test-limit N   use only the first N samples\n"
           "  --sample-log PATH       each rank appends \"epoch sample\" lines to PATH.rank-N\n"
           "\n"
           "Exit status: 0 done, 1 failed (a lost peer is named on stderr), 2 bad usage,\n"
           "75 stopped by SIGTERM after writing a checkpoint (resumable).\n";
}
