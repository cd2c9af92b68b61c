/*
 * store_int.h - internals shared by the files of store/ (not a public API).
 *
 *   store.c         connections, the read pool, the writer thread (group commit),
 *                   the checkpointer, ping and statistics
 *   store_schema.c  the versioned migrations
 *   store_id.c      time-ordered job ids
 *   store_jobs.c    submit, get, events, transitions (the writer side of jobs)
 *   store_list.c    the filtered, keyset-paginated job listing
 *   store_sched.c   the scheduler's side: batched updates, attempts, the
 *                   admission order, the change feed
 *   store_tokens.c  API tokens and job tokens
 *   store_notify.c  notification subscriptions and the outbox of their deliveries
 *   store_seal.c    secrets sealed at rest under the key file (AES-256-GCM)
 *   store_secrets.c jobs' secret env values: sealed on insert, opened for a launch
 *   store_metrics.c the metrics jobs report: the batched upsert under the
 *                   per-job caps, the downsampled read, the stream's read by
 *                   seq, the retention purge
 *   store_sweeps.c  sweeps: creation with all their trial jobs, cancel, reads
 *   store_teams.c   teams, their quotas and borrowing limits, their usage
 *   store_nodes.c   the node ledger: attempts' ends charged to nodes, quarantines
 *
 * Threads: the writer thread alone uses the writer connection and the id
 * generator; a read connection is used by one caller at a time between
 * store_reader_acquire() and store_reader_release().
 */
#ifndef TY_STORE_INT_H
#define TY_STORE_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_metrics.h"
#include "store/store.h"

/* ---- connections and their statement caches ------------------------------ */

typedef struct store_stmt_slot {
    const char *sql; /* identity of the statement: the address of a static SQL string */
    int inst;        /* several live copies of one SQL text (e.g. one cursor per state) */
    sqlite3_stmt *st;
} store_stmt_slot;

/* One SQLite connection with its prepared statements, kept for its lifetime. */
typedef struct store_conn {
    sqlite3 *db;
    store_stmt_slot *slots;
    size_t nslots, capslots;
    int64_t *scratch; /* store_list.c: seqs gathered from a name range (grows on demand) */
    size_t scratch_cap;
} store_conn;

/*
 * The cached statement for (sql, inst) on c, prepared on first use with
 * SQLITE_PREPARE_PERSISTENT; `sql` must be a string with static storage (its
 * address is the key). The statement is returned reset with its bindings
 * cleared; the caller resets it again when done. *out is borrowed from c.
 */
ty_err store_conn_stmt(store_conn *c, const char *sql, int inst, sqlite3_stmt **out);

/* Runs the cached statement sql (no rows expected) on c. */
ty_err store_conn_exec(store_conn *c, const char *sql);
/* Steps st once expecting SQLITE_DONE, then resets it. */
ty_err store_step_done(sqlite3_stmt *st);

/* Maps an SQLite result code to ty_err. A unique or primary key constraint is
 * TY_EEXISTS, any other constraint TY_EINVAL. */
ty_err store_sqlite_err(int rc);
/* A growing array of items, filled by store_collect(). */
typedef struct store_vec {
    void *items; /* new; NULL while empty */
    size_t n, cap;
} store_vec;

/* Fills *item (zeroed) from the current row of st. */
typedef ty_err (*store_row_fn)(sqlite3_stmt *st, void *item);

/*
 * Steps st (prepared and bound) to its end and appends one item of `size`
 * bytes per row to v, filled by row(); resets st. An item is counted in v->n
 * before row() fills it, so a free function that accepts zeroed members
 * releases v completely after an error.
 */
ty_err store_collect(sqlite3_stmt *st, size_t size, store_row_fn row, store_vec *v);
/* store_collect() of the cached statement sql, with ?1 bound to arg (when
 * not NULL), on a read connection. */
ty_err store_read_rows(store *s, const char *sql, const char *arg, size_t size, store_row_fn row,
                       store_vec *v);

/* Binds a text argument that stays valid until the statement is reset; NULL binds SQL NULL. */
int store_bind_text(sqlite3_stmt *st, int idx, const char *text);

/* A new NUL-terminated copy of a text column; "" for NULL. NULL when out of memory. */
char *store_column_dup(sqlite3_stmt *st, int col);
/* A state column; NULL (the from-state of a creation event) is JOB_STATE_NONE. */
job_state store_column_state(sqlite3_stmt *st, int col);

