/*
 * test_auth.c - bearer checks against tokens in a real store: valid, unknown,
 * revoked, scopes, many tokens, cache reload after a revocation made directly
 * in the store, and the first-start admin token. Job tokens: valid for the
 * report scope only, as the principal "job:<id>", from the commit that stores
 * them to the one that ends the job, with no cache period in between.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "server/auth.h"
#include "store/store.h"

typedef struct fixture {
    char dir[64];
    char db[128];
    store *s;
} fixture;

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[512];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ty_test_auth_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    store_options opt = {.busy_timeout_ms = 5000, .max_group_ops = 64, .read_connections = 2};
    assert_int_equal(store_open(f->db, &opt, &f->s, err, sizeof err), TY_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    remove_dir(f->dir);
    free(f);
    return 0;
}

/* Stores a token with the given secret, name and scopes. */
static void add_token(store *s, const char *name, const char *secret, unsigned scopes)
{
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(secret, strlen(secret), hash);
    assert_int_equal(store_token_create(s, name, scopes, hash), TY_OK);
}

static ty_err check(auth_cache *c, const char *header, unsigned scope, char *name_out,
                    size_t len)
{
    char *name = NULL;
    unsigned scopes = 0;
    ty_err e = auth_check(c, header, scope, &name, &scopes);
    if (name_out)
        snprintf(name_out, len, "%s", name ? name : "");
    if (e == TY_EAUTH)
        assert_null(name);
    free(name);
    return e;
}

static void test_bearer_header_forms(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char name[64];
    add_token(f->s, "ci", "ty_secret_ci", STORE_SCOPE_SUBMIT | STORE_SCOPE_READ);
    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);

    static const struct {
        const char *header;
        ty_err want;
    } cases[] = {
        {"Bearer ty_secret_ci", TY_OK},
        {"bearer ty_secret_ci", TY_OK},
        {"BEARER   ty_secret_ci  ", TY_OK},
        {"Bearer\tty_secret_ci", TY_OK},
        {NULL, TY_EAUTH},
        {"", TY_EAUTH},
        {"Bearer", TY_EAUTH},
        {"Bearer ", TY_EAUTH},
        {"Bearerty_secret_ci", TY_EAUTH},
        {"Basic dXNlcjpwYXNz", TY_EAUTH},
        {"ty_secret_ci", TY_EAUTH},
        {"Bearer ty_secret_ci extra", TY_EAUTH},
        {"Bearer ty_secret_c", TY_EAUTH},
        {"Bearer ty_secret_cj", TY_EAUTH},
        {"Bearer ty_secret_ci0", TY_EAUTH},
        {"Bearer TY_SECRET_CI", TY_EAUTH},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ty_err e = check(c, cases[i].header, STORE_SCOPE_READ, name, sizeof name);
        if (e != cases[i].want)
            print_message("case %zu: '%s'\n", i, cases[i].header ? cases[i].header : "(null)");
        assert_int_equal(e, cases[i].want);
        if (e == TY_OK)
            assert_string_equal(name, "ci");
    }
    auth_cache_free(c);
}

static void test_scopes(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char name[64];
    add_token(f->s, "reader", "ty_r", STORE_SCOPE_READ);
    add_token(f->s, "submitter", "ty_s", STORE_SCOPE_SUBMIT);
    add_token(f->s, "root", "ty_a", STORE_SCOPE_ADMIN);
    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);

    static const struct {
        const char *header;
        unsigned scope;
        ty_err want;
        const char *name;
    } cases[] = {
        {"Bearer ty_r", STORE_SCOPE_READ, TY_OK, "reader"},
        {"Bearer ty_r", STORE_SCOPE_SUBMIT, TY_EFORBIDDEN, "reader"},
        {"Bearer ty_r", STORE_SCOPE_ADMIN, TY_EFORBIDDEN, "reader"},
        {"Bearer ty_s", STORE_SCOPE_SUBMIT, TY_OK, "submitter"},
        {"Bearer ty_s", STORE_SCOPE_READ, TY_EFORBIDDEN, "submitter"},
        {"Bearer ty_a", STORE_SCOPE_READ, TY_OK, "root"},
        {"Bearer ty_a", STORE_SCOPE_SUBMIT, TY_OK, "root"},
        {"Bearer ty_a", STORE_SCOPE_ADMIN, TY_OK, "root"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(check(c, cases[i].header, cases[i].scope, name, sizeof name),
                         cases[i].want);
        assert_string_equal(name, cases[i].name);
    }
    auth_cache_free(c);
}

