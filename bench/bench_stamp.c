/*
 * bench_stamp.c - the job of bench_sched's latency run: writes the time at
 * which it started (CLOCK_REALTIME, nanoseconds, one decimal line) to FILE,
 * or to $TRAINYARD_OUTPUT_DIR/stamp, and exits 0.
 *
 *   bench_stamp [FILE]
 *
 * The clock is read first thing in main(), so the figure is the exec of the
 * rank plus the dynamic loader, nothing of this program's own work. The
 * file appears whole (written aside, then renamed), so a reader polling for
 * it never sees a partial number.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    struct timespec ts;
    char path[4096], tmp[4200], line[32];
    const char *dir;
    int fd, n;

    clock_gettime(CLOCK_REALTIME, &ts);
    if (argc > 1) {
        snprintf(path, sizeof path, "%s", argv[1]);
    } else if ((dir = getenv("TRAINYARD_OUTPUT_DIR")) != NULL && *dir) {
        snprintf(path, sizeof path, "%s/stamp", dir);
    } else {
        fprintf(stderr, "usage: bench_stamp FILE (or set TRAINYARD_OUTPUT_DIR)\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    n = snprintf(line, sizeof line, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}
