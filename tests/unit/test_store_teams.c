/* Unit tests for store/store_teams.c: teams, their usage, and the team on jobs, tokens and
 * lists. */
#include "tests/unit/test_store_util.h"

/* A job of team (NULL: default) owned by owner, whose spec asks workers ranks of cpu, memory
 * and gpus GPUs of type "a100" (0: none). *id receives its id. */
static void submit_team_job(store *s, const char *team, const char *owner, int workers,
                            const char *cpu, const char *memory, int gpus,
                            char id[STORE_ID_LEN + 1])
{
    char spec[512];
    if (gpus)
        snprintf(spec, sizeof spec,
                 "{\"name\":\"x\",\"workers\":{\"count\":%d},\"resources\":{\"cpu\":\"%s\","
                 "\"memory\":\"%s\",\"gpu\":{\"type\":\"a100\",\"count\":%d}}}",
                 workers, cpu, memory, gpus);
    else
        snprintf(spec, sizeof spec,
                 "{\"name\":\"x\",\"workers\":{\"count\":%d},\"resources\":{\"cpu\":\"%s\","
                 "\"memory\":\"%s\",\"gpu\":null}}",
                 workers, cpu, memory);
    store_job_new j = job_template("job", "default");
    j.spec_json = spec;
    j.team = team;
    j.owner = owner;
    store_job *out = NULL;
    size_t n = 0;
    assert_int_equal(store_jobs_submit(s, &j, 1, NULL, NULL, &out, &n, NULL), TY_OK);
    assert_string_equal(out[0].team, team ? team : STORE_TEAM_DEFAULT);
    if (owner)
        assert_string_equal(out[0].owner, owner);
    else
        assert_null(out[0].owner);
    memcpy(id, out[0].id, STORE_ID_LEN + 1);
    store_jobs_free(out, n);
}

static store_team vision_team(store_team_res *res)
{
    res[0] = (store_team_res){.resource = "gpu/a100", .quota = 16, .borrowing_limit = 8};
    res[1] = (store_team_res){.resource = "cpu", .quota = 512000, .borrowing_limit = -1};
    res[2] = (store_team_res){.resource = "memory", .quota = 4LL << 40, .borrowing_limit = -1};
    return (store_team){.name = "vision", .weight = 2, .has_quota = 1, .res = res, .nres = 3};
}

static int64_t use_of(const store_team_usage *u, const char *res)
{
    for (size_t i = 0; i < u->nuse; i++)
        if (!strcmp(u->use[i].resource, res))
            return u->use[i].amount;
    return 0;
}

static void test_default_team_exists_and_is_unlimited(void **state)
{
    store_fixture *f = *state;
    store_team *t = NULL;
    assert_int_equal(store_team_get(f->s, STORE_TEAM_DEFAULT, &t), TY_OK);
    assert_int_equal(t->has_quota, 0);
    assert_int_equal(t->weight, 1);
    assert_int_equal(t->nres, 0);
    store_teams_free(t, 1);
    const char *why = NULL;
    assert_int_equal(store_team_delete(f->s, STORE_TEAM_DEFAULT, &why), TY_ECONFLICT);
    assert_non_null(why);
}

