/*
 * main.c - the `trainyard` binary: subcommands, startup and graceful shutdown.
 *
 * Exit status: 0 success, 1 runtime failure, 2 usage error (bad flag or value,
 * message on stderr).
 *
 * Signals: SIGTERM and SIGINT are blocked before any thread starts, so every
 * thread inherits the mask and only the main thread receives them, through
 * sigwait(): no code runs in signal handlers. SIGPIPE is ignored.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "api/api.h"
#include "cli/cli.h"
#include "api/feed.h"
#include "api/streams.h"
#include "common/ty_log.h"
#include "common/ty_metrics.h"
#include "scheduler/kube/kube_backend.h"
#include "scheduler/kube/kubeconfig.h"
#include "scheduler/kube/profile.h"
#include "scheduler/kube/render.h"
#include "scheduler/local/local.h"
#include "scheduler/sched.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/http.h"
#include "server/notify.h"
#include "server/retention.h"
#include "server/paths.h"
#include "server/token_cli.h"
#include "store/store.h"

#ifndef TY_VERSION
#define TY_VERSION "0.0.0"
#endif

/* How long in-flight requests get to finish after SIGTERM. */
#define DRAIN_MS 10000
/* Token cache age after which a request reloads the token list. */
#define AUTH_MAX_AGE_MS 1000

/*
 * Every connection holds a descriptor; with up to --max-connections the usual
 * soft limit of 1024 open files leaves no room for the database and the
 * listening socket, so the soft limit is raised to the hard one.
 */
static void raise_nofile_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY ? 65536 : rl.rlim_max;
    if (want <= rl.rlim_cur)
        return;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        TY_LOG(TY_LOG_WARN, "cannot raise the open-file limit", "{s:I}", "limit",
               (json_int_t)want);
}

/* The URL the ranks reach this server at (TRAINYARD_SERVER): a wildcard
 * listening address is reached through loopback. */
