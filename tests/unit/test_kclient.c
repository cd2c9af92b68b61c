/*
 * test_kclient.c - the Kubernetes API client against a libmicrohttpd server on loopback that
 * answers from a script: retries (429 with Retry-After, 5xx, refused connections), Status errors
 * as the v1.26 API server writes them (tests/fixtures/kubernetes-transcripts), Strict field
 * validation, watches with bookmarks and the 410 of a too-old resourceVersion, paging, the rate
 * limiter, connection reuse, renewal after a 401, and TLS with a CA and a client certificate.
 */
#define _GNU_SOURCE /* asprintf */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef TY_HAVE_GNUTLS
#include <gnutls/gnutls.h>
#endif

#include "scheduler/kube/kclient.h"

#define FIX TY_KUBECONFIG_FIXTURES
#define TRANSCRIPTS TY_TRANSCRIPTS_DIR

/* ---- the scripted server ----------------------------------------------------------------------*/

#define MAX_REPLIES 16
#define MAX_SEEN 64

typedef struct reply {
    int status;
    const char *hname[4], *hvalue[4];   /* response headers (Warning may repeat) */
    char *body;                         /* owned; NULL: empty */
    char **events;                      /* owned: a watch's event lines, one chunk each */
    size_t nevents;
    int hold;                           /* keep the watch open after its events */
} reply;

typedef struct seen {
    char method[8];
    char path[256];
    char query[1024];                   /* "&k=v&k=v&" (unescaped), for strstr */
    char ctype[64];
    char auth[256];
    char agent[64];
    char clen[16];                      /* Content-Length, "" when none */
    char accept[128];
    int client_cert;                    /* TLS: a client certificate the CA verifies */
} seen;

typedef struct server {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t lock;
    reply replies[MAX_REPLIES];
    int nreplies, next;
    seen seen[MAX_SEEN];
    int nseen;
    atomic_int connections;
    atomic_int stopping;
} server;

typedef struct stream {
    server *srv;
    reply r;                            /* events moved here from the script */
    size_t i;                           /* next event */
} stream;

static void reply_free(reply *r)
{
    free(r->body);
    for (size_t i = 0; i < r->nevents; i++)
        free(r->events[i]);
    free(r->events);
    memset(r, 0, sizeof(*r));
}

static void script(server *s, int status, const char *body)
{
    reply *r = &s->replies[s->nreplies++];
    assert_true(s->nreplies <= MAX_REPLIES);
    r->status = status;
    r->body = body ? strdup(body) : NULL;
}

static void script_header(server *s, const char *name, const char *value)
{
    reply *r = &s->replies[s->nreplies - 1];
    for (int i = 0; i < 4; i++)
        if (!r->hname[i]) {
            r->hname[i] = name;
            r->hvalue[i] = value;
            return;
        }
    fail_msg("too many headers");
}

/* Appends one chunk of a watch stream, as is (raw) or as an event line. */
static void script_chunk(server *s, const char *text, int raw)
{
    reply *r = &s->replies[s->nreplies - 1];
    r->events = realloc(r->events, (r->nevents + 1) * sizeof(char *));
    assert_non_null(r->events);
    assert_int_equal(asprintf(&r->events[r->nevents++], raw ? "%s" : "%s\n", text) > 0, 1);
}

static void script_event(server *s, const char *line)
{
    script_chunk(s, line, 0);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *st = cls;
    (void)pos;
    for (;;) {
        if (st->i < st->r.nevents) {
            const char *ev = st->r.events[st->i];
            size_t n = strlen(ev);
            if (n > max)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            memcpy(buf, ev, n);
            st->i++;
            return (ssize_t)n;      /* one event a chunk, as the API server writes them */
        }
        if (!st->r.hold || atomic_load(&st->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        usleep(20000);
    }
}

static void stream_free(void *cls)
{
    stream *st = cls;
    reply_free(&st->r);
    free(st);
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *k,
                                   const char *v)
{
    seen *sn = cls;
    size_t n = strlen(sn->query);
    (void)kind;
    snprintf(sn->query + n, sizeof(sn->query) - n, "%s=%s&", k, v ? v : "");
    return MHD_YES;
}

static void copy_header(struct MHD_Connection *c, const char *name, char *out, size_t len)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(out, len, "%s", v ? v : "");
}

static int verified_client_cert(struct MHD_Connection *c)
{
#ifdef TY_HAVE_GNUTLS
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned n = 0, status = 1;
    if (!ci || !ci->tls_session)
        return 0;
    gnutls_session_t sess = (gnutls_session_t)ci->tls_session;
    if (!gnutls_certificate_get_peers(sess, &n) || n == 0)
        return 0;
    return gnutls_certificate_verify_peers2(sess, &status) == 0 && status == 0;
#else
    (void)c;
    return 0;
#endif
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls)
{
    static int marker;
    server *s = cls;
    struct MHD_Response *resp;
    reply r = {0};
    seen *sn = NULL;
    enum MHD_Result ret;
    (void)version;
    (void)upload;
    if (!*con_cls) {
        *con_cls = &marker;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;       /* bodies are not checked here */
        return MHD_YES;
    }
    pthread_mutex_lock(&s->lock);
    if (s->nseen < MAX_SEEN)
        sn = &s->seen[s->nseen++];
    if (s->next < s->nreplies) {
        r = s->replies[s->next];
        memset(&s->replies[s->next++], 0, sizeof(reply));
    } else {
        r.status = 200;
        r.body = strdup("{\"kind\":\"Status\",\"status\":\"Success\"}\n");
    }
    if (sn) {
        snprintf(sn->method, sizeof(sn->method), "%s", method);
        snprintf(sn->path, sizeof(sn->path), "%s", url);
        snprintf(sn->query, sizeof(sn->query), "&");
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, sn);
        copy_header(c, "Content-Type", sn->ctype, sizeof(sn->ctype));
        copy_header(c, "Authorization", sn->auth, sizeof(sn->auth));
        copy_header(c, "User-Agent", sn->agent, sizeof(sn->agent));
        copy_header(c, "Content-Length", sn->clen, sizeof(sn->clen));
        copy_header(c, "Accept", sn->accept, sizeof(sn->accept));
        sn->client_cert = verified_client_cert(c);
    }
    pthread_mutex_unlock(&s->lock);

    if (r.events || r.hold) {
        stream *st = calloc(1, sizeof(*st));
        assert_non_null(st);
        st->srv = s;
        st->r = r;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, st,
                                                 stream_free);
    } else {
        size_t n = r.body ? strlen(r.body) : 0;
        resp = MHD_create_response_from_buffer(n, r.body ? r.body : (void *)"",
                                               r.body ? MHD_RESPMEM_MUST_FREE
                                                      : MHD_RESPMEM_PERSISTENT);
        r.body = NULL;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    for (int i = 0; i < 4 && r.hname[i]; i++)
        MHD_add_response_header(resp, r.hname[i], r.hvalue[i]);
    ret = MHD_queue_response(c, (unsigned)r.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    (void)c;
    (void)socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&s->connections, 1);
}

