/*
 * token_cli.c - `trainyard token ...` on the database file or over HTTP.
 *
 * Over HTTP the bearer token need not be on the command line, where every
 * user of the machine can read it (ps, /proc/PID/cmdline): --token - reads
 * it from standard input, --token @PATH from a file, and TRAINYARD_TOKEN
 * takes the same three forms (see resolve_token()).
 */
#include "server/token_cli.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/tokens.h"
#include "common/ty_buf.h"
#include "common/ty_crypto.h"
#include "common/ty_time.h"
#include "server/auth.h"
#include "server/paths.h"
#include "store/store.h"

#define RESPONSE_MAX ((size_t)8 << 20)
#define HTTP_TIMEOUT_S 30L

static void print_header(FILE *out)
{
    fprintf(out, "%-24s %-18s %-16s %-24s %s\n", "NAME", "SCOPES", "TEAM", "CREATED", "REVOKED");
}

static void print_row(FILE *out, const char *name, const char *scopes, const char *team,
                      const char *created, const char *revoked)
{
    fprintf(out, "%-24s %-18s %-16s %-24s %s\n", name, scopes, team ? team : "-", created,
            revoked ? revoked : "-");
}

/* ---- directly on the database ------------------------------------------- */

static ty_err open_store(const config_token *cfg, int create, store **s, FILE *errf)
{
    char err[512] = "";
    store_options opt = {.read_connections = 1}; /* zeros: the store's defaults */
    if (!create && access(cfg->db_path, F_OK) != 0) {
        fprintf(errf, "trainyard token: no database at %s\n", cfg->db_path);
        return TY_ENOTFOUND;
    }
    if (create) {
        ty_err e = paths_make_parent_dir(cfg->db_path, err, sizeof err);
        if (e) {
            fprintf(errf, "trainyard token: %s\n", err);
            return e;
        }
    }
    ty_err e = store_open(cfg->db_path, &opt, s, err, sizeof err);
    if (e)
        fprintf(errf, "trainyard token: cannot open %s: %s\n", cfg->db_path,
                err[0] ? err : ty_strerror(e));
    return e;
}

static int db_create(const config_token *cfg, FILE *out, FILE *errf)
{
    store *s = NULL;
    char secret[TY_TOKEN_BUFLEN];
    int rc = 1;
    if (open_store(cfg, 1, &s, errf))
        goto out;
    ty_err e = api_token_issue_team(s, cfg->name, cfg->scopes, cfg->team, secret);
    if (e == TY_EEXISTS)
        fprintf(errf, "trainyard token: a token named '%s' already exists\n", cfg->name);
    else if (e == TY_ENOTFOUND)
        fprintf(errf, "trainyard token: no team named '%s' (create it first: trainyard team "
                      "create)\n",
                cfg->team ? cfg->team : STORE_TEAM_DEFAULT);
    else if (e)
        fprintf(errf, "trainyard token: cannot create the token: %s\n", ty_strerror(e));
    if (e)
        goto out;
    fprintf(out, "%s\n", secret);
    rc = 0;
out:
    OPENSSL_cleanse(secret, sizeof secret);
    store_close(s);
    return rc;
}

static int db_list(const config_token *cfg, FILE *out, FILE *errf)
{
    store *s = NULL;
    store_token *tokens = NULL;
    size_t n = 0;
    int rc = 1;
    if (open_store(cfg, 0, &s, errf))
        goto out;
    ty_err e = store_tokens_list(s, &tokens, &n);
    if (e) {
        fprintf(errf, "trainyard token: cannot list tokens: %s\n", ty_strerror(e));
        goto out;
    }
    print_header(out);
    for (size_t i = 0; i < n; i++) {
        char scopes[64], created[32], revoked[32];
        config_format_scopes(tokens[i].scopes, scopes, sizeof scopes);
        ty_time_format_rfc3339(tokens[i].created_at_ms, created, sizeof created);
        if (tokens[i].revoked_at_ms)
            ty_time_format_rfc3339(tokens[i].revoked_at_ms, revoked, sizeof revoked);
        print_row(out, tokens[i].name, scopes, tokens[i].team, created,
                  tokens[i].revoked_at_ms ? revoked : NULL);
    }
    rc = 0;
out:
    store_tokens_free(tokens, n);
    store_close(s);
    return rc;
}

