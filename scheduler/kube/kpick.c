/*
 * kpick.c - see kpick.h. A reader over the text: objects and arrays are walked member by
 * member, keeping what the pick names (all of a value it names whole); everything else is
 * skipped by its structure. Kept strings without escapes and the literals are built here;
 * numbers and strings with escapes are handed to jansson by their extent.
 */
#include "scheduler/kube/kpick.h"

#include <stdio.h>
#include <string.h>

#define KPICK_MAX_DEPTH 2048

typedef struct rd {
    const char *p, *end;
    const char *why;              /* the first failure, or NULL */
} rd;

static void ws(rd *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int fail(rd *r, const char *why)
{
    if (!r->why)
        r->why = why;
    return -1;
}

/* Past one string (r->p at its '"'); *esc set when it holds an escape. */
static int skip_string(rd *r, int *esc)
{
    const char *p = r->p, *end = r->end;
    if (p >= end || *p != '"')
        return fail(r, "a string was expected");
    p++;
    while (p < end) {
        unsigned char c = (unsigned char)*p++;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (c == '"') {
            r->p = p;
            return 0;
        }
        if (c != '\\') {
            r->p = p;
            return fail(r, "a control character in a string");
        }
        if (p >= end)
            break;
        p++;
        if (esc)
            *esc = 1;
    }
    r->p = end;
    return fail(r, "a string is not closed");
}

/* Past one value, by its structure. */
static int skip_value(rd *r)
{
    ws(r);
    const char *p = r->p, *end = r->end;
    if (p >= end)
        return fail(r, "a value was expected");
    char c = *p;
    if (c == '"')
        return skip_string(r, NULL);
    if (c == '{' || c == '[') {
        int depth = 0;
        while (p < end) {
            c = *p;
            if (c == '"') {
                r->p = p;
                if (skip_string(r, NULL))
                    return -1;
                p = r->p;
                continue;
            }
            if (c == '{' || c == '[') {
                if (++depth > KPICK_MAX_DEPTH) {
                    r->p = p;
                    return fail(r, "nested too deep");
                }
            } else if ((c == '}' || c == ']') && --depth == 0) {
                r->p = p + 1;
                return 0;
            }
            p++;
        }
        r->p = p;
        return fail(r, "an object or array is not closed");
    }
    const char *s = p;
    while (p < end && ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || *p == '-' ||
                       *p == '+' || *p == '.' || *p == 'E'))
        p++;
    r->p = p;
    return p > s ? 0 : fail(r, "a value was expected");
}

/* A scalar kept: a string without escapes and true, false and null are built here (jansson's
 * own constructors check a string's UTF-8 as its parser does); a number or a string with
 * escapes is handed to jansson by its extent. */
static json_t *scalar(rd *r)
{
    json_error_t jerr;
    ws(r);
    const char *s = r->p;
    json_t *v;
    int esc = 0;
    if (r->p < r->end && *r->p == '"') {
        if (skip_string(r, &esc))
            return NULL;
        v = esc ? json_loadb(s, (size_t)(r->p - s), JSON_DECODE_ANY, &jerr)
                : json_stringn(s + 1, (size_t)(r->p - s) - 2);
    } else {
        if (skip_value(r))
            return NULL;
        size_t n = (size_t)(r->p - s);
        if (n == 4 && !memcmp(s, "true", 4))
            v = json_true();
        else if (n == 5 && !memcmp(s, "false", 5))
            v = json_false();
        else if (n == 4 && !memcmp(s, "null", 4))
            v = json_null();
        else
            v = json_loadb(s, n, JSON_DECODE_ANY, &jerr);
    }
    if (!v)
        fail(r, "a value kept is not valid JSON");
    return v;
}

static json_t *walk_object(rd *r, const json_t *pick, int depth);
static json_t *walk_array(rd *r, const json_t *pick, int depth);

/* One value kept whole, nested in n objects or arrays of it (as jansson counts its depth:
 * at most 2048 of them). */
static json_t *whole(rd *r, int n)
{
    ws(r);
    if (r->p >= r->end || (*r->p != '{' && *r->p != '['))
        return scalar(r);
    if (n >= KPICK_MAX_DEPTH) {
        fail(r, "nested too deep");
        return NULL;
    }
    return *r->p == '{' ? walk_object(r, NULL, n + 1) : walk_array(r, NULL, n + 1);
}

static json_t *pick_value(rd *r, const json_t *pick, int depth);

/* An array: each element by pick, or whole when pick is NULL (depth: how deep the array is,
 * counted from the document with a pick, from the value kept whole without). */
