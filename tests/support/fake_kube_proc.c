/* fake_kube_proc.c - see fake_kube_proc.h. */
#include "tests/support/fake_kube_proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

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

static size_t collect(char *p, size_t sz, size_t n, void *ud)
{
    char **acc = ud;
    size_t old = *acc ? strlen(*acc) : 0, add = sz * n;
    char *m = realloc(*acc, old + add + 1);
    if (!m)
        return 0;
    memcpy(m + old, p, add);
    m[old + add] = '\0';
    *acc = m;
    return add;
}

long fk_request(const char *base, const char *token, const char *method, const char *path,
                const char *body, char **text)
{
    long status = 0;
    char url[1024], auth[160];
    *text = NULL;
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    CURL *h = curl_easy_init();
    if (!h)
        return 0;
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    hd = curl_slist_append(hd, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, text);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return status;
}

void fk_selector(char *buf, size_t len, const char *job, int attempt)
{
    if (attempt > 0)
        snprintf(buf, len, "trainyard.io%%2Fjob-id%%3D%s%%2Ctrainyard.io%%2Fattempt%%3D%d", job,
                 attempt);
    else
        snprintf(buf, len, "trainyard.io%%2Fjob-id%%3D%s", job);
}

long fk_set_phase(const char *base, const char *token, const char *ns, const char *job,
                  int attempt, const char *body, int tries)
{
    char sel[256], path[512];
    fk_selector(sel, sizeof sel, job, attempt);
    snprintf(path, sizeof path, "/fake/pods/%s/phase?labelSelector=%s", ns, sel);
    for (int i = 0;; i++) {
        char *text = NULL;
        long st = fk_request(base, token, "POST", path, body, &text);
        free(text);
        if (st != 409 || i >= tries)
            return st;
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
    }
}