typedef struct tls_files {
    char *key, *cert, *trust;           /* PEM text, owned */
} tls_files;

static void server_start(server *s, const tls_files *tls)
{
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG;
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    if (tls) {
        s->d = MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, handler, s,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                MHD_OPTION_HTTPS_MEM_KEY, tls->key,
                                MHD_OPTION_HTTPS_MEM_CERT, tls->cert,
                                MHD_OPTION_HTTPS_MEM_TRUST, tls->trust, MHD_OPTION_END);
    } else {
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, handler, s,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                MHD_OPTION_END);
    }
    assert_non_null(s->d);
    s->port = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void server_stop(server *s)
{
    atomic_store(&s->stopping, 1);
    MHD_stop_daemon(s->d);
    for (int i = 0; i < MAX_REPLIES; i++)
        reply_free(&s->replies[i]);
    pthread_mutex_destroy(&s->lock);
}

/* ---- fixtures ---------------------------------------------------------------------------------*/

typedef struct env {
    char dir[64];
    server srv;
    ty_kubeconfig *kc;
    ty_kclient *c;
} env;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

/* A transcript's response body as the API server sends it (compact JSON + "\n"). */
static char *transcript_body(const char *file)
{
    char path[512], *text;
    json_error_t jerr;
    json_t *j;
    snprintf(path, sizeof(path), "%s/%s", TRANSCRIPTS, file);
    j = json_load_file(path, 0, &jerr);
    assert_non_null(j);
    text = json_dumps(json_object_get(json_object_get(j, "response"), "body"), JSON_COMPACT);
    json_decref(j);
    assert_non_null(text);
    char *out = NULL;
    assert_true(asprintf(&out, "%s\n", text) > 0);
    free(text);
    return out;
}

/* A transcript's watch events, one compact line each, scripted on the last reply. */
static size_t script_transcript_events(server *s, const char *file)
{
    char path[512];
    json_error_t jerr;
    json_t *j, *ev;
    size_t i, n;
    snprintf(path, sizeof(path), "%s/%s", TRANSCRIPTS, file);
    j = json_load_file(path, 0, &jerr);
    assert_non_null(j);
    json_t *events = json_object_get(json_object_get(j, "response"), "body");
    n = json_array_size(events);
    json_array_foreach(events, i, ev) {
        char *line = json_dumps(ev, JSON_COMPACT);
        script_event(s, line);
        free(line);
    }
    json_decref(j);
    return n;
}

static void write_kubeconfig(env *e, const char *scheme, const char *cluster_extra,
                             const char *user)
{
    char path[128];
    FILE *f;
    snprintf(path, sizeof(path), "%s/config", e->dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "current-context: t\n"
               "contexts: [{name: t, context: {cluster: c, user: u, namespace: ns}}]\n"
               "clusters:\n- name: c\n  cluster:\n    server: %s://127.0.0.1:%d\n%s"
               "users:\n- name: u\n  user:\n%s",
            scheme, e->srv.port, cluster_extra, user);
    fclose(f);
}

static void client_open(env *e, const ty_kclient_opts *o)
{
    char path[128], err[512] = "";
    snprintf(path, sizeof(path), "%s/config", e->dir);
    assert_int_equal(ty_kubeconfig_load(path, NULL, &e->kc, err, sizeof(err)), TY_OK);
    if (ty_kclient_new(e->kc, o, &e->c, err, sizeof(err)) != TY_OK)
        fail_msg("%s", err);
}

/* Options for tests: no rate limit, short backoffs. */
static void fast_opts(ty_kclient_opts *o)
{
    ty_kclient_opts_default(o);
    o->qps = 0;
    o->backoff_base_ms = 10;
    o->backoff_max_ms = 2000;
    o->max_retries = 3;
    o->timeout_ms = 10000;
    o->user_agent = "trainyard-test/1.0";
}

