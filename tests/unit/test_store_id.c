/* Unit tests for store/store_id.c: time-ordered job ids. */
#include "store/store_int.h"
#include "tests/unit/test_store_util.h"

static void assert_id_charset(const char *id)
{
    assert_int_equal(strlen(id), STORE_ID_LEN);
    for (const char *p = id; *p; p++)
        assert_non_null(strchr("0123456789abcdefghjkmnpqrstvwxyz", *p));
}

static void test_encode_known_values(void **state)
{
    (void)state;
    static const struct {
        int64_t ms;
        uint64_t rhi, rlo;
        const char *id;
    } cases[] = {
        {0, 0, 0, "00000000000000000000000000"},
        {0, 0, 1, "00000000000000000000000001"},
        {0, 0, 32, "00000000000000000000000010"},
        {1, 0, 0, "00000000010000000000000000"},
        {STORE_ID_MAX_MS, 0xffff, UINT64_MAX, "7zzzzzzzzzzzzzzzzzzzzzzzzz"},
        /* ULID spec example: 01ARZ3NDEKTSV4RRFFQ69G5FAV, lower-cased. */
        {1469922850259, 0xd676, 0x4c61efb99302bd5bULL, "01arz3ndektsv4rrffq69g5fav"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char id[STORE_ID_LEN + 1];
        store_id_encode(cases[i].ms, cases[i].rhi, cases[i].rlo, id);
        assert_string_equal(id, cases[i].id);
        int64_t ms;
        uint64_t rhi, rlo;
        assert_int_equal(store_id_decode(id, &ms, &rhi, &rlo), 0);
        assert_int_equal(ms, cases[i].ms);
        assert_int_equal(rhi, cases[i].rhi);
        assert_int_equal(rlo, cases[i].rlo);
    }
}

static void test_decode_rejects_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "0000000000000000000000000",   /* 25 */
        "000000000000000000000000000", /* 27 */
        "0000000000000000000000000u",  /* not in the alphabet */
        "0000000000000000000000000A",  /* upper case */
        "80000000000000000000000000",  /* over 128 bits */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t ms;
        uint64_t rhi, rlo;
        assert_int_equal(store_id_decode(bad[i], &ms, &rhi, &rlo), -1);
    }
}

static void test_ids_increase_within_and_across_milliseconds(void **state)
{
    (void)state;
    store_idgen g;
    store_idgen_init(&g);
    char prev[STORE_ID_LEN + 1] = "", id[STORE_ID_LEN + 1];
    int64_t ms;
    static const int64_t clock[] = {1000, 1000, 1000, 1001, 1001, 5000, 5000};
    for (size_t i = 0; i < sizeof clock / sizeof *clock; i++) {
        assert_int_equal(store_idgen_next(&g, clock[i], id, &ms), TY_OK);
        assert_int_equal(ms, clock[i]);
        assert_id_charset(id);
        assert_true(strcmp(id, prev) > 0);
        memcpy(prev, id, sizeof id);
    }
}

static void test_clock_going_back_keeps_order(void **state)
{
    (void)state;
    store_idgen g;
    store_idgen_init(&g);
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    int64_t ms;
    assert_int_equal(store_idgen_next(&g, 9000, a, &ms), TY_OK);
    assert_int_equal(store_idgen_next(&g, 100, b, &ms), TY_OK);
    assert_int_equal(ms, 9000); /* the last millisecond is kept */
    assert_true(strcmp(b, a) > 0);
}

static void test_observe_continues_after_stored_id(void **state)
{
    (void)state;
    store_idgen g;
    store_idgen_init(&g);
    char stored[STORE_ID_LEN + 1], id[STORE_ID_LEN + 1];
    int64_t ms;
    store_id_encode(7000, 0x10, 0x20, stored);
    store_idgen_observe(&g, stored);
    store_idgen_observe(&g, "not an id");
    assert_int_equal(store_idgen_next(&g, 6000, id, &ms), TY_OK);
    assert_int_equal(ms, 7000);
    assert_true(strcmp(id, stored) > 0);
}

static void test_suffix_overflow_moves_to_next_millisecond(void **state)
{
    (void)state;
    store_idgen g;
    store_idgen_init(&g);
    char last[STORE_ID_LEN + 1], id[STORE_ID_LEN + 1];
    int64_t ms;
    store_id_encode(42, 0xffff, UINT64_MAX, last);
    store_idgen_observe(&g, last);
    assert_int_equal(store_idgen_next(&g, 42, id, &ms), TY_OK);
    assert_int_equal(ms, 43);
    assert_true(strcmp(id, last) > 0);
}

static void test_first_ids_of_two_generators_differ(void **state)
{
    (void)state;
    store_idgen g1, g2;
    store_idgen_init(&g1);
    store_idgen_init(&g2);
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1];
    int64_t ms;
    assert_int_equal(store_idgen_next(&g1, 1234, a, &ms), TY_OK);
    assert_int_equal(store_idgen_next(&g2, 1234, b, &ms), TY_OK);
    assert_memory_equal(a, b, 10);           /* same millisecond */
    assert_string_not_equal(a + 10, b + 10); /* random suffixes */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_known_values),
        cmocka_unit_test(test_decode_rejects_malformed),
        cmocka_unit_test(test_ids_increase_within_and_across_milliseconds),
        cmocka_unit_test(test_clock_going_back_keeps_order),
        cmocka_unit_test(test_observe_continues_after_stored_id),
        cmocka_unit_test(test_suffix_overflow_moves_to_next_millisecond),
        cmocka_unit_test(test_first_ids_of_two_generators_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
