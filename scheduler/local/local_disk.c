/*
 * local_disk.c - the disk limit of the local backend's jobs (local_int.h): how much a
 * job's directory uses, measured by a walk, and the thread that measures the
 * directories of the running jobs every few seconds.
 *
 * Why measured: the kernel's project quotas would be exact and immediate, but they
 * need a filesystem mounted with them (ext4 `prjquota`, XFS `pquota`) and the
 * right to set them; the machines this runs on have neither (ext4 without prjquota,
 * overlayfs in containers). local_disk_quota_note() says which, for the start-up log.
 *
 * The walk counts allocated blocks (st_blocks * 512: a sparse file costs what it
 * holds), follows no symbolic link, never leaves its directory tree (directories are
 * opened relative to their parent with O_NOFOLLOW), and is bounded: at most
 * max_entries entries and max_depth levels (one descriptor per level). A tree past
 * either bound is reported as such, and counts as over the limit: otherwise a job
 * could hide its bytes behind a million empty files or a deep path. A directory the
 * server cannot read (a job may chmod 000 its own) is made readable by its owner
 * first.
 *
 * Threads: the monitor's thread walks without holding `mu`; watch, unwatch and take
 * (the backend's thread) and the walker meet only in the table under `mu`. A finding
 * is matched to its watch by a generation number, so a walk that began for one
 * attempt is never reported against the next attempt of the same reservation.
 */
#define _GNU_SOURCE
#include "scheduler/local/local_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include "common/ty_log.h"
#include "common/ty_time.h"
#include "common/ty_thread.h"

/* ---- the walk -------------------------------------------------------------- */

/* Opens name in dirfd as a directory, never following a link; when the server may
 * not read it, gives its owner r-x first (the job owns it; the server must measure
 * it), again without following a link the job may have put there since. -1 with
 * errno. */
static int open_dir_at(int dfd, const char *name, const struct stat *st)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == EACCES &&
        fchmodat(dfd, name, (st->st_mode & 07777) | S_IRUSR | S_IXUSR, AT_SYMLINK_NOFOLLOW) == 0)
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd;
}

ty_err local_disk_usage(const char *dir, uint64_t max_entries, int max_depth, local_usage *u)
{
    DIR *stack[LOCAL_DISK_MAX_DEPTH + 1];
    int depth = 0;
    struct stat st;
    ty_err rc = TY_OK;

    memset(u, 0, sizeof *u);
    if (max_depth < 1 || max_depth > LOCAL_DISK_MAX_DEPTH)
        return TY_EINVAL;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TY_ENOTFOUND : TY_EIO;
    if (fstat(fd, &st) != 0 || !(stack[0] = fdopendir(fd))) {
        close(fd);
        return TY_EIO;
    }
    depth = 1;
    u->bytes = (uint64_t)st.st_blocks * 512u;
    while (depth > 0) {
        DIR *d = stack[depth - 1];
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            closedir(d);
            depth--;
            continue;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
            continue;
        if (u->entries >= max_entries) {
            u->too_many = 1;
            break;
        }
        u->entries++;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* deleted since readdir */
        u->bytes += (uint64_t)st.st_blocks * 512u;
        if (!S_ISDIR(st.st_mode))
            continue;
        if (depth >= max_depth) {
            u->too_deep = 1;
            continue;
        }
        int cfd = open_dir_at(dirfd(d), name, &st);
        DIR *child = cfd >= 0 ? fdopendir(cfd) : NULL;
        if (!child) {
            if (cfd >= 0)
                close(cfd);
            else if (errno != ENOENT)
                u->unreadable++;
            continue;
        }
        stack[depth++] = child;
    }
    while (depth > 0)
        closedir(stack[--depth]);
    return rc;
}

void local_fmt_bytes(char *buf, size_t len, uint64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
        return;
    }
    double v = (double)n;
    size_t u = 0;
    uint64_t div = 1024;
    v /= 1024;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        div *= 1024;
        u++;
    }
    if (n % div == 0)
        snprintf(buf, len, "%llu %s", (unsigned long long)(n / div), units[u]);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