/* Writes what the scheduler writes when it starts a job's attempt with a token. */
static void start_job(store *s, const char *secret, char id[STORE_ID_LEN + 1])
{
    store_job_new n = {.name = "j", .queue = "q", .spec_json = "{}"};
    store_job *out = NULL;
    size_t nout = 0;
    int replayed = 0;
    assert_int_equal(store_jobs_submit(s, &n, 1, NULL, NULL, &out, &nout, &replayed), TY_OK);
    memcpy(id, out[0].id, STORE_ID_LEN + 1);
    store_jobs_free(out, nout);
    unsigned char hash[TY_SHA256_LEN];
    ty_sha256(secret, strlen(secret), hash);
    store_update u[] = {
        {.id = id, .from = JOB_PENDING, .to = JOB_ADMITTED, .reason = "Admitted",
         .restarts = -1},
        {.id = id, .from = JOB_ADMITTED, .to = JOB_STARTING, .reason = "Starting",
         .restarts = -1, .job_token_hash = hash},
    };
    assert_int_equal(store_jobs_update(s, u, 2), TY_OK);
    assert_int_equal(u[1].result, TY_OK);
}

static void test_job_tokens(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char name[64], id[STORE_ID_LEN + 1], want[64];
    add_token(f->s, "root", "ty_a", STORE_SCOPE_ADMIN);
    add_token(f->s, "reader", "ty_r", STORE_SCOPE_READ);
    /* A long cache period: job tokens must not depend on it. */
    assert_int_equal(auth_cache_new(f->s, 3600 * 1000, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_job_a", STORE_SCOPE_REPORT, name, sizeof name), TY_EAUTH);
    start_job(f->s, "ty_job_a", id);
    snprintf(want, sizeof want, "job:%s", id);

    static const struct {
        const char *header;
        unsigned scope;
        ty_err want;
    } cases[] = {
        {"Bearer ty_job_a", STORE_SCOPE_REPORT, TY_OK},
        {"Bearer ty_job_a", STORE_SCOPE_READ, TY_EFORBIDDEN},
        {"Bearer ty_job_a", STORE_SCOPE_SUBMIT, TY_EFORBIDDEN},
        {"Bearer ty_job_a", STORE_SCOPE_ADMIN, TY_EFORBIDDEN},
        {"Bearer ty_job_b", STORE_SCOPE_REPORT, TY_EAUTH},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *who = NULL;
        unsigned scopes = 0;
        assert_int_equal(auth_check(c, cases[i].header, cases[i].scope, &who, &scopes),
                         cases[i].want);
        if (cases[i].want != TY_EAUTH) {
            assert_string_equal(who, want);
            assert_int_equal(scopes, STORE_SCOPE_REPORT);
        }
        free(who);
    }
    /* An admin token may report; read and submit never satisfy the report scope. */
    assert_int_equal(check(c, "Bearer ty_a", STORE_SCOPE_REPORT, name, sizeof name), TY_OK);
    assert_int_equal(check(c, "Bearer ty_r", STORE_SCOPE_REPORT, name, sizeof name),
                     TY_EFORBIDDEN);

    /* The job ends: its token stops at once, however young the cache. */
    store_update end = {.id = id, .from = JOB_STARTING, .to = JOB_FAILED, .reason = "Failed",
                        .restarts = -1};
    assert_int_equal(store_jobs_update(f->s, &end, 1), TY_OK);
    assert_int_equal(end.result, TY_OK);
    assert_int_equal(check(c, "Bearer ty_job_a", STORE_SCOPE_REPORT, name, sizeof name), TY_EAUTH);
    auth_cache_free(c);
}

/* With many tokens every one authenticates as itself: the scan covers all of them. */
static void test_many_tokens(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char name[64], want[64], secret[64], header[96];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "t%02d", i);
        snprintf(secret, sizeof secret, "ty_secret_%02d", i);
        add_token(f->s, name, secret, STORE_SCOPE_READ);
    }
    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);
    for (int i = 0; i < 50; i++) {
        snprintf(header, sizeof header, "Bearer ty_secret_%02d", i);
        snprintf(want, sizeof want, "t%02d", i);
        assert_int_equal(check(c, header, STORE_SCOPE_READ, name, sizeof name), TY_OK);
        assert_string_equal(name, want);
    }
    assert_int_equal(check(c, "Bearer ty_secret_50", STORE_SCOPE_READ, NULL, 0), TY_EAUTH);
    auth_cache_free(c);
}

static void test_revoked_in_store_with_reload_on_every_check(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    add_token(f->s, "ci", "ty_ci", STORE_SCOPE_SUBMIT);
    assert_int_equal(auth_cache_new(f->s, 0, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_OK);
    assert_int_equal(store_token_revoke(f->s, "ci"), TY_OK);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_EAUTH);
    auth_cache_free(c);
}

