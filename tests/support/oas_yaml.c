/*
 * oas_yaml.c - YAML (1.2 core schema) to jansson, for OpenAPI documents.
 *
 * A recursive descent over libyaml's event stream. Anchors are recorded when
 * their node is complete, so an alias can only name a finished node and the
 * result is always a tree (shared subtrees are reference-counted, never
 * cyclic). Nesting is bounded to keep hostile input from exhausting the stack.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "tests/support/oas.h"

#define YAML_MAX_DEPTH 256
#define YAML_MAX_FILE (64u << 20)

typedef struct yctx {
    yaml_parser_t parser;
    json_t *anchors; /* name -> finished node */
    char *err;
    size_t errlen;
} yctx;

static void yerr(yctx *c, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void yerr(yctx *c, const yaml_mark_t *mark, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    if (c->errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (mark)
        snprintf(c->err, c->errlen, "line %zu column %zu: %s", (size_t)mark->line + 1,
                 (size_t)mark->column + 1, msg);
    else
        snprintf(c->err, c->errlen, "%s", msg);
}

static int next_event(yctx *c, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&c->parser, ev)) {
        yerr(c, &c->parser.problem_mark, "%s",
             c->parser.problem ? c->parser.problem : "YAML syntax error");
        return -1;
    }
    return 0;
}

static int all_in(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(set, s[i]))
            return 0;
    return n > 0;
}

static int equals_any(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && memcmp(s, *words, n) == 0)
            return 1;
    return 0;
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int is_core_float(const char *s, size_t n)
{
    size_t i = 0, digits = 0;

    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (digits == 0)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp_digits = 0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, exp_digits++;
        if (exp_digits == 0)
            return 0;
    }
    return i == n;
}

static json_t *make_integer(yctx *c, const yaml_mark_t *mark, const char *text, int base)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(text, &end, base);
    if (*end != '\0') {
        yerr(c, mark, "invalid integer '%s'", text);
        return NULL;
    }
    if (errno == ERANGE) {
        /* Too large for an int64: keep the magnitude as a JSON real, like
         * any JSON parser would. */
        double d = strtod(text, &end);
        return json_real(d);
    }
    return json_integer(v);
}

