/*
 * ty_quantity.h - Kubernetes resource quantities ("500m", "2", "1.5", "4Gi", "1e3").
 *
 * One grammar for every layer that reads them: api/ validates a job's
 * resources with it, the local backend turns them into cgroup limits.
 *
 *   [+-] digits [. digits] [suffix]
 *   suffix: m k M G T P E (powers of 1000; m = 1/1000), Ki Mi Gi Ti Pi Ei
 *           (powers of 1024), or an exponent e<int> / E<int>
 */
#ifndef TY_QUANTITY_H
#define TY_QUANTITY_H

#include <stddef.h>

#include "common/ty_error.h"

/*
 * Parses s[0..len) into *value, in the quantity's base unit (cores for CPU,
 * bytes for memory). TY_EINVAL when s is not a quantity; *value is then
 * untouched. The sign is kept: the caller decides whether <= 0 is allowed.
 */
ty_err ty_quantity_parse(const char *s, size_t len, double *value);

#endif
