/*
 * test_sweep_spec.c - api/sweep_spec.c: a sweep body's 422s with their paths,
 * and each trial's job spec (substituted, labelled, normalized).
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
#include "api/sweep_spec.h"

#define TEMPLATE                                                                                   \
    "\"template\":{\"name\":\"trial\",\"command\":[\"trainyard-worker\",\"train\"],"               \
    "\"args\":[\"--lr\",\"${lr}\",\"--batch\",\"${bs}\"],\"workers\":{\"count\":2},"               \
    "\"labels\":{\"team\":\"ml\"}}"
#define GRID_BODY                                                                                  \
    "{\"name\":\"lr-grid\",\"algorithm\":\"grid\",\"parallelism\":4,"                              \
    "\"parameters\":{\"lr\":[0.1,0.01,0.001],\"bs\":[32,64]},"                                     \
    "\"objective\":{\"metric\":\"loss\",\"goal\":\"minimize\"}," TEMPLATE "}"

static json_t *js(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (!j)
        fail_msg("bad test JSON %s: %s", text, err.text);
    return j;
}

static sweep_def *parse_ok(const char *body)
{
    json_t *b = js(body);
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    sweep_def *d = NULL;
    ty_err e = sweep_parse(b, &d, &errs);
    if (e != TY_OK)
        fail_msg("parse failed (%d): %s", e, json_dumps(errs.list, 0));
    spec_errors_free(&errs);
    json_decref(b);
    return d;
}

/* The errors of an invalid body as compact JSON (new), and their count. */
static char *errors_of(const char *body, size_t *count)
{
    json_t *b = js(body);
    spec_errors errs;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    sweep_def *d = NULL;
    assert_int_equal(sweep_parse(b, &d, &errs), TY_EINVAL);
    assert_null(d);
    char *dump = json_dumps(errs.list, JSON_COMPACT);
    if (count)
        *count = errs.count;
    spec_errors_free(&errs);
    json_decref(b);
    return dump;
}

static void expect_error(const char *body, const char *path, const char *words)
{
    char *e = errors_of(body, NULL);
    char want[256];
    snprintf(want, sizeof want, "{\"path\":\"%s\",\"message\":\"", path);
    const char *at = strstr(e, want);
    if (!at || (words && !strstr(at, words)))
        fail_msg("want %s (%s) in %s", path, words ? words : "", e);
    free(e);
}

static void the_issue_example_is_accepted(void **state)
{
    (void)state;
    sweep_def *d = parse_ok(GRID_BODY);
    assert_string_equal(d->name, "lr-grid");
    assert_int_equal(d->parallelism, 4);
    assert_string_equal(d->metric, "loss");
    assert_int_equal(d->maximize, 0);
    assert_int_equal(sweep_space_ntrials(d->space), 6);
    sweep_def_free(d);
}

static void a_trial_is_the_template_substituted_and_labelled(void **state)
{
    (void)state;
    sweep_def *d = parse_ok(GRID_BODY);
    json_t *spec = NULL, *params = NULL;
    const char *id = "0123456789abcdefghjkmnpqrs";
    assert_int_equal(sweep_trial_spec(d, id, 4, &spec, &params), TY_OK);
    /* bs varies slowest (names in order: bs, lr): trial 4 is bs 64, lr 0.01 */
    json_t *args = json_object_get(spec, "args");
    assert_string_equal(json_string_value(json_array_get(args, 1)), "0.01");
    assert_string_equal(json_string_value(json_array_get(args, 3)), "64");
    json_t *labels = json_object_get(spec, "labels");
    assert_string_equal(json_string_value(json_object_get(labels, "team")), "ml");
    assert_string_equal(json_string_value(json_object_get(labels, SWEEP_LABEL)), id);
    assert_string_equal(json_string_value(json_object_get(labels, SWEEP_TRIAL_LABEL)), "4");
    assert_string_equal(json_string_value(json_object_get(labels, "param.trainyard.io/lr")),
                        "0.01");
    assert_string_equal(json_string_value(json_object_get(labels, "param.trainyard.io/bs")), "64");
    /* normalized like any submitted job: defaults are filled in */
    assert_non_null(json_object_get(spec, "priority"));
    assert_int_equal(json_integer_value(json_object_get(params, "bs")), 64);
    json_decref(spec);
    json_decref(params);
    assert_int_equal(sweep_trial_spec(d, id, 6, &spec, NULL), TY_EINVAL);
    sweep_def_free(d);
}

