/*
 * test_ranklog.c - scheduler/ranklog.c: the pump copies pipes to logs capped on
 * disk, the reader shows one logical log (the notice, P.1, P), follows it
 * across rotations and starts at the last N lines; a job's logs are pruned to
 * their total across attempts, oldest first.
 *
 * Completion is never waited for by time: a writer closes its pipe (or stops
 * writing) and ranklog_pump_flush() makes everything it wrote reach the file.
 */
#define _GNU_SOURCE /* pipe2, nftw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scheduler/ranklog.h"

#define LINE 16 /* "ss:nnnnnnnnnnnn\n" */

static char root[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/ty-ranklog-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* A log path under root, in directories that do not exist yet. */
static void log_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/logs/job/a1/%s.log", root, name);
}

/* The stream of seed: lines of LINE bytes, "ss:<line number>\n". */
static void gen(unsigned seed, uint64_t off, char *out, size_t n)
{
    char line[32];
    uint64_t cur = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t l = (off + i) / LINE;
        if (l != cur) {
            snprintf(line, sizeof line, "%02u:%012llu\n", seed % 100,
                     (unsigned long long)(l % 1000000000000ull));
            cur = l;
        }
        out[i] = line[(off + i) % LINE];
    }
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static void write_str(int fd, const char *s)
{
    write_all(fd, s, strlen(s));
}

/* Writes bytes [off, off + n) of stream seed, in chunks of `chunk`. */
static void write_gen(int fd, unsigned seed, uint64_t off, uint64_t n, size_t chunk)
{
    char *buf = malloc(chunk);
    assert_non_null(buf);
    while (n > 0) {
        size_t k = n < chunk ? (size_t)n : chunk;
        gen(seed, off, buf, k);
        write_all(fd, buf, k);
        off += k;
        n -= k;
    }
    free(buf);
}

typedef struct writer {
    pthread_t t;
    int fd;                       /* closed at the end */
    unsigned seed;
    uint64_t total;
    size_t chunk;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    write_gen(w->fd, w->seed, 0, w->total, w->chunk);
    close(w->fd);
    return NULL;
}

/* A pipe whose read end goes to the pump for path; returns the write end. */
static int add_pipe(ranklog_pump *p, const char *path)
{
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    assert_int_equal(ranklog_pump_add(p, fds[0], path), TY_OK);
    return fds[1];
}

