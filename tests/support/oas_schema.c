/*
 * oas_schema.c - validation of a JSON value against an OpenAPI / JSON Schema
 * schema object; see oas.h for the supported keywords and pattern subset.
 *
 * The validator walks schema and instance together, keeping the instance's
 * JSON path for error messages. Sub-validations whose failure is not final
 * (the alternatives of anyOf/oneOf, the operand of not) write into a local
 * buffer, so the message that reaches the caller is the one that decided.
 */
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/oas.h"

#define V_MAX_DEPTH 512 /* schema recursion without progress means a $ref cycle */
#define V_PATH_MAX 512

typedef struct vctx {
    const json_t *root;
    unsigned flags;
    char *err;
    size_t errlen;
    int depth;
    char path[V_PATH_MAX];
    size_t pathlen;
} vctx;

static void verr(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void verr(vctx *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (c->errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s: %s", c->path, msg);
}

/* ---- instance paths ------------------------------------------------------ */

static size_t path_push_raw(vctx *c, const char *s)
{
    size_t old = c->pathlen;
    int n = snprintf(c->path + c->pathlen, sizeof c->path - c->pathlen, "%s", s);

    if (n < 0 || (size_t)n >= sizeof c->path - c->pathlen)
        c->pathlen = sizeof c->path - 1;
    else
        c->pathlen += (size_t)n;
    return old;
}

static size_t path_push_key(vctx *c, const char *key)
{
    char seg[160];
    size_t i, o = 0;
    int ident = (key[0] != '\0');

    for (i = 0; key[i]; i++) {
        char ch = key[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
              (i > 0 && ch >= '0' && ch <= '9')))
            ident = 0;
    }
    if (ident && strlen(key) < sizeof seg - 2) {
        snprintf(seg, sizeof seg, ".%s", key);
        return path_push_raw(c, seg);
    }
    seg[o++] = '[';
    seg[o++] = '"';
    for (i = 0; key[i] && o < sizeof seg - 8; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch == '"' || ch == '\\') {
            seg[o++] = '\\';
            seg[o++] = (char)ch;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(seg + o, sizeof seg - o, "\\u%04x", ch);
        } else {
            seg[o++] = (char)ch;
        }
    }
    if (key[i])
        seg[o++] = '.', seg[o++] = '.', seg[o++] = '.';
    seg[o++] = '"';
    seg[o++] = ']';
    seg[o] = '\0';
    return path_push_raw(c, seg);
}

static size_t path_push_index(vctx *c, size_t i)
{
    char seg[32];
    snprintf(seg, sizeof seg, "[%zu]", i);
    return path_push_raw(c, seg);
}

static void path_pop(vctx *c, size_t old)
{
    c->pathlen = old;
    c->path[old] = '\0';
}

/* ---- $ref ---------------------------------------------------------------- */

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

const json_t *oas_resolve_ref(const json_t *root, const char *ref, char *err, size_t errlen)
{
    const json_t *cur = root;
    const char *p;
    char token[512];

    if (!root) {
        snprintf(err, errlen, "$ref '%s' without a root document", ref);
        return NULL;
    }
    if (ref[0] != '#') {
        snprintf(err, errlen, "external $ref '%s' is not supported", ref);
        return NULL;
    }
    p = ref + 1;
    while (*p) {
        size_t n = 0;

        if (*p != '/') {
            snprintf(err, errlen, "$ref '%s' is not a JSON pointer", ref);
            return NULL;
        }
        p++;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
                ch = (char)(hexval(p[0]) * 16 + hexval(p[1]));
                p += 2;
            }
            if (ch == '~' && (*p == '0' || *p == '1')) {
                ch = (*p == '0') ? '~' : '/';
                p++;
            }
            if (n + 1 >= sizeof token) {
                snprintf(err, errlen, "$ref '%s': segment too long", ref);
                return NULL;
            }
            token[n++] = ch;
        }
        token[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, token);
        } else if (json_is_array(cur)) {
            char *end = NULL;
            long idx = strtol(token, &end, 10);
            cur = (n > 0 && *end == '\0' && idx >= 0) ? json_array_get(cur, (size_t)idx) : NULL;
        } else {
            cur = NULL;
        }
        if (!cur) {
            snprintf(err, errlen, "$ref '%s' does not resolve", ref);
            return NULL;
        }
    }
    return cur;
}

