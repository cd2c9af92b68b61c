/*
 * auth.c - token cache, bearer checks and the first-start admin token.
 *
 * The cache holds only valid (not revoked) tokens: name, scopes, hash. Readers
 * take a read lock for the comparison loop; a reload builds the new list
 * outside every lock and swaps it in under the write lock, so a reload never
 * blocks requests for longer than the swap. Reloads are serialized by
 * refresh_mu, and whoever finds the cache stale reloads it before checking.
 *
 * Job tokens are not cached: a token that matches no API token is looked up by
 * its hash in the store (one index seek on a read connection), so a job's
 * token works from the commit that started its attempt and stops with the
 * commit that ends the job, not a cache period later. The seek is not
 * constant-time, but what it could leak is how far a SHA-256 of the caller's
 * own guess matches a stored one, which brings no secret any closer.
 */
#include "server/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/api.h"
#include "api/tokens.h"
#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"

typedef struct auth_entry {
    char *name;
    char *team;
    unsigned scopes;
    unsigned char hash[TY_SHA256_LEN];
} auth_entry;

struct auth_cache {
    store *store;
    uint64_t max_age_ns;
    pthread_mutex_t refresh_mu;      /* one reload at a time */
    pthread_rwlock_t rw;             /* guards entries, n */
    auth_entry *entries;
    size_t n;
    atomic_int loaded;               /* a list has been loaded once */
    atomic_uint_fast64_t loaded_at_ns;
    atomic_uint_fast64_t want_gen;   /* bumped by auth_cache_invalidate() */
    atomic_uint_fast64_t have_gen;   /* want_gen seen by the last reload */
};

static void entries_free(auth_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(e[i].name);
        free(e[i].team);
    }
    free(e);
}

ty_err auth_cache_new(store *s, int64_t max_age_ms, auth_cache **out)
{
    auth_cache *c = calloc(1, sizeof *c);
    if (!c)
        return TY_ENOMEM;
    c->store = s;
    c->max_age_ns = max_age_ms > 0 ? (uint64_t)max_age_ms * 1000000u : 0;
    pthread_mutex_init(&c->refresh_mu, NULL);
    pthread_rwlock_init(&c->rw, NULL);
    *out = c;
    return TY_OK;
}

void auth_cache_free(auth_cache *c)
{
    if (!c)
        return;
    entries_free(c->entries, c->n);
    pthread_rwlock_destroy(&c->rw);
    pthread_mutex_destroy(&c->refresh_mu);
    free(c);
}

void auth_cache_invalidate(auth_cache *c)
{
    atomic_fetch_add(&c->want_gen, 1);
}

static int stale(auth_cache *c)
{
    if (!atomic_load(&c->loaded))
        return 1;
    if (atomic_load(&c->want_gen) != atomic_load(&c->have_gen))
        return 1;
    return ty_time_mono_ns() - atomic_load(&c->loaded_at_ns) > c->max_age_ns;
}

/* Reloads the valid tokens from the store. Called with refresh_mu held. */
static ty_err reload(auth_cache *c)
{
    store_token *tokens = NULL;
    size_t ntokens = 0, n = 0;
    auth_entry *entries = NULL;
    uint64_t gen = atomic_load(&c->want_gen);
    uint64_t started = ty_time_mono_ns();
    ty_err e = store_tokens_list(c->store, &tokens, &ntokens);
    if (e)
        goto out;
    entries = calloc(ntokens ? ntokens : 1, sizeof *entries);
    if (!entries) {
        e = TY_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < ntokens; i++) {
        if (tokens[i].revoked_at_ms != 0)
            continue;
        entries[n].name = strdup(tokens[i].name);
        entries[n].team = strdup(tokens[i].team ? tokens[i].team : STORE_TEAM_DEFAULT);
        if (!entries[n].name || !entries[n].team) {
            n++; /* entries_free() takes what was copied */
            e = TY_ENOMEM;
            goto out;
        }
        entries[n].scopes = tokens[i].scopes;
        memcpy(entries[n].hash, tokens[i].hash, TY_SHA256_LEN);
        n++;
    }

    pthread_rwlock_wrlock(&c->rw);
    auth_entry *old = c->entries;
    size_t oldn = c->n;
    c->entries = entries;
    c->n = n;
    pthread_rwlock_unlock(&c->rw);
    entries = old;
    n = oldn;
    /* Age counts from before the read, so a change committed during it is reloaded next time. */
    atomic_store(&c->loaded_at_ns, started);
    atomic_store(&c->have_gen, gen);
    atomic_store(&c->loaded, 1);
out:
    entries_free(entries, n);
    store_tokens_free(tokens, ntokens);
    return e;
}

