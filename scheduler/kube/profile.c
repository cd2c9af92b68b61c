/*
 * profile.c - the cluster profile, read through libyaml's document API.
 *
 * The whole document is loaded into libyaml's node tree first (profiles are small), then walked
 * once: every mapping is checked against the keys it may hold, so a typo such as "zone:" for
 * "zones:" is an error at its line instead of a silently ignored setting. Every message starts
 * with "FILE:LINE: " from the node's start mark.
 */
#include "scheduler/kube/profile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define PROFILE_MAX_BYTES (1 << 20)

typedef struct pctx {
    const char *file;
    yaml_document_t *doc;
    char *msg;
    size_t msglen;
} pctx;

static ty_err fail(pctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ty_err fail(pctx *c, const yaml_node_t *n, const char *fmt, ...)
{
    int off = snprintf(c->msg, c->msglen, "%s:%lu: ", c->file,
                       (unsigned long)(n ? n->start_mark.line + 1 : 1));
    if (off >= 0 && (size_t)off < c->msglen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg + off, c->msglen - (size_t)off, fmt, ap);
        va_end(ap);
    }
    return TY_EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A plain scalar that YAML reads as null (nothing, "~", "null"): the key's default. */
static int is_null(const yaml_node_t *n)
{
    const char *s = scalar(n);
    if (!s || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static ty_err dup_str(const char *s, char **out)
{
    char *d = strdup(s);
    if (!d)
        return TY_ENOMEM;
    free(*out);
    *out = d;
    return TY_OK;
}

static ty_err get_string(pctx *c, const yaml_node_t *n, const char *what, char **out)
{
    const char *s = scalar(n);
    if (!s || is_null(n))
        return fail(c, n, "%s must be a string", what);
    if (strlen(s) != n->data.scalar.length)
        return fail(c, n, "%s holds a NUL byte", what);
    return dup_str(s, out);
}

static ty_err get_int(pctx *c, const yaml_node_t *n, const char *what, long long lo, long long hi,
                      long long *out)
{
    const char *s = scalar(n);
    if (!s || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || !*s)
        return fail(c, n, "%s must be an integer", what);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return fail(c, n, "%s must be an integer", what);
    if (v < lo || v > hi)
        return fail(c, n, "%s must be between %lld and %lld", what, lo, hi);
    *out = v;
    return TY_OK;
}

static ty_err get_bool(pctx *c, const yaml_node_t *n, const char *what, int *out)
{
    const char *s = scalar(n);
    if (s && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
            *out = 1;
            return TY_OK;
        }
        if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
            *out = 0;
            return TY_OK;
        }
    }
    return fail(c, n, "%s must be true or false", what);
}

/* RFC 1123 label: what namespaces, zones and node group names are. */
static int is_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* RFC 1123 subdomain: secret, service account and priority class names. */
static int is_dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        if (!alnum && ch != '-' && ch != '.')
            return 0;
        if (!alnum && (i == 0 || i == n - 1))
            return 0;
    }
    return 1;
}

/* A label value (or taint value): at most 63 of [A-Za-z0-9._-], alphanumeric at both ends. */
static int is_label_value(const char *s)
{
    size_t n = strlen(s);
    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && ch != '-' && ch != '_' && ch != '.')
            return 0;
        if (!alnum && (i == 0 || i == n - 1))
            return 0;
    }
    return 1;
}

/* A label key: an optional DNS subdomain prefix and '/', then a name like a label value. */
static int is_label_key(const char *s)
{
    const char *slash = strchr(s, '/');
    const char *name = s;
    if (slash) {
        size_t plen = (size_t)(slash - s);
        char prefix[254];
        if (plen == 0 || plen > 253)
            return 0;
        memcpy(prefix, s, plen);
        prefix[plen] = '\0';
        if (!is_dns_subdomain(prefix))
            return 0;
        name = slash + 1;
    }
    return *name && is_label_value(name);
}

/*
 * Walks the mapping n, calling fn for each pair with the index of its key in keys (a
 * NULL-terminated list). Unknown and repeated keys are errors. With keys NULL every
 * key is passed with index -1 (maps whose keys are names), repeated ones still refused.
 */
