/*
 * Unit tests for store/store_secrets.c: a job's secret env values are sealed in the
 * submission's transaction (never in the database file in clear), open back for the job
 * they were sealed for only, and go when the job ends.
 */
#include "tests/unit/test_store_util.h"

#include "common/job_state.h"

#define SECRET_A "aws-secret-7f3c9a1e5b2d4f60"
#define SECRET_B "hf_token_0b1d2f3e4a5c6d7e"

static int teardown(void **state)
{
    store_fixture *f = *state;
    char path[256];
    snprintf(path, sizeof path, "%s/webhook-secrets.key", f->t.dir);
    unlink(path);
    return store_fixture_teardown(state);
}

/* Whether the bytes of needle are anywhere in the file at path (0 when it does not exist). */
static int file_contains(const char *path, const char *needle)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    size_t n = strlen(needle), cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len, fp)) > 0) {
        len += r;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(fp);
    int found = 0;
    for (size_t i = 0; !found && len >= n && i <= len - n; i++)
        found = memcmp(buf + i, needle, n) == 0;
    free(buf);
    return found;
}

/* Whether the database or its WAL holds needle in clear. */
static int db_contains(const store_fixture *f, const char *needle)
{
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", f->t.db);
    return file_contains(f->t.db, needle) || file_contains(wal, needle);
}

static char *submit_with(store *s, const store_env_secret *v, size_t n)
{
    store_job_new j = job_template("job", "default");
    j.secrets = v;
    j.nsecrets = n;
    store_job *out = NULL;
    size_t nout = 0;
    assert_int_equal(store_jobs_submit(s, &j, 1, NULL, NULL, &out, &nout, NULL), TY_OK);
    char *id = strdup(out[0].id);
    store_jobs_free(out, nout);
    return id;
}

static void test_sealed_at_rest_and_opened(void **state)
{
    store_fixture *f = *state;
    const store_env_secret in[] = {
        {"AWS_SECRET_ACCESS_KEY", SECRET_A, strlen(SECRET_A)},
        {"HF_TOKEN", SECRET_B, strlen(SECRET_B)},
        {"EMPTY", "", 0},
    };
    char *id = submit_with(f->s, in, 3);
    char *other = submit_with(f->s, NULL, 0);

    /* Control: the file is searchable (the job's name is there), the secrets are not. */
    assert_true(db_contains(f, "\"name\":\"job\"") || db_contains(f, "job"));
    assert_false(db_contains(f, SECRET_A));
    assert_false(db_contains(f, SECRET_B));

    store_env_secret *v = NULL;
    size_t n = 0;
    assert_int_equal(store_job_secrets_open(f->s, id, &v, &n), TY_OK);
    assert_int_equal(n, 3);
    /* In name order. */
    assert_string_equal(v[0].name, "AWS_SECRET_ACCESS_KEY");
    assert_string_equal(v[0].value, SECRET_A);
    assert_int_equal(v[0].value_len, strlen(SECRET_A));
    assert_string_equal(v[1].name, "EMPTY");
    assert_string_equal(v[1].value, "");
    assert_string_equal(v[2].name, "HF_TOKEN");
    assert_string_equal(v[2].value, SECRET_B);
    store_env_secrets_free(v, n);

    /* A job without secrets, and no such job: none. */
    v = (store_env_secret *)1;
    assert_int_equal(store_job_secrets_open(f->s, other, &v, &n), TY_OK);
    assert_null(v);
    assert_int_equal(n, 0);
    assert_int_equal(store_job_secrets_open(f->s, "00000000000000000000000000", &v, &n), TY_OK);
    assert_int_equal(n, 0);

    /* After a checkpoint too (the WAL copied into the database file). */
    store_close(f->s);
    f->s = open_store(&f->t);
    assert_false(db_contains(f, SECRET_A));
    assert_int_equal(store_job_secrets_open(f->s, id, &v, &n), TY_OK);
    assert_int_equal(n, 3);
    store_env_secrets_free(v, n);
    free(id);
    free(other);
}

