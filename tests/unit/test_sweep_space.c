/*
 * test_sweep_space.c - api/sweep_space.c: grid expansion, seeded random draws,
 * placeholder checks with their paths, and substitution into a job template.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "api/sweep_space.h"

/* ---- helpers ------------------------------------------------------------- */

static json_t *js(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (!j)
        fail_msg("bad test JSON %s: %s", text, err.text);
    return j;
}

static sweep_space *parse_ok(const char *body)
{
    json_t *b = js(body);
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    sweep_space *sp = NULL;
    ty_err e = sweep_space_parse(b, &sp, &errs);
    if (e != TY_OK) {
        char *dump = json_dumps(errs.list, 0);
        fail_msg("parse of %s failed (%d): %s", body, e, dump);
    }
    spec_errors_free(&errs);
    json_decref(b);
    return sp;
}

/* The errors of an invalid body, as compact JSON (new string). */
static char *parse_errors(const char *body)
{
    json_t *b = js(body);
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    sweep_space *sp = NULL;
    assert_int_equal(sweep_space_parse(b, &sp, &errs), TY_EINVAL);
    assert_null(sp);
    char *dump = json_dumps(errs.list, JSON_COMPACT);
    spec_errors_free(&errs);
    json_decref(b);
    return dump;
}

/* Trial i of sp as compact JSON with sorted keys (new string). */
static char *trial(const sweep_space *sp, size_t i)
{
    json_t *t = NULL;
    assert_int_equal(sweep_space_trial(sp, i, &t), TY_OK);
    int flags = JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15); /* 0.1, not 0.10..01 */
    char *s = json_dumps(t, flags);
    json_decref(t);
    return s;
}

static void expect_trial(const sweep_space *sp, size_t i, const char *want)
{
    char *got = trial(sp, i);
    assert_string_equal(got, want);
    free(got);
}

/* ---- grid ---------------------------------------------------------------- */

static void grid_every_combination_last_name_fastest(void **state)
{
    (void)state;
    sweep_space *sp = parse_ok("{\"algorithm\":\"grid\",\"parameters\":"
                               "{\"lr\":[0.1,0.01,0.001],\"bs\":[32,64]}}");
    assert_int_equal(sweep_space_ntrials(sp), 6);
    /* names in order: bs, lr; lr varies fastest */
    expect_trial(sp, 0, "{\"bs\":32,\"lr\":0.1}");
    expect_trial(sp, 1, "{\"bs\":32,\"lr\":0.01}");
    expect_trial(sp, 2, "{\"bs\":32,\"lr\":0.001}");
    expect_trial(sp, 3, "{\"bs\":64,\"lr\":0.1}");
    expect_trial(sp, 5, "{\"bs\":64,\"lr\":0.001}");
    json_t *t = NULL;
    assert_int_equal(sweep_space_trial(sp, 6, &t), TY_EINVAL);
    sweep_space_free(sp);
}

