/*
 * test_api_streams.c - api/streams.c: the places of the followed streams.
 * The caps per token and in total, which cap refuses, the counts of
 * refusals, places given back exactly once (a release repeated, a moved
 * place), the table emptied when the last place goes, places taken and given
 * back from many threads at once, and the 429 of api_need_stream_place().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/api_int.h"
#include "api/streams.h"

static unsigned open_now(api_streams *s)
{
    api_streams_stats st;
    api_streams_get_stats(s, &st);
    return st.open;
}

static void test_limits_are_checked(void **state)
{
    api_streams *s = NULL;
    (void)state;
    assert_int_equal(api_streams_new(0, 1, &s), TY_EINVAL);
    assert_int_equal(api_streams_new(1, 0, &s), TY_EINVAL);
    assert_int_equal(api_streams_new(1, 1, &s), TY_OK);
    api_streams_free(s);
    api_streams_free(NULL);

    api_streams_stats st;
    api_streams_get_stats(NULL, &st);
    assert_int_equal(st.open, 0);
    assert_int_equal(st.total, 0);
}

/* A token gets per_token places; the next is refused by its cap while others still get theirs. */
static void test_per_token_cap(void **state)
{
    api_streams *s = NULL;
    api_stream_place a[4] = {{0}}, b = {0}, extra = {0};
    api_streams_limit which = API_STREAMS_TOTAL;
    (void)state;
    assert_int_equal(api_streams_new(10, 3, &s), TY_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(api_streams_take(s, "alice", &a[i], &which), TY_OK);
    assert_int_equal(api_streams_held(s, "alice"), 3);
    assert_int_equal(api_streams_take(s, "alice", &a[3], &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_PER_TOKEN);
    assert_null(a[3].owner); /* untouched */
    assert_int_equal(api_streams_take(s, "bob", &b, &which), TY_OK);
    assert_int_equal(api_streams_held(s, "bob"), 1);
    assert_int_equal(open_now(s), 4);

    /* One given back: alice may take one again. */
    api_stream_place_release(&a[1]);
    assert_int_equal(api_streams_held(s, "alice"), 2);
    assert_int_equal(api_streams_take(s, "alice", &extra, &which), TY_OK);
    assert_int_equal(api_streams_take(s, "alice", &a[3], &which), TY_EAGAIN);

    api_streams_stats st;
    api_streams_get_stats(s, &st);
    assert_int_equal(st.total, 10);
    assert_int_equal(st.per_token, 3);
    assert_int_equal(st.open, 4);
    assert_int_equal(st.refused[API_STREAMS_PER_TOKEN], 2);
    assert_int_equal(st.refused[API_STREAMS_TOTAL], 0);

    api_stream_place_release(&a[0]);
    api_stream_place_release(&a[2]);
    api_stream_place_release(&extra);
    api_stream_place_release(&b);
    assert_int_equal(open_now(s), 0);
    api_streams_free(s);
}

/* The total holds across tokens; a token at its own cap is told so even when both are reached. */
static void test_total_cap(void **state)
{
    api_streams *s = NULL;
    api_stream_place p[5] = {{0}}, q = {0};
    api_streams_limit which = API_STREAMS_PER_TOKEN;
    static const char *const who[] = {"t1", "t1", "t2", "t2", "t3"};
    (void)state;
    assert_int_equal(api_streams_new(5, 2, &s), TY_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(api_streams_take(s, who[i], &p[i], &which), TY_OK);
    assert_int_equal(api_streams_take(s, "t3", &q, &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_TOTAL);
    assert_int_equal(api_streams_take(s, "t4", &q, &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_TOTAL);
    assert_int_equal(api_streams_take(s, "t1", &q, &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_PER_TOKEN);
    assert_null(q.owner);
    assert_int_equal(api_streams_held(s, "t4"), 0); /* a refusal leaves no entry */

    api_streams_stats st;
    api_streams_get_stats(s, &st);
    assert_int_equal(st.open, 5);
    assert_int_equal(st.refused[API_STREAMS_TOTAL], 2);
    assert_int_equal(st.refused[API_STREAMS_PER_TOKEN], 1);

    /* A place of any token frees room for every token. */
    api_stream_place_release(&p[0]);
    assert_int_equal(api_streams_take(s, "t4", &q, &which), TY_OK);
    api_stream_place_release(&q);
    for (int i = 1; i < 5; i++)
        api_stream_place_release(&p[i]);
    assert_int_equal(open_now(s), 0);
    api_streams_free(s);
}

/* However often a place is released, and whichever copy went through a move, it counts once. */
static void test_released_exactly_once(void **state)
{
    api_streams *s = NULL;
    api_stream_place p = {0}, moved = {0}, other = {0};
    api_streams_limit which;
    (void)state;
    assert_int_equal(api_streams_new(4, 4, &s), TY_OK);
    assert_int_equal(api_streams_take(s, "a", &p, &which), TY_OK);
    assert_int_equal(api_streams_take(s, "a", &other, &which), TY_OK);
    api_stream_place_move(&moved, &p);
    assert_null(p.owner);
    api_stream_place_release(&p); /* the source holds nothing any more */
    assert_int_equal(api_streams_held(s, "a"), 2);
    api_stream_place_release(&moved);
    api_stream_place_release(&moved);
    api_stream_place_release(NULL);
    assert_int_equal(api_streams_held(s, "a"), 1);
    assert_int_equal(open_now(s), 1);
    api_stream_place_release(&other);
    assert_int_equal(api_streams_held(s, "a"), 0);
    assert_int_equal(open_now(s), 0);

    /* The entry went with its last place: the name starts again from nothing. */
    assert_int_equal(api_streams_take(s, "a", &p, &which), TY_OK);
    assert_int_equal(api_streams_held(s, "a"), 1);
    api_stream_place_release(&p);
    api_streams_free(s);
}

/* Names: NULL is "", many names share the table's chains, and each keeps its own count. */
static void test_many_principals(void **state)
{
    enum { N = 1000 };
    static api_stream_place p[N];
    api_streams *s = NULL;
    api_streams_limit which;
    char name[32];
    (void)state;
    memset(p, 0, sizeof p);
    assert_int_equal(api_streams_new(N, 1, &s), TY_OK);
    for (int i = 0; i < N - 1; i++) {
        snprintf(name, sizeof name, "token-%d", i);
        assert_int_equal(api_streams_take(s, name, &p[i], &which), TY_OK);
    }
    assert_int_equal(api_streams_take(s, NULL, &p[N - 1], &which), TY_OK);
    assert_int_equal(api_streams_held(s, ""), 1);
    api_stream_place extra = {0};
    assert_int_equal(api_streams_take(s, "", &extra, &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_PER_TOKEN);
    assert_int_equal(api_streams_take(s, "late", &extra, &which), TY_EAGAIN);
    assert_int_equal(which, API_STREAMS_TOTAL);
    for (int i = 0; i < N - 1; i += 2) {
        snprintf(name, sizeof name, "token-%d", i);
        assert_int_equal(api_streams_held(s, name), 1);
        api_stream_place_release(&p[i]);
        assert_int_equal(api_streams_held(s, name), 0);
    }
    for (int i = 1; i < N; i += 2)
        api_stream_place_release(&p[i]);
    assert_int_equal(open_now(s), 0);
    api_streams_free(s);
}

/* ---- from many threads ------------------------------------------------------------------ */

#define THREADS 8
#define ROUNDS 2000
#define TOTAL 6
#define PER_TOKEN 2

typedef struct worker {
    api_streams *s;
    char name[16];
    int over;                    /* a take succeeded past a cap */
    int taken;
} worker;

static void *work(void *ud)
{
    worker *w = ud;
    api_stream_place held[PER_TOKEN + 1];
    size_t n = 0;
    memset(held, 0, sizeof held);
    for (int r = 0; r < ROUNDS; r++) {
        api_streams_limit which;
        if (n <= PER_TOKEN && (r % 3) != 2) {
            if (api_streams_take(w->s, w->name, &held[n], &which) == TY_OK) {
                n++;
                w->taken++;
                api_streams_stats st;
                api_streams_get_stats(w->s, &st);
                if (n > PER_TOKEN || st.open > TOTAL)
                    w->over = 1;
            }
        } else if (n > 0) {
            api_stream_place_release(&held[--n]);
        }
    }
    while (n > 0)
        api_stream_place_release(&held[--n]);
    return NULL;
}

/* Threads of four tokens (two threads each) take and give back: no cap is ever passed. */
static void test_concurrent_takes_hold_the_caps(void **state)
{
    api_streams *s = NULL;
    pthread_t t[THREADS];
    worker w[THREADS];
    (void)state;
    assert_int_equal(api_streams_new(TOTAL, PER_TOKEN, &s), TY_OK);
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = s;
        snprintf(w[i].name, sizeof w[i].name, "tok%d", i / 2);
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    int taken = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_false(w[i].over);
        taken += w[i].taken;
    }
    assert_true(taken > 0);
    api_streams_stats st;
    api_streams_get_stats(s, &st);
    assert_int_equal(st.open, 0);
    for (int i = 0; i < THREADS; i += 2)
        assert_int_equal(api_streams_held(s, w[i].name), 0);
    api_streams_free(s);
}

/* ---- the request helper ----------------------------------------------------------------- */

static void test_need_stream_place_answers_429(void **state)
{
    api_streams *s = NULL;
    api_ctx ctx = {0};
    api_principal alice = {.name = "alice", .scopes = STORE_SCOPE_READ};
    api_principal bob = {.name = "bob", .scopes = STORE_SCOPE_READ};
    api_principal carol = {.name = "carol", .scopes = STORE_SCOPE_READ};
    api_req req = {.ctx = &ctx, .method = "GET", .path = "/v1/events", .principal = &alice,
                   .request_id = "test"};
    api_resp resp;
    api_stream_place p1 = {0}, p2 = {0}, p3 = {0};
    (void)state;

    /* Without the accounting there is no cap, and no place is held. */
    memset(&resp, 0, sizeof resp);
    assert_true(api_need_stream_place(&req, &resp, &p1));
    assert_null(p1.owner);
    assert_int_equal(resp.status, 0);

    assert_int_equal(api_streams_new(2, 1, &s), TY_OK);
    ctx.streams = s;
    assert_true(api_need_stream_place(&req, &resp, &p1));
    assert_non_null(p1.owner);
    assert_false(api_need_stream_place(&req, &resp, &p2));
    assert_null(p2.owner);
    assert_int_equal(resp.status, 429);
    assert_string_equal(resp.content_type, API_CT_PROBLEM);
    json_t *j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "too-many-streams");
    assert_string_equal(json_string_value(json_object_get(j, "title")), "Too Many Requests");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 429);
    assert_non_null(strstr(json_string_value(json_object_get(j, "detail")), "this token"));
    json_decref(j);
    assert_int_equal(resp.nheaders, 1);
    assert_string_equal(resp.headers[0].key, "Retry-After");
    assert_string_equal(resp.headers[0].value, API_STREAMS_RETRY_AFTER);
    api_resp_free(&resp);

    /* Another token gets the last place; then the server's cap refuses everyone. */
    req.principal = &bob;
    memset(&resp, 0, sizeof resp);
    assert_true(api_need_stream_place(&req, &resp, &p2));
    req.principal = &carol;
    assert_false(api_need_stream_place(&req, &resp, &p3));
    assert_int_equal(resp.status, 429);
    j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_non_null(strstr(json_string_value(json_object_get(j, "detail")), "the server"));
    json_decref(j);
    api_resp_free(&resp);

    api_stream_place_release(&p1);
    api_stream_place_release(&p2);
    assert_int_equal(open_now(s), 0);
    api_streams_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_are_checked),
        cmocka_unit_test(test_per_token_cap),
        cmocka_unit_test(test_total_cap),
        cmocka_unit_test(test_released_exactly_once),
        cmocka_unit_test(test_many_principals),
        cmocka_unit_test(test_concurrent_takes_hold_the_caps),
        cmocka_unit_test(test_need_stream_place_answers_429),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
