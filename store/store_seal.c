/*
 * store_seal.c - secrets the server must read back (to compute HMACs), sealed at rest.
 *
 * A secret is sealed with AES-256-GCM under the 32-byte key in "webhook-secrets.key" next to
 * the database (the file CI webhooks introduced; one key serves every sealed secret). The
 * blob is nonce (12) | ciphertext | tag (16), and the caller's associated data names the row
 * ("notification:<name>"), so a blob moved to another row, or to another kind of row, does
 * not open. The key file is created once, complete, by writing a temporary file and link()ing
 * it into place (link never replaces a file, so two processes starting at once agree on one
 * key), and refused when its mode lets others read it. store_read_sealed_row() reads a row with
 * its sealed blob, for the modules that keep one (webhooks, notification subscriptions).
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"

#define KEY_FILE "webhook-secrets.key"
#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16

/* The key file's path: the database's directory and KEY_FILE. */
static ty_err key_path(const store *s, char *out, size_t len)
{
    const char *slash = strrchr(s->path, '/');
    int n = slash ? snprintf(out, len, "%.*s/%s", (int)(slash - s->path), s->path, KEY_FILE)
                  : snprintf(out, len, "%s", KEY_FILE);
    return n < 0 || (size_t)n >= len ? TY_ETOOLARGE : TY_OK;
}

static ty_err key_read(const char *path, unsigned char key[KEY_LEN])
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TY_ENOTFOUND : TY_EIO;
    ty_err e = TY_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        goto out;
    if (st.st_mode & 077) {
        TY_LOG(TY_LOG_ERROR, "secrets key file is readable by others; refusing it", "{s:s, s:i}",
               "path", path, "mode", (int)(st.st_mode & 0777));
        goto out;
    }
    size_t got = 0;
    while (got < KEY_LEN) {
        ssize_t r = read(fd, key + got, KEY_LEN - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            goto out;
        got += (size_t)r;
    }
    e = TY_OK;
out:
    close(fd);
    return e;
}

/* Writes a new key to a temporary file and links it to path; EEXIST means another process
 * won the race, and its key is the one. */
static ty_err key_create(const char *path)
{
    char tmp[4200];
    unsigned char key[KEY_LEN], r[8];
    char rhex[17];
    if (ty_random_bytes(r, sizeof r) || ty_random_bytes(key, sizeof key))
        return TY_EIO;
    ty_hex(r, sizeof r, rhex);
    int n = snprintf(tmp, sizeof tmp, "%s.%s.tmp", path, rhex);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return TY_ETOOLARGE;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return TY_EIO;
    ty_err e = TY_EIO;
    if (write(fd, key, sizeof key) == (ssize_t)sizeof key && fsync(fd) == 0)
        e = TY_OK;
    close(fd);
    OPENSSL_cleanse(key, sizeof key);
    if (e == TY_OK && link(tmp, path) != 0 && errno != EEXIST)
        e = TY_EIO;
    unlink(tmp);
    return e;
}

static ty_err key_load(const store *s, unsigned char key[KEY_LEN])
{
    char path[4096];
    ty_err e = key_path(s, path, sizeof path);
    if (e)
        return e;
    e = key_read(path, key);
    if (e == TY_ENOTFOUND && (e = key_create(path)) == TY_OK)
        e = key_read(path, key);
    if (e)
        TY_LOG(TY_LOG_ERROR, "cannot read or create the secrets key file", "{s:s}", "path", path);
    return e == TY_ENOTFOUND ? TY_EIO : e;
}

static ty_err seal_with(const unsigned char key[KEY_LEN], const char *aad,
                        const unsigned char *in, size_t n, unsigned char **out, size_t *outlen)
{
    size_t len = NONCE_LEN + n + TAG_LEN;
    unsigned char *b = malloc(len);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int l = 0;
    ty_err e = TY_ENOMEM;
    if (!b || !c)
        goto out;
    e = TY_EIO;
    if (ty_random_bytes(b, NONCE_LEN) ||
        EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, b) != 1 ||
        EVP_EncryptUpdate(c, NULL, &l, (const unsigned char *)aad, (int)strlen(aad)) != 1 ||
        (n && EVP_EncryptUpdate(c, b + NONCE_LEN, &l, in, (int)n) != 1) ||
        EVP_EncryptFinal_ex(c, b + NONCE_LEN + (n ? l : 0), &l) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, b + NONCE_LEN + n) != 1)
        goto out;
    *out = b;
    *outlen = len;
    b = NULL;
    e = TY_OK;
