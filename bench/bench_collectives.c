/*
 * bench_collectives.c - ring all-reduce, reduce-scatter and all-gather of
 * runtime/comm.c against plain TCP on the loopback interface.
 *
 * Ranks are processes on 127.0.0.1. Figures follow nccl-tests: for a buffer of
 * S bytes and time t per operation, algbw = S / t; busbw = algbw * 2(W-1)/W
 * for all-reduce and algbw * (W-1)/W for reduce-scatter and all-gather, the
 * rate at which every rank's link has to move data.
 *
 * Two references use the same socket options and buffer sizes, measured by
 * the same rank processes over a second ring of plain TCP sockets:
 *   tcp1  rank 0 sends S bytes to rank 1, which acknowledges each buffer;
 *         one sender, one receiver, one stream, the other ranks idle;
 *   tcpW  every rank sends to the next while receiving from the previous
 *         (the ring's traffic without framing, pipelining or reduction); the
 *         figure is the rate of one stream while all W run.
 * On loopback the copies are done by the CPUs: with fewer than about 2W free
 * cores the W streams compete for them and tcpW < tcp1, so tcpW is the
 * ceiling for a ring on this machine. A second table gives CPU time per byte
 * of link traffic, which stays comparable when the CPUs are shared.
 *
 * For every size, the references and the collectives are measured in turn
 * (one warm-up run, then enough runs for -t seconds), the whole round -r
 * times; each figure is the best round (per round, the slowest rank). On a
 * shared machine this keeps a burst of outside load from deciding a ratio.
 *
 *   bench_collectives [-w 2,4] [-b 4K] [-e 256M] [-f 4] [-t 0.2] [-r 3]
 */
#define _GNU_SOURCE /* accept4 */

#include "common/ty_net.h"
#include "runtime/comm.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 16
#define MAX_SIZES 32
/* The same socket set-up as runtime/comm.c, so that the references are fair. */
#define SOCK_BUF_BYTES (256 * 1024)

struct options {
    int worlds[MAX_WORLD];
    int nworlds;
    size_t sizes[MAX_SIZES];
    int nsizes;
    double target_s; /* timed seconds per measurement */
    int reps;        /* repetitions; the best is reported */
};

enum { M_TCP1, M_TCPW, M_AR, M_RS, M_AG, NMEAS };
#define MAX_REPS 8