static void local_url(const config_serve *cfg, unsigned port, char *buf, size_t len)
{
    const char *host = cfg->listen.host;
    int v6 = cfg->listen.addr.ss_family == AF_INET6;
    if (strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    snprintf(buf, len, v6 ? "http://[%s]:%u" : "http://%s:%u", host, port);
}

/*
 * The store has one change hook, which sched_start() sets to wake the scheduler. The event
 * streams follow the same commits: this hook calls the scheduler's, then wakes the streams'
 * followers (api/feed.h). Both only signal, so the writer is not held up.
 */
typedef struct change_hooks {
    void (*sched_fn)(void *ud);
    void *sched_ud;
    api_feed *feed;
} change_hooks;

static void on_change(void *ud)
{
    const change_hooks *h = ud;
    if (h->sched_fn)
        h->sched_fn(h->sched_ud);
    api_feed_notify(h->feed);
}

/* Metric points wake only the streams that send them (the scheduler has no use for them). */
static void on_metrics(void *ud)
{
    api_feed_notify_metrics(ud);
}

/* What the Kubernetes backend borrows for its whole life. */
typedef struct kube_parts {
    ty_kubeconfig *kubeconfig;
    kube_profile *profile;
} kube_parts;

/* api_spec_check_fn for the Kubernetes backend: what its profile and rendering refuse. */
static int kube_spec_check(void *ud, const json_t *spec, char *path, size_t pathlen, char *msg,
                           size_t msglen)
{
    const kube_parts *k = ud;
    return kube_render_check(k->profile, spec, path, pathlen, msg, msglen) != TY_OK;
}

/*
 * The largest rank the backend could ever place, as the API's plain numbers (api/spec.h):
 * *types (new, free()) holds the per-GPU-type entries lim points at. Read once, at start.
 */
static ty_err read_rank_limits(const backend *be, int kube, spec_limits *lim,
                               spec_rank_limit **types)
{
    backend_rank_limit *bl = NULL;
    size_t n = be->ops->rank_limits ? be->ops->rank_limits(be, NULL, 0) : 0;
    memset(lim, 0, sizeof *lim);
    *types = NULL;
    if (n == 0)
        return TY_OK;
    if (!(bl = calloc(n, sizeof *bl)) || !(*types = calloc(n, sizeof **types))) {
        free(bl);
        return TY_ENOMEM;
    }
    if (be->ops->rank_limits(be, bl, n) != n) /* it changed between the calls: none known */
        n = 1;
    lim->where = kube ? "the largest node for ranks without GPUs" : "this machine";
    lim->any = (spec_rank_limit){NULL, bl[0].cpu_millis, bl[0].memory_bytes, bl[0].gpus};
    for (size_t i = 1; i < n; i++)
        (*types)[i - 1] = (spec_rank_limit){bl[i].gpu_type, bl[i].cpu_millis,
                                            bl[i].memory_bytes, bl[i].gpus};
    lim->types = *types;
    lim->ntypes = n - 1;
    free(bl);
    TY_LOG(TY_LOG_INFO, "the largest rank a job may ask for", "{s:I, s:I, s:I}", "cpu_millis",
           (json_int_t)lim->any.cpu_millis, "memory_bytes", (json_int_t)lim->any.memory_bytes,
           "gpu_types", (json_int_t)lim->ntypes);
    return TY_OK;
}

/* The families /metrics adds to the API's own: the backend's (Kubernetes only), the
 * notifications' and the retention purge's counters. */
typedef struct extra_metrics {
    backend *kube; /* NULL with the local backend */
    notify *notify;
    retention *retention;
} extra_metrics;

static ty_err render_extra_metrics(void *ud, ty_buf *out)
{
    const extra_metrics *m = ud;
    ty_err e = m->kube ? kube_backend_metrics(m->kube, out) : TY_OK;
    e = e ? e : notify_render_metrics(m->notify, out);
    return e ? e : retention_render_metrics(m->retention, out);
}

/*
 * The Kubernetes backend: the cluster profile (a bad one stops the start with its line and
 * reason), then the credentials (--kubeconfig, else the pod's service account), then the
 * backend, which lists what exists before the first round.
 */
static ty_err start_kube(const config_serve *cfg, const char *data_dir, kube_parts *k,
                         backend **be, char *err, size_t errlen)
{
    char logs_dir[CONFIG_PATH_MAX + 8];
    snprintf(logs_dir, sizeof logs_dir, "%s/logs", data_dir);
    ty_err e = kube_profile_load(cfg->cluster_profile, &k->profile, err, errlen);
    if (e)
        return e;
    if (cfg->kubeconfig[0]) {
        e = ty_kubeconfig_load(cfg->kubeconfig, cfg->kube_context[0] ? cfg->kube_context : NULL,
                               &k->kubeconfig, err, errlen);
    } else if (cfg->kube_in_cluster || getenv("KUBERNETES_SERVICE_HOST")) {
        e = ty_kubeconfig_in_cluster(NULL, &k->kubeconfig, err, errlen);
    } else {
        snprintf(err, errlen, "--cluster-profile: no credentials for the cluster: give "
                              "--kubeconfig PATH, or run in a pod (--kube in-cluster)");
        return TY_EINVAL;
    }
    if (e)
        return e;
    ty_kclient_opts copt;
    ty_kclient_opts_default(&copt);
    copt.qps = cfg->kube_qps;
    copt.burst = cfg->kube_burst;
    kube_backend_config kcfg = {
        .kubeconfig = k->kubeconfig,
        .profile = k->profile,
        .client = &copt,
        .logs_dir = logs_dir,
        .log_limit = (uint64_t)cfg->local_log_limit,
        .job_log_limit = (uint64_t)cfg->local_job_log_limit,
    };
    if ((e = kube_backend_new(&kcfg, be, err, errlen)) != TY_OK)
        return e;
    TY_LOG(TY_LOG_INFO, "running jobs on Kubernetes", "{s:s, s:s, s:s}", "server",
           ty_kubeconfig_server(k->kubeconfig), "namespace", k->profile->namespace, "profile",
           cfg->cluster_profile);
    return TY_OK;
}

/* The local backend and the scheduler that drives it (see scheduler/sched.h). */
static ty_err start_jobs(const config_serve *cfg, store *st, unsigned port, kube_parts *k,
                         backend **be, sched **sc, char *err, size_t errlen)
{
    char data_dir[CONFIG_PATH_MAX], self_dir[CONFIG_PATH_MAX], url[CONFIG_ADDR_LEN + 16];
    ty_err e = paths_parent_dir(cfg->db_path, data_dir, sizeof data_dir);
    if (e) {
        snprintf(err, errlen, "data directory path too long");
        return e;
    }
    const char *bin_dirs[2] = {NULL, NULL};
    if (paths_self_dir(self_dir, sizeof self_dir) == TY_OK)
        bin_dirs[0] = self_dir;
    local_url(cfg, port, url, sizeof url);
    if (cfg->cluster_profile[0]) {
        if ((e = start_kube(cfg, data_dir, k, be, err, errlen)) != TY_OK)
            return e;
        goto scheduler;
    }
    local_options lopt = {
        .data_dir = data_dir,
        .slots = cfg->local_slots,
        .gpus = cfg->local_gpus,
        .server_url = url,
        .bin_dirs = bin_dirs,
        .sandbox = cfg->local_sandbox,
        .user = cfg->local_user[0] ? cfg->local_user : NULL,
        .log_limit = cfg->local_log_limit,
        .job_log_limit = cfg->local_job_log_limit,
        .disk_limit = cfg->local_disk_limit,
    };
    if ((e = local_backend_new(&lopt, be, err, errlen)) != TY_OK)
        return e;
    TY_LOG(TY_LOG_INFO, "running jobs on the local backend", "{s:s, s:i, s:i, s:s}", "data_dir",
           data_dir, "slots", local_backend_slots(*be), "gpus", local_backend_gpus(*be),
           "server_url", url);
scheduler:;
    sched_queue_limit limits[CONFIG_MAX_QUEUE_LIMITS];
    for (size_t i = 0; i < cfg->nqueue_limits; i++)
        limits[i] = (sched_queue_limit){cfg->queue_limits[i].queue, cfg->queue_limits[i].limit};
    sched_options sopt = {
        .store = st,
        .backend = *be,
        .queue_limit = cfg->queue_limit,
        .queue_limits = limits,
        .nqueue_limits = cfg->nqueue_limits,
        .stop_grace_ms = cfg->stop_grace_s * 1000,
    };
    quarantine_policy qp = quarantine_default();
    if (k->profile) /* the cluster profile's settings; the local backend keeps the defaults */
        qp = (quarantine_policy){(int)k->profile->quarantine.failures,
                                 (int)k->profile->quarantine.min_jobs,
                                 k->profile->quarantine.window_seconds,
                                 k->profile->quarantine.release_seconds};
    sopt.quarantine = &qp;
    return sched_start(&sopt, sc, err, errlen);
}

static int serve(const config_serve *cfg, const sigset_t *stop_signals)
{
    char err[512] = "";
    store *st = NULL;
    backend *be = NULL;
    sched *sc = NULL;
    kube_parts kube = {0};
    auth_cache *auth = NULL;
    http_server *srv = NULL;
    api_feed *feed = NULL;
    api_streams *streams = NULL;
    api_hook_guard *hook_guard = NULL;
    change_hooks hooks = {0};
    notify *nt = NULL;
    retention *rt = NULL;
    extra_metrics extra = {0};
    spec_limits limits = {0};
    spec_rank_limit *limit_types = NULL;
    ty_counter_vec requests;
    ty_histogram duration;
    char addr[CONFIG_ADDR_LEN];
    int rc = 1, sig = 0;

    ty_counter_vec_init(&requests);
    ty_histogram_init(&duration, ty_latency_bounds, ty_latency_nbounds);
    raise_nofile_limit();
    /* What the server writes (database, tokens, logs) is its own: no other user of the
     * machine, the one jobs run as included, may read it. Ranks get 022 back. */
    umask(077);

    /* Bind first: a busy port fails the start before the database is touched. */
    http_options hopt = {
        .listen = &cfg->listen,
        .routes = api_routes,
        .nroutes = api_nroutes,
        .connection_limit = (unsigned)cfg->max_connections,
        .per_ip_limit = (unsigned)cfg->max_connections_per_ip,
        .request_deadline_ms = (unsigned)cfg->request_deadline_s * 1000u,
    };
    ty_err e = http_server_bind(&hopt, &srv, err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot listen", "{s:s}", "error", err);
        goto out;
    }
    e = paths_make_parent_dir(cfg->db_path, err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot create the data directory", "{s:s}", "error", err);
        goto out;
    }
    store_options sopt = {.metrics_max_points = cfg->metrics_max_points}; /* else its defaults */
    e = store_open(cfg->db_path, &sopt, &st, err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot open the database", "{s:s, s:s}", "path", cfg->db_path,
               "error", err[0] ? err : ty_strerror(e));
        goto out;
    }
    const char *admin_env = getenv("TRAINYARD_ADMIN_TOKEN");
    e = auth_bootstrap_admin(st, cfg->db_path, admin_env && *admin_env ? admin_env : NULL, NULL,
                             err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot create the admin token", "{s:s}", "error", err);
        goto out;
    }
    e = auth_cache_new(st, AUTH_MAX_AGE_MS, &auth);
    if (e)
        goto out;

    config_format_addr(cfg->listen.host, cfg->listen.addr.ss_family, http_server_port(srv), addr,
                       sizeof addr);
    e = start_jobs(cfg, st, http_server_port(srv), &kube, &be, &sc, err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot start the scheduler", "{s:s}", "error",
               err[0] ? err : ty_strerror(e));
        goto out;
    }
    if ((e = read_rank_limits(be, kube.profile != NULL, &limits, &limit_types)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot read the backend's limits", "{s:s}", "error",
               ty_strerror(e));
        goto out;
    }
    /* Followed streams hold at most half of the connections: the rest stay for submissions. */
    if ((e = api_streams_new((unsigned)cfg->max_connections / 2,
                             (unsigned)cfg->max_streams_per_token, &streams)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot create the stream accounting", "{s:s}", "error",
               ty_strerror(e));
        goto out;
    }
    if ((e = api_feed_new(&feed)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot create the event feed", "{s:s}", "error", ty_strerror(e));
        goto out;
    }
    const config_webhook_limits *wl = &cfg->webhook_limits;
    api_hook_limits hook_limits = {
        .addr_rate = wl->addr.rate, .addr_burst = wl->addr.burst,
        .hook_rate = wl->hook.rate, .hook_burst = wl->hook.burst,
        .fail_rate = wl->fail.rate, .fail_burst = wl->fail.burst,
        .max_delay_ms = wl->delay_ms,
    };
    if ((e = api_hook_guard_new(&hook_limits, &hook_guard)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot create the webhooks' rate limits", "{s:s}", "error",
               ty_strerror(e));
        goto out;
    }
    store_change_hook_get(st, &hooks.sched_fn, &hooks.sched_ud);
    hooks.feed = feed;
    store_set_change_hook(st, on_change, &hooks);
    store_set_metrics_hook(st, on_metrics, feed);
    notify_options nopt = {.store = st, .allow_private = cfg->notify_allow_private};
    if ((e = notify_start(&nopt, &nt, err, sizeof err)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot start the notifications", "{s:s}", "error", err);
        goto out;
    }
    store_set_notify_hook(st, notify_wake, nt);
    retention_options ropt = {
        .store = st,
        .metrics_ms = cfg->metrics_retention_days * 86400000LL,
        .deliveries_ms = cfg->delivery_retention_days * 86400000LL,
    };
    if ((e = retention_start(&ropt, &rt, err, sizeof err)) != TY_OK) {
        TY_LOG(TY_LOG_ERROR, "cannot start the retention purge", "{s:s}", "error", err);
        goto out;
    }
    extra.kube = kube.profile ? be : NULL;
    extra.notify = nt;
    extra.retention = rt;
    api_ctx ctx = {
        .store = st,
        .feed = feed,
        .streams = streams,
        .sched = sc,
        .max_body = cfg->max_body,
        .http_requests = &requests,
        .http_duration = &duration,
        .spec_check = kube.profile ? kube_spec_check : NULL,
        .spec_check_ud = &kube,
        .limits = limits,
        .backend_metrics = render_extra_metrics,
        .backend_metrics_ud = &extra,
        .notify_allow_private = cfg->notify_allow_private,
        .hook_guard = hook_guard,
    };
    e = http_server_start(srv, &ctx, auth, err, sizeof err);
    if (e) {
        TY_LOG(TY_LOG_ERROR, "cannot start the HTTP server", "{s:s}", "error", err);
        goto out;
    }
    /* Written whatever the log level: tools and tests wait for this line. */
    ty_log_json(TY_LOG_INFO, "listening",
                json_pack("{s:s, s:s, s:s, s:I}", "addr", addr, "db", cfg->db_path, "version",
                          TY_VERSION, "max_body", (json_int_t)cfg->max_body));

    if (sigwait(stop_signals, &sig) != 0)
        sig = 0;
    TY_LOG(TY_LOG_INFO, "shutting down", "{s:s}", "signal",
           sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "?");
    /* Log followers and event streams end and gangs are asked to stop while requests drain. */
    sched_shutdown(sc);
    api_feed_shutdown(feed);
    http_server_shutdown(srv, DRAIN_MS);
    rc = 0;
out:
    api_feed_shutdown(feed); /* streams still open end before their threads are joined */
    http_server_free(srv);
    sched_stop(sc); /* waits for the gangs; records them as RESTARTING; unsets the hook */
    if (be)
        be->ops->free(be);
    ty_kubeconfig_free(kube.kubeconfig);
    kube_profile_free(kube.profile);
    free(limit_types);
    auth_cache_free(auth);
    store_set_notify_hook(st, NULL, NULL);
    notify_stop(nt); /* an attempt in flight is dropped: its row stays pending */
    retention_stop(rt); /* after its batch in flight, if any: the rest waits for the next run */
    store_close(st); /* finishes queued commits */
    api_feed_free(feed);
    api_streams_free(streams); /* after http_server_free(): every stream gave its place back */
    api_hook_guard_free(hook_guard);
    ty_histogram_destroy(&duration);
    ty_counter_vec_destroy(&requests);
    if (rc == 0)
        TY_LOG(TY_LOG_INFO, "stopped", NULL);
    return rc;
}

static int cmd_serve(int argc, char **argv)
{
    config_serve cfg;
    char err[512];
    sigset_t stop;

    if (config_parse_serve(argc, argv, &cfg, err, sizeof err) != TY_OK) {
        fprintf(stderr, "trainyard serve: %s\n", err);
        return 2;
    }
    if (cfg.help) {
        config_usage_serve(stdout);
        return 0;
    }
    ty_log_set_level(cfg.log_level);

    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) {
        fprintf(stderr, "trainyard serve: cannot block signals\n");
        return 1;
    }
    return serve(&cfg, &stop);
}

static int cmd_token(int argc, char **argv)
{
    config_token cfg;
    char err[512];
    ty_err e = config_parse_token(argc, argv, &cfg, err, sizeof err);
    if (cfg.help) {
        if (e)
            fprintf(stderr, "trainyard token: %s\n\n", err);
        config_usage_token(e ? stderr : stdout);
        return e ? 2 : 0;
    }
    if (e) {
        fprintf(stderr, "trainyard token: %s\n", err);
        return 2;
    }
    /* Keep the store's own log lines (if any) quiet: this is an interactive command. */
    ty_log_set_level(TY_LOG_WARN);
    /* A database this creates is the server's, as private as serve makes its own. */
    umask(077);
    return token_cli_run(&cfg, stdout, stderr);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("trainyard %s\n", TY_VERSION);
        return 0;
    }
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 2, argv + 2);
    if (strcmp(cmd, "token") == 0)
        return cmd_token(argc - 2, argv + 2);
    if (cli_has_command(cmd)) /* the client commands: HTTP only (cli/cli.h) */
        return cli_main(argc - 1, argv + 1);
    fprintf(stderr, "trainyard: unknown command '%s' (see trainyard --help)\n", cmd);
    return 2;
}
