/*
 * kpick.h - parses only the named parts of a JSON text, skipping the rest without building it.
 *
 * A watch of pods delivers every pod whole (several KiB of JSON: the spec with its env and
 * volumes, managed fields, every condition) while the backend reads a few dozen fields of it.
 * Parsing the whole with jansson allocates a node for every key and value and frees them again
 * at once; skipping what is not wanted costs a scan of the bytes.
 *
 * What to keep is a "pick", a JSON object: each member names a field to keep, its value is
 * `true` (keep the field's value whole) or an object (keep, of the field's value, the members
 * that object names; of an array, each element that way). For example
 *   {"metadata": {"name": true, "labels": true}, "status": {"conditions": {"type": true}}}
 * keeps metadata.name, metadata.labels and the type of each status.conditions[i]. A field that
 * is not there is not there in the result either; a value that is not an object where the pick
 * has one is kept whole.
 *
 * The parts kept are checked as jansson's parser checks them (their numbers and strings with
 * escapes are parsed by jansson, the other strings checked for UTF-8 by its constructors; the
 * objects and arrays around them are built member by member here, without a parser set up per
 * value); the parts skipped are checked only for their structure (strings closed, brackets
 * balanced, nesting at most 2048 deep), which is all it takes to find where they end.
 */
#ifndef TY_SCHEDULER_KUBE_KPICK_H
#define TY_SCHEDULER_KUBE_KPICK_H

#include <jansson.h>
#include <stddef.h>

/*
 * The value of the JSON text (len bytes, one value, whitespace around it allowed) with only
 * what pick names (borrowed; NULL: the whole value), as a new value. NULL with a reason in err
 * for text that is not one JSON value, or without memory.
 */
json_t *ty_kpick_parse(const char *text, size_t len, const json_t *pick, char *err,
                       size_t errlen);

/*
 * The string at a path of n member names in the JSON object text (for example "metadata",
 * "uid"), copied into out (outlen bytes, cut to fit) without reading past it: the rest of the
 * text is neither parsed nor checked. That suits a large answer read for one field, when its
 * sender (an API server's 2xx) is trusted for its structure. A key or the string itself written
 * with escapes does not match. 0 when found; -1 when not there or not a string.
 */
int ty_kpick_string(const char *text, size_t len, const char *const *path, size_t n, char *out,
                    size_t outlen);

#endif
