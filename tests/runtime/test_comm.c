/*
 * test_comm.c - runtime/comm.c: rendezvous, ring collectives, failure.
 *
 * Each rank is a forked process on 127.0.0.1 with an ephemeral MASTER_PORT.
 * Children never call cmocka: they write what they saw into a shared result
 * table, and the parent asserts on it after reaping them (killing any child
 * that outlives a generous bound, so a hang shows as a failure, not a stuck
 * test).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/ty_crypto.h"
#include "common/ty_net.h"
#include "runtime/comm.h"
#include "runtime/rendezvous.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 8
#define TEXT 256
/* Generous: the correctness runs must not fail on a loaded machine or under ASan. */
#define SLOW_TIMEOUT_MS 30000
/* Short: the failure runs must notice a hung rank quickly. */
#define FAIL_TIMEOUT_MS 2000
#define REAP_SECONDS 60.0
/* The gang's rendezvous secret, as the server mints it: 32 random bytes in hex. */
#define SECRET "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define WRONG_SECRET "0000d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

struct rank_result {
    int ran;          /* reached the end of its script */
    int exit_status;  /* waitpid() status, filled in by the parent */
    int ready;        /* initialized and past the first collective */
    int init_status;
    int status;       /* status of the operation under test */
    int later_status; /* status of one more operation after that */
    long mismatches;
    char what[TEXT];  /* first mismatch, or the init error */
    char err[TEXT];   /* comm_error() after the operation under test */
};

typedef void (*rank_fn)(int rank, int world, int port, const void *arg, struct rank_result *out);

static struct rank_result *results(void)
{
    static struct rank_result *shared;
    if (shared == NULL) {
        void *p = mmap(NULL, sizeof *shared * MAX_WORLD, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(p != MAP_FAILED);
        shared = p;
    }
    memset(shared, 0, sizeof *shared * MAX_WORLD);
    return shared;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static pid_t spawn_rank(rank_fn fn, int rank, int world, int port, const void *arg,
                        struct rank_result *res)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fn(rank, world, port, arg, &res[rank]);
        res[rank].ran = 1;
        exit(0);
    }
    return pid;
}

static void spawn_world(rank_fn fn, int world, int port, const void *arg, struct rank_result *res,
                        pid_t *pids)
{
    for (int r = 0; r < world; r++)
        pids[r] = spawn_rank(fn, r, world, port, arg, res);
}

/*
 * Waits for the listed children (pids[k] is rank k; 0 means skip) and records
 * how each ended; kills those still running at the deadline.
 */
static void reap(pid_t *pids, int count, double seconds, struct rank_result *res)
{
    double deadline = now_s() + seconds;
    int left = 0;
    for (int k = 0; k < count; k++)
        left += pids[k] > 0;
    while (left > 0) {
        for (int k = 0; k < count; k++) {
            if (pids[k] <= 0)
                continue;
            int status;
            pid_t p = waitpid(pids[k], &status, now_s() < deadline ? WNOHANG : 0);
            if (p == 0 && now_s() >= deadline) {
                kill(pids[k], SIGKILL);
                continue;
            }
            if (p == pids[k] || (p < 0 && errno == ECHILD)) {
                res[k].exit_status = p == pids[k] ? status : -1;
                pids[k] = 0;
                left--;
            }
        }
        if (left > 0)
            sleep_ms(5);
    }
}

