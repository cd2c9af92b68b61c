/*
 * store_tokens.c - API tokens: name, scopes and the SHA-256 of the secret.
 *
 * The secret itself is never stored, so a copy of the database does not
 * grant access. Names are unique forever: a revoked token keeps its row (and
 * its name) so the audit trail of who could do what stays readable. Creation
 * and revocation go through the writer like every other write; listing and
 * counting use a read connection.
 *
 * Job tokens (job_tokens) are not named: each belongs to one attempt of one
 * job and is written and revoked by the job's own transitions (store_sched.c,
 * store_jobs.c), so a token can never outlive its job's end, even by one
 * commit. They are looked up by hash (one seek), not cached: a revocation
 * takes effect on the next request.
 */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/ty_time.h"

/* Inserts nothing when the team does not exist: the check and the insert are one statement,
 * so a team deleted meanwhile (store_teams.c, also a writer op) cannot gain a token. */
static const char SQL_TOKEN_INSERT[] =
    "INSERT INTO tokens (name, scopes, hash, created_ms, team) "
    "SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM teams WHERE name = ?5)";
static const char SQL_TOKEN_REVOKE[] =
    "UPDATE tokens SET revoked_ms = ?2 WHERE name = ?1 AND revoked_ms IS NULL";
static const char SQL_TOKENS_LIST[] =
    "SELECT name, scopes, hash, created_ms, revoked_ms, team FROM tokens ORDER BY name";
static const char SQL_TOKENS_ADMIN[] =
    "SELECT count(*) FROM tokens WHERE revoked_ms IS NULL AND (scopes & 4) != 0";

static const char SQL_JOB_TOKEN_INSERT[] =
    "INSERT INTO job_tokens (hash, job_seq, attempt, created_ms) VALUES (?1, ?2, ?3, ?4)";
static const char SQL_JOB_TOKENS_REVOKE[] =
    "UPDATE job_tokens SET revoked_ms = ?2 WHERE job_seq = ?1 AND revoked_ms IS NULL";
static const char SQL_JOB_TOKEN_LOOKUP[] =
    "SELECT j.id, t.attempt FROM job_tokens AS t JOIN jobs AS j ON j.seq = t.job_seq "
    "WHERE t.hash = ?1 AND t.revoked_ms IS NULL";

#define SCOPES_ALL (STORE_SCOPE_READ | STORE_SCOPE_SUBMIT | STORE_SCOPE_ADMIN)

ty_err store_token_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    sqlite3_stmt *st = NULL;
    int create = op->kind == STORE_OP_TOKEN_CREATE;
    ty_err e = store_conn_stmt(w, create ? SQL_TOKEN_INSERT : SQL_TOKEN_REVOKE, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, op->u.token.name);
    if (create) {
        sqlite3_bind_int(st, 2, (int)op->u.token.scopes);
        sqlite3_bind_blob(st, 3, op->u.token.hash, 32, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, ty_time_now_ms());
        store_bind_text(st, 5, op->u.token.team);
    } else {
        sqlite3_bind_int64(st, 2, ty_time_now_ms());
    }
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_sqlite_err(rc);
    if (sqlite3_changes(w->db) == 0)
        return TY_ENOTFOUND; /* create: no such team; revoke: no such valid token */
    return TY_OK;
}

ty_err store_token_create(store *s, const char *name, unsigned scopes, const unsigned char hash[32])
{
    return store_token_create_team(s, name, scopes, NULL, hash);
}

ty_err store_token_create_team(store *s, const char *name, unsigned scopes, const char *team,
                               const unsigned char hash[32])
{
    if (!s || !name || !name[0] || !hash || scopes == 0 || (scopes & ~SCOPES_ALL) ||
        (team && !team[0]))
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TOKEN_CREATE};
    op.u.token.name = name;
    op.u.token.scopes = scopes;
    op.u.token.hash = hash;
    op.u.token.team = team ? team : STORE_TEAM_DEFAULT;
    return store_writer_run(s, &op);
}

ty_err store_token_revoke(store *s, const char *name)
{
    if (!s || !name)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TOKEN_REVOKE};
    op.u.token.name = name;
    return store_writer_run(s, &op);
}

void store_tokens_free(store_token *tokens, size_t n)
{
    if (!tokens)
        return;
    for (size_t i = 0; i < n; i++) {
        free(tokens[i].name);
        free(tokens[i].team);
    }
    free(tokens);
}

static ty_err token_from_row(sqlite3_stmt *st, void *item)
{
    store_token *t = item;
    if (!(t->name = store_column_dup(st, 0)))
        return TY_ENOMEM;
    t->scopes = (unsigned)sqlite3_column_int(st, 1);
    if (sqlite3_column_bytes(st, 2) != 32)
        return TY_ESCHEMA;
    memcpy(t->hash, sqlite3_column_blob(st, 2), 32);
    t->created_at_ms = sqlite3_column_int64(st, 3);
    t->revoked_at_ms = sqlite3_column_int64(st, 4); /* NULL reads as 0: valid */
    return (t->team = store_column_dup(st, 5)) ? TY_OK : TY_ENOMEM;
}

ty_err store_tokens_list(store *s, store_token **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    ty_err e = store_read_rows(s, SQL_TOKENS_LIST, NULL, sizeof(store_token), token_from_row, &v);
    if (e != TY_OK) {
        store_tokens_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

ty_err store_token_count_admin(store *s, int64_t *count)
{
    if (!s || !count)
        return TY_EINVAL;
    return store_read_int64(s, SQL_TOKENS_ADMIN, count);
}

/* ---- job tokens ------------------------------------------------------------ */

ty_err store_job_tokens_revoke(store_conn *w, int64_t job_seq)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_JOB_TOKENS_REVOKE, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, job_seq);
    sqlite3_bind_int64(st, 2, ty_time_now_ms());
    return store_step_done(st);
}

ty_err store_job_token_put(store_conn *w, int64_t job_seq, int attempt,
                           const unsigned char hash[32])
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_job_tokens_revoke(w, job_seq);
    if (e != TY_OK || (e = store_conn_stmt(w, SQL_JOB_TOKEN_INSERT, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, job_seq);
    sqlite3_bind_int(st, 3, attempt);
    sqlite3_bind_int64(st, 4, ty_time_now_ms());
    return store_step_done(st);
}

ty_err store_job_token_lookup(store *s, const unsigned char hash[32], char id[STORE_ID_LEN + 1],
                              int *attempt)
{
    if (!s || !hash || !id || !attempt)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_JOB_TOKEN_LOOKUP, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == STORE_ID_LEN) {
            memcpy(id, sqlite3_column_text(st, 0), STORE_ID_LEN + 1);
            *attempt = sqlite3_column_int(st, 1);
        } else {
            e = rc == SQLITE_ROW ? TY_ESCHEMA
                : rc == SQLITE_DONE ? TY_ENOTFOUND
                                    : store_sqlite_err(rc);
        }
        sqlite3_reset(st);
    }
    store_reader_release(s, c);
    return e;
}