/* ---- ECMA-262 pattern -> POSIX ERE --------------------------------------- */

typedef struct ere {
    char *s;
    size_t len, cap;
} ere;

static int ere_put(ere *e, const char *s, size_t n)
{
    if (e->len + n + 1 > e->cap) {
        size_t cap = (e->cap ? e->cap * 2 : 64) + n;
        char *grown = realloc(e->s, cap);
        if (!grown)
            return -1;
        e->s = grown;
        e->cap = cap;
    }
    memcpy(e->s + e->len, s, n);
    e->len += n;
    e->s[e->len] = '\0';
    return 0;
}

static int ere_puts(ere *e, const char *s)
{
    return ere_put(e, s, strlen(s));
}

static int control_escape(char ch, char *out)
{
    switch (ch) {
    case 't':
        *out = '\t';
        return 1;
    case 'n':
        *out = '\n';
        return 1;
    case 'r':
        *out = '\r';
        return 1;
    case 'f':
        *out = '\f';
        return 1;
    case 'v':
        *out = '\v';
        return 1;
    default:
        return 0;
    }
}

static int is_punct_escape(char ch)
{
    return ch && strchr("!\"#%&',-/:;<=>@_`~ ", ch) != NULL;
}

/* Translates one bracket expression starting after '['; *pp is left after ']'. */
static int translate_class(const char **pp, ere *e, const char *pat, char *err, size_t errlen)
{
    const char *p = *pp;
    ere body = {0};
    int neg = 0, rbracket = 0, dash = 0, caret = 0, rc = -1;

    if (*p == '^')
        neg = 1, p++;
    if (*p == ']') {
        snprintf(err, errlen, "pattern '%s': empty character class is not supported", pat);
        goto out;
    }
    for (;;) {
        char ch = *p;
        char lit;

        if (ch == '\0') {
            snprintf(err, errlen, "pattern '%s': unterminated character class", pat);
            goto out;
        }
        if (ch == ']') {
            p++;
            break;
        }
        if (ch == '\\') {
            char esc = p[1];
            p += 2;
            if (esc == 'd') {
                if (ere_puts(&body, "0-9") < 0)
                    goto nomem;
            } else if (esc == 'w') {
                if (ere_puts(&body, "A-Za-z0-9_") < 0)
                    goto nomem;
            } else if (esc == 's') {
                if (ere_puts(&body, "[:space:]") < 0)
                    goto nomem;
            } else if (esc == ']') {
                rbracket = 1;
            } else if (esc == '-') {
                dash = 1;
            } else if (esc == '^') {
                caret = 1;
            } else if (control_escape(esc, &lit)) {
                if (ere_put(&body, &lit, 1) < 0)
                    goto nomem;
            } else if (esc == '\\' || esc == '.' || esc == '[' || esc == '(' || esc == ')' ||
                       esc == '*' || esc == '+' || esc == '?' || esc == '{' || esc == '}' ||
                       esc == '|' || esc == '$' || is_punct_escape(esc)) {
                if (ere_put(&body, &esc, 1) < 0)
                    goto nomem;
            } else {
                snprintf(err, errlen, "pattern '%s': escape '\\%c' in a class is not supported",
                         pat, esc ? esc : '0');
                goto out;
            }
            continue;
        }
        if (ch == '-' && (body.len == 0 || p[1] == ']')) {
            dash = 1;
            p++;
            continue;
        }
        if (ch == '^') {
            caret = 1;
            p++;
            continue;
        }
        if (ch == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            snprintf(err, errlen, "pattern '%s': '[%c' inside a class is not supported", pat, p[1]);
            goto out;
        }
        if (ere_put(&body, &ch, 1) < 0)
            goto nomem;
        p++;
    }
    if (!neg && !rbracket && body.len == 0 && caret) {
        /* "[^]" would mean something else in POSIX. */
        if (ere_puts(e, dash ? "[-^]" : "\\^") < 0)
            goto nomem;
    } else {
        if (ere_puts(e, neg ? "[^" : "[") < 0 || (rbracket && ere_puts(e, "]") < 0) ||
            (body.len && ere_put(e, body.s, body.len) < 0) || (caret && ere_puts(e, "^") < 0) ||
            (dash && ere_puts(e, "-") < 0) || ere_puts(e, "]") < 0)
            goto nomem;
    }
    *pp = p;
    rc = 0;
    goto out;
nomem:
    snprintf(err, errlen, "out of memory");
out:
    free(body.s);
    return rc;
}

