/*
 * tokens.c - the /v1/tokens resource (admin scope): list, create, revoke; and /v1/whoami (read
 * scope), the calling token as it sees itself.
 *
 * A token's secret is generated here (ty_token_generate), shown once in the
 * 201 response, and never stored: the store keeps only its SHA-256. Listings
 * show names, scopes and dates, never hashes.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "api/tokens.h"
#include "common/ty_crypto.h"
#include "common/ty_time.h"

static const struct {
    const char *name;
    unsigned bit;
} scope_names[] = {
    {"read", STORE_SCOPE_READ},
    {"submit", STORE_SCOPE_SUBMIT},
    {"admin", STORE_SCOPE_ADMIN},
};
#define NSCOPES (sizeof scope_names / sizeof scope_names[0])

unsigned api_scope_parse(const char *name, size_t n)
{
    for (size_t i = 0; i < NSCOPES; i++)
        if (strlen(scope_names[i].name) == n && memcmp(scope_names[i].name, name, n) == 0)
            return scope_names[i].bit;
    return 0;
}

const char *api_scope_name(unsigned bit)
{
    for (size_t i = 0; i < NSCOPES; i++)
        if (scope_names[i].bit == bit)
            return scope_names[i].name;
    return NULL;
}

/* ["read", "submit", ...] in a fixed order; NULL when out of memory. */
static json_t *scopes_json(unsigned scopes)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < NSCOPES; i++) {
        if ((scopes & scope_names[i].bit) &&
            json_array_append_new(a, json_string(scope_names[i].name))) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *token_json(const store_token *t)
{
    char created[32];
    ty_time_format_rfc3339(t->created_at_ms, created, sizeof created);
    json_t *j = json_pack("{s:s, s:o, s:s, s:s}", "name", t->name, "scopes",
                          scopes_json(t->scopes), "team", t->team ? t->team : STORE_TEAM_DEFAULT,
                          "created_at", created);
    if (j && t->revoked_at_ms) {
        char revoked[32];
        ty_time_format_rfc3339(t->revoked_at_ms, revoked, sizeof revoked);
        if (json_object_set_new(j, "revoked_at", json_string(revoked))) {
            json_decref(j);
            j = NULL;
        }
    }
    return j;
}

void api_tokens_list(const api_req *req, api_resp *resp)
{
    store_token *tokens = NULL;
    size_t n = 0;
    json_t *list = NULL;
    ty_err e = store_tokens_list(req->ctx->store, &tokens, &n);
    if (e)
        goto fail;
    e = TY_ENOMEM;
    if (!(list = json_array()))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *t = token_json(&tokens[i]);
        if (!t || json_array_append_new(list, t))
            goto fail;
    }
    api_reply_json(resp, 200, json_pack("{s:o}", "tokens", list));
    list = NULL;
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    json_decref(list);
    store_tokens_free(tokens, n);
}

int api_token_name_valid(const char *name)
{
    size_t len = strlen(name);
    return len > 0 && len <= API_TOKEN_MAX_NAME && spec_is_label_value(name, len);
}

void api_tokens_whoami(const api_req *req, api_resp *resp)
{
    const api_principal *p = req->principal;
    api_reply_json(resp, 200,
                   json_pack("{s:s, s:o, s:s}", "name", api_principal_name(req), "scopes",
                             scopes_json(p ? p->scopes : 0), "team", api_principal_team(req)));
}

ty_err api_token_issue(store *s, const char *name, unsigned scopes,
                       char secret_out[TY_TOKEN_BUFLEN])
{
    return api_token_issue_team(s, name, scopes, NULL, secret_out);
}

ty_err api_token_issue_team(store *s, const char *name, unsigned scopes, const char *team,
                            char secret_out[TY_TOKEN_BUFLEN])
{
    unsigned char hash[TY_SHA256_LEN];
    if (!api_token_name_valid(name) || scopes == 0)
        return TY_EINVAL;
    ty_err e = ty_token_generate(secret_out);
    if (e)
        return e;
    ty_sha256(secret_out, strlen(secret_out), hash);
    e = store_token_create_team(s, name, scopes, team, hash);
    if (e)
        memset(secret_out, 0, TY_TOKEN_BUFLEN);
    return e;
}

static const char *const request_fields[] = {"name", "scopes", "team", NULL};

/* Validates {"name", "scopes", "team"}; appends errors; sets *name and *team (borrowed from
 * body; team STORE_TEAM_DEFAULT when absent) and *scopes. */
