/*
 * openapi_doc.h - openapi/openapi.yaml, embedded into the binary at build time
 * (api/embed.cmake generates the definition), so /openapi.yaml needs no file
 * at run time and always matches the code it was built with.
 */
#ifndef TY_API_OPENAPI_DOC_H
#define TY_API_OPENAPI_DOC_H

#include <stddef.h>

/* The document's bytes followed by a NUL (not counted in the length). */
extern const char api_openapi_yaml[];
extern const size_t api_openapi_yaml_len;

#endif
