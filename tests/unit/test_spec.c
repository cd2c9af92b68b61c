/*
 * test_spec.c - api/spec.c: strict decoding of request bodies (400 layer)
 * and validation + normalization of job specs (422 layer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "common/ty_buf.h"

/* The fields of a minimal spec (image is optional), so each case changes exactly one thing. */
#define NAME "\"name\":\"a\""
#define IMG "\"image\":\"img\""
#define CMD "\"command\":[\"x\"]"
#define WRK "\"workers\":{\"count\":1}"
#define REQ NAME "," IMG "," CMD "," WRK
/* A spec with the required fields plus `extra` members. */
#define J(extra) "{" REQ "," extra "}"

/* ---- helpers ------------------------------------------------------------- */

static json_t *decode_ok(const char *body, size_t len)
{
    json_t *j = NULL;
    char msg[256] = "";
    ty_err e = spec_decode(body, len, &j, msg, sizeof msg);
    if (e != TY_OK)
        fail_msg("decode of %.200s failed (%d): %s", body, e, msg);
    return j;
}

/* Validates body and returns the errors (new list); the spec must be invalid. */
static json_t *errors_of(const char *body, size_t len)
{
    json_t *in = decode_ok(body, len);
    spec_errors errs;
    json_t *out = NULL;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    ty_err e = spec_job(in, "$", &out, &errs);
    if (e != TY_EINVAL) {
        char *got = out ? json_dumps(out, JSON_COMPACT) : NULL;
        fail_msg("%.200s: expected TY_EINVAL, got %d (%s)", body, e, got ? got : "");
    }
    assert_null(out);
    assert_int_equal(errs.count, json_array_size(errs.list));
    json_t *list = json_incref(errs.list);
    spec_errors_free(&errs);
    json_decref(in);
    return list;
}

static int has_error(const json_t *list, const char *path, const char *fragment)
{
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        const char *p = json_string_value(json_object_get(item, "path"));
        const char *m = json_string_value(json_object_get(item, "message"));
        if (p && m && strcmp(p, path) == 0 && strstr(m, fragment))
            return 1;
    }
    return 0;
}

static void expect_error(const char *body, size_t len, const char *path, const char *fragment)
{
    json_t *list = errors_of(body, len);
    if (!has_error(list, path, fragment)) {
        char *text = json_dumps(list, JSON_COMPACT);
        fail_msg("%.300s\n  expected an error at %s containing \"%s\"\n  got %s", body, path,
                 fragment, text);
    }
    json_decref(list);
}

/* The normalized spec of body as compact JSON (new, free()). */
static char *normalize(const char *body)
{
    json_t *in = decode_ok(body, strlen(body)), *out = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    ty_err e = spec_job(in, "$", &out, &errs);
    if (e != TY_OK) {
        char *text = json_dumps(errs.list, JSON_COMPACT);
        fail_msg("%s\n  expected valid, got %d: %s", body, e, text);
    }
    char *text = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    json_decref(in);
    spec_errors_free(&errs);
    return text;
}

/* ---- the 422 table: one rule per row -------------------------------------- */