static void note(struct rank_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct rank_result *out, const char *fmt, ...)
{
    out->mismatches++;
    if (out->what[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out->what, sizeof out->what, fmt, ap);
    va_end(ap);
    if (n < 0)
        out->what[0] = '\0';
}

/* A rank with secret (NULL: none; every gang here has one unless it says otherwise). */
static comm *child_init_secret(int rank, int world, int port, int timeout_ms, const char *secret,
                               struct rank_result *out)
{
    comm_config cfg = {rank, world, "127.0.0.1", port, timeout_ms,
                       (const unsigned char *)secret, secret ? strlen(secret) : 0};
    comm *c = NULL;
    out->init_status = comm_init(&cfg, &c, out->what, sizeof out->what);
    return out->init_status == COMM_OK ? c : NULL;
}

static comm *child_init(int rank, int world, int port, int timeout_ms, struct rank_result *out)
{
    return child_init_secret(rank, world, port, timeout_ms, SECRET, out);
}

/* ------------------------------------------------------------- references */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Small integers: every float sum of them is exact in any order. */
static float small(int rank, size_t i)
{
    return (float)((int)(mix((uint32_t)i * 2654435761u + (uint32_t)rank * 97u) % 17u) - 8);
}

/* Values of varied magnitude: their float sum depends on the order. */
static float noise(int rank, size_t i)
{
    uint32_t h = mix((uint32_t)i ^ ((uint32_t)rank << 24) ^ 0x5bd1e995u);
    float m = (float)(h >> 8) / 16777216.0f - 0.5f;
    return ldexpf(m, (int)(h & 15u) - 8);
}

static float exact_sum(int world, size_t i)
{
    float s = 0;
    for (int r = 0; r < world; r++)
        s += small(r, i);
    return s;
}

/* The documented ring order: shard k is summed starting at rank k+1. */
static float ring_sum(int world, int shard, size_t i)
{
    float acc = noise((shard + 1) % world, i);
    for (int j = 2; j <= world; j++)
        acc = acc + noise((shard + j) % world, i);
    return acc;
}

/* ------------------------------------------------------ correctness, sync */

static const size_t COUNTS[] = {1, 7, 1023, (1u << 20) + 3};

static void check_count(comm *c, size_t n, struct rank_result *out)
{
    int rank = comm_rank(c), world = comm_world(c);
    size_t lo = comm_shard_offset(n, world, rank), hi = lo + comm_shard_count(n, world, rank);
    float *buf = malloc(n * sizeof *buf);
    unsigned char *bytes = malloc(n);
    int *own = malloc(n * sizeof *own);
    if (buf == NULL || bytes == NULL || own == NULL) {
        note(out, "out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        while (i >= comm_shard_offset(n, world, (int)k) + comm_shard_count(n, world, (int)k))
            k++;
        own[i] = (int)k;
    }
    comm_status st;

    for (size_t i = 0; i < n; i++)
        buf[i] = small(rank, i);
    if ((st = comm_all_reduce(c, buf, n)) != COMM_OK)
        note(out, "n=%zu all_reduce: status %d: %s", n, st, comm_error(c));
    for (size_t i = 0; i < n && st == COMM_OK; i++)
        if (buf[i] != exact_sum(world, i)) {
            note(out, "n=%zu all_reduce[%zu] = %g, want %g", n, i, buf[i], exact_sum(world, i));
            break;
        }

    for (size_t i = 0; i < n; i++)
        buf[i] = noise(rank, i);
    if ((st = comm_all_reduce(c, buf, n)) != COMM_OK)
        note(out, "n=%zu all_reduce(noise): status %d: %s", n, st, comm_error(c));
    for (size_t i = 0; i < n && st == COMM_OK; i++)
        if (memcmp(&buf[i], &(float){ring_sum(world, own[i], i)}, sizeof(float)) != 0) {
            note(out, "n=%zu all_reduce(noise)[%zu] = %a, want ring order %a", n, i, buf[i],
                 ring_sum(world, own[i], i));
            break;
        }

    for (size_t i = 0; i < n; i++)
        buf[i] = small(rank, i);
    if ((st = comm_reduce_scatter(c, buf, n)) != COMM_OK)
        note(out, "n=%zu reduce_scatter: status %d: %s", n, st, comm_error(c));
    for (size_t i = lo; i < hi && st == COMM_OK; i++)
        if (buf[i] != exact_sum(world, i)) {
            note(out, "n=%zu reduce_scatter[%zu] = %g, want %g", n, i, buf[i], exact_sum(world, i));
            break;
        }

    for (size_t i = 0; i < n; i++)
        buf[i] = noise(rank, i);
    if ((st = comm_reduce_scatter(c, buf, n)) != COMM_OK)
        note(out, "n=%zu reduce_scatter(noise): status %d: %s", n, st, comm_error(c));
    for (size_t i = lo; i < hi && st == COMM_OK; i++)
        if (memcmp(&buf[i], &(float){ring_sum(world, rank, i)}, sizeof(float)) != 0) {
            note(out, "n=%zu reduce_scatter(noise)[%zu] = %a, want ring order %a", n, i, buf[i],
                 ring_sum(world, rank, i));
            break;
        }

    for (size_t i = 0; i < n; i++)
        buf[i] = i >= lo && i < hi ? small(rank, i) : -1000.0f;
    if ((st = comm_all_gather(c, buf, n)) != COMM_OK)
        note(out, "n=%zu all_gather: status %d: %s", n, st, comm_error(c));
    for (size_t i = 0; i < n && st == COMM_OK; i++)
        if (buf[i] != small(own[i], i)) {
            note(out, "n=%zu all_gather[%zu] = %g, want %g", n, i, buf[i], small(own[i], i));
            break;
        }

    int roots[2] = {0, world - 1};
    for (int k = 0; k < 2; k++) {
        int root = roots[k];
        for (size_t i = 0; i < n; i++)
            bytes[i] = rank == root ? (unsigned char)(i * 31u + (unsigned)root) : 0xa5;
        if ((st = comm_broadcast(c, bytes, n, root)) != COMM_OK)
            note(out, "n=%zu broadcast(root %d): status %d: %s", n, root, st, comm_error(c));
        for (size_t i = 0; i < n && st == COMM_OK; i++)
            if (bytes[i] != (unsigned char)(i * 31u + (unsigned)root)) {
                note(out, "n=%zu broadcast(root %d)[%zu] = %u", n, root, i, bytes[i]);
                break;
            }
    }

    int64_t v = (int64_t)rank * 1000000000000LL + (int64_t)n, want = 0;
    for (int r = 0; r < world; r++)
        want += (int64_t)r * 1000000000000LL + (int64_t)n;
    if ((st = comm_all_reduce_i64(c, &v)) != COMM_OK)
        note(out, "all_reduce_i64: status %d: %s", st, comm_error(c));
    else if (v != want)
        note(out, "all_reduce_i64 = %lld, want %lld", (long long)v, (long long)want);

    if ((st = comm_barrier(c)) != COMM_OK)
        note(out, "barrier: status %d: %s", st, comm_error(c));
out:
    free(buf);
    free(bytes);
    free(own);
}

static void rank_collectives(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    (void)arg;
    comm *c = child_init(rank, world, port, SLOW_TIMEOUT_MS, out);
    if (c == NULL)
        return;
    for (size_t k = 0; k < sizeof COUNTS / sizeof COUNTS[0]; k++)
        check_count(c, COUNTS[k], out);
    /* Checked before the last barrier: a rank that has left counts as lost. */
    if (comm_error(c)[0] != '\0')
        note(out, "comm_error after success: %s", comm_error(c));
    if (world > 1 && !(comm_seconds(c) > 0.0))
        note(out, "comm_seconds = %g after collectives", comm_seconds(c));
    if (comm_barrier(c) != COMM_OK)
        note(out, "final barrier: %s", comm_error(c));
    comm_destroy(c);
}

static void run_world(rank_fn fn, int world, const void *arg, struct rank_result *res)
{
    pid_t pids[MAX_WORLD] = {0};
    spawn_world(fn, world, ty_net_free_port(), arg, res, pids);
    reap(pids, world, REAP_SECONDS, res);
}

/* A child that ran to the end and exited cleanly (sanitizers exit non-zero). */
static void assert_clean_exit(const struct rank_result *r)
{
    assert_true(r->ran);
    assert_true(WIFEXITED(r->exit_status));
    assert_int_equal(WEXITSTATUS(r->exit_status), 0);
}

static void test_collectives(void **state)
{
    (void)state;
    for (int world = 1; world <= 5; world++) {
        struct rank_result *res = results();
        run_world(rank_collectives, world, NULL, res);
        for (int r = 0; r < world; r++) {
            if (res[r].init_status != COMM_OK || res[r].mismatches != 0 || !res[r].ran)
                print_error("world %d rank %d: init %d, ran %d, %ld mismatches: %s\n", world, r,
                            res[r].init_status, res[r].ran, res[r].mismatches, res[r].what);
            assert_int_equal(res[r].init_status, COMM_OK);
            assert_int_equal(res[r].mismatches, 0);
            assert_clean_exit(&res[r]);
        }
    }
}

/* ------------------------------------------------------------------ async */

static void rank_async(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    (void)arg;
    enum { NA = 1023, NB = (1 << 20) + 3, ND = 7 };
    comm *c = child_init(rank, world, port, SLOW_TIMEOUT_MS, out);
    if (c == NULL)
        return;
    float *a = malloc(NA * sizeof *a), *b = malloc(NB * sizeof *b), *g = malloc(NB * sizeof *g);
    float d[ND];
    if (a == NULL || b == NULL || g == NULL) {
        note(out, "out of memory");
        goto out;
    }
    size_t lo = comm_shard_offset(NB, world, rank), hi = lo + comm_shard_count(NB, world, rank);
    for (size_t i = 0; i < NA; i++)
        a[i] = small(rank, i);
    for (size_t i = 0; i < NB; i++) {
        b[i] = small(rank, i);
        g[i] = i >= lo && i < hi ? small(rank, i) : 0.0f;
    }
    for (size_t i = 0; i < ND; i++)
        d[i] = small(rank, i);

    /*
     * Two all-reduces on a (the second sums the first's result), then
     * reduce-scatter + all-gather on b (together an all-reduce): right only
     * if the operations run one after the other in issue order.
     */
    comm_work *w[6] = {0};
    comm_status st[6];
    st[0] = comm_all_reduce_start(c, a, NA, &w[0]);
    st[1] = comm_all_reduce_start(c, a, NA, &w[1]);
    st[2] = comm_reduce_scatter_start(c, b, NB, &w[2]);
    st[3] = comm_all_gather_start(c, b, NB, &w[3]);
    st[4] = comm_all_gather_start(c, g, NB, &w[4]);
    st[5] = comm_all_reduce_start(c, d, ND, &w[5]);
    for (int k = 0; k < 6; k++)
        if (st[k] != COMM_OK || w[k] == NULL)
            note(out, "start %d: status %d", k, st[k]);
    /* A blocking collective issued behind them completes after them. */
    int64_t v = 1;
    comm_status bs = comm_all_reduce_i64(c, &v);
    if (bs != COMM_OK || v != world)
        note(out, "all_reduce_i64 behind async ops: status %d value %lld", bs, (long long)v);
    const int order[6] = {5, 3, 0, 4, 1, 2};
    for (int k = 0; k < 6; k++) {
        int j = order[k];
        if (w[j] != NULL && (st[j] = comm_wait(c, w[j])) != COMM_OK)
            note(out, "op %d: status %d: %s", j, st[j], comm_error(c));
    }
    for (size_t i = 0; i < NA; i++)
        if (a[i] != (float)world * exact_sum(world, i)) {
            note(out, "a[%zu] = %g, want %g", i, a[i], (float)world * exact_sum(world, i));
            break;
        }
    for (size_t i = 0; i < NB; i++)
        if (b[i] != exact_sum(world, i)) {
            note(out, "b[%zu] = %g, want %g", i, b[i], exact_sum(world, i));
            break;
        }
    for (int k = 0; k < world; k++) {
        size_t from = comm_shard_offset(NB, world, k), to = from + comm_shard_count(NB, world, k);
        for (size_t i = from; i < to; i++)
            if (g[i] != small(k, i)) {
                note(out, "g[%zu] = %g, want %g", i, g[i], small(k, i));
                break;
            }
    }
    for (size_t i = 0; i < ND; i++)
        if (d[i] != exact_sum(world, i))
            note(out, "d[%zu] = %g, want %g", i, d[i], exact_sum(world, i));
out:
    free(a);
    free(b);
    free(g);
    comm_destroy(c);
}

static void test_async_in_order(void **state)
{
    (void)state;
    const int worlds[] = {2, 4};
    for (size_t k = 0; k < 2; k++) {
        int world = worlds[k];
        struct rank_result *res = results();
        run_world(rank_async, world, NULL, res);
        for (int r = 0; r < world; r++) {
            if (res[r].mismatches != 0 || res[r].init_status != COMM_OK)
                print_error("world %d rank %d: %s\n", world, r, res[r].what);
            assert_int_equal(res[r].init_status, COMM_OK);
            assert_int_equal(res[r].mismatches, 0);
            assert_clean_exit(&res[r]);
        }
    }
}

/* ---------------------------------------------------------------- failure */

enum fail_mode {
    KILL_IN_OP,   /* the parent SIGKILLs the victim while collectives run */
    KILL_IDLE,    /* the victim SIGKILLs itself between collectives */
    HANG_SLEEP,   /* the victim's main thread sleeps instead of the next collective */
    HANG_STOPPED, /* the parent SIGSTOPs the victim while collectives run */
};

struct fail_case {
    const char *name;
    int world, victim;
    enum fail_mode mode;
};

static const struct fail_case FAIL_CASES[] = {
    {"killed in op, world 5", 5, 3, KILL_IN_OP},
    {"killed in op, world 2", 2, 1, KILL_IN_OP},
    {"rank 0 killed between ops, world 4", 4, 0, KILL_IDLE},
    {"main thread asleep, world 5", 5, 3, HANG_SLEEP},
    {"process stopped, world 3", 3, 1, HANG_STOPPED},
};

enum { FAIL_N = 1 << 18 };

static void rank_failure(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    const struct fail_case *fc = arg;
    comm *c = child_init(rank, world, port, FAIL_TIMEOUT_MS, out);
    float *buf = calloc(FAIL_N, sizeof *buf);
    if (c == NULL || buf == NULL)
        goto out;
    out->status = comm_all_reduce(c, buf, FAIL_N);
    if (out->status != COMM_OK) {
        note(out, "first all_reduce: %s", comm_error(c));
        goto out;
    }
    out->ready = 1;
    if (rank == fc->victim) {
        if (fc->mode == KILL_IDLE)
            raise(SIGKILL);
        if (fc->mode == HANG_SLEEP)
            for (;;)
                sleep_ms(1000);
    } else if (fc->mode == KILL_IDLE) {
        sleep_ms(300); /* "computing" while the victim dies */
    }
    double end = now_s() + 30.0;
    do
        out->status = comm_all_reduce(c, buf, FAIL_N);
    while (out->status == COMM_OK && now_s() < end);
    snprintf(out->err, sizeof out->err, "%s", comm_error(c));
    out->later_status = comm_barrier(c);
out:
    free(buf);
    comm_destroy(c);
}

static void test_lost_rank(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof FAIL_CASES / sizeof FAIL_CASES[0]; k++) {
        const struct fail_case *fc = &FAIL_CASES[k];
        struct rank_result *res = results();
        pid_t pids[MAX_WORLD] = {0}, victim;
        spawn_world(rank_failure, fc->world, ty_net_free_port(), fc, res, pids);
        victim = pids[fc->victim];

        double deadline = now_s() + 30.0;
        int ready = 0;
        while (ready < fc->world && now_s() < deadline) {
            ready = 0;
            for (int r = 0; r < fc->world; r++)
                ready += res[r].ready;
            sleep_ms(5);
        }
        if (fc->mode == KILL_IN_OP || fc->mode == HANG_STOPPED) {
            sleep_ms(100);
            kill(victim, fc->mode == KILL_IN_OP ? SIGKILL : SIGSTOP);
        }
        pids[fc->victim] = 0;
        reap(pids, fc->world, REAP_SECONDS, res);
        kill(victim, SIGKILL);
        waitpid(victim, NULL, 0);

        char want[32];
        snprintf(want, sizeof want, "rank %d (", fc->victim);
        for (int r = 0; r < fc->world; r++) {
            if (r == fc->victim)
                continue;
            if (res[r].status != COMM_ELOST || strstr(res[r].err, want) == NULL)
                print_error("%s: rank %d: ready %d, status %d, error \"%s\" %s\n", fc->name, r,
                            res[r].ready, res[r].status, res[r].err, res[r].what);
            assert_true(res[r].ready);
            assert_clean_exit(&res[r]);
            assert_int_equal(res[r].status, COMM_ELOST);
            assert_non_null(strstr(res[r].err, want));
            assert_non_null(strstr(res[r].err, " lost: "));
            /* Failure is sticky: later collectives fail at once. */
            assert_int_equal(res[r].later_status, COMM_ELOST);
        }
    }
}

/* ------------------------------------------------------------- rendezvous */

static void rank_mismatch(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    (void)arg;
    /* Rank 1 belongs to a job of a different size. */
    comm *c = child_init(rank, rank == 0 ? world : world + 1, port, 5000, out);
    comm_destroy(c);
}

static void test_rendezvous_mismatch(void **state)
{
    (void)state;
    struct rank_result *res = results();
    run_world(rank_mismatch, 2, NULL, res);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(res[r].init_status, COMM_ESETUP);
        assert_non_null(strstr(res[r].what, "world size 3, expected 2"));
        assert_clean_exit(&res[r]);
    }
}