static void values_that_are_no_label_value_get_no_label(void **state)
{
    (void)state;
    sweep_def *d = parse_ok("{\"name\":\"neg\",\"algorithm\":\"grid\",\"parameters\":"
                            "{\"m\":[-0.5],\"_x\":[1]},\"objective\":{\"metric\":\"acc\","
                            "\"goal\":\"maximize\"},\"template\":{\"name\":\"t\",\"command\":"
                            "[\"x\"],\"workers\":{\"count\":1},\"args\":[\"${m}\",\"${_x}\"]}}");
    assert_int_equal(d->maximize, 1);
    assert_int_equal(d->parallelism, 1); /* default: every trial at once */
    json_t *spec = NULL;
    assert_int_equal(sweep_trial_spec(d, "0123456789abcdefghjkmnpqrs", 0, &spec, NULL), TY_OK);
    json_t *labels = json_object_get(spec, "labels");
    assert_null(json_object_get(labels, "param.trainyard.io/m"));
    assert_null(json_object_get(labels, "param.trainyard.io/_x"));
    assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "args"), 0)),
                        "-0.5");
    json_decref(spec);
    sweep_def_free(d);
}

static void invalid_fields_are_422s_at_their_paths(void **state)
{
    (void)state;
#define OBJ "\"objective\":{\"metric\":\"loss\",\"goal\":\"minimize\"}"
#define PAR "\"parameters\":{\"lr\":[0.1]}"
#define TPL "\"template\":{\"name\":\"t\",\"command\":[\"x\"],\"workers\":{\"count\":1}}"
    expect_error("{\"algorithm\":\"grid\"," PAR "," OBJ "," TPL "}", "$.name", NULL);
    expect_error("{\"name\":\"Bad_Name\",\"algorithm\":\"grid\"," PAR "," OBJ "," TPL "}", "$.name",
                 NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\",\"parallelism\":0," PAR "," OBJ "," TPL
                 "}",
                 "$.parallelism", NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," TPL "}", "$.objective", NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR ",\"objective\":{\"metric\":"
                 "\"9x\",\"goal\":\"minimize\"}," TPL "}",
                 "$.objective.metric", NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR ",\"objective\":{\"metric\":"
                 "\"loss\",\"goal\":\"lowest\"}," TPL "}",
                 "$.objective.goal", NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," OBJ "}", "$.template", NULL);
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\",\"extra\":1," PAR "," OBJ "," TPL "}",
                 "$.extra", "unknown field");
    /* a placeholder that names no parameter */
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," OBJ ",\"template\":"
                 "{\"name\":\"t\",\"command\":[\"x\"],\"workers\":{\"count\":1},"
                 "\"args\":[\"--lr\",\"${lr}\",\"--wd\",\"${wd}\"]}}",
                 "$.template.args[3]", "${wd}");
    /* the template's own errors, at the template's paths */
    expect_error("{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," OBJ ",\"template\":"
                 "{\"name\":\"t\",\"command\":[\"x\"],\"workers\":{\"count\":0}}}",
                 "$.template.workers.count", NULL);
}

static void a_value_that_breaks_the_spec_is_refused_once(void **state)
{
    (void)state;
    /* "${v}-${v}" is fine for "ok" but over the 4096 bytes of an argument for a 3000-byte
     * value: the sweep is refused whole, with the template's path, once. */
    char long_value[3001];
    memset(long_value, 'x', 3000);
    long_value[3000] = '\0';
    char body[8192];
    snprintf(body, sizeof body,
             "{\"name\":\"a\",\"algorithm\":\"grid\",\"parameters\":{\"v\":[\"ok\",\"%s\","
             "\"%s\"]}," OBJ ",\"template\":{\"name\":\"t\",\"command\":[\"x\"],"
             "\"workers\":{\"count\":1},\"args\":[\"${v}-${v}\"]}}",
             long_value, long_value + 1);
    size_t count = 0;
    char *e = errors_of(body, &count);
    assert_non_null(strstr(e, "\"path\":\"$.template.args[0]\""));
    assert_int_equal(count, 1);
    free(e);
}

static void grid_too_large_stops_before_building_trials(void **state)
{
    (void)state;
    size_t count = 0;
    char *e = errors_of("{\"name\":\"a\",\"algorithm\":\"grid\",\"parameters\":{\"a\":[1,2,3,4,5,"
                        "6,7],\"b\":[1,2,3,4,5,6,7,8,9,10,11],\"c\":[1,2,3,4,5,6,7,8,9,10,11,"
                        "12,13]}," OBJ "," TPL "}",
                        &count);
    assert_non_null(strstr(e, "more than 1000 trials"));
    assert_int_equal(count, 1);
    free(e);
}