static void flush_expect(ranklog_pump *p, const char *path, int want_open)
{
    int open = -1;
    assert_int_equal(ranklog_pump_flush(p, path, &open), TY_OK);
    assert_int_equal(open, want_open);
}

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void text_add(text *t, const char *p, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->p = realloc(t->p, t->cap);
        assert_non_null(t->p);
    }
    memcpy(t->p + t->len, p, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* Reads r until it returns 0, appending to t. */
static void read_to_end(ranklog_reader *r, text *t)
{
    char buf[7000]; /* not a divisor of anything the files hold */
    long n;
    while ((n = ranklog_read(r, buf, sizeof buf)) > 0)
        text_add(t, buf, (size_t)n);
    assert_int_equal(n, 0);
}

/* The whole logical log (or its tail), NUL-terminated; free() it. */
static text read_log(const char *path, long tail)
{
    ranklog_reader *r = NULL;
    text t = {0};
    assert_int_equal(ranklog_reader_open(path, tail, &r), TY_OK);
    text_add(&t, "", 0);
    read_to_end(r, &t);
    ranklog_reader_close(r);
    return t;
}

static uint64_t file_size(const char *path, const char *suffix)
{
    char p[PATH_MAX + 16];
    struct stat st;
    int n = snprintf(p, sizeof p, "%s%s", path, suffix);
    assert_true(n > 0 && (size_t)n < sizeof p);
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Checks that t[from..] is bytes [off, off + n) of stream seed. */
static void expect_gen(const text *t, size_t from, unsigned seed, uint64_t off, uint64_t n)
{
    assert_int_equal(t->len - from, n);
    char *want = malloc(n ? n : 1);
    assert_non_null(want);
    gen(seed, off, want, n);
    if (memcmp(t->p + from, want, n) != 0) {
        size_t i = 0;
        while (t->p[from + i] == want[i])
            i++;
        fail_msg("differs at byte %zu of %llu (stream offset %llu)", i, (unsigned long long)n,
                 (unsigned long long)(off + i));
    }
    free(want);
}

/* Parses the notice at the start of t; returns its length and the count it names. */
static size_t parse_notice(const text *t, const char *limit, uint64_t *dropped)
{
    unsigned long long d = 0;
    int at = 0;
    assert_int_equal(sscanf(t->p, "[trainyard] %llu bytes of older output were dropped (log limit %n",
                            &d, &at),
                     1);
    assert_true(at > 0);
    char tailtext[64];
    snprintf(tailtext, sizeof tailtext, "%s)\n", limit);
    assert_memory_equal(t->p + at, tailtext, strlen(tailtext));
    *dropped = d;
    return (size_t)at + strlen(tailtext);
}

/* ---- the cap ---------------------------------------------------------------------- */

/* A writer of many times the limit leaves at most the limit on disk; the log ends with its last bytes. */
static void test_cap(void **state)
{
    (void)state;
    const uint64_t limit = 1024 * 1024, total = 24 * limit + 12345;
    char path[PATH_MAX];
    log_path(path, sizeof path, "rank-0");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(limit, &p), TY_OK);
    writer w = {.fd = add_pipe(p, path), .seed = 7, .total = total, .chunk = 100000};
    assert_int_equal(pthread_create(&w.t, NULL, writer_main, &w), 0);
    pthread_join(w.t, NULL);
    flush_expect(p, path, 0);

    uint64_t size0 = file_size(path, ""), size1 = file_size(path, ".1");
    assert_true(size0 + size1 <= limit);
    assert_int_equal(size1, limit / 2); /* segments are cut at exactly limit/2 */
    assert_true(size0 > 0 && size0 <= limit / 2);

    text t = read_log(path, -1);
    uint64_t dropped = 0;
    size_t head = parse_notice(&t, "1 MiB", &dropped);
    assert_int_equal(dropped, total - size0 - size1);
    expect_gen(&t, head, 7, dropped, total - dropped);
    free(t.p);
    ranklog_pump_free(p);
}

/* The notice names the limit in the largest unit that divides it. */
static void test_notice_units(void **state)
{
    (void)state;
    static const struct {
        uint64_t limit;
        const char *name;
    } cases[] = {{3 * 1024, "3 KiB"}, {1000, "1000 bytes"}, {2ull * 1024 * 1024, "2 MiB"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[PATH_MAX], name[32];
        snprintf(name, sizeof name, "units-%zu", i);
        log_path(path, sizeof path, name);
        ranklog_pump *p = NULL;
        assert_int_equal(ranklog_pump_new(cases[i].limit, &p), TY_OK);
        int fd = add_pipe(p, path);
        write_gen(fd, 1, 0, cases[i].limit * 3, 4096);
        close(fd);
        flush_expect(p, path, 0);
        text t = read_log(path, -1);
        uint64_t dropped = 0;
        parse_notice(&t, cases[i].name, &dropped);
        assert_true(dropped > 0);
        free(t.p);
        ranklog_pump_free(p);
    }
}

/* ---- following -------------------------------------------------------------------- */

/* A reader that keeps up reads every byte once, across many rotations. */
static void test_follow_across_rotations(void **state)
{
    (void)state;
    const uint64_t limit = 256 * 1024; /* segments of 128 KiB */
    char path[PATH_MAX];
    log_path(path, sizeof path, "follow");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(limit, &p), TY_OK);
    int fd = add_pipe(p, path);
    ranklog_reader *r = NULL;
    assert_int_equal(ranklog_reader_open(path, -1, &r), TY_OK);
    text t = {0};
    text_add(&t, "", 0);
    read_to_end(r, &t);
    assert_int_equal(t.len, 0);

    uint64_t off = 0;
    for (int i = 0; i < 40; i++) {
        /* Less than a segment each time: at most one rotation between two reads. */
        uint64_t n = 37 * 1024 + (uint64_t)i * 1111;
        write_gen(fd, 3, off, n, 5000);
        off += n;
        flush_expect(p, path, 1);
        read_to_end(r, &t);
        assert_int_equal(t.len, off);
    }
    close(fd);
    flush_expect(p, path, 0);
    read_to_end(r, &t);
    expect_gen(&t, 0, 3, 0, off);
    assert_true(file_size(path, ".1") > 0);
    ranklog_reader_close(r);

    /* A new reader starts with the notice of what rotated away. */
    text all = read_log(path, -1);
    uint64_t dropped = 0;
    size_t head = parse_notice(&all, "256 KiB", &dropped);
    assert_true(dropped > 0);
    expect_gen(&all, head, 3, dropped, off - dropped);
    free(all.p);
    free(t.p);
    ranklog_pump_free(p);
}

/* A reader left behind by more than a segment is told what it missed, then goes on. */
static void test_follow_fell_behind(void **state)
{
    (void)state;
    /* Segments of 32769 bytes: the reader is mid-line when its segment ends. */
    const uint64_t limit = 64 * 1024 + 2, seg = limit / 2;
    char path[PATH_MAX];
    log_path(path, sizeof path, "behind");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(limit, &p), TY_OK);
    int fd = add_pipe(p, path);
    write_gen(fd, 4, 0, 10 * LINE, 4096);
    flush_expect(p, path, 1);
    ranklog_reader *r = NULL;
    assert_int_equal(ranklog_reader_open(path, -1, &r), TY_OK);
    char buf[LINE];
    assert_int_equal(ranklog_read(r, buf, 5), 5); /* mid-line */

    const uint64_t total = 10 * limit + 7;
    write_gen(fd, 4, 10 * LINE, total - 10 * LINE, 4096);
    close(fd);
    flush_expect(p, path, 0);

    /* The reader finishes the segment it holds open, then learns what went. */
    text t = {0};
    text_add(&t, "", 0);
    read_to_end(r, &t);
    ranklog_reader_close(r);
    uint64_t size0 = file_size(path, ""), size1 = file_size(path, ".1");
    uint64_t dropped = total - size0 - size1;
    char want_head[160];
    int hl = snprintf(want_head, sizeof want_head,
                      "\n[trainyard] %llu bytes of older output were dropped (log limit 65538 bytes)\n",
                      (unsigned long long)(dropped - seg));
    char *first = malloc(seg);
    gen(4, 0, first, seg);
    assert_true(t.len > seg - 5 + (size_t)hl);
    assert_memory_equal(t.p, first + 5, seg - 5);
    assert_memory_equal(t.p + seg - 5, want_head, (size_t)hl);
    expect_gen(&t, seg - 5 + (size_t)hl, 4, dropped, size1 + size0);
    free(first);
    free(t.p);
    ranklog_pump_free(p);
}

