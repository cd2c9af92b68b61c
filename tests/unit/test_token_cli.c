/*
 * test_token_cli.c - `trainyard token` directly on a database file: create
 * prints a usable secret, list shows names/scopes/revocation, revoke, and the
 * errors a user meets (duplicate name, unknown name, missing database).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ty_log.h"
#include "server/auth.h"
#include "server/token_cli.h"
#include "store/store.h"

typedef struct fixture {
    char dir[64];
    char db[128];
    FILE *out, *err;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ty_test_token_cli_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    /* A sub-directory that does not exist yet: create makes it. */
    snprintf(f->db, sizeof f->db, "%s/data/t.db", f->dir);
    *state = f;
    return 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            remove_tree(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture *f = *state;
    remove_tree(f->dir);
    free(f);
    return 0;
}

/* Runs one command; out and err receive what it printed. */
static int run(fixture *f, config_token_action action, const char *name, unsigned scopes,
               char *out, size_t outlen, char *err, size_t errlen)
{
    config_token cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.action = action;
    snprintf(cfg.db_path, sizeof cfg.db_path, "%s", f->db);
    cfg.name = name;
    cfg.scopes = scopes;
    FILE *o = tmpfile(), *e = tmpfile();
    assert_non_null(o);
    assert_non_null(e);
    int rc = token_cli_run(&cfg, o, e);
    rewind(o);
    rewind(e);
    size_t n = fread(out, 1, outlen - 1, o);
    out[n] = '\0';
    n = fread(err, 1, errlen - 1, e);
    err[n] = '\0';
    fclose(o);
    fclose(e);
    return rc;
}

static void test_create_list_revoke(void **state)
{
    fixture *f = *state;
    char out[4096], err[1024];

    assert_int_equal(run(f, CONFIG_TOKEN_CREATE, "ci", STORE_SCOPE_SUBMIT | STORE_SCOPE_READ, out,
                         sizeof out, err, sizeof err),
                     0);
    assert_string_equal(err, "");
    size_t n = strlen(out);
    assert_true(n > 4 && out[n - 1] == '\n');
    assert_int_equal(strncmp(out, "ty_", 3), 0);
    out[n - 1] = '\0';
    char header[4200];
    snprintf(header, sizeof header, "Bearer %s", out);

    /* The printed secret authenticates as "ci". */
    char dberr[256];
    store *s = NULL;
    store_options opt = {.busy_timeout_ms = 5000, .max_group_ops = 16, .read_connections = 1};
    assert_int_equal(store_open(f->db, &opt, &s, dberr, sizeof dberr), TY_OK);
    auth_cache *c = NULL;
    assert_int_equal(auth_cache_new(s, 0, &c), TY_OK);
    char *name = NULL;
    unsigned scopes = 0;
    assert_int_equal(auth_check(c, header, STORE_SCOPE_SUBMIT, &name, &scopes), TY_OK);
    assert_string_equal(name, "ci");
    free(name);

    assert_int_equal(run(f, CONFIG_TOKEN_CREATE, "ci", STORE_SCOPE_READ, out, sizeof out, err,
                         sizeof err),
                     1);
    assert_non_null(strstr(err, "already exists"));
    assert_string_equal(out, "");

    assert_int_equal(run(f, CONFIG_TOKEN_CREATE, "viewer", STORE_SCOPE_READ, out, sizeof out, err,
                         sizeof err),
                     0);
    assert_int_equal(run(f, CONFIG_TOKEN_LIST, NULL, 0, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(strncmp(out, "NAME", 4), 0);
    char *ci = strstr(out, "\nci ");
    char *viewer = strstr(out, "\nviewer ");
    assert_non_null(ci);
    assert_non_null(viewer);
    assert_non_null(strstr(ci, "read,submit"));
    assert_true(strstr(ci, " -\n") < viewer); /* not revoked */
    assert_null(strstr(out, "ty_"));         /* secrets are never listed */

    assert_int_equal(run(f, CONFIG_TOKEN_REVOKE, "ci", 0, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(auth_check(c, header, STORE_SCOPE_SUBMIT, &name, &scopes), TY_EAUTH);
    assert_int_equal(run(f, CONFIG_TOKEN_REVOKE, "ci", 0, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "no valid token named 'ci'"));
    assert_int_equal(run(f, CONFIG_TOKEN_LIST, NULL, 0, out, sizeof out, err, sizeof err), 0);
    ci = strstr(out, "\nci ");
    assert_non_null(ci);
    char *eol = strchr(ci + 1, '\n');
    assert_non_null(eol);
    assert_false(eol[-1] == '-'); /* a revocation time, not "-" */

    auth_cache_free(c);
    store_close(s);
}

static void test_errors(void **state)
{
    fixture *f = *state;
    char out[1024], err[1024];
    assert_int_equal(run(f, CONFIG_TOKEN_LIST, NULL, 0, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "no database at"));
    assert_int_equal(access(f->db, F_OK), -1); /* list does not create a database */
    assert_int_equal(run(f, CONFIG_TOKEN_REVOKE, "x", 0, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "no database at"));
    assert_int_equal(run(f, CONFIG_TOKEN_CREATE, "bad/name", STORE_SCOPE_READ, out, sizeof out,
                         err, sizeof err),
                     1);
    assert_non_null(strstr(err, "invalid name"));
}

int main(void)
{
    ty_log_set_level(TY_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_list_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
