/*
 * sched_int.h - what the files of the reconcile loop share: sched.c (the loop, deciding,
 * acting), sched_record.c (the attempt record), sched_admit.c (gathering admission's
 * snapshot and carrying out its decisions) and sched_recover.c (taking over what a previous
 * server process left). Nothing here is public: sched.h is the module's API.
 */
#ifndef TY_SCHED_INT_H
#define TY_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "common/ty_crypto.h"
#include "scheduler/admit.h"
#include "scheduler/sched.h"

#define DEFAULT_GRACE_MS 10000
#define MAX_ADMITS_PER_ROUND 256 /* keeps a round (and its commit) short under a flood */
#define PENDING_FIRST_PAGE 8     /* a queue's first page in a round */
#define PENDING_PAGE 64          /* its later pages */
#define QUEUES_PAGE 256          /* queue names read at once */
#define CHANGES_PAGE 4096
#define EVENTS_PAGE 64 /* backend events read at once (on the stack) */
#define FOLLOW_POLL_MS 100
#define SCHED_NEWS_HOLD_MS 100 /* news waits at most this for the news behind it (sched.c) */

/* ---- jobs as the scheduler holds them ------------------------------------ */

typedef enum rank_state {
    RANK_PENDING,
    RANK_RUNNING,
    RANK_SUCCEEDED,
    RANK_FAILED,    /* exited non-zero on its own */
    RANK_KILLED,    /* killed by a signal nobody here sent */
    RANK_STOPPED,   /* ended after the server asked the gang to stop */
    RANK_DISRUPTED, /* taken away by its environment (evicted, preempted, node lost) */
} rank_state;

typedef enum attempt_state {
    ATT_STARTING,
    ATT_RUNNING,
    ATT_STOPPING,
    ATT_SUCCEEDED,
    ATT_FAILED,
    ATT_STOPPED,
    ATT_CANCELLED,
} attempt_state;

/* Why the gang of the current attempt is being stopped: what its end means. */
typedef enum end_cause {
    END_NONE,
    END_FAILED,    /* a rank failed: restart or fail */
    END_TIMEOUT,   /* timeout_seconds: fail */
    END_CANCEL,    /* a client cancelled: CANCELLED */
    END_SHUTDOWN,  /* the server stops: RESTARTING, resumed by the next start */
    END_DISRUPTED, /* the backend took a rank away: RESTARTING without spending restart.max */
    END_LAUNCH,    /* the attempt could not be started: FAILED (LaunchFailed) */
    END_DISK,      /* the job's directory went over the backend's disk limit: FAILED
                      (DiskLimitExceeded); a restart would find the same full disk */
    END_PREEMPTED, /* admission took its place for another job: back to PENDING at its place,
                      without spending restart.max (a disruption) */
} end_cause;

/* A backend call a job wants, made in the act phase. */
typedef enum want_stop {
    STOP_NONE,
    STOP_SOFT, /* ask the gang to stop (SIGTERM, pods deleted with their grace period) */
    STOP_HARD, /* end it now */
} want_stop;

typedef struct srank {
    rank_state state;
    int pid;       /* 0: none */
    char *pod;     /* owned; NULL: none */
    char *node;    /* owned; NULL: none */
    int exit_code; /* -1: none */
    int signal;    /* 0: none */
    int64_t started_ms, ended_ms;
} srank;

