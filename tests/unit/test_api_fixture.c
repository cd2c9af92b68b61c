/* test_api_fixture.c - see test_api_fixture.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "api/openapi_doc.h"
#include "common/ty_buf.h"
#include "scheduler/local/local.h"
#include "tests/unit/test_api_fixture.h"

int fx_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256] = "";
    json_t *doc = NULL;
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ty-api-test-XXXXXX");
    if (!mkdtemp(f->dir))
        goto fail;
    char db[128];
    snprintf(db, sizeof db, "%s/trainyard.db", f->dir);
    if (store_open(db, NULL, &f->store, err, sizeof err) != TY_OK) {
        fprintf(stderr, "store_open: %s\n", err);
        goto fail;
    }
    if (oas_yaml_parse(api_openapi_yaml, api_openapi_yaml_len, &doc, err, sizeof err) ||
        oas_from_json(doc, &f->doc, err, sizeof err)) {
        fprintf(stderr, "openapi.yaml: %s\n", err);
        goto fail;
    }
    ty_counter_vec_init(&f->requests);
    ty_histogram_init(&f->duration, ty_latency_bounds, ty_latency_nbounds);
    f->ctx.store = f->store;
    f->ctx.max_body = API_DEFAULT_MAX_BODY;
    f->ctx.http_requests = &f->requests;
    f->ctx.http_duration = &f->duration;
    *state = f;
    return 0;
fail:
    store_close(f->store);
    free(f);
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

int fx_teardown(void **state)
{
    fixture *f = *state;
    sched_stop(f->ctx.sched); /* stops the ranks still running */
    if (f->backend)
        f->backend->ops->free(f->backend);
    store_close(f->store);
    oas_free(f->doc);
    ty_counter_vec_destroy(&f->requests);
    ty_histogram_destroy(&f->duration);
    /* The database and the local backend's jobs/ tree (logs, working directories). */
    nftw(f->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

const char *fx_header(const api_resp *resp, const char *key)
{
    for (size_t i = 0; i < resp->nheaders; i++)
        if (strcasecmp(resp->headers[i].key, key) == 0)
            return resp->headers[i].value;
    return NULL;
}

/* Header lookup for oas_check_response_headers(); server/ adds X-Request-Id. */
static const char *get_header(const char *name, void *ud)
{
    if (strcasecmp(name, "X-Request-Id") == 0)
        return "test-request-1";
    return fx_header(ud, name);
}

/* Reads resp's stream into its body and frees the stream, as server/ sends it. */
static void drain_stream(fixture *f, api_resp *resp)
{
    ty_buf b;
    char chunk[4096];
    long n;
    ty_buf_init(&b, (size_t)64 << 20);
    while ((n = resp->stream.read(resp->stream.ud, chunk, sizeof chunk)) > 0) {
        assert_true((size_t)n <= sizeof chunk);
        assert_int_equal(ty_buf_append(&b, chunk, (size_t)n), TY_OK);
    }
    f->stream_error = n < 0;
    resp->stream.free(resp->stream.ud);
    memset(&resp->stream, 0, sizeof resp->stream);
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    if (b.len)
        assert_int_equal(ty_buf_steal(&b, &resp->body, &resp->body_len), TY_OK);
    ty_buf_free(&b);
}

json_t *fx_call(fixture *f, const char *method, const char *tmpl, const fx_req *r, api_resp *resp)
{
    static const fx_req none;
    const api_route *route = NULL;
    if (!r)
        r = &none;
    for (size_t i = 0; i < api_nroutes && !route; i++)
        if (strcmp(api_routes[i].method, method) == 0 && strcmp(api_routes[i].path, tmpl) == 0)
            route = &api_routes[i];
    if (!route)
        fail_msg("no route %s %s", method, tmpl);

    /* The concrete path: the template with {id} replaced. */
    char path[1024];
    const char *brace = strstr(tmpl, "{id}");
    if (brace)
        snprintf(path, sizeof path, "%.*s%s%s", (int)(brace - tmpl), tmpl, r->id ? r->id : "",
                 brace + 4);
    else
        snprintf(path, sizeof path, "%s", tmpl);

    api_principal who = {.name = r->principal ? r->principal : "tester",
                         .scopes = !route->scope ? 0
                                   : r->team     ? STORE_SCOPE_READ | STORE_SCOPE_SUBMIT
                                                 : STORE_SCOPE_ADMIN,
                         .team = r->team ? r->team : STORE_TEAM_DEFAULT};
    const char *ct = r->content_type;
    if (!ct && r->body && !r->no_content_type)
        ct = "application/json";
    api_req req = {
        .ctx = &f->ctx,
        .method = method,
        .path = path,
        .id = r->id,
        .query = r->query,
        .nquery = r->nquery,
        .content_type = ct,
        .idempotency_key = r->idem,
        .body = r->body ? r->body : "",
        .body_len = r->body ? (r->body_len ? r->body_len : strlen(r->body)) : 0,
        .principal = route->scope ? &who : NULL,
        .request_id = "test-request-1",
    };
    memset(resp, 0, sizeof *resp);
    route->handler(&req, resp);
    if (resp->status < 100 || resp->status > 599)
        fail_msg("%s %s: no status", method, path);
    f->streamed = resp->stream.read != NULL;
    f->stream_error = 0;
    if (f->streamed) {
        if (!resp->stream.free)
            fail_msg("%s %s: a stream without free()", method, path);
        drain_stream(f, resp);
    }

    char err[512];
    if (oas_check_response(f->doc, method, path, (int)resp->status, resp->content_type, resp->body,
                           resp->body_len, err, sizeof err))
        fail_msg("%s %s -> %u does not conform to openapi.yaml: %s\n  body: %.500s", method, path,
                 resp->status, err, resp->body ? resp->body : "");
    if (oas_check_response_headers(f->doc, method, path, (int)resp->status, get_header, resp, err,
                                   sizeof err))
        fail_msg("%s %s -> %u headers do not conform to openapi.yaml: %s", method, path,
                 resp->status, err);

    if (!resp->body || !resp->content_type || !strstr(resp->content_type, "json"))
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(resp->body, resp->body_len, 0, &je);
    if (!j)
        fail_msg("%s %s: response is not JSON: %s", method, path, je.text);
    return j;
}

void fx_expect_problem(const api_resp *resp, const json_t *body, unsigned status, const char *code)
{
    if (resp->status != status)
        fail_msg("status %u, want %u: %.400s", resp->status, status, resp->body ? resp->body : "");
    assert_string_equal(resp->content_type, "application/problem+json");
    assert_non_null(body);
    assert_string_equal(json_string_value(json_object_get(body, "code")), code);
    assert_int_equal(json_integer_value(json_object_get(body, "status")), status);
    char type[128];
    snprintf(type, sizeof type, "urn:trainyard:problem:%s", code);
    assert_string_equal(json_string_value(json_object_get(body, "type")), type);
}

void fx_submit(fixture *f, const char *name, const char *queue, const char *labels_json,
               char id[STORE_ID_LEN + 1])
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"queue\":\"%s\",\"labels\":%s,\"image\":\"img\","
             "\"command\":[\"run\"],\"workers\":{\"count\":1}}",
             name, queue ? queue : "default", labels_json ? labels_json : "{}");
    api_resp resp;
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
    if (resp.status != 201)
        fail_msg("submit %s: %u %s", name, resp.status, resp.body ? resp.body : "");
    snprintf(id, STORE_ID_LEN + 1, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);
}