/* The columns store_job_from_row() reads, in its order. */
/* pending_counts' buckets (schema 17): seq >> STORE_PENDING_BUCKET_SHIFT, 1,024 seqs each. The
 * migration's triggers write the same shift. */
#define STORE_PENDING_BUCKET_SHIFT 10

/* The current attempt's record is its row of attempts (one seek of that table's key); a
 * query that names these columns reads FROM jobs, not an alias. */
#define STORE_JOB_COLUMNS                                                                          \
    "seq, id, name, queue, priority, state, attempt, created_ms, updated_ms, spec, restarts, "     \
    "(SELECT a.record FROM attempts AS a WHERE a.job_seq = jobs.seq AND a.attempt = jobs.attempt), " \
    "sweep, sweep_parallelism, team, owner, pending_reason, preempted"

/* Fills the store_job *job (new strings) from a row of STORE_JOB_COLUMNS; a
 * store_row_fn. */
ty_err store_job_from_row(sqlite3_stmt *st, void *job);
/* Frees the members of *j and zeroes it. */
void store_job_clear(store_job *j);

/* ---- the writer's operations --------------------------------------------- */

typedef enum store_op_kind {
    STORE_OP_PING,
    STORE_OP_SUBMIT,
    STORE_OP_TRANSITION,
    STORE_OP_UPDATE,
    STORE_OP_TOKEN_CREATE,
    STORE_OP_TOKEN_REVOKE,
    STORE_OP_METRICS,
    STORE_OP_NOTIFY_CREATE,
    STORE_OP_NOTIFY_DELETE,
    STORE_OP_NOTIFY_MARK,
    STORE_OP_WEBHOOK_CREATE,
    STORE_OP_WEBHOOK_DELETE,
    STORE_OP_SWEEP_CREATE,
    STORE_OP_SWEEP_CANCEL,
    STORE_OP_METRICS_PURGE,
    STORE_OP_NOTIFY_PURGE,
    STORE_OP_WEBHOOK_SUBMIT, /* u.submit with its replay_* fields */
    STORE_OP_TEAM_CREATE,
    STORE_OP_TEAM_UPDATE,
    STORE_OP_TEAM_DELETE,
    STORE_OP_NODE_FAILURE,
    STORE_OP_NODE_QUARANTINE,
    STORE_OP_NODE_RELEASE,
} store_op_kind;

/*
 * One queued write. It lives on the caller's stack: the caller blocks in
 * store_writer_run() until the writer has committed (or failed) the group that
 * holds it, so the borrowed inputs stay valid for the whole operation.
 */
typedef struct store_op {
    struct store_op *next;
    store_op_kind kind;
    ty_err result;
    sem_t done;
    /* Effects of the op, applied only once the group committed (see store_op_moved()). */
    uint64_t new_pending;           /* jobs inserted in PENDING */
    int64_t moved[JOB_STATE_COUNT]; /* net change of the number of jobs in each state */
    int wrote_events;               /* job_events rows written: the change hook is due */
    int wrote_metrics;              /* metric points written: the metrics hook is due */
    union {
        struct {
            const store_job_new *jobs;
            size_t n;
            const char *idem_key;
            const unsigned char *body_hash;
            store_job *out; /* n entries, allocated by the caller; the writer fills
                               seq, id, state and times */
            int replayed;
            int64_t first_seq; /* on replay: the jobs of the first call */
            int64_t njobs;
            /* STORE_OP_WEBHOOK_SUBMIT: the delivery's replay key (hook, 32-byte digest),
             * kept until replay_expires_ms (wall clock) */
            const char *replay_hook;
            const unsigned char *replay_digest;
            int64_t replay_expires_ms;
        } submit;
        struct {
            const char *id;
            store_decide_fn decide;
            void *ud;
            const char *reason, *message;
            int want_out;
            store_job *out;    /* new, written by the writer; the caller keeps or frees it */
            int decide_failed; /* result is decide()'s own error */
        } transition;
        struct {
            store_update *u; /* n entries, borrowed; the writer sets their results */
            size_t n;
        } update;
        struct {
            const char *name;
            unsigned scopes;
            const unsigned char *hash;
            const char *team;
        } token;
        struct {
            const store_team *team; /* create, update */
            const char *name;       /* delete */
            const char *why;        /* delete: the reason of a TY_ECONFLICT (static) */
        } team;
        struct {
            const char *id;
            const char *const *names;
            size_t nnames;
            const store_metric_in *points;
            size_t n;
            store_metrics_refusal refusal; /* set by the writer with TY_ETOOLARGE */
        } metrics;
        struct {
            int64_t before_ms;  /* rows older than this go */
            int64_t max_rows;   /* deleted by this op at most */
            int64_t deleted;    /* out: metric points, or outbox rows */
            int more;           /* out: rows may be left */
        } purge;
        struct {
            const store_notify_sub *sub;     /* create: the subscription */
            const unsigned char *sealed;     /* create: the secret as stored */
            size_t sealed_len;
            const char *name;                /* delete */
            const store_delivery_mark *mark; /* mark */
        } notify;
        struct {
            const store_webhook *hook;          /* create: the registration */
            const unsigned char *sealed;        /* create: the secret as stored */
            size_t sealed_len;
            const char *name;                   /* delete */
        } webhook;
        struct {
            const store_node_failure *failure; /* NODE_FAILURE */
            int64_t prune_before_ms;           /* NODE_FAILURE: older rows go */
            const store_node_quarantine *q;    /* NODE_QUARANTINE */
            const char *node, *by;             /* NODE_RELEASE */
            int64_t now_ms;                    /* NODE_RELEASE */
        } node;
        struct {
            const store_sweep_new *in; /* create */
            store_job *jobs;           /* create: in->ntrials entries the writer fills */
            const char *id;            /* cancel */
            const char *message;       /* cancel */
            size_t cancelled;          /* cancel: trials moved */
        } sweep;
    } u;
} store_op;

