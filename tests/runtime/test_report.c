/*
 * test_report.c - runtime/report: the metrics reporter of trainyard-worker against a small
 * libmicrohttpd receiver on loopback that records every POST (path, Authorization, body)
 * and answers as each case asks: 200, a status, or not until the test releases it.
 *
 * Nothing here times anything: cases count points (pushed, sent, dropped, received) and
 * compare them. A push that blocked on the network would hang a case, which ctest's
 * timeout reports; the slow-server case pushes while the server holds the reporter's
 * request and checks that every push came back and was counted.
 *
 * The last case runs the real trainyard-worker (2 ranks, a small synthetic data set) with
 * the receiver as its server and compares the points it reported with its JSON log lines.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ty_net.h"
#include "runtime/report.h"
#include "tests/runtime/rt_testdata.h"

#ifndef TY_WORKER_BIN
#error "TY_WORKER_BIN must name the trainyard-worker binary"
#endif

#define JOB "job-7f3a"
#define TOKEN "ty_job_0123456789abcdef0123456789abcdef"
#define WAIT_S 30.0          /* bounds a wait for something that must happen; never asserted */
#define MAX_BODY (4 << 20)

/* ---- the receiver -------------------------------------------------------- */

typedef struct received {
    char path[256];
    char auth[256];
    char content_type[128];
    json_t *body;
} received;

typedef struct receiver {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    received req[256];
    size_t n_req;
    size_t n_points;       /* points in every body received */
    int status;            /* what to answer (200 by default) */
    int fail_first;        /* answer 503 to this many requests first */
    int hold;              /* keep requests waiting until released */
    int holding;           /* requests waiting now */
} receiver;

typedef struct upload {
    char *buf;
    size_t len;
} upload;

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    upload *u = *con_cls;
    if (u) {
        free(u->buf);
        free(u);
    }
    *con_cls = NULL;
}

static enum MHD_Result answer(struct MHD_Connection *c, int status, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    receiver *rv = cls;
    upload *u = *con_cls;
    (void)version;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u)
            return MHD_NO;
        *con_cls = u;
        return MHD_YES;
    }
    if (*data_size > 0) {
        if (u->len + *data_size > MAX_BODY)
            return MHD_NO;
        char *grown = realloc(u->buf, u->len + *data_size + 1);
        if (!grown)
            return MHD_NO;
        u->buf = grown;
        memcpy(u->buf + u->len, data, *data_size);
        u->len += *data_size;
        u->buf[u->len] = '\0';
        *data_size = 0;
        return MHD_YES;
    }
    json_t *body = u->buf ? json_loadb(u->buf, u->len, 0, NULL) : NULL;
    size_t points = json_array_size(json_object_get(body, "points"));
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");

    pthread_mutex_lock(&rv->mu);
    rv->holding++;
    pthread_cond_broadcast(&rv->cond);
    while (rv->hold)
        pthread_cond_wait(&rv->cond, &rv->mu);
    rv->holding--;
    int status = rv->status;
    if (rv->fail_first > 0) {
        rv->fail_first--;
        status = 503;
    }
    if (status == 200 && rv->n_req < sizeof rv->req / sizeof rv->req[0] &&
        strcmp(method, "POST") == 0) {
        received *q = &rv->req[rv->n_req++];
        snprintf(q->path, sizeof q->path, "%s", url);
        snprintf(q->auth, sizeof q->auth, "%s", auth ? auth : "");
        snprintf(q->content_type, sizeof q->content_type, "%s", ctype ? ctype : "");
        q->body = body;
        body = NULL;
        rv->n_points += points;
    }
    pthread_cond_broadcast(&rv->cond);
    pthread_mutex_unlock(&rv->mu);
    json_decref(body);

    char text[64];
    snprintf(text, sizeof text, "{\"accepted\":%zu}", points);
    return answer(c, status, status == 200 ? text : "{\"title\":\"no\"}");
}

