/*
 * ty_harness.c - starts the real `trainyard` binary and talks HTTP to it.
 *
 * The server's stderr goes to <tmp>/server.log, opened with O_APPEND before
 * fork(); the harness reads the file to find the "listening" line (only the
 * part written since the current start), so the server never blocks on a
 * pipe and its log survives for diagnostics. Children get PR_SET_PDEATHSIG,
 * so a crashing test never leaves a server behind.
 */
#define _XOPEN_SOURCE 700 /* nftw() */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/ty_harness.h"

extern char **environ;

#define START_TIMEOUT_MS 30000
#define MAX_ARGS 64
#define MAX_ENV 512
#define MAX_CAPTURE (16u << 20)

static char *g_binary;
static char *g_openapi_path;
static oas *g_oas;
/* Every server not yet freed, so that ty_harness_cleanup() can remove what a
 * failed test (which never reaches its own cleanup) left behind. Main thread only. */
static ty_server *g_servers;

int ty_harness_init(int argc, char **argv, char *err, size_t errlen)
{
    const char *strict;

    if (argc < 3) {
        snprintf(err, errlen, "usage: %s TRAINYARD_BINARY OPENAPI_YAML",
                 argc > 0 ? argv[0] : "test");
        return -1;
    }
    if (access(argv[1], X_OK) != 0) {
        snprintf(err, errlen, "%s: %s", argv[1], strerror(errno));
        return -1;
    }
    g_binary = argv[1];
    g_openapi_path = argv[2];
    if (oas_load_file(argv[2], &g_oas, err, errlen) < 0)
        return -1;
    strict = getenv("TY_OAS_STRICT");
    if (strict && strcmp(strict, "1") == 0)
        oas_set_flags(g_oas, OAS_STRICT);
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK) {
        snprintf(err, errlen, "curl_global_init failed");
        return -1;
    }
    /* A server killed under our feet must not kill the test with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void ty_harness_cleanup(void)
{
    while (g_servers)
        ty_server_free(g_servers);
    oas_free(g_oas);
    g_oas = NULL;
    curl_global_cleanup();
}

const char *ty_harness_binary(void)
{
    return g_binary;
}

const oas *ty_harness_oas(void)
{
    return g_oas;
}

const char *ty_harness_openapi_path(void)
{
    return g_openapi_path;
}

int64_t ty_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ty_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- child processes ----------------------------------------------------- */

/* argv and envp for execve, built before fork (nothing is allocated in the child). */
typedef struct spawn {
    char *argv[MAX_ARGS + 1];
    size_t argc;
    char *envp[MAX_ENV + 1];
    size_t envc;
    char token_env[256];
} spawn;

static int spawn_init(spawn *sp, const char *const *args, const char *const *env,
                      const char *admin_token, char *err, size_t errlen)
{
    size_t i;

    memset(sp, 0, sizeof *sp);
    sp->argv[sp->argc++] = g_binary;
    for (i = 0; args && args[i]; i++) {
        if (sp->argc >= MAX_ARGS) {
            snprintf(err, errlen, "too many arguments");
            return -1;
        }
        sp->argv[sp->argc++] = (char *)args[i];
    }
    for (i = 0; environ[i]; i++) {
        if (strncmp(environ[i], "TRAINYARD_", 10) == 0)
            continue;
        if (sp->envc >= MAX_ENV - 32)
            break;
        sp->envp[sp->envc++] = environ[i];
    }
    if (admin_token) {
        snprintf(sp->token_env, sizeof sp->token_env, "TRAINYARD_ADMIN_TOKEN=%s", admin_token);
        sp->envp[sp->envc++] = sp->token_env;
    }
    for (i = 0; env && env[i]; i++) {
        if (sp->envc >= MAX_ENV) {
            snprintf(err, errlen, "too many environment entries");
            return -1;
        }
        sp->envp[sp->envc++] = (char *)env[i];
    }
    return 0;
}

/* In the child: never outlive the test; then exec. */
static void __attribute__((noreturn)) spawn_exec(spawn *sp)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_DFL);
    execve(g_binary, sp->argv, sp->envp);
    _exit(127);
}

