/*
 * test_api_fixture.h - shared by the handler tests of api/: a real store in a
 * temporary directory, an api_ctx around it, and a way to call a route's
 * handler the way server/ does, checking every response against the OpenAPI
 * document embedded in ty_api (so the unit tests hold the code to the
 * contract, response by response).
 */
#ifndef TY_TEST_API_FIXTURE_H
#define TY_TEST_API_FIXTURE_H

#include <jansson.h>

#include "api/api.h"
#include "tests/support/oas.h"

typedef struct fixture {
    char dir[64]; /* temporary directory, removed at teardown */
    store *store;
    api_ctx ctx;
    ty_counter_vec requests;
    ty_histogram duration;
    oas *doc;
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
    int no_content_type;   /* send no Content-Type even with a body */
} fx_req;

/*
 * Calls the handler api_routes[] names for method + template, fills *resp
 * (free it with api_resp_free), checks the response against openapi.yaml
 * (failing the test when it does not conform) and returns its JSON body
 * (new) or NULL when it has none or is not JSON.
 */
json_t *fx_call(fixture *f, const char *method, const char *tmpl, const fx_req *r, api_resp *resp);

/* Fails the test unless resp is a problem with this status and code. */
void fx_expect_problem(const api_resp *resp, const json_t *body, unsigned status, const char *code);
/* The value of a response header, or NULL. */
const char *fx_header(const api_resp *resp, const char *key);
/* Submits a minimal valid job (queue and labels_json may be NULL) and writes its id into id. */
void fx_submit(fixture *f, const char *name, const char *queue, const char *labels_json,
               char id[STORE_ID_LEN + 1]);

#endif
