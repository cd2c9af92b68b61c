/*
 * store_int.h - internals shared by the files of store/ (not a public API).
 *
 *   store.c         connections, the read pool, the writer thread (group commit),
 *                   the checkpointer, ping and statistics
 *   store_schema.c  the versioned migrations
 *   store_id.c      time-ordered job ids
 *   store_jobs.c    submit, get, events, transitions (the writer side of jobs)
 *   store_list.c    the filtered, keyset-paginated job listing
 *   store_tokens.c  API tokens
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

/* Maps an SQLite result code to ty_err. A unique or primary key constraint is
 * TY_EEXISTS, any other constraint TY_EINVAL. */
ty_err store_sqlite_err(int rc);
/* Makes room for element n of a growing array of `elem`-byte items that
 * holds *cap of them. Returns the array (perhaps moved), or NULL when out of
 * memory, leaving arr as it was. */
void *store_array_grow(void *arr, size_t *cap, size_t n, size_t elem);

/* Binds a text argument that stays valid until the statement is reset; NULL binds SQL NULL. */
int store_bind_text(sqlite3_stmt *st, int idx, const char *text);

/* A new NUL-terminated copy of a text column; "" for NULL. NULL when out of memory. */
char *store_column_dup(sqlite3_stmt *st, int col);

/* The columns store_job_from_row() reads, in its order. */
#define STORE_JOB_COLUMNS                                                                          \
    "seq, id, name, queue, priority, state, attempt, created_ms, updated_ms, spec"

/* Fills *j (new strings) from a row of STORE_JOB_COLUMNS. */
ty_err store_job_from_row(sqlite3_stmt *st, store_job *j);

/* ---- the writer's operations --------------------------------------------- */

typedef enum store_op_kind {
    STORE_OP_PING,
    STORE_OP_SUBMIT,
    STORE_OP_TRANSITION,
    STORE_OP_TOKEN_CREATE,
    STORE_OP_TOKEN_REVOKE,
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
    /* Effects on the in-memory job counts; applied only once the group committed. */
    uint64_t new_pending;           /* jobs inserted in PENDING */
    job_state moved_from, moved_to; /* a transition (JOB_STATE_NONE when none) */
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
            const char *name;
            unsigned scopes;
            const unsigned char *hash;
        } token;
    } u;
} store_op;

/* Queues op, waits until its group is committed, returns op->result.
 * TY_ESHUTDOWN when store_close() has begun. */
ty_err store_writer_run(store *s, store_op *op);

/* Run by the writer inside the group's transaction and the op's savepoint.
 * An error return makes the writer roll the savepoint back. */
ty_err store_submit_apply(store *s, store_conn *w, store_op *op);
ty_err store_transition_apply(store *s, store_conn *w, store_op *op);
ty_err store_token_apply(store *s, store_conn *w, store_op *op);

/* ---- read connections ---------------------------------------------------- */

/* Borrows a read connection, waiting while all are busy. */
store_conn *store_reader_acquire(store *s);
void store_reader_release(store *s, store_conn *c);

/* ---- schema -------------------------------------------------------------- */

/* Brings the database on db (a read-write connection) to store_schema_version().
 * TY_ESCHEMA with a message in err when it is newer, foreign or broken. */
ty_err store_schema_migrate(sqlite3 *db, char *err, size_t errlen);

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
    uint64_t jobs_by_state[JOB_STATE_COUNT];
    uint64_t jobs_submitted_total;
    uint64_t commits_total;
    ty_histogram commit_seconds;
    ty_histogram commit_batch_ops;

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