static const struct bad_case {
    const char *body;
    const char *path;
    const char *fragment;
} bad_cases[] = {
    /* top level */
    {"[]", "$", "must be an object"},
    {"null", "$", "must be an object"},
    {"\"x\"", "$", "must be an object"},
    {"42", "$", "must be an object"},
    {"true", "$", "must be an object"},
    {J("\"nmae\":\"x\""), "$.nmae", "unknown field"},
    /* name */
    {"{" IMG "," CMD "," WRK "}", "$.name", "is required"},
    {"{\"name\":null," IMG "," CMD "," WRK "}", "$.name", "is required"},
    {"{\"name\":\"Bad\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"a_b\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"-ab\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"ab-\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"a..b\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\"a.-b\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":\".ab\"," IMG "," CMD "," WRK "}", "$.name", "DNS subdomain"},
    {"{\"name\":7," IMG "," CMD "," WRK "}", "$.name", "must be a string"},
    /* labels */
    {J("\"labels\":[]"), "$.labels", "must be an object"},
    {J("\"labels\":{\"team\":1}"), "$.labels.team", "must be a string"},
    {J("\"labels\":{\"-team\":\"x\"}"), "$.labels.-team", "invalid label key"},
    {J("\"labels\":{\"Example.com/team\":\"x\"}"), "$.labels.Example.com/team",
     "invalid label key"},
    {J("\"labels\":{\"a/b/c\":\"x\"}"), "$.labels.a/b/c", "invalid label key"},
    {J("\"labels\":{\"example.com/\":\"x\"}"), "$.labels.example.com/", "invalid label key"},
    {J("\"labels\":{\"\":\"x\"}"), "$.labels.", "invalid label key"},
    {J("\"labels\":{\"team\":\"bad value\"}"), "$.labels.team", "invalid label value"},
    {J("\"labels\":{\"team\":\"-x\"}"), "$.labels.team", "invalid label value"},
    /* queue, priority */
    {J("\"queue\":\"Default\""), "$.queue", "DNS label"},
    {J("\"queue\":[]"), "$.queue", "must be a string"},
    {J("\"priority\":1.5"), "$.priority", "must be an integer"},
    {J("\"priority\":1.0"), "$.priority", "must be an integer"},
    {J("\"priority\":true"), "$.priority", "must be an integer"},
    {J("\"priority\":\"5\""), "$.priority", "must be an integer"},
    {J("\"priority\":1000001"), "$.priority", "must be between -1000000 and 1000000"},
    {J("\"priority\":-1000001"), "$.priority", "must be between -1000000 and 1000000"},
    {J("\"priority\":1180591620717411303424"), "$.priority", "must be between"},
    {J("\"priority\":-1180591620717411303424"), "$.priority", "must be between"},
    {J("\"priority\":9223372036854775808"), "$.priority", "must be between"},
    {J("\"priority\":1e400"), "$.priority", "must be an integer"},
    {J("\"priority\":-1e400"), "$.priority", "must be an integer"},
    /* image */
    {"{" NAME ",\"image\":[\"img\"]," CMD "," WRK "}", "$.image", "must be a string"},
    {"{" NAME ",\"image\":\"\"," CMD "," WRK "}", "$.image", "must not be empty"},
    {"{" NAME ",\"image\":\"a b\"," CMD "," WRK "}", "$.image", "white space"},
    {"{" NAME ",\"image\":\"a\\tb\"," CMD "," WRK "}", "$.image", "control"},
    {"{" NAME ",\"image\":\"a\\u0001b\"," CMD "," WRK "}", "$.image", "control"},
    {"{" NAME ",\"image\":\"a\\u00a0b\"," CMD "," WRK "}", "$.image", "white space"},
    {"{" NAME ",\"image\":\"a\\u2028b\"," CMD "," WRK "}", "$.image", "white space"},
    {"{" NAME ",\"image\":{}," CMD "," WRK "}", "$.image", "must be a string"},
    /* command, args */
    {"{" NAME "," IMG "," WRK "}", "$.command", "is required"},
    {"{" NAME "," IMG ",\"command\":[]," WRK "}", "$.command", "must not be empty"},
    {"{" NAME "," IMG ",\"command\":\"x\"," WRK "}", "$.command", "must be an array"},
    {"{" NAME "," IMG ",\"command\":[\"x\",\"\"]," WRK "}", "$.command[1]", "must not be empty"},
    {"{" NAME "," IMG ",\"command\":[1]," WRK "}", "$.command[0]", "must be a string"},
    {J("\"args\":\"x\""), "$.args", "must be an array"},
    {J("\"args\":[\"ok\",false]"), "$.args[1]", "must be a string"},
    /* env */
    {J("\"env\":[]"), "$.env", "must be an object"},
    {J("\"env\":{\"1X\":\"a\"}"), "$.env.1X", "invalid variable name"},
    {J("\"env\":{\"A-B\":\"a\"}"), "$.env.A-B", "invalid variable name"},
    {J("\"env\":{\"TRAINYARD_JOB_ID\":\"x\"}"), "$.env.TRAINYARD_JOB_ID", "reserved"},
    {J("\"env\":{\"RANK\":\"0\"}"), "$.env.RANK", "reserved"},
    {J("\"env\":{\"WORLD_SIZE\":\"2\"}"), "$.env.WORLD_SIZE", "reserved"},
    {J("\"env\":{\"LOCAL_RANK\":\"0\"}"), "$.env.LOCAL_RANK", "reserved"},
    {J("\"env\":{\"MASTER_ADDR\":\"h\"}"), "$.env.MASTER_ADDR", "reserved"},
    {J("\"env\":{\"MASTER_PORT\":\"1\"}"), "$.env.MASTER_PORT", "reserved"},
    {J("\"env\":{\"LOCAL_WORLD_SIZE\":\"1\"}"), "$.env.LOCAL_WORLD_SIZE", "reserved"},
    {J("\"env\":{\"CUDA_VISIBLE_DEVICES\":\"0\"}"), "$.env.CUDA_VISIBLE_DEVICES", "reserved"},
    {J("\"env\":{\"A\":1}"), "$.env.A", "must be a string, or an object"},
    {J("\"env\":{\"A\":[\"x\"]}"), "$.env.A", "must be a string, or an object"},
    /* env entries as objects: {"value": string, "secret": boolean} */
    {J("\"env\":{\"A\":{\"secret\":true}}"), "$.env.A.value", "is required"},
    {J("\"env\":{\"A\":{\"value\":null,\"secret\":true}}"), "$.env.A.value",
     "a secret's value is never returned"},
    {J("\"env\":{\"A\":{}}"), "$.env.A.value", "is required"},
    {J("\"env\":{\"A\":{\"value\":1,\"secret\":true}}"), "$.env.A.value", "must be a string"},
    {J("\"env\":{\"A\":{\"value\":\"x\",\"secret\":\"yes\"}}"), "$.env.A.secret",
     "must be a boolean"},
    {J("\"env\":{\"A\":{\"value\":\"x\",\"secret\":true,\"mode\":1}}"), "$.env.A.mode",
     "unknown field"},
    {J("\"env\":{\"RANK\":{\"value\":\"x\",\"secret\":true}}"), "$.env.RANK", "reserved"},
    {J("\"env\":{\"TRAINYARD_TOKEN\":{\"value\":\"x\",\"secret\":true}}"),
     "$.env.TRAINYARD_TOKEN", "reserved"},
    /* workers */
    {"{" NAME "," IMG "," CMD "}", "$.workers", "is required"},
    {"{" NAME "," IMG "," CMD ",\"workers\":4}", "$.workers", "must be an object"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{}}", "$.workers.count", "is required"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":0}}", "$.workers.count",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":4097}}", "$.workers.count",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":2.5}}", "$.workers.count",
     "must be an integer"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":4,\"min\":5}}", "$.workers.min",
     "must be between 1 and 4"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":4,\"min\":0}}", "$.workers.min",
     "must be between 1 and 4"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":1,\"max\":3}}", "$.workers.max",
     "unknown field"},
    /* resources */
    {J("\"resources\":[]"), "$.resources", "must be an object"},
    {J("\"resources\":{\"cpu\":2}"), "$.resources.cpu", "must be a string"},
    {J("\"resources\":{\"cpu\":\"two\"}"), "$.resources.cpu", "Kubernetes quantity"},
    {J("\"resources\":{\"cpu\":\"\"}"), "$.resources.cpu", "Kubernetes quantity"},
    {J("\"resources\":{\"cpu\":\"0\"}"), "$.resources.cpu", "greater than 0"},
    {J("\"resources\":{\"cpu\":\"0.000m\"}"), "$.resources.cpu", "greater than 0"},
    {J("\"resources\":{\"memory\":\"-1Gi\"}"), "$.resources.memory", "greater than 0"},
    {J("\"resources\":{\"memory\":\"2GB\"}"), "$.resources.memory", "Kubernetes quantity"},
    {J("\"resources\":{\"memory\":\"1e\"}"), "$.resources.memory", "Kubernetes quantity"},
    {J("\"resources\":{\"memory\":\"1 Gi\"}"), "$.resources.memory", "Kubernetes quantity"},
    {J("\"resources\":{\"disk\":\"1\"}"), "$.resources.disk", "unknown field"},
    {J("\"resources\":{\"gpu\":\"a100\"}"), "$.resources.gpu", "must be an object"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":17}}"), "$.resources.gpu.count",
     "must be between 0 and 16"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":-1}}"), "$.resources.gpu.count",
     "must be between 0 and 16"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\"}}"), "$.resources.gpu.count", "is required"},
    {J("\"resources\":{\"gpu\":{\"count\":1}}"), "$.resources.gpu.type", "is required"},
    {J("\"resources\":{\"gpu\":{\"type\":\"A100\",\"count\":1}}"), "$.resources.gpu.type",
     "DNS label"},
    {J("\"resources\":{\"gpu\":{\"count\":1,\"vendor\":\"x\"}}"), "$.resources.gpu.vendor",
     "unknown field"},
    /* placement */
    {J("\"placement\":\"auto\""), "$.placement", "must be an object"},
    {J("\"placement\":{\"zone\":\"US-EAST-1A\"}"), "$.placement.zone", "\"auto\" or a zone"},
    {J("\"placement\":{\"zone\":\"\"}"), "$.placement.zone", "\"auto\" or a zone"},
    {J("\"placement\":{\"capacity\":\"cheap\"}"), "$.placement.capacity",
     "must be one of \"on-demand\", \"spot\", \"any\""},
    {J("\"placement\":{\"region\":\"x\"}"), "$.placement.region", "unknown field"},
    /* volumes */
    {J("\"volumes\":{}"), "$.volumes", "must be an array"},
    {J("\"volumes\":[5]"), "$.volumes[0]", "must be an object"},
    {J("\"volumes\":[{\"mount\":\"/d\"}]"), "$.volumes[0].claim", "is required"},
    {J("\"volumes\":[{\"claim\":\"Efs\",\"mount\":\"/d\"}]"), "$.volumes[0].claim", "DNS label"},
    {J("\"volumes\":[{\"claim\":\"c\"}]"), "$.volumes[0].mount", "is required"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"data\"}]"), "$.volumes[0].mount",
     "absolute path"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"\"}]"), "$.volumes[0].mount", "absolute path"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/a/../b\"}]"), "$.volumes[0].mount", "\"..\""},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/a/..\"}]"), "$.volumes[0].mount", "\"..\""},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/a\\nb\"}]"), "$.volumes[0].mount", "control"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/d\",\"read_only\":\"yes\"}]"),
     "$.volumes[0].read_only", "must be a boolean"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/d\",\"size\":1}]"), "$.volumes[0].size",
     "unknown field"},
    {J("\"volumes\":[{\"claim\":\"c\",\"mount\":\"/d\"},{\"claim\":\"e\",\"mount\":\"//d/\"}]"),
     "$.volumes[1].mount", "duplicate mount path"},
    /* restart */
    {J("\"restart\":3"), "$.restart", "must be an object"},
    {J("\"restart\":{\"max\":101}"), "$.restart.max", "must be between 0 and 100"},
    {J("\"restart\":{\"max\":-1}"), "$.restart.max", "must be between 0 and 100"},
    {J("\"restart\":{\"backoff_seconds\":3601}"), "$.restart.backoff_seconds",
     "must be between 0 and 3600"},
    {J("\"restart\":{\"delay\":1}"), "$.restart.delay", "unknown field"},
    /* timeouts */
    {J("\"timeout_seconds\":0"), "$.timeout_seconds", "must be between 1 and 31536000"},
    {J("\"timeout_seconds\":31536001"), "$.timeout_seconds", "must be between 1 and 31536000"},
    {J("\"timeout_seconds\":60.0"), "$.timeout_seconds", "must be an integer"},
    {J("\"ttl_seconds_after_finished\":-1"), "$.ttl_seconds_after_finished",
     "must be between 0 and 31536000"},
    {J("\"ttl_seconds_after_finished\":\"1d\""), "$.ttl_seconds_after_finished",
     "must be an integer"},
};

