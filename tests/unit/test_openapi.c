/*
 * test_openapi.c - the OpenAPI validator of tests/support (oas.h), and the
 * agreement between the route table api_routes[] and openapi/openapi.yaml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "api/api.h"
#include "tests/support/oas.h"

#ifndef TY_OPENAPI_YAML
#error "TY_OPENAPI_YAML (path of openapi/openapi.yaml) must be defined"
#endif
#ifndef TY_K8S_OPENAPI_DIR
#error "TY_K8S_OPENAPI_DIR (tests/fixtures/kubernetes-openapi) must be defined"
#endif

static json_t *parse_json(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    if (!j)
        fail_msg("bad JSON in the test table: %s: %s", text, e.text);
    return j;
}

/* ---- YAML ---------------------------------------------------------------- */

static const struct yaml_case {
    const char *yaml;
    const char *json;  /* expected, or NULL: the parse must fail */
    const char *error; /* substring of the error when json is NULL */
} yaml_cases[] = {
    {"a: 1", "{\"a\": 1}", NULL},
    {"a: -17", "{\"a\": -17}", NULL},
    {"a: '1'", "{\"a\": \"1\"}", NULL},
    {"a: \"true\"", "{\"a\": \"true\"}", NULL},
    {"a: true\nb: False\nc: TRUE", "{\"a\": true, \"b\": false, \"c\": true}", NULL},
    {"a: ~\nb: null\nc:", "{\"a\": null, \"b\": null, \"c\": null}", NULL},
    {"a: 1.5\nb: 1e3\nc: -.5", "{\"a\": 1.5, \"b\": 1000.0, \"c\": -0.5}", NULL},
    {"a: 0x1F\nb: 0o17", "{\"a\": 31, \"b\": 15}", NULL},
    {"a: yes\nb: no\nc: on", "{\"a\": \"yes\", \"b\": \"no\", \"c\": \"on\"}", NULL},
    {"a: 1.2.3\nb: 12abc\nc: 2026-11-22",
     "{\"a\": \"1.2.3\", \"b\": \"12abc\", \"c\": \"2026-11-22\"}", NULL},
    {"200:\n  x: 1\ndefault: 2", "{\"200\": {\"x\": 1}, \"default\": 2}", NULL},
    {"a: !!str 12\nb: !!float 3", "{\"a\": \"12\", \"b\": 3.0}", NULL},
    {"a: [1, 'x', {b: c}]", "{\"a\": [1, \"x\", {\"b\": \"c\"}]}", NULL},
    {"- a\n- - 1\n  - 2", "[\"a\", [1, 2]]", NULL},
    {"a: |\n  line1\n  line2\nb: >\n  folded\n  text\n",
     "{\"a\": \"line1\\nline2\\n\", \"b\": \"folded text\\n\"}", NULL},
    {"base: &b {x: 1}\nuse: *b", "{\"base\": {\"x\": 1}, \"use\": {\"x\": 1}}", NULL},
    {"pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
     "{\"pattern\": \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\"}", NULL},
    {"{\"json\": [true, null, 2.5, \"s\"]}", "{\"json\": [true, null, 2.5, \"s\"]}", NULL},
    {"big: 123456789012345678901234567890", "{\"big\": 1.2345678901234568e29}", NULL},
    {"a: 1\na: 2", NULL, "duplicate key 'a'"},
    {"base: &b {x: 1}\nm:\n  <<: *b", NULL, "merge keys"},
    {"a: *nope", NULL, "unknown or unfinished anchor"},
    {"? [1, 2]\n: x", NULL, "only scalar mapping keys"},
    {"a: 1\n---\nb: 2", NULL, "more than one YAML document"},
    {"a: [1, 2", NULL, "line"},
    {"a: !!int abc", NULL, "does not match its tag"},
    {"", NULL, "empty YAML stream"},
};

static void test_yaml_core_schema(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof yaml_cases / sizeof yaml_cases[0]; i++) {
        const struct yaml_case *tc = &yaml_cases[i];
        json_t *got = NULL;
        char err[256];
        int rc = oas_yaml_parse(tc->yaml, strlen(tc->yaml), &got, err, sizeof err);

        if (tc->json) {
            json_t *want = parse_json(tc->json);
            if (rc != 0)
                fail_msg("case %zu: parse failed: %s", i, err);
            if (!json_equal(got, want)) {
                char *g = json_dumps(got, JSON_ENCODE_ANY);
                fail_msg("case %zu: got %s, want %s", i, g, tc->json);
            }
            json_decref(want);
        } else {
            if (rc == 0)
                fail_msg("case %zu: parse of %s should fail", i, tc->yaml);
            if (!strstr(err, tc->error))
                fail_msg("case %zu: error '%s' lacks '%s'", i, err, tc->error);
        }
        json_decref(got);
    }
}

static void test_yaml_deep_nesting_is_refused(void **state)
{
    char text[4096];
    json_t *got = NULL;
    char err[256];
    size_t n = 0;

    (void)state;
    for (int i = 0; i < 1000; i++)
        text[n++] = '[';
    text[n] = '\0';
    assert_int_equal(oas_yaml_parse(text, n, &got, err, sizeof err), -1);
    assert_null(got);
}

/* ---- schema validation --------------------------------------------------- */

static const char *const root_doc =
    "{\"components\": {\"schemas\": {"
    "  \"Name\": {\"type\": \"string\", \"pattern\": \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\","
    "             \"maxLength\": 63},"
    "  \"Node\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": "
    "\"#/components/schemas/Node\"},"
    "            \"v\": {\"type\": \"integer\"}}, \"additionalProperties\": false},"
    "  \"a/b~c\": {\"type\": \"boolean\"},"
    "  \"Loop\": {\"$ref\": \"#/components/schemas/Loop\"}"
    "}}}";

