/*
 * bench_util.h - helpers the server benchmarks share: clocks, a growable buffer,
 * percentiles, /proc CPU figures, option parsing, and a `trainyard serve` started
 * on a temporary data directory and stopped again.
 *
 * bench_init() names the program (the prefix of its messages) and the server that
 * bench_die() stops; call it first.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* A growable byte buffer (NUL-terminated). */
typedef struct bench_buf {
    char *data;
    size_t len, cap;
} bench_buf;

typedef struct bench_server {
    char root[256]; /* the temporary directory */
    char data[300]; /* root/data: the data directory */
    char db[340];
    char log[300];
    char url[96];
    char token[80]; /* the admin token: set it before bench_start_server() */
    pid_t pid;
    int keep_on_exit; /* keep root (--keep, or after a failure, for its logs) */
} bench_server;

/* prog: "bench_metrics" and the like; srv: the server bench_die() stops (may be NULL). */
void bench_init(const char *prog, bench_server *srv);

double bench_mono_ms(void);
int64_t bench_real_ns(void);
double bench_real_ms(void); /* CLOCK_REALTIME, the clock the server stamps events with */
void bench_sleep_us(long us);

/* Prints "<prog>: <message>" and the server's log path, stops the server keeping
 * its directory, and exits 1. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

int bench_buf_add(bench_buf *b, const char *p, size_t n);
void bench_buf_reset(bench_buf *b);

/* qsort comparator of doubles; nearest-rank percentile p (0..100] of n sorted values
 * (0 when n is 0). */
int bench_cmp_double(const void *a, const void *b);
double bench_percentile(const double *sorted, size_t n, double p);

/* A whole file (new, NUL-terminated); NULL when absent. */
char *bench_slurp(const char *path);
/* CPU seconds so far (user + system) of process pid, and of this process. */
double bench_proc_cpu_s(pid_t pid);
double bench_self_cpu_s(void);

/* A decimal integer in [lo, hi] into *out: 0, or -1 when s is not one. */
int bench_parse_int(const char *s, int lo, int hi, int *out);

/* Starts `trainyard serve --listen 127.0.0.1:0 --db DB ARGS...` (args NULL-terminated)
 * on a new temporary directory, with our environment less TRAINYARD_* plus
 * TRAINYARD_ADMIN_TOKEN=srv->token, and waits for its "listening" line (srv->url).
 * Dies on failure. */
void bench_start_server(bench_server *srv, const char *trainyard, const char *const *args,
                        int start_timeout_ms);
/* SIGTERM and wait (SIGKILL after 30 s); removes the directory unless keep_on_exit. */
void bench_stop_server(bench_server *srv);

#endif
