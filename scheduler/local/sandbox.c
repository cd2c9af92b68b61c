/*
 * sandbox.c - one bubblewrap sandbox per rank (sandbox.h).
 *
 * Spawning: clone(CLONE_VM | CLONE_VFORK), as posix_spawn() does, then in the child
 * system calls only: default signals, join the rank's cgroups, set up stdio, a new
 * session, execve(bwrap). posix_spawn() cannot join a cgroup, hence our own child;
 * fork() would copy the server's page tables for every rank. As root, setpriv (in
 * the sandbox, after bwrap built it as root) drops to the rank user. A failure
 * before the exec comes back in the memory the child shares.
 *
 * cgroups: v1 (one hierarchy per controller, as on these machines) or v2 (one
 * hierarchy; used only where the server may create cgroups at its root, since a v2
 * cgroup with processes in it cannot give controllers to children). A rank's
 * cgroup is <base>/<job id>-a<attempt>-r<rank>; base is named after the data
 * directory, so two servers on one machine never touch each other's ranks.
 */
#define _GNU_SOURCE
#include "scheduler/local/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/ty_crypto.h"
#include "common/ty_log.h"
#include "common/ty_time.h"
#include "scheduler/local/local_int.h"

#define CG_ROOT "/sys/fs/cgroup"
#define STATUS_WAIT_MS 2000   /* sandbox_signal(): bound on waiting for bwrap's child pid */
#define CG_EMPTY_WAIT_MS 2000 /* finish/recover: bound on waiting for a cgroup to empty */

#define MAX_RO 8               /* read-only binds: ro_dirs and the data sets */

static const char *const v1_controllers[] = {"memory", "cpu", "pids"};

struct sandbox {
    char *bwrap, *setpriv;          /* absolute paths */
    char *data_dir;
    int nro;
    char *ro[MAX_RO];               /* bound read-only into every sandbox */
    int drop;                       /* 1: the server is root; setpriv drops to uid/gid */
    uid_t uid;
    gid_t gid;
    char *user;                     /* the name ranks run as */
    int v2;                         /* 1: one v2 hierarchy at cg_base[0] */
    char *cg_base[3];               /* v1: per controller (v1_controllers order), or NULL */
    char summary[512];
    /* The stack of sandbox_spawn()'s child until it execs (spawns are sequential). */
    _Alignas(16) char stack[64 * 1024];
};

/* ---- small helpers -------------------------------------------------------- */

/* Writes s to path (a cgroup file); 0 or -1 with errno. */
static int write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(s);
    ssize_t w = write(fd, s, n);
    int e = errno;
    close(fd);
    if (w != (ssize_t)n) {
        errno = w < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

/* Writes s to dir/file; 0 or -1 with errno. */
static int cg_set(const char *dir, const char *file, const char *s)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return write_file(path, s);
}

/* 1 when dir/file exists. */
static int cg_has(const char *dir, const char *file)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, file);
    return n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0;
}

/* Reads up to len-1 bytes of path into buf; the length, or -1. */
static ssize_t read_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off + 1 < len) {
        ssize_t n = read(fd, buf + off, len - 1 - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    close(fd);
    buf[off] = '\0';
    return (ssize_t)off;
}

/* The value of "key N" in a cgroup flat-keyed file (memory.events, oom_control). */
static long long keyed_value(const char *path, const char *key)
{
    char buf[4096];
    if (read_file(path, buf, sizeof buf) < 0)
        return -1;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ')
            return strtoll(line + kl + 1, NULL, 10);
    return -1;
}

/* name along PATH (then /usr/bin:/bin); *out new, or NULL when not found. */
static char *find_exe(const char *name)
{
    const char *path = getenv("PATH");
    char *dirs = NULL;
    if (asprintf(&dirs, "%s:/usr/bin:/bin", path && *path ? path : "/usr/local/bin") < 0)
        return NULL;
    char *out = NULL, *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d && !out; d = strtok_r(NULL, ":", &save)) {
        char cand[PATH_MAX];
        if (d[0] != '/' || snprintf(cand, sizeof cand, "%s/%s", d, name) >= (int)sizeof cand)
            continue;
        if (access(cand, X_OK) == 0)
            out = realpath(cand, NULL);
    }
    free(dirs);
    return out;
}

/* ---- argv ----------------------------------------------------------------- */