typedef ty_err (*pair_fn)(pctx *c, int idx, const yaml_node_t *key, const yaml_node_t *val,
                          void *ud);

static ty_err each_pair(pctx *c, const yaml_node_t *n, const char *what, const char *const *keys,
                        pair_fn fn, void *ud)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return fail(c, n, "%s must be a mapping", what);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        const char *ks = scalar(k);
        if (!ks)
            return fail(c, k, "%s: keys must be strings", what);
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
            const char *qs = scalar(yaml_document_get_node(c->doc, q->key));
            if (qs && !strcmp(qs, ks))
                return fail(c, k, "%s: key '%s' is repeated", what, ks);
        }
        int idx = -1;
        if (keys) {
            for (int i = 0; keys[i]; i++)
                if (!strcmp(keys[i], ks))
                    idx = i;
            if (idx < 0)
                return fail(c, k, "unknown key '%s' in %s", ks, what);
        }
        ty_err e = fn(c, idx, k, v, ud);
        if (e)
            return e;
    }
    return TY_OK;
}

static ty_err grow(void **arr, size_t n, size_t size)
{
    void *p = realloc(*arr, (n + 1) * size);
    if (!p)
        return TY_ENOMEM;
    memset((char *)p + n * size, 0, size);
    *arr = p;
    return TY_OK;
}

/* A sequence of strings, each checked by ok() (NULL: any). */
static ty_err get_strings(pctx *c, const yaml_node_t *n, const char *what, int (*ok)(const char *),
                          char ***out, size_t *nout)
{
    if (is_null(n))
        return TY_OK;
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "%s must be a list of strings", what);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        const yaml_node_t *v = yaml_document_get_node(c->doc, *it);
        char *s = NULL;
        ty_err e = get_string(c, v, what, &s);
        if (e)
            return e;
        if (ok && !ok(s)) {
            free(s);
            return fail(c, v, "%s: '%s' is not a valid name", what, scalar(v));
        }
        for (size_t i = 0; i < *nout; i++)
            if (!strcmp((*out)[i], s)) {
                free(s);
                return fail(c, v, "%s: '%s' is listed twice", what, scalar(v));
            }
        if (grow((void **)out, *nout, sizeof **out)) {
            free(s);
            return TY_ENOMEM;
        }
        (*out)[(*nout)++] = s;
    }
    return TY_OK;
}

/* ---- node classes: gpu_types and capacity_types ---- */

static ty_err label_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)idx;
    kube_node_class *nc = ud;
    const char *ks = scalar(k);
    if (!is_label_key(ks))
        return fail(c, k, "'%s' is not a valid label key", ks);
    char *val = NULL;
    ty_err e = get_string(c, v, "a node label's value", &val);
    if (e)
        return e;
    if (!is_label_value(val)) {
        free(val);
        return fail(c, v, "'%s' is not a valid label value", scalar(v));
    }
    char *key = strdup(ks);
    if (!key || grow((void **)&nc->labels, nc->nlabels, sizeof *nc->labels)) {
        free(key);
        free(val);
        return TY_ENOMEM;
    }
    nc->labels[nc->nlabels].key = key;
    nc->labels[nc->nlabels++].value = val;
    return TY_OK;
}

static const char *const taint_keys[] = {"key", "value", "effect", NULL};

static ty_err taint_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_taint *t = ud;
    char **dst = idx == 0 ? &t->key : idx == 1 ? &t->value : &t->effect;
    return get_string(c, v, taint_keys[idx], dst);
}