/* ---- tail ------------------------------------------------------------------------- */

/* Writes s and makes sure it is in the log. */
static void put(ranklog_pump *p, int fd, const char *path, const char *s)
{
    write_str(fd, s);
    flush_expect(p, path, 1);
}

typedef struct tail_case {
    long n;           /* tail= */
    const char *want; /* the whole text read */
} tail_case;

static void expect_tails(const char *path, const tail_case *c, size_t nc)
{
    for (size_t i = 0; i < nc; i++) {
        text t = read_log(path, c[i].n);
        if (strcmp(t.p, c[i].want) != 0)
            fail_msg("tail=%ld: got \"%s\", want \"%s\"", c[i].n, t.p, c[i].want);
        free(t.p);
    }
}

/* Segments of 20 bytes: the lines are found across the boundary, with and without a last newline. */
static void test_tail(void **state)
{
    (void)state;
    char path[PATH_MAX];
    log_path(path, sizeof path, "tail");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(40, &p), TY_OK);
    int fd = add_pipe(p, path);

    /* An empty log has no lines. */
    static const tail_case empty[] = {{-1, ""}, {0, ""}, {1, ""}, {5, ""}};
    expect_tails(path, empty, 4);

    put(p, fd, path, "aaaa\nbbbb\ncccc\ndddd\n"); /* fills P */
    put(p, fd, path, "eeee\nffff");              /* P.1 = the above, P = this */
    assert_int_equal(file_size(path, ".1"), 20);
    assert_int_equal(file_size(path, ""), 9);
    static const tail_case open_end[] = {
        {0, ""},
        {1, "ffff"},
        {2, "eeee\nffff"},
        {3, "dddd\neeee\nffff"}, /* across the boundary, which falls on a newline */
        {6, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff"},
        {7, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff"},
        {100000, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff"},
        {-1, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff"},
    };
    expect_tails(path, open_end, sizeof open_end / sizeof open_end[0]);

    put(p, fd, path, "\n");
    static const tail_case closed_end[] = {
        {1, "ffff\n"},
        {2, "eeee\nffff\n"},
        {6, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff\n"},
        {7, "aaaa\nbbbb\ncccc\ndddd\neeee\nffff\n"},
    };
    expect_tails(path, closed_end, sizeof closed_end / sizeof closed_end[0]);

    /* P is now "eeee\nffff\ngggggggggg" (20); then a line split by the boundary. */
    put(p, fd, path, "gggggggggg");
    put(p, fd, path, "GG\nhh\n");
    assert_int_equal(file_size(path, ".1"), 20);
    assert_int_equal(file_size(path, ""), 6);
    static const tail_case split[] = {
        {1, "hh\n"},
        {2, "ggggggggggGG\nhh\n"},
        {3, "ffff\nggggggggggGG\nhh\n"},
        {4, "eeee\nffff\nggggggggggGG\nhh\n"},
        /* Older lines were dropped: the notice is the first line of the log. */
        {5, "[trainyard] 20 bytes of older output were dropped (log limit 40 bytes)\n"
            "eeee\nffff\nggggggggggGG\nhh\n"},
        {50, "[trainyard] 20 bytes of older output were dropped (log limit 40 bytes)\n"
             "eeee\nffff\nggggggggggGG\nhh\n"},
        {-1, "[trainyard] 20 bytes of older output were dropped (log limit 40 bytes)\n"
             "eeee\nffff\nggggggggggGG\nhh\n"},
    };
    expect_tails(path, split, sizeof split / sizeof split[0]);

    /* A tail followed: the last line, then what comes next. */
    ranklog_reader *r = NULL;
    assert_int_equal(ranklog_reader_open(path, 1, &r), TY_OK);
    text t = {0};
    text_add(&t, "", 0);
    read_to_end(r, &t);
    assert_string_equal(t.p, "hh\n");
    put(p, fd, path, "iiiiiiiiiiiiiiiiiiii\njj"); /* rotates P again */
    read_to_end(r, &t);
    assert_string_equal(t.p, "hh\niiiiiiiiiiiiiiiiiiii\njj");
    close(fd);
    flush_expect(p, path, 0);
    read_to_end(r, &t);
    assert_string_equal(t.p, "hh\niiiiiiiiiiiiiiiiiiii\njj");
    ranklog_reader_close(r);
    free(t.p);
    ranklog_pump_free(p);
}

/* A tail of a long log reads chunks backwards from the end, across P.1. */
static void test_tail_long(void **state)
{
    (void)state;
    const uint64_t limit = 4 * 1024 * 1024, total = 3 * 1024 * 1024 + 5 * LINE;
    char path[PATH_MAX];
    log_path(path, sizeof path, "tail-long");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(limit, &p), TY_OK);
    int fd = add_pipe(p, path);
    write_gen(fd, 9, 0, total, 65536);
    close(fd);
    flush_expect(p, path, 0);
    assert_int_equal(file_size(path, ""), total - limit / 2);
    /* 100000 lines of 16 bytes: 1.6 MB, so the start lies in P.1. */
    static const long ns[] = {1, 4096, 100000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        text t = read_log(path, ns[i]);
        expect_gen(&t, 0, 9, total - (uint64_t)ns[i] * LINE, (uint64_t)ns[i] * LINE);
        free(t.p);
    }
    ranklog_pump_free(p);
}

/* ---- end of file, flush, many pipes ----------------------------------------------- */

/* A log is final once every writer closed; a writer left behind keeps it open, not waited for. */
static void test_eof_and_flush(void **state)
{
    (void)state;
    char path[PATH_MAX];
    log_path(path, sizeof path, "eof");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(RANKLOG_DEFAULT_LIMIT, &p), TY_OK);
    int fd = add_pipe(p, path);
    int left_behind = dup(fd); /* what a rank's grandchild holds */
    assert_true(left_behind >= 0);
    write_str(fd, "from the rank\n");
    close(fd);
    /* The rank ended: its output is in the log, and the pipe is still open. */
    flush_expect(p, path, 1);
    text t = read_log(path, -1);
    assert_string_equal(t.p, "from the rank\n");
    free(t.p);

    write_str(left_behind, "from what it left\n");
    close(left_behind);
    flush_expect(p, path, 0);
    t = read_log(path, -1);
    assert_string_equal(t.p, "from the rank\nfrom what it left\n");
    free(t.p);
    /* Paths the pump does not hold (any more) are complete. */
    char other[PATH_MAX];
    log_path(other, sizeof other, "never-added");
    flush_expect(p, other, 0);
    ranklog_pump_free(p);
    /* Freed, the pump left the log whole. */
    t = read_log(path, -1);
    assert_string_equal(t.p, "from the rank\nfrom what it left\n");
    free(t.p);
}

/* Freeing the pump copies what the pipes hold and closes them: later writes fail. */
static void test_free_with_open_pipes(void **state)
{
    (void)state;
    char path[PATH_MAX];
    log_path(path, sizeof path, "free");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(RANKLOG_DEFAULT_LIMIT, &p), TY_OK);
    int fd = add_pipe(p, path);
    write_str(fd, "before free\n");
    ranklog_pump_free(p);
    assert_int_equal(write(fd, "x", 1), -1);
    assert_int_equal(errno, EPIPE);
    close(fd);
    text t = read_log(path, -1);
    assert_string_equal(t.p, "before free\n");
    free(t.p);
}

/* A log added again (same path) is appended to; its dropped count is kept. */
static void test_append(void **state)
{
    (void)state;
    char path[PATH_MAX];
    log_path(path, sizeof path, "append");
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(40, &p), TY_OK);
    int fd = add_pipe(p, path);
    /* While it is written, the log takes no second pipe. */
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    assert_int_equal(ranklog_pump_add(p, fds[0], path), TY_EEXISTS);
    close(fds[1]);
    write_str(fd, "0123456789012345678\n0123456789012345678\n0123456789\n");
    close(fd);
    flush_expect(p, path, 0);
    fd = add_pipe(p, path);
    write_str(fd, "more\n");
    close(fd);
    flush_expect(p, path, 0);
    text t = read_log(path, -1);
    assert_string_equal(t.p, "[trainyard] 20 bytes of older output were dropped (log limit 40 bytes)\n"
                             "0123456789012345678\n0123456789\nmore\n");
    free(t.p);
    ranklog_pump_free(p);
}

