/*
 * ty_quantity.h - Kubernetes resource quantities ("500m", "2", "1.5", "4Gi", "1e3").
 *
 * One grammar for every layer that reads them: api/ validates a job's
 * resources with it, the local backend turns them into cgroup limits.
 *
 *   [+-] digits [. digits] [suffix]
 *   suffix: m k M G T P E (powers of 1000; m = 1/1000), Ki Mi Gi Ti Pi Ei
 *           (powers of 1024), or an exponent e<int> / E<int>
 *
 * Nothing here wraps or overflows, whatever the text: digits are read into a
 * decimal mantissa of at most 19 significant digits (the rest only moves the
 * exponent), exponents saturate, and a value whose magnitude is 2^63 or more
 * in its base unit ("64Ei", "1e308", "9223372036854775808", a thousand
 * digits) is TY_ETOOLARGE rather than a huge or infinite number. So every
 * value these functions return fits an int64 in its base unit (cores, bytes).
 * A value too small for a double ("1e-400") is 0, which callers refuse as
 * "must be greater than 0".
 */
#ifndef TY_QUANTITY_H
#define TY_QUANTITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

/* Every quantity parsed is below this magnitude (2^63), in its base unit. */
#define TY_QUANTITY_LIMIT 9223372036854775808.0

/*
 * Parses s[0..len) into *value, in the quantity's base unit (cores for CPU,
 * bytes for memory): finite, |*value| < TY_QUANTITY_LIMIT. TY_EINVAL when s is
 * not a quantity; TY_ETOOLARGE when its magnitude reaches TY_QUANTITY_LIMIT;
 * *value is then untouched. The sign is kept: the caller decides whether <= 0
 * is allowed.
 */
ty_err ty_quantity_parse(const char *s, size_t len, double *value);

/*
 * The quantity s[0..len) times 10^scale (scale 0: whole base units, 3:
 * thousandths, e.g. millicores), computed exactly on its decimal digits and
 * rounded away from zero to an integer, as Kubernetes rounds "0.0001" CPU up
 * to "1m". TY_EINVAL when s is not a quantity, TY_ETOOLARGE when the result
 * does not fit an int64 (*out untouched). scale must be within 0..18.
 */
ty_err ty_quantity_scaled(const char *s, size_t len, int scale, int64_t *out);

/* Cores from millicores (>= 0), as a person writes them: "2", "2.5", "0.125". */
void ty_quantity_format_millis(int64_t millis, char *buf, size_t len);

/* Bytes (>= 0) in the largest binary unit that holds one, to two decimals rounded down and
 * without trailing zeros: "4Ti", "1.5Gi", "7.67Gi", "512". */
void ty_quantity_format_bytes(int64_t bytes, char *buf, size_t len);

#endif
