/*
 * fk_logs.c - pods' logs as the kubelet keeps and serves them (pods/log).
 *
 * The kubelet's container runtime writes each line of a container's output with the time it
 * was written; pods/log hands the lines back, with timestamps=true prefixed by that time in
 * RFC 3339 with nine fraction digits and a space ("2026-11-26T09:35:23.123456789Z text").
 * Here a pod's log (fk_store.logs, "ns/name") is stored in that prefixed form; the time of a
 * line is when a test wrote its first byte through /fake/ (strictly increasing, so that no
 * two lines of the fake share one). A request is answered as the kubelet answers it:
 *   tailLines=N   the last N lines
 *   sinceTime=T   the lines written at or after T; the apiserver passes T on to the kubelet
 *                 in whole seconds (RFC 3339 without a fraction), so the lines of T's second
 *                 written before T come too
 *   timestamps    the prefix kept
 *   limitBytes=N  at most N bytes of the answer (prefixes counted)
 *   follow=true   then the lines written later, until the container ends or the pod goes
 */
#include "tests/support/fake_kube/fk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TS_LEN 30 /* "2026-11-26T09:35:23.123456789Z" */

static void ts_make(fk_store *st, char out[TS_LEN + 1])
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (ns <= st->log_last_ns)
        ns = st->log_last_ns + 1;
    st->log_last_ns = ns;
    time_t sec = (time_t)(ns / 1000000000);
    struct tm tm;
    char buf[64];
    gmtime_r(&sec, &tm);
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ns % 1000000000));
    memcpy(out, buf, TS_LEN);
    out[TS_LEN] = '\0';
}

/* The text of a stored log without its prefixes (new). */
static char *plain(const char *stored, size_t *len)
{
    size_t n = strlen(stored), o = 0;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    int start = 1;
    for (size_t i = 0; i < n;) {
        if (start && n - i > TS_LEN) {
            i += TS_LEN + 1;
            start = 0;
            continue;
        }
        out[o++] = stored[i];
        start = stored[i++] == '\n';
    }
    out[o] = '\0';
    *len = o;
    return out;
}

void fk_log_write(fk_store *st, const char *key, const char *data, size_t len, int replace)
{
    const char *old = json_string_value(json_object_get(st->logs, key));
    size_t olen = old ? strlen(old) : 0;
    if (replace && old) {
        /* A text that extends the log appends its new part; any other replaces it. */
        size_t plen = 0;
        char *p = plain(old, &plen);
        if (p && plen <= len && !memcmp(p, data, plen)) {
            data += plen;
            len -= plen;
        } else {
            olen = 0;
        }
        free(p);
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    char *text = malloc(olen + len + lines * (TS_LEN + 1) + 1);
    if (!text)
        return;
    memcpy(text, old ? old : "", olen);
    size_t o = olen;
    int start = olen == 0 || text[olen - 1] == '\n';
    for (size_t i = 0; i < len; i++) {
        if (start) {
            char ts[TS_LEN + 1];
            ts_make(st, ts);
            memcpy(text + o, ts, TS_LEN);
            text[o + TS_LEN] = ' ';
            o += TS_LEN + 1;
        }
        text[o++] = data[i];
        start = data[i] == '\n';
    }
    text[o] = '\0';
    json_object_set_new(st->logs, key, json_stringn(text, o));
    free(text);
}

/* Seconds since the epoch of a line's prefix; -1 when it has none. */
static int64_t line_sec(const char *p, size_t n)
{
    struct tm tm = {0};
    if (n < TS_LEN || sscanf(p, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                             &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

int fk_log_parse_since(const char *v, int64_t *since_s)
{
    struct tm tm = {0};
    int n = 0;
    if (sscanf(v, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    const char *rest = v + n;
    if (*rest == '.') {
        rest++;
        if (*rest < '0' || *rest > '9')
            return -1;
        while (*rest >= '0' && *rest <= '9')
            rest++;
    }
    long off = 0;
    if (!strcmp(rest, "Z") || !strcmp(rest, "z")) {
        off = 0;
    } else if ((rest[0] == '+' || rest[0] == '-' || rest[0] == ' ') && strlen(rest) == 6 &&
               rest[3] == ':') {
        /* A '+' not escaped in a query reads as a space. */
        off = (strtol(rest + 1, NULL, 10) * 60 + strtol(rest + 4, NULL, 10)) * 60;
        if (rest[0] == '-')
            off = -off;
    } else {
        return -1;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *since_s = (int64_t)timegm(&tm) - off; /* the fraction goes, as the apiserver drops it */
    return 0;
}

size_t fk_log_tail_start(const char *stored, long tail)
{
    size_t n = strlen(stored);
    if (tail < 0)
        return 0;
    if (tail == 0)
        return n;
    long seen = 0;
    for (size_t i = n; i-- > 0;)
        if (stored[i] == '\n' && i + 1 < n && ++seen == tail)
            return i + 1;
    return 0;
}

/* The kubelet's kubecontainer.MaxContainerTerminationMessageLogLines and ...LogLength. */
#define TERMINATION_LINES 80
#define TERMINATION_BYTES 2048

char *fk_log_termination_message(fk_store *st, const char *key)
{
    const char *stored = json_string_value(json_object_get(st->logs, key));
    if (!stored || !*stored)
        return NULL;
    size_t len = 0;
    char *text = plain(stored + fk_log_tail_start(stored, TERMINATION_LINES), &len);
    if (text && len > TERMINATION_BYTES) /* a ring of that size keeps the end */
        memmove(text, text + len - TERMINATION_BYTES, TERMINATION_BYTES + 1);
    return text;
}

char *fk_log_render(const char *stored, size_t from, size_t to, int at_start,
                    const fk_log_opts *o, size_t *len)
{
    char *out = malloc(to - from + 1);
    size_t w = 0;
    if (!out)
        return NULL;
    for (size_t i = from; i < to;) {
        const char *nl = memchr(stored + i, '\n', to - i);
        size_t end = nl ? (size_t)(nl - stored) + 1 : to;
        const char *p = stored + i;
        size_t n = end - i;
        if (at_start && n > TS_LEN) {
            if (o->since_s != INT64_MIN && line_sec(p, n) < o->since_s) {
                i = end;
                continue;
            }
            if (!o->timestamps) {
                p += TS_LEN + 1;
                n -= TS_LEN + 1;
            }
        }
        memcpy(out + w, p, n);
        w += n;
        at_start = nl != NULL;
        i = end;
    }
    out[w] = '\0';
    *len = w;
    return out;
}
