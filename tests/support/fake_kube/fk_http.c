/*
 * fk_http.c - the fake Kubernetes API server's HTTP face: routing, the REST
 * verbs, lists, pods/log, authentication, answering injected faults, and
 * main(). Watches are fk_watch.c's, the /fake control API fk_control.c's.
 *
 *   fake-kube-apiserver [--port N] [--token T] [--nodes FILE] [--window N]
 *                       [--swagger FILE] [--volcano-crd FILE]
 *
 * Plain HTTP on 127.0.0.1; with --port 0 the chosen port is printed on stdout
 * on one line. Answers are compact JSON plus "\n", as the apiserver writes for
 * a client whose User-Agent is not curl (pretty-printed for curl, 16).
 */
#include "tests/support/fake_kube/fk.h"
#include "tests/support/oas.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (3u << 20) /* the apiserver's request limit */

static fk_store g_st;
static const char *g_token;
/* What Trainyard asked of this API server (requests whose User-Agent starts "trainyard/"), as
 * RBAC sees it: {"Role|group|resource": {"verb": count}} ("ClusterRole|..." for a request
 * across namespaces or of a cluster-scoped resource; "pods/log" for a subresource). GET
 * /fake/requests answers it, for tests that hold the server to the RBAC deploy/ grants. */
static pthread_mutex_t g_asked_mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *g_asked;

typedef struct reqbuf {
    char *data;
    size_t len;
    int too_large;
} reqbuf;

/* ---- answers ---------------------------------------------------------- */

