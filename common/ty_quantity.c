/*
 * ty_quantity.c - parsing Kubernetes resource quantities (ty_quantity.h).
 */
#include "common/ty_quantity.h"

#include <math.h>
#include <string.h>

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The multiplier of a suffix; 0 when it is none of the known ones. */
static double suffix_scale(const char *s, size_t n)
{
    static const char decimal[] = "kMGTPE";
    static const char binary[] = "KMGTPE";
    if (n == 0)
        return 1;
    if (n == 1 && s[0] == 'm')
        return 1e-3;
    if (n == 1 && strchr(decimal, s[0]))
        return pow(1000, (double)(strchr(decimal, s[0]) - decimal + 1));
    if (n == 2 && s[1] == 'i' && strchr(binary, s[0]))
        return pow(1024, (double)(strchr(binary, s[0]) - binary + 1));
    if (n >= 2 && (s[0] == 'e' || s[0] == 'E')) {
        size_t k = 1;
        int neg = 0;
        if (s[k] == '+' || s[k] == '-')
            neg = s[k++] == '-';
        if (k == n)
            return 0;
        int e = 0;
        for (; k < n; k++) {
            if (!is_digit(s[k]))
                return 0;
            if (e < 1000) /* past double's range either way */
                e = e * 10 + (s[k] - '0');
        }
        return pow(10, neg ? -e : e);
    }
    return 0;
}

ty_err ty_quantity_parse(const char *s, size_t len, double *value)
{
    size_t i = 0;
    int neg = 0, digits = 0;
    double v = 0, frac = 0.1;
    if (!s || len == 0)
        return TY_EINVAL;
    if (s[i] == '+' || s[i] == '-')
        neg = s[i++] == '-';
    for (; i < len && is_digit(s[i]); i++, digits++)
        v = v * 10 + (s[i] - '0');
    if (i < len && s[i] == '.')
        for (i++; i < len && is_digit(s[i]); i++, digits++, frac /= 10)
            v += (s[i] - '0') * frac;
    if (digits == 0)
        return TY_EINVAL;
    double scale = suffix_scale(s + i, len - i);
    if (scale == 0)
        return TY_EINVAL;
    *value = (neg ? -v : v) * scale;
    return TY_OK;
}
