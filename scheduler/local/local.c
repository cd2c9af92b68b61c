/*
 * local.c - the local backend (local.h): every rank is a child process of the server.
 *
 * Capacity: a reservation (backend_attempt) holds world_size slots and particular GPU
 * indices from reserve() until release(); each launch() runs one attempt on it. The
 * machine's GPUs are its "nodes" for the node ledger: a rank on one GPU runs on "gpuN", and
 * a quarantined GPU (exclude_nodes()) is neither reserved nor counted free.
 *
 * Process groups: rank 0 of an attempt starts a new process group, the other ranks join
 * it, so one killpg() reaches every rank and whatever the ranks started (unless it left
 * the group on purpose). The group id is rank 0's pid; it stays valid as long as one
 * member exists, zombies included. That is why the last rank of an attempt is reaped
 * only after its status was read with WNOWAIT and the group got a SIGKILL: until then
 * the zombie pins the pgid, so the SIGKILL cannot reach an unrelated group that reused
 * the number.
 *
 * Events: launch() and stop() act at once (posix_spawn and kill are quick) but report
 * like a remote backend would: what they have to say (a rank runs, the launch failed, a
 * stop could not be delivered) waits in a queue that observe() drains first. Exits: each
 * rank has a pidfd in one epoll set, the descriptor of event_fd(), beside an eventfd that
 * is readable while the queue holds events; an exited rank keeps its pidfd readable until
 * observe() reaps it and closes the pidfd, so the epoll set polls readable exactly while
 * events are pending. Kernels without pidfd_open (before 5.3) get a timerfd instead that
 * ticks every LOCAL_TICK_MS while a rank runs or the queue holds events, and observe()
 * polls every rank with waitid(WNOHANG).
 *
 * Classification: a rank that ends after stop() was asked for its attempt is DISRUPTED
 * (stop requested), whatever its status; any other end is EXITED. Nothing here is ever
 * evicted or preempted, and recover() never adopts (see local.h).
 *
 * Environment: the allowlisted variables of the server are copied once, when the
 * backend is made (getenv() is not safe against a concurrent setenv() later on); every
 * other variable of the server, its secrets first, stays out of the ranks.
 *
 * Disk: the disk monitor (local_disk.c) walks the directories of the attempts it is told
 * to watch on its own thread, never the scheduler's; what it finds reaches observe()
 * through its eventfd, in the epoll set beside the pidfds, as one OVER_LIMIT event per
 * attempt. The loop decides what that costs. Logs of previous attempts are pruned to
 * job_log_limit when an attempt is launched (ranklog.h).
 *
 * Threads: everything but log_* runs on the scheduler's thread. log_* only read
 * data_dir, which never changes after local_backend_new(), so they need no lock.
 */
#define _GNU_SOURCE /* posix_spawn_file_actions_addchdir_np, addclosefrom_np */
#include "scheduler/local/local.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_log.h"
#include "common/ty_net.h"
#include "common/ty_time.h"
#include "scheduler/ranklog.h"
#include "scheduler/local/local_int.h"
#include "scheduler/local/sandbox.h"

#define LOCAL_ID_LEN 26
#define LOCAL_TICK_MS 20              /* waitid() polling period without pidfds */
#define LOCAL_RECOVER_POLL_MS 10      /* recover(): how often to look whether all are gone */
#define LOCAL_KILL_WAIT_MS 5000       /* recover(): bound on the wait after SIGKILL */
#define LOCAL_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
#define LOCAL_EPOLL_BATCH 32

/* The server's variables a rank inherits (local.h); PATH is handled apart. */
static const char *const inherited_env[] = {"HOME", "USER", "LOGNAME", "LANG",
                                            "LC_ALL", "TZ", "TMPDIR", NULL};

typedef struct local_rank {
    backend_attempt *a;           /* owner; epoll's data.ptr points at the rank */
    int rank;
    pid_t pid;                    /* > 0 from spawn until reaped */
    int pidfd;                    /* -1 when none (fallback mode, or not running) */
    sandbox_proc sp;              /* the rank's sandbox, when the backend has one */
} local_rank;

struct backend_attempt {
    backend_attempt *next;        /* local_backend.attempts */
    char id[LOCAL_ID_LEN + 1];
    int world_size;
    int gpus_per_rank;
    int *gpus;                    /* world_size * gpus_per_rank indices, rank-major */
    int attempt;                  /* the attempt launched last, 0 before the first */
    int stop_asked;               /* stop() was called since that launch */
    pid_t pgid;                   /* unsandboxed: rank 0's pid while a rank is unreaped */
    int running;                  /* ranks spawned and not reaped yet */
    local_rank *ranks;            /* world_size, allocated with the reservation */
};

typedef struct local_backend {
    backend base;
    char *data_dir;               /* absolute: ranks run elsewhere and get paths under it */
    char *server_url;             /* or NULL */
    char *bin_path;               /* bin_dirs joined with ':' (absolute), "" when none */
    char *server_path;            /* the server's PATH, or LOCAL_DEFAULT_PATH */
    char **server_env;            /* inherited_env entries that are set, NULL-terminated */
    int slots;
    int gpus;
    atomic_int slots_used;        /* read by metrics from other threads */
    unsigned char *gpu_busy;      /* gpus entries (at least one allocated) */
    unsigned char *gpu_excluded;  /* gpus entries: quarantined (exclude_nodes(), "gpuN") */
    atomic_int gpus_used;         /* GPUs reserved now (cluster() reads it from any thread) */
    atomic_int gpus_excluded;
    int use_pidfd;                /* 1: evfd is an epoll set of pidfds and qfd; 0: a timerfd */
    int evfd;
    int qfd;                      /* with pidfds: an eventfd, readable while q holds events */
    backend_event *q;             /* events of launch() and stop() not yet observed */
    size_t qhead, qn, qcap;       /* q[qhead..qhead+qn) */
    int timer_armed;
    int running;                  /* unreaped ranks of every attempt */
    backend_attempt *attempts;    /* every reservation not released */
    sandbox *sb;                  /* NULL only with sandbox off (local_options) */
    ranklog_pump *pump;           /* writes every rank's log from its pipe */
    uint64_t log_limit;           /* bytes of each rank's log */
    uint64_t job_log_limit;       /* bytes of a job's previous attempts' logs */
    uint64_t disk_limit;          /* bytes of a job's directory; 0: none */
    local_disk *disk;             /* measures the running jobs' directories */
} local_backend;

/* A rank's log, or (r NULL) the notice that stands for the log of a pruned attempt. */
struct backend_log {
    ranklog_reader *r;
    char note[320];
    size_t note_len, note_off;
};

static const backend_ops local_ops;

/* ---- small helpers -------------------------------------------------------- */

/* Formats a path; -1 when it does not fit. */
static int path_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int path_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The log of rank `rank` of attempt `attempt`: the server's, out of the job's sight;
 * -1 when the path does not fit. */
static int rank_log_path(const local_backend *lb, const char *id, int attempt, int rank,
                         char *buf, size_t len)
{
    return path_fmt(buf, len, "%s/logs/%s/a%d/rank-%d.log", lb->data_dir, id, attempt, rank);
}

/* Job ids go into paths: only ids of the store's shape ([0-9a-z]{26}) are accepted. */
static int is_job_id(const char *s)
{
    if (!s)
        return 0;
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= LOCAL_ID_LEN || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z')))
            return 0;
    return i == LOCAL_ID_LEN;
}

/*
 * mkdir -p with mode 0755; 0 when path is a directory afterwards, else -1 and
 * errno. The directory itself is tried first and parents only when it says
 * ENOENT: most launches create one or two new levels under existing ones.
 */
