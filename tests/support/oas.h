/*
 * oas.h - an OpenAPI document loader and a JSON Schema validator for tests.
 *
 * Three layers, usable separately:
 *
 *  1. oas_yaml_parse() turns YAML (or JSON, which is YAML) into a jansson
 *     value with the YAML 1.2 core schema: quoted scalars and scalars tagged
 *     !!str stay strings; plain scalars that spell null (~, null, Null, NULL,
 *     empty), a boolean (true/True/TRUE, false/False/FALSE), an integer
 *     (decimal, 0o octal, 0x hex) or a float become those JSON types; every
 *     other plain scalar is a string. YAML 1.1's yes/no/on/off stay strings,
 *     as they do in YAML 1.2 and in every OpenAPI tool that follows it.
 *     Anchors and aliases are supported; merge keys (<<) and non-scalar keys
 *     are not and fail. Mapping keys are always strings (200: stays "200").
 *     .inf and .nan have no JSON form and stay strings.
 *
 *  2. oas_validate() checks a JSON instance against one schema object
 *     (OpenAPI 3.0 Schema Object, Swagger 2.0 Schema, or the JSON Schema
 *     subset Kubernetes CRDs use), resolving local "$ref"s ("#/a/b", JSON
 *     Pointer, ~0 ~1 and %XX escapes) against a root document that is just a
 *     json_t: it knows nothing of the document's layout.
 *     Keywords: $ref (siblings ignored, as OpenAPI 3.0 says), type (string,
 *     number, integer, boolean, array, object, null), nullable (OpenAPI
 *     3.0.3: adds null to the schema's own type and nothing else, so enum
 *     must list null and allOf/anyOf/oneOf/not still apply; nullable
 *     without type is a schema error, as strict tools such as Ajv say),
 *     x-nullable (Swagger 2.0: a null instance passes the whole schema), enum,
 *     const, multipleOf, minimum, maximum, exclusiveMinimum,
 *     exclusiveMaximum (boolean form of 3.0 and numeric form of 3.1),
 *     minLength, maxLength (in Unicode code points), pattern, minItems,
 *     maxItems, uniqueItems, items (one schema), minProperties,
 *     maxProperties, properties, required, additionalProperties (boolean or
 *     schema), allOf, anyOf, oneOf, not, format (date-time per RFC 3339;
 *     int32 and int64 ranges; int-or-string and x-kubernetes-int-or-string
 *     accept an integer or a string; other formats are not checked),
 *     x-kubernetes-preserve-unknown-fields (lifts OAS_STRICT for that object).
 *     "integer" accepts JSON integers only, not 1.0.
 *
 *     Patterns are ECMA-262 as JSON Schema says, run through POSIX regcomp()
 *     (REG_EXTENDED | REG_NOSUB, C locale, bytes). The translation supports:
 *     literals, ., ^, $, |, (...), (?:...), [...] and [^...] classes with
 *     ranges, the escapes \d \w \s (and \D \W \S outside brackets), escaped
 *     punctuation (\. \- \/ \\ ...), \t \n \r, and the quantifiers * + ? {n}
 *     {n,} {n,m} (lazy forms like *? are matched greedily, which does not
 *     change whether a string matches). Lookarounds, backreferences, \b, \B,
 *     \uXXXX and other escapes are refused with an error naming the pattern,
 *     so a schema never passes silently because of an unsupported pattern.
 *     A pattern matches anywhere in the string unless anchored, as in ECMA.
 *
 *  3. oas_load_file() + oas_check_response() validate an HTTP response
 *     against an OpenAPI 3.0 document: path template match, operation,
 *     response by status (exact, then "2XX" style, then "default"), media
 *     type (parameters after ';' ignored, case-insensitive, media ranges with
 *     a wildcard subtype or type honoured) and, for JSON media types (application/json and
 *     any +json), the body against the schema. A body of another media type
 *     (text/plain, application/yaml) is checked as a JSON string against the
 *     schema when it is UTF-8 (so {type: string} allows an empty body and
 *     minLength: 1 does not); bytes that are not UTF-8 pass only
 *     format: binary.
 *
 * Errors: functions return 0 on success and -1 on failure with a one-line,
 * NUL-terminated reason in err (truncated to errlen). For a validation
 * failure the reason starts with the instance's JSON path ("$.jobs[0].id").
 * Thread safety: a loaded oas and the schemas are only read; several threads
 * may validate against the same document at once.
 */