/* A growing argv; every string owned. */
typedef struct argv_vec {
    char **v;
    size_t n, cap;
    int failed;
} argv_vec;

static void argv_add(argv_vec *a, const char *s)
{
    if (a->failed)
        return;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        char **v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->failed = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->failed = 1;
        return;
    }
    a->v[++a->n] = NULL;
}

static void argv_add3(argv_vec *a, const char *opt, const char *x, const char *y)
{
    argv_add(a, opt);
    argv_add(a, x);
    if (y)
        argv_add(a, y);
}

static void argv_free(argv_vec *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* The top-level directories a dynamically linked program needs: merged-/usr systems
 * have them as symlinks into /usr, older ones as directories. */
static void add_root_dirs(argv_vec *a)
{
    static const char *const dirs[] = {"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        struct stat st;
        if (lstat(dirs[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlink(dirs[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            argv_add3(a, "--symlink", target, dirs[i]);
        } else if (S_ISDIR(st.st_mode)) {
            argv_add3(a, "--ro-bind", dirs[i], dirs[i]);
        }
    }
}

/* Creates path's ancestors in the sandbox as 0755: bwrap would make them 0700 root, and
 * the rank user could not pass them to reach the directory bound at path. */
static void add_parents(argv_vec *a, const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *slash = strchr(buf + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        argv_add3(a, "--perms", "0755", NULL);
        argv_add3(a, "--dir", buf, NULL);
        *slash = '/';
    }
}

/*
 * A private tmpfs at dest that the rank can write like a normal /tmp (1777: every user
 * may create, only the owner may delete), of at most memory bytes when the rank has a
 * memory limit. What is written there is memory charged to the writer's cgroup, so it
 * counts against resources.memory too; the size only makes a full /tmp say ENOSPC
 * before the OOM killer would.
 */
static void add_tmpfs(argv_vec *a, const char *dest, double memory)
{
    argv_add3(a, "--perms", "1777", NULL);
    if (memory >= 1) {
        char size[32];
        snprintf(size, sizeof size, "%.0f", memory);
        argv_add3(a, "--size", size, NULL);
    }
    argv_add3(a, "--tmpfs", dest, NULL);
}

/* The bwrap command line that runs exe with argv[1..] for r (r->job_dir may be NULL:
 * the start-up check). */
static void build_argv(const sandbox *sb, const sandbox_rank *r, const char *exe,
                       char *const argv[], argv_vec *a)
{
    argv_add(a, sb->bwrap);
    argv_add(a, "--die-with-parent");
    /* As root bwrap builds the namespaces itself and setpriv (below) drops to the rank
     * user; otherwise a user namespace gives bwrap the rights it needs. */
    if (!sb->drop)
        argv_add(a, "--unshare-user");
    argv_add(a, "--unshare-pid");
    argv_add(a, "--unshare-ipc");
    argv_add(a, "--unshare-uts");
    argv_add(a, "--unshare-cgroup-try");
    argv_add(a, "--new-session");
    if (!sb->drop) {
        argv_add(a, "--cap-drop");
        argv_add(a, "ALL");
    }
    argv_add3(a, "--json-status-fd", "3", NULL);
    argv_add3(a, "--ro-bind", "/usr", "/usr");
    add_root_dirs(a);
    argv_add3(a, "--ro-bind", "/etc", "/etc");
    argv_add3(a, "--dev", "/dev", NULL);
    add_tmpfs(a, "/dev/shm", r ? r->memory : 0);
    argv_add3(a, "--proc", "/proc", NULL);
    add_tmpfs(a, "/tmp", r ? r->memory : 0);
    char path[PATH_MAX];
    for (int i = 0; i < sb->nro; i++) {
        add_parents(a, sb->ro[i]);
        argv_add3(a, "--ro-bind", sb->ro[i], sb->ro[i]);
    }
    if (r && r->ngpus > 0) {
        static const char *const ctl[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                          "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
        for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++)
            argv_add3(a, "--dev-bind-try", ctl[i], ctl[i]);
        for (int g = 0; g < r->ngpus; g++) {
            snprintf(path, sizeof path, "/dev/nvidia%d", r->gpus[g]);
            argv_add3(a, "--dev-bind-try", path, path);
        }
        argv_add3(a, "--ro-bind-try", "/sys", "/sys");
    }
    if (r && r->job_dir) {
        add_parents(a, r->job_dir);
        argv_add3(a, "--bind", r->job_dir, r->job_dir);
        argv_add3(a, "--chdir", r->job_dir, NULL);
    } else {
        argv_add3(a, "--chdir", "/", NULL);
    }
    argv_add(a, "--");
    if (sb->drop) {
        char ids[32];
        argv_add(a, sb->setpriv);
        snprintf(ids, sizeof ids, "--reuid=%u", (unsigned)sb->uid);
        argv_add(a, ids);
        snprintf(ids, sizeof ids, "--regid=%u", (unsigned)sb->gid);
        argv_add(a, ids);
        argv_add(a, "--clear-groups");
        argv_add(a, "--inh-caps=-all");
        argv_add(a, "--bounding-set=-all");
        argv_add(a, "--no-new-privs");
        argv_add(a, "--");
    }
    argv_add(a, exe);
    for (size_t i = 1; argv && argv[0] && argv[i]; i++)
        argv_add(a, argv[i]);
}

/* ---- cgroups -------------------------------------------------------------- */

/* This process's cgroup in the hierarchy whose /proc/self/cgroup line has `want` in
 * its controller list ("" for v2's "0::"); *out new. */
static char *own_cgroup(const char *want)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return NULL;
    char line[1024], *out = NULL;
    while (!out && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (!*want) {
            if (!*ctrls && strcmp(line, "0") == 0)
                out = strdup(path);
            continue;
        }
        char *save = NULL, *copy = strdup(ctrls);
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save))
            if (strcmp(t, want) == 0) {
                out = strdup(path);
                break;
            }
        free(copy);
    }
    fclose(f);
    return out;
}

/* Pids listed in dir/cgroup.procs, SIGKILLed; the number still listed. */
static int cg_kill(const char *dir)
{
    char path[PATH_MAX], buf[65536];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    if (read_file(path, buf, sizeof buf) < 0)
        return 0;
    int n = 0;
    for (char *p = buf; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1 && kill((pid_t)pid, SIGKILL) == 0)
            n++;
        p = end;
        while (*p == '\n')
            p++;
    }
    return n;
}

/* Kills everything in dir and removes it; the number of processes found. */
static int cg_remove(const char *dir)
{
    int found = 0, k;
    int64_t deadline = ty_time_now_ms() + CG_EMPTY_WAIT_MS;
    for (;;) {
        k = cg_kill(dir);
        found += k;
        if (rmdir(dir) == 0 || errno == ENOENT)
            break;
        if (errno != EBUSY || ty_time_now_ms() > deadline) {
            TY_LOG(TY_LOG_WARN, "sandbox: cannot remove a rank's cgroup", "{s:s,s:s}", "cgroup",
                   dir, "error", strerror(errno));
            break;
        }
        local_sleep_ms(5);
    }
    return found;
}

/* Removes base's rank cgroups whose names start with prefix ("" for all). */
static int cg_sweep(const char *base, const char *prefix)
{
    DIR *d = opendir(base);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    size_t pl = strlen(prefix);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || de->d_type != DT_DIR || strncmp(de->d_name, prefix, pl) != 0)
            continue;
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/%s", base, de->d_name) < (int)sizeof dir)
            found += cg_remove(dir);
    }
    closedir(d);
    return found;
}