static const struct schema_case {
    const char *schema;
    const char *instance;
    const char *error; /* NULL: valid; else a substring of the error */
} schema_cases[] = {
    /* type */
    {"{\"type\": \"string\"}", "\"x\"", NULL},
    {"{\"type\": \"string\"}", "1", "$: expected string, got integer"},
    {"{\"type\": \"integer\"}", "3", NULL},
    {"{\"type\": \"integer\"}", "3.0", "expected integer, got number"},
    {"{\"type\": \"number\"}", "3", NULL},
    {"{\"type\": \"boolean\"}", "null", "expected boolean, got null"},
    {"{\"type\": \"string\", \"nullable\": true}", "null", NULL},
    {"{\"type\": \"string\", \"nullable\": true}", "1", "expected string, got integer"},
    /* OpenAPI 3.0.3: nullable adds null to its own schema's type, nothing more */
    {"{\"type\": \"string\", \"nullable\": true, \"enum\": [\"A\"]}", "null",
     "null is not one of the enum values"},
    {"{\"type\": \"string\", \"nullable\": true, \"enum\": [\"A\", null]}", "null", NULL},
    {"{\"nullable\": true, \"allOf\": [{\"type\": \"string\"}]}", "null",
     "schema error: nullable without type"},
    {"{\"type\": \"string\", \"nullable\": true, \"allOf\": [{\"type\": \"string\"}]}", "null",
     "$: expected string, got null"},
    {"{\"anyOf\": [{\"type\": \"string\", \"enum\": [\"A\"]}, {\"type\": \"string\", "
     "\"nullable\": true, \"enum\": [null]}]}",
     "null", NULL},
    {"{\"anyOf\": [{\"type\": \"string\", \"enum\": [\"A\"]}, {\"type\": \"string\", "
     "\"nullable\": true, \"enum\": [null]}]}",
     "\"B\"", "matches none of the 2 anyOf alternatives"},
    {"{\"type\": [\"string\", \"null\"]}", "null", NULL},
    {"{\"type\": [\"string\", \"null\"]}", "1", "not one of the allowed types"},
    {"{}", "{\"anything\": [1]}", NULL},
    {"true", "1", NULL},
    {"false", "1", "no value is allowed here"},
    /* enum, const */
    {"{\"enum\": [\"PENDING\", \"RUNNING\"]}", "\"RUNNING\"", NULL},
    {"{\"enum\": [\"PENDING\", \"RUNNING\"]}", "\"DONE\"",
     "\"DONE\" is not one of the enum values"},
    {"{\"enum\": [1, 2]}", "2.0", NULL},
    {"{\"const\": \"x\"}", "\"y\"", "not the const value"},
    /* numbers */
    {"{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 4096}", "4096", NULL},
    {"{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 4096}", "0", "below the minimum 1"},
    {"{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 4096}", "4097",
     "above the maximum 4096"},
    {"{\"minimum\": 0, \"exclusiveMinimum\": true}", "0", "below the minimum 0 (exclusive)"},
    {"{\"maximum\": 10, \"exclusiveMaximum\": true}", "9.5", NULL},
    {"{\"maximum\": 10, \"exclusiveMaximum\": true}", "10", "(exclusive)"},
    {"{\"exclusiveMinimum\": 0}", "0", "not above the exclusive minimum"},
    {"{\"exclusiveMaximum\": 5}", "4", NULL},
    {"{\"multipleOf\": 0.5}", "1.5", NULL},
    {"{\"multipleOf\": 3}", "10", "not a multiple of 3"},
    {"{\"type\": \"integer\", \"format\": \"int32\"}", "2147483648", "does not fit format int32"},
    {"{\"type\": \"integer\", \"minimum\": 0}", "9223372036854775807", NULL},
    /* strings */
    {"{\"minLength\": 2, \"maxLength\": 3}", "\"\xc3\xa9t\xc3\xa9\"", NULL},
    {"{\"maxLength\": 2}", "\"abc\"", "longer than maxLength 2"},
    {"{\"minLength\": 1}", "\"\"", "shorter than minLength 1"},
    {"{\"$ref\": \"#/components/schemas/Name\"}", "\"fmnist-lr-0-05\"", NULL},
    {"{\"$ref\": \"#/components/schemas/Name\"}", "\"-bad\"", "does not match pattern"},
    {"{\"$ref\": \"#/components/schemas/Name\"}", "\"Upper\"", "does not match pattern"},
    {"{\"format\": \"date-time\"}", "\"2026-11-22T10:00:00.123Z\"", NULL},
    {"{\"format\": \"date-time\"}", "\"2026-11-22 10:00:00Z\"", "not an RFC 3339 date-time"},
    {"{\"format\": \"date-time\"}", "5", NULL},
    {"{\"format\": \"byte\"}", "\"aGVsbG8=\"", NULL},
    {"{\"format\": \"byte\"}", "\"aGVsbG8\"", "not base64"},
    {"{\"format\": \"email\"}", "\"not checked\"", NULL},
    /* arrays */
    {"{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 1}", "[\"a\"]", NULL},
    {"{\"type\": \"array\", \"items\": {\"type\": \"string\"}}", "[\"a\", 2]",
     "$[1]: expected string"},
    {"{\"minItems\": 1}", "[]", "fewer than minItems 1"},
    {"{\"maxItems\": 1}", "[1, 2]", "more than maxItems 1"},
    {"{\"uniqueItems\": true}", "[1, 2, 1]", "items 0 and 2 are equal"},
    /* objects */
    {"{\"type\": \"object\", \"required\": [\"id\"], \"properties\": {\"id\": {\"type\": "
     "\"string\"}}}",
     "{\"id\": \"x\", \"extra\": 1}", NULL},
    {"{\"required\": [\"id\", \"name\"]}", "{\"id\": \"x\"}",
     "$: required member 'name' is missing"},
    {"{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": false}",
     "{\"a\": 1, \"b\": 2}", "$.b: member is not allowed"},
    {"{\"additionalProperties\": {\"type\": \"string\"}}", "{\"team\": \"vision\", \"n\": 1}",
     "$.n: expected string"},
    {"{\"additionalProperties\": {\"type\": \"string\"}}", "{\"app.kubernetes.io/name\": 1}",
     "$[\"app.kubernetes.io/name\"]: expected string"},
    {"{\"properties\": {\"spec\": {\"properties\": {\"workers\": {\"properties\": "
     "{\"count\": {\"type\": \"integer\"}}}}}}}",
     "{\"spec\": {\"workers\": {\"count\": \"4\"}}}", "$.spec.workers.count: expected integer"},
    {"{\"minProperties\": 1}", "{}", "fewer than minProperties 1"},
    {"{\"maxProperties\": 1}", "{\"a\": 1, \"b\": 2}", "more than maxProperties 1"},
    /* $ref */
    {"{\"$ref\": \"#/components/schemas/Node\"}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {}}}",
     NULL},
    {"{\"$ref\": \"#/components/schemas/Node\"}", "{\"next\": {\"next\": {\"v\": \"x\"}}}",
     "$.next.next.v: expected integer"},
    {"{\"$ref\": \"#/components/schemas/Node\"}", "{\"next\": {\"w\": 1}}",
     "$.next.w: member is not allowed"},
    {"{\"$ref\": \"#/components/schemas/a~1b~0c\"}", "true", NULL},
    {"{\"$ref\": \"#/components/schemas/Missing\"}", "1", "does not resolve"},
    {"{\"$ref\": \"other.yaml#/x\"}", "1", "external $ref"},
    {"{\"$ref\": \"#/components/schemas/Loop\"}", "1", "a $ref cycle?"},
    {"{\"$ref\": \"#/components/schemas/Name\", \"type\": \"integer\"}", "\"ok\"", NULL},
    /* combinators */
    {"{\"allOf\": [{\"type\": \"integer\"}, {\"minimum\": 5}]}", "7", NULL},
    {"{\"allOf\": [{\"type\": \"integer\"}, {\"minimum\": 5}]}", "3", "below the minimum 5"},
    {"{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}", "\"x\"", NULL},
    {"{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}", "true",
     "matches none of the 2 anyOf alternatives"},
    {"{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\"}]}", "1.5", NULL},
    {"{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\"}]}", "1",
     "matches more than one oneOf alternative (0 and 1)"},
    {"{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}", "[]",
     "matches none of the 2 oneOf alternatives"},
    {"{\"not\": {\"type\": \"null\"}}", "null", "matches the schema under 'not'"},
    /* Kubernetes extensions */
    {"{\"type\": \"string\", \"format\": \"int-or-string\"}", "8080", NULL},
    {"{\"x-kubernetes-int-or-string\": true}", "\"50%\"", NULL},
    {"{\"x-kubernetes-int-or-string\": true}", "1.5", "expected integer or string, got number"},
    {"{\"type\": \"object\", \"x-nullable\": true}", "null", NULL},
};