/* The token of "Bearer <token>" (scheme case-insensitive), or NULL. *len is its length. */
static const char *bearer_token(const char *h, size_t *len)
{
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = 0;
    while (h[n] > ' ' && h[n] < 0x7f)
        n++;
    const char *rest = h + n;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    if (n == 0 || n > AUTH_MAX_TOKEN || *rest != '\0')
        return NULL;
    *len = n;
    return h;
}

/* A job token: the principal "job:<id>" with the report scope only. */
static ty_err check_job_token(auth_cache *c, const unsigned char hash[TY_SHA256_LEN],
                              unsigned scope, char **name, unsigned *scopes)
{
    char id[STORE_ID_LEN + 1];
    int attempt = 0;
    ty_err e = store_job_token_lookup(c->store, hash, id, &attempt);
    if (e == TY_ENOTFOUND)
        return TY_EAUTH;
    if (e) {
        TY_LOG(TY_LOG_ERROR, "job token lookup failed", "{s:s}", "error", ty_strerror(e));
        return e;
    }
    size_t len = sizeof API_JOB_PRINCIPAL_PREFIX - 1 + STORE_ID_LEN + 1;
    if (!(*name = malloc(len)))
        return TY_ENOMEM;
    snprintf(*name, len, "%s%s", API_JOB_PRINCIPAL_PREFIX, id);
    *scopes = STORE_SCOPE_REPORT;
    return scope == STORE_SCOPE_REPORT || scope == 0 ? TY_OK : TY_EFORBIDDEN;
}

ty_err auth_check(auth_cache *c, const char *authorization, unsigned scope, char **name,
                  unsigned *scopes)
{
    return auth_check_team(c, authorization, scope, name, scopes, NULL);
}

ty_err auth_check_team(auth_cache *c, const char *authorization, unsigned scope, char **name,
                       unsigned *scopes, char **team)
{
    unsigned char hash[TY_SHA256_LEN];
    size_t len = 0;
    ty_err e = TY_OK;

    *name = NULL;
    *scopes = 0;
    if (team)
        *team = NULL;
    const char *token = bearer_token(authorization, &len);
    if (!token)
        return TY_EAUTH;
    ty_sha256(token, len, hash);

    if (stale(c)) {
        pthread_mutex_lock(&c->refresh_mu);
        if (stale(c))
            e = reload(c);
        pthread_mutex_unlock(&c->refresh_mu);
        if (e) {
            TY_LOG(TY_LOG_ERROR, "token reload failed", "{s:s}", "error", ty_strerror(e));
            goto out;
        }
    }

    pthread_rwlock_rdlock(&c->rw);
    /* Compare with every entry, keeping the first match without branching out early. */
    size_t match = c->n;
    for (size_t i = 0; i < c->n; i++) {
        int eq = ty_equal_ct(c->entries[i].hash, hash, TY_SHA256_LEN);
        if (eq && match == c->n)
            match = i;
    }
    if (match == c->n) {
        e = TY_EAUTH;
    } else {
        *scopes = c->entries[match].scopes;
        *name = strdup(c->entries[match].name);
        if (team)
            *team = strdup(c->entries[match].team);
        if (!*name || (team && !*team))
            e = TY_ENOMEM;
        else if (!(*scopes & (scope | STORE_SCOPE_ADMIN)) && scope != 0)
            e = TY_EFORBIDDEN;
    }
    pthread_rwlock_unlock(&c->rw);
    if (e == TY_EAUTH)
        e = check_job_token(c, hash, scope, name, scopes);
out:
    OPENSSL_cleanse(hash, sizeof hash);
    return e;
}

int auth_token_valid(const char *token)
{
    size_t n = 0;
    while (token[n] > ' ' && token[n] < 0x7f)
        n++;
    return n > 0 && n <= AUTH_MAX_TOKEN && token[n] == '\0';
}

