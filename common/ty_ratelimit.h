/*
 * ty_ratelimit.h - token buckets in a fixed-size table, for limits keyed by a client's address
 * or a resource's name.
 *
 * The rule: each key has a bucket of at most `burst` tokens that refills at `rate` tokens a
 * second; a request takes one token (or `cost`), and is refused while the bucket holds fewer.
 * A key never seen holds a full bucket.
 *
 * Memory is fixed at creation whatever the number of keys: the table has `nslots` slots in
 * sets of TY_RATELIMIT_WAYS, and a key lives in the set its hash names. A new key takes an
 * empty slot of its set, else the slot whose bucket would now be the fullest (an entry that
 * would be full again carries no information, so nothing is lost when it goes). A client that
 * rotates through more keys than the table holds therefore gets, at worst, a fresh bucket
 * per key: limit the resource (a hook's name) as well as the client.
 *
 * Keys are hashed with a seed (pass random bytes) so that a client cannot pick keys that fill
 * one set. No allocation after ty_ratelimit_new(); every call is O(TY_RATELIMIT_WAYS) under
 * one mutex, safe from any thread. Times are given by the caller (milliseconds of a monotonic
 * clock), so the rule is tested with explicit times.
 */
#ifndef TY_RATELIMIT_H
#define TY_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

#define TY_RATELIMIT_WAYS 4
/* Longest key in bytes: longer keys are cut there (a hook name is at most 63). */
#define TY_RATELIMIT_MAX_KEY 64

typedef struct ty_ratelimit ty_ratelimit;

/*
 * A new table of nslots buckets (rounded up to a multiple of TY_RATELIMIT_WAYS, at least one
 * set) of burst tokens refilled at rate tokens a second. TY_EINVAL when rate <= 0, burst < 1
 * or nslots is 0 or above 2^24; TY_ENOMEM. *out is new: free it with ty_ratelimit_free().
 */
ty_err ty_ratelimit_new(size_t nslots, double rate, double burst, uint64_t seed,
                        ty_ratelimit **out);
/* Accepts NULL. */
void ty_ratelimit_free(ty_ratelimit *rl);

/*
 * Takes cost tokens (> 0) from key's bucket at now_ms. Returns 1 when they were there (taken),
 * 0 when not (nothing taken); then *wait_ms (may be NULL) is how long until they would be, at
 * least 1. Times that go backwards count as no time passing.
 */
int ty_ratelimit_take(ty_ratelimit *rl, const void *key, size_t keylen, int64_t now_ms,
                      double cost, int64_t *wait_ms);

/*
 * Whether cost tokens are in key's bucket at now_ms, without taking them: 1 or 0 (with
 * *wait_ms as for ty_ratelimit_take()). Used to refuse early on a limit that only failures
 * spend; a key not in the table holds a full bucket and does not take a slot.
 */
int ty_ratelimit_check(ty_ratelimit *rl, const void *key, size_t keylen, int64_t now_ms,
                       double cost, int64_t *wait_ms);

#endif