static void test_schema_keywords(void **state)
{
    json_t *root = parse_json(root_doc);

    (void)state;
    for (size_t i = 0; i < sizeof schema_cases / sizeof schema_cases[0]; i++) {
        const struct schema_case *tc = &schema_cases[i];
        json_t *schema = parse_json(tc->schema), *inst = parse_json(tc->instance);
        char err[512];
        int rc = oas_validate(root, schema, inst, 0, err, sizeof err);

        if (!tc->error && rc != 0)
            fail_msg("case %zu: %s against %s: unexpected error: %s", i, tc->instance, tc->schema,
                     err);
        if (tc->error && rc == 0)
            fail_msg("case %zu: %s against %s should fail (%s)", i, tc->instance, tc->schema,
                     tc->error);
        if (tc->error && !strstr(err, tc->error))
            fail_msg("case %zu: error '%s' lacks '%s'", i, err, tc->error);
        json_decref(schema);
        json_decref(inst);
    }
    json_decref(root);
}

static void test_schema_int_or_string_rejects_float(void **state)
{
    json_t *schema = parse_json("{\"type\": \"string\", \"format\": \"int-or-string\"}");
    json_t *inst = parse_json("1.5");
    char err[256];

    (void)state;
    assert_int_equal(oas_validate(NULL, schema, inst, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "expected integer or string"));
    json_decref(schema);
    json_decref(inst);
}

static void test_schema_strict_mode(void **state)
{
    json_t *schema =
        parse_json("{\"type\": \"object\", \"properties\": {\"a\": {}, \"m\": {"
                   "\"type\": \"object\", \"x-kubernetes-preserve-unknown-fields\": true,"
                   " \"properties\": {}}}}");
    json_t *ok = parse_json("{\"a\": 1, \"m\": {\"free\": 1}}");
    json_t *bad = parse_json("{\"a\": 1, \"typo\": 2}");
    char err[256];

    (void)state;
    assert_int_equal(oas_validate(NULL, schema, bad, 0, err, sizeof err), 0);
    assert_int_equal(oas_validate(NULL, schema, ok, OAS_STRICT, err, sizeof err), 0);
    assert_int_equal(oas_validate(NULL, schema, bad, OAS_STRICT, err, sizeof err), -1);
    assert_non_null(strstr(err, "$.typo: member is not allowed"));
    json_decref(schema);
    json_decref(ok);
    json_decref(bad);
}