static int setup(void **state)
{
    env *e = calloc(1, sizeof(*e));
    ty_kclient_opts o;
    if (!e)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/ty-kclient-XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    server_start(&e->srv, NULL);
    write_kubeconfig(e, "http", "", "    token: test-token\n");
    fast_opts(&o);
    client_open(e, &o);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env *e = *state;
    char cmd[128];
    ty_kclient_free(e->c);
    ty_kubeconfig_free(e->kc);
    if (e->srv.d)
        server_stop(&e->srv);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    if (system(cmd) != 0)
        return -1;
    free(e);
    return 0;
}

static void reopen(env *e, const ty_kclient_opts *o)
{
    ty_kclient_free(e->c);
    ty_kubeconfig_free(e->kc);
    client_open(e, o);
}

#define JOBS "/apis/batch/v1/namespaces/ns/jobs"
#define JOB_BODY \
    "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"ty-1-a1\"}}"

/* ---- requests ---------------------------------------------------------------------------------*/

/* A create goes out with Strict field validation, JSON, the token and our User-Agent. */
static void test_create_strict(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    char err[512] = "";
    script(&e->srv, 201, "{\"kind\":\"Job\",\"metadata\":{\"name\":\"ty-1-a1\"}}\n");
    assert_int_equal(ty_kclient_request(e->c, "POST", JOBS, JOB_BODY, &r, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(r.code, 201);
    assert_int_equal(r.attempts, 1);
    assert_non_null(strstr(r.body, "ty-1-a1"));
    ty_kresp_clear(&r);
    assert_int_equal(ty_kclient_request(e->c, "PATCH", JOBS "/ty-1-a1?dryRun=All",
                                        "{\"spec\":{\"suspend\":false}}", &r, err, sizeof(err)),
                     TY_OK);
    ty_kresp_clear(&r);
    /* One pooled handle carries them all: what a request does not use is not left over from
     * the one before (the PATCH's method and body, the DELETE's method). */
    assert_int_equal(ty_kclient_request(e->c, "DELETE", JOBS "/ty-1-a1", NULL, &r, err,
                                        sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_int_equal(ty_kclient_request(e->c, "POST", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS "/ty-1-a1", NULL, &r, err,
                                        sizeof(err)), TY_OK);
    ty_kresp_clear(&r);

    seen *s = e->srv.seen;
    assert_int_equal(e->srv.nseen, 5);
    assert_int_equal(atomic_load(&e->srv.connections), 1);
    assert_string_equal(s[0].method, "POST");
    assert_string_equal(s[0].path, JOBS);
    assert_non_null(strstr(s[0].query, "&fieldValidation=Strict&"));
    assert_string_equal(s[0].ctype, "application/json");
    assert_string_equal(s[0].auth, "Bearer test-token");
    assert_string_equal(s[0].agent, "trainyard-test/1.0");
    assert_string_equal(s[1].method, "PATCH");
    assert_non_null(strstr(s[1].query, "&dryRun=All&"));
    assert_non_null(strstr(s[1].query, "&fieldValidation=Strict&"));
    assert_string_equal(s[1].ctype, "application/merge-patch+json");
    assert_string_equal(s[1].clen, "26");
    assert_string_equal(s[2].method, "DELETE");
    assert_string_equal(s[2].clen, "");
    assert_string_equal(s[2].ctype, "");
    assert_string_equal(s[3].method, "POST");
    assert_string_equal(s[3].clen, "0");
    assert_string_equal(s[4].method, "GET");
    assert_string_equal(s[4].clen, "");
    assert_string_equal(s[4].auth, "Bearer test-token");
    assert_null(strstr(s[4].query, "fieldValidation"));
}

/* 429 with Retry-After, then 201: one retry, and the caller sees the 201. */
static void test_429_retry_after(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    ty_kclient_stats st;
    char err[512] = "";
    script(&e->srv, 429, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
           "\"message\":\"Too many requests, please try again later.\","
           "\"reason\":\"TooManyRequests\",\"code\":429}\n");
    script_header(&e->srv, "Retry-After", "1");
    script(&e->srv, 201, "{}\n");
    assert_int_equal(ty_kclient_request(e->c, "POST", JOBS, JOB_BODY, &r, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(r.code, 201);
    assert_int_equal(r.attempts, 2);
    ty_kresp_clear(&r);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.retries, 1);
    assert_int_equal(e->srv.nseen, 2);
    /* Both attempts were sent Strict. */
    assert_non_null(strstr(e->srv.seen[1].query, "&fieldValidation=Strict&"));
}

/* A Retry-After that ends past the retry deadline ends the call at once instead of early. */
static void test_retry_after_past_deadline(void **state)
{
    env *e = *state;
    ty_kclient_opts o;
    ty_kresp r = {0};
    char err[512] = "";
    fast_opts(&o);
    o.retry_deadline_ms = 500;
    o.backoff_max_ms = 10000;
    reopen(e, &o);
    script(&e->srv, 503, "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"the server "
           "is currently unable to handle the request\",\"reason\":\"ServiceUnavailable\","
           "\"code\":503}\n");
    script_header(&e->srv, "Retry-After", "5");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                     TY_EAGAIN);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(r.reason, "ServiceUnavailable");
    assert_string_equal(err, "the server is currently unable to handle the request "
                             "(HTTP 503 ServiceUnavailable)");
    ty_kresp_clear(&r);
    assert_int_equal(e->srv.nseen, 1);
}

/* 500 twice, then 200. 501 is never retried; retries stop at max_retries. */
static void test_5xx_retries(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    ty_kclient_stats st;
    char err[512] = "";
    script(&e->srv, 500, "oops\n");
    script(&e->srv, 500, "oops\n");
    script(&e->srv, 200, "{\"kind\":\"Job\"}\n");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS "/a", NULL, &r, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(r.attempts, 3);
    ty_kresp_clear(&r);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.retries, 2);
    assert_int_equal(st.requests[TY_KVERB_GET][14], 2);        /* bucket of 500 */
    assert_int_equal(ty_kcode_at(14), 500);

    script(&e->srv, 501, "not implemented\n");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS "/a", NULL, &r, err, sizeof(err)),
                     TY_EIO);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(err, "GET " JOBS "/a: HTTP 501");
    ty_kresp_clear(&r);

    for (int i = 0; i < 4; i++)
        script(&e->srv, 502, "bad gateway\n");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS "/a", NULL, &r, err, sizeof(err)),
                     TY_EAGAIN);
    assert_int_equal(r.attempts, 4);                  /* 1 + max_retries (3) */
    assert_int_equal(r.code, 502);
    ty_kresp_clear(&r);
    assert_int_equal(e->srv.nseen, 3 + 1 + 4);
}

