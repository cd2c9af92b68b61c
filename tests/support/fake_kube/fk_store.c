/*
 * fk_store.c - the fake apiserver's objects, resourceVersions, the window of
 * recent events watches resume from, and label selectors.
 *
 * Every write takes the next value of one global counter as its
 * resourceVersion, as etcd's revision does. The window keeps the last
 * ring_cap events; a watch from an older rv is answered 410 Expired.
 */
#include "tests/support/fake_kube/fk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const fk_res fk_resources[FK_NRES] = {
    [FK_NAMESPACES] = {"namespaces", "Namespace", "", "v1", "v1", "io.k8s.api.core.v1.Namespace",
                       0},
    [FK_NODES] = {"nodes", "Node", "", "v1", "v1", "io.k8s.api.core.v1.Node", 0},
    [FK_PODS] = {"pods", "Pod", "", "v1", "v1", "io.k8s.api.core.v1.Pod", 1},
    [FK_SERVICES] = {"services", "Service", "", "v1", "v1", "io.k8s.api.core.v1.Service", 1},
    [FK_EVENTS] = {"events", "Event", "", "v1", "v1", "io.k8s.api.core.v1.Event", 1},
    [FK_JOBS] = {"jobs", "Job", "batch", "v1", "batch/v1", "io.k8s.api.batch.v1.Job", 1},
    [FK_VCJOBS] = {"jobs", "Job", "batch.volcano.sh", "v1alpha1", "batch.volcano.sh/v1alpha1", NULL,
                   1},
    [FK_SECRETS] = {"secrets", "Secret", "", "v1", "v1", "io.k8s.api.core.v1.Secret", 1},
};

static void fk_event_clear(fk_event *e);

int fk_store_init(fk_store *st, size_t window)
{
    memset(st, 0, sizeof *st);
    if (pthread_mutex_init(&st->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&st->cv, NULL) != 0)
        return -1;
    for (int i = 0; i < FK_NRES; i++)
        st->objs[i] = json_object();
    st->logs = json_object();
    st->groups = json_object();
    st->pods_by_owner = json_object();
    st->pods_by_label = json_object();
    st->pending = json_object();
    st->gpu_used = json_object();
    st->res_used = json_object();
    st->owners = json_object();
    st->ring_cap = window ? window : 1;
    st->ring = calloc(st->ring_cap, sizeof *st->ring);
    st->seq = (unsigned long)time(NULL);
    return st->ring && st->logs ? 0 : -1;
}

void fk_store_fini(fk_store *st)
{
    for (int i = 0; i < FK_NRES; i++)
        json_decref(st->objs[i]);
    json_decref(st->logs);
    json_decref(st->groups);
    json_decref(st->pods_by_owner);
    json_decref(st->pods_by_label);
    json_decref(st->pending);
    json_decref(st->gpu_used);
    json_decref(st->res_used);
    json_decref(st->owners);
    json_decref(st->nodes_sorted);
    for (size_t i = 0; i < st->ring_len; i++)
        fk_event_clear(&st->ring[(st->ring_head + i) % st->ring_cap]);
    free(st->ring);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
}

