/*
 * test_deploy.c - deploy/: what `kubectl apply -k deploy/` and `eksctl create cluster -f
 * deploy/eksctl/cluster.yaml` would be given.
 *
 * Every YAML document under deploy/kustomize/, deploy/jobs/ and deploy/kustomization.yaml is
 * validated against the Kubernetes v1.26 definitions (tests/fixtures/kubernetes-openapi/
 * swagger.json), found by the apiVersion and kind the document states, in strict mode: an
 * unknown field fails here as it would with fieldValidation=Strict, instead of being dropped
 * by the API server. Kustomize's own files have no published schema and are checked against
 * the subset of it these files use. Then what no schema says: the kustomizations name files
 * that exist and every manifest beside them, RBAC grants exactly what the backend needs, the
 * Deployment passes flags the built `trainyard serve --help` lists (with values that agree
 * with the volumes, ports and images), and the eksctl cluster has the node groups, zones,
 * labels, taints and autoscaler tags that the cluster profile describes.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>
#include <yaml.h>

#include "tests/support/oas.h"
#include "tests/support/rbac_granted.h"

#ifndef TY_DEPLOY_DIR
#error "TY_DEPLOY_DIR (the repository's deploy/) must be defined"
#endif
#ifndef TY_K8S_OPENAPI_DIR
#error "TY_K8S_OPENAPI_DIR (tests/fixtures/kubernetes-openapi) must be defined"
#endif
#ifndef TY_TRAINYARD_BIN
#error "TY_TRAINYARD_BIN (the built trainyard binary) must be defined"
#endif

/* The namespace of the server and of its jobs' objects. */
#define NS "trainyard"

typedef struct {
    json_t *swagger; /* the v1.26 definitions */
    json_t *gvk;     /* "apps/v1/Deployment" -> "io.k8s.api.apps.v1.Deployment" */
    json_t *docs;    /* [{"file": path under deploy/, "doc": n, "obj": {...}}], file order */
} fixture;

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                    */

/* Reads a whole file, NUL-terminated. Returns new memory or NULL (errno set). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;

    if (!f)
        return NULL;
    for (;;) {
        if (cap - n < 4096) {
            char *bigger = realloc(buf, cap + 65536);
            if (!bigger) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = bigger;
            cap += 65536;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/*
 * Splits a YAML stream into its documents with libyaml's own idea of where each starts and
 * ends, and parses each with oas_yaml_parse(); empty documents are skipped. Appends the
 * values (new) to out. Returns 0, or -1 with err.
 */
