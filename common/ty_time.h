/*
 * ty_time.h - clocks and timestamps.
 *
 * Stored times are milliseconds since the Unix epoch (UTC); the API shows them
 * as RFC 3339 with milliseconds and a 'Z' suffix.
 */
#ifndef TY_TIME_H
#define TY_TIME_H

#include <stddef.h>
#include <stdint.h>

int64_t ty_time_now_ms(void);     /* wall clock, ms since the epoch */
uint64_t ty_time_mono_ns(void);   /* monotonic clock, ns */

/* Writes "2026-11-22T10:00:00.123Z" (24 chars + NUL) into buf; returns buf. */
char *ty_time_format_rfc3339(int64_t ms, char *buf, size_t len);
/* Parses RFC 3339 ("...Z" or "+hh:mm", optional fraction). Returns 0 on success, -1 if invalid. */
int ty_time_parse_rfc3339(const char *s, int64_t *ms);

#endif