static const char *arg(struct MHD_Connection *c, const char *k)
{
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

static enum MHD_Result send_text(struct MHD_Connection *c, int code, const char *ctype,
                                 const char *body, size_t len, json_t *warnings)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-cache, private");
    char audit[64];
    pthread_mutex_lock(&g_st.mu);
    fk_uid(&g_st, audit, sizeof audit);
    pthread_mutex_unlock(&g_st.mu);
    MHD_add_response_header(r, "Audit-Id", audit);
    size_t i;
    json_t *w;
    json_array_foreach(warnings, i, w)
    {
        MHD_add_response_header(r, "Warning", json_string_value(w));
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    return ret;
}

/* Sends obj (stolen) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, int code, json_t *obj, json_t *warnings)
{
    const char *ua = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "User-Agent");
    int pretty = ua && (!strncmp(ua, "curl", 4) || !strncmp(ua, "Wget", 4) ||
                        !strncmp(ua, "Mozilla/5.0", 11));
    char *text = json_dumps(obj, pretty ? JSON_INDENT(2) | JSON_PRESERVE_ORDER : JSON_COMPACT);
    json_decref(obj);
    if (!text)
        return MHD_NO;
    size_t n = strlen(text);
    char *body = malloc(n + 2);
    if (!body) {
        free(text);
        return MHD_NO;
    }
    memcpy(body, text, n);
    body[n] = '\n';
    free(text);
    enum MHD_Result r = send_text(c, code, "application/json", body, n + 1, warnings);
    free(body);
    return r;
}

static enum MHD_Result send_status(struct MHD_Connection *c, json_t *status, json_t *warnings)
{
    int code = (int)json_integer_value(json_object_get(status, "code"));
    return send_json(c, code ? code : 500, status, warnings);
}

/* Sends status (stolen) with the Warning headers in warnings (stolen). */
static enum MHD_Result send_status_warned(struct MHD_Connection *c, json_t *status,
                                          json_t *warnings)
{
    enum MHD_Result r = send_status(c, status, warnings);
    json_decref(warnings);
    return r;
}

static enum MHD_Result not_found_resource(struct MHD_Connection *c)
{
    return send_status(c,
                       fk_status(404, "NotFound",
                                 "the server could not find the requested resource", json_object()),
                       NULL);
}

static json_t *not_found(int res, const char *name)
{
    char msg[700];
    const fk_res *r = &fk_resources[res];
    snprintf(msg, sizeof msg, "%s%s%s \"%s\" not found", r->plural, *r->group ? "." : "", r->group,
             name);
    return fk_status(404, "NotFound", msg, fk_details(res, name, 0));
}

/* ---- routes ----------------------------------------------------------- */

typedef struct route {
    int res;        /* -1: none */
    char ns[256];   /* namespace of a namespaced request; "" for all */
    char name[256]; /* "" for the collection */
    char sub[32];   /* "", "status", "log" */
} route;

/* Parses /api/v1/... and /apis/<group>/<version>/...; 0 on a match. */
static int parse_route(const char *url, route *rt)
{
    char path[1024], *seg[12];
    int n = 0;
    memset(rt, 0, sizeof *rt);
    rt->res = -1;
    snprintf(path, sizeof path, "%s", url);
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    char *save = NULL;
    for (char *t = strtok_r(path, "/", &save); t && n < 12; t = strtok_r(NULL, "/", &save))
        seg[n++] = t;
    const char *group, *version;
    int i;
    if (n >= 2 && !strcmp(seg[0], "api")) {
        group = "";
        version = seg[1];
        i = 2;
    } else if (n >= 3 && !strcmp(seg[0], "apis")) {
        group = seg[1];
        version = seg[2];
        i = 3;
    } else {
        return -1;
    }
    const char *plural;
    if (i < n && !strcmp(seg[i], "namespaces") && i + 2 < n && *group == '\0' + 0) {
        snprintf(rt->ns, sizeof rt->ns, "%s", seg[i + 1]);
        i += 2;
    } else if (i < n && !strcmp(seg[i], "namespaces") && i + 2 < n) {
        snprintf(rt->ns, sizeof rt->ns, "%s", seg[i + 1]);
        i += 2;
    } else if (i < n && !strcmp(seg[i], "namespaces") && *group == '\0') {
        rt->res = FK_NAMESPACES;
        if (i + 1 < n)
            snprintf(rt->name, sizeof rt->name, "%s", seg[i + 1]);
        return i + 2 >= n ? 0 : -1;
    }
    if (i >= n)
        return -1;
    plural = seg[i++];
    for (int r = 0; r < FK_NRES; r++) {
        const fk_res *x = &fk_resources[r];
        if (!strcmp(x->plural, plural) && !strcmp(x->group, group) && !strcmp(x->version, version))
            rt->res = r;
    }
    if (rt->res < 0 || (rt->ns[0] && !fk_resources[rt->res].namespaced))
        return -1;
    if (i < n)
        snprintf(rt->name, sizeof rt->name, "%s", seg[i++]);
    if (i < n)
        snprintf(rt->sub, sizeof rt->sub, "%s", seg[i++]);
    if (i < n)
        return -1;
    if (rt->sub[0] && strcmp(rt->sub, "status") && !(rt->res == FK_PODS && !strcmp(rt->sub, "log")))
        return -1;
    return 0;
}

/* ---- lists ------------------------------------------------------------ */

static char *b64(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
    return out;
}

static json_t *unb64_json(const char *s)
{
    size_t n = strlen(s);
    char pad[4096];
    if (n + 4 >= sizeof pad)
        return NULL;
    memcpy(pad, s, n);
    while (n % 4)
        pad[n++] = '=';
    pad[n] = '\0';
    for (size_t i = 0; i < n; i++)
        pad[i] = pad[i] == '-' ? '+' : pad[i] == '_' ? '/' : pad[i];
    unsigned char out[4096];
    int len = EVP_DecodeBlock(out, (unsigned char *)pad, (int)n);
    if (len < 0)
        return NULL;
    while (len > 0 && out[len - 1] == '\0')
        len--;
    return json_loadb((const char *)out, (size_t)len, JSON_ALLOW_NUL, NULL);
}

/* The v1.26 token: base64url (no padding) of
 * {"v":"meta.k8s.io/v1","rv":<list rv>,"start":"<last key>\u0000"}. */
static char *continue_token(long long rv, const char *start)
{
    char key[700];
    size_t n = (size_t)snprintf(key, sizeof key, "%s", start);
    key[n] = '\0';
    json_t *t = json_pack("{s:s, s:I, s:o}", "v", "meta.k8s.io/v1", "rv", (json_int_t)rv, "start",
                          json_stringn(key, n + 1));
    char *text = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    char *tok = text ? b64(text) : NULL;
    free(text);
    for (char *p = tok; p && *p; p++) {
        if (*p == '=')
            *p = '\0';
        else if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
    }
    return tok;
}

/*
 * What the Accept header asks a read to be served as, negotiated as the apiserver does: the
 * first media range it can serve wins. 0: the objects themselves (application/json, or no
 * header); 1: their metadata alone, as client-go's metadata informers ask for it
 * ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" for a list,
 * "...;as=PartialObjectMetadata;..." for a watch or a get); -1: the other one of these two, which
 * the apiserver answers with 406 NotAcceptable. Ranges the fake cannot serve (as=Table, YAML,
 * protobuf) are passed over; when none is left it serves JSON.
 */
static int accept_meta(struct MHD_Connection *c, int list)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", h ? h : "");
    char *save = NULL;
    for (char *r = strtok_r(buf, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
        char *psave = NULL, *type = strtok_r(r, ";", &psave);
        const char *as = NULL, *g = NULL, *v = NULL;
        if (!type)
            continue;
        type += strspn(type, " \t");
        type[strcspn(type, " \t")] = '\0';
        if (strcmp(type, "application/json") && strcmp(type, "*/*") &&
            strcmp(type, "application/*"))
            continue;
        for (char *kv = strtok_r(NULL, ";", &psave); kv; kv = strtok_r(NULL, ";", &psave)) {
            kv += strspn(kv, " \t");
            kv[strcspn(kv, " \t")] = '\0';
            if (!strncmp(kv, "as=", 3))
                as = kv + 3;
            else if (!strncmp(kv, "g=", 2))
                g = kv + 2;
            else if (!strncmp(kv, "v=", 2))
                v = kv + 2;
        }
        if (!as)
            return 0;
        int partial = !strcmp(as, "PartialObjectMetadata");
        int partial_list = !strcmp(as, "PartialObjectMetadataList");
        if (!(partial || partial_list) || !g || strcmp(g, "meta.k8s.io") || !v || strcmp(v, "v1"))
            continue;
        return partial_list == list ? 1 : -1;
    }
    return 0;
}

static enum MHD_Result not_acceptable(struct MHD_Connection *c, int list)
{
    return send_status(c,
                       fk_status(406, "NotAcceptable",
                                 list ? "you requested PartialObjectMetadata, but the requested "
                                        "object is a list"
                                      : "you requested PartialObjectMetadataList, but the "
                                        "requested object is not a list",
                                 NULL),
                       NULL);
}

json_t *fk_partial_of(const json_t *obj)
{
    return json_pack("{s:s, s:s, s:O}", "kind", "PartialObjectMetadata", "apiVersion",
                     "meta.k8s.io/v1", "metadata", json_object_get(obj, "metadata"));
}

static const char *list_kind(int res, char *buf, size_t len)
{
    snprintf(buf, len, "%sList", fk_resources[res].kind);
    return buf;
}

static enum MHD_Result do_list(struct MHD_Connection *c, const route *rt)
{
    const char *ls = arg(c, "labelSelector"), *fs = arg(c, "fieldSelector");
    const char *lim = arg(c, "limit"), *cont = arg(c, "continue");
    const char *rvq = arg(c, "resourceVersion"), *rvm = arg(c, "resourceVersionMatch");
    char err[256], kbuf[64];
    fk_sel *sel = NULL;
    int meta = accept_meta(c, 1);
    if (meta < 0)
        return not_acceptable(c, 1);
    if (fk_sel_parse(ls, &sel, err, sizeof err) != 0)
        return send_status(c, fk_status(400, "BadRequest", err, NULL), NULL);
    char msg[1200];
    if (fs && *fs && fk_fsel_check(rt->res, fs, msg, sizeof msg) != 0) {
        fk_sel_free(sel);
        return send_status(c, fk_status(400, "BadRequest", msg, NULL), NULL);
    }
    pthread_mutex_lock(&g_st.mu);
    long long cur_rv = (long long)g_st.rv;
    char start[600] = "";
    if (rvq && rvm && !strcmp(rvm, "Exact") && strtoull(rvq, NULL, 10) < g_st.window_rv) {
        pthread_mutex_unlock(&g_st.mu);
        fk_sel_free(sel);
        return send_status(c,
                           fk_status(410, "Expired",
                                     "The resourceVersion for the provided list is too old.", NULL),
                           NULL);
    }
    if (cont && *cont) {
        json_t *t = unb64_json(cont);
        long long trv = (long long)json_integer_value(json_object_get(t, "rv"));
        snprintf(start, sizeof start, "%s", fk_str(t, "start"));
        json_decref(t);
        if (trv < (long long)g_st.window_rv) {
            pthread_mutex_unlock(&g_st.mu);
            fk_sel_free(sel);
            char *tok = continue_token(-1, start);
            json_t *s = fk_status(
                410, "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results. "
                "Continuing with the provided token results in an inconsistent list - objects "
                "that were created, modified, or deleted between the time the first chunk was "
                "returned and now may show up in the list.",
                NULL);
            json_object_set_new(json_object_get(s, "metadata"), "continue",
                                json_string(tok ? tok : ""));
            free(tok);
            return send_status(c, s, NULL);
        }
    }
    json_t *all = fk_list(&g_st, rt->res, rt->ns[0] ? rt->ns : NULL);
    pthread_mutex_unlock(&g_st.mu);
    json_t *items = json_array();
    long limit = lim ? strtol(lim, NULL, 10) : 0;
    long remaining = 0;
    char last[600] = "";
    size_t i;
    json_t *o;
    json_array_foreach(all, i, o)
    {
        if (!fk_selects(rt->res, rt->ns, o, sel, fs))
            continue;
        char key[600];
        snprintf(
            key, sizeof key, "%s%s%s",
            fk_resources[rt->res].namespaced && !rt->ns[0] ? fk_str(o, "metadata.namespace") : "",
            fk_resources[rt->res].namespaced && !rt->ns[0] ? "/" : "", fk_str(o, "metadata.name"));
        if (start[0] && strcmp(key, start) <= 0)
            continue;
        if (limit > 0 && (long)json_array_size(items) >= limit) {
            remaining++;
            continue;
        }
        json_t *item = json_deep_copy(o);
        json_object_del(item, "kind");
        json_object_del(item, "apiVersion");
        json_array_append_new(items, item);
        snprintf(last, sizeof last, "%s", key);
    }
    json_decref(all);
    char rv[32];
    snprintf(rv, sizeof rv, "%lld", cur_rv);
    json_t *md = json_pack("{s:s}", "resourceVersion", rv);
    if (remaining) {
        char *tok = continue_token(cur_rv, last);
        json_object_set_new(md, "continue", json_string(tok ? tok : ""));
        free(tok);
        /* The apiserver counts the rest only when nothing is filtered (08b, 08d). */
        if (fk_sel_empty(sel) && !(fs && *fs))
            json_object_set_new(md, "remainingItemCount", json_integer(remaining));
    }
    fk_sel_free(sel);
    if (meta) {
        /* Each item says what it is, as the apiserver's PartialObjectMetadataList does. */
        json_t *partial = json_array();
        size_t k;
        json_t *item;
        json_array_foreach(items, k, item)
            json_array_append_new(partial, fk_partial_of(item));
        json_decref(items);
        return send_json(c, 200,
                         json_pack("{s:s, s:s, s:o, s:o}", "kind", "PartialObjectMetadataList",
                                   "apiVersion", "meta.k8s.io/v1", "metadata", md, "items",
                                   partial),
                         NULL);
    }
    json_t *out =
        json_pack("{s:s, s:s, s:o, s:o}", "kind", list_kind(rt->res, kbuf, sizeof kbuf),
                  "apiVersion", fk_resources[rt->res].api_version, "metadata", md, "items", items);
    return send_json(c, 200, out, NULL);
}

static enum MHD_Result do_watch(struct MHD_Connection *c, const route *rt)
{
    const char *bm = arg(c, "allowWatchBookmarks");
    int meta = accept_meta(c, 0);
    if (meta < 0)
        return not_acceptable(c, 0);
    fk_watch_req req = {
        .res = rt->res,
        .ns = rt->ns,
        .label_selector = arg(c, "labelSelector"),
        .field_selector = arg(c, "fieldSelector"),
        .resource_version = arg(c, "resourceVersion"),
        .timeout_seconds = arg(c, "timeoutSeconds"),
        .bookmarks = bm && (!strcmp(bm, "true") || !strcmp(bm, "1")),
        .metadata_only = meta,
    };
    char err[1200];
    struct MHD_Response *r = fk_watch_response(&g_st, &req, err, sizeof err);
    if (!r)
        return send_status(c, fk_status(400, "BadRequest", err, NULL), NULL);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- writes ----------------------------------------------------------- */

static enum fk_fieldval field_validation(struct MHD_Connection *c)
{
    const char *fv = arg(c, "fieldValidation");
    if (fv && !strcmp(fv, "Strict"))
        return FK_FV_STRICT;
    if (fv && !strcmp(fv, "Ignore"))
        return FK_FV_IGNORE;
    return FK_FV_WARN;
}

static int namespace_missing(const route *rt)
{
    return fk_resources[rt->res].namespaced && !fk_get(&g_st, FK_NAMESPACES, "", rt->ns);
}

static enum MHD_Result ns_not_found(struct MHD_Connection *c, const char *ns)
{
    char msg[400];
    snprintf(msg, sizeof msg, "namespaces \"%s\" not found", ns);
    return send_status(c, fk_status(404, "NotFound", msg, fk_details(FK_NAMESPACES, ns, 0)), NULL);
}

static enum MHD_Result do_create(struct MHD_Connection *c, const route *rt, const reqbuf *b)
{
    json_t *obj = NULL, *warnings = NULL, *status = NULL;
    int code = fk_decode(&g_st, rt->res, b->data ? b->data : "", b->len, field_validation(c), &obj,
                         &warnings, &status);
    if (code)
        return send_status_warned(c, status, warnings);
    const char *bns = fk_str(obj, "metadata.namespace");
    if (fk_resources[rt->res].namespaced && *bns && strcmp(bns, rt->ns)) {
        json_decref(obj);
        return send_status_warned(c,
                                  fk_status(400, "BadRequest",
                                            "the namespace of the provided object does not match "
                                            "the namespace sent on the request",
                                            NULL),
                                  warnings);
    }
    const char *dry = arg(c, "dryRun");
    pthread_mutex_lock(&g_st.mu);
    if (fk_resources[rt->res].namespaced)
        json_object_set_new(fk_path(obj, "metadata", 1), "namespace", json_string(rt->ns));
    if (namespace_missing(rt)) {
        pthread_mutex_unlock(&g_st.mu);
        json_decref(obj);
        enum MHD_Result r = ns_not_found(c, rt->ns);
        json_decref(warnings);
        return r;
    }
    fk_defaults(&g_st, rt->res, obj);
    if (fk_validate(rt->res, obj, &status) != 0) {
        pthread_mutex_unlock(&g_st.mu);
        json_decref(obj);
        enum MHD_Result r = send_status(c, status, warnings);
        json_decref(warnings);
        return r;
    }
    const char *name = fk_str(obj, "metadata.name");
    if (fk_get(&g_st, rt->res, rt->ns, name)) {
        char msg[700];
        const fk_res *r = &fk_resources[rt->res];
        snprintf(msg, sizeof msg, "%s%s%s \"%s\" already exists", r->plural, *r->group ? "." : "",
                 r->group, name);
        status = fk_status(409, "AlreadyExists", msg, fk_details(rt->res, name, 0));
        pthread_mutex_unlock(&g_st.mu);
        json_decref(obj);
        enum MHD_Result ret = send_status(c, status, warnings);
        json_decref(warnings);
        return ret;
    }
    json_t *out;
    if (dry && !strcmp(dry, "All")) {
        char ts[64];
        fk_now(ts, sizeof ts, 0);
        json_object_set_new(fk_path(obj, "metadata", 1), "creationTimestamp", json_string(ts));
        if (rt->res == FK_JOBS)
            json_object_set_new(fk_path(obj, "metadata", 1), "generation", json_integer(1));
        out = obj;
    } else {
        out = json_deep_copy(fk_create(&g_st, rt->res, obj));
        fk_reconcile(&g_st);
    }
    pthread_mutex_unlock(&g_st.mu);
    enum MHD_Result r = send_json(c, 201, out, warnings);
    json_decref(warnings);
    return r;
}

/* RFC 7386 JSON merge patch. */
static void merge_patch(json_t *target, const json_t *patch)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v)
    {
        json_t *cur = json_object_get(target, k);
        if (json_is_null(v))
            json_object_del(target, k);
        else if (json_is_object(v) && json_is_object(cur))
            merge_patch(cur, v);
        else
            json_object_set_new(target, k, json_deep_copy(v));
    }
}

