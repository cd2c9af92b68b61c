/*
 * spec.c - strict JSON decoding and job spec validation/normalization; the
 * rules are listed in spec.h and in openapi/openapi.yaml (JobSpec), which
 * must say the same thing.
 *
 * Validation is one pass over the input: every field is checked where it is,
 * its error (if any) recorded against the current JSON path, and its
 * normalized value built at the same time. Errors never stop the walk, so one
 * response lists every problem. Nothing here is quadratic in the input except
 * the mount uniqueness check, which runs only on at most SPEC_MAX_VOLUMES.
 */
#include "api/spec.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty_buf.h"
#include "common/ty_quantity.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- decoding ------------------------------------------------------------ */

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Length of the JSON number (RFC 8259 grammar) starting at p, or 0 when the
 * text there is not one. *is_int is 1 for a number without fraction and
 * exponent.
 */
static size_t number_len(const char *p, size_t avail, int *is_int)
{
    size_t i = 0;
    *is_int = 1;
    if (i < avail && p[i] == '-')
        i++;
    if (i >= avail || !is_digit(p[i]))
        return 0;
    if (p[i] == '0')
        i++;
    else
        while (i < avail && is_digit(p[i]))
            i++;
    if (i < avail && p[i] == '.') {
        *is_int = 0;
        if (++i >= avail || !is_digit(p[i]))
            return 0;
        while (i < avail && is_digit(p[i]))
            i++;
    }
    if (i < avail && (p[i] == 'e' || p[i] == 'E')) {
        *is_int = 0;
        if (++i < avail && (p[i] == '+' || p[i] == '-'))
            i++;
        if (i >= avail || !is_digit(p[i]))
            return 0;
        while (i < avail && is_digit(p[i]))
            i++;
    }
    return i;
}

/* 1 when the integer token (JSON grammar, so no leading zeros) is outside int64. */
static int int_overflows(const char *p, size_t n)
{
    int neg = p[0] == '-';
    const char *d = p + neg;
    size_t nd = n - (size_t)neg;
    const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
    if (nd != 19)
        return nd > 19;
    return memcmp(d, lim, 19) > 0;
}

/* 1 when the real token overflows a double (jansson refuses exactly these). */
static int real_overflows(const char *p, size_t n, int *oom)
{
    char small[128];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) {
        *oom = 1;
        return 0;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    errno = 0;
    double d = strtod(buf, NULL);
    int over = errno == ERANGE && (d > 1.0 || d < -1.0);
    if (buf != small)
        free(buf);
    return over;
}

/*
 * Writes `with` over the token text[0..n) and pads with spaces, keeping every
 * byte offset (and so jansson's line/column) the same. Tokens shorter than
 * the replacement cannot overflow, so they never get here.
 */
static void clamp_token(char *text, size_t n, const char *with)
{
    size_t w = strlen(with);
    if (w > n)
        return;
    memcpy(text, with, w);
    memset(text + w, ' ', n - w);
}

/*
 * One pass over the raw bytes before jansson sees them: finds where nesting
 * passes SPEC_MAX_DEPTH (*deep_at, else SIZE_MAX) and clamps numbers that
 * jansson would refuse as too big (in *copy, a modified duplicate of the
 * body, left NULL when nothing needed clamping). Strings are skipped with
 * their escapes; on malformed input the result does not matter, because
 * jansson refuses that input anyway.
 */
static ty_err prescan(const char *body, size_t len, char **copy, size_t *deep_at)
{
    int depth = 0, oom = 0;
    size_t i = 0;
    *copy = NULL;
    *deep_at = SIZE_MAX;
    while (i < len) {
        char c = body[i];
        if (c == '"') {
            for (i++; i < len && body[i] != '"'; i++)
                if (body[i] == '\\')
                    i++;
            i++;
        } else if (c == '[' || c == '{') {
            if (++depth > SPEC_MAX_DEPTH) {
                *deep_at = i;
                break;
            }
            i++;
        } else if (c == ']' || c == '}') {
            depth--;
            i++;
        } else if (c == '-' || is_digit(c)) {
            int is_int;
            size_t n = number_len(body + i, len - i, &is_int);
            if (n == 0) {
                i++;
                continue;
            }
            const char *with = NULL;
            if (is_int && int_overflows(body + i, n))
                with = c == '-' ? "-9223372036854775808" : "9223372036854775807";
            else if (!is_int && real_overflows(body + i, n, &oom))
                with = c == '-' ? "-1e308" : "1e308";
            if (oom)
                break;
            if (with) {
                if (!*copy) {
                    if (!(*copy = malloc(len))) {
                        oom = 1;
                        break;
                    }
                    memcpy(*copy, body, len);
                }
                clamp_token(*copy + i, n, with);
            }
            i += n;
        } else {
            i++;
        }
    }
    if (oom) {
        free(*copy);
        *copy = NULL;
        return TY_ENOMEM;
    }
    return TY_OK;
}