/* A rank whose secret is arg (NULL: none) that joins and passes one barrier. */
static void rank_plain(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    comm *c = child_init_secret(rank, world, port, 10000, arg, out);
    if (c != NULL)
        out->status = comm_barrier(c);
    comm_destroy(c);
}

/* A connection to 127.0.0.1:port, waiting for its listener (up to 5 s). */
static int connect_to(int port)
{
    int fd = -1;
    for (int tries = 0; tries < 500 && fd < 0; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            sleep_ms(10);
        }
    }
    assert_true(fd >= 0);
    /* A rank 0 that never answers fails the test instead of hanging it. */
    struct timeval tv = {REAP_SECONDS, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    return fd;
}

/* Without a secret (a rank started by hand), garbage is still dropped. */
static void test_rendezvous_ignores_strangers(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port();
    pid_t pids[2];
    pids[0] = spawn_rank(rank_plain, 0, 2, port, NULL, res);

    /* Something that is not a rank connects first and sends garbage. */
    int fd = connect_to(port);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(send(fd, junk, sizeof junk - 1, 0), (ssize_t)(sizeof junk - 1));

    pids[1] = spawn_rank(rank_plain, 1, 2, port, NULL, res);
    reap(pids, 2, REAP_SECONDS, res);
    close(fd);
    for (int r = 0; r < 2; r++) {
        if (res[r].init_status != COMM_OK)
            print_error("rank %d: %s\n", r, res[r].what);
        assert_int_equal(res[r].init_status, COMM_OK);
        assert_int_equal(res[r].status, COMM_OK);
        assert_clean_exit(&res[r]);
    }
}

