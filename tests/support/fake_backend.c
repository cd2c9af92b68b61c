/*
 * fake_backend.c - see fake_backend.h. One mutex guards everything: the test's
 * thread and the scheduler's thread both come in. Events wait in a queue; an
 * eventfd is readable while it holds any.
 */
#include "tests/support/fake_backend.h"

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define FAKE_ID_MAX 64

struct backend_attempt {
    backend_attempt *next;
    char id[FAKE_ID_MAX];
    int world;
    int gpus;           /* GPUs booked (world x per rank) */
    int attempt;        /* launched last, 0 before */
    unsigned char *ended; /* world flags: the rank's end was told */
};

typedef struct fake_backend {
    backend base;
    backend_ops ops;    /* fake_ops, with adopts as fake_set_adopts() said */
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* the call log grew */
    int efd;
    int slots, used, stop_ends;
    int stops_to_fail;
    char gpu_type[32];  /* "" until fake_set_gpus() */
    int gpus, gpus_used;
    char adopt_id[FAKE_ID_MAX];
    int adopt_world;
    backend_attempt *attempts;
    backend_event *q;
    size_t qn, qcap;
    char *calls;        /* the call log */
    size_t ncalls, capcalls;
} fake_backend;

static const backend_ops fake_ops;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends one line to the call log; mu held. */
static void logf_locked(fake_backend *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void logf_locked(fake_backend *f, const char *fmt, ...)
{
    char line[160];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (f->ncalls + (size_t)n + 1 > f->capcalls) {
        size_t cap = (f->capcalls + (size_t)n + 1) * 2;
        char *c = realloc(f->calls, cap);
        if (!c)
            return;
        f->calls = c;
        f->capcalls = cap;
    }
    memcpy(f->calls + f->ncalls, line, (size_t)n);
    f->ncalls += (size_t)n;
    f->calls[f->ncalls] = '\0';
    pthread_cond_broadcast(&f->cv);
}

/* A new queued event; mu held. NULL when out of memory. */
static backend_event *push_locked(fake_backend *f, backend_event_kind kind, backend_attempt *a,
                                  int rank)
{
    if (f->qn == f->qcap) {
        size_t cap = f->qcap ? f->qcap * 2 : 16;
        backend_event *q = realloc(f->q, cap * sizeof *q);
        if (!q)
            return NULL;
        f->q = q;
        f->qcap = cap;
    }
    backend_event *ev = &f->q[f->qn++];
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->attempt = a;
    ev->rank = rank;
    ev->exit_code = -1;
    ev->time_ms = now_ms();
    uint64_t one = 1;
    ssize_t w = write(f->efd, &one, sizeof one);
    (void)w;
    return ev;
}

static backend_attempt *find_locked(fake_backend *f, const char *id)
{
    for (backend_attempt *a = f->attempts; a; a = a->next)
        if (strcmp(a->id, id) == 0)
            return a;
    return NULL;
}

static backend_attempt *attempt_new(fake_backend *f, const char *id, int world)
{
    backend_attempt *a = calloc(1, sizeof *a);
    if (!a || !(a->ended = calloc((size_t)world, 1))) {
        free(a);
        return NULL;
    }
    snprintf(a->id, sizeof a->id, "%s", id);
    a->world = world;
    a->next = f->attempts;
    f->attempts = a;
    f->used += world;
    return a;
}

/* ---- backend_ops ------------------------------------------------------------ */

static ty_err fake_reserve(backend *b, const backend_job *job, backend_attempt **out, char *why,
                           size_t whylen)
{
    fake_backend *f = (fake_backend *)b;
    ty_err e = TY_OK;
    pthread_mutex_lock(&f->mu);
    if (job->world_size > f->slots) {
        snprintf(why, whylen, "needs %d slots, the fake has %d", job->world_size, f->slots);
        e = TY_EINVAL;
    } else if (f->used + job->world_size > f->slots) {
        snprintf(why, whylen, "needs %d slots, %d of %d free", job->world_size,
                 f->slots - f->used, f->slots);
        e = TY_EAGAIN;
    } else if (f->gpu_type[0] && (long long)job->world_size * job->gpus_per_rank > f->gpus) {
        snprintf(why, whylen, "needs %d GPUs, the fake has %d",
                 job->world_size * job->gpus_per_rank, f->gpus);
        e = TY_EINVAL;
    } else if (f->gpu_type[0] && f->gpus_used + job->world_size * job->gpus_per_rank > f->gpus) {
        snprintf(why, whylen, "needs %d GPUs, %d of %d free", job->world_size * job->gpus_per_rank,
                 f->gpus - f->gpus_used, f->gpus);
        e = TY_EAGAIN;
    } else if (!(*out = attempt_new(f, job->id, job->world_size))) {
        e = TY_ENOMEM;
    } else {
        (*out)->gpus = f->gpu_type[0] ? job->world_size * job->gpus_per_rank : 0;
        f->gpus_used += (*out)->gpus;
        logf_locked(f, "reserve %s", job->id);
    }
    pthread_mutex_unlock(&f->mu);
    return e;
}

static void fake_launch(backend *b, backend_attempt *a, const backend_job *job)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    a->attempt = job->attempt;
    memset(a->ended, 0, (size_t)a->world);
    logf_locked(f, "launch %s %d", a->id, job->attempt);
    pthread_mutex_unlock(&f->mu);
}