/* The API server's own Status bodies become messages a person can act on. */
static void test_status_errors(void **state)
{
    static const struct {
        const char *file;
        ty_err rc;
        long code;
        const char *reason, *msg;
    } cases[] = {
        {"06b-job-create-again-409.json", TY_EEXISTS, 409, "AlreadyExists",
         "jobs.batch \"created-twice\" already exists (HTTP 409 AlreadyExists)"},
        {"04b-job-invalid-single-error-422.json", TY_EINVAL, 422, "Invalid",
         "Job.batch \"invalid-job-one-error\" is invalid: spec.template.spec.containers[0]."
         "image: Required value (HTTP 422 Invalid)"},
        {"17a-no-token-403-anonymous.json", TY_EFORBIDDEN, 403, "Forbidden",
         "jobs.batch is forbidden: User \"system:anonymous\" cannot list resource \"jobs\" in "
         "API group \"batch\" in the namespace \"transcripts\" (HTTP 403 Forbidden)"},
        {"07a-get-missing-job-404.json", TY_ENOTFOUND, 404, "NotFound", NULL},
        {"02-job-unknown-fields-strict.json", TY_EINVAL, 400, "BadRequest", NULL},
        {"10d-list-continue-token-expired.json", TY_EAGAIN, 410, "Expired", NULL},
    };
    env *e = *state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ty_kresp r = {0};
        char err[1024] = "";
        char *body = transcript_body(cases[i].file);
        script(&e->srv, (int)cases[i].code, body);
        free(body);
        ty_err rc = ty_kclient_request(e->c, "POST", JOBS, JOB_BODY, &r, err, sizeof(err));
        if (rc != cases[i].rc || r.code != cases[i].code ||
            strcmp(r.reason, cases[i].reason) != 0 || r.attempts != 1)
            fail_msg("%s: %s, code %ld, reason %s: %s", cases[i].file, ty_strerror(rc), r.code,
                     r.reason, err);
        if (cases[i].msg)
            assert_string_equal(err, cases[i].msg);
        assert_null(strchr(err, '\n'));
        ty_kresp_clear(&r);
    }
}

/* Warning headers (what a non-Strict server says about dropped fields) reach the caller. */
static void test_warnings(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    char err[512] = "";
    script(&e->srv, 201, "{}\n");
    script_header(&e->srv, "Warning", "299 - \"unknown field \\\"spec.bogusSpecField\\\"\"");
    script_header(&e->srv, "Warning", "299 - \"unknown field \\\"bogusTopLevel\\\"\"");
    assert_int_equal(ty_kclient_request(e->c, "POST", JOBS, JOB_BODY, &r, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(r.nwarnings, 2);
    assert_string_equal(r.warnings[0], "299 - \"unknown field \\\"spec.bogusSpecField\\\"\"");
    assert_string_equal(r.warnings[1], "299 - \"unknown field \\\"bogusTopLevel\\\"\"");
    ty_kresp_clear(&r);
}

/* A refused connection is retried, then reported with curl's reason. */
static void test_connection_refused(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    ty_kclient_stats st;
    char err[512] = "";
    server_stop(&e->srv);
    e->srv.d = NULL;
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_EIO);
    assert_int_equal(r.attempts, 4);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(err, "GET http://127.0.0.1:"));
    ty_kresp_clear(&r);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.requests[TY_KVERB_GET][0], 4);      /* bucket 0: no answer */
    assert_int_equal(st.retries, 3);
}

/* Five requests in a row travel on one connection. */
static void test_keepalive(void **state)
{
    env *e = *state;
    char err[512] = "";
    for (int i = 0; i < 5; i++) {
        ty_kresp r = {0};
        assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                         TY_OK);
        ty_kresp_clear(&r);
    }
    assert_int_equal(e->srv.nseen, 5);
    assert_int_equal(atomic_load(&e->srv.connections), 1);
}

/* The token bucket: a full bucket lets `burst` requests through, the next one waits. */
static void test_rate_limit(void **state)
{
    env *e = *state;
    ty_kclient_opts o;
    ty_kclient_stats st;
    char err[512] = "";
    fast_opts(&o);
    o.qps = 0.5;    /* a token every 2 s: the fourth request finds the bucket empty */
    o.burst = 3;
    reopen(e, &o);
    for (int i = 0; i < 3; i++) {
        ty_kresp r = {0};
        assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                         TY_OK);
        ty_kresp_clear(&r);
    }
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.throttled, 0);
    ty_kresp r = {0};
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.throttled, 1);
    assert_int_equal(e->srv.nseen, 4);

    /* qps 0: no limit at all. */
    o.qps = 0;
    reopen(e, &o);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                         TY_OK);
        ty_kresp_clear(&r);
    }
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.throttled, 0);
}

