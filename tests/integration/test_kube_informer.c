/*
 * test_kube_informer.c - the informer against the fake Kubernetes API server.
 *
 * Usage: test_kube_informer FAKE_BINARY (CTest passes it). The group setup starts
 * fake-kube-apiserver on loopback with a token and the 14-node cluster of
 * tests/fixtures/fake-kube/, and a kubeconfig for it. Each case watches pods of its own label
 * value, writes pods through the API and checks what the consumer sees: the cache and the
 * callbacks, which must form for every object one unbroken chain of states (each event's old
 * state is the previous event's new state), nothing missed and nothing twice.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "scheduler/kube/informer.h"
#include "scheduler/kube/kclient.h"
#include "scheduler/kube/kubeconfig.h"
#include "tests/support/fake_kube_proc.h"

#define NS "inf"
#define PODS "/api/v1/namespaces/" NS "/pods"

static const char *g_binary;
static pid_t g_pid;
static char g_dir[64];
static ty_kubeconfig *g_kc;
static ty_kclient *g_c;
/* The case's informer, freed by the teardown too, so that a failed case leaves none running. */
static ty_informer *g_inf;

/* ---- the API, through the client under test's own transport ------------------------------ */

/* Sends one request; returns the answer's JSON (new), failing the test on another status. */
static json_t *api(const char *method, const char *path, const char *body, long want)
{
    ty_kresp r = {0};
    char err[512] = "";
    json_t *j;
    ty_kclient_request(g_c, method, path, body, &r, err, sizeof(err));
    if (r.code != want)
        fail_msg("%s %s: HTTP %ld, want %ld: %s", method, path, r.code, want, err);
    j = r.body ? json_loads(r.body, 0, NULL) : NULL;
    ty_kresp_clear(&r);
    return j;
}

static void fake(const char *method, const char *path, const char *body)
{
    json_decref(api(method, path, body, 200));
}

static char *rv_dup(const json_t *obj)
{
    const char *rv = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    assert_non_null(rv);
    return strdup(rv);
}

/* Creates pod `name` labelled trainyard.io/job-id=job; returns its resourceVersion (new). */
static char *create_pod(const char *job, const char *name)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\","
             "\"labels\":{\"trainyard.io/job-id\":\"%s\"}},\"spec\":{\"restartPolicy\":"
             "\"Never\",\"containers\":[{\"name\":\"main\",\"image\":\"busybox:1.36\"}]}}",
             name, job);
    json_t *j = api("POST", PODS, body, 201);
    char *rv = rv_dup(j);
    json_decref(j);
    return rv;
}

/* Sets label step=value on a pod; returns the new resourceVersion (new). */
static char *label_pod(const char *name, int value)
{
    char path[256], body[256];
    snprintf(path, sizeof(path), PODS "/%s", name);
    snprintf(body, sizeof(body), "{\"metadata\":{\"labels\":{\"step\":\"%d\"}}}", value);
    json_t *j = api("PATCH", path, body, 200);
    char *rv = rv_dup(j);
    json_decref(j);
    return rv;
}

/* The pod's resourceVersion as the server has it now (new): the fake's scheduler writes too. */
static char *server_rv(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), PODS "/%s", name);
    json_t *j = api("GET", path, NULL, 200);
    char *rv = rv_dup(j);
    json_decref(j);
    return rv;
}

static void delete_pod(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), PODS "/%s?gracePeriodSeconds=0", name);
    json_decref(api("DELETE", path, NULL, 200));
}

/* ---- what the consumer sees --------------------------------------------------------------- */

typedef struct recorder {
    pthread_mutex_t mu;
    json_t *events;               /* [{type, key, old, new}] with old/new resourceVersions */
    int synced_at;                /* events recorded when on_synced came; -1 before */
    ty_informer *inf;             /* set once started: the callback reads the cache through it */
    int inconsistent;             /* the cache disagreed with an event during its callback */
    int whole;                    /* events that carried an object's spec (not transformed) */
} recorder;

static const char *rv_or_null(const json_t *o)
{
    return o ? json_string_value(
                   json_object_get(json_object_get(o, "metadata"), "resourceVersion"))
             : NULL;
}

static const char *uid_of(const json_t *o)
{
    const char *uid = json_string_value(json_object_get(json_object_get(o, "metadata"), "uid"));
    return uid ? uid : "";
}