static int fake_event_fd(backend *b)
{
    return ((fake_backend *)b)->efd;
}

static size_t fake_observe(backend *b, backend_event *ev, size_t max)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    size_t n = f->qn < max ? f->qn : max;
    if (n > 0) {
        memcpy(ev, f->q, n * sizeof *ev);
        memmove(f->q, f->q + n, (f->qn - n) * sizeof *f->q);
        f->qn -= n;
    }
    if (f->qn == 0) {
        uint64_t v;
        ssize_t r = read(f->efd, &v, sizeof v);
        (void)r;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void fake_stop(backend *b, backend_attempt *a, int hard)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    if (f->stops_to_fail > 0) {
        f->stops_to_fail--;
        logf_locked(f, "stop %s %s failed", a->id, hard ? "hard" : "soft");
        backend_event *ev = push_locked(f, BACKEND_EV_STOP_FAILED, a, -1);
        if (ev)
            snprintf(ev->detail, sizeof ev->detail, "the fake was told to fail");
        pthread_mutex_unlock(&f->mu);
        return;
    }
    logf_locked(f, "stop %s %s", a->id, hard ? "hard" : "soft");
    for (int r = 0; f->stop_ends && r < a->world; r++) {
        if (a->ended[r])
            continue;
        a->ended[r] = 1;
        backend_event *ev = push_locked(f, BACKEND_EV_DISRUPTED, a, r);
        if (ev) {
            ev->disruption = BACKEND_DISRUPT_STOP_REQUESTED;
            ev->ended = 1;
            ev->exit_code = 143;
        }
    }
    pthread_mutex_unlock(&f->mu);
}

static void fake_release(backend *b, backend_attempt *a)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    logf_locked(f, "release %s", a->id);
    for (backend_attempt **p = &f->attempts; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    size_t k = 0;
    for (size_t i = 0; i < f->qn; i++)
        if (f->q[i].attempt != a)
            f->q[k++] = f->q[i];
    f->qn = k;
    f->used -= a->world;
    f->gpus_used -= a->gpus;
    free(a->ended);
    free(a);
    pthread_mutex_unlock(&f->mu);
}

static ty_err fake_recover(backend *b, const backend_job *job, int may_adopt, int grace_ms,
                           backend_recovery *out, char *why, size_t whylen)
{
    fake_backend *f = (fake_backend *)b;
    (void)grace_ms;
    (void)why;
    (void)whylen;
    *out = (backend_recovery){0};
    pthread_mutex_lock(&f->mu);
    if (may_adopt && strcmp(f->adopt_id, job->id) == 0) {
        f->adopt_id[0] = '\0';
        backend_attempt *a = attempt_new(f, job->id, f->adopt_world);
        if (a) {
            a->attempt = job->attempt;
            out->adopted = a;
            out->found = a->world;
        }
    }
    logf_locked(f, "recover %s %s", job->id, out->adopted ? "adopted" : "stopped");
    pthread_mutex_unlock(&f->mu);
    return TY_OK;
}

