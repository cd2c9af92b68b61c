/*
 * data.h - datasets in the idx-ubyte format of MNIST and Fashion-MNIST.
 *
 * A split ("train" or "t10k") is two files in one directory: <split>-images-idx3-ubyte
 * and <split>-labels-idx1-ubyte, each optionally gzip-compressed (".gz", as Debian's
 * dataset-fashion-mnist installs them; the original MNIST spelling "train-images.idx3-ubyte"
 * is accepted too). Images of any shape work: a sample is the product of the dimensions
 * after the first. Pixels stay uint8 in memory and are normalised when a batch is gathered,
 * with the mean and standard deviation of the training split, so every rank and every
 * device computes the same inputs.
 */
#ifndef TY_RUNTIME_DATA_H
#define TY_RUNTIME_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

/* The largest idx payload accepted (a bound on what an untrusted header may claim). */
#define DATA_MAX_BYTES ((size_t)16 << 30)

typedef struct dataset {
    uint8_t *images; /* owned; n * dim bytes, one sample after another */
    uint8_t *labels; /* owned; n bytes */
    size_t n;        /* samples */
    size_t dim;      /* features per sample */
    int n_classes;   /* 1 + the largest label */
} dataset;

/*
 * Reads one idx file of unsigned bytes (raw or gzip). On TY_OK *data is new (free()),
 * dims[0..*ndims) hold the dimensions (at most 4). TY_ENOTFOUND if the file cannot be
 * opened, TY_EINVAL for a bad magic number, an element type other than ubyte, a size
 * past DATA_MAX_BYTES, a truncated payload or trailing bytes; TY_ENOMEM.
 */
ty_err data_read_idx(const char *path, uint8_t **data, size_t dims[4], int *ndims, char *err,
                     size_t errlen);

/*
 * Loads split `split` ("train", "t10k") from directory dir into *out (zeroed first; free
 * with data_free). Errors as data_read_idx, plus TY_EINVAL when images and labels
 * disagree on the sample count or there are fewer than two classes. A file of the split that
 * is in none of the spellings is TY_ENOTFOUND, whose message names every path tried.
 */
ty_err data_load(const char *dir, const char *split, dataset *out, char *err, size_t errlen);

/* Whether dir holds a training split's images, in any spelling data_load accepts. */
int data_present(const char *dir);

/* Frees what data_load allocated and zeroes *d. Accepts NULL and a zeroed dataset. */
void data_free(dataset *d);

/* Keeps only the first n samples (no-op when n == 0 or n >= d->n). */
void data_limit(dataset *d, size_t n);

/* Mean and standard deviation of all pixel values scaled to [0, 1]. std is at least 1e-6. */
void data_pixel_stats(const dataset *d, float *mean, float *std);

/* The normalised value of every byte: lut[v] = (v / 255 - mean) * inv_std (the GPU uses it too). */
void data_input_lut(float mean, float inv_std, float lut[256]);

/*
 * Gathers samples idx[0..n) into x (n * dim floats, (pixel / 255 - mean) * inv_std) and
 * their labels into y (n bytes). Indices must be < d->n.
 */
void data_gather(const dataset *d, const uint32_t *idx, size_t n, float mean, float inv_std,
                 float *x, uint8_t *y);

#endif
