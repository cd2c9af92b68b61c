/*
 * ty_hash.h - FNV-1a, the hash of the in-memory tables keyed by ids and names (jobs and
 * attempts by id, log streams by job, attempt and rank, connections by address). Not for
 * anything a client could use to collide on purpose where that matters: those tables bound
 * their chains otherwise.
 */
#ifndef TY_HASH_H
#define TY_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TY_FNV1A_INIT 14695981039346656037ULL

/* h carried on over n bytes of p (start from TY_FNV1A_INIT). */
uint64_t ty_fnv1a(uint64_t h, const void *p, size_t n);
/* FNV-1a of a NUL-terminated string. */
uint64_t ty_fnv1a_str(const char *s);

#endif
