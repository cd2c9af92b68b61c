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

#endif
