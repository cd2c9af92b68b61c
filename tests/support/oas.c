/*
 * oas.c - an OpenAPI 3.x document: path matching and response checking.
 *
 * Everything here is a lookup in the parsed document followed by
 * oas_validate(); the document is never modified after loading, so checks
 * may run concurrently.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tests/support/oas.h"

struct oas {
    json_t *doc;
    unsigned flags;
};

static const char *const oas_methods[] = {"get",  "put",   "post",  "delete", "options",
                                          "head", "patch", "trace", NULL};

int oas_from_json(json_t *doc, oas **out, char *err, size_t errlen)
{
    const char *version = json_string_value(json_object_get(doc, "openapi"));
    oas *o = NULL;
    int rc = -1;

    if (!json_is_object(doc)) {
        snprintf(err, errlen, "the document is not an object");
        goto out;
    }
    if (!version || strncmp(version, "3.", 2) != 0) {
        snprintf(err, errlen, "not an OpenAPI 3.x document (no 'openapi: 3.x')");
        goto out;
    }
    if (!json_is_object(json_object_get(doc, "paths"))) {
        snprintf(err, errlen, "the document has no 'paths' object");
        goto out;
    }
    o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    o->doc = doc;
    doc = NULL;
    *out = o;
    rc = 0;
out:
    json_decref(doc);
    return rc;
}

int oas_load_file(const char *path, oas **out, char *err, size_t errlen)
{
    json_t *doc = NULL;
    char msg[256];

    if (oas_yaml_load_file(path, &doc, err, errlen) < 0)
        return -1;
    if (oas_from_json(doc, out, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        return -1;
    }
    return 0;
}

void oas_free(oas *o)
{
    if (!o)
        return;
    json_decref(o->doc);
    free(o);
}

const json_t *oas_doc(const oas *o)
{
    return o->doc;
}

void oas_set_flags(oas *o, unsigned flags)
{
    o->flags = flags;
}

/* Follows "$ref"s (a chain of them) to the object they name. */
static const json_t *deref(const oas *o, const json_t *v, char *err, size_t errlen)
{
    for (int hops = 0; v && hops < 32; hops++) {
        const char *ref = json_string_value(json_object_get(v, "$ref"));
        if (!ref)
            return v;
        v = oas_resolve_ref(o->doc, ref, err, errlen);
    }
    if (v)
        snprintf(err, errlen, "$ref chain longer than 32");
    return NULL;
}

/* ---- paths --------------------------------------------------------------- */

/* Template t against concrete s (both without query); {name} matches one or
 * more characters other than '/'. */
static int template_match(const char *t, const char *s, const char *s_end)
{
    while (*t) {
        if (*t == '{') {
            const char *close = strchr(t, '}');
            if (!close)
                return 0;
            for (const char *p = s; p < s_end && *p != '/'; p++)
                if (template_match(close + 1, p + 1, s_end))
                    return 1;
            return 0;
        }
        if (s >= s_end || *t != *s)
            return 0;
        t++;
        s++;
    }
    return s == s_end;
}

static size_t literal_chars(const char *t)
{
    size_t n = 0;
    int in_param = 0;

    for (; *t; t++) {
        if (*t == '{')
            in_param = 1;
        else if (*t == '}')
            in_param = 0;
        else if (!in_param)
            n++;
    }
    return n;
}

const char *oas_match_path(const oas *o, const char *concrete_path)
{
    const json_t *paths = json_object_get(o->doc, "paths");
    const char *end = strchr(concrete_path, '?');
    const char *key, *best = NULL;
    size_t best_literal = 0;
    const json_t *item;

    if (!end)
        end = concrete_path + strlen(concrete_path);
    json_object_foreach((json_t *)paths, key, item) {
        size_t lit;
        if (!template_match(key, concrete_path, end))
            continue;
        lit = literal_chars(key);
        if (!best || lit > best_literal) {
            best = key;
            best_literal = lit;
        }
    }
    return best;
}

/* ---- responses ----------------------------------------------------------- */