/* ---- patterns ------------------------------------------------------------ */

static const struct pattern_case {
    const char *pattern;
    const char *text;
    int match; /* 1, 0, or -1: the pattern must be refused */
} pattern_cases[] = {
    {"^[0-9a-z]{26}$", "01jd3k6v8q9w0e1r2t3y4u5i6o", 1},
    {"^[0-9a-z]{26}$", "01JD3K6V8Q9W0E1R2T3Y4U5I6O", 0},
    {"^\\d+$", "12345", 1},
    {"^\\d+$", "12a45", 0},
    {"^\\w+$", "A_z9", 1},
    {"^\\S+$", "no-space", 1},
    {"^\\S+$", "a space", 0},
    {"\\s", "tab\there", 1},
    {"^[^\\s]+$", "a b", 0},
    {"^\\D*$", "abc", 1},
    {"^\\W$", "-", 1},
    {"^a\\.b$", "a.b", 1},
    {"^a\\.b$", "axb", 0},
    {"^/[^\\0]*$", "/x", -1},
    {"^\\/data$", "/data", 1},
    {"^[a-z\\-]+$", "a-b", 1},
    {"^[\\]a]+$", "]a]", 1},
    {"^[\\^x]+$", "^x", 1},
    {"^[\\^]$", "^", 1},
    {"^[.]$", ".", 1},
    {"^[+\\-.0-9]+$", "-1.5e", 0},
    {"^[+\\-.0-9]+$", "-1.5", 1},
    {"^(?:ab)+$", "abab", 1},
    {"^a+?b$", "aab", 1},
    {"^a{2,3}?$", "aa", 1},
    {"^a{2}$", "aaa", 0},
    {"x{", "x{", 1},
    {"^[a-z]([-a-z0-9]*[a-z0-9])?(\\.[a-z]([-a-z0-9]*[a-z0-9])?)*$", "example.com", 1},
    {"^(PENDING|RUNNING)$", "RUNNING", 1},
    {"^(PENDING|RUNNING)$", "RUNNINGX", 0},
    {"ab", "xaby", 1},
    {"(?=a)", "a", -1},
    {"(?<n>a)", "a", -1},
    {"\\bword", "word", -1},
    {"(a)\\1", "aa", -1},
    {"\\u0041", "A", -1},
    {"[[:alpha:]]", "a", -1},
};

static void test_patterns(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof pattern_cases / sizeof pattern_cases[0]; i++) {
        const struct pattern_case *tc = &pattern_cases[i];
        json_t *schema = json_pack("{s:s}", "pattern", tc->pattern);
        json_t *inst = json_string(tc->text);
        char err[512];
        int rc = oas_validate(NULL, schema, inst, 0, err, sizeof err);

        if (tc->match == 1 && rc != 0)
            fail_msg("case %zu: '%s' should match '%s': %s", i, tc->text, tc->pattern, err);
        if (tc->match == 0 && (rc == 0 || !strstr(err, "does not match pattern")))
            fail_msg("case %zu: '%s' should not match '%s' (%s)", i, tc->text, tc->pattern,
                     rc == 0 ? "it did" : err);
        if (tc->match == -1 && (rc == 0 || !strstr(err, "schema error")))
            fail_msg("case %zu: pattern '%s' should be refused (%s)", i, tc->pattern,
                     rc == 0 ? "it was accepted" : err);
        json_decref(schema);
        json_decref(inst);
    }
}

static void test_pattern_sees_bytes_after_nul(void **state)
{
    json_t *schema = json_pack("{s:s}", "pattern", "^[a-z]*$");
    json_t *inst = json_stringn("ab\0Z", 4);
    char err[256];

    (void)state;
    assert_int_equal(oas_validate(NULL, schema, inst, 0, err, sizeof err), -1);
    json_decref(schema);
    json_decref(inst);
}

static const struct dt_case {
    const char *text;
    int valid;
} dt_cases[] = {
    {"2026-11-22T10:00:00Z", 1}, {"2026-11-22T10:00:00.123456Z", 1},
    {"2026-11-22t10:00:00z", 1}, {"2026-11-22T10:00:00+05:30", 1},
    {"2024-02-29T00:00:00Z", 1}, {"2023-02-29T00:00:00Z", 0},
    {"2026-13-01T00:00:00Z", 0}, {"2026-11-22T24:00:00Z", 0},
    {"2026-11-22T10:00:00", 0},  {"2026-11-22T10:00:00.Z", 0},
    {"2026-11-22T10:00Z", 0},    {"2026-11-22T10:00:00+0530", 0},
    {"1732269600", 0},
};

static void test_date_time(void **state)
{
    json_t *schema = json_pack("{s:s, s:s}", "type", "string", "format", "date-time");

    (void)state;
    for (size_t i = 0; i < sizeof dt_cases / sizeof dt_cases[0]; i++) {
        json_t *inst = json_string(dt_cases[i].text);
        char err[256];
        int rc = oas_validate(NULL, schema, inst, 0, err, sizeof err);
        if ((rc == 0) != dt_cases[i].valid)
            fail_msg("'%s' should be %s", dt_cases[i].text,
                     dt_cases[i].valid ? "valid" : "invalid");
        json_decref(inst);
    }
    json_decref(schema);
}

/* ---- responses against a small document ---------------------------------- */