static int mkdir_p(const char *path)
{
    size_t n = strlen(path);
    if (n == 0 || n >= PATH_MAX) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno == ENOENT) {
        char parent[PATH_MAX];
        memcpy(parent, path, n + 1);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        if (!slash || slash == parent)
            return -1;
        *slash = '\0';
        if (mkdir_p(parent) != 0)
            return -1;
        if (mkdir(path, 0755) == 0)
            return 0;
    }
    if (errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ---- the environment of a rank -------------------------------------------- */

/* A growing NULL-terminated vector of owned "NAME=value" strings, one per name. */
typedef struct env_vec {
    char **v;
    size_t n, cap;
} env_vec;

static void env_free(env_vec *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
    memset(e, 0, sizeof *e);
}

/* Takes entry (owned); an entry of the same name is replaced in place, so a later
 * source overrides an earlier one and each name appears once. */
static ty_err env_take(env_vec *e, char *entry)
{
    size_t nlen = strcspn(entry, "=");
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], entry, nlen) == 0 && e->v[i][nlen] == '=') {
            free(e->v[i]);
            e->v[i] = entry;
            return TY_OK;
        }
    }
    if (e->n + 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 32;
        char **v = realloc(e->v, cap * sizeof *v);
        if (!v) {
            free(entry);
            return TY_ENOMEM;
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = entry;
    e->v[e->n] = NULL;
    return TY_OK;
}

static ty_err env_put(env_vec *e, const char *entry)
{
    char *copy = strdup(entry);
    return copy ? env_take(e, copy) : TY_ENOMEM;
}

static ty_err env_setf(env_vec *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static ty_err env_setf(env_vec *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TY_ENOMEM;
    return env_take(e, s);
}

/*
 * The part of the environment all ranks of an attempt share (local.h): the server's
 * allowlisted variables, then the job's env (which may override them), then PATH, then
 * Trainyard's variables, which nothing overrides. A job's PATH replaces the server's,
 * but bin_dirs stay in front so that trainyard-worker is still found. *path points into
 * e (the PATH value) for resolving the command.
 */
static ty_err env_common(local_backend *lb, backend_attempt *a, const backend_job *job,
                         int port, const char *jobdir, env_vec *e, const char **path,
                         char *why, size_t whylen)
{
    ty_err rc = TY_OK;
    const char *base = lb->server_path;
    for (size_t i = 0; lb->server_env[i] && rc == TY_OK; i++)
        rc = env_put(e, lb->server_env[i]);
    /* In a sandbox the server's home does not exist, and the user is another. */
    if (lb->sb && rc == TY_OK)
        rc = env_setf(e, "HOME=%s", jobdir);
    if (lb->sb && rc == TY_OK)
        rc = env_setf(e, "USER=%s", sandbox_user(lb->sb));
    if (lb->sb && rc == TY_OK)
        rc = env_setf(e, "LOGNAME=%s", sandbox_user(lb->sb));
    /* The sandbox's /tmp is its own tmpfs; the server's TMPDIR is not in there. */
    if (lb->sb && rc == TY_OK)
        rc = env_put(e, "TMPDIR=/tmp");
    for (size_t i = 0; job->env && job->env[i] && rc == TY_OK; i++) {
        const char *s = job->env[i];
        if (!strchr(s, '=') || s[0] == '=') {
            local_why(why, whylen, "invalid env entry (expected NAME=value)");
            return TY_EINVAL;
        }
        if (strncmp(s, "PATH=", 5) == 0)
            base = s + 5;
        else
            rc = env_put(e, s);
    }
    if (rc == TY_OK)
        rc = env_setf(e, "PATH=%s%s%s", lb->bin_path, *lb->bin_path && *base ? ":" : "", base);
    if (rc == TY_OK)
        rc = env_setf(e, "WORLD_SIZE=%d", a->world_size);
    if (rc == TY_OK)
        rc = env_setf(e, "LOCAL_WORLD_SIZE=%d", a->world_size);
    if (rc == TY_OK)
        rc = env_put(e, "MASTER_ADDR=127.0.0.1");
    if (rc == TY_OK)
        rc = env_setf(e, "MASTER_PORT=%d", port);
    if (rc == TY_OK)
        rc = env_setf(e, "TRAINYARD_JOB_ID=%s", a->id);
    if (rc == TY_OK)
        rc = env_setf(e, "TRAINYARD_ATTEMPT=%d", job->attempt);
    if (rc == TY_OK && lb->server_url)
        rc = env_setf(e, "TRAINYARD_SERVER=%s", lb->server_url);
    if (rc == TY_OK)
        rc = env_setf(e, "TRAINYARD_DATA_DIR=%s/datasets", lb->data_dir);
    if (rc == TY_OK)
        rc = env_setf(e, "TRAINYARD_OUTPUT_DIR=%s/output", jobdir);
    if (rc == TY_OK)
        rc = env_setf(e, "TRAINYARD_CHECKPOINT_DIR=%s/checkpoints", jobdir);
    if (rc != TY_OK) {
        local_why(why, whylen, "out of memory building the environment");
        return rc;
    }
    for (size_t i = 0; i < e->n; i++)
        if (strncmp(e->v[i], "PATH=", 5) == 0)
            *path = e->v[i] + 5;
    return TY_OK;
}

/* The variables that differ per rank; set in place for each rank in turn. */
static ty_err env_rank(backend_attempt *a, int r, env_vec *e)
{
    char cuda[256] = "";
    size_t off = 0;
    for (int g = 0; g < a->gpus_per_rank; g++) {
        int n = snprintf(cuda + off, sizeof cuda - off, "%s%d", g ? "," : "",
                         a->gpus[r * a->gpus_per_rank + g]);
        if (n < 0 || (size_t)n >= sizeof cuda - off)
            return TY_EINVAL;
        off += (size_t)n;
    }
    ty_err rc = env_setf(e, "RANK=%d", r);
    if (rc == TY_OK)
        rc = env_setf(e, "LOCAL_RANK=%d", r);
    if (rc == TY_OK)
        rc = env_setf(e, "CUDA_VISIBLE_DEVICES=%s", cuda);
    return rc;
}

/*
 * Finds name along path the way execvp() would. glibc's posix_spawnp() searches the
 * server's PATH, not the rank's, hence this. Empty components (the current directory)
 * are skipped: the rank's directory is not where the server looks. A relative
 * directory is made absolute, as the rank starts elsewhere. *out is new.
 */
static ty_err resolve_command(const char *name, const char *path, char **out)
{
    if (strchr(name, '/')) {
        *out = strdup(name);
        return *out ? TY_OK : TY_ENOMEM;
    }
    const char *p = path;
    while (*p) {
        size_t len = strcspn(p, ":");
        if (len > 0) {
            char cand[PATH_MAX];
            struct stat st;
            if (path_fmt(cand, sizeof cand, "%.*s/%s", (int)len, p, name) == 0 &&
                stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
                char cwd[PATH_MAX];
                if (cand[0] == '/') {
                    *out = strdup(cand);
                } else if (getcwd(cwd, sizeof cwd)) {
                    if (asprintf(out, "%s/%s", cwd, cand) < 0)
                        *out = NULL;
                } else {
                    return TY_EIO;
                }
                return *out ? TY_OK : TY_ENOMEM;
            }
        }
        p += len;
        if (*p == ':')
            p++;
    }
    return TY_ENOTFOUND;
}

/* ---- ranks ---------------------------------------------------------------- */

/* Without pidfds a timer makes event_fd() readable every tick while a rank runs. */
static void timer_update(local_backend *lb)
{
    int want = lb->running > 0 || lb->qn > 0;
    if (lb->use_pidfd || lb->timer_armed == want)
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (want) {
        its.it_value.tv_nsec = LOCAL_TICK_MS * 1000000L;
        its.it_interval = its.it_value;
    }
    if (timerfd_settime(lb->evfd, 0, &its, NULL) == 0)
        lb->timer_armed = want;
}

/* Queues an event for observe(); one that cannot be queued (out of memory) is logged. */
static backend_event *queue_event(local_backend *lb, backend_event_kind kind,
                                  backend_attempt *a, int rank)
{
    if (lb->qhead + lb->qn == lb->qcap) {
        if (lb->qhead > 0) {
            memmove(lb->q, lb->q + lb->qhead, lb->qn * sizeof *lb->q);
            lb->qhead = 0;
        } else {
            size_t cap = lb->qcap ? lb->qcap * 2 : 16;
            backend_event *q = realloc(lb->q, cap * sizeof *q);
            if (!q) {
                TY_LOG(TY_LOG_ERROR, "local: out of memory, an event is lost", "{s:i}",
                       "kind", (int)kind);
                return NULL;
            }
            lb->q = q;
            lb->qcap = cap;
        }
    }
    backend_event *ev = &lb->q[lb->qhead + lb->qn++];
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->attempt = a;
    ev->rank = rank;
    ev->exit_code = -1;
    ev->time_ms = ty_time_now_ms();
    if (lb->use_pidfd) {
        uint64_t one = 1;
        ssize_t n = write(lb->qfd, &one, sizeof one);
        (void)n; /* a full counter is readable all the same */
    } else {
        timer_update(lb);
    }
    return ev;
}

/* Copies up to max queued events into ev; the eventfd is reset once the queue is empty. */
static size_t queue_drain(local_backend *lb, backend_event *ev, size_t max)
{
    size_t n = lb->qn < max ? lb->qn : max;
    if (n > 0)
        memcpy(ev, lb->q + lb->qhead, n * sizeof *ev);
    lb->qhead += n;
    lb->qn -= n;
    if (lb->qn == 0) {
        lb->qhead = 0;
        uint64_t v;
        if (lb->use_pidfd && read(lb->qfd, &v, sizeof v) < 0) {
            /* EAGAIN: it was not set */
        }
    }
    return n;
}

/* Drops the queued events of a (released): they must not name freed memory. */
static void queue_forget(local_backend *lb, const backend_attempt *a)
{
    size_t k = 0;
    for (size_t i = 0; i < lb->qn; i++)
        if (lb->q[lb->qhead + i].attempt != a)
            lb->q[lb->qhead + k++] = lb->q[lb->qhead + i];
    lb->qn = k;
}

/* Bookkeeping once a rank was reaped; detail (may be NULL) gets what its sandbox
 * knows of its end. */
static void rank_forget(local_backend *lb, local_rank *lr, char *detail, size_t len)
{
    if (lb->sb)
        sandbox_finish(lb->sb, &lr->sp, detail, len);
    if (lr->pidfd >= 0) {
        epoll_ctl(lb->evfd, EPOLL_CTL_DEL, lr->pidfd, NULL);
        close(lr->pidfd);
        lr->pidfd = -1;
    }
    lr->pid = 0;
    lr->a->running--;
    lb->running--;
    if (lr->a->running == 0) {
        lr->a->pgid = 0;
        local_disk_unwatch(lb->disk, lr->a); /* nothing of it writes any more */
    }
}

/*
 * Kills every unreaped rank of a and whatever is in its group, and reaps the ranks
 * (blocking, but SIGKILL makes that quick). The group is killed before any rank is
 * reaped, while the ranks still pin its id. No events follow for these ranks.
 */
static void attempt_kill_reap(local_backend *lb, backend_attempt *a)
{
    if (a->running == 0)
        return;
    if (a->pgid > 0)
        killpg(a->pgid, SIGKILL);
    for (int r = 0; r < a->world_size; r++) {
        local_rank *lr = &a->ranks[r];
        if (lr->pid <= 0)
            continue;
        if (lb->sb)
            sandbox_signal(&lr->sp, SIGKILL); /* ends its PID namespace */
        kill(lr->pid, SIGKILL);
        while (waitpid(lr->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        rank_forget(lb, lr, NULL, 0);
    }
    timer_update(lb);
}

/* Records rank r of a as started with pid and watches it. On failure the rank is in a
 * all the same, for the caller to kill and reap with the others. */
static ty_err rank_started(local_backend *lb, backend_attempt *a, int r, pid_t pid, char *why,
                           size_t whylen)
{
    local_rank *lr = &a->ranks[r];
    lr->pid = pid;
    lr->pidfd = -1;
    a->running++;
    lb->running++;
    if (r == 0 && !lb->sb)
        a->pgid = pid;
    if (lb->use_pidfd) {
        lr->pidfd = local_pidfd_open(pid);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = lr};
        if (lr->pidfd < 0 || epoll_ctl(lb->evfd, EPOLL_CTL_ADD, lr->pidfd, &ev) != 0) {
            local_why(why, whylen, "cannot watch rank %d: %s", r, strerror(errno));
            return TY_EIO;
        }
    }
    return TY_OK;
}

/* Starts rank r of a in its sandbox, output to logfd. */
static ty_err spawn_sandboxed(local_backend *lb, backend_attempt *a, int r, const char *exe,
                              const backend_job *job, char *const envp[], const char *jobdir,
                              int logfd, char *why, size_t whylen)
{
    local_rank *lr = &a->ranks[r];
    sandbox_rank sr = {.job_id = a->id,
                       .attempt = job->attempt,
                       .rank = r,
                       .job_dir = jobdir,
                       .gpus = a->gpus + r * a->gpus_per_rank,
                       .ngpus = a->gpus_per_rank};
    sr.cpu = job->cpu_cores;
    sr.memory = job->memory_bytes;
    ty_err rc = sandbox_spawn(lb->sb, &sr, exe, (char *const *)job->argv, envp, logfd, &lr->sp,
                              why, whylen);
    if (rc != TY_OK)
        return rc;
    return rank_started(lb, a, r, lr->sp.pid, why, whylen);
}

/* Starts rank r of a. On failure why says what failed; a rank that did start is in a,
 * for the caller to kill and reap with the others. */
static ty_err spawn_rank(local_backend *lb, backend_attempt *a, int r, const char *exe,
                         const backend_job *job, char *const envp[], const char *jobdir,
                         char *why, size_t whylen)
{
    char logpath[PATH_MAX];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int fa_ok = 0, attr_ok = 0, logfd = -1, err = 0;
    ty_err rc = TY_EIO;
    pid_t pid = 0;

    if (rank_log_path(lb, a->id, job->attempt, r, logpath, sizeof logpath) != 0) {
        local_why(why, whylen, "log path too long");
        return TY_EINVAL;
    }
    /* The rank writes into a pipe; the pump writes the log, within its limit. */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        local_why(why, whylen, "cannot make the log pipe of rank %d: %s", r, strerror(errno));
        return TY_EIO;
    }
    if ((rc = ranklog_pump_add(lb->pump, pfd[0], logpath)) != TY_OK) {
        close(pfd[1]);
        local_why(why, whylen, "cannot write the log %s: %s", logpath, ty_strerror(rc));
        return rc;
    }
    logfd = pfd[1];
    rc = TY_EIO;
    if (lb->sb) {
        rc = spawn_sandboxed(lb, a, r, exe, job, envp, jobdir, logfd, why, whylen);
        close(logfd);
        return rc;
    }

    /* Signals: the server blocks SIGTERM/SIGINT in every thread and ignores SIGPIPE;
     * a rank must start with an empty mask and every signal at its default. */
    sigset_t mask, dfl;
    sigemptyset(&mask);
    sigfillset(&dfl);
    sigdelset(&dfl, SIGKILL);
    sigdelset(&dfl, SIGSTOP);

    if ((err = posix_spawn_file_actions_init(&fa)) != 0)
        goto out;
    fa_ok = 1;
    if ((err = posix_spawn_file_actions_adddup2(&fa, logfd, STDOUT_FILENO)) != 0 ||
        (err = posix_spawn_file_actions_adddup2(&fa, logfd, STDERR_FILENO)) != 0 ||
        (err = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY,
                                                0)) != 0 ||
        (err = posix_spawn_file_actions_addchdir_np(&fa, jobdir)) != 0)
        goto out;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* Descriptors of the server opened without O_CLOEXEC (by a library, say) must not
     * reach the ranks either. */
    if ((err = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1)) != 0)
        goto out;
#endif
    if ((err = posix_spawnattr_init(&attr)) != 0)
        goto out;
    attr_ok = 1;
    /* Rank 0 founds the attempt's group (pgid 0 = its own pid); the others join it. */
    if ((err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                   POSIX_SPAWN_SETSIGDEF)) != 0 ||
        (err = posix_spawnattr_setpgroup(&attr, r == 0 ? 0 : a->pgid)) != 0 ||
        (err = posix_spawnattr_setsigmask(&attr, &mask)) != 0 ||
        (err = posix_spawnattr_setsigdefault(&attr, &dfl)) != 0)
        goto out;

    err = posix_spawn(&pid, exe, &fa, &attr, (char *const *)job->argv, envp);
    if (err != 0) {
        if (err == ENOENT)
            local_why(why, whylen, "command not found: %s", job->argv[0]);
        else
            local_why(why, whylen, "cannot start rank %d (%s): %s", r, job->argv[0], strerror(err));
        err = 0;
        goto out;
    }

    rc = rank_started(lb, a, r, pid, why, whylen);
