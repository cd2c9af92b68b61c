/*
 * rt_fs.c - see rt_fs.h.
 */
#include "runtime/rt_fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/rt_error.h"

ty_err rt_make_dirs(const char *path, const char *what, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) {
        rt_errf(err, errlen, "bad %s \"%s\"", what, path);
        return TY_EINVAL;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            rt_errf(err, errlen, "%s: mkdir %s: %s", what, buf, strerror(errno));
            return TY_EIO;
        }
        buf[i] = c;
    }
    return TY_OK;
}