static json_t *walk_array(rd *r, const json_t *pick, int depth)
{
    json_t *out = json_array();
    if (!out) {
        fail(r, "out of memory");
        return NULL;
    }
    r->p++; /* '[' */
    ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return out;
    }
    for (;;) {
        json_t *v = pick ? pick_value(r, pick, depth + 1) : whole(r, depth);
        if (!v)
            break;
        if (json_array_append_new(out, v)) {
            fail(r, "out of memory");
            break;
        }
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return out;
        }
        fail(r, "',' or ']' was expected");
        break;
    }
    json_decref(out);
    return NULL;
}

/* An object: the members pick names (all of them, whole, when pick is NULL). */
static json_t *walk_object(rd *r, const json_t *pick, int depth)
{
    json_t *out = json_object();
    if (!out) {
        fail(r, "out of memory");
        return NULL;
    }
    r->p++; /* '{' */
    ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return out;
    }
    for (;;) {
        int esc = 0;
        ws(r);
        const char *ks = r->p;
        if (skip_string(r, &esc))
            break;
        const char *key = ks + 1;
        size_t klen = (size_t)(r->p - ks) - 2;
        json_t *decoded = NULL;
        if (esc) {
            /* Rare in Kubernetes' keys: let jansson unescape it. */
            decoded = json_loadb(ks, (size_t)(r->p - ks), JSON_DECODE_ANY, NULL);
            if (!json_is_string(decoded)) {
                json_decref(decoded);
                fail(r, "a key is not a valid string");
                break;
            }
            key = json_string_value(decoded);
            klen = json_string_length(decoded);
        }
        ws(r);
        if (r->p >= r->end || *r->p != ':') {
            json_decref(decoded);
            fail(r, "':' was expected");
            break;
        }
        r->p++;
        const json_t *sub = pick ? json_object_getn(pick, key, klen) : NULL;
        int bad;
        if (pick && !sub) {
            bad = skip_value(r) != 0;
        } else {
            json_t *v = pick ? pick_value(r, json_is_object(sub) ? sub : NULL, depth + 1)
                             : whole(r, depth);
            bad = !v;
            /* jansson refuses a key that is not UTF-8, as its parser does */
            if (v && json_object_setn_new(out, key, klen, v)) {
                fail(r, "a key is not valid UTF-8, or out of memory");
                bad = 1;
            }
        }
        json_decref(decoded);
        if (bad)
            break;
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return out;
        }
        fail(r, "',' or '}' was expected");
        break;
    }
    json_decref(out);
    return NULL;
}

/* A value at depth (counted from the document) by pick: whole when pick is NULL or the value
 * is not an object or array. */
static json_t *pick_value(rd *r, const json_t *pick, int depth)
{
    ws(r);
    if (depth > KPICK_MAX_DEPTH) {
        fail(r, "nested too deep");
        return NULL;
    }
    if (!pick || r->p >= r->end || (*r->p != '{' && *r->p != '['))
        return whole(r, 0);
    return *r->p == '{' ? walk_object(r, pick, depth) : walk_array(r, pick, depth);
}

json_t *ty_kpick_parse(const char *text, size_t len, const json_t *pick, char *err,
                       size_t errlen)
{
    rd r = {text, text + len, NULL};
    json_t *v = text ? pick_value(&r, json_is_object(pick) ? pick : NULL, 0) : NULL;
    if (v) {
        ws(&r);
        if (r.p != r.end) {
            fail(&r, "text after the value");
            json_decref(v);
            v = NULL;
        }
    }
    if (!v && err && errlen)
        snprintf(err, errlen, "%s at byte %zu", r.why ? r.why : "no text",
                 text ? (size_t)(r.p - text) : 0);
    return v;
}

int ty_kpick_string(const char *text, size_t len, const char *const *path, size_t n, char *out,
                    size_t outlen)
{
    rd r = {text, text + len, NULL};
    const char *s;
    int esc = 0;
    if (!text || !outlen)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t want = strlen(path[i]);
        ws(&r);
        if (r.p >= r.end || *r.p != '{')
            return -1;
        r.p++;
        for (;;) {
            ws(&r);
            s = r.p;
            esc = 0;
            if (skip_string(&r, &esc))
                return -1;
            size_t klen = (size_t)(r.p - s) - 2;
            ws(&r);
            if (r.p >= r.end || *r.p != ':')
                return -1;
            r.p++;
            if (!esc && klen == want && !memcmp(s + 1, path[i], want))
                break;
            if (skip_value(&r))
                return -1;
            ws(&r);
            if (r.p >= r.end || *r.p != ',')
                return -1; /* the object ends (or breaks) without it */
            r.p++;
        }
    }
    ws(&r);
    s = r.p;
    esc = 0;
    if (skip_string(&r, &esc) || esc)
        return -1;
    snprintf(out, outlen, "%.*s", (int)(r.p - s) - 2, s + 1);
    return 0;
}
