/*
 * ty_hash.c - see ty_hash.h.
 */
#include "common/ty_hash.h"

#define FNV1A_PRIME 1099511628211ULL

uint64_t ty_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * FNV1A_PRIME;
    return h;
}

uint64_t ty_fnv1a_str(const char *s)
{
    uint64_t h = TY_FNV1A_INIT;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        h = (h ^ *c) * FNV1A_PRIME;
    return h;
}
