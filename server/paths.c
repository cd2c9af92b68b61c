/*
 * paths.c - see paths.h.
 */
#include "server/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ty_err paths_make_parent_dir(const char *file_path, char *err, size_t errlen)
{
    char dir[4096];
    const char *slash = strrchr(file_path, '/');
    if (!slash || slash == file_path)
        return TY_OK;
    int n = snprintf(dir, sizeof dir, "%.*s", (int)(slash - file_path), file_path);
    if (n < 0 || (size_t)n >= sizeof dir) {
        snprintf(err, errlen, "path too long: %s", file_path);
        return TY_EIO;
    }
    /* Create each prefix in turn; existing directories are fine. */
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
            return TY_EIO;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s is not a directory", dir);
        return TY_EIO;
    }
    return TY_OK;
}

ty_err paths_parent_dir(const char *file_path, char *out, size_t len)
{
    const char *slash = strrchr(file_path, '/');
    int n = !slash               ? snprintf(out, len, ".")
            : slash == file_path ? snprintf(out, len, "/")
                                 : snprintf(out, len, "%.*s", (int)(slash - file_path), file_path);
    return n < 0 || (size_t)n >= len ? TY_ETOOLARGE : TY_OK;
}

ty_err paths_self_dir(char *out, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || (size_t)n >= sizeof exe - 1)
        return TY_EIO;
    exe[n] = '\0';
    return paths_parent_dir(exe, out, len) == TY_OK ? TY_OK : TY_EIO;
}
