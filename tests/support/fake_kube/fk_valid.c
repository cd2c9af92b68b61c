/*
 * fk_valid.c - how the fake apiserver decodes and validates a written object.
 *
 * The apiserver has two stages a client can tell apart (transcripts 01-05):
 * decoding, whose failures are 400 BadRequest with a message and no details
 * (malformed JSON, a JSON type that does not fit the Go field, a bad
 * quantity, and with fieldValidation=Strict unknown or duplicate fields), and
 * validation, whose failures are 422 Invalid with details.causes. Types and
 * fields come from the official schemas (swagger.json, the Volcano CRD); the
 * rules the apiserver enforces in code are written here.
 */
#include "tests/support/fake_kube/fk.h"
#include "tests/support/oas.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *fk_status(int code, const char *reason, const char *message, json_t *details)
{
    json_t *s = json_pack("{s:s, s:s, s:{}, s:s, s:s, s:s}", "kind", "Status", "apiVersion", "v1",
                          "metadata", "status", "Failure", "message", message, "reason", reason);
    if (details)
        json_object_set_new(s, "details", details);
    json_object_set_new(s, "code", json_integer(code));
    return s;
}

json_t *fk_details(int res, const char *name, int use_kind)
{
    const fk_res *r = &fk_resources[res];
    json_t *d = json_object();
    if (name)
        json_object_set_new(d, "name", json_string(name));
    if (*r->group)
        json_object_set_new(d, "group", json_string(r->group));
    json_object_set_new(d, "kind", json_string(use_kind ? r->kind : r->plural));
    return d;
}

/* ---- duplicate keys: where jansson stopped, as a Go field path ------- */

typedef struct frame {
    int is_obj;
    int expect_key;
    long idx;
    char key[128];
} frame;

/* Walks text up to pos and writes the path of the key read last
 * ("spec.parallelism", "spec.containers[0].name"). */
static void path_at(const char *text, size_t pos, char *out, size_t outlen)
{
    frame st[64];
    int depth = 0;
    out[0] = '\0';
    for (size_t i = 0; i < pos; i++) {
        char c = text[i];
        if (c == '"') {
            size_t start = ++i;
            while (i < pos && text[i] != '"')
                i += text[i] == '\\' ? 2 : 1;
            if (depth && st[depth - 1].is_obj && st[depth - 1].expect_key) {
                size_t n = i - start < sizeof st[0].key - 1 ? i - start : sizeof st[0].key - 1;
                memcpy(st[depth - 1].key, text + start, n);
                st[depth - 1].key[n] = '\0';
                st[depth - 1].expect_key = 0;
            }
        } else if ((c == '{' || c == '[') && depth < 64) {
            st[depth++] = (frame){c == '{', c == '{', 0, ""};
        } else if (c == '}' || c == ']') {
            depth -= depth > 0;
        } else if (c == ',' && depth) {
            if (st[depth - 1].is_obj)
                st[depth - 1].expect_key = 1;
            else
                st[depth - 1].idx++;
        }
    }
    size_t len = 0;
    for (int d = 0; d < depth && len < outlen; d++) {
        int w;
        if (st[d].is_obj)
            w = snprintf(out + len, outlen - len, "%s%s", len ? "." : "", st[d].key);
        else
            w = snprintf(out + len, outlen - len, "[%ld]", st[d].idx);
        len += w > 0 ? (size_t)w : 0;
    }
}

/* ---- the type and field walk ----------------------------------------- */

typedef struct walk {
    const json_t *root;  /* resolves $ref */
    int crd;             /* CRD schema: types are left to oas_validate (422) */
    json_t *unknown;     /* array of paths */
    char type_err[1024]; /* the first decode error */
    json_t *replace;     /* a value the caller puts in place of the one walked (new) */
} walk;

static const char *short_def(const char *ref)
{
    const char *dot = strrchr(ref, '.');
    return dot ? dot + 1 : ref;
}

static const char *json_type_word(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    default:
        return "number";
    }
}