static enum MHD_Result do_update(struct MHD_Connection *c, const route *rt, const reqbuf *b,
                                 int patch)
{
    json_t *obj = NULL, *warnings = NULL, *status = NULL;
    if (patch) {
        json_error_t jerr;
        json_t *p = json_loadb(b->data ? b->data : "", b->len, 0, &jerr);
        if (!json_is_object(p)) {
            json_decref(p);
            char msg[300];
            snprintf(msg, sizeof msg, "error decoding patch: %s", jerr.text);
            return send_status(c, fk_status(400, "BadRequest", msg, NULL), NULL);
        }
        pthread_mutex_lock(&g_st.mu);
        json_t *cur = fk_get(&g_st, rt->res, rt->ns, rt->name);
        json_t *merged = cur ? json_deep_copy(cur) : NULL;
        pthread_mutex_unlock(&g_st.mu);
        if (!merged) {
            json_decref(p);
            return send_status(c, not_found(rt->res, rt->name), NULL);
        }
        merge_patch(merged, p);
        json_decref(p);
        char *text = json_dumps(merged, JSON_COMPACT);
        json_decref(merged);
        int code = fk_decode(&g_st, rt->res, text ? text : "", text ? strlen(text) : 0,
                             field_validation(c), &obj, &warnings, &status);
        free(text);
        if (code)
            return send_status_warned(c, status, warnings);
    } else {
        int code = fk_decode(&g_st, rt->res, b->data ? b->data : "", b->len, field_validation(c),
                             &obj, &warnings, &status);
        if (code)
            return send_status_warned(c, status, warnings);
    }
    const char *bname = fk_str(obj, "metadata.name");
    if (strcmp(bname, rt->name)) {
        char msg[700];
        snprintf(msg, sizeof msg,
                 "the name of the object (%s) does not match the name on the URL (%s)", bname,
                 rt->name);
        json_decref(obj);
        return send_status_warned(c, fk_status(400, "BadRequest", msg, NULL), warnings);
    }
    pthread_mutex_lock(&g_st.mu);
    json_t *cur = fk_get(&g_st, rt->res, rt->ns, rt->name);
    enum MHD_Result ret;
    if (!cur) {
        pthread_mutex_unlock(&g_st.mu);
        json_decref(obj);
        ret = send_status(c, not_found(rt->res, rt->name), warnings);
        json_decref(warnings);
        return ret;
    }
    const char *want_rv = fk_str(obj, "metadata.resourceVersion");
    if (!patch && *want_rv && strcmp(want_rv, fk_str(cur, "metadata.resourceVersion"))) {
        char msg[800];
        const fk_res *r = &fk_resources[rt->res];
        snprintf(msg, sizeof msg,
                 "Operation cannot be fulfilled on %s%s%s \"%s\": the object has been modified; "
                 "please apply your changes to the latest version and try again",
                 r->plural, *r->group ? "." : "", r->group, rt->name);
        pthread_mutex_unlock(&g_st.mu);
        json_decref(obj);
        ret = send_status(c, fk_status(409, "Conflict", msg, fk_details(rt->res, rt->name, 0)),
                          warnings);
        json_decref(warnings);
        return ret;
    }
    json_t *next = json_deep_copy(cur);
    if (!strcmp(rt->sub, "status")) {
        json_object_set(next, "status", json_object_get(obj, "status"));
    } else {
        /* The main resource keeps its status and server-owned metadata. */
        json_t *md = fk_path(next, "metadata", 1);
        const char *keep[] = {"labels", "annotations", "finalizers", "ownerReferences"};
        for (int i = 0; i < 4; i++) {
            json_t *v = fk_path(obj, "metadata", 0)
                            ? json_object_get(fk_path(obj, "metadata", 0), keep[i])
                            : NULL;
            if (v)
                json_object_set(md, keep[i], v);
            else
                json_object_del(md, keep[i]);
        }
        json_t *spec = json_object_get(obj, "spec");
        if (spec && !json_equal(spec, json_object_get(cur, "spec"))) {
            json_object_set(next, "spec", spec);
            if (json_object_get(md, "generation"))
                json_object_set_new(
                    md, "generation",
                    json_integer(json_integer_value(json_object_get(md, "generation")) + 1));
        }
        if (rt->res == FK_NODES || rt->res == FK_NAMESPACES || rt->res == FK_EVENTS) {
            const char *k;
            json_t *v;
            json_object_foreach(obj, k, v)
            {
                if (strcmp(k, "metadata") && strcmp(k, "status"))
                    json_object_set(next, k, v);
            }
        }
    }
    json_decref(obj);
    if (fk_validate(rt->res, next, &status) != 0) {
        pthread_mutex_unlock(&g_st.mu);
        json_decref(next);
        ret = send_status(c, status, warnings);
        json_decref(warnings);
        return ret;
    }
    json_t *out = json_deep_copy(fk_update(&g_st, rt->res, next));
    fk_reconcile(&g_st);
    pthread_mutex_unlock(&g_st.mu);
    ret = send_json(c, 200, out, warnings);
    json_decref(warnings);
    return ret;
}