/* Sets up sb->cg_base; leaves them NULL (and says why in note) where this process may
 * not manage cgroups. */
static void cg_init(sandbox *sb, char *note, size_t notelen)
{
    unsigned char h[TY_SHA256_LEN];
    char name[32];
    ty_sha256(sb->data_dir, strlen(sb->data_dir), h);
    snprintf(name, sizeof name, "trainyard-%02x%02x%02x%02x%02x%02x", h[0], h[1], h[2], h[3], h[4],
             h[5]);

    struct stat st;
    char path[PATH_MAX];
    if (stat(CG_ROOT "/cgroup.controllers", &st) == 0) {
        /* v2 only: a cgroup at the root, where controllers can be handed down. */
        char ctrls[256] = "";
        read_file(CG_ROOT "/cgroup.controllers", ctrls, sizeof ctrls);
        if (!strstr(ctrls, "memory") || !strstr(ctrls, "cpu") || !strstr(ctrls, "pids")) {
            local_why(note, notelen, "cgroup v2 lacks the memory, cpu or pids controller");
            return;
        }
        snprintf(path, sizeof path, CG_ROOT "/%s", name);
        if ((mkdir(path, 0755) != 0 && errno != EEXIST) ||
            write_file(CG_ROOT "/cgroup.subtree_control", "+memory +cpu +pids") != 0) {
            local_why(note, notelen, "cannot create cgroups in %s: %s", CG_ROOT, strerror(errno));
            rmdir(path);
            return;
        }
        if (cg_set(path, "cgroup.subtree_control", "+memory +cpu +pids") != 0) {
            local_why(note, notelen, "cannot delegate controllers in %s: %s", path,
                      strerror(errno));
            return;
        }
        sb->v2 = 1;
        sb->cg_base[0] = strdup(path);
        return;
    }
    for (size_t i = 0; i < 3; i++) {
        const char *c = v1_controllers[i];
        char *own = own_cgroup(c);
        snprintf(path, sizeof path, CG_ROOT "/%s%s/%s", c, own && strcmp(own, "/") ? own : "",
                 name);
        free(own);
        char procs[PATH_MAX];
        snprintf(procs, sizeof procs, CG_ROOT "/%s/cgroup.procs", c);
        if (access(procs, F_OK) != 0) {
            local_why(note, notelen, "no cgroup %s controller at %s/%s", c, CG_ROOT, c);
            continue;
        }
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            local_why(note, notelen, "cannot create cgroups in %s: %s", path, strerror(errno));
            continue;
        }
        sb->cg_base[i] = strdup(path);
    }
}

