#include "common/job_state.h"

#include <string.h>

static const char *const names[JOB_STATE_COUNT] = {
    [JOB_PENDING] = "PENDING",       [JOB_ADMITTED] = "ADMITTED",
    [JOB_STARTING] = "STARTING",     [JOB_RUNNING] = "RUNNING",
    [JOB_RESTARTING] = "RESTARTING", [JOB_CANCELLING] = "CANCELLING",
    [JOB_SUCCEEDED] = "SUCCEEDED",   [JOB_FAILED] = "FAILED",
    [JOB_CANCELLED] = "CANCELLED",
};

#define BIT(s) (1u << (s))

/* allowed[from] is the set of states reachable from `from` in one step. */
static const unsigned allowed[JOB_STATE_COUNT] = {
    [JOB_PENDING] = BIT(JOB_ADMITTED) | BIT(JOB_CANCELLED) | BIT(JOB_FAILED),
    [JOB_ADMITTED] = BIT(JOB_STARTING) | BIT(JOB_PENDING) | BIT(JOB_CANCELLED) | BIT(JOB_FAILED),
    /* STARTING and RUNNING -> PENDING: the attempt was preempted and the job waits again. */
    [JOB_STARTING] = BIT(JOB_RUNNING) | BIT(JOB_RESTARTING) | BIT(JOB_SUCCEEDED) |
                     BIT(JOB_FAILED) | BIT(JOB_CANCELLING) | BIT(JOB_PENDING),
    [JOB_RUNNING] = BIT(JOB_SUCCEEDED) | BIT(JOB_FAILED) | BIT(JOB_RESTARTING) |
                    BIT(JOB_CANCELLING) | BIT(JOB_PENDING),
    [JOB_RESTARTING] = BIT(JOB_STARTING) | BIT(JOB_FAILED) | BIT(JOB_CANCELLING),
    [JOB_CANCELLING] = BIT(JOB_CANCELLED),
    [JOB_SUCCEEDED] = 0,
    [JOB_FAILED] = 0,
    [JOB_CANCELLED] = 0,
};

const char *job_state_name(job_state s)
{
    if (s < 0 || s >= JOB_STATE_COUNT)
        return "NONE";
    return names[s];
}

job_state job_state_parse(const char *name)
{
    for (int i = 0; i < JOB_STATE_COUNT; i++)
        if (strcmp(name, names[i]) == 0)
            return (job_state)i;
    return JOB_STATE_NONE;
}

bool job_state_is_terminal(job_state s)
{
    return s == JOB_SUCCEEDED || s == JOB_FAILED || s == JOB_CANCELLED;
}

bool job_state_transition_allowed(job_state from, job_state to)
{
    if (from == JOB_STATE_NONE)
        return to == JOB_PENDING;
    if (from < 0 || from >= JOB_STATE_COUNT || to < 0 || to >= JOB_STATE_COUNT)
        return false;
    return (allowed[from] & BIT(to)) != 0;
}

bool job_state_cancel_target(job_state cur, job_state *to)
{
    switch (cur) {
    case JOB_PENDING:
    case JOB_ADMITTED:
        *to = JOB_CANCELLED;
        return true;
    case JOB_STARTING:
    case JOB_RUNNING:
    case JOB_RESTARTING:
        *to = JOB_CANCELLING;
        return true;
    default:
        *to = cur;
        return false;
    }
}

bool job_state_cancel_conflicts(job_state cur)
{
    return cur == JOB_SUCCEEDED || cur == JOB_FAILED;
}
