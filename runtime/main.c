/*
 * main.c - `trainyard-worker`: the command line, signals, exit codes, and the --nproc
 * launcher that starts N local ranks on 127.0.0.1 (like `torchrun --standalone`).
 *
 * Exit status: 0 done; 1 failed (a lost peer is named on stderr); 2 bad usage;
 * 75 (EX_TEMPFAIL) stopped by SIGTERM at a step boundary after a checkpoint: resumable.
 * The launcher exits 0 if every rank did, 75 if every rank stopped that way (or finished),
 * and otherwise with the first failing rank's status (128 + signal for a killed rank).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ty_crypto.h"
#include "common/ty_net.h"
#include "runtime/comm.h"
#include "runtime/config.h"
#include "runtime/data.h"
#include "runtime/train.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_PREEMPTED 75 /* EX_TEMPFAIL */
#define LAUNCHER_GRACE_S 15

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

static int online_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/*
 * BLAS threads of one rank: the flag, else OPENBLAS_NUM_THREADS (the launcher sets it for
 * its children), else this machine's cores shared by its local ranks.
 */
static int rank_threads(const worker_config *c, int local_ranks)
{
    if (c->threads > 0)
        return c->threads;
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v > 0 && v <= 1024)
            return (int)v;
    }
    int t = online_cpus() / (local_ranks > 0 ? local_ranks : 1);
    return t > 0 ? t : 1;
}

/*
 * Pins this process to slice local_rank of local_world equal slices of the CPUs it may run
 * on (as mpirun binds ranks to cores). Ranks sharing a machine then keep their caches and
 * their communication threads run beside their own computation instead of preempting a
 * neighbour's. Nothing happens when there are fewer CPUs than local ranks (the process
 * was bound already, or the machine is oversubscribed).
 */
static void bind_to_slice(int local_rank, int local_world)
{
    cpu_set_t all, mine;
    if (local_world < 2 || sched_getaffinity(0, sizeof all, &all) != 0)
        return;
    int n = CPU_COUNT(&all);
    if (n < local_world)
        return;
    int per = n / local_world, first = local_rank * per, seen = 0;
    CPU_ZERO(&mine);
    for (int cpu = 0; cpu < CPU_SETSIZE && seen < first + per; cpu++) {
        if (!CPU_ISSET(cpu, &all))
            continue;
        if (seen >= first)
            CPU_SET(cpu, &mine);
        seen++;
    }
    sched_setaffinity(0, sizeof mine, &mine);
}

static int run_rank(worker_config *c)
{
    char err[1024] = "";
    train_report rep;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a dead peer's socket must give EPIPE, not kill us */

    if (c->world > 1 && !c->rendezvous_secret)
        fprintf(stderr, "trainyard-worker: rank %d: warning: TRAINYARD_RENDEZVOUS_SECRET is not "
                        "set; the rendezvous admits any connection that speaks its protocol\n",
                c->rank);
    const char *fallback = config_data_fallback(c, CONFIG_DEFAULT_DATA_DIR, data_present);
    if (fallback) {
        fprintf(stderr, "trainyard-worker: rank %d: no data set in %s and no --data given; "
                        "reading %s (Debian's dataset-fashion-mnist) instead\n",
                c->rank, c->data_dir, fallback);
        c->data_dir = fallback;
    }
    c->threads = rank_threads(c, c->local_world);
    if (c->bind)
        bind_to_slice(c->local_rank, c->local_world);
    ty_err rc = train_run(c, &stop_requested, stdout, &rep, err, sizeof err);
    if (rc != TY_OK) {
        fprintf(stderr, "trainyard-worker: rank %d: %s\n", c->rank, err);
        return EXIT_FAILED;
    }
    if (rep.preempted) {
        fprintf(stderr, "trainyard-worker: rank %d: stopped at step %lld%s\n", c->rank,
                (long long)rep.steps,
                c->checkpoint_dir ? ", checkpoint written"
                                  : "; no checkpoint directory, the next attempt starts over");
        return EXIT_PREEMPTED;
    }
    return 0;
}

static int set_env_int(const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return setenv(name, buf, 1);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Exit status of a reaped child in shell terms. */
static int status_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_FAILED;
}

/*
 * Starts c->nproc ranks of this binary with the rank environment, forwards SIGTERM and
 * SIGINT to them, and waits. If a rank fails, the others normally notice within --timeout
 * and fail too; any still running LAUNCHER_GRACE_S later are killed, so the launcher
 * never hangs on a hung rank.
 */
