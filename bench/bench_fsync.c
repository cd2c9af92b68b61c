/*
 * bench_fsync.c - the raw durable-write rate of a disk.
 *
 * Writes BLOCK bytes and calls fdatasync() in a loop for a fixed time, in a
 * scratch file inside the given directory, and prints how many such durable
 * writes the disk completes per second and the latency of one of them. A
 * database that acknowledges a commit only after it is on disk can commit at
 * most this often from one writer, so the server benchmark quotes its commit
 * rate as a ratio to this figure.
 *
 * The file is preallocated and fsync'ed first and then overwritten in place
 * (rolling over WINDOW bytes), so each fdatasync() flushes data only, not a
 * changed file size: the same work as a commit into SQLite's WAL once the WAL
 * has reached its steady size. --append measures the growing-file case.
 *
 * Output: one line of key=value pairs on stdout. Exit status 0 on success,
 * 1 on an I/O error, 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WINDOW (1024 * 1024) /* bytes rewritten in a loop: well inside any disk cache line */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted samples (n >= 1). */
static double percentile(const double *sorted, size_t n, double p)
{
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_fsync --dir DIR [--duration SECONDS] [--block BYTES] [--append]\n"
               "Writes BYTES (default 4096) + fdatasync in a loop for SECONDS (default 2)\n"
               "in a scratch file in DIR and prints the rate.\n");
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    double duration = 2.0, block_d = 4096;
    int append = 0;
    static const struct option longopts[] = {
        {"dir", required_argument, NULL, 'd'},   {"duration", required_argument, NULL, 't'},
        {"block", required_argument, NULL, 'b'}, {"append", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:t:b:ah", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 't':
            if (parse_double(optarg, 0.1, 3600, &duration) != 0) {
                fprintf(stderr, "bench_fsync: bad --duration '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b':
            if (parse_double(optarg, 512, WINDOW, &block_d) != 0) {
                fprintf(stderr, "bench_fsync: bad --block '%s' (512..%d)\n", optarg, WINDOW);
                return 2;
            }
            break;
        case 'a':
            append = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (dir == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }

    int rc = 1, fd = -1;
    char *buf = NULL;
    double *lat = NULL;
    size_t nlat = 0, caplat = 0;
    size_t block = (size_t)block_d;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/bench_fsync.%ld", dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof path) {
        fprintf(stderr, "bench_fsync: directory path too long\n");
        return 2;
    }

    buf = malloc(WINDOW);
    if (buf == NULL)
        goto out;
    memset(buf, 'x', WINDOW);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench_fsync: open %s: %s\n", path, strerror(errno));
        goto out;
    }
    if (!append) {
        if (pwrite(fd, buf, WINDOW, 0) != WINDOW || fsync(fd) != 0) {
            fprintf(stderr, "bench_fsync: preallocate %s: %s\n", path, strerror(errno));
            goto out;
        }
    }

    double t0 = now_s(), t_end = t0 + duration, t = t0;
    off_t off = 0;
    while (t < t_end) {
        if (pwrite(fd, buf, block, off) != (ssize_t)block || fdatasync(fd) != 0) {
            fprintf(stderr, "bench_fsync: write/fdatasync %s: %s\n", path, strerror(errno));
            goto out;
        }
        double t1 = now_s();
        if (nlat == caplat) {
            size_t ncap = caplat ? caplat * 2 : 4096;
            double *nl = realloc(lat, ncap * sizeof *nl);
            if (nl == NULL)
                goto out;
            lat = nl;
            caplat = ncap;
        }
        lat[nlat++] = (t1 - t) * 1000.0;
        t = t1;
        off += (off_t)block;
        if (!append && off + (off_t)block > WINDOW)
            off = 0;
    }
    double elapsed = t - t0;
    qsort(lat, nlat, sizeof *lat, cmp_double);
    printf("mode=fsync block=%zu append=%d duration_s=%.2f fsyncs=%zu fsync_per_s=%.1f "
           "p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
           block, append, elapsed, nlat, (double)nlat / elapsed, percentile(lat, nlat, 50),
           percentile(lat, nlat, 99), lat[nlat - 1]);
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(buf);
    free(lat);
    return rc;
}