static enum MHD_Result do_delete(struct MHD_Connection *c, const route *rt, const reqbuf *b)
{
    const char *policy = arg(c, "propagationPolicy");
    const char *gq = arg(c, "gracePeriodSeconds");
    long grace = gq ? strtol(gq, NULL, 10) : -1;
    json_t *opts = b->len ? json_loadb(b->data, b->len, 0, NULL) : NULL;
    char pol[32] = "";
    snprintf(pol, sizeof pol, "%s", policy ? policy : fk_str(opts, "propagationPolicy"));
    if (json_is_integer(json_object_get(opts, "gracePeriodSeconds")))
        grace = (long)json_integer_value(json_object_get(opts, "gracePeriodSeconds"));
    json_decref(opts);
    json_t *body = NULL, *warnings = json_array();
    int warn = 0;
    pthread_mutex_lock(&g_st.mu);
    int code = fk_delete(&g_st, rt->res, rt->ns, rt->name, pol, grace, &body, &warn);
    if (code == 200)
        fk_reconcile(&g_st);
    pthread_mutex_unlock(&g_st.mu);
    if (warn)
        json_array_append_new(warnings,
                              json_string("299 - \"child pods are preserved by default when jobs "
                                          "are deleted; set propagationPolicy=Background to "
                                          "remove them or set propagationPolicy=Orphan to "
                                          "suppress this warning\""));
    enum MHD_Result r = send_json(c, code, body, warnings);
    json_decref(warnings);
    return r;
}

