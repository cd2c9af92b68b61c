/*
 * test_cli_yaml.c - job files as `trainyard submit` reads them: YAML with anchors, aliases and
 * merge keys becomes the JSON the API takes, scalars get their YAML 1.2 core types, --set
 * overrides dotted paths, hostile files are refused, and -o yaml reads back as the same JSON.
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
        {"a: [1, 2", TY_EINVAL, "line "},
        {"a: 1\n---\nb: 2\n", TY_EINVAL, "one document"},
        {"", TY_EINVAL, "no document"},
        {"[1, 2]: x", TY_EINVAL, "keys must be strings"},
        {"a: *nowhere", TY_EINVAL, "line 1"},
        {"a: &a [*a]", TY_ETOOLARGE, "nested too deeply"},
        {"a: 1\n<<: 5\n", TY_EINVAL, "merge key"},
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
        cmocka_unit_test(test_yaml_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