/* ------------------------------------------------- strangers and secrets */

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void header(unsigned char *h, uint32_t version, uint32_t kind, uint32_t world, uint32_t rank,
                   uint32_t port)
{
    put_be32(h, RDV_MAGIC);
    put_be32(h + 4, version);
    put_be32(h + 8, kind);
    put_be32(h + 12, world);
    put_be32(h + 16, rank);
    put_be32(h + 20, port);
}

/* Bytes a stranger makes up: it does not know the secret. */
static void made_up(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(mix((uint32_t)(seed * 7919u + i)) >> 7);
}

static void send_all(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/*
 * True once the peer has closed fd without sending anything more. A reset counts: rank 0
 * closing a connection whose bytes it did not read (a stranger that answered after its
 * handshake time ran out, as on a loaded machine) resets it instead of ending it.
 */
static bool closed_silently(int fd)
{
    unsigned char b[RDV_MAC_BYTES];
    ssize_t r = recv(fd, b, sizeof b, MSG_WAITALL);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* True once rank 0 has challenged fd, had no answer in time, and closed it. */
static bool challenged_then_closed(int fd)
{
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES];
    return recv(fd, ch, sizeof ch, MSG_WAITALL) == (ssize_t)sizeof ch && closed_silently(fd);
}

/*
 * A stranger that speaks the protocol: reads rank 0's challenge, answers with a hello of
 * world size `world` as rank 1 and a made-up proof. Returns whether rank 0 closed the
 * connection without a proof of its own (and so without admitting it).
 */
static bool stranger_refused(int fd, uint32_t world, unsigned seed)
{
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES], want[RDV_HEADER_BYTES];
    assert_int_equal(recv(fd, ch, sizeof ch, MSG_WAITALL), (ssize_t)sizeof ch);
    header(want, RDV_VERSION, RDV_CHALLENGE, 3, 0, RDV_REGISTER);
    assert_memory_equal(ch, want, sizeof want);
    unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES];
    header(b, RDV_VERSION, RDV_REGISTER, world, 1, 40000);
    made_up(b + RDV_HEADER_BYTES, RDV_NONCE_BYTES + RDV_MAC_BYTES, seed);
    send_all(fd, b, sizeof b);
    return closed_silently(fd);
}

