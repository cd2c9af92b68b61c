/*
 * ty_json.h - compact JSON text written straight into a ty_buf.
 *
 * jansson parses and builds our JSON; these two writers exist because
 * json_dumps() was the largest single cost of answering a submission, and
 * because log lines must be written from strings that may not be valid UTF-8
 * (request paths, headers). For valid input the bytes are exactly those of
 * json_dumps(JSON_COMPACT) (a unit test holds them to it).
 */
#ifndef TY_JSON_H
#define TY_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "common/ty_buf.h"

/*
 * Appends s as a JSON string literal: at most `max` bytes of s, quotes,
 * backslashes and control characters escaped, every byte that is not part of
 * valid UTF-8 replaced by \uFFFD. TY_ETOOLARGE / TY_ENOMEM from the buffer.
 */
ty_err ty_json_put_string(ty_buf *b, const char *s, size_t max);

/* Appends json (borrowed) as compact JSON text. TY_EINVAL past 128 levels of nesting. */
ty_err ty_json_write(ty_buf *b, const json_t *json);

#endif
