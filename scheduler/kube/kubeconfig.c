/*
 * kubeconfig.c - kubeconfig files, in-cluster configuration and credential plugins.
 *
 * The YAML is turned into a jansson tree (every scalar a string) so that lookups read like the
 * documented keys; everything the file names is read at load into memory owned by the
 * ty_kubeconfig. Mutable state (the exec plugin's credential, the token file's content) sits
 * behind `lock`.
 */
#define _GNU_SOURCE /* pipe2: the plugin's pipes never leak into another thread's child */
#include "scheduler/kube/kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#include "common/ty_buf.h"
#include "common/ty_time.h"

extern char **environ;

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount/"
#define EXEC_V1 "client.authentication.k8s.io/v1"
#define EXEC_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* An exec credential plugin as the kubeconfig declares it. */
typedef struct exec_conf {
    char *api_version;
    char *command;          /* resolved against the kubeconfig's directory when relative */
    char **argv;            /* command then args, NULL-terminated */
    char **env;             /* "NAME=value", NULL-terminated */
    size_t nenv;
    char *install_hint;     /* installHint: told when the command is not found; may be NULL */
} exec_conf;

/* A token file and what was read from it last. */
typedef struct token_file {
    char *path;
    char *token;            /* trimmed content, NULL before the first read */
    struct stat st;         /* identity of what `token` came from */
} token_file;

struct ty_kubeconfig {
    char *source;           /* the kubeconfig's path, or "in-cluster"; for messages */
    char *context;
    char *server;
    char *namespace_;
    char *ca_pem;
    size_t ca_len;
    int insecure;
    char *cert_pem;         /* static client certificate and key */
    size_t cert_len;
    char *key_pem;
    size_t key_len;
    char *token;            /* static bearer token */
    token_file tfile;       /* tokenFile, or the service-account token; path NULL when none */
    exec_conf *exec;        /* NULL when none */

    pthread_mutex_t lock;   /* guards tfile's cache, cred and exec_runs */
    ty_kube_cred cred;      /* the exec plugin's last credential */
    uint64_t exec_runs;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void wipe_free(char *p, size_t n)
{
    if (p) {
        OPENSSL_cleanse(p, n);
        free(p);
    }
}

void ty_kube_cred_clear(ty_kube_cred *c)
{
    if (!c)
        return;
    if (c->token)
        wipe_free(c->token, strlen(c->token));
    free(c->cert_pem);
    wipe_free(c->key_pem, c->key_len);
    memset(c, 0, sizeof(*c));
}

static char *dup_mem(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* Reads a whole file (capped) into a new NUL-terminated buffer. */
static ty_err read_file(const char *path, char **out, size_t *len, char *why, size_t whylen)
{
    ty_buf b;
    ty_err rc = TY_OK;
    char chunk[8192];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(why, whylen, "cannot read %s: %s", path, strerror(errno));
        return TY_EIO;
    }
    ty_buf_init(&b, TY_KUBE_MAX_FILE);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            set_err(why, whylen, "cannot read %s: %s", path, strerror(errno));
            rc = TY_EIO;
            break;
        }
        if (n == 0)
            break;
        rc = ty_buf_append(&b, chunk, (size_t)n);
        if (rc != TY_OK) {
            set_err(why, whylen, "%s: %s", path,
                    rc == TY_ETOOLARGE ? "larger than 4 MiB" : ty_strerror(rc));
            break;
        }
    }
    close(fd);
    if (rc == TY_OK)
        rc = ty_buf_steal(&b, out, len);
    ty_buf_free(&b);
    return rc;
}

/* ---- YAML to JSON ---------------------------------------------------------------------------- */

static json_t *yaml_node_json(yaml_document_t *doc, yaml_node_t *node, int depth)
{
    json_t *j = NULL;
    if (!node || depth > 64)
        return NULL;
    switch (node->type) {
    case YAML_SCALAR_NODE: {
        const char *v = (const char *)node->data.scalar.value;
        /* kubectl writes `env: null`; a plain null must not read as the string "null". */
        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            (strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0 ||
             strcmp(v, "~") == 0 || v[0] == '\0'))
            return json_null();
        return json_stringn(v, node->data.scalar.length);
    }
    case YAML_SEQUENCE_NODE:
        j = json_array();
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             j && it < node->data.sequence.items.top; it++) {
            json_t *v = yaml_node_json(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!v || json_array_append_new(j, v) != 0) {
                json_decref(j);
                return NULL;
            }
        }
        return j;
    case YAML_MAPPING_NODE:
        j = json_object();
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
             j && p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            json_t *v;
            if (!k || k->type != YAML_SCALAR_NODE) {
                json_decref(j);
                return NULL;
            }
            v = yaml_node_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
            if (!v || json_object_set_new(j, (const char *)k->data.scalar.value, v) != 0) {
                json_decref(j);
                return NULL;
            }
        }
        return j;
    default:
        return NULL;
    }
}

