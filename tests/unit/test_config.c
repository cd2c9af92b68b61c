/*
 * test_config.c - flags > environment > defaults, listen addresses, scopes,
 * token subcommand arguments and the error messages for bad values.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/config.h"
#include "store/store.h"

static const char *const env_names[] = {
    "TRAINYARD_LISTEN", "TRAINYARD_DB",     "TRAINYARD_MAX_BODY",
    "TRAINYARD_LOG_LEVEL", "TRAINYARD_SERVER", "TRAINYARD_TOKEN",
    "TRAINYARD_LOCAL_SLOTS", "TRAINYARD_LOCAL_GPUS", "TRAINYARD_QUEUE_LIMIT",
    "TRAINYARD_STOP_GRACE", "TRAINYARD_MAX_CONNECTIONS", "TRAINYARD_MAX_CONNECTIONS_PER_IP",
    "TRAINYARD_REQUEST_DEADLINE", "TRAINYARD_LOCAL_SANDBOX", "TRAINYARD_LOCAL_USER",
    "TRAINYARD_LOCAL_LOG_LIMIT", "TRAINYARD_LOCAL_JOB_LOG_LIMIT", "TRAINYARD_LOCAL_DISK_LIMIT",
    "TRAINYARD_CLUSTER_PROFILE", "TRAINYARD_KUBECONFIG",
    "TRAINYARD_KUBE_CONTEXT", "TRAINYARD_KUBE", "TRAINYARD_KUBE_QPS", "TRAINYARD_KUBE_BURST",
    "TRAINYARD_NOTIFY_ALLOW_PRIVATE", "TRAINYARD_MAX_STREAMS_PER_TOKEN",
    "TRAINYARD_METRICS_MAX_POINTS_PER_JOB", "TRAINYARD_METRICS_RETENTION",
    "TRAINYARD_DELIVERY_RETENTION",
};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        unsetenv(env_names[i]);
    return 0;
}

/* Parses a NULL-terminated argument list for serve. */
static ty_err serve_args(config_serve *cfg, char *err, size_t errlen, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) && argc < 16;)
        argv[argc++] = a;
    va_end(ap);
    return config_parse_serve(argc, argv, cfg, err, errlen);
}

static ty_err token_args(config_token *cfg, char *err, size_t errlen, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) && argc < 16;)
        argv[argc++] = a;
    va_end(ap);
    return config_parse_token(argc, argv, cfg, err, errlen);
}

static void test_serve_defaults(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_false(c.help);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 8080);
    assert_int_equal(c.listen.addr.ss_family, AF_INET);
    assert_string_equal(c.db_path, "./data/trainyard.db");
    assert_int_equal(c.max_body, 1048576);
    assert_int_equal(c.log_level, TY_LOG_INFO);
}

static void test_serve_env(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    setenv("TRAINYARD_LISTEN", "0.0.0.0:9000", 1);
    setenv("TRAINYARD_DB", "/tmp/x/y.db", 1);
    setenv("TRAINYARD_MAX_BODY", "4096", 1);
    setenv("TRAINYARD_LOG_LEVEL", "debug", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 9000);
    assert_string_equal(c.db_path, "/tmp/x/y.db");
    assert_int_equal(c.max_body, 4096);
    assert_int_equal(c.log_level, TY_LOG_DEBUG);
}

static void test_serve_flags_beat_env(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    setenv("TRAINYARD_LISTEN", "0.0.0.0:9000", 1);
    setenv("TRAINYARD_DB", "/tmp/x/y.db", 1);
    setenv("TRAINYARD_MAX_BODY", "4096", 1);
    setenv("TRAINYARD_LOG_LEVEL", "debug", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, "--listen", "127.0.0.1:0", "--db=/d/e.db",
                                "--max-body", "100", "--log-level=error", NULL),
                     TY_OK);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 0);
    assert_string_equal(c.db_path, "/d/e.db");
    assert_int_equal(c.max_body, 100);
    assert_int_equal(c.log_level, TY_LOG_ERROR);
}

static void test_serve_empty_env_is_unset(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    setenv("TRAINYARD_LISTEN", "", 1);
    setenv("TRAINYARD_MAX_BODY", "", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.listen.port, 8080);
    assert_int_equal(c.max_body, 1048576);
}