/* Many pipes at once, each to its own log, each complete and in order. */
static void test_many_pipes(void **state)
{
    (void)state;
    enum { N = 48 };
    const uint64_t limit = 512 * 1024;
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(limit, &p), TY_OK);
    static writer w[N];
    char paths[N][PATH_MAX];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "rank-%d", i);
        log_path(paths[i], sizeof paths[i], name);
        /* Every fourth writes past the limit. */
        w[i] = (writer){.fd = add_pipe(p, paths[i]),
                        .seed = (unsigned)i,
                        .total = i % 4 == 0 ? 3 * limit + (uint64_t)i : 1000 * (uint64_t)i + 1,
                        .chunk = 777 + (size_t)i * 100};
    }
    assert_true(ranklog_pump_active(p) <= N);
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&w[i].t, NULL, writer_main, &w[i]), 0);
    for (int i = 0; i < N; i++) {
        pthread_join(w[i].t, NULL);
        flush_expect(p, paths[i], 0);
    }
    for (int i = 0; i < N; i++) {
        text t = read_log(paths[i], -1);
        uint64_t kept = file_size(paths[i], "") + file_size(paths[i], ".1");
        assert_true(kept <= limit);
        size_t head = 0;
        uint64_t dropped = 0;
        if (i % 4 == 0)
            head = parse_notice(&t, "512 KiB", &dropped);
        assert_int_equal(dropped + kept, w[i].total);
        expect_gen(&t, head, (unsigned)i, dropped, kept);
        free(t.p);
    }
    ranklog_pump_free(p);
}