/* Queues op, waits until its group is committed, returns op->result.
 * TY_ESHUTDOWN when store_close() has begun. */
ty_err store_writer_run(store *s, store_op *op);

/* Runs one purge op of kind (STORE_OP_METRICS_PURGE, STORE_OP_NOTIFY_PURGE): at most max_rows
 * (1..100,000) rows older than before_ms; *deleted (may be NULL) is what went, *more whether
 * rows may be left (0 on error). */
ty_err store_purge_run(store *s, int kind, int64_t before_ms, int max_rows, int64_t *deleted,
                       int *more);

/* Run by the writer inside the group's transaction and the op's savepoint.
 * An error return makes the writer roll the savepoint back. */
ty_err store_submit_apply(store *s, store_conn *w, store_op *op);
ty_err store_transition_apply(store *s, store_conn *w, store_op *op);
ty_err store_update_apply(store *s, store_conn *w, store_op *op);
ty_err store_webhook_apply(store *s, store_conn *w, store_op *op);
ty_err store_notify_apply(store *s, store_conn *w, store_op *op);
ty_err store_token_apply(store *s, store_conn *w, store_op *op);
ty_err store_metrics_apply(store *s, store_conn *w, store_op *op);
ty_err store_metrics_purge_apply(store *s, store_conn *w, store_op *op);
ty_err store_sweep_apply(store *s, store_conn *w, store_op *op);
ty_err store_team_apply(store *s, store_conn *w, store_op *op);
ty_err store_node_apply(store *s, store_conn *w, store_op *op);

/*
 * Inserts n jobs as a submission does (store_jobs.c), each PENDING with its
 * "Submitted" event, filling out[i]'s seq, id, state and times; writer only,
 * inside the caller's operation. A constraint is TY_EEXISTS or TY_EINVAL.
 */
ty_err store_jobs_insert(store *s, store_conn *w, const store_job_new *jobs, size_t n,
                         store_job *out);

/*
 * Job tokens (store_tokens.c), writer only, inside the transaction that
 * changes the job: store_job_token_put() revokes the job's live tokens and
 * stores hash for attempt; store_job_tokens_revoke() revokes them all (the
 * job ended).
 */
ty_err store_job_token_put(store_conn *w, int64_t job_seq, int attempt,
                           const unsigned char hash[32]);
ty_err store_job_tokens_revoke(store_conn *w, int64_t job_seq);

/* Records a transition that op wrote: the job counts change, and the change
 * hook is called, once the group holding op has committed. */
void store_op_moved(store_op *op, job_state from, job_state to);