static ty_err get_taints(pctx *c, const yaml_node_t *n, kube_node_class *nc)
{
    if (is_null(n))
        return TY_OK;
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "taints must be a list");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        const yaml_node_t *v = yaml_document_get_node(c->doc, *it);
        if (grow((void **)&nc->taints, nc->ntaints, sizeof *nc->taints))
            return TY_ENOMEM;
        kube_taint *t = &nc->taints[nc->ntaints++];
        ty_err e = each_pair(c, v, "a taint", taint_keys, taint_pair, t);
        if (e)
            return e;
        if (!t->key || !t->effect)
            return fail(c, v, "a taint needs a key and an effect");
        if (!t->value && !(t->value = strdup("")))
            return TY_ENOMEM;
        if (!is_label_key(t->key))
            return fail(c, v, "'%s' is not a valid taint key", t->key);
        if (!is_label_value(t->value))
            return fail(c, v, "'%s' is not a valid taint value", t->value);
        if (strcmp(t->effect, "NoSchedule") && strcmp(t->effect, "PreferNoSchedule") &&
            strcmp(t->effect, "NoExecute"))
            return fail(c, v, "a taint's effect is NoSchedule, PreferNoSchedule or NoExecute");
    }
    return TY_OK;
}

static const char *const class_keys[] = {"node_labels", "taints", NULL};

static ty_err class_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_node_class *nc = ud;
    if (idx == 0)
        return is_null(v) ? TY_OK : each_pair(c, v, "node_labels", NULL, label_pair, nc);
    return get_taints(c, v, nc);
}

typedef struct class_list {
    kube_node_class **arr;
    size_t *n;
    int capacity; /* names restricted to spot / on-demand */
} class_list;

static ty_err classes_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)idx;
    class_list *l = ud;
    const char *name = scalar(k);
    if (l->capacity && strcmp(name, "spot") && strcmp(name, "on-demand"))
        return fail(c, k, "capacity type '%s' is neither spot nor on-demand", name);
    if (!l->capacity && !is_dns_label(name))
        return fail(c, k, "GPU type '%s' is not a DNS label", name);
    if (grow((void **)l->arr, *l->n, sizeof **l->arr))
        return TY_ENOMEM;
    kube_node_class *nc = &(*l->arr)[(*l->n)++];
    if (!(nc->name = strdup(name)))
        return TY_ENOMEM;
    if (is_null(v))
        return TY_OK;
    return each_pair(c, v, l->capacity ? "a capacity type" : "a GPU type", class_keys, class_pair,
                     nc);
}

/* ---- node groups ---- */

static const char *const group_keys[] = {"name",          "zone",     "gpu_type", "capacity",
                                         "gpus_per_node", "max_size", NULL};

static ty_err group_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_node_group *g = ud;
    long long n = 0;
    ty_err e;
    switch (idx) {
    case 0:
        return get_string(c, v, "name", &g->name);
    case 1:
        return get_string(c, v, "zone", &g->zone);
    case 2:
        return get_string(c, v, "gpu_type", &g->gpu_type);
    case 3:
        return get_string(c, v, "capacity", &g->capacity);
    case 4:
        if ((e = get_int(c, v, "gpus_per_node", 1, 64, &n)))
            return e;
        g->gpus_per_node = (int)n;
        return TY_OK;
    default:
        if ((e = get_int(c, v, "max_size", 1, 100000, &n)))
            return e;
        g->max_size = (int)n;
        return TY_OK;
    }
}

static ty_err get_groups(pctx *c, const yaml_node_t *n, kube_profile *p)
{
    if (is_null(n))
        return TY_OK;
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "node_groups must be a list");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        const yaml_node_t *v = yaml_document_get_node(c->doc, *it);
        if (grow((void **)&p->groups, p->ngroups, sizeof *p->groups))
            return TY_ENOMEM;
        kube_node_group *g = &p->groups[p->ngroups++];
        ty_err e = each_pair(c, v, "a node group", group_keys, group_pair, g);
        if (e)
            return e;
        if (!g->name || !g->zone || !g->gpu_type || !g->capacity || !g->gpus_per_node ||
            !g->max_size)
            return fail(c, v,
                        "a node group needs name, zone, gpu_type, capacity, gpus_per_node and "
                        "max_size");
        if (!is_dns_label(g->name))
            return fail(c, v, "node group name '%s' is not a DNS label", g->name);
        for (size_t i = 0; i + 1 < p->ngroups; i++)
            if (!strcmp(p->groups[i].name, g->name))
                return fail(c, v, "node group '%s' is declared twice", g->name);
    }
    return TY_OK;
}

/* ---- the top level ---- */

static const char *const paths_keys[] = {"data", "output", "checkpoints", NULL};

