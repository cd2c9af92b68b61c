/*
 * test_kubeconfig.c - kubeconfig contexts, credentials from files, tokens and exec plugins,
 * in-cluster configuration, and the errors a person gets for a wrong file.
 * Fixtures: tests/fixtures/kubeconfig (see its README.md).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty_time.h"
#include "scheduler/kube/kubeconfig.h"

#define FIX TY_KUBECONFIG_FIXTURES

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

typedef struct tmp {
    char dir[64];
    char count[96];         /* the exec plugin's call counter */
} tmp;

static int setup_tmp(void **state)
{
    tmp *t = calloc(1, sizeof(*t));
    snprintf(t->dir, sizeof(t->dir), "/tmp/ty-kubeconfig-XXXXXX");
    if (!t || !mkdtemp(t->dir))
        return -1;
    snprintf(t->count, sizeof(t->count), "%s/count", t->dir);
    setenv("TY_EXEC_COUNT", t->count, 1);
    unsetenv("TY_EXEC_EXPIRY");
    *state = t;
    return 0;
}

static int teardown_tmp(void **state)
{
    tmp *t = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    if (system(cmd) != 0)
        return -1;
    free(t);
    return 0;
}

static int exec_count(const tmp *t)
{
    FILE *f = fopen(t->count, "r");
    int n = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &n) != 1)
        n = -1;
    fclose(f);
    return n;
}

static void assert_file_bytes(const char *pem, size_t len, const char *file)
{
    size_t flen;
    char *want = slurp(file, &flen);
    assert_non_null(pem);
    assert_int_equal(len, flen);
    assert_memory_equal(pem, want, flen);
    free(want);
}

/* The current context: CA and client certificate read from files next to the kubeconfig. */
static void test_current_context_files(void **state)
{
    ty_kubeconfig *kc = NULL;
    ty_kube_tls tls;
    ty_kube_cred cred = {0};
    char err[512] = "";
    (void)state;
    assert_int_equal(ty_kubeconfig_load(FIX "/files.yaml", NULL, &kc, err, sizeof(err)), TY_OK);
    assert_string_equal(ty_kubeconfig_context(kc), "dev");
    assert_string_equal(ty_kubeconfig_server(kc), "https://dev.example.com:6443");
    assert_string_equal(ty_kubeconfig_namespace(kc), "training");
    ty_kubeconfig_tls(kc, &tls);
    assert_false(tls.insecure);
    assert_file_bytes(tls.ca_pem, tls.ca_len, FIX "/ca.crt");
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_null(cred.token);
    assert_file_bytes(cred.cert_pem, cred.cert_len, FIX "/client.crt");
    assert_file_bytes(cred.key_pem, cred.key_len, FIX "/client.key");
    ty_kube_cred_clear(&cred);
    ty_kubeconfig_free(kc);
}

/* A named context: base64 CA data decodes to the same PEM; a static token. */
static void test_named_context_data_and_token(void **state)
{
    ty_kubeconfig *kc = NULL;
    ty_kube_tls tls;
    ty_kube_cred cred = {0};
    char err[512] = "";
    (void)state;
    assert_int_equal(ty_kubeconfig_load(FIX "/files.yaml", "data", &kc, err, sizeof(err)),
                     TY_OK);
    assert_string_equal(ty_kubeconfig_server(kc), "https://10.0.0.1");
    assert_string_equal(ty_kubeconfig_namespace(kc), "default");
    ty_kubeconfig_tls(kc, &tls);
    assert_file_bytes(tls.ca_pem, tls.ca_len, FIX "/ca.crt");
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "static-token-123");
    assert_null(cred.cert_pem);
    ty_kube_cred_clear(&cred);
    ty_kubeconfig_free(kc);

    assert_int_equal(ty_kubeconfig_load(FIX "/files.yaml", "lab", &kc, err, sizeof(err)), TY_OK);
    ty_kubeconfig_tls(kc, &tls);
    assert_true(tls.insecure);
    assert_null(tls.ca_pem);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "token-from-file");
    ty_kube_cred_clear(&cred);
    ty_kubeconfig_free(kc);
}

/* A tokenFile that is rewritten (rotated) is read again. */
static void test_token_file_rotation(void **state)
{
    tmp *t = *state;
    char path[128], tok[128], err[512] = "";
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    snprintf(path, sizeof(path), "%s/config", t->dir);
    snprintf(tok, sizeof(tok), "%s/sa-token", t->dir);
    spit(tok, "first-token\n");
    spit(path, "clusters: [{name: c, cluster: {server: 'https://k:443'}}]\n"
               "users: [{name: u, user: {tokenFile: sa-token}}]\n"
               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
               "current-context: x\n");
    assert_int_equal(ty_kubeconfig_load(path, NULL, &kc, err, sizeof(err)), TY_OK);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "first-token");
    ty_kube_cred_clear(&cred);
    spit(tok, "second-token-after-rotation\n");
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "second-token-after-rotation");
    ty_kube_cred_clear(&cred);
    /* A token file that disappears is an authentication error naming the file. */
    assert_int_equal(unlink(tok), 0);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_EAUTH);
    assert_non_null(strstr(err, "sa-token"));
    ty_kubeconfig_free(kc);
}