/*
 * Strangers reach rank 0's port before the real ranks: garbage, one that says
 * nothing, a hello of the old unauthenticated protocol with a bad world size, a
 * hello with a made-up proof, and one with a bad world size and a made-up proof.
 * Each is closed; the gang forms all the same and its collectives are right.
 */
static void test_strangers_cost_nothing(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port(), world = 3;
    pid_t pids[3];
    pids[0] = spawn_rank(rank_collectives, 0, world, port, NULL, res);

    int garbage = connect_to(port), silent = connect_to(port), old = connect_to(port);
    int wrong_proof = connect_to(port), bad_world = connect_to(port);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(garbage, junk, sizeof junk - 1);
    unsigned char v1[RDV_HEADER_BYTES];
    header(v1, 1, RDV_REGISTER, 99, 1, 40000);
    send_all(old, v1, sizeof v1);
    /* The real ranks queue behind the strangers. */
    for (int r = 1; r < world; r++)
        pids[r] = spawn_rank(rank_collectives, r, world, port, NULL, res);
    assert_true(stranger_refused(wrong_proof, (uint32_t)world, 1));
    assert_true(stranger_refused(bad_world, 99, 2));

    reap(pids, world, REAP_SECONDS, res);
    for (int r = 0; r < world; r++) {
        if (res[r].init_status != COMM_OK || res[r].mismatches != 0)
            print_error("rank %d: %s\n", r, res[r].what);
        assert_int_equal(res[r].init_status, COMM_OK);
        assert_int_equal(res[r].mismatches, 0);
        assert_clean_exit(&res[r]);
    }
    /* Closed by rank 0, not by the end of the test. */
    assert_true(challenged_then_closed(silent));
    assert_true(challenged_then_closed(old));
    int fds[] = {garbage, silent, old, wrong_proof, bad_world};
    for (size_t k = 0; k < sizeof fds / sizeof fds[0]; k++)
        close(fds[k]);
}

/*
 * A stranger that trickles a hello one byte a second (88 s in all) holds rank 0 for at most
 * its handshake timeout, not a timeout per byte: the gang, whose rendezvous timeout is 10 s,
 * forms behind it. The stranger is a child, so that the parent can wait for the ranks.
 */
static void test_trickling_stranger_cannot_hold_rank0(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port();
    pid_t pids[3] = {0};
    pids[0] = spawn_rank(rank_plain, 0, 2, port, SECRET, res);
    int fd = connect_to(port);
    fflush(NULL);
    pid_t trickler = fork();
    assert_true(trickler >= 0);
    if (trickler == 0) {
        unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES];
        header(b, RDV_VERSION, RDV_REGISTER, 2, 1, 40000);
        made_up(b + RDV_HEADER_BYTES, sizeof b - RDV_HEADER_BYTES, 5);
        for (size_t i = 0; i < sizeof b; i++) {
            if (send(fd, b + i, 1, MSG_NOSIGNAL) != 1)
                break; /* closed by rank 0 */
            sleep_ms(1000);
        }
        _exit(0);
    }
    pids[1] = spawn_rank(rank_plain, 1, 2, port, SECRET, res);
    reap(pids, 2, REAP_SECONDS, res);
    kill(trickler, SIGKILL);
    waitpid(trickler, NULL, 0);
    close(fd);
    for (int r = 0; r < 2; r++) {
        if (res[r].init_status != COMM_OK)
            print_error("rank %d: %s\n", r, res[r].what);
        assert_int_equal(res[r].init_status, COMM_OK);
        assert_int_equal(res[r].status, COMM_OK);
        assert_clean_exit(&res[r]);
    }
}