static void test_bad_specs_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        expect_error(bad_cases[i].body, strlen(bad_cases[i].body), bad_cases[i].path,
                     bad_cases[i].fragment);
}

/* Cases whose input is too large to write out: built here. */
static void test_limits_by_size(void **state)
{
    (void)state;
    ty_buf b = {0};
    char path[128];

    /* 65 labels */
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\"labels\":{"), TY_OK);
    for (int i = 0; i < 65; i++)
        assert_int_equal(ty_buf_printf(&b, "%s\"k%d\":\"v\"", i ? "," : "", i), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "}}"), TY_OK);
    expect_error(b.data, b.len, "$.labels", "at most 64");

    /* label name of 64 characters, label value of 64 */
    ty_buf_reset(&b);
    char long64[65];
    memset(long64, 'a', 64);
    long64[64] = '\0';
    assert_int_equal(ty_buf_printf(&b, J("\"labels\":{\"%s\":\"v\"}"), long64), TY_OK);
    snprintf(path, sizeof path, "$.labels.%s", long64);
    expect_error(b.data, b.len, path, "invalid label key");
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_printf(&b, J("\"labels\":{\"k\":\"%s\"}"), long64), TY_OK);
    expect_error(b.data, b.len, "$.labels.k", "invalid label value");

    /* name of 64 characters */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_printf(&b, "{\"name\":\"%s\"," IMG "," CMD "," WRK "}", long64), TY_OK);
    expect_error(b.data, b.len, "$.name", "DNS subdomain");

    /* image of 1025 bytes */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" NAME "," CMD "," WRK ",\"image\":\""), TY_OK);
    for (int i = 0; i < 1025; i++)
        assert_int_equal(ty_buf_puts(&b, "i"), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\"}"), TY_OK);
    expect_error(b.data, b.len, "$.image", "at most 1024 bytes");

    /* 257 command items; an item of 4097 bytes */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" NAME "," IMG "," WRK ",\"command\":["), TY_OK);
    for (int i = 0; i < 257; i++)
        assert_int_equal(ty_buf_printf(&b, "%s\"c\"", i ? "," : ""), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    expect_error(b.data, b.len, "$.command", "at most 256 items");
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" NAME "," IMG "," WRK ",\"command\":[\"x\",\""), TY_OK);
    for (int i = 0; i < 4097; i++)
        assert_int_equal(ty_buf_puts(&b, "c"), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\"]}"), TY_OK);
    expect_error(b.data, b.len, "$.command[1]", "at most 4096 bytes");

    /* 17 volumes */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\"volumes\":["), TY_OK);
    for (int i = 0; i < 17; i++)
        assert_int_equal(
            ty_buf_printf(&b, "%s{\"claim\":\"c\",\"mount\":\"/m%d\"}", i ? "," : "", i), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    expect_error(b.data, b.len, "$.volumes", "at most 16 items");

    /* mount path of 1025 bytes */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\"volumes\":[{\"claim\":\"c\",\"mount\":\""), TY_OK);
    for (int i = 0; i < 1025; i++)
        assert_int_equal(ty_buf_puts(&b, "/"), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\"}]}"), TY_OK);
    expect_error(b.data, b.len, "$.volumes[0].mount", "at most 1024 bytes");

    /* 257 env entries; an env value over 32 KiB */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\"env\":{"), TY_OK);
    for (int i = 0; i < 257; i++)
        assert_int_equal(ty_buf_printf(&b, "%s\"V%d\":\"x\"", i ? "," : "", i), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "}}"), TY_OK);
    expect_error(b.data, b.len, "$.env", "at most 256");
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\"env\":{\"BIG\":\""), TY_OK);
    for (int i = 0; i < 32769; i++)
        assert_int_equal(ty_buf_puts(&b, "x"), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\"}}"), TY_OK);
    expect_error(b.data, b.len, "$.env.BIG", "at most 32768 bytes");

    ty_buf_free(&b);
}

/* Every error of the body is listed, not just the first. */
static void test_every_error_is_reported(void **state)
{
    (void)state;
    static const char body[] =
        "{\"name\":\"Bad\",\"image\":\"\",\"command\":[],\"workers\":{\"count\":0},"
        "\"priority\":1.5,\"labels\":{\"ok\":\"x\",\"-\":\"y\"},\"extra\":1,"
        "\"resources\":{\"cpu\":\"0\",\"memory\":\"lots\"},"
        "\"volumes\":[{\"claim\":\"c\",\"mount\":\"rel\",\"x\":1}]}";
    json_t *list = errors_of(body, strlen(body));
    static const char *const want[][2] = {
        {"$.name", "DNS subdomain"},
        {"$.image", "must not be empty"},
        {"$.command", "must not be empty"},
        {"$.workers.count", "between 1 and 4096"},
        {"$.priority", "integer"},
        {"$.labels.-", "invalid label key"},
        {"$.extra", "unknown field"},
        {"$.resources.cpu", "greater than 0"},
        {"$.resources.memory", "quantity"},
        {"$.volumes[0].mount", "absolute path"},
        {"$.volumes[0].x", "unknown field"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!has_error(list, want[i][0], want[i][1]))
            fail_msg("missing %s: %s in %s", want[i][0], want[i][1],
                     json_dumps(list, JSON_COMPACT));
    assert_int_equal(json_array_size(list), sizeof want / sizeof want[0]);
    json_decref(list);
}

/* Many errors: the list is capped, the count is not. */
static void test_error_list_is_capped(void **state)
{
    (void)state;
    ty_buf b = {0};
    assert_int_equal(ty_buf_puts(&b, "{" REQ), TY_OK);
    for (int i = 0; i < SPEC_MAX_ERRORS + 500; i++)
        assert_int_equal(ty_buf_printf(&b, ",\"u%d\":0", i), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "}"), TY_OK);
    json_t *in = decode_ok(b.data, b.len), *out = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(spec_job(in, "$", &out, &errs), TY_EINVAL);
    assert_int_equal(json_array_size(errs.list), SPEC_MAX_ERRORS);
    assert_int_equal(errs.count, SPEC_MAX_ERRORS + 500);
    spec_errors_free(&errs);
    json_decref(in);
    ty_buf_free(&b);
}

/* The same error at the same path is reported once, however often it is found. */
static void test_repeated_error_is_reported_once(void **state)
{
    (void)state;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    for (int i = 0; i < 336; i++)
        assert_int_equal(spec_errors_add(&errs, "query.label", "must be KEY=VALUE"), TY_OK);
    assert_int_equal(spec_errors_add(&errs, "query.label", "another message"), TY_OK);
    assert_int_equal(spec_errors_add(&errs, "query.state", "must be KEY=VALUE"), TY_OK);
    assert_int_equal(errs.count, 3);
    assert_int_equal(json_array_size(errs.list), 3);
    spec_errors_free(&errs);
}

/* ---- normalization ------------------------------------------------------- */