static receiver *receiver_start(void)
{
    receiver *rv = calloc(1, sizeof *rv);
    assert_non_null(rv);
    pthread_mutex_init(&rv->mu, NULL);
    pthread_cond_init(&rv->cond, NULL);
    rv->status = 200;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                 MHD_USE_ERROR_LOG,
                             0, NULL, NULL, on_request, rv, MHD_OPTION_NOTIFY_COMPLETED,
                             request_done, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                             MHD_OPTION_END);
    assert_non_null(rv->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(rv->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    rv->port = info->port;
    return rv;
}

static void receiver_release(receiver *rv)
{
    pthread_mutex_lock(&rv->mu);
    rv->hold = 0;
    pthread_cond_broadcast(&rv->cond);
    pthread_mutex_unlock(&rv->mu);
}

static void receiver_stop(receiver *rv)
{
    receiver_release(rv);
    MHD_stop_daemon(rv->d);
    for (size_t i = 0; i < rv->n_req; i++)
        json_decref(rv->req[i].body);
    pthread_cond_destroy(&rv->cond);
    pthread_mutex_destroy(&rv->mu);
    free(rv);
}

static void deadline_in(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_REALTIME, ts);
    double whole = floor(s);
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits (bounded by WAIT_S) until the receiver has stored at least n points. */
static size_t wait_points(receiver *rv, size_t n)
{
    struct timespec ts;
    deadline_in(&ts, WAIT_S);
    pthread_mutex_lock(&rv->mu);
    while (rv->n_points < n && pthread_cond_timedwait(&rv->cond, &rv->mu, &ts) != ETIMEDOUT)
        ;
    size_t got = rv->n_points;
    pthread_mutex_unlock(&rv->mu);
    return got;
}

/* Waits (bounded by WAIT_S) until a request is being held. */
static int wait_holding(receiver *rv)
{
    struct timespec ts;
    deadline_in(&ts, WAIT_S);
    pthread_mutex_lock(&rv->mu);
    while (rv->holding == 0 && pthread_cond_timedwait(&rv->cond, &rv->mu, &ts) != ETIMEDOUT)
        ;
    int h = rv->holding;
    pthread_mutex_unlock(&rv->mu);
    return h;
}

/* The i-th point of all bodies received, in arrival order (borrowed), or NULL. */
static json_t *point_at(receiver *rv, size_t i)
{
    for (size_t k = 0; k < rv->n_req; k++) {
        json_t *pts = json_object_get(rv->req[k].body, "points");
        if (i < json_array_size(pts))
            return json_array_get(pts, i);
        i -= json_array_size(pts);
    }
    return NULL;
}

/* ---- helpers ------------------------------------------------------------- */

static report *open_to(int port, double interval_s, size_t capacity)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    report_config c;
    report_config_defaults(&c);
    c.server = url;
    c.token = TOKEN;
    c.job_id = JOB;
    c.interval_s = interval_s;
    c.capacity = capacity;
    c.request_timeout_s = 60;  /* the slow case releases its server well before */
    c.final_timeout_s = 10;
    report *r = NULL;
    char err[256] = "";
    if (report_open(&c, &r, err, sizeof err) != TY_OK)
        fail_msg("report_open: %s", err);
    return r;
}

static void push(report *r, int64_t step, double loss, double lr)
{
    report_point p = {.step = step, .n = 2};
    p.v[0] = (report_value){"loss", loss};
    p.v[1] = (report_value){"lr", lr};
    report_push(r, &p);
}

static double num(const json_t *point, const char *key)
{
    json_t *v = json_object_get(point, key);
    if (!json_is_number(v))
        fail_msg("point has no number \"%s\"", key);
    return json_number_value(v);
}

/* ---- cases --------------------------------------------------------------- */

/* Points arrive in order, at the job's path, with the token, as the API's JSON. */
static void test_batches_arrive(void **state)
{
    (void)state;
    receiver *rv = receiver_start();
    report *r = open_to(rv->port, 0.02, 64);
    for (int i = 0; i < 10; i++)
        push(r, i * 10, 2.0 - 0.1 * i, 0.002);
    assert_int_equal(wait_points(rv, 10), 10);  /* sent on an interval, not at close */
    for (int i = 10; i < 15; i++)
        push(r, i * 10, 2.0 - 0.1 * i, 0.001);
    report_stats st;
    report_close(r, NULL, &st);
    assert_int_equal(st.pushed, 15);
    assert_int_equal(st.sent, 15);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(rv->n_points, 15);
    assert_true(rv->n_req >= 2);
    for (size_t k = 0; k < rv->n_req; k++) {
        assert_string_equal(rv->req[k].path, "/v1/jobs/" JOB "/metrics");
        assert_string_equal(rv->req[k].auth, "Bearer " TOKEN);
        assert_string_equal(rv->req[k].content_type, "application/json");
        assert_int_equal(json_object_size(rv->req[k].body), 1);
    }
    for (int i = 0; i < 15; i++) {
        json_t *p = point_at(rv, (size_t)i);
        assert_non_null(p);
        assert_int_equal(json_integer_value(json_object_get(p, "step")), i * 10);
        assert_true(fabs(num(p, "loss") - (2.0 - 0.1 * i)) < 1e-9);
        assert_true(fabs(num(p, "lr") - (i < 10 ? 0.002 : 0.001)) < 1e-12);
        const char *t = json_string_value(json_object_get(p, "time"));
        assert_non_null(t);
        assert_int_equal(strlen(t), 24); /* 2026-11-23T11:30:00.123Z */
        assert_int_equal(t[10], 'T');
        assert_int_equal(t[23], 'Z');
        assert_int_equal(json_object_size(p), 4);
    }
    receiver_stop(rv);
}

