/*
 * yaml.c - YAML job files to JSON through libyaml's event parser (anchors, aliases and merge
 * keys resolved here), and JSON to YAML through its emitter.
 */
#include "cli/yaml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

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

/*
 * The document is read as libyaml's events, not through its document loader: the loader
 * builds the whole tree before anything can be checked, and libyaml's scanner looks at every
 * open level for each token, so a deeply nested file cost time quadratic in its depth before
 * it was refused. Here the nesting is checked at each collection's start, so reading stops at
 * the first level past CLI_YAML_MAX_DEPTH, and the scanner never holds more than that many
 * levels (and what it reads ahead): time is linear in the file. Anchors are kept in a hash
 * table (jansson's), not searched, so aliases cost no more than what they expand to.
 */

/* An open sequence or mapping. */
typedef struct frame {
    json_t *v;          /* the array or object being built (owned) */
    json_t *merges;     /* object: the values of its merge keys (<<), in order (owned) */
    json_t *lines;      /* object: each key it sets itself -> the line it was first set at */
    char *key;          /* object: the key waiting for its value (owned), NULL: none */
    int key_is_merge;   /* that key is <<: its value is merged, not set */
    char *anchor;       /* its anchor (owned), NULL: none */
    yaml_mark_t mark;   /* where it starts */
    size_t values_at;   /* conv.values when it started */
    int height;         /* levels of nesting in it, itself included */
} frame;

typedef struct conv {
    frame stack[CLI_YAML_MAX_DEPTH];
    int depth;          /* open collections */
    json_t *anchors;    /* name -> [value, values it expands to, its height] */
    json_t *root;
    int documents;
    size_t values;      /* produced so far; aliases count what they expand to each time */
    ty_err code;        /* why the conversion failed */
    char *err;
    size_t errlen;
} conv;

__attribute__((format(printf, 4, 5))) static int fail(conv *c, yaml_mark_t m, ty_err code,
                                                      const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    c->code = code;
    snprintf(c->err, c->errlen, "%lu:%lu: %s", (unsigned long)m.line + 1,
             (unsigned long)m.column + 1, why);
    return -1;
}

static int oom(conv *c, yaml_mark_t m)
{
    return fail(c, m, TY_ENOMEM, "out of memory");
}

/* Counts n more values against CLI_YAML_MAX_VALUES. */
static int count(conv *c, yaml_mark_t m, size_t n)
{
    c->values += n;
    if (c->values > CLI_YAML_MAX_VALUES)
        return fail(c, m, TY_ETOOLARGE, "too many values once aliases are expanded (over %d)",
                    CLI_YAML_MAX_VALUES);
    return 0;
}

/* Remembers v (borrowed) under anchor name (NULL: none); a later anchor of the name wins. */
static int anchor(conv *c, yaml_mark_t m, const yaml_char_t *name, json_t *v, size_t values,
                  int height)
{
    if (!name)
        return 0;
    json_t *a = json_pack("[O, I, i]", v, (json_int_t)values, height);
    if (!a || json_object_set_new(c->anchors, (const char *)name, a) != 0)
        return oom(c, m);
    return 0;
}

/* A merge key's value: a mapping, or a list of mappings. */
static int is_merge_source(const json_t *v)
{
    size_t i;
    json_t *x;
    if (json_is_object(v))
        return 1;
    if (!json_is_array(v))
        return 0;
    json_array_foreach(v, i, x)
    {
        if (!json_is_object(x))
            return 0;
    }
    return 1;
}

/*
 * Puts a finished value v (stolen) where it belongs: the document's root, the open sequence,
 * or under the open mapping's waiting key (its merges for <<). height: levels of nesting in v.
 */
