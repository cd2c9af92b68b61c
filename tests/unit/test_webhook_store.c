/* Unit tests for store/store_webhooks.c: CI webhook registrations and their secrets at rest. */
#include "tests/unit/test_store_util.h"

#include <sys/stat.h>

#include "common/ty_crypto.h"
#include "common/ty_time.h"

#define SECRET "It's a Secret to Everybody"

static void key_path(const store_fixture *f, char *out, size_t len)
{
    snprintf(out, len, "%s/webhook-secrets.key", f->t.dir);
}

static int teardown(void **state)
{
    store_fixture *f = *state;
    char path[256];
    key_path(f, path, sizeof path);
    unlink(path);
    return store_fixture_teardown(state);
}

static store_webhook hook(const char *name, const char *provider)
{
    store_webhook w = {
        .name = (char *)name,
        .provider = (char *)provider,
        .events_json = (char *)"[\"push\"]",
        .branches_json = (char *)"[\"main\"]",
        .template_json = (char *)"{\"name\":\"ci-${commit_short}\"}",
        .secret = (unsigned char *)SECRET,
        .secret_len = strlen(SECRET),
    };
    return w;
}

/* Whether the database file (and its WAL) hold the bytes of s anywhere. */
static int db_holds(const store_fixture *f, const char *s)
{
    static const char *const suffixes[] = {"", "-wal"};
    int found = 0;
    for (size_t i = 0; i < 2; i++) {
        char path[192];
        snprintf(path, sizeof path, "%s%s", f->t.db, suffixes[i]);
        FILE *fp = fopen(path, "rb");
        if (!fp)
            continue;
        char *buf = malloc(1u << 22);
        assert_non_null(buf);
        size_t n = fread(buf, 1, 1u << 22, fp);
        fclose(fp);
        for (size_t j = 0; j + strlen(s) <= n && !found; j++)
            found = memcmp(buf + j, s, strlen(s)) == 0;
        free(buf);
    }
    return found;
}

static void test_create_get_list_delete(void **state)
{
    store_fixture *f = *state;
    store_webhook gh = hook("gh", "github"), gl = hook("gl", "gitlab");
    assert_int_equal(store_webhook_create(f->s, &gh), TY_OK);
    assert_int_equal(store_webhook_create(f->s, &gl), TY_OK);
    assert_int_equal(store_webhook_create(f->s, &gh), TY_EEXISTS);

    /* A GitHub secret comes back as given: it keys the HMAC. */
    store_webhook *w = NULL;
    assert_int_equal(store_webhook_get(f->s, "gh", &w), TY_OK);
    assert_string_equal(w->provider, "github");
    assert_string_equal(w->branches_json, "[\"main\"]");
    assert_int_equal(w->secret_len, strlen(SECRET));
    assert_memory_equal(w->secret, SECRET, strlen(SECRET));
    store_webhooks_free(w, 1);

    /* A GitLab token is only ever compared: its hash is all that is kept. */
    unsigned char h[TY_SHA256_LEN];
    ty_sha256(SECRET, strlen(SECRET), h);
    assert_int_equal(store_webhook_get(f->s, "gl", &w), TY_OK);
    assert_int_equal(w->secret_len, TY_SHA256_LEN);
    assert_memory_equal(w->secret, h, TY_SHA256_LEN);
    store_webhooks_free(w, 1);

    /* Neither secret is in the database in clear. */
    assert_false(db_holds(f, SECRET));

    store_webhook *list = NULL;
    size_t n = 0;
    assert_int_equal(store_webhooks_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "gh");
    assert_string_equal(list[1].name, "gl");
    assert_null(list[0].secret);
    assert_null(list[1].secret);
    store_webhooks_free(list, n);

    assert_int_equal(store_webhook_delete(f->s, "gh"), TY_OK);
    assert_int_equal(store_webhook_delete(f->s, "gh"), TY_ENOTFOUND);
    assert_int_equal(store_webhook_get(f->s, "gh", &w), TY_ENOTFOUND);
}

static void test_key_file(void **state)
{
    store_fixture *f = *state;
    char path[256];
    struct stat st;
    key_path(f, path, sizeof path);
    store_webhook gh = hook("gh", "github");
    assert_int_equal(store_webhook_create(f->s, &gh), TY_OK);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);

    /* A key others may read is refused rather than used. */
    store_webhook *w = NULL;
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(store_webhook_get(f->s, "gh", &w), TY_EIO);
    assert_int_equal(chmod(path, 0600), 0);

    /* Another key does not open the sealed secret. */
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fwrite("0123456789abcdef0123456789abcdef", 1, 32, fp), 32);
    fclose(fp);
    assert_int_equal(store_webhook_get(f->s, "gh", &w), TY_ESCHEMA);
}

/* A delivery's job is found by its key after the idempotency key itself was purged, and only
 * while the hook exists. */
