/*
 * config.c - flags, environment and defaults of `trainyard`; see config.h.
 */
#include "server/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "api/tokens.h"
#include "common/ty_quantity.h"
#include "store/store.h"

#define CONFIG_STR_(x) #x
#define CONFIG_STR(x) CONFIG_STR_(x) /* a number #defined as digits, as text */

/* An environment variable, NULL when unset or empty. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

__attribute__((format(printf, 3, 4))) static ty_err fail(char *err, size_t errlen,
                                                         const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        if (n < 0)
            err[0] = '\0';
    }
    return TY_EINVAL;
}

static int parse_port(const char *s, unsigned *port)
{
    if (*s == '\0' || strlen(s) > 5 || strspn(s, "0123456789") != strlen(s))
        return -1;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > 65535)
        return -1;
    *port = (unsigned)v;
    return 0;
}

#define BAD_LISTEN "invalid listen address '%s': %s"
#define BAD_HOST "expected an IPv4 address, [IPv6] or localhost"

ty_err config_parse_listen(const char *text, config_listen *out, char *err, size_t errlen)
{
    char host[CONFIG_ADDR_LEN];
    const char *port_text;

    memset(out, 0, sizeof *out);
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return fail(err, errlen, BAD_LISTEN, text, "expected [IPv6]:PORT");
        size_t n = (size_t)(close - text - 1);
        if (n == 0 || n >= sizeof host)
            return fail(err, errlen, BAD_LISTEN, text, "bad IPv6 address");
        memcpy(host, text + 1, n);
        host[n] = '\0';
        port_text = close + 2;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return fail(err, errlen, BAD_LISTEN, text, "bad IPv6 address");
        a6->sin6_family = AF_INET6;
        out->addrlen = sizeof *a6;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon)
            return fail(err, errlen, BAD_LISTEN, text, "expected HOST:PORT");
        size_t n = (size_t)(colon - text);
        if (n == 0 || n >= sizeof host)
            return fail(err, errlen, BAD_LISTEN, text, BAD_HOST);
        memcpy(host, text, n);
        host[n] = '\0';
        port_text = colon + 1;
        if (strcmp(host, "localhost") == 0)
            snprintf(host, sizeof host, "127.0.0.1");
        struct sockaddr_in *a4 = (struct sockaddr_in *)&out->addr;
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return fail(err, errlen, BAD_LISTEN, text, BAD_HOST);
        a4->sin_family = AF_INET;
        out->addrlen = sizeof *a4;
    }
    if (parse_port(port_text, &out->port) != 0)
        return fail(err, errlen, BAD_LISTEN, text, "port must be 0..65535");
    if (out->addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&out->addr)->sin6_port = htons((uint16_t)out->port);
    else
        ((struct sockaddr_in *)&out->addr)->sin_port = htons((uint16_t)out->port);
    memcpy(out->host, host, sizeof host);
    return TY_OK;
}

void config_format_addr(const char *host, int family, unsigned port, char *buf, size_t len)
{
    int n = family == AF_INET6 ? snprintf(buf, len, "[%s]:%u", host, port)
                               : snprintf(buf, len, "%s:%u", host, port);
    if (n < 0 || (size_t)n >= len)
        buf[0] = '\0';
}

ty_err config_parse_scopes(const char *text, unsigned *out, char *err, size_t errlen)
{
    unsigned bits = 0;
    const char *s = text;
    for (;;) {
        size_t n = strcspn(s, ",");
        unsigned bit = api_scope_parse(s, n);
        if (!bit)
            return fail(err, errlen, "invalid scope list '%s': %s", text,
                        "each scope must be read, submit or admin");
        if (bits & bit)
            return fail(err, errlen, "invalid scope list '%s': %s", text, "a scope is repeated");
        bits |= bit;
        if (s[n] == '\0')
            break;
        s += n + 1;
    }
    *out = bits;
    return TY_OK;
}

void config_format_scopes(unsigned scopes, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned bit = STORE_SCOPE_READ; bit <= STORE_SCOPE_ADMIN; bit <<= 1) {
        if (!(scopes & bit) || !api_scope_name(bit))
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "", api_scope_name(bit));
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
    }
}

static ty_err set_path(char *dst, const char *value, const char *what, char *err, size_t errlen)
{
    if (*value == '\0')
        return fail(err, errlen, "%s must not be empty", what);
    int n = snprintf(dst, CONFIG_PATH_MAX, "%s", value);
    if (n < 0 || n >= CONFIG_PATH_MAX)
        return fail(err, errlen, "%s is too long", what);
    return TY_OK;
}

static ty_err parse_max_body(const char *value, const char *what, size_t *out, char *err,
                             size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno == ERANGE || v < 1 ||
        (unsigned long long)v > CONFIG_MAX_MAX_BODY)
        return fail(err, errlen, "invalid %s '%s': expected bytes, 1..1073741824", what, value);
    *out = (size_t)v;
    return TY_OK;
}

static ty_err parse_level(const char *value, const char *what, ty_log_level *out, char *err,
                          size_t errlen)
{
    int l = ty_log_parse_level(value);
    if (l < 0)
        return fail(err, errlen, "invalid %s '%s': expected debug, info, warn or error", what,
                    value);
    *out = (ty_log_level)l;
    return TY_OK;
}

/*
 * Recognizes "--name VALUE" and "--name=VALUE" at argv[*i]. Returns 1 and sets
 * *value (advancing *i past a separate value), 0 when argv[*i] is another
 * option, -1 when the value is missing.
 */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* The flag's value when given, else the variable's (or NULL); *what names the source. */