static const struct good_case {
    const char *body;
    const char *normalized;
} good_cases[] = {
    {"{\"name\":\"a\",\"image\":\"img\",\"command\":[\"x\"],\"workers\":{\"count\":2}}",
     "{\"name\":\"a\",\"labels\":{},\"queue\":\"default\",\"priority\":0,\"image\":\"img\","
     "\"command\":[\"x\"],\"args\":[],\"env\":{},\"workers\":{\"count\":2,\"min\":2},"
     "\"resources\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":null},"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"on-demand\"},\"volumes\":[],"
     "\"restart\":{\"max\":0,\"backoff_seconds\":10},\"timeout_seconds\":null,"
     "\"ttl_seconds_after_finished\":604800}"},
    /* image is optional (the local backend ignores it): absent or null, it is null */
    {"{\"name\":\"a\",\"command\":[\"x\"],\"workers\":{\"count\":1}}",
     "{\"name\":\"a\",\"labels\":{},\"queue\":\"default\",\"priority\":0,\"image\":null,"
     "\"command\":[\"x\"],\"args\":[],\"env\":{},\"workers\":{\"count\":1,\"min\":1},"
     "\"resources\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":null},"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"on-demand\"},\"volumes\":[],"
     "\"restart\":{\"max\":0,\"backoff_seconds\":10},\"timeout_seconds\":null,"
     "\"ttl_seconds_after_finished\":604800}"},
    {"{\"workers\":{\"count\":1},\"image\":null,\"command\":[\"x\"],\"name\":\"a\"}",
     "{\"name\":\"a\",\"labels\":{},\"queue\":\"default\",\"priority\":0,\"image\":null,"
     "\"command\":[\"x\"],\"args\":[],\"env\":{},\"workers\":{\"count\":1,\"min\":1},"
     "\"resources\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":null},"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"on-demand\"},\"volumes\":[],"
     "\"restart\":{\"max\":0,\"backoff_seconds\":10},\"timeout_seconds\":null,"
     "\"ttl_seconds_after_finished\":604800}"},
    /* DESIGN.md's example, keys in another order: labels sorted, defaults added */
    {"{\"ttl_seconds_after_finished\":604800,\"timeout_seconds\":86400,"
     "\"restart\":{\"backoff_seconds\":10,\"max\":3},"
     "\"volumes\":[{\"claim\":\"efs-data\",\"mount\":\"/data\"},"
     "{\"mount\":\"/out\",\"claim\":\"efs-out\"}],"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"spot\"},"
     "\"resources\":{\"cpu\":\"8\",\"memory\":\"32Gi\",\"gpu\":{\"type\":\"a100\",\"count\":1}},"
     "\"workers\":{\"count\":4,\"min\":2},\"env\":{\"LR\":\"0.05\"},"
     "\"args\":[\"--epochs\",\"5\"],\"command\":[\"trainyard-worker\",\"train\"],"
     "\"image\":\"registry.example/trainyard-worker:1.0\",\"priority\":100,\"queue\":\"default\","
     "\"labels\":{\"team\":\"vision\",\"sweep\":\"lr-grid\"},\"name\":\"fmnist-lr-0.05\"}",
     "{\"name\":\"fmnist-lr-0.05\",\"labels\":{\"sweep\":\"lr-grid\",\"team\":\"vision\"},"
     "\"queue\":\"default\",\"priority\":100,\"image\":\"registry.example/trainyard-worker:1.0\","
     "\"command\":[\"trainyard-worker\",\"train\"],\"args\":[\"--epochs\",\"5\"],"
     "\"env\":{\"LR\":\"0.05\"},\"workers\":{\"count\":4,\"min\":2},"
     "\"resources\":{\"cpu\":\"8\",\"memory\":\"32Gi\",\"gpu\":{\"type\":\"a100\",\"count\":1}},"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"spot\"},"
     "\"volumes\":[{\"claim\":\"efs-data\",\"mount\":\"/data\",\"read_only\":false},"
     "{\"claim\":\"efs-out\",\"mount\":\"/out\",\"read_only\":false}],"
     "\"restart\":{\"max\":3,\"backoff_seconds\":10},\"timeout_seconds\":86400,"
     "\"ttl_seconds_after_finished\":604800}"},
    /* null means default everywhere it is optional; gpu count 0 means none */
    {"{\"name\":\"b\",\"labels\":null,\"queue\":null,\"priority\":null,\"image\":\"i\","
     "\"command\":[\"c\"],\"args\":null,\"env\":null,\"workers\":{\"count\":3,\"min\":null},"
     "\"resources\":{\"cpu\":null,\"memory\":null,\"gpu\":{\"type\":\"h100\",\"count\":0}},"
     "\"placement\":{\"zone\":null,\"capacity\":null},\"volumes\":null,"
     "\"restart\":{\"max\":null,\"backoff_seconds\":null},\"timeout_seconds\":null,"
     "\"ttl_seconds_after_finished\":null}",
     "{\"name\":\"b\",\"labels\":{},\"queue\":\"default\",\"priority\":0,\"image\":\"i\","
     "\"command\":[\"c\"],\"args\":[],\"env\":{},\"workers\":{\"count\":3,\"min\":3},"
     "\"resources\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":null},"
     "\"placement\":{\"zone\":\"auto\",\"capacity\":\"on-demand\"},\"volumes\":[],"
     "\"restart\":{\"max\":0,\"backoff_seconds\":10},\"timeout_seconds\":null,"
     "\"ttl_seconds_after_finished\":604800}"},
    /* boundaries, Kubernetes label keys, quantities, mount normalization */
    {"{\"name\":\"a-0\",\"labels\":{\"example.com/team\":\"\",\"app.kubernetes.io/name\":"
     "\"A_b.c-9\",\"Z\":\"z\"},\"queue\":\"q1\",\"priority\":-1000000,\"image\":"
     "\"\\u00e9t\\u00e9\","
     "\"command\":[\"x\"],\"args\":[\"\"],\"env\":{\"_a\":\"\",\"TRAINYARDX\":\"1\","
     "\"trainyard_ok\":\"2\"},\"workers\":{\"count\":4096,\"min\":1},"
     "\"resources\":{\"cpu\":\"500m\",\"memory\":\"1.5e3\",\"gpu\":{\"type\":\"a100\","
     "\"count\":16}},\"placement\":{\"zone\":\"us-east-1a\",\"capacity\":\"any\"},"
     "\"volumes\":[{\"claim\":\"c\",\"mount\":\"//data//x/\",\"read_only\":true},"
     "{\"claim\":\"c\",\"mount\":\"/\"},{\"claim\":\"c\",\"mount\":\"/a..b/.x\"}],"
     "\"restart\":{\"max\":100,\"backoff_seconds\":0},\"timeout_seconds\":31536000,"
     "\"ttl_seconds_after_finished\":0}",
     "{\"name\":\"a-0\",\"labels\":{\"Z\":\"z\",\"app.kubernetes.io/name\":\"A_b.c-9\","
     "\"example.com/team\":\"\"},\"queue\":\"q1\",\"priority\":-1000000,"
     "\"image\":\"\xc3\xa9t\xc3\xa9\",\"command\":[\"x\"],\"args\":[\"\"],"
     "\"env\":{\"TRAINYARDX\":\"1\",\"_a\":\"\",\"trainyard_ok\":\"2\"},"
     "\"workers\":{\"count\":4096,\"min\":1},"
     "\"resources\":{\"cpu\":\"500m\",\"memory\":\"1.5e3\",\"gpu\":{\"type\":\"a100\","
     "\"count\":16}},\"placement\":{\"zone\":\"us-east-1a\",\"capacity\":\"any\"},"
     "\"volumes\":[{\"claim\":\"c\",\"mount\":\"/data/x\",\"read_only\":true},"
     "{\"claim\":\"c\",\"mount\":\"/\",\"read_only\":false},"
     "{\"claim\":\"c\",\"mount\":\"/a..b/.x\",\"read_only\":false}],"
     "\"restart\":{\"max\":100,\"backoff_seconds\":0},\"timeout_seconds\":31536000,"
     "\"ttl_seconds_after_finished\":0}"},
};

static void test_good_specs_are_normalized(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++) {
        char *got = normalize(good_cases[i].body);
        if (strcmp(got, good_cases[i].normalized) != 0)
            fail_msg("case %zu\n  want %s\n  got  %s", i, good_cases[i].normalized, got);
        /* Normalizing a normalized spec changes nothing. */
        char *again = normalize(got);
        assert_string_equal(again, got);
        free(again);
        free(got);
    }
}

