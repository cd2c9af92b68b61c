/*
 * sweep_stop.h - median early stopping applied: after a trial's metrics commit, read its facts
 * from the store (store_sweep_stop_facts()), ask the rule (early_stop.h) and, when the trial is
 * worse than the median, stop it as a client's cancel would, with reason "EarlyStopped" and the
 * rule's sentence as the message (store_sweep_stop_trial()).
 *
 * The read and the cancel are two store calls: a trial that ended between them is left alone
 * by the cancel (a cancel does not move an ended job), and a report that lands between them is
 * judged again by its own check.
 */
#ifndef TY_SCHEDULER_SWEEP_STOP_H
#define TY_SCHEDULER_SWEEP_STOP_H

#include "common/ty_error.h"
#include "store/store.h"

/*
 * Judges job `id` (borrowed) after its metrics were stored. A job that is no trial of a sweep
 * with the rule, has no point of the objective, or is not worse is left alone (TY_OK, *stopped
 * 0). *stopped (may be NULL) is 1 when it was stopped now. Errors are the store's (TY_ENOMEM,
 * TY_ENOTFOUND when the job went away); nothing is written then.
 */
ty_err sweep_stop_check(store *s, const char *id, int *stopped);

#endif