static const char *go_type(const json_t *schema)
{
    const char *t = json_string_value(json_object_get(schema, "type"));
    const char *f = json_string_value(json_object_get(schema, "format"));
    if (!t)
        return "struct";
    if (strcmp(t, "integer") == 0)
        return f && strcmp(f, "int64") == 0 ? "int64" : "int32";
    if (strcmp(t, "boolean") == 0)
        return "bool";
    if (strcmp(t, "number") == 0)
        return "float64";
    if (strcmp(t, "array") == 0)
        return "[]";
    if (strcmp(t, "object") == 0)
        return "map[string]string";
    return t;
}

static int quantity_ok(const char *s)
{
    regex_t re;
    if (regcomp(&re, "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$", REG_EXTENDED | REG_NOSUB))
        return 1;
    int ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok && *s;
}

static void join(char *out, size_t len, const char *path, const char *key)
{
    snprintf(out, len, "%s%s%s", path, *path ? "." : "", key);
}

static void walk_value(walk *w, const json_t *schema, json_t *v, const char *path,
                       const char *owner);

static void walk_value(walk *w, const json_t *schema, json_t *v, const char *path,
                       const char *owner)
{
    if (w->type_err[0] || !schema || json_is_null(v))
        return;
    const char *ref = json_string_value(json_object_get(schema, "$ref"));
    if (ref) {
        char err[256];
        const json_t *target = oas_resolve_ref(w->root, ref, err, sizeof err);
        const char *name = short_def(ref);
        if (strcmp(name, "Quantity") == 0) {
            if (json_is_string(v) && !quantity_ok(json_string_value(v)))
                snprintf(w->type_err, sizeof w->type_err,
                         "quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
            /* A number is a quantity too; it is stored in its string form. */
            char q[64];
            if (json_is_integer(v)) {
                snprintf(q, sizeof q, "%lld", (long long)json_integer_value(v));
                w->replace = json_string(q);
            } else if (json_is_real(v)) {
                double milli = json_real_value(v) * 1000.0;
                long long m = (long long)(milli + (milli < 0 ? -0.5 : 0.5));
                if (m % 1000 == 0)
                    snprintf(q, sizeof q, "%lld", m / 1000);
                else
                    snprintf(q, sizeof q, "%lldm", m);
                w->replace = json_string(q);
            }
            return;
        }
        if (strcmp(name, "IntOrString") == 0 || strcmp(name, "RawExtension") == 0 ||
            strcmp(name, "FieldsV1") == 0 || strcmp(name, "JSON") == 0)
            return;
        if (strcmp(name, "Time") == 0 || strcmp(name, "MicroTime") == 0) {
            if (!json_is_string(v))
                snprintf(w->type_err, sizeof w->type_err,
                         "json: cannot unmarshal %s into Go struct field %s.%s of type string",
                         json_type_word(v), owner, path);
            return;
        }
        walk_value(w, target, v, path, json_object_get(target, "properties") ? name : owner);
        return;
    }
    if (json_is_true(json_object_get(schema, "x-kubernetes-preserve-unknown-fields")) ||
        json_is_true(json_object_get(schema, "x-kubernetes-int-or-string")))
        return;
    const char *t = json_string_value(json_object_get(schema, "type"));
    const json_t *props = json_object_get(schema, "properties");
    int want_obj = props || (t && strcmp(t, "object") == 0);
    int bad = 0;
    if (want_obj)
        bad = !json_is_object(v);
    else if (!t)
        return;
    else if (strcmp(t, "array") == 0)
        bad = !json_is_array(v);
    else if (strcmp(t, "string") == 0)
        bad = !json_is_string(v);
    else if (strcmp(t, "integer") == 0)
        bad = !json_is_integer(v);
    else if (strcmp(t, "number") == 0)
        bad = !json_is_number(v);
    else if (strcmp(t, "boolean") == 0)
        bad = !json_is_boolean(v);
    if (bad) {
        if (!w->crd)
            snprintf(w->type_err, sizeof w->type_err,
                     "json: cannot unmarshal %s into Go struct field %s.%s of type %s",
                     json_type_word(v), owner, path, go_type(schema));
        return;
    }
    char sub[1024];
    if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item)
        {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            walk_value(w, json_object_get(schema, "items"), item, sub, owner);
            if (w->replace) {
                json_array_set_new(v, i, w->replace);
                w->replace = NULL;
            }
        }
        return;
    }
    if (!json_is_object(v))
        return;
    const json_t *addl = json_object_get(schema, "additionalProperties");
    const char *key;
    json_t *member;
    void *tmp;
    json_object_foreach_safe(v, tmp, key, member)
    {
        join(sub, sizeof sub, path, key);
        const json_t *ps = json_object_get(props, key);
        if (ps) {
            walk_value(w, ps, member, sub, owner);
        } else if (json_is_object(addl)) {
            walk_value(w, addl, member, sub, owner);
        } else if (props && !json_is_true(addl)) {
            json_array_append_new(w->unknown, json_string(sub));
            json_object_del(v, key);
        }
        if (w->replace) {
            json_object_set_new(v, key, w->replace);
            w->replace = NULL;
        }
    }
}