static void test_quantities(void **state)
{
    (void)state;
    static const char *const ok[] = {"1",   "500m", "1.5", ".5",  "5.",   "+1",    "2Gi",
                                     "1Ki", "3P",   "7k",  "1e3", "1E-2", "12e+6", "0.1"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, J("\"resources\":{\"cpu\":\"%s\"}"), ok[i]);
        free(normalize(body));
    }
    /* 3E bytes of memory is a number; 3E CPUs are more millicores than an int64 holds. */
    free(normalize(J("\"resources\":{\"memory\":\"3E\"}")));
    expect_error(J("\"resources\":{\"cpu\":\"3E\"}"),
                 strlen(J("\"resources\":{\"cpu\":\"3E\"}")), "$.resources.cpu", "too large");
}

/* ---- every numeric field at its extremes ---------------------------------- */

#define I64MAX "9223372036854775807"
#define I64MIN "-9223372036854775808"
#define DIGITS100                                                                                  \
    "1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" \
    "000000000"

static const struct bad_case extreme_bad[] = {
    {J("\"priority\":" I64MAX), "$.priority", "must be between -1000000 and 1000000"},
    {J("\"priority\":" I64MIN), "$.priority", "must be between -1000000 and 1000000"},
    {J("\"priority\":1e308"), "$.priority", "must be an integer"},
    {J("\"priority\":-0.0"), "$.priority", "must be an integer"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":-1}}", "$.workers.count",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":" I64MAX "}}", "$.workers.count",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":" I64MIN "}}", "$.workers.count",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":1e308}}", "$.workers.count",
     "must be an integer"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":4096,\"min\":4097}}", "$.workers.min",
     "must be between 1 and 4096"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":2,\"min\":" I64MAX "}}", "$.workers.min",
     "must be between 1 and 2"},
    {"{" NAME "," IMG "," CMD ",\"workers\":{\"count\":2,\"min\":" I64MIN "}}", "$.workers.min",
     "must be between 1 and 2"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":" I64MAX "}}"),
     "$.resources.gpu.count", "must be between 0 and 16"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":" I64MIN "}}"),
     "$.resources.gpu.count", "must be between 0 and 16"},
    {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":1e308}}"), "$.resources.gpu.count",
     "must be an integer"},
    {J("\"restart\":{\"max\":" I64MAX "}"), "$.restart.max", "must be between 0 and 100"},
    {J("\"restart\":{\"max\":" I64MIN "}"), "$.restart.max", "must be between 0 and 100"},
    {J("\"restart\":{\"backoff_seconds\":-1}"), "$.restart.backoff_seconds",
     "must be between 0 and 3600"},
    {J("\"restart\":{\"backoff_seconds\":" I64MAX "}"), "$.restart.backoff_seconds",
     "must be between 0 and 3600"},
    {J("\"timeout_seconds\":-1"), "$.timeout_seconds", "must be between 1 and 31536000"},
    {J("\"timeout_seconds\":" I64MAX), "$.timeout_seconds", "must be between 1 and 31536000"},
    {J("\"timeout_seconds\":" I64MIN), "$.timeout_seconds", "must be between 1 and 31536000"},
    {J("\"timeout_seconds\":1e308"), "$.timeout_seconds", "must be an integer"},
    {J("\"ttl_seconds_after_finished\":31536001"), "$.ttl_seconds_after_finished",
     "must be between 0 and 31536000"},
    {J("\"ttl_seconds_after_finished\":" I64MAX), "$.ttl_seconds_after_finished",
     "must be between 0 and 31536000"},
    {J("\"ttl_seconds_after_finished\":" I64MIN), "$.ttl_seconds_after_finished",
     "must be between 0 and 31536000"},
    /* cpu: positive, and at most 2^63 - 1 millicores */
    {J("\"resources\":{\"cpu\":\"1e308\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"9e308\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"1e99999999999999999999\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"64Ei\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"9223372036854776\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"" I64MAX "\"}"), "$.resources.cpu", "too large"},
    {J("\"resources\":{\"cpu\":\"" DIGITS100 "\"}"), "$.resources.cpu", "Kubernetes quantity"},
    {J("\"resources\":{\"cpu\":\"1e-400\"}"), "$.resources.cpu", "greater than 0"},
    {J("\"resources\":{\"cpu\":\"-1e400\"}"), "$.resources.cpu", "greater than 0"},
    {J("\"resources\":{\"cpu\":\"-0\"}"), "$.resources.cpu", "greater than 0"},
    /* memory: at least one byte, below 2^63 */
    {J("\"resources\":{\"memory\":\"64Ei\"}"), "$.resources.memory", "too large"},
    {J("\"resources\":{\"memory\":\"8Ei\"}"), "$.resources.memory", "too large"},
    {J("\"resources\":{\"memory\":\"9223372036854775808\"}"), "$.resources.memory",
     "too large"},
    {J("\"resources\":{\"memory\":\"1e308\"}"), "$.resources.memory", "too large"},
    {J("\"resources\":{\"memory\":\"1e19\"}"), "$.resources.memory", "too large"},
    {J("\"resources\":{\"memory\":\"0.5\"}"), "$.resources.memory", "at least 1 byte"},
    {J("\"resources\":{\"memory\":\"500m\"}"), "$.resources.memory", "at least 1 byte"},
    {J("\"resources\":{\"memory\":\"0.000001\"}"), "$.resources.memory", "at least 1 byte"},
    {J("\"resources\":{\"memory\":\"1e-400\"}"), "$.resources.memory", "greater than 0"},
    {J("\"resources\":{\"memory\":\"-64Ei\"}"), "$.resources.memory", "greater than 0"},
};

/* The largest values each field takes, and the smallest. */
static const char *const extreme_good[] = {
    J("\"priority\":1000000"),
    J("\"priority\":-1000000"),
    "{" NAME "," IMG "," CMD ",\"workers\":{\"count\":4096,\"min\":4096}}",
    "{" NAME "," IMG "," CMD ",\"workers\":{\"count\":1,\"min\":1}}",
    J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":16}}"),
    J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":0}}"),
    J("\"restart\":{\"max\":100,\"backoff_seconds\":3600}"),
    J("\"restart\":{\"max\":0,\"backoff_seconds\":0}"),
    J("\"timeout_seconds\":1"),
    J("\"timeout_seconds\":31536000"),
    J("\"ttl_seconds_after_finished\":0"),
    J("\"ttl_seconds_after_finished\":31536000"),
    J("\"resources\":{\"cpu\":\"9223372036854775\"}"),
    J("\"resources\":{\"cpu\":\"0.000001\"}"), /* rounded up to 1m, as Kubernetes does */
    J("\"resources\":{\"cpu\":\"1m\"}"),
    J("\"resources\":{\"memory\":\"1\"}"),
    J("\"resources\":{\"memory\":\"7.99Ei\"}"),
    J("\"resources\":{\"memory\":\"9223372036854774784\"}"),
};

static void test_numeric_extremes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof extreme_bad / sizeof extreme_bad[0]; i++)
        expect_error(extreme_bad[i].body, strlen(extreme_bad[i].body), extreme_bad[i].path,
                     extreme_bad[i].fragment);
    for (size_t i = 0; i < sizeof extreme_good / sizeof extreme_good[0]; i++)
        free(normalize(extreme_good[i]));
}

/* ---- limits: what the backend could ever give one rank ------------------- */

/* Validates body with opts: the errors (new), or NULL when it is valid. */
static json_t *errors_with(const char *body, const spec_opts *opts, int batch)
{
    json_t *in = decode_ok(body, strlen(body)), *out = NULL, *list = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    ty_err e = batch ? spec_batch_opts(in, 1000, opts, &out, &errs)
                     : spec_job_opts(in, "$", opts, &out, &errs);
    if (e == TY_EINVAL) {
        assert_null(out);
        list = json_incref(errs.list);
    } else {
        assert_int_equal(e, TY_OK);
        assert_non_null(out);
    }
    json_decref(out);
    json_decref(in);
    spec_errors_free(&errs);
    return list;
}