void fk_now(char *buf, size_t len, long delta)
{
    time_t t = time(NULL) + delta;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* xorshift: names and uids need to be unique, not unpredictable. */
static unsigned long next_rand(fk_store *st)
{
    unsigned long x = st->seq ? st->seq : 88172645463325252UL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    st->seq = x;
    return x;
}

void fk_uid(fk_store *st, char *buf, size_t len)
{
    unsigned long a = next_rand(st), b = next_rand(st);
    snprintf(buf, len, "%08lx-%04lx-4%03lx-a%03lx-%012lx", a & 0xffffffffUL, (a >> 32) & 0xffff,
             (a >> 48) & 0xfff, b & 0xfff, (b >> 12) & 0xffffffffffffUL);
}

void fk_rand5(fk_store *st, char out[6])
{
    /* The alphabet of k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3. */
    static const char alnum[] = "bcdfghjklmnpqrstvwxz2456789";
    for (int i = 0; i < 5; i++)
        out[i] = alnum[next_rand(st) % (sizeof alnum - 1)];
    out[5] = '\0';
}

static void obj_key(char *buf, size_t len, const char *ns, const char *name)
{
    snprintf(buf, len, "%s/%s", ns ? ns : "", name ? name : "");
}

json_t *fk_get(fk_store *st, int res, const char *ns, const char *name)
{
    char key[600];
    obj_key(key, sizeof key, fk_resources[res].namespaced ? ns : "", name);
    return json_object_get(st->objs[res], key);
}

static void fk_event_clear(fk_event *e)
{
    json_decref(e->obj);
    json_decref(e->prev);
    e->obj = e->prev = NULL;
}

static void push_event(fk_store *st, int res, const char *type, json_t *obj, json_t *prev)
{
    if (res == FK_NODES) {
        json_decref(st->nodes_sorted);
        st->nodes_sorted = NULL;
    }
    if (st->ring_len == st->ring_cap) {
        fk_event *old = &st->ring[st->ring_head];
        st->window_rv = old->rv;
        json_decref(old->obj);
        json_decref(old->prev);
        st->ring_head = (st->ring_head + 1) % st->ring_cap;
        st->ring_len--;
    }
    fk_event *e = &st->ring[(st->ring_head + st->ring_len) % st->ring_cap];
    e->rv = st->rv;
    e->res = res;
    e->type = type;
    e->obj = json_incref(obj);
    e->prev = json_incref(prev);
    st->ring_len++;
    pthread_cond_broadcast(&st->cv);
}

/* metadata's members in the apiserver's order; others keep theirs, after. */
static void order_metadata(json_t *md)
{
    static const char *order[] = {"name",
                                  "generateName",
                                  "namespace",
                                  "uid",
                                  "resourceVersion",
                                  "generation",
                                  "creationTimestamp",
                                  "deletionTimestamp",
                                  "deletionGracePeriodSeconds",
                                  "labels",
                                  "annotations",
                                  "ownerReferences",
                                  "finalizers"};
    json_t *copy = json_copy(md);
    json_object_clear(md);
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        json_t *v = json_object_get(copy, order[i]);
        if (v) {
            json_object_set(md, order[i], v);
            json_object_del(copy, order[i]);
        }
    }
    json_object_update(md, copy);
    json_decref(copy);
}

static void set_rv(fk_store *st, json_t *obj)
{
    char rv[32];
    snprintf(rv, sizeof rv, "%llu", (unsigned long long)++st->rv);
    json_object_set_new(fk_path(obj, "metadata", 1), "resourceVersion", json_string(rv));
    order_metadata(fk_path(obj, "metadata", 0));
}

static const char *store_key(int res, const json_t *obj, char *key, size_t len)
{
    const char *ns = fk_resources[res].namespaced ? fk_str(obj, "metadata.namespace") : "";
    obj_key(key, len, ns, fk_str(obj, "metadata.name"));
    return key;
}

const char *fk_owner_uid(const json_t *obj)
{
    const json_t *refs = fk_path((json_t *)obj, "metadata.ownerReferences", 0);
    size_t i;
    json_t *o;
    json_array_foreach(refs, i, o)
    {
        if (json_is_true(json_object_get(o, "controller")))
            return fk_str(o, "uid");
    }
    o = json_array_get(refs, 0);
    return o ? fk_str(o, "uid") : "";
}