static const char *flag_or_env(const char *flag_value, const char *flag, const char *var,
                               const char **what)
{
    *what = flag;
    if (flag_value)
        return flag_value;
    *what = var;
    return env(var);
}

static ty_err parse_count(const char *value, const char *what, long min, long max, int *out,
                          char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno == ERANGE || v < min ||
        v > max)
        return fail(err, errlen, "invalid %s '%s': expected an integer, %ld..%ld", what, value, min,
                    max);
    *out = (int)v;
    return TY_OK;
}

/* "addr=10/50,hook=20/100,fail=0.1/10,delay=1000": any of them, in any order. */
static ty_err parse_webhook_limits(const char *value, const char *what, config_webhook_limits *out,
                                   char *err, size_t errlen)
{
    const char *p = value;
    while (*p) {
        char item[64], *end = NULL, *end2 = NULL;
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof item)
            goto bad;
        memcpy(item, p, n);
        item[n] = '\0';
        p += p[n] ? n + 1 : n;
        char *v = strchr(item, '=');
        if (!v)
            goto bad;
        *v++ = '\0';
        if (strcmp(item, "delay") == 0) {
            long d = strtol(v, &end, 10);
            if (end == v || *end || d < 0 || d > 60000)
                goto bad;
            out->delay_ms = d ? (int)d : -1;
            continue;
        }
        config_bucket *b = strcmp(item, "addr") == 0   ? &out->addr
                           : strcmp(item, "hook") == 0 ? &out->hook
                           : strcmp(item, "fail") == 0 ? &out->fail
                                                       : NULL;
        double rate = strtod(v, &end), burst = 0;
        if (!b || end == v || *end != '/')
            goto bad;
        burst = strtod(end + 1, &end2);
        if (end2 == end + 1 || *end2 || !(rate > 0 && rate <= 1e6) || !(burst >= 1 && burst <= 1e6))
            goto bad;
        b->rate = rate;
        b->burst = burst;
    }
    return TY_OK;
bad:
    return fail(err, errlen,
                "invalid %s '%s': expected addr=RATE/BURST,hook=RATE/BURST,fail=RATE/BURST,"
                "delay=MS (any of them; rates > 0 a second, bursts >= 1, delay 0..60000)",
                what, value);
}

/* A queue limit: a count (0 pauses the queue) or "unlimited" (-1). */
static ty_err parse_limit(const char *value, const char *what, int *out, char *err, size_t errlen)
{
    if (strcmp(value, "unlimited") == 0) {
        *out = -1;
        return TY_OK;
    }
    ty_err e = parse_count(value, what, 0, CONFIG_MAX_SLOTS, out, err, errlen);
    if (e && err && errlen) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", err);
        snprintf(err, errlen, "%s or 'unlimited'", inner);
    }
    return e;
}

/* "N" sets every queue's limit; "QUEUE=N" one queue's (a later one wins). */
static ty_err parse_queue_limit(const char *value, size_t len, const char *what, config_serve *out,
                                char *err, size_t errlen)
{
    char text[CONFIG_QUEUE_NAME_MAX + 32];
    if (len >= sizeof text)
        return fail(err, errlen, "invalid %s '%.*s': too long", what, (int)len, value);
    memcpy(text, value, len);
    text[len] = '\0';
    char *eq = strchr(text, '=');
    if (!eq)
        return parse_limit(text, what, &out->queue_limit, err, errlen);
    *eq = '\0';
    size_t qn = strlen(text);
    int ok = qn > 0 && qn < CONFIG_QUEUE_NAME_MAX;
    for (size_t i = 0; i < qn && ok; i++)
        ok = (text[i] >= 'a' && text[i] <= 'z') || (text[i] >= '0' && text[i] <= '9') ||
             (text[i] == '-' && i > 0 && i + 1 < qn);
    if (!ok)
        return fail(err, errlen, "invalid %s '%s=%s': the queue must be a DNS label", what, text,
                    eq + 1);
    int limit = 0;
    ty_err e = parse_limit(eq + 1, what, &limit, err, errlen);
    if (e)
        return e;
    size_t i = 0;
    while (i < out->nqueue_limits && strcmp(out->queue_limits[i].queue, text) != 0)
        i++;
    if (i == CONFIG_MAX_QUEUE_LIMITS)
        return fail(err, errlen, "too many %s values (at most %d queues)", what,
                    CONFIG_MAX_QUEUE_LIMITS);
    if (i == out->nqueue_limits)
        out->nqueue_limits++;
    memcpy(out->queue_limits[i].queue, text, qn + 1);
    out->queue_limits[i].limit = limit;
    return TY_OK;
}