/* A 401 renews the exec plugin's token once and retries with the new one. */
static void test_401_renews_exec_token(void **state)
{
    env *e = *state;
    ty_kclient_opts o;
    ty_kresp r = {0};
    char err[512] = "", count[128], user[512];
    snprintf(count, sizeof(count), "%s/count", e->dir);
    setenv("TY_EXEC_COUNT", count, 1);
    unsetenv("TY_EXEC_EXPIRY");
    snprintf(user, sizeof(user),
             "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
             "      command: %s/exec-plugin.sh\n"
             "      args: [token, client.authentication.k8s.io/v1beta1]\n"
             "      env: [{name: AWS_PROFILE, value: p}]\n", FIX);
    write_kubeconfig(e, "http", "", user);
    fast_opts(&o);
    reopen(e, &o);
    script(&e->srv, 401, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
           "\"status\":\"Failure\",\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\","
           "\"code\":401}\n");
    script(&e->srv, 200, "{}\n");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    assert_int_equal(r.attempts, 2);
    ty_kresp_clear(&r);
    assert_string_equal(e->srv.seen[0].auth, "Bearer k8s-aws-v1.p.1");
    assert_string_equal(e->srv.seen[1].auth, "Bearer k8s-aws-v1.p.2");

    /* A second 401 in a row is the answer. */
    script(&e->srv, 401, "{\"kind\":\"Status\",\"message\":\"Unauthorized\","
           "\"reason\":\"Unauthorized\",\"code\":401}\n");
    script(&e->srv, 401, "{\"kind\":\"Status\",\"message\":\"Unauthorized\","
           "\"reason\":\"Unauthorized\",\"code\":401}\n");
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                     TY_EAUTH);
    assert_int_equal(r.attempts, 2);
    assert_string_equal(err, "Unauthorized (HTTP 401 Unauthorized)");
    ty_kresp_clear(&r);
    unsetenv("TY_EXEC_COUNT");
}

/* ---- lists ------------------------------------------------------------------------------------*/

static ty_err collect_names(void *ud, json_t *item)
{
    char *names = ud;
    const char *n = json_string_value(json_object_get(json_object_get(item, "metadata"),
                                                      "name"));
    size_t len = strlen(names);
    snprintf(names + len, 256 - len, "%s,", n ? n : "?");
    return TY_OK;
}