out:
    if (err != 0)
        local_why(why, whylen, "cannot set up rank %d: %s", r, strerror(err));
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    close(logfd);
    return rc;
}

/*
 * Turns a rank that ended into *ev and reaps it; 0 (and nothing done) while it runs.
 * The status is read with WNOWAIT first: the last rank of an attempt must stay a
 * zombie, pinning the group id, until the group has been sent its SIGKILL.
 */
static int rank_collect(local_backend *lb, local_rank *lr, backend_event *ev)
{
    backend_attempt *a = lr->a;
    siginfo_t si;
    int lost = 0;

    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)lr->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno == EINTR)
            continue;
        /* ECHILD: someone else reaped it (SIGCHLD set to SIG_IGN, say); its status is
         * lost and its group id is no longer pinned, so no killpg. */
        lost = 1;
        break;
    }
    if (!lost && si.si_pid == 0)
        return 0;

    if (!lost && a->running == 1 && a->pgid > 0 && killpg(a->pgid, SIGKILL) != 0 &&
        errno != ESRCH)
        TY_LOG(TY_LOG_WARN, "local: killpg failed", "{s:s,s:i,s:s}", "job_id", a->id, "pgid",
               (int)a->pgid, "error", strerror(errno));
    if (!lost) {
        siginfo_t reaped;
        while (waitid(P_PID, (id_t)lr->pid, &reaped, WEXITED) != 0 && errno == EINTR)
            ;
    }
    /* Everything the rank wrote is in its log before its end is told: a reader
     * after the exit sees the whole log. */
    char logpath[PATH_MAX];
    int still_open = 0;
    if (rank_log_path(lb, a->id, a->attempt, lr->rank, logpath, sizeof logpath) == 0)
        ranklog_pump_flush(lb->pump, logpath, &still_open);

    memset(ev, 0, sizeof *ev);
    ev->kind = BACKEND_EV_EXITED;
    ev->attempt = a;
    ev->rank = lr->rank;
    ev->time_ms = ty_time_now_ms();
    if (a->stop_asked) {
        /* Ended after it was asked to: whatever its status, not the application's doing. */
        ev->kind = BACKEND_EV_DISRUPTED;
        ev->disruption = BACKEND_DISRUPT_STOP_REQUESTED;
        ev->ended = 1;
    }
    if (lost) {
        TY_LOG(TY_LOG_WARN, "local: exit status of a rank lost", "{s:s,s:i}", "job_id", a->id,
               "rank", lr->rank);
        ev->exit_code = 255;
    } else if (lb->sb) {
        sandbox_status(si.si_code == CLD_EXITED ? si.si_status : -1,
                       si.si_code == CLD_EXITED ? 0 : si.si_status, &ev->exit_code, &ev->signal);
    } else if (si.si_code == CLD_EXITED) {
        ev->exit_code = si.si_status;
    } else {
        ev->exit_code = -1;
        ev->signal = si.si_status;
    }
    rank_forget(lb, lr, ev->detail, sizeof ev->detail);
    return 1;
}

