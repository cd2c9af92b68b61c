/*
 * test_store_util.h - helpers shared by the store's unit tests: a scratch
 * directory from mkdtemp() removed at the end, job templates, and a few
 * looks at the store (commits, events, the writer's queue).
 */
#ifndef TEST_STORE_UTIL_H
#define TEST_STORE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "store/store_int.h"

typedef struct tdir {
    char dir[64];
    char db[128];
} tdir;

static inline void tdir_make(tdir *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/ty-store-test-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    int n = snprintf(t->db, sizeof t->db, "%s/trainyard.db", t->dir);
    assert_true(n > 0 && (size_t)n < sizeof t->db);
}

/* Removes the database, its WAL and shared-memory files, and the directory. */
static inline void tdir_remove(tdir *t)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char path[160];
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        int n = snprintf(path, sizeof path, "%s%s", t->db, suffixes[i]);
        if (n > 0 && (size_t)n < sizeof path)
            unlink(path);
    }
    assert_int_equal(rmdir(t->dir), 0);
}

static inline store *open_store(const tdir *t)
{
    store *s = NULL;
    char err[256];
    ty_err e = store_open(t->db, NULL, &s, err, sizeof err);
    if (e != TY_OK)
        fail_msg("store_open: %s (%s)", ty_strerror(e), err);
    return s;
}

/* The usual cmocka fixture: a fresh store in a scratch directory. */
typedef struct store_fixture {
    tdir t;
    store *s;
} store_fixture;

static inline int store_fixture_setup(void **state)
{
    store_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    tdir_make(&f->t);
    f->s = open_store(&f->t);
    *state = f;
    return 0;
}

static inline int store_fixture_teardown(void **state)
{
    store_fixture *f = *state;
    store_close(f->s);
    tdir_remove(&f->t);
    free(f);
    return 0;
}

/* A valid job; name and queue are borrowed. */
static inline store_job_new job_template(const char *name, const char *queue)
{
    store_job_new j = {
        .name = name,
        .queue = queue,
        .priority = 0,
        .spec_json = "{\"name\":\"x\"}",
        .labels = NULL,
        .nlabels = 0,
    };
    return j;
}

/* Submits one job and returns a copy of it (caller frees with store_jobs_free). */
static inline store_job *submit_one(store *s, const char *name, const char *queue)
{
    store_job_new j = job_template(name, queue);
    store_job *out = NULL;
    size_t n = 0;
    int replayed = -1;
    assert_int_equal(store_jobs_submit(s, &j, 1, NULL, NULL, &out, &n, &replayed), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(replayed, 0);
    return out;
}

/* decide() that asks for the state in *(job_state *)ud. */
static inline ty_err decide_to(job_state cur, job_state *to, void *ud)
{
    (void)cur;
    *to = *(job_state *)ud;
    return TY_OK;
}

static inline ty_err move_job(store *s, const char *id, job_state to)
{
    return store_job_transition(s, id, decide_to, &to, "Test", "", NULL);
}

static inline uint64_t commits(store *s)
{
    store_stats st;
    store_get_stats(s, &st);
    return st.commits_total;
}

/* The length of the job's history. */
static inline size_t count_events(store *s, const char *id)
{
    store_event *ev = NULL;
    size_t n = 0;
    assert_int_equal(store_job_events(s, id, &ev, &n), TY_OK);
    store_events_free(ev, n);
    return n;
}

/* Waits (10 s at most) until n operations are queued for the held writer. */
static inline void wait_queued(store *s, size_t n)
{
    struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
    for (int i = 0; i < 10000 && store_test_queued(s) < n; i++)
        nanosleep(&ms, NULL);
    assert_int_equal(store_test_queued(s), n);
}

#endif