/* Pages follow `continue` until the last; an expired token says: list again. */
static void test_list_paging(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    char err[512] = "", names[256] = "", rv[32] = "";
    script(&e->srv, 200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"100\","
           "\"continue\":\"tok/1+=\"},\"items\":[{\"metadata\":{\"name\":\"a\"}},"
           "{\"metadata\":{\"name\":\"b\"}}]}\n");
    script(&e->srv, 200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"100\","
           "\"continue\":\"tok2\"},\"items\":[{\"metadata\":{\"name\":\"c\"}},"
           "{\"metadata\":{\"name\":\"d\"}}]}\n");
    script(&e->srv, 200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"100\"},"
           "\"items\":[{\"metadata\":{\"name\":\"e\"}}]}\n");
    assert_int_equal(ty_kclient_list(e->c, "/api/v1/namespaces/ns/pods?labelSelector=a%3Db", 2, 0,
                                     collect_names, names, rv, sizeof(rv), &r, err, sizeof(err)),
                     TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(names, "a,b,c,d,e,");
    assert_string_equal(rv, "100");
    assert_int_equal(e->srv.nseen, 3);
    assert_non_null(strstr(e->srv.seen[0].query, "&labelSelector=a=b&"));
    assert_non_null(strstr(e->srv.seen[0].query, "&limit=2&"));
    assert_null(strstr(e->srv.seen[0].query, "continue"));
    assert_non_null(strstr(e->srv.seen[1].query, "&continue=tok/1+=&"));
    assert_non_null(strstr(e->srv.seen[2].query, "&continue=tok2&"));
    assert_string_equal(e->srv.seen[0].accept, "application/json");

    /* Metadata alone, asked as client-go's metadata client asks, with whole objects as the
     * fallback of a server that cannot. */
    names[0] = '\0';
    script(&e->srv, 200, "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":"
           "\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"101\"},\"items\":[{\"kind\":"
           "\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":"
           "{\"name\":\"f\"}}]}\n");
    assert_int_equal(ty_kclient_list(e->c, "/apis/batch/v1/namespaces/ns/jobs", 0, 1,
                                     collect_names, names, rv, sizeof(rv), &r, err, sizeof(err)),
                     TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(names, "f,");
    assert_string_equal(rv, "101");
    assert_string_equal(e->srv.seen[3].accept,
                        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                        "application/json");

    char *expired = transcript_body("10d-list-continue-token-expired.json");
    names[0] = '\0';
    script(&e->srv, 200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"7\","
           "\"continue\":\"old\"},\"items\":[{\"metadata\":{\"name\":\"a\"}}]}\n");
    script(&e->srv, 410, expired);
    free(expired);
    assert_int_equal(ty_kclient_list(e->c, "/api/v1/pods", 1, 0, collect_names, names, rv,
                                     sizeof(rv), &r, err, sizeof(err)), TY_EAGAIN);
    assert_int_equal(r.code, 410);
    assert_string_equal(r.reason, "Expired");
    assert_non_null(strstr(err, "The provided continue parameter is too old"));
    ty_kresp_clear(&r);
}

/* ---- watches ----------------------------------------------------------------------------------*/

typedef struct watch_log {
    char types[64];             /* one letter an event: A M D B E */
    int n;
    long error_code;
    atomic_int seen;
} watch_log;

static ty_err on_event(void *ud, ty_kwatch_type t, json_t *obj)
{
    watch_log *w = ud;
    w->types[w->n++] = "AMDBE"[t];
    if (t == TY_KWATCH_ERROR)
        w->error_code = (long)json_integer_value(json_object_get(obj, "code"));
    atomic_fetch_add(&w->seen, 1);
    return TY_OK;
}

/* The events of 09 (pods added, modified, deleted, then bookmarks) in order. */
static void test_watch_bookmarks(void **state)
{
    env *e = *state;
    watch_log w = {0};
    ty_kresp r = {0};
    ty_kclient_stats st;
    char err[512] = "", rv[32] = "";
    ty_kwatch_opts o = {"/api/v1/namespaces/transcripts/pods", "39095", 40, on_event, &w, NULL,
                        NULL, 0};
    script(&e->srv, 200, NULL);
    assert_int_equal(script_transcript_events(&e->srv, "09-watch-pods-bookmarks.json"), 17);
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(w.types, "AMMMMMDMDMDMDMDBB");
    assert_string_equal(rv, "39123");   /* the last bookmark's */
    assert_string_equal(e->srv.seen[0].accept, "application/json");
    seen *s = &e->srv.seen[0];
    assert_string_equal(s->path, "/api/v1/namespaces/transcripts/pods");
    assert_non_null(strstr(s->query, "&watch=1&"));
    assert_non_null(strstr(s->query, "&allowWatchBookmarks=true&"));
    assert_non_null(strstr(s->query, "&resourceVersion=39095&"));
    assert_non_null(strstr(s->query, "&timeoutSeconds=40&"));
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.watches, 1);
    assert_int_equal(st.watch_restarts, 1);
    assert_int_equal(st.watch_expired, 0);
}

/* 10: a too-old resourceVersion is an HTTP 200 with one ERROR event of code 410: re-list. */
static void test_watch_expired(void **state)
{
    env *e = *state;
    watch_log w = {0};
    ty_kresp r = {0};
    ty_kclient_stats st;
    char err[512] = "", rv[32] = "keep";
    ty_kwatch_opts o = {"/api/v1/namespaces/transcripts/pods", "1", 10, on_event, &w, NULL,
                        NULL, 0};
    script(&e->srv, 200, NULL);
    script_transcript_events(&e->srv, "10-watch-too-old-resource-version.json");
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)),
                     TY_EAGAIN);
    assert_string_equal(w.types, "E");
    assert_int_equal(w.error_code, 410);
    assert_int_equal(r.code, 410);
    assert_string_equal(r.reason, "Expired");
    assert_non_null(strstr(err, "too old resource version: 1 (38897)"));
    assert_string_equal(rv, "keep");
    ty_kresp_clear(&r);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.watch_expired, 1);
}

/* With a pick, the consumer gets only what it names; an ERROR event's Status stays whole. */
static ty_err on_picked(void *ud, ty_kwatch_type t, json_t *obj)
{
    if (t != TY_KWATCH_ERROR) {
        /* {"metadata": {"name"?, "resourceVersion"}} and nothing else */
        const json_t *md = json_object_get(obj, "metadata");
        assert_int_equal(json_object_size(obj), 1);
        assert_non_null(json_object_get(md, "resourceVersion"));
        assert_true(json_object_size(md) <= 2);
        assert_null(json_object_get(md, "uid"));
    }
    return on_event(ud, t, obj);
}

static void test_watch_pick(void **state)
{
    env *e = *state;
    watch_log w = {0};
    ty_kresp r = {0};
    char err[512] = "", rv[32] = "";
    json_t *pick = json_pack("{s:{s:b, s:b}}", "metadata", "name", 1, "resourceVersion", 1);
    ty_kwatch_opts o = {"/api/v1/namespaces/transcripts/pods", "39095", 40, on_picked, &w, NULL,
                        pick, 0};
    script(&e->srv, 200, NULL);
    assert_int_equal(script_transcript_events(&e->srv, "09-watch-pods-bookmarks.json"), 17);
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(w.types, "AMMMMMDMDMDMDMDBB");
    assert_string_equal(rv, "39123");

    watch_log w2 = {0};
    o.ud = &w2;
    o.resource_version = "1";
    script(&e->srv, 200, NULL);
    script_transcript_events(&e->srv, "10-watch-too-old-resource-version.json");
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)),
                     TY_EAGAIN);
    assert_string_equal(w2.types, "E");
    assert_int_equal(w2.error_code, 410);
    assert_string_equal(r.reason, "Expired");
    assert_non_null(strstr(err, "too old resource version: 1 (38897)"));
    ty_kresp_clear(&r);
    json_decref(pick);
}

typedef struct watch_thread {
    env *e;
    ty_kwatch_opts o;
    watch_log w;
    ty_err rc;
    char err[512];
} watch_thread;

static void *run_watch(void *arg)
{
    watch_thread *t = arg;
    ty_kresp r = {0};
    char rv[32] = "";
    t->o.ud = &t->w;
    t->rc = ty_kclient_watch(t->e->c, &t->o, rv, sizeof(rv), &r, t->err, sizeof(t->err));
    ty_kresp_clear(&r);
    return NULL;
}

