/*
 * spec.h - strict decoding of JSON request bodies, and validation plus
 * normalization of job specs (the rules of the API contract and DESIGN.md).
 *
 * Decoding (spec_decode) is the 400 layer: the bytes must be one JSON value
 * in valid UTF-8, without NUL characters, duplicate keys, trailing data or
 * nesting deeper than SPEC_MAX_DEPTH. A scalar is valid JSON: that it is not
 * an object is the validator's 422 at "$". Numbers too large for their C
 * type are not a decoding error: an integer beyond int64 is clamped to
 * INT64_MAX/INT64_MIN and a real beyond double to +-1e308, so that the
 * validator reports them against their field ("must be between ...") as a
 * 422 like any other out-of-range value.
 *
 * Validation (spec_job, spec_batch) is the 422 layer: it walks the whole
 * input once, records EVERY offending field with its JSON path ("$" is the
 * body; "$.workers.count", "$.labels.team", "$.jobs[3].image") and, when
 * nothing is wrong, builds the normalized spec: every default filled in, keys
 * in one fixed order (the order of the contract), label and env keys sorted,
 * explicit nulls ("image": null, "gpu": null, "timeout_seconds": null) for
 * absent optional values. Normalizing a normalized spec gives the same spec (a stored one
 * needs its secret env values again: spec_secrets_take() took them out).
 */
#ifndef TY_API_SPEC_H
#define TY_API_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

#define SPEC_MAX_DEPTH 64    /* deepest nesting of arrays/objects in a body */
#define SPEC_MAX_ERRORS 1000 /* errors listed in one response; more are counted */

#define SPEC_MAX_NAME 63
#define SPEC_MAX_LABELS 64
#define SPEC_MAX_IMAGE 1024
#define SPEC_MAX_COMMAND_ITEMS 256
#define SPEC_MAX_ARGS_ITEMS 1024
#define SPEC_MAX_ARG_BYTES 4096
#define SPEC_MAX_ENV 256
#define SPEC_MAX_ENV_VALUE 32768
#define SPEC_MAX_QUANTITY 64
#define SPEC_MAX_WORKERS 4096
#define SPEC_MAX_GPUS 16
#define SPEC_MAX_VOLUMES 16
#define SPEC_MAX_MOUNT 1024
#define SPEC_MAX_PRIORITY 1000000
#define SPEC_MAX_RESTARTS 100
#define SPEC_MAX_BACKOFF 3600
#define SPEC_MAX_SECONDS 31536000 /* one year: timeout_seconds, ttl_seconds_after_finished */
#define SPEC_DEFAULT_TTL 604800   /* one week */

/*
 * Decodes body[0..len) (may contain NUL bytes). On TY_OK *out is new. On
 * TY_EINVAL msg holds a one-line reason with the line and column where
 * decoding stopped (jansson's words, or the nesting limit). TY_ENOMEM.
 */
ty_err spec_decode(const char *body, size_t len, json_t **out, char *msg, size_t msglen);

/*
 * Validation errors: a list of {"path", "message"} objects, each pair once
 * (a query parameter repeated with the same bad value is one error).
 */
typedef struct spec_errors {
    json_t *list; /* new array, at most SPEC_MAX_ERRORS entries */
    json_t *seen; /* new object: a key "path\0message" for every error counted */
    size_t count; /* every distinct error found, listed or not */
} spec_errors;

/* TY_ENOMEM when the list cannot be allocated. */
ty_err spec_errors_init(spec_errors *e);
/* Releases the list (unless stolen: set e->list = NULL first). Accepts NULL. */
void spec_errors_free(spec_errors *e);
/*
 * Appends one error (path and message copied) unless the same path and
 * message were added before; then nothing changes. TY_ENOMEM.
 */
ty_err spec_errors_add(spec_errors *e, const char *path, const char *message);

/*
 * The largest rank the backend jobs run on could ever place, as plain numbers: server/ fills
 * them from the backend at start (api/ never asks a backend). A spec whose rank asks for more
 * is refused (422) at the field, with the size it was measured against:
 *   $.resources.cpu: 64 CPUs requested per rank, this machine has 2
 *   $.resources.gpu.count: 16 GPUs of type a100 requested per rank, the largest a100 node has 8
 * A rank asking for a GPU type listed in `types` is measured by that entry alone; any other
 * rank by `any`. Every number is "not known, not checked" when 0, so a zeroed spec_limits
 * checks nothing.
 */
