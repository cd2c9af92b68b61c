/*
 * test_data.c - the idx reader (raw and gzip, malformed files) and batch gathering.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/data.h"
#include "tests/runtime/rt_testdata.h"

static char dir[4096];

static int setup(void **state)
{
    (void)state;
    return rt_make_tempdir(dir, sizeof dir, "data");
}

static int teardown(void **state)
{
    (void)state;
    rt_remove_tree(dir);
    return 0;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void write_bytes(const char *name, const void *p, size_t n)
{
    char path[4200];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void test_read_idx_raw_and_gzip(void **state)
{
    (void)state;
    uint8_t payload[2 * 3 * 4];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i * 7);
    uint32_t dims[3] = {2, 3, 4};
    for (int gz = 0; gz <= 1; gz++) {
        char path[4200];
        path_of(path, sizeof path, gz ? "a.idx.gz" : "a.idx");
        assert_int_equal(rt_write_idx(path, gz, dims, 3, payload), 0);
        uint8_t *data = NULL;
        size_t got[4];
        int nd = 0;
        char err[256];
        assert_int_equal(data_read_idx(path, &data, got, &nd, err, sizeof err), TY_OK);
        assert_int_equal(nd, 3);
        assert_int_equal(got[0], 2);
        assert_int_equal(got[1], 3);
        assert_int_equal(got[2], 4);
        assert_memory_equal(data, payload, sizeof payload);
        free(data);
    }
}

static void test_read_idx_rejects_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned char bytes[16];
        size_t len;
        ty_err expect;
    } cases[] = {
        {"empty", {0}, 0, TY_EINVAL},
        {"short-magic", {0, 0, 8}, 3, TY_EINVAL},
        {"float-type", {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}, 12, TY_EINVAL},
        {"bad-first-bytes", {1, 0, 8, 1, 0, 0, 0, 1, 5}, 9, TY_EINVAL},
        {"zero-dims", {0, 0, 8, 0}, 4, TY_EINVAL},
        {"five-dims", {0, 0, 8, 5}, 4, TY_EINVAL},
        {"short-dims", {0, 0, 8, 2, 0, 0, 0, 1}, 8, TY_EINVAL},
        {"truncated", {0, 0, 8, 1, 0, 0, 0, 4, 1, 2}, 10, TY_EINVAL},
        {"trailing", {0, 0, 8, 1, 0, 0, 0, 1, 9, 9}, 10, TY_EINVAL},
        {"huge", {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 12, TY_EINVAL},
        {"ok", {0, 0, 8, 1, 0, 0, 0, 2, 4, 5}, 10, TY_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4200];
        write_bytes(cases[i].name, cases[i].bytes, cases[i].len);
        path_of(path, sizeof path, cases[i].name);
        uint8_t *data = NULL;
        size_t dims[4];
        int nd;
        char err[256] = "";
        ty_err rc = data_read_idx(path, &data, dims, &nd, err, sizeof err);
        if (rc != cases[i].expect)
            fail_msg("case %s: got %d (%s)", cases[i].name, rc, err);
        if (rc == TY_OK)
            free(data);
        else
            assert_true(strlen(err) > 0);
    }
    uint8_t *data;
    size_t dims[4];
    int nd;
    assert_int_equal(data_read_idx("/nonexistent/x", &data, dims, &nd, NULL, 0), TY_ENOTFOUND);
}

static void test_load_split(void **state)
{
    (void)state;
    char sub[4200];
    path_of(sub, sizeof sub, "ds");
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(rt_write_dataset(sub, 300, 50, 9), 0);
    dataset train, test;
    char err[256];
    assert_int_equal(data_load(sub, "train", &train, err, sizeof err), TY_OK);
    assert_int_equal(data_load(sub, "t10k", &test, err, sizeof err), TY_OK);
    assert_int_equal(train.n, 300);
    assert_int_equal(test.n, 50);
    assert_int_equal(train.dim, 784);
    assert_int_equal(train.n_classes, 10);
    data_limit(&train, 100);
    assert_int_equal(train.n, 100);
    data_limit(&train, 0);
    assert_int_equal(train.n, 100);
    data_free(&train);
    data_free(&test);
    data_free(NULL);
    assert_int_equal(data_load(sub, "nosuchsplit", &train, err, sizeof err), TY_ENOTFOUND);
}

static void test_load_rejects_count_mismatch(void **state)
{
    (void)state;
    char sub[4200], path[4300];
    path_of(sub, sizeof sub, "mismatch");
    assert_int_equal(mkdir(sub, 0755), 0);
    uint8_t img[3 * 4] = {0}, lab[2] = {0, 1};
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {2};
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", sub);
    assert_int_equal(rt_write_idx(path, 0, idims, 3, img), 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", sub);
    assert_int_equal(rt_write_idx(path, 0, ldims, 1, lab), 0);
    dataset d;
    char err[256];
    assert_int_equal(data_load(sub, "train", &d, err, sizeof err), TY_EINVAL);
    assert_non_null(strstr(err, "disagree"));
}

/*
 * A directory without the data set: the message names the file, every full path tried (a
 * relative directory made absolute) and a directory that does not exist; data_present() agrees.
 */
