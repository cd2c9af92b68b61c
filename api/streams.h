/*
 * streams.h - the places of the followed streams: how many long-lived
 * responses may be open at once, in all and per token.
 *
 * A followed stream (GET /v1/events?follow=true, GET /v1/jobs/{id}/events?
 * follow=true, GET /v1/jobs/{id}/logs?follow=true) holds its connection, and
 * the connection's thread, for as long as its client keeps it open: hours.
 * Connections are bounded (--max-connections), so without a bound of their own
 * streams could take every connection the server allows, and every other
 * request (a submission) would be refused at the connection limit. So each
 * stream first takes a place here, before anything of it is allocated:
 *
 *   total      places in all; server/main.c gives half of --max-connections,
 *              so the other half stays for submissions, reads and the
 *              operations reserve;
 *   per_token  places one principal (api_principal.name: a token's name) may
 *              hold at once, so that one client cannot take the total either
 *              (--max-streams-per-token, default 32).
 *
 * A request past either is refused (api_need_stream_place(): 429
 * too-many-streams with Retry-After) and counted by the limit that refused it.
 * A place is given back by api_stream_place_release(), which the stream's
 * free() calls: server/ calls free() exactly once however the stream ends
 * (its end, the client gone, the server stopping, a response never sent), and
 * release is idempotent on its place, so a place is given back exactly once.
 *
 * Memory: one entry per principal holding a place (its name copied), freed
 * when its last place is given back; at most `total` entries.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef TY_API_STREAMS_H
#define TY_API_STREAMS_H

#include <stdint.h>

#include "common/ty_error.h"

/* Seconds a refused client is told to wait (Retry-After). */
#define API_STREAMS_RETRY_AFTER "5"

typedef struct api_streams api_streams;
struct api_streams_entry;

/* The place one stream holds. Zero-initialize; it lives in the stream's own state. */
typedef struct api_stream_place {
    api_streams *owner;              /* NULL: holds no place */
    struct api_streams_entry *entry; /* its principal's count */
} api_stream_place;

/* Which limit refused a stream. */
typedef enum api_streams_limit {
    API_STREAMS_PER_TOKEN = 0,
    API_STREAMS_TOTAL = 1,
} api_streams_limit;

typedef struct api_streams_stats {
    unsigned total;                  /* the limits */
    unsigned per_token;
    unsigned open;                   /* places held now */
    uint64_t refused[2];             /* refusals since start, by api_streams_limit */
} api_streams_stats;

/*
 * New accounting with no place held. total and per_token are at least 1
 * (TY_EINVAL otherwise). TY_ENOMEM. *out is new.
 */
ty_err api_streams_new(unsigned total, unsigned per_token, api_streams **out);
/* Frees the accounting; every place must have been given back. Accepts NULL. */
void api_streams_free(api_streams *s);

/*
 * Takes a place for a stream of principal `who` (borrowed; NULL counts as "").
 * TY_OK: *place holds it (it held none before). TY_EAGAIN: a limit is reached;
 * *which says which (the per-token one when both are), the refusal is
 * counted and *place is untouched. TY_ENOMEM (a new principal's entry).
 */
ty_err api_streams_take(api_streams *s, const char *who, api_stream_place *place,
                        api_streams_limit *which);
/* Gives back the place *place holds, if any; *place then holds none. Accepts NULL. */
void api_stream_place_release(api_stream_place *place);
/* Moves the place from *from (which then holds none) to *to (which must hold none). */
void api_stream_place_move(api_stream_place *to, api_stream_place *from);

/* The limits and counts now, for /metrics. Accepts NULL (all zero). */
void api_streams_get_stats(api_streams *s, api_streams_stats *out);
/* Places held by principal who now (0 when none). */
unsigned api_streams_held(api_streams *s, const char *who);

#endif