#ifndef TY_TEST_OAS_H
#define TY_TEST_OAS_H

#include <jansson.h>
#include <stddef.h>

/* Flags for oas_validate(). */
enum {
    /* Objects whose schema lists "properties" but says nothing of
     * additionalProperties reject members it does not list (what an
     * apiserver's strict field validation does). */
    OAS_STRICT = 1u << 0,
};

/* Parses YAML text (one document) into *out (new). */
int oas_yaml_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen);
/* Reads and parses a YAML or JSON file into *out (new). */
int oas_yaml_load_file(const char *path, json_t **out, char *err, size_t errlen);

/* Resolves a local reference ("#/components/schemas/Job") against root.
 * Returns a borrowed value or NULL (err says why). */
const json_t *oas_resolve_ref(const json_t *root, const char *ref, char *err, size_t errlen);

/* Validates instance against schema; both borrowed. root resolves "$ref"s
 * (may be NULL when the schema has none). flags: OAS_STRICT or 0. */
int oas_validate(const json_t *root, const json_t *schema, const json_t *instance, unsigned flags,
                 char *err, size_t errlen);

typedef struct oas oas;

/* Loads an OpenAPI 3.x document (YAML or JSON). *out is new; oas_free() it. */
int oas_load_file(const char *path, oas **out, char *err, size_t errlen);
/* Takes an already parsed document (stolen on success and on failure). */
int oas_from_json(json_t *doc, oas **out, char *err, size_t errlen);
void oas_free(oas *o);
/* The document (borrowed, valid until oas_free). */
const json_t *oas_doc(const oas *o);
/* Flags passed to oas_validate() by oas_check_response(); 0 by default. */
void oas_set_flags(oas *o, unsigned flags);

/*
 * Finds the path template of the document that matches concrete_path (a
 * query string after '?' is ignored). A template segment like "{id}:cancel"
 * matches "abc:cancel"; when several templates match, the one with the most
 * literal characters wins (so "/v1/jobs/{id}:cancel" beats "/v1/jobs/{id}").
 * Returns the template (borrowed) or NULL.
 */
const char *oas_match_path(const oas *o, const char *concrete_path);

/*
 * Checks one response: the path and method must be documented, the status
 * (or "NXX" or "default") must be documented for that operation, the
 * content type must be one of that response's media types (an empty body
 * with no content type matches a response without content), and a JSON body
 * must parse and conform to the media type's schema (another body: see
 * above). content_type may be NULL when the response had none. body need not
 * be NUL-terminated.
 */
int oas_check_response(const oas *o, const char *method, const char *concrete_path, int status,
                       const char *content_type, const char *body, size_t bodylen, char *err,
                       size_t errlen);

/* Looks up a response header by name (case-insensitive); NULL when absent. */
typedef const char *(*oas_header_fn)(const char *name, void *ud);

/*
 * Checks the headers documented for the response chosen as in
 * oas_check_response(): every header marked required must be present, and
 * every documented header that is present must conform to its schema
 * (integers and numbers are parsed from the text first). Content-Type is
 * skipped, as OpenAPI says.
 */
int oas_check_response_headers(const oas *o, const char *method, const char *concrete_path,
                               int status, oas_header_fn get, void *ud, char *err, size_t errlen);

/* Calls fn for every operation of the document, in document order (paths,
 * then methods). Methods are upper-cased ("GET"). Stops at fn's first
 * non-zero return and returns it; 0 otherwise. */
typedef int (*oas_op_fn)(const char *method, const char *path_template, const json_t *operation,
                         void *ud);
int oas_foreach_operation(const oas *o, oas_op_fn fn, void *ud);

#endif
