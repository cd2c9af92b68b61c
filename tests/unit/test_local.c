/*
 * Unit tests for scheduler/local.c: real ranks (sh, env, sleep) under a temporary data
 * dir. Every wait is bounded (WAIT_MS) but no test asserts how long anything took.
 *
 * The tests that watch rank exits run twice: as the kernel allows (pidfds in an epoll
 * set), then with pidfd_open refused by a seccomp filter (ENOSYS, as on kernels before
 * 5.3), which makes the backend poll with a timerfd.
 */
#define _GNU_SOURCE /* vasprintf */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/ty_time.h"
#include "scheduler/local/local.h"
#include "scheduler/local/local_int.h"

#define WAIT_MS 20000
#define SERVER_URL "http://127.0.0.1:8080"

static char root[64];            /* mkdtemp */
static char data_dir[128];        /* root/data */
static char bin_dir[128];         /* root/bin */
static int fallback_ok;           /* the seccomp filter is in place */

/* ---- helpers ---------------------------------------------------------------- */

/* A fresh job id ([0-9a-z]{26}): tag, this process, a counter; so two test binaries
 * running at once never see each other's processes. */
static void make_id(char out[27], const char *tag)
{
    static unsigned counter;
    char buf[64];
    snprintf(buf, sizeof buf, "%-10.10s%08x%08x", tag, (unsigned)getpid(), ++counter);
    for (char *p = buf; *p; p++)
        if (*p == ' ')
            *p = '0';
    assert_int_equal(strlen(buf), 26);
    memcpy(out, buf, 27);
}

static backend *new_backend(int slots, int gpus, const char *const *bin_dirs)
{
    /* Unsandboxed: these tests are about processes, groups and their recovery;
     * test_sandbox covers the sandbox. */
    local_options opt = {data_dir, slots, gpus, SERVER_URL, bin_dirs, 0, NULL, 0, 0, 0};
    backend *b = NULL;
    char err[256] = "";
    assert_int_equal(local_backend_new(&opt, &b, err, sizeof err), TY_OK);
    assert_non_null(b);
    return b;
}

static backend_job mkjob(const char *id, int attempt, int ws, int gpr, const char *const *argv,
                         const char *const *env)
{
    backend_job j = {.id = id,
                     .attempt = attempt,
                     .world_size = ws,
                     .gpus_per_rank = gpr,
                     .argv = argv,
                     .env = env};
    return j;
}

/*
 * Launches and waits for what the launch says: a RUNNING event per rank (TY_OK, ranks
 * filled from them, in any order) or a LAUNCH_FAILED (TY_EINVAL, why is its detail).
 * Only the launch's events are read: the queue that holds them is drained before exits.
 */
static ty_err launch_sync(backend *b, backend_attempt *a, const backend_job *j,
                          backend_rank *ranks, char *why, size_t whylen)
{
    b->ops->launch(b, a, j);
    int running = 0;
    uint64_t end = ty_time_mono_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (running < j->world_size && ty_time_mono_ns() < end) {
        struct pollfd p = {.fd = b->ops->event_fd(b), .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        backend_event ev;
        while (running < j->world_size && b->ops->observe(b, &ev, 1) == 1) {
            assert_ptr_equal(ev.attempt, a);
            if (ev.kind == BACKEND_EV_LAUNCH_FAILED) {
                assert_int_equal(ev.rank, -1);
                snprintf(why, whylen, "%s", ev.detail);
                return TY_EINVAL;
            }
            assert_int_equal(ev.kind, BACKEND_EV_RUNNING);
            assert_true(ev.rank >= 0 && ev.rank < j->world_size);
            assert_true(ev.where.pid > 0);
            assert_string_equal(ev.where.pod, ""); /* processes here, not pods */
            ranks[ev.rank] = ev.where;
            running++;
        }
    }
    assert_int_equal(running, j->world_size);
    return TY_OK;
}

/* Reserves and launches; the reservation is returned. */
static backend_attempt *start(backend *b, const backend_job *j, backend_rank *ranks)
{
    backend_attempt *a = NULL;
    char why[256] = "";
    assert_int_equal(b->ops->reserve(b, j, &a, why, sizeof why), TY_OK);
    ty_err rc = launch_sync(b, a, j, ranks, why, sizeof why);
    if (rc != TY_OK)
        fail_msg("launch: %s", why);
    return a;
}

/* recover() for a job id (never adopted here: local.h). */
static ty_err recover_id(backend *b, const char *id, int grace_ms, int *found)
{
    const char *argv[] = {"true", NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_recovery rec = {.found = -1};
    char why[256] = "";
    ty_err rc = b->ops->recover(b, &j, 1, grace_ms, &rec, why, sizeof why);
    assert_null(rec.adopted);
    *found = rec.found;
    return rc;
}

/* Waits (poll on event_fd, then observe) until want events came or WAIT_MS passed. */
static size_t wait_events(backend *b, backend_event *ev, size_t want)
{
    size_t n = 0;
    uint64_t end = ty_time_mono_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (n < want && ty_time_mono_ns() < end) {
        struct pollfd p = {.fd = b->ops->event_fd(b), .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            n += b->ops->observe(b, ev + n, want - n);
    }
    return n;
}

static const backend_event *event_of(const backend_event *ev, size_t n, int rank)
{
    const backend_event *found = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].rank == rank) {
            assert_null(found); /* one event per rank */
            found = &ev[i];
        }
    }
    assert_non_null(found);
    return found;
}