/* Makes the rank's cgroups with their limits; p->cg gets the directories. */
static ty_err cg_make(sandbox *sb, const sandbox_rank *r, sandbox_proc *p, char *why,
                      size_t whylen)
{
    char name[96];
    snprintf(name, sizeof name, "%s-a%d-r%d", r->job_id, r->attempt, r->rank);
    long long mem = r->memory > 0 ? (long long)r->memory : -1;
    /* The API keeps cpu within the machine's CPUs; a spec stored before that could ask for
     * more than a long long of microseconds: 10^7 CPUs are more than any machine, and within
     * what the kernel takes (2^44 us). */
    double cpu = r->cpu < 1e7 ? r->cpu : 1e7;
    long long quota = cpu > 0 ? (long long)(cpu * 100000.0 + 0.5) : -1;
    if (quota >= 0 && quota < 1000)
        quota = 1000; /* the kernel's smallest CFS quota: 1 ms per 100 ms */

    for (int i = 0; i < 3; i++) {
        if (!sb->cg_base[i])
            continue;
        char dir[PATH_MAX], v[64];
        int len = snprintf(dir, sizeof dir, "%s/%s", sb->cg_base[i], name);
        if (len < 0 || (size_t)len >= sizeof dir) {
            local_why(why, whylen, "cgroup path too long");
            return TY_EINVAL;
        }
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            local_why(why, whylen, "cannot create the cgroup %s: %s", dir, strerror(errno));
            return TY_EIO;
        }
        if (!(p->cg[p->ncg++] = strdup(dir)))
            return TY_ENOMEM;
        int ok = 1;
        const char *what = v1_controllers[i];
        if ((sb->v2 || i == 0) && mem > 0) {
            what = "memory";
            snprintf(v, sizeof v, "%lld", mem);
            ok = cg_set(dir, sb->v2 ? "memory.max" : "memory.limit_in_bytes", v) == 0;
            /* No swap beyond the limit, where the kernel accounts swap. */
            const char *swap = sb->v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes";
            if (ok && cg_has(dir, swap))
                cg_set(dir, swap, sb->v2 ? "0" : v);
        }
        if (ok && (sb->v2 || i == 1) && quota > 0) {
            what = "cpu";
            snprintf(v, sizeof v, sb->v2 ? "%lld 100000" : "%lld", quota);
            ok = sb->v2 ? cg_set(dir, "cpu.max", v) == 0
                        : cg_set(dir, "cpu.cfs_period_us", "100000") == 0 &&
                              cg_set(dir, "cpu.cfs_quota_us", v) == 0;
        }
        if (ok && (sb->v2 || i == 2)) {
            what = "pids";
            snprintf(v, sizeof v, "%d", SANDBOX_PIDS_MAX);
            ok = cg_set(dir, "pids.max", v) == 0;
        }
        if (!ok) {
            local_why(why, whylen, "cannot set the %s limit in %s: %s", what, dir, strerror(errno));
            return TY_EIO;
        }
    }
    return TY_OK;
}