/* The Kubernetes backend's options: all of them or none without --cluster-profile. */
static ty_err parse_kube(const char *profile, const char *kubeconfig, const char *kctx,
                         const char *kube, const char *qps, const char *burst, config_serve *out,
                         char *err, size_t errlen)
{
    const char *v, *what, *cred = NULL;
    ty_err e;
    if ((v = flag_or_env(profile, "--cluster-profile", "TRAINYARD_CLUSTER_PROFILE", &what)) &&
        (e = set_path(out->cluster_profile, v, what, err, errlen)))
        return e;
    if ((v = flag_or_env(kubeconfig, "--kubeconfig", "TRAINYARD_KUBECONFIG", &what))) {
        if ((e = set_path(out->kubeconfig, v, what, err, errlen)))
            return e;
        cred = what;
    }
    if ((v = flag_or_env(kctx, "--kube-context", "TRAINYARD_KUBE_CONTEXT", &what))) {
        size_t n = strlen(v);
        if (n >= sizeof out->kube_context)
            return fail(err, errlen, "%s: context name too long", what);
        memcpy(out->kube_context, v, n + 1);
        cred = cred ? cred : what;
    }
    if ((v = flag_or_env(kube, "--kube", "TRAINYARD_KUBE", &what))) {
        if (strcmp(v, "in-cluster") != 0)
            return fail(err, errlen, "%s: expected in-cluster, got '%s'", what, v);
        if (out->kubeconfig[0])
            return fail(err, errlen, "%s: in-cluster and --kubeconfig exclude each other", what);
        out->kube_in_cluster = 1;
        cred = what;
    }
    out->kube_qps = 100;
    if ((v = flag_or_env(qps, "--kube-qps", "TRAINYARD_KUBE_QPS", &what))) {
        char *end;
        errno = 0;
        double q = strtod(v, &end);
        if (errno || end == v || *end || !(q >= 0 && q <= 100000))
            return fail(err, errlen, "%s: expected requests a second from 0 to 100000, got '%s'",
                        what, v);
        out->kube_qps = q;
        cred = cred ? cred : what;
    }
    out->kube_burst = 1000;
    if ((v = flag_or_env(burst, "--kube-burst", "TRAINYARD_KUBE_BURST", &what))) {
        if ((e = parse_count(v, what, 1, 100000, &out->kube_burst, err, errlen)))
            return e;
        cred = cred ? cred : what;
    }
    if (cred && !out->cluster_profile[0])
        return fail(err, errlen, "%s: the Kubernetes backend also needs --cluster-profile FILE",
                    cred);
    return TY_OK;
}