/*
 * Thirty strangers connect to rank 0's port before the real rank and say nothing. Their
 * handshakes run side by side, so the gang forms within its 10 s rendezvous timeout
 * (one after the other they would take 60 s); each is challenged, then closed.
 */
static void test_silent_crowd_delays_nobody(void **state)
{
    (void)state;
    enum { CROWD = 30 };
    struct rank_result *res = results();
    int port = ty_net_free_port(), crowd[CROWD];
    pid_t pids[2] = {0};
    pids[0] = spawn_rank(rank_plain, 0, 2, port, SECRET, res);
    for (int k = 0; k < CROWD; k++)
        crowd[k] = connect_to(port);
    pids[1] = spawn_rank(rank_plain, 1, 2, port, SECRET, res);
    reap(pids, 2, REAP_SECONDS, res);
    for (int r = 0; r < 2; r++) {
        if (res[r].init_status != COMM_OK)
            print_error("rank %d: %s\n", r, res[r].what);
        assert_int_equal(res[r].init_status, COMM_OK);
        assert_int_equal(res[r].status, COMM_OK);
        assert_clean_exit(&res[r]);
    }
    for (int k = 0; k < CROWD; k++) {
        assert_true(challenged_then_closed(crowd[k]));
        close(crowd[k]);
    }
}

/* ------------------------------------------ the wire, from rendezvous.h */

/* HMAC-SHA256(SECRET, context || nonce || header), as rendezvous.h writes it. */
static void proof(const unsigned char *nonce, const unsigned char *hdr, unsigned char *out)
{
    unsigned char in[sizeof RDV_CONTEXT - 1 + RDV_NONCE_BYTES + RDV_HEADER_BYTES];
    memcpy(in, RDV_CONTEXT, sizeof RDV_CONTEXT - 1);
    memcpy(in + sizeof RDV_CONTEXT - 1, nonce, RDV_NONCE_BYTES);
    memcpy(in + sizeof RDV_CONTEXT - 1 + RDV_NONCE_BYTES, hdr, RDV_HEADER_BYTES);
    assert_int_equal(ty_hmac_sha256(SECRET, strlen(SECRET), in, sizeof in, out), TY_OK);
}

static void recv_all(int fd, void *p, size_t n)
{
    assert_int_equal(recv(fd, p, n, MSG_WAITALL), (ssize_t)n);
}

/*
 * Dialer's side of a handshake with a peer that must answer as rank `peer` for links of
 * kind: checks its challenge, sends our hello and proof, checks its proof.
 */
static void dial_handshake(int fd, uint32_t kind, uint32_t rank, uint32_t port, uint32_t peer)
{
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES], want[RDV_HEADER_BYTES];
    unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES], mac[RDV_MAC_BYTES];
    recv_all(fd, ch, sizeof ch);
    header(want, RDV_VERSION, RDV_CHALLENGE, 2, peer, kind);
    assert_memory_equal(ch, want, sizeof want);
    header(b, RDV_VERSION, kind, 2, rank, port);
    made_up(b + RDV_HEADER_BYTES, RDV_NONCE_BYTES, 7); /* our nonce */
    proof(ch + RDV_HEADER_BYTES, b, b + RDV_HEADER_BYTES + RDV_NONCE_BYTES);
    send_all(fd, b, sizeof b);
    recv_all(fd, mac, sizeof mac);
    unsigned char expect[RDV_MAC_BYTES];
    proof(b + RDV_HEADER_BYTES, ch, expect);
    assert_memory_equal(mac, expect, sizeof mac);
}

/* A rank that only forms the gang and leaves. */
static void rank_init_only(int rank, int world, int port, const void *arg, struct rank_result *out)
{
    comm *c = child_init_secret(rank, world, port, 10000, arg, out);
    comm_destroy(c);
}

/*
 * The test plays rank 1 of a gang of two by the wire of rendezvous.h alone, with the
 * secret: it registers with rank 0 (checking rank 0's proof), reads the table, and before
 * forming the ring sends two strangers to rank 0's ring listener: garbage, and a ring
 * hello as rank 1 with a made-up proof. Both are closed, and the ring forms with the
 * real rank 1 all the same, both links authenticated both ways.
 */