/* Writes "<dir of db_path>/admin.token" into buf. */
static ty_err token_file_path(const char *db_path, char *buf, size_t len)
{
    const char *slash = strrchr(db_path, '/');
    int n;
    if (!slash)
        n = snprintf(buf, len, "admin.token");
    else if (slash == db_path)
        n = snprintf(buf, len, "/admin.token");
    else
        n = snprintf(buf, len, "%.*s/admin.token", (int)(slash - db_path), db_path);
    return n < 0 || (size_t)n >= len ? TY_ETOOLARGE : TY_OK;
}

/* Creates the token file exclusively (0600) holding secret + "\n", synced. */
static ty_err write_token_file(const char *path, const char *secret, char *err, size_t errlen)
{
    ty_err e = TY_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int saved = errno;
        snprintf(err, errlen, "cannot create %s: %s%s", path, strerror(saved),
                 saved == EEXIST ? " (the database has no valid admin token; remove the file "
                                   "or set TRAINYARD_ADMIN_TOKEN)"
                                 : "");
        return saved == EEXIST ? TY_EEXISTS : TY_EIO;
    }
    size_t n = strlen(secret);
    char line[TY_TOKEN_BUFLEN + 1];
    memcpy(line, secret, n);
    line[n] = '\n';
    if (write(fd, line, n + 1) != (ssize_t)(n + 1) || fsync(fd) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        e = TY_EIO;
    }
    OPENSSL_cleanse(line, sizeof line);
    if (close(fd) != 0 && !e) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        e = TY_EIO;
    }
    if (e)
        unlink(path);
    return e;
}

/* Stores hash under "admin", or "admin-N" when taken; the chosen name goes to name. */
static ty_err create_admin(store *s, const unsigned char hash[TY_SHA256_LEN], char *name,
                           size_t len)
{
    ty_err e = TY_EEXISTS;
    for (int i = 1; i <= 100 && e == TY_EEXISTS; i++) {
        if (i == 1)
            snprintf(name, len, "%s", AUTH_ADMIN_NAME);
        else
            snprintf(name, len, "%s-%d", AUTH_ADMIN_NAME, i);
        e = store_token_create(s, name, STORE_SCOPE_ADMIN, hash);
    }
    return e;
}

ty_err auth_bootstrap_admin(store *s, const char *db_path, const char *env_token, int *created,
                            char *err, size_t errlen)
{
    char path[4096 + 16];
    char secret[TY_TOKEN_BUFLEN];
    char name[API_TOKEN_MAX_NAME + 1];
    unsigned char hash[TY_SHA256_LEN];
    int file_written = 0;
    int64_t admins = 0;

    if (created)
        *created = 0;
    ty_err e = store_token_count_admin(s, &admins);
    if (e) {
        snprintf(err, errlen, "cannot count admin tokens: %s", ty_strerror(e));
        goto out;
    }
    if (admins > 0)
        goto out;

    if (env_token) {
        if (!auth_token_valid(env_token)) {
            snprintf(err, errlen, "TRAINYARD_ADMIN_TOKEN must be 1..%d visible ASCII characters",
                     AUTH_MAX_TOKEN);
            e = TY_EINVAL;
            goto out;
        }
        ty_sha256(env_token, strlen(env_token), hash);
    } else {
        e = token_file_path(db_path, path, sizeof path);
        if (e) {
            snprintf(err, errlen, "database path too long");
            goto out;
        }
        e = ty_token_generate(secret);
        if (e) {
            snprintf(err, errlen, "cannot generate a token: %s", ty_strerror(e));
            goto out;
        }
        ty_sha256(secret, strlen(secret), hash);
        e = write_token_file(path, secret, err, errlen);
        if (e)
            goto out;
        file_written = 1;
    }

    e = create_admin(s, hash, name, sizeof name);
    if (e) {
        snprintf(err, errlen, "cannot store the admin token: %s", ty_strerror(e));
        if (file_written)
            unlink(path);
        goto out;
    }
    if (created)
        *created = 1;
    /* Written whatever the log level: the operator needs the path. */
    if (file_written)
        ty_log_json(TY_LOG_INFO, "admin token created",
                    json_pack("{s:s, s:s}", "name", name, "path", path));
    else
        ty_log_json(TY_LOG_INFO, "admin token created",
                    json_pack("{s:s, s:s}", "name", name, "source", "TRAINYARD_ADMIN_TOKEN"));
out:
    OPENSSL_cleanse(secret, sizeof secret);
    OPENSSL_cleanse(hash, sizeof hash);
    return e;
}