static void on_event(void *ud, ty_inf_type type, const json_t *old_obj, const json_t *new_obj)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED"};
    recorder *r = ud;
    const json_t *obj = new_obj ? new_obj : old_obj;
    const char *name =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    pthread_mutex_lock(&r->mu);
    ty_informer *inf = r->inf;
    pthread_mutex_unlock(&r->mu);
    if (inf) {
        /* The callback runs outside the cache lock, after the cache took the change (a
         * deleted name may already hold the object created again under it). */
        json_t *cached = ty_informer_get(inf, NS, name);
        if (type == TY_INF_DELETED ? cached && !strcmp(uid_of(cached), uid_of(old_obj))
                                   : !cached || strcmp(rv_or_null(cached), rv_or_null(new_obj)))
            r->inconsistent++;
        json_decref(cached);
    }
    json_t *e = json_pack("{s:s, s:s, s:s?, s:s?}", "type", names[type], "key", name, "old",
                          rv_or_null(old_obj), "new", rv_or_null(new_obj));
    pthread_mutex_lock(&r->mu);
    r->whole += json_object_get(old_obj, "spec") || json_object_get(new_obj, "spec");
    json_array_append_new(r->events, e);
    pthread_mutex_unlock(&r->mu);
}

static void on_synced(void *ud)
{
    recorder *r = ud;
    pthread_mutex_lock(&r->mu);
    r->synced_at = (int)json_array_size(r->events);
    pthread_mutex_unlock(&r->mu);
}

static void recorder_init(recorder *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->events = json_array();
    r->synced_at = -1;
}

static void recorder_fini(recorder *r)
{
    json_decref(r->events);
    pthread_mutex_destroy(&r->mu);
}

/* A copy (new) of the events of one object. */
static json_t *events_of(recorder *r, const char *key)
{
    json_t *out = json_array(), *e;
    size_t i;
    pthread_mutex_lock(&r->mu);
    json_array_foreach(r->events, i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "key")), key))
            json_array_append(out, e);
    }
    pthread_mutex_unlock(&r->mu);
    return out;
}

static const char *ev_str(const json_t *e, const char *field)
{
    return json_string_value(json_object_get(e, field));
}

static unsigned long long rv_num(const char *rv)
{
    return rv ? strtoull(rv, NULL, 10) : 0;
}

/*
 * One object's events form a chain: ADDED first (old none), each MODIFIED's old state is the
 * state the previous event delivered, resourceVersions only grow, and DELETED ends it, unless an
 * object of the same name is ADDED again. Returns the number of events.
 */
static size_t expect_chain(recorder *r, const char *key)
{
    json_t *ev = events_of(r, key), *e;
    size_t i, n = json_array_size(ev);
    const char *prev = NULL;
    int exists = 0;
    json_array_foreach(ev, i, e) {
        const char *type = ev_str(e, "type");
        if (!exists) {
            if (strcmp(type, "ADDED"))
                fail_msg("%s: event %zu is %s, of an object not there", key, i, type);
            assert_null(ev_str(e, "old"));
            if (prev && rv_num(ev_str(e, "new")) <= rv_num(prev))
                fail_msg("%s: event %zu goes back from %s to %s", key, i, prev, ev_str(e, "new"));
            exists = 1;
        } else if (!strcmp(type, "MODIFIED")) {
            if (!ev_str(e, "old") || strcmp(ev_str(e, "old"), prev))
                fail_msg("%s: event %zu changes %s, but the last state was %s", key, i,
                         ev_str(e, "old") ? ev_str(e, "old") : "none", prev);
            if (rv_num(ev_str(e, "new")) <= rv_num(prev))
                fail_msg("%s: event %zu goes back from %s to %s", key, i, prev, ev_str(e, "new"));
        } else if (!strcmp(type, "DELETED")) {
            assert_true(rv_num(ev_str(e, "old")) >= rv_num(prev));
            exists = 0;
        } else {
            fail_msg("%s: event %zu is %s after the object existed", key, i, type);
        }
        prev = ev_str(e, exists ? "new" : "old");
    }
    json_decref(ev);
    return n;
}