static void test_ring_strangers_cost_nothing(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port();
    pid_t pids[1];
    pids[0] = spawn_rank(rank_init_only, 0, 2, port, SECRET, res);

    /* Our ring listener, made after the fork: rank 0 must not hold a copy of it. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 8), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    uint32_t ring_port = ntohs(a.sin_port);

    int reg = connect_to(port);
    dial_handshake(reg, RDV_REGISTER, 1, ring_port, 0);
    unsigned char head[RDV_HEADER_BYTES], want[RDV_HEADER_BYTES];
    unsigned char table[2 * (RDV_HOST_MAX + 4)];
    recv_all(reg, head, sizeof head);
    header(want, RDV_VERSION, RDV_TABLE, 2, 0, 0);
    assert_memory_equal(head, want, sizeof want);
    recv_all(reg, table, sizeof table);
    const unsigned char *e0 = table;
    int port0 = (int)((uint32_t)e0[RDV_HOST_MAX] << 24 | (uint32_t)e0[RDV_HOST_MAX + 1] << 16 |
                      (uint32_t)e0[RDV_HOST_MAX + 2] << 8 | e0[RDV_HOST_MAX + 3]);
    assert_string_equal((const char *)e0, "127.0.0.1");

    /* Strangers at rank 0's ring listener, ahead of us. */
    int garbage = connect_to(port0), impostor = connect_to(port0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(garbage, junk, sizeof junk - 1);
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES];
    unsigned char b[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES];
    recv_all(impostor, ch, sizeof ch);
    header(b, RDV_VERSION, RDV_RING, 2, 1, 0);
    made_up(b + RDV_HEADER_BYTES, RDV_NONCE_BYTES + RDV_MAC_BYTES, 8);
    send_all(impostor, b, sizeof b);
    assert_true(closed_silently(impostor));

    /* Our link to our successor, rank 0. */
    int to0 = connect_to(port0);
    dial_handshake(to0, RDV_RING, 1, 0, 0);
    /* Rank 0's link to its successor, us: we challenge it, it must prove the secret. */
    int from0 = accept(lfd, NULL, NULL);
    assert_true(from0 >= 0);
    struct timeval tv = {REAP_SECONDS, 0};
    assert_int_equal(setsockopt(from0, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    header(ch, RDV_VERSION, RDV_CHALLENGE, 2, 1, RDV_RING);
    made_up(ch + RDV_HEADER_BYTES, RDV_NONCE_BYTES, 9);
    send_all(from0, ch, sizeof ch);
    recv_all(from0, b, sizeof b);
    header(want, RDV_VERSION, RDV_RING, 2, 0, 0);
    assert_memory_equal(b, want, sizeof want);
    unsigned char mac[RDV_MAC_BYTES];
    proof(ch + RDV_HEADER_BYTES, b, mac);
    assert_memory_equal(b + RDV_HEADER_BYTES + RDV_NONCE_BYTES, mac, sizeof mac);
    proof(b + RDV_HEADER_BYTES, ch, mac);
    send_all(from0, mac, sizeof mac);

    reap(pids, 1, REAP_SECONDS, res);
    if (res[0].init_status != COMM_OK)
        print_error("rank 0: %s\n", res[0].what);
    assert_int_equal(res[0].init_status, COMM_OK);
    assert_clean_exit(&res[0]);
    assert_true(challenged_then_closed(garbage));
    int fds[] = {lfd, reg, garbage, impostor, to0, from0};
    for (size_t k = 0; k < sizeof fds / sizeof fds[0]; k++)
        close(fds[k]);
}

/* Rank 1 of a gang of world ranks, with a secret that is not the gang's; its result in slot. */
static pid_t spawn_impostor(int world, int port, int timeout_ms, struct rank_result *slot)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        comm *c = child_init_secret(1, world, port, timeout_ms, WRONG_SECRET, slot);
        comm_destroy(c);
        slot->ran = 1;
        exit(0);
    }
    return pid;
}

/* A rank with the wrong secret is refused and fails; the real gang forms without it. */
static void test_wrong_secret_refused(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port(), world = 3;
    pid_t pids[4] = {0};
    pids[0] = spawn_rank(rank_plain, 0, world, port, SECRET, res);
    pids[3] = spawn_impostor(world, port, 3000, &res[3]);
    sleep_ms(200); /* usually the impostor knocks first; either order must work */
    for (int r = 1; r < world; r++)
        pids[r] = spawn_rank(rank_plain, r, world, port, SECRET, res);
    reap(pids, 4, REAP_SECONDS, res);
    for (int r = 0; r < world; r++) {
        if (res[r].init_status != COMM_OK)
            print_error("rank %d: %s\n", r, res[r].what);
        assert_int_equal(res[r].init_status, COMM_OK);
        assert_int_equal(res[r].status, COMM_OK);
        assert_clean_exit(&res[r]);
    }
    assert_clean_exit(&res[3]);
    assert_int_equal(res[3].init_status, COMM_ESETUP);
    assert_non_null(strstr(res[3].what, "refused our proof"));

    /* Alone, the impostor fails the gang it cannot join, which says why. */
    res = results();
    port = ty_net_free_port();
    memset(pids, 0, sizeof pids);
    pids[0] = spawn_rank(rank_plain, 0, 2, port, SECRET, res);
    pids[1] = spawn_impostor(2, port, 2000, &res[1]);
    reap(pids, 2, REAP_SECONDS, res);
    assert_int_equal(res[0].init_status, COMM_ESETUP);
    assert_non_null(strstr(res[0].what, "only 1 of 2 ranks joined"));
    assert_non_null(strstr(res[0].what, "refused (no proof of the rendezvous secret)"));
    assert_int_equal(res[1].init_status, COMM_ESETUP);
    assert_non_null(strstr(res[1].what, "refused our proof"));
}

/* Something that listens on MASTER_PORT first cannot pose as rank 0. */
static void test_fake_rank0_refused(void **state)
{
    (void)state;
    struct rank_result *res = results();
    int port = ty_net_free_port();
    pid_t pids[2] = {0};
    /* Forked before the listener exists, so that the rank holds no copy of it. */
    pids[1] = spawn_rank(rank_plain, 1, 2, port, SECRET, res);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    assert_int_equal(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 8), 0);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    close(lfd); /* the rank dials again, finds nobody, and gives up */
    struct timeval tv = {REAP_SECONDS, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    unsigned char ch[RDV_HEADER_BYTES + RDV_NONCE_BYTES];
    header(ch, RDV_VERSION, RDV_CHALLENGE, 2, 0, RDV_REGISTER);
    made_up(ch + RDV_HEADER_BYTES, RDV_NONCE_BYTES, 3);
    send_all(fd, ch, sizeof ch);
    unsigned char hello[RDV_HEADER_BYTES + RDV_NONCE_BYTES + RDV_MAC_BYTES], proof[RDV_MAC_BYTES];
    assert_int_equal(recv(fd, hello, sizeof hello, MSG_WAITALL), (ssize_t)sizeof hello);
    made_up(proof, sizeof proof, 4);
    send_all(fd, proof, sizeof proof);
    reap(pids, 2, REAP_SECONDS, res);
    close(fd);
    assert_clean_exit(&res[1]);
    assert_int_equal(res[1].init_status, COMM_ESETUP);
    assert_non_null(strstr(res[1].what, "did not prove the rendezvous secret"));
}