static void test_serve_help(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, "--help", NULL), TY_OK);
    assert_true(c.help);
    /* --help wins over everything else on the line. */
    assert_int_equal(serve_args(&c, err, sizeof err, "--listen", "x", "-h", NULL), TY_OK);
    assert_true(c.help);
}

typedef struct {
    const char *args[3];
    const char *msg; /* a fragment the error must contain */
} bad_case;

static const bad_case bad_serve[] = {
    {{"--listen", "nope"}, "invalid listen address 'nope'"},
    {{"--listen", "1.2.3.4"}, "expected HOST:PORT"},
    {{"--listen", "1.2.3.4:70000"}, "port must be 0..65535"},
    {{"--listen", "1.2.3.4:"}, "port must be 0..65535"},
    {{"--listen", "1.2.3.4:8x"}, "port must be 0..65535"},
    {{"--listen", "1.2.3.4:-1"}, "port must be 0..65535"},
    {{"--listen", "1.2.3.4:+80"}, "port must be 0..65535"},
    {{"--listen", ":80"}, "invalid listen address"},
    {{"--listen", "1.2.3:80"}, "IPv4"},
    {{"--listen", "example.com:80"}, "IPv4"},
    {{"--listen", "::1:80"}, "IPv4"},
    {{"--listen", "[::1]80"}, "[IPv6]:PORT"},
    {{"--listen", "[zz]:80"}, "bad IPv6 address"},
    {{"--listen", "[]:80"}, "bad IPv6 address"},
    {{"--max-body", "0"}, "invalid --max-body '0'"},
    {{"--max-body", "-1"}, "invalid --max-body"},
    {{"--max-body", "abc"}, "invalid --max-body"},
    {{"--max-body", "10k"}, "invalid --max-body"},
    {{"--max-body", "2000000000"}, "invalid --max-body"},
    {{"--max-body", "99999999999999999999999"}, "invalid --max-body"},
    {{"--log-level", "loud"}, "invalid --log-level 'loud'"},
    {{"--db", ""}, "--db must not be empty"},
    {{"--bogus"}, "unknown argument '--bogus'"},
    {{"extra"}, "unknown argument 'extra'"},
    {{"--listen"}, "option --listen needs a value"},
    {{"--max-body"}, "option --max-body needs a value"},
};

static void test_serve_bad_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_serve / sizeof bad_serve[0]; i++) {
        const bad_case *b = &bad_serve[i];
        config_serve c;
        char err[256] = "";
        ty_err e = serve_args(&c, err, sizeof err, b->args[0], b->args[1], b->args[2], NULL);
        if (e != TY_EINVAL || !strstr(err, b->msg))
            print_message("case %zu: got '%s', want '%s'\n", i, err, b->msg);
        assert_int_equal(e, TY_EINVAL);
        assert_non_null(strstr(err, b->msg));
    }
}