/* 1 when one event of key has the given type and new (or, for DELETED, old) version. */
static int count_event(recorder *r, const char *key, const char *type, const char *rv)
{
    json_t *ev = events_of(r, key), *e;
    size_t i;
    int n = 0;
    json_array_foreach(ev, i, e) {
        const char *got = ev_str(e, !strcmp(type, "DELETED") ? "old" : "new");
        if (!strcmp(ev_str(e, "type"), type) && (!rv || (got && !strcmp(got, rv))))
            n++;
    }
    json_decref(ev);
    return n;
}

/* ---- waiting ------------------------------------------------------------------------------ */

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
}

/* 1 when the last event r has of name delivered rv (NULL: deleted it). */
static int last_event_is(recorder *r, const char *name, const char *rv)
{
    json_t *ev = events_of(r, name);
    const json_t *e = json_array_get(ev, json_array_size(ev) - 1);
    int ok = e && (rv ? ev_str(e, "new") && !strcmp(ev_str(e, "new"), rv)
                      : !strcmp(ev_str(e, "type"), "DELETED"));
    json_decref(ev);
    return ok;
}

/*
 * Waits (a generous bound, only to fail rather than hang) until the cache holds name at rv, or,
 * with rv NULL, holds no name, and r has had the callback that told it so.
 */
static void wait_cached(ty_informer *inf, recorder *r, const char *name, const char *rv)
{
    for (int i = 0; i < 1500; i++) {
        json_t *o = ty_informer_get(inf, NS, name);
        int ok = rv ? o && !strcmp(rv_or_null(o), rv) : !o;
        json_decref(o);
        if (ok && last_event_is(r, name, rv))
            return;
        nap();
    }
    fail_msg("the cache never had %s at %s", name, rv ? rv : "(deleted)");
}

static uint64_t stat_watches(ty_informer *inf)
{
    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    return s.watches;
}

static uint64_t stat_restarts(ty_informer *inf)
{
    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    return s.watch_restarts;
}

/* Waits until a watch is open past the ones counted in `watches`. */
static void wait_watching(ty_informer *inf, uint64_t watches)
{
    for (int i = 0; i < 1500 && stat_watches(inf) <= watches; i++)
        nap();
    assert_true(stat_watches(inf) > watches);
}

/* Ends the open watch: drops every watch until the informer has seen one end. */
static void drop_watch(ty_informer *inf)
{
    uint64_t before = stat_restarts(inf);
    for (int i = 0; i < 1500 && stat_restarts(inf) == before; i++) {
        fake("POST", "/fake/watches/drop", NULL);
        nap();
    }
    assert_true(stat_restarts(inf) > before);
}

static ty_informer *start(recorder *r, const char *job, int page_limit)
{
    ty_informer_opts o;
    ty_informer *inf = NULL;
    char path[256], err[512] = "";
    snprintf(path, sizeof(path), PODS "?labelSelector=trainyard.io%%2Fjob-id%%3D%s", job);
    ty_informer_opts_default(&o);
    o.path = path;
    o.page_limit = page_limit;
    o.watch_timeout_s = 60;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 200;
    o.on_event = on_event;
    o.on_synced = on_synced;
    o.ud = r;
    if (ty_informer_start(g_c, &o, &inf, err, sizeof(err)) != TY_OK)
        fail_msg("%s", err);
    g_inf = inf;
    pthread_mutex_lock(&r->mu);
    r->inf = inf;
    pthread_mutex_unlock(&r->mu);
    return inf;
}

static void free_informer(void)
{
    ty_informer_free(g_inf);
    g_inf = NULL;
}

static int teardown(void **state)
{
    (void)state;
    free_informer();
    fake("DELETE", "/fake/faults", NULL);
    return 0;
}

/* ---- cases -------------------------------------------------------------------------------- */

static ty_err count_each(void *ud, const json_t *obj)
{
    (void)obj;
    (*(int *)ud)++;
    return TY_OK;
}

