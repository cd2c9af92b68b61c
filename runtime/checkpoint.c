/*
 * checkpoint.c - sharded checkpoint files and their manifest (layout in checkpoint.h).
 */
#include "runtime/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/rt_error.h"
#include "runtime/rt_fs.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint floats are little-endian");

#define HEADER_BYTES 64
#define FORMAT_VERSION 1
#define PATH_BYTES 4096
#define MANIFEST "manifest.json"
#define MANIFEST_MAX_BYTES ((size_t)64 << 20)

static const char shard_magic[8] = {'T', 'Y', 'S', 'H', 'A', 'R', 'D', '\0'};

static ty_err step_path(char *buf, size_t len, const char *dir, int64_t step, char *err,
                        size_t errlen)
{
    int n = snprintf(buf, len, "%s/step-%012lld", dir, (long long)step);
    if (n < 0 || (size_t)n >= len) {
        rt_errf(err, errlen, "checkpoint path too long");
        return TY_EINVAL;
    }
    return TY_OK;
}

static ty_err shard_path(char *buf, size_t len, const char *dir, int64_t step, int rank, int world,
                         const char *suffix, char *err, size_t errlen)
{
    int n = snprintf(buf, len, "%s/step-%012lld/shard-%05d-of-%05d.bin%s", dir, (long long)step,
                     rank, world, suffix);
    if (n < 0 || (size_t)n >= len) {
        rt_errf(err, errlen, "checkpoint path too long");
        return TY_EINVAL;
    }
    return TY_OK;
}