static void test_serve_bad_env_names_the_variable(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    setenv("TRAINYARD_LISTEN", "nope", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_LISTEN"));
    /* A valid flag overrides a bad environment value. */
    assert_int_equal(serve_args(&c, err, sizeof err, "--listen", "127.0.0.1:1", NULL), TY_OK);
    unsetenv("TRAINYARD_LISTEN");

    setenv("TRAINYARD_MAX_BODY", "lots", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_MAX_BODY"));
    unsetenv("TRAINYARD_MAX_BODY");

    setenv("TRAINYARD_LOG_LEVEL", "chatty", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_LOG_LEVEL"));
}

/* The listener's limits against slow and hostile clients. */
static void test_serve_connection_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.max_connections, 1024);
    assert_int_equal(c.max_connections_per_ip, 64);
    assert_int_equal(c.request_deadline_s, 30);

    assert_int_equal(serve_args(&c, err, sizeof err, "--max-connections", "2000",
                                "--max-connections-per-ip=8", "--request-deadline", "2", NULL),
                     TY_OK);
    assert_int_equal(c.max_connections, 2000);
    assert_int_equal(c.max_connections_per_ip, 8);
    assert_int_equal(c.request_deadline_s, 2);

    setenv("TRAINYARD_MAX_CONNECTIONS", "100", 1);
    setenv("TRAINYARD_MAX_CONNECTIONS_PER_IP", "3", 1);
    setenv("TRAINYARD_REQUEST_DEADLINE", "600", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.max_connections, 100);
    assert_int_equal(c.max_connections_per_ip, 3);
    assert_int_equal(c.request_deadline_s, 600);
    /* Flags beat the variables, one by one. */
    assert_int_equal(serve_args(&c, err, sizeof err, "--max-connections-per-ip", "5", NULL),
                     TY_OK);
    assert_int_equal(c.max_connections, 100);
    assert_int_equal(c.max_connections_per_ip, 5);

    static const struct {
        const char *flag, *value, *msg;
    } bad[] = {
        {"--max-connections", "15",
         "invalid --max-connections '15': expected an integer, 16..65536"},
        {"--max-connections", "65537", "invalid --max-connections '65537'"},
        {"--max-connections", "1k", "invalid --max-connections '1k'"},
        {"--max-connections-per-ip", "0", "invalid --max-connections-per-ip '0'"},
        {"--max-connections-per-ip", "-1", "invalid --max-connections-per-ip '-1'"},
        {"--request-deadline", "0",
         "invalid --request-deadline '0': expected an integer, 1..3600"},
        {"--request-deadline", "3601", "invalid --request-deadline '3601'"},
        {"--request-deadline", "2.5", "invalid --request-deadline '2.5'"},
        {"--request-deadline", NULL, "option --request-deadline needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ty_err e = serve_args(&c, err, sizeof err, bad[i].flag, bad[i].value, NULL);
        if (e != TY_EINVAL || !strstr(err, bad[i].msg))
            print_message("case %zu: got '%s', want '%s'\n", i, err, bad[i].msg);
        assert_int_equal(e, TY_EINVAL);
        assert_non_null(strstr(err, bad[i].msg));
    }
    /* A bad variable is named in the message. */
    setenv("TRAINYARD_REQUEST_DEADLINE", "soon", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_REQUEST_DEADLINE"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--request-deadline", "5", NULL), TY_OK);
}

/* The cap on one token's followed streams: its default, flag, variable and range. */
static void test_serve_stream_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.max_streams_per_token, 32);
    assert_int_equal(serve_args(&c, err, sizeof err, "--max-streams-per-token", "3", NULL), TY_OK);
    assert_int_equal(c.max_streams_per_token, 3);
    setenv("TRAINYARD_MAX_STREAMS_PER_TOKEN", "200", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.max_streams_per_token, 200);
    assert_int_equal(serve_args(&c, err, sizeof err, "--max-streams-per-token=4", NULL), TY_OK);
    assert_int_equal(c.max_streams_per_token, 4);
    static const char *const bad[] = {"0", "65537", "-1", "many"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(serve_args(&c, err, sizeof err, "--max-streams-per-token", bad[i], NULL),
                         TY_EINVAL);
        assert_non_null(strstr(err, "invalid --max-streams-per-token"));
    }
    setenv("TRAINYARD_MAX_STREAMS_PER_TOKEN", "lots", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_MAX_STREAMS_PER_TOKEN"));
}

