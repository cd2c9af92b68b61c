/* Unit tests for store/store_notify.c: subscriptions, the outbox rows written with a job's
 * move into a terminal state (only for the subscriptions it matches), and their marks. */
#include "tests/unit/test_store_util.h"

#include <sys/stat.h>

#include "common/ty_time.h"

#define SECRET "whsec-0123456789"

static int teardown(void **state)
{
    store_fixture *f = *state;
    char path[256];
    snprintf(path, sizeof path, "%s/webhook-secrets.key", f->t.dir);
    unlink(path);
    return store_fixture_teardown(state);
}

static store_notify_sub sub(const char *name, unsigned events, const char *queue,
                            const char *labels)
{
    store_notify_sub x = {
        .name = (char *)name,
        .url = (char *)"http://127.0.0.1:9/hook",
        .events = events,
        .queue = (char *)queue,
        .labels_json = (char *)labels,
        .secret = (unsigned char *)SECRET,
        .secret_len = strlen(SECRET),
    };
    return x;
}

/* Submits a job in queue with one label team=<team> (NULL: none); returns its id (new). */
static char *submit_labelled(store *s, const char *queue, const char *team)
{
    store_label l = {"team", team};
    store_job_new j = job_template("job", queue);
    j.labels = team ? &l : NULL;
    j.nlabels = team ? 1 : 0;
    store_job *out = NULL;
    size_t n = 0;
    int replayed = 0;
    assert_int_equal(store_jobs_submit(s, &j, 1, NULL, NULL, &out, &n, &replayed), TY_OK);
    char *id = strdup(out->id);
    store_jobs_free(out, n);
    assert_non_null(id);
    return id;
}