/* Adds (sign 1) or takes away (sign -1) a pod in the indexes. */
static void index_pod(fk_store *st, const json_t *pod, int sign)
{
    char key[600];
    obj_key(key, sizeof key, fk_str(pod, "metadata.namespace"), fk_str(pod, "metadata.name"));
    const char *owner = fk_owner_uid(pod);
    if (*owner) {
        json_t *set = json_object_get(st->pods_by_owner, owner);
        if (sign > 0) {
            if (!set) {
                set = json_object();
                json_object_set_new(st->pods_by_owner, owner, set);
            }
            json_object_set_new(set, key, json_true());
        } else if (set) {
            json_object_del(set, key);
            if (json_object_size(set) == 0)
                json_object_del(st->pods_by_owner, owner);
        }
    }
    const char *lk;
    json_t *lv;
    json_object_foreach(fk_path((json_t *)pod, "metadata.labels", 0), lk, lv)
    {
        char pair[700];
        if (!json_is_string(lv))
            continue;
        snprintf(pair, sizeof pair, "%s=%s", lk, json_string_value(lv));
        json_t *set = json_object_get(st->pods_by_label, pair);
        if (sign > 0) {
            if (!set) {
                set = json_object();
                json_object_set_new(st->pods_by_label, pair, set);
            }
            json_object_set_new(set, key, json_true());
        } else if (set) {
            json_object_del(set, key);
            if (json_object_size(set) == 0)
                json_object_del(st->pods_by_label, pair);
        }
    }
    if (fk_pod_pending(pod)) {
        if (sign > 0)
            json_object_set_new(st->pending, key, json_true());
        else
            json_object_del(st->pending, key);
    }
    const char *node = fk_str(pod, "spec.nodeName");
    if (*node && fk_pod_active(pod)) {
        json_int_t used = json_integer_value(json_object_get(st->gpu_used, node));
        json_object_set_new(st->gpu_used, node, json_integer(used + sign * fk_pod_gpus(pod)));
        int64_t req[3];
        fk_pod_requests(pod, req);
        const json_t *u = json_object_get(st->res_used, node);
        json_object_set_new(st->res_used, node,
                            json_pack("[I, I, I, I]",
                                      json_integer_value(json_array_get(u, 0)) + sign * req[0],
                                      json_integer_value(json_array_get(u, 1)) + sign * req[1],
                                      json_integer_value(json_array_get(u, 2)) + sign * req[2],
                                      json_integer_value(json_array_get(u, 3)) + sign));
    }
}

json_t *fk_owner(fk_store *st, const char *uid, int *res)
{
    const json_t *at = json_object_get(st->owners, uid);
    if (!at)
        return NULL;
    *res = (int)json_integer_value(json_array_get(at, 0));
    return json_object_get(st->objs[*res], json_string_value(json_array_get(at, 1)));
}

json_t *fk_pods_of(fk_store *st, const char *uid)
{
    json_t *out = json_array();
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(st->pods_by_owner, uid), key, v)
    {
        json_t *pod = json_object_get(st->objs[FK_PODS], key);
        if (pod)
            json_array_append(out, pod);
    }
    return out;
}

json_t *fk_create(fk_store *st, int res, json_t *obj)
{
    char key[600], buf[64];
    json_t *md = fk_path(obj, "metadata", 1);
    if (!json_object_get(md, "uid")) {
        fk_uid(st, buf, sizeof buf);
        json_object_set_new(md, "uid", json_string(buf));
    }
    fk_now(buf, sizeof buf, 0);
    json_object_set_new(md, "creationTimestamp", json_string(buf));
    /* Only kinds with a spec the apiserver versions get a generation. */
    if (res == FK_JOBS || res == FK_VCJOBS)
        json_object_set_new(md, "generation", json_integer(1));
    json_object_del(md, "managedFields");
    set_rv(st, obj);
    json_object_set_new(st->objs[res], store_key(res, obj, key, sizeof key), obj);
    if (res == FK_PODS)
        index_pod(st, obj, 1);
    if (res == FK_JOBS || res == FK_VCJOBS)
        json_object_set_new(st->owners, fk_str(obj, "metadata.uid"), json_pack("[i, s]", res, key));
    push_event(st, res, "ADDED", obj, NULL);
    return obj;
}

json_t *fk_update(fk_store *st, int res, json_t *obj)
{
    char key[600];
    set_rv(st, obj);
    store_key(res, obj, key, sizeof key);
    json_t *prev = json_incref(json_object_get(st->objs[res], key));
    if (res == FK_PODS) {
        if (prev)
            index_pod(st, prev, -1);
        index_pod(st, obj, 1);
    }
    json_object_set_new(st->objs[res], key, obj);
    push_event(st, res, "MODIFIED", obj, prev);
    json_decref(prev);
    return obj;
}

