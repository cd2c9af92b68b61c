/*
 * ty_quantity.c - parsing Kubernetes resource quantities (ty_quantity.h).
 *
 * The text is read once into a decimal form, value = mant * 10^exp10 * 2^bin,
 * with mant at most 19 digits and exp10 saturated at +-EXP_CAP, so no digit
 * count and no exponent can overflow anything; the conversions then check
 * their range before they multiply.
 */
#include "common/ty_quantity.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIGITS 19  /* significant digits kept: 10^19 - 1 < 2^64 */
#define EXP_CAP 100000 /* |exp10| saturates here, far past a double's range either way */

typedef struct qdec {
    uint64_t mant; /* the first MAX_DIGITS significant digits */
    long exp10;
    int bin;    /* 0, 10, ..., 60: a binary suffix */
    int neg;
    int sticky; /* a nonzero digit past the ones kept was dropped: the value is a bit larger */
} qdec;

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static long clamp_exp(long e)
{
    return e > EXP_CAP ? EXP_CAP : e < -EXP_CAP ? -EXP_CAP : e;
}

/* Applies the suffix s[0..n) to q; 0 when it is none of the known ones. */
static int apply_suffix(const char *s, size_t n, qdec *q)
{
    static const char decimal[] = "kMGTPE";
    static const char binary[] = "KMGTPE";
    const char *p;
    if (n == 0)
        return 1;
    if (n == 1 && s[0] == 'm') {
        q->exp10 = clamp_exp(q->exp10 - 3);
        return 1;
    }
    if (n == 1 && (p = memchr(decimal, s[0], sizeof decimal - 1))) {
        q->exp10 = clamp_exp(q->exp10 + 3 * (p - decimal + 1));
        return 1;
    }
    if (n == 2 && s[1] == 'i' && (p = memchr(binary, s[0], sizeof binary - 1))) {
        q->bin = 10 * (int)(p - binary + 1);
        return 1;
    }
    if (n >= 2 && (s[0] == 'e' || s[0] == 'E')) {
        size_t k = 1;
        int neg = 0;
        if (s[k] == '+' || s[k] == '-')
            neg = s[k++] == '-';
        if (k == n)
            return 0;
        long e = 0;
        for (; k < n; k++) {
            if (!is_digit(s[k]))
                return 0;
            if (e < EXP_CAP)
                e = e * 10 + (s[k] - '0');
        }
        q->exp10 = clamp_exp(q->exp10 + (neg ? -e : e));
        return 1;
    }
    return 0;
}

/* One digit d of the mantissa; frac: it is after the point. */
static void add_digit(qdec *q, int *nsig, int d, int frac)
{
    if (q->mant == 0 && d == 0) {
        if (frac) /* a leading zero of the fraction moves the point */
            q->exp10 = clamp_exp(q->exp10 - 1);
        return;
    }
    if (*nsig < MAX_DIGITS) {
        q->mant = q->mant * 10 + (uint64_t)d;
        (*nsig)++;
        if (frac)
            q->exp10 = clamp_exp(q->exp10 - 1);
        return;
    }
    q->sticky |= d != 0;
    if (!frac) /* an integer digit not kept still counts its place */
        q->exp10 = clamp_exp(q->exp10 + 1);
}

static ty_err qparse(const char *s, size_t len, qdec *q)
{
    size_t i = 0;
    int digits = 0, nsig = 0;
    memset(q, 0, sizeof *q);
    if (!s || len == 0)
        return TY_EINVAL;
    if (s[i] == '+' || s[i] == '-')
        q->neg = s[i++] == '-';
    for (; i < len && is_digit(s[i]); i++, digits++)
        add_digit(q, &nsig, s[i] - '0', 0);
    if (i < len && s[i] == '.')
        for (i++; i < len && is_digit(s[i]); i++, digits++)
            add_digit(q, &nsig, s[i] - '0', 1);
    if (digits == 0 || !apply_suffix(s + i, len - i, q))
        return TY_EINVAL;
    return TY_OK;
}

ty_err ty_quantity_parse(const char *s, size_t len, double *value)
{
    qdec q;
    ty_err e = qparse(s, len, &q);
    if (e)
        return e;
    double v = 0;
    if (q.mant != 0) {
        if (q.exp10 > 40) /* at least 10^41: far past the limit */
            return TY_ETOOLARGE;
        /* Dividing by an exact power of ten rounds once, so "1.1" is the double nearest 1.1. */
        v = q.exp10 >= 0 ? (double)q.mant * pow(10, (double)q.exp10)
                         : (double)q.mant / pow(10, (double)-q.exp10);
        v = ldexp(v, q.bin);
        if (!(v < TY_QUANTITY_LIMIT))
            return TY_ETOOLARGE;
    }
    *value = q.neg ? -v : v;
    return TY_OK;
}

ty_err ty_quantity_scaled(const char *s, size_t len, int scale, int64_t *out)
{
    qdec q;
    if (scale < 0 || scale > 18)
        return TY_EINVAL;
    ty_err e = qparse(s, len, &q);
    if (e)
        return e;
    /* mant < 2^64 and bin <= 60: the product fits 124 bits. */
    __extension__ typedef unsigned __int128 u128;
    u128 acc = (u128)q.mant << q.bin;
    long e10 = q.exp10 + scale;
    if (q.mant == 0) {
        acc = 0;
    } else if (e10 >= 0) {
        for (long k = 0; k < e10 && acc <= (u128)INT64_MAX; k++)
            acc *= 10;
        acc += (u128)q.sticky; /* dropped digits: round up */
    } else if (e10 < -38) {
        acc = 1; /* acc < 10^38: a positive value below one unit rounds up to one */
    } else {
        u128 div = 1;
        for (long k = 0; k < -e10; k++)
            div *= 10;
        u128 r = acc % div;
        acc = acc / div + (r != 0 || q.sticky);
    }
    if (acc > (u128)INT64_MAX)
        return TY_ETOOLARGE;
    *out = q.neg ? -(int64_t)acc : (int64_t)acc;
    return TY_OK;
}

void ty_quantity_format_millis(int64_t millis, char *buf, size_t len)
{
    if (millis % 1000 == 0) {
        snprintf(buf, len, "%lld", (long long)(millis / 1000));
        return;
    }
    int n = snprintf(buf, len, "%lld.%03lld", (long long)(millis / 1000),
                     (long long)(millis % 1000));
    while (n > 0 && (size_t)n < len && buf[n - 1] == '0')
        buf[--n] = '\0';
}

void ty_quantity_format_bytes(int64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int u = -1;
    while (u + 1 < 6 && bytes >> (10 * (u + 2)) > 0)
        u++;
    if (u < 0) {
        snprintf(buf, len, "%lld", (long long)bytes);
        return;
    }
    int64_t unit = (int64_t)1 << (10 * (u + 1)), whole = bytes / unit;
    int64_t hundredths = (int64_t)((double)(bytes % unit) * 100 / (double)unit);
    if (hundredths > 99) /* the double rounded up a remainder just below a whole unit */
        hundredths = 99;
    if (hundredths == 0)
        snprintf(buf, len, "%lld%s", (long long)whole, units[u]);
    else if (hundredths % 10 == 0)
        snprintf(buf, len, "%lld.%lld%s", (long long)whole, (long long)(hundredths / 10),
                 units[u]);
    else
        snprintf(buf, len, "%lld.%02lld%s", (long long)whole, (long long)hundredths, units[u]);
}
