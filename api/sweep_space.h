/*
 * sweep_space.h - the search space of a sweep: its parameters, the trials it
 * yields, and the substitution of a trial's values into a job template.
 *
 * A space is read from the members "algorithm", "parameters", "trials" and
 * "seed" of a sweep body:
 *   grid:   "parameters": {"lr": [0.1, 0.01], "bs": [32, 64]} - every
 *           combination, parameters in name order, the last one varying
 *           fastest; at most SWEEP_MAX_TRIALS combinations.
 *   random: "trials": N (1..SWEEP_MAX_TRIALS), "seed": S (an integer >= 0,
 *           default 0) and per parameter one of {"choice": [v, ...]},
 *           {"uniform": [lo, hi]}, {"log_uniform": [lo, hi]} (0 < lo) or
 *           {"int": [lo, hi]} (both ends included).
 * Values (grid entries, choices) are strings, numbers or booleans.
 *
 * Random draws are reproducible and independent of the platform's rand():
 * the k-th draw (k = trial * nparams + the parameter's index in name order) is
 * splitmix64's output for the state seed + (k + 1) * 0x9E3779B97F4A7C15, so
 * any trial can be drawn alone and the same seed always yields the same
 * trials. A uniform real is the top 53 bits of a draw times 2^-53, in
 * [0, 1); an integer range takes the draw modulo its width.
 *
 * Placeholders: "${name}" in the template's "args" items and "env" values is
 * replaced by the trial's value of parameter `name` (strings as they are,
 * integers in decimal, reals in the shortest form that reads back as the same
 * double, booleans as true/false). A "${" without a closing "}" is kept as
 * text; every complete placeholder must name a parameter.
 */
#ifndef TY_API_SWEEP_SPACE_H
#define TY_API_SWEEP_SPACE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/spec.h"
#include "common/ty_error.h"

#define SWEEP_MAX_TRIALS 1000 /* trials of one sweep: the limit of POST /v1/jobs:batch */
#define SWEEP_MAX_PARAMS 32   /* parameters of one sweep */
#define SWEEP_MAX_PARAM_NAME 63
#define SWEEP_MAX_VALUE_BYTES 32768 /* an argument or env value after substitution */

typedef struct sweep_space sweep_space;

/*
 * Reads the space from `body` (borrowed, a sweep body). TY_OK: *out is new.
 * TY_EINVAL: every offending field was appended to errs with its path
 * ("$.algorithm", "$.parameters.lr", "$.trials", ...), *out untouched.
 * TY_ENOMEM.
 */
ty_err sweep_space_parse(const json_t *body, sweep_space **out, spec_errors *errs);

/* Releases a space. Accepts NULL. */
void sweep_space_free(sweep_space *sp);

/* The number of trials the space yields (grid: the product of the list lengths). */
size_t sweep_space_ntrials(const sweep_space *sp);

/*
 * The parameter values of trial i (0 <= i < ntrials) as a new object
 * {"name": value, ...}. TY_EINVAL when i is out of range. TY_ENOMEM.
 */
ty_err sweep_space_trial(const sweep_space *sp, size_t i, json_t **out);

/*
 * Checks that every placeholder in tmpl's (borrowed) "args" and "env" names a
 * parameter of sp; each one that does not is appended to errs at its path
 * ("$.template.args[1]", "$.template.env.LR"). TY_OK, TY_EINVAL, TY_ENOMEM.
 */
ty_err sweep_space_check_template(const sweep_space *sp, const json_t *tmpl, spec_errors *errs);

/*
 * A new copy of tmpl (borrowed) with the placeholders of "args" and "env"
 * replaced by the values in params (borrowed, from sweep_space_trial()).
 * TY_EINVAL when a placeholder names no member of params; TY_ETOOLARGE when a
 * string would grow past SWEEP_MAX_VALUE_BYTES. TY_ENOMEM.
 */
ty_err sweep_substitute(const json_t *tmpl, const json_t *params, json_t **out);

/*
 * Formats a parameter value (borrowed) as it is substituted, into buf.
 * TY_EINVAL for a value that is not a string, number or boolean;
 * TY_ETOOLARGE when buf is too small.
 */
ty_err sweep_value_text(const json_t *v, char *buf, size_t len);

/* splitmix64's output for `state` (exposed for tests of the draws). */
uint64_t sweep_splitmix64(uint64_t state);

#endif