static void expect_with(const char *body, const spec_opts *opts, int batch, const char *path,
                        const char *message)
{
    json_t *list = errors_with(body, opts, batch);
    if (!path) {
        if (list)
            fail_msg("%s: want valid, got %s", body, json_dumps(list, JSON_COMPACT));
        return;
    }
    if (!list || !has_error(list, path, message))
        fail_msg("%s\n  want %s: %s\n  got %s", body, path, message,
                 list ? json_dumps(list, JSON_COMPACT) : "valid");
    json_decref(list);
}

/* A secret env entry: normalized as {"value", "secret": true}, its value moved out before
 * the spec is stored; plain objects become strings; a webhook's template refuses secrets. */
static void test_secret_env(void **state)
{
    (void)state;
    char *text = normalize(J("\"env\":{\"Z\":\"plain\",\"KEY\":{\"value\":\"s3cr3t\","
                             "\"secret\":true},\"P\":{\"value\":\"p\",\"secret\":false},"
                             "\"Q\":{\"value\":\"q\"}}"));
    assert_non_null(strstr(text, "\"env\":{\"KEY\":{\"value\":\"s3cr3t\",\"secret\":true},"
                                 "\"P\":\"p\",\"Q\":\"q\",\"Z\":\"plain\"}"));
    json_t *spec = json_loads(text, 0, NULL), *taken = NULL;
    free(text);
    assert_non_null(spec);
    assert_int_equal(spec_secrets_take(spec, &taken), TY_OK);
    assert_non_null(taken);
    assert_int_equal(json_object_size(taken), 1);
    assert_string_equal(json_string_value(json_object_get(taken, "KEY")), "s3cr3t");
    text = json_dumps(spec, JSON_COMPACT);
    assert_null(strstr(text, "s3cr3t"));
    assert_non_null(strstr(text, "\"KEY\":{\"value\":null,\"secret\":true}"));
    /* What the API returns cannot be submitted again as it is: the value is asked for. */
    json_t *list = errors_with(text, NULL, 0);
    assert_non_null(list);
    assert_true(has_error(list, "$.env.KEY.value", "give it again") ||
                has_error(list, "$.env.KEY.value", "secret values again"));
    json_decref(list);
    free(text);
    json_decref(taken);
    json_decref(spec);

    /* No secret: nothing taken, the spec unchanged. */
    text = normalize(J("\"env\":{\"A\":\"1\"}"));
    spec = json_loads(text, 0, NULL);
    taken = (json_t *)1;
    assert_int_equal(spec_secrets_take(spec, &taken), TY_OK);
    assert_null(taken);
    char *again = json_dumps(spec, JSON_COMPACT);
    assert_string_equal(again, text);
    free(again);
    free(text);
    json_decref(spec);

    /* In a batch, errors by path. */
    expect_with("{\"jobs\":[" J("\"env\":{\"A\":{\"value\":\"x\",\"secret\":1}}") "]}", NULL,
                1, "$.jobs[0].env.A.secret", "must be a boolean");
    /* Refused where the spec is stored as written. */
    spec_opts hook = {.no_secrets = "cannot hold a secret value"};
    expect_with(J("\"env\":{\"A\":{\"value\":\"x\",\"secret\":true}}"), &hook, 0,
                "$.env.A.secret", "cannot hold a secret value");
    expect_with(J("\"env\":{\"A\":{\"value\":\"x\",\"secret\":false}}"), &hook, 0, NULL,
                NULL);
}

