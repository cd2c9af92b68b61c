/*
 * Unit tests for common/ty_hash.c: FNV-1a as published (64-bit test vectors).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/ty_hash.h"

static void test_published_vectors(void **state)
{
    (void)state;
    assert_true(ty_fnv1a_str("") == 0xcbf29ce484222325ULL);
    assert_true(ty_fnv1a_str("a") == 0xaf63dc4c8601ec8cULL);
    assert_true(ty_fnv1a_str("foobar") == 0x85944171f73967e8ULL);
}

/* Bytes hashed in pieces give the hash of the whole. */
static void test_carried_on(void **state)
{
    (void)state;
    uint64_t h = ty_fnv1a(TY_FNV1A_INIT, "foo", 3);
    assert_true(ty_fnv1a(h, "bar", 3) == ty_fnv1a_str("foobar"));
    assert_true(ty_fnv1a(TY_FNV1A_INIT, "", 0) == ty_fnv1a_str(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_vectors),
        cmocka_unit_test(test_carried_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