ty_err config_parse_serve(int argc, char **argv, config_serve *out, char *err, size_t errlen)
{
    const char *listen_arg = NULL, *db = NULL, *max_body = NULL, *level = NULL;
    const char *slots = NULL, *gpus = NULL, *grace = NULL;
    const char *max_conns = NULL, *max_per_ip = NULL, *deadline = NULL, *streams = NULL;
    const char *sandbox = NULL, *user = NULL, *log_limit = NULL;
    const char *job_log_limit = NULL, *disk_limit = NULL;
    const char *mpoints = NULL, *mretention = NULL, *dretention = NULL;
    const char *profile = NULL, *kubeconfig = NULL, *kctx = NULL, *kube = NULL, *qps = NULL,
               *burst = NULL;
    const char *hook_limits = NULL;
    int queue_flags = 0, allow_private = -1;
    ty_err e = TY_OK;

    memset(out, 0, sizeof *out);
    out->queue_limit = -1;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (is_help(argv[i])) {
            out->help = 1;
            return TY_OK;
        }
        if (strcmp(argv[i], "--notify-allow-private") == 0) {
            allow_private = 1;
            continue;
        }
        if ((r = opt_value(argc, argv, &i, "--listen", &v)) != 0)
            listen_arg = v;
        else if ((r = opt_value(argc, argv, &i, "--db", &v)) != 0)
            db = v;
        else if ((r = opt_value(argc, argv, &i, "--max-body", &v)) != 0)
            max_body = v;
        else if ((r = opt_value(argc, argv, &i, "--log-level", &v)) != 0)
            level = v;
        else if ((r = opt_value(argc, argv, &i, "--local-slots", &v)) != 0)
            slots = v;
        else if ((r = opt_value(argc, argv, &i, "--local-gpus", &v)) != 0)
            gpus = v;
        else if ((r = opt_value(argc, argv, &i, "--stop-grace", &v)) != 0)
            grace = v;
        else if ((r = opt_value(argc, argv, &i, "--max-connections-per-ip", &v)) != 0)
            max_per_ip = v;
        else if ((r = opt_value(argc, argv, &i, "--max-connections", &v)) != 0)
            max_conns = v;
        else if ((r = opt_value(argc, argv, &i, "--request-deadline", &v)) != 0)
            deadline = v;
        else if ((r = opt_value(argc, argv, &i, "--max-streams-per-token", &v)) != 0)
            streams = v;
        else if ((r = opt_value(argc, argv, &i, "--webhook-limits", &v)) != 0)
            hook_limits = v;
        else if ((r = opt_value(argc, argv, &i, "--metrics-max-points-per-job", &v)) != 0)
            mpoints = v;
        else if ((r = opt_value(argc, argv, &i, "--metrics-retention", &v)) != 0)
            mretention = v;
        else if ((r = opt_value(argc, argv, &i, "--delivery-retention", &v)) != 0)
            dretention = v;
        else if ((r = opt_value(argc, argv, &i, "--local-sandbox", &v)) != 0)
            sandbox = v;
        else if ((r = opt_value(argc, argv, &i, "--local-user", &v)) != 0)
            user = v;
        else if ((r = opt_value(argc, argv, &i, "--local-log-limit", &v)) != 0)
            log_limit = v;
        else if ((r = opt_value(argc, argv, &i, "--local-job-log-limit", &v)) != 0)
            job_log_limit = v;
        else if ((r = opt_value(argc, argv, &i, "--local-disk-limit", &v)) != 0)
            disk_limit = v;
        else if ((r = opt_value(argc, argv, &i, "--cluster-profile", &v)) != 0)
            profile = v;
        else if ((r = opt_value(argc, argv, &i, "--kubeconfig", &v)) != 0)
            kubeconfig = v;
        else if ((r = opt_value(argc, argv, &i, "--kube-context", &v)) != 0)
            kctx = v;
        else if ((r = opt_value(argc, argv, &i, "--kube-qps", &v)) != 0)
            qps = v;
        else if ((r = opt_value(argc, argv, &i, "--kube-burst", &v)) != 0)
            burst = v;
        else if ((r = opt_value(argc, argv, &i, "--kube", &v)) != 0)
            kube = v;
        else if ((r = opt_value(argc, argv, &i, "--queue-limit", &v)) != 0) {
            queue_flags = 1;
            if (r > 0 &&
                (e = parse_queue_limit(v, strlen(v), "--queue-limit", out, err, errlen)) != TY_OK)
                return e;
        } else
            return fail(err, errlen, "unknown argument '%s' for serve (see trainyard serve --help)",
                        argv[i]);
        if (r < 0)
            return fail(err, errlen, "option %s needs a value", argv[i]);
    }

    if (listen_arg) {
        e = config_parse_listen(listen_arg, &out->listen, err, errlen);
    } else if ((listen_arg = env("TRAINYARD_LISTEN"))) {
        e = config_parse_listen(listen_arg, &out->listen, err, errlen);
        if (e && err && errlen) {
            char inner[256];
            snprintf(inner, sizeof inner, "%s", err);
            snprintf(err, errlen, "TRAINYARD_LISTEN: %s", inner);
        }
    } else {
        e = config_parse_listen(CONFIG_DEFAULT_LISTEN, &out->listen, err, errlen);
    }
    if (e)
        return e;

    if (db)
        e = set_path(out->db_path, db, "--db", err, errlen);
    else if ((db = env("TRAINYARD_DB")))
        e = set_path(out->db_path, db, "TRAINYARD_DB", err, errlen);
    else
        e = set_path(out->db_path, CONFIG_DEFAULT_DB, "default db", err, errlen);
    if (e)
        return e;

    /* Each option below: the flag, else its variable, else the default already set. */
    const char *v, *what;
    out->max_body = CONFIG_DEFAULT_MAX_BODY;
    if ((v = flag_or_env(max_body, "--max-body", "TRAINYARD_MAX_BODY", &what)) &&
        (e = parse_max_body(v, what, &out->max_body, err, errlen)))
        return e;
    out->log_level = TY_LOG_INFO;
    if ((v = flag_or_env(level, "--log-level", "TRAINYARD_LOG_LEVEL", &what)) &&
        (e = parse_level(v, what, &out->log_level, err, errlen)))
        return e;
    if ((v = flag_or_env(slots, "--local-slots", "TRAINYARD_LOCAL_SLOTS", &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_SLOTS, &out->local_slots, err, errlen)))
        return e;
    out->local_gpus = -1;
    if ((v = flag_or_env(gpus, "--local-gpus", "TRAINYARD_LOCAL_GPUS", &what)) &&
        (e = parse_count(v, what, 0, 1024, &out->local_gpus, err, errlen)))
        return e;
    out->stop_grace_s = CONFIG_DEFAULT_STOP_GRACE;
    if ((v = flag_or_env(grace, "--stop-grace", "TRAINYARD_STOP_GRACE", &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_STOP_GRACE, &out->stop_grace_s, err, errlen)))
        return e;
    out->local_sandbox = 1;
    if ((v = flag_or_env(sandbox, "--local-sandbox", "TRAINYARD_LOCAL_SANDBOX", &what))) {
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
            return fail(err, errlen, "%s: expected on or off, got '%s'", what, v);
        out->local_sandbox = strcmp(v, "on") == 0;
    }
    if ((v = flag_or_env(user, "--local-user", "TRAINYARD_LOCAL_USER", &what))) {
        size_t n = strlen(v);
        if (n >= sizeof out->local_user || strspn(v, "abcdefghijklmnopqrstuvwxyz"
                                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
            return fail(err, errlen, "%s: '%s' is not a user name", what, v);
        memcpy(out->local_user, v, n + 1);
    }
    out->local_log_limit = CONFIG_DEFAULT_LOG_LIMIT;
    if ((v = flag_or_env(log_limit, "--local-log-limit", "TRAINYARD_LOCAL_LOG_LIMIT", &what))) {
        double b;
        if (ty_quantity_parse(v, strlen(v), &b) != TY_OK || b < CONFIG_MIN_LOG_LIMIT ||
            b > CONFIG_MAX_LOG_LIMIT)
            return fail(err, errlen, "%s: expected a size from 64Ki to 1Ti such as 256Mi, "
                        "got '%s'", what, v);
        out->local_log_limit = (long long)b;
    }
    if ((v = flag_or_env(job_log_limit, "--local-job-log-limit", "TRAINYARD_LOCAL_JOB_LOG_LIMIT",
                         &what))) {
        double b;
        if (ty_quantity_parse(v, strlen(v), &b) != TY_OK || b < CONFIG_MIN_LOG_LIMIT ||
            b > CONFIG_MAX_JOB_LOG_LIMIT)
            return fail(err, errlen, "%s: expected a size from 64Ki to 16Ti such as 1Gi, "
                        "got '%s'", what, v);
        out->local_job_log_limit = (long long)b;
    }
    out->local_disk_limit = CONFIG_DEFAULT_DISK_LIMIT;
    if ((v = flag_or_env(disk_limit, "--local-disk-limit", "TRAINYARD_LOCAL_DISK_LIMIT",
                         &what))) {
        double b;
        if (ty_quantity_parse(v, strlen(v), &b) != TY_OK || b < 0 || b > CONFIG_MAX_DISK_LIMIT ||
            (b > 0 && b < (1 << 20)))
            return fail(err, errlen, "%s: expected 0 (no limit) or a size from 1Mi to 1Pi such "
                        "as 10Gi, got '%s'", what, v);
        out->local_disk_limit = (long long)b;
    }
    out->max_connections = CONFIG_DEFAULT_MAX_CONNECTIONS;
    if ((v = flag_or_env(max_conns, "--max-connections", "TRAINYARD_MAX_CONNECTIONS", &what)) &&
        (e = parse_count(v, what, CONFIG_MIN_MAX_CONNECTIONS, CONFIG_MAX_MAX_CONNECTIONS,
                         &out->max_connections, err, errlen)))
        return e;
    out->max_connections_per_ip = CONFIG_DEFAULT_MAX_CONNECTIONS_PER_IP;
    if ((v = flag_or_env(max_per_ip, "--max-connections-per-ip",
                         "TRAINYARD_MAX_CONNECTIONS_PER_IP", &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_MAX_CONNECTIONS, &out->max_connections_per_ip,
                         err, errlen)))
        return e;
    out->request_deadline_s = CONFIG_DEFAULT_REQUEST_DEADLINE;
    if ((v = flag_or_env(deadline, "--request-deadline", "TRAINYARD_REQUEST_DEADLINE", &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_REQUEST_DEADLINE, &out->request_deadline_s, err,
                         errlen)))
        return e;
    out->max_streams_per_token = CONFIG_DEFAULT_MAX_STREAMS_PER_TOKEN;
    if ((v = flag_or_env(streams, "--max-streams-per-token", "TRAINYARD_MAX_STREAMS_PER_TOKEN",
                         &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_MAX_CONNECTIONS, &out->max_streams_per_token, err,
                         errlen)))
        return e;
    if ((v = flag_or_env(hook_limits, "--webhook-limits", "TRAINYARD_WEBHOOK_LIMITS", &what)) &&
        (e = parse_webhook_limits(v, what, &out->webhook_limits, err, errlen)))
        return e;
    out->metrics_max_points = CONFIG_DEFAULT_METRICS_MAX_POINTS;
    if ((v = flag_or_env(mpoints, "--metrics-max-points-per-job",
                         "TRAINYARD_METRICS_MAX_POINTS_PER_JOB", &what)) &&
        (e = parse_count(v, what, 1, CONFIG_MAX_METRICS_MAX_POINTS, &out->metrics_max_points, err,
                         errlen)))
        return e;
    out->metrics_retention_days = CONFIG_DEFAULT_METRICS_RETENTION;
    if ((v = flag_or_env(mretention, "--metrics-retention", "TRAINYARD_METRICS_RETENTION",
                         &what)) &&
        (e = parse_count(v, what, 0, CONFIG_MAX_RETENTION, &out->metrics_retention_days, err,
                         errlen)))
        return e;
    out->delivery_retention_days = CONFIG_DEFAULT_DELIVERY_RETENTION;
    if ((v = flag_or_env(dretention, "--delivery-retention", "TRAINYARD_DELIVERY_RETENTION",
                         &what)) &&
        (e = parse_count(v, what, 0, CONFIG_MAX_RETENTION, &out->delivery_retention_days, err,
                         errlen)))
        return e;
    if ((e = parse_kube(profile, kubeconfig, kctx, kube, qps, burst, out, err, errlen)) != TY_OK)
        return e;
    out->notify_allow_private = allow_private > 0;
    if (allow_private < 0 && (v = env("TRAINYARD_NOTIFY_ALLOW_PRIVATE"))) {
        static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false",
                                                                                    "no", "off"};
        size_t k = 0;
        while (k < 4 && strcmp(v, yes[k]) != 0 && strcmp(v, no[k]) != 0)
            k++;
        if (k == 4)
            return fail(err, errlen, "TRAINYARD_NOTIFY_ALLOW_PRIVATE: expected 1, true, yes, on, "
                        "0, false, no or off, got '%s'", v);
        out->notify_allow_private = strcmp(v, yes[k]) == 0;
    }
    const char *limits = queue_flags ? NULL : env("TRAINYARD_QUEUE_LIMIT");
    while (limits && *limits) {
        size_t n = strcspn(limits, ",");
        if ((e = parse_queue_limit(limits, n, "TRAINYARD_QUEUE_LIMIT", out, err, errlen)) != TY_OK)
            return e;
        limits += n + (limits[n] == ',');
    }
    return TY_OK;
}

