/*
 * kube_logs.c - pods' logs streamed into the server's log files (kube_logs.h).
 *
 * A stream is keyed by (job, attempt, rank) in a hash table under `mu`; kube_logs_pod() creates
 * or marks entries and wakes the thread. Only the thread opens, moves and frees transfers and
 * files: the curl callbacks, the parser and the writer are the thread's alone, so `mu` is held
 * only around the table and the flags the informers set (ended, gone).
 *
 * The parser reads "<RFC3339Nano timestamp> <line>\n" (timestamps=true) and writes the line.
 * The resume state, written to rank-<r>.log.since after every chunk, is:
 *
 *   last, count   the timestamp of the last line begun, and how many lines begun carried it
 *   part          bytes written of that line when it is not finished yet, else -1
 *   size          the bytes of the current segment once those were written
 *   complete      1 once the container ended and its log was read to the end
 *
 * A new transfer asks sinceTime=last (the API server passes on whole seconds, so earlier lines
 * of that second come back too): lines before last are dropped, the first count - 1 lines at
 * last are dropped, and of the count-th the first `part` bytes (all of it when part is -1);
 * from the first line written on, everything is new. A writer opened after a restart cuts the
 * segment back to `size`: bytes written after the last record are fetched again.
 */
#define _GNU_SOURCE /* timegm */
#include "scheduler/kube/kube_logs.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_hash.h"
#include "common/ty_log.h"
#include "common/ty_mem.h"
#include "common/ty_thread.h"
#include "common/ty_time.h"
#include "scheduler/ranklog.h"

#define KL_BUCKETS 1024
#define KL_TS_MAX 48                  /* the longest timestamp read; longer is not one */
#define KL_RECV_BUFFER (4 * 1024)     /* a transfer's receive buffer: one callback's most */
#define KL_SIDE_SUFFIX ".since"
#define KL_SIDE_LEN 112
#define KL_REOPEN_MS 1000             /* a body that ended while the container runs */
#define KL_BACKOFF_MAX_MS 30000
#define KL_ENDED_TRIES 8              /* failures before an ended pod's log is given up */
#define KL_PRUNED_RING 64
#define KL_POLL_MS 1000
#define KL_TRIM_CHURN 64              /* streams opened or ended before memory is trimmed */
#define KL_WARN_EVERY_MS 10000        /* at most one line a while about streams that fail */

#define LABEL_JOB_ID "trainyard.io/job-id"
#define LABEL_ATTEMPT "trainyard.io/attempt"
#define ANN_INDEX "batch.kubernetes.io/job-completion-index"
#define ANN_VC_INDEX "volcano.sh/task-index"

typedef struct kts {
    int64_t sec;
    int32_t nsec;
} kts;

typedef enum line_mode { LINE_WRITE = 0, LINE_SKIP, LINE_SKIP_N } line_mode;

typedef struct kstream {
    struct kstream *next;         /* hash chain */
    struct kube_logs *kl;
    char job[32];
    int attempt, rank;
    char pod[254];
    char container[64];
    /* Under mu: */
    int ended;                    /* the container ended (or never will run again) */
    int gone;                     /* the pod was deleted */
    /* The thread's: */
    int open;                     /* a transfer is in the multi handle */
    int64_t retry_at_ms;          /* monotonic: when to open; 0 for now */
    int failures;
    int warned;
    ranklog_writer *w;
    int side_fd;
    int have_last;
    kts last;
    long count;
    long part;
    int complete;
    int dirty;                    /* the state changed since it was written */
    /* The transfer's: */
    CURL *h;
    struct curl_slist *hdrs;
    char curl_msg[CURL_ERROR_SIZE];
    long code;
    char errbody[512];
    size_t errlen;
    int synced;                   /* a line of this transfer was written: the rest is new */
    long eq_seen;                 /* lines at `last` seen before that */
    char tsb[KL_TS_MAX];
    size_t tslen;
    int in_line;                  /* past the timestamp */
    line_mode mode;
    long skip_n;
} kstream;