static void test_cache_refreshes_after_max_age(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    add_token(f->s, "ci", "ty_ci", STORE_SCOPE_SUBMIT);
    assert_int_equal(auth_cache_new(f->s, 50, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_OK);
    /* A token created after the load is found once the cache is older than max_age. */
    add_token(f->s, "late", "ty_late", STORE_SCOPE_READ);
    assert_int_equal(store_token_revoke(f->s, "ci"), TY_OK);
    struct timespec wait = {0, 120 * 1000 * 1000};
    nanosleep(&wait, NULL);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_EAUTH);
    assert_int_equal(check(c, "Bearer ty_late", STORE_SCOPE_READ, NULL, 0), TY_OK);
    auth_cache_free(c);
}

static void test_invalidate_reloads_at_once(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    add_token(f->s, "ci", "ty_ci", STORE_SCOPE_SUBMIT);
    /* An hour: only invalidation can make the cache reload during the test. */
    assert_int_equal(auth_cache_new(f->s, 3600 * 1000, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_OK);
    assert_int_equal(store_token_revoke(f->s, "ci"), TY_OK);
    auth_cache_invalidate(c);
    assert_int_equal(check(c, "Bearer ty_ci", STORE_SCOPE_SUBMIT, NULL, 0), TY_EAUTH);
    auth_cache_free(c);
}

static void test_token_rules(void **state)
{
    (void)state;
    assert_true(auth_token_valid("x"));
    assert_true(auth_token_valid("ty_abc-DEF_123"));
    assert_false(auth_token_valid(""));
    assert_false(auth_token_valid("a b"));
    assert_false(auth_token_valid("tab\t"));
    assert_false(auth_token_valid("nl\n"));
    char longtok[AUTH_MAX_TOKEN + 2];
    memset(longtok, 'a', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = '\0';
    assert_false(auth_token_valid(longtok));
    longtok[AUTH_MAX_TOKEN] = '\0';
    assert_true(auth_token_valid(longtok));
}

static void test_bootstrap_from_env(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char err[256], name[64], path[160];
    int created = -1;
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, "ty_from_env", &created, err, sizeof err),
                     TY_OK);
    assert_int_equal(created, 1);
    snprintf(path, sizeof path, "%s/admin.token", f->dir);
    assert_int_not_equal(access(path, F_OK), 0); /* no file when the token came from the env */

    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_from_env", STORE_SCOPE_ADMIN, name, sizeof name), TY_OK);
    assert_string_equal(name, "admin");

    /* A second start changes nothing, whatever the environment says. */
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, "ty_other", &created, err, sizeof err),
                     TY_OK);
    assert_int_equal(created, 0);
    assert_int_equal(check(c, "Bearer ty_other", STORE_SCOPE_READ, NULL, 0), TY_EAUTH);
    auth_cache_free(c);
}

static void test_bootstrap_bad_env_token(void **state)
{
    fixture *f = *state;
    char err[256];
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, "has space", NULL, err, sizeof err),
                     TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_ADMIN_TOKEN"));
}

static void test_bootstrap_generates_file(void **state)
{
    fixture *f = *state;
    auth_cache *c = NULL;
    char err[256], path[160], line[128], header[160], name[64];
    int created = 0;
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, NULL, &created, err, sizeof err), TY_OK);
    assert_int_equal(created, 1);

    snprintf(path, sizeof path, "%s/admin.token", f->dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    size_t n = strlen(line);
    assert_true(n > 4 && line[n - 1] == '\n');
    line[n - 1] = '\0';
    assert_int_equal(strncmp(line, "ty_", 3), 0);
    assert_int_equal((size_t)sb.st_size, n);

    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);
    snprintf(header, sizeof header, "Bearer %s", line);
    assert_int_equal(check(c, header, STORE_SCOPE_ADMIN, name, sizeof name), TY_OK);
    assert_string_equal(name, "admin");
    auth_cache_free(c);

    /* Revoking the only admin: the next start creates "admin-2", but the old file stays. */
    assert_int_equal(store_token_revoke(f->s, "admin"), TY_OK);
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, NULL, &created, err, sizeof err),
                     TY_EEXISTS);
    assert_non_null(strstr(err, "admin.token"));
    assert_int_equal(auth_bootstrap_admin(f->s, f->db, "ty_second", &created, err, sizeof err),
                     TY_OK);
    assert_int_equal(created, 1);
    assert_int_equal(auth_cache_new(f->s, 1000, &c), TY_OK);
    assert_int_equal(check(c, "Bearer ty_second", STORE_SCOPE_ADMIN, name, sizeof name), TY_OK);
    assert_string_equal(name, "admin-2");
    auth_cache_free(c);
}

int main(void)
{
    ty_log_set_level(TY_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bearer_header_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scopes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoked_in_store_with_reload_on_every_check, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cache_refreshes_after_max_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalidate_reloads_at_once, setup, teardown),
        cmocka_unit_test(test_token_rules),
        cmocka_unit_test_setup_teardown(test_bootstrap_from_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bootstrap_bad_env_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bootstrap_generates_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