/* Another thread stops a watch that the server keeps open. */
static void test_watch_stop(void **state)
{
    env *e = *state;
    ty_kstop stop = {0};
    watch_thread *t = calloc(1, sizeof(*t));
    pthread_t th;
    assert_non_null(t);
    t->e = e;
    t->o = (ty_kwatch_opts){"/api/v1/pods", NULL, 300, on_event, NULL, &stop, NULL, 0};
    script(&e->srv, 200, NULL);
    script_event(&e->srv, "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                          "{\"name\":\"p\",\"resourceVersion\":\"5\"}}}");
    e->srv.replies[0].hold = 1;
    assert_int_equal(pthread_create(&th, NULL, run_watch, t), 0);
    while (atomic_load(&t->w.seen) < 1) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ty_kstop_request(&stop);
    pthread_join(th, NULL);
    assert_int_equal(t->rc, TY_ESHUTDOWN);
    assert_string_equal(t->w.types, "A");
    assert_null(strstr(e->srv.seen[0].query, "resourceVersion"));
    free(t);
}

/* A watch refused with 429 is retried before any event; a bad event line ends it. */
static void test_watch_retry_and_garbage(void **state)
{
    env *e = *state;
    watch_log w = {0};
    ty_kresp r = {0};
    char err[512] = "", rv[32] = "";
    ty_kwatch_opts o = {"/api/v1/pods", "3", 5, on_event, &w, NULL, NULL, 0};
    script(&e->srv, 429, "{\"kind\":\"Status\",\"message\":\"slow down\","
           "\"reason\":\"TooManyRequests\",\"code\":429}\n");
    script(&e->srv, 200, NULL);
    script_event(&e->srv, "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":"
                          "{\"resourceVersion\":\"4\"}}}");
    script_event(&e->srv, "this is not json");
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)), TY_EIO);
    assert_int_equal(r.attempts, 2);
    assert_string_equal(w.types, "M");
    assert_string_equal(rv, "4");
    assert_non_null(strstr(err, "an event is not JSON"));
    ty_kresp_clear(&r);
}

/* Events split across chunks, and two in one chunk, come out whole and in order. */
static void test_watch_chunking(void **state)
{
    env *e = *state;
    watch_log w = {0};
    ty_kresp r = {0};
    char err[512] = "", rv[32] = "";
    ty_kwatch_opts o = {"/api/v1/pods", "1", 5, on_event, &w, NULL, NULL, 0};
    script(&e->srv, 200, NULL);
    script_chunk(&e->srv, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourc", 1);
    script_chunk(&e->srv, "eVersion\":\"10\"}}}\n{\"type\":\"DELETED\",\"object\":"
                 "{\"metadata\":{\"resourceVersion\":\"11\"}}}\n{\"type\":\"BOOKMARK\",", 1);
    script_chunk(&e->srv, "\"object\":{\"metadata\":{\"resourceVersion\":\"12\"}}}\n", 1);
    assert_int_equal(ty_kclient_watch(e->c, &o, rv, sizeof(rv), &r, err, sizeof(err)), TY_OK);
    assert_string_equal(w.types, "ADB");
    assert_string_equal(rv, "12");
    ty_kresp_clear(&r);
}

typedef struct load_thread {
    env *e;
    int ok;
} load_thread;

static void *run_requests(void *arg)
{
    load_thread *t = arg;
    char err[512];
    for (int i = 0; i < 10; i++) {
        ty_kresp r = {0};
        t->ok += ty_kclient_request(t->e->c, "GET", JOBS, NULL, &r, err, sizeof(err)) == TY_OK;
        ty_kresp_clear(&r);
    }
    return NULL;
}

/* Threads share one client: every request answered, no more connections than threads. */
static void test_threads(void **state)
{
    env *e = *state;
    load_thread t[4];
    pthread_t th[4];
    ty_kclient_stats st;
    for (int i = 0; i < 4; i++) {
        t[i] = (load_thread){e, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_requests, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].ok, 10);
    }
    assert_int_equal(e->srv.nseen, 40);
    assert_true(atomic_load(&e->srv.connections) <= 4);
    ty_kclient_stats_get(e->c, &st);
    assert_int_equal(st.requests[TY_KVERB_GET][1], 40);     /* bucket of 200 */
}

/* Bodies and watch events have a byte limit; past it the call fails, nothing is retried. */
static void test_size_limits(void **state)
{
    env *e = *state;
    ty_kclient_opts o;
    ty_kresp r = {0};
    watch_log w = {0};
    char err[512] = "", rv[32] = "", big[300];
    ty_kwatch_opts wo = {"/api/v1/pods", "1", 5, on_event, &w, NULL, NULL, 0};
    fast_opts(&o);
    o.max_body = 128;
    reopen(e, &o);
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    script(&e->srv, 200, big);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                     TY_ETOOLARGE);
    assert_int_equal(r.attempts, 1);
    assert_non_null(strstr(err, "over 128 bytes"));
    ty_kresp_clear(&r);

    script(&e->srv, 200, NULL);
    script_event(&e->srv, "{\"type\":\"ADDED\",\"object\":{\"metadata\":"
                          "{\"resourceVersion\":\"2\"}}}");
    script_chunk(&e->srv, big, 1);
    assert_int_equal(ty_kclient_watch(e->c, &wo, rv, sizeof(rv), &r, err, sizeof(err)),
                     TY_ETOOLARGE);
    assert_string_equal(w.types, "A");
    assert_string_equal(rv, "2");
    ty_kresp_clear(&r);
}