/* DELETE on a collection (deletecollection): every object the selectors
 * pick, answered as a list of them as they were. */
static enum MHD_Result do_delete_collection(struct MHD_Connection *c, const route *rt)
{
    const char *policy = arg(c, "propagationPolicy"), *fs = arg(c, "fieldSelector");
    char err[256], kbuf[64], rv[32];
    fk_sel *sel = NULL;
    if (fk_sel_parse(arg(c, "labelSelector"), &sel, err, sizeof err) != 0)
        return send_status(c, fk_status(400, "BadRequest", err, NULL), NULL);
    if (fs && *fs && fk_fsel_check(rt->res, fs, err, sizeof err) != 0) {
        fk_sel_free(sel);
        return send_status(c, fk_status(400, "BadRequest", err, NULL), NULL);
    }
    json_t *items = json_array();
    pthread_mutex_lock(&g_st.mu);
    json_t *all = fk_list(&g_st, rt->res, rt->ns[0] ? rt->ns : NULL);
    size_t i;
    json_t *o;
    json_array_foreach(all, i, o)
    {
        if (!fk_selects(rt->res, rt->ns, o, sel, fs))
            continue;
        json_t *item = json_deep_copy(o), *body = NULL;
        int warn;
        json_object_del(item, "kind");
        json_object_del(item, "apiVersion");
        json_array_append_new(items, item);
        fk_delete(&g_st, rt->res, fk_str(o, "metadata.namespace"), fk_str(o, "metadata.name"),
                  policy ? policy : "", -1, &body, &warn);
        json_decref(body);
    }
    json_decref(all);
    fk_reconcile(&g_st);
    snprintf(rv, sizeof rv, "%llu", (unsigned long long)g_st.rv);
    pthread_mutex_unlock(&g_st.mu);
    fk_sel_free(sel);
    json_t *out = json_pack(
        "{s:s, s:s, s:{s:s}, s:o}", "kind", list_kind(rt->res, kbuf, sizeof kbuf), "apiVersion",
        fk_resources[rt->res].api_version, "metadata", "resourceVersion", rv, "items", items);
    return send_json(c, 200, out, NULL);
}