static void test_backend_limits(void **state)
{
    (void)state;
    static const spec_rank_limit types[] = {
        {.gpu_type = "a100", .gpus = 8},
        {.gpu_type = "h100", .gpus = 8, .cpu_millis = 96000, .memory_bytes = (int64_t)1 << 40},
    };
    static const spec_limits machine = {
        .where = "this machine",
        .any = {.cpu_millis = 2000, .memory_bytes = (int64_t)8 << 30},
        .types = types,
        .ntypes = 2,
    };
    spec_opts o = {.limits = &machine};
    static const struct {
        const char *body, *path, *message; /* path NULL: valid */
    } cases[] = {
        {J("\"resources\":{\"cpu\":\"64\"}"), "$.resources.cpu",
         "64 CPUs requested per rank, this machine has 2"},
        {J("\"resources\":{\"cpu\":\"2001m\"}"), "$.resources.cpu",
         "2.001 CPUs requested per rank, this machine has 2"},
        {J("\"resources\":{\"cpu\":\"2\"}"), NULL, NULL},
        {J("\"resources\":{\"cpu\":\"2000m\"}"), NULL, NULL},
        {J("\"resources\":{\"cpu\":\"1e308\"}"), "$.resources.cpu", "too large"},
        {J("\"resources\":{\"memory\":\"64Ei\"}"), "$.resources.memory", "too large"},
        {J("\"resources\":{\"memory\":\"9Gi\"}"), "$.resources.memory",
         "9Gi of memory requested per rank, this machine has 8Gi"},
        {J("\"resources\":{\"memory\":\"8589934593\"}"), "$.resources.memory",
         "this machine has 8Gi"},
        {J("\"resources\":{\"memory\":\"8Gi\"}"), NULL, NULL},
        /* a100: GPUs per node known, CPU and memory not (its nodes are not the machine's) */
        {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":16}}"),
         "$.resources.gpu.count",
         "16 GPUs of type a100 requested per rank, the largest a100 node has 8"},
        {J("\"resources\":{\"gpu\":{\"type\":\"a100\",\"count\":8}}"), NULL, NULL},
        {J("\"resources\":{\"cpu\":\"4\",\"gpu\":{\"type\":\"a100\",\"count\":8}}"), NULL,
         NULL},
        /* h100: its own node size */
        {J("\"resources\":{\"cpu\":\"96\",\"memory\":\"1Ti\",\"gpu\":{\"type\":\"h100\","
           "\"count\":8}}"),
         NULL, NULL},
        {J("\"resources\":{\"cpu\":\"97\",\"gpu\":{\"type\":\"h100\",\"count\":1}}"),
         "$.resources.cpu", "97 CPUs requested per rank, the largest h100 node has 96"},
        {J("\"resources\":{\"memory\":\"1.5Ti\",\"gpu\":{\"type\":\"h100\",\"count\":1}}"),
         "$.resources.memory", "1.5Ti of memory requested per rank, the largest h100 node has 1Ti"},
        /* a type nobody measured: the machine's numbers */
        {J("\"resources\":{\"gpu\":{\"type\":\"t4\",\"count\":16}}"), NULL, NULL},
        {J("\"resources\":{\"cpu\":\"4\",\"gpu\":{\"type\":\"t4\",\"count\":1}}"),
         "$.resources.cpu", "4 CPUs requested per rank, this machine has 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_with(cases[i].body, &o, 0, cases[i].path, cases[i].message);

    /* The defaults (1 CPU, 2Gi) are measured too. */
    static const spec_limits tiny = {.where = "this machine",
                                     .any = {.cpu_millis = 500, .memory_bytes = 1 << 30}};
    spec_opts t = {.limits = &tiny};
    expect_with("{" REQ "}", &t, 0, "$.resources.cpu",
                "1 CPUs requested per rank, this machine has 0.5");
    expect_with("{" REQ "}", &t, 0, "$.resources.memory",
                "2Gi of memory requested per rank, this machine has 1Gi");
    /* Nothing known, nothing checked. */
    static const spec_limits unknown = {0};
    spec_opts u = {.limits = &unknown};
    expect_with(J("\"resources\":{\"cpu\":\"1000000\",\"memory\":\"1Ei\"}"), &u, 0, NULL,
                NULL);
    /* A batch: each spec at its own path. */
    expect_with("{\"jobs\":[{" REQ "},{" REQ ",\"resources\":{\"cpu\":\"64\"}}]}", &o, 1,
                "$.jobs[1].resources.cpu", "64 CPUs requested per rank, this machine has 2");
}

/* ---- reserved labels ------------------------------------------------------ */

static void test_reserved_labels(void **state)
{
    (void)state;
    static const char *const reserved[] = {"trainyard.io/sweep",  "trainyard.io/sweep-trial",
                                           "trainyard.io/x",      "param.trainyard.io/lr",
                                           "a.b.trainyard.io/c",  "webhook",
                                           "commit"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        char body[256], path[128];
        snprintf(body, sizeof body, J("\"labels\":{\"team\":\"a\",\"%s\":\"x\"}"), reserved[i]);
        snprintf(path, sizeof path, "$.labels[\"%s\"]", reserved[i]);
        expect_error(body, strlen(body), path, "reserved for the server");
        assert_true(spec_is_reserved_label(reserved[i], strlen(reserved[i])));
    }
    static const char *const free_keys[] = {"nottrainyard.io/x", "trainyard.io.example.com/x",
                                            "example.com/webhook", "webhooks", "commit-sha",
                                            "sweep", "trainyard"};
    for (size_t i = 0; i < sizeof free_keys / sizeof free_keys[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, J("\"labels\":{\"%s\":\"x\"}"), free_keys[i]);
        free(normalize(body));
        assert_false(spec_is_reserved_label(free_keys[i], strlen(free_keys[i])));
    }
    /* A webhook's own labels pass when the server says it set them; nothing else does. */
    spec_opts hook = {.server_labels = spec_webhook_labels};
    expect_with(J("\"labels\":{\"webhook\":\"ci\",\"commit\":\"abc\"}"), &hook, 0, NULL, NULL);
    expect_with(J("\"labels\":{\"webhook\":\"ci\",\"trainyard.io/sweep\":\"s\"}"), &hook, 0,
                "$.labels[\"trainyard.io/sweep\"]", "reserved for the server");
    /* In a batch, at the job's path; under another prefix (a sweep's template). */
    expect_with("{\"jobs\":[{" REQ "},{" REQ ",\"labels\":{\"commit\":\"x\"}}]}", NULL, 1,
                "$.jobs[1].labels[\"commit\"]", "reserved for the server");
    json_t *in = decode_ok(J("\"labels\":{\"webhook\":\"x\"}"),
                           strlen(J("\"labels\":{\"webhook\":\"x\"}")));
    json_t *out = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(spec_job(in, "$.template", &out, &errs), TY_EINVAL);
    assert_true(has_error(errs.list, "$.template.labels[\"webhook\"]", "reserved"));
    spec_errors_free(&errs);
    json_decref(in);
}

static void test_server_labels_added(void **state)
{
    (void)state;
    json_t *in = decode_ok(J("\"labels\":{\"team\":\"a\",\"z\":\"b\"}"),
                           strlen(J("\"labels\":{\"team\":\"a\",\"z\":\"b\"}")));
    json_t *spec = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(spec_job(in, "$", &spec, &errs), TY_OK);
    json_t *add = json_pack("{s:s, s:s}", "trainyard.io/sweep", "s1", "team", "server");
    assert_int_equal(spec_add_server_labels(spec, add), TY_OK);
    char *text = json_dumps(json_object_get(spec, "labels"), JSON_COMPACT);
    assert_string_equal(text, "{\"team\":\"server\",\"trainyard.io/sweep\":\"s1\",\"z\":\"b\"}");
    free(text);
    json_decref(add);
    /* Invalid labels, and more than 64, change nothing. */
    add = json_pack("{s:s}", "trainyard.io/x", "bad value");
    assert_int_equal(spec_add_server_labels(spec, add), TY_EINVAL);
    json_decref(add);
    add = json_object();
    for (int i = 0; i < 62; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        json_object_set_new(add, k, json_string("v"));
    }
    assert_int_equal(spec_add_server_labels(spec, add), TY_ETOOLARGE);
    assert_int_equal(json_object_size(json_object_get(spec, "labels")), 3);
    json_object_del(add, "k0");
    assert_int_equal(spec_add_server_labels(spec, add), TY_OK);
    assert_int_equal(json_object_size(json_object_get(spec, "labels")), SPEC_MAX_LABELS);
    json_decref(add);
    json_decref(spec);
    json_decref(in);
    spec_errors_free(&errs);
}

/* ---- batches ------------------------------------------------------------- */

static void expect_batch_error(const char *body, const char *path, const char *fragment)
{
    json_t *in = decode_ok(body, strlen(body)), *out = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(spec_batch(in, 1000, &out, &errs), TY_EINVAL);
    assert_null(out);
    if (!has_error(errs.list, path, fragment))
        fail_msg("%s: want %s %s, got %s", body, path, fragment,
                 json_dumps(errs.list, JSON_COMPACT));
    spec_errors_free(&errs);
    json_decref(in);
}

static void test_batch(void **state)
{
    (void)state;
    expect_batch_error("[]", "$", "must be an object");
    expect_batch_error("{}", "$.jobs", "is required");
    expect_batch_error("{\"jobs\":{}}", "$.jobs", "must be an array");
    expect_batch_error("{\"jobs\":[]}", "$.jobs", "between 1 and 1000");
    expect_batch_error("{\"jobs\":[{" REQ "}],\"x\":1}", "$.x", "unknown field");
    expect_batch_error("{\"jobs\":[{" REQ "},{" NAME ",\"image\":\"\"," CMD "," WRK "}]}",
                       "$.jobs[1].image", "must not be empty");
    expect_batch_error("{\"jobs\":[{" REQ "},3]}", "$.jobs[1]", "must be an object");

    ty_buf b = {0};
    assert_int_equal(ty_buf_puts(&b, "{\"jobs\":["), TY_OK);
    for (int i = 0; i < 1001; i++)
        assert_int_equal(ty_buf_printf(&b, "%s{" REQ "}", i ? "," : ""), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    expect_batch_error(b.data, "$.jobs", "between 1 and 1000");

    /* 1000 is fine, in order */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{\"jobs\":["), TY_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(
            ty_buf_printf(&b, "%s{\"name\":\"j%d\"," IMG "," CMD "," WRK "}", i ? "," : "", i),
            TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    json_t *in = decode_ok(b.data, b.len), *out = NULL;
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(spec_batch(in, 1000, &out, &errs), TY_OK);
    assert_int_equal(json_array_size(out), 1000);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 999), "name")),
                        "j999");
    json_decref(out);
    json_decref(in);
    spec_errors_free(&errs);
    ty_buf_free(&b);
}

/*
 * Defaults are the same in every spec, whichever thread normalized it and
 * whatever happened to the specs normalized before: two threads normalize
 * batches of specs that rely on every default and free them, then the
 * defaults of a fresh spec are checked.
 */
typedef struct batch_run {
    const char *body;
    const char *failure; /* NULL when every round was right */
} batch_run;

static void *normalize_batches(void *arg)
{
    batch_run *run = arg;
    for (int round = 0; round < 20 && !run->failure; round++) {
        json_t *in = json_loads(run->body, 0, NULL), *out = NULL;
        spec_errors errs;
        if (!in || spec_errors_init(&errs) != TY_OK) {
            run->failure = "setup failed";
            json_decref(in);
            break;
        }
        if (spec_batch(in, 1000, &out, &errs) != TY_OK)
            run->failure = "batch refused";
        for (size_t i = 0; !run->failure && i < json_array_size(out); i++) {
            const json_t *spec = json_array_get(out, i);
            const json_t *res = json_object_get(spec, "resources");
            if (strcmp(json_string_value(json_object_get(spec, "queue")), "default") != 0 ||
                strcmp(json_string_value(json_object_get(res, "memory")), "2Gi") != 0 ||
                json_integer_value(json_object_get(spec, "ttl_seconds_after_finished")) !=
                    SPEC_DEFAULT_TTL)
                run->failure = "a default changed";
        }
        json_decref(out);
        json_decref(in);
        spec_errors_free(&errs);
    }
    return NULL;
}

