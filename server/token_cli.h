/*
 * token_cli.h - `trainyard token create|list|revoke`.
 *
 * Without cfg->server the database file is changed directly (store.h; a
 * running server notices within a second). With cfg->server the HTTP API is
 * used (POST /v1/tokens, GET /v1/tokens, DELETE /v1/tokens/{name}) with
 * cfg->token as the bearer token.
 *
 * Output on out: create prints the secret and a newline (the only time it is
 * shown); list prints a header and one line per token: NAME SCOPES CREATED
 * REVOKED ("-" while valid); revoke prints nothing. Errors go to errf as one
 * line "trainyard token: ...".
 */
#ifndef TY_SERVER_TOKEN_CLI_H
#define TY_SERVER_TOKEN_CLI_H

#include <stdio.h>

#include "server/config.h"

/* Runs the action; returns the process exit status (0 success, 1 failure). */
int token_cli_run(const config_token *cfg, FILE *out, FILE *errf);

#endif