static const char *const small_doc =
    "openapi: 3.0.3\n"
    "info: {title: t, version: '1'}\n"
    "paths:\n"
    "  /v1/jobs/{id}:\n"
    "    get:\n"
    "      parameters: [{name: id, in: path, required: true, schema: {type: string}}]\n"
    "      responses:\n"
    "        '200':\n"
    "          description: the job\n"
    "          headers:\n"
    "            X-Count: {required: true, schema: {type: integer, minimum: 1}}\n"
    "          content:\n"
    "            application/json:\n"
    "              schema: {$ref: '#/components/schemas/Job'}\n"
    "        4XX: {$ref: '#/components/responses/Problem'}\n"
    "  /v1/jobs/{id}:cancel:\n"
    "    post:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: cancelled\n"
    "          content: {application/json: {schema: {type: object, required: [cancelled]}}}\n"
    "        default: {$ref: '#/components/responses/Problem'}\n"
    "  /v1/jobs:batch:\n"
    "    post:\n"
    "      responses:\n"
    "        '204': {description: nothing}\n"
    "  /metrics:\n"
    "    get:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: text\n"
    "          content: {text/plain: {schema: {type: string, minLength: 1}}}\n"
    "  /text:\n"
    "    get:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: text, maybe empty\n"
    "          content: {text/plain: {schema: {type: string, maxLength: 8}}}\n"
    "  /log:\n"
    "    get:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: bytes\n"
    "          content: {text/plain: {schema: {$ref: '#/components/schemas/Bytes'}}}\n"
    "  /any:\n"
    "    get:\n"
    "      responses:\n"
    "        '200':\n"
    "          description: whatever\n"
    "          content: {'application/*': {}}\n"
    "components:\n"
    "  responses:\n"
    "    Problem:\n"
    "      description: a problem\n"
    "      content:\n"
    "        application/problem+json:\n"
    "          schema:\n"
    "            type: object\n"
    "            required: [status, code]\n"
    "            properties: {status: {type: integer}, code: {type: string}}\n"
    "  schemas:\n"
    "    Bytes: {type: string, format: binary}\n"
    "    Job:\n"
    "      type: object\n"
    "      required: [id, state]\n"
    "      additionalProperties: false\n"
    "      properties:\n"
    "        id: {type: string, pattern: '^[0-9a-z]{26}$'}\n"
    "        state: {type: string, enum: [PENDING, CANCELLED]}\n";

#define JOB_ID "01jd3k6v8q9w0e1r2t3y4u5i6o"

static const struct resp_case {
    const char *method;
    const char *path;
    int status;
    const char *content_type;
    const char *body;
    const char *error; /* NULL: conforms */
} resp_cases[] = {
    {"GET", "/v1/jobs/" JOB_ID, 200, "application/json",
     "{\"id\": \"" JOB_ID "\", \"state\": \"PENDING\"}", NULL},
    {"GET", "/v1/jobs/" JOB_ID "?x=1", 200, "Application/JSON; charset=utf-8",
     "{\"id\": \"" JOB_ID "\", \"state\": \"PENDING\"}", NULL},
    {"GET", "/v1/jobs/" JOB_ID, 200, "application/json",
     "{\"id\": \"" JOB_ID "\", \"state\": \"DONE\"}",
     "GET /v1/jobs/" JOB_ID
     " (/v1/jobs/{id}) 200 application/json: $.state: \"DONE\" is not one of"},
    {"GET", "/v1/jobs/" JOB_ID, 200, "application/json", "{\"id\": \"X\", \"state\": \"PENDING\"}",
     "$.id: \"X\" does not match pattern"},
    {"GET", "/v1/jobs/" JOB_ID, 200, "application/json", "{\"id\": ", "the body is not valid JSON"},
    {"GET", "/v1/jobs/" JOB_ID, 200, "text/html", "<p>",
     "content type 'text/html' is not documented"},
    {"GET", "/v1/jobs/" JOB_ID, 200, NULL, "{}", "no Content-Type"},
    {"GET", "/v1/jobs/" JOB_ID, 404, "application/problem+json",
     "{\"status\": 404, \"code\": \"x\"}", NULL},
    {"GET", "/v1/jobs/" JOB_ID, 404, "application/problem+json", "{\"status\": \"404\"}",
     "required member 'code' is missing"},
    {"GET", "/v1/jobs/" JOB_ID, 500, "application/problem+json", "{}",
     "status 500 is not documented for GET /v1/jobs/{id}"},
    {"POST", "/v1/jobs/" JOB_ID ":cancel", 200, "application/json", "{\"cancelled\": true}", NULL},
    {"POST", "/v1/jobs/" JOB_ID ":cancel", 503, "application/problem+json",
     "{\"status\": 503, \"code\": \"x\"}", NULL},
    {"DELETE", "/v1/jobs/" JOB_ID, 200, "application/json", "{}",
     "method not documented for path /v1/jobs/{id}"},
    {"GET", "/v2/nothing", 200, "application/json", "{}", "path not documented"},
    {"GET", "/v1/jobs/a/b", 200, "application/json", "{}", "path not documented"},
    {"POST", "/v1/jobs:batch", 204, NULL, "", NULL},
    {"POST", "/v1/jobs:batch", 204, "application/json", "{}", "where the response documents none"},
    {"GET", "/metrics", 200, "text/plain; version=0.0.4", "a_total 1\n", NULL},
    {"GET", "/metrics", 200, "text/plain; version=0.0.4", "", "empty body"},
    {"GET", "/text", 200, "text/plain; charset=utf-8", "", NULL},
    {"GET", "/text", 200, "text/plain", "caf\xc3\xa9", NULL},
    {"GET", "/text", 200, "text/plain", "123456789", "is longer than"},
    {"GET", "/text", 200, "text/plain", "\xff\xfe", "the body is not UTF-8 text"},
    {"GET", "/log", 200, "text/plain", "", NULL},
    {"GET", "/log", 200, "text/plain", "\xff\xfe", NULL},
    {"GET", "/any", 200, "application/yaml", "a: 1", NULL},
    {"GET", "/any", 200, "text/plain", "a", "is not documented"},
};

