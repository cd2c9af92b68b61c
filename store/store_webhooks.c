/*
 * store_webhooks.c - CI webhooks: registrations and their secrets at rest.
 *
 * Secrets (see store.h): a GitHub or generic secret is sealed by store_seal.c (AES-256-GCM
 * under the key file next to the database) with the hook's name as the associated data, so a
 * sealed secret moved to another row does not open. A GitLab token is kept as its SHA-256.
 *
 * Writes go through the store's one writer like every other (STORE_OP_WEBHOOK_*): a second
 * read-write connection would contend with the writer for SQLite's write lock.
 *
 * Replays (webhook_replays, keyed (hook, digest)): a delivery's job is stored with its replay
 * key in one transaction (STORE_OP_WEBHOOK_SUBMIT), and that op first looks the key up, so
 * two identical deliveries that race make one job. Each such op deletes at most
 * REPLAY_PURGE_ROWS expired keys through the (expires_ms) index: the table holds about a
 * day of deliveries, and no purge ever takes long.
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
static const char SQL_REPLAYS_DELETE[] = "DELETE FROM webhook_replays WHERE hook = ?1";
/* The key's job, when the key is live and the job still exists. */
static const char SQL_REPLAY_GET[] =
    "SELECT j.seq, j.id FROM webhook_replays AS r JOIN jobs AS j ON j.seq = r.job_seq "
    "WHERE r.hook = ?1 AND r.digest = ?2 AND r.expires_ms >= ?3";
static const char SQL_REPLAY_PUT[] =
    "INSERT OR REPLACE INTO webhook_replays (hook, digest, job_seq, expires_ms) "
    "VALUES (?1, ?2, ?3, ?4)";
static const char SQL_REPLAYS_PURGE[] =
    "DELETE FROM webhook_replays WHERE (hook, digest) IN (SELECT hook, digest FROM "
    "webhook_replays WHERE expires_ms < ?1 ORDER BY expires_ms LIMIT ?2)";
static const char SQL_JOB_ID[] = "SELECT id FROM jobs WHERE seq = ?1";
static const char SQL_HOOK_GET[] =
    "SELECT name, provider, events, branches, template, created_ms, secret FROM webhooks "
    "WHERE name = ?1";

/* ---- writes ------------------------------------------------------------------ */

#define REPLAY_PURGE_ROWS 32

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

static ty_err submit_apply(store *s, store_conn *w, store_op *op);

/* Run by the writer, in the group's transaction: a registration, a removal with the records
 * of the hook's deliveries and replays, or a delivery's job (submit_apply()). */
ty_err store_webhook_apply(store *s, store_conn *w, store_op *op)
{
    sqlite3_stmt *st = NULL;
    ty_err e;
    if (op->kind == STORE_OP_WEBHOOK_SUBMIT)
        return submit_apply(s, w, op);
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
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    if ((e = store_conn_stmt(w, SQL_REPLAYS_DELETE, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_text(st, 1, op->u.webhook.name, -1, SQLITE_STATIC);
    return store_step_done(st);
}

/* Binds (hook, digest, now) and steps SQL_REPLAY_GET on c: TY_OK with *seq (and id when not
 * NULL), TY_ENOTFOUND. */
static ty_err replay_find(store_conn *c, const char *hook, const unsigned char *digest,
                          int64_t now, int64_t *seq, char id[STORE_ID_LEN + 1])
{
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_REPLAY_GET, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_text(st, 1, hook, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, digest, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 1) == STORE_ID_LEN) {
        *seq = sqlite3_column_int64(st, 0);
        if (id)
            memcpy(id, sqlite3_column_text(st, 1), STORE_ID_LEN + 1);
        e = TY_OK;
    } else {
        e = rc == SQLITE_ROW ? TY_ESCHEMA : rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
    }
    sqlite3_reset(st);
    return e;
}

/* Run by the writer: a delivery's job and its replay key, unless the key (or the delivery's
 * idempotency key) already has a job. */
static ty_err submit_apply(store *s, store_conn *w, store_op *op)
{
    int64_t now = ty_time_now_ms(), seq = 0;
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(w, SQL_REPLAYS_PURGE, 0, &st);
    if (e != TY_OK)
        return e;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int(st, 2, REPLAY_PURGE_ROWS);
    if ((e = store_step_done(st)) != TY_OK)
        return e;
    e = replay_find(w, op->u.submit.replay_hook, op->u.submit.replay_digest, now, &seq, NULL);
    if (e == TY_OK) {
        op->u.submit.replayed = 1;
        op->u.submit.first_seq = seq;
        op->u.submit.njobs = 1;
        return TY_OK;
    }
    if (e != TY_ENOTFOUND || (e = store_submit_apply(s, w, op)) != TY_OK)
        return e;
    seq = op->u.submit.replayed ? op->u.submit.first_seq : op->u.submit.out[0].seq;
    if ((e = store_conn_stmt(w, SQL_REPLAY_PUT, 0, &st)) != TY_OK)
        return e;
    sqlite3_bind_text(st, 1, op->u.submit.replay_hook, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, op->u.submit.replay_digest, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, seq);
    sqlite3_bind_int64(st, 4, op->u.submit.replay_expires_ms);
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

ty_err store_webhook_replay_get(store *s, const store_webhook_replay *r,
                                char id[STORE_ID_LEN + 1])
{
    if (!s || !r || !r->hook || !r->digest || !id)
        return TY_EINVAL;
    int64_t seq = 0;
    store_conn *c = store_reader_acquire(s);
    ty_err e = replay_find(c, r->hook, r->digest, ty_time_now_ms(), &seq, id);
    store_reader_release(s, c);
    return e;
}

/* The id of the job with this seq, from a read connection. */
static ty_err job_id_of(store *s, int64_t seq, char id[STORE_ID_LEN + 1])
{
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    ty_err e = store_conn_stmt(c, SQL_JOB_ID, 0, &st);
    if (e == TY_OK) {
        sqlite3_bind_int64(st, 1, seq);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == STORE_ID_LEN)
            memcpy(id, sqlite3_column_text(st, 0), STORE_ID_LEN + 1);
        else
            e = rc == SQLITE_ROW    ? TY_ESCHEMA
                : rc == SQLITE_DONE ? TY_ENOTFOUND
                                    : store_sqlite_err(rc);
        sqlite3_reset(st);
    }
    store_reader_release(s, c);
    return e;
}

ty_err store_webhook_submit(store *s, const store_job_new *job, const char *idem_key,
                            const unsigned char body_hash[32], const store_webhook_replay *replay,
                            char id[STORE_ID_LEN + 1], int *replayed)
{
    if (!s || !job || !replay || !replay->hook || !replay->digest || !id || !replayed ||
        (idem_key && !body_hash))
        return TY_EINVAL;
    store_job res = {0};
    store_op op = {.kind = STORE_OP_WEBHOOK_SUBMIT};
    op.u.submit.jobs = job;
    op.u.submit.n = 1;
    op.u.submit.idem_key = idem_key;
    op.u.submit.body_hash = body_hash;
    op.u.submit.out = &res;
    op.u.submit.replay_hook = replay->hook;
    op.u.submit.replay_digest = replay->digest;
    op.u.submit.replay_expires_ms = replay->expires_ms;
    *replayed = 0;
    ty_err e = store_writer_run(s, &op);
    if (e != TY_OK)
        return e;
    if (!op.u.submit.replayed) {
        memcpy(id, res.id, STORE_ID_LEN + 1);
        return TY_OK;
    }
    *replayed = 1;
    return job_id_of(s, op.u.submit.first_seq, id);
}