static void test_rendezvous_timeout(void **state)
{
    (void)state;
    comm_config cfg = {1, 2, "127.0.0.1", ty_net_free_port(), 300, NULL, 0};
    comm *c = NULL;
    char err[256] = "";
    assert_int_equal(comm_init(&cfg, &c, err, sizeof err), COMM_ESETUP);
    assert_null(c);
    assert_non_null(strstr(err, "cannot connect to 127.0.0.1:"));
}

/* ------------------------------------------------------------ local cases */

static void test_shard_rule(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        int world, rank;
        size_t offset, count;
    } cases[] = {
        {10, 3, 0, 0, 4}, {10, 3, 1, 4, 3}, {10, 3, 2, 7, 3},
        {2, 5, 0, 0, 1},  {2, 5, 1, 1, 1},  {2, 5, 2, 2, 0}, {2, 5, 4, 2, 0},
        {0, 4, 3, 0, 0},  {9, 1, 0, 0, 9},  {12, 4, 3, 9, 3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        assert_int_equal(comm_shard_offset(cases[k].n, cases[k].world, cases[k].rank), cases[k].offset);
        assert_int_equal(comm_shard_count(cases[k].n, cases[k].world, cases[k].rank), cases[k].count);
    }
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    comm *c = NULL;
    char err[256];
    static const comm_config bad[] = {
        {0, 0, "127.0.0.1", 1234, 0, NULL, 0},
        {2, 2, "127.0.0.1", 1234, 0, NULL, 0},
        {-1, 2, "127.0.0.1", 1234, 0, NULL, 0},
        {1, 2, NULL, 1234, 0, NULL, 0},
        {1, 2, "127.0.0.1", 0, 0, NULL, 0},
        {0, 1, NULL, 0, -5, NULL, 0},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(comm_init(&bad[k], &c, err, sizeof err), COMM_EINVAL);
        assert_null(c);
    }
    assert_int_equal(comm_init(NULL, &c, err, sizeof err), COMM_EINVAL);

    comm_config one = {0, 1, NULL, 0, 0, NULL, 0};
    assert_int_equal(comm_init(&one, &c, err, sizeof err), COMM_OK);
    float x = 1;
    comm_work *w = NULL;
    assert_int_equal(comm_broadcast(c, &x, sizeof x, 1), COMM_EINVAL);
    assert_int_equal(comm_all_reduce(c, NULL, 4), COMM_EINVAL);
    assert_int_equal(comm_all_reduce_start(c, &x, 1, NULL), COMM_EINVAL);
    assert_int_equal(comm_wait(c, NULL), COMM_EINVAL);
    assert_int_equal(comm_all_reduce_start(NULL, &x, 1, &w), COMM_EINVAL);
    assert_null(w);
    comm_destroy(c);
    comm_destroy(NULL);
}

/* The handshake's proofs are HMAC-SHA256 (RFC 4231, test case 2), empty keys included. */
static void test_proof_primitive(void **state)
{
    (void)state;
    static const unsigned char want[TY_SHA256_LEN] = {
        0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
        0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    static const char data[] = "what do ya want for nothing?";
    unsigned char mac[TY_SHA256_LEN], again[TY_SHA256_LEN];
    assert_int_equal(ty_hmac_sha256("Jefe", 4, data, sizeof data - 1, mac), TY_OK);
    assert_memory_equal(mac, want, sizeof want);
    assert_int_equal(ty_hmac_sha256(NULL, 0, data, sizeof data - 1, mac), TY_OK);
    assert_int_equal(ty_hmac_sha256("", 0, data, sizeof data - 1, again), TY_OK);
    assert_memory_equal(mac, again, sizeof mac);
    assert_memory_not_equal(mac, want, sizeof want);
}

/* A world of one needs no network and changes nothing. */
static void test_world_of_one(void **state)
{
    (void)state;
    comm_config one = {0, 1, NULL, 0, 0, NULL, 0};
    comm *c = NULL;
    assert_int_equal(comm_init(&one, &c, NULL, 0), COMM_OK);
    assert_int_equal(comm_rank(c), 0);
    assert_int_equal(comm_world(c), 1);
    float buf[5] = {1, 2, 3, 4, 5};
    comm_work *w = NULL;
    assert_int_equal(comm_all_reduce(c, buf, 5), COMM_OK);
    assert_int_equal(comm_reduce_scatter(c, buf, 5), COMM_OK);
    assert_int_equal(comm_all_gather(c, buf, 5), COMM_OK);
    assert_int_equal(comm_all_reduce_start(c, buf, 5, &w), COMM_OK);
    assert_int_equal(comm_wait(c, w), COMM_OK);
    assert_int_equal(comm_broadcast(c, buf, sizeof buf, 0), COMM_OK);
    for (int i = 0; i < 5; i++)
        assert_true(buf[i] == (float)(i + 1));
    int64_t v = -7;
    assert_int_equal(comm_all_reduce_i64(c, &v), COMM_OK);
    assert_int_equal(v, -7);
    assert_int_equal(comm_barrier(c), COMM_OK);
    assert_string_equal(comm_error(c), "");
    /* Issued and never waited for: comm_destroy frees it. */
    assert_int_equal(comm_all_gather_start(c, buf, 5, &w), COMM_OK);
    comm_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_rule),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_proof_primitive),
        cmocka_unit_test(test_rendezvous_timeout),
        cmocka_unit_test(test_rendezvous_mismatch),
        cmocka_unit_test(test_rendezvous_ignores_strangers),
        cmocka_unit_test(test_strangers_cost_nothing),
        cmocka_unit_test(test_trickling_stranger_cannot_hold_rank0),
        cmocka_unit_test(test_silent_crowd_delays_nobody),
        cmocka_unit_test(test_ring_strangers_cost_nothing),
        cmocka_unit_test(test_wrong_secret_refused),
        cmocka_unit_test(test_fake_rank0_refused),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_async_in_order),
        cmocka_unit_test(test_lost_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
