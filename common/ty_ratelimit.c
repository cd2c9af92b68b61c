/*
 * ty_ratelimit.c - see ty_ratelimit.h.
 *
 * A slot is 32 bytes; a set is TY_RATELIMIT_WAYS consecutive slots. A key is found by its
 * 64-bit keyed hash alone (the hash is the slot's tag): two keys with the same 64 bits share a
 * bucket, which happens about once in 2^64 pairs.
 */
#include "common/ty_ratelimit.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    uint64_t tag;     /* the key's hash */
    double tokens;    /* at t_ms */
    int64_t t_ms;     /* when tokens was last brought up to date */
    int used;
} slot;

struct ty_ratelimit {
    pthread_mutex_t mu;
    double rate;      /* tokens a second */
    double burst;     /* tokens at most */
    uint64_t seed;
    size_t nsets;
    slot *slots;      /* nsets * TY_RATELIMIT_WAYS */
};

ty_err ty_ratelimit_new(size_t nslots, double rate, double burst, uint64_t seed,
                        ty_ratelimit **out)
{
    if (!out || !(rate > 0) || !(burst >= 1) || nslots == 0 || nslots > ((size_t)1 << 24))
        return TY_EINVAL;
    ty_ratelimit *rl = calloc(1, sizeof *rl);
    if (!rl)
        return TY_ENOMEM;
    rl->nsets = (nslots + TY_RATELIMIT_WAYS - 1) / TY_RATELIMIT_WAYS;
    rl->slots = calloc(rl->nsets * TY_RATELIMIT_WAYS, sizeof *rl->slots);
    if (!rl->slots || pthread_mutex_init(&rl->mu, NULL) != 0) {
        free(rl->slots);
        free(rl);
        return TY_ENOMEM;
    }
    rl->rate = rate;
    rl->burst = burst;
    rl->seed = seed;
    *out = rl;
    return TY_OK;
}

void ty_ratelimit_free(ty_ratelimit *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->mu);
    free(rl->slots);
    free(rl);
}

/* 64-bit finalizer of MurmurHash3: every input bit moves every output bit. */
static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* The key's hash under the table's seed, 8 bytes at a time. */
static uint64_t hash_key(const ty_ratelimit *rl, const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = mix(rl->seed ^ (uint64_t)len);
    if (len > TY_RATELIMIT_MAX_KEY)
        len = TY_RATELIMIT_MAX_KEY;
    while (len > 0) {
        uint64_t w = 0;
        size_t n = len < 8 ? len : 8;
        memcpy(&w, p, n);
        h = mix(h ^ w) + 0x9e3779b97f4a7c15ULL;
        p += n;
        len -= n;
    }
    return mix(h);
}

/* The slot's tokens at now_ms (never above burst); stores them. */
static double refill(const ty_ratelimit *rl, slot *s, int64_t now_ms)
{
    if (now_ms > s->t_ms) {
        s->tokens += (double)(now_ms - s->t_ms) * rl->rate / 1000.0;
        if (s->tokens > rl->burst)
            s->tokens = rl->burst;
        s->t_ms = now_ms;
    }
    return s->tokens;
}

/* The key's slot, or NULL when it is not in the table. Under mu. */
static slot *find(ty_ratelimit *rl, uint64_t h)
{
    slot *set = &rl->slots[(size_t)(h >> 32) % rl->nsets * TY_RATELIMIT_WAYS];
    for (int i = 0; i < TY_RATELIMIT_WAYS; i++)
        if (set[i].used && set[i].tag == h)
            return &set[i];
    return NULL;
}

/* A slot for a key not in the table: an empty one of its set, else the one whose bucket is
 * now the fullest. Holds a full bucket. Under mu. */
static slot *claim(ty_ratelimit *rl, uint64_t h, int64_t now_ms)
{
    slot *set = &rl->slots[(size_t)(h >> 32) % rl->nsets * TY_RATELIMIT_WAYS];
    slot *victim = NULL;
    double most = -1;
    for (int i = 0; i < TY_RATELIMIT_WAYS && (!victim || victim->used); i++) {
        double t = set[i].used ? refill(rl, &set[i], now_ms) : rl->burst + 1;
        if (t > most) {
            most = t;
            victim = &set[i];
        }
    }
    victim->used = 1;
    victim->tag = h;
    victim->tokens = rl->burst;
    victim->t_ms = now_ms;
    return victim;
}

static int64_t wait_for(const ty_ratelimit *rl, double have, double cost)
{
    double ms = ceil((cost - have) * 1000.0 / rl->rate);
    return ms < 1 ? 1 : ms > 1e12 ? (int64_t)1e12 : (int64_t)ms;
}

int ty_ratelimit_take(ty_ratelimit *rl, const void *key, size_t keylen, int64_t now_ms,
                      double cost, int64_t *wait_ms)
{
    uint64_t h = hash_key(rl, key, keylen);
    int ok;
    pthread_mutex_lock(&rl->mu);
    slot *s = find(rl, h);
    if (!s)
        s = claim(rl, h, now_ms);
    double have = refill(rl, s, now_ms);
    ok = have >= cost;
    if (ok)
        s->tokens = have - cost;
    else if (wait_ms)
        *wait_ms = wait_for(rl, have, cost);
    pthread_mutex_unlock(&rl->mu);
    return ok;
}

int ty_ratelimit_check(ty_ratelimit *rl, const void *key, size_t keylen, int64_t now_ms,
                       double cost, int64_t *wait_ms)
{
    uint64_t h = hash_key(rl, key, keylen);
    pthread_mutex_lock(&rl->mu);
    slot *s = find(rl, h);
    double have = s ? refill(rl, s, now_ms) : rl->burst;
    int ok = have >= cost;
    if (!ok && wait_ms)
        *wait_ms = wait_for(rl, have, cost);
    pthread_mutex_unlock(&rl->mu);
    return ok;
}