static ty_err fake_log_open(backend *b, const char *job_id, int attempt, int rank,
                            long tail_lines, backend_log **out)
{
    (void)b;
    (void)job_id;
    (void)attempt;
    (void)rank;
    (void)tail_lines;
    (void)out;
    return TY_ENOTFOUND;
}

static long fake_log_read(backend_log *l, char *buf, size_t max)
{
    (void)l;
    (void)buf;
    (void)max;
    return -1;
}

static void fake_log_close(backend_log *l)
{
    (void)l;
}

static void fake_capacity(const backend *b, int *total, int *used)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    *total = f->slots;
    *used = f->used;
    pthread_mutex_unlock(&f->mu);
}

static void fake_free(backend *b)
{
    fake_backend *f = (fake_backend *)b;
    if (!f)
        return;
    while (f->attempts) {
        backend_attempt *a = f->attempts;
        f->attempts = a->next;
        free(a->ended);
        free(a);
    }
    if (f->efd >= 0)
        close(f->efd);
    free(f->q);
    free(f->calls);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static size_t fake_free_resources(const backend *b, backend_free *out, size_t max)
{
    fake_backend *f = (fake_backend *)b;
    size_t n = 0;
    pthread_mutex_lock(&f->mu);
    if (f->gpu_type[0]) {
        n = 1;
        if (max >= 1)
            out[0] = (backend_free){.kind = BACKEND_RES_GPU, .gpu_type = f->gpu_type,
                                    .free = f->gpus - f->gpus_used, .total = f->gpus};
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

void fake_set_gpus(backend *b, const char *type, int gpus)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    snprintf(f->gpu_type, sizeof f->gpu_type, "%s", type);
    f->gpus = gpus;
    pthread_mutex_unlock(&f->mu);
}

/* Logs "exclude n1,n2" ("exclude -" for none). */
static void fake_exclude_nodes(backend *b, const char *const *nodes, size_t n)
{
    fake_backend *f = (fake_backend *)b;
    char list[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? "," : "", nodes[i]);
    pthread_mutex_lock(&f->mu);
    logf_locked(f, "exclude %s", n ? list : "-");
    pthread_mutex_unlock(&f->mu);
}

static const backend_ops fake_ops = {
    .name = "fake",
    .reserve = fake_reserve,
    .launch = fake_launch,
    .event_fd = fake_event_fd,
    .observe = fake_observe,
    .stop = fake_stop,
    .release = fake_release,
    .recover = fake_recover,
    .log_open = fake_log_open,
    .log_read = fake_log_read,
    .log_close = fake_log_close,
    .capacity = fake_capacity,
    .free_resources = fake_free_resources,
    .exclude_nodes = fake_exclude_nodes,
    .free = fake_free,
};

/* ---- the test's side ------------------------------------------------------- */

backend *fake_backend_new(int slots)
{
    fake_backend *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->ops = fake_ops;
    f->base.ops = &f->ops;
    f->slots = slots;
    f->stop_ends = 1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if ((f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        fake_free(&f->base);
        return NULL;
    }
    return &f->base;
}

void fake_set_adopts(backend *b, int on)
{
    ((fake_backend *)b)->ops.adopts = on;
}

void fake_set_slots(backend *b, int slots)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    f->slots = slots;
    pthread_mutex_unlock(&f->mu);
}

void fake_set_stop_ends(backend *b, int on)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    f->stop_ends = on;
    pthread_mutex_unlock(&f->mu);
}

void fake_fail_stops(backend *b, int n)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    f->stops_to_fail = n;
    pthread_mutex_unlock(&f->mu);
}

void fake_adopt_next(backend *b, const char *id, int world)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    snprintf(f->adopt_id, sizeof f->adopt_id, "%s", id);
    f->adopt_world = world;
    pthread_mutex_unlock(&f->mu);
}

