/*
 * test_token_cli.c - `trainyard token` directly on a database file: create
 * prints a usable secret, list shows names/scopes/revocation, revoke, and the
 * errors a user meets (duplicate name, unknown name, missing database).
 * Over HTTP (a small libmicrohttpd server that records the Authorization
 * header): the token given on the command line, read from a file
 * (--token @PATH) or from standard input (--token -), and the errors of
 * those forms, which never show the secret.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
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

/* Runs cfg; out and err receive what it printed. */
static int run_cfg(const config_token *cfg, char *out, size_t outlen, char *err, size_t errlen)
{
    FILE *o = tmpfile(), *e = tmpfile();
    assert_non_null(o);
    assert_non_null(e);
    int rc = token_cli_run(cfg, o, e);
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
    return run_cfg(&cfg, out, outlen, err, errlen);
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
    assert_non_null(strstr(ci, " default ")); /* its team */
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

/* ---- over HTTP ----------------------------------------------------------- */

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char seen_auth[1024]; /* the last request's Authorization header */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    static const char body[] = "{\"tokens\": [{\"name\": \"ci\", \"scopes\": [\"read\"],"
                               " \"created_at\": \"2026-11-22T10:00:00.000Z\"}]}";
    (void)cls, (void)url, (void)method, (void)version, (void)upload, (void)upload_size;
    if (!*con_cls) { /* first call: headers only */
        *con_cls = c;
        return MHD_YES;
    }
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&seen_lock);
    snprintf(seen_auth, sizeof seen_auth, "%s", auth ? auth : "");
    pthread_mutex_unlock(&seen_lock);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

typedef struct http_fixture {
    fixture base;
    struct MHD_Daemon *d;
    char url[64];
} http_fixture;

static int http_setup(void **state)
{
    http_fixture *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->base.dir, sizeof h->base.dir, "/tmp/ty_test_token_cli_XXXXXX");
    assert_non_null(mkdtemp(h->base.dir));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_END);
    assert_non_null(h->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    snprintf(h->url, sizeof h->url, "http://127.0.0.1:%u", (unsigned)info->port);
    seen_auth[0] = '\0';
    *state = h;
    return 0;
}

static int http_teardown(void **state)
{
    http_fixture *h = *state;
    MHD_stop_daemon(h->d);
    remove_tree(h->base.dir);
    free(h);
    return 0;
}

/* Writes text to a file of the fixture's directory; returns its path (static). */
static const char *write_file(http_fixture *h, const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", h->base.dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* `trainyard token list --server URL --token TOKEN`; out and err as run(). */
static int run_list(http_fixture *h, const char *token, char *out, size_t outlen, char *err,
                    size_t errlen)
{
    config_token cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.action = CONFIG_TOKEN_LIST;
    cfg.server = h->url;
    cfg.token = token;
    return run_cfg(&cfg, out, outlen, err, errlen);
}

static const char *last_auth(void)
{
    static char copy[sizeof seen_auth];
    pthread_mutex_lock(&seen_lock);
    memcpy(copy, seen_auth, sizeof copy);
    pthread_mutex_unlock(&seen_lock);
    return copy;
}

static void test_http_token_sources(void **state)
{
    http_fixture *h = *state;
    char out[2048], err[1024], at[300];

    /* On the command line, as before. */
    assert_int_equal(run_list(h, "ty_from_the_command_line", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_string_equal(last_auth(), "Bearer ty_from_the_command_line");
    assert_non_null(strstr(out, "\nci "));

    /* From a file: its first line, without the newline (CRLF too). */
    snprintf(at, sizeof at, "@%s", write_file(h, "token", "ty_from_a_file\r\nignored\n"));
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(last_auth(), "Bearer ty_from_a_file");
    snprintf(at, sizeof at, "@%s", write_file(h, "token2", "ty_no_newline"));
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(last_auth(), "Bearer ty_no_newline");

    /* --token-file PATH and --token-file -. */
    config_token cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.action = CONFIG_TOKEN_LIST;
    cfg.server = h->url;
    cfg.token_file = write_file(h, "token3", "ty_from_token_file\n");
    FILE *o = tmpfile();
    assert_non_null(o);
    assert_int_equal(token_cli_run(&cfg, o, o), 0);
    assert_string_equal(last_auth(), "Bearer ty_from_token_file");
    assert_non_null(freopen(write_file(h, "stdin0", "ty_token_file_stdin\n"), "r", stdin));
    cfg.token_file = "-";
    assert_int_equal(token_cli_run(&cfg, o, o), 0);
    assert_string_equal(last_auth(), "Bearer ty_token_file_stdin");
    fclose(o);

    /* From standard input. */
    assert_non_null(freopen(write_file(h, "stdin", "ty_from_stdin\n"), "r", stdin));
    assert_int_equal(run_list(h, "-", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_string_equal(last_auth(), "Bearer ty_from_stdin");
}

static void test_http_token_errors(void **state)
{
    http_fixture *h = *state;
    char out[2048], err[1024], at[300], longer[600];

    snprintf(at, sizeof at, "@%s/missing", h->base.dir);
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "cannot open the token file"));
    assert_non_null(strstr(err, "/missing: No such file or directory"));

    snprintf(at, sizeof at, "@%s", write_file(h, "empty", ""));
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "the token file is not a token"));

    snprintf(at, sizeof at, "@%s", write_file(h, "spaced", "ty_secret with a space\n"));
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "is not a token"));
    assert_null(strstr(err, "ty_secret")); /* the secret is never shown */

    memset(longer, 'a', sizeof longer - 2);
    longer[sizeof longer - 2] = '\n';
    longer[sizeof longer - 1] = '\0';
    snprintf(at, sizeof at, "@%s", write_file(h, "long", longer));
    assert_int_equal(run_list(h, at, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "cannot read the token file"));
    assert_non_null(strstr(err, "at most 512 characters"));

    assert_non_null(freopen(write_file(h, "stdin-empty", ""), "r", stdin));
    assert_int_equal(run_list(h, "-", out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "the token on standard input is not a token"));

    assert_string_equal(last_auth(), ""); /* no request was sent */
    assert_string_equal(out, "");
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
        cmocka_unit_test_setup_teardown(test_http_token_sources, http_setup, http_teardown),
        cmocka_unit_test_setup_teardown(test_http_token_errors, http_setup, http_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
