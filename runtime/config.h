/*
 * config.h - the command line and environment of `trainyard-worker train`.
 *
 * Environment (DESIGN.md's contract, PyTorch's names): RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT,
 * TRAINYARD_DATA_DIR, TRAINYARD_OUTPUT_DIR, TRAINYARD_CHECKPOINT_DIR,
 * TRAINYARD_RENDEZVOUS_SECRET (the gang's secret, see runtime/rendezvous.h). The environment is
 * applied first and flags after it, so a flag wins over a TRAINYARD_* directory; the rank
 * variables come from the environment only (the --nproc launcher sets them for its children).
 *
 * The defaults are the Fashion-MNIST recipe: MLP 784-512-512-10, AdamW (lr 2e-3,
 * weight decay 0.05) with a cosine schedule, global batch 256, 15 epochs.
 *
 * Strings in worker_config are borrowed from argv or the environment, which outlive it.
 */
#ifndef TY_RUNTIME_CONFIG_H
#define TY_RUNTIME_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "runtime/model.h"
#include "runtime/optim.h"

#define CONFIG_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define CONFIG_MAX_WORLD 4096
/* TRAINYARD_RENDEZVOUS_SECRET's length: the server's is 64 hex characters (32 bytes). */
#define CONFIG_SECRET_MIN 32
#define CONFIG_SECRET_MAX 1024

typedef enum worker_device {
    DEVICE_CPU = 0,
    DEVICE_CUDA = 1,
} worker_device;

typedef struct worker_config {
    /* what to train */
    const char *data_dir;
    int data_flag;                  /* 1 when --data chose data_dir */
    size_t train_limit, test_limit; /* use only the first N samples (0 = all) */
    size_t hidden[MODEL_MAX_LAYERS];
    int n_hidden;
    optim_config optim;
    int64_t epochs;
    int64_t max_steps;              /* stop after this many steps in total (0 = no limit) */
    int64_t batch;                  /* global batch */
    uint64_t seed;
    /* where */
    worker_device device;
    int threads;                    /* BLAS threads per rank (0 = OPENBLAS_NUM_THREADS, else
                                       cores / local ranks) */
    int bind;                       /* pin local rank r to its slice of the cores */
    double bucket_mb;               /* gradient bucket size */
    /* durability and output */
    const char *checkpoint_dir;     /* NULL = no checkpoints */
    int64_t checkpoint_every;       /* steps between checkpoints (0 = only at the end) */
    int keep_checkpoints;
    const char *output_dir;         /* NULL = none; else params.f32 and result.json */
    const char *sample_log;         /* NULL = none; else PATH.rank-N lists trained samples */
    int64_t log_every;              /* steps between log lines */
    int timeout_s;                  /* a silent or lost peer fails the run after this */
    int nproc;                      /* > 0: launch this many local ranks */
    /* the environment contract */
    int rank, world, local_rank, local_world;
    const char *master_addr;
    int master_port;
    const char *job_id;
    int64_t attempt;
    const char *rendezvous_secret;  /* NULL = none: the rendezvous admits any rank */
} worker_config;

/* Fills the defaults (world 1, rank 0, the recipe above). */
void config_defaults(worker_config *c);

/*
 * Applies flags argv[0..argc) (the arguments after "train"; "--flag value" or
 * "--flag=value"). TY_EINVAL with a message naming the flag for an unknown flag, a missing
 * or malformed value, or a value out of range. "--help" gives TY_ENOTFOUND (print usage).
 */
ty_err config_parse_args(worker_config *c, int argc, char *const argv[], char *err, size_t errlen);

/* Looks up an environment variable; returns NULL when unset. */
typedef const char *(*config_getenv_fn)(const char *name);

/*
 * Applies the environment through get (call before config_parse_args). TY_EINVAL with a
 * message naming the variable for malformed values or RANK >= WORLD_SIZE.
 */
ty_err config_apply_env(worker_config *c, config_getenv_fn get, char *err, size_t errlen);

/*
 * Where to read the data set when the worker was not told: with no --data, a data_dir (the
 * default or TRAINYARD_DATA_DIR) in which present() finds no data set, and a fallback in which
 * it finds one, the fallback; otherwise NULL (read data_dir, and let its error say what is
 * missing). The local backend points TRAINYARD_DATA_DIR at data/datasets, empty on a fresh
 * install; Debian's dataset-fashion-mnist is CONFIG_DEFAULT_DATA_DIR.
 */
const char *config_data_fallback(const worker_config *c, const char *fallback,
                                 int (*present)(const char *dir));

/* Writes "512,512" into buf. */
void config_format_hidden(const worker_config *c, char *buf, size_t len);

/* The usage text of `trainyard-worker train`. */
const char *config_usage(void);

#endif
