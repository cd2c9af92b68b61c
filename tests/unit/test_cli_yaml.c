/*
 * test_cli_yaml.c - job files as `trainyard submit` reads them: YAML with anchors, aliases and
 * merge keys becomes the JSON the API takes, scalars get their YAML 1.2 core types, --set
 * overrides dotted paths, hostile files are refused (duplicated keys, nesting past the API's
 * 64 levels, alias bombs) with their line and column, and -o yaml reads back as the same JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/yaml.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

static json_t *conv_ok(const char *text)
{
    json_t *out = NULL;
    char err[256] = "";
    ty_err e = cli_yaml_to_json(text, strlen(text), &out, err, sizeof err);
    if (e)
        fail_msg("%s: %s", text, err);
    return out;
}

static void assert_json_eq(const json_t *got, const char *want_json)
{
    json_t *want = json_loads(want_json, JSON_DECODE_ANY, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        fail_msg("got %s, want %s", g, want_json);
    }
    json_decref(want);
}

static void test_scalar_types(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *json;
    } cases[] = {
        {"a: 4", "{\"a\": 4}"},
        {"a: -12", "{\"a\": -12}"},
        {"a: 0x1f", "{\"a\": 31}"},
        {"a: 1.5e-3", "{\"a\": 0.0015}"},
        {"a: .5", "{\"a\": 0.5}"},
        {"a: true", "{\"a\": true}"},
        {"a: False", "{\"a\": false}"},
        {"a: ~", "{\"a\": null}"},
        {"a:", "{\"a\": null}"},
        {"a: null", "{\"a\": null}"},
        {"a: \"4\"", "{\"a\": \"4\"}"},
        {"a: 'true'", "{\"a\": \"true\"}"},
        {"a: yes", "{\"a\": \"yes\"}"}, /* YAML 1.1's booleans are strings in 1.2 */
        {"a: 1.2.3", "{\"a\": \"1.2.3\"}"},
        {"a: .inf", "{\"a\": \".inf\"}"}, /* JSON has no infinity */
        {"a: 99999999999999999999", "{\"a\": 1e20}"},
        {"a: [1, two, 3.0]", "{\"a\": [1, \"two\", 3.0]}"},
        {"a: |\n  line one\n  line two\n", "{\"a\": \"line one\\nline two\\n\"}"},
        {"{\"a\": {\"b\": [1, null]}}", "{\"a\": {\"b\": [1, null]}}"}, /* JSON is YAML */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *got = conv_ok(cases[i].yaml);
        assert_json_eq(got, cases[i].json);
        json_decref(got);
    }
}

static char *read_fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cli/%s", FIXTURES, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    *len = fread(buf, 1, 65535, f);
    fclose(f);
    return buf;
}

static void test_anchors_aliases_merge(void **state)
{
    (void)state;
    size_t len;
    char *text = read_fixture("anchors.yaml", &len), err[256] = "";
    json_t *got = NULL;
    assert_int_equal(cli_yaml_to_json(text, len, &got, err, sizeof err), TY_OK);
    /* The merge key copies what the mapping does not set; its own SEED wins. */
    assert_json_eq(json_object_get(got, "env"), "{\"LOG_LEVEL\": \"info\", \"SEED\": \"8\"}");
    assert_json_eq(json_object_get(got, "workers"), "{\"count\": 2, \"gpus\": 0}");
    assert_json_eq(json_object_get(got, "labels"), "{\"team\": \"vision\", \"copy\": \"yes\"}");
    json_decref(got);
    free(text);

    got = conv_ok("a: &x {n: 1, l: [1, 2]}\nb: *x\nc: [*x, *x]\n");
    assert_json_eq(got, "{\"a\": {\"n\": 1, \"l\": [1, 2]}, \"b\": {\"n\": 1, \"l\": [1, 2]},"
                        " \"c\": [{\"n\": 1, \"l\": [1, 2]}, {\"n\": 1, \"l\": [1, 2]}]}");
    json_decref(got);
    /* A list of merges: the first that sets a key wins, keys set here win over both. */
    got = conv_ok("p: &p {a: 1, b: 1}\nq: &q {b: 2, c: 2}\nr:\n  <<: [*p, *q]\n  c: 3\n");
    assert_json_eq(json_object_get(got, "r"), "{\"a\": 1, \"b\": 1, \"c\": 3}");
    json_decref(got);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *yaml;
        ty_err e;
        const char *msg; /* a part of the message */
    } cases[] = {
        {"a: [1, 2", TY_EINVAL, "2:1: did not find expected ',' or ']'"},
        {"a: 1\n---\nb: 2\n", TY_EINVAL, "2:1: one document per file"},
        {"", TY_EINVAL, "1:1: the file holds no document"},
        {"[1, 2]: x", TY_EINVAL, "1:1: mapping keys must be strings"},
        {"a: *nowhere", TY_EINVAL, "1:4: undefined alias *nowhere"},
        {"a: &a [*a]", TY_EINVAL, "1:8: alias *a inside its own anchor"},
        {"a: 1\n<<: 5\n", TY_EINVAL, "2:5: a merge key (<<) takes a mapping"},
        {"a: 1\n<<: [{b: 1}, 2]\n", TY_EINVAL, "merge key"},
        /* Each level doubles the values: 2^20 at the end, far over the limit. */
        {"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: &d [*c, *c]\ne: &e [*d, *d]\n"
         "f: &f [*e, *e]\ng: &g [*f, *f]\nh: &h [*g, *g]\ni: &i [*h, *h]\nj: &j [*i, *i]\n"
         "k: &k [*j, *j]\nl: &l [*k, *k]\nm: &m [*l, *l]\nn: &n [*m, *m]\no: &o [*n, *n]\n"
         "p: &p [*o, *o]\nq: &q [*p, *p]\nr: &r [*q, *q]\ns: &s [*r, *r]\nt: [*s, *s]\n",
         TY_ETOOLARGE, "too many values"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *out = NULL;
        char err[256] = "";
        ty_err e = cli_yaml_to_json(cases[i].yaml, strlen(cases[i].yaml), &out, err, sizeof err);
        if (e != cases[i].e || out || !strstr(err, cases[i].msg))
            fail_msg("case %zu: got %d '%s', want %d '%s'", i, e, err, cases[i].e, cases[i].msg);
    }
}