static ty_err paths_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_profile *p = ud;
    char **dst = idx == 0 ? &p->data_dir : idx == 1 ? &p->output_dir : &p->checkpoint_dir;
    ty_err e = get_string(c, v, paths_keys[idx], dst);
    if (!e && (*dst)[0] != '/')
        return fail(c, v, "paths.%s must be an absolute path", paths_keys[idx]);
    return e;
}

static const char *const volcano_keys[] = {"enabled", "queue", NULL};

static ty_err volcano_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_profile *p = ud;
    if (idx == 0)
        return get_bool(c, v, "volcano.enabled", &p->volcano);
    ty_err e = get_string(c, v, "volcano.queue", &p->volcano_queue);
    if (!e && !is_dns_label(p->volcano_queue))
        return fail(c, v, "volcano.queue '%s' is not a DNS label", p->volcano_queue);
    return e;
}

static const char *const quarantine_keys[] = {"failures", "min_jobs", "window_seconds",
                                              "release_seconds", NULL};

static ty_err quarantine_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v,
                              void *ud)
{
    (void)k;
    kube_quarantine *q = &((kube_profile *)ud)->quarantine;
    switch (idx) {
    case 0:
        return get_int(c, v, "quarantine.failures", 1, 1000, &q->failures);
    case 1:
        return get_int(c, v, "quarantine.min_jobs", 1, 1000, &q->min_jobs);
    case 2:
        return get_int(c, v, "quarantine.window_seconds", 1, 31536000, &q->window_seconds);
    default:
        return get_int(c, v, "quarantine.release_seconds", 1, 31536000, &q->release_seconds);
    }
}

static const char *const top_keys[] = {"namespace",
                                       "kubernetes_version",
                                       "server_url",
                                       "zones",
                                       "image_pull_secrets",
                                       "service_account",
                                       "priority_class",
                                       "ttl_seconds_after_finished",
                                       "master_port",
                                       "paths",
                                       "gpu_types",
                                       "capacity_types",
                                       "node_groups",
                                       "scale_up_timeout_seconds",
                                       "volcano",
                                       "termination_grace_seconds",
                                       "unschedulable_timeout_seconds",
                                       "quarantine",
                                       NULL};

static ty_err optional_name(pctx *c, const yaml_node_t *v, const char *what, char **dst)
{
    if (is_null(v))
        return TY_OK;
    ty_err e = get_string(c, v, what, dst);
    if (!e && !is_dns_subdomain(*dst))
        return fail(c, v, "%s '%s' is not a valid name", what, *dst);
    return e;
}