/* The first list (in pages) comes as ADDED, then synced; then changes come as they happen. */
static void test_list_then_watch(void **state)
{
    (void)state;
    static recorder r;
    char *rv[8];
    recorder_init(&r);
    rv[0] = create_pod("j1", "p1");
    rv[1] = create_pod("j1", "p2");
    rv[2] = create_pod("j1", "p3");
    free(create_pod("other", "q1"));     /* not selected */
    ty_informer *inf = start(&r, "j1", 2);
    assert_true(ty_informer_wait_synced(inf, 30000));
    assert_int_equal(r.synced_at, 3);
    assert_int_equal(ty_informer_len(inf), 3);
    int n = 0;
    assert_int_equal(ty_informer_foreach(inf, count_each, &n), TY_OK);
    assert_int_equal(n, 3);
    json_t *q = ty_informer_get(inf, NS, "q1");
    assert_null(q);

    /* The fake's scheduler binds new pods: wait for each object's last write. */
    wait_watching(inf, 0);
    rv[3] = create_pod("j1", "p4");
    rv[4] = label_pod("p1", 1);
    rv[5] = label_pod("p1", 2);
    delete_pod("p2");
    char *p4rv = server_rv("p4");
    wait_cached(inf, &r, "p4", p4rv);
    char *p1rv = server_rv("p1");
    wait_cached(inf, &r, "p1", p1rv);
    wait_cached(inf, &r, "p2", NULL);

    assert_int_equal(count_event(&r, "p4", "ADDED", NULL), 1);
    assert_int_equal(count_event(&r, "p1", "MODIFIED", rv[4]), 1);
    assert_int_equal(count_event(&r, "p1", "MODIFIED", rv[5]), 1);
    assert_int_equal(count_event(&r, "p2", "DELETED", NULL), 1);
    assert_int_equal(count_event(&r, "q1", "ADDED", NULL), 0);
    expect_chain(&r, "p1");
    expect_chain(&r, "p2");
    expect_chain(&r, "p3");
    expect_chain(&r, "p4");
    assert_int_equal(r.inconsistent, 0);
    json_t *got = ty_informer_get(inf, NS, "p1");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(got, "metadata"), "labels"), "step")),
                        "2");
    json_decref(got);

    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    assert_int_equal(s.lists, 1);
    assert_int_equal(s.objects, 3);
    assert_int_equal(s.relist_events, 0);
    assert_true(s.events >= 7);
    free_informer();
    for (int i = 0; i < 6; i++)
        free(rv[i]);
    free(p1rv);
    free(p4rv);
    recorder_fini(&r);
}

/* What test_transform's informer keeps of a pod: its metadata's keys and its step label. */
static json_t *slim_pod(void *ud, const json_t *pod)
{
    (void)ud;
    const json_t *md = json_object_get(pod, "metadata");
    const char *step = json_string_value(json_object_get(json_object_get(md, "labels"), "step"));
    return json_pack("{s:{s:O?, s:O?, s:O?, s:O?}, s:s?}", "metadata", "namespace",
                     json_object_get(md, "namespace"), "name", json_object_get(md, "name"),
                     "uid", json_object_get(md, "uid"), "resourceVersion",
                     json_object_get(md, "resourceVersion"), "step", step);
}

/* With a transform the cache and every callback hold what it made of each object: from the
 * list, from the watch, from a deletion, and after a re-list. */
static void test_transform(void **state)
{
    (void)state;
    static recorder r;
    ty_informer_opts o;
    ty_informer *inf = NULL;
    char path[256], err[512] = "";
    recorder_init(&r);
    free(create_pod("jt", "t1"));
    free(create_pod("jt", "t2"));
    snprintf(path, sizeof(path), PODS "?labelSelector=trainyard.io%%2Fjob-id%%3Djt");
    ty_informer_opts_default(&o);
    o.path = path;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 200;
    o.on_event = on_event;
    o.transform = slim_pod;
    o.ud = &r;
    if (ty_informer_start(g_c, &o, &inf, err, sizeof(err)) != TY_OK)
        fail_msg("%s", err);
    g_inf = inf;
    pthread_mutex_lock(&r.mu);
    r.inf = inf;
    pthread_mutex_unlock(&r.mu);
    assert_true(ty_informer_wait_synced(inf, 30000));
    wait_watching(inf, 0);
    char *rv = label_pod("t1", 7);
    delete_pod("t2");
    char *t1rv = server_rv("t1");
    wait_cached(inf, &r, "t1", t1rv);
    wait_cached(inf, &r, "t2", NULL);
    json_t *t1 = ty_informer_get(inf, NS, "t1");
    assert_null(json_object_get(t1, "spec"));
    assert_string_equal(json_string_value(json_object_get(t1, "step")), "7");
    json_decref(t1);
    /* A re-list compares and keeps the transformed objects too. */
    fake("POST", "/fake/compact", NULL);
    drop_watch(inf);
    free(create_pod("jt", "t3"));
    char *t3rv = server_rv("t3");
    wait_cached(inf, &r, "t3", t3rv);
    ty_informer_stats st;
    ty_informer_stats_get(inf, &st);
    assert_true(st.lists >= 2);
    assert_int_equal(r.whole, 0);
    assert_int_equal(r.inconsistent, 0);
    assert_int_equal(ty_informer_len(inf), 2);
    free_informer();
    free(rv);
    free(t1rv);
    free(t3rv);
    recorder_fini(&r);
}

