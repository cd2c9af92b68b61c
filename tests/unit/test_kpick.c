/*
 * test_kpick.c - scheduler/kube/kpick: what is kept of a JSON text for a pick, and which texts
 * are refused.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/kube/kpick.h"

typedef struct pick_case {
    const char *text;
    const char *pick;     /* JSON, or NULL for the whole */
    const char *expected; /* JSON of the result */
} pick_case;

static const pick_case cases[] = {
    /* No pick: the whole value, as jansson parses it. */
    {"{\"a\": 1, \"b\": [true, null, \"x\"]}", NULL, "{\"a\": 1, \"b\": [true, null, \"x\"]}"},
    {" 42 ", NULL, "42"},
    /* Members named true are kept whole; the others are skipped. */
    {"{\"a\": {\"deep\": [1, {\"x\": \"}\"}]}, \"b\": 2, \"c\": \"s\"}", "{\"a\": true, \"c\": true}",
     "{\"a\": {\"deep\": [1, {\"x\": \"}\"}]}, \"c\": \"s\"}"},
    /* Nested picks, through arrays element by element. */
    {"{\"metadata\": {\"name\": \"p\", \"managedFields\": [{\"f\": {}}], \"labels\": {\"k\": "
     "\"v\"}}, \"status\": {\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", "
     "\"status\": \"True\", \"lastProbeTime\": null}, {\"type\": \"PodScheduled\", \"status\": "
     "\"True\"}]}}",
     "{\"metadata\": {\"name\": true, \"labels\": true}, \"status\": {\"conditions\": "
     "{\"type\": true, \"status\": true}}}",
     "{\"metadata\": {\"name\": \"p\", \"labels\": {\"k\": \"v\"}}, \"status\": {\"conditions\": "
     "[{\"type\": \"Ready\", \"status\": \"True\"}, {\"type\": \"PodScheduled\", \"status\": "
     "\"True\"}]}}"},
    /* A field that is absent stays absent; an empty object and an empty array stay empty. */
    {"{\"a\": {}, \"b\": []}", "{\"a\": {\"x\": true}, \"b\": {\"y\": true}, \"c\": true}",
     "{\"a\": {}, \"b\": []}"},
    /* A value that is not an object where the pick has one is kept whole. */
    {"{\"a\": \"text\", \"b\": [1, 2]}", "{\"a\": {\"x\": true}, \"b\": {\"y\": true}}",
     "{\"a\": \"text\", \"b\": [1, 2]}"},
    /* Escapes: in skipped strings, in kept ones, in keys (unescaped before the lookup). */
    {"{\"s\\\"kip\": \"a\\\"}\\\\\", \"k\\u0065ep\": \"\\u00e9\\n\", \"n\": -1.5e3}",
     "{\"keep\": true, \"n\": true}", "{\"keep\": \"\\u00e9\\n\", \"n\": -1500.0}"},
    /* A watch event: its type and what the object's pick names. */
    {"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\","
     "\"resourceVersion\":\"12\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"env\":[{\"name\":"
     "\"A\",\"value\":\"1\"}],\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}}\n",
     "{\"type\": true, \"object\": {\"metadata\": {\"name\": true, \"resourceVersion\": true}, "
     "\"spec\": {\"containers\": {\"resources\": true}}}}",
     "{\"type\": \"MODIFIED\", \"object\": {\"metadata\": {\"name\": \"x\", \"resourceVersion\": "
     "\"12\"}, \"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": "
     "\"1\"}}}]}}}"},
};

static void test_picks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[128] = "";
        json_t *pick = cases[i].pick ? json_loads(cases[i].pick, 0, NULL) : NULL;
        json_t *want = json_loads(cases[i].expected, JSON_DECODE_ANY, NULL);
        assert_true(!cases[i].pick || pick);
        assert_non_null(want);
        json_t *got = ty_kpick_parse(cases[i].text, strlen(cases[i].text), pick, err, sizeof err);
        if (!got || !json_equal(got, want)) {
            char *g = got ? json_dumps(got, JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;
            fail_msg("case %zu: got %s (%s), expected %s", i, g ? g : "NULL", err,
                     cases[i].expected);
        }
        json_decref(got);
        json_decref(want);
        json_decref(pick);
    }
}