static oas *load_small_doc(void)
{
    json_t *doc = NULL;
    oas *o = NULL;
    char err[256];

    if (oas_yaml_parse(small_doc, strlen(small_doc), &doc, err, sizeof err) < 0)
        fail_msg("small doc: %s", err);
    if (oas_from_json(doc, &o, err, sizeof err) < 0)
        fail_msg("small doc: %s", err);
    return o;
}

static void test_check_response(void **state)
{
    oas *o = load_small_doc();

    (void)state;
    for (size_t i = 0; i < sizeof resp_cases / sizeof resp_cases[0]; i++) {
        const struct resp_case *tc = &resp_cases[i];
        char err[1024];
        int rc = oas_check_response(o, tc->method, tc->path, tc->status, tc->content_type, tc->body,
                                    strlen(tc->body), err, sizeof err);
        if (!tc->error && rc != 0)
            fail_msg("case %zu: unexpected error: %s", i, err);
        if (tc->error && rc == 0)
            fail_msg("case %zu: should fail with '%s'", i, tc->error);
        if (tc->error && !strstr(err, tc->error))
            fail_msg("case %zu: error '%s' lacks '%s'", i, err, tc->error);
    }
    oas_free(o);
}

static void test_match_path_prefers_literals(void **state)
{
    oas *o = load_small_doc();

    (void)state;
    assert_string_equal(oas_match_path(o, "/v1/jobs/" JOB_ID ":cancel"), "/v1/jobs/{id}:cancel");
    assert_string_equal(oas_match_path(o, "/v1/jobs/" JOB_ID), "/v1/jobs/{id}");
    assert_string_equal(oas_match_path(o, "/v1/jobs:batch"), "/v1/jobs:batch");
    assert_null(oas_match_path(o, "/v1/jobs/"));
    assert_null(oas_match_path(o, "/v1/jobs"));
    oas_free(o);
}

typedef struct hdrs {
    const char *name;
    const char *value;
} hdrs;

static const char *get_hdr(const char *name, void *ud)
{
    const hdrs *h = ud;
    return strcasecmp(h->name, name) == 0 ? h->value : NULL;
}

static void test_check_response_headers(void **state)
{
    oas *o = load_small_doc();
    hdrs good = {"x-count", "3"}, bad = {"X-Count", "0"}, none = {"Other", "1"};
    char err[512];

    (void)state;
    assert_int_equal(oas_check_response_headers(o, "GET", "/v1/jobs/" JOB_ID, 200, get_hdr, &good,
                                                err, sizeof err),
                     0);
    assert_int_equal(oas_check_response_headers(o, "GET", "/v1/jobs/" JOB_ID, 200, get_hdr, &bad,
                                                err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "header X-Count: $: 0 is below the minimum 1"));
    assert_int_equal(oas_check_response_headers(o, "GET", "/v1/jobs/" JOB_ID, 200, get_hdr, &none,
                                                err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "required header X-Count is missing"));
    oas_free(o);
}

static void test_not_openapi_is_refused(void **state)
{
    json_t *doc = parse_json("{\"swagger\": \"2.0\", \"paths\": {}}");
    oas *o = NULL;
    char err[256];

    (void)state;
    assert_int_equal(oas_from_json(doc, &o, err, sizeof err), -1);
    assert_null(o);
    assert_non_null(strstr(err, "not an OpenAPI 3.x document"));
}

/* ---- the real document --------------------------------------------------- */

static oas *load_real_doc(void)
{
    oas *o = NULL;
    char err[512];

    if (oas_load_file(TY_OPENAPI_YAML, &o, err, sizeof err) < 0)
        fail_msg("%s", err);
    return o;
}

/*
 * Every $ref resolves, every pattern is within the supported subset, and
 * every nullable schema has a type (strict OpenAPI 3.0 tools refuse it else).
 */
static void walk_doc(const json_t *root, const json_t *v, const char *where)
{
    const char *key;
    const json_t *sub;
    size_t i;
    char err[512];

    if (json_is_array(v)) {
        json_array_foreach(v, i, sub)
            walk_doc(root, sub, where);
        return;
    }
    if (!json_is_object(v))
        return;
    json_object_foreach((json_t *)v, key, sub) {
        if (strcmp(key, "nullable") == 0 && json_is_true(sub) && !json_object_get(v, "type"))
            fail_msg("%s: nullable without type", where);
        if (strcmp(key, "$ref") == 0 && json_is_string(sub) &&
            !oas_resolve_ref(root, json_string_value(sub), err, sizeof err))
            fail_msg("%s: %s", where, err);
        if (strcmp(key, "pattern") == 0 && json_is_string(sub)) {
            json_t *probe = json_string("");
            if (oas_validate(root, v, probe, 0, err, sizeof err) < 0 && strstr(err, "schema error"))
                fail_msg("%s: %s", where, err);
            json_decref(probe);
        }
        if (strcmp(key, "example") != 0 && strcmp(key, "examples") != 0)
            walk_doc(root, sub, key);
    }
}

static void test_real_document_is_usable(void **state)
{
    oas *o = load_real_doc();
    const json_t *components = json_object_get(oas_doc(o), "components");
    const char *kind, *other_kind, *name;
    const json_t *set, *other, *item;

    (void)state;
    walk_doc(oas_doc(o), oas_doc(o), "document");
    /* One name, one thing: generators put every component in one namespace. */
    json_object_foreach((json_t *)components, kind, set) {
        json_object_foreach((json_t *)set, name, item) {
            json_object_foreach((json_t *)components, other_kind, other) {
                if (strcmp(kind, other_kind) < 0 && json_object_get(other, name))
                    fail_msg("'%s' names both components.%s and components.%s", name, kind,
                             other_kind);
            }
        }
    }
    oas_free(o);
}