static void test_create_get_update_list_delete(void **state)
{
    store_fixture *f = *state;
    store_team_res res[3];
    store_team in = vision_team(res);
    assert_int_equal(store_team_create(f->s, &in), TY_OK);
    assert_int_equal(store_team_create(f->s, &in), TY_EEXISTS);

    store_team *t = NULL;
    assert_int_equal(store_team_get(f->s, "vision", &t), TY_OK);
    assert_int_equal(t->weight, 2);
    assert_int_equal(t->has_quota, 1);
    assert_int_equal(t->nres, 3); /* by resource name */
    assert_string_equal(t->res[0].resource, "cpu");
    assert_int_equal(t->res[0].quota, 512000);
    assert_int_equal(t->res[0].borrowing_limit, -1);
    assert_string_equal(t->res[1].resource, "gpu/a100");
    assert_int_equal(t->res[1].quota, 16);
    assert_int_equal(t->res[1].borrowing_limit, 8);
    store_teams_free(t, 1);

    /* A replacement drops what it does not name. */
    store_team_res one = {.resource = "gpu/a100", .quota = 4, .borrowing_limit = -1};
    store_team up = {.name = "vision", .weight = 3, .has_quota = 1, .res = &one, .nres = 1};
    assert_int_equal(store_team_update(f->s, &up), TY_OK);
    assert_int_equal(store_team_get(f->s, "vision", &t), TY_OK);
    assert_int_equal(t->weight, 3);
    assert_int_equal(t->nres, 1);
    assert_int_equal(t->res[0].quota, 4);
    store_teams_free(t, 1);
    up.name = "nobody";
    assert_int_equal(store_team_update(f->s, &up), TY_ENOTFOUND);

    store_team *all = NULL;
    size_t n = 0;
    assert_int_equal(store_teams_list(f->s, &all, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(all[0].name, "default");
    assert_string_equal(all[1].name, "vision");
    store_teams_free(all, n);

    assert_int_equal(store_team_delete(f->s, "vision", NULL), TY_OK);
    assert_int_equal(store_team_get(f->s, "vision", &t), TY_ENOTFOUND);
    assert_int_equal(store_team_delete(f->s, "vision", NULL), TY_ENOTFOUND);
}

static void test_invalid_teams(void **state)
{
    store_fixture *f = *state;
    store_team_res res[2] = {{.resource = "cpu", .quota = 1, .borrowing_limit = -1},
                             {.resource = "cpu", .quota = 2, .borrowing_limit = -1}};
    store_team t = {.name = "t", .weight = 1, .has_quota = 1, .res = res, .nres = 2};
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL); /* named twice */
    t.nres = 1;
    t.weight = 0;
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL);
    t.weight = STORE_TEAM_WEIGHT_MAX + 1;
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL);
    t.weight = 1;
    res[0].quota = -2;
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL);
    res[0].quota = -1; /* neither a quota nor a limit */
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL);
    t.name = "";
    assert_int_equal(store_team_create(f->s, &t), TY_EINVAL);
}

static void test_usage_sums_admitted_jobs(void **state)
{
    store_fixture *f = *state;
    store_team_res res[3];
    store_team in = vision_team(res);
    assert_int_equal(store_team_create(f->s, &in), TY_OK);
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1], c[STORE_ID_LEN + 1], d[STORE_ID_LEN + 1];
    submit_team_job(f->s, "vision", "bob", 4, "500m", "1Gi", 2, a); /* 8 GPUs, 2 cpu, 4Gi */
    submit_team_job(f->s, "vision", "bob", 1, "2", "512Mi", 0, b);  /* 2 cpu, 512Mi */
    submit_team_job(f->s, "vision", NULL, 2, "1", "1Gi", 1, c);     /* stays PENDING */
    submit_team_job(f->s, NULL, "alice", 8, "8", "8Gi", 8, d);      /* another team */

    store_team_usage u = {0};
    assert_int_equal(store_team_usage_get(f->s, "vision", &u), TY_OK);
    assert_int_equal(u.pending, 3);
    assert_int_equal(u.admitted, 0);
    assert_int_equal(u.nuse, 0);
    store_team_usage_clear(&u);

    assert_int_equal(move_job(f->s, a, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, b, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, b, JOB_STARTING), TY_OK);
    assert_int_equal(move_job(f->s, d, JOB_ADMITTED), TY_OK);
    assert_int_equal(store_team_usage_get(f->s, "vision", &u), TY_OK);
    assert_int_equal(u.pending, 1);
    assert_int_equal(u.admitted, 2);
    assert_int_equal(use_of(&u, "gpu/a100"), 8);
    assert_int_equal(use_of(&u, "cpu"), 4000);
    assert_int_equal(use_of(&u, "memory"), (4LL << 30) + (512LL << 20));
    assert_int_equal(u.nuse, 3);
    assert_string_equal(u.use[0].resource, "cpu"); /* by name */
    store_team_usage_clear(&u);

    /* An ended job counts no more. */
    assert_int_equal(move_job(f->s, a, JOB_CANCELLED), TY_OK);
    assert_int_equal(store_team_usage_get(f->s, "vision", &u), TY_OK);
    assert_int_equal(u.admitted, 1);
    assert_int_equal(use_of(&u, "gpu/a100"), 0);
    assert_int_equal(use_of(&u, "cpu"), 2000);
    store_team_usage_clear(&u);

    /* A team without jobs has none; so has an unknown one. */
    assert_int_equal(store_team_usage_get(f->s, "nobody", &u), TY_OK);
    assert_int_equal(u.nuse + (size_t)u.pending + (size_t)u.admitted, 0);
    store_team_usage_clear(&u);
}

