/*
 * ty_mem.h - giving freed memory back to the system.
 *
 * glibc keeps what is freed in the arena of the thread that freed it (a server thread, the
 * scheduler, each Kubernetes writer, informer and the log collector have arenas of their own)
 * and returns it only from the top of the main heap: after a burst of work the process can
 * hold tens of MiB that nothing uses. ty_mem_trim() hands it back (malloc_trim(0)).
 *
 * Trimming walks every arena and returns pages with madvise(), which costs a TLB shootdown on
 * every thread of the process: call it where a burst of garbage was made and the work goes
 * quiet, never per event. Process-wide, it runs at most once a second whoever calls it.
 */
#ifndef TY_MEM_H
#define TY_MEM_H

/* malloc_trim(0), unless it ran less than a second ago (in any thread). Returns 1 when it ran,
 * 0 when it was skipped. Safe from any thread. */
int ty_mem_trim(void);

#endif
