/*
 * sandbox.h - the local backend's sandbox: one per rank, built with bubblewrap.
 *
 * A rank runs as
 *
 *   bwrap (our child, the pid the backend watches)
 *     └─ bwrap's init    PID 1 of the rank's own PID namespace
 *          └─ the rank   (as root: setpriv, which drops to the rank user, then the
 *                         rank), with whatever it starts
 *
 * so that:
 * - nothing of the rank outlives it: when the rank exits, PID 1 exits with its
 *   status and the kernel kills every process left in the namespace, setsid() or
 *   not. If the server is killed (kill -9), bwrap and its init die with it
 *   (--die-with-parent), and the namespace with them; the next start also ends
 *   whatever is left in the ranks' cgroups;
 * - SIGTERM reaches the rank and everything it started: it is sent to every process
 *   of the namespace but PID 1 (bwrap would only die and take the rank down at once);
 * - the rank sees only what it needs (a mount namespace): /usr and /etc read-only,
 *   a fresh /dev and /proc, /tmp and /dev/shm as private tmpfs of mode 1777 (any
 *   program may write there, as on a normal machine), each of at most
 *   resources.memory bytes when that is set (tmpfs pages are charged to the memory
 *   cgroup of the rank that writes them), the directories of opt->ro_dirs and
 *   <data_dir>/datasets read-only, and its job's own directory read-write, as its
 *   working directory. The server's data directory, database, token file, logs
 *   and the other jobs' directories do not exist in there;
 * - the rank runs unprivileged: when the server is root, as opt->user (a system
 *   user, "trainyard" by default; never root), else as the server's own user in a
 *   user namespace. bwrap adds no_new_privs and drops every capability;
 * - resources are limited where the machine lets the server manage cgroups (v1
 *   memory/cpu/pids controllers, or v2 with them): resources.memory (memory and
 *   swap), resources.cpu (a CFS quota) and a cap on processes (SANDBOX_PIDS_MAX),
 *   one cgroup per rank under <own cgroup>/trainyard-<hash of data_dir>/. After a
 *   kill -9 the next server ends whatever is left in those cgroups.
 *
 * Exit statuses: bwrap passes the rank's exit code through and turns death by signal
 * N into the code 128 + N; sandbox_status() turns it back.
 *
 * Threads: sandbox_new/free on one thread; spawn, signal, finish and recover on the
 * backend's thread (the scheduler's). The sandbox's bwrap processes are children of
 * the thread that spawned them: --die-with-parent fires when that thread ends.
 */
#ifndef TY_SCHEDULER_SANDBOX_H
#define TY_SCHEDULER_SANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/ty_error.h"

#define SANDBOX_PIDS_MAX 4096      /* processes and threads per rank, with cgroups */
#define SANDBOX_DEFAULT_USER "trainyard"

typedef struct sandbox sandbox;

typedef struct sandbox_options {
    const char *data_dir;          /* absolute; <data_dir>/datasets is bound read-only */
    const char *const *ro_dirs;    /* absolute directories bound read-only (the binaries),
                                      NULL-terminated; may be NULL */
    const char *user;              /* when the server is root; NULL: SANDBOX_DEFAULT_USER */
} sandbox_options;

/*
 * Finds bwrap (and setpriv when root), the user, and the cgroup controllers this process may
 * manage; ends what a previous server of the same data_dir left in its cgroups;
 * then builds one sandbox as a check. *out is new. On failure err says what is
 * missing and how to get it (or that --local-sandbox=off runs jobs unsandboxed).
 */
ty_err sandbox_new(const sandbox_options *opt, sandbox **out, char *err, size_t errlen);

void sandbox_free(sandbox *sb);

/* One line for the start-up log: user, namespaces, which limits are enforced and,
 * when some cannot be, why. */
const char *sandbox_summary(const sandbox *sb);

/* The name of the user ranks run as. */
const char *sandbox_user(const sandbox *sb);

/* Makes dir the rank user's (chown), so that a rank can write there. dir must be a
 * directory, not a symlink (a job controls what is inside its own directory). */
ty_err sandbox_own(const sandbox *sb, const char *dir);

/* What one rank needs; all borrowed. */
typedef struct sandbox_rank {
    const char *job_id;
    int attempt;
    int rank;
    const char *job_dir;           /* bound read-write, the working directory */
    const int *gpus;               /* the rank's GPU indices (/dev/nvidia<N>) */
    int ngpus;
    double cpu;                    /* cores; <= 0: no limit */
    double memory;                 /* bytes; <= 0: no limit */
} sandbox_rank;

/* A rank's sandbox while it runs; filled by sandbox_spawn. */
typedef struct sandbox_proc {
    pid_t pid;                     /* bwrap: a child of the calling thread */
    pid_t init;                    /* bwrap's init (PID 1) in our PID namespace; 0 until
                                      bwrap told */
    unsigned long long pidns;      /* the inode of the rank's PID namespace, with init */
    int status_fd;                 /* bwrap's --json-status-fd, read end; -1 when done */
    int ncg;                       /* cgroup directories in cg */
    char *cg[3];                   /* owned paths, one per controller hierarchy */
} sandbox_proc;

/*
 * Starts exe with argv and envp in a new sandbox for r, with stdin /dev/null and
 * stdout and stderr on out_fd. TY_OK: *p describes it; sandbox_finish() must
 * follow once p->pid was reaped. On failure nothing runs and why says what failed.
 */
ty_err sandbox_spawn(sandbox *sb, const sandbox_rank *r, const char *exe, char *const argv[],
                     char *const envp[], int out_fd, sandbox_proc *p, char *why, size_t whylen);

/* SIGKILL: ends the whole sandbox (through its PID 1). Any other signal goes to every
 * process of the sandbox but PID 1. Returns 0, or -1 with errno. */
int sandbox_signal(sandbox_proc *p, int sig);

/*
 * Turns bwrap's wait status into the rank's: *exit_code >= 0 when it exited, else -1
 * with *signal set.
 */
void sandbox_status(int bwrap_code, int bwrap_signal, int *exit_code, int *signal);

/*
 * After p->pid was reaped: kills whatever is left in the rank's cgroups, removes
 * them, and frees p's resources. detail gets why the kernel ended the rank when it
 * knows ("out of memory: resources.memory is 64 MiB"), else "".
 */
void sandbox_finish(sandbox *sb, sandbox_proc *p, char *detail, size_t len);

/*
 * Ends every process left in the cgroups of job_id's ranks (a previous server's);
 * *found counts them. TY_OK with *found = 0 without cgroups: the sandboxes of a
 * server that died were ended by the kernel with it (--die-with-parent).
 */
ty_err sandbox_recover(sandbox *sb, const char *job_id, int *found);

#endif
