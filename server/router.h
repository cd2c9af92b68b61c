/*
 * router.h - matches a request's method and path against a route table.
 *
 * Templates are absolute paths split on '/'. A segment is either literal
 * ("jobs", "jobs:batch") or "{id}" optionally followed by a literal ":verb"
 * suffix ("{id}:cancel"). A plain "{id}" segment matches one non-empty path
 * segment without ':'; "{id}:verb" matches a segment that ends with ":verb"
 * and has a non-empty id before it that contains no ':'. So
 * "/v1/jobs/abc:cancel" matches "/v1/jobs/{id}:cancel" and never
 * "/v1/jobs/{id}", and a wrong verb is a 404, not a lookup of an odd id.
 *
 * HEAD is served by GET routes (the HTTP layer sends no body). The Allow list
 * of a 405 names each method of the path once, in the order GET, POST, PUT,
 * PATCH, DELETE, then any other in table order.
 */
#ifndef TY_SERVER_ROUTER_H
#define TY_SERVER_ROUTER_H

#include <stddef.h>

#include "api/api.h"

/* Longest {id} value accepted; longer segments do not match (404). */
#define ROUTER_MAX_ID 255
/* Room for an Allow header value listing every method of a path. */
#define ROUTER_ALLOW_LEN 64

typedef enum router_result {
    ROUTER_FOUND = 0,        /* route set */
    ROUTER_NOT_FOUND,        /* no template matches the path */
    ROUTER_BAD_METHOD,       /* a template matches, not with this method; allow set */
} router_result;

typedef struct router_match {
    const api_route *route;          /* borrowed from the table; ROUTER_FOUND only */
    const char *tmpl;                /* the matched template (FOUND, BAD_METHOD), else NULL */
    char id[ROUTER_MAX_ID + 1];      /* the {id} value, "" when the template has none */
    char allow[ROUTER_ALLOW_LEN];    /* "GET, POST" for BAD_METHOD, else "" */
} router_match;

/*
 * Looks up method + path (decoded, without the query) in routes[0..n).
 * The first route in table order whose template and method match wins.
 * Everything is written into *m; nothing is allocated.
 */
router_result router_match_route(const api_route *routes, size_t n, const char *method,
                                 const char *path, router_match *m);

#endif
