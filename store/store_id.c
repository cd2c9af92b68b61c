/*
 * store_id.c - job ids: 26 characters [0-9a-z], time-ordered.
 *
 * The layout is a lower-cased ULID: 128 bits written as 26 base32 digits of
 * the Crockford alphabet (no i, l, o, u), most significant first; the top 48
 * bits are the creation time in milliseconds since the epoch and the low 80
 * bits a suffix. Because the alphabet is in ASCII order, comparing two ids as
 * strings compares them as numbers.
 *
 * Invariant: the generator never returns an id less than or equal to one it
 * returned or observed before. Within one millisecond the suffix is
 * incremented instead of drawn again ("monotonic ULID"), and when the wall
 * clock goes backwards the last millisecond is kept. store_list.c relies on
 * it: id order equals insertion (seq) order equals created_at order, so the
 * unique index on id doubles as an index on the creation time.
 */
#include "store/store_int.h"

#include <string.h>

#include "common/ty_crypto.h"

static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

#define RHI_MASK UINT64_C(0xffff) /* the suffix's high part holds 16 bits */

void store_idgen_init(store_idgen *g)
{
    g->ms = -1;
    g->rhi = 0;
    g->rlo = 0;
}

void store_id_encode(int64_t ms, uint64_t rhi, uint64_t rlo, char out[STORE_ID_LEN + 1])
{
    /* The 128-bit value is hi:lo; 26 digits cover 130 bits, the top 2 are zero. */
    uint64_t hi = ((uint64_t)ms << 16) | (rhi & RHI_MASK);
    uint64_t lo = rlo;
    for (int i = 0; i < STORE_ID_LEN; i++) {
        int p = 125 - 5 * i; /* bit position of this digit's least significant bit */
        uint64_t v;
        if (p >= 64)
            v = hi >> (p - 64);
        else if (p + 5 <= 64)
            v = lo >> p;
        else
            v = (lo >> p) | (hi << (64 - p));
        out[i] = alphabet[v & 31];
    }
    out[STORE_ID_LEN] = '\0';
}

static int digit_value(char c)
{
    const char *p = c ? strchr(alphabet, c) : NULL;
    return p ? (int)(p - alphabet) : -1;
}

int store_id_decode(const char *id, int64_t *ms, uint64_t *rhi, uint64_t *rlo)
{
    if (!id || strlen(id) != STORE_ID_LEN)
        return -1;
    uint64_t hi = 0, lo = 0;
    for (int i = 0; i < STORE_ID_LEN; i++) {
        int d = digit_value(id[i]);
        if (d < 0 || (i == 0 && d > 7)) /* a first digit above 7 overflows 128 bits */
            return -1;
        hi = (hi << 5) | (lo >> 59);
        lo = (lo << 5) | (uint64_t)d;
    }
    *ms = (int64_t)(hi >> 16);
    *rhi = hi & RHI_MASK;
    *rlo = lo;
    return 0;
}

void store_idgen_observe(store_idgen *g, const char *id)
{
    int64_t ms;
    uint64_t rhi, rlo;
    if (store_id_decode(id, &ms, &rhi, &rlo) != 0)
        return;
    if (ms > g->ms || (ms == g->ms && (rhi > g->rhi || (rhi == g->rhi && rlo > g->rlo)))) {
        g->ms = ms;
        g->rhi = rhi;
        g->rlo = rlo;
    }
}

/* A fresh random suffix with its top bit clear, leaving 2^79 increments of headroom. */
static ty_err draw_suffix(store_idgen *g)
{
    unsigned char r[10];
    ty_err e = ty_random_bytes(r, sizeof r);
    if (e != TY_OK)
        return e;
    g->rhi = ((uint64_t)(r[0] & 0x7f) << 8) | r[1];
    g->rlo = 0;
    for (int i = 2; i < 10; i++)
        g->rlo = (g->rlo << 8) | r[i];
    return TY_OK;
}

ty_err store_idgen_next(store_idgen *g, int64_t now_ms, char id[STORE_ID_LEN + 1], int64_t *ms)
{
    ty_err e = TY_OK;
    if (now_ms < 0)
        now_ms = 0;
    if (now_ms > g->ms) {
        if ((e = draw_suffix(g)) != TY_OK)
            goto out;
        g->ms = now_ms;
    } else if (++g->rlo == 0 && ((g->rhi = (g->rhi + 1) & RHI_MASK) == 0)) {
        /* 80-bit suffix wrapped: move on to the next millisecond. */
        if ((e = draw_suffix(g)) != TY_OK)
            goto out;
        g->ms++;
    }
    if (g->ms > STORE_ID_MAX_MS) {
        e = TY_EINTERNAL;
        goto out;
    }
    store_id_encode(g->ms, g->rhi, g->rlo, id);
    *ms = g->ms;
out:
    return e;
}
