/*
 * test_config.c - flags and the environment contract of `trainyard-worker train`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/config.h"

static void test_defaults_are_the_recipe(void **state)
{
    (void)state;
    worker_config c;
    config_defaults(&c);
    assert_string_equal(c.data_dir, CONFIG_DEFAULT_DATA_DIR);
    assert_int_equal(c.n_hidden, 2);
    assert_int_equal(c.hidden[0], 512);
    assert_int_equal(c.hidden[1], 512);
    assert_int_equal(c.optim.kind, OPTIM_ADAMW);
    assert_int_equal(c.batch, 256);
    assert_int_equal(c.world, 1);
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.timeout_s, 30);
    assert_null(c.checkpoint_dir);
    assert_int_equal(c.device, DEVICE_CPU);
    assert_true(c.bind);
}

static void test_flags(void **state)
{
    (void)state;
    static const struct {
        const char *args[4];
        int argc;
        ty_err rc;
        const char *err_has;
    } cases[] = {
        {{"--epochs", "3"}, 2, TY_OK, NULL},
        {{"--epochs=3"}, 1, TY_OK, NULL},
        {{"--epochs", "0"}, 2, TY_EINVAL, "--epochs"},
        {{"--epochs", "3x"}, 2, TY_EINVAL, "--epochs"},
        {{"--epochs"}, 1, TY_EINVAL, "needs a value"},
        {{"--lr", "nan"}, 2, TY_EINVAL, "--lr"},
        {{"--lr", "-1"}, 2, TY_EINVAL, "--lr"},
        {{"--hidden", "1024,256,64"}, 2, TY_OK, NULL},
        {{"--hidden", "512,,512"}, 2, TY_EINVAL, "--hidden"},
        {{"--hidden", "512,0"}, 2, TY_EINVAL, "--hidden"},
        {{"--hidden", "-5"}, 2, TY_EINVAL, "--hidden"},
        {{"--optimizer", "sgd"}, 2, TY_OK, NULL},
        {{"--optimizer", "adam"}, 2, TY_EINVAL, "--optimizer"},
        {{"--device", "cuda"}, 2, TY_OK, NULL},
        {{"--device", "tpu"}, 2, TY_EINVAL, "--device"},
        {{"--schedule", "constant"}, 2, TY_OK, NULL},
        {{"--bind", "none"}, 2, TY_OK, NULL},
        {{"--bind", "numa"}, 2, TY_EINVAL, "--bind"},
        {{"--nproc", "0"}, 2, TY_EINVAL, "--nproc"},
        {{"--timeout", "5", "--batch", "64"}, 4, TY_OK, NULL},
        {{"--seed", "0x10"}, 2, TY_OK, NULL},
        {{"--seed", "-1"}, 2, TY_EINVAL, "--seed"},
        {{"--checkpoint-dir", ""}, 2, TY_EINVAL, "--checkpoint-dir"},
        {{"--bogus", "1"}, 2, TY_EINVAL, "unknown argument"},
        {{"--help"}, 1, TY_ENOTFOUND, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        worker_config c;
        char err[256] = "";
        config_defaults(&c);
        ty_err rc = config_parse_args(&c, cases[i].argc, (char *const *)cases[i].args, err,
                                      sizeof err);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): got %d: %s", i, cases[i].args[0], rc, err);
        if (cases[i].err_has && !strstr(err, cases[i].err_has))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err, cases[i].err_has);
    }
}

static void test_flag_values(void **state)
{
    (void)state;
    worker_config c;
    char err[256];
    config_defaults(&c);
    char *args[] = {"--hidden", "1024,256,64", "--optimizer=sgd", "--lr", "0.5", "--seed", "0x10",
                    "--max-steps", "7", "--checkpoint-dir", "/ck", "--bucket-mb", "0.25"};
    assert_int_equal(config_parse_args(&c, 13, args, err, sizeof err), TY_OK);
    assert_int_equal(c.n_hidden, 3);
    assert_int_equal(c.hidden[2], 64);
    assert_int_equal(c.optim.kind, OPTIM_SGD);
    assert_float_equal(c.optim.lr, 0.5, 1e-7);
    assert_int_equal(c.seed, 16);
    assert_int_equal(c.max_steps, 7);
    assert_string_equal(c.checkpoint_dir, "/ck");
    assert_float_equal(c.bucket_mb, 0.25, 1e-12);
    char buf[64];
    config_format_hidden(&c, buf, sizeof buf);
    assert_string_equal(buf, "1024,256,64");
}

/* A fake environment for config_apply_env. */
#define SECRET "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"

static const char *const *fake_env;

static const char *lookup(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; fake_env[i]; i++)
        if (strncmp(fake_env[i], name, n) == 0 && fake_env[i][n] == '=')
            return fake_env[i] + n + 1;
    return NULL;
}