ty_err config_parse_token(int argc, char **argv, config_token *out, char *err, size_t errlen)
{
    const char *db = NULL, *scope = NULL;
    ty_err e;

    memset(out, 0, sizeof *out);
    if (argc < 1 || is_help(argv[0])) {
        out->help = 1;
        if (argc < 1)
            return fail(err, errlen, "token needs an action: create, list or revoke");
        return TY_OK;
    }
    if (strcmp(argv[0], "create") == 0)
        out->action = CONFIG_TOKEN_CREATE;
    else if (strcmp(argv[0], "list") == 0)
        out->action = CONFIG_TOKEN_LIST;
    else if (strcmp(argv[0], "revoke") == 0)
        out->action = CONFIG_TOKEN_REVOKE;
    else
        return fail(err, errlen, "unknown token action '%s': expected create, list or revoke",
                    argv[0]);

    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (is_help(argv[i])) {
            out->help = 1;
            return TY_OK;
        }
        if ((r = opt_value(argc, argv, &i, "--db", &v)) != 0)
            db = v;
        else if ((r = opt_value(argc, argv, &i, "--server", &v)) != 0)
            out->server = v;
        else if ((r = opt_value(argc, argv, &i, "--token", &v)) != 0)
            out->token = v;
        else if ((r = opt_value(argc, argv, &i, "--token-file", &v)) != 0)
            out->token_file = v;
        else if ((r = opt_value(argc, argv, &i, "--name", &v)) != 0)
            out->name = v;
        else if ((r = opt_value(argc, argv, &i, "--scope", &v)) != 0)
            scope = v;
        else if ((r = opt_value(argc, argv, &i, "--team", &v)) != 0)
            out->team = v;
        else
            return fail(err, errlen,
                        "unknown argument '%s' for token %s (see trainyard token --help)",
                        argv[i], argv[0]);
        if (r < 0)
            return fail(err, errlen, "option %s needs a value", argv[i]);
    }

    if (!out->server)
        out->server = env("TRAINYARD_SERVER");
    if (out->token && out->token_file)
        return fail(err, errlen, "--token and --token-file exclude each other");
    if (!out->token && !out->token_file)
        out->token = env("TRAINYARD_TOKEN");
    if (out->token_file && !*out->token_file)
        return fail(err, errlen, "--token-file needs a path (or - for standard input)");
    if (db)
        e = set_path(out->db_path, db, "--db", err, errlen);
    else if ((db = env("TRAINYARD_DB")))
        e = set_path(out->db_path, db, "TRAINYARD_DB", err, errlen);
    else
        e = set_path(out->db_path, CONFIG_DEFAULT_DB, "default db", err, errlen);
    if (e)
        return e;

    if (out->action != CONFIG_TOKEN_LIST && (!out->name || !*out->name))
        return fail(err, errlen, "token %s needs --name", argv[0]);
    if (out->action == CONFIG_TOKEN_CREATE) {
        if (!scope)
            return fail(err, errlen, "token %s needs --scope (read, submit, admin)", argv[0]);
        e = config_parse_scopes(scope, &out->scopes, err, errlen);
        if (e)
            return e;
    } else if (scope) {
        return fail(err, errlen, "--scope only applies to token create");
    }
    if (out->team && out->action != CONFIG_TOKEN_CREATE)
        return fail(err, errlen, "--team only applies to token create");
    if (out->team && !*out->team)
        return fail(err, errlen, "--team needs a team name");
    if (out->server && !out->token_file && (!out->token || !*out->token))
        return fail(err, errlen, "--server needs --token-file, TRAINYARD_TOKEN or --token");
    return TY_OK;
}

