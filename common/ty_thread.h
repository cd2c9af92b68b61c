/*
 * ty_thread.h - naming the server's threads.
 *
 * Each long-lived thread names itself when it starts (at most 15 characters, "ty-" and what it
 * does), so that `top -H`, `ps -L`, /proc/PID/task/TID/comm and profilers tell the scheduler,
 * the store's writer, the Kubernetes writers, informers and log collector apart.
 */
#ifndef TY_THREAD_H
#define TY_THREAD_H

/* Names the calling thread (cut to 15 characters). A name the kernel refuses is ignored. */
void ty_thread_name(const char *name);

#endif