/* Copies a jansson message into msg with anything but printable ASCII replaced. */
static void safe_message(char *msg, size_t msglen, const char *text)
{
    size_t i = 0;
    for (; text[i] && i + 1 < msglen; i++) {
        unsigned char c = (unsigned char)text[i];
        msg[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    msg[i < msglen ? i : msglen - 1] = '\0';
}

ty_err spec_decode(const char *body, size_t len, json_t **out, char *msg, size_t msglen)
{
    char *copy = NULL;
    size_t deep_at;
    ty_err e = prescan(body, len, &copy, &deep_at);
    if (e)
        return e;
    if (deep_at != SIZE_MAX) {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < deep_at; i++) {
            if (body[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        snprintf(msg, msglen, "nesting deeper than %d levels at line %zu, column %zu",
                 SPEC_MAX_DEPTH, line, col);
        free(copy);
        return TY_EINVAL;
    }
    json_error_t err;
    json_t *json =
        json_loadb(copy ? copy : body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    free(copy);
    if (!json) {
        char text[JSON_ERROR_TEXT_LENGTH + 64];
        snprintf(text, sizeof text, "%s at line %d, column %d", err.text, err.line, err.column);
        safe_message(msg, msglen, text);
        return json_error_code(&err) == json_error_out_of_memory ? TY_ENOMEM : TY_EINVAL;
    }
    *out = json;
    return TY_OK;
}

/* ---- errors -------------------------------------------------------------- */

ty_err spec_errors_init(spec_errors *e)
{
    e->count = 0;
    e->list = json_array();
    e->seen = json_object();
    if (!e->list || !e->seen) {
        spec_errors_free(e);
        return TY_ENOMEM;
    }
    return TY_OK;
}

void spec_errors_free(spec_errors *e)
{
    if (!e)
        return;
    json_decref(e->list);
    json_decref(e->seen);
    e->list = NULL;
    e->seen = NULL;
}

ty_err spec_errors_add(spec_errors *e, const char *path, const char *message)
{
    /* The key is path NUL message: neither may contain a NUL, so keys cannot collide. */
    size_t plen = strlen(path), mlen = strlen(message);
    ty_err rc = TY_OK;
    json_t *item = NULL;
    char *key = malloc(plen + 1 + mlen);
    if (!key)
        return TY_ENOMEM;
    memcpy(key, path, plen + 1);
    memcpy(key + plen + 1, message, mlen);
    if (json_object_getn(e->seen, key, plen + 1 + mlen))
        goto out; /* said already: once is enough */
    if (json_object_setn_new_nocheck(e->seen, key, plen + 1 + mlen, json_true())) {
        rc = TY_ENOMEM;
        goto out;
    }
    e->count++;
    if (json_array_size(e->list) >= SPEC_MAX_ERRORS)
        goto out;
    item = json_pack("{s:s, s:s}", "path", path, "message", message);
    if (!item || json_array_append_new(e->list, item))
        rc = TY_ENOMEM;
out:
    free(key);
    return rc;
}

/* ---- validation context -------------------------------------------------- */

typedef struct vctx {
    ty_buf path; /* JSON path of the value being checked */
    spec_errors *errs;
    const spec_opts *opts; /* never NULL */
    int oom;
} vctx;

static size_t push_key(vctx *v, const char *key)
{
    size_t mark = v->path.len;
    if (ty_buf_append(&v->path, ".", 1) || ty_buf_puts(&v->path, key))
        v->oom = 1;
    return mark;
}

static size_t push_index(vctx *v, size_t i)
{
    /* Digits by hand: a batch pushes an index per job and per array item. */
    char text[24];
    size_t at = sizeof text, mark = v->path.len;
    text[--at] = ']';
    do {
        text[--at] = (char)('0' + i % 10);
        i /= 10;
    } while (i);
    text[--at] = '[';
    if (ty_buf_append(&v->path, text + at, sizeof text - at))
        v->oom = 1;
    return mark;
}

static void pop(vctx *v, size_t mark)
{
    if (mark <= v->path.len && v->path.data) {
        v->path.len = mark;
        v->path.data[mark] = '\0';
    }
}

static void fail(vctx *v, const char *message)
{
    if (spec_errors_add(v->errs, v->path.data ? v->path.data : "$", message))
        v->oom = 1;
}

static void failf(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(vctx *v, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(v, msg);
}

/* Records an error at path + "." + key. */
static void fail_at(vctx *v, const char *key, const char *message)
{
    size_t mark = push_key(v, key);
    fail(v, message);
    pop(v, mark);
}

/* Marks allocation failures of the normalized output. */
static json_t *chk(vctx *v, json_t *j)
{
    if (!j)
        v->oom = 1;
    return j;
}

/*
 * Sets obj[key] = val (stolen); NULL val means "an error was recorded", so nothing is set.
 * Keys are the contract's names or label and env keys that passed their (ASCII) checks,
 * so jansson's UTF-8 check of each key is skipped.
 */
static void put(vctx *v, json_t *obj, const char *key, json_t *val)
{
    if (!val)
        return;
    if (!obj || json_object_set_new_nocheck(obj, key, val))
        v->oom = 1;
}

/* Member key of obj; NULL when absent or JSON null (null means "use the default"). */
static json_t *member(const json_t *obj, const char *key)
{
    json_t *m = json_object_get(obj, key);
    return json_is_null(m) ? NULL : m;
}

static int in_list(const char *key, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(key, *list) == 0)
            return 1;
    return 0;
}

/* Records "unknown field" for every member of obj not named in allowed (NULL-terminated). */
static void check_fields(vctx *v, const json_t *obj, const char *const *allowed)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val)
    {
        if (!in_list(key, allowed))
            fail_at(v, key, "unknown field");
    }
}

/* ---- syntax checks ------------------------------------------------------- */

static int is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || is_digit(c);
}

static int is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

int spec_is_dns_label(const char *s, size_t len)
{
    if (len < 1 || len > 63 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[len - 1]))
        return 0;
    for (size_t i = 1; i + 1 < len; i++)
        if (!is_lower_alnum(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

/* Kubernetes' IsDNS1123Subdomain: dot-separated DNS labels, 253 bytes at most. */
static int is_dns_subdomain(const char *s, size_t len)
{
    if (len < 1 || len > 253)
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            size_t n = i - start;
            if (n == 0 || !is_lower_alnum(s[start]) || !is_lower_alnum(s[i - 1]))
                return 0;
            for (size_t k = start; k < i; k++)
                if (!is_lower_alnum(s[k]) && s[k] != '-')
                    return 0;
            start = i + 1;
        }
    }
    return 1;
}

/* The name part of a Kubernetes qualified name: 0..63 of [A-Za-z0-9-_.], alnum at both ends. */
static int is_qualified_part(const char *s, size_t len)
{
    if (len == 0)
        return 1;
    if (len > 63 || !is_alnum(s[0]) || !is_alnum(s[len - 1]))
        return 0;
    for (size_t i = 1; i + 1 < len; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return 0;
    return 1;
}

int spec_is_label_key(const char *s, size_t len)
{
    const char *slash = memchr(s, '/', len);
    if (slash) {
        size_t plen = (size_t)(slash - s);
        if (!is_dns_subdomain(s, plen))
            return 0;
        s = slash + 1;
        len -= plen + 1;
    }
    return len >= 1 && is_qualified_part(s, len);
}

int spec_is_label_value(const char *s, size_t len)
{
    return is_qualified_part(s, len);
}

/* Decodes one UTF-8 sequence (jansson guarantees validity) and returns its length. */
static size_t utf8_next(const unsigned char *s, unsigned long *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xe0) == 0xc0) {
        *cp = (unsigned long)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
        return 2;
    }
    if ((s[0] & 0xf0) == 0xe0) {
        *cp =
            (unsigned long)(s[0] & 0x0f) << 12 | (unsigned long)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        return 3;
    }
    *cp = (unsigned long)(s[0] & 0x07) << 18 | (unsigned long)(s[1] & 0x3f) << 12 |
          (unsigned long)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    return 4;
}

/* ASCII and Unicode white space, C0 and C1 control characters, the BOM. */
static int is_space_or_control(unsigned long cp)
{
    return cp <= 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

/* ---- string checks: NULL when the value is fine, else the error message --- */

typedef const char *(*str_check)(const char *s, size_t len);

#define DNS_LABEL_MSG                                                                              \
    "must be a DNS label: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter " \
    "or digit"

static const char *check_dns_label(const char *s, size_t len)
{
    return spec_is_dns_label(s, len) ? NULL : DNS_LABEL_MSG;
}

#define JOB_NAME_MSG                                                                               \
    "must be a DNS subdomain of at most 63 characters: dot-separated labels of a-z, 0-9 and '-', " \
    "each starting and ending with a letter or digit"

/* Job names are RFC 1123 subdomains ("fmnist-lr-0.05") capped at 63 bytes so a
 * name is also a valid Kubernetes label value. Backends name their objects
 * after the job id, which is unique where names need not be. */
static const char *check_job_name(const char *s, size_t len)
{
    return len <= 63 && is_dns_subdomain(s, len) ? NULL : JOB_NAME_MSG;
}

static const char *check_image(const char *s, size_t len)
{
    if (len == 0)
        return "must not be empty";
    if (len > SPEC_MAX_IMAGE)
        return "must be at most " STR(SPEC_MAX_IMAGE) " bytes";
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned long cp;
        i += utf8_next(p + i, &cp);
        if (is_space_or_control(cp))
            return "must not contain white space or control characters";
    }
    return NULL;
}

static const char *check_command_item(const char *s, size_t len)
{
    (void)s;
    if (len == 0)
        return "must not be empty";
    if (len > SPEC_MAX_ARG_BYTES)
        return "must be at most " STR(SPEC_MAX_ARG_BYTES) " bytes";
    return NULL;
}

static const char *check_arg(const char *s, size_t len)
{
    (void)s;
    return len > SPEC_MAX_ARG_BYTES ? "must be at most " STR(SPEC_MAX_ARG_BYTES) " bytes" : NULL;
}

#define QUANTITY_MSG "must be a Kubernetes quantity such as \"500m\", \"2\", \"1.5\" or \"4Gi\""

/*
 * Kubernetes resource quantities, in common/ty_quantity.h's grammar, that are positive and fit
 * an int64 both as the double the scheduler reads (cores, bytes) and as the integer the limits
 * are compared in (scaled by 10^scale: millicores, bytes). *v gets that integer.
 */
static const char *check_quantity(const char *s, size_t len, int scale, int64_t *v)
{
    double d;
    if (len == 0 || len > SPEC_MAX_QUANTITY)
        return QUANTITY_MSG;
    ty_err e = ty_quantity_parse(s, len, &d);
    if (e == TY_OK)
        e = ty_quantity_scaled(s, len, scale, v);
    if (e == TY_ETOOLARGE)
        return s[0] == '-' ? "must be greater than 0" : NULL; /* said by the caller */
    if (e != TY_OK)
        return QUANTITY_MSG;
    if (!(d > 0))
        return "must be greater than 0";
    return NULL;
}

static const char *check_cpu(const char *s, size_t len)
{
    int64_t v = -1;
    const char *msg = check_quantity(s, len, 3, &v);
    if (!msg && v < 0)
        return "is too large: must be below 9223372036854775.808 CPUs (2^63 millicores)";
    return msg;
}

static const char *check_memory(const char *s, size_t len)
{
    int64_t v = -1;
    double d = 0;
    const char *msg = check_quantity(s, len, 0, &v);
    if (!msg && v < 0)
        return "is too large: must be below 8Ei (2^63 bytes)";
    /* Below one byte the local backend would set no limit at all. */
    if (!msg && ty_quantity_parse(s, len, &d) == TY_OK && d < 1)
        return "must be at least 1 byte";
    return msg;
}

static const char *check_zone(const char *s, size_t len)
{
    if ((len == 4 && memcmp(s, "auto", 4) == 0) || spec_is_dns_label(s, len))
        return NULL;
    return "must be \"auto\" or a zone name: 1-63 characters of a-z, 0-9 and '-', starting and "
           "ending with a letter or digit";
}

static const char *check_capacity(const char *s, size_t len)
{
    (void)len;
    if (strcmp(s, "on-demand") == 0 || strcmp(s, "spot") == 0 || strcmp(s, "any") == 0)
        return NULL;
    return "must be one of \"on-demand\", \"spot\", \"any\"";
}

static const char *check_label_value(const char *s, size_t len)
{
    return spec_is_label_value(s, len)
               ? NULL
               : "invalid label value: at most 63 characters of A-Z, a-z, 0-9, '-', '_' and '.', "
                 "starting and ending with a letter or digit";
}

static const char *check_label_key(const char *s, size_t len)
{
    return spec_is_label_key(s, len)
               ? NULL
               : "invalid label key: a name of 1-63 characters of A-Z, a-z, 0-9, '-', '_' and '.', "
                 "starting and ending with a letter or digit, optionally prefixed by a DNS "
                 "subdomain and '/'";
}

/* Set per rank by every backend (DESIGN.md, the contract with a worker). */
static const char *const reserved_env[] = {
    "RANK",        "WORLD_SIZE",  "LOCAL_RANK",           "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", NULL,
};

static const char *check_env_key(const char *s, size_t len)
{
    int ok = len > 0 && (s[0] == '_' || (is_alnum(s[0]) && !is_digit(s[0])));
    for (size_t i = 1; i < len && ok; i++)
        ok = s[i] == '_' || is_alnum(s[i]);
    if (!ok)
        return "invalid variable name: must match [A-Za-z_][A-Za-z0-9_]*";
    if (strncmp(s, "TRAINYARD_", 10) == 0)
        return "reserved variable name: names starting with TRAINYARD_ are set by Trainyard";
    if (in_list(s, reserved_env))
        return "reserved variable name: set by Trainyard for every rank";
    return NULL;
}

static const char *check_env_value(const char *s, size_t len)
{
    (void)s;
    return len > SPEC_MAX_ENV_VALUE ? "must be at most " STR(SPEC_MAX_ENV_VALUE) " bytes" : NULL;
}

/* ---- reserved labels ------------------------------------------------------ */

const char *const spec_webhook_labels[] = {"webhook", "commit", NULL};

int spec_is_reserved_label(const char *key, size_t len)
{
    static const char domain[] = "trainyard.io";
    const size_t dlen = sizeof domain - 1;
    const char *slash = memchr(key, '/', len);
    if (slash) {
        /* The prefix is trainyard.io or one of its subdomains (param.trainyard.io). */
        size_t plen = (size_t)(slash - key);
        return plen >= dlen && memcmp(key + plen - dlen, domain, dlen) == 0 &&
               (plen == dlen || key[plen - dlen - 1] == '.');
    }
    for (const char *const *w = spec_webhook_labels; *w; w++)
        if (strlen(*w) == len && memcmp(*w, key, len) == 0)
            return 1;
    return 0;
}

/*
 * Records "reserved for the server" at $.labels["key"] for every reserved key of the input's
 * labels the server did not set itself (v->opts->server_labels). Syntax errors of keys are
 * string_map_field's.
 */
static void check_reserved_labels(vctx *v, const json_t *in)
{
    const json_t *labels = member(in, "labels");
    const char *k;
    json_t *val;
    if (!json_is_object(labels))
        return;
    json_object_foreach((json_t *)labels, k, val)
    {
        size_t len = strlen(k);
        if (!spec_is_label_key(k, len) || !spec_is_reserved_label(k, len))
            continue;
        if (v->opts->server_labels && in_list(k, v->opts->server_labels))
            continue;
        /* A valid key holds no quote or backslash: the bracket form needs no escape. */
        size_t mark = v->path.len;
        if (ty_buf_puts(&v->path, ".labels[\"") || ty_buf_puts(&v->path, k) ||
            ty_buf_puts(&v->path, "\"]"))
            v->oom = 1;
        fail(v, "reserved for the server: labels under trainyard.io/, \"webhook\" and "
                "\"commit\" say where a job came from and are set by Trainyard only");
        pop(v, mark);
    }
}

/* ---- typed field readers ------------------------------------------------- */

/* Checks val (at the current path) is an integer in [lo, hi]. */
static int want_int(vctx *v, const json_t *val, json_int_t lo, json_int_t hi, json_int_t *out)
{
    if (!json_is_integer(val)) {
        fail(v, "must be an integer");
        return -1;
    }
    json_int_t n = json_integer_value(val);
    if (n < lo || n > hi) {
        failf(v, "must be between %lld and %lld", (long long)lo, (long long)hi);
        return -1;
    }
    *out = n;
    return 0;
}

/*
 * Integer member: the default when absent or null (required: an error then).
 * Returns 0 and sets *out when valid.
 */
static int int_field(vctx *v, const json_t *obj, const char *key, int required, json_int_t lo,
                     json_int_t hi, json_int_t dflt, json_int_t *out)
{
    json_t *val = member(obj, key);
    if (!val) {
        if (required) {
            fail_at(v, key, "is required");
            return -1;
        }
        *out = dflt;
        return 0;
    }
    size_t mark = push_key(v, key);
    int rc = want_int(v, val, lo, hi, out);
    pop(v, mark);
    return rc;
}

/*
 * Shared immutable values for what most specs hold: the defaults and small
 * integers. A batch of 1,000 specs would otherwise allocate (and free) some
 * 16,000 identical jansson values; the normalized trees share these instead,
 * as they share the request's strings. Nothing modifies a scalar of a
 * normalized spec (json_*_set), jansson's reference counts are atomic, and
 * the one reference taken here is never dropped, so the values live for the
 * process. When they could not be built, int_value and default_string fall
 * back to new values.
 */
#define SHARED_INT_MAX 64
static const char *const shared_string_text[] = {"default", "1", "2Gi", "auto", "on-demand"};
#define NSHARED_STRINGS (sizeof shared_string_text / sizeof shared_string_text[0])
static json_t *shared_ints[SHARED_INT_MAX + 1];
static json_t *shared_ttl;
static json_t *shared_strings[NSHARED_STRINGS];
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void shared_init(void)
{
    for (json_int_t i = 0; i <= SHARED_INT_MAX; i++)
        shared_ints[i] = json_integer(i);
    shared_ttl = json_integer(SPEC_DEFAULT_TTL);
    for (size_t i = 0; i < NSHARED_STRINGS; i++)
        shared_strings[i] = json_string(shared_string_text[i]);
}

static json_t *int_value(vctx *v, json_int_t n)
{
    json_t *shared = NULL;
    pthread_once(&shared_once, shared_init);
    if (n >= 0 && n <= SHARED_INT_MAX)
        shared = shared_ints[n];
    else if (n == SPEC_DEFAULT_TTL)
        shared = shared_ttl;
    return chk(v, shared ? json_incref(shared) : json_integer(n));
}

/* A new reference to the default string dflt. */
static json_t *default_string(vctx *v, const char *dflt)
{
    pthread_once(&shared_once, shared_init);
    for (size_t i = 0; i < NSHARED_STRINGS; i++)
        if (shared_strings[i] && strcmp(dflt, shared_string_text[i]) == 0)
            return json_incref(shared_strings[i]);
    return chk(v, json_string(dflt));
}

/* Checks val (at the current path) is a string passing check; returns a new
 * reference to it: parsed strings are immutable, so the normalized spec
 * shares them with the request's tree instead of copying each one. */
static json_t *want_string(vctx *v, const json_t *val, str_check check)
{
    if (!json_is_string(val)) {
        fail(v, "must be a string");
        return NULL;
    }
    const char *s = json_string_value(val);
    size_t len = json_string_length(val);
    const char *msg = check ? check(s, len) : NULL;
    if (msg) {
        fail(v, msg);
        return NULL;
    }
    return json_incref((json_t *)val);
}

/* String member; dflt NULL means required. Returns the new normalized value or NULL. */
static json_t *string_field(vctx *v, const json_t *obj, const char *key, str_check check,
                            const char *dflt)
{
    json_t *val = member(obj, key);
    if (!val) {
        if (!dflt) {
            fail_at(v, key, "is required");
            return NULL;
        }
        return default_string(v, dflt);
    }
    size_t mark = push_key(v, key);
    json_t *out = want_string(v, val, check);
    pop(v, mark);
    return out;
}

/*
 * Array-of-strings member. required: absent is an error and [] too. Returns
 * the new normalized array or NULL.
 */
static json_t *string_array_field(vctx *v, const json_t *obj, const char *key, int required,
                                  size_t max_items, str_check check)
{
    json_t *val = member(obj, key);
    if (!val) {
        if (required) {
            fail_at(v, key, "is required");
            return NULL;
        }
        return chk(v, json_array());
    }
    size_t mark = push_key(v, key);
    json_t *out = NULL;
    if (!json_is_array(val)) {
        fail(v, "must be an array of strings");
        goto out;
    }
    size_t n = json_array_size(val), nerr = v->errs->count;
    if (required && n == 0)
        fail(v, "must not be empty");
    if (n > max_items)
        failf(v, "must have at most %zu items", max_items);
    out = chk(v, json_array());
    for (size_t i = 0; i < n; i++) {
        size_t m = push_index(v, i);
        json_t *item = want_string(v, json_array_get(val, i), check);
        if (item && (!out || json_array_append_new(out, item)))
            v->oom = 1;
        pop(v, m);
    }
    if (v->errs->count != nerr) {
        json_decref(out);
        out = NULL;
    }
out:
    pop(v, mark);
    return out;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Object-of-strings member (labels, env): keys checked by key_check, values
 * by value_check, at most max_items. The normalized object has sorted keys.
 */
static json_t *string_map_field(vctx *v, const json_t *obj, const char *key, size_t max_items,
                                str_check key_check, str_check value_check)
{
    json_t *val = member(obj, key);
    if (!val)
        return chk(v, json_object());
    size_t mark = push_key(v, key);
    json_t *out = NULL;
    const char **keys = NULL;
    size_t nerr = v->errs->count;
    if (!json_is_object(val)) {
        fail(v, "must be an object of strings");
        goto out;
    }
    size_t n = json_object_size(val);
    if (n > max_items)
        failf(v, "must have at most %zu entries", max_items);
    const char *k;
    json_t *item;
    json_object_foreach(val, k, item)
    {
        size_t m = push_key(v, k);
        const char *msg = key_check(k, strlen(k));
        if (msg)
            fail(v, msg);
        else
            json_decref(want_string(v, item, value_check));
        pop(v, m);
    }
    if (v->errs->count != nerr || v->oom)
        goto out;
    keys = malloc((n ? n : 1) * sizeof *keys);
    out = chk(v, json_object());
    if (!keys || !out) {
        v->oom = 1;
        goto out;
    }
    size_t i = 0;
    json_object_foreach(val, k, item)
    {
        keys[i++] = k;
    }
    qsort(keys, n, sizeof *keys, cmp_str);
    for (i = 0; i < n; i++)
        put(v, out, keys[i], json_incref(json_object_get(val, keys[i])));
out:
    if (out && (v->errs->count != nerr || v->oom)) {
        json_decref(out);
        out = NULL;
    }
    free(keys);
    pop(v, mark);
    return out;
}

static const char *const env_entry_fields[] = {"value", "secret", NULL};

#define ENV_ENTRY_MSG                                                                              \
    "must be a string, or an object {\"value\": string, \"secret\": boolean}"

/*
 * One env entry at the current path: a string (plain, as it always was), or an object
 * {"value": string, "secret": boolean}. A plain object ("secret" false or absent) normalizes
 * to its string; a secret one to a new {"value": "...", "secret": true}, whose value
 * spec_secrets_take() moves out before the spec is stored. Returns the new normalized entry
 * or NULL with an error recorded.
 */
static json_t *env_entry(vctx *v, const json_t *item)
{
    if (json_is_string(item))
        return want_string(v, item, check_env_value);
    if (!json_is_object(item)) {
        fail(v, ENV_ENTRY_MSG);
        return NULL;
    }
    size_t nerr = v->errs->count;
    check_fields(v, item, env_entry_fields);
    json_t *secret = member(item, "secret"), *value = NULL, *out = NULL;
    if (secret && !json_is_boolean(secret))
        fail_at(v, "secret", "must be a boolean");
    int is_secret = secret && json_is_true(secret);
    if (is_secret && v->opts->no_secrets)
        fail_at(v, "secret", v->opts->no_secrets);
    if (!member(item, "value")) {
        fail_at(v, "value",
                is_secret ? "is required: a secret's value is never returned, so a spec read "
                            "back from the API must be given its secret values again"
                          : "is required");
    } else {
        size_t m = push_key(v, "value");
        value = want_string(v, json_object_get(item, "value"), check_env_value);
        pop(v, m);
    }
    if (v->errs->count != nerr || !value) {
        json_decref(value);
        return NULL;
    }
    if (!is_secret)
        return value;
    out = chk(v, json_object());
    put(v, out, "value", value);
    put(v, out, "secret", json_true());
    return out;
}

/*
 * The env member: at most SPEC_MAX_ENV entries whose names pass check_env_key, each an
 * env_entry(). The normalized object has sorted keys.
 */
static json_t *env_field(vctx *v, const json_t *obj)
{
    json_t *val = member(obj, "env");
    if (!val)
        return chk(v, json_object());
    size_t mark = push_key(v, "env");
    json_t *out = NULL, *tmp = NULL;
    const char **keys = NULL;
    size_t nerr = v->errs->count;
    if (!json_is_object(val)) {
        fail(v, "must be an object whose values are strings or {\"value\", \"secret\"} "
                "objects");
        goto out;
    }
    size_t n = json_object_size(val);
    if (n > SPEC_MAX_ENV)
        failf(v, "must have at most %d entries", SPEC_MAX_ENV);
    tmp = chk(v, json_object());
    const char *k;
    json_t *item;
    json_object_foreach(val, k, item)
    {
        size_t m = push_key(v, k);
        const char *msg = check_env_key(k, strlen(k));
        if (msg)
            fail(v, msg);
        else
            put(v, tmp, k, env_entry(v, item));
        pop(v, m);
    }
    if (v->errs->count != nerr || v->oom)
        goto out;
    keys = malloc((n ? n : 1) * sizeof *keys);
    out = chk(v, json_object());
    if (!keys || !out) {
        v->oom = 1;
        goto out;
    }
    size_t i = 0;
    json_object_foreach(tmp, k, item)
    {
        keys[i++] = k;
    }
    qsort(keys, i, sizeof *keys, cmp_str);
    for (size_t j = 0; j < i; j++)
        put(v, out, keys[j], json_incref(json_object_get(tmp, keys[j])));
out:
    if (out && (v->errs->count != nerr || v->oom)) {
        json_decref(out);
        out = NULL;
    }
    json_decref(tmp);
    free(keys);
    pop(v, mark);
    return out;
}

/*
 * An optional object member: returns it (borrowed), or NULL when absent/null
 * or not an object (then an error is recorded and *bad is set).
 */
static const json_t *object_field(vctx *v, const json_t *obj, const char *key,
                                  const char *const *allowed, int *bad)
{
    json_t *val = member(obj, key);
    *bad = 0;
    if (!val)
        return NULL;
    if (!json_is_object(val)) {
        fail_at(v, key, "must be an object");
        *bad = 1;
        return NULL;
    }
    size_t mark = push_key(v, key);
    check_fields(v, val, allowed);
    pop(v, mark);
    return val;
}

/* ---- the sections of a job spec ------------------------------------------ */

static const char *const workers_fields[] = {"count", "min", NULL};
static const char *const resources_fields[] = {"cpu", "memory", "gpu", NULL};
static const char *const gpu_fields[] = {"type", "count", NULL};
static const char *const placement_fields[] = {"zone", "capacity", NULL};
static const char *const volume_fields[] = {"claim", "mount", "read_only", NULL};
static const char *const restart_fields[] = {"max", "backoff_seconds", NULL};
static const char *const job_fields[] = {
    "name",      "labels",  "queue",   "priority",        "image",
    "command",   "args",    "env",     "workers",         "resources",
    "placement", "volumes", "restart", "timeout_seconds", "ttl_seconds_after_finished",
    NULL};

static json_t *workers_section(vctx *v, const json_t *job)
{
    json_t *raw = member(job, "workers");
    if (!raw) {
        fail_at(v, "workers", "is required");
        return NULL;
    }
    if (!json_is_object(raw)) {
        fail_at(v, "workers", "must be an object");
        return NULL;
    }
    size_t mark = push_key(v, "workers");
    check_fields(v, raw, workers_fields);
    json_int_t count, min;
    int bad = int_field(v, raw, "count", 1, 1, SPEC_MAX_WORKERS, 0, &count);
    json_int_t hi = bad ? SPEC_MAX_WORKERS : count;
    bad |= int_field(v, raw, "min", 0, 1, hi, hi, &min);
    json_t *out = NULL;
    if (!bad) {
        out = chk(v, json_object());
        put(v, out, "count", int_value(v, count));
        put(v, out, "min", int_value(v, min));
    }
    pop(v, mark);
    return out;
}

static json_t *gpu_section(vctx *v, const json_t *resources)
{
    int bad;
    const json_t *raw = object_field(v, resources, "gpu", gpu_fields, &bad);
    if (bad)
        return NULL;
    if (!raw)
        return json_null();
    size_t mark = push_key(v, "gpu");
    json_t *out = NULL, *type = NULL;
    json_int_t count;
    bad = int_field(v, raw, "count", 1, 0, SPEC_MAX_GPUS, 0, &count);
    if (member(raw, "type") || (!bad && count > 0))
        type = string_field(v, raw, "type", check_dns_label, NULL);
    if (bad || (!type && (member(raw, "type") || count > 0)))
        goto out;
    if (count == 0) {
        out = json_null(); /* count 0 means no GPU */
        goto out;
    }
    out = chk(v, json_object());
    put(v, out, "type", type);
    type = NULL;
    put(v, out, "count", int_value(v, count));
out:
    json_decref(type);
    pop(v, mark);
    return out;
}

/*
 * The normalized resources `res` against what the backend could ever give one rank: the limits
 * of the rank's GPU type where the backend lists that type (a number it does not know is not
 * checked), else those of any rank. Errors at resources.cpu / .memory / .gpu.count (the current
 * path is $.resources).
 */
static void check_limits(vctx *v, const spec_limits *lim, const json_t *res)
{
    const json_t *gpu = json_object_get(res, "gpu");
    const char *type = json_string_value(json_object_get(gpu, "type"));
    json_int_t gpus = json_integer_value(json_object_get(gpu, "count"));
    const char *cpu = json_string_value(json_object_get(res, "cpu"));
    const char *mem = json_string_value(json_object_get(res, "memory"));
    const spec_rank_limit *t = &lim->any;
    int typed = 0;
    for (size_t i = 0; type && i < lim->ntypes; i++)
        if (lim->types[i].gpu_type && strcmp(lim->types[i].gpu_type, type) == 0) {
            t = &lim->types[i];
            typed = 1;
        }
    char node[96], want[32], have[32];
    const char *any = lim->where ? lim->where : "the backend";
    snprintf(node, sizeof node, "the largest %s node", type ? type : "");
    int64_t n;
    int64_t cpu_max = t->cpu_millis;
    if (cpu && cpu_max > 0 && ty_quantity_scaled(cpu, strlen(cpu), 3, &n) == TY_OK &&
        n > cpu_max) {
        ty_quantity_format_millis(n, want, sizeof want);
        ty_quantity_format_millis(cpu_max, have, sizeof have);
        size_t m = push_key(v, "cpu");
        failf(v, "%s CPUs requested per rank, %s has %s", want, typed ? node : any, have);
        pop(v, m);
    }
    int64_t mem_max = t->memory_bytes;
    if (mem && mem_max > 0 && ty_quantity_scaled(mem, strlen(mem), 0, &n) == TY_OK &&
        n > mem_max) {
        ty_quantity_format_bytes(mem_max, have, sizeof have);
        size_t m = push_key(v, "memory");
        failf(v, "%.*s of memory requested per rank, %s has %s", SPEC_MAX_QUANTITY, mem,
              typed ? node : any, have);
        pop(v, m);
    }
    int gpu_max = t->gpus;
    if (type && gpu_max > 0 && gpus > gpu_max) {
        size_t m = push_key(v, "gpu");
        size_t m2 = push_key(v, "count");
        failf(v, "%lld GPUs of type %s requested per rank, %s has %d", (long long)gpus, type,
              typed ? node : any, gpu_max);
        pop(v, m2);
        pop(v, m);
    }
}

static json_t *resources_section(vctx *v, const json_t *job)
{
    int bad;
    const json_t *raw = object_field(v, job, "resources", resources_fields, &bad);
    if (bad)
        return NULL;
    size_t mark = push_key(v, "resources");
    size_t nerr = v->errs->count;
    json_t *out = chk(v, json_object());
    put(v, out, "cpu", string_field(v, raw, "cpu", check_cpu, "1"));
    put(v, out, "memory", string_field(v, raw, "memory", check_memory, "2Gi"));
    put(v, out, "gpu", gpu_section(v, raw));
    if (v->errs->count == nerr && !v->oom && v->opts->limits)
        check_limits(v, v->opts->limits, out);
    pop(v, mark);
    if (v->errs->count != nerr) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *placement_section(vctx *v, const json_t *job)
{
    int bad;
    const json_t *raw = object_field(v, job, "placement", placement_fields, &bad);
    if (bad)
        return NULL;
    size_t mark = push_key(v, "placement");
    size_t nerr = v->errs->count;
    json_t *out = chk(v, json_object());
    put(v, out, "zone", string_field(v, raw, "zone", check_zone, "auto"));
    put(v, out, "capacity", string_field(v, raw, "capacity", check_capacity, "on-demand"));
    pop(v, mark);
    if (v->errs->count != nerr) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *restart_section(vctx *v, const json_t *job)
{
    int bad;
    const json_t *raw = object_field(v, job, "restart", restart_fields, &bad);
    if (bad)
        return NULL;
    size_t mark = push_key(v, "restart");
    json_int_t max, backoff;
    bad = int_field(v, raw, "max", 0, 0, SPEC_MAX_RESTARTS, 0, &max);
    bad |= int_field(v, raw, "backoff_seconds", 0, 0, SPEC_MAX_BACKOFF, 10, &backoff);
    pop(v, mark);
    if (bad)
        return NULL;
    json_t *out = chk(v, json_object());
    put(v, out, "max", int_value(v, max));
    put(v, out, "backoff_seconds", int_value(v, backoff));
    return out;
}

/*
 * A mount path, normalized: repeated slashes collapsed, no trailing slash.
 * Returns the new string, or NULL with an error recorded.
 */
static json_t *mount_value(vctx *v, const json_t *val)
{
    if (!json_is_string(val)) {
        fail(v, "must be a string");
        return NULL;
    }
    const char *s = json_string_value(val);
    size_t len = json_string_length(val);
    if (len == 0 || s[0] != '/') {
        fail(v, "must be an absolute path");
        return NULL;
    }
    if (len > SPEC_MAX_MOUNT) {
        fail(v, "must be at most " STR(SPEC_MAX_MOUNT) " bytes");
        return NULL;
    }
    char norm[SPEC_MAX_MOUNT + 1];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            fail(v, "must not contain control characters");
            return NULL;
        }
        if (c == '/' && n > 0 && norm[n - 1] == '/')
            continue;
        norm[n++] = (char)c;
    }
    if (n > 1 && norm[n - 1] == '/')
        n--;
    norm[n] = '\0';
    /* ".." as a path segment would escape the mount point's parent. */
    for (const char *seg = norm; seg; seg = strchr(seg + 1, '/')) {
        const char *p = seg + 1;
        if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0')) {
            fail(v, "must not contain \"..\"");
            return NULL;
        }
    }
    return chk(v, json_stringn_nocheck(norm, n));
}

static json_t *volume_item(vctx *v, const json_t *raw)
{
    if (!json_is_object(raw)) {
        fail(v, "must be an object");
        return NULL;
    }
    check_fields(v, raw, volume_fields);
    size_t nerr = v->errs->count;
    json_t *out = chk(v, json_object());
    put(v, out, "claim", string_field(v, raw, "claim", check_dns_label, NULL));
    json_t *mount = member(raw, "mount");
    if (!mount) {
        fail_at(v, "mount", "is required");
    } else {
        size_t m = push_key(v, "mount");
        put(v, out, "mount", mount_value(v, mount));
        pop(v, m);
    }
    json_t *ro = member(raw, "read_only");
    if (ro && !json_is_boolean(ro))
        fail_at(v, "read_only", "must be a boolean");
    put(v, out, "read_only", json_boolean(ro && json_is_true(ro)));
    if (v->errs->count != nerr) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *volumes_section(vctx *v, const json_t *job)
{
    json_t *raw = member(job, "volumes");
    if (!raw)
        return chk(v, json_array());
    size_t mark = push_key(v, "volumes");
    json_t *out = NULL;
    size_t nerr = v->errs->count;
    if (!json_is_array(raw)) {
        fail(v, "must be an array");
        goto out;
    }
    size_t n = json_array_size(raw);
    if (n > SPEC_MAX_VOLUMES)
        fail(v, "must have at most " STR(SPEC_MAX_VOLUMES) " items");
    out = chk(v, json_array());
    for (size_t i = 0; i < n; i++) {
        size_t m = push_index(v, i);
        json_t *item = volume_item(v, json_array_get(raw, i));
        if (item && (!out || json_array_append_new(out, item)))
            v->oom = 1;
        pop(v, m);
    }
    if (v->errs->count != nerr || v->oom)
        goto out;
    /* Mount uniqueness on the normalized paths; n <= SPEC_MAX_VOLUMES here. */
    for (size_t i = 1; i < n; i++) {
        const char *mi = json_string_value(json_object_get(json_array_get(out, i), "mount"));
        for (size_t j = 0; j < i; j++) {
            const char *mj = json_string_value(json_object_get(json_array_get(out, j), "mount"));
            if (strcmp(mi, mj) == 0) {
                size_t m = push_index(v, i);
                size_t m2 = push_key(v, "mount");
                failf(v, "duplicate mount path (same as volumes[%zu])", j);
                pop(v, m2);
                pop(v, m);
                break;
            }
        }
    }
out:
    if (out && v->errs->count != nerr) {
        json_decref(out);
        out = NULL;
    }
    pop(v, mark);
    return out;
}

/* Validates one spec at the current path; returns the new normalized spec or NULL. */
static json_t *job_spec(vctx *v, const json_t *in)
{
    if (!json_is_object(in)) {
        fail(v, "must be an object");
        return NULL;
    }
    size_t nerr = v->errs->count;
    check_fields(v, in, job_fields);
    json_t *out = chk(v, json_object());
    json_int_t n;

    put(v, out, "name", string_field(v, in, "name", check_job_name, NULL));
    put(v, out, "labels",
        string_map_field(v, in, "labels", SPEC_MAX_LABELS, check_label_key, check_label_value));
    check_reserved_labels(v, in);
    put(v, out, "queue", string_field(v, in, "queue", check_dns_label, "default"));
    if (!int_field(v, in, "priority", 0, -SPEC_MAX_PRIORITY, SPEC_MAX_PRIORITY, 0, &n))
        put(v, out, "priority", int_value(v, n));
    /* Only the Kubernetes backend runs an image; the local one ignores it. */
    if (!member(in, "image"))
        put(v, out, "image", json_null());
    else
        put(v, out, "image", string_field(v, in, "image", check_image, NULL));
    put(v, out, "command",
        string_array_field(v, in, "command", 1, SPEC_MAX_COMMAND_ITEMS, check_command_item));
    put(v, out, "args", string_array_field(v, in, "args", 0, SPEC_MAX_ARGS_ITEMS, check_arg));
    put(v, out, "env", env_field(v, in));
    put(v, out, "workers", workers_section(v, in));
    put(v, out, "resources", resources_section(v, in));
    put(v, out, "placement", placement_section(v, in));
    put(v, out, "volumes", volumes_section(v, in));
    put(v, out, "restart", restart_section(v, in));
    if (!member(in, "timeout_seconds"))
        put(v, out, "timeout_seconds", json_null());
    else if (!int_field(v, in, "timeout_seconds", 1, 1, SPEC_MAX_SECONDS, 0, &n))
        put(v, out, "timeout_seconds", int_value(v, n));
    if (!int_field(v, in, "ttl_seconds_after_finished", 0, 0, SPEC_MAX_SECONDS, SPEC_DEFAULT_TTL,
                   &n))
        put(v, out, "ttl_seconds_after_finished", int_value(v, n));

    if (v->errs->count != nerr || v->oom) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static ty_err vctx_init(vctx *v, const char *path, const spec_opts *opts, spec_errors *errs)
{
    static const spec_opts client = {0};
    ty_buf_init(&v->path, 0);
    v->errs = errs;
    v->opts = opts ? opts : &client;
    v->oom = 0;
    return ty_buf_puts(&v->path, path);
}

/* The result code of a walk: ENOMEM beats EINVAL. */
static ty_err vctx_finish(vctx *v, size_t nerr, json_t *result, json_t **out)
{
    ty_err e = TY_OK;
    if (v->oom)
        e = TY_ENOMEM;
    else if (v->errs->count != nerr || !result)
        e = TY_EINVAL;
    if (e)
        json_decref(result);
    else
        *out = result;
    ty_buf_free(&v->path);
    return e;
}

ty_err spec_job(const json_t *in, const char *path, json_t **out, spec_errors *errs)
{
    return spec_job_opts(in, path, NULL, out, errs);
}

ty_err spec_job_opts(const json_t *in, const char *path, const spec_opts *opts, json_t **out,
                     spec_errors *errs)
{
    vctx v;
    size_t nerr = errs->count;
    if (vctx_init(&v, path, opts, errs)) {
        ty_buf_free(&v.path);
        return TY_ENOMEM;
    }
    json_t *spec = job_spec(&v, in);
    return vctx_finish(&v, nerr, spec, out);
}

static const char *const batch_fields[] = {"jobs", NULL};

ty_err spec_batch(const json_t *in, size_t max_jobs, json_t **out, spec_errors *errs)
{
    return spec_batch_opts(in, max_jobs, NULL, out, errs);
}

ty_err spec_batch_opts(const json_t *in, size_t max_jobs, const spec_opts *opts, json_t **out,
                       spec_errors *errs)
{
    vctx v;
    size_t nerr = errs->count;
    json_t *specs = NULL;
    if (vctx_init(&v, "$", opts, errs)) {
        ty_buf_free(&v.path);
        return TY_ENOMEM;
    }
    if (!json_is_object(in)) {
        fail(&v, "must be an object");
        goto out;
    }
    check_fields(&v, in, batch_fields);
    json_t *jobs = member(in, "jobs");
    if (!jobs) {
        fail_at(&v, "jobs", "is required");
        goto out;
    }
    size_t mark = push_key(&v, "jobs");
    size_t n = json_array_size(jobs);
    if (!json_is_array(jobs)) {
        fail(&v, "must be an array");
    } else if (n < 1 || n > max_jobs) {
        failf(&v, "must have between 1 and %zu items", max_jobs);
    } else {
        specs = chk(&v, json_array());
        for (size_t i = 0; i < n && !v.oom; i++) {
            size_t m = push_index(&v, i);
            json_t *spec = job_spec(&v, json_array_get(jobs, i));
            if (spec && (!specs || json_array_append_new(specs, spec)))
                v.oom = 1;
            pop(&v, m);
        }
    }
    pop(&v, mark);
out:
    return vctx_finish(&v, nerr, specs, out);
}

ty_err spec_add_server_labels(json_t *spec, const json_t *labels)
{
    json_t *old = json_object_get(spec, "labels"), *merged = NULL;
    const char **keys = NULL;
    ty_err e = TY_OK;
    const char *k;
    json_t *val;
    if (!json_is_object(old) || !json_is_object(labels))
        return TY_EINVAL;
    size_t n = json_object_size(old);
    json_object_foreach((json_t *)labels, k, val)
    {
        if (!spec_is_label_key(k, strlen(k)) || !json_is_string(val) ||
            !spec_is_label_value(json_string_value(val), json_string_length(val)))
            return TY_EINVAL;
        n += json_object_get(old, k) ? 0 : 1;
    }
    if (n > SPEC_MAX_LABELS)
        return TY_ETOOLARGE;
    /* Rebuilt rather than added to: the normalized labels are sorted, and json objects keep
     * the order of insertion. */
    if (!(merged = json_object()) || !(keys = malloc((n ? n : 1) * sizeof *keys))) {
        e = TY_ENOMEM;
        goto out;
    }
    if (json_object_update(merged, old) || json_object_update(merged, (json_t *)labels)) {
        e = TY_ENOMEM;
        goto out;
    }
    size_t i = 0;
    json_object_foreach(merged, k, val)
    {
        keys[i++] = k;
    }
    qsort(keys, i, sizeof *keys, cmp_str);
    json_t *sorted = json_object();
    if (!sorted) {
        e = TY_ENOMEM;
        goto out;
    }
    for (size_t j = 0; j < i && !e; j++)
        if (json_object_set_nocheck(sorted, keys[j], json_object_get(merged, keys[j])))
            e = TY_ENOMEM;
    if (!e && json_object_set_new_nocheck(spec, "labels", sorted))
        e = TY_ENOMEM;
    else if (e)
        json_decref(sorted);
out:
    free(keys);
    json_decref(merged);
    return e;
}

ty_err spec_secrets_take(json_t *spec, json_t **secrets)
{
    json_t *env = json_object_get(spec, "env"), *item, *taken = NULL;
    const char *k;
    if (secrets)
        *secrets = NULL;
    if (!json_is_object(env))
        return TY_OK;
    json_object_foreach(env, k, item)
    {
        json_t *value = json_object_get(item, "value");
        if (!json_is_object(item) || !json_is_true(json_object_get(item, "secret")) ||
            !json_is_string(value))
            continue;
        if (secrets && !taken && !(taken = json_object()))
            return TY_ENOMEM;
        if (taken && json_object_set_nocheck(taken, k, value)) {
            json_decref(taken);
            return TY_ENOMEM;
        }
        if (json_object_set_new_nocheck(item, "value", json_null())) {
            json_decref(taken);
            return TY_ENOMEM;
        }
    }
    if (secrets)
        *secrets = taken;
    return TY_OK;
}
