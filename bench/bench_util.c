/* bench_util.c - helpers the server benchmarks share (see bench_util.h). */
#define _GNU_SOURCE /* nftw(), FTW_PHYS, FTW_DEPTH */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *g_prog = "bench";
static bench_server *g_die_srv;

void bench_init(const char *prog, bench_server *srv)
{
    g_prog = prog;
    g_die_srv = srv;
}

double bench_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t bench_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double bench_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void bench_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", g_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (g_die_srv) {
        if (g_die_srv->pid > 0)
            fprintf(stderr, "the server's log: %s\n", g_die_srv->log);
        g_die_srv->keep_on_exit = 1;
        bench_stop_server(g_die_srv);
    }
    exit(1);
}

int bench_buf_add(bench_buf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *grown;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (!(grown = realloc(b->data, cap)))
            return -1;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

void bench_buf_reset(bench_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_percentile(const double *sorted, size_t n, double p)
{
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return n ? sorted[rank - 1] : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

char *bench_slurp(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bench_buf b = {0};
    char chunk[65536];
    ssize_t n;

    if (fd < 0)
        return NULL;
    while ((n = read(fd, chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0 && bench_buf_add(&b, chunk, (size_t)n) < 0)
            break;
    close(fd);
    if (!b.data)
        b.data = calloc(1, 1);
    return b.data;
}

double bench_proc_cpu_s(pid_t pid)
{
    char path[64], *text, *p;
    unsigned long long ut = 0, st = 0;
    double s = 0;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    text = bench_slurp(path);
    /* Fields 14 and 15, counted after the command name's closing parenthesis. */
    if (text && (p = strrchr(text, ')')) != NULL &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
        s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    free(text);
    return s;
}

double bench_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int bench_parse_int(const char *s, int lo, int hi, int *out)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* The address in the server's "listening" log line, or 0 when not there yet. */
static int find_listening(const bench_server *srv, char *addr, size_t addrlen)
{
    char *text = bench_slurp(srv->log), *line, *next;
    int found = 0;

    for (line = text; line && *line && !found; line = next) {
        json_t *j;
        next = strchr(line, '\n');
        if (!next)
            break;
        *next++ = '\0';
        if (!strstr(line, "\"listening\""))
            continue;
        j = json_loads(line, 0, NULL);
        if (j && json_string_value(json_object_get(j, "addr"))) {
            snprintf(addr, addrlen, "%s", json_string_value(json_object_get(j, "addr")));
            found = 1;
        }
        json_decref(j);
    }
    free(text);
    return found;
}

void bench_start_server(bench_server *srv, const char *trainyard, const char *const *args,
                        int start_timeout_ms)
{
    const char *tmp = getenv("TMPDIR");
    char prog[64], addr[64], token_env[128];
    char **argv, **envp;
    size_t n = 0, ne = 0, nargs = 0, i;
    posix_spawn_file_actions_t fa;
    double deadline;
    int rc;

    snprintf(prog, sizeof prog, "%s", g_prog);
    for (i = 0; prog[i]; i++)
        if (prog[i] == '_')
            prog[i] = '-';
    snprintf(srv->root, sizeof srv->root, "%s/trainyard-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
             prog);
    if (!mkdtemp(srv->root))
        bench_die("mkdtemp %s: %s", srv->root, strerror(errno));
    snprintf(srv->data, sizeof srv->data, "%s/data", srv->root);
    snprintf(srv->db, sizeof srv->db, "%s/trainyard.db", srv->data);
    snprintf(srv->log, sizeof srv->log, "%s/server.log", srv->root);
    if (mkdir(srv->data, 0700) != 0)
        bench_die("mkdir %s: %s", srv->data, strerror(errno));

    while (args && args[nargs])
        nargs++;
    argv = calloc(nargs + 7, sizeof *argv);
    if (!argv)
        bench_die("out of memory");
    argv[n++] = (char *)trainyard;
    argv[n++] = "serve";
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--db";
    argv[n++] = srv->db;
    for (i = 0; i < nargs; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;

    /* Our environment without TRAINYARD_*, plus the admin token. */
    for (i = 0; environ[i]; i++)
        ;
    envp = calloc(i + 2, sizeof *envp);
    if (!envp)
        bench_die("out of memory");
    for (i = 0; environ[i]; i++)
        if (strncmp(environ[i], "TRAINYARD_", 10) != 0)
            envp[ne++] = environ[i];
    snprintf(token_env, sizeof token_env, "TRAINYARD_ADMIN_TOKEN=%s", srv->token);
    envp[ne++] = token_env;
    envp[ne] = NULL;

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, srv->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    rc = posix_spawn(&srv->pid, trainyard, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    free(argv);
    if (rc != 0) {
        srv->pid = 0;
        bench_die("cannot start %s: %s", trainyard, strerror(rc));
    }

    deadline = bench_mono_ms() + start_timeout_ms;
    while (!find_listening(srv, addr, sizeof addr)) {
        int wstatus;
        if (waitpid(srv->pid, &wstatus, WNOHANG) == srv->pid) {
            srv->pid = 0;
            bench_die("the server exited before listening");
        }
        if (bench_mono_ms() > deadline)
            bench_die("the server did not listen within %d s", start_timeout_ms / 1000);
        bench_sleep_us(10000);
    }
    snprintf(srv->url, sizeof srv->url, "http://%s", addr);
}

void bench_stop_server(bench_server *srv)
{
    if (srv->pid > 0) {
        int wstatus;
        double deadline = bench_mono_ms() + 30000;
        kill(srv->pid, SIGTERM);
        while (waitpid(srv->pid, &wstatus, WNOHANG) == 0) {
            if (bench_mono_ms() > deadline) {
                fprintf(stderr, "%s: the server ignored SIGTERM for 30 s; killing it\n", g_prog);
                kill(srv->pid, SIGKILL);
                waitpid(srv->pid, &wstatus, 0);
                break;
            }
            bench_sleep_us(10000);
        }
        srv->pid = 0;
    }
    if (srv->root[0] && !srv->keep_on_exit)
        nftw(srv->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else if (srv->root[0])
        fprintf(stderr, "%s: kept %s\n", g_prog, srv->root);
    srv->root[0] = '\0'; /* a second call does nothing */
}