/* "{n}", "{n,}", "{n,m}" at p? Returns its length or 0. */
static size_t quantifier_len(const char *p)
{
    size_t i = 1, digits = 0;

    while (p[i] >= '0' && p[i] <= '9')
        i++, digits++;
    if (digits == 0)
        return 0;
    if (p[i] == ',') {
        i++;
        while (p[i] >= '0' && p[i] <= '9')
            i++;
    }
    return p[i] == '}' ? i + 1 : 0;
}

/* Translates an ECMA-262 pattern into a POSIX ERE; *out is new (free()). */
static int ecma_to_ere(const char *pat, char **out, char *err, size_t errlen)
{
    ere e = {0};
    const char *p = pat;
    int rc = -1;

    if (ere_puts(&e, "") < 0)
        goto nomem;
    while (*p) {
        char ch = *p;
        char lit;
        size_t q;

        if (ch == '\\') {
            char esc = p[1];
            const char *rep = NULL;
            char two[3] = {'\\', esc, '\0'};

            switch (esc) {
            case 'd':
                rep = "[0-9]";
                break;
            case 'D':
                rep = "[^0-9]";
                break;
            case 'w':
                rep = "[A-Za-z0-9_]";
                break;
            case 'W':
                rep = "[^A-Za-z0-9_]";
                break;
            case 's':
                rep = "[[:space:]]";
                break;
            case 'S':
                rep = "[^[:space:]]";
                break;
            case '.':
            case '[':
            case '(':
            case ')':
            case '*':
            case '+':
            case '?':
            case '{':
            case '|':
            case '^':
            case '$':
            case '\\':
                rep = two;
                break;
            case ']':
                rep = "]";
                break;
            case '}':
                rep = "}";
                break;
            default:
                if (control_escape(esc, &lit)) {
                    two[0] = lit;
                    two[1] = '\0';
                    rep = two;
                } else if (is_punct_escape(esc)) {
                    two[0] = esc;
                    two[1] = '\0';
                    rep = two;
                }
            }
            if (!rep) {
                snprintf(err, errlen, "pattern '%s': escape '\\%c' is not supported", pat,
                         esc ? esc : '0');
                goto out;
            }
            if (ere_puts(&e, rep) < 0)
                goto nomem;
            p += 2;
            continue;
        }
        if (ch == '[') {
            p++;
            if (translate_class(&p, &e, pat, err, errlen) < 0)
                goto out;
            continue;
        }
        if (ch == '(' && p[1] == '?') {
            if (p[2] != ':') {
                snprintf(err, errlen,
                         "pattern '%s': lookarounds and named groups are not supported", pat);
                goto out;
            }
            if (ere_puts(&e, "(") < 0)
                goto nomem;
            p += 3;
            continue;
        }
        if (ch == '{') {
            q = quantifier_len(p);
            if (q == 0) {
                /* ECMA (Annex B) reads a brace that starts no quantifier literally. */
                if (ere_puts(&e, "\\{") < 0)
                    goto nomem;
                p++;
                continue;
            }
            if (ere_put(&e, p, q) < 0)
                goto nomem;
            p += q;
            if (*p == '?')
                p++; /* lazy: same set of matching strings */
            continue;
        }
        if (ere_put(&e, &ch, 1) < 0)
            goto nomem;
        p++;
        if ((ch == '*' || ch == '+' || ch == '?') && *p == '?')
            p++;
    }
    *out = e.s;
    e.s = NULL;
    rc = 0;
    goto out;
nomem:
    snprintf(err, errlen, "out of memory");
out:
    free(e.s);
    return rc;
}