static int put(conv *c, yaml_mark_t m, json_t *v, int height)
{
    if (c->depth == 0) {
        c->root = v;
        return 0;
    }
    frame *f = &c->stack[c->depth - 1];
    if (f->height < height + 1)
        f->height = height + 1;
    if (json_is_array(f->v))
        return json_array_append_new(f->v, v) ? oom(c, m) : 0;
    char *key = f->key;
    f->key = NULL;
    int rc = 0;
    if (f->key_is_merge && !is_merge_source(v)) {
        json_decref(v);
        rc = fail(c, m, TY_EINVAL, "a merge key (<<) takes a mapping or a list of them");
    } else if (f->key_is_merge) {
        rc = json_array_append_new(f->merges, v) ? oom(c, m) : 0;
    } else {
        rc = json_object_set_new(f->v, key, v) ? oom(c, m) : 0;
    }
    free(key);
    return rc;
}

/* Takes key as the open mapping's next key: refused when the mapping set it already. */
static int take_key(conv *c, yaml_mark_t m, const char *key, int plain)
{
    frame *f = &c->stack[c->depth - 1];
    json_t *first = json_object_get(f->lines, key);
    if (first)
        return fail(c, m, TY_EINVAL, "duplicate key \"%.64s\" (first at line %lld)", key,
                    (long long)json_integer_value(first));
    if (json_object_set_new(f->lines, key, json_integer((json_int_t)m.line + 1)) != 0 ||
        !(f->key = strdup(key)))
        return oom(c, m);
    f->key_is_merge = plain && strcmp(key, "<<") == 0;
    return 0;
}

/* Whether the open mapping waits for a key (rather than a value). */
static int wants_key(const conv *c)
{
    return c->depth > 0 && json_is_object(c->stack[c->depth - 1].v) && !c->stack[c->depth - 1].key;
}

static int on_scalar(conv *c, const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (wants_key(c))
        return take_key(c, ev->start_mark, s, plain);
    if (count(c, ev->start_mark, 1))
        return -1;
    json_t *v = plain ? core_scalar(s) : NULL;
    if (!v && !(v = json_stringn(s, ev->data.scalar.length)))
        return fail(c, ev->start_mark, TY_EINVAL, "a string that is not valid UTF-8");
    if (anchor(c, ev->start_mark, ev->data.scalar.anchor, v, 1, 0)) {
        json_decref(v);
        return -1;
    }
    return put(c, ev->start_mark, v, 0);
}

static int on_alias(conv *c, const yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;
    json_t *a = json_object_get(c->anchors, name);
    if (!a) {
        for (int i = 0; i < c->depth; i++)
            if (c->stack[i].anchor && strcmp(c->stack[i].anchor, name) == 0)
                return fail(c, ev->start_mark, TY_EINVAL, "alias *%.64s inside its own anchor",
                            name);
        return fail(c, ev->start_mark, TY_EINVAL, "undefined alias *%.64s", name);
    }
    json_t *val = json_array_get(a, 0);
    if (wants_key(c)) {
        if (!json_is_string(val))
            return fail(c, ev->start_mark, TY_EINVAL, "mapping keys must be strings");
        return take_key(c, ev->start_mark, json_string_value(val), 0);
    }
    int height = (int)json_integer_value(json_array_get(a, 2));
    if (c->depth + height > CLI_YAML_MAX_DEPTH)
        return fail(c, ev->start_mark, TY_ETOOLARGE,
                    "nested deeper than %d levels once *%.64s is expanded", CLI_YAML_MAX_DEPTH,
                    name);
    if (count(c, ev->start_mark, (size_t)json_integer_value(json_array_get(a, 1))))
        return -1;
    json_t *v = json_deep_copy(val); /* a copy: --set on one place must not change another */
    return v ? put(c, ev->start_mark, v, height) : oom(c, ev->start_mark);
}

static int on_start(conv *c, const yaml_event_t *ev, int mapping)
{
    const yaml_char_t *name =
        mapping ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    if (wants_key(c))
        return fail(c, ev->start_mark, TY_EINVAL, "mapping keys must be strings");
    if (c->depth >= CLI_YAML_MAX_DEPTH)
        return fail(c, ev->start_mark, TY_ETOOLARGE, "nested deeper than %d levels",
                    CLI_YAML_MAX_DEPTH);
    if (count(c, ev->start_mark, 1))
        return -1;
    frame *f = &c->stack[c->depth];
    memset(f, 0, sizeof *f);
    f->mark = ev->start_mark;
    f->values_at = c->values - 1;
    f->height = 1;
    c->depth++; /* from here on, the frame is freed with the stack */
    f->v = mapping ? json_object() : json_array();
    if (!f->v || (mapping && (!(f->merges = json_array()) || !(f->lines = json_object()))) ||
        (name && !(f->anchor = strdup((const char *)name))))
        return oom(c, ev->start_mark);
    return 0;
}