/* Parses YAML (or JSON) text into a new tree; why gets the line and the parser's reason. */
static ty_err parse_yaml(const char *text, size_t len, json_t **out, char *why, size_t whylen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    ty_err rc = TY_OK;
    if (!yaml_parser_initialize(&parser))
        return TY_ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        set_err(why, whylen, "line %lu: %s", (unsigned long)parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "invalid YAML");
        yaml_parser_delete(&parser);
        return TY_EINVAL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    *out = root ? yaml_node_json(&doc, root, 0) : NULL;
    if (!*out || !json_is_object(*out)) {
        set_err(why, whylen, "%s", root ? "not a mapping of keys" : "empty document");
        json_decref(*out);
        *out = NULL;
        rc = TY_EINVAL;
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

/* ---- helpers over the tree ------------------------------------------------------------------- */

static const char *str_at(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* Finds {name: name, <field>: {...}} in the list `list` (clusters, users, contexts). */
static json_t *named_entry(json_t *root, const char *list, const char *field, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(root, list), i, e) {
        const char *n = str_at(e, "name");
        if (n && strcmp(n, name) == 0) {
            json_t *v = json_object_get(e, field);
            return json_is_object(v) ? v : NULL;
        }
    }
    return NULL;
}

static int bool_at(const json_t *obj, const char *key, int *out)
{
    const char *s = str_at(obj, key);
    *out = 0;
    if (!json_object_get(obj, key) || json_is_null(json_object_get(obj, key)))
        return 0;
    if (!s)
        return -1;
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0)
        *out = 1;
    else if (strcmp(s, "false") != 0 && strcmp(s, "False") != 0)
        return -1;
    return 0;
}

/* Decodes base64 (newlines allowed) into a new NUL-terminated buffer. */
static ty_err b64_decode(const char *in, char **out, size_t *outlen)
{
    size_t inlen = strlen(in);
    EVP_ENCODE_CTX *ctx;
    unsigned char *buf;
    int n = 0, m = 0;
    if (inlen > INT32_MAX)
        return TY_ETOOLARGE;
    buf = malloc(inlen / 4 * 3 + 4);
    ctx = EVP_ENCODE_CTX_new();
    if (!buf || !ctx) {
        free(buf);
        EVP_ENCODE_CTX_free(ctx);
        return TY_ENOMEM;
    }
    EVP_DecodeInit(ctx);
    if (EVP_DecodeUpdate(ctx, buf, &n, (const unsigned char *)in, (int)inlen) < 0 ||
        EVP_DecodeFinal(ctx, buf + n, &m) != 1 || n + m == 0) {
        EVP_ENCODE_CTX_free(ctx);
        free(buf);
        return TY_EINVAL;
    }
    EVP_ENCODE_CTX_free(ctx);
    buf[n + m] = '\0';
    *out = (char *)buf;
    *outlen = (size_t)(n + m);
    return TY_OK;
}

/* `p` relative to the kubeconfig's directory `dir` (NULL: as is). New string. */
static char *resolve_path(const char *dir, const char *p)
{
    char *r;
    size_t n;
    if (!dir || p[0] == '/')
        return strdup(p);
    n = strlen(dir) + strlen(p) + 2;
    r = malloc(n);
    if (r)
        snprintf(r, n, "%s/%s", dir, p);
    return r;
}

/*
 * Reads `<key>` (a file) or `<key>-data` (base64) of obj into *out. where names obj for messages
 * ("users[\"admin\"].user"). Absent both: TY_OK with *out NULL.
 */
static ty_err file_or_data(const ty_kubeconfig *kc, const char *dir, const json_t *obj,
                           const char *where, const char *key, char **out, size_t *len,
                           char *err, size_t errlen)
{
    char dkey[64], why[512];
    const char *file = str_at(obj, key), *data;
    ty_err rc;
    snprintf(dkey, sizeof(dkey), "%s-data", key);
    data = str_at(obj, dkey);
    *out = NULL;
    *len = 0;
    if (data && data[0]) {
        rc = b64_decode(data, out, len);
        if (rc == TY_EINVAL)
            set_err(err, errlen, "kubeconfig %s: %s.%s: not valid base64", kc->source, where,
                    dkey);
        return rc;
    }
    if (file && file[0]) {
        char *path = resolve_path(dir, file);
        if (!path)
            return TY_ENOMEM;
        rc = read_file(path, out, len, why, sizeof(why));
        free(path);
        if (rc != TY_OK)
            set_err(err, errlen, "kubeconfig %s: %s.%s: %s", kc->source, where, key, why);
        return rc;
    }
    return TY_OK;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

/* ---- token files ----------------------------------------------------------------------------- */

/* Re-reads the token file when it is new or changed; call with kc->lock held. */
static ty_err token_file_refresh(ty_kubeconfig *kc, int force, char *err, size_t errlen)
{
    token_file *t = &kc->tfile;
    struct stat st;
    char *text = NULL, why[512];
    size_t len;
    ty_err rc;
    if (stat(t->path, &st) != 0) {
        set_err(err, errlen, "%s: token file %s: %s", kc->source, t->path, strerror(errno));
        return TY_EAUTH;
    }
    if (!force && t->token && st.st_ino == t->st.st_ino && st.st_dev == t->st.st_dev &&
        st.st_size == t->st.st_size && st.st_mtim.tv_sec == t->st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == t->st.st_mtim.tv_nsec)
        return TY_OK;
    rc = read_file(t->path, &text, &len, why, sizeof(why));
    if (rc != TY_OK) {
        set_err(err, errlen, "%s: token file: %s", kc->source, why);
        return rc == TY_ENOMEM ? rc : TY_EAUTH;
    }
    trim(text);
    if (text[0] == '\0') {
        set_err(err, errlen, "%s: token file %s is empty", kc->source, t->path);
        free(text);
        return TY_EAUTH;
    }
    if (t->token)
        wipe_free(t->token, strlen(t->token));
    t->token = text;
    t->st = st;
    return TY_OK;
}

/* ---- exec plugins ---------------------------------------------------------------------------- */

static void exec_free(exec_conf *e)
{
    if (!e)
        return;
    free(e->api_version);
    free(e->command);
    free(e->install_hint);
    for (char **a = e->argv; a && *a; a++)
        free(*a);
    free(e->argv);
    for (char **v = e->env; v && *v; v++)
        free(*v);
    free(e->env);
    free(e);
}

static ty_err exec_parse(const ty_kubeconfig *kc, const char *dir, const json_t *ex,
                         const char *where, exec_conf **out, char *err, size_t errlen)
{
    const char *api = str_at(ex, "apiVersion"), *cmd = str_at(ex, "command");
    json_t *args = json_object_get(ex, "args"), *env = json_object_get(ex, "env"), *v;
    exec_conf *e;
    size_t i, nargs = json_array_size(args), n = 0;

    if (!api || (strcmp(api, EXEC_V1) != 0 && strcmp(api, EXEC_V1BETA1) != 0)) {
        set_err(err, errlen, "kubeconfig %s: %s.exec.apiVersion: %s%s%s, expected %s or %s",
                kc->source, where, api ? "\"" : "", api ? api : "missing", api ? "\"" : "",
                EXEC_V1, EXEC_V1BETA1);
        return TY_EINVAL;
    }
    if (!cmd || !cmd[0]) {
        set_err(err, errlen, "kubeconfig %s: %s.exec.command: missing", kc->source, where);
        return TY_EINVAL;
    }
    if (json_is_null(args))
        args = NULL;
    if (json_is_null(env))
        env = NULL;
    if ((args && !json_is_array(args)) || (env && !json_is_array(env))) {
        set_err(err, errlen, "kubeconfig %s: %s.exec.%s: not a list", kc->source, where,
                args && !json_is_array(args) ? "args" : "env");
        return TY_EINVAL;
    }
    e = calloc(1, sizeof(*e));
    if (!e)
        return TY_ENOMEM;
    e->api_version = strdup(api);
    /* A bare name is looked up on PATH; a path with '/' is relative to the kubeconfig. */
    e->command = strchr(cmd, '/') ? resolve_path(dir, cmd) : strdup(cmd);
    e->argv = calloc(nargs + 2, sizeof(char *));
    e->env = calloc(json_array_size(env) + 1, sizeof(char *));
    if (!e->api_version || !e->command || !e->argv || !e->env)
        goto nomem;
    if (str_at(ex, "installHint") && !(e->install_hint = strdup(str_at(ex, "installHint"))))
        goto nomem;
    e->argv[0] = strdup(e->command);
    if (!e->argv[0])
        goto nomem;
    json_array_foreach(args, i, v) {
        if (!json_is_string(v)) {
            set_err(err, errlen, "kubeconfig %s: %s.exec.args[%zu]: not a string", kc->source,
                    where, i);
            exec_free(e);
            return TY_EINVAL;
        }
        if (!(e->argv[i + 1] = strdup(json_string_value(v))))
            goto nomem;
    }
    json_array_foreach(env, i, v) {
        const char *name = str_at(v, "name"), *val = str_at(v, "value");
        size_t len;
        if (!name || !name[0] || strchr(name, '=') || !val) {
            set_err(err, errlen, "kubeconfig %s: %s.exec.env[%zu]: needs a name and a value",
                    kc->source, where, i);
            exec_free(e);
            return TY_EINVAL;
        }
        len = strlen(name) + strlen(val) + 2;
        if (!(e->env[n] = malloc(len)))
            goto nomem;
        snprintf(e->env[n++], len, "%s=%s", name, val);
    }
    e->nenv = n;
    *out = e;
    return TY_OK;
nomem:
    exec_free(e);
    return TY_ENOMEM;
}

/* environ, minus names the plugin's env overrides, plus its env and KUBERNETES_EXEC_INFO. */
static char **exec_envp(const exec_conf *e, char *info)
{
    size_t n = 0, k = 0;
    char **envp;
    while (environ[n])
        n++;
    envp = calloc(n + e->nenv + 2, sizeof(char *));
    if (!envp)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int skip = strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21) == 0;
        for (size_t j = 0; !skip && j < e->nenv; j++)
            skip = strncmp(e->env[j], environ[i], nl) == 0 && e->env[j][nl] == '=';
        if (!skip)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < e->nenv; j++)
        envp[k++] = e->env[j];
    envp[k] = info;
    return envp;
}