/* Queues one event per rank (all of them for rank -1) of job id's attempt. */
static int emit(backend *b, const char *id, backend_event_kind kind, int rank, int per_rank,
                const backend_event *tmpl)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    backend_attempt *a = find_locked(f, id);
    if (!a || rank >= (a ? a->world : 0)) {
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
    int lo = rank < 0 && per_rank ? 0 : rank, hi = rank < 0 && per_rank ? a->world : rank + 1;
    for (int r = lo; r < hi; r++) {
        backend_event *ev = push_locked(f, kind, a, r);
        if (!ev)
            break;
        ev->where = tmpl->where;
        ev->exit_code = tmpl->exit_code;
        ev->signal = tmpl->signal;
        ev->disruption = tmpl->disruption;
        ev->ended = tmpl->ended;
        memcpy(ev->detail, tmpl->detail, sizeof ev->detail);
        if (kind == BACKEND_EV_RUNNING)
            ev->where.started_ms = ev->time_ms;
        if (r >= 0 && (kind == BACKEND_EV_EXITED || (kind == BACKEND_EV_DISRUPTED && tmpl->ended)))
            a->ended[r] = 1;
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int fake_emit_running(backend *b, const char *id, int rank, const char *node)
{
    backend_event t = {.exit_code = -1};
    if (node) {
        snprintf(t.where.node, sizeof t.where.node, "%s", node);
        snprintf(t.where.pod, sizeof t.where.pod, "%.40s-%d", id, rank);
    }
    return emit(b, id, BACKEND_EV_RUNNING, rank, 1, &t);
}

int fake_emit_pending(backend *b, const char *id, const char *reason)
{
    backend_event t = {.exit_code = -1};
    snprintf(t.detail, sizeof t.detail, "%s", reason);
    return emit(b, id, BACKEND_EV_PENDING, -1, 0, &t);
}

int fake_emit_exit(backend *b, const char *id, int rank, int exit_code, int signal,
                   const char *detail)
{
    backend_event t = {.exit_code = exit_code, .signal = signal};
    snprintf(t.detail, sizeof t.detail, "%s", detail ? detail : "");
    return emit(b, id, BACKEND_EV_EXITED, rank, 1, &t);
}

int fake_emit_disrupted(backend *b, const char *id, int rank, backend_disruption why, int ended,
                        const char *detail)
{
    backend_event t = {.exit_code = ended ? 143 : -1, .disruption = why, .ended = ended};
    snprintf(t.detail, sizeof t.detail, "%s", detail ? detail : "");
    return emit(b, id, BACKEND_EV_DISRUPTED, rank, 1, &t);
}

int fake_emit_launch_failed(backend *b, const char *id, const char *detail)
{
    backend_event t = {.exit_code = -1};
    snprintf(t.detail, sizeof t.detail, "%s", detail ? detail : "");
    return emit(b, id, BACKEND_EV_LAUNCH_FAILED, -1, 0, &t);
}

void fake_emit_capacity(backend *b)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    push_locked(f, BACKEND_EV_CAPACITY, NULL, -1);
    pthread_mutex_unlock(&f->mu);
}

size_t fake_calls(backend *b, char *buf, size_t len)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    size_t n = f->ncalls;
    if (len > 0)
        snprintf(buf, len, "%s", f->calls ? f->calls : "");
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Lines of the log equal to line; mu held. */
static int count_locked(const fake_backend *f, const char *line)
{
    int n = 0;
    size_t len = strlen(line);
    for (const char *p = f->calls; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        n += l == len && memcmp(p, line, len) == 0;
        p = nl ? nl + 1 : p + l;
    }
    return n;
}

int fake_count_calls(backend *b, const char *line)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    int n = count_locked(f, line);
    pthread_mutex_unlock(&f->mu);
    return n;
}

int fake_wait_call(backend *b, const char *line, int times, int wait_ms)
{
    fake_backend *f = (fake_backend *)b;
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += wait_ms / 1000;
    end.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->mu);
    int ok;
    while (!(ok = count_locked(f, line) >= times))
        if (pthread_cond_timedwait(&f->cv, &f->mu, &end) != 0) {
            ok = count_locked(f, line) >= times;
            break;
        }
    pthread_mutex_unlock(&f->mu);
    return ok;
}

int fake_slots_used(backend *b)
{
    fake_backend *f = (fake_backend *)b;
    pthread_mutex_lock(&f->mu);
    int n = f->used;
    pthread_mutex_unlock(&f->mu);
    return n;
}
