/*
 * rt_error.h - error messages of the runtime.
 *
 * Runtime functions that can fail return a ty_err (common/ty_error.h) and, when the
 * caller passes a buffer, a one-line human-readable reason ("train-images-idx3-ubyte.gz:
 * truncated after 1024 bytes"). main() prints it; nothing in the library exits.
 */
#ifndef TY_RUNTIME_RT_ERROR_H
#define TY_RUNTIME_RT_ERROR_H

#include <stddef.h>

/* Writes the formatted message into err[errlen] (truncating). err may be NULL or errlen 0. */
void rt_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