static void parse_create(const json_t *body, spec_errors *errs, const char **name, unsigned *scopes,
                         const char **team)
{
    *name = NULL;
    *scopes = 0;
    *team = STORE_TEAM_DEFAULT;
    if (!json_is_object(body)) {
        spec_errors_add(errs, "$", "must be an object");
        return;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)body, key, val)
    {
        int known = 0;
        for (size_t i = 0; request_fields[i]; i++)
            known |= strcmp(key, request_fields[i]) == 0;
        if (!known) {
            char path[96];
            snprintf(path, sizeof path, "$.%.80s", key);
            spec_errors_add(errs, path, "unknown field");
        }
    }
    json_t *n = json_object_get(body, "name");
    if (!n || json_is_null(n))
        spec_errors_add(errs, "$.name", "is required");
    else if (!json_is_string(n))
        spec_errors_add(errs, "$.name", "must be a string");
    else if (strlen(json_string_value(n)) != json_string_length(n) ||
             !api_token_name_valid(json_string_value(n)))
        spec_errors_add(errs, "$.name",
                        "must be 1-63 characters of A-Z, a-z, 0-9, '-', '_' and '.', starting "
                        "and ending with a letter or digit");
    else
        *name = json_string_value(n);

    json_t *t = json_object_get(body, "team");
    if (t && (!json_is_string(t) || !spec_is_dns_label(json_string_value(t), json_string_length(t))))
        spec_errors_add(errs, "$.team", "must be a team name (a DNS label)");
    else if (t)
        *team = json_string_value(t);

    json_t *s = json_object_get(body, "scopes");
    if (!s || json_is_null(s)) {
        spec_errors_add(errs, "$.scopes", "is required");
        return;
    }
    if (!json_is_array(s)) {
        spec_errors_add(errs, "$.scopes", "must be an array of scope names");
        return;
    }
    if (json_array_size(s) == 0)
        spec_errors_add(errs, "$.scopes", "must not be empty");
    size_t i;
    json_t *item;
    json_array_foreach(s, i, item)
    {
        char path[48];
        snprintf(path, sizeof path, "$.scopes[%zu]", i);
        unsigned bit = json_is_string(item) ? api_scope_parse(json_string_value(item),
                                                              json_string_length(item))
                                            : 0;
        if (!bit)
            spec_errors_add(errs, path, "must be one of \"read\", \"submit\", \"admin\"");
        else if (*scopes & bit)
            spec_errors_add(errs, path, "duplicate scope");
        *scopes |= bit;
    }
}

/* created_at as the store recorded it; now when the token cannot be read back. */
static int64_t created_at(store *s, const char *name)
{
    store_token *tokens = NULL;
    size_t n = 0;
    int64_t at = ty_time_now_ms();
    if (store_tokens_list(s, &tokens, &n) == TY_OK)
        for (size_t i = 0; i < n; i++)
            if (strcmp(tokens[i].name, name) == 0)
                at = tokens[i].created_at_ms;
    store_tokens_free(tokens, n);
    return at;
}

void api_tokens_create(const api_req *req, api_resp *resp)
{
    json_t *body = NULL;
    spec_errors errs = {0};
    char secret[TY_TOKEN_BUFLEN] = "";
    const char *name, *team;
    unsigned scopes;

    if (!api_need_json_body(req, resp, &body))
        goto out;
    ty_err e = spec_errors_init(&errs);
    if (e)
        goto fail;
    parse_create(body, &errs, &name, &scopes, &team);
    if (errs.count) {
        json_t *list = errs.list;
        errs.list = NULL;
        api_reply_problem(resp, 422, "invalid-request", NULL, "the token request is invalid", list);
        goto out;
    }
    e = api_token_issue_team(req->ctx->store, name, scopes, team, secret);
    if (e == TY_ENOTFOUND) {
        json_t *list = json_pack("[{s:s, s:s}]", "path", "$.team", "message",
                                 "no team has this name");
        api_reply_problem(resp, 422, "invalid-request", NULL, "the token request is invalid", list);
        goto out;
    }
    if (e == TY_EEXISTS) {
        api_reply_problem(resp, 409, "token-exists", NULL,
                          "a token with this name exists (revoked names are not reused)", NULL);
        goto out;
    }
    if (e)
        goto fail;
    char created[32];
    ty_time_format_rfc3339(created_at(req->ctx->store, name), created, sizeof created);
    api_reply_json(resp, 201,
                   json_pack("{s:s, s:o, s:s, s:s, s:s}", "name", name, "scopes",
                             scopes_json(scopes), "team", team, "created_at", created, "token",
                             secret));
    goto out;
fail:
    api_reply_error(resp, e, NULL);
out:
    memset(secret, 0, sizeof secret);
    spec_errors_free(&errs);
    json_decref(body);
}

void api_tokens_revoke(const api_req *req, api_resp *resp)
{
    ty_err e = req->id ? store_token_revoke(req->ctx->store, req->id) : TY_ENOTFOUND;
    if (e == TY_ENOTFOUND) {
        api_reply_problem(resp, 404, "token-not-found", NULL, "no valid token has this name", NULL);
        return;
    }
    if (e) {
        api_reply_error(resp, e, NULL);
        return;
    }
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    resp->content_type = NULL;
    resp->status = 204;
}