/* ---- errors and old logs ---------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    ranklog_pump *p = NULL;
    assert_int_equal(ranklog_pump_new(0, &p), TY_EINVAL);
    assert_int_equal(ranklog_pump_new(1, &p), TY_EINVAL);
    assert_int_equal(ranklog_pump_new(RANKLOG_MIN_LIMIT, &p), TY_OK);
    assert_int_equal(ranklog_pump_add(p, -1, "x"), TY_EINVAL);

    /* A parent that is a file: the pipe is closed (stolen) all the same. */
    char file[PATH_MAX], path[PATH_MAX];
    snprintf(file, sizeof file, "%s/plain", root);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/plain/rank-0.log", root);
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    assert_int_equal(ranklog_pump_add(p, fds[0], path), TY_EIO);
    assert_int_equal(write(fds[1], "x", 1), -1);
    assert_int_equal(errno, EPIPE);
    close(fds[1]);
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    assert_int_equal(ranklog_pump_add(p, fds[0], ""), TY_EINVAL);
    close(fds[1]);

    ranklog_reader *r = NULL;
    log_path(path, sizeof path, "missing");
    assert_int_equal(ranklog_reader_open(path, -1, &r), TY_ENOTFOUND);
    assert_int_equal(ranklog_reader_open(path, 3, &r), TY_ENOTFOUND);
    assert_int_equal(ranklog_reader_open("", -1, &r), TY_EINVAL);
    assert_null(r);
    ranklog_pump_free(p);
    ranklog_pump_free(NULL);
    ranklog_reader_close(NULL);
}