static void test_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "   ",
        "{\"a\": 1",                 /* not closed */
        "{\"a\": \"x}",              /* a string not closed */
        "{\"a\" 1}",                 /* no ':' */
        "{\"a\": 1 \"b\": 2}",       /* no ',' */
        "{\"keep\": tru}",           /* a kept value jansson refuses */
        "{\"a\": 1} x",              /* text after the value */
        "{\"a\": \"tab\there\"}",    /* a control character in a skipped string */
        "{\"keep\": [1, 2}",         /* an array of a kept member not closed */
        "[1, 2",
    };
    json_t *pick = json_pack("{s:b}", "keep", 1);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[128] = "";
        json_t *got = ty_kpick_parse(bad[i], strlen(bad[i]), pick, err, sizeof err);
        if (got)
            fail_msg("text %zu (%s) was accepted", i, bad[i]);
        assert_true(err[0] != '\0');
    }
    /* Nesting past 2048 is refused, skipped or not. */
    size_t n = 5000;
    char *deep = malloc(2 * n + 16);
    assert_non_null(deep);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"a\": ");
    for (size_t i = 0; i < n; i++)
        deep[k++] = '[';
    for (size_t i = 0; i < n; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    assert_null(ty_kpick_parse(deep, k, pick, NULL, 0));
    free(deep);
    json_decref(pick);
}

/*
 * Strings of every length up to 40 with an escape, a quote, a control character or UTF-8 at
 * every position, skipped and kept: kept as jansson keeps them, refused where it refuses them.
 * A string cut short at the end of the text is refused without a byte read past it (the
 * sanitizers' builds would see one).
 */
static void test_strings_every_length(void **state)
{
    (void)state;
    static const char *const inserts[] = {"", "\\\"", "\\\\", "\\n", "\x01", "\xc3\xa9", "\""};
    static const char xs[] = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    static const char ys[] = "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy";
    json_t *pick = json_pack("{s:b}", "keep", 1);
    for (size_t len = 0; len <= 40; len++)
        for (size_t at = 0; at <= len; at++)
            for (size_t k = 0; k < sizeof inserts / sizeof inserts[0]; k++) {
                char str[128], text[320];
                snprintf(str, sizeof str, "%.*s%s%.*s", (int)at, xs, inserts[k], (int)(len - at),
                         ys);
                snprintf(text, sizeof text, "{\"skip\": \"%s\", \"keep\": \"%s\"}", str, str);
                json_t *whole = json_loads(text, 0, NULL);
                json_t *got = ty_kpick_parse(text, strlen(text), pick, NULL, 0);
                json_t *want = whole ? json_pack("{s:O}", "keep", json_object_get(whole, "keep"))
                                     : NULL;
                if (!want != !got || (got && !json_equal(got, want)))
                    fail_msg("%s: %s, jansson %s", text, got ? "kept" : "refused",
                             whole ? "keeps it" : "refuses it");
                json_decref(got);
                json_decref(want);
                json_decref(whole);
            }
    for (size_t len = 0; len <= 40; len++) {
        char *cut = malloc(len + 7);
        assert_non_null(cut);
        memcpy(cut, "{\"a\": \"", 7);
        memset(cut + 7, 'x', len);
        assert_null(ty_kpick_parse(cut, len + 7, pick, NULL, 0));
        free(cut);
    }
    json_decref(pick);
}

