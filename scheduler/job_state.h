/*
 * job_state.h - the job state machine of DESIGN.md, in one place.
 *
 *   PENDING -> ADMITTED -> STARTING -> RUNNING -> SUCCEEDED | FAILED
 *   RUNNING/STARTING -> RESTARTING -> STARTING (attempt n+1) | FAILED
 *   any non-terminal -> CANCELLING -> CANCELLED, and PENDING/ADMITTED -> CANCELLED at once
 *   any non-terminal -> FAILED (e.g. Timeout, Unschedulable)
 *
 * Terminal states (SUCCEEDED, FAILED, CANCELLED) never change again. The store
 * refuses any transition job_state_transition_allowed() rejects, so an illegal
 * transition is never written whoever asks for it.
 */
#ifndef TY_SCHEDULER_JOB_STATE_H
#define TY_SCHEDULER_JOB_STATE_H

#include <stdbool.h>

typedef enum job_state {
    JOB_PENDING = 0,
    JOB_ADMITTED,
    JOB_STARTING,
    JOB_RUNNING,
    JOB_RESTARTING,
    JOB_CANCELLING,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLED,
    JOB_STATE_COUNT,
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
