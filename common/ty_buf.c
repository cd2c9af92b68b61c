#include "common/ty_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ty_buf_init(ty_buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

ty_err ty_buf_reserve(ty_buf *b, size_t extra)
{
    if (b->max && (extra > b->max || b->len > b->max - extra))
        return TY_ETOOLARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return TY_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return TY_ENOMEM;
    b->data = p;
    b->cap = cap;
    return TY_OK;
}

ty_err ty_buf_append(ty_buf *b, const void *p, size_t n)
{
    ty_err e = ty_buf_reserve(b, n);
    if (e)
        return e;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return TY_OK;
}

ty_err ty_buf_puts(ty_buf *b, const char *s)
{
    return ty_buf_append(b, s, strlen(s));
}

ty_err ty_buf_vprintf(ty_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return TY_EINVAL;
    if ((size_t)n < sizeof small)
        return ty_buf_append(b, small, (size_t)n);
    ty_err e = ty_buf_reserve(b, (size_t)n);
    if (e)
        return e;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return TY_OK;
}

ty_err ty_buf_printf(ty_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ty_err e = ty_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return e;
}

ty_err ty_buf_steal(ty_buf *b, char **out, size_t *len)
{
    if (!b->data) {
        ty_err e = ty_buf_reserve(b, 0);
        if (e)
            return e;
        b->data[0] = '\0';
    }
    *out = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return TY_OK;
}

void ty_buf_reset(ty_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void ty_buf_free(ty_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