/* ---- backend_ops ---------------------------------------------------------- */

static ty_err local_reserve(backend *b, const backend_job *job, backend_attempt **out, char *why,
                            size_t whylen)
{
    local_backend *lb = (local_backend *)b;
    if (!job || !is_job_id(job->id)) {
        local_why(why, whylen, "invalid job id");
        return TY_EINVAL;
    }
    if (job->world_size < 1 || job->gpus_per_rank < 0) {
        local_why(why, whylen, "needs at least one rank and a GPU count >= 0");
        return TY_EINVAL;
    }
    /* GPUs are counted, not typed (no driver query here): gpu_type is not checked. */
    int ws = job->world_size, gpr = job->gpus_per_rank;
    long long need_gpus = (long long)ws * gpr;
    if (ws > lb->slots) {
        local_why(why, whylen, "needs %d slots (one per rank), this machine has %d (--local-slots)",
                  ws, lb->slots);
        return TY_EINVAL;
    }
    if (need_gpus > lb->gpus) {
        local_why(why, whylen,
                  "needs %lld GPU%s (%d per rank x %d rank%s), this machine has %d "
                  "(--local-gpus)",
                  need_gpus, need_gpus == 1 ? "" : "s", gpr, ws, ws == 1 ? "" : "s", lb->gpus);
        return TY_EINVAL;
    }
    int used = atomic_load(&lb->slots_used);
    if (used + ws > lb->slots) {
        local_why(why, whylen, "needs %d slots, %d of %d free", ws, lb->slots - used, lb->slots);
        return TY_EAGAIN;
    }
    int free_gpus = 0;
    for (int g = 0; g < lb->gpus; g++)
        free_gpus += !lb->gpu_busy[g] && !lb->gpu_excluded[g];
    if (free_gpus < need_gpus) {
        local_why(why, whylen, "needs %lld GPUs, %d of %d free", need_gpus, free_gpus, lb->gpus);
        return TY_EAGAIN;
    }

    backend_attempt *a = calloc(1, sizeof *a);
    if (!a)
        return TY_ENOMEM;
    a->ranks = calloc((size_t)ws, sizeof *a->ranks);
    a->gpus = calloc(need_gpus ? (size_t)need_gpus : 1, sizeof *a->gpus);
    if (!a->ranks || !a->gpus) {
        free(a->ranks);
        free(a->gpus);
        free(a);
        return TY_ENOMEM;
    }
    memcpy(a->id, job->id, LOCAL_ID_LEN + 1);
    a->world_size = ws;
    a->gpus_per_rank = gpr;
    for (int r = 0; r < ws; r++) {
        a->ranks[r].a = a;
        a->ranks[r].rank = r;
        a->ranks[r].pidfd = -1;
    }
    /* The lowest free indices, rank after rank. */
    for (int g = 0, k = 0; k < need_gpus; g++) {
        if (!lb->gpu_busy[g] && !lb->gpu_excluded[g]) {
            lb->gpu_busy[g] = 1;
            a->gpus[k++] = g;
        }
    }
    atomic_fetch_add(&lb->gpus_used, (int)need_gpus);
    atomic_fetch_add(&lb->slots_used, ws);
    a->next = lb->attempts;
    lb->attempts = a;
    *out = a;
    return TY_OK;
}

/*
 * Before attempt `attempt` of job id starts: deletes the oldest previous attempts' logs
 * until the rest fit in job_log_limit (ranklog.h). A failure is logged and the attempt
 * starts all the same: its own logs stay capped per rank.
 */
static void prune_logs(local_backend *lb, const char *id, int attempt)
{
    char dir[PATH_MAX];
    ranklog_prune_result res;
    if (attempt < 2 || path_fmt(dir, sizeof dir, "%s/logs/%s", lb->data_dir, id) != 0)
        return;
    ty_err e = ranklog_prune_job(dir, attempt, lb->job_log_limit, &res);
    if (e != TY_OK)
        TY_LOG(TY_LOG_WARN, "local: cannot prune the logs of previous attempts", "{s:s,s:i,s:s}",
               "job_id", id, "attempt", attempt, "error", ty_strerror(e));
    if (res.deleted > 0)
        TY_LOG(TY_LOG_INFO, "local: deleted the logs of the oldest attempts (--local-job-log-limit)",
               "{s:s,s:i,s:i,s:I,s:I,s:I}", "job_id", id, "attempt", attempt, "deleted",
               res.deleted, "freed_bytes", (json_int_t)res.freed, "kept_bytes",
               (json_int_t)res.kept, "limit_bytes", (json_int_t)lb->job_log_limit);
}

/* Starts every rank of job->attempt (see backend.h's launch); on failure nothing of the
 * attempt runs any more and why says what failed. */
static ty_err launch_ranks(local_backend *lb, backend_attempt *a, const backend_job *job,
                           char *why, size_t whylen)
{
    char jobdir[PATH_MAX];
    env_vec env = {0};
    char *exe = NULL;
    const char *path = NULL;
    ty_err rc = TY_EINVAL;

    if (a->running > 0) {
        local_why(why, whylen, "a rank of the previous attempt still runs");
        return TY_EINVAL;
    }
    if (!is_job_id(job->id) || strcmp(job->id, a->id) != 0 || job->world_size != a->world_size ||
        job->gpus_per_rank != a->gpus_per_rank || job->attempt < 1) {
        local_why(why, whylen, "the job does not match its reservation");
        return TY_EINVAL;
    }
    if (!job->argv || !job->argv[0] || !job->argv[0][0]) {
        local_why(why, whylen, "no command");
        return TY_EINVAL;
    }

    /* The job's own directories (checkpoints outlive attempts). The log pump makes the
     * logs' directory; datasets exists since start-up. */
    char dirs[2][PATH_MAX];
    if (path_fmt(jobdir, sizeof jobdir, "%s/jobs/%s", lb->data_dir, a->id) != 0 ||
        path_fmt(dirs[0], sizeof dirs[0], "%s/output", jobdir) != 0 ||
        path_fmt(dirs[1], sizeof dirs[1], "%s/checkpoints", jobdir) != 0) {
        local_why(why, whylen, "data dir path too long");
        return TY_EINVAL;
    }
    for (int i = 0; i < 2; i++) {
        if (mkdir_p(dirs[i]) != 0) {
            local_why(why, whylen, "cannot create %s: %s", dirs[i], strerror(errno));
            return TY_EIO;
        }
    }
    if (lb->sb) {
        const char *own[] = {jobdir, dirs[0], dirs[1]};
        for (int i = 0; i < 3; i++) {
            if (sandbox_own(lb->sb, own[i]) != TY_OK) {
                local_why(why, whylen, "cannot give %s to the job's user: %s", own[i],
                          strerror(errno));
                return TY_EIO;
            }
        }
    }

    prune_logs(lb, a->id, job->attempt);

    int port = ty_net_free_port();
    if (port < 0) {
        local_why(why, whylen, "no free TCP port on 127.0.0.1 for MASTER_PORT");
        return TY_EIO;
    }
    rc = env_common(lb, a, job, port, jobdir, &env, &path, why, whylen);
    if (rc != TY_OK)
        goto out;
    rc = resolve_command(job->argv[0], path, &exe);
    if (rc == TY_ENOTFOUND) {
        local_why(why, whylen, "command not found: %s", job->argv[0]);
        rc = TY_EINVAL;
        goto out;
    }
    if (rc != TY_OK) {
        local_why(why, whylen, "cannot resolve the command %s: %s", job->argv[0], ty_strerror(rc));
        goto out;
    }

    a->attempt = job->attempt;
    a->stop_asked = 0;
    for (int r = 0; r < a->world_size; r++) {
        if (env_rank(a, r, &env) != TY_OK) {
            local_why(why, whylen, "cannot build the environment of rank %d", r);
            rc = TY_ENOMEM;
            break;
        }
        rc = spawn_rank(lb, a, r, exe, job, env.v, jobdir, why, whylen);
        if (rc != TY_OK)
            break;
    }
    /* Its directory is measured while a rank of it runs (rank_forget() stops that). */
    if (rc == TY_OK && (rc = local_disk_watch(lb->disk, a->id, a)) != TY_OK)
        local_why(why, whylen, "cannot watch the job's disk use: %s", ty_strerror(rc));
    /* All or nothing: a gang missing a rank would only hang in its rendezvous. */
    if (rc != TY_OK)
        attempt_kill_reap(lb, a);
    timer_update(lb);
out:
    free(exe);
    env_free(&env);
    return rc;
}

