/*
 * sweep_spec.h - validation of a sweep body (the 422 layer of POST /v1/sweeps)
 * and the job spec of each of its trials.
 *
 * A body is {"name", "algorithm", "parameters", "trials", "seed",
 * "parallelism", "objective": {"metric", "goal"}, "template"}; the space
 * members follow sweep_space.h. name is a DNS label; parallelism, the trials
 * active at once, is 1..SWEEP_MAX_TRIALS and defaults to the number of
 * trials; objective.metric is a metric name as workers report it and goal is
 * "minimize" or "maximize"; template is a job spec whose "args" items and
 * "env" values may hold ${param} placeholders. Unknown members are errors.
 *
 * Validation builds every trial's spec and validates it as POST /v1/jobs
 * would, so a template that is only wrong for some values (an argument made
 * too long by a substitution) is refused before anything is created; its
 * errors carry the template's paths ("$.template.workers.count"), each once.
 * The work is bounded whatever the body: each substituted string is at most
 * SWEEP_MAX_VALUE_BYTES and all trials' specs together SWEEP_MAX_SPEC_BYTES
 * (past either, one 422 at "$.template").
 *
 * A trial's spec is the template with its placeholders substituted, validated
 * as a client's spec (its labels may not be the server's: spec.h), and then
 * these labels added to the template's own:
 *   trainyard.io/sweep        the sweep's id
 *   trainyard.io/sweep-trial  the trial's index, from 0
 *   param.trainyard.io/<p>    the value of parameter p as substituted, when
 *                             that text is a valid label value and p a valid
 *                             label name (63 characters of [A-Za-z0-9._-],
 *                             alphanumeric at both ends); other values (-0.5,
 *                             long strings) are only in the sweep resource
 * The labels count against the job's limit of 64.
 */
#ifndef TY_API_SWEEP_SPEC_H
#define TY_API_SWEEP_SPEC_H

#include <jansson.h>
#include <stddef.h>

#include "api/spec.h"
#include "api/sweep_space.h"
#include "common/ty_error.h"

#define SWEEP_LABEL "trainyard.io/sweep"
#define SWEEP_TRIAL_LABEL "trainyard.io/sweep-trial"
#define SWEEP_PARAM_LABEL_PREFIX "param.trainyard.io/"
#define SWEEP_MAX_SPEC_BYTES ((size_t)16 << 20) /* all trials' job specs, compact JSON */

typedef struct sweep_def {
    char name[SPEC_MAX_NAME + 1];
    sweep_space *space; /* owned */
    int parallelism;    /* 1..SWEEP_MAX_TRIALS */
    char metric[65];    /* the objective's metric name */
    int maximize;       /* goal: 1 maximize, 0 minimize */
    json_t *tmpl;       /* owned: the template as given (not normalized) */
} sweep_def;

/*
 * Validates a sweep body (borrowed), its template for every trial included,
 * each trial's resources against limits (borrowed; NULL or sweep_parse(): none
 * checked). TY_OK: *out is new. TY_EINVAL: every offending field appended to
 * errs with its path, *out untouched. TY_ENOMEM.
 */
ty_err sweep_parse(const json_t *body, sweep_def **out, spec_errors *errs);
ty_err sweep_parse_limited(const json_t *body, const spec_limits *limits, sweep_def **out,
                           spec_errors *errs);

/* Releases a definition. Accepts NULL. */
void sweep_def_free(sweep_def *d);

/*
 * The normalized job spec of trial i (0 <= i < ntrials) of the sweep with id
 * sweep_id (a label value), as a new object; *params (when not NULL) gets the
 * trial's parameter values (new). TY_EINVAL when i is out of range or the
 * spec does not validate (sweep_parse() has checked that it does). TY_ENOMEM.
 */
ty_err sweep_trial_spec(const sweep_def *d, const char *sweep_id, size_t i, json_t **spec,
                        json_t **params);

#endif
