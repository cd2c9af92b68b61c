/*
 * rt_testdata.c - synthetic datasets and process helpers for the runtime's tests.
 */
#define _XOPEN_SOURCE 700 /* nftw */

#include "tests/runtime/rt_testdata.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/rng.h"

int rt_make_tempdir(char *buf, size_t len, const char *tag)
{
    const char *base = getenv("TMPDIR");
    int n = snprintf(buf, len, "%s/ty-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (n < 0 || (size_t)n >= len)
        return -1;
    return mkdtemp(buf) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void rt_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

int rt_write_idx(const char *path, int gz, const uint32_t *dims, int ndims, const uint8_t *data)
{
    unsigned char head[4 + 4 * 4];
    size_t total = 1;
    head[0] = head[1] = 0;
    head[2] = 0x08;
    head[3] = (unsigned char)ndims;
    for (int i = 0; i < ndims; i++) {
        put_be32(head + 4 + 4 * i, dims[i]);
        total *= dims[i];
    }
    size_t hlen = 4 + 4 * (size_t)ndims;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f)
            return -1;
        int ok = gzwrite(f, head, (unsigned)hlen) == (int)hlen &&
                 (total == 0 || gzwrite(f, data, (unsigned)total) == (int)total);
        return gzclose(f) == Z_OK && ok ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(head, 1, hlen, f) == hlen && fwrite(data, 1, total, f) == total;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int write_split(const char *dir, const char *split, int gz, size_t n,
                       const uint8_t *protos, rng *r)
{
    const size_t dim = 28 * 28;
    char path[4096];
    uint8_t *img = malloc(n * dim), *lab = malloc(n ? n : 1);
    int rc = -1;
    if (!img || !lab)
        goto out;
    for (size_t i = 0; i < n; i++) {
        int c = (int)rng_below(r, 10);
        lab[i] = (uint8_t)c;
        for (size_t k = 0; k < dim; k++) {
            int v = protos[(size_t)c * dim + k] + (int)rng_below(r, 161) - 80;
            img[i * dim + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    uint32_t idims[3] = {(uint32_t)n, 28, 28}, ldims[1] = {(uint32_t)n};
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
    if (rt_write_idx(path, gz, idims, 3, img) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, split, gz ? ".gz" : "");
    if (rt_write_idx(path, gz, ldims, 1, lab) != 0)
        goto out;
    rc = 0;
out:
    free(img);
    free(lab);
    return rc;
}

int rt_write_dataset(const char *dir, size_t n_train, size_t n_test, uint64_t seed)
{
    uint8_t protos[10 * 28 * 28];
    rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < sizeof protos; i++)
        protos[i] = (uint8_t)rng_below(&r, 256);
    if (write_split(dir, "train", 1, n_train, protos, &r) != 0)
        return -1;
    return write_split(dir, "t10k", 0, n_test, protos, &r);
}

pid_t rt_spawn(char *const argv[], char *const env[], const char *out_path, const char *err_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    for (size_t i = 0; env && env[i]; i++) {
        char *kv = strdup(env[i]);
        char *eq = kv ? strchr(kv, '=') : NULL;
        if (!eq)
            _exit(126);
        *eq = '\0';
        setenv(kv, eq + 1, 1);
    }
    if (out_path) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0)
            _exit(126);
        close(fd);
    }
    if (err_path) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(126);
        close(fd);
    }
    execv(argv[0], argv);
    _exit(127);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

int rt_wait(pid_t pid, double timeout_s)
{
    double end = mono() + timeout_s;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(status))
                return WEXITSTATUS(status);
            if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
            return -1;
        }
        if (r < 0 && errno != EINTR)
            return -1;
        if (mono() > end)
            return -1;
        nap();
    }
}

char *rt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = n;
    }
    return buf;
}

int rt_wait_for_text(const char *path, const char *needle, double timeout_s)
{
    double end = mono() + timeout_s;
    while (mono() < end) {
        char *s = rt_read_file(path, NULL);
        int found = s && strstr(s, needle);
        free(s);
        if (found)
            return 1;
        nap();
    }
    return 0;
}

double rt_rel_l2(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - (double)b[i];
        d += x * x;
        s += (double)b[i] * (double)b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}