void config_usage_serve(FILE *f)
{
    fputs("Usage: trainyard serve [OPTIONS]\n"
          "\n"
          "Runs the HTTP API server until SIGTERM or SIGINT, then finishes the requests\n"
          "in flight, closes the database and exits 0.\n"
          "\n"
          "Options (flags beat environment variables, which beat defaults):\n"
          "  --listen HOST:PORT    address to listen on: IPv4, [IPv6] or localhost;\n"
          "                        port 0 picks a free port (logged as \"listening\")\n"
          "                        env TRAINYARD_LISTEN, default " CONFIG_DEFAULT_LISTEN "\n"
          "  --db PATH             SQLite database file; its directory is created\n"
          "                        env TRAINYARD_DB, default " CONFIG_DEFAULT_DB "\n"
          "  --max-body BYTES      largest accepted request body (1..1073741824)\n"
          "                        env TRAINYARD_MAX_BODY, default 1048576\n"
          "  --log-level LEVEL     debug, info, warn or error\n"
          "                        env TRAINYARD_LOG_LEVEL, default info\n"
          "\n"
          "Connections (slow or hostile clients):\n"
          "  --max-connections N   connections open at once (16..65536); the last\n"
          "                        N/16 (at most 64) are kept for addresses holding\n"
          "                        at most one, and serve only /healthz, /readyz and\n"
          "                        /metrics\n"
          "                        env TRAINYARD_MAX_CONNECTIONS, default 1024\n"
          "  --max-connections-per-ip N\n"
          "                        connections open at once from one client address\n"
          "                        env TRAINYARD_MAX_CONNECTIONS_PER_IP, default 64\n"
          "  --request-deadline SECONDS\n"
          "                        a request's headers and body must arrive within\n"
          "                        this time from when the connection is ready for it\n"
          "                        (accepted, or the previous answer sent); later: 408\n"
          "                        and the connection closes. Idle keep-alive\n"
          "                        connections close after it too (1..3600)\n"
          "                        env TRAINYARD_REQUEST_DEADLINE, default 30\n"
          "  --max-streams-per-token N\n"
          "                        followed streams (events and logs with follow=true)\n"
          "                        one token holds at once; all tokens together hold at\n"
          "                        most half of --max-connections. Past either: 429\n"
          "                        env TRAINYARD_MAX_STREAMS_PER_TOKEN, default 32\n"
          "  --webhook-limits LIST deliveries to POST /v1/hooks/{name}: token buckets\n"
          "                        RATE/BURST (RATE a second) per client address (addr),\n"
          "                        per hook (hook) and for bad signatures per address\n"
          "                        (fail); past one: 429 with Retry-After, answered after\n"
          "                        at most delay ms (0: at once); any of them, e.g.\n"
          "                        addr=5/20,delay=0\n"
          "                        env TRAINYARD_WEBHOOK_LIMITS, default\n"
          "                        addr=10/50,hook=20/100,fail=0.1/10,delay=1000\n"
          "\n"
          "Metrics and retention:\n"
          "  --metrics-max-points-per-job N\n"
          "                        metric points one job may store (a step written\n"
          "                        again counts once); a report past it is refused\n"
          "                        whole with 413 (1..1000000000)\n"
          "                        env TRAINYARD_METRICS_MAX_POINTS_PER_JOB,\n"
          "                        default 1000000\n"
          "  --metrics-retention DAYS\n"
          "                        a job's metrics are deleted this many days after it\n"
          "                        ended, in the background (0: kept forever)\n"
          "                        env TRAINYARD_METRICS_RETENTION, default 30\n"
          "  --delivery-retention DAYS\n"
          "                        delivered and failed notification deliveries are\n"
          "                        deleted this many days after their last attempt\n"
          "                        (0: kept forever)\n"
          "                        env TRAINYARD_DELIVERY_RETENTION, default 7\n"
          "\n"
          "Running jobs (the local backend: every rank is a process on this machine):\n"
          "  --local-slots N       ranks that may run at once; a job starts only when all\n"
          "                        of its ranks fit\n"
          "                        env TRAINYARD_LOCAL_SLOTS, default twice the CPUs\n"
          "  --local-gpus N        GPUs to hand out with CUDA_VISIBLE_DEVICES\n"
          "                        env TRAINYARD_LOCAL_GPUS, default the /dev/nvidiaN devices\n"
          "  --queue-limit [Q=]N   jobs of a queue active at once: a number (0 pauses the\n"
          "                        queue: jobs wait) or 'unlimited'; N alone sets every\n"
          "                        queue, Q=N one queue; repeatable\n"
          "                        env TRAINYARD_QUEUE_LIMIT (comma-separated),\n"
          "                        default unlimited\n"
          "  --stop-grace SECONDS  time ranks get to exit after SIGTERM before SIGKILL\n"
          "                        env TRAINYARD_STOP_GRACE, default 10\n"
          "  --local-sandbox on|off  run every rank in its own sandbox (bubblewrap: own\n"
          "                        user, PID and mount namespaces, cgroup limits); off\n"
          "                        runs ranks as plain processes of the server's user\n"
          "                        env TRAINYARD_LOCAL_SANDBOX, default on\n"
          "  --local-user NAME     when the server runs as root, the user ranks run as\n"
          "                        env TRAINYARD_LOCAL_USER, default trainyard\n"
          "  --local-log-limit SIZE  bytes kept of each rank's log (e.g. 256Mi); past\n"
          "                        it the oldest output is dropped, and the log says so\n"
          "                        env TRAINYARD_LOCAL_LOG_LIMIT, default 256Mi\n"
          "  --local-job-log-limit SIZE  bytes a job's previous attempts' logs keep; when\n"
          "                        an attempt starts, the oldest attempts' logs are deleted\n"
          "                        past it (the current attempt's are never)\n"
          "                        env TRAINYARD_LOCAL_JOB_LOG_LIMIT, default 4 x the\n"
          "                        per-rank limit (1Gi)\n"
          "  --local-disk-limit SIZE  bytes a job's directory (working directory, output,\n"
          "                        checkpoints) may use; past it the job fails with\n"
          "                        reason DiskLimitExceeded; 0: no limit\n"
          "                        env TRAINYARD_LOCAL_DISK_LIMIT, default 10Gi\n"
          "\n"
          "Running jobs on Kubernetes (instead of the local backend):\n"
          "  --cluster-profile FILE  the cluster profile (YAML or JSON: namespace, zones,\n"
          "                        GPU types, capacity types, node groups; see\n"
          "                        deploy/cluster-profile.example.yaml); with it, every\n"
          "                        job runs as Kubernetes objects and needs an image\n"
          "                        env TRAINYARD_CLUSTER_PROFILE, default none\n"
          "  --kubeconfig PATH     the kubeconfig to use (its current context)\n"
          "                        env TRAINYARD_KUBECONFIG, default: in a pod, its\n"
          "                        service account\n"
          "  --kube-context NAME   a context of the kubeconfig other than the current one\n"
          "                        env TRAINYARD_KUBE_CONTEXT\n"
          "  --kube in-cluster     the pod's service account (token, CA, the\n"
          "                        KUBERNETES_SERVICE_HOST/PORT variables)\n"
          "                        env TRAINYARD_KUBE\n"
          "  --kube-qps N          API requests a second (0: no client-side limit)\n"
          "                        env TRAINYARD_KUBE_QPS, default 100\n"
          "  --kube-burst N        requests above the rate allowed in a burst\n"
          "                        env TRAINYARD_KUBE_BURST, default 1000\n"
          "\n"
          "Notifications out:\n"
          "  --notify-allow-private  let notification URLs name hosts whose addresses are\n"
          "                        not public (loopback, private, link-local such as the\n"
          "                        cloud metadata service, ...); without it such URLs are\n"
          "                        refused (422) and a delivery to one is refused\n"
          "                        env TRAINYARD_NOTIFY_ALLOW_PRIVATE (1 or 0), default off\n"
          "  --help                show this help\n"
          "\n"
          "On first start (no valid admin token in the database) an admin token named\n"
          "\"admin\" is created: the value of TRAINYARD_ADMIN_TOKEN when set, otherwise a\n"
          "generated one written to <database directory>/admin.token (mode 0600).\n",
          f);
}

