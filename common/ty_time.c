#include "common/ty_time.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t ty_time_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t ty_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char *ty_time_format_rfc3339(int64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)secs * 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char date[24];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", date, frac);
    return buf;
}

/* Reads exactly n digits. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

int ty_time_parse_rfc3339(const char *s, int64_t *ms)
{
    int Y, M, D, h, m, sec, frac_ms = 0;
    const char *p = s;
    if (digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' ||
        digits(&p, 2, &D) || (*p != 'T' && *p != 't' && *p != ' '))
        return -1;
    p++;
    if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m) || *p++ != ':' ||
        digits(&p, 2, &sec))
        return -1;
    if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return -1;
    if (*p == '.') {
        p++;
        int n = 0;
        while (isdigit((unsigned char)*p)) {
            if (n < 3)
                frac_ms = frac_ms * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0)
            return -1;
        for (; n < 3; n++)
            frac_ms *= 10;
    }
    int offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59)
            return -1;
        offset_min = sign * (oh * 60 + om);
    } else {
        return -1;
    }
    if (*p)
        return -1;
    /* Days from civil (Howard Hinnant's algorithm), no timezone state involved. */
    int y = Y - (M <= 2);
    int era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (unsigned)((153 * (M + (M > 2 ? -3 : 9)) + 2) / 5 + D - 1);
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = (int64_t)era * 146097 + (int64_t)doe - 719468;
    int64_t t = ((days * 24 + h) * 60 + m) * 60 + sec - (int64_t)offset_min * 60;
    *ms = t * 1000 + frac_ms;
    return 0;
}