static void drop_nulls(json_t *v)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            drop_nulls(x);
        }
        return;
    }
    const char *k;
    json_t *x;
    void *tmp;
    json_object_foreach_safe(v, tmp, k, x)
    {
        if (json_is_null(x))
            json_object_del(v, k);
        else
            drop_nulls(x);
    }
}

static const json_t *schema_of(fk_store *st, int res, char *ref, size_t len)
{
    if (fk_resources[res].def) {
        snprintf(ref, len, "#/definitions/%s", fk_resources[res].def);
        return st->swagger;
    }
    return st->vc_schema;
}

static json_t *bad_request(const char *kind, const char *fmt_msg)
{
    char msg[2048];
    snprintf(msg, sizeof msg, "%s in version \"%s\" cannot be handled as a %s: %s", kind, "v1",
             kind, fmt_msg);
    return fk_status(400, "BadRequest", msg, NULL);
}

int fk_decode(fk_store *st, int res, const char *body, size_t len, enum fk_fieldval fv,
              json_t **out, json_t **warnings, json_t **status)
{
    const fk_res *r = &fk_resources[res];
    json_error_t jerr;
    char dup[512] = "";
    *out = NULL;
    *warnings = json_array();
    *status = NULL;
    json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj && strstr(jerr.text, "duplicate object key")) {
        path_at(body, (size_t)jerr.position, dup, sizeof dup);
        obj = json_loadb(body, len, 0, &jerr);
    }
    if (!obj || !json_is_object(obj)) {
        char msg[1024], head[32];
        size_t n = len < 30 ? len : 30;
        memcpy(head, body, n);
        head[n] = '\0';
        int at_end = !obj && (size_t)jerr.position >= len - (len > 0);
        snprintf(msg, sizeof msg,
                 "the object provided is unrecognized (must be of type %s): couldn't get "
                 "version/kind; json parse error: %s (%s ...)",
                 r->kind,
                 obj      ? "cannot unmarshal into Go value of type struct"
                 : at_end ? "unexpected end of JSON input"
                          : "invalid character looking for beginning of value",
                 head);
        json_decref(obj);
        *status = fk_status(400, "BadRequest", msg, NULL);
        return 400;
    }
    const char *av = json_string_value(json_object_get(obj, "apiVersion"));
    if (av && strcmp(av, r->api_version)) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "the API version in the data (%s) does not match the expected API version (%s)",
                 av, r->api_version);
        json_decref(obj);
        *status = fk_status(400, "BadRequest", msg, NULL);
        return 400;
    }
    char ref[256] = "";
    const json_t *root = schema_of(st, res, ref, sizeof ref);
    const json_t *schema = root;
    if (*ref) {
        char e[256];
        schema = oas_resolve_ref(root, ref, e, sizeof e);
    }
    walk w = {.root = root, .crd = r->def == NULL, .unknown = json_array()};
    walk_value(&w, schema, obj, "", short_def(ref[0] ? ref : r->kind));
    if (w.type_err[0]) {
        *status = bad_request(r->kind, w.type_err);
        goto fail;
    }
    if (fv == FK_FV_STRICT && (dup[0] || json_array_size(w.unknown))) {
        char msg[4096] = "strict decoding error: ";
        size_t i;
        json_t *p;
        if (dup[0])
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "duplicate field \"%s\"", dup);
        json_array_foreach(w.unknown, i, p)
        {
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%sunknown field \"%s\"",
                     (i || dup[0]) ? ", " : "", json_string_value(p));
        }
        *status = bad_request(r->kind, msg);
        goto fail;
    }
    if (fv == FK_FV_WARN) {
        char msg[1200];
        size_t i;
        json_t *p;
        if (dup[0]) {
            snprintf(msg, sizeof msg, "299 - \"duplicate field \\\"%s\\\"\"", dup);
            json_array_append_new(*warnings, json_string(msg));
        }
        json_array_foreach(w.unknown, i, p)
        {
            snprintf(msg, sizeof msg, "299 - \"unknown field \\\"%s\\\"\"", json_string_value(p));
            json_array_append_new(*warnings, json_string(msg));
        }
    }
    json_decref(w.unknown);
    /* What the schema says beyond types (required members, enums, CRD limits).
     * A JSON null decodes to Go's zero value, whatever the field's type. */
    char err[1024];
    json_t *plain = json_deep_copy(obj);
    drop_nulls(plain);
    int bad = oas_validate(root, schema, plain, 0, err, sizeof err) != 0;
    json_decref(plain);
    if (bad) {
        char msg[1400];
        const char *name = fk_str(obj, "metadata.name");
        snprintf(msg, sizeof msg, "%s%s%s \"%s\" is invalid: %s", r->kind, *r->group ? "." : "",
                 r->group, name, err);
        json_t *d = fk_details(res, name, 1);
        json_object_set_new(
            d, "causes", json_pack("[{s:s, s:s}]", "reason", "FieldValueInvalid", "message", err));
        *status = fk_status(422, "Invalid", msg, d);
        json_decref(obj);
        return 422;
    }
    *out = obj;
    return 0;