static void test_delete_refused_while_in_use(void **state)
{
    store_fixture *f = *state;
    store_team t = {.name = "nlp", .weight = 1};
    assert_int_equal(store_team_create(f->s, &t), TY_OK);
    char id[STORE_ID_LEN + 1];
    submit_team_job(f->s, "nlp", "carol", 1, "1", "1Gi", 0, id);
    const char *why = NULL;
    assert_int_equal(store_team_delete(f->s, "nlp", &why), TY_ECONFLICT);
    assert_non_null(strstr(why, "jobs"));
    assert_int_equal(move_job(f->s, id, JOB_CANCELLED), TY_OK);

    unsigned char h[32] = {1};
    assert_int_equal(store_token_create_team(f->s, "carol", STORE_SCOPE_SUBMIT, "nlp", h), TY_OK);
    assert_int_equal(store_team_delete(f->s, "nlp", &why), TY_ECONFLICT);
    assert_non_null(strstr(why, "token"));
    assert_int_equal(store_token_revoke(f->s, "carol"), TY_OK);
    assert_int_equal(store_team_delete(f->s, "nlp", &why), TY_OK);

    /* Its ended job keeps its team's name. */
    store_job *j = NULL;
    assert_int_equal(store_job_get(f->s, id, &j), TY_OK);
    assert_string_equal(j->team, "nlp");
    assert_string_equal(j->owner, "carol");
    store_jobs_free(j, 1);
}

static void test_tokens_belong_to_a_team(void **state)
{
    store_fixture *f = *state;
    unsigned char h[32] = {2};
    assert_int_equal(store_token_create_team(f->s, "x", STORE_SCOPE_READ, "nope", h),
                     TY_ENOTFOUND);
    store_team t = {.name = "vision", .weight = 1};
    assert_int_equal(store_team_create(f->s, &t), TY_OK);
    assert_int_equal(store_token_create_team(f->s, "bob", STORE_SCOPE_READ, "vision", h), TY_OK);
    h[0] = 3;
    assert_int_equal(store_token_create(f->s, "old", STORE_SCOPE_READ, h), TY_OK);
    store_token *list = NULL;
    size_t n = 0;
    assert_int_equal(store_tokens_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "bob");
    assert_string_equal(list[0].team, "vision");
    assert_string_equal(list[1].team, STORE_TEAM_DEFAULT);
    store_tokens_free(list, n);
}