/* Dropped watches resume from the last resourceVersion: no event missed, none twice. */
static void test_dropped_watches_resume(void **state)
{
    (void)state;
    static recorder r;
    char *rv[4];
    recorder_init(&r);
    free(create_pod("j2", "d1"));
    ty_informer *inf = start(&r, "j2", 0);
    assert_true(ty_informer_wait_synced(inf, 30000));
    for (int i = 0; i < 4; i++) {
        drop_watch(inf);
        rv[i] = label_pod("d1", i);
    }
    wait_cached(inf, &r, "d1", rv[3]);
    for (int i = 0; i < 4; i++) {
        if (count_event(&r, "d1", "MODIFIED", rv[i]) != 1) {
            json_t *ev = events_of(&r, "d1");
            char *text = json_dumps(ev, JSON_COMPACT);
            fprintf(stderr, "the write at %s came %d times: %s\n", rv[i],
                    count_event(&r, "d1", "MODIFIED", rv[i]), text);
            free(text);
            json_decref(ev);
            fail();
        }
        free(rv[i]);
    }
    expect_chain(&r, "d1");
    assert_int_equal(r.inconsistent, 0);
    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    assert_int_equal(s.lists, 1);         /* resumed, never re-listed */
    assert_int_equal(s.expired, 0);
    assert_true(s.watch_restarts >= 4);
    assert_true(s.watches >= 5);
    free_informer();
    recorder_fini(&r);
}

/*
 * While no watch is open (its requests fail), a pod is deleted, one created and one changed, and
 * the server compacts: the next watch is 410 Expired, and the re-list delivers the differences,
 * the deletion among them.
 */
static void test_expired_relists(void **state)
{
    (void)state;
    static recorder r;
    recorder_init(&r);
    free(create_pod("j3", "e-a"));
    free(create_pod("j3", "e-b"));
    free(create_pod("j3", "e-d"));
    ty_informer *inf = start(&r, "j3", 0);
    assert_true(ty_informer_wait_synced(inf, 30000));
    char *a0 = server_rv("e-a"), *b_last = server_rv("e-b"), *d_last = server_rv("e-d");
    wait_cached(inf, &r, "e-a", a0);
    wait_cached(inf, &r, "e-b", b_last);
    wait_cached(inf, &r, "e-d", d_last);
    wait_watching(inf, 0);

    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"" PODS "\",\"count\":1000000,\"status\":500}");
    drop_watch(inf);
    delete_pod("e-b");
    char *c0 = create_pod("j3", "e-c");
    char *a1 = label_pod("e-a", 7);
    delete_pod("e-d");
    free(create_pod("j3", "e-d"));
    fake("POST", "/fake/compact", NULL);
    fake("DELETE", "/fake/faults", NULL);

    wait_cached(inf, &r, "e-b", NULL);
    wait_cached(inf, &r, "e-a", a1);
    char *c_last = server_rv("e-c");
    wait_cached(inf, &r, "e-c", c_last);
    char *d_new = server_rv("e-d");
    wait_cached(inf, &r, "e-d", d_new);

    /* The deletion the watch never saw comes with the last state the cache had. */
    assert_int_equal(count_event(&r, "e-b", "DELETED", b_last), 1);
    assert_int_equal(count_event(&r, "e-c", "ADDED", NULL), 1);
    assert_int_equal(count_event(&r, "e-a", "MODIFIED", a1), 1);
    expect_chain(&r, "e-a");
    expect_chain(&r, "e-b");
    expect_chain(&r, "e-c");
    /* Deleted and created again under its name: two events, not one change. */
    assert_int_equal(count_event(&r, "e-d", "DELETED", d_last), 1);
    assert_int_equal(count_event(&r, "e-d", "ADDED", d_new), 1);
    assert_int_equal(count_event(&r, "e-d", "MODIFIED", d_new), 0);
    expect_chain(&r, "e-d");
    assert_int_equal(r.inconsistent, 0);
    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    assert_true(s.expired >= 1);
    assert_true(s.lists >= 2);
    assert_true(s.relist_events >= 5);
    assert_int_equal(s.objects, 3);
    free_informer();
    free(a0);
    free(a1);
    free(b_last);
    free(c0);
    free(c_last);
    free(d_last);
    free(d_new);
    recorder_fini(&r);
}

