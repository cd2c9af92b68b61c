/*
 * sweep_stop.c - median early stopping applied (see sweep_stop.h): the store's facts, the rule's
 * verdict, the store's cancel.
 */
#include "scheduler/sweep_stop.h"

#include "scheduler/early_stop.h"

ty_err sweep_stop_check(store *s, const char *id, int *stopped)
{
    store_stop_facts f = {0};
    early_stop_result r;
    if (stopped)
        *stopped = 0;
    ty_err e = store_sweep_stop_facts(s, id, &f);
    if (e != TY_OK || !f.rule || !f.has_point)
        goto out;
    early_stop_input in = {.metric = f.metric,
                           .maximize = f.maximize,
                           .min_trials = f.min_trials,
                           .min_step = f.min_step,
                           .step = f.step,
                           .value = f.value,
                           .done = f.done,
                           .ndone = f.ndone};
    early_stop_decide(&in, &r);
    if (r.verdict == EARLY_STOP_STOP)
        e = store_sweep_stop_trial(s, id, EARLY_STOP_REASON, r.message, stopped);
out:
    store_stop_facts_clear(&f);
    return e;
}
