/*
 * yaml.c - YAML job files to JSON through libyaml's document loader (which resolves aliases to
 * their anchored node), and JSON to YAML through its emitter.
 */
#include "cli/yaml.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct conv {
    yaml_document_t *doc;
    size_t values; /* produced so far; aliases count each time they are expanded */
    ty_err code;   /* why the conversion failed */
    char *err;
    size_t errlen;
} conv;

static int is_one_of(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0)
            return 1;
    return 0;
}

/* An integer or float of the YAML 1.2 core schema as JSON, or NULL when s is neither. */
static json_t *core_number(const char *s)
{
    static const char *const inf_nan[] = {".inf", "-.inf", "+.inf", ".Inf", ".INF",
                                          ".nan", ".NaN",  ".NAN",  NULL};
    char *end;
    const char *p = s;
    int digits = 0, dot = 0, exp = 0;

    if (is_one_of(s, inf_nan)) /* JSON has no infinity or NaN: these stay strings */
        return NULL;
    if ((s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) && s[2]) {
        errno = 0;
        long long v = strtoll(s + 2, &end, s[1] == 'x' ? 16 : 8);
        return *end || errno ? NULL : json_integer(v);
    }
    if (*p == '-' || *p == '+')
        p++;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            digits++;
        } else if (*p == '.' && !dot && !exp) {
            dot = 1;
        } else if ((*p == 'e' || *p == 'E') && digits && !exp) {
            exp = 1;
            if (p[1] == '-' || p[1] == '+')
                p++;
            if (!(p[1] >= '0' && p[1] <= '9'))
                return NULL;
        } else {
            return NULL;
        }
    }
    if (!digits)
        return NULL;
    errno = 0;
    if (!dot && !exp) {
        long long v = strtoll(s, &end, 10);
        if (!*end && !errno)
            return json_integer(v);
    }
    errno = 0;
    double d = strtod(s, &end);
    return *end || errno ? NULL : json_real(d);
}

/* A plain scalar as the core schema reads it (new); NULL for a string. */
static json_t *core_scalar(const char *s)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    if (is_one_of(s, nulls))
        return json_null();
    if (is_one_of(s, trues))
        return json_true();
    if (is_one_of(s, falses))
        return json_false();
    return core_number(s);
}

static json_t *node_to_json(conv *c, yaml_node_t *n, int depth);

static int fail(conv *c, const yaml_node_t *n, ty_err code, const char *why)
{
    c->code = code;
    snprintf(c->err, c->errlen, "line %lu: %s", n ? (unsigned long)n->start_mark.line + 1 : 0UL,
             why);
    return -1;
}

/* Copies the members of src (a mapping's merge) that dst does not have. */
static int merge_into(conv *c, json_t *dst, yaml_node_t *src, int depth)
{
    if (src->type != YAML_MAPPING_NODE)
        return fail(c, src, TY_EINVAL, "a merge key (<<) takes a mapping or a list of them");
    json_t *m = node_to_json(c, src, depth + 1);
    if (!m)
        return -1;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (!json_object_get(dst, k))
            json_object_set(dst, k, v);
    }
    json_decref(m);
    return 0;
}

static json_t *mapping_to_json(conv *c, yaml_node_t *n, int depth)
{
    json_t *obj = json_object();
    yaml_node_pair_t *pair;
    if (!obj)
        return NULL;
    /* Keys the mapping sets itself win over merged ones wherever the merge key stands. */
    for (int pass = 0; pass < 2; pass++) {
        for (pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
            yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
            yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
            if (!k || !v || k->type != YAML_SCALAR_NODE) {
                fail(c, k ? k : n, TY_EINVAL, "mapping keys must be strings");
                goto bad;
            }
            const char *key = (const char *)k->data.scalar.value;
            int is_merge =
                k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(key, "<<") == 0;
            if (is_merge != pass)
                continue;
            if (is_merge && v->type == YAML_SEQUENCE_NODE) {
                yaml_node_item_t *it;
                for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                    if (merge_into(c, obj, yaml_document_get_node(c->doc, *it), depth) != 0)
                        goto bad;
            } else if (is_merge) {
                if (merge_into(c, obj, v, depth) != 0)
                    goto bad;
            } else {
                json_t *jv = node_to_json(c, v, depth + 1);
                if (!jv || json_object_set_new(obj, key, jv) != 0)
                    goto bad;
            }
        }
    }
    return obj;
bad:
    json_decref(obj);
    return NULL;
}

static json_t *node_to_json(conv *c, yaml_node_t *n, int depth)
{
    if (depth > CLI_YAML_MAX_DEPTH) {
        fail(c, n, TY_ETOOLARGE, "nested too deeply (or an alias inside its own anchor)");
        return NULL;
    }
    if (++c->values > CLI_YAML_MAX_VALUES) {
        fail(c, n, TY_ETOOLARGE, "too many values once aliases are expanded");
        return NULL;
    }
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        const char *s = (const char *)n->data.scalar.value;
        json_t *v = NULL;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            v = core_scalar(s);
        return v ? v : json_stringn(s, n->data.scalar.length);
    }
    case YAML_SEQUENCE_NODE: {
        json_t *arr = json_array();
        yaml_node_item_t *it;
        for (it = n->data.sequence.items.start; arr && it < n->data.sequence.items.top; it++) {
            json_t *v = node_to_json(c, yaml_document_get_node(c->doc, *it), depth + 1);
            if (!v || json_array_append_new(arr, v) != 0) {
                json_decref(arr);
                return NULL;
            }
        }
        return arr;
    }
    case YAML_MAPPING_NODE:
        return mapping_to_json(c, n, depth);
    default:
        fail(c, n, TY_EINVAL, "empty node");
        return NULL;
    }
}

