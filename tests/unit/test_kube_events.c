/*
 * test_kube_events.c - scheduler/kube/kube_events.c's slim records and the picks the watches
 * parse with: for every Pod and Job a real v1.26 control plane answered with (the recorded
 * transcripts), the slim record made from what the pick parsed is the one made from the whole
 * object, so a field the backend reads can never be missing from what a watch parses.
 */
#include <dirent.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/kube/inventory.h"
#include "scheduler/kube/kpick.h"
#include "scheduler/kube/kube_int.h"

typedef struct seen {
    size_t pods, jobs;
} seen;

/* Compares the slim record of obj made both ways. */
static void check_object(const json_t *obj, seen *n, const char *file)
{
    const char *kind = json_string_value(json_object_get(obj, "kind"));
    int pod = kind && !strcmp(kind, "Pod"), job = kind && !strcmp(kind, "Job");
    if (!pod && !job)
        return;
    json_t *pick = pod ? kb_pod_pick() : kb_job_pick();
    assert_non_null(pick);
    char *text = json_dumps(obj, JSON_COMPACT);
    assert_non_null(text);
    char err[128] = "";
    json_t *picked = ty_kpick_parse(text, strlen(text), pick, err, sizeof err);
    if (!picked)
        fail_msg("%s: the pick refused a %s: %s", file, kind, err);
    json_t *whole = pod ? kb_pod_slim(NULL, obj) : kb_job_slim(NULL, obj);
    json_t *slim = pod ? kb_pod_slim(NULL, picked) : kb_job_slim(NULL, picked);
    assert_non_null(whole);
    assert_non_null(slim);
    if (!json_equal(whole, slim)) {
        char *a = json_dumps(whole, JSON_SORT_KEYS), *b = json_dumps(slim, JSON_SORT_KEYS);
        fail_msg("%s: a %s's slim record differs when made from the pick:\n%s\n%s", file, kind,
                 a, b);
    }
    if (pod) {
        /* The inventory's record too (the bound pods' informer keeps that one). */
        json_t *i1 = kube_inv_pod_slim(obj), *i2 = kube_inv_pod_slim(picked);
        assert_true(json_equal(i1, i2));
        assert_int_equal(kb_pod_rank(obj), kb_pod_rank(slim));
        json_decref(i1);
        json_decref(i2);
        n->pods++;
    } else {
        n->jobs++;
    }
    json_decref(whole);
    json_decref(slim);
    json_decref(picked);
    json_decref(pick);
    free(text);
}

static void walk(const json_t *v, seen *n, const char *file)
{
    const char *key;
    const json_t *item;
    size_t i;
    if (json_is_object(v)) {
        check_object(v, n, file);
        json_object_foreach((json_t *)v, key, item)
            walk(item, n, file);
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, item)
            walk(item, n, file);
    }
}

static void test_picks_keep_what_slim_reads(void **state)
{
    (void)state;
    seen n = {0, 0};
    DIR *d = opendir(TY_TRANSCRIPTS_DIR);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", TY_TRANSCRIPTS_DIR, e->d_name);
        json_t *t = json_load_file(path, 0, NULL);
        if (!t)
            continue;
        walk(t, &n, e->d_name);
        json_decref(t);
    }
    closedir(d);
    /* The transcripts hold pods in every phase and Jobs of every kind: enough to mean it. */
    assert_true(n.pods >= 20);
    assert_true(n.jobs >= 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picks_keep_what_slim_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