static void local_launch(backend *b, backend_attempt *a, const backend_job *job)
{
    local_backend *lb = (local_backend *)b;
    char why[BACKEND_DETAIL_MAX] = "";
    ty_err rc = launch_ranks(lb, a, job, why, sizeof why);
    if (rc != TY_OK) {
        if (!why[0])
            local_why(why, sizeof why, "%s", ty_strerror(rc));
        backend_event *ev = queue_event(lb, BACKEND_EV_LAUNCH_FAILED, a, -1);
        if (ev)
            snprintf(ev->detail, sizeof ev->detail, "%s", why);
        return;
    }
    /* Spawned is running here: there is nothing to wait for between the two. */
    for (int r = 0; r < a->world_size; r++) {
        backend_event *ev = queue_event(lb, BACKEND_EV_RUNNING, a, r);
        if (ev) {
            ev->where.pid = a->ranks[r].pid;
            ev->where.started_ms = ev->time_ms;
            /* A rank on one GPU: that GPU is where it runs, what a failure is charged to
             * (the node ledger); a rank on several cannot be pinned on one of them. */
            if (a->gpus_per_rank == 1)
                snprintf(ev->where.node, sizeof ev->where.node, "gpu%d", a->gpus[r]);
        }
    }
}

static int local_event_fd(backend *b)
{
    return ((local_backend *)b)->evfd;
}

/* Queues an OVER_LIMIT event for each attempt the disk monitor found over its limit. */
static void disk_findings(local_backend *lb)
{
    local_disk_finding f[8];
    size_t n = local_disk_take(lb->disk, f, sizeof f / sizeof f[0]);
    for (size_t i = 0; i < n; i++) {
        backend_attempt *a = lb->attempts;
        while (a && (const void *)a != f[i].key)
            a = a->next;
        if (!a || a->running == 0)
            continue; /* ended since: nothing to stop */
        TY_LOG(TY_LOG_INFO, "local: a job's directory is over its disk limit", "{s:s,s:i,s:s}",
               "job_id", a->id, "attempt", a->attempt, "detail", f[i].detail);
        backend_event *ev = queue_event(lb, BACKEND_EV_OVER_LIMIT, a, -1);
        if (ev) {
            ev->limit = BACKEND_LIMIT_DISK;
            snprintf(ev->detail, sizeof ev->detail, "%s", f[i].detail);
        }
    }
}

static size_t local_observe(backend *b, backend_event *ev, size_t max)
{
    local_backend *lb = (local_backend *)b;
    disk_findings(lb);
    size_t n = queue_drain(lb, ev, max);

    if (lb->use_pidfd) {
        struct epoll_event evs[LOCAL_EPOLL_BATCH];
        while (n < max) {
            int want = max - n < LOCAL_EPOLL_BATCH ? (int)(max - n) : LOCAL_EPOLL_BATCH;
            int k = epoll_wait(lb->evfd, evs, want, 0);
            if (k <= 0)
                break;
            for (int i = 0; i < k; i++)
                if (evs[i].data.ptr != lb && evs[i].data.ptr != lb->disk) /* the queue's and
                                                the disk monitor's eventfds, read above */
                    n += (size_t)rank_collect(lb, evs[i].data.ptr, &ev[n]);
            if (k < want)
                break;
        }
        return n;
    }

    uint64_t ticks;
    if (read(lb->evfd, &ticks, sizeof ticks) < 0) {
        /* EAGAIN: no tick yet; still worth a look, the caller asked. */
    }
    for (backend_attempt *a = lb->attempts; a && n < max; a = a->next)
        for (int r = 0; r < a->world_size && n < max; r++)
            if (a->ranks[r].pid > 0)
                n += (size_t)rank_collect(lb, &a->ranks[r], &ev[n]);
    timer_update(lb);
    return n;
}

/* Says that a stop of a could not be delivered. */
static void stop_failed(local_backend *lb, backend_attempt *a, const char *what, int err)
{
    TY_LOG(TY_LOG_WARN, "local: cannot stop an attempt", "{s:s,s:s,s:s}", "job_id", a->id,
           "call", what, "error", strerror(err));
    backend_event *ev = queue_event(lb, BACKEND_EV_STOP_FAILED, a, -1);
    if (ev)
        snprintf(ev->detail, sizeof ev->detail, "%s: %s", what, strerror(err));
}

static void local_stop(backend *b, backend_attempt *a, int hard)
{
    local_backend *lb = (local_backend *)b;
    int sig = hard ? SIGKILL : SIGTERM;
    if (a->running == 0)
        return;
    a->stop_asked = 1;
    if (lb->sb) {
        for (int r = 0; r < a->world_size; r++)
            if (a->ranks[r].pid > 0 && sandbox_signal(&a->ranks[r].sp, sig) != 0 &&
                errno != ESRCH) {
                stop_failed(lb, a, "signal to a rank's sandbox", errno);
                return;
            }
        return;
    }
    /* Only while a rank is unreaped: it pins the group id (see the top of the file). */
    if (a->pgid <= 0)
        return;
    if (killpg(a->pgid, sig) != 0 && errno != ESRCH)
        stop_failed(lb, a, "killpg", errno);
}

static void attempt_free(local_backend *lb, backend_attempt *a)
{
    local_disk_unwatch(lb->disk, a);
    for (int i = 0; i < a->world_size * a->gpus_per_rank; i++)
        lb->gpu_busy[a->gpus[i]] = 0;
    atomic_fetch_sub(&lb->gpus_used, a->world_size * a->gpus_per_rank);
    atomic_fetch_sub(&lb->slots_used, a->world_size);
    free(a->gpus);
    free(a->ranks);
    free(a);
}

static void local_release(backend *b, backend_attempt *a)
{
    local_backend *lb = (local_backend *)b;
    if (!a)
        return;
    if (a->running > 0) {
        /* A bug of the caller; still, nothing may outlive its reservation. */
        TY_LOG(TY_LOG_ERROR, "local: release with ranks running; killing them", "{s:s,s:i}",
               "job_id", a->id, "running", a->running);
        attempt_kill_reap(lb, a);
    }
    for (backend_attempt **p = &lb->attempts; *p; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    queue_forget(lb, a);
    attempt_free(lb, a);
}

/* ---- recover -------------------------------------------------------------- */

/*
 * A process of the job found in /proc. These are not our children (their server
 * died), so waitpid() does not work on them. With a pidfd, signals and the "gone"
 * test are tied to the process itself, not to a pid that may be reused.
 */
typedef struct found_proc {
    pid_t pid;
    int pidfd;                    /* -1 without pidfd_open */
} found_proc;

typedef struct found_set {
    found_proc *v;
    size_t n, cap;
} found_set;

/* The state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...); 0 when unreadable. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "pid (comm) S ...": comm may hold spaces and parentheses, so the last ')'. */
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* 1 when /proc/<pid>/environ holds exactly the entry (entries are NUL-separated). */
static int proc_has_entry(pid_t pid, const char *entry)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap + 1);
    int found = 0;
    while (buf) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            buf[len] = '\0';
            for (size_t off = 0; off < len; off += strlen(buf + off) + 1)
                if (strcmp(buf + off, entry) == 0) {
                    found = 1;
                    break;
                }
            break;
        }
        len += (size_t)n;
    }
    free(buf);
    close(fd);
    return found;
}