void config_usage_token(FILE *f)
{
    fputs("Usage: trainyard token create --name NAME --scope SCOPE[,SCOPE...] [--team TEAM]\n"
          "                              [OPTIONS]\n"
          "       trainyard token list [OPTIONS]\n"
          "       trainyard token revoke --name NAME [OPTIONS]\n"
          "\n"
          "Manages API tokens. Scopes: read (GET), submit (submit and cancel jobs),\n"
          "admin (everything, tokens included). create prints the new token: it is\n"
          "shown only this once. Names are 1.." CONFIG_STR(API_TOKEN_MAX_NAME)
          " characters of [A-Za-z0-9._-], starting\n"
          "and ending with a letter or digit. A token acts for one team (--team, default\n"
          "\"default\"; the team must exist): it sees and acts on that team's jobs and\n"
          "sweeps only, unless it has the admin scope.\n"
          "\n"
          "By default the database file is changed directly (a running server sees the\n"
          "change within a second). With --server the HTTP API is used instead.\n"
          "\n"
          "Options:\n"
          "  --db PATH         database file; env TRAINYARD_DB, default " CONFIG_DEFAULT_DB "\n"
          "  --server URL      use the API at URL (e.g. http://127.0.0.1:8080);\n"
          "                    env TRAINYARD_SERVER\n"
          "  --token-file PATH read the admin token for --server from the first line of\n"
          "                    PATH, or of standard input with - (preferred: a token in\n"
          "                    the arguments is visible to every user in ps)\n"
          "  --token TOKEN     the admin token itself; - and @PATH read it as --token-file\n"
          "                    does; env TRAINYARD_TOKEN (same three forms)\n"
          "  --help            show this help\n",
          f);
}