/*
 * Bookmarks move the cache's resourceVersion past writes it does not select; a watch the server
 * ends at its timeoutSeconds is followed by the next one, with no re-list.
 */
static void test_bookmarks_and_timeouts(void **state)
{
    (void)state;
    static recorder r;
    char rv[64];
    recorder_init(&r);
    free(create_pod("j6", "b1"));
    ty_informer_opts o;
    ty_informer *inf = NULL;
    char path[256], err[512] = "";
    snprintf(path, sizeof(path), PODS "?labelSelector=trainyard.io%%2Fjob-id%%3Dj6");
    ty_informer_opts_default(&o);
    o.path = path;
    o.watch_timeout_s = 3;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 200;
    o.on_event = on_event;
    o.ud = &r;
    assert_int_equal(ty_informer_start(g_c, &o, &inf, err, sizeof(err)), TY_OK);
    g_inf = inf;
    assert_true(ty_informer_wait_synced(inf, 30000));
    char *other = create_pod("j6-other", "b-other");
    int moved = 0;
    for (int i = 0; i < 1500 && !moved; i++) {
        ty_informer_rv(inf, rv, sizeof(rv));
        moved = rv_num(rv) >= rv_num(other);
        nap();
    }
    assert_true(moved);
    for (int i = 0; i < 1500 && stat_watches(inf) < 3; i++)
        nap();
    char *b1 = label_pod("b1", 1);
    wait_cached(inf, &r, "b1", b1);
    expect_chain(&r, "b1");
    assert_int_equal(count_event(&r, "b-other", "ADDED", NULL), 0);
    ty_informer_stats s;
    ty_informer_stats_get(inf, &s);
    assert_int_equal(s.lists, 1);
    assert_true(s.watches >= 3);
    assert_true(s.watch_restarts >= 2);
    free_informer();
    free(other);
    free(b1);
    recorder_fini(&r);
}

/*
 * Lists answered 429, then 500, more times than the client retries: the informer is not synced,
 * says why, and keeps trying; once the server answers it syncs and the error is gone.
 */
static void test_list_faults_recover(void **state)
{
    (void)state;
    static recorder r;
    char why[512] = "";
    recorder_init(&r);
    free(create_pod("j4", "f1"));
    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"" PODS "\",\"count\":3,\"status\":429,"
         "\"retryAfter\":0}");
    fake("POST", "/fake/faults",
         "{\"method\":\"GET\",\"path\":\"" PODS "\",\"count\":1000000,\"status\":500}");
    ty_informer *inf = start(&r, "j4", 0);
    ty_informer_stats s;
    for (int i = 0; i < 1500; i++) {
        ty_informer_stats_get(inf, &s);
        if (s.list_failures >= 3)
            break;
        nap();
    }
    assert_true(s.list_failures >= 3);
    assert_false(ty_informer_synced(inf));
    ty_informer_last_error(inf, why, sizeof(why));
    if (!strstr(why, "HTTP 500"))
        fail_msg("last error: %s", why);
    fake("DELETE", "/fake/faults", NULL);
    assert_true(ty_informer_wait_synced(inf, 60000));
    assert_int_equal(ty_informer_len(inf), 1);
    assert_int_equal(count_event(&r, "f1", "ADDED", NULL), 1);
    ty_informer_last_error(inf, why, sizeof(why));
    assert_string_equal(why, "");
    ty_informer_stats_get(inf, &s);
    assert_int_equal(s.lists, 1);
    free_informer();
    recorder_fini(&r);
}