int local_disk_over(const local_usage *u, uint64_t limit, char *why, size_t len)
{
    char used[32], lim[32];
    if (limit == 0)
        return 0;
    local_fmt_bytes(lim, sizeof lim, limit);
    if (u->too_many) {
        local_why(why, len, "job directory holds more than %d files and directories, more "
                  "than the disk limit's walk counts (its limit: %s)", LOCAL_DISK_MAX_ENTRIES,
                  lim);
        return 1;
    }
    if (u->too_deep) {
        local_why(why, len, "job directory nests deeper than %d levels, more than the disk "
                  "limit's walk follows (its limit: %s)", LOCAL_DISK_MAX_DEPTH, lim);
        return 1;
    }
    if (u->bytes <= limit)
        return 0;
    local_fmt_bytes(used, sizeof used, u->bytes);
    /* Rounded to one decimal, the use may read as the limit ("1.0 GiB" over "1 GiB"):
     * then both in bytes. */
    const char *su = strchr(used, ' '), *sl = strchr(lim, ' ');
    if (su && sl && strcmp(su, sl) == 0 && strtod(used, NULL) <= strtod(lim, NULL)) {
        snprintf(used, sizeof used, "%llu bytes", (unsigned long long)u->bytes);
        snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)limit);
    }
    local_why(why, len, "job directory uses %s, over its limit of %s (--local-disk-limit)", used,
              lim);
    return 1;
}

/* ---- project quotas: only whether the filesystem has them ------------------- */

void local_disk_quota_note(const char *dir, char *note, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096], best_mnt[PATH_MAX] = "", best_fs[64] = "", best_opts[1024] = "";
    size_t best = 0;
    if (!f) {
        local_why(note, len, "project quotas: not used (mount table unreadable)");
        return;
    }
    /* "id parent maj:min root mountpoint opts [optional...] - fstype source superopts" */
    while (fgets(line, sizeof line, f)) {
        char *save = NULL, *tok[5] = {0};
        char *p = strtok_r(line, " \n", &save);
        for (int i = 0; i < 5 && p; i++, p = strtok_r(NULL, " \n", &save))
            tok[i] = p;
        if (!tok[4])
            continue;
        while (p && strcmp(p, "-") != 0)
            p = strtok_r(NULL, " \n", &save);
        char *fs = p ? strtok_r(NULL, " \n", &save) : NULL;
        char *src = fs ? strtok_r(NULL, " \n", &save) : NULL;
        char *opts = src ? strtok_r(NULL, " \n", &save) : NULL;
        const char *mnt = tok[4];
        size_t ml = strlen(mnt);
        int under = strcmp(mnt, "/") == 0 ||
                    (strncmp(dir, mnt, ml) == 0 && (dir[ml] == '/' || dir[ml] == '\0'));
        if (!fs || !under || ml < best)
            continue;
        best = ml;
        snprintf(best_mnt, sizeof best_mnt, "%s", mnt);
        snprintf(best_fs, sizeof best_fs, "%s", fs);
        snprintf(best_opts, sizeof best_opts, "%s", opts ? opts : "");
    }
    fclose(f);
    if (!best_fs[0])
        local_why(note, len, "project quotas: not used (no mount found for %s)", dir);
    else if (strstr(best_opts, "prjquota") || strstr(best_opts, "pquota"))
        local_why(note, len, "project quotas: %s at %s has them, but the server does not set "
                  "them yet", best_fs, best_mnt);
    else
        local_why(note, len, "project quotas: not available (%s at %s is mounted without them)",
                  best_fs, best_mnt);
}

/* ---- the monitor ----------------------------------------------------------- */

typedef struct disk_watch {
    char id[LOCAL_JOB_ID_MAX];
    const void *key;               /* the backend's attempt; compared, never dereferenced */
    uint64_t gen;                  /* this watch's number */
    int over;                      /* a walk found it over: detail says why */
    int told;                      /* handed to take() */
    char detail[LOCAL_DISK_DETAIL_MAX];
} disk_watch;

struct local_disk {
    char *jobs_dir;                /* <data_dir>/jobs */
    uint64_t limit;
    int period_ms;
    int fd;                        /* eventfd: readable when a finding waits */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    disk_watch *w;
    size_t n, cap;
    uint64_t next_gen;
};

/* What one pass walks: a copy of the table's ids, taken under mu. */
typedef struct walk_item {
    char id[LOCAL_JOB_ID_MAX];
    uint64_t gen;
} walk_item;