/* ---- spawning ------------------------------------------------------------- */

static int sys_close_range(unsigned first)
{
#ifdef SYS_close_range
    return (int)syscall(SYS_close_range, first, ~0U, 0);
#else
    (void)first;
    errno = ENOSYS;
    return -1;
#endif
}

/* What the child of sandbox_spawn() needs; it shares the parent's memory. */
typedef struct child_args {
    char *const *argv, *const *envp;
    const int *cgfd;
    int ncg;
    int fds[3];                     /* stdin, stdout+stderr, bwrap's status */
    int err;                        /* set by the child when it fails before execve() */
} child_args;

/*
 * The child between clone() and execve(). It runs on its own stack in the parent's
 * memory (CLONE_VM | CLONE_VFORK, as posix_spawn() does, so that no page table is
 * copied), with the parent suspended: only system calls, no allocation, no locks.
 */
static int child(void *arg)
{
    child_args *c = arg;
    int e = 0;
    /* Every signal at its default before any is unblocked: a handler of the server
     * must never run here. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    for (int i = 0; i < c->ncg; i++)
        if (write(c->cgfd[i], "0", 1) != 1) { /* "0": the writing process itself */
            e = errno;
            goto fail;
        }
    /* fds 0..3 are set one by one: first move every source above 3. */
    int fds[3];
    for (int i = 0; i < 3; i++)
        if ((fds[i] = fcntl(c->fds[i], F_DUPFD_CLOEXEC, 4)) < 0) {
            e = errno;
            goto fail;
        }
    if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0 ||
        dup2(fds[2], 3) < 0) {
        e = errno;
        goto fail;
    }
    if (sys_close_range(4) != 0)
        for (int fd = 4; fd < 1024; fd++)
            close(fd);
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    umask(022);
    execve(c->argv[0], c->argv, c->envp);
    e = errno;
fail:
    c->err = e ? e : EINVAL;
    _exit(127);
}

ty_err sandbox_spawn(sandbox *sb, const sandbox_rank *r, const char *exe, char *const argv[],
                     char *const envp[], int out_fd, sandbox_proc *p, char *why, size_t whylen)
{
    argv_vec a = {0};
    int cgfd[3] = {-1, -1, -1}, in_fd = -1, st[2] = {-1, -1};
    ty_err rc = TY_EIO;

    memset(p, 0, sizeof *p);
    p->status_fd = -1;
    build_argv(sb, r, exe, argv, &a);
    if (a.failed) {
        rc = TY_ENOMEM;
        local_why(why, whylen, "out of memory building the sandbox's command line");
        goto out;
    }
    if (r && r->job_id && (rc = cg_make(sb, r, p, why, whylen)) != TY_OK)
        goto out;
    rc = TY_EIO;
    for (int i = 0; i < p->ncg; i++) {
        char f[PATH_MAX];
        snprintf(f, sizeof f, "%s/cgroup.procs", p->cg[i]);
        if ((cgfd[i] = open(f, O_WRONLY | O_CLOEXEC)) < 0) {
            local_why(why, whylen, "cannot open %s: %s", f, strerror(errno));
            goto out;
        }
    }
    if ((in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 || pipe2(st, O_CLOEXEC) != 0) {
        local_why(why, whylen, "cannot set up the sandbox: %s", strerror(errno));
        goto out;
    }
    child_args ca = {.argv = a.v, .envp = envp, .cgfd = cgfd, .ncg = p->ncg,
                     .fds = {in_fd, out_fd, st[1]}};
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(child, sb->stack + sizeof sb->stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &ca);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        local_why(why, whylen, "clone: %s", strerror(clone_errno));
        goto out;
    }
    if (ca.err != 0) { /* the child is gone, or going */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        local_why(why, whylen, "cannot start the sandbox (%s): %s", sb->bwrap, strerror(ca.err));
        goto out;
    }
    p->pid = pid;
    p->status_fd = st[0];
    st[0] = -1;
    rc = TY_OK;
out:
    for (int i = 0; i < 3; i++)
        if (cgfd[i] >= 0)
            close(cgfd[i]);
    int mine[] = {in_fd, st[0], st[1]};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (mine[i] >= 0)
            close(mine[i]);
    argv_free(&a);
    if (rc != TY_OK) {
        for (int i = 0; i < p->ncg; i++) {
            rmdir(p->cg[i]);
            free(p->cg[i]);
        }
        p->ncg = 0;
    }
    return rc;
}