typedef struct sjob {
    struct sjob *next;
    struct sjob *hnext; /* the next in its bucket of sched's buckets */
    /* The work list the job is on (sched's touched, visiting, blocked or held), NULL: none.
     * A round decides only the jobs on these lists (see "Which jobs a round visits" in
     * sched.c). */
    struct sjob *tnext, **tpprev;
    enum { ON_NONE, ON_TOUCHED, ON_VISITING, ON_BLOCKED, ON_HELD } on;
    int news_only; /* touched only by news: where it was placed, a rank that started */
    /* Its place among sched's rbuckets, by the reservation it was found under (rkey). */
    struct sjob *rnext;
    const backend_attempt *rkey;
    /* Its last change: lc_round's c[lc_ix], while lc_round's gen is lc_gen. */
    const void *lc_round;
    unsigned long lc_gen;
    size_t lc_ix;
    char id[STORE_ID_LEN + 1];
    char *queue;
    char *team; /* the owning team */
    int64_t priority;
    int64_t admitted_ms;             /* when this loop admitted it (recovered: its last update) */
    int64_t created_ms;              /* its submission */
    admit_preempt_kind preempt_kind; /* END_PREEMPTED: reclaim or priority */
    job_state state;                 /* as last committed */
    int attempt;                     /* the store's attempt number */
    int restarts;
    int64_t sweep; /* a sweep's trial: the sweep's seq, else 0 */
    /* From the spec: what backend_job shows a backend, parsed once. */
    json_t *spec;
    char **argv; /* borrowed strings of spec, NULL-terminated */
    char **env;  /* owned "NAME=value" strings, NULL-terminated */
    int world, gpus_per_rank, restart_max, backoff_s;
    const char *gpu_type, *image, *cpu, *memory, *zone, *capacity; /* borrowed from spec */
    double cpu_cores, memory_bytes;
    backend_volume *volumes; /* owned array of borrowed strings */
    size_t nvolumes;
    int64_t timeout_s; /* 0: none */
    const char *name;  /* borrowed from spec, or NULL */
    int ncommand, has_ttl;
    int64_t ttl_s;
    /* The backend's reservation and the current attempt. */
    backend_attempt *res;
    srank *ranks;        /* world entries; protected by mu for readers */
    int launched;        /* the current attempt was launched (or adopted) and has not ended */
    int alive;           /* launched ranks whose end was not observed yet */
    want_stop want_stop; /* a stop to ask for in the act phase */
    attempt_state astate;
    int64_t a_started_ms, a_ended_ms;
    const char *a_reason;
    char a_message[BACKEND_DETAIL_MAX + 96]; /* as long as cause_msg, which it may hold */
    int have_record;                         /* an attempt record exists for `attempt` */
    int dirty;                               /* the record changed since it was written */
    /* Stopping and timers. */
    end_cause cause;
    char cause_msg[BACKEND_DETAIL_MAX + 96];
    int stop_asked, kill_sent; /* decided (the act phase makes the call) */
    int64_t kill_at_ms;        /* the hard stop, when the gang is still there; 0: none */
    int64_t restart_at_ms;     /* RESTARTING: launch the next attempt then */
    int64_t first_start_ms;
    int need_running;                 /* every rank runs: write STARTING -> RUNNING */
    char waiting[BACKEND_DETAIL_MAX]; /* the backend's last PENDING reason, "" when none */
    json_t *placement;                /* the current attempt's "placement" as the record shows
                                         it (nodes aside: those come from the ranks), from the
                                         backend's PLACEMENT; NULL: none */
    char placed[BACKEND_DETAIL_MAX];  /* a PLACEMENT's words, to write as a Placed event ("" when
                                         written) */
    int withdrawn;                    /* END_DISRUPTED: the backend withdrew the attempt */
    int recheck;                      /* the store refused an update: read the job again */
    int retry;                        /* the store failed: this round's changes are tried again */
    char token[TY_TOKEN_BUFLEN];      /* the starting attempt's job token until launch(), else "" */
} sjob;

typedef struct queue_count {
    char *name;
    int active;
} queue_count;

/* The trials of a sweep held here (active); a sweep leaves the list when none is. */
typedef struct sweep_count {
    int64_t sweep;
    int active;
} sweep_count;

struct sched {
    store *st;
    backend *be;
    int default_limit;
    sched_queue_limit *limits;
    size_t nlimits;
    int grace_ms;

    pthread_t thread;
    int thread_started;
    int wake_fd;
    atomic_int stopping;

    /* Scheduler thread only. */
    int64_t feed_seq;
    uint64_t feed_marks; /* store_submits_cancels() when the feed was last read whole */
    uint64_t written;    /* changes given to the store: memory is trimmed after some */
    int admit_wanted;
    int commit_failed; /* the last commit failed: pause before trying again */
    int read_failed;   /* admission could not read the store: pause before trying again */
    /* The jobs the next round decides (touched), those it decides now (visiting), those
     * that wait for capacity to restart (blocked: decided every round) and those whose news
     * waits for news_at_ms (held). */
    sjob *touched, *visiting, *blocked, *held;
    int64_t news_at_ms; /* news is not written before this; held jobs are decided then */
    int full_pass;   /* the next round decides every job held */
    int64_t due_ms;  /* no job's timer falls before this (0: none); the round at or after
                        it decides every job and finds the next one */
    queue_count *queues;
    size_t nqueues, capqueues;
    sweep_count *sweeps;
    size_t nsweeps, capsweeps;
    /* The head of the line that waits for capacity, and why, as last written (a Waiting
     * event is written when either changes). */
    struct said *said; /* the pending heads' reasons as last written (sched_admit()) */
    size_t nsaid;