static void test_missing_data_set_names_the_paths(void **state)
{
    (void)state;
    char empty[4200], want[4400], err[2048], cwd[2048];
    dataset d;
    path_of(empty, sizeof empty, "nodata");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_false(data_present(empty));
    assert_int_equal(data_load(empty, "train", &d, err, sizeof err), TY_ENOTFOUND);
    assert_non_null(strstr(err, "no train-images-idx3-ubyte[.gz] file"));
    assert_null(strstr(err, "does not exist"));
    static const char *const spellings[] = {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte",
                                            "train-images.idx3-ubyte.gz", "train-images.idx3-ubyte"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(want, sizeof want, "%s/%s", empty, spellings[i]);
        if (!strstr(err, want))
            fail_msg("%s is not named in: %s", want, err);
    }

    /* Relative to the working directory, and missing. */
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    ty_err rc = data_load("no/such/dir", "t10k", &d, err, sizeof err);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, TY_ENOTFOUND);
    snprintf(want, sizeof want, "%s/no/such/dir/t10k-images-idx3-ubyte.gz", dir);
    if (!strstr(err, want) || !strstr(err, "(the directory does not exist)"))
        fail_msg("%s and that the directory does not exist are not said in: %s", want, err);

    /* Any spelling counts as present. */
    write_bytes("nodata/train-images.idx3-ubyte", "", 0);
    assert_true(data_present(empty));
}

static void test_stats_and_gather(void **state)
{
    (void)state;
    uint8_t images[3 * 2] = {0, 255, 255, 255, 0, 0};
    uint8_t labels[3] = {2, 0, 1};
    dataset d = {.images = images, .labels = labels, .n = 3, .dim = 2, .n_classes = 3};
    float mean, sd;
    data_pixel_stats(&d, &mean, &sd);
    assert_float_equal(mean, 0.5, 1e-6);
    assert_float_equal(sd, 0.5, 1e-6);
    uint32_t idx[2] = {2, 0};
    float x[4];
    uint8_t y[2];
    data_gather(&d, idx, 2, mean, 1.0f / sd, x, y);
    static const float expect[4] = {-1, -1, -1, 1};
    for (int i = 0; i < 4; i++)
        assert_float_equal(x[i], expect[i], 1e-6);
    assert_int_equal(y[0], 1);
    assert_int_equal(y[1], 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_idx_raw_and_gzip),
        cmocka_unit_test(test_read_idx_rejects_malformed),
        cmocka_unit_test(test_load_split),
        cmocka_unit_test(test_load_rejects_count_mismatch),
        cmocka_unit_test(test_missing_data_set_names_the_paths),
        cmocka_unit_test(test_stats_and_gather),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
