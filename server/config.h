/*
 * config.h - command-line and environment configuration of `trainyard`.
 *
 * Precedence: a flag beats its environment variable, which beats the default.
 * An environment variable set to the empty string counts as unset. Flags take
 * their value as "--flag VALUE" or "--flag=VALUE". Parsing never prints and
 * never exits: errors come back as TY_EINVAL with a one-line message naming
 * the flag or variable and the offending value, and main() decides what to do.
 *
 *   serve:  --listen HOST:PORT   TRAINYARD_LISTEN     127.0.0.1:8080
 *           --db PATH            TRAINYARD_DB         ./data/trainyard.db
 *           --max-body BYTES     TRAINYARD_MAX_BODY   1048576
 *           --log-level LEVEL    TRAINYARD_LOG_LEVEL  info
 *           --local-slots N      TRAINYARD_LOCAL_SLOTS  twice the online CPUs
 *           --local-gpus N       TRAINYARD_LOCAL_GPUS   the /dev/nvidia<N> devices
 *           --queue-limit [Q=]N  TRAINYARD_QUEUE_LIMIT  unlimited; N is a count (0 pauses
 *                                the queue) or "unlimited"; repeatable, the env
 *                                variable takes a comma-separated list
 *           --stop-grace SECS    TRAINYARD_STOP_GRACE   10
 *           --local-sandbox on|off  TRAINYARD_LOCAL_SANDBOX  on
 *           --local-user NAME    TRAINYARD_LOCAL_USER   trainyard (when root)
 *           --local-log-limit SIZE  TRAINYARD_LOCAL_LOG_LIMIT  256Mi (a quantity)
 *           --local-job-log-limit SIZE  TRAINYARD_LOCAL_JOB_LOG_LIMIT  4 x the per-rank limit
 *           --local-disk-limit SIZE  TRAINYARD_LOCAL_DISK_LIMIT  10Gi (0: none)
 *           --max-connections N  TRAINYARD_MAX_CONNECTIONS  1024 (16..65536)
 *           --max-connections-per-ip N  TRAINYARD_MAX_CONNECTIONS_PER_IP  64 (1..65536)
 *           --request-deadline SECS  TRAINYARD_REQUEST_DEADLINE  30 (1..3600)
 *           --max-streams-per-token N  TRAINYARD_MAX_STREAMS_PER_TOKEN  32 (1..65536): followed
 *                                streams one token holds at once; all tokens together
 *                                hold at most half of --max-connections (api/streams.h)
 *           --webhook-limits LIST  TRAINYARD_WEBHOOK_LIMITS  addr=10/50,hook=20/100,
 *                                fail=0.1/10,delay=1000: the token buckets (RATE a second /
 *                                BURST) of POST /v1/hooks per client address, per hook and
 *                                for bad signatures per address, and the longest wait
 *                                before a 429 in ms (0: none); any of them, in any order
 *           --metrics-max-points-per-job N  TRAINYARD_METRICS_MAX_POINTS_PER_JOB  1000000
 *           --metrics-retention DAYS  TRAINYARD_METRICS_RETENTION  30 (0: forever): a job's
 *                                metrics are deleted this long after it ended
 *           --delivery-retention DAYS  TRAINYARD_DELIVERY_RETENTION  7 (0: forever):
 *                                delivered and failed notification deliveries, after it
 *           --cluster-profile FILE  TRAINYARD_CLUSTER_PROFILE  none: jobs run on the local
 *                                backend; with it, on Kubernetes (the Kubernetes backend)
 *           --kubeconfig PATH    TRAINYARD_KUBECONFIG   none: in a pod, the service account
 *           --kube-context NAME  TRAINYARD_KUBE_CONTEXT  the kubeconfig's current context
 *           --kube in-cluster    TRAINYARD_KUBE         the service account even outside a pod
 *           --kube-qps N         TRAINYARD_KUBE_QPS     5 (0: no client-side rate limit)
 *           --kube-burst N       TRAINYARD_KUBE_BURST   10
 *           --notify-allow-private  TRAINYARD_NOTIFY_ALLOW_PRIVATE  off: notifications go
 *                                to public addresses only (common/ty_addr.h); a switch,
 *                                the variable takes 1/true/yes/on or 0/false/no/off
 *   token:  --db PATH, --server URL (TRAINYARD_SERVER), --token T (TRAINYARD_TOKEN),
 *           --token-file PATH|-, --name N, --scope S[,S...]
 */
