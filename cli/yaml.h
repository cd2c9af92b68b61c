/*
 * yaml.h - job files for `trainyard submit`: YAML (or JSON, which is YAML) to the JSON the API
 * takes, `--set` overrides, and JSON back to YAML for `-o yaml`.
 *
 * Scalars follow the YAML 1.2 core schema: unquoted null/~/empty, true/false, integers and
 * floats become those JSON types; quoted scalars and everything else are strings. Anchors and
 * aliases are expanded, and merge keys (`<<: *base`, or a list of aliases) copy the members the
 * mapping does not set itself. A key a mapping sets twice is refused, as the API refuses a
 * duplicated JSON key (keys that become the same JSON key, such as 1 and '1', are the same key;
 * a key a merge brings and the mapping sets is not a duplicate). A file is untrusted input:
 * nesting (as deep as the API takes, aliases expanded) and the number of values produced
 * (aliases can multiply them) are bounded, and reading time is linear in the file's size.
 */
#ifndef TY_CLI_YAML_H
#define TY_CLI_YAML_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "common/ty_error.h"

/* Most values one document may expand to (aliases included), and deepest nesting: the API's
 * (SPEC_MAX_DEPTH in api/spec.h), so that a file the CLI reads is never refused for it. */
#define CLI_YAML_MAX_VALUES 100000
#define CLI_YAML_MAX_DEPTH 64

/*
 * Converts the one YAML document in text[0..len) into *out (new). Fails with TY_EINVAL on a
 * syntax error, a non-string or duplicated mapping key, an undefined or recursive alias, no or
 * several documents; TY_ETOOLARGE past the limits above; TY_ENOMEM. err then holds
 * "LINE:COLUMN: reason" (both from 1), for the caller to put the file's name before:
 * "job.yaml:3:1: duplicate key "name" (first at line 1)".
 */
ty_err cli_yaml_to_json(const char *text, size_t len, json_t **out, char *err, size_t errlen);

/*
 * Applies one override "a.b.c=value" to root (borrowed, changed): objects on the way are
 * created when missing; the value is parsed as JSON when it is a JSON value, else taken as a
 * string. TY_EINVAL with a reason in err on a missing '=', an empty path segment, or a path
 * through a non-object.
 */
ty_err cli_json_set(json_t *root, const char *assignment, char *err, size_t errlen);

/* Writes v (borrowed) as a YAML document on f. TY_EIO when writing fails. */
ty_err cli_json_to_yaml(const json_t *v, FILE *f);

#endif