/* Credentials that cannot be had fail the call before anything is sent. */
static void test_credentials_fail(void **state)
{
    env *e = *state;
    ty_kclient_opts o;
    ty_kresp r = {0};
    char err[512] = "", tok[128];
    snprintf(tok, sizeof(tok), "%s/token", e->dir);
    FILE *f = fopen(tok, "w");
    assert_non_null(f);
    fputs("t0\n", f);
    fclose(f);
    write_kubeconfig(e, "http", "", "    tokenFile: token\n");
    fast_opts(&o);
    reopen(e, &o);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(e->srv.seen[0].auth, "Bearer t0");
    assert_int_equal(unlink(tok), 0);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)),
                     TY_EAUTH);
    assert_non_null(strstr(err, "token file"));
    ty_kresp_clear(&r);
    assert_int_equal(e->srv.nseen, 1);

    /* Options that make no sense are refused. */
    ty_kclient *c = NULL;
    o.qps = 5;
    o.burst = 0;
    assert_int_equal(ty_kclient_new(e->kc, &o, &c, err, sizeof(err)), TY_EINVAL);
    assert_null(c);
}

/* The counters as Prometheus text. */
static void test_metrics(void **state)
{
    env *e = *state;
    ty_kresp r = {0};
    ty_buf b;
    char err[512] = "";
    script(&e->srv, 201, "{}\n");
    assert_int_equal(ty_kclient_request(e->c, "POST", JOBS, JOB_BODY, &r, err, sizeof(err)),
                     TY_OK);
    ty_kresp_clear(&r);
    script(&e->srv, 404, "{}\n");
    assert_int_equal(ty_kclient_request(e->c, "DELETE", JOBS "/x", NULL, &r, err, sizeof(err)),
                     TY_ENOTFOUND);
    ty_kresp_clear(&r);
    ty_buf_init(&b, 0);
    assert_int_equal(ty_kclient_stats_render(e->c, &b), TY_OK);
    assert_non_null(strstr(b.data,
                           "trainyard_kube_requests_total{verb=\"POST\",code=\"201\"} 1\n"));
    assert_non_null(strstr(b.data,
                           "trainyard_kube_requests_total{verb=\"DELETE\",code=\"404\"} 1\n"));
    assert_non_null(strstr(b.data, "trainyard_kube_retries_total 0\n"));
    ty_buf_free(&b);
}

/* ---- TLS --------------------------------------------------------------------------------------*/

/* The client trusts the kubeconfig's CA (and nothing else) and shows its client certificate. */
static void test_tls(void **state)
{
    env *e = *state;
    tls_files tf;
    ty_kclient_opts o;
    ty_kresp r = {0};
    char cmd[512], path[256], err[512] = "", cluster[512], user[512];
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
        print_message("skipped: libmicrohttpd was built without TLS\n");
        skip();
    }
    snprintf(cmd, sizeof(cmd), "%s/make-certs.sh '%s/pki'", FIX, e->dir);
    if (system(cmd) != 0) {
        print_message("skipped: the openssl command could not make test certificates\n");
        skip();
    }
    server_stop(&e->srv);
    snprintf(path, sizeof(path), "%s/pki/server.key", e->dir);
    tf.key = slurp(path);
    snprintf(path, sizeof(path), "%s/pki/server.crt", e->dir);
    tf.cert = slurp(path);
    snprintf(path, sizeof(path), "%s/pki/ca.crt", e->dir);
    tf.trust = slurp(path);
    server_start(&e->srv, &tf);

    snprintf(cluster, sizeof(cluster), "    certificate-authority: %s/pki/ca.crt\n", e->dir);
    snprintf(user, sizeof(user), "    client-certificate: %s/pki/client.crt\n"
                                 "    client-key: %s/pki/client.key\n", e->dir, e->dir);
    write_kubeconfig(e, "https", cluster, user);
    fast_opts(&o);
    reopen(e, &o);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_int_equal(e->srv.nseen, 2);
    assert_string_equal(e->srv.seen[0].auth, "");
#ifdef TY_HAVE_GNUTLS
    assert_true(e->srv.seen[0].client_cert);
#endif
    assert_int_equal(atomic_load(&e->srv.connections), 1);

    /* Without the CA the server's certificate is not trusted: no retry, curl's reason. */
    write_kubeconfig(e, "https", "", "    token: t\n");
    reopen(e, &o);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_EIO);
    assert_int_equal(r.attempts, 1);
    assert_non_null(strstr(err, "certificate"));
    ty_kresp_clear(&r);
    assert_int_equal(e->srv.nseen, 2);

    /* insecure-skip-tls-verify: no verification. */
    write_kubeconfig(e, "https", "    insecure-skip-tls-verify: true\n", "    token: t\n");
    reopen(e, &o);
    assert_int_equal(ty_kclient_request(e->c, "GET", JOBS, NULL, &r, err, sizeof(err)), TY_OK);
    ty_kresp_clear(&r);
    assert_string_equal(e->srv.seen[2].auth, "Bearer t");
#ifdef TY_HAVE_GNUTLS
    assert_false(e->srv.seen[2].client_cert);
#endif
    free(tf.key);
    free(tf.cert);
    free(tf.trust);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_strict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_429_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after_past_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_5xx_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warnings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keepalive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_401_renews_exec_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_paging, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_bookmarks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_expired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_pick, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_retry_and_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_chunking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credentials_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