static ty_err top_pair(pctx *c, int idx, const yaml_node_t *k, const yaml_node_t *v, void *ud)
{
    (void)k;
    kube_profile *p = ud;
    long long n = 0;
    ty_err e = TY_OK;
    switch (idx) {
    case 0:
        if ((e = get_string(c, v, "namespace", &p->namespace)))
            return e;
        if (!is_dns_label(p->namespace))
            return fail(c, v, "namespace '%s' is not a DNS label", p->namespace);
        return TY_OK;
    case 1: {
        const char *s = scalar(v);
        int major = 0, minor = 0, used = 0;
        if (!s || sscanf(s, "%d.%d%n", &major, &minor, &used) != 2 || s[used] || major != 1 ||
            minor < 24 || minor > 99)
            return fail(c, v, "kubernetes_version must be \"1.MINOR\", at least 1.24");
        p->version_major = major;
        p->version_minor = minor;
        return TY_OK;
    }
    case 2:
        if (is_null(v))
            return TY_OK;
        if ((e = get_string(c, v, "server_url", &p->server_url)))
            return e;
        if (strncmp(p->server_url, "http://", 7) && strncmp(p->server_url, "https://", 8))
            return fail(c, v, "server_url must start with http:// or https://");
        return TY_OK;
    case 3:
        return get_strings(c, v, "zones", is_dns_label, &p->zones, &p->nzones);
    case 4:
        return get_strings(c, v, "image_pull_secrets", is_dns_subdomain, &p->pull_secrets,
                           &p->npull_secrets);
    case 5:
        return optional_name(c, v, "service_account", &p->service_account);
    case 6:
        return optional_name(c, v, "priority_class", &p->priority_class);
    case 7:
        if (is_null(v))
            return TY_OK;
        return get_int(c, v, "ttl_seconds_after_finished", 0, 31536000,
                       &p->ttl_seconds_after_finished);
    case 8:
        if ((e = get_int(c, v, "master_port", 1, 65535, &n)))
            return e;
        p->master_port = (int)n;
        return TY_OK;
    case 9:
        return each_pair(c, v, "paths", paths_keys, paths_pair, p);
    case 10: {
        class_list l = {&p->gpu_types, &p->ngpu_types, 0};
        return is_null(v) ? TY_OK : each_pair(c, v, "gpu_types", NULL, classes_pair, &l);
    }
    case 11: {
        class_list l = {&p->capacity_types, &p->ncapacity_types, 1};
        return is_null(v) ? TY_OK : each_pair(c, v, "capacity_types", NULL, classes_pair, &l);
    }
    case 12:
        return get_groups(c, v, p);
    case 13:
        return get_int(c, v, "scale_up_timeout_seconds", 1, 86400, &p->scale_up_timeout_seconds);
    case 14:
        return each_pair(c, v, "volcano", volcano_keys, volcano_pair, p);
    case 15:
        if (is_null(v))
            return TY_OK;
        return get_int(c, v, "termination_grace_seconds", 0, 3600, &p->termination_grace_seconds);
    case 16:
        return get_int(c, v, "unschedulable_timeout_seconds", 1, 86400,
                       &p->unschedulable_timeout_seconds);
    default:
        return is_null(v) ? TY_OK
                          : each_pair(c, v, "quarantine", quarantine_keys, quarantine_pair, p);
    }
}

/* Checks that refer across sections, each at the node group's line. */
static ty_err cross_check(pctx *c, const yaml_node_t *root, kube_profile *p)
{
    const yaml_node_t *groups = NULL;
    for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < root->data.mapping.pairs.top;
         q++)
        if (!strcmp(scalar(yaml_document_get_node(c->doc, q->key)), "node_groups"))
            groups = yaml_document_get_node(c->doc, q->value);
    for (size_t i = 0; i < p->ngroups; i++) {
        const kube_node_group *g = &p->groups[i];
        const yaml_node_t *at =
            yaml_document_get_node(c->doc, groups->data.sequence.items.start[i]);
        if (!kube_profile_gpu_type(p, g->gpu_type))
            return fail(c, at, "node group '%s': GPU type '%s' is not in gpu_types", g->name,
                        g->gpu_type);
        if (!kube_profile_capacity(p, g->capacity))
            return fail(c, at, "node group '%s': capacity '%s' is not in capacity_types", g->name,
                        g->capacity);
        int known = p->nzones == 0;
        for (size_t z = 0; z < p->nzones; z++)
            known |= !strcmp(p->zones[z], g->zone);
        if (!known)
            return fail(c, at, "node group '%s': zone '%s' is not in zones", g->name, g->zone);
    }
    return TY_OK;
}

static ty_err defaults(kube_profile *p)
{
    p->version_major = 1;
    p->version_minor = 26;
    p->ttl_seconds_after_finished = -1;
    p->termination_grace_seconds = -1;
    p->master_port = 29500;
    p->scale_up_timeout_seconds = 900;
    p->unschedulable_timeout_seconds = 300;
    p->quarantine = (kube_quarantine){3, 2, 3600, 86400};
    if (!(p->namespace = strdup("default")) || !(p->data_dir = strdup("/data")) ||
        !(p->output_dir = strdup("/output")) || !(p->checkpoint_dir = strdup("/checkpoints")) ||
        !(p->volcano_queue = strdup("default")))
        return TY_ENOMEM;
    return TY_OK;
}