static void test_delivery_outlives_its_idempotency_key(void **state)
{
    store_fixture *f = *state;
    store_webhook gh = hook("gh", "github");
    assert_int_equal(store_webhook_create(f->s, &gh), TY_OK);
    unsigned char h[32], other[32];
    memset(h, 7, sizeof h);
    memset(other, 8, sizeof other);
    store_job_new j = job_template("ci", "default");
    store_job *out = NULL;
    size_t n = 0;
    int replayed = 0;
    assert_int_equal(
        store_jobs_submit(f->s, &j, 1, "webhook:gh:d-1", h, &out, &n, &replayed), TY_OK);

    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DELETE FROM idempotency_keys", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    char id[STORE_ID_LEN + 1];
    assert_int_equal(store_webhook_delivery(f->s, "webhook:gh:d-1", h, id), TY_OK);
    assert_string_equal(id, out[0].id);
    assert_int_equal(store_webhook_delivery(f->s, "webhook:gh:d-1", other, id), TY_ECONFLICT);
    assert_int_equal(store_webhook_delivery(f->s, "webhook:gh:d-2", h, id), TY_ENOTFOUND);
    /* Other idempotency keys are not delivery records. */
    store_job *out2 = NULL;
    size_t n2 = 0;
    assert_int_equal(store_jobs_submit(f->s, &j, 1, "2:ci:d-3", h, &out2, &n2, &replayed), TY_OK);
    assert_int_equal(store_webhook_delivery(f->s, "2:ci:d-3", h, id), TY_ENOTFOUND);
    store_jobs_free(out2, n2);
    store_jobs_free(out, n);

    assert_int_equal(store_webhook_delete(f->s, "gh"), TY_OK);
    assert_int_equal(store_webhook_delivery(f->s, "webhook:gh:d-1", h, id), TY_ENOTFOUND);
}

/* The first column of the first row of sql, an integer, read from a connection of its own. */
static int db_count(const store_fixture *f, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(f->t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static int njobs(const store_fixture *f)
{
    return db_count(f, "SELECT count(*) FROM jobs");
}

/* A replay key finds the first job whatever the delivery id, per hook, until it expires; an
 * expired key is purged by a later delivery; a removed hook takes its keys along. */
static void test_replays(void **state)
{
    store_fixture *f = *state;
    store_webhook gh = hook("gh", "github"), other = hook("other", "github");
    assert_int_equal(store_webhook_create(f->s, &gh), TY_OK);
    assert_int_equal(store_webhook_create(f->s, &other), TY_OK);
    unsigned char body[32], digest[32], stale[32];
    memset(body, 1, sizeof body);
    memset(digest, 2, sizeof digest);
    memset(stale, 3, sizeof stale);
    int64_t later = ty_time_now_ms() + 3600 * 1000;
    store_webhook_replay r = {.hook = "gh", .digest = digest, .expires_ms = later};
    store_job_new j = job_template("ci", "default");
    char id[STORE_ID_LEN + 1], again[STORE_ID_LEN + 1];
    int replayed = -1;

    assert_int_equal(store_webhook_replay_get(f->s, &r, id), TY_ENOTFOUND);
    assert_int_equal(store_webhook_submit(f->s, &j, "webhook:gh:d-1", body, &r, id, &replayed),
                     TY_OK);
    assert_int_equal(replayed, 0);
    assert_int_equal(store_webhook_replay_get(f->s, &r, again), TY_OK);
    assert_string_equal(again, id);
    /* Another delivery id, or none: the first job, nothing inserted. */
    assert_int_equal(store_webhook_submit(f->s, &j, "webhook:gh:d-2", body, &r, again, &replayed),
                     TY_OK);
    assert_int_equal(replayed, 1);
    assert_string_equal(again, id);
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, &r, again, &replayed), TY_OK);
    assert_int_equal(replayed, 1);
    assert_string_equal(again, id);
    assert_int_equal(njobs(f), 1);
    /* The delivery id's own record still answers for another body: a conflict. */
    store_webhook_replay r2 = {.hook = "gh", .digest = stale, .expires_ms = later};
    assert_int_equal(store_webhook_submit(f->s, &j, "webhook:gh:d-1", digest, &r2, again,
                                          &replayed),
                     TY_ECONFLICT);
    /* Another hook: its own keys. */
    store_webhook_replay ro = {.hook = "other", .digest = digest, .expires_ms = later};
    assert_int_equal(store_webhook_replay_get(f->s, &ro, again), TY_ENOTFOUND);
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, &ro, again, &replayed), TY_OK);
    assert_int_equal(replayed, 0);
    assert_string_not_equal(again, id);

    /* Expired: not found, and the next delivery's job replaces it. */
    store_webhook_replay old = {.hook = "gh", .digest = stale, .expires_ms = 1};
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, &old, again, &replayed), TY_OK);
    assert_int_equal(store_webhook_replay_get(f->s, &old, again), TY_ENOTFOUND);
    int before = njobs(f);
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, &r, again, &replayed), TY_OK);
    assert_int_equal(replayed, 1);
    assert_int_equal(njobs(f), before);
    assert_int_equal(db_count(f, "SELECT count(*) FROM webhook_replays WHERE expires_ms < 1000"),
                     0);

    /* A failed commit stores neither the job nor its key. */
    unsigned char fresh[32];
    memset(fresh, 4, sizeof fresh);
    store_webhook_replay rf = {.hook = "gh", .digest = fresh, .expires_ms = later};
    store_fail_writes(f->s, 1, 1, TY_EIO);
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, &rf, again, &replayed), TY_EIO);
    assert_int_equal(njobs(f), before);
    assert_int_equal(store_webhook_replay_get(f->s, &rf, again), TY_ENOTFOUND);

    assert_int_equal(store_webhook_delete(f->s, "gh"), TY_OK);
    assert_int_equal(store_webhook_replay_get(f->s, &r, again), TY_ENOTFOUND);
    assert_int_equal(store_webhook_replay_get(f->s, &ro, again), TY_OK);
    assert_int_equal(store_webhook_submit(f->s, &j, NULL, NULL, NULL, again, &replayed),
                     TY_EINVAL);
}

static void test_invalid(void **state)
{
    store_fixture *f = *state;
    store_webhook w = hook("x", "bitbucket");
    assert_int_equal(store_webhook_create(f->s, &w), TY_EINVAL);
    w = hook("x", "github");
    w.secret_len = 0;
    assert_int_equal(store_webhook_create(f->s, &w), TY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_get_list_delete, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_key_file, store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_delivery_outlives_its_idempotency_key,
                                        store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_replays, store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid, store_fixture_setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
