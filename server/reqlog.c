/*
 * reqlog.c - see reqlog.h.
 */
#include "server/reqlog.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/ty_log.h"
#include "common/ty_time.h"

/* Output cursor over a fixed buffer; `ok` turns 0 once something did not fit. */
typedef struct out {
    char *p, *end;
    int ok;
} out;

static void put(out *o, const char *s, size_t n)
{
    if (!o->ok || (size_t)(o->end - o->p) < n) {
        o->ok = 0;
        return;
    }
    memcpy(o->p, s, n);
    o->p += n;
}

static void puts_lit(out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t need;
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        need = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        need = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        need = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF are invalid. */
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

/* A JSON string of s, at most max bytes of it. */
static void put_str(out *o, const char *s, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    if (n > max)
        n = max;
    put(o, "\"", 1);
    size_t i = 0;
    while (i < n && o->ok) {
        size_t run = i;
        /* Copy plain ASCII in one go. */
        while (run < n && u[run] >= 0x20 && u[run] < 0x80 && u[run] != '"' && u[run] != '\\')
            run++;
        if (run > i) {
            put(o, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(o, esc, 2);
            i++;
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(o, esc, 6);
            i++;
        } else {
            size_t k = utf8_len(u + i, n - i);
            if (k) {
                put(o, s + i, k);
                i += k;
            } else {
                puts_lit(o, "\\ufffd");
                i++;
            }
        }
    }
    put(o, "\"", 1);
}

static void put_fmt_num(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put_fmt_num(out *o, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        o->ok = 0;
        return;
    }
    put(o, tmp, (size_t)n);
}

size_t reqlog_format(const reqlog_entry *e, long long now_ms, char *buf, size_t len)
{
    char ts[32];
    out o = {buf, buf + (len ? len - 1 : 0), len > 0};
    ty_time_format_rfc3339(now_ms, ts, sizeof ts);
    puts_lit(&o, "{\"ts\":\"");
    puts_lit(&o, ts);
    puts_lit(&o, "\",\"level\":\"info\",\"msg\":\"request\",\"request_id\":");
    put_str(&o, e->request_id, 128);
    puts_lit(&o, ",\"method\":");
    put_str(&o, e->method, 32);
    puts_lit(&o, ",\"path\":");
    put_str(&o, e->path, REQLOG_MAX_PATH);
    puts_lit(&o, ",\"route\":");
    put_str(&o, e->route, 256);
    put_fmt_num(&o, ",\"status\":%u,\"duration_ms\":%.3f,\"bytes\":%zu,\"principal\":", e->status,
                e->duration_ms, e->bytes);
    if (e->principal)
        put_str(&o, e->principal, 256);
    else
        puts_lit(&o, "null");
    if (e->aborted)
        puts_lit(&o, ",\"aborted\":true");
    puts_lit(&o, "}\n");
    if (!o.ok)
        return 0;
    *o.p = '\0';
    return (size_t)(o.p - buf);
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
