/*
 * data.c - idx-ubyte reader (zlib reads raw and gzip files alike) and batch gathering.
 *
 * idx format: a big-endian u32 magic 0x0000TTNN (TT = 0x08 for unsigned bytes, NN = number
 * of dimensions), NN big-endian u32 dimensions, then the payload in row-major order.
 */
#include "runtime/data.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/rt_error.h"

#define IDX_TYPE_UBYTE 0x08
#define IDX_MAX_DIMS 4
#define GZ_CHUNK ((size_t)1 << 30) /* gzread() takes an unsigned length */

/* Reads exactly n bytes; returns how many were read (< n at end of file or on error). */
static size_t gz_read_full(gzFile f, void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < GZ_CHUNK ? n - done : GZ_CHUNK;
        int got = gzread(f, (char *)buf + done, (unsigned)want);
        if (got <= 0)
            break;
        done += (size_t)got;
    }
    return done;
}

static uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

ty_err data_read_idx(const char *path, uint8_t **data, size_t dims[4], int *ndims, char *err,
                     size_t errlen)
{
    ty_err rc = TY_EINVAL;
    gzFile f = NULL;
    uint8_t *buf = NULL;
    unsigned char hdr[4 + 4 * IDX_MAX_DIMS];

    f = gzopen(path, "rb");
    if (!f) {
        rt_errf(err, errlen, "%s: cannot open", path);
        rc = TY_ENOTFOUND;
        goto out;
    }
    if (gz_read_full(f, hdr, 4) != 4) {
        rt_errf(err, errlen, "%s: shorter than an idx header", path);
        goto out;
    }
    int nd = hdr[3];
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != IDX_TYPE_UBYTE || nd < 1 || nd > IDX_MAX_DIMS) {
        rt_errf(err, errlen, "%s: not an idx file of unsigned bytes (magic %02x%02x%02x%02x)", path,
                hdr[0], hdr[1], hdr[2], hdr[3]);
        goto out;
    }
    if (gz_read_full(f, hdr + 4, 4 * (size_t)nd) != 4 * (size_t)nd) {
        rt_errf(err, errlen, "%s: truncated idx header", path);
        goto out;
    }
    size_t total = 1;
    for (int i = 0; i < nd; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] != 0 && total > DATA_MAX_BYTES / dims[i]) {
            rt_errf(err, errlen, "%s: payload larger than %zu bytes", path, (size_t)DATA_MAX_BYTES);
            goto out;
        }
        total *= dims[i];
    }
    buf = malloc(total ? total : 1);
    if (!buf) {
        rc = TY_ENOMEM;
        rt_errf(err, errlen, "%s: out of memory for %zu bytes", path, total);
        goto out;
    }
    size_t got = gz_read_full(f, buf, total);
    if (got != total) {
        rt_errf(err, errlen, "%s: truncated after %zu of %zu payload bytes", path, got, total);
        goto out;
    }
    unsigned char extra;
    if (gzread(f, &extra, 1) != 0) {
        rt_errf(err, errlen, "%s: trailing bytes after the payload", path);
        goto out;
    }
    *data = buf;
    buf = NULL;
    *ndims = nd;
    rc = TY_OK;
out:
    free(buf);
    if (f)
        gzclose(f);
    return rc;
}

/* The path of spelling i (0..3) of <split>-<kind>-idxN-ubyte[.gz] in dir; -1 when too long. */
static int idx_spelling(int i, const char *dir, const char *split, const char *kind, int nd,
                        char *path, size_t pathlen)
{
    int n;
    switch (i) { /* one literal format per spelling keeps -Wformat-nonliteral quiet */
    case 0: n = snprintf(path, pathlen, "%s/%s-%s-idx%d-ubyte.gz", dir, split, kind, nd); break;
    case 1: n = snprintf(path, pathlen, "%s/%s-%s-idx%d-ubyte", dir, split, kind, nd); break;
    case 2: n = snprintf(path, pathlen, "%s/%s-%s.idx%d-ubyte.gz", dir, split, kind, nd); break;
    default: n = snprintf(path, pathlen, "%s/%s-%s.idx%d-ubyte", dir, split, kind, nd); break;
    }
    return n < 0 || (size_t)n >= pathlen ? -1 : 0;
}

/*
 * Finds the first existing spelling of <split>-<kind>-idxN-ubyte[.gz] in dir. When there is
 * none the message names every path tried, absolute (a relative dir is read from the working
 * directory, which the reader of the message may not know), and says when dir itself is missing.
 */