static void test_team_filter_in_lists_and_gets(void **state)
{
    store_fixture *f = *state;
    char ids[10][STORE_ID_LEN + 1];
    for (int i = 0; i < 10; i++)
        submit_team_job(f->s, i % 3 == 0 ? "nlp" : "vision", "t", 1, "1", "1Gi", 0, ids[i]);
    assert_int_equal(move_job(f->s, ids[3], JOB_ADMITTED), TY_OK); /* nlp */
    assert_int_equal(move_job(f->s, ids[4], JOB_ADMITTED), TY_OK); /* vision */

    store_job_filter flt = {.limit = 2, .team = "nlp"};
    store_job *jobs = NULL;
    size_t n = 0, seen = 0;
    int64_t next = 0;
    do { /* pages of one team only, newest first: 9, 6, 3, 0 */
        assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
        for (size_t i = 0; i < n; i++) {
            assert_string_equal(jobs[i].team, "nlp");
            assert_string_equal(jobs[i].id, ids[9 - 3 * (seen + i)]);
        }
        seen += n;
        store_jobs_free(jobs, n);
        flt.before_seq = next;
    } while (next);
    assert_int_equal(seen, 4);

    /* With a state filter: the two streams meet. */
    store_job_filter st = {.limit = 10, .team = "vision", .state_mask = 1u << JOB_ADMITTED};
    assert_int_equal(store_jobs_list(f->s, &st, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(jobs[0].id, ids[4]);
    store_jobs_free(jobs, n);
    st.team = "nobody";
    assert_int_equal(store_jobs_list(f->s, &st, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, 0);
    store_jobs_free(jobs, n);

    assert_int_equal(store_job_visible(f->s, ids[0], "nlp"), TY_OK);
    assert_int_equal(store_job_visible(f->s, ids[0], NULL), TY_OK);
    assert_int_equal(store_job_visible(f->s, ids[0], "vision"), TY_ENOTFOUND);
    assert_int_equal(store_job_visible(f->s, "00000000000000000000000000", NULL), TY_ENOTFOUND);
    assert_int_equal(store_job_visible(f->s, "short", NULL), TY_ENOTFOUND);
}

/* A sweep of one trial, of team (NULL: default) and owner; its id into id. */
static void create_sweep(store *s, const char *team, const char *owner, char id[STORE_ID_LEN + 1])
{
    assert_int_equal(store_sweep_id_new(id), TY_OK);
    store_job_new trial = job_template("trial", "default");
    trial.team = team;
    trial.owner = owner;
    const char *params[1] = {"{}"};
    store_sweep_new in = {.id = id, .name = "sw", .algorithm = "grid", .parallelism = 1,
                          .metric = "loss", .stop_min_trials = -1, .body_json = "{}",
                          .team = team, .owner = owner, .trials = &trial,
                          .params_json = params, .ntrials = 1};
    assert_int_equal(store_sweep_create(s, &in), TY_OK);
}

static void test_team_filter_in_sweeps(void **state)
{
    store_fixture *f = *state;
    char a[STORE_ID_LEN + 1], b[STORE_ID_LEN + 1], c[STORE_ID_LEN + 1];
    create_sweep(f->s, "nlp", "carol", a);
    create_sweep(f->s, NULL, NULL, b);
    create_sweep(f->s, "nlp", "carol", c);
    store_sweep *sw = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_sweeps_list(f->s, "nlp", 0, 1, &sw, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(sw[0].id, c);
    assert_string_equal(sw[0].team, "nlp");
    assert_string_equal(sw[0].owner, "carol");
    store_sweeps_free(sw, n);
    assert_int_equal(store_sweeps_list(f->s, "nlp", next, 10, &sw, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(sw[0].id, a);
    assert_int_equal(next, 0);
    store_sweeps_free(sw, n);
    assert_int_equal(store_sweeps_list(f->s, NULL, 0, 10, &sw, &n, &next), TY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(sw[1].team, STORE_TEAM_DEFAULT);
    assert_null(sw[1].owner);
    store_sweeps_free(sw, n);
    assert_int_equal(store_sweep_visible(f->s, a, "nlp"), TY_OK);
    assert_int_equal(store_sweep_visible(f->s, a, STORE_TEAM_DEFAULT), TY_ENOTFOUND);
    assert_int_equal(store_sweep_visible(f->s, b, NULL), TY_OK);
    /* The trials belong where their sweep does. */
    store_job_filter flt = {.limit = 10, .team = "nlp"};
    store_job *jobs = NULL;
    assert_int_equal(store_jobs_list(f->s, &flt, &jobs, &n, &next), TY_OK);
    assert_int_equal(n, 2);
    store_jobs_free(jobs, n);
}

static void test_writes_fail_cleanly(void **state)
{
    store_fixture *f = *state;
    store_team t = {.name = "vision", .weight = 1};
    store_fail_writes(f->s, 1, 1, TY_EIO);
    assert_int_equal(store_team_create(f->s, &t), TY_EIO);
    store_team *got = NULL;
    assert_int_equal(store_team_get(f->s, "vision", &got), TY_ENOTFOUND);
    assert_int_equal(store_team_create(f->s, &t), TY_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_default_team_exists_and_is_unlimited,
                                        store_fixture_setup, store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_create_get_update_list_delete, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_teams, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_usage_sums_admitted_jobs, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_delete_refused_while_in_use, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_tokens_belong_to_a_team, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_team_filter_in_lists_and_gets, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_team_filter_in_sweeps, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_writes_fail_cleanly, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