/* The metrics cap and the two retentions: defaults, flags, variables, ranges (0 = forever). */
static void test_serve_metrics_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.metrics_max_points, 1000000);
    assert_int_equal(c.metrics_retention_days, 30);
    assert_int_equal(c.delivery_retention_days, 7);
    assert_int_equal(serve_args(&c, err, sizeof err, "--metrics-max-points-per-job", "50",
                                "--metrics-retention=0", "--delivery-retention", "1", NULL),
                     TY_OK);
    assert_int_equal(c.metrics_max_points, 50);
    assert_int_equal(c.metrics_retention_days, 0);
    assert_int_equal(c.delivery_retention_days, 1);
    setenv("TRAINYARD_METRICS_MAX_POINTS_PER_JOB", "2000", 1);
    setenv("TRAINYARD_METRICS_RETENTION", "90", 1);
    setenv("TRAINYARD_DELIVERY_RETENTION", "0", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, "--metrics-retention", "5", NULL), TY_OK);
    assert_int_equal(c.metrics_max_points, 2000);
    assert_int_equal(c.metrics_retention_days, 5); /* the flag beats the variable */
    assert_int_equal(c.delivery_retention_days, 0);
    static const struct {
        const char *flag, *value;
    } bad[] = {
        {"--metrics-max-points-per-job", "0"}, {"--metrics-max-points-per-job", "1000000001"},
        {"--metrics-max-points-per-job", "1e6"}, {"--metrics-retention", "-1"},
        {"--metrics-retention", "36501"},     {"--delivery-retention", "7d"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(serve_args(&c, err, sizeof err, bad[i].flag, bad[i].value, NULL),
                         TY_EINVAL);
        assert_non_null(strstr(err, bad[i].flag));
    }
    setenv("TRAINYARD_DELIVERY_RETENTION", "week", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_DELIVERY_RETENTION"));
}

typedef struct {
    const char *text;
    int family;
    const char *host;
    unsigned port;
} listen_case;

static const listen_case good_listen[] = {
    {"127.0.0.1:8080", AF_INET, "127.0.0.1", 8080},
    {"0.0.0.0:0", AF_INET, "0.0.0.0", 0},
    {"localhost:65535", AF_INET, "127.0.0.1", 65535},
    {"[::1]:0", AF_INET6, "::1", 0},
    {"[::]:443", AF_INET6, "::", 443},
    {"[fe80::1:2]:80", AF_INET6, "fe80::1:2", 80},
};

/* The local backend's and the scheduler's options. */
static void test_serve_job_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.local_slots, 0); /* twice the CPUs, decided by the backend */
    assert_int_equal(c.local_gpus, -1); /* detected */
    assert_int_equal(c.queue_limit, -1); /* unlimited */
    assert_int_equal(c.nqueue_limits, 0);
    assert_int_equal(c.stop_grace_s, 10);

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-slots", "3", "--local-gpus=0",
                                "--queue-limit", "2", "--queue-limit", "research=1",
                                "--queue-limit", "research=4", "--stop-grace", "1", NULL),
                     TY_OK);
    assert_int_equal(c.local_slots, 3);
    assert_int_equal(c.local_gpus, 0);
    assert_int_equal(c.queue_limit, 2);
    assert_int_equal(c.nqueue_limits, 1); /* the later value for a queue wins */
    assert_string_equal(c.queue_limits[0].queue, "research");
    assert_int_equal(c.queue_limits[0].limit, 4);
    assert_int_equal(c.stop_grace_s, 1);

    assert_int_equal(serve_args(&c, err, sizeof err, "--queue-limit", "0", "--queue-limit",
                                "vip=unlimited", NULL),
                     TY_OK);
    assert_int_equal(c.queue_limit, 0); /* paused */
    assert_int_equal(c.queue_limits[0].limit, -1);

    setenv("TRAINYARD_QUEUE_LIMIT", "5,fast=0,slow=1", 1);
    setenv("TRAINYARD_LOCAL_SLOTS", "8", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.local_slots, 8);
    assert_int_equal(c.queue_limit, 5);
    assert_int_equal(c.nqueue_limits, 2);
    assert_string_equal(c.queue_limits[1].queue, "slow");
    assert_int_equal(c.queue_limits[1].limit, 1);
    /* A flag replaces the whole variable. */
    assert_int_equal(serve_args(&c, err, sizeof err, "--queue-limit", "fast=2", NULL), TY_OK);
    assert_int_equal(c.queue_limit, -1);
    assert_int_equal(c.nqueue_limits, 1);

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-slots", "0", NULL), TY_EINVAL);
    assert_non_null(strstr(err, "--local-slots"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--queue-limit", "Bad_Queue=1", NULL),
                     TY_EINVAL);
    assert_non_null(strstr(err, "DNS label"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--queue-limit", "q=-1", NULL), TY_EINVAL);
    assert_int_equal(serve_args(&c, err, sizeof err, "--stop-grace", "0", NULL), TY_EINVAL);
    setenv("TRAINYARD_LOCAL_GPUS", "many", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_LOCAL_GPUS"));
}

/* The sandbox of local ranks: on unless turned off explicitly; its user and log limit. */
static void test_serve_sandbox_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.local_sandbox, 1);
    assert_string_equal(c.local_user, "");
    assert_int_equal(c.local_log_limit, 256LL << 20);

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-sandbox=off", "--local-user",
                                "jobs", "--local-log-limit", "1Mi", NULL),
                     TY_OK);
    assert_int_equal(c.local_sandbox, 0);
    assert_string_equal(c.local_user, "jobs");
    assert_int_equal(c.local_log_limit, 1LL << 20);

    setenv("TRAINYARD_LOCAL_LOG_LIMIT", "1048576", 1);
    setenv("TRAINYARD_LOCAL_SANDBOX", "off", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-sandbox", "on", NULL), TY_OK);
    assert_int_equal(c.local_sandbox, 1); /* the flag beats the variable */
    assert_int_equal(c.local_log_limit, 1048576);

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-sandbox", "no", NULL), TY_EINVAL);
    assert_non_null(strstr(err, "--local-sandbox"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-user", "a b", NULL), TY_EINVAL);
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-log-limit", "1k", NULL), TY_EINVAL);
    assert_non_null(strstr(err, "--local-log-limit"));
    setenv("TRAINYARD_LOCAL_LOG_LIMIT", "lots", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-sandbox=on", NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_LOCAL_LOG_LIMIT"));
}

/* Notifications to private addresses: off unless the switch or its variable says so. */
static void test_serve_notify_allow_private(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.notify_allow_private, 0);
    assert_int_equal(serve_args(&c, err, sizeof err, "--notify-allow-private", NULL), TY_OK);
    assert_int_equal(c.notify_allow_private, 1);
    setenv("TRAINYARD_NOTIFY_ALLOW_PRIVATE", "true", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.notify_allow_private, 1);
    setenv("TRAINYARD_NOTIFY_ALLOW_PRIVATE", "0", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.notify_allow_private, 0);
    assert_int_equal(serve_args(&c, err, sizeof err, "--notify-allow-private", NULL), TY_OK);
    assert_int_equal(c.notify_allow_private, 1); /* the switch beats the variable */
    setenv("TRAINYARD_NOTIFY_ALLOW_PRIVATE", "maybe", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_NOTIFY_ALLOW_PRIVATE"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--notify-allow-private=1", NULL), TY_EINVAL);
}