void fk_remove(fk_store *st, int res, const char *ns, const char *name)
{
    char key[600];
    obj_key(key, sizeof key, fk_resources[res].namespaced ? ns : "", name);
    json_t *cur = json_object_get(st->objs[res], key);
    if (!cur)
        return;
    if (res == FK_PODS)
        index_pod(st, cur, -1);
    if (res == FK_JOBS || res == FK_VCJOBS)
        json_object_del(st->owners, fk_str(cur, "metadata.uid"));
    json_t *last = json_deep_copy(cur);
    set_rv(st, last);
    json_object_del(st->objs[res], key);
    push_event(st, res, "DELETED", last, NULL);
    json_decref(last);
    if (res == FK_PODS)
        json_object_del(st->logs, key);
}

typedef struct keyed {
    const char *key; /* "ns/name": sorts by namespace, then name */
    json_t *obj;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

json_t *fk_list(fk_store *st, int res, const char *ns)
{
    size_t n = json_object_size(st->objs[res]), k = 0, nslen = ns ? strlen(ns) : 0;
    keyed *v = calloc(n ? n : 1, sizeof *v);
    json_t *out = json_array();
    const char *key;
    json_t *obj;
    json_object_foreach(st->objs[res], key, obj)
    {
        if (ns && fk_resources[res].namespaced && (strncmp(key, ns, nslen) || key[nslen] != '/'))
            continue;
        v[k++] = (keyed){key, obj};
    }
    qsort(v, k, sizeof *v, cmp_keyed);
    for (size_t i = 0; i < k; i++)
        json_array_append(out, v[i].obj);
    free(v);
    return out;
}

json_t *fk_nodes(fk_store *st)
{
    if (!st->nodes_sorted)
        st->nodes_sorted = fk_list(st, FK_NODES, NULL);
    return st->nodes_sorted;
}

void fk_compact(fk_store *st)
{
    for (size_t i = 0; i < st->ring_len; i++)
        fk_event_clear(&st->ring[(st->ring_head + i) % st->ring_cap]);
    st->ring_len = 0;
    st->ring_head = 0;
    /* Compaction takes a revision of its own: nothing up to and including
     * the last write can be listed or watched from any more. */
    st->window_rv = ++st->rv;
}

void fk_event_record(fk_store *st, int res, const json_t *obj, const char *type, const char *reason,
                     const char *message, const char *component)
{
    char name[600], now[64];
    const char *ns = fk_str(obj, "metadata.namespace");
    if (!*ns)
        ns = "default";
    /* The apiserver's clients name events <object>.<UnixNano in hex>: a list
     * sorted by name is in time order. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long nano =
        (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
    static unsigned long long last_nano;
    if (nano <= last_nano)
        nano = last_nano + 1;
    last_nano = nano;
    snprintf(name, sizeof name, "%s.%llx", fk_str(obj, "metadata.name"), nano);
    fk_now(now, sizeof now, 0);
    json_t *io = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "kind", fk_resources[res].kind,
                           "namespace", ns, "name", fk_str(obj, "metadata.name"), "uid",
                           fk_str(obj, "metadata.uid"), "apiVersion", fk_resources[res].api_version,
                           "resourceVersion", fk_str(obj, "metadata.resourceVersion"));
    json_t *ev =
        json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s}", "kind", "Event", "apiVersion",
                  "v1", "metadata", "name", name, "namespace", ns, "involvedObject", io, "reason",
                  reason, "message", message, "type", type);
    if (strcmp(component, "default-scheduler") == 0) {
        /* The scheduler writes through events.k8s.io/v1: eventTime, no count (12e). */
        char micro[64];
        fk_now(micro, sizeof micro, 0);
        micro[strlen(micro) - 1] = '\0';
        strncat(micro, ".000000Z", sizeof micro - strlen(micro) - 1);
        json_object_set_new(ev, "source", json_object());
        json_object_set_new(ev, "firstTimestamp", json_null());
        json_object_set_new(ev, "lastTimestamp", json_null());
        json_object_set_new(ev, "eventTime", json_string(micro));
        json_object_set_new(ev, "action", json_string("Scheduling"));
        json_object_set_new(ev, "reportingComponent", json_string(component));
        json_object_set_new(ev, "reportingInstance", json_string("default-scheduler-fake"));
    } else {
        json_object_set_new(ev, "source", json_pack("{s:s}", "component", component));
        json_object_set_new(ev, "firstTimestamp", json_string(now));
        json_object_set_new(ev, "lastTimestamp", json_string(now));
        json_object_set_new(ev, "count", json_integer(1));
        json_object_set_new(ev, "eventTime", json_null());
        json_object_set_new(ev, "reportingComponent", json_string(""));
        json_object_set_new(ev, "reportingInstance", json_string(""));
    }
    fk_create(st, FK_EVENTS, ev);
}