/* Stopping while a watch is open returns; no callback comes after it; the cache stays. */
static void test_stop_while_watching(void **state)
{
    (void)state;
    static recorder r;
    recorder_init(&r);
    free(create_pod("j5", "s1"));
    ty_informer *inf = start(&r, "j5", 0);
    assert_true(ty_informer_wait_synced(inf, 30000));
    wait_watching(inf, 0);
    ty_informer_stop(inf);
    ty_informer_stop(inf);              /* idempotent */
    pthread_mutex_lock(&r.mu);
    size_t n = json_array_size(r.events);
    pthread_mutex_unlock(&r.mu);
    free(label_pod("s1", 1));
    free(create_pod("j5", "s2"));
    pthread_mutex_lock(&r.mu);
    assert_int_equal(json_array_size(r.events), n);
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(ty_informer_len(inf), 1);
    free_informer();
    recorder_fini(&r);
}

/* Nodes are cluster-scoped: keyed by name alone. */
static void test_nodes(void **state)
{
    (void)state;
    static recorder r;
    recorder_init(&r);
    ty_informer_opts o;
    ty_informer *inf = NULL;
    char err[512] = "";
    ty_informer_opts_default(&o);
    o.path = "/api/v1/nodes";
    o.page_limit = 5;
    o.on_event = on_event;
    o.ud = &r;
    assert_int_equal(ty_informer_start(g_c, &o, &inf, err, sizeof(err)), TY_OK);
    g_inf = inf;
    assert_true(ty_informer_wait_synced(inf, 30000));
    assert_int_equal(ty_informer_len(inf), 14);
    json_t *n = ty_informer_get(inf, NULL, "usw2c-cpu-od-0");
    assert_non_null(n);
    json_decref(n);
    free_informer();
    recorder_fini(&r);
}

static void test_bad_options(void **state)
{
    (void)state;
    ty_informer_opts o;
    ty_informer *inf = NULL;
    char err[256] = "";
    ty_informer_opts_default(&o);
    assert_int_equal(ty_informer_start(g_c, &o, &inf, err, sizeof(err)), TY_EINVAL);
    o.path = "api/v1/pods";
    assert_int_equal(ty_informer_start(g_c, &o, &inf, err, sizeof(err)), TY_EINVAL);
    assert_null(inf);
    assert_true(err[0] != '\0');
}

/* ---- the server --------------------------------------------------------------------------- */

static int start_server(void **state)
{
    (void)state;
    char path[128], err[512] = "";
    int port;
    const char *const extra[] = {"--window", "100000", NULL};
    if ((g_pid = fk_proc_start(g_binary, "fake-admin-token", FK_NODES, extra, &port)) < 0)
        return -1;
    snprintf(g_dir, sizeof(g_dir), "/tmp/ty-informer-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(path, sizeof(path), "%s/config", g_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "current-context: t\n"
               "contexts: [{name: t, context: {cluster: c, user: u, namespace: " NS "}}]\n"
               "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
               "users:\n- name: u\n  user:\n    token: fake-admin-token\n",
            port);
    fclose(f);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ty_kclient_opts o;
    ty_kclient_opts_default(&o);
    o.qps = 0;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 100;
    o.max_retries = 2;
    o.timeout_ms = 10000;
    if (ty_kubeconfig_load(path, NULL, &g_kc, err, sizeof(err)) != TY_OK ||
        ty_kclient_new(g_kc, &o, &g_c, err, sizeof(err)) != TY_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    json_decref(api("POST", "/api/v1/namespaces",
                    "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" NS
                    "\"}}",
                    201));
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    int st = 0;
    char path[128];
    ty_kclient_free(g_c);
    ty_kubeconfig_free(g_kc);
    snprintf(path, sizeof(path), "%s/config", g_dir);
    unlink(path);
    rmdir(g_dir);
    kill(g_pid, SIGTERM);
    waitpid(g_pid, &st, 0);
    curl_global_cleanup();
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_KUBE_APISERVER\n", argv[0]);
        return 2;
    }
    g_binary = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bad_options, teardown),
        cmocka_unit_test_teardown(test_list_then_watch, teardown),
        cmocka_unit_test_teardown(test_dropped_watches_resume, teardown),
        cmocka_unit_test_teardown(test_expired_relists, teardown),
        cmocka_unit_test_teardown(test_bookmarks_and_timeouts, teardown),
        cmocka_unit_test_teardown(test_list_faults_recover, teardown),
        cmocka_unit_test_teardown(test_stop_while_watching, teardown),
        cmocka_unit_test_teardown(test_nodes, teardown),
        cmocka_unit_test_teardown(test_transform, teardown),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
