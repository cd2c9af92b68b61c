/*
 * ty_error.h - the one error enum of the server side of Trainyard.
 *
 * Every function that can fail returns a ty_err; TY_OK is 0. Results come back
 * through out-parameters, and ownership of an out-parameter passes to the caller
 * only when the call returns TY_OK. api/ maps each code to one HTTP status
 * (api_http_status()); ty_strerror() gives a stable, human-readable phrase that
 * never contains user data, CR or LF.
 */
#ifndef TY_ERROR_H
#define TY_ERROR_H

typedef enum ty_err {
    TY_OK = 0,
    TY_ENOMEM,       /* allocation failed */
    TY_EINVAL,       /* invalid argument or input (a bug in the caller, or bad user input) */
    TY_ENOTFOUND,    /* no such object */
    TY_ECONFLICT,    /* the object's state forbids the operation (e.g. cancel a finished job) */
    TY_EEXISTS,      /* an object with that unique key already exists */
    TY_ETOOLARGE,    /* input over its byte or count limit */
    TY_EIO,          /* file system or database I/O failed */
    TY_EBUSY,        /* the database stayed locked past its timeout */
    TY_ESCHEMA,      /* database schema is newer than this binary, or corrupt */
    TY_ESHUTDOWN,    /* the component is shutting down and takes no new work */
    TY_EAUTH,        /* missing or invalid credentials */
    TY_EFORBIDDEN,   /* valid credentials without the needed scope */
    TY_EINTERNAL,    /* an invariant failed: a bug */
    TY_EAGAIN,       /* not possible now (e.g. no free capacity); may succeed later */
    TY_ERR_COUNT
} ty_err;

/* Returns a static string naming the error ("not found", ...). Never NULL. */
const char *ty_strerror(ty_err e);

#endif