/* A value kept whole is what jansson makes of it: the same value, or refused alike. */
static void test_whole_as_jansson(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{\"a\": 1, \"a\": 2}",                 /* the last of a duplicate key */
        "[\"\", \"x\", \"\u00e9t\u00e9\", \"\\u00e9\\n\\\"\"]",
        "[true, false, null, 0, -0, 1.5, -1.5e3, 2E2, 9223372036854775807]",
        "{\"k\": {\"deep\": [[], {}, [{}], {\"x\": [null]}]}}",
        "9223372036854775808",                  /* too big an integer */
        "[01]", "[-]", "[1.]", "[.5]", "[+1]", "[1e]",
        "[nul]", "[truex]", "[True]", "[1,]", "{\"a\": 1,}", "{,}", "[,1]", "{\"a\"}",
        "[\"\\u0000\"]",                        /* NUL, refused without JSON_ALLOW_NUL */
        "[\"\\ud800\"]",                        /* a lone surrogate */
        "[\"\\x\"]",                            /* not an escape */
        "[\"\xff\"]", "[\"\xc3\"]", "[\"\xc3\xa9\"]",   /* UTF-8: bad, cut short, good */
        "{\"\xff\": 1}", "{\"\xc3\xa9\": 1}",
        "{\"\\u006b\": \"v\"}",                 /* an escaped key */
    };
    json_t *pick = json_pack("{s:b}", "keep", 1);
    assert_non_null(pick);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        json_t *want = json_loads(texts[i], JSON_DECODE_ANY, NULL);
        json_t *got = ty_kpick_parse(texts[i], strlen(texts[i]), NULL, NULL, 0);
        if (want ? !got || !json_equal(got, want) : got != NULL)
            fail_msg("text %zu (%s): jansson %s it, the pick %s it", i, texts[i],
                     want ? "takes" : "refuses", got ? "takes" : "refuses");
        json_decref(got);
        /* The same as a member kept whole. */
        char *member = malloc(strlen(texts[i]) + 16);
        assert_non_null(member);
        size_t n = (size_t)sprintf(member, "{\"keep\": %s}", texts[i]);
        got = ty_kpick_parse(member, n, pick, NULL, 0);
        if (want ? !got || !json_equal(json_object_get(got, "keep"), want) : got != NULL)
            fail_msg("member %zu (%s): jansson %s it, the pick %s it", i, texts[i],
                     want ? "takes" : "refuses", got ? "takes" : "refuses");
        json_decref(got);
        free(member);
        json_decref(want);
    }
    /* Nesting: 2048 arrays in a value kept whole are taken, as jansson takes them; 2049 not. */
    for (size_t n = 2047; n <= 2049; n++) {
        char *deep = malloc(2 * n + 16);
        assert_non_null(deep);
        size_t k = (size_t)sprintf(deep, "{\"keep\": ");
        size_t at = k;
        for (size_t i = 0; i < n; i++)
            deep[k++] = '[';
        for (size_t i = 0; i < n; i++)
            deep[k++] = ']';
        deep[k++] = '}';
        json_t *want = json_loadb(deep + at, 2 * n, JSON_DECODE_ANY, NULL);
        json_t *got = ty_kpick_parse(deep, k, pick, NULL, 0);
        assert_int_equal(want != NULL, got != NULL);
        assert_int_equal(got != NULL, n <= 2048);
        json_decref(got);
        json_decref(want);
        free(deep);
    }
    json_decref(pick);
}

typedef struct string_case {
    const char *text;
    const char *expected; /* NULL: not found */
} string_case;

/* metadata.uid of an answer: found after skipped members, not read past. */
static void test_string_at_path(void **state)
{
    (void)state;
    static const char *const path[] = {"metadata", "uid"};
    static const string_case sc[] = {
        {"{\"kind\":\"Job\",\"metadata\":{\"name\":\"j\",\"labels\":{\"uid\":\"no\"},"
         "\"uid\":\"3f2a\"},\"spec\":{}}", "3f2a"},
        /* What follows the member is not read: a body cut there still answers. */
        {"{ \"metadata\" : { \"uid\" : \"u-1\" , \"name\": [", "u-1"},
        /* A member named uid elsewhere does not count. */
        {"{\"spec\":{\"uid\":\"x\"},\"metadata\":{\"name\":\"j\"}}", NULL},
        {"{\"metadata\":{\"uid\":7}}", NULL},
        {"{\"metadata\":\"uid\"}", NULL},
        {"[{\"metadata\":{\"uid\":\"a\"}}]", NULL},
        {"{\"metadata\":{\"uid\":\"a\\\"b\"}}", NULL},
        {"{\"metadata\":{\"uid\":\"abc", NULL},
        {"", NULL},
    };
    char out[16];
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        strcpy(out, "?");
        int rc = ty_kpick_string(sc[i].text, strlen(sc[i].text), path, 2, out, sizeof out);
        if (sc[i].expected) {
            assert_int_equal(rc, 0);
            assert_string_equal(out, sc[i].expected);
        } else {
            assert_int_equal(rc, -1);
        }
    }
    /* Cut to fit the buffer given. */
    const char *t = "{\"metadata\":{\"uid\":\"0123456789abcdef\"}}";
    char small[5];
    assert_int_equal(ty_kpick_string(t, strlen(t), path, 2, small, sizeof small), 0);
    assert_string_equal(small, "0123");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picks),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_strings_every_length),
        cmocka_unit_test(test_whole_as_jansson),
        cmocka_unit_test(test_string_at_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