/* The exec plugin of either API version: run once, its token cached while it is fresh. */
static void exec_cached(tmp *t, const char *file)
{
    char err[512] = "", exp[40];
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    ty_time_format_rfc3339(ty_time_now_ms() + 3600 * 1000, exp, sizeof(exp));
    setenv("TY_EXEC_EXPIRY", exp, 1);
    unlink(t->count);
    assert_int_equal(ty_kubeconfig_load(file, NULL, &kc, err, sizeof(err)), TY_OK);
    assert_string_equal(ty_kubeconfig_namespace(kc), "jobs");
    assert_int_equal(exec_count(t), 0);     /* loading runs nothing */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
        /* The env of the kubeconfig reached the plugin (AWS_PROFILE). */
        assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.1");
        assert_true(cred.expires_ms > ty_time_now_ms());
        ty_kube_cred_clear(&cred);
    }
    assert_int_equal(exec_count(t), 1);
    /* After a 401 the caller asks for renewal: the plugin runs again. */
    assert_int_equal(ty_kubeconfig_credentials(kc, 1, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.2");
    ty_kube_cred_clear(&cred);
    assert_int_equal(exec_count(t), 2);
    assert_int_equal(ty_kubeconfig_exec_runs(kc), 2);
    ty_kubeconfig_free(kc);
}

static void test_exec_v1beta1_cached(void **state)
{
    exec_cached(*state, FIX "/exec-v1beta1.yaml");
}

static void test_exec_v1_cached(void **state)
{
    exec_cached(*state, FIX "/exec-v1.yaml");
}

/* A token expired, or expiring within a minute, is renewed before it is handed out. */
static void test_exec_expired_renewed(void **state)
{
    tmp *t = *state;
    char err[512] = "", exp[40];
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    ty_time_format_rfc3339(ty_time_now_ms() - 5000, exp, sizeof(exp));
    setenv("TY_EXEC_EXPIRY", exp, 1);
    assert_int_equal(ty_kubeconfig_load(FIX "/exec-v1.yaml", NULL, &kc, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.1");
    ty_kube_cred_clear(&cred);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.2");
    ty_kube_cred_clear(&cred);
    /* 30 s left is inside the renewal window. */
    ty_time_format_rfc3339(ty_time_now_ms() + 30000, exp, sizeof(exp));
    setenv("TY_EXEC_EXPIRY", exp, 1);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.3");
    ty_kube_cred_clear(&cred);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "k8s-aws-v1.gpu-team.4");
    ty_kube_cred_clear(&cred);
    assert_int_equal(exec_count(t), 4);
    ty_kubeconfig_free(kc);
}

/* Without expirationTimestamp the token is kept until someone asks for renewal. */
static void test_exec_no_expiry_kept(void **state)
{
    tmp *t = *state;
    char err[512] = "";
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    assert_int_equal(ty_kubeconfig_load(FIX "/exec-v1beta1.yaml", NULL, &kc, err, sizeof(err)),
                     TY_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
        assert_int_equal(cred.expires_ms, 0);
        ty_kube_cred_clear(&cred);
    }
    assert_int_equal(exec_count(t), 1);
    ty_kubeconfig_free(kc);
}

static void *get_cred(void *arg)
{
    ty_kubeconfig *kc = arg;
    ty_kube_cred cred = {0};
    char err[512];
    if (ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)) != TY_OK || !cred.token ||
        strcmp(cred.token, "k8s-aws-v1.gpu-team.1") != 0)
        return (void *)1;
    ty_kube_cred_clear(&cred);
    return NULL;
}

/* Threads asking at once share one run of the plugin. */
static void test_exec_threads_share_one_run(void **state)
{
    tmp *t = *state;
    char err[512] = "";
    ty_kubeconfig *kc = NULL;
    pthread_t th[6];
    assert_int_equal(ty_kubeconfig_load(FIX "/exec-v1.yaml", NULL, &kc, err, sizeof(err)),
                     TY_OK);
    for (int i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&th[i], NULL, get_cred, kc), 0);
    for (int i = 0; i < 6; i++) {
        void *ret = (void *)1;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    assert_int_equal(exec_count(t), 1);
    ty_kubeconfig_free(kc);
}