/* Reads bwrap's status lines until the child pid is known, waiting up to wait_ms. */
static void read_init_pid(sandbox_proc *p, int wait_ms)
{
    char buf[1024];
    size_t len = 0;
    int64_t deadline = ty_time_now_ms() + wait_ms;
    while (p->init == 0 && p->status_fd >= 0) {
        int left = (int)(deadline - ty_time_now_ms());
        struct pollfd pf = {.fd = p->status_fd, .events = POLLIN};
        if (left < 0 || poll(&pf, 1, left) <= 0)
            return;
        ssize_t n = read(p->status_fd, buf + len, sizeof buf - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* bwrap is gone */
            close(p->status_fd);
            p->status_fd = -1;
            return;
        }
        len += (size_t)n;
        buf[len] = '\0';
        char *nl;
        while ((nl = strchr(buf, '\n')) != NULL) {
            json_t *o = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
            json_int_t pid = json_integer_value(json_object_get(o, "child-pid"));
            json_int_t ns = json_integer_value(json_object_get(o, "pid-namespace"));
            json_decref(o);
            if (pid > 1 && ns > 0) {
                p->init = (pid_t)pid;
                p->pidns = (unsigned long long)ns;
            }
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len + 1);
        }
        if (len == sizeof buf - 1)
            len = 0; /* a line this long is not bwrap's */
    }
}

/* The inode of pid's PID namespace, or 0 when it cannot be read (gone, say). */
static unsigned long long pidns_of(pid_t pid)
{
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return 0;
    link[n] = '\0';
    unsigned long long ino = 0;
    return sscanf(link, "pid:[%llu]", &ino) == 1 ? ino : 0;
}

/*
 * Sends sig to every process of p's PID namespace but its init (bwrap's, which would
 * only pass it on to nobody and must stay to end the namespace). Each process is
 * pinned with a pidfd, and its namespace read again, before it is signalled, so a
 * reused pid is never hit. Returns the number signalled.
 */
static int signal_namespace(const sandbox_proc *p, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long v = strtol(de->d_name, &end, 10);
        if (*end || v <= 1 || v == p->init || v == p->pid || pidns_of((pid_t)v) != p->pidns)
            continue;
        int fd = local_pidfd_open((pid_t)v);
        if (fd < 0)
            continue;
        if (pidns_of((pid_t)v) == p->pidns && local_pidfd_send_signal(fd, sig) == 0)
            n++;
        close(fd);
    }
    closedir(d);
    return n;
}