/* A small body must not make the server build gigabytes: both bounds are 422s. */
static void expansion_is_bounded(void **state)
{
    (void)state;
    size_t cap = 64 * 1024;
    char *body = malloc(cap);
    assert_non_null(body);
    /* 40 placeholders of a 1000-byte value: 40,000 bytes in one argument */
    int n = snprintf(body, cap,
                     "{\"name\":\"a\",\"algorithm\":\"grid\",\"parameters\":"
                     "{\"v\":[\"%01000d\"]}," OBJ ",\"template\":{\"name\":\"t\","
                     "\"command\":[\"x\"],\"workers\":{\"count\":1},\"args\":[\"",
                     7);
    for (int i = 0; i < 40; i++)
        n += snprintf(body + n, cap - (size_t)n, "${v}");
    snprintf(body + n, cap - (size_t)n, "\"]}}");
    char *e = errors_of(body, NULL);
    assert_non_null(strstr(e, "{\"path\":\"$.template\",\"message\":\"a substitution"));
    free(e);

    /* 1,000 trials of a 20,000-byte spec: 20 MB of job specs */
    n = snprintf(body, cap, "{\"name\":\"a\",\"algorithm\":\"grid\",\"parameters\":{\"i\":[");
    for (int i = 0; i < 1000; i++)
        n += snprintf(body + n, cap - (size_t)n, "%s%d", i ? "," : "", i);
    n += snprintf(body + n, cap - (size_t)n,
                  "]}," OBJ ",\"template\":{\"name\":\"t\",\"command\":[\"x\"],"
                  "\"workers\":{\"count\":1},\"args\":[\"${i}\"],\"env\":{\"PAD\":\"");
    memset(body + n, 'p', 20000);
    n += 20000;
    snprintf(body + n, cap - (size_t)n, "\"}}}");
    e = errors_of(body, NULL);
    assert_non_null(strstr(e, "{\"path\":\"$.template\",\"message\":\"the trials' job specs"));
    free(e);
    free(body);
}