/* Refused: the message as the CLI prints it after the file's name ("job.yaml:3:1: ..."). */
static void assert_refused(const char *text, ty_err want, const char *msg)
{
    json_t *out = NULL;
    char err[256] = "";
    ty_err e = cli_yaml_to_json(text, strlen(text), &out, err, sizeof err);
    if (e != want || out || strcmp(err, msg) != 0)
        fail_msg("%.80s\ngot %d '%s', want %d '%s'", text, e, err, want, msg);
}

/* A key set twice in one mapping is refused where it is set again, as the API refuses a
 * duplicated JSON key; keys that merges bring are not duplicates (they are overridden). */
static void test_duplicate_keys(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *msg;
    } cases[] = {
        {"name: a\nimage: x\nname: b\n", "3:1: duplicate key \"name\" (first at line 1)"},
        {"env:\n  A: 1\n  B: 2\n  A: 3\n", "4:3: duplicate key \"A\" (first at line 2)"},
        {"a: {x: 1, y: 2, x: 3}\n", "1:17: duplicate key \"x\" (first at line 1)"},
        {"a: [{k: 1}, {k: 2, k: 3}]\n", "1:20: duplicate key \"k\" (first at line 1)"},
        {"1: a\n'1': b\n", "2:1: duplicate key \"1\" (first at line 1)"}, /* the same JSON key */
        {"x: &x {a: 1, a: 2}\n", "1:14: duplicate key \"a\" (first at line 1)"},
        {"b: &b {a: 1}\nc:\n  <<: *b\n  a: 2\n  a: 3\n",
         "5:3: duplicate key \"a\" (first at line 4)"},
        {"b: &b {a: 1}\nc: &c {d: 1}\ne:\n  <<: *b\n  <<: *c\n",
         "5:3: duplicate key \"<<\" (first at line 4)"},
        {"k: &k name\nname: a\n*k : b\n", "3:1: duplicate key \"name\" (first at line 2)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_refused(cases[i].yaml, TY_EINVAL, cases[i].msg);

    /* The fixture with its anchors and merge keys, and one key written again at its end. */
    size_t len;
    char *text = read_fixture("anchors.yaml", &len), err[256] = "";
    snprintf(text + len, 65536 - len, "workers: {count: 3}\n");
    json_t *got = NULL;
    assert_int_equal(cli_yaml_to_json(text, strlen(text), &got, err, sizeof err), TY_EINVAL);
    assert_null(got);
    assert_string_equal(err, "18:1: duplicate key \"workers\" (first at line 8)");
    free(text);

    /* Not duplicates: a key a merge brings and the mapping sets itself; the same key in two
     * mappings; a key again in an alias's copy. */
    got = conv_ok("b: &b {a: 1, z: 0}\nc:\n  <<: *b\n  a: 2\nd: {a: 3}\ne: *b\n");
    assert_json_eq(got, "{\"b\": {\"a\": 1, \"z\": 0}, \"c\": {\"a\": 2, \"z\": 0},"
                        " \"d\": {\"a\": 3}, \"e\": {\"a\": 1, \"z\": 0}}");
    json_decref(got);
}

/* Nesting: as deep as the API takes JSON (64 levels) and not deeper, with the place of the
 * first level too many; a document far deeper is refused too, as soon as that level is read
 * (no timing assertion here: bench figures are in the commit that made it linear). */
static void test_nesting_limit(void **state)
{
    (void)state;
    const size_t deep = 200000;
    char *text = malloc(4 * deep + 8);
    assert_non_null(text);
    for (size_t n = CLI_YAML_MAX_DEPTH; n <= CLI_YAML_MAX_DEPTH + 1; n++) {
        memset(text, '[', n);
        memset(text + n, ']', n);
        text[2 * n] = '\0';
        json_t *out = NULL;
        char err[256] = "";
        ty_err e = cli_yaml_to_json(text, 2 * n, &out, err, sizeof err);
        if (n == CLI_YAML_MAX_DEPTH) {
            assert_int_equal(e, TY_OK);
            json_decref(out);
        } else {
            assert_int_equal(e, TY_ETOOLARGE);
            assert_string_equal(err, "1:65: nested deeper than 64 levels");
        }
    }
    /* 200,000 levels (400 KB): flow sequences, then flow mappings, then block sequences. */
    memset(text, '[', deep);
    memset(text + deep, ']', deep);
    assert_refused(text, TY_ETOOLARGE, "1:65: nested deeper than 64 levels");
    text[0] = '\0';
    size_t n = 0;
    for (size_t i = 0; i < deep; i++, n += 4)
        memcpy(text + n, "{a: ", 4);
    text[n] = '\0';
    assert_refused(text, TY_ETOOLARGE, "1:257: nested deeper than 64 levels");
    n = 0;
    for (size_t i = 0; i < deep; i++, n += 2)
        memcpy(text + n, "- ", 2);
    memcpy(text + n, "x\n", 3);
    assert_refused(text, TY_ETOOLARGE, "1:129: nested deeper than 64 levels");
    free(text);

    /* An alias counts the levels it expands to where it stands. */
    char doc[1024];
    n = 0;
    n += (size_t)snprintf(doc + n, sizeof doc - n, "a: &a ");
    for (int i = 0; i < 62; i++)
        doc[n++] = '[';
    for (int i = 0; i < 62; i++)
        doc[n++] = ']';
    snprintf(doc + n, sizeof doc - n, "\nb: [*a]\n"); /* the mapping, [ and 62: 64 levels */
    json_t *got = conv_ok(doc);
    json_decref(got);
    snprintf(doc + n, sizeof doc - n, "\nb: [[*a]]\n"); /* 65 */
    assert_refused(doc, TY_ETOOLARGE, "2:6: nested deeper than 64 levels once *a is expanded");
}

static void test_set(void **state)
{
    (void)state;
    json_t *spec = conv_ok("name: a\nworkers: {count: 1}\n");
    char err[256] = "";
    static const char *const sets[] = {
        "workers.count=4",      "name=b",        "labels.team=vision",
        "args=[\"--lr\", 0.1]", "restart.max=0", "queue=\"42\"",
        "labels.rev=4f2a{",     "priority=-3",   "env.EMPTY=",
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (cli_json_set(spec, sets[i], err, sizeof err) != TY_OK)
            fail_msg("%s: %s", sets[i], err);
    assert_json_eq(spec, "{\"name\": \"b\", \"workers\": {\"count\": 4},"
                         " \"labels\": {\"team\": \"vision\", \"rev\": \"4f2a{\"},"
                         " \"args\": [\"--lr\", 0.1], \"restart\": {\"max\": 0},"
                         " \"queue\": \"42\", \"priority\": -3, \"env\": {\"EMPTY\": \"\"}}");
    static const char *const bad[] = {"novalue", "=x", "a..b=1", "name.x=1", ".a=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (cli_json_set(spec, bad[i], err, sizeof err) != TY_EINVAL || !err[0])
            fail_msg("%s was accepted", bad[i]);
    }
    json_decref(spec);
}

static void test_yaml_round_trip(void **state)
{
    (void)state;
    const char *doc = "{\"name\": \"x\", \"s\": [\"true\", \"12\", \"\", \"null\", \"a: b\","
                      " \"line\\nbreak\"], \"n\": [1, -2.5, true, null], \"o\": {}}";
    json_t *v = json_loads(doc, 0, NULL);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(cli_json_to_yaml(v, f), TY_OK);
    fclose(f);
    json_t *back = conv_ok(buf);
    assert_true(json_equal(v, back));
    json_decref(back);
    json_decref(v);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_types),    cmocka_unit_test(test_anchors_aliases_merge),
        cmocka_unit_test(test_refusals),        cmocka_unit_test(test_set),
        cmocka_unit_test(test_yaml_round_trip), cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_nesting_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