/* The disk limit of a job's directory and the total of a job's logs across attempts. */
static void test_serve_disk_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.local_disk_limit, 10LL << 30);
    assert_int_equal(c.local_job_log_limit, 0); /* the backend's default: 4 x per rank */

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-disk-limit", "1Gi",
                                "--local-job-log-limit=2Gi", NULL),
                     TY_OK);
    assert_int_equal(c.local_disk_limit, 1LL << 30);
    assert_int_equal(c.local_job_log_limit, 2LL << 30);
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-disk-limit", "0", NULL), TY_OK);
    assert_int_equal(c.local_disk_limit, 0); /* none */

    setenv("TRAINYARD_LOCAL_DISK_LIMIT", "20Gi", 1);
    setenv("TRAINYARD_LOCAL_JOB_LOG_LIMIT", "64Mi", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_int_equal(c.local_disk_limit, 20LL << 30);
    assert_int_equal(c.local_job_log_limit, 64LL << 20);

    assert_int_equal(serve_args(&c, err, sizeof err, "--local-disk-limit", "-1Gi", NULL),
                     TY_EINVAL);
    assert_non_null(strstr(err, "--local-disk-limit"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-disk-limit", "1k", NULL), TY_EINVAL);
    assert_int_equal(serve_args(&c, err, sizeof err, "--local-job-log-limit", "1k", NULL),
                     TY_EINVAL);
    assert_non_null(strstr(err, "--local-job-log-limit"));
    setenv("TRAINYARD_LOCAL_DISK_LIMIT", "lots", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_LOCAL_DISK_LIMIT"));
}

static void test_serve_kube_options(void **state)
{
    (void)state;
    config_serve c;
    char err[256];
    /* Without a profile: the local backend, as before. */
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_string_equal(c.cluster_profile, "");
    assert_int_equal(c.kube_in_cluster, 0);
    assert_true(c.kube_qps == 100);
    assert_int_equal(c.kube_burst, 1000);

    assert_int_equal(serve_args(&c, err, sizeof err, "--cluster-profile", "p.yaml", "--kubeconfig",
                                "/k/config", "--kube-context=eks", "--kube-qps", "0",
                                "--kube-burst", "50", NULL),
                     TY_OK);
    assert_string_equal(c.cluster_profile, "p.yaml");
    assert_string_equal(c.kubeconfig, "/k/config");
    assert_string_equal(c.kube_context, "eks");
    assert_true(c.kube_qps == 0);
    assert_int_equal(c.kube_burst, 50);

    setenv("TRAINYARD_CLUSTER_PROFILE", "/etc/trainyard/profile.yaml", 1);
    setenv("TRAINYARD_KUBE", "in-cluster", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_string_equal(c.cluster_profile, "/etc/trainyard/profile.yaml");
    assert_int_equal(c.kube_in_cluster, 1);

    /* Credentials or client options without a profile would be silently unused. */
    unsetenv("TRAINYARD_CLUSTER_PROFILE");
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_EINVAL);
    assert_non_null(strstr(err, "TRAINYARD_KUBE"));
    assert_non_null(strstr(err, "--cluster-profile"));
    unsetenv("TRAINYARD_KUBE");
    assert_int_equal(serve_args(&c, err, sizeof err, "--kubeconfig", "k", NULL), TY_EINVAL);
    assert_non_null(strstr(err, "--kubeconfig"));

    assert_int_equal(serve_args(&c, err, sizeof err, "--cluster-profile", "p", "--kube", "local",
                                NULL),
                     TY_EINVAL);
    assert_non_null(strstr(err, "in-cluster"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--cluster-profile", "p", "--kube",
                                "in-cluster", "--kubeconfig", "k", NULL),
                     TY_EINVAL);
    assert_int_equal(serve_args(&c, err, sizeof err, "--cluster-profile", "p", "--kube-qps", "-1",
                                NULL),
                     TY_EINVAL);
    assert_non_null(strstr(err, "--kube-qps"));
    assert_int_equal(serve_args(&c, err, sizeof err, "--cluster-profile", "p", "--kube-burst", "0",
                                NULL),
                     TY_EINVAL);
}

/* --webhook-limits: any subset of addr, hook, fail (RATE/BURST) and delay, in any order; the
 * rest keep their defaults (zeros). */
static const struct {
    const char *text;
    int ok;
    double addr_rate, addr_burst, fail_rate, fail_burst;
    int delay_ms;
} webhook_limit_cases[] = {
    {"addr=5/20", 1, 5, 20, 0, 0, 0},
    {"fail=0.5/3,addr=100/200,delay=250", 1, 100, 200, 0.5, 3, 250},
    {"delay=0", 1, 0, 0, 0, 0, -1},
    {"hook=1/1", 1, 0, 0, 0, 0, 0},
    {"addr=5", 0, 0, 0, 0, 0, 0},
    {"addr=0/5", 0, 0, 0, 0, 0, 0},
    {"addr=5/0.5", 0, 0, 0, 0, 0, 0},
    {"addr=nan/5", 0, 0, 0, 0, 0, 0},
    {"ip=5/5", 0, 0, 0, 0, 0, 0},
    {"delay=-1", 0, 0, 0, 0, 0, 0},
    {"delay=60001", 0, 0, 0, 0, 0, 0},
    {"addr=5/20,,delay=1", 0, 0, 0, 0, 0, 0},
    {"", 1, 0, 0, 0, 0, 0},
};

static void test_serve_webhook_limits(void **state)
{
    (void)state;
    config_serve c;
    char err[512];
    unsetenv("TRAINYARD_WEBHOOK_LIMITS");
    for (size_t i = 0; i < sizeof webhook_limit_cases / sizeof webhook_limit_cases[0]; i++) {
        ty_err e = serve_args(&c, err, sizeof err, "--webhook-limits", webhook_limit_cases[i].text,
                              NULL);
        if (!webhook_limit_cases[i].ok) {
            assert_int_equal(e, TY_EINVAL);
            assert_non_null(strstr(err, "--webhook-limits"));
            continue;
        }
        if (e != TY_OK)
            fail_msg("'%s': %s", webhook_limit_cases[i].text, err);
        assert_true(c.webhook_limits.addr.rate == webhook_limit_cases[i].addr_rate);
        assert_true(c.webhook_limits.addr.burst == webhook_limit_cases[i].addr_burst);
        assert_true(c.webhook_limits.fail.rate == webhook_limit_cases[i].fail_rate);
        assert_true(c.webhook_limits.fail.burst == webhook_limit_cases[i].fail_burst);
        assert_int_equal(c.webhook_limits.delay_ms, webhook_limit_cases[i].delay_ms);
    }
    setenv("TRAINYARD_WEBHOOK_LIMITS", "hook=7/9", 1);
    assert_int_equal(serve_args(&c, err, sizeof err, NULL), TY_OK);
    assert_true(c.webhook_limits.hook.rate == 7 && c.webhook_limits.hook.burst == 9);
    unsetenv("TRAINYARD_WEBHOOK_LIMITS");
}

static void test_listen_good(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good_listen / sizeof good_listen[0]; i++) {
        const listen_case *lc = &good_listen[i];
        config_listen l;
        char err[256];
        assert_int_equal(config_parse_listen(lc->text, &l, err, sizeof err), TY_OK);
        assert_int_equal(l.addr.ss_family, lc->family);
        assert_string_equal(l.host, lc->host);
        assert_int_equal(l.port, lc->port);
        if (lc->family == AF_INET) {
            assert_int_equal(l.addrlen, sizeof(struct sockaddr_in));
            assert_int_equal(ntohs(((struct sockaddr_in *)&l.addr)->sin_port), lc->port);
        } else {
            assert_int_equal(l.addrlen, sizeof(struct sockaddr_in6));
            assert_int_equal(ntohs(((struct sockaddr_in6 *)&l.addr)->sin6_port), lc->port);
        }
    }
}

static void test_format_addr(void **state)
{
    (void)state;
    char buf[CONFIG_ADDR_LEN];
    config_format_addr("127.0.0.1", AF_INET, 41234, buf, sizeof buf);
    assert_string_equal(buf, "127.0.0.1:41234");
    config_format_addr("::1", AF_INET6, 80, buf, sizeof buf);
    assert_string_equal(buf, "[::1]:80");
}

static void test_scopes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        ty_err want;
        unsigned bits;
    } cases[] = {
        {"read", TY_OK, STORE_SCOPE_READ},
        {"submit,read", TY_OK, STORE_SCOPE_SUBMIT | STORE_SCOPE_READ},
        {"admin", TY_OK, STORE_SCOPE_ADMIN},
        {"read,submit,admin", TY_OK, STORE_SCOPE_READ | STORE_SCOPE_SUBMIT | STORE_SCOPE_ADMIN},
        {"", TY_EINVAL, 0},
        {"read,", TY_EINVAL, 0},
        {",read", TY_EINVAL, 0},
        {"read,read", TY_EINVAL, 0},
        {"Read", TY_EINVAL, 0},
        {"write", TY_EINVAL, 0},
        {"read submit", TY_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned bits = 0;
        char err[256];
        assert_int_equal(config_parse_scopes(cases[i].text, &bits, err, sizeof err),
                         cases[i].want);
        if (cases[i].want == TY_OK)
            assert_int_equal(bits, cases[i].bits);
    }
    char buf[64];
    config_format_scopes(STORE_SCOPE_SUBMIT | STORE_SCOPE_READ, buf, sizeof buf);
    assert_string_equal(buf, "read,submit");
}

static void test_token_args(void **state)
{
    (void)state;
    config_token t;
    char err[256];

    assert_int_equal(token_args(&t, err, sizeof err, "create", "--name", "ci", "--scope",
                                "submit,read", NULL),
                     TY_OK);
    assert_int_equal(t.action, CONFIG_TOKEN_CREATE);
    assert_string_equal(t.name, "ci");
    assert_int_equal(t.scopes, STORE_SCOPE_SUBMIT | STORE_SCOPE_READ);
    assert_string_equal(t.db_path, "./data/trainyard.db");
    assert_null(t.server);

    setenv("TRAINYARD_DB", "/env/t.db", 1);
    assert_int_equal(token_args(&t, err, sizeof err, "list", NULL), TY_OK);
    assert_int_equal(t.action, CONFIG_TOKEN_LIST);
    assert_string_equal(t.db_path, "/env/t.db");
    assert_int_equal(token_args(&t, err, sizeof err, "list", "--db", "/flag.db", NULL), TY_OK);
    assert_string_equal(t.db_path, "/flag.db");

    assert_int_equal(token_args(&t, err, sizeof err, "revoke", "--name=ci", NULL), TY_OK);
    assert_int_equal(t.action, CONFIG_TOKEN_REVOKE);
    assert_string_equal(t.name, "ci");

    setenv("TRAINYARD_SERVER", "http://127.0.0.1:1", 1);
    setenv("TRAINYARD_TOKEN", "ty_env", 1);
    assert_int_equal(token_args(&t, err, sizeof err, "list", NULL), TY_OK);
    assert_string_equal(t.server, "http://127.0.0.1:1");
    assert_string_equal(t.token, "ty_env");
    assert_int_equal(token_args(&t, err, sizeof err, "list", "--token", "ty_flag", NULL), TY_OK);
    assert_string_equal(t.token, "ty_flag");

    assert_int_equal(token_args(&t, err, sizeof err, "--help", NULL), TY_OK);
    assert_true(t.help);
    assert_int_equal(token_args(&t, err, sizeof err, "create", "--help", NULL), TY_OK);
    assert_true(t.help);
}

static const bad_case bad_token[] = {
    {{"create", "--name", "ci"}, "needs --scope"},
    {{"create", "--scope", "read"}, "needs --name"},
    {{"revoke"}, "needs --name"},
    {{"list", "--scope", "read"}, "--scope only applies"},
    {{"list", "--server", "http://x"}, "--server needs --token"},
    {{"destroy"}, "unknown token action 'destroy'"},
    {{"list", "--nope"}, "unknown argument '--nope'"},
    {{"list", "--db"}, "option --db needs a value"},
};

static void test_token_bad_args(void **state)
{
    (void)state;
    config_token t;
    char err[256];
    for (size_t i = 0; i < sizeof bad_token / sizeof bad_token[0]; i++) {
        const bad_case *b = &bad_token[i];
        ty_err e = token_args(&t, err, sizeof err, b->args[0], b->args[1], b->args[2], NULL);
        if (e != TY_EINVAL || !strstr(err, b->msg))
            print_message("case %zu: got '%s', want '%s'\n", i, err, b->msg);
        assert_int_equal(e, TY_EINVAL);
        assert_non_null(strstr(err, b->msg));
    }
    /* No action at all: an error that also asks for the usage text. */
    assert_int_equal(config_parse_token(0, NULL, &t, err, sizeof err), TY_EINVAL);
    assert_true(t.help);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_serve_defaults, clear_env),
        cmocka_unit_test_setup(test_serve_env, clear_env),
        cmocka_unit_test_setup(test_serve_flags_beat_env, clear_env),
        cmocka_unit_test_setup(test_serve_empty_env_is_unset, clear_env),
        cmocka_unit_test_setup(test_serve_help, clear_env),
        cmocka_unit_test_setup(test_serve_bad_values, clear_env),
        cmocka_unit_test_setup(test_serve_bad_env_names_the_variable, clear_env),
        cmocka_unit_test_setup(test_serve_sandbox_options, clear_env),
        cmocka_unit_test_setup(test_serve_disk_options, clear_env),
        cmocka_unit_test_setup(test_serve_job_options, clear_env),
        cmocka_unit_test_setup(test_serve_connection_options, clear_env),
        cmocka_unit_test_setup(test_serve_stream_options, clear_env),
        cmocka_unit_test_setup(test_serve_metrics_options, clear_env),
        cmocka_unit_test_setup(test_serve_kube_options, clear_env),
        cmocka_unit_test_setup(test_serve_notify_allow_private, clear_env),
        cmocka_unit_test_setup(test_serve_webhook_limits, clear_env),
        cmocka_unit_test(test_listen_good),
        cmocka_unit_test(test_format_addr),
        cmocka_unit_test(test_scopes),
        cmocka_unit_test_setup(test_token_args, clear_env),
        cmocka_unit_test_setup(test_token_bad_args, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
