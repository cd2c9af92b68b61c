#include "common/ty_log.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty_time.h"

static atomic_int min_level = TY_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void ty_log_set_level(ty_log_level level)
{
    atomic_store(&min_level, (int)level);
}

int ty_log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

int ty_log_enabled(ty_log_level level)
{
    return (int)level >= atomic_load(&min_level);
}

void ty_log_json(ty_log_level level, const char *msg, json_t *fields)
{
    char ts[32];
    ty_time_format_rfc3339(ty_time_now_ms(), ts, sizeof ts);
    json_t *line = json_pack("{s:s, s:s, s:s}", "ts", ts, "level",
                             level_names[level < 0 || level > 3 ? 3 : level], "msg", msg);
    if (!line) {
        json_decref(fields);
        return;
    }
    if (json_is_object(fields))
        json_object_update_missing(line, fields);
    json_decref(fields);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (!text)
        return;
    size_t n = strlen(text);
    text[n] = '\n'; /* replace the NUL: one write() carries the whole line */
    ssize_t w = write(STDERR_FILENO, text, n + 1);
    (void)w;
    free(text);
}