ty_err cli_yaml_to_json(const char *text, size_t len, json_t **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc, next;
    int have_doc = 0, have_next = 0;
    ty_err e = TY_EINVAL;
    conv c = {.doc = &doc, .code = TY_ENOMEM, .err = err, .errlen = errlen};

    *out = NULL;
    if (!yaml_parser_initialize(&parser))
        return TY_ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc))
        goto syntax;
    have_doc = 1;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        snprintf(err, errlen, "the file holds no document");
        goto out;
    }
    if (!yaml_parser_load(&parser, &next))
        goto syntax;
    have_next = 1;
    if (yaml_document_get_root_node(&next)) {
        snprintf(err, errlen, "line %lu: one document per file",
                 (unsigned long)next.start_mark.line + 1);
        goto out;
    }
    *out = node_to_json(&c, root, 0);
    if (!*out) {
        if (c.code == TY_ENOMEM)
            snprintf(err, errlen, "out of memory");
        e = c.code;
        goto out;
    }
    e = TY_OK;
    goto out;
syntax:
    snprintf(err, errlen, "line %lu: %s%s%s", (unsigned long)parser.problem_mark.line + 1,
             parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
             parser.context ? parser.context : "");
out:
    if (have_next)
        yaml_document_delete(&next);
    if (have_doc)
        yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return e;
}

ty_err cli_json_set(json_t *root, const char *assignment, char *err, size_t errlen)
{
    const char *eq = strchr(assignment, '=');
    char path[512];
    if (!eq || eq == assignment) {
        snprintf(err, errlen, "--set %s: expected KEY=VALUE", assignment);
        return TY_EINVAL;
    }
    if ((size_t)(eq - assignment) >= sizeof path) {
        snprintf(err, errlen, "--set: key too long");
        return TY_EINVAL;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "--set: the job file is not a mapping");
        return TY_EINVAL;
    }
    memcpy(path, assignment, (size_t)(eq - assignment));
    path[eq - assignment] = '\0';

    json_t *obj = root;
    char *seg = path;
    for (;;) {
        char *dot = strchr(seg, '.');
        if (dot)
            *dot = '\0';
        if (!*seg) {
            snprintf(err, errlen, "--set %.*s: empty key in the path", (int)(eq - assignment),
                     assignment);
            return TY_EINVAL;
        }
        if (!dot) {
            json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
            if (!v)
                v = json_string(eq + 1);
            if (!v || json_object_set_new(obj, seg, v) != 0) {
                snprintf(err, errlen, "--set %s: the value is not valid UTF-8", seg);
                return TY_EINVAL;
            }
            return TY_OK;
        }
        json_t *child = json_object_get(obj, seg);
        if (!child) {
            child = json_object();
            if (!child || json_object_set_new(obj, seg, child) != 0)
                return TY_ENOMEM;
        } else if (!json_is_object(child)) {
            snprintf(err, errlen, "--set %.*s: '%s' is not a mapping", (int)(eq - assignment),
                     assignment, seg);
            return TY_EINVAL;
        }
        obj = child;
        seg = dot + 1;
    }
}

/* ---- JSON to YAML ----------------------------------------------------------- */

static int emit(yaml_emitter_t *em, yaml_event_t *ev)
{
    return yaml_emitter_emit(em, ev) ? 0 : -1;
}

static int emit_scalar(yaml_emitter_t *em, const char *s, size_t len, yaml_scalar_style_t style)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)len, 1, 1, style))
        return -1;
    return emit(em, &ev);
}

static int emit_value(yaml_emitter_t *em, const json_t *v)
{
    yaml_event_t ev;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_ANY_MAPPING_STYLE) ||
            emit(em, &ev))
            return -1;
        json_object_foreach((json_t *)v, k, m)
        {
            json_t *key = json_string(k);
            int rc = key ? emit_value(em, key) : -1;
            json_decref(key);
            if (rc || emit_value(em, m))
                return -1;
        }
        if (!yaml_mapping_end_event_initialize(&ev))
            return -1;
        return emit(em, &ev);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *m;
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_ANY_SEQUENCE_STYLE) ||
            emit(em, &ev))
            return -1;
        json_array_foreach(v, i, m)
        {
            if (emit_value(em, m))
                return -1;
        }
        if (!yaml_sequence_end_event_initialize(&ev))
            return -1;
        return emit(em, &ev);
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        /* A string that would read back as another type is quoted. */
        json_t *as = core_scalar(s);
        yaml_scalar_style_t style = as ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE;
        json_decref(as);
        return emit_scalar(em, s, json_string_length(v), style);
    }
    default: {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        int rc = s ? emit_scalar(em, s, strlen(s), YAML_PLAIN_SCALAR_STYLE) : -1;
        free(s);
        return rc;
    }
    }
}

ty_err cli_json_to_yaml(const json_t *v, FILE *f)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    int rc = -1;
    if (!yaml_emitter_initialize(&em))
        return TY_ENOMEM;
    yaml_emitter_set_output_file(&em, f);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) || emit(&em, &ev))
        goto out;
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) || emit(&em, &ev))
        goto out;
    if (emit_value(&em, v))
        goto out;
    if (!yaml_document_end_event_initialize(&ev, 1) || emit(&em, &ev))
        goto out;
    if (!yaml_stream_end_event_initialize(&ev) || emit(&em, &ev))
        goto out;
    rc = yaml_emitter_flush(&em) ? 0 : -1;
out:
    yaml_emitter_delete(&em);
    return rc ? TY_EIO : TY_OK;
}
