/*
 * store_secrets.c - a job's secret env values, sealed at rest.
 *
 * A spec's secret env entry ({"value": "...", "secret": true}) is stored as
 * {"value": null, "secret": true} in the job's spec; its value is a row of job_secrets
 * (job_seq, name, sealed), sealed with AES-256-GCM under the key file of store_seal.c with
 * "job-env:<job id>:<name>" as associated data, so a blob copied to another job's row or
 * another name does not open. The rows are written by store_jobs_insert() in the
 * submission's own transaction (a submission, a batch, a sweep's trials, a webhook's
 * delivery), so a job is never stored without its secrets, and deleted by a trigger in the
 * transaction that ends the job (nothing launches it again). They are opened only for a
 * launch (the scheduler's launch(), store_job_secrets_open()), never for the API.
 */
#include "store/store_int.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SQL_PUT[] = "INSERT INTO job_secrets (job_seq, name, sealed) VALUES (?1, ?2, ?3)";
static const char SQL_GET[] = "SELECT s.name, s.sealed FROM jobs AS j JOIN job_secrets AS s "
                              "ON s.job_seq = j.seq WHERE j.id = ?1 ORDER BY s.name";

/* "job-env:<id>:<name>": the row a sealed value belongs to. */
static ty_err aad_of(const char *id, const char *name, char *out, size_t len)
{
    int n = snprintf(out, len, "job-env:%s:%s", id, name);
    return n < 0 || (size_t)n >= len ? TY_EINVAL : TY_OK;
}

ty_err store_job_secrets_put(const store *s, store_conn *w, store_sealer *k, int64_t job_seq,
                             const char *id, const store_env_secret *v, size_t n)
{
    char aad[384];
    sqlite3_stmt *st = NULL;
    ty_err e = TY_OK;
    if (n && !v)
        return TY_EINVAL;
    for (size_t i = 0; i < n && e == TY_OK; i++) {
        unsigned char *blob = NULL;
        size_t bloblen = 0;
        if (!v[i].name || !v[i].value || (e = aad_of(id, v[i].name, aad, sizeof aad)) != TY_OK) {
            e = TY_EINVAL;
            break;
        }
        e = store_sealer_seal(s, k, aad, (const unsigned char *)v[i].value, v[i].value_len, &blob,
                              &bloblen);
        if (e == TY_OK && (e = store_conn_stmt(w, SQL_PUT, 0, &st)) == TY_OK) {
            sqlite3_bind_int64(st, 1, job_seq);
            store_bind_text(st, 2, v[i].name);
            sqlite3_bind_blob(st, 3, blob, (int)bloblen, SQLITE_STATIC);
            e = store_step_done(st);
        }
        free(blob);
    }
    return e;
}

void store_env_secrets_free(store_env_secret *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        free((char *)v[i].name);
        if (v[i].value) {
            OPENSSL_cleanse((char *)v[i].value, v[i].value_len);
            free((char *)v[i].value);
        }
    }
    free(v);
}

ty_err store_job_secrets_open(store *s, const char *id, store_env_secret **out, size_t *n)
{
    store_env_secret *v = NULL;
    size_t nv = 0, cap = 0;
    store_sealer k = {0};
    sqlite3_stmt *st = NULL;
    char aad[384];
    int rc;
    *out = NULL;
    *n = 0;
    if (!s || !id)
        return TY_EINVAL;
    store_conn *c = store_reader_acquire(s);
    ty_err e = store_conn_stmt(c, SQL_GET, 0, &st);
    if (e != TY_OK)
        goto out;
    store_bind_text(st, 1, id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const unsigned char *blob = sqlite3_column_blob(st, 1);
        size_t bloblen = (size_t)sqlite3_column_bytes(st, 1);
        unsigned char *value = NULL;
        size_t len = 0;
        if (!name || !blob || (e = aad_of(id, name, aad, sizeof aad)) != TY_OK) {
            e = TY_ESCHEMA;
            break;
        }
        if (nv == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            store_env_secret *g = realloc(v, ncap * sizeof *g);
            if (!g) {
                e = TY_ENOMEM;
                break;
            }
            v = g;
            cap = ncap;
        }
        if ((e = store_sealer_open(s, &k, aad, blob, bloblen, &value, &len)) != TY_OK)
            break;
        char *dup = strdup(name);
        if (!dup) {
            OPENSSL_cleanse(value, len);
            free(value);
            e = TY_ENOMEM;
            break;
        }
        v[nv++] = (store_env_secret){dup, (const char *)value, len};
    }
    if (e == TY_OK && rc != SQLITE_DONE)
        e = store_sqlite_err(rc);
    sqlite3_reset(st);
out:
    store_reader_release(s, c);
    store_sealer_done(&k);
    if (e != TY_OK) {
        store_env_secrets_free(v, nv);
        return e;
    }
    if (nv == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = nv;
    return TY_OK;
}