struct kube_logs {
    ty_kclient *c;
    char ns[64];
    char dir[PATH_MAX - 96];
    uint64_t rank_limit, job_limit;
    CURLM *m;
    int ep;                       /* epoll of the transfers' sockets and wake_fd */
    int wake_fd;                  /* an eventfd: kube_logs_pod() and free() wake the thread */
    int64_t timer_at_ms;          /* monotonic: when curl wants its timeout action; -1: never */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;           /* the table, every stream's ended and gone, the counters */
    int quit;
    kstream *table[KL_BUCKETS];
    size_t nstreams, nopen;
    int64_t next_due_ms;          /* the earliest retry_at of a stream not open; 0: scan now */
    uint64_t opened, bytes, skipped, completed;
    struct {
        char job[32];
        int attempt;
    } pruned[KL_PRUNED_RING];
    size_t pruned_next;
    char out[2 * KL_RECV_BUFFER]; /* the thread's: what one callback writes */
    size_t outlen;
    size_t churn;                 /* the thread's: transfers started or ended since the last trim */
    int64_t warn_next_ms;         /* monotonic: when the next line about failing streams may go */
    size_t failing;               /* streams failed for the first time since the last such line */
};

static int64_t mono_ms(void)
{
    return (int64_t)(ty_time_mono_ns() / 1000000u);
}

static void fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, len, f, ap);
    va_end(ap);
    if (n < 0 && len)
        buf[0] = '\0';
}

/* ---- timestamps ---------------------------------------------------------------------------- */

static int digits(const char *p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

/* "2026-11-26T09:35:23.123456789Z" (or an offset for Z, any fraction, none); 0 when read. */
static int ts_parse(const char *s, size_t len, kts *out)
{
    int y, mo, d, h, mi, se;
    if (len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
        s[13] != ':' || s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) ||
        digits(s + 8, 2, &d) || digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) ||
        digits(s + 17, 2, &se))
        return -1;
    size_t i = 19;
    int32_t ns = 0;
    if (i < len && s[i] == '.') {
        int nd = 0;
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++)
            if (nd < 9)
                ns = ns * 10 + (s[i] - '0');
        if (nd == 0)
            return -1;
        for (; nd < 9; nd++)
            ns *= 10;
    }
    int off = 0;
    if (i + 1 == len && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i + 6 == len && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
        int oh, om;
        if (digits(s + i + 1, 2, &oh) || digits(s + i + 4, 2, &om))
            return -1;
        off = (oh * 60 + om) * 60 * (s[i] == '-' ? -1 : 1);
        i += 6;
    }
    if (i != len || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return -1;
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi, .tm_sec = se};
    out->sec = (int64_t)timegm(&tm) - off;
    out->nsec = ns;
    return 0;
}

static int ts_cmp(kts a, kts b)
{
    if (a.sec != b.sec)
        return a.sec < b.sec ? -1 : 1;
    return a.nsec < b.nsec ? -1 : a.nsec > b.nsec;
}