static int db_revoke(const config_token *cfg, FILE *errf)
{
    store *s = NULL;
    int rc = 1;
    if (open_store(cfg, 0, &s, errf))
        goto out;
    ty_err e = store_token_revoke(s, cfg->name);
    if (e == TY_ENOTFOUND)
        fprintf(errf, "trainyard token: no valid token named '%s'\n", cfg->name);
    else if (e)
        fprintf(errf, "trainyard token: cannot revoke the token: %s\n", ty_strerror(e));
    else
        rc = 0;
out:
    store_close(s);
    return rc;
}

/* ---- over HTTP ------------------------------------------------------------ */

/*
 * Reads the first line of f into out (AUTH_MAX_TOKEN + 1 bytes): up to a
 * newline (a CR before it is dropped as well) or the end of the input.
 * Returns 0, or -1 when the line is longer than AUTH_MAX_TOKEN or f fails.
 */
static int read_first_line(FILE *f, char *out)
{
    char line[AUTH_MAX_TOKEN + 3]; /* the token, CR, LF, NUL */
    int rc = -1;
    if (!fgets(line, sizeof line, f)) {
        if (ferror(f))
            goto out;
        line[0] = '\0'; /* empty input: an empty token, refused by the caller */
    }
    size_t n = strcspn(line, "\n"); /* a longer line fills line and fails below */
    line[n] = '\0';
    if (n && line[n - 1] == '\r')
        line[--n] = '\0';
    if (n > AUTH_MAX_TOKEN)
        goto out;
    memcpy(out, line, n + 1);
    rc = 0;
out:
    OPENSSL_cleanse(line, sizeof line);
    return rc;
}

/*
 * The bearer token for --server from `given` (--token's value, else
 * TRAINYARD_TOKEN's): "-" means the first line of `in` (standard input),
 * "@PATH" the first line of the file PATH, anything else is the token. It
 * must be 1..AUTH_MAX_TOKEN visible ASCII characters. Returns 0 with the
 * token in out (AUTH_MAX_TOKEN + 1 bytes; the caller cleanses it), else -1
 * after one line on errf that names the source and never shows the secret.
 */
static int resolve_token(const char *given, FILE *in, char *out, FILE *errf)
{
    const char *source = "the token (--token or TRAINYARD_TOKEN)";
    int rc = -1;
    if (strcmp(given, "-") == 0) {
        source = "the token on standard input";
        if (read_first_line(in, out) != 0) {
            fprintf(errf, "trainyard token: cannot read %s (at most %d characters)\n", source,
                    AUTH_MAX_TOKEN);
            return -1;
        }
    } else if (given[0] == '@') {
        FILE *f = fopen(given + 1, "re");
        if (!f) {
            fprintf(errf, "trainyard token: cannot open the token file %s: %s\n", given + 1,
                    strerror(errno));
            return -1;
        }
        source = "the token file";
        rc = read_first_line(f, out);
        fclose(f);
        if (rc != 0) {
            fprintf(errf,
                    "trainyard token: cannot read the token file %s (at most %d characters)\n",
                    given + 1, AUTH_MAX_TOKEN);
            return -1;
        }
    } else {
        size_t n = strlen(given);
        if (n > AUTH_MAX_TOKEN) {
            fprintf(errf, "trainyard token: --token is too long\n");
            return -1;
        }
        memcpy(out, given, n + 1);
    }
    if (!auth_token_valid(out)) {
        OPENSSL_cleanse(out, AUTH_MAX_TOKEN + 1);
        fprintf(errf, "trainyard token: %s is not a token: 1..%d visible characters, no spaces\n",
                source, AUTH_MAX_TOKEN);
        return -1;
    }
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    ty_buf *b = ud;
    size_t n = size * nmemb;
    return ty_buf_append(b, p, n) == TY_OK ? n : 0;
}

/*
 * One request. On success (a response arrived, whatever its status) returns 0
 * with *status and *resp (owned by the caller) set.
 */
