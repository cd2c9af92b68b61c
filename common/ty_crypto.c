#include "common/ty_crypto.h"

#include <pthread.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* OpenSSL 3 resolves EVP_sha256() through its provider registry on every
 * call; fetching the implementation once saves about half of each hash. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void ty_sha256(const void *data, size_t len, unsigned char out[TY_SHA256_LEN])
{
    unsigned int n = 0;
    pthread_once(&sha256_once, fetch_sha256);
    EVP_Digest(data, len, out, &n, sha256_md ? sha256_md : EVP_sha256(), NULL);
}

void ty_hex(const unsigned char *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

ty_err ty_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                      unsigned char out[TY_SHA256_LEN])
{
    static const unsigned char empty[1];
    unsigned int n = 0;
    pthread_once(&sha256_once, fetch_sha256);
    /* A NULL key means "the previous key" to OpenSSL, never "no key". */
    if (HMAC(sha256_md ? sha256_md : EVP_sha256(), keylen ? key : empty, (int)keylen, data, len,
             out, &n) == NULL ||
        n != TY_SHA256_LEN)
        return TY_EIO;
    return TY_OK;
}

int ty_equal_ct(const unsigned char *a, const unsigned char *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}

ty_err ty_random_bytes(unsigned char *buf, size_t n)
{
    return RAND_bytes(buf, (int)n) == 1 ? TY_OK : TY_EIO;
}

ty_err ty_token_generate(char out[TY_TOKEN_BUFLEN])
{
    static const char b64url[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char raw[33]; /* 264 bits -> exactly 44 chars; we keep 43 (258 bits) */
    ty_err e = ty_random_bytes(raw, sizeof raw);
    if (e)
        return e;
    out[0] = 't';
    out[1] = 'y';
    out[2] = '_';
    size_t o = 3;
    for (size_t i = 0; i < sizeof raw && o < 3 + 43; i += 3) {
        unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
        for (int k = 3; k >= 0 && o < 3 + 43; k--)
            out[o++] = b64url[(v >> (6 * k)) & 63];
    }
    out[o] = '\0';
    OPENSSL_cleanse(raw, sizeof raw);
    return TY_OK;
}