/* RFC3339Nano in UTC, as the API writes it (trailing zeros of the fraction dropped). */
static void ts_format(kts t, char *buf, size_t len)
{
    time_t sec = (time_t)t.sec;
    struct tm tm;
    char frac[16] = "";
    gmtime_r(&sec, &tm);
    if (t.nsec) {
        fmt(frac, sizeof frac, ".%09d", (int)t.nsec);
        size_t n = strlen(frac);
        while (n > 1 && frac[n - 1] == '0')
            frac[--n] = '\0';
    }
    fmt(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", tm.tm_year + 1900, tm.tm_mon + 1,
        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

/* ---- paths and the resume state ------------------------------------------------------------ */

int kube_logs_path(const kube_logs *kl, const char *job_id, int attempt, int rank, char *buf,
                   size_t len)
{
    int n = snprintf(buf, len, "%s/%s/a%d/rank-%d.log", kl->dir, job_id, attempt, rank);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int kube_logs_attempt_dir(const kube_logs *kl, const char *job_id, int attempt, char *buf,
                          size_t len)
{
    int n = snprintf(buf, len, "%s/%s/a%d", kl->dir, job_id, attempt);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

typedef struct side_state {
    int have_last;
    kts last;
    long count, part;
    int64_t size;                 /* -1: not recorded */
    int complete;
} side_state;

static void side_parse(int fd, side_state *s)
{
    char buf[KL_SIDE_LEN + 1];
    long long sec, size;
    long nsec, count, part;
    int have, complete;
    memset(s, 0, sizeof *s);
    s->part = -1;
    s->size = -1;
    ssize_t n = fd >= 0 ? pread(fd, buf, KL_SIDE_LEN, 0) : -1;
    if (n <= 0 || (size_t)n >= sizeof buf)
        return;
    buf[n] = '\0';
    if (sscanf(buf, "%d %lld %ld %ld %ld %lld %d", &have, &sec, &nsec, &count, &part, &size,
               &complete) != 7 || nsec < 0 || nsec > 999999999 || count < 0 || part < -1 ||
        size < 0)
        return;
    s->have_last = have != 0;
    s->last.sec = sec;
    s->last.nsec = (int32_t)nsec;
    s->count = count;
    s->part = part;
    s->size = size;
    s->complete = complete != 0;
}

/* Rewrites the state in place, fixed width. */
static void side_write(kube_logs *kl, kstream *s)
{
    char buf[KL_SIDE_LEN + 1];
    (void)kl;
    if (s->side_fd < 0)
        return;
    int n = snprintf(buf, sizeof buf, "%d %20lld %9ld %10ld %10ld %20llu %d\n", s->have_last,
                     (long long)s->last.sec, (long)s->last.nsec, s->count, s->part,
                     (unsigned long long)ranklog_writer_size(s->w), s->complete);
    if (n > 0 && (size_t)n < sizeof buf && pwrite(s->side_fd, buf, (size_t)n, 0) == n)
        s->dirty = 0;
}

/* ---- the table ----------------------------------------------------------------------------- */

static size_t bucket(const char *job, int attempt, int rank)
{
    uint64_t h = ty_fnv1a_str(job);
    h = ty_fnv1a(h, &attempt, sizeof attempt);
    h = ty_fnv1a(h, &rank, sizeof rank);
    return (size_t)(h % KL_BUCKETS);
}

static kstream *find(kube_logs *kl, const char *job, int attempt, int rank)
{
    for (kstream *s = kl->table[bucket(job, attempt, rank)]; s; s = s->next)
        if (s->attempt == attempt && s->rank == rank && !strcmp(s->job, job))
            return s;
    return NULL;
}

/* Frees a stream whose transfer is not open; unlinks it first. Under mu. */
static void drop(kube_logs *kl, kstream *s)
{
    for (kstream **pp = &kl->table[bucket(s->job, s->attempt, s->rank)]; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            kl->nstreams--;
            break;
        }
    if (s->dirty)
        side_write(kl, s);
    ranklog_writer_close(s->w);
    if (s->side_fd >= 0)
        close(s->side_fd);
    free(s);
}

/* ---- the pods ------------------------------------------------------------------------------ */

static const char *label(const json_t *pod, const char *key)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(pod, "metadata"), "labels"), key));
}

static int pod_rank(const json_t *pod)
{
    const json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const char *idx = json_string_value(json_object_get(ann, ANN_INDEX));
    if (!idx)
        idx = json_string_value(json_object_get(ann, ANN_VC_INDEX));
    if (!idx)
        idx = label(pod, ANN_INDEX);
    if (!idx || !*idx)
        return -1;
    char *end;
    long r = strtol(idx, &end, 10);
    return *end || r < 0 || r > 100000 ? -1 : (int)r;
}

/* A job id as the store makes them: 26 letters and digits (it names a directory). */
static int is_job_id(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n != 26)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= 'a' && s[i] <= 'z')))
            return 0;
    return 1;
}

/* Wakes the thread from its wait. */
static void wake(kube_logs *kl)
{
    uint64_t one = 1;
    ssize_t n = write(kl->wake_fd, &one, sizeof one);
    (void)n; /* a full counter wakes the thread as well */
}

