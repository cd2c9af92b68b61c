/*
 * ty_buf.h - a growable byte buffer with a hard size cap.
 *
 * Used wherever input enters (request bodies) and for rendering text
 * (metrics, logs). The contents are always NUL-terminated so they can be
 * used as a C string, but may contain NUL bytes; `len` is authoritative.
 * A buffer starts zeroed ({0}) or through ty_buf_init(); ty_buf_free() releases it.
 */
#ifndef TY_BUF_H
#define TY_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "common/ty_error.h"

typedef struct ty_buf {
    char *data;     /* owned; NULL until the first append */
    size_t len;     /* bytes used, excluding the terminating NUL */
    size_t cap;     /* bytes allocated */
    size_t max;     /* hard cap on len; 0 means unlimited */
} ty_buf;

void ty_buf_init(ty_buf *b, size_t max);
/* Makes room for `extra` more bytes without appending (e.g. a known Content-Length).
 * TY_ETOOLARGE past the cap, TY_ENOMEM. */
ty_err ty_buf_reserve(ty_buf *b, size_t extra);
/* Appends n bytes. TY_ETOOLARGE past the cap (nothing appended), TY_ENOMEM. */
ty_err ty_buf_append(ty_buf *b, const void *p, size_t n);
ty_err ty_buf_puts(ty_buf *b, const char *s);
ty_err ty_buf_printf(ty_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ty_err ty_buf_vprintf(ty_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Passes ownership of the data (never NULL on TY_OK, "" when empty) and resets b. */
ty_err ty_buf_steal(ty_buf *b, char **out, size_t *len);
void ty_buf_reset(ty_buf *b);   /* len = 0, memory kept */
void ty_buf_free(ty_buf *b);    /* accepts a zeroed buffer */

#endif