/*
 * One job (store_jobs.c), shared by reads, transitions and the scheduler's
 * updates.
 *
 * store_job_load() reads the job with that id on c into *job (new strings);
 * TY_ENOTFOUND when there is none. store_job_load_state() reads only what a
 * move needs (seq, id, state, attempt, updated_ms; no strings), as the
 * scheduler's updates do for every change they write.
 *
 * store_job_move(), writer only, moves *job (as read in this transaction) to
 * `to`: writes the state, the attempt (+1 into STARTING), updated_ms and the
 * job_events row, and updates *job to match. A transition that
 * job_state_transition_allowed() refuses is TY_EINTERNAL, logged, with
 * nothing written.
 *
 * store_job_note(), writer only, writes a job_events row that leaves *job in
 * its state (from = to): something worth telling about a job that did not
 * move, e.g. why a PENDING job waits.
 */
ty_err store_job_load(store_conn *c, const char *id, store_job *job);
ty_err store_job_load_state(store_conn *c, const char *id, store_job *job);
ty_err store_job_move(store_conn *w, store_job *job, job_state to, const char *reason,
                      const char *message);
ty_err store_job_note(store_conn *w, const store_job *job, const char *reason,
                      const char *message);

/*
 * Secrets the server reads back, sealed at rest (store_seal.c): AES-256-GCM under the key
 * file next to the database, with aad (names the row) as associated data. *out is new;
 * unseal's is NUL-terminated past *outlen, to be wiped before free(). TY_EIO when the key
 * file cannot be created or read, or others may read it; unseal's TY_ESCHEMA when the
 * blob does not open (another key, another row, tampering).
 */
#define STORE_SECRET_MAX 1024
ty_err store_secret_seal(const store *s, const char *aad, const unsigned char *in, size_t n,
                         unsigned char **out, size_t *outlen);
ty_err store_secret_unseal(const store *s, const char *aad, const unsigned char *in, size_t n,
                           unsigned char **out, size_t *outlen);
/*
 * The same with the key read once for many values (a submission's secrets, a job's): a
 * zeroed sealer reads the key file on its first use; store_sealer_done() wipes it. Values up
 * to STORE_SEALED_MAX bytes (a job's env value is at most 32 KiB).
 */
#define STORE_SEALED_MAX 32768
typedef struct store_sealer {
    unsigned char key[32];
    int loaded;
} store_sealer;
ty_err store_sealer_seal(const store *s, store_sealer *k, const char *aad,
                         const unsigned char *in, size_t n, unsigned char **out, size_t *outlen);
ty_err store_sealer_open(const store *s, store_sealer *k, const char *aad,
                         const unsigned char *in, size_t n, unsigned char **out, size_t *outlen);
void store_sealer_done(store_sealer *k);

/*
 * Seals a job's secret env values (store_secrets.c), writer only, inside the transaction that
 * inserts job `id` (seq job_seq); k as store_sealer_seal().
 */
ty_err store_job_secrets_put(const store *s, store_conn *w, store_sealer *k, int64_t job_seq,
                             const char *id, const store_env_secret *v, size_t n);

/*
 * Reads the one row sql (its ?1 bound to name) returns: into item through row, and its sealed
 * secret, column col, into *blob (new, *bloblen bytes). TY_ENOTFOUND when there is no row,
 * TY_ESCHEMA when the column is empty.
 */
ty_err store_read_sealed_row(store *s, const char *sql, const char *name, int col,
                             store_row_fn row, void *item, unsigned char **blob, size_t *bloblen);

/* ---- read connections ---------------------------------------------------- */

/* Borrows a read connection, waiting while all are busy. */
store_conn *store_reader_acquire(store *s);
void store_reader_release(store *s, store_conn *c);
/* Brackets several statements on a read connection in one read transaction,
 * so that they all see the same snapshot. */
ty_err store_read_begin(store_conn *c);
void store_read_end(store_conn *c);
/* Runs sql, a query of one row and one integer column (NULL reads as 0), on a
 * read connection. */
ty_err store_read_int64(store *s, const char *sql, int64_t *out);

/* ---- schema -------------------------------------------------------------- */

/* Brings the database on db (a read-write connection) to store_schema_version().
 * TY_ESCHEMA with a message in err when it is newer, foreign or broken. */
ty_err store_schema_migrate(sqlite3 *db, char *err, size_t errlen);
/* The same, stopping at version `target` (1..store_schema_version()): lets the
 * tests build a database as an older binary left it. */
ty_err store_schema_migrate_to(sqlite3 *db, int target, char *err, size_t errlen);

/* ---- job ids ------------------------------------------------------------- */