void kube_logs_pod(kube_logs *kl, const json_t *pod, int deleted)
{
    if (!kl || !pod)
        return;
    const char *job = label(pod, LABEL_JOB_ID), *att = label(pod, LABEL_ATTEMPT);
    const char *name = json_string_value(
        json_object_get(json_object_get(pod, "metadata"), "name"));
    int rank = pod_rank(pod);
    char *end = NULL;
    long attempt = att ? strtol(att, &end, 10) : 0;
    if (!is_job_id(job) || !end || *end || attempt < 1 || attempt > 1000000 || rank < 0 ||
        !name || strlen(name) >= sizeof ((kstream *)0)->pod)
        return;
    const json_t *status = json_object_get(pod, "status");
    const json_t *cs = json_array_get(json_object_get(status, "containerStatuses"), 0);
    const json_t *state = json_object_get(cs, "state");
    int running = json_object_get(state, "running") != NULL;
    int terminated = json_object_get(state, "terminated") != NULL;
    const char *phase = json_string_value(json_object_get(status, "phase"));
    int ended = terminated || (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
    const char *cname = json_string_value(json_object_get(
        json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0), "name"));
    if (!cname)
        cname = json_string_value(json_object_get(cs, "name"));

    pthread_mutex_lock(&kl->mu);
    kstream *s = find(kl, job, (int)attempt, rank);
    if (s && strcmp(s->pod, name)) {
        /* Another pod of the same index (the Job controller replaced it): the rank's log
         * is its first pod's, as the backend counts it. */
        pthread_mutex_unlock(&kl->mu);
        return;
    }
    if (!s && (running || terminated) && cname && strlen(cname) < sizeof s->container &&
        !kl->quit) {
        s = calloc(1, sizeof *s);
        if (s) {
            fmt(s->job, sizeof s->job, "%s", job);
            s->attempt = (int)attempt;
            s->rank = rank;
            fmt(s->pod, sizeof s->pod, "%s", name);
            fmt(s->container, sizeof s->container, "%s", cname);
            s->kl = kl;
            s->side_fd = -1;
            s->part = -1;
            size_t b = bucket(job, (int)attempt, rank);
            s->next = kl->table[b];
            kl->table[b] = s;
            kl->nstreams++;
            kl->next_due_ms = 0;
        }
    }
    if (s) {
        s->ended |= ended;
        s->gone |= deleted;
        if (!s->open)
            kl->next_due_ms = 0;
    }
    pthread_mutex_unlock(&kl->mu);
    if (s)
        wake(kl);
}

kube_log_state kube_logs_state(kube_logs *kl, const char *job_id, int attempt, int rank)
{
    kube_log_state st = KUBE_LOG_IDLE;
    if (!kl || !job_id)
        return st;
    pthread_mutex_lock(&kl->mu);
    kstream *s = find(kl, job_id, attempt, rank);
    if (s)
        st = s->ended || s->gone ? KUBE_LOG_DRAINING : KUBE_LOG_LIVE;
    pthread_mutex_unlock(&kl->mu);
    return st;
}

void kube_logs_stats_get(kube_logs *kl, kube_logs_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!kl)
        return;
    pthread_mutex_lock(&kl->mu);
    out->streams = kl->nstreams;
    out->open = kl->nopen;
    out->opened = kl->opened;
    out->bytes = kl->bytes;
    out->skipped_lines = kl->skipped;
    out->completed = kl->completed;
    pthread_mutex_unlock(&kl->mu);
}

/* ---- the parser (the thread's) ------------------------------------------------------------- */

static void out_flush(kube_logs *kl, kstream *s)
{
    if (kl->outlen == 0)
        return;
    (void)ranklog_writer_write(s->w, kl->out, kl->outlen);
    pthread_mutex_lock(&kl->mu);
    kl->bytes += kl->outlen;
    pthread_mutex_unlock(&kl->mu);
    kl->outlen = 0;
    s->dirty = 1;
}

static void out_put(kube_logs *kl, kstream *s, const char *p, size_t n)
{
    while (n > 0) {
        if (kl->outlen == sizeof kl->out)
            out_flush(kl, s);
        size_t k = sizeof kl->out - kl->outlen < n ? sizeof kl->out - kl->outlen : n;
        memcpy(kl->out + kl->outlen, p, k);
        kl->outlen += k;
        p += k;
        n -= k;
    }
}

/* A line begins with timestamp t (NULL: it has none): how it is treated. */
static void line_begin(kube_logs *kl, kstream *s, const kts *t)
{
    s->in_line = 1;
    s->mode = LINE_WRITE;
    if (t && !s->synced && s->have_last) {
        int c = ts_cmp(*t, s->last);
        if (c < 0) {
            s->mode = LINE_SKIP;
        } else if (c == 0 && ++s->eq_seen < s->count) {
            s->mode = LINE_SKIP;
        } else if (c == 0 && s->eq_seen == s->count) {
            /* The last line begun: its first `part` bytes are kept (all of it when done). */
            if (s->part < 0) {
                s->mode = LINE_SKIP;
            } else {
                s->mode = LINE_SKIP_N;
                s->skip_n = s->part;
                s->synced = 1;
            }
        }
        if (s->mode == LINE_SKIP) {
            pthread_mutex_lock(&kl->mu);
            kl->skipped++;
            pthread_mutex_unlock(&kl->mu);
            return;
        }
        if (s->mode == LINE_SKIP_N)
            return;
    }
    s->synced = 1;
    if (t) {
        if (s->have_last && ts_cmp(*t, s->last) == 0) {
            s->count++;
        } else {
            s->last = *t;
            s->count = 1;
            s->have_last = 1;
        }
    }
    s->part = 0;
    s->dirty = 1;
}