static json_t *plain_scalar(yctx *c, const yaml_event_t *ev)
{
    static const char *const nulls[] = {"~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;

    if (n == 0 || equals_any(s, n, nulls))
        return json_null();
    if (equals_any(s, n, trues))
        return json_true();
    if (equals_any(s, n, falses))
        return json_false();
    if (n > 2 && s[0] == '0' && s[1] == 'o' && all_in(s + 2, n - 2, "01234567"))
        return make_integer(c, &ev->start_mark, s + 2, 8);
    if (n > 2 && s[0] == '0' && s[1] == 'x' && all_in(s + 2, n - 2, "0123456789abcdefABCDEF"))
        return make_integer(c, &ev->start_mark, s + 2, 16);
    if (all_in(s, n, "0123456789") ||
        ((s[0] == '-' || s[0] == '+') && all_in(s + 1, n - 1, "0123456789")))
        return make_integer(c, &ev->start_mark, s, 10);
    if (is_core_float(s, n)) {
        char *end = NULL;
        double d;

        errno = 0;
        d = strtod(s, &end);
        if (errno == ERANGE && (d > 1.0 || d < -1.0)) {
            yerr(c, &ev->start_mark, "number '%s' out of range", s);
            return NULL;
        }
        return json_real(d);
    }
    return json_stringn(s, n);
}

static json_t *scalar(yctx *c, const yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag;
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    json_t *v;

    if (tag && strcmp(tag, "!") != 0) {
        if (strcmp(tag, YAML_STR_TAG) == 0)
            return json_stringn(s, n);
        if (strcmp(tag, YAML_NULL_TAG) == 0 || strcmp(tag, YAML_BOOL_TAG) == 0 ||
            strcmp(tag, YAML_INT_TAG) == 0 || strcmp(tag, YAML_FLOAT_TAG) == 0) {
            v = plain_scalar(c, ev);
            if (v && ((strcmp(tag, YAML_NULL_TAG) == 0 && !json_is_null(v)) ||
                      (strcmp(tag, YAML_BOOL_TAG) == 0 && !json_is_boolean(v)) ||
                      (strcmp(tag, YAML_INT_TAG) == 0 && !json_is_integer(v)) ||
                      (strcmp(tag, YAML_FLOAT_TAG) == 0 && !json_is_number(v)))) {
                yerr(c, &ev->start_mark, "'%.*s' does not match its tag %s", (int)(n > 64 ? 64 : n),
                     s, tag);
                json_decref(v);
                return NULL;
            }
            if (v && strcmp(tag, YAML_FLOAT_TAG) == 0 && json_is_integer(v)) {
                json_t *r = json_real((double)json_integer_value(v));
                json_decref(v);
                v = r;
            }
            return v;
        }
        yerr(c, &ev->start_mark, "unsupported tag %s", tag);
        return NULL;
    }
    if (tag || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_stringn(s, n);
    return plain_scalar(c, ev);
}

static int record_anchor(yctx *c, const yaml_char_t *anchor, json_t *v)
{
    if (!anchor)
        return 0;
    return json_object_set(c->anchors, (const char *)anchor, v);
}

/* Builds the node that starts with *ev (owned by the caller); *out is new. */
static int node(yctx *c, yaml_event_t *ev, int depth, json_t **out)
{
    yaml_event_t sub = {0};
    json_t *v = NULL, *item = NULL;
    char *key = NULL;
    const yaml_char_t *anchor = NULL;
    int rc = -1;

    if (depth > YAML_MAX_DEPTH) {
        yerr(c, &ev->start_mark, "nesting deeper than %d", YAML_MAX_DEPTH);
        goto out;
    }
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        v = json_object_get(c->anchors, (const char *)ev->data.alias.anchor);
        if (!v) {
            yerr(c, &ev->start_mark, "unknown or unfinished anchor '%s'",
                 (const char *)ev->data.alias.anchor);
            goto out;
        }
        json_incref(v);
        break;
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        v = scalar(c, ev);
        if (!v)
            goto out;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        v = json_array();
        for (;;) {
            if (next_event(c, &sub) < 0)
                goto out;
            if (sub.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (node(c, &sub, depth + 1, &item) < 0)
                goto out;
            yaml_event_delete(&sub);
            if (json_array_append_new(v, item) < 0) {
                item = NULL;
                yerr(c, NULL, "out of memory");
                goto out;
            }
            item = NULL;
        }
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        v = json_object();
        for (;;) {
            if (next_event(c, &sub) < 0)
                goto out;
            if (sub.type == YAML_MAPPING_END_EVENT)
                break;
            if (sub.type != YAML_SCALAR_EVENT) {
                yerr(c, &sub.start_mark, "only scalar mapping keys are supported");
                goto out;
            }
            if (sub.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                strcmp((const char *)sub.data.scalar.value, "<<") == 0) {
                yerr(c, &sub.start_mark, "merge keys (<<) are not supported");
                goto out;
            }
            if (strlen((const char *)sub.data.scalar.value) != sub.data.scalar.length) {
                yerr(c, &sub.start_mark, "a mapping key contains a NUL character");
                goto out;
            }
            key = strdup((const char *)sub.data.scalar.value);
            if (!key) {
                yerr(c, NULL, "out of memory");
                goto out;
            }
            if (json_object_get(v, key)) {
                yerr(c, &sub.start_mark, "duplicate key '%s'", key);
                goto out;
            }
            yaml_event_delete(&sub);
            if (next_event(c, &sub) < 0)
                goto out;
            if (node(c, &sub, depth + 1, &item) < 0)
                goto out;
            yaml_event_delete(&sub);
            if (json_object_set_new(v, key, item) < 0) {
                item = NULL;
                yerr(c, NULL, "out of memory");
                goto out;
            }
            item = NULL;
            free(key);
            key = NULL;
        }
        break;
    default:
        yerr(c, &ev->start_mark, "unexpected YAML event %d", (int)ev->type);
        goto out;
    }
    if (record_anchor(c, anchor, v) < 0) {
        yerr(c, NULL, "out of memory");
        goto out;
    }
    *out = v;
    v = NULL;
    rc = 0;
out:
    yaml_event_delete(&sub);
    json_decref(item);
    json_decref(v);
    free(key);
    return rc;
}

int oas_yaml_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen)
{
    yctx c = {.err = err, .errlen = errlen};
    yaml_event_t ev = {0};
    json_t *doc = NULL;
    int parser_ok = 0, rc = -1;

    if (errlen)
        err[0] = '\0';
    c.anchors = json_object();
    if (!c.anchors || !yaml_parser_initialize(&c.parser)) {
        yerr(&c, NULL, "out of memory");
        goto out;
    }
    parser_ok = 1;
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
    if (next_event(&c, &ev) < 0)
        goto out;
    if (ev.type != YAML_STREAM_START_EVENT) {
        yerr(&c, &ev.start_mark, "no YAML stream");
        goto out;
    }
    yaml_event_delete(&ev);
    if (next_event(&c, &ev) < 0)
        goto out;
    if (ev.type != YAML_DOCUMENT_START_EVENT) {
        yerr(&c, &ev.start_mark, "empty YAML stream");
        goto out;
    }
    yaml_event_delete(&ev);
    if (next_event(&c, &ev) < 0)
        goto out;
    if (node(&c, &ev, 0, &doc) < 0)
        goto out;
    yaml_event_delete(&ev);
    if (next_event(&c, &ev) < 0)
        goto out;
    if (ev.type != YAML_DOCUMENT_END_EVENT) {
        yerr(&c, &ev.start_mark, "unexpected content after the document");
        goto out;
    }
    yaml_event_delete(&ev);
    if (next_event(&c, &ev) < 0)
        goto out;
    if (ev.type != YAML_STREAM_END_EVENT) {
        yerr(&c, &ev.start_mark, "more than one YAML document");
        goto out;
    }
    *out = doc;
    doc = NULL;
    rc = 0;
out:
    yaml_event_delete(&ev);
    if (parser_ok)
        yaml_parser_delete(&c.parser);
    json_decref(c.anchors);
    json_decref(doc);
    return rc;
}

int oas_yaml_load_file(const char *path, json_t **out, char *err, size_t errlen)
{
    FILE *f = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    char msg[256];
    int rc = -1;

    f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    for (;;) {
        if (cap - len < 65536) {
            char *grown;
            if (cap >= YAML_MAX_FILE) {
                snprintf(err, errlen, "%s: larger than %u bytes", path, YAML_MAX_FILE);
                goto out;
            }
            cap = cap ? cap * 2 : 65536 * 2;
            grown = realloc(text, cap);
            if (!grown) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto out;
            }
            text = grown;
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        goto out;
    }
    if (oas_yaml_parse(text, len, out, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        goto out;
    }
    rc = 0;
out:
    if (f)
        fclose(f);
    free(text);
    return rc;
}