#ifndef TY_SERVER_CONFIG_H
#define TY_SERVER_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#include "common/ty_error.h"
#include "common/ty_log.h"

#define CONFIG_DEFAULT_LISTEN "127.0.0.1:8080"
#define CONFIG_DEFAULT_DB "./data/trainyard.db"
#define CONFIG_DEFAULT_MAX_BODY ((size_t)1 << 20)
#define CONFIG_MAX_MAX_BODY ((size_t)1 << 30)
#define CONFIG_PATH_MAX 4096
#define CONFIG_MAX_QUEUE_LIMITS 64
#define CONFIG_QUEUE_NAME_MAX 64
#define CONFIG_DEFAULT_STOP_GRACE 10
#define CONFIG_MAX_SLOTS 65536
#define CONFIG_MAX_STOP_GRACE 3600
#define CONFIG_DEFAULT_LOG_LIMIT (256LL << 20)
#define CONFIG_MIN_LOG_LIMIT (64LL << 10)
#define CONFIG_MAX_LOG_LIMIT (1LL << 40)
#define CONFIG_DEFAULT_DISK_LIMIT (10LL << 30)
#define CONFIG_MAX_DISK_LIMIT (1LL << 50)
#define CONFIG_MAX_JOB_LOG_LIMIT (16LL << 40)
#define CONFIG_DEFAULT_MAX_CONNECTIONS 1024
#define CONFIG_MIN_MAX_CONNECTIONS 16
#define CONFIG_MAX_MAX_CONNECTIONS 65536
#define CONFIG_DEFAULT_MAX_CONNECTIONS_PER_IP 64
#define CONFIG_DEFAULT_REQUEST_DEADLINE 30
#define CONFIG_MAX_REQUEST_DEADLINE 3600
#define CONFIG_DEFAULT_MAX_STREAMS_PER_TOKEN 32
#define CONFIG_DEFAULT_METRICS_MAX_POINTS 1000000
#define CONFIG_MAX_METRICS_MAX_POINTS 1000000000
#define CONFIG_DEFAULT_METRICS_RETENTION 30 /* days */
#define CONFIG_DEFAULT_DELIVERY_RETENTION 7 /* days */
#define CONFIG_MAX_RETENTION 36500          /* days */

/* Longest HOST:PORT text: "[" + IPv6 text (45) + "]:" + 5 digits + NUL, rounded up. */
#define CONFIG_ADDR_LEN 64

/* A listening address. */
typedef struct config_listen {
    struct sockaddr_storage addr;  /* AF_INET or AF_INET6, port in network order */
    socklen_t addrlen;
    char host[CONFIG_ADDR_LEN];    /* "127.0.0.1" or "::1" (no brackets) */
    unsigned port;                 /* 0 = ephemeral */
} config_listen;

/* A token bucket: rate tokens a second, at most burst; 0 for the default. */
typedef struct config_bucket {
    double rate, burst;
} config_bucket;

/* --webhook-limits (api_hook_limits in api/api.h). */
typedef struct config_webhook_limits {
    config_bucket addr, hook, fail;
    int delay_ms;                  /* 0: the default; -1: 429 at once */
} config_webhook_limits;

/* A concurrency limit for one queue. */
typedef struct config_queue_limit {
    char queue[CONFIG_QUEUE_NAME_MAX];
    int limit;                     /* active jobs at once; 0 = paused, -1 = unlimited */
} config_queue_limit;

