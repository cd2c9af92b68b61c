/*
 * ranklog.c - the logs of a job's ranks (ranklog.h): a pump that copies pipes to
 * capped, rotated files, and a reader that shows them as one logical log.
 *
 * Logical offsets: every byte a rank ever wrote has an offset in the stream of
 * its log, counted from 0, dropped bytes included. P.1 starts at the dropped
 * count D and P at D + size(P.1). A reader keeps its place as such an offset
 * (pos), so finding where to go on after a rotation is the same computation as
 * opening: take a snapshot of the files, and find the segment that holds pos -
 * or, when pos is below D, say how many bytes were dropped and start at D.
 *
 * The pump: one thread waits in epoll on every pipe (level-triggered) and on an
 * eventfd that asks it to stop. `mu` covers the list of sinks, every sink's
 * I/O and the copy buffer, so ranklog_pump_flush() can copy on the caller's
 * thread with no hand-over: whoever holds `mu` reads the pipe. Only the pump's
 * thread (and ranklog_pump_free() after it stopped) closes and frees a sink,
 * so the sinks an epoll_wait() returned stay valid while it handles them; a
 * flush that meets end of file only marks the sink, and the pipe, which stays
 * readable at end of file, wakes the thread to close it.
 *
 * A rotation, under an exclusive flock() on P.dropped: the new dropped count is
 * written, P is renamed to P.1 (deleting the old P.1), a new P is created. A
 * reader takes a shared flock() while it reads the count and opens both
 * segments. Readers and the pump open P.dropped separately, so their locks are
 * separate open file descriptions and exclude each other within this process.
 */
#define _GNU_SOURCE /* flock, eventfd, pread */
#include "scheduler/ranklog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ty_log.h"
#include "common/ty_thread.h"

#define RANKLOG_CHUNK (64 * 1024)     /* one read of a pipe; one step of the tail scan */
#define RANKLOG_EPOLL_BATCH 32
#define RANKLOG_SIDE_SUFFIX ".dropped"
#define RANKLOG_OLD_SUFFIX ".1"
#define RANKLOG_SUFFIX_MAX 9          /* the longer suffix, with its NUL */
#define RANKLOG_SIDE_MAX 64           /* P.dropped: two 20-digit numbers, a space, a newline */
#define RANKLOG_REOPEN_TRIES 4        /* segment changes one ranklog_read() follows */
#define KIB 1024ull
#define MIB (1024ull * 1024)

/* ---- files ------------------------------------------------------------------------ */

