/* test_api_fixture.c - see test_api_fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/openapi_doc.h"
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

int fx_teardown(void **state)
{
    fixture *f = *state;
    store_close(f->store);
    oas_free(f->doc);
    ty_counter_vec_destroy(&f->requests);
    ty_histogram_destroy(&f->duration);
    DIR *d = opendir(f->dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[512];
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", f->dir, de->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
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
                         .scopes = route->scope ? STORE_SCOPE_ADMIN : 0};
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