ty_err kube_profile_parse(const char *text, size_t len, const char *file, kube_profile **out,
                          char *msg, size_t msglen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    int have_parser = 0, have_doc = 0;
    kube_profile *p = NULL;
    pctx c = {file ? file : "profile", &doc, msg, msglen};
    ty_err e = TY_OK;

    if (!text || !out)
        return TY_EINVAL;
    if (len > PROFILE_MAX_BYTES) {
        snprintf(msg, msglen, "%s: larger than %d bytes", c.file, PROFILE_MAX_BYTES);
        return TY_ETOOLARGE;
    }
    if (!(p = calloc(1, sizeof *p)) || (e = defaults(p))) {
        e = TY_ENOMEM;
        goto out;
    }
    if (!yaml_parser_initialize(&parser)) {
        e = TY_ENOMEM;
        goto out;
    }
    have_parser = 1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(msg, msglen, "%s:%lu: %s", c.file, (unsigned long)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "not YAML");
        e = TY_EINVAL;
        goto out;
    }
    have_doc = 1;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        snprintf(msg, msglen, "%s:1: the profile is empty", c.file);
        e = TY_EINVAL;
        goto out;
    }
    if ((e = each_pair(&c, root, "the profile", top_keys, top_pair, p)) ||
        (e = cross_check(&c, root, p)))
        goto out;
    *out = p;
    p = NULL;
out:
    if (have_doc)
        yaml_document_delete(&doc);
    if (have_parser)
        yaml_parser_delete(&parser);
    kube_profile_free(p);
    return e;
}

ty_err kube_profile_load(const char *path, kube_profile **out, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    ty_err e = TY_OK;
    if (!f) {
        snprintf(msg, msglen, "%s: %s", path, strerror(errno));
        return TY_EIO;
    }
    if (!(buf = malloc(PROFILE_MAX_BYTES + 1))) {
        e = TY_ENOMEM;
        goto out;
    }
    n = fread(buf, 1, PROFILE_MAX_BYTES + 1, f);
    if (ferror(f)) {
        snprintf(msg, msglen, "%s: cannot be read", path);
        e = TY_EIO;
        goto out;
    }
    e = kube_profile_parse(buf, n, path, out, msg, msglen);
out:
    free(buf);
    fclose(f);
    return e;
}

static void free_class(kube_node_class *c)
{
    free(c->name);
    for (size_t i = 0; i < c->nlabels; i++) {
        free(c->labels[i].key);
        free(c->labels[i].value);
    }
    free(c->labels);
    for (size_t i = 0; i < c->ntaints; i++) {
        free(c->taints[i].key);
        free(c->taints[i].value);
        free(c->taints[i].effect);
    }
    free(c->taints);
}

static void free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

void kube_profile_free(kube_profile *p)
{
    if (!p)
        return;
    free(p->namespace);
    free(p->server_url);
    free_strings(p->zones, p->nzones);
    free_strings(p->pull_secrets, p->npull_secrets);
    free(p->service_account);
    free(p->priority_class);
    free(p->data_dir);
    free(p->output_dir);
    free(p->checkpoint_dir);
    for (size_t i = 0; i < p->ngpu_types; i++)
        free_class(&p->gpu_types[i]);
    free(p->gpu_types);
    for (size_t i = 0; i < p->ncapacity_types; i++)
        free_class(&p->capacity_types[i]);
    free(p->capacity_types);
    for (size_t i = 0; i < p->ngroups; i++) {
        free(p->groups[i].name);
        free(p->groups[i].zone);
        free(p->groups[i].gpu_type);
        free(p->groups[i].capacity);
    }
    free(p->groups);
    free(p->volcano_queue);
    free(p);
}

static const kube_node_class *find_class(const kube_node_class *arr, size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (!strcmp(arr[i].name, name))
            return &arr[i];
    return NULL;
}

const kube_node_class *kube_profile_gpu_type(const kube_profile *p, const char *name)
{
    return find_class(p->gpu_types, p->ngpu_types, name);
}

const kube_node_class *kube_profile_capacity(const kube_profile *p, const char *name)
{
    return find_class(p->capacity_types, p->ncapacity_types, name);
}

const char *kube_node_class_label(const kube_node_class *c, const char *key)
{
    for (size_t i = 0; c && i < c->nlabels; i++)
        if (!strcmp(c->labels[i].key, key))
            return c->labels[i].value;
    return NULL;
}