/* A sealed value moved to another job's row does not open: the job id is associated data. */
static void test_moved_blob_does_not_open(void **state)
{
    store_fixture *f = *state;
    const store_env_secret a = {"KEY", SECRET_A, strlen(SECRET_A)};
    const store_env_secret b = {"KEY", SECRET_B, strlen(SECRET_B)};
    char *ida = submit_with(f->s, &a, 1);
    char *idb = submit_with(f->s, &b, 1);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->t.db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE job_secrets SET sealed = (SELECT s.sealed FROM job_secrets AS s JOIN jobs "
             "AS j ON j.seq = s.job_seq WHERE j.id = '%s') WHERE job_seq = (SELECT seq FROM jobs "
             "WHERE id = '%s')",
             ida, idb);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    store_env_secret *v = NULL;
    size_t n = 0;
    assert_int_equal(store_job_secrets_open(f->s, idb, &v, &n), TY_ESCHEMA);
    assert_null(v);
    assert_int_equal(store_job_secrets_open(f->s, ida, &v, &n), TY_OK);
    assert_int_equal(n, 1);
    store_env_secrets_free(v, n);
    free(ida);
    free(idb);
}

/* Another key file (the database copied without its key, a key replaced): nothing opens, and
 * it says so rather than giving out garbage. */
static void test_other_key_does_not_open(void **state)
{
    store_fixture *f = *state;
    const store_env_secret a = {"KEY", SECRET_A, strlen(SECRET_A)};
    char *id = submit_with(f->s, &a, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/webhook-secrets.key", f->t.dir);
    assert_int_equal(unlink(path), 0); /* the next use makes a new key */
    store_env_secret *v = NULL;
    size_t n = 0;
    assert_int_equal(store_job_secrets_open(f->s, id, &v, &n), TY_ESCHEMA);
    assert_null(v);
    assert_int_equal(n, 0);
    free(id);
}

static ty_err decide_cancel(job_state cur, job_state *to, void *ud)
{
    (void)ud;
    if (job_state_cancel_conflicts(cur))
        return TY_ECONFLICT;
    job_state_cancel_target(cur, to);
    return TY_OK;
}

/* The transaction that ends the job deletes its sealed values: nothing launches it again. */
static void test_gone_when_the_job_ends(void **state)
{
    store_fixture *f = *state;
    const store_env_secret a = {"KEY", SECRET_A, strlen(SECRET_A)};
    char *id = submit_with(f->s, &a, 1);
    assert_int_equal(store_job_transition(f->s, id, decide_cancel, NULL, "Cancelled", "", NULL),
                     TY_OK);
    store_env_secret *v = NULL;
    size_t n = 1;
    assert_int_equal(store_job_secrets_open(f->s, id, &v, &n), TY_OK);
    assert_int_equal(n, 0);
    free(id);
}

/* A batch is all or nothing, secrets included: a failing row leaves no sealed value. */
static void test_batch_all_or_nothing(void **state)
{
    store_fixture *f = *state;
    const store_env_secret dup[] = {{"KEY", SECRET_A, strlen(SECRET_A)},
                                    {"KEY", SECRET_B, strlen(SECRET_B)}};
    store_job_new j[2] = {job_template("a", "default"), job_template("b", "default")};
    j[0].secrets = dup;
    j[0].nsecrets = 1;
    j[1].secrets = dup;
    j[1].nsecrets = 2; /* the same name twice: the primary key refuses it */
    store_job *out = NULL;
    size_t nout = 0;
    assert_int_not_equal(store_jobs_submit(f->s, j, 2, NULL, NULL, &out, &nout, NULL), TY_OK);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(f->t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM job_secrets", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sealed_at_rest_and_opened, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_moved_blob_does_not_open, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_other_key_does_not_open, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gone_when_the_job_ends, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_batch_all_or_nothing, store_fixture_setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
