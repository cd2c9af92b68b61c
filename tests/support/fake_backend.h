/*
 * fake_backend.h - a backend (scheduler/backend.h) that runs nothing, for the
 * reconcile loop's own tests: the test plays the world.
 *
 * Capacity is a number of slots (one per rank) that the test may change. The
 * fake records every call the loop makes, one line each, in order:
 *
 *   reserve <id>        a reservation was taken (not when refused)
 *   launch <id> <n>     attempt n was launched
 *   stop <id> soft|hard   (" failed" appended when fake_fail_stops() made it fail)
 *   release <id>
 *   recover <id> adopted|stopped
 *   exclude <node>,<node>...   the nodes no attempt may use from now on ("exclude -": none)
 *
 * Nothing happens after a launch until the test says so with fake_emit_*()
 * (a rank runs, exits, is disrupted; the launch failed; capacity grew).
 * A stop ends every rank that has not ended (DISRUPTED, stop requested, exit
 * code 143) unless fake_set_stop_ends(b, 0). Every function is thread-safe:
 * the test calls them while the scheduler's thread calls the backend.
 */
#ifndef TY_TESTS_FAKE_BACKEND_H
#define TY_TESTS_FAKE_BACKEND_H

#include <stddef.h>

#include "scheduler/backend.h"

/* A fake with `slots` slots; free with b->ops->free(b). NULL when out of memory. */
backend *fake_backend_new(int slots);

/* Gives the fake `gpus` GPUs of one type (none before): reserve() books world x per-rank GPUs
 * of it ("not now" when too few are free), and free_resources() reports the free ones. Call
 * before the scheduler starts (the type's name is borrowed by the loop). */
void fake_set_gpus(backend *b, const char *type, int gpus);
/* 1: the fake claims what Kubernetes does, that a gang outlives the server (backend_ops.adopts);
 * 0 (default): as the local backend, it does not. Call before the scheduler starts. */
void fake_set_adopts(backend *b, int on);
/* Changes the capacity (no event: see fake_emit_capacity). */
void fake_set_slots(backend *b, int slots);
/* 1 (default): a stop ends every running rank at once; 0: ranks end only when told. */
void fake_set_stop_ends(backend *b, int on);
/* The next n stop() calls fail: each is answered by a STOP_FAILED event, nothing ends. */
void fake_fail_stops(backend *b, int n);
/* The next recover() of job id adopts its attempt, with `world` ranks (none running yet:
 * the test says which run). */
void fake_adopt_next(backend *b, const char *id, int world);

/* Events of the current attempt of job id; rank -1 means every rank. Each returns 0, or -1
 * when the job holds no reservation here. */
int fake_emit_running(backend *b, const char *id, int rank, const char *node);
int fake_emit_pending(backend *b, const char *id, const char *reason);
int fake_emit_exit(backend *b, const char *id, int rank, int exit_code, int signal,
                   const char *detail);
int fake_emit_disrupted(backend *b, const char *id, int rank, backend_disruption why, int ended,
                        const char *detail);
int fake_emit_launch_failed(backend *b, const char *id, const char *detail);
void fake_emit_capacity(backend *b);

/* Copies the call log ("line\nline\n...") into buf; returns its whole length. */
size_t fake_calls(backend *b, char *buf, size_t len);
/* Waits up to wait_ms for a line of the call log equal to `line`, seen `times` times in
 * all; returns 1 when it came, 0 otherwise. */
int fake_wait_call(backend *b, const char *line, int times, int wait_ms);
/* How many lines of the call log equal `line`. */
int fake_count_calls(backend *b, const char *line);
/* The slots reserved now. */
int fake_slots_used(backend *b);

#endif