/* ---- object paths ---------------------------------------------------- */

json_t *fk_path(json_t *obj, const char *path, int create)
{
    char part[256];
    while (obj && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        json_t *next = json_object_get(obj, part);
        if (!next && create && json_is_object(obj)) {
            next = json_object();
            json_object_set_new(obj, part, next);
        }
        obj = next;
        path = dot ? dot + 1 : path + n;
    }
    return obj;
}

const char *fk_str(const json_t *obj, const char *path)
{
    const char *s = json_string_value(fk_path((json_t *)obj, path, 0));
    return s ? s : "";
}

/* ---- label selectors ------------------------------------------------- */

enum sel_op { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOTEXISTS };

typedef struct sel_req {
    char *key;
    enum sel_op op;
    json_t *values; /* array of strings */
} sel_req;

struct fk_sel {
    sel_req *r;
    size_t n;
    int never; /* a LabelSelector that can match nothing */
};

static char *trim_dup(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int add_req(fk_sel *s, char *key, enum sel_op op, json_t *values)
{
    sel_req *r = realloc(s->r, (s->n + 1) * sizeof *r);
    if (!r) {
        free(key);
        json_decref(values);
        return -1;
    }
    s->r = r;
    s->r[s->n++] = (sel_req){key, op, values ? values : json_array()};
    return 0;
}

static int parse_one(fk_sel *s, const char *t, size_t n, char *err, size_t errlen)
{
    char *req = trim_dup(t, n);
    int rc = -1;
    if (!req)
        return -1;
    char *p;
    if (req[0] == '!') {
        rc = add_req(s, trim_dup(req + 1, strlen(req + 1)), OP_NOTEXISTS, NULL);
    } else if ((p = strstr(req, "!=")) != NULL) {
        json_t *v = json_array();
        char *val = trim_dup(p + 2, strlen(p + 2));
        json_array_append_new(v, json_string(val));
        free(val);
        rc = add_req(s, trim_dup(req, (size_t)(p - req)), OP_NE, v);
    } else if ((p = strchr(req, '=')) != NULL) {
        const char *vs = p[1] == '=' ? p + 2 : p + 1;
        json_t *v = json_array();
        char *val = trim_dup(vs, strlen(vs));
        json_array_append_new(v, json_string(val));
        free(val);
        rc = add_req(s, trim_dup(req, (size_t)(p - req)), OP_EQ, v);
    } else if ((p = strchr(req, '(')) != NULL) {
        char *close = strrchr(req, ')');
        char *head = trim_dup(req, (size_t)(p - req));
        char *sp = head ? strrchr(head, ' ') : NULL;
        if (!close || !sp) {
            free(head);
            snprintf(err, errlen, "unable to parse requirement: %s", req);
            free(req);
            return -1;
        }
        *sp = '\0';
        const char *opname = sp + 1;
        enum sel_op op = strcmp(opname, "in") == 0 ? OP_IN : OP_NOTIN;
        if (op == OP_NOTIN && strcmp(opname, "notin") != 0) {
            snprintf(err, errlen, "unable to parse requirement: %s", req);
            free(head);
            free(req);
            return -1;
        }
        json_t *v = json_array();
        const char *q = p + 1;
        while (q < close) {
            const char *c = memchr(q, ',', (size_t)(close - q));
            size_t len = c ? (size_t)(c - q) : (size_t)(close - q);
            char *val = trim_dup(q, len);
            json_array_append_new(v, json_string(val));
            free(val);
            q += len + 1;
        }
        rc = add_req(s, trim_dup(head, strlen(head)), op, v);
        free(head);
    } else {
        rc = add_req(s, trim_dup(req, strlen(req)), OP_EXISTS, NULL);
    }
    free(req);
    return rc;
}

int fk_sel_parse(const char *text, fk_sel **out, char *err, size_t errlen)
{
    fk_sel *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    const char *p = text ? text : "";
    while (*p) {
        int depth = 0;
        const char *q = p;
        while (*q && (depth || *q != ',')) {
            depth += *q == '(' ? 1 : *q == ')' ? -1 : 0;
            q++;
        }
        if (q > p && parse_one(s, p, (size_t)(q - p), err, errlen) != 0) {
            fk_sel_free(s);
            return -1;
        }
        p = *q ? q + 1 : q;
    }
    *out = s;
    return 0;
}

int fk_sel_from_json(const json_t *ls, fk_sel **out)
{
    fk_sel *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    if (!json_is_object(ls))
        s->never = 1; /* a nil selector matches nothing (pod affinity) */
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ls, "matchLabels"), k, v)
    {
        json_t *vals = json_array();
        json_array_append(vals, v);
        add_req(s, strdup(k), OP_EQ, vals);
    }
    size_t i;
    json_array_foreach(json_object_get(ls, "matchExpressions"), i, v)
    {
        const char *op = fk_str(v, "operator");
        enum sel_op o = strcmp(op, "In") == 0       ? OP_IN
                        : strcmp(op, "NotIn") == 0  ? OP_NOTIN
                        : strcmp(op, "Exists") == 0 ? OP_EXISTS
                                                    : OP_NOTEXISTS;
        json_t *vals = json_object_get(v, "values");
        add_req(s, strdup(fk_str(v, "key")), o, vals ? json_deep_copy(vals) : NULL);
    }
    *out = s;
    return 0;
}

