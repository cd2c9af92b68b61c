/*
 * comm_int.h - what comm.c (the ring) and rendezvous.c (how the ring forms) share:
 * bounded text, the monotonic clock, and blocking socket I/O with timeouts
 * (comm_net.c). Internal to ty_comm; nothing outside runtime/comm*.c and
 * runtime/rendezvous.c includes it.
 */
#ifndef TY_RUNTIME_COMM_INT_H
#define TY_RUNTIME_COMM_INT_H

#include <stddef.h>

/* How a blocking send or receive ended. */
enum io { IO_OK, IO_CLOSED, IO_TIMEOUT, IO_ERROR };

/* Formats into dst; a message cut short stays a message, marked by "...". */
void cnet_fmt(char *dst, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
/* Seconds on CLOCK_MONOTONIC. */
double cnet_now_s(void);
/* Milliseconds until deadline (cnet_now_s() time), rounded up; 0 once it has passed. */
int cnet_remaining_ms(double deadline);
void cnet_sleep_ms(int ms);
/* Thread-safe text for the errno values sockets produce (static storage). */
const char *cnet_errno_text(int e);
/* Bounds every later blocking send and recv on fd (ms < 1 counts as 1). */
void cnet_set_io_timeout(int fd, int ms);
/*
 * Reads exactly n bytes from a blocking socket whose SO_RCVTIMEO is set.
 * IO_TIMEOUT means a whole timeout passed without a byte; *err gets errno on
 * IO_TIMEOUT and IO_ERROR.
 */
enum io cnet_recv(int fd, void *p, size_t n, int *err);
/*
 * As cnet_recv, but the whole read ends by deadline (cnet_now_s() time), however the
 * bytes trickle in: IO_TIMEOUT once it has passed. Changes fd's receive timeout.
 */
enum io cnet_recv_by(int fd, void *p, size_t n, double deadline, int *err);
/* Sends hdr[0..hlen) then p[0..n) (p may be NULL when n is 0); see cnet_recv. */
enum io cnet_send(int fd, const void *hdr, size_t hlen, const void *p, size_t n, int *err);

#endif