static void grid_of_1000_accepted_1001_refused(void **state)
{
    (void)state;
    char body[8192];
    int n = snprintf(body, sizeof body, "{\"algorithm\":\"grid\",\"parameters\":{\"a\":[");
    for (int i = 0; i < 10; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", i ? "," : "", i);
    n += snprintf(body + n, sizeof body - (size_t)n, "],\"b\":[");
    for (int i = 0; i < 100; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", i ? "," : "", i);
    snprintf(body + n, sizeof body - (size_t)n, "]}}");
    sweep_space *sp = parse_ok(body);
    assert_int_equal(sweep_space_ntrials(sp), 1000);
    expect_trial(sp, 999, "{\"a\":9,\"b\":99}");
    sweep_space_free(sp);

    char *e = parse_errors("{\"algorithm\":\"grid\",\"parameters\":{\"a\":[1,2,3,4,5,6,7],"
                           "\"b\":[1,2,3,4,5,6,7,8,9,10,11],\"c\":[1,2,3,4,5,6,7,8,9,10,11,12,"
                           "13]}}"); /* 1001 */
    assert_non_null(strstr(e, "\"path\":\"$.parameters\""));
    assert_non_null(strstr(e, "more than 1000 trials"));
    free(e);
}

static void invalid_bodies_name_their_fields(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        const char *path;
    } cases[] = {
        {"{\"parameters\":{\"a\":[1]}}", "$.algorithm"},
        {"{\"algorithm\":\"bayes\",\"parameters\":{\"a\":[1]}}", "$.algorithm"},
        {"{\"algorithm\":\"grid\"}", "$.parameters"},
        {"{\"algorithm\":\"grid\",\"parameters\":{}}", "$.parameters"},
        {"{\"algorithm\":\"grid\",\"parameters\":{\"a\":[]}}", "$.parameters.a"},
        {"{\"algorithm\":\"grid\",\"parameters\":{\"a\":3}}", "$.parameters.a"},
        {"{\"algorithm\":\"grid\",\"parameters\":{\"a\":[1,{\"x\":1}]}}", "$.parameters.a[1]"},
        {"{\"algorithm\":\"grid\",\"parameters\":{\"a b\":[1]}}", "$.parameters"},
        {"{\"algorithm\":\"grid\",\"parameters\":{\"1a\":[1]}}", "$.parameters"},
        {"{\"algorithm\":\"grid\",\"trials\":3,\"parameters\":{\"a\":[1]}}", "$.trials"},
        {"{\"algorithm\":\"random\",\"parameters\":{\"a\":{\"choice\":[1]}}}", "$.trials"},
        {"{\"algorithm\":\"random\",\"trials\":0,\"parameters\":{\"a\":{\"choice\":[1]}}}",
         "$.trials"},
        {"{\"algorithm\":\"random\",\"trials\":1001,\"parameters\":{\"a\":{\"choice\":[1]}}}",
         "$.trials"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"seed\":-1,\"parameters\":"
         "{\"a\":{\"choice\":[1]}}}",
         "$.seed"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":{\"a\":[1,2]}}", "$.parameters.a"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":{\"a\":{\"normal\":[0,1]}}}",
         "$.parameters.a"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":{\"a\":{\"uniform\":[2,1]}}}",
         "$.parameters.a.uniform"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":"
         "{\"a\":{\"log_uniform\":[0,1]}}}",
         "$.parameters.a.log_uniform"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":{\"a\":{\"int\":[1.5,3]}}}",
         "$.parameters.a.int"},
        {"{\"algorithm\":\"random\",\"trials\":2,\"parameters\":{\"a\":{\"choice\":[]}}}",
         "$.parameters.a.choice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = parse_errors(cases[i].body);
        char want[128];
        snprintf(want, sizeof want, "\"path\":\"%s\"", cases[i].path);
        if (!strstr(e, want))
            fail_msg("%s: want %s in %s", cases[i].body, want, e);
        free(e);
    }
}

/* ---- random -------------------------------------------------------------- */

#define RANDOM_BODY(seed)                                                                          \
    "{\"algorithm\":\"random\",\"trials\":50,\"seed\":" seed ",\"parameters\":"                    \
    "{\"lr\":{\"log_uniform\":[1e-4,1e-1]},\"layers\":{\"choice\":[1,2,3]},"                       \
    "\"drop\":{\"uniform\":[0.1,0.5]},\"width\":{\"int\":[16,19]}}}"

static void same_seed_same_trials_other_seed_others(void **state)
{
    (void)state;
    sweep_space *a = parse_ok(RANDOM_BODY("7"));
    sweep_space *b = parse_ok(RANDOM_BODY("7"));
    sweep_space *c = parse_ok(RANDOM_BODY("8"));
    assert_int_equal(sweep_space_ntrials(a), 50);
    int differ = 0;
    for (size_t i = 0; i < 50; i++) {
        char *ta = trial(a, i), *tb = trial(b, i), *tc = trial(c, i);
        assert_string_equal(ta, tb);
        differ += strcmp(ta, tc) != 0;
        free(ta);
        free(tb);
        free(tc);
    }
    assert_true(differ > 40);
    sweep_space_free(a);
    sweep_space_free(b);
    sweep_space_free(c);
}

static void draws_stay_in_their_ranges_and_cover_choices(void **state)
{
    (void)state;
    sweep_space *sp = parse_ok(RANDOM_BODY("7"));
    int seen_layers[4] = {0}, seen_width[20] = {0};
    for (size_t i = 0; i < 50; i++) {
        json_t *t = NULL;
        assert_int_equal(sweep_space_trial(sp, i, &t), TY_OK);
        double lr = json_real_value(json_object_get(t, "lr"));
        double drop = json_real_value(json_object_get(t, "drop"));
        json_int_t layers = json_integer_value(json_object_get(t, "layers"));
        json_int_t width = json_integer_value(json_object_get(t, "width"));
        assert_true(lr >= 1e-4 && lr <= 1e-1);
        assert_true(drop >= 0.1 && drop < 0.5);
        assert_true(layers >= 1 && layers <= 3);
        assert_true(width >= 16 && width <= 19);
        seen_layers[layers]++;
        seen_width[width]++;
        json_decref(t);
    }
    for (int l = 1; l <= 3; l++)
        assert_true(seen_layers[l] > 0);
    for (int w = 16; w <= 19; w++)
        assert_true(seen_width[w] > 0);
    sweep_space_free(sp);
}

/* The draws are splitmix64's published sequence: seed 0 gives these outputs first. */
static void splitmix64_matches_the_reference(void **state)
{
    (void)state;
    const uint64_t gamma = 0x9E3779B97F4A7C15ULL;
    assert_true(sweep_splitmix64(gamma) == 0xE220A8397B1DCDAFULL);
    assert_true(sweep_splitmix64(2 * gamma) == 0x6E789E6AA1B965F4ULL);
    assert_true(sweep_splitmix64(3 * gamma) == 0x06C45D188009454FULL);
}

/* ---- templates ----------------------------------------------------------- */

static void unknown_placeholders_reported_at_their_paths(void **state)
{
    (void)state;
    sweep_space *sp = parse_ok("{\"algorithm\":\"grid\",\"parameters\":{\"lr\":[0.1]}}");
    json_t *tmpl = js("{\"name\":\"t\",\"args\":[\"--lr\",\"${lr}\",\"--bs=${bs}\",\"${}\"],"
                      "\"env\":{\"OK\":\"${lr}\",\"BAD\":\"x${momentum}y\",\"OPEN\":\"${lr\"}}");
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(sweep_space_check_template(sp, tmpl, &errs), TY_EINVAL);
    char *dump = json_dumps(errs.list, JSON_COMPACT);
    assert_int_equal(errs.count, 3);
    assert_non_null(strstr(dump, "{\"path\":\"$.template.args[2]\",\"message\":\"${bs} names"));
    assert_non_null(strstr(dump, "\"$.template.args[3]\""));
    assert_non_null(strstr(dump, "{\"path\":\"$.template.env.BAD\",\"message\":\"${momentum}"));
    free(dump);
    spec_errors_free(&errs);

    json_t *good = js("{\"args\":[\"${lr}\",\"${lr\"],\"env\":{\"A\":\"${lr}\"}}");
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(sweep_space_check_template(sp, good, &errs), TY_OK);
    assert_int_equal(errs.count, 0);
    spec_errors_free(&errs);
    json_decref(good);
    json_decref(tmpl);
    sweep_space_free(sp);
}

static void substitution_fills_args_and_env_only(void **state)
{
    (void)state;
    json_t *tmpl = js("{\"name\":\"${lr}\",\"command\":[\"${lr}\"],"
                      "\"args\":[\"--lr\",\"${lr}\",\"--bs=${bs}/${bs}\",\"${open\",7],"
                      "\"env\":{\"LR\":\"lr=${lr}\",\"ON\":\"${on}\",\"N\":\"${name}\"}}");
    json_t *params = js("{\"lr\":0.1,\"bs\":32,\"on\":true,\"name\":\"adam\"}");
    json_t *out = NULL;
    assert_int_equal(sweep_substitute(tmpl, params, &out), TY_OK);
    char *s = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"args\":[\"--lr\",\"0.1\",\"--bs=32/32\",\"${open\",7],"
                           "\"command\":[\"${lr}\"],\"env\":{\"LR\":\"lr=0.1\",\"N\":\"adam\","
                           "\"ON\":\"true\"},\"name\":\"${lr}\"}");
    free(s);
    json_decref(out);
    /* the template itself is unchanged */
    assert_string_equal(json_string_value(json_array_get(json_object_get(tmpl, "args"), 1)),
                        "${lr}");

    json_t *missing = js("{\"lr\":0.1}");
    out = NULL;
    assert_int_equal(sweep_substitute(tmpl, missing, &out), TY_EINVAL);
    assert_null(out);
    json_decref(missing);
    json_decref(params);
    json_decref(tmpl);
}

static void values_print_in_their_shortest_exact_form(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        const char *text;
    } cases[] = {
        {"0.1", "0.1"},       {"0.001", "0.001"}, {"1e-4", "0.0001"},
        {"32", "32"},         {"-5", "-5"},       {"2.5e10", "25000000000"},
        {"\"adam\"", "adam"}, {"true", "true"},   {"false", "false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY, NULL);
        char buf[64];
        assert_int_equal(sweep_value_text(v, buf, sizeof buf), TY_OK);
        assert_string_equal(buf, cases[i].text);
        json_decref(v);
    }
    /* a real that needs 17 digits reads back as the same double */
    json_t *v = json_real(1.0 / 3.0);
    char buf[64];
    assert_int_equal(sweep_value_text(v, buf, sizeof buf), TY_OK);
    assert_true(strtod(buf, NULL) == 1.0 / 3.0);
    json_decref(v);
    json_t *arr = json_array();
    assert_int_equal(sweep_value_text(arr, buf, sizeof buf), TY_EINVAL);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_every_combination_last_name_fastest),
        cmocka_unit_test(grid_of_1000_accepted_1001_refused),
        cmocka_unit_test(invalid_bodies_name_their_fields),
        cmocka_unit_test(same_seed_same_trials_other_seed_others),
        cmocka_unit_test(draws_stay_in_their_ranges_and_cover_choices),
        cmocka_unit_test(splitmix64_matches_the_reference),
        cmocka_unit_test(unknown_placeholders_reported_at_their_paths),
        cmocka_unit_test(substitution_fills_args_and_env_only),
        cmocka_unit_test(values_print_in_their_shortest_exact_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