/* Values that are null in real responses conform, and null goes no further. */
static const struct null_case {
    const char *schema; /* components.schemas name */
    const char *instance;
    const char *error; /* NULL: valid */
} null_cases[] = {
    {"Event",
     "{\"time\": \"2026-11-22T10:00:00.123Z\", \"from\": null, \"to\": \"PENDING\","
     " \"reason\": \"Submitted\", \"message\": \"\"}",
     NULL},
    {"Event",
     "{\"time\": \"2026-11-22T10:00:00.123Z\", \"from\": \"PENDING\", \"to\": \"CANCELLED\","
     " \"reason\": \"Cancelled\", \"message\": \"\"}",
     NULL},
    {"Event",
     "{\"time\": \"2026-11-22T10:00:00.123Z\", \"from\": \"DONE\", \"to\": \"PENDING\","
     " \"reason\": \"Submitted\", \"message\": \"\"}",
     "$.from: matches none of the 2 anyOf alternatives"},
    {"Rank",
     "{\"rank\": 0, \"state\": \"pending\", \"pid\": null, \"exit_code\": null,"
     " \"signal\": null, \"started_at\": null, \"ended_at\": null}",
     NULL},
    {"Rank",
     "{\"rank\": 0, \"state\": \"pending\", \"pid\": null, \"exit_code\": null,"
     " \"signal\": null, \"started_at\": \"yesterday\", \"ended_at\": null}",
     "$.started_at: matches none of the 2 anyOf alternatives"},
    {"JobSpec",
     "{\"name\": \"a\", \"command\": [\"true\"], \"workers\": {\"count\": 1},"
     " \"labels\": null, \"queue\": null, \"image\": null, \"args\": null, \"env\": null,"
     " \"resources\": {\"cpu\": null, \"memory\": null, \"gpu\": null},"
     " \"placement\": {\"zone\": null, \"capacity\": null}, \"restart\": null}",
     NULL},
    {"JobSpec", "{\"name\": \"a\", \"command\": [\"true\"], \"workers\": {\"count\": 1},"
                " \"queue\": \"Not A Label\"}",
     "$.queue: matches none of the 2 anyOf alternatives"},
};

static void test_real_document_null_fields(void **state)
{
    oas *o = load_real_doc();
    const json_t *schemas = json_object_get(json_object_get(oas_doc(o), "components"), "schemas");

    (void)state;
    for (size_t i = 0; i < sizeof null_cases / sizeof null_cases[0]; i++) {
        const struct null_case *tc = &null_cases[i];
        json_t *inst = parse_json(tc->instance);
        char err[512];
        int rc = oas_validate(oas_doc(o), json_object_get(schemas, tc->schema), inst, 0, err,
                              sizeof err);
        if (!tc->error && rc != 0)
            fail_msg("case %zu (%s): unexpected error: %s", i, tc->schema, err);
        if (tc->error && (rc == 0 || !strstr(err, tc->error)))
            fail_msg("case %zu (%s): should fail with '%s' (%s)", i, tc->schema, tc->error,
                     rc == 0 ? "it passed" : err);
        json_decref(inst);
    }
    oas_free(o);
}

/*
 * The HTTP layer answers these on every route, before any handler runs, so
 * every operation lists them.
 */
static int check_http_errors(const char *method, const char *path, const json_t *op, void *ud)
{
    static const char *const statuses[] = {"405", "408", "413", "414", "431"};
    const json_t *responses = json_object_get(op, "responses");

    (void)ud;
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        if (!json_object_get(responses, statuses[i]))
            fail_msg("%s %s does not list %s", method, path, statuses[i]);
    return 0;
}

static void test_every_operation_lists_http_errors(void **state)
{
    oas *o = load_real_doc();

    (void)state;
    oas_foreach_operation(o, check_http_errors, NULL);
    oas_free(o);
}

/* Every example of a schema in the real document conforms to that schema. */
static void test_real_document_examples_conform(void **state)
{
    oas *o = load_real_doc();
    const json_t *schemas = json_object_get(json_object_get(oas_doc(o), "components"), "schemas");
    const char *name;
    const json_t *schema;

    (void)state;
    json_object_foreach((json_t *)schemas, name, schema) {
        const json_t *example = json_object_get(schema, "example");
        char err[512];
        if (example && oas_validate(oas_doc(o), schema, example, 0, err, sizeof err) < 0)
            fail_msg("components.schemas.%s: its example does not conform: %s", name, err);
    }
    oas_free(o);
}

typedef struct op_set {
    char **ops; /* "METHOD path" */
    size_t n;
} op_set;

static int collect_op(const char *method, const char *path, const json_t *op, void *ud)
{
    op_set *set = ud;
    char line[512];

    (void)op;
    snprintf(line, sizeof line, "%s %s", method, path);
    set->ops = realloc(set->ops, (set->n + 1) * sizeof *set->ops);
    assert_non_null(set->ops);
    set->ops[set->n] = strdup(line);
    assert_non_null(set->ops[set->n]);
    set->n++;
    return 0;
}

static int in_set(const op_set *set, const char *line)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->ops[i], line) == 0)
            return 1;
    return 0;
}