fail:
    json_decref(w.unknown);
    json_decref(obj);
    return 400;
}

/* ---- semantic validation --------------------------------------------- */

static const char DNS1123_SUB[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
static const char DNS1035[] =
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
static const char LABEL_VALUE[] =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

static const char QUALIFIED_NAME[] =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

static int matches(const char *pattern, const char *s)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB))
        return 0;
    int ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void cause(json_t *causes, const char *reason, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void cause(json_t *causes, const char *reason, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_array_append_new(
        causes, json_pack("{s:s, s:s, s:s}", "reason", reason, "message", msg, "field", field));
}

static void check_subdomain(json_t *causes, const char *field, const char *name)
{
    if (strlen(name) > 253)
        cause(causes, "FieldValueInvalid", field,
              "Invalid value: \"%s\": must be no more than 253 characters", name);
    else if (!matches("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", name))
        cause(causes, "FieldValueInvalid", field, "Invalid value: \"%s\": %s", name, DNS1123_SUB);
}

static void check_labels(json_t *causes, const char *field, const json_t *labels)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)labels, k, v)
    {
        /* The key: [prefix/]name, as IsQualifiedName checks it. */
        const char *slash = strchr(k, '/'), *name = slash ? slash + 1 : k;
        if (slash) {
            char prefix[300];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(slash - k), k);
            if (strlen(prefix) > 253 || !*prefix ||
                !matches("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                         prefix))
                cause(causes, "FieldValueInvalid", field, "Invalid value: \"%s\": prefix part %s",
                      k, DNS1123_SUB);
        }
        if (!*name)
            cause(causes, "FieldValueInvalid", field,
                  "Invalid value: \"%s\": name part must be non-empty", k);
        else if (strlen(name) > 63)
            cause(causes, "FieldValueInvalid", field,
                  "Invalid value: \"%s\": name part must be no more than 63 characters", k);
        else if (!matches("^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$", name))
            cause(causes, "FieldValueInvalid", field, "Invalid value: \"%s\": name part %s", k,
                  QUALIFIED_NAME);
        const char *s = json_string_value(v);
        if (!s)
            continue;
        if (strlen(s) > 63)
            cause(causes, "FieldValueInvalid", field,
                  "Invalid value: \"%s\": must be no more than 63 characters", s);
        else if (*s && !matches("^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", s))
            cause(causes, "FieldValueInvalid", field, "Invalid value: \"%s\": %s", s, LABEL_VALUE);
    }
}