static int yaml_documents(const char *text, size_t len, json_t *out, char *err, size_t errlen)
{
    yaml_parser_t p;
    yaml_event_t ev;
    size_t start = 0;
    int rc = -1, done = 0;

    if (!yaml_parser_initialize(&p)) {
        snprintf(err, errlen, "libyaml: out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    while (!done) {
        if (!yaml_parser_parse(&p, &ev)) {
            snprintf(err, errlen, "line %zu: %s", p.problem_mark.line + 1,
                     p.problem ? p.problem : "YAML error");
            goto out;
        }
        if (ev.type == YAML_DOCUMENT_START_EVENT) {
            start = ev.start_mark.index;
        } else if (ev.type == YAML_DOCUMENT_END_EVENT) {
            size_t end = ev.end_mark.index;
            json_t *doc = NULL;
            if (oas_yaml_parse(text + start, end - start, &doc, err, errlen) != 0) {
                yaml_event_delete(&ev);
                goto out;
            }
            if (json_is_null(doc))
                json_decref(doc);
            else
                json_array_append_new(out, doc);
        } else if (ev.type == YAML_STREAM_END_EVENT) {
            done = 1;
        }
        yaml_event_delete(&ev);
    }
    rc = 0;
out:
    yaml_parser_delete(&p);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Appends the .yaml/.yml files below deploy/<rel> (a file or a directory, recursively, in
 * name order) to out as paths relative to deploy/. */
static void collect_yaml(const char *rel, json_t *out)
{
    char path[PATH_MAX];
    struct stat st;
    struct dirent **names = NULL;

    snprintf(path, sizeof path, "%s/%s", TY_DEPLOY_DIR, rel);
    if (stat(path, &st) != 0)
        fail_msg("%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (ends_with(rel, ".yaml") || ends_with(rel, ".yml"))
            json_array_append_new(out, json_string(rel));
        return;
    }
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0)
        fail_msg("%s: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) {
        char child[PATH_MAX];
        if (names[i]->d_name[0] != '.') {
            snprintf(child, sizeof child, "%s/%s", rel, names[i]->d_name);
            collect_yaml(child, out);
        }
        free(names[i]);
    }
    free(names);
}

static json_t *load_yaml_docs(const char *rel)
{
    char path[PATH_MAX], err[512];
    size_t len = 0;
    json_t *docs = json_array();

    snprintf(path, sizeof path, "%s/%s", TY_DEPLOY_DIR, rel);
    char *text = slurp(path, &len);
    if (!text)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    if (yaml_documents(text, len, docs, err, sizeof err) != 0)
        fail_msg("%s: %s", rel, err);
    free(text);
    return docs;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    json_t *files = json_array();
    const char *key;
    json_t *def;
    size_t i;

    if (!f)
        return -1;
    f->swagger = json_load_file(TY_K8S_OPENAPI_DIR "/swagger.json", 0, NULL);
    if (!f->swagger)
        fail_msg("cannot read %s/swagger.json", TY_K8S_OPENAPI_DIR);
    /* Every top-level kind names its group, version and kind; index them. */
    f->gvk = json_object();
    json_object_foreach(json_object_get(f->swagger, "definitions"), key, def) {
        json_t *g;
        json_array_foreach(json_object_get(def, "x-kubernetes-group-version-kind"), i, g) {
            const char *group = json_string_value(json_object_get(g, "group"));
            const char *version = json_string_value(json_object_get(g, "version"));
            const char *kind = json_string_value(json_object_get(g, "kind"));
            char gvk[256];
            if (!group || !version || !kind)
                continue;
            snprintf(gvk, sizeof gvk, "%s%s%s/%s", group, *group ? "/" : "", version, kind);
            if (!json_object_get(f->gvk, gvk))
                json_object_set_new(f->gvk, gvk, json_string(key));
        }
    }

    collect_yaml("kustomization.yaml", files);
    collect_yaml("kustomize", files);
    collect_yaml("jobs", files);
    f->docs = json_array();
    json_t *file;
    json_array_foreach(files, i, file) {
        json_t *docs = load_yaml_docs(json_string_value(file)), *obj;
        size_t j;
        json_array_foreach(docs, j, obj) {
            json_array_append_new(f->docs, json_pack("{s:O, s:i, s:O}", "file", file, "doc",
                                                     (int)j, "obj", obj));
        }
        json_decref(docs);
    }
    json_decref(files);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;

    json_decref(f->swagger);
    json_decref(f->gvk);
    json_decref(f->docs);
    free(f);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Looking things up                                                                          */

static const char *str_at(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* A member by a dotted path ("spec.template.spec"); NULL when absent. */
static json_t *path_get(const json_t *obj, const char *dotted)
{
    char buf[256], *save = NULL;
    json_t *cur = (json_t *)obj;

    snprintf(buf, sizeof buf, "%s", dotted);
    for (char *k = strtok_r(buf, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
        cur = json_object_get(cur, k);
    return cur;
}

/* The first manifest object of this kind (and name, unless NULL); fails the test if none. */
static json_t *find_obj(const fixture *f, const char *kind, const char *name)
{
    size_t i;
    json_t *d;

    json_array_foreach(f->docs, i, d) {
        json_t *obj = json_object_get(d, "obj");
        const char *k = str_at(obj, "kind");
        const char *n = str_at(json_object_get(obj, "metadata"), "name");
        if (k && strcmp(k, kind) == 0 && (!name || (n && strcmp(n, name) == 0)))
            return obj;
    }
    fail_msg("no %s%s%s in deploy/", kind, name ? " named " : "", name ? name : "");
    return NULL;
}

/* The element of an array of objects whose `key` is `value`; NULL when none. */
static json_t *array_find(const json_t *arr, const char *key, const char *value)
{
    size_t i;
    json_t *el;

    json_array_foreach(arr, i, el) {
        const char *v = str_at(el, key);
        if (v && strcmp(v, value) == 0)
            return el;
    }
    return NULL;
}

static json_t *server_container(const fixture *f)
{
    json_t *dep = find_obj(f, "Deployment", "trainyard");
    json_t *c = array_find(path_get(dep, "spec.template.spec.containers"), "name", "server");
    assert_non_null(c);
    return c;
}

/* The value of a flag in an argument list: "--db PATH" or "--db=PATH"; NULL when absent. */
static const char *flag_value(const json_t *args, const char *flag)
{
    size_t i, n = strlen(flag);

    for (i = 0; i < json_array_size(args); i++) {
        const char *a = json_string_value(json_array_get(args, i));
        if (!a || strncmp(a, flag, n) != 0)
            continue;
        if (a[n] == '=')
            return a + n + 1;
        if (a[n] == '\0')
            return json_string_value(json_array_get(args, i + 1));
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Every object against its schema                                                            */

/*
 * The part of kustomize's Kustomization these files use, as a schema, so that a misspelt key
 * fails here rather than being ignored by a kustomize that does not know it.
 */
static const char kustomization_schema[] =
    "{\"type\": \"object\", \"required\": [\"apiVersion\", \"kind\"],"
    " \"properties\": {"
    "  \"apiVersion\": {\"enum\": [\"kustomize.config.k8s.io/v1beta1\"]},"
    "  \"kind\": {\"enum\": [\"Kustomization\"]},"
    "  \"namespace\": {\"type\": \"string\"},"
    "  \"resources\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"minLength\": 1}},"
    "  \"labels\": {\"type\": \"array\", \"items\": {\"type\": \"object\","
    "    \"required\": [\"pairs\"],"
    "    \"properties\": {\"pairs\": {\"type\": \"object\","
    "                                  \"additionalProperties\": {\"type\": \"string\"}},"
    "                    \"includeSelectors\": {\"type\": \"boolean\"},"
    "                    \"includeTemplates\": {\"type\": \"boolean\"}}}},"
    "  \"images\": {\"type\": \"array\", \"items\": {\"type\": \"object\","
    "    \"required\": [\"name\"],"
    "    \"properties\": {\"name\": {\"type\": \"string\"}, \"newName\": {\"type\": \"string\"},"
    "                    \"newTag\": {\"type\": \"string\"}, \"digest\": {\"type\": \"string\"}}}},"
    "  \"configMapGenerator\": {\"type\": \"array\", \"items\": {\"type\": \"object\","
    "    \"required\": [\"name\", \"files\"],"
    "    \"properties\": {\"name\": {\"type\": \"string\"}, \"namespace\": {\"type\": \"string\"},"
    "                    \"files\": {\"type\": \"array\", \"minItems\": 1,"
    "                              \"items\": {\"type\": \"string\"}}}}}"
    " }}";

/* Kinds that have no namespace. */
static int cluster_scoped(const char *kind)
{
    static const char *const kinds[] = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                                        "StorageClass"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kind, kinds[i]) == 0)
            return 1;
    return 0;
}

static void test_every_object_matches_its_schema(void **state)
{
    fixture *f = *state;
    json_error_t jerr;
    json_t *kschema = json_loads(kustomization_schema, 0, &jerr);
    json_t *seen = json_object(), *d;
    char err[512];
    size_t i;
    /* What the install needs; a file dropped by mistake shows here. */
    static const char *const required[] = {
        "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
        "ClusterRoleBinding", "PersistentVolumeClaim", "Deployment", "Service", "StorageClass",
        "Job", "Kustomization"};

    if (!kschema)
        fail_msg("the Kustomization schema: %s", jerr.text);
    assert_true(json_array_size(f->docs) > 0);
    json_array_foreach(f->docs, i, d) {
        const char *file = str_at(d, "file");
        int n = (int)json_integer_value(json_object_get(d, "doc"));
        json_t *obj = json_object_get(d, "obj");
        const char *api = str_at(obj, "apiVersion"), *kind = str_at(obj, "kind");
        const char *ns = str_at(json_object_get(obj, "metadata"), "namespace");
        char gvk[256], ref[300];

        if (!api || !kind)
            fail_msg("%s, document %d: no apiVersion or kind", file, n + 1);
        json_object_set_new(seen, kind, json_true());
        if (starts_with(api, "kustomize.config.k8s.io/")) {
            if (oas_validate(NULL, kschema, obj, OAS_STRICT, err, sizeof err) != 0)
                fail_msg("%s: %s", file, err);
            continue;
        }
        snprintf(gvk, sizeof gvk, "%s/%s", api, kind);
        const char *def = json_string_value(json_object_get(f->gvk, gvk));
        if (!def)
            fail_msg("%s, document %d: Kubernetes 1.26 has no %s", file, n + 1, gvk);
        snprintf(ref, sizeof ref, "#/definitions/%s", def);
        const json_t *schema = oas_resolve_ref(f->swagger, ref, err, sizeof err);
        assert_non_null(schema);
        if (oas_validate(f->swagger, schema, obj, OAS_STRICT, err, sizeof err) != 0)
            fail_msg("%s, document %d (%s): %s", file, n + 1, kind, err);
        /* Everything namespaced lives in the server's (and its jobs') namespace. */
        if (cluster_scoped(kind)) {
            if (ns)
                fail_msg("%s: the %s is cluster-scoped but names namespace %s", file, kind, ns);
        } else if (!ns || strcmp(ns, NS) != 0) {
            fail_msg("%s: the %s is in namespace %s, not " NS, file, kind, ns ? ns : "(none)");
        }
    }
    for (i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!json_object_get(seen, required[i]))
            fail_msg("deploy/ has no %s", required[i]);
    json_decref(seen);
    json_decref(kschema);
}

/* The validator is strict: a field Kubernetes does not have fails, with its path. */
static void test_unknown_fields_are_errors(void **state)
{
    fixture *f = *state;
    json_t *dep = json_deep_copy(find_obj(f, "Deployment", "trainyard"));
    const json_t *schema;
    char err[512];

    schema = oas_resolve_ref(f->swagger, "#/definitions/io.k8s.api.apps.v1.Deployment", err,
                             sizeof err);
    assert_non_null(schema);
    assert_int_equal(oas_validate(f->swagger, schema, dep, OAS_STRICT, err, sizeof err), 0);
    json_object_set_new(path_get(dep, "spec.template.spec"), "restartPolicyy",
                        json_string("Always"));
    assert_int_equal(oas_validate(f->swagger, schema, dep, OAS_STRICT, err, sizeof err), -1);
    assert_non_null(strstr(err, "restartPolicyy"));
    json_decref(dep);
}

/* ------------------------------------------------------------------------------------------ */
/* Kustomizations                                                                             */

static int is_listed(const json_t *kust, const char *name)
{
    size_t i, j;
    json_t *v, *gen, *file;

    json_array_foreach(json_object_get(kust, "resources"), i, v)
        if (strcmp(json_string_value(v), name) == 0)
            return 1;
    json_array_foreach(json_object_get(kust, "configMapGenerator"), i, gen) {
        json_array_foreach(json_object_get(gen, "files"), j, file) {
            const char *s = json_string_value(file), *eq = strchr(s, '=');
            if (strcmp(eq ? eq + 1 : s, name) == 0)
                return 1;
        }
    }
    return 0;
}

static void test_kustomizations_name_existing_files(void **state)
{
    fixture *f = *state;
    json_t *d;
    size_t i, j, nkust = 0;

    json_array_foreach(f->docs, i, d) {
        json_t *kust = json_object_get(d, "obj"), *v, *gen, *file;
        const char *rel = str_at(d, "file");
        char dir[PATH_MAX], path[PATH_MAX * 2];
        struct stat st;
        struct dirent **names = NULL;

        if (strcmp(str_at(kust, "kind"), "Kustomization") != 0)
            continue;
        nkust++;
        snprintf(dir, sizeof dir, "%s/%s", TY_DEPLOY_DIR, rel);
        *strrchr(dir, '/') = '\0';
        json_array_foreach(json_object_get(kust, "resources"), j, v) {
            snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
            if (stat(path, &st) != 0)
                fail_msg("%s lists %s, which does not exist", rel, json_string_value(v));
            if (S_ISDIR(st.st_mode)) {
                snprintf(path, sizeof path, "%s/%s/kustomization.yaml", dir,
                         json_string_value(v));
                if (stat(path, &st) != 0)
                    fail_msg("%s lists %s, which has no kustomization.yaml", rel,
                             json_string_value(v));
            }
        }
        json_array_foreach(json_object_get(kust, "configMapGenerator"), j, gen) {
            size_t k;
            json_array_foreach(json_object_get(gen, "files"), k, file) {
                const char *s = json_string_value(file), *eq = strchr(s, '=');
                /* kustomize refuses files outside the kustomization's directory. */
                if (strstr(s, "..") || (eq ? eq[1] : s[0]) == '/')
                    fail_msg("%s: %s is not in or below its directory", rel, s);
                snprintf(path, sizeof path, "%s/%s", dir, eq ? eq + 1 : s);
                if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                    fail_msg("%s generates a ConfigMap from %s, which does not exist", rel,
                             eq ? eq + 1 : s);
            }
        }
        /* A manifest beside a kustomization that it does not list is never applied. */
        int n = scandir(dir, &names, NULL, alphasort);
        assert_true(n >= 0);
        for (int k = 0; k < n; k++) {
            const char *name = names[k]->d_name;
            if ((ends_with(name, ".yaml") || ends_with(name, ".yml")) &&
                strcmp(name, "kustomization.yaml") != 0 && !is_listed(kust, name))
                fail_msg("%s does not list %s, beside it", rel, name);
            free(names[k]);
        }
        free(names);
    }
    assert_int_equal(nkust, 3); /* deploy/, the base and the EKS overlay */
}

/* ------------------------------------------------------------------------------------------ */
/* RBAC                                                                                       */

static void test_rbac_grants_exactly_what_the_backend_needs(void **state)
{
    fixture *f = *state;
    json_t *grants = json_object(), *d; /* "kind|group|resource" -> {verb: true} */
    size_t i;

    json_array_foreach(f->docs, i, d) {
        json_t *obj = json_object_get(d, "obj"), *rule;
        const char *kind = str_at(obj, "kind");
        size_t r;

        if (strcmp(kind, "Role") != 0 && strcmp(kind, "ClusterRole") != 0)
            continue;
        json_array_foreach(json_object_get(obj, "rules"), r, rule) {
            json_t *g, *res, *verb;
            size_t a, b, c;
            if (json_object_get(rule, "nonResourceURLs") || json_object_get(rule, "resourceNames"))
                fail_msg("%s: a rule with nonResourceURLs or resourceNames", str_at(d, "file"));
            json_array_foreach(json_object_get(rule, "apiGroups"), a, g) {
                json_array_foreach(json_object_get(rule, "resources"), b, res) {
                    json_array_foreach(json_object_get(rule, "verbs"), c, verb) {
                        char key[256];
                        if (strchr(json_string_value(g), '*') ||
                            strchr(json_string_value(res), '*') ||
                            strchr(json_string_value(verb), '*'))
                            fail_msg("%s: a wildcard in a %s", str_at(d, "file"), kind);
                        snprintf(key, sizeof key, "%s|%s|%s", kind, json_string_value(g),
                                 json_string_value(res));
                        if (!json_object_get(grants, key))
                            json_object_set_new(grants, key, json_object());
                        json_object_set_new(json_object_get(grants, key),
                                            json_string_value(verb), json_true());
                    }
                }
            }
        }
    }
    for (i = 0; i < sizeof rbac_granted / sizeof rbac_granted[0]; i++) {
        const rbac_grant *g = &rbac_granted[i];
        char key[256], verbs[128], *save = NULL;
        size_t nverbs = 0;
        snprintf(key, sizeof key, "%s|%s|%s", g->kind, g->group, g->resource);
        json_t *have = json_object_get(grants, key);
        if (!have)
            fail_msg("the %s grants nothing on %s", g->kind, key);
        snprintf(verbs, sizeof verbs, "%s", g->verbs);
        for (char *v = strtok_r(verbs, " ", &save); v; v = strtok_r(NULL, " ", &save), nverbs++)
            if (!json_object_get(have, v))
                fail_msg("the %s does not grant %s on %s", g->kind, v, key);
        if (json_object_size(have) != nverbs)
            fail_msg("the %s grants more than \"%s\" on %s", g->kind, g->verbs, key);
        json_object_del(grants, key);
    }
    if (json_object_size(grants) != 0) {
        char *extra = json_dumps(grants, JSON_COMPACT);
        fail_msg("grants beyond the backend's needs: %s", extra);
    }
    json_decref(grants);

    /* Bound to the account the server runs as, the Role in the jobs' namespace. */
    json_t *rb = find_obj(f, "RoleBinding", "trainyard");
    json_t *crb = find_obj(f, "ClusterRoleBinding", "trainyard-nodes");
    json_t *role = find_obj(f, "Role", str_at(json_object_get(rb, "roleRef"), "name"));
    find_obj(f, "ClusterRole", str_at(json_object_get(crb, "roleRef"), "name"));
    assert_non_null(json_string_value(path_get(role, "metadata.namespace")));
    assert_string_equal(json_string_value(path_get(role, "metadata.namespace")), NS);
    const char *sa = json_string_value(
        path_get(find_obj(f, "Deployment", "trainyard"), "spec.template.spec.serviceAccountName"));
    assert_non_null(sa);
    find_obj(f, "ServiceAccount", sa);
    json_t *bindings[] = {rb, crb};
    for (i = 0; i < 2; i++) {
        json_t *subj = json_array_get(json_object_get(bindings[i], "subjects"), 0);
        assert_int_equal(json_array_size(json_object_get(bindings[i], "subjects")), 1);
        assert_string_equal(str_at(subj, "kind"), "ServiceAccount");
        assert_string_equal(str_at(subj, "name"), sa);
        assert_string_equal(str_at(subj, "namespace"), NS);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The Deployment                                                                             */

static void test_deployment_runs_one_locked_down_server(void **state)
{
    fixture *f = *state;
    json_t *dep = find_obj(f, "Deployment", "trainyard");
    json_t *pod = path_get(dep, "spec.template.spec");
    json_t *c = server_container(f);
    json_t *sc = json_object_get(c, "securityContext");
    json_t *caps = path_get(sc, "capabilities.drop");

    /* One writer of the SQLite file: never two pods at once, not even during an update. */
    assert_int_equal(json_integer_value(path_get(dep, "spec.replicas")), 1);
    assert_string_equal(json_string_value(path_get(dep, "spec.strategy.type")), "Recreate");
    assert_string_equal(json_string_value(path_get(c, "readinessProbe.httpGet.path")),
                        "/readyz");
    assert_string_equal(json_string_value(path_get(c, "livenessProbe.httpGet.path")),
                        "/healthz");
    assert_true(json_is_true(path_get(pod, "securityContext.runAsNonRoot")));
    assert_true(json_integer_value(path_get(pod, "securityContext.runAsUser")) > 0);
    assert_true(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
    assert_true(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
    assert_int_equal(json_array_size(caps), 1);
    assert_string_equal(json_string_value(json_array_get(caps, 0)), "ALL");

    /* The admin token comes from a Secret, never from the manifest. */
    json_t *env = array_find(json_object_get(c, "env"), "name", "TRAINYARD_ADMIN_TOKEN");
    assert_non_null(env);
    assert_null(json_object_get(env, "value"));
    assert_non_null(path_get(env, "valueFrom.secretKeyRef.name"));

    /* The Service reaches the port the server listens on, and selects this pod. */
    json_t *svc = find_obj(f, "Service", "trainyard");
    json_t *sport = json_array_get(path_get(svc, "spec.ports"), 0);
    json_t *cport = json_array_get(json_object_get(c, "ports"), 0);
    const char *listen = flag_value(json_object_get(c, "args"), "--listen");
    char want[32];
    assert_string_equal(json_string_value(path_get(svc, "spec.type")), "ClusterIP");
    assert_int_equal(json_integer_value(json_object_get(sport, "port")), 8080);
    assert_string_equal(str_at(sport, "targetPort"), str_at(cport, "name"));
    assert_string_equal(json_string_value(path_get(c, "readinessProbe.httpGet.port")),
                        str_at(cport, "name"));
    assert_non_null(listen);
    /* Reachable from the kubelet's probes and the Service, so not loopback. */
    snprintf(want, sizeof want, "0.0.0.0:%lld",
             (long long)json_integer_value(json_object_get(cport, "containerPort")));
    assert_string_equal(listen, want);
    const char *key;
    json_t *v;
    json_object_foreach(path_get(svc, "spec.selector"), key, v)
        assert_true(json_equal(v, json_object_get(path_get(dep, "spec.template.metadata.labels"),
                                                  key)));
}

/* The mount of the volume whose source is `source` ("persistentVolumeClaim", "configMap"). */
static json_t *mount_of(const fixture *f, const char *source, json_t **volume)
{
    json_t *pod = path_get(find_obj(f, "Deployment", "trainyard"), "spec.template.spec");
    json_t *vol, *m;
    size_t i;

    json_array_foreach(json_object_get(pod, "volumes"), i, vol) {
        if (!json_object_get(vol, source))
            continue;
        m = array_find(json_object_get(server_container(f), "volumeMounts"), "name",
                       str_at(vol, "name"));
        assert_non_null(m);
        *volume = vol;
        return m;
    }
    fail_msg("the Deployment has no %s volume", source);
    return NULL;
}

/* --db, --cluster-profile and the image agree with the volumes and generators that feed them. */
static void test_deployment_flags_agree_with_its_volumes(void **state)
{
    fixture *f = *state;
    json_t *args = json_object_get(server_container(f), "args"), *vol, *m;
    const char *db = flag_value(args, "--db");
    const char *profile = flag_value(args, "--cluster-profile");
    char path[PATH_MAX];

    /* The database (and the admin token and logs beside it) on the claim. */
    assert_non_null(db);
    m = mount_of(f, "persistentVolumeClaim", &vol);
    snprintf(path, sizeof path, "%s/", str_at(m, "mountPath"));
    assert_true(starts_with(db, path));
    assert_null(strchr(db + strlen(path), '/'));
    json_t *pvc = find_obj(f, "PersistentVolumeClaim",
                           json_string_value(path_get(vol, "persistentVolumeClaim.claimName")));
    assert_string_equal(json_string_value(path_get(pvc, "spec.storageClassName")), "gp3");
    find_obj(f, "StorageClass", "gp3");

    /* The profile, from the ConfigMap deploy/kustomization.yaml generates. */
    assert_non_null(profile);
    m = mount_of(f, "configMap", &vol);
    json_t *gen = NULL, *d;
    size_t i;
    json_array_foreach(f->docs, i, d) {
        json_t *gens = json_object_get(json_object_get(d, "obj"), "configMapGenerator");
        if (!gen)
            gen = array_find(gens, "name", json_string_value(path_get(vol, "configMap.name")));
    }
    if (!gen)
        fail_msg("no Kustomization generates the ConfigMap the Deployment mounts");
    const char *file = json_string_value(json_array_get(json_object_get(gen, "files"), 0));
    const char *eq = strchr(file, '=');
    assert_non_null(eq);
    snprintf(path, sizeof path, "%s/%.*s", str_at(m, "mountPath"), (int)(eq - file), file);
    assert_string_equal(profile, path);
    assert_string_equal(str_at(gen, "namespace"), NS);

    /* The EFS claims jobs name in their volumes. */
    assert_string_equal(json_string_value(path_get(find_obj(f, "PersistentVolumeClaim",
                                                            "efs-data"),
                                                   "spec.storageClassName")),
                        "efs");
    find_obj(f, "PersistentVolumeClaim", "efs-out");
    assert_string_equal(str_at(find_obj(f, "StorageClass", "efs"), "provisioner"),
                        "efs.csi.aws.com");
}

/* The flags `trainyard serve --help` of this build lists ("--listen", ...), as an object. */
static json_t *serve_flags(void)
{
    FILE *p = popen("'" TY_TRAINYARD_BIN "' serve --help", "r");
    json_t *flags = json_object();
    char line[1024];

    if (!p)
        fail_msg("cannot run %s: %s", TY_TRAINYARD_BIN, strerror(errno));
    while (fgets(line, sizeof line, p)) {
        for (char *s = strstr(line, "--"); s; s = strstr(s + 2, "--")) {
            size_t n = 2;
            if (s != line && s[-1] != ' ' && s[-1] != '\t')
                continue;
            while (s[n] == '-' || (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9'))
                n++;
            if (n > 2) {
                char flag[64];
                snprintf(flag, sizeof flag, "%.*s", (int)n, s);
                json_object_set_new(flags, flag, json_true());
            }
        }
    }
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s serve --help failed (status %d)", TY_TRAINYARD_BIN, status);
    assert_non_null(json_object_get(flags, "--listen"));
    return flags;
}

/* The flags of the Kubernetes backend (issue 9), built separately from these manifests. */
static int kube_flag(const char *flag)
{
    return strcmp(flag, "--kube") == 0 || strcmp(flag, "--kubeconfig") == 0 ||
           strcmp(flag, "--cluster-profile") == 0;
}

/* Checks the Deployment's flags (kube: the backend's, else all others) against the help. */
static void check_args(const fixture *f, int kube)
{
    json_t *flags = serve_flags(), *a;
    json_t *args = json_object_get(server_container(f), "args");
    size_t i, checked = 0;

    if (kube && !json_object_get(flags, "--kube")) {
        json_decref(flags);
        print_message("this trainyard has no Kubernetes backend yet (no --kube in serve --help)\n");
        skip();
    }
    json_array_foreach(args, i, a) {
        char flag[64];
        const char *s = json_string_value(a);
        assert_non_null(s);
        if (!starts_with(s, "--"))
            continue; /* a value */
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(s, "="), s);
        if (kube_flag(flag) != kube)
            continue;
        if (!json_object_get(flags, flag))
            fail_msg("the Deployment passes %s, which `trainyard serve --help` does not list",
                     flag);
        checked++;
    }
    assert_true(checked > 0);
    json_decref(flags);
}

static void test_deployment_args_are_serve_flags(void **state)
{
    check_args(*state, 0);
}

static void test_deployment_kube_args_are_serve_flags(void **state)
{
    check_args(*state, 1);
}

/* A Dockerfile's instruction line (e.g. "USER "); fails when absent. Returns new memory. */
static char *dockerfile_line(const char *name, const char *instruction)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/docker/%s", TY_DEPLOY_DIR, name);
    char *text = slurp(path, NULL), *found = NULL;
    if (!text)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (starts_with(line, instruction)) {
            found = strndup(line, strcspn(line, "\n"));
            break;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (!found)
        fail_msg("%s has no %s", name, instruction);
    return found;
}

/* The images run as the users the manifests expect, with `trainyard serve` as entrypoint. */
static void test_images_agree_with_the_manifests(void **state)
{
    fixture *f = *state;
    json_t *pod = path_get(find_obj(f, "Deployment", "trainyard"), "spec.template.spec");
    json_t *args = json_object_get(server_container(f), "args");
    char want[64];

    char *user = dockerfile_line("server.Dockerfile", "USER ");
    snprintf(want, sizeof want, "USER %lld:%lld",
             (long long)json_integer_value(path_get(pod, "securityContext.runAsUser")),
             (long long)json_integer_value(path_get(pod, "securityContext.runAsGroup")));
    assert_string_equal(user, want);
    free(user);
    char *entry = dockerfile_line("server.Dockerfile", "ENTRYPOINT ");
    assert_non_null(strstr(entry, "trainyard\", \"serve\"]"));
    free(entry);
    /* The image declares the directory of --db a volume, and the claim is mounted there. */
    char *volume = dockerfile_line("server.Dockerfile", "VOLUME ");
    const char *db = flag_value(args, "--db");
    assert_non_null(db);
    snprintf(want, sizeof want, "VOLUME [\"%.*s\"]", (int)(strrchr(db, '/') - db), db);
    assert_string_equal(volume, want);
    free(volume);

    /* EFS access points write as the worker image's user. */
    json_t *efs = json_object_get(find_obj(f, "StorageClass", "efs"), "parameters");
    char *wuser = dockerfile_line("worker.Dockerfile", "USER ");
    snprintf(want, sizeof want, "USER %s:%s", str_at(efs, "uid"), str_at(efs, "gid"));
    assert_string_equal(wuser, want);
    free(wuser);
    char *cuda = dockerfile_line("worker.Dockerfile", "ARG CUDA_VERSION=");
    assert_true(starts_with(cuda, "ARG CUDA_VERSION=13.0."));
    free(cuda);
}

/* ------------------------------------------------------------------------------------------ */
/* The eksctl cluster                                                                         */

static const char *const zones[] = {"us-west-2a", "us-west-2b", "us-west-2c"};

static const struct {
    const char *family, *instance, *product, *gpus;
} gpu_groups[] = {
    {"p4d", "p4d.24xlarge", "NVIDIA-A100-SXM4-40GB", "8"},
    {"p5", "p5.48xlarge", "NVIDIA-H100-80GB-HBM3", "8"},
    {"p3", "p3.16xlarge", "Tesla-V100-SXM2-16GB", "8"},
    {"g5", "g5.12xlarge", "NVIDIA-A10G", "4"},
};

#define CA_TEMPLATE "k8s.io/cluster-autoscaler/node-template/"

/* Fails unless group g has tag = want. */
static void check_group_tag(const json_t *g, const char *tag, const char *want)
{
    const char *have = str_at(json_object_get(g, "tags"), tag);
    if (!have || strcmp(have, want) != 0)
        fail_msg("%s: tag %s is %s, not %s", str_at(g, "name"), tag, have ? have : "absent",
                 want);
}

/* Checks one group's zone, type, sizes, labels and scale-from-zero tags. */
static void check_group(const json_t *g, const char *name, const char *zone, const char *instance,
                        int spot, const char *product, const char *gpus)
{
    json_t *labels = json_object_get(g, "labels"), *tags = json_object_get(g, "tags");
    json_t *az = json_object_get(g, "availabilityZones");
    const char *type = str_at(g, "instanceType");
    const char *cap = spot ? "spot" : "on-demand";

    if (!type)
        type = json_string_value(json_array_get(json_object_get(g, "instanceTypes"), 0));
    if (!type || strcmp(type, instance) != 0)
        fail_msg("%s: instance type %s, not %s", name, type ? type : "(none)", instance);
    if (json_array_size(az) != 1 || strcmp(json_string_value(json_array_get(az, 0)), zone) != 0)
        fail_msg("%s: not in %s alone", name, zone);
    if (json_is_true(json_object_get(g, "spot")) != spot)
        fail_msg("%s: spot should be %s", name, spot ? "true" : "false");
    if (json_integer_value(json_object_get(g, "maxSize")) < 1)
        fail_msg("%s: maxSize below 1", name);
    if (!str_at(labels, "karpenter.sh/capacity-type") ||
        strcmp(str_at(labels, "karpenter.sh/capacity-type"), cap) != 0)
        fail_msg("%s: label karpenter.sh/capacity-type is not %s", name, cap);
    if (!json_is_true(json_object_get(g, "propagateASGTags")))
        fail_msg("%s: propagateASGTags is not true", name);
    if (!str_at(tags, "k8s.io/cluster-autoscaler/enabled") ||
        strcmp(str_at(tags, "k8s.io/cluster-autoscaler/enabled"), "true") != 0)
        fail_msg("%s: not discoverable by cluster-autoscaler", name);

    /* What the autoscaler must know of a node that does not exist yet. */
    const struct {
        const char *tag, *want;
    } template[] = {
        {CA_TEMPLATE "label/topology.kubernetes.io/zone", zone},
        {CA_TEMPLATE "label/node.kubernetes.io/instance-type", instance},
        {CA_TEMPLATE "label/eks.amazonaws.com/capacityType", spot ? "SPOT" : "ON_DEMAND"},
        {CA_TEMPLATE "label/karpenter.sh/capacity-type", cap},
        {CA_TEMPLATE "label/eks.amazonaws.com/nodegroup", name},
        {CA_TEMPLATE "label/nvidia.com/gpu.product", product},
        {CA_TEMPLATE "taint/nvidia.com/gpu", product ? "present:NoSchedule" : NULL},
        {CA_TEMPLATE "resources/nvidia.com/gpu", gpus},
    };
    for (size_t i = 0; i < sizeof template / sizeof template[0]; i++) {
        const char *have = str_at(tags, template[i].tag);
        if (!template[i].want && have)
            fail_msg("%s: tag %s on a CPU group", name, template[i].tag);
        if (template[i].want && (!have || strcmp(have, template[i].want) != 0))
            fail_msg("%s: tag %s is %s, not %s", name, template[i].tag, have ? have : "absent",
                     template[i].want);
    }

    json_t *taints = json_object_get(g, "taints");
    if (!product) {
        if (json_array_size(taints) != 0 || json_object_get(labels, "nvidia.com/gpu.product"))
            fail_msg("%s: a CPU group with GPU labels or taints", name);
        return;
    }
    if (!str_at(labels, "nvidia.com/gpu.product") ||
        strcmp(str_at(labels, "nvidia.com/gpu.product"), product) != 0)
        fail_msg("%s: label nvidia.com/gpu.product is not %s", name, product);
    if (json_integer_value(json_object_get(g, "minSize")) != 0)
        fail_msg("%s: a GPU group must scale from zero", name);
    json_t *want = json_pack("{s:s, s:s, s:s}", "key", "nvidia.com/gpu", "value", "present",
                             "effect", "NoSchedule");
    int same = json_array_size(taints) == 1 && json_equal(json_array_get(taints, 0), want);
    json_decref(want);
    if (!same)
        fail_msg("%s: the taint is not nvidia.com/gpu=present:NoSchedule alone", name);
}

static void test_eksctl_cluster_has_every_node_group(void **state)
{
    json_t *docs = load_yaml_docs("eksctl/cluster.yaml");
    json_t *cfg = json_array_get(docs, 0), *groups, *g, *zs;
    size_t i, expected = 0;

    (void)state;
    assert_int_equal(json_array_size(docs), 1);
    assert_string_equal(str_at(cfg, "apiVersion"), "eksctl.io/v1alpha5");
    assert_string_equal(str_at(cfg, "kind"), "ClusterConfig");
    assert_string_equal(json_string_value(path_get(cfg, "metadata.region")), "us-west-2");
    assert_true(json_is_true(path_get(cfg, "iam.withOIDC")));
    zs = json_object_get(cfg, "availabilityZones");
    assert_int_equal(json_array_size(zs), 3);
    for (i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_array_get(zs, i)), zones[i]);
    assert_non_null(array_find(json_object_get(cfg, "addons"), "name", "aws-efs-csi-driver"));
    assert_non_null(array_find(json_object_get(cfg, "addons"), "name", "aws-ebs-csi-driver"));

    groups = json_object_get(cfg, "managedNodeGroups");
    json_t *names = json_object();
    json_array_foreach(groups, i, g) {
        if (json_object_get(names, str_at(g, "name")))
            fail_msg("two node groups named %s", str_at(g, "name"));
        json_object_set_new(names, str_at(g, "name"), json_true());
    }
    json_decref(names);
    for (size_t z = 0; z < 3; z++) {
        const char *zone = zones[z], *letter = zone + strlen("us-west-");
        char name[64];

        snprintf(name, sizeof name, "cpu-od-%s", letter);
        if (!(g = array_find(groups, "name", name)))
            fail_msg("no node group %s", name);
        check_group(g, name, zone, "m5.2xlarge", 0, NULL, NULL);
        expected++;
        for (i = 0; i < sizeof gpu_groups / sizeof gpu_groups[0]; i++) {
            for (int spot = 0; spot < 2; spot++) {
                snprintf(name, sizeof name, "%s-%s-%s", gpu_groups[i].family,
                         spot ? "spot" : "od", letter);
                if (!(g = array_find(groups, "name", name)))
                    fail_msg("no node group %s", name);
                check_group(g, name, zone, gpu_groups[i].instance, spot, gpu_groups[i].product,
                            gpu_groups[i].gpus);
                expected++;
            }
        }
    }
    /* No group beyond those the cluster profile describes. */
    assert_int_equal(json_array_size(groups), expected);
    json_decref(docs);
}

/* A node of group g will carry label key=value: the autoscaler's template says so. */
static void check_node_label(const json_t *g, const char *key, const char *value)
{
    char tag[256];
    const char *have;

    snprintf(tag, sizeof tag, CA_TEMPLATE "label/%s", key);
    have = str_at(json_object_get(g, "tags"), tag);
    if (!have || strcmp(have, value) != 0)
        fail_msg("the profile selects %s=%s, but %s's nodes have %s", key, value,
                 str_at(g, "name"), have ? have : "no such label");
}

/* deploy/cluster-profile.example.yaml describes the cluster eksctl creates. */
static void test_cluster_profile_matches_the_cluster(void **state)
{
    fixture *f = *state;
    json_t *pdocs = load_yaml_docs("cluster-profile.example.yaml");
    json_t *edocs = load_yaml_docs("eksctl/cluster.yaml");
    json_t *profile = json_array_get(pdocs, 0), *cfg = json_array_get(edocs, 0);
    json_t *groups = json_object_get(cfg, "managedNodeGroups"), *ng, *g = NULL;
    size_t i, ngpu = 0;
    char want[256];

    assert_string_equal(str_at(profile, "namespace"), NS);
    if (!json_equal(json_object_get(profile, "zones"), json_object_get(cfg, "availabilityZones")))
        fail_msg("the profile's zones are not the cluster's");
    /* Ranks reach the server through the Service. */
    if (str_at(profile, "server_url")) {
        json_t *svc = find_obj(f, "Service", "trainyard");
        snprintf(want, sizeof want, "http://%s.%s.svc.cluster.local:%lld",
                 json_string_value(path_get(svc, "metadata.name")),
                 json_string_value(path_get(svc, "metadata.namespace")),
                 (long long)json_integer_value(
                     json_object_get(json_array_get(path_get(svc, "spec.ports"), 0), "port")));
        assert_string_equal(str_at(profile, "server_url"), want);
    }

    json_array_foreach(json_object_get(profile, "node_groups"), i, ng) {
        const char *name = str_at(ng, "name"), *type = str_at(ng, "gpu_type");
        const char *cap = str_at(ng, "capacity"), *key, *value;
        json_t *gt = json_object_get(json_object_get(profile, "gpu_types"), type);
        json_t *ct = json_object_get(json_object_get(profile, "capacity_types"), cap);
        json_t *v, *taint;
        size_t t;

        if (!name || !(g = array_find(groups, "name", name)))
            fail_msg("the profile's node group %s is not in eksctl/cluster.yaml",
                     name ? name : "(no name)");
        if (!gt || !ct)
            fail_msg("%s: GPU type %s or capacity type %s is not in the profile", name,
                     type ? type : "(none)", cap ? cap : "(none)");
        if (!json_equal(json_object_get(ng, "zone"),
                        json_array_get(json_object_get(g, "availabilityZones"), 0)))
            fail_msg("%s: the profile's zone is not the group's", name);
        if (json_is_true(json_object_get(g, "spot")) != (strcmp(cap, "spot") == 0))
            fail_msg("%s: the profile says %s", name, cap);
        if (!json_equal(json_object_get(ng, "max_size"), json_object_get(g, "maxSize")))
            fail_msg("%s: the profile's max_size is not the group's maxSize", name);
        snprintf(want, sizeof want, "%lld",
                 (long long)json_integer_value(json_object_get(ng, "gpus_per_node")));
        check_group_tag(g, CA_TEMPLATE "resources/nvidia.com/gpu", want);
        json_object_foreach(json_object_get(gt, "node_labels"), key, v)
            check_node_label(g, key, json_string_value(v));
        json_object_foreach(json_object_get(ct, "node_labels"), key, v)
            check_node_label(g, key, json_string_value(v));
        json_array_foreach(json_object_get(gt, "taints"), t, taint) {
            char tag[256];
            key = str_at(taint, "key");
            value = str_at(taint, "value");
            snprintf(tag, sizeof tag, CA_TEMPLATE "taint/%s", key);
            snprintf(want, sizeof want, "%s:%s", value ? value : "", str_at(taint, "effect"));
            check_group_tag(g, tag, want);
            if (!array_find(json_object_get(g, "taints"), "key", key))
                fail_msg("%s: the profile tolerates %s, which the group does not taint", name,
                         key);
        }
    }
    /* And every GPU group of the cluster is one placement knows. */
    json_array_foreach(groups, i, g) {
        if (!json_object_get(json_object_get(g, "labels"), "nvidia.com/gpu.product"))
            continue;
        ngpu++;
        if (!array_find(json_object_get(profile, "node_groups"), "name", str_at(g, "name")))
            fail_msg("the node group %s is not in the cluster profile", str_at(g, "name"));
    }
    assert_int_equal(ngpu, json_array_size(json_object_get(profile, "node_groups")));
    json_decref(pdocs);
    json_decref(edocs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_object_matches_its_schema),
        cmocka_unit_test(test_unknown_fields_are_errors),
        cmocka_unit_test(test_kustomizations_name_existing_files),
        cmocka_unit_test(test_rbac_grants_exactly_what_the_backend_needs),
        cmocka_unit_test(test_deployment_runs_one_locked_down_server),
        cmocka_unit_test(test_deployment_flags_agree_with_its_volumes),
        cmocka_unit_test(test_deployment_args_are_serve_flags),
        cmocka_unit_test(test_deployment_kube_args_are_serve_flags),
        cmocka_unit_test(test_images_agree_with_the_manifests),
        cmocka_unit_test(test_eksctl_cluster_has_every_node_group),
        cmocka_unit_test(test_cluster_profile_matches_the_cluster),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
