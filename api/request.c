/*
 * request.c - checks every handler with a body makes in the same order:
 * media type (415), size (413), JSON syntax (400), plus the Idempotency-Key
 * header (400). Each failing check writes its problem response.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/spec.h"

/* "application/json", any case, optionally followed by white space and ";params". */
static int is_json_media_type(const char *ct)
{
    static const char want[] = "application/json";
    size_t n = sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, n) != 0)
        return 0;
    ct += n;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

bool api_need_json_content(const api_req *req, api_resp *resp)
{
    if (req->content_type && is_json_media_type(req->content_type))
        return true;
    api_reply_problem(resp, 415, "unsupported-media-type", NULL,
                      "the request body must be sent as Content-Type: application/json", NULL);
    return false;
}

bool api_need_body_size(const api_req *req, api_resp *resp)
{
    size_t max = req->ctx && req->ctx->max_body ? req->ctx->max_body : API_DEFAULT_MAX_BODY;
    if (req->body_len <= max)
        return true;
    char detail[96];
    snprintf(detail, sizeof detail, "the request body is larger than %zu bytes", max);
    api_reply_problem(resp, 413, "body-too-large", NULL, detail, NULL);
    return false;
}

bool api_need_json_body(const api_req *req, api_resp *resp, json_t **out)
{
    if (!api_need_json_content(req, resp) || !api_need_body_size(req, resp))
        return false;
    char msg[256];
    ty_err e = spec_decode(req->body ? req->body : "", req->body ? req->body_len : 0, out, msg,
                           sizeof msg);
    if (e == TY_OK)
        return true;
    if (e != TY_EINVAL) {
        api_reply_error(resp, e, NULL);
        return false;
    }
    json_t *errors = json_pack("[{s:s, s:s}]", "path", "$", "message", msg);
    api_reply_problem(resp, 400, "malformed-json", NULL, msg, errors);
    return false;
}

bool api_need_idempotency_key(const api_req *req, api_resp *resp, const char **key)
{
    const char *k = req->idempotency_key;
    *key = NULL;
    if (!k)
        return true;
    size_t n = strlen(k);
    int ok = n >= 1 && n <= 255;
    for (size_t i = 0; i < n && ok; i++)
        ok = k[i] >= 0x20 && k[i] <= 0x7e;
    if (!ok) {
        api_reply_problem(resp, 400, "invalid-idempotency-key", NULL,
                          "Idempotency-Key must be 1 to 255 printable ASCII characters", NULL);
        return false;
    }
    *key = k;
    return true;
}

const char *api_principal_name(const api_req *req)
{
    return req->principal && req->principal->name ? req->principal->name : "";
}