out:
    EVP_CIPHER_CTX_free(c);
    free(b);
    return e;
}

static ty_err open_with(const unsigned char key[KEY_LEN], const char *aad,
                        const unsigned char *in, size_t n, unsigned char **out, size_t *outlen)
{
    size_t len = n - NONCE_LEN - TAG_LEN;
    unsigned char *b = malloc(len + 1);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int l = 0;
    ty_err e = TY_ENOMEM;
    if (!b || !c)
        goto out;
    e = TY_ESCHEMA;
    if (EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, in) != 1 ||
        EVP_DecryptUpdate(c, NULL, &l, (const unsigned char *)aad, (int)strlen(aad)) != 1 ||
        (len && EVP_DecryptUpdate(c, b, &l, in + NONCE_LEN, (int)len) != 1) ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, (void *)(in + n - TAG_LEN)) != 1 ||
        EVP_DecryptFinal_ex(c, b + (len ? l : 0), &l) != 1)
        goto out;
    b[len] = 0;
    *out = b;
    *outlen = len;
    b = NULL;
    e = TY_OK;
out:
    EVP_CIPHER_CTX_free(c);
    if (b) {
        OPENSSL_cleanse(b, len + 1);
        free(b);
    }
    return e;
}

ty_err store_secret_seal(const store *s, const char *aad, const unsigned char *in, size_t n,
                         unsigned char **out, size_t *outlen)
{
    if (n > STORE_SECRET_MAX)
        return TY_EINVAL;
    unsigned char key[KEY_LEN];
    ty_err e = key_load(s, key);
    if (e == TY_OK)
        e = seal_with(key, aad, in, n, out, outlen);
    OPENSSL_cleanse(key, sizeof key);
    return e;
}

ty_err store_secret_unseal(const store *s, const char *aad, const unsigned char *in, size_t n,
                           unsigned char **out, size_t *outlen)
{
    if (n < NONCE_LEN + TAG_LEN || n - NONCE_LEN - TAG_LEN > STORE_SECRET_MAX)
        return TY_ESCHEMA;
    unsigned char key[KEY_LEN];
    ty_err e = key_load(s, key);
    if (e == TY_OK)
        e = open_with(key, aad, in, n, out, outlen);
    OPENSSL_cleanse(key, sizeof key);
    return e;
}

ty_err store_sealer_seal(const store *s, store_sealer *k, const char *aad,
                         const unsigned char *in, size_t n, unsigned char **out, size_t *outlen)
{
    ty_err e;
    if (n > STORE_SEALED_MAX)
        return TY_EINVAL;
    if (!k->loaded) {
        if ((e = key_load(s, k->key)) != TY_OK)
            return e;
        k->loaded = 1;
    }
    return seal_with(k->key, aad, in, n, out, outlen);
}

ty_err store_sealer_open(const store *s, store_sealer *k, const char *aad,
                         const unsigned char *in, size_t n, unsigned char **out, size_t *outlen)
{
    ty_err e;
    if (n < NONCE_LEN + TAG_LEN || n - NONCE_LEN - TAG_LEN > STORE_SEALED_MAX)
        return TY_ESCHEMA;
    if (!k->loaded) {
        if ((e = key_load(s, k->key)) != TY_OK)
            return e;
        k->loaded = 1;
    }
    return open_with(k->key, aad, in, n, out, outlen);
}

void store_sealer_done(store_sealer *k)
{
    if (k) {
        OPENSSL_cleanse(k->key, sizeof k->key);
        k->loaded = 0;
    }
}

ty_err store_read_sealed_row(store *s, const char *sql, const char *name, int col,
                             store_row_fn row, void *item, unsigned char **blob, size_t *bloblen)
{
    store_conn *c = store_reader_acquire(s);
    sqlite3_stmt *st = NULL;
    *blob = NULL;
    *bloblen = 0;
    ty_err e = store_conn_stmt(c, sql, 0, &st);
    if (e == TY_OK) {
        store_bind_text(st, 1, name);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            size_t n = (size_t)sqlite3_column_bytes(st, col);
            e = row(st, item);
            if (!e && (!n || !(*blob = malloc(n))))
                e = n ? TY_ENOMEM : TY_ESCHEMA;
            if (!e) {
                memcpy(*blob, sqlite3_column_blob(st, col), n);
                *bloblen = n;
            }
        } else {
            e = rc == SQLITE_DONE ? TY_ENOTFOUND : store_sqlite_err(rc);
        }
        sqlite3_reset(st);
    }
    store_reader_release(s, c);
    return e;
}
