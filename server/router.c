/*
 * router.c - route table matching; see router.h for the template rules.
 *
 * The table is small (a dozen routes), so a linear scan with segment-wise
 * comparison is both the simplest and the fastest choice.
 */
#include "server/router.h"

#include <string.h>

/* Length of the segment starting at s (up to '/' or the end). */
static size_t seg_len(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash ? (size_t)(slash - s) : strlen(s);
}

/* Matches one template segment t[0..tn) against a path segment p[0..pn). */
static int match_segment(const char *t, size_t tn, const char *p, size_t pn, char *id,
                         size_t *idn)
{
    if (tn >= 4 && memcmp(t, "{id}", 4) == 0) {
        const char *suffix = t + 4;
        size_t sn = tn - 4;
        if (pn <= sn || memcmp(p + pn - sn, suffix, sn) != 0)
            return 0;
        size_t n = pn - sn;
        if (n > ROUTER_MAX_ID || memchr(p, ':', n))
            return 0;
        memcpy(id, p, n);
        id[n] = '\0';
        *idn = n;
        return 1;
    }
    return tn == pn && memcmp(t, p, tn) == 0;
}

/* 1 when path matches the template; id receives the {id} value ("" if none). */
static int match_template(const char *tmpl, const char *path, char *id)
{
    size_t idn = 0;
    id[0] = '\0';
    if (tmpl[0] != '/' || path[0] != '/')
        return 0;
    const char *t = tmpl + 1, *p = path + 1;
    for (;;) {
        size_t tn = seg_len(t), pn = seg_len(p);
        if (!match_segment(t, tn, p, pn, id, &idn))
            return 0;
        t += tn;
        p += pn;
        if (*t == '\0' || *p == '\0')
            return *t == '\0' && *p == '\0';
        t++; /* both are at '/' */
        p++;
    }
}

/* Methods in the order an Allow header lists them; others follow in table order. */
static const char *const method_order[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
#define NORDER (sizeof method_order / sizeof method_order[0])

/* Appends ", method" (or "method") to allow unless it is already listed. */
static void allow_append(char *allow, const char *method)
{
    size_t mlen = strlen(method);
    for (const char *s = allow; *s;) {
        size_t n = strcspn(s, ",");
        if (n == mlen && memcmp(s, method, n) == 0)
            return;
        s += n;
        while (*s == ',' || *s == ' ')
            s++;
    }
    size_t used = strlen(allow);
    if (used + (used ? 2 : 0) + mlen + 1 > ROUTER_ALLOW_LEN)
        return; /* cannot happen with the route table's few methods */
    if (used) {
        memcpy(allow + used, ", ", 2);
        used += 2;
    }
    memcpy(allow + used, method, mlen + 1);
}

/* The Allow value for path: every method of every route whose template matches it. */
static void build_allow(const api_route *routes, size_t n, const char *path, char *allow)
{
    char id[ROUTER_MAX_ID + 1];
    allow[0] = '\0';
    for (size_t k = 0; k <= NORDER; k++) {
        for (size_t i = 0; i < n; i++) {
            int known = 0;
            for (size_t j = 0; j < NORDER; j++)
                known |= strcmp(routes[i].method, method_order[j]) == 0;
            int wanted = k < NORDER ? strcmp(routes[i].method, method_order[k]) == 0 : !known;
            if (wanted && match_template(routes[i].path, path, id))
                allow_append(allow, routes[i].method);
        }
    }
}

router_result router_match_route(const api_route *routes, size_t n, const char *method,
                                 const char *path, router_match *m)
{
    char id[ROUTER_MAX_ID + 1];
    const char *want = strcmp(method, "HEAD") == 0 ? "GET" : method;

    m->route = NULL;
    m->tmpl = NULL;
    m->id[0] = '\0';
    m->allow[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!match_template(routes[i].path, path, id))
            continue;
        if (strcmp(routes[i].method, want) == 0) {
            m->route = &routes[i];
            m->tmpl = routes[i].path;
            memcpy(m->id, id, sizeof id);
            return ROUTER_FOUND;
        }
        if (!m->tmpl)
            m->tmpl = routes[i].path;
    }
    if (!m->tmpl)
        return ROUTER_NOT_FOUND;
    build_allow(routes, n, path, m->allow);
    return ROUTER_BAD_METHOD;
}
