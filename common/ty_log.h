/*
 * ty_log.h - one-line JSON logs on stderr.
 *
 * Every line is a JSON object: {"ts":"2026-11-22T10:00:00.123Z","level":"info",
 * "msg":"...", ...fields}. Lines are written with a single write(2), so lines
 * from different threads never interleave. The level is checked before any
 * formatting (TY_LOG). Callers must never pass secrets (tokens, keys) as fields.
 */
#ifndef TY_LOG_H
#define TY_LOG_H

#include <jansson.h>

typedef enum ty_log_level {
    TY_LOG_DEBUG = 0,
    TY_LOG_INFO,
    TY_LOG_WARN,
    TY_LOG_ERROR,
} ty_log_level;

void ty_log_set_level(ty_log_level level);
/* Parses "debug", "info", "warn", "error"; returns -1 when unknown. */
int ty_log_parse_level(const char *s);
int ty_log_enabled(ty_log_level level);

/* Writes one line. `fields` is stolen (may be NULL); its keys are merged after msg. */
void ty_log_json(ty_log_level level, const char *msg, json_t *fields);

/* Formats the fields with json_pack() only when the level is enabled. */
#define TY_LOG(level, msg, ...)                                              \
    do {                                                                     \
        if (ty_log_enabled(level))                                           \
            ty_log_json((level), (msg), json_pack(__VA_ARGS__));             \
    } while (0)

#endif