static int found_alive(const found_proc *f)
{
    if (f->pidfd >= 0) {
        /* A pidfd polls readable once its process exited (zombie or reaped); on an
         * error, assume alive: waiting longer is safer than missing a process. */
        struct pollfd p = {.fd = f->pidfd, .events = POLLIN};
        return poll(&p, 1, 0) <= 0;
    }
    if (kill(f->pid, 0) != 0 && errno == ESRCH)
        return 0;
    char st = proc_state(f->pid);
    return st != 0 && st != 'Z' && st != 'X';
}

/* Signals the process's group (never our own) and the process. The group is looked up
 * while the process is alive, so the id is still its group's. */
static void found_signal(const found_proc *f, int sig)
{
    if (!found_alive(f))
        return;
    pid_t pg = getpgid(f->pid);
    if (pg > 1 && pg != getpgrp())
        killpg(pg, sig);
    if (f->pidfd >= 0)
        local_pidfd_send_signal(f->pidfd, sig);
    else
        kill(f->pid, sig);
}

/* Adds to fs every live process with the entry not already there, signalling each;
 * *found counts them. */
static ty_err scan_job(const char *entry, found_set *fs, int sig, int *found)
{
    DIR *d = opendir("/proc");
    if (!d)
        return TY_EIO;
    pid_t self = getpid();
    struct dirent *de;
    ty_err rc = TY_OK;
    while ((de = readdir(d)) != NULL) {
        char *end;
        errno = 0;
        long v = strtol(de->d_name, &end, 10);
        if (*de->d_name < '0' || *de->d_name > '9' || *end || errno || v <= 0 || v > INT_MAX)
            continue;
        pid_t pid = (pid_t)v;
        if (pid == self)
            continue;
        int known = 0;
        for (size_t i = 0; i < fs->n && !known; i++)
            known = fs->v[i].pid == pid && found_alive(&fs->v[i]);
        if (known)
            continue;
        /* The pidfd first: if the process is still alive after its environ was read,
         * the environ was its own and not that of a process reusing the pid. */
        found_proc f = {pid, local_pidfd_open(pid)};
        if (f.pidfd < 0 && errno == ESRCH)
            continue;
        char st = proc_state(pid);
        if (st == 0 || st == 'Z' || st == 'X' || !proc_has_entry(pid, entry) || !found_alive(&f)) {
            if (f.pidfd >= 0)
                close(f.pidfd);
            continue;
        }
        if (fs->n == fs->cap) {
            size_t cap = fs->cap ? fs->cap * 2 : 16;
            found_proc *nv = realloc(fs->v, cap * sizeof *nv);
            if (!nv) {
                if (f.pidfd >= 0)
                    close(f.pidfd);
                rc = TY_ENOMEM;
                break;
            }
            fs->v = nv;
            fs->cap = cap;
        }
        fs->v[fs->n++] = f;
        (*found)++;
        found_signal(&f, sig);
    }
    closedir(d);
    return rc;
}

static int any_alive(const found_set *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        if (found_alive(&fs->v[i]))
            return 1;
    return 0;
}

/*
 * SIGTERM to everything found, SIGKILL to what is left after grace_ms, each time to
 * the process and its group. Once all found processes are gone /proc is scanned again:
 * one of them may have started another while it was being stopped.
 */
static ty_err stop_leftovers(local_backend *lb, const char *job_id, int grace_ms, int *found)
{
    char entry[64];
    found_set fs = {0};
    int nfound = 0, sig = SIGTERM;
    ty_err rc;

    *found = 0;
    if (!is_job_id(job_id))
        return TY_EINVAL;
    /* Sandboxed ranks died with the server that started them (--die-with-parent and
     * their PID namespaces); what may be left is in their cgroups. */
    if (lb->sb)
        return sandbox_recover(lb->sb, job_id, found);
    snprintf(entry, sizeof entry, "TRAINYARD_JOB_ID=%s", job_id);
    uint64_t deadline = ty_time_mono_ns() + (uint64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000u;

    rc = scan_job(entry, &fs, sig, &nfound);
    while (rc == TY_OK) {
        if (!any_alive(&fs)) {
            size_t before = fs.n;
            rc = scan_job(entry, &fs, sig, &nfound);
            if (rc != TY_OK || fs.n == before)
                break;
            continue;
        }
        if (ty_time_mono_ns() >= deadline) {
            if (sig == SIGKILL) {
                rc = TY_EIO;
                break;
            }
            sig = SIGKILL;
            deadline = ty_time_mono_ns() + (uint64_t)LOCAL_KILL_WAIT_MS * 1000000u;
            for (size_t i = 0; i < fs.n; i++)
                found_signal(&fs.v[i], SIGKILL);
            rc = scan_job(entry, &fs, sig, &nfound);
            continue;
        }
        local_sleep_ms(LOCAL_RECOVER_POLL_MS);
    }

    for (size_t i = 0; i < fs.n; i++)
        if (fs.v[i].pidfd >= 0)
            close(fs.v[i].pidfd);
    free(fs.v);
    if (nfound > 0)
        TY_LOG(TY_LOG_INFO, "local: stopped processes of a previous server", "{s:s,s:i,s:b}",
               "job_id", job_id, "found", nfound, "killed", sig == SIGKILL);
    *found = nfound;
    return rc;
}

/* Never adopts: a rank's output went through a pipe of the previous process, and its
 * exit status can only be read by its parent, so an attempt cannot be carried on. */
static ty_err local_recover(backend *b, const backend_job *job, int may_adopt, int grace_ms,
                            backend_recovery *out, char *why, size_t whylen)
{
    (void)may_adopt;
    *out = (backend_recovery){0};
    if (!job || !is_job_id(job->id)) {
        local_why(why, whylen, "invalid job id");
        return TY_EINVAL;
    }
    ty_err rc = stop_leftovers((local_backend *)b, job->id, grace_ms, &out->found);
    if (rc != TY_OK)
        local_why(why, whylen, "processes of the job could not be stopped: %s", ty_strerror(rc));
    return rc;
}

/* ---- logs (any thread) ---------------------------------------------------- */

/*
 * When the logs of attempt n were deleted to keep the job within its total
 * (ranklog.h) and rank had one: fills l with the one line that stands for it; 1.
 */
static int pruned_note(const local_backend *lb, const char *id, int attempt, int rank,
                       backend_log *l)
{
    char dir[PATH_MAX], bytes_s[32], limit_s[32];
    uint64_t bytes = 0, limit = 0;
    int ranks = 0;
    if (path_fmt(dir, sizeof dir, "%s/logs/%s/a%d", lb->data_dir, id, attempt) != 0 ||
        !ranklog_pruned(dir, &bytes, &limit, &ranks) || rank >= ranks)
        return 0;
    local_fmt_bytes(bytes_s, sizeof bytes_s, bytes);
    local_fmt_bytes(limit_s, sizeof limit_s, limit);
    int n = snprintf(l->note, sizeof l->note,
                     "[trainyard] the logs of attempt %d (%s, all ranks) were deleted: the "
                     "job's logs keep the newest attempts within %s (--local-job-log-limit)\n",
                     attempt, bytes_s, limit_s);
    l->note_len = n > 0 && (size_t)n < sizeof l->note ? (size_t)n : 0;
    return 1;
}

/*
 * A rank's log is <data_dir>/logs/<id>/a<n>/rank-<r>.log, read through ranklog.h
 * as one logical log (its .1 segment and the notice of dropped output included).
 * A log written by a server from before logs left the job's directory is read
 * from <data_dir>/jobs/<id>/logs/a<n>/rank-<r>.log, a single file.
 */
static ty_err local_log_open(backend *b, const char *job_id, int attempt, int rank,
                             long tail_lines, backend_log **out)
{
    local_backend *lb = (local_backend *)b;
    char path[PATH_MAX], old[PATH_MAX];
    if (!is_job_id(job_id) || attempt < 1 || rank < 0)
        return TY_ENOTFOUND;
    if (rank_log_path(lb, job_id, attempt, rank, path, sizeof path) != 0 ||
        path_fmt(old, sizeof old, "%s/jobs/%s/logs/a%d/rank-%d.log", lb->data_dir, job_id,
                 attempt, rank) != 0)
        return TY_ENOTFOUND;
    backend_log *l = calloc(1, sizeof *l);
    if (!l)
        return TY_ENOMEM;
    ty_err e = ranklog_reader_open(path, tail_lines, &l->r);
    if (e == TY_ENOTFOUND)
        e = ranklog_reader_open(old, tail_lines, &l->r);
    if (e == TY_ENOTFOUND && pruned_note(lb, job_id, attempt, rank, l))
        e = TY_OK;
    if (e) {
        free(l);
        return e;
    }
    *out = l;
    return TY_OK;
}

static long local_log_read(backend_log *l, char *buf, size_t max)
{
    if (l->r)
        return ranklog_read(l->r, buf, max);
    size_t n = l->note_len - l->note_off < max ? l->note_len - l->note_off : max;
    memcpy(buf, l->note + l->note_off, n);
    l->note_off += n;
    return (long)n;
}

static void local_log_close(backend_log *l)
{
    if (!l)
        return;
    ranklog_reader_close(l->r);
    free(l);
}

/* ---- life ----------------------------------------------------------------- */

static void local_free(backend *b)
{
    local_backend *lb = (local_backend *)b;
    if (!lb)
        return;
    while (lb->attempts) {
        backend_attempt *a = lb->attempts;
        if (a->running > 0) {
            TY_LOG(TY_LOG_ERROR, "local: freed with ranks running; killing them", "{s:s}",
                   "job_id", a->id);
            attempt_kill_reap(lb, a);
        }
        lb->attempts = a->next;
        attempt_free(lb, a);
    }
    if (lb->evfd >= 0)
        close(lb->evfd);
    if (lb->qfd >= 0)
        close(lb->qfd);
    free(lb->q);
    local_disk_free(lb->disk);
    ranklog_pump_free(lb->pump);
    sandbox_free(lb->sb);
    if (lb->server_env)
        for (size_t i = 0; lb->server_env[i]; i++)
            free(lb->server_env[i]);
    free(lb->server_env);
    free(lb->gpu_busy);
    free(lb->gpu_excluded);
    free(lb->data_dir);
    free(lb->server_url);
    free(lb->bin_path);
    free(lb->server_path);
    free(lb);
}

/* /dev/nvidia0, /dev/nvidia1, ...: one per GPU (nvidiactl, nvidia-uvm are not GPUs). */
static int count_nvidia_devices(void)
{
    DIR *d = opendir("/dev");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6])
            continue;
        s += 6;
        while (*s >= '0' && *s <= '9')
            s++;
        n += *s == '\0';
    }
    closedir(d);
    return n;
}

