/*
 * train.h - the training loop of one rank, shared by the CPU and GPU engines.
 *
 * Data order: epoch e trains the permutation that xoshiro256** (seeded from --seed)
 * produces after the permutations of epochs 0..e-1; global batches are consecutive runs
 * of B samples of it (the last one shorter), and rank r trains the slice
 * [comm_shard_offset(b, W, r), +comm_shard_count(b, W, r)) of each. The loss is the mean
 * over the global batch, so W ranks compute the model one process would, up to float
 * rounding. The learning-rate schedule spans the planned epochs (--max-steps only cuts
 * it short), so a run resumed from a checkpoint follows the schedule of an uninterrupted one.
 *
 * Stopping: every step carries a vote, the sum over the ranks of their stop requests (a
 * SIGTERM handler sets *stop), issued with the step's collectives; if anyone asked before
 * the step began, all ranks end the run after that same step, write a checkpoint of the
 * position reached and return with preempted set. Checkpoints also happen every --checkpoint-every steps and at the end;
 * at start the newest complete one in the checkpoint directory is resumed, whatever the
 * world size that wrote it.
 *
 * Rank 0 writes JSON lines to out: "start", "resume", "log" (every --log-every steps),
 * "epoch", "checkpoint", "preempted", and the final
 * {"event":"done","steps":..,"train_loss":..,"test_accuracy":..,"param_l2":..,"samples_per_s":..}.
 */
#ifndef TY_RUNTIME_TRAIN_H
#define TY_RUNTIME_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ty_error.h"
#include "runtime/config.h"

typedef struct train_report {
    int64_t start_step;     /* step the run resumed from (0 when fresh) */
    int64_t steps;          /* steps completed in total */
    int preempted;          /* stopped at a stop request (a checkpoint was written if a dir is set) */
    double train_loss;      /* mean loss over the last log window */
    double test_accuracy;   /* -1 when preempted */
    double param_l2;        /* L2 norm of all parameters */
    double samples_per_s;   /* training samples per second of this run (all ranks) */
    double train_seconds;   /* time in the training loop, checkpoints excluded */
} train_report;

/*
 * Runs rank cfg->rank of cfg->world to the end, or to an agreed stop. TY_OK when done or
 * preempted (see rep); otherwise an error and a message: TY_EIO for a lost peer (the
 * message names it) or an I/O failure, TY_ENOTFOUND for missing data or device, TY_EINVAL
 * for bad data, an incompatible checkpoint or inconsistent flags, TY_ENOMEM.
 * stop is borrowed (may be NULL); out is where rank 0 writes its JSON lines.
 */
ty_err train_run(const worker_config *cfg, const volatile sig_atomic_t *stop, FILE *out,
                 train_report *rep, char *err, size_t errlen);

#endif
