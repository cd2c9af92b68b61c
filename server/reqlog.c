/*
 * reqlog.c - see reqlog.h.
 */
#include "server/reqlog.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/ty_json.h"
#include "common/ty_log.h"
#include "common/ty_time.h"

size_t reqlog_format(const reqlog_entry *e, long long now_ms, char *buf, size_t len)
{
    char ts[32];
    ty_buf b;
    if (len == 0)
        return 0;
    /* The buffer grows up to len - 1 bytes: the caller's array plus its NUL. */
    ty_buf_init(&b, len - 1);
    ty_time_format_rfc3339(now_ms, ts, sizeof ts);
    ty_err err = ty_buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"info\",\"msg\":\"request\","
                                   "\"request_id\":", ts);
    if (!err)
        err = ty_json_put_string(&b, e->request_id, 128);
    if (!err)
        err = ty_buf_puts(&b, ",\"method\":");
    if (!err)
        err = ty_json_put_string(&b, e->method, 32);
    if (!err)
        err = ty_buf_puts(&b, ",\"path\":");
    if (!err)
        err = ty_json_put_string(&b, e->path, REQLOG_MAX_PATH);
    if (!err)
        err = ty_buf_puts(&b, ",\"route\":");
    if (!err)
        err = ty_json_put_string(&b, e->route, 256);
    if (!err)
        err = ty_buf_printf(&b, ",\"status\":%u,\"duration_ms\":%.3f,\"bytes\":%zu,\"principal\":",
                            e->status, e->duration_ms, e->bytes);
    if (!err)
        err = e->principal ? ty_json_put_string(&b, e->principal, 256) : ty_buf_puts(&b, "null");
    if (!err && e->aborted)
        err = ty_buf_puts(&b, ",\"aborted\":true");
    if (!err && e->suppressed)
        err = ty_buf_printf(&b, ",\"suppressed\":%llu", e->suppressed);
    if (!err)
        err = ty_buf_puts(&b, "}\n");
    size_t n = err ? 0 : b.len;
    if (n)
        memcpy(buf, b.data, n + 1);
    ty_buf_free(&b);
    return n;
}

/* The last line written per (route, status) of a refusal; a collision takes the slot over. */
typedef struct quiet_slot {
    char route[128];
    unsigned status;    /* 0: empty */
    long long last_ms;
    unsigned long long suppressed;
} quiet_slot;
static quiet_slot quiet[REQLOG_QUIET_SLOTS];
static pthread_mutex_t quiet_mu = PTHREAD_MUTEX_INITIALIZER;

int reqlog_quiet_due(const char *route, unsigned status, long long now_ms,
                     unsigned long long *suppressed)
{
    int due = 1;
    *suppressed = 0;
    if (status != 401 && status != 429)
        return 1;
    uint64_t h = 1469598103934665603ULL ^ status;
    for (const char *p = route; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    pthread_mutex_lock(&quiet_mu);
    quiet_slot *q = &quiet[h % REQLOG_QUIET_SLOTS];
    if (q->status != status || strncmp(q->route, route, sizeof q->route - 1) != 0) {
        q->status = status;
        snprintf(q->route, sizeof q->route, "%s", route);
        q->suppressed = 0;
    } else if (now_ms - q->last_ms >= 1000 || now_ms < q->last_ms) {
        *suppressed = q->suppressed;
        q->suppressed = 0;
    } else {
        q->suppressed++;
        due = 0;
    }
    if (due)
        q->last_ms = now_ms;
    pthread_mutex_unlock(&quiet_mu);
    return due;
}

void reqlog_write(const reqlog_entry *e)
{
    /* Worst case: 6 bytes per escaped byte of the path plus the other fields. */
    char buf[6 * REQLOG_MAX_PATH + 2048];
    reqlog_entry line;
    if (!ty_log_enabled(TY_LOG_INFO))
        return;
    line = *e;
    if (!reqlog_quiet_due(e->route ? e->route : "", e->status,
                          (long long)(ty_time_mono_ns() / 1000000u), &line.suppressed))
        return;
    size_t n = reqlog_format(&line, (long long)ty_time_now_ms(), buf, sizeof buf);
    if (n) {
        ssize_t w = write(STDERR_FILENO, buf, n);
        (void)w;
    }
}
