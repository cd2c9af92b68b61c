/*
 * tokens.h - issuing API tokens. The one place that decides what a token
 * name may be and how a secret is minted and stored, shared by
 * POST /v1/tokens and `trainyard token create` on the database file.
 */
#ifndef TY_API_TOKENS_H
#define TY_API_TOKENS_H

#include "common/ty_crypto.h"
#include "common/ty_error.h"
#include "store/store.h"

#define API_TOKEN_MAX_NAME 63

/* The STORE_SCOPE_* bit named by the n bytes at name ("read", "submit",
 * "admin"); 0 when no scope has that name. */
unsigned api_scope_parse(const char *name, size_t n);
/* The name of one STORE_SCOPE_* bit; NULL for anything else. Scopes are
 * listed in bit order: read, submit, admin. */
const char *api_scope_name(unsigned bit);

/*
 * 1 when name is a valid token name: 1..63 characters of [A-Za-z0-9._-],
 * starting and ending with a letter or digit (a Kubernetes label value, and
 * usable in a URL path without escaping); 0 otherwise.
 */
int api_token_name_valid(const char *name);

/*
 * Creates a token: generates its secret into secret_out and stores only the
 * secret's SHA-256. TY_EINVAL for an invalid name or no scopes, TY_EEXISTS
 * when the name is taken (revoked names included), store errors otherwise;
 * on failure secret_out is wiped.
 */
ty_err api_token_issue(store *s, const char *name, unsigned scopes,
                       char secret_out[TY_TOKEN_BUFLEN]);
/* The same for a token of team (NULL: STORE_TEAM_DEFAULT); TY_ENOTFOUND when no team has that
 * name. */
ty_err api_token_issue_team(store *s, const char *name, unsigned scopes, const char *team,
                            char secret_out[TY_TOKEN_BUFLEN]);

#endif