/*
 * Runs the plugin; *out gets its stdout, why its stderr's first line on failure.
 * Both pipes are drained with poll() so a chatty stderr cannot block the child.
 */
static ty_err exec_run(const exec_conf *e, char **out, char *why, size_t whylen)
{
    char info[160];
    char **envp = NULL;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, status = 0;
    posix_spawn_file_actions_t fa;
    pid_t pid = -1;
    ty_buf ob, eb;
    ty_err rc = TY_OK;
    uint64_t deadline = ty_time_mono_ns() + (uint64_t)TY_KUBE_EXEC_TIMEOUT_MS * 1000000u;

    ty_buf_init(&ob, TY_KUBE_MAX_FILE);
    ty_buf_init(&eb, 4096);
    snprintf(info, sizeof(info),
             "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\","
             "\"spec\":{\"interactive\":false}}", e->api_version);
    envp = exec_envp(e, info);
    if (!envp)
        return TY_ENOMEM;
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        set_err(why, whylen, "pipe: %s", strerror(errno));
        rc = TY_EAUTH;
        goto out;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
    int sp = posix_spawnp(&pid, e->command, &fa, NULL, e->argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(outp[1]);
    close(errp[1]);
    outp[1] = errp[1] = -1;
    if (sp != 0) {
        set_err(why, whylen, "cannot run %s: %s%s%s", e->command, strerror(sp),
                sp == ENOENT && e->install_hint ? ". " : "",
                sp == ENOENT && e->install_hint ? e->install_hint : "");
        pid = -1;
        rc = TY_EAUTH;
        goto out;
    }
    while (outp[0] >= 0 || errp[0] >= 0) {
        struct pollfd pf[2] = {{outp[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
        uint64_t now = ty_time_mono_ns();
        if (now >= deadline) {
            set_err(why, whylen, "%s did not finish within %d s", e->command,
                    TY_KUBE_EXEC_TIMEOUT_MS / 1000);
            kill(pid, SIGKILL);
            rc = TY_EAUTH;
            break;
        }
        int pr = poll(pf, 2, (int)((deadline - now) / 1000000u) + 1);
        if (pr < 0 && errno != EINTR) {
            rc = TY_EAUTH;
            set_err(why, whylen, "poll: %s", strerror(errno));
            kill(pid, SIGKILL);
            break;
        }
        for (int i = 0; i < 2 && pr > 0; i++) {
            char chunk[4096];
            int *fd = i == 0 ? &outp[0] : &errp[0];
            ssize_t n;
            if (*fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            n = read(*fd, chunk, sizeof(chunk));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(*fd);
                *fd = -1;
                continue;
            }
            /* stderr past its cap is dropped; stdout past its cap is an error. */
            if (i == 1) {
                (void)ty_buf_append(&eb, chunk, (size_t)n);
            } else if (ty_buf_append(&ob, chunk, (size_t)n) != TY_OK) {
                set_err(why, whylen, "%s printed more than 4 MiB", e->command);
                kill(pid, SIGKILL);
                rc = TY_EAUTH;
                goto out;
            }
        }
    }
out:
    if (pid > 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (rc == TY_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            char *nl;
            (void)ty_buf_puts(&eb, "");
            nl = eb.data ? strchr(eb.data, '\n') : NULL;
            if (nl)
                *nl = '\0';
            if (WIFEXITED(status))
                set_err(why, whylen, "%s exited with status %d%s%s", e->command,
                        WEXITSTATUS(status), eb.len ? ": " : "", eb.data ? eb.data : "");
            else
                set_err(why, whylen, "%s was killed by signal %d", e->command,
                        WTERMSIG(status));
            rc = TY_EAUTH;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    free(envp);
    if (rc == TY_OK) {
        size_t len;
        (void)ty_buf_puts(&ob, "");
        rc = ty_buf_steal(&ob, out, &len);
    }
    ty_buf_free(&ob);
    ty_buf_free(&eb);
    return rc;
}

/* Decodes an ExecCredential printed by the plugin into *cred. */
static ty_err exec_decode(const exec_conf *e, const char *text, ty_kube_cred *cred, char *why,
                          size_t whylen)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr), *st;
    const char *api, *kind, *tok, *cert, *key, *exp;
    ty_err rc = TY_EAUTH;
    memset(cred, 0, sizeof(*cred));
    if (!j) {
        set_err(why, whylen, "%s printed no JSON ExecCredential: line %d: %s", e->command,
                jerr.line, jerr.text);
        return TY_EAUTH;
    }
    api = str_at(j, "apiVersion");
    kind = str_at(j, "kind");
    st = json_object_get(j, "status");
    if (!kind || strcmp(kind, "ExecCredential") != 0) {
        set_err(why, whylen, "%s printed kind %s, expected ExecCredential", e->command,
                kind ? kind : "(none)");
        goto out;
    }
    if (!api || strcmp(api, e->api_version) != 0) {
        set_err(why, whylen, "%s printed apiVersion %s, the kubeconfig asks for %s", e->command,
                api ? api : "(none)", e->api_version);
        goto out;
    }
    if (!json_is_object(st)) {
        set_err(why, whylen, "%s printed an ExecCredential without status", e->command);
        goto out;
    }
    tok = str_at(st, "token");
    cert = str_at(st, "clientCertificateData");
    key = str_at(st, "clientKeyData");
    exp = str_at(st, "expirationTimestamp");
    if ((!tok || !tok[0]) && (!cert || !key || !cert[0] || !key[0])) {
        set_err(why, whylen, "%s printed an ExecCredential with neither status.token nor "
                "status.clientCertificateData and status.clientKeyData", e->command);
        goto out;
    }
    if ((cert && !key) || (key && !cert)) {
        set_err(why, whylen, "%s printed status.%s without status.%s", e->command,
                cert ? "clientCertificateData" : "clientKeyData",
                cert ? "clientKeyData" : "clientCertificateData");
        goto out;
    }
    if (exp && exp[0] && ty_time_parse_rfc3339(exp, &cred->expires_ms) != 0) {
        set_err(why, whylen, "%s printed status.expirationTimestamp \"%.40s\", not RFC 3339",
                e->command, exp);
        goto out;
    }
    rc = TY_ENOMEM;
    if (tok && tok[0] && !(cred->token = strdup(tok)))
        goto out;
    if (cert && cert[0]) {
        cred->cert_len = strlen(cert);
        cred->key_len = strlen(key);
        if (!(cred->cert_pem = dup_mem(cert, cred->cert_len)) ||
            !(cred->key_pem = dup_mem(key, cred->key_len)))
            goto out;
    }
    rc = TY_OK;
out:
    if (rc != TY_OK)
        ty_kube_cred_clear(cred);
    json_decref(j);
    return rc;
}

/* ---- load ------------------------------------------------------------------------------------ */

static ty_kubeconfig *kc_new(const char *source)
{
    ty_kubeconfig *kc = calloc(1, sizeof(*kc));
    if (!kc)
        return NULL;
    if (pthread_mutex_init(&kc->lock, NULL) != 0) {
        free(kc);
        return NULL;
    }
    kc->source = strdup(source);
    if (!kc->source) {
        ty_kubeconfig_free(kc);
        return NULL;
    }
    return kc;
}

void ty_kubeconfig_free(ty_kubeconfig *kc)
{
    if (!kc)
        return;
    free(kc->source);
    free(kc->context);
    free(kc->server);
    free(kc->namespace_);
    free(kc->ca_pem);
    free(kc->cert_pem);
    wipe_free(kc->key_pem, kc->key_len);
    if (kc->token)
        wipe_free(kc->token, strlen(kc->token));
    free(kc->tfile.path);
    if (kc->tfile.token)
        wipe_free(kc->tfile.token, strlen(kc->tfile.token));
    exec_free(kc->exec);
    ty_kube_cred_clear(&kc->cred);
    pthread_mutex_destroy(&kc->lock);
    free(kc);
}

static ty_err load_cluster(ty_kubeconfig *kc, const char *dir, json_t *root, const char *name,
                           char *err, size_t errlen)
{
    char where[192];
    json_t *cl = named_entry(root, "clusters", "cluster", name);
    const char *server;
    size_t n;
    ty_err rc;
    snprintf(where, sizeof(where), "clusters[\"%.120s\"].cluster", name);
    if (!cl) {
        set_err(err, errlen, "kubeconfig %s: context %s names cluster \"%.120s\", which "
                "clusters does not hold", kc->source, kc->context, name);
        return TY_EINVAL;
    }
    server = str_at(cl, "server");
    if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)) {
        set_err(err, errlen, "kubeconfig %s: %s.server: %s", kc->source, where,
                server ? "not an http(s):// URL" : "missing");
        return TY_EINVAL;
    }
    if (!(kc->server = strdup(server)))
        return TY_ENOMEM;
    n = strlen(kc->server);
    while (n > 0 && kc->server[n - 1] == '/')
        kc->server[--n] = '\0';
    if (bool_at(cl, "insecure-skip-tls-verify", &kc->insecure) != 0) {
        set_err(err, errlen, "kubeconfig %s: %s.insecure-skip-tls-verify: not true or false",
                kc->source, where);
        return TY_EINVAL;
    }
    rc = file_or_data(kc, dir, cl, where, "certificate-authority", &kc->ca_pem, &kc->ca_len,
                      err, errlen);
    if (rc == TY_OK && kc->insecure && kc->ca_pem) {
        set_err(err, errlen, "kubeconfig %s: %s: insecure-skip-tls-verify and a "
                "certificate-authority exclude each other", kc->source, where);
        rc = TY_EINVAL;
    }
    return rc;
}

static ty_err load_user(ty_kubeconfig *kc, const char *dir, json_t *root, const char *name,
                        char *err, size_t errlen)
{
    char where[192];
    json_t *u = named_entry(root, "users", "user", name), *ex;
    const char *tok, *tfile;
    ty_err rc;
    snprintf(where, sizeof(where), "users[\"%.120s\"].user", name);
    if (!u) {
        set_err(err, errlen, "kubeconfig %s: context %s names user \"%.120s\", which users "
                "does not hold", kc->source, kc->context, name);
        return TY_EINVAL;
    }
    if (json_object_get(u, "auth-provider")) {
        set_err(err, errlen, "kubeconfig %s: %s.auth-provider: not supported; use an exec "
                "credential plugin", kc->source, where);
        return TY_EINVAL;
    }
    rc = file_or_data(kc, dir, u, where, "client-certificate", &kc->cert_pem, &kc->cert_len,
                      err, errlen);
    if (rc == TY_OK)
        rc = file_or_data(kc, dir, u, where, "client-key", &kc->key_pem, &kc->key_len, err,
                          errlen);
    if (rc != TY_OK)
        return rc;
    if (!kc->cert_pem != !kc->key_pem) {
        set_err(err, errlen, "kubeconfig %s: %s: %s without %s", kc->source, where,
                kc->cert_pem ? "client-certificate" : "client-key",
                kc->cert_pem ? "client-key" : "client-certificate");
        return TY_EINVAL;
    }
    tok = str_at(u, "token");
    tfile = str_at(u, "tokenFile");
    if (tfile && tfile[0]) {
        if (!(kc->tfile.path = resolve_path(dir, tfile)))
            return TY_ENOMEM;
        char why[512];
        rc = token_file_refresh(kc, 1, why, sizeof(why));
        if (rc != TY_OK) {
            /* why reads "<kubeconfig>: token file <path>: <reason>". */
            set_err(err, errlen, "kubeconfig %s: %s.tokenFile: %s", kc->source, where,
                    strstr(why, "token file ") ? strstr(why, "token file ") + 11 : why);
            return rc == TY_ENOMEM ? rc : TY_EIO;
        }
    } else if (tok && tok[0] && !(kc->token = strdup(tok))) {
        return TY_ENOMEM;
    }
    ex = json_object_get(u, "exec");
    if (ex && !json_is_null(ex)) {
        if (!json_is_object(ex)) {
            set_err(err, errlen, "kubeconfig %s: %s.exec: not a mapping", kc->source, where);
            return TY_EINVAL;
        }
        rc = exec_parse(kc, dir, ex, where, &kc->exec, err, errlen);
    }
    return rc;
}

ty_err ty_kubeconfig_load(const char *path, const char *context, ty_kubeconfig **out,
                          char *err, size_t errlen)
{
    char *text = NULL, *dir = NULL, *slash, why[512];
    size_t len;
    json_t *root = NULL, *ctx;
    const char *cluster, *user, *ns;
    ty_kubeconfig *kc = kc_new(path);
    ty_err rc;

    if (!kc)
        return TY_ENOMEM;
    rc = read_file(path, &text, &len, why, sizeof(why));
    if (rc != TY_OK) {
        set_err(err, errlen, "kubeconfig: %s", why);
        goto out;
    }
    rc = parse_yaml(text, len, &root, why, sizeof(why));
    if (rc != TY_OK) {
        set_err(err, errlen, "kubeconfig %s: %s", path, why);
        goto out;
    }
    if (!(dir = strdup(path))) {
        rc = TY_ENOMEM;
        goto out;
    }
    slash = strrchr(dir, '/');
    if (slash == dir) {
        slash[1] = '\0';
    } else if (slash) {
        *slash = '\0';
    } else {
        free(dir);      /* a bare file name: its relative paths are relative to the cwd */
        dir = NULL;
    }
    if (!context)
        context = str_at(root, "current-context");
    if (!context || !context[0]) {
        set_err(err, errlen, "kubeconfig %s: current-context: missing, and no context was named",
                path);
        rc = TY_EINVAL;
        goto out;
    }
    if (!(kc->context = strdup(context))) {
        rc = TY_ENOMEM;
        goto out;
    }
    ctx = named_entry(root, "contexts", "context", context);
    if (!ctx) {
        set_err(err, errlen, "kubeconfig %s: contexts: no context named \"%.120s\"", path,
                context);
        rc = TY_EINVAL;
        goto out;
    }
    cluster = str_at(ctx, "cluster");
    user = str_at(ctx, "user");
    ns = str_at(ctx, "namespace");
    if (!cluster || !cluster[0]) {
        set_err(err, errlen, "kubeconfig %s: contexts[\"%.120s\"].context.cluster: missing",
                path, context);
        rc = TY_EINVAL;
        goto out;
    }
    if (!(kc->namespace_ = strdup(ns && ns[0] ? ns : "default"))) {
        rc = TY_ENOMEM;
        goto out;
    }
    rc = load_cluster(kc, dir, root, cluster, err, errlen);
    if (rc == TY_OK && user && user[0])
        rc = load_user(kc, dir, root, user, err, errlen);
out:
    free(text);
    free(dir);
    json_decref(root);
    if (rc == TY_OK)
        *out = kc;
    else
        ty_kubeconfig_free(kc);
    return rc;
}

ty_err ty_kubeconfig_in_cluster(const ty_kube_incluster *ic, ty_kubeconfig **out, char *err,
                                size_t errlen)
{
    ty_kube_incluster d = {0};
    ty_kubeconfig *kc;
    char why[512], *ns = NULL;
    size_t len, n;
    ty_err rc;

    if (ic)
        d = *ic;
    if (!d.host)
        d.host = getenv("KUBERNETES_SERVICE_HOST");
    if (!d.port)
        d.port = getenv("KUBERNETES_SERVICE_PORT");
    if (!d.token_path)
        d.token_path = SA_DIR "token";
    if (!d.ca_path)
        d.ca_path = SA_DIR "ca.crt";
    if (!d.namespace_path)
        d.namespace_path = SA_DIR "namespace";
    if (!d.host || !d.host[0] || !d.port || !d.port[0]) {
        set_err(err, errlen, "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                "must be set (is this a pod?)");
        return TY_EINVAL;
    }
    if (!(kc = kc_new("in-cluster")))
        return TY_ENOMEM;
    n = strlen(d.host) + strlen(d.port) + 16;
    kc->server = malloc(n);
    kc->context = strdup("in-cluster");
    kc->tfile.path = strdup(d.token_path);
    if (!kc->server || !kc->context || !kc->tfile.path) {
        rc = TY_ENOMEM;
        goto out;
    }
    /* An IPv6 service address needs brackets in a URL. */
    snprintf(kc->server, n, strchr(d.host, ':') ? "https://[%s]:%s" : "https://%s:%s", d.host,
             d.port);
    rc = read_file(d.ca_path, &kc->ca_pem, &kc->ca_len, why, sizeof(why));
    if (rc != TY_OK) {
        set_err(err, errlen, "in-cluster: CA bundle: %s", why);
        goto out;
    }
    rc = token_file_refresh(kc, 1, err, errlen);
    if (rc != TY_OK) {
        rc = rc == TY_ENOMEM ? rc : TY_EIO;
        goto out;
    }
    if (read_file(d.namespace_path, &ns, &len, why, sizeof(why)) == TY_OK) {
        trim(ns);
        kc->namespace_ = ns;
    }
    if (!kc->namespace_ || !kc->namespace_[0]) {
        free(kc->namespace_);
        if (!(kc->namespace_ = strdup("default")))
            rc = TY_ENOMEM;
    }
out:
    if (rc == TY_OK)
        *out = kc;
    else
        ty_kubeconfig_free(kc);
    return rc;
}

const char *ty_kubeconfig_server(const ty_kubeconfig *kc) { return kc->server; }
const char *ty_kubeconfig_namespace(const ty_kubeconfig *kc) { return kc->namespace_; }
const char *ty_kubeconfig_context(const ty_kubeconfig *kc) { return kc->context; }

void ty_kubeconfig_tls(const ty_kubeconfig *kc, ty_kube_tls *out)
{
    out->ca_pem = kc->ca_pem;
    out->ca_len = kc->ca_len;
    out->insecure = kc->insecure;
}

uint64_t ty_kubeconfig_exec_runs(ty_kubeconfig *kc)
{
    uint64_t n;
    pthread_mutex_lock(&kc->lock);
    n = kc->exec_runs;
    pthread_mutex_unlock(&kc->lock);
    return n;
}

static ty_err copy_cred(const char *token, const char *cert, size_t cert_len, const char *key,
                        size_t key_len, int64_t expires, ty_kube_cred *out)
{
    memset(out, 0, sizeof(*out));
    out->expires_ms = expires;
    if ((token && !(out->token = strdup(token))) ||
        (cert && !(out->cert_pem = dup_mem(cert, cert_len))) ||
        (key && !(out->key_pem = dup_mem(key, key_len)))) {
        ty_kube_cred_clear(out);
        return TY_ENOMEM;
    }
    out->cert_len = cert ? cert_len : 0;
    out->key_len = key ? key_len : 0;
    return TY_OK;
}

ty_err ty_kubeconfig_credentials(ty_kubeconfig *kc, int renew, ty_kube_cred *out, char *err,
                                 size_t errlen)
{
    const char *token = kc->token;
    const char *cert = kc->cert_pem, *key = kc->key_pem;
    size_t cert_len = kc->cert_len, key_len = kc->key_len;
    int64_t expires = 0;
    ty_err rc = TY_OK;

    pthread_mutex_lock(&kc->lock);
    if (kc->tfile.path) {
        rc = token_file_refresh(kc, renew, err, errlen);
        if (rc != TY_OK)
            goto out;
        token = kc->tfile.token;
    }
    if (kc->exec) {
        int have = kc->cred.token || kc->cred.cert_pem;
        int stale = kc->cred.expires_ms &&
                    ty_time_now_ms() >= kc->cred.expires_ms - TY_KUBE_RENEW_BEFORE_MS;
        if (!have || stale || renew) {
            char *text = NULL, why[512];
            ty_kube_cred fresh;
            rc = exec_run(kc->exec, &text, why, sizeof(why));
            if (rc == TY_OK)
                rc = exec_decode(kc->exec, text, &fresh, why, sizeof(why));
            if (text)
                wipe_free(text, strlen(text));
            if (rc != TY_OK) {
                set_err(err, errlen, "%s: users exec plugin: %s", kc->source, why);
                goto out;
            }
            ty_kube_cred_clear(&kc->cred);
            kc->cred = fresh;
            kc->exec_runs++;
        }
        /* The plugin's answer wins over static credentials, as in client-go. */
        if (kc->cred.token)
            token = kc->cred.token;
        if (kc->cred.cert_pem) {
            cert = kc->cred.cert_pem;
            cert_len = kc->cred.cert_len;
            key = kc->cred.key_pem;
            key_len = kc->cred.key_len;
        }
        expires = kc->cred.expires_ms;
    }
    rc = copy_cred(token, cert, cert_len, key, key_len, expires, out);
out:
    pthread_mutex_unlock(&kc->lock);
    return rc;
}
