/*
 * job_state.h - the job state machine of docs/DESIGN.md, in one place.
 *
 *   PENDING -> ADMITTED -> STARTING -> RUNNING -> SUCCEEDED | FAILED
 *   RUNNING/STARTING -> RESTARTING -> STARTING (attempt n+1) | FAILED
 *   any non-terminal -> CANCELLING -> CANCELLED, and PENDING/ADMITTED -> CANCELLED at once
 *   any non-terminal -> FAILED (e.g. Timeout, Unschedulable)
 *
 * Terminal states (SUCCEEDED, FAILED, CANCELLED) never change again. The store
 * refuses any transition job_state_transition_allowed() rejects, so an illegal
 * transition is never written whoever asks for it.
 *
 * An on-disk format: the store keeps these values in jobs.state and
 * job_events.from_state/to_state, whose CHECK constraints allow 0..8. A value is never
 * renumbered or reused; a new state takes the next number and a migration widens the
 * CHECKs (test_store_schema ties the two together). Here in common/ because the store
 * and the scheduler both build on it.
 */
#ifndef TY_JOB_STATE_H
#define TY_JOB_STATE_H

#include <stdbool.h>

typedef enum job_state {
    JOB_PENDING = 0,
    JOB_ADMITTED = 1,
    JOB_STARTING = 2,
    JOB_RUNNING = 3,
    JOB_RESTARTING = 4,
    JOB_CANCELLING = 5,
    JOB_SUCCEEDED = 6,
    JOB_FAILED = 7,
    JOB_CANCELLED = 8,
    JOB_STATE_COUNT = 9,
    JOB_STATE_NONE = -1, /* "before creation", the from-state of a job's first event */
} job_state;

/* "PENDING", ...; "NONE" for JOB_STATE_NONE. Static, never NULL. */
const char *job_state_name(job_state s);
/* Parses an upper-case state name; returns JOB_STATE_NONE when unknown. */
job_state job_state_parse(const char *name);
bool job_state_is_terminal(job_state s);
bool job_state_transition_allowed(job_state from, job_state to);

/*
 * What a cancel request does to a job in state `cur`: sets *to and returns
 * true when a transition is needed (PENDING/ADMITTED -> CANCELLED,
 * STARTING/RUNNING/RESTARTING -> CANCELLING); returns false with *to = cur when
 * nothing needs doing (already CANCELLING or CANCELLED) or nothing may be done
 * (SUCCEEDED, FAILED; see job_state_cancel_conflicts()).
 */
bool job_state_cancel_target(job_state cur, job_state *to);
bool job_state_cancel_conflicts(job_state cur);

#endif