/* The worker's JSON lines become points with the names the API documents. */
static void test_event_lines(void **state)
{
    (void)state;
    receiver *rv = receiver_start();
    report *r = open_to(rv->port, 3600, 64); /* everything goes in the final flush */
    static const char *const lines[] = {
        "{\"event\":\"start\",\"world\":2}",
        "{\"event\":\"log\",\"step\":100,\"epoch\":0.43,\"loss\":0.61,\"lr\":0.002,"
        "\"samples_per_s\":31000.5,\"step_ms\":8.1,\"comm_s\":0.2,\"wait_s\":0.1}",
        "{\"event\":\"epoch\",\"epoch\":0,\"step\":235,\"train_loss\":0.55}",
        "{\"event\":\"checkpoint\",\"step\":235}",
        "{\"event\":\"done\",\"steps\":300,\"train_loss\":0.42,\"test_accuracy\":0.87}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        json_t *j = json_loads(lines[i], 0, NULL);
        assert_non_null(j);
        report_event(r, j);
        json_decref(j);
    }
    report_stats st;
    report_close(r, NULL, &st);
    assert_int_equal(st.sent, 3);
    assert_int_equal(st.dropped, 0);
    json_t *log = point_at(rv, 0), *ep = point_at(rv, 1), *done = point_at(rv, 2);
    assert_non_null(done);
    assert_int_equal(json_integer_value(json_object_get(log, "step")), 100);
    assert_true(fabs(num(log, "loss") - 0.61) < 1e-9);
    assert_true(fabs(num(log, "lr") - 0.002) < 1e-12);
    assert_true(fabs(num(log, "samples_per_s") - 31000.5) < 1e-6);
    assert_true(fabs(num(log, "epoch") - 0.43) < 1e-9);
    assert_int_equal(json_object_size(log), 6); /* step, time and the four values */
    assert_int_equal(json_integer_value(json_object_get(ep, "step")), 235);
    assert_true(fabs(num(ep, "epoch_loss") - 0.55) < 1e-9);
    assert_int_equal(json_integer_value(json_object_get(done, "step")), 300);
    assert_true(fabs(num(done, "loss") - 0.42) < 1e-9);
    assert_true(fabs(num(done, "accuracy") - 0.87) < 1e-9);
    assert_null(point_at(rv, 3));
    receiver_stop(rv);
}

/* Non-finite values are left out; a point with none left, or a negative step, is dropped. */
static void test_invalid_points(void **state)
{
    (void)state;
    receiver *rv = receiver_start();
    report *r = open_to(rv->port, 3600, 64);
    push(r, 1, NAN, 0.5);       /* sent with lr only */
    push(r, 2, INFINITY, NAN);  /* dropped */
    push(r, -1, 1.0, 1.0);      /* dropped */
    report_stats st;
    report_close(r, NULL, &st);
    assert_int_equal(st.pushed, 3);
    assert_int_equal(st.sent, 1);
    assert_int_equal(st.dropped, 2);
    json_t *p = point_at(rv, 0);
    assert_non_null(p);
    assert_null(json_object_get(p, "loss"));
    assert_true(fabs(num(p, "lr") - 0.5) < 1e-12);
    receiver_stop(rv);
}

/* With nothing listening, every push returns, the ring's bound holds, and all are counted. */
static void test_no_server(void **state)
{
    (void)state;
    int port = ty_net_free_port(); /* nothing listens there */
    assert_true(port > 0);
    report *r = open_to(port, 0.01, 16);
    for (int i = 0; i < 100; i++)
        push(r, i, 1.0, 0.1);
    report_stats st;
    report_get_stats(r, &st);
    assert_int_equal(st.pushed, 100);
    assert_int_equal(st.sent, 0);
    assert_true(st.dropped >= 100 - 16); /* beyond the ring's 16, never queued */
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);
    assert_non_null(log);
    report_close(r, log, &st);
    fclose(log);
    assert_int_equal(st.sent, 0);
    assert_int_equal(st.dropped, 100);
    assert_non_null(strstr(text, "reporting: 0 points sent, 100 dropped"));
    assert_null(strstr(text, TOKEN));
    free(text);
}