void fx_sched_write(fixture *f, const char *id, job_state from, job_state to, int attempt,
                    const char *record, int restarts)
{
    store_update u = {.id = id,
                      .from = from,
                      .to = to,
                      .reason = "Test",
                      .message = "",
                      .attempt = attempt,
                      .attempt_json = record,
                      .restarts = restarts};
    ty_err e = store_jobs_update(f->store, &u, 1);
    if (e || u.result)
        fail_msg("store_jobs_update %s %s -> %s: %s / %s", id, job_state_name(from),
                 job_state_name(to), ty_strerror(e), ty_strerror(u.result));
}

/* ---- the scheduler over the local backend --------------------------------- */

void fx_sched_start(fixture *f)
{
    char err[256] = "", data[128];
    snprintf(data, sizeof data, "%s/data", f->dir);
    local_options lo = {.data_dir = data, .slots = FX_SLOTS, .gpus = 0};
    if (local_backend_new(&lo, &f->backend, err, sizeof err) != TY_OK)
        fail_msg("local_backend_new: %s", err);
    sched_options opt = {.store = f->store,
                         .backend = f->backend,
                         .queue_limit = SCHED_UNLIMITED,
                         .stop_grace_ms = 2000};
    if (sched_start(&opt, &f->ctx.sched, err, sizeof err) != TY_OK)
        fail_msg("sched_start: %s", err);
}

void fx_submit_sh(fixture *f, const char *queue, int workers, int restarts, const char *script,
                  char id[STORE_ID_LEN + 1])
{
    json_t *spec =
        json_pack("{s:s, s:s, s:[s, s, s], s:{s:i}, s:{s:i, s:i}}", "name", "sh", "queue",
                  queue ? queue : "default", "command", "sh", "-c", script, "workers", "count",
                  workers, "restart", "max", restarts, "backoff_seconds", 0);
    assert_non_null(spec);
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    assert_non_null(body);
    api_resp resp;
    json_t *j = fx_call(f, "POST", "/v1/jobs", &(fx_req){.body = body}, &resp);
    if (resp.status != 201)
        fail_msg("submit %s: %u %s", script, resp.status, resp.body ? resp.body : "");
    snprintf(id, STORE_ID_LEN + 1, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    api_resp_free(&resp);
    free(body);
}

void fx_wait_state(fixture *f, const char *id, job_state want)
{
    job_state now = JOB_STATE_NONE;
    /* Generous: a loaded machine (or a sanitizer build) starts processes slowly. */
    for (int i = 0; i < 6000; i++) {
        store_job *j = NULL;
        assert_int_equal(store_job_get(f->store, id, &j), TY_OK);
        now = j->state;
        store_jobs_free(j, 1);
        if (now == want)
            return;
        if (job_state_is_terminal(now))
            break;
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    fail_msg("job %s is %s, not %s", id, job_state_name(now), job_state_name(want));
}