/* bin_dirs joined with ':'; relative ones made absolute, as the ranks run elsewhere. */
static ty_err join_bin_dirs(const char *const *dirs, char **out)
{
    size_t len = 1;
    char cwd[PATH_MAX] = "";
    for (size_t i = 0; dirs && dirs[i]; i++) {
        if (dirs[i][0] != '/' && !cwd[0] && !getcwd(cwd, sizeof cwd))
            return TY_EIO;
        len += strlen(dirs[i]) + strlen(cwd) + 2;
    }
    char *s = malloc(len);
    if (!s)
        return TY_ENOMEM;
    size_t off = 0;
    s[0] = '\0';
    for (size_t i = 0; dirs && dirs[i]; i++) {
        int n = snprintf(s + off, len - off, "%s%s%s%s", off ? ":" : "",
                         dirs[i][0] == '/' ? "" : cwd, dirs[i][0] == '/' ? "" : "/", dirs[i]);
        if (n < 0 || (size_t)n >= len - off) {
            free(s);
            return TY_EINVAL;
        }
        off += (size_t)n;
    }
    *out = s;
    return TY_OK;
}

/* The sandbox, with bin_path's directories and the data sets bound read-only. */
static ty_err sandbox_start(local_backend *lb, const local_options *opt, char *err,
                            size_t errlen)
{
    char *dirs = strdup(lb->bin_path);
    char **list = calloc(strlen(lb->bin_path) / 2 + 2, sizeof *list);
    ty_err rc = TY_ENOMEM;
    if (!dirs || !list)
        goto out;
    size_t n = 0;
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
        list[n++] = d;
    sandbox_options so = {.data_dir = lb->data_dir,
                          .ro_dirs = (const char *const *)list,
                          .user = opt->user};
    rc = sandbox_new(&so, &lb->sb, err, errlen);
    if (rc != TY_OK)
        goto out;
    /* The data sets are for every job's user to read. */
    char datasets[PATH_MAX];
    snprintf(datasets, sizeof datasets, "%s/datasets", lb->data_dir);
    if (chmod(datasets, 0755) != 0) {
        local_why(err, errlen, "local sandbox: %s: %s", datasets, strerror(errno));
        rc = TY_EIO;
        goto out;
    }
    TY_LOG(TY_LOG_INFO, "local: jobs run sandboxed", "{s:s}", "sandbox",
           sandbox_summary(lb->sb));
out:
    free(dirs);
    free(list);
    return rc;
}

/*
 * The disk monitor; its eventfd joins the epoll set (without pidfds the timer, which
 * ticks while a rank runs, brings observe() round to it). Says at start which limit
 * is enforced and how.
 */
static ty_err disk_start(local_backend *lb, char *err, size_t errlen)
{
    char note[256], lim[32];
    ty_err rc = local_disk_new(lb->data_dir, lb->disk_limit, LOCAL_DISK_PERIOD_MS, &lb->disk);
    if (rc != TY_OK) {
        local_why(err, errlen, "local backend: cannot start the disk monitor: %s",
                  ty_strerror(rc));
        return rc;
    }
    if (lb->use_pidfd) {
        struct epoll_event dev = {.events = EPOLLIN, .data.ptr = lb->disk};
        if (epoll_ctl(lb->evfd, EPOLL_CTL_ADD, local_disk_fd(lb->disk), &dev) != 0) {
            local_why(err, errlen, "local backend: epoll: %s", strerror(errno));
            return TY_EIO;
        }
    }
    local_disk_quota_note(lb->data_dir, note, sizeof note);
    char jlim[32], rlim[32];
    local_fmt_bytes(jlim, sizeof jlim, lb->job_log_limit);
    local_fmt_bytes(rlim, sizeof rlim, lb->log_limit);
    if (lb->disk_limit > 0) {
        char how[160];
        local_fmt_bytes(lim, sizeof lim, lb->disk_limit);
        snprintf(how, sizeof how, "measured: the directory of each running job is walked every "
                 "%d s (allocated blocks; at most %d entries, %d levels)",
                 LOCAL_DISK_PERIOD_MS / 1000, LOCAL_DISK_MAX_ENTRIES, LOCAL_DISK_MAX_DEPTH);
        TY_LOG(TY_LOG_INFO, "local: a job's directory is limited (--local-disk-limit)",
               "{s:s,s:s,s:s,s:s,s:s}", "disk_limit", lim, "enforced", how, "quota", note,
               "log_limit_per_rank", rlim, "log_limit_per_job", jlim);
    } else {
        TY_LOG(TY_LOG_WARN, "local: a job's directory is NOT limited (--local-disk-limit 0): "
               "one job can fill the disk of the data directory", "{s:s,s:s,s:s}", "quota", note,
               "log_limit_per_rank", rlim, "log_limit_per_job", jlim);
    }
    return TY_OK;
}