/* The bytes of a line's text (no newline among them). */
static void line_text(kube_logs *kl, kstream *s, const char *p, size_t n)
{
    if (s->mode == LINE_SKIP)
        return;
    if (s->mode == LINE_SKIP_N) {
        size_t k = (size_t)s->skip_n < n ? (size_t)s->skip_n : n;
        s->skip_n -= (long)k;
        p += k;
        n -= k;
        if (n == 0)
            return;
        s->mode = LINE_WRITE;
    }
    out_put(kl, s, p, n);
    s->part += (long)n;
}

static void line_end(kube_logs *kl, kstream *s)
{
    if (s->mode != LINE_SKIP) {
        out_put(kl, s, "\n", 1);
        s->part = -1;
        s->dirty = 1;
    }
    s->in_line = 0;
    s->tslen = 0;
}

static void parse(kube_logs *kl, kstream *s, const char *p, size_t n)
{
    while (n > 0) {
        if (!s->in_line) {
            /* The timestamp, up to its space. */
            while (n > 0 && s->tslen < KL_TS_MAX && *p != ' ' && *p != '\n')
                s->tsb[s->tslen++] = *p++, n--;
            if (n == 0)
                return;
            kts t;
            if (*p == ' ' && ts_parse(s->tsb, s->tslen, &t) == 0) {
                p++, n--;
                line_begin(kl, s, &t);
            } else {
                /* Not a timestamp: the bytes are the line's. */
                line_begin(kl, s, NULL);
                line_text(kl, s, s->tsb, s->tslen);
            }
            s->tslen = 0;
            continue;
        }
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        line_text(kl, s, p, k);
        p += k;
        n -= k;
        if (nl) {
            line_end(kl, s);
            p++, n--;
        }
    }
}

/* ---- transfers (the thread's) -------------------------------------------------------------- */

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    kstream *s = ud;
    size_t len = size * nmemb;
    if (s->code == 0)
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->code);
    if (s->code < 200 || s->code >= 300) {
        /* An error's Status, kept for the message. */
        size_t room = sizeof s->errbody - 1 - s->errlen, k = room < len ? room : len;
        memcpy(s->errbody + s->errlen, p, k);
        s->errlen += k;
        s->errbody[s->errlen] = '\0';
        return len;
    }
    parse(s->kl, s, p, len);
    out_flush(s->kl, s);
    if (s->dirty)
        side_write(s->kl, s);
    return len;
}

/* Opens the files of s: 1 when its log wants a transfer, 0 when it is complete (drop it). */
static int stream_files(kube_logs *kl, kstream *s)
{
    char path[PATH_MAX], side[PATH_MAX + 8];
    if (s->w)
        return !s->complete;
    if (kube_logs_path(kl, s->job, s->attempt, s->rank, path, sizeof path) != 0)
        return 0;
    fmt(side, sizeof side, "%s%s", path, KL_SIDE_SUFFIX);
    side_state st;
    int fd = open(side, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        side_parse(fd, &st);
        close(fd);
        if (st.complete)
            return 0;
    } else {
        side_parse(-1, &st);
    }
    /* Before the first log of attempt n >= 2: the older attempts fit in the job's total. */
    if (s->attempt >= 2 && fd < 0) {
        int seen = 0;
        for (size_t i = 0; i < KL_PRUNED_RING && !seen; i++)
            seen = kl->pruned[i].attempt == s->attempt && !strcmp(kl->pruned[i].job, s->job);
        if (!seen) {
            char jdir[PATH_MAX];
            ranklog_prune_result res;
            fmt(jdir, sizeof jdir, "%s/%s", kl->dir, s->job);
            ty_err e = ranklog_prune_job(jdir, s->attempt, kl->job_limit, &res);
            if (e != TY_OK)
                TY_LOG(TY_LOG_WARN, "kube logs: cannot prune the logs of previous attempts",
                       "{s:s,s:i,s:s}", "job_id", s->job, "attempt", s->attempt, "error",
                       ty_strerror(e));
            size_t k = kl->pruned_next++ % KL_PRUNED_RING;
            fmt(kl->pruned[k].job, sizeof kl->pruned[k].job, "%s", s->job);
            kl->pruned[k].attempt = s->attempt;
        }
    }
    ty_err e = ranklog_writer_open(path, kl->rank_limit, st.size, &s->w);
    if (e == TY_OK && (s->side_fd = open(side, O_RDWR | O_CREAT | O_CLOEXEC, 0640)) < 0)
        e = TY_EIO;
    if (e != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "kube logs: cannot open a rank's log", "{s:s,s:s}", "path", path,
               "error", ty_strerror(e));
        return 0;
    }
    s->have_last = st.have_last;
    s->last = st.last;
    s->count = st.count;
    s->part = st.part;
    s->dirty = 1;
    side_write(kl, s);
    return 1;
}