/* PENDING -> ... -> RUNNING -> to, one transition at a time. */
static void run_to(store *s, const char *id, job_state to)
{
    assert_int_equal(move_job(s, id, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(s, id, JOB_STARTING), TY_OK);
    assert_int_equal(move_job(s, id, JOB_RUNNING), TY_OK);
    assert_int_equal(move_job(s, id, to), TY_OK);
}

static size_t deliveries(store *s, const char *name, store_delivery **out)
{
    size_t n = 0;
    assert_int_equal(store_notify_deliveries(s, name, 1000, out, &n), TY_OK);
    return n;
}

static size_t count_deliveries(store *s, const char *name)
{
    store_delivery *d = NULL;
    size_t n = deliveries(s, name, &d);
    store_deliveries_free(d, n);
    return n;
}

static void test_create_get_list_delete(void **state)
{
    store_fixture *f = *state;
    store_notify_sub a = sub("a", STORE_NOTIFY_ALL, NULL, NULL);
    store_notify_sub b = sub("b", STORE_NOTIFY_FAILED, "gpu", "{\"team\":\"vision\"}");
    assert_int_equal(store_notify_create(f->s, &a), TY_OK);
    assert_int_equal(store_notify_create(f->s, &b), TY_OK);
    assert_int_equal(store_notify_create(f->s, &a), TY_EEXISTS);
    store_notify_sub bad = sub("c", 0, NULL, NULL);
    assert_int_equal(store_notify_create(f->s, &bad), TY_EINVAL);

    /* The secret comes back as given (it keys the HMAC), and is not in the file in clear. */
    store_notify_sub *got = NULL;
    assert_int_equal(store_notify_get(f->s, "b", &got), TY_OK);
    assert_string_equal(got->url, "http://127.0.0.1:9/hook");
    assert_int_equal(got->events, STORE_NOTIFY_FAILED);
    assert_string_equal(got->queue, "gpu");
    assert_string_equal(got->labels_json, "{\"team\":\"vision\"}");
    assert_int_equal(got->secret_len, strlen(SECRET));
    assert_memory_equal(got->secret, SECRET, strlen(SECRET));
    store_notify_subs_free(got, 1);
    assert_int_equal(store_notify_get(f->s, "nope", &got), TY_ENOTFOUND);

    store_notify_sub *list = NULL;
    size_t n = 0;
    assert_int_equal(store_notify_list(f->s, &list, &n), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "a");
    assert_null(list[0].queue);
    assert_null(list[0].labels_json);
    assert_null(list[0].secret);
    store_notify_subs_free(list, n);

    assert_int_equal(store_notify_delete(f->s, "a"), TY_OK);
    assert_int_equal(store_notify_delete(f->s, "a"), TY_ENOTFOUND);
    store_delivery *d = NULL;
    assert_int_equal(store_notify_deliveries(f->s, "a", 10, &d, &n), TY_ENOTFOUND);
}

/* Each terminal state queues a row only for the subscriptions that select it; moves that
 * end nothing queue none; a subscription's queue and labels filter. */
static void test_outbox_rows_only_for_matching(void **state)
{
    store_fixture *f = *state;
    store_notify_sub all = sub("all", STORE_NOTIFY_ALL, NULL, NULL);
    store_notify_sub failed = sub("failed", STORE_NOTIFY_FAILED, NULL, NULL);
    store_notify_sub gpu = sub("gpu", STORE_NOTIFY_ALL, "gpu", NULL);
    store_notify_sub vision = sub("vision", STORE_NOTIFY_ALL, NULL, "{\"team\":\"vision\"}");
    assert_int_equal(store_notify_create(f->s, &all), TY_OK);
    assert_int_equal(store_notify_create(f->s, &failed), TY_OK);
    assert_int_equal(store_notify_create(f->s, &gpu), TY_OK);
    assert_int_equal(store_notify_create(f->s, &vision), TY_OK);

    char *ok = submit_labelled(f->s, "cpu", NULL);
    char *bad = submit_labelled(f->s, "gpu", "vision");
    char *gone = submit_labelled(f->s, "cpu", "speech");
    char *left = submit_labelled(f->s, "cpu", "vision");
    run_to(f->s, ok, JOB_SUCCEEDED);
    run_to(f->s, bad, JOB_FAILED);
    assert_int_equal(move_job(f->s, gone, JOB_CANCELLED), TY_OK);
    assert_int_equal(move_job(f->s, left, JOB_ADMITTED), TY_OK); /* not terminal: nothing */

    store_delivery *d = NULL;
    size_t n = deliveries(f->s, "all", &d);
    assert_int_equal(n, 3);
    /* Newest first. */
    assert_string_equal(d[0].job_id, gone);
    assert_int_equal(d[0].event, JOB_CANCELLED);
    assert_string_equal(d[1].job_id, bad);
    assert_int_equal(d[1].event, JOB_FAILED);
    assert_string_equal(d[2].job_id, ok);
    assert_int_equal(d[2].event, JOB_SUCCEEDED);
    assert_int_equal(d[2].state, STORE_DELIVERY_PENDING);
    assert_int_equal(d[2].attempts, 0);
    assert_true(d[2].next_at_ms > 0 && d[2].next_at_ms == d[2].created_at_ms);
    assert_string_equal(d[2].sub, "all");
    store_deliveries_free(d, n);

    n = deliveries(f->s, "failed", &d);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].job_id, bad);
    store_deliveries_free(d, n);
    n = deliveries(f->s, "gpu", &d);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].job_id, bad);
    store_deliveries_free(d, n);
    n = deliveries(f->s, "vision", &d);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].job_id, bad);
    store_deliveries_free(d, n);

    /* A job already ended does not queue again, whatever a later write asks of it. */
    (void)move_job(f->s, gone, JOB_CANCELLED);
    assert_int_equal(count_deliveries(f->s, "all"), 3);
    free(ok);
    free(bad);
    free(gone);
    free(left);
}

/* The scheduler's batched updates queue rows like a single transition does, and a rolled
 * back update queues none. */
static void test_outbox_with_scheduler_update(void **state)
{
    store_fixture *f = *state;
    store_notify_sub all = sub("all", STORE_NOTIFY_ALL, NULL, NULL);
    assert_int_equal(store_notify_create(f->s, &all), TY_OK);
    char *id = submit_labelled(f->s, "cpu", NULL);
    assert_int_equal(move_job(f->s, id, JOB_ADMITTED), TY_OK);
    assert_int_equal(move_job(f->s, id, JOB_STARTING), TY_OK);
    assert_int_equal(move_job(f->s, id, JOB_RUNNING), TY_OK);

    /* The commit fails: the transition and its outbox row are both gone. */
    store_update u = {
        .id = id, .from = JOB_RUNNING, .to = JOB_FAILED, .reason = "Error", .restarts = -1};
    store_fail_writes(f->s, 1, 1, TY_EIO);
    assert_int_equal(store_jobs_update(f->s, &u, 1), TY_EIO);
    assert_int_equal(count_deliveries(f->s, "all"), 0);

    store_update v = {
        .id = id, .from = JOB_RUNNING, .to = JOB_FAILED, .reason = "Error", .restarts = -1};
    assert_int_equal(store_jobs_update(f->s, &v, 1), TY_OK);
    assert_int_equal(v.result, TY_OK);
    assert_int_equal(count_deliveries(f->s, "all"), 1);
    free(id);
}

