/*
 * store_teams.c - teams: their weight, quota and borrowing limits, and their usage.
 *
 * A team is one row of teams and one row of team_resources per resource its quota or its
 * borrowing limit names ("gpu/<type>", "cpu" in millicores, "memory" in bytes). Creation,
 * replacement and deletion are writer operations (STORE_OP_TEAM_*), so a deletion's checks
 * (no job that has not ended, no valid token) and the delete are one transaction, and a
 * token's creation checks its team in the statement that inserts it (store_tokens.c).
 *
 * Usage is not a ledger kept by hand: every job records at submission what it requests in
 * total (jobs.gpu_type, .gpus, .cpu_milli, .memory_bytes, store_jobs.c), and a team's usage
 * is the sum over its jobs from ADMITTED to CANCELLING, a range of the (team, state) index;
 * its pending count is the range of state 0. Both read in one snapshot.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_time.h"

static const char SQL_TEAM_INSERT[] =
    "INSERT INTO teams (name, weight, has_quota, created_ms, updated_ms, priority_preemption) "
    "VALUES (?1, ?2, ?3, ?4, ?4, ?5)";
static const char SQL_TEAM_UPDATE[] =
    "UPDATE teams SET weight = ?2, has_quota = ?3, updated_ms = ?4, priority_preemption = ?5 "
    "WHERE name = ?1";
static const char SQL_TEAM_DELETE[] = "DELETE FROM teams WHERE name = ?1";
static const char SQL_RES_DELETE[] = "DELETE FROM team_resources WHERE team = ?1";
static const char SQL_RES_INSERT[] =
    "INSERT INTO team_resources (team, resource, quota, borrowing_limit) VALUES (?1, ?2, ?3, ?4)";
static const char SQL_TEAM_ACTIVE_JOB[] =
    "SELECT 1 FROM jobs INDEXED BY jobs_team_state WHERE team = ?1 AND state < 6 LIMIT 1";
static const char SQL_TEAM_TOKEN[] =
    "SELECT 1 FROM tokens WHERE team = ?1 AND revoked_ms IS NULL LIMIT 1";
static const char SQL_TEAM_EXISTS[] = "SELECT 1 FROM teams WHERE name = ?1";
static const char SQL_TEAMS[] =
    "SELECT name, weight, has_quota, created_ms, updated_ms, priority_preemption FROM teams "
    "ORDER BY name";
static const char SQL_TEAM_GET[] =
    "SELECT name, weight, has_quota, created_ms, updated_ms, priority_preemption FROM teams "
    "WHERE name = ?1";
static const char SQL_TEAM_RES[] =
    "SELECT resource, quota, borrowing_limit FROM team_resources WHERE team = ?1 "
    "ORDER BY resource";
static const char SQL_TEAM_COUNTS[] =
    "SELECT state, count(*) FROM jobs INDEXED BY jobs_team_state "
    "WHERE team = ?1 AND state <= 5 GROUP BY state";
static const char SQL_TEAM_USE[] =
    "SELECT gpu_type, sum(gpus), sum(cpu_milli), sum(memory_bytes) FROM jobs "
    "INDEXED BY jobs_team_state WHERE team = ?1 AND state BETWEEN 1 AND 5 GROUP BY gpu_type";

/* ---- validation and writes ---------------------------------------------------- */

static int team_valid(const store_team *t)
{
    if (!t || !t->name || !t->name[0] || strlen(t->name) > 63 || t->weight < 1 ||
        t->weight > STORE_TEAM_WEIGHT_MAX || t->nres > STORE_TEAM_MAX_RESOURCES ||
        (t->nres && !t->res))
        return 0;
    for (size_t i = 0; i < t->nres; i++) {
        const store_team_res *r = &t->res[i];
        if (!r->resource || !r->resource[0] || r->quota < -1 || r->borrowing_limit < -1 ||
            (r->quota < 0 && r->borrowing_limit < 0))
            return 0;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(t->res[k].resource, r->resource))
                return 0;
    }
    return 1;
}

static ty_err step_bound_name(store_conn *w, const char *sql, const char *name, int *row)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, sql, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    *row = rc == SQLITE_ROW;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TY_OK : store_sqlite_err(rc);
}

