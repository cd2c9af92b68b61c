/*
 * resp.c - filling an api_resp: JSON bodies, text bodies, streamed bodies,
 * RFC 9457 problems, extra headers, and the one table that maps a ty_err to
 * an HTTP status. Each reply replaces whatever body or stream was set before.
 *
 * These functions cannot fail from the handler's point of view: when memory
 * runs out while building a body, the response degrades to a static 503
 * problem, which needs no allocation.
 */
#include "api/api.h"
#include "api/api_int.h"
#include "common/ty_json.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char oom_body[] =
    "{\"type\":\"urn:trainyard:problem:out-of-memory\",\"title\":\"Service Unavailable\","
    "\"status\":503,\"code\":\"out-of-memory\"}";

/* Frees a stream the response holds and was never handed to server/. */
static void drop_stream(api_resp *r)
{
    if (r->stream.free)
        r->stream.free(r->stream.ud);
    memset(&r->stream, 0, sizeof r->stream);
}

/* Replaces the body with the static out-of-memory problem (copied when possible). */
static void reply_oom(api_resp *r)
{
    drop_stream(r);
    free(r->body);
    r->status = 503;
    r->content_type = API_CT_PROBLEM;
    r->body = strdup(oom_body);
    r->body_len = r->body ? strlen(r->body) : 0;
}

void api_resp_free(api_resp *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    for (size_t i = 0; i < r->nheaders; i++)
        free((char *)r->headers[i].value);
    r->nheaders = 0;
    drop_stream(r);
}

void api_reply_json(api_resp *r, unsigned status, json_t *json)
{
    ty_buf b = {0};
    ty_err e = json ? ty_json_write(&b, json) : TY_ENOMEM;
    json_decref(json);
    if (e)
        reply_oom(r);
    else
        api_reply_json_buf(r, status, &b);
    ty_buf_free(&b);
}

void api_reply_text(api_resp *r, unsigned status, const char *content_type, const char *text,
                    size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy) {
        reply_oom(r);
        return;
    }
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    drop_stream(r);
    free(r->body);
    r->status = status;
    r->content_type = content_type;
    r->body = copy;
    r->body_len = len;
}

/* Reason phrases of the statuses the API returns, used as default titles. */
static const char *status_title(unsigned status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    default:
        return status >= 500 ? "Internal Server Error" : "Error";
    }
}

json_t *api_problem_new(unsigned status, const char *code, const char *title, const char *detail,
                        json_t *errors)
{
    char type[128];
    int n = snprintf(type, sizeof type, "urn:trainyard:problem:%s", code);
    if (n < 0 || (size_t)n >= sizeof type) {
        json_decref(errors);
        return NULL;
    }
    json_t *p = json_object();
    if (!p) {
        json_decref(errors);
        return NULL;
    }
    int bad = json_object_set_new(p, "type", json_string(type));
    bad |= json_object_set_new(p, "title", json_string(title ? title : status_title(status)));
    bad |= json_object_set_new(p, "status", json_integer(status));
    if (detail)
        bad |= json_object_set_new(p, "detail", json_string(detail));
    bad |= json_object_set_new(p, "code", json_string(code));
    if (errors)
        bad |= json_object_set_new(p, "errors", errors);
    if (bad) {
        json_decref(p);
        return NULL;
    }
    return p;
}

void api_reply_problem_json(api_resp *r, json_t *problem)
{
    json_int_t status = json_integer_value(json_object_get(problem, "status"));
    if (!problem || status < 100 || status > 599) {
        json_decref(problem);
        reply_oom(r);
        return;
    }
    api_reply_json(r, (unsigned)status, problem);
    if (r->status == (unsigned)status)
        r->content_type = API_CT_PROBLEM;
}

void api_reply_problem(api_resp *r, unsigned status, const char *code, const char *title,
                       const char *detail, json_t *errors)
{
    api_reply_problem_json(r, api_problem_new(status, code, title, detail, errors));
}

void api_resp_header(api_resp *r, const char *key, const char *value)
{
    /* More headers than the fixed array holds is a bug in a handler. */
    assert(r->nheaders < API_MAX_HEADERS);
    if (r->nheaders >= API_MAX_HEADERS || strpbrk(value, "\r\n"))
        return;
    char *copy = strdup(value);
    if (!copy)
        return;
    r->headers[r->nheaders].key = key;
    r->headers[r->nheaders].value = copy;
    r->nheaders++;
}

/* One row per ty_err: the HTTP status, the problem code and its title. */
static const struct {
    unsigned status;
    const char *code;
    const char *title;
} err_map[TY_ERR_COUNT] = {
    [TY_OK] = {200, "ok", "OK"},
    [TY_ENOMEM] = {503, "out-of-memory", "Service Unavailable"},
    [TY_EINVAL] = {400, "bad-request", "Bad Request"},
    [TY_ENOTFOUND] = {404, "not-found", "Not Found"},
    [TY_ECONFLICT] = {409, "conflict", "Conflict"},
    [TY_EEXISTS] = {409, "already-exists", "Conflict"},
    [TY_ETOOLARGE] = {413, "body-too-large", "Content Too Large"},
    [TY_EIO] = {500, "storage-error", "Internal Server Error"},
    [TY_EBUSY] = {503, "busy", "Service Unavailable"},
    [TY_ESCHEMA] = {500, "storage-error", "Internal Server Error"},
    [TY_ESHUTDOWN] = {503, "shutting-down", "Service Unavailable"},
    [TY_EAUTH] = {401, "unauthorized", "Unauthorized"},
    [TY_EFORBIDDEN] = {403, "forbidden", "Forbidden"},
    [TY_EINTERNAL] = {500, "internal", "Internal Server Error"},
    [TY_EAGAIN] = {503, "unavailable", "Service Unavailable"},
};

unsigned api_http_status(ty_err e)
{
    if ((unsigned)e >= TY_ERR_COUNT || !err_map[e].code)
        return 500;
    return err_map[e].status;
}

void api_reply_error(api_resp *r, ty_err e, const char *detail)
{
    if ((unsigned)e >= TY_ERR_COUNT || !err_map[e].code || e == TY_OK)
        e = TY_EINTERNAL;
    api_reply_problem(r, err_map[e].status, err_map[e].code, err_map[e].title,
                      detail ? detail : ty_strerror(e), NULL);
    if (r->status == 503)
        api_resp_header(r, "Retry-After", "1");
}

void api_reply_json_buf(api_resp *r, unsigned status, ty_buf *b)
{
    char *text = NULL;
    size_t len = 0;
    if (ty_buf_steal(b, &text, &len)) {
        reply_oom(r);
        return;
    }
    drop_stream(r);
    free(r->body);
    r->status = status;
    r->content_type = API_CT_JSON;
    r->body = text;
    r->body_len = len;
}

void api_reply_stream(api_resp *r, unsigned status, const char *content_type, api_stream s)
{
    drop_stream(r);
    free(r->body);
    r->status = status;
    r->content_type = content_type;
    r->body = NULL;
    r->body_len = 0;
    r->stream = s;
}