static void *disk_main(void *arg)
{
    ty_thread_name("ty-local-disk");
    local_disk *m = arg;
    walk_item *items = NULL;
    size_t cap = 0;

    int64_t wait_ms = m->period_ms;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &until) != ETIMEDOUT)
            ;
        if (m->stop)
            break;
        /* The ids to walk, copied: the walk runs without the lock. */
        size_t n = 0;
        if (m->n > cap) {
            walk_item *ni = realloc(items, m->n * sizeof *ni);
            if (!ni)
                continue; /* try again next period */
            items = ni;
            cap = m->n;
        }
        for (size_t i = 0; i < m->n; i++)
            if (!m->w[i].over) {
                memcpy(items[n].id, m->w[i].id, sizeof items[n].id);
                items[n++].gen = m->w[i].gen;
            }
        pthread_mutex_unlock(&m->mu);

        int found = 0;
        uint64_t began = ty_time_mono_ns();
        for (size_t i = 0; i < n; i++) {
            char dir[PATH_MAX], why[LOCAL_DISK_DETAIL_MAX];
            local_usage u;
            if (snprintf(dir, sizeof dir, "%s/%s", m->jobs_dir, items[i].id) >= (int)sizeof dir)
                continue;
            ty_err e = local_disk_usage(dir, LOCAL_DISK_MAX_ENTRIES, LOCAL_DISK_MAX_DEPTH, &u);
            if (e != TY_OK || !local_disk_over(&u, m->limit, why, sizeof why))
                continue;
            pthread_mutex_lock(&m->mu);
            for (size_t k = 0; k < m->n; k++)
                if (m->w[k].gen == items[i].gen && !m->w[k].over) {
                    m->w[k].over = 1;
                    memcpy(m->w[k].detail, why, sizeof why);
                    found = 1;
                }
            pthread_mutex_unlock(&m->mu);
        }
        if (found) {
            uint64_t one = 1;
            ssize_t w = write(m->fd, &one, sizeof one);
            (void)w; /* a full counter is readable all the same */
        }
        /* Walks of huge trees take a while: rest at least 4 times as long as the last
         * pass took, so the walks never take more than a fifth of a core. */
        int64_t took_ms = (int64_t)((ty_time_mono_ns() - began) / 1000000u);
        wait_ms = took_ms * 4 > m->period_ms ? took_ms * 4 : m->period_ms;
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    free(items);
    return NULL;
}

ty_err local_disk_new(const char *data_dir, uint64_t limit, int period_ms, local_disk **out)
{
    local_disk *m = calloc(1, sizeof *m);
    ty_err rc = TY_ENOMEM;
    if (!m)
        return TY_ENOMEM;
    m->fd = -1;
    m->limit = limit;
    m->period_ms = period_ms > 0 ? period_ms : LOCAL_DISK_PERIOD_MS;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (asprintf(&m->jobs_dir, "%s/jobs", data_dir) < 0) {
        m->jobs_dir = NULL;
        goto fail;
    }
    rc = TY_EIO;
    if ((m->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        goto fail;
    if (limit > 0) {
        if (pthread_create(&m->thread, NULL, disk_main, m) != 0)
            goto fail;
        m->started = 1;
    }
    *out = m;
    return TY_OK;
fail:
    local_disk_free(m);
    return rc;
}

int local_disk_fd(const local_disk *m)
{
    return m->fd;
}

ty_err local_disk_watch(local_disk *m, const char *job_id, const void *key)
{
    if (!m->started)
        return TY_OK; /* no limit: nothing to measure */
    ty_err rc = TY_OK;
    pthread_mutex_lock(&m->mu);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        disk_watch *nw = realloc(m->w, cap * sizeof *nw);
        if (!nw) {
            rc = TY_ENOMEM;
            goto out;
        }
        m->w = nw;
        m->cap = cap;
    }
    disk_watch *w = &m->w[m->n++];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", job_id);
    w->key = key;
    w->gen = ++m->next_gen;
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void local_disk_unwatch(local_disk *m, const void *key)
{
    if (!m || !m->started)
        return;
    pthread_mutex_lock(&m->mu);
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->w[i].key != key)
            m->w[k++] = m->w[i];
    m->n = k;
    pthread_mutex_unlock(&m->mu);
}

size_t local_disk_take(local_disk *m, local_disk_finding *out, size_t max)
{
    uint64_t v;
    size_t n = 0;
    /* Reset first: a finding made after this read writes the counter again. */
    if (read(m->fd, &v, sizeof v) < 0) {
        /* EAGAIN: none was signalled; look all the same */
    }
    if (!m->started)
        return 0;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n && n < max; i++) {
        if (!m->w[i].over || m->w[i].told)
            continue;
        m->w[i].told = 1;
        out[n].key = m->w[i].key;
        memcpy(out[n].detail, m->w[i].detail, sizeof out[n].detail);
        n++;
    }
    int more = 0;
    for (size_t i = 0; i < m->n && !more; i++)
        more = m->w[i].over && !m->w[i].told;
    pthread_mutex_unlock(&m->mu);
    if (more) { /* what did not fit in out: readable again for the next call */
        uint64_t one = 1;
        ssize_t w = write(m->fd, &one, sizeof one);
        (void)w;
    }
    return n;
}

void local_disk_free(local_disk *m)
{
    if (!m)
        return;
    if (m->started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    if (m->fd >= 0)
        close(m->fd);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m->w);
    free(m->jobs_dir);
    free(m);
}