static int http_call(const config_token *cfg, const char *method, const char *path,
                     const char *body, long *status, ty_buf *resp, FILE *errf)
{
    char url[2048], auth[AUTH_MAX_TOKEN + 32];
    struct curl_slist *headers = NULL;
    int rc = -1;
    size_t base = strlen(cfg->server);
    while (base && cfg->server[base - 1] == '/')
        base--;
    int n = snprintf(url, sizeof url, "%.*s%s", (int)base, cfg->server, path);
    if (n < 0 || (size_t)n >= sizeof url) {
        fprintf(errf, "trainyard token: server URL too long\n");
        return -1;
    }
    n = snprintf(auth, sizeof auth, "Authorization: Bearer %s", cfg->token);
    if (n < 0 || (size_t)n >= sizeof auth) {
        fprintf(errf, "trainyard token: --token is too long\n");
        return -1;
    }

    CURL *h = curl_easy_init();
    if (!h) {
        fprintf(errf, "trainyard token: cannot initialize libcurl\n");
        goto out;
    }
    struct curl_slist *l = curl_slist_append(headers, auth);
    if (!l)
        goto out;
    headers = l;
    if (body) {
        l = curl_slist_append(headers, "Content-Type: application/json");
        if (!l)
            goto out;
        headers = l;
    }
    ty_buf_init(resp, RESPONSE_MAX);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, HTTP_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        fprintf(errf, "trainyard token: %s %s: %s\n", method, url, curl_easy_strerror(cc));
        ty_buf_free(resp);
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    rc = 0;
out:
    OPENSSL_cleanse(auth, sizeof auth);
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    return rc;
}

/* Reports a non-success status with the problem's detail (or title). */
static void report_problem(long status, const ty_buf *resp, FILE *errf)
{
    json_t *j = resp->data ? json_loadb(resp->data, resp->len, 0, NULL) : NULL;
    const char *detail = NULL;
    if (json_is_object(j)) {
        detail = json_string_value(json_object_get(j, "detail"));
        if (!detail)
            detail = json_string_value(json_object_get(j, "title"));
    }
    fprintf(errf, "trainyard token: the server answered %ld%s%s\n", status, detail ? ": " : "",
            detail ? detail : "");
    json_decref(j);
}

static int http_create(const config_token *cfg, FILE *out, FILE *errf)
{
    ty_buf resp = {0};
    long status = 0;
    int rc = 1;
    char *body = NULL;
    json_t *scopes = json_array();
    const struct {
        unsigned bit;
        const char *name;
    } names[] = {{STORE_SCOPE_READ, "read"}, {STORE_SCOPE_SUBMIT, "submit"},
                 {STORE_SCOPE_ADMIN, "admin"}};
    for (size_t i = 0; scopes && i < sizeof names / sizeof names[0]; i++)
        if (cfg->scopes & names[i].bit)
            json_array_append_new(scopes, json_string(names[i].name));
    json_t *req = json_pack("{s:s, s:o, s:s}", "name", cfg->name, "scopes", scopes, "team",
                            cfg->team ? cfg->team : STORE_TEAM_DEFAULT);
    body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        fprintf(errf, "trainyard token: out of memory\n");
        goto out;
    }
    if (http_call(cfg, "POST", "/v1/tokens", body, &status, &resp, errf) != 0)
        goto out;
    if (status != 201) {
        report_problem(status, &resp, errf);
        goto out;
    }
    json_t *j = json_loadb(resp.data, resp.len, 0, NULL);
    const char *token = json_string_value(json_object_get(j, "token"));
    if (token) {
        fprintf(out, "%s\n", token);
        rc = 0;
    } else {
        fprintf(errf, "trainyard token: the server's answer has no token\n");
    }
    json_decref(j);
out:
    free(body);
    if (resp.data)
        OPENSSL_cleanse(resp.data, resp.len);
    ty_buf_free(&resp);
    return rc;
}