static int64_t backoff(int failures)
{
    int64_t d = 500;
    for (int i = 1; i < failures && d < KL_BACKOFF_MAX_MS; i++)
        d *= 2;
    return d < KL_BACKOFF_MAX_MS ? d : KL_BACKOFF_MAX_MS;
}

/* Starts the transfer of s: 1 when started or waiting for a token, 0 to drop s. Under mu. */
static int stream_open(kube_logs *kl, kstream *s, int64_t now)
{
    char path[1024], since[64] = "", err[256];
    int64_t wait = 0;
    if (!ty_kclient_try_token(kl->c, &wait)) {
        s->retry_at_ms = now + wait;
        return 1;
    }
    if (s->have_last) {
        char t[48];
        ts_format(s->last, t, sizeof t);
        fmt(since, sizeof since, "&sinceTime=%s", t);
    }
    fmt(path, sizeof path,
        "/api/v1/namespaces/%s/pods/%s/log?container=%s&follow=true&timestamps=true%s", kl->ns,
        s->pod, s->container, since);
    s->h = curl_easy_init();
    if (!s->h)
        return 0;
    if (ty_kclient_easy_get(kl->c, s->h, path, &s->hdrs, s->curl_msg, err, sizeof err) !=
        TY_OK) {
        TY_LOG(TY_LOG_WARN, "kube logs: cannot read a pod's log", "{s:s,s:s}", "pod", s->pod,
               "error", err);
        curl_easy_cleanup(s->h);
        s->h = NULL;
        s->failures++;
        s->retry_at_ms = now + backoff(s->failures);
        return 1;
    }
    s->code = 0;
    s->errlen = 0;
    s->errbody[0] = '\0';
    s->synced = 0;
    s->eq_seen = 0;
    s->tslen = 0;
    s->in_line = 0;
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, (char *)s);
    curl_easy_setopt(s->h, CURLOPT_BUFFERSIZE, (long)KL_RECV_BUFFER);
    /* No CURLOPT_PIPEWAIT: over plain HTTP/1.1 a transfer would wait for another's headers,
     * which a quiet log's answer may not send until its first line. Over TLS, ALPN says at
     * once whether a connection multiplexes, and later streams share an HTTP/2 one. */
    if (curl_multi_add_handle(kl->m, s->h) != CURLM_OK) {
        ty_kclient_easy_free(s->hdrs);
        s->hdrs = NULL;
        curl_easy_cleanup(s->h);
        s->h = NULL;
        return 0;
    }
    s->open = 1;
    kl->nopen++; /* under mu: the caller's */
    kl->opened++;
    kl->churn++;
    return 1;
}

/* The transfer of s ended with cc: what next. Under mu. */
static void stream_done(kube_logs *kl, kstream *s, CURLcode cc, int64_t now)
{
    long code = s->code;
    if (code == 0)
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
    ty_kclient_count_get(kl->c, code);
    curl_multi_remove_handle(kl->m, s->h);
    curl_easy_cleanup(s->h);
    s->h = NULL;
    ty_kclient_easy_free(s->hdrs);
    s->hdrs = NULL;
    s->open = 0;
    kl->nopen--;
    kl->churn++;
    int ok = cc == CURLE_OK && code >= 200 && code < 300;
    if (ok && s->ended) {
        s->complete = 1;
        s->dirty = 1;
        kl->completed++;
        drop(kl, s);
        return;
    }
    if (s->gone || code == 404) {
        drop(kl, s);
        return;
    }
    if (ok) {
        /* The body ended while the container runs (a broken or timed-out connection, or
         * its end not seen yet): go on from what was kept. */
        s->failures = 0;
        s->retry_at_ms = now + KL_REOPEN_MS;
        return;
    }
    s->failures++;
    /* A stream's first failure is told, in one line a while for all of them: when the API
     * server goes away, every followed pod fails at once (a line each was 1,000 lines). */
    if (!s->warned) {
        s->warned = 1;
        kl->failing++;
        if (now >= kl->warn_next_ms) {
            TY_LOG(TY_LOG_WARN, "kube logs: pods' log streams failed, retrying",
                   "{s:I,s:s,s:i,s:s}", "streams", (json_int_t)kl->failing, "pod", s->pod,
                   "code", (int)code,
                   "error", s->errlen ? s->errbody : s->curl_msg[0] ? s->curl_msg
                                                                : curl_easy_strerror(cc));
            kl->failing = 0;
            kl->warn_next_ms = now + KL_WARN_EVERY_MS;
        }
    }
    if (s->ended && s->failures >= KL_ENDED_TRIES) {
        drop(kl, s);
        return;
    }
    s->retry_at_ms = now + backoff(s->failures);
}

