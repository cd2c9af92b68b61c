/*
 * ranklog.h - the logs of a job's ranks: written by the server from a pipe per
 * rank, capped on disk, read back as one logical log.
 *
 * A rank's stdout and stderr are the write end of a pipe; the server keeps the
 * read end and hands it to the pump, whose one thread copies what arrives to the
 * rank's log file until end of file (the rank, and everything it started, closed
 * the pipe). The rank never holds a descriptor of its log.
 *
 * On disk, for the log path P (e.g. <data>/logs/<id>/a<n>/rank-<r>.log):
 *
 *   P           the current segment, appended to
 *   P.1         the previous segment (absent until the first rotation)
 *   P.dropped   "<dropped bytes> <limit>\n": how many bytes of older output were
 *               deleted, and the limit in force; created with the log
 *
 * The cap: a segment holds at most limit/2 bytes. When P is full it becomes P.1
 * (the old P.1 is deleted and its size added to the dropped count) and a new P
 * starts, so one rank's log never takes more than `limit` bytes on disk, plus
 * the few bytes of P.dropped. Writes are split at the segment boundary: what
 * each segment holds depends only on the bytes written, not on how they came.
 *
 * The logical log is what a reader sees:
 *
 *   [ "[trainyard] <n> bytes of older output were dropped (log limit <l>)\n" ]
 *   + P.1 + P
 *
 * the notice only when bytes were dropped. A reader follows it across
 * rotations like `tail -F` (at the end of P, once P became P.1, it goes on at
 * offset 0 of the new P), and a reader that fell behind by more than one
 * segment gets the notice again, naming the bytes it missed, and goes on with
 * the oldest segment there is. A rotation holds an exclusive flock() on
 * P.dropped, and a reader a shared one while it opens the segments, so a
 * reader never sees half a rotation.
 *
 * Logs written before this module (a single file, no P.dropped) read as a log
 * that never rotated.
 *
 * Threads: a pump's functions may be called from any thread; the pump's own
 * thread does the copying. A reader belongs to one thread at a time; readers
 * are independent of each other and of the pump (they share only the files).
 */
#ifndef TY_SCHEDULER_RANKLOG_H
#define TY_SCHEDULER_RANKLOG_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty_error.h"

/* The default cap of one rank's log (--local-log-limit). */
#define RANKLOG_DEFAULT_LIMIT (256ull * 1024 * 1024)
/* The smallest cap accepted: a segment holds at least one byte. */
#define RANKLOG_MIN_LIMIT 2ull

typedef struct ranklog_pump ranklog_pump;

/*
 * Makes a pump and starts its thread. limit_bytes caps each log it writes
 * (>= RANKLOG_MIN_LIMIT, else TY_EINVAL). *out is new: free it with
 * ranklog_pump_free(). TY_ENOMEM, TY_EIO (no epoll or eventfd, no thread).
 */
ty_err ranklog_pump_new(uint64_t limit_bytes, ranklog_pump **out);

/*
 * Copies everything read from read_fd to the log at path, from now until end
 * of file. read_fd is stolen, on failure too (closed then: a rank writing to
 * it gets EPIPE or SIGPIPE, so fail the launch). path is borrowed (copied).
 * The parent directories are created (0750) when missing; an existing log is
 * appended to, with its dropped count kept. P and P.dropped exist when this
 * returns TY_OK, so a reader finds the (empty) log at once. The descriptor is
 * made non-blocking; the write end's flags are not touched.
 * TY_EINVAL (read_fd < 0, path empty or too long), TY_EEXISTS (a pipe not at
 * end of file copies to that path already), TY_EIO (directory or file not
 * created), TY_ENOMEM, TY_ESHUTDOWN (the pump is being freed).
 */
ty_err ranklog_pump_add(ranklog_pump *p, int read_fd, const char *path);

/*
 * Makes the log at path complete up to now: when it returns TY_OK, every byte
 * written into that log's pipe before the call began is in the file (written
 * with write(2): visible to readers, not fsync()ed). It never waits for the
 * writers: it copies what the pipe holds now, on the calling thread, and
 * returns, so it cannot block on a process that keeps the pipe open. Its cost:
 * copying what the pipe holds (at most its capacity, 64 KiB by default), after
 * waiting for the one chunk the pump's thread may be copying.
 *
 * Call it after a rank's exit was observed and before reporting it: whatever
 * the rank wrote before it exited is then in its log. *still_open (may be NULL) is 0
 * when the pipe reached end of file (the log is final), 1 when some process
 * still holds the write end - a process the rank started and left behind - and
 * the log may still grow until it exits. A path the pump does not know (never
 * added, or already at end of file and closed) is complete: TY_OK, *open = 0.
 * TY_EIO when the pipe could not be read (the log ends there).
 */
ty_err ranklog_pump_flush(ranklog_pump *p, const char *path, int *still_open);

/* Logs the pump still copies (pipes not at end of file yet); for tests and metrics. */
size_t ranklog_pump_active(ranklog_pump *p);

/*
 * Stops the thread, copies what every pipe holds now, and closes every pipe
 * and file (a process still writing then gets EPIPE or SIGPIPE). Accepts NULL.
 */
void ranklog_pump_free(ranklog_pump *p);