static ty_err find_idx(const char *dir, const char *split, const char *kind, int nd, char *path,
                       size_t pathlen, char *err, size_t errlen)
{
    for (int i = 0; i < 4; i++) {
        if (idx_spelling(i, dir, split, kind, nd, path, pathlen) < 0) {
            rt_errf(err, errlen, "data directory path too long");
            return TY_EINVAL;
        }
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            return TY_OK;
        }
    }
    char cwd[2048] = "", abs[2048], tried[4 * 2048 + 64] = "";
    if (dir[0] != '/' && !getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    if (snprintf(abs, sizeof abs, "%s%s%s", cwd, cwd[0] ? "/" : "", dir) >= (int)sizeof abs)
        snprintf(abs, sizeof abs, "%s", dir);
    size_t used = 0;
    for (int i = 0; i < 4; i++) {
        char one[2100];
        if (idx_spelling(i, abs, split, kind, nd, one, sizeof one) < 0)
            break;
        int n = snprintf(tried + used, sizeof tried - used, "%s%s", i ? ", " : "", one);
        if (n < 0 || (size_t)n >= sizeof tried - used)
            break;
        used += (size_t)n;
    }
    struct stat st;
    const char *why = stat(dir, &st) != 0 ? " (the directory does not exist)"
                      : !S_ISDIR(st.st_mode) ? " (not a directory)" : "";
    rt_errf(err, errlen, "%s: no %s-%s-idx%d-ubyte[.gz] file%s; looked for %s", abs, split, kind,
            nd, why, tried);
    return TY_ENOTFOUND;
}

int data_present(const char *dir)
{
    char path[4096];
    for (int i = 0; i < 4; i++) {
        if (idx_spelling(i, dir, "train", "images", 3, path, sizeof path) < 0)
            return 0;
        if (access(path, R_OK) == 0)
            return 1;
    }
    return 0;
}

ty_err data_load(const char *dir, const char *split, dataset *out, char *err, size_t errlen)
{
    ty_err rc;
    char path[4096];
    size_t idims[IDX_MAX_DIMS], ldims[IDX_MAX_DIMS];
    int ind = 0, lnd = 0;
    dataset d = {0};

    memset(out, 0, sizeof *out);
    rc = find_idx(dir, split, "images", 3, path, sizeof path, err, errlen);
    if (rc != TY_OK)
        goto out;
    rc = data_read_idx(path, &d.images, idims, &ind, err, errlen);
    if (rc != TY_OK)
        goto out;
    rc = find_idx(dir, split, "labels", 1, path, sizeof path, err, errlen);
    if (rc != TY_OK)
        goto out;
    rc = data_read_idx(path, &d.labels, ldims, &lnd, err, errlen);
    if (rc != TY_OK)
        goto out;
    rc = TY_EINVAL;
    if (ind < 2 || lnd != 1 || idims[0] != ldims[0] || idims[0] == 0) {
        rt_errf(err, errlen, "%s: %s images and labels disagree (%zu vs %zu samples)", dir, split,
                idims[0], ldims[0]);
        goto out;
    }
    d.n = idims[0];
    d.dim = 1;
    for (int i = 1; i < ind; i++)
        d.dim *= idims[i];
    int maxl = 0;
    for (size_t i = 0; i < d.n; i++)
        if (d.labels[i] > maxl)
            maxl = d.labels[i];
    d.n_classes = maxl + 1;
    if (d.n_classes < 2 || d.dim == 0) {
        rt_errf(err, errlen, "%s: %s has fewer than two classes or empty samples", dir, split);
        goto out;
    }
    *out = d;
    memset(&d, 0, sizeof d);
    rc = TY_OK;
out:
    data_free(&d);
    return rc;
}

void data_free(dataset *d)
{
    if (!d)
        return;
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

void data_limit(dataset *d, size_t n)
{
    if (n > 0 && n < d->n)
        d->n = n;
}

void data_pixel_stats(const dataset *d, float *mean, float *std)
{
    /* A histogram of byte values keeps this exact and fast for any size. */
    uint64_t hist[256] = {0};
    size_t total = d->n * d->dim;
    for (size_t i = 0; i < total; i++)
        hist[d->images[i]]++;
    double s = 0, s2 = 0;
    for (int v = 0; v < 256; v++) {
        double x = v / 255.0;
        s += (double)hist[v] * x;
        s2 += (double)hist[v] * x * x;
    }
    double m = total ? s / (double)total : 0;
    double var = total ? s2 / (double)total - m * m : 0;
    double sd = var > 0 ? sqrt(var) : 0;
    *mean = (float)m;
    *std = sd < 1e-6 ? 1e-6f : (float)sd;
}

void data_input_lut(float mean, float inv_std, float lut[256])
{
    for (int v = 0; v < 256; v++)
        lut[v] = ((float)v / 255.0f - mean) * inv_std;
}

void data_gather(const dataset *d, const uint32_t *idx, size_t n, float mean, float inv_std,
                 float *x, uint8_t *y)
{
    float lut[256];
    data_input_lut(mean, inv_std, lut);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = d->images + (size_t)idx[i] * d->dim;
        float *dst = x + i * d->dim;
        for (size_t k = 0; k < d->dim; k++)
            dst[k] = lut[src[k]];
        y[i] = d->labels[idx[i]];
    }
}