/* The streams not open whose time came: opened, or dropped. Under mu. */
static void open_due(kube_logs *kl)
{
    int64_t now = mono_ms(), next = 0;
    if (kl->next_due_ms && now < kl->next_due_ms)
        return;
    for (size_t b = 0; b < KL_BUCKETS; b++) {
        for (kstream *s = kl->table[b], *nx; s; s = nx) {
            nx = s->next;
            if (s->open)
                continue;
            if (s->retry_at_ms > now) {
                if (!next || s->retry_at_ms < next)
                    next = s->retry_at_ms;
                continue;
            }
            if (s->gone && !s->w) {
                drop(kl, s); /* never read, and no longer there to read */
                continue;
            }
            if (!stream_files(kl, s)) {
                drop(kl, s);
                continue;
            }
            if (!stream_open(kl, s, now)) {
                drop(kl, s);
                continue;
            }
            if (!s->open) {
                if (!next || s->retry_at_ms < next)
                    next = s->retry_at_ms;
            }
        }
    }
    kl->next_due_ms = next ? next : INT64_MAX;
}

/*
 * The transfers are driven through curl's socket interface: the thread waits on an epoll of
 * their sockets and curl handles only those that are ready, so that a line written to one log
 * costs the same with one stream open as with thousands (curl_multi_poll() and _perform()
 * look at every transfer each time).
 */
static int on_socket(CURL *h, curl_socket_t fd, int what, void *ud, void *sockp)
{
    kube_logs *kl = ud;
    (void)h;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(kl->ep, EPOLL_CTL_DEL, fd, NULL);
        curl_multi_assign(kl->m, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) |
                                       (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                             .data.fd = fd};
    if (sockp) {
        epoll_ctl(kl->ep, EPOLL_CTL_MOD, fd, &ev);
    } else if (epoll_ctl(kl->ep, EPOLL_CTL_ADD, fd, &ev) == 0 ||
               (errno == EEXIST && epoll_ctl(kl->ep, EPOLL_CTL_MOD, fd, &ev) == 0)) {
        curl_multi_assign(kl->m, fd, kl); /* any non-NULL pointer: the socket is in ep */
    }
    return 0;
}

static int on_timer(CURLM *m, long timeout_ms, void *ud)
{
    kube_logs *kl = ud;
    (void)m;
    kl->timer_at_ms = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    return 0;
}