static int launch(const worker_config *c, int argc, char **argv)
{
    int n = c->nproc, rc = EXIT_FAILED;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *codes = calloc((size_t)n, sizeof *codes);
    char **child_argv = calloc((size_t)argc + 1, sizeof *child_argv);
    sigset_t mask, old;
    int port = ty_net_free_port();
    /* The local ranks' own rendezvous secret, unless one was handed to us. */
    unsigned char raw[32];
    char secret[2 * sizeof raw + 1] = "";
    if (!c->rendezvous_secret) {
        if (ty_random_bytes(raw, sizeof raw) != TY_OK)
            port = -1;
        ty_hex(raw, sizeof raw, secret);
        explicit_bzero(raw, sizeof raw);
    }
    if (!pids || !codes || !child_argv || port < 0) {
        fprintf(stderr, "trainyard-worker: cannot set up %d local ranks\n", n);
        goto out;
    }
    /* The children run the same command without --nproc. */
    int k = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--nproc") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--nproc=", 8) == 0)
            continue;
        child_argv[k++] = argv[i];
    }
    child_argv[k] = NULL;

    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old);
    pid_t launcher = getpid();
    int threads = rank_threads(c, n);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "trainyard-worker: fork: %s\n", strerror(errno));
            for (int q = 0; q < r; q++)
                kill(pids[q], SIGKILL);
            for (int q = 0; q < r; q++)
                waitpid(pids[q], NULL, 0);
            goto out_mask;
        }
        if (pid == 0) {
            /* A rank must not outlive its launcher: it stops (and checkpoints) with it. */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != launcher)
                _exit(EXIT_FAILED);
            sigprocmask(SIG_SETMASK, &old, NULL);
            /* Before exec, so that the BLAS thread pool the rank starts inherits it. */
            if (c->bind)
                bind_to_slice(r, n);
            if (set_env_int("RANK", r) || set_env_int("WORLD_SIZE", n) ||
                set_env_int("LOCAL_RANK", r) || set_env_int("LOCAL_WORLD_SIZE", n) ||
                setenv("MASTER_ADDR", "127.0.0.1", 1) || set_env_int("MASTER_PORT", port) ||
                (secret[0] && setenv("TRAINYARD_RENDEZVOUS_SECRET", secret, 1)) ||
                (!getenv("OPENBLAS_NUM_THREADS") && set_env_int("OPENBLAS_NUM_THREADS", threads)))
                _exit(EXIT_FAILED);
            execv("/proc/self/exe", child_argv);
            fprintf(stderr, "trainyard-worker: exec: %s\n", strerror(errno));
            _exit(127);
        }
        pids[r] = pid;
    }

    int alive = n, failed = 0;
    double kill_at = 0;
    while (alive > 0) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&mask, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            for (int r = 0; r < n; r++)
                if (pids[r] > 0)
                    kill(pids[r], SIGTERM);
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] != pid)
                    continue;
                pids[r] = 0;
                codes[r] = status_code(status);
                alive--;
                if (codes[r] != 0 && codes[r] != EXIT_PREEMPTED) {
                    fprintf(stderr, "trainyard-worker: rank %d exited with status %d\n", r,
                            codes[r]);
                    if (!failed)
                        kill_at = mono_s() + c->timeout_s + LAUNCHER_GRACE_S;
                    failed = 1;
                }
            }
        }
        if (failed && alive > 0 && mono_s() > kill_at) {
            for (int r = 0; r < n; r++)
                if (pids[r] > 0) {
                    fprintf(stderr, "trainyard-worker: rank %d still running; killing it\n", r);
                    kill(pids[r], SIGKILL);
                }
            kill_at = mono_s() + 3600;
        }
    }
    rc = 0;
    for (int r = 0; r < n; r++)
        if (codes[r] != 0 && codes[r] != EXIT_PREEMPTED) {
            rc = codes[r];
            break;
        }
    if (rc == 0)
        for (int r = 0; r < n; r++)
            if (codes[r] == EXIT_PREEMPTED)
                rc = EXIT_PREEMPTED;
out_mask:
    sigprocmask(SIG_SETMASK, &old, NULL);
out:
    explicit_bzero(secret, sizeof secret);
    free(pids);
    free(codes);
    free(child_argv);
    return rc;
}

static void usage(FILE *f)
{
    fputs("usage: trainyard-worker train [flags]   (trainyard-worker train --help)\n", f);
}

int main(int argc, char **argv)
{
    worker_config c;
    char err[512] = "";
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(config_usage(), stdout);
        return 0;
    }
    if (strcmp(argv[1], "train") != 0) {
        fprintf(stderr, "trainyard-worker: unknown command \"%s\"\n", argv[1]);
        usage(stderr);
        return EXIT_USAGE;
    }
    config_defaults(&c);
    ty_err rc = config_apply_env(&c, env_lookup, err, sizeof err);
    if (rc == TY_OK)
        rc = config_parse_args(&c, argc - 2, argv + 2, err, sizeof err);
    if (rc == TY_ENOTFOUND) {
        fputs(config_usage(), stdout);
        return 0;
    }
    if (rc != TY_OK) {
        fprintf(stderr, "trainyard-worker: %s\n", err);
        return EXIT_USAGE;
    }
    if (c.nproc > 0)
        return launch(&c, argc, argv);
    return run_rank(&c);
}