/* A PodLogOptions field out of range: the apiserver's 422 Invalid. */
static enum MHD_Result log_invalid(struct MHD_Connection *c, const char *name, const char *field,
                                   const char *value, const char *why)
{
    char msg[700], cause[300];
    snprintf(cause, sizeof cause, "Invalid value: %.40s: %s", value, why);
    snprintf(msg, sizeof msg, "PodLogOptions \"%.300s\" is invalid: %s: %s", name, field, cause);
    json_t *d = json_pack("{s:s, s:s, s:[{s:s, s:s, s:s}]}", "name", name, "kind",
                          "PodLogOptions", "causes", "reason", "FieldValueInvalid", "message",
                          cause, "field", field);
    return send_status(c, fk_status(422, "Invalid", msg, d), NULL);
}

/*
 * pods/log (fk_logs.c): 404 for a missing pod, 204 for one not bound (14c), 400 for a
 * container the pod does not have or one that has not started (the kubelet's words, passed
 * on as BadRequest), else the lines as the kubelet serves them.
 */
static enum MHD_Result do_log(struct MHD_Connection *c, const route *rt)
{
    fk_log_opts o = {.timestamps = 0, .since_s = INT64_MIN, .limit = -1};
    const char *v = arg(c, "timestamps");
    o.timestamps = v && (!strcmp(v, "true") || !strcmp(v, "1"));
    long tail = -1;
    char msg[700];
    if ((v = arg(c, "sinceTime")) && fk_log_parse_since(v, &o.since_s) != 0) {
        snprintf(msg, sizeof msg,
                 "parsing time \"%.200s\" as \"2006-01-02T15:04:05Z07:00\": cannot parse "
                 "\"%.200s\" as \"2006\"", v, v);
        return send_status(c, fk_status(400, "BadRequest", msg, NULL), NULL);
    }
    if ((v = arg(c, "limitBytes"))) {
        o.limit = strtol(v, NULL, 10);
        if (o.limit < 1)
            return log_invalid(c, rt->name, "limitBytes", v, "must be greater than 0");
    }
    if ((v = arg(c, "tailLines"))) {
        tail = strtol(v, NULL, 10);
        if (tail < 0)
            return log_invalid(c, rt->name, "tailLines", v,
                               "must be greater than or equal to 0");
    }
    const char *want = arg(c, "container");
    pthread_mutex_lock(&g_st.mu);
    json_t *pod = fk_get(&g_st, FK_PODS, rt->ns, rt->name);
    if (!pod) {
        pthread_mutex_unlock(&g_st.mu);
        return send_status(c, not_found(FK_PODS, rt->name), NULL);
    }
    const json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    const char *cname = json_string_value(json_object_get(json_array_get(containers, 0), "name"));
    int found = !want;
    size_t i;
    json_t *ct;
    json_array_foreach(containers, i, ct)
    {
        const char *n = json_string_value(json_object_get(ct, "name"));
        if (want && n && !strcmp(n, want)) {
            found = 1;
            cname = n;
        }
    }
    if (!found) {
        snprintf(msg, sizeof msg, "container %.200s is not valid for pod %.300s", want, rt->name);
        pthread_mutex_unlock(&g_st.mu);
        return send_status(c, fk_status(400, "BadRequest", msg, NULL), NULL);
    }
    int bound = *fk_str(pod, "spec.nodeName") != '\0';
    if (bound && !strcmp(fk_str(pod, "status.phase"), "Pending")) {
        /* The kubelet has no container to read yet. */
        const json_t *cs = json_array_get(
            json_object_get(json_object_get(pod, "status"), "containerStatuses"), 0);
        const char *why = json_string_value(json_object_get(
            json_object_get(json_object_get(cs, "state"), "waiting"), "reason"));
        snprintf(msg, sizeof msg, "container \"%.200s\" in pod \"%.300s\" is waiting to start: %s",
                 cname ? cname : "", rt->name, why ? why : "ContainerCreating");
        pthread_mutex_unlock(&g_st.mu);
        return send_status(c, fk_status(400, "BadRequest", msg, NULL), NULL);
    }
    char key[600];
    snprintf(key, sizeof key, "%s/%s", rt->ns, rt->name);
    const char *stored = json_string_value(json_object_get(g_st.logs, key));
    stored = stored ? stored : "";
    size_t n = strlen(stored), start = fk_log_tail_start(stored, tail), len = 0;
    char *body = fk_log_render(stored, start, n, start == 0 || stored[start - 1] == '\n', &o,
                               &len);
    pthread_mutex_unlock(&g_st.mu);
    if (!body)
        return MHD_NO;
    enum MHD_Result r;
    const char *fw = arg(c, "follow");
    if (!bound) {
        r = send_text(c, 204, NULL, "", 0, NULL); /* 14c */
    } else if (fw && (!strcmp(fw, "true") || !strcmp(fw, "1"))) {
        struct MHD_Response *resp =
            fk_log_follow_response(&g_st, rt->ns, rt->name, &o, body, len, n);
        if (!resp) {
            free(body);
            return MHD_NO;
        }
        r = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
    } else {
        if (o.limit >= 0 && len > (size_t)o.limit)
            len = (size_t)o.limit;
        r = send_text(c, 200, "text/plain", body, len, NULL);
    }
    free(body);
    return r;
}

/* ---- dispatch --------------------------------------------------------- */