/*
 * Compiled patterns, kept for the life of the process: a schema's patterns
 * are few and are used for every instance. The list only grows; regexec()
 * on a compiled pattern may run in several threads at once (glibc locks
 * internally), so only lookup and insertion hold the mutex.
 */
typedef struct re_entry {
    struct re_entry *next;
    char *pattern;
    regex_t re;
    char *error; /* why the pattern was refused, or NULL */
} re_entry;

static re_entry *re_cache;
static pthread_mutex_t re_mu = PTHREAD_MUTEX_INITIALIZER;

static re_entry *re_compile(const char *pattern)
{
    re_entry *e = calloc(1, sizeof *e);
    char *ere_text = NULL, msg[512] = "";

    if (!e || !(e->pattern = strdup(pattern)))
        goto fail;
    if (ecma_to_ere(pattern, &ere_text, msg, sizeof msg) == 0) {
        int rc = regcomp(&e->re, ere_text, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[128];
            regerror(rc, &e->re, why, sizeof why);
            snprintf(msg, sizeof msg, "pattern '%.120s' (POSIX '%.120s'): %s", pattern, ere_text,
                     why);
        }
    }
    free(ere_text);
    if (msg[0] && !(e->error = strdup(msg)))
        goto fail;
    return e;
fail:
    if (e)
        free(e->pattern);
    free(e);
    return NULL;
}

/* 1 when s (n bytes) matches the ECMA pattern, 0 when not, -1 on error. */
static int pattern_match(const char *pattern, const char *s, size_t n, char *err, size_t errlen)
{
    re_entry *e;
    regmatch_t m[1];

    pthread_mutex_lock(&re_mu);
    for (e = re_cache; e; e = e->next)
        if (strcmp(e->pattern, pattern) == 0)
            break;
    if (!e) {
        e = re_compile(pattern);
        if (e) {
            e->next = re_cache;
            re_cache = e;
        }
    }
    pthread_mutex_unlock(&re_mu);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (e->error) {
        snprintf(err, errlen, "%s", e->error);
        return -1;
    }
    m[0].rm_so = 0;
    m[0].rm_eo = (regoff_t)n;
    return regexec(&e->re, s, 1, m, REG_STARTEND) == 0 ? 1 : 0;
}

/* ---- formats ------------------------------------------------------------- */

static int digits_at(const char *s, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        *v = *v * 10 + (s[i] - '0');
    }
    return 1;
}

/* RFC 3339 date-time: 2026-11-22T10:00:00.123Z, or with +HH:MM / -HH:MM. */
static int is_date_time(const char *s, size_t n)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec, oh, om, max;
    size_t i;

    if (n < 20 || strlen(s) != n)
        return 0;
    if (!digits_at(s, 4, &y) || s[4] != '-' || !digits_at(s + 5, 2, &mo) || s[7] != '-' ||
        !digits_at(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !digits_at(s + 11, 2, &h) ||
        s[13] != ':' || !digits_at(s + 14, 2, &mi) || s[16] != ':' || !digits_at(s + 17, 2, &sec))
        return 0;
    if (mo < 1 || mo > 12 || h > 23 || mi > 59 || sec > 60)
        return 0;
    max = mdays[mo - 1];
    if (mo == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        max = 29;
    if (d < 1 || d > max)
        return 0;
    i = 19;
    if (s[i] == '.') {
        size_t start = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == start)
            return 0;
    }
    if (i == n - 1 && (s[i] == 'Z' || s[i] == 'z'))
        return 1;
    if (n - i != 6 || (s[i] != '+' && s[i] != '-') || !digits_at(s + i + 1, 2, &oh) ||
        s[i + 3] != ':' || !digits_at(s + i + 4, 2, &om))
        return 0;
    return oh <= 23 && om <= 59;
}

static int is_base64(const char *s, size_t n)
{
    size_t i, pad = 0;

    if (n % 4 != 0)
        return 0;
    for (i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '=') {
            pad++;
            continue;
        }
        if (pad || !((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '+' || ch == '/'))
            return 0;
    }
    return pad <= 2;
}