static char proc_state(const char *pid)
{
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* Live (not zombie) processes whose environment holds TRAINYARD_JOB_ID=id. */
static int count_job_procs(const char *id)
{
    char entry[64];
    snprintf(entry, sizeof entry, "TRAINYARD_JOB_ID=%s", id);
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int count = 0;
    struct dirent *de;
    static char buf[1 << 20];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9' || atoi(de->d_name) == getpid())
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/environ", de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n, len = 0;
        while ((n = read(fd, buf + len, sizeof buf - 1 - (size_t)len)) > 0)
            len += n;
        close(fd);
        buf[len] = '\0';
        int match = 0;
        for (ssize_t off = 0; off < len; off += (ssize_t)strlen(buf + off) + 1)
            match |= strcmp(buf + off, entry) == 0;
        char st = proc_state(de->d_name);
        count += match && st != 0 && st != 'Z' && st != 'X';
    }
    closedir(d);
    return count;
}

/* Waits until exactly want processes of the job are alive; returns the last count. */
static int wait_procs(const char *id, int want)
{
    uint64_t end = ty_time_mono_ns() + (uint64_t)WAIT_MS * 1000000u;
    int n;
    while ((n = count_job_procs(id)) != want && ty_time_mono_ns() < end)
        usleep(10000);
    return n;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static char *read_filef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *read_filef(const char *fmt, ...)
{
    char path[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    return read_file(path);
}

/* The value of NAME in `env` output (a copy), or NULL when the variable is absent. */
static char *env_value(const char *text, const char *name)
{
    size_t nlen = strlen(name);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > nlen && strncmp(line, name, nlen) == 0 && line[nlen] == '=')
            return strndup(line + nlen + 1, len - nlen - 1);
        line = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static void assert_env(const char *text, const char *name, const char *want)
{
    char *v = env_value(text, name);
    if (!v)
        fail_msg("%s missing", name);
    assert_string_equal(v, want);
    free(v);
}

/* ---- the environment contract -------------------------------------------------- */

static void test_env_of_each_rank(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "env");
    const char *argv[] = {"sh", "-c",
                          "env > \"$TRAINYARD_OUTPUT_DIR/env-$RANK\"; pwd -P > \"cwd-$RANK\"",
                          NULL};
    const char *env[] = {"FOO=bar baz", "LANG=C.UTF-8", NULL};
    backend_job j = mkjob(id, 1, 3, 0, argv, env);
    backend_rank ranks[3];
    backend_attempt *a = start(b, &j, ranks);
    assert_int_equal(local_backend_slots_used(b), 3);
    for (int r = 0; r < 3; r++)
        assert_true(ranks[r].pid > 0);

    backend_event ev[3];
    assert_int_equal(wait_events(b, ev, 3), 3);
    char real[PATH_MAX], jobdir[PATH_MAX + 64];
    assert_non_null(realpath(data_dir, real));
    snprintf(jobdir, sizeof jobdir, "%s/jobs/%s", real, id);

    char *port0 = NULL;
    for (int r = 0; r < 3; r++) {
        const backend_event *e = event_of(ev, 3, r);
        assert_ptr_equal(e->attempt, a);
        assert_int_equal(e->exit_code, 0);
        assert_int_equal(e->signal, 0);

        char *text = read_filef("%s/output/env-%d", jobdir, r);
        assert_non_null(text);
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "%d", r);
        assert_env(text, "RANK", want);
        assert_env(text, "LOCAL_RANK", want);
        assert_env(text, "WORLD_SIZE", "3");
        assert_env(text, "LOCAL_WORLD_SIZE", "3");
        assert_env(text, "MASTER_ADDR", "127.0.0.1");
        assert_env(text, "TRAINYARD_JOB_ID", id);
        assert_env(text, "TRAINYARD_ATTEMPT", "1");
        assert_env(text, "TRAINYARD_SERVER", SERVER_URL);
        assert_env(text, "FOO", "bar baz");
        assert_env(text, "LANG", "C.UTF-8"); /* the job's env overrides the server's */
        assert_env(text, "CUDA_VISIBLE_DEVICES", "");
        snprintf(want, sizeof want, "%s/datasets", real);
        assert_env(text, "TRAINYARD_DATA_DIR", want);
        snprintf(want, sizeof want, "%s/output", jobdir);
        assert_env(text, "TRAINYARD_OUTPUT_DIR", want);
        snprintf(want, sizeof want, "%s/checkpoints", jobdir);
        assert_env(text, "TRAINYARD_CHECKPOINT_DIR", want);
        char *path = env_value(text, "PATH");
        assert_non_null(path);
        free(path);
        char *home = env_value(text, "HOME");
        if (getenv("HOME"))
            assert_string_equal(home, getenv("HOME"));
        free(home);
        /* Set by the test process (the server), never passed on. */
        assert_null(env_value(text, "TRAINYARD_ADMIN_TOKEN"));
        assert_null(env_value(text, "SECRET_X"));

        char *port = env_value(text, "MASTER_PORT");
        assert_non_null(port);
        assert_true(atoi(port) > 0);
        if (!port0)
            port0 = port;
        else {
            assert_string_equal(port, port0);
            free(port);
        }
        free(text);

        char *cwd = read_filef("%s/cwd-%d", jobdir, r);
        assert_non_null(cwd);
        snprintf(want, sizeof want, "%s\n", jobdir);
        assert_string_equal(cwd, want);
        free(cwd);
    }
    free(port0);
    struct stat st;
    char dir[2 * PATH_MAX];
    snprintf(dir, sizeof dir, "%s/checkpoints", jobdir);
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    snprintf(dir, sizeof dir, "%s/logs/%s/a1", data_dir, id); /* logs: out of the job's dir */
    assert_int_equal(stat(dir, &st), 0);

    b->ops->release(b, a);
    assert_int_equal(local_backend_slots_used(b), 0);
    b->ops->free(b);
}