static int path_with(char *buf, size_t len, const char *path, const char *suffix)
{
    int n = snprintf(buf, len, "%s%s", path, suffix);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* mkdir -p of the directory that holds path; 0 when it exists afterwards. */
static int mkdir_parent(const char *path)
{
    char dir[PATH_MAX];
    if (path_with(dir, sizeof dir, path, "") != 0)
        return -1;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    if (slash == dir)
        return 0;
    *slash = '\0';
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : -1;
    for (char *c = dir + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        int r = mkdir(dir, 0750);
        *c = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(dir, 0750) != 0 && errno != EEXIST)
        return -1;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

static int lock_fd(int fd, int op)
{
    while (flock(fd, op) != 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads P.dropped; a file that is empty or not of that shape reads as 0 and 0. */
static void side_read(int fd, uint64_t *dropped, uint64_t *limit)
{
    char buf[RANKLOG_SIDE_MAX];
    *dropped = 0;
    *limit = 0;
    ssize_t n;
    do
        n = pread(fd, buf, sizeof buf - 1, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    unsigned long long d = strtoull(buf, &end, 10);
    if (errno || end == buf || *end != ' ')
        return;
    const char *lp = end + 1;
    unsigned long long l = strtoull(lp, &end, 10);
    if (errno || end == lp || *end != '\n')
        return;
    *dropped = d;
    *limit = l;
}

/* Rewrites P.dropped in place: fixed width, so the file never shrinks. */
static int side_write(int fd, uint64_t dropped, uint64_t limit)
{
    char buf[RANKLOG_SIDE_MAX];
    int n = snprintf(buf, sizeof buf, "%20llu %20llu\n", (unsigned long long)dropped,
                     (unsigned long long)limit);
    if (n < 0 || (size_t)n >= sizeof buf)
        return -1;
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = pwrite(fd, buf + off, (size_t)n - off, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += (size_t)w;
    }
    return 0;
}

/* ---- the pump --------------------------------------------------------------------- */

typedef struct sink {
    struct sink *next;
    char *path;                   /* P */
    int pipe_fd;                  /* the read end, non-blocking */
    int log_fd;                   /* P, O_APPEND */
    int side_fd;                  /* P.dropped, for the rotation's lock and count */
    uint64_t size;                /* bytes in P */
    uint64_t dropped;             /* what P.dropped says */
    uint64_t limit, seg_max;      /* the cap, and limit / 2: the most bytes of one segment */
    int eof;                      /* the pipe reached end of file (or failed): close it */
    int write_failed;             /* a failed write was reported; reset by a good one */
    int rotate_failed;            /* a failed rotation was reported */
} sink;

struct ranklog_pump {
    pthread_mutex_t mu;           /* everything below but the constants, and all sink I/O */
    pthread_t thread;
    int epfd;
    int wakefd;                   /* eventfd: the thread stops when it reads stopping */
    int stopping;
    uint64_t limit;               /* constant */
    uint64_t seg_max;             /* limit / 2: the most bytes of one segment; constant */
    sink *sinks;
    size_t nsinks;
    char buf[RANKLOG_CHUNK];      /* the copy buffer; under mu */
};

static void sink_close(sink *s)
{
    if (!s)
        return;
    if (s->pipe_fd >= 0)
        close(s->pipe_fd);
    if (s->log_fd >= 0)
        close(s->log_fd);
    if (s->side_fd >= 0)
        close(s->side_fd);
    free(s->path);
    free(s);
}

/*
 * P becomes P.1 and a new P starts, under the exclusive lock. On failure
 * nothing moved (or P was moved back), P.dropped matches the files, and P
 * keeps growing past its segment size until a later rotation succeeds.
 */
static int sink_rotate(sink *s)
{
    char old[PATH_MAX];
    int rc = -1, fd = -1;
    if (path_with(old, sizeof old, s->path, RANKLOG_OLD_SUFFIX) != 0 ||
        lock_fd(s->side_fd, LOCK_EX) != 0)
        return -1;
    struct stat st;
    uint64_t gone = 0;
    if (stat(old, &st) == 0)
        gone = (uint64_t)st.st_size;
    else if (errno != ENOENT)
        goto out;
    if (side_write(s->side_fd, s->dropped + gone, s->limit) != 0)
        goto out;
    if (rename(s->path, old) != 0) {
        side_write(s->side_fd, s->dropped, s->limit);
        goto out;
    }
    fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        /* The old P.1 is gone and counted: with P back, the files match P.dropped. */
        if (rename(old, s->path) == 0)
            s->dropped += gone;
        goto out;
    }
    close(s->log_fd);
    s->log_fd = fd;
    s->size = 0;
    s->dropped += gone;
    rc = 0;
out:
    lock_fd(s->side_fd, LOCK_UN);
    return rc;
}

/* Appends n bytes to the log, rotating at each segment boundary. Failures are logged. */
static int sink_write(sink *s, const char *data, size_t n)
{
    while (n > 0) {
        if (s->size >= s->seg_max) {
            if (sink_rotate(s) == 0)
                s->rotate_failed = 0;
            else if (!s->rotate_failed) {
                s->rotate_failed = 1;
                TY_LOG(TY_LOG_ERROR, "ranklog: rotation failed, the log grows past its limit",
                       "{s:s,s:s}", "path", s->path, "error", strerror(errno));
            }
        }
        size_t k = n;
        if (s->size < s->seg_max && s->seg_max - s->size < k)
            k = (size_t)(s->seg_max - s->size);
        if (write_all(s->log_fd, data, k) != 0) {
            if (!s->write_failed) {
                s->write_failed = 1;
                TY_LOG(TY_LOG_ERROR, "ranklog: write failed, output is lost", "{s:s,s:s}", "path",
                       s->path, "error", strerror(errno));
            }
            return -1;
        }
        s->write_failed = 0;
        s->size += k;
        data += k;
        n -= k;
    }
    return 0;
}

/*
 * One read of the pipe, at most budget bytes, copied to the log. Returns the
 * bytes copied, 0 at end of file (s->eof set), -1 when the pipe is empty now
 * (EAGAIN) or failed (then s->eof is set too).
 */
static long sink_copy(ranklog_pump *p, sink *s, size_t budget)
{
    if (s->eof)
        return 0;
    size_t want = budget < sizeof p->buf ? budget : sizeof p->buf;
    ssize_t n;
    do
        n = read(s->pipe_fd, p->buf, want);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -1;
        TY_LOG(TY_LOG_ERROR, "ranklog: reading a rank's output failed", "{s:s,s:s}", "path",
               s->path, "error", strerror(errno));
        s->eof = 1;
        return -1;
    }
    if (n == 0) {
        s->eof = 1;
        return 0;
    }
    sink_write(s, p->buf, (size_t)n);
    return (long)n;
}

/* Copies what the pipe holds now (FIONREAD), and no more than that plus one read. */
static ty_err sink_drain(ranklog_pump *p, sink *s)
{
    int avail = 0;
    if (s->eof)
        return TY_OK;
    if (ioctl(s->pipe_fd, FIONREAD, &avail) != 0)
        return TY_EIO;
    size_t left = avail > 0 ? (size_t)avail : 0;
    while (left > 0) {
        long n = sink_copy(p, s, left);
        if (n <= 0)
            break;
        left -= (size_t)n < left ? (size_t)n : left;
    }
    /* One more read tells end of file from a writer that is still there. */
    if (left == 0 && !s->eof)
        sink_copy(p, s, sizeof p->buf);
    return TY_OK;
}

/* Unlinks s from the list and the epoll set and frees it. Under mu. */
static void sink_remove(ranklog_pump *p, sink *s)
{
    for (sink **pp = &p->sinks; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            p->nsinks--;
            break;
        }
    epoll_ctl(p->epfd, EPOLL_CTL_DEL, s->pipe_fd, NULL);
    sink_close(s);
}

static void *pump_main(void *arg)
{
    ty_thread_name("ty-ranklog");
    ranklog_pump *p = arg;
    struct epoll_event ev[RANKLOG_EPOLL_BATCH];
    for (;;) {
        int n = epoll_wait(p->epfd, ev, RANKLOG_EPOLL_BATCH, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            TY_LOG(TY_LOG_ERROR, "ranklog: epoll_wait failed, logs are no longer copied",
                   "{s:s}", "error", strerror(errno));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&p->mu);
            sink *s = ev[i].data.ptr;
            if (!s) {
                int stop = p->stopping;
                pthread_mutex_unlock(&p->mu);
                if (stop)
                    return NULL;
                continue;
            }
            sink_copy(p, s, sizeof p->buf);
            if (s->eof)
                sink_remove(p, s);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

ty_err ranklog_pump_new(uint64_t limit_bytes, ranklog_pump **out)
{
    if (!out || limit_bytes < RANKLOG_MIN_LIMIT)
        return TY_EINVAL;
    ranklog_pump *p = calloc(1, sizeof *p);
    if (!p)
        return TY_ENOMEM;
    p->limit = limit_bytes;
    p->seg_max = limit_bytes / 2;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (p->epfd < 0 || p->wakefd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->wakefd, &ev) != 0)
        goto fail;
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        goto fail;
    if (pthread_create(&p->thread, NULL, pump_main, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        goto fail;
    }
    *out = p;
    return TY_OK;
fail:
    if (p->epfd >= 0)
        close(p->epfd);
    if (p->wakefd >= 0)
        close(p->wakefd);
    free(p);
    return TY_EIO;
}

/*
 * Opens (creating them and their directories) P.dropped and P for appending, with the cap
 * limit; keep >= 0 first cuts P to keep bytes when it is longer. s->path is P, side P.dropped.
 */
static int sink_open_files(sink *s, const char *side, uint64_t limit, int64_t keep)
{
    s->limit = limit;
    s->seg_max = limit / 2;
    if (mkdir_parent(s->path) != 0)
        return -1;
    /* P.dropped before P: a log that exists always has its lock file. */
    s->side_fd = open(side, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (s->side_fd < 0 || lock_fd(s->side_fd, LOCK_EX) != 0)
        return -1;
    uint64_t old_limit;
    side_read(s->side_fd, &s->dropped, &old_limit);
    int w = side_write(s->side_fd, s->dropped, limit);
    lock_fd(s->side_fd, LOCK_UN);
    if (w != 0)
        return -1;
    s->log_fd = open(s->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    struct stat st;
    if (s->log_fd < 0 || fstat(s->log_fd, &st) != 0)
        return -1;
    if (keep >= 0 && (uint64_t)st.st_size > (uint64_t)keep) {
        if (ftruncate(s->log_fd, (off_t)keep) != 0)
            return -1;
        st.st_size = (off_t)keep;
    }
    s->size = (uint64_t)st.st_size;
    return 0;
}

ty_err ranklog_pump_add(ranklog_pump *p, int read_fd, const char *path)
{
    char side[PATH_MAX];
    ty_err e = TY_EIO;
    sink *s = NULL;
    if (!p || read_fd < 0 || !path || !*path ||
        strlen(path) + RANKLOG_SUFFIX_MAX > sizeof side ||
        path_with(side, sizeof side, path, RANKLOG_SIDE_SUFFIX) != 0) {
        e = TY_EINVAL;
        goto fail;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        e = TY_ENOMEM;
        goto fail;
    }
    s->pipe_fd = read_fd;
    s->log_fd = s->side_fd = -1;
    if (sink_open_files(s, side, p->limit, -1) != 0)
        goto fail;
    int fl = fcntl(read_fd, F_GETFL);
    if (fl < 0 || fcntl(read_fd, F_SETFL, fl | O_NONBLOCK) != 0)
        goto fail;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        e = TY_ESHUTDOWN;
        goto fail;
    }
    /* Two pipes into one file would each rotate it by their own count. */
    for (sink *o = p->sinks; o; o = o->next)
        if (!o->eof && strcmp(o->path, path) == 0) {
            pthread_mutex_unlock(&p->mu);
            e = TY_EEXISTS;
            goto fail;
        }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, read_fd, &ev) != 0) {
        pthread_mutex_unlock(&p->mu);
        goto fail;
    }
    s->next = p->sinks;
    p->sinks = s;
    p->nsinks++;
    pthread_mutex_unlock(&p->mu);
    return TY_OK;
fail:
    if (s)
        sink_close(s); /* closes read_fd */
    else
        close(read_fd);
    return e;
}

ty_err ranklog_pump_flush(ranklog_pump *p, const char *path, int *still_open)
{
    ty_err e = TY_OK;
    int still = 0;
    if (!p || !path)
        return TY_EINVAL;
    pthread_mutex_lock(&p->mu);
    for (sink *s = p->sinks; s; s = s->next) {
        if (strcmp(s->path, path) != 0)
            continue;
        ty_err de = sink_drain(p, s);
        if (de && !e)
            e = de;
        if (!s->eof)
            still = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (still_open)
        *still_open = still;
    return e;
}

size_t ranklog_pump_active(ranklog_pump *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    size_t n = p->nsinks;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void ranklog_pump_free(ranklog_pump *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_mutex_unlock(&p->mu);
    uint64_t one = 1;
    while (write(p->wakefd, &one, sizeof one) < 0 && errno == EINTR)
        ;
    pthread_join(p->thread, NULL);
    while (p->sinks) {
        sink *s = p->sinks;
        sink_drain(p, s);
        sink_remove(p, s);
    }
    pthread_mutex_destroy(&p->mu);
    close(p->epfd);
    close(p->wakefd);
    free(p);
}

/* ---- the writer ------------------------------------------------------------------- */

struct ranklog_writer {
    sink s;
};

ty_err ranklog_writer_open(const char *path, uint64_t limit_bytes, int64_t keep_bytes,
                           ranklog_writer **out)
{
    char side[PATH_MAX];
    if (!out || !path || !*path || limit_bytes < RANKLOG_MIN_LIMIT ||
        strlen(path) + RANKLOG_SUFFIX_MAX > sizeof side ||
        path_with(side, sizeof side, path, RANKLOG_SIDE_SUFFIX) != 0)
        return TY_EINVAL;
    *out = NULL;
    ranklog_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->s.path = strdup(path))) {
        free(w);
        return TY_ENOMEM;
    }
    w->s.pipe_fd = w->s.log_fd = w->s.side_fd = -1;
    if (sink_open_files(&w->s, side, limit_bytes, keep_bytes) != 0) {
        ranklog_writer_close(w);
        return TY_EIO;
    }
    *out = w;
    return TY_OK;
}

ty_err ranklog_writer_write(ranklog_writer *w, const char *data, size_t n)
{
    if (!w || (!data && n))
        return TY_EINVAL;
    return sink_write(&w->s, data, n) == 0 ? TY_OK : TY_EIO;
}

uint64_t ranklog_writer_size(const ranklog_writer *w)
{
    return w ? w->s.size : 0;
}

void ranklog_writer_close(ranklog_writer *w)
{
    if (!w)
        return;
    if (w->s.log_fd >= 0)
        close(w->s.log_fd);
    if (w->s.side_fd >= 0)
        close(w->s.side_fd);
    free(w->s.path);
    free(w);
}

/* ---- the reader ------------------------------------------------------------------- */

/* The files of a log at one moment: what a shared lock on P.dropped sees. */
typedef struct snapshot {
    uint64_t dropped;             /* where P.1 starts */
    uint64_t limit;               /* 0 when unknown */
    int fd1, fd0;                 /* P.1 and P, -1 when absent */
    uint64_t size1, size0;
} snapshot;

struct ranklog_reader {
    char *path;                   /* P */
    int fd;                       /* the segment being read, -1 for none */
    dev_t dev;                    /* of fd */
    ino_t ino;
    uint64_t pos;                 /* the logical offset of the next byte to return */
    uint64_t limit;               /* for the notice; from P.dropped */
    char note[160];               /* a notice still to return */
    size_t note_len, note_off;
    int at_line_start;            /* nothing returned yet, or a '\n' last */
};

static void snapshot_close(snapshot *s)
{
    if (s->fd1 >= 0)
        close(s->fd1);
    if (s->fd0 >= 0)
        close(s->fd0);
    s->fd1 = s->fd0 = -1;
}

static int open_size(const char *path, int *fd, uint64_t *size)
{
    struct stat st;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    *size = 0;
    if (*fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
    if (fstat(*fd, &st) != 0) {
        close(*fd);
        *fd = -1;
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

/* TY_ENOTFOUND when neither P nor P.1 exists. */
static ty_err snapshot_take(const char *path, snapshot *s)
{
    char side[PATH_MAX], old[PATH_MAX];
    ty_err e = TY_EIO;
    int side_fd = -1;
    *s = (snapshot){.fd1 = -1, .fd0 = -1};
    if (path_with(side, sizeof side, path, RANKLOG_SIDE_SUFFIX) != 0 ||
        path_with(old, sizeof old, path, RANKLOG_OLD_SUFFIX) != 0)
        return TY_ENOTFOUND;
    side_fd = open(side, O_RDONLY | O_CLOEXEC);
    if (side_fd < 0 && errno != ENOENT)
        goto out;
    /* Without P.dropped it is a log of one file that never rotates. */
    if (side_fd >= 0) {
        if (lock_fd(side_fd, LOCK_SH) != 0)
            goto out;
        side_read(side_fd, &s->dropped, &s->limit);
    }
    if (open_size(old, &s->fd1, &s->size1) != 0 || open_size(path, &s->fd0, &s->size0) != 0)
        goto out;
    e = s->fd1 < 0 && s->fd0 < 0 ? TY_ENOTFOUND : TY_OK;
out:
    if (side_fd >= 0)
        close(side_fd); /* and unlocks */
    if (e)
        snapshot_close(s);
    return e;
}

static void format_limit(char *buf, size_t len, uint64_t limit)
{
    if (limit >= MIB && limit % MIB == 0)
        snprintf(buf, len, "%llu MiB", (unsigned long long)(limit / MIB));
    else if (limit >= KIB && limit % KIB == 0)
        snprintf(buf, len, "%llu KiB", (unsigned long long)(limit / KIB));
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)limit);
}

static void set_notice(ranklog_reader *r, uint64_t bytes)
{
    char lim[48];
    format_limit(lim, sizeof lim, r->limit);
    int n = snprintf(r->note, sizeof r->note,
                     "%s[trainyard] %llu bytes of older output were dropped (log limit %s)\n",
                     r->at_line_start ? "" : "\n", (unsigned long long)bytes, lim);
    r->note_len = n > 0 && (size_t)n < sizeof r->note ? (size_t)n : 0;
    r->note_off = 0;
}

/*
 * Moves the reader to logical offset target within snapshot s (whose
 * descriptors it takes). Below the dropped count, a notice says how much is
 * gone and reading starts at the oldest byte there is.
 */
static ty_err reader_place(ranklog_reader *r, snapshot *s, uint64_t target)
{
    ty_err e = TY_OK;
    if (s->limit)
        r->limit = s->limit;
    if (target < s->dropped) {
        set_notice(r, s->dropped - target);
        target = s->dropped;
    }
    int fd;
    uint64_t off;
    if (s->fd1 >= 0 && target < s->dropped + s->size1) {
        fd = s->fd1;
        s->fd1 = -1;
        off = target - s->dropped;
    } else {
        uint64_t start = s->dropped + s->size1;
        fd = s->fd0;
        s->fd0 = -1;
        off = target > start ? target - start : 0;
        if (off > s->size0) /* the file shrank under us: go on from its end */
            off = s->size0;
        target = start + off;
    }
    struct stat st;
    if (fd >= 0 && (lseek(fd, (off_t)off, SEEK_SET) < 0 || fstat(fd, &st) != 0)) {
        close(fd);
        fd = -1;
        e = TY_EIO;
    }
    if (r->fd >= 0)
        close(r->fd);
    r->fd = fd;
    if (fd >= 0) {
        r->dev = st.st_dev;
        r->ino = st.st_ino;
    }
    r->pos = target;
    snapshot_close(s);
    return e;
}

/* The logical byte at offset x of the visible part [dropped, dropped + size1 + size0). */
typedef struct scan {
    const snapshot *s;
    char *buf;
    uint64_t lo, hi;              /* buf holds the logical bytes [lo, hi) */
} scan;

/* Loads into sc->buf the chunk that ends at logical offset end (> visible start). */
static int scan_load(scan *sc, uint64_t end)
{
    const snapshot *s = sc->s;
    uint64_t mid = s->dropped + s->size1; /* where P starts */
    uint64_t seg_lo = end > mid ? mid : s->dropped;
    uint64_t lo = end - seg_lo > RANKLOG_CHUNK ? end - RANKLOG_CHUNK : seg_lo;
    int fd = end > mid ? s->fd0 : s->fd1;
    size_t want = (size_t)(end - lo), got = 0;
    while (got < want) {
        ssize_t n = pread(fd, sc->buf + got, want - got, (off_t)(lo - seg_lo + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    sc->lo = lo;
    sc->hi = end;
    return 0;
}

/*
 * The logical offset where the last `lines` lines start, reading backwards
 * from the end of snapshot s; 0 (the notice first) when the visible log has
 * fewer lines and bytes were dropped.
 */
static ty_err tail_start(const snapshot *s, long lines, uint64_t *start)
{
    uint64_t begin = s->dropped, end = s->dropped + s->size1 + s->size0;
    if (lines == 0 || end == begin) {
        *start = lines == 0 ? end : 0;
        return TY_OK;
    }
    scan sc = {.s = s, .buf = malloc(RANKLOG_CHUNK)};
    if (!sc.buf)
        return TY_ENOMEM;
    ty_err e = TY_OK;
    long found = 0;
    uint64_t x = end; /* the bytes [x, end) were scanned */
    int first = 1;
    while (x > begin) {
        if (scan_load(&sc, x) != 0) {
            e = TY_EIO;
            goto out;
        }
        for (uint64_t i = sc.hi; i > sc.lo; i--) {
            char c = sc.buf[i - 1 - sc.lo];
            if (first) {
                /* The newline that ends the last line starts no line. */
                first = 0;
                if (c == '\n')
                    continue;
            }
            if (c == '\n' && ++found == lines) {
                *start = i;
                goto out;
            }
        }
        x = sc.lo;
    }
    /* The visible part holds found + 1 lines; the notice is one more. */
    *start = found + 1 >= lines ? begin : 0;
out:
    free(sc.buf);
    return e;
}

ty_err ranklog_reader_open(const char *path, long tail_lines, ranklog_reader **out)
{
    if (!path || !*path || !out)
        return TY_EINVAL;
    snapshot s;
    ty_err e = snapshot_take(path, &s);
    if (e)
        return e;
    ranklog_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        snapshot_close(&s);
        return TY_ENOMEM;
    }
    r->fd = -1;
    r->at_line_start = 1;
    uint64_t start = 0;
    if (tail_lines >= 0 && (e = tail_start(&s, tail_lines, &start)) != TY_OK) {
        snapshot_close(&s);
        ranklog_reader_close(r);
        return e;
    }
    if ((e = reader_place(r, &s, start)) != TY_OK) {
        ranklog_reader_close(r);
        return e;
    }
    *out = r;
    return TY_OK;
}

/* Whether P still is the file the reader reads (then its end is the log's end). */
static int reading_current(const ranklog_reader *r)
{
    struct stat st;
    return r->fd >= 0 && stat(r->path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino;
}

long ranklog_read(ranklog_reader *r, char *buf, size_t max)
{
    if (!r || !buf || max == 0)
        return -1;
    for (int tries = 0; tries <= RANKLOG_REOPEN_TRIES; tries++) {
        if (r->note_off < r->note_len) {
            size_t n = r->note_len - r->note_off;
            if (n > max)
                n = max;
            memcpy(buf, r->note + r->note_off, n);
            r->note_off += n;
            r->at_line_start = 1;
            return (long)n;
        }
        if (r->fd >= 0) {
            ssize_t n;
            do
                n = read(r->fd, buf, max);
            while (n < 0 && errno == EINTR);
            if (n < 0)
                return -1;
            if (n > 0) {
                r->pos += (uint64_t)n;
                r->at_line_start = buf[n - 1] == '\n';
                return (long)n;
            }
        }
        /* At the end of a segment: the end of the log, unless P has moved on. */
        if (reading_current(r))
            return 0;
        snapshot s;
        ty_err e = snapshot_take(r->path, &s);
        if (e == TY_ENOTFOUND)
            return 0;
        if (e || reader_place(r, &s, r->pos) != TY_OK)
            return -1;
    }
    return 0;
}

void ranklog_reader_close(ranklog_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->path);
    free(r);
}

/* ---- a job's logs across attempts -------------------------------------------------- */

size_t ranklog_prune_count(const uint64_t *sizes, size_t n, uint64_t budget)
{
    uint64_t kept = 0;
    size_t keep = 0;
    /* From the newest back, while the next older one still fits. */
    while (keep < n) {
        uint64_t s = sizes[n - 1 - keep];
        if (s > budget - kept)
            break;
        kept += s;
        keep++;
    }
    return n - keep;
}

/* One previous attempt of a job: its number and the bytes of its logs. */
typedef struct prev_attempt {
    int n;
    uint64_t bytes;
    int ranks;                    /* rank-<r>.log files in it */
    int pruned;                   /* deleted already (only RANKLOG_PRUNED_FILE is left) */
} prev_attempt;

static int prev_cmp(const void *a, const void *b)
{
    int x = ((const prev_attempt *)a)->n, y = ((const prev_attempt *)b)->n;
    return (x > y) - (x < y);
}

/* "a<N>" with 1 <= N <= INT_MAX, no sign, no leading zero; N or 0. */
static int attempt_number(const char *name)
{
    if (name[0] != 'a' || name[1] < '1' || name[1] > '9')
        return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(name + 1, &end, 10);
    return errno || *end || v > INT_MAX ? 0 : (int)v;
}

/* 1 when name is "rank-<r>.log" exactly (a rank's current segment). */
static int is_rank_log(const char *name)
{
    if (strncmp(name, "rank-", 5) != 0 || name[5] < '0' || name[5] > '9')
        return 0;
    const char *p = name + 5;
    while (*p >= '0' && *p <= '9')
        p++;
    return strcmp(p, ".log") == 0;
}

/* Sums the sizes of the regular files in dir (not following links) into *a. */
static ty_err attempt_measure(int dfd, prev_attempt *a)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return TY_EIO;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        if (strcmp(de->d_name, RANKLOG_PRUNED_FILE) == 0) {
            a->pruned = 1;
            continue;
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        a->bytes += (uint64_t)st.st_size;
        a->ranks += is_rank_log(de->d_name);
    }
    closedir(d);
    /* A prune interrupted after its marker was written: finish deleting. */
    if (a->pruned && a->bytes > 0)
        a->pruned = 0;
    return TY_OK;
}

/* Writes the marker, then deletes every other file of the attempt's directory. */
static ty_err attempt_delete(int jfd, const prev_attempt *a, uint64_t budget)
{
    char name[32], buf[96];
    snprintf(name, sizeof name, "a%d", a->n);
    int dfd = openat(jfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return TY_EIO;
    ty_err rc = TY_EIO;
    int n = snprintf(buf, sizeof buf, "%llu %llu %d\n", (unsigned long long)a->bytes,
                     (unsigned long long)budget, a->ranks);
    int mfd = openat(dfd, RANKLOG_PRUNED_FILE ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                     0640);
    if (mfd < 0)
        goto out;
    int w = write_all(mfd, buf, (size_t)n);
    close(mfd);
    if (w != 0 || renameat(dfd, RANKLOG_PRUNED_FILE ".tmp", dfd, RANKLOG_PRUNED_FILE) != 0)
        goto out;
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        goto out;
    }
    rc = TY_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (strcmp(de->d_name, RANKLOG_PRUNED_FILE) == 0 ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode))
            continue;
        if (unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT)
            rc = TY_EIO;
    }
    closedir(d);
out:
    close(dfd);
    return rc;
}

ty_err ranklog_prune_job(const char *job_dir, int current, uint64_t budget,
                         ranklog_prune_result *out)
{
    prev_attempt *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t *sizes = NULL;
    DIR *d = NULL;
    int jfd = -1;
    ty_err rc = TY_OK;
    ranklog_prune_result res = {0};

    if (current < 1 || !job_dir || !job_dir[0])
        return TY_EINVAL;
    jfd = open(job_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (jfd < 0) {
        rc = errno == ENOENT ? TY_OK : TY_EIO;
        goto out;
    }
    int dfd2 = dup(jfd);
    if (dfd2 < 0 || !(d = fdopendir(dfd2))) {
        if (dfd2 >= 0)
            close(dfd2);
        rc = TY_EIO;
        goto out;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int num = attempt_number(de->d_name);
        if (num < 1 || num >= current)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            prev_attempt *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = TY_ENOMEM;
                goto out;
            }
            v = nv;
            cap = nc;
        }
        prev_attempt a = {.n = num};
        int afd = openat(jfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (afd < 0)
            continue; /* not a directory, or gone */
        if ((rc = attempt_measure(afd, &a)) != TY_OK)
            goto out;
        v[n++] = a;
    }
    if (n == 0)
        goto out;
    qsort(v, n, sizeof *v, prev_cmp);
    if (!(sizes = malloc(n * sizeof *sizes))) {
        rc = TY_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        sizes[i] = v[i].bytes;
    size_t del = ranklog_prune_count(sizes, n, budget);
    for (size_t i = 0; i < n; i++) {
        if (i >= del) {
            res.kept += v[i].bytes;
            continue;
        }
        if (v[i].pruned)
            continue;
        ty_err e = attempt_delete(jfd, &v[i], budget);
        if (e != TY_OK) {
            rc = e;
            continue;
        }
        res.deleted++;
        res.freed += v[i].bytes;
    }
out:
    if (d)
        closedir(d);
    if (jfd >= 0)
        close(jfd);
    free(sizes);
    free(v);
    if (out)
        *out = res;
    return rc;
}

int ranklog_pruned(const char *attempt_dir, uint64_t *bytes, uint64_t *budget, int *ranks)
{
    char path[PATH_MAX], buf[96];
    if (path_with(path, sizeof path, attempt_dir, "/" RANKLOG_PRUNED_FILE) != 0)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "<bytes> <budget> <ranks>\n" */
    unsigned long long v[3];
    char *p = buf, *end = NULL;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        v[i] = strtoull(p, &end, 10);
        if (errno || end == p || (*end != ' ' && *end != '\n'))
            return 0;
        p = end + 1;
    }
    unsigned long long b = v[0], l = v[1];
    int r = v[2] > INT_MAX ? INT_MAX : (int)v[2];
    if (bytes)
        *bytes = b;
    if (budget)
        *budget = l;
    if (ranks)
        *ranks = r;
    return 1;
}