/* waitpid() with a deadline; 0 and *wstatus when it exited, -1 on timeout. */
static int wait_deadline(pid_t pid, int timeout_ms, int *wstatus)
{
    int64_t deadline = ty_now_ms() + timeout_ms;

    for (;;) {
        pid_t r = waitpid(pid, wstatus, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
        if (ty_now_ms() >= deadline)
            return -1;
        ty_sleep_ms(5);
    }
}

/* ---- temp directories ---------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the server ---------------------------------------------------------- */

struct ty_server {
    struct ty_server *next; /* in g_servers */
    char root[256];         /* the temporary directory */
    char dir[300];          /* root/data */
    char db[340];           /* root/data/trainyard.db */
    char logpath[300];      /* root/server.log */
    char url[64];
    int port;
    pid_t pid; /* 0 when not running */
    int no_admin_token;
    char **args; /* copies of the options */
    char **env;
};

static char **strv_dup(const char *const *v)
{
    size_t n = 0, i;
    char **copy;

    while (v && v[n])
        n++;
    copy = calloc(n + 1, sizeof *copy);
    if (!copy)
        return NULL;
    for (i = 0; i < n; i++) {
        copy[i] = strdup(v[i]);
        if (!copy[i]) {
            while (i > 0)
                free(copy[--i]);
            free(copy);
            return NULL;
        }
    }
    return copy;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static char *read_file_from(const char *path, off_t offset, size_t *len_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = NULL;
    size_t len = 0, cap = 0;

    if (fd < 0)
        return NULL;
    if (offset > 0 && lseek(fd, offset, SEEK_SET) < 0)
        goto fail;
    for (;;) {
        ssize_t n;
        if (cap - len < 4096) {
            char *grown;
            if (cap >= MAX_CAPTURE)
                break;
            cap = cap ? cap * 2 : 16384;
            grown = realloc(buf, cap + 1);
            if (!grown)
                goto fail;
            buf = grown;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (!buf)
        buf = calloc(1, 1);
    if (buf)
        buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
fail:
    close(fd);
    free(buf);
    return NULL;
}

static void log_tail(const ty_server *s, off_t from, char *out, size_t outlen)
{
    size_t len = 0;
    char *text = read_file_from(s->logpath, from, &len);
    const char *start;

    if (!text) {
        snprintf(out, outlen, "(no log)");
        return;
    }
    start = text;
    if (len > 1200)
        start = text + len - 1200;
    snprintf(out, outlen, "%s", start);
    free(text);
}

/* Finds the port in the "listening" line written since offset; 0 if none yet. */
static int find_listening(const ty_server *s, off_t offset)
{
    char *text = read_file_from(s->logpath, offset, NULL);
    char *line, *next;
    int port = 0;

    if (!text)
        return 0;
    for (line = text; line && *line && !port; line = next) {
        json_t *j;
        const char *addr, *colon;

        next = strchr(line, '\n');
        if (!next)
            break; /* a partial line: wait for the rest */
        *next++ = '\0';
        j = json_loads(line, 0, NULL);
        if (j && (addr = json_string_value(json_object_get(j, "addr"))) &&
            json_string_value(json_object_get(j, "msg")) &&
            strcmp(json_string_value(json_object_get(j, "msg")), "listening") == 0 &&
            (colon = strrchr(addr, ':'))) {
            char *end = NULL;
            long p = strtol(colon + 1, &end, 10);
            if (*end == '\0' && p > 0 && p < 65536)
                port = (int)p;
        }
        json_decref(j);
    }
    free(text);
    return port;
}

int ty_server_prepare(const ty_server_opts *opts, ty_server **out, char *err, size_t errlen)
{
    ty_server *s = calloc(1, sizeof *s);
    const char *tmp = getenv("TMPDIR");

    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(s->root, sizeof s->root, "%s/trainyard-it-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->root)) {
        snprintf(err, errlen, "mkdtemp %s: %s", s->root, strerror(errno));
        free(s);
        return -1;
    }
    snprintf(s->dir, sizeof s->dir, "%s/data", s->root);
    snprintf(s->db, sizeof s->db, "%s/trainyard.db", s->dir);
    snprintf(s->logpath, sizeof s->logpath, "%s/server.log", s->root);
    if (opts) {
        s->no_admin_token = opts->no_admin_token;
        s->args = strv_dup(opts->args);
        s->env = strv_dup(opts->env);
    } else {
        s->args = strv_dup(NULL);
        s->env = strv_dup(NULL);
    }
    s->next = g_servers;
    g_servers = s;
    if (!s->args || !s->env) {
        snprintf(err, errlen, "out of memory");
        ty_server_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int ty_server_restart(ty_server *s, char *err, size_t errlen)
{
    const char *args[MAX_ARGS];
    size_t n = 0, i;
    spawn sp;
    int fd = -1, wstatus;
    off_t offset;
    int64_t deadline;
    char tail[1400];

    if (s->pid > 0) {
        snprintf(err, errlen, "the server is already running");
        return -1;
    }
    args[n++] = "serve";
    args[n++] = "--listen";
    args[n++] = "127.0.0.1:0";
    args[n++] = "--db";
    args[n++] = s->db;
    for (i = 0; s->args[i] && n < MAX_ARGS - 1; i++)
        args[n++] = s->args[i];
    args[n] = NULL;
    if (spawn_init(&sp, args, (const char *const *)s->env,
                   s->no_admin_token ? NULL : TY_TEST_ADMIN_TOKEN, err, errlen) < 0)
        return -1;
    fd = open(s->logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", s->logpath, strerror(errno));
        return -1;
    }
    offset = lseek(fd, 0, SEEK_END);
    s->pid = fork();
    if (s->pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        s->pid = 0;
        close(fd);
        return -1;
    }
    if (s->pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
        }
        dup2(fd, STDERR_FILENO);
        spawn_exec(&sp);
    }
    close(fd);
    deadline = ty_now_ms() + START_TIMEOUT_MS;
    for (;;) {
        s->port = find_listening(s, offset);
        if (s->port > 0)
            break;
        if (waitpid(s->pid, &wstatus, WNOHANG) == s->pid) {
            s->pid = 0;
            log_tail(s, offset, tail, sizeof tail);
            snprintf(err, errlen, "the server exited (status %d%s) before listening; log: %s",
                     WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus),
                     WIFEXITED(wstatus) ? "" : ", signal", tail);
            return -1;
        }
        if (ty_now_ms() > deadline) {
            ty_server_kill(s);
            log_tail(s, offset, tail, sizeof tail);
            snprintf(err, errlen, "no 'listening' line within %d ms; log: %s", START_TIMEOUT_MS,
                     tail);
            return -1;
        }
        ty_sleep_ms(5);
    }
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
    return 0;
}

int ty_server_start(const ty_server_opts *opts, ty_server **out, char *err, size_t errlen)
{
    ty_server *s = NULL;

    if (ty_server_prepare(opts, &s, err, errlen) < 0)
        return -1;
    if (ty_server_restart(s, err, errlen) < 0) {
        ty_server_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int ty_server_stop(ty_server *s, int timeout_ms, int *wstatus, char *err, size_t errlen)
{
    if (s->pid <= 0) {
        snprintf(err, errlen, "the server is not running");
        return -1;
    }
    kill(s->pid, SIGTERM);
    if (wait_deadline(s->pid, timeout_ms, wstatus) < 0) {
        snprintf(err, errlen, "the server did not exit within %d ms of SIGTERM", timeout_ms);
        ty_server_kill(s);
        return -1;
    }
    s->pid = 0;
    return 0;
}

void ty_server_kill(ty_server *s)
{
    int wstatus;

    if (!s || s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
}

/* True when the environment of process pid has a value under dir ("NAME=<dir>/..."). */
static bool environ_under(const char *pid, const char *dir)
{
    char path[64], buf[65536];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    size_t dlen = strlen(dir);
    for (char *e = buf; e < buf + n; e += strlen(e) + 1) {
        const char *eq = strchr(e, '=');
        if (eq && strncmp(eq + 1, dir, dlen) == 0 && eq[1 + dlen] == '/')
            return true;
    }
    return false;
}

/*
 * SIGKILLs what the server left running under its directory: ranks the local backend
 * started without a sandbox outlive a server killed with SIGKILL (sandboxed ones die with
 * it), and would otherwise run on after the test.
 */
static void kill_leftover_ranks(const char *root)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || atoi(e->d_name) == getpid())
            continue;
        if (environ_under(e->d_name, root))
            kill(atoi(e->d_name), SIGKILL);
    }
    closedir(d);
}

void ty_server_free(ty_server *s)
{
    const char *keep = getenv("TY_IT_KEEP");

    if (!s)
        return;
    for (ty_server **p = &g_servers; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    ty_server_kill(s);
    if (s->root[0])
        kill_leftover_ranks(s->root);
    if (s->root[0] && !(keep && strcmp(keep, "1") == 0))
        rm_tree(s->root);
    strv_free(s->args);
    strv_free(s->env);
    free(s);
}

pid_t ty_server_pid(const ty_server *s)
{
    return s->pid;
}

int ty_server_port(const ty_server *s)
{
    return s->port;
}

const char *ty_server_url(const ty_server *s)
{
    return s->url;
}

const char *ty_server_dir(const ty_server *s)
{
    return s->dir;
}

const char *ty_server_db(const ty_server *s)
{
    return s->db;
}

char *ty_server_log(const ty_server *s)
{
    return read_file_from(s->logpath, 0, NULL);
}

/* ---- one-shot commands --------------------------------------------------- */

typedef struct capture {
    char *buf;
    size_t len, cap;
} capture;

static int capture_read(int fd, capture *c)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);

    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : -1;
    if (n == 0)
        return 0;
    if (c->len + (size_t)n + 1 > c->cap && c->len < MAX_CAPTURE) {
        size_t cap = (c->cap ? c->cap * 2 : 8192) + (size_t)n;
        char *grown = realloc(c->buf, cap);
        if (!grown)
            return -1;
        c->buf = grown;
        c->cap = cap;
    }
    if (c->len + (size_t)n + 1 <= c->cap) {
        memcpy(c->buf + c->len, chunk, (size_t)n);
        c->len += (size_t)n;
    }
    return 1;
}

static char *capture_take(capture *c)
{
    char *s = c->buf ? c->buf : malloc(1);

    if (s)
        s[c->len] = '\0';
    c->buf = NULL;
    return s;
}

int ty_run(const char *const *args, const char *const *env, int timeout_ms, int *wstatus,
           char **out, char **errout, char *err, size_t errlen)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    capture co = {0}, ce = {0};
    spawn sp;
    pid_t pid;
    int64_t deadline;
    int open_fds = 2, rc = -1;

    if (spawn_init(&sp, args, env, NULL, err, errlen) < 0)
        goto out;
    if (pipe(po) < 0 || pipe(pe) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(po[i], F_SETFD, FD_CLOEXEC);
        fcntl(pe[i], F_SETFD, FD_CLOEXEC);
    }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        spawn_exec(&sp);
    }
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    deadline = ty_now_ms() + timeout_ms;
    while (open_fds > 0) {
        struct pollfd pfd[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
        int64_t left = deadline - ty_now_ms();
        int r;

        if (left <= 0)
            break;
        r = poll(pfd, 2, (int)(left > 100 ? 100 : left));
        if (r < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            int fd = i == 0 ? po[0] : pe[0];
            if (fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (capture_read(fd, i == 0 ? &co : &ce) <= 0) {
                close(fd);
                if (i == 0)
                    po[0] = -1;
                else
                    pe[0] = -1;
                open_fds--;
            }
        }
    }
    int64_t left = deadline - ty_now_ms();
    if (wait_deadline(pid, (int)(left > 0 ? left : 0), wstatus) < 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
            ;
        snprintf(err, errlen, "%s %s did not finish within %d ms", g_binary,
                 args && args[0] ? args[0] : "", timeout_ms);
        goto out;
    }
    if (out)
        *out = capture_take(&co);
    if (errout)
        *errout = capture_take(&ce);
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    free(co.buf);
    free(ce.buf);
    return rc;
}

/* ---- HTTP ---------------------------------------------------------------- */

struct ty_client {
    CURL *curl;
    char base[64];
    char *token;
    long connects;
};

static ty_client *client_new(const char *url, const char *token)
{
    ty_client *c = calloc(1, sizeof *c);

    if (!c)
        return NULL;
    c->curl = curl_easy_init();
    if (!c->curl || (token && !(c->token = strdup(token)))) {
        ty_client_free(c);
        return NULL;
    }
    snprintf(c->base, sizeof c->base, "%s", url);
    return c;
}

ty_client *ty_client_new(const ty_server *s, const char *token)
{
    return client_new(s->url, token);
}

void ty_client_free(ty_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c->token);
    free(c);
}

long ty_client_connects(const ty_client *c)
{
    return c->connects;
}

typedef struct xfer {
    capture body;
    ty_header *headers;
    size_t nheaders, capheaders;
    int failed;
} xfer;

typedef struct upload {
    const char *data;
    size_t len, off;
} upload;

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud)
{
    upload *u = ud;
    size_t n = size * nitems;

    if (n > 16384)
        n = 16384;
    if (n > u->len - u->off)
        n = u->len - u->off;
    memcpy(buf, u->data + u->off, n);
    u->off += n;
    return n;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;

    if (x->body.len + n + 1 > x->body.cap) {
        size_t cap = (x->body.cap ? x->body.cap * 2 : 8192) + n;
        char *grown = realloc(x->body.buf, cap);
        if (!grown) {
            x->failed = 1;
            return 0;
        }
        x->body.buf = grown;
        x->body.cap = cap;
    }
    memcpy(x->body.buf + x->body.len, ptr, n);
    x->body.len += n;
    return n;
}

static void headers_clear(xfer *x)
{
    for (size_t i = 0; i < x->nheaders; i++) {
        free(x->headers[i].name);
        free(x->headers[i].value);
    }
    x->nheaders = 0;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb, namelen, vstart, vend;
    const char *colon;

    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        headers_clear(x); /* a new response (after 100 Continue): start over */
        return n;
    }
    colon = memchr(ptr, ':', n);
    if (!colon)
        return n;
    namelen = (size_t)(colon - ptr);
    vstart = namelen + 1;
    while (vstart < n && (ptr[vstart] == ' ' || ptr[vstart] == '\t'))
        vstart++;
    vend = n;
    while (vend > vstart && (ptr[vend - 1] == '\r' || ptr[vend - 1] == '\n' ||
                             ptr[vend - 1] == ' ' || ptr[vend - 1] == '\t'))
        vend--;
    if (x->nheaders == x->capheaders) {
        size_t cap = x->capheaders ? x->capheaders * 2 : 16;
        ty_header *grown = realloc(x->headers, cap * sizeof *grown);
        if (!grown) {
            x->failed = 1;
            return 0;
        }
        x->headers = grown;
        x->capheaders = cap;
    }
    x->headers[x->nheaders].name = strndup(ptr, namelen);
    x->headers[x->nheaders].value = strndup(ptr + vstart, vend - vstart);
    if (!x->headers[x->nheaders].name || !x->headers[x->nheaders].value) {
        free(x->headers[x->nheaders].name);
        free(x->headers[x->nheaders].value);
        x->failed = 1;
        return 0;
    }
    x->nheaders++;
    return n;
}

