/*
 * conf.h - where the command line finds its server and token, and `trainyard login`'s file.
 *
 * Each of the two comes from the first that has it: the flag (--server URL, --token-file PATH
 * whose first line is the token, "-" for standard input), the environment (TRAINYARD_SERVER,
 * TRAINYARD_TOKEN), then the config file $XDG_CONFIG_HOME/trainyard/config (by default
 * ~/.config/trainyard/config), YAML with `server:` and `token:`. The file holds a secret: it is
 * refused, not read, when its group or others may read or write it (it must be mode 0600).
 */
#ifndef TY_CLI_CONF_H
#define TY_CLI_CONF_H

#include <stddef.h>

#include "common/ty_error.h"

#define CLI_CONF_MAX 2048

typedef struct cli_conf {
    char server[CLI_CONF_MAX]; /* "" when none was found */
    char token[CLI_CONF_MAX];  /* "" when none was found; cleanse with cli_conf_clear() */
} cli_conf;

/* The config file's path into buf. TY_ENOTFOUND when neither XDG_CONFIG_HOME nor HOME is set. */
ty_err cli_conf_path(char *buf, size_t len);

/*
 * Fills *out from server_flag and token_file (either may be NULL), the environment and the
 * config file (read only when one of the two is still missing). TY_EINVAL, TY_EIO or
 * TY_EFORBIDDEN (the file's mode) with a message in err; a missing file is no error.
 */
ty_err cli_conf_resolve(const char *server_flag, const char *token_file, cli_conf *out, char *err,
                        size_t errlen);

/* The first line of path ("-": standard input) into out (len bytes), without its newline. */
ty_err cli_read_token_file(const char *path, char *out, size_t len, char *err, size_t errlen);

/* Writes the config file with server and token, mode 0600 (its directory 0700), replacing any
 * previous one at once (a temporary file renamed over it). */
ty_err cli_conf_save(const char *server, const char *token, char *err, size_t errlen);

void cli_conf_clear(cli_conf *c);

#endif