static void test_environment(void **state)
{
    (void)state;
    static const char *const good[] = {"RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0",
                                       "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=job-a1-0.job",
                                       "MASTER_PORT=29400", "TRAINYARD_JOB_ID=j-1",
                                       "TRAINYARD_ATTEMPT=3", "TRAINYARD_DATA_DIR=/data",
                                       "TRAINYARD_CHECKPOINT_DIR=/out/ckpt",
                                       "TRAINYARD_OUTPUT_DIR=/out",
                                       "TRAINYARD_RENDEZVOUS_SECRET=" SECRET, NULL};
    worker_config c;
    char err[256];
    config_defaults(&c);
    fake_env = good;
    assert_int_equal(config_apply_env(&c, lookup, err, sizeof err), TY_OK);
    assert_int_equal(c.rank, 2);
    assert_int_equal(c.world, 4);
    assert_string_equal(c.master_addr, "job-a1-0.job");
    assert_int_equal(c.master_port, 29400);
    assert_string_equal(c.job_id, "j-1");
    assert_int_equal(c.attempt, 3);
    assert_string_equal(c.data_dir, "/data");
    assert_string_equal(c.checkpoint_dir, "/out/ckpt");
    assert_string_equal(c.output_dir, "/out");
    assert_string_equal(c.rendezvous_secret, SECRET);
    /* Flags, applied after the environment, win. */
    char *args[] = {"--data", "/elsewhere"};
    assert_int_equal(config_parse_args(&c, 2, args, err, sizeof err), TY_OK);
    assert_string_equal(c.data_dir, "/elsewhere");

    static const struct {
        const char *env[3];
        const char *err_has;
    } bad[] = {
        {{"RANK=4", "WORLD_SIZE=4", NULL}, "RANK=4"},
        {{"WORLD_SIZE=0", NULL}, "WORLD_SIZE"},
        {{"RANK=x", NULL}, "RANK"},
        {{"MASTER_PORT=70000", NULL}, "MASTER_PORT"},
        /* Too short to be a secret; the message does not repeat the value. */
        {{"TRAINYARD_RENDEZVOUS_SECRET=hunter2", NULL}, "SECRET: 7 characters, expected 32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config_defaults(&c);
        fake_env = bad[i].env;
        assert_int_equal(config_apply_env(&c, lookup, err, sizeof err), TY_EINVAL);
        assert_non_null(strstr(err, bad[i].err_has));
        assert_null(strstr(err, "hunter2"));
    }
    /* Without one (a rank started by hand), there is none. */
    static const char *const none[] = {"RANK=0", NULL};
    config_defaults(&c);
    fake_env = none;
    assert_int_equal(config_apply_env(&c, lookup, err, sizeof err), TY_OK);
    assert_null(c.rendezvous_secret);
}

/* Fakes of data_present(): which directories hold a data set. */
static int present_in_a_and_debian(const char *dir)
{
    return strcmp(dir, "/a") == 0 || strcmp(dir, CONFIG_DEFAULT_DATA_DIR) == 0;
}

static int present_nowhere(const char *dir)
{
    (void)dir;
    return 0;
}

/* The Debian data set is read instead of an empty directory only when --data was not given. */
static void test_data_fallback(void **state)
{
    (void)state;
    static const struct {
        const char *data_dir;
        int flag;
        int (*present)(const char *);
        const char *want;
    } cases[] = {
        {"/empty", 0, present_in_a_and_debian, CONFIG_DEFAULT_DATA_DIR}, /* fresh install */
        {"/a", 0, present_in_a_and_debian, NULL},                        /* has its own */
        {"/empty", 1, present_in_a_and_debian, NULL},                    /* --data wins */
        {"/empty", 0, present_nowhere, NULL},                            /* nothing to fall to */
        {CONFIG_DEFAULT_DATA_DIR, 0, present_nowhere, NULL},             /* it is the default */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        worker_config c;
        config_defaults(&c);
        c.data_dir = cases[i].data_dir;
        c.data_flag = cases[i].flag;
        const char *got = config_data_fallback(&c, CONFIG_DEFAULT_DATA_DIR, cases[i].present);
        if (cases[i].want ? !got || strcmp(got, cases[i].want) != 0 : got != NULL)
            fail_msg("case %zu: got %s", i, got ? got : "NULL");
    }

    /* --data sets the flag; the environment does not. */
    static const char *const env[] = {"TRAINYARD_DATA_DIR=/data", NULL};
    worker_config c;
    char err[256];
    config_defaults(&c);
    fake_env = env;
    assert_int_equal(config_apply_env(&c, lookup, err, sizeof err), TY_OK);
    assert_string_equal(c.data_dir, "/data");
    assert_false(c.data_flag);
    char *argv[] = {"--data=/x", NULL};
    assert_int_equal(config_parse_args(&c, 1, argv, err, sizeof err), TY_OK);
    assert_true(c.data_flag);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_the_recipe),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_flag_values),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_data_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