/* A log of one plain file (written before the pump existed) reads whole, and by tail. */
static void test_plain_file(void **state)
{
    (void)state;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/old.log", root);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("one\ntwo\nthree\n", fp);
    fclose(fp);
    static const tail_case c[] = {
        {-1, "one\ntwo\nthree\n"}, {2, "two\nthree\n"}, {3, "one\ntwo\nthree\n"}, {9, "one\ntwo\nthree\n"}};
    expect_tails(path, c, sizeof c / sizeof c[0]);
}

/* ---- a job's logs across attempts ----------------------------------------------- */

typedef struct prune_case {
    uint64_t sizes[8];             /* oldest first */
    size_t n;
    uint64_t budget;
    size_t want;                   /* how many of the oldest are deleted */
} prune_case;

static void test_prune_count(void **state)
{
    (void)state;
    static const prune_case c[] = {
        {{0}, 0, 100, 0},                       /* nothing before the current attempt */
        {{10, 20, 30}, 3, 100, 0},              /* all fit */
        {{10, 20, 30}, 3, 60, 0},               /* exactly */
        {{10, 20, 30}, 3, 59, 1},               /* the oldest goes */
        {{10, 20, 30}, 3, 30, 2},               /* only the newest fits */
        {{10, 20, 30}, 3, 29, 3},               /* not even the newest */
        {{10, 20, 30}, 3, 0, 3},                /* a total of 0 keeps nothing */
        {{5, 500, 5, 5}, 4, 100, 2},            /* no gap: a big one cuts off the older */
        {{0, 0, 40, 40}, 4, 100, 0},            /* pruned attempts cost nothing */
        {{UINT64_MAX, 1}, 2, UINT64_MAX, 1},    /* no overflow */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (ranklog_prune_count(c[i].sizes, c[i].n, c[i].budget) != c[i].want)
            fail_msg("case %zu: %zu deleted, expected %zu", i,
                     ranklog_prune_count(c[i].sizes, c[i].n, c[i].budget), c[i].want);
}

/* Writes n bytes into root/logs/job/a<attempt>/<name>. */
static void put_file(int attempt, const char *name, size_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/logs/job/a%d", root, attempt);
    mkdir(path, 0750);
    snprintf(path, sizeof path, "%s/logs/job/a%d/%s", root, attempt, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++)
        fputc('x', fp);
    fclose(fp);
}

static int exists(int attempt, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/logs/job/a%d/%s", root, attempt, name);
    return access(path, F_OK) == 0;
}

static void test_prune_job(void **state)
{
    (void)state;
    char dir[PATH_MAX], adir[PATH_MAX];
    ranklog_prune_result res;
    snprintf(dir, sizeof dir, "%s/logs/job", root);

    /* No logs yet: nothing to do. */
    assert_int_equal(ranklog_prune_job(dir, 3, 100, &res), TY_OK);
    assert_int_equal(res.deleted, 0);
    assert_int_equal(ranklog_prune_job(dir, 0, 100, &res), TY_EINVAL);

    snprintf(adir, sizeof adir, "%s/logs", root);
    assert_int_equal(mkdir(adir, 0750), 0);
    assert_int_equal(mkdir(dir, 0750), 0);
    /* Attempts 1..4 of 2 ranks, 40 bytes each (30 + 10 of a rotated segment); 5 runs. */
    for (int a = 1; a <= 5; a++) {
        put_file(a, "rank-0.log", 30);
        put_file(a, "rank-0.log.1", 10);
        put_file(a, "rank-1.log", 40);
        put_file(a, "rank-0.log.dropped", 0);
    }
    put_file(10, "rank-0.log", 1000); /* a later attempt than the current: never touched */

    /* 80 bytes an attempt; 200 keep the newest two (3, 4). */
    assert_int_equal(ranklog_prune_job(dir, 5, 200, &res), TY_OK);
    assert_int_equal(res.deleted, 2);
    assert_int_equal(res.freed, 160);
    assert_int_equal(res.kept, 160);
    for (int a = 1; a <= 2; a++) {
        assert_false(exists(a, "rank-0.log"));
        assert_false(exists(a, "rank-0.log.1"));
        assert_false(exists(a, "rank-1.log"));
        assert_true(exists(a, RANKLOG_PRUNED_FILE));
        uint64_t bytes = 0, budget = 0;
        int ranks = 0;
        snprintf(adir, sizeof adir, "%s/logs/job/a%d", root, a);
        assert_int_equal(ranklog_pruned(adir, &bytes, &budget, &ranks), 1);
        assert_int_equal(bytes, 80);
        assert_int_equal(budget, 200);
        assert_int_equal(ranks, 2);
    }
    for (int a = 3; a <= 5; a++) {
        assert_true(exists(a, "rank-0.log"));
        snprintf(adir, sizeof adir, "%s/logs/job/a%d", root, a);
        assert_int_equal(ranklog_pruned(adir, NULL, NULL, NULL), 0);
    }
    assert_true(exists(10, "rank-0.log"));

    /* Again, same total: nothing more to delete; pruned attempts are not counted. */
    assert_int_equal(ranklog_prune_job(dir, 5, 200, &res), TY_OK);
    assert_int_equal(res.deleted, 0);
    assert_int_equal(res.kept, 160);

    /* The current attempt's logs are never deleted, even past the total. */
    assert_int_equal(ranklog_prune_job(dir, 5, 0, &res), TY_OK);
    assert_int_equal(res.deleted, 2);
    assert_true(exists(5, "rank-0.log"));
    assert_false(exists(4, "rank-0.log"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notice_units, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follow_across_rotations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follow_fell_behind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eof_and_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_with_open_pipes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_pipes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plain_file, setup, teardown),
        cmocka_unit_test(test_prune_count),
        cmocka_unit_test_setup_teardown(test_prune_job, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
