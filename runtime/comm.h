/*
 * comm.h - rendezvous and collectives for trainyard-worker ranks on CPU.
 *
 * Rendezvous (rendezvous.h): rank 0 listens on MASTER_PORT; every other rank
 * connects, proves it knows the gang's secret, says who it is and where it
 * listens; rank 0 answers with the whole table, and each rank connects to its
 * ring successor, that link authenticated the same way. A connection that
 * cannot prove the secret is closed and costs the gang nothing. Collectives run over that ring of TCP
 * connections: bandwidth-optimal ring reduce-scatter / all-gather (all-reduce is
 * the two in sequence), chunked and pipelined so both directions of every link
 * stay busy. They work for any world size and any element count.
 *
 * Sharding rule, used by every collective and by the trainer's parameter
 * shards: a vector of n elements is split into `world` contiguous shards; shard
 * r starts at comm_shard_offset(n, world, r) and has comm_shard_count(n, world, r)
 * elements (the first n % world shards have one element more).
 *
 * Summation order: element i of shard k is summed along the ring starting at
 * rank k+1, ((x[k+1] + x[k+2]) + ...) + x[k] (ranks modulo world). The result
 * is the same bits on every run for a given world size, and after an
 * all-reduce every rank holds the same bits.
 *
 * Ordering: collectives are executed in the order they are issued, on one
 * background thread per rank; every rank must issue the same sequence. The
 * *_start functions return at once, so gradients can travel while backward is
 * still computing; comm_wait() blocks until that operation is done. The
 * blocking functions are start + wait.
 *
 * Failure: a peer that closes its connection, or sends nothing for
 * timeout_ms while an operation waits for it, fails the operation and every
 * later one with COMM_ELOST; comm_error() then names the lost peer
 * ("rank 2 (127.0.0.1:41234) lost: connection reset"). Nothing here exits the
 * process.
 */
#ifndef TY_RUNTIME_COMM_H
#define TY_RUNTIME_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum comm_status {
    COMM_OK = 0,
    COMM_EINVAL,    /* bad argument */
    COMM_ENOMEM,
    COMM_ESETUP,    /* rendezvous failed (could not listen/connect in time) */
    COMM_ELOST,     /* a peer died, hung past the timeout, or sent garbage */
} comm_status;

typedef struct comm_config {
    int rank;                 /* 0 .. world-1 */
    int world;                /* >= 1 */
    const char *master_addr;  /* host or IP of rank 0 */
    int master_port;          /* rank 0 listens here */
    int timeout_ms;           /* peer silence / rendezvous bound; 0 -> 30000 */
    /* The gang's secret (borrowed until comm_init returns): every rank must hold the
       same bytes, and only connections that prove them with an HMAC challenge are
       admitted. NULL / 0: no secret, anything that speaks the protocol is admitted. */
    const unsigned char *secret;
    size_t secret_len;
} comm_config;

typedef struct comm comm;           /* opaque */
typedef struct comm_work comm_work; /* one issued operation, opaque */

/* Rendezvous and ring set-up. On success *out is new (free with comm_destroy). */
comm_status comm_init(const comm_config *cfg, comm **out, char *err, size_t errlen);
/* Stops the background thread, closes sockets. Accepts NULL. */
void comm_destroy(comm *c);

int comm_rank(const comm *c);
int comm_world(const comm *c);
/* Last error as text (static storage of c, "" when none). */
const char *comm_error(const comm *c);
/* Seconds spent inside collectives (waiting included) since init. */
double comm_seconds(const comm *c);

size_t comm_shard_offset(size_t n, int world, int rank);
size_t comm_shard_count(size_t n, int world, int rank);

/*
 * Asynchronous collectives on float32 buffers (borrowed until comm_wait
 * returns). *work is new; comm_wait() frees it and returns the op's status.
 *  reduce_scatter: in place; afterwards buf[shard(rank)] holds the sum over all
 *                  ranks of that slice; the rest of buf is unspecified.
 *  all_gather:     in place; each rank's buf[shard(rank)] is its input; afterwards
 *                  every rank's buf holds all shards.
 *  all_reduce:     in place sum.
 */
comm_status comm_reduce_scatter_start(comm *c, float *buf, size_t n, comm_work **work);
comm_status comm_all_gather_start(comm *c, float *buf, size_t n, comm_work **work);
comm_status comm_all_reduce_start(comm *c, float *buf, size_t n, comm_work **work);
comm_status comm_wait(comm *c, comm_work *work);

/* Blocking forms. */
comm_status comm_reduce_scatter(comm *c, float *buf, size_t n);
comm_status comm_all_gather(comm *c, float *buf, size_t n);
comm_status comm_all_reduce(comm *c, float *buf, size_t n);
/* Raw bytes from root to everyone (e.g. an ncclUniqueId, a config digest). */
comm_status comm_broadcast(comm *c, void *buf, size_t bytes, int root);
/* Sums an int64 across ranks (e.g. "does anyone want to stop?" votes). */
comm_status comm_all_reduce_i64(comm *c, int64_t *value);
comm_status comm_barrier(comm *c);

#endif
