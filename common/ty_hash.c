/*
 * ty_hash.c - see ty_hash.h.
 */
#include "common/ty_hash.h"

#include <string.h>

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
    return ty_fnv1a(TY_FNV1A_INIT, s, strlen(s));
}