const char *ty_resp_header(const ty_http_resp *r, const char *name)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

void ty_resp_free(ty_http_resp *r)
{
    if (!r)
        return;
    free(r->body);
    json_decref(r->json);
    for (size_t i = 0; i < r->nheaders; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    memset(r, 0, sizeof *r);
}

static const char *resp_header_cb(const char *name, void *ud)
{
    return ty_resp_header(ud, name);
}

static int is_json_type(const char *ct)
{
    char mt[128];
    size_t n = 0;

    if (!ct)
        return 0;
    while (ct[n] && ct[n] != ';' && n + 1 < sizeof mt) {
        mt[n] = ct[n];
        n++;
    }
    while (n > 0 && mt[n - 1] == ' ')
        n--;
    mt[n] = '\0';
    return strcasecmp(mt, "application/json") == 0 ||
           (n > 5 && strcasecmp(mt + n - 5, "+json") == 0);
}

/* A response to an undocumented path or method: a problem+json body that
 * conforms to components.schemas.Problem when the document has one. */
static int check_outside_contract(const ty_http_resp *r, char *err, size_t errlen)
{
    const char *ct = ty_resp_header(r, "Content-Type");
    const json_t *problem;
    char verr[512];

    if (!ct || strncasecmp(ct, "application/problem+json", 24) != 0) {
        snprintf(err, errlen,
                 "status %ld with content type '%s', expected application/problem+json", r->status,
                 ct ? ct : "(none)");
        return -1;
    }
    if (!r->json) {
        snprintf(err, errlen, "status %ld: the problem body is not JSON", r->status);
        return -1;
    }
    problem = json_object_get(
        json_object_get(json_object_get(oas_doc(g_oas), "components"), "schemas"), "Problem");
    if (problem && oas_validate(oas_doc(g_oas), problem, r->json, 0, verr, sizeof verr) < 0) {
        snprintf(err, errlen, "status %ld: the body does not match components.schemas.Problem: %s",
                 r->status, verr);
        return -1;
    }
    return 0;
}

int ty_http_do(ty_client *c, const ty_http_req *req, ty_http_resp *resp, char *err, size_t errlen)
{
    CURL *h = c->curl;
    struct curl_slist *hdrs = NULL;
    xfer x = {0};
    upload up = {0};
    char url[4096], line[4096], cerr[CURL_ERROR_SIZE] = "";
    const char *token = req->token ? req->token : c->token;
    size_t body_len = req->body ? (req->body_len_set ? req->body_len : strlen(req->body)) : 0;
    long status = 0, connects = 0;
    CURLcode cc;
    int rc = TY_HTTP_ETRANSPORT;

    memset(resp, 0, sizeof *resp);
    curl_easy_reset(h);
    snprintf(url, sizeof url, "%s%s", c->base, req->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    /* Keep paths exactly as the test wrote them ("/v1/../x" stays). */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (token && *token) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, line);
    }
    if (req->body) {
        const char *ct = req->content_type ? req->content_type : "application/json";
        snprintf(line, sizeof line, "Content-Type:%s%s", *ct ? " " : "", ct);
        hdrs = curl_slist_append(hdrs, line);
        if (!req->expect_100)
            hdrs = curl_slist_append(hdrs, "Expect:");
        if (req->chunked) {
            up.data = req->body;
            up.len = body_len;
            hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
            curl_easy_setopt(h, CURLOPT_POST, 1L);
            curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
            curl_easy_setopt(h, CURLOPT_READDATA, &up);
        } else {
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
        }
        if (strcmp(req->method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    } else if (strcmp(req->method, "POST") == 0) {
        /* No body: Content-Length 0 and no Content-Type. */
        hdrs = curl_slist_append(hdrs, "Content-Type:");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    } else if (strcmp(req->method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    for (size_t i = 0; req->headers && req->headers[i]; i++)
        hdrs = curl_slist_append(hdrs, req->headers[i]);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
    c->connects += connects;
    if (cc != CURLE_OK || x.failed) {
        snprintf(err, errlen, "%s %s: %s", req->method, req->path,
                 x.failed ? "out of memory" : (cerr[0] ? cerr : curl_easy_strerror(cc)));
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    resp->status = status;
    resp->body = capture_take(&x.body);
    resp->body_len = x.body.len;
    resp->headers = x.headers;
    resp->nheaders = x.nheaders;
    x.headers = NULL;
    x.nheaders = 0;
    if (!resp->body) {
        snprintf(err, errlen, "out of memory");
        ty_resp_free(resp);
        goto out;
    }
    if (is_json_type(ty_resp_header(resp, "Content-Type")))
        resp->json = json_loadb(resp->body, resp->body_len, JSON_DECODE_ANY, NULL);

    rc = TY_HTTP_ECONTRACT;
    if (!ty_resp_header(resp, "X-Request-Id")) {
        snprintf(err, errlen, "%s %s -> %ld: no X-Request-Id header", req->method, req->path,
                 status);
        goto out;
    }
    if (req->outside_contract) {
        char msg[768];
        if (check_outside_contract(resp, msg, sizeof msg) < 0) {
            snprintf(err, errlen, "%s %s: %s", req->method, req->path, msg);
            goto out;
        }
    } else {
        if (oas_check_response(g_oas, req->method, req->path, (int)status,
                               ty_resp_header(resp, "Content-Type"), resp->body, resp->body_len,
                               err, errlen) < 0)
            goto out;
        if (oas_check_response_headers(g_oas, req->method, req->path, (int)status, resp_header_cb,
                                       resp, err, errlen) < 0)
            goto out;
    }
    rc = 0;
out:
    curl_slist_free_all(hdrs);
    free(x.body.buf);
    headers_clear(&x);
    free(x.headers);
    return rc;
}

/* ---- concurrent submitters ----------------------------------------------- */

typedef struct load_thread {
    struct ty_load *load;
    int index;
    pthread_t tid;
    int started;
} load_thread;

struct ty_load {
    char url[64];
    char token[256];
    char tag[64];
    int nthreads;
    load_thread *threads;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop;        /* under mu */
    int running;     /* threads still running, under mu */
    ty_acked *acked; /* under mu */
    size_t nacked, capacked;
    size_t other;         /* responses other than 201 */
    char violation[1400]; /* first one, under mu */
    int stopped;
};

static void load_violation(ty_load *l, const char *msg)
{
    pthread_mutex_lock(&l->mu);
    if (!l->violation[0])
        snprintf(l->violation, sizeof l->violation, "%s", msg);
    pthread_mutex_unlock(&l->mu);
}

static void *load_main(void *arg)
{
    load_thread *t = arg;
    ty_load *l = t->load;
    ty_client *c = client_new(l->url, l->token);
    char body[512], err[1024], msg[1200];

    if (!c) {
        load_violation(l, "out of memory");
        goto out;
    }
    for (int seq = 0;; seq++) {
        ty_http_req req = {.method = "POST", .path = "/v1/jobs", .body = body};
        ty_http_resp r;
        int rc, stop;

        pthread_mutex_lock(&l->mu);
        stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            break;
        snprintf(body, sizeof body,
                 "{\"name\": \"load-%d-%d\", \"labels\": {\"load\": \"%s\", \"thread\": \"%d\","
                 " \"seq\": \"%d\"}, \"image\": \"registry.example/worker:1.0\","
                 " \"command\": [\"train\"], \"workers\": {\"count\": 1}}",
                 t->index, seq, l->tag, t->index, seq);
        rc = ty_http_do(c, &req, &r, err, sizeof err);
        if (rc == TY_HTTP_ETRANSPORT)
            break;
        if (rc == TY_HTTP_ECONTRACT) {
            snprintf(msg, sizeof msg, "thread %d: %s", t->index, err);
            load_violation(l, msg);
        } else if (r.status == 201) {
            const char *id = json_string_value(json_object_get(r.json, "id"));
            pthread_mutex_lock(&l->mu);
            if (l->nacked == l->capacked) {
                size_t cap = l->capacked ? l->capacked * 2 : 1024;
                ty_acked *grown = realloc(l->acked, cap * sizeof *grown);
                if (grown) {
                    l->acked = grown;
                    l->capacked = cap;
                }
            }
            if (id && l->nacked < l->capacked) {
                ty_acked *a = &l->acked[l->nacked++];
                snprintf(a->id, sizeof a->id, "%s", id);
                a->thread = t->index;
                a->seq = seq;
            }
            pthread_cond_broadcast(&l->cond);
            pthread_mutex_unlock(&l->mu);
        } else if (r.status != 503) {
            snprintf(msg, sizeof msg, "thread %d: POST /v1/jobs -> %ld: %.300s", t->index, r.status,
                     r.body ? r.body : "");
            load_violation(l, msg);
        } else {
            pthread_mutex_lock(&l->mu);
            l->other++;
            pthread_mutex_unlock(&l->mu);
        }
        ty_resp_free(&r);
    }
out:
    ty_client_free(c);
    pthread_mutex_lock(&l->mu);
    l->running--;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int ty_load_start(const ty_server *s, const char *token, int nthreads, const char *tag,
                  ty_load **out, char *err, size_t errlen)
{
    ty_load *l = calloc(1, sizeof *l);

    if (!l || !(l->threads = calloc((size_t)nthreads, sizeof *l->threads))) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(l->url, sizeof l->url, "%s", s->url);
    snprintf(l->token, sizeof l->token, "%s", token);
    snprintf(l->tag, sizeof l->tag, "%s", tag);
    l->nthreads = nthreads;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cond, NULL);
    for (int i = 0; i < nthreads; i++) {
        l->threads[i].load = l;
        l->threads[i].index = i;
        pthread_mutex_lock(&l->mu);
        l->running++;
        pthread_mutex_unlock(&l->mu);
        if (pthread_create(&l->threads[i].tid, NULL, load_main, &l->threads[i]) != 0) {
            pthread_mutex_lock(&l->mu);
            l->running--;
            pthread_mutex_unlock(&l->mu);
            snprintf(err, errlen, "pthread_create failed");
            ty_load_free(l);
            return -1;
        }
        l->threads[i].started = 1;
    }
    *out = l;
    return 0;
}

size_t ty_load_wait_acked(ty_load *l, size_t n, int timeout_ms)
{
    struct timespec deadline;
    size_t got;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (l->nacked < n && l->running > 0)
        if (pthread_cond_timedwait(&l->cond, &l->mu, &deadline) != 0)
            break;
    got = l->nacked;
    pthread_mutex_unlock(&l->mu);
    return got;
}

void ty_load_stop(ty_load *l)
{
    if (!l || l->stopped)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++)
        if (l->threads[i].started)
            pthread_join(l->threads[i].tid, NULL);
    l->stopped = 1;
}

const ty_acked *ty_load_acked(const ty_load *l, size_t *n)
{
    *n = l->nacked;
    return l->acked;
}

const char *ty_load_violation(const ty_load *l)
{
    return l->violation[0] ? l->violation : NULL;
}

size_t ty_load_other_statuses(const ty_load *l)
{
    return l->other;
}

void ty_load_free(ty_load *l)
{
    if (!l)
        return;
    ty_load_stop(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
    free(l->acked);
    free(l->threads);
    free(l);
}

/* ---- cmocka helpers ------------------------------------------------------ */

ty_http_resp *ty_reqx_at(const char *file, int line, ty_client *c, const ty_http_req *req)
{
    ty_http_resp *r = calloc(1, sizeof *r);
    char err[2048], body[512];
    int rc;

    if (!r) {
        print_error("ERROR: out of memory\n");
        _fail(file, line);
    }
    rc = ty_http_do(c, req, r, err, sizeof err);
    if (rc == TY_HTTP_ECONTRACT) {
        snprintf(body, sizeof body, "%.*s", (int)(r->body_len > 400 ? 400 : r->body_len),
                 r->body ? r->body : "");
        ty_resp_destroy(r);
        print_error("ERROR: response does not conform to openapi.yaml: %s\n  body: %s\n", err,
                    body);
        _fail(file, line);
    }
    if (rc != 0) {
        ty_resp_destroy(r);
        print_error("ERROR: HTTP request failed: %s\n", err);
        _fail(file, line);
    }
    return r;
}

ty_http_resp *ty_req_at(const char *file, int line, ty_client *c, const char *method,
                        const char *path, const char *body)
{
    ty_http_req req = {.method = method, .path = path, .body = body};
    return ty_reqx_at(file, line, c, &req);
}

void ty_resp_destroy(ty_http_resp *r)
{
    ty_resp_free(r);
    free(r);
}

const char *ty_json_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}