/* ---- helpers ------------------------------------------------------------- */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static int type_is(const char *type, const json_t *v)
{
    if (strcmp(type, "string") == 0)
        return json_is_string(v);
    if (strcmp(type, "number") == 0)
        return json_is_number(v);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(v);
    if (strcmp(type, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(type, "array") == 0)
        return json_is_array(v);
    if (strcmp(type, "object") == 0)
        return json_is_object(v);
    if (strcmp(type, "null") == 0)
        return json_is_null(v);
    return 0;
}

static int is_true(const json_t *schema, const char *key)
{
    return json_is_true(json_object_get(schema, key));
}

/* Numeric comparison that is exact for two integers: <0, 0, >0. */
static int num_cmp(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    double x = json_number_value(a), y = json_number_value(b);
    return (x > y) - (x < y);
}

/* json_equal() that also takes 1 and 1.0 as equal, as JSON Schema does. */
static int value_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return num_cmp(a, b) == 0;
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!value_equal(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        const json_t *va;
        if (json_object_size(a) != json_object_size(b))
            return 0;
        json_object_foreach((json_t *)a, k, va) {
            const json_t *vb = json_object_get(b, k);
            if (!vb || !value_equal(va, vb))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            count++;
    return count;
}

static void brief(const json_t *v, char *out, size_t outlen)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) {
        snprintf(out, outlen, "(%s)", type_name(v));
        return;
    }
    if (strlen(text) > 60)
        snprintf(out, outlen, "%.57s...", text);
    else
        snprintf(out, outlen, "%s", text);
    free(text);
}

static int validate(vctx *c, const json_t *schema, const json_t *inst);

/* Runs a sub-validation whose error does not reach the caller by itself. */
static int validate_quiet(vctx *c, const json_t *schema, const json_t *inst, char *buf,
                          size_t buflen)
{
    char *saved = c->err;
    size_t savedlen = c->errlen;
    int rc;

    c->err = buf;
    c->errlen = buflen;
    if (buflen)
        buf[0] = '\0';
    rc = validate(c, schema, inst);
    c->err = saved;
    c->errlen = savedlen;
    return rc;
}

/* ---- keyword groups ------------------------------------------------------ */

static int check_type(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *type = json_object_get(schema, "type");
    const char *fmt = json_string_value(json_object_get(schema, "format"));
    int int_or_string =
        is_true(schema, "x-kubernetes-int-or-string") || (fmt && strcmp(fmt, "int-or-string") == 0);

    if (int_or_string) {
        if (json_is_integer(inst) || json_is_string(inst))
            return 0;
        verr(c, "expected integer or string, got %s", type_name(inst));
        return -1;
    }
    if (json_is_string(type)) {
        if (!type_is(json_string_value(type), inst)) {
            verr(c, "expected %s, got %s", json_string_value(type), type_name(inst));
            return -1;
        }
    } else if (json_is_array(type)) {
        size_t i;
        const json_t *t;
        json_array_foreach(type, i, t)
            if (json_is_string(t) && type_is(json_string_value(t), inst))
                return 0;
        verr(c, "type %s is not one of the allowed types", type_name(inst));
        return -1;
    } else if (type) {
        verr(c, "schema error: 'type' is neither a string nor an array");
        return -1;
    }
    return 0;
}

static int check_enum(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *en = json_object_get(schema, "enum");
    const json_t *cn = json_object_get(schema, "const");
    char text[80];

    if (en) {
        size_t i;
        const json_t *e;
        int found = 0;
        if (!json_is_array(en)) {
            verr(c, "schema error: 'enum' is not an array");
            return -1;
        }
        json_array_foreach(en, i, e)
            if (value_equal(e, inst)) {
                found = 1;
                break;
            }
        if (!found) {
            brief(inst, text, sizeof text);
            verr(c, "%s is not one of the enum values", text);
            return -1;
        }
    }
    if (cn && !value_equal(cn, inst)) {
        brief(inst, text, sizeof text);
        verr(c, "%s is not the const value", text);
        return -1;
    }
    return 0;
}

