/*
 * conf.c - server and token from flags, environment and the 0600 config file.
 */
#include "cli/conf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/yaml.h"

/* Larger config files are refused: the file holds two short strings. */
#define CONF_FILE_MAX 65536

void cli_conf_clear(cli_conf *c)
{
    OPENSSL_cleanse(c, sizeof *c);
}

ty_err cli_conf_path(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, len, "%s/trainyard/config", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.config/trainyard/config", home);
    else
        return TY_ENOTFOUND;
    return n < 0 || (size_t)n >= len ? TY_ETOOLARGE : TY_OK;
}

static ty_err copy_str(char *dst, size_t len, const char *src, const char *what, char *err,
                       size_t errlen)
{
    size_t n = strlen(src);
    if (n >= len) {
        snprintf(err, errlen, "%s is longer than %zu bytes", what, len - 1);
        return TY_EINVAL;
    }
    memcpy(dst, src, n + 1);
    return TY_OK;
}

ty_err cli_read_token_file(const char *path, char *out, size_t len, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    ty_err e = TY_EIO;
    if (!f) {
        snprintf(err, errlen, "cannot open the token file %s: %s", path, strerror(errno));
        return TY_EIO;
    }
    if (!fgets(out, (int)len, f)) {
        snprintf(err, errlen, "the token file %s is empty", path);
        goto out;
    }
    size_t n = strcspn(out, "\r\n");
    if (out[n] == '\0' && n + 1 == len) {
        snprintf(err, errlen, "the token in %s is too long", path);
        goto out;
    }
    out[n] = '\0';
    if (n == 0) {
        snprintf(err, errlen, "the token file %s is empty", path);
        goto out;
    }
    e = TY_OK;
out:
    if (f != stdin)
        fclose(f);
    if (e)
        OPENSSL_cleanse(out, len);
    return e;
}

/* Reads the config file into out's empty members. A missing file is no error. */
static ty_err read_file(cli_conf *out, char *err, size_t errlen)
{
    char path[4096], *text = NULL;
    struct stat st;
    json_t *doc = NULL;
    ty_err e = TY_EIO;
    int fd;

    if (cli_conf_path(path, sizeof path) != TY_OK)
        return TY_OK;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        if (errno == ENOENT)
            return TY_OK;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return TY_EIO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        goto out;
    }
    if (st.st_mode & 077) {
        snprintf(err, errlen,
                 "%s holds a token and may be read by others (mode %03o); "
                 "refusing it: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 0777), path);
        e = TY_EFORBIDDEN;
        goto out;
    }
    if (st.st_size > CONF_FILE_MAX) {
        snprintf(err, errlen, "%s is larger than %d bytes", path, CONF_FILE_MAX);
        goto out;
    }
    if (!(text = malloc((size_t)st.st_size + 1))) {
        e = TY_ENOMEM;
        goto out;
    }
    ssize_t n = read(fd, text, (size_t)st.st_size);
    if (n < 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    char why[256] = "";
    if (cli_yaml_to_json(text, (size_t)n, &doc, why, sizeof why) != TY_OK || !json_is_object(doc)) {
        snprintf(err, errlen, "%s:%s", path, why[0] ? why : " expected a mapping"); /* :L:C: */
        e = TY_EINVAL;
        goto out;
    }
    const char *server = json_string_value(json_object_get(doc, "server"));
    const char *token = json_string_value(json_object_get(doc, "token"));
    e = TY_OK;
    if (!out->server[0] && server)
        e = copy_str(out->server, sizeof out->server, server, "server", err, errlen);
    if (!e && !out->token[0] && token)
        e = copy_str(out->token, sizeof out->token, token, "token", err, errlen);
out:
    if (doc) {
        json_t *t = json_object_get(doc, "token");
        if (json_is_string(t)) /* the secret leaves no copy behind */
            OPENSSL_cleanse((char *)json_string_value(t), json_string_length(t));
    }
    json_decref(doc);
    if (text) {
        OPENSSL_cleanse(text, (size_t)st.st_size);
        free(text);
    }
    close(fd);
    return e;
}

ty_err cli_conf_resolve(const char *server_flag, const char *token_file, cli_conf *out, char *err,
                        size_t errlen)
{
    const char *env;
    ty_err e;
    memset(out, 0, sizeof *out);
    if (server_flag &&
        (e = copy_str(out->server, sizeof out->server, server_flag, "--server", err, errlen)))
        return e;
    if (token_file &&
        (e = cli_read_token_file(token_file, out->token, sizeof out->token, err, errlen)))
        return e;
    if (!out->server[0] && (env = getenv("TRAINYARD_SERVER")) && *env &&
        (e = copy_str(out->server, sizeof out->server, env, "TRAINYARD_SERVER", err, errlen)))
        return e;
    if (!out->token[0] && (env = getenv("TRAINYARD_TOKEN")) && *env &&
        (e = copy_str(out->token, sizeof out->token, env, "TRAINYARD_TOKEN", err, errlen)))
        return e;
    if (out->server[0] && out->token[0])
        return TY_OK;
    return read_file(out, err, errlen);
}

/* Makes every missing directory of path's parent, mode 0700. */
static ty_err make_parents(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
            return TY_EIO;
        }
        *p = '/';
    }
    return TY_OK;
}

ty_err cli_conf_save(const char *server, const char *token, char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    json_t *doc = NULL;
    FILE *f = NULL;
    ty_err e = TY_EIO;
    int fd = -1;

    if (cli_conf_path(path, sizeof path) != TY_OK) {
        snprintf(err, errlen, "neither XDG_CONFIG_HOME nor HOME is set");
        return TY_EINVAL;
    }
    if ((e = make_parents(path, err, errlen)) != TY_OK)
        return e;
    e = TY_EIO;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0 || !(f = fdopen(fd, "w"))) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (!(doc = json_pack("{s:s, s:s}", "server", server, "token", token))) {
        snprintf(err, errlen, "the server URL or the token is not valid UTF-8");
        e = TY_EINVAL;
        goto out;
    }
    if (cli_json_to_yaml(doc, f) != TY_OK || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (fclose(f) != 0) {
        f = NULL;
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto out;
    }
    e = TY_OK;
out:
    if (doc) {
        json_t *t = json_object_get(doc, "token");
        OPENSSL_cleanse((char *)json_string_value(t), json_string_length(t));
    }
    json_decref(doc);
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    if (e)
        unlink(tmp);
    return e;
}
