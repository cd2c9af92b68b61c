#include "common/ty_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_MAX_DEPTH 128

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t need;
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        need = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        need = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        need = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF are invalid. */
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

ty_err ty_json_put_string(ty_buf *b, const char *s, size_t max)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strnlen(s, max);
    ty_err e = ty_buf_append(b, "\"", 1);
    size_t i = 0;
    while (!e && i < n) {
        /* Runs of plain ASCII are copied at once. */
        size_t run = i;
        while (run < n && u[run] >= 0x20 && u[run] < 0x80 && u[run] != '"' && u[run] != '\\')
            run++;
        if (run > i) {
            e = ty_buf_append(b, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = u[i];
        if (c >= 0x80) {
            size_t k = utf8_len(u + i, n - i);
            e = k ? ty_buf_append(b, s + i, k) : ty_buf_append(b, "\\uFFFD", 6);
            i += k ? k : 1;
            continue;
        }
        char esc[6] = {'\\', (char)c, 0, 0, 0, 0};
        size_t len = 2;
        switch (c) {
        case '"':
        case '\\':
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            len = 6;
            break;
        }
        e = ty_buf_append(b, esc, len);
        i++;
    }
    return e ? e : ty_buf_append(b, "\"", 1);
}

static ty_err write_value(ty_buf *b, const json_t *j, int depth)
{
    ty_err e = TY_OK;
    if (depth > WRITE_MAX_DEPTH)
        return TY_EINVAL;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        e = ty_buf_append(b, "{", 1);
        json_object_foreach((json_t *)j, key, val)
        {
            if (!e && !first)
                e = ty_buf_append(b, ",", 1);
            if (!e)
                e = ty_json_put_string(b, key, SIZE_MAX);
            if (!e)
                e = ty_buf_append(b, ":", 1);
            if (!e)
                e = write_value(b, val, depth + 1);
            first = 0;
        }
        return e ? e : ty_buf_append(b, "}", 1);
    }
    case JSON_ARRAY:
        e = ty_buf_append(b, "[", 1);
        for (size_t i = 0; i < json_array_size(j) && !e; i++) {
            if (i)
                e = ty_buf_append(b, ",", 1);
            if (!e)
                e = write_value(b, json_array_get(j, i), depth + 1);
        }
        return e ? e : ty_buf_append(b, "]", 1);
    case JSON_STRING:
        /* Strings with NUL bytes never come from our decoder; jansson's dump handles them. */
        if (strlen(json_string_value(j)) == json_string_length(j))
            return ty_json_put_string(b, json_string_value(j), SIZE_MAX);
        break;
    case JSON_INTEGER: {
        /* Digits by hand: vsnprintf costs more than the rest of a small value. */
        char digits[24];
        size_t i = sizeof digits;
        json_int_t v = json_integer_value(j);
        unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        do {
            digits[--i] = (char)('0' + mag % 10);
            mag /= 10;
        } while (mag);
        if (v < 0)
            digits[--i] = '-';
        return ty_buf_append(b, digits + i, sizeof digits - i);
    }
    case JSON_TRUE:
        return ty_buf_append(b, "true", 4);
    case JSON_FALSE:
        return ty_buf_append(b, "false", 5);
    case JSON_NULL:
        return ty_buf_append(b, "null", 4);
    default: /* reals: rare in our output, jansson knows their formatting */
        break;
    }
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return TY_ENOMEM;
    e = ty_buf_puts(b, text);
    free(text);
    return e;
}

ty_err ty_json_write(ty_buf *b, const json_t *json)
{
    return write_value(b, json, 0);
}