/* The transfers curl says have ended. */
static void reap(kube_logs *kl)
{
    CURLMsg *msg;
    int left = 0;
    while ((msg = curl_multi_info_read(kl->m, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        kstream *s = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        CURLcode cc = msg->data.result;
        pthread_mutex_lock(&kl->mu);
        stream_done(kl, s, cc, mono_ms());
        pthread_mutex_unlock(&kl->mu);
    }
}

#define KL_EVENTS 64

static void *collector_main(void *arg)
{
    ty_thread_name("ty-kube-logs");
    kube_logs *kl = arg;
    struct epoll_event evs[KL_EVENTS];
    for (;;) {
        pthread_mutex_lock(&kl->mu);
        if (kl->quit) {
            pthread_mutex_unlock(&kl->mu);
            break;
        }
        open_due(kl);
        int64_t now = mono_ms();
        int wait = KL_POLL_MS;
        if (kl->next_due_ms != INT64_MAX && kl->next_due_ms - now < wait)
            wait = kl->next_due_ms > now ? (int)(kl->next_due_ms - now) : 0;
        pthread_mutex_unlock(&kl->mu);
        if (kl->timer_at_ms >= 0 && kl->timer_at_ms - now < wait)
            wait = kl->timer_at_ms > now ? (int)(kl->timer_at_ms - now) : 0;
        int n = epoll_wait(kl->ep, evs, KL_EVENTS, wait), running = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd == kl->wake_fd) {
                uint64_t v;
                ssize_t got = read(kl->wake_fd, &v, sizeof v);
                (void)got;
                continue;
            }
            int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                        (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(kl->m, evs[i].data.fd, flags, &running);
        }
        if (kl->timer_at_ms >= 0 && mono_ms() >= kl->timer_at_ms) {
            kl->timer_at_ms = -1;
            curl_multi_socket_action(kl->m, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        reap(kl);
        /* A wait that ran out after many transfers began or ended: give back what setting them
         * up and tearing them down left in this thread's arena (ty_mem.h). */
        if (n == 0 && kl->churn >= KL_TRIM_CHURN && ty_mem_trim())
            kl->churn = 0;
    }
    return NULL;
}

/* ---- life ---------------------------------------------------------------------------------- */

ty_err kube_logs_new(const kube_logs_opts *o, kube_logs **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !o->client || !o->namespace_ || !o->dir || !*o->dir) {
        fmt(err, errlen, "kube logs: a client, a namespace and a directory are required");
        return TY_EINVAL;
    }
    kube_logs *kl = calloc(1, sizeof *kl);
    if (!kl)
        return TY_ENOMEM;
    kl->c = o->client;
    fmt(kl->ns, sizeof kl->ns, "%s", o->namespace_);
    if (strlen(o->dir) >= sizeof kl->dir) {
        free(kl);
        fmt(err, errlen, "kube logs: the directory's path is too long");
        return TY_EINVAL;
    }
    fmt(kl->dir, sizeof kl->dir, "%s", o->dir);
    kl->rank_limit = o->rank_limit ? o->rank_limit : RANKLOG_DEFAULT_LIMIT;
    if (kl->rank_limit < RANKLOG_MIN_LIMIT)
        kl->rank_limit = RANKLOG_MIN_LIMIT;
    kl->job_limit = o->job_limit ? o->job_limit : RANKLOG_JOB_LIMIT_FACTOR * kl->rank_limit;
    kl->next_due_ms = INT64_MAX;
    kl->timer_at_ms = -1;
    kl->ep = kl->wake_fd = -1;
    pthread_mutex_init(&kl->mu, NULL);
    if (!(kl->m = curl_multi_init())) {
        kube_logs_free(kl);
        return TY_ENOMEM;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    if ((kl->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (kl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        (ev.data.fd = kl->wake_fd, epoll_ctl(kl->ep, EPOLL_CTL_ADD, kl->wake_fd, &ev)) != 0) {
        fmt(err, errlen, "kube logs: cannot make its epoll: %s", strerror(errno));
        kube_logs_free(kl);
        return TY_EIO;
    }
    curl_multi_setopt(kl->m, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(kl->m, CURLMOPT_SOCKETDATA, kl);
    curl_multi_setopt(kl->m, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(kl->m, CURLMOPT_TIMERDATA, kl);
    if (pthread_create(&kl->thread, NULL, collector_main, kl) != 0) {
        kube_logs_free(kl);
        fmt(err, errlen, "kube logs: cannot start its thread");
        return TY_EIO;
    }
    kl->started = 1;
    *out = kl;
    return TY_OK;
}

void kube_logs_free(kube_logs *kl)
{
    if (!kl)
        return;
    if (kl->started) {
        pthread_mutex_lock(&kl->mu);
        kl->quit = 1;
        pthread_mutex_unlock(&kl->mu);
        wake(kl);
        pthread_join(kl->thread, NULL);
    }
    for (size_t b = 0; b < KL_BUCKETS; b++)
        while (kl->table[b]) {
            kstream *s = kl->table[b];
            if (s->open) {
                curl_multi_remove_handle(kl->m, s->h);
                curl_easy_cleanup(s->h);
                ty_kclient_easy_free(s->hdrs);
                s->open = 0;
            }
            drop(kl, s);
        }
    if (kl->m)
        curl_multi_cleanup(kl->m);
    if (kl->ep >= 0)
        close(kl->ep);
    if (kl->wake_fd >= 0)
        close(kl->wake_fd);
    pthread_mutex_destroy(&kl->mu);
    free(kl);
}
