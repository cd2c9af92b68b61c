/*
 * kubeconfig.h - where the Kubernetes API server is and how to prove who we are.
 *
 * Two sources: a kubeconfig file (YAML or JSON, the format of `kubectl config view`) resolved
 * through its current context or a named one, and the in-cluster configuration of a pod with a
 * service account. Either gives a ty_kubeconfig holding:
 *   - the server URL and its TLS trust: `certificate-authority` (a file) or
 *     `certificate-authority-data` (base64 PEM), or `insecure-skip-tls-verify: true`;
 *   - credentials: a client certificate and key (`client-certificate(-data)`,
 *     `client-key(-data)`), a bearer `token` or `tokenFile`, or an `exec` credential plugin
 *     (`aws eks get-token ...`) that prints an ExecCredential of
 *     `client.authentication.k8s.io/v1` or `v1beta1`.
 * Relative paths in a kubeconfig (files and an exec command containing '/') are resolved against
 * the kubeconfig's own directory, as kubectl does. Files named by the kubeconfig are read once at
 * load, except token files, which are re-read whenever they change (service-account tokens rotate).
 *
 * Credentials: ty_kubeconfig_credentials() returns a copy of the current ones. An exec plugin's
 * token is cached until TY_KUBE_RENEW_BEFORE_MS before its expirationTimestamp (a plugin that gives
 * none is cached until a caller asks for renewal, e.g. after a 401). The plugin runs without a
 * shell, with its args, the server's environment plus its `env` entries and KUBERNETES_EXEC_INFO;
 * stdin is /dev/null; it must finish within TY_KUBE_EXEC_TIMEOUT_MS.
 *
 * Threads: load and free from one thread; every other function may be called from any thread
 * (credentials are guarded by a mutex; a renewal runs the plugin once for all waiting threads).
 * Errors name the file, the key and what is wrong; they never contain a token or a key.
 */
#ifndef TY_SCHEDULER_KUBE_KUBECONFIG_H
#define TY_SCHEDULER_KUBE_KUBECONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

/* How long before an exec token's expiry it is renewed. */
#define TY_KUBE_RENEW_BEFORE_MS 60000
/* How long an exec credential plugin may run. */
#define TY_KUBE_EXEC_TIMEOUT_MS 30000
/* Cap on any file or plugin output read here. */
#define TY_KUBE_MAX_FILE (4u << 20)

typedef struct ty_kubeconfig ty_kubeconfig;

/* Where the in-cluster configuration lives; NULL fields take the defaults named. */
typedef struct ty_kube_incluster {
    const char *token_path;      /* /var/run/secrets/kubernetes.io/serviceaccount/token */
    const char *ca_path;         /* /var/run/secrets/kubernetes.io/serviceaccount/ca.crt */
    const char *namespace_path;  /* /var/run/secrets/kubernetes.io/serviceaccount/namespace */
    const char *host;            /* getenv("KUBERNETES_SERVICE_HOST") */
    const char *port;            /* getenv("KUBERNETES_SERVICE_PORT") */
} ty_kube_incluster;

/* The server's TLS settings; pointers borrowed from the ty_kubeconfig, immutable after load. */
typedef struct ty_kube_tls {
    const char *ca_pem;          /* PEM bundle to trust, or NULL for the system's trust store */
    size_t ca_len;
    int insecure;                /* insecure-skip-tls-verify: no verification at all */
} ty_kube_tls;

/* A copy of the current credentials; every field owned, cleared by ty_kube_cred_clear(). */
typedef struct ty_kube_cred {
    char *token;                 /* bearer token, NUL-terminated, or NULL */
    char *cert_pem;              /* client certificate (PEM) or NULL */
    size_t cert_len;
    char *key_pem;               /* its private key (PEM) or NULL */
    size_t key_len;
    int64_t expires_ms;          /* exec credentials' expiry (ms since the epoch), 0 if none */
} ty_kube_cred;

/*
 * Loads the kubeconfig at `path` and resolves `context` (NULL: its current-context).
 * TY_OK: *out is new. TY_EIO: a file cannot be read; TY_EINVAL: the content is wrong
 * (err says file, key and reason); TY_ENOMEM. An exec plugin is not run here.
 */
ty_err ty_kubeconfig_load(const char *path, const char *context, ty_kubeconfig **out,
                          char *err, size_t errlen);

/*
 * The configuration of a pod with a service account (ic may be NULL for every default).
 * TY_EINVAL when KUBERNETES_SERVICE_HOST/PORT are unset (not in a pod); TY_EIO when the token or
 * CA cannot be read.
 */
ty_err ty_kubeconfig_in_cluster(const ty_kube_incluster *ic, ty_kubeconfig **out, char *err,
                                size_t errlen);

/* Accepts NULL. */
void ty_kubeconfig_free(ty_kubeconfig *kc);

/* "https://host:port" (no trailing '/'); borrowed. */
const char *ty_kubeconfig_server(const ty_kubeconfig *kc);
/* The context's namespace, the pod's namespace in cluster, else "default"; borrowed. */
const char *ty_kubeconfig_namespace(const ty_kubeconfig *kc);
/* The resolved context's name ("in-cluster" in a pod); borrowed. */
const char *ty_kubeconfig_context(const ty_kubeconfig *kc);
void ty_kubeconfig_tls(const ty_kubeconfig *kc, ty_kube_tls *out);

/*
 * Fills *out with a copy of the credentials to send now, refreshing what is stale: a token file
 * that changed is re-read, an exec token near its expiry is renewed. renew != 0 (the server
 * answered 401) drops the cached exec credential and re-reads token files first.
 * TY_OK: *out is owned by the caller. TY_EAUTH: the plugin failed or printed something wrong, or a
 * token file cannot be read (err says which and why). TY_ENOMEM.
 */
ty_err ty_kubeconfig_credentials(ty_kubeconfig *kc, int renew, ty_kube_cred *out, char *err,
                                 size_t errlen);
/* How many times an exec plugin ran successfully; for tests and logs. */
uint64_t ty_kubeconfig_exec_runs(ty_kubeconfig *kc);

/* Frees the fields and zeroes *c (the key is wiped first); accepts a zeroed struct. */
void ty_kube_cred_clear(ty_kube_cred *c);

#endif
