/*
 * rendezvous.h - how the ranks of a gang find each other and form the ring that
 * comm.c runs its collectives over, admitting only ranks that know the gang's secret.
 *
 * Rendezvous. Rank 0 listens on MASTER_PORT; every other rank connects, proves it
 * knows the secret, and says who it is and where it accepts its ring predecessor.
 * Once every rank has joined, rank 0 sends each the whole table of ring addresses;
 * then every rank connects to its ring successor and accepts its predecessor, both
 * links authenticated the same way.
 *
 * Handshake (every connection: rendezvous and ring). K is the secret
 * (comm_config.secret; empty when there is none), C the context string
 * RDV_CONTEXT, and a header is six big-endian u32 {magic, version, kind, world,
 * rank, port}.
 *   1. acceptor -> dialer  CHALLENGE header {kind CHALLENGE, rank of the acceptor,
 *                          port = the kind of link it accepts} || nonce_a (32 random bytes)
 *   2. dialer -> acceptor  HELLO header {kind REGISTER or RING, world, claimed rank,
 *                          port of its ring listener (REGISTER)} || nonce_d (32 random bytes)
 *                          || HMAC-SHA256(K, C || nonce_a || HELLO header)
 *   3. acceptor -> dialer  HMAC-SHA256(K, C || nonce_d || CHALLENGE header)
 * The acceptor checks the dialer's proof in constant time before it answers, so it
 * never signs anything for a stranger; the dialer checks the acceptor's proof over its
 * own nonce, so a stranger that listens first cannot pose as rank 0 or a ring peer. The
 * headers differ in kind, so neither proof can be reflected as the other. The secret
 * never travels.
 *
 * Strangers. A connection whose hello is not of this protocol, whose proof is wrong or
 * missing, or that has not finished its handshake RDV_HANDSHAKE_MS after it was accepted
 * (silent, or trickling bytes) is closed, and the acceptor goes on waiting for its real
 * peers within the same deadline. Handshakes run side by side (up to 64 at once), so
 * strangers delay no real rank's, and cost the gang nothing. Only a rank that proved the
 * secret can fail the rendezvous (another world size, a rank out of range or twice), as a
 * misconfigured gang must. A dialer that meets a listener that cannot prove the secret
 * closes and dials again until the deadline.
 *
 * Without a secret (secret_len 0) the same handshake runs with an empty key: anything
 * that speaks the protocol is admitted, as before this handshake existed.
 */
#ifndef TY_RUNTIME_RENDEZVOUS_H
#define TY_RUNTIME_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/comm.h"

/* The wire, for tests that play a stranger. */
#define RDV_MAGIC 0x54594352u /* "TYCR" */
#define RDV_VERSION 2u
#define RDV_CONTEXT "trainyard-rendezvous-v1"
#define RDV_HEADER_BYTES 24
#define RDV_NONCE_BYTES 32
#define RDV_MAC_BYTES 32
#define RDV_HOST_MAX 64
/* How long an acceptor gives a connection for its hello and proof, in all. */
#define RDV_HANDSHAKE_MS 2000

enum rdv_kind {
    RDV_REGISTER = 1,  /* hello of a rank joining rank 0 */
    RDV_TABLE = 2,     /* rank 0's answer: every rank's ring address */
    RDV_REJECT = 3,    /* rank 0's answer: the rendezvous failed, and why */
    RDV_RING = 4,      /* hello of a rank to its ring successor */
    RDV_CHALLENGE = 5, /* an acceptor's nonce */
};

/* Where a rank accepts its ring predecessor, as rank 0 saw it. */
typedef struct rdv_peer {
    char host[RDV_HOST_MAX]; /* numeric address */
    int port;
} rdv_peer;

/*
 * Rendezvous and ring set-up of rank cfg->rank in a gang of cfg->world > 1 ranks
 * (cfg checked by comm_init), before deadline (seconds on CLOCK_MONOTONIC); timeout_ms
 * is the bound the error messages name. On success peers[0..world) (the caller's) holds
 * every rank's ring address, *send_fd is the new connection to the ring successor and
 * *recv_fd the one from the predecessor (blocking sockets). Otherwise COMM_ESETUP or
 * COMM_ENOMEM with err, and both fds -1.
 */
comm_status rdv_form_ring(const comm_config *cfg, int timeout_ms, double deadline, rdv_peer *peers,
                          int *send_fd, int *recv_fd, char *err, size_t errlen);

#endif
