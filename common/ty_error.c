#include "common/ty_error.h"

static const char *const messages[TY_ERR_COUNT] = {
    [TY_OK] = "ok",
    [TY_ENOMEM] = "out of memory",
    [TY_EINVAL] = "invalid argument",
    [TY_ENOTFOUND] = "not found",
    [TY_ECONFLICT] = "conflicts with the current state",
    [TY_EEXISTS] = "already exists",
    [TY_ETOOLARGE] = "too large",
    [TY_EIO] = "I/O error",
    [TY_EBUSY] = "database busy",
    [TY_ESCHEMA] = "database schema not supported",
    [TY_ESHUTDOWN] = "shutting down",
    [TY_EAUTH] = "authentication required",
    [TY_EFORBIDDEN] = "forbidden",
    [TY_EINTERNAL] = "internal error",
    [TY_EAGAIN] = "temporarily unavailable",
};

const char *ty_strerror(ty_err e)
{
    if ((unsigned)e >= TY_ERR_COUNT || !messages[e])
        return "unknown error";
    return messages[e];
}