ty_err local_backend_new(const local_options *opt, backend **out, char *err, size_t errlen)
{
    local_backend *lb = NULL;
    ty_err rc = TY_ENOMEM;
    char real[PATH_MAX];

    if (!opt || !opt->data_dir || !opt->data_dir[0]) {
        local_why(err, errlen, "local backend: data_dir is required");
        return TY_EINVAL;
    }
    if (opt->slots < 0 || opt->gpus < -1) {
        local_why(err, errlen, "local backend: slots must be >= 0 and gpus >= -1");
        return TY_EINVAL;
    }
    /* datasets (TRAINYARD_DATA_DIR) is shared by every job: made once, here. */
    char datasets[PATH_MAX];
    if (path_fmt(datasets, sizeof datasets, "%s/datasets", opt->data_dir) != 0) {
        local_why(err, errlen, "local backend: data_dir path too long");
        return TY_EINVAL;
    }
    if (mkdir_p(datasets) != 0) {
        local_why(err, errlen, "local backend: cannot create %s: %s", datasets, strerror(errno));
        return TY_EIO;
    }
    /* Absolute: ranks run in their job's directory and get paths under data_dir. */
    if (!realpath(opt->data_dir, real)) {
        local_why(err, errlen, "local backend: %s: %s", opt->data_dir, strerror(errno));
        return TY_EIO;
    }

    lb = calloc(1, sizeof *lb);
    if (!lb)
        goto fail;
    lb->base.ops = &local_ops;
    lb->evfd = -1;
    lb->qfd = -1;
    if (opt->slots > 0) {
        lb->slots = opt->slots;
    } else {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        lb->slots = cpus > 0 && cpus < INT_MAX / 2 ? 2 * (int)cpus : 2;
    }
    lb->gpus = opt->gpus >= 0 ? opt->gpus : count_nvidia_devices();
    lb->gpu_busy = calloc(lb->gpus > 0 ? (size_t)lb->gpus : 1, 1);
    lb->gpu_excluded = calloc(lb->gpus > 0 ? (size_t)lb->gpus : 1, 1);
    lb->data_dir = strdup(real);
    lb->server_url = opt->server_url ? strdup(opt->server_url) : NULL;
    const char *sp = getenv("PATH");
    lb->server_path = strdup(sp && *sp ? sp : LOCAL_DEFAULT_PATH);
    lb->server_env = calloc(sizeof inherited_env / sizeof inherited_env[0], sizeof(char *));
    if (!lb->gpu_busy || !lb->gpu_excluded || !lb->data_dir || (opt->server_url && !lb->server_url) ||
        !lb->server_path || !lb->server_env)
        goto fail;
    for (size_t i = 0, k = 0; inherited_env[i]; i++) {
        const char *v = getenv(inherited_env[i]);
        if (!v)
            continue;
        if (asprintf(&lb->server_env[k], "%s=%s", inherited_env[i], v) < 0) {
            lb->server_env[k] = NULL;
            goto fail;
        }
        k++;
    }
    rc = join_bin_dirs(opt->bin_dirs, &lb->bin_path);
    if (rc != TY_OK) {
        local_why(err, errlen, "local backend: cannot resolve bin_dirs");
        goto fail;
    }
    if (opt->log_limit < 0 || opt->job_log_limit < 0 || opt->disk_limit < 0) {
        local_why(err, errlen, "local backend: limits must be >= 0");
        rc = TY_EINVAL;
        goto fail;
    }
    lb->log_limit = opt->log_limit > 0 ? (uint64_t)opt->log_limit : RANKLOG_DEFAULT_LIMIT;
    lb->job_log_limit = opt->job_log_limit > 0 ? (uint64_t)opt->job_log_limit
                                               : RANKLOG_JOB_LIMIT_FACTOR * lb->log_limit;
    lb->disk_limit = (uint64_t)opt->disk_limit;
    rc = ranklog_pump_new(lb->log_limit, &lb->pump);
    if (rc != TY_OK) {
        local_why(err, errlen, "local backend: cannot start the log writer: %s", ty_strerror(rc));
        goto fail;
    }
    if (opt->sandbox) {
        if ((rc = sandbox_start(lb, opt, err, errlen)) != TY_OK)
            goto fail;
    } else {
        TY_LOG(TY_LOG_WARN, "local: jobs run UNSANDBOXED, as the server's user, with access "
               "to everything it can reach (--local-sandbox=off)", "{s:s}", "data_dir",
               lb->data_dir);
    }

    /* pidfds need Linux 5.3; a seccomp profile may refuse them too. */
    int probe = local_pidfd_open(getpid());
    if (probe >= 0) {
        close(probe);
        lb->use_pidfd = 1;
        lb->evfd = epoll_create1(EPOLL_CLOEXEC);
    } else {
        TY_LOG(TY_LOG_INFO, "local: no pidfd_open, polling rank exits", "{s:s}", "error",
               strerror(errno));
        lb->evfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    }
    if (lb->evfd < 0) {
        local_why(err, errlen, "local backend: %s: %s", lb->use_pidfd ? "epoll" : "timerfd",
                  strerror(errno));
        rc = TY_EIO;
        goto fail;
    }
    if (lb->use_pidfd) {
        struct epoll_event qev = {.events = EPOLLIN, .data.ptr = lb};
        if ((lb->qfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
            epoll_ctl(lb->evfd, EPOLL_CTL_ADD, lb->qfd, &qev) != 0) {
            local_why(err, errlen, "local backend: eventfd: %s", strerror(errno));
            rc = TY_EIO;
            goto fail;
        }
    }
    if ((rc = disk_start(lb, err, errlen)) != TY_OK)
        goto fail;
    *out = &lb->base;
    return TY_OK;

fail:
    if (rc == TY_ENOMEM)
        local_why(err, errlen, "local backend: out of memory");
    local_free(lb ? &lb->base : NULL);
    return rc;
}

int local_backend_slots(const backend *b)
{
    return ((const local_backend *)b)->slots;
}

int local_backend_gpus(const backend *b)
{
    return ((const local_backend *)b)->gpus;
}

int local_backend_slots_used(const backend *b)
{
    return atomic_load(&((local_backend *)b)->slots_used);
}

long long local_backend_disk_limit(const backend *b)
{
    return (long long)((const local_backend *)b)->disk_limit;
}

long long local_backend_job_log_limit(const backend *b)
{
    return (long long)((const local_backend *)b)->job_log_limit;
}

static void local_capacity(const backend *b, int *total, int *used)
{
    *total = local_backend_slots(b);
    *used = local_backend_slots_used(b);
}

/* A rank is a process of this machine: it can never have more than the machine's online CPUs
 * and physical memory. GPUs are left to reserve(), which says "never" with its own reason. */
static size_t local_rank_limits(const backend *b, backend_rank_limit *out, size_t max)
{
    (void)b;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
         page = sysconf(_SC_PAGESIZE);
    if (max == 0)
        return 1;
    memset(out, 0, sizeof *out);
    if (cpus > 0)
        out->cpu_millis = (int64_t)cpus * 1000;
    if (pages > 0 && page > 0 && pages <= INT64_MAX / page)
        out->memory_bytes = (int64_t)pages * page;
    return 1;
}

/* GPUs only, as one type named "local" (--local-gpus, else the NVIDIA devices found): slots,
 * the machine's measure, are reserve()'s, and cpu and memory are not booked here. */
static size_t local_free_resources(const backend *b, backend_free *out, size_t max)
{
    const local_backend *lb = (const local_backend *)b;
    if (lb->gpus <= 0)
        return 0;
    if (max == 0)
        return 1;
    int64_t free_gpus = 0;
    for (int g = 0; g < lb->gpus; g++)
        free_gpus += !lb->gpu_busy[g] && !lb->gpu_excluded[g];
    out[0] = (backend_free){.kind = BACKEND_RES_GPU, .gpu_type = LOCAL_GPU_TYPE,
                            .free = free_gpus, .total = lb->gpus};
    return 1;
}

/* The GPUs named "gpuN" (N < --local-gpus) are quarantined; other names are not this
 * machine's. A GPU in use stays with its attempt until released. */
static void local_exclude_nodes(backend *b, const char *const *nodes, size_t n)
{
    local_backend *lb = (local_backend *)b;
    int count = 0;
    memset(lb->gpu_excluded, 0, lb->gpus > 0 ? (size_t)lb->gpus : 1);
    for (size_t i = 0; i < n; i++) {
        char *end = NULL;
        if (strncmp(nodes[i], "gpu", 3) || !isdigit((unsigned char)nodes[i][3]))
            continue;
        long g = strtol(nodes[i] + 3, &end, 10);
        if (*end || g < 0 || g >= lb->gpus || lb->gpu_excluded[g])
            continue;
        lb->gpu_excluded[g] = 1;
        count++;
    }
    atomic_store(&lb->gpus_excluded, count);
}

/* One node, this machine, in no zone, its GPUs of the one type "local". */
static ty_err local_cluster(backend *b, backend_cluster *out)
{
    local_backend *lb = (local_backend *)b;
    memset(out, 0, sizeof *out);
    if (!(out->nodes = calloc(1, sizeof *out->nodes)))
        return TY_ENOMEM;
    backend_node *n = &out->nodes[0];
    out->nnodes = 1;
    if (gethostname(n->name, sizeof n->name - 1) != 0 || !n->name[0])
        snprintf(n->name, sizeof n->name, "localhost");
    if (lb->gpus > 0)
        snprintf(n->gpu_type, sizeof n->gpu_type, "%s", LOCAL_GPU_TYPE);
    n->ready = 1;
    n->gpus_allocatable = lb->gpus;
    n->gpus_trainyard = atomic_load(&lb->gpus_used);
    n->gpus_quarantined = atomic_load(&lb->gpus_excluded);
    return TY_OK;
}

static const backend_ops local_ops = {
    .name = "local",
    .reserve = local_reserve,
    .launch = local_launch,
    .event_fd = local_event_fd,
    .observe = local_observe,
    .stop = local_stop,
    .release = local_release,
    .recover = local_recover,
    .log_open = local_log_open,
    .log_read = local_log_read,
    .log_close = local_log_close,
    .capacity = local_capacity,
    .rank_limits = local_rank_limits,
    .free_resources = local_free_resources,
    .cluster = local_cluster,
    .exclude_nodes = local_exclude_nodes,
    .free = local_free,
};