/*
 * Ids are 26 characters of the lower-case Crockford base32 alphabet: a 48-bit
 * millisecond timestamp (10 characters) then 80 bits (16 characters) that are
 * random at the first id of each millisecond and incremented by one for every
 * further id in the same millisecond. Ids are therefore strictly increasing in
 * generation order, which the store relies on (see store_list.c).
 */
typedef struct store_idgen {
    int64_t ms;   /* timestamp of the last id; -1 before the first */
    uint64_t rhi; /* high 16 bits of the 80-bit suffix */
    uint64_t rlo; /* low 64 bits */
} store_idgen;

#define STORE_ID_MAX_MS ((INT64_C(1) << 48) - 1)

void store_idgen_init(store_idgen *g);
/* Makes every later id greater than `id` (a stored id); ignores malformed input. */
void store_idgen_observe(store_idgen *g, const char *id);
/* The next id, at now_ms or (when the clock is behind the last id) at the last
 * id's millisecond; *ms is the timestamp encoded in it. TY_EIO if the RNG fails. */
ty_err store_idgen_next(store_idgen *g, int64_t now_ms, char id[STORE_ID_LEN + 1], int64_t *ms);
/* Encodes (ms, 80-bit suffix); ms must be within 0..STORE_ID_MAX_MS. */
void store_id_encode(int64_t ms, uint64_t rhi, uint64_t rlo, char out[STORE_ID_LEN + 1]);
/* Decodes an id; 0 on success, -1 when it is not 26 valid characters. */
int store_id_decode(const char *id, int64_t *ms, uint64_t *rhi, uint64_t *rlo);

/* ---- statements exposed for the query-plan tests ------------------------- */

/* The SQL texts of the read paths, NULL-terminated, for the query-plan tests. */
extern const char *const store_list_sql[];
extern const char *const store_jobs_sql[];
extern const char *const store_sched_sql[];
extern const char *const store_metrics_sql[];

/* ---- the store ----------------------------------------------------------- */

struct store {
    char *path;
    store_options opt;

    /* Writer: the queue (qmu) and the thread that drains it. */
    store_conn writer;
    pthread_t writer_thread;
    int writer_started;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    store_op *qhead, *qtail;
    size_t qlen;
    int stopping;
    /* Touched by the writer thread only. */
    store_idgen idgen;
    int idgen_checked; /* the generator was synced with the table in this group */
    int64_t last_purge_ms;
    int wal_pages;     /* WAL size after the last commit (wal hook) */
    int ckpt_asked_at; /* wal_pages when the checkpointer was last asked */

    /* Background checkpoints on their own connection. */
    sqlite3 *ckpt_db;
    pthread_t ckpt_thread;
    int ckpt_started;
    pthread_mutex_t ckmu;
    pthread_cond_t ckcv;
    int ckpt_wanted;
    int ckpt_stop;

    /* Read pool. */
    store_conn *readers;
    int nreaders;
    int *free_readers; /* stack of indexes into readers */
    int nfree;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;

    /* Statistics (smu). */
    pthread_mutex_t smu;
    /* Fault injection (smu; store_fail_writes()): transactions to let through, then to fail. */
    int fail_skip, fail_count;
    ty_err fail_err;
    uint64_t jobs_by_state[JOB_STATE_COUNT];
    uint64_t jobs_submitted_total;
    uint64_t submits_cancels; /* store_submits_cancels() */
    uint64_t commits_total;
    ty_histogram commit_seconds;
    ty_histogram commit_batch_ops;

    /* Called by the writer after a commit that wrote job events (qmu). */
    void (*change_hook)(void *ud);
    void *change_hook_ud;
    /* Called by the writer after a commit that stored metric points (qmu). */
    void (*metrics_hook)(void *ud);
    void *metrics_hook_ud;
    /* Called by the writer after a commit that moved a job into a terminal state, which
     * may have queued notification deliveries (qmu). */
    void (*notify_hook)(void *ud);
    void *notify_hook_ud;

    /* Test hook: while set, the writer takes no new group (see store_test_hold_writer). */
    int hold_writer;
};

/* Test hooks. While held, queued operations wait; releasing lets the writer
 * fold everything queued into one group. */
void store_test_hold_writer(store *s, int hold);
/* Number of operations waiting in the queue. */
size_t store_test_queued(store *s);
/* Lowers store_list.c's limits (process-wide; 0 restores the default): the
 * number of name_prefix seqs gathered in memory and the steps per listing. */
void store_test_list_limits(size_t gather, long budget);

#endif