    /* Shared with sched_get_stats() and sched_log_*(). */
    pthread_mutex_t mu;
    sjob *jobs;
    sjob **buckets; /* the same jobs by id (sched_job_find()), chained by hnext */
    size_t nbuckets;
    sjob **rbuckets; /* scheduler thread: by reservation (nbuckets of them), chained by rnext */
    uint64_t njobs, running_ranks, rounds, launches, restarts_total;
    uint64_t preemptions[2]; /* attempts ended by a preemption: [0] reclaim, [1] priority */
    uint64_t admissions, admission_wait_ms; /* jobs admitted, their waits since submission */
    int stopped;                            /* the thread finished: every follower stops waiting */
    uint64_t quarantines_total, node_failures_total, nodes_quarantined;

    /* The quarantine (sched_nodes.c). */
    quarantine_policy qpolicy;
    atomic_int nodes_reload;   /* the store's quarantines changed: read them again */
    char **qnodes;             /* scheduler thread: the nodes out of rotation now */
    size_t nqnodes;
    int64_t qnext_release_ms;  /* the earliest release time among them, 0 for none */
};

/* ---- a round's decisions ---------------------------------------------------- */

typedef enum act {
    ACT_NONE,
    ACT_LAUNCH,  /* after STARTING committed: start the ranks */
    ACT_FORGET,  /* after a terminal state committed: release and forget */
    ACT_DISCARD, /* after the change committed: release and forget (it runs nothing) */
} act;

typedef struct change {
    sjob *job;
    store_update u;
    act act;
    int last; /* the job's last change in the round (set by the commit) */
    char msg[320];
    char *record;                            /* owned */
    char *preason;                           /* owned: u.pending_reason's text */
    unsigned char token_hash[TY_SHA256_LEN]; /* into STARTING: the new job token's hash */
} change;

typedef struct round {
    change *c;
    size_t n, cap;
    unsigned long gen; /* changes since the last round_clear() (sjob's lc_gen) */
} round;

/* sched.c: jobs as the loop holds them, and a round's changes */
int sched_limit_of(const sched *s, const char *queue);
queue_count *sched_queue_find(sched *s, const char *queue);
int sched_sweep_active(const sched *s, int64_t sweep);
sjob *sched_job_find(sched *s, const char *id);
void sched_ranks_reset(sjob *j);
void sched_job_free(sjob *j);
ty_err sched_job_new(const store_job *row, sjob **out);
void sched_job_view(const sjob *j, int attempt, backend_job *bj);
void sched_job_link(sched *s, sjob *j);
void sched_job_forget(sched *s, sjob *j);
void sched_touch(sched *s, sjob *j); /* the next round decides j */
void sched_set_act(change *c, act a);
change *sched_push(round *r, sjob *j, job_state to, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void sched_stop_gang(sched *s, sjob *j, end_cause cause, const char *msg, int64_t now);

/* sched_record.c: the attempt record (the JSON the API shows as current_attempt) */
char *sched_record_text(const sjob *j, int attempt);
void sched_record_load(sjob *j, const char *text);
void sched_record_end(sched *s, sjob *j, attempt_state as, const char *reason, const char *msg,
                      int64_t now);
void sched_record_begin(sched *s, sjob *j, int64_t now);

/* sched_admit.c: admission (admit.h decides; this gathers and carries out) */
void sched_admit(sched *s, round *r, int64_t now);
void sched_admit_free(sched *s); /* the pending reasons kept between rounds */

/* sched_nodes.c: the node ledger and quarantine */
void sched_nodes_load(sched *s, int64_t now);   /* the quarantines, expired ones released */
void sched_nodes_charge(sched *s, sjob *j, int rank, const backend_event *ev, char *msg,
                        size_t msglen);          /* appends "; node N quarantined (...)" */
void sched_nodes_free(sched *s);

/* sched_recover.c: recovery after a restart */
void sched_recover(sched *s, round *r);

#endif