static const char *verb_of(const char *method, const route *rt, int watching)
{
    if (!strcmp(method, "GET"))
        return watching ? "watch" : rt->name[0] ? "get" : "list";
    if (!strcmp(method, "POST"))
        return "create";
    if (!strcmp(method, "PUT"))
        return "update";
    if (!strcmp(method, "PATCH"))
        return "patch";
    return "delete";
}

static void note_asked(struct MHD_Connection *c, const char *verb, const route *rt)
{
    const char *ua = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "User-Agent");
    if (!ua || strncmp(ua, "trainyard/", 10) != 0)
        return;
    const fk_res *r = &fk_resources[rt->res];
    char key[256];
    snprintf(key, sizeof key, "%s|%s|%s%s%s", rt->ns[0] ? "Role" : "ClusterRole", r->group,
             r->plural, rt->sub[0] ? "/" : "", rt->sub);
    pthread_mutex_lock(&g_asked_mu);
    if (!g_asked)
        g_asked = json_object();
    json_t *verbs = json_object_get(g_asked, key);
    if (!verbs)
        json_object_set_new(g_asked, key, verbs = json_object());
    json_t *n = json_object_get(verbs, verb);
    json_object_set_new(verbs, verb, json_integer(n ? json_integer_value(n) + 1 : 1));
    pthread_mutex_unlock(&g_asked_mu);
}

static enum MHD_Result dispatch(struct MHD_Connection *c, const char *method, const char *url,
                                const reqbuf *b)
{
    /* Public to everyone, as system:public-info-viewer makes them. */
    if (!strcmp(method, "GET") && !strcmp(url, "/version"))
        return send_json(c, 200,
                         json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "major", "1",
                                   "minor", "26", "gitVersion", "v1.26.1", "gitCommit", "",
                                   "gitTreeState", "clean", "buildDate", "", "goVersion",
                                   "go1.19.5", "compiler", "gc", "platform", "linux/amd64"),
                         NULL);
    if (!strcmp(method, "GET") &&
        (!strcmp(url, "/healthz") || !strcmp(url, "/readyz") || !strcmp(url, "/livez")))
        return send_text(c, 200, "text/plain; charset=utf-8", "ok", 2, NULL);
    if (!strcmp(method, "GET") && !strcmp(url, "/fake/requests")) {
        pthread_mutex_lock(&g_asked_mu);
        json_t *copy = g_asked ? json_deep_copy(g_asked) : json_object();
        pthread_mutex_unlock(&g_asked_mu);
        return send_json(c, 200, copy, NULL);
    }
    if (!strncmp(url, "/fake/", 6)) {
        const char *err = NULL;
        int code = fk_control(&g_st, method, url, arg(c, "labelSelector"), b->data, b->len, &err);
        return send_json(c, code,
                         code == 200 ? json_pack("{s:b}", "ok", 1)
                                     : json_pack("{s:s}", "error", err ? err : "failed"),
                         NULL);
    }
    fk_fault f;
    if (fk_take_fault(&g_st, method, url, &f)) {
        if (f.delay_ms > 0)
            usleep((useconds_t)f.delay_ms * 1000);
        if (f.status == 429) {
            json_t *s =
                fk_status(429, "TooManyRequests", "Too many requests, please try again later.",
                          json_pack("{s:i}", "retryAfterSeconds", f.retry_after));
            char *text = json_dumps(s, JSON_COMPACT);
            json_decref(s);
            struct MHD_Response *r =
                MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
            char ra[16];
            snprintf(ra, sizeof ra, "%d", f.retry_after);
            MHD_add_response_header(r, "Content-Type", "application/json");
            MHD_add_response_header(r, "Retry-After", ra);
            enum MHD_Result ret = MHD_queue_response(c, 429, r);
            MHD_destroy_response(r);
            return ret;
        }
        if (f.status)
            return send_status(c,
                               fk_status(f.status, "InternalError",
                                         "Internal error occurred: injected fault", NULL),
                               NULL);
    }
    route rt;
    int routed = parse_route(url, &rt) == 0;
    const char *w = arg(c, "watch");
    int watching = w && (!strcmp(w, "true") || !strcmp(w, "1"));
    if (g_token) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!auth) {
            char msg[800];
            const fk_res *r = routed ? &fk_resources[rt.res] : NULL;
            const char *verb = verb_of(method, &rt, watching);
            if (r && rt.ns[0])
                snprintf(msg, sizeof msg,
                         "%s%s%s is forbidden: User \"system:anonymous\" cannot %s resource "
                         "\"%s\" in API group \"%s\" in the namespace \"%s\"",
                         r->plural, *r->group ? "." : "", r->group, verb, r->plural, r->group,
                         rt.ns);
            else
                snprintf(msg, sizeof msg,
                         "forbidden: User \"system:anonymous\" cannot %s path \"%s\"", verb, url);
            json_t *d = json_object();
            if (r) {
                if (*r->group)
                    json_object_set_new(d, "group", json_string(r->group));
                json_object_set_new(d, "kind", json_string(r->plural));
            }
            return send_status(c, fk_status(403, "Forbidden", msg, d), NULL);
        }
        if (strncmp(auth, "Bearer ", 7) || strcmp(auth + 7, g_token))
            return send_status(c, fk_status(401, "Unauthorized", "Unauthorized", NULL), NULL);
    }
    if (!routed)
        return not_found_resource(c);
    note_asked(c, verb_of(method, &rt, watching), &rt);
    if (!strcmp(method, "GET")) {
        if (!rt.name[0])
            return watching ? do_watch(c, &rt) : do_list(c, &rt);
        if (!strcmp(rt.sub, "log"))
            return do_log(c, &rt);
        int meta = accept_meta(c, 0);
        if (meta < 0)
            return not_acceptable(c, 0);
        pthread_mutex_lock(&g_st.mu);
        json_t *o = fk_get(&g_st, rt.res, rt.ns, rt.name);
        json_t *copy = !o ? NULL : meta ? fk_partial_of(o) : json_deep_copy(o);
        pthread_mutex_unlock(&g_st.mu);
        return copy ? send_json(c, 200, copy, NULL)
                    : send_status(c, not_found(rt.res, rt.name), NULL);
    }
    if (!strcmp(method, "POST") && !rt.name[0]) {
        if (rt.res == FK_NAMESPACES || !rt.ns[0]) {
            if (fk_resources[rt.res].namespaced)
                return not_found_resource(c);
        }
        pthread_mutex_lock(&g_st.mu);
        int missing = fk_resources[rt.res].namespaced && namespace_missing(&rt);
        pthread_mutex_unlock(&g_st.mu);
        if (missing)
            return ns_not_found(c, rt.ns);
        return do_create(c, &rt, b);
    }
    if (rt.name[0] && !strcmp(method, "PUT"))
        return do_update(c, &rt, b, 0);
    if (rt.name[0] && !strcmp(method, "PATCH"))
        return do_update(c, &rt, b, 1);
    if (!rt.name[0] && !strcmp(method, "DELETE") && rt.res != FK_NAMESPACES)
        return do_delete_collection(c, &rt);
    if (rt.name[0] && !rt.sub[0] && !strcmp(method, "DELETE"))
        return do_delete(c, &rt, b);
    return send_status(c,
                       fk_status(405, "MethodNotAllowed",
                                 "the server does not allow this method on the requested "
                                 "resource",
                                 json_object()),
                       NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **ctx)
{
    (void)cls;
    (void)version;
    reqbuf *b = *ctx;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return MHD_NO;
        *ctx = b;
        return MHD_YES;
    }
    if (*size) {
        if (b->len + *size > MAX_BODY) {
            b->too_large = 1;
        } else {
            char *d = realloc(b->data, b->len + *size + 1);
            if (!d)
                return MHD_NO;
            memcpy(d + b->len, data, *size);
            b->data = d;
            b->len += *size;
            b->data[b->len] = '\0';
        }
        *size = 0;
        return MHD_YES;
    }
    if (b->too_large)
        return send_status(
            c, fk_status(413, "RequestEntityTooLarge", "the request is too large", NULL), NULL);
    return dispatch(c, method, url, b);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctx,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    reqbuf *b = *ctx;
    if (b) {
        free(b->data);
        free(b);
    }
    *ctx = NULL;
}

