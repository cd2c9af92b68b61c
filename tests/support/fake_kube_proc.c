/* fake_kube_proc.c - see fake_kube_proc.h. */
#include "tests/support/fake_kube_proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_ARGS 24

pid_t fk_proc_start(const char *binary, const char *token, const char *nodes,
                    const char *const *extra, int *port)
{
    const char *argv[MAX_ARGS] = {binary, "--port", "0", "--token", token, "--nodes", nodes};
    int n = 7, fds[2];
    for (size_t i = 0; extra && extra[i] && n < MAX_ARGS - 1; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(binary, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    char line[64] = "";
    FILE *f = fdopen(fds[0], "r");
    int ok = f && fgets(line, sizeof line, f);
    if (f)
        fclose(f);
    else
        close(fds[0]);
    if (pid < 0 || !ok) {
        if (pid > 0)
            kill(pid, SIGKILL);
        return -1;
    }
    *port = (int)strtol(line, NULL, 10);
    return pid;
}