static void test_defaults_survive_concurrent_batches(void **state)
{
    (void)state;
    ty_buf b = {0};
    assert_int_equal(ty_buf_puts(&b, "{\"jobs\":["), TY_OK);
    for (int i = 0; i < 200; i++)
        assert_int_equal(ty_buf_printf(&b, "%s{" REQ "}", i ? "," : ""), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "]}"), TY_OK);
    pthread_t t[2];
    batch_run runs[2] = {{.body = b.data}, {.body = b.data}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, normalize_batches, &runs[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        if (runs[i].failure)
            fail_msg("thread %d: %s", i, runs[i].failure);
    ty_buf_free(&b);
    char *got = normalize("{" REQ "}");
    assert_non_null(strstr(got, "\"queue\":\"default\""));
    assert_non_null(strstr(got, "\"resources\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":null}"));
    assert_non_null(strstr(got, "\"placement\":{\"zone\":\"auto\",\"capacity\":\"on-demand\"}"));
    assert_non_null(strstr(got, "\"restart\":{\"max\":0,\"backoff_seconds\":10}"));
    assert_non_null(strstr(got, "\"ttl_seconds_after_finished\":604800"));
    free(got);
}

/* ---- decoding: hostile input ends as a clean 400 (or 422), never a crash -- */

static void expect_malformed(const char *body, size_t len, const char *fragment)
{
    json_t *j = NULL;
    char msg[256] = "";
    ty_err e = spec_decode(body, len, &j, msg, sizeof msg);
    if (e != TY_EINVAL)
        fail_msg("%.100s: expected TY_EINVAL, got %d", body, e);
    assert_null(j);
    if (!strstr(msg, fragment) || !strstr(msg, "line") || !strstr(msg, "column"))
        fail_msg("%.100s: message \"%s\" lacks \"%s\" or the position", body, msg, fragment);
    /* The message goes into a JSON response: printable ASCII only. */
    for (const char *p = msg; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
}

static void test_malformed_json(void **state)
{
    (void)state;
    expect_malformed("", 0, "");
    expect_malformed("{", 1, "");
    expect_malformed("{\"a\":1}x", 8, "");
    expect_malformed("{\"a\":1,\"a\":2}", 13, "duplicate");
    expect_malformed("{\"a\":01}", 8, "");
    expect_malformed("{\"a\":1e400x}", 12, "");
    expect_malformed("{\"a\":\"\\u0000\"}", 14, "");
    expect_malformed("{\"a\":\"x\0y\"}", 11, "");
    expect_malformed("{\"a\":1}\0", 8, "");
    expect_malformed("{\"a\":\"\xff\xfe\"}", 10, "");
    expect_malformed("{\"a\":\"\xc3\"}", 9, "");
    expect_malformed("{\"a\":\"\xed\xa0\x80\"}", 11, ""); /* a UTF-16 surrogate in UTF-8 */
    expect_malformed("{\"a\":\"\\ud800\"}", 14, "");
}

static void test_nesting_limit(void **state)
{
    (void)state;
    size_t n = 100000;
    char *deep = malloc(2 * n);
    assert_non_null(deep);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    expect_malformed(deep, 2 * n, "nesting deeper than 64");
    /* Only '[' and nothing else. */
    expect_malformed(deep, n, "nesting deeper than 64");

    /* 64 levels decode; 65 do not; brackets inside strings do not count. */
    char buf[256];
    size_t k = 0;
    for (int i = 0; i < 64; i++)
        buf[k++] = '[';
    for (int i = 0; i < 64; i++)
        buf[k++] = ']';
    json_decref(decode_ok(buf, k));
    memmove(buf + 1, buf, k);
    buf[0] = '[';
    buf[k + 1] = ']';
    expect_malformed(buf, k + 2, "nesting deeper than 64");

    char strbody[300];
    int m = snprintf(strbody, sizeof strbody, "{\"a\":\"%.*s\\\"[{\"}", 200,
                     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                     "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{");
    json_t *j = decode_ok(strbody, (size_t)m);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "a"))), 203);
    json_decref(j);
    free(deep);
}

static void test_huge_numbers_become_field_errors(void **state)
{
    (void)state;
    /* Too big for int64 / double: decoded (clamped), then refused by range. */
    static const char *const nums[] = {"1180591620717411303424",
                                       "-1180591620717411303424",
                                       "9223372036854775808",
                                       "-9223372036854775809",
                                       "1e400",
                                       "-1e400",
                                       "123456789e999999999999"};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char body[256];
        int n = snprintf(body, sizeof body, "{" NAME "," IMG "," CMD ",\"workers\":{\"count\":%s}}",
                         nums[i]);
        expect_error(body, (size_t)n, "$.workers.count", "must be");
    }
    /* The limits themselves are ordinary integers. */
    json_t *j = decode_ok("[9223372036854775807,-9223372036854775808,1e308,1e-400]", 55);
    assert_int_equal(json_integer_value(json_array_get(j, 0)), INT64_MAX);
    assert_int_equal(json_integer_value(json_array_get(j, 1)), INT64_MIN);
    json_decref(j);
    /* Clamping keeps positions: the error is still reported at the right column. */
    char msg[256];
    json_t *none = NULL;
    assert_int_equal(spec_decode("[1e400,]", 8, &none, msg, sizeof msg), TY_EINVAL);
    assert_non_null(strstr(msg, "column 8"));
}

static void test_big_strings(void **state)
{
    (void)state;
    size_t n = 900 * 1024;
    ty_buf b = {0};
    assert_int_equal(ty_buf_puts(&b, "{\"name\":\""), TY_OK);
    char *s = malloc(n);
    assert_non_null(s);
    memset(s, 'a', n);
    assert_int_equal(ty_buf_append(&b, s, n), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\"," IMG "," CMD "," WRK "}"), TY_OK);
    expect_error(b.data, b.len, "$.name", "DNS subdomain");

    /* A 900 KiB unknown key: reported with its path, nothing crashes. */
    ty_buf_reset(&b);
    assert_int_equal(ty_buf_puts(&b, "{" REQ ",\""), TY_OK);
    assert_int_equal(ty_buf_append(&b, s, n), TY_OK);
    assert_int_equal(ty_buf_puts(&b, "\":1}"), TY_OK);
    json_t *list = errors_of(b.data, b.len);
    assert_int_equal(json_array_size(list), 1);
    assert_int_equal(strlen(json_string_value(json_object_get(json_array_get(list, 0), "path"))),
                     n + 2);
    json_decref(list);
    free(s);
    ty_buf_free(&b);
}

static void test_syntax_helpers(void **state)
{
    (void)state;
    assert_true(spec_is_dns_label("a", 1));
    assert_true(spec_is_dns_label("a-1", 3));
    assert_false(spec_is_dns_label("a.b", 3));
    assert_true(spec_is_label_key("a.b/c", 5));
    assert_false(spec_is_label_key("/c", 2));
    assert_false(spec_is_label_key("a..b/c", 6));
    assert_true(spec_is_label_value("", 0));
    assert_false(spec_is_label_value("a b", 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_specs_table),
        cmocka_unit_test(test_limits_by_size),
        cmocka_unit_test(test_every_error_is_reported),
        cmocka_unit_test(test_error_list_is_capped),
        cmocka_unit_test(test_repeated_error_is_reported_once),
        cmocka_unit_test(test_good_specs_are_normalized),
        cmocka_unit_test(test_quantities),
        cmocka_unit_test(test_numeric_extremes),
        cmocka_unit_test(test_backend_limits),
        cmocka_unit_test(test_reserved_labels),
        cmocka_unit_test(test_server_labels_added),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_defaults_survive_concurrent_batches),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_huge_numbers_become_field_errors),
        cmocka_unit_test(test_big_strings),
        cmocka_unit_test(test_syntax_helpers),
        cmocka_unit_test(test_secret_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
