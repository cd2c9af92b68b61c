/*
 * paths.h - file-system helpers of the binary.
 */
#ifndef TY_SERVER_PATHS_H
#define TY_SERVER_PATHS_H

#include <stddef.h>

#include "common/ty_error.h"

/*
 * Creates the directory that holds file_path, with its missing parents
 * (mode 0700: it holds the database and the admin token). Nothing to do for a
 * bare file name. TY_EIO with a one-line reason in err on failure.
 */
ty_err paths_make_parent_dir(const char *file_path, char *err, size_t errlen);

/* The directory part of file_path ("." for a bare name) into out. TY_ETOOLARGE. */
ty_err paths_parent_dir(const char *file_path, char *out, size_t len);

/* The directory of the running executable (/proc/self/exe) into out. TY_EIO. */
ty_err paths_self_dir(char *out, size_t len);

#endif
