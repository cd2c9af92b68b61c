/*
 * ty_crypto.h - the few cryptographic operations Trainyard needs, on OpenSSL.
 */
#ifndef TY_CRYPTO_H
#define TY_CRYPTO_H

#include <stddef.h>

#include "common/ty_error.h"

#define TY_SHA256_LEN 32
/* "ty_" + 43 base64url characters (32 random bytes) + NUL */
#define TY_TOKEN_BUFLEN 48

void ty_sha256(const void *data, size_t len, unsigned char out[TY_SHA256_LEN]);
/* Lower-case hex of a digest; out must hold 2*len+1 bytes. */
void ty_hex(const unsigned char *in, size_t len, char *out);
/*
 * HMAC-SHA256 of data[0..len) under key[0..keylen) (keylen may be 0) into out.
 * TY_EIO if OpenSSL fails.
 */
ty_err ty_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                      unsigned char out[TY_SHA256_LEN]);
/* Constant-time equality of two equal-length byte strings; true when equal. */
int ty_equal_ct(const unsigned char *a, const unsigned char *b, size_t len);
/* Fills buf with n cryptographically secure random bytes. TY_EIO if the RNG fails. */
ty_err ty_random_bytes(unsigned char *buf, size_t n);
/* A new API token "ty_<43 base64url chars>" (256 bits of entropy). */
ty_err ty_token_generate(char out[TY_TOKEN_BUFLEN]);

#endif