int sandbox_signal(sandbox_proc *p, int sig)
{
    if (p->pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    read_init_pid(p, STATUS_WAIT_MS);
    if (sig == SIGKILL) {
        /* The namespace's init: the kernel kills every process left in it. Without its
         * pid (bwrap still starting, or failing) bwrap itself: --die-with-parent takes
         * the sandbox down with it. */
        return kill(p->init > 0 ? p->init : p->pid, SIGKILL);
    }
    if (p->init <= 0) {
        errno = EAGAIN;
        return -1;
    }
    signal_namespace(p, sig);
    return 0;
}

void sandbox_status(int bwrap_code, int bwrap_signal, int *exit_code, int *signal)
{
    if (bwrap_signal > 0) {
        *exit_code = -1;
        *signal = bwrap_signal;
    } else if (bwrap_code > 128 && bwrap_code < 128 + NSIG) {
        *exit_code = -1;
        *signal = bwrap_code - 128;
    } else {
        *exit_code = bwrap_code;
        *signal = 0;
    }
}

void sandbox_finish(sandbox *sb, sandbox_proc *p, char *detail, size_t len)
{
    if (detail && len)
        detail[0] = '\0';
    for (int i = 0; i < p->ncg; i++) {
        int is_mem = sb->v2 || strstr(p->cg[i], "/memory/") != NULL;
        if (is_mem && detail && len) {
            char f[PATH_MAX], lim[64] = "";
            const char *events = sb->v2 ? "memory.events" : "memory.oom_control";
            const char *limit = sb->v2 ? "memory.max" : "memory.limit_in_bytes";
            snprintf(f, sizeof f, "%s/%s", p->cg[i], events);
            long long kills = keyed_value(f, "oom_kill");
            if (kills > 0) {
                snprintf(f, sizeof f, "%s/%s", p->cg[i], limit);
                read_file(f, lim, sizeof lim);
                long long bytes = strtoll(lim, NULL, 10);
                if (bytes > 0)
                    snprintf(detail, len, "out of memory: the kernel killed it at its limit "
                             "(resources.memory, %lld MiB)", bytes >> 20);
                else
                    snprintf(detail, len, "out of memory: the kernel killed it");
            }
        }
        cg_remove(p->cg[i]);
        free(p->cg[i]);
        p->cg[i] = NULL;
    }
    p->ncg = 0;
    if (p->status_fd >= 0)
        close(p->status_fd);
    p->status_fd = -1;
    p->pid = 0;
    p->init = 0;
}

ty_err sandbox_recover(sandbox *sb, const char *job_id, int *found)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s-a", job_id);
    *found = 0;
    for (int i = 0; i < 3; i++)
        if (sb->cg_base[i])
            *found += cg_sweep(sb->cg_base[i], prefix);
    return TY_OK;
}

/* ---- life ----------------------------------------------------------------- */

ty_err sandbox_own(const sandbox *sb, const char *dir)
{
    if (!sb->drop)
        return TY_OK;
    /* A job may have put a symlink where its output/ was, pointing at /etc/shadow, say:
     * never follow one (ELOOP), and change only a directory. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return TY_EIO;
    int rc = fchown(fd, sb->uid, sb->gid);
    int e = errno;
    close(fd);
    errno = e;
    return rc == 0 ? TY_OK : TY_EIO;
}

const char *sandbox_user(const sandbox *sb)
{
    return sb->user;
}

const char *sandbox_summary(const sandbox *sb)
{
    return sb->summary;
}

void sandbox_free(sandbox *sb)
{
    if (!sb)
        return;
    free(sb->bwrap);
    free(sb->data_dir);
    free(sb->user);
    free(sb->setpriv);
    for (int i = 0; i < sb->nro; i++)
        free(sb->ro[i]);
    for (int i = 0; i < 3; i++) {
        if (sb->cg_base[i])
            rmdir(sb->cg_base[i]); /* only when no rank cgroup is left */
        free(sb->cg_base[i]);
    }
    free(sb);
}

/* Builds and runs one sandbox (`true`); TY_OK when it exits 0, else err says why,
 * with what bwrap printed. */
static ty_err check(sandbox *sb, char *err, size_t errlen)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        local_why(err, errlen, "local sandbox: pipe: %s", strerror(errno));
        return TY_EIO;
    }
    char arg0[] = "true", path[] = "PATH=/usr/bin:/bin";
    char *const argv[] = {arg0, NULL};
    char *const envp[] = {path, NULL};
    sandbox_proc p;
    char why[256] = "";
    ty_err rc = sandbox_spawn(sb, NULL, "/usr/bin/true", argv, envp, out[1], &p, why, sizeof why);
    close(out[1]);
    if (rc != TY_OK) {
        close(out[0]);
        local_why(err, errlen, "local sandbox: %s", why);
        return rc;
    }
    char msg[512];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof msg - 1 && (n = read(out[0], msg + len, sizeof msg - 1 - len)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        len += (size_t)n;
    }
    msg[len] = '\0';
    msg[strcspn(msg, "\n")] = '\0';
    close(out[0]);
    int status = 0;
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR)
        ;
    sandbox_finish(sb, &p, NULL, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return TY_OK;
    local_why(err, errlen, "local sandbox: bubblewrap cannot build a sandbox here (%s)",
              msg[0] ? msg : "no message");
    return TY_EIO;
}

