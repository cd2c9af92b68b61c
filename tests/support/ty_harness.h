/*
 * ty_harness.h - integration-test harness: runs the real `trainyard` binary
 * on loopback and talks HTTP to it, checking every response against
 * openapi/openapi.yaml.
 *
 * A test program calls ty_harness_init(argc, argv) first: argv[1] is the
 * path of the `trainyard` binary and argv[2] the path of openapi.yaml (CTest
 * passes both). The server runs with a private temporary directory, its
 * stderr appended to a file there (so it can never block on a full pipe),
 * and an environment from which every TRAINYARD_* variable of the caller has
 * been removed. With TY_OAS_STRICT=1 in the environment, response bodies
 * are validated with OAS_STRICT: members a schema does not list are errors.
 *
 * Errors: functions return 0 on success and -1 on failure with a one-line
 * reason in err. The ty_req*() helpers fail the running cmocka test instead
 * of returning errors. Threads: the ty_server_*, ty_run and ty_req*()
 * functions belong to the main thread; ty_client_*, ty_http_do() and
 * ty_resp_*() may be used from any thread, one ty_client per thread.
 */
#ifndef TY_TEST_HARNESS_H
#define TY_TEST_HARNESS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tests/support/oas.h"

/* The admin token every server started by the harness gets, unless the
 * options ask for none. */
#define TY_TEST_ADMIN_TOKEN "ty_it_admin_4f1c2e9a7b3d5a60c8e2f1b9d7a3c5e1"

/* Sleeps ms milliseconds (polling loops of the tests). */
void ty_sleep_ms(int ms);
/* The monotonic clock in milliseconds, for deadlines; tests never assert on time. */
int64_t ty_now_ms(void);

/* Reads argv[1] (binary) and argv[2] (openapi.yaml), loads the document,
 * initializes libcurl. Call once, before any thread starts. */
int ty_harness_init(int argc, char **argv, char *err, size_t errlen);
/* Frees what ty_harness_init() set up and every server not yet freed (those
 * of failed tests); call once, after the last thread ended. */
void ty_harness_cleanup(void);
const char *ty_harness_binary(void);
/* The loaded document (borrowed). */
const oas *ty_harness_oas(void);
/* The path of openapi.yaml given to ty_harness_init(). */
const char *ty_harness_openapi_path(void);

/* ---- the server process -------------------------------------------------- */

typedef struct ty_server ty_server;

typedef struct ty_server_opts {
    int no_admin_token;      /* leave TRAINYARD_ADMIN_TOKEN unset */
    const char *const *args; /* extra arguments after "serve", NULL-terminated; may be NULL */
    const char *const *env;  /* extra "NAME=value" entries, NULL-terminated; may be NULL */
} ty_server_opts;

/*
 * Creates a temporary directory (data in <tmp>/data, database
 * <tmp>/data/trainyard.db) and starts `trainyard serve --listen 127.0.0.1:0
 * --db <db>` in it, waiting until the server logs its "listening" line. If
 * the server exits first, or does not listen within 30 s, the call fails
 * with the tail of its log. opts may be NULL. *out is new.
 */
int ty_server_start(const ty_server_opts *opts, ty_server **out, char *err, size_t errlen);
/* Creates the temporary directory only, for tests that prepare the database
 * before the first start (then call ty_server_restart). */
int ty_server_prepare(const ty_server_opts *opts, ty_server **out, char *err, size_t errlen);
/* Starts the server again on the same directory (after stop or kill). */
int ty_server_restart(ty_server *s, char *err, size_t errlen);
/* SIGTERM, then waits up to timeout_ms for the exit; *wstatus is the
 * waitpid() status. Fails (and kills the process) on timeout. */
int ty_server_stop(ty_server *s, int timeout_ms, int *wstatus, char *err, size_t errlen);
/* SIGKILL and reap. No-op when the server is not running. */
void ty_server_kill(ty_server *s);
/* Kills the server if it runs and removes the directory (kept when the
 * environment has TY_IT_KEEP=1). Accepts NULL. */
void ty_server_free(ty_server *s);

pid_t ty_server_pid(const ty_server *s);
int ty_server_port(const ty_server *s);
const char *ty_server_url(const ty_server *s); /* "http://127.0.0.1:PORT" */
const char *ty_server_dir(const ty_server *s); /* the data directory */
const char *ty_server_db(const ty_server *s);  /* the database file */
/* The server's stderr since its first start (new; free()). */
char *ty_server_log(const ty_server *s);

/*
 * Runs `trainyard <args...>` to completion with the harness's environment
 * plus env (NULL-terminated "NAME=value", may be NULL). *wstatus is the
 * waitpid() status; *out and *errout (new, NUL-terminated; may be NULL to
 * discard) hold stdout and stderr. The process is killed after timeout_ms,
 * which is an error.
 */
int ty_run(const char *const *args, const char *const *env, int timeout_ms, int *wstatus,
           char **out, char **errout, char *err, size_t errlen);

/* ---- HTTP ---------------------------------------------------------------- */