/*
 * A writer appends to one log from the caller's own thread, with the same cap and rotation
 * as the pump, for output that does not come through a pipe (a Kubernetes pod's log, read
 * from the API). One writer per log at a time, and not beside a pump's pipe to the same log.
 */
typedef struct ranklog_writer ranklog_writer;

/*
 * Opens the log at path for appending within limit_bytes (>= RANKLOG_MIN_LIMIT), creating
 * it, P.dropped and the parent directories (0750) as ranklog_pump_add() does; an existing
 * log is appended to. keep_bytes >= 0 first cuts the current segment P back to that many
 * bytes when it is longer (what a writer that stopped before recording its place wrote past
 * it); -1 keeps it whole. *out is new: ranklog_writer_close(). TY_EINVAL, TY_ENOMEM, TY_EIO.
 */
ty_err ranklog_writer_open(const char *path, uint64_t limit_bytes, int64_t keep_bytes,
                           ranklog_writer **out);
/* Appends n bytes, rotating at each segment boundary. TY_EIO when a write failed (logged
 * once; what was not written is lost). */
ty_err ranklog_writer_write(ranklog_writer *w, const char *data, size_t n);
/* The bytes in the current segment P now. */
uint64_t ranklog_writer_size(const ranklog_writer *w);
/* Accepts NULL. */
void ranklog_writer_close(ranklog_writer *w);

typedef struct ranklog_reader ranklog_reader;

/*
 * Opens the logical log at path (the path given to ranklog_pump_add()).
 * tail_lines < 0: from the beginning (the notice first, when bytes were
 * dropped); tail_lines >= 0: from the start of the last tail_lines lines, found
 * by reading backwards in chunks (a log shorter than that reads whole, notice
 * included: the notice is a line too). A last line without a newline counts
 * as a line. *out is new: close it with ranklog_reader_close().
 * TY_ENOTFOUND when the log does not exist, TY_EINVAL, TY_EIO, TY_ENOMEM.
 */
ty_err ranklog_reader_open(const char *path, long tail_lines, ranklog_reader **out);

/*
 * Copies up to max bytes of the logical log into buf: returns their number
 * (> 0), 0 at the current end (more may come while the log is written: call
 * again later to follow it), -1 on an error.
 */
long ranklog_read(ranklog_reader *r, char *buf, size_t max);

/* Accepts NULL. */
void ranklog_reader_close(ranklog_reader *r);

/* ---- a job's logs across attempts ------------------------------------------------- */

/*
 * Each attempt of a job writes its own directory of logs, <logs>/<id>/a<N>/, each
 * rank's within the per-rank cap; a job restarted many times would keep them all.
 * The job's total (--local-job-log-limit) bounds what its previous attempts keep:
 * when attempt N starts, the previous attempts are measured (the bytes of their
 * files) and the oldest are deleted until the newest ones left fit in the total.
 * Attempt N itself (and anything newer) is never touched, and it writes at most
 * world_size x the per-rank cap while it runs: a job's logs take at most
 * total + world_size x per-rank cap on disk.
 *
 * A deleted attempt's directory stays, holding only RANKLOG_PRUNED_FILE,
 * "<bytes deleted> <total> <ranks>
", so that a reader can say what happened to
 * its logs instead of "no log".
 */
#define RANKLOG_PRUNED_FILE "pruned"
/* The default total of a job's logs (--local-job-log-limit): this many per-rank caps,
 * so that a 4-rank gang's previous attempt fits whole at the defaults (1 GiB). */
#define RANKLOG_JOB_LIMIT_FACTOR 4

/*
 * The choice, as a pure function: sizes[0..n) are the bytes of a job's previous
 * attempts' logs, oldest first. Returns how many of the oldest to delete (0..n) so
 * that the rest - the newest attempts, without a gap - add up to at most budget.
 * An attempt larger than budget on its own is deleted with every older one.
 */
size_t ranklog_prune_count(const uint64_t *sizes, size_t n, uint64_t budget);

typedef struct ranklog_prune_result {
    int deleted;                   /* attempts whose logs were deleted by this call */
    uint64_t freed;                /* their bytes */
    uint64_t kept;                 /* bytes of the previous attempts' logs left */
} ranklog_prune_result;

/*
 * Prunes the logs of one job: job_dir is <logs>/<id>; its a<N> directories with
 * N < current are measured and the oldest deleted as ranklog_prune_count() says
 * (each left with RANKLOG_PRUNED_FILE). Nothing of a<current> or newer is read or
 * deleted. A job_dir that does not exist is TY_OK with nothing done. Costs one
 * readdir of job_dir and one of each a<N> (a few files each). out may be NULL.
 * TY_EINVAL (current < 1, path too long), TY_ENOMEM, TY_EIO (a directory could
 * not be read, or a file not deleted: what was deleted stays deleted).
 */
ty_err ranklog_prune_job(const char *job_dir, int current, uint64_t budget,
                         ranklog_prune_result *out);

/*
 * 1 when the logs of attempt_dir (<logs>/<id>/a<N>) were deleted by a prune: then
 * *bytes, *budget and *ranks (each may be NULL) say how many bytes were deleted,
 * the total in force and how many ranks had logs there. 0 otherwise.
 */
int ranklog_pruned(const char *attempt_dir, uint64_t *bytes, uint64_t *budget, int *ranks);

#endif
