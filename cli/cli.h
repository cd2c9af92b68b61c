/*
 * cli.h - the client commands of `trainyard`: submit, list, get, events, logs, watch, cancel,
 * login. They reach the server over HTTP only (cli/http.h) and never open the database; the
 * server and token come from flags, the environment or the config file (cli/conf.h). Exit
 * statuses are those of cli/http.h (0 ok, 1 failed, 2 usage, 3 not found, 4 auth, 5 unreachable).
 */
#ifndef TY_CLI_CLI_H
#define TY_CLI_CLI_H

#include <stdio.h>

/* Whether name is a command cli_main() runs. */
int cli_has_command(const char *name);

/* Runs one command: argv[0] is its name, the rest its arguments. Returns the exit status. */
int cli_main(int argc, char **argv);

/* The help of the whole command tree, `serve` and `token` included. */
void cli_usage(FILE *f);

#endif
