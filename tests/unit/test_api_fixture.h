/*
 * test_api_fixture.h - shared by the handler tests of api/: a real store in a
 * temporary directory, an api_ctx around it, and a way to call a route's
 * handler the way server/ does, checking every response against the OpenAPI
 * document embedded in ty_api (so the unit tests hold the code to the
 * contract, response by response). On request, the real scheduler runs the
 * jobs on the real local backend: every rank is a process (`sh -c SCRIPT`)
 * whose output is its log.
 */
#ifndef TY_TEST_API_FIXTURE_H
#define TY_TEST_API_FIXTURE_H

#include <jansson.h>

#include "api/api.h"
#include "tests/support/oas.h"

/* Ranks the local backend of fx_sched_start() runs at once. */
#define FX_SLOTS 4

typedef struct fixture {
    char dir[64]; /* temporary directory, removed at teardown */
    store *store;
    api_ctx ctx;
    ty_counter_vec requests;
    ty_histogram duration;
    oas *doc;
    int streamed;     /* the last fx_call() answered with a stream */
    int stream_error; /* ... and its read() returned -1 */
    backend *backend; /* with fx_sched_start() */
} fixture;

/* cmocka group/test setup and teardown; *state is the fixture. */
int fx_setup(void **state);
int fx_teardown(void **state);

/* One request; unset members are NULL/0. */
typedef struct fx_req {
    const char *id;           /* the {id} value, substituted into the template */
    const char *content_type; /* default "application/json" when body is set */
    const char *idem;         /* Idempotency-Key */
    const char *body;         /* NUL-terminated unless body_len is set */
    size_t body_len;
    const api_kv *query;
    size_t nquery;
    const char *principal; /* default "tester" */
    const char *team;      /* set: the principal is a read and submit token of this team, not
                              an admin (default: an admin of the default team) */
    int no_content_type;   /* send no Content-Type even with a body */
} fx_req;

/*
 * Calls the handler api_routes[] names for method + template, fills *resp
 * (free it with api_resp_free), checks the response against openapi.yaml
 * (failing the test when it does not conform) and returns its JSON body
 * (new) or NULL when it has none or is not JSON. A streamed response is read
 * to its end (or its error, see f->stream_error) into resp->body, and its
 * stream freed, as server/ would.
 */
json_t *fx_call(fixture *f, const char *method, const char *tmpl, const fx_req *r, api_resp *resp);

/* Fails the test unless resp is a problem with this status and code. */
void fx_expect_problem(const api_resp *resp, const json_t *body, unsigned status, const char *code);
/* The value of a response header, or NULL. */
const char *fx_header(const api_resp *resp, const char *key);
/* Submits a minimal valid job (queue and labels_json may be NULL) and writes its id into id.
 * Its command is no program: it is for tests that run no scheduler. */
void fx_submit(fixture *f, const char *name, const char *queue, const char *labels_json,
               char id[STORE_ID_LEN + 1]);
/*
 * Writes to the store what the scheduler writes for a job: the transition
 * from -> to (no transition when equal), the record of `attempt` (0 and NULL
 * for none) and the restart count (-1 = unchanged). Fails the test unless the
 * update applies.
 */
void fx_sched_write(fixture *f, const char *id, job_state from, job_state to, int attempt,
                    const char *record, int restarts);

/* ---- the scheduler over the local backend --------------------------------- */

/*
 * Starts the real scheduler (scheduler/sched.h) over the local backend
 * (scheduler/local/local.h: FX_SLOTS slots, no GPU, its data directory inside
 * f->dir), every queue unlimited, and sets f->ctx.sched; fx_teardown() stops
 * both (what still runs is stopped).
 */
void fx_sched_start(fixture *f);
/*
 * Submits a job whose `workers` ranks each run `sh -c script` (with the
 * environment of DESIGN.md: RANK, TRAINYARD_ATTEMPT, ...; the working
 * directory is the job's own, shared by its ranks) and that may restart
 * `restarts` times without backoff. queue may be NULL. Writes its id into id.
 */
void fx_submit_sh(fixture *f, const char *queue, int workers, int restarts, const char *script,
                  char id[STORE_ID_LEN + 1]);
/* Waits until the job is in state `want`, failing the test when it ends in
 * another terminal state or after a minute. */
void fx_wait_state(fixture *f, const char *id, job_state want);

#endif