static void check_pod_spec(json_t *causes, const char *prefix, const json_t *spec)
{
    char field[512];
    const json_t *cs = json_object_get(spec, "containers");
    if (json_array_size(cs) == 0) {
        snprintf(field, sizeof field, "%s.containers", prefix);
        cause(causes, "FieldValueRequired", field, "Required value");
    }
    size_t i;
    json_t *c;
    json_array_foreach(cs, i, c)
    {
        if (!*fk_str(c, "image")) {
            snprintf(field, sizeof field, "%s.containers[%zu].image", prefix, i);
            cause(causes, "FieldValueRequired", field, "Required value");
        }
    }
}

static void check_int_min(json_t *causes, const json_t *obj, const char *path, long min)
{
    const json_t *v = fk_path((json_t *)obj, path, 0);
    if (json_is_integer(v) && json_integer_value(v) < min)
        cause(causes, "FieldValueInvalid", path,
              "Invalid value: %lld: must be greater than or equal to %ld",
              (long long)json_integer_value(v), min);
}

static void check_job(json_t *causes, const json_t *job)
{
    const char *name = fk_str(job, "metadata.name");
    int indexed = strcmp(fk_str(job, "spec.completionMode"), "Indexed") == 0;
    const json_t *comp = fk_path((json_t *)job, "spec.completions", 0);
    check_subdomain(causes, "metadata.name", name);
    if (indexed && json_is_integer(comp) && json_integer_value(comp) > 0) {
        /* Pods are named <job>-<index>; their hostname must be a DNS label. */
        char host[600];
        snprintf(host, sizeof host, "%s-%lld", name, (long long)json_integer_value(comp) - 1);
        if (strlen(host) > 63)
            cause(causes, "FieldValueInvalid", "metadata.name",
                  "Invalid value: \"%s\": will not able to create pod with invalid DNS label: %s",
                  name, host);
    }
    check_labels(causes, "metadata.labels", fk_path((json_t *)job, "metadata.labels", 0));
    check_int_min(causes, job, "spec.parallelism", 0);
    check_int_min(causes, job, "spec.completions", 0);
    check_int_min(causes, job, "spec.backoffLimit", 0);
    check_int_min(causes, job, "spec.ttlSecondsAfterFinished", 0);
    const json_t *ads = fk_path((json_t *)job, "spec.activeDeadlineSeconds", 0);
    if (json_is_integer(ads) && json_integer_value(ads) <= 0)
        cause(causes, "FieldValueInvalid", "spec.activeDeadlineSeconds",
              "Invalid value: %lld: must be greater than 0", (long long)json_integer_value(ads));
    if (indexed && !json_is_integer(comp))
        cause(causes, "FieldValueRequired", "spec.completions",
              "Required value: when completion mode is Indexed");
    const char *mode = fk_str(job, "spec.completionMode");
    if (*mode && strcmp(mode, "Indexed") && strcmp(mode, "NonIndexed"))
        cause(causes, "FieldValueNotSupported", "spec.completionMode",
              "Unsupported value: \"%s\": supported values: \"NonIndexed\", \"Indexed\"", mode);
    /* The job-name label the server adds must itself be a valid label value. */
    const json_t *tl = fk_path((json_t *)job, "spec.template.metadata.labels", 0);
    check_labels(causes, "spec.template.labels", tl);
    const char *rp = fk_str(job, "spec.template.spec.restartPolicy");
    if (strcmp(rp, "Never") && strcmp(rp, "OnFailure")) {
        if (!*rp)
            cause(causes, "FieldValueRequired", "spec.template.spec.restartPolicy",
                  "Required value: valid values: \"OnFailure\", \"Never\"");
        else
            cause(causes, "FieldValueNotSupported", "spec.template.spec.restartPolicy",
                  "Unsupported value: \"%s\": supported values: \"OnFailure\", \"Never\"", rp);
    }
    check_pod_spec(causes, "spec.template.spec", fk_path((json_t *)job, "spec.template.spec", 0));
}