static ty_err put_resources(store_conn *w, const store_team *t)
{
    sqlite3_stmt *st = NULL;
    int row;
    ty_err e = step_bound_name(w, SQL_RES_DELETE, t->name, &row);
    for (size_t i = 0; e == TY_OK && i < t->nres; i++) {
        if ((e = store_conn_stmt(w, SQL_RES_INSERT, 0, &st)) != TY_OK)
            break;
        store_bind_text(st, 1, t->name);
        store_bind_text(st, 2, t->res[i].resource);
        if (t->res[i].quota >= 0)
            sqlite3_bind_int64(st, 3, t->res[i].quota);
        if (t->res[i].borrowing_limit >= 0)
            sqlite3_bind_int64(st, 4, t->res[i].borrowing_limit);
        e = store_step_done(st);
    }
    return e;
}

static ty_err delete_apply(store_conn *w, store_op *op)
{
    const char *name = op->u.team.name;
    int row = 0;
    ty_err e = step_bound_name(w, SQL_TEAM_EXISTS, name, &row);
    if (e != TY_OK)
        return e;
    if (!row)
        return TY_ENOTFOUND;
    if (!strcmp(name, STORE_TEAM_DEFAULT)) {
        op->u.team.why = "the default team cannot be deleted";
        return TY_ECONFLICT;
    }
    if ((e = step_bound_name(w, SQL_TEAM_ACTIVE_JOB, name, &row)) != TY_OK)
        return e;
    if (row) {
        op->u.team.why = "the team has jobs that have not ended";
        return TY_ECONFLICT;
    }
    if ((e = step_bound_name(w, SQL_TEAM_TOKEN, name, &row)) != TY_OK)
        return e;
    if (row) {
        op->u.team.why = "the team has valid tokens; revoke them first";
        return TY_ECONFLICT;
    }
    if ((e = step_bound_name(w, SQL_RES_DELETE, name, &row)) != TY_OK)
        return e;
    return step_bound_name(w, SQL_TEAM_DELETE, name, &row);
}

ty_err store_team_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    if (op->kind == STORE_OP_TEAM_DELETE)
        return delete_apply(w, op);
    const store_team *t = op->u.team.team;
    int create = op->kind == STORE_OP_TEAM_CREATE;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, create ? SQL_TEAM_INSERT : SQL_TEAM_UPDATE, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, t->name);
    sqlite3_bind_int(st, 2, t->weight);
    sqlite3_bind_int(st, 3, t->has_quota ? 1 : 0);
    sqlite3_bind_int64(st, 4, ty_time_now_ms());
    sqlite3_bind_int(st, 5, t->priority_preemption ? 1 : 0);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    if (!create && sqlite3_changes(w->db) == 0)
        return TY_ENOTFOUND;
    return put_resources(w, t);
}

ty_err store_team_create(store *s, const store_team *t)
{
    if (!s || !team_valid(t))
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TEAM_CREATE};
    op.u.team.team = t;
    return store_writer_run(s, &op);
}

ty_err store_team_update(store *s, const store_team *t)
{
    if (!s || !team_valid(t))
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TEAM_UPDATE};
    op.u.team.team = t;
    return store_writer_run(s, &op);
}

ty_err store_team_delete(store *s, const char *name, const char **why)
{
    if (why)
        *why = NULL;
    if (!s || !name)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_TEAM_DELETE};
    op.u.team.name = name;
    ty_err e = store_writer_run(s, &op);
    if (e == TY_ECONFLICT && why)
        *why = op.u.team.why;
    return e;
}

/* ---- reads ---------------------------------------------------------------------- */

void store_teams_free(store_team *t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++) {
        free(t[i].name);
        for (size_t k = 0; k < t[i].nres; k++)
            free(t[i].res[k].resource);
        free(t[i].res);
    }
    free(t);
}

void store_team_usage_clear(store_team_usage *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->nuse; i++)
        free(u->use[i].resource);
    free(u->use);
    memset(u, 0, sizeof *u);
}

static ty_err team_from_row(sqlite3_stmt *st, void *item)
{
    store_team *t = item;
    t->weight = sqlite3_column_int(st, 1);
    t->has_quota = sqlite3_column_int(st, 2);
    t->created_at_ms = sqlite3_column_int64(st, 3);
    t->updated_at_ms = sqlite3_column_int64(st, 4);
    t->priority_preemption = sqlite3_column_int(st, 5);
    return (t->name = store_column_dup(st, 0)) ? TY_OK : TY_ENOMEM;
}

static ty_err res_from_row(sqlite3_stmt *st, void *item)
{
    store_team_res *r = item;
    r->quota = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
    r->borrowing_limit =
        sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 2);
    return (r->resource = store_column_dup(st, 0)) ? TY_OK : TY_ENOMEM;
}

