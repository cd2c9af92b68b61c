/*
 * early_stop.h - median early stopping: whether a sweep's trial should stop now. A pure function
 * of the sweep's rule and of values its trials reported; it reads no store and writes nothing.
 * The facts come from store_sweep_stop_facts(), the decision is acted on by sweep_stop.h.
 *
 * The rule. A trial whose latest report of the sweep's objective is value v at step s is stopped
 * when all of these hold:
 *
 *   - s >= min_step: the rule judges nothing earlier (warm-up, a first evaluation).
 *   - At least min_trials succeeded trials (and at least one) have a value at a step <= s; each
 *     counts with its last value at or before s, so a trial that reported every 100 steps still
 *     compares with one that reports every step. A succeeded trial with no value up to s has no
 *     say (the caller leaves it out).
 *   - v is worse than the median of those values by the sweep's goal: above it when minimizing,
 *     below it when maximizing. A tie is not worse. The median of an even count is the mean of
 *     the two middle values.
 *
 * Values are finite: ingestion refuses NaN and infinities (api/metrics.c), so the function does
 * not look for them.
 *
 * Cost: one sort of the succeeded values, O(n log n); no allocation.
 */
#ifndef TY_SCHEDULER_EARLY_STOP_H
#define TY_SCHEDULER_EARLY_STOP_H

#include <stddef.h>
#include <stdint.h>

/* The job event reason of a trial the rule stopped. */
#define EARLY_STOP_REASON "EarlyStopped"

typedef struct early_stop_input {
    const char *metric; /* the objective's name, for the message (borrowed; NULL: "objective") */
    int maximize;       /* the sweep's goal: 1 maximize, 0 minimize */
    int min_trials;     /* succeeded trials needed (the API takes 1..1000; < 1 counts as 1) */
    int64_t min_step;   /* the first step the rule judges */
    int64_t step;       /* the trial's latest step of the objective */
    double value;       /* its value at that step */
    double *done;       /* borrowed, and sorted in place (the caller's scratch): each succeeded
                           trial's last value at a step <= step; NULL when ndone is 0 */
    size_t ndone;
} early_stop_input;

typedef enum early_stop_verdict {
    EARLY_STOP_GO_ON = 0, /* not worse than the median: the trial goes on */
    EARLY_STOP_STOP,      /* worse than the median: stop it */
    EARLY_STOP_TOO_EARLY, /* step < min_step: not judged */
    EARLY_STOP_TOO_FEW,   /* fewer than min_trials succeeded values: not judged */
} early_stop_verdict;

typedef struct early_stop_result {
    early_stop_verdict verdict;
    double median; /* GO_ON and STOP: the median it was compared with; else 0 */
    /* The sentence a person reads, e.g. "loss 0.91 at step 400 is worse than the median 0.52 of
     * 5 succeeded trials" (the event's message when it stops); truncated, always terminated. */
    char message[256];
} early_stop_result;

/*
 * Applies the rule to in (borrowed; in->done is reordered) and fills *out. Never fails: an input
 * outside the contract above (a NULL in, out or done with ndone > 0) reads as "not judged"
 * (TOO_FEW, or nothing written when out is NULL).
 */
void early_stop_decide(const early_stop_input *in, early_stop_result *out);

#endif