static int hook_calls;
static void on_notify(void *ud)
{
    (void)ud;
    hook_calls++;
}

/* Due rows, marks (retry, delivered, failed), the hook, and deletion taking the rows. */
static void test_due_and_marks(void **state)
{
    store_fixture *f = *state;
    store_notify_sub a = sub("a", STORE_NOTIFY_ALL, NULL, NULL);
    assert_int_equal(store_notify_create(f->s, &a), TY_OK);
    hook_calls = 0;
    store_set_notify_hook(f->s, on_notify, NULL);
    char *j1 = submit_labelled(f->s, "cpu", NULL);
    char *j2 = submit_labelled(f->s, "cpu", NULL);
    assert_int_equal(hook_calls, 0); /* submissions end nothing */
    assert_int_equal(move_job(f->s, j1, JOB_CANCELLED), TY_OK);
    assert_int_equal(hook_calls, 1); /* called before the write returned */
    assert_int_equal(move_job(f->s, j2, JOB_CANCELLED), TY_OK);

    int64_t now = ty_time_now_ms(), next = -1;
    store_delivery *d = NULL;
    size_t n = 0;
    assert_int_equal(store_notify_due(f->s, now, 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].job_id, j1);
    assert_true(next > 0 && next <= now);
    int64_t first = d[0].id, second = d[1].id;
    store_deliveries_free(d, n);

    /* A failed attempt: pending again, due later, with its outcome. */
    store_delivery_mark m = {.id = first,
                             .state = STORE_DELIVERY_PENDING,
                             .at_ms = now,
                             .next_at_ms = now + 60000,
                             .code = 503};
    assert_int_equal(store_notify_mark(f->s, &m), TY_OK);
    store_delivery_mark m2 = {
        .id = second, .state = STORE_DELIVERY_DELIVERED, .at_ms = now, .code = 204};
    assert_int_equal(store_notify_mark(f->s, &m2), TY_OK);
    /* Delivered is final: a second mark finds nothing pending. */
    assert_int_equal(store_notify_mark(f->s, &m2), TY_ENOTFOUND);

    assert_int_equal(store_notify_due(f->s, now, 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(next, now + 60000);
    store_deliveries_free(d, n);

    n = deliveries(f->s, "a", &d);
    assert_int_equal(n, 2);
    assert_int_equal(d[0].state, STORE_DELIVERY_DELIVERED);
    assert_int_equal(d[0].attempts, 1);
    assert_int_equal(d[0].last_code, 204);
    assert_int_equal(d[0].done_at_ms, now);
    assert_int_equal(d[1].state, STORE_DELIVERY_PENDING);
    assert_int_equal(d[1].last_code, 503);
    assert_int_equal(d[1].done_at_ms, 0);
    store_deliveries_free(d, n);

    store_delivery_mark m3 = {.id = first,
                              .state = STORE_DELIVERY_FAILED,
                              .at_ms = now + 1,
                              .error = "connection refused"};
    assert_int_equal(store_notify_mark(f->s, &m3), TY_OK);
    n = deliveries(f->s, "a", &d);
    assert_int_equal(d[1].state, STORE_DELIVERY_FAILED);
    assert_int_equal(d[1].attempts, 2);
    assert_int_equal(d[1].last_code, 0);
    assert_string_equal(d[1].last_error, "connection refused");
    store_deliveries_free(d, n);

    /* A new row, then the subscription goes: nothing of it is due any more. */
    char *j3 = submit_labelled(f->s, "cpu", NULL);
    assert_int_equal(move_job(f->s, j3, JOB_CANCELLED), TY_OK);
    assert_int_equal(store_notify_delete(f->s, "a"), TY_OK);
    assert_int_equal(store_notify_due(f->s, ty_time_now_ms() + 1, 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(next, 0);
    store_set_notify_hook(f->s, NULL, NULL);
    free(j1);
    free(j2);
    free(j3);
}

/* Retention: finished rows older than the cutoff go, oldest first, at most max_rows at a time;
 * a pending row stays whatever its age. */
static void test_purge_finished_rows(void **state)
{
    store_fixture *f = *state;
    store_notify_sub a = sub("a", STORE_NOTIFY_ALL, NULL, NULL);
    assert_int_equal(store_notify_create(f->s, &a), TY_OK);
    enum { N = 5 };
    char *ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = submit_labelled(f->s, "cpu", NULL);
        assert_int_equal(move_job(f->s, ids[i], JOB_CANCELLED), TY_OK);
    }
    store_delivery *d = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_notify_due(f->s, ty_time_now_ms(), 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, N);
    /* Finished at 3000, 1000, 2000 (delivered), 2500 (failed); the last one retries. */
    static const int64_t done[N] = {3000, 1000, 2000, 2500, 0};
    for (int i = 0; i < N; i++) {
        store_delivery_mark m = {.id = d[i].id, .at_ms = done[i], .code = 204};
        m.state = i == 3 ? STORE_DELIVERY_FAILED : i == 4 ? STORE_DELIVERY_PENDING
                                                         : STORE_DELIVERY_DELIVERED;
        if (i == 4) {
            m.at_ms = 1;
            m.next_at_ms = 2; /* due long ago, and still pending */
            m.code = 503;
        }
        assert_int_equal(store_notify_mark(f->s, &m), TY_OK);
    }
    int64_t first = d[0].id, pending = d[4].id;
    store_deliveries_free(d, n);

    int64_t rows = -1;
    int more = -1;
    assert_int_equal(store_notify_purge(f->s, 3000, 2, &rows, &more), TY_OK);
    assert_int_equal(rows, 2); /* 1000 and 2000 */
    assert_int_equal(more, 1);
    assert_int_equal(store_notify_purge(f->s, 3000, 2, &rows, &more), TY_OK);
    assert_int_equal(rows, 1); /* 2500, failed */
    assert_int_equal(more, 0);
    n = deliveries(f->s, "a", &d);
    assert_int_equal(n, 2); /* 3000 is not before the cutoff; the pending row stays */
    assert_true((d[0].id == pending && d[1].id == first) ||
                (d[0].id == first && d[1].id == pending));
    store_deliveries_free(d, n);
    assert_int_equal(store_notify_purge(f->s, INT64_MAX, 100, &rows, &more), TY_OK);
    assert_int_equal(rows, 1);
    n = deliveries(f->s, "a", &d);
    assert_int_equal(n, 1);
    assert_int_equal(d[0].id, pending);
    assert_int_equal(d[0].state, STORE_DELIVERY_PENDING);
    store_deliveries_free(d, n);
    /* The pending row is still sent. */
    assert_int_equal(store_notify_due(f->s, ty_time_now_ms(), 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    store_deliveries_free(d, n);
    assert_int_equal(store_notify_purge(f->s, 0, 0, &rows, &more), TY_EINVAL);
    for (int i = 0; i < N; i++)
        free(ids[i]);
}

/* Rows survive a close and reopen (the outbox is the database). */
static void test_outbox_survives_reopen(void **state)
{
    store_fixture *f = *state;
    store_notify_sub a = sub("a", STORE_NOTIFY_CANCELLED, NULL, NULL);
    assert_int_equal(store_notify_create(f->s, &a), TY_OK);
    char *id = submit_labelled(f->s, "cpu", NULL);
    assert_int_equal(move_job(f->s, id, JOB_CANCELLED), TY_OK);
    store_close(f->s);
    f->s = open_store(&f->t);
    store_delivery *d = NULL;
    size_t n = 0;
    int64_t next = 0;
    assert_int_equal(store_notify_due(f->s, ty_time_now_ms(), 10, &d, &n, &next), TY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].job_id, id);
    store_deliveries_free(d, n);
    store_notify_sub *got = NULL;
    assert_int_equal(store_notify_get(f->s, "a", &got), TY_OK);
    assert_memory_equal(got->secret, SECRET, strlen(SECRET));
    store_notify_subs_free(got, 1);
    free(id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_get_list_delete, store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_rows_only_for_matching, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_outbox_with_scheduler_update, store_fixture_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_due_and_marks, store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_outbox_survives_reopen, store_fixture_setup, teardown),
        cmocka_unit_test_setup_teardown(test_purge_finished_rows, store_fixture_setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