void fk_sel_free(fk_sel *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->r[i].key);
        json_decref(s->r[i].values);
    }
    free(s->r);
    free(s);
}

int fk_sel_empty(const fk_sel *s)
{
    return !s || (s->n == 0 && !s->never);
}

static int in_values(const json_t *values, const char *v)
{
    size_t i;
    json_t *x;
    json_array_foreach(values, i, x)
    {
        if (json_is_string(x) && strcmp(json_string_value(x), v) == 0)
            return 1;
    }
    return 0;
}

int fk_sel_matches(const fk_sel *s, const json_t *labels)
{
    if (!s)
        return 1;
    if (s->never)
        return 0;
    for (size_t i = 0; i < s->n; i++) {
        const sel_req *r = &s->r[i];
        const char *v = json_string_value(json_object_get(labels, r->key));
        switch (r->op) {
        case OP_EQ:
        case OP_IN:
            if (!v || !in_values(r->values, v))
                return 0;
            break;
        case OP_NE:
        case OP_NOTIN:
            if (v && in_values(r->values, v))
                return 0;
            break;
        case OP_EXISTS:
            if (!v)
                return 0;
            break;
        case OP_NOTEXISTS:
            if (v)
                return 0;
            break;
        }
    }
    return 1;
}

/* Splits a term "label op value" in place; 0, or -1 when it has no operator. */
static int fsel_term(char *term, const char **label, const char **value, int *neg)
{
    char *eq = strstr(term, "!=");
    *neg = 0;
    if (eq) {
        *neg = 1;
        *eq = '\0';
        eq += 2;
    } else if ((eq = strchr(term, '=')) != NULL) {
        *eq = '\0';
        eq += eq[1] == '=' ? 2 : 1;
    } else {
        return -1;
    }
    *label = term;
    *value = eq;
    return 0;
}