ty_err sandbox_new(const sandbox_options *opt, sandbox **out, char *err, size_t errlen)
{
    ty_err rc = TY_ENOMEM;
    char note[256] = "";
    sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        goto fail;
    if (!(sb->data_dir = strdup(opt->data_dir)))
        goto fail;

    rc = TY_EINVAL;
    sb->bwrap = find_exe("bwrap");
    if (!sb->bwrap) {
        local_why(err, errlen,
                  "local sandbox: bwrap not found (Debian: apt-get install "
                  "bubblewrap); --local-sandbox=off runs jobs unsandboxed");
        goto fail;
    }
    char datasets[PATH_MAX];
    snprintf(datasets, sizeof datasets, "%s/datasets", opt->data_dir);
    const char *ro[MAX_RO + 1];
    int nro = 0;
    for (size_t i = 0; opt->ro_dirs && opt->ro_dirs[i] && nro < MAX_RO - 2; i++)
        ro[nro++] = opt->ro_dirs[i];
    ro[nro++] = datasets;
    for (int i = 0; i < nro; i++) {
        if (access(ro[i], F_OK) != 0)
            continue; /* what does not exist is not bound */
        if (!(sb->ro[sb->nro++] = strdup(ro[i]))) {
            rc = TY_ENOMEM;
            goto fail;
        }
    }

    if (geteuid() == 0) {
        const char *name = opt->user && *opt->user ? opt->user : SANDBOX_DEFAULT_USER;
        struct passwd pw, *res = NULL;
        char buf[4096];
        if (getpwnam_r(name, &pw, buf, sizeof buf, &res) != 0 || !res) {
            local_why(err, errlen,
                      "local sandbox: the server runs as root and the user \"%s\" "
                      "that jobs run as does not exist (scripts/install-deps creates it; "
                      "--local-user names another)",
                      name);
            goto fail;
        }
        if (pw.pw_uid == 0 || pw.pw_gid == 0) {
            local_why(err, errlen, "local sandbox: jobs cannot run as \"%s\": it is root", name);
            goto fail;
        }
        if (!(sb->setpriv = find_exe("setpriv"))) {
            local_why(err, errlen,
                      "local sandbox: setpriv not found (Debian: apt-get install "
                      "util-linux); --local-sandbox=off runs jobs unsandboxed");
            goto fail;
        }
        sb->drop = 1;
        sb->uid = pw.pw_uid;
        sb->gid = pw.pw_gid;
        sb->user = strdup(name);
    } else {
        struct passwd pw, *res = NULL;
        char buf[4096];
        if (opt->user && *opt->user)
            TY_LOG(TY_LOG_WARN, "local sandbox: --local-user applies only to a server that runs "
                   "as root; ranks run as the server's user", "{s:s}", "local_user", opt->user);
        sb->uid = geteuid();
        sb->gid = getegid();
        if (getpwuid_r(sb->uid, &pw, buf, sizeof buf, &res) == 0 && res)
            sb->user = strdup(pw.pw_name);
        else if (asprintf(&sb->user, "%u", (unsigned)sb->uid) < 0)
            sb->user = NULL;
    }
    if (!sb->user) {
        rc = TY_ENOMEM;
        goto fail;
    }

    cg_init(sb, note, sizeof note);
    int leftover = 0;
    for (int i = 0; i < 3; i++)
        if (sb->cg_base[i])
            leftover += cg_sweep(sb->cg_base[i], "");
    if (leftover > 0)
        TY_LOG(TY_LOG_INFO, "sandbox: ended processes a previous server left", "{s:i}", "found",
               leftover);

    if ((rc = check(sb, err, errlen)) != TY_OK)
        goto fail;

    int mem = sb->v2 || sb->cg_base[0], cpu = sb->v2 || sb->cg_base[1];
    int pids = sb->v2 || sb->cg_base[2];
    snprintf(sb->summary, sizeof sb->summary,
             "ranks run as %s (uid %u) in their own user, PID and mount namespaces; "
             "cgroup %s: resources.memory %s, resources.cpu %s, process cap %s%s%s",
             sb->user, (unsigned)sb->uid, sb->v2 ? "v2" : "v1", mem ? "enforced" : "NOT enforced",
             cpu ? "enforced" : "NOT enforced", pids ? "enforced" : "NOT enforced",
             note[0] ? " - " : "", note);
    *out = sb;
    return TY_OK;

fail:
    if (rc == TY_ENOMEM)
        local_why(err, errlen, "local sandbox: out of memory");
    sandbox_free(sb);
    return rc;
}