static int check_number(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *min = json_object_get(schema, "minimum");
    const json_t *max = json_object_get(schema, "maximum");
    const json_t *xmin = json_object_get(schema, "exclusiveMinimum");
    const json_t *xmax = json_object_get(schema, "exclusiveMaximum");
    const json_t *mult = json_object_get(schema, "multipleOf");
    const char *fmt = json_string_value(json_object_get(schema, "format"));
    char text[80];

    if (json_is_number(min)) {
        int cmp = num_cmp(inst, min);
        if (cmp < 0 || (cmp == 0 && json_is_true(xmin))) {
            brief(inst, text, sizeof text);
            verr(c, "%s is below the minimum %g%s", text, json_number_value(min),
                 json_is_true(xmin) ? " (exclusive)" : "");
            return -1;
        }
    }
    if (json_is_number(max)) {
        int cmp = num_cmp(inst, max);
        if (cmp > 0 || (cmp == 0 && json_is_true(xmax))) {
            brief(inst, text, sizeof text);
            verr(c, "%s is above the maximum %g%s", text, json_number_value(max),
                 json_is_true(xmax) ? " (exclusive)" : "");
            return -1;
        }
    }
    if (json_is_number(xmin) && num_cmp(inst, xmin) <= 0) {
        brief(inst, text, sizeof text);
        verr(c, "%s is not above the exclusive minimum %g", text, json_number_value(xmin));
        return -1;
    }
    if (json_is_number(xmax) && num_cmp(inst, xmax) >= 0) {
        brief(inst, text, sizeof text);
        verr(c, "%s is not below the exclusive maximum %g", text, json_number_value(xmax));
        return -1;
    }
    if (json_is_number(mult) && json_number_value(mult) > 0) {
        int ok;
        if (json_is_integer(inst) && json_is_integer(mult)) {
            ok = json_integer_value(inst) % json_integer_value(mult) == 0;
        } else {
            double q = json_number_value(inst) / json_number_value(mult);
            ok = fabs(q - nearbyint(q)) < 1e-9;
        }
        if (!ok) {
            brief(inst, text, sizeof text);
            verr(c, "%s is not a multiple of %g", text, json_number_value(mult));
            return -1;
        }
    }
    if (fmt && strcmp(fmt, "int32") == 0 && json_is_integer(inst) &&
        (json_integer_value(inst) < INT32_MIN || json_integer_value(inst) > INT32_MAX)) {
        brief(inst, text, sizeof text);
        verr(c, "%s does not fit format int32", text);
        return -1;
    }
    return 0;
}

static int check_string(vctx *c, const json_t *schema, const json_t *inst)
{
    const char *s = json_string_value(inst);
    size_t n = json_string_length(inst);
    const json_t *minl = json_object_get(schema, "minLength");
    const json_t *maxl = json_object_get(schema, "maxLength");
    const char *pattern = json_string_value(json_object_get(schema, "pattern"));
    const char *fmt = json_string_value(json_object_get(schema, "format"));
    size_t chars = utf8_chars(s, n);
    char text[80];

    if (json_is_integer(minl) && (json_int_t)chars < json_integer_value(minl)) {
        brief(inst, text, sizeof text);
        verr(c, "%s is shorter than minLength %lld", text, (long long)json_integer_value(minl));
        return -1;
    }
    if (json_is_integer(maxl) && (json_int_t)chars > json_integer_value(maxl)) {
        brief(inst, text, sizeof text);
        verr(c, "%s is longer than maxLength %lld", text, (long long)json_integer_value(maxl));
        return -1;
    }
    if (pattern) {
        char perr[256];
        int m = pattern_match(pattern, s, n, perr, sizeof perr);
        if (m < 0) {
            verr(c, "schema error: %s", perr);
            return -1;
        }
        if (m == 0) {
            brief(inst, text, sizeof text);
            verr(c, "%s does not match pattern '%s'", text, pattern);
            return -1;
        }
    }
    if (fmt && strcmp(fmt, "date-time") == 0 && !is_date_time(s, n)) {
        brief(inst, text, sizeof text);
        verr(c, "%s is not an RFC 3339 date-time", text);
        return -1;
    }
    if (fmt && strcmp(fmt, "byte") == 0 && !is_base64(s, n)) {
        brief(inst, text, sizeof text);
        verr(c, "%s is not base64 (format byte)", text);
        return -1;
    }
    return 0;
}

