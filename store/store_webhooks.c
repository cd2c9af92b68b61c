/*
 * store_webhooks.c - CI webhooks: registrations and their secrets at rest.
 *
 * Secrets (see store.h): a GitHub or generic secret is sealed by store_seal.c (AES-256-GCM
 * under the key file next to the database) with the hook's name as the associated data, so a
 * sealed secret moved to another row does not open. A GitLab token is kept as its SHA-256.
 *
 * Writes go through the store's one writer like every other (STORE_OP_WEBHOOK_*): a second
 * read-write connection would contend with the writer for SQLite's write lock.
 */
#include "store/store_int.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"

static const char SQL_HOOK_INSERT[] =
    "INSERT INTO webhooks (name, provider, events, branches, template, secret, created_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_HOOK_DELETE[] = "DELETE FROM webhooks WHERE name = ?1";
/* Names are DNS labels: no LIKE wildcard can appear in one. */
static const char SQL_DELIVERIES_DELETE[] =
    "DELETE FROM webhook_deliveries WHERE key LIKE 'webhook:' || ?1 || ':%'";
static const char SQL_DELIVERY_GET[] =
    "SELECT j.id, d.body_hash FROM webhook_deliveries AS d JOIN jobs AS j ON j.seq = d.job_seq "
    "WHERE d.key = ?1";
static const char SQL_HOOKS_LIST[] =
    "SELECT name, provider, events, branches, template, created_ms FROM webhooks ORDER BY name";
static const char SQL_HOOK_GET[] =
    "SELECT name, provider, events, branches, template, created_ms, secret FROM webhooks "
    "WHERE name = ?1";

/* ---- writes ------------------------------------------------------------------ */

static int is_provider(const char *p)
{
    return p && (!strcmp(p, "github") || !strcmp(p, "gitlab") || !strcmp(p, "generic"));
}

ty_err store_webhook_create(store *s, const store_webhook *w)
{
    if (!s || !w || !w->name || !w->name[0] || !is_provider(w->provider) || !w->events_json ||
        !w->branches_json || !w->template_json || !w->secret || !w->secret_len ||
        w->secret_len > STORE_SECRET_MAX)
        return TY_EINVAL;
    unsigned char *blob = NULL, hash[TY_SHA256_LEN];
    size_t bloblen = 0;
    ty_err e;
    if (!strcmp(w->provider, "gitlab")) {
        ty_sha256(w->secret, w->secret_len, hash);
        if (!(blob = malloc(sizeof hash)))
            return TY_ENOMEM;
        memcpy(blob, hash, sizeof hash);
        bloblen = sizeof hash;
    } else {
        if ((e = store_secret_seal(s, w->name, w->secret, w->secret_len, &blob, &bloblen)))
            return e;
    }
    store_op op = {.kind = STORE_OP_WEBHOOK_CREATE};
    op.u.webhook.hook = w;
    op.u.webhook.sealed = blob;
    op.u.webhook.sealed_len = bloblen;
    e = store_writer_run(s, &op);
    free(blob);
    return e;
}

ty_err store_webhook_delete(store *s, const char *name)
{
    if (!s || !name)
        return TY_EINVAL;
    store_op op = {.kind = STORE_OP_WEBHOOK_DELETE};
    op.u.webhook.name = name;
    return store_writer_run(s, &op);
}

/* Run by the writer, in the group's transaction: a registration, or a removal with the
 * records of the hook's deliveries. */
