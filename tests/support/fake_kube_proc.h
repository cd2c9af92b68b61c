/*
 * fake_kube_proc.h - starts tests/support/fake_kube's binary for a test: `BINARY --port 0
 * --token TOKEN --nodes NODES [extra...]`, reads the port it prints, and ties its life to the
 * test process (a test that dies does not leave the fake running).
 */
#ifndef TY_TEST_FAKE_KUBE_PROC_H
#define TY_TEST_FAKE_KUBE_PROC_H

#include <sys/types.h>

/* Returns the fake's pid with *port set, or -1. extra is NULL-terminated; may be NULL. */
pid_t fk_proc_start(const char *binary, const char *token, const char *nodes,
                    const char *const *extra, int *port);

/*
 * One request to the fake at base ("http://127.0.0.1:PORT") with token as the bearer and a JSON
 * body (NULL: none). Returns the HTTP status (0: no answer) with the answer's body in *text
 * (new, NUL-terminated; NULL when it had none).
 */
long fk_request(const char *base, const char *token, const char *method, const char *path,
                const char *body, char **text);

/* The labelSelector, URL-encoded, that picks job's objects: those of one attempt when
 * attempt > 0 (the backend's labels trainyard.io/job-id and trainyard.io/attempt). */
void fk_selector(char *buf, size_t len, const char *job, int attempt);

/*
 * Moves every pod of the attempt of job in namespace ns to the phase in body, as a kubelet
 * would (POST /fake/pods/NS/phase). The fake answers 409 while a pod is not bound or its
 * attempt's Secret is not there yet: asked again every 100 ms, at most tries more times.
 * Returns the last HTTP status (200: done).
 */
long fk_set_phase(const char *base, const char *token, const char *ns, const char *job,
                  int attempt, const char *body, int tries);

#endif