/* Reads the teams of sql (?1 bound to name when not NULL) with their resources, on c. */
static ty_err read_teams(store_conn *c, const char *sql, const char *name, store_vec *v)
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e != TY_OK)
        return e;
    if (name)
        store_bind_text(st, 1, name);
    if ((e = store_collect(st, sizeof(store_team), team_from_row, v)) != TY_OK)
        return e;
    for (size_t i = 0; i < v->n; i++) {
        store_team *t = &((store_team *)v->items)[i];
        store_vec r = {0};
        if ((e = store_conn_stmt(c, SQL_TEAM_RES, 0, &st)) != TY_OK)
            return e;
        store_bind_text(st, 1, t->name);
        e = store_collect(st, sizeof(store_team_res), res_from_row, &r);
        t->res = r.items;
        t->nres = r.n;
        if (e != TY_OK)
            return e;
    }
    return TY_OK;
}

static ty_err teams_read(store *s, const char *sql, const char *name, store_vec *v)
{
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e == TY_OK) {
        e = read_teams(c, sql, name, v);
        store_read_end(c);
    }
    store_reader_release(s, c);
    if (e != TY_OK) {
        store_teams_free(v->items, v->n);
        *v = (store_vec){0};
    }
    return e;
}

ty_err store_team_get(store *s, const char *name, store_team **out)
{
    if (!s || !name || !out)
        return TY_EINVAL;
    *out = NULL;
    store_vec v = {0};
    ty_err e = teams_read(s, SQL_TEAM_GET, name, &v);
    if (e != TY_OK)
        return e;
    if (v.n != 1) {
        store_teams_free(v.items, v.n);
        return TY_ENOTFOUND;
    }
    *out = v.items;
    return TY_OK;
}

ty_err store_teams_list(store *s, store_team **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    ty_err e = teams_read(s, SQL_TEAMS, NULL, &v);
    *out = v.items;
    *nout = v.n;
    return e;
}

/* Appends (resource, amount) to u when amount > 0; resource is copied. */
static ty_err add_use(store_team_usage *u, size_t *cap, const char *resource, int64_t amount)
{
    if (amount <= 0)
        return TY_OK;
    for (size_t i = 0; i < u->nuse; i++) {
        if (!strcmp(u->use[i].resource, resource)) {
            u->use[i].amount += amount;
            return TY_OK;
        }
    }
    if (u->nuse == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        store_team_use *g = realloc(u->use, ncap * sizeof *g);
        if (!g)
            return TY_ENOMEM;
        u->use = g;
        *cap = ncap;
    }
    if (!(u->use[u->nuse].resource = strdup(resource)))
        return TY_ENOMEM;
    u->use[u->nuse++].amount = amount;
    return TY_OK;
}

static int cmp_use(const void *a, const void *b)
{
    return strcmp(((const store_team_use *)a)->resource, ((const store_team_use *)b)->resource);
}

static ty_err read_usage(store_conn *c, const char *name, store_team_usage *u)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    int rc;
    ty_err e = store_conn_stmt(c, SQL_TEAM_COUNTS, 0, &st);
    if (e != TY_OK)
        return e;
    store_bind_text(st, 1, name);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_int(st, 0) == JOB_PENDING)
            u->pending += sqlite3_column_int64(st, 1);
        else
            u->admitted += sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_sqlite_err(rc);
    if ((e = store_conn_stmt(c, SQL_TEAM_USE, 0, &st)) != TY_OK)
        return e;
    store_bind_text(st, 1, name);
    while (e == TY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *type = sqlite3_column_text(st, 0);
        if (type) {
            char res[96];
            int n = snprintf(res, sizeof res, "gpu/%s", (const char *)type);
            if (n > 0 && (size_t)n < sizeof res)
                e = add_use(u, &cap, res, sqlite3_column_int64(st, 1));
        }
        if (e == TY_OK)
            e = add_use(u, &cap, "cpu", sqlite3_column_int64(st, 2));
        if (e == TY_OK)
            e = add_use(u, &cap, "memory", sqlite3_column_int64(st, 3));
    }
    sqlite3_reset(st);
    if (e == TY_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        return store_sqlite_err(rc);
    if (e == TY_OK && u->nuse > 1)
        qsort(u->use, u->nuse, sizeof *u->use, cmp_use);
    return e;
}

ty_err store_team_usage_get(store *s, const char *name, store_team_usage *out)
{
    if (!s || !name || !out)
        return TY_EINVAL;
    memset(out, 0, sizeof *out);
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_read_begin(c);
    if (e == TY_OK) {
        e = read_usage(c, name, out);
        store_read_end(c);
    }
    store_reader_release(s, c);
    if (e != TY_OK)
        store_team_usage_clear(out);
    return e;
}