/* ---- exits and signals ------------------------------------------------------------ */

static void test_exit_codes_and_signals(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "exit");
    const char *argv[] = {"sh", "-c", "case $RANK in 1) exit 3;; 2) kill -9 $$;; esac; exit 0",
                          NULL};
    backend_job j = mkjob(id, 1, 3, 0, argv, NULL);
    backend_rank ranks[3];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[3];
    assert_int_equal(wait_events(b, ev, 3), 3);

    const backend_event *e = event_of(ev, 3, 0);
    assert_int_equal(e->kind, BACKEND_EV_EXITED);
    assert_int_equal(e->exit_code, 0);
    assert_int_equal(e->signal, 0);
    e = event_of(ev, 3, 1);
    assert_int_equal(e->kind, BACKEND_EV_EXITED); /* its own doing, not a disruption */
    assert_int_equal(e->exit_code, 3);
    assert_int_equal(e->signal, 0);
    e = event_of(ev, 3, 2);
    assert_int_equal(e->exit_code, -1);
    assert_int_equal(e->signal, SIGKILL);
    assert_true(e->time_ms > 0);

    /* Nothing pending any more. */
    assert_int_equal(b->ops->observe(b, ev, 3), 0);
    b->ops->release(b, a);
    b->ops->free(b);
}

static void test_sigterm_stops_gang(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27], why[256];
    make_id(id, "term");
    const char *argv[] = {"sleep", "1000", NULL};
    backend_job j = mkjob(id, 1, 2, 0, argv, NULL);
    backend_rank ranks[2];
    /* Like the server: SIGTERM blocked, SIGPIPE and (here) SIGTERM ignored. The ranks
     * must not inherit any of it. */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    assert_int_equal(sigprocmask(SIG_BLOCK, &term, &old), 0);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_term, old_pipe;
    assert_int_equal(sigaction(SIGTERM, &ign, &old_term), 0);
    assert_int_equal(sigaction(SIGPIPE, &ign, &old_pipe), 0);
    backend_attempt *a = start(b, &j, ranks);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    assert_int_equal(wait_procs(id, 2), 2);

    /* A second attempt cannot start while this one runs. */
    backend_job j2 = mkjob(id, 2, 2, 0, argv, NULL);
    assert_int_equal(launch_sync(b, a, &j2, ranks, why, sizeof why), TY_EINVAL);

    b->ops->stop(b, a, 0);
    backend_event ev[2];
    assert_int_equal(wait_events(b, ev, 2), 2);
    for (int r = 0; r < 2; r++) {
        /* Ended as asked: a disruption, not the application's failure. */
        assert_int_equal(event_of(ev, 2, r)->kind, BACKEND_EV_DISRUPTED);
        assert_int_equal(event_of(ev, 2, r)->disruption, BACKEND_DISRUPT_STOP_REQUESTED);
        assert_int_equal(event_of(ev, 2, r)->ended, 1);
        assert_int_equal(event_of(ev, 2, r)->exit_code, -1);
        assert_int_equal(event_of(ev, 2, r)->signal, SIGTERM);
    }
    assert_int_equal(wait_procs(id, 0), 0);
    /* After the last exit the group is gone: signalling again is harmless. */
    b->ops->stop(b, a, 1);
    b->ops->release(b, a);
    b->ops->free(b);
}

static void test_sigterm_reaches_grandchildren(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "grand");
    const char *argv[] = {"sh", "-c", "sleep 1000 & wait", NULL};
    backend_job j = mkjob(id, 1, 2, 0, argv, NULL);
    backend_rank ranks[2];
    backend_attempt *a = start(b, &j, ranks);
    assert_int_equal(wait_procs(id, 4), 4); /* two shells, two sleeps */

    b->ops->stop(b, a, 0);
    backend_event ev[2];
    assert_int_equal(wait_events(b, ev, 2), 2);
    assert_int_equal(wait_procs(id, 0), 0);
    b->ops->release(b, a);
    b->ops->free(b);
}

