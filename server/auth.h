/*
 * auth.h - bearer-token authentication against the tokens in the store.
 *
 * Secrets are never stored: the store keeps SHA-256(token). A request's token
 * is hashed and compared in constant time with every valid token's hash (no
 * early exit), so neither the position of a match nor how much of a hash
 * matched shows in the timing.
 *
 * The valid tokens are cached in memory. The cache reloads from the store when
 * it is older than max_age (1 s in the server), so tokens created or revoked
 * by another process on the same database file (`trainyard token ...`) take
 * effect within that time, and on the next check after auth_cache_invalidate()
 * (called by the server after a successful token change through the API).
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef TY_SERVER_AUTH_H
#define TY_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"
#include "store/store.h"

/* Longest token accepted in an Authorization header or TRAINYARD_ADMIN_TOKEN. */
#define AUTH_MAX_TOKEN 512
/* Name of the admin token created on first start. */
#define AUTH_ADMIN_NAME "admin"

typedef struct auth_cache auth_cache;

/* *out is new; the store is borrowed and must outlive the cache. max_age_ms >= 0. */
ty_err auth_cache_new(store *s, int64_t max_age_ms, auth_cache **out);
/* Accepts NULL. */
void auth_cache_free(auth_cache *c);
/* Makes the next auth_check() reload the tokens from the store. */
void auth_cache_invalidate(auth_cache *c);

/*
 * Checks an Authorization header value (may be NULL) for a route that needs
 * `scope` (one STORE_SCOPE_* bit; STORE_SCOPE_ADMIN satisfies every scope).
 * A token that is no API token may be a job token (store_job_token_lookup):
 * its principal's name is "job:<id>" (API_JOB_PRINCIPAL_PREFIX, api/api.h;
 * api_principal_job_id() reads it back) with the scopes STORE_SCOPE_REPORT
 * alone, so any other route is TY_EFORBIDDEN for it; that
 * the route's job is its own is the handler's check. A revoked job token is
 * TY_EAUTH like an unknown one.
 * Returns:
 *   TY_OK          *name (new, the token's name) and *scopes are set
 *   TY_EAUTH       missing header, not "Bearer <token>", or no valid token matches
 *   TY_EFORBIDDEN  the token is valid but lacks the scope; *name and *scopes are set
 *   other          the store could not be read (the request must fail: no
 *                  stale token list is trusted)
 * On TY_EAUTH and store errors *name is NULL.
 */
ty_err auth_check(auth_cache *c, const char *authorization, unsigned scope, char **name,
                  unsigned *scopes);
/* auth_check() that also sets *team (when team is not NULL): new, the API token's team, NULL
 * for a job token and whenever *name is NULL. */
ty_err auth_check_team(auth_cache *c, const char *authorization, unsigned scope, char **name,
                       unsigned *scopes, char **team);

/* 1 when token is a usable secret: 1..AUTH_MAX_TOKEN visible ASCII characters (no spaces). */
int auth_token_valid(const char *token);

/*
 * First start: when the store has no valid admin token, creates one named
 * "admin" (or "admin-2", "admin-3"... when that name is taken by a revoked
 * token). Its secret is env_token when not NULL (it must pass
 * auth_token_valid(), else TY_EINVAL); otherwise a generated one is written to
 * "<directory of db_path>/admin.token" (mode 0600, created exclusively, the
 * token and a newline) and the path is logged, never the token. An existing
 * admin.token file is TY_EEXISTS (it is never overwritten: it may hold a
 * secret someone relies on). err receives a one-line reason on failure.
 * *created (may be NULL) is 1 when a token was created.
 */
ty_err auth_bootstrap_admin(store *s, const char *db_path, const char *env_token, int *created,
                            char *err, size_t errlen);

#endif