/* Time-driven work: Job deadlines. */
static void *ticker(void *arg_)
{
    (void)arg_;
    while (!g_st.stopping) {
        sleep(1);
        pthread_mutex_lock(&g_st.mu);
        fk_reconcile_deadlines(&g_st);
        pthread_mutex_unlock(&g_st.mu);
    }
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: fake-kube-apiserver [--port N] [--token T] [--nodes FILE] "
                    "[--window N] [--swagger FILE] [--volcano-crd FILE]\n");
    return 2;
}

int main(int argc, char **argv)
{
    long port = 0, window = 10000;
    const char *nodes = NULL, *swagger = FK_SWAGGER, *crd = FK_VOLCANO_CRD;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        if (!strcmp(argv[i], "--port"))
            port = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--token"))
            g_token = argv[++i];
        else if (!strcmp(argv[i], "--nodes"))
            nodes = argv[++i];
        else if (!strcmp(argv[i], "--window"))
            window = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--swagger"))
            swagger = argv[++i];
        else if (!strcmp(argv[i], "--volcano-crd"))
            crd = argv[++i];
        else
            return usage();
    }
    char err[512];
    json_t *sw = NULL, *crd_doc = NULL, *node_doc = NULL;
    if (oas_yaml_load_file(swagger, &sw, err, sizeof err) != 0) {
        fprintf(stderr, "fake-kube-apiserver: %s: %s\n", swagger, err);
        return 1;
    }
    if (oas_yaml_load_file(crd, &crd_doc, err, sizeof err) != 0) {
        fprintf(stderr, "fake-kube-apiserver: %s: %s\n", crd, err);
        return 1;
    }
    if (nodes && oas_yaml_load_file(nodes, &node_doc, err, sizeof err) != 0) {
        fprintf(stderr, "fake-kube-apiserver: %s: %s\n", nodes, err);
        return 1;
    }
    if (fk_store_init(&g_st, (size_t)(window > 0 ? window : 1)) != 0)
        return 1;
    g_st.swagger = sw;
    g_st.vc_schema = fk_path(json_array_get(fk_path(crd_doc, "spec.versions", 0), 0),
                             "schema.openAPIV3Schema", 0);
    json_t *def = json_pack("{s:s, s:s, s:{s:s}}", "kind", "Namespace", "apiVersion", "v1",
                            "metadata", "name", "default");
    fk_defaults(&g_st, FK_NAMESPACES, def);
    fk_create(&g_st, FK_NAMESPACES, def);
    if (node_doc && fk_load_nodes(&g_st, node_doc) != 0) {
        fprintf(stderr, "fake-kube-apiserver: %s: a node without a name or a duplicate\n", nodes);
        return 1;
    }
    json_decref(node_doc);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* A thread per connection, so that a watch may block; poll(), not
     * select(), so that descriptors above FD_SETSIZE work when a benchmark
     * opens thousands of connections. */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)8192, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "fake-kube-apiserver: cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("%u\n", info ? (unsigned)info->port : (unsigned)port);
    fflush(stdout);
    pthread_t tick;
    pthread_create(&tick, NULL, ticker, NULL);
    int sig;
    sigwait(&set, &sig);
    g_st.stopping = 1;
    pthread_mutex_lock(&g_st.mu);
    pthread_cond_broadcast(&g_st.cv);
    pthread_mutex_unlock(&g_st.mu);
    MHD_stop_daemon(d);
    pthread_join(tick, NULL);
    fk_store_fini(&g_st);
    json_decref(g_asked);
    json_decref(sw);
    json_decref(crd_doc);
    return 0;
}