/* A plugin may answer with a client certificate and key instead of a token. */
static void test_exec_client_cert(void **state)
{
    char err[512] = "";
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    (void)state;
    assert_int_equal(ty_kubeconfig_load(FIX "/exec-v1.yaml", "eks-cert", &kc, err, sizeof(err)),
                     TY_OK);
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_null(cred.token);
    assert_file_bytes(cred.cert_pem, cred.cert_len, FIX "/client.crt");
    assert_file_bytes(cred.key_pem, cred.key_len, FIX "/client.key");
    ty_kube_cred_clear(&cred);
    ty_kubeconfig_free(kc);
}

/* What a person reads when the plugin fails or answers wrongly. */
static void test_exec_errors(void **state)
{
    static const struct {
        const char *file, *context, *want1, *want2;
    } cases[] = {
        {FIX "/exec-v1beta1.yaml", "eks-fail", "exited with status 255", "ExpiredToken"},
        {FIX "/exec-v1.yaml", "eks-garbage", "printed no JSON ExecCredential", "exec-plugin.sh"},
        {FIX "/exec-v1.yaml", "eks-wrong-version",
         "apiVersion client.authentication.k8s.io/v1beta1",
         "asks for client.authentication.k8s.io/v1"},
        {FIX "/exec-v1beta1.yaml", "eks-wrong-version",
         "apiVersion client.authentication.k8s.io/v1,",
         "asks for client.authentication.k8s.io/v1beta1"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        ty_kubeconfig *kc = NULL;
        ty_kube_cred cred = {0};
        assert_int_equal(ty_kubeconfig_load(cases[i].file, cases[i].context, &kc, err,
                                            sizeof(err)), TY_OK);
        assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_EAUTH);
        if (!strstr(err, cases[i].want1) || !strstr(err, cases[i].want2))
            fail_msg("case %zu: %s", i, err);
        assert_null(cred.token);
        ty_kubeconfig_free(kc);
    }
}

/* What `aws eks update-kubeconfig` writes loads; a missing CLI is told with its install hint. */
static void test_aws_style(void **state)
{
    char err[512] = "";
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    ty_kube_tls tls;
    (void)state;
    assert_int_equal(ty_kubeconfig_load(FIX "/eks-update-kubeconfig.yaml", NULL, &kc, err,
                                        sizeof(err)), TY_OK);
    assert_string_equal(ty_kubeconfig_server(kc), "https://0123456789ABCDEF0123456789ABCDEF"
                                                  ".gr7.us-west-2.eks.amazonaws.com");
    assert_string_equal(ty_kubeconfig_context(kc),
                        "arn:aws:eks:us-west-2:111122223333:cluster/gpu-training");
    assert_string_equal(ty_kubeconfig_namespace(kc), "default");
    ty_kubeconfig_tls(kc, &tls);
    assert_file_bytes(tls.ca_pem, tls.ca_len, FIX "/ca.crt");
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_EAUTH);
    assert_non_null(strstr(err, "cannot run ty-test-no-such-aws-cli: No such file or directory. "
                                "Install the AWS CLI v2"));
    ty_kubeconfig_free(kc);
}

