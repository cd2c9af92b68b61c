/*
 * test_train.c - train_run() in this process with one rank: a full run, resuming a
 * finished run, a stop request, the report and the files it leaves.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "runtime/config.h"
#include "runtime/train.h"
#include "tests/runtime/rt_testdata.h"

static char dir[4096], data[4200], ckpt[4200], ckpt2[4200], outdir[4200];

static int setup(void **state)
{
    (void)state;
    if (rt_make_tempdir(dir, sizeof dir, "train") != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(ckpt2, sizeof ckpt2, "%s/ckpt2", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    if (mkdir(data, 0755) != 0 || mkdir(outdir, 0755) != 0)
        return -1;
    return rt_write_dataset(data, 512, 200, 21);
}

static int teardown(void **state)
{
    (void)state;
    rt_remove_tree(dir);
    return 0;
}

static void small_config(worker_config *c, const char *ckpt_dir)
{
    config_defaults(c);
    c->data_dir = data;
    c->hidden[0] = 32;
    c->n_hidden = 1;
    c->epochs = 2;
    c->batch = 64;
    c->log_every = 3;
    c->threads = 1;
    c->checkpoint_dir = ckpt_dir;
    c->checkpoint_every = 5;
    c->output_dir = outdir;
}

/* Runs and returns what it printed (new string). */
static char *run(const worker_config *c, const volatile sig_atomic_t *stop, train_report *rep,
                 ty_err expect)
{
    char err[512] = "";
    FILE *out = tmpfile();
    assert_non_null(out);
    ty_err rc = train_run(c, stop, out, rep, err, sizeof err);
    if (rc != expect)
        fail_msg("train_run returned %d, expected %d: %s", rc, expect, err);
    long len = ftell(out);
    char *text = calloc((size_t)len + 1, 1);
    rewind(out);
    assert_int_equal(fread(text, 1, (size_t)len, out), (size_t)len);
    fclose(out);
    return text;
}

static train_report first;

static void test_full_run(void **state)
{
    (void)state;
    worker_config c;
    small_config(&c, ckpt);
    char *text = run(&c, NULL, &first, TY_OK);
    assert_int_equal(first.steps, 16); /* 2 epochs of 512 / 64 */
    assert_false(first.preempted);
    assert_true(first.test_accuracy > 0.5); /* 10 classes: chance is 0.1 */
    assert_true(first.param_l2 > 0 && first.train_loss > 0 && first.samples_per_s > 0);
    static const char *const events[] = {"\"event\":\"start\"", "\"event\":\"log\"",
                                         "\"event\":\"epoch\"", "\"event\":\"checkpoint\"",
                                         "\"event\":\"done\""};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        if (!strstr(text, events[i]))
            fail_msg("output lacks %s:\n%s", events[i], text);
    free(text);

    /* The final parameters went to the output directory, and their norm is param_l2. */
    char path[4300];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/params.f32", outdir);
    float *p = (float *)rt_read_file(path, &len);
    assert_non_null(p);
    double sq = 0;
    for (size_t i = 0; i < len / sizeof(float); i++)
        sq += (double)p[i] * p[i];
    assert_float_equal(sqrt(sq), first.param_l2, 1e-9 * first.param_l2);
    free(p);
    snprintf(path, sizeof path, "%s/result.json", outdir);
    char *result = rt_read_file(path, NULL);
    assert_non_null(result);
    assert_non_null(strstr(result, "\"test_accuracy\""));
    free(result);
    /* Checkpoints at 5, 10, 15 and the end; two kept. */
    struct stat st;
    snprintf(path, sizeof path, "%s/step-%012d/manifest.json", ckpt, 16);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/step-%012d/manifest.json", ckpt, 15);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/step-%012d", ckpt, 10);
    assert_int_not_equal(stat(path, &st), 0);
}

static void test_finished_run_resumes_to_the_same_model(void **state)
{
    (void)state;
    worker_config c;
    train_report rep;
    small_config(&c, ckpt);
    char *text = run(&c, NULL, &rep, TY_OK);
    assert_non_null(strstr(text, "\"event\":\"resume\""));
    assert_int_equal(rep.start_step, 16);
    assert_int_equal(rep.steps, 16);
    assert_true(rep.param_l2 == first.param_l2);
    assert_true(rep.test_accuracy == first.test_accuracy);
    free(text);
}

static void test_stop_request_checkpoints_and_resumes(void **state)
{
    (void)state;
    worker_config c;
    train_report rep;
    volatile sig_atomic_t stop = 1;
    small_config(&c, ckpt2);
    char *text = run(&c, &stop, &rep, TY_OK);
    assert_true(rep.preempted);
    /* The vote travels with the first step's collectives: the run stops after that step. */
    assert_int_equal(rep.steps, 1);
    assert_non_null(strstr(text, "\"event\":\"preempted\""));
    assert_null(strstr(text, "\"event\":\"done\""));
    free(text);
    stop = 0;
    text = run(&c, &stop, &rep, TY_OK);
    assert_false(rep.preempted);
    assert_int_equal(rep.steps, 16);
    /* Same seed, same order, same process: the interrupted run ends where the first did. */
    assert_float_equal(rep.param_l2, first.param_l2, 1e-6 * first.param_l2);
    free(text);
}

static void test_errors(void **state)
{
    (void)state;
    worker_config c;
    train_report rep;
    small_config(&c, NULL);
    c.data_dir = "/nonexistent/data";
    free(run(&c, NULL, &rep, TY_ENOTFOUND));
    /* A checkpoint of another model is refused rather than misread. */
    small_config(&c, ckpt);
    c.hidden[0] = 16;
    free(run(&c, NULL, &rep, TY_EINVAL));
    small_config(&c, ckpt);
    c.optim.kind = OPTIM_SGD;
    free(run(&c, NULL, &rep, TY_EINVAL));
}

/* An output directory that is not there is made; one that cannot be made fails the run before
 * it trains, and no "done" is told. */
static void test_output_directory(void **state)
{
    (void)state;
    worker_config c;
    train_report rep;
    char nested[4300], blocked[4400], path[4400];
    snprintf(nested, sizeof nested, "%s/new/out", dir);
    small_config(&c, NULL);
    c.output_dir = nested;
    free(run(&c, NULL, &rep, TY_OK));
    snprintf(path, sizeof path, "%s/result.json", nested);
    char *result = rt_read_file(path, NULL);
    assert_non_null(result);
    free(result);

    /* Under a regular file: nothing can be made there. */
    snprintf(blocked, sizeof blocked, "%s/result.json/out", nested);
    small_config(&c, NULL);
    c.output_dir = blocked;
    char *text = run(&c, NULL, &rep, TY_EIO);
    assert_int_equal(rep.steps, 0);
    assert_null(strstr(text, "\"event\":\"done\""));
    assert_non_null(strstr(text, "output directory"));
    free(text);
}

int main(void)
{
    /* In order: later cases use the first run's checkpoints and report. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_run),
        cmocka_unit_test(test_finished_run_resumes_to_the_same_model),
        cmocka_unit_test(test_stop_request_checkpoints_and_resumes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_output_directory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