/* A template may not set the server's labels; its trials get them after validation. */
static void the_servers_labels_are_refused_in_a_template(void **state)
{
    (void)state;
    static const char *const keys[] = {"trainyard.io/sweep", "trainyard.io/sweep-trial",
                                       "param.trainyard.io/lr", "webhook", "commit"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char body[1024], path[128];
        snprintf(body, sizeof body,
                 "{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," OBJ ",\"template\":"
                 "{\"name\":\"t\",\"command\":[\"x\"],\"workers\":{\"count\":1},"
                 "\"labels\":{\"%s\":\"other\"}}}",
                 keys[i]);
        snprintf(path, sizeof path, "$.template.labels[\\\"%s\\\"]", keys[i]);
        expect_error(body, path, "reserved for the server");
    }
    /* 63 labels of its own and 3 of the trial's: over 64, said at the template's labels. */
    char body[4096];
    int n = snprintf(body, sizeof body,
                     "{\"name\":\"a\",\"algorithm\":\"grid\"," PAR "," OBJ ",\"template\":"
                     "{\"name\":\"t\",\"command\":[\"x\"],\"workers\":{\"count\":1},"
                     "\"labels\":{");
    for (int i = 0; i < 63; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(body + n, sizeof body - (size_t)n, "}}}");
    expect_error(body, "$.template.labels", "more than 64 labels");
}

/* Each trial's rank is measured against the backend's limits, as a job's is. */
static void trials_are_measured_against_the_limits(void **state)
{
    (void)state;
    static const spec_limits machine = {.where = "this machine",
                                        .any = {.cpu_millis = 2000, .memory_bytes = 1 << 30}};
    json_t *b = js("{\"name\":\"a\",\"algorithm\":\"grid\",\"parameters\":{\"lr\":[1,2,3]},"
                   OBJ ",\"template\":{\"name\":\"t\",\"command\":[\"x\"],"
                   "\"workers\":{\"count\":1},\"args\":[\"${lr}\"],"
                   "\"resources\":{\"cpu\":\"64\",\"memory\":\"512Mi\"}}}");
    spec_errors errs;
    sweep_def *d = NULL;
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(sweep_parse_limited(b, &machine, &d, &errs), TY_EINVAL);
    assert_null(d);
    /* Every trial fails the same way: said once. */
    assert_int_equal(errs.count, 1);
    const json_t *e0 = json_array_get(errs.list, 0);
    assert_string_equal(json_string_value(json_object_get(e0, "path")), "$.template.resources.cpu");
    assert_string_equal(json_string_value(json_object_get(e0, "message")),
                        "64 CPUs requested per rank, this machine has 2");
    spec_errors_free(&errs);
    /* Without limits (or within them) the same body is a sweep. */
    assert_int_equal(spec_errors_init(&errs), TY_OK);
    assert_int_equal(sweep_parse_limited(b, NULL, &d, &errs), TY_OK);
    sweep_def_free(d);
    spec_errors_free(&errs);
    json_decref(b);
}

#define I64MAX "9223372036854775807"
#define I64MIN "-9223372036854775808"
#define SWEEP(members)                                                                             \
    "{\"name\":\"a\"," members "," OBJ ",\"template\":{\"name\":\"t\",\"command\":[\"x\"],"       \
    "\"workers\":{\"count\":1},\"args\":[\"${p}\"]}}"

/* The sweep's numeric fields at their extremes: refused cleanly, or drawn without overflow. */
static void numeric_fields_at_their_extremes(void **state)
{
    (void)state;
    static const struct {
        const char *body, *path;
    } bad[] = {
        {SWEEP("\"algorithm\":\"grid\",\"parameters\":{\"p\":[1]},\"parallelism\":0"),
         "$.parallelism"},
        {SWEEP("\"algorithm\":\"grid\",\"parameters\":{\"p\":[1]},\"parallelism\":1001"),
         "$.parallelism"},
        {SWEEP("\"algorithm\":\"grid\",\"parameters\":{\"p\":[1]},\"parallelism\":" I64MAX),
         "$.parallelism"},
        {SWEEP("\"algorithm\":\"grid\",\"parameters\":{\"p\":[1]},\"parallelism\":" I64MIN),
         "$.parallelism"},
        {SWEEP("\"algorithm\":\"grid\",\"parameters\":{\"p\":[1]},\"parallelism\":1e308"),
         "$.parallelism"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":0"),
         "$.trials"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":1001"),
         "$.trials"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":"
               I64MAX),
         "$.trials"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":1,"
               "\"seed\":-1"),
         "$.seed"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":1,"
               "\"seed\":" I64MIN),
         "$.seed"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[0,1]}},\"trials\":1,"
               "\"seed\":1e308"),
         "$.seed"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[1,0]}},\"trials\":1"),
         "$.parameters.p.int"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"uniform\":[1,0]}},\"trials\":1"),
         "$.parameters.p.uniform"},
        {SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"log_uniform\":[0,1]}},"
               "\"trials\":1"),
         "$.parameters.p.log_uniform"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(bad[i].body, bad[i].path, NULL);

    /* The largest ranges: every draw is a finite value inside them. */
    static const char *const good[] = {
        SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"int\":[" I64MIN "," I64MAX
              "]}},\"trials\":1000,\"seed\":" I64MAX ",\"parallelism\":1000"),
        SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"uniform\":[-1e308,1e308]}},"
              "\"trials\":1000,\"parallelism\":1"),
        SWEEP("\"algorithm\":\"random\",\"parameters\":{\"p\":{\"log_uniform\":[5e-324,1e308]}},"
              "\"trials\":1000"),
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sweep_def *d = parse_ok(good[i]);
        for (size_t t = 0; t < sweep_space_ntrials(d->space); t++) {
            json_t *spec = NULL, *params = NULL;
            assert_int_equal(sweep_trial_spec(d, "0123456789abcdefghjkmnpqrs", t, &spec, &params),
                             TY_OK);
            const json_t *p = json_object_get(params, "p");
            if (json_is_real(p))
                assert_true(isfinite(json_real_value(p)));
            else
                assert_true(json_is_integer(p));
            json_decref(spec);
            json_decref(params);
        }
        sweep_def_free(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_issue_example_is_accepted),
        cmocka_unit_test(a_trial_is_the_template_substituted_and_labelled),
        cmocka_unit_test(values_that_are_no_label_value_get_no_label),
        cmocka_unit_test(invalid_fields_are_422s_at_their_paths),
        cmocka_unit_test(a_value_that_breaks_the_spec_is_refused_once),
        cmocka_unit_test(grid_too_large_stops_before_building_trials),
        cmocka_unit_test(expansion_is_bounded),
        cmocka_unit_test(the_servers_labels_are_refused_in_a_template),
        cmocka_unit_test(trials_are_measured_against_the_limits),
        cmocka_unit_test(numeric_fields_at_their_extremes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