typedef struct spec_rank_limit {
    const char *gpu_type;  /* the GPU type a rank asks for; NULL: any rank */
    int64_t cpu_millis;    /* CPUs x 1000 */
    int64_t memory_bytes;
    int gpus;              /* GPUs per rank */
} spec_rank_limit;

typedef struct spec_limits {
    const char *where;            /* what `any` measures, for messages: "this machine" */
    spec_rank_limit any;          /* every rank (gpu_type NULL) */
    const spec_rank_limit *types; /* ranks asking for one GPU type: "the largest <type> node" */
    size_t ntypes;
} spec_limits;

/*
 * How a spec is validated beyond its own rules (spec_job_opts, spec_batch_opts).
 *
 * Reserved labels: keys under trainyard.io/ (and any subdomain of it, such as
 * param.trainyard.io/), and "webhook" and "commit", are written by the server only (its
 * sweeps' and webhooks' labels, which tell where a job came from). In a client's spec each is
 * a 422 "reserved for the server" at $.labels["<key>"]. The server's own paths either add their
 * labels to the normalized spec afterwards (spec_add_server_labels), or name the keys they set
 * in the input in server_labels (a webhook's "webhook" and "commit").
 */
typedef struct spec_opts {
    const spec_limits *limits;        /* NULL: no backend limit is checked */
    const char *const *server_labels; /* NULL-terminated reserved keys the server set in the
                                         input itself; NULL: none */
    const char *no_secrets;           /* non-NULL: a secret env entry is refused (422 at
                                         $.env.<NAME>.secret) with this message, for specs
                                         that are stored as written (a webhook's template) */
} spec_opts;

/* The labels a webhook delivery sets on its job: {"webhook", "commit", NULL}. */
extern const char *const spec_webhook_labels[];

/* 1 when a label key is reserved for the server (see spec_opts). */
int spec_is_reserved_label(const char *key, size_t len);

/*
 * Validates one job spec `in` (borrowed) found at JSON path `path` (e.g. "$").
 * TY_OK: no error, *out is the new normalized spec. TY_EINVAL: errors were
 * appended to errs, *out untouched. TY_ENOMEM. spec_job() is spec_job_opts()
 * with opts NULL: a client's spec, no backend limits.
 */
ty_err spec_job(const json_t *in, const char *path, json_t **out, spec_errors *errs);
ty_err spec_job_opts(const json_t *in, const char *path, const spec_opts *opts, json_t **out,
                     spec_errors *errs);

/*
 * Validates a batch body {"jobs": [spec, ...]} with 1..max_jobs specs.
 * TY_OK: *out is a new array of normalized specs in input order. TY_EINVAL:
 * errors appended (paths "$.jobs", "$.jobs[3].image", ...). TY_ENOMEM.
 */
ty_err spec_batch(const json_t *in, size_t max_jobs, json_t **out, spec_errors *errs);
ty_err spec_batch_opts(const json_t *in, size_t max_jobs, const spec_opts *opts, json_t **out,
                       spec_errors *errs);

/*
 * Adds the server's labels (borrowed: an object of strings) to a normalized spec (changed in
 * place; its labels stay sorted, a key already there takes the server's value). TY_EINVAL when
 * a key or value is not a valid label; TY_ETOOLARGE when the spec would have more than
 * SPEC_MAX_LABELS labels (nothing is changed then); TY_ENOMEM.
 */
ty_err spec_add_server_labels(json_t *spec, const json_t *labels);

/*
 * Secret env values. An env entry is a string (a plain value) or an object
 * {"value": "...", "secret": true|false}; "secret": false normalizes to the plain string, a
 * secret to {"value": "...", "secret": true}. A secret value must never be stored in a spec
 * nor returned: spec_secrets_take() moves every secret value of a normalized spec (changed in
 * place) out, leaving {"value": null, "secret": true}, which is what the API stores and
 * returns. *secrets is a new object {NAME: value} in key order, or NULL when the spec has no
 * secret (secrets may be NULL: the values are dropped, e.g. for a stored sweep body whose
 * template env has the same forms). TY_ENOMEM (the spec may be half redacted then: drop it).
 */
ty_err spec_secrets_take(json_t *spec, json_t **secrets);

/* Syntax checks shared with the query parser of GET /v1/jobs. Arguments borrowed. */
int spec_is_dns_label(const char *s, size_t len);
int spec_is_label_key(const char *s, size_t len);
int spec_is_label_value(const char *s, size_t len);

#endif