/* A pod's service account: env, CA bundle, namespace, and a token that rotates. */
static void test_in_cluster(void **state)
{
    tmp *t = *state;
    char tok[128], ca[128], ns[128], err[512] = "";
    ty_kubeconfig *kc = NULL;
    ty_kube_cred cred = {0};
    ty_kube_tls tls;
    ty_kube_incluster ic = {0};
    snprintf(tok, sizeof(tok), "%s/token", t->dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", t->dir);
    snprintf(ns, sizeof(ns), "%s/namespace", t->dir);
    spit(tok, "sa-token-1");
    spit(ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    spit(ns, "trainyard\n");
    ic.token_path = tok;
    ic.ca_path = ca;
    ic.namespace_path = ns;

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(ty_kubeconfig_in_cluster(&ic, &kc, err, sizeof(err)), TY_OK);
    assert_string_equal(ty_kubeconfig_server(kc), "https://10.96.0.1:443");
    assert_string_equal(ty_kubeconfig_namespace(kc), "trainyard");
    ty_kubeconfig_tls(kc, &tls);
    assert_int_equal(tls.ca_len, strlen("-----BEGIN CERTIFICATE-----\nMIIB\n"
                                        "-----END CERTIFICATE-----\n"));
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "sa-token-1");
    ty_kube_cred_clear(&cred);
    /* The kubelet rotates the projected token: the next request carries the new one. */
    spit(tok, "sa-token-2-rotated");
    assert_int_equal(ty_kubeconfig_credentials(kc, 0, &cred, err, sizeof(err)), TY_OK);
    assert_string_equal(cred.token, "sa-token-2-rotated");
    ty_kube_cred_clear(&cred);
    ty_kubeconfig_free(kc);

    /* An IPv6 service address is bracketed. */
    ic.host = "fd00::1";
    ic.port = "6443";
    assert_int_equal(ty_kubeconfig_in_cluster(&ic, &kc, err, sizeof(err)), TY_OK);
    assert_string_equal(ty_kubeconfig_server(kc), "https://[fd00::1]:6443");
    ty_kubeconfig_free(kc);

    /* Outside a pod. */
    ic.host = ic.port = NULL;
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(ty_kubeconfig_in_cluster(&ic, &kc, err, sizeof(err)), TY_EINVAL);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    /* No CA bundle. */
    ic.host = "10.96.0.1";
    ic.port = "443";
    ic.ca_path = "/nonexistent/ca.crt";
    assert_int_equal(ty_kubeconfig_in_cluster(&ic, &kc, err, sizeof(err)), TY_EIO);
    assert_non_null(strstr(err, "/nonexistent/ca.crt"));
}

/* Wrong kubeconfigs: the message names the file, the key and what is wrong. */
static void test_load_errors(void **state)
{
    static const struct {
        const char *text, *context;
        ty_err rc;
        const char *want;
    } cases[] = {
        {"current-context: x\nclusters: [ {name: c\n", NULL, TY_EINVAL, "line "},
        {"- just\n- a list\n", NULL, TY_EINVAL, "not a mapping"},
        {"clusters: []\n", NULL, TY_EINVAL, "current-context: missing"},
        {"current-context: prod\ncontexts: [{name: dev, context: {cluster: c}}]\n", NULL,
         TY_EINVAL, "contexts: no context named \"prod\""},
        {"current-context: dev\ncontexts: [{name: dev, context: {cluster: c}}]\n", NULL,
         TY_EINVAL, "names cluster \"c\", which clusters does not hold"},
        {"contexts: [{name: dev, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'k8s.example.com'}}]\n", "dev", TY_EINVAL,
         "clusters[\"c\"].cluster.server: not an http(s):// URL"},
        {"contexts: [{name: dev, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k', certificate-authority: nope.crt}}]\n",
         "dev", TY_EIO, "clusters[\"c\"].cluster.certificate-authority: cannot read "},
        {"contexts: [{name: dev, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k', "
         "certificate-authority-data: '!!not base64!!'}}]\n",
         "dev", TY_EINVAL, "certificate-authority-data: not valid base64"},
        {"contexts: [{name: dev, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k', insecure-skip-tls-verify: maybe}}]\n",
         "dev", TY_EINVAL, "insecure-skip-tls-verify: not true or false"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {client-certificate-data: 'QUJD'}}]\n",
         "dev", TY_EINVAL, "users[\"u\"].user: client-certificate without client-key"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1alpha1, "
         "command: aws}}}]\n",
         "dev", TY_EINVAL, "users[\"u\"].user.exec.apiVersion: \"client.authentication.k8s.io/"
         "v1alpha1\", expected"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, "
         "command: aws, env: [{name: AWS_PROFILE}]}}}]\n",
         "dev", TY_EINVAL, "users[\"u\"].user.exec.env[0]: needs a name and a value"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {auth-provider: {name: gcp}}}]\n",
         "dev", TY_EINVAL, "auth-provider: not supported"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n",
         "dev", TY_EINVAL, "names user \"u\", which users does not hold"},
        {"contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {tokenFile: no-such-token}}]\n",
         "dev", TY_EIO, "users[\"u\"].user.tokenFile: "},
    };
    tmp *t = *state;
    char path[128];
    snprintf(path, sizeof(path), "%s/bad.yaml", t->dir);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        ty_kubeconfig *kc = NULL;
        ty_err rc;
        spit(path, cases[i].text);
        rc = ty_kubeconfig_load(path, cases[i].context, &kc, err, sizeof(err));
        if (rc != cases[i].rc || !strstr(err, cases[i].want) || !strstr(err, path))
            fail_msg("case %zu: %s: %s", i, ty_strerror(rc), err);
        assert_null(kc);
    }
    {
        char err[512] = "";
        ty_kubeconfig *kc = NULL;
        assert_int_equal(ty_kubeconfig_load("/nonexistent/config", NULL, &kc, err, sizeof(err)),
                         TY_EIO);
        assert_non_null(strstr(err, "/nonexistent/config"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_context_files),
        cmocka_unit_test(test_named_context_data_and_token),
        cmocka_unit_test_setup_teardown(test_token_file_rotation, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_v1beta1_cached, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_v1_cached, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_expired_renewed, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_no_expiry_kept, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_threads_share_one_run, setup_tmp,
                                        teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_client_cert, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_exec_errors, setup_tmp, teardown_tmp),
        cmocka_unit_test(test_aws_style),
        cmocka_unit_test_setup_teardown(test_in_cluster, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_load_errors, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
