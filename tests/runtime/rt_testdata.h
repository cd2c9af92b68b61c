/*
 * rt_testdata.h - synthetic idx datasets and process helpers for the runtime's tests.
 *
 * The dataset is a learnable 10-class problem in Fashion-MNIST's format (28x28 bytes):
 * every class has a random prototype image, every sample is its class's prototype plus
 * noise. The train split is written gzip-compressed, the test split raw, so both paths of
 * the reader are used.
 */
#ifndef TY_TESTS_RT_TESTDATA_H
#define TY_TESTS_RT_TESTDATA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Creates a fresh directory under $TMPDIR (or /tmp) and writes its path into buf. 0 on success. */
int rt_make_tempdir(char *buf, size_t len, const char *tag);

/* Removes a directory tree (best effort). */
void rt_remove_tree(const char *path);

/* Writes train-*-idx*-ubyte.gz (n_train) and t10k-*-idx*-ubyte (n_test) into dir. 0 on success. */
int rt_write_dataset(const char *dir, size_t n_train, size_t n_test, uint64_t seed);

/* Writes an idx file of unsigned bytes; gz selects gzip. 0 on success. */
int rt_write_idx(const char *path, int gz, const uint32_t *dims, int ndims, const uint8_t *data);

/*
 * Starts a process: argv[0] is the program; env is a NULL-terminated list of "NAME=VALUE"
 * added to the environment (may be NULL); stdout and stderr go to the given files (NULL
 * keeps them). Returns the pid, or -1.
 */
pid_t rt_spawn(char *const argv[], char *const env[], const char *out_path, const char *err_path);

/*
 * Waits up to timeout_s for pid. Returns its exit status (128 + signal when killed), or -1
 * when it is still running at the deadline (it is then left running).
 */
int rt_wait(pid_t pid, double timeout_s);

/* Reads a whole file into a new NUL-terminated buffer (free()); NULL on failure. */
char *rt_read_file(const char *path, size_t *len);

/* Polls until the file contains needle or timeout_s passes. 1 when found. */
int rt_wait_for_text(const char *path, const char *needle, double timeout_s);


/* Relative L2 distance ||a - b|| / ||b|| of two float vectors. */
double rt_rel_l2(const float *a, const float *b, size_t n);

#endif