/* Shared between the bench and its rank processes. */
struct shared {
    /* Mean seconds per operation (per transfer for the references), per rank. */
    double t[NMEAS][MAX_SIZES][MAX_REPS][MAX_WORLD];
    /* CPU seconds (all threads of the rank's process) per operation, per rank. */
    double cpu[NMEAS][MAX_SIZES][MAX_REPS][MAX_WORLD];
    int failed;
    char err[320];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- sockets */

static void tune(int fd)
{
    int one = 1, bytes = SOCK_BUF_BYTES;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    return a;
}

/* A listening socket on 127.0.0.1 with an ephemeral port; -1 on error. */
static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    tune(fd);
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    tune(fd);
    struct sockaddr_in a = loopback(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
    char *b = p;
    while (n > 0) {
        ssize_t k = recv(fd, b, n, MSG_WAITALL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------- one rank */

struct rank_ctx {
    comm *c;
    int rank, world;
    int next, prev;   /* plain TCP ring beside the comm's own, for the references */
    float *buf;       /* collectives; also what the references send */
    char *in;         /* what the references receive */
};

struct sender_arg {
    int fd;
    const void *buf;
    size_t bytes;
    int64_t iters;
    int rc;
};

static void *send_main(void *arg)
{
    struct sender_arg *s = arg;
    for (int64_t i = 0; i < s->iters && s->rc == 0; i++)
        s->rc = send_all(s->fd, s->buf, s->bytes);
    return NULL;
}

/*
 * One run of measurement m on `bytes`, repeated iters times. tcp1: rank 0
 * sends to rank 1, which acknowledges each buffer (the others wait); tcpW:
 * every rank sends to the next while receiving from the previous.
 */
static int run_meas(struct rank_ctx *x, int m, size_t bytes, int64_t iters)
{
    size_t n = bytes / sizeof(float);
    char ack = 1;
    int rc = 0;
    switch (m) {
    case M_TCP1:
        for (int64_t i = 0; i < iters && rc == 0; i++) {
            if (x->rank == 0)
                rc = send_all(x->next, x->buf, bytes) || recv_all(x->next, &ack, 1);
            else if (x->rank == 1)
                rc = recv_all(x->prev, x->in, bytes) || send_all(x->prev, &ack, 1);
        }
        return rc;
    case M_TCPW: {
        struct sender_arg s = {x->next, x->buf, bytes, iters, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, send_main, &s) != 0)
            return -1;
        for (int64_t i = 0; i < iters && rc == 0; i++)
            rc = recv_all(x->prev, x->in, bytes);
        pthread_join(t, NULL);
        return rc || s.rc;
    }
    case M_AR: return comm_all_reduce(x->c, x->buf, n) != COMM_OK;
    case M_RS: return comm_reduce_scatter(x->c, x->buf, n) != COMM_OK;
    default: return comm_all_gather(x->c, x->buf, n) != COMM_OK;
    }
}

/* Wraps run_meas for collectives, which run once per call. */
static int run_many(struct rank_ctx *x, int m, size_t bytes, int64_t iters)
{
    if (m == M_TCP1 || m == M_TCPW)
        return run_meas(x, m, bytes, iters);
    for (int64_t i = 0; i < iters; i++)
        if (run_meas(x, m, bytes, 1) != 0)
            return -1;
    return 0;
}

/* Warm-up, agree on an iteration count, then time. Returns seconds per op. */
static double timed(struct rank_ctx *x, const struct options *o, int m, size_t bytes, double *cpu,
                    int *rc)
{
    double t0 = now_s();
    *rc = run_many(x, m, bytes, 1);
    double warm = now_s() - t0;
    /* Rank 0 takes part in every measurement; its estimate decides for all. */
    int64_t iters = warm > 0 ? (int64_t)(o->target_s / warm) : 1;
    iters = iters < 1 ? 1 : iters > 2000 ? 2000 : iters;
    if (*rc == 0 && comm_broadcast(x->c, &iters, sizeof iters, 0) != COMM_OK)
        *rc = -1;
    if (*rc == 0 && comm_barrier(x->c) != COMM_OK)
        *rc = -1;
    double c0 = cpu_s();
    t0 = now_s();
    if (*rc == 0)
        *rc = run_many(x, m, bytes, iters);
    double t = (now_s() - t0) / (double)iters;
    *cpu = (cpu_s() - c0) / (double)iters;
    return t;
}

/* The reference ring: rank r's next is r+1; ports travel by broadcast. */
static int connect_reference_ring(struct rank_ctx *x)
{
    int port = 0, lfd = listen_loopback(&port), rc = -1;
    int64_t ports[MAX_WORLD];
    if (lfd < 0)
        return -1;
    for (int r = 0; r < x->world; r++) {
        ports[r] = port;
        if (comm_broadcast(x->c, &ports[r], sizeof ports[r], r) != COMM_OK)
            goto out;
    }
    x->next = connect_loopback((int)ports[(x->rank + 1) % x->world]);
    x->prev = accept(lfd, NULL, NULL);
    if (x->next >= 0 && x->prev >= 0) {
        tune(x->prev);
        rc = 0;
    }
out:
    close(lfd);
    return rc;
}

static void bench_rank(const struct options *o, int rank, int world, int port, struct shared *sh)
{
    comm_config cfg = {rank, world, "127.0.0.1", port, 120000, NULL, 0};
    struct rank_ctx x = {NULL, rank, world, -1, -1, NULL, NULL};
    char err[256] = "";
    size_t max_bytes = o->sizes[o->nsizes - 1];
    x.buf = malloc(max_bytes);
    x.in = malloc(max_bytes);
    if (x.buf == NULL || x.in == NULL || comm_init(&cfg, &x.c, err, sizeof err) != COMM_OK ||
        connect_reference_ring(&x) != 0) {
        snprintf(sh->err, sizeof sh->err, "rank %d: set-up failed: %s", rank, err);
        sh->failed = 1;
        goto out;
    }
    /* Zeros stay zeros however often they are summed: no overflow, no denormals. */
    memset(x.buf, 0, max_bytes);
    memset(x.in, 0, max_bytes);
    for (int k = 0; k < o->nsizes; k++) {
        for (int rep = 0; rep < o->reps; rep++) {
            for (int m = 0; m < NMEAS; m++) {
                int rc;
                double cpu;
                double t = timed(&x, o, m, o->sizes[k], &cpu, &rc);
                if (rc != 0) {
                    snprintf(sh->err, sizeof sh->err, "rank %d: measurement %d: %s", rank, m,
                             comm_error(x.c));
                    sh->failed = 1;
                    goto out;
                }
                sh->t[m][k][rep][rank] = t;
                sh->cpu[m][k][rep][rank] = cpu;
            }
        }
    }
out:
    if (x.next >= 0)
        close(x.next);
    if (x.prev >= 0)
        close(x.prev);
    comm_destroy(x.c);
    free(x.buf);
    free(x.in);
}

static int measure_world(const struct options *o, int world, struct shared *sh)
{
    pid_t pids[MAX_WORLD];
    int port = ty_net_free_port();
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            bench_rank(o, r, world, port, sh);
            _exit(0);
        }
    }
    for (int r = 0; r < world; r++)
        if (pids[r] > 0)
            waitpid(pids[r], NULL, 0);
    return sh->failed ? -1 : 0;
}

/* ----------------------------------------------------------------- report */

static void print_size(size_t bytes)
{
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        printf("%7zu MiB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        printf("%7zu KiB", bytes >> 10);
    else
        printf("%9zu B", bytes);
}

/* Seconds of measurement m: the slowest rank of each repetition, best repetition. */
static double best_time(const struct options *o, const struct shared *sh, int world, int m, int k)
{
    double best = 0;
    for (int rep = 0; rep < o->reps; rep++) {
        double worst = 0;
        for (int r = 0; r < world; r++)
            if (sh->t[m][k][rep][r] > worst)
                worst = sh->t[m][k][rep][r];
        if (rep == 0 || worst < best)
            best = worst;
    }
    return best;
}

static void report(const struct options *o, int world, const struct shared *sh)
{
    static const double BUS[NMEAS] = {0, 0, 2.0, 1.0, 1.0};
    static const char *const NAMES[NMEAS] = {"", "", "all_reduce", "reduce_scatter", "all_gather"};
    printf("\nW = %d ranks (processes on 127.0.0.1); GB/s = 1e9 bytes/s; time = slowest rank, "
           "best of %d\n", world, o->reps);
    printf("%11s %6s %6s |", "size", "tcp1", "tcpW");
    for (int m = M_AR; m < NMEAS; m++)
        printf(" %-36s|", NAMES[m]);
    printf("\n%11s %6s %6s |", "", "GB/s", "GB/s");
    for (int m = M_AR; m < NMEAS; m++)
        printf(" %9s %6s %6s %5s %5s |", "time us", "algbw", "busbw", "/tcp1", "/tcpW");
    printf("\n");
    for (int k = 0; k < o->nsizes; k++) {
        double bytes = (double)o->sizes[k];
        double tcp1 = bytes / best_time(o, sh, world, M_TCP1, k) / 1e9;
        double tcpw = bytes / best_time(o, sh, world, M_TCPW, k) / 1e9;
        print_size(o->sizes[k]);
        printf(" %6.2f %6.2f |", tcp1, tcpw);
        for (int m = M_AR; m < NMEAS; m++) {
            double t = best_time(o, sh, world, m, k);
            double alg = bytes / t / 1e9;
            double bus = alg * BUS[m] * (world - 1) / world;
            printf(" %9.1f %6.2f %6.2f %4.0f%% %4.0f%% |", t * 1e6, alg, bus, 100 * bus / tcp1,
                   100 * bus / tcpw);
        }
        printf("\n");
    }
    /*
     * CPU cost per byte of link traffic (all ranks' CPU time over the bytes
     * that cross links: S for tcp1, S*W for tcpW, busbw bytes * W for a
     * collective). On a CPU-bound loopback this is the overhead that a busy
     * machine cannot hide, and it is steadier than wall time when the CPUs
     * are shared.
     */
    printf("%11s %6s %6s |", "CPU ns/B", "tcp1", "tcpW");
    for (int m = M_AR; m < NMEAS; m++)
        printf(" %-14s|", NAMES[m]);
    printf("\n");
    for (int k = 0; k < o->nsizes; k++) {
        double bytes = (double)o->sizes[k];
        double traffic[NMEAS] = {bytes, bytes * world};
        print_size(o->sizes[k]);
        for (int m = 0; m < NMEAS; m++) {
            if (m >= M_AR)
                traffic[m] = bytes * BUS[m] * (world - 1);
            double best = 0;
            for (int rep = 0; rep < o->reps; rep++) {
                double sum = 0;
                for (int r = 0; r < world; r++)
                    sum += sh->cpu[m][k][rep][r];
                if (rep == 0 || sum < best)
                    best = sum;
            }
            printf(m < M_AR ? " %6.2f" : " %14.2f", best / traffic[m] * 1e9);
            printf(m == M_TCPW || m >= M_AR ? " |" : "");
        }
        printf("\n");
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------ main */

/* "4K", "256M", "1G" or plain bytes; 0 on error. */
static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return 0;
    switch (*end) {
    case 'K': case 'k': v <<= 10; end++; break;
    case 'M': case 'm': v <<= 20; end++; break;
    case 'G': case 'g': v <<= 30; end++; break;
    default: break;
    }
    return *end == '\0' ? (size_t)v : 0;
}

static int parse_worlds(const char *s, struct options *o)
{
    o->nworlds = 0;
    while (*s != '\0') {
        char *end;
        long w = strtol(s, &end, 10);
        if (end == s || w < 2 || w > MAX_WORLD || o->nworlds == MAX_WORLD)
            return -1;
        o->worlds[o->nworlds++] = (int)w;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return o->nworlds > 0 ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_collectives [-w 2,4] [-b 4K] [-e 256M] [-f 4] [-t 0.2] [-r 3]\n"
               "  -w LIST   world sizes (2..%d), comma separated\n"
               "  -b SIZE   smallest buffer (bytes, K, M, G; a multiple of 4)\n"
               "  -e SIZE   largest buffer\n"
               "  -f N      size factor between rows\n"
               "  -t SEC    timed seconds per measurement (plus one warm-up run)\n"
               "  -r N      repetitions of every measurement, interleaved; best reported\n",
            MAX_WORLD);
}

int main(int argc, char **argv)
{
    struct options o = {.worlds = {2, 4}, .nworlds = 2, .target_s = 0.2, .reps = 3};
    size_t lo = 4096, hi = (size_t)256 << 20;
    long factor = 4;
    int opt;
    while ((opt = getopt(argc, argv, "w:b:e:f:t:r:h")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'w':
            if (parse_worlds(optarg, &o) != 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'b': lo = parse_size(optarg); break;
        case 'e': hi = parse_size(optarg); break;
        case 'f':
            factor = strtol(optarg, &end, 10);
            if (*end != '\0')
                factor = 0;
            break;
        case 't':
            o.target_s = strtod(optarg, &end);
            if (*end != '\0' || !(o.target_s > 0 && o.target_s <= 60)) {
                usage(stderr);
                return 2;
            }
            break;
        case 'r': {
            long r = strtol(optarg, &end, 10);
            if (*end != '\0' || r < 1 || r > MAX_REPS) {
                usage(stderr);
                return 2;
            }
            o.reps = (int)r;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (lo == 0 || hi < lo || lo % 4 != 0 || factor < 2) {
        usage(stderr);
        return 2;
    }
    for (size_t s = lo; s <= hi && o.nsizes < MAX_SIZES; s *= (size_t)factor)
        o.sizes[o.nsizes++] = s;

    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    printf("bench_collectives: %d CPUs online, sizes %zu..%zu bytes, %.2f s per measurement, "
           "best of %d\n", (int)sysconf(_SC_NPROCESSORS_ONLN), lo, o.sizes[o.nsizes - 1], o.target_s,
           o.reps);
    for (int i = 0; i < o.nworlds; i++) {
        memset(sh, 0, sizeof *sh);
        if (measure_world(&o, o.worlds[i], sh) != 0) {
            fprintf(stderr, "bench_collectives: W=%d failed: %s\n", o.worlds[i], sh->err);
            return 1;
        }
        report(&o, o.worlds[i], sh);
    }
    munmap(sh, sizeof *sh);
    return 0;
}