static void frame_free(frame *f)
{
    json_decref(f->v);
    json_decref(f->merges);
    json_decref(f->lines);
    free(f->key);
    free(f->anchor);
    memset(f, 0, sizeof *f);
}

/* Copies the members of src (a mapping's merge) that dst does not have. */
static int merge_into(conv *c, yaml_mark_t m, json_t *dst, json_t *src)
{
    const char *k;
    json_t *v;
    json_object_foreach(src, k, v)
    {
        if (!json_object_get(dst, k) && json_object_set(dst, k, v) != 0)
            return oom(c, m);
    }
    return 0;
}

static int on_end(conv *c, const yaml_event_t *ev)
{
    frame *f = &c->stack[c->depth - 1];
    /* Keys the mapping sets itself win over merged ones wherever the merge key stands; among
     * merges, the first that sets a key wins. */
    size_t i, j;
    json_t *src, *x;
    if (f->merges)
        json_array_foreach(f->merges, i, src)
        {
            if (json_is_object(src) && merge_into(c, ev->start_mark, f->v, src))
                return -1;
            if (json_is_array(src))
                json_array_foreach(src, j, x)
                {
                    if (merge_into(c, ev->start_mark, f->v, x))
                        return -1;
                }
        }
    json_t *v = json_incref(f->v);
    int height = f->height;
    int rc = f->anchor ? anchor(c, f->mark, (const yaml_char_t *)f->anchor, v,
                                c->values - f->values_at, height)
                       : 0;
    frame_free(f);
    c->depth--;
    if (rc) {
        json_decref(v);
        return -1;
    }
    return put(c, ev->start_mark, v, height);
}

/* Handles one event; 1 at the stream's end, 0 to go on, -1 on an error (in c). */
static int on_event(conv *c, const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (c->documents++ > 0)
            return fail(c, ev->start_mark, TY_EINVAL, "one document per file");
        return 0;
    case YAML_SCALAR_EVENT:
        return on_scalar(c, ev);
    case YAML_ALIAS_EVENT:
        return on_alias(c, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(c, ev, 0);
    case YAML_MAPPING_START_EVENT:
        return on_start(c, ev, 1);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(c, ev);
    case YAML_STREAM_END_EVENT:
        if (!c->root)
            return fail(c, ev->start_mark, TY_EINVAL, "the file holds no document");
        return 1;
    default:
        return 0;
    }
}

ty_err cli_yaml_to_json(const char *text, size_t len, json_t **out, char *err, size_t errlen)
{
    yaml_parser_t parser;
    conv c = {.code = TY_ENOMEM, .err = err, .errlen = errlen};
    int rc = 0;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!(c.anchors = json_object()) || !yaml_parser_initialize(&parser)) {
        json_decref(c.anchors);
        snprintf(err, errlen, "1:1: out of memory");
        return TY_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    while (rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            c.code = parser.error == YAML_MEMORY_ERROR ? TY_ENOMEM : TY_EINVAL;
            snprintf(err, errlen, "%lu:%lu: %s%s%s",
                     (unsigned long)parser.problem_mark.line + 1,
                     (unsigned long)parser.problem_mark.column + 1,
                     parser.problem ? parser.problem : "syntax error",
                     parser.context ? " " : "", parser.context ? parser.context : "");
            rc = -1;
            break;
        }
        rc = on_event(&c, &ev);
        yaml_event_delete(&ev);
    }
    while (c.depth > 0)
        frame_free(&c.stack[--c.depth]);
    json_decref(c.anchors);
    yaml_parser_delete(&parser);
    if (rc < 0) {
        json_decref(c.root);
        return c.code;
    }
    *out = c.root;
    return TY_OK;
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