/* While the server holds the reporter's request, the training side's pushes return. */
static void test_slow_server(void **state)
{
    (void)state;
    receiver *rv = receiver_start();
    rv->hold = 1;
    report *r = open_to(rv->port, 3600, 8);
    /* Half the ring (4 points) wakes the reporter before its interval. */
    for (int i = 0; i < 4; i++)
        push(r, i, 1.0, 0.1);
    assert_int_equal(wait_holding(rv), 1);
    /* The 4 points in flight stay in the ring until answered: 4 more fit, 16 do not. */
    for (int i = 4; i < 24; i++)
        push(r, i, 1.0, 0.1);
    report_stats st;
    report_get_stats(r, &st);
    assert_int_equal(st.pushed, 24);
    assert_int_equal(st.sent, 0);
    assert_int_equal(st.dropped, 16);
    receiver_release(rv);
    report_close(r, NULL, &st);
    assert_int_equal(st.sent, 8);
    assert_int_equal(st.dropped, 16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(json_integer_value(json_object_get(point_at(rv, (size_t)i), "step")), i);
    receiver_stop(rv);
}

/* A 503 keeps the batch for the next try; a 409 (job finished) ends reporting. */
static void test_server_answers(void **state)
{
    (void)state;
    receiver *rv = receiver_start();
    rv->fail_first = 2;
    report *r = open_to(rv->port, 0.01, 64);
    for (int i = 0; i < 5; i++)
        push(r, i, 1.0, 0.1);
    assert_int_equal(wait_points(rv, 5), 5);
    report_stats st;
    report_close(r, NULL, &st);
    assert_int_equal(st.sent, 5);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.failed, 2);

    pthread_mutex_lock(&rv->mu);
    rv->status = 409;
    pthread_mutex_unlock(&rv->mu);
    r = open_to(rv->port, 3600, 64);
    for (int i = 0; i < 5; i++)
        push(r, i, 1.0, 0.1);
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);
    assert_non_null(log);
    report_close(r, log, &st);
    fclose(log);
    assert_int_equal(st.sent, 0);
    assert_int_equal(st.dropped, 5);
    assert_int_equal(st.posts, 1);
    assert_non_null(strstr(text, "reporting: 0 points sent, 5 dropped (last failure: HTTP 409)"));
    free(text);
    receiver_stop(rv);
}

static const char *g_env[8][2];

static const char *fake_getenv(const char *name)
{
    for (size_t i = 0; i < 8 && g_env[i][0]; i++)
        if (strcmp(g_env[i][0], name) == 0)
            return g_env[i][1];
    return NULL;
}