ty_err store_webhook_apply(store *s, store_conn *w, store_op *op)
{
    (void)s;
    sqlite3_stmt *st = NULL;
    ty_err e;
    if (op->kind == STORE_OP_WEBHOOK_CREATE) {
        const store_webhook *h = op->u.webhook.hook;
        if ((e = store_conn_stmt(w, SQL_HOOK_INSERT, 0, &st)) != TY_OK)
            return e;
        sqlite3_bind_text(st, 1, h->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, h->provider, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, h->events_json, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, h->branches_json, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, h->template_json, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 6, op->u.webhook.sealed, (int)op->u.webhook.sealed_len,
                          SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, ty_time_now_ms());
        return store_step_done(st);
    }
    if ((e = store_conn_stmt(w, SQL_HOOK_DELETE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_text(st, 1, op->u.webhook.name, -1, SQLITE_STATIC);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    if (sqlite3_changes(w->db) == 0)
        return TY_ENOTFOUND;
    if ((e = store_conn_stmt(w, SQL_DELIVERIES_DELETE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_text(st, 1, op->u.webhook.name, -1, SQLITE_STATIC);
    return store_step_done(st);
}

/* ---- reads ------------------------------------------------------------------- */

void store_webhooks_free(store_webhook *hooks, size_t n)
{
    if (!hooks)
        return;
    for (size_t i = 0; i < n; i++) {
        store_webhook *w = &hooks[i];
        free(w->name);
        free(w->provider);
        free(w->events_json);
        free(w->branches_json);
        free(w->template_json);
        if (w->secret)
            OPENSSL_cleanse(w->secret, w->secret_len);
        free(w->secret);
    }
    free(hooks);
}

static ty_err hook_from_row(sqlite3_stmt *st, void *item)
{
    store_webhook *w = item;
    if (!(w->name = store_column_dup(st, 0)) || !(w->provider = store_column_dup(st, 1)) ||
        !(w->events_json = store_column_dup(st, 2)) ||
        !(w->branches_json = store_column_dup(st, 3)) ||
        !(w->template_json = store_column_dup(st, 4)))
        return TY_ENOMEM;
    w->created_at_ms = sqlite3_column_int64(st, 5);
    return TY_OK;
}

ty_err store_webhooks_list(store *s, store_webhook **out, size_t *nout)
{
    if (!s || !out || !nout)
        return TY_EINVAL;
    store_vec v = {0};
    ty_err e = store_read_rows(s, SQL_HOOKS_LIST, NULL, sizeof(store_webhook), hook_from_row, &v);
    if (e != TY_OK) {
        store_webhooks_free(v.items, v.n);
        v = (store_vec){0};
    }
    *out = v.items;
    *nout = v.n;
    return e;
}

ty_err store_webhook_get(store *s, const char *name, store_webhook **out)
{
    if (!s || !name || !out)
        return TY_EINVAL;
    store_webhook *w = calloc(1, sizeof *w);
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    if (!w)
        return TY_ENOMEM;
    ty_err e = store_read_sealed_row(s, SQL_HOOK_GET, name, 6, hook_from_row, w, &blob, &bloblen);
    if (e)
        goto out;
    if (!strcmp(w->provider, "gitlab")) {
        if (bloblen != TY_SHA256_LEN) {
            e = TY_ESCHEMA;
            goto out;
        }
        w->secret = blob;
        w->secret_len = bloblen;
        blob = NULL;
    } else {
        e = store_secret_unseal(s, w->name, blob, bloblen, &w->secret, &w->secret_len);
        if (e) {
            TY_LOG(TY_LOG_ERROR, "a webhook secret does not open with the key file", "{s:s}",
                   "webhook", w->name);
            goto out;
        }
    }
    *out = w;
    w = NULL;
out:
    free(blob);
    store_webhooks_free(w, w ? 1 : 0);
    return e;
}

ty_err store_webhook_delivery(store *s, const char *key, const unsigned char body_hash[32],
                              char id[STORE_ID_LEN + 1])
{
    if (!s || !key || !body_hash || !id)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_DELIVERY_GET, 0, &st);
    if (e == TY_OK) {
        store_bind_text(st, 1, key);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == STORE_ID_LEN &&
            sqlite3_column_bytes(st, 1) == 32) {
            memcpy(id, sqlite3_column_text(st, 0), STORE_ID_LEN + 1);
            e = memcmp(sqlite3_column_blob(st, 1), body_hash, 32) ? TY_ECONFLICT : TY_OK;
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