typedef struct ty_client ty_client;

/* A client with one reusable (keep-alive) connection to s, sending
 * token as its default bearer token (NULL: none). Returns new or NULL. */
ty_client *ty_client_new(const ty_server *s, const char *token);
void ty_client_free(ty_client *c);
/* Total number of TCP connections this client has opened. */
long ty_client_connects(const ty_client *c);

typedef struct ty_http_req {
    const char *method;
    const char *path;         /* with its query string */
    const char *token;        /* NULL: the client's default; "": no Authorization */
    const char *content_type; /* NULL: application/json when there is a body; "": none */
    const char *body;         /* NULL: no body */
    size_t body_len;          /* used when body_len_set, else strlen(body) */
    int body_len_set;
    const char *const *headers; /* extra "Name: value", NULL-terminated; may be NULL */
    int expect_100;             /* let libcurl send "Expect: 100-continue" for large bodies */
    int chunked;                /* send the body with Transfer-Encoding: chunked (no
                                   Content-Length), in 16 KiB chunks */
    int outside_contract;       /* an undocumented path or method: check only that the
                                   body is a problem+json document */
} ty_http_req;

typedef struct ty_header {
    char *name;
    char *value;
} ty_header;

typedef struct ty_http_resp {
    long status;
    char *body; /* NUL-terminated; body_len is authoritative */
    size_t body_len;
    json_t *json; /* the parsed body when it is JSON, else NULL */
    ty_header *headers;
    size_t nheaders;
} ty_http_resp;

enum {
    TY_HTTP_ETRANSPORT = -1, /* no response (connection refused, reset, timeout) */
    TY_HTTP_ECONTRACT = -2,  /* a response that does not conform to openapi.yaml */
};

/*
 * Sends req and fills *resp (zero it first; free with ty_resp_free). Checks
 * the response against the OpenAPI document (status, content type, body
 * schema, documented headers) and that it carries X-Request-Id. Returns 0,
 * TY_HTTP_ETRANSPORT (resp empty) or TY_HTTP_ECONTRACT (resp filled).
 */
int ty_http_do(ty_client *c, const ty_http_req *req, ty_http_resp *resp, char *err, size_t errlen);
void ty_resp_free(ty_http_resp *r);
/* First header with that name (case-insensitive), borrowed; NULL if absent. */
const char *ty_resp_header(const ty_http_resp *r, const char *name);

/* ---- concurrent submitters ----------------------------------------------- */

/* A job a load thread submitted and got 201 for. Its spec was
 * {"name": "load-<thread>-<seq>", "labels": {"load": <tag>, "thread": "<thread>",
 *  "seq": "<seq>"}, "image": "registry.example/worker:1.0", "command": ["train"],
 *  "workers": {"count": 1}}. */
typedef struct ty_acked {
    char id[32];
    int thread;
    int seq;
} ty_acked;

typedef struct ty_load ty_load;

/*
 * Starts nthreads threads, each with its own keep-alive client to s using
 * token, that POST /v1/jobs one after another until ty_load_stop() or until
 * the server stops answering (a transport error ends that thread). Every
 * response is checked against the contract; a non-conforming one, or a
 * status other than 201 and 503, is recorded as a violation. tag (a label
 * value) is copied. *out is new.
 */
int ty_load_start(const ty_server *s, const char *token, int nthreads, const char *tag,
                  ty_load **out, char *err, size_t errlen);
/* Waits until the threads together got at least n 201s, or timeout_ms
 * passed, or every thread ended; returns the number of 201s so far. */
size_t ty_load_wait_acked(ty_load *l, size_t n, int timeout_ms);
/* Asks the threads to stop and joins them. Idempotent. */
void ty_load_stop(ty_load *l);
/* After ty_load_stop(): the acknowledged jobs (borrowed), in no particular order. */
const ty_acked *ty_load_acked(const ty_load *l, size_t *n);
/* After ty_load_stop(): the first violation, or NULL. Other statuses seen are counted. */
const char *ty_load_violation(const ty_load *l);
size_t ty_load_other_statuses(const ty_load *l);
void ty_load_free(ty_load *l);

/* ---- cmocka helpers (main thread only) ----------------------------------- */

/* ty_http_do() that fails the running test (reporting the caller's line) on
 * any error; returns new. */
#define ty_reqx(c, req) ty_reqx_at(__FILE__, __LINE__, (c), (req))
/* A request with a JSON (or NULL) body and the client's token. */
#define ty_req(c, method, path, body) ty_req_at(__FILE__, __LINE__, (c), (method), (path), (body))
ty_http_resp *ty_reqx_at(const char *file, int line, ty_client *c, const ty_http_req *req);
ty_http_resp *ty_req_at(const char *file, int line, ty_client *c, const char *method,
                        const char *path, const char *body);
/* Frees a ty_reqx() result. Accepts NULL. */
void ty_resp_destroy(ty_http_resp *r);

/* Member of the response's JSON object as a string, or NULL. */
const char *ty_json_str(const json_t *obj, const char *key);

#endif