/* Finds the response object for method + path + status; *label names it. */
static const json_t *find_response(const oas *o, const char *method, const char *concrete_path,
                                   int status, char *label, size_t labellen, char *err,
                                   size_t errlen)
{
    const char *tmpl = oas_match_path(o, concrete_path);
    const json_t *item, *op, *responses, *resp;
    char lower[16], code[16];
    size_t i;

    snprintf(label, labellen, "%s %s %d", method, concrete_path, status);
    if (!tmpl) {
        snprintf(err, errlen, "%s: path not documented in the OpenAPI document", label);
        return NULL;
    }
    snprintf(label, labellen, "%s %s (%s) %d", method, concrete_path, tmpl, status);
    item = deref(o, json_object_get(json_object_get(o->doc, "paths"), tmpl), err, errlen);
    if (!item)
        return NULL;
    for (i = 0; method[i] && i + 1 < sizeof lower; i++)
        lower[i] = (char)tolower((unsigned char)method[i]);
    lower[i] = '\0';
    op = deref(o, json_object_get(item, lower), err, errlen);
    if (!op) {
        snprintf(err, errlen, "%s: method not documented for path %s", label, tmpl);
        return NULL;
    }
    responses = deref(o, json_object_get(op, "responses"), err, errlen);
    if (!json_is_object(responses)) {
        snprintf(err, errlen, "%s: the operation has no responses", label);
        return NULL;
    }
    snprintf(code, sizeof code, "%d", status);
    resp = json_object_get(responses, code);
    if (!resp) {
        snprintf(code, sizeof code, "%dXX", status / 100);
        resp = json_object_get(responses, code);
    }
    if (!resp) {
        snprintf(code, sizeof code, "%dxx", status / 100);
        resp = json_object_get(responses, code);
    }
    if (!resp)
        resp = json_object_get(responses, "default");
    if (!resp) {
        snprintf(err, errlen, "%s: status %d is not documented for %s %s", label, status, method,
                 tmpl);
        return NULL;
    }
    return deref(o, resp, err, errlen);
}

static void media_type_of(const char *ct, char *out, size_t outlen)
{
    size_t o = 0;

    while (*ct == ' ' || *ct == '\t')
        ct++;
    for (; *ct && *ct != ';' && o + 1 < outlen; ct++)
        out[o++] = (char)tolower((unsigned char)*ct);
    while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '\t'))
        o--;
    out[o] = '\0';
}

/* Finds the media type object in content for the response's media type. */
static const json_t *find_media(const json_t *content, const char *mt, const char **key_out)
{
    const char *key, *slash = strchr(mt, '/');
    const json_t *v, *wild_type = NULL, *wild_all = NULL;
    const char *wild_type_key = NULL, *wild_all_key = NULL;
    char km[128];

    json_object_foreach((json_t *)content, key, v) {
        media_type_of(key, km, sizeof km);
        if (strcmp(km, mt) == 0) {
            *key_out = key;
            return v;
        }
        if (strcmp(km, "*/*") == 0) {
            wild_all = v;
            wild_all_key = key;
        } else if (slash && strlen(km) == (size_t)(slash - mt) + 2 &&
                   strncmp(km, mt, (size_t)(slash - mt) + 1) == 0 && km[slash - mt + 1] == '*') {
            wild_type = v;
            wild_type_key = key;
        }
    }
    *key_out = wild_type ? wild_type_key : wild_all_key;
    return wild_type ? wild_type : wild_all;
}

static int is_json_media(const char *mt)
{
    size_t n = strlen(mt);
    return strcmp(mt, "application/json") == 0 || (n > 5 && strcmp(mt + n - 5, "+json") == 0);
}

/*
 * A body of a media type other than JSON (text/plain, application/yaml) is
 * checked as a string against the media type's schema when it is UTF-8, so
 * that {type: string, minLength: 1} requires a body and {type: string} lets
 * an empty one pass. Bytes that are not UTF-8 pass only a schema with
 * format: binary. Without a schema any body but an empty one passes.
 */
static int check_text_body(const oas *o, const json_t *media, const char *media_key,
                           const char *label, const char *mt, const char *body, size_t bodylen,
                           char *err, size_t errlen)
{
    char verr[512];
    const json_t *schema = json_object_get(deref(o, media, verr, sizeof verr), "schema");
    if (!schema) {
        if (bodylen > 0)
            return 0;
        snprintf(err, errlen, "%s: empty body, the response documents %s content", label,
                 media_key);
        return -1;
    }
    json_t *inst = json_stringn(bodylen ? body : "", bodylen);
    if (!inst) {
        const char *format =
            json_string_value(json_object_get(deref(o, schema, verr, sizeof verr), "format"));
        if (format && strcmp(format, "binary") == 0)
            return 0;
        snprintf(err, errlen, "%s %s: the body is not UTF-8 text", label, mt);
        return -1;
    }
    int rc = oas_validate(o->doc, schema, inst, o->flags, verr, sizeof verr);
    json_decref(inst);
    if (rc < 0 && bodylen == 0)
        snprintf(err, errlen, "%s: empty body, the response documents %s content (%s)", label,
                 media_key, verr);
    else if (rc < 0)
        snprintf(err, errlen, "%s %s: %s", label, mt, verr);
    return rc < 0 ? -1 : 0;
}