typedef struct config_serve {
    int help;                      /* --help given: print usage, nothing else is valid */
    config_listen listen;
    char db_path[CONFIG_PATH_MAX];
    size_t max_body;               /* bytes, 1..CONFIG_MAX_MAX_BODY */
    ty_log_level log_level;
    int local_slots;               /* 0 = twice the online CPUs */
    int local_gpus;                /* -1 = count the GPU devices */
    int queue_limit;               /* every queue's limit unless overridden; -1 = unlimited */
    config_queue_limit queue_limits[CONFIG_MAX_QUEUE_LIMITS];
    size_t nqueue_limits;
    int stop_grace_s;              /* SIGTERM to SIGKILL, seconds */
    int local_sandbox;             /* 1 (default): ranks in sandboxes; 0: --local-sandbox=off */
    char local_user[64];           /* --local-user, "" for the default */
    long long local_log_limit;     /* bytes kept per rank log */
    long long local_job_log_limit; /* bytes a job's previous attempts' logs keep; 0: 4 x the
                                      per-rank limit */
    long long local_disk_limit;    /* bytes a job's directory may use; 0: no limit */
    int max_connections;           /* open at once, CONFIG_MIN_MAX_CONNECTIONS.. */
    int max_connections_per_ip;    /* open at once per client address, 1.. */
    int request_deadline_s;        /* a request's headers and body must arrive within it */
    int max_streams_per_token;     /* followed streams of one token at once, 1.. */
    config_webhook_limits webhook_limits; /* --webhook-limits; zeros take the defaults */
    int metrics_max_points;        /* metric points one job may store, 1.. */
    int metrics_retention_days;    /* a job's metrics kept after its end; 0: forever */
    int delivery_retention_days;   /* finished notification deliveries kept; 0: forever */
    /* The Kubernetes backend: used when cluster_profile is set. */
    char cluster_profile[CONFIG_PATH_MAX]; /* "" : the local backend */
    char kubeconfig[CONFIG_PATH_MAX];      /* "" : the in-cluster service account */
    char kube_context[128];                /* "" : the kubeconfig's current context */
    int kube_in_cluster;                   /* --kube in-cluster */
    double kube_qps;                       /* requests a second; 0: no client-side limit */
    int kube_burst;
    int notify_allow_private;      /* 1: notification URLs may name loopback, private, ...
                                      addresses (a receiver on this machine or network) */
} config_serve;

typedef enum config_token_action {
    CONFIG_TOKEN_NONE = 0,         /* only with help */
    CONFIG_TOKEN_CREATE,
    CONFIG_TOKEN_LIST,
    CONFIG_TOKEN_REVOKE,
} config_token_action;

typedef struct config_token {
    int help;
    config_token_action action;
    char db_path[CONFIG_PATH_MAX];
    const char *server;            /* base URL, NULL = use the database; borrowed from argv/env */
    const char *token;             /* bearer token for --server, or NULL; borrowed */
    const char *token_file;        /* --token-file: its file, "-" = stdin, or NULL; borrowed */
    const char *name;              /* --name; borrowed */
    unsigned scopes;               /* STORE_SCOPE_* from --scope */
    const char *team;              /* --team (create): the token's team; NULL = "default" */
} config_token;

/*
 * Parses "IPv4:PORT", "[IPv6]:PORT" or "localhost:PORT" (= 127.0.0.1). PORT is
 * 0..65535. TY_EINVAL with a message in err on anything else.
 */
ty_err config_parse_listen(const char *text, config_listen *out, char *err, size_t errlen);

/* Formats an address as "127.0.0.1:8080" or "[::1]:8080" into buf. */
void config_format_addr(const char *host, int family, unsigned port, char *buf, size_t len);

/* Parses "read,submit,admin" (any order, no duplicates, at least one) into STORE_SCOPE_* bits. */
ty_err config_parse_scopes(const char *text, unsigned *out, char *err, size_t errlen);

/* Writes "read,submit" style text for scope bits into buf. */
void config_format_scopes(unsigned scopes, char *buf, size_t len);

/* Parses the arguments after "serve" (argv[0] is the first option) plus the environment. */
ty_err config_parse_serve(int argc, char **argv, config_serve *out, char *err, size_t errlen);

/*
 * Parses the arguments after "token": an action ("create", "list", "revoke")
 * then options. create needs --name and --scope, revoke needs --name; --token,
 * --token-file (not both) or TRAINYARD_TOKEN is required with --server. argv
 * strings are borrowed by *out.
 */
ty_err config_parse_token(int argc, char **argv, config_token *out, char *err, size_t errlen);

/* Usage texts for --help. */
void config_usage_serve(FILE *f);
void config_usage_token(FILE *f);

#endif