static int check_array(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *items = json_object_get(schema, "items");
    const json_t *mini = json_object_get(schema, "minItems");
    const json_t *maxi = json_object_get(schema, "maxItems");
    size_t n = json_array_size(inst), i, j;

    if (json_is_integer(mini) && (json_int_t)n < json_integer_value(mini)) {
        verr(c, "%zu items, fewer than minItems %lld", n, (long long)json_integer_value(mini));
        return -1;
    }
    if (json_is_integer(maxi) && (json_int_t)n > json_integer_value(maxi)) {
        verr(c, "%zu items, more than maxItems %lld", n, (long long)json_integer_value(maxi));
        return -1;
    }
    if (is_true(schema, "uniqueItems"))
        for (i = 0; i < n; i++)
            for (j = i + 1; j < n; j++)
                if (value_equal(json_array_get(inst, i), json_array_get(inst, j))) {
                    verr(c, "items %zu and %zu are equal (uniqueItems)", i, j);
                    return -1;
                }
    if (json_is_array(items)) {
        verr(c, "schema error: tuple 'items' (an array) is not supported");
        return -1;
    }
    if (items)
        for (i = 0; i < n; i++) {
            size_t old = path_push_index(c, i);
            int rc = validate(c, items, json_array_get(inst, i));
            path_pop(c, old);
            if (rc < 0)
                return -1;
        }
    return 0;
}