/* A rank that exits and leaves a background process behind: the process does not
 * survive the attempt. */
static void test_leftovers_killed_with_last_rank(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "left");
    const char *argv[] = {"sh", "-c", "sleep 1000 & echo started; exit 0", NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_rank ranks[1];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[1];
    assert_int_equal(wait_events(b, ev, 1), 1);
    assert_int_equal(ev[0].exit_code, 0);
    assert_int_equal(wait_procs(id, 0), 0);
    b->ops->release(b, a);
    b->ops->free(b);
}

/* ---- logs ---------------------------------------------------------------------- */

static void test_logs(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "log");
    const char *argv[] = {"sh", "-c", "echo to-stdout; echo to-stderr >&2; read x; echo \"[$x]\"",
                          NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_rank ranks[1];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[1];
    assert_int_equal(wait_events(b, ev, 1), 1);

    backend_log *l = NULL;
    assert_int_equal(b->ops->log_open(b, id, 1, 0, -1, &l), TY_OK);
    char buf[4096];
    size_t len = 0;
    long n;
    while ((n = b->ops->log_read(l, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    assert_int_equal(n, 0);
    buf[len] = '\0';
    /* stdin is /dev/null: read gets nothing. */
    assert_string_equal(buf, "to-stdout\nto-stderr\n[]\n");
    b->ops->log_close(l);

    l = NULL;
    assert_int_equal(b->ops->log_open(b, id, 1, 1, -1, &l), TY_ENOTFOUND);
    assert_int_equal(b->ops->log_open(b, id, 2, 0, -1, &l), TY_ENOTFOUND);
    assert_int_equal(b->ops->log_open(b, "../../etc", 1, 0, -1, &l), TY_ENOTFOUND);
    char other[27];
    make_id(other, "nolog");
    assert_int_equal(b->ops->log_open(b, other, 1, 0, -1, &l), TY_ENOTFOUND);
    assert_null(l);
    b->ops->release(b, a);
    b->ops->free(b);
}

/* ---- capacity -------------------------------------------------------------------- */

static void test_slots(void **state)
{
    (void)state;
    backend *b = new_backend(2, 0, NULL);
    assert_int_equal(local_backend_slots(b), 2);
    char id1[27], id2[27], id3[27], why[256] = "";
    make_id(id1, "slota");
    make_id(id2, "slotb");
    make_id(id3, "slotc");
    const char *argv[] = {"true", NULL};
    backend_job two = mkjob(id1, 1, 2, 0, argv, NULL);
    backend_job one = mkjob(id2, 1, 1, 0, argv, NULL);
    backend_job three = mkjob(id3, 1, 3, 0, argv, NULL);
    backend_attempt *a = NULL, *c = NULL;

    assert_int_equal(b->ops->reserve(b, &two, &a, why, sizeof why), TY_OK);
    assert_int_equal(local_backend_slots_used(b), 2);
    assert_int_equal(b->ops->reserve(b, &one, &c, why, sizeof why), TY_EAGAIN);
    assert_int_equal(b->ops->reserve(b, &three, &c, why, sizeof why), TY_EINVAL);
    assert_non_null(strstr(why, "slots"));
    b->ops->release(b, a);
    assert_int_equal(local_backend_slots_used(b), 0);
    assert_int_equal(b->ops->reserve(b, &one, &c, why, sizeof why), TY_OK);
    assert_int_equal(local_backend_slots_used(b), 1);
    b->ops->release(b, c);

    backend_job bad = mkjob("not-an-id", 1, 1, 0, argv, NULL);
    assert_int_equal(b->ops->reserve(b, &bad, &c, why, sizeof why), TY_EINVAL);
    b->ops->free(b);

    /* The default: twice the online CPUs. */
    b = new_backend(0, 0, NULL);
    assert_int_equal(local_backend_slots(b), 2 * sysconf(_SC_NPROCESSORS_ONLN));
    b->ops->free(b);
}

static void test_gpus_none(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    assert_int_equal(local_backend_gpus(b), 0);
    char id[27], why[256] = "";
    make_id(id, "nogpu");
    const char *argv[] = {"true", NULL};
    backend_job j = mkjob(id, 1, 2, 1, argv, NULL);
    backend_attempt *a = NULL;
    assert_int_equal(b->ops->reserve(b, &j, &a, why, sizeof why), TY_EINVAL);
    assert_non_null(strstr(why, "GPU"));
    assert_int_equal(local_backend_slots_used(b), 0);
    b->ops->free(b);
}

static void test_gpus_assigned(void **state)
{
    (void)state;
    backend *b = new_backend(8, 2, NULL);
    assert_int_equal(local_backend_gpus(b), 2);
    char id[27], id2[27], why[256] = "";
    make_id(id, "gpu");
    make_id(id2, "gpub");
    const char *argv[] = {
        "sh", "-c", "printf %s \"$CUDA_VISIBLE_DEVICES\" > \"$TRAINYARD_OUTPUT_DIR/cuda-$RANK\"",
        NULL};
    backend_job j = mkjob(id, 1, 2, 1, argv, NULL);
    backend_rank ranks[2];
    backend_attempt *a = start(b, &j, ranks);

    backend_job j2 = mkjob(id2, 1, 2, 1, argv, NULL);
    backend_attempt *a2 = NULL;
    assert_int_equal(b->ops->reserve(b, &j2, &a2, why, sizeof why), TY_EAGAIN);
    backend_job j3 = mkjob(id2, 1, 1, 3, argv, NULL);
    assert_int_equal(b->ops->reserve(b, &j3, &a2, why, sizeof why), TY_EINVAL);
    assert_non_null(strstr(why, "GPU"));

    backend_event ev[2];
    assert_int_equal(wait_events(b, ev, 2), 2);
    char real[PATH_MAX];
    assert_non_null(realpath(data_dir, real));
    char *c0 = read_filef("%s/jobs/%s/output/cuda-0", real, id);
    char *c1 = read_filef("%s/jobs/%s/output/cuda-1", real, id);
    assert_non_null(c0);
    assert_non_null(c1);
    /* One GPU each, different ones, out of 0 and 1. */
    assert_true((strcmp(c0, "0") == 0 && strcmp(c1, "1") == 0) ||
                (strcmp(c0, "1") == 0 && strcmp(c1, "0") == 0));
    free(c0);
    free(c1);
    b->ops->release(b, a);
    /* Released GPUs are handed out again. */
    assert_int_equal(b->ops->reserve(b, &j2, &a2, why, sizeof why), TY_OK);
    b->ops->release(b, a2);
    b->ops->free(b);
}

/* ---- commands ------------------------------------------------------------------ */

static void test_command_not_found(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27], why[256] = "";
    make_id(id, "nocmd");
    const char *argv[] = {"ty-no-such-command", "x", NULL};
    backend_job j = mkjob(id, 1, 2, 0, argv, NULL);
    backend_attempt *a = NULL;
    backend_rank ranks[2];
    assert_int_equal(b->ops->reserve(b, &j, &a, why, sizeof why), TY_OK);
    assert_int_not_equal(launch_sync(b, a, &j, ranks, why, sizeof why), TY_OK);
    assert_non_null(strstr(why, "ty-no-such-command"));

    /* A path that does not exist fails the same way, with nothing left running. */
    const char *argv2[] = {"/nonexistent/ty-cmd", NULL};
    backend_job j2 = mkjob(id, 2, 2, 0, argv2, NULL);
    assert_int_not_equal(launch_sync(b, a, &j2, ranks, why, sizeof why), TY_OK);
    assert_non_null(strstr(why, "ty-cmd"));
    backend_event ev[1];
    assert_int_equal(b->ops->observe(b, ev, 1), 0);
    b->ops->release(b, a);
    assert_int_equal(local_backend_slots_used(b), 0);
    b->ops->free(b);
}

static void test_bin_dirs_on_path(void **state)
{
    (void)state;
    char script[PATH_MAX + 32];
    snprintf(script, sizeof script, "%s/ty-test-hello", bin_dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\necho \"hello $1\" > \"$TRAINYARD_OUTPUT_DIR/hello\"\n", f);
    fclose(f);
    assert_int_equal(chmod(script, 0755), 0);

    const char *bins[] = {bin_dir, NULL};
    backend *b = new_backend(4, 0, bins);
    char id[27];
    make_id(id, "bin");
    const char *argv[] = {"ty-test-hello", "world", NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_rank ranks[1];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[1];
    assert_int_equal(wait_events(b, ev, 1), 1);
    assert_int_equal(ev[0].exit_code, 0);
    char real[PATH_MAX];
    assert_non_null(realpath(data_dir, real));
    char *out = read_filef("%s/jobs/%s/output/hello", real, id);
    assert_non_null(out);
    assert_string_equal(out, "hello world\n");
    free(out);
    b->ops->release(b, a);
    b->ops->free(b);
}

/* ---- attempts ------------------------------------------------------------------ */

static void test_relaunch_on_same_reservation(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "again");
    const char *argv[] = {"sh", "-c", "echo \"attempt $TRAINYARD_ATTEMPT\"", NULL};
    backend_job j = mkjob(id, 1, 2, 0, argv, NULL);
    backend_rank ranks[2];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[2];
    assert_int_equal(wait_events(b, ev, 2), 2);

    char why[256] = "";
    j.attempt = 2;
    assert_int_equal(launch_sync(b, a, &j, ranks, why, sizeof why), TY_OK);
    assert_int_equal(wait_events(b, ev, 2), 2);
    assert_ptr_equal(ev[0].attempt, a);
    assert_int_equal(local_backend_slots_used(b), 2);

    for (int attempt = 1; attempt <= 2; attempt++) {
        backend_log *l = NULL;
        assert_int_equal(b->ops->log_open(b, id, attempt, 1, -1, &l), TY_OK);
        char buf[256], want[64];
        long n = b->ops->log_read(l, buf, sizeof buf - 1);
        assert_true(n > 0);
        buf[n] = '\0';
        snprintf(want, sizeof want, "attempt %d\n", attempt);
        assert_string_equal(buf, want);
        b->ops->log_close(l);
    }
    b->ops->release(b, a);
    b->ops->free(b);
}

/* free() with ranks still running (a caller's bug) leaves nothing behind. */
static void test_free_kills_running_ranks(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "free");
    const char *argv[] = {"sleep", "1000", NULL};
    backend_job j = mkjob(id, 1, 2, 0, argv, NULL);
    backend_rank ranks[2];
    start(b, &j, ranks);
    assert_int_equal(wait_procs(id, 2), 2);
    b->ops->free(b);
    assert_int_equal(wait_procs(id, 0), 0);
    /* Both were reaped: no child of ours is left. */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* ---- recover ------------------------------------------------------------------- */

/* Starts argv as a process of "a previous server": our child, in its own group. */
static pid_t spawn_orphan(const char *id, const char *const *argv)
{
    char entry[64];
    snprintf(entry, sizeof entry, "TRAINYARD_JOB_ID=%s", id);
    char *envp[] = {entry, "PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = 0;
    assert_int_equal(posix_spawnp(&pid, argv[0], NULL, &attr, (char *const *)argv, envp), 0);
    posix_spawnattr_destroy(&attr);
    return pid;
}

static void test_recover(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "recov");
    const char *argv[] = {"sleep", "1000", NULL};
    pid_t pid = spawn_orphan(id, argv);
    assert_int_equal(wait_procs(id, 1), 1);

    int found = -1;
    assert_int_equal(recover_id(b, id, 5000, &found), TY_OK);
    assert_int_equal(found, 1);
    assert_int_equal(count_job_procs(id), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);

    /* Nothing of a job that never ran here. */
    char other[27];
    make_id(other, "recnone");
    found = -1;
    assert_int_equal(recover_id(b, other, 100, &found), TY_OK);
    assert_int_equal(found, 0);
    assert_int_equal(recover_id(b, "../x", 100, &found), TY_EINVAL);
    b->ops->free(b);
}

/* Processes that ignore SIGTERM are killed once the grace period is over. */
static void test_recover_escalates_to_sigkill(void **state)
{
    (void)state;
    backend *b = new_backend(4, 0, NULL);
    char id[27];
    make_id(id, "stubborn");
    /* The trailing ':' keeps sh from exec'ing sleep: two processes, both ignoring TERM. */
    const char *argv[] = {"sh", "-c", "trap '' TERM; sleep 1000; :", NULL};
    pid_t pid = spawn_orphan(id, argv);
    assert_int_equal(wait_procs(id, 2), 2);

    int found = -1;
    assert_int_equal(recover_id(b, id, 100, &found), TY_OK);
    assert_int_equal(found, 2);
    assert_int_equal(count_job_procs(id), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    b->ops->free(b);
}

/* ---- without pidfds ------------------------------------------------------------ */

/* Makes pidfd_open fail with ENOSYS in this process and its future children. */
static int refuse_pidfd_open(void)
{
#ifdef SYS_pidfd_open
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
    errno = 0;
    if (syscall(SYS_pidfd_open, getpid(), 0) >= 0 || errno != ENOSYS)
        return -1;
    return 0;
#else
    return 0; /* the backend never has pidfds here */
#endif
}

static void test_fallback_uses_timer(void **state)
{
    (void)state;
    if (!fallback_ok)
        skip();
    backend *b = new_backend(4, 0, NULL);
    char path[64], target[128] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", b->ops->event_fd(b));
    assert_true(readlink(path, target, sizeof target - 1) > 0);
    assert_non_null(strstr(target, "timerfd"));
    b->ops->free(b);
}

/* ---- groups -------------------------------------------------------------------- */

/* ---- the disk limit and the logs of a job across attempts ------------------------ */

/* Writes n bytes of 'x' to path. */
static void write_bytes(const char *path, size_t n)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++)
        fputc('x', fp);
    assert_int_equal(fclose(fp), 0);
}

static void test_disk_usage(void **state)
{
    (void)state;
    char dir[128], p[PATH_MAX];
    local_usage u;
    snprintf(dir, sizeof dir, "%s/usage", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(local_disk_usage(dir, 100, 8, &u), TY_OK);
    uint64_t empty = u.bytes;
    assert_int_equal(u.entries, 0);

    /* 1 MiB written counts; a sparse 1 GiB file counts what it holds; a link to a big
     * file outside is not followed. */
    snprintf(p, sizeof p, "%s/data", dir);
    write_bytes(p, 1 << 20);
    snprintf(p, sizeof p, "%s/sparse", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 1 << 30), 0);
    close(fd);
    snprintf(p, sizeof p, "%s/outside", root);
    write_bytes(p, 2 << 20);
    char link[PATH_MAX];
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(symlink(p, link), 0);
    assert_int_equal(local_disk_usage(dir, 100, 8, &u), TY_OK);
    assert_int_equal(u.entries, 3);
    assert_true(u.bytes >= empty + (1 << 20));
    assert_true(u.bytes < empty + (1 << 20) + (256 << 10));
    assert_false(u.too_many || u.too_deep);

    char why[LOCAL_DISK_DETAIL_MAX] = "";
    assert_int_equal(local_disk_over(&u, 0, why, sizeof why), 0);          /* no limit */
    assert_int_equal(local_disk_over(&u, 2 << 20, why, sizeof why), 0);    /* within */
    assert_int_equal(local_disk_over(&u, 512 << 10, why, sizeof why), 1);
    assert_non_null(strstr(why, "job directory uses 1.0 MiB, over its limit of 512 KiB"));

    /* Nested deeper than the walk follows, or more entries than it counts: over. */
    snprintf(p, sizeof p, "%s/d1", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/d1/d2", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/d1/d2/d3", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(local_disk_usage(dir, 100, 2, &u), TY_OK);
    assert_true(u.too_deep);
    assert_int_equal(local_disk_over(&u, 1ull << 40, why, sizeof why), 1);
    assert_non_null(strstr(why, "deeper than"));
    assert_int_equal(local_disk_usage(dir, 100, 8, &u), TY_OK);
    assert_false(u.too_deep);
    assert_int_equal(u.entries, 6);
    assert_int_equal(local_disk_usage(dir, 4, 8, &u), TY_OK);
    assert_true(u.too_many);
    assert_int_equal(local_disk_over(&u, 1ull << 40, why, sizeof why), 1);
    assert_non_null(strstr(why, "more than"));

    /* A directory its owner closed is still measured. */
    snprintf(p, sizeof p, "%s/d1/d2/d3/closed", dir);
    write_bytes(p, 64 << 10);
    snprintf(p, sizeof p, "%s/d1/d2", dir);
    assert_int_equal(chmod(p, 0), 0);
    assert_int_equal(local_disk_usage(dir, 100, 8, &u), TY_OK);
    assert_int_equal(u.entries, 7);
    assert_int_equal(u.unreadable, 0);

    snprintf(p, sizeof p, "%s/none", root);
    assert_int_equal(local_disk_usage(p, 100, 8, &u), TY_ENOTFOUND);
    assert_int_equal(local_disk_usage(dir, 100, LOCAL_DISK_MAX_DEPTH + 1, &u), TY_EINVAL);
}

static void test_fmt_bytes(void **state)
{
    (void)state;
    static const struct {
        uint64_t n;
        const char *want;
    } c[] = {{0, "0 bytes"},          {1023, "1023 bytes"},        {1024, "1 KiB"},
             {1536, "1.5 KiB"},       {8ull << 20, "8 MiB"},       {(1ull << 30) / 10 * 12, "1.2 GiB"},
             {10ull << 30, "10 GiB"}, {3ull << 40, "3 TiB"},       {5ull << 50, "5120 TiB"}};
    char buf[32];
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        local_fmt_bytes(buf, sizeof buf, c[i].n);
        assert_string_equal(buf, c[i].want);
    }
}

/* A backend with limits (bytes; 0: the defaults, or none for the disk). */
static backend *new_backend_limits(long long log_limit, long long job_log_limit,
                                   long long disk_limit)
{
    local_options opt = {.data_dir = data_dir,
                         .slots = 4,
                         .gpus = 0,
                         .server_url = SERVER_URL,
                         .log_limit = log_limit,
                         .job_log_limit = job_log_limit,
                         .disk_limit = disk_limit};
    backend *b = NULL;
    char err[256] = "";
    assert_int_equal(local_backend_new(&opt, &b, err, sizeof err), TY_OK);
    return b;
}

/* A rank that writes 4 MiB into its output under a 1 MiB limit, then waits: the attempt
 * is said to be over its disk limit (once), and nothing is stopped by the backend. */
static void test_disk_limit_event(void **state)
{
    (void)state;
    backend *b = new_backend_limits(0, 0, 1 << 20);
    assert_int_equal(local_backend_disk_limit(b), 1 << 20);
    char id[27];
    make_id(id, "disk");
    const char *argv[] = {"sh", "-c",
                          "head -c 4194304 /dev/zero > \"$TRAINYARD_OUTPUT_DIR/big\"; "
                          "exec sleep 60", NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_rank ranks[1];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[1];
    assert_int_equal(wait_events(b, ev, 1), 1);
    assert_int_equal(ev[0].kind, BACKEND_EV_OVER_LIMIT);
    assert_ptr_equal(ev[0].attempt, a);
    assert_int_equal(ev[0].rank, -1);
    assert_int_equal(ev[0].limit, BACKEND_LIMIT_DISK);
    if (!strstr(ev[0].detail, "job directory uses 4.0 MiB, over its limit of 1 MiB"))
        fail_msg("detail: %s", ev[0].detail);
    /* The rank still runs: stopping it is the loop's decision. */
    assert_int_equal(kill(ranks[0].pid, 0), 0);
    b->ops->stop(b, a, 1);
    assert_int_equal(wait_events(b, ev, 1), 1);
    assert_int_equal(ev[0].kind, BACKEND_EV_DISRUPTED); /* said once: no second OVER_LIMIT */
    b->ops->release(b, a);
    b->ops->free(b);
}

/* Attempts 1-3 write 1,000 bytes of log each; with a job total of 1,500 bytes, attempt 3
 * starts after attempt 1's log was deleted, and that log reads as a line saying so. */
static void test_pruned_log_reads_as_notice(void **state)
{
    (void)state;
    backend *b = new_backend_limits(64 << 10, 1500, 0);
    assert_int_equal(local_backend_job_log_limit(b), 1500);
    char id[27];
    make_id(id, "prune");
    const char *argv[] = {"sh", "-c", "head -c 999 /dev/zero | tr '\\0' x; echo", NULL};
    backend_job j = mkjob(id, 1, 1, 0, argv, NULL);
    backend_rank ranks[1];
    backend_attempt *a = start(b, &j, ranks);
    backend_event ev[1];
    char why[256] = "";
    assert_int_equal(wait_events(b, ev, 1), 1);
    for (int attempt = 2; attempt <= 3; attempt++) {
        j.attempt = attempt;
        assert_int_equal(launch_sync(b, a, &j, ranks, why, sizeof why), TY_OK);
        assert_int_equal(wait_events(b, ev, 1), 1);
    }
    char buf[1024];
    backend_log *l = NULL;
    assert_int_equal(b->ops->log_open(b, id, 1, 0, -1, &l), TY_OK);
    long n = b->ops->log_read(l, buf, sizeof buf - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_int_equal(b->ops->log_read(l, buf + n, sizeof buf - 1 - (size_t)n), 0);
    b->ops->log_close(l);
    if (strncmp(buf, "[trainyard] the logs of attempt 1 (", 35) != 0 ||
        !strstr(buf, "were deleted") || !strstr(buf, "within 1.5 KiB (--local-job-log-limit)\n"))
        fail_msg("the pruned log reads: %s", buf);
    /* A rank the attempt did not have has no log. */
    assert_int_equal(b->ops->log_open(b, id, 1, 1, -1, &l), TY_ENOTFOUND);
    for (int attempt = 2; attempt <= 3; attempt++) {
        assert_int_equal(b->ops->log_open(b, id, attempt, 0, -1, &l), TY_OK);
        n = b->ops->log_read(l, buf, sizeof buf);
        assert_int_equal(n, 1000);
        b->ops->log_close(l);
    }
    b->ops->release(b, a);
    b->ops->free(b);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/ty-local-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    snprintf(data_dir, sizeof data_dir, "%s/data", root);
    snprintf(bin_dir, sizeof bin_dir, "%s/bin", root);
    if (mkdir(bin_dir, 0755) != 0)
        return -1;
    /* Secrets of the server: no rank may see them. */
    setenv("TRAINYARD_ADMIN_TOKEN", "secret", 1);
    setenv("SECRET_X", "1", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static int setup_fallback(void **state)
{
    fallback_ok = refuse_pidfd_open() == 0;
    return setup(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_of_each_rank),
        cmocka_unit_test(test_exit_codes_and_signals),
        cmocka_unit_test(test_sigterm_stops_gang),
        cmocka_unit_test(test_sigterm_reaches_grandchildren),
        cmocka_unit_test(test_leftovers_killed_with_last_rank),
        cmocka_unit_test(test_logs),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_gpus_none),
        cmocka_unit_test(test_gpus_assigned),
        cmocka_unit_test(test_command_not_found),
        cmocka_unit_test(test_bin_dirs_on_path),
        cmocka_unit_test(test_relaunch_on_same_reservation),
        cmocka_unit_test(test_free_kills_running_ranks),
        cmocka_unit_test(test_recover),
        cmocka_unit_test(test_recover_escalates_to_sigkill),
        cmocka_unit_test(test_disk_usage),
        cmocka_unit_test(test_fmt_bytes),
        cmocka_unit_test(test_disk_limit_event),
        cmocka_unit_test(test_pruned_log_reads_as_notice),
    };
    /* Run last: the seccomp filter cannot be removed again. */
    const struct CMUnitTest without_pidfd[] = {
        cmocka_unit_test(test_fallback_uses_timer),
        cmocka_unit_test(test_exit_codes_and_signals),
        cmocka_unit_test(test_sigterm_reaches_grandchildren),
        cmocka_unit_test(test_leftovers_killed_with_last_rank),
        cmocka_unit_test(test_relaunch_on_same_reservation),
        cmocka_unit_test(test_free_kills_running_ranks),
        cmocka_unit_test(test_recover),
        cmocka_unit_test(test_recover_escalates_to_sigkill),
        cmocka_unit_test(test_disk_limit_event),
    };
    int failed = cmocka_run_group_tests_name("local", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("local without pidfd", without_pidfd, setup_fallback,
                                          teardown);
    return failed;
}