static void test_config_env(void **state)
{
    (void)state;
    static const struct {
        const char *server, *token, *job, *interval;
        ty_err want;
        double interval_s;
    } cases[] = {
        {"http://127.0.0.1:8080", "t", "abc", NULL, TY_OK, 5.0},
        {"https://ty.example", "t", "a-b_c", "0.5", TY_OK, 0.5},
        {NULL, "t", "abc", NULL, TY_ENOTFOUND, 0},
        {"http://x", "", "abc", NULL, TY_ENOTFOUND, 0},
        {"http://x", "t", NULL, NULL, TY_ENOTFOUND, 0},
        {"ftp://x", "t", "abc", NULL, TY_EINVAL, 0},
        {"http://x", "t", "../tokens", NULL, TY_EINVAL, 0},
        {"http://x", "t", "abc", "soon", TY_EINVAL, 0},
        {"http://x", "t", "abc", "0", TY_EINVAL, 0},
        {"http://x", "t", "abc", "5s", TY_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(g_env, 0, sizeof g_env);
        size_t k = 0;
        if (cases[i].server)
            g_env[k][0] = "TRAINYARD_SERVER", g_env[k++][1] = cases[i].server;
        if (cases[i].token)
            g_env[k][0] = "TRAINYARD_TOKEN", g_env[k++][1] = cases[i].token;
        if (cases[i].job)
            g_env[k][0] = "TRAINYARD_JOB_ID", g_env[k++][1] = cases[i].job;
        if (cases[i].interval)
            g_env[k][0] = "TRAINYARD_REPORT_INTERVAL", g_env[k++][1] = cases[i].interval;
        report_config c;
        report_config_defaults(&c);
        char err[256] = "";
        ty_err rc = report_config_env(&c, fake_getenv, err, sizeof err);
        if (rc != cases[i].want)
            fail_msg("case %zu: got %d, want %d (%s)", i, rc, cases[i].want, err);
        if (rc == TY_OK)
            assert_true(fabs(c.interval_s - cases[i].interval_s) < 1e-12);
        if (rc == TY_EINVAL)
            assert_non_null(strstr(err, "TRAINYARD_"));
    }
}

/* The real worker, 2 ranks: rank 0 reports exactly the figures of its JSON lines, once. */
static void test_worker_reports_its_log(void **state)
{
    (void)state;
    char root[4096], data[4200], out[4300], err[4300], server[64], port[16];
    assert_int_equal(rt_make_tempdir(root, sizeof root, "report"), 0);
    snprintf(data, sizeof data, "%s/data", root);
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(rt_write_dataset(data, 2048, 256, 5), 0);
    snprintf(out, sizeof out, "%s/stdout", root);
    snprintf(err, sizeof err, "%s/stderr", root);

    receiver *rv = receiver_start();
    snprintf(port, sizeof port, "%d", rv->port);
    snprintf(server, sizeof server, "TRAINYARD_SERVER=http://127.0.0.1:%d", rv->port);
    char *env[] = {server, "TRAINYARD_TOKEN=" TOKEN, "TRAINYARD_JOB_ID=" JOB,
                   "TRAINYARD_REPORT_INTERVAL=0.05", NULL};
    char *argv[] = {TY_WORKER_BIN, "train", "--nproc", "2", "--data", data, "--epochs", "2",
                    "--batch", "128", "--log-every", "4", "--threads", "1", NULL};
    pid_t pid = rt_spawn(argv, env, out, err);
    assert_true(pid > 0);
    int rc = rt_wait(pid, 300);
    char *text = rt_read_file(out, NULL), *errtext = rt_read_file(err, NULL);
    assert_non_null(text);
    assert_non_null(errtext);
    if (rc != 0)
        fail_msg("trainyard-worker exited %d:\n%s\n%s", rc, text, errtext);

    /* Every log line's step and loss, the epoch lines' losses, the done line. */
    size_t want = 0;
    for (char *line = text, *eol; *line; line = eol ? eol + 1 : line + strlen(line)) {
        eol = strchr(line, '\n');
        if (eol)
            *eol = '\0';
        json_t *j = json_loads(line, 0, NULL);
        const char *ev = json_string_value(json_object_get(j, "event"));
        if (ev && (strcmp(ev, "log") == 0 || strcmp(ev, "epoch") == 0 ||
                   strcmp(ev, "done") == 0)) {
            json_t *p = point_at(rv, want++);
            if (!p)
                fail_msg("the line %s was not reported", line);
            int64_t step = json_integer_value(json_object_get(j, strcmp(ev, "done") ? "step"
                                                                                    : "steps"));
            assert_int_equal(json_integer_value(json_object_get(p, "step")), step);
            const char *key = strcmp(ev, "log") == 0 ? "loss" : "train_loss";
            const char *name = strcmp(ev, "epoch") == 0 ? "epoch_loss" : "loss";
            /* The same float64 printed with the same 9 digits. */
            assert_true(num(p, name) == json_number_value(json_object_get(j, key)));
            if (strcmp(ev, "done") == 0)
                assert_true(num(p, "accuracy") ==
                            json_number_value(json_object_get(j, "test_accuracy")));
        }
        json_decref(j);
    }
    assert_true(want > 4);
    assert_null(point_at(rv, want));
    char line[96];
    snprintf(line, sizeof line, "reporting: %zu points sent, 0 dropped", want);
    if (!strstr(errtext, line))
        fail_msg("stderr lacks \"%s\":\n%s", line, errtext);
    assert_null(strstr(errtext, TOKEN));
    /* Only rank 0 reports. */
    assert_null(strstr(strstr(errtext, line) + 1, "reporting:"));
    free(text);
    free(errtext);
    receiver_stop(rv);
    rt_remove_tree(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_arrive),
        cmocka_unit_test(test_event_lines),
        cmocka_unit_test(test_invalid_points),
        cmocka_unit_test(test_no_server),
        cmocka_unit_test(test_slow_server),
        cmocka_unit_test(test_server_answers),
        cmocka_unit_test(test_config_env),
        cmocka_unit_test(test_worker_reports_its_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
