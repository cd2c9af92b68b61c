/*
 * rt_error.c - error messages of the runtime.
 */
#include "runtime/rt_error.h"

#include <stdarg.h>
#include <stdio.h>

void rt_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (n < 0)
        err[0] = '\0'; /* an encoding error leaves no message rather than garbage */
}