static void test_routes_match_openapi(void **state)
{
    oas *o = load_real_doc();
    op_set doc = {0}, table = {0};
    char missing[4096] = "";
    size_t used = 0;

    (void)state;
    oas_foreach_operation(o, collect_op, &doc);
    for (size_t i = 0; i < api_nroutes; i++)
        collect_op(api_routes[i].method, api_routes[i].path, NULL, &table);
    for (size_t i = 0; i < table.n; i++)
        if (!in_set(&doc, table.ops[i]) && used < sizeof missing)
            used += (size_t)snprintf(missing + used, sizeof missing - used,
                                     "\n  in api_routes[], not in openapi.yaml: %s", table.ops[i]);
    for (size_t i = 0; i < doc.n; i++)
        if (!in_set(&table, doc.ops[i]) && used < sizeof missing)
            used += (size_t)snprintf(missing + used, sizeof missing - used,
                                     "\n  in openapi.yaml, not in api_routes[]: %s", doc.ops[i]);
    for (size_t i = 0; i < table.n; i++)
        for (size_t j = i + 1; j < table.n; j++)
            if (strcmp(table.ops[i], table.ops[j]) == 0 && used < sizeof missing)
                used += (size_t)snprintf(missing + used, sizeof missing - used,
                                         "\n  twice in api_routes[]: %s", table.ops[i]);
    if (missing[0])
        fail_msg("the route table and openapi.yaml differ:%s", missing);
    for (size_t i = 0; i < doc.n; i++)
        free(doc.ops[i]);
    for (size_t i = 0; i < table.n; i++)
        free(table.ops[i]);
    free(doc.ops);
    free(table.ops);
    oas_free(o);
}

/* ---- Kubernetes schemas (format independence) ---------------------------- */

static const char *const k8s_job =
    "{\"apiVersion\": \"batch/v1\", \"kind\": \"Job\","
    " \"metadata\": {\"name\": \"fmnist-a1\", \"labels\": {\"trainyard.dev/job-id\": \"x\"}},"
    " \"spec\": {\"completionMode\": \"Indexed\", \"completions\": 4, \"parallelism\": 4,"
    "  \"backoffLimit\": 0, \"template\": {\"spec\": {\"restartPolicy\": \"Never\","
    "   \"containers\": [{\"name\": \"worker\", \"image\": \"img:1\","
    "    \"ports\": [{\"containerPort\": 29500}],"
    "    \"resources\": {\"limits\": {\"nvidia.com/gpu\": \"1\", \"memory\": \"32Gi\"}},"
    "    \"env\": [{\"name\": \"RANK\", \"valueFrom\": {\"fieldRef\": {\"fieldPath\":"
    "     \"metadata.annotations['batch.kubernetes.io/job-completion-index']\"}}}]}]}}}}";

static void check_k8s(const json_t *root, const json_t *schema)
{
    json_t *job = parse_json(k8s_job);
    char err[512];

    if (oas_validate(root, schema, job, OAS_STRICT, err, sizeof err) < 0)
        fail_msg("a valid Job was refused: %s", err);
    json_object_set_new(json_object_get(job, "spec"), "parallelism", json_string("four"));
    assert_int_equal(oas_validate(root, schema, job, OAS_STRICT, err, sizeof err), -1);
    assert_non_null(strstr(err, "$.spec.parallelism: expected integer, got string"));
    json_object_set_new(json_object_get(job, "spec"), "parallelism", json_integer(4));
    json_object_set_new(json_object_get(job, "spec"), "podReplacementPolicy",
                        json_string("Failed"));
    assert_int_equal(oas_validate(root, schema, job, OAS_STRICT, err, sizeof err), -1);
    assert_non_null(strstr(err, "$.spec.podReplacementPolicy: member is not allowed"));
    assert_int_equal(oas_validate(root, schema, job, 0, err, sizeof err), 0);
    json_decref(job);
}

static void test_kubernetes_v3_schema(void **state)
{
    json_t *root = json_load_file(TY_K8S_OPENAPI_DIR "/apis__batch__v1_openapi.json", 0, NULL);
    char err[256];
    const json_t *schema;

    (void)state;
    if (!root)
        fail_msg("cannot read the Kubernetes schemas in %s", TY_K8S_OPENAPI_DIR);
    schema = oas_resolve_ref(root, "#/components/schemas/io.k8s.api.batch.v1.Job", err, sizeof err);
    assert_non_null(schema);
    check_k8s(root, schema);
    json_decref(root);
}

static void test_kubernetes_v2_schema(void **state)
{
    json_t *root = json_load_file(TY_K8S_OPENAPI_DIR "/swagger.json", 0, NULL);
    char err[256];
    const json_t *schema;

    (void)state;
    if (!root)
        fail_msg("cannot read the Kubernetes schemas in %s", TY_K8S_OPENAPI_DIR);
    schema = oas_resolve_ref(root, "#/definitions/io.k8s.api.batch.v1.Job", err, sizeof err);
    assert_non_null(schema);
    check_k8s(root, schema);
    json_decref(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_core_schema),
        cmocka_unit_test(test_yaml_deep_nesting_is_refused),
        cmocka_unit_test(test_schema_keywords),
        cmocka_unit_test(test_schema_int_or_string_rejects_float),
        cmocka_unit_test(test_schema_strict_mode),
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_pattern_sees_bytes_after_nul),
        cmocka_unit_test(test_date_time),
        cmocka_unit_test(test_check_response),
        cmocka_unit_test(test_match_path_prefers_literals),
        cmocka_unit_test(test_check_response_headers),
        cmocka_unit_test(test_not_openapi_is_refused),
        cmocka_unit_test(test_real_document_is_usable),
        cmocka_unit_test(test_real_document_examples_conform),
        cmocka_unit_test(test_real_document_null_fields),
        cmocka_unit_test(test_every_operation_lists_http_errors),
        cmocka_unit_test(test_routes_match_openapi),
        cmocka_unit_test(test_kubernetes_v3_schema),
        cmocka_unit_test(test_kubernetes_v2_schema),
    };
    return cmocka_run_group_tests_name("openapi", tests, NULL, NULL);
}
