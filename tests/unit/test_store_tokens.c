/* Unit tests for store/store_tokens.c: API tokens. */
#include "tests/unit/test_store_util.h"

static void hash_of(const char *name, unsigned char h[32])
{
    memset(h, 0, 32);
    memcpy(h, name, strlen(name) < 32 ? strlen(name) : 32);
}

static int64_t admins(store *s)
{
    int64_t n = -1;
    assert_int_equal(store_token_count_admin(s, &n), TY_OK);
    return n;
}

static void test_create_list_revoke(void **state)
{
    store_fixture *f = *state;
    static const struct {
        const char *name;
        unsigned scopes;
    } toks[] = {
        {"ci", STORE_SCOPE_SUBMIT | STORE_SCOPE_READ},
        {"admin", STORE_SCOPE_ADMIN},
        {"dashboard", STORE_SCOPE_READ},
        {"root", STORE_SCOPE_ADMIN | STORE_SCOPE_READ | STORE_SCOPE_SUBMIT},
    };
    unsigned char h[32];
    assert_int_equal(admins(f->s), 0);
    for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) {
        hash_of(toks[i].name, h);
        assert_int_equal(store_token_create(f->s, toks[i].name, toks[i].scopes, h), TY_OK);
    }
    assert_int_equal(admins(f->s), 2);

    store_token *list = NULL;
    size_t n = 0;
    assert_int_equal(store_tokens_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 4);
    static const char *const by_name[] = {"admin", "ci", "dashboard", "root"};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(list[i].name, by_name[i]);
        hash_of(by_name[i], h);
        assert_memory_equal(list[i].hash, h, 32);
        assert_true(list[i].created_at_ms > 0);
        assert_int_equal(list[i].revoked_at_ms, 0);
    }
    assert_int_equal(list[1].scopes, STORE_SCOPE_SUBMIT | STORE_SCOPE_READ);
    store_tokens_free(list, n);

    assert_int_equal(store_token_revoke(f->s, "admin"), TY_OK);
    assert_int_equal(admins(f->s), 1);
    assert_int_equal(store_token_revoke(f->s, "admin"), TY_ENOTFOUND); /* already revoked */
    assert_int_equal(store_token_revoke(f->s, "nobody"), TY_ENOTFOUND);

    assert_int_equal(store_tokens_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 4); /* revoked tokens are still listed */
    assert_string_equal(list[0].name, "admin");
    assert_true(list[0].revoked_at_ms >= list[0].created_at_ms);
    assert_int_equal(list[1].revoked_at_ms, 0);
    store_tokens_free(list, n);
}

static void test_duplicate_name_exists(void **state)
{
    store_fixture *f = *state;
    unsigned char h[32];
    hash_of("ci", h);
    assert_int_equal(store_token_create(f->s, "ci", STORE_SCOPE_READ, h), TY_OK);
    h[0] ^= 1;
    assert_int_equal(store_token_create(f->s, "ci", STORE_SCOPE_ADMIN, h), TY_EEXISTS);
    /* A revoked name stays taken. */
    assert_int_equal(store_token_revoke(f->s, "ci"), TY_OK);
    assert_int_equal(store_token_create(f->s, "ci", STORE_SCOPE_READ, h), TY_EEXISTS);
    assert_int_equal(admins(f->s), 0);
}

static void test_invalid_tokens(void **state)
{
    store_fixture *f = *state;
    unsigned char h[32] = {0};
    assert_int_equal(store_token_create(f->s, "x", 0, h), TY_EINVAL);
    assert_int_equal(store_token_create(f->s, "x", 1u << 5, h), TY_EINVAL);
    assert_int_equal(store_token_create(f->s, "", STORE_SCOPE_READ, h), TY_EINVAL);
    assert_int_equal(store_token_create(f->s, NULL, STORE_SCOPE_READ, h), TY_EINVAL);
    assert_int_equal(store_token_create(f->s, "x", STORE_SCOPE_READ, NULL), TY_EINVAL);
    store_token *list = NULL;
    size_t n = 9;
    assert_int_equal(store_tokens_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 0);
    store_tokens_free(list, n);
}

static void test_tokens_survive_reopen(void **state)
{
    store_fixture *f = *state;
    unsigned char h[32];
    hash_of("admin", h);
    assert_int_equal(store_token_create(f->s, "admin", STORE_SCOPE_ADMIN, h), TY_OK);
    store_close(f->s);
    f->s = open_store(&f->t);
    assert_int_equal(admins(f->s), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_list_revoke, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_name_exists, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_tokens, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_tokens_survive_reopen, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