static int http_list(const config_token *cfg, FILE *out, FILE *errf)
{
    ty_buf resp = {0};
    long status = 0;
    int rc = 1;
    json_t *j = NULL;
    if (http_call(cfg, "GET", "/v1/tokens", NULL, &status, &resp, errf) != 0)
        goto out;
    if (status != 200) {
        report_problem(status, &resp, errf);
        goto out;
    }
    j = json_loadb(resp.data, resp.len, 0, NULL);
    json_t *tokens = json_object_get(j, "tokens");
    if (!json_is_array(tokens)) {
        fprintf(errf, "trainyard token: the server's answer has no token list\n");
        goto out;
    }
    print_header(out);
    size_t i;
    json_t *t;
    json_array_foreach(tokens, i, t) {
        char scopes[64] = "";
        size_t used = 0, k;
        json_t *sc;
        json_array_foreach(json_object_get(t, "scopes"), k, sc) {
            const char *name = json_string_value(sc);
            int n = snprintf(scopes + used, sizeof scopes - used, "%s%s", used ? "," : "",
                             name ? name : "?");
            if (n < 0 || (size_t)n >= sizeof scopes - used)
                break;
            used += (size_t)n;
        }
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *created = json_string_value(json_object_get(t, "created_at"));
        print_row(out, name ? name : "?", scopes,
                  json_string_value(json_object_get(t, "team")), created ? created : "?",
                  json_string_value(json_object_get(t, "revoked_at")));
    }
    rc = 0;
out:
    json_decref(j);
    ty_buf_free(&resp);
    return rc;
}

static int http_revoke(const config_token *cfg, FILE *errf)
{
    char path[API_TOKEN_MAX_NAME + 16];
    ty_buf resp = {0};
    long status = 0;
    int rc = 1;
    /* Valid names need no percent-encoding. */
    snprintf(path, sizeof path, "/v1/tokens/%s", cfg->name);
    if (http_call(cfg, "DELETE", path, NULL, &status, &resp, errf) != 0)
        goto out;
    if (status != 204 && status != 200) {
        report_problem(status, &resp, errf);
        goto out;
    }
    rc = 0;
out:
    ty_buf_free(&resp);
    return rc;
}

int token_cli_run(const config_token *cfg, FILE *out, FILE *errf)
{
    if (cfg->name && !api_token_name_valid(cfg->name)) {
        fprintf(errf,
                "trainyard token: invalid name '%s': 1..%d characters of [A-Za-z0-9._-], "
                "starting and ending with a letter or digit\n",
                cfg->name, API_TOKEN_MAX_NAME);
        return 1;
    }
    if (cfg->server) {
        char token[AUTH_MAX_TOKEN + 1];
        config_token with_token = *cfg;
        int rc = 1;
        char ref[CONFIG_PATH_MAX + 2] = "-"; /* --token-file PATH is --token @PATH */
        if (cfg->token_file && strcmp(cfg->token_file, "-") != 0 &&
            snprintf(ref, sizeof ref, "@%s", cfg->token_file) >= (int)sizeof ref) {
            fprintf(errf, "trainyard token: the --token-file path is too long\n");
            return 1;
        }
        if (resolve_token(cfg->token_file ? ref : cfg->token ? cfg->token : "", stdin, token,
                          errf) != 0)
            return 1;
        with_token.token = token;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            fprintf(errf, "trainyard token: cannot initialize libcurl\n");
            goto http_out;
        }
        switch (cfg->action) {
        case CONFIG_TOKEN_CREATE: rc = http_create(&with_token, out, errf); break;
        case CONFIG_TOKEN_LIST: rc = http_list(&with_token, out, errf); break;
        case CONFIG_TOKEN_REVOKE: rc = http_revoke(&with_token, errf); break;
        case CONFIG_TOKEN_NONE: break;
        }
        curl_global_cleanup();
    http_out:
        OPENSSL_cleanse(token, sizeof token);
        return rc;
    }
    switch (cfg->action) {
    case CONFIG_TOKEN_CREATE: return db_create(cfg, out, errf);
    case CONFIG_TOKEN_LIST: return db_list(cfg, out, errf);
    case CONFIG_TOKEN_REVOKE: return db_revoke(cfg, errf);
    case CONFIG_TOKEN_NONE: break;
    }
    return 1;
}