/*
 * The field labels each kind's conversion function accepts in v1.26
 * (pkg/apis/core/v1/conversion.go, pkg/apis/batch/v1/conversion.go); every other kind only
 * metadata.name and metadata.namespace. NULL-terminated.
 */
static const char *const fsel_pods[] = {
    "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
    "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
    "status.podIP", "status.podIPs", "status.nominatedNodeName", "spec.host", NULL};
static const char *const fsel_nodes[] = {"metadata.name", "spec.unschedulable", NULL};
static const char *const fsel_events[] = {
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    "metadata.namespace", "metadata.name", NULL};
static const char *const fsel_namespaces[] = {"status.phase", "metadata.name", NULL};
static const char *const fsel_services[] = {"metadata.namespace", "metadata.name",
                                            "spec.clusterIP", "spec.type", NULL};
static const char *const fsel_jobs[] = {"metadata.name", "metadata.namespace",
                                        "status.successful", NULL};
static const char *const fsel_secrets[] = {"metadata.name", "metadata.namespace", "type", NULL};
static const char *const fsel_other[] = {"metadata.name", "metadata.namespace", NULL};

int fk_fsel_check(int res, const char *text, char *err, size_t errlen)
{
    const char *const *known = res == FK_PODS         ? fsel_pods
                               : res == FK_NODES      ? fsel_nodes
                               : res == FK_EVENTS     ? fsel_events
                               : res == FK_NAMESPACES ? fsel_namespaces
                               : res == FK_SERVICES   ? fsel_services
                               : res == FK_JOBS       ? fsel_jobs
                               : res == FK_SECRETS    ? fsel_secrets
                                                      : fsel_other;
    const char *p = text ? text : "";
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        char term[512];
        const char *label, *value;
        int neg;
        snprintf(term, sizeof term, "%.*s", (int)(n < sizeof term ? n : sizeof term - 1), p);
        if (n >= sizeof term || fsel_term(term, &label, &value, &neg) != 0) {
            /* k8s.io/apimachinery/pkg/fields ParseSelector's words */
            snprintf(err, errlen, "invalid selector: '%s'; can't understand '%s'", text, term);
            return -1;
        }
        int ok = 0;
        for (size_t i = 0; known[i] && !ok; i++)
            ok = !strcmp(known[i], label);
        if (!ok) {
            /* The conversion function's error, answered as 400 BadRequest. */
            snprintf(err, errlen, "field label not supported: %s", label);
            return -1;
        }
        p = c ? c + 1 : p + n;
    }
    return 0;
}

int fk_fsel_matches(const char *text, const json_t *obj, int *ok)
{
    *ok = 1;
    const char *p = text ? text : "";
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        char term[512];
        const char *label, *value;
        int neg;
        if (n >= sizeof term)
            return -1;
        memcpy(term, p, n);
        term[n] = '\0';
        if (fsel_term(term, &label, &value, &neg) != 0)
            return -1;
        if (!strcmp(label, "spec.host"))
            label = "spec.nodeName"; /* what old v1 clients send */
        int same = strcmp(fk_str(obj, label), value) == 0;
        if (same == neg)
            *ok = 0;
        p = c ? c + 1 : p + n;
    }
    return 0;
}

int fk_selects(int res, const char *ns, const json_t *obj, const fk_sel *sel, const char *fsel)
{
    if (ns && ns[0] && fk_resources[res].namespaced &&
        strcmp(fk_str(obj, "metadata.namespace"), ns))
        return 0;
    int ok = 1;
    if (fsel && fk_fsel_matches(fsel, obj, &ok) != 0)
        return 0;
    return ok && fk_sel_matches(sel, fk_path((json_t *)obj, "metadata.labels", 0));
}