static ty_err fsync_path(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        rt_errf(err, errlen, "fsync %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TY_EIO;
    }
    close(fd);
    return TY_OK;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pread_all(int fd, void *p, size_t n, off_t off)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = pread(fd, c, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Writes data to path via path.tmp + fsync + rename (the directory is fsynced by the caller). */
static ty_err write_file_atomic(const char *path, const unsigned char *head, size_t head_len,
                                const float *const *blocks, int n_blocks, size_t block_len,
                                char *err, size_t errlen)
{
    char tmp[PATH_BYTES];
    ty_err rc = TY_EIO;
    int fd = -1;
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        rt_errf(err, errlen, "checkpoint path too long");
        return TY_EINVAL;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rt_errf(err, errlen, "open %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (write_all(fd, head, head_len) != 0)
        goto io;
    for (int b = 0; b < n_blocks; b++)
        if (write_all(fd, blocks[b], block_len * sizeof(float)) != 0)
            goto io;
    if (fsync(fd) != 0)
        goto io;
    if (close(fd) != 0) {
        fd = -1;
        goto io;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        goto io;
    rc = TY_OK;
    goto out;
io:
    rt_errf(err, errlen, "write %s: %s", tmp, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    if (rc != TY_OK)
        unlink(tmp);
    return rc;
}

ty_err ckpt_write_shard(const char *dir, int64_t step, const shard_layout *layout,
                        const float *const *vectors, int n_vectors, char *err, size_t errlen)
{
    char sdir[PATH_BYTES], path[PATH_BYTES];
    unsigned char head[HEADER_BYTES] = {0};
    ty_err rc;

    if (n_vectors < 1 || n_vectors > CKPT_MAX_VECTORS || step < 0) {
        rt_errf(err, errlen, "bad checkpoint arguments");
        return TY_EINVAL;
    }
    if ((rc = step_path(sdir, sizeof sdir, dir, step, err, errlen)) != TY_OK ||
        (rc = shard_path(path, sizeof path, dir, step, layout->rank, layout->world, "", err,
                         errlen)) != TY_OK ||
        (rc = rt_make_dirs(sdir, "checkpoint directory", err, errlen)) != TY_OK)
        return rc;
    memcpy(head, shard_magic, sizeof shard_magic);
    put_u32(head + 8, FORMAT_VERSION);
    put_u32(head + 12, (uint32_t)layout->rank);
    put_u32(head + 16, (uint32_t)layout->world);
    put_u32(head + 20, (uint32_t)n_vectors);
    put_u64(head + 24, layout->n_params);
    put_u64(head + 32, layout->n_owned);
    put_u64(head + 40, (uint64_t)step);
    rc = write_file_atomic(path, head, sizeof head, vectors, n_vectors, layout->n_owned, err,
                           errlen);
    if (rc != TY_OK)
        return rc;
    return fsync_path(sdir, err, errlen);
}

/* Elements rank r of a world-size-W run owned, and where bucket b's slice starts among them. */
static size_t owned_count(const ckpt_meta *m, int r)
{
    size_t n = 0;
    for (size_t b = 0; b < m->n_buckets; b++)
        n += comm_shard_count(m->bucket_count[b], m->world, r);
    return n;
}

static size_t owned_pos(const ckpt_meta *m, int r, size_t bucket)
{
    size_t n = 0;
    for (size_t b = 0; b < bucket; b++)
        n += comm_shard_count(m->bucket_count[b], m->world, r);
    return n;
}

static size_t shard_file_bytes(const ckpt_meta *m, int r)
{
    return HEADER_BYTES + (size_t)m->n_vectors * owned_count(m, r) * sizeof(float);
}

static ty_err check_files(const char *dir, int64_t step, const ckpt_meta *m, char *err,
                          size_t errlen)
{
    char path[PATH_BYTES];
    for (int r = 0; r < m->world; r++) {
        ty_err rc = shard_path(path, sizeof path, dir, step, r, m->world, "", err, errlen);
        if (rc != TY_OK)
            return rc;
        struct stat st;
        if (stat(path, &st) != 0) {
            rt_errf(err, errlen, "%s: %s", path, strerror(errno));
            return TY_EINVAL;
        }
        if ((size_t)st.st_size != shard_file_bytes(m, r)) {
            rt_errf(err, errlen, "%s: %lld bytes, expected %zu", path, (long long)st.st_size,
                    shard_file_bytes(m, r));
            return TY_EINVAL;
        }
    }
    return TY_OK;
}

static json_t *u64_hex(uint64_t v)
{
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return json_string(buf);
}

static json_t *manifest_json(const ckpt_meta *m)
{
    json_t *root = json_object(), *rngs = json_array(), *layers = json_array(),
           *buckets = json_array(), *files = json_array();
    char name[64];
    if (!root || !rngs || !layers || !buckets || !files)
        goto fail;
    for (int i = 0; i < 4; i++)
        json_array_append_new(rngs, u64_hex(m->rng[i]));
    for (int l = 0; l <= m->n_layers; l++)
        json_array_append_new(layers, json_integer((json_int_t)m->sizes[l]));
    for (size_t b = 0; b < m->n_buckets; b++)
        json_array_append_new(buckets, json_pack("[I,I]", (json_int_t)m->bucket_offset[b],
                                                 (json_int_t)m->bucket_count[b]));
    for (int r = 0; r < m->world; r++) {
        snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", r, m->world);
        json_array_append_new(files, json_pack("{s:s,s:I}", "name", name, "bytes",
                                               (json_int_t)shard_file_bytes(m, r)));
    }
    json_object_set_new(root, "format", json_string("trainyard-checkpoint"));
    json_object_set_new(root, "version", json_integer(FORMAT_VERSION));
    json_object_set_new(root, "step", json_integer(m->step));
    json_object_set_new(root, "epoch", json_integer(m->epoch));
    json_object_set_new(root, "epoch_pos", json_integer(m->epoch_pos));
    json_object_set_new(root, "rng", rngs);
    json_object_set_new(root, "seed", u64_hex(m->seed));
    json_object_set_new(root, "batch", json_integer(m->batch));
    json_object_set_new(root, "world", json_integer(m->world));
    json_object_set_new(root, "n_params", json_integer((json_int_t)m->n_params));
    json_object_set_new(root, "optimizer", json_string(m->optimizer));
    json_object_set_new(root, "vectors", json_integer(m->n_vectors));
    json_object_set_new(root, "layers", layers);
    json_object_set_new(root, "buckets", buckets);
    json_object_set_new(root, "files", files);
    return root;
fail:
    json_decref(root);
    json_decref(rngs);
    json_decref(layers);
    json_decref(buckets);
    json_decref(files);
    return NULL;
}

ty_err ckpt_commit(const char *dir, const ckpt_meta *m, char *err, size_t errlen)
{
    char sdir[PATH_BYTES], path[PATH_BYTES], tmp[PATH_BYTES];
    ty_err rc;
    json_t *root = NULL;
    char *text = NULL;
    FILE *f = NULL;

    if ((rc = step_path(sdir, sizeof sdir, dir, m->step, err, errlen)) != TY_OK)
        goto out;
    if ((rc = check_files(dir, m->step, m, err, errlen)) != TY_OK)
        goto out;
    rc = TY_EINVAL;
    if (snprintf(path, sizeof path, "%s/" MANIFEST, sdir) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/" MANIFEST ".tmp", sdir) >= (int)sizeof tmp) {
        rt_errf(err, errlen, "checkpoint path too long");
        goto out;
    }
    rc = TY_ENOMEM;
    root = manifest_json(m);
    text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
    if (!text) {
        rt_errf(err, errlen, "out of memory for the manifest");
        goto out;
    }
    rc = TY_EIO;
    f = fopen(tmp, "wb");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rt_errf(err, errlen, "write %s: %s", tmp, strerror(errno));
        goto out;
    }
    int closed = fclose(f);
    f = NULL;
    if (closed != 0 || rename(tmp, path) != 0) {
        rt_errf(err, errlen, "publish %s: %s", path, strerror(errno));
        goto out;
    }
    rc = fsync_path(sdir, err, errlen);
out:
    if (f) {
        fclose(f);
        unlink(tmp);
    }
    free(text);
    json_decref(root);
    return rc;
}

void ckpt_meta_free(ckpt_meta *m)
{
    if (!m)
        return;
    free(m->bucket_offset);
    free(m->bucket_count);
    m->bucket_offset = m->bucket_count = NULL;
    m->n_buckets = 0;
}

static int json_u64_hex(json_t *j, uint64_t *out)
{
    const char *s = json_string_value(j);
    if (!s || strlen(s) != 16)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int json_size(json_t *j, size_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return -1;
    *out = (size_t)json_integer_value(j);
    return 0;
}

ty_err ckpt_read_manifest(const char *dir, int64_t step, ckpt_meta *m, char *err, size_t errlen)
{
    char path[PATH_BYTES];
    ty_err rc;
    json_t *root = NULL;
    json_error_t jerr;

    memset(m, 0, sizeof *m);
    if ((rc = step_path(path, sizeof path, dir, step, err, errlen)) != TY_OK)
        return rc;
    size_t len = strlen(path);
    if (len + sizeof("/" MANIFEST) > sizeof path) {
        rt_errf(err, errlen, "checkpoint path too long");
        return TY_EINVAL;
    }
    memcpy(path + len, "/" MANIFEST, sizeof("/" MANIFEST));

    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_errf(err, errlen, "%s: %s", path, strerror(errno));
        return TY_ENOTFOUND;
    }
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    rc = TY_EINVAL;
    if (!root) {
        rt_errf(err, errlen, "%s: %s", path, jerr.text);
        goto out;
    }
    json_t *rngs = json_object_get(root, "rng"), *layers = json_object_get(root, "layers"),
           *buckets = json_object_get(root, "buckets");
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *opt = json_string_value(json_object_get(root, "optimizer"));
    json_t *jstep = json_object_get(root, "step"), *jepoch = json_object_get(root, "epoch"),
           *jpos = json_object_get(root, "epoch_pos"), *jworld = json_object_get(root, "world"),
           *jvec = json_object_get(root, "vectors"), *jbatch = json_object_get(root, "batch");
    if (!fmt || strcmp(fmt, "trainyard-checkpoint") != 0 ||
        json_integer_value(json_object_get(root, "version")) != FORMAT_VERSION || !opt ||
        strlen(opt) >= sizeof m->optimizer || !json_is_integer(jstep) ||
        json_integer_value(jstep) != step || !json_is_integer(jepoch) || !json_is_integer(jpos) ||
        !json_is_integer(jworld) || !json_is_integer(jvec) || !json_is_integer(jbatch) ||
        json_array_size(rngs) != 4 || json_array_size(layers) < 2 ||
        json_array_size(layers) > MODEL_MAX_LAYERS + 1 || json_array_size(buckets) < 1 ||
        json_u64_hex(json_object_get(root, "seed"), &m->seed) != 0 ||
        json_size(json_object_get(root, "n_params"), &m->n_params) != 0) {
        rt_errf(err, errlen, "%s: not a trainyard checkpoint manifest of step %lld", path,
                (long long)step);
        goto out;
    }
    m->step = step;
    m->epoch = json_integer_value(jepoch);
    m->epoch_pos = json_integer_value(jpos);
    m->batch = json_integer_value(jbatch);
    json_int_t world = json_integer_value(jworld), nvec = json_integer_value(jvec);
    if (world < 1 || world > 1 << 20 || nvec < 1 || nvec > CKPT_MAX_VECTORS || m->epoch < 0 ||
        m->epoch_pos < 0) {
        rt_errf(err, errlen, "%s: bad world size, vector count or position", path);
        goto out;
    }
    m->world = (int)world;
    m->n_vectors = (int)nvec;
    memcpy(m->optimizer, opt, strlen(opt) + 1);
    for (int i = 0; i < 4; i++)
        if (json_u64_hex(json_array_get(rngs, (size_t)i), &m->rng[i]) != 0) {
            rt_errf(err, errlen, "%s: bad rng state", path);
            goto out;
        }
    m->n_layers = (int)json_array_size(layers) - 1;
    for (int l = 0; l <= m->n_layers; l++)
        if (json_size(json_array_get(layers, (size_t)l), &m->sizes[l]) != 0) {
            rt_errf(err, errlen, "%s: bad layer sizes", path);
            goto out;
        }
    m->n_buckets = json_array_size(buckets);
    m->bucket_offset = calloc(m->n_buckets, sizeof(size_t));
    m->bucket_count = calloc(m->n_buckets, sizeof(size_t));
    if (!m->bucket_offset || !m->bucket_count) {
        rc = TY_ENOMEM;
        goto out;
    }
    /* The buckets must tile [0, n_params) so that every element has exactly one owner. */
    size_t lo = SIZE_MAX, hi = 0, total = 0;
    for (size_t b = 0; b < m->n_buckets; b++) {
        json_t *pair = json_array_get(buckets, b);
        if (json_array_size(pair) != 2 || json_size(json_array_get(pair, 0), &m->bucket_offset[b]) ||
            json_size(json_array_get(pair, 1), &m->bucket_count[b]) ||
            m->bucket_count[b] > m->n_params || m->bucket_offset[b] > m->n_params - m->bucket_count[b]) {
            rt_errf(err, errlen, "%s: bad bucket %zu", path, b);
            goto out;
        }
        total += m->bucket_count[b];
        if (m->bucket_offset[b] < lo)
            lo = m->bucket_offset[b];
        if (m->bucket_offset[b] + m->bucket_count[b] > hi)
            hi = m->bucket_offset[b] + m->bucket_count[b];
    }
    for (size_t b = 0; b < m->n_buckets; b++)
        for (size_t c = b + 1; c < m->n_buckets; c++)
            if (m->bucket_offset[b] < m->bucket_offset[c] + m->bucket_count[c] &&
                m->bucket_offset[c] < m->bucket_offset[b] + m->bucket_count[b]) {
                rt_errf(err, errlen, "%s: buckets %zu and %zu overlap", path, b, c);
                goto out;
            }
    if (total != m->n_params || lo != 0 || hi != m->n_params) {
        rt_errf(err, errlen, "%s: buckets do not cover the %zu parameters", path, m->n_params);
        goto out;
    }
    rc = TY_OK;
out:
    json_decref(root);
    if (rc != TY_OK)
        ckpt_meta_free(m);
    return rc;
}

/* Sorted (descending) steps of the step-N directories in dir. *steps is new. */
static ty_err list_steps(const char *dir, int64_t **steps, size_t *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    int64_t *v = NULL;
    size_t len = 0, cap = 0;
    *steps = NULL;
    *n = 0;
    if (!d) {
        rt_errf(err, errlen, "%s: %s", dir, strerror(errno));
        return TY_ENOTFOUND;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "step-", 5) != 0)
            continue;
        char *end;
        errno = 0;
        long long s = strtoll(e->d_name + 5, &end, 10);
        if (errno || *end || end == e->d_name + 5 || s < 0)
            continue;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            int64_t *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return TY_ENOMEM;
            }
            v = nv;
            cap = ncap;
        }
        v[len++] = s;
    }
    closedir(d);
    for (size_t i = 1; i < len; i++) /* insertion sort, descending: there are few */
        for (size_t j = i; j > 0 && v[j - 1] < v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *steps = v;
    *n = len;
    return TY_OK;
}

static int is_complete(const char *dir, int64_t step)
{
    ckpt_meta m;
    char err[256];
    if (ckpt_read_manifest(dir, step, &m, err, sizeof err) != TY_OK)
        return 0;
    int ok = check_files(dir, step, &m, err, sizeof err) == TY_OK;
    ckpt_meta_free(&m);
    return ok;
}

ty_err ckpt_latest(const char *dir, int64_t *step, char *err, size_t errlen)
{
    int64_t *steps = NULL;
    size_t n = 0;
    ty_err rc = list_steps(dir, &steps, &n, err, errlen);
    if (rc != TY_OK)
        return rc;
    rc = TY_ENOTFOUND;
    for (size_t i = 0; i < n; i++)
        if (is_complete(dir, steps[i])) {
            *step = steps[i];
            rc = TY_OK;
            break;
        }
    if (rc == TY_ENOTFOUND)
        rt_errf(err, errlen, "%s: no complete checkpoint", dir);
    free(steps);
    return rc;
}

ty_err ckpt_read(const char *dir, int64_t step, const ckpt_meta *m, int vec, size_t offset,
                 size_t count, float *dst, char *err, size_t errlen)
{
    char path[PATH_BYTES];
    ty_err rc = TY_EINVAL;
    int fd = -1, fd_rank = -1;
    size_t fd_owned = 0;

    if (vec < 0 || vec >= m->n_vectors || offset > m->n_params || count > m->n_params - offset) {
        rt_errf(err, errlen, "checkpoint read outside the vector");
        return TY_EINVAL;
    }
    while (count > 0) {
        size_t b = 0;
        while (b < m->n_buckets &&
               !(offset >= m->bucket_offset[b] && offset < m->bucket_offset[b] + m->bucket_count[b]))
            b++;
        if (b == m->n_buckets) {
            rt_errf(err, errlen, "element %zu is in no bucket", offset);
            goto out;
        }
        size_t bn = m->bucket_count[b], j = offset - m->bucket_offset[b];
        /* The old owner of j: shards 0..rem-1 hold q+1 elements, the others q. */
        size_t q = bn / (size_t)m->world, rem = bn % (size_t)m->world;
        int r = j < rem * (q + 1) ? (int)(j / (q + 1)) : (int)(rem + (j - rem * (q + 1)) / q);
        size_t s_off = comm_shard_offset(bn, m->world, r), s_cnt = comm_shard_count(bn, m->world, r);
        if (j < s_off || j >= s_off + s_cnt) { /* comm.h's rule and this inverse disagree */
            rt_errf(err, errlen, "internal error: shard rule mismatch at element %zu", offset);
            rc = TY_EINTERNAL;
            goto out;
        }
        size_t run = s_off + s_cnt - j;
        if (run > count)
            run = count;
        if (r != fd_rank) {
            if (fd >= 0)
                close(fd);
            fd_rank = -1;
            if ((rc = shard_path(path, sizeof path, dir, step, r, m->world, "", err, errlen)) != TY_OK)
                goto out;
            fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                rt_errf(err, errlen, "open %s: %s", path, strerror(errno));
                rc = TY_EIO;
                goto out;
            }
            unsigned char head[HEADER_BYTES];
            fd_owned = owned_count(m, r);
            if (pread_all(fd, head, sizeof head, 0) != 0 || memcmp(head, shard_magic, 8) != 0 ||
                get_u32(head + 8) != FORMAT_VERSION || get_u32(head + 12) != (uint32_t)r ||
                get_u32(head + 16) != (uint32_t)m->world ||
                get_u32(head + 20) != (uint32_t)m->n_vectors || get_u64(head + 24) != m->n_params ||
                get_u64(head + 32) != fd_owned || get_u64(head + 40) != (uint64_t)step) {
                rt_errf(err, errlen, "%s: header disagrees with the manifest", path);
                rc = TY_EINVAL;
                goto out;
            }
            fd_rank = r;
        }
        size_t pos = owned_pos(m, r, b) + (j - s_off);
        off_t at = (off_t)(HEADER_BYTES + ((size_t)vec * fd_owned + pos) * sizeof(float));
        if (pread_all(fd, dst, run * sizeof(float), at) != 0) {
            rt_errf(err, errlen, "read %s: %s", path, errno ? strerror(errno) : "short file");
            rc = TY_EIO;
            goto out;
        }
        dst += run;
        offset += run;
        count -= run;
    }
    rc = TY_OK;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int remove_step_dir(const char *dir, int64_t step)
{
    char sdir[PATH_BYTES], path[PATH_BYTES];
    if (step_path(sdir, sizeof sdir, dir, step, NULL, 0) != TY_OK)
        return -1;
    DIR *d = opendir(sdir);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int n = snprintf(path, sizeof path, "%s/%s", sdir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof path || unlink(path) != 0)
            rc = -1;
    }
    closedir(d);
    if (rmdir(sdir) != 0)
        rc = -1;
    return rc;
}

ty_err ckpt_prune(const char *dir, int keep, char *err, size_t errlen)
{
    int64_t *steps = NULL;
    size_t n = 0;
    ty_err rc = list_steps(dir, &steps, &n, err, errlen);
    if (rc != TY_OK)
        return rc;
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        int complete = is_complete(dir, steps[i]);
        if (complete && kept < keep) {
            kept++;
            continue;
        }
        /* Newer incomplete ones may be a checkpoint other ranks are writing right now. */
        if (kept == 0)
            continue;
        if (remove_step_dir(dir, steps[i]) != 0) {
            rt_errf(err, errlen, "could not remove %s/step-%012lld", dir, (long long)steps[i]);
            rc = TY_EIO;
        }
    }
    free(steps);
    return rc;
}