int oas_check_response(const oas *o, const char *method, const char *concrete_path, int status,
                       const char *content_type, const char *body, size_t bodylen, char *err,
                       size_t errlen)
{
    char label[512], mt[128], verr[512];
    const json_t *resp, *content, *media, *schema;
    const char *media_key = NULL;
    json_t *inst = NULL;
    json_error_t jerr;
    int rc = -1;

    if (errlen)
        err[0] = '\0';
    resp = find_response(o, method, concrete_path, status, label, sizeof label, err, errlen);
    if (!resp)
        goto out;
    content = json_object_get(resp, "content");
    if (json_object_size(content) == 0) {
        if (bodylen > 0) {
            snprintf(err, errlen, "%s: a %zu-byte body (%s) where the response documents none",
                     label, bodylen, content_type ? content_type : "no content type");
            goto out;
        }
        rc = 0;
        goto out;
    }
    if (!content_type || !*content_type) {
        snprintf(err, errlen, "%s: no Content-Type, the response documents content", label);
        goto out;
    }
    media_type_of(content_type, mt, sizeof mt);
    media = find_media(content, mt, &media_key);
    if (!media) {
        char *keys = NULL;
        const char *k;
        const json_t *v;
        json_t *list = json_array();
        json_object_foreach((json_t *)content, k, v)
            json_array_append_new(list, json_string(k));
        keys = json_dumps(list, JSON_COMPACT);
        json_decref(list);
        snprintf(err, errlen, "%s: content type '%s' is not documented (documented: %s)", label,
                 content_type, keys ? keys : "?");
        free(keys);
        goto out;
    }
    if (!is_json_media(mt)) {
        rc = check_text_body(o, media, media_key, label, mt, body, bodylen, err, errlen);
        goto out;
    }
    if (bodylen == 0) {
        snprintf(err, errlen, "%s: empty body, the response documents %s content", label,
                 media_key);
        goto out;
    }
    inst =
        json_loadb(body, bodylen, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!inst) {
        snprintf(err, errlen, "%s: the body is not valid JSON: %s (line %d column %d)", label,
                 jerr.text, jerr.line, jerr.column);
        goto out;
    }
    schema = json_object_get(deref(o, media, verr, sizeof verr), "schema");
    if (schema && oas_validate(o->doc, schema, inst, o->flags, verr, sizeof verr) < 0) {
        snprintf(err, errlen, "%s %s: %s", label, mt, verr);
        goto out;
    }
    rc = 0;
out:
    json_decref(inst);
    return rc;
}

/* Parses a header's text into the JSON type its schema asks for (new). */
static json_t *header_value(const oas *o, const json_t *schema, const char *text)
{
    const json_t *s = deref(o, schema, NULL, 0);
    const char *type = json_string_value(json_object_get(s, "type"));
    char *end = NULL;

    if (type && strcmp(type, "integer") == 0) {
        long long v;
        errno = 0;
        v = strtoll(text, &end, 10);
        if (errno == 0 && end != text && *end == '\0')
            return json_integer(v);
    } else if (type && strcmp(type, "number") == 0) {
        double d = strtod(text, &end);
        if (end != text && *end == '\0')
            return json_real(d);
    } else if (type && strcmp(type, "boolean") == 0) {
        if (strcmp(text, "true") == 0)
            return json_true();
        if (strcmp(text, "false") == 0)
            return json_false();
    }
    return json_string(text);
}

int oas_check_response_headers(const oas *o, const char *method, const char *concrete_path,
                               int status, oas_header_fn get, void *ud, char *err, size_t errlen)
{
    char label[512], verr[512];
    const json_t *resp, *headers, *h;
    const char *name;
    int rc = -1;

    if (errlen)
        err[0] = '\0';
    resp = find_response(o, method, concrete_path, status, label, sizeof label, err, errlen);
    if (!resp)
        goto out;
    headers = json_object_get(resp, "headers");
    json_object_foreach((json_t *)headers, name, h) {
        const json_t *hd = deref(o, h, verr, sizeof verr);
        const json_t *schema;
        const char *value;
        json_t *inst;
        int bad;

        if (strcasecmp(name, "content-type") == 0)
            continue;
        if (!hd) {
            snprintf(err, errlen, "%s: header %s: %s", label, name, verr);
            goto out;
        }
        value = get(name, ud);
        if (!value) {
            if (json_is_true(json_object_get(hd, "required"))) {
                snprintf(err, errlen, "%s: required header %s is missing", label, name);
                goto out;
            }
            continue;
        }
        schema = json_object_get(hd, "schema");
        if (!schema)
            continue;
        inst = header_value(o, schema, value);
        bad = !inst || oas_validate(o->doc, schema, inst, o->flags, verr, sizeof verr) < 0;
        json_decref(inst);
        if (bad) {
            snprintf(err, errlen, "%s: header %s: %s", label, name, inst ? verr : "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    return rc;
}

int oas_foreach_operation(const oas *o, oas_op_fn fn, void *ud)
{
    const json_t *paths = json_object_get(o->doc, "paths");
    const char *path, *key;
    const json_t *item, *op;

    json_object_foreach((json_t *)paths, path, item) {
        const json_t *it = deref(o, item, NULL, 0);
        json_object_foreach((json_t *)it, key, op) {
            char upper[16];
            size_t i;
            int known = 0, rc;

            for (i = 0; oas_methods[i]; i++)
                if (strcmp(key, oas_methods[i]) == 0)
                    known = 1;
            if (!known)
                continue;
            for (i = 0; key[i] && i + 1 < sizeof upper; i++)
                upper[i] = (char)toupper((unsigned char)key[i]);
            upper[i] = '\0';
            rc = fn(upper, path, op, ud);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}