/* A Secret's data (and stringData) keys are config keys; the whole is at most 1 MiB. */
static void check_secret_data(json_t *causes, const json_t *obj)
{
    static const char *const members[] = {"data", "stringData"};
    size_t total = 0;
    for (int m = 0; m < 2; m++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(obj, members[m]), k, v)
        {
            char field[512];
            snprintf(field, sizeof field, "%s[%s]", members[m], k);
            if (strlen(k) > 253)
                cause(causes, "FieldValueInvalid", field,
                      "Invalid value: \"%s\": must be no more than 253 characters", k);
            else if (!matches("^[-._a-zA-Z0-9]+$", k))
                cause(causes, "FieldValueInvalid", field,
                      "Invalid value: \"%s\": a valid config key must consist of alphanumeric "
                      "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                      "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                      k);
            /* data's values are base64 (decoded: 3/4 of it), stringData's plain. */
            size_t n = json_string_length(v);
            total += m == 0 ? n / 4 * 3 : n;
        }
    }
    if (total > 1048576)
        cause(causes, "FieldValueTooLong", "data",
              "Too long: must have at most 1048576 bytes");
}

int fk_validate(int res, const json_t *obj, json_t **status)
{
    const fk_res *r = &fk_resources[res];
    const char *name = fk_str(obj, "metadata.name");
    json_t *causes = json_array();
    *status = NULL;
    if (!*name) {
        cause(causes, "FieldValueRequired", "metadata.name",
              "Required value: name or generateName is required");
    } else if (res == FK_JOBS) {
        check_job(causes, obj);
    } else if (res == FK_SERVICES) {
        if (strlen(name) > 63)
            cause(causes, "FieldValueInvalid", "metadata.name",
                  "Invalid value: \"%s\": must be no more than 63 characters", name);
        else if (!matches("^[a-z]([-a-z0-9]*[a-z0-9])?$", name))
            cause(causes, "FieldValueInvalid", "metadata.name", "Invalid value: \"%s\": %s", name,
                  DNS1035);
        check_labels(causes, "metadata.labels", fk_path((json_t *)obj, "metadata.labels", 0));
    } else if (res == FK_SECRETS) {
        check_subdomain(causes, "metadata.name", name);
        check_labels(causes, "metadata.labels", fk_path((json_t *)obj, "metadata.labels", 0));
        check_secret_data(causes, obj);
    } else if (res == FK_PODS) {
        check_subdomain(causes, "metadata.name", name);
        check_labels(causes, "metadata.labels", fk_path((json_t *)obj, "metadata.labels", 0));
        check_pod_spec(causes, "spec", fk_path((json_t *)obj, "spec", 0));
    } else if (res != FK_EVENTS) {
        check_subdomain(causes, "metadata.name", name);
        check_labels(causes, "metadata.labels", fk_path((json_t *)obj, "metadata.labels", 0));
    }
    size_t n = json_array_size(causes);
    if (n == 0) {
        json_decref(causes);
        return 0;
    }
    char msg[8192];
    int w = snprintf(msg, sizeof msg, "%s%s%s \"%s\" is invalid: %s", r->kind, *r->group ? "." : "",
                     r->group, name, n > 1 ? "[" : "");
    size_t len = w > 0 ? (size_t)w : 0;
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s: %s", i ? ", " : "",
                                    fk_str(c, "field"), fk_str(c, "message"));
    }
    if (n > 1 && len < sizeof msg - 1)
        strcat(msg, "]");
    json_t *d = fk_details(res, name, 1);
    json_object_set_new(d, "causes", causes);
    *status = fk_status(422, "Invalid", msg, d);
    return 422;
}