static int check_object(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required");
    const json_t *addl = json_object_get(schema, "additionalProperties");
    const json_t *minp = json_object_get(schema, "minProperties");
    const json_t *maxp = json_object_get(schema, "maxProperties");
    int strict = (c->flags & OAS_STRICT) && props && !addl &&
                 !is_true(schema, "x-kubernetes-preserve-unknown-fields");
    size_t n = json_object_size(inst), i;
    const char *key;
    const json_t *v, *r;

    if (json_is_array(req))
        json_array_foreach(req, i, r)
            if (json_is_string(r) && !json_object_get(inst, json_string_value(r))) {
                verr(c, "required member '%s' is missing", json_string_value(r));
                return -1;
            }
    if (json_is_integer(minp) && (json_int_t)n < json_integer_value(minp)) {
        verr(c, "%zu members, fewer than minProperties %lld", n,
             (long long)json_integer_value(minp));
        return -1;
    }
    if (json_is_integer(maxp) && (json_int_t)n > json_integer_value(maxp)) {
        verr(c, "%zu members, more than maxProperties %lld", n,
             (long long)json_integer_value(maxp));
        return -1;
    }
    json_object_foreach((json_t *)inst, key, v) {
        const json_t *ps = props ? json_object_get(props, key) : NULL;
        size_t old;
        int rc = 0;

        if (!ps && (json_is_false(addl) || strict)) {
            old = path_push_key(c, key);
            verr(c, "member is not allowed (not in properties%s)",
                 strict && !addl ? ", strict mode" : "");
            path_pop(c, old);
            return -1;
        }
        if (!ps && json_is_object(addl))
            ps = addl;
        if (!ps)
            continue;
        old = path_push_key(c, key);
        rc = validate(c, ps, v);
        path_pop(c, old);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int check_combinators(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *all = json_object_get(schema, "allOf");
    const json_t *any = json_object_get(schema, "anyOf");
    const json_t *one = json_object_get(schema, "oneOf");
    const json_t *not = json_object_get(schema, "not");
    const json_t *sub;
    size_t i;
    char first[256] = "", buf[256];

    if (json_is_array(all))
        json_array_foreach(all, i, sub)
            if (validate(c, sub, inst) < 0)
                return -1;
    if (json_is_array(any)) {
        int ok = 0;
        json_array_foreach(any, i, sub) {
            if (validate_quiet(c, sub, inst, buf, sizeof buf) == 0) {
                ok = 1;
                break;
            }
            if (i == 0)
                snprintf(first, sizeof first, "%.200s", buf);
        }
        if (!ok) {
            verr(c, "matches none of the %zu anyOf alternatives (first: %s)", json_array_size(any),
                 first);
            return -1;
        }
    }
    if (json_is_array(one)) {
        size_t matched = 0, which[2] = {0, 0};
        json_array_foreach(one, i, sub) {
            if (validate_quiet(c, sub, inst, buf, sizeof buf) == 0) {
                if (matched < 2)
                    which[matched] = i;
                matched++;
            } else if (first[0] == '\0') {
                snprintf(first, sizeof first, "[%zu] %.200s", i, buf);
            }
        }
        if (matched == 0) {
            verr(c, "matches none of the %zu oneOf alternatives (%s)", json_array_size(one), first);
            return -1;
        }
        if (matched > 1) {
            verr(c, "matches more than one oneOf alternative (%zu and %zu)", which[0], which[1]);
            return -1;
        }
    }
    if (not &&validate_quiet(c, not, inst, buf, sizeof buf) == 0) {
        verr(c, "matches the schema under 'not'");
        return -1;
    }
    return 0;
}

static int validate(vctx *c, const json_t *schema, const json_t *inst)
{
    const json_t *ref;
    int rc = -1;

    if (++c->depth > V_MAX_DEPTH) {
        verr(c, "schema error: nesting deeper than %d (a $ref cycle?)", V_MAX_DEPTH);
        goto out;
    }
    if (json_is_true(schema)) {
        rc = 0;
        goto out;
    }
    if (json_is_false(schema)) {
        verr(c, "no value is allowed here");
        goto out;
    }
    if (!json_is_object(schema)) {
        verr(c, "schema error: a schema must be an object or a boolean");
        goto out;
    }
    ref = json_object_get(schema, "$ref");
    if (ref) {
        char rerr[256];
        const json_t *target;
        if (!json_is_string(ref)) {
            verr(c, "schema error: $ref is not a string");
            goto out;
        }
        target = oas_resolve_ref(c->root, json_string_value(ref), rerr, sizeof rerr);
        if (!target) {
            verr(c, "schema error: %s", rerr);
            goto out;
        }
        rc = validate(c, target, inst);
        goto out;
    }
    /* Swagger 2.0's x-nullable (go-openapi, Kubernetes): null passes the whole schema. */
    if (json_is_null(inst) && is_true(schema, "x-nullable")) {
        rc = 0;
        goto out;
    }
    /*
     * OpenAPI 3.0.3's nullable adds null to the type of its own schema and
     * nothing more: enum must list null, and allOf/anyOf/oneOf/not apply to
     * null as to any value. Without a type it means nothing, and strict tools
     * (Ajv, Redocly) refuse the schema, so it is a schema error here too.
     */
    int nullable = is_true(schema, "nullable");
    if (nullable && !json_object_get(schema, "type")) {
        verr(c, "schema error: nullable without type");
        goto out;
    }
    if (!(nullable && json_is_null(inst)) && check_type(c, schema, inst) < 0)
        goto out;
    if (check_enum(c, schema, inst) < 0)
        goto out;
    if (json_is_number(inst) && check_number(c, schema, inst) < 0)
        goto out;
    if (json_is_string(inst) && check_string(c, schema, inst) < 0)
        goto out;
    if (json_is_array(inst) && check_array(c, schema, inst) < 0)
        goto out;
    if (json_is_object(inst) && check_object(c, schema, inst) < 0)
        goto out;
    if (check_combinators(c, schema, inst) < 0)
        goto out;
    rc = 0;
out:
    c->depth--;
    return rc;
}

int oas_validate(const json_t *root, const json_t *schema, const json_t *instance, unsigned flags,
                 char *err, size_t errlen)
{
    vctx c = {.root = root, .flags = flags, .err = err, .errlen = errlen};

    c.path[0] = '$';
    c.path[1] = '\0';
    c.pathlen = 1;
    if (errlen)
        err[0] = '\0';
    return validate(&c, schema, instance);
}
