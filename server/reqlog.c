/*
 * reqlog.c - see reqlog.h.
 */
#include "server/reqlog.h"

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
    if (!err)
        err = ty_buf_puts(&b, "}\n");
    size_t n = err ? 0 : b.len;
    if (n)
        memcpy(buf, b.data, n + 1);
    ty_buf_free(&b);
    return n;
}

void reqlog_write(const reqlog_entry *e)
{
    /* Worst case: 6 bytes per escaped byte of the path plus the other fields. */
    char buf[6 * REQLOG_MAX_PATH + 2048];
    if (!ty_log_enabled(TY_LOG_INFO))
        return;
    size_t n = reqlog_format(e, (long long)ty_time_now_ms(), buf, sizeof buf);
    if (n) {
        ssize_t w = write(STDERR_FILENO, buf, n);
        (void)w;
    }
}
